/*
 * grad_kernels_generic.c — the portable micro-kernels of the flash backward:
 * plain C that builds anywhere and that the compiler may vectorise for the
 * baseline instruction set.  They define the contracts of grad_kernels.h by
 * example; grad_kernels_simd.h computes the same with explicit vectors.
 */
#include "grad/grad_kernels.h"

#include "flash/flash.h"

#include <math.h>
#include <string.h>

#include "flash/exp2_scalar.h"

enum { GEN_NB = 16 }; /* columns per register block */

static void gemm(int m, int n, int k, const float *a, int64_t a_rs, int64_t a_cs, const float *b,
                 int64_t ldb, float *c, int64_t ldc, int accumulate) {
    for (int r = 0; r < m; r++)
        for (int n0 = 0; n0 < n; n0 += GEN_NB) {
            float acc[GEN_NB];
            float *c_r = c + r * ldc + n0;
            for (int j = 0; j < GEN_NB; j++) acc[j] = accumulate ? c_r[j] : 0.0f;
            for (int kk = 0; kk < k; kk++) {
                const float a_rk = a[r * a_rs + kk * a_cs];
                const float *b_k = b + kk * ldb + n0;
                for (int j = 0; j < GEN_NB; j++) acc[j] = fmaf(a_rk, b_k[j], acc[j]);
            }
            memcpy(c_r, acc, sizeof acc);
        }
}

static void p_ds(float *s, float *dp, int rows, int cols, int64_t ld, float c, const float *nl,
                 const float *di) {
    for (int r = 0; r < rows; r++)
        for (int j = 0; j < cols; j++) {
            float p = flash_exp2_scalar(fmaf(s[r * ld + j], c, nl[r]));
            s[r * ld + j] = p;
            dp[r * ld + j] = p * (dp[r * ld + j] - di[r]);
        }
}

const grad_kernels grad_kernels_generic = {"generic", gemm, p_ds};
