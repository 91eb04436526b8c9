/*
 * problem.h — one attention call, validated once: the sizes, the options
 * with their defaults resolved, and the tensors, so that kernels never
 * re-check arguments.  attn__problem_init is the only place the arguments
 * of an attention call are validated.
 *
 * Shape legend: q [B, L, Hq, D]  k [B, S, Hkv, D]  v [B, S, Hkv, Dv]
 *               out [B, L, Hq, Dv]  weights [B, Hq, L, S]  lse [B, Hq, L]
 */
#ifndef ATTN_BASE_PROBLEM_H
#define ATTN_BASE_PROBLEM_H

#include "base/base.h"
#include "base/dtype.h"
#include "base/kv8.h"

/* Keys and values read through a block table (attn_kv_cache's paged pool,
 * src/cache): the problem's key j is sequence position first + j, which is
 * row (first + j) % block_rows of block table[(first + j) / block_rows];
 * block n of k starts k_block elements after block n - 1 (v_block for v),
 * at k.data for block 0, and within a block k's strides hold.  Only the
 * forward pass reads through one (attn__sdpa_forward_paged). */
typedef struct problem_pages {
    const int32_t *table;
    int64_t first, block_rows;
    int64_t k_block, v_block; /* elements */
} problem_pages;

/* Everything a kernel needs about one call. */
typedef struct sdpa_problem {
    int64_t batch, len_q, len_kv;     /* B, L, S                           */
    int64_t heads_q, heads_kv, group; /* Hq, Hkv, Hq / Hkv                 */
    int64_t dim, dim_v;               /* D, Dv (Dv = 0 when v is absent)   */
    float scale;
    int64_t diagonal_offset;          /* local key j is on query i's diagonal
                                         when j = i + diagonal_offset: 0 or
                                         S - L for a whole sequence, shifted
                                         by query_start - key_start        */
    int64_t total_len_kv;             /* S of the whole sequence           */
    attn_tensor q, k, v;
    attn_sdpa_options opt;            /* a copy, with defaults resolved     */
    const problem_pages *pages;       /* NULL: k and v are plain tensors    */
} sdpa_problem;

/* What attn__problem_init checks of the tensors. */
typedef enum problem_data {
    PROBLEM_WITH_DATA = 0, /* every tensor's data must be non-NULL          */
    PROBLEM_SHAPES_ONLY    /* data may be NULL: only shapes and options are
                              read (attn_sdpa_flops, workspace queries)     */
} problem_data;

/* Validates the inputs (and out, when not NULL; v may be NULL for score-only
 * calls) and fills p.  Every error names the argument at fault. */
attn_status attn__problem_init(sdpa_problem *p, const attn_tensor *q, const attn_tensor *k,
                               const attn_tensor *v, const attn_tensor *out,
                               const attn_sdpa_options *opt, problem_data data);

/* Refuses (ATTN_ERR_INVALID_ARGUMENT, naming both) outputs that share
 * memory with the call's inputs — q, k, v, the options' mask, bias,
 * key_lengths, sinks and alibi_slopes, and more_inputs — or with each
 * other; the options' workspace counts as an output (overlap.c, whose
 * header says what is compared).  p is an initialised problem. */
typedef struct mem_extent mem_extent;
attn_status attn__problem_check_outputs(const sdpa_problem *p, const mem_extent *outputs, int n_outputs,
                                        const mem_extent *more_inputs, int n_more);

/* The problem's diagonal_offset for a call of len_q query rows and len_kv
 * key rows placed by o's query_start, key_start, total_len_q and
 * total_len_kv (0: len_q and len_kv) with o's alignment, a placement
 * attn__problem_init accepts: the one place the diagonal is formed.
 * Inline: libattn_mpi places its pieces with it too. */
static inline int64_t problem_diagonal_offset(const attn_sdpa_options *o, int64_t len_q, int64_t len_kv) {
    const int64_t total_q = o->total_len_q ? o->total_len_q : len_q;
    const int64_t total_kv = o->total_len_kv ? o->total_len_kv : len_kv;
    /* Formed so that no step overflows: each parenthesis lies in
     * [0, INT64_MAX] (the placement checks of attn__problem_init), and so
     * does their difference's magnitude; any query's diagonal, i + offset,
     * then lies within the sequence's positions. */
    return o->align == ATTN_ALIGN_LOWER_RIGHT ? (total_kv - o->key_start) - (total_q - o->query_start)
                                              : o->query_start - o->key_start;
}

/* Checks one tensor argument: non-NULL (data too, with PROBLEM_WITH_DATA),
 * a tensor dtype, positive sizes, stride[3] == 1 and non-negative strides,
 * element offsets and byte sizes that fit in int64.  Messages name it. */
attn_status attn__tensor_check(const attn_tensor *t, const char *name, problem_data data);
/* The same, and the shape must be want (messages say "shaped like <like>"). */
attn_status attn__tensor_check_shape(const attn_tensor *t, const char *name, const int64_t want[4],
                                     const char *like);

/* ATTN_ERR_UNSUPPORTED, naming the tensor, unless q, k, v (and out, if not
 * NULL) all hold float32: what kernel (a name for the message) computes. */
attn_status attn__problem_require_f32(const sdpa_problem *p, const attn_tensor *out,
                                      const char *kernel);

/* ATTN_OK when v matches k in batch, positions and heads (what a value
 * tensor must share with its keys), else a shape error naming both.
 * Inline: libattn_mpi checks its local shards with it too. */
static inline attn_status problem_check_v_like_k(const attn_tensor *k, const attn_tensor *v) {
    if (v->shape[0] == k->shape[0] && v->shape[1] == k->shape[1] && v->shape[2] == k->shape[2])
        return ATTN_OK;
    return attn__fail(ATTN_ERR_SHAPE,
                      "v is [%lld, %lld, %lld, %lld] but k is [%lld, %lld, %lld, %lld]: v must match k in "
                      "batch, positions and heads",
                      (long long)v->shape[0], (long long)v->shape[1], (long long)v->shape[2],
                      (long long)v->shape[3], (long long)k->shape[0], (long long)k->shape[1],
                      (long long)k->shape[2], (long long)k->shape[3]);
}

/* Pointer to row (b, position, head) of a float32 tensor. */
static inline float *problem_row(const attn_tensor *t, int64_t b, int64_t pos, int64_t head) {
    return (float *)t->data + b * t->stride[0] + pos * t->stride[1] + head * t->stride[2];
}

/* ---- tensors of any dtype (ATTN_F32, ATTN_F16, ATTN_BF16) ----
 * Half-precision tensors are storage only: every kernel computes in float
 * (or double, the reference) and converts at the tile boundary.  These are
 * the scalar conversions, for the reference and the rare exact paths; the
 * flash loop nests convert whole rows with the ISA's widen / narrow
 * (src/isa/flash_table.h). */

/* Bytes of one element of t (4 or 2; 1 for the 8-bit block formats, whose
 * blocks add a scale: offsets go through problem_offset_bytes). */
static inline int64_t problem_elem_bytes(const attn_tensor *t) {
    if (dtype_is_kv8(t->dtype)) return 1;
    return t->dtype == ATTN_F32 ? (int64_t)sizeof(float) : (int64_t)sizeof(uint16_t);
}

/* Bytes from t's data to element offset `at` (for a block format a
 * multiple of 32: kv8.h). */
static inline int64_t problem_offset_bytes(const attn_tensor *t, int64_t at) {
    return dtype_is_kv8(t->dtype) ? kv8_offset_bytes(at) : at * problem_elem_bytes(t);
}

/* Row (b, position, head) of a tensor of any dtype, as bytes. */
static inline void *problem_row_any(const attn_tensor *t, int64_t b, int64_t pos, int64_t head) {
    const int64_t at = b * t->stride[0] + pos * t->stride[1] + head * t->stride[2];
    return (char *)t->data + problem_offset_bytes(t, at);
}

/* Row (b, position, head) of the problem's k or v (t is &p->k or &p->v),
 * through the block table when the problem has one.  Every read of a key or
 * value row goes through here (or problem_kv_run's runs). */
static inline const void *problem_kv_row(const sdpa_problem *p, const attn_tensor *t, int64_t b, int64_t pos,
                                         int64_t head) {
    if (!p->pages) return problem_row_any(t, b, pos, head);
    const problem_pages *pg = p->pages;
    const int64_t at = pg->first + pos, block = pg->table[at / pg->block_rows];
    const int64_t element = block * (t == &p->v ? pg->v_block : pg->k_block) + (at % pg->block_rows) * t->stride[1] +
                            head * t->stride[2];
    return (const char *)t->data + problem_offset_bytes(t, element);
}

/* Keys from position pos on that lie in one run of rows stride[1] apart
 * (problem_kv_row's, for the kernels that read K and V in place): up to
 * the end of pos's block, or all of them without a block table. */
static inline int64_t problem_kv_run(const sdpa_problem *p, int64_t pos) {
    if (!p->pages) return p->len_kv - pos;
    const int64_t at = p->pages->first + pos;
    return p->pages->block_rows - at % p->pages->block_rows;
}

/* Element d of a row of dtype `dtype`, exactly (every half is a float; an
 * 8-bit block format's value is d * code, kv8.h). */
static inline float problem_get(attn_dtype dtype, const void *row, int64_t d) {
    if (dtype_is_kv8(dtype)) return kv8_value(dtype, (const uint8_t *)row + kv8_offset_bytes(d), d % KV8_BLOCK);
    if (dtype == ATTN_F16) return dtype_f16_to_f32(((const uint16_t *)row)[d]);
    if (dtype == ATTN_BF16) return dtype_bf16_to_f32(((const uint16_t *)row)[d]);
    return ((const float *)row)[d];
}

/* Element d of a row of dtype `dtype` = x rounded once to nearest even. */
static inline void problem_set(attn_dtype dtype, void *row, int64_t d, double x) {
    if (dtype == ATTN_F16)
        ((uint16_t *)row)[d] = dtype_f64_to_f16(x);
    else if (dtype == ATTN_BF16)
        ((uint16_t *)row)[d] = dtype_f64_to_bf16(x);
    else
        ((float *)row)[d] = (float)x;
}

/* The gradients of one backward call, validated against the problem (each
 * may be NULL to skip it) plus the forward's results. */
typedef struct sdpa_backward_args {
    const attn_tensor *out;  /* [B, L, Hq, Dv] the forward's output          */
    const float *lse;        /* [B, Hq, L]     the forward's lse             */
    const attn_tensor *dout; /* [B, L, Hq, Dv]                               */
    attn_tensor *dq;         /* [B, L, Hq, D]  or NULL                       */
    attn_tensor *dk;         /* [B, S, Hkv, D] or NULL                       */
    attn_tensor *dv;         /* [B, S, Hkv, Dv] or NULL                      */
    float *dsinks;           /* [Hq] or NULL (only with opt.sinks)           */
} sdpa_backward_args;

#endif /* ATTN_BASE_PROBLEM_H */
