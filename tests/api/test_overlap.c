/*
 * test_overlap.c — outputs that share memory with inputs, or with each
 * other, are refused before anything is written (src/base/overlap.h), by
 * every entry point that writes: sdpa forward, scores, backward, traced;
 * the module forward and backward; the projections; the KV cache's attend.
 * The audit's case first: attn_sdpa_forward(q, k, v, out = k) computed a
 * wrong answer that differed with the thread count.  Then the rule's edges:
 * buffers that only touch, and inputs that share memory, are accepted and
 * give the answer of separate buffers; a strided output interleaved with an
 * input without touching its elements is refused (the documented,
 * conservative rule: byte extents are compared).
 *
 * Shape legend: q [B, L, Hq, D]  k, v [B, S, Hkv, D]  out [B, L, Hq, D]
 *               weights [B, Hq, L, S]  lse [B, Hq, L]
 */
#include "testutil.h"

#include "attn.h"
#include "attn_cache.h"
#include "attn_interp.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static float *random_floats(test_rng *r, int64_t n) {
    float *x = malloc(sizeof(float) * (size_t)n);
    test_fill_normal(r, x, n, 1.0);
    return x;
}

/* st is ATTN_ERR_INVALID_ARGUMENT and the message names both tensors. */
static void expect_refused(attn_status st, const char *first, const char *second) {
    if (st != ATTN_ERR_INVALID_ARGUMENT || !strstr(attn_last_error(), first) || !strstr(attn_last_error(), second) ||
        !strstr(attn_last_error(), "overlap"))
        fail_msg("expected a refusal naming %s and %s; got %s: %s", first, second, attn_status_str(st),
                 attn_last_error());
}

/* The audit's reproducer: [1, 512, 2, 64] float32, out = k (and, causal,
 * out = v).  Refused, and k (v) left as it was. */
static void sdpa_out_aliasing_k_or_v_is_refused(void **state) {
    (void)state;
    enum { L = 512, H = 2, D = 64 };
    test_rng r;
    test_rng_seed(&r, 33);
    float *q = random_floats(&r, L * H * D), *k = random_floats(&r, L * H * D), *v = random_floats(&r, L * H * D);
    float *k_copy = malloc(sizeof(float) * L * H * D), *v_copy = malloc(sizeof(float) * L * H * D);
    memcpy(k_copy, k, sizeof(float) * L * H * D);
    memcpy(v_copy, v, sizeof(float) * L * H * D);
    attn_tensor tq = attn_tensor_3d(q, L, H, D), tk = attn_tensor_3d(k, L, H, D), tv = attn_tensor_3d(v, L, H, D);
    for (int threads = 1; threads <= 2; threads++) {
        attn_sdpa_options opt = ATTN_SDPA_OPTIONS_INIT;
        opt.threads = threads;
        expect_refused(attn_sdpa_forward(&tq, &tk, &tv, &opt, &tk, NULL, NULL), "out", "k");
        opt.causal = 1;
        expect_refused(attn_sdpa_forward(&tq, &tk, &tv, &opt, &tv, NULL, NULL), "out", "v");
        expect_refused(attn_sdpa_forward(&tq, &tk, &tv, &opt, &tq, NULL, NULL), "out", "q");
    }
    assert_memory_equal(k, k_copy, sizeof(float) * L * H * D);
    assert_memory_equal(v, v_copy, sizeof(float) * L * H * D);
    free(q), free(k), free(v), free(k_copy), free(v_copy);
}

enum { B = 2, L = 5, S = 7, HQ = 2, HKV = 1, D = 3 };
#define QN (B * L * HQ * D)
#define KN (B * S * HKV * D)
#define WN (B * HQ * L * S)
#define LN (B * HQ * L)

/* weights, lse, the options' arrays and the workspace: every pair named. */
static void sdpa_every_output_against_every_input(void **state) {
    (void)state;
    test_rng r;
    test_rng_seed(&r, 5);
    float *q = random_floats(&r, QN), *k = random_floats(&r, KN), *v = random_floats(&r, KN);
    float *out = malloc(sizeof(float) * QN), *weights = malloc(sizeof(float) * WN), *lse = malloc(sizeof(float) * LN);
    float *bias = random_floats(&r, WN);
    attn_tensor tq = attn_tensor_4d(q, B, L, HQ, D), tk = attn_tensor_4d(k, B, S, HKV, D),
                tv = attn_tensor_4d(v, B, S, HKV, D), to = attn_tensor_4d(out, B, L, HQ, D);
    attn_sdpa_options opt = ATTN_SDPA_OPTIONS_INIT;
    assert_int_equal(attn_sdpa_forward(&tq, &tk, &tv, &opt, &to, weights, lse), ATTN_OK);

    /* weights and lse over inputs; over out; over each other. */
    expect_refused(attn_sdpa_forward(&tq, &tk, &tv, &opt, &to, k, NULL), "weights", "k");
    expect_refused(attn_sdpa_forward(&tq, &tk, &tv, &opt, &to, NULL, v + 1), "lse", "v");
    expect_refused(attn_sdpa_forward(&tq, &tk, &tv, &opt, &to, out, NULL), "out", "weights");
    expect_refused(attn_sdpa_forward(&tq, &tk, &tv, &opt, &to, weights, weights + WN - 1), "weights", "lse");
    /* the options' arrays are inputs too */
    opt.bias = bias;
    const int64_t full[4] = {B, HQ, L, S};
    memcpy(opt.bias_shape, full, sizeof full);
    expect_refused(attn_sdpa_forward(&tq, &tk, &tv, &opt, &to, bias, NULL), "weights", "opt.bias");
    opt.bias = NULL;
    int64_t *lengths = (int64_t *)(void *)out; /* read from where out is written */
    lengths[0] = S, lengths[1] = 3;
    opt.key_lengths = lengths;
    expect_refused(attn_sdpa_forward(&tq, &tk, &tv, &opt, &to, NULL, NULL), "out", "opt.key_lengths");
    opt.key_lengths = NULL;
    /* a workspace is written: it may not hold an input or an output */
    size_t bytes;
    assert_int_equal(attn_sdpa_workspace_size(&tq, &tk, &tv, &opt, &bytes), ATTN_OK);
    opt.workspace = weights;
    opt.workspace_size = bytes;
    expect_refused(attn_sdpa_forward(&tq, &tk, &tv, &opt, &to, weights, NULL), "weights", "opt.workspace");
    opt.workspace = q;
    opt.workspace_size = sizeof(float) * QN;
    expect_refused(attn_sdpa_forward(&tq, &tk, &tv, &opt, &to, NULL, NULL), "opt.workspace", "q");
    opt.workspace = NULL;
    opt.workspace_size = 0;
    /* the score table */
    expect_refused(attn_sdpa_scores(&tq, &tk, &opt, q), "scores", "q");
    free(q), free(k), free(v), free(out), free(weights), free(lse), free(bias);
}

/* Every array the options table lists (attn_sdpa_option: each row of an
 * array kind) is an input: laid where weights is written, it is refused by
 * its name, so that an option added to the table is checked with no other
 * change. */
static void every_array_option_of_the_table_is_an_input(void **state) {
    (void)state;
    test_rng r;
    test_rng_seed(&r, 7);
    float *q = random_floats(&r, QN), *k = random_floats(&r, KN), *v = random_floats(&r, KN);
    float *out = malloc(sizeof(float) * QN), *weights = malloc(sizeof(float) * WN);
    attn_tensor tq = attn_tensor_4d(q, B, L, HQ, D), tk = attn_tensor_4d(k, B, S, HKV, D),
                tv = attn_tensor_4d(v, B, S, HKV, D), to = attn_tensor_4d(out, B, L, HQ, D);
    int arrays = 0;
    for (int i = 0; attn_sdpa_option(i); i++) {
        const attn_sdpa_option_info *row = attn_sdpa_option(i);
        attn_sdpa_options opt = ATTN_SDPA_OPTIONS_INIT;
        const int64_t full[4] = {B, HQ, L, S}, lengths[B] = {S, 3};
        switch (row->kind) {
        case ATTN_OPTION_PER_BATCH: memcpy(weights, lengths, sizeof lengths); break;
        case ATTN_OPTION_PER_HEAD:
            for (int h = 0; h < HQ; h++) weights[h] = 0.5f;
            break;
        case ATTN_OPTION_BOOL_TABLE: memset(weights, 1, WN); break;
        case ATTN_OPTION_FLOAT_TABLE:
            for (int j = 0; j < WN; j++) weights[j] = 0.25f;
            break;
        default: continue;
        }
        const void *array = weights;
        memcpy((char *)&opt + row->offset[0], &array, sizeof array);
        if (row->kind == ATTN_OPTION_BOOL_TABLE || row->kind == ATTN_OPTION_FLOAT_TABLE)
            memcpy((char *)&opt + row->offset[1], full, sizeof full);
        char name[64];
        snprintf(name, sizeof name, "opt.%s", row->name);
        expect_refused(attn_sdpa_forward(&tq, &tk, &tv, &opt, &to, weights, NULL), "weights", name);
        arrays++;
    }
    assert_true(arrays >= 5); /* key_lengths, mask, bias, sinks, alibi_slopes */
    free(q), free(k), free(v), free(out), free(weights);
}

/* One allocation [q | k | v | out | weights | lse], each directly after the
 * other, and k = v (inputs may share memory): accepted, and the same bits
 * as separate buffers. */
static void touching_buffers_and_shared_inputs_are_accepted(void **state) {
    (void)state;
    test_rng r;
    test_rng_seed(&r, 6);
    float *all = malloc(sizeof(float) * (QN + 2 * KN + QN + WN + LN));
    float *q = all, *k = q + QN, *v = k + KN, *out = v + KN, *weights = out + QN, *lse = weights + WN;
    test_fill_normal(&r, q, QN + 2 * KN, 1.0);
    float *out2 = malloc(sizeof(float) * QN), *weights2 = malloc(sizeof(float) * WN);
    float *lse2 = malloc(sizeof(float) * LN);
    attn_tensor tq = attn_tensor_4d(q, B, L, HQ, D), tk = attn_tensor_4d(k, B, S, HKV, D),
                tv = attn_tensor_4d(v, B, S, HKV, D), to = attn_tensor_4d(out, B, L, HQ, D),
                to2 = attn_tensor_4d(out2, B, L, HQ, D);
    assert_int_equal(attn_sdpa_forward(&tq, &tk, &tv, NULL, &to, weights, lse), ATTN_OK);
    float *qc = malloc(sizeof(float) * QN), *kc = malloc(sizeof(float) * KN), *vc = malloc(sizeof(float) * KN);
    memcpy(qc, q, sizeof(float) * QN), memcpy(kc, k, sizeof(float) * KN), memcpy(vc, v, sizeof(float) * KN);
    attn_tensor tqc = attn_tensor_4d(qc, B, L, HQ, D), tkc = attn_tensor_4d(kc, B, S, HKV, D),
                tvc = attn_tensor_4d(vc, B, S, HKV, D);
    assert_int_equal(attn_sdpa_forward(&tqc, &tkc, &tvc, NULL, &to2, weights2, lse2), ATTN_OK);
    assert_memory_equal(out, out2, sizeof(float) * QN);
    assert_memory_equal(weights, weights2, sizeof(float) * WN);
    assert_memory_equal(lse, lse2, sizeof(float) * LN);
    /* v = k: the same memory read twice */
    assert_int_equal(attn_sdpa_forward(&tq, &tk, &tk, NULL, &to, NULL, NULL), ATTN_OK);
    assert_int_equal(attn_sdpa_forward(&tqc, &tkc, &tkc, NULL, &to2, NULL, NULL), ATTN_OK);
    assert_memory_equal(out, out2, sizeof(float) * QN);
    free(all), free(out2), free(weights2), free(lse2), free(qc), free(kc), free(vc);
}

/* q's and out's heads interleaved in one buffer [B, L, 2 * HQ, D]: no
 * element is shared, but the extents cross, and the rule (attn.h) refuses
 * it rather than solve which elements meet. */
static void interleaved_strided_views_are_refused(void **state) {
    (void)state;
    test_rng r;
    test_rng_seed(&r, 7);
    float *both = random_floats(&r, 2 * QN), *k = random_floats(&r, KN), *v = random_floats(&r, KN);
    attn_tensor tq = attn_tensor_4d(both, B, L, HQ, D), tk = attn_tensor_4d(k, B, S, HKV, D),
                tv = attn_tensor_4d(v, B, S, HKV, D);
    for (int i = 0; i < 3; i++) tq.stride[i] *= 2; /* rows of 2 * HQ * D: q the first half ... */
    tq.stride[2] = D;
    attn_tensor to = tq;
    to.data = both + HQ * D; /* ... out the second */
    expect_refused(attn_sdpa_forward(&tq, &tk, &tv, NULL, &to, NULL, NULL), "out", "q");
    free(both), free(k), free(v);
}

/* Gradients over the forward's inputs and results, and over each other. */
static void backward_gradients_are_checked(void **state) {
    (void)state;
    test_rng r;
    test_rng_seed(&r, 8);
    float *q = random_floats(&r, QN), *k = random_floats(&r, KN), *v = random_floats(&r, KN);
    float *dout = random_floats(&r, QN), *dq = malloc(sizeof(float) * QN), *dk = malloc(sizeof(float) * KN);
    float *out = malloc(sizeof(float) * QN), *lse = malloc(sizeof(float) * LN);
    attn_tensor tq = attn_tensor_4d(q, B, L, HQ, D), tk = attn_tensor_4d(k, B, S, HKV, D),
                tv = attn_tensor_4d(v, B, S, HKV, D), tdo = attn_tensor_4d(dout, B, L, HQ, D),
                tdq = attn_tensor_4d(dq, B, L, HQ, D), tdk = attn_tensor_4d(dk, B, S, HKV, D),
                to = attn_tensor_4d(out, B, L, HQ, D);
    assert_int_equal(attn_sdpa_forward(&tq, &tk, &tv, NULL, &to, NULL, lse), ATTN_OK);
    assert_int_equal(attn_sdpa_backward(&tq, &tk, &tv, NULL, &to, lse, &tdo, &tdq, &tdk, NULL), ATTN_OK);
    expect_refused(attn_sdpa_backward(&tq, &tk, &tv, NULL, &to, lse, &tdo, &tq, NULL, NULL), "dq", "q");
    attn_tensor over_dout = attn_tensor_4d(dout, B, L, HQ, D);
    expect_refused(attn_sdpa_backward(&tq, &tk, &tv, NULL, &to, lse, &tdo, &over_dout, NULL, NULL), "dq", "dout");
    attn_tensor dv_over_dk = attn_tensor_4d(dk, B, S, HKV, D);
    expect_refused(attn_sdpa_backward(&tq, &tk, &tv, NULL, &to, lse, &tdo, NULL, &tdk, &dv_over_dk), "dk", "dv");
    free(q), free(k), free(v), free(dout), free(dq), free(dk), free(out), free(lse);
}

/* The traced forward and the module: out over x, the weights over W_Q,
 * gradients over x, W_Q and each other; the projections. */
static void module_and_projections_are_checked(void **state) {
    (void)state;
    enum { DM = 4, ROWS = B * L };
    test_rng r;
    test_rng_seed(&r, 9);
    float *x = random_floats(&r, ROWS * DM), *wq = random_floats(&r, DM * HQ * D), *wk = random_floats(&r, DM * HQ * D),
          *wv = random_floats(&r, DM * HQ * D), *dout = random_floats(&r, ROWS * HQ * D);
    float *out = malloc(sizeof(float) * ROWS * HQ * D), *dwq = malloc(sizeof(float) * DM * HQ * D);
    attn_mha m = ATTN_MHA_INIT;
    m.d_model = DM, m.heads = HQ, m.head_dim = D, m.d_out = HQ * D, m.wq = wq, m.wk = wk, m.wv = wv;
    assert_int_equal(attn_mha_forward(&m, x, B, L, NULL, 0, NULL, out, NULL, NULL), ATTN_OK);
    expect_refused(attn_mha_forward(&m, x, B, L, NULL, 0, NULL, x, NULL, NULL), "out", "x");
    expect_refused(attn_mha_forward(&m, x, B, L, NULL, 0, NULL, out, wq, NULL), "weights", "wq");
    expect_refused(attn_mha_forward_traced(&m, x, B, L, NULL, 0, NULL, NULL, 0, NULL, wv), "out", "wv");
    attn_mha_grads g = ATTN_MHA_GRADS_INIT;
    g.dwq = dwq;
    assert_int_equal(attn_mha_backward(&m, x, B, L, NULL, 0, NULL, dout, &g), ATTN_OK);
    g.dx = x;
    expect_refused(attn_mha_backward(&m, x, B, L, NULL, 0, NULL, dout, &g), "grads.dx", "x");
    g.dx = dwq + 1;
    expect_refused(attn_mha_backward(&m, x, B, L, NULL, 0, NULL, dout, &g), "grads.dx", "grads.dwq");
    g.dx = NULL;
    g.dwq = dout;
    expect_refused(attn_mha_backward(&m, x, B, L, NULL, 0, NULL, dout, &g), "grads.dwq", "dout");

    float *q = random_floats(&r, QN), *k = random_floats(&r, KN), *v = random_floats(&r, KN);
    attn_tensor tq = attn_tensor_4d(q, B, L, HQ, D), tk = attn_tensor_4d(k, B, S, HKV, D),
                tv = attn_tensor_4d(v, B, S, HKV, D);
    expect_refused(attn_sdpa_forward_traced(&tq, &tk, &tv, NULL, NULL, 0, NULL, &tq), "out", "q");

    /* y = x.w: y over x, over w; dx over dy, dw over x */
    expect_refused(attn_linear_forward(x, ROWS, DM, wq, NULL, DM, x), "y", "x");
    expect_refused(attn_linear_forward_transposed(x, ROWS, DM, wq, NULL, DM, wq), "y", "w_t");
    expect_refused(attn_linear_backward(x, ROWS, DM, wq, DM, dout, dout, NULL, NULL), "dx", "dy");
    expect_refused(attn_linear_backward(x, ROWS, DM, wq, DM, dout, NULL, x, NULL), "dw", "x");
    free(x), free(wq), free(wk), free(wv), free(dout), free(out), free(dwq), free(q), free(k), free(v);
}

/* The KV cache's attend: out over q, lse over out. */
static void kv_cache_attend_is_checked(void **state) {
    (void)state;
    attn_kv_cache_config cfg = ATTN_KV_CACHE_CONFIG_INIT;
    cfg.layers = 1, cfg.kv_heads = HKV, cfg.head_dim = D, cfg.max_seqs = 1, cfg.capacity = S;
    attn_kv_cache *cache;
    int64_t seq;
    assert_int_equal(attn_kv_cache_new(&cfg, &cache), ATTN_OK);
    assert_int_equal(attn_kv_cache_seq_add(cache, &seq), ATTN_OK);
    test_rng r;
    test_rng_seed(&r, 10);
    float *k = random_floats(&r, S * HKV * D), *v = random_floats(&r, S * HKV * D), *q = random_floats(&r, HQ * D);
    float *out = malloc(sizeof(float) * HQ * D), lse[HQ];
    attn_tensor tk = attn_tensor_4d(k, 1, S, HKV, D), tv = attn_tensor_4d(v, 1, S, HKV, D),
                tq = attn_tensor_4d(q, 1, 1, HQ, D), to = attn_tensor_4d(out, 1, 1, HQ, D);
    assert_int_equal(attn_kv_cache_append(cache, seq, 0, &tk, &tv), ATTN_OK);
    assert_int_equal(attn_kv_cache_attend(cache, 0, 1, &seq, NULL, &tq, NULL, &to, lse), ATTN_OK);
    expect_refused(attn_kv_cache_attend(cache, 0, 1, &seq, NULL, &tq, NULL, &tq, lse), "out", "q");
    expect_refused(attn_kv_cache_attend(cache, 0, 1, &seq, NULL, &tq, NULL, &to, out + 1), "out", "lse");
    attn_kv_cache_free(cache);
    free(k), free(v), free(q), free(out);
}

/* Issue 33's item 8: a workspace_size no buffer can have (a size computed
 * as -1) is refused before the kernel writes through it; a size within
 * reason is trusted (attn.h says so). */
static void implausible_workspace_size_is_refused(void **state) {
    (void)state;
    float q[QN] = {0}, k[KN] = {0}, v[KN] = {0}, out[QN], scratch[16];
    attn_tensor tq = attn_tensor_4d(q, B, L, HQ, D), tk = attn_tensor_4d(k, B, S, HKV, D),
                tv = attn_tensor_4d(v, B, S, HKV, D), to = attn_tensor_4d(out, B, L, HQ, D);
    attn_sdpa_options opt = ATTN_SDPA_OPTIONS_INIT;
    opt.workspace = scratch;
    opt.workspace_size = (size_t)-1;
    assert_int_equal(attn_sdpa_forward(&tq, &tk, &tv, &opt, &to, NULL, NULL), ATTN_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "workspace_size"));
    opt.workspace_size = (size_t)PTRDIFF_MAX + 1;
    assert_int_equal(attn_sdpa_forward(&tq, &tk, &tv, &opt, &to, NULL, NULL), ATTN_ERR_INVALID_ARGUMENT);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(sdpa_out_aliasing_k_or_v_is_refused),
        cmocka_unit_test(sdpa_every_output_against_every_input),
        cmocka_unit_test(every_array_option_of_the_table_is_an_input),
        cmocka_unit_test(touching_buffers_and_shared_inputs_are_accepted),
        cmocka_unit_test(interleaved_strided_views_are_refused),
        cmocka_unit_test(backward_gradients_are_checked),
        cmocka_unit_test(module_and_projections_are_checked),
        cmocka_unit_test(kv_cache_attend_is_checked),
        cmocka_unit_test(implausible_workspace_size_is_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
