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
 * Non-finite values and overflow (docs/semantics.md, "Numbers and errors"):
 * the fp32 loop runs as if every number were finite, and a few checks,
 * outside the micro-kernels, find the rows it could not compute:
 *   - per tile, one all_finite pass over the raw scores: a NaN or infinite
 *     score at a key the row sees (a non-finite q or k, or a score beyond
 *     FLT_MAX) marks the row;
 *   - per row, when the unit finishes: a NaN or +inf max, a sum that is not
 *     finite, or nothing seen although keys are in range, marks the row;
 *   - per item: an accumulator that came out non-finite in a row not marked
 *     means a NaN or Inf in some value row, and 0·NaN carries it to rows
 *     that do not see that key.  The item is then computed again carefully:
 *     such value rows are left out of P·V, and the rows that do see them
 *     are marked, as are rows whose accumulators are still not finite (a
 *     weighted sum that overflowed).  The others get the bits of the same
 *     problem with those values zeroed.
 * A marked row is recomputed by the reference's row routine, in double
 * (attn__ref_forward_row): the reference's answer for finite inputs whose
 * scores overflow fp32, NaN for a row that reads a NaN or Inf.  Every
 * decision is a function of the data, never of the threads.
 */
#include "flash/flash.h"

#include "base/dtype.h"
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
#define FLASH_OMP(directive) _Pragma(directive)
#else
#define FLASH_OMP(directive)
#endif

/* A split into chunks is made only when there are fewer units than this,
 * and then into at most this many items: enough for load balance on any
 * likely thread count, few enough that merging costs nothing. */
#define FLASH_TARGET_ITEMS 64
/* No chunk is shorter than this many keys, so a split never costs more in
 * merging and per-item overhead than it wins. */
#define FLASH_MIN_CHUNK_KEYS 512
/* A paged problem whose blocks are shorter than this many rows has each
 * rows-path step's keys and values copied together first (c->step_k,
 * step_v); longer blocks are read in place.  Measured when the rows kernels
 * still looked 16 rows ahead along the block table (r2; their look-ahead
 * is gone since, r3, docs/kernels.md): 16-row blocks read in place took
 * 1.06-1.08x the contiguous time, the copies 1.1-1.6x (Zen 5,
 * docs/cache.md). */
#define FLASH_COPY_BLOCKS_BELOW 16
/* Query tiles (subtiles) that share each K/V tile a unit loads: 8, and up
 * to 32 in long problems (plan_subtiles). */
#define FLASH_SUBTILES 8
#define FLASH_SUBTILES_MAX 32
/* Problems with at least this many keys are long: a kv head's K and V
 * (>= 2 MiB as floats at D = Dv = 64) outgrow the L2 of every machine
 * measured, so each unit's tile copies come from L3 or memory, through rows
 * 4-8 KiB apart; larger units then copy each K/V tile for more queries. */
#define FLASH_LONG_KEYS 4096
/* ...as long as the problem keeps at least this many units: enough for load
 * balance under a causal mask (largest units first) on up to 16 threads or
 * so.  128 kept AVX-512's units at 16 subtiles (512 query rows) at L = 4096;
 * at 64 they reach 32 (1 MiB of queries and accumulators at D = 128, past
 * a 1 MiB L2, but read in order, which the prefetchers follow, where the
 * K/V copies are not): 1.01-1.08x faster on Zen 4 (docs/kernels.md §6,
 * v19).  AVX2's 16-row subtiles reached 32 at 128 already. */
#define FLASH_MIN_UNITS 64
#define FLASH_ALIGN 64

/* One row of a unit: query position i, query head h, and the structurally
 * visible keys [begin, end).  Padding rows (past L or past the group) have
 * valid = false and are computed but never stored. */
typedef struct flash_row {
    int64_t i, h, begin, end;
    bool valid;
} flash_row;

/* The work decomposition and the scratch layout of one problem. */
typedef struct flash_plan {
    const ukernel_table *kern;
    bool rows_path;          /* rows kernels (few queries) or tile kernels      */
    int64_t sub_rows;        /* rows per subtile: Br (tile) or G·L (rows path)  */
    int64_t subtiles;        /* subtiles per unit (1 on the rows path)          */
    int64_t unit_kv_heads;   /* kv heads per unit: 1 (tile) or Hkv (rows path)  */
    int64_t rows;            /* rows per unit: unit_kv_heads·subtiles·sub_rows  */
    int64_t heads_per_block; /* Gt: query heads of one group in a subtile       */
    int64_t queries_per_block; /* Lt: query positions in a subtile              */
    int64_t head_blocks;     /* ceil(G / Gt)                                    */
    int64_t query_groups;    /* ceil(ceil(L / Lt) / subtiles)                   */
    bool largest_first;      /* causal: units numbered from the last queries    */
    int64_t units, chunks, chunk_keys, items;
    int64_t tile_keys;       /* keys per tile (Bc) or per block (rows path)    */
    int64_t ldq, ldk, ldv;   /* row strides of the packed q, K and V copies     */
    /* precision fast (native_bf16): Q·Kᵀ by qk_tile_bf16 (q and k half),
     * P·V by softmax_tile_bf16 + pv_tile_bf16 (v half); the copies are then
     * bf16 (qp2, kt2, vT of flash_table.h; the value pairs on their way to vT
     * in vp), with these strides in elements (ldvp in pairs) */
    bool fast_qk, fast_pv;
    int64_t ldk2, ldvt, ldvp;
    int64_t qp_sub;          /* floats of one subtile's packed queries          */
    /* scratch of one thread, in floats from its aligned start */
    size_t off_qp, off_kt, off_vt, off_s, off_o, off_m, off_l, off_alpha, off_inv_l, off_rows;
    size_t off_exact, off_row_acc, off_out_row, off_conv, off_vp, off_qrows;
    /* rows path, paged with short blocks: one step's K and V rows copied
     * (FLASH_COPY_BLOCKS_BELOW), in floats; 0: read in place */
    size_t off_step_k, off_step_v;
    bool copy_steps;
    size_t off_mask_lo, off_mask_hi; /* tile path: a subtile's key bounds (mask_tile) */
    size_t thread_floats;    /* per thread, a multiple of FLASH_ALIGN bytes     */
    size_t partial_floats;   /* per item: m, l, the exact mark and acc of every row */
    int threads;
} flash_plan;

/* Reserves n floats at *cursor, keeping every block 64-byte aligned. */
static size_t reserve(size_t *cursor, int64_t n) {
    size_t at = *cursor;
    *cursor += (size_t)round_up(n, FLASH_ALIGN / (int64_t)sizeof(float));
    return at;
}

static bool is_half(attn_dtype dt) { return dt == ATTN_F16 || dt == ATTN_BF16; }

/* Whether precision fast may run the native bf16 kernels on the tile path
 * of this problem: asked for, and this table (the chosen ISA) has them on
 * this CPU.  Which products go native then depends on the dtypes
 * (plan_make): float32 tensors are computed the same under either
 * precision (attn.h), so a product runs on bf16 only when its stored
 * operands are half (Q·Kᵀ: q and k; P·V: v). */
static bool native_bf16(const sdpa_problem *p, const ukernel_table *kern) {
    return p->opt.precision == ATTN_PRECISION_FAST && kern->bf16_supported && kern->qk_tile_bf16 &&
           kern->tile_rows == 32 && kern->tile_keys % 48 == 0 && kern->bf16_supported();
}

/* Subtiles per unit on the tile path, from the shapes only (never the
 * threads): FLASH_SUBTILES, doubled up to FLASH_SUBTILES_MAX in long
 * problems while they keep FLASH_MIN_UNITS units, and never more than the
 * query blocks.  Each row's operations do not depend on the count (which
 * rows share a unit only changes where a windowed unit's first tile starts).
 * Measured on Zen 3, AVX2, L = S = 4096 (docs/kernels.md §6, v14): 32
 * subtiles run 1.15-1.35x faster than 8 (CPU time), whose K/V tile copies
 * had taken 18 % of it; on Zen 4, AVX-512, 32 rather than 16 run 1.01-1.08x
 * faster (v19); at L = 1024 (1 MiB of K and V a head, in L2) 16 were 2-27 %
 * slower than 8 (v9), so short problems keep 8. */
static int64_t plan_subtiles(const sdpa_problem *p, int64_t query_blocks, int64_t head_blocks) {
    int64_t subtiles = FLASH_SUBTILES;
    if (p->len_kv >= FLASH_LONG_KEYS) {
        const int64_t blocks = p->batch * p->heads_kv * head_blocks;
        while (subtiles < FLASH_SUBTILES_MAX && blocks * ceil_div(query_blocks, 2 * subtiles) >= FLASH_MIN_UNITS)
            subtiles *= 2;
    }
    return query_blocks < subtiles ? query_blocks : subtiles;
}

static void plan_make(const sdpa_problem *p, flash_plan *pl) {
    memset(pl, 0, sizeof *pl);
    const ukernel_table *kern = attn__isa_flash(attn__isa_chosen());
    pl->kern = kern;
    int64_t group = p->group, len_q = p->len_q;
    pl->rows_path = len_q * group <= FLASH_ROWS_MAX;
    int64_t query_blocks;
    if (pl->rows_path) {
        pl->heads_per_block = group;
        pl->queries_per_block = len_q;
        pl->sub_rows = group * len_q;
        pl->subtiles = 1;
        pl->unit_kv_heads = p->heads_kv;
        pl->tile_keys = kern->block_keys;
        query_blocks = 1;
    } else {
        pl->heads_per_block = group < kern->tile_rows ? group : kern->tile_rows;
        pl->queries_per_block = kern->tile_rows / pl->heads_per_block;
        pl->sub_rows = kern->tile_rows;
        query_blocks = ceil_div(len_q, pl->queries_per_block);
        pl->subtiles = plan_subtiles(p, query_blocks, ceil_div(group, pl->heads_per_block));
        pl->unit_kv_heads = 1;
        pl->tile_keys = kern->tile_keys;
    }
    pl->rows = pl->unit_kv_heads * pl->subtiles * pl->sub_rows;
    pl->head_blocks = ceil_div(group, pl->heads_per_block);
    pl->query_groups = ceil_div(query_blocks, pl->subtiles);
    pl->units = p->batch * (p->heads_kv / pl->unit_kv_heads) * pl->head_blocks * pl->query_groups;
    /* Under a causal mask a query sees at least as many keys as any query
     * before it (with or without a left window), so the last query groups
     * of a head are its costliest units: numbering them first hands them
     * out first (the dynamic schedule takes items in order), and the cheap
     * ones fill the end, where a long item still running would leave the
     * other threads idle.  Only the numbering changes: a unit's rows, and
     * every operation on them, stay the same. */
    pl->largest_first = p->opt.causal;

    pl->chunks = 1;
    if (pl->units < FLASH_TARGET_ITEMS) {
        int64_t wanted = ceil_div(FLASH_TARGET_ITEMS, pl->units);
        int64_t most = ceil_div(p->len_kv, FLASH_MIN_CHUNK_KEYS);
        pl->chunks = wanted < most ? wanted : most;
    }
    pl->chunk_keys = round_up(ceil_div(p->len_kv, pl->chunks), pl->tile_keys);
    pl->chunks = ceil_div(p->len_kv, pl->chunk_keys);
    pl->items = pl->units * pl->chunks;

    /* Copies of K and V tiles get a row stride of an odd number of cache
     * lines, so that the rows of a tile spread over all L1 sets. */
    pl->ldq = round_up(p->dim, 16);
    pl->ldk = round_up(p->dim, 16) + 16;
    pl->ldv = round_up(p->dim_v, 16) + 16;
    if (!pl->rows_path && native_bf16(p, kern)) {
        pl->fast_qk = is_half(p->q.dtype) && is_half(p->k.dtype);
        pl->fast_pv = is_half(p->v.dtype);
    }
    /* bf16 rows of an odd number of cache lines too (kt2 fits in the
     * float copy's space: ldk2 / 2 <= ldk) */
    pl->ldk2 = round_up(p->dim, 32) + 32;
    pl->ldvt = round_up(kern->tile_keys, 32) + 32;
    pl->ldvp = round_up(p->dim_v, 16) + 16;
    pl->qp_sub = pl->fast_qk ? round_up(p->dim, 32) / 2 * pl->sub_rows : p->dim * pl->sub_rows;

    size_t cursor = 0;
    int64_t rows = pl->rows, keys = pl->tile_keys;
    if (pl->rows_path) {
        pl->off_qp = reserve(&cursor, rows * pl->ldq);
        pl->off_s = reserve(&cursor, rows * keys);
        pl->copy_steps = p->pages && p->pages->block_rows < FLASH_COPY_BLOCKS_BELOW;
        if (pl->copy_steps) {
            pl->off_step_k = reserve(&cursor, ceil_div(keys * p->k.stride[1] * problem_elem_bytes(&p->k), 4));
            pl->off_step_v = reserve(&cursor, ceil_div(keys * p->v.stride[1] * problem_elem_bytes(&p->v), 4));
        }
    } else {
        pl->off_qp = reserve(&cursor, pl->qp_sub * pl->subtiles);
        pl->off_kt = reserve(&cursor, keys * pl->ldk);
        const int64_t vt_floats = round_up(p->dim_v, 16) * pl->ldvt / 2;
        pl->off_vt = reserve(&cursor, pl->fast_pv && vt_floats > keys * pl->ldv ? vt_floats : keys * pl->ldv);
        if (pl->fast_pv) pl->off_vp = reserve(&cursor, round_up(ceil_div(keys, 2), 16) * pl->ldvp);
        pl->off_s = reserve(&cursor, keys * pl->sub_rows);
    }
    pl->off_o = reserve(&cursor, rows * p->dim_v);
    pl->off_m = reserve(&cursor, rows);
    pl->off_l = reserve(&cursor, rows);
    pl->off_alpha = reserve(&cursor, rows);
    pl->off_inv_l = reserve(&cursor, rows);
    pl->off_rows = reserve(&cursor, ceil_div(rows * (int64_t)sizeof(flash_row), sizeof(float)));
    pl->off_exact = reserve(&cursor, ceil_div(rows, sizeof(float)));
    pl->off_mask_lo = reserve(&cursor, pl->sub_rows);
    pl->off_mask_hi = reserve(&cursor, pl->sub_rows);
    pl->off_row_acc = reserve(&cursor, p->dim_v * (int64_t)(sizeof(double) / sizeof(float)));
    pl->off_out_row = reserve(&cursor, p->dim_v);
    /* two rows of the wider of K and V, widened or narrowed on their way
     * to the bf16 copies (fast path, float16 storage) */
    pl->off_conv = reserve(&cursor, 2 * (p->dim > p->dim_v ? p->dim : p->dim_v));
    if (pl->fast_qk) pl->off_qrows = reserve(&cursor, pl->sub_rows * round_up(p->dim, 32) / 2);
    pl->thread_floats = cursor;
    /* Whole 64-byte blocks, so that every partial and the thread scratch
     * after them stay aligned (an odd count once put the flash_row array
     * of the scratch 4 bytes off its alignment: UBSan, tests/flash/test_half). */
    pl->partial_floats = pl->chunks > 1 ? (size_t)round_up(rows * (p->dim_v + 3), FLASH_ALIGN / (int64_t)sizeof(float)) : 0;

    const double flops = 2.0 * (double)p->batch * (double)p->heads_q * (double)p->len_q *
                         (double)p->len_kv * (double)(p->dim + p->dim_v);
    pl->threads = attn__threads_for(p->opt.threads, flops, (double)pl->items);
}

static size_t plan_bytes(const flash_plan *pl) {
    size_t floats = pl->partial_floats * (size_t)pl->items + pl->thread_floats * (size_t)pl->threads;
    return floats * sizeof(float);
}

bool attn__flash_forward_native_bf16(const sdpa_problem *p) {
    flash_plan pl;
    plan_make(p, &pl);
    return pl.fast_qk || pl.fast_pv;
}

size_t attn__flash_forward_workspace_size(const sdpa_problem *p) {
    flash_plan pl;
    plan_make(p, &pl);
    return plan_bytes(&pl);
}

/* ------------------------------------------------------------------ units */

/* Everything one thread needs to process items of one problem. */
typedef struct flash_ctx {
    const sdpa_problem *p;
    const flash_plan *pl;
    float *qp, *kt, *vt, *s, *o, *m, *l, *alpha, *inv_l;
    float *mask_lo, *mask_hi;           /* sub_rows: bounds for mask_tile     */
    flash_row *row;
    uint8_t *exact;                     /* per row: recompute it exactly      */
    double *row_acc;                    /* Dv: the exact path's accumulator   */
    float *out_row;                     /* Dv: a row of out before narrowing  */
    float *conv;                        /* 2·max(D, Dv): bf16 conversions     */
    uint16_t *qrows;                    /* fast: Br rows of bf16 queries      */
    unsigned char *step_k, *step_v;     /* rows path: a step's copied rows    */
    int64_t step_t0, step_n;            /* its keys (step_n 0: none copied)   */
    bool careful;                       /* the item's values need care        */
    int64_t b, kv_head;                 /* of the current unit (its first)    */
    int64_t any_begin, any_end;         /* keys some valid row may see        */
    int64_t sub_begin[FLASH_SUBTILES_MAX]; /* the same, per subtile           */
    int64_t sub_end[FLASH_SUBTILES_MAX];
} flash_ctx;

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

/* Packs the unit's queries, multiplied by scale·log2(e) so that scores come
 * out in base 2.  Tile layout: per subtile qp[d][r]; rows layout qp[r][d].
 * The tile layout is filled 16 widths at a time across all rows of a
 * subtile, so that the (cold) loads of many rows are in flight together. */
static void pack_queries(flash_ctx *c) {
    const sdpa_problem *p = c->p;
    const flash_plan *pl = c->pl;
    const float factor = (float)((double)p->scale * LOG2E);
    if (pl->rows_path) {
        for (int64_t r = 0; r < pl->rows; r++) {
            float *qp_r = c->qp + r * pl->ldq;
            pl->kern->widen(problem_row_any(&p->q, c->b, c->row[r].i, c->row[r].h), p->q.dtype, qp_r, p->dim);
            for (int64_t d = 0; d < p->dim; d++) qp_r[d] *= factor;
        }
        return;
    }
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

/* Applies what the score kernels do not know about (visibility.h) to the
 * scores of keys [t0, t0 + nk) of rows [row0, row0 + rows): s[j·js + r·rs]
 * is the score of key t0 + j for row row0 + r.  Rows that see the whole
 * range with no mask or bias are left untouched.  A tile-path subtile with
 * only structural rules (causal, window, key lengths) is masked in one
 * vectorised pass (mask_tile: the rows' ranges cut to the tile); the rest
 * (a boolean mask, a bias, ALiBi, the rows path) row by row. */
static void mask_scores(const flash_ctx *c, int64_t row0, int64_t rows, int64_t t0, int nk,
                        float *s, int64_t js, int64_t rs) {
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

/* Whether row r of the unit sees key `key` (every rule, visibility.h). */
static bool row_sees(const flash_ctx *c, int64_t r, int64_t key) {
    const flash_row *row = &c->row[r];
    return visibility_allows(c->p, c->b, row->h, row->i, row->begin, row->end, key);
}

/* Marks for the exact path the rows of [row0, row0 + rows) whose raw score
 * s[j·js + r·rs] of key t0 + j is NaN or infinite at a key they see: a NaN
 * or Inf in q or k (a -inf score would otherwise pass for a hidden key, a
 * NaN one be skipped by the max), or a score beyond FLT_MAX.  Keys a row
 * does not see may hold anything: mask_scores overwrites their scores next.
 * One all_finite pass over the tile; the element loop only when it fails. */
static void check_scores(flash_ctx *c, int64_t row0, int64_t rows, int64_t t0, int nk,
                         const float *s, int64_t js, int64_t rs) {
    const ukernel_table *kern = c->pl->kern;
    if (js == 1 ? kern->all_finite(s, rs, (int)rows, nk) : kern->all_finite(s, js, nk, rows)) return;
    for (int64_t r = 0; r < rows; r++) {
        if (!c->row[row0 + r].valid || c->exact[row0 + r]) continue;
        for (int j = 0; j < nk; j++)
            if (!isfinite(s[j * js + r * rs]) && row_sees(c, row0 + r, t0 + j)) {
                c->exact[row0 + r] = 1;
                break;
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
    return (t == &p->v ? c->step_v : c->step_k) + at * problem_elem_bytes(t);
}

/* Copies the rows of keys [t0, t0 + nk) of t, every kv head, run by run
 * into dst, stride[1] apart as in t (copy_steps; called before the step's
 * copy is marked, so the runs are the blocks). */
static void copy_step(const flash_ctx *c, const attn_tensor *t, int64_t t0, int nk, unsigned char *dst) {
    const int64_t row_bytes = t->stride[1] * problem_elem_bytes(t);
    const int64_t last_bytes = ((t->shape[2] - 1) * t->stride[2] + t->shape[3]) * problem_elem_bytes(t);
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
static void rows_pv(const flash_ctx *c, const float *s, int heads, int per_head, int nk, int64_t key,
                    int64_t head, const float *alpha, float *o, const flash_prefetch *pf) {
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

/* Whether the value row of key `key`, kv head `head` is finite (a half row
 * is widened into c->out_row first: rare, the careful path only). */
static bool value_row_finite(flash_ctx *c, int64_t key, int64_t head) {
    const sdpa_problem *p = c->p;
    const void *v = problem_kv_row(p, &p->v, c->b, key, head);
    if (p->v.dtype == ATTN_F32) return c->pl->kern->all_finite(v, p->dim_v, 1, p->dim_v);
    c->pl->kern->widen(v, p->v.dtype, c->out_row, p->dim_v);
    return c->pl->kern->all_finite(c->out_row, p->dim_v, 1, p->dim_v);
}

/* A prefetch of rows [t0, t0 + rows) of `heads` kv heads of t from kv head
 * `head` (those of them in t0's run of rows), in the float units of
 * flash_prefetch: a half tensor's strides and width are halved (the lines
 * requested are the same). */
static flash_prefetch prefetch_of(const flash_ctx *c, const attn_tensor *t, int64_t t0, int64_t head,
                                  int heads, int64_t width, int rows) {
    const int64_t per_float = (int64_t)sizeof(float) / problem_elem_bytes(t);
    if (rows > 0) rows = (int)(rows < problem_kv_run(c->p, t0) ? rows : problem_kv_run(c->p, t0));
    flash_prefetch pf = {NULL, t->stride[1] / per_float, t->stride[2] / per_float, ceil_div(width, per_float),
                         heads, rows > 0 ? rows : 0};
    if (rows > 0) pf.base = problem_kv_row(c->p, t, c->b, t0, head);
    return pf;
}

/* rows_pv on keys [key, key + nk) of every kv head of the unit, one call
 * per run of rows (a paged problem's blocks): the first applies alpha, the
 * others add to it (alpha NULL), as the careful path's runs do.  Each call
 * prefetches its share of the keys [pf_key, pf_key + pf_rows) (the next
 * step's), so that a paged step requests what a contiguous one does. */
static void rows_pv_runs(const flash_ctx *c, const float *s, int nk, int64_t key, const float *alpha,
                         int64_t pf_key, int pf_rows) {
    const flash_plan *pl = c->pl;
    const int heads = (int)pl->unit_kv_heads;
    int j0 = 0, n;
    do { /* at least once: nk = 0 still applies alpha */
        n = rows_run(c, key + j0, nk - j0);
        const int pf_n = c->step_n ? 0 : j0 + n <= pf_rows ? n : pf_rows - j0; /* a copied step: the copy fetches */
        flash_prefetch pf = prefetch_of(c, &c->p->k, pf_key + j0, c->kv_head, heads, c->p->dim, pf_n);
        rows_pv(c, s + j0, heads, (int)pl->sub_rows, n, key + j0, c->kv_head, alpha, c->o, &pf);
        alpha = NULL; /* the first call rescaled */
        j0 += n;
    } while (j0 < nk);
}

/* The cap of logit soft-capping in the base-2 units of the scores. */
static float softcap_base2(const sdpa_problem *p) { return (float)((double)p->opt.softcap * LOG2E); }

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
    if (check) check_scores(c, st * pl->sub_rows, pl->sub_rows, t0, nk, c->s, pl->sub_rows, 1);
    if (logits_softcapped(c->p)) pl->kern->softcap_n(c->s, nk * pl->sub_rows, softcap_base2(c->p));
    mask_scores(c, st * pl->sub_rows, pl->sub_rows, t0, nk, c->s, pl->sub_rows, 1);
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
    if (check) check_scores(c, 0, pl->rows, t0, nk, c->s, 1, pl->tile_keys);
    if (logits_softcapped(p))
        for (int64_t r = 0; r < pl->rows; r++) pl->kern->softcap_n(c->s + r * pl->tile_keys, nk, softcap_base2(p));
    mask_scores(c, 0, pl->rows, t0, nk, c->s, 1, pl->tile_keys);
}

/* Careful mode (item_run), tile path: a key whose row of the V copy holds a
 * NaN or Inf would reach, through 0·NaN, every row of a subtile that
 * processes it, the rows that do not see it included.  Its row of the copy
 * is zeroed, and the rows that see it are marked for the exact path, which
 * gives them the non-finite output they must have.  nk_sub: the keys each
 * subtile processes. */
static void drop_nonfinite_values_tile(flash_ctx *c, int64_t t0, int nk, const int *nk_sub) {
    const flash_plan *pl = c->pl;
    const int64_t dim_v = c->p->dim_v;
    for (int j = 0; j < nk; j++) {
        if (pl->fast_pv) { /* the bf16 copy vT: the source row decides */
            if (value_row_finite(c, t0 + j, c->kv_head)) continue;
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
                if (c->row[r].valid && row_sees(c, r, t0 + j)) c->exact[r] = 1;
        }
    }
}

/* Careful mode, rows path: V is read in place, so the keys whose value row
 * holds a NaN or Inf in some kv head are left out of the vectorised runs of
 * pv_rows; the finite heads of such a key are added by pv_rows on their own
 * (the very operations of a run), and the rows of a non-finite head that
 * see the key are marked for the exact path.  The first run prefetches
 * keys [pf_key, pf_key + pf_rows). */
static void rows_values_careful(flash_ctx *c, int64_t t0, int nk, int64_t pf_key, int pf_rows) {
    const flash_plan *pl = c->pl;
    const int heads = (int)pl->unit_kv_heads, per_head = (int)pl->sub_rows;
    const int64_t lds = pl->tile_keys, dim_v = c->p->dim_v;
    const flash_prefetch no_prefetch = {NULL, 0, 0, 0, 1, 0};
    const float *alpha = c->alpha;
    int run0 = 0;
    for (int j = 0; j <= nk; j++) {
        bool finite = true;
        for (int h = 0; j < nk && h < heads && finite; h++) finite = value_row_finite(c, t0 + j, c->kv_head + h);
        if (j < nk && finite) continue;
        rows_pv_runs(c, c->s + run0, j - run0, t0 + run0, alpha, pf_key, run0 == 0 ? pf_rows : 0);
        alpha = NULL; /* the first run applied the rescaling */
        if (j == nk) break;
        for (int h = 0; h < heads; h++) {
            const int r0 = h * per_head;
            if (value_row_finite(c, t0 + j, c->kv_head + h)) {
                rows_pv(c, c->s + r0 * lds + j, 1, per_head, 1, t0 + j, c->kv_head + h, NULL, c->o + r0 * dim_v,
                        &no_prefetch);
                continue;
            }
            for (int r = r0; r < r0 + per_head; r++)
                if (c->row[r].valid && row_sees(c, r, t0 + j)) c->exact[r] = 1;
        }
        run0 = j + 1;
    }
}

/* One online-softmax step and the P·V update for keys [t0, t0 + nk) and
 * every row of the unit.  The bf16 tile kernels prefetch the K/V rows of
 * the next step, [t0 + nk, hi), a share per subtile. */
static void unit_accumulate(flash_ctx *c, int64_t t0, int nk, int64_t hi) {
    const sdpa_problem *p = c->p;
    const flash_plan *pl = c->pl;
    const ukernel_table *kern = pl->kern;
    if (pl->rows_path) {
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
        kern->softmax_rows(c->s, pl->tile_keys, (int)pl->rows, nk, c->m, c->l, c->alpha);
        if (c->careful)
            rows_values_careful(c, t0, nk, t0 + nk, next);
        else
            rows_pv_runs(c, c->s, nk, t0, c->alpha, t0 + nk, next);
        c->step_n = 0;
        return;
    }
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
    if (c->careful) drop_nonfinite_values_tile(c, t0, nk, nk_sub);
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

/* Accumulator element (r, d): o[r][d] (rows) or, per subtile, o[d][r] (tile). */
static inline float *acc_at(const flash_ctx *c, int64_t r, int64_t d) {
    const flash_plan *pl = c->pl;
    if (pl->rows_path) return c->o + r * c->p->dim_v + d;
    int64_t st = r / pl->sub_rows, in_sub = r % pl->sub_rows;
    return c->o + (st * c->p->dim_v + d) * pl->sub_rows + in_sub;
}

/* The weights row of row r. */
static inline float *weights_row(const flash_ctx *c, float *weights, int64_t r) {
    const sdpa_problem *p = c->p;
    const flash_row *row = &c->row[r];
    return weights + ((c->b * p->heads_q + row->h) * p->len_q + row->i) * p->len_kv;
}

/* The weights of a finished unit: a second pass over the keys from the
 * saved state, w = exp2(s − m) / l, the forward's own probabilities. */
static void unit_weights(flash_ctx *c, float *weights) {
    const sdpa_problem *p = c->p;
    const flash_plan *pl = c->pl;
    const ukernel_table *kern = pl->kern;
    int64_t S = p->len_kv, step = pl->tile_keys;
    const flash_prefetch no_prefetch = {NULL, 0, 0, 0, 1, 0};
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
            if (pl->rows_path) {
                rows_scores(c, t0, nk, false, false);
                for (int64_t r = 0; r < pl->rows; r++)
                    kern->probs_rows(c->s + r * step, step, 1, nk, c->m + r, c->inv_l + r,
                                     weights_row(c, weights, r) + t0, S);
                continue;
            }
            copy_keys(c, t0, nk);
            subtile_scores(c, st, t0, nk, &no_prefetch, false);
            kern->probs_tile(c->s, nk, c->m + st * pl->sub_rows, c->inv_l + st * pl->sub_rows);
            for (int64_t in_sub = 0; in_sub < pl->sub_rows; in_sub++) {
                int64_t r = st * pl->sub_rows + in_sub;
                if (!c->row[r].valid) continue;
                float *w_row = weights_row(c, weights, r) + t0;
                for (int j = 0; j < nk; j++) w_row[j] = c->s[j * pl->sub_rows + in_sub];
            }
        }
    }
}

/* Whether the fp32 state of row r cannot be trusted: a NaN or +inf running
 * max (a NaN or +inf score or bias), a sum that is not finite, or nothing
 * seen although keys are in the row's range: a mask or -inf biases hide
 * them all (the exact path then says so, and writes the zeros of a fully
 * masked row), or every score the row sees overflowed to -inf in fp32. */
static bool state_untrusted(const flash_ctx *c, int64_t r) {
    const float m = c->m[r], l = c->l[r];
    if (isnan(m) || m == INFINITY || !isfinite(l)) return true;
    return l == 0.0f && c->row[r].begin < c->row[r].end;
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
        if (state_untrusted(c, r)) c->exact[r] = 1;
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
    for (int64_t r = 0; r < pl->rows; r++) {
        const flash_row *row = &c->row[r];
        if (!row->valid || !c->exact[r]) continue;
        const int64_t at = (c->b * p->heads_q + row->h) * p->len_q + row->i;
        attn__ref_forward_row(p, c->b, row->h, row->i, NULL, c->row_acc, out,
                              weights ? weights_row(c, weights, r) : NULL, lse ? lse + at : NULL);
    }
}

/* Whether an accumulator of a row not marked for the exact path came out
 * NaN or infinite: a value row held a NaN or Inf (reaching, through 0·NaN,
 * rows that do not see its key as well), or the weighted sum overflowed.
 * With `mark`, such rows are marked instead. */
static bool values_not_finite(flash_ctx *c, bool mark) {
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
    if (values_not_finite(c, false)) {
        c->careful = true;
        item_accumulate(c, lo, hi);
        c->careful = false;
        values_not_finite(c, true);
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
    plan_make(p, &pl);
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
