/*
 * eltwise.h — the elementwise micro-kernels (src/isa/eltwise_table.h has
 * the contracts), written once over the vector vocabulary of
 * templates/common.h: the includer includes its vec.h and exp2.h (v_exp2,
 * exact on integers: p(0) = 1 times 2^n) first, and gets the static
 * functions eltwise_exp .. eltwise_add and ELTWISE_ENTRIES for its table.
 *
 * e^x: n = round(x log2 e) (the 1.5·2^23 trick), r = x − n ln2 in two FMAs
 * (Cody and Waite: ln2 split in a high part with few bits and the rest),
 * |r| <= ln2/2, e^r by its Taylor polynomial to degree 7 (truncation
 * 0.347^8/8! = 5.3e-9 relative: 0.1 ulp), scaled by 2^(n−1) · 2 so
 * that n = 128 (x up to 88.72) stays finite.  Arguments are clamped to
 * [-104, 89] first (e^-104 rounds to 0) in a way that keeps NaN (v_if_lt takes its last operand
 * on a NaN compare).
 */
#ifndef ATTN_ISA_TEMPLATES_ELTWISE_H
#define ATTN_ISA_TEMPLATES_ELTWISE_H

#include "isa/templates/common.h"

#include <math.h>
#include <stdint.h>

/* a·b + c: the ISA's fused multiply-add, unless the includer defines
 * ELTWISE_FMA first (portable C: a product and a sum, since fmaf is a
 * slow library call where the CPU has no FMA; the arithmetic above needs
 * no fused rounding: n·ln2_hi is exact, ln2_hi having 12 bits). */
#ifndef ELTWISE_FMA
#define ELTWISE_FMA(a, b, c) v_fma(a, b, c)
#endif

SIMD_INLINE vec eltwise_v_exp(vec x) {
    x = v_if_lt(v_set1(89.0f), x, v_set1(89.0f), x);
    x = v_if_lt(x, v_set1(-104.0f), v_set1(-104.0f), x);
    const vec round = v_set1(12582912.0f);
    vec n = v_sub(ELTWISE_FMA(x, v_set1(1.44269504088896341f), round), round);
    vec r = ELTWISE_FMA(n, v_set1(-0.693145751953125f), x);
    r = ELTWISE_FMA(n, v_set1(-1.428606765330187045e-06f), r);
    vec p = v_set1(1.0f / 5040.0f);
    p = ELTWISE_FMA(p, r, v_set1(1.0f / 720.0f));
    p = ELTWISE_FMA(p, r, v_set1(1.0f / 120.0f));
    p = ELTWISE_FMA(p, r, v_set1(1.0f / 24.0f));
    p = ELTWISE_FMA(p, r, v_set1(1.0f / 6.0f));
    p = ELTWISE_FMA(p, r, v_set1(0.5f));
    p = ELTWISE_FMA(p, r, v_set1(1.0f));
    p = ELTWISE_FMA(p, r, v_set1(1.0f));
    /* 2^n as 2^h 2^(n-h), h = round(n/2): both factors normal and exact
     * for n in [-150, 129], p 2^h exact, one rounding at the end (an
     * overflow to inf, a subnormal, 0, as they fall) */
    const vec h = v_sub(ELTWISE_FMA(n, v_set1(0.5f), round), round);
    return v_mul(v_mul(p, v_exp2(h)), v_exp2(v_sub(n, h)));
}

/* g / (1 + e^-a): SiLU with a = g, tanh-GELU with a = 2t.  With e = e^-|a|
 * (never overflows): g / (1 + e) for a >= 0, g e / (1 + e) below, where
 * g / (1 + e^-a) would overflow e^-a while the value is still a normal
 * float. */
SIMD_INLINE vec eltwise_v_gate(vec g, vec a) {
    const vec e = eltwise_v_exp(v_sub(v_zero(), v_max(a, v_sub(v_zero(), a))));
    return v_div(v_if_lt(a, v_zero(), v_mul(g, e), g), v_add(v_set1(1.0f), e));
}

SIMD_INLINE vec eltwise_v_gelu_tanh(vec g) {
    /* 2t = 2 sqrt(2/pi) (g + 0.044715 g^3) = g (c1 + c3 g^2) */
    const vec g2 = v_mul(g, g);
    const vec a = v_mul(g, ELTWISE_FMA(g2, v_set1(2.0f * 0.7978845608028654f * 0.044715f), v_set1(2.0f * 0.7978845608028654f)));
    return eltwise_v_gate(g, a);
}

/* The loop of every unary kernel: whole vectors, then one masked tail. */
#define ELTWISE_MAP(n, body)                                                                                           \
    do {                                                                                                               \
        int64_t i_ = 0;                                                                                                \
        for (; i_ + VLEN <= (n); i_ += VLEN) body(i_, VLEN);                                                           \
        if (i_ < (n)) body(i_, (int)((n) - i_));                                                                       \
    } while (0)

static SIMD_TARGET void eltwise_exp(const float *x, int64_t n, float *y) {
#define EXP_BODY(i, m) v_store_tail(y + (i), eltwise_v_exp(v_load_tail(x + (i), (m), 0.0f)), (m))
    ELTWISE_MAP(n, EXP_BODY);
#undef EXP_BODY
}

static SIMD_TARGET void eltwise_silu_mul(float *g, const float *u, int64_t n) {
#define SILU_BODY(i, m)                                                                                                \
    do {                                                                                                               \
        const vec gv = v_load_tail(g + (i), (m), 0.0f);                                                                \
        v_store_tail(g + (i), v_mul(eltwise_v_gate(gv, gv), v_load_tail(u + (i), (m), 0.0f)), (m));                   \
    } while (0)
    ELTWISE_MAP(n, SILU_BODY);
#undef SILU_BODY
}

static SIMD_TARGET void eltwise_gelu_tanh_mul(float *g, const float *u, int64_t n) {
#define GELU_BODY(i, m)                                                                                                \
    v_store_tail(g + (i), v_mul(eltwise_v_gelu_tanh(v_load_tail(g + (i), (m), 0.0f)), v_load_tail(u + (i), (m), 0.0f)), \
                 (m))
    ELTWISE_MAP(n, GELU_BODY);
#undef GELU_BODY
}

static SIMD_TARGET void eltwise_rmsnorm(const float *x, int64_t n, const float *w, double eps, float *y) {
    vec s0 = v_zero(), s1 = v_zero();
    int64_t i = 0;
    for (; i + 2 * VLEN <= n; i += 2 * VLEN) {
        const vec a = v_loadu(x + i), b = v_loadu(x + i + VLEN);
        s0 = ELTWISE_FMA(a, a, s0);
        s1 = ELTWISE_FMA(b, b, s1);
    }
    for (; i < n; i += VLEN) {
        const vec a = v_load_tail(x + i, (int)(n - i < VLEN ? n - i : VLEN), 0.0f);
        s0 = ELTWISE_FMA(a, a, s0);
    }
    const double ss = v_reduce_add(v_add(s0, s1));
    const vec inv = v_set1((float)(1.0 / sqrt(ss / (double)n + eps)));
#define NORM_BODY(i, m)                                                                                                \
    v_store_tail(y + (i), v_mul(v_mul(v_load_tail(x + (i), (m), 0.0f), inv), v_load_tail(w + (i), (m), 0.0f)), (m))
    ELTWISE_MAP(n, NORM_BODY);
#undef NORM_BODY
}

static SIMD_TARGET void eltwise_add(float *x, const float *y, int64_t n) {
#define ADD_BODY(i, m) v_store_tail(x + (i), v_add(v_load_tail(x + (i), (m), 0.0f), v_load_tail(y + (i), (m), 0.0f)), (m))
    ELTWISE_MAP(n, ADD_BODY);
#undef ADD_BODY
}

#define ELTWISE_ENTRIES                                                                                                \
    .exp = eltwise_exp, .silu_mul = eltwise_silu_mul, .gelu_tanh_mul = eltwise_gelu_tanh_mul,                          \
    .rmsnorm = eltwise_rmsnorm, .add = eltwise_add

#endif /* ATTN_ISA_TEMPLATES_ELTWISE_H */
