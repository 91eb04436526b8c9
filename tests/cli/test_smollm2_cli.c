/*
 * test_smollm2_cli.c — SmolLM2-135M-Instruct (llama, Q4_1, a byte-level
 * vocabulary without 21 of the 256 byte letters: docs/tokenizers.md §2)
 * through the commands a user reaches with text, each against transformers
 * where a number is printed (skipped with a message when the model is not
 * in $ATTN_MODEL_DIR; scripts/fetch-models.sh fetches it):
 *   - attn model run --text "The capital of France is": the tokens
 *     transformers' tokenizer gives (504 3575 282 4649 314) and " Paris" the
 *     top next token;
 *   - attn model generate, greedy, 20 tokens: stdout is exactly the text of
 *     transformers' greedy continuation (tests/fixtures/generate/llama.txt
 *     and README.txt, scripts/models/make_generate_fixtures.py);
 *   - attn model trace --top: the same top token from the trace path;
 *   - a text holding bytes the vocabulary has no letter for runs (they are
 *     dropped, as transformers drops them).
 * The tokenizer's ids on the corpus: test_tokenizer_models.c.
 */
#include "testutil.h"
#include "models.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* transformers' greedy 20 tokens after "The capital of France is", decoded. */
#define GREEDY_20 " Paris.\n\nThe answer is: 2018-01-22 "

static const char *model(void) { return test_model_or_skip(TEST_SMOLLM2_GGUF); }

static void run_text(void **state) {
    (void)state;
    const char *m = model();
    char *out;
    assert_int_equal(test_run_cli(&out, "model run %s --text 'The capital of France is' --top 3", m), 0);
    if (!strstr(out, "tokens (5): 504 \"The\" 3575 \" capital\" 282 \" of\" 4649 \" France\" 314 \" is\"") ||
        !strstr(out, "\n1         7042 "))
        fail_msg("attn model run: %s", out);
    free(out);
    /* Bytes without a letter (0x04, 0x1d) are dropped: the same tokens. */
    assert_int_equal(test_run_cli(&out, "model run %s --text 'The capital\x04 of France\x1d is' --top 1", m), 0);
    if (!strstr(out, "tokens (5): 504 ") || !strstr(out, "\" Paris\"")) fail_msg("attn model run: %s", out);
    free(out);
}

static void generate_greedy(void **state) {
    (void)state;
    const char *m = model();
    const char *text = test_path("generated.txt");
    char *log, got[256] = {0};
    /* stdout to a file, stderr (test_run_cli's trailing 2>&1 applies to
     * the `exit`) to the log. */
    assert_int_equal(test_run_cli(&log, "model generate --model %s --text 'The capital of France is' "
                                        "--max-tokens 20 --no-stop 2>&1 > %s; exit $?", m, text), 0);
    FILE *f = fopen(text, "rb");
    assert_non_null(f);
    const size_t n = fread(got, 1, sizeof got - 1, f);
    fclose(f);
    if (n != strlen(GREEDY_20 "\n") || memcmp(got, GREEDY_20 "\n", n) != 0)
        fail_msg("attn model generate printed '%s', transformers '%s' (stderr: %s)", got, GREEDY_20, log);
    if (!strstr(log, "20 generated")) fail_msg("attn model generate: %s", log);
    free(log);
}

static void trace_top(void **state) {
    (void)state;
    const char *m = model();
    char *out;
    assert_int_equal(test_run_cli(&out, "model trace --model %s --text 'The capital of France is' --top 2", m), 0);
    if (!strstr(out, "clean      Paris 0.77")) fail_msg("attn model trace: %s", out);
    free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(run_text),
        cmocka_unit_test(generate_greedy),
        cmocka_unit_test(trace_top),
    };
    return cmocka_run_group_tests(tests, NULL, test_group_teardown);
}
