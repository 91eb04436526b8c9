/*
 * logits.h — the score stage beyond scale·q·k and the bias: logit
 * soft-capping, ALiBi and attention sinks (docs/logits.md).  The one place
 * their rules are written: the reference, the flash kernels and the FLOP
 * count go through these functions.
 *
 * Order of operations for query row (b, h, i) and key j:
 *   raw_ij = scale · q_i·k_j
 *   s_ij   = softcap(raw_ij) + bias_ij + slope_h · (j − (i + offset))
 *            softcap(x) = cap · tanh(x / cap)  (Gemma 2: the raw scaled
 *            logits are capped; bias, ALiBi and masks come after, so a -inf
 *            bias still hides a key and ALiBi is not squashed by the cap)
 *   a key hidden by any rule (visibility.h) gets -inf, whatever s_ij was
 *   p_ij   = exp(s_ij) / (exp(sink_h) + sum_j exp(s_ij))     (no sink: 0)
 *   lse_i  = log(exp(sink_h) + sum_j exp(s_ij))
 * offset is the problem's diagonal_offset: i + offset is query i's position
 * in the keys' coordinates (query_start, key_start and the alignment place
 * it, as for causal), so j − (i + offset) is the key's distance from the
 * query, negative for earlier keys.
 *
 * Shape legend: sinks, alibi_slopes [Hq].
 */
#ifndef ATTN_BASE_LOGITS_H
#define ATTN_BASE_LOGITS_H

#include "base/problem.h"

#include <math.h>


static inline bool logits_softcapped(const sdpa_problem *p) { return p->opt.softcap > 0.0f; }

/* softcap(raw), in double (raw itself without a cap). */
static inline double logits_softcap(const sdpa_problem *p, double raw) {
    if (!logits_softcapped(p)) return raw;
    const double cap = (double)p->opt.softcap;
    return cap * tanh(raw / cap);
}

/* d softcap(raw) / d raw = 1 − tanh²(raw / cap): what the backward
 * multiplies dS by (1 without a cap). */
static inline double logits_softcap_slope(const sdpa_problem *p, double raw) {
    if (!logits_softcapped(p)) return 1.0;
    const double t = tanh(raw / (double)p->opt.softcap);
    return 1.0 - t * t;
}

static inline bool logits_has_alibi(const sdpa_problem *p) {
    return p->opt.alibi_slopes != NULL || p->opt.alibi_standard;
}

/* The ALiBi slope of query head h: the caller's, or the paper's geometric
 * sequence for Hq heads (below); 0 without ALiBi. */
double attn__logits_alibi_slope(const sdpa_problem *p, int64_t h);

/* The standard slope of head h of n: for n a power of two 2^(−8(h+1)/n);
 * otherwise, with n2 the largest power of two below n, the n2 slopes of n2
 * heads followed by every other slope of 2·n2 heads (the paper's reference
 * implementation's rule for other head counts). */
double attn__logits_alibi_standard_slope(int64_t h, int64_t n);

/* ALiBi's bias for key j of query i at slope `slope`: slope · (j − (i + offset)). */
static inline double logits_alibi_bias(const sdpa_problem *p, double slope, int64_t i, int64_t j) {
    return slope * (double)(j - (i + p->diagonal_offset));
}

/* The slope of head h in the flash kernels' base 2, as a float (0: no
 * ALiBi for the head, whatever rounded it there): slope2 below. */
static inline float logits_alibi_slope2(const sdpa_problem *p, int64_t h) {
    return (float)(LOG2E * attn__logits_alibi_slope(p, h));
}

/* The same in the flash kernels' base 2 and float: slope2 = log2(e) ·
 * slope, diagonal = i + offset; one rounding of an exact integer distance
 * (|distance| < 2^24) times one of slope2. */
static inline float logits_alibi_bias2(float slope2, int64_t diagonal, int64_t j) {
    return slope2 * (float)(j - diagonal);
}

/* The sink logit of query head h, natural log; -inf without sinks. */
static inline double logits_sink(const sdpa_problem *p, int64_t h) {
    return p->opt.sinks ? (double)p->opt.sinks[h] : -INFINITY;
}

#endif /* ATTN_BASE_LOGITS_H */
