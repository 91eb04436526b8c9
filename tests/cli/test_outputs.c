/*
 * test_outputs.c — the attn program never destroys a user's files: the
 * data-loss findings of the reliability audit (issue 15), each kept as a
 * regression test.
 *   - `attn sdpa -q q.npy -o q.npy --lse /nonexistent/x` deleted the INPUT
 *     q.npy: an output that is an input (or another output) is refused
 *     before anything is read or written;
 *   - a later output's failure deleted the earlier outputs, and with them
 *     the user's previous good files: outputs are written as a set, so a
 *     failure leaves every target as it was;
 *   - `-o /dev/stdout` printed nothing, `-o /dev/full` reported success;
 *   - an interrupted run left its .tmp files behind.
 */
#include "testutil.h"

#include "attn.h"
#include "attn_io.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void save_f32(const char *path, int ndim, const int64_t *shape, const float *data) {
    attn_array a = {ATTN_F32, ndim, {0}, 1, (void *)data};
    for (int d = 0; d < ndim; d++) a.count *= (a.shape[d] = shape[d]);
    if (attn_npy_save(path, &a)) fail_msg("saving %s: %s", path, attn_last_error());
}

/* q, k, v of the chapter's size in the temporary directory, named qN, kN, vN. */
static void make_inputs(int64_t L, int64_t H, int64_t D) {
    const int64_t shape[3] = {L, H, D};
    float *x = malloc(sizeof(float) * (size_t)(L * H * D));
    test_rng r;
    test_rng_seed(&r, 7);
    test_fill_normal(&r, x, L * H * D, 1.0);
    save_f32(test_path("q.npy"), 3, shape, x);
    save_f32(test_path("k.npy"), 3, shape, x);
    save_f32(test_path("v.npy"), 3, shape, x);
    free(x);
}

static int temp_files_in(const char *dir) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) n += strstr(e->d_name, ".tmp-") != NULL;
    closedir(d);
    return n;
}

/* The bytes of a file, malloc'd (fails the test if it is missing). */
static char *contents(const char *path, size_t *size) {
    char *data = test_read_file(path, size);
    if (!data) fail_msg("%s is missing", path);
    return data;
}

static void outputs_that_are_inputs_are_refused(void **state) {
    (void)state;
    make_inputs(3, 1, 2);
    char q[512];
    snprintf(q, sizeof q, "%s", test_path("q.npy"));
    size_t before_size, after_size;
    char *before = contents(q, &before_size), *out = NULL;
    /* The audit's command, which used to delete q.npy. */
    int rc = test_run_cli(&out, "sdpa -q %s -k %s -v %s -o %s --lse /nonexistent/x.npy", q, test_path("k.npy"),
                          test_path("v.npy"), q);
    if (rc != 2 || !strstr(out, "is the input")) fail_msg("exit %d: %s", rc, out);
    free(out);
    /* The same file through a symbolic link. */
    const char *alias = test_path("alias.npy");
    assert_int_equal(symlink(q, alias), 0);
    rc = test_run_cli(&out, "sdpa -q %s -k %s -v %s -o %s", q, test_path("k.npy"), test_path("v.npy"), alias);
    if (rc != 2 || !strstr(out, "is the input")) fail_msg("exit %d: %s", rc, out);
    free(out);
    char *after = contents(q, &after_size);
    assert_int_equal(before_size, after_size);
    assert_memory_equal(before, after, before_size);
    free(before);
    free(after);
    /* Two outputs naming one file would keep only the last. */
    rc = test_run_cli(&out, "sdpa -q %s -k %s -v %s -o %s --weights %s", q, test_path("k.npy"), test_path("v.npy"),
                      test_path("same.npy"), test_path("same.npy"));
    if (rc != 2 || !strstr(out, "two outputs name the same file")) fail_msg("exit %d: %s", rc, out);
    free(out);
    assert_false(test_file_exists(test_path("same.npy")));
    /* Devices are exempt: both to /dev/null is fine. */
    rc = test_run_cli(&out, "sdpa -q %s -k %s -v %s -o /dev/null --weights /dev/null", q, test_path("k.npy"),
                      test_path("v.npy"));
    if (rc != 0) fail_msg("exit %d: %s", rc, out);
    free(out);
}

/* A later output that fails leaves the earlier targets as they were: the
 * user's previous good o.npy survives, and no temporary file remains. */
static void a_failed_output_keeps_every_previous_file(void **state) {
    (void)state;
    make_inputs(3, 1, 2);
    const char *o = test_path("o_keep.npy");
    assert_int_equal(test_write_file(o, "a previous good result", 22), 0);
    char *out = NULL;
    int rc = test_run_cli(&out, "sdpa -q %s -k %s -v %s -o %s --lse /nonexistent-dir/lse.npy", test_path("q.npy"),
                          test_path("k.npy"), test_path("v.npy"), o);
    if (rc != 1 || !strstr(out, "/nonexistent-dir/lse.npy")) fail_msg("exit %d: %s", rc, out);
    free(out);
    size_t size;
    char *kept = contents(o, &size);
    assert_int_equal(size, 22);
    assert_memory_equal(kept, "a previous good result", 22);
    free(kept);
    assert_int_equal(temp_files_in(test_tmpdir()), 0);
}

/* Special targets: /dev/stdout gets the array (into a pipe or a file),
 * /dev/full an error. */
static void devices_and_standard_output(void **state) {
    (void)state;
    make_inputs(3, 1, 2);
    char *out = NULL;
    const char *piped = test_path("piped.npy"), *redirected = test_path("redirected.npy");
    int rc = test_run_cli(&out, "sdpa -q %s -k %s -v %s -o /dev/stdout | cat > %s", test_path("q.npy"),
                          test_path("k.npy"), test_path("v.npy"), piped);
    if (rc != 0) fail_msg("exit %d: %s", rc, out);
    free(out);
    rc = test_run_cli(&out, "sdpa -q %s -k %s -v %s -o /dev/stdout > %s", test_path("q.npy"), test_path("k.npy"),
                      test_path("v.npy"), redirected);
    if (rc != 0) fail_msg("exit %d: %s", rc, out);
    free(out);
    const char *written[2] = {piped, redirected};
    for (int i = 0; i < 2; i++) {
        attn_array a;
        if (attn_npy_load(written[i], &a)) fail_msg("%s: %s", written[i], attn_last_error());
        assert_int_equal(a.ndim, 3);
        assert_int_equal(a.shape[0], 3);
        assert_int_equal(a.shape[2], 2);
        attn_array_free(&a);
    }
    rc = test_run_cli(&out, "sdpa -q %s -k %s -v %s -o /dev/full", test_path("q.npy"), test_path("k.npy"),
                      test_path("v.npy"));
    if (rc != 1 || !strstr(out, "No space left on device")) fail_msg("exit %d: %s", rc, out);
    free(out);
}

/* Interrupted while writing its outputs, the program removes its
 * temporary files and leaves no target.  To catch it in the middle, the
 * second output is a FIFO whose reader never reads: the first output's
 * temporary file is complete and the second write blocks, so SIGINT (and
 * then SIGTERM) arrives at a known point. */
static void interrupted_runs_leave_no_temporary(void **state) {
    (void)state;
    make_inputs(128, 2, 8); /* weights [2, 128, 128]: 128 KiB, more than a pipe holds */
    const int signals[2] = {SIGINT, SIGTERM};
    for (int s = 0; s < 2; s++) {
        char fifo[512], o[512];
        snprintf(fifo, sizeof fifo, "%s", test_path(s ? "w_term.fifo" : "w_int.fifo"));
        snprintf(o, sizeof o, "%s", test_path(s ? "o_term.npy" : "o_int.npy"));
        assert_int_equal(mkfifo(fifo, 0600), 0);
        int reader = open(fifo, O_RDONLY | O_NONBLOCK);
        assert_true(reader >= 0);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            int devnull = open("/dev/null", O_WRONLY);
            dup2(devnull, 2);
            execl(ATTN_CLI_PATH, ATTN_CLI_PATH, "sdpa", "-q", test_path("q.npy"), "-k", test_path("k.npy"), "-v",
                  test_path("v.npy"), "-o", o, "--weights", fifo, (char *)NULL);
            _exit(127);
        }
        /* Wait for the first output's temporary file (5 s at the most). */
        bool seen = false;
        for (int tries = 0; tries < 500 && !seen; tries++) {
            seen = temp_files_in(test_tmpdir()) > 0;
            if (!seen) nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
        }
        if (!seen) {
            kill(pid, SIGKILL);
            fail_msg("the run never started writing its outputs");
        }
        nanosleep(&(struct timespec){0, 50 * 1000 * 1000}, NULL); /* it is blocked on the FIFO */
        kill(pid, signals[s]);
        int status;
        assert_int_equal(waitpid(pid, &status, 0), pid);
        assert_true(WIFSIGNALED(status) && WTERMSIG(status) == signals[s]);
        close(reader);
        assert_int_equal(temp_files_in(test_tmpdir()), 0);
        assert_false(test_file_exists(o));
        unlink(fifo);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(outputs_that_are_inputs_are_refused),
        cmocka_unit_test(a_failed_output_keeps_every_previous_file),
        cmocka_unit_test(devices_and_standard_output),
        cmocka_unit_test(interrupted_runs_leave_no_temporary),
    };
    return cmocka_run_group_tests(tests, NULL, test_group_teardown);
}
