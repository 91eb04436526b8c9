/*
 * internal.h — what the library's modules share and users never see:
 * the error setter, the validated description of one attention problem, and
 * the visibility rules every kernel applies in the same way.
 *
 * Shape legend: q [B, L, Hq, D]  k [B, S, Hkv, D]  v [B, S, Hkv, Dv]
 *               out [B, L, Hq, Dv]  weights [B, Hq, L, S]  lse [B, Hq, L]
 */
#ifndef ATTN_INTERNAL_H
#define ATTN_INTERNAL_H

#include "attn.h"

#include <stdbool.h>

#if defined(__GNUC__)
#define ATTN_PRINTF(fmt_index, first_arg) __attribute__((format(printf, fmt_index, first_arg)))
#else
#define ATTN_PRINTF(fmt_index, first_arg)
#endif

/* Records status and a printf-style message for attn_last_error() and
 * returns status, so a failure reads `return attn_fail(ATTN_ERR_SHAPE, ...)`. */
attn_status attn_fail(attn_status status, const char *fmt, ...) ATTN_PRINTF(2, 3);

/* a * b into *out and false; true (and *out untouched) on overflow or a
 * negative input, so checks read `if (attn_mul_overflows(...)) fail`. */
bool attn_mul_overflows(int64_t a, int64_t b, int64_t *out);

/* Everything a kernel needs about one call, validated once by
 * attn_problem_init so that kernels never re-check arguments. */
typedef struct attn_problem {
    int64_t batch, len_q, len_kv;     /* B, L, S                           */
    int64_t heads_q, heads_kv, group; /* Hq, Hkv, Hq / Hkv                 */
    int64_t dim, dim_v;               /* D, Dv                             */
    float scale;
    int64_t diagonal_offset;          /* local key j is on query i's diagonal
                                         when j = i + diagonal_offset: 0 or
                                         S - L for a whole sequence, shifted
                                         by query_start - key_start        */
    int64_t total_len_kv;             /* S of the whole sequence           */
    attn_tensor q, k, v;
    attn_sdpa_options opt;            /* a copy, with defaults resolved     */
} attn_problem;

/* Validates the inputs (and out, when not NULL) and fills p.  Every error
 * names the argument at fault. */
attn_status attn_problem_init(attn_problem *p, const attn_tensor *q, const attn_tensor *k,
                              const attn_tensor *v, const attn_tensor *out,
                              const attn_sdpa_options *opt);

/* Pointer to row (b, position, head) of a tensor. */
static inline float *attn_row(const attn_tensor *t, int64_t b, int64_t pos, int64_t head) {
    return t->data + b * t->stride[0] + pos * t->stride[1] + head * t->stride[2];
}

/* The keys that the structural rules (causal, window, key lengths) leave
 * visible to query i of batch b form one contiguous range [*begin, *end),
 * possibly empty.  Kernels iterate over it and skip everything else; the
 * boolean mask and the bias are applied per element on top. */
void attn_problem_key_range(const attn_problem *p, int64_t b, int64_t i, int64_t *begin,
                            int64_t *end);

/* True when the mask (if any) allows (b, h, i, j); h is the query head. */
static inline bool attn_problem_mask_allows(const attn_problem *p, int64_t b, int64_t h,
                                            int64_t i, int64_t j) {
    const int64_t *s = p->opt.mask_shape;
    if (!p->opt.mask) return true;
    int64_t idx = (((s[0] > 1 ? b : 0) * s[1] + (s[1] > 1 ? h : 0)) * s[2] + (s[2] > 1 ? i : 0)) *
                      s[3] + (s[3] > 1 ? j : 0);
    return p->opt.mask[idx] != 0;
}

/* The bias (if any) at (b, h, i, j); 0 without a bias. */
static inline float attn_problem_bias_at(const attn_problem *p, int64_t b, int64_t h, int64_t i,
                                         int64_t j) {
    const int64_t *s = p->opt.bias_shape;
    if (!p->opt.bias) return 0.0f;
    int64_t idx = (((s[0] > 1 ? b : 0) * s[1] + (s[1] > 1 ? h : 0)) * s[2] + (s[2] > 1 ? i : 0)) *
                      s[3] + (s[3] > 1 ? j : 0);
    return p->opt.bias[idx];
}

/* Number of threads a kernel should use: opt->threads, else
 * $ATTN_NUM_THREADS, else OpenMP's default; 1 without OpenMP. */
int attn_resolve_threads(int requested);

/* The reference kernel (src/ref/): plain loops, double accumulation, the
 * score table materialised per (batch, head).  The oracle of every test. */
size_t attn_sdpa_ref_workspace_size(const attn_problem *p);
attn_status attn_sdpa_ref_forward(const attn_problem *p, void *workspace, attn_tensor *out,
                                  float *weights, float *lse);
/* scores: [B, Hq, L, S], scale * q.k + bias, -inf where hidden. */
attn_status attn_sdpa_ref_scores(const attn_problem *p, float *scores);

/* The size checks of the projections (forward and backward): positive
 * sizes, and products and byte sizes that fit; messages start with fn. */
attn_status attn_linear_check_sizes(const char *fn, int64_t rows, int64_t d_in, int64_t d_out);

/* Multi-head modules: attn_mha_resolve checks a module and fills in its
 * defaults (kv_heads = heads, value_dim = head_dim, d_context = d_model);
 * attn_mha_check_call does that and checks one call's arguments as well:
 * x [batch, len, d_model], *context (NULL: self-attention, replaced by x and
 * *context_len by len), and the row counts batch*len and batch*context_len.
 * Every entry point that takes a module validates through these. */
attn_status attn_mha_resolve(const attn_mha *m, attn_mha *resolved);
attn_status attn_mha_check_call(const attn_mha *module, attn_mha *resolved, const float *x,
                                int64_t batch, int64_t len, const float **context,
                                int64_t *context_len, int64_t *rows_q, int64_t *rows_kv);

/* The flash kernel (src/flash/): tiled online softmax with per-ISA
 * micro-kernels.  Extra memory: a few tiles per thread plus, for problems
 * split along the keys (decoding), the per-chunk partial states; never
 * anything of size L x S.  Outputs are bit-identical for every thread count. */
size_t attn_sdpa_flash_workspace_size(const attn_problem *p);
attn_status attn_sdpa_flash_forward(const attn_problem *p, void *workspace, attn_tensor *out,
                                    float *weights, float *lse);
/* True when $ATTN_ARCH=ref (or attn_dispatch_force("ref")) sends every call
 * to the reference kernel. */
bool attn_dispatch_uses_ref(void);
/* For tests: re-selects the instruction set of the flash kernel ("ref",
 * "generic", "avx2", "avx512"; NULL = the automatic choice and $ATTN_ARCH).
 * ATTN_ERR_UNSUPPORTED when this CPU or build lacks it.  Not thread-safe
 * against concurrent attention calls. */
attn_status attn_dispatch_force(const char *arch);

/* The gradients of one backward call, validated against the problem (each
 * may be NULL to skip it) plus the forward's results. */
typedef struct attn_backward_args {
    const attn_tensor *out;  /* [B, L, Hq, Dv] the forward's output          */
    const float *lse;        /* [B, Hq, L]     the forward's lse             */
    const attn_tensor *dout; /* [B, L, Hq, Dv]                               */
    attn_tensor *dq;         /* [B, L, Hq, D]  or NULL                       */
    attn_tensor *dk;         /* [B, S, Hkv, D] or NULL                       */
    attn_tensor *dv;         /* [B, S, Hkv, Dv] or NULL                      */
} attn_backward_args;

/* Reference backward (src/ref/): plain loops in double, the forward
 * recomputed and P materialised per (batch, head); out and lse unused. */
size_t attn_sdpa_ref_backward_workspace_size(const attn_problem *p);
attn_status attn_sdpa_ref_backward(const attn_problem *p, void *workspace,
                                   const attn_backward_args *a);

/* Flash backward (src/grad/): FlashAttention-2's recomputation on 128 x 64
 * tiles with per-ISA micro-kernels (the instruction set of the flash
 * forward); needs a->out and a->lse.  Workspace: a few tiles per thread,
 * the row sums dout.out [B, Hq, L] and one dq partial per key chunk of the
 * units in flight; never L x S.  Bit-identical for every thread count. */
size_t attn_sdpa_flash_backward_workspace_size(const attn_problem *p);
attn_status attn_sdpa_flash_backward(const attn_problem *p, void *workspace,
                                     const attn_backward_args *a);
/* For tests: caps the memory of the flash backward's dq partials (bytes <= 0:
 * the default, 256 MiB), so that small problems take the path of fewer key
 * chunks and several waves of units.  Not thread-safe against running calls. */
void attn_flash_backward_set_partial_budget(int64_t bytes);

/* Projection gradients (src/grad/linear_backward.c), sizes already checked.
 * dx [rows, d_in] = sum over the terms t of dy_t . w_t^T (w_t: [d_in,
 * d_out_t]), one double sum per element: the input gradient of a sequence
 * that feeds several projections (self-attention's Q, K and V). */
attn_status attn_linear_backward_input(int terms, const float *const dy[], const float *const w[],
                                       const int64_t d_out[], int64_t rows, int64_t d_in,
                                       float *dx);
/* dw [d_in, d_out] = x^T . dy and db [d_out] = column sums of dy (either NULL). */
attn_status attn_linear_backward_params(const float *x, int64_t rows, int64_t d_in,
                                        int64_t d_out, const float *dy, float *dw, float *db);

#endif /* ATTN_INTERNAL_H */
