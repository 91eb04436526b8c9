/*
 * quant_ukernels.c — the quantized product's micro-kernels for AVX-512
 * (F, BW, VL, DQ, with F16C and FMA); precision fast with AVX-512 VNNI
 * (vpdpbusd), checked at run time (fast_supported: without it the AVX2
 * fast group runs).  Compiled for any x86-64 with function-level target
 * attributes.  Contracts: src/quant/quant.h; prose: docs/quant.md.
 *
 * EXACT tile (templates/quant_f32_tile.h): MR = 4 rows of x, NR = 6 rows
 * of W, 16 lanes (k mod 16), one FMA per term: 24 zmm accumulators, the 4
 * x vectors and one W vector: 29 of the 32 registers.  The lanes summed by
 * vec.h's v_reduce_add (the compiler's fixed tree).
 * FAST tile: MR = NR = 4, k step 64: per (i, j) and step one vpdpbusd
 * (16 lanes of 4 products), its int32 lanes converted and multiplied by
 * ws * xs of their group (4 lanes a group) into the float lanes; after
 * every 16 groups (or the call's last ones) one FMA adds wc * xsum of
 * those groups, lane g = group g.  28 registers.
 * Dequantization: the portable kernel's operations, 16 elements at a time
 * (products and sums as separate instructions: this file is compiled with
 * -ffp-contract=off, and no FMA is written where the format rounds twice);
 * templates/quant_blocks.h walks the rows.
 */
#include "quant/quant.h"

#if defined(__x86_64__) && !defined(ATTN_PORTABLE)

#include "isa/x86_avx512/vec.h"

#include <immintrin.h>
#include <string.h>

#define QT_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")))
#define QT_INLINE static inline __attribute__((always_inline)) QT_TARGET
#define VNNI_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c,avx512vnni")))
#define VNNI_INLINE static inline __attribute__((always_inline)) VNNI_TARGET

enum { LANES = 16, Q8_MR = 4, Q8_NV = 2, Q8_NR = 16 * Q8_NV };

QT_INLINE float f16_at(const uint8_t *p) { return _cvtsh_ss(quant_u16(p)); }

/* 16 bytes at p widened to int32 lanes. */
QT_INLINE __m512i bytes16(const uint8_t *p) { return _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)p)); }


/* ------------------------------------------------------- dequantization */

static void dequant_f32(const uint8_t *src, int64_t n, float *out) { memcpy(out, src, sizeof(float) * (size_t)n); }

static QT_TARGET void dequant_f16(const uint8_t *src, int64_t n, float *out) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(out + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(src + 2 * i))));
    for (; i < n; i++) out[i] = f16_at(src + 2 * i);
}

static QT_TARGET void dequant_bf16(const uint8_t *src, int64_t n, float *out) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512i wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(const void *)(src + 2 * i)));
        _mm512_storeu_si512(out + i, _mm512_slli_epi32(wide, 16));
    }
    for (; i < n; i++) {
        uint32_t bits = (uint32_t)quant_u16(src + 2 * i) << 16;
        memcpy(out + i, &bits, sizeof bits);
    }
}

/* The dequantizers' arithmetic on one sub-block of 32 elements, into two
 * vectors (elements 0-15, 16-31): the decode kernel (templates/
 * quant_f32_gemv.h) multiplies them straight into its sums, the
 * dequantizers below store them. */

QT_INLINE void q8_regs(const uint8_t *qs, float d, __m512 *v) {
    const __m512 dv = _mm512_set1_ps(d);
    for (int h = 0; h < 2; h++) {
        __m512i q = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)(qs + 16 * h)));
        v[h] = _mm512_mul_ps(_mm512_cvtepi32_ps(q), dv);
    }
}

/* One Q4/Q5 block: d * (float)(code - offset) [+ m]; the fifth bits of qh
 * (0 for Q4) go in by a mask register. */
QT_INLINE void q45_regs(const uint8_t *qs, uint32_t qh, int offset, float d, const float *m, __m512 *v) {
    const __m512i q = bytes16(qs), sixteen = _mm512_set1_epi32(16), off = _mm512_set1_epi32(offset);
    __m512i lo = _mm512_and_si512(q, _mm512_set1_epi32(15)), hi = _mm512_srli_epi32(q, 4);
    lo = _mm512_sub_epi32(_mm512_mask_or_epi32(lo, (__mmask16)qh, lo, sixteen), off);
    hi = _mm512_sub_epi32(_mm512_mask_or_epi32(hi, (__mmask16)(qh >> 16), hi, sixteen), off);
    const __m512 dv = _mm512_set1_ps(d);
    v[0] = _mm512_mul_ps(dv, _mm512_cvtepi32_ps(lo)), v[1] = _mm512_mul_ps(dv, _mm512_cvtepi32_ps(hi));
    if (m) v[0] = _mm512_add_ps(v[0], _mm512_set1_ps(*m)), v[1] = _mm512_add_ps(v[1], _mm512_set1_ps(*m));
}

/* Sub-block s of a Q4_K (qh NULL) or Q5_K block: scale * (float)v - offset. */
QT_INLINE void k_regs(const uint8_t *header, const uint8_t *qh, const uint8_t *qs, int s, __m512 *out) {
    const float d = f16_at(header), dmin = f16_at(header + 2);
    int sc, mn;
    quant_k_scale_min(header + 4, s, &sc, &mn);
    const __m512 scale = _mm512_set1_ps(d * (float)sc), offset = _mm512_set1_ps(dmin * (float)mn);
    for (int h = 0; h < 2; h++) {
        __m512i v = _mm512_and_si512(_mm512_srli_epi32(bytes16(qs + 32 * (s / 2) + 16 * h), 4 * (s % 2)),
                                     _mm512_set1_epi32(15));
        if (qh) {
            __m512i bit = _mm512_and_si512(_mm512_srli_epi32(bytes16(qh + 16 * h), s), _mm512_set1_epi32(1));
            v = _mm512_or_si512(v, _mm512_slli_epi32(bit, 4));
        }
        out[h] = _mm512_sub_ps(_mm512_mul_ps(scale, _mm512_cvtepi32_ps(v)), offset);
    }
}

/* Sub-block s (elements 32s .. 32s+31) of a Q6_K block. */
QT_INLINE void q6_regs(const uint8_t *block, int s, __m512 *out) {
    const uint8_t *ql = block, *qh = block + 128;
    const int8_t *scales = (const int8_t *)(block + 192);
    const float d = f16_at(block + 208);
    const int h = s / 4, k = s % 4;
    for (int c = 0; c < 2; c++) {
        const int e = 128 * h + 32 * k + 16 * c;
        const __m512i low = _mm512_and_si512(
            _mm512_srli_epi32(bytes16(ql + 64 * h + 32 * (k & 1) + 16 * c), 4 * (k >> 1)), _mm512_set1_epi32(15));
        const __m512i high =
            _mm512_and_si512(_mm512_srli_epi32(bytes16(qh + 32 * h + 16 * c), 2 * k), _mm512_set1_epi32(3));
        const __m512i q = _mm512_sub_epi32(_mm512_or_si512(low, _mm512_slli_epi32(high, 4)), _mm512_set1_epi32(32));
        out[c] = _mm512_mul_ps(_mm512_set1_ps(d * (float)scales[e / 16]), _mm512_cvtepi32_ps(q));
    }
}

QT_INLINE void store2(float *out, const __m512 *v) { _mm512_storeu_ps(out, v[0]), _mm512_storeu_ps(out + 16, v[1]); }

QT_INLINE void dequant_q8_block(const uint8_t *qs, float d, float *out) {
    __m512 v[2];
    q8_regs(qs, d, v);
    store2(out, v);
}

QT_INLINE void dequant_q45_block(const uint8_t *qs, uint32_t qh, int offset, float d, const float *m, float *out) {
    __m512 v[2];
    q45_regs(qs, qh, offset, d, m, v);
    store2(out, v);
}

QT_INLINE void dequant_k_block(const uint8_t *header, const uint8_t *qh, const uint8_t *qs, float *out) {
    for (int s = 0; s < 8; s++) {
        __m512 v[2];
        k_regs(header, qh, qs, s, v);
        store2(out + 32 * s, v);
    }
}

QT_INLINE void dequant_q6_block(const uint8_t *block, float *out) {
    for (int s = 0; s < 8; s++) {
        __m512 v[2];
        q6_regs(block, s, v);
        store2(out + 32 * s, v);
    }
}

/* ------------------------------------------------------------- FAST codes
 * Q4/Q5 only: their fifth bits go in by a mask register; the other types
 * take AVX2's unpackers (nothing wider helps them). */

QT_INLINE void q45_codes(const uint8_t *qs, uint32_t qh, uint8_t *wu) {
    const __m128i q = _mm_loadu_si128((const __m128i *)(const void *)qs), mask = _mm_set1_epi8(15);
    const __m256i v = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), mask), _mm_and_si128(q, mask));
    _mm256_storeu_si256((__m256i *)(void *)wu, _mm256_mask_add_epi8(v, (__mmask32)qh, v, _mm256_set1_epi8(16)));
}

#define QT_UNPACK_Q45
#define QT_REGS
#include "isa/templates/quant_blocks.h"

/* ----------------------------------------------------- FAST activations */

static QT_TARGET void quantize(const float *x, int64_t n, int8_t *qx, float *xs, int32_t *qsum) {
    const __m512 sign = _mm512_set1_ps(-0.0f);
    for (int64_t b = 0; b < n / 32; b++, x += 32, qx += 32, xs++, qsum += 2) {
        const __m512 a = _mm512_loadu_ps(x), c = _mm512_loadu_ps(x + 16);
        /* NaN, +inf or -inf anywhere (fpclass 0x01 | 0x08 | 0x10 | 0x80) */
        if (_mm512_fpclass_ps_mask(a, 0x99) | _mm512_fpclass_ps_mask(c, 0x99)) {
            memset(qx, 0, 32);
            xs[0] = __builtin_nanf(""), qsum[0] = qsum[1] = 0;
            continue;
        }
        const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_andnot_ps(sign, a), _mm512_andnot_ps(sign, c)));
        const bool tiny = amax < QUANT_X_TINY;
        const float d = tiny ? 0.0f : amax / 127.0f, id = tiny ? 0.0f : 127.0f / amax;
        const __m512 idv = _mm512_set1_ps(id);
        /* round to nearest even (the default MXCSR mode, as nearbyintf) */
        const __m512i qa = _mm512_cvtps_epi32(_mm512_mul_ps(a, idv)), qc = _mm512_cvtps_epi32(_mm512_mul_ps(c, idv));
        _mm_storeu_si128((__m128i *)(void *)qx, _mm512_cvtepi32_epi8(qa));
        _mm_storeu_si128((__m128i *)(void *)(qx + 16), _mm512_cvtepi32_epi8(qc));
        xs[0] = d;
        qsum[0] = _mm512_reduce_add_epi32(qa);
        qsum[1] = _mm512_reduce_add_epi32(qc);
    }
}

/* ------------------------------------------------------------------ tiles */

#define F32_MR 4
#define F32_NR 6
#include "isa/templates/quant_f32_tile.h"

/* decode: 8 rows of W for one row of x (8 FMA chains), 4 for more */
#define GEMV_R1 8
#define GEMV_R 4
#include "isa/templates/quant_f32_gemv.h"

/* The FAST tile: MR_ rows of x (1..Q8_MR) against Q8_NV vectors of 16
 * interleaved rows of W, over kc elements (quant.h's arithmetic).  Per
 * group: the integer sums start from -o * sum qx (or 0 with a min) and
 * take G/4 vpdpbusd each, a quad of x's codes broadcast against 16 rows'
 * quads; then per (i, vector) one conversion, ws * xs, and the FMA into the
 * sum of the group's parity (and the min's FMA).  G, the min and MR_ are
 * constants of each instantiation. */
VNNI_INLINE void q8_group(const int MR_, const int G, const bool has_min, const int par, const quant_q8_x *x,
                          const quant_q8_w *w, int64_t g, __m512 a[][Q8_NV][2]) {
    __m512i isum[Q8_MR][Q8_NV];
#pragma GCC unroll 4
    for (int i = 0; i < MR_; i++) {
        const __m512i start = has_min ? _mm512_setzero_si512() : _mm512_set1_epi32(((const int32_t *)x->c)[i * x->ld_s + g]);
#pragma GCC unroll 2
        for (int v = 0; v < Q8_NV; v++) isum[i][v] = start;
    }
#pragma GCC unroll 8
    for (int t = 0; t < G / 4; t++) {
        __m512i wq[Q8_NV];
#pragma GCC unroll 2
        for (int v = 0; v < Q8_NV; v++) wq[v] = _mm512_loadu_si512(w->q + v * w->ld_q + (g * G + 4 * t) * 16);
#pragma GCC unroll 4
        for (int i = 0; i < MR_; i++) {
            int32_t quad;
            memcpy(&quad, x->q + i * x->ld_q + g * G + 4 * t, 4);
            const __m512i xb = _mm512_set1_epi32(quad);
#pragma GCC unroll 2
            for (int v = 0; v < Q8_NV; v++) isum[i][v] = _mm512_dpbusd_epi32(isum[i][v], wq[v], xb);
        }
    }
    __m512 ws[Q8_NV], wc[Q8_NV];
#pragma GCC unroll 2
    for (int v = 0; v < Q8_NV; v++) {
        ws[v] = _mm512_loadu_ps(w->s + v * w->ld_s + 16 * g);
        if (has_min) wc[v] = _mm512_loadu_ps(w->c + v * w->ld_s + 16 * g);
    }
#pragma GCC unroll 4
    for (int i = 0; i < MR_; i++) {
        const __m512 xs = _mm512_set1_ps(x->s[i * x->ld_s + g]);
        const __m512 xsum = has_min ? _mm512_set1_ps(((const float *)x->c)[i * x->ld_s + g]) : xs;
#pragma GCC unroll 2
        for (int v = 0; v < Q8_NV; v++) {
            a[i][v][par] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[i][v]), _mm512_mul_ps(ws[v], xs), a[i][v][par]);
            if (has_min) a[i][v][par] = _mm512_fmadd_ps(wc[v], xsum, a[i][v][par]);
        }
    }
}

VNNI_INLINE void q8_tile_rows(const int MR_, const int G, const bool has_min, int nr, const quant_q8_x *x,
                              const quant_q8_w *w, int64_t kc, float *acc, int flags, float *y, int64_t ldy) {
    __m512 a[Q8_MR][Q8_NV][2];
#pragma GCC unroll 4
    for (int i = 0; i < MR_; i++)
#pragma GCC unroll 2
        for (int v = 0; v < Q8_NV; v++)
#pragma GCC unroll 2
            for (int p = 0; p < 2; p++) a[i][v][p] = quant_acc_start(acc + 16 * ((i * Q8_NV + v) * 2 + p), flags);
    const int64_t groups = kc / G;
    int64_t g = 0;
    for (; g + 2 <= groups; g += 2) {
        q8_group(MR_, G, has_min, 0, x, w, g, a);
        q8_group(MR_, G, has_min, 1, x, w, g + 1, a);
    }
    if (g < groups) q8_group(MR_, G, has_min, 0, x, w, g, a);
#pragma GCC unroll 4
    for (int i = 0; i < MR_; i++)
#pragma GCC unroll 2
        for (int v = 0; v < Q8_NV; v++) {
            if (!(flags & QUANT_TILE_END)) {
                _mm512_store_ps(acc + 16 * ((i * Q8_NV + v) * 2), a[i][v][0]);
                _mm512_store_ps(acc + 16 * ((i * Q8_NV + v) * 2 + 1), a[i][v][1]);
            } else if (nr > 16 * v) {
                const int rows = nr - 16 * v < 16 ? nr - 16 * v : 16;
                _mm512_mask_storeu_ps(y + i * ldy + 16 * v, (__mmask16)((1u << rows) - 1u),
                                      _mm512_add_ps(a[i][v][0], a[i][v][1]));
            }
        }
}

#define Q8_TILE_ROWS(G, MIN)                                                   \
    switch (mr) {                                                              \
    case 1: q8_tile_rows(1, G, MIN, nr, x, w, kc, acc, flags, y, ldy); break;  \
    case 2: q8_tile_rows(2, G, MIN, nr, x, w, kc, acc, flags, y, ldy); break;  \
    case 3: q8_tile_rows(3, G, MIN, nr, x, w, kc, acc, flags, y, ldy); break;  \
    default: q8_tile_rows(4, G, MIN, nr, x, w, kc, acc, flags, y, ldy); break; \
    }

static VNNI_TARGET void q8_tile(int mr, int nr, const quant_q8_x *x, const quant_q8_w *w, int64_t kc,
                                const quant_q8_type *type, float *acc, int flags, float *y, int64_t ldy) {
    if (type->group == 16) Q8_TILE_ROWS(16, false)
    else if (type->has_min) Q8_TILE_ROWS(32, true)
    else Q8_TILE_ROWS(32, false)
}

/* ------------------------------------------------------ the FAST decode
 * quant.h's arithmetic straight from the blocks of the 32-element types,
 * 8 rows of W a pass: per step of 64 elements (two blocks) each row's 64
 * codes meet x's in one vpdpbusd (16 lanes of 4 products), the 8 rows'
 * results are summed by a transposing tree into one vector whose lane
 * 8 (r / 4) + 4 h + r % 4 holds row r's sum over block h of the step (the
 * group of parity h), the blocks' scales are gathered into the same lanes,
 * and the two sums of each row live in that vector's lanes (r, 0) and
 * (r, 1): the tile's operations, one vector for 8 rows. */

/* Lane (r, h) of a pass's vectors. */
#define Q8V_LANE(r, h) (8 * ((r) / 4) + 4 * (h) + (r) % 4)

/* The 8 rows' 16-lane vpdpbusd results d[0..8) summed to lane (r, h):
 * row r's lanes of block h, 8h .. 8h+7 (split: 4h .. 4h+3 and 8+4h ..
 * 8+4h+3, the Q4/Q5 codes' order). */
VNNI_INLINE __m512i q8v_reduce(const __m512i *d, bool split) {
    __m512i t[4], u[2];
    for (int q = 0; q < 4; q++)
        t[q] = _mm512_add_epi32(_mm512_unpacklo_epi32(d[2 * q], d[2 * q + 1]), _mm512_unpackhi_epi32(d[2 * q], d[2 * q + 1]));
    for (int q = 0; q < 2; q++)
        u[q] = _mm512_add_epi32(_mm512_unpacklo_epi64(t[2 * q], t[2 * q + 1]), _mm512_unpackhi_epi64(t[2 * q], t[2 * q + 1]));
    /* u[q]'s 128-bit block b: rows 4q .. 4q+3 over their lanes 4b .. 4b+3 */
    if (split)
        return _mm512_add_epi32(_mm512_shuffle_i32x4(u[0], u[1], _MM_SHUFFLE(1, 0, 1, 0)),
                                _mm512_shuffle_i32x4(u[0], u[1], _MM_SHUFFLE(3, 2, 3, 2)));
    return _mm512_add_epi32(_mm512_shuffle_i32x4(u[0], u[1], _MM_SHUFFLE(2, 0, 2, 0)),
                            _mm512_shuffle_i32x4(u[0], u[1], _MM_SHUFFLE(3, 1, 3, 1)));
}

/* Two values per row of x (groups g, g+1 at p) spread to lanes (r, h). */
VNNI_INLINE __m512i q8v_spread(const void *p, bool both) {
    const __m512i h = _mm512_set_epi32(1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0);
    const __m128i v = both ? _mm_loadl_epi64((const __m128i *)p) : _mm_cvtsi32_si128(*(const int32_t *)p);
    return _mm512_permutexvar_epi32(h, _mm512_castsi128_si512(v));
}

/* 64 codes of blocks b (at p) and b + 1 (p + BB; absent when !both: zero
 * codes there) of a 32-element type (quant_blocks.h's offsets): Q8_0
 * q + 128 in element order; Q4 and Q5 the nibbles (and fifth bits) in the
 * order their bytes give cheaply — b's elements 0-15, b+1's 0-15, b's
 * 16-31, b+1's 16-31 — which x's 16-byte blocks are shuffled to match
 * (q8v_x: the integer sums do not care about the order). */
VNNI_INLINE __m512i q8v_codes(const int qt, const int BB, const uint8_t *p, bool both) {
    if (qt == QT_Q8_0) {
        const __m256i lo = _mm256_loadu_si256((const __m256i *)(const void *)(p + 2));
        const __m512i z = both ? _mm512_inserti64x4(_mm512_castsi256_si512(lo), _mm256_loadu_si256((const __m256i *)(const void *)(p + BB + 2)), 1)
                               : _mm512_zextsi256_si512(lo);
        return _mm512_xor_si512(z, both ? _mm512_set1_epi8((char)0x80) : _mm512_zextsi256_si512(_mm256_set1_epi8((char)0x80)));
    }
    const int qs = qt == QT_Q4_0 ? 2 : qt == QT_Q4_1 ? 4 : qt == QT_Q5_0 ? 6 : 8;
    const __m128i a = _mm_loadu_si128((const __m128i *)(const void *)(p + qs));
    const __m256i ab = both ? _mm256_inserti128_si256(_mm256_castsi128_si256(a), _mm_loadu_si128((const __m128i *)(const void *)(p + BB + qs)), 1)
                            : _mm256_zextsi128_si256(a);
    __m512i z = _mm512_broadcast_i64x4(ab);
    z = _mm512_and_si512(_mm512_mask_srli_epi16(z, 0xFFFF0000u, z, 4), _mm512_set1_epi8(15));
    if (qt == QT_Q5_0 || qt == QT_Q5_1) {
        const int qh = qt == QT_Q5_0 ? 2 : 4;
        const uint32_t ha = quant_u32(p + qh), hb = both ? quant_u32(p + BB + qh) : 0;
        const uint64_t bits = ((ha & 0xFFFFu) | hb << 16) | (uint64_t)((ha >> 16) | (hb & 0xFFFF0000u)) << 32;
        z = _mm512_mask_add_epi8(z, (__mmask64)bits, z, _mm512_set1_epi8(16));
    }
    return z;
}

/* x's 64 codes of a step in the order of q8v_codes. */
VNNI_INLINE __m512i q8v_x(const int qt, const int8_t *qx, bool both) {
    const __m512i z = both ? _mm512_loadu_si512(qx) : _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)(const void *)qx));
    return qt == QT_Q8_0 ? z : _mm512_shuffle_i64x2(z, z, _MM_SHUFFLE(3, 1, 2, 0));
}

/* One pass: MR_ rows of x, the rows of W at w (8, the last `valid` of them
 * repeated to fill), all K; y rows of `valid`. */
VNNI_INLINE void q8v_pass(const int MR_, const int qt, const int BB, const quant_q8_x *x, const uint8_t *w,
                          int64_t stride, int valid, int64_t k, float *y, int64_t ldy, const uint8_t *next,
                          int64_t next_bytes) {
    const bool has_min = qt == QT_Q4_1 || qt == QT_Q5_1;
    const uint8_t *row[8];
    int32_t offsets[16];
    for (int r = 0; r < 8; r++) {
        row[r] = w + (r < valid ? r : valid - 1) * stride;
        for (int h = 0; h < 2; h++) offsets[Q8V_LANE(r, h)] = (int32_t)((r < valid ? r : valid - 1) * stride + h * BB);
    }
    const __m512i idx = _mm512_loadu_si512(offsets);
    __m512 a[Q8_MR];
    for (int i = 0; i < MR_; i++) a[i] = _mm512_setzero_ps();
    const int64_t steps = (k + 63) / 64, lines_per_step = (next_bytes / 64 + steps) / steps;
    int64_t line = 0;
    for (int64_t t = 0; t < steps; t++) {
        for (int64_t l = 0; l < lines_per_step && 64 * line < next_bytes; l++, line++)
            __builtin_prefetch(next + 64 * line, 0, 2);
        const bool both = 64 * t + 64 <= k;
        const __mmask16 lanes = both ? 0xFFFF : 0x0F0F; /* h = 0 only in a last half step */
        const int64_t off = 2 * t * BB;
        __m512i codes[8];
        for (int r = 0; r < 8; r++) codes[r] = q8v_codes(qt, BB, row[r] + off, both);
        /* the blocks' scales (and mins): the dwords at their starts, gathered */
        const __m512i head = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), lanes, idx, w + off, 1);
        const __m512 ws = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(head));
        const __m512 wc = has_min ? _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(head, 16))) : ws;
        for (int i = 0; i < MR_; i++) {
            const __m512i xq = q8v_x(qt, x->q + i * x->ld_q + 64 * t, both);
            __m512i d[8];
            for (int r = 0; r < 8; r++) d[r] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), codes[r], xq);
            __m512i isum = q8v_reduce(d, qt != QT_Q8_0);
            const int64_t g = 2 * t;
            const __m512 xs = _mm512_castsi512_ps(q8v_spread(x->s + i * x->ld_s + g, both));
            const void *xc = (const int32_t *)x->c + i * x->ld_s + g;
            if (!has_min) isum = _mm512_add_epi32(isum, q8v_spread(xc, both));
            a[i] = _mm512_mask3_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(ws, xs), a[i], lanes);
            if (has_min) a[i] = _mm512_mask3_fmadd_ps(wc, _mm512_castsi512_ps(q8v_spread(xc, both)), a[i], lanes);
        }
    }
    for (int i = 0; i < MR_; i++) {
        /* y_r = a(r, 0) + a(r, 1): lanes 8 (r / 4) + r % 4 and 4 further */
        float sums[16];
        _mm512_storeu_ps(sums, _mm512_add_ps(a[i], _mm512_shuffle_f32x4(a[i], a[i], _MM_SHUFFLE(2, 3, 0, 1))));
        for (int r = 0; r < valid; r++) y[i * ldy + r] = sums[Q8V_LANE(r, 0)];
    }
}

/* The K-quants (blocks of 256, four steps each; K a whole number of
 * blocks): step t's 64 codes in element order, and per block the rows'
 * scales (and mins) into tables in the lanes' order, computed as the
 * unpackers do (quant_blocks.h): Q4_K, Q5_K ws = d * sc, wc = -(dmin * mn)
 * per sub-block of 32 (step t: sub-blocks 2t + h); Q6_K ws = d * scale per
 * 16 (step t: groups 4t + 2p + h, p a second table). */
VNNI_INLINE __m512i q8v_codes_k(const int qt, const uint8_t *b, int t) {
    if (qt == QT_Q6_K) {
        const int h6 = t / 2, k0 = 2 * (t % 2);
        const __m512i low = _mm512_and_si512(_mm512_srli_epi16(_mm512_loadu_si512(b + 64 * h6), 4 * (t % 2)), _mm512_set1_epi8(15));
        __m512i high = _mm512_srli_epi16(_mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(const void *)(b + 128 + 32 * h6))), 2 * k0);
        high = _mm512_and_si512(_mm512_mask_srli_epi16(high, 0xFFFF0000u, high, 2), _mm512_set1_epi8(3));
        return _mm512_or_si512(low, _mm512_slli_epi16(high, 4));
    }
    const uint8_t *qs = b + (qt == QT_Q5_K ? 48 : 16);
    __m512i z = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(const void *)(qs + 32 * t)));
    z = _mm512_and_si512(_mm512_mask_srli_epi16(z, 0xFFFF0000u, z, 4), _mm512_set1_epi8(15));
    if (qt == QT_Q5_K) {
        const __m256i qh = _mm256_loadu_si256((const __m256i *)(const void *)(b + 16));
        const __mmask32 lo = _mm256_test_epi8_mask(qh, _mm256_set1_epi8((char)(1 << (2 * t))));
        const __mmask32 hi = _mm256_test_epi8_mask(qh, _mm256_set1_epi8((char)(1 << (2 * t + 1))));
        z = _mm512_mask_add_epi8(z, _mm512_kunpackd((__mmask64)hi, (__mmask64)lo), z, _mm512_set1_epi8(16));
    }
    return z;
}

static QT_TARGET void q8v_scales_k(int qt, const uint8_t *b, int r, float ws[4][2][16], float wc[4][2][16]) {
    const float d = f16_at(qt == QT_Q6_K ? b + 208 : b);
    if (qt == QT_Q6_K) {
        for (int g = 0; g < 16; g++) ws[g / 4][(g / 2) % 2][Q8V_LANE(r, g % 2)] = d * (float)(int8_t)b[192 + g];
        return;
    }
    const float dmin = f16_at(b + 2);
    for (int sb = 0; sb < 8; sb++) {
        int sc, mn;
        quant_k_scale_min(b + 4, sb, &sc, &mn);
        ws[sb / 2][0][Q8V_LANE(r, sb % 2)] = d * (float)sc;
        wc[sb / 2][0][Q8V_LANE(r, sb % 2)] = -(dmin * (float)mn);
    }
}

VNNI_INLINE void q8v_pass_k(const int MR_, const int qt, const int BB, const quant_q8_x *x, const uint8_t *w,
                            int64_t stride, int valid, int64_t k, float *y, int64_t ldy, const uint8_t *next,
                            int64_t next_bytes) {
    const bool has_min = qt != QT_Q6_K, pairs = qt == QT_Q6_K;
    const int G = pairs ? 16 : 32;
    const uint8_t *row[8];
    for (int r = 0; r < 8; r++) row[r] = w + (r < valid ? r : valid - 1) * stride;
    __m512 a[Q8_MR];
    for (int i = 0; i < MR_; i++) a[i] = _mm512_setzero_ps();
    const int64_t blocks = k / 256, lines_per_block = (next_bytes / 64 + blocks) / blocks;
    int64_t line = 0;
    for (int64_t c = 0; c < blocks; c++) {
        for (int64_t l = 0; l < lines_per_block && 64 * line < next_bytes; l++, line++)
            __builtin_prefetch(next + 64 * line, 0, 2);
        float ws[4][2][16], wc[4][2][16];
        for (int r = 0; r < 8; r++) q8v_scales_k(qt, row[r] + c * BB, r, ws, wc);
        for (int t = 0; t < 4; t++) {
            __m512i codes[8];
            for (int r = 0; r < 8; r++) codes[r] = q8v_codes_k(qt, row[r] + c * BB, t);
            for (int i = 0; i < MR_; i++) {
                const __m512i xq = _mm512_loadu_si512(x->q + i * x->ld_q + 256 * c + 64 * t);
                __m512i d[8], tq[4], u[2];
                for (int r = 0; r < 8; r++) d[r] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), codes[r], xq);
                for (int q = 0; q < 4; q++)
                    tq[q] = _mm512_add_epi32(_mm512_unpacklo_epi32(d[2 * q], d[2 * q + 1]), _mm512_unpackhi_epi32(d[2 * q], d[2 * q + 1]));
                for (int q = 0; q < 2; q++)
                    u[q] = _mm512_add_epi32(_mm512_unpacklo_epi64(tq[2 * q], tq[2 * q + 1]), _mm512_unpackhi_epi64(tq[2 * q], tq[2 * q + 1]));
                /* u[q]'s 128-bit block b: rows 4q .. 4q+3 over 16 elements (a Q6_K group) */
                __m512i sums[2];
                if (pairs) {
                    sums[0] = _mm512_shuffle_i32x4(u[0], u[1], _MM_SHUFFLE(1, 0, 1, 0));
                    sums[1] = _mm512_shuffle_i32x4(u[0], u[1], _MM_SHUFFLE(3, 2, 3, 2));
                } else {
                    sums[0] = _mm512_add_epi32(_mm512_shuffle_i32x4(u[0], u[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                               _mm512_shuffle_i32x4(u[0], u[1], _MM_SHUFFLE(3, 1, 3, 1)));
                }
                for (int p = 0; p < (pairs ? 2 : 1); p++) {
                    const int64_t g = (256 * c + 64 * t) / G + 2 * p;
                    const __m512 xs = _mm512_castsi512_ps(q8v_spread(x->s + i * x->ld_s + g, true));
                    const void *xc = (const int32_t *)x->c + i * x->ld_s + g;
                    __m512i isum = sums[p];
                    if (!has_min) isum = _mm512_add_epi32(isum, q8v_spread(xc, true));
                    a[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(_mm512_loadu_ps(ws[t][p]), xs), a[i]);
                    if (has_min)
                        a[i] = _mm512_fmadd_ps(_mm512_loadu_ps(wc[t][p]), _mm512_castsi512_ps(q8v_spread(xc, true)), a[i]);
                }
            }
        }
    }
    for (int i = 0; i < MR_; i++) {
        float sums[16];
        _mm512_storeu_ps(sums, _mm512_add_ps(a[i], _mm512_shuffle_f32x4(a[i], a[i], _MM_SHUFFLE(2, 3, 0, 1))));
        for (int r = 0; r < valid; r++) y[i * ldy + r] = sums[Q8V_LANE(r, 0)];
    }
}

#define Q8V_GEMV(name, qt, BB) Q8V_GEMV_PASS(name, qt, BB, q8v_pass)
#define Q8V_GEMV_K(name, qt, BB) Q8V_GEMV_PASS(name, qt, BB, q8v_pass_k)
#define Q8V_GEMV_PASS(name, qt, BB, q8v_pass)                                                                     \
    static VNNI_TARGET void name(int mr, const quant_q8_x *x, const uint8_t *w, int64_t stride, int64_t nr,       \
                                 int64_t k, float *y, int64_t ldy) {                                              \
        for (int64_t j = 0; j < nr; j += 8) {                                                                     \
            const int valid = nr - j < 8 ? (int)(nr - j) : 8;                                                     \
            const uint8_t *next = w + (j + 8) * stride;                                                          \
            const int64_t next_bytes = j + 8 < nr ? stride * (nr - j - 8 < 8 ? nr - j - 8 : 8) : 0;             \
            switch (mr) {                                                                                        \
            case 1: q8v_pass(1, qt, BB, x, w + j * stride, stride, valid, k, y + j, ldy, next, next_bytes); break; \
            case 2: q8v_pass(2, qt, BB, x, w + j * stride, stride, valid, k, y + j, ldy, next, next_bytes); break; \
            case 3: q8v_pass(3, qt, BB, x, w + j * stride, stride, valid, k, y + j, ldy, next, next_bytes); break; \
            default: q8v_pass(4, qt, BB, x, w + j * stride, stride, valid, k, y + j, ldy, next, next_bytes); break; \
            }                                                                                                    \
        }                                                                                                        \
    }

Q8V_GEMV(q8v_gemv_q8_0, QT_Q8_0, 34)
Q8V_GEMV(q8v_gemv_q4_0, QT_Q4_0, 18)
Q8V_GEMV(q8v_gemv_q4_1, QT_Q4_1, 20)
Q8V_GEMV(q8v_gemv_q5_0, QT_Q5_0, 22)
Q8V_GEMV(q8v_gemv_q5_1, QT_Q5_1, 24)
Q8V_GEMV_K(q8v_gemv_q4_k, QT_Q4_K, 144)
Q8V_GEMV_K(q8v_gemv_q5_k, QT_Q5_K, 176)
Q8V_GEMV_K(q8v_gemv_q6_k, QT_Q6_K, 210)

static bool avx512_supported(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("fma") && __builtin_cpu_supports("avx2");
}

static bool vnni_supported(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512vnni");
}

const quant_kernels attn__quant_kernels_avx512 = {
    .isa = "avx512",
    .supported = avx512_supported,
    .f32_tile = simd_quant_f32_tile,
    .f32_mr = F32_MR,
    .f32_nr = F32_NR,
    .f32_lanes = LANES,
    .f32_kstep = LANES,
    .dequant = {[QT_F32] = dequant_f32, [QT_F16] = dequant_f16, [QT_BF16] = dequant_bf16, QUANT_DEQUANT_BLOCKS},
    .f32_gemv = {QUANT_F32_GEMV_TABLE},
    .fast_isa = "avx512-vnni",
    .fast_supported = vnni_supported,
    .q8_tile = q8_tile,
    .q8_mr = Q8_MR,
    .q8_nr = Q8_NR,
    .q8_nrv = 16,
    .q8_gemv = {[QT_Q8_0] = q8v_gemv_q8_0, [QT_Q4_0] = q8v_gemv_q4_0, [QT_Q4_1] = q8v_gemv_q4_1,
                [QT_Q5_0] = q8v_gemv_q5_0, [QT_Q5_1] = q8v_gemv_q5_1, [QT_Q4_K] = q8v_gemv_q4_k,
                [QT_Q5_K] = q8v_gemv_q5_k, [QT_Q6_K] = q8v_gemv_q6_k},
    .quantize = quantize,
    /* the others are AVX2's (src/isa/x86_avx2/quant_ukernels.c): nothing wider helps them */
    .unpack = {QUANT_UNPACK_Q45},
};

#else
QUANT_KERNELS_ABSENT(attn__quant_kernels_avx512, "avx512");
#endif
