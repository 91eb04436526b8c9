/*
 * logits.c — the options of the score stage (logits.h): their validation
 * and the standard ALiBi slopes.
 */
#include "base/logits.h"

#include <math.h>

attn_status attn__logits_check(const sdpa_problem *p) {
    const attn_sdpa_options *o = &p->opt;
    if (!(o->softcap >= 0.0f) || isinf(o->softcap))
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT,
                          "softcap must be 0 (off) or a positive finite number, got %g", (double)o->softcap);
    for (int64_t h = 0; o->sinks && h < p->heads_q; h++)
        if (isnan(o->sinks[h]) || o->sinks[h] == INFINITY)
            return attn__fail(ATTN_ERR_INVALID_ARGUMENT,
                              "sinks[%lld] is %g: a sink logit must be finite, or -inf for no sink", (long long)h,
                              (double)o->sinks[h]);
    if (o->alibi_slopes && o->alibi_standard)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT,
                          "alibi_slopes and alibi_standard are both set: give the slopes, or ask for the "
                          "standard ones, not both");
    for (int64_t h = 0; o->alibi_slopes && h < p->heads_q; h++)
        if (!isfinite(o->alibi_slopes[h]))
            return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "alibi_slopes[%lld] is %g: slopes must be finite",
                              (long long)h, (double)o->alibi_slopes[h]);
    return ATTN_OK;
}

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
