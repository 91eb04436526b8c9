/*
 * kernels_avx512.c — the flash micro-kernels for AVX-512 (F, BW, VL, DQ):
 * kernels_simd.h instantiated with 16-lane vectors.  Compiled for any
 * x86-64 with function-level target attributes; the dispatcher calls them
 * only on CPUs that have the instructions.
 *
 * Tile shape: Br = 32 rows (2 zmm), qk_tile blocks of 12 keys (24
 * accumulators), pv_tile blocks of 12 widths (24 accumulators), Bc = 96.
 */
#include "flash/flash.h"

#if defined(__x86_64__)

#include <immintrin.h>
#include <math.h>
#include <stdint.h>

#define SIMD_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma")))
#define SIMD_ISA_NAME "avx512"
#define SIMD_TABLE flash_kernels_avx512
typedef __m512 vec;
#define VLEN 16
#define TILE_QV 2
#define KEY_BLOCK 12
#define PV_BLOCK 12
#define PV_SMALL 4
#define TILE_KEYS 96
#define BLOCK_KEYS 64

#define v_zero() _mm512_setzero_ps()
#define v_load(p) _mm512_load_ps(p)
#define v_loadu(p) _mm512_loadu_ps(p)
#define v_storeu(p, x) _mm512_storeu_ps((p), (x))
#define v_set1(x) _mm512_set1_ps(x)
#define v_add(a, b) _mm512_add_ps((a), (b))
#define v_sub(a, b) _mm512_sub_ps((a), (b))
#define v_mul(a, b) _mm512_mul_ps((a), (b))
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

/* m where m != -inf, else 0 (NaN stays NaN). */
static inline SIMD_TARGET vec v_zero_if_neg_inf(vec m) {
    return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(m, _mm512_set1_ps(-INFINITY), _CMP_NEQ_UQ), m);
}

#include "flash/exp2_avx512.h"

#include "flash/kernels_simd.h"

#else
/* ISO C wants a declaration in every translation unit. */
typedef int flash_x86_kernels_absent;
#endif /* __x86_64__ */
