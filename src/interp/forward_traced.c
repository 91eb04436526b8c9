/*
 * forward_traced.c — attention and multi-head attention with every
 * intermediate recorded (the hooks of trace.c) and patches applied on the
 * way.  The arithmetic is the library's own: projections by
 * attn_linear_forward, scores by attn_sdpa_scores, pattern and z by
 * attn_sdpa_forward.  Only when the pattern itself is patched is z computed
 * here, as the weighted sum of v under the patched pattern.
 *
 * Shape legend:
 *   x [B, L, d_model]   context [B, S, d_context]
 *   q [B, L, Hq, D]  k [B, S, Hkv, D]  v [B, S, Hkv, Dv]
 *   scores, pattern [B, Hq, L, S]  z [B, L, Hq, Dv]
 *   result [B, L, Hq, d_out]  attn_out, out [B, L, d_out]
 */
#include "interp/interp.h"

#include <stdlib.h>
#include <string.h>

/* z = pattern . v for the (batch, head, query) rows a pattern patch
 * touched, accumulated in double; keys with weight exactly 0 are skipped, as
 * the reference kernel skips hidden keys.  Untouched rows keep the kernel's
 * z bit for bit. */
static void weighted_sum(attn_trace *t, const uint8_t *touched) {
    const int64_t group = t->heads / t->kv_heads, L = t->len, S = t->context_len, Dv = t->value_dim;
    for (int64_t b = 0; b < t->batch; b++)
        for (int64_t h = 0; h < t->heads; h++)
            for (int64_t i = 0; i < L; i++) {
                const int64_t row = (b * t->heads + h) * L + i;
                if (!touched[row]) continue;
                const float *pattern_bhi = t->pattern + row * S;
                float *z_bih = t->z + ((b * L + i) * t->heads + h) * Dv;
                for (int64_t d = 0; d < Dv; d++) {
                    double acc = 0.0;
                    for (int64_t j = 0; j < S; j++)
                        if (pattern_bhi[j] != 0.0f)
                            acc += (double)pattern_bhi[j] *
                                   (double)t->v[((b * S + j) * t->kv_heads + h / group) * Dv + d];
                    z_bih[d] = (float)acc;
                }
            }
}

/* The attention step on a trace whose q, k, v are filled: q/k/v patches,
 * scores, pattern and z, pattern patches, z patches. */
static attn_status attend(attn_trace *t, const attn_sdpa_options *opt, const attn_patch *patches,
                          int n_patches) {
    attn_status st;
    if ((st = attn_patches_apply(t, patches, n_patches, PATCH_STAGE_QKV, NULL))) return st;
    attn_tensor q = attn_tensor_4d(t->q, t->batch, t->len, t->heads, t->head_dim);
    attn_tensor k = attn_tensor_4d(t->k, t->batch, t->context_len, t->kv_heads, t->head_dim);
    attn_tensor v = attn_tensor_4d(t->v, t->batch, t->context_len, t->kv_heads, t->value_dim);
    attn_tensor z = attn_tensor_4d(t->z, t->batch, t->len, t->heads, t->value_dim);
    if ((st = attn_sdpa_scores(&q, &k, opt, t->scores)) ||
        (st = attn_sdpa_forward(&q, &k, &v, opt, &z, t->pattern, NULL)))
        return st;
    bool pattern_patches = false;
    for (int i = 0; i < n_patches; i++) pattern_patches |= patches[i].hook == ATTN_HOOK_PATTERN;
    if (pattern_patches) {
        /* One byte per pattern row; sizes were checked when the trace was allocated. */
        uint8_t *touched = calloc((size_t)(t->batch * t->heads * t->len), 1);
        if (!touched) return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "trace: cannot allocate the pattern row flags");
        st = attn_patches_apply(t, patches, n_patches, PATCH_STAGE_PATTERN, touched);
        if (!st) weighted_sum(t, touched);
        free(touched);
        if (st) return st;
    }
    return attn_patches_apply(t, patches, n_patches, PATCH_STAGE_Z, NULL);
}

/* Copies a strided tensor into a contiguous [B, P, H, W] buffer. */
static void gather(const attn_tensor *src, float *dst) {
    const int64_t W = src->shape[3];
    for (int64_t b = 0; b < src->shape[0]; b++)
        for (int64_t p = 0; p < src->shape[1]; p++)
            for (int64_t h = 0; h < src->shape[2]; h++) {
                memcpy(dst, attn_row(src, b, p, h), (size_t)W * sizeof(float));
                dst += W;
            }
}

/* The caller's trace, or a local one when it passed NULL; on failure the
 * trace is freed (and so left zeroed). */
static attn_status finish(attn_trace *t, attn_trace *caller, attn_status st) {
    if (st || !caller) attn_trace_free(t);
    return st;
}

attn_status attn_sdpa_forward_traced(const attn_tensor *q, const attn_tensor *k,
                                     const attn_tensor *v, const attn_sdpa_options *opt,
                                     const attn_patch *patches, int n_patches,
                                     attn_trace *trace, attn_tensor *out) {
    attn_problem p;
    attn_status st;
    if (!v) return attn_fail(ATTN_ERR_INVALID_ARGUMENT, "v is NULL");
    if (!out && !trace)
        return attn_fail(ATTN_ERR_INVALID_ARGUMENT, "out and trace are both NULL: nothing to write");
    if ((st = attn_problem_init(&p, q, k, v, out, opt))) return st;

    attn_trace local = {0}, *t = trace ? trace : &local;
    memset(t, 0, sizeof *t);
    t->batch = p.batch;
    t->len = p.len_q;
    t->context_len = p.len_kv;
    t->heads = p.heads_q;
    t->kv_heads = p.heads_kv;
    t->head_dim = p.dim;
    t->value_dim = p.dim_v;
    if ((st = attn_patches_check(t, patches, n_patches)) || (st = attn_trace_alloc(t)))
        return finish(t, trace, st);
    gather(q, t->q);
    gather(k, t->k);
    gather(v, t->v);
    if ((st = attend(t, opt, patches, n_patches))) return finish(t, trace, st);
    if (out) {
        const float *z = t->z;
        for (int64_t b = 0; b < t->batch; b++)
            for (int64_t i = 0; i < t->len; i++)
                for (int64_t h = 0; h < t->heads; h++, z += t->value_dim)
                    memcpy(attn_row(out, b, i, h), z, (size_t)t->value_dim * sizeof(float));
    }
    return finish(t, trace, ATTN_OK);
}

/* hook_result: each head's z through its rows h*Dv .. h*Dv+Dv-1 of W_O
 * (without W_O, the identity: head h fills columns h*Dv ..). */
static attn_status head_results(const attn_mha *m, attn_trace *t) {
    const int64_t rows = t->batch * t->len, Hq = t->heads, Dv = t->value_dim, d_out = t->d_out;
    if (!m->wo) {
        memset(t->result, 0, (size_t)(rows * Hq * d_out) * sizeof(float));
        for (int64_t r = 0; r < rows; r++)
            for (int64_t h = 0; h < Hq; h++)
                memcpy(t->result + (r * Hq + h) * d_out + h * Dv, t->z + (r * Hq + h) * Dv,
                       (size_t)Dv * sizeof(float));
        return ATTN_OK;
    }
    attn_status st = ATTN_OK;
    float *z_h = malloc((size_t)(rows * Dv) * sizeof(float));
    float *result_h = malloc((size_t)(rows * d_out) * sizeof(float));
    if (!z_h || !result_h) {
        st = attn_fail(ATTN_ERR_OUT_OF_MEMORY, "mha trace: cannot allocate one head's z and result");
        goto cleanup;
    }
    for (int64_t h = 0; h < Hq; h++) {
        for (int64_t r = 0; r < rows; r++)
            memcpy(z_h + r * Dv, t->z + (r * Hq + h) * Dv, (size_t)Dv * sizeof(float));
        if ((st = attn_linear_forward(z_h, rows, Dv, m->wo + h * Dv * d_out, NULL, d_out, result_h)))
            goto cleanup;
        for (int64_t r = 0; r < rows; r++)
            memcpy(t->result + (r * Hq + h) * d_out, result_h + r * d_out, (size_t)d_out * sizeof(float));
    }
cleanup:
    free(z_h);
    free(result_h);
    return st;
}

attn_status attn_mha_forward_traced(const attn_mha *module, const float *x, int64_t batch,
                                    int64_t len, const float *context, int64_t context_len,
                                    const attn_sdpa_options *opt, const attn_patch *patches,
                                    int n_patches, attn_trace *trace, float *out) {
    attn_mha m = {0};
    int64_t rows_q, rows_kv;
    attn_status st = attn_mha_check_call(module, &m, x, batch, len, &context, &context_len, &rows_q, &rows_kv);
    if (st) return st;
    if (!out && !trace)
        return attn_fail(ATTN_ERR_INVALID_ARGUMENT, "out and trace are both NULL: nothing to write");

    attn_trace local = {0}, *t = trace ? trace : &local;
    memset(t, 0, sizeof *t);
    t->batch = batch;
    t->len = len;
    t->context_len = context_len;
    t->heads = m.heads;
    t->kv_heads = m.kv_heads;
    t->head_dim = m.head_dim;
    t->value_dim = m.value_dim;
    t->d_out = m.d_out;
    if ((st = attn_patches_check(t, patches, n_patches)) || (st = attn_trace_alloc(t)))
        return finish(t, trace, st);
    /* The same calls, in the same order, as attn_mha_forward: without patches
     * every hook and the output are bit-identical to it. */
    if ((st = attn_linear_forward(x, rows_q, m.d_model, m.wq, m.bq, m.heads * m.head_dim, t->q)) ||
        (st = attn_linear_forward(context, rows_kv, m.d_context, m.wk, m.bk, m.kv_heads * m.head_dim, t->k)) ||
        (st = attn_linear_forward(context, rows_kv, m.d_context, m.wv, m.bv, m.kv_heads * m.value_dim, t->v)) ||
        (st = attend(t, opt, patches, n_patches)) || (st = head_results(&m, t)))
        return finish(t, trace, st);
    if (m.wo) {
        st = attn_linear_forward(t->z, rows_q, m.heads * m.value_dim, m.wo, m.bo, m.d_out, t->attn_out);
        if (st) return finish(t, trace, st);
    } else {
        /* As attn_mha_forward: out = Z, plus bo only when there is one
         * (adding 0 would turn -0 into +0). */
        memcpy(t->attn_out, t->z, (size_t)(rows_q * m.d_out) * sizeof(float));
        if (m.bo)
            for (int64_t r = 0; r < rows_q; r++)
                for (int64_t o = 0; o < m.d_out; o++) t->attn_out[r * m.d_out + o] += m.bo[o];
    }
    if (out) memcpy(out, t->attn_out, (size_t)(rows_q * m.d_out) * sizeof(float));
    return finish(t, trace, ATTN_OK);
}
