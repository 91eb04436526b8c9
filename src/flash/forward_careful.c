/*
 * forward_careful.c — the flash forward's non-finite values and overflow
 * (docs/semantics.md, "Numbers and errors").  The fp32 loop runs as if
 * every number were finite, and a few checks, outside the micro-kernels,
 * find the rows it could not compute:
 *   - per tile, one all_finite pass over the raw scores: a NaN or infinite
 *     score at a key the row sees (a non-finite q or k, or a score beyond
 *     FLT_MAX) marks the row (check_scores);
 *   - per row, when the unit finishes: a NaN or +inf max, a sum that is not
 *     finite, or nothing seen although keys are in range, marks the row
 *     (state_untrusted);
 *   - per item: an accumulator that came out non-finite in a row not marked
 *     means a NaN or Inf in some value row, and 0·NaN carries it to rows
 *     that do not see that key (values_not_finite).  The item is then
 *     computed again carefully (forward.c, item_run): such value rows are
 *     left out of P·V (drop_nonfinite_values_tile, rows_values_careful),
 *     and the rows that do see them are marked, as are rows whose
 *     accumulators are still not finite (a weighted sum that overflowed).
 *     The others get the bits of the same problem with those values zeroed.
 * A marked row is recomputed by the reference's row routine, in double
 * (attn__ref_forward_row, recompute_marked): the reference's answer for
 * finite inputs whose scores overflow fp32, NaN for a row that reads a NaN
 * or Inf.  Every decision is a function of the data, never of the threads.
 */
#include "flash/forward.h"

#include "base/visibility.h"
#include "ref/ref.h"

#include <math.h>
#include <string.h>

/* Whether row r of the unit sees key `key` (every rule, visibility.h). */
bool attn__flash_row_sees(const flash_ctx *c, int64_t r, int64_t key) {
    const flash_row *row = &c->row[r];
    return visibility_allows(c->p, c->b, row->h, row->i, row->begin, row->end, key);
}

/* Marks for the exact path the rows of [row0, row0 + rows) whose raw score
 * s[j·js + r·rs] of key t0 + j is NaN or infinite at a key they see: a NaN
 * or Inf in q or k (a -inf score would otherwise pass for a hidden key, a
 * NaN one be skipped by the max), or a score beyond FLT_MAX.  Keys a row
 * does not see may hold anything: mask_scores overwrites their scores next.
 * One all_finite pass over the tile; the element loop only when it fails. */
void attn__flash_check_scores(flash_ctx *c, int64_t row0, int64_t rows, int64_t t0, int nk, const float *s,
                              int64_t js, int64_t rs) {
    const ukernel_table *kern = c->pl->kern;
    if (js == 1 ? kern->all_finite(s, rs, (int)rows, nk) : kern->all_finite(s, js, nk, rows)) return;
    for (int64_t r = 0; r < rows; r++) {
        if (!c->row[row0 + r].valid || c->exact[row0 + r]) continue;
        for (int j = 0; j < nk; j++)
            if (!isfinite(s[j * js + r * rs]) && attn__flash_row_sees(c, row0 + r, t0 + j)) {
                c->exact[row0 + r] = 1;
                break;
            }
    }
}

/* Whether the value row of key `key`, kv head `head` is finite (a half row
 * is widened into c->out_row first: rare, the careful path only). */
bool attn__flash_value_row_finite(flash_ctx *c, int64_t key, int64_t head) {
    const sdpa_problem *p = c->p;
    const void *v = problem_kv_row(p, &p->v, c->b, key, head);
    if (p->v.dtype == ATTN_F32) return c->pl->kern->all_finite(v, p->dim_v, 1, p->dim_v);
    c->pl->kern->widen(v, p->v.dtype, c->out_row, p->dim_v);
    return c->pl->kern->all_finite(c->out_row, p->dim_v, 1, p->dim_v);
}

/* Careful mode (item_run), tile path: a key whose row of the V copy holds a
 * NaN or Inf would reach, through 0·NaN, every row of a subtile that
 * processes it, the rows that do not see it included.  Its row of the copy
 * is zeroed, and the rows that see it are marked for the exact path, which
 * gives them the non-finite output they must have.  nk_sub: the keys each
 * subtile processes. */
void attn__flash_drop_nonfinite_values_tile(flash_ctx *c, int64_t t0, int nk, const int *nk_sub) {
    const flash_plan *pl = c->pl;
    const int64_t dim_v = c->p->dim_v;
    for (int j = 0; j < nk; j++) {
        if (pl->fast_pv) { /* the bf16 copy vT: the source row decides */
            if (attn__flash_value_row_finite(c, t0 + j, c->kv_head)) continue;
            uint16_t *v_col = (uint16_t *)(void *)c->vt + j;
            for (int64_t d = 0; d < dim_v; d++) v_col[d * pl->ldvt] = 0;
        } else {
            float *v_j = c->vt + j * pl->ldv;
            if (pl->kern->all_finite(v_j, pl->ldv, 1, dim_v)) continue;
            memset(v_j, 0, sizeof(float) * (size_t)dim_v);
        }
        for (int64_t st = 0; st < pl->subtiles; st++) {
            if (j >= nk_sub[st]) continue;
            for (int64_t r = st * pl->sub_rows; r < (st + 1) * pl->sub_rows; r++)
                if (c->row[r].valid && attn__flash_row_sees(c, r, t0 + j)) c->exact[r] = 1;
        }
    }
}

/* Whether the fp32 state of row r cannot be trusted: a NaN or +inf running
 * max (a NaN or +inf score or bias), a sum that is not finite, or nothing
 * seen although keys are in the row's range: a mask or -inf biases hide
 * them all (the exact path then says so, and writes the zeros of a fully
 * masked row), or every score the row sees overflowed to -inf in fp32. */
bool attn__flash_state_untrusted(const flash_ctx *c, int64_t r) {
    const float m = c->m[r], l = c->l[r];
    if (isnan(m) || m == INFINITY || !isfinite(l)) return true;
    return l == 0.0f && c->row[r].begin < c->row[r].end;
}

/* Whether an accumulator of a row not marked for the exact path came out
 * NaN or infinite: a value row held a NaN or Inf (reaching, through 0·NaN,
 * rows that do not see its key as well), or the weighted sum overflowed.
 * With `mark`, such rows are marked instead. */
bool attn__flash_values_not_finite(flash_ctx *c, bool mark) {
    const flash_plan *pl = c->pl;
    const int64_t dim_v = c->p->dim_v;
    if (pl->kern->all_finite(c->o, pl->rows * dim_v, 1, pl->rows * dim_v)) return false;
    bool found = false;
    for (int64_t r = 0; r < pl->rows; r++) {
        if (!c->row[r].valid || c->exact[r]) continue;
        for (int64_t d = 0; d < dim_v && !c->exact[r]; d++)
            if (!isfinite(*acc_at(c, r, d))) {
                found = true;
                if (!mark) return true;
                c->exact[r] = 1;
            }
    }
    return found;
}

/* The exact path: recomputes every valid row of the unit marked in
 * c->exact with the reference's row routine, in double, over the fp32
 * results unit_finish wrote (out, and the weights and lse when asked). */
void attn__flash_recompute_marked(flash_ctx *c, attn_tensor *out, float *weights, float *lse) {
    const sdpa_problem *p = c->p;
    const flash_plan *pl = c->pl;
    for (int64_t r = 0; r < pl->rows; r++) {
        const flash_row *row = &c->row[r];
        if (!row->valid || !c->exact[r]) continue;
        const int64_t at = (c->b * p->heads_q + row->h) * p->len_q + row->i;
        attn__ref_forward_row(p, c->b, row->h, row->i, NULL, c->row_acc, out,
                              weights ? weights_row(c, weights, r) : NULL, lse ? lse + at : NULL);
    }
}
