/*
 * forward_plan.c — the flash forward's plan: from the shapes alone (never
 * the thread count), the work decomposition forward.c describes (rows path
 * or tile path, units, subtiles, the decode split into chunks), the micro-
 * kernel table of the chosen ISA (src/isa/isa.h), whether precision fast
 * runs on native bf16 kernels, the strides of the packed copies and the
 * layout of each thread's scratch and of the split's partial states (the
 * workspace the front door allocates).
 */
#include "flash/forward.h"

#include "base/threads.h"

#include <string.h>

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
 * to FLASH_SUBTILES_MAX in long problems (plan_subtiles). */
#define FLASH_SUBTILES 8
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
 * (attn__flash_plan_make): float32 tensors are computed the same under either
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

void attn__flash_plan_make(const sdpa_problem *p, flash_plan *pl) {
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
            pl->off_step_k = reserve(&cursor, ceil_div(problem_offset_bytes(&p->k, keys * p->k.stride[1]), 4));
            pl->off_step_v = reserve(&cursor, ceil_div(problem_offset_bytes(&p->v, keys * p->v.stride[1]), 4));
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
    attn__flash_plan_make(p, &pl);
    return pl.fast_qk || pl.fast_pv;
}

size_t attn__flash_forward_workspace_size(const sdpa_problem *p) {
    flash_plan pl;
    attn__flash_plan_make(p, &pl);
    return plan_bytes(&pl);
}
