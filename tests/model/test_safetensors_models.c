/*
 * test_safetensors_models.c — the decoder on tiny random-weight Hugging Face
 * checkpoints (tests/fixtures/tiny_models/, made by
 * tests/fixtures/make_tiny_models.py with transformers) against what
 * transformers computed on them: every layer's residual stream, every
 * layer's attention map and the logits at every position, for two fixed
 * sequences of ids.
 *
 *   qwen3   sharded (model.safetensors.index.json), GQA 2:1, QK-norm, head
 *           width 16 with d_model 32 (Hq*Dh != d)
 *   qwen2   bfloat16 weights, q/k/v biases
 *   gemma3  float16 weights, sliding and full layers, two thetas,
 *           query_pre_attn_scalar != head width, (1 + w) norms, tied
 *   llama   float32, tied; and llama.gguf, the same weights with Q/K rows
 *           permuted as llama.cpp's converter writes them: the GGUF loader
 *           must un-permute them to give the same numbers; qwen3.gguf, the
 *           qwen3 weights through GGUF (not permuted)
 *   llama_linear, llama3, qwen2_yarn, gemma3_linear: the RoPE scaling
 *           variants configs name (linear, llama3, yarn; gemma3's linear on
 *           its full layers only), and llama_linear.gguf with llama.cpp's
 *           rope.scaling keys; each also run with its scaling removed, which
 *           must NOT match (the fixture sees the scaling)
 *   qwen3_partial, qwen3_partial.gguf: partial rotary (the first half of
 *           each head rotated), which rotating whole heads must not match
 *
 * Each comparison is the largest difference over a layer's tensor relative
 * to that tensor's largest magnitude (tolerances.h, TINY_MODEL_*); the
 * largest differences seen are printed.
 */
#include "cli_files.h"
#include "testutil.h"
#include "tolerances.h"

#include "attn.h"
#include "attn_decoder.h"
#include "attn_gguf.h"
#include "attn_io.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TINY ATTN_SOURCE_DIR "/tests/fixtures/tiny_models"

static attn_array load_npy(const char *model, const char *seq, const char *what, attn_dtype dtype) {
    char path[512];
    snprintf(path, sizeof path, TINY "/%s/ref/%s_%s.npy", model, seq, what);
    return test_load_array(path, dtype);
}

/* max |got - want| / max |want| over n values (absolute when abs). */
static double difference(const float *got, const float *want, int64_t n, int abs) {
    double diff = 0.0, scale = 0.0;
    for (int64_t i = 0; i < n; i++) {
        const double d = fabs((double)got[i] - (double)want[i]);
        if (!(d <= diff)) diff = d; /* NaN becomes the difference */
        if (fabs((double)want[i]) > scale) scale = fabs((double)want[i]);
    }
    return abs || scale == 0.0 ? diff : diff / scale;
}

typedef struct worst {
    double hidden, attn, logits;
} worst;

static void check_sequence(const attn_decoder *m, const char *model, const char *seq, worst *w) {
    const attn_decoder_config *c = attn_decoder_get_config(m);
    attn_array ids = load_npy(model, seq, "ids", ATTN_I64);
    attn_array hidden = load_npy(model, seq, "hidden", ATTN_F32);
    attn_array attn = load_npy(model, seq, "attn", ATTN_F32);
    attn_array logits = load_npy(model, seq, "logits", ATTN_F32);
    const int64_t L = ids.count, N = c->n_layers, d = c->d_model, Hq = c->n_heads, V = c->vocab;
    assert_int_equal(hidden.count, (N + 1) * L * d);
    assert_int_equal(attn.count, N * Hq * L * L);
    assert_int_equal(logits.count, L * V);
    int32_t *tok = malloc((size_t)L * sizeof *tok);
    float *got_hidden = malloc((size_t)((N + 1) * L * d) * sizeof(float));
    float *got_attn = malloc((size_t)(N * Hq * L * L) * sizeof(float));
    float *got_logits = malloc((size_t)(L * V) * sizeof(float));
    float **maps = malloc((size_t)N * sizeof *maps);
    assert_non_null(tok);
    assert_non_null(got_hidden);
    assert_non_null(got_attn);
    assert_non_null(got_logits);
    assert_non_null(maps);
    for (int64_t t = 0; t < L; t++) tok[t] = (int32_t)((const int64_t *)ids.data)[t];
    for (int64_t l = 0; l < N; l++) maps[l] = got_attn + l * Hq * L * L;
    attn_decoder_outputs out = ATTN_DECODER_OUTPUTS_INIT;
    out.hidden = got_hidden;
    out.attention = maps;
    out.logits = got_logits;
    assert_ok(attn_decoder_forward(m, tok, L, &out));
    for (int64_t l = 0; l <= N; l++) {
        const double e = difference(got_hidden + l * L * d, (const float *)hidden.data + l * L * d, L * d, 0);
        if (e > w->hidden) w->hidden = e;
        if (!(e <= TINY_MODEL_HIDDEN_REL_FAIL))
            fail_msg("%s %s: hidden state %lld differs by %.3g relative", model, seq, (long long)l, e);
    }
    for (int64_t l = 0; l < N; l++) {
        const double e = difference(maps[l], (const float *)attn.data + l * Hq * L * L, Hq * L * L, 1);
        if (e > w->attn) w->attn = e;
        if (!(e <= TINY_MODEL_ATTN_ABS_FAIL))
            fail_msg("%s %s: layer %lld's attention differs by %.3g", model, seq, (long long)l, e);
    }
    const double e = difference(got_logits, logits.data, L * V, 0);
    if (e > w->logits) w->logits = e;
    if (!(e <= TINY_MODEL_LOGITS_REL_FAIL)) fail_msg("%s %s: logits differ by %.3g relative", model, seq, e);
    free(tok);
    free(got_hidden);
    free(got_attn);
    free(got_logits);
    free(maps);
    attn_array_free(&ids);
    attn_array_free(&hidden);
    attn_array_free(&attn);
    attn_array_free(&logits);
}

static void check_model(const attn_decoder *m, const char *model, const char *label) {
    worst w = {0};
    check_sequence(m, model, "a", &w);
    check_sequence(m, model, "b", &w);
    printf("%-16s largest differences: hidden %.2e rel, attention %.2e abs, logits %.2e rel\n", label, w.hidden,
           w.attn, w.logits);
}

static void check_safetensors(const char *model, attn_decoder_arch arch) {
    attn_decoder *m = NULL;
    assert_ok(attn_decoder_load_safetensors(model, &m));
    assert_int_equal(attn_decoder_get_config(m)->arch, arch);
    check_model(m, strrchr(model, '/') + 1, strrchr(model, '/') + 1);
    attn_decoder_free(m);
}

static void test_qwen3_sharded(void **state) {
    (void)state;
    check_safetensors(TINY "/qwen3", ATTN_DECODER_QWEN3);
}

static void test_qwen2_bf16(void **state) {
    (void)state;
    check_safetensors(TINY "/qwen2", ATTN_DECODER_QWEN2);
}

static void test_gemma3_f16(void **state) {
    (void)state;
    check_safetensors(TINY "/gemma3", ATTN_DECODER_GEMMA3);
    /* The configuration as transformers wrote it: layers 1 and 3 full. */
    attn_decoder *m = NULL;
    assert_ok(attn_decoder_load_safetensors(TINY "/gemma3/model.safetensors", &m));
    const attn_decoder_config *c = attn_decoder_get_config(m);
    assert_int_equal(c->sliding_window, 4);
    assert_true(attn_decoder_layer_is_local(c, 0) && !attn_decoder_layer_is_local(c, 1));
    assert_true(attn_decoder_layer_is_local(c, 2) && !attn_decoder_layer_is_local(c, 3));
    assert_true(c->rope_theta == 1e6 && c->rope_theta_local == 1e4);
    assert_true(c->attn_scale == (float)pow(24.0, -0.5));
    assert_true(c->tied_embeddings);
    attn_decoder_free(m);
}

static void test_llama(void **state) {
    (void)state;
    check_safetensors(TINY "/llama", ATTN_DECODER_LLAMA);
}

static void check_gguf(const char *model, attn_decoder_arch arch) {
    char path[256], label[64];
    snprintf(path, sizeof path, TINY "/%s/%s.gguf", model, model);
    snprintf(label, sizeof label, "%s.gguf", model);
    attn_gguf *g = NULL;
    attn_decoder *m = NULL;
    assert_ok(attn_gguf_open(path, &g));
    assert_ok(attn_decoder_load(g, &m));
    attn_gguf_free(g);
    assert_int_equal(attn_decoder_get_config(m)->arch, arch);
    check_model(m, model, label);
    attn_decoder_free(m);
}

/* The same llama weights through GGUF, Q/K rows permuted by the writer. */
static void test_llama_gguf_unpermuted(void **state) {
    (void)state;
    check_gguf("llama", ATTN_DECODER_LLAMA);
}

/* The qwen3 weights through GGUF (qwen3.* keys, attn_q_norm / attn_k_norm,
 * an explicit key_length, untied output.weight). */
static void test_qwen3_gguf(void **state) {
    (void)state;
    check_gguf("qwen3", ATTN_DECODER_QWEN3);
}

/* The largest relative difference of any hidden state of sequence "b" from
 * the reference, for a decoder run as it is. */
static double hidden_difference(const attn_decoder *m, const char *model) {
    const attn_decoder_config *c = attn_decoder_get_config(m);
    attn_array ids = load_npy(model, "b", "ids", ATTN_I64);
    attn_array hidden = load_npy(model, "b", "hidden", ATTN_F32);
    const int64_t L = ids.count, N = c->n_layers, d = c->d_model;
    int32_t *tok = malloc((size_t)L * sizeof *tok);
    float *got = malloc((size_t)((N + 1) * L * d) * sizeof(float));
    assert_non_null(tok);
    assert_non_null(got);
    for (int64_t t = 0; t < L; t++) tok[t] = (int32_t)((const int64_t *)ids.data)[t];
    attn_decoder_outputs out = ATTN_DECODER_OUTPUTS_INIT;
    out.hidden = got;
    assert_ok(attn_decoder_forward(m, tok, L, &out));
    double worst_e = 0.0;
    for (int64_t l = 0; l <= N; l++) {
        const double e = difference(got + l * L * d, (const float *)hidden.data + l * L * d, L * d, 0);
        if (!(e <= worst_e)) worst_e = e;
    }
    free(tok);
    free(got);
    attn_array_free(&ids);
    attn_array_free(&hidden);
    return worst_e;
}

/* A scaled checkpoint matches the reference; the same weights with the
 * scaling taken out (the config edited in place: a test's shortcut, the API
 * hands it out read-only) must not, or the fixture would not test it. */
static void check_scaled(attn_decoder *m, const char *model, const char *label, attn_rope_scaling scaling) {
    attn_decoder_config *c = (attn_decoder_config *)attn_decoder_get_config(m);
    assert_int_equal(c->rope_scaling, scaling);
    check_model(m, model, label);
    c->rope_scaling = ATTN_ROPE_SCALING_NONE;
    const double unscaled = hidden_difference(m, model);
    c->rope_scaling = scaling;
    printf("%-16s without its RoPE scaling: hidden differs by %.2e rel (must exceed %.0e)\n", label, unscaled,
           TINY_MODEL_HIDDEN_REL_FAIL * 10);
    if (!(unscaled > TINY_MODEL_HIDDEN_REL_FAIL * 10))
        fail_msg("%s: the run without RoPE scaling differs by only %.3g: the fixture does not test it", label,
                 unscaled);
}

static void check_scaled_safetensors(const char *model, attn_rope_scaling scaling) {
    char path[256];
    snprintf(path, sizeof path, TINY "/%s", model);
    attn_decoder *m = NULL;
    assert_ok(attn_decoder_load_safetensors(path, &m));
    check_scaled(m, model, model, scaling);
    attn_decoder_free(m);
}

static void test_rope_linear(void **state) {
    (void)state;
    check_scaled_safetensors("llama_linear", ATTN_ROPE_SCALING_LINEAR);
    /* The same through GGUF: rope.scaling.type "linear", rope.scaling.factor. */
    attn_gguf *g = NULL;
    attn_decoder *m = NULL;
    assert_ok(attn_gguf_open(TINY "/llama_linear/llama_linear.gguf", &g));
    assert_ok(attn_decoder_load(g, &m));
    attn_gguf_free(g);
    assert_true(attn_decoder_get_config(m)->rope_factor == 4.0);
    check_scaled(m, "llama_linear", "llama_linear.gguf", ATTN_ROPE_SCALING_LINEAR);
    attn_decoder_free(m);
}

static void test_rope_llama3(void **state) {
    (void)state;
    check_scaled_safetensors("llama3", ATTN_ROPE_SCALING_LLAMA3);
}

static void test_rope_yarn(void **state) {
    (void)state;
    check_scaled_safetensors("qwen2_yarn", ATTN_ROPE_SCALING_YARN);
}

/* Gemma 3's linear scaling on the full layers only. */
static void test_rope_gemma3_linear(void **state) {
    (void)state;
    check_scaled_safetensors("gemma3_linear", ATTN_ROPE_SCALING_LINEAR);
}

/* Partial rotary: the first 8 of 16 widths of each head rotated
 * (config.json's partial_rotary_factor 0.5, the GGUF's
 * qwen3.rope.dimension_count 8), against transformers' partial rotary; the
 * same weights rotated whole must not match, or the fixture would not
 * test it. */
static void check_partial(attn_decoder *m, const char *label) {
    attn_decoder_config *c = (attn_decoder_config *)attn_decoder_get_config(m);
    assert_int_equal(c->rope_dim, 8);
    assert_int_equal(c->head_dim, 16);
    check_model(m, "qwen3_partial", label);
    c->rope_dim = 0;
    const double whole = hidden_difference(m, "qwen3_partial");
    c->rope_dim = 8;
    printf("%-16s rotating whole heads: hidden differs by %.2e rel (must exceed %.0e)\n", label, whole,
           TINY_MODEL_HIDDEN_REL_FAIL * 10);
    if (!(whole > TINY_MODEL_HIDDEN_REL_FAIL * 10))
        fail_msg("%s: rotating whole heads differs by only %.3g: the fixture does not test it", label, whole);
}

static void test_partial_rotary(void **state) {
    (void)state;
    attn_decoder *m = NULL;
    assert_ok(attn_decoder_load_safetensors(TINY "/qwen3_partial", &m));
    check_partial(m, "qwen3_partial");
    attn_decoder_free(m);
    attn_gguf *g = NULL;
    assert_ok(attn_gguf_open(TINY "/qwen3_partial/qwen3_partial.gguf", &g));
    assert_ok(attn_decoder_load(g, &m));
    attn_gguf_free(g);
    check_partial(m, "qwen3_partial.gguf");
    attn_decoder_free(m);
}

/* attn model info / run on the checkpoints: the top next token is the
 * reference's argmax of its last logits row. */
static void test_cli(void **state) {
    (void)state;
    attn_array logits = load_npy("qwen3", "a", "logits", ATTN_F32);
    const int64_t V = logits.shape[1], L = logits.shape[0];
    const float *last = (const float *)logits.data + (L - 1) * V;
    int64_t best = 0;
    for (int64_t i = 1; i < V; i++)
        if (last[i] > last[best]) best = i;
    attn_array_free(&logits);
    char want[64], *out;
    snprintf(want, sizeof want, "\n1 %12lld ", (long long)best);
    int status = test_run_cli(&out, "model run %s --ids 1,17,200,3,99,254,0 --top 2", TINY "/qwen3");
    if (status != 0 || !strstr(out, want)) fail_msg("attn model run: status %d, no '%s' in:\n%s", status, want, out);
    free(out);
    status = test_run_cli(&out, "model info --model %s", TINY "/gemma3/model.safetensors");
    if (status != 0 || !strstr(out, "LGLG") || !strstr(out, "54 tensors in 1 file"))
        fail_msg("attn model info: status %d:\n%s", status, out);
    free(out);
    status = test_run_cli(&out, "model info %s", TINY "/qwen3");
    if (status != 0 || !strstr(out, "in 5 files") || !strstr(out, "QK-norm")) fail_msg("attn model info: %d:\n%s", status, out);
    free(out);
    /* The context: 64 positions (max_position_embeddings), shown by info;
     * 65 ids refused before the weights load, run with a warning when
     * allowed. */
    status = test_run_cli(&out, "model info %s", TINY "/qwen3_partial");
    if (status != 0 || !strstr(out, "context        64 positions") ||
        !strstr(out, "partial: the first 8 of 16 widths of each head rotated"))
        fail_msg("attn model info, limits: %d:\n%s", status, out);
    free(out);
    char ids[400] = "0";
    for (int i = 1; i < 65; i++) snprintf(ids + strlen(ids), sizeof ids - strlen(ids), ",%d", i);
    status = test_run_cli(&out, "model run %s --ids %s", TINY "/llama", ids);
    if (status != 1 || !strstr(out, "attn model: 65 prompt tokens + 0 new ones = 65 positions, beyond the model's "
                                     "context of 64 (give --allow-beyond-context to run it anyway)"))
        fail_msg("attn model run beyond the context: %d:\n%s", status, out);
    free(out);
    status = test_run_cli(&out, "model run %s --ids %s --allow-beyond-context", TINY "/llama/llama.gguf", ids);
    if (status != 0 || !strstr(out, "attn model: warning: 65 prompt tokens + 0 new ones = 65 positions, beyond the "
                                     "model's context of 64: the positions past it were never trained"))
        fail_msg("attn model run --allow-beyond-context: %d:\n%s", status, out);
    free(out);
    status = test_run_cli(&out, "model run --model %s --ids 1,256", TINY "/llama");
    if (status != 1 || !strstr(out, "outside the vocabulary")) fail_msg("attn model run, bad id: %d:\n%s", status, out);
    free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qwen3_sharded),
        cmocka_unit_test(test_qwen2_bf16),
        cmocka_unit_test(test_gemma3_f16),
        cmocka_unit_test(test_llama),
        cmocka_unit_test(test_llama_gguf_unpermuted),
        cmocka_unit_test(test_qwen3_gguf),
        cmocka_unit_test(test_rope_linear),
        cmocka_unit_test(test_rope_llama3),
        cmocka_unit_test(test_rope_yarn),
        cmocka_unit_test(test_rope_gemma3_linear),
        cmocka_unit_test(test_partial_rotary),
        cmocka_unit_test(test_cli),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
