/*
 * test_inputs_cli.c — every file the attn program reads whole goes through
 * one bounded reader (tools/cli/cli_input.h): a regular file only, a cap
 * per kind, FIFOs and devices refused at once, standard input capped too.
 * Issue 33's first finding: `attn tokenize --file /dev/zero` (and
 * detokenize, and `--file -` fed from /dev/zero) grew to 10 GB; a FIFO
 * without a writer blocked forever; a directory gave "read error".
 *
 * For each subcommand and flag that takes such a file — tokenize --file,
 * detokenize --file, map and report --tokens/--key-tokens @FILE, map and
 * report --text @FILE — the program is run on /dev/zero, a FIFO nobody
 * writes, a directory and a (sparse) file one byte over the cap: each must
 * end within seconds with exit status 1 and a message naming the flag, the
 * file and what it is, and stay small.  Standard input from /dev/zero is
 * cut at the cap; a pipe on standard input still works.
 */
#include "testutil.h"

#include "attn_viz.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MIB ((off_t)1 << 20)
/* The peak memory a refused read may take (the cap of 64 MiB read from a
 * pipe once, plus the program; ASan's shadow included). */
#define MAX_RSS_KB (400L * 1024)

static const char *fifo_path, *small_text;

static int setup(void **state) {
    (void)state;
    test_launcher_start();
    fifo_path = strdup(test_path("nobody-writes.fifo"));
    if (mkfifo(fifo_path, 0600) != 0) fail_msg("mkfifo: %s", strerror(errno));
    small_text = strdup(test_path("small.txt"));
    assert_int_equal(test_write_file(small_text, "hello world\n", 12), 0);
    return 0;
}

/* A sparse file of `bytes` bytes (no disk used). */
static const char *sparse_file(const char *name, off_t bytes) {
    const char *path = test_path(name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, bytes), 0);
    close(fd);
    return path;
}

/* Runs attn with args (NULL-terminated); requires exit 1 within 30 s, a
 * message holding every one of want (NULL-terminated), and a small peak. */
static void expect_refused(const char *const *args, void (*child_setup)(void *), const char *const *want) {
    test_child c;
    test_child_run_cli(&c, args, 30, child_setup, NULL);
    char line[512] = "";
    for (int i = 0; args[i]; i++) snprintf(line + strlen(line), sizeof line - strlen(line), " %s", args[i]);
    if (c.timed_out) fail_msg("attn%s: still running after 30 s (killed)", line);
    bool has_all = true;
    for (int i = 0; want[i]; i++) has_all = has_all && strstr(c.output, want[i]);
    if (c.status != 1 || !has_all || strstr(c.output, "read error"))
        fail_msg("attn%s: exit %d, expected 1 and a message with '%s'...; output:\n%s", line, c.status, want[0],
                 c.output);
    if (!UNDER_SANITIZER && c.maxrss_kb > MAX_RSS_KB)
        fail_msg("attn%s: peak RSS %ld KiB, more than %ld", line, c.maxrss_kb, MAX_RSS_KB);
    test_child_free(&c);
}

/* The four hostile files in place of the file of `flag` (prefix "@" for
 * the picture commands' @FILE); cap_mib: the kind's cap. */
static void hostile_files(const char *const *before, const char *flag, const char *prefix, const char *const *after,
                          int cap_mib) {
    char name[64];
    snprintf(name, sizeof name, "over-%d-MiB.txt", cap_mib);
    const char *over = strdup(sparse_file(name, cap_mib * MIB + 1));
    const struct {
        const char *path, *what;
    } cases[] = {
        {"/dev/zero", "character device"},
        {fifo_path, "FIFO"},
        {test_tmpdir(), "directory"},
        {over, "more than"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *args[24];
        int n = 0;
        for (int j = 0; before[j]; j++) args[n++] = before[j];
        char value[1024];
        snprintf(value, sizeof value, "%s%s", prefix, cases[i].path);
        args[n++] = flag;
        args[n++] = value;
        for (int j = 0; after[j]; j++) args[n++] = after[j];
        args[n] = NULL;
        const char *want[] = {flag, cases[i].path, cases[i].what, NULL};
        expect_refused(args, NULL, want);
    }
    free((void *)over);
}

static void stdin_from_dev_zero(void *arg) {
    (void)arg;
    int fd = open("/dev/zero", O_RDONLY);
    if (fd < 0 || dup2(fd, STDIN_FILENO) < 0) _exit(127);
    close(fd);
}

static const char *const none[] = {NULL};

static void tokenize_file(void **state) {
    (void)state;
    const char *before[] = {"tokenize", "--model", "unused.gguf", NULL};
    hostile_files(before, "--file", "", none, 64);
    const char *args[] = {"tokenize", "--model", "unused.gguf", "--file", "-", NULL};
    const char *want[] = {"--file -", "standard input holds more than 64 MiB", NULL};
    expect_refused(args, stdin_from_dev_zero, want);
}

static void detokenize_file(void **state) {
    (void)state;
    const char *before[] = {"detokenize", "--model", "unused.gguf", NULL};
    hostile_files(before, "--file", "", none, 64);
    const char *args[] = {"detokenize", "--model", "unused.gguf", "--file", "-", NULL};
    const char *want[] = {"--file -", "standard input holds more than 64 MiB", NULL};
    expect_refused(args, stdin_from_dev_zero, want);
}

/* A pipe on standard input is still read (the cap is not a refusal of
 * pipes): the tiny GPT-2 tokenizer of the fixtures on "hello world\n". */
static void tokenize_reads_a_pipe(void **state) {
    (void)state;
    const char *model = ATTN_SOURCE_DIR "/tests/fixtures/tokenizer/tiny-gpt2.tokenizer.json";
    char *piped = NULL, *direct = NULL;
    int rc_pipe = test_run_cli(&piped, "tokenize --model %s --ids --file - < %s", model, small_text);
    int rc_direct = test_run_cli(&direct, "tokenize --model %s --ids --file %s", model, small_text);
    if (rc_direct != 0 && strstr(direct, "cJSON")) {
        print_message("skipped: this build reads no tokenizer.json (no cJSON)\n");
    } else {
        if (rc_pipe != 0 || rc_direct != 0 || strcmp(piped, direct) != 0)
            fail_msg("a pipe (exit %d):\n%s\nthe file (exit %d):\n%s", rc_pipe, piped, rc_direct, direct);
    }
    free(piped);
    free(direct);
}

static void map_files(void **state) {
    (void)state;
    if (!attn_pictures_available()) {
        print_message("skipped: this build draws no pictures (no cairo)\n");
        return;
    }
    char out[512];
    snprintf(out, sizeof out, "%s", test_path("map.png"));
    const char *before[] = {"map", "--weights", "unused.npy", "-o", out, NULL};
    hostile_files(before, "--tokens", "@", none, 64);
    hostile_files(before, "--key-tokens", "@", none, 64);
    const char *model[] = {"map", "--model", "unused.gguf", "-o", out, NULL};
    hostile_files(model, "--text", "@", none, 16);
}

static void report_files(void **state) {
    (void)state;
    if (!attn_pictures_available()) {
        print_message("skipped: this build draws no pictures (no cairo)\n");
        return;
    }
    char out[512];
    snprintf(out, sizeof out, "%s", test_path("report.html"));
    const char *before[] = {"report", "--weights", "unused.npy", "--html", out, NULL};
    hostile_files(before, "--tokens", "@", none, 64);
    const char *model[] = {"report", "--model", "unused.gguf", "--html", out, NULL};
    hostile_files(model, "--text", "@", none, 16);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(tokenize_file),
        cmocka_unit_test(detokenize_file),
        cmocka_unit_test(tokenize_reads_a_pipe),
        cmocka_unit_test(map_files),
        cmocka_unit_test(report_files),
    };
    return cmocka_run_group_tests(tests, setup, test_group_teardown);
}
