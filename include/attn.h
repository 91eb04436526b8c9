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

/* @@anchor: kernels-and-machine (issue 3: kernel/ISA info, machine limits) */

/* @@anchor: machine-limits (issue 3: measured FMA peak and bandwidth for attn bench) */

/* ------------------------------------------------- this machine's limits
 * Measured, not assumed (attn bench reports kernels as fractions of them).
 * Neither prints; both take threads = 0 for the default thread count. */

/* Number of threads a call with opt.threads = requested runs on: requested
 * if positive, else $ATTN_NUM_THREADS, else OpenMP's default; 1 without
 * OpenMP. */
int attn_thread_count(int requested);

/* FP32 fused multiply-add peak in GFLOP/s (1 FMA = 2 FLOP): every thread
 * runs twelve independent register-resident FMA chains for `seconds` of
 * wall time, with the widest FMA this CPU has (see attn_fma_peak_isa). */
attn_status attn_measure_fma_peak(int threads, double seconds, double *gflops);

/* "avx512", "avx2" or "scalar": the instructions attn_measure_fma_peak uses. */
const char *attn_fma_peak_isa(void);

/* Memory bandwidth in GB/s (1e9 bytes) of a STREAM triad a[i] = b[i] + s*c[i]
 * over three double arrays of bytes/3 each (bytes = 0: 3 x 256 MiB), first
 * touched in parallel; the best of 7 passes after a warm-up.  Bytes are
 * counted as STREAM does, 24 per element (2 reads + 1 write); the hidden
 * read-for-ownership of the written line is not counted. */
attn_status attn_measure_bandwidth(int threads, size_t bytes, double *gbytes_per_s);

/* @@anchor: gradients (issue 4: backward passes) */

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
 * L x S) relies on them, so they must come from the same inputs. */
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
 * (unless opt.kernel is ref, whose score table is L x S per head). */
attn_status attn_mha_backward(const attn_mha *m, const float *x, int64_t batch, int64_t len,
                              const float *context, int64_t context_len,
                              const attn_sdpa_options *opt, const float *dout,
                              const attn_mha_grads *grads);

/* @@anchor: interpretability (issue 5: hooks, patching, paths, null space) */

/* @@anchor: pictures (issue 5: heat maps, figures, HTML report) */

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
 * weights as base64 float32, so hovering shows each weight exactly); heat
 * maps are drawn on <canvas>, so 512 tokens x 16 heads stay usable.  The page
 * holds a heat map per head (hover: the token pair and the exact weight), a
 * bertviz-style token view (lines from each query to the keys it reads,
 * thickness and opacity = weight; hover or click a token to focus it), and,
 * when paths is set, the path-decomposition table of the chapter's Figure 2. */
typedef struct attn_report_paths {
    int64_t value_dim;          /* Dv of the outputs below                         */
    const float *outputs;       /* [4, L, H, Dv]: base, K only (changed keys, base
                                   values), V only (base weights, changed values),
                                   both; the interaction both - K - V + base is
                                   computed by the report                          */
    const float *weights_changed; /* [H, L, S] weights with the changed keys, or NULL */
    const char *output_name;    /* what the outputs are ("z, per head, before W_O"),
                                   or NULL                                         */
} attn_report_paths;

typedef struct attn_report {
    const char *title;               /* or NULL                                     */
    const char *subtitle;            /* e.g. the command line, or NULL              */
    int64_t heads, len_q, len_kv;    /* H, L, S                                     */
    const float *weights;            /* [H, L, S]                                   */
    const uint8_t *visible;          /* [H, L, S] nonzero = visible, or NULL        */
    const int64_t *head_ids;         /* [H] or NULL: 0 .. H-1                       */
    const char *const *query_labels; /* [L] UTF-8, or NULL                          */
    const char *const *key_labels;   /* [S], or NULL (query_labels when S == L)     */
    const attn_report_paths *paths;  /* or NULL: no path table                      */
} attn_report;

attn_status attn_report_write_html(const char *path, const attn_report *report);

#ifdef __cplusplus
}
#endif

#endif /* ATTN_H */
