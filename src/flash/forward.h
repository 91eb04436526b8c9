/*
 * forward.h — what the files of the flash forward share (forward.c says
 * how the work is decomposed): the plan of a problem, the rows of a unit,
 * one thread's context, the small helpers the paths use in their inner
 * loops (inline here, so that the split into files costs no call), and the
 * functions each file gives the others:
 *   forward.c          the loop nest: items, units, their finish and merge
 *   forward_plan.c     the decomposition and the scratch layout
 *   forward_tiles.c    the tile path (prefill)
 *   forward_rows.c     the rows path (decode)
 *   forward_careful.c  non-finite values and overflow, the exact path
 *
 * Shape legend: q [B, L, Hq, D]  k [B, S, Hkv, D]  v [B, S, Hkv, Dv]
 *               out [B, L, Hq, Dv]  weights [B, Hq, L, S]  lse [B, Hq, L]
 */
#ifndef ATTN_FLASH_FORWARD_H
#define ATTN_FLASH_FORWARD_H

#include "base/problem.h"
#include "isa/isa.h"

#include <stdbool.h>
#include <stdint.h>

/* A split into chunks is made only when there are fewer units than this,
 * and then into at most this many items: enough for load balance on any
 * likely thread count, few enough that merging costs nothing. */
#define FLASH_TARGET_ITEMS 64
/* The most query tiles (subtiles) a unit holds (forward_plan.c,
 * plan_subtiles). */
#define FLASH_SUBTILES_MAX 32

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

/* The factor of the packed queries: scale·log2(e), so that scores come out
 * in base 2. */
static inline float query_factor(const sdpa_problem *p) { return (float)((double)p->scale * LOG2E); }

/* The cap of logit soft-capping in the base-2 units of the scores. */
static inline float softcap_base2(const sdpa_problem *p) { return (float)((double)p->opt.softcap * LOG2E); }

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

/* A prefetch of rows [t0, t0 + rows) of `heads` kv heads of t from kv head
 * `head` (those of them in t0's run of rows), in the float units of
 * flash_prefetch: a half tensor's strides and width are halved (the lines
 * requested are the same). */
static inline flash_prefetch prefetch_of(const flash_ctx *c, const attn_tensor *t, int64_t t0, int64_t head,
                                         int heads, int64_t width, int rows) {
    const int64_t fl = (int64_t)sizeof(float);
    if (rows > 0) rows = (int)(rows < problem_kv_run(c->p, t0) ? rows : problem_kv_run(c->p, t0));
    flash_prefetch pf = {NULL, problem_offset_bytes(t, t->stride[1]) / fl, problem_offset_bytes(t, t->stride[2]) / fl,
                         ceil_div(problem_offset_bytes(t, width), fl), heads, rows > 0 ? rows : 0};
    if (rows > 0) pf.base = problem_kv_row(c->p, t, c->b, t0, head);
    return pf;
}

/* ---------------------------------------------------------- forward_plan.c */

/* The plan of problem p: the decomposition, the chosen ISA's table, the
 * strides, the scratch layout and the thread count. */
void attn__flash_plan_make(const sdpa_problem *p, flash_plan *pl);

/* ---------------------------------------------------------- forward_mask.c */

/* Applies what the score kernels do not know about (visibility.h) to the
 * scores of keys [t0, t0 + nk) of rows [row0, row0 + rows): s[j·js + r·rs]
 * is the score of key t0 + j for row row0 + r. */
void attn__flash_mask_scores(const flash_ctx *c, int64_t row0, int64_t rows, int64_t t0, int nk, float *s, int64_t js,
                             int64_t rs);

/* --------------------------------------------------------- forward_tiles.c */

void attn__flash_tile_pack_queries(flash_ctx *c);
/* One step (a K/V tile, keys [t0, t0 + nk)) of the item's online softmax;
 * the item's keys run up to hi. */
void attn__flash_tile_step(flash_ctx *c, int64_t t0, int nk, int64_t hi);
/* The weights of keys [t0, t0 + nk) of subtile st, from the final state. */
void attn__flash_tile_weights(flash_ctx *c, int64_t st, int64_t t0, int nk, float *weights);

/* ---------------------------------------------------------- forward_rows.c */

void attn__flash_rows_pack_queries(flash_ctx *c);
/* One step (a block, keys [t0, t0 + nk)) of the item's online softmax;
 * the item's keys run up to hi. */
void attn__flash_rows_step(flash_ctx *c, int64_t t0, int nk, int64_t hi);
/* The weights of keys [t0, t0 + nk) of every row, from the final state. */
void attn__flash_rows_weights(flash_ctx *c, int64_t t0, int nk, float *weights);
/* pv_rows on the values of keys [key, key + nk), `heads` kv heads from
 * `head`, one run of rows; nk = 0 only applies alpha. */
void attn__flash_rows_pv(const flash_ctx *c, const float *s, int heads, int per_head, int nk, int64_t key, int64_t head,
                         const float *alpha, float *o, const flash_prefetch *pf);
/* rows_pv on keys [key, key + nk) of every kv head of the unit, one call
 * per run of rows, prefetching keys [pf_key, pf_key + pf_rows). */
void attn__flash_rows_pv_runs(const flash_ctx *c, const float *s, int nk, int64_t key, const float *alpha,
                              int64_t pf_key, int pf_rows);

/* Careful mode, rows path: P·V without the keys whose value rows are not
 * finite, the rows that see them marked. */
void attn__flash_rows_values_careful(flash_ctx *c, int64_t t0, int nk, int64_t pf_key, int pf_rows);

/* ------------------------------------------------------- forward_careful.c */

/* Whether row r of the unit sees key `key` (every rule, visibility.h). */
bool attn__flash_row_sees(const flash_ctx *c, int64_t r, int64_t key);
/* Whether the value row of key `key`, kv head `head` is finite (a half row
 * is widened into c->out_row first). */
bool attn__flash_value_row_finite(flash_ctx *c, int64_t key, int64_t head);
/* Marks the rows whose raw scores are NaN or infinite at a key they see. */
void attn__flash_check_scores(flash_ctx *c, int64_t row0, int64_t rows, int64_t t0, int nk, const float *s,
                              int64_t js, int64_t rs);
/* Whether the fp32 state of row r cannot be trusted. */
bool attn__flash_state_untrusted(const flash_ctx *c, int64_t r);
/* Whether an accumulator of a row not marked came out NaN or infinite
 * (with `mark`, such rows are marked instead). */
bool attn__flash_values_not_finite(flash_ctx *c, bool mark);
/* Careful mode, tile path: the non-finite value rows of the V copy zeroed,
 * the rows that see them marked. */
void attn__flash_drop_nonfinite_values_tile(flash_ctx *c, int64_t t0, int nk, const int *nk_sub);
/* The exact path: the marked rows recomputed by the reference, in double. */
void attn__flash_recompute_marked(flash_ctx *c, attn_tensor *out, float *weights, float *lse);

#endif /* ATTN_FLASH_FORWARD_H */
