/*
 * nullspace.c — "weights are not an explanation" (chapter §8, exercise 3):
 * how far can one query's weight row move while its output stays put?
 *
 *   maximise ||w' - w||_1  over  { w' >= 0, sum w' = sum w,
 *                                   |V^T (w' - w)|_inf <= tolerance,
 *                                   w'_j = w_j for every key not visible }
 *
 * Shape legend: weights, moved, visible [S]   values [S, width]
 *
 * Algorithm.  Write delta = w' - w.  Because sum delta = 0,
 * ||delta||_1 = 2 * sum_{j in P} delta_j for P = {j : delta_j > 0}, and for
 * ANY set P, ||delta||_1 >= 2 * sum_{j in P} delta_j.  So
 *     max ||delta||_1 = 2 * max_P ( max_{w' in polytope} sum_{j in P} w'_j - sum_{j in P} w_j ),
 * one linear program per set P (lp.c).  With n visible keys:
 *   n <= exact_limit   every P (2^n - 2 programs): the true maximum, up to
 *                      the solver's tolerance;
 *   n >  exact_limit   local search: from P = {j} and P = all but {j} for
 *                      `starts` keys j spread over the row, solve, set P to
 *                      the keys the solution raised, repeat until P stops
 *                      changing.  Each step cannot lower sum_P delta, so the
 *                      search climbs; the result is a lower bound.
 * Maximising a convex function over a polytope is NP-hard in general, so no
 * polynomial method is exact for every input.
 *
 * The program is posed on the normalised row (w / sum w) with the values
 * centred on the current output (u_j = v_j - V^T w / sum w, so the output
 * constraint reads |sum_j w'_j u_j[d]| <= tolerance) and each output
 * coordinate scaled to magnitude 1; coordinates on which every visible
 * value agrees cannot move and are dropped.  Every candidate is checked in
 * double precision against the original inputs and, if rounding left it
 * outside the tolerance, pulled back along the segment toward w, which stays
 * on the simplex.
 */
#include "interp/interp.h"

#include "base/problem.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define EXACT_LIMIT_DEFAULT 12
#define EXACT_LIMIT_MAX 20
#define STARTS_DEFAULT 32
#define SEARCH_ROUNDS 20       /* local-search steps from one start            */
#define RAISED_EPS 1e-12       /* w'_j - w_j above this (normalised) = raised  */
/* Simplex steps the enumeration may take (attn_interp.h): about 0.85 ns
 * each on the machine that measured it (2^14 programs, width 64: 3.6 s). */
#define EXACT_WORK_BUDGET 5e10
#define SECONDS_PER_STEP 0.85e-9

typedef struct search {
    const float *w, *values;
    int64_t keys, width;
    double tolerance;
    int64_t n;          /* visible keys                        */
    int64_t *index;     /* [n] their positions in the row      */
    double total;       /* sum of the visible weights          */
    lp_problem lp;
    double *a, *b, *c, *x; /* the program; x = its solution (normalised) */
    lp_sense *sense;
    double *candidate;  /* [keys] */
    bool *raised;       /* [n] the set P */
    double *best;       /* [keys] */
    double best_l1, best_change;
    int64_t programs;
    bool all_optimal;
} search;

/* max_d |sum_j (row_j - w_j) v_j[d]|, in double. */
static double output_change(const search *s, const double *row) {
    double worst = 0.0;
    for (int64_t d = 0; d < s->width; d++) {
        double acc = 0.0;
        for (int64_t j = 0; j < s->keys; j++)
            acc += (row[j] - (double)s->w[j]) * (double)s->values[j * s->width + d];
        worst = fmax(worst, fabs(acc));
    }
    return worst;
}

static double l1_distance(const search *s, const double *row) {
    double sum = 0.0;
    for (int64_t j = 0; j < s->keys; j++) sum += fabs(row[j] - (double)s->w[j]);
    return sum;
}

/* Makes s->candidate a valid row (>= 0, the visible sum kept, the output
 * within tolerance) and keeps it if it moves further than the best so far. */
static void consider(search *s) {
    double *row = s->candidate, sum = 0.0;
    for (int64_t i = 0; i < s->n; i++) {
        double *r = &row[s->index[i]];
        if (*r < 0.0) *r = 0.0;
        sum += *r;
    }
    if (sum > 0.0)
        for (int64_t i = 0; i < s->n; i++) row[s->index[i]] *= s->total / sum;
    double change = output_change(s, row);
    /* Past the tolerance by the solver's rounding: pull back toward w along
     * the segment (a convex combination of two rows on the simplex, so still
     * on it); the change shrinks in proportion. */
    for (int attempt = 0; attempt < 4 && change > s->tolerance; attempt++) {
        const double theta = s->tolerance / change * (1.0 - 1e-9);
        for (int64_t i = 0; i < s->n; i++) {
            const int64_t j = s->index[i];
            row[j] = (double)s->w[j] + theta * (row[j] - (double)s->w[j]);
        }
        change = output_change(s, row);
    }
    if (change > s->tolerance) return;
    const double l1 = l1_distance(s, row);
    if (l1 > s->best_l1) {
        s->best_l1 = l1;
        s->best_change = change;
        memcpy(s->best, row, (size_t)s->keys * sizeof(double));
    }
}

/* Solves the program for the current set P (s->raised); true when optimal,
 * with the solution in s->x. */
static attn_status solve(search *s, bool *optimal) {
    lp_outcome outcome;
    for (int64_t i = 0; i < s->n; i++) s->c[i] = s->raised[i] ? 1.0 : 0.0;
    attn_status st = attn__lp_maximise(&s->lp, s->x, &outcome);
    if (st) return st;
    s->programs++;
    *optimal = outcome == LP_OPTIMAL;
    if (!*optimal) {
        s->all_optimal = false;
        return ATTN_OK;
    }
    for (int64_t j = 0; j < s->keys; j++) s->candidate[j] = s->w[j];
    for (int64_t i = 0; i < s->n; i++) s->candidate[s->index[i]] = s->x[i] * s->total;
    consider(s);
    return ATTN_OK;
}

/* The program's constraints: sum w' = 1, then two rows per output
 * coordinate that can move. */
static void build_program(search *s) {
    const int64_t n = s->n;
    int64_t rows = 0;
    for (int64_t i = 0; i < n; i++) s->a[i] = 1.0;
    s->b[rows] = 1.0;
    s->sense[rows++] = LP_EQ;
    for (int64_t d = 0; d < s->width; d++) {
        double centre = 0.0, scale = 0.0;
        for (int64_t i = 0; i < n; i++)
            centre += (double)s->w[s->index[i]] / s->total * (double)s->values[s->index[i] * s->width + d];
        for (int64_t i = 0; i < n; i++)
            scale = fmax(scale, fabs((double)s->values[s->index[i] * s->width + d] - centre));
        if (scale == 0.0) continue; /* every visible value agrees: cannot move */
        double *upper = s->a + rows * n, *lower = upper + n;
        for (int64_t i = 0; i < n; i++) {
            upper[i] = ((double)s->values[s->index[i] * s->width + d] - centre) / scale;
            lower[i] = -upper[i];
        }
        s->b[rows] = s->b[rows + 1] = s->tolerance / (s->total * scale);
        s->sense[rows] = s->sense[rows + 1] = LP_LE;
        rows += 2;
    }
    s->lp = (lp_problem){.rows = rows, .cols = n, .a = s->a, .b = s->b, .sense = s->sense, .c = s->c};
}

static attn_status enumerate(search *s) {
    const uint32_t patterns = (uint32_t)1 << s->n;
    for (uint32_t mask = 1; mask + 1 < patterns; mask++) {
        bool optimal;
        for (int64_t i = 0; i < s->n; i++) s->raised[i] = (mask >> i) & 1u;
        attn_status st = solve(s, &optimal);
        if (st) return st;
    }
    return ATTN_OK;
}

static attn_status local_search(search *s, int64_t starts) {
    const int64_t half = (starts + 1) / 2;
    for (int64_t start = 0; start < starts; start++) {
        const int64_t key = s->n >= half ? (start / 2) * s->n / half : (start / 2) % s->n;
        for (int64_t i = 0; i < s->n; i++) s->raised[i] = (i == key) == (start % 2 == 0);
        for (int round = 0; round < SEARCH_ROUNDS; round++) {
            bool optimal, changed = false, any = false;
            attn_status st = solve(s, &optimal);
            if (st) return st;
            if (!optimal) break;
            for (int64_t i = 0; i < s->n; i++) {
                const bool up = s->x[i] - (double)s->w[s->index[i]] / s->total > RAISED_EPS;
                changed |= up != s->raised[i];
                any |= up;
                s->raised[i] = up;
            }
            if (!changed || !any) break;
        }
    }
    return ATTN_OK;
}

static attn_status check_inputs(const float *weights, const float *values, int64_t keys,
                                int64_t width, const attn_nullspace_options *opt, double *moved,
                                attn_nullspace_result *result) {
    if (!weights || !values || !moved || !result)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_nullspace_search: %s is NULL",
                         !weights ? "weights" : !values ? "values" : !moved ? "moved" : "result");
    int64_t n;
    if (keys <= 0 || width <= 0 || mul_overflows(keys, width, &n))
        return attn__fail(ATTN_ERR_SHAPE, "attn_nullspace_search: keys (%lld) and width (%lld) must be positive",
                         (long long)keys, (long long)width);
    if (!isfinite(opt->tolerance) || opt->tolerance < 0)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_nullspace_search: tolerance %g must be finite and >= 0",
                         opt->tolerance);
    if (opt->exact_limit < 0 || opt->exact_limit > EXACT_LIMIT_MAX)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT,
                         "attn_nullspace_search: exact_limit %lld must be in [0, %d] (2^limit programs)",
                         (long long)opt->exact_limit, EXACT_LIMIT_MAX);
    if (opt->starts < 0)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_nullspace_search: starts %lld must be >= 0",
                         (long long)opt->starts);
    for (int64_t j = 0; j < keys; j++)
        if (!isfinite(weights[j]) || weights[j] < 0)
            return attn__fail(ATTN_ERR_INVALID_ARGUMENT,
                             "attn_nullspace_search: weights[%lld] = %g; weights must be finite and >= 0",
                             (long long)j, (double)weights[j]);
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(values[i]))
            return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_nullspace_search: values[%lld] is not finite",
                             (long long)i);
    return ATTN_OK;
}

attn_status attn_nullspace_search(const float *weights, const float *values, int64_t keys,
                                  int64_t width, const uint8_t *visible,
                                  const attn_nullspace_options *opt_in, double *moved,
                                  attn_nullspace_result *result) {
    static const attn_nullspace_options defaults = ATTN_NULLSPACE_OPTIONS_INIT;
    attn_nullspace_options options, *opt = &options;
    attn_status st;
    if ((st = options_copy(&options, sizeof options, &defaults, opt_in, "attn_nullspace_options"))) return st;
    if ((st = check_inputs(weights, values, keys, width, opt, moved, result))) return st;
    const int64_t exact_limit = opt->exact_limit ? opt->exact_limit : EXACT_LIMIT_DEFAULT;
    const int64_t starts = opt->starts ? opt->starts : STARTS_DEFAULT;
    search s = {.w = weights, .values = values, .keys = keys, .width = width,
                .tolerance = opt->tolerance, .all_optimal = true};
    memset(result, 0, sizeof *result);
    for (int64_t j = 0; j < keys; j++) moved[j] = weights[j];

    s.index = malloc((size_t)keys * sizeof(int64_t));
    if (!s.index) return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "attn_nullspace_search: out of memory");
    for (int64_t j = 0; j < keys; j++)
        if (!visible || visible[j]) {
            s.index[s.n++] = j;
            s.total += weights[j];
        }
    result->visible = s.n;
    s.best = moved;
    s.best_change = 0.0;
    if (s.n < 2 || s.total <= 0.0) {
        /* One visible key, or none carrying weight: nothing can move. */
        result->exact = 1;
        free(s.index);
        return ATTN_OK;
    }
    const int64_t max_rows = 1 + 2 * width;
    s.a = malloc((size_t)(max_rows * s.n) * sizeof(double));
    s.b = malloc((size_t)max_rows * sizeof(double));
    s.sense = malloc((size_t)max_rows * sizeof(lp_sense));
    s.c = malloc((size_t)s.n * sizeof(double));
    s.x = malloc((size_t)s.n * sizeof(double));
    s.candidate = malloc((size_t)keys * sizeof(double));
    s.raised = malloc((size_t)s.n * sizeof(bool));
    if (!s.a || !s.b || !s.sense || !s.c || !s.x || !s.candidate || !s.raised) {
        st = attn__fail(ATTN_ERR_OUT_OF_MEMORY, "attn_nullspace_search: out of memory for a %lld x %lld program",
                       (long long)max_rows, (long long)s.n);
        goto cleanup;
    }
    build_program(&s);
    /* The enumeration's cost (attn_interp.h), against its budget. */
    const double rows = (double)s.lp.rows, cols = (double)s.n;
    const double work = (ldexp(1.0, (int)s.n) - 2.0) * rows * (cols + rows) * fmin(rows, cols);
    bool exact = s.n <= exact_limit;
    if (exact && work > EXACT_WORK_BUDGET && !opt->allow_slow) {
        if (opt->exact_limit) {
            st = attn__fail(ATTN_ERR_BUDGET,
                            "attn_nullspace_search: the exact search over %lld visible keys (value width %lld) is "
                            "2^%lld linear programs of %lld rows, about %.0f s, beyond the budget of about %.0f s: "
                            "lower exact_limit below %lld (the local search gives a lower bound) or set allow_slow",
                            (long long)s.n, (long long)width, (long long)s.n, (long long)s.lp.rows,
                            work * SECONDS_PER_STEP, EXACT_WORK_BUDGET * SECONDS_PER_STEP, (long long)s.n);
            goto cleanup;
        }
        exact = false; /* the default limit: the local search, reported as such */
    }
    st = exact ? enumerate(&s) : local_search(&s, starts);
    if (st) goto cleanup;
    result->l1 = s.best_l1;
    result->max_output_change = s.best_l1 > 0.0 ? s.best_change : output_change(&s, moved);
    result->exact = exact && s.all_optimal;
    result->programs = s.programs;
cleanup:
    free(s.index);
    free(s.a);
    free(s.b);
    free(s.sense);
    free(s.c);
    free(s.x);
    free(s.candidate);
    free(s.raised);
    return st;
}
