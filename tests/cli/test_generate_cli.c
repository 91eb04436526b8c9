/*
 * test_generate_cli.c — `attn model generate`: the help, the usage errors
 * (exit 2, each naming the flag), a file that is not a model (exit 1, naming
 * the file), and with Gemma 3 270M present (skipped with a message when
 * absent; it is the quicker of the two real models):
 *   - greedy, 20 tokens, --no-stop: stdout is exactly transformers' greedy
 *     continuation of "这台电脑来自苹果" decoded by transformers' tokenizer
 *     (tests/fixtures/generate/README.txt, scripts/models/make_generate_fixtures.py),
 *     and stderr reports prefill and decode tokens/s;
 *   - the same seed twice gives the same sampled text, and --top-k 1 at
 *     temperature 5 gives the greedy text;
 *   - a character split over byte-fallback tokens: "𝔘" is four tokens
 *     <0xF0> <0x9D> <0x94> <0x98> in Gemma's vocabulary; after eight of them
 *     the model continues with 𝔢 (four tokens) and then the first three
 *     bytes of another: printed whole, and the unfinished end as one U+FFFD.
 *   - a prompt and --max-tokens beyond the model's context: refused, naming
 *     the numbers and --allow-beyond-context.
 * Under a sanitizer only one short greedy run (6 tokens) is made.
 */
#include "testutil.h"
#include "models.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define GEMMA TEST_GEMMA_GGUF
/* transformers' greedy 20 tokens after "这台电脑来自苹果", and the text of its first 6. */
#define GREEDY_20 "，是苹果的最新旗舰机，它搭载了最新的A1芯片，在性能方面表现"
#define GREEDY_6 "，是苹果的最新旗舰"

static void expect(int want_status, const char *want_text, const char *args) {
    char *out = NULL;
    const int status = test_run_cli(&out, "model generate %s", args);
    if (status != want_status || !strstr(out, want_text))
        fail_msg("attn model generate %s: exit %d (expected %d), output:\n%s\n(expected it to contain '%s')", args,
                 status, want_status, out, want_text);
    free(out);
}

static void test_help_and_usage_errors(void **state) {
    (void)state;
    expect(0, "usage: attn model generate --model MODEL --text TEXT", "--help");
    expect(0, "--kv-dtype", "-h");
    /* Every flag the parser takes is in the help (test_cli_matrix checks
     * this for the subcommands; generate is an action of one). */
    assert_int_equal(test_cli_flags_in_help("model generate"), 26); /* with --weights, --precision and --kv-cache */
    expect(2, "--model MODEL is required", "--text hi");
    expect(2, "--text TEXT is required", "--model m.gguf");
    expect(2, "--text needs a value", "--model m.gguf --text ''");
    expect(2, "--max-tokens", "--model m.gguf --text hi --max-tokens 0");
    expect(2, "--temperature", "--model m.gguf --text hi --temperature -1");
    expect(2, "--top-k", "--model m.gguf --text hi --top-k -3");
    expect(2, "--top-p is 0", "--model m.gguf --text hi --top-p 0");
    expect(2, "--top-p", "--model m.gguf --text hi --top-p 1.5");
    expect(2, "--seed", "--model m.gguf --text hi --seed x");
    expect(2, "--kv-dtype must be f32, f16, bf16, q8_0 or fp8, got 'f8'", "--model m.gguf --text hi --kv-dtype f8");
    expect(2, "--kv-dtype must be f32, f16, bf16, q8_0 or fp8, got 'q4'", "--model m.gguf --text hi --kv-dtype bf16:q4");
    expect(2, "float32 values beside narrower keys", "--model m.gguf --text hi --kv-cache q8_0:f32");
    expect(2, "contradict", "--model m.gguf --text hi --stop-at-eos --no-stop");
    expect(2, "--weights is 'f16': stored or f32", "--model m.gguf --text hi --weights f16");
    expect(2, "--precision is 'half': exact or fast", "--model m.gguf --text hi --precision half");
    expect(0, "--weights W", "--help");
    expect(2, "--max-tokens", "--model m.gguf --text hi --max-tokens");
    expect(2, "unknown", "--model m.gguf --text hi --temprature 1");
    expect(2, "generate", "extra --model m.gguf --text hi");
    expect(2, "--system applies with --chat", "--model m.gguf --text hi --system S");
    expect(2, "--stop: at most 16", "--model m.gguf --text hi --stop 1 --stop 2 --stop 3 --stop 4 --stop 5 --stop 6 "
                                    "--stop 7 --stop 8 --stop 9 --stop 10 --stop 11 --stop 12 --stop 13 --stop 14 "
                                    "--stop 15 --stop 16 --stop 17");
}

static void test_data_errors(void **state) {
    (void)state;
    char args[1024];
    snprintf(args, sizeof args, "--model %s/absent.gguf --text hi", test_tmpdir());
    expect(1, "absent.gguf", args);
    const char *junk = test_path("junk.gguf");
    FILE *f = fopen(junk, "wb");
    assert_non_null(f);
    fputs("this is not a GGUF file at all, just text", f);
    fclose(f);
    snprintf(args, sizeof args, "--model %s --text hi", junk);
    expect(1, "junk.gguf", args);
}

static const char *gemma;

/* stdout of `attn model generate --model GEMMA args` (stderr into *err if
 * not NULL), checking exit 0. */
static char *run(const char *args, char **err) {
    char *out = NULL, *log = NULL;
    const char *err_path = test_path("stderr.txt");
    /* test_run_cli appends 2>&1: it applies to the (exit $?) after ours,
     * which passes the program's status on. */
    const int status = test_run_cli(&out, "model generate --model '%s' %s 2>'%s'; (exit $?)", gemma, args, err_path);
    FILE *f = fopen(err_path, "rb");
    if (f) {
        log = calloc(1, 4096);
        if (fread(log, 1, 4095, f) == 0) log[0] = '\0';
        fclose(f);
    }
    if (status != 0) fail_msg("exit %d: %s\n%s", status, out, log ? log : "");
    if (err) *err = log;
    else free(log);
    return out;
}

static void test_gemma_runs(void **state) {
    (void)state;
    gemma = test_model_or_skip(GEMMA);
    assert_memory_equal(GREEDY_20, GREEDY_6, strlen(GREEDY_6));
    if (UNDER_SANITIZER) {
        /* The program is ~20x slower there: one short greedy run. */
        char *six = run("--text '这台电脑来自苹果' --max-tokens 6", NULL);
        assert_string_equal(six, GREEDY_6 "\n");
        free(six);
        return;
    }
    char *err;
    char *out = run("--text '这台电脑来自苹果' --max-tokens 20 --no-stop", &err);
    assert_string_equal(out, GREEDY_20 "\n");
    if (!strstr(err, "prefill 6 tokens") || !strstr(err, "decode 19 tokens") || !strstr(err, "tokens/s") ||
        !strstr(err, "first token") || !strstr(err, "peak memory") || !strstr(err, "as stored"))
        fail_msg("stderr lacks the timings and the memory:\n%s", err);
    free(err);
    /* The float32 twin generates the same greedy text. */
    char *f32 = run("--text '这台电脑来自苹果' --max-tokens 20 --no-stop --weights f32", &err);
    assert_string_equal(f32, GREEDY_20 "\n");
    if (!strstr(err, "float32")) fail_msg("stderr does not say float32:\n%s", err);
    free(f32), free(err);
    /* Keys at 16 bits, values at 8: the cache says so, the text follows. */
    char *mixed = run("--text '这台电脑来自苹果' --max-tokens 6 --kv-cache bf16:q8_0", &err);
    if (!strstr(err, "KV cache bfloat16 keys, q8_0 values")) fail_msg("stderr does not name the split cache:\n%s", err);
    print_message("bf16 keys, q8_0 values: %s", mixed);
    free(mixed), free(err);
    char *k1 = run("--text '这台电脑来自苹果' --max-tokens 6 --top-k 1 --temperature 5 --seed 3", NULL);
    assert_string_equal(k1, GREEDY_6 "\n");
    char *a = run("--text 'The capital of France is' --max-tokens 8 --temperature 1.2 --top-p 0.95 --seed 7", NULL);
    char *b = run("--text 'The capital of France is' --max-tokens 8 --temperature 1.2 --top-p 0.95 --seed 7", NULL);
    assert_string_equal(a, b);
    print_message("seed 7, T 1.2, top-p 0.95: %s", a);
    char *split = run("--text '𝔘𝔘𝔘𝔘𝔘𝔘𝔘𝔘' --max-tokens 7 --no-stop", NULL);
    assert_string_equal(split, "\xF0\x9D\x94\xA2\xEF\xBF\xBD\n");
    free(out), free(k1), free(a), free(b), free(split);
}

/* The model's context (Gemma 3 270M: 32768 positions): a prompt of 2 tokens
 * (BOS, "hi") and 32768 new ones is refused before any token is run. */
static void test_gemma_context(void **state) {
    (void)state;
    gemma = test_model_or_skip(GEMMA);
    char args[4200];
    snprintf(args, sizeof args, "--model '%s' --text hi --max-tokens 32768", gemma);
    expect(1, "2 prompt tokens + 32768 new ones = 32770 positions, beyond the model's context of 32768 (give "
              "--allow-beyond-context to run it anyway)", args);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_help_and_usage_errors),
        cmocka_unit_test(test_data_errors),
        cmocka_unit_test(test_gemma_context),
        cmocka_unit_test(test_gemma_runs),
    };
    return cmocka_run_group_tests(tests, NULL, test_group_teardown);
}
