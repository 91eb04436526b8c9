/*
 * paths.c — the path decomposition (Figure 2) of every head of a decoder
 * and the null-space search on one head's weight row, both on the tensors
 * a forward's hooks show: each layer's rotated queries and keys and its
 * values (hook_rot_q, hook_rot_k, hook_v), its pattern.
 *
 * Shape legend: L tokens, N layers, Hq / Hkv heads, Dh head width;
 *   rot_q [1, L, Hq, Dh]  rot_k, v [1, L, Hkv, Dh]  pattern [Hq, L, L]
 *   head paths [N, Hq]
 */
#include "interp/model/model_interp.h"

#include <math.h>
#include <stdlib.h>

attn_status attn_model_paths_each(const attn_decoder *m, const int32_t *base, const int32_t *changed, int64_t L,
                                  attn_model_layer_paths_fn each, void *user) {
    if (!m || !base || !changed || !each)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_model_paths_each: %s is NULL",
                          !m ? "the decoder" : !base ? "base" : !changed ? "changed" : "each");
    const attn_decoder_config *c = attn_decoder_get_config(m);
    const int64_t Hq = c->n_heads, Hkv = c->n_kv_heads, Dh = c->head_dim;
    /* Every layer's rotated queries and keys and its values, of both runs. */
    const attn_model_patch want[3] = {{.kind = ATTN_MODEL_PATCH_SOURCE, .point = ATTN_DECODER_HOOK_ROT_Q, .layer = ATTN_ALL},
                                      {.kind = ATTN_MODEL_PATCH_SOURCE, .point = ATTN_DECODER_HOOK_ROT_K, .layer = ATTN_ALL},
                                      {.kind = ATTN_MODEL_PATCH_SOURCE, .point = ATTN_DECODER_HOOK_V, .layer = ATTN_ALL}};
    attn_model_record rb = {0}, rc = {0};
    attn_status st = attn__model_record(m, base, L, want, 3, &rb);
    if (!st) st = attn__model_record(m, changed, L, want, 3, &rc);
    for (int64_t l = 0; l < c->n_layers && !st; l++) {
        const kept_tensor *q = attn__model_record_find(&rb, ATTN_DECODER_HOOK_ROT_Q, l),
                          *k = attn__model_record_find(&rb, ATTN_DECODER_HOOK_ROT_K, l),
                          *v = attn__model_record_find(&rb, ATTN_DECODER_HOOK_V, l),
                          *q2 = attn__model_record_find(&rc, ATTN_DECODER_HOOK_ROT_Q, l),
                          *k2 = attn__model_record_find(&rc, ATTN_DECODER_HOOK_ROT_K, l),
                          *v2 = attn__model_record_find(&rc, ATTN_DECODER_HOOK_V, l);
        attn_tensor tq = attn_tensor_4d(q->data, 1, L, Hq, Dh), tk = attn_tensor_4d(k->data, 1, L, Hkv, Dh),
                    tv = attn_tensor_4d(v->data, 1, L, Hkv, Dh), tq2 = attn_tensor_4d(q2->data, 1, L, Hq, Dh),
                    tk2 = attn_tensor_4d(k2->data, 1, L, Hkv, Dh), tv2 = attn_tensor_4d(v2->data, 1, L, Hkv, Dh);
        attn_sdpa_options opt;
        attn__model_layer_options(c, l, &opt);
        attn_paths p = {0};
        if ((st = attn_sdpa_paths(&tq, &tk, &tv, &tq2, &tk2, &tv2, &opt, &p)))
            attn__fail(st, "layer %lld: %s", (long long)l, attn_last_error());
        else
            st = each(user, l, &p);
        attn_paths_free(&p);
    }
    attn__model_record_clear(&rb);
    attn__model_record_clear(&rc);
    return st;
}

/* The L2 norm of a - b (b NULL: of a) over n floats, in double. */
static double diff_norm(const float *a, const float *b, int64_t n) {
    double ss = 0;
    for (int64_t i = 0; i < n; i++) {
        const double x = (double)a[i] - (b ? (double)b[i] : 0.0);
        ss += x * x;
    }
    return sqrt(ss);
}

typedef struct head_paths_at {
    attn_model_head_paths *out;
    int64_t pos, heads;
} head_paths_at;

/* attn_model_paths' reduction of one layer: the norms at one position. */
static attn_status reduce_layer(void *user, int64_t layer, attn_paths *p) {
    const head_paths_at *r = user;
    const int64_t Dh = p->run[ATTN_PATH_BASE].value_dim;
    for (int64_t h = 0; h < r->heads; h++) {
        const int64_t at = (r->pos * r->heads + h) * Dh;
        attn_model_head_paths *o = &r->out[layer * r->heads + h];
        o->weight = diff_norm(p->run[ATTN_PATH_K_ONLY].z + at, p->run[ATTN_PATH_BASE].z + at, Dh);
        o->content = diff_norm(p->run[ATTN_PATH_V_ONLY].z + at, p->run[ATTN_PATH_BASE].z + at, Dh);
        o->interaction = diff_norm(p->interaction_z + at, NULL, Dh);
        o->changed = diff_norm(p->run[ATTN_PATH_CHANGED].z + at, p->run[ATTN_PATH_BASE].z + at, Dh);
        o->base = diff_norm(p->run[ATTN_PATH_BASE].z + at, NULL, Dh);
    }
    return ATTN_OK;
}

attn_status attn_model_paths(const attn_decoder *m, const int32_t *base, const int32_t *changed, int64_t L,
                             int64_t pos, attn_model_head_paths *out) {
    if (!m || !out)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_model_paths: %s is NULL", !m ? "the decoder" : "out");
    if (pos < 0) pos += L;
    if (pos < 0 || pos >= L)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "position %lld is outside the %lld tokens", (long long)pos,
                          (long long)L);
    head_paths_at r = {out, pos, attn_decoder_get_config(m)->n_heads};
    return attn_model_paths_each(m, base, changed, L, reduce_layer, &r);
}

attn_status attn_model_nullspace(const attn_decoder *m, const int32_t *ids, int64_t L, int64_t layer, int64_t head,
                                 int64_t pos, const attn_nullspace_options *opt, float *weights, double *moved,
                                 attn_nullspace_result *result) {
    if (!m || !ids || !weights || !moved || !result)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_model_nullspace: %s is NULL",
                          !m ? "the decoder" : !ids ? "ids" : !weights ? "weights" : !moved ? "moved" : "result");
    const attn_decoder_config *c = attn_decoder_get_config(m);
    if (pos < 0) pos += L;
    if (layer < 0 || layer >= c->n_layers || head < 0 || head >= c->n_heads || pos < 0 || pos >= L)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "layer %lld, head %lld, position %lld: the model has %lld "
                          "layers of %lld heads, the text %lld tokens", (long long)layer, (long long)head,
                          (long long)pos, (long long)c->n_layers, (long long)c->n_heads, (long long)L);
    const attn_model_patch want[2] = {{.kind = ATTN_MODEL_PATCH_SOURCE, .point = ATTN_DECODER_HOOK_PATTERN, .layer = layer},
                                      {.kind = ATTN_MODEL_PATCH_SOURCE, .point = ATTN_DECODER_HOOK_V, .layer = layer}};
    attn_model_record s = {0};
    attn_status st = attn__model_record(m, ids, L, want, 2, &s);
    if (st) return st;
    const kept_tensor *p = attn__model_record_find(&s, ATTN_DECODER_HOOK_PATTERN, layer),
                      *v = attn__model_record_find(&s, ATTN_DECODER_HOOK_V, layer);
    const int64_t Dh = c->head_dim, Hkv = c->n_kv_heads, kv = head / (c->n_heads / Hkv);
    float *values = malloc((size_t)(L * Dh) * sizeof *values);
    uint8_t *visible = malloc((size_t)L);
    if (!values || !visible) {
        st = attn__fail(ATTN_ERR_OUT_OF_MEMORY, "out of memory");
        goto done;
    }
    /* The keys this query may read (those are exactly the entries the
     * softmax gave weight to, or could). */
    attn__model_visible_row(c, layer, pos, L, visible);
    for (int64_t j = 0; j < L; j++) {
        weights[j] = p->data[(head * L + pos) * L + j];
        memcpy(values + j * Dh, v->data + (j * Hkv + kv) * Dh, (size_t)Dh * sizeof(float));
    }
    attn_nullspace_options defaults = ATTN_NULLSPACE_OPTIONS_INIT;
    st = attn_nullspace_search(weights, values, L, Dh, visible, opt ? opt : &defaults, moved, result);
done:
    free(values);
    free(visible);
    attn__model_record_clear(&s);
    return st;
}
