/*
 * linear_backward.c — the gradients of the projections y = x.w + b.
 *
 * Shape legend: x [rows, d_in]  w [d_in, d_out]  b, db [d_out]
 *               dy [rows, d_out]  dx [rows, d_in]  dw [d_in, d_out]
 *
 * forward was: y[r, o] = b[o] + sum_i x[r, i] w[i, o]
 * so:          dx[r, i] = sum_o dy[r, o] w[i, o]
 *              dw[i, o] = sum_r x[r, i] dy[r, o]
 *              db[o]    = sum_r dy[r, o]
 *
 * Every output element is one sum in double, in a fixed order, computed by
 * one thread: the results do not depend on the thread count.
 */
#include "core/internal.h"

#include <stdlib.h>
#include <string.h>

attn_status attn_linear_backward_input(int terms, const float *const dy[], const float *const w[],
                                       const int64_t d_out[], int64_t rows, int64_t d_in,
                                       float *dx) {
    attn_status status = ATTN_OK;
#ifdef ATTN_HAVE_OPENMP
#pragma omp parallel if (rows * d_in * d_out[0] > (1 << 16)) num_threads(attn_resolve_threads(0))
#endif
    {
        double *acc = malloc((size_t)d_in * sizeof(double));
        if (!acc) {
#ifdef ATTN_HAVE_OPENMP
#pragma omp atomic write
#endif
            status = ATTN_ERR_OUT_OF_MEMORY;
        }
#ifdef ATTN_HAVE_OPENMP
#pragma omp for schedule(static)
#endif
        for (int64_t r = 0; r < rows; r++) {
            if (!acc) continue;
            for (int64_t i = 0; i < d_in; i++) acc[i] = 0.0;
            for (int t = 0; t < terms; t++) {
                const float *dy_r = dy[t] + r * d_out[t];
                for (int64_t i = 0; i < d_in; i++) {
                    const float *w_i = w[t] + i * d_out[t];
                    double sum = 0.0;
                    for (int64_t o = 0; o < d_out[t]; o++) sum += (double)dy_r[o] * (double)w_i[o];
                    acc[i] += sum;
                }
            }
            float *dx_r = dx + r * d_in;
            for (int64_t i = 0; i < d_in; i++) dx_r[i] = (float)acc[i];
        }
        free(acc);
    }
    if (status != ATTN_OK)
        return attn_fail(status, "linear backward: cannot allocate %lld doubles", (long long)d_in);
    return ATTN_OK;
}

attn_status attn_linear_backward_params(const float *x, int64_t rows, int64_t d_in,
                                        int64_t d_out, const float *dy, float *dw, float *db) {
    attn_status status = ATTN_OK;
    if (dw) {
#ifdef ATTN_HAVE_OPENMP
#pragma omp parallel if (rows * d_in * d_out > (1 << 16)) num_threads(attn_resolve_threads(0))
#endif
        {
            double *acc = malloc((size_t)d_out * sizeof(double));
            if (!acc) {
#ifdef ATTN_HAVE_OPENMP
#pragma omp atomic write
#endif
                status = ATTN_ERR_OUT_OF_MEMORY;
            }
#ifdef ATTN_HAVE_OPENMP
#pragma omp for schedule(static)
#endif
            for (int64_t i = 0; i < d_in; i++) {
                if (!acc) continue;
                for (int64_t o = 0; o < d_out; o++) acc[o] = 0.0;
                for (int64_t r = 0; r < rows; r++) {
                    const double x_ri = x[r * d_in + i];
                    const float *dy_r = dy + r * d_out;
                    for (int64_t o = 0; o < d_out; o++) acc[o] += x_ri * (double)dy_r[o];
                }
                float *dw_i = dw + i * d_out;
                for (int64_t o = 0; o < d_out; o++) dw_i[o] = (float)acc[o];
            }
            free(acc);
        }
        if (status != ATTN_OK)
            return attn_fail(status, "linear backward: cannot allocate %lld doubles", (long long)d_out);
    }
    if (db) {
        double *acc = calloc((size_t)d_out, sizeof(double));
        if (!acc)
            return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "linear backward: cannot allocate %lld doubles",
                             (long long)d_out);
        for (int64_t r = 0; r < rows; r++)
            for (int64_t o = 0; o < d_out; o++) acc[o] += (double)dy[r * d_out + o];
        for (int64_t o = 0; o < d_out; o++) db[o] = (float)acc[o];
        free(acc);
    }
    return ATTN_OK;
}

attn_status attn_linear_backward(const float *x, int64_t rows, int64_t d_in, const float *w,
                                 int64_t d_out, const float *dy, float *dx, float *dw,
                                 float *db) {
    attn_status st;
    if (!dy) return attn_fail(ATTN_ERR_INVALID_ARGUMENT, "attn_linear_backward: dy is NULL");
    if (dx && !w)
        return attn_fail(ATTN_ERR_INVALID_ARGUMENT, "attn_linear_backward: dx needs w, which is NULL");
    if (dw && !x)
        return attn_fail(ATTN_ERR_INVALID_ARGUMENT, "attn_linear_backward: dw needs x, which is NULL");
    if ((st = attn_linear_check_sizes("attn_linear_backward", rows, d_in, d_out))) return st;
    if (dx && (st = attn_linear_backward_input(1, &dy, &w, &d_out, rows, d_in, dx))) return st;
    return attn_linear_backward_params(x, rows, d_in, d_out, dy, dw, db);
}
