/*
 * grad_ukernels.h — the flash backward's micro-kernels written once for any
 * vector width: instantiated by src/isa/x86_avx2/ukernels.c (8 lanes) and
 * src/isa/x86_avx512/ukernels.c (16 lanes).  The including file includes
 * its ISA's vec.h and exp2.h and defines the gemm register block:
 *
 *   GEMM_MR, GEMM_NV      GEMM_MR rows x GEMM_NV vectors (GEMM_MR * GEMM_NV
 *                         accumulators)
 *
 * It defines static functions simd_gemm and simd_p_ds.  Contracts:
 * src/isa/flash_table.h.  Every accumulator is one sum over k in increasing
 * order; results depend on the ISA only.
 */

#include "isa/templates/common.h"

/* C[mr rows, nv vectors] (+)= A . B: the register block.  mr and nv are
 * compile-time constants at every call, so acc[][] lives in registers. */
SIMD_INLINE void gemm_block(const int mr, const int nv, int k, const float *a, int64_t a_rs,
                            int64_t a_cs, const float *b, int64_t ldb, float *c, int64_t ldc,
                            int accumulate) {
    vec acc[GEMM_MR][GEMM_NV];
    SIMD_UNROLL for (int r = 0; r < mr; r++)
        SIMD_UNROLL for (int v = 0; v < nv; v++)
            acc[r][v] = accumulate ? v_load(c + r * ldc + v * VLEN) : v_zero();
    for (int kk = 0; kk < k; kk++) {
        vec b_k[GEMM_NV];
        const float *a_k = a + kk * a_cs;
        SIMD_UNROLL for (int v = 0; v < nv; v++) b_k[v] = v_load(b + kk * ldb + v * VLEN);
        SIMD_UNROLL for (int r = 0; r < mr; r++) {
            const vec a_rk = v_set1(a_k[r * a_rs]);
            SIMD_UNROLL for (int v = 0; v < nv; v++) acc[r][v] = v_fma(a_rk, b_k[v], acc[r][v]);
        }
    }
    SIMD_UNROLL for (int r = 0; r < mr; r++)
        SIMD_UNROLL for (int v = 0; v < nv; v++) v_store(c + r * ldc + v * VLEN, acc[r][v]);
}

/* All rows of one column strip of nv vectors: full blocks of GEMM_MR rows,
 * then the remainder with a constant row count each. */
SIMD_INLINE void gemm_strip(const int nv, int m, int k, const float *a, int64_t a_rs, int64_t a_cs,
                            const float *b, int64_t ldb, float *c, int64_t ldc, int accumulate) {
    int r0 = 0;
    for (; r0 + GEMM_MR <= m; r0 += GEMM_MR)
        gemm_block(GEMM_MR, nv, k, a + r0 * a_rs, a_rs, a_cs, b, ldb, c + r0 * ldc, ldc, accumulate);
    const float *a_r = a + r0 * a_rs;
    float *c_r = c + r0 * ldc;
    switch (m - r0) {
#define GEMM_TAIL(rows)                                                                        \
    case rows:                                                                                 \
        if (rows < GEMM_MR) gemm_block(rows, nv, k, a_r, a_rs, a_cs, b, ldb, c_r, ldc, accumulate); \
        break;
        GEMM_TAIL(1) GEMM_TAIL(2) GEMM_TAIL(3) GEMM_TAIL(4) GEMM_TAIL(5) GEMM_TAIL(6) GEMM_TAIL(7)
#undef GEMM_TAIL
    default:
        break;
    }
}

static SIMD_TARGET void simd_gemm(int m, int n, int k, const float *a, int64_t a_rs, int64_t a_cs,
                                  const float *b, int64_t ldb, float *c, int64_t ldc, int accumulate) {
    const int strip = GEMM_NV * VLEN;
    int n0 = 0;
    for (; n0 + strip <= n; n0 += strip)
        gemm_strip(GEMM_NV, m, k, a, a_rs, a_cs, b + n0, ldb, c + n0, ldc, accumulate);
    /* n is a multiple of 16, so the rest is whole vectors, fewer than GEMM_NV. */
    switch ((n - n0) / VLEN) {
#define GEMM_REST(vectors)                                                                      \
    case vectors:                                                                               \
        if (vectors < GEMM_NV)                                                                  \
            gemm_strip(vectors, m, k, a, a_rs, a_cs, b + n0, ldb, c + n0, ldc, accumulate);     \
        break;
        GEMM_REST(1) GEMM_REST(2) GEMM_REST(3)
#undef GEMM_REST
    default:
        break;
    }
}

static SIMD_TARGET void simd_p_ds(float *s, float *dp, int rows, int cols, int64_t ld, float c,
                                  const float *nl, const float *di) {
    const vec c_v = v_set1(c);
    for (int r = 0; r < rows; r++) {
        const vec nl_r = v_set1(nl[r]), di_r = v_set1(di[r]);
        float *s_r = s + r * ld, *dp_r = dp + r * ld;
        for (int j = 0; j < cols; j += VLEN) {
            vec p = v_exp2(v_fma(v_load(s_r + j), c_v, nl_r));
            v_store(s_r + j, p);
            v_store(dp_r + j, v_mul(p, v_sub(v_load(dp_r + j), di_r)));
        }
    }
}
