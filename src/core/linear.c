/*
 * linear.c — the projections of the chapter's row convention, y = x.w + b.
 *
 * Shape legend: x [rows, d_in]  w [d_in, d_out]  b [d_out]  y [rows, d_out]
 *
 * Accumulates in double, one output row at a time, so the result does not
 * depend on how rows are split across threads (determinism) and stays
 * within float rounding of the exact product (the oracle tests rely on it).
 */
#include "core/internal.h"

#include <stdlib.h>

attn_status attn_linear_check_sizes(const char *fn, int64_t rows, int64_t d_in, int64_t d_out) {
    if (rows <= 0 || d_in <= 0 || d_out <= 0)
        return attn_fail(ATTN_ERR_SHAPE, "%s: sizes must be positive (rows %lld, d_in %lld, d_out %lld)",
                         fn, (long long)rows, (long long)d_in, (long long)d_out);
    int64_t n;
    if (attn_mul_overflows(rows, d_in, &n) || attn_mul_overflows(rows, d_out, &n) ||
        attn_mul_overflows(d_in, d_out, &n) || d_out > INT64_MAX / (int64_t)sizeof(double) ||
        d_in > INT64_MAX / (int64_t)sizeof(double))
        return attn_fail(ATTN_ERR_OVERFLOW, "%s: sizes overflow", fn);
    return ATTN_OK;
}

attn_status attn_linear_forward(const float *x, int64_t rows, int64_t d_in, const float *w,
                                const float *b, int64_t d_out, float *y) {
    if (!x || !w || !y)
        return attn_fail(ATTN_ERR_INVALID_ARGUMENT, "attn_linear_forward: %s is NULL",
                         !x ? "x" : !w ? "w" : "y");
    attn_status status = attn_linear_check_sizes("attn_linear_forward", rows, d_in, d_out);
    if (status) return status;
#ifdef ATTN_HAVE_OPENMP
#pragma omp parallel if (rows * d_in * d_out > (1 << 16)) num_threads(attn_resolve_threads(0))
#endif
    {
        /* One accumulator row per thread, allocated once, outside the loops. */
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
        for (int64_t r = 0; r < rows; r++) {
            if (!acc) continue;
            const float *x_r = x + r * d_in;
            for (int64_t o = 0; o < d_out; o++) acc[o] = b ? (double)b[o] : 0.0;
            for (int64_t i = 0; i < d_in; i++) {
                const double x_ri = x_r[i];
                const float *w_i = w + i * d_out;
                for (int64_t o = 0; o < d_out; o++) acc[o] += x_ri * (double)w_i[o];
            }
            float *y_r = y + r * d_out;
            for (int64_t o = 0; o < d_out; o++) y_r[o] = (float)acc[o];
        }
        free(acc);
    }
    if (status != ATTN_OK)
        return attn_fail(status, "attn_linear_forward: cannot allocate %lld doubles", (long long)d_out);
    return ATTN_OK;
}
