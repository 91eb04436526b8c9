/*
 * ref.h — the reference kernels (sdpa_ref.c): plain loops, double
 * accumulation, the score table of one (batch, head) materialised.  They
 * are the oracle every fast kernel is tested against, and are themselves
 * tested against independent numbers (the chapter, finite differences, an
 * independently structured oracle).
 *
 * Shape legend: q [B, L, Hq, D]  k [B, S, Hkv, D]  v [B, S, Hkv, Dv]
 *               out [B, L, Hq, Dv]  weights, scores [B, Hq, L, S]  lse [B, Hq, L]
 */
#ifndef ATTN_REF_H
#define ATTN_REF_H

#include "base/problem.h"

/* Workspaces hold doubles: callers' workspaces must be 8-byte aligned, and
 * the front doors check it. */
size_t attn__ref_forward_workspace_size(const sdpa_problem *p);
attn_status attn__ref_forward(const sdpa_problem *p, void *workspace, attn_tensor *out,
                              float *weights, float *lse);
/* scores: [B, Hq, L, S], scale * q.k + bias, -inf where hidden. */
attn_status attn__ref_scores(const sdpa_problem *p, float *scores);

/* The backward recomputes the forward in double and materialises P per
 * (batch, head); a->out and a->lse are not used. */
size_t attn__ref_backward_workspace_size(const sdpa_problem *p);
attn_status attn__ref_backward(const sdpa_problem *p, void *workspace, const sdpa_backward_args *a);

#endif /* ATTN_REF_H */
