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

static inline SIMD_TARGET __mmask16 tail_mask(int n) { return (__mmask16)((1u << n) - 1u); }

static inline SIMD_TARGET vec v_load_tail(const float *p, int n, float fill) {
    return _mm512_mask_loadu_ps(_mm512_set1_ps(fill), tail_mask(n), p);
}

static inline SIMD_TARGET void v_store_tail(float *p, vec x, int n) {
    _mm512_mask_storeu_ps(p, tail_mask(n), x);
}

static inline SIMD_TARGET vec v_zero_if_neg_inf(vec m) {
    return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(m, _mm512_set1_ps(-INFINITY), _CMP_NEQ_UQ), m);
}

#endif /* ATTN_ISA_X86_AVX512_VEC_H */
