/*
 * flash_table.h — the contract between the flash loop nests (src/flash/)
 * and the attention micro-kernels of each instruction set (src/isa/<isa>/):
 * one table per ISA holding the forward's tile and rows kernels, the
 * backward's gemm and elementwise step, and the machine's FMA peak loop.
 * The loop nests, tiling, masking and threading are portable C written
 * once; only these entries are per ISA (the BLIS split, DESIGN.md §2).
 * The registry (isa.h) lists the ISAs, completes each one's table from the
 * portable one and chooses one per process; docs/kernels.md says how to add
 * an instruction set.
 *
 * Forward: two families of micro-kernels, chosen by the shape of the problem:
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
 * Backward: the backward of one (query tile, key tile) pair is five small
 * matrix products and one elementwise step.  With Br query rows, Bc keys,
 * the widths padded to multiples of 16 (Dp, Dvp) and every tile packed
 * row-major by the loop nest:
 *   S    [Br, Bc]  = Q [Br, Dp] . Kt [Dp, Bc]            gemm
 *   dP   [Br, Bc]  = dO [Br, Dvp] . Vt [Dvp, Bc]         gemm
 *   P, dS          = p_ds(S, dP)                          elementwise
 *   dV   [Bc, Dvp] += P^T . dO     (A read transposed)    gemm, accumulate
 *   dK   [Bc, Dp]  += dS^T . Q     (A read transposed)    gemm, accumulate
 *   dQ   [Br, Dp]  += dS . K [Bc, Dp]                     gemm, accumulate
 *
 * Shape legend: q [B, L, Hq, D]  k [B, S, Hkv, D]  v [B, S, Hkv, Dv]
 *               out [B, L, Hq, Dv]  weights [B, Hq, L, S]  lse [B, Hq, L]
 */
#ifndef ATTN_ISA_FLASH_TABLE_H
#define ATTN_ISA_FLASH_TABLE_H

#include "attn.h"

#include <stdbool.h>
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

/* Memory a micro-kernel should prefetch while it computes (prefetcht0; the
 * rows kernels with their ISA's ROWS_STREAM_LOCALITY):
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

/* The micro-kernels of one instruction set.  A table may leave entries
 * NULL: the registry (isa.h) fills them from the portable table before first use, so
 * the table a loop nest gets has every entry (an ISA can start with one
 * micro-kernel and grow).
 *
 * Softmax state per row: m (running max, -inf while nothing was seen), l
 * (running sum), alpha (the factor exp2(m_old − m_new) by which the
 * accumulator must be rescaled).  A row whose scores so far are all -inf
 * keeps m = -inf, l = 0 and gets alpha = 0 and probabilities 0: the kernels
 * subtract 0 instead of m then, so -inf − -inf (NaN) never happens. */
typedef struct ukernel_table {
    /* ------------------------------------------------ forward: shapes */

    int tile_rows;    /* Br: lanes of a tile (a multiple of the vector width)  */
    int key_block;    /* keys per register block of qk_tile                    */
    int tile_keys;    /* Bc: keys per tile, a multiple of key_block            */
    int block_keys;   /* keys per block of the rows kernels                    */

    /* ------------------------------------------------ forward: kernels */

    /* y[i] = exp2(x[i]) for i < n, to the accuracy of the vector kernels
     * (used by the tests and by the error measurement in docs). */
    void (*exp2_n)(const float *x, float *y, int64_t n);
    /* Logit soft-capping on n scores in place (docs/logits.md):
     * x[i] = cap · tanh(x[i] / cap), tanh(y) = 1 − 2 / (exp2(2·log2(e)·y) + 1)
     * from the FLASH_EXP2 polynomial; ±inf give ±cap, NaN propagates.  The
     * loop nests call it on a score tile in whatever base its scores are
     * (cap in the same base).  Measured error: docs/logits.md. */
    void (*softcap_n)(float *x, int64_t n, float cap);

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
    /* The structural mask (causal diagonal, window, key lengths) of a score
     * tile: st[j][r] = -inf for j0 <= j < j1 where j < lo[r] or j >= hi[r],
     * every other score untouched.  lo, hi [Br]: each row's visible keys
     * relative to the tile's first key, as floats holding integers (the
     * caller clamps them to [0, nk]; hi <= lo hides the whole row); the
     * caller passes the keys [j0, j1) some row hides, so that a diagonal
     * tile costs the width of its diagonal.  The rule is written once,
     * src/isa/templates/mask_tile.h, for every ISA. */
    void (*mask_tile)(float *st, int j0, int j1, const float *lo, const float *hi);
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
     * d < dim_v, summed in increasing j (alpha NULL: no rescaling, the
     * bits of alpha[r] = 1).  Reads o.
     * Both rows kernels prefetch row j of pf while on key j. */
    void (*pv_rows)(const float *s, int64_t lds, int heads, int rows_per_head, int nk,
                    const float *v, int64_t ldv, int64_t ldh, int64_t dim_v, const float *alpha,
                    float *o, int64_t ldo, const flash_prefetch *pf);
    /* qk_rows and pv_rows on K or V stored as kv_dtype (ATTN_F16,
     * ATTN_BF16, or an 8-bit block format, ATTN_Q8_0 / ATTN_FP8_E4M3),
     * read in place and widened (dequantized: d * code, base/kv8.h) in
     * registers; strides ldk, ldv, ldh in elements (for a block format
     * multiples of 32, as dim and dim_v are); the same operations, in the
     * same order, as the float kernels on the widened values (so the same
     * bits). */
    void (*qk_rows_half)(attn_dtype kv_dtype, const float *qp, int64_t ldq, int heads, int rows_per_head,
                         int64_t dim, const void *k, int64_t ldk, int64_t ldh, int nk, float *s,
                         int64_t lds, const flash_prefetch *pf);
    void (*pv_rows_half)(attn_dtype kv_dtype, const float *s, int64_t lds, int heads, int rows_per_head, int nk,
                         const void *v, int64_t ldv, int64_t ldh, int64_t dim_v, const float *alpha,
                         float *o, int64_t ldo, const flash_prefetch *pf);
    /* w[r][j] = exp2(s[r][j] − m[r]) · inv_l[r] for j < nk (m[r] = -inf: 0);
     * w may alias s. */
    void (*probs_rows)(const float *s, int64_t lds, int rows, int nk, const float *m,
                       const float *inv_l, float *w, int64_t ldw);

    /* ---- precision fast: native bfloat16 dot products (optional) ----
     * Entries an ISA without a bf16 dot product leaves NULL; the registry
     * does NOT fill them from the portable table (there is nothing faster
     * to fill them with), and the loop nest then runs the float kernels
     * above: `precision = fast` is a request, never a guarantee.  The
     * loop nest takes them only when bf16_supported() says yes, for tiles
     * of Br = 32 rows and Bc a multiple of 48 keys.
     * A bf16 "pair" is two bfloat16 in one 32-bit unit, element 2i in the
     * low half; a dot-product instruction (vdpbf16ps, or AMX's tdpbf16ps)
     * adds a[2i]·b[2i] + a[2i+1]·b[2i+1] to an fp32 accumulator (each
     * product exact, denormals flushed to zero, round to nearest even).
     * Layouts (uint16_t), zero padding included (the kernels read it):
     *   qp2 [Dp/2][Br][2]   packed queries as qp, rounded to bf16, widths
     *                       paired; Dp = round_up(D, 32), pads 0
     *   kt2 [Kp][ldk]       the key tile in bf16, row-major, widths padded
     *                       to Dp with 0, rows to Kp = round_up(nk, 48) with 0
     *   pt  [Pp][Br][2]     probabilities in bf16, keys paired; written by
     *                       softmax_tile_bf16 over st, pairs padded to
     *                       Pp = round_up(ceil(nk / 2), 16) with 0
     *   vT  [Dvp][ldv]      the value tile transposed (keys contiguous),
     *                       Dvp = round_up(Dv, 16) rows; keys padded to
     *                       round_up(nk, 32) with 0 (ldv >= that, even)
     * Pointers 64-byte aligned, as for the float tile kernels. */
    bool (*bf16_supported)(void);
    /* Which instructions they use on this CPU ("amx", "avx512-bf16"). */
    const char *(*bf16_name)(void);
    /* st[j][r] = sum over width pairs of kt2[j][pair] · qp2[pair][r], for
     * j < Kp; writes st without reading it; prefetches pf. */
    void (*qk_tile_bf16)(const uint16_t *qp2, int64_t dim, const uint16_t *kt2, int64_t ldk, int nk,
                         float *st, const flash_prefetch *pf);
    /* softmax_tile, with each probability rounded to bf16; l sums the
     * rounded values (so that P·V divides by the sum of the weights it
     * applied), and st is overwritten in place by pt (pair j/2 from rows
     * j, j+1; an odd nk's last pair and the padding get 0). */
    void (*softmax_tile_bf16)(float *st, int nk, float *m, float *l, float *alpha);
    /* ot[d][r] = alpha[r]·ot[d][r] + sum over key pairs of pt[pair][r] ·
     * (vT[d][2·pair], vT[d][2·pair + 1]), d < dim_v, in an order fixed by
     * nk and dim_v.  Reads ot.  Prefetches pf. */
    void (*pv_tile_bf16)(const uint16_t *pt, int nk, const uint16_t *vt, int64_t ldv, int64_t dim_v,
                         const float *alpha, float *ot, const flash_prefetch *pf);
    /* dst[2e] = a[e], dst[2e + 1] = b[e] (0 when b is NULL), e < n: two
     * bf16 rows into one row of pairs. */
    void (*interleave_bf16)(const uint16_t *a, const uint16_t *b, uint16_t *dst, int64_t n);
    /* dst[c·ldd + r] = src[r·lds + c] for r < rows (a multiple of 16),
     * c < cols: 32-bit units (bf16 pairs) transposed. */
    void (*transpose_32)(const uint32_t *src, int64_t lds, int rows, int64_t cols, uint32_t *dst, int64_t ldd);

    /* ------------------------------------------------ both directions */

    /* Half-precision storage (docs/kernels.md, "Half-precision storage"):
     * the loop nests convert every row they copy or pack, and every row of
     * K/V the rows kernels read, with these; the arithmetic stays fp32.
     * src / dst hold n elements of dtype (ATTN_F32, ATTN_F16, ATTN_BF16;
     * widen also the 8-bit block formats, src at a block's start and n a
     * multiple of 32: d * code, base/kv8.h), no alignment required.
     * widen:  dst[e] = src[e] as a float, exactly (every half is a float; a
 *         signalling NaN may come out quiet, as F16C's vcvtph2ps makes it).
     * narrow: dst[e] = src[e] rounded to nearest, ties to even, by the
     *         rules of base/dtype.h (overflow gives infinity, NaN stays a
     *         quiet NaN): bit for bit what dtype_f32_to_f16 / _bf16 give. */
    void (*widen)(const void *src, attn_dtype dtype, float *dst, int64_t n);
    void (*narrow)(const float *src, attn_dtype dtype, void *dst, int64_t n);

    /* True when x[r·ld + j] is finite (neither NaN nor ±Inf) for every
     * r < rows, j < n; reads nothing else.  The loop nests call it on a
     * tile they have just computed or copied, outside the other kernels, to
     * find the rare rows that must take the exact path (docs/semantics.md,
     * "Numbers and errors"); the fast path pays one pass over the tile. */
    bool (*all_finite)(const float *x, int64_t ld, int rows, int64_t n);

    /* ------------------------------------------------------- backward */

    /* C[m, n] = A[m, k] . B[k, n]  (accumulate = 0: C is written without
     * being read, it may hold garbage)  or  C += A . B  (accumulate = 1).
     * A(r, kk) is read at a[r * a_rs + kk * a_cs], so A may be a transposed
     * view; B rows are contiguous, ldb apart; C rows ldc apart.
     * n must be a multiple of 16 and b, c 64-byte aligned with ldb, ldc
     * multiples of 16; m, k >= 1 are free.  Every C element is one sum over
     * kk in increasing order: the result depends on the ISA, never on the
     * caller's threads. */
    void (*gemm)(int m, int n, int k, const float *a, int64_t a_rs, int64_t a_cs,
                 const float *b, int64_t ldb, float *c, int64_t ldc, int accumulate);

    /* The elementwise step of `rows` rows of `cols` (a multiple of 16) keys,
     * rows ld apart, in place:
     *   s[r][j]  <- p  = exp2(s[r][j] * c + nl[r])         (the weight)
     *   dp[r][j] <- ds = p * (dp[r][j] - di[r])
     * with c = scale * log2(e) and nl[r] = -lse[r] * log2(e).  A hidden
     * element has s = -inf, a row that must contribute nothing nl = -inf:
     * both give p = 0 exactly (exp2 of anything below -126 is 0), hence
     * ds = 0, never NaN.  exp2 is the FLASH_EXP2 polynomial above. */
    void (*p_ds)(float *s, float *dp, int rows, int cols, int64_t ld, float c,
                 const float *nl, const float *di);

    /* ------------------------------------------- the machine's FMA peak */

    /* Runs UKERNEL_PEAK_INNER fused multiply-adds on each of 12 independent
     * register-resident chains of peak_lanes floats, and returns a value that
     * depends on every chain (so the compiler cannot drop one). */
    float (*peak_chunk)(float seed);
    int peak_lanes;        /* floats per chain                                  */
    const char *peak_isa;  /* the instructions it uses: "avx512", "avx2", "scalar" */
} ukernel_table;

/* FMAs per chain of one peak_chunk call: long enough that looking at the
 * clock between calls costs nothing, short enough (~40 µs) to stop close to
 * a deadline. */
#define UKERNEL_PEAK_INNER (1 << 14)
/* The chains of peak_chunk: acc = acc * UKERNEL_PEAK_MUL + UKERNEL_PEAK_ADD
 * converges to add / (1 - mul) without overflow, underflow or denormals. */
#define UKERNEL_PEAK_MUL 0.999999f
#define UKERNEL_PEAK_ADD 1e-6f

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

/* The address of the next line of the stream, the cursor moved past it;
 * 0 when the stream is done.  The caller issues the prefetch, with the
 * locality it wants (flash_prefetch_next: into L1). */
static inline uintptr_t flash_prefetch_take(flash_prefetch_cursor *c) {
    if (c->left <= 0) return 0;
    const uintptr_t at = c->row + ((uintptr_t)c->seg * (uintptr_t)c->pf.seg_ld + (uintptr_t)c->col) * sizeof(float);
    c->col += 64 / (int64_t)sizeof(float);
    if (c->col < c->pf.width) return at;
    c->col = 0;
    if (++c->seg < c->pf.segs) return at;
    c->seg = 0;
    c->row += (uintptr_t)c->pf.ld * sizeof(float);
    c->left--;
    return at;
}

/* Requests the next line of the stream, if any, into L1 (prefetcht0). */
static inline void flash_prefetch_next(flash_prefetch_cursor *c) {
    const uintptr_t at = flash_prefetch_take(c);
    if (at) __builtin_prefetch((const void *)at, 0, 3);
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

#endif /* ATTN_ISA_FLASH_TABLE_H */
