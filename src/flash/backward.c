/*
 * backward.c — the flash backward of attention: FlashAttention-2's
 * recomputation scheme on tiles, never materialising L x S, bit-identical
 * for every thread count.
 *
 * Shape legend: q, dq [B, L, Hq, D]  k, dk [B, S, Hkv, D]  v, dv [B, S, Hkv, Dv]
 *               out, dout [B, L, Hq, Dv]  lse, di [B, Hq, L]
 *   tiles: Br = 128 query rows x Bc = 64 keys; Dp, Dvp = D, Dv rounded up to 16
 *   unit = one (batch, kv head) with its G = Hq / Hkv query heads
 *   chunk = a fixed run of key tiles of a unit; dq_partial [chunks, G, Lp, Dp]
 *
 * The forward, per query row i of head h (kv head g = h / G):
 *   s_ij = scale * dot(q_i, k_j) + bias_ij     p_ij = exp(s_ij - lse_i)
 *   o_i  = sum_j p_ij v_j
 * and its backward, per (query tile, key tile) pair, each line below quoting
 * the forward line it differentiates:
 *   di_i  = dot(dout_i, o_i)          (= sum_j p_ij dp_ij, computed once per row)
 *   p_ij  = exp2(log2e * (s_ij - lse_i))      recomputed from q, k and lse
 *   o_i = sum_j p_ij v_j          so: dp_ij = dot(dout_i, v_j),  dv_j += p_ij dout_i
 *   p_ij = softmax_j(s_ij)        so: ds_ij = p_ij (dp_ij - di_i)
 *   s_ij = scale q_i.k_j + bias   so: dq_i += scale ds_ij k_j,  dk_j += scale ds_ij q_i
 * The score stage of logits.h: ALiBi is a bias (mask_tile adds it); with
 * soft-capping, s_ij = softcap(raw_ij) + ..., so ds_ij is multiplied by
 * softcap'(raw_ij) = 1 - tanh^2 before it enters dq and dk; a sink is a
 * logit without a value, already in lse (p_ij = exp(s_ij - lse_i) holds
 * as is), and its gradient, dsink_h = -sum_i exp(sink_h - lse_i) di_i, is
 * summed at the end (sinks_backward).
 *
 * Non-finite values and overflow (docs/semantics.md, "Numbers and
 * errors"): the fp32 tiles must never see what they cannot compute, because
 * a NaN that reaches dK or dV of a key tile cannot be taken out again.  So,
 * before any tile:
 *   - a row that contributes nothing (lse = -inf) or that fp32 cannot
 *     compute (a NaN or Inf in q, dout or out, an lse that is NaN, +inf, or
 *     so large that the recomputed exponent s·c − lse·log2e loses its units
 *     to rounding) has its packed q and dout zeroed and nl = -inf: it adds
 *     exactly 0 to every tile.  The second kind is marked (`exact`);
 *   - a key whose k or v holds a NaN or Inf has that row zeroed in the
 *     packed tile: hidden from a row, it is nothing to it; seen by a row,
 *     that row's forward is not finite, so the row is marked;
 * and per (query tile, key tile) pair, one all_finite pass over dS finds
 * the elements whose fp32 score overflowed: they are recomputed in double
 * (repair_elements).  At the end the marked rows are recomputed by the
 * reference's row backward, in double (attn__ref_backward_unit), which adds
 * their share to dk and dv and writes their dq.
 *
 * Determinism (no atomics, no order that depends on the threads): the work
 * items are (unit, chunk) pairs, and every item is computed by one thread in
 * a fixed order: for each key tile of its chunk, for each query head of the
 * group, for each query tile.  dk and dv of a key tile are complete within
 * its item; dq gets one partial per chunk, and the partials are summed in
 * chunk order afterwards.  The number of chunks depends on the shapes only
 * (never on the thread count), so every thread count adds the same numbers
 * in the same order.
 *
 * Kernel versions (newest first; measurements in docs/backward.md; A/B
 * runs alternated in one process, compared in FLOPs per second of CPU time,
 * because the machine is shared; L = S = 4096, D = 128):
 *   v5  work items handed out largest first (structurally visible tile pairs
 *       per key chunk): a causal unit's first chunk has ~3x the work of its
 *       last, and a big item drawn last kept the other thread waiting.
 *   v4  key tiles in groups of KG = 4 (packed K, V and dk, dv accumulators of
 *       the group kept per thread while the query tiles sweep them): q, dout
 *       and the dq partial stream from L3 a quarter as often.  +5-10% with 2
 *       threads, Hq = 4; same results to the bit.  KG = 2: +-0%; 8 and 16:
 *       like 4 with more scratch.  Also tried: blocking the gemm's k by 64
 *       so that its B panel (16 KB) stays in L1: +-0%, dropped.
 *   v3  Br = 128 (Bc = 64): +4-5% over v2 (one thread).  Tried and dropped: Br = Bc = 128
 *       (-3..-6%), Br = 128 with Bc = 32 (-8..-14%), Br = 96 (+3%), software
 *       prefetch of the next query tile's q, dout and dq rows (+-0%: the
 *       hardware prefetchers already follow the packed tiles).
 *   v2  q, dout, -lse*log2(e) and di packed once per call instead of per
 *       (query tile, key tile) pair: the per-pair copies were 15% of the time.
 *   v1  64 x 64 tiles, dq partial per key chunk, 5 gemm calls per pair.
 */
#include "flash/flash.h"

#include "base/logits.h"
#include "base/progress.h"
#include "base/threads.h"
#include "base/visibility.h"
#include "isa/isa.h"
#include "ref/ref.h"

#include <math.h>
#include <string.h>

#ifdef ATTN_HAVE_OPENMP
#include <omp.h>
#endif

enum {
    BR = 128,          /* query rows per tile                                   */
    BC = 64,           /* keys per tile                                         */
    KG = 4,            /* key tiles packed and swept together (see run_item)    */
    TARGET_ITEMS = 32, /* aim for this many work items, splitting units in chunks */
    MAX_CHUNKS = 16
};
/* The most memory the dq partials of one wave may take (shapes decide how
 * many units a wave holds; a single unit may exceed it).  Tests lower it to
 * reach the many-wave path on small problems. */
#define PARTIAL_BUDGET_DEFAULT ((int64_t)256 << 20)
static int64_t partial_budget = PARTIAL_BUDGET_DEFAULT;

void attn__flash_backward_set_partial_budget(int64_t bytes) {
    partial_budget = bytes > 0 ? bytes : PARTIAL_BUDGET_DEFAULT;
}


/* How one call is cut into work: everything here follows from the shapes
 * (and, for the scratch, the thread count), never the reverse. */
typedef struct plan {
    int64_t dp, dvp;              /* D, Dv rounded up to 16              */
    int64_t q_tiles, k_tiles, lp; /* tiles; Lp = q_tiles * Br            */
    int64_t units, chunks, tiles_per_chunk, wave_units;
    int64_t partial_floats;       /* of one (unit, chunk): G * Lp * Dp   */
    int64_t scratch_floats;       /* per thread                          */
    int threads;
    /* workspace layout, in bytes from its start (64-byte aligned) */
    size_t off_qp, off_dop, off_nl, off_di, off_exact, off_ranges, off_order, off_partial, off_scratch;
    size_t off_exact_scratch, total;
} plan;

static size_t align64(size_t x) { return (x + 63) & ~(size_t)63; }

static void make_plan(const sdpa_problem *p, plan *pl) {
    pl->dp = round_up(p->dim, 16);
    pl->dvp = round_up(p->dim_v, 16);
    pl->q_tiles = (p->len_q + BR - 1) / BR;
    pl->k_tiles = (p->len_kv + BC - 1) / BC;
    pl->lp = pl->q_tiles * BR;
    pl->units = p->batch * p->heads_kv;
    pl->partial_floats = p->group * pl->lp * pl->dp;

    int64_t chunks = (TARGET_ITEMS + pl->units - 1) / pl->units;
    int64_t most = pl->k_tiles < MAX_CHUNKS ? pl->k_tiles : MAX_CHUNKS;
    int64_t affordable = partial_budget / (pl->partial_floats * (int64_t)sizeof(float));
    if (chunks > most) chunks = most;
    if (chunks > affordable) chunks = affordable;
    if (chunks < 1) chunks = 1;
    pl->tiles_per_chunk = (pl->k_tiles + chunks - 1) / chunks;
    pl->chunks = (pl->k_tiles + pl->tiles_per_chunk - 1) / pl->tiles_per_chunk;
    int64_t wave = partial_budget / (pl->chunks * pl->partial_floats * (int64_t)sizeof(float));
    pl->wave_units = wave < 1 ? 1 : wave > pl->units ? pl->units : wave;

    /* Per thread: KG sets of the Kp, Kt, Vt, dK and dV tiles, S and dP (and
     * the soft-cap's derivative, when capped), and one row of out or dq in
     * float (widened out, or dq before narrowing). */
    pl->scratch_floats = KG * (BC * pl->dp + pl->dp * BC + pl->dvp * BC + BC * pl->dp + BC * pl->dvp) +
                         (logits_softcapped(p) ? 3 : 2) * BR * BC + (pl->dp > pl->dvp ? pl->dp : pl->dvp);
    /* 2.5 times the forward's FLOPs (DESIGN.md §5), on the tiles' widths */
    const double flops = 5.0 * (double)(p->batch * p->heads_q) * (double)p->len_q *
                         (double)p->len_kv * (double)(pl->dp + pl->dvp);
    pl->threads = attn__threads_for(p->opt.threads, flops, (double)(pl->wave_units * pl->chunks));

    const size_t rows = (size_t)(p->batch * p->heads_q * pl->lp);
    size_t at = 0;
    pl->off_qp = at;
    at = align64(at + sizeof(float) * rows * (size_t)pl->dp);
    pl->off_dop = at;
    at = align64(at + sizeof(float) * rows * (size_t)pl->dvp);
    pl->off_nl = at;
    at = align64(at + sizeof(float) * rows);
    pl->off_di = at;
    at = align64(at + sizeof(float) * rows);
    pl->off_exact = at; /* one mark per (batch, query head, position) */
    at = align64(at + (size_t)(p->batch * p->heads_q * p->len_q));
    pl->off_ranges = at;
    at = align64(at + sizeof(int64_t) * 2 * (size_t)(p->batch * p->len_q));
    pl->off_order = at; /* chunk work [B, chunks], then 2 x wave items of (work, item) */
    at = align64(at + sizeof(int64_t) * (size_t)(p->batch * pl->chunks + 4 * pl->wave_units * pl->chunks));
    pl->off_partial = at;
    at = align64(at + sizeof(float) * (size_t)(pl->wave_units * pl->chunks * pl->partial_floats));
    pl->off_scratch = at;
    at = align64(at + sizeof(float) * (size_t)(pl->scratch_floats * pl->threads));
    pl->off_exact_scratch = at; /* the reference's, for the marked rows, one unit at a time */
    at += attn__ref_backward_workspace_size(p);
    pl->total = at;
}

size_t attn__flash_backward_workspace_size(const sdpa_problem *p) {
    plan pl;
    make_plan(p, &pl);
    return pl.total;
}

/* What every work item reads: q and dout packed per (batch, query head) as
 * [Lp, Dp] and [Lp, Dvp] zero-padded rows, and per row nl = -lse * log2(e)
 * (-inf for padding rows and rows that see no key: they contribute nothing)
 * and di = dot(dout, out); exact [B, Hq, L]: the rows left to the exact
 * path (their packed rows are zero too). */
typedef struct packed {
    float *qp, *dop, *nl, *di;
    uint8_t *exact;
} packed;

/* Per-thread tiles, carved from the scratch; every tile 64-byte aligned
 * (all sizes are multiples of 16 floats). */
typedef struct tiles {
    float *kp[KG], *kt[KG], *vt[KG], *dk[KG], *dv[KG]; /* per key tile of a group */
    float *s, *dp;                                     /* per pair              */
    float *row;                                        /* max(Dp, Dvp) floats   */
    float *dcap;                                       /* per pair, when capped */
} tiles;

static tiles carve(float *scratch, const plan *pl) {
    tiles t;
    float *at = scratch;
    for (int kk = 0; kk < KG; kk++) {
        t.kp[kk] = at, at += BC * pl->dp;
        t.kt[kk] = at, at += pl->dp * BC;
        t.vt[kk] = at, at += pl->dvp * BC;
        t.dk[kk] = at, at += BC * pl->dp;
        t.dv[kk] = at, at += BC * pl->dvp;
    }
    t.s = at, at += BR * BC;
    t.dp = at, at += BR * BC;
    t.row = at, at += pl->dp > pl->dvp ? pl->dp : pl->dvp; /* multiples of 16 floats */
    t.dcap = at; /* inside the scratch only when capped */
    return t;
}

/* rows x width of tensor t at (b, first position, head), zero-padded to
 * BR (or BC) rows of ld floats; a half tensor is widened as it is packed. */
static void pack_rows(const ukernel_table *kern, const attn_tensor *t, int64_t b, int64_t pos0, int64_t rows,
                      int64_t head, int64_t width, float *dst, int64_t total_rows, int64_t ld) {
    for (int64_t r = 0; r < total_rows; r++) {
        float *d = dst + r * ld;
        if (r < rows) {
            kern->widen(problem_row_any(t, b, pos0 + r, head), t->dtype, d, width);
            memset(d + width, 0, sizeof(float) * (size_t)(ld - width));
        } else {
            memset(d, 0, sizeof(float) * (size_t)ld);
        }
    }
}

/* The transpose of a packed [BC, ld_in] tile into [rows_out, BC]. */
static void transpose_tile(const float *src, int64_t ld_in, int64_t rows_out, float *dst) {
    for (int64_t d = 0; d < rows_out; d++)
        for (int64_t j = 0; j < BC; j++) dst[d * BC + j] = src[j * ld_in + d];
}

/* Hides what the structural range, the mask and the bias hide in the score
 * tile of rows [i0, i0 + ni) and keys [j0, j0 + BC) (-inf), through
 * visibility.h.  With a bias or ALiBi, the tile moves to base 2 here,
 * s <- s * c + (bias + alibi) * log2(e), and the factor p_ds must apply
 * becomes 1; returns that factor. */
static float mask_tile(const sdpa_problem *p, const int64_t *ranges_b, int64_t b, int64_t h,
                       int64_t i0, int64_t ni, int64_t j0, float c, float *s) {
    for (int64_t r = 0; r < ni; r++) {
        const int64_t i = i0 + r;
        attn__visibility_mask_scores(p, b, h, i, ranges_b[2 * i], ranges_b[2 * i + 1], j0, BC, s + r * BC,
                                     1, c);
    }
    return p->opt.bias || logits_alibi_slope2(p, h) != 0.0f ? 1.0f : c;
}

/* Logit soft-capping of a pair's raw score tile (rows x cols, ld BC): the
 * tile moves to base 2, s <- cap2 tanh(s c / cap2) with cap2 = cap log2(e)
 * (logits.h, before bias, ALiBi and masks), and dcap gets the derivative
 * 1 - tanh^2 that dS is multiplied by. */
static void softcap_tile(const sdpa_problem *p, const ukernel_table *kern, int rows, int cols, float c,
                         float *s, float *dcap) {
    const float cap2 = (float)((double)p->opt.softcap * LOG2E), inv_cap2 = 1.0f / cap2;
    for (int r = 0; r < rows; r++) {
        float *s_r = s + r * BC, *dcap_r = dcap + r * BC;
        for (int j = 0; j < cols; j++) s_r[j] *= c;
        kern->softcap_n(s_r, cols, cap2);
        for (int j = 0; j < cols; j++) {
            const float t = s_r[j] * inv_cap2;
            dcap_r[j] = 1.0f - t * t;
        }
    }
}

/* dsinks[h] = -sum over batches and rows of exp(sink_h - lse) dot(dout, out)
 * (the sink's dp is 0: ds_sink = p_sink (0 - di)), in double, in a fixed
 * order, from the forward's out and lse: rows left to the exact path
 * included, as the reference computes them.  A head without a sink (-inf)
 * gets 0. */
static void sinks_backward(const sdpa_problem *p, const sdpa_backward_args *a) {
    for (int64_t h = 0; h < p->heads_q; h++) {
        const double sink = logits_sink(p, h);
        double sum = 0.0;
        for (int64_t b = 0; b < p->batch && sink != -INFINITY; b++)
            for (int64_t i = 0; i < p->len_q; i++) {
                const float *o_row = problem_row(a->out, b, i, h), *do_row = problem_row(a->dout, b, i, h);
                double di = 0.0;
                for (int64_t d = 0; d < p->dim_v; d++) di += (double)do_row[d] * (double)o_row[d];
                sum -= exp(sink - (double)a->lse[(b * p->heads_q + h) * p->len_q + i]) * di;
            }
        a->dsinks[h] = (float)sum;
    }
}

/* Does the tile pair (rows [i0, i0 + ni), keys [j0, j0 + BC)) have any
 * structurally visible element, and are all of them visible? */
static void pair_visibility(const int64_t *ranges_b, int64_t i0, int64_t ni, int64_t j0,
                            bool *any, bool *all) {
    *any = false;
    *all = true;
    for (int64_t r = 0; r < ni; r++) {
        const int64_t begin = ranges_b[2 * (i0 + r)], end = ranges_b[2 * (i0 + r) + 1];
        if (begin < end && begin < j0 + BC && end > j0) *any = true;
        if (begin > j0 || end < j0 + BC) *all = false;
    }
}

/* The structurally visible (query tile, key tile) pairs of each key chunk
 * of each batch: work[b * chunks + chunk], a per-head estimate of an item's
 * cost (masks and biases do not change it). */
static void chunk_work(const sdpa_problem *p, const plan *pl, const int64_t *ranges, int64_t *work) {
    for (int64_t b = 0; b < p->batch; b++)
        for (int64_t chunk = 0; chunk < pl->chunks; chunk++) {
            int64_t pairs = 0;
            const int64_t jt_end = (chunk + 1) * pl->tiles_per_chunk < pl->k_tiles
                                       ? (chunk + 1) * pl->tiles_per_chunk : pl->k_tiles;
            for (int64_t it = 0; it < pl->q_tiles; it++) {
                const int64_t i0 = it * BR, ni = p->len_q - i0 < BR ? p->len_q - i0 : BR;
                for (int64_t jt = chunk * pl->tiles_per_chunk; jt < jt_end; jt++) {
                    bool any, all;
                    pair_visibility(ranges + 2 * b * p->len_q, i0, ni, jt * BC, &any, &all);
                    pairs += any;
                }
            }
            work[b * pl->chunks + chunk] = pairs;
        }
}

/* Sorts n (work, item) pairs by decreasing work, then increasing item, by a
 * bottom-up merge sort through tmp (n pairs).  Handing the largest items out
 * first keeps the threads' finishing times together (the order in which
 * items run never changes a result). */
static void sort_items(int64_t *pairs, int64_t *tmp, int64_t n) {
    for (int64_t width = 1; width < n; width *= 2) {
        for (int64_t lo = 0; lo < n; lo += 2 * width) {
            int64_t mid = lo + width < n ? lo + width : n, hi = lo + 2 * width < n ? lo + 2 * width : n;
            int64_t x = lo, y = mid, out = lo;
            while (x < mid || y < hi) {
                bool take_x = y >= hi || (x < mid && (pairs[2 * x] > pairs[2 * y] ||
                                                      (pairs[2 * x] == pairs[2 * y] && pairs[2 * x + 1] < pairs[2 * y + 1])));
                int64_t from = take_x ? x++ : y++;
                tmp[2 * out] = pairs[2 * from];
                tmp[2 * out + 1] = pairs[2 * from + 1];
                out++;
            }
        }
        memcpy(pairs, tmp, sizeof(int64_t) * 2 * (size_t)n);
    }
}

/* Whether a row must be left to the exact path (lse != -inf): a NaN or Inf
 * in its q, dout or out (its forward read one) or in di; an lse that is NaN
 * or +inf; or an lse so large that the tiles' exponent s·c − lse·log2(e),
 * whose fp32 rounding grows as (D + 1)·|lse·log2(e)|·2^-24, could be off by
 * more than 1 (p then means nothing, and can overflow).  Below that bound
 * no fp32 score the row sees near its max can overflow either; the scores
 * far below it that do are found per tile (repair_elements).  qp, dop: the
 * row as packed (D, Dv floats read). */
static bool row_needs_exact(const sdpa_problem *p, const ukernel_table *kern, float lse, float di,
                            const float *qp, const float *dop, const float *o_row) {
    const double exponent_limit = 16777216.0 / (double)(p->dim + 1); /* 2^24 / (D + 1) */
    if (isnan(lse) || fabs((double)lse * LOG2E) >= exponent_limit || !isfinite(di)) return true;
    return !kern->all_finite(qp, p->dim, 1, p->dim) || !kern->all_finite(dop, p->dim_v, 1, p->dim_v) ||
           !kern->all_finite(o_row, p->dim_v, 1, p->dim_v);
}

/* Zeroes the rows [0, n) of a packed tile (ld floats apart, width used)
 * that hold a NaN or Inf, so that a key nobody may read (past a key length,
 * masked: a cache's empty slots) cannot reach a row through 0·NaN. */
static void zero_nonfinite_rows(const ukernel_table *kern, float *tile, int64_t ld, int64_t n,
                                int64_t width) {
    if (kern->all_finite(tile, ld, (int)n, width)) return;
    for (int64_t j = 0; j < n; j++)
        if (!kern->all_finite(tile + j * ld, ld, 1, width)) memset(tile + j * ld, 0, sizeof(float) * (size_t)width);
}

/* The elements of a pair whose P or dS came out NaN or infinite (rows
 * [i0, i0 + rows) of head h, keys [j0, j0 + cols), tiles ld = BC): a row
 * left to the exact path, or a key the row does not see, gets p = ds = 0
 * (nothing of it may enter the fp32 sums); an element the row sees had an
 * fp32 score beyond FLT_MAX, and is computed in double from the forward's
 * lse, as the line it replaces:
 *   p_ij = exp(s_ij - lse_i),  ds_ij = p_ij (dot(dout_i, v_j) - dot(dout_i, o_i)) */
static void repair_elements(const sdpa_problem *p, const sdpa_backward_args *a, const int64_t *ranges_b,
                            const uint8_t *exact_bh, int64_t b, int64_t h, int64_t i0, int rows, int64_t j0,
                            int cols, float *s, float *ds) {
    const int64_t g = h / p->group;
    for (int r = 0; r < rows; r++) {
        const int64_t i = i0 + r;
        for (int j = 0; j < cols; j++) {
            float *p_ij = s + r * BC + j, *ds_ij = ds + r * BC + j;
            if (isfinite(*p_ij) && isfinite(*ds_ij)) continue;
            const int64_t key = j0 + j;
            if (exact_bh[i] || !visibility_allows(p, b, h, i, ranges_b[2 * i], ranges_b[2 * i + 1], key)) {
                *p_ij = *ds_ij = 0.0f;
                continue;
            }
            const void *dout_i = problem_row_any(a->dout, b, i, h), *out_i = problem_row_any(a->out, b, i, h);
            const void *v_j = problem_row_any(&p->v, b, key, g);
            double dp = 0.0, di = 0.0;
            for (int64_t d = 0; d < p->dim_v; d++) {
                const double dout_d = (double)problem_get(a->dout->dtype, dout_i, d);
                dp += dout_d * (double)problem_get(p->v.dtype, v_j, d);
                di += dout_d * (double)problem_get(a->out->dtype, out_i, d);
            }
            const double p_d = exp(attn__ref_score(p, b, h, i, key) - (double)a->lse[(b * p->heads_q + h) * p->len_q + i]);
            *p_ij = (float)p_d;
            *ds_ij = (float)(p_d * (dp - di) * attn__ref_softcap_slope(p, b, h, i, key));
        }
    }
}

/* One work item: the key tiles of chunk `chunk` of unit (b, g), KG at a
 * time: a group's K and V tiles are packed and its dk, dv accumulators kept
 * in the thread's scratch while every query head and query tile of the unit
 * sweeps over them, so q, dout and the dq partial stream from L3 once per
 * group rather than once per key tile.  Per key tile the order of the dk,
 * dv sums (query head, then query tile) and per query row the order of the
 * dq sum (key tiles ascending) are those of a one-tile-at-a-time loop. */
static void run_item(const sdpa_problem *p, const sdpa_backward_args *a, const plan *pl,
                     const ukernel_table *kern, const packed *pk, const int64_t *ranges,
                     int64_t b, int64_t g, int64_t chunk, float *partial, tiles t) {
    const int64_t L = p->len_q, S = p->len_kv, G = p->group, dp = pl->dp, dvp = pl->dvp;
    const float c = (float)((double)p->scale * LOG2E);
    const bool want_dq = a->dq != NULL, want_dkv = a->dk || a->dv;
    const bool plain = !p->opt.mask && !p->opt.bias && !logits_has_alibi(p);
    const bool capped = logits_softcapped(p);
    const int64_t *ranges_b = ranges + 2 * b * L;
    if (want_dq) memset(partial, 0, sizeof(float) * (size_t)pl->partial_floats);

    const int64_t jt_end = (chunk + 1) * pl->tiles_per_chunk < pl->k_tiles ? (chunk + 1) * pl->tiles_per_chunk
                                                                           : pl->k_tiles;
    for (int64_t group0 = chunk * pl->tiles_per_chunk; group0 < jt_end; group0 += KG) {
        const int n_group = (int)(jt_end - group0 < KG ? jt_end - group0 : KG);
        for (int kk = 0; kk < n_group; kk++) {
            const int64_t j0 = (group0 + kk) * BC, nj = S - j0 < BC ? S - j0 : BC;
            pack_rows(kern, &p->k, b, j0, nj, g, p->dim, t.kp[kk], BC, dp);
            pack_rows(kern, &p->v, b, j0, nj, g, p->dim_v, t.dv[kk], BC, dvp); /* t.dv as a staging area */
            zero_nonfinite_rows(kern, t.kp[kk], dp, nj, p->dim);
            zero_nonfinite_rows(kern, t.dv[kk], dvp, nj, p->dim_v);
            transpose_tile(t.kp[kk], dp, dp, t.kt[kk]);
            transpose_tile(t.dv[kk], dvp, dvp, t.vt[kk]);
            memset(t.dk[kk], 0, sizeof(float) * (size_t)(BC * dp));
            memset(t.dv[kk], 0, sizeof(float) * (size_t)(BC * dvp));
        }

        for (int64_t h = g * G; h < (g + 1) * G; h++) {
            const int64_t bh_row = (b * p->heads_q + h) * pl->lp;
            float *partial_h = partial + (h - g * G) * pl->lp * dp;
            for (int64_t it = 0; it < pl->q_tiles; it++) {
                const int64_t i0 = it * BR, ni = L - i0 < BR ? L - i0 : BR;
                const float *qp = pk->qp + (bh_row + i0) * dp, *dop = pk->dop + (bh_row + i0) * dvp;
                for (int kk = 0; kk < n_group; kk++) {
                    const int64_t j0 = (group0 + kk) * BC, nj = S - j0 < BC ? S - j0 : BC;
                    bool any, all;
                    pair_visibility(ranges_b, i0, ni, j0, &any, &all);
                    if (!any) continue;
                    const int rows = (int)ni, keys = (int)nj, cols = (int)round_up(nj, 16);
                    /* forward was: s_ij = scale * q_i.k_j + bias_ij */
                    kern->gemm(rows, cols, (int)dp, qp, dp, 1, t.kt[kk], BC, t.s, BC, 0);
                    float c_tile = c;
                    if (capped) { /* s_ij = softcap(raw_ij) + ..., in base 2 from here */
                        softcap_tile(p, kern, rows, cols, c, t.s, t.dcap);
                        c_tile = 1.0f;
                    }
                    if (!(all && plain)) c_tile = mask_tile(p, ranges_b, b, h, i0, ni, j0, c_tile, t.s);
                    /* forward was: o_i = sum_j p_ij v_j   so: dp_ij = dot(dout_i, v_j) */
                    kern->gemm(rows, cols, (int)dvp, dop, dvp, 1, t.vt[kk], BC, t.dp, BC, 0);
                    /* p_ij = exp2(log2e (s_ij - lse_i));  ds_ij = p_ij (dp_ij - di_i) */
                    kern->p_ds(t.s, t.dp, rows, cols, BC, c_tile, pk->nl + bh_row + i0, pk->di + bh_row + i0);
                    /* forward was: s_ij = softcap(raw_ij)   so: ds_raw = ds_ij (1 - tanh^2) */
                    for (int r = 0; capped && r < rows; r++)
                        for (int j = 0; j < cols; j++) t.dp[r * BC + j] *= t.dcap[r * BC + j];
                    if (!kern->all_finite(t.dp, BC, rows, cols))
                        repair_elements(p, a, ranges_b, pk->exact + (b * p->heads_q + h) * L, b, h, i0, rows, j0,
                                        cols, t.s, t.dp);
                    if (want_dkv) {
                        /* dv_j += p_ij dout_i   (P read transposed) */
                        kern->gemm(keys, (int)dvp, rows, t.s, 1, BC, dop, dvp, t.dv[kk], dvp, 1);
                        /* dk_j += ds_ij q_i     (scale applied once, at the end) */
                        kern->gemm(keys, (int)dp, rows, t.dp, 1, BC, qp, dp, t.dk[kk], dp, 1);
                    }
                    /* dq_i += ds_ij k_j     (scale applied in the reduction) */
                    if (want_dq)
                        kern->gemm(rows, (int)dp, keys, t.dp, BC, 1, t.kp[kk], dp, partial_h + i0 * dp, dp, 1);
                }
            }
        }

        for (int kk = 0; kk < n_group; kk++) {
            const int64_t j0 = (group0 + kk) * BC, nj = S - j0 < BC ? S - j0 : BC;
            for (int64_t j = 0; j < nj; j++) {
                if (a->dk) {
                    float *dk_j = t.dk[kk] + j * dp; /* scaled in place, then stored in dk's dtype */
                    for (int64_t d = 0; d < p->dim; d++) dk_j[d] *= p->scale;
                    kern->narrow(dk_j, a->dk->dtype, problem_row_any(a->dk, b, j0 + j, g), p->dim);
                }
                if (a->dv) kern->narrow(t.dv[kk] + j * dvp, a->dv->dtype, problem_row_any(a->dv, b, j0 + j, g), p->dim_v);
            }
        }
    }
}

attn_status attn__flash_backward(const sdpa_problem *p, void *workspace, const sdpa_backward_args *a) {
    plan pl;
    make_plan(p, &pl);
    const ukernel_table *kern = attn__isa_flash(attn__isa_chosen());
    unsigned char *base = workspace; /* 64-byte aligned by the front door */
    const packed pk = {(float *)(base + pl.off_qp), (float *)(base + pl.off_dop), (float *)(base + pl.off_nl),
                       (float *)(base + pl.off_di), (uint8_t *)(base + pl.off_exact)};
    int64_t *ranges = (int64_t *)(base + pl.off_ranges);
    int64_t *work = (int64_t *)(base + pl.off_order), *order = work + p->batch * pl.chunks,
            *order_tmp = order + 2 * pl.wave_units * pl.chunks;
    float *partials = (float *)(base + pl.off_partial);
    float *scratch = (float *)(base + pl.off_scratch);
    const int64_t L = p->len_q, G = p->group;
    progress_meter meter; /* one unit per (unit, chunk) item */
    attn__progress_begin(&meter, &p->opt, pl.units * pl.chunks);

#ifdef ATTN_HAVE_OPENMP
#pragma omp parallel num_threads(pl.threads)
#endif
    {
#ifdef ATTN_HAVE_OPENMP
        const int tid = omp_get_thread_num();
#else
        const int tid = 0;
#endif
        const tiles t = carve(scratch + (int64_t)tid * pl.scratch_floats, &pl);

        /* The packed rows of every (batch, query head), and per row
         * di_i = dot(dout_i, o_i) = sum_j p_ij dp_ij.  di is summed as the gemm
         * sums dp_ij = dot(dout_i, v_j): one float FMA chain in increasing d.
         * When p_i is concentrated on one key, o_i is that key's v_j and di_i
         * then equals its dp_ij to the bit, so ds_ij = p_ij (dp_ij - di_i)
         * cancels to 0 exactly as the true gradient does, instead of leaving
         * the rounding of two differently computed sums. */
#ifdef ATTN_HAVE_OPENMP
#pragma omp for schedule(static)
#endif
        for (int64_t bh = 0; bh < p->batch * p->heads_q; bh++) {
            const int64_t b = bh / p->heads_q, h = bh % p->heads_q;
            pack_rows(kern, &p->q, b, 0, L, h, p->dim, pk.qp + bh * pl.lp * pl.dp, pl.lp, pl.dp);
            pack_rows(kern, a->dout, b, 0, L, h, p->dim_v, pk.dop + bh * pl.lp * pl.dvp, pl.lp, pl.dvp);
            for (int64_t i = 0; i < pl.lp; i++) {
                float *nl = pk.nl + bh * pl.lp + i, *di = pk.di + bh * pl.lp + i;
                const float lse = i < L ? a->lse[bh * L + i] : -INFINITY;
                *nl = lse == -INFINITY ? -INFINITY : (float)(-(double)lse * LOG2E);
                *di = 0.0f;
                if (i >= L) continue;
                /* out widened into the thread's row; dout's row is the packed one */
                const float *o_row = t.row, *do_row = pk.dop + (bh * pl.lp + i) * pl.dvp;
                kern->widen(problem_row_any(a->out, b, i, h), a->out->dtype, t.row, p->dim_v);
                for (int64_t d = 0; d < p->dim_v; d++) *di = fmaf(do_row[d], o_row[d], *di);
                pk.exact[bh * L + i] = lse != -INFINITY && row_needs_exact(p, kern, lse, *di, pk.qp + (bh * pl.lp + i) * pl.dp,
                                                                          pk.dop + (bh * pl.lp + i) * pl.dvp, o_row);
                if (lse == -INFINITY || pk.exact[bh * L + i]) {
                    /* Nothing of this row enters a tile: 0 * (0 - 0) everywhere. */
                    memset(pk.qp + (bh * pl.lp + i) * pl.dp, 0, sizeof(float) * (size_t)pl.dp);
                    memset(pk.dop + (bh * pl.lp + i) * pl.dvp, 0, sizeof(float) * (size_t)pl.dvp);
                    *nl = -INFINITY;
                    *di = 0.0f;
                }
            }
        }
#ifdef ATTN_HAVE_OPENMP
#pragma omp for schedule(static)
#endif
        for (int64_t bi = 0; bi < p->batch * L; bi++)
            attn__visibility_key_range(p, bi / L, bi % L, &ranges[2 * bi], &ranges[2 * bi + 1]);
#ifdef ATTN_HAVE_OPENMP
#pragma omp single
#endif
        chunk_work(p, &pl, ranges, work);

        for (int64_t wave0 = 0; wave0 < pl.units; wave0 += pl.wave_units) {
            const int64_t wave_n = pl.units - wave0 < pl.wave_units ? pl.units - wave0 : pl.wave_units;
#ifdef ATTN_HAVE_OPENMP
#pragma omp single
#endif
            {
                for (int64_t item = 0; item < wave_n * pl.chunks; item++) {
                    order[2 * item] = work[(wave0 + item / pl.chunks) / p->heads_kv * pl.chunks + item % pl.chunks];
                    order[2 * item + 1] = item;
                }
                sort_items(order, order_tmp, wave_n * pl.chunks);
            }
#ifdef ATTN_HAVE_OPENMP
#pragma omp for schedule(dynamic, 1)
#endif
            for (int64_t k = 0; k < wave_n * pl.chunks; k++) {
                const int64_t item = order[2 * k + 1];
                const int64_t w = item / pl.chunks, chunk = item % pl.chunks, unit = wave0 + w;
                run_item(p, a, &pl, kern, &pk, ranges, unit / p->heads_kv, unit % p->heads_kv, chunk,
                         partials + item * pl.partial_floats, t);
                progress_add(&meter, 1, tid == 0);
            }
            if (!a->dq) continue;
            /* dq_i = scale * sum over chunks, in chunk order. */
#ifdef ATTN_HAVE_OPENMP
#pragma omp for schedule(static)
#endif
            for (int64_t row = 0; row < wave_n * G * L; row++) {
                const int64_t w = row / (G * L), hh = row / L % G, i = row % L, unit = wave0 + w;
                const int64_t b = unit / p->heads_kv, h = unit % p->heads_kv * G + hh;
                const float *first = partials + (w * pl.chunks * G + hh) * pl.lp * pl.dp + i * pl.dp;
                for (int64_t d = 0; d < p->dim; d++) {
                    float sum = first[d];
                    for (int64_t chunk = 1; chunk < pl.chunks; chunk++)
                        sum += first[chunk * G * pl.lp * pl.dp + d];
                    t.row[d] = p->scale * sum;
                }
                kern->narrow(t.row, a->dq->dtype, problem_row_any(a->dq, b, i, h), p->dim);
            }
        }

        /* The marked rows, by the reference's row backward, one unit after
         * the other (its workspace is one unit's dk and dv in double). */
#ifdef ATTN_HAVE_OPENMP
#pragma omp single
#endif
        for (int64_t unit = 0; unit < pl.units; unit++) {
            const int64_t b = unit / p->heads_kv, g = unit % p->heads_kv;
            const uint8_t *exact_unit = pk.exact + (b * p->heads_q + g * G) * L;
            if (memchr(exact_unit, 1, (size_t)(G * L)))
                attn__ref_backward_unit(p, b, g, base + pl.off_exact_scratch, a, exact_unit, NULL, NULL);
        }
    }
    attn__progress_end(&meter);
    if (a->dsinks) sinks_backward(p, a);
    return ATTN_OK;
}
