/*
 * grad_kernels_avx512.c — the flash backward's micro-kernels for AVX-512
 * (F, BW, VL, DQ): grad_kernels_simd.h instantiated with 16-lane vectors.
 * Compiled for any x86-64 with function-level target attributes; chosen
 * only on CPUs that have the instructions (grad_kernels_active).
 *
 * gemm register block: 6 rows x 4 vectors = 24 accumulators, 4 B vectors,
 * one broadcast: 29 of the 32 zmm registers.
 */
#include "grad/grad_kernels.h"

#include "flash/flash.h"

#if defined(__x86_64__)

#include <immintrin.h>

#define SIMD_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma")))
#define SIMD_ISA_NAME "avx512"
#define SIMD_TABLE grad_kernels_avx512
typedef __m512 vec;
#define VLEN 16
#define GEMM_MR 6
#define GEMM_NV 4

#define v_zero() _mm512_setzero_ps()
#define v_load(p) _mm512_load_ps(p)
#define v_store(p, x) _mm512_store_ps((p), (x))
#define v_set1(x) _mm512_set1_ps(x)
#define v_sub(a, b) _mm512_sub_ps((a), (b))
#define v_mul(a, b) _mm512_mul_ps((a), (b))
#define v_fma(a, b, c) _mm512_fmadd_ps((a), (b), (c))

#include "flash/exp2_avx512.h"

#include "grad/grad_kernels_simd.h"

#else
/* ISO C wants a declaration in every translation unit. */
typedef int grad_x86_kernels_absent;
#endif /* __x86_64__ */
