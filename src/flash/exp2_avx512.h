/*
 * exp2_avx512.h — the vectorised exp2 of the AVX-512 micro-kernels, shared by
 * the forward (src/flash/kernels_avx512.c) and the backward
 * (src/grad/grad_kernels_avx512.c) so both use the very same approximation.
 * The includer defines `vec` (__m512) and SIMD_TARGET (the target attribute)
 * and includes flash/flash.h for the FLASH_EXP2_* constants.
 */
#ifndef ATTN_FLASH_EXP2_AVX512_H
#define ATTN_FLASH_EXP2_AVX512_H

/* exp2 as in flash.h: 2^x = 2^n · p(x − n), n = round(x) (by the 1.5·2^23
 * trick: two adds, which any FMA port takes, instead of vrndscaleps);
 * vscalefps applies 2^n and saturates to +inf above 128.  x below
 * FLASH_EXP2_MIN, -inf included, gives 0 through the zero-mask; NaN is kept
 * by the mask and propagates. */
static inline SIMD_TARGET vec v_exp2(vec x) {
    const vec round = _mm512_set1_ps(12582912.0f);
    __mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(FLASH_EXP2_MIN), _CMP_NLT_UQ);
    vec n = _mm512_sub_ps(_mm512_add_ps(x, round), round);
    vec f = _mm512_sub_ps(x, n);
    vec p = _mm512_set1_ps(FLASH_EXP2_C6);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(FLASH_EXP2_C5));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(FLASH_EXP2_C4));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(FLASH_EXP2_C3));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(FLASH_EXP2_C2));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(FLASH_EXP2_C1));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
    return _mm512_maskz_scalef_ps(keep, p, n);
}

#endif /* ATTN_FLASH_EXP2_AVX512_H */
