/*
 * exp2.h — the vectorised exp2 of the AVX2+FMA micro-kernels, shared by the
 * forward and the backward (ukernels.c beside this file) so both use the
 * very same approximation.  The includer includes vec.h beside this file and
 * src/isa/flash_table.h (the FLASH_EXP2_* constants) first.
 */
#ifndef ATTN_ISA_X86_AVX2_EXP2_H
#define ATTN_ISA_X86_AVX2_EXP2_H

#include "isa/templates/exp2_poly.h"

/* exp2 of x <= 128 (or NaN), as in src/isa/flash_table.h: 2^x = 2^n · p(x − n),
 * n = round(x) by the 1.5·2^23 trick: t = x + 1.5·2^23 holds n in its low
 * mantissa bits (bits(t) = 0x4B400000 + n), so 2^n is the float with bits
 * (bits(t) << 23) + bits(1.0f) — the high bits shifted out, 127 << 23 being
 * 1.0f's bits — the same bits as converting n to an integer and biasing it,
 * with one instruction and one constant fewer (1.0f is the polynomial's).
 * Below FLASH_EXP2_MIN, -inf included, the result is masked to 0, whatever
 * garbage the exponent arithmetic made; NaN propagates. */
static inline SIMD_TARGET vec v_exp2_le128(vec x) {
    const vec round = _mm256_set1_ps(12582912.0f);
    vec keep = _mm256_cmp_ps(x, _mm256_set1_ps(FLASH_EXP2_MIN), _CMP_NLT_UQ);
    vec t = _mm256_add_ps(x, round);
    vec f = _mm256_add_ps(x, _mm256_sub_ps(round, t)); /* x − n, n = t − round: both exact; no −round constant */
    vec p = exp2_poly(f);
    __m256i e = _mm256_add_epi32(_mm256_slli_epi32(_mm256_castps_si256(t), 23),
                                 _mm256_castps_si256(_mm256_set1_ps(1.0f)));
    return _mm256_and_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(e)), keep);
}

/* exp2 of any x: clamped to 128 above first (2^128 = +inf). */
static inline SIMD_TARGET vec v_exp2(vec x) { return v_exp2_le128(_mm256_min_ps(_mm256_set1_ps(128.0f), x)); }

/* exp2 of x <= 0 or NaN (a softmax's s − m): no clamp needed. */
#define v_exp2_nonpos(x) v_exp2_le128(x)

#endif /* ATTN_ISA_X86_AVX2_EXP2_H */
