/*
 * forward_mask.c — what the flash forward's score kernels do not know about:
 * the visibility rules (base/visibility.h: causal, window, key lengths, a
 * boolean mask, a bias, ALiBi), applied to a tile's scores, for the tile and
 * the rows paths alike.
 */
#include "flash/forward.h"

#include "base/logits.h"
#include "base/visibility.h"

/* Applies what the score kernels do not know about (visibility.h) to the
 * scores of keys [t0, t0 + nk) of rows [row0, row0 + rows): s[j·js + r·rs]
 * is the score of key t0 + j for row row0 + r.  Rows that see the whole
 * range with no mask or bias are left untouched.  A tile-path subtile with
 * only structural rules (causal, window, key lengths) is masked in one
 * vectorised pass (mask_tile: the rows' ranges cut to the tile); the rest
 * (a boolean mask, a bias, ALiBi, the rows path) row by row. */
void attn__flash_mask_scores(const flash_ctx *c, int64_t row0, int64_t rows, int64_t t0, int nk, float *s, int64_t js,
                             int64_t rs) {
    const sdpa_problem *p = c->p;
    const bool elementwise = p->opt.mask || p->opt.bias || logits_has_alibi(p);
    if (!elementwise && !c->pl->rows_path && c->pl->kern->mask_tile && rs == 1 && js == rows &&
        rows == c->pl->sub_rows) {
        int64_t lo_max = 0, hi_min = nk; /* keys [lo_max, hi_min): seen by every row */
        for (int64_t r = 0; r < rows; r++) {
            const flash_row *row = &c->row[row0 + r];
            int64_t lo = 0, hi = nk; /* a padding row, or one that sees the whole range */
            if (row->valid && !(row->begin <= t0 && t0 + nk <= row->end)) {
                lo = row->begin - t0;
                hi = row->end - t0;
                lo = lo < 0 ? 0 : lo > nk ? nk : lo;
                hi = hi < 0 ? 0 : hi > nk ? nk : hi;
            }
            if (lo > lo_max) lo_max = lo;
            if (hi < hi_min) hi_min = hi;
            c->mask_lo[r] = (float)lo;
            c->mask_hi[r] = (float)hi;
        }
        const ukernel_table *kern = c->pl->kern;
        if (hi_min <= lo_max) { /* the hidden keys before and after meet */
            kern->mask_tile(s, 0, nk, c->mask_lo, c->mask_hi);
            return;
        }
        if (lo_max > 0) kern->mask_tile(s, 0, (int)lo_max, c->mask_lo, c->mask_hi);
        if (hi_min < nk) kern->mask_tile(s, (int)hi_min, nk, c->mask_lo, c->mask_hi);
        return;
    }
    for (int64_t r = 0; r < rows; r++) {
        const flash_row *row = &c->row[row0 + r];
        if (!row->valid) continue;
        if (!elementwise && row->begin <= t0 && t0 + nk <= row->end) continue;
        attn__visibility_mask_scores(p, c->b, row->h, row->i, row->begin, row->end, t0, nk, s + r * rs,
                                     js, 1.0f);
    }
}
