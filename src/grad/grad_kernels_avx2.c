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

#include "flash/exp2_avx2.h"

#include "grad/grad_kernels_simd.h"

#else
/* ISO C wants a declaration in every translation unit. */
typedef int grad_x86_kernels_absent;
#endif /* __x86_64__ */
