/*
 * logits.c — the options of the score stage (logits.h): their validation
 * and the standard ALiBi slopes.
 */
#include "base/logits.h"

#include <math.h>

double attn__logits_alibi_standard_slope(int64_t h, int64_t n) {
    int64_t n2 = 1;
    while (n2 * 2 <= n) n2 *= 2;
    if (h < n2) return exp2(-8.0 * (double)(h + 1) / (double)n2);
    /* every other slope of 2·n2 heads: 2^(−8(2k + 1) / (2·n2)) */
    const int64_t k = h - n2;
    return exp2(-4.0 * (double)(2 * k + 1) / (double)n2);
}

double attn__logits_alibi_slope(const sdpa_problem *p, int64_t h) {
    if (p->opt.alibi_slopes) return (double)p->opt.alibi_slopes[h];
    if (p->opt.alibi_standard) return attn__logits_alibi_standard_slope(h, p->heads_q);
    return 0.0;
}
