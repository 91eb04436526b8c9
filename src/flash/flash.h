/*
 * flash.h — what the flash kernel's loop nest (flash_forward.c) and its
 * per-ISA micro-kernels (kernels_*.c) share: the table of micro-kernels and
 * the contract of each entry.  Nothing here is visible outside src/flash
 * except through core/internal.h.
 *
 * Two families of micro-kernels, chosen by the shape of the problem:
 *
 *   tile kernels (prefill, many queries): the rows of a tile — query
 *     position × query head of one GQA group — lie in the vector lanes, so
 *     the online softmax is purely vertical (no horizontal reductions) and
 *     every lane is computed independently of the others.
 *       qp [D][Br]    packed queries, pre-multiplied by scale·log2(e)
 *       kt [nk][ldk]  a copy of the key tile (row stride ldk)
 *       st [Bc][Br]   scores, then probabilities (transposed: key-major)
 *       vt [nk][ldv]  a copy of the value tile
 *       ot [Dv][Br]   the output accumulator (transposed)
 *
 *   rows kernels (decode, few queries): each row is one query × head; the
 *     widths D / Dv or the keys lie in the lanes.  Keys and values are read
 *     in place from the caller's tensors, once, for all rows of the group.
 *       qp [R][ldq]   packed queries (pre-multiplied as above)
 *       s  [R][lds]   scores, then probabilities (row-major)
 *       o  [R][ldo]   the output accumulator
 *
 * All scores are in base 2: s = log2(e) · (scale · q·k + bias), so that the
 * exponential is exp2 and the softmax state (m, l) is the running maximum of
 * s and the running sum of exp2(s − m).
 *
 * Shape legend: q [B, L, Hq, D]  k [B, S, Hkv, D]  v [B, S, Hkv, Dv]
 *               out [B, L, Hq, Dv]  weights [B, Hq, L, S]  lse [B, Hq, L]
 */
#ifndef ATTN_FLASH_H
#define ATTN_FLASH_H

#include <stdint.h>

/* exp2 on [-0.5, 0.5]: 2^f ≈ 1 + f·(c1 + f·(c2 + f·(c3 + f·(c4 + f·(c5 + f·c6))))),
 * Cephes' exp2f minimax coefficients.  Arguments below FLASH_EXP2_MIN give 0
 * exactly (so a hidden key, s = -inf, gets probability 0 and results are
 * never denormal); NaN propagates.  Measured error: docs/kernels.md. */
#define FLASH_EXP2_MIN (-126.0f)
#define FLASH_EXP2_C1 6.931472028550421E-001f
#define FLASH_EXP2_C2 2.402264791363012E-001f
#define FLASH_EXP2_C3 5.550332471162809E-002f
#define FLASH_EXP2_C4 9.618437357674640E-003f
#define FLASH_EXP2_C5 1.339887440266574E-003f
#define FLASH_EXP2_C6 1.535336188319500E-004f

/* Memory a micro-kernel should prefetch (prefetcht0) while it computes:
 * rows [0, rows), ld floats apart, each made of segs segments of width
 * floats, seg_ld apart (the kv heads of a key) — the next K or V tile.  Tile
 * kernels spread the requests over their inner loop, about one cache line
 * per iteration, so they never bunch up and stall the core; rows kernels
 * request row j while on key j.  rows = 0 means nothing to prefetch.  A
 * prefetch never faults, so the rows may lie past the end of the caller's
 * tensor. */
typedef struct flash_prefetch {
    const float *base;
    int64_t ld, seg_ld, width;
    int segs, rows;
} flash_prefetch;

/* The micro-kernels of one instruction set.  Every entry is non-NULL.
 *
 * Softmax state per row: m (running max, -inf while nothing was seen), l
 * (running sum), alpha (the factor exp2(m_old − m_new) by which the
 * accumulator must be rescaled).  A row whose scores so far are all -inf
 * keeps m = -inf, l = 0 and gets alpha = 0 and probabilities 0: the kernels
 * subtract 0 instead of m then, so -inf − -inf (NaN) never happens. */
typedef struct flash_kernels {
    const char *isa;  /* "generic", "avx2", "avx512"                           */
    int tile_rows;    /* Br: lanes of a tile (a multiple of the vector width)  */
    int key_block;    /* keys per register block of qk_tile                    */
    int tile_keys;    /* Bc: keys per tile, a multiple of key_block            */
    int block_keys;   /* keys per block of the rows kernels                    */

    /* y[i] = exp2(x[i]) for i < n, to the accuracy of the vector kernels
     * (used by the tests and by the error measurement in docs). */
    void (*exp2_n)(const float *x, float *y, int64_t n);

    /* ---- tile kernels; Br = tile_rows lanes; pointers 64-byte aligned ---- */

    /* st[j][r] = sum_d kt[j][d] · qp[d][r] for j < round_up(nk, key_block).
     * kt must hold that many rows (the caller zero-pads the last block).
     * Writes st without reading it.  Prefetches pf. */
    void (*qk_tile)(const float *qp, int64_t dim, const float *kt, int64_t ldk, int nk,
                    float *st, const flash_prefetch *pf);
    /* Online-softmax step over the scores st[j][r], j < nk (nk >= 1):
     * m_new = max(m, max_j st), alpha = exp2(m − m_new), st = exp2(st − m_new)
     * in place, l = alpha·l + sum_j st (summed in increasing j), m = m_new. */
    void (*softmax_tile)(float *st, int nk, float *m, float *l, float *alpha);
    /* ot[d][r] = alpha[r]·ot[d][r] + sum_{j<nk} st[j][r] · vt[j][d], d < dim_v,
     * summed in increasing j.  Reads ot (the caller zeroes it first).
     * Prefetches pf. */
    void (*pv_tile)(const float *st, int nk, const float *vt, int64_t ldv, int64_t dim_v,
                    const float *alpha, float *ot, const flash_prefetch *pf);
    /* The weights of a finished row: st[j][r] = exp2(st[j][r] − m[r]) · inv_l[r],
     * j < nk, in place (m[r] = -inf: 0). */
    void (*probs_tile)(float *st, int nk, const float *m, const float *inv_l);

    /* ---- rows kernels; k, v need no alignment ----
     * The rows come in `heads` groups of rows_per_head (<= FLASH_ROWS_MAX)
     * rows, group h reading kv head h at offset h·ldh of each key's row:
     * one call covers every kv head, and walks the keys in order, so a
     * decode step reads K and V front to back, a whole page at a time. */

    /* s[r][j] = sum_d qp[r][d] · k[j·ldk + (r / rows_per_head)·ldh + d]
     * for r < heads·rows_per_head, j < nk; each a dot product in an order
     * fixed by dim. */
    void (*qk_rows)(const float *qp, int64_t ldq, int heads, int rows_per_head, int64_t dim,
                    const float *k, int64_t ldk, int64_t ldh, int nk, float *s, int64_t lds,
                    const flash_prefetch *pf);
    /* The online-softmax step of softmax_tile on row-major scores s[r][j]
     * (sums in an order fixed by nk). */
    void (*softmax_rows)(float *s, int64_t lds, int rows, int nk, float *m, float *l,
                         float *alpha);
    /* o[r][d] = alpha[r]·o[r][d] + sum_{j<nk} s[r][j] · v[j·ldv + (r / rows_per_head)·ldh + d],
     * d < dim_v, summed in increasing j.  Reads o.
     * Both rows kernels prefetch row j of pf while on key j. */
    void (*pv_rows)(const float *s, int64_t lds, int heads, int rows_per_head, int nk,
                    const float *v, int64_t ldv, int64_t ldh, int64_t dim_v, const float *alpha,
                    float *o, int64_t ldo, const flash_prefetch *pf);
    /* w[r][j] = exp2(s[r][j] − m[r]) · inv_l[r] for j < nk (m[r] = -inf: 0);
     * w may alias s. */
    void (*probs_rows)(const float *s, int64_t lds, int rows, int nk, const float *m,
                       const float *inv_l, float *w, int64_t ldw);
} flash_kernels;

/* The cursor of a prefetch stream: the next cache line to request. */
typedef struct flash_prefetch_cursor {
    uintptr_t row;     /* address of the current row (integer arithmetic:
                          the rows may lie past the caller's tensor)      */
    int64_t col;       /* float offset of the next line in the segment    */
    int seg, left;     /* current segment; rows not yet finished          */
    flash_prefetch pf;
} flash_prefetch_cursor;

static inline flash_prefetch_cursor flash_prefetch_start(const flash_prefetch *pf) {
    flash_prefetch_cursor c = {(uintptr_t)pf->base, 0, 0, pf->rows, *pf};
    return c;
}

/* Requests the next line of the stream, if any. */
static inline void flash_prefetch_next(flash_prefetch_cursor *c) {
    if (c->left <= 0) return;
    uintptr_t at = c->row + ((uintptr_t)c->seg * (uintptr_t)c->pf.seg_ld + (uintptr_t)c->col) * sizeof(float);
    __builtin_prefetch((const void *)at, 0, 3);
    c->col += 64 / (int64_t)sizeof(float);
    if (c->col < c->pf.width) return;
    c->col = 0;
    if (++c->seg < c->pf.segs) return;
    c->seg = 0;
    c->row += (uintptr_t)c->pf.ld * sizeof(float);
    c->left--;
}

/* Requests the rest of the current row of the stream. */
static inline void flash_prefetch_row(flash_prefetch_cursor *c) {
    int left = c->left;
    while (c->left == left && left > 0) flash_prefetch_next(c);
}

/* Requests whatever of the stream is left. */
static inline void flash_prefetch_rest(flash_prefetch_cursor *c) {
    while (c->left > 0) flash_prefetch_next(c);
}

/* The largest number of rows per kv head (query positions × heads of one
 * group) the rows kernels take; problems with more use the tile kernels. */
#define FLASH_ROWS_MAX 16

/* The kernels chosen for this process (filled once; never NULL). */
const flash_kernels *flash_kernels_active(void);

/* The per-ISA tables.  The x86 ones exist only on x86-64 builds, and are to
 * be used only when the CPU supports them. */
extern const flash_kernels flash_kernels_generic;
#if defined(__x86_64__)
extern const flash_kernels flash_kernels_avx2;
extern const flash_kernels flash_kernels_avx512;
#endif

#endif /* ATTN_FLASH_H */
