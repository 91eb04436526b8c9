/*
 * analysis_rollout.c — attention rollout (Abnar & Zuidema, ACL 2020) and
 * the layer map both it and the flow read (analysis.h).
 *
 * Shape legend: patterns [N, Hq, L, L]   ahat [L, L]   rollout [N, L, L]
 */
#include "interp/analysis.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

attn_status attn__analysis_check_layers(const char *fn, const float *patterns, int64_t N, int64_t Hq, int64_t L,
                                        int64_t head, double residual) {
    if (!patterns) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "%s: patterns is NULL", fn);
    if (N <= 0 || Hq <= 0 || L <= 0)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "%s: sizes must be positive (N %lld, Hq %lld, L %lld)", fn,
                          (long long)N, (long long)Hq, (long long)L);
    if (head != ATTN_ALL && (head < 0 || head >= Hq))
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "%s: head %lld: expected 0 .. %lld, or ATTN_ALL (-1) for the "
                          "mean of the heads", fn, (long long)head, (long long)Hq - 1);
    if (!(residual >= 0 && residual <= 1))
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "%s: residual %g: expected a share in [0, 1] (0.5: the paper's)",
                          fn, residual);
    int64_t count;
    const int64_t shape[4] = {N, Hq, L, L};
    if (!shape_elements(4, shape, sizeof(double), &count))
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "%s: the sizes overflow", fn);
    return ATTN_OK;
}

void attn__analysis_layer_ahat(const float *patterns, int64_t Hq, int64_t L, int64_t layer, int64_t head,
                               double residual, double *ahat) {
    const int64_t h0 = head == ATTN_ALL ? 0 : head, h1 = head == ATTN_ALL ? Hq : head + 1;
    for (int64_t i = 0; i < L; i++) {
        double *row = ahat + i * L, sum = 0;
        for (int64_t j = 0; j < L; j++) {
            double a = 0;
            for (int64_t h = h0; h < h1; h++) a += patterns[((layer * Hq + h) * L + i) * L + j];
            row[j] = (1 - residual) * a / (double)(h1 - h0) + (j == i ? residual : 0);
            sum += row[j];
        }
        /* Rows of a pattern sum to 1 already (up to rounding) or to 0 when
         * fully masked: renormalising is the paper's rule and keeps a masked
         * query's residual share whole. */
        if (sum > 0)
            for (int64_t j = 0; j < L; j++) row[j] /= sum;
    }
}

attn_status attn_attention_rollout(const float *patterns, int64_t N, int64_t Hq, int64_t L, int64_t head,
                                   double residual, double *rollout) {
    attn_status st = attn__analysis_check_layers(__func__, patterns, N, Hq, L, head, residual);
    if (st) return st;
    if (!rollout) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "%s: rollout is NULL", __func__);
    double *ahat = malloc((size_t)(L * L) * sizeof *ahat);
    if (!ahat) return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", __func__);
    attn__analysis_layer_ahat(patterns, Hq, L, 0, head, residual, rollout);
    for (int64_t l = 1; l < N; l++) {
        /* rollout[l] = Ahat_l . rollout[l - 1]: what reaches query i of layer
         * l is what it reads from each token k below, times what reached k. */
        attn__analysis_layer_ahat(patterns, Hq, L, l, head, residual, ahat);
        const double *below = rollout + (l - 1) * L * L;
        double *out = rollout + l * L * L;
        for (int64_t i = 0; i < L; i++)
            for (int64_t j = 0; j < L; j++) {
                double s = 0;
                for (int64_t k = 0; k < L; k++) s += ahat[i * L + k] * below[k * L + j];
                out[i * L + j] = s;
            }
    }
    free(ahat);
    return ATTN_OK;
}
