/*
 * quant_blocks.h — the walks over a row's blocks (the quantized product's
 * dequantizers and FAST unpackers, src/quant/quant.h), written once for
 * every ISA: each block type's field offsets live here, the work on one
 * block's elements in the including quant_ukernels.c, which defines first
 *
 *   QT_TARGET                its target attribute (empty for portable C)
 *   f16_at(p)                an fp16 field as float (exactly)
 *   dequant_q8_block(qs, d, out)                  32 elements: (float)q * d
 *   dequant_q45_block(qs, qh, offset, d, m, out)  32 elements of a Q4/Q5
 *                            block: d * (float)(code - offset), + *m when m
 *                            is not NULL (qh: the fifth bits, 0 for Q4)
 *   dequant_k_block(header, qh, qs, out)          256 elements of a Q4_K
 *                            (qh NULL) or Q5_K block
 *   dequant_q6_block(block, out)                  256 elements of a Q6_K block
 * and, to have this file define the FAST unpackers too,
 *   QT_UNPACK_Q45            defined, with q45_codes(qs, qh, wu): a Q4/Q5
 *                            block's 32 codes (no offset subtracted)
 *   QT_UNPACK_OTHERS         defined, with q8_codes(qs, wu) (q + 128),
 *                            k_codes(qh, qs, wu) (256 codes of Q4_K, qh
 *                            NULL, or Q5_K) and q6_codes(block, wu)
 * It defines the static functions dequant_<type> and unpack_<type> and the
 * table initialisers QUANT_DEQUANT_BLOCKS, QUANT_UNPACK_Q45 and
 * QUANT_UNPACK_OTHERS.
 */

static QT_TARGET void dequant_q8_0(const uint8_t *src, int64_t n, float *out) {
    for (int64_t b = 0; b < n / 32; b++, src += 34, out += 32) dequant_q8_block(src + 2, f16_at(src), out);
}

static QT_TARGET void dequant_q4_0(const uint8_t *src, int64_t n, float *out) {
    for (int64_t b = 0; b < n / 32; b++, src += 18, out += 32) dequant_q45_block(src + 2, 0, 8, f16_at(src), NULL, out);
}

static QT_TARGET void dequant_q4_1(const uint8_t *src, int64_t n, float *out) {
    for (int64_t b = 0; b < n / 32; b++, src += 20, out += 32) {
        const float m = f16_at(src + 2);
        dequant_q45_block(src + 4, 0, 0, f16_at(src), &m, out);
    }
}

static QT_TARGET void dequant_q5_0(const uint8_t *src, int64_t n, float *out) {
    for (int64_t b = 0; b < n / 32; b++, src += 22, out += 32)
        dequant_q45_block(src + 6, quant_u32(src + 2), 16, f16_at(src), NULL, out);
}

static QT_TARGET void dequant_q5_1(const uint8_t *src, int64_t n, float *out) {
    for (int64_t b = 0; b < n / 32; b++, src += 24, out += 32) {
        const float m = f16_at(src + 2);
        dequant_q45_block(src + 8, quant_u32(src + 4), 0, f16_at(src), &m, out);
    }
}

static QT_TARGET void dequant_q4_k(const uint8_t *src, int64_t n, float *out) {
    for (int64_t b = 0; b < n / 256; b++, src += 144, out += 256) dequant_k_block(src, NULL, src + 16, out);
}

static QT_TARGET void dequant_q5_k(const uint8_t *src, int64_t n, float *out) {
    for (int64_t b = 0; b < n / 256; b++, src += 176, out += 256) dequant_k_block(src, src + 16, src + 48, out);
}

static QT_TARGET void dequant_q6_k(const uint8_t *src, int64_t n, float *out) {
    for (int64_t b = 0; b < n / 256; b++, src += 210, out += 256) dequant_q6_block(src, out);
}

#define QUANT_DEQUANT_BLOCKS                                                                                     \
    [QT_Q8_0] = dequant_q8_0, [QT_Q4_0] = dequant_q4_0, [QT_Q4_1] = dequant_q4_1, [QT_Q5_0] = dequant_q5_0,       \
    [QT_Q5_1] = dequant_q5_1, [QT_Q4_K] = dequant_q4_k, [QT_Q5_K] = dequant_q5_k, [QT_Q6_K] = dequant_q6_k

#ifdef QT_UNPACK_Q45
static QT_TARGET void unpack_q4_0(const uint8_t *src, int64_t n, uint8_t *wu, float *ws, float *wc) {
    for (int64_t b = 0; b < n / 32; b++, src += 18, wu += 32, ws += 2, wc += 2) {
        q45_codes(src + 2, 0, wu);
        const float d = f16_at(src);
        quant_groups32(ws, wc, d, -8.0f * d);
    }
}

static QT_TARGET void unpack_q4_1(const uint8_t *src, int64_t n, uint8_t *wu, float *ws, float *wc) {
    for (int64_t b = 0; b < n / 32; b++, src += 20, wu += 32, ws += 2, wc += 2) {
        q45_codes(src + 4, 0, wu);
        quant_groups32(ws, wc, f16_at(src), f16_at(src + 2));
    }
}

static QT_TARGET void unpack_q5_0(const uint8_t *src, int64_t n, uint8_t *wu, float *ws, float *wc) {
    for (int64_t b = 0; b < n / 32; b++, src += 22, wu += 32, ws += 2, wc += 2) {
        q45_codes(src + 6, quant_u32(src + 2), wu);
        const float d = f16_at(src);
        quant_groups32(ws, wc, d, -16.0f * d);
    }
}

static QT_TARGET void unpack_q5_1(const uint8_t *src, int64_t n, uint8_t *wu, float *ws, float *wc) {
    for (int64_t b = 0; b < n / 32; b++, src += 24, wu += 32, ws += 2, wc += 2) {
        q45_codes(src + 8, quant_u32(src + 4), wu);
        quant_groups32(ws, wc, f16_at(src), f16_at(src + 2));
    }
}

#define QUANT_UNPACK_Q45 \
    [QT_Q4_0] = unpack_q4_0, [QT_Q4_1] = unpack_q4_1, [QT_Q5_0] = unpack_q5_0, [QT_Q5_1] = unpack_q5_1
#endif

#ifdef QT_UNPACK_OTHERS
static QT_TARGET void unpack_q8_0(const uint8_t *src, int64_t n, uint8_t *wu, float *ws, float *wc) {
    for (int64_t b = 0; b < n / 32; b++, src += 34, wu += 32, ws += 2, wc += 2) {
        q8_codes(src + 2, wu);
        const float d = f16_at(src);
        quant_groups32(ws, wc, d, -128.0f * d);
    }
}

/* Q4_K (qh NULL) and Q5_K: the codes, then per sub-block s the scale
 * d * sc and the min's correction -(dmin * mn), as the dequantizer rounds
 * them. */
static QT_TARGET void unpack_k_blocks(const uint8_t *src, int64_t n, int bytes, bool has_qh, uint8_t *wu, float *ws,
                                      float *wc) {
    for (int64_t b = 0; b < n / 256; b++, src += bytes, wu += 256, ws += 16, wc += 16) {
        k_codes(has_qh ? src + 16 : NULL, src + (has_qh ? 48 : 16), wu);
        const float d = f16_at(src), dmin = f16_at(src + 2);
        for (int s = 0; s < 8; s++) {
            int sc, mn;
            quant_k_scale_min(src + 4, s, &sc, &mn);
            quant_groups32(ws + 2 * s, wc + 2 * s, d * (float)sc, -(dmin * (float)mn));
        }
    }
}

static QT_TARGET void unpack_q4_k(const uint8_t *src, int64_t n, uint8_t *wu, float *ws, float *wc) {
    unpack_k_blocks(src, n, 144, false, wu, ws, wc);
}

static QT_TARGET void unpack_q5_k(const uint8_t *src, int64_t n, uint8_t *wu, float *ws, float *wc) {
    unpack_k_blocks(src, n, 176, true, wu, ws, wc);
}

static QT_TARGET void unpack_q6_k(const uint8_t *src, int64_t n, uint8_t *wu, float *ws, float *wc) {
    for (int64_t b = 0; b < n / 256; b++, src += 210, wu += 256, ws += 16, wc += 16) {
        q6_codes(src, wu);
        const int8_t *scales = (const int8_t *)(src + 192);
        const float d = f16_at(src + 208);
        for (int g = 0; g < 16; g++) {
            ws[g] = d * (float)scales[g];
            wc[g] = -32.0f * ws[g];
        }
    }
}

#define QUANT_UNPACK_OTHERS \
    [QT_Q8_0] = unpack_q8_0, [QT_Q4_K] = unpack_q4_k, [QT_Q5_K] = unpack_q5_k, [QT_Q6_K] = unpack_q6_k
#endif

#ifdef QT_REGS
/* The decode kernel's readers (templates/quant_f32_gemv.h): sub-block s
 * (elements 32s .. 32s+31; s = 0 for the 32-element types) of the block at
 * b as 32 / VLEN vectors, by the including file's
 *   q8_regs(qs, d, v)  q45_regs(qs, qh, offset, d, m, v)
 *   k_regs(header, qh, qs, s, v)  q6_regs(block, s, v)
 * (the dequantizers' arithmetic, vec v[32 / VLEN]). */
#define QT_REGS_INLINE static inline __attribute__((always_inline)) QT_TARGET

QT_REGS_INLINE void sub32_q8_0(const uint8_t *b, int s, vec *v) { (void)s, q8_regs(b + 2, f16_at(b), v); }
QT_REGS_INLINE void sub32_q4_0(const uint8_t *b, int s, vec *v) { (void)s, q45_regs(b + 2, 0, 8, f16_at(b), NULL, v); }
QT_REGS_INLINE void sub32_q4_1(const uint8_t *b, int s, vec *v) {
    const float m = f16_at(b + 2);
    (void)s, q45_regs(b + 4, 0, 0, f16_at(b), &m, v);
}
QT_REGS_INLINE void sub32_q5_0(const uint8_t *b, int s, vec *v) {
    (void)s, q45_regs(b + 6, quant_u32(b + 2), 16, f16_at(b), NULL, v);
}
QT_REGS_INLINE void sub32_q5_1(const uint8_t *b, int s, vec *v) {
    const float m = f16_at(b + 2);
    (void)s, q45_regs(b + 8, quant_u32(b + 4), 0, f16_at(b), &m, v);
}
QT_REGS_INLINE void sub32_q4_k(const uint8_t *b, int s, vec *v) { k_regs(b, NULL, b + 16, s, v); }
QT_REGS_INLINE void sub32_q5_k(const uint8_t *b, int s, vec *v) { k_regs(b, b + 16, b + 48, s, v); }
QT_REGS_INLINE void sub32_q6_k(const uint8_t *b, int s, vec *v) { q6_regs(b, s, v); }
#endif
