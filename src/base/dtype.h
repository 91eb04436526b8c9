/*
 * dtype.h — element types: their names and sizes (dtype.c), and the exact
 * conversions of the two half-precision storage formats to float and back.
 *
 *   float16   IEEE binary16: 1 sign, 5 exponent, 10 mantissa bits
 *   bfloat16  the top 16 bits of a float32: 1 sign, 8 exponent, 7 mantissa
 *             bits (8 significant bits), so widening is a shift
 *
 * Narrowing rounds to nearest, ties to even (IEEE's default, what F16C's
 * vcvtps2ph with imm 0, numpy's astype(float16) and PyTorch's .to(bfloat16)
 * do): overflow gives infinity, tiny values become float16 subnormals or
 * zero, and NaN stays NaN (quiet, sign and top payload bits kept).
 * tests/base/test_dtype checks every half and a wide sample of floats.
 */
#ifndef ATTN_BASE_DTYPE_H
#define ATTN_BASE_DTYPE_H

#include "base/base.h"

#include <math.h>
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

/* float -> IEEE binary16 bits, rounded to nearest even.
 *   |f| >= 65520 (65504 + half its ulp)   infinity (65520 itself is a tie,
 *                                        and the even neighbour is 2^16)
 *   |f| >= 2^-14                         normal: rebias the exponent, round
 *                                        the 13 dropped mantissa bits; a
 *                                        carry moves into the exponent,
 *                                        which is the right result
 *   smaller                              subnormal: f / 2^-24 rounded to an
 *                                        integer in [0, 1024] (1024 is the
 *                                        smallest normal, encoded the same) */
static inline uint16_t dtype_f32_to_f16(float f) {
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    const uint16_t sign = (uint16_t)((bits >> 16) & 0x8000u);
    const uint32_t magnitude = bits & 0x7FFFFFFFu;
    if (magnitude > 0x7F800000u) /* NaN: quiet, so that a payload only in the dropped bits stays NaN */
        return (uint16_t)(sign | 0x7E00u | ((magnitude >> 13) & 0x03FFu));
    if (magnitude >= 0x477FF000u) return (uint16_t)(sign | 0x7C00u); /* 65520 and above, inf */
    if (magnitude >= 0x38800000u) {                                   /* 2^-14 and above */
        const uint32_t rounded = magnitude + 0x0FFFu + ((magnitude >> 13) & 1u);
        return (uint16_t)(sign | ((rounded - (112u << 23)) >> 13));
    }
    const uint32_t exponent = magnitude >> 23;
    if (exponent < 102) return sign; /* below 2^-25: rounds to 0 (2^-25 itself is the tie to even 0) */
    /* magnitude = m * 2^(exponent - 150) = (m >> shift) units of 2^-24 plus a remainder. */
    const uint32_t m = (magnitude & 0x007FFFFFu) | 0x00800000u;
    const uint32_t shift = 126u - exponent; /* 14 .. 24 */
    const uint32_t half = 1u << (shift - 1), remainder = m & ((1u << shift) - 1u);
    uint32_t units = m >> shift;
    if (remainder > half || (remainder == half && (units & 1u))) units++;
    return (uint16_t)(sign | units);
}

/* float -> bfloat16 bits, rounded to nearest even: add just under half of
 * the dropped 16 bits' weight, plus one when the kept part is odd, and
 * truncate (a carry into the exponent, up to infinity, is the right result). */
static inline uint16_t dtype_f32_to_bf16(float f) {
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    if ((bits & 0x7FFFFFFFu) > 0x7F800000u) /* NaN: quiet, as for float16 */
        return (uint16_t)((bits >> 16) | 0x0040u);
    bits += 0x7FFFu + ((bits >> 16) & 1u);
    return (uint16_t)(bits >> 16);
}

/* double -> float rounded to ODD: toward zero, then the last bit set if
 * anything was dropped.  Rounding that to a format with at least two fewer
 * significant bits (float16's 11, bfloat16's 8, against float's 24) gives
 * exactly the double rounded once to nearest even (Boldo and Melquiond,
 * "Emulation of FMA and correctly rounded sums: proved algorithms using
 * rounding to odd", 2008), where (float) then narrowing would round twice
 * and can land one ulp off at a tie.  Values beyond the float range give
 * FLT_MAX (stepped back from infinity), which narrows to infinity, as a
 * direct rounding would. */
static inline float dtype_f64_to_f32_odd(double x) {
    float f = (float)x;
    if ((double)f == x || x != x) return f;
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    /* (float) rounded away from zero: one step back toward it (a float's
     * bits order its magnitudes, whatever the sign; infinity steps back to
     * FLT_MAX).  Written without a branch: which way (float) went is a coin
     * toss on real data, and a mispredicted branch per element was most of
     * the cost of a bfloat16 RoPE. */
    bits -= (uint32_t)(fabs((double)f) > fabs(x));
    bits |= 1u;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* double -> float16 / bfloat16 bits, rounded once to nearest even. */
static inline uint16_t dtype_f64_to_f16(double x) { return dtype_f32_to_f16(dtype_f64_to_f32_odd(x)); }
static inline uint16_t dtype_f64_to_bf16(double x) { return dtype_f32_to_bf16(dtype_f64_to_f32_odd(x)); }

/* n contiguous elements of dtype (F32, F16 or BF16; or an 8-bit block
 * format, src at a block's start, n a multiple of 32) to float32: a copy,
 * the exact widening of a half type, or the blocks' values (kv8.h). */
static inline void dtype_load_f32(const void *src, attn_dtype dtype, int64_t n, float *dst) {
    const uint16_t *h = (const uint16_t *)src;
    if (dtype == ATTN_Q8_0 || dtype == ATTN_FP8_E4M3) (void)attn_dequantize(src, dtype, n, dst);
    else if (dtype == ATTN_F32) memcpy(dst, src, (size_t)n * sizeof(float));
    else if (dtype == ATTN_F16)
        for (int64_t i = 0; i < n; i++) dst[i] = dtype_f16_to_f32(h[i]);
    else
        for (int64_t i = 0; i < n; i++) dst[i] = dtype_bf16_to_f32(h[i]);
}

#endif /* ATTN_BASE_DTYPE_H */
