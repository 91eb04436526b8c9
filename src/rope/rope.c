/*
 * rope.c — RoPE in place, its gradient, and its cos/sin tables
 * (attn_rope.h; the frequency tables are rope_freqs.c's).
 *
 * Shape legend: x, dy [B, L, H, D]   positions [B, L] or NULL
 *               R rotary width, F = R / 2; pair f is (a, b) = (f, f + F)
 *               (NEOX) or (2f, 2f + 1) (GPT-J)
 *               c_f, s_f [F]: m cos(p w_f), m sin(p w_f) for one position p,
 *               shared by the H heads of its row
 *
 * forward:   y_a = x_a c - x_b s        y_b = x_b c + x_a s
 * so:        dx_a = dy_a c + dy_b s     dx_b = dy_b c - dy_a s
 *            (the transpose of the 2x2 block), which is the forward with s
 *            negated: one loop serves both directions.
 *
 * Everything is double between the load and the store (attn_rope.h says
 * why); each stored value is rounded once.  Rows (b, l) are independent and
 * each is computed by one thread in a fixed order, so the thread count
 * never changes a bit.
 */
#include "rope/rope.h"

#include "base/dtype.h"
#include "base/problem.h"
#include "base/threads.h"

#include <math.h>
#include <stdlib.h>

#ifdef ATTN_HAVE_OPENMP
#include <omp.h>
#endif

typedef enum rope_direction { ROPE_FORWARD = 1, ROPE_BACKWARD = -1 } rope_direction;

static inline double load_element(const void *row, attn_dtype dtype, int64_t i) {
    switch (dtype) {
    case ATTN_F16: return dtype_f16_to_f32(((const uint16_t *)row)[i]);
    case ATTN_BF16: return dtype_bf16_to_f32(((const uint16_t *)row)[i]);
    default: return ((const float *)row)[i];
    }
}

static inline void store_element(void *row, attn_dtype dtype, int64_t i, double v) {
    switch (dtype) {
    case ATTN_F16: ((uint16_t *)row)[i] = dtype_f64_to_f16(v); break;
    case ATTN_BF16: ((uint16_t *)row)[i] = dtype_f64_to_bf16(v); break;
    default: ((float *)row)[i] = (float)v; break;
    }
}

/* c_f = m cos(p w_f), s_f = sign m sin(p w_f).  The angle is formed in
 * double from the exact position (attn_rope.h: in float it would be off by
 * up to 0.03 rad at p = 10^6). */
static void position_table(int64_t position, const double *inv_freq, int64_t freqs, double m, double sign,
                           double *c, double *s) {
    for (int64_t f = 0; f < freqs; f++) {
        const double angle = (double)position * inv_freq[f];
        c[f] = m * cos(angle);
        s[f] = sign * m * sin(angle);
    }
}

/* Rotates the first 2F widths of one head's row in place; the rest is not
 * touched.  Always inlined into rotate_row_of, once per dtype, so that the
 * loads and stores are not a switch per element. */
static inline __attribute__((always_inline)) void rotate_row_as(void *row, attn_dtype dtype,
                                                                attn_rope_pairing pairing, int64_t freqs,
                                                                const double *c, const double *s) {
    const int64_t step = pairing == ATTN_ROPE_GPTJ ? 2 : 1, partner = pairing == ATTN_ROPE_GPTJ ? 1 : freqs;
    for (int64_t f = 0; f < freqs; f++) {
        const int64_t a = f * step, b = a + partner;
        const double xa = load_element(row, dtype, a), xb = load_element(row, dtype, b);
        store_element(row, dtype, a, xa * c[f] - xb * s[f]);
        store_element(row, dtype, b, xb * c[f] + xa * s[f]);
    }
}

static void rotate_row(void *row, attn_dtype dtype, attn_rope_pairing pairing, int64_t freqs, const double *c,
                       const double *s) {
    switch (dtype) {
    case ATTN_F16: rotate_row_as(row, ATTN_F16, pairing, freqs, c, s); break;
    case ATTN_BF16: rotate_row_as(row, ATTN_BF16, pairing, freqs, c, s); break;
    default: rotate_row_as(row, ATTN_F32, pairing, freqs, c, s); break;
    }
}

/* In place means every element must be its own: taken by increasing
 * stride, each dimension's stride must exceed the span of the narrower
 * ones (then no two indices share an address).  Size-1 dimensions do not
 * count. */
static attn_status check_disjoint(const attn_tensor *t, const char *name) {
    static const char *const dim_names[4] = {"batch", "positions", "heads", "width"};
    int order[4], n = 0;
    for (int d = 0; d < 4; d++)
        if (t->shape[d] > 1) order[n++] = d;
    for (int i = 1; i < n; i++) /* insertion sort by stride */
        for (int j = i; j > 0 && t->stride[order[j]] < t->stride[order[j - 1]]; j--) {
            const int tmp = order[j];
            order[j] = order[j - 1];
            order[j - 1] = tmp;
        }
    int64_t span = 0; /* the largest offset the dimensions so far reach */
    for (int i = 0; i < n; i++) {
        const int d = order[i];
        if (t->stride[d] <= span)
            return attn__fail(ATTN_ERR_SHAPE,
                              "%s: elements overlap in memory (the stride of %s, %lld, does not exceed the "
                              "%lld elements the narrower dimensions span): a rotation in place would "
                              "rotate shared elements more than once",
                              name, dim_names[d], (long long)t->stride[d], (long long)span);
        span += t->stride[d] * (t->shape[d] - 1); /* fits: attn__tensor_check bounded the largest offset */
    }
    return ATTN_OK;
}

/* Position offset + L - 1 must be an int64. */
static attn_status check_offset(int64_t position_offset, int64_t count, const char *what) {
    if (position_offset > 0 && position_offset > INT64_MAX - (count - 1))
        return attn__fail(ATTN_ERR_OVERFLOW, "position_offset %lld + %s - 1 = %lld - 1 overflows int64",
                          (long long)position_offset, what, (long long)count);
    return ATTN_OK;
}

/* per_freq doubles for each of freqs frequencies, or NULL (out of memory or
 * a size that overflows). */
static double *alloc_tables(int64_t freqs, uint64_t per_freq) {
    if ((uint64_t)freqs > SIZE_MAX / sizeof(double) / per_freq) return NULL;
    return malloc((size_t)freqs * (size_t)per_freq * sizeof(double));
}

static attn_status rope_run(attn_tensor *x, const int64_t *positions, int64_t position_offset,
                            const attn_rope_options *opt, rope_direction direction, const char *name) {
    attn_status st = attn__tensor_check(x, name, PROBLEM_WITH_DATA);
    if (st || (st = check_disjoint(x, name))) return st;
    rope_plan plan;
    if ((st = attn__rope_plan_init(&plan, x->shape[3], opt))) return st;
    const int64_t batch = x->shape[0], len = x->shape[1], heads = x->shape[2], freqs = plan.freqs;
    if (!positions && (st = check_offset(position_offset, len, "L"))) return st;

    /* Per row (b, l): F cos/sin pairs (~40 FLOP each) and 6 FLOP per pair per head. */
    const int64_t rows = batch * len; /* fits: attn__tensor_check bounded the element count */
    const double flops = (double)rows * (double)freqs * (40.0 + 6.0 * (double)heads);
    const int threads = attn__threads_for(plan.opt.threads, flops, (double)rows);
    /* inv_freq [F], then each thread's c and s [F]: allocated before x is touched. */
    double *tables = alloc_tables(freqs, 1 + 2 * (uint64_t)threads);
    if (!tables)
        return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "RoPE: no memory for the tables of %lld frequencies",
                          (long long)freqs);
    attn__rope_inv_freq(&plan, tables);

    const size_t element_bytes = attn_dtype_size(x->dtype);
    char *data = x->data;
    const double m = plan.attention_factor;
#ifdef ATTN_HAVE_OPENMP
#pragma omp parallel num_threads(threads) if (threads > 1)
#endif
    {
#ifdef ATTN_HAVE_OPENMP
        const int thread = omp_get_thread_num();
#else
        const int thread = 0;
#endif
        double *c = tables + freqs * (1 + 2 * (int64_t)thread), *s = c + freqs;
#ifdef ATTN_HAVE_OPENMP
#pragma omp for schedule(static)
#endif
        for (int64_t r = 0; r < rows; r++) {
            const int64_t b = r / len, l = r % len;
            position_table(positions ? positions[r] : position_offset + l, tables, freqs, m, (double)direction, c,
                           s);
            for (int64_t h = 0; h < heads; h++) {
                void *row = data + (size_t)(b * x->stride[0] + l * x->stride[1] + h * x->stride[2]) * element_bytes;
                rotate_row(row, x->dtype, plan.opt.pairing, freqs, c, s);
            }
        }
    }
    free(tables);
    return ATTN_OK;
}

attn_status attn_rope_apply(attn_tensor *x, const int64_t *positions, int64_t position_offset,
                            const attn_rope_options *opt) {
    return rope_run(x, positions, position_offset, opt, ROPE_FORWARD, "x");
}

attn_status attn_rope_backward(attn_tensor *dy, const int64_t *positions, int64_t position_offset,
                               const attn_rope_options *opt) {
    return rope_run(dy, positions, position_offset, opt, ROPE_BACKWARD, "dy");
}

attn_status attn_rope_frequencies(int64_t head_dim, const attn_rope_options *opt, double *inv_freq,
                                  double *attention_factor) {
    rope_plan plan;
    attn_status st = attn__rope_plan_init(&plan, head_dim, opt);
    if (st) return st;
    if (!inv_freq) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "inv_freq is NULL");
    attn__rope_inv_freq(&plan, inv_freq);
    if (attention_factor) *attention_factor = plan.attention_factor;
    return ATTN_OK;
}

attn_status attn_rope_cos_sin(int64_t head_dim, const int64_t *positions, int64_t count, int64_t position_offset,
                              const attn_rope_options *opt, float *cos_out, float *sin_out) {
    rope_plan plan;
    attn_status st = attn__rope_plan_init(&plan, head_dim, opt);
    if (st) return st;
    if (count <= 0) return attn__fail(ATTN_ERR_SHAPE, "count must be positive, got %lld", (long long)count);
    if (!cos_out || !sin_out)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "%s is NULL", cos_out ? "sin" : "cos");
    if (!positions && (st = check_offset(position_offset, count, "count"))) return st;
    int64_t elements;
    if (mul_overflows(count, plan.freqs, &elements))
        return attn__fail(ATTN_ERR_OVERFLOW, "count %lld x %lld frequencies overflows", (long long)count,
                          (long long)plan.freqs);
    const int64_t freqs = plan.freqs;
    double *tables = alloc_tables(freqs, 3); /* inv_freq, c, s */
    if (!tables)
        return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "RoPE: no memory for the tables of %lld frequencies",
                          (long long)freqs);
    double *c = tables + freqs, *s = c + freqs;
    attn__rope_inv_freq(&plan, tables);
    for (int64_t i = 0; i < count; i++) {
        position_table(positions ? positions[i] : position_offset + i, tables, freqs, plan.attention_factor, 1.0,
                       c, s);
        for (int64_t f = 0; f < freqs; f++) {
            cos_out[i * freqs + f] = (float)c[f];
            sin_out[i * freqs + f] = (float)s[f];
        }
    }
    free(tables);
    return ATTN_OK;
}
