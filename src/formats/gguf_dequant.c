/*
 * gguf_dequant.c — GGUF's tensor types: the table of their blocks, and the
 * conversion of the ones attn reads to float32.
 *
 * Written from the formats' descriptions; the arithmetic is the gguf
 * package's numpy reference (gguf.quants.dequantize), whose every step is a
 * float32 operation rounded on its own, in the order given below, so that
 * the results are bit for bit the reference's (tests/model/test_gguf.c).
 * This file is compiled with -ffp-contract=off: a fused multiply-add would
 * round once where the reference rounds twice (Q4_1, Q5_1, Q4_K, Q5_K).
 * ggml's own C converter computes the same products in the same order, so
 * it agrees too, except where a build of it contracts them into FMAs.
 *
 * Shape legend, per block type (fp16 = IEEE binary16, little-endian; every
 * block stores its elements in order, and a row is whole blocks):
 *
 *   type   elements bytes  layout (byte offsets)                 element
 *   F32        1      4    float32                               x
 *   F16        1      2    fp16                                  x (exact widening)
 *   BF16       1      2    the top half of a float32             x (exact widening)
 *   Q8_0      32     34    d fp16 | q int8[32]                   q[i] * d
 *   Q4_0      32     18    d fp16 | qs[16]                       d * (nib[i] - 8)
 *   Q4_1      32     20    d fp16 | m fp16 | qs[16]              d * nib[i] + m
 *   Q5_0      32     22    d fp16 | qh u32 | qs[16]              d * ((nib[i] | hb[i] << 4) - 16)
 *   Q5_1      32     24    d fp16 | m fp16 | qh u32 | qs[16]     d * (nib[i] | hb[i] << 4) + m
 *       where nib[i] = qs[i] & 15 and nib[i + 16] = qs[i] >> 4 (i < 16),
 *       and hb[i] = bit i of qh (i < 32).
 *
 *   Q4_K     256    144    d fp16 | dmin fp16 | scales[12] | qs[128]
 *   Q5_K     256    176    d fp16 | dmin fp16 | scales[12] | qh[32] | qs[128]
 *       8 sub-blocks s of 32 elements, each with a 6-bit scale sc[s] and
 *       6-bit min mn[s] packed in scales[12]:
 *         s < 4:  sc = scales[s] & 63            mn = scales[s + 4] & 63
 *         s >= 4: sc = (scales[s + 4] & 15) | (scales[s - 4] >> 6) << 4
 *                 mn = (scales[s + 4] >> 4) | (scales[s] >> 6) << 4
 *       element l (0..31) of sub-block s = 2g + h (g = 0..3, h = 0, 1):
 *         nib = qs[32g + l] >> 4h & 15;  Q5_K adds bit s of qh[l] as bit 4
 *         x = (d * sc[s]) * q - (dmin * mn[s])
 *
 *   Q6_K     256    210    ql[128] | qh[64] | scales int8[16] | d fp16
 *       two halves h of 128 elements; element p (0..127) of half h, with
 *       k = p / 32 and l = p % 32:
 *         low 4 bits  = ql[64h + 32(k & 1) + l] >> 4(k >> 1) & 15
 *         high 2 bits = qh[32h + l] >> 2k & 3
 *         q = (low | high << 4) - 32      (-32 .. 31)
 *         x = (d * scales[e / 16]) * q     for element e = 128h + p
 *
 * The other types of the table are sized (so that files holding them open
 * and every tensor is checked) but not converted.
 */
#include "formats/gguf_dequant.h"

#include "base/dtype.h"

static inline float f16_at(const uint8_t *p) { return dtype_f16_to_f32(gguf_u16(p)); }

static void dequantize_f32(const uint8_t *src, int64_t n, float *out) {
    for (int64_t i = 0; i < n; i++) {
        uint32_t bits = gguf_u32(src + 4 * i);
        memcpy(&out[i], &bits, sizeof bits);
    }
}

static void dequantize_f16(const uint8_t *src, int64_t n, float *out) {
    for (int64_t i = 0; i < n; i++) out[i] = f16_at(src + 2 * i);
}

static void dequantize_bf16(const uint8_t *src, int64_t n, float *out) {
    for (int64_t i = 0; i < n; i++) out[i] = dtype_bf16_to_f32(gguf_u16(src + 2 * i));
}

static void dequantize_q8_0(const uint8_t *src, int64_t n, float *out) {
    for (int64_t b = 0; b < n / 32; b++, src += 34, out += 32) {
        const float d = f16_at(src);
        for (int i = 0; i < 32; i++) out[i] = (float)(int8_t)src[2 + i] * d;
    }
}

/* The 32 4-bit codes of a Q4/Q5 block: low nibbles first, then high. */
static inline int nibble(const uint8_t *qs, int i) { return i < 16 ? qs[i] & 15 : qs[i - 16] >> 4; }

static void dequantize_q4_0(const uint8_t *src, int64_t n, float *out) {
    for (int64_t b = 0; b < n / 32; b++, src += 18, out += 32) {
        const float d = f16_at(src);
        for (int i = 0; i < 32; i++) out[i] = d * (float)(nibble(src + 2, i) - 8);
    }
}

static void dequantize_q4_1(const uint8_t *src, int64_t n, float *out) {
    for (int64_t b = 0; b < n / 32; b++, src += 20, out += 32) {
        const float d = f16_at(src), m = f16_at(src + 2);
        for (int i = 0; i < 32; i++) out[i] = d * (float)nibble(src + 4, i) + m;
    }
}

static void dequantize_q5_0(const uint8_t *src, int64_t n, float *out) {
    for (int64_t b = 0; b < n / 32; b++, src += 22, out += 32) {
        const float d = f16_at(src);
        const uint32_t qh = gguf_u32(src + 2);
        for (int i = 0; i < 32; i++) {
            const int q = nibble(src + 6, i) | (int)((qh >> i) & 1) << 4;
            out[i] = d * (float)(q - 16);
        }
    }
}

static void dequantize_q5_1(const uint8_t *src, int64_t n, float *out) {
    for (int64_t b = 0; b < n / 32; b++, src += 24, out += 32) {
        const float d = f16_at(src), m = f16_at(src + 2);
        const uint32_t qh = gguf_u32(src + 4);
        for (int i = 0; i < 32; i++) {
            const int q = nibble(src + 8, i) | (int)((qh >> i) & 1) << 4;
            out[i] = d * (float)q + m;
        }
    }
}

/* The 6-bit scale and min of sub-block s (0..7) of a Q4_K / Q5_K block. */
static inline void k_scale_min(const uint8_t *scales, int s, int *sc, int *mn) {
    if (s < 4) {
        *sc = scales[s] & 63;
        *mn = scales[s + 4] & 63;
    } else {
        *sc = (scales[s + 4] & 15) | (scales[s - 4] >> 6) << 4;
        *mn = (scales[s + 4] >> 4) | (scales[s] >> 6) << 4;
    }
}

/* Q4_K and Q5_K: qh is NULL for Q4_K. */
static void dequantize_k_block(const uint8_t *header, const uint8_t *qh, const uint8_t *qs, float *out) {
    const float d = f16_at(header), dmin = f16_at(header + 2);
    for (int s = 0; s < 8; s++) {
        int sc, mn;
        k_scale_min(header + 4, s, &sc, &mn);
        const float scale = d * (float)sc, offset = dmin * (float)mn;
        const uint8_t *q = qs + 32 * (s / 2);
        const int shift = 4 * (s % 2);
        for (int l = 0; l < 32; l++) {
            int v = (q[l] >> shift) & 15;
            if (qh) v |= ((qh[l] >> s) & 1) << 4;
            out[32 * s + l] = scale * (float)v - offset;
        }
    }
}

static void dequantize_q4_k(const uint8_t *src, int64_t n, float *out) {
    for (int64_t b = 0; b < n / 256; b++, src += 144, out += 256) dequantize_k_block(src, NULL, src + 16, out);
}

static void dequantize_q5_k(const uint8_t *src, int64_t n, float *out) {
    for (int64_t b = 0; b < n / 256; b++, src += 176, out += 256) dequantize_k_block(src, src + 16, src + 48, out);
}

static void dequantize_q6_k(const uint8_t *src, int64_t n, float *out) {
    for (int64_t b = 0; b < n / 256; b++, src += 210, out += 256) {
        const uint8_t *ql = src, *qh = src + 128;
        const int8_t *scales = (const int8_t *)(src + 192);
        const float d = f16_at(src + 208);
        for (int e = 0; e < 256; e++) {
            const int h = e / 128, p = e % 128, k = p / 32, l = p % 32;
            const int low = (ql[64 * h + 32 * (k & 1) + l] >> (4 * (k >> 1))) & 15;
            const int high = (qh[32 * h + l] >> (2 * k)) & 3;
            out[e] = (d * (float)scales[e / 16]) * (float)((low | high << 4) - 32);
        }
    }
}

/* ggml's numbering; the sizes of the types not converted are gguf-py
 * 0.19's GGML_QUANT_SIZES.  Numbers 4, 5, 31-33 and 36-38 were types that
 * ggml has removed: they are unknown here. */
#define GGUF_N_TYPES 42
static const gguf_type_traits type_traits[GGUF_N_TYPES] = {
    [ATTN_GGUF_TYPE_F32] = {"F32", 1, 4, dequantize_f32},
    [ATTN_GGUF_TYPE_F16] = {"F16", 1, 2, dequantize_f16},
    [ATTN_GGUF_TYPE_Q4_0] = {"Q4_0", 32, 18, dequantize_q4_0},
    [ATTN_GGUF_TYPE_Q4_1] = {"Q4_1", 32, 20, dequantize_q4_1},
    [ATTN_GGUF_TYPE_Q5_0] = {"Q5_0", 32, 22, dequantize_q5_0},
    [ATTN_GGUF_TYPE_Q5_1] = {"Q5_1", 32, 24, dequantize_q5_1},
    [ATTN_GGUF_TYPE_Q8_0] = {"Q8_0", 32, 34, dequantize_q8_0},
    [ATTN_GGUF_TYPE_Q8_1] = {"Q8_1", 32, 40, NULL},
    [ATTN_GGUF_TYPE_Q2_K] = {"Q2_K", 256, 84, NULL},
    [ATTN_GGUF_TYPE_Q3_K] = {"Q3_K", 256, 110, NULL},
    [ATTN_GGUF_TYPE_Q4_K] = {"Q4_K", 256, 144, dequantize_q4_k},
    [ATTN_GGUF_TYPE_Q5_K] = {"Q5_K", 256, 176, dequantize_q5_k},
    [ATTN_GGUF_TYPE_Q6_K] = {"Q6_K", 256, 210, dequantize_q6_k},
    [ATTN_GGUF_TYPE_Q8_K] = {"Q8_K", 256, 292, NULL},
    [ATTN_GGUF_TYPE_IQ2_XXS] = {"IQ2_XXS", 256, 66, NULL},
    [ATTN_GGUF_TYPE_IQ2_XS] = {"IQ2_XS", 256, 74, NULL},
    [ATTN_GGUF_TYPE_IQ3_XXS] = {"IQ3_XXS", 256, 98, NULL},
    [ATTN_GGUF_TYPE_IQ1_S] = {"IQ1_S", 256, 50, NULL},
    [ATTN_GGUF_TYPE_IQ4_NL] = {"IQ4_NL", 32, 18, NULL},
    [ATTN_GGUF_TYPE_IQ3_S] = {"IQ3_S", 256, 110, NULL},
    [ATTN_GGUF_TYPE_IQ2_S] = {"IQ2_S", 256, 82, NULL},
    [ATTN_GGUF_TYPE_IQ4_XS] = {"IQ4_XS", 256, 136, NULL},
    [ATTN_GGUF_TYPE_I8] = {"I8", 1, 1, NULL},
    [ATTN_GGUF_TYPE_I16] = {"I16", 1, 2, NULL},
    [ATTN_GGUF_TYPE_I32] = {"I32", 1, 4, NULL},
    [ATTN_GGUF_TYPE_I64] = {"I64", 1, 8, NULL},
    [ATTN_GGUF_TYPE_F64] = {"F64", 1, 8, NULL},
    [ATTN_GGUF_TYPE_IQ1_M] = {"IQ1_M", 256, 56, NULL},
    [ATTN_GGUF_TYPE_BF16] = {"BF16", 1, 2, dequantize_bf16},
    [ATTN_GGUF_TYPE_TQ1_0] = {"TQ1_0", 256, 54, NULL},
    [ATTN_GGUF_TYPE_TQ2_0] = {"TQ2_0", 256, 66, NULL},
    [ATTN_GGUF_TYPE_MXFP4] = {"MXFP4", 32, 17, NULL},
    [ATTN_GGUF_TYPE_NVFP4] = {"NVFP4", 64, 36, NULL},
    [ATTN_GGUF_TYPE_Q1_0] = {"Q1_0", 128, 18, NULL},
};

const gguf_type_traits *attn__gguf_type_traits(uint32_t type) {
    return type < GGUF_N_TYPES && type_traits[type].name ? &type_traits[type] : NULL;
}

const char *attn_gguf_type_name(attn_gguf_tensor_type type) {
    const gguf_type_traits *t = attn__gguf_type_traits((uint32_t)type);
    return t ? t->name : NULL;
}

attn_status attn_gguf_type_block(attn_gguf_tensor_type type, int64_t *block_elements, int64_t *block_bytes) {
    const gguf_type_traits *t = attn__gguf_type_traits((uint32_t)type);
    if (!t) return attn__fail(ATTN_ERR_UNSUPPORTED, "attn_gguf_type_block: %d is not a GGUF tensor type", (int)type);
    if (block_elements) *block_elements = t->block_elements;
    if (block_bytes) *block_bytes = t->block_bytes;
    return ATTN_OK;
}

int attn_gguf_type_dequantizable(attn_gguf_tensor_type type) {
    const gguf_type_traits *t = attn__gguf_type_traits((uint32_t)type);
    return t && t->dequantize;
}

attn_status attn_gguf_dequantize(attn_gguf_tensor_type type, const void *blocks, size_t size, int64_t n, float *out) {
    const gguf_type_traits *t = attn__gguf_type_traits((uint32_t)type);
    if (!t) return attn__fail(ATTN_ERR_UNSUPPORTED, "attn_gguf_dequantize: %d is not a GGUF tensor type", (int)type);
    if (!t->dequantize)
        return attn__fail(ATTN_ERR_UNSUPPORTED, "attn_gguf_dequantize: type %s is not converted (only " GGUF_CONVERTED ")",
                          t->name);
    if (n < 0 || n % t->block_elements != 0)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT,
                          "attn_gguf_dequantize: n = %lld is not a whole number of %s blocks (%lld elements each)",
                          (long long)n, t->name, (long long)t->block_elements);
    if (n == 0) return ATTN_OK;
    if (!blocks || !out)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_gguf_dequantize: %s is NULL", !blocks ? "blocks" : "out");
    uint64_t need;
    if (__builtin_mul_overflow((uint64_t)(n / t->block_elements), (uint64_t)t->block_bytes, &need) || need > size)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT,
                          "attn_gguf_dequantize: %lld %s elements need %lld blocks of %lld bytes, the buffer has %zu "
                          "bytes", (long long)n, t->name, (long long)(n / t->block_elements),
                          (long long)t->block_bytes, size);
    t->dequantize(blocks, n, out);
    return ATTN_OK;
}
