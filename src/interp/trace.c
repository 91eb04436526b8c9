/*
 * trace.c — the recorded forward pass: the trace's buffers, and viewing one
 * hook as an array (its name from the one vocabulary, hook_names.c).
 *
 * Shape legend: q [B, L, Hq, D]  k [B, S, Hkv, D]  v [B, S, Hkv, Dv]
 *               scores, pattern [B, Hq, L, S]  z [B, L, Hq, Dv]
 *               result [B, L, Hq, d_out]  attn_out [B, L, d_out]
 */
#include "interp/interp.h"

#include <stdlib.h>
#include <string.h>

/* TransformerLens's axis names, in the order of each hook's shape. */
static const char *const hook_axes[ATTN_HOOK_COUNT] = {
    "batch pos head_index d_head",       "batch pos kv_head_index d_head",
    "batch pos kv_head_index d_head",    "batch head_index query_pos key_pos",
    "batch head_index query_pos key_pos", "batch pos head_index d_head",
    "batch pos head_index d_model",      "batch pos d_model"};

void attn_trace_free(attn_trace *t) {
    if (!t) return;
    free(t->q);
    free(t->k);
    free(t->v);
    free(t->scores);
    free(t->pattern);
    free(t->z);
    free(t->result);
    free(t->attn_out);
    memset(t, 0, sizeof *t);
}

/* *count = product of n sizes; false on overflow or a size that would not
 * fit a malloc. */
static bool count_of(const int64_t *sizes, int n, int64_t *count) {
    int64_t c = 1;
    for (int i = 0; i < n; i++)
        if (mul_overflows(c, sizes[i], &c)) return false;
    if (c > INT64_MAX / (int64_t)sizeof(float)) return false;
    *count = c;
    return true;
}

/* The shape of a hook for the sizes of t (ndim 0 when t has no such hook). */
static int hook_shape(const attn_trace *t, attn_hook hook, int64_t shape[4]) {
    const int64_t B = t->batch, L = t->len, S = t->context_len;
    int64_t s[4] = {B, 0, 0, 0};
    switch (hook) {
    case ATTN_HOOK_Q: s[1] = L; s[2] = t->heads; s[3] = t->head_dim; break;
    case ATTN_HOOK_K: s[1] = S; s[2] = t->kv_heads; s[3] = t->head_dim; break;
    case ATTN_HOOK_V: s[1] = S; s[2] = t->kv_heads; s[3] = t->value_dim; break;
    case ATTN_HOOK_ATTN_SCORES:
    case ATTN_HOOK_PATTERN: s[1] = t->heads; s[2] = L; s[3] = S; break;
    case ATTN_HOOK_Z: s[1] = L; s[2] = t->heads; s[3] = t->value_dim; break;
    case ATTN_HOOK_RESULT:
        if (!t->d_out) return 0;
        s[1] = L; s[2] = t->heads; s[3] = t->d_out;
        break;
    case ATTN_HOOK_ATTN_OUT:
        if (!t->d_out) return 0;
        s[1] = L; s[2] = t->d_out;
        memcpy(shape, s, sizeof s);
        return 3;
    default: return 0;
    }
    memcpy(shape, s, sizeof s);
    return 4;
}

static float **hook_buffer(attn_trace *t, attn_hook hook) {
    float **buffers[ATTN_HOOK_COUNT] = {&t->q, &t->k, &t->v, &t->scores, &t->pattern,
                                        &t->z, &t->result, &t->attn_out};
    return (unsigned)hook < ATTN_HOOK_COUNT ? buffers[hook] : NULL;
}

attn_status attn__trace_alloc(attn_trace *t) {
    for (int h = 0; h < ATTN_HOOK_COUNT; h++) {
        int64_t shape[4], count;
        int ndim = hook_shape(t, (attn_hook)h, shape);
        if (!ndim) continue;
        if (!count_of(shape, ndim, &count)) {
            attn_trace_free(t);
            return attn__fail(ATTN_ERR_OVERFLOW, "trace: the size of %s overflows", attn_hook_name((attn_hook)h));
        }
        float **buffer = hook_buffer(t, (attn_hook)h);
        *buffer = malloc((size_t)count * sizeof(float));
        if (!*buffer) {
            attn_trace_free(t);
            return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "trace: cannot allocate %s (%lld floats)",
                             attn_hook_name((attn_hook)h), (long long)count);
        }
    }
    return ATTN_OK;
}

attn_status attn_trace_get(const attn_trace *t, attn_hook hook, attn_hook_tensor *view) {
    if (!t || !view)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_trace_get: %s is NULL", !t ? "trace" : "view");
    if ((unsigned)hook >= ATTN_HOOK_COUNT)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_trace_get: hook %d is not a hook", (int)hook);
    memset(view, 0, sizeof *view);
    int ndim = hook_shape(t, hook, view->shape);
    float *data = *hook_buffer((attn_trace *)t, hook);
    if (!ndim)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT,
                         "attn_trace_get: a bare-attention trace has no %s (there is no W_O)",
                         attn_hook_name(hook));
    if (!data)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_trace_get: the trace holds no %s (empty trace?)",
                         attn_hook_name(hook));
    view->hook = hook;
    view->name = attn_hook_name(hook);
    view->data = data;
    view->ndim = ndim;
    view->axes = hook_axes[hook];
    return ATTN_OK;
}

bool attn__hook_rows(const attn_trace *t, attn_hook hook, hook_rows *r) {
    int64_t shape[4];
    if (hook != ATTN_HOOK_Q && hook != ATTN_HOOK_K && hook != ATTN_HOOK_V &&
        hook != ATTN_HOOK_PATTERN && hook != ATTN_HOOK_Z)
        return false;
    hook_shape(t, hook, shape);
    r->data = *hook_buffer((attn_trace *)t, hook);
    r->batch = shape[0];
    r->head_major = hook == ATTN_HOOK_PATTERN;
    r->heads = r->head_major ? shape[1] : shape[2];
    r->positions = r->head_major ? shape[2] : shape[1];
    r->width = shape[3];
    return true;
}
