/*
 * layers.c — what a decoder layer's attention sees, as the decoder's
 * forward (src/model/decoder_forward.c) sets it up: causal, the scale of
 * the configuration, and on a sliding-window layer the last W keys only.
 *
 * Shape legend: L tokens; visible [L, L] (query i, key j).
 */
#include "interp/model/model_interp.h"

void attn__model_layer_options(const attn_decoder_config *c, int64_t layer, attn_sdpa_options *opt) {
    *opt = (attn_sdpa_options)ATTN_SDPA_OPTIONS_INIT;
    opt->scale = c->attn_scale;
    opt->causal = 1;
    if (attn_decoder_layer_is_local(c, layer)) {
        opt->window = 1;
        opt->window_left = c->sliding_window - 1;
        opt->window_right = 0;
    }
}

void attn__model_visible_row(const attn_decoder_config *c, int64_t layer, int64_t query, int64_t L, uint8_t *row) {
    /* A local layer's query i reads keys i - W + 1 .. i. */
    const int64_t window = attn_decoder_layer_is_local(c, layer) ? c->sliding_window : 0;
    for (int64_t j = 0; j < L; j++) row[j] = j <= query && (window == 0 || query - j < window);
}

attn_status attn_model_layer_visible(const attn_decoder_config *cfg, int64_t layer, int64_t L, uint8_t *visible) {
    if (!cfg || !visible)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_model_layer_visible: %s is NULL",
                          !cfg ? "the configuration" : "visible");
    if (layer < 0 || layer >= cfg->n_layers || L < 0)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "layer %lld of %lld tokens: the model has layers 0..%lld",
                          (long long)layer, (long long)L, (long long)(cfg->n_layers - 1));
    for (int64_t i = 0; i < L; i++) attn__model_visible_row(cfg, layer, i, L, visible + i * L);
    return ATTN_OK;
}
