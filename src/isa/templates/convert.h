/*
 * convert.h — widen and narrow (src/isa/flash_table.h) for any vector width:
 * whole vectors by the ISA's v_widen_f16 / v_widen_bf16 / v_narrow_f16 /
 * v_narrow_bf16 (its vec.h, the one place an ISA converts), the tail by the
 * scalar conversions of base/dtype.h, which round the same way.  Defines
 * simd_widen and simd_narrow for the including file's table.
 */

#include "isa/templates/common.h"
#include "base/dtype.h"
#include "base/kv8.h"

static SIMD_TARGET void simd_widen(const void *src, attn_dtype dtype, float *dst, int64_t n) {
    const uint16_t *half = src;
    int64_t e = 0;
    if (dtype_is_kv8(dtype)) { /* whole blocks from src (kv8.h), d * code as the rows kernels load them */
        for (; e + KV8_BLOCK <= n; e += KV8_BLOCK) {
            const uint8_t *block = (const uint8_t *)src + kv8_offset_bytes(e);
            const vec d = v_kv8_scale(block);
            for (int i = 0; i < KV8_BLOCK; i += VLEN)
                v_storeu(dst + e + i, dtype == ATTN_Q8_0 ? v_dequant_q8(block + 2 + i, d) : v_dequant_e4m3(block + 2 + i, d));
        }
        for (; e < n; e++) dst[e] = kv8_value(dtype, (const uint8_t *)src + kv8_offset_bytes(e), e % KV8_BLOCK);
    } else if (dtype == ATTN_F16) {
        for (; e + VLEN <= n; e += VLEN) v_storeu(dst + e, v_widen_f16(half + e));
        for (; e < n; e++) dst[e] = dtype_f16_to_f32(half[e]);
    } else if (dtype == ATTN_BF16) {
        for (; e + VLEN <= n; e += VLEN) v_storeu(dst + e, v_widen_bf16(half + e));
        for (; e < n; e++) dst[e] = dtype_bf16_to_f32(half[e]);
    } else {
        memcpy(dst, src, sizeof(float) * (size_t)n);
    }
}

static SIMD_TARGET void simd_narrow(const float *src, attn_dtype dtype, void *dst, int64_t n) {
    uint16_t *half = dst;
    int64_t e = 0;
    if (dtype == ATTN_F16) {
        for (; e + VLEN <= n; e += VLEN) v_narrow_f16(half + e, v_loadu(src + e));
        for (; e < n; e++) half[e] = dtype_f32_to_f16(src[e]);
    } else if (dtype == ATTN_BF16) {
        for (; e + VLEN <= n; e += VLEN) v_narrow_bf16(half + e, v_loadu(src + e));
        for (; e < n; e++) half[e] = dtype_f32_to_bf16(src[e]);
    } else {
        memcpy(dst, src, sizeof(float) * (size_t)n);
    }
}
