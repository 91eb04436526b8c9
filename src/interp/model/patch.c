/*
 * patch.c — a decoder's forward with patches, ablations and a recording
 * (attn_model_run): a tensor hook that writes the selected rows of each
 * hook tensor (from the source's record, zeros, or the head's mean) and
 * adds the tensors whose names match the patterns to an .npz cache.
 *
 * Shape legend: L the target's tokens, S the source's, V vocabulary; hook
 * tensors seen as [P, H, W] (model_interp.h).
 */
#include "interp/model/model_interp.h"

#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>

/* The header's position rule, written once (attn_model_run's patches and
 * attribution patching both pair positions with it). */
attn_status attn__model_pair_positions(const int64_t *positions, int64_t count, int64_t L, int64_t S, int64_t *tgt,
                                       int64_t *src, int64_t *n) {
    if (count == 0) {
        if (L != S)
            return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "every position needs texts of the same length; the "
                              "target has %lld tokens, the source %lld: choose positions (HOOK@-1 is the last of "
                              "each)", (long long)L, (long long)S);
        for (int64_t i = 0; i < L; i++) tgt[i] = src[i] = i;
        *n = L;
        return ATTN_OK;
    }
    for (int64_t i = 0; i < count; i++) {
        const int64_t q = positions[i];
        tgt[i] = q < 0 ? L + q : q;
        src[i] = q < 0 ? S + q : q;
        if (tgt[i] < 0 || tgt[i] >= L || src[i] < 0 || src[i] >= S)
            return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "position %lld is outside the target (%lld tokens) or "
                              "the source (%lld)", (long long)q, (long long)L, (long long)S);
    }
    *n = count;
    return ATTN_OK;
}

typedef struct run_ctx {
    const attn_model_run_options *opt;
    int64_t L, S;
    int64_t *tgt, *src;     /* [max(L, S, most positions listed)]: position pairs */
    float *mean;            /* [mean_cap]: a head's mean row                      */
    int64_t mean_cap;
    attn_status failed;     /* as record.c's: the hook's own failure               */
    char message[1024];
} run_ctx;

static int fail_hook(run_ctx *c, attn_status st) {
    c->failed = st;
    snprintf(c->message, sizeof c->message, "%s", attn_last_error());
    return 1;
}

static attn_status apply_patch(run_ctx *c, const attn_model_patch *p, const attn_decoder_hook_tensor *t) {
    const hook_view v = hook_view_of(t->point, t->ndim, t->shape);
    int64_t n_pos = 0;
    const int64_t S = p->kind == ATTN_MODEL_PATCH_SOURCE ? c->S : c->L;
    attn_status st = attn__model_pair_positions(p->positions, p->n_positions, c->L, S, c->tgt, c->src, &n_pos);
    if (st) return st;
    for (int64_t i = 0; i < p->n_heads; i++)
        if (p->heads[i] < 0 || p->heads[i] >= v.H)
            return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "%s: head %lld, it has %lld (0..%lld)", t->name,
                              (long long)p->heads[i], (long long)v.H, (long long)(v.H - 1));
    const int64_t n_heads = p->n_heads ? p->n_heads : v.H;
    if (p->kind == ATTN_MODEL_PATCH_SOURCE) {
        const kept_tensor *s = attn__model_record_find(c->opt->source, t->point, t->layer);
        if (!s) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "%s: the source run did not record it", t->name);
        const hook_view sv = hook_view_of(s->point, s->ndim, s->shape);
        if (sv.W != v.W || sv.H != v.H)
            return attn__fail(ATTN_ERR_SHAPE, "%s: the source's rows are %lld x %lld wide, the target's %lld x "
                              "%lld (patch hook_pattern and hook_attn_scores between texts of one length)",
                              t->name, (long long)sv.H, (long long)sv.W, (long long)v.H, (long long)v.W);
        for (int64_t i = 0; i < n_pos; i++)
            for (int64_t k = 0; k < n_heads; k++) {
                const int64_t h = p->n_heads ? p->heads[k] : k;
                memcpy(hook_view_row(t->data, &v, c->tgt[i], h), hook_view_row(s->data, &sv, c->src[i], h),
                       (size_t)v.W * sizeof(float));
            }
        return ATTN_OK;
    }
    if (p->kind == ATTN_MODEL_ABLATE_MEAN && v.W > c->mean_cap) {
        float *grown = realloc(c->mean, (size_t)v.W * sizeof *grown);
        if (!grown)
            return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory for a mean row of %lld", t->name,
                              (long long)v.W);
        c->mean = grown;
        c->mean_cap = v.W;
    }
    for (int64_t k = 0; k < n_heads; k++) {
        const int64_t h = p->n_heads ? p->heads[k] : k;
        /* Mean ablation: the head's average over every position of this
         * run, taken before any row is overwritten. */
        if (p->kind == ATTN_MODEL_ABLATE_MEAN)
            for (int64_t e = 0; e < v.W; e++) {
                double sum = 0;
                for (int64_t q = 0; q < v.P; q++) sum += hook_view_row(t->data, &v, q, h)[e];
                c->mean[e] = (float)(sum / (double)v.P);
            }
        for (int64_t i = 0; i < n_pos; i++) {
            float *row = hook_view_row(t->data, &v, c->tgt[i], h);
            for (int64_t e = 0; e < v.W; e++) row[e] = p->kind == ATTN_MODEL_ABLATE_MEAN ? c->mean[e] : 0.0f;
        }
    }
    return ATTN_OK;
}

static bool name_matches(const attn_model_run_options *o, const char *name) {
    for (int i = 0; i < o->n_patterns; i++)
        if (fnmatch(o->patterns[i], name, 0) == 0) return true;
    return false;
}

static int run_hook(void *user, const attn_decoder_hook_tensor *t) {
    run_ctx *c = user;
    const attn_model_run_options *o = c->opt;
    for (int i = 0; i < o->n_patches; i++) {
        const attn_model_patch *p = &o->patches[i];
        if (p->point == t->point && patch_at_layer(p, t->layer, o->sweep_layer)) {
            const attn_status st = apply_patch(c, p, t);
            if (st) return fail_hook(c, st);
        }
    }
    if (o->cache && name_matches(o, t->name)) {
        attn_array a = {ATTN_F32, t->ndim, {t->shape[0], t->shape[1], t->shape[2]}, 1, t->data};
        for (int k = 0; k < t->ndim; k++) a.count *= t->shape[k];
        const attn_status st = attn_npz_add(o->cache, t->name, &a);
        if (st) return fail_hook(c, st);
        if (o->recorded) (*o->recorded)++;
    }
    return 0;
}

attn_status attn_model_run(const attn_decoder *m, const int32_t *ids, int64_t L, const attn_model_run_options *opt,
                           float *logits) {
    if (!m || !ids || !logits)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_model_run: %s is NULL",
                          !m ? "the decoder" : !ids ? "ids" : "logits");
    const attn_model_run_options defaults = ATTN_MODEL_RUN_OPTIONS_INIT;
    attn_model_run_options o;
    attn_status st = options_copy(&o, sizeof o, &defaults, opt, "attn_model_run_options");
    if (st) return st;
    const attn_decoder_config *cfg = attn_decoder_get_config(m);
    st = attn__model_patches_check(o.patches, o.n_patches, cfg->n_layers, o.source != NULL);
    if (st) return st;
    if (o.sweep_layer < -1 || o.sweep_layer >= cfg->n_layers)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "sweep_layer %lld: -1, or a layer of the model's %lld",
                          (long long)o.sweep_layer, (long long)cfg->n_layers);
    if (o.cache && (o.n_patterns < 0 || (o.n_patterns > 0 && !o.patterns)))
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "the cache's patterns: %d given%s", o.n_patterns,
                          o.n_patterns > 0 ? " but patterns is NULL" : "");
    /* Position pairs: every position of either run, or a patch's list. */
    run_ctx c = {&o, L, attn_model_record_length(o.source), NULL, NULL, NULL, 0, ATTN_OK, ""};
    int64_t most = L > c.S ? L : c.S;
    for (int i = 0; i < o.n_patches; i++) most = o.patches[i].n_positions > most ? o.patches[i].n_positions : most;
    c.tgt = malloc((size_t)most * sizeof *c.tgt);
    c.src = malloc((size_t)most * sizeof *c.src);
    if (!c.tgt || !c.src) {
        st = attn__fail(ATTN_ERR_OUT_OF_MEMORY, "out of memory");
        goto done;
    }
    attn_decoder_outputs out = ATTN_DECODER_OUTPUTS_INIT;
    out.logits = logits;
    out.last_only = 1;
    out.tensor_hook = run_hook;
    out.tensor_hook_user = &c;
    for (int i = 0; i < o.n_patches; i++) out.tensor_hook_points |= 1u << o.patches[i].point;
    /* Only the points a pattern can match: the scores cost a table of
     * their own, and a hooked pattern a copy. */
    for (int i = 0; o.cache && i < o.n_patterns; i++) {
        uint32_t points = 0;
        if ((st = attn_model_hooks_matching(cfg->n_layers, o.patterns[i], &points, NULL))) goto done;
        out.tensor_hook_points |= points;
    }
    st = attn_decoder_forward(m, ids, L, &out);
    if (c.failed) st = attn__fail(c.failed, "%s", c.message);
done:
    free(c.tgt);
    free(c.src);
    free(c.mean);
    return st;
}
