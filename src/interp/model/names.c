/*
 * names.c — the hook names of a decoder of N layers in the order a
 * forward reaches them, and the globs (fnmatch) over them.  The names
 * themselves are the vocabulary's (attn_hook_site_name, attn_interp.h).
 *
 * Order: hook_embed (index 0), then for layer l the 13 per-layer points
 * blocks.l.hook_resid_pre .. blocks.l.hook_resid_post (indices 1 + 13 l ..
 * 13 + 13 l), then ln_final.hook_normalized (index 13 N + 1).
 */
#include "interp/model/model_interp.h"

#include <fnmatch.h>

/* The points with a layer lie between these two. */
enum { PER_LAYER = ATTN_DECODER_HOOK_LN_FINAL - ATTN_DECODER_HOOK_RESID_PRE };

int64_t attn_model_hook_count(int64_t n_layers) { return n_layers < 0 ? 0 : PER_LAYER * n_layers + 2; }

attn_status attn_model_hook_at(int64_t n_layers, int64_t index, attn_decoder_hook_point *point, int64_t *layer) {
    if (!point || !layer)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_model_hook_at: %s is NULL", !point ? "point" : "layer");
    const int64_t count = attn_model_hook_count(n_layers);
    if (index < 0 || index >= count)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "hook index %lld: a model of %lld layers has %lld hooks "
                          "(0..%lld)", (long long)index, (long long)n_layers, (long long)count,
                          (long long)(count - 1));
    if (index == 0 || index == count - 1) {
        *point = index == 0 ? ATTN_DECODER_HOOK_EMBED : ATTN_DECODER_HOOK_LN_FINAL;
        *layer = -1;
    } else {
        *point = (attn_decoder_hook_point)(ATTN_DECODER_HOOK_RESID_PRE + (index - 1) % PER_LAYER);
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
