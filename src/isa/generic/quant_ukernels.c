/*
 * quant_ukernels.c — the portable micro-kernels of the quantized matrix
 * product (src/quant/quant.h has the contracts): plain C that builds on any
 * architecture, the contracts by example, and the complete table the other
 * ISAs fall back on entry by entry.
 *
 * Dequantization: the arithmetic of src/model/gguf_dequant.c, each float32
 * operation rounded on its own in the order given there (this file, like
 * that one, is compiled with -ffp-contract=off).
 * EXACT tile: MR = 4 rows of x, NR = 4 rows of W, 8 lanes (k mod 8), each
 * lane a product and a sum per term (no FMA: portable C has no fast one);
 * the lanes summed as (l, l+4), then (l, l+2), then (0, 1).
 * FAST tile: MR = NR = 4, k step 32; per (i, j) one float sum, group by
 * group: acc += (ws * xs) * isum, then acc += wc * xsum.
 */
#include "quant/quant.h"

#include "base/dtype.h"

#include <math.h>
#include <string.h>

static inline float f16_at(const uint8_t *p) { return dtype_f16_to_f32(quant_u16(p)); }

/* ------------------------------------------------------- dequantization */

static void dequant_f32(const uint8_t *src, int64_t n, float *out) {
    for (int64_t i = 0; i < n; i++) {
        uint32_t bits = quant_u32(src + 4 * i);
        memcpy(&out[i], &bits, sizeof bits);
    }
}

static void dequant_f16(const uint8_t *src, int64_t n, float *out) {
    for (int64_t i = 0; i < n; i++) out[i] = f16_at(src + 2 * i);
}

static void dequant_bf16(const uint8_t *src, int64_t n, float *out) {
    for (int64_t i = 0; i < n; i++) out[i] = dtype_bf16_to_f32(quant_u16(src + 2 * i));
}

static void dequant_q8_0(const uint8_t *src, int64_t n, float *out) {
    for (int64_t b = 0; b < n / 32; b++, src += 34, out += 32) {
        const float d = f16_at(src);
        for (int i = 0; i < 32; i++) out[i] = (float)(int8_t)src[2 + i] * d;
    }
}

/* Code i (0..31) of a Q4/Q5 block's nibbles: low nibbles first, then high. */
static inline int nibble(const uint8_t *qs, int i) { return i < 16 ? qs[i] & 15 : qs[i - 16] >> 4; }

static void dequant_q4_0(const uint8_t *src, int64_t n, float *out) {
    for (int64_t b = 0; b < n / 32; b++, src += 18, out += 32) {
        const float d = f16_at(src);
        for (int i = 0; i < 32; i++) out[i] = d * (float)(nibble(src + 2, i) - 8);
    }
}

static void dequant_q4_1(const uint8_t *src, int64_t n, float *out) {
    for (int64_t b = 0; b < n / 32; b++, src += 20, out += 32) {
        const float d = f16_at(src), m = f16_at(src + 2);
        for (int i = 0; i < 32; i++) out[i] = d * (float)nibble(src + 4, i) + m;
    }
}

/* Code i of a Q5 block: the nibble and bit i of qh as bit 4. */
static inline int code5(const uint8_t *qs, uint32_t qh, int i) { return nibble(qs, i) | (int)((qh >> i) & 1) << 4; }

static void dequant_q5_0(const uint8_t *src, int64_t n, float *out) {
    for (int64_t b = 0; b < n / 32; b++, src += 22, out += 32) {
        const float d = f16_at(src);
        const uint32_t qh = quant_u32(src + 2);
        for (int i = 0; i < 32; i++) out[i] = d * (float)(code5(src + 6, qh, i) - 16);
    }
}

static void dequant_q5_1(const uint8_t *src, int64_t n, float *out) {
    for (int64_t b = 0; b < n / 32; b++, src += 24, out += 32) {
        const float d = f16_at(src), m = f16_at(src + 2);
        const uint32_t qh = quant_u32(src + 4);
        for (int i = 0; i < 32; i++) out[i] = d * (float)code5(src + 8, qh, i) + m;
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

/* Element l (0..31) of sub-block s of a Q4_K (qh NULL) or Q5_K block. */
static inline int k_code(const uint8_t *qs, const uint8_t *qh, int s, int l) {
    int v = (qs[32 * (s / 2) + l] >> (4 * (s % 2))) & 15;
    if (qh) v |= ((qh[l] >> s) & 1) << 4;
    return v;
}

static void dequant_k_block(const uint8_t *header, const uint8_t *qh, const uint8_t *qs, float *out) {
    const float d = f16_at(header), dmin = f16_at(header + 2);
    for (int s = 0; s < 8; s++) {
        int sc, mn;
        k_scale_min(header + 4, s, &sc, &mn);
        const float scale = d * (float)sc, offset = dmin * (float)mn;
        for (int l = 0; l < 32; l++) out[32 * s + l] = scale * (float)k_code(qs, qh, s, l) - offset;
    }
}

static void dequant_q4_k(const uint8_t *src, int64_t n, float *out) {
    for (int64_t b = 0; b < n / 256; b++, src += 144, out += 256) dequant_k_block(src, NULL, src + 16, out);
}

static void dequant_q5_k(const uint8_t *src, int64_t n, float *out) {
    for (int64_t b = 0; b < n / 256; b++, src += 176, out += 256) dequant_k_block(src, src + 16, src + 48, out);
}

/* Element e (0..255) of a Q6_K block as its code 0..63 (value q - 32). */
static inline int q6_code(const uint8_t *ql, const uint8_t *qh, int e) {
    const int h = e / 128, p = e % 128, k = p / 32, l = p % 32;
    const int low = (ql[64 * h + 32 * (k & 1) + l] >> (4 * (k >> 1))) & 15;
    const int high = (qh[32 * h + l] >> (2 * k)) & 3;
    return low | high << 4;
}

static void dequant_q6_k(const uint8_t *src, int64_t n, float *out) {
    for (int64_t b = 0; b < n / 256; b++, src += 210, out += 256) {
        const int8_t *scales = (const int8_t *)(src + 192);
        const float d = f16_at(src + 208);
        for (int e = 0; e < 256; e++) out[e] = (d * (float)scales[e / 16]) * (float)(q6_code(src, src + 128, e) - 32);
    }
}

/* ------------------------------------------------------------- FAST unpack
 * w_k = ws * wu_k + wc per group of 16 (quant.h). */

/* The group scales and corrections of one 32-block: ws = d, wc = c. */
static inline void groups32(float *ws, float *wc, float d, float c) {
    ws[0] = ws[1] = d;
    wc[0] = wc[1] = c;
}

static void unpack_q8_0(const uint8_t *src, int64_t n, uint8_t *wu, float *ws, float *wc) {
    for (int64_t b = 0; b < n / 32; b++, src += 34, wu += 32, ws += 2, wc += 2) {
        const float d = f16_at(src);
        for (int i = 0; i < 32; i++) wu[i] = (uint8_t)(src[2 + i] ^ 0x80); /* q + 128 */
        groups32(ws, wc, d, -128.0f * d);
    }
}

static void unpack_q4_0(const uint8_t *src, int64_t n, uint8_t *wu, float *ws, float *wc) {
    for (int64_t b = 0; b < n / 32; b++, src += 18, wu += 32, ws += 2, wc += 2) {
        const float d = f16_at(src);
        for (int i = 0; i < 32; i++) wu[i] = (uint8_t)nibble(src + 2, i);
        groups32(ws, wc, d, -8.0f * d);
    }
}

static void unpack_q4_1(const uint8_t *src, int64_t n, uint8_t *wu, float *ws, float *wc) {
    for (int64_t b = 0; b < n / 32; b++, src += 20, wu += 32, ws += 2, wc += 2) {
        for (int i = 0; i < 32; i++) wu[i] = (uint8_t)nibble(src + 4, i);
        groups32(ws, wc, f16_at(src), f16_at(src + 2));
    }
}

static void unpack_q5_0(const uint8_t *src, int64_t n, uint8_t *wu, float *ws, float *wc) {
    for (int64_t b = 0; b < n / 32; b++, src += 22, wu += 32, ws += 2, wc += 2) {
        const float d = f16_at(src);
        const uint32_t qh = quant_u32(src + 2);
        for (int i = 0; i < 32; i++) wu[i] = (uint8_t)code5(src + 6, qh, i);
        groups32(ws, wc, d, -16.0f * d);
    }
}

static void unpack_q5_1(const uint8_t *src, int64_t n, uint8_t *wu, float *ws, float *wc) {
    for (int64_t b = 0; b < n / 32; b++, src += 24, wu += 32, ws += 2, wc += 2) {
        const uint32_t qh = quant_u32(src + 4);
        for (int i = 0; i < 32; i++) wu[i] = (uint8_t)code5(src + 8, qh, i);
        groups32(ws, wc, f16_at(src), f16_at(src + 2));
    }
}

static void unpack_k_block(const uint8_t *header, const uint8_t *qh, const uint8_t *qs, uint8_t *wu, float *ws,
                           float *wc) {
    const float d = f16_at(header), dmin = f16_at(header + 2);
    for (int s = 0; s < 8; s++) {
        int sc, mn;
        k_scale_min(header + 4, s, &sc, &mn);
        for (int l = 0; l < 32; l++) wu[32 * s + l] = (uint8_t)k_code(qs, qh, s, l);
        groups32(ws + 2 * s, wc + 2 * s, d * (float)sc, -(dmin * (float)mn));
    }
}

static void unpack_q4_k(const uint8_t *src, int64_t n, uint8_t *wu, float *ws, float *wc) {
    for (int64_t b = 0; b < n / 256; b++, src += 144, wu += 256, ws += 16, wc += 16)
        unpack_k_block(src, NULL, src + 16, wu, ws, wc);
}

static void unpack_q5_k(const uint8_t *src, int64_t n, uint8_t *wu, float *ws, float *wc) {
    for (int64_t b = 0; b < n / 256; b++, src += 176, wu += 256, ws += 16, wc += 16)
        unpack_k_block(src, src + 16, src + 48, wu, ws, wc);
}

static void unpack_q6_k(const uint8_t *src, int64_t n, uint8_t *wu, float *ws, float *wc) {
    for (int64_t b = 0; b < n / 256; b++, src += 210, wu += 256, ws += 16, wc += 16) {
        const int8_t *scales = (const int8_t *)(src + 192);
        const float d = f16_at(src + 208);
        for (int e = 0; e < 256; e++) wu[e] = (uint8_t)q6_code(src, src + 128, e);
        for (int g = 0; g < 16; g++) {
            ws[g] = d * (float)scales[g];
            wc[g] = -32.0f * ws[g];
        }
    }
}

/* ----------------------------------------------------- FAST activations */

static void quantize(const float *x, int64_t n, int8_t *qx, float *xs, float *xsum) {
    for (int64_t b = 0; b < n / 32; b++, x += 32, qx += 32, xs += 2, xsum += 2) {
        float amax = 0.0f;
        bool finite = true;
        for (int i = 0; i < 32; i++) {
            finite = finite && isfinite(x[i]);
            amax = fmaxf(amax, fabsf(x[i]));
        }
        if (!finite) {
            memset(qx, 0, 32);
            xs[0] = xs[1] = xsum[0] = xsum[1] = NAN;
            continue;
        }
        /* below QUANT_X_TINY the block is zero: 127 / amax would overflow */
        const bool tiny = amax < QUANT_X_TINY;
        const float d = tiny ? 0.0f : amax / 127.0f, id = tiny ? 0.0f : 127.0f / amax;
        int sum[2] = {0, 0};
        for (int i = 0; i < 32; i++) {
            qx[i] = (int8_t)nearbyintf(x[i] * id);
            sum[i / 16] += qx[i];
        }
        xs[0] = xs[1] = d;
        xsum[0] = d * (float)sum[0];
        xsum[1] = d * (float)sum[1];
    }
}

/* ------------------------------------------------------------------ tiles */

enum { GEN_MR = 4, GEN_NR = 4, GEN_LANES = 8, GEN_Q8_MR = 4, GEN_Q8_NR = 4, GEN_Q8_KSTEP = 32 };

/* The lanes of one accumulator summed by the fixed tree. */
static float reduce8(const float *a) {
    float s4[4], s2[2];
    for (int l = 0; l < 4; l++) s4[l] = a[l] + a[l + 4];
    for (int l = 0; l < 2; l++) s2[l] = s4[l] + s4[l + 2];
    return s2[0] + s2[1];
}

/* acc(i, j): 16-float slot i * NR + j of acc (quant.h). */
static void f32_tile(int mr, int nr, const float *x, int64_t ldx, const float *w, int64_t ldw, int64_t kc,
                     float *acc, int flags, float *y, int64_t ldy) {
    for (int i = 0; i < mr; i++) {
        const float *x_i = x + i * ldx;
        for (int j = 0; j < GEN_NR; j++) {
            const float *w_j = w + j * ldw;
            float lanes[GEN_LANES];
            float *slot = acc + 16 * (i * GEN_NR + j);
            if (flags & QUANT_TILE_BEGIN) memset(lanes, 0, sizeof lanes);
            else memcpy(lanes, slot, sizeof lanes);
            for (int64_t k = 0; k < kc; k += GEN_LANES)
                for (int l = 0; l < GEN_LANES; l++) lanes[l] = lanes[l] + x_i[k + l] * w_j[k + l];
            if (!(flags & QUANT_TILE_END)) memcpy(slot, lanes, sizeof lanes);
            else if (j < nr) y[i * ldy + j] = reduce8(lanes);
        }
    }
}

static void q8_tile(int mr, int nr, const quant_q8_rows *x, const quant_q8_rows *w, int64_t kc, bool wide,
                    float *acc, int flags, float *y, int64_t ldy) {
    (void)wide; /* int32 products: nothing saturates */
    for (int i = 0; i < mr; i++) {
        const int8_t *qx = (const int8_t *)(x->q + i * x->ld_q);
        const float *xs = x->s + i * x->ld_s, *xsum = x->c + i * x->ld_s;
        for (int j = 0; j < GEN_Q8_NR; j++) {
            const uint8_t *wu = w->q + j * w->ld_q;
            const float *ws = w->s + j * w->ld_s, *wc = w->c + j * w->ld_s;
            float *slot = acc + 16 * (i * GEN_Q8_NR + j);
            float sum = flags & QUANT_TILE_BEGIN ? 0.0f : slot[0];
            for (int64_t g = 0; g < kc / 16; g++) {
                int32_t isum = 0;
                for (int k = 16 * (int)g, e = k + 16; k < e; k++) isum += (int32_t)wu[k] * qx[k];
                sum = sum + (ws[g] * xs[g]) * (float)isum;
                sum = sum + wc[g] * xsum[g];
            }
            if (!(flags & QUANT_TILE_END)) slot[0] = sum;
            else if (j < nr) y[i * ldy + j] = sum;
        }
    }
}

const quant_kernels attn__quant_kernels_generic = {
    .isa = "generic",
    .f32_tile = f32_tile,
    .f32_mr = GEN_MR,
    .f32_nr = GEN_NR,
    .f32_lanes = GEN_LANES,
    .f32_kstep = GEN_LANES,
    .dequant = {[QT_F32] = dequant_f32, [QT_F16] = dequant_f16, [QT_BF16] = dequant_bf16,
                [QT_Q8_0] = dequant_q8_0, [QT_Q4_0] = dequant_q4_0, [QT_Q4_1] = dequant_q4_1,
                [QT_Q5_0] = dequant_q5_0, [QT_Q5_1] = dequant_q5_1, [QT_Q4_K] = dequant_q4_k,
                [QT_Q5_K] = dequant_q5_k, [QT_Q6_K] = dequant_q6_k},
    .fast_isa = "generic",
    .q8_tile = q8_tile,
    .q8_mr = GEN_Q8_MR,
    .q8_nr = GEN_Q8_NR,
    .q8_kstep = GEN_Q8_KSTEP,
    .quantize = quantize,
    .unpack = {[QT_Q8_0] = unpack_q8_0, [QT_Q4_0] = unpack_q4_0, [QT_Q4_1] = unpack_q4_1,
               [QT_Q5_0] = unpack_q5_0, [QT_Q5_1] = unpack_q5_1, [QT_Q4_K] = unpack_q4_k,
               [QT_Q5_K] = unpack_q5_k, [QT_Q6_K] = unpack_q6_k},
};
