/*
 * analysis_value_norms.c — Kobayashi et al.'s value-weighted norms
 * ||alpha_ij * v_j W_O^h|| (attn_analysis.h), the reference twin that forms
 * every cell's vector and the production path that forms each f(v_j) once.
 *
 * Shape legend: pattern, norms [Hq, L, S]  <- heads first
 *               v [S, Hkv, Dh]   wo [Hq, Dh, d] (NULL: no projection)
 */
#include "attn_analysis.h"

#include "base/base.h"

#include <math.h>
#include <stdlib.h>

/* The checks both paths share; fn names the caller in the message. */
static attn_status check_args(const char *fn, const float *pattern, int64_t Hq, int64_t L, int64_t S, const float *v,
                              int64_t Hkv, int64_t Dh, const float *wo, int64_t d, const float *norms) {
    if (!pattern || !v || !norms)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn,
                          !pattern ? "pattern" : !v ? "v" : "norms");
    if (Hq <= 0 || L <= 0 || S <= 0 || Hkv <= 0 || Dh <= 0 || (wo && d <= 0))
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT,
                          "%s: sizes must be positive (Hq %lld, L %lld, S %lld, Hkv %lld, Dh %lld, d %lld)", fn,
                          (long long)Hq, (long long)L, (long long)S, (long long)Hkv, (long long)Dh, (long long)d);
    if (Hq % Hkv)
        return attn__fail(ATTN_ERR_SHAPE, "%s: %lld query heads are not a multiple of %lld kv heads", fn,
                          (long long)Hq, (long long)Hkv);
    int64_t cells, values, proj;
    const int64_t shape_p[3] = {Hq, L, S}, shape_v[3] = {S, Hkv, Dh}, shape_o[3] = {Hq, Dh, wo ? d : 1};
    if (!shape_elements(3, shape_p, sizeof(float), &cells) || !shape_elements(3, shape_v, sizeof(float), &values) ||
        !shape_elements(3, shape_o, sizeof(float), &proj))
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "%s: the sizes overflow", fn);
    return ATTN_OK;
}

/* f(v) = v . wo_h into out [d] (wo_h [Dh, d]), or v itself ([Dh]) without
 * a projection; its dimension into *width.  Sums in double. */
static void project(const float *v_j, const float *wo_h, int64_t Dh, int64_t d, double *out, int64_t *width) {
    if (!wo_h) {
        for (int64_t k = 0; k < Dh; k++) out[k] = v_j[k];
        *width = Dh;
        return;
    }
    for (int64_t c = 0; c < d; c++) out[c] = 0;
    for (int64_t k = 0; k < Dh; k++)
        for (int64_t c = 0; c < d; c++) out[c] += (double)v_j[k] * wo_h[k * d + c];
    *width = d;
}

attn_status attn_value_weighted_norms_ref(const float *pattern, int64_t Hq, int64_t L, int64_t S, const float *v,
                                          int64_t Hkv, int64_t Dh, const float *wo, int64_t d, float *norms) {
    attn_status st = check_args(__func__, pattern, Hq, L, S, v, Hkv, Dh, wo, d, norms);
    if (st) return st;
    const int64_t width = wo ? d : Dh, group = Hq / Hkv;
    double *f = malloc((size_t)width * sizeof *f);
    if (!f) return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", __func__);
    /* The definition as written: each cell's vector alpha_ij * f(v_j), then
     * its norm (f recomputed per cell on purpose: nothing shared with the
     * production path but `project`). */
    for (int64_t h = 0; h < Hq; h++)
        for (int64_t i = 0; i < L; i++)
            for (int64_t j = 0; j < S; j++) {
                int64_t w;
                project(v + (j * Hkv + h / group) * Dh, wo ? wo + h * Dh * d : NULL, Dh, d, f, &w);
                const double alpha = pattern[(h * L + i) * S + j];
                double ss = 0;
                for (int64_t c = 0; c < w; c++) ss += (alpha * f[c]) * (alpha * f[c]);
                norms[(h * L + i) * S + j] = (float)sqrt(ss);
            }
    free(f);
    return ATTN_OK;
}

attn_status attn_value_weighted_norms(const float *pattern, int64_t Hq, int64_t L, int64_t S, const float *v,
                                      int64_t Hkv, int64_t Dh, const float *wo, int64_t d, float *norms) {
    attn_status st = check_args(__func__, pattern, Hq, L, S, v, Hkv, Dh, wo, d, norms);
    if (st) return st;
    const int64_t width = wo ? d : Dh, group = Hq / Hkv;
    double *f = malloc((size_t)width * sizeof *f);
    double *fnorm = malloc((size_t)S * sizeof *fnorm); /* ||f(v_j)|| of one head */
    if (!f || !fnorm) {
        free(f);
        free(fnorm);
        return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", __func__);
    }
    /* ||alpha f|| = |alpha| ||f||: each head's S projected norms once, then
     * one product per cell.  Without W_O the heads of a kv group share
     * their norms, but recomputing them is S * Dh per head: not worth a case. */
    for (int64_t h = 0; h < Hq; h++) {
        for (int64_t j = 0; j < S; j++) {
            int64_t w;
            project(v + (j * Hkv + h / group) * Dh, wo ? wo + h * Dh * d : NULL, Dh, d, f, &w);
            double ss = 0;
            for (int64_t c = 0; c < w; c++) ss += f[c] * f[c];
            fnorm[j] = sqrt(ss);
        }
        for (int64_t i = 0; i < L; i++)
            for (int64_t j = 0; j < S; j++)
                norms[(h * L + i) * S + j] = (float)(fabs((double)pattern[(h * L + i) * S + j]) * fnorm[j]);
    }
    free(f);
    free(fnorm);
    return ATTN_OK;
}
