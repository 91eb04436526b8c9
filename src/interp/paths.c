/*
 * paths.c — the path decomposition of Figure 2: with the base queries held
 * fixed, swap in the changed keys, the changed values, or both, and compare.
 * Each case is a traced forward pass of the base input with hook_k / hook_v
 * patched from the changed input's pass (activation patching), so the
 * decomposition runs through exactly the code a user's own patches do.
 *
 * Shape legend: z [B, L, Hq, Dv]  result [B, L, Hq, d_out]  out [B, L, d_out]
 */
#include "interp/interp.h"

#include <stdlib.h>
#include <string.h>

static const char *const case_names[ATTN_PATH_CASES] = {"base", "K only", "V only", "both", "changed"};

const char *attn_path_case_name(attn_path_case c) {
    return (unsigned)c < ATTN_PATH_CASES ? case_names[c] : NULL;
}

void attn_paths_free(attn_paths *paths) {
    if (!paths) return;
    for (int c = 0; c < ATTN_PATH_CASES; c++) attn_trace_free(&paths->run[c]);
    free(paths->interaction_z);
    free(paths->interaction_result);
    free(paths->interaction_out);
    memset(paths, 0, sizeof *paths);
}

/* The patches that turn the base pass into case c, taking hook_k and/or
 * hook_v from the changed pass; returns how many. */
static int case_patches(attn_path_case c, const attn_trace *changed, attn_patch patches[2]) {
    int n = 0;
    if (c == ATTN_PATH_K_ONLY || c == ATTN_PATH_BOTH) {
        patches[n] = attn_patch_make(ATTN_PATCH_REPLACE, ATTN_HOOK_K);
        patches[n++].source = changed;
    }
    if (c == ATTN_PATH_V_ONLY || c == ATTN_PATH_BOTH) {
        patches[n] = attn_patch_make(ATTN_PATCH_REPLACE, ATTN_HOOK_V);
        patches[n++].source = changed;
    }
    return n;
}

/* interaction = both - K only - V only + base over the n floats of one
 * hook, malloc'd; NULL when out of memory. */
static float *interaction(const attn_paths *paths, attn_hook hook, int64_t n) {
    const float *cases[4];
    for (int c = 0; c < 4; c++) {
        attn_hook_tensor view;
        if (attn_trace_get(&paths->run[c], hook, &view)) return NULL;
        cases[c] = view.data;
    }
    float *out = malloc((size_t)n * sizeof(float));
    if (!out) return NULL;
    for (int64_t i = 0; i < n; i++)
        out[i] = (float)((double)cases[ATTN_PATH_BOTH][i] - (double)cases[ATTN_PATH_K_ONLY][i] -
                         (double)cases[ATTN_PATH_V_ONLY][i] + (double)cases[ATTN_PATH_BASE][i]);
    return out;
}

static attn_status interactions(attn_paths *paths) {
    const attn_trace *t = &paths->run[ATTN_PATH_BASE];
    const int64_t rows = t->batch * t->len;
    paths->interaction_z = interaction(paths, ATTN_HOOK_Z, rows * t->heads * t->value_dim);
    if (!paths->interaction_z) goto oom;
    if (t->d_out) {
        paths->interaction_result = interaction(paths, ATTN_HOOK_RESULT, rows * t->heads * t->d_out);
        paths->interaction_out = interaction(paths, ATTN_HOOK_ATTN_OUT, rows * t->d_out);
        if (!paths->interaction_result || !paths->interaction_out) goto oom;
    }
    return ATTN_OK;
oom:
    return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "paths: cannot allocate the interaction terms");
}

static bool same_shape(const attn_tensor *a, const attn_tensor *b) {
    for (int d = 0; d < 4; d++)
        if (a->shape[d] != b->shape[d]) return false;
    return true;
}

attn_status attn_sdpa_paths(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                            const attn_tensor *q_changed, const attn_tensor *k_changed,
                            const attn_tensor *v_changed, const attn_sdpa_options *opt,
                            attn_paths *paths) {
    if (!paths) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "paths is NULL");
    memset(paths, 0, sizeof *paths);
    if (!q || !k || !v)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "paths: %s is NULL", !q ? "q" : !k ? "k" : "v");
    const attn_tensor *changed[3] = {q_changed ? q_changed : q, k_changed ? k_changed : k,
                                     v_changed ? v_changed : v};
    const attn_tensor *base[3] = {q, k, v};
    static const char *const names[3] = {"q_changed", "k_changed", "v_changed"};
    for (int i = 0; i < 3; i++)
        if (!same_shape(base[i], changed[i]))
            return attn__fail(ATTN_ERR_SHAPE,
                             "paths: %s is [%lld, %lld, %lld, %lld] but the base is [%lld, %lld, %lld, %lld]",
                             names[i], (long long)changed[i]->shape[0], (long long)changed[i]->shape[1],
                             (long long)changed[i]->shape[2], (long long)changed[i]->shape[3],
                             (long long)base[i]->shape[0], (long long)base[i]->shape[1],
                             (long long)base[i]->shape[2], (long long)base[i]->shape[3]);
    attn_status st;
    if ((st = attn_sdpa_forward_traced(q, k, v, opt, NULL, 0, &paths->run[ATTN_PATH_BASE], NULL)) ||
        (st = attn_sdpa_forward_traced(changed[0], changed[1], changed[2], opt, NULL, 0,
                                       &paths->run[ATTN_PATH_CHANGED], NULL)))
        goto fail;
    for (int c = ATTN_PATH_K_ONLY; c <= ATTN_PATH_BOTH; c++) {
        attn_patch patches[2];
        int n = case_patches((attn_path_case)c, &paths->run[ATTN_PATH_CHANGED], patches);
        if ((st = attn_sdpa_forward_traced(q, k, v, opt, patches, n, &paths->run[c], NULL))) goto fail;
    }
    if ((st = interactions(paths))) goto fail;
    return ATTN_OK;
fail:
    attn_paths_free(paths);
    return st;
}

attn_status attn_mha_paths(const attn_mha *m, const float *x, const float *x_changed,
                           int64_t batch, int64_t len, const float *context,
                           const float *context_changed, int64_t context_len,
                           const attn_sdpa_options *opt, attn_paths *paths) {
    if (!paths) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "paths is NULL");
    memset(paths, 0, sizeof *paths);
    if (!x_changed) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "paths: x_changed is NULL");
    if (!context && context_changed)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT,
                         "paths: context_changed is given but context is NULL (self-attention: "
                         "change x_changed instead)");
    attn_status st;
    if ((st = attn_mha_forward_traced(m, x, batch, len, context, context_len, opt, NULL, 0,
                                      &paths->run[ATTN_PATH_BASE], NULL)) ||
        (st = attn_mha_forward_traced(m, x_changed, batch, len,
                                      context_changed ? context_changed : context, context_len,
                                      opt, NULL, 0, &paths->run[ATTN_PATH_CHANGED], NULL)))
        goto fail;
    for (int c = ATTN_PATH_K_ONLY; c <= ATTN_PATH_BOTH; c++) {
        attn_patch patches[2];
        int n = case_patches((attn_path_case)c, &paths->run[ATTN_PATH_CHANGED], patches);
        if ((st = attn_mha_forward_traced(m, x, batch, len, context, context_len, opt, patches, n,
                                          &paths->run[c], NULL)))
            goto fail;
    }
    if ((st = interactions(paths))) goto fail;
    return ATTN_OK;
fail:
    attn_paths_free(paths);
    return st;
}
