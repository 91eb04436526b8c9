/*
 * visibility.c — the visibility rules (see visibility.h): the structural
 * key range of a query, the elementwise mask and bias on a row of scores,
 * and the count of visible pairs.
 */
#include "base/visibility.h"

#include "base/logits.h"

#include <math.h>


void attn__visibility_key_range(const sdpa_problem *p, int64_t b, int64_t i, int64_t *begin,
                                int64_t *end) {
    int64_t lo, hi;
    visibility_bounds(p, b, i, &lo, &hi);
    visibility_clamp(p, lo, hi, begin, end);
}

void attn__visibility_mask_scores(const sdpa_problem *p, int64_t b, int64_t h, int64_t i,
                                  int64_t begin, int64_t end, int64_t key0, int64_t n, float *s,
                                  int64_t step, float rescale) {
    const float log2e = (float)LOG2E;
    const uint8_t *mask = NULL;
    const float *bias = NULL;
    int64_t mask_step = 0, bias_step = 0;
    if (p->opt.mask) mask = p->opt.mask + visibility_broadcast_row(p->opt.mask_shape, b, h, i, &mask_step);
    if (p->opt.bias) bias = p->opt.bias + visibility_broadcast_row(p->opt.bias_shape, b, h, i, &bias_step);
    const float slope2 = logits_alibi_slope2(p, h);
    const int64_t diagonal = i + p->diagonal_offset;
    if (!mask && !bias) {
        /* ALiBi alone (or nothing): hidden outside the structural range,
         * a bias linear in the key inside; no branch per key. */
        int64_t lo = begin - key0, hi = end - key0;
        lo = lo < 0 ? 0 : lo > n ? n : lo;
        hi = hi < lo ? lo : hi > n ? n : hi;
        for (int64_t j = 0; j < lo; j++) s[j * step] = -INFINITY;
        /* (s · rescale and then the bias: two roundings, and a loop the
         * compiler vectorises, where fmaf is a libm call on baseline x86-64) */
        if (slope2 != 0.0f && rescale == 1.0f)
            for (int64_t j = lo; j < hi; j++) s[j * step] += logits_alibi_bias2(slope2, diagonal, key0 + j);
        else if (slope2 != 0.0f)
            for (int64_t j = lo; j < hi; j++)
                s[j * step] = s[j * step] * rescale + logits_alibi_bias2(slope2, diagonal, key0 + j);
        for (int64_t j = hi; j < n; j++) s[j * step] = -INFINITY;
        return;
    }
    const bool additive = bias || slope2 != 0.0f;
    for (int64_t j = 0; j < n; j++) {
        const int64_t key = key0 + j;
        float *s_j = s + j * step;
        /* A hidden key's score is replaced, never combined: the key may
         * hold anything, NaN included (NaN + -inf is NaN). */
        if (key < begin || key >= end || (mask && !mask[key * mask_step]) ||
            (bias && bias[key * bias_step] == -INFINITY))
            *s_j = -INFINITY;
        else if (additive) {
            /* the bias and ALiBi's (logits.h), added after the cap */
            const float bias_j = bias ? bias[key * bias_step] : 0.0f;
            const float b2 = slope2 == 0.0f ? log2e * bias_j : log2e * bias_j + logits_alibi_bias2(slope2, diagonal, key);
            /* s + b2 when rescale is 1 (the same number as the fma, without
             * a libm call on CPUs the baseline build cannot assume FMA on) */
            *s_j = rescale == 1.0f ? *s_j + b2 : fmaf(*s_j, rescale, b2);
        }
    }
}

double attn__visibility_pairs(const sdpa_problem *p) {
    double pairs = 0.0;
    for (int64_t b = 0; b < p->batch; b++)
        for (int64_t i = 0; i < p->len_q; i++) {
            int64_t begin, end;
            attn__visibility_key_range(p, b, i, &begin, &end);
            if (!p->opt.mask && !p->opt.bias) {
                pairs += (double)p->heads_q * (double)(end - begin);
                continue;
            }
            for (int64_t h = 0; h < p->heads_q; h++)
                for (int64_t j = begin; j < end; j++) pairs += visibility_allows(p, b, h, i, begin, end, j);
        }
    return pairs;
}
