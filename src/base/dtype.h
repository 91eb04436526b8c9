/*
 * dtype.h — element types: their names and sizes (dtype.c), and the exact
 * conversions of the two half-precision storage formats to float.
 *
 *   float16   IEEE binary16: 1 sign, 5 exponent, 10 mantissa bits
 *   bfloat16  the top 16 bits of a float32: 1 sign, 8 exponent, 7 mantissa
 *             bits (8 significant bits), so widening is a shift
 */
#ifndef ATTN_BASE_DTYPE_H
#define ATTN_BASE_DTYPE_H

#include "base/base.h"

#include <string.h>

/* True for a value of the attn_dtype enumeration. */
bool attn__dtype_valid(attn_dtype dtype);

static inline bool dtype_is_float(attn_dtype dtype) {
    return dtype == ATTN_F32 || dtype == ATTN_F64 || dtype == ATTN_F16 || dtype == ATTN_BF16;
}

/* IEEE binary16 bits -> float, exactly: every half value is a float value.
 *   exponent 0        zero or subnormal: mantissa * 2^-24
 *   exponent 31       inf (mantissa 0) or NaN (payload kept in the top bits)
 *   otherwise         rebias the exponent from 15 to 127 */
static inline float dtype_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exponent = (h >> 10) & 0x1Fu;
    uint32_t mantissa = h & 0x3FFu;
    uint32_t bits;
    if (exponent == 0) {
        /* mantissa < 2^10 and the scale is a power of two: the product is exact. */
        float magnitude = (float)mantissa * 0x1p-24f;
        memcpy(&bits, &magnitude, sizeof bits);
        bits |= sign;
    } else if (exponent == 31) {
        bits = sign | 0x7F800000u | (mantissa << 13);
    } else {
        bits = sign | ((exponent + 112u) << 23) | (mantissa << 13);
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* bfloat16 bits -> float, exactly: the bits are the float's top half. */
static inline float dtype_bf16_to_f32(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

#endif /* ATTN_BASE_DTYPE_H */
