/*
 * forward_tiles.c — the flash forward's tile path (many queries: prefill):
 * a unit's rows lie in the lanes of the tile kernels, Br (query position ×
 * head of one GQA group) a subtile; each K/V tile of Bc keys is copied
 * once (widened to float, or rounded to bf16 for precision fast's native
 * kernels) with a row stride of an odd number of cache lines, and used by
 * every subtile of the unit: scores, their check, soft-cap and mask, the
 * online-softmax step and P·V.
 */
#include "flash/forward.h"

#include "base/logits.h"

#include <string.h>

/* The fast path's packed queries qp2[d / 2][r][d % 2] (flash_table.h): each
 * row widened, scaled, rounded to bf16 and padded with 0 to a multiple of
 * 32 widths, row-major in c->qrows; then its 32-bit pairs transposed into
 * place (a padding row is zeros). */
static void pack_queries_bf16(flash_ctx *c, float factor) {
    const sdpa_problem *p = c->p;
    const flash_plan *pl = c->pl;
    const int64_t br = pl->sub_rows, dp = round_up(p->dim, 32);
    for (int64_t st = 0; st < pl->subtiles; st++) {
        for (int64_t r = 0; r < br; r++) {
            const flash_row *row = &c->row[st * br + r];
            uint16_t *q_r = c->qrows + r * dp;
            memset(q_r, 0, sizeof(uint16_t) * (size_t)dp);
            if (!row->valid) continue;
            pl->kern->widen(problem_row_any(&p->q, c->b, row->i, row->h), p->q.dtype, c->conv, p->dim);
            for (int64_t d = 0; d < p->dim; d++) c->conv[d] *= factor;
            pl->kern->narrow(c->conv, ATTN_BF16, q_r, p->dim);
        }
        pl->kern->transpose_32((const uint32_t *)(const void *)c->qrows, dp / 2, (int)br, dp / 2,
                               (uint32_t *)(void *)(c->qp + st * pl->qp_sub), br);
    }
}

/* Packs the unit's queries for the tile kernels, per subtile qp[d][r] (the
 * fast path's bf16 layout: pack_queries_bf16), multiplied by scale·log2(e)
 * so that scores come out in base 2.  Filled 16 widths at a time across
 * all rows of a subtile, so that the (cold) loads of many rows are in
 * flight together. */
void attn__flash_tile_pack_queries(flash_ctx *c) {
    const sdpa_problem *p = c->p;
    const flash_plan *pl = c->pl;
    const float factor = query_factor(p);
    if (pl->fast_qk) {
        pack_queries_bf16(c, factor);
        return;
    }
    enum { WIDTHS = 16 };
    const int64_t br = pl->sub_rows, q_bytes = problem_elem_bytes(&p->q);
    float q_part[WIDTHS];
    for (int64_t st = 0; st < pl->subtiles; st++) {
        float *qp_sub = c->qp + st * pl->qp_sub;
        for (int64_t d0 = 0; d0 < p->dim; d0 += WIDTHS) {
            int64_t n = p->dim - d0 < WIDTHS ? p->dim - d0 : WIDTHS;
            for (int64_t r = 0; r < br; r++) {
                const flash_row *row = &c->row[st * br + r];
                if (row->valid)
                    pl->kern->widen((const char *)problem_row_any(&p->q, c->b, row->i, row->h) + d0 * q_bytes,
                                    p->q.dtype, q_part, n);
                for (int64_t e = 0; e < n; e++) qp_sub[(d0 + e) * br + r] = row->valid ? q_part[e] * factor : 0.0f;
            }
        }
    }
}

/* Copies rows [t0, t0 + n) of kv head `head` of t (K or V, any dtype:
 * widened to float as they are copied) to dst, ld_dst floats apart, then
 * zeroes rows [n, padded). */
static void copy_rows(const flash_ctx *c, float *restrict dst, int64_t ld_dst, const attn_tensor *t,
                      int64_t t0, int64_t head, int n, int padded, int64_t width) {
    for (int j = 0; j < padded; j++) {
        float *restrict d = dst + j * ld_dst;
        if (j < n)
            c->pl->kern->widen(problem_kv_row(c->p, t, c->b, t0 + j, head), t->dtype, d, width);
        else
            for (int64_t e = 0; e < width; e++) d[e] = 0.0f;
    }
}

/* Row `key` of kv head `head` of t (a half tensor) as bf16: in place when
 * t is bf16, else widened into c->conv and rounded into `tmp` (width
 * elements, past the first max(D, Dv) floats of c->conv). */
static const uint16_t *row_bf16(const flash_ctx *c, const attn_tensor *t, int64_t key, int64_t head,
                                int64_t width, uint16_t *tmp) {
    const void *src = problem_kv_row(c->p, t, c->b, key, head);
    if (t->dtype == ATTN_BF16) return src;
    c->pl->kern->widen(src, t->dtype, c->conv, width);
    c->pl->kern->narrow(c->conv, ATTN_BF16, tmp, width);
    return tmp;
}

/* The fast path's key tile kt2: rows [t0, t0 + nk) in bf16, each padded
 * with 0 to a multiple of 32 widths, then zero rows up to a multiple of 48. */
static void copy_keys_bf16(flash_ctx *c, int64_t t0, int nk) {
    const flash_plan *pl = c->pl;
    const int64_t dim = c->p->dim, width = round_up(dim, 32);
    const int padded = (int)round_up(nk, 48);
    uint16_t *kt2 = (uint16_t *)(void *)c->kt;
    uint16_t *tmp = (uint16_t *)(void *)(c->conv + dim);
    for (int j = 0; j < padded; j++) {
        uint16_t *d = kt2 + j * pl->ldk2;
        if (j < nk) {
            memcpy(d, row_bf16(c, &c->p->k, t0 + j, c->kv_head, dim, tmp), sizeof(uint16_t) * (size_t)dim);
            memset(d + dim, 0, sizeof(uint16_t) * (size_t)(width - dim));
        } else {
            memset(d, 0, sizeof(uint16_t) * (size_t)width);
        }
    }
}

/* The fast path's value tile vT (flash_table.h): keys [t0, t0 + nk) paired
 * into vp (an odd nk's last pair completed with 0, zero pairs up to a
 * multiple of 16), then vp's 32-bit pairs transposed: vT[d][j]. */
static void copy_values_bf16(flash_ctx *c, int64_t t0, int nk) {
    const flash_plan *pl = c->pl;
    const int64_t dim_v = c->p->dim_v;
    uint16_t *vp = (uint16_t *)(void *)(c->vt + (pl->off_vp - pl->off_vt));
    uint16_t *tmp_a = (uint16_t *)(void *)(c->conv + dim_v), *tmp_b = tmp_a + dim_v;
    const int pairs = (nk + 1) / 2, padded = (int)round_up(pairs, 16);
    for (int j = 0; j < nk; j += 2) {
        const uint16_t *a = row_bf16(c, &c->p->v, t0 + j, c->kv_head, dim_v, tmp_a);
        const uint16_t *b = j + 1 < nk ? row_bf16(c, &c->p->v, t0 + j + 1, c->kv_head, dim_v, tmp_b) : NULL;
        pl->kern->interleave_bf16(a, b, vp + j / 2 * pl->ldvp * 2, dim_v);
    }
    for (int jp = pairs; jp < padded; jp++) memset(vp + jp * pl->ldvp * 2, 0, sizeof(uint32_t) * (size_t)dim_v);
    pl->kern->transpose_32((const uint32_t *)(const void *)vp, pl->ldvp, padded, dim_v, (uint32_t *)(void *)c->vt,
                           pl->ldvt / 2);
}

/* Copies keys [t0, t0 + nk) into c->kt, zero-padded to a whole key block. */
static void copy_keys(flash_ctx *c, int64_t t0, int nk) {
    if (c->pl->fast_qk)
        copy_keys_bf16(c, t0, nk);
    else
        copy_rows(c, c->kt, c->pl->ldk, &c->p->k, t0, c->kv_head, nk, (int)round_up(nk, c->pl->kern->key_block),
                  c->p->dim);
}

/* Scores of keys [t0, t0 + nk) for subtile st of the tile path (K tile
 * already in c->kt), checked (when `check`: the forward pass, not the
 * weights pass, which recomputes the same numbers), soft-capped (logits.h:
 * on the raw scores, before bias, ALiBi and masks) and masked, in c->s as
 * s[j][r]; prefetches pf meanwhile. */
static void subtile_scores(flash_ctx *c, int64_t st, int64_t t0, int nk, const flash_prefetch *pf,
                           bool check) {
    const flash_plan *pl = c->pl;
    const float *qp_sub = c->qp + st * pl->qp_sub;
    if (pl->fast_qk)
        pl->kern->qk_tile_bf16((const uint16_t *)(const void *)qp_sub, c->p->dim, (const uint16_t *)(const void *)c->kt,
                               pl->ldk2, nk, c->s, pf);
    else
        pl->kern->qk_tile(qp_sub, c->p->dim, c->kt, pl->ldk, nk, c->s, pf);
    if (check) attn__flash_check_scores(c, st * pl->sub_rows, pl->sub_rows, t0, nk, c->s, pl->sub_rows, 1);
    if (logits_softcapped(c->p)) pl->kern->softcap_n(c->s, nk * pl->sub_rows, softcap_base2(c->p));
    attn__flash_mask_scores(c, st * pl->sub_rows, pl->sub_rows, t0, nk, c->s, pl->sub_rows, 1);
}

/* One online-softmax step and the P·V update for keys [t0, t0 + nk) and
 * every row of the unit, on the tile path.  The bf16 tile kernels prefetch
 * the K/V rows of the next step, [t0 + nk, hi), a share per subtile. */
void attn__flash_tile_step(flash_ctx *c, int64_t t0, int nk, int64_t hi) {
    const sdpa_problem *p = c->p;
    const flash_plan *pl = c->pl;
    const ukernel_table *kern = pl->kern;
    copy_keys(c, t0, nk);
    if (pl->fast_pv)
        copy_values_bf16(c, t0, nk);
    else
        copy_rows(c, c->vt, pl->ldv, &p->v, t0, c->kv_head, nk, nk, p->dim_v);

    /* Keys past a subtile's range are hidden from all its rows: the
     * subtile skips them, and the whole tile when it lies outside. */
    int nk_sub[FLASH_SUBTILES_MAX], active = 0;
    for (int64_t st = 0; st < pl->subtiles; st++) {
        int64_t end = t0 + nk < c->sub_end[st] ? t0 + nk : c->sub_end[st];
        nk_sub[st] = end > t0 && c->sub_begin[st] < t0 + nk ? (int)(end - t0) : 0;
        active += nk_sub[st] > 0;
    }
    if (c->careful) attn__flash_drop_nonfinite_values_tile(c, t0, nk, nk_sub);
    /* The next tile's rows are prefetched by the bf16 kernels only: for
     * the float ones, whose rows lie 4-8 KiB apart (one page and the same
     * 8 L1 sets each), the requests cost the kernels more than they save
     * the copy, into L1 or L2 alike (docs/kernels.md §6, v9). */
    int64_t next = hi - (t0 + nk) < pl->tile_keys ? hi - (t0 + nk) : pl->tile_keys;
    if (!pl->fast_qk && !pl->fast_pv) next = 0;
    int64_t share = active ? ceil_div(next, active) : 0, first = 0;
    for (int64_t st = 0; st < pl->subtiles; st++) {
        if (!nk_sub[st]) continue;
        int rows = (int)(next - first < share ? next - first : share);
        flash_prefetch pf_k = prefetch_of(c, &p->k, t0 + nk + first, c->kv_head, 1, p->dim, rows);
        flash_prefetch pf_v = prefetch_of(c, &p->v, t0 + nk + first, c->kv_head, 1, p->dim_v, rows);
        if (rows > 0) first += rows;
        float *m = c->m + st * pl->sub_rows, *l = c->l + st * pl->sub_rows;
        float *alpha = c->alpha + st * pl->sub_rows;
        float *o_sub = c->o + st * p->dim_v * pl->sub_rows;
        subtile_scores(c, st, t0, nk_sub[st], &pf_k, true);
        if (pl->fast_pv) {
            kern->softmax_tile_bf16(c->s, nk_sub[st], m, l, alpha);
            kern->pv_tile_bf16((const uint16_t *)(const void *)c->s, nk_sub[st], (const uint16_t *)(const void *)c->vt,
                               pl->ldvt, p->dim_v, alpha, o_sub, &pf_v);
        } else {
            kern->softmax_tile(c->s, nk_sub[st], m, l, alpha);
            kern->pv_tile(c->s, nk_sub[st], c->vt, pl->ldv, p->dim_v, alpha, o_sub, &pf_v);
        }
    }
}

/* The weights of keys [t0, t0 + nk) of subtile st, from the unit's final
 * state (forward.c, unit_weights): the scores again, w = exp2(s − m) / l in
 * place, then each valid row's into the weights table. */
void attn__flash_tile_weights(flash_ctx *c, int64_t st, int64_t t0, int nk, float *weights) {
    const flash_plan *pl = c->pl;
    const flash_prefetch no_prefetch = {NULL, 0, 0, 0, 1, 0};
    copy_keys(c, t0, nk);
    subtile_scores(c, st, t0, nk, &no_prefetch, false);
    pl->kern->probs_tile(c->s, nk, c->m + st * pl->sub_rows, c->inv_l + st * pl->sub_rows);
    for (int64_t in_sub = 0; in_sub < pl->sub_rows; in_sub++) {
        int64_t r = st * pl->sub_rows + in_sub;
        if (!c->row[r].valid) continue;
        float *w_row = weights_row(c, weights, r) + t0;
        for (int j = 0; j < nk; j++) w_row[j] = c->s[j * pl->sub_rows + in_sub];
    }
}
