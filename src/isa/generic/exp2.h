/*
 * exp2.h — the portable exp2 of the generic micro-kernels, shared by the
 * forward (ukernels.c) and the backward (grad_ukernels.c).  Same range
 * reduction and polynomial as the SIMD versions (src/isa/flash_table.h holds
 * the constants).
 */
#ifndef ATTN_ISA_GENERIC_EXP2_H
#define ATTN_ISA_GENERIC_EXP2_H

#include "isa/flash_table.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

/* exp2 by range reduction to [-0.5, 0.5] and the polynomial of src/isa/flash_table.h:
 * 2^x = 2^n · 2^f with n = round(x).  x < FLASH_EXP2_MIN gives 0, NaN gives
 * NaN, x > 127 gives +inf. */
static inline float flash_exp2_scalar(float x) {
    if (!(x >= FLASH_EXP2_MIN)) return x < FLASH_EXP2_MIN ? 0.0f : x; /* tiny, or NaN */
    if (x > 127.0f) return INFINITY;
    float n = floorf(x + 0.5f);
    float f = x - n;
    float p = FLASH_EXP2_C6;
    p = p * f + FLASH_EXP2_C5;
    p = p * f + FLASH_EXP2_C4;
    p = p * f + FLASH_EXP2_C3;
    p = p * f + FLASH_EXP2_C2;
    p = p * f + FLASH_EXP2_C1;
    p = p * f + 1.0f;
    uint32_t bits = (uint32_t)((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

#endif /* ATTN_ISA_GENERIC_EXP2_H */
