/*
 * test_decoder_backward.c — attn_decoder_backward (attn_decoder.h,
 * "gradients") against central finite differences of the forward itself:
 * for a metric f = sum c . logits (c random, so dlogits = c) and a hook
 * point P, a forward hook adds +-eps times a random direction u at P and
 * (f(+eps) - f(-eps)) / 2 eps must equal <grad_P, u>.  Every point the
 * backward shows, on a tiny Qwen2 (biases, SiLU) and a tiny Gemma 3
 * (QK-norm, post-norms, tanh-GELU, sliding window, tied head): the rules
 * of each operation and their chaining are checked at once, end to end.
 * Then: the same bits for any thread count, writes of a gradient hook flow
 * on, and the refusals.
 */
#include "testutil.h"

#include "attn.h"
#include "attn_decoder.h"
#include "tiny_model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { L = 6 };

/* A forward hook adding eps * u at one (point, layer). */
typedef struct nudge {
    attn_decoder_hook_point point;
    int64_t layer;
    double eps;
    const float *u; /* as many values as the point's tensor */
} nudge;

static int nudge_hook(void *user, const attn_decoder_hook_tensor *t) {
    const nudge *n = user;
    if (t->point != n->point || t->layer != n->layer) return 0;
    size_t count = 1;
    for (int i = 0; i < t->ndim; i++) count *= (size_t)t->shape[i];
    for (size_t i = 0; i < count; i++)
        if (isfinite(t->data[i])) t->data[i] += (float)(n->eps * n->u[i]);
    return 0;
}

static double metric(attn_decoder *m, const int32_t *ids, const float *c, int64_t V, nudge *n) {
    float *logits = malloc((size_t)(L * V) * sizeof *logits);
    attn_decoder_outputs out = ATTN_DECODER_OUTPUTS_INIT;
    out.logits = logits;
    if (n) {
        out.tensor_hook = nudge_hook;
        out.tensor_hook_user = n;
        out.tensor_hook_points = 1u << n->point;
    }
    assert_ok(attn_decoder_forward(m, ids, L, &out));
    double f = 0;
    for (int64_t i = 0; i < L * V; i++) f += (double)c[i] * logits[i];
    free(logits);
    return f;
}

/* The backward's gradient at one (point, layer), kept. */
typedef struct kept {
    attn_decoder_hook_point point;
    int64_t layer;
    float *grad;
    size_t count;
    int calls;
} kept;

static int keep_grad(void *user, const attn_decoder_hook_tensor *t) {
    kept *k = user;
    k->calls++;
    if (t->point != k->point || t->layer != k->layer) return 0;
    k->count = 1;
    for (int i = 0; i < t->ndim; i++) k->count *= (size_t)t->shape[i];
    k->grad = malloc(k->count * sizeof(float));
    memcpy(k->grad, t->data, k->count * sizeof(float));
    return 0;
}

static void check_spec(const tiny_spec *spec, uint64_t seed) {
    attn_decoder *m = tiny_decoder(spec, seed);
    const attn_decoder_config *cfg = attn_decoder_get_config(m);
    const int64_t V = cfg->vocab;
    const int32_t ids[L] = {1, 7, 3, 9, 4, 11};
    test_rng rng;
    test_rng_seed(&rng, seed + 1);
    float *c = malloc((size_t)(L * V) * sizeof *c);
    for (int64_t i = 0; i < L * V; i++) c[i] = (float)test_rng_normal(&rng);
    static const attn_decoder_hook_point points[] = {
        ATTN_DECODER_HOOK_RESID_PRE,      ATTN_DECODER_HOOK_LN1_SCALE,     ATTN_DECODER_HOOK_LN1_NORMALIZED,
        ATTN_DECODER_HOOK_Q,              ATTN_DECODER_HOOK_K,             ATTN_DECODER_HOOK_V,
        ATTN_DECODER_HOOK_ROT_Q,          ATTN_DECODER_HOOK_ROT_K,         ATTN_DECODER_HOOK_ATTN_SCORES,
        ATTN_DECODER_HOOK_PATTERN,        ATTN_DECODER_HOOK_Z,             ATTN_DECODER_HOOK_RESULT,
        ATTN_DECODER_HOOK_ATTN_OUT,       ATTN_DECODER_HOOK_RESID_MID,     ATTN_DECODER_HOOK_LN2_SCALE,
        ATTN_DECODER_HOOK_LN2_NORMALIZED, ATTN_DECODER_HOOK_MLP_PRE,       ATTN_DECODER_HOOK_MLP_PRE_LINEAR,
        ATTN_DECODER_HOOK_MLP_POST,       ATTN_DECODER_HOOK_MLP_OUT,       ATTN_DECODER_HOOK_RESID_POST,
        ATTN_DECODER_HOOK_EMBED,          ATTN_DECODER_HOOK_LN_FINAL,      ATTN_DECODER_HOOK_LN_FINAL_SCALE,
    };
    for (size_t p = 0; p < sizeof points / sizeof points[0]; p++) {
        const attn_decoder_hook_point point = points[p];
        const int global = point == ATTN_DECODER_HOOK_EMBED || point == ATTN_DECODER_HOOK_LN_FINAL ||
                           point == ATTN_DECODER_HOOK_LN_FINAL_SCALE;
        const int64_t layer = global ? -1 : 1;
        kept k = {point, layer, NULL, 0, 0};
        attn_decoder_backward_options opt = ATTN_DECODER_BACKWARD_OPTIONS_INIT;
        opt.dlogits = c;
        opt.grad_hook = keep_grad;
        opt.grad_hook_user = &k;
        opt.grad_hook_points = 1u << point;
        assert_ok(attn_decoder_backward(m, ids, L, NULL, &opt));
        assert_non_null(k.grad);
        /* u: the gradient's direction (scaled to unit RMS) plus a random
         * one, so that the signal stands well above float32's rounding of f
         * (a wrong component still shows: along g + e the difference sees
         * |g|^2 + g.e where the backward says |g + e|^2 + ...). */
        float *u = malloc(k.count * sizeof *u);
        double sq = 0, predicted = 0;
        for (size_t i = 0; i < k.count; i++) sq += (double)k.grad[i] * k.grad[i];
        const double rms = sqrt(sq / (double)k.count) + 1e-30;
        for (size_t i = 0; i < k.count; i++) {
            u[i] = (float)(k.grad[i] / rms + test_rng_normal(&rng));
            predicted += (double)k.grad[i] * u[i];
        }
        /* -inf scores stay -inf (nudge_hook adds to finite values only).
         * eps small for the curvature (at 3e-3 Gemma's GELU and the
         * pattern's rows are off by 0.2%, at 1e-3 by < 0.05%); the error
         * allowed: 0.1% of the difference plus float32's rounding of f
         * divided by 2 eps (up to 1e-2 measured). */
        const double eps = 1e-3;
        nudge plus = {point, layer, eps, u}, minus = {point, layer, -eps, u};
        const double measured = (metric(m, ids, c, V, &plus) - metric(m, ids, c, V, &minus)) / (2 * eps);
        char name[96];
        attn_decoder_hook_name(point, layer, name, sizeof name);
        const double err = fabs(measured - predicted), tol = 1e-3 * fabs(measured) + 2e-2;
        print_message("%s %-28s grad.u %12.6f  finite difference %12.6f  (off by %.1e)\n", spec->arch, name,
                      predicted, measured, err);
        if (!(err <= tol)) fail_msg("%s %s: gradient . u = %.6f, finite difference %.6f", spec->arch, name, predicted, measured);
        free(u);
        free(k.grad);
    }
    free(c);
    attn_decoder_free(m);
}

static void test_against_finite_differences(void **state) {
    (void)state;
    check_spec(&TINY_QWEN, 21);
    check_spec(&TINY_GEMMA, 22);
}

/* d_embed and every point's gradient, the same bits with 1, 2 and 3 threads. */
static void test_same_bits_any_thread_count(void **state) {
    (void)state;
    attn_decoder *m = tiny_decoder(&TINY_GEMMA, 5);
    const attn_decoder_config *cfg = attn_decoder_get_config(m);
    const int64_t V = cfg->vocab, d = cfg->d_model;
    const int32_t ids[L] = {2, 5, 8, 1, 3, 4};
    float *c = calloc((size_t)(L * V), sizeof *c);
    c[(L - 1) * V + 3] = 1.0f, c[(L - 1) * V + 7] = -1.0f; /* a logit difference at the last position */
    float *d_embed[3];
    const char *saved = getenv("ATTN_NUM_THREADS");
    char *keep = saved ? strdup(saved) : NULL;
    for (int r = 0; r < 3; r++) {
        char n[8];
        snprintf(n, sizeof n, "%d", r + 1);
        setenv("ATTN_NUM_THREADS", n, 1);
        d_embed[r] = malloc((size_t)(L * d) * sizeof(float));
        attn_decoder_backward_options opt = ATTN_DECODER_BACKWARD_OPTIONS_INIT;
        opt.dlogits = c;
        opt.d_embed = d_embed[r];
        assert_ok(attn_decoder_backward(m, ids, L, NULL, &opt));
    }
    for (int r = 1; r < 3; r++) assert_memory_equal(d_embed[r], d_embed[0], (size_t)(L * d) * sizeof(float));
    double norm = 0;
    for (int64_t i = 0; i < L * d; i++) norm += fabs(d_embed[0][i]);
    assert_true(norm > 0);
    for (int r = 0; r < 3; r++) free(d_embed[r]);
    if (keep) setenv("ATTN_NUM_THREADS", keep, 1);
    else unsetenv("ATTN_NUM_THREADS");
    free(keep);
    free(c);
    attn_decoder_free(m);
}

/* A gradient hook that zeroes resid_mid's gradient at layer 1: nothing
 * reaches the layers below through it, only through... nothing else, so
 * d_embed is what flows around layer 1's FFN only: zero. */
static int zero_at_resid_mid(void *user, const attn_decoder_hook_tensor *t) {
    (void)user;
    if (t->layer == 1) memset(t->data, 0, (size_t)(t->shape[0] * t->shape[1]) * sizeof(float));
    return 0;
}

static void test_gradient_writes_flow_on(void **state) {
    (void)state;
    attn_decoder *m = tiny_decoder(&TINY_QWEN, 9);
    const attn_decoder_config *cfg = attn_decoder_get_config(m);
    const int64_t V = cfg->vocab, d = cfg->d_model;
    const int32_t ids[L] = {2, 5, 8, 1, 3, 4};
    float *c = calloc((size_t)(L * V), sizeof *c), *d_embed = malloc((size_t)(L * d) * sizeof(float));
    for (int64_t i = 0; i < L * V; i++) c[i] = (float)((i % 7) - 3) * 0.1f;
    attn_decoder_backward_options opt = ATTN_DECODER_BACKWARD_OPTIONS_INIT;
    opt.dlogits = c;
    opt.d_embed = d_embed;
    opt.grad_hook = zero_at_resid_mid;
    opt.grad_hook_points = 1u << ATTN_DECODER_HOOK_RESID_MID;
    assert_ok(attn_decoder_backward(m, ids, L, NULL, &opt));
    /* resid_mid's gradient zero: resid_pre's is only what flows through
     * attention from it, also zero (every path passes resid_mid). */
    for (int64_t i = 0; i < L * d; i++) assert_true(d_embed[i] == 0.0f);
    /* Refusals. */
    assert_refused(attn_decoder_backward(m, ids, L, NULL, NULL), ATTN_ERR_INVALID_ARGUMENT, "dlogits is needed");
    attn_decoder_backward_options none = ATTN_DECODER_BACKWARD_OPTIONS_INIT;
    assert_refused(attn_decoder_backward(m, ids, L, NULL, &none), ATTN_ERR_INVALID_ARGUMENT, "dlogits is NULL");
    opt.grad_hook_points = 1u << ATTN_DECODER_HOOK_Q_INPUT;
    assert_refused(attn_decoder_backward(m, ids, L, NULL, &opt), ATTN_ERR_UNSUPPORTED, "hook_q_input");
    attn_decoder_outputs last = ATTN_DECODER_OUTPUTS_INIT;
    last.last_only = 1;
    opt.grad_hook_points = 0;
    assert_refused(attn_decoder_backward(m, ids, L, &last, &opt), ATTN_ERR_INVALID_ARGUMENT, "last_only");
    const int32_t bad[L] = {2, 5, 8, 1, 3, 999};
    assert_refused(attn_decoder_backward(m, bad, L, NULL, &opt), ATTN_ERR_INVALID_ARGUMENT, "outside the vocabulary");
    free(c);
    free(d_embed);
    attn_decoder_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_against_finite_differences),
        cmocka_unit_test(test_same_bits_any_thread_count),
        cmocka_unit_test(test_gradient_writes_flow_on),
    };
    return cmocka_run_group_tests(tests, NULL, test_group_teardown);
}
