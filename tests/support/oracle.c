#include "oracle.h"

#include <math.h>
#include <stdlib.h>

static int64_t bcast_index(const int64_t shape[4], int64_t b, int64_t h, int64_t i, int64_t j) {
    /* Each dimension is 1 or full, so "index modulo size" broadcasts. */
    return ((b % shape[0] * shape[1] + h % shape[1]) * shape[2] + i % shape[2]) * shape[3] + j % shape[3];
}

int oracle_visible(const oracle_case *c, int64_t b, int64_t h, int64_t i, int64_t j) {
    const int64_t shift = (c->causal == 2 || (!c->causal && c->lower_right_window)) ? c->S - c->L : 0;
    const int64_t rel = j - (i + shift); /* key offset from the diagonal */
    if (c->causal && rel > 0) return 0;
    if (c->window && c->left >= 0 && -rel > c->left) return 0;
    if (c->window && c->right >= 0 && rel > c->right) return 0;
    if (c->key_lengths && j >= c->key_lengths[b]) return 0;
    if (c->mask && !c->mask[bcast_index(c->mask_shape, b, h, i, j)]) return 0;
    if (c->bias && isinf(c->bias[bcast_index(c->bias_shape, b, h, i, j)]) &&
        c->bias[bcast_index(c->bias_shape, b, h, i, j)] < 0)
        return 0;
    return 1;
}

/* get_slopes(n): for n a power of two the geometric sequence starting at
 * 2^(-8/n) with that ratio; otherwise the closest smaller power of two's,
 * then every other slope of twice that power, as many as are missing. */
void oracle_alibi_standard_slopes(int64_t n, double *slopes) {
    int64_t pow2 = 1;
    while (pow2 * 2 <= n) pow2 *= 2;
    const long double start = powl(2.0L, -powl(2.0L, -(log2l((long double)pow2) - 3.0L)));
    long double x = start;
    for (int64_t h = 0; h < pow2; h++, x *= start) slopes[h] = (double)x;
    if (pow2 == n) return;
    double *twice = malloc(sizeof(double) * (size_t)(2 * pow2));
    oracle_alibi_standard_slopes(2 * pow2, twice);
    for (int64_t h = pow2; h < n; h++) slopes[h] = twice[2 * (h - pow2)];
    free(twice);
}

void oracle_attention_scores(const oracle_case *c, const float *q, const float *k, const float *v,
                             double *out, double *weights, double *lse, double *scores) {
    const int64_t B = c->B, L = c->L, S = c->S, Hq = c->Hq, Hkv = c->Hkv, D = c->D, Dv = c->Dv;
    const long double scale = c->scale > 0 ? (long double)c->scale : 1.0L / sqrtl((long double)D);
    const int64_t rep = Hq / Hkv;

    /* repeat_kv: expanded keys/values [B, Hq, S, *], head-major. */
    long double *kx = malloc(sizeof(long double) * (size_t)(B * Hq * S * D));
    long double *vx = malloc(sizeof(long double) * (size_t)(B * Hq * S * Dv));
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < Hq; h++)
            for (int64_t j = 0; j < S; j++) {
                int64_t src = (b * S + j) * Hkv + h / rep;
                for (int64_t d = 0; d < D; d++) kx[((b * Hq + h) * S + j) * D + d] = k[src * D + d];
                for (int64_t d = 0; d < Dv; d++) vx[((b * Hq + h) * S + j) * Dv + d] = v[src * Dv + d];
            }

    double *slopes = calloc(Hq > 0 ? (size_t)Hq : 1, sizeof(double)); /* Hq >= 1: the guard is for the compiler */
    if (c->alibi_standard) oracle_alibi_standard_slopes(Hq, slopes);
    for (int64_t h = 0; c->alibi_slopes && h < Hq; h++) slopes[h] = c->alibi_slopes[h];
    const int64_t shift = (c->causal == 2 || (!c->causal && c->lower_right_window)) ? S - L : 0;

    unsigned char *visible = malloc((size_t)(L * S));
    long double *s = malloc(sizeof(long double) * (size_t)S);
    long double *acc = malloc(sizeof(long double) * (size_t)Dv);
    for (int64_t b = 0; b < B; b++) {
        for (int64_t h = 0; h < Hq; h++) {
            for (int64_t i = 0; i < L; i++)
                for (int64_t j = 0; j < S; j++) visible[i * S + j] = (unsigned char)oracle_visible(c, b, h, i, j);
            for (int64_t i = 0; i < L; i++) {
                const float *qi = q + ((b * L + i) * Hq + h) * D;
                long double m = -INFINITY;
                int any = 0;
                for (int64_t j = 0; j < S; j++) {
                    if (!visible[i * S + j]) continue;
                    long double dot = 0;
                    for (int64_t d = 0; d < D; d++) dot += (long double)qi[d] * kx[((b * Hq + h) * S + j) * D + d];
                    long double raw = dot * scale;
                    if (c->softcap > 0) raw = (long double)c->softcap * tanhl(raw / (long double)c->softcap);
                    s[j] = raw + (c->bias ? c->bias[bcast_index(c->bias_shape, b, h, i, j)] : 0.0f) +
                           (long double)slopes[h] * (long double)(j - i - shift);
                    if (!any || s[j] > m) m = s[j];
                    any = 1;
                }
                /* the sink joins the normalisation as one more logit, with no value */
                const long double sink = c->sinks ? (long double)c->sinks[h] : -INFINITY;
                if (sink > m) m = sink;
                if (scores)
                    for (int64_t j = 0; j < S; j++)
                        scores[((b * Hq + h) * L + i) * S + j] = visible[i * S + j] ? (double)s[j] : -INFINITY;
                long double z = sink == -INFINITY ? 0.0L : expl(sink - m);
                for (int64_t j = 0; j < S; j++)
                    if (visible[i * S + j]) z += expl(s[j] - m);
                for (int64_t d = 0; d < Dv; d++) acc[d] = 0;
                for (int64_t j = 0; j < S; j++) {
                    long double w = visible[i * S + j] ? expl(s[j] - m) / z : 0.0L;
                    if (weights) weights[((b * Hq + h) * L + i) * S + j] = (double)w;
                    if (w != 0)
                        for (int64_t d = 0; d < Dv; d++) acc[d] += w * vx[((b * Hq + h) * S + j) * Dv + d];
                }
                for (int64_t d = 0; d < Dv; d++) out[((b * L + i) * Hq + h) * Dv + d] = (double)acc[d];
                if (lse) lse[(b * Hq + h) * L + i] = any || sink != -INFINITY ? (double)(m + logl(z)) : -INFINITY;
            }
        }
    }
    free(slopes);
    free(kx);
    free(vx);
    free(visible);
    free(s);
    free(acc);
}

void oracle_attention(const oracle_case *c, const float *q, const float *k, const float *v,
                      double *out, double *weights, double *lse) {
    oracle_attention_scores(c, q, k, v, out, weights, lse, NULL);
}

void oracle_project(const float *x, int64_t rows, int64_t m, const float *w, const float *b, int64_t n, float *y) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < n; c++) {
            long double acc = b ? b[c] : 0;
            for (int64_t i = 0; i < m; i++) acc += (long double)x[r * m + i] * w[i * n + c];
            y[r * n + c] = (float)acc;
        }
}

void oracle_output_projection(const double *z, int64_t rows, int64_t m, const float *wo, const float *bo,
                              int64_t dout, double *out) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < dout; c++) {
            long double acc = bo ? bo[c] : 0;
            if (!wo) acc += z[r * m + c];
            else
                for (int64_t i = 0; i < m; i++) acc += (long double)z[r * m + i] * wo[i * dout + c];
            out[r * dout + c] = (double)acc;
        }
}

const char *const mask_kind_names[MASK_KIND_COUNT] = {
    "none", "causal", "causal-lower-right", "window", "window+causal",
    "key-lengths", "bool-mask-2d", "bool-mask-4d", "bias", "all"};

void random_case_make(random_case *rc, test_rng *r, int64_t B, int64_t L, int64_t S, int64_t Hq,
                      int64_t Hkv, int64_t D, int64_t Dv, enum mask_kind kind) {
    *rc = (random_case){0};
    oracle_case *c = &rc->c;
    c->B = B; c->L = L; c->S = S; c->Hq = Hq; c->Hkv = Hkv; c->D = D; c->Dv = Dv;
    rc->q = malloc(sizeof(float) * (size_t)(B * L * Hq * D));
    rc->k = malloc(sizeof(float) * (size_t)(B * S * Hkv * D));
    rc->v = malloc(sizeof(float) * (size_t)(B * S * Hkv * Dv));
    test_fill_normal(r, rc->q, B * L * Hq * D, 1.0);
    test_fill_normal(r, rc->k, B * S * Hkv * D, 1.0);
    test_fill_normal(r, rc->v, B * S * Hkv * Dv, 1.0);
    if (test_rng_range(r, 4) == 0) c->scale = 0.05 + test_rng_uniform(r); /* custom scale */

    int causal = kind == MASK_CAUSAL || kind == MASK_WINDOW_CAUSAL || kind == MASK_ALL;
    if (kind == MASK_CAUSAL_LOWER_RIGHT) c->causal = 2;
    else if (causal) c->causal = 1 + (int)test_rng_range(r, 2);
    if (kind == MASK_WINDOW || kind == MASK_WINDOW_CAUSAL || kind == MASK_ALL) {
        c->window = 1;
        c->lower_right_window = (int)test_rng_range(r, 2);
        c->left = test_rng_range(r, 4) == 0 ? -1 : test_rng_range(r, S + 2);
        c->right = test_rng_range(r, 4) == 0 ? -1 : test_rng_range(r, S + 2);
    }
    if (kind == MASK_KEY_LENGTHS || kind == MASK_ALL) {
        rc->key_lengths = malloc(sizeof(int64_t) * (size_t)B);
        for (int64_t b = 0; b < B; b++) rc->key_lengths[b] = test_rng_range(r, S + 1); /* 0 allowed */
        c->key_lengths = rc->key_lengths;
    }
    if (kind == MASK_BOOL_2D || kind == MASK_BOOL_4D || kind == MASK_ALL) {
        int64_t *s = c->mask_shape;
        s[0] = 1; s[1] = 1; s[2] = L; s[3] = S;
        if (kind != MASK_BOOL_2D) { /* random broadcasting of each dimension */
            s[0] = test_rng_range(r, 2) ? B : 1;
            s[1] = test_rng_range(r, 2) ? Hq : 1;
            s[2] = test_rng_range(r, 3) ? L : 1;
            s[3] = test_rng_range(r, 5) ? S : 1;
        }
        int64_t n = s[0] * s[1] * s[2] * s[3];
        rc->mask = malloc((size_t)n);
        for (int64_t e = 0; e < n; e++) rc->mask[e] = test_rng_range(r, 4) != 0 ? (uint8_t)(1 + test_rng_range(r, 200)) : 0;
        c->mask = rc->mask;
    }
    if (kind == MASK_BIAS || kind == MASK_ALL) {
        int64_t *s = c->bias_shape;
        s[0] = test_rng_range(r, 2) ? B : 1;
        s[1] = test_rng_range(r, 2) ? Hq : 1;
        s[2] = L;
        s[3] = S;
        int64_t n = s[0] * s[1] * s[2] * s[3];
        rc->bias = malloc(sizeof(float) * (size_t)n);
        for (int64_t e = 0; e < n; e++)
            rc->bias[e] = test_rng_range(r, 6) == 0 ? -INFINITY : (float)(2.0 * test_rng_normal(r));
        c->bias = rc->bias;
    }
}

void random_case_free(random_case *rc) {
    free(rc->q); free(rc->k); free(rc->v); free(rc->bias); free(rc->key_lengths); free(rc->mask);
    *rc = (random_case){0};
}

attn_sdpa_options random_case_options(const random_case *rc) {
    const oracle_case *c = &rc->c;
    attn_sdpa_options o = ATTN_SDPA_OPTIONS_INIT;
    o.scale = (float)c->scale;
    o.causal = c->causal != 0;
    o.align = (c->causal == 2 || (!c->causal && c->lower_right_window)) ? ATTN_ALIGN_LOWER_RIGHT
                                                                         : ATTN_ALIGN_TOP_LEFT;
    o.window = c->window;
    o.window_left = c->left;
    o.window_right = c->right;
    o.key_lengths = c->key_lengths;
    o.mask = c->mask;
    for (int d = 0; d < 4; d++) o.mask_shape[d] = c->mask_shape[d];
    o.bias = c->bias;
    for (int d = 0; d < 4; d++) o.bias_shape[d] = c->bias_shape[d];
    o.softcap = (float)c->softcap;
    o.sinks = c->sinks;
    o.alibi_slopes = c->alibi_slopes;
    o.alibi_standard = c->alibi_standard;
    return o;
}

double max_abs_diff(const double *expected, const float *got, int64_t n) {
    double worst = 0;
    for (int64_t e = 0; e < n; e++) {
        double a = expected[e], b = got[e];
        if (isinf(a) || isinf(b) || isnan(a) || isnan(b)) {
            if (a == b) continue;
            return INFINITY;
        }
        if (fabs(a - b) > worst) worst = fabs(a - b);
    }
    return worst;
}

double max_abs(const double *x, int64_t n) {
    double m = 0;
    for (int64_t e = 0; e < n; e++)
        if (isfinite(x[e]) && fabs(x[e]) > m) m = fabs(x[e]);
    return m;
}

attn_status random_case_forward(const random_case *rc, attn_kernel kernel, int threads, float *out, float *w,
                                float *lse) {
    random_case_tensors t = random_case_views(rc, out);
    attn_sdpa_options opt = random_case_options(rc);
    opt.kernel = kernel;
    opt.threads = threads;
    return attn_sdpa_forward(&t.q, &t.k, &t.v, &opt, &t.out, w, lse);
}

random_case_tensors random_case_views(const random_case *rc, float *out) {
    const oracle_case *c = &rc->c;
    return (random_case_tensors){
        .q = attn_tensor_4d(rc->q, c->B, c->L, c->Hq, c->D),
        .k = attn_tensor_4d(rc->k, c->B, c->S, c->Hkv, c->D),
        .v = attn_tensor_4d(rc->v, c->B, c->S, c->Hkv, c->Dv),
        .out = attn_tensor_4d(out, c->B, c->L, c->Hq, c->Dv),
    };
}

double oracle_score_spread(const oracle_case *c, const float *q, int64_t nq, const float *k, int64_t nk) {
    double sq = 0, sk = 0;
    for (int64_t e = 0; e < nq; e++) sq += (double)q[e] * q[e];
    for (int64_t e = 0; e < nk; e++) sk += (double)k[e] * k[e];
    double scale = c->scale > 0 ? c->scale : 1.0 / sqrt((double)c->D);
    return scale * sqrt(sq / (double)nq) * sqrt(sk / (double)nk) * sqrt((double)c->D);
}

double max_abs_finite(const float *x, int64_t n) {
    double m = 0;
    for (int64_t e = 0; e < n; e++)
        if (isfinite(x[e]) && fabs(x[e]) > m) m = fabs(x[e]);
    return m;
}
