/*
 * attribution.c — attribution patching (Nanda 2023) on a decoder: the
 * first-order estimate of every activation patch of one hook point, from
 * one forward and backward of the clean run and one forward of the
 * corrupted run, instead of one patched forward per layer, position and
 * head.
 *
 * Shape legend: Lc, Lx the clean and the corrupted run's tokens; N layers;
 * each point's tensor seen as [P, H, W] (model_interp.h's hook_view);
 *   estimate [rows, K, H]   rows = N (1 for the points without a layer),
 *                           K positions, H the point's heads (1 for ROWS)
 *
 * For f = logit[token] - logit[other] at the clean run's last position and
 * an activation a of the clean run, patching in the corrupted run's a' moves
 * f by  f(a') - f(a) ~ (a' - a) . df/da.  The gradient comes from
 * attn_decoder_backward with dlogits = e_token - e_other on the last row;
 * its own forward keeps the clean activations (the record hook), so the
 * clean run is computed once.  The estimate is exact for a point the
 * metric is linear in (ln_final.hook_normalized), and the tangent of the
 * patch's effect everywhere (tests/interp/test_attribution.c checks both).
 */
#include "interp/model/model_interp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A point attribution patching can estimate: a position axis first, and a
 * gradient from attn_decoder_backward. */
static bool attributable(attn_decoder_hook_point point) {
    if ((unsigned)point >= ATTN_DECODER_HOOK_POINTS) return false;
    if (attn_hook_site_layout((attn_hook_site)point) == ATTN_HOOK_HEADS_FIRST) return false;
    return point != ATTN_DECODER_HOOK_Q_INPUT && point != ATTN_DECODER_HOOK_K_INPUT &&
           point != ATTN_DECODER_HOOK_V_INPUT;
}

int64_t attn_model_attribution_heads(const attn_decoder *m, attn_decoder_hook_point point) {
    if (!m || (unsigned)point >= ATTN_DECODER_HOOK_POINTS) return 0;
    const attn_decoder_config *c = attn_decoder_get_config(m);
    switch (point) {
    case ATTN_DECODER_HOOK_Q:
    case ATTN_DECODER_HOOK_ROT_Q:
    case ATTN_DECODER_HOOK_Z:
    case ATTN_DECODER_HOOK_RESULT: return c->n_heads;
    case ATTN_DECODER_HOOK_K:
    case ATTN_DECODER_HOOK_V:
    case ATTN_DECODER_HOOK_ROT_K: return c->n_kv_heads;
    default: return 1;
    }
}

/* What the gradient hook needs: both runs' activations, the positions in
 * each, and where the sums go. */
typedef struct attribution_ctx {
    const attn_model_record *clean, *corrupted;
    const int64_t *clean_pos, *corrupted_pos; /* [K] */
    int64_t K, H;
    double *estimate;                         /* [rows, K, H] */
} attribution_ctx;

static int estimate_hook(void *user, const attn_decoder_hook_tensor *g) {
    const attribution_ctx *c = user;
    const kept_tensor *a = attn__model_record_find(c->clean, g->point, g->layer);
    const kept_tensor *b = attn__model_record_find(c->corrupted, g->point, g->layer);
    if (!a || !b) return 0; /* not the point asked for: the backward shows only it */
    const hook_view vg = hook_view_of(g->point, g->ndim, g->shape), va = hook_view_of(a->point, a->ndim, a->shape),
                    vb = hook_view_of(b->point, b->ndim, b->shape);
    double *out = c->estimate + (g->layer < 0 ? 0 : g->layer) * c->K * c->H;
    for (int64_t k = 0; k < c->K; k++)
        for (int64_t h = 0; h < c->H; h++) {
            const float *grad = hook_view_row(g->data, &vg, c->clean_pos[k], h);
            const float *x = hook_view_row(a->data, &va, c->clean_pos[k], h);
            const float *y = hook_view_row(b->data, &vb, c->corrupted_pos[k], h);
            double sum = 0;
            for (int64_t w = 0; w < vg.W; w++)
                if (isfinite(x[w]) && isfinite(y[w])) sum += ((double)y[w] - x[w]) * grad[w];
            out[k * c->H + h] = sum;
        }
    return 0;
}

static double metric_of(const float *logits, int64_t token, int64_t other) {
    return (double)logits[token] - (other >= 0 ? (double)logits[other] : 0.0);
}

attn_status attn_model_attribution_patching(const attn_decoder *m, const int32_t *clean, int64_t clean_len,
                                            const int32_t *corrupted, int64_t corrupted_len,
                                            attn_decoder_hook_point point, const int64_t *positions, int64_t count,
                                            int64_t token, int64_t other, double *estimate, double *metric) {
    if (!m || !clean || !corrupted || !estimate || (count > 0 && !positions))
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "%s: %s is NULL", __func__,
                          !m ? "the decoder" : !clean ? "clean" : !corrupted ? "corrupted" : !estimate ? "estimate"
                                                                                                     : "positions");
    const attn_decoder_config *cfg = attn_decoder_get_config(m);
    const int64_t V = cfg->vocab;
    if (clean_len < 1 || corrupted_len < 1 || count < 0)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "%s: %lld clean and %lld corrupted tokens, %lld positions "
                          "(at least one token each)", __func__, (long long)clean_len, (long long)corrupted_len,
                          (long long)count);
    if (!attributable(point)) {
        const char *name = (unsigned)point < ATTN_DECODER_HOOK_POINTS ? attn_decoder_hook_suffix(point) : NULL;
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "%s: %s%s is not a point attribution patching estimates (its "
                          "first axis must be the position, and hook_q/k/v_input have no gradient: patch "
                          "hook_resid_pre)", __func__, name ? name : "point ", name ? "" : "out of range");
    }
    if (token < 0 || token >= V || other < -1 || other >= V)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "%s: token %lld, other %lld: expected ids in [0, %lld) (other "
                          "-1: none)", __func__, (long long)token, (long long)other, (long long)V);
    const int64_t K = count ? count : clean_len, H = attn_model_attribution_heads(m, point);
    const bool per_layer = attn_hook_site_per_layer((attn_hook_site)point);
    const int64_t rows = per_layer ? cfg->n_layers : 1;

    attn_status st = ATTN_OK;
    attn_model_record kept_clean = {0}, kept_corrupted = {0};
    int64_t *at = malloc((size_t)(2 * K) * sizeof *at);
    float *dlogits = calloc((size_t)(clean_len * V), sizeof *dlogits);
    float *logits = malloc((size_t)(clean_len * V) * sizeof *logits);
    /* The corrupted run's last row of logits is all the metric needs; but
     * with last_only the final norm runs on that row alone, and ln_final's
     * points would show [1, d]: for them, every row. */
    const bool final_norm = point == ATTN_DECODER_HOOK_LN_FINAL || point == ATTN_DECODER_HOOK_LN_FINAL_SCALE;
    const int64_t corrupted_rows = final_norm ? corrupted_len : 1;
    float *last = malloc((size_t)(corrupted_rows * V) * sizeof *last);
    if (!at || !dlogits || !logits || !last) {
        st = attn__fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", __func__);
        goto done;
    }
    int64_t paired;
    if ((st = attn__model_pair_positions(positions, count, clean_len, corrupted_len, at, at + K, &paired))) {
        st = attn__fail(st, "attribution patching (clean: the target, corrupted: the source): %s", attn_last_error());
        goto done;
    }
    memset(estimate, 0, (size_t)(rows * K * H) * sizeof *estimate);

    /* The corrupted run: its activations at the point, and its metric. */
    const attn_model_patch keep = {.kind = ATTN_MODEL_PATCH_SOURCE, .point = point, .layer = ATTN_ALL};
    record_ctx corrupted_ctx = {&keep, 1, &kept_corrupted, ATTN_OK, ""};
    attn_decoder_outputs x = ATTN_DECODER_OUTPUTS_INIT;
    x.logits = last;
    x.last_only = !final_norm;
    x.tensor_hook = attn__model_record_hook;
    x.tensor_hook_user = &corrupted_ctx;
    x.tensor_hook_points = 1u << point;
    kept_corrupted.len = corrupted_len;
    st = attn_decoder_forward(m, corrupted, corrupted_len, &x);
    if (corrupted_ctx.failed) st = attn__fail(corrupted_ctx.failed, "%s", corrupted_ctx.message);
    if (st) goto done;
    const double f_corrupted = metric_of(last + (corrupted_rows - 1) * V, token, other);

    /* The clean run, forward (keeping its activations) and backward. */
    record_ctx clean_ctx = {&keep, 1, &kept_clean, ATTN_OK, ""};
    kept_clean.len = clean_len;
    attn_decoder_outputs c = ATTN_DECODER_OUTPUTS_INIT;
    c.logits = logits;
    c.tensor_hook = attn__model_record_hook;
    c.tensor_hook_user = &clean_ctx;
    c.tensor_hook_points = 1u << point;
    dlogits[(clean_len - 1) * V + token] += 1.0f;
    if (other >= 0) dlogits[(clean_len - 1) * V + other] -= 1.0f;
    attribution_ctx actx = {&kept_clean, &kept_corrupted, at, at + K, K, H, estimate};
    attn_decoder_backward_options b = ATTN_DECODER_BACKWARD_OPTIONS_INIT;
    b.dlogits = dlogits;
    b.grad_hook = estimate_hook;
    b.grad_hook_user = &actx;
    b.grad_hook_points = 1u << point;
    st = attn_decoder_backward(m, clean, clean_len, &c, &b);
    if (clean_ctx.failed) st = attn__fail(clean_ctx.failed, "%s", clean_ctx.message);
    if (st) goto done;
    if (metric) {
        metric[0] = metric_of(logits + (clean_len - 1) * V, token, other);
        metric[1] = f_corrupted;
    }
done:
    attn__model_record_clear(&kept_clean);
    attn__model_record_clear(&kept_corrupted);
    free(at);
    free(dlogits);
    free(logits);
    free(last);
    return st;
}
