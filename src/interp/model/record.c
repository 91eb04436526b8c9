/*
 * record.c — a source run's tensors (attn_model_record_new): the
 * forward with a tensor hook that keeps a copy of each tensor the SOURCE
 * patches name, and finding them again; and the check of a patch list
 * that both the recording and a patched run make (attn__model_patches_check).
 *
 * Shape legend: S the source's tokens; each kept tensor as its hook showed
 * it ([S, d], [S, H, Dh] or [H, S, S]).
 */
#include "interp/model/model_interp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

attn_status attn__model_patches_check(const attn_model_patch *patches, int n, int64_t n_layers, bool have_source) {
    if (n < 0) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "n_patches is %d; it must be >= 0", n);
    if (n > 0 && !patches) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "patches is NULL but n_patches is %d", n);
    for (int i = 0; i < n; i++) {
        const attn_model_patch *p = &patches[i];
        char name[96];
        if ((unsigned)p->kind > ATTN_MODEL_ABLATE_MEAN)
            return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "patch %d: kind %d is not an attn_model_patch_kind", i,
                              (int)p->kind);
        if ((unsigned)p->point >= ATTN_DECODER_HOOK_POINTS)
            return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "patch %d: point %d is not a decoder hook point", i,
                              (int)p->point);
        const attn_hook_site site = (attn_hook_site)p->point;
        if (p->layer == ATTN_ALL && attn_hook_site_per_layer(site))
            snprintf(name, sizeof name, "blocks.*.%s", attn_hook_site_suffix(site));
        else
            attn_hook_site_name(site, p->layer, name, sizeof name);
        if (!attn_hook_site_per_layer(site))
            return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "patch %d: %s has no layer and cannot be patched (patch "
                              "blocks.0.hook_resid_pre for the embeddings)", i, name);
        if (p->layer != ATTN_ALL && (p->layer < 0 || p->layer >= n_layers))
            return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "patch %d: layer %lld, the model has %lld (0..%lld), or "
                              "ATTN_ALL for every layer", i, (long long)p->layer, (long long)n_layers,
                              (long long)(n_layers - 1));
        if (p->n_positions < 0 || p->n_heads < 0 || (p->n_positions && !p->positions) || (p->n_heads && !p->heads))
            return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "patch %d: %s has %lld positions and %lld heads (>= 0, "
                              "each list given when not empty)", i, name, (long long)p->n_positions,
                              (long long)p->n_heads);
        const attn_hook_layout layout = attn_hook_site_layout(site);
        if (p->n_heads && layout == ATTN_HOOK_ROWS)
            return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "patch %d: %s has no heads axis (heads apply to q, k, v, "
                              "rot_q, rot_k, attn_scores, pattern and z)", i, name);
        if (p->kind == ATTN_MODEL_ABLATE_MEAN && layout == ATTN_HOOK_HEADS_FIRST)
            return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "patch %d: mean ablation averages over positions, which "
                              "a pattern or score row cannot take (use zero ablation, or ablate hook_z)", i);
        if (p->kind == ATTN_MODEL_PATCH_SOURCE && !have_source)
            return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "patch %d: %s copies from a source run, and none was "
                              "given (attn_model_record_new)", i, name);
    }
    return ATTN_OK;
}

void attn__model_record_clear(attn_model_record *r) {
    for (int i = 0; i < r->n; i++) free(r->t[i].data);
    free(r->t);
    memset(r, 0, sizeof *r);
}

const kept_tensor *attn__model_record_find(const attn_model_record *r, attn_decoder_hook_point point, int64_t layer) {
    for (int i = 0; r && i < r->n; i++)
        if (r->t[i].point == point && r->t[i].layer == layer) return &r->t[i];
    return NULL;
}

int attn__model_record_hook(void *user, const attn_decoder_hook_tensor *t) {
    record_ctx *c = user;
    for (int i = 0; i < c->n; i++) {
        const attn_model_patch *p = &c->patches[i];
        if (p->kind != ATTN_MODEL_PATCH_SOURCE || p->point != t->point || !patch_at_layer(p, t->layer, -1) ||
            attn__model_record_find(c->record, t->point, t->layer))
            continue;
        attn_model_record *r = c->record;
        size_t count = 1;
        for (int k = 0; k < t->ndim; k++) count *= (size_t)t->shape[k];
        if (r->n == r->cap) {
            const int cap = r->cap ? 2 * r->cap : 16;
            kept_tensor *grown = realloc(r->t, (size_t)cap * sizeof *grown);
            if (!grown) goto out_of_memory;
            r->t = grown;
            r->cap = cap;
        }
        kept_tensor *kept = &r->t[r->n];
        *kept = (kept_tensor){t->point, t->layer, t->ndim, {t->shape[0], t->shape[1], t->shape[2]},
                              malloc(count * sizeof(float))};
        if (!kept->data) goto out_of_memory;
        memcpy(kept->data, t->data, count * sizeof(float));
        r->n++;
        continue;
    out_of_memory:
        c->failed = ATTN_ERR_OUT_OF_MEMORY;
        snprintf(c->message, sizeof c->message, "out of memory keeping the source's %s", t->name);
        return 1;
    }
    return 0;
}

attn_status attn__model_record(const attn_decoder *m, const int32_t *ids, int64_t L, const attn_model_patch *patches,
                               int n, attn_model_record *out) {
    memset(out, 0, sizeof *out);
    out->len = L;
    record_ctx c = {patches, n, out, ATTN_OK, ""};
    attn_decoder_outputs o = ATTN_DECODER_OUTPUTS_INIT;
    o.tensor_hook = attn__model_record_hook;
    o.tensor_hook_user = &c;
    for (int i = 0; i < n; i++)
        if (patches[i].kind == ATTN_MODEL_PATCH_SOURCE) o.tensor_hook_points |= 1u << patches[i].point;
    attn_status st = attn_decoder_forward(m, ids, L, &o);
    if (c.failed) st = attn__fail(c.failed, "%s", c.message);
    if (st) attn__model_record_clear(out);
    return st;
}

attn_status attn_model_record_new(const attn_decoder *m, const int32_t *ids, int64_t S,
                                     const attn_model_patch *patches, int n_patches, attn_model_record **out) {
    if (!m || !ids || !out)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_model_record_new: %s is NULL",
                          !m ? "the decoder" : !ids ? "ids" : "out");
    *out = NULL;
    const attn_status checked = attn__model_patches_check(patches, n_patches, attn_decoder_get_config(m)->n_layers, true);
    if (checked) return checked;
    attn_model_record *r = malloc(sizeof *r);
    if (!r) return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "out of memory for a source run's record");
    const attn_status st = attn__model_record(m, ids, S, patches, n_patches, r);
    if (st) {
        free(r);
        return st;
    }
    *out = r;
    return ATTN_OK;
}

void attn_model_record_free(attn_model_record *r) {
    if (!r) return;
    attn__model_record_clear(r);
    free(r);
}

int64_t attn_model_record_length(const attn_model_record *r) { return r ? r->len : 0; }
