/*
 * test_tokenizer_models.c — the tokenizers of the three real models against
 * Hugging Face's (transformers + tokenizers, built from the same GGUF files):
 * every text of tests/fixtures/tokenizer/<model>.txt (made by
 * scripts/models/make_tokenizer_fixtures.py) must encode to the same ids,
 * and those ids decode (special tokens skipped, invalid UTF-8 replaced) to
 * the reference's decoded text.  The models come from scripts/fetch-models.sh
 * ($ATTN_MODEL_DIR, default ~/.cache/attn/models); without them each case is
 * skipped with a message.
 */
#include "testutil.h"
#include "models.h"
#include "tokenizer_fixture.h"

#include "attn_tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define FIXTURES ATTN_SOURCE_DIR "/tests/fixtures/tokenizer/"

/* The model's tokenizer, or the test skipped with a message. */
static attn_tokenizer *open_tokenizer(const char *name) {
    const char *path = test_model_or_skip(name);
    attn_gguf *g;
    assert_ok(attn_gguf_open(path, &g));
    attn_tokenizer *t;
    attn_status status = attn_tokenizer_from_gguf(g, &t);
    attn_gguf_free(g); /* the tokenizer keeps what it needs */
    if (status == ATTN_ERR_UNSUPPORTED && strstr(attn_last_error(), "without PCRE2")) {
        print_message("skipped: %s\n", attn_last_error());
        skip();
    }
    assert_ok(status);
    return t;
}

static void check_fixture(const char *model, const char *fixture) {
    attn_tokenizer *t = open_tokenizer(model);
    tok_fixture_check(t, model, fixture);
    attn_tokenizer_free(t);
}

static void qwen_matches_reference(void **state) {
    (void)state;
    check_fixture(TEST_QWEN_GGUF, FIXTURES "qwen2.5-coder-0.5b.txt");
}

static void gemma_matches_reference(void **state) {
    (void)state;
    check_fixture(TEST_GEMMA_GGUF, FIXTURES "gemma-3-270m.txt");
}

static void smollm2_matches_reference(void **state) {
    (void)state;
    check_fixture(TEST_SMOLLM2_GGUF, FIXTURES "smollm2-135m.txt");
}

/* What the models' README says about them: vocabulary sizes, special ids,
 * 苹果 one token in Qwen's vocabulary. */
static void models_describe_themselves(void **state) {
    (void)state;
    attn_tokenizer *t = open_tokenizer(TEST_QWEN_GGUF);
    attn_tokenizer_info info;
    attn_tokenizer_describe(t, &info);
    assert_int_equal(info.kind, ATTN_TOKENIZER_BPE);
    assert_int_equal(info.vocab_size, 151936);
    assert_int_equal(info.n_merges, 151387);
    assert_int_equal(info.eos_id, 151645);
    assert_int_equal(info.add_bos, 0);
    assert_string_equal(info.pre, "qwen2");
    size_t n;
    int32_t ids[8];
    assert_ok(attn_tokenizer_encode(t, "苹果", strlen("苹果"), 0, ids, 8, &n));
    assert_int_equal(n, 1);
    print_message("qwen: %.1f MB\n", (double)info.memory_bytes / 1e6);
    attn_tokenizer_free(t);

    t = open_tokenizer(TEST_GEMMA_GGUF);
    attn_tokenizer_describe(t, &info);
    assert_int_equal(info.kind, ATTN_TOKENIZER_SPM);
    assert_int_equal(info.vocab_size, 262144);
    assert_int_equal(info.bos_id, 2);
    assert_int_equal(info.add_bos, 1);
    assert_ok(attn_tokenizer_encode(t, "", 0, 0, ids, 8, &n));
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], 2);
    print_message("gemma: %.1f MB\n", (double)info.memory_bytes / 1e6);
    attn_tokenizer_free(t);
}

/* SmolLM2's vocabulary lacks 21 byte letters; such a byte is dropped before
 * the merges (its neighbours meet: "!\x04!" is the one token "!!"), as the
 * reference's BPE, which has no unknown token here, drops it. */
static void smollm2_drops_missing_bytes(void **state) {
    (void)state;
    attn_tokenizer *t = open_tokenizer(TEST_SMOLLM2_GGUF);
    attn_tokenizer_info info;
    attn_tokenizer_describe(t, &info);
    assert_int_equal(info.kind, ATTN_TOKENIZER_BPE);
    assert_int_equal(info.vocab_size, 49152);
    assert_int_equal(info.n_merges, 48900);
    assert_string_equal(info.pre, "smollm");
    assert_int_equal(info.bos_id, 1);
    assert_int_equal(info.eos_id, 2);
    assert_int_equal(info.unk_id, 0);
    assert_int_equal(info.add_bos, 0);
    size_t n, m;
    int32_t ids[8], bang[8];
    assert_ok(attn_tokenizer_encode(t, "!\x04!", 3, 0, ids, 8, &n));
    assert_ok(attn_tokenizer_encode(t, "!!", 2, 0, bang, 8, &m));
    assert_int_equal(n, 1);
    assert_int_equal(m, 1);
    assert_int_equal(ids[0], bang[0]);
    assert_ok(attn_tokenizer_encode(t, "\x04\x06\x13\x14\x16\x1d\xc0\xc1\xf5\xff", 10, 0, ids, 8, &n));
    assert_int_equal(n, 0);
    print_message("smollm2: %.1f MB\n", (double)info.memory_bytes / 1e6);
    attn_tokenizer_free(t);
}

/* attn tokenize and detokenize on SmolLM2, through the CLI: the ids
 * transformers gives ("!\x04!" is "!!", 10095; "x \x04\x06 y" is x, Ġ, Ġy). */
static void smollm2_cli(void **state) {
    (void)state;
    attn_tokenizer_free(open_tokenizer(TEST_SMOLLM2_GGUF)); /* skips without the model or PCRE2 */
    const char *path = test_model_path(TEST_SMOLLM2_GGUF);
    char *out;
    assert_int_equal(test_run_cli(&out, "tokenize --model %s --ids --text '!\x04!'", path), 0);
    assert_string_equal(out, "10095\n");
    free(out);
    assert_int_equal(test_run_cli(&out, "tokenize --model %s --ids --text 'x \x04\x06 y'", path), 0);
    assert_string_equal(out, "104 216 329\n");
    free(out);
    assert_int_equal(test_run_cli(&out, "tokenize --model %s --pieces --text '<|im_start|>user'", path), 0);
    assert_string_equal(out, "<|im_start|> user\n");
    free(out);
    assert_int_equal(test_run_cli(&out, "detokenize --model %s 1 4093 216 329", path), 0);
    assert_string_equal(out, "<|im_start|>user  y");
    free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(qwen_matches_reference),
        cmocka_unit_test(gemma_matches_reference),
        cmocka_unit_test(smollm2_matches_reference),
        cmocka_unit_test(models_describe_themselves),
        cmocka_unit_test(smollm2_drops_missing_bytes),
        cmocka_unit_test(smollm2_cli),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
