/*
 * model_trace.h — the work of `attn model trace` (cmd_model_trace.c prints
 * it): recording a decoder's hook points into an .npz cache, activation
 * patching from a source run, zero and mean ablation of heads, and the
 * change of the next-token distribution (KL, logit difference).  Built on
 * the decoder's tensor hook (attn_decoder.h) alone; kept apart from the
 * printing so that tests/model/test_model_trace.c checks these very
 * functions.
 *
 * Shape legend: L the target's tokens, S the source's, V vocabulary;
 * hook tensors as attn_decoder.h lists them ([L, d], [L, H, Dh], [H, L, L]).
 * Positions: p >= 0 is index p in both runs; p < 0 counts from the end in
 * each (-1: the last token of the target and the last of the source), so
 * that 苹果 at the end of two sentences of different lengths is "-1".
 */
#ifndef ATTN_MODEL_TRACE_H
#define ATTN_MODEL_TRACE_H

#include "attn_decoder.h"
#include "attn_interp.h"
#include "attn_npz.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum { TRACE_SELECT_MAX = 64 };

typedef enum trace_patch_kind {
    TRACE_PATCH_SOURCE = 0, /* := the source run's values (activation patching) */
    TRACE_ABLATE_ZERO,      /* := 0                                            */
    TRACE_ABLATE_MEAN       /* := the mean over every position of this run     */
} trace_patch_kind;

typedef struct trace_patch {
    trace_patch_kind kind;
    attn_decoder_hook_point point;
    int64_t layer;                   /* -1: every layer, one at a time (a sweep) */
    int64_t positions[TRACE_SELECT_MAX];
    int n_positions;                 /* 0: every position                        */
    int64_t heads[TRACE_SELECT_MAX];
    int n_heads;                     /* 0: every head                             */
} trace_patch;

/* Parses "HOOK[@POS,POS..][:HEAD,HEAD..]" (--patch) or, for the ablations,
 * "HOOK[@POS..]:HEADS=zero|mean" (--ablate: kind is then read from the
 * text).  HOOK is a full hook name, "blocks.*.NAME" or a bare per-layer
 * NAME ("hook_resid_pre"): both mean every layer (layer -1).  Checks what
 * the hook allows (heads only on q/k/v/rot/z/scores/pattern, a layer below
 * n_layers, ln_final not patchable); false with a message in err. */
bool trace_parse_patch(const char *text, int ablate, int64_t n_layers, trace_patch *p, char *err, size_t esize);

/* A source run's recorded tensors, one per (point, layer) a patch needs. */
typedef struct trace_tensor {
    attn_decoder_hook_point point;
    int64_t layer;
    int ndim;
    int64_t shape[3];
    float *data;
} trace_tensor;

typedef struct trace_store {
    trace_tensor *t;
    int n, cap;
} trace_store;

void trace_store_free(trace_store *s);

/* Runs ids (the source) and keeps every tensor the SOURCE patches name
 * (every layer for a patch of layer -1).  error gets the reason on failure. */
attn_status trace_record_source(const attn_decoder *m, const int32_t *ids, int64_t S, const trace_patch *patches,
                                int n_patches, trace_store *out, char *error, size_t esize);

/* A run of the target: ids [L] with the patches applied (a patch of layer
 * -1 at layer `sweep_layer`), source from trace_record_source (S tokens; may
 * be NULL without SOURCE patches), every hook whose name matches one of
 * the glob patterns (fnmatch) added to cache (may be NULL), and the last
 * position's logits [V] out. */
typedef struct trace_run_spec {
    const trace_patch *patches;
    int n_patches;
    int64_t sweep_layer;
    const trace_store *source;
    int64_t source_len;
    attn_npz_writer *cache;
    const char *const *patterns;
    int n_patterns;
    int64_t *recorded;               /* count of arrays added to cache, or NULL */
} trace_run_spec;

attn_status trace_run(const attn_decoder *m, const int32_t *ids, int64_t L, const trace_run_spec *spec, float *logits,
                      char *error, size_t esize);

/* The number of this model's hook names that pattern matches (fnmatch). */
int64_t trace_pattern_matches(const attn_decoder_config *c, const char *pattern);

/* The path decomposition (the chapter's Figure 2, attn_sdpa_paths) of
 * every head of every layer, for a base and a changed text of one length:
 * at each layer, the base run's queries (after RoPE) held fixed, the keys,
 * the values or both taken from the changed run's same layer.  Per head, at
 * the base run's position pos (negative: from the end), the L2 norms of
 *   weight      z(K only) - z(base)     the weights moved, the content kept
 *   content     z(V only) - z(base)     the content moved, the weights kept
 *   interaction both - K only - V only + base
 *   changed     z(changed run) - z(base)
 *   base        z(base) itself, for scale
 * Each layer is decomposed on its own, from the two clean runs' inputs to
 * it (a change does not propagate to later layers here).
 *   out: [N, Hq] */
typedef struct trace_head_paths {
    double weight, content, interaction, changed, base;
} trace_head_paths;

attn_status trace_paths(const attn_decoder *m, const int32_t *base, const int32_t *changed, int64_t L, int64_t pos,
                        trace_head_paths *out, char *error, size_t esize);

/* The decomposition trace_paths reduces, whole: each(user, layer, paths,
 * error, esize) gets layer 0, 1, ... in turn, its attn_paths of batch 1
 * (z [1, L, Hq, Dh], patterns [1, Hq, L, L]) from attn_sdpa_paths on that
 * layer's rotated q, k and v of both runs.  each may take buffers out of
 * paths (setting the pointers NULL: they are then its own, to free with
 * attn_paths_free); the rest is freed after the call.  A status other than
 * ATTN_OK from each (its message in error) stops the walk and is returned. */
typedef attn_status (*trace_layer_paths_fn)(void *user, int64_t layer, attn_paths *paths, char *error, size_t esize);

attn_status trace_paths_each(const attn_decoder *m, const int32_t *base, const int32_t *changed, int64_t L,
                             trace_layer_paths_fn each, void *user, char *error, size_t esize);

/* "Not an explanation", on a real head: the weight row of head `head` of
 * layer `layer` at query position pos (negative: from the end) and the v
 * rows of its kv head (width Dh), through attn_nullspace_search with this
 * tolerance (default options otherwise: exact up to 12 visible keys, a
 * lower bound by local search beyond).
 *   weights, moved: [L] (the row, and the row found)   result: the search's */
attn_status trace_nullspace(const attn_decoder *m, const int32_t *ids, int64_t L, int64_t layer, int64_t head,
                            int64_t pos, double tolerance, float *weights, double *moved,
                            attn_nullspace_result *result, char *error, size_t esize);

/* KL(P || Q) in nats between the softmaxes of two logit rows (double;
 * >= 0 up to rounding, 0 for identical rows). */
double trace_kl(const float *p_logits, const float *q_logits, int64_t V);

/* softmax(logits)[id]. */
double trace_prob(const float *logits, int64_t V, int64_t id);

#endif /* ATTN_MODEL_TRACE_H */
