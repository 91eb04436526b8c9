/*
 * exp2.h — the vectorised exp2 of the AVX-512 micro-kernels, shared by the
 * forward and the backward (ukernels.c beside this file) so both use the
 * very same approximation.  The includer includes vec.h beside this file and
 * src/isa/flash_table.h (the FLASH_EXP2_* constants) first.
 */
#ifndef ATTN_ISA_X86_AVX512_EXP2_H
#define ATTN_ISA_X86_AVX512_EXP2_H

#include "isa/templates/exp2_poly.h"

/* exp2 as in src/isa/flash_table.h: 2^x = 2^n · p(x − n), n = round(x) (by the 1.5·2^23
 * trick: two adds, which any FMA port takes, instead of vrndscaleps);
 * vscalefps applies 2^n and saturates to +inf above 128.  x below
 * FLASH_EXP2_MIN, -inf included, gives 0 through the zero-mask; NaN is kept
 * by the mask and propagates. */
static inline SIMD_TARGET vec v_exp2(vec x) {
    const vec round = _mm512_set1_ps(12582912.0f);
    __mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(FLASH_EXP2_MIN), _CMP_NLT_UQ);
    vec n = _mm512_sub_ps(_mm512_add_ps(x, round), round);
    vec f = _mm512_sub_ps(x, n);
    vec p = exp2_poly(f);
    return _mm512_maskz_scalef_ps(keep, p, n);
}

/* exp2 of x <= 0 or NaN (a softmax's s − m): the same (nothing to clamp). */
#define v_exp2_nonpos(x) v_exp2(x)

#endif /* ATTN_ISA_X86_AVX512_EXP2_H */
