/*
 * analysis.c — attn_analysis.h's analyses on a whole decoder: a run's
 * patterns, values and W_O recorded (the forward's hooks, the layer's
 * output projection as stored) and handed to the tensor-level functions.
 *
 * Shape legend: L tokens, N layers, Hq / Hkv heads, Dh head width, d width;
 *   pattern, norms [Hq, L, L]  v [L, Hkv, Dh]  wo as stored [d, Hq * Dh]
 *   wo per head [Hq, Dh, d]   patterns [N, Hq, L, L]   rollout [N, L, L]
 */
#include "interp/model/model_interp.h"

#include "attn_analysis.h"
#include "model/decoder.h"

#include <stdlib.h>
#include <string.h>

attn_status attn__model_output_projection(const attn_decoder *m, int64_t layer, float **out) {
    const attn_decoder_config *c = &m->cfg;
    const int64_t d = c->d_model, in = c->n_heads * c->head_dim;
    float *stored = malloc((size_t)(d * in) * sizeof *stored), *wo = malloc((size_t)(d * in) * sizeof *wo);
    attn_status st = ATTN_OK;
    if (!stored || !wo) st = attn__fail(ATTN_ERR_OUT_OF_MEMORY, "out of memory");
    else st = attn_quant_dequantize_rows(&m->layers[layer].wo.q, 0, d, stored);
    if (!st)
        for (int64_t r = 0; r < d; r++)
            for (int64_t k = 0; k < in; k++) wo[k * d + r] = stored[r * in + k];
    free(stored);
    if (st) free(wo);
    else *out = wo;
    return st;
}

attn_status attn_model_value_norms(const attn_decoder *m, const int32_t *ids, int64_t L, int64_t layer, int with_wo,
                                   float *pattern, float *norms) {
    if (!m || !ids || !norms)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_model_value_norms: %s is NULL",
                          !m ? "the decoder" : !ids ? "ids" : "norms");
    const attn_decoder_config *c = attn_decoder_get_config(m);
    if (layer != ATTN_ALL && (layer < 0 || layer >= c->n_layers))
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_model_value_norms: layer %lld: the model has layers 0 .. "
                          "%lld (or ATTN_ALL)", (long long)layer, (long long)c->n_layers - 1);
    const attn_model_patch want[2] = {{.kind = ATTN_MODEL_PATCH_SOURCE, .point = ATTN_DECODER_HOOK_PATTERN, .layer = layer},
                                      {.kind = ATTN_MODEL_PATCH_SOURCE, .point = ATTN_DECODER_HOOK_V, .layer = layer}};
    attn_model_record s = {0};
    float *wo = NULL;
    attn_status st = attn__model_record(m, ids, L, want, 2, &s);
    /* One forward for every layer asked (ATTN_ALL: a report's pages). */
    const int64_t first = layer == ATTN_ALL ? 0 : layer, last = layer == ATTN_ALL ? c->n_layers - 1 : layer,
                  per_layer = c->n_heads * L * L;
    for (int64_t l = first; l <= last && !st; l++) {
        if (with_wo && (st = attn__model_output_projection(m, l, &wo))) break;
        const kept_tensor *p = attn__model_record_find(&s, ATTN_DECODER_HOOK_PATTERN, l),
                          *v = attn__model_record_find(&s, ATTN_DECODER_HOOK_V, l);
        st = attn_value_weighted_norms(p->data, c->n_heads, L, L, v->data, c->n_kv_heads, c->head_dim, wo,
                                       c->d_model, norms + (l - first) * per_layer);
        if (!st && pattern)
            memcpy(pattern + (l - first) * per_layer, p->data, (size_t)per_layer * sizeof *pattern);
        free(wo);
        wo = NULL;
    }
    attn__model_record_clear(&s);
    return st;
}

/* Every layer's pattern of a run over ids [L] into *out [N, Hq, L, L]
 * (free with free()): the input of rollout and flow. */
static attn_status all_patterns(const attn_decoder *m, const int32_t *ids, int64_t L, float **out) {
    const attn_decoder_config *c = attn_decoder_get_config(m);
    const attn_model_patch want = {.kind = ATTN_MODEL_PATCH_SOURCE, .point = ATTN_DECODER_HOOK_PATTERN,
                                   .layer = ATTN_ALL};
    attn_model_record s = {0};
    attn_status st = attn__model_record(m, ids, L, &want, 1, &s);
    if (st) return st;
    const int64_t per_layer = c->n_heads * L * L;
    float *all = malloc((size_t)(c->n_layers * per_layer) * sizeof *all);
    if (!all) st = attn__fail(ATTN_ERR_OUT_OF_MEMORY, "out of memory (the patterns of %lld layers)",
                              (long long)c->n_layers);
    for (int64_t l = 0; l < c->n_layers && !st; l++)
        memcpy(all + l * per_layer, attn__model_record_find(&s, ATTN_DECODER_HOOK_PATTERN, l)->data,
               (size_t)per_layer * sizeof *all);
    attn__model_record_clear(&s);
    if (!st) *out = all;
    return st;
}

/* The two below record every layer's pattern and hand them on; head,
 * residual and position are checked there (after the forward: a bad one is
 * a caller's bug, and the CLI checks its flags before loading a model). */
attn_status attn_model_rollout(const attn_decoder *m, const int32_t *ids, int64_t L, int64_t head, double residual,
                               double *rollout) {
    if (!m || !ids || !rollout)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_model_rollout: %s is NULL",
                          !m ? "the decoder" : !ids ? "ids" : "rollout");
    const attn_decoder_config *c = attn_decoder_get_config(m);
    float *patterns = NULL;
    attn_status st = all_patterns(m, ids, L, &patterns);
    if (!st) st = attn_attention_rollout(patterns, c->n_layers, c->n_heads, L, head, residual, rollout);
    free(patterns);
    return st;
}

attn_status attn_model_flow(const attn_decoder *m, const int32_t *ids, int64_t L, int64_t head, double residual,
                            int64_t position, double *flow) {
    if (!m || !ids || !flow)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_model_flow: %s is NULL",
                          !m ? "the decoder" : !ids ? "ids" : "flow");
    const attn_decoder_config *c = attn_decoder_get_config(m);
    float *patterns = NULL;
    attn_status st = all_patterns(m, ids, L, &patterns);
    if (!st) st = attn_attention_flow(patterns, c->n_layers, c->n_heads, L, head, residual, position, flow);
    free(patterns);
    return st;
}
