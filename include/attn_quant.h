/*
 * attn_quant.h — y = x·Wᵀ on a weight matrix kept as a GGUF file stores it
 * (libattn; docs/quant.md).  A C engine that maps a GGUF file can run its
 * projections on the mapped bytes, never expanding them to float32.
 *
 * Shape legend (every prototype below):
 *   M    rows of x and y: tokens (1 = a decode step, many = a prefill)
 *   K    input features: W's columns, x's row length
 *   N    output features: W's rows, y's row length
 *
 *   x : [M, K] float32, contiguous          W : [N, K] as stored, row by row
 *   y : [M, N] float32, contiguous          y[m][n] = sum_k x[m][k] * W[n][k]
 *
 *   W is [N, K] — out features FIRST (ggml's ne = [K, N], PyTorch's
 *   nn.Linear.weight), so the product is x·Wᵀ, not x·W as attn_linear_forward
 *   computes with attn.h's [d_in, d_out] convention.  A bias is the caller's
 *   to add.
 *
 * Storage types (ggml's numbering, what a GGUF tensor info holds; see
 * attn_gguf.h for the byte layout of each block):
 *   F32, F16, BF16                       one element a "block"
 *   Q8_0, Q4_0, Q4_1, Q5_0, Q5_1         blocks of 32 elements
 *   Q4_K, Q5_K, Q6_K                     blocks of 256 elements
 * K must be a whole number of blocks (a GGUF row always is).
 *
 * Two precisions (attn.h's attn_precision):
 *   EXACT (default)  every weight is dequantized bit for bit as attn_gguf.h's
 *                    attn_gguf_dequantize converts it (the gguf package's
 *                    numpy reference), multiplied by the float32 activations
 *                    and summed in float32, in an order fixed by K alone:
 *                    the same bits for any thread count and any M (a row of
 *                    x gives the same y alone as within a prefill), on one
 *                    instruction set.  Error against a double-precision sum
 *                    of the same products: within gamma(K/L + log2 L) times
 *                    sum_k |x_k W_k| (L = 16 lanes on AVX-512, 8 otherwise);
 *                    docs/quant.md has the measured figures.
 *   FAST             quantized types only: each block of 32 activations is
 *                    rounded to 8 bits (scale max|x|/127, round to nearest
 *                    even) and multiplied with the weights' integers by
 *                    integer dot products (AVX-512 VNNI vpdpbusd, AVX2
 *                    vpmaddubsw, portable C elsewhere), one exact integer
 *                    sum per group of 32 weights (16 for Q6_K), the
 *                    groups' scales applied in float32 in a fixed order
 *                    (docs/quant.md): the same bits for any thread count,
 *                    any M, and on every instruction set.  Its error
 *                    against EXACT is the activations' rounding, at most
 *                    sum over blocks of (scale/2) * sum |W_k|; measured on
 *                    Qwen2.5-0.5B's tensors 0.1-0.6 % of the output's rms.
 *                    F32, F16 and BF16 weights run EXACT.
 *
 * Decode and prefill: M up to attn_quant_decode_rows() rows of x (4 on
 * AVX-512 and in portable C, 2 for EXACT on AVX2) read W once straight from
 * its blocks (a decode step: memory-bound); more rows convert W in panels
 * reused by every row of x (a prefill: compute-bound).  Both give a row of
 * x the same bits.
 *
 * Instruction sets: the best the CPU has, or $ATTN_ARCH=generic|avx2|avx512;
 * $ATTN_KERNEL=ref (or $ATTN_ARCH=ref) sends every call to the reference;
 * $ATTN_ARCH_DEBUG=1 prints the choice once on stderr — as for attention.
 *
 * Threads: OpenMP, opt.threads (0 = $ATTN_NUM_THREADS, else OpenMP's
 * default); the threads share out W's rows, never a sum.
 *
 * Alignment: none needed.  W's rows may start at any byte (GGUF aligns a
 * tensor to 32 bytes, and its blocks of 22 or 34 bytes fall anywhere); x
 * and y need float alignment only.
 */
#ifndef ATTN_QUANT_H
#define ATTN_QUANT_H

#include "attn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The storage types the kernels take, numbered as ggml (and a GGUF file)
 * numbers them, so that a GGUF tensor's type converts with a cast. */
typedef enum attn_qtype {
    ATTN_QTYPE_F32 = 0,
    ATTN_QTYPE_F16 = 1,
    ATTN_QTYPE_Q4_0 = 2,   /* 32 elements in 18 bytes  */
    ATTN_QTYPE_Q4_1 = 3,   /* 32 in 20                 */
    ATTN_QTYPE_Q5_0 = 6,   /* 32 in 22                 */
    ATTN_QTYPE_Q5_1 = 7,   /* 32 in 24                 */
    ATTN_QTYPE_Q8_0 = 8,   /* 32 in 34                 */
    ATTN_QTYPE_Q4_K = 12,  /* 256 in 144               */
    ATTN_QTYPE_Q5_K = 13,  /* 256 in 176               */
    ATTN_QTYPE_Q6_K = 14,  /* 256 in 210               */
    ATTN_QTYPE_BF16 = 30
} attn_qtype;

/* A weight matrix W [N, K] where the caller keeps it (a mapped file).  Row
 * n's blocks start at (const char *)data + n * row_stride and hold K
 * elements: K / block_elements blocks of block_bytes each, in order.  The
 * library only reads it.  A view, filled in by the caller; it changes only
 * with the library's SONAME. */
typedef struct attn_qtensor {
    int type;          /* an attn_qtype (a GGUF tensor info's type)          */
    int64_t rows;      /* N: output features                                 */
    int64_t cols;      /* K: input features, a multiple of the block         */
    const void *data;  /* the first row's first block                        */
    size_t row_stride; /* bytes from one row to the next; 0 = the row's own
                          bytes (rows packed back to back, as in GGUF)       */
} attn_qtensor;

/* Options of one product.  Initialise with
 *     attn_quant_options opt = ATTN_QUANT_OPTIONS_INIT;
 * (exact, default threads, the library's own scratch), then set fields;
 * NULL options mean the same.  struct_size follows attn.h's ABI rule. */
typedef struct attn_quant_options {
    size_t struct_size;        /* sizeof(attn_quant_options), set by the initialiser */
    attn_precision precision;  /* ATTN_PRECISION_EXACT (default) or _FAST             */
    int threads;               /* 0 = $ATTN_NUM_THREADS, else OpenMP's default        */
    int use_ref;               /* nonzero: the reference — the dequantized weights
                                  times x summed in double, rounded once to float
                                  (whatever the precision); the oracle one flag away */
    void *workspace;           /* caller-owned scratch, or NULL (the call allocates
                                  and frees its own)                                 */
    size_t workspace_size;     /* bytes at workspace                                  */
} attn_quant_options;

#define ATTN_QUANT_OPTIONS_INIT {.struct_size = sizeof(attn_quant_options)}

/* "Q5_0", "F32", ... for a type the kernels take; NULL otherwise. */
ATTN_API const char *attn_quant_type_name(int type);

/* Elements and bytes of one block of type (1 and 4 for F32).
 * ATTN_ERR_UNSUPPORTED, naming the type, for a type the kernels do not take
 * (GGUF's Q2_K, IQ*, ...): a loader refuses such a tensor at load. */
ATTN_API attn_status attn_quant_type_block(int type, int64_t *block_elements, size_t *block_bytes);

/* Checks a view: a type the kernels take, rows >= 0, cols >= 0 and a
 * multiple of the block, data not NULL (unless the matrix is empty),
 * row_stride 0 or at least a row's bytes, rows * row_stride without
 * overflow.  Messages say which field is wrong.  Every function below
 * makes the same checks; a loader calls this once per tensor at load. */
ATTN_API attn_status attn_quant_check(const attn_qtensor *w);

/* Finds the first stored value of w (checked as above) that is NaN or
 * infinite, converting nothing: F32, F16 and BF16 by their exponent bits,
 * the block types by their float16 scales (d, and the minimum where the
 * type has one), since a block's integers times finite scales are finite.
 * ATTN_OK when all are finite; else ATTN_ERR_NONFINITE with *row and *col
 * (the element, or the first column of the block whose scale it is) and a
 * message saying which.  One pass over the bytes such a check needs (a
 * loader's at load; row and col may be NULL). */
ATTN_API attn_status attn_quant_check_finite(const attn_qtensor *w, int64_t *row, int64_t *col);

/* Bytes of scratch attn_quant_matmul needs for M rows of x on w with these
 * options, in this process (the instruction set and the thread count it
 * will use: $ATTN_NUM_THREADS is read).  Passing a workspace of at least
 * this size avoids any allocation inside the call.  w->data is not read. */
ATTN_API attn_status attn_quant_workspace_size(int64_t m, const attn_qtensor *w, const attn_quant_options *opt,
                                               size_t *bytes);

/* y = x·Wᵀ.
 *   x: [M, K] float32   w: [N, K] as stored   y: [M, N] float32 (written)
 * x and y must not overlap.  M = 0 or N = 0 does nothing; K = 0 writes
 * zeros.  Non-finite activations: EXACT follows IEEE arithmetic (a NaN in
 * row m of x makes row m of y NaN; an infinity does too where it meets a
 * zero weight); FAST makes row m of y NaN for either. */
ATTN_API attn_status attn_quant_matmul(const float *x, int64_t m, const attn_qtensor *w, float *y,
                                       const attn_quant_options *opt);

/* Rows first_row .. first_row + count - 1 of W, dequantized to float32
 * into out [count, K]: bit for bit attn_gguf_dequantize's values (an
 * embedding lookup: the token's row).  Single-threaded. */
ATTN_API attn_status attn_quant_dequantize_rows(const attn_qtensor *w, int64_t first_row, int64_t count,
                                                float *out);

/* The most rows of x that a call with this precision runs as a decode
 * (W streamed once, straight from its blocks) in this process: 4, or 2 for
 * EXACT on AVX2.  A caller batching a few sequences' decode steps gains
 * most up to this many. */
ATTN_API int attn_quant_decode_rows(attn_precision precision);

/* The instruction set a call with this precision runs on in this process:
 * "avx512", "avx512-vnni" (fast on VNNI), "avx2", "generic", or "ref" when
 * $ATTN_KERNEL=ref sends every call to the reference. */
ATTN_API const char *attn_quant_isa(attn_precision precision);

#ifdef __cplusplus
}
#endif

#endif /* ATTN_QUANT_H */
