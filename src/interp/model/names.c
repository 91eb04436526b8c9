/*
 * names.c — the hook names of a decoder of N layers in the order a
 * forward reaches them, and the globs (fnmatch) over them.  The names
 * themselves are the vocabulary's (attn_hook_site_name, attn_interp.h).
 *
 * Order: hook_embed (index 0), then for layer l its PER_LAYER points in
 * the order the forward reaches them (per_layer below; indices 1 + PER_LAYER
 * l ..), then ln_final.hook_scale and ln_final.hook_normalized (the last
 * two).
 */
#include "interp/model/model_interp.h"

#include <fnmatch.h>

/* A layer's points as its forward reaches them (attn_decoder.h's table). */
static const attn_decoder_hook_point per_layer[] = {
    ATTN_DECODER_HOOK_RESID_PRE,      ATTN_DECODER_HOOK_Q_INPUT,     ATTN_DECODER_HOOK_K_INPUT,
    ATTN_DECODER_HOOK_V_INPUT,        ATTN_DECODER_HOOK_LN1_SCALE,   ATTN_DECODER_HOOK_LN1_NORMALIZED,
    ATTN_DECODER_HOOK_Q,              ATTN_DECODER_HOOK_K,           ATTN_DECODER_HOOK_V,
    ATTN_DECODER_HOOK_ROT_Q,          ATTN_DECODER_HOOK_ROT_K,       ATTN_DECODER_HOOK_ATTN_SCORES,
    ATTN_DECODER_HOOK_PATTERN,        ATTN_DECODER_HOOK_Z,           ATTN_DECODER_HOOK_RESULT,
    ATTN_DECODER_HOOK_ATTN_OUT,       ATTN_DECODER_HOOK_RESID_MID,   ATTN_DECODER_HOOK_LN2_SCALE,
    ATTN_DECODER_HOOK_LN2_NORMALIZED, ATTN_DECODER_HOOK_MLP_PRE,     ATTN_DECODER_HOOK_MLP_PRE_LINEAR,
    ATTN_DECODER_HOOK_MLP_POST,       ATTN_DECODER_HOOK_MLP_OUT,     ATTN_DECODER_HOOK_RESID_POST,
};
enum { PER_LAYER = sizeof per_layer / sizeof per_layer[0] };
/* Every point is listed once: the per-layer ones above, and hook_embed and
 * ln_final's two. */
_Static_assert(PER_LAYER + 3 == ATTN_DECODER_HOOK_POINTS, "every decoder hook point has its place in the order");

int64_t attn_model_hook_count(int64_t n_layers) { return n_layers < 0 ? 0 : PER_LAYER * n_layers + 3; }

attn_status attn_model_hook_at(int64_t n_layers, int64_t index, attn_decoder_hook_point *point, int64_t *layer) {
    if (!point || !layer)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_model_hook_at: %s is NULL", !point ? "point" : "layer");
    const int64_t count = attn_model_hook_count(n_layers);
    if (index < 0 || index >= count)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "hook index %lld: a model of %lld layers has %lld hooks "
                          "(0..%lld)", (long long)index, (long long)n_layers, (long long)count,
                          (long long)(count - 1));
    if (index == 0 || index >= count - 2) {
        *point = index == 0             ? ATTN_DECODER_HOOK_EMBED
                 : index == count - 2   ? ATTN_DECODER_HOOK_LN_FINAL_SCALE
                                        : ATTN_DECODER_HOOK_LN_FINAL;
        *layer = -1;
    } else {
        *point = per_layer[(index - 1) % PER_LAYER];
        *layer = (index - 1) / PER_LAYER;
    }
    return ATTN_OK;
}

attn_status attn_model_hooks_matching(int64_t n_layers, const char *pattern, uint32_t *points, int64_t *count) {
    if (!pattern) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "a hook name pattern is NULL");
    uint32_t mask = 0;
    int64_t n = 0;
    char name[96];
    for (int64_t i = 0; i < attn_model_hook_count(n_layers); i++) {
        attn_decoder_hook_point point;
        int64_t layer;
        attn_model_hook_at(n_layers, i, &point, &layer);
        if (fnmatch(pattern, attn_decoder_hook_name(point, layer, name, sizeof name), 0) == 0) {
            mask |= 1u << point;
            n++;
        }
    }
    if (points) *points = mask;
    if (count) *count = n;
    return ATTN_OK;
}
