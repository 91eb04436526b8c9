/*
 * test_output.c — output files (attn_io.h: attn_output_*): a file under its
 * final name is always complete, a failed or abandoned write leaves the
 * target as it was and no temporary file behind, and targets that are not
 * regular files are written in place, never replaced by a rename.
 * Each case is a regression test of a finding of the reliability audit
 * (issue 15): a rename over /dev/null or a symbolic link replaced them with
 * regular files, /dev/full "succeeded", a FIFO blocked forever.
 */
#define _XOPEN_SOURCE 700 /* mknod, makedev */

#include "testutil.h"

#include "attn.h"
#include "attn_io.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

static const char payload[] = "the chapter's example, written in full";

static void assert_file_holds(const char *path, const char *text) {
    size_t size;
    char *got = test_read_file(path, &size);
    if (!got) fail_msg("%s: cannot read", path);
    if (size != strlen(text) || memcmp(got, text, size) != 0)
        fail_msg("%s holds %zu bytes '%.*s', want '%s'", path, size, (int)size, got, text);
    free(got);
}

static void writes_whole_files_and_leaves_no_temporary(void **state) {
    (void)state;
    const char *path = test_path("whole.bin");
    assert_int_equal(attn_output_write_file(path, payload, strlen(payload)), ATTN_OK);
    assert_file_holds(path, payload);
    assert_int_equal(test_temp_files_in(test_tmpdir()), 0);
    /* The mode is a new file's: 0666 less the umask, not mkstemp's 0600. */
    mode_t mask = umask(0);
    umask(mask);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0666 & ~mask);
}

/* An abandoned or failed write leaves the previous file as it was. */
static void a_discarded_write_changes_nothing(void **state) {
    (void)state;
    const char *path = test_path("keep.bin");
    assert_int_equal(test_write_file(path, "previous", 8), 0);
    attn_output *o;
    assert_int_equal(attn_output_open(path, &o), ATTN_OK);
    assert_int_equal(attn_output_write(o, payload, 5), ATTN_OK);
    assert_non_null(attn_output_temp_path(o));
    assert_int_equal(test_temp_files_in(test_tmpdir()), 1);
    attn_output_discard(o);
    assert_file_holds(path, "previous");
    assert_int_equal(test_temp_files_in(test_tmpdir()), 0);
    attn_output_discard(NULL);
}

/* A symbolic link is followed: the file it names is replaced, the link
 * stays a link.  A dangling link is refused (the file it names is not
 * created behind the user's back). */
static void symbolic_links_are_followed(void **state) {
    (void)state;
    char file[512], link[512], dangling[512];
    snprintf(file, sizeof file, "%s", test_path("target.bin"));
    snprintf(link, sizeof link, "%s", test_path("link.bin"));
    snprintf(dangling, sizeof dangling, "%s", test_path("dangling.bin"));
    assert_int_equal(test_write_file(file, "old", 3), 0);
    assert_int_equal(symlink(file, link), 0);
    assert_int_equal(attn_output_write_file(link, payload, strlen(payload)), ATTN_OK);
    struct stat st;
    assert_int_equal(lstat(link, &st), 0);
    assert_true(S_ISLNK(st.st_mode));
    assert_file_holds(file, payload);
    assert_int_equal(symlink(test_path("nowhere.bin"), dangling), 0);
    assert_int_equal(attn_output_write_file(dangling, payload, 3), ATTN_ERR_IO);
    assert_non_null(strstr(attn_last_error(), "symbolic link to a file that does not exist"));
    assert_false(test_file_exists(test_path("nowhere.bin")));
    assert_int_equal(test_temp_files_in(test_tmpdir()), 0);
}

/* Devices are written in place: /dev/full reports its error instead of a
 * success, and a device stays a device (as root the audit's rename over
 * /dev/null would have replaced the system's /dev/null; this test writes
 * to a node of its own). */
static void devices_are_written_in_place(void **state) {
    (void)state;
    assert_int_equal(attn_output_write_file("/dev/full", payload, strlen(payload)), ATTN_ERR_IO);
    assert_non_null(strstr(attn_last_error(), "/dev/full"));
    assert_non_null(strstr(attn_last_error(), "No space left on device"));
    struct stat st;
    assert_int_equal(stat("/dev/full", &st), 0);
    assert_true(S_ISCHR(st.st_mode));
    const char *null_copy = test_path("null");
    if (mknod(null_copy, S_IFCHR | 0666, makedev(1, 3)) != 0) {
        print_message("mknod: %s: the private /dev/null case needs root, skipped\n", strerror(errno));
        return;
    }
    assert_int_equal(attn_output_write_file(null_copy, payload, strlen(payload)), ATTN_OK);
    assert_int_equal(stat(null_copy, &st), 0);
    assert_true(S_ISCHR(st.st_mode));
    assert_int_equal(test_temp_files_in(test_tmpdir()), 0);
    unlink(null_copy);
}

/* A FIFO without a reader is refused at once (the audit's run blocked
 * forever); with one it is written in place. */
static void fifos_never_block(void **state) {
    (void)state;
    const char *fifo = test_path("pipe");
    assert_int_equal(mkfifo(fifo, 0600), 0);
    assert_int_equal(attn_output_write_file(fifo, payload, 3), ATTN_ERR_IO);
    assert_non_null(strstr(attn_last_error(), "no reader"));
    int reader = open(fifo, O_RDONLY | O_NONBLOCK);
    assert_true(reader >= 0);
    assert_int_equal(attn_output_write_file(fifo, payload, strlen(payload)), ATTN_OK);
    char got[64] = {0};
    assert_int_equal(read(reader, got, sizeof got), (ssize_t)strlen(payload));
    assert_string_equal(got, payload);
    close(reader);
    struct stat st;
    assert_int_equal(stat(fifo, &st), 0);
    assert_true(S_ISFIFO(st.st_mode));
    unlink(fifo);
}

/* What cannot be a file is refused with a message naming it. */
static void directories_and_bad_arguments_are_refused(void **state) {
    (void)state;
    assert_int_equal(attn_output_write_file(test_tmpdir(), payload, 3), ATTN_ERR_IO);
    assert_non_null(strstr(attn_last_error(), "a directory"));
    assert_int_equal(attn_output_write_file("/nonexistent-dir/x.bin", payload, 3), ATTN_ERR_IO);
    assert_non_null(strstr(attn_last_error(), "/nonexistent-dir/x.bin"));
    attn_output *o = NULL;
    assert_int_equal(attn_output_open(NULL, &o), ATTN_ERR_INVALID_ARGUMENT);
    assert_int_equal(attn_output_open("", &o), ATTN_ERR_INVALID_ARGUMENT);
    assert_int_equal(attn_output_write(NULL, payload, 1), ATTN_ERR_INVALID_ARGUMENT);
    assert_int_equal(attn_output_commit(NULL), ATTN_ERR_INVALID_ARGUMENT);
}

/* attn_output_discard_all, what a signal handler calls, removes the
 * temporaries of every output in flight and touches no target. */
static void discard_all_removes_every_temporary(void **state) {
    (void)state;
    const char *a = test_path("a.bin"), *b = test_path("b.bin");
    assert_int_equal(test_write_file(a, "previous", 8), 0);
    attn_output *oa, *ob;
    assert_int_equal(attn_output_open(a, &oa), ATTN_OK);
    assert_int_equal(attn_output_open(b, &ob), ATTN_OK);
    assert_int_equal(attn_output_write(oa, payload, 4), ATTN_OK);
    assert_int_equal(test_temp_files_in(test_tmpdir()), 2);
    attn_output_discard_all();
    assert_int_equal(test_temp_files_in(test_tmpdir()), 0);
    assert_file_holds(a, "previous");
    assert_false(test_file_exists(b));
    attn_output_discard(oa);
    attn_output_discard(ob);
}

/* The ring sizes its temporary file and lets other processes fill it. */
static void resize_for_writers_of_parts(void **state) {
    (void)state;
    const char *path = test_path("parts.bin");
    attn_output *o;
    assert_int_equal(attn_output_open(path, &o), ATTN_OK);
    assert_int_equal(attn_output_resize(o, 4096), ATTN_OK);
    int fd = open(attn_output_temp_path(o), O_WRONLY);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, "end", 3, 4093), 3);
    close(fd);
    assert_int_equal(attn_output_commit(o), ATTN_OK);
    size_t size;
    char *got = test_read_file(path, &size);
    assert_int_equal(size, 4096);
    assert_memory_equal(got + 4093, "end", 3);
    assert_int_equal(got[0], 0);
    free(got);
    assert_int_equal(attn_output_open("/dev/null", &o), ATTN_OK);
    assert_null(attn_output_temp_path(o));
    assert_int_equal(attn_output_resize(o, 16), ATTN_ERR_INVALID_ARGUMENT);
    attn_output_discard(o);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(writes_whole_files_and_leaves_no_temporary),
        cmocka_unit_test(a_discarded_write_changes_nothing),
        cmocka_unit_test(symbolic_links_are_followed),
        cmocka_unit_test(devices_are_written_in_place),
        cmocka_unit_test(fifos_never_block),
        cmocka_unit_test(directories_and_bad_arguments_are_refused),
        cmocka_unit_test(discard_all_removes_every_temporary),
        cmocka_unit_test(resize_for_writers_of_parts),
    };
    return cmocka_run_group_tests(tests, NULL, test_group_teardown);
}
