/*
 * mha.c — multi-head attention as a module (chapter §6): three projections,
 * per-head attention with grouped-query sharing, concatenation of the heads
 * per position, and the output projection.
 *
 * Shape legend:
 *   x [B, L, d_model]   context [B, S, d_context] (= x for self-attention)
 *   Q [B, L, Hq, D]     K [B, S, Hkv, D]    V [B, S, Hkv, Dv]
 *   Z [B, L, Hq, Dv] = [B, L, Hq*Dv]        (the concatenation is free: the
 *                                            heads of a position are adjacent)
 *   out [B, L, d_out]
 */
#include "core/internal.h"

#include <stdlib.h>

attn_status attn_mha_resolve(const attn_mha *m, attn_mha *r) {
    if (!m) return attn_fail(ATTN_ERR_INVALID_ARGUMENT, "mha module is NULL");
    *r = *m;
    if (!r->kv_heads) r->kv_heads = r->heads;
    if (!r->value_dim) r->value_dim = r->head_dim;
    if (!r->d_context) r->d_context = r->d_model;
    if (r->d_model <= 0 || r->d_context <= 0 || r->heads <= 0 || r->kv_heads <= 0 ||
        r->head_dim <= 0 || r->value_dim <= 0 || r->d_out <= 0)
        return attn_fail(ATTN_ERR_SHAPE,
                         "mha: sizes must be positive (d_model %lld, d_context %lld, heads %lld, "
                         "kv_heads %lld, head_dim %lld, value_dim %lld, d_out %lld)",
                         (long long)r->d_model, (long long)r->d_context, (long long)r->heads,
                         (long long)r->kv_heads, (long long)r->head_dim, (long long)r->value_dim,
                         (long long)r->d_out);
    if (r->heads % r->kv_heads)
        return attn_fail(ATTN_ERR_SHAPE, "mha: %lld query heads is not a multiple of %lld kv heads",
                         (long long)r->heads, (long long)r->kv_heads);
    if (!r->wq || !r->wk || !r->wv)
        return attn_fail(ATTN_ERR_INVALID_ARGUMENT, "mha: %s is NULL",
                         !r->wq ? "wq" : !r->wk ? "wk" : "wv");
    int64_t concat_width, width;
    if (attn_mul_overflows(r->heads, r->value_dim, &concat_width) ||
        attn_mul_overflows(r->heads, r->head_dim, &width) ||
        attn_mul_overflows(r->kv_heads, r->head_dim, &width) ||
        attn_mul_overflows(r->kv_heads, r->value_dim, &width))
        return attn_fail(ATTN_ERR_OVERFLOW, "mha: heads times head width overflows");
    if (!r->wo && r->d_out != concat_width)
        return attn_fail(ATTN_ERR_SHAPE,
                         "mha: without wo the output is the concatenation, so d_out must be "
                         "heads * value_dim = %lld, got %lld",
                         (long long)concat_width, (long long)r->d_out);
    return ATTN_OK;
}

attn_status attn_mha_check_call(const attn_mha *module, attn_mha *m, const float *x, int64_t batch,
                                int64_t len, const float **context, int64_t *context_len,
                                int64_t *rows_q, int64_t *rows_kv) {
    attn_status st = attn_mha_resolve(module, m);
    if (st) return st;
    if (!x) return attn_fail(ATTN_ERR_INVALID_ARGUMENT, "mha: x is NULL");
    if (batch <= 0 || len <= 0)
        return attn_fail(ATTN_ERR_SHAPE, "mha: batch (%lld) and length (%lld) must be positive",
                         (long long)batch, (long long)len);
    if (!*context) {
        if (m->d_context != m->d_model)
            return attn_fail(ATTN_ERR_SHAPE,
                             "mha: d_context (%lld) differs from d_model (%lld) but no context was given",
                             (long long)m->d_context, (long long)m->d_model);
        *context = x;
        *context_len = len;
    } else if (*context_len <= 0) {
        return attn_fail(ATTN_ERR_SHAPE, "mha: context length must be positive, got %lld",
                         (long long)*context_len);
    }
    if (attn_mul_overflows(batch, len, rows_q) || attn_mul_overflows(batch, *context_len, rows_kv))
        return attn_fail(ATTN_ERR_OVERFLOW, "mha: batch * length overflows");
    return ATTN_OK;
}

/* Allocates rows * width floats into *out, checking the product. */
static attn_status alloc_floats(float **out, int64_t rows, int64_t width, const char *what) {
    int64_t n;
    if (attn_mul_overflows(rows, width, &n) || n > INT64_MAX / (int64_t)sizeof(float))
        return attn_fail(ATTN_ERR_OVERFLOW, "mha: the size of %s overflows", what);
    *out = malloc((size_t)n * sizeof(float));
    if (!*out)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "mha: cannot allocate %s (%lld floats)", what,
                         (long long)n);
    return ATTN_OK;
}

attn_status attn_mha_forward(const attn_mha *module, const float *x, int64_t batch,
                             int64_t len, const float *context, int64_t context_len,
                             const attn_sdpa_options *opt, float *out, float *weights,
                             float *lse) {
    attn_mha m = {0};
    int64_t rows_q, rows_kv;
    attn_status st = attn_mha_check_call(module, &m, x, batch, len, &context, &context_len, &rows_q, &rows_kv);
    if (st) return st;
    if (!out) return attn_fail(ATTN_ERR_INVALID_ARGUMENT, "mha: out is NULL");

    float *q = NULL, *k = NULL, *v = NULL, *z = NULL;
    if ((st = alloc_floats(&q, rows_q, m.heads * m.head_dim, "Q")) ||
        (st = alloc_floats(&k, rows_kv, m.kv_heads * m.head_dim, "K")) ||
        (st = alloc_floats(&v, rows_kv, m.kv_heads * m.value_dim, "V")) ||
        (m.wo && (st = alloc_floats(&z, rows_q, m.heads * m.value_dim, "Z"))))
        goto cleanup;
    if ((st = attn_linear_forward(x, rows_q, m.d_model, m.wq, m.bq, m.heads * m.head_dim, q)) ||
        (st = attn_linear_forward(context, rows_kv, m.d_context, m.wk, m.bk, m.kv_heads * m.head_dim, k)) ||
        (st = attn_linear_forward(context, rows_kv, m.d_context, m.wv, m.bv, m.kv_heads * m.value_dim, v)))
        goto cleanup;

    attn_tensor qt = attn_tensor_4d(q, batch, len, m.heads, m.head_dim);
    attn_tensor kt = attn_tensor_4d(k, batch, context_len, m.kv_heads, m.head_dim);
    attn_tensor vt = attn_tensor_4d(v, batch, context_len, m.kv_heads, m.value_dim);
    attn_tensor zt = attn_tensor_4d(m.wo ? z : out, batch, len, m.heads, m.value_dim);
    if ((st = attn_sdpa_forward(&qt, &kt, &vt, opt, &zt, weights, lse))) goto cleanup;
    if (m.wo) st = attn_linear_forward(z, rows_q, m.heads * m.value_dim, m.wo, m.bo, m.d_out, out);
    else if (m.bo)
        for (int64_t r = 0; r < rows_q; r++)
            for (int64_t o = 0; o < m.d_out; o++) out[r * m.d_out + o] += m.bo[o];

cleanup:
    free(q);
    free(k);
    free(v);
    free(z);
    return st;
}
