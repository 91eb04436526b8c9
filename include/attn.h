/*
 * attn.h — the attention mechanism as a C library: the core (libattn).
 *
 * The public headers, one per concern, all built on this one:
 *   attn.h          status, dtypes and tensors; scaled dot-product attention
 *                   forward and backward; projections and the multi-head
 *                   module; versions                               (libattn)
 *   attn_io.h       n-dimensional arrays, .npy files, atomic output files
 *   attn_interp.h   hooks, patches, path decomposition, the null-space search
 *   attn_machine.h  this machine's measured FMA peak and bandwidth
 *   attn_rope.h     rotary position embedding (RoPE), forward and backward
 *   attn_cache.h    a key/value cache, contiguous or paged, and attention
 *                   over it (decoding, chunked prefill, batched)
 *   attn_chapter.h  the chapter's worked example: its inputs and numbers
 *   attn_viz.h      heat maps, the chapter's figures, the HTML report
 *                                                               (libattn_viz)
 *   attn_mpi.h      ring attention over MPI                     (libattn_mpi)
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
 *                 (with the score stage of docs/logits.md: soft-capping of
 *                 the scaled dot product, ALiBi, sinks; see the options)
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
 *   output 0, weights 0 and lse -inf: never NaN (with a sink: lse = the sink).
 *
 * Errors: every function returns an attn_status (ATTN_OK == 0, negative on
 * failure) and leaves a human-readable reason in a thread-local buffer read
 * by attn_last_error().  The library never prints, exits or aborts on user
 * input.
 *
 * Non-finite values (docs/semantics.md, "Numbers and errors"), in every
 * kernel:
 *   - a key HIDDEN from a row by any rule never matters to it, whatever its
 *     k and v hold (NaN, Inf: a KV cache's unused slots): the row's results
 *     are those of the problem with that key zeroed;
 *   - NaN or +/-Inf in a row's q, in the k of a key it sees, or a NaN or
 *     +inf bias on such a key: that row's output, weights and lse are NaN,
 *     its gradients not finite; in the v of a key it sees: the output
 *     elements that read it (weights and lse do not read v);
 *   - finite inputs whose scores overflow float32 (q = k = 1e19, a huge
 *     scale, a bias near FLT_MAX) give the double-precision reference's
 *     answer: the fast kernels recompute such rows with it.
 * The library does not scan its inputs (a scan would add a full extra read
 * of the key/value cache to every decode step); the kernels find such rows
 * from what they compute anyway.  Call attn_check_finite() if you want the
 * check; the attn command-line program does, and refuses such files.  In a
 * bias, -inf is the documented way to hide a key.
 *
 * ABI: the shared library exports exactly the functions these headers
 * declare with ATTN_API; everything else is hidden.  Option structs, the
 * ones a caller fills in (attn_sdpa_options, attn_mha, attn_mha_grads,
 * attn_patch, attn_nullspace_options, attn_heatmap_options, attn_report,
 * attn_ring_options), begin with `size_t struct_size`, which the header's
 * initialiser sets to the caller's sizeof:
 *     attn_sdpa_options opt = ATTN_SDPA_OPTIONS_INIT;    then set fields
 * A newer library reads an older caller's struct (the fields the caller
 * does not know keep their defaults); an older library refuses a newer
 * caller's struct that sets fields it does not have (ATTN_ERR_UNSUPPORTED)
 * rather than silently ignore them; a struct_size of 0 (a struct zeroed
 * with = {0}) is refused with a message that names the initialiser.
 * Result structs the library fills in (attn_trace, attn_paths, ...) change
 * only with the library's SONAME.
 */
#ifndef ATTN_H
#define ATTN_H

#include <stddef.h>
#include <stdint.h>

#include "attn_export.h"  /* ATTN_API                                          */
#include "attn_version.h" /* ATTN_VERSION_MAJOR, _MINOR, _PATCH, _STRING and
                             ATTN_VERSION_NUMBER: the headers' version          */

#ifdef __cplusplus
extern "C" {
#endif

/* ----------------------------------------------------------------- version */

/* The version of the library loaded at run time, as text ("0.2.0") and as
 * major * 10000 + minor * 100 + patch (200).  Compare with attn_version.h's
 * ATTN_VERSION_STRING and ATTN_VERSION_NUMBER to detect headers and a
 * library that do not belong together. */
ATTN_API const char *attn_version(void);
ATTN_API long attn_version_number(void);

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
    ATTN_ERR_INTERNAL = -9,
    ATTN_ERR_TIMEOUT = -10,         /* another process did not answer in time
                                       (ring attention, attn_mpi.h)          */
    ATTN_ERR_BUDGET = -11,          /* beyond a documented work budget: the
                                       message names the cheaper alternative */
    ATTN_ERR_CAPACITY = -12         /* a fixed-size store is full (a KV
                                       cache's pool or a sequence's capacity,
                                       attn_cache.h): nothing was changed   */
} attn_status;

/* Static English name of a status code ("shape mismatch", ...). */
ATTN_API const char *attn_status_str(attn_status status);

/* The message of the last failing call on this thread ("" if none).  The
 * pointer stays valid until the next failing call on the same thread. */
ATTN_API const char *attn_last_error(void);

/* For libraries layered on attn (libattn_viz, libattn_mpi, language
 * bindings): records a failure as this thread's last error, so that
 * attn_last_error() reports the failures of the whole stack in one place.
 * printf-style, and returns status, so that a failure reads
 *     return attn_set_error(ATTN_ERR_SHAPE, "x has %d rows", n);
 * The arguments may include attn_last_error() itself (to wrap a message). */
ATTN_API attn_status attn_set_error(attn_status status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* ------------------------------------------------------------------ dtypes */

/* Element types.  Tensors hold float32, float16 or bfloat16 (each kernel
 * says which it computes); arrays read from files (attn_io.h) any of these.
 * bfloat16 is the top half of a float32 (8 significant bits), float16 IEEE
 * binary16 (11 significant bits). */
typedef enum attn_dtype {
    ATTN_F32 = 0, ATTN_F64 = 1, ATTN_F16 = 2, ATTN_BF16 = 3,
    ATTN_BOOL = 4, ATTN_I8 = 5, ATTN_I16 = 6, ATTN_I32 = 7, ATTN_I64 = 8,
    ATTN_U8 = 9, ATTN_U16 = 10, ATTN_U32 = 11, ATTN_U64 = 12
} attn_dtype;

/* numpy's name ("float32", "bfloat16", ...; "unknown dtype" outside the
 * enum) and the size of one element in bytes (0 outside the enum). */
ATTN_API const char *attn_dtype_name(attn_dtype dtype);
ATTN_API size_t attn_dtype_size(attn_dtype dtype);

/* ----------------------------------------------------------------- tensors */

typedef struct attn_tensor {
    void *data;        /* read-only for inputs                               */
    attn_dtype dtype;  /* ATTN_F32, ATTN_F16 or ATTN_BF16                    */
    int64_t shape[4];  /* [B, positions, heads, width]                       */
    int64_t stride[4]; /* in elements; stride[3] must be 1                   */
} attn_tensor;

/* Contiguous float32 views.  2-D [L, D] -> [1, L, 1, D]; 3-D [L, H, D] -> [1, L, H, D]. */
ATTN_API attn_tensor attn_tensor_4d(float *data, int64_t b, int64_t l, int64_t h, int64_t d);
ATTN_API attn_tensor attn_tensor_3d(float *data, int64_t l, int64_t h, int64_t d);
ATTN_API attn_tensor attn_tensor_2d(float *data, int64_t l, int64_t d);
/* A contiguous [B, L, H, D] view of data of any tensor dtype. */
ATTN_API attn_tensor attn_tensor_view(void *data, attn_dtype dtype, int64_t b, int64_t l,
                                      int64_t h, int64_t d);

/* OUTPUTS NEVER SHARE MEMORY with inputs or with each other.  Every call
 * that writes — attn_sdpa_forward, attn_sdpa_scores, the backward, the
 * traced forwards (attn_interp.h), attn_mha_forward and _backward, the
 * attn_linear_ functions, attn_kv_cache_attend (attn_cache.h), attn_ring_
 * forward and backward (attn_mpi.h) — refuses, with ATTN_ERR_INVALID_ARGUMENT
 * naming both ("out overlaps k in memory"), before anything is written, an
 * output (out, weights, lse, scores, a gradient, y; opt.workspace counts as
 * one) whose memory overlaps an input (q, k, v, x, W, dout, the options'
 * mask, bias, key_lengths, sinks, alibi_slopes) or another output.  What is
 * compared is each argument's byte extent, from its first byte to its last
 * (a strided tensor's: data to its last element): two views interleaved in
 * one buffer that share no element are refused too; buffers that only
 * touch are fine.  Inputs may share memory with each other (v = k). */

/* ATTN_OK when all n values are finite; otherwise ATTN_ERR_NONFINITE, with
 * *first_bad (if not NULL) set to the index of the first NaN/Inf. */
ATTN_API attn_status attn_check_finite(const float *data, int64_t n, int64_t *first_bad);

/* ------------------------------------------------------ scaled dot product */

typedef enum attn_kernel {
    ATTN_KERNEL_AUTO = 0,  /* the fastest kernel that supports the request   */
    ATTN_KERNEL_REF = 1,   /* plain loops, double accumulation, the oracle    */
    ATTN_KERNEL_FLASH = 2  /* tiled online softmax                            */
} attn_kernel;

/* How float16 / bfloat16 tensors enter the arithmetic (accumulation is
 * always float32).  EXACT: every element is widened to float32 first, so a
 * half tensor gives the float32 result of its (exactly representable)
 * values.  FAST: a request for native bfloat16 dot products with float32
 * accumulation (AVX512-BF16 vdpbf16ps), honoured on the flash forward's
 * tile path (prefill) where the CPU has them: Q·Kᵀ when q and k are half,
 * P·V (P rounded to bfloat16) when v is half; float16 operands are rounded
 * to bfloat16 first.  Everywhere else (another CPU, decode's rows path,
 * the backward, the reference) it runs EXACT; attn_sdpa_kernel_name()
 * says "flash-bf16" when it is honoured.  Accuracy: docs/kernels.md.
 * Float32 tensors are computed the same either way. */
typedef enum attn_precision {
    ATTN_PRECISION_EXACT = 0,
    ATTN_PRECISION_FAST = 1
} attn_precision;

typedef enum attn_align {
    ATTN_ALIGN_TOP_LEFT = 0,    /* diagonal j = i           (PyTorch is_causal) */
    ATTN_ALIGN_LOWER_RIGHT = 1  /* diagonal j = i + S - L   (FlashAttention,
                                   KV-cache decoding)                          */
} attn_align;

/* All options of one attention call.  Initialise with
 *     attn_sdpa_options opt = ATTN_SDPA_OPTIONS_INIT;
 * which means: scale 1/sqrt(D), no mask, automatic kernel, default thread
 * count, the library allocates its own workspace; then set what you need.
 * Passing NULL options means the same. */
/* How far a call has got, for an interface's progress line: fraction_done
 * in [0, 1].  Called on the calling thread only (never concurrently), at
 * most about ten times a second, and only for calls that last longer than
 * that; it must not call back into attn with the same options.  The
 * results do not depend on it. */
typedef void (*attn_progress_fn)(void *user, double fraction_done);

typedef struct attn_sdpa_options {
    size_t struct_size;       /* sizeof(attn_sdpa_options), set by the initialiser */
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
    size_t workspace_size;    /* bytes available at workspace: trusted (no C
                                 function can measure a buffer), only sizes no
                                 buffer can have (over PTRDIFF_MAX, or wrapping
                                 the address space) are refused; the call
                                 writes at most what the _workspace_size
                                 query reports                                */
    attn_progress_fn progress; /* or NULL (above)                               */
    void *progress_user;      /* passed to progress                             */
    /* The score stage (docs/logits.md), each off when zero or NULL:
     *   s_ij = softcap(scale * q_i.k_j) + bias_ij + alibi_h * (j - i - offset)
     * where softcap(x) = softcap * tanh(x / softcap) (Gemma 2: the raw
     * scaled logits are capped, then bias, ALiBi and masks apply), offset
     * places query i on its causal diagonal (query_start, key_start and
     * align, as for causal), and the sink joins each row's softmax:
     *   p_ij = exp(s_ij) / (exp(sinks[h]) + sum_j exp(s_ij))
     *   lse  = log(exp(sinks[h]) + sum_j exp(s_ij))   (the sink included)
     * A row with no visible key then gets output 0 and lse = sinks[h]. */
    float softcap;            /* > 0 and finite: cap the scores; 0 = off        */
    const float *sinks;       /* [Hq] sink logits (finite, or -inf = none for
                                 that head), or NULL                            */
    const float *alibi_slopes; /* [Hq] finite ALiBi slopes, or NULL             */
    int alibi_standard;       /* nonzero: the ALiBi paper's geometric slopes for
                                 Hq heads (not with alibi_slopes)               */
    /* Half-precision storage: q, k, v, out (and dout, dq, dk, dv) may each
     * be ATTN_F32, ATTN_F16 or ATTN_BF16, any mix; outputs are rounded to
     * their tensor's dtype once, to nearest even. */
    attn_precision precision; /* ATTN_PRECISION_EXACT (default) or _FAST       */
} attn_sdpa_options;

#define ATTN_SDPA_OPTIONS_INIT {.struct_size = sizeof(attn_sdpa_options)}

/* Bytes of scratch attn_sdpa_forward needs for these shapes and options
 * (the kernel actually chosen for them).  Passing a workspace of at least
 * this size avoids any allocation inside the call.  Only shapes and
 * options are read: the tensors' data may be NULL. */
ATTN_API attn_status attn_sdpa_workspace_size(const attn_tensor *q, const attn_tensor *k,
                                              const attn_tensor *v, const attn_sdpa_options *opt,
                                              size_t *bytes);

/* Scaled dot-product attention.
 *   q: [B, L, Hq, D]  k: [B, S, Hkv, D]  v: [B, S, Hkv, Dv]   float32, float16
 *                                       or bfloat16, any mix (storage only:
 *                                       the arithmetic is float32)
 *   out: [B, L, Hq, Dv] (written)
 *   weights: [B, Hq, L, S] contiguous, or NULL      <- heads before positions!
 *   lse:     [B, Hq, L]    contiguous, or NULL      natural log; -inf if the
 *                                                   row sees no key
 *   opt: NULL for defaults.
 * Both kernels take every tensor dtype; out is written in its own dtype,
 * rounded once to nearest even (weights and lse are float32). */
ATTN_API attn_status attn_sdpa_forward(const attn_tensor *q, const attn_tensor *k,
                                       const attn_tensor *v, const attn_sdpa_options *opt,
                                       attn_tensor *out, float *weights, float *lse);

/* The score table attention normalises, for inspection and teaching:
 *   scores: [B, Hq, L, S] = scale * q.k + bias, and -inf where hidden
 *           (soft-capped and with ALiBi's bias when asked; a sink is not a
 *           key and has no column: docs/logits.md). 
 * Materialises the table, so it is meant for small problems. */
ATTN_API attn_status attn_sdpa_scores(const attn_tensor *q, const attn_tensor *k,
                                      const attn_sdpa_options *opt, float *scores);

/* Name of the kernel attn_sdpa_forward would run for these inputs ("ref",
 * "flash", or "flash-bf16" when precision fast is honoured with native
 * bfloat16 dot products; "invalid" for arguments it would refuse), for
 * logs and benchmarks. */
ATTN_API const char *attn_sdpa_kernel_name(const attn_tensor *q, const attn_tensor *k,
                                           const attn_tensor *v, const attn_sdpa_options *opt);

/* The work of attn_sdpa_forward for these shapes and options, in FLOPs:
 * 2 * (D + Dv) for every visible (batch, query head, query, key)
 * quadruple, visible under every rule, the boolean mask and -inf biases
 * included (DESIGN.md §5; 4·B·Hq·pairs·D when Dv = D).  A backward call
 * counts 2.5 times this.  Only shapes and options are read: the tensors'
 * data may be NULL.  Takes O(B·L) time, O(B·Hq·L·S) with a mask or bias. */
ATTN_API attn_status attn_sdpa_flops(const attn_tensor *q, const attn_tensor *k,
                                     const attn_tensor *v, const attn_sdpa_options *opt,
                                     double *flops);

/* The instruction set the flash kernel runs on in this process: "avx512",
 * "avx2" or "generic" (portable C).  Chosen once, at first use, from the
 * CPU's features; $ATTN_ARCH=generic|avx2|avx512 forces one (one the CPU
 * or build lacks falls back to the automatic choice), $ATTN_ARCH_DEBUG=1
 * prints the choice once to stderr.  Separately, $ATTN_KERNEL=ref (or its
 * older spelling $ATTN_ARCH=ref) sends every attention call, an explicit
 * flash request included, to the reference kernel, and every projection
 * (attn_linear_*, the module's) from the BLAS to its double loops: the
 * oracle is always one flag away, and attn_sdpa_kernel_name() then says
 * "ref". */
ATTN_API const char *attn_isa_name(void);

/* ---------------------------------------------------------------- gradients
 * Backward passes (docs/backward.md).  Every gradient has the shape of the
 * thing it differentiates, is WRITTEN (never accumulated into), and may be
 * NULL to skip it.  Gradients must not overlap any input (refused: above,
 * "outputs never share memory").  The results are
 * bit-identical for every thread count. */

/* Bytes of scratch attn_sdpa_backward needs for these shapes and options
 * (the kernel actually chosen for them); pass at least this much as
 * opt.workspace to avoid any allocation inside the call.  The tensors'
 * data may be NULL. */
ATTN_API attn_status attn_sdpa_backward_workspace_size(const attn_tensor *q, const attn_tensor *k,
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
 * (B*Hq*L*S*(D+Dv) < 65536) where it is faster; $ATTN_KERNEL=ref forces
 * the reference as in the forward.  Every tensor may be float32, float16 or
 * bfloat16 (gradients rounded once to their dtype); lse is float32. */
ATTN_API attn_status attn_sdpa_backward(const attn_tensor *q, const attn_tensor *k,
                                        const attn_tensor *v, const attn_sdpa_options *opt,
                                        const attn_tensor *out, const float *lse,
                                        const attn_tensor *dout, attn_tensor *dq, attn_tensor *dk,
                                        attn_tensor *dv);

/* The gradients of attn_sdpa_backward_grads, each NULL to skip it.
 * Initialise with ATTN_SDPA_GRADS_INIT, then set the ones you want.
 *   dq, dk, dv: as attn_sdpa_backward's
 *   dsinks [Hq]: dLoss/dsinks[h] = -sum over batches and rows of
 *                exp(sinks[h] - lse) * dot(dout, out); needs opt.sinks */
typedef struct attn_sdpa_grads {
    size_t struct_size; /* sizeof(attn_sdpa_grads), set by ATTN_SDPA_GRADS_INIT */
    attn_tensor *dq, *dk, *dv;
    float *dsinks;
} attn_sdpa_grads;

#define ATTN_SDPA_GRADS_INIT {.struct_size = sizeof(attn_sdpa_grads)}

/* attn_sdpa_backward with its gradients in one struct that can grow: the
 * same arguments, rules and results, plus the gradient of the sinks. */
ATTN_API attn_status attn_sdpa_backward_grads(const attn_tensor *q, const attn_tensor *k,
                                              const attn_tensor *v, const attn_sdpa_options *opt,
                                              const attn_tensor *out, const float *lse,
                                              const attn_tensor *dout, const attn_sdpa_grads *grads);

/* Name of the kernel attn_sdpa_backward would run ("ref", "flash"). */
ATTN_API const char *attn_sdpa_backward_kernel_name(const attn_tensor *q, const attn_tensor *k,
                                                    const attn_tensor *v,
                                                    const attn_sdpa_options *opt);

/* -------------------------------------------------- projections and heads */

/* y = x . w (+ b), the chapter's row convention.
 *   x: [rows, d_in]  w: [d_in, d_out]  b: [d_out] or NULL  y: [rows, d_out] */
ATTN_API attn_status attn_linear_forward(const float *x, int64_t rows, int64_t d_in,
                                         const float *w, const float *b, int64_t d_out, float *y);

/* y = x . w_t^T (+ b): the same product with the weights in PyTorch's and
 * GGUF's layout, each output's weights one row.
 *   x: [rows, d_in]  w_t: [d_out, d_in]  b: [d_out] or NULL  y: [rows, d_out]
 * Both run on the BLAS attn was built with (the reference, double sums,
 * without one or under $ATTN_KERNEL=ref), with bits that do not depend on
 * the thread count.  Neither allocates on the BLAS path. */
ATTN_API attn_status attn_linear_forward_transposed(const float *x, int64_t rows, int64_t d_in,
                                                    const float *w_t, const float *b, int64_t d_out,
                                                    float *y);

/* Gradient of attn_linear_forward (y = x . w + b):
 *   x: [rows, d_in]  w: [d_in, d_out]  dy: [rows, d_out]
 *   dx: [rows, d_in]  = dy . w^T           (or NULL)
 *   dw: [d_in, d_out] = x^T . dy           (or NULL)
 *   db: [d_out]       = sum over rows of dy (or NULL; whether or not b exists) */
ATTN_API attn_status attn_linear_backward(const float *x, int64_t rows, int64_t d_in,
                                          const float *w, int64_t d_out, const float *dy,
                                          float *dx, float *dw, float *db);

/* Multi-head attention as a module: projections, heads, concatenation and the
 * output projection.
 *   Q = X . wq + bq        wq: [d_model,   Hq  * D ]
 *   K = C . wk + bk        wk: [d_context, Hkv * D ]   C = X for self-attention
 *   V = C . wv + bv        wv: [d_context, Hkv * Dv]
 *   Z = concat_h sdpa(Q_h, K_{h/(Hq/Hkv)}, V_...)      [rows, Hq * Dv]
 *   out = Z . wo + bo      wo: [Hq * Dv, d_out], or NULL: out = Z
 * Initialise with ATTN_MHA_INIT, then set the sizes and weights.
 */
typedef struct attn_mha {
    size_t struct_size; /* sizeof(attn_mha), set by ATTN_MHA_INIT         */
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

#define ATTN_MHA_INIT {.struct_size = sizeof(attn_mha)}

/* x: [B, L, d_model]  context: [B, S, d_context] or NULL (self: S = L)
 * out: [B, L, d_out]  weights: [B, Hq, L, S] or NULL  lse: [B, Hq, L] or NULL
 * opt: masks and kernel for the attention step (NULL = defaults). */
ATTN_API attn_status attn_mha_forward(const attn_mha *m, const float *x, int64_t batch,
                                      int64_t len, const float *context, int64_t context_len,
                                      const attn_sdpa_options *opt, float *out, float *weights,
                                      float *lse);

/* Gradients of attn_mha_forward.  Each pointer may be NULL to skip it.
 *   dx        [B, L, d_model]    for self-attention this sums the Q, K and V paths
 *   dcontext  [B, S, d_context]  cross-attention only (must be NULL without context)
 *   dwq [d_model, Hq*D]  dwk [d_context, Hkv*D]  dwv [d_context, Hkv*Dv]
 *   dwo [Hq*Dv, d_out]   (only when the module has wo)
 *   dbq [Hq*D]  dbk [Hkv*D]  dbv [Hkv*Dv]  dbo [d_out]  (whether or not the module
 *   has the bias: the gradient at its current value, 0 when absent)
 * Initialise with ATTN_MHA_GRADS_INIT. */
typedef struct attn_mha_grads {
    size_t struct_size; /* sizeof(attn_mha_grads), set by ATTN_MHA_GRADS_INIT */
    float *dx, *dcontext;
    float *dwq, *dwk, *dwv, *dwo;
    float *dbq, *dbk, *dbv, *dbo;
} attn_mha_grads;

#define ATTN_MHA_GRADS_INIT {.struct_size = sizeof(attn_mha_grads)}

/* Backward of the module: takes the forward's arguments plus dout
 * [B, L, d_out] and RECOMPUTES the forward's intermediates (Q, K, V, the
 * attention output Z and its lse) instead of asking the caller to keep
 * them: one more forward's work, no state between the two calls.
 * Memory: Q, K, V, Z and their gradients, O(rows x width); never L x S.
 * opt.workspace is not used (the call makes two attention calls of
 * different needs). */
ATTN_API attn_status attn_mha_backward(const attn_mha *m, const float *x, int64_t batch,
                                       int64_t len, const float *context, int64_t context_len,
                                       const attn_sdpa_options *opt, const float *dout,
                                       const attn_mha_grads *grads);

#ifdef __cplusplus
}
#endif

#endif /* ATTN_H */
