/*
 * test_attribution.c — attn_model_attribution_patching (attn_model_interp.h)
 * against the patches it estimates, done for real with a forward hook:
 *   - exact where the metric is linear in the activation: the final norm's
 *     output (ln_final.hook_normalized) reaches the logits through W_U
 *     alone, so the estimate is the real patch's effect;
 *   - the tangent elsewhere: patching clean + eps (corrupted - clean) at one
 *     (layer, position, head) moves f by eps * estimate to first order
 *     (central differences), at the stream, per-head and MLP points of a
 *     tiny Qwen2 and a tiny Gemma 3, with runs of different lengths aligned
 *     from the end;
 *   - the metrics it reports are the runs' own; the refusals.
 */
#include "testutil.h"

#include "attn.h"
#include "attn_decoder.h"
#include "attn_model_interp.h"
#include "tiny_model.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { LC = 6, LX = 5, TOKEN = 3, OTHER = 7 };
static const int32_t clean_ids[LC] = {1, 7, 3, 9, 4, 11};
static const int32_t corrupted_ids[LX] = {2, 5, 8, 10, 6};

/* A copy of one (point, layer)'s tensor, kept by a forward hook. */
typedef struct kept {
    attn_decoder_hook_point point;
    int64_t layer;
    float *data;
    int ndim;
    int64_t shape[3];
} kept;

static int keep_hook(void *user, const attn_decoder_hook_tensor *t) {
    kept *k = user;
    if (t->point != k->point || t->layer != k->layer) return 0;
    size_t count = 1;
    for (int i = 0; i < t->ndim; i++) count *= (size_t)t->shape[i];
    k->data = malloc(count * sizeof(float));
    memcpy(k->data, t->data, count * sizeof(float));
    k->ndim = t->ndim;
    memcpy(k->shape, t->shape, sizeof k->shape);
    return 0;
}

static kept record(attn_decoder *m, const int32_t *ids, int64_t L, attn_decoder_hook_point point, int64_t layer) {
    kept k = {point, layer, NULL, 0, {0}};
    float *logits = malloc((size_t)(L * attn_decoder_get_config(m)->vocab) * sizeof *logits);
    attn_decoder_outputs o = ATTN_DECODER_OUTPUTS_INIT;
    o.logits = logits; /* every row: the final norm runs only for the rows asked for */
    o.tensor_hook = keep_hook;
    o.tensor_hook_user = &k;
    o.tensor_hook_points = 1u << point;
    assert_ok(attn_decoder_forward(m, ids, L, &o));
    free(logits);
    assert_non_null(k.data);
    return k;
}

/* A forward hook moving the clean row (position pc, head h; h -1: the
 * whole position) toward the corrupted one (position px): row += eps (y - row). */
typedef struct move {
    const kept *corrupted;
    int64_t pc, px, head;
    double eps;
} move;

static int move_hook(void *user, const attn_decoder_hook_tensor *t) {
    const move *mv = user;
    if (t->point != mv->corrupted->point || t->layer != mv->corrupted->layer) return 0;
    const int64_t H = t->ndim == 3 ? t->shape[1] : 1, W = t->shape[t->ndim - 1];
    for (int64_t h = 0; h < H; h++) {
        if (mv->head >= 0 && h != mv->head) continue;
        float *x = t->data + (mv->pc * H + h) * W;
        const float *y = mv->corrupted->data + (mv->px * H + h) * W;
        for (int64_t w = 0; w < W; w++) x[w] += (float)(mv->eps * ((double)y[w] - x[w]));
    }
    return 0;
}

static double metric(attn_decoder *m, move *mv) {
    const int64_t V = attn_decoder_get_config(m)->vocab;
    float *logits = malloc((size_t)(LC * V) * sizeof *logits);
    attn_decoder_outputs o = ATTN_DECODER_OUTPUTS_INIT;
    o.logits = logits;
    if (mv) {
        o.tensor_hook = move_hook;
        o.tensor_hook_user = mv;
        o.tensor_hook_points = 1u << mv->corrupted->point;
    }
    assert_ok(attn_decoder_forward(m, clean_ids, LC, &o));
    const double f = (double)logits[(LC - 1) * V + TOKEN] - logits[(LC - 1) * V + OTHER];
    free(logits);
    return f;
}

static void test_exact_where_linear(void **state) {
    (void)state;
    attn_decoder *m = tiny_decoder(&TINY_QWEN, 31);
    const int64_t pos = -1;
    double estimate, metrics[2];
    assert_ok(attn_model_attribution_patching(m, clean_ids, LC, corrupted_ids, LX, ATTN_DECODER_HOOK_LN_FINAL, &pos,
                                              1, TOKEN, OTHER, &estimate, metrics));
    kept y = record(m, corrupted_ids, LX, ATTN_DECODER_HOOK_LN_FINAL, -1);
    move full = {&y, LC - 1, LX - 1, -1, 1.0};
    const double base = metric(m, NULL), patched = metric(m, &full);
    print_message("ln_final.hook_normalized@-1: estimate %.6f, real patch %.6f\n", estimate, patched - base);
    assert_true(fabs(estimate - (patched - base)) <= 1e-4 * fabs(patched - base) + 1e-4);
    assert_true(fabs(patched - base) > 1e-2);
    /* The metrics are the runs' own. */
    float *lx = malloc((size_t)attn_decoder_get_config(m)->vocab * sizeof *lx);
    attn_decoder_outputs o = ATTN_DECODER_OUTPUTS_INIT;
    o.logits = lx;
    o.last_only = 1;
    assert_ok(attn_decoder_forward(m, corrupted_ids, LX, &o));
    assert_true(metrics[0] == base);
    assert_true(metrics[1] == (double)lx[TOKEN] - lx[OTHER]);
    free(lx);
    free(y.data);
    attn_decoder_free(m);
}

static void check_tangents(const tiny_spec *spec, uint64_t seed) {
    attn_decoder *m = tiny_decoder(spec, seed);
    const attn_decoder_config *cfg = attn_decoder_get_config(m);
    static const attn_decoder_hook_point points[] = {
        ATTN_DECODER_HOOK_RESID_PRE, ATTN_DECODER_HOOK_V,        ATTN_DECODER_HOOK_ROT_K,
        ATTN_DECODER_HOOK_Z,         ATTN_DECODER_HOOK_ATTN_OUT, ATTN_DECODER_HOOK_MLP_POST,
        ATTN_DECODER_HOOK_RESID_POST, ATTN_DECODER_HOOK_EMBED,
    };
    const int64_t positions[2] = {-1, -3}; /* aligned from the end: the runs differ in length */
    const int64_t layer = 1;
    for (size_t p = 0; p < sizeof points / sizeof points[0]; p++) {
        const attn_decoder_hook_point point = points[p];
        const bool global = point == ATTN_DECODER_HOOK_EMBED;
        const int64_t H = attn_model_attribution_heads(m, point), rows = global ? 1 : cfg->n_layers;
        double *estimate = malloc((size_t)(rows * 2 * H) * sizeof *estimate);
        assert_ok(attn_model_attribution_patching(m, clean_ids, LC, corrupted_ids, LX, point, positions, 2, TOKEN,
                                                  OTHER, estimate, NULL));
        const int64_t at = global ? -1 : layer;
        kept y = record(m, corrupted_ids, LX, point, at);
        for (int64_t k = 0; k < 2; k++) {
            const int64_t head = H > 1 ? H - 1 : -1;
            const double eps = 1e-3;
            move plus = {&y, LC + positions[k], LX + positions[k], head, eps};
            move minus = plus;
            minus.eps = -eps;
            const double measured = (metric(m, &plus) - metric(m, &minus)) / (2 * eps);
            const double predicted = estimate[((global ? 0 : layer) * 2 + k) * H + (H > 1 ? H - 1 : 0)];
            char name[96];
            attn_decoder_hook_name(point, at, name, sizeof name);
            print_message("%s %-26s @%lld head %lld: estimate %10.6f  central difference %10.6f\n", spec->arch,
                          name, (long long)positions[k], (long long)head, predicted, measured);
            if (!(fabs(measured - predicted) <= 2e-3 * fabs(measured) + 2e-2))
                fail_msg("%s %s @%lld: estimate %.6f, central difference %.6f", spec->arch, name,
                         (long long)positions[k], predicted, measured);
        }
        free(y.data);
        free(estimate);
    }
    attn_decoder_free(m);
}

static void test_tangent_of_the_patch(void **state) {
    (void)state;
    check_tangents(&TINY_QWEN, 41);
    check_tangents(&TINY_GEMMA, 42);
}

/* Every position of runs of one length: the same numbers as listing them. */
static void test_every_position(void **state) {
    (void)state;
    attn_decoder *m = tiny_decoder(&TINY_GEMMA, 43);
    const int64_t N = attn_decoder_get_config(m)->n_layers;
    const int32_t other_ids[LC] = {5, 7, 2, 9, 1, 11};
    const int64_t all[LC] = {0, 1, 2, 3, 4, 5};
    double *a = malloc((size_t)(N * LC) * sizeof *a), *b = malloc((size_t)(N * LC) * sizeof *b);
    assert_ok(attn_model_attribution_patching(m, clean_ids, LC, other_ids, LC, ATTN_DECODER_HOOK_RESID_PRE, NULL, 0,
                                              TOKEN, -1, a, NULL));
    assert_ok(attn_model_attribution_patching(m, clean_ids, LC, other_ids, LC, ATTN_DECODER_HOOK_RESID_PRE, all, LC,
                                              TOKEN, -1, b, NULL));
    assert_memory_equal(a, b, (size_t)(N * LC) * sizeof *a);
    /* Position 1 holds the same token (7) in both: nothing to patch at layer 0. */
    assert_true(a[1] == 0.0);
    free(a);
    free(b);
    attn_decoder_free(m);
}

static void test_refusals(void **state) {
    (void)state;
    attn_decoder *m = tiny_decoder(&TINY_QWEN, 44);
    const int64_t N = attn_decoder_get_config(m)->n_layers, V = attn_decoder_get_config(m)->vocab;
    double *estimate = malloc((size_t)(N * LC * 8) * sizeof *estimate);
    const int64_t last = -1, far = -6;
#define ATTRIBUTE(point, positions, count, token, needle)                                                     \
    assert_refused(attn_model_attribution_patching(m, clean_ids, LC, corrupted_ids, LX, point, positions, count, \
                                                   token, OTHER, estimate, NULL),                             \
                   ATTN_ERR_INVALID_ARGUMENT, needle)
    ATTRIBUTE(ATTN_DECODER_HOOK_PATTERN, &last, 1, TOKEN, "attn.hook_pattern");
    ATTRIBUTE(ATTN_DECODER_HOOK_Q_INPUT, &last, 1, TOKEN, "no gradient");
    ATTRIBUTE(ATTN_DECODER_HOOK_RESID_PRE, NULL, 0, TOKEN, "needs texts of the same length");
    ATTRIBUTE(ATTN_DECODER_HOOK_RESID_PRE, &far, 1, TOKEN, "position -6");
    ATTRIBUTE(ATTN_DECODER_HOOK_RESID_PRE, &last, 1, V, "token");
    ATTRIBUTE((attn_decoder_hook_point)ATTN_DECODER_HOOK_POINTS, &last, 1, TOKEN, "out of range");
#undef ATTRIBUTE
    free(estimate);
    attn_decoder_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exact_where_linear),
        cmocka_unit_test(test_tangent_of_the_patch),
        cmocka_unit_test(test_every_position),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, test_group_teardown);
}
