/*
 * attn_model_interp.h — looking inside a whole decoder (libattn_model):
 * recording its hook points into an .npz cache, activation patching from a
 * second (source) run, zero and mean ablation of heads (the change of the
 * next-token distribution: attn_logits_kl in attn_interp.h), the path
 * decomposition of every head (the chapter's Figure 2, attn_sdpa_paths on
 * each layer), the null-space search on a real head's weight row,
 * attn_analysis.h's value-weighted norms, rollout and flow on a run, and
 * the logit lens, direct logit attribution and attribution patching.  All
 * of it runs through the decoder's tensor hook (attn_decoder.h), under the
 * one hook vocabulary of attn_interp.h (TransformerLens's names).
 * `attn model trace`, `attn report --model`, `attn map --model` and `attn
 * demo --model` are these functions and their printing; Python's
 * attn.Model lists and parses its hook names with them (docs/model-trace.md
 * has the table of where each analysis lives).
 *
 * Shape legend:
 *   L     the target's tokens (the run patches are applied to)
 *   S     the source's tokens (the run patches copy from)
 *   N     layers     d  d_model     V  vocabulary
 *   Hq    query heads   Hkv  key/value heads   Dh  head width
 *   hook tensors as attn_decoder.h lists them:
 *     [L, d]        hook_embed, resid_*, attn_out, mlp_out, ln_final   (ROWS)
 *     [L, H, Dh]    q, k, v, rot_q, rot_k, z                           (HEADS)
 *     [H, L, L]     attn_scores, pattern  <- heads first               (HEADS_FIRST)
 *
 * Positions: p >= 0 is index p in both runs; p < 0 counts from the end of
 * each (-1: the last token of the target and the last of the source), so
 * that 苹果 at the end of two sentences of different lengths is "-1".
 *
 * Errors: every function that can fail returns an attn_status and leaves
 * the reason in attn_last_error(); none prints.  Threads: these functions
 * only read the decoder (attn_decoder_forward's rule): several may run on
 * one decoder at once, each with its own records and caches.
 */
#ifndef ATTN_MODEL_INTERP_H
#define ATTN_MODEL_INTERP_H

#include "attn_decoder.h"
#include "attn_interp.h"
#include "attn_npz.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------ a model's hook names
 *
 * The names a decoder of N layers shows, in the order a forward reaches
 * them: hook_embed, then for each layer its 24, blocks.L.hook_resid_pre ..
 * blocks.L.hook_resid_post in the order of attn_decoder.h's table, then
 * ln_final.hook_scale and ln_final.hook_normalized: 24 N + 3 names.
 */
ATTN_API int64_t attn_model_hook_count(int64_t n_layers);

/* The index-th of those names as its point and layer (-1 for the three
 * without one); ATTN_ERR_INVALID_ARGUMENT outside [0, count).  Its text:
 * attn_decoder_hook_name. */
ATTN_API attn_status attn_model_hook_at(int64_t n_layers, int64_t index, attn_decoder_hook_point *point,
                                        int64_t *layer);

/* The names of a model of n_layers layers that a glob pattern matches
 * (fnmatch: "blocks.*.attn.hook_pattern", "blocks.1[0-3].*", "hook_embed"):
 * their number into *count and the bit (1u << point) of each point they
 * name into *points (either may be NULL).  No match is not an error. */
ATTN_API attn_status attn_model_hooks_matching(int64_t n_layers, const char *pattern, uint32_t *points,
                                               int64_t *count);

/* ------------------------------------------------- patches and ablations
 *
 * A patch writes rows of one hook point during a forward; everything
 * computed after it sees the new values (attn_decoder.h: a written pattern
 * makes z = pattern . v with the run's own v, a written score table the
 * pattern softmax(scores)).  A row is one position's [d] (ROWS), one
 * position and head's [Dh] (HEADS), or one head and query's keys [L]
 * (HEADS_FIRST: heads select the first axis).
 *
 *   kind                  each selected row becomes
 *   ATTN_MODEL_PATCH_SOURCE   the source run's row at the source position
 *                         (activation patching; the source recorded first,
 *                         attn_model_record_new)
 *   ATTN_MODEL_ABLATE_ZERO    0
 *   ATTN_MODEL_ABLATE_MEAN    the head's mean over every position of this
 *                         run, taken before any row of it is written (not
 *                         on scores or pattern: their rows are per query)
 *
 * Patches run in array order at each hook.  Positions select in both runs
 * (legend); every position (n_positions 0) of a SOURCE patch needs runs of
 * one length.  Patterns and scores are [Hq, L, L]: patch them between texts
 * of one length.
 */
typedef enum attn_model_patch_kind {
    ATTN_MODEL_PATCH_SOURCE = 0,
    ATTN_MODEL_ABLATE_ZERO = 1,
    ATTN_MODEL_ABLATE_MEAN = 2
} attn_model_patch_kind;

typedef struct attn_model_patch {
    attn_model_patch_kind kind;
    attn_decoder_hook_point point;  /* a point with a layer: not hook_embed or
                                       ln_final.hook_normalized              */
    int64_t layer;                  /* 0 .. N-1, or ATTN_ALL (-1): every layer
                                       (one at a time with a sweep, below)   */
    const int64_t *positions;       /* [n_positions], legend's rule           */
    int64_t n_positions;            /* 0: every position                      */
    const int64_t *heads;           /* [n_heads] (HEADS and HEADS_FIRST only) */
    int64_t n_heads;                /* 0: every head                          */
} attn_model_patch;

/* The rows of a source run that patches copy (opaque): every tensor the
 * SOURCE patches name, at every layer for a patch of ATTN_ALL. */
typedef struct attn_model_record attn_model_record;

/* Runs ids [S] (the source) and keeps the tensors the SOURCE patches among
 * patches[n_patches] name (the others are ignored).  *out: free with
 * attn_model_record_free. */
ATTN_API attn_status attn_model_record_new(const attn_decoder *m, const int32_t *ids, int64_t S,
                                              const attn_model_patch *patches, int n_patches,
                                              attn_model_record **out);
ATTN_API void attn_model_record_free(attn_model_record *r); /* NULL is allowed */
/* The source's length S. */
ATTN_API int64_t attn_model_record_length(const attn_model_record *r);

/* What attn_model_run does besides the forward; initialise with
 * ATTN_MODEL_RUN_OPTIONS_INIT (no patches, no sweep, no cache). */
typedef struct attn_model_run_options {
    size_t struct_size;
    const attn_model_patch *patches;  /* [n_patches], or NULL                  */
    int n_patches;
    int64_t sweep_layer;              /* -1: a patch of ATTN_ALL applies at every
                                         layer; L >= 0: at layer L alone      */
    const attn_model_record *source;  /* for SOURCE patches, else NULL         */
    attn_npz_writer *cache;           /* every hook whose full name matches one
                                         of patterns is added (after the patches
                                         at it: the values the pass used); NULL:
                                         none recorded                        */
    const char *const *patterns;      /* [n_patterns] fnmatch globs            */
    int n_patterns;
    int64_t *recorded;                /* += arrays added to cache, or NULL     */
} attn_model_run_options;

#define ATTN_MODEL_RUN_OPTIONS_INIT {.struct_size = sizeof(attn_model_run_options), .sweep_layer = -1}

/* A forward over ids [L] with opt's patches, recording and sweep; the last
 * position's logits [V] into logits.  Patches are checked first (the point,
 * the layer, heads only where the layout has them, mean ablation not on a
 * heads-first point, a source for SOURCE patches), positions and heads
 * against each tensor as it comes; every message names the patch.  opt
 * NULL: a plain forward. */
ATTN_API attn_status attn_model_run(const attn_decoder *m, const int32_t *ids, int64_t L,
                                    const attn_model_run_options *opt, float *logits);

/* ------------------------------------------------------ the residual stream */

/* The cosine, row by row, of two residual streams at one position each:
 *   hidden_a [rows, len_a, d], hidden_b [rows, len_b, d] (attn_decoder_outputs'
 *   hidden: rows = N + 1, row 0 the embeddings, row l + 1 after layer l)
 *   pos_a, pos_b: the positions compared (legend's rule for negative ones)
 *   cosine: [rows], in double; 0 where either row is all zero
 * The chapter's two 苹果: the same embedding (cosine 1), pulled apart layer
 * by layer. */
ATTN_API attn_status attn_model_stream_cosine(const float *hidden_a, int64_t len_a, int64_t pos_a,
                                              const float *hidden_b, int64_t len_b, int64_t pos_b, int64_t rows,
                                              int64_t d, double *cosine);

/* Which keys each query may read in a layer's attention, as the decoder's
 * forward decides it: causal, and on a sliding-window layer
 * (attn_decoder_layer_is_local) the last sliding_window keys only.
 *   visible: [L, L], 1 = query i may read key j */
ATTN_API attn_status attn_model_layer_visible(const attn_decoder_config *cfg, int64_t layer, int64_t L,
                                              uint8_t *visible);

/* ------------------------------------------- paths and the null space */

/* The path decomposition of every head of every layer (attn_sdpa_paths),
 * for a base and a changed text of one length: at each layer, the base
 * run's queries (after RoPE) held fixed, the keys, the values or both taken
 * from the changed run's same layer, with the layer's own mask (causal, its
 * sliding window).  Each layer is decomposed on its own, from the two clean
 * runs' inputs to it (a change does not propagate to later layers here).
 * each(user, layer, paths) gets layer 0, 1, ... in turn, its attn_paths of
 * batch 1 (z [1, L, Hq, Dh], patterns [1, Hq, L, L]); it may take buffers
 * out of paths (setting the pointers NULL: they are then its own, to free
 * with attn_paths_free); the rest is freed after the call.  A status other
 * than ATTN_OK from each (its message set with attn_set_error) stops the
 * walk and is returned. */
typedef attn_status (*attn_model_layer_paths_fn)(void *user, int64_t layer, attn_paths *paths);

ATTN_API attn_status attn_model_paths_each(const attn_decoder *m, const int32_t *base, const int32_t *changed,
                                           int64_t L, attn_model_layer_paths_fn each, void *user);

/* attn_model_paths_each reduced at one position pos (legend's rule) of the
 * base run: per head, the L2 norms of
 *   weight       z(K only) - z(base)    the weights moved, the content kept
 *   content      z(V only) - z(base)    the content moved, the weights kept
 *   interaction  both - K only - V only + base
 *   changed      z(changed run) - z(base)
 *   base         z(base) itself, for scale
 *   out: [N, Hq] */
typedef struct attn_model_head_paths {
    double weight, content, interaction, changed, base;
} attn_model_head_paths;

ATTN_API attn_status attn_model_paths(const attn_decoder *m, const int32_t *base, const int32_t *changed, int64_t L,
                                      int64_t pos, attn_model_head_paths *out);

/* "Not an explanation", on a real head: the weight row of head `head` of
 * layer `layer` at query position pos (legend's rule) and the v rows of its
 * kv head (width Dh), through attn_nullspace_search over the keys the
 * query may read (attn_model_layer_visible) with opt (NULL: the defaults).
 *   weights: [L] the row    moved: [L] the row found    result: the search's */
ATTN_API attn_status attn_model_nullspace(const attn_decoder *m, const int32_t *ids, int64_t L, int64_t layer,
                                          int64_t head, int64_t pos, const attn_nullspace_options *opt,
                                          float *weights, double *moved, attn_nullspace_result *result);

/* ------------------------------------------- analyses (attn_analysis.h) */

/* Kobayashi et al.'s value-weighted norms of layer `layer` over ids [L]:
 * norms [Hq, L, L] = ||pattern[h, i, j] * v_j W_O^h|| (with_wo 0: of
 * alpha * v_j alone), v the run's hook_v (kv head h / (Hq / Hkv)), W_O the
 * layer's output projection as stored, dequantized.  pattern [Hq, L, L]:
 * the run's weights, for printing beside the norms, or NULL.  layer
 * ATTN_ALL: every layer from one forward, norms and pattern [N, Hq, L, L].  On Gemma the
 * output projection is followed by an RMSNorm (post_attention_norm): the
 * norms are of each head's share before it, where the sum over heads and
 * keys is still linear. */
ATTN_API attn_status attn_model_value_norms(const attn_decoder *m, const int32_t *ids, int64_t L, int64_t layer,
                                            int with_wo, float *pattern, float *norms);

/* Attention rollout over every layer of a run over ids [L]
 * (attn_attention_rollout on its N patterns; head ATTN_ALL: their mean,
 * residual 0.5: Abnar & Zuidema's).  rollout [N, L, L]: row i of layer l is
 * how much of each input token reaches position i after layer l. */
ATTN_API attn_status attn_model_rollout(const attn_decoder *m, const int32_t *ids, int64_t L, int64_t head,
                                        double residual, double *rollout);

/* Attention flow into position `position` (the legend's rule) after the
 * last layer (attn_attention_flow on the run's N patterns): flow [L].
 * (N + 1) L nodes at most ATTN_ATTENTION_FLOW_MAX_NODES (the run is made
 * first: the refusal comes after it). */
ATTN_API attn_status attn_model_flow(const attn_decoder *m, const int32_t *ids, int64_t L, int64_t head,
                                     double residual, int64_t position, double *flow);

/* ------------------------------------- the logit lens and logit attribution */

/* The logit lens at position pos (the legend's rule): the residual stream
 * after each layer read as if it were the last, through the final RMSNorm
 * (its own scale per row) and the unembedding, with the forward's own
 * kernels.  logits [N + 1, V]: row 0 the embeddings (resid_pre of layer
 * 0), row l + 1 after layer l; row N is the model's own logits there. */
ATTN_API attn_status attn_model_logit_lens(const attn_decoder *m, const int32_t *ids, int64_t L, int64_t pos,
                                           float *logits);

/* Direct logit attribution at position pos: each component's share of
 * logit[token] - logit[other] (other -1: of logit[token] alone), the
 * component dotted with the final norm's weight times W_U's rows, scaled
 * by the final stream's 1 / rms (frozen, TransformerLens's logit_attrs):
 *   embed        the embeddings                              (scalar)
 *   attn, mlp    each layer's hook_attn_out, hook_mlp_out     [N]
 *   heads        each head's z_h . W_O^h, or NULL              [N, Hq]
 * embed + sum(attn) + sum(mlp) is the logit (difference), and a layer's
 * heads add up to its attn, up to rounding: on Gemma 3, whose attn_out is
 * an RMSNorm of the heads' sum (post_attention_norm), that norm's scale is
 * frozen too (its weight / rms of the sum at pos). */
ATTN_API attn_status attn_model_logit_attribution(const attn_decoder *m, const int32_t *ids, int64_t L, int64_t pos,
                                                  int64_t token, int64_t other, double *embed, double *attn,
                                                  double *mlp, double *heads);

/* ------------------------------------------------- attribution patching */

/* Attribution patching (Nanda 2023): the linear estimate, from one forward
 * and backward of the clean run and one forward of the corrupted run, of
 * what patching the corrupted run's activation into the clean run at one
 * hook point does to the metric
 *     f = logit[token] - logit[other]  (other -1: logit[token] alone)
 * at the clean run's last position:
 *     estimate[l, k, h] = sum_e (corrupted - clean)[pos_k, h, e] * df/dclean[pos_k, h, e]
 * for every layer l (one row for hook_embed and the ln_final points),
 * every position k of positions [count] (the legend's rule: negative counts
 * from the end of each run, so runs of different lengths compare their last
 * tokens; count 0: every position, runs of one length) and every head h of
 * a HEADS point (q, k, v, rot_q, rot_k: their own heads; z, result: Hq;
 * heads 1 for the others).  point: one whose first axis is the position
 * (not attn_scores or pattern, whose rows are per query and key; not
 * hook_q/k/v_input, which attn_decoder_backward does not differentiate).
 *   estimate  [rows, count (or L), heads] double, rows = N or 1
 *   metric    [2] or NULL: f of the clean and of the corrupted run, so that
 *             a caller can set the estimates beside the whole change
 * The exact effect of one patch is attn_model_run with an
 * ATTN_MODEL_PATCH_SOURCE patch and sweep_layer (attn model trace
 * --attribute --check prints both). */
ATTN_API attn_status attn_model_attribution_patching(const attn_decoder *m, const int32_t *clean, int64_t clean_len,
                                                     const int32_t *corrupted, int64_t corrupted_len,
                                                     attn_decoder_hook_point point, const int64_t *positions,
                                                     int64_t count, int64_t token, int64_t other, double *estimate,
                                                     double *metric);

/* The heads axis attn_model_attribution_patching gives point on m: the
 * point's heads for a HEADS point, else 1. */
ATTN_API int64_t attn_model_attribution_heads(const attn_decoder *m, attn_decoder_hook_point point);

#ifdef __cplusplus
}
#endif

#endif /* ATTN_MODEL_INTERP_H */
