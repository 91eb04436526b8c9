/*
 * linear.h — the projections' internal entry points (linear.c), shared by
 * the module's forward and backward (mha.c, mha_backward.c).
 *
 * Shape legend: x [rows, d_in]  w [d_in, d_out]  dy [rows, d_out]
 *               dx [rows, d_in]  dw [d_in, d_out]  db [d_out]
 */
#ifndef ATTN_API_LINEAR_H
#define ATTN_API_LINEAR_H

#include "base/base.h"

/* Positive sizes, and products and byte sizes that fit; messages start with fn. */
attn_status attn__linear_check_sizes(const char *fn, int64_t rows, int64_t d_in, int64_t d_out);

/* dx [rows, d_in] = sum over the terms t of dy_t . w_t^T (w_t: [d_in,
 * d_out_t]), one double sum per element: the input gradient of a sequence
 * that feeds several projections (self-attention's Q, K and V).  Sizes
 * already checked. */
attn_status attn__linear_backward_input(int terms, const float *const dy[], const float *const w[],
                                        const int64_t d_out[], int64_t rows, int64_t d_in, float *dx);

/* dw [d_in, d_out] = x^T . dy and db [d_out] = column sums of dy (either
 * NULL).  Sizes already checked. */
attn_status attn__linear_backward_params(const float *x, int64_t rows, int64_t d_in, int64_t d_out,
                                         const float *dy, float *dw, float *db);

#endif /* ATTN_API_LINEAR_H */
