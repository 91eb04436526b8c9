/*
 * exp2.h — the vectorised exp2 of the AVX2+FMA micro-kernels, shared by the
 * forward and the backward (ukernels.c beside this file) so both use the
 * very same approximation.  The includer includes vec.h beside this file and
 * src/flash/ukernels.h (the FLASH_EXP2_* constants) first.
 */
#ifndef ATTN_ISA_X86_AVX2_EXP2_H
#define ATTN_ISA_X86_AVX2_EXP2_H

#include "isa/templates/exp2_poly.h"

/* exp2 as in src/flash/ukernels.h: 2^x = 2^n · p(x − n), n = round(x) (by the 1.5·2^23
 * trick), 2^n built in the exponent field.  x is clamped to 128 above (2^128
 * = +inf); below FLASH_EXP2_MIN, -inf included, the result is masked to 0,
 * whatever garbage the exponent arithmetic made; NaN propagates. */
static inline SIMD_TARGET vec v_exp2(vec x) {
    const vec round = _mm256_set1_ps(12582912.0f);
    vec keep = _mm256_cmp_ps(x, _mm256_set1_ps(FLASH_EXP2_MIN), _CMP_NLT_UQ);
    vec xc = _mm256_min_ps(_mm256_set1_ps(128.0f), x);
    vec n = _mm256_sub_ps(_mm256_add_ps(xc, round), round);
    vec f = _mm256_sub_ps(xc, n);
    vec p = exp2_poly(f);
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_and_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(e)), keep);
}

#endif /* ATTN_ISA_X86_AVX2_EXP2_H */
