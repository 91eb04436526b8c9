/*
 * attn.h — the attention mechanism as a C library.
 *
 * Shape legend (used in every prototype below):
 *   B    batch                      L    query positions
 *   S    key/value positions        Hq   query heads
 *   Hkv  key/value heads            D    query/key width per head
 *   Dv   value width per head       (Hq must be a multiple of Hkv)
 *
 *   q   : [B, L, Hq,  D ]   k : [B, S, Hkv, D ]   v : [B, S, Hkv, Dv]
 *   out : [B, L, Hq,  Dv]
 *   weights : [B, Hq, L, S]   <- heads BEFORE positions (TransformerLens's
 *   lse     : [B, Hq, L]         hook_pattern order, FlashAttention's lse)
 *
 * Tensors are row-major with explicit element strides; the last dimension
 * must be contiguous (stride 1).  The shorthands of the chapter are helpers:
 * a 2-D [L, D] array is one batch and one head, a 3-D [L, H, D] array is one
 * batch.
 *
 * Semantics (every kernel obeys them; see docs/semantics.md):
 *   score(i, j) = scale * dot(q_i, k_j) + bias(i, j)      scale default 1/sqrt(D)
 *   key j is visible to query i when every active rule allows it:
 *     causal        j <= i + offset           offset = 0 (top-left) or S - L
 *     window        i + offset - left <= j <= i + offset + right   (-1 = unbounded)
 *     key lengths   j <  key_lengths[b]
 *     boolean mask  mask(b, h, i, j) != 0     (nonzero = MAY attend, as in
 *                                              PyTorch SDPA; the OPPOSITE of
 *                                              nn.MultiheadAttention's
 *                                              key_padding_mask / attn_mask)
 *     bias          bias(b, h, i, j) != -inf
 *   weights(i, :) = softmax over the visible keys only (max-subtracted);
 *   hidden keys get weight exactly 0.  A row with no visible key gets
 *   output 0, weights 0 and lse -inf: never NaN.
 *
 * Errors: every function returns an attn_status (ATTN_OK == 0, negative on
 * failure) and leaves a human-readable reason in a thread-local buffer read
 * by attn_last_error().  The library never prints, exits or aborts on user
 * input.
 *
 * Non-finite inputs: NaN and +/-Inf in q, k, v or the projections PROPAGATE
 * (IEEE rules, as BLAS and PyTorch do): the library does not scan its inputs,
 * because a scan would add a full extra read of the key/value cache to every
 * decode step.  Call attn_check_finite() if you want the check; the attn
 * command-line program does, and refuses such files.  In a bias, -inf is the
 * documented way to hide a key; NaN or +inf in a bias propagates.
 */
#ifndef ATTN_H
#define ATTN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ATTN_VERSION_MAJOR 0
#define ATTN_VERSION_MINOR 1
#define ATTN_VERSION_PATCH 0
const char *attn_version(void); /* "0.1.0" */

/* ------------------------------------------------------------------ errors */

typedef enum attn_status {
    ATTN_OK = 0,
    ATTN_ERR_INVALID_ARGUMENT = -1, /* NULL pointer, bad option value       */
    ATTN_ERR_SHAPE = -2,            /* sizes that do not fit together       */
    ATTN_ERR_OVERFLOW = -3,         /* a size product overflows             */
    ATTN_ERR_OUT_OF_MEMORY = -4,
    ATTN_ERR_IO = -5,               /* open/read/write/rename failed        */
    ATTN_ERR_FORMAT = -6,           /* malformed or truncated file          */
    ATTN_ERR_UNSUPPORTED = -7,      /* valid input this build cannot handle */
    ATTN_ERR_NONFINITE = -8,        /* attn_check_finite found NaN/Inf      */
    ATTN_ERR_INTERNAL = -9
} attn_status;

/* Static English name of a status code ("shape mismatch", ...). */
const char *attn_status_str(attn_status status);

/* The message of the last failing call on this thread ("" if none).  The
 * pointer stays valid until the next failing call on the same thread. */
const char *attn_last_error(void);

/* ----------------------------------------------------------------- tensors */

typedef struct attn_tensor {
    float *data;       /* read-only for inputs                               */
    int64_t shape[4];  /* [B, positions, heads, width]                       */
    int64_t stride[4]; /* in elements; stride[3] must be 1                   */
} attn_tensor;

/* Contiguous views.  2-D [L, D] -> [1, L, 1, D]; 3-D [L, H, D] -> [1, L, H, D]. */
attn_tensor attn_tensor_4d(float *data, int64_t b, int64_t l, int64_t h, int64_t d);
attn_tensor attn_tensor_3d(float *data, int64_t l, int64_t h, int64_t d);
attn_tensor attn_tensor_2d(float *data, int64_t l, int64_t d);

/* ATTN_OK when all n values are finite; otherwise ATTN_ERR_NONFINITE, with
 * *first_bad (if not NULL) set to the index of the first NaN/Inf. */
attn_status attn_check_finite(const float *data, int64_t n, int64_t *first_bad);

/* ------------------------------------------------------ scaled dot product */

typedef enum attn_kernel {
    ATTN_KERNEL_AUTO = 0,  /* the fastest kernel that supports the request   */
    ATTN_KERNEL_REF = 1,   /* plain loops, double accumulation, the oracle    */
    ATTN_KERNEL_FLASH = 2  /* tiled online softmax (when built)               */
} attn_kernel;

typedef enum attn_align {
    ATTN_ALIGN_TOP_LEFT = 0,    /* diagonal j = i           (PyTorch is_causal) */
    ATTN_ALIGN_LOWER_RIGHT = 1  /* diagonal j = i + S - L   (FlashAttention,
                                   KV-cache decoding)                          */
} attn_align;

/* All options of one attention call.  A zero-initialised struct
 * (attn_sdpa_options o = {0};) means: scale 1/sqrt(D), no mask, automatic
 * kernel, default thread count, the library allocates its own workspace. */
typedef struct attn_sdpa_options {
    float scale;              /* > 0, or 0 for 1/sqrt(D)                        */
    int causal;               /* nonzero: key j visible only if j <= i + offset */
    attn_align align;         /* the diagonal used by causal and window         */
    int window;               /* nonzero: the sliding window below is active    */
    int64_t window_left;      /* keys left of the diagonal, -1 = unbounded      */
    int64_t window_right;     /* keys right of the diagonal, -1 = unbounded     */
    const int64_t *key_lengths; /* [B] valid keys per batch, or NULL            */
    /* Where this call's rows sit in a longer sequence (chunked prefill, a
     * shard of a ring, a slice of a KV cache): query row i is position
     * query_start + i and key row j is key_start + j.  Causal, window and
     * key lengths are evaluated at those positions; total_len_q and
     * total_len_kv (0 = this call's L and S) place the lower-right
     * diagonal.  The boolean mask and the bias stay indexed by this call's
     * rows.  All zero: the call is the whole sequence. */
    int64_t query_start, key_start;
    int64_t total_len_q, total_len_kv;
    const uint8_t *mask;      /* boolean, nonzero = may attend, or NULL         */
    int64_t mask_shape[4];    /* [B|1, Hq|1, L|1, S|1], contiguous              */
    const float *bias;        /* additive score bias, or NULL                   */
    int64_t bias_shape[4];    /* [B|1, Hq|1, L|1, S|1], contiguous              */
    attn_kernel kernel;
    int threads;              /* 0 = $ATTN_NUM_THREADS, else OpenMP's default   */
    void *workspace;          /* caller-owned scratch, or NULL                  */
    size_t workspace_size;    /* bytes available at workspace                   */
} attn_sdpa_options;

/* Bytes of scratch attn_sdpa_forward needs for these shapes and options
 * (the kernel actually chosen for them).  Passing a workspace of at least
 * this size avoids any allocation inside the call. */
attn_status attn_sdpa_workspace_size(const attn_tensor *q, const attn_tensor *k,
                                     const attn_tensor *v, const attn_sdpa_options *opt,
                                     size_t *bytes);

/* Scaled dot-product attention.
 *   q: [B, L, Hq, D]  k: [B, S, Hkv, D]  v: [B, S, Hkv, Dv]
 *   out: [B, L, Hq, Dv] (written)
 *   weights: [B, Hq, L, S] contiguous, or NULL      <- heads before positions!
 *   lse:     [B, Hq, L]    contiguous, or NULL      natural log; -inf if the
 *                                                   row sees no key
 *   opt: NULL for defaults. */
attn_status attn_sdpa_forward(const attn_tensor *q, const attn_tensor *k,
                              const attn_tensor *v, const attn_sdpa_options *opt,
                              attn_tensor *out, float *weights, float *lse);

/* The score table attention normalises, for inspection and teaching:
 *   scores: [B, Hq, L, S] = scale * q.k + bias, and -inf where hidden.
 * Materialises the table, so it is meant for small problems. */
attn_status attn_sdpa_scores(const attn_tensor *q, const attn_tensor *k,
                             const attn_sdpa_options *opt, float *scores);

/* Name of the kernel attn_sdpa_forward would run for these inputs ("ref",
 * "flash"), for logs and benchmarks. */
const char *attn_sdpa_kernel_name(const attn_tensor *q, const attn_tensor *k,
                                  const attn_tensor *v, const attn_sdpa_options *opt);

/* -------------------------------------------------- projections and heads */

/* y = x . w (+ b), the chapter's row convention.
 *   x: [rows, d_in]  w: [d_in, d_out]  b: [d_out] or NULL  y: [rows, d_out] */
attn_status attn_linear_forward(const float *x, int64_t rows, int64_t d_in,
                                const float *w, const float *b, int64_t d_out,
                                float *y);

/* Multi-head attention as a module: projections, heads, concatenation and the
 * output projection.
 *   Q = X . wq + bq        wq: [d_model,   Hq  * D ]
 *   K = C . wk + bk        wk: [d_context, Hkv * D ]   C = X for self-attention
 *   V = C . wv + bv        wv: [d_context, Hkv * Dv]
 *   Z = concat_h sdpa(Q_h, K_{h/(Hq/Hkv)}, V_...)      [rows, Hq * Dv]
 *   out = Z . wo + bo      wo: [Hq * Dv, d_out], or NULL: out = Z
 */
typedef struct attn_mha {
    int64_t d_model;    /* width of the rows of x                         */
    int64_t d_context;  /* width of the rows of context; 0 = d_model      */
    int64_t heads;      /* Hq                                             */
    int64_t kv_heads;   /* Hkv; 0 = heads                                 */
    int64_t head_dim;   /* D                                              */
    int64_t value_dim;  /* Dv; 0 = head_dim                               */
    int64_t d_out;      /* output width; must be Hq * Dv when wo is NULL  */
    const float *wq, *wk, *wv, *wo; /* wo may be NULL                     */
    const float *bq, *bk, *bv, *bo; /* each may be NULL                   */
} attn_mha;

/* x: [B, L, d_model]  context: [B, S, d_context] or NULL (self: S = L)
 * out: [B, L, d_out]  weights: [B, Hq, L, S] or NULL  lse: [B, Hq, L] or NULL
 * opt: masks and kernel for the attention step (NULL = defaults). */
attn_status attn_mha_forward(const attn_mha *m, const float *x, int64_t batch,
                             int64_t len, const float *context, int64_t context_len,
                             const attn_sdpa_options *opt, float *out,
                             float *weights, float *lse);

/* ------------------------------------------------------------ arrays, .npy */

typedef enum attn_dtype {
    ATTN_F32 = 0, ATTN_F64, ATTN_F16,
    ATTN_BOOL, ATTN_I8, ATTN_I16, ATTN_I32, ATTN_I64,
    ATTN_U8, ATTN_U16, ATTN_U32, ATTN_U64
} attn_dtype;

#define ATTN_MAX_DIMS 8

/* An n-dimensional array in native byte order and C order; owns its data. */
typedef struct attn_array {
    attn_dtype dtype;
    int ndim;                      /* 0 (a scalar) .. ATTN_MAX_DIMS          */
    int64_t shape[ATTN_MAX_DIMS];
    int64_t count;                 /* product of shape (1 for a scalar)      */
    void *data;                    /* count elements; free with attn_array_free */
} attn_array;

const char *attn_dtype_name(attn_dtype dtype); /* numpy's name: "float32" ... */
size_t attn_dtype_size(attn_dtype dtype);

/* Allocates a zeroed array.  Sizes are checked for overflow. */
attn_status attn_array_alloc(attn_array *a, attn_dtype dtype, int ndim,
                             const int64_t *shape);
void attn_array_free(attn_array *a); /* safe on a zeroed or freed array */

/* Converts in place.  To ATTN_F32: from F32, F64, F16 (integers refused: a
 * float array was expected).  To ATTN_I64: from any integer or bool (floats
 * refused).  To ATTN_BOOL: from any integer or bool, nonzero -> 1. */
attn_status attn_array_convert(attn_array *a, attn_dtype to);

/* Parses a complete .npy image (format versions 1.0, 2.0, 3.0) held in
 * memory.  Refuses Fortran order, object and structured dtypes, headers over
 * 1 MiB, shapes whose byte size overflows, and truncated data.  The array
 * keeps the file's dtype, converted to native byte order. */
attn_status attn_npy_parse(const void *buf, size_t size, attn_array *out);

/* Reads and parses a file.  Error messages name the path. */
attn_status attn_npy_load(const char *path, attn_array *out);

/* Serialises to a malloc'd .npy image (version 1.0, or 2.0 if the header
 * needs it); free *buf with free(). */
attn_status attn_npy_serialize(const attn_array *a, void **buf, size_t *size);

/* Writes atomically: the data goes to a temporary file beside path, which is
 * renamed over path only when complete, so a failure never leaves a
 * half-written file under the final name. */
attn_status attn_npy_save(const char *path, const attn_array *a);

/* .npy by offset, for programs that hold only part of an array (attn ring:
 * each MPI rank its own positions; attn_mpi.h).  "Rows" are the indices
 * [first, first + count) of one axis together with every index of the other
 * axes: for a [B, L, H, D] file and axis 1, positions first .. first+count-1
 * of every batch; for [L, D] or [L, H, D] files the positions are axis 0. */

/* Reads only the header.  shape_only gets dtype, ndim, shape and count, with
 * data NULL (nothing to free); *data_offset (if not NULL) the byte where
 * element 0 starts.  The file's size must match the shape exactly, as for
 * attn_npy_load; messages name the path. */
attn_status attn_npy_read_header(const char *path, attn_array *shape_only, size_t *data_offset);

/* Reads rows [first, first + count) of axis and nothing else: one positional
 * read per index of the axes before axis (B reads for a [B, L, H, D] file and
 * axis 1).  out keeps the file's dtype, in native byte order, and the file's
 * shape with shape[axis] = count (count 0: an empty array).  Memory holds
 * only those rows, so a file larger than memory can be read in parts. */
attn_status attn_npy_read_rows(const char *path, int axis, int64_t first, int64_t count,
                               attn_array *out);

/* The preamble and header numpy.save writes for an array of this dtype and
 * shape, into header (cap bytes; ATTN_NPY_HEADER_MAX always suffice).  *size
 * is a multiple of 64 and element i of the C-order data belongs at byte
 * *size + i * attn_dtype_size(dtype): for writers that place rows themselves. */
#define ATTN_NPY_HEADER_MAX 512
attn_status attn_npy_format_header(attn_dtype dtype, int ndim, const int64_t *shape,
                                   void *header, size_t cap, size_t *size);

/* The instruction set the flash kernel runs on in this process: "avx512",
 * "avx2", "generic" (portable C), or "ref" when $ATTN_ARCH=ref sends every
 * call to the reference kernel.  Chosen once, at first use, from the CPU's
 * features; $ATTN_ARCH=ref|generic|avx2|avx512 forces a path (one the CPU
 * lacks falls back to the automatic choice), $ATTN_ARCH_DEBUG=1 prints the
 * choice once to stderr. */
const char *attn_isa_name(void);

/* ------------------------------------------------- this machine's limits
 * Measured, not assumed (attn bench reports kernels as fractions of them).
 * Neither prints; both take threads = 0 for the default thread count. */

/* Number of threads a call with opt.threads = requested runs on: requested
 * if positive, else $ATTN_NUM_THREADS, else OpenMP's default; 1 without
 * OpenMP. */
int attn_thread_count(int requested);

/* FP32 fused multiply-add peak in GFLOP/s (1 FMA = 2 FLOP): every thread
 * runs twelve independent register-resident FMA chains for `seconds` of
 * wall time (the best of 0.1 s windows, so a moment of contention on a
 * shared machine is not taken for the peak), with the widest FMA this CPU
 * has (see attn_fma_peak_isa). */
attn_status attn_measure_fma_peak(int threads, double seconds, double *gflops);

/* "avx512", "avx2" or "scalar": the instructions attn_measure_fma_peak uses. */
const char *attn_fma_peak_isa(void);

/* Memory bandwidth in GB/s (1e9 bytes) of a STREAM triad a[i] = b[i] + s*c[i]
 * over three double arrays of bytes/3 each (bytes = 0: 3 x 256 MiB), first
 * touched in parallel; the best of 7 passes after a warm-up.  Bytes are
 * counted as STREAM does, 24 per element (2 reads + 1 write); the hidden
 * read-for-ownership of the written line is not counted. */
attn_status attn_measure_bandwidth(int threads, size_t bytes, double *gbytes_per_s);

/* ---------------------------------------------------------------- gradients
 * Backward passes (docs/backward.md).  Every gradient has the shape of the
 * thing it differentiates, is WRITTEN (never accumulated into), and may be
 * NULL to skip it.  Gradients must not overlap any input.  The results are
 * bit-identical for every thread count. */

/* Bytes of scratch attn_sdpa_backward needs for these shapes and options
 * (the kernel actually chosen for them); pass at least this much as
 * opt.workspace to avoid any allocation inside the call. */
attn_status attn_sdpa_backward_workspace_size(const attn_tensor *q, const attn_tensor *k,
                                              const attn_tensor *v,
                                              const attn_sdpa_options *opt, size_t *bytes);

/* Gradient of scaled dot-product attention with respect to q, k and v.
 *   q: [B, L, Hq, D]  k: [B, S, Hkv, D]  v: [B, S, Hkv, Dv]   the forward's inputs
 *   opt:  the forward's options (masks, bias, scale), kernel and threads
 *   out:  [B, L, Hq, Dv]   the forward's output for these inputs    } both, or both
 *   lse:  [B, Hq, L]       the forward's lse, contiguous            } NULL: recomputed
 *   dout: [B, L, Hq, Dv]   dLoss/dout
 *   dq:   [B, L, Hq, D]    like q      (written)
 *   dk:   [B, S, Hkv, D]   like k      (written)  GQA: summed over the Hq/Hkv
 *   dv:   [B, S, Hkv, Dv]  like v      (written)  query heads sharing the kv head
 * A query row that sees no key contributes nothing (its dq row is 0, never
 * NaN); a key no query sees gets dk = dv = 0.  The bias and the masks are
 * constants: NO gradient of the bias is produced.  The reference kernel
 * recomputes the forward in double and ignores the values of out and lse;
 * the flash kernel (FlashAttention-2's recomputation, never materialising
 * L x S) relies on them, so they must come from the same inputs.
 * opt.kernel: auto = flash, except the reference for tiny problems
 * (B*Hq*L*S*(D+Dv) < 65536) where it is faster; $ATTN_ARCH=ref forces the
 * reference as in the forward. */
attn_status attn_sdpa_backward(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                               const attn_sdpa_options *opt, const attn_tensor *out,
                               const float *lse, const attn_tensor *dout, attn_tensor *dq,
                               attn_tensor *dk, attn_tensor *dv);

/* Name of the kernel attn_sdpa_backward would run ("ref", "flash"). */
const char *attn_sdpa_backward_kernel_name(const attn_tensor *q, const attn_tensor *k,
                                           const attn_tensor *v, const attn_sdpa_options *opt);

/* Gradient of attn_linear_forward (y = x . w + b):
 *   x: [rows, d_in]  w: [d_in, d_out]  dy: [rows, d_out]
 *   dx: [rows, d_in]  = dy . w^T           (or NULL)
 *   dw: [d_in, d_out] = x^T . dy           (or NULL)
 *   db: [d_out]       = sum over rows of dy (or NULL; whether or not b exists) */
attn_status attn_linear_backward(const float *x, int64_t rows, int64_t d_in, const float *w,
                                 int64_t d_out, const float *dy, float *dx, float *dw,
                                 float *db);

/* Gradients of attn_mha_forward.  Each pointer may be NULL to skip it.
 *   dx        [B, L, d_model]    for self-attention this sums the Q, K and V paths
 *   dcontext  [B, S, d_context]  cross-attention only (must be NULL without context)
 *   dwq [d_model, Hq*D]  dwk [d_context, Hkv*D]  dwv [d_context, Hkv*Dv]
 *   dwo [Hq*Dv, d_out]   (only when the module has wo)
 *   dbq [Hq*D]  dbk [Hkv*D]  dbv [Hkv*Dv]  dbo [d_out]  (whether or not the module
 *   has the bias: the gradient at its current value, 0 when absent) */
typedef struct attn_mha_grads {
    float *dx, *dcontext;
    float *dwq, *dwk, *dwv, *dwo;
    float *dbq, *dbk, *dbv, *dbo;
} attn_mha_grads;

/* Backward of the module: takes the forward's arguments plus dout
 * [B, L, d_out] and RECOMPUTES the forward's intermediates (Q, K, V, the
 * attention output Z and its lse) instead of asking the caller to keep
 * them: one more forward's work, no state between the two calls.
 * Memory: Q, K, V, Z and their gradients, O(rows x width); never L x S
 * (unless opt.kernel is ref, whose score table is L x S per head).
 * opt.workspace is not used (the call makes two attention calls of
 * different needs). */
attn_status attn_mha_backward(const attn_mha *m, const float *x, int64_t batch, int64_t len,
                              const float *context, int64_t context_len,
                              const attn_sdpa_options *opt, const float *dout,
                              const attn_mha_grads *grads);

/* ------------------------------------------------ looking inside (hooks)
 *
 * A traced forward pass records every intermediate of attention per head,
 * under TransformerLens's hook names and in its axis order (docs/
 * interpretability.md):
 *
 *   hook_q            q        [B, L, Hq,  D ]   batch pos head_index d_head
 *   hook_k            k        [B, S, Hkv, D ]   (kv heads: GQA is not repeated)
 *   hook_v            v        [B, S, Hkv, Dv]
 *   hook_attn_scores  scores   [B, Hq, L, S]    <- heads before positions!
 *                              scale * q.k + bias; -inf where hidden
 *   hook_pattern      pattern  [B, Hq, L, S]    the weights (rows sum to 1)
 *   hook_z            z        [B, L, Hq, Dv]   each head's weighted sum
 *   hook_result       result   [B, L, Hq, d_out] each head through its slice
 *                              of W_O:  sum_h result[.., h, :] + bo = out
 *   hook_attn_out     attn_out [B, L, d_out]    the module's output
 *
 * A trace holds the values the pass actually used, i.e. after patches.
 * Bare attention (attn_sdpa_forward_traced) has no W_O: its result and
 * attn_out are NULL and d_out is 0.
 */
typedef enum attn_hook {
    ATTN_HOOK_Q = 0, ATTN_HOOK_K, ATTN_HOOK_V, ATTN_HOOK_ATTN_SCORES, ATTN_HOOK_PATTERN,
    ATTN_HOOK_Z, ATTN_HOOK_RESULT, ATTN_HOOK_ATTN_OUT,
    ATTN_HOOK_COUNT
} attn_hook;

/* "hook_q", "hook_k", ... ; NULL for a value outside the enum. */
const char *attn_hook_name(attn_hook hook);

/* Parses a hook name: "hook_pattern", "pattern" and TransformerLens's full
 * "blocks.0.attn.hook_pattern" all give ATTN_HOOK_PATTERN. */
attn_status attn_hook_from_name(const char *name, attn_hook *hook);

/* Every buffer is malloc'd by the traced forward and freed by
 * attn_trace_free; pass a zeroed struct (attn_trace t = {0};) or one already
 * freed.  On failure the struct is left zeroed. */
typedef struct attn_trace {
    int64_t batch, len, context_len; /* B, L, S                              */
    int64_t heads, kv_heads;         /* Hq, Hkv                              */
    int64_t head_dim, value_dim;     /* D, Dv                                */
    int64_t d_out;                   /* module output width; 0 = bare attention */
    float *q, *k, *v, *scores, *pattern, *z; /* shapes in the table above   */
    float *result, *attn_out;        /* NULL for bare attention              */
} attn_trace;

void attn_trace_free(attn_trace *trace); /* safe on a zeroed or freed trace */

/* One hook of a trace as an array: data, rank (3 or 4), shape, and the axis
 * names in TransformerLens's words ("batch pos head_index d_head"). */
typedef struct attn_hook_tensor {
    attn_hook hook;
    const char *name;
    float *data;
    int ndim;
    int64_t shape[4];
    const char *axes;
} attn_hook_tensor;

/* Fails (ATTN_ERR_INVALID_ARGUMENT) for hook_result / hook_attn_out of a
 * bare-attention trace and for an empty trace. */
attn_status attn_trace_get(const attn_trace *trace, attn_hook hook, attn_hook_tensor *view);

/* ---------------------------------------------------------------- patches
 *
 * A patch changes one hook during the forward pass; everything downstream
 * sees the change.  Patches run in stage order (q, k, v first, then the
 * pattern, then z) and in array order within a stage.
 *
 * Selection: rows of q and z are (batch, query position, query head); rows
 * of k and v are (batch, key position, kv head); rows of the pattern are
 * (batch, query head, query position) and `key` picks entries within them.
 * ATTN_ALL (-1) in a selector selects every index; attn_patch_make returns
 * a patch whose selectors are all ATTN_ALL.
 *
 *   kind      hooks               effect on each selected row (or entry)
 *   REPLACE   q k v pattern z     := `values` (one row, written to every
 *                                    selected row), or, with values NULL,
 *                                    the same row of `source`'s hook
 *                                    (activation patching; shapes must match)
 *   ZERO      q k v pattern z     := 0   (ZERO on hook_z, every position,
 *                                    one head = zero-ablating that head)
 *   MEAN      q k v z             := mean over all positions of that batch
 *                                    and head (mean-ablation), from the
 *                                    values before this patch
 *   SCALE     q k v pattern z     *= factor  (factor >= 0 on the pattern)
 *   SET       pattern             := factor  (factor >= 0)
 *
 * Pattern patches say explicitly whether to renormalise: with renormalise
 * nonzero each touched row is divided by its new sum afterwards (a row whose
 * sum is 0 stays 0 and reads nothing); with 0 the row is used as written,
 * even if it no longer sums to 1.  When the pattern is patched, z is the
 * weighted sum of v under the patched pattern.  Patching a hidden entry of
 * the pattern lets the query read a key the mask hid: that is the caller's
 * choice.
 */
#define ATTN_ALL (-1)

typedef enum attn_patch_kind {
    ATTN_PATCH_REPLACE = 0,
    ATTN_PATCH_ZERO,
    ATTN_PATCH_MEAN,
    ATTN_PATCH_SCALE,
    ATTN_PATCH_SET
} attn_patch_kind;

typedef struct attn_patch {
    attn_patch_kind kind;
    attn_hook hook;           /* Q, K, V, PATTERN or Z                        */
    int64_t batch;            /* index or ATTN_ALL                            */
    int64_t position;         /* query position (q, z, pattern) or key position (k, v) */
    int64_t head;             /* query head (q, z, pattern) or kv head (k, v) */
    int64_t key;              /* pattern only: key column; ATTN_ALL otherwise */
    const float *values;      /* REPLACE: one row of width D, Dv or S         */
    const attn_trace *source; /* REPLACE with values NULL: take rows from here */
    float factor;             /* SCALE: multiplier; SET: the new weight       */
    int renormalise;          /* pattern patches: divide touched rows by their sum */
} attn_patch;

/* A patch of this kind on this hook with every selector ATTN_ALL, factor 1
 * and no renormalisation; narrow it by setting fields. */
attn_patch attn_patch_make(attn_patch_kind kind, attn_hook hook);

/* Bare attention, traced and patched.  Copies q, k, v into the trace (any
 * strides), applies the q/k/v patches, then computes scores and pattern with
 * attn_sdpa_scores / attn_sdpa_forward (so every mask option applies),
 * applies the pattern and z patches.
 *   q: [B, L, Hq, D]  k: [B, S, Hkv, D]  v: [B, S, Hkv, Dv]
 *   out: [B, L, Hq, Dv] (written; = hook_z), or NULL when trace is given
 *   trace: filled (zeroed struct in, attn_trace_free after), or NULL
 * Without patches, out is bit-identical to attn_sdpa_forward's. */
attn_status attn_sdpa_forward_traced(const attn_tensor *q, const attn_tensor *k,
                                     const attn_tensor *v, const attn_sdpa_options *opt,
                                     const attn_patch *patches, int n_patches,
                                     attn_trace *trace, attn_tensor *out);

/* Multi-head attention (attn_mha_forward's arguments), traced and patched:
 * the projections with attn_linear_forward, then as attn_sdpa_forward_traced,
 * then W_O per head (hook_result) and for the module (hook_attn_out).
 *   x: [B, L, d_model]  context: [B, S, d_context] or NULL (self: S = L)
 *   out: [B, L, d_out] or NULL when trace is given
 * Without patches, out is bit-identical to attn_mha_forward's. */
attn_status attn_mha_forward_traced(const attn_mha *m, const float *x, int64_t batch,
                                    int64_t len, const float *context, int64_t context_len,
                                    const attn_sdpa_options *opt, const attn_patch *patches,
                                    int n_patches, attn_trace *trace, float *out);

/* ------------------------------------------- path decomposition (Figure 2)
 *
 * Weight and content are separate causal paths.  For a base input and a
 * changed input, with the BASE queries held fixed:
 *   base     base keys,    base values
 *   K only   changed keys, base values    (weights move, content does not)
 *   V only   base keys,    changed values (the base weights, new content)
 *   both     changed keys, changed values
 *   changed  the changed input's own run (its queries change too)
 *   interaction = both - K only - V only + base  (0 when the paths add up)
 * The chapter's query 3: [1.5, 0.75] / [1.2, 0.8] / [1.5, 1.0] / [1.2, 1.2],
 * interaction [0, 0.15].
 */
typedef enum attn_path_case {
    ATTN_PATH_BASE = 0, ATTN_PATH_K_ONLY, ATTN_PATH_V_ONLY, ATTN_PATH_BOTH, ATTN_PATH_CHANGED,
    ATTN_PATH_CASES
} attn_path_case;

/* "base", "K only", "V only", "both", "changed"; NULL outside the enum. */
const char *attn_path_case_name(attn_path_case c);

typedef struct attn_paths {
    attn_trace run[ATTN_PATH_CASES]; /* every hook of every case              */
    float *interaction_z;      /* [B, L, Hq, Dv]                              */
    float *interaction_result; /* [B, L, Hq, d_out]; NULL for bare attention  */
    float *interaction_out;    /* [B, L, d_out];     NULL for bare attention  */
} attn_paths;

void attn_paths_free(attn_paths *paths); /* safe on a zeroed or freed struct */

/* Bare attention.  q_changed, k_changed, v_changed may each be NULL (= the
 * base tensor); the changed tensors must have the base's shapes.
 * paths: a zeroed struct, filled; free with attn_paths_free. */
attn_status attn_sdpa_paths(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                            const attn_tensor *q_changed, const attn_tensor *k_changed,
                            const attn_tensor *v_changed, const attn_sdpa_options *opt,
                            attn_paths *paths);

/* Multi-head attention: x and x_changed [B, L, d_model]; context and
 * context_changed [B, S, d_context] for cross-attention (context_changed
 * NULL = context), both NULL for self-attention.  The K-only, V-only and
 * both runs are the base pass with hook_k / hook_v patched from the changed
 * pass (activation patching). */
attn_status attn_mha_paths(const attn_mha *m, const float *x, const float *x_changed,
                           int64_t batch, int64_t len, const float *context,
                           const float *context_changed, int64_t context_len,
                           const attn_sdpa_options *opt, attn_paths *paths);

/* ------------------------------- "weights are not an explanation" (§8)
 *
 * For one weight row w (one query, one head) and the value rows it mixes,
 * finds a row w' as far from w as possible in L1 distance that gives the
 * same output within a tolerance:
 *   maximise ||w' - w||_1  subject to  w' >= 0,  sum w' = sum w,
 *            |sum_j (w'_j - w_j) v_j[d]| <= tolerance  for every d,
 *            w'_j = 0 for every hidden key.
 * The maximum of a convex function over this polytope lies at a vertex;
 * finding it is NP-hard in general.  Up to exact_limit visible keys every
 * sign pattern of w' - w is solved as a linear program (dense simplex), so
 * the answer is the maximum; beyond it, a local search over sign patterns
 * from several starts gives a lower bound (result->exact = 0).  The
 * returned row is checked in double precision and pulled back toward w if
 * rounding left it outside the tolerance, so it always satisfies the
 * constraints.  To ask about a head's contribution after W_O, pass the
 * values already multiplied by that head's slice of W_O.
 */
typedef struct attn_nullspace_options {
    double tolerance;    /* >= 0: allowed change of any output coordinate    */
    int64_t exact_limit; /* enumerate when at most this many keys are visible;
                            0 = 12; at most 20                                */
    int64_t starts;      /* local-search starts beyond the limit; 0 = 32      */
} attn_nullspace_options;

typedef struct attn_nullspace_result {
    double l1;                /* ||w' - w||_1 of the row returned             */
    double max_output_change; /* max_d |sum_j (w'_j - w_j) v_j[d]| <= tolerance */
    int exact;                /* 1: every sign pattern was solved             */
    int64_t visible;          /* keys w' may use                              */
    int64_t programs;         /* linear programs solved                       */
} attn_nullspace_result;

/*   weights: [S], non-negative (a row of hook_pattern)
 *   values:  [S, width] row-major (the v rows this query reads)
 *   visible: [S] nonzero = the key may carry weight, or NULL (all)
 *   moved:   [S] written: the row w' found (w itself when nothing moves) */
attn_status attn_nullspace_search(const float *weights, const float *values, int64_t keys,
                                  int64_t width, const uint8_t *visible,
                                  const attn_nullspace_options *opt, double *moved,
                                  attn_nullspace_result *result);

/* Pictures need cairo at build time (PNG, SVG, PDF); without it these three
 * functions return ATTN_ERR_UNSUPPORTED and attn_pictures_available() is 0.
 * The HTML report below needs nothing and always works.  Text is drawn with
 * the "Noto Sans CJK SC" font (Debian: fonts-noto-cjk), so labels such as
 * 我 吃 了 render; another font is substituted when it is missing. */
int attn_pictures_available(void); /* 1 when built with cairo */

/* Options of a heat map.  A zeroed struct means: labels 0, 1, 2 ..., every
 * cell visible, colour scale [0, 1], values printed when a map has at most
 * 16 x 16 cells, automatic cell size and panel grid. */
typedef struct attn_heatmap_options {
    const char *const *query_labels; /* [L] UTF-8 row labels, or NULL: 0 .. L-1      */
    const char *const *key_labels;   /* [S] column labels, or NULL: query_labels
                                        when S == L, else 0 .. S-1                   */
    const uint8_t *visible;          /* [H, L, S] nonzero = the query may read the
                                        key, or NULL: all visible.  Hidden cells
                                        (and cells holding -inf, as in the tables
                                        of attn_sdpa_scores) are drawn hatched grey,
                                        never as the colour of 0                     */
    const int64_t *head_ids;         /* [H] numbers for the panel titles ("head 3"),
                                        or NULL: 0 .. H-1                            */
    const char *title;               /* a line above the panels, or NULL             */
    const char *lang;                /* "en" (default) or "zh": axis captions        */
    float vmin, vmax;                /* colour scale; vmin == vmax: [0, 1] when every
                                        value lies in it, else the data's range      */
    int values;                      /* print each cell's value: 0 = when the map is
                                        at most 16 x 16, 1 = always, -1 = never      */
    int columns;                     /* PNG/SVG: panels per row, 0 = automatic       */
    double cell;                     /* cell side in points, 0 = automatic           */
    double pixel_scale;              /* PNG pixels per point, 0 = 2 (1 for pictures
                                        over 8000 pixels on a side)                  */
} attn_heatmap_options;

/* Draws attention maps, one panel per head: rows are queries, columns are the
 * keys they read (as in the chapter's Figure 3), token labels on both axes,
 * a colour-scale legend.  The format follows path's extension: .png and .svg
 * put the heads side by side in a grid, .pdf puts one head on each page.
 * Written atomically (a temporary file renamed over path); messages name path.
 *   weights: [H, L, S] contiguous (one batch of attn_sdpa_forward's weights);
 *   NaN and +inf are refused. */
attn_status attn_heatmap_write(const char *path, const float *weights, int64_t heads,
                               int64_t len_q, int64_t len_kv, const attn_heatmap_options *opt);

/* The chapter's three figures, drawn from numbers the library computes
 * (attn_linear_forward, attn_sdpa_scores, attn_sdpa_forward):
 *   1  X splits into Q, K, V (3x2 each); Q and K meet in the 3x3 match table,
 *      V takes its own path to the weighted sum; q3's weights aligned with
 *      the values they multiply.
 *   2  the four interventions on position 3 side by side: original, K only,
 *      V only, both ([1.5, 0.75], [1.2, 0.8], [1.5, 1.0], [1.2, 1.2]).
 *   3  the causal mask: rows are queries, columns the positions read; row 2
 *      renormalised to 1/3, 2/3, 0; hidden cells drawn distinctly.
 * Format by extension as above (.png, .svg, .pdf); lang "en" or "zh" (NULL = en). */
attn_status attn_chapter_figure_write(const char *path, int figure, const char *lang);

/* A self-contained HTML report of attention maps: one file, no network
 * access, no external scripts or fonts.  The data are embedded as JSON (the
 * weights as base64 little-endian float32, so hovering shows each weight
 * exactly); heat maps are drawn on <canvas>, so 512 tokens x 16 heads stay
 * usable.  The page holds a heat map per head (hover: the token pair and the
 * exact weight), a bertviz-style token view (lines from each query to the
 * keys it reads, thickness and opacity = weight; hover or click a token to
 * focus it), and, when paths is set, the path-decomposition table of the
 * chapter's Figure 2 (base, K only, V only, both, interaction) per head, and
 * for multi-head attention also after W_O.  Opening the file with #selftest
 * appended makes the page hover a cell and report what it showed in
 * <pre id="selftest"> (the tests drive it with headless Chromium). */
typedef struct attn_report {
    const char *title;               /* or NULL                                     */
    const char *subtitle;            /* e.g. the command line, or NULL              */
    int64_t heads, len_q, len_kv;    /* H, L, S of the maps below                   */
    const float *weights;            /* [H, L, S]                                   */
    const uint8_t *visible;          /* [H, L, S] nonzero = visible, or NULL        */
    const int64_t *head_ids;         /* [H] the heads' numbers, or NULL: 0 .. H-1   */
    const char *const *query_labels; /* [L] UTF-8, or NULL                          */
    const char *const *key_labels;   /* [S], or NULL (query_labels when S == L)     */
    const attn_paths *paths;         /* from attn_sdpa_paths / attn_mha_paths, or
                                        NULL: no path table.  Its query heads are
                                        indexed by head_ids (or 0 .. H-1)           */
    int64_t paths_batch;             /* the batch of paths shown                    */
} attn_report;

attn_status attn_report_write_html(const char *path, const attn_report *report);

#ifdef __cplusplus
}
#endif

#endif /* ATTN_H */
