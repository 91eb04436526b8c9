/*
 * mha.h — the multi-head module's one pass (mha.c), which attn_mha_forward,
 * the traced forwards (src/interp/traced.c) and the backward's recompute
 * (mha_backward.c) all run, so that their results are the same to the bit
 * by construction.
 *
 * Shape legend:
 *   x [B, L, d_model]   context [B, S, d_context] (= x for self-attention)
 *   Q [B, L, Hq, D]  K [B, S, Hkv, D]  V [B, S, Hkv, Dv]  (the trace's q, k, v)
 *   scores, pattern [B, Hq, L, S]  Z [B, L, Hq, Dv] = [B, L, Hq*Dv]
 *   result [B, L, Hq, d_out]  out [B, L, d_out]
 */
#ifndef ATTN_API_MHA_H
#define ATTN_API_MHA_H

#include "attn_interp.h" /* attn_trace: the buffers of a pass */

#include "base/base.h"

/* One call of the module, validated, with its defaults resolved. */
typedef struct mha_call {
    attn_mha m;                 /* kv_heads, value_dim, d_context filled in */
    const float *x, *context;   /* context = x for self-attention           */
    int64_t batch, len, context_len;
    int64_t rows_q, rows_kv;    /* batch * len, batch * context_len         */
    bool self;                  /* no context was given                     */
} mha_call;

/* Checks a module and fills in its defaults (kv_heads = heads, value_dim =
 * head_dim, d_context = d_model); reads the caller's struct by its
 * struct_size. */
attn_status attn__mha_resolve(const attn_mha *m, attn_mha *resolved);

/* attn__mha_resolve, then one call's arguments: x [batch, len, d_model],
 * context (NULL: self-attention), the row counts. */
attn_status attn__mha_call_init(mha_call *c, const attn_mha *m, const float *x, int64_t batch,
                                int64_t len, const float *context, int64_t context_len);

/* The call's inputs as extents (overlap.h) into e, at most MHA_INPUT_EXTENTS:
 * x, context, the module's weights and biases, and the arrays of opt (the
 * caller's options, or NULL).  Returns how many. */
#define MHA_INPUT_EXTENTS (10 + OPTION_ARRAYS_MAX) /* OPTION_ARRAYS_MAX: base/overlap.h */
typedef struct mem_extent mem_extent;
int attn__mha_input_extents(const mha_call *c, const attn_sdpa_options *opt, mem_extent *e);

/* Sets t's sizes for call c (d_out 0 when c is NULL: bare attention). */
void attn__mha_trace_sizes(attn_trace *t, const mha_call *c);

/* What the traced forwards do between the steps of the pass (NULL: nothing). */
typedef struct mha_hooks {
    void *ctx;
    /* t's q, k and v are filled; may change them (q/k/v patches). */
    attn_status (*before_attention)(void *ctx, attn_trace *t);
    /* t's scores (when recorded), pattern (when recorded) and z are filled;
     * may change the pattern (and z with it) and z. */
    attn_status (*after_attention)(void *ctx, attn_trace *t);
} mha_hooks;

/* The pass, into the buffers of t:
 *   with c:   Q = X·W_Q + b_Q, K = C·W_K + b_K, V = C·W_V + b_V into t->q, k, v;
 *   without:  t->q, k, v already hold bare attention's inputs;
 *   then      before_attention, scores into t->scores (when not NULL),
 *             attention into t->z (weights into t->pattern, lse into lse,
 *             when not NULL), after_attention;
 *   with c and t->attn_out:  each head through its slice of W_O into
 *             t->result (when not NULL), then out = Z·W_O + b_O (or Z + b_O
 *             without W_O) into t->attn_out, which may be t->z itself.
 * t's sizes must be those of attn__mha_trace_sizes. */
attn_status attn__mha_pass(const mha_call *c, attn_trace *t, const attn_sdpa_options *opt,
                           const mha_hooks *hooks, float *lse);

/* Allocates rows * width floats into *out, checking the product; messages
 * say what (for which fn). */
attn_status attn__alloc_floats(float **out, int64_t rows, int64_t width, const char *fn,
                               const char *what);

#endif /* ATTN_API_MHA_H */
