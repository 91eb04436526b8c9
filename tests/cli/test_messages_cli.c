/*
 * test_messages_cli.c — issue 33's sixth finding: messages name the file
 * (or the archive and the member), never an internal function, and come
 * before the work they stop.
 *   - `model run --ids 999999` printed "attn_decoder_forward: token 0 is id
 *     999999, ..." and no file: now the flag, the id and the model;
 *   - `demo --figures DIR` on a directory it cannot write printed the whole
 *     walk-through before failing: now nothing on stdout, the directory named;
 *   - `tokenize --file DIR` said "read error": now what DIR is.
 * (An empty .npz member: tests/io/test_npz.c, test_empty_member_is_named.)
 */
#include "testutil.h"

#include "attn_viz.h"

#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define LLAMA ATTN_SOURCE_DIR "/tests/fixtures/tiny_models/llama/llama.gguf"

/* attn args: exit status want, and the output holds every string of
 * wanted (NULL-terminated) and none of unwanted. */
static void expect(int want, const char *args, const char *const *wanted, const char *const *unwanted) {
    char *out = NULL;
    const int rc = test_run_cli(&out, "%s", args);
    bool ok = rc == want;
    for (int i = 0; wanted[i]; i++) ok = ok && strstr(out, wanted[i]);
    for (int i = 0; unwanted[i]; i++) ok = ok && !strstr(out, unwanted[i]);
    if (!ok) fail_msg("attn %s: exit %d (expected %d), output:\n%s", args, rc, want, out);
    free(out);
}

static const char *const no_function[] = {"attn_decoder", "attn_tokenizer", "attn_npz", "read error", NULL};

static void model_run_names_the_flag_and_the_model(void **state) {
    (void)state;
    const char *wanted[] = {"--ids", "999999", LLAMA, "vocabulary", NULL};
    expect(1, "model run --model " LLAMA " --ids 1,999999", wanted, no_function);
}

static char stdout_file[512];

static void stdout_to_file(void *arg) {
    (void)arg;
    const int fd = open(stdout_file, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || dup2(fd, STDOUT_FILENO) < 0) _exit(127);
    close(fd);
}

/* Nothing of the walk-through on stdout: the directory is checked first. */
static void demo_figures_checks_the_directory_first(void **state) {
    (void)state;
    if (!attn_pictures_available()) {
        print_message("skipped: this build draws no pictures (no cairo), so --figures is refused as such\n");
        skip();
    }
    const char *dir;
    char ro[512];
    if (geteuid() != 0) { /* a directory without write permission */
        snprintf(ro, sizeof ro, "%s", test_path("read-only"));
        assert_int_equal(mkdir(ro, 0555), 0);
        dir = ro;
    } else { /* root writes anywhere permissions say no: sysfs refuses new files */
        struct stat st;
        if (stat("/sys", &st) != 0 || !S_ISDIR(st.st_mode)) {
            print_message("skipped: running as root and no /sys to stand for a directory that cannot be written\n");
            skip();
        }
        dir = "/sys";
    }
    /* stdout to a file of its own; the captured output is stderr alone */
    snprintf(stdout_file, sizeof stdout_file, "%s", test_path("demo-stdout.txt"));
    const char *file = test_path("a-file");
    assert_int_equal(test_write_file(file, "x", 1), 0);
    const struct {
        const char *dir, *says;
    } cases[] = {{dir, "cannot write in the directory"}, {file, "not a directory"}};
    for (int i = 0; i < 2; i++) {
        const char *args[] = {"demo", "--figures", cases[i].dir, NULL};
        test_child c;
        test_child_run_cli(&c, args, 60, stdout_to_file, NULL);
        size_t printed = 0;
        free(test_read_file(stdout_file, &printed));
        if (c.status != 1 || printed || !strstr(c.output, cases[i].says) || !strstr(c.output, cases[i].dir))
            fail_msg("attn demo --figures %s: exit %d, %zu bytes of the walk-through printed; message:\n%s",
                     cases[i].dir, c.status, printed, c.output);
        test_child_free(&c);
    }
}

static void tokenize_file_names_a_directory(void **state) {
    (void)state;
    char args[600];
    snprintf(args, sizeof args, "tokenize --model unused.gguf --file %s", test_tmpdir());
    const char *wanted[] = {"--file", test_tmpdir(), "it is a directory", NULL};
    expect(1, args, wanted, no_function);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(model_run_names_the_flag_and_the_model),
        cmocka_unit_test(demo_figures_checks_the_directory_first),
        cmocka_unit_test(tokenize_file_names_a_directory),
    };
    return cmocka_run_group_tests(tests, NULL, test_group_teardown);
}
