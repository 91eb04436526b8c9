/*
 * kv8.h — the 8-bit block formats of K and V (attn.h: ATTN_Q8_0,
 * ATTN_FP8_E4M3): a block is 32 values of one row, 34 bytes, a float16
 * scale d and 32 codes, value = d * code.  The scalar codecs here are the
 * definition; the kernels' vector loads (src/isa/templates/flash_ukernels.h,
 * kv_load_el) give the same floats.  kv8.c quantizes whole rows.
 *
 * e4m3 ("e4m3fn", OCP FP8): 1 sign, 4 exponent bits (bias 7), 3 mantissa
 * bits, no infinity; S.1111.111 is NaN, so the largest value is
 * S.1111.110 = 448; exponent 0 holds subnormals m * 2^-9.
 */
#ifndef ATTN_BASE_KV8_H
#define ATTN_BASE_KV8_H

#include "base/dtype.h"

#include <math.h>
#include <stdint.h>

enum {
    KV8_BLOCK = 32,       /* values per block */
    KV8_BLOCK_BYTES = 34, /* float16 scale + 32 one-byte codes */
};

static inline bool dtype_is_kv8(attn_dtype dtype) { return dtype == ATTN_Q8_0 || dtype == ATTN_FP8_E4M3; }

/* Bytes from a row's start to value `at` of it, a multiple of 32 for the
 * block formats (element offsets count values). */
static inline int64_t kv8_offset_bytes(int64_t at) { return at / KV8_BLOCK * KV8_BLOCK_BYTES; }

/* The block's scale, from its first two bytes (little-endian float16). */
static inline float kv8_scale(const uint8_t *block) {
    return dtype_f16_to_f32((uint16_t)(block[0] | (uint16_t)block[1] << 8));
}

/* e4m3 code -> float, exactly. */
static inline float kv8_e4m3_to_f32(uint8_t c) {
    const int e = (c >> 3) & 15, m = c & 7;
    float a;
    if (e == 15 && m == 7) a = NAN;
    else if (e == 0) a = (float)m * 0x1p-9f;
    else a = ldexpf(1.0f + (float)m * 0.125f, e - 7);
    return c & 0x80 ? -a : a;
}

/* float -> e4m3 code, rounded to nearest even, saturating at +-448 (Inf
 * too); NaN -> the NaN code.  *saturated += 1 when the rounded magnitude
 * would have exceeded 448 (|y| > 464, the tie 464 rounds to 448). */
static inline uint8_t kv8_f32_to_e4m3(float y, int64_t *saturated) {
    const uint8_t sign = signbit(y) ? 0x80 : 0;
    const float a = fabsf(y);
    if (a != a) return (uint8_t)(sign | 0x7F);
    if (a > 464.0f) {
        (*saturated)++;
        return (uint8_t)(sign | 0x7E);
    }
    if (a < 0x1p-6f) return (uint8_t)(sign | (uint8_t)nearbyintf(a * 512.0f)); /* subnormal (8: the smallest normal) */
    uint32_t bits;
    memcpy(&bits, &a, sizeof bits);
    bits += 0x7FFFFu + ((bits >> 20) & 1u); /* round the 20 dropped mantissa bits, ties to even */
    const uint32_t e = (bits >> 23) - 127u + 7u, m = (bits >> 20) & 7u;
    const uint32_t code = e << 3 | m;
    return (uint8_t)(sign | (code > 0x7E ? 0x7E : code)); /* 464 itself rounds to 448 (even) */
}

/* Value i of a block, exactly as the kernels compute it: d * code in float. */
static inline float kv8_value(attn_dtype dtype, const uint8_t *block, int64_t i) {
    const float d = kv8_scale(block);
    const uint8_t c = block[2 + i];
    return dtype == ATTN_Q8_0 ? d * (float)(int8_t)c : d * kv8_e4m3_to_f32(c);
}

/* One block of 32 floats quantized (attn.h's rules); *saturated counts. */
void attn__kv8_quantize_block(const float *x, attn_dtype dtype, uint8_t *block, int64_t *saturated);

#endif /* ATTN_BASE_KV8_H */
