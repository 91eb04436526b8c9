/*
 * quant_ukernels.c — the portable micro-kernels of the quantized matrix
 * product (src/quant/quant.h has the contracts): plain C that builds on any
 * architecture, the contracts by example, and the complete table the other
 * ISAs fall back on entry by entry.
 *
 * Dequantization: the arithmetic of src/formats/gguf_dequant.c, each float32
 * operation rounded on its own in the order given there (this file, like
 * that one, is compiled with -ffp-contract=off).
 * EXACT tile: MR = 4 rows of x, NR = 4 rows of W, 8 lanes (k mod 8), each
 * lane a product and a sum per term (no FMA: portable C has no fast one);
 * the lanes summed as (l, l+4), then (l, l+2), then (0, 1).
 * FAST tile: MR = NR = 4 (one vector of NRV = 4 rows), quant.h's
 * arithmetic written out: per (i, j) and group the integer sum, then the
 * two float sums by fmaf (the C library's, correctly rounded everywhere).
 */
#include "quant/quant.h"

#include "base/dtype.h"

#include <math.h>
#include <string.h>

static inline float f16_at(const uint8_t *p) { return dtype_f16_to_f32(quant_u16(p)); }

/* ------------------------------------------------------- dequantization
 * The work on one block; src/isa/templates/quant_blocks.h walks the rows. */

#define QT_TARGET

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

static inline void dequant_q8_block(const uint8_t *qs, float d, float *out) {
    for (int i = 0; i < 32; i++) out[i] = (float)(int8_t)qs[i] * d;
}

/* Code i (0..31) of a Q4/Q5 block: low nibbles first, then high; bit i of
 * qh as bit 4 (qh = 0 for Q4). */
static inline int code45(const uint8_t *qs, uint32_t qh, int i) {
    return (i < 16 ? qs[i] & 15 : qs[i - 16] >> 4) | (int)((qh >> i) & 1) << 4;
}

static inline void dequant_q45_block(const uint8_t *qs, uint32_t qh, int offset, float d, const float *m, float *out) {
    for (int i = 0; i < 32; i++) out[i] = d * (float)(code45(qs, qh, i) - offset);
    if (m)
        for (int i = 0; i < 32; i++) out[i] = out[i] + *m;
}

/* Element l (0..31) of sub-block s of a Q4_K (qh NULL) or Q5_K block. */
static inline int k_code(const uint8_t *qh, const uint8_t *qs, int s, int l) {
    int v = (qs[32 * (s / 2) + l] >> (4 * (s % 2))) & 15;
    if (qh) v |= ((qh[l] >> s) & 1) << 4;
    return v;
}

static inline void dequant_k_block(const uint8_t *header, const uint8_t *qh, const uint8_t *qs, float *out) {
    const float d = f16_at(header), dmin = f16_at(header + 2);
    for (int s = 0; s < 8; s++) {
        int sc, mn;
        quant_k_scale_min(header + 4, s, &sc, &mn);
        const float scale = d * (float)sc, offset = dmin * (float)mn;
        for (int l = 0; l < 32; l++) out[32 * s + l] = scale * (float)k_code(qh, qs, s, l) - offset;
    }
}

/* Element e (0..255) of a Q6_K block as its code 0..63 (value code - 32). */
static inline int q6_code(const uint8_t *block, int e) {
    const int h = e / 128, p = e % 128, k = p / 32, l = p % 32;
    const int low = (block[64 * h + 32 * (k & 1) + l] >> (4 * (k >> 1))) & 15;
    const int high = (block[128 + 32 * h + l] >> (2 * k)) & 3;
    return low | high << 4;
}

static inline void dequant_q6_block(const uint8_t *block, float *out) {
    const int8_t *scales = (const int8_t *)(block + 192);
    const float d = f16_at(block + 208);
    for (int e = 0; e < 256; e++) out[e] = (d * (float)scales[e / 16]) * (float)(q6_code(block, e) - 32);
}

/* ------------------------------------------------------------- FAST codes */

static inline void q8_codes(const uint8_t *qs, uint8_t *wu) {
    for (int i = 0; i < 32; i++) wu[i] = (uint8_t)(qs[i] ^ 0x80); /* q + 128 */
}

static inline void q45_codes(const uint8_t *qs, uint32_t qh, uint8_t *wu) {
    for (int i = 0; i < 32; i++) wu[i] = (uint8_t)code45(qs, qh, i);
}

static inline void k_codes(const uint8_t *qh, const uint8_t *qs, uint8_t *wu) {
    for (int s = 0; s < 8; s++)
        for (int l = 0; l < 32; l++) wu[32 * s + l] = (uint8_t)k_code(qh, qs, s, l);
}

static inline void q6_codes(const uint8_t *block, uint8_t *wu) {
    for (int e = 0; e < 256; e++) wu[e] = (uint8_t)q6_code(block, e);
}

#define QT_UNPACK_Q45
#define QT_UNPACK_OTHERS
#include "isa/templates/quant_blocks.h"

/* ----------------------------------------------------- FAST activations */

static void quantize(const float *x, int64_t n, int8_t *qx, float *xs, int32_t *qsum) {
    for (int64_t b = 0; b < n / 32; b++, x += 32, qx += 32, xs++, qsum += 2) {
        float amax = 0.0f;
        bool finite = true;
        for (int i = 0; i < 32; i++) {
            finite = finite && isfinite(x[i]);
            amax = fmaxf(amax, fabsf(x[i]));
        }
        if (!finite) {
            memset(qx, 0, 32);
            xs[0] = NAN, qsum[0] = qsum[1] = 0;
            continue;
        }
        /* below QUANT_X_TINY the block is zero: 127 / amax would overflow */
        const bool tiny = amax < QUANT_X_TINY;
        const float d = tiny ? 0.0f : amax / 127.0f, id = tiny ? 0.0f : 127.0f / amax;
        qsum[0] = qsum[1] = 0;
        for (int i = 0; i < 32; i++) {
            qx[i] = (int8_t)nearbyintf(x[i] * id);
            qsum[i / 16] += qx[i];
        }
        xs[0] = d;
    }
}

/* ------------------------------------------------------------------ tiles */

enum { GEN_MR = 4, GEN_NR = 4, GEN_LANES = 8, GEN_Q8_MR = 4, GEN_Q8_NR = 4, GEN_Q8_NRV = 4 };

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

/* The two sums of output (i, j) live in acc slots 2 (i NR + j) and the next. */
static void q8_tile(int mr, int nr, const quant_q8_x *x, const quant_q8_w *w, int64_t kc, const quant_q8_type *t,
                    float *acc, int flags, float *y, int64_t ldy) {
    const int G = t->group;
    for (int i = 0; i < mr; i++) {
        const int8_t *qx = x->q + i * x->ld_q;
        const float *xs = x->s + i * x->ld_s;
        const int32_t *xoff = (const int32_t *)x->c + i * x->ld_s;
        const float *xsum = (const float *)x->c + i * x->ld_s;
        for (int j = 0; j < GEN_Q8_NR; j++) {
            const int v = j / GEN_Q8_NRV, r = j % GEN_Q8_NRV;
            const uint8_t *wq = w->q + v * w->ld_q + 4 * r;
            const float *ws = w->s + v * w->ld_s + r, *wc = w->c + v * w->ld_s + r;
            float *slot = acc + 2 * (i * GEN_Q8_NR + j), a[2] = {0.0f, 0.0f};
            if (!(flags & QUANT_TILE_BEGIN)) a[0] = slot[0], a[1] = slot[1];
            for (int64_t g = 0; g < kc / G; g++) {
                int32_t isum = t->has_min ? 0 : xoff[g];
                for (int64_t k = g * G; k < (g + 1) * G; k++) isum += (int32_t)wq[k / 4 * 4 * GEN_Q8_NRV + k % 4] * qx[k];
                a[g % 2] = fmaf((float)isum, ws[g * GEN_Q8_NRV] * xs[g], a[g % 2]);
                if (t->has_min) a[g % 2] = fmaf(wc[g * GEN_Q8_NRV], xsum[g], a[g % 2]);
            }
            if (!(flags & QUANT_TILE_END)) slot[0] = a[0], slot[1] = a[1];
            else if (j < nr) y[i * ldy + j] = a[0] + a[1];
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
    .dequant = {[QT_F32] = dequant_f32, [QT_F16] = dequant_f16, [QT_BF16] = dequant_bf16, QUANT_DEQUANT_BLOCKS},
    .fast_isa = "generic",
    .q8_tile = q8_tile,
    .q8_mr = GEN_Q8_MR,
    .q8_nr = GEN_Q8_NR,
    .q8_nrv = GEN_Q8_NRV,
    .quantize = quantize,
    .unpack = {QUANT_UNPACK_Q45, QUANT_UNPACK_OTHERS},
};
