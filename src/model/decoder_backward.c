/*
 * decoder_backward.c — the gradient of a scalar metric of the logits with
 * respect to the activation at every hook point (attn_decoder_backward,
 * attn_decoder.h): one forward, through attn__decoder_run with the
 * caller's forward hooks and a recorder of what the backward reads, then
 * the layers in reverse.  Activation gradients only (no weight gradients):
 * what attribution patching and gradient attributions need.
 *
 * Shape legend: L tokens, d d_model, F d_ffn, Hq / Hkv heads, Dh head
 * width, V vocabulary, group = Hq / Hkv.  Per layer the recorder keeps
 *   x, x_mid [L, d]   h1 [L, d]  (ln1's output)   q_rot [L, Hq, Dh]
 *   k_rot, v [L, Hkv, Dh]   p [Hq, L, L]   z [L, Hq*Dh]
 *   g, u, a [L, F]  (mlp.hook_pre, hook_pre_linear, hook_post)
 * and recomputes, from those, the three tensors no hook shows: q and k
 * before QK-norm (h1 through the projections), o before Gemma's
 * post-attention norm (z through W_O) and f before its post-FFN norm (a
 * through W_down): the same products as the forward's, the same values.
 *
 * Rules used (dy the gradient of the output, all sums in double):
 *   rmsnorm y = x r w, r = (mean(x^2) + eps)^-1/2:
 *       dx_j = r w_j dy_j - x_j r^3 / n * sum_i dy_i w_i x_i
 *       d scale (scale = 1 / r, y = x w / scale) = -r^2 sum_i dy_i x_i w_i
 *   y = x W^T:       dx = dy W                       (weights as stored, by rows)
 *   SiLU gate a = s(g) u:  dg = da u s'(g), du = da s(g)
 *   attention z_i = sum_j p_ij v_j, p = softmax(scale q.k):
 *       dp_ij = dz_i . v_j,  ds_ij = p_ij (dp_ij - sum_k p_ik dp_ik),
 *       dq_i = scale sum_j ds_ij k_j,  dk_j = scale sum_i ds_ij q_i,
 *       dv_j = sum_i p_ij dz_i  (GQA: summed over the group's heads)
 *   RoPE: attn_rope_backward.  hook_result: each head's gradient is the
 *   projection output's (o is their sum).
 * Serial loops in a fixed order: the same bits for any thread count.
 */
#include "model/decoder.h"

#include "base/options.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* What the forward showed, per layer. */
typedef struct layer_record {
    float *x, *x_mid, *h1, *q_rot, *k_rot, *v, *p, *z, *g, *u, *a;
} layer_record;

typedef struct recorder {
    const attn_decoder_config *c;
    int64_t L;
    layer_record *layers;
    float *x_final; /* [L, d] the stream into the final norm */
    const attn_decoder_outputs *caller; /* the caller's forward hooks, called first */
    int failed;     /* out of memory while recording */
} recorder;

static const uint32_t recorded_points =
    1u << ATTN_DECODER_HOOK_RESID_PRE | 1u << ATTN_DECODER_HOOK_LN1_NORMALIZED | 1u << ATTN_DECODER_HOOK_ROT_Q |
    1u << ATTN_DECODER_HOOK_ROT_K | 1u << ATTN_DECODER_HOOK_V | 1u << ATTN_DECODER_HOOK_PATTERN |
    1u << ATTN_DECODER_HOOK_Z | 1u << ATTN_DECODER_HOOK_RESID_MID | 1u << ATTN_DECODER_HOOK_MLP_PRE |
    1u << ATTN_DECODER_HOOK_MLP_PRE_LINEAR | 1u << ATTN_DECODER_HOOK_MLP_POST | 1u << ATTN_DECODER_HOOK_RESID_POST;

static float **record_slot(recorder *r, const attn_decoder_hook_tensor *t) {
    if (t->layer < 0) return NULL;
    layer_record *lr = &r->layers[t->layer];
    switch (t->point) {
    case ATTN_DECODER_HOOK_RESID_PRE: return &lr->x;
    case ATTN_DECODER_HOOK_LN1_NORMALIZED: return &lr->h1;
    case ATTN_DECODER_HOOK_ROT_Q: return &lr->q_rot;
    case ATTN_DECODER_HOOK_ROT_K: return &lr->k_rot;
    case ATTN_DECODER_HOOK_V: return &lr->v;
    case ATTN_DECODER_HOOK_PATTERN: return &lr->p;
    case ATTN_DECODER_HOOK_Z: return &lr->z;
    case ATTN_DECODER_HOOK_RESID_MID: return &lr->x_mid;
    case ATTN_DECODER_HOOK_MLP_PRE: return &lr->g;
    case ATTN_DECODER_HOOK_MLP_PRE_LINEAR: return &lr->u;
    case ATTN_DECODER_HOOK_MLP_POST: return &lr->a;
    case ATTN_DECODER_HOOK_RESID_POST: return t->layer == r->c->n_layers - 1 ? &r->x_final : NULL;
    default: return NULL;
    }
}

/* The caller's hook first (it may write: the backward differentiates the
 * forward as it ran), then a copy of what the backward reads. */
static int record(void *user, const attn_decoder_hook_tensor *t) {
    recorder *r = user;
    const attn_decoder_outputs *caller = r->caller;
    if (caller && caller->tensor_hook && (caller->tensor_hook_points & (1u << t->point)))
        if (caller->tensor_hook(caller->tensor_hook_user, t)) return 1;
    float **slot = (recorded_points & (1u << t->point)) ? record_slot(r, t) : NULL;
    if (!slot) return 0;
    size_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= (size_t)t->shape[i];
    free(*slot);
    *slot = malloc(n * sizeof(float));
    if (!*slot) {
        r->failed = 1;
        return 1;
    }
    memcpy(*slot, t->data, n * sizeof(float));
    return 0;
}

static void recorder_free(recorder *r) {
    for (int64_t l = 0; r->layers && l < r->c->n_layers; l++) {
        layer_record *lr = &r->layers[l];
        float *all[] = {lr->x, lr->x_mid, lr->h1, lr->q_rot, lr->k_rot, lr->v, lr->p, lr->z, lr->g, lr->u, lr->a};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
    }
    free(r->layers);
    free(r->x_final);
}

/* ------------------------------------------------------------ the pieces */

/* dx (+)= rmsnorm's backward over rows x [rows, n] with weight w; dscale
 * [rows] (or NULL) the gradient of hook_scale. */
static void rmsnorm_backward(const float *x, int64_t rows, int64_t n, const float *w, double eps, const float *dy,
                             float *dx, int accumulate, float *dscale) {
    for (int64_t r = 0; r < rows; r++) {
        const float *x_r = x + r * n, *dy_r = dy + r * n;
        double ss = 0.0, dot = 0.0;
        for (int64_t i = 0; i < n; i++) {
            ss += (double)x_r[i] * x_r[i];
            dot += (double)dy_r[i] * w[i] * x_r[i];
        }
        const double inv = 1.0 / sqrt(ss / (double)n + eps), k = inv * inv * inv / (double)n * dot;
        for (int64_t i = 0; i < n; i++) {
            const float g = (float)(inv * w[i] * dy_r[i] - x_r[i] * k);
            dx[r * n + i] = accumulate ? dx[r * n + i] + g : g;
        }
        if (dscale) dscale[r] = (float)(-inv * inv * dot);
    }
}

/* dx [L, K] (+)= dy [L, N] . W, W [N, K] as stored (rows dequantized a
 * panel at a time, as the forward's kernels read them). */
static attn_status linear_backward(const decoder_weight *w, const float *dy, int64_t L, float *dx, int accumulate) {
    const int64_t N = w->q.rows, K = w->q.cols, panel = 16;
    if (!accumulate) memset(dx, 0, (size_t)(L * K) * sizeof(float));
    float *rows = w->f32 ? NULL : malloc((size_t)(panel * K) * sizeof(float));
    if (!w->f32 && !rows) return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "attn_decoder_backward: out of memory");
    for (int64_t o0 = 0; o0 < N; o0 += panel) {
        const int64_t n = N - o0 < panel ? N - o0 : panel;
        const float *W = w->f32 ? w->f32 + o0 * K : rows;
        if (!w->f32) {
            attn_status st = attn_quant_dequantize_rows(&w->q, o0, n, rows);
            if (st) {
                free(rows);
                return st;
            }
        }
        for (int64_t t = 0; t < L; t++)
            for (int64_t o = 0; o < n; o++) {
                const float g = dy[t * N + o0 + o];
                if (g == 0.0f) continue;
                const float *w_o = W + o * K;
                float *dx_t = dx + t * K;
                for (int64_t i = 0; i < K; i++) dx_t[i] += g * w_o[i];
            }
    }
    free(rows);
    return ATTN_OK;
}

/* Gemma's post-attention and post-FFN norms: a sublayer's output is
 * RMSNorm(input . proj^T).  dy [L, d], the gradient of the norm's output,
 * becomes that of the projection's output; the projection is recomputed
 * into raw [L, d] (the forward does not keep it), scratch [L, d]. */
static attn_status post_norm_backward(const attn_decoder *m, const float *input, int64_t L, const decoder_weight *proj,
                                      const float *norm, float *raw, float *dy, float *scratch) {
    const int64_t d = m->cfg.d_model;
    const attn_status st = attn__decoder_matmul(m, input, L, proj, NULL, raw);
    if (st) return st;
    rmsnorm_backward(raw, L, d, norm, m->cfg.rms_eps, dy, scratch, 0, NULL);
    memcpy(dy, scratch, (size_t)(L * d) * sizeof(float));
    return ATTN_OK;
}

/* The gate's derivative: (act(g), act'(g)) for SiLU or tanh-GELU. */
static void gate_and_slope(attn_decoder_activation act, double g, double *value, double *slope) {
    if (act == ATTN_DECODER_SWIGLU) {
        const double s = 1.0 / (1.0 + exp(-g));
        *value = g * s;
        *slope = s * (1.0 + g * (1.0 - s));
    } else {
        const double c = 0.7978845608028654, t = tanh(c * (g + 0.044715 * g * g * g));
        *value = 0.5 * g * (1.0 + t);
        *slope = 0.5 * (1.0 + t) + 0.5 * g * (1.0 - t * t) * c * (1.0 + 3.0 * 0.044715 * g * g);
    }
}

/* ---------------------------------------------------------- the backward */

static attn_status show(const attn_decoder_backward_options *opt, attn_decoder_hook_point point, int64_t layer,
                        float *data, int ndim, int64_t s0, int64_t s1, int64_t s2) {
    if (!opt->grad_hook || !(opt->grad_hook_points & (1u << point))) return ATTN_OK;
    attn_decoder_outputs as_outputs = ATTN_DECODER_OUTPUTS_INIT;
    as_outputs.tensor_hook = opt->grad_hook;
    as_outputs.tensor_hook_user = opt->grad_hook_user;
    as_outputs.tensor_hook_points = opt->grad_hook_points;
    return attn__decoder_hook_call(&as_outputs, point, layer, data, ndim, s0, s1, s2);
}

#define WANT(point) (opt->grad_hook && (opt->grad_hook_points & (1u << (point))))

/* One layer, in reverse: dx [L, d] holds the gradient of resid_post on
 * entry and of resid_pre on return. */
static attn_status layer_backward(const attn_decoder *m, int64_t l, const layer_record *r, int64_t L,
                                  const attn_decoder_backward_options *opt, float *dx) {
    const attn_decoder_config *c = &m->cfg;
    const decoder_layer *w = &m->layers[l];
    const int64_t d = c->d_model, F = c->d_ffn, Hq = c->n_heads, Hkv = c->n_kv_heads, Dh = c->head_dim;
    const int64_t group = Hq / Hkv, qw = Hq * Dh, kvw = Hkv * Dh;
    attn_status st = ATTN_OK;
    float *b_d = malloc((size_t)(L * d) * sizeof(float)), *b_d2 = malloc((size_t)(L * d) * sizeof(float));
    float *b_f = malloc((size_t)(L * F) * sizeof(float)), *b_f2 = malloc((size_t)(L * F) * sizeof(float));
    float *raw = malloc((size_t)(L * (d > qw ? d : qw)) * sizeof(float)), *scale = malloc((size_t)L * sizeof(float));
    float *dq = malloc((size_t)(L * qw) * sizeof(float)), *dk = calloc((size_t)(L * kvw), sizeof(float));
    float *dv = calloc((size_t)(L * kvw), sizeof(float)), *dz = malloc((size_t)(L * qw) * sizeof(float));
    float *dp = malloc((size_t)(Hq * L * L) * sizeof(float)), *ds = malloc((size_t)(Hq * L * L) * sizeof(float));
    float *big = WANT(ATTN_DECODER_HOOK_RESULT) ? malloc((size_t)(L * Hq * d) * sizeof(float)) : NULL;
    double *acc = malloc((size_t)Dh * sizeof(double));
    if (!b_d || !b_d2 || !b_f || !b_f2 || !raw || !scale || !dq || !dk || !dv || !dz || !dp || !ds || !acc ||
        (WANT(ATTN_DECODER_HOOK_RESULT) && !big)) {
        st = attn__fail(ATTN_ERR_OUT_OF_MEMORY, "attn_decoder_backward: cannot allocate layer %lld's gradients",
                        (long long)l);
        goto done;
    }
    if ((st = show(opt, ATTN_DECODER_HOOK_RESID_POST, l, dx, 2, L, d, 0))) goto done;
    /* The FFN: mlp_out's gradient is the stream's. */
    memcpy(b_d, dx, (size_t)(L * d) * sizeof(float));
    if ((st = show(opt, ATTN_DECODER_HOOK_MLP_OUT, l, b_d, 2, L, d, 0))) goto done;
    if (w->post_ffn_norm && (st = post_norm_backward(m, r->a, L, &w->w_down, w->post_ffn_norm, raw, b_d, b_d2)))
        goto done;
    if ((st = linear_backward(&w->w_down, b_d, L, b_f, 0)) ||
        (st = show(opt, ATTN_DECODER_HOOK_MLP_POST, l, b_f, 2, L, F, 0)))
        goto done;
    for (int64_t i = 0; i < L * F; i++) {
        double value, slope;
        gate_and_slope(c->activation, r->g[i], &value, &slope);
        const double da = b_f[i];
        b_f2[i] = (float)(da * value);          /* d pre_linear */
        b_f[i] = (float)(da * r->u[i] * slope); /* d pre */
    }
    if ((st = show(opt, ATTN_DECODER_HOOK_MLP_PRE, l, b_f, 2, L, F, 0)) ||
        (st = show(opt, ATTN_DECODER_HOOK_MLP_PRE_LINEAR, l, b_f2, 2, L, F, 0)) ||
        (st = linear_backward(&w->w_gate, b_f, L, b_d, 0)) || (st = linear_backward(&w->w_up, b_f2, L, b_d, 1)) ||
        (st = show(opt, ATTN_DECODER_HOOK_LN2_NORMALIZED, l, b_d, 2, L, d, 0)))
        goto done;
    rmsnorm_backward(r->x_mid, L, d, w->ffn_norm, c->rms_eps, b_d, dx, 1, scale);
    if ((st = show(opt, ATTN_DECODER_HOOK_LN2_SCALE, l, scale, 2, L, 1, 0)) ||
        (st = show(opt, ATTN_DECODER_HOOK_RESID_MID, l, dx, 2, L, d, 0)))
        goto done;
    /* Attention: attn_out's gradient is the stream's. */
    memcpy(b_d, dx, (size_t)(L * d) * sizeof(float));
    if ((st = show(opt, ATTN_DECODER_HOOK_ATTN_OUT, l, b_d, 2, L, d, 0))) goto done;
    if (w->post_attn_norm && (st = post_norm_backward(m, r->z, L, &w->wo, w->post_attn_norm, raw, b_d, b_d2)))
        goto done;
    if (big) {
        for (int64_t t = 0; t < L; t++)
            for (int64_t h = 0; h < Hq; h++) memcpy(big + (t * Hq + h) * d, b_d + t * d, (size_t)d * sizeof(float));
        if ((st = show(opt, ATTN_DECODER_HOOK_RESULT, l, big, 3, L, Hq, d))) goto done;
    }
    if ((st = linear_backward(&w->wo, b_d, L, dz, 0)) || (st = show(opt, ATTN_DECODER_HOOK_Z, l, dz, 3, L, Hq, Dh)))
        goto done;
    /* dp, dv from dz; ds from dp; then dq, dk. */
    for (int64_t h = 0; h < Hq; h++) {
        const int64_t hk = h / group;
        for (int64_t i = 0; i < L; i++) {
            const float *dz_i = dz + (i * Hq + h) * Dh, *p_i = r->p + (h * L + i) * L;
            float *dp_i = dp + (h * L + i) * L;
            for (int64_t j = 0; j < L; j++) {
                const float *v_j = r->v + (j * Hkv + hk) * Dh;
                double sum = 0.0;
                for (int64_t e = 0; e < Dh; e++) sum += (double)dz_i[e] * v_j[e];
                dp_i[j] = (float)sum;
                if (p_i[j] != 0.0f) {
                    float *dv_j = dv + (j * Hkv + hk) * Dh;
                    for (int64_t e = 0; e < Dh; e++) dv_j[e] += p_i[j] * dz_i[e];
                }
            }
        }
    }
    if ((st = show(opt, ATTN_DECODER_HOOK_PATTERN, l, dp, 3, Hq, L, L))) goto done;
    for (int64_t row = 0; row < Hq * L; row++) {
        const float *p_r = r->p + row * L, *dp_r = dp + row * L;
        double dot = 0.0;
        for (int64_t j = 0; j < L; j++) dot += (double)p_r[j] * dp_r[j];
        for (int64_t j = 0; j < L; j++) ds[row * L + j] = (float)(p_r[j] * (dp_r[j] - dot));
    }
    if ((st = show(opt, ATTN_DECODER_HOOK_ATTN_SCORES, l, ds, 3, Hq, L, L))) goto done;
    for (int64_t i = 0; i < L; i++)
        for (int64_t h = 0; h < Hq; h++) {
            const int64_t hk = h / group;
            const float *ds_i = ds + (h * L + i) * L, *q_i = r->q_rot + (i * Hq + h) * Dh;
            for (int64_t e = 0; e < Dh; e++) acc[e] = 0.0;
            for (int64_t j = 0; j < L; j++) {
                const float s = ds_i[j];
                if (s == 0.0f) continue;
                const float *k_j = r->k_rot + (j * Hkv + hk) * Dh;
                float *dk_j = dk + (j * Hkv + hk) * Dh;
                for (int64_t e = 0; e < Dh; e++) {
                    acc[e] += (double)s * k_j[e];
                    dk_j[e] += (float)(c->attn_scale * s) * q_i[e];
                }
            }
            for (int64_t e = 0; e < Dh; e++) dq[(i * Hq + h) * Dh + e] = (float)(c->attn_scale * acc[e]);
        }
    if ((st = show(opt, ATTN_DECODER_HOOK_ROT_Q, l, dq, 3, L, Hq, Dh)) ||
        (st = show(opt, ATTN_DECODER_HOOK_ROT_K, l, dk, 3, L, Hkv, Dh)))
        goto done;
    attn_rope_options rope;
    attn_decoder_rope_options(c, l, &rope);
    attn_tensor tq = attn_tensor_4d(dq, 1, L, Hq, Dh), tk = attn_tensor_4d(dk, 1, L, Hkv, Dh);
    if ((st = attn_rope_backward(&tq, NULL, 0, &rope)) || (st = attn_rope_backward(&tk, NULL, 0, &rope)) ||
        (st = show(opt, ATTN_DECODER_HOOK_Q, l, dq, 3, L, Hq, Dh)) ||
        (st = show(opt, ATTN_DECODER_HOOK_K, l, dk, 3, L, Hkv, Dh)) ||
        (st = show(opt, ATTN_DECODER_HOOK_V, l, dv, 3, L, Hkv, Dh)))
        goto done;
    /* QK-norm: q and k before it are h1 through the projections. */
    if (w->q_norm) {
        if ((st = attn__decoder_matmul(m, r->h1, L, &w->wq, w->bq, raw))) goto done;
        memcpy(dz, dq, (size_t)(L * qw) * sizeof(float));
        rmsnorm_backward(raw, L * Hq, Dh, w->q_norm, c->rms_eps, dz, dq, 0, NULL);
    }
    if (w->k_norm) {
        if ((st = attn__decoder_matmul(m, r->h1, L, &w->wk, w->bk, raw))) goto done;
        memcpy(dz, dk, (size_t)(L * kvw) * sizeof(float));
        rmsnorm_backward(raw, L * Hkv, Dh, w->k_norm, c->rms_eps, dz, dk, 0, NULL);
    }
    if ((st = linear_backward(&w->wq, dq, L, b_d, 0)) || (st = linear_backward(&w->wk, dk, L, b_d, 1)) ||
        (st = linear_backward(&w->wv, dv, L, b_d, 1)) ||
        (st = show(opt, ATTN_DECODER_HOOK_LN1_NORMALIZED, l, b_d, 2, L, d, 0)))
        goto done;
    rmsnorm_backward(r->x, L, d, w->attn_norm, c->rms_eps, b_d, dx, 1, scale);
    if ((st = show(opt, ATTN_DECODER_HOOK_LN1_SCALE, l, scale, 2, L, 1, 0)) ||
        (st = show(opt, ATTN_DECODER_HOOK_RESID_PRE, l, dx, 2, L, d, 0)))
        goto done;
done:
    free(b_d), free(b_d2), free(b_f), free(b_f2), free(raw), free(scale), free(dq), free(dk), free(dv), free(dz);
    free(dp), free(ds), free(big), free(acc);
    return st;
}

attn_status attn_decoder_backward(const attn_decoder *m, const int32_t *ids, int64_t L,
                                  const attn_decoder_outputs *forward, const attn_decoder_backward_options *caller) {
    static const char fn[] = "attn_decoder_backward";
    if (!caller) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "%s: the options are NULL (dlogits is needed)", fn);
    attn_decoder_backward_options opt;
    static const attn_decoder_backward_options defaults = ATTN_DECODER_BACKWARD_OPTIONS_INIT;
    attn_status st = options_copy(&opt, sizeof opt, &defaults, caller, "attn_decoder_backward_options");
    if (st) return attn__fail(st, "%s: %s", fn, attn_last_error());
    if (!opt.dlogits) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "%s: dlogits is NULL", fn);
    const uint32_t per_head_inputs =
        1u << ATTN_DECODER_HOOK_Q_INPUT | 1u << ATTN_DECODER_HOOK_K_INPUT | 1u << ATTN_DECODER_HOOK_V_INPUT;
    if (opt.grad_hook && (opt.grad_hook_points & per_head_inputs))
        return attn__fail(ATTN_ERR_UNSUPPORTED, "%s: no gradient at hook_q_input, hook_k_input, hook_v_input (the "
                          "backward runs the unsplit layer; their sum over heads is hook_resid_pre's share)", fn);
    attn_decoder_outputs out;
    const attn_decoder_outputs empty = ATTN_DECODER_OUTPUTS_INIT;
    if ((st = attn__decoder_check(m, ids, L, forward ? forward : &empty, &out, fn))) return st;
    if (out.last_only)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "%s: last_only: the gradient needs every position's logits "
                          "(dlogits [L, V], zero rows where the metric does not read them)", fn);
    const attn_decoder_config *c = &m->cfg;
    const int64_t d = c->d_model, V = c->vocab;
    recorder r = {.c = c, .L = L, .caller = forward ? forward : NULL};
    float *logits = out.logits ? NULL : malloc((size_t)(L * V) * sizeof(float));
    float *dx = malloc((size_t)(L * d) * sizeof(float)), *dh = malloc((size_t)(L * d) * sizeof(float));
    float *scale = malloc((size_t)L * sizeof(float));
    r.layers = calloc((size_t)c->n_layers, sizeof *r.layers);
    if ((!out.logits && !logits) || !dx || !dh || !scale || !r.layers) {
        st = attn__fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory for %lld tokens", fn, (long long)L);
        goto done;
    }
    /* The forward, recording; the caller's hooks run inside the recorder. */
    if (!out.logits) out.logits = logits;
    out.tensor_hook = record;
    out.tensor_hook_user = &r;
    out.tensor_hook_points = recorded_points | (forward ? forward->tensor_hook_points : 0);
    if ((st = attn__decoder_run(m, ids, L, NULL, &out, fn))) {
        if (r.failed) st = attn__fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory recording the forward", fn);
        goto done;
    }
    /* The head: dlogits through W_out and the final norm. */
    if ((st = linear_backward(&m->output, opt.dlogits, L, dh, 0)) ||
        (st = show(&opt, ATTN_DECODER_HOOK_LN_FINAL, -1, dh, 2, L, d, 0)))
        goto done;
    rmsnorm_backward(r.x_final, L, d, m->output_norm, c->rms_eps, dh, dx, 0, scale);
    if ((st = show(&opt, ATTN_DECODER_HOOK_LN_FINAL_SCALE, -1, scale, 2, L, 1, 0))) goto done;
    for (int64_t l = c->n_layers - 1; l >= 0; l--)
        if ((st = layer_backward(m, l, &r.layers[l], L, &opt, dx))) goto done;
    if ((st = show(&opt, ATTN_DECODER_HOOK_EMBED, -1, dx, 2, L, d, 0))) goto done;
    if (opt.d_embed) memcpy(opt.d_embed, dx, (size_t)(L * d) * sizeof(float));
done:
    recorder_free(&r);
    free(logits);
    free(dx);
    free(dh);
    free(scale);
    return st;
}
