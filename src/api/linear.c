/*
 * linear.c — the projections of the chapter's row convention, y = x.w + b,
 * and their gradients; and y = x.w_t^T + b for weights stored [d_out, d_in]
 * (PyTorch's and GGUF's layout: the decoder's projections).
 *
 * Shape legend: x [rows, d_in]  w [d_in, d_out]  w_t [d_out, d_in]
 *               b, db [d_out]  y, dy [rows, d_out]  dx [rows, d_in]
 *               dw [d_in, d_out]
 *
 * forward:      y[r, o] = b[o] + sum_i x[r, i] w[i, o]
 * so:           dx[r, i] = sum_o dy[r, o] w[i, o]
 *               dw[i, o] = sum_r x[r, i] dy[r, o]
 *               db[o]    = sum_r dy[r, o]
 *
 * Two paths, one switch apart ($ATTN_KERNEL=ref, or a build without a
 * BLAS, takes the reference):
 *   BLAS       sgemm (float sums, blocked, FMA) — docs/kernels.md,
 *              "Projections", has the benchmark that chose the library.
 *              The output's columns are cut into blocks of BLAS_COLUMNS, a
 *              constant; each block is one single-threaded sgemm call, and
 *              attn's threads share out the blocks.  Which thread computes a
 *              block never changes its bits, and the blocks do not depend on
 *              the thread count, so neither do the results — whatever the
 *              BLAS would do with its own threads (it is pinned to one).
 *              NOT promised: a row's bits whatever the rows around it.
 *              OpenBLAS sends a call with rows x columns x d_in <= 10^6 to
 *              its small-matrix kernels, which round differently from the
 *              packed ones, so one row alone (a decode step, the last
 *              position's logits) can differ in the last bits from the same
 *              row of a whole sequence (docs/kernels.md, "Projections").
 *   reference  every output element one sum in double, in a fixed order,
 *              computed by one thread: within float rounding of the exact
 *              product — the oracle the tests hold the BLAS path to.
 * Both start each output at its bias (the reference's first term; the
 * BLAS's C before it adds the product), so y = b exactly where x . w = 0.
 */
#include "api/linear.h"

#include "base/overlap.h"
#include "base/threads.h"
#include "isa/isa.h" /* attn__isa_forces_ref: $ATTN_KERNEL=ref */

#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#ifdef ATTN_HAVE_OPENMP
#include <omp.h>
#endif
#ifdef ATTN_HAVE_BLAS
#include <cblas.h>
#include <pthread.h>
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

/* True when the BLAS path takes a product of these sizes: a BLAS build,
 * $ATTN_KERNEL=ref not set, and every size within the BLAS's int. */
static bool blas_takes(int64_t a, int64_t b, int64_t c) {
#ifdef ATTN_HAVE_BLAS
    return a <= INT_MAX && b <= INT_MAX && c <= INT_MAX && !attn__isa_forces_ref();
#else
    (void)a, (void)b, (void)c;
    return false;
#endif
}

/* ------------------------------------------------------------------ BLAS */

#ifdef ATTN_HAVE_BLAS
/* Output columns per sgemm call.  A constant, never derived from the thread
 * count: the blocks fix the bits (see the top of the file).  Each call
 * packs x again, so wider is cheaper: one thread per CPU-second, 256
 * columns ran at 60-66% of the FMA peak, 512 at 64-72%, 1024 and a single
 * call at 61-75% (noisy host; bench/gemm_bench.c, GEMM_BENCH_COLUMNS).  512
 * keeps two blocks for d_out = 896 or 1024 (both threads busy) and ten for
 * the FFN's 4864; a one-row call (decode) with d_in under 1953 also stays
 * under OpenBLAS's small-matrix threshold (512 d_in <= 10^6), whose kernels
 * run it 2.7x faster than one call of all columns (1 x 896 x 4864). */
enum { BLAS_COLUMNS = 512 };

/* One term of C [m, n] = sum_t A_t . B_t, each op(A) [m, k], op(B) [k, n],
 * row-major, with op(A) = A^T when trans_a (A stored [k, m]) and op(B) =
 * B^T when trans_b (B stored [n, k]). */
typedef struct {
    bool trans_a, trans_b;
    int64_t k;
    const float *a;
    int64_t lda;
    const float *b;
    int64_t ldb;
} gemm_term;

/* OpenBLAS runs single-threaded: attn's threads share out the column
 * blocks.  Its thread count is process-wide state, set once (a program that
 * also calls OpenBLAS finds it on one thread).  Debian's OpenMP build would
 * stay on one thread inside attn's parallel regions by itself, but not when
 * attn runs a call on one thread, outside any region; its pthread build
 * never would. */
static pthread_once_t blas_pinned = PTHREAD_ONCE_INIT;
static void blas_pin_one_thread(void) { openblas_set_num_threads(1); }

/* C [m, n] (row stride ldc) = bias (each row; NULL: 0) + sum of the terms,
 * block by block of BLAS_COLUMNS output columns, each block's terms in
 * order on one thread.  flops: the work, for the thread policy. */
static void blas_columns(const gemm_term *terms, int count, int64_t m, int64_t n, const float *bias, float *c,
                         int64_t ldc, double flops) {
    pthread_once(&blas_pinned, blas_pin_one_thread);
    const int64_t blocks = (n + BLAS_COLUMNS - 1) / BLAS_COLUMNS;
    const int threads = attn__threads_for(0, flops, (double)blocks);
#ifdef ATTN_HAVE_OPENMP
    /* Dynamic: on a shared host a preempted thread then holds up only its
     * own block, not a fixed share of them (which thread runs a block
     * changes no bit). */
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads) if (threads > 1)
#else
    (void)threads;
#endif
    for (int64_t j = 0; j < blocks; j++) {
        const int64_t o = j * BLAS_COLUMNS, width = n - o < BLAS_COLUMNS ? n - o : BLAS_COLUMNS;
        float *c_o = c + o;
        /* beta = 0: the BLAS must not read C, which may hold anything. */
        float beta = 0.0f;
        if (bias) {
            for (int64_t r = 0; r < m; r++) memcpy(c_o + r * ldc, bias + o, (size_t)width * sizeof(float));
            beta = 1.0f;
        }
        for (int t = 0; t < count; t++, beta = 1.0f) {
            const gemm_term *g = &terms[t];
            const float *b_o = g->trans_b ? g->b + o * g->ldb : g->b + o;
            cblas_sgemm(CblasRowMajor, g->trans_a ? CblasTrans : CblasNoTrans, g->trans_b ? CblasTrans : CblasNoTrans,
                        (int)m, (int)width, (int)g->k, 1.0f, g->a, (int)g->lda, b_o, (int)g->ldb, beta, c_o,
                        (int)ldc);
        }
    }
}
#endif

/* -------------------------------------------------------------- reference */

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

/* y[r, o] = b[o] + sum_i x[r, i] w_t[o, i]: the weights' layout of
 * attn_linear_forward_transposed, one double dot product per element. */
static void forward_transposed_row(const void *ctx, int64_t r, double *acc) {
    (void)acc;
    const forward_args *a = ctx;
    const float *x_r = a->x + r * a->d_in;
    float *y_r = a->y + r * a->d_out;
    for (int64_t o = 0; o < a->d_out; o++) {
        const float *w_o = a->w + o * a->d_in;
        double sum = a->b ? (double)a->b[o] : 0.0;
        for (int64_t i = 0; i < a->d_in; i++) sum += (double)x_r[i] * (double)w_o[i];
        y_r[o] = (float)sum;
    }
}

/* Both layouts' forward: w [d_in, d_out], or w_t [d_out, d_in] when
 * transposed. */
static attn_status linear_forward(const char *fn, bool transposed, const float *x, int64_t rows, int64_t d_in,
                                  const float *w, const float *b, int64_t d_out, float *y) {
    if (!x || !w || !y)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn, !x ? "x" : !w ? "w" : "y");
    attn_status status = attn__linear_check_sizes(fn, rows, d_in, d_out);
    if (status) return status;
    const int64_t f = (int64_t)sizeof(float);
    const mem_extent inputs[3] = {extent_of_array("x", x, rows * d_in, f),
                                  extent_of_array(transposed ? "w_t" : "w", w, d_in * d_out, f),
                                  extent_of_array("b", b, d_out, f)};
    const mem_extent output = extent_of_array("y", y, rows * d_out, f);
    if ((status = overlap_check(fn, &output, 1, inputs, 3))) return status;
    const double flops = 2.0 * (double)rows * (double)d_in * (double)d_out;
#ifdef ATTN_HAVE_BLAS
    if (blas_takes(rows, d_in, d_out)) {
        const gemm_term term = {false, transposed, d_in, x, d_in, w, transposed ? d_in : d_out};
        blas_columns(&term, 1, rows, d_out, b, y, d_out, flops);
        return ATTN_OK;
    }
#endif
    const forward_args a = {x, w, b, d_in, d_out, y};
    return for_each_row(rows, transposed ? 1 : d_out, flops, transposed ? forward_transposed_row : forward_row, &a,
                        fn);
}

attn_status attn_linear_forward(const float *x, int64_t rows, int64_t d_in, const float *w,
                                const float *b, int64_t d_out, float *y) {
    return linear_forward("attn_linear_forward", false, x, rows, d_in, w, b, d_out, y);
}

attn_status attn_linear_forward_transposed(const float *x, int64_t rows, int64_t d_in, const float *w_t,
                                           const float *b, int64_t d_out, float *y) {
    return linear_forward("attn_linear_forward_transposed", true, x, rows, d_in, w_t, b, d_out, y);
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
    bool blas = blas_takes(rows, d_in, 0);
    for (int t = 0; t < terms; t++) {
        flops += 2.0 * (double)rows * (double)d_in * (double)d_out[t];
        blas = blas && d_out[t] <= INT_MAX;
    }
#ifdef ATTN_HAVE_BLAS
    /* dx = sum_t dy_t . w_t^T: w_t [d_in, d_out_t] read as B^T, the terms
     * summed in order within each column block. */
    enum { MOST_TERMS = 3 };
    if (blas && terms <= MOST_TERMS) {
        gemm_term g[MOST_TERMS];
        for (int t = 0; t < terms; t++) g[t] = (gemm_term){false, true, d_out[t], dy[t], d_out[t], w[t], d_out[t]};
        blas_columns(g, terms, rows, d_in, NULL, dx, d_in, flops);
        return ATTN_OK;
    }
#else
    (void)blas;
#endif
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
    const double flops = 2.0 * (double)rows * (double)d_in * (double)d_out;
#ifdef ATTN_HAVE_BLAS
    /* dw = x^T . dy: x [rows, d_in] read as A^T. */
    if (dw && blas_takes(rows, d_in, d_out)) {
        const gemm_term term = {true, false, rows, x, d_in, dy, d_out};
        blas_columns(&term, 1, d_in, d_out, NULL, dw, d_out, flops);
        dw = NULL;
    }
#endif
    if (dw) {
        const params_args a = {x, dy, rows, d_in, d_out, dw};
        if ((status = for_each_row(d_in, d_out, flops, weight_row, &a, "linear backward")))
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
    const int64_t f = (int64_t)sizeof(float);
    const mem_extent inputs[3] = {extent_of_array("x", x, rows * d_in, f), extent_of_array("w", w, d_in * d_out, f),
                                  extent_of_array("dy", dy, rows * d_out, f)};
    const mem_extent outputs[3] = {extent_of_array("dx", dx, rows * d_in, f),
                                   extent_of_array("dw", dw, d_in * d_out, f), extent_of_array("db", db, d_out, f)};
    if ((st = overlap_check("attn_linear_backward", outputs, 3, inputs, 3))) return st;
    if (dx && (st = attn__linear_backward_input(1, &dy, &w, &d_out, rows, d_in, dx))) return st;
    return attn__linear_backward_params(x, rows, d_in, d_out, dy, dw, db);
}
