/*
 * lp.c — a small dense linear-program solver for the null-space search:
 *   maximise c.x  subject to  a x (<=, =, >=) b,  x >= 0.
 *
 * Two-phase tableau simplex in double.  Phase 1 minimises the sum of the
 * artificial variables of the = and >= rows; phase 2 optimises c with the
 * artificials barred from the basis.  Entering column by Dantzig's rule
 * (most negative reduced cost); after LP_DEGENERATE_RUN degenerate pivots in
 * a row it switches to Bland's rule (lowest index), which cannot cycle.
 *
 * Tableau layout: rows 0..m-1 constraints, row m the objective's reduced
 * costs; columns 0..n-1 the variables, then slacks/surpluses, then
 * artificials, then the right-hand side.
 *
 * Limits: dense O((m+1)(N+1)) memory and work per pivot, N = n + slacks +
 * artificials; fine for the hundreds of rows and columns the search builds,
 * not for large sparse programs.  Tolerances assume rows scaled to ~1.
 */
#include "interp/interp.h"

#include <math.h>
#include <stdlib.h>

#define LP_EPS 1e-9           /* pivot, reduced-cost and feasibility tolerance */
#define LP_DEGENERATE_RUN 50  /* degenerate pivots before switching to Bland  */

typedef struct tableau {
    int64_t m, cols;  /* constraint rows; columns excluding the rhs */
    int64_t width;    /* cols + 1 */
    double *t;        /* [(m + 1), width] */
    int64_t *basis;   /* [m] */
} tableau;

static double *cell(const tableau *tb, int64_t row, int64_t col) { return tb->t + row * tb->width + col; }

static void pivot(tableau *tb, int64_t r, int64_t e) {
    double *row_r = cell(tb, r, 0);
    const double inv = 1.0 / row_r[e];
    for (int64_t j = 0; j < tb->width; j++) row_r[j] *= inv;
    row_r[e] = 1.0;
    for (int64_t i = 0; i <= tb->m; i++) {
        if (i == r) continue;
        double *row_i = cell(tb, i, 0);
        const double f = row_i[e];
        if (f == 0.0) continue;
        for (int64_t j = 0; j < tb->width; j++) row_i[j] -= f * row_r[j];
        row_i[e] = 0.0;
    }
    tb->basis[r] = e;
}

/* Runs the simplex on the objective row over columns [0, allowed). */
static lp_outcome simplex(tableau *tb, int64_t allowed) {
    const int64_t limit = 50 * (tb->m + tb->cols) + 1000;
    const double *objective = cell(tb, tb->m, 0);
    int64_t degenerate = 0;
    for (int64_t iter = 0; iter < limit; iter++) {
        const bool bland = degenerate >= LP_DEGENERATE_RUN;
        int64_t e = -1;
        double best = -LP_EPS;
        for (int64_t j = 0; j < allowed; j++)
            if (objective[j] < best) {
                e = j;
                if (bland) break;
                best = objective[j];
            }
        if (e < 0) return LP_OPTIMAL;
        int64_t r = -1;
        double ratio = INFINITY;
        for (int64_t i = 0; i < tb->m; i++) {
            const double a = *cell(tb, i, e);
            if (a <= LP_EPS) continue;
            const double rhs = fmax(*cell(tb, i, tb->cols), 0.0);
            const double q = rhs / a;
            /* The smallest ratio; among ties, the lowest basic index (Bland). */
            if (q < ratio - LP_EPS) {
                ratio = q;
                r = i;
            } else if (q <= ratio + LP_EPS && tb->basis[i] < tb->basis[r]) {
                ratio = fmin(ratio, q);
                r = i;
            }
        }
        if (r < 0) return LP_UNBOUNDED;
        degenerate = ratio <= LP_EPS ? degenerate + 1 : 0;
        pivot(tb, r, e);
    }
    return LP_STALLED;
}

attn_status attn__lp_maximise(const lp_problem *p, double *x, lp_outcome *outcome) {
    if (!p || !x || !outcome || !p->a || !p->b || !p->sense || !p->c || p->rows < 0 || p->cols <= 0)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_lp_maximise: bad arguments");
    const int64_t m = p->rows, n = p->cols;
    int64_t slacks = 0, artificials = 0;
    for (int64_t i = 0; i < m; i++) {
        /* A negative right-hand side flips the row, and with it the sense. */
        lp_sense s = p->b[i] < 0 ? (lp_sense)-p->sense[i] : p->sense[i];
        slacks += s != LP_EQ;
        artificials += s != LP_LE;
    }
    tableau tb = {.m = m, .cols = n + slacks + artificials};
    tb.width = tb.cols + 1;
    tb.t = calloc((size_t)((m + 1) * tb.width), sizeof(double));
    tb.basis = malloc((size_t)(m > 0 ? m : 1) * sizeof(int64_t));
    if (!tb.t || !tb.basis) {
        free(tb.t);
        free(tb.basis);
        return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "attn_lp_maximise: cannot allocate a %lld x %lld tableau",
                         (long long)(m + 1), (long long)tb.width);
    }
    const int64_t first_artificial = n + slacks;
    int64_t next_slack = n, next_artificial = first_artificial;
    for (int64_t i = 0; i < m; i++) {
        const double sign = p->b[i] < 0 ? -1.0 : 1.0;
        const lp_sense s = p->b[i] < 0 ? (lp_sense)-p->sense[i] : p->sense[i];
        double *row = cell(&tb, i, 0);
        for (int64_t j = 0; j < n; j++) row[j] = sign * p->a[i * n + j];
        row[tb.cols] = sign * p->b[i];
        if (s == LP_LE) {
            row[next_slack] = 1.0;
            tb.basis[i] = next_slack++;
        } else {
            if (s == LP_GE) row[next_slack++] = -1.0;
            row[next_artificial] = 1.0;
            tb.basis[i] = next_artificial++;
        }
    }

    /* Phase 1: maximise -(sum of artificials); reduced costs start at +1 on
     * the artificials, which are then eliminated from the objective row. */
    double *objective = cell(&tb, m, 0);
    lp_outcome result = LP_OPTIMAL;
    if (artificials) {
        for (int64_t j = first_artificial; j < tb.cols; j++) objective[j] = 1.0;
        for (int64_t i = 0; i < m; i++)
            if (tb.basis[i] >= first_artificial)
                for (int64_t j = 0; j < tb.width; j++) objective[j] -= *cell(&tb, i, j);
        result = simplex(&tb, tb.cols);
        if (result == LP_OPTIMAL && objective[tb.cols] < -LP_EPS) result = LP_INFEASIBLE;
        /* Drive artificials still basic (at zero) out of the basis; a row
         * with no other nonzero is redundant and keeps its artificial. */
        for (int64_t i = 0; i < m && result == LP_OPTIMAL; i++) {
            if (tb.basis[i] < first_artificial) continue;
            for (int64_t j = 0; j < first_artificial; j++)
                if (fabs(*cell(&tb, i, j)) > LP_EPS) {
                    pivot(&tb, i, j);
                    break;
                }
        }
    }
    if (result == LP_OPTIMAL) {
        /* Phase 2: the real objective, artificials barred. */
        for (int64_t j = 0; j < tb.width; j++) objective[j] = j < n ? -p->c[j] : 0.0;
        for (int64_t i = 0; i < m; i++) {
            const double f = objective[tb.basis[i]];
            if (f == 0.0) continue;
            for (int64_t j = 0; j < tb.width; j++) objective[j] -= f * *cell(&tb, i, j);
        }
        result = simplex(&tb, first_artificial);
    }
    if (result == LP_OPTIMAL) {
        for (int64_t j = 0; j < n; j++) x[j] = 0.0;
        for (int64_t i = 0; i < m; i++)
            if (tb.basis[i] < n) x[tb.basis[i]] = *cell(&tb, i, tb.cols);
    }
    *outcome = result;
    free(tb.t);
    free(tb.basis);
    return ATTN_OK;
}
