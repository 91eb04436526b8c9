/*
 * kv8.c — quantization to the 8-bit block formats (kv8.h, attn.h's
 * attn_quantize): the scale from the block's largest magnitude, rounded to
 * float16, then each code x / d rounded to nearest even and saturated.
 * Dividing by the rounded scale (not multiplying by its inverse, not the
 * unrounded amax / 127) makes d * code the nearest value the block can
 * hold for every x within range.
 */
#include "base/kv8.h"

#include <math.h>

/* The float16 scale of a block whose largest magnitude is amax, for codes
 * up to top: amax / top rounded to nearest even, 65504 at most. */
static uint16_t block_scale(float amax, float top) {
    const float d = amax / top;
    return d >= 65504.0f ? (uint16_t)0x7BFF : dtype_f32_to_f16(d);
}

void attn__kv8_quantize_block(const float *x, attn_dtype dtype, uint8_t *block, int64_t *saturated) {
    float amax = 0.0f;
    for (int i = 0; i < KV8_BLOCK; i++) {
        const float a = fabsf(x[i]);
        if (a > amax) amax = a; /* NaN never wins */
    }
    const bool q8 = dtype == ATTN_Q8_0;
    const uint16_t d16 = block_scale(amax, q8 ? 127.0f : 448.0f);
    block[0] = (uint8_t)(d16 & 0xFF);
    block[1] = (uint8_t)(d16 >> 8);
    const float d = dtype_f16_to_f32(d16);
    for (int i = 0; i < KV8_BLOCK; i++) {
        uint8_t code;
        if (d == 0.0f) {
            code = q8 || x[i] == x[i] ? 0 : 0x7F; /* a zero block (a NaN stays NaN in FP8) */
        } else if (q8) {
            const float q = nearbyintf(x[i] / d);
            if (q > 127.0f || q < -127.0f) (*saturated)++;
            code = (uint8_t)(int8_t)(q > 127.0f ? 127 : q < -127.0f ? -127 : (int)q);
        } else {
            code = kv8_f32_to_e4m3(x[i] / d, saturated);
        }
        block[2 + i] = code;
    }
}

/* The arguments of attn_quantize / attn_dequantize (fn). */
static attn_status check_args(const char *fn, attn_dtype dtype, int64_t n, const void *src, const void *dst) {
    if (!dtype_is_kv8(dtype))
        return attn__fail(ATTN_ERR_UNSUPPORTED, "%s: %s is not an 8-bit block format (q8_0 or fp8_e4m3)", fn,
                          attn_dtype_name(dtype));
    if (n < 0 || n % KV8_BLOCK)
        return attn__fail(ATTN_ERR_SHAPE, "%s: %lld values: a whole number of blocks of 32 is needed", fn, (long long)n);
    if (n && (!src || !dst)) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn, src ? "dst" : "src");
    return ATTN_OK;
}

attn_status attn_quantize(const float *src, int64_t n, attn_dtype dtype, void *dst, int64_t *saturated) {
    static const char fn[] = "attn_quantize";
    attn_status st = check_args(fn, dtype, n, src, dst);
    if (st) return st;
    if (dtype == ATTN_Q8_0)
        for (int64_t i = 0; i < n; i++)
            if (src[i] != src[i])
                return attn__fail(ATTN_ERR_NONFINITE, "%s: value %lld is NaN, which q8_0 cannot hold", fn, (long long)i);
    int64_t count = 0;
    for (int64_t b = 0; b < n / KV8_BLOCK; b++)
        attn__kv8_quantize_block(src + b * KV8_BLOCK, dtype, (uint8_t *)dst + b * KV8_BLOCK_BYTES, &count);
    if (saturated) *saturated = count;
    return ATTN_OK;
}

attn_status attn_dequantize(const void *src, attn_dtype dtype, int64_t n, float *dst) {
    attn_status st = check_args("attn_dequantize", dtype, n, src, dst);
    if (st) return st;
    for (int64_t i = 0; i < n; i++)
        dst[i] = kv8_value(dtype, (const uint8_t *)src + kv8_offset_bytes(i), i % KV8_BLOCK);
    return ATTN_OK;
}

size_t attn_dtype_bytes(attn_dtype dtype, int64_t n) {
    if (n < 0) return 0;
    if (dtype_is_kv8(dtype)) return n % KV8_BLOCK ? 0 : (size_t)kv8_offset_bytes(n);
    return (size_t)n * attn_dtype_size(dtype);
}
