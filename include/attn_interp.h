/*
 * attn_interp.h — looking inside attention (libattn): hooks under
 * TransformerLens's names, patches (activation patching, ablation), the
 * path decomposition of the chapter's Figure 2, and the null-space search
 * behind "weights are not an explanation" (docs/interpretability.md).
 *
 * Shape legend: as attn.h; q [B, L, Hq, D]  k [B, S, Hkv, D]
 *   v [B, S, Hkv, Dv]  scores, pattern [B, Hq, L, S]  z [B, L, Hq, Dv]
 *   result [B, L, Hq, d_out]  attn_out [B, L, d_out]
 */
#ifndef ATTN_INTERP_H
#define ATTN_INTERP_H

#include "attn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------ hook names
 *
 * One vocabulary names every activation attn shows, TransformerLens's: the
 * hooks of the attention module's trace (attn_hook, below) and the hook
 * points of a decoder's forward (attn_decoder.h, attn_decoder_hook_point:
 * the same numbers as the sites here) are rows of one table, which owns
 * their names, their layouts and the parsing of every form a name takes.
 * The decoder's point p is site p (every site is a decoder point; the
 * attention module's trace shows the eight with an attn_hook, below).
 *
 *   site         full name                        layout (after any batch axis)
 *   EMBED        hook_embed                       ROWS         [L, d]
 *   RESID_PRE    blocks.L.hook_resid_pre          ROWS         [L, d]
 *   Q            blocks.L.attn.hook_q             HEADS        [L, Hq, Dh]
 *   K, V         blocks.L.attn.hook_k, hook_v     HEADS        [L, Hkv, Dh]
 *   ROT_Q, ROT_K blocks.L.attn.hook_rot_q, _rot_k HEADS        [L, Hq / Hkv, Dh]
 *   ATTN_SCORES  blocks.L.attn.hook_attn_scores   HEADS_FIRST  [Hq, L, S]  <- heads first
 *   PATTERN      blocks.L.attn.hook_pattern       HEADS_FIRST  [Hq, L, S]  <- heads first
 *   Z            blocks.L.attn.hook_z             HEADS        [L, Hq, Dv]
 *   ATTN_OUT     blocks.L.hook_attn_out           ROWS         [L, d]
 *   RESID_MID    blocks.L.hook_resid_mid          ROWS         [L, d]
 *   MLP_OUT      blocks.L.hook_mlp_out            ROWS         [L, d]
 *   RESID_POST   blocks.L.hook_resid_post         ROWS         [L, d]
 *   LN_FINAL     ln_final.hook_normalized         ROWS         [L, d]
 *   RESULT       blocks.L.attn.hook_result        HEADS        [L, Hq, d_out]
 *   LN_FINAL_SCALE ln_final.hook_scale            ROWS         [L, 1]
 *   Q_INPUT      blocks.L.hook_q_input            HEADS        [L, Hq, d]
 *   K_INPUT, V_INPUT blocks.L.hook_k_input, _v_input HEADS     [L, Hkv, d]
 *   LN1_SCALE    blocks.L.ln1.hook_scale          ROWS         [L, 1]
 *   LN1_NORMALIZED blocks.L.ln1.hook_normalized   ROWS         [L, d]
 *   LN2_SCALE    blocks.L.ln2.hook_scale          ROWS         [L, 1]
 *   LN2_NORMALIZED blocks.L.ln2.hook_normalized   ROWS         [L, d]
 *   MLP_PRE      blocks.L.mlp.hook_pre            ROWS         [L, F]
 *   MLP_PRE_LINEAR blocks.L.mlp.hook_pre_linear   ROWS         [L, F]
 *   MLP_POST     blocks.L.mlp.hook_post           ROWS         [L, F]
 * (Sites are numbered in the order they were added, not in a forward's:
 * attn_model_hook_at, attn_model_interp.h, lists a model's names in the
 * forward's order.  Where the short forms below are ambiguous, "scale" and
 * "normalized", they mean ln_final's, as TransformerLens's get_act_name
 * does without a layer.)
 *
 * The forms a name may take, each accepted only when asked for
 * (attn_hook_parse's forms; the full name always is):
 *   full            blocks.3.attn.hook_pattern, hook_embed,
 *                   ln_final.hook_normalized                  layer 3, or -1
 *   ANY_LAYER       blocks.*.attn.hook_pattern                every layer: -1
 *   SUFFIX          attn.hook_pattern, hook_resid_pre: the
 *                   name without blocks.L.                    every layer: -1
 *   SHORT           pattern, hook_pattern, or any dotted name
 *                   ending in one (TransformerLens's short
 *                   names, utils.get_act_name's)              the layer is not read: -1
 * Globs over a model's names (blocks.*.attn.hook_*) are matched against
 * the full names: attn_model_hooks_matching (attn_model_interp.h).
 */
typedef enum attn_hook_site {
    ATTN_HOOK_SITE_EMBED = 0,
    ATTN_HOOK_SITE_RESID_PRE,
    ATTN_HOOK_SITE_Q,
    ATTN_HOOK_SITE_K,
    ATTN_HOOK_SITE_V,
    ATTN_HOOK_SITE_ROT_Q,
    ATTN_HOOK_SITE_ROT_K,
    ATTN_HOOK_SITE_ATTN_SCORES,
    ATTN_HOOK_SITE_PATTERN,
    ATTN_HOOK_SITE_Z,
    ATTN_HOOK_SITE_ATTN_OUT,
    ATTN_HOOK_SITE_RESID_MID,
    ATTN_HOOK_SITE_MLP_OUT,
    ATTN_HOOK_SITE_RESID_POST,
    ATTN_HOOK_SITE_LN_FINAL,
    ATTN_HOOK_SITE_RESULT,
    ATTN_HOOK_SITE_LN_FINAL_SCALE,
    ATTN_HOOK_SITE_Q_INPUT,
    ATTN_HOOK_SITE_K_INPUT,
    ATTN_HOOK_SITE_V_INPUT,
    ATTN_HOOK_SITE_LN1_SCALE,
    ATTN_HOOK_SITE_LN1_NORMALIZED,
    ATTN_HOOK_SITE_LN2_SCALE,
    ATTN_HOOK_SITE_LN2_NORMALIZED,
    ATTN_HOOK_SITE_MLP_PRE,
    ATTN_HOOK_SITE_MLP_PRE_LINEAR,
    ATTN_HOOK_SITE_MLP_POST,
    ATTN_HOOK_SITES
} attn_hook_site;

/* How a site's tensor is laid out after any batch axis: its rows are what
 * a selection of positions and heads picks. */
typedef enum attn_hook_layout {
    ATTN_HOOK_LAYOUT_NONE = -1,   /* a value outside attn_hook_site            */
    ATTN_HOOK_ROWS = 0,           /* [L, d]: a row per position                */
    ATTN_HOOK_HEADS = 1,          /* [L, H, W]: a row per position and head    */
    ATTN_HOOK_HEADS_FIRST = 2     /* [H, L, S]: a row per head and query, over
                                     the keys (scores, pattern)                */
} attn_hook_layout;

/* The forms attn_hook_parse accepts beyond the full name (table above). */
#define ATTN_HOOK_NAME_FULL 0u
#define ATTN_HOOK_NAME_ANY_LAYER (1u << 0)
#define ATTN_HOOK_NAME_SUFFIX (1u << 1)
#define ATTN_HOOK_NAME_SHORT (1u << 2)

/* The site's name after "blocks.L." ("attn.hook_pattern"), or its whole
 * name for the three without a layer ("hook_embed"); NULL outside the enum. */
ATTN_API const char *attn_hook_site_suffix(attn_hook_site site);

/* 1 when the site is one per layer (its full name starts "blocks.L."), 0
 * for hook_embed, ln_final's two and outside the enum. */
ATTN_API int attn_hook_site_per_layer(attn_hook_site site);

/* The site's layout (above); ATTN_HOOK_LAYOUT_NONE outside the enum. */
ATTN_API attn_hook_layout attn_hook_site_layout(attn_hook_site site);

/* The site's full name at a layer ("blocks.3.attn.hook_pattern"; the layer
 * is ignored for the three without one) into buf; NULL when the site is
 * outside the enum or buf is too small. */
ATTN_API const char *attn_hook_site_name(attn_hook_site site, int64_t layer, char *buf, size_t size);

/* Parses a hook name in any of the forms asked for (ATTN_HOOK_NAME_*, or'd;
 * the full name is always accepted): *site, and *layer the layer the name
 * gives (>= 0), or -1 when it gives none (a site without a layer, or a form
 * that means every layer).  The layer's range is the caller's check.
 * ATTN_ERR_INVALID_ARGUMENT with a message naming the name for anything
 * else; *site and *layer are then untouched. */
ATTN_API attn_status attn_hook_parse(const char *name, unsigned forms, attn_hook_site *site, int64_t *layer);

/* ------------------------------------------------ looking inside (hooks)
 *
 * A traced forward pass records every intermediate of attention per head,
 * under TransformerLens's hook names and in its axis order (docs/
 * interpretability.md):
 *
 *   hook_q            q        [B, L, Hq,  D ]   batch pos head_index d_head
 *   hook_k            k        [B, S, Hkv, D ]   (kv heads: GQA is not repeated)
 *   hook_v            v        [B, S, Hkv, Dv]
 *   hook_attn_scores  scores   [B, Hq, L, S]    <- heads before positions!
 *                              scale * q.k + bias; -inf where hidden
 *   hook_pattern      pattern  [B, Hq, L, S]    the weights (rows sum to 1)
 *   hook_z            z        [B, L, Hq, Dv]   each head's weighted sum
 *   hook_result       result   [B, L, Hq, d_out] each head through its slice
 *                              of W_O:  sum_h result[.., h, :] + bo = out
 *   hook_attn_out     attn_out [B, L, d_out]    the module's output
 *
 * A trace holds the values the pass actually used, i.e. after patches.
 * Bare attention (attn_sdpa_forward_traced) has no W_O: its result and
 * attn_out are NULL and d_out is 0.
 */
typedef enum attn_hook {
    ATTN_HOOK_Q = 0, ATTN_HOOK_K, ATTN_HOOK_V, ATTN_HOOK_ATTN_SCORES, ATTN_HOOK_PATTERN,
    ATTN_HOOK_Z, ATTN_HOOK_RESULT, ATTN_HOOK_ATTN_OUT,
    ATTN_HOOK_COUNT
} attn_hook;

/* "hook_q", "hook_k", ... (the last part of the site's name, above); NULL
 * for a value outside the enum. */
ATTN_API const char *attn_hook_name(attn_hook hook);

/* Parses a hook name as attn_hook_parse does in every form: "hook_pattern",
 * "pattern" and TransformerLens's full "blocks.0.attn.hook_pattern" all
 * give ATTN_HOOK_PATTERN (the layer is not read).  ATTN_ERR_INVALID_ARGUMENT
 * naming the hooks there are for a name of no hook of this trace. */
ATTN_API attn_status attn_hook_from_name(const char *name, attn_hook *hook);

/* Every buffer is malloc'd by the traced forward and freed by
 * attn_trace_free; pass a zeroed struct (attn_trace t = {0};) or one already
 * freed.  On failure the struct is left zeroed. */
typedef struct attn_trace {
    int64_t batch, len, context_len; /* B, L, S                              */
    int64_t heads, kv_heads;         /* Hq, Hkv                              */
    int64_t head_dim, value_dim;     /* D, Dv                                */
    int64_t d_out;                   /* module output width; 0 = bare attention */
    float *q, *k, *v, *scores, *pattern, *z; /* shapes in the table above   */
    float *result, *attn_out;        /* NULL for bare attention              */
} attn_trace;

ATTN_API void attn_trace_free(attn_trace *trace); /* safe on a zeroed or freed trace */

/* One hook of a trace as an array: data, rank (3 or 4), shape, and the axis
 * names in TransformerLens's words ("batch pos head_index d_head"). */
typedef struct attn_hook_tensor {
    attn_hook hook;
    const char *name;
    float *data;
    int ndim;
    int64_t shape[4];
    const char *axes;
} attn_hook_tensor;

/* Fails (ATTN_ERR_INVALID_ARGUMENT) for hook_result / hook_attn_out of a
 * bare-attention trace and for an empty trace. */
ATTN_API attn_status attn_trace_get(const attn_trace *trace, attn_hook hook, attn_hook_tensor *view);

/* ---------------------------------------------------------------- patches
 *
 * A patch changes one hook during the forward pass; everything downstream
 * sees the change.  Patches run in stage order (q, k, v first, then the
 * pattern, then z) and in array order within a stage.
 *
 * Selection: rows of q and z are (batch, query position, query head); rows
 * of k and v are (batch, key position, kv head); rows of the pattern are
 * (batch, query head, query position) and `key` picks entries within them.
 * ATTN_ALL (-1) in a selector selects every index; attn_patch_make returns
 * a patch whose selectors are all ATTN_ALL.
 *
 *   kind      hooks               effect on each selected row (or entry)
 *   REPLACE   q k v pattern z     := `values` (one row, written to every
 *                                    selected row), or, with values NULL,
 *                                    the same row of `source`'s hook
 *                                    (activation patching; shapes must match)
 *   ZERO      q k v pattern z     := 0   (ZERO on hook_z, every position,
 *                                    one head = zero-ablating that head)
 *   MEAN      q k v z             := mean over all positions of that batch
 *                                    and head (mean-ablation), from the
 *                                    values before this patch
 *   SCALE     q k v pattern z     *= factor  (factor >= 0 on the pattern)
 *   SET       pattern             := factor  (factor >= 0)
 *
 * Pattern patches say explicitly whether to renormalise: with renormalise
 * nonzero each touched row is divided by its new sum afterwards (a row whose
 * sum is 0 stays 0 and reads nothing); with 0 the row is used as written,
 * even if it no longer sums to 1.  When the pattern is patched, z is the
 * weighted sum of v under the patched pattern.  Patching a hidden entry of
 * the pattern lets the query read a key the mask hid: that is the caller's
 * choice.
 */
#define ATTN_ALL (-1)

typedef enum attn_patch_kind {
    ATTN_PATCH_REPLACE = 0,
    ATTN_PATCH_ZERO,
    ATTN_PATCH_MEAN,
    ATTN_PATCH_SCALE,
    ATTN_PATCH_SET
} attn_patch_kind;

typedef struct attn_patch {
    size_t struct_size;       /* sizeof(attn_patch): set by attn_patch_make   */
    attn_patch_kind kind;
    attn_hook hook;           /* Q, K, V, PATTERN or Z                        */
    int64_t batch;            /* index or ATTN_ALL                            */
    int64_t position;         /* query position (q, z, pattern) or key position (k, v) */
    int64_t head;             /* query head (q, z, pattern) or kv head (k, v) */
    int64_t key;              /* pattern only: key column; ATTN_ALL otherwise */
    const float *values;      /* REPLACE: one row of width D, Dv or S         */
    const attn_trace *source; /* REPLACE with values NULL: take rows from here */
    float factor;             /* SCALE: multiplier; SET: the new weight       */
    int renormalise;          /* pattern patches: divide touched rows by their sum */
} attn_patch;

/* A patch of this kind on this hook with every selector ATTN_ALL, factor 1
 * and no renormalisation; narrow it by setting fields.  (Inline, so that
 * struct_size is the caller's: arrays of patches are read with it.) */
static inline attn_patch attn_patch_make(attn_patch_kind kind, attn_hook hook) {
    attn_patch p = {sizeof(attn_patch), kind, hook, ATTN_ALL, ATTN_ALL, ATTN_ALL, ATTN_ALL,
                    NULL, NULL, 1.0f, 0};
    return p;
}

/* Bare attention, traced and patched.  Copies q, k, v into the trace (any
 * strides), applies the q/k/v patches, then computes scores and pattern with
 * attn_sdpa_scores / attn_sdpa_forward (so every mask option applies),
 * applies the pattern and z patches.
 *   q: [B, L, Hq, D]  k: [B, S, Hkv, D]  v: [B, S, Hkv, Dv]
 *   out: [B, L, Hq, Dv] (written; = hook_z), or NULL when trace is given
 *   trace: filled (zeroed struct in, attn_trace_free after), or NULL
 * Without patches, out is bit-identical to attn_sdpa_forward's. */
ATTN_API attn_status attn_sdpa_forward_traced(const attn_tensor *q, const attn_tensor *k,
                                     const attn_tensor *v, const attn_sdpa_options *opt,
                                     const attn_patch *patches, int n_patches,
                                     attn_trace *trace, attn_tensor *out);

/* Multi-head attention (attn_mha_forward's arguments), traced and patched:
 * the projections with attn_linear_forward, then as attn_sdpa_forward_traced,
 * then W_O per head (hook_result) and for the module (hook_attn_out).
 *   x: [B, L, d_model]  context: [B, S, d_context] or NULL (self: S = L)
 *   out: [B, L, d_out] or NULL when trace is given
 * Without patches, out is bit-identical to attn_mha_forward's. */
ATTN_API attn_status attn_mha_forward_traced(const attn_mha *m, const float *x, int64_t batch,
                                    int64_t len, const float *context, int64_t context_len,
                                    const attn_sdpa_options *opt, const attn_patch *patches,
                                    int n_patches, attn_trace *trace, float *out);

/* ------------------------------------------- path decomposition (Figure 2)
 *
 * Weight and content are separate causal paths.  For a base input and a
 * changed input, with the BASE queries held fixed:
 *   base     base keys,    base values
 *   K only   changed keys, base values    (weights move, content does not)
 *   V only   base keys,    changed values (the base weights, new content)
 *   both     changed keys, changed values
 *   changed  the changed input's own run (its queries change too)
 *   interaction = both - K only - V only + base  (0 when the paths add up)
 * The chapter's query 3: [1.5, 0.75] / [1.2, 0.8] / [1.5, 1.0] / [1.2, 1.2],
 * interaction [0, 0.15].
 */
typedef enum attn_path_case {
    ATTN_PATH_BASE = 0, ATTN_PATH_K_ONLY, ATTN_PATH_V_ONLY, ATTN_PATH_BOTH, ATTN_PATH_CHANGED,
    ATTN_PATH_CASES
} attn_path_case;

/* "base", "K only", "V only", "both", "changed"; NULL outside the enum. */
ATTN_API const char *attn_path_case_name(attn_path_case c);

typedef struct attn_paths {
    attn_trace run[ATTN_PATH_CASES]; /* every hook of every case              */
    float *interaction_z;      /* [B, L, Hq, Dv]                              */
    float *interaction_result; /* [B, L, Hq, d_out]; NULL for bare attention  */
    float *interaction_out;    /* [B, L, d_out];     NULL for bare attention  */
} attn_paths;

ATTN_API void attn_paths_free(attn_paths *paths); /* safe on a zeroed or freed struct */

/* Bare attention.  q_changed, k_changed, v_changed may each be NULL (= the
 * base tensor); the changed tensors must have the base's shapes.
 * paths: a zeroed struct, filled; free with attn_paths_free. */
ATTN_API attn_status attn_sdpa_paths(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                            const attn_tensor *q_changed, const attn_tensor *k_changed,
                            const attn_tensor *v_changed, const attn_sdpa_options *opt,
                            attn_paths *paths);

/* Multi-head attention: x and x_changed [B, L, d_model]; context and
 * context_changed [B, S, d_context] for cross-attention (context_changed
 * NULL = context), both NULL for self-attention.  The K-only, V-only and
 * both runs are the base pass with hook_k / hook_v patched from the changed
 * pass (activation patching). */
ATTN_API attn_status attn_mha_paths(const attn_mha *m, const float *x, const float *x_changed,
                           int64_t batch, int64_t len, const float *context,
                           const float *context_changed, int64_t context_len,
                           const attn_sdpa_options *opt, attn_paths *paths);

/* ---------------------------------------------- next-token distributions
 *
 * How a patch or an ablation moved what comes next: rows of logits [V]
 * (a decoder's last position), softmax and sums in double precision.  The
 * logit difference of two tokens a and b is logits[a] - logits[b].
 */
/* KL(P || Q) in nats between softmax(p_logits) and softmax(q_logits): >= 0
 * up to rounding, 0 for identical rows. */
ATTN_API double attn_logits_kl(const float *p_logits, const float *q_logits, int64_t V);
/* softmax(logits)[id]. */
ATTN_API double attn_logits_prob(const float *logits, int64_t V, int64_t id);
/* The indices of the k largest of x [n] (top tokens of logits, a pattern
 * row's top keys), largest first, ties the lower index first, into
 * ids [k]; entries past n are -1. */
ATTN_API void attn_top_k(const float *x, int64_t n, int64_t k, int64_t *ids);

/* ------------------------------- "weights are not an explanation" (§8)
 *
 * For one weight row w (one query, one head) and the value rows it mixes,
 * finds a row w' as far from w as possible in L1 distance that gives the
 * same output within a tolerance:
 *   maximise ||w' - w||_1  subject to  w' >= 0,  sum w' = sum w,
 *            |sum_j (w'_j - w_j) v_j[d]| <= tolerance  for every d,
 *            w'_j = 0 for every hidden key.
 * The maximum of a convex function over this polytope lies at a vertex;
 * finding it is NP-hard in general.  Up to exact_limit visible keys every
 * sign pattern of w' - w is solved as a linear program (dense simplex), so
 * the answer is the maximum; beyond it, a local search over sign patterns
 * from several starts gives a lower bound (result->exact = 0).  The
 * returned row is checked in double precision and pulled back toward w if
 * rounding left it outside the tolerance, so it always satisfies the
 * constraints.  To ask about a head's contribution after W_O, pass the
 * values already multiplied by that head's slice of W_O.
 *
 * Work budget: the enumeration costs about 2^n programs of r = 1 + 2*width
 * rows (fewer when coordinates cannot move) and n columns, each ~ r (n + r)
 * min(r, n) steps of about a nanosecond, so 20 keys of width 64 would take
 * ten minutes.  Beyond 5e10 steps (under a minute) it is not started: with
 * the default exact_limit the local search runs instead (result->exact = 0);
 * with an exact_limit the caller chose, the call fails with ATTN_ERR_BUDGET
 * naming the estimate, unless allow_slow is set.
 */
typedef struct attn_nullspace_options {
    size_t struct_size;  /* sizeof(attn_nullspace_options): ATTN_NULLSPACE_OPTIONS_INIT */
    double tolerance;    /* >= 0: allowed change of any output coordinate    */
    int64_t exact_limit; /* enumerate when at most this many keys are visible;
                            0 = 12; at most 20                                */
    int64_t starts;      /* local-search starts beyond the limit; 0 = 32      */
    int allow_slow;      /* 1: no work budget for the enumeration (below)     */
} attn_nullspace_options;

#define ATTN_NULLSPACE_OPTIONS_INIT {.struct_size = sizeof(attn_nullspace_options)}

typedef struct attn_nullspace_result {
    double l1;                /* ||w' - w||_1 of the row returned             */
    double max_output_change; /* max_d |sum_j (w'_j - w_j) v_j[d]| <= tolerance */
    int exact;                /* 1: every sign pattern was solved             */
    int64_t visible;          /* keys w' may use                              */
    int64_t programs;         /* linear programs solved                       */
} attn_nullspace_result;

/*   weights: [S], non-negative (a row of hook_pattern)
 *   values:  [S, width] row-major (the v rows this query reads)
 *   visible: [S] nonzero = the key may carry weight, or NULL (all)
 *   opt:     or NULL: ATTN_NULLSPACE_OPTIONS_INIT (tolerance 0)
 *   moved:   [S] written: the row w' found (w itself when nothing moves) */
ATTN_API attn_status attn_nullspace_search(const float *weights, const float *values, int64_t keys,
                                  int64_t width, const uint8_t *visible,
                                  const attn_nullspace_options *opt, double *moved,
                                  attn_nullspace_result *result);

#ifdef __cplusplus
}
#endif

#endif /* ATTN_INTERP_H */
