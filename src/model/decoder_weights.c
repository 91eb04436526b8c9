/*
 * decoder_weights.c — a loaded decoder's weights by name, as its forward
 * uses them (attn_decoder_weight, attn_decoder.h): what Python's
 * TransformerLens-style W_Q, W_O, ... read, for a GGUF file and a Hugging
 * Face checkpoint alike (the checkpoint's weights are held under the same
 * fields; the names asked for are GGUF's).
 *
 * Shape legend: a projection W [d_out, d_in] row-major (y = x . W^T), a
 * vector [n] (rows n, cols 1).
 */
#include "model/arch.h"
#include "model/decoder.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* name = "blk.N.SUFFIX" with SUFFIX one of names->layer: *layer and the
 * tensor's index; false otherwise. */
static bool layer_tensor_of(const arch_tensor_names *names, const char *name, int64_t *layer, int *index) {
    const size_t prefix = strlen(names->layer_prefix);
    if (strncmp(name, names->layer_prefix, prefix) != 0) return false;
    const char *p = name + prefix;
    int64_t l = 0;
    if (*p < '0' || *p > '9') return false;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (l > (INT64_MAX - 9) / 10) return false;
        l = l * 10 + (*p - '0');
    }
    if (*p++ != '.') return false;
    for (int i = 0; i < ARCH_LAYER_TENSORS; i++)
        if (names->layer[i] && strcmp(p, names->layer[i]) == 0) {
            *layer = l;
            *index = i;
            return true;
        }
    return false;
}

attn_status attn_decoder_weight(const attn_decoder *m, const char *name, float *out, int64_t capacity, int64_t *rows,
                                int64_t *cols) {
    if (!m || !name || !rows || !cols)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_decoder_weight: %s is NULL",
                          !m ? "the decoder" : !name ? "name" : !rows ? "rows" : "cols");
    const attn_decoder_config *c = &m->cfg;
    const arch_tensor_names *names = attn__arch_of(c->arch)->gguf;
    const float *vec = NULL;
    int64_t vec_n = 0;
    const decoder_weight *mat = NULL;
    int64_t layer;
    int index;
    if (strcmp(name, names->embed) == 0) {
        mat = &m->token_embd;
    } else if (strcmp(name, names->output) == 0) {
        mat = &m->output; /* the embedding itself when tied */
    } else if (strcmp(name, names->output_norm) == 0) {
        vec = m->output_norm;
        vec_n = c->d_model;
    } else if (layer_tensor_of(names, name, &layer, &index)) {
        if (layer >= c->n_layers)
            return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_decoder_weight: %s: the model has %lld layers", name,
                              (long long)c->n_layers);
        float **v;
        decoder_weight *w;
        attn__decoder_layer_slot(&m->layers[layer], index, &v, &w);
        if (v) {
            vec = *v;
            vec_n = index == ARCH_Q_NORM || index == ARCH_K_NORM ? c->head_dim
                    : index == ARCH_Q_BIAS                       ? c->n_heads * c->head_dim
                    : index == ARCH_K_BIAS || index == ARCH_V_BIAS ? c->n_kv_heads * c->head_dim
                                                                   : c->d_model;
        } else if (w->q.data || w->f32) {
            mat = w;
        }
        if (!vec && !mat)
            return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_decoder_weight: this %s model has no %s",
                              c->architecture, name);
    } else {
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT,
                          "attn_decoder_weight: '%s' is not a weight name (GGUF's: token_embd.weight, "
                          "output.weight, output_norm.weight, blk.N.attn_q.weight, ...)", name);
    }
    *rows = mat ? mat->q.rows : vec_n;
    *cols = mat ? mat->q.cols : 1;
    if (!out) return ATTN_OK;
    if (capacity < *rows * *cols)
        return attn__fail(ATTN_ERR_SHAPE, "attn_decoder_weight: %s has %lld x %lld values, out holds %lld", name,
                          (long long)*rows, (long long)*cols, (long long)capacity);
    if (vec) {
        memcpy(out, vec, (size_t)vec_n * sizeof *out);
        return ATTN_OK;
    }
    if (mat->f32) {
        memcpy(out, mat->f32, (size_t)(*rows * *cols) * sizeof *out);
        return ATTN_OK;
    }
    return attn_quant_dequantize_rows(&mat->q, 0, mat->q.rows, out);
}
