/*
 * linear.c — the projections of the chapter's row convention, y = x.w + b,
 * and their gradients.
 *
 * Shape legend: x [rows, d_in]  w [d_in, d_out]  b, db [d_out]
 *               y, dy [rows, d_out]  dx [rows, d_in]  dw [d_in, d_out]
 *
 * forward:      y[r, o] = b[o] + sum_i x[r, i] w[i, o]
 * so:           dx[r, i] = sum_o dy[r, o] w[i, o]
 *               dw[i, o] = sum_r x[r, i] dy[r, o]
 *               db[o]    = sum_r dy[r, o]
 *
 * Every output element is one sum in double, in a fixed order, computed by
 * one thread: the results do not depend on the thread count (determinism)
 * and stay within float rounding of the exact product (the oracle tests
 * rely on it).
 */
#include "api/linear.h"

#include "base/threads.h"

#include <stdlib.h>
#include <string.h>

#ifdef ATTN_HAVE_OPENMP
#include <omp.h>
#endif

attn_status attn__linear_check_sizes(const char *fn, int64_t rows, int64_t d_in, int64_t d_out) {
    if (rows <= 0 || d_in <= 0 || d_out <= 0)
        return attn__fail(ATTN_ERR_SHAPE, "%s: sizes must be positive (rows %lld, d_in %lld, d_out %lld)",
                          fn, (long long)rows, (long long)d_in, (long long)d_out);
    int64_t n;
    if (mul_overflows(rows, d_in, &n) || mul_overflows(rows, d_out, &n) ||
        mul_overflows(d_in, d_out, &n) || d_out > INT64_MAX / (int64_t)sizeof(double) ||
        d_in > INT64_MAX / (int64_t)sizeof(double))
        return attn__fail(ATTN_ERR_OVERFLOW, "%s: sizes overflow", fn);
    return ATTN_OK;
}

/* One output row of a projection or gradient, computed into acc (width
 * doubles of scratch) and stored by the row function itself. */
typedef void (*row_fn)(const void *ctx, int64_t r, double *acc);

/* Runs row(ctx, r, acc) for every r in [0, rows), spread over threads by
 * the library's parallel policy (flops of work in all), each thread with
 * its own accumulator row of width doubles, allocated once. */
static attn_status for_each_row(int64_t rows, int64_t width, double flops, row_fn row, const void *ctx,
                                const char *fn) {
    attn_status status = ATTN_OK;
    const int threads = attn__threads_for(0, flops, (double)rows);
#ifdef ATTN_HAVE_OPENMP
#pragma omp parallel num_threads(threads) if (threads > 1)
#else
    (void)threads;
#endif
    {
        double *acc = malloc((size_t)width * sizeof(double));
        if (!acc) {
#ifdef ATTN_HAVE_OPENMP
#pragma omp atomic write
#endif
            status = ATTN_ERR_OUT_OF_MEMORY;
        }
#ifdef ATTN_HAVE_OPENMP
#pragma omp for schedule(static)
#endif
        for (int64_t r = 0; r < rows; r++)
            if (acc) row(ctx, r, acc);
        free(acc);
    }
    if (status != ATTN_OK)
        return attn__fail(status, "%s: cannot allocate %lld doubles", fn, (long long)width);
    return ATTN_OK;
}

/* ---------------------------------------------------------------- forward */

typedef struct {
    const float *x, *w, *b;
    int64_t d_in, d_out;
    float *y;
} forward_args;

static void forward_row(const void *ctx, int64_t r, double *acc) {
    const forward_args *a = ctx;
    const float *x_r = a->x + r * a->d_in;
    for (int64_t o = 0; o < a->d_out; o++) acc[o] = a->b ? (double)a->b[o] : 0.0;
    for (int64_t i = 0; i < a->d_in; i++) {
        const double x_ri = x_r[i];
        const float *w_i = a->w + i * a->d_out;
        for (int64_t o = 0; o < a->d_out; o++) acc[o] += x_ri * (double)w_i[o];
    }
    float *y_r = a->y + r * a->d_out;
    for (int64_t o = 0; o < a->d_out; o++) y_r[o] = (float)acc[o];
}

attn_status attn_linear_forward(const float *x, int64_t rows, int64_t d_in, const float *w,
                                const float *b, int64_t d_out, float *y) {
    if (!x || !w || !y)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_linear_forward: %s is NULL",
                          !x ? "x" : !w ? "w" : "y");
    attn_status status = attn__linear_check_sizes("attn_linear_forward", rows, d_in, d_out);
    if (status) return status;
    const forward_args a = {x, w, b, d_in, d_out, y};
    return for_each_row(rows, d_out, 2.0 * (double)rows * (double)d_in * (double)d_out, forward_row,
                        &a, "attn_linear_forward");
}

/* --------------------------------------------------------------- backward */

typedef struct {
    int terms;
    const float *const *dy, *const *w;
    const int64_t *d_out;
    int64_t d_in;
    float *dx;
} input_args;

/* dx[r, :] = sum_t dy_t[r, :] . w_t^T, one double sum per element. */
static void input_row(const void *ctx, int64_t r, double *acc) {
    const input_args *a = ctx;
    for (int64_t i = 0; i < a->d_in; i++) acc[i] = 0.0;
    for (int t = 0; t < a->terms; t++) {
        const float *dy_r = a->dy[t] + r * a->d_out[t];
        for (int64_t i = 0; i < a->d_in; i++) {
            const float *w_i = a->w[t] + i * a->d_out[t];
            double sum = 0.0;
            for (int64_t o = 0; o < a->d_out[t]; o++) sum += (double)dy_r[o] * (double)w_i[o];
            acc[i] += sum;
        }
    }
    float *dx_r = a->dx + r * a->d_in;
    for (int64_t i = 0; i < a->d_in; i++) dx_r[i] = (float)acc[i];
}

attn_status attn__linear_backward_input(int terms, const float *const dy[], const float *const w[],
                                        const int64_t d_out[], int64_t rows, int64_t d_in, float *dx) {
    double flops = 0.0;
    for (int t = 0; t < terms; t++) flops += 2.0 * (double)rows * (double)d_in * (double)d_out[t];
    const input_args a = {terms, dy, w, d_out, d_in, dx};
    return for_each_row(rows, d_in, flops, input_row, &a, "linear backward");
}

typedef struct {
    const float *x, *dy;
    int64_t rows, d_in, d_out;
    float *dw;
} params_args;

/* dw[i, :] = sum_r x[r, i] dy[r, :]: row i of dw. */
static void weight_row(const void *ctx, int64_t i, double *acc) {
    const params_args *a = ctx;
    for (int64_t o = 0; o < a->d_out; o++) acc[o] = 0.0;
    for (int64_t r = 0; r < a->rows; r++) {
        const double x_ri = a->x[r * a->d_in + i];
        const float *dy_r = a->dy + r * a->d_out;
        for (int64_t o = 0; o < a->d_out; o++) acc[o] += x_ri * (double)dy_r[o];
    }
    float *dw_i = a->dw + i * a->d_out;
    for (int64_t o = 0; o < a->d_out; o++) dw_i[o] = (float)acc[o];
}

attn_status attn__linear_backward_params(const float *x, int64_t rows, int64_t d_in, int64_t d_out,
                                         const float *dy, float *dw, float *db) {
    attn_status status;
    if (dw) {
        const params_args a = {x, dy, rows, d_in, d_out, dw};
        if ((status = for_each_row(d_in, d_out, 2.0 * (double)rows * (double)d_in * (double)d_out,
                                   weight_row, &a, "linear backward")))
            return status;
    }
    if (db) {
        double *acc = calloc((size_t)d_out, sizeof(double));
        if (!acc)
            return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "linear backward: cannot allocate %lld doubles",
                              (long long)d_out);
        for (int64_t r = 0; r < rows; r++)
            for (int64_t o = 0; o < d_out; o++) acc[o] += (double)dy[r * d_out + o];
        for (int64_t o = 0; o < d_out; o++) db[o] = (float)acc[o];
        free(acc);
    }
    return ATTN_OK;
}

attn_status attn_linear_backward(const float *x, int64_t rows, int64_t d_in, const float *w,
                                 int64_t d_out, const float *dy, float *dx, float *dw, float *db) {
    attn_status st;
    if (!dy) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_linear_backward: dy is NULL");
    if (dx && !w)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_linear_backward: dx needs w, which is NULL");
    if (dw && !x)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_linear_backward: dw needs x, which is NULL");
    if ((st = attn__linear_check_sizes("attn_linear_backward", rows, d_in, d_out))) return st;
    if (dx && (st = attn__linear_backward_input(1, &dy, &w, &d_out, rows, d_in, dx))) return st;
    return attn__linear_backward_params(x, rows, d_in, d_out, dy, dw, db);
}
