/*
 * test_gguf_models.c — the two real models (scripts/fetch-models.sh puts
 * them in $ATTN_MODEL_DIR, default ~/.cache/attn/models), when they are
 * there; skipped with a message when they are not.
 *
 *   - each file opens, and its architecture metadata is what the models'
 *     README (docs/models.md) says: layers, heads, key/value heads, head
 *     width, RoPE theta, vocabulary, and the tensor types present;
 *   - one row of every tensor type in each (and the last row of the token
 *     embeddings) converts to the same float32 bits as the gguf package's
 *     numpy reference gave for that row (tests/fixtures/gguf/models/, made
 *     by tests/fixtures/make_gguf_fixtures.py --models DIR);
 *   - the first and last rows of every tensor convert, all finite.
 */
#include "testutil.h"
#include "models.h"

#include "attn.h"
#include "attn_gguf.h"
#include "attn_io.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define ROWS_DIR ATTN_SOURCE_DIR "/tests/fixtures/gguf/models"
#define QWEN TEST_QWEN_GGUF
#define GEMMA TEST_GEMMA_GGUF

/* Opens a model, or skips the test with a message when it is absent. */
static attn_gguf *open_model(const char *name) {
    const char *path = test_model_path(name);
    if (!path) {
        print_message("skipped: %s/%s is not there (scripts/fetch-models.sh fetches it, 745 MB for both models)\n",
                      test_model_dir(), name);
        skip();
    }
    attn_gguf *g;
    assert_ok(attn_gguf_open(path, &g));
    return g;
}

static void assert_key_u32(const attn_gguf *g, const char *key, uint32_t want) {
    uint32_t v;
    assert_ok(attn_gguf_get_u32(g, key, &v));
    if (v != want) fail_msg("%s is %u, expected %u", key, v, want);
}

static void assert_key_string(const attn_gguf *g, const char *key, const char *want) {
    const char *s;
    size_t len;
    assert_ok(attn_gguf_get_string(g, key, &s, &len));
    if (len != strlen(want) || memcmp(s, want, len) != 0) fail_msg("%s is '%.*s', expected '%s'", key, (int)len, s, want);
}

static void assert_key_f32(const attn_gguf *g, const char *key, float want) {
    float v;
    assert_ok(attn_gguf_get_f32(g, key, &v));
    if (v != want) fail_msg("%s is %.9g, expected %.9g", key, (double)v, (double)want);
}

static uint64_t array_count(const attn_gguf *g, const char *key, attn_gguf_value_type type) {
    attn_gguf_value v;
    assert_ok(attn_gguf_get_array(g, key, (int)type, &v));
    return v.count;
}

/* The set of tensor types present equals want (a bit per type number). */
static void assert_tensor_types(const attn_gguf *g, uint64_t want) {
    attn_gguf_info info;
    attn_gguf_describe(g, &info);
    uint64_t present = 0;
    for (int64_t i = 0; i < info.n_tensors; i++) {
        attn_gguf_tensor t;
        assert_ok(attn_gguf_tensor_at(g, i, &t));
        present |= 1ull << t.type;
    }
    if (present != want) fail_msg("tensor types present: 0x%llx, expected 0x%llx", (unsigned long long)present,
                                  (unsigned long long)want);
}

static void assert_has_tensor(const attn_gguf *g, const char *name, int want) {
    if ((attn_gguf_tensor_index(g, name) >= 0) != want)
        fail_msg("tensor %s is %s", name, want ? "missing" : "there, unexpectedly");
}

#define TYPE_BIT(t) (1ull << ATTN_GGUF_TYPE_##t)
#define SHIPPED_TYPES (TYPE_BIT(F32) | TYPE_BIT(Q5_0) | TYPE_BIT(Q8_0) | TYPE_BIT(Q4_K) | TYPE_BIT(Q6_K))

/* Qwen2.5-Coder-0.5B-Instruct: 24 layers, d_model 896, 14 query heads on 2
 * key/value heads of width 64, q/k/v biases, RoPE theta 1e6, RMSNorm eps
 * 1e-6, FFN 4864, byte-level BPE of 151,936 tokens with merges, a separate
 * output head. */
static void qwen_architecture(void **state) {
    (void)state;
    attn_gguf *g = open_model(QWEN);
    assert_key_string(g, "general.architecture", "qwen2");
    assert_key_u32(g, "qwen2.block_count", 24);
    assert_key_u32(g, "qwen2.embedding_length", 896);
    assert_key_u32(g, "qwen2.attention.head_count", 14);
    assert_key_u32(g, "qwen2.attention.head_count_kv", 2);
    assert_key_u32(g, "qwen2.feed_forward_length", 4864);
    /* No key_length key: the head width is d_model / heads. */
    assert_int_equal(attn_gguf_key_index(g, "qwen2.attention.key_length"), -1);
    attn_gguf_tensor q;
    assert_ok(attn_gguf_find_tensor(g, "blk.0.attn_q.weight", &q));
    assert_int_equal(q.dims[0], 896);
    assert_int_equal(q.dims[1], 14 * 64);
    attn_gguf_tensor k;
    assert_ok(attn_gguf_find_tensor(g, "blk.0.attn_k.weight", &k));
    assert_int_equal(k.dims[1], 2 * 64);
    assert_key_f32(g, "qwen2.rope.freq_base", 1e6f);
    assert_key_f32(g, "qwen2.attention.layer_norm_rms_epsilon", 1e-6f);
    assert_key_string(g, "tokenizer.ggml.model", "gpt2");
    assert_key_string(g, "tokenizer.ggml.pre", "qwen2");
    assert_int_equal(array_count(g, "tokenizer.ggml.tokens", ATTN_GGUF_VALUE_STRING), 151936);
    assert_int_equal(array_count(g, "tokenizer.ggml.token_type", ATTN_GGUF_VALUE_INT32), 151936);
    assert_int_equal(array_count(g, "tokenizer.ggml.merges", ATTN_GGUF_VALUE_STRING), 151387);
    attn_gguf_tensor embd;
    assert_ok(attn_gguf_find_tensor(g, "token_embd.weight", &embd));
    assert_int_equal(embd.n_rows, 151936);
    assert_has_tensor(g, "output.weight", 1);
    assert_has_tensor(g, "blk.0.attn_q.bias", 1);
    assert_has_tensor(g, "blk.23.attn_v.bias", 1);
    assert_has_tensor(g, "blk.0.attn_q_norm.weight", 0);
    assert_has_tensor(g, "blk.24.attn_q.weight", 0);
    assert_tensor_types(g, SHIPPED_TYPES);
    attn_gguf_free(g);
}

/* Gemma 3 270M: 18 layers, d_model 640, 4 query heads on 1 key/value head
 * of width 256, QK-norm, sliding window 512, global RoPE theta 1e6 (the
 * local layers' 1e4 is not in the file: llama.cpp sets it in code), pre-
 * and post-norms, SentencePiece vocabulary of 262,144 pieces with scores,
 * BOS 2, tied embeddings (no output.weight). */
static void gemma_architecture(void **state) {
    (void)state;
    attn_gguf *g = open_model(GEMMA);
    assert_key_string(g, "general.architecture", "gemma3");
    assert_key_u32(g, "gemma3.block_count", 18);
    assert_key_u32(g, "gemma3.embedding_length", 640);
    assert_key_u32(g, "gemma3.attention.head_count", 4);
    assert_key_u32(g, "gemma3.attention.head_count_kv", 1);
    assert_key_u32(g, "gemma3.attention.key_length", 256);
    assert_key_u32(g, "gemma3.attention.value_length", 256);
    assert_key_u32(g, "gemma3.attention.sliding_window", 512);
    assert_key_u32(g, "gemma3.feed_forward_length", 2048);
    assert_key_f32(g, "gemma3.rope.freq_base", 1e6f);
    assert_key_f32(g, "gemma3.attention.layer_norm_rms_epsilon", 1e-6f);
    assert_key_string(g, "tokenizer.ggml.model", "llama");
    assert_int_equal(array_count(g, "tokenizer.ggml.tokens", ATTN_GGUF_VALUE_STRING), 262144);
    assert_int_equal(array_count(g, "tokenizer.ggml.scores", ATTN_GGUF_VALUE_FLOAT32), 262144);
    assert_key_u32(g, "tokenizer.ggml.bos_token_id", 2);
    int add_bos;
    assert_ok(attn_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &add_bos));
    assert_int_equal(add_bos, 1);
    attn_gguf_tensor q;
    assert_ok(attn_gguf_find_tensor(g, "blk.0.attn_q.weight", &q));
    assert_int_equal(q.dims[0], 640);
    assert_int_equal(q.dims[1], 4 * 256);
    assert_has_tensor(g, "output.weight", 0);
    assert_has_tensor(g, "blk.0.attn_q_norm.weight", 1);
    assert_has_tensor(g, "blk.0.attn_k_norm.weight", 1);
    assert_has_tensor(g, "blk.17.post_attention_norm.weight", 1);
    assert_has_tensor(g, "blk.17.post_ffw_norm.weight", 1);
    assert_has_tensor(g, "blk.18.attn_q.weight", 0);
    assert_tensor_types(g, SHIPPED_TYPES);
    attn_gguf_free(g);
}

/* rows.txt: "model tensor type row file", one per line, # comments. */
static void rows_match_gguf_py(void **state) {
    (void)state;
    if (!test_model_path(QWEN) && !test_model_path(GEMMA)) {
        print_message("skipped: no model in %s (scripts/fetch-models.sh)\n", test_model_dir());
        skip();
    }
    FILE *f = fopen(ROWS_DIR "/rows.txt", "r");
    assert_non_null(f);
    char line[1024];
    int checked = 0;
    uint64_t types_checked = 0;
    while (fgets(line, sizeof line, f)) {
        char model[256], tensor[256], type[32], file[512];
        long long row;
        if (line[0] == '#' || sscanf(line, "%255s %255s %31s %lld %511s", model, tensor, type, &row, file) != 5)
            continue;
        const char *path = test_model_path(model);
        if (!path) continue;
        attn_gguf *g;
        assert_ok(attn_gguf_open(path, &g));
        attn_gguf_tensor t;
        assert_ok(attn_gguf_find_tensor(g, tensor, &t));
        assert_string_equal(attn_gguf_type_name(t.type), type);
        char npy[768];
        snprintf(npy, sizeof npy, ROWS_DIR "/%s", file);
        attn_array want;
        assert_ok(attn_npy_load(npy, &want));
        assert_int_equal(want.count, t.dims[0]);
        float *got = malloc((size_t)t.dims[0] * sizeof *got);
        assert_ok(attn_gguf_dequantize_rows(g, &t, row, 1, got));
        if (memcmp(got, want.data, (size_t)t.dims[0] * sizeof *got) != 0) {
            for (int64_t i = 0; i < t.dims[0]; i++)
                if (memcmp(&got[i], (float *)want.data + i, sizeof *got) != 0)
                    fail_msg("%s %s row %lld: element %lld is %.9g, gguf-py's %.9g", model, tensor, row,
                             (long long)i, (double)got[i], (double)((float *)want.data)[i]);
        }
        checked++;
        types_checked |= 1ull << t.type;
        free(got);
        attn_array_free(&want);
        attn_gguf_free(g);
    }
    fclose(f);
    print_message("%d rows of real tensors bit for bit equal to gguf-py's\n", checked);
    assert_true(checked >= 5);
    assert_true(types_checked == SHIPPED_TYPES);
}

/* The first and last rows of every tensor convert, and are finite. */
static void every_tensor_converts(void **state) {
    (void)state;
    const char *models[] = {QWEN, GEMMA};
    int opened = 0;
    for (int m = 0; m < 2; m++) {
        const char *path = test_model_path(models[m]);
        if (!path) continue;
        opened++;
        attn_gguf *g;
        assert_ok(attn_gguf_open(path, &g));
        attn_gguf_info info;
        attn_gguf_describe(g, &info);
        for (int64_t i = 0; i < info.n_tensors; i++) {
            attn_gguf_tensor t;
            assert_ok(attn_gguf_tensor_at(g, i, &t));
            float *row = malloc((size_t)t.dims[0] * sizeof *row);
            for (int end = 0; end < 2; end++) {
                assert_ok(attn_gguf_dequantize_rows(g, &t, end ? t.n_rows - 1 : 0, 1, row));
                int64_t bad = -1;
                if (attn_check_finite(row, t.dims[0], &bad) != ATTN_OK)
                    fail_msg("%s: %s row %lld: element %lld is not finite", models[m], t.name,
                             (long long)(end ? t.n_rows - 1 : 0), (long long)bad);
            }
            free(row);
        }
        print_message("%s: %lld tensors, first and last rows converted\n", models[m], (long long)info.n_tensors);
        attn_gguf_free(g);
    }
    if (!opened) {
        print_message("skipped: no model in %s (scripts/fetch-models.sh)\n", test_model_dir());
        skip();
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(qwen_architecture),
        cmocka_unit_test(gemma_architecture),
        cmocka_unit_test(rows_match_gguf_py),
        cmocka_unit_test(every_tensor_converts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
