/*
 * grad_kernels.h — the micro-kernels of the flash backward (src/grad/
 * sdpa_flash_backward.c) and their contracts.  One table per instruction
 * set; the loop nest, tiling, masking and threading are portable C written
 * once, only these entries are per ISA (the BLIS split, DESIGN.md §2).
 *
 * The backward of one (query tile, key tile) pair is five small matrix
 * products and one elementwise step.  With Br query rows, Bc keys, the
 * widths padded to multiples of 16 (Dp, Dvp) and every tile packed
 * row-major by the loop nest:
 *   S    [Br, Bc]  = Q [Br, Dp] . Kt [Dp, Bc]            gemm
 *   dP   [Br, Bc]  = dO [Br, Dvp] . Vt [Dvp, Bc]         gemm
 *   P, dS          = p_ds(S, dP)                          elementwise
 *   dV   [Bc, Dvp] += P^T . dO     (A read transposed)    gemm, accumulate
 *   dK   [Bc, Dp]  += dS^T . Q     (A read transposed)    gemm, accumulate
 *   dQ   [Br, Dp]  += dS . K [Bc, Dp]                     gemm, accumulate
 *
 * Shape legend: see sdpa_flash_backward.c.
 */
#ifndef ATTN_GRAD_KERNELS_H
#define ATTN_GRAD_KERNELS_H

#include <stdint.h>

typedef struct grad_kernels {
    const char *isa; /* "generic", "avx2", "avx512" */

    /* C[m, n] = A[m, k] . B[k, n]  (accumulate = 0: C is written without
     * being read, it may hold garbage)  or  C += A . B  (accumulate = 1).
     * A(r, kk) is read at a[r * a_rs + kk * a_cs], so A may be a transposed
     * view; B rows are contiguous, ldb apart; C rows ldc apart.
     * n must be a multiple of 16 and b, c 64-byte aligned with ldb, ldc
     * multiples of 16; m, k >= 1 are free.  Every C element is one sum over
     * kk in increasing order: the result depends on the ISA, never on the
     * caller's threads. */
    void (*gemm)(int m, int n, int k, const float *a, int64_t a_rs, int64_t a_cs,
                 const float *b, int64_t ldb, float *c, int64_t ldc, int accumulate);

    /* The elementwise step of `rows` rows of `cols` (a multiple of 16) keys,
     * rows ld apart, in place:
     *   s[r][j]  <- p  = exp2(s[r][j] * c + nl[r])         (the weight)
     *   dp[r][j] <- ds = p * (dp[r][j] - di[r])
     * with c = scale * log2(e) and nl[r] = -lse[r] * log2(e).  A hidden
     * element has s = -inf, a row that must contribute nothing nl = -inf:
     * both give p = 0 exactly (exp2 of anything below -126 is 0), hence
     * ds = 0, never NaN.  exp2 is flash.h's polynomial. */
    void (*p_ds)(float *s, float *dp, int rows, int cols, int64_t ld, float c,
                 const float *nl, const float *di);
} grad_kernels;

/* The kernels for the instruction set the flash forward runs on
 * (attn_isa_name(): $ATTN_ARCH, else the best the CPU supports). */
const grad_kernels *grad_kernels_active(void);

extern const grad_kernels grad_kernels_generic;
#if defined(__x86_64__)
extern const grad_kernels grad_kernels_avx2;
extern const grad_kernels grad_kernels_avx512;
#endif

#endif /* ATTN_GRAD_KERNELS_H */
