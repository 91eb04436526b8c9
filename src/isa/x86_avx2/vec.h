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

#define SIMD_TARGET __attribute__((target("avx2,fma")))
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

static inline SIMD_TARGET vec v_load_tail(const float *p, int n, float fill) {
    __m256i mask = tail_mask(n);
    return _mm256_blendv_ps(_mm256_set1_ps(fill), _mm256_maskload_ps(p, mask), _mm256_castsi256_ps(mask));
}

static inline SIMD_TARGET void v_store_tail(float *p, vec x, int n) {
    _mm256_maskstore_ps(p, tail_mask(n), x);
}

static inline SIMD_TARGET float v_reduce_add(vec x) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline SIMD_TARGET float v_reduce_max(vec x) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline SIMD_TARGET vec v_zero_if_neg_inf(vec m) {
    return _mm256_and_ps(m, _mm256_cmp_ps(m, _mm256_set1_ps(-INFINITY), _CMP_NEQ_UQ));
}

#endif /* ATTN_ISA_X86_AVX2_VEC_H */
