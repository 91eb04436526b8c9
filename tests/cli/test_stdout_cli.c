/*
 * test_stdout_cli.c — a failed write to standard output is an error:
 * exit status 1 and a message naming "standard output" (tools/cli/
 * cli_stdout.h).  Issue 33's third finding: `attn model generate ... >
 * file-on-a-full-disk` exited 0 with its text cut at 4,096 bytes, and
 * tokenize, model run, model info and npz list exited 0 on /dev/full or a
 * closed stdout.
 *
 * Every subcommand that prints to stdout (trace's list of the hooks it
 * wrote among them) runs twice: stdout on /dev/full
 * (every write fails with ENOSPC) and stdout closed (EBADF: the program
 * reserves the descriptor, so that no file it opens takes it).  With Gemma
 * 3 270M present, model generate too, which must stop at its first token
 * (the stream is checked chunk by chunk), not after --max-tokens.
 */
#include "testutil.h"
#include "cli_files.h"
#include "models.h"

#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FIXTURES ATTN_SOURCE_DIR "/tests/fixtures"

static void stdout_on_dev_full(void *arg) {
    (void)arg;
    int fd = open("/dev/full", O_WRONLY);
    if (fd < 0 || dup2(fd, STDOUT_FILENO) < 0) _exit(127);
    close(fd);
}

static void stdout_closed(void *arg) {
    (void)arg;
    close(STDOUT_FILENO);
}

/* attn args on both faults: exit 1, "standard output" named, and the
 * reason: "No space left on device" (or, when stdio dropped what failed,
 * "a write to it failed"), "Bad file descriptor".  Returns the output of
 * the /dev/full run (malloc'd) for further checks. */
static char *expect_stdout_error(const char *const *args, double timeout_s) {
    static const struct {
        void (*setup)(void *);
        const char *reason, *or_reason;
    } faults[] = {{stdout_on_dev_full, "No space left on device", "a write to it failed"},
                  {stdout_closed, "Bad file descriptor", "Bad file descriptor"}};
    char line[1024] = "";
    for (int i = 0; args[i]; i++) snprintf(line + strlen(line), sizeof line - strlen(line), " %s", args[i]);
    char *first = NULL;
    for (size_t f = 0; f < sizeof faults / sizeof faults[0]; f++) {
        test_child c;
        test_child_run_cli(&c, args, timeout_s, faults[f].setup, NULL);
        if (c.timed_out || c.status != 1 || !strstr(c.output, "cannot write standard output") ||
            (!strstr(c.output, faults[f].reason) && !strstr(c.output, faults[f].or_reason)))
            fail_msg("attn%s with stdout %s: exit %d (expected 1 naming standard output: %s); output:\n%s", line,
                     f ? "closed" : "on /dev/full", c.status, faults[f].reason, c.output);
        if (!first) first = strdup(c.output);
        test_child_free(&c);
    }
    return first;
}

static void every_printing_subcommand(void **state) {
    (void)state;
    const char *llama = FIXTURES "/tiny_models/llama/llama.gguf";
    const char *npz = FIXTURES "/npz/numpy_stored.npz";
    /* trace lists the hooks it wrote on stdout: bare attention on q = k = v */
    static const float qkv[4 * 2 * 8] = {0.5f, -0.25f, 1.0f, 0.125f};
    const int64_t shape[3] = {4, 2, 8};
    char q[512], dir[512];
    snprintf(q, sizeof q, "%s", test_path("qkv.npy"));
    snprintf(dir, sizeof dir, "%s", test_path("hooks"));
    test_save_f32(q, 3, shape, qkv);
    const char *const cases[][12] = {
        {"--version"},
        {"--help"},
        {"sdpa", "--help"},
        {"demo"},
        {"train", "--steps", "2"},
        {"paths", "--chapter"},
        {"nullspace", "--chapter"},
        {"bench", "--list"},
        {"model", "info", "--model", llama},
        {"model", "run", "--model", llama, "--ids", "1,2,3"},
        {"npz", "list", npz},
        {"trace", "-q", q, "-k", q, "-v", q, "--dir", dir},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) free(expect_stdout_error(cases[i], 60));
}

/* tokenize and detokenize on the tiny GPT-2 tokenizer.json of the
 * fixtures (a build without cJSON reads none: skipped). */
static void tokenizers(void **state) {
    (void)state;
    const char *tok = FIXTURES "/tokenizer/tiny-gpt2.tokenizer.json";
    char *probe = NULL;
    const int rc = test_run_cli(&probe, "tokenize --model %s --text hi --ids", tok);
    const bool readable = rc == 0;
    if (!readable) print_message("skipped: %s cannot be read by this build:\n%s\n", tok, probe);
    free(probe);
    if (!readable) skip();
    const char *const cases[][8] = {
        {"tokenize", "--model", tok, "--text", "hello world"},
        {"detokenize", "--model", tok, "259", "360", "428"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) free(expect_stdout_error(cases[i], 60));
}

/* The stream: generate stops at its first token on a full disk. */
static void generate_stops_at_the_first_failed_chunk(void **state) {
    (void)state;
    const char *gemma = test_model_or_skip(TEST_GEMMA_GGUF);
    const char *args[] = {"model", "generate", "--model", gemma, "--text", "这台电脑来自苹果", "--max-tokens",
                          UNDER_SANITIZER ? "4" : "24", "--no-stop", NULL};
    char *out = expect_stdout_error(args, 600);
    if (!strstr(out, "1 generated, stopped by an error"))
        fail_msg("model generate on /dev/full went on past its first token:\n%s", out);
    free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_printing_subcommand),
        cmocka_unit_test(tokenizers),
        cmocka_unit_test(generate_stops_at_the_first_failed_chunk),
    };
    return cmocka_run_group_tests(tests, NULL, test_group_teardown);
}
