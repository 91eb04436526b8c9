/*
 * ref.h — the reference kernels (sdpa_ref.c): plain loops, double
 * accumulation, one query row at a time.  They are the oracle every fast
 * kernel is tested against, and are themselves tested against independent
 * numbers (the chapter, finite differences, an independently structured
 * oracle).  Their row routines are also the fast kernels' exact path for
 * the rows fp32 cannot compute (docs/semantics.md, "Numbers and errors").
 *
 * Shape legend: q [B, L, Hq, D]  k [B, S, Hkv, D]  v [B, S, Hkv, Dv]
 *               out [B, L, Hq, Dv]  weights, scores [B, Hq, L, S]  lse [B, Hq, L]
 */
#ifndef ATTN_REF_H
#define ATTN_REF_H

#include "base/problem.h"
#include "base/progress.h"

/* Workspaces hold doubles: callers' workspaces must be 8-byte aligned, and
 * the front doors check it.  The forward's is S + Dv doubles. */
size_t attn__ref_forward_workspace_size(const sdpa_problem *p);
attn_status attn__ref_forward(const sdpa_problem *p, void *workspace, attn_tensor *out,
                              float *weights, float *lse);
/* scores: [B, Hq, L, S], softcap(scale * q.k) + bias + ALiBi, -inf where hidden. */
attn_status attn__ref_scores(const sdpa_problem *p, float *scores);

/* The forward of one query row (b, h, i), in double, by every rule of
 * docs/semantics.md: writes row (b, i, h) of out [Dv] (in out's dtype,
 * rounded once), and weights_row [S] and *lse when
 * they are not NULL.  scores: room for S doubles, or NULL to recompute the
 * scores in each pass over the keys (the fast kernels' exact path, whose
 * memory must not grow with S); acc: Dv doubles.  The same bits either way. */
void attn__ref_forward_row(const sdpa_problem *p, int64_t b, int64_t h, int64_t i, double *scores,
                           double *acc, attn_tensor *out, float *weights_row, float *lse);

/* softcap(scale · q_i·k_j) + bias_ij + ALiBi (logits.h) in double, for a
 * key j that row (b, h, i) sees: the reference's score, for the fast
 * kernels' exact paths. */
double attn__ref_score(const sdpa_problem *p, int64_t b, int64_t h, int64_t i, int64_t j);
/* softcap'(scale · q_i·k_j) = 1 − tanh² (logits.h; 1 without a cap): the
 * factor of the score's gradient, for the same keys. */
double attn__ref_softcap_slope(const sdpa_problem *p, int64_t b, int64_t h, int64_t i, int64_t j);

/* The backward recomputes the forward in double, one query row at a time;
 * a->out and a->lse are not used. */
size_t attn__ref_backward_workspace_size(const sdpa_problem *p);
attn_status attn__ref_backward(const sdpa_problem *p, void *workspace, const sdpa_backward_args *a);

/* The backward of kv head g of batch b (workspace: as attn__ref_backward's).
 * only == NULL: every query row of its group, and dk, dv of the head are
 * written.  Otherwise only the rows with only[(h - g·G)·L + i] set (the
 * fast kernel's exact path for rows it could not compute in fp32): their
 * dq rows are written, and their contributions are added in double to what
 * a->dk and a->dv hold, rounded once.  meter (or NULL) counts each row.
 * dsinks [Hq] (or NULL): each row's share of the sinks' gradient is added
 * to its head's element (a->dsinks is not written). */
void attn__ref_backward_unit(const sdpa_problem *p, int64_t b, int64_t g, void *workspace,
                             const sdpa_backward_args *a, const uint8_t *only, progress_meter *meter,
                             double *dsinks);

#endif /* ATTN_REF_H */
