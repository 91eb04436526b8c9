/*
 * test_linear.c — the projections (src/api/linear.c) on their fast path
 * (the BLAS, in a build with one) against the reference path (double sums,
 * $ATTN_KERNEL=ref) on odd sizes that cross the column blocks; the bits of
 * every product across thread counts 1, 2, 4 and 8.  In a build without a
 * BLAS both paths are the reference and the comparisons hold exactly.
 * (A row's bits may depend on the rows computed with it: src/api/linear.c.)
 *
 * Shape legend: x [rows, d_in]  w [d_in, d_out]  w_t [d_out, d_in]
 *               y, dy [rows, d_out]  dx [rows, d_in]  dw [d_in, d_out]
 */
#include "oracle.h"
#include "tolerances.h"

#include "api/linear.h"
#include "isa/isa.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The products under test, all of one shape, into outs[0..4]:
 * y = x.w + b, y_t = x.w_t^T + b, dx = dy.w^T, dw = x^T.dy, db. */
typedef struct {
    int64_t rows, d_in, d_out;
    float *x, *w, *w_t, *b, *dy;
} case_data;

enum { OUTPUTS = 5 };

static void run_all(const case_data *c, float *outs[OUTPUTS]) {
    if (attn_linear_forward(c->x, c->rows, c->d_in, c->w, c->b, c->d_out, outs[0]) ||
        attn_linear_forward_transposed(c->x, c->rows, c->d_in, c->w_t, c->b, c->d_out, outs[1]) ||
        attn_linear_backward(c->x, c->rows, c->d_in, c->w, c->d_out, c->dy, outs[2], outs[3], outs[4]))
        fail_msg("%lldx%lldx%lld: %s", (long long)c->rows, (long long)c->d_in, (long long)c->d_out, attn_last_error());
}

static int64_t output_size(const case_data *c, int i) {
    return i < 2 ? c->rows * c->d_out : i == 2 ? c->rows * c->d_in : i == 3 ? c->d_in * c->d_out : c->d_out;
}

static void make_case(case_data *c, test_rng *r, int64_t rows, int64_t d_in, int64_t d_out) {
    c->rows = rows, c->d_in = d_in, c->d_out = d_out;
    c->x = test_random_floats(r, rows * d_in, 1.0);
    c->w = test_random_floats(r, d_in * d_out, 1.0);
    c->w_t = malloc(sizeof(float) * (size_t)(d_in * d_out));
    for (int64_t i = 0; i < d_in; i++)
        for (int64_t o = 0; o < d_out; o++) c->w_t[o * d_in + i] = c->w[i * d_out + o];
    c->b = test_random_floats(r, d_out, 1.0);
    c->dy = test_random_floats(r, rows * d_out, 1.0);
}

static void free_case(case_data *c) { free(c->x), free(c->w), free(c->w_t), free(c->b), free(c->dy); }

static void alloc_outputs(const case_data *c, float *outs[OUTPUTS]) {
    for (int i = 0; i < OUTPUTS; i++) outs[i] = malloc(sizeof(float) * (size_t)output_size(c, i));
}

static void free_outputs(float *outs[OUTPUTS]) {
    for (int i = 0; i < OUTPUTS; i++) free(outs[i]);
}

/* Sum of |terms| of output element e of product i (bias included), and the
 * number of terms: what a float sum's rounding error is bounded by. */
static double abs_sum(const case_data *c, int i, int64_t e, int64_t *terms) {
    double s = 0.0;
    if (i < 2) {
        const int64_t r = e / c->d_out, o = e % c->d_out;
        s = fabs(c->b[o]);
        for (int64_t k = 0; k < c->d_in; k++) s += fabs((double)c->x[r * c->d_in + k] * c->w[k * c->d_out + o]);
        *terms = c->d_in + 1;
    } else if (i == 2) {
        const int64_t r = e / c->d_in, k = e % c->d_in;
        for (int64_t o = 0; o < c->d_out; o++) s += fabs((double)c->dy[r * c->d_out + o] * c->w[k * c->d_out + o]);
        *terms = c->d_out;
    } else {
        const int64_t k = i == 3 ? e / c->d_out : 0, o = i == 3 ? e % c->d_out : e;
        for (int64_t r = 0; r < c->rows; r++)
            s += fabs((double)(i == 3 ? c->x[r * c->d_in + k] : 1.0f) * c->dy[r * c->d_out + o]);
        *terms = c->rows;
    }
    return s;
}

/* The fast path against the reference, element by element: a float sum of
 * n terms is within gamma_n = n u / (1 - n u) of sum |terms| of the exact
 * sum (u = 2^-24, any order, with or without FMA), and the reference is
 * within half an ulp of it: |fast - ref| <= gamma_n sum|terms| + u |ref|.
 * LINEAR_BLAS_BOUND_FAIL scales that worst case (1: the bound itself). */
static void fast_against_reference(void **state) {
    (void)state;
    static const int64_t sizes[][3] = {
        {1, 1, 1}, {1, 40, 257}, {3, 17, 255}, {17, 113, 256}, {113, 40, 513}, {3, 1000, 80}, {40, 256, 1}, {1, 896, 300},
    };
    test_rng r;
    test_rng_seed(&r, 2026);
    const double u = ldexp(1.0, -24);
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        case_data c;
        make_case(&c, &r, sizes[s][0], sizes[s][1], sizes[s][2]);
        float *fast[OUTPUTS], *ref[OUTPUTS];
        alloc_outputs(&c, fast), alloc_outputs(&c, ref);
        run_all(&c, fast);
        assert_int_equal(attn__isa_force("ref"), ATTN_OK);
        run_all(&c, ref);
        assert_int_equal(attn__isa_force(NULL), ATTN_OK);
        double worst = 0.0; /* the largest |fast - ref| as a fraction of its bound */
        for (int i = 0; i < OUTPUTS; i++)
            for (int64_t e = 0; e < output_size(&c, i); e++) {
                int64_t n;
                const double sum = abs_sum(&c, i, e, &n), gamma = (double)n * u / (1.0 - (double)n * u);
                const double bound = gamma * sum + u * fabs(ref[i][e]), diff = fabs((double)fast[i][e] - ref[i][e]);
                if (diff > LINEAR_BLAS_BOUND_FAIL * bound)
                    fail_msg("%lldx%lldx%lld, output %d element %lld: fast %.9g, reference %.9g, bound %.3g",
                             (long long)c.rows, (long long)c.d_in, (long long)c.d_out, i, (long long)e,
                             (double)fast[i][e], (double)ref[i][e], bound);
                if (bound > 0 && diff / bound > worst) worst = diff / bound;
            }
        print_message("%lldx%lldx%lld: largest difference %.3f of the float-sum bound\n", (long long)c.rows,
                      (long long)c.d_in, (long long)c.d_out, worst);
        free_outputs(fast), free_outputs(ref), free_case(&c);
    }
}

/* Bits across thread counts: the fast path's column blocks are fixed by
 * the shapes, so 2, 4 and 8 threads (more than the machine has included)
 * give exactly what one gives.  Self-attention's three-term input gradient
 * too (the terms summed within a block). */
static void bits_across_thread_counts(void **state) {
    (void)state;
    static const int64_t sizes[][3] = {{512, 1024, 1024}, {7, 896, 4864}, {1, 640, 2048}, {33, 300, 1000}};
    test_rng r;
    test_rng_seed(&r, 11);
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        case_data c;
        make_case(&c, &r, sizes[s][0], sizes[s][1], sizes[s][2]);
        float *one[OUTPUTS], *many[OUTPUTS];
        alloc_outputs(&c, one), alloc_outputs(&c, many);
        const float *dys[3] = {c.dy, c.dy, c.dy}, *ws[3] = {c.w, c.w, c.w};
        const int64_t widths[3] = {c.d_out, c.d_out, c.d_out};
        float *dx3_one = malloc(sizeof(float) * (size_t)(c.rows * c.d_in));
        float *dx3 = malloc(sizeof(float) * (size_t)(c.rows * c.d_in));
        for (int threads = 1; threads <= 8; threads *= 2) {
            char value[8];
            snprintf(value, sizeof value, "%d", threads);
            setenv("ATTN_NUM_THREADS", value, 1);
            run_all(&c, threads == 1 ? one : many);
            assert_int_equal(attn__linear_backward_input(3, dys, ws, widths, c.rows, c.d_in, threads == 1 ? dx3_one : dx3),
                             ATTN_OK);
            if (threads == 1) continue;
            for (int i = 0; i < OUTPUTS; i++)
                if (memcmp(one[i], many[i], sizeof(float) * (size_t)output_size(&c, i)))
                    fail_msg("%lldx%lldx%lld, output %d: %d threads differ from 1", (long long)c.rows,
                             (long long)c.d_in, (long long)c.d_out, i, threads);
            if (memcmp(dx3_one, dx3, sizeof(float) * (size_t)(c.rows * c.d_in)))
                fail_msg("%lldx%lldx%lld, three-term dx: %d threads differ from 1", (long long)c.rows,
                         (long long)c.d_in, (long long)c.d_out, threads);
        }
        unsetenv("ATTN_NUM_THREADS");
        free(dx3_one), free(dx3);
        free_outputs(one), free_outputs(many), free_case(&c);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(fast_against_reference),
        cmocka_unit_test(bits_across_thread_counts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
