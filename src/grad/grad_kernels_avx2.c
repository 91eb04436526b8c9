/*
 * grad_kernels_avx2.c — the flash backward's micro-kernels for AVX2 + FMA:
 * grad_kernels_simd.h instantiated with 8-lane vectors.  Compiled for any
 * x86-64 with function-level target attributes; chosen only on CPUs that
 * have the instructions (grad_kernels_active).
 *
 * gemm register block: 6 rows x 2 vectors = 12 accumulators, 2 B vectors,
 * one broadcast: 15 of the 16 ymm registers.
 */
#include "grad/grad_kernels.h"

#include "flash/flash.h"

#if defined(__x86_64__)

#include <immintrin.h>

#define SIMD_TARGET __attribute__((target("avx2,fma")))
#define SIMD_ISA_NAME "avx2"
#define SIMD_TABLE grad_kernels_avx2
typedef __m256 vec;
#define VLEN 8
#define GEMM_MR 6
#define GEMM_NV 2

#define v_zero() _mm256_setzero_ps()
#define v_load(p) _mm256_load_ps(p)
#define v_store(p, x) _mm256_store_ps((p), (x))
#define v_set1(x) _mm256_set1_ps(x)
#define v_sub(a, b) _mm256_sub_ps((a), (b))
#define v_mul(a, b) _mm256_mul_ps((a), (b))
#define v_fma(a, b, c) _mm256_fmadd_ps((a), (b), (c))

/* exp2 as in flash.h: 2^x = 2^n * p(x - n), n = round(x) (the 1.5 * 2^23
 * trick), 2^n built in the exponent field; x clamped to 128 above (+inf);
 * below FLASH_EXP2_MIN (-inf included) masked to 0; NaN propagates. */
static inline SIMD_TARGET vec v_exp2(vec x) {
    const vec round = _mm256_set1_ps(12582912.0f);
    vec keep = _mm256_cmp_ps(x, _mm256_set1_ps(FLASH_EXP2_MIN), _CMP_NLT_UQ);
    vec xc = _mm256_min_ps(_mm256_set1_ps(128.0f), x);
    vec n = _mm256_sub_ps(_mm256_add_ps(xc, round), round);
    vec f = _mm256_sub_ps(xc, n);
    vec p = _mm256_set1_ps(FLASH_EXP2_C6);
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(FLASH_EXP2_C5));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(FLASH_EXP2_C4));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(FLASH_EXP2_C3));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(FLASH_EXP2_C2));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(FLASH_EXP2_C1));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_and_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(e)), keep);
}

#include "grad/grad_kernels_simd.h"

#else
/* ISO C wants a declaration in every translation unit. */
typedef int grad_x86_kernels_absent;
#endif /* __x86_64__ */
