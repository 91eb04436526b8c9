/*
 * vec.h — the vector vocabulary of templates/common.h for AVX-512 (F, BW,
 * VL, DQ): 16 float lanes in a zmm register, 32 registers, mask registers
 * for the tails.  Every function carries the target attribute, so the file
 * compiles for any x86-64; the dispatcher runs it only where the CPU has
 * the instructions.
 */
#ifndef ATTN_ISA_X86_AVX512_VEC_H
#define ATTN_ISA_X86_AVX512_VEC_H

#include <immintrin.h>
#include <math.h>
#include <stdint.h>

#define SIMD_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma")))
typedef __m512 vec;
#define VLEN 16

#define v_zero() _mm512_setzero_ps()
#define v_set1(x) _mm512_set1_ps(x)
#define v_load(p) _mm512_load_ps(p)
#define v_loadu(p) _mm512_loadu_ps(p)
#define v_store(p, x) _mm512_store_ps((p), (x))
#define v_storeu(p, x) _mm512_storeu_ps((p), (x))
#define v_add(a, b) _mm512_add_ps((a), (b))
#define v_sub(a, b) _mm512_sub_ps((a), (b))
#define v_mul(a, b) _mm512_mul_ps((a), (b))
#define v_div(a, b) _mm512_div_ps((a), (b))
#define v_fma(a, b, c) _mm512_fmadd_ps((a), (b), (c))
#define v_max(a, b) _mm512_max_ps((a), (b))
#define v_first(x) _mm512_cvtss_f32(x)
#define v_reduce_add(x) _mm512_reduce_add_ps(x)
#define v_reduce_max(x) _mm512_reduce_max_ps(x)
/* out[0..3] = v_reduce_add of a, b, c, d: the compiler's tree each (no
 * machine with AVX-512 measured a shuffled version yet). */
static inline SIMD_TARGET void v_reduce_add4(vec a, vec b, vec c, vec d, float *out) {
    out[0] = v_reduce_add(a);
    out[1] = v_reduce_add(b);
    out[2] = v_reduce_add(c);
    out[3] = v_reduce_add(d);
}

static inline SIMD_TARGET __mmask16 tail_mask(int n) { return (__mmask16)((1u << n) - 1u); }

static inline SIMD_TARGET vec v_load_tail(const float *p, int n, float fill) {
    return _mm512_mask_loadu_ps(_mm512_set1_ps(fill), tail_mask(n), p);
}

static inline SIMD_TARGET void v_store_tail(float *p, vec x, int n) {
    _mm512_mask_storeu_ps(p, tail_mask(n), x);
}

static inline SIMD_TARGET vec v_if_lt(vec a, vec b, vec x, vec y) {
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, b, _CMP_LT_OQ), y, x);
}

static inline SIMD_TARGET vec v_zero_if_neg_inf(vec m) {
    return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(m, _mm512_set1_ps(-INFINITY), _CMP_NEQ_UQ), m);
}

/* ---- half-precision storage: VLEN elements at p, no alignment ----
 * The one place this ISA converts (templates/convert.h and the rows
 * kernels use these).  float16 by AVX-512F's vcvtph2ps / vcvtps2ph (round
 * to nearest even, NaN quieted with its top payload bits, as base/dtype.h);
 * bfloat16 widened by a 16-bit shift, narrowed by integer rounding as
 * dtype.h (AVX512-BF16's vcvtneps2bf16 would do it in one instruction, but
 * not every AVX-512 CPU has it). */
static inline SIMD_TARGET vec v_widen_f16(const uint16_t *p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)p));
}

static inline SIMD_TARGET vec v_widen_bf16(const uint16_t *p) {
    __m512i wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(const void *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
}

static inline SIMD_TARGET void v_narrow_f16(uint16_t *p, vec x) {
    _mm256_storeu_si256((__m256i *)(void *)p, _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

static inline SIMD_TARGET void v_narrow_bf16(uint16_t *p, vec x) {
    __m512i bits = _mm512_castps_si512(x);
    __m512i odd = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
    __m512i rounded = _mm512_add_epi32(bits, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7FFF)));
    __mmask16 is_nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    rounded = _mm512_mask_mov_epi32(rounded, is_nan, _mm512_or_si512(bits, _mm512_set1_epi32(0x00400000)));
    _mm256_storeu_si256((__m256i *)(void *)p, _mm512_cvtepi32_epi16(_mm512_srli_epi32(rounded, 16)));
}

/* ---- 8-bit K/V (base/kv8.h): VLEN codes at p times the block's scale d,
 * exactly d * code as kv8_value computes it ----
 * int8 codes converted; e4m3 codes rebuilt as floats by integer moves
 * (exponent rebias 7 -> 127, subnormals m * 2^-9, the NaN code), exact. */
/* The block's float16 scale (its first two bytes, little-endian) in every
 * lane, converted by the vector unit: the same value as kv8_scale (a NaN
 * scale stays NaN, quieted), without the scalar decode's branches on
 * every vector a kernel loads. */
static inline SIMD_TARGET vec v_kv8_scale(const uint8_t *block) {
    const uint16_t h = (uint16_t)(block[0] | (uint16_t)block[1] << 8);
    return _mm512_cvtph_ps(_mm256_set1_epi16((short)h));
}

static inline SIMD_TARGET vec v_dequant_q8(const uint8_t *p, vec d) {
    __m512i codes = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)p));
    return _mm512_mul_ps(d, _mm512_cvtepi32_ps(codes));
}

static inline SIMD_TARGET vec v_dequant_e4m3(const uint8_t *p, vec d) {
    __m512i x = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)p));
    __m512i mag = _mm512_and_si512(x, _mm512_set1_epi32(0x7F));
    __m512 normal = _mm512_castsi512_ps(_mm512_add_epi32(_mm512_slli_epi32(mag, 20), _mm512_set1_epi32(120 << 23)));
    __m512 sub = _mm512_mul_ps(_mm512_cvtepi32_ps(mag), _mm512_set1_ps(0x1p-9f));
    __m512 a = _mm512_mask_mov_ps(normal, _mm512_cmplt_epi32_mask(mag, _mm512_set1_epi32(8)), sub);
    a = _mm512_mask_mov_ps(a, _mm512_cmpeq_epi32_mask(mag, _mm512_set1_epi32(0x7F)), _mm512_set1_ps(NAN));
    __m512i sign = _mm512_slli_epi32(_mm512_and_si512(x, _mm512_set1_epi32(0x80)), 24);
    return _mm512_mul_ps(d, _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(a), sign)));
}

#endif /* ATTN_ISA_X86_AVX512_VEC_H */
