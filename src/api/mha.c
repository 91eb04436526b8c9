/*
 * mha.c — multi-head attention as a module (chapter §6): three projections,
 * per-head attention with grouped-query sharing, concatenation of the heads
 * per position, and the output projection — written once, as the pass that
 * the forward, the traced forwards and the backward's recompute all run.
 *
 * Shape legend:
 *   x [B, L, d_model]   context [B, S, d_context] (= x for self-attention)
 *   Q [B, L, Hq, D]     K [B, S, Hkv, D]    V [B, S, Hkv, Dv]
 *   Z [B, L, Hq, Dv] = [B, L, Hq*Dv]        (the concatenation is free: the
 *                                            heads of a position are adjacent)
 *   result [B, L, Hq, d_out]  out [B, L, d_out]
 */
#include "api/mha.h"

#include "api/linear.h"
#include "base/overlap.h"
#include "base/problem.h"

#include <stdlib.h>
#include <string.h>

attn_status attn__mha_resolve(const attn_mha *m, attn_mha *r) {
    attn_status st;
    if (!m) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "mha module is NULL");
    static const attn_mha defaults = ATTN_MHA_INIT;
    if ((st = options_copy(r, sizeof *r, &defaults, m, "attn_mha"))) return st;
    if (!r->kv_heads) r->kv_heads = r->heads;
    if (!r->value_dim) r->value_dim = r->head_dim;
    if (!r->d_context) r->d_context = r->d_model;
    if (r->d_model <= 0 || r->d_context <= 0 || r->heads <= 0 || r->kv_heads <= 0 ||
        r->head_dim <= 0 || r->value_dim <= 0 || r->d_out <= 0)
        return attn__fail(ATTN_ERR_SHAPE,
                          "mha: sizes must be positive (d_model %lld, d_context %lld, heads %lld, "
                          "kv_heads %lld, head_dim %lld, value_dim %lld, d_out %lld)",
                          (long long)r->d_model, (long long)r->d_context, (long long)r->heads,
                          (long long)r->kv_heads, (long long)r->head_dim, (long long)r->value_dim,
                          (long long)r->d_out);
    if (r->heads % r->kv_heads)
        return attn__fail(ATTN_ERR_SHAPE, "mha: %lld query heads is not a multiple of %lld kv heads",
                          (long long)r->heads, (long long)r->kv_heads);
    if (!r->wq || !r->wk || !r->wv)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "mha: %s is NULL",
                          !r->wq ? "wq" : !r->wk ? "wk" : "wv");
    int64_t concat_width, width;
    if (mul_overflows(r->heads, r->value_dim, &concat_width) ||
        mul_overflows(r->heads, r->head_dim, &width) || mul_overflows(r->kv_heads, r->head_dim, &width) ||
        mul_overflows(r->kv_heads, r->value_dim, &width))
        return attn__fail(ATTN_ERR_OVERFLOW, "mha: heads times head width overflows");
    if (!r->wo && r->d_out != concat_width)
        return attn__fail(ATTN_ERR_SHAPE,
                          "mha: without wo the output is the concatenation, so d_out must be "
                          "heads * value_dim = %lld, got %lld",
                          (long long)concat_width, (long long)r->d_out);
    return ATTN_OK;
}

attn_status attn__mha_call_init(mha_call *c, const attn_mha *module, const float *x, int64_t batch,
                                int64_t len, const float *context, int64_t context_len) {
    attn_status st = attn__mha_resolve(module, &c->m);
    if (st) return st;
    const attn_mha *m = &c->m;
    if (!x) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "mha: x is NULL");
    if (batch <= 0 || len <= 0)
        return attn__fail(ATTN_ERR_SHAPE, "mha: batch (%lld) and length (%lld) must be positive",
                          (long long)batch, (long long)len);
    c->self = !context;
    if (!context) {
        if (m->d_context != m->d_model)
            return attn__fail(ATTN_ERR_SHAPE,
                              "mha: d_context (%lld) differs from d_model (%lld) but no context was given",
                              (long long)m->d_context, (long long)m->d_model);
        context = x;
        context_len = len;
    } else if (context_len <= 0) {
        return attn__fail(ATTN_ERR_SHAPE, "mha: context length must be positive, got %lld",
                          (long long)context_len);
    }
    c->x = x;
    c->context = context;
    c->batch = batch;
    c->len = len;
    c->context_len = context_len;
    if (mul_overflows(batch, len, &c->rows_q) || mul_overflows(batch, context_len, &c->rows_kv))
        return attn__fail(ATTN_ERR_OVERFLOW, "mha: batch * length overflows");
    return ATTN_OK;
}

int attn__mha_input_extents(const mha_call *c, const attn_sdpa_options *opt, mem_extent *e) {
    const attn_mha *m = &c->m;
    const int64_t f = (int64_t)sizeof(float), q_n = m->heads * m->head_dim, k_n = m->kv_heads * m->head_dim,
                  v_n = m->kv_heads * m->value_dim, z_n = m->heads * m->value_dim; /* checked by _resolve */
    int n = 0;
    e[n++] = extent_of_array("x", c->x, extent_mul(c->rows_q, m->d_model), f);
    e[n++] = extent_of_array("context", c->self ? NULL : c->context, extent_mul(c->rows_kv, m->d_context), f);
    e[n++] = extent_of_array("wq", m->wq, extent_mul(m->d_model, q_n), f);
    e[n++] = extent_of_array("wk", m->wk, extent_mul(m->d_context, k_n), f);
    e[n++] = extent_of_array("wv", m->wv, extent_mul(m->d_context, v_n), f);
    e[n++] = extent_of_array("wo", m->wo, extent_mul(z_n, m->d_out), f);
    e[n++] = extent_of_array("bq", m->bq, q_n, f);
    e[n++] = extent_of_array("bk", m->bk, k_n, f);
    e[n++] = extent_of_array("bv", m->bv, v_n, f);
    e[n++] = extent_of_array("bo", m->bo, m->d_out, f);
    static const attn_sdpa_options defaults = ATTN_SDPA_OPTIONS_INIT;
    attn_sdpa_options o; /* a bad opt is left for the attention call to report */
    if (opt && options_copy(&o, sizeof o, &defaults, opt, "attn_sdpa_options") == ATTN_OK)
        n += extents_of_options(&o, c->batch, m->heads, e + n);
    return n;
}

void attn__mha_trace_sizes(attn_trace *t, const mha_call *c) {
    t->batch = c->batch;
    t->len = c->len;
    t->context_len = c->context_len;
    t->heads = c->m.heads;
    t->kv_heads = c->m.kv_heads;
    t->head_dim = c->m.head_dim;
    t->value_dim = c->m.value_dim;
    t->d_out = c->m.d_out;
}

attn_status attn__alloc_floats(float **out, int64_t rows, int64_t width, const char *fn,
                               const char *what) {
    int64_t n;
    if (mul_overflows(rows, width, &n) || n > INT64_MAX / (int64_t)sizeof(float))
        return attn__fail(ATTN_ERR_OVERFLOW, "%s: the size of %s overflows", fn, what);
    *out = malloc((size_t)(n ? n : 1) * sizeof(float));
    if (!*out)
        return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "%s: cannot allocate %s (%lld floats)", fn, what,
                          (long long)n);
    return ATTN_OK;
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
    float *z_h = NULL, *result_h = NULL;
    attn_status st;
    if ((st = attn__alloc_floats(&z_h, rows, Dv, "mha trace", "one head's z")) ||
        (st = attn__alloc_floats(&result_h, rows, d_out, "mha trace", "one head's result")))
        goto cleanup;
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

attn_status attn__mha_pass(const mha_call *c, attn_trace *t, const attn_sdpa_options *opt,
                           const mha_hooks *hooks, float *lse) {
    attn_status st;
    if (c) {
        const attn_mha *m = &c->m;
        if ((st = attn_linear_forward(c->x, c->rows_q, m->d_model, m->wq, m->bq, m->heads * m->head_dim, t->q)) ||
            (st = attn_linear_forward(c->context, c->rows_kv, m->d_context, m->wk, m->bk,
                                      m->kv_heads * m->head_dim, t->k)) ||
            (st = attn_linear_forward(c->context, c->rows_kv, m->d_context, m->wv, m->bv,
                                      m->kv_heads * m->value_dim, t->v)))
            return st;
    }
    if (hooks && hooks->before_attention && (st = hooks->before_attention(hooks->ctx, t))) return st;
    attn_tensor q = attn_tensor_4d(t->q, t->batch, t->len, t->heads, t->head_dim);
    attn_tensor k = attn_tensor_4d(t->k, t->batch, t->context_len, t->kv_heads, t->head_dim);
    attn_tensor v = attn_tensor_4d(t->v, t->batch, t->context_len, t->kv_heads, t->value_dim);
    attn_tensor z = attn_tensor_4d(t->z, t->batch, t->len, t->heads, t->value_dim);
    if ((t->scores && (st = attn_sdpa_scores(&q, &k, opt, t->scores))) ||
        (st = attn_sdpa_forward(&q, &k, &v, opt, &z, t->pattern, lse)))
        return st;
    if (hooks && hooks->after_attention && (st = hooks->after_attention(hooks->ctx, t))) return st;
    if (!c || !t->attn_out) return ATTN_OK;

    const attn_mha *m = &c->m;
    if (t->result && (st = head_results(m, t))) return st;
    if (m->wo) return attn_linear_forward(t->z, c->rows_q, m->heads * m->value_dim, m->wo, m->bo, m->d_out, t->attn_out);
    /* out = Z, plus bo only when there is one (adding 0 would turn -0 into +0). */
    if (t->attn_out != t->z) memcpy(t->attn_out, t->z, (size_t)(c->rows_q * m->d_out) * sizeof(float));
    if (m->bo)
        for (int64_t r = 0; r < c->rows_q; r++)
            for (int64_t o = 0; o < m->d_out; o++) t->attn_out[r * m->d_out + o] += m->bo[o];
    return ATTN_OK;
}

attn_status attn_mha_forward(const attn_mha *module, const float *x, int64_t batch, int64_t len,
                             const float *context, int64_t context_len, const attn_sdpa_options *opt,
                             float *out, float *weights, float *lse) {
    mha_call c;
    attn_status st = attn__mha_call_init(&c, module, x, batch, len, context, context_len);
    if (st) return st;
    if (!out) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "mha: out is NULL");
    const attn_mha *m = &c.m;
    const int64_t rows = extent_mul(c.rows_q, m->heads), f = (int64_t)sizeof(float);
    mem_extent inputs[MHA_INPUT_EXTENTS];
    const int n_inputs = attn__mha_input_extents(&c, opt, inputs);
    const mem_extent outputs[3] = {extent_of_array("out", out, extent_mul(c.rows_q, m->d_out), f),
                                   extent_of_array("weights", weights, extent_mul(rows, c.context_len), f),
                                   extent_of_array("lse", lse, rows, f)};
    if ((st = overlap_check("mha", outputs, 3, inputs, n_inputs))) return st;
    /* Q, K, V (and Z when there is a W_O; without one Z is the output
     * itself) are this call's own; the weights and the output are the
     * caller's. */
    attn_trace t = {0};
    attn__mha_trace_sizes(&t, &c);
    t.pattern = weights;
    t.attn_out = out;
    if ((st = attn__alloc_floats(&t.q, c.rows_q, m->heads * m->head_dim, "mha", "Q")) ||
        (st = attn__alloc_floats(&t.k, c.rows_kv, m->kv_heads * m->head_dim, "mha", "K")) ||
        (st = attn__alloc_floats(&t.v, c.rows_kv, m->kv_heads * m->value_dim, "mha", "V")) ||
        (m->wo && (st = attn__alloc_floats(&t.z, c.rows_q, m->heads * m->value_dim, "mha", "Z"))))
        goto cleanup;
    if (!m->wo) t.z = out;
    st = attn__mha_pass(&c, &t, opt, NULL, lse);
cleanup:
    free(t.q);
    free(t.k);
    free(t.v);
    if (m->wo) free(t.z);
    return st;
}
