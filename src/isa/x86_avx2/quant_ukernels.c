/*
 * quant_ukernels.c — the quantized product's micro-kernels for AVX2 (with
 * FMA and F16C: Haswell, Zen and later).  Compiled for any x86-64 with
 * function-level target attributes.  Contracts: src/quant/quant.h; prose:
 * docs/quant.md.  The AVX-512 table takes this file's FAST unpackers
 * (they need nothing wider) and its whole fast group on a CPU without VNNI.
 *
 * EXACT tile (templates/quant_f32_tile.h): MR = 2 rows of x, NR = 6 rows
 * of W, 8 lanes (k mod 8), one FMA per term: 12 ymm accumulators, 2 x
 * vectors, one W vector.  The lanes summed by vec.h's v_reduce_add:
 * (l, l+4), (l, l+2), (0, 1).  Dequantization and unpacking 8 or 32
 * elements at a time; templates/quant_blocks.h walks the rows.
 * FAST tile: MR = NR = 2, k step 32: per (i, j) and step the 32 byte
 * products summed into 8 int32 lanes — vpmaddubsw (pairs, int16) then
 * vpmaddwd by ones (lane l = elements 4l .. 4l+3), or for a wide type
 * (Q8_0: codes to 255, which vpmaddubsw's int16 pairs would saturate)
 * vpmaddwd on the bytes widened to int16 (lane l = elements 2l, 2l+1,
 * 16+2l, 17+2l: one scale covers the 32, so the lanes' mix is harmless) —
 * then as AVX-512's: converted, times ws * xs of their group, into float
 * lanes; wc * xsum added every 8 groups.
 */
#include "quant/quant.h"

#if defined(__x86_64__) && !defined(ATTN_PORTABLE)

#include <cpuid.h>
#include "isa/x86_avx2/vec.h"

#include <immintrin.h>
#include <string.h>

#define QT_TARGET __attribute__((target("avx2,fma,f16c")))
#define QT_INLINE static inline __attribute__((always_inline)) QT_TARGET

enum { LANES = 8, Q8_MR = 4, Q8_NR = 8 };

QT_INLINE float f16_at(const uint8_t *p) { return _cvtsh_ss(quant_u16(p)); }

/* 8 bytes at p widened to int32 lanes. */
QT_INLINE __m256i bytes8(const uint8_t *p) { return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)p)); }

/* 0xFF in byte i where bit i of bits is set (i < 32), else 0. */
QT_INLINE __m256i bytes_from_bits(uint32_t bits) {
    const __m256i spread = _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303);
    const __m256i r = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits), spread); /* byte i = byte i/8 of bits */
    const __m256i others = _mm256_set1_epi64x((long long)0x7fbfdfeff7fbfdfeULL); /* all bits but bit i%8 */
    return _mm256_cmpeq_epi8(_mm256_or_si256(r, others), _mm256_set1_epi64x(-1));
}

/* 0xFFFFFFFF in int32 lane i where bit i of bits is set (i < 8). */
QT_INLINE __m256i lanes_from_bits(uint32_t bits) {
    const __m256i bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    return _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32((int)bits), bit), bit);
}

/* ------------------------------------------------------- dequantization */

static void dequant_f32(const uint8_t *src, int64_t n, float *out) { memcpy(out, src, sizeof(float) * (size_t)n); }

static QT_TARGET void dequant_f16(const uint8_t *src, int64_t n, float *out) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(src + 2 * i))));
    for (; i < n; i++) out[i] = f16_at(src + 2 * i);
}

static QT_TARGET void dequant_bf16(const uint8_t *src, int64_t n, float *out) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)(src + 2 * i)));
        _mm256_storeu_si256((__m256i *)(void *)(out + i), _mm256_slli_epi32(wide, 16));
    }
    for (; i < n; i++) {
        uint32_t bits = (uint32_t)quant_u16(src + 2 * i) << 16;
        memcpy(out + i, &bits, sizeof bits);
    }
}

/* The dequantizers' arithmetic on one sub-block of 32 elements, into four
 * vectors of 8: the decode kernel (templates/quant_f32_gemv.h) multiplies
 * them straight into its sums, the dequantizers below store them. */

QT_INLINE void q8_regs(const uint8_t *qs, float d, __m256 *v) {
    const __m256 dv = _mm256_set1_ps(d);
    for (int c = 0; c < 4; c++) {
        __m256i q = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(qs + 8 * c)));
        v[c] = _mm256_mul_ps(_mm256_cvtepi32_ps(q), dv);
    }
}

/* One Q4/Q5 block: d * (float)(code - offset) [+ m]; qh 0 for Q4. */
QT_INLINE void q45_regs(const uint8_t *qs, uint32_t qh, int offset, float d, const float *m, __m256 *out) {
    const __m256 dv = _mm256_set1_ps(d);
    const __m256i sixteen = _mm256_set1_epi32(16), off = _mm256_set1_epi32(offset);
    for (int c = 0; c < 4; c++) {
        const __m256i q = bytes8(qs + 8 * (c % 2));
        __m256i v = c < 2 ? _mm256_and_si256(q, _mm256_set1_epi32(15)) : _mm256_srli_epi32(q, 4);
        v = _mm256_or_si256(v, _mm256_and_si256(lanes_from_bits((qh >> (8 * c)) & 0xFF), sixteen));
        __m256 f = _mm256_mul_ps(dv, _mm256_cvtepi32_ps(_mm256_sub_epi32(v, off)));
        if (m) f = _mm256_add_ps(f, _mm256_set1_ps(*m));
        out[c] = f;
    }
}

/* Sub-block s of a Q4_K (qh NULL) or Q5_K block: scale * (float)v - offset. */
QT_INLINE void k_regs(const uint8_t *header, const uint8_t *qh, const uint8_t *qs, int s, __m256 *out) {
    const float d = f16_at(header), dmin = f16_at(header + 2);
    int sc, mn;
    quant_k_scale_min(header + 4, s, &sc, &mn);
    const __m256 scale = _mm256_set1_ps(d * (float)sc), offset = _mm256_set1_ps(dmin * (float)mn);
    for (int c = 0; c < 4; c++) {
        __m256i v = _mm256_and_si256(_mm256_srli_epi32(bytes8(qs + 32 * (s / 2) + 8 * c), 4 * (s % 2)),
                                     _mm256_set1_epi32(15));
        if (qh) {
            __m256i bit = _mm256_and_si256(_mm256_srli_epi32(bytes8(qh + 8 * c), s), _mm256_set1_epi32(1));
            v = _mm256_or_si256(v, _mm256_slli_epi32(bit, 4));
        }
        out[c] = _mm256_sub_ps(_mm256_mul_ps(scale, _mm256_cvtepi32_ps(v)), offset);
    }
}

/* Sub-block s (elements 32s .. 32s+31) of a Q6_K block. */
QT_INLINE void q6_regs(const uint8_t *block, int s, __m256 *out) {
    const uint8_t *ql = block, *qh = block + 128;
    const int8_t *scales = (const int8_t *)(block + 192);
    const float d = f16_at(block + 208);
    const int h = s / 4, k = s % 4;
    for (int c = 0; c < 4; c++) {
        const int e = 128 * h + 32 * k + 8 * c;
        const __m256i low = _mm256_and_si256(
            _mm256_srli_epi32(bytes8(ql + 64 * h + 32 * (k & 1) + 8 * c), 4 * (k >> 1)), _mm256_set1_epi32(15));
        const __m256i high =
            _mm256_and_si256(_mm256_srli_epi32(bytes8(qh + 32 * h + 8 * c), 2 * k), _mm256_set1_epi32(3));
        const __m256i q = _mm256_sub_epi32(_mm256_or_si256(low, _mm256_slli_epi32(high, 4)), _mm256_set1_epi32(32));
        out[c] = _mm256_mul_ps(_mm256_set1_ps(d * (float)scales[e / 16]), _mm256_cvtepi32_ps(q));
    }
}

QT_INLINE void store4(float *out, const __m256 *v) {
    for (int c = 0; c < 4; c++) _mm256_storeu_ps(out + 8 * c, v[c]);
}

QT_INLINE void dequant_q8_block(const uint8_t *qs, float d, float *out) {
    __m256 v[4];
    q8_regs(qs, d, v);
    store4(out, v);
}

QT_INLINE void dequant_q45_block(const uint8_t *qs, uint32_t qh, int offset, float d, const float *m, float *out) {
    __m256 v[4];
    q45_regs(qs, qh, offset, d, m, v);
    store4(out, v);
}

QT_INLINE void dequant_k_block(const uint8_t *header, const uint8_t *qh, const uint8_t *qs, float *out) {
    for (int s = 0; s < 8; s++) {
        __m256 v[4];
        k_regs(header, qh, qs, s, v);
        store4(out + 32 * s, v);
    }
}

QT_INLINE void dequant_q6_block(const uint8_t *block, float *out) {
    for (int s = 0; s < 8; s++) {
        __m256 v[4];
        q6_regs(block, s, v);
        store4(out + 32 * s, v);
    }
}

/* ------------------------------------------------------------- FAST codes */

QT_INLINE void store32(uint8_t *p, __m256i v) { _mm256_storeu_si256((__m256i *)(void *)p, v); }

QT_INLINE void q8_codes(const uint8_t *qs, uint8_t *wu) {
    store32(wu, _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(const void *)qs), _mm256_set1_epi8((char)0x80)));
}

/* Q4/Q5 codes (the fifth bits in qh, 0 for Q4) into wu[0..32). */
QT_INLINE void q45_codes(const uint8_t *qs, uint32_t qh, uint8_t *wu) {
    const __m128i q = _mm_loadu_si128((const __m128i *)(const void *)qs), mask = _mm_set1_epi8(15);
    const __m256i v = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), mask), _mm_and_si128(q, mask));
    store32(wu, _mm256_or_si256(v, _mm256_and_si256(bytes_from_bits(qh), _mm256_set1_epi8(16))));
}

QT_INLINE void k_codes(const uint8_t *qh, const uint8_t *qs, uint8_t *wu) {
    const __m256i mask = _mm256_set1_epi8(15), one = _mm256_set1_epi8(1);
    const __m256i bits = qh ? _mm256_loadu_si256((const __m256i *)(const void *)qh) : _mm256_setzero_si256();
    for (int g = 0; g < 4; g++) {
        const __m256i q = _mm256_loadu_si256((const __m256i *)(const void *)(qs + 32 * g));
        for (int h = 0; h < 2; h++) {
            const int s = 2 * g + h;
            __m256i v = _mm256_and_si256(h ? _mm256_srli_epi16(q, 4) : q, mask);
            /* bit s of each qh byte moved to bit 4 (16-bit shifts, masked per byte) */
            v = _mm256_or_si256(v, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(bits, s), one), 4));
            store32(wu + 32 * s, v);
        }
    }
}

QT_INLINE void q6_codes(const uint8_t *block, uint8_t *wu) {
    const __m256i mask4 = _mm256_set1_epi8(15), mask2 = _mm256_set1_epi8(3);
    const uint8_t *ql = block, *qh = block + 128;
    for (int h = 0; h < 2; h++) {
        const __m256i high = _mm256_loadu_si256((const __m256i *)(const void *)(qh + 32 * h));
        for (int k = 0; k < 4; k++) {
            const __m256i l = _mm256_loadu_si256((const __m256i *)(const void *)(ql + 64 * h + 32 * (k & 1)));
            const __m256i low = _mm256_and_si256(_mm256_srli_epi16(l, 4 * (k >> 1)), mask4);
            const __m256i top = _mm256_and_si256(_mm256_srli_epi16(high, 2 * k), mask2);
            store32(wu + 128 * h + 32 * k, _mm256_or_si256(low, _mm256_slli_epi16(top, 4)));
        }
    }
}

#define QT_UNPACK_Q45
#define QT_UNPACK_OTHERS
#define QT_REGS
#include "isa/templates/quant_blocks.h"

/* ----------------------------------------------------- FAST activations */

QT_INLINE int hsum_epi32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    return _mm_cvtsi128_si32(s);
}

static QT_TARGET void quantize(const float *x, int64_t n, int8_t *qx, float *xs, int32_t *qsum) {
    const __m256 sign = _mm256_set1_ps(-0.0f), inf = _mm256_set1_ps(__builtin_inff());
    for (int64_t b = 0; b < n / 32; b++, x += 32, qx += 32, xs++, qsum += 2) {
        __m256 v[4], amax = _mm256_setzero_ps();
        int finite = 0xFF;
        for (int c = 0; c < 4; c++) {
            v[c] = _mm256_loadu_ps(x + 8 * c);
            const __m256 a = _mm256_andnot_ps(sign, v[c]);
            finite &= _mm256_movemask_ps(_mm256_cmp_ps(a, inf, _CMP_LT_OQ)); /* false for NaN and inf */
            amax = _mm256_max_ps(amax, a);
        }
        if (finite != 0xFF) {
            memset(qx, 0, 32);
            xs[0] = __builtin_nanf(""), qsum[0] = qsum[1] = 0;
            continue;
        }
        __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
        m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        const float top = _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
        const bool tiny = top < QUANT_X_TINY;
        const float d = tiny ? 0.0f : top / 127.0f, id = tiny ? 0.0f : 127.0f / top;
        const __m256 idv = _mm256_set1_ps(id);
        __m256i q[4];
        for (int c = 0; c < 4; c++) q[c] = _mm256_cvtps_epi32(_mm256_mul_ps(v[c], idv)); /* nearest even */
        /* int32 -> int8: the packs interleave 128-bit halves; the permute restores the order */
        const __m256i bytes = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
        store32((uint8_t *)qx, _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
        xs[0] = d;
        qsum[0] = hsum_epi32(_mm256_add_epi32(q[0], q[1]));
        qsum[1] = hsum_epi32(_mm256_add_epi32(q[2], q[3]));
    }
}

/* ------------------------------------------------------------------ tiles */

#define F32_MR 2
#define F32_NR 6
#include "isa/templates/quant_f32_tile.h"

/* decode: 4 rows of W for one row of x, 2 for two (16 ymm registers) */
#define GEMV_R1 4
#define GEMV_R 2
#include "isa/templates/quant_f32_gemv.h"

/* The FAST tile: MR_ rows of x (1..Q8_MR) against one vector of 8
 * interleaved rows of W (quant.h's arithmetic).  Per group and quad of
 * x's codes (broadcast): vpmaddubsw (u8 x s8, pairs into int16) and
 * vpmaddwd by ones into the int32 sums.  Q8_0's codes reach 255, and a
 * pair 255 * 127 * 2 would saturate int16: its codes go signed (q = wu ^
 * 128) and meet x as |q| * (x * sign q), at most 2 * 128 * 127, which sums
 * q * x directly (so its sums start from 0, not -128 * sum qx: the same
 * integer).  Then per row of x one conversion, ws * xs, and the FMA into
 * the sum of the group's parity (and the min's FMA). */
QT_INLINE void q8_group(const int MR_, const int G, const bool has_min, const bool wide, const int par,
                        const quant_q8_x *x, const quant_q8_w *w, int64_t g, __m256 a[][2]) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i isum[Q8_MR];
#pragma GCC unroll 4
    for (int i = 0; i < MR_; i++)
        isum[i] = has_min || wide ? _mm256_setzero_si256() : _mm256_set1_epi32(((const int32_t *)x->c)[i * x->ld_s + g]);
#pragma GCC unroll 8
    for (int t = 0; t < G / 4; t++) {
        __m256i wq = _mm256_loadu_si256((const __m256i *)(const void *)(w->q + (g * G + 4 * t) * 8)), wabs = wq;
        if (wide) wq = _mm256_xor_si256(wq, _mm256_set1_epi8((char)0x80)), wabs = _mm256_abs_epi8(wq);
#pragma GCC unroll 4
        for (int i = 0; i < MR_; i++) {
            int32_t quad;
            memcpy(&quad, x->q + i * x->ld_q + g * G + 4 * t, 4);
            __m256i xb = _mm256_set1_epi32(quad);
            if (wide) xb = _mm256_sign_epi8(xb, wq);
            isum[i] = _mm256_add_epi32(isum[i], _mm256_madd_epi16(_mm256_maddubs_epi16(wabs, xb), ones));
        }
    }
    const __m256 ws = _mm256_loadu_ps(w->s + 8 * g);
    const __m256 wc = has_min ? _mm256_loadu_ps(w->c + 8 * g) : ws;
#pragma GCC unroll 4
    for (int i = 0; i < MR_; i++) {
        const __m256 xs = _mm256_set1_ps(x->s[i * x->ld_s + g]);
        a[i][par] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[i]), _mm256_mul_ps(ws, xs), a[i][par]);
        if (has_min) a[i][par] = _mm256_fmadd_ps(wc, _mm256_set1_ps(((const float *)x->c)[i * x->ld_s + g]), a[i][par]);
    }
}

QT_INLINE void q8_tile_rows(const int MR_, const int G, const bool has_min, const bool wide, int nr, const quant_q8_x *x,
                            const quant_q8_w *w, int64_t kc, float *acc, int flags, float *y, int64_t ldy) {
    __m256 a[Q8_MR][2];
#pragma GCC unroll 4
    for (int i = 0; i < MR_; i++)
#pragma GCC unroll 2
        for (int p = 0; p < 2; p++) a[i][p] = quant_acc_start(acc + 16 * (2 * i + p), flags);
    const int64_t groups = kc / G;
    int64_t g = 0;
    for (; g + 2 <= groups; g += 2) {
        q8_group(MR_, G, has_min, wide, 0, x, w, g, a);
        q8_group(MR_, G, has_min, wide, 1, x, w, g + 1, a);
    }
    if (g < groups) q8_group(MR_, G, has_min, wide, 0, x, w, g, a);
#pragma GCC unroll 4
    for (int i = 0; i < MR_; i++) {
        if (!(flags & QUANT_TILE_END)) {
            _mm256_store_ps(acc + 16 * (2 * i), a[i][0]);
            _mm256_store_ps(acc + 16 * (2 * i + 1), a[i][1]);
        } else {
            const __m256 sum = _mm256_add_ps(a[i][0], a[i][1]);
            if (nr >= 8) _mm256_storeu_ps(y + i * ldy, sum);
            else _mm256_maskstore_ps(y + i * ldy, _mm256_cmpgt_epi32(_mm256_set1_epi32(nr), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)), sum);
        }
    }
}

#define Q8_TILE_ROWS(G, MIN, WIDE)                                                   \
    switch (mr) {                                                                    \
    case 1: q8_tile_rows(1, G, MIN, WIDE, nr, x, w, kc, acc, flags, y, ldy); break;  \
    case 2: q8_tile_rows(2, G, MIN, WIDE, nr, x, w, kc, acc, flags, y, ldy); break;  \
    case 3: q8_tile_rows(3, G, MIN, WIDE, nr, x, w, kc, acc, flags, y, ldy); break;  \
    default: q8_tile_rows(4, G, MIN, WIDE, nr, x, w, kc, acc, flags, y, ldy); break; \
    }

static QT_TARGET void q8_tile(int mr, int nr, const quant_q8_x *x, const quant_q8_w *w, int64_t kc,
                              const quant_q8_type *type, float *acc, int flags, float *y, int64_t ldy) {
    if (type->group == 16) Q8_TILE_ROWS(16, false, false)
    else if (type->has_min) Q8_TILE_ROWS(32, true, false)
    else if (type->offset == 128) Q8_TILE_ROWS(32, false, true)
    else Q8_TILE_ROWS(32, false, false)
}

/* F16C (the half conversions) is read from CPUID leaf 1 (ECX bit 29):
 * clang's __builtin_cpu_supports does not know "f16c". */
static bool avx2_supported(void) {
    unsigned eax, ebx, ecx, edx;
    __builtin_cpu_init();
    const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 29));
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
}

const quant_kernels attn__quant_kernels_avx2 = {
    .isa = "avx2",
    .supported = avx2_supported,
    .f32_tile = simd_quant_f32_tile,
    .f32_mr = F32_MR,
    .f32_nr = F32_NR,
    .f32_lanes = LANES,
    .f32_kstep = LANES,
    .dequant = {[QT_F32] = dequant_f32, [QT_F16] = dequant_f16, [QT_BF16] = dequant_bf16, QUANT_DEQUANT_BLOCKS},
    .f32_gemv = {QUANT_F32_GEMV_TABLE},
    .fast_isa = "avx2",
    .q8_tile = q8_tile,
    .q8_mr = Q8_MR,
    .q8_nr = Q8_NR,
    .q8_nrv = 8,
    .quantize = quantize,
    .unpack = {QUANT_UNPACK_Q45, QUANT_UNPACK_OTHERS},
};

#else
QUANT_KERNELS_ABSENT(attn__quant_kernels_avx2, "avx2");
#endif
