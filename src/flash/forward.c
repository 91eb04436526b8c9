/*
 * forward.c — the flash attention forward pass: the portable loop nest
 * (tiling, online-softmax state, masking, threading, the decode split and its
 * merge), written once; the arithmetic of each tile is done by the
 * micro-kernels of src/isa/flash_table.h for the instruction set the
 * registry (src/isa/isa.h) chose at run time.
 *
 * Shape legend: q [B, L, Hq, D]  k [B, S, Hkv, D]  v [B, S, Hkv, Dv]
 *               out [B, L, Hq, Dv]  weights [B, Hq, L, S]  lse [B, Hq, L]
 *
 * Work decomposition (a function of the shapes only, never of the thread
 * count, so every output element is computed by the same sequence of
 * operations whatever the number of threads):
 *
 *   unit   = tile path (many queries): (batch b, kv head, block of the
 *            group's query heads, group of query blocks); its rows are the
 *            (position, head) pairs of 8 tiles of Br rows, up to 32 in
 *            long problems (plan_subtiles), and every K/V tile it loads is
 *            used by all of them (GQA sharing, and 8-32x fewer K/V copies
 *            than one tile per load).
 *            rows path (few queries, decoding): (batch b), every kv head and
 *            all their query rows, so that K and V are read key by key, each
 *            key's row of all heads at once: contiguous memory.
 *   chunk  = a contiguous range of keys.  Problems with few units (decoding:
 *            one query against a long cache) split the keys into a fixed
 *            number of chunks; each (unit, chunk) item yields a partial
 *            state (m, l, acc) and the partials are merged in chunk order.
 *   tile   = Bc keys of one chunk: scores, mask, online-softmax step, P·V.
 *
 * Items are handed to OpenMP threads one at a time (dynamic schedule): each
 * item is computed whole by one thread, so which thread takes it changes no
 * bit, and a thread the OS preempts (a shared machine) holds up no one.
 * Under a causal mask the costliest units (a head's last queries) are
 * numbered, hence handed out, first, and the cheap ones fill the end.
 * Memory beyond the caller's tensors: one scratch area per thread (a few
 * tiles) and, when split, the partial states: neither grows with L or S.
 *
 * The loop nest is this file: an item's online softmax over its keys, the
 * unit's finish (outputs, lse, weights) and the split's merge.  Its parts:
 *   forward_plan.c     the decomposition and the scratch layout (flash_plan)
 *   forward_tiles.c    the tile path: packing, K/V tile copies, a tile's step
 *   forward_rows.c     the rows path: K and V read in place, a block's step
 *   forward_careful.c  non-finite values and overflow: the checks, the
 *                      careful recomputation of an item, the exact path (a
 *                      row recomputed in double by the reference)
 * with what they share in forward.h.
 */
#include "flash/flash.h"
#include "flash/forward.h"

#include "base/logits.h"
#include "base/progress.h"
#include "base/visibility.h"

#include <math.h>
#include <string.h>

#ifdef ATTN_HAVE_OPENMP
#include <omp.h>
#define FLASH_OMP(directive) _Pragma(directive)
#else
#define FLASH_OMP(directive)
#endif

static void ctx_init(flash_ctx *c, const sdpa_problem *p, const flash_plan *pl, float *scratch) {
    c->p = p;
    c->pl = pl;
    c->qp = scratch + pl->off_qp;
    c->kt = scratch + pl->off_kt;
    c->vt = scratch + pl->off_vt;
    c->s = scratch + pl->off_s;
    c->o = scratch + pl->off_o;
    c->m = scratch + pl->off_m;
    c->l = scratch + pl->off_l;
    c->alpha = scratch + pl->off_alpha;
    c->inv_l = scratch + pl->off_inv_l;
    c->row = (flash_row *)(void *)(scratch + pl->off_rows);
    c->exact = (uint8_t *)(void *)(scratch + pl->off_exact);
    c->mask_lo = scratch + pl->off_mask_lo;
    c->mask_hi = scratch + pl->off_mask_hi;
    c->row_acc = (double *)(void *)(scratch + pl->off_row_acc);
    c->out_row = scratch + pl->off_out_row;
    c->conv = scratch + pl->off_conv;
    c->qrows = (uint16_t *)(void *)(scratch + pl->off_qrows);
    c->step_k = pl->copy_steps ? (unsigned char *)(scratch + pl->off_step_k) : NULL;
    c->step_v = pl->copy_steps ? (unsigned char *)(scratch + pl->off_step_v) : NULL;
    c->step_n = 0;
    c->careful = false;
}

/* Sets up the rows of unit u and their key ranges.  Row r belongs to kv
 * head kv_head + r / (subtiles·sub_rows) and to subtile (r / sub_rows) mod
 * subtiles; within a subtile, query position and head run qi·Gt + g. */
static void unit_begin(flash_ctx *c, int64_t u) {
    const sdpa_problem *p = c->p;
    const flash_plan *pl = c->pl;
    int64_t query_group = u % pl->query_groups;
    if (pl->largest_first) query_group = pl->query_groups - 1 - query_group;
    int64_t rest = u / pl->query_groups;
    int64_t head_block = rest % pl->head_blocks;
    rest /= pl->head_blocks;
    int64_t kv_blocks = p->heads_kv / pl->unit_kv_heads;
    c->kv_head = rest % kv_blocks * pl->unit_kv_heads;
    c->b = rest / kv_blocks;
    c->any_begin = p->len_kv;
    c->any_end = 0;
    for (int64_t st = 0; st < pl->subtiles; st++) {
        c->sub_begin[st] = p->len_kv;
        c->sub_end[st] = 0;
    }
    for (int64_t r = 0; r < pl->rows; r++) {
        flash_row *row = &c->row[r];
        int64_t per_kv_head = pl->subtiles * pl->sub_rows;
        int64_t kv_head = c->kv_head + r / per_kv_head;
        int64_t st = r % per_kv_head / pl->sub_rows, in_sub = r % pl->sub_rows;
        int64_t head_in_group = head_block * pl->heads_per_block + in_sub % pl->heads_per_block;
        row->i = (query_group * pl->subtiles + st) * pl->queries_per_block + in_sub / pl->heads_per_block;
        row->h = kv_head * p->group + head_in_group;
        row->valid = row->i < p->len_q && head_in_group < p->group;
        row->begin = row->end = 0;
        if (!row->valid) continue;
        attn__visibility_key_range(p, c->b, row->i, &row->begin, &row->end);
        if (row->begin < row->end) {
            if (row->begin < c->sub_begin[st]) c->sub_begin[st] = row->begin;
            if (row->end > c->sub_end[st]) c->sub_end[st] = row->end;
        }
    }
    for (int64_t st = 0; st < pl->subtiles; st++) {
        if (c->sub_end[st] <= c->sub_begin[st]) {
            c->sub_begin[st] = c->sub_end[st] = 0;
            continue;
        }
        if (c->sub_begin[st] < c->any_begin) c->any_begin = c->sub_begin[st];
        if (c->sub_end[st] > c->any_end) c->any_end = c->sub_end[st];
    }
    if (c->any_end <= c->any_begin) c->any_begin = c->any_end = 0;
}

/* Packs the unit's queries in the layout of its path's kernels. */
static void pack_queries(flash_ctx *c) {
    if (c->pl->rows_path)
        attn__flash_rows_pack_queries(c);
    else
        attn__flash_tile_pack_queries(c);
}

/* One online-softmax step and the P·V update for keys [t0, t0 + nk) and
 * every row of the unit, on its path; the item's keys run up to hi. */
static void unit_accumulate(flash_ctx *c, int64_t t0, int nk, int64_t hi) {
    if (c->pl->rows_path)
        attn__flash_rows_step(c, t0, nk, hi);
    else
        attn__flash_tile_step(c, t0, nk, hi);
}

/* The weights of a finished unit: a second pass over the keys from the
 * saved state, w = exp2(s − m) / l, the forward's own probabilities. */
static void unit_weights(flash_ctx *c, float *weights) {
    const sdpa_problem *p = c->p;
    const flash_plan *pl = c->pl;
    int64_t S = p->len_kv, step = pl->tile_keys;
    for (int64_t r = 0; r < pl->rows; r++) {
        if (!c->row[r].valid) continue;
        int64_t st = r % (pl->subtiles * pl->sub_rows) / pl->sub_rows;
        float *w_row = weights_row(c, weights, r);
        memset(w_row, 0, sizeof(float) * (size_t)c->sub_begin[st]);
        memset(w_row + c->sub_end[st], 0, sizeof(float) * (size_t)(S - c->sub_end[st]));
    }
    for (int64_t st = 0; st < pl->subtiles; st++) {
        for (int64_t t0 = c->sub_begin[st]; t0 < c->sub_end[st]; t0 += step) {
            int nk = (int)(c->sub_end[st] - t0 < step ? c->sub_end[st] - t0 : step);
            if (pl->rows_path)
                attn__flash_rows_weights(c, t0, nk, weights);
            else
                attn__flash_tile_weights(c, st, t0, nk, weights);
        }
    }
}

/* The normaliser of row r from its final state (m, l): inv_l[r], the
 * factor of its accumulator and of exp2(s − m) that gives the weights, and
 * its lse.  With a sink (logits.h) the denominator gains exp(sink): with
 * M = max(m, sink·log2 e) in base 2, l' = l·2^(m − M) + 2^(sink·log2 e − M)
 * in double, inv_l = 2^(m − M) / l' and lse = M·ln 2 + ln l'; a row that saw
 * nothing (l = 0) then gets inv_l = 0 and lse = sink. */
static float row_normaliser(const flash_ctx *c, int64_t r, float *inv_l) {
    const float m = c->m[r], l = c->l[r];
    const double sink = logits_sink(c->p, c->row[r].h);
    if (sink == -INFINITY) {
        *inv_l = l > 0.0f ? 1.0f / l : 0.0f;
        return l > 0.0f ? (float)((double)m * LN2 + log((double)l)) : -INFINITY;
    }
    const double sink2 = sink * LOG2E, top = l > 0.0f && (double)m > sink2 ? (double)m : sink2;
    const double kept = l > 0.0f ? exp2((double)m - top) : 0.0;
    const double denominator = (double)l * kept + exp2(sink2 - top);
    *inv_l = (float)(kept / denominator);
    return (float)(top * LN2 + log(denominator));
}

/* Writes out, lse and (when asked) the weights of the unit from its final
 * state m, l, acc; then recomputes the rows marked for the exact path, and
 * those whose state the fp32 loop could not get right, with the reference's
 * row routine.  The accumulators of unmarked rows are finite (item_run,
 * unit_merge) and l >= 1 where anything was seen, so every output written
 * here is finite; a row that saw nothing gets acc · 0 = 0. */
static void unit_finish(flash_ctx *c, attn_tensor *out, float *weights, float *lse) {
    const sdpa_problem *p = c->p;
    const flash_plan *pl = c->pl;
    for (int64_t r = 0; r < pl->rows; r++) {
        const flash_row *row = &c->row[r];
        if (!row->valid) { /* a padding row: its head may lie past Hq */
            c->inv_l[r] = c->l[r] > 0.0f ? 1.0f / c->l[r] : 0.0f;
            continue;
        }
        const float row_lse = row_normaliser(c, r, &c->inv_l[r]);
        if (attn__flash_state_untrusted(c, r)) c->exact[r] = 1;
        /* A half out gets its row rounded once, from the float result. */
        void *out_at = problem_row_any(out, c->b, row->i, row->h);
        float *out_row = out->dtype == ATTN_F32 ? out_at : c->out_row;
        const float *acc = acc_at(c, r, 0);
        const int64_t step = pl->rows_path ? 1 : pl->sub_rows;
        for (int64_t d = 0; d < p->dim_v; d++) out_row[d] = acc[d * step] * c->inv_l[r];
        if (out->dtype != ATTN_F32) pl->kern->narrow(out_row, out->dtype, out_at, p->dim_v);
        if (lse) lse[(c->b * p->heads_q + row->h) * p->len_q + row->i] = row_lse;
    }
    if (weights) unit_weights(c, weights);
    attn__flash_recompute_marked(c, out, weights, lse);
}

/* The online softmax of the item's keys [lo, hi) from a fresh state. */
static void item_accumulate(flash_ctx *c, int64_t lo, int64_t hi) {
    const flash_plan *pl = c->pl;
    for (int64_t r = 0; r < pl->rows; r++) {
        c->m[r] = -INFINITY;
        c->l[r] = 0.0f;
        c->exact[r] = 0;
    }
    memset(c->o, 0, sizeof(float) * (size_t)(pl->rows * c->p->dim_v));
    for (int64_t t0 = lo; t0 < hi; t0 += pl->tile_keys)
        unit_accumulate(c, t0, (int)(hi - t0 < pl->tile_keys ? hi - t0 : pl->tile_keys), hi);
}

/* Item (unit, chunk): the online softmax over the chunk's keys that some
 * row of the unit may see.  Unsplit problems finish the unit at once; split
 * ones leave a partial state (m, l, the exact marks, acc as [rows][Dv]) for
 * the merge.  When the accumulators came out non-finite, the item is
 * computed again in careful mode (drop_nonfinite_values_tile,
 * rows_values_careful), and the rows whose accumulators are still not
 * finite (a NaN or Inf in a value every row of the tile sees, a sum that
 * overflowed) are marked: the fast path pays one check per item, and only
 * items whose values hold a NaN or Inf or overflow pay twice. */
static void item_run(flash_ctx *c, int64_t item, float *partials, attn_tensor *out,
                     float *weights, float *lse) {
    const sdpa_problem *p = c->p;
    const flash_plan *pl = c->pl;
    int64_t unit = item / pl->chunks, chunk = item % pl->chunks;
    unit_begin(c, unit);
    int64_t lo = chunk * pl->chunk_keys, hi = lo + pl->chunk_keys;
    if (lo < c->any_begin) lo = c->any_begin;
    if (hi > c->any_end) hi = c->any_end;

    if (lo < hi || (pl->chunks == 1 && weights)) pack_queries(c);
    item_accumulate(c, lo, hi);
    if (attn__flash_values_not_finite(c, false)) {
        c->careful = true;
        item_accumulate(c, lo, hi);
        c->careful = false;
        attn__flash_values_not_finite(c, true);
    }
    if (pl->chunks == 1) {
        unit_finish(c, out, weights, lse);
        return;
    }
    float *part = partials + (size_t)item * pl->partial_floats;
    memcpy(part, c->m, sizeof(float) * (size_t)pl->rows);
    memcpy(part + pl->rows, c->l, sizeof(float) * (size_t)pl->rows);
    for (int64_t r = 0; r < pl->rows; r++) part[2 * pl->rows + r] = c->exact[r];
    float *part_acc = part + 3 * pl->rows;
    for (int64_t r = 0; r < pl->rows; r++)
        for (int64_t d = 0; d < p->dim_v; d++) part_acc[r * p->dim_v + d] = *acc_at(c, r, d);
}

/* Merges the chunks of unit u exactly, in chunk order: with M = max_c m_c,
 * w_c = 2^(m_c − M), l = sum_c l_c·w_c and acc = sum_c acc_c·w_c, in double.
 * A row marked in any chunk stays marked, and so does a row with a NaN
 * max in some chunk (the max below would skip it) or a merged sum that does
 * not fit a float; unit_finish checks the merged state as it checks an
 * unsplit one. */
static void unit_merge(flash_ctx *c, int64_t u, const float *partials, attn_tensor *out,
                       float *weights, float *lse) {
    const sdpa_problem *p = c->p;
    const flash_plan *pl = c->pl;
    unit_begin(c, u);
    const float *first = partials + (size_t)(u * pl->chunks) * pl->partial_floats;
    double w[FLASH_TARGET_ITEMS]; /* the chunks' factors for one row (chunks <= FLASH_TARGET_ITEMS) */
    for (int64_t r = 0; r < pl->rows; r++) {
        float m_max = -INFINITY;
        c->exact[r] = 0;
        for (int64_t ch = 0; ch < pl->chunks; ch++) {
            const float *part = first + (size_t)ch * pl->partial_floats;
            float m_c = part[r];
            if (m_c > m_max) m_max = m_c;
            if (isnan(m_c) || part[2 * pl->rows + r] != 0.0f) c->exact[r] = 1;
        }
        double l_sum = 0.0;
        for (int64_t d = 0; d < p->dim_v; d++) *acc_at(c, r, d) = 0.0f;
        if (m_max != -INFINITY) {
            for (int64_t ch = 0; ch < pl->chunks; ch++) {
                const float *part = first + (size_t)ch * pl->partial_floats;
                w[ch] = exp2((double)part[r] - (double)m_max);
                l_sum += w[ch] * (double)part[pl->rows + r];
            }
            for (int64_t d = 0; d < p->dim_v; d++) {
                double acc = 0.0;
                for (int64_t ch = 0; ch < pl->chunks; ch++)
                    acc += w[ch] * (double)first[(size_t)ch * pl->partial_floats + 3 * pl->rows + r * p->dim_v + d];
                const float merged = (float)acc;
                *acc_at(c, r, d) = merged;
                if (!isfinite(merged)) c->exact[r] = 1;
            }
        }
        c->m[r] = m_max;
        c->l[r] = (float)l_sum;
    }
    if (weights) pack_queries(c);
    unit_finish(c, out, weights, lse);
}

attn_status attn__flash_forward(const sdpa_problem *p, void *workspace, attn_tensor *out,
                                    float *weights, float *lse) {
    flash_plan pl;
    attn__flash_plan_make(p, &pl);
    float *partials = workspace; /* 64-byte aligned by the front door */
    float *scratch_all = partials + pl.partial_floats * (size_t)pl.items;
    progress_meter meter; /* one unit per item, and per merged unit */
    attn__progress_begin(&meter, &p->opt, pl.items + (pl.chunks > 1 ? pl.units : 0));

    FLASH_OMP("omp parallel num_threads(pl.threads) if (pl.threads > 1)")
    {
#ifdef ATTN_HAVE_OPENMP
        int tid = omp_get_thread_num();
#else
        int tid = 0;
#endif
        flash_ctx c;
        ctx_init(&c, p, &pl, scratch_all + (size_t)tid * pl.thread_floats);
        FLASH_OMP("omp for schedule(dynamic, 1)")
        for (int64_t item = 0; item < pl.items; item++) {
            item_run(&c, item, partials, out, weights, lse);
            progress_add(&meter, 1, tid == 0);
        }
        if (pl.chunks > 1) {
            FLASH_OMP("omp for schedule(dynamic, 1)")
            for (int64_t u = 0; u < pl.units; u++) {
                unit_merge(&c, u, partials, out, weights, lse);
                progress_add(&meter, 1, tid == 0);
            }
        }
    }
    attn__progress_end(&meter);
    return ATTN_OK;
}
