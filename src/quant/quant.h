/*
 * quant.h — the quantized matrix product's insides (include/attn_quant.h is
 * the front door; docs/quant.md the prose): the storage types' traits, the
 * two panel layouts, the micro-kernel table and every entry's contract.
 *
 * Shape legend: x [M, K]  W [N, K] as stored  y [M, N] = x·Wᵀ;
 *   Kp     K rounded up to the tile kernel's k step (the panels' length)
 *   MR, NR the tile kernel's rows of x and of W per call
 *
 * The BLIS split (DESIGN.md §2): src/quant/matmul.c is the loop nest,
 * written once (validation, scratch, packing x, the decode and prefill
 * nests, threads); the per-ISA micro-kernels (src/isa/<isa>/quant_ukernels.c)
 * convert blocks into panels and multiply panels.  Every lane sum is fixed
 * by K and the ISA, never by M, N or the thread count.
 *
 * EXACT panels (floats):
 *   a W row  Kp floats: the dequantized weights, zeros past K
 *   an x row Kp floats: x's row, zeros past K
 * FAST (quantized types; the arithmetic is the same on every ISA, so are
 * its bits).  A type's integers wu (codes made non-negative) and scales,
 * per group of G elements (G = 32; 16 for Q6_K, whose scales are per 16):
 *     w_k = ws_g * (wu_k - o)          o: the type's offset (Q8_0 128, Q4_0 8,
 *                                      Q5_0 16, Q6_K 32), no min
 *     w_k = ws_g * wu_k + wc_g         a type with a min (Q4_1, Q5_1: wc = m;
 *                                      Q4_K, Q5_K: wc = -(dmin * mn)), o = 0
 * and x's, per block of 32: xs = amax / 127, qx_k = round-half-even(x_k *
 * (127 / amax)) in [-127, 127] (0 when amax < QUANT_X_TINY; the rule is
 * fixed to the bit).  Then for output (i, j), over the groups g in order,
 *     isum = sum_{k in g} (wu_k - o) qx_k                   exact, int32
 *     a[g % 2] = fma((float)isum, ws_g * xs_g, a[g % 2])    (ws*xs rounded)
 *     a[g % 2] = fma(wc_g, xsum_g, a[g % 2])                 types with a min;
 *                                   xsum_g = xs_g * (float)sum_{k in g} qx_k
 *     y = a[0] + a[1]
 * (two sums, so that a decode kernel can keep a row's even and odd groups
 * in the two halves of one vector).
 *
 * FAST panels:
 *   an x row   qx[Kp] int8;  xs[Kp/G] float;  xc[Kp/G] 32 bits: -o * (the
 *              group's sum of qx) as int32, or for a type with a min xsum
 *              as float
 *   W rows     interleaved NRV at a time (the tile's rows per vector): for
 *              each such vector of rows, the codes as quads
 *                q[t][r][0..3] = wu of row r, k = 4t .. 4t+3   (uint8)
 *              then per group g  ws[g][r], wc[g][r]  (float; wc only with
 *              a min), so that one vector load gives NRV rows' four codes,
 *              or their scales.
 *   Padding past K does not exist: K is a whole number of blocks, a
 *   multiple of 32, the FAST k step.
 */
#ifndef ATTN_QUANT_QUANT_H
#define ATTN_QUANT_QUANT_H

#include "attn_quant.h"
#include "base/base.h"

#include <stdbool.h>
#include <stdint.h>

/* A block of activations whose largest magnitude is below this is taken as
 * zero by FAST (127 / amax would overflow float32 for amax < 3.7e-37): an
 * absolute error of at most 2^-100 * sum |W| on such a block. */
#define QUANT_X_TINY 0x1p-100f

/* ------------------------------------------------------------ the types */

/* The kernels' own dense numbering of the storage types. */
typedef enum quant_type {
    QT_F32, QT_F16, QT_BF16, QT_Q8_0, QT_Q4_0, QT_Q4_1, QT_Q5_0, QT_Q5_1, QT_Q4_K, QT_Q5_K, QT_Q6_K,
    QT_COUNT
} quant_type;

typedef struct quant_traits {
    const char *name;       /* "Q5_0"                                          */
    int gguf;               /* ggml's number (attn_qtype)                      */
    int block_elements;     /* 1, 32 or 256                                    */
    int block_bytes;
    bool quantized;         /* has integers (FAST applies); F32/F16/BF16 not   */
    int offset;             /* FAST: o (0 for a type with a min)               */
    bool has_min;           /* FAST: wc (Q4_1, Q5_1, Q4_K, Q5_K)               */
    int group;              /* FAST: G, elements per scale: 32, or 16 (Q6_K)   */
} quant_traits;

extern const quant_traits attn__quant_traits[QT_COUNT];

/* The dense index of ggml type number gguf, or -1 (no kernel takes it). */
int attn__quant_type_index(int gguf);

/* ------------------------------------------------------- micro-kernels
 * Conventions shared by all:
 *   - blocks are read byte by byte (any alignment); fp16 and u32 fields
 *     little-endian;
 *   - n counts elements and is a multiple of the type's block;
 *   - panels (the outputs of dequant/unpack/quantize, the inputs of the
 *     tiles) are the loop nest's buffers, 64-byte aligned at each row,
 *     rows a multiple of the k step long. */

/* EXACT: out[0..n) = the n elements at src, dequantized bit for bit as
 * src/formats/gguf_dequant.c does (tests/quant/test_quant_matmul.c holds
 * every ISA to attn_gguf_dequantize's bits).  Overwrites out. */
typedef void (*quant_dequant_fn)(const uint8_t *src, int64_t n, float *out);

/* FAST: the n elements at src as codes wu[0..n) (the type's integers made
 * non-negative: w = ws * (wu - o), or ws * wu + wc) and per 16 elements
 * ws and wc [0..n/16) (wc = -o * ws where there is no min: unused), a
 * row at a time; the nest interleaves rows into the tile's panel.
 * Quantized types only.  Overwrites them. */
typedef void (*quant_unpack_fn)(const uint8_t *src, int64_t n, uint8_t *wu, float *ws, float *wc);

/* FAST: x[0..n) (n a multiple of 32) quantized by the rule above, to the
 * bit: qx[0..n), xs[0..n/32) (one per block), qsum[0..n/16) (the sum of
 * each 16 qx); a block holding a NaN or an infinity gets xs = NaN, qx = 0
 * and qsum = 0.  Overwrites them. */
typedef void (*quant_quantize_fn)(const float *x, int64_t n, int8_t *qx, float *xs, int32_t *qsum);

/* Tile flags: whether acc is read on entry and where the sums go. */
enum {
    QUANT_TILE_BEGIN = 1, /* start from zero: acc is not read (it may hold garbage)           */
    QUANT_TILE_END = 2    /* finish: y(i, j) = the reduction of acc(i, j), for i < mr, j < nr
                             (overwritten; y's other elements untouched); acc is not written.
                             Without END the lanes are stored in acc for the next call.       */
};

/* EXACT tile: for i < mr (1..MR) and j < NR, lane l of acc(i, j) (LANES
 * lanes) adds x_i[k] * w_j[k] for k = l, l + LANES, ... < kc, one rounding
 * (an FMA, or a product and a sum where the ISA has none: its fixed
 * choice) per term, k ascending; then with END y[i*ldy + j] = the lanes
 * summed by the ISA's fixed tree.
 *   x: rows x + i*ldx (i < mr), kc floats each;  w: rows w + j*ldw (all NR
 *   rows readable: the nest pads a short panel with zero rows);  kc a
 *   multiple of the k step;  acc: [MR][NR][LANES] floats, 64-byte aligned.
 * A row's sums never depend on mr, nr or the other rows: a decode step and
 * a prefill compute the same bits. */
typedef void (*quant_f32_tile_fn)(int mr, int nr, const float *x, int64_t ldx, const float *w, int64_t ldw,
                                  int64_t kc, float *acc, int flags, float *y, int64_t ldy);

/* EXACT decode straight from the blocks (quantized types; an ISA may leave
 * it NULL, and the nest then fills panels for the tile): for i < mr
 * (1..f32_mr) and j < nr (any count), y[i*ldy + j] = exactly what the
 * ISA's f32 tile gives for x_i against row j of W (at w + j*row_stride,
 * dequantized) over all k elements, BEGIN to END: the same lanes, the same
 * order, the same bits.  x: rows x + i*ldx of k floats; k a multiple of
 * the type's block (hence of the k step: no padding). */
typedef void (*quant_f32_gemv_fn)(int mr, const float *x, int64_t ldx, const uint8_t *w, int64_t row_stride,
                                  int64_t nr, int64_t k, float *y, int64_t ldy);

/* An x panel at k = 0 of the call's range: row i's codes at q + i*ld_q,
 * its groups' xs and xc at s + i*ld_s and c + i*ld_s. */
typedef struct quant_q8_x {
    const int8_t *q;
    const float *s;
    const void *c;      /* int32 (-o * sum qx), or float (xsum) with a min */
    int64_t ld_q, ld_s;
} quant_q8_x;

/* A W panel (NRV rows a vector, quant.h's layout) at its first vector of
 * rows and k = 0 of the call's range: vector v's quads at q + v*ld_q, its
 * groups' scales at s + v*ld_s and corrections at c + v*ld_s. */
typedef struct quant_q8_w {
    const uint8_t *q;
    const float *s, *c;
    int64_t ld_q, ld_s;
} quant_q8_w;

/* The FAST shape of a call's type. */
typedef struct quant_q8_type {
    int group;    /* G: 32 or 16                */
    int offset;   /* o                          */
    bool has_min; /* wc and xsum take part      */
} quant_q8_type;

/* FAST tile: for i < mr (1..MR) and j < NR (all NR rows readable: the nest
 * pads with zero rows), the two sums a[0], a[1] of output (i, j) (above)
 * carried over kc elements (a multiple of 32 and of 2 G: each call starts
 * on an even group), then with END y[i*ldy + j] = a[0] + a[1] for j < nr.
 * acc: the sums between calls, 2 * MR * NR floats in the ISA's order,
 * 64-byte aligned; flags as the exact tile's. */
typedef void (*quant_q8_tile_fn)(int mr, int nr, const quant_q8_x *x, const quant_q8_w *w, int64_t kc,
                                 const quant_q8_type *type, float *acc, int flags, float *y, int64_t ldy);

/* FAST decode straight from the blocks (NULL: panels and the tile): for
 * i < mr (1..q8_mr) and j < nr, y[i*ldy + j] = the FAST result above for
 * x_i (an x panel over all of K) against row j of W (at w + j*row_stride),
 * the same bits as the tile. */
typedef void (*quant_q8_gemv_fn)(int mr, const quant_q8_x *x, const uint8_t *w, int64_t row_stride, int64_t nr,
                                 int64_t k, float *y, int64_t ldy);

/* One instruction set's kernels.  Entries left NULL (0 for shapes) are
 * taken from the ISA below it in the list (dispatch.c), which ends with the
 * complete portable table; a tile's shape travels with it.  The fast group
 * (quantize, unpack, q8 tile) is replaced as a whole by the one below when
 * fast_supported() says no (AVX-512 without VNNI). */
typedef struct quant_kernels {
    const char *isa;                  /* "generic", "avx2", "avx512"             */
    bool (*supported)(void);          /* NULL: always                            */
    /* EXACT */
    quant_f32_tile_fn f32_tile;
    int f32_mr, f32_nr, f32_lanes, f32_kstep;
    quant_dequant_fn dequant[QT_COUNT];
    quant_f32_gemv_fn f32_gemv[QT_COUNT]; /* goes with f32_tile: never taken from another ISA's */
    /* FAST */
    const char *fast_isa;             /* "avx512-vnni", ...                       */
    bool (*fast_supported)(void);     /* NULL: whenever supported()               */
    quant_q8_tile_fn q8_tile;
    int q8_mr, q8_nr, q8_nrv;         /* NR rows, NRV of them a vector (NR = a multiple of NRV) */
    quant_q8_gemv_fn q8_gemv[QT_COUNT];
    quant_quantize_fn quantize;
    quant_unpack_fn unpack[QT_COUNT];
} quant_kernels;

extern const quant_kernels attn__quant_kernels_generic;
extern const quant_kernels attn__quant_kernels_avx2;
extern const quant_kernels attn__quant_kernels_avx512;

/* An ISA absent from this build (another architecture, ATTN_PORTABLE):
 * its name, and a supported() that says no. */
bool attn__quant_absent(void);
#define QUANT_KERNELS_ABSENT(table, name) const quant_kernels table = {.isa = name, .supported = attn__quant_absent}

/* ------------------------------------------------------------ dispatch */

/* The complete table calls run on: $ATTN_ARCH's ISA when the CPU has it,
 * else the best it has (chosen once, thread-safely). */
const quant_kernels *attn__quant_active(void);
/* True when $ATTN_KERNEL=ref / $ATTN_ARCH=ref (or attn__quant_force("ref"))
 * sends every call to the reference. */
bool attn__quant_forces_ref(void);
/* For tests: "generic", "avx2", "avx512" or "ref"; NULL returns to what the
 * environment says.  ATTN_ERR_UNSUPPORTED for an ISA this CPU or build
 * lacks, ATTN_ERR_INVALID_ARGUMENT for an unknown name. */
attn_status attn__quant_force(const char *arch);

/* ----------------------------------------------------------- reference */

/* y = x·Wᵀ in double over the portable dequantizer's values, one thread.
 * w is checked; scratch one row of K floats (allocated). */
attn_status attn__quant_matmul_ref(const float *x, int64_t m, const attn_qtensor *w, float *y);

/* A row's bytes. */
static inline int64_t quant_row_bytes(const quant_traits *t, int64_t cols) {
    return cols / t->block_elements * t->block_bytes;
}

/* fp16 and u32 fields of blocks, little-endian, any alignment. */
static inline uint16_t quant_u16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static inline uint32_t quant_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The 6-bit scale and min of sub-block s (0..7) of a Q4_K / Q5_K block,
 * from its 12 bytes of scales. */
static inline void quant_k_scale_min(const uint8_t *scales, int s, int *sc, int *mn) {
    if (s < 4) {
        *sc = scales[s] & 63;
        *mn = scales[s + 4] & 63;
    } else {
        *sc = (scales[s + 4] & 15) | (scales[s - 4] >> 6) << 4;
        *mn = (scales[s + 4] >> 4) | (scales[s] >> 6) << 4;
    }
}

/* A FAST panel's two groups of one 32-element block: scale ws, correction wc. */
static inline void quant_groups32(float *ws, float *wc, float scale, float correction) {
    ws[0] = ws[1] = scale;
    wc[0] = wc[1] = correction;
}

#endif /* ATTN_QUANT_QUANT_H */
