/*
 * exp2_poly.h — the polynomial half of every vector exp2 (each ISA's exp2.h
 * does the range reduction and the scaling by 2^n its own way):
 * p(f) ≈ 2^f on [-0.5, 0.5] with the FLASH_EXP2 coefficients of
 * src/isa/flash_table.h, by Horner's rule with fused multiply-adds.
 */
#ifndef ATTN_ISA_TEMPLATES_EXP2_POLY_H
#define ATTN_ISA_TEMPLATES_EXP2_POLY_H

#include "isa/templates/common.h"

SIMD_INLINE vec exp2_poly(vec f) {
    vec p = v_set1(FLASH_EXP2_C6);
    p = v_fma(p, f, v_set1(FLASH_EXP2_C5));
    p = v_fma(p, f, v_set1(FLASH_EXP2_C4));
    p = v_fma(p, f, v_set1(FLASH_EXP2_C3));
    p = v_fma(p, f, v_set1(FLASH_EXP2_C2));
    p = v_fma(p, f, v_set1(FLASH_EXP2_C1));
    return v_fma(p, f, v_set1(1.0f));
}

#endif /* ATTN_ISA_TEMPLATES_EXP2_POLY_H */
