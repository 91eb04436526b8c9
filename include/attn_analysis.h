/*
 * attn_analysis.h — analyses over attention maps that go beyond reading the
 * weights (the chapter's §8: a map is not an explanation, the output also
 * depends on V, W_O, other heads and later layers):
 *
 *   value-weighted norms   ||alpha_ij * v_j W_O^h||, per head and cell
 *                          (Kobayashi et al., EMNLP 2020, "Attention is Not
 *                          Only a Weight: Analyzing Transformers with
 *                          Vector Norms")
 *   attention rollout      the product of the layers' maps, the residual
 *                          added as Abnar & Zuidema (ACL 2020, "Quantifying
 *                          Attention Flow in Transformers") define it
 *   attention flow         the max-flow from each input token to an output
 *                          position through the layers' maps (same paper)
 *
 * They read tensors, not a model: attn_model_interp.h records a decoder's
 * patterns, values and W_O and calls these (attn_model_value_norms,
 * attn_model_rollout); docs/interpretability.md says what each can and
 * cannot show.
 *
 * Shape legend:
 *   N     layers      Hq  query heads    Hkv  key/value heads (Hq % Hkv == 0)
 *   L     queries     S   keys           Dh   head width     d  model width
 *   pattern  [Hq, L, S]   <- heads first (hook_pattern's layout)
 *   v        [S, Hkv, Dh] (hook_v's layout; query head h reads kv head
 *                          h / (Hq / Hkv), DESIGN.md's GQA rule)
 *   wo       [Hq, Dh, d]  W_O per head, the row convention: head h's output
 *                          is z_h . wo[h] ([Hq * Dh, d] is the same memory)
 *   patterns [N, Hq, L, L] one map per layer, queries and keys the same tokens
 *
 * Errors: each function returns an attn_status and leaves the reason in
 * attn_last_error(); none prints, none keeps state.  Results depend only on
 * the inputs (no threads, fixed summation order).
 */
#ifndef ATTN_ANALYSIS_H
#define ATTN_ANALYSIS_H

#include "attn.h"
#include "attn_interp.h" /* ATTN_ALL */

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------- value-weighted norms
 *
 * norms[h, i, j] = || pattern[h, i, j] * (v[j, h / (Hq / Hkv)] . wo[h]) ||_2
 * <- heads first, like the pattern.  wo NULL: the norm of alpha * v_j
 * itself (the value path without the output projection; d is ignored).
 *
 * Kobayashi et al.'s point: head h's output at query i is
 * sum_j alpha_ij f(v_j) with f(v) = v W_O^h, so a large weight on a vector
 * f(v_j) of small norm contributes little; the norms show what the weights
 * hide.  What they do not show: the norm of the sum is not the sum of the
 * norms (vectors may cancel), and they say nothing about later layers.
 * With every v_j equal (the chapter's exercise 3) each norm is alpha_ij
 * times one constant: they move exactly as the weights do, while the
 * head's output, sum_j alpha_ij f(v), does not move at all.
 *
 * Internally each ||f(v_j)|| for head h is computed once (Hq * S vectors),
 * then scaled by |alpha| (norms are homogeneous): Hq * S * Dh * d work
 * instead of Hq * L * S * Dh * d.  Sums in double, stored in float. */
ATTN_API attn_status attn_value_weighted_norms(const float *pattern, int64_t Hq, int64_t L, int64_t S,
                                               const float *v, int64_t Hkv, int64_t Dh, const float *wo, int64_t d,
                                               float *norms);

/* The reference twin, same signature and result: every cell's vector
 * alpha_ij * v_j W_O^h formed and its norm taken, one cell at a time (the
 * definition as written; tests hold the fast path to it). */
ATTN_API attn_status attn_value_weighted_norms_ref(const float *pattern, int64_t Hq, int64_t L, int64_t S,
                                                   const float *v, int64_t Hkv, int64_t Dh, const float *wo,
                                                   int64_t d, float *norms);

/* ---------------------------------------------------- rollout and flow
 *
 * Abnar & Zuidema's graph: the attention of layer l is a matrix A_l [L, L]
 * (row: a query, the token at layer l + 1; column: a key, the token at
 * layer l), either the average of the Hq heads' maps (head ATTN_ALL, -1,
 * as the paper does; under GQA the query heads are averaged, each counted
 * once) or one query head's map in every layer (head >= 0).  The residual
 * connection is accounted as they define it:
 *     Ahat_l = (1 - residual) * A_l + residual * I,  rows renormalised
 * (residual 0.5 is the paper's; 0 is the bare maps).  A row of A_l that is
 * all zero (a fully masked query) keeps its residual share, renormalised
 * to the identity's row.
 */

/* Attention rollout: rollout[l] = Ahat_l . Ahat_{l-1} ... Ahat_0, for every
 * l, so rollout[N - 1][i, j] is how much of input token j reaches position
 * i at the top (rows sum to 1).  patterns [N, Hq, L, L]  rollout [N, L, L],
 * in double. */
ATTN_API attn_status attn_attention_rollout(const float *patterns, int64_t N, int64_t Hq, int64_t L, int64_t head,
                                            double residual, double *rollout);

/* The largest graph attn_attention_flow accepts: (N + 1) * L nodes.  Each
 * of the L max-flows walks the N * L^2 edges once per augmenting path
 * (Edmonds-Karp); beyond this count that is minutes, not seconds. */
#define ATTN_ATTENTION_FLOW_MAX_NODES 4096

/* Attention flow: the layered graph with a node per (layer boundary
 * 0 .. N, token) and an edge from (l, j) to (l + 1, i) of capacity
 * Ahat_l[i, j]; flow[j] = the maximum flow from input node (0, j) to the
 * output node (N, position) (position < 0 counts from the end).  Each
 * value lies in [0, 1]: a flow never exceeds any cut, in particular the
 * output node's incoming capacity (its row of Ahat, which sums to 1).
 * Unlike rollout, flows of different inputs are separate problems and do
 * not sum to 1.  More than ATTN_ATTENTION_FLOW_MAX_NODES nodes:
 * ATTN_ERR_INVALID_ARGUMENT saying so.  flow: [L], in double. */
ATTN_API attn_status attn_attention_flow(const float *patterns, int64_t N, int64_t Hq, int64_t L, int64_t head,
                                         double residual, int64_t position, double *flow);

#ifdef __cplusplus
}
#endif

#endif /* ATTN_ANALYSIS_H */
