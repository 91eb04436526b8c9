/*
 * vec.h — the vector vocabulary of templates/common.h for AVX2 + FMA: 8
 * float lanes in a ymm register, 16 registers.  Every function carries the
 * target attribute, so the file compiles for any x86-64; the dispatcher runs
 * it only where the CPU has the instructions.
 */
#ifndef ATTN_ISA_X86_AVX2_VEC_H
#define ATTN_ISA_X86_AVX2_VEC_H

#include <immintrin.h>
#include <math.h>
#include <stdint.h>

#define SIMD_TARGET __attribute__((target("avx2,fma,f16c")))
typedef __m256 vec;
#define VLEN 8

#define v_zero() _mm256_setzero_ps()
#define v_set1(x) _mm256_set1_ps(x)
#define v_load(p) _mm256_load_ps(p)
#define v_loadu(p) _mm256_loadu_ps(p)
#define v_store(p, x) _mm256_store_ps((p), (x))
#define v_storeu(p, x) _mm256_storeu_ps((p), (x))
#define v_add(a, b) _mm256_add_ps((a), (b))
#define v_sub(a, b) _mm256_sub_ps((a), (b))
#define v_mul(a, b) _mm256_mul_ps((a), (b))
#define v_div(a, b) _mm256_div_ps((a), (b))
#define v_fma(a, b, c) _mm256_fmadd_ps((a), (b), (c))
#define v_max(a, b) _mm256_max_ps((a), (b))
#define v_first(x) _mm256_cvtss_f32(x)

static inline SIMD_TARGET __m256i tail_mask(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* A whole vector (n == VLEN, a constant in the loops' full-vector bodies,
 * where the test folds away) is a plain load or store: AMD's cores run
 * vmaskmovps as microcode, a masked store of 8 lanes costing ~5x an add of
 * them (bench/eltwise_bench.sh on Zen 4: the AVX2 residual add 0.2x the
 * scalar loop).  The same values either way. */
static inline SIMD_TARGET vec v_load_tail(const float *p, int n, float fill) {
    if (n >= VLEN) return _mm256_loadu_ps(p);
    __m256i mask = tail_mask(n);
    return _mm256_blendv_ps(_mm256_set1_ps(fill), _mm256_maskload_ps(p, mask), _mm256_castsi256_ps(mask));
}

static inline SIMD_TARGET void v_store_tail(float *p, vec x, int n) {
    if (n >= VLEN) {
        _mm256_storeu_ps(p, x);
        return;
    }
    _mm256_maskstore_ps(p, tail_mask(n), x);
}

static inline SIMD_TARGET float v_reduce_add(vec x) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* out[0..3] = v_reduce_add(a), (b), (c), (d), bit for bit: the same tree
 * per vector, ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)), run on the
 * four at once (9 shuffles and adds instead of 4 x 5, and one store). */
static inline SIMD_TARGET void v_reduce_add4(vec a, vec b, vec c, vec d, float *out) {
    /* x_i = l_i + l_(i+4): [xa | xb] and [xc | xd] */
    __m256 ab = _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
    __m256 cd = _mm256_add_ps(_mm256_permute2f128_ps(c, d, 0x20), _mm256_permute2f128_ps(c, d, 0x31));
    /* y0 = x0 + x2, y1 = x1 + x3: [ya0 ya1 yc0 yc1 | yb0 yb1 yd0 yd1] */
    __m256 y = _mm256_add_ps(_mm256_shuffle_ps(ab, cd, _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm256_shuffle_ps(ab, cd, _MM_SHUFFLE(3, 2, 3, 2)));
    /* y0 + y1: [A C A C | B D B D] */
    __m256 z = _mm256_add_ps(_mm256_shuffle_ps(y, y, _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm256_shuffle_ps(y, y, _MM_SHUFFLE(3, 1, 3, 1)));
    _mm_storeu_ps(out, _mm_unpacklo_ps(_mm256_castps256_ps128(z), _mm256_extractf128_ps(z, 1)));
}

static inline SIMD_TARGET float v_reduce_max(vec x) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline SIMD_TARGET vec v_if_lt(vec a, vec b, vec x, vec y) {
    return _mm256_blendv_ps(y, x, _mm256_cmp_ps(a, b, _CMP_LT_OQ));
}

static inline SIMD_TARGET vec v_zero_if_neg_inf(vec m) {
    return _mm256_and_ps(m, _mm256_cmp_ps(m, _mm256_set1_ps(-INFINITY), _CMP_NEQ_UQ));
}

/* ---- half-precision storage: VLEN elements at p, no alignment ----
 * The one place this ISA converts (templates/convert.h and the rows
 * kernels use these).  float16 by F16C (vcvtph2ps exact; vcvtps2ph with
 * round-to-nearest-even, which quiets a NaN and keeps its top payload bits
 * as base/dtype.h does); bfloat16 by integer shifts, rounding as dtype.h. */
static inline SIMD_TARGET vec v_widen_f16(const uint16_t *p) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)p));
}

static inline SIMD_TARGET vec v_widen_bf16(const uint16_t *p) {
    __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
}

static inline SIMD_TARGET void v_narrow_f16(uint16_t *p, vec x) {
    _mm_storeu_si128((__m128i *)(void *)p, _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

/* bits + 0x7FFF + (bit 16), truncated: nearest even; a NaN gets the quiet
 * bit instead (the add could carry it into infinity). */
static inline SIMD_TARGET void v_narrow_bf16(uint16_t *p, vec x) {
    __m256i bits = _mm256_castps_si256(x);
    __m256i odd = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
    __m256i rounded = _mm256_add_epi32(bits, _mm256_add_epi32(odd, _mm256_set1_epi32(0x7FFF)));
    __m256i quiet = _mm256_or_si256(bits, _mm256_set1_epi32(0x00400000));
    __m256i is_nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
    __m256i top = _mm256_srli_epi32(_mm256_blendv_epi8(rounded, quiet, is_nan), 16);
    __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(top), _mm256_extracti128_si256(top, 1));
    _mm_storeu_si128((__m128i *)(void *)p, packed);
}

/* ---- 8-bit K/V (base/kv8.h): VLEN codes at p times the block's scale d,
 * exactly d * code as kv8_value computes it (e4m3 rebuilt by integer
 * moves: exponent rebias 7 -> 127, subnormals m * 2^-9, the NaN code). */
/* The block's float16 scale (its first two bytes, little-endian) in every
 * lane, converted by the vector unit: the same value as kv8_scale (a NaN
 * scale stays NaN, quieted), without the scalar decode's branches on
 * every vector a kernel loads. */
static inline SIMD_TARGET vec v_kv8_scale(const uint8_t *block) {
    const uint16_t h = (uint16_t)(block[0] | (uint16_t)block[1] << 8);
    return _mm256_cvtph_ps(_mm_set1_epi16((short)h));
}

static inline SIMD_TARGET vec v_dequant_q8(const uint8_t *p, vec d) {
    __m256i codes = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)p));
    return _mm256_mul_ps(d, _mm256_cvtepi32_ps(codes));
}

static inline SIMD_TARGET vec v_dequant_e4m3(const uint8_t *p, vec d) {
    __m256i x = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)p));
    __m256i mag = _mm256_and_si256(x, _mm256_set1_epi32(0x7F));
    __m256 normal = _mm256_castsi256_ps(_mm256_add_epi32(_mm256_slli_epi32(mag, 20), _mm256_set1_epi32(120 << 23)));
    __m256 sub = _mm256_mul_ps(_mm256_cvtepi32_ps(mag), _mm256_set1_ps(0x1p-9f));
    __m256 a = _mm256_blendv_ps(normal, sub, _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(8), mag)));
    a = _mm256_blendv_ps(a, _mm256_set1_ps(NAN), _mm256_castsi256_ps(_mm256_cmpeq_epi32(mag, _mm256_set1_epi32(0x7F))));
    __m256i sign = _mm256_slli_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x80)), 24);
    return _mm256_mul_ps(d, _mm256_castsi256_ps(_mm256_or_si256(_mm256_castps_si256(a), sign)));
}

#endif /* ATTN_ISA_X86_AVX2_VEC_H */
