/*
 * model_interp.h — what the files of interpretability over a decoder
 * share (libattn_model; attn_model_interp.h is the API): a source run's
 * kept tensors, a hook tensor seen as rows, and the attention options of
 * one layer as the decoder's forward sets them.
 *
 * Every hook tensor is seen here as [P, H, W] — positions, heads, width —
 * whatever its order in memory (attn_hook_site_layout):
 *   ROWS          [L, d]        P = L, H = 1,  W = d
 *   HEADS         [L, H, Dh]    P = L, H, W = Dh
 *   HEADS_FIRST   [H, L, S]     P = L (queries), H, W = S (keys)
 * so a selection of positions and heads is one loop for all three.
 */
#ifndef ATTN_INTERP_MODEL_INTERNAL_H
#define ATTN_INTERP_MODEL_INTERNAL_H

#include "attn_model_interp.h"

#include "base/base.h"

/* One tensor of a source run, as the hook showed it. */
typedef struct kept_tensor {
    attn_decoder_hook_point point;
    int64_t layer;
    int ndim;
    int64_t shape[3];
    float *data;
} kept_tensor;

struct attn_model_record {
    int64_t len;      /* S: the run's tokens */
    kept_tensor *t;
    int n, cap;
};

/* The tensor hook that keeps copies (attn__model_record's): ctx.patches
 * name what to keep (SOURCE patches), ctx.record receives it; a failure
 * stops the forward with its reason in ctx.failed and ctx.message. */
typedef struct record_ctx {
    const attn_model_patch *patches;
    int n;
    attn_model_record *record;
    attn_status failed;      /* the hook's own failure, kept across the   */
    char message[1024];      /* decoder's "stopped by the tensor hook"    */
} record_ctx;
int attn__model_record_hook(void *user, const attn_decoder_hook_tensor *t);

/* Runs ids [L] and keeps into *out (zeroed first) every tensor the SOURCE
 * patches of patches[n] name (unchecked: the caller's own list, or checked
 * ones).  Frees what it kept on failure. */
attn_status attn__model_record(const attn_decoder *m, const int32_t *ids, int64_t L, const attn_model_patch *patches,
                               int n, attn_model_record *out);
/* Frees the tensors of r (not r itself) and zeroes it. */
void attn__model_record_clear(attn_model_record *r);
/* The kept tensor of point at layer, or NULL (r may be NULL). */
const kept_tensor *attn__model_record_find(const attn_model_record *r, attn_decoder_hook_point point, int64_t layer);

/* Checks patches[n] for a model of n_layers layers (attn_model_run's list;
 * have_source: SOURCE patches have a record to copy from). */
attn_status attn__model_patches_check(const attn_model_patch *patches, int n, int64_t n_layers, bool have_source);

/* Positions [count] (attn_model_interp.h's rule: p >= 0 index p in both
 * runs, p < 0 from the end of each) as pairs of indices into the target
 * (L tokens) and the source (S): tgt, src [n]; count 0: every position,
 * which needs L = S.  Fails naming the position outside either run. */
attn_status attn__model_pair_positions(const int64_t *positions, int64_t count, int64_t L, int64_t S, int64_t *tgt,
                                       int64_t *src, int64_t *n);

/* A patch of layer ATTN_ALL applies at every layer, or with a sweep at
 * sweep_layer alone. */
static inline bool patch_at_layer(const attn_model_patch *p, int64_t layer, int64_t sweep_layer) {
    return p->layer == layer || (p->layer < 0 && (sweep_layer < 0 || sweep_layer == layer));
}

/* The [P, H, W] view of a hook tensor (header comment). */
typedef struct hook_view {
    int64_t P, H, W;
    bool heads_first;
} hook_view;

static inline hook_view hook_view_of(attn_decoder_hook_point point, int ndim, const int64_t *shape) {
    const attn_hook_layout layout = attn_hook_site_layout((attn_hook_site)point);
    if (layout == ATTN_HOOK_HEADS_FIRST) return (hook_view){shape[1], shape[0], shape[2], true};
    if (ndim == 3) return (hook_view){shape[0], shape[1], shape[2], false};
    return (hook_view){shape[0], 1, shape[1], false};
}

/* Row (position p, head h) of data under view v: W floats. */
static inline float *hook_view_row(float *data, const hook_view *v, int64_t p, int64_t h) {
    return data + (v->heads_first ? h * v->P + p : p * v->H + h) * v->W;
}

/* The attention options of layer `layer`, as the decoder's forward sets
 * them: its scale, causal, and on a sliding-window layer the window. */
void attn__model_layer_options(const attn_decoder_config *c, int64_t layer, attn_sdpa_options *opt);
/* Row `query` of attn_model_layer_visible's map: row [L]. */
void attn__model_visible_row(const attn_decoder_config *c, int64_t layer, int64_t query, int64_t L, uint8_t *row);

/* Layer `layer`'s W_O in the row convention, [Hq * Dh, d] = [Hq, Dh, d]
 * (head h's output is z_h . wo[h]): the stored [d, Hq * Dh] (y = x . W^T,
 * GGUF's layout) dequantized (the values the exact forward multiplies by)
 * and transposed.  *out: free with free(). */
attn_status attn__model_output_projection(const attn_decoder *m, int64_t layer, float **out);

#endif /* ATTN_INTERP_MODEL_INTERNAL_H */
