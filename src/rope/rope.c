/*
 * rope.c — RoPE in place, its gradient, its cos/sin tables, and the
 * tables per sequence (attn_rope_table) that decoders build once and read
 * in every layer (attn_rope.h; the frequency tables are rope_freqs.c's).
 *
 * position_table below is the one definition of the angles: the per-call
 * path, attn_rope_cos_sin and attn_rope_table_reserve all call it, so a
 * table's rotation is the per-call rotation bit for bit.
 *
 * Shape legend: x, dy [B, L, H, D]   positions [B, L] or NULL
 *               R rotary width, F = R / 2; pair f is (a, b) = (f, f + F)
 *               (NEOX) or (2f, 2f + 1) (GPT-J)
 *               c_f, s_f [F]: m cos(p w_f), m sin(p w_f) for one position p,
 *               shared by the H heads of its row
 *               table [n, 2, F]: c_f then s_f of each position in [0, n)
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

/* attn_rope_table (attn_rope.h): position p's c_f, s_f at cs + p * 2F,
 * exactly what position_table writes for p in the forward direction. */
struct attn_rope_table {
    rope_plan plan;
    double *inv_freq;   /* [F]                                           */
    double *cs;         /* [capacity, 2, F]: rows [0, positions) filled  */
    int64_t positions;  /* covered: [0, positions)                       */
    int64_t capacity;   /* rows allocated                                */
};

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

/* Rotates every row of x (checked, disjoint) with the plan's pairing:
 * row (b, l) at position p = positions ? positions[b * L + l] : offset + l.
 * Its c_f, s_f come from table (position p's row) when there is one, else
 * from position_table into each thread's scratch [threads, 2F] with the
 * sign of direction.  One loop for both sources, so that they cannot
 * drift apart. */
static void rotate_rows(attn_tensor *x, const int64_t *positions, int64_t position_offset, const rope_plan *plan,
                        const double *inv_freq, const attn_rope_table *table, rope_direction direction,
                        int threads, double *scratch) {
    const int64_t len = x->shape[1], heads = x->shape[2], freqs = plan->freqs;
    const int64_t rows = x->shape[0] * len; /* fits: attn__tensor_check bounded the element count */
    const size_t element_bytes = attn_dtype_size(x->dtype);
    char *data = x->data;
#ifdef ATTN_HAVE_OPENMP
#pragma omp parallel num_threads(threads) if (threads > 1)
#endif
    {
#ifdef ATTN_HAVE_OPENMP
        const int thread = omp_get_thread_num();
#else
        const int thread = 0;
#endif
        double *own_c = scratch ? scratch + 2 * freqs * (int64_t)thread : NULL;
#ifdef ATTN_HAVE_OPENMP
#pragma omp for schedule(static)
#endif
        for (int64_t r = 0; r < rows; r++) {
            const int64_t b = r / len, l = r % len, p = positions ? positions[r] : position_offset + l;
            const double *c = own_c;
            if (table) c = table->cs + p * 2 * freqs;
            else position_table(p, inv_freq, freqs, plan->attention_factor, (double)direction, own_c, own_c + freqs);
            const double *s = c + freqs;
            for (int64_t h = 0; h < heads; h++) {
                void *row = data + (size_t)(b * x->stride[0] + l * x->stride[1] + h * x->stride[2]) * element_bytes;
                rotate_row(row, x->dtype, plan->opt.pairing, freqs, c, s);
            }
        }
    }
#ifndef ATTN_HAVE_OPENMP
    (void)threads;
#endif
}

/* The threads for rows rows of heads heads: per row, F cos/sin pairs
 * (~40 FLOP each) unless a table holds them, and 6 FLOP per pair per head. */
static int rope_threads(const rope_plan *plan, int64_t rows, int64_t heads, int tabled) {
    const double flops = (double)rows * (double)plan->freqs * ((tabled ? 0.0 : 40.0) + 6.0 * (double)heads);
    return attn__threads_for(plan->opt.threads, flops, (double)rows);
}

static attn_status rope_run(attn_tensor *x, const int64_t *positions, int64_t position_offset,
                            const attn_rope_options *opt, rope_direction direction, const char *name) {
    attn_status st = attn__tensor_check(x, name, PROBLEM_WITH_DATA);
    if (st || (st = check_disjoint(x, name))) return st;
    rope_plan plan;
    if ((st = attn__rope_plan_init(&plan, x->shape[3], opt))) return st;
    const int64_t freqs = plan.freqs;
    if (!positions && (st = check_offset(position_offset, x->shape[1], "L"))) return st;
    const int threads = rope_threads(&plan, x->shape[0] * x->shape[1], x->shape[2], 0);
    /* inv_freq [F], then each thread's c and s [F]: allocated before x is touched. */
    double *tables = alloc_tables(freqs, 1 + 2 * (uint64_t)threads);
    if (!tables)
        return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "RoPE: no memory for the tables of %lld frequencies",
                          (long long)freqs);
    attn__rope_inv_freq(&plan, tables);
    rotate_rows(x, positions, position_offset, &plan, tables, NULL, direction, threads, tables + freqs);
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

/* ------------------------------------------------ tables per sequence */

attn_status attn_rope_table_new(int64_t head_dim, const attn_rope_options *opt, attn_rope_table **out) {
    if (!out) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_rope_table_new: out is NULL");
    *out = NULL;
    rope_plan plan;
    attn_status st = attn__rope_plan_init(&plan, head_dim, opt);
    if (st) return st;
    attn_rope_table *t = calloc(1, sizeof *t);
    double *inv_freq = alloc_tables(plan.freqs, 1);
    if (!t || !inv_freq) {
        free(t);
        free(inv_freq);
        return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "attn_rope_table_new: no memory for a table of %lld frequencies",
                          (long long)plan.freqs);
    }
    t->plan = plan;
    /* The plan's copy of a caller's inv_freq table must not point at the
     * caller's memory once the table outlives the call: the table's own
     * copy serves as the frequencies from here on. */
    attn__rope_inv_freq(&plan, inv_freq);
    t->plan.opt.inv_freq = NULL;
    t->inv_freq = inv_freq;
    *out = t;
    return ATTN_OK;
}

void attn_rope_table_free(attn_rope_table *t) {
    if (!t) return;
    free(t->inv_freq);
    free(t->cs);
    free(t);
}

attn_status attn_rope_table_reserve(attn_rope_table *t, int64_t n) {
    if (!t) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_rope_table_reserve: the table is NULL");
    if (n < 0)
        return attn__fail(ATTN_ERR_SHAPE, "attn_rope_table_reserve: %lld positions: must be >= 0", (long long)n);
    if (n <= t->positions) return ATTN_OK;
    const int64_t freqs = t->plan.freqs;
    if (n > t->capacity) {
        /* Doubling, so that a decode appending one position a step
         * reallocates O(log n) times; exactly n when the doubled size
         * does not fit size_t or cannot be allocated. */
        int64_t capacity = t->capacity < 16 ? 16 : t->capacity;
        while (capacity < n && capacity <= INT64_MAX / 2) capacity *= 2;
        if (capacity < n) capacity = n;
        const uint64_t most_rows = SIZE_MAX / sizeof(double) / 2 / (uint64_t)freqs;
        if ((uint64_t)n > most_rows)
            return attn__fail(ATTN_ERR_OVERFLOW, "attn_rope_table_reserve: %lld positions of %lld frequencies overflow",
                              (long long)n, (long long)freqs);
        if ((uint64_t)capacity > most_rows) capacity = n;
        double *cs = realloc(t->cs, (size_t)capacity * 2 * (size_t)freqs * sizeof(double));
        if (!cs && capacity > n) cs = realloc(t->cs, (size_t)(capacity = n) * 2 * (size_t)freqs * sizeof(double));
        if (!cs)
            return attn__fail(ATTN_ERR_OUT_OF_MEMORY,
                              "attn_rope_table_reserve: no memory for %lld positions of %lld frequencies",
                              (long long)capacity, (long long)freqs);
        t->cs = cs;
        t->capacity = capacity;
    }
    for (int64_t p = t->positions; p < n; p++) {
        double *c = t->cs + p * 2 * freqs;
        position_table(p, t->inv_freq, freqs, t->plan.attention_factor, (double)ROPE_FORWARD, c, c + freqs);
    }
    t->positions = n;
    return ATTN_OK;
}

int64_t attn_rope_table_positions(const attn_rope_table *t) { return t ? t->positions : 0; }

attn_status attn_rope_table_row(const attn_rope_table *t, int64_t position, const double **cos_out,
                                const double **sin_out) {
    if (!t || !cos_out || !sin_out)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_rope_table_row: %s is NULL",
                          !t ? "the table" : !cos_out ? "cos" : "sin");
    if (position < 0 || position >= t->positions)
        return attn__fail(ATTN_ERR_SHAPE, "attn_rope_table_row: position %lld is outside the table's [0, %lld)",
                          (long long)position, (long long)t->positions);
    *cos_out = t->cs + position * 2 * t->plan.freqs;
    *sin_out = *cos_out + t->plan.freqs;
    return ATTN_OK;
}

attn_status attn_rope_apply_table(attn_tensor *x, const int64_t *positions, int64_t position_offset,
                                  const attn_rope_table *t) {
    if (!t) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_rope_apply_table: the table is NULL");
    attn_status st = attn__tensor_check(x, "x", PROBLEM_WITH_DATA);
    if (st || (st = check_disjoint(x, "x"))) return st;
    if (x->shape[3] != t->plan.dim)
        return attn__fail(ATTN_ERR_SHAPE, "attn_rope_apply_table: x's width is %lld, the table's heads are %lld wide",
                          (long long)x->shape[3], (long long)t->plan.dim);
    const int64_t len = x->shape[1], rows = x->shape[0] * len, covered = t->positions;
    /* Every position read must be a row of the table (checked before x is touched). */
    if (positions) {
        for (int64_t r = 0; r < rows; r++)
            if (positions[r] < 0 || positions[r] >= covered)
                return attn__fail(ATTN_ERR_SHAPE,
                                  "attn_rope_apply_table: positions[%lld] = %lld is outside the table's [0, %lld)%s",
                                  (long long)r, (long long)positions[r], (long long)covered,
                                  positions[r] < 0 ? " (attn_rope_apply takes negative positions)"
                                                   : ": attn_rope_table_reserve it first");
    } else if (position_offset < 0 || position_offset > covered - len) {
        return attn__fail(ATTN_ERR_SHAPE,
                          "attn_rope_apply_table: positions %lld .. %lld + %lld - 1 are outside the table's [0, %lld)%s",
                          (long long)position_offset, (long long)position_offset, (long long)len, (long long)covered,
                          position_offset < 0 ? " (attn_rope_apply takes negative positions)"
                                              : ": attn_rope_table_reserve them first");
    }
    rotate_rows(x, positions, position_offset, &t->plan, t->inv_freq, t, ROPE_FORWARD,
                rope_threads(&t->plan, rows, x->shape[2], 1), NULL);
    return ATTN_OK;
}
