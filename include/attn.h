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

/* @@anchor: kernels-and-machine (issue 3: kernel/ISA info, machine limits) */

/* @@anchor: machine-limits (issue 3: measured FMA peak and bandwidth for attn bench) */

/* @@anchor: gradients (issue 4: backward passes) */

/* @@anchor: interpretability (issue 5: hooks, patching, paths, null space) */

/* @@anchor: pictures (issue 5: heat maps, figures, HTML report) */

#ifdef __cplusplus
}
#endif

#endif /* ATTN_H */
