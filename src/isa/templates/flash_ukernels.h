/*
 * flash_ukernels.h — the flash forward's micro-kernels written once for any
 * vector width: instantiated by src/isa/x86_avx2/ukernels.c (8 lanes) and
 * src/isa/x86_avx512/ukernels.c (16 lanes).  The including file includes
 * its ISA's vec.h and exp2.h (the vector vocabulary, templates/common.h
 * lists it) and defines the tile shape:
 *
 *   TILE_QV                vectors per tile row: Br = TILE_QV · VLEN lanes
 *   KEY_BLOCK              keys per qk_tile register block (KEY_BLOCK·TILE_QV
 *                          accumulators)
 *   PV_BLOCK, PV_SMALL     widths of pv_tile's register blocks (PV_BLOCK·TILE_QV
 *                          accumulators; PV_SMALL then 1 take the remainder)
 *   TILE_KEYS, BLOCK_KEYS  Bc (a multiple of KEY_BLOCK) and the rows-path block
 *   ROWS_STREAM_LOCALITY   the locality of the rows kernels' stream of the other
 *                          pass's rows: 3 (into L1) or 1 (into L2) (below)
 *
 * It defines static functions simd_exp2_n, simd_softcap_n, simd_qk_tile, simd_softmax_tile,
 * simd_pv_tile, simd_probs_tile, simd_mask_tile (templates/mask_tile.h), simd_qk_rows, simd_qk_rows_half,
 * simd_softmax_rows, simd_pv_rows, simd_pv_rows_half, simd_probs_rows and
 * simd_all_finite for the including file's table, and the always-inline
 * pieces an ISA's own tile kernels reuse (x86_avx512/dot_bf16.h): the
 * register blocks (tile_block_*) and the online softmax's steps
 * (softmax_tile_start, softmax_tile_finish).
 *
 * Contracts: src/isa/flash_table.h.  Every lane of a tile kernel is one row
 * and is computed independently of the others; the rows kernels compute
 * each score and each output element by an order of operations fixed by
 * the shapes.
 */

#include "isa/templates/common.h"
#include "base/dtype.h"
#include "base/kv8.h"

#define TILE_ROWS (TILE_QV * VLEN)
#include "isa/templates/mask_tile.h"
/* ROWS_STREAM_LOCALITY (the ISA's choice too): __builtin_prefetch's
 * locality for the rows kernels' stream of the other pass's rows: 3
 * (prefetcht0, into L1) or 1 (prefetcht2, into L2).  On Zen 3 (AVX2) the
 * stream into L2 took 1.03-1.06x the time (v16b); on Zen 4 (AVX-512) the
 * stream into L1 stalled the scores pass on full miss buffers, and into L2
 * a decode step took 0.76-0.83x the time (v20, docs/kernels.md). */
#ifndef ROWS_STREAM_LOCALITY
#error "an ISA sets ROWS_STREAM_LOCALITY before including the rows kernels"
#endif

static SIMD_TARGET void simd_exp2_n(const float *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + VLEN <= n; i += VLEN) v_storeu(y + i, v_exp2(v_loadu(x + i)));
    if (i < n) v_store_tail(y + i, v_exp2(v_load_tail(x + i, (int)(n - i), 0.0f)), (int)(n - i));
}

static SIMD_TARGET void simd_softcap_n(float *x, int64_t n, float cap) {
    const vec c = v_set1(cap), k = v_set1((float)(2.0 * 1.4426950408889634 / (double)cap));
    const vec one = v_set1(1.0f), two = v_set1(2.0f);
    int64_t i = 0;
    for (; i + VLEN <= n; i += VLEN) {
        vec e = v_exp2(v_mul(v_loadu(x + i), k));
        v_storeu(x + i, v_mul(c, v_sub(one, v_div(two, v_add(e, one)))));
    }
    if (i < n) {
        vec e = v_exp2(v_mul(v_load_tail(x + i, (int)(n - i), 0.0f), k));
        v_store_tail(x + i, v_mul(c, v_sub(one, v_div(two, v_add(e, one)))), (int)(n - i));
    }
}

/* x − x is +0 when x is finite and NaN when it is not (Inf − Inf, NaN):
 * summed, one non-finite element leaves NaN.  Four sums, so that the adds
 * do not wait on each other; a contiguous block (ld == n) is one row. */
static SIMD_TARGET bool simd_all_finite(const float *x, int64_t ld, int rows, int64_t n) {
    if (ld == n) {
        n *= rows;
        rows = 1;
    }
    vec a0 = v_zero(), a1 = v_zero(), a2 = v_zero(), a3 = v_zero(), t;
    for (int r = 0; r < rows; r++) {
        const float *x_r = x + r * ld;
        int64_t j = 0;
        for (; j + 4 * VLEN <= n; j += 4 * VLEN) {
            t = v_loadu(x_r + j);
            a0 = v_add(a0, v_sub(t, t));
            t = v_loadu(x_r + j + VLEN);
            a1 = v_add(a1, v_sub(t, t));
            t = v_loadu(x_r + j + 2 * VLEN);
            a2 = v_add(a2, v_sub(t, t));
            t = v_loadu(x_r + j + 3 * VLEN);
            a3 = v_add(a3, v_sub(t, t));
        }
        for (; j + VLEN <= n; j += VLEN) {
            t = v_loadu(x_r + j);
            a0 = v_add(a0, v_sub(t, t));
        }
        if (j < n) {
            t = v_load_tail(x_r + j, (int)(n - j), 0.0f);
            a1 = v_add(a1, v_sub(t, t));
        }
    }
    return v_reduce_add(v_add(v_add(a0, a1), v_add(a2, a3))) == 0.0f;
}

/* The element types the rows kernels read K and V in: the caller's tensors
 * in place, half rows widened in registers by vec.h's v_widen_f16 /
 * v_widen_bf16 (a decode step then moves half the bytes).  Always a
 * constant where used, so each kernel is compiled once per type. */
enum { KV_F32, KV_F16, KV_BF16, KV_Q8_0, KV_FP8 };
#define KV_BYTES(kind) ((kind) == KV_F32 ? (int64_t)sizeof(float) : (int64_t)sizeof(uint16_t))
#define KV_BLOCKED(kind) ((kind) == KV_Q8_0 || (kind) == KV_FP8)

/* Address of element `at` from base (elements of kind), as bytes; for the
 * 8-bit block formats `at` is a multiple of 32 (a row's start: kv8.h). */
SIMD_INLINE const void *kv_at(const void *base, int64_t at, const int kind) {
    if (KV_BLOCKED(kind)) return (const char *)base + kv8_offset_bytes(at);
    return (const char *)base + at * KV_BYTES(kind);
}

SIMD_INLINE vec kv_load_tail(const void *p, int n, float fill, const int kind);

/* VLEN elements of a K/V row from element 0 of p, as floats. */
SIMD_INLINE vec kv_loadu(const void *p, const int kind) {
    if (kind == KV_F16) return v_widen_f16(p);
    if (kind == KV_BF16) return v_widen_bf16(p);
    return v_loadu((const float *)p);
}

/* VLEN elements from element d of the row at `row` (d a multiple of VLEN),
 * as floats: an 8-bit block is dequantized in registers, d * code (the
 * scale read per vector: VLEN divides 32, so a vector never straddles
 * blocks). */
SIMD_INLINE vec kv_load_el(const void *row, int64_t d, const int kind) {
    if (!KV_BLOCKED(kind)) return kv_loadu(kv_at(row, d, kind), kind);
    const uint8_t *block = (const uint8_t *)row + kv8_offset_bytes(d);
    const uint8_t *codes = block + 2 + d % KV8_BLOCK;
    return kind == KV_Q8_0 ? v_dequant_q8(codes, v_kv8_scale(block)) : v_dequant_e4m3(codes, v_kv8_scale(block));
}

/* Lanes < n from element d of the row at `row`, the others fill; nothing
 * read beyond n.  (A block format's widths are multiples of 32, so its
 * rows have no tail; the scalar loop keeps the function total.) */
SIMD_INLINE vec kv_load_tail_el(const void *row, int64_t d, int n, float fill, const int kind) {
    if (KV_BLOCKED(kind)) {
        float part[VLEN];
        for (int e = 0; e < n; e++)
            part[e] = kv8_value(kind == KV_Q8_0 ? ATTN_Q8_0 : ATTN_FP8_E4M3,
                                (const uint8_t *)row + kv8_offset_bytes(d + e), (d + e) % KV8_BLOCK);
        return v_load_tail(part, n, fill);
    }
    return kv_load_tail(kv_at(row, d, kind), n, fill, kind);
}

/* Lanes < n from p, the others fill; nothing read beyond n. */
SIMD_INLINE vec kv_load_tail(const void *p, int n, float fill, const int kind) {
    if (kind == KV_F32) return v_load_tail((const float *)p, n, fill);
    float part[VLEN];
    for (int e = 0; e < n; e++)
        part[e] = kind == KV_F16 ? dtype_f16_to_f32(((const uint16_t *)p)[e]) : dtype_bf16_to_f32(((const uint16_t *)p)[e]);
    return v_load_tail(part, n, fill);
}

/* The prefetches a rows kernel issues before each kv head of a group of
 * keys: `lines` lines of the other pass's stream (a decode step reads each
 * cache line once, and the hardware prefetchers alone, which stop at 4 KiB
 * pages, keep too few lines in flight).  Spread over the heads, not issued
 * for a group of keys at once: a burst of a group's 256-512 lines filled
 * the core's miss queue, and memory then idled while the group was
 * computed (Zen 3, v16).  The kernels' own look-ahead on the rows they read
 * is gone (docs/kernels.md, changelog r3): the stream alone keeps the
 * lines in flight. */
SIMD_INLINE void prefetch_stream(flash_prefetch_cursor *next, int lines) {
    for (int l = 0; l < lines; l++) {
        const uintptr_t at = flash_prefetch_take(next);
        if (at) __builtin_prefetch((const void *)at, 0, ROWS_STREAM_LOCALITY);
    }
}

/* The lines of the other pass's stream each of `heads` heads requests for
 * `keys` keys: a row of the stream per key, in all. */
SIMD_INLINE int prefetch_share(const flash_prefetch *pf, int keys, int heads) {
    const int64_t per_row = (int64_t)pf->segs * ((pf->width + 15) / 16);
    return (int)((per_row * keys + heads - 1) / heads);
}

/* ------------------------------------------------------------ tile kernels */

/* The register blocks of the tile kernels (here and in an ISA's own, such
 * as x86_avx512/dot_bf16.h): acc[b][qv] is lane block qv of tile row b,
 * whose home is out + b·TILE_ROWS.  Always inlined with a constant width,
 * so the accumulators stay in registers. */
SIMD_INLINE void tile_block_zero(const int width, vec acc[][TILE_QV]) {
    SIMD_UNROLL for (int b = 0; b < width; b++)
        SIMD_UNROLL for (int qv = 0; qv < TILE_QV; qv++) acc[b][qv] = v_zero();
}

/* acc = alpha · out: the running output, rescaled for the new maximum. */
SIMD_INLINE void tile_block_rescaled(const int width, vec acc[][TILE_QV], const vec *alpha, const float *out) {
    SIMD_UNROLL for (int b = 0; b < width; b++)
        SIMD_UNROLL for (int qv = 0; qv < TILE_QV; qv++)
            acc[b][qv] = v_mul(alpha[qv], v_load(out + b * TILE_ROWS + qv * VLEN));
}

SIMD_INLINE void tile_block_store(const int width, vec acc[][TILE_QV], float *out) {
    SIMD_UNROLL for (int b = 0; b < width; b++)
        SIMD_UNROLL for (int qv = 0; qv < TILE_QV; qv++) v_storeu(out + b * TILE_ROWS + qv * VLEN, acc[b][qv]);
}

/* The online softmax of a tile, written once for every softmax_tile (the
 * ISA's variants differ only in what they make of each probability).
 * Its start: m_new = max(m, the nk rows of st), m_use = m_new with -inf
 * read as 0 (a row that has seen nothing visible keeps weights 0, not NaN),
 * sum = 0. */
SIMD_INLINE void softmax_tile_start(const float *st, int nk, const float *m, vec *m_new, vec *m_use, vec *sum) {
    SIMD_UNROLL for (int qv = 0; qv < TILE_QV; qv++) m_new[qv] = v_load(m + qv * VLEN);
    for (int j = 0; j < nk; j++)
        SIMD_UNROLL for (int qv = 0; qv < TILE_QV; qv++)
            m_new[qv] = v_max(m_new[qv], v_load(st + j * TILE_ROWS + qv * VLEN));
    SIMD_UNROLL for (int qv = 0; qv < TILE_QV; qv++) {
        m_use[qv] = v_zero_if_neg_inf(m_new[qv]);
        sum[qv] = v_zero();
    }
}

/* Its end, once sum holds the tile's probabilities' sum: alpha = exp2(m -
 * m_use) rescales what came before, l = alpha·l + sum, m = m_new. */
SIMD_INLINE void softmax_tile_finish(float *m, float *l, float *alpha, const vec *m_new, const vec *m_use,
                                     const vec *sum) {
    SIMD_UNROLL for (int qv = 0; qv < TILE_QV; qv++) {
        vec a = v_exp2(v_sub(v_load(m + qv * VLEN), m_use[qv]));
        v_storeu(alpha + qv * VLEN, a);
        v_storeu(l + qv * VLEN, v_fma(a, v_load(l + qv * VLEN), sum[qv]));
        v_storeu(m + qv * VLEN, m_new[qv]);
    }
}

static SIMD_TARGET void simd_qk_tile(const float *qp, int64_t dim, const float *kt, int64_t ldk,
                                     int nk, float *st, const flash_prefetch *pf) {
    flash_prefetch_cursor next = flash_prefetch_start(pf);
    for (int j0 = 0; j0 < nk; j0 += KEY_BLOCK) {
        const float *k_block = kt + (int64_t)j0 * ldk;
        vec acc[KEY_BLOCK][TILE_QV];
        tile_block_zero(KEY_BLOCK, acc);
        for (int64_t d = 0; d < dim; d++) {
            vec q[TILE_QV];
            flash_prefetch_next(&next);
            SIMD_UNROLL for (int qv = 0; qv < TILE_QV; qv++) q[qv] = v_load(qp + d * TILE_ROWS + qv * VLEN);
            SIMD_UNROLL for (int kk = 0; kk < KEY_BLOCK; kk++) {
                vec k_b = v_set1(k_block[kk * ldk + d]);
                SIMD_UNROLL for (int qv = 0; qv < TILE_QV; qv++) acc[kk][qv] = v_fma(k_b, q[qv], acc[kk][qv]);
            }
        }
        tile_block_store(KEY_BLOCK, acc, st + (int64_t)j0 * TILE_ROWS);
    }
    flash_prefetch_rest(&next);
}

/* One vector of rows at a time, from its max to its state: only its max
 * and its sum are live beside exp2's constants, so that those stay in
 * registers (AVX2's 16 included); the iterations over j are independent
 * but for the sum, so they still overlap.  Lanes are independent, so the
 * order of the vectors changes no bit. */
static SIMD_TARGET void simd_softmax_tile(float *st, int nk, float *m, float *l, float *alpha) {
    SIMD_UNROLL for (int qv = 0; qv < TILE_QV; qv++) {
        float *s_qv = st + qv * VLEN;
        const vec m_old = v_load(m + qv * VLEN);
        /* the max in four chains (a max is exact: any order gives its bits) */
        vec m4[4] = {m_old, m_old, m_old, m_old};
        int j = 0;
        for (; j + 4 <= nk; j += 4)
            SIMD_UNROLL for (int u = 0; u < 4; u++) m4[u] = v_max(m4[u], v_load(s_qv + (j + u) * TILE_ROWS));
        for (; j < nk; j++) m4[0] = v_max(m4[0], v_load(s_qv + j * TILE_ROWS));
        const vec m_new = v_max(v_max(m4[0], m4[1]), v_max(m4[2], m4[3]));
        const vec m_use = v_zero_if_neg_inf(m_new);
        vec sum = v_zero();
        for (j = 0; j < nk; j++) {
            vec p = v_exp2_nonpos(v_sub(v_load(s_qv + j * TILE_ROWS), m_use));
            v_storeu(s_qv + j * TILE_ROWS, p);
            sum = v_add(sum, p);
        }
        vec a = v_exp2_nonpos(v_sub(m_old, m_use));
        v_storeu(alpha + qv * VLEN, a);
        v_storeu(l + qv * VLEN, v_fma(a, v_load(l + qv * VLEN), sum));
        v_storeu(m + qv * VLEN, m_new);
    }
}

/* ot[d][:] for d in [d0, d0 + width): the register block of pv_tile. */
SIMD_INLINE void pv_tile_block(const int width, const float *st, int nk, const float *vt,
                               int64_t ldv, const vec *alpha, float *ot, int64_t d0,
                               flash_prefetch_cursor *next) {
    vec acc[PV_BLOCK][TILE_QV];
    tile_block_rescaled(width, acc, alpha, ot + d0 * TILE_ROWS);
    const float *v_col = vt + d0;
    for (int j = 0; j < nk; j++, v_col += ldv) {
        vec p[TILE_QV];
        flash_prefetch_next(next);
        SIMD_UNROLL for (int qv = 0; qv < TILE_QV; qv++) p[qv] = v_load(st + j * TILE_ROWS + qv * VLEN);
        SIMD_UNROLL for (int b = 0; b < width; b++) {
            vec v_b = v_set1(v_col[b]);
            SIMD_UNROLL for (int qv = 0; qv < TILE_QV; qv++) acc[b][qv] = v_fma(v_b, p[qv], acc[b][qv]);
        }
    }
    tile_block_store(width, acc, ot + d0 * TILE_ROWS);
}

static SIMD_TARGET void simd_pv_tile(const float *st, int nk, const float *vt, int64_t ldv,
                                     int64_t dim_v, const float *alpha, float *ot,
                                     const flash_prefetch *pf) {
    flash_prefetch_cursor next = flash_prefetch_start(pf);
    vec a[TILE_QV];
    SIMD_UNROLL for (int qv = 0; qv < TILE_QV; qv++) a[qv] = v_load(alpha + qv * VLEN);
    int64_t d0 = 0;
    for (; d0 + PV_BLOCK <= dim_v; d0 += PV_BLOCK) pv_tile_block(PV_BLOCK, st, nk, vt, ldv, a, ot, d0, &next);
    for (; d0 + PV_SMALL <= dim_v; d0 += PV_SMALL) pv_tile_block(PV_SMALL, st, nk, vt, ldv, a, ot, d0, &next);
    for (; d0 < dim_v; d0++) pv_tile_block(1, st, nk, vt, ldv, a, ot, d0, &next);
    flash_prefetch_rest(&next);
}

static SIMD_TARGET void simd_probs_tile(float *st, int nk, const float *m, const float *inv_l) {
    vec m_use[TILE_QV], scale[TILE_QV];
    SIMD_UNROLL for (int qv = 0; qv < TILE_QV; qv++) {
        m_use[qv] = v_zero_if_neg_inf(v_load(m + qv * VLEN));
        scale[qv] = v_load(inv_l + qv * VLEN);
    }
    SIMD_UNROLL for (int qv = 0; qv < TILE_QV; qv++)
        for (int j = 0; j < nk; j++) {
            float *s_j = st + j * TILE_ROWS + qv * VLEN;
            v_storeu(s_j, v_mul(v_exp2_nonpos(v_sub(v_load(s_j), m_use[qv])), scale[qv]));
        }
}

/* ------------------------------------------------------------ rows kernels */

/* s[r·lds + i] = dot(q_r, k_i) over dim elements for `rows` query rows
 * q_r = q + r·ldq and `keys` key rows k_i = k + i·ldk (constants, rows·keys
 * <= 8 accumulators).  Each score sums the vectors in order, then the lane
 * tree (v_reduce_add, or v_reduce_add4: the same bits), whatever the
 * block, so a score does not depend on the blocking.  A vector of a key
 * row is loaded, and widened, once for all rows, a vector of a query row
 * once for all keys; the rows·keys chains of FMAs are independent (one
 * chain of dim / VLEN FMAs per score had left half decode waiting on the
 * FMA latency, 40-60 % of its time on Zen 3). */
SIMD_INLINE void dot_block(const int rows, const int keys, const float *q, int64_t ldq, const void *k, int64_t ldk,
                           int64_t dim, const int kind, float *s, int64_t lds) {
    vec acc[4][4];
    SIMD_UNROLL for (int r = 0; r < rows; r++) SIMD_UNROLL for (int i = 0; i < keys; i++) acc[r][i] = v_zero();
    int64_t d = 0;
    for (; d + VLEN <= dim; d += VLEN) {
        vec q_d[4];
        SIMD_UNROLL for (int r = 0; r < rows; r++) q_d[r] = v_loadu(q + r * ldq + d);
        SIMD_UNROLL for (int i = 0; i < keys; i++) {
            const vec k_d = kv_load_el(kv_at(k, i * ldk, kind), d, kind);
            SIMD_UNROLL for (int r = 0; r < rows; r++) acc[r][i] = v_fma(k_d, q_d[r], acc[r][i]);
        }
    }
    if (d < dim) {
        const int tail = (int)(dim - d);
        vec q_d[4];
        SIMD_UNROLL for (int r = 0; r < rows; r++) q_d[r] = v_load_tail(q + r * ldq + d, tail, 0.0f);
        SIMD_UNROLL for (int i = 0; i < keys; i++) {
            const vec k_d = kv_load_tail_el(kv_at(k, i * ldk, kind), d, tail, 0.0f, kind);
            SIMD_UNROLL for (int r = 0; r < rows; r++) acc[r][i] = v_fma(k_d, q_d[r], acc[r][i]);
        }
    }
    if (keys == 4) {
        SIMD_UNROLL for (int r = 0; r < rows; r++) v_reduce_add4(acc[r][0], acc[r][1], acc[r][2], acc[r][3], s + r * lds);
    } else if (keys == 2 && rows % 2 == 0) {
        SIMD_UNROLL for (int r = 0; r < rows; r += 2) {
            float sum[4];
            v_reduce_add4(acc[r][0], acc[r][1], acc[r + 1][0], acc[r + 1][1], sum);
            s[r * lds] = sum[0];
            s[r * lds + 1] = sum[1];
            s[(r + 1) * lds] = sum[2];
            s[(r + 1) * lds + 1] = sum[3];
        }
    } else {
        SIMD_UNROLL for (int r = 0; r < rows; r++) SIMD_UNROLL for (int i = 0; i < keys; i++)
            s[r * lds + i] = v_reduce_add(acc[r][i]);
    }
}

/* The scores of `rows` query rows of one kv head against `keys` (<= 4)
 * consecutive key rows: blocks of `width` keys, then single keys. */
SIMD_INLINE void dot_keys(const int rows, const int width, int keys, const float *q, int64_t ldq, const void *k,
                          int64_t ldk, int64_t dim, const int kind, float *s, int64_t lds) {
    int i = 0;
    for (; i + width <= keys; i += width)
        dot_block(rows, width, q, ldq, kv_at(k, i * ldk, kind), ldk, dim, kind, s + i, lds);
    for (; i < keys; i++) dot_block(rows, 1, q, ldq, kv_at(k, i * ldk, kind), ldk, dim, kind, s + i, lds);
}

/* qk_rows on keys of element type kind (strides in elements): four keys at
 * a time, every kv head, so the keys are still read front to back; a
 * head's rows four (against two keys at a time), then two, then one. */
SIMD_INLINE void qk_rows_of(const int kind, const float *qp, int64_t ldq, int heads, int rows_per_head,
                            int64_t dim, const void *k, int64_t ldk, int64_t ldh, int nk, float *s,
                            int64_t lds, const flash_prefetch *pf) {
    flash_prefetch_cursor next = flash_prefetch_start(pf);
    for (int j = 0; j < nk; j += 4) {
        const int keys = nk - j < 4 ? nk - j : 4;
        const int lines = prefetch_share(pf, keys, heads);
        for (int h = 0; h < heads; h++) {
            prefetch_stream(&next, lines);
            const void *k_jh = kv_at(k, j * ldk + h * ldh, kind);
            int r = h * rows_per_head;
            const int end = r + rows_per_head;
            for (; r + 4 <= end; r += 4) dot_keys(4, 2, keys, qp + r * ldq, ldq, k_jh, ldk, dim, kind, s + r * lds + j, lds);
            if (r + 2 <= end) {
                dot_keys(2, 4, keys, qp + r * ldq, ldq, k_jh, ldk, dim, kind, s + r * lds + j, lds);
                r += 2;
            }
            if (r < end) dot_keys(1, 4, keys, qp + r * ldq, ldq, k_jh, ldk, dim, kind, s + r * lds + j, lds);
        }
    }
}

static SIMD_TARGET void simd_qk_rows(const float *qp, int64_t ldq, int heads, int rows_per_head,
                                     int64_t dim, const float *k, int64_t ldk, int64_t ldh, int nk,
                                     float *s, int64_t lds, const flash_prefetch *pf) {
    qk_rows_of(KV_F32, qp, ldq, heads, rows_per_head, dim, k, ldk, ldh, nk, s, lds, pf);
}

static SIMD_TARGET void simd_qk_rows_half(attn_dtype kv_dtype, const float *qp, int64_t ldq, int heads,
                                          int rows_per_head, int64_t dim, const void *k, int64_t ldk,
                                          int64_t ldh, int nk, float *s, int64_t lds, const flash_prefetch *pf) {
    if (kv_dtype == ATTN_F16)
        qk_rows_of(KV_F16, qp, ldq, heads, rows_per_head, dim, k, ldk, ldh, nk, s, lds, pf);
    else if (kv_dtype == ATTN_Q8_0)
        qk_rows_of(KV_Q8_0, qp, ldq, heads, rows_per_head, dim, k, ldk, ldh, nk, s, lds, pf);
    else if (kv_dtype == ATTN_FP8_E4M3)
        qk_rows_of(KV_FP8, qp, ldq, heads, rows_per_head, dim, k, ldk, ldh, nk, s, lds, pf);
    else
        qk_rows_of(KV_BF16, qp, ldq, heads, rows_per_head, dim, k, ldk, ldh, nk, s, lds, pf);
}

static SIMD_TARGET void simd_softmax_rows(float *s, int64_t lds, int rows, int nk, float *m,
                                          float *l, float *alpha) {
    for (int r = 0; r < rows; r++) {
        float *s_r = s + r * lds;
        vec mx = v_set1(-INFINITY);
        int j = 0;
        for (; j + VLEN <= nk; j += VLEN) mx = v_max(mx, v_loadu(s_r + j));
        if (j < nk) mx = v_max(mx, v_load_tail(s_r + j, nk - j, -INFINITY));
        float m_block = v_reduce_max(mx);
        float m_new = m_block > m[r] ? m_block : m[r];
        float m_use = m_new == -INFINITY ? 0.0f : m_new;
        vec mu = v_set1(m_use), sum = v_zero();
        for (j = 0; j + VLEN <= nk; j += VLEN) {
            vec p = v_exp2_nonpos(v_sub(v_loadu(s_r + j), mu));
            v_storeu(s_r + j, p);
            sum = v_add(sum, p);
        }
        if (j < nk) {
            vec p = v_exp2_nonpos(v_sub(v_load_tail(s_r + j, nk - j, -INFINITY), mu));
            v_store_tail(s_r + j, p, nk - j);
            sum = v_add(sum, p);
        }
        alpha[r] = v_first(v_exp2_nonpos(v_set1(m[r] - m_use)));
        l[r] = alpha[r] * l[r] + v_reduce_add(sum);
        m[r] = m_new;
    }
}

/* Keys per pass of pv_rows: each output vector is loaded and stored once
 * per PV_KEYS keys, not once per key (store-bound on Zen 3 before). */
#define PV_KEYS 8

/* o_r[d0 .. d0 + width·VLEN) = alpha_r · o_r[...] + sum_i p_r,i · v_i[...]
 * for `rows` rows r (o_r = o + r·ldo, p_r,i = s[r·lds + i], alpha_r =
 * alpha[r]; alpha NULL: no rescaling) and `keys` value rows v_i = v +
 * i·ldv, added in increasing i on accumulators in registers (rows · width
 * <= 8): each element the very operations, in the same order, as a
 * rescaling pass and then one key at a time (the product alpha_r · o is
 * rounded as a store would round it).  The tail block (width 1, tail
 * lanes) reads nothing past them. */
SIMD_INLINE void pv_block(const int rows, const int width, const int tail, const float *s, int64_t lds, int keys,
                          const void *v, int64_t ldv, const float *alpha, float *o, int64_t ldo, int64_t d0,
                          const int kind) {
    vec acc[4][4];
    SIMD_UNROLL for (int r = 0; r < rows; r++) SIMD_UNROLL for (int b = 0; b < width; b++) {
        acc[r][b] = tail ? v_load_tail(o + r * ldo + d0, tail, 0.0f) : v_loadu(o + r * ldo + d0 + b * VLEN);
        if (alpha) acc[r][b] = v_mul(v_set1(alpha[r]), acc[r][b]);
    }
    for (int i = 0; i < keys; i++) {
        const void *v_i = kv_at(v, i * ldv, kind);
        vec vv[4];
        SIMD_UNROLL for (int b = 0; b < width; b++)
            vv[b] = tail ? kv_load_tail_el(v_i, d0, tail, 0.0f, kind) : kv_load_el(v_i, d0 + b * VLEN, kind);
        SIMD_UNROLL for (int r = 0; r < rows; r++) {
            const vec p = v_set1(s[r * lds + i]);
            SIMD_UNROLL for (int b = 0; b < width; b++) acc[r][b] = v_fma(p, vv[b], acc[r][b]);
        }
    }
    SIMD_UNROLL for (int r = 0; r < rows; r++) SIMD_UNROLL for (int b = 0; b < width; b++) {
        if (tail)
            v_store_tail(o + r * ldo + d0, acc[r][b], tail);
        else
            v_storeu(o + r * ldo + d0 + b * VLEN, acc[r][b]);
    }
}

/* pv_block over a whole output row of dim_v: blocks of `width` vectors,
 * then single vectors, then the tail. */
SIMD_INLINE void pv_span(const int rows, const int width, const float *s, int64_t lds, int keys, const void *v,
                         int64_t ldv, const float *alpha, float *o, int64_t ldo, int64_t dim_v, const int kind) {
    const int64_t full = dim_v / VLEN * VLEN;
    int64_t d0 = 0;
    for (; d0 + width * VLEN <= full; d0 += width * VLEN)
        pv_block(rows, width, 0, s, lds, keys, v, ldv, alpha, o, ldo, d0, kind);
    for (; d0 < full; d0 += VLEN) pv_block(rows, 1, 0, s, lds, keys, v, ldv, alpha, o, ldo, d0, kind);
    if (full < dim_v) pv_block(rows, 1, (int)(dim_v - full), s, lds, keys, v, ldv, alpha, o, ldo, full, kind);
}

/* The rescaling factors from row r on (alpha NULL: none). */
SIMD_INLINE const float *rows_alpha(const float *alpha, int r) { return alpha ? alpha + r : NULL; }

/* pv_rows on values of element type kind (strides in elements): PV_KEYS
 * keys at a time, every kv head, so the values are still read front to
 * back; a head's rows four (two vectors wide), then two, then one (four
 * wide).  The rescaling by alpha rides on the first keys' pass (a pass of
 * its own only when nk = 0), so a call reads and writes o once per PV_KEYS
 * keys and no more: a paged cache's short runs make many calls. */
SIMD_INLINE void pv_rows_of(const int kind, const float *s, int64_t lds, int heads, int rows_per_head, int nk,
                            const void *v, int64_t ldv, int64_t ldh, int64_t dim_v, const float *alpha, float *o,
                            int64_t ldo, const flash_prefetch *pf) {
    flash_prefetch_cursor next = flash_prefetch_start(pf);
    if (nk == 0 && alpha) {
        const int64_t full = dim_v / VLEN * VLEN;
        const int tail = (int)(dim_v - full);
        for (int r = 0; r < heads * rows_per_head; r++) {
            vec a = v_set1(alpha[r]);
            float *o_r = o + r * ldo;
            for (int64_t d = 0; d < full; d += VLEN) v_storeu(o_r + d, v_mul(a, v_loadu(o_r + d)));
            if (tail) v_store_tail(o_r + full, v_mul(a, v_load_tail(o_r + full, tail, 0.0f)), tail);
        }
    }
    for (int j = 0; j < nk; j += PV_KEYS) {
        const int keys = nk - j < PV_KEYS ? nk - j : PV_KEYS;
        const int lines = prefetch_share(pf, keys, heads);
        const float *alpha_j = j == 0 ? alpha : NULL;
        for (int h = 0; h < heads; h++) {
            prefetch_stream(&next, lines);
            const void *v_jh = kv_at(v, j * ldv + h * ldh, kind);
            int r = h * rows_per_head;
            const int end = r + rows_per_head;
            for (; r + 4 <= end; r += 4)
                pv_span(4, 2, s + r * lds + j, lds, keys, v_jh, ldv, rows_alpha(alpha_j, r), o + r * ldo, ldo,
                        dim_v, kind);
            if (r + 2 <= end) {
                pv_span(2, 4, s + r * lds + j, lds, keys, v_jh, ldv, rows_alpha(alpha_j, r), o + r * ldo, ldo,
                        dim_v, kind);
                r += 2;
            }
            if (r < end)
                pv_span(1, 4, s + r * lds + j, lds, keys, v_jh, ldv, rows_alpha(alpha_j, r), o + r * ldo, ldo,
                        dim_v, kind);
        }
    }
}

static SIMD_TARGET void simd_pv_rows(const float *s, int64_t lds, int heads, int rows_per_head,
                                     int nk, const float *v, int64_t ldv, int64_t ldh, int64_t dim_v,
                                     const float *alpha, float *o, int64_t ldo,
                                     const flash_prefetch *pf) {
    pv_rows_of(KV_F32, s, lds, heads, rows_per_head, nk, v, ldv, ldh, dim_v, alpha, o, ldo, pf);
}

static SIMD_TARGET void simd_pv_rows_half(attn_dtype kv_dtype, const float *s, int64_t lds, int heads,
                                          int rows_per_head, int nk, const void *v, int64_t ldv, int64_t ldh,
                                          int64_t dim_v, const float *alpha, float *o, int64_t ldo,
                                          const flash_prefetch *pf) {
    if (kv_dtype == ATTN_F16)
        pv_rows_of(KV_F16, s, lds, heads, rows_per_head, nk, v, ldv, ldh, dim_v, alpha, o, ldo, pf);
    else if (kv_dtype == ATTN_Q8_0)
        pv_rows_of(KV_Q8_0, s, lds, heads, rows_per_head, nk, v, ldv, ldh, dim_v, alpha, o, ldo, pf);
    else if (kv_dtype == ATTN_FP8_E4M3)
        pv_rows_of(KV_FP8, s, lds, heads, rows_per_head, nk, v, ldv, ldh, dim_v, alpha, o, ldo, pf);
    else
        pv_rows_of(KV_BF16, s, lds, heads, rows_per_head, nk, v, ldv, ldh, dim_v, alpha, o, ldo, pf);
}

static SIMD_TARGET void simd_probs_rows(const float *s, int64_t lds, int rows, int nk,
                                        const float *m, const float *inv_l, float *w, int64_t ldw) {
    for (int r = 0; r < rows; r++) {
        const float *s_r = s + r * lds;
        float *w_r = w + r * ldw;
        vec mu = v_set1(m[r] == -INFINITY ? 0.0f : m[r]), scale = v_set1(inv_l[r]);
        int j = 0;
        for (; j + VLEN <= nk; j += VLEN) v_storeu(w_r + j, v_mul(v_exp2_nonpos(v_sub(v_loadu(s_r + j), mu)), scale));
        if (j < nk)
            v_store_tail(w_r + j, v_mul(v_exp2_nonpos(v_sub(v_load_tail(s_r + j, nk - j, -INFINITY), mu)), scale), nk - j);
    }
}
