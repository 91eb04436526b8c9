/*
 * forward_rows.c — the flash forward's rows path (few queries: decoding):
 * a unit is every kv head and all their query rows of one batch, and the
 * rows kernels read K and V in place, key by key, each key's row of all
 * heads at once, through the block table of a paged problem (one kernel
 * call per run of rows; blocks shorter than FLASH_COPY_BLOCKS_BELOW are
 * copied a step at a time first).  Half K and V go to the _half kernels,
 * which widen in registers.  Each pass prefetches what the other reads
 * next: the scores pass this step's values, the values pass the next
 * step's keys.
 */
#include "flash/forward.h"

#include "base/logits.h"

#include <string.h>

/* Packs the unit's queries for the rows kernels, row-major qp[r][d],
 * multiplied by scale·log2(e) so that scores come out in base 2. */
void attn__flash_rows_pack_queries(flash_ctx *c) {
    const sdpa_problem *p = c->p;
    const flash_plan *pl = c->pl;
    const float factor = query_factor(p);
    for (int64_t r = 0; r < pl->rows; r++) {
        float *qp_r = c->qp + r * pl->ldq;
        pl->kern->widen(problem_row_any(&p->q, c->b, c->row[r].i, c->row[r].h), p->q.dtype, qp_r, p->dim);
        for (int64_t d = 0; d < p->dim; d++) qp_r[d] *= factor;
    }
}

/* Whether key `key` lies in the current step's copy (copy_steps). */
static bool in_step_copy(const flash_ctx *c, int64_t key) {
    return c->step_n && key >= c->step_t0 && key < c->step_t0 + c->step_n;
}

/* How many of the `left` keys from `key` on the rows kernels can take in
 * one call, their rows t->stride[1] apart: to the end of the step's copy,
 * or of key's block (problem_kv_run). */
static int rows_run(const flash_ctx *c, int64_t key, int left) {
    const int64_t run = in_step_copy(c, key) ? c->step_t0 + c->step_n - key : problem_kv_run(c->p, key);
    return (int)(left < run ? left : run);
}

/* Row `key` of kv head `head` of t (&p->k or &p->v) as the rows kernels
 * read it: from the current step's copy when it was copied, else from the
 * tensor, through the block table. */
static const void *rows_source(const flash_ctx *c, const attn_tensor *t, int64_t key, int64_t head) {
    const sdpa_problem *p = c->p;
    if (!in_step_copy(c, key)) return problem_kv_row(p, t, c->b, key, head);
    const int64_t at = (key - c->step_t0) * t->stride[1] + head * t->stride[2];
    return (t == &p->v ? c->step_v : c->step_k) + problem_offset_bytes(t, at);
}

/* Copies the rows of keys [t0, t0 + nk) of t, every kv head, run by run
 * into dst, stride[1] apart as in t (copy_steps; called before the step's
 * copy is marked, so the runs are the blocks). */
static void copy_step(const flash_ctx *c, const attn_tensor *t, int64_t t0, int nk, unsigned char *dst) {
    const int64_t row_bytes = problem_offset_bytes(t, t->stride[1]);
    const int64_t last_bytes = problem_offset_bytes(t, (t->shape[2] - 1) * t->stride[2] + t->shape[3]);
    for (int j0 = 0, n; j0 < nk; j0 += n) {
        n = rows_run(c, t0 + j0, nk - j0);
        memcpy(dst + j0 * row_bytes, problem_kv_row(c->p, t, c->b, t0 + j0, 0),
               (size_t)((n - 1) * row_bytes + last_bytes));
    }
}

/* The rows kernels read K and V in place, whatever their dtype: a half
 * tensor goes to the _half kernels, which widen in registers (a decode
 * step then reads half the bytes, once).  rows_pv: pv_rows on the values
 * of keys [key, key + nk) and `heads` kv heads from `head`, one run of
 * rows (problem_kv_run); nk = 0 only applies alpha. */
void attn__flash_rows_pv(const flash_ctx *c, const float *s, int heads, int per_head, int nk, int64_t key, int64_t head,
                         const float *alpha, float *o, const flash_prefetch *pf) {
    const sdpa_problem *p = c->p;
    const ukernel_table *kern = c->pl->kern;
    const void *v = nk > 0 ? rows_source(c, &p->v, key, head) : p->v.data;
    if (p->v.dtype == ATTN_F32)
        kern->pv_rows(s, c->pl->tile_keys, heads, per_head, nk, v, p->v.stride[1], p->v.stride[2], p->dim_v, alpha, o,
                      p->dim_v, pf);
    else
        kern->pv_rows_half(p->v.dtype, s, c->pl->tile_keys, heads, per_head, nk, v, p->v.stride[1], p->v.stride[2],
                           p->dim_v, alpha, o, p->dim_v, pf);
}

/* rows_pv on keys [key, key + nk) of every kv head of the unit, one call
 * per run of rows (a paged problem's blocks): the first applies alpha, the
 * others add to it (alpha NULL), as the careful path's runs do.  Each call
 * prefetches its share of the keys [pf_key, pf_key + pf_rows) (the next
 * step's), so that a paged step requests what a contiguous one does. */
void attn__flash_rows_pv_runs(const flash_ctx *c, const float *s, int nk, int64_t key, const float *alpha,
                              int64_t pf_key, int pf_rows) {
    const flash_plan *pl = c->pl;
    const int heads = (int)pl->unit_kv_heads;
    int j0 = 0, n;
    do { /* at least once: nk = 0 still applies alpha */
        n = rows_run(c, key + j0, nk - j0);
        const int pf_n = c->step_n ? 0 : j0 + n <= pf_rows ? n : pf_rows - j0; /* a copied step: the copy fetches */
        flash_prefetch pf = prefetch_of(c, &c->p->k, pf_key + j0, c->kv_head, heads, c->p->dim, pf_n);
        attn__flash_rows_pv(c, s + j0, heads, (int)pl->sub_rows, n, key + j0, c->kv_head, alpha, c->o, &pf);
        alpha = NULL; /* the first call rescaled */
        j0 += n;
    } while (j0 < nk);
}

/* Scores of keys [t0, t0 + nk) for the rows path, checked, soft-capped (as
 * above) and masked, in c->s as s[r][j]; prefetches the same keys' values
 * meanwhile when asked (the forward pass, not the weights pass). */
static void rows_scores(flash_ctx *c, int64_t t0, int nk, bool prefetch_values, bool check) {
    const sdpa_problem *p = c->p;
    const flash_plan *pl = c->pl;
    for (int j0 = 0, n; j0 < nk; j0 += n) { /* one call per run of rows (a paged problem's blocks) */
        n = rows_run(c, t0 + j0, nk - j0);
        const void *k = rows_source(c, &p->k, t0 + j0, c->kv_head);
        flash_prefetch pf = prefetch_of(c, &p->v, t0 + j0, c->kv_head, (int)pl->unit_kv_heads, p->dim_v,
                                        prefetch_values && !c->step_n ? n : 0);
        if (p->k.dtype == ATTN_F32)
            pl->kern->qk_rows(c->qp, pl->ldq, (int)pl->unit_kv_heads, (int)pl->sub_rows, p->dim, k, p->k.stride[1],
                              p->k.stride[2], n, c->s + j0, pl->tile_keys, &pf);
        else
            pl->kern->qk_rows_half(p->k.dtype, c->qp, pl->ldq, (int)pl->unit_kv_heads, (int)pl->sub_rows, p->dim,
                                   k, p->k.stride[1], p->k.stride[2], n, c->s + j0, pl->tile_keys, &pf);
    }
    if (check) attn__flash_check_scores(c, 0, pl->rows, t0, nk, c->s, 1, pl->tile_keys);
    if (logits_softcapped(p))
        for (int64_t r = 0; r < pl->rows; r++) pl->kern->softcap_n(c->s + r * pl->tile_keys, nk, softcap_base2(p));
    attn__flash_mask_scores(c, 0, pl->rows, t0, nk, c->s, 1, pl->tile_keys);
}

/* One online-softmax step and the P·V update for keys [t0, t0 + nk) and
 * every row of the unit, on the rows path (the rest of the item's keys run
 * up to hi). */
void attn__flash_rows_step(flash_ctx *c, int64_t t0, int nk, int64_t hi) {
    const sdpa_problem *p = c->p;
    const flash_plan *pl = c->pl;
    /* The scores pass prefetches this block's values, the values pass
     * the next block's keys: each pass finds its rows in L2. */
    const int next = (int)(hi - (t0 + nk) < pl->tile_keys ? hi - (t0 + nk) : pl->tile_keys);
    if (pl->copy_steps) { /* short blocks: the step's rows copied together, then read from the copy */
        copy_step(c, &p->k, t0, nk, c->step_k);
        copy_step(c, &p->v, t0, nk, c->step_v);
        c->step_t0 = t0;
        c->step_n = nk;
    }
    rows_scores(c, t0, nk, true, true);
    pl->kern->softmax_rows(c->s, pl->tile_keys, (int)pl->rows, nk, c->m, c->l, c->alpha);
    if (c->careful)
        attn__flash_rows_values_careful(c, t0, nk, t0 + nk, next);
    else
        attn__flash_rows_pv_runs(c, c->s, nk, t0, c->alpha, t0 + nk, next);
    c->step_n = 0;
}

/* The weights of keys [t0, t0 + nk) of every row of the unit, from its
 * final state (forward.c, unit_weights): the scores again, then
 * w = exp2(s − m) / l straight into the weights table. */
void attn__flash_rows_weights(flash_ctx *c, int64_t t0, int nk, float *weights) {
    const flash_plan *pl = c->pl;
    const int64_t S = c->p->len_kv, step = pl->tile_keys;
    rows_scores(c, t0, nk, false, false);
    for (int64_t r = 0; r < pl->rows; r++)
        pl->kern->probs_rows(c->s + r * step, step, 1, nk, c->m + r, c->inv_l + r, weights_row(c, weights, r) + t0, S);
}

/* Careful mode, rows path: V is read in place, so the keys whose value row
 * holds a NaN or Inf in some kv head are left out of the vectorised runs of
 * pv_rows; the finite heads of such a key are added by pv_rows on their own
 * (the very operations of a run), and the rows of a non-finite head that
 * see the key are marked for the exact path.  The first run prefetches
 * keys [pf_key, pf_key + pf_rows). */
void attn__flash_rows_values_careful(flash_ctx *c, int64_t t0, int nk, int64_t pf_key, int pf_rows) {
    const flash_plan *pl = c->pl;
    const int heads = (int)pl->unit_kv_heads, per_head = (int)pl->sub_rows;
    const int64_t lds = pl->tile_keys, dim_v = c->p->dim_v;
    const flash_prefetch no_prefetch = {NULL, 0, 0, 0, 1, 0};
    const float *alpha = c->alpha;
    int run0 = 0;
    for (int j = 0; j <= nk; j++) {
        bool finite = true;
        for (int h = 0; j < nk && h < heads && finite; h++) finite = attn__flash_value_row_finite(c, t0 + j, c->kv_head + h);
        if (j < nk && finite) continue;
        attn__flash_rows_pv_runs(c, c->s + run0, j - run0, t0 + run0, alpha, pf_key, run0 == 0 ? pf_rows : 0);
        alpha = NULL; /* the first run applied the rescaling */
        if (j == nk) break;
        for (int h = 0; h < heads; h++) {
            const int r0 = h * per_head;
            if (attn__flash_value_row_finite(c, t0 + j, c->kv_head + h)) {
                attn__flash_rows_pv(c, c->s + r0 * lds + j, 1, per_head, 1, t0 + j, c->kv_head + h, NULL, c->o + r0 * dim_v,
                        &no_prefetch);
                continue;
            }
            for (int r = r0; r < r0 + per_head; r++)
                if (c->row[r].valid && attn__flash_row_sees(c, r, t0 + j)) c->exact[r] = 1;
        }
        run0 = j + 1;
    }
}
