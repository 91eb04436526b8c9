/*
 * vec.h — the vector vocabulary of templates/common.h for portable C: a
 * "vector" of one float.  The generic micro-kernels of the flash forward
 * and backward are written out in plain C (ukernels.c, grad_ukernels.c:
 * they define the contracts by example); this vocabulary serves the
 * templates they share with the other ISAs (the FMA peak loop).
 */
#ifndef ATTN_ISA_GENERIC_VEC_H
#define ATTN_ISA_GENERIC_VEC_H

#include <math.h>

#define SIMD_TARGET
typedef float vec;
#define VLEN 1

#define v_zero() 0.0f
#define v_set1(x) ((float)(x))
#define v_load(p) (*(p))
#define v_loadu(p) (*(p))
#define v_store(p, x) (*(p) = (x))
#define v_storeu(p, x) (*(p) = (x))
#define v_add(a, b) ((a) + (b))
#define v_sub(a, b) ((a) - (b))
#define v_mul(a, b) ((a) * (b))
#define v_div(a, b) ((a) / (b))
#define v_fma(a, b, c) fmaf((a), (b), (c))
#define v_max(a, b) ((a) > (b) ? (a) : (b))
#define v_first(x) (x)
#define v_reduce_add(x) (x)
#define v_reduce_max(x) (x)
#define v_zero_if_neg_inf(m) ((m) == -INFINITY ? 0.0f : (m))
#define v_if_lt(a, b, x, y) ((a) < (b) ? (x) : (y))

static inline vec v_load_tail(const float *p, int n, float fill) { return n > 0 ? *p : fill; }
static inline void v_store_tail(float *p, vec x, int n) {
    if (n > 0) *p = x;
}

#endif /* ATTN_ISA_GENERIC_VEC_H */
