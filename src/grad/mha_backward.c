/*
 * mha_backward.c — the backward pass of multi-head attention as a module.
 * It recomputes the forward's intermediates (no state is kept between the
 * forward and the backward call), then runs the chain rule from the output
 * projection back to the inputs.
 *
 * Shape legend:
 *   x, dx [B, L, d_model]   context, dcontext [B, S, d_context] (= x for self-attention)
 *   Q, dQ [B, L, Hq, D]     K, dK [B, S, Hkv, D]     V, dV [B, S, Hkv, Dv]
 *   Z, dZ [B, L, Hq*Dv]     (the heads' outputs, concatenated per position)
 *   lse [B, Hq, L]          dout [B, L, d_out]
 *
 * The forward (src/core/mha.c):
 *   Q = X WQ + bq,  K = C WK + bk,  V = C WV + bv
 *   Z = concat_h sdpa(Q_h, K_g, V_g)
 *   out = Z WO + bo          (out = Z + bo without WO)
 */
#include "core/internal.h"

#include <stdlib.h>

static attn_status alloc_floats(float **out, int64_t rows, int64_t width, const char *what) {
    int64_t n;
    if (attn_mul_overflows(rows, width, &n) || n > INT64_MAX / (int64_t)sizeof(float))
        return attn_fail(ATTN_ERR_OVERFLOW, "mha backward: the size of %s overflows", what);
    *out = malloc((size_t)(n ? n : 1) * sizeof(float));
    if (!*out)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "mha backward: cannot allocate %s (%lld floats)", what,
                         (long long)n);
    return ATTN_OK;
}

attn_status attn_mha_backward(const attn_mha *module, const float *x, int64_t batch, int64_t len,
                              const float *context, int64_t context_len,
                              const attn_sdpa_options *opt, const float *dout,
                              const attn_mha_grads *grads) {
    attn_mha m;
    int64_t rows_q, rows_kv;
    const float *c = context;
    attn_status st = attn_mha_check_call(module, &m, x, batch, len, &c, &context_len, &rows_q, &rows_kv);
    if (st) return st;
    if (!dout || !grads)
        return attn_fail(ATTN_ERR_INVALID_ARGUMENT, "mha backward: %s is NULL", !dout ? "dout" : "grads");
    if (grads->dcontext && !context)
        return attn_fail(ATTN_ERR_INVALID_ARGUMENT,
                         "mha backward: dcontext asked for without a context (self-attention's "
                         "K and V paths flow into dx)");
    if (grads->dwo && !m.wo)
        return attn_fail(ATTN_ERR_INVALID_ARGUMENT, "mha backward: dwo asked for but the module has no wo");
    const bool self = !context;
    const int64_t wq_n = m.heads * m.head_dim, wk_n = m.kv_heads * m.head_dim,
                  wv_n = m.kv_heads * m.value_dim, z_n = m.heads * m.value_dim;

    /* The attention step's options: the caller's workspace was sized for one
     * call, and this function makes two different ones. */
    attn_sdpa_options sdpa_opt = {0};
    if (opt) sdpa_opt = *opt;
    sdpa_opt.workspace = NULL;
    sdpa_opt.workspace_size = 0;

    float *q = NULL, *k = NULL, *v = NULL, *z = NULL, *lse = NULL;
    float *dq = NULL, *dk = NULL, *dv = NULL, *dz = NULL;
    if ((st = alloc_floats(&q, rows_q, wq_n, "Q")) || (st = alloc_floats(&k, rows_kv, wk_n, "K")) ||
        (st = alloc_floats(&v, rows_kv, wv_n, "V")) || (st = alloc_floats(&z, rows_q, z_n, "Z")) ||
        (st = alloc_floats(&lse, rows_q, m.heads, "lse")) ||
        (st = alloc_floats(&dq, rows_q, wq_n, "dQ")) || (st = alloc_floats(&dk, rows_kv, wk_n, "dK")) ||
        (st = alloc_floats(&dv, rows_kv, wv_n, "dV")) ||
        (m.wo && (st = alloc_floats(&dz, rows_q, z_n, "dZ"))))
        goto cleanup;

    /* The forward again, keeping what the backward needs. */
    if ((st = attn_linear_forward(x, rows_q, m.d_model, m.wq, m.bq, wq_n, q)) ||
        (st = attn_linear_forward(c, rows_kv, m.d_context, m.wk, m.bk, wk_n, k)) ||
        (st = attn_linear_forward(c, rows_kv, m.d_context, m.wv, m.bv, wv_n, v)))
        goto cleanup;
    attn_tensor qt = attn_tensor_4d(q, batch, len, m.heads, m.head_dim);
    attn_tensor kt = attn_tensor_4d(k, batch, context_len, m.kv_heads, m.head_dim);
    attn_tensor vt = attn_tensor_4d(v, batch, context_len, m.kv_heads, m.value_dim);
    attn_tensor zt = attn_tensor_4d(z, batch, len, m.heads, m.value_dim);
    if ((st = attn_sdpa_forward(&qt, &kt, &vt, &sdpa_opt, &zt, NULL, lse))) goto cleanup;

    /* forward was: out = Z WO + bo   so: dZ = dout WO^T, dWO = Z^T dout, dbo = sum dout
     * (without WO: out = Z + bo, so dZ = dout). */
    if ((m.wo && (st = attn_linear_backward_input(1, &dout, &m.wo, &m.d_out, rows_q, z_n, dz))) ||
        (st = attn_linear_backward_params(z, rows_q, z_n, m.d_out, dout, grads->dwo, grads->dbo)))
        goto cleanup;

    /* forward was: Z = attention(Q, K, V)   so: dQ, dK, dV from its backward */
    const float *dz_use = m.wo ? dz : dout;
    attn_tensor dzt = attn_tensor_4d((float *)dz_use, batch, len, m.heads, m.value_dim);
    attn_tensor dqt = attn_tensor_4d(dq, batch, len, m.heads, m.head_dim);
    attn_tensor dkt = attn_tensor_4d(dk, batch, context_len, m.kv_heads, m.head_dim);
    attn_tensor dvt = attn_tensor_4d(dv, batch, context_len, m.kv_heads, m.value_dim);
    if ((st = attn_sdpa_backward(&qt, &kt, &vt, &sdpa_opt, &zt, lse, &dzt, &dqt, &dkt, &dvt)))
        goto cleanup;

    /* forward was: Q = X WQ + bq (and K, V from C)
     * so: dWQ = X^T dQ, dbq = sum dQ, dX = dQ WQ^T (+ dK WK^T + dV WV^T when C = X) */
    if ((st = attn_linear_backward_params(x, rows_q, m.d_model, wq_n, dq, grads->dwq, grads->dbq)) ||
        (st = attn_linear_backward_params(c, rows_kv, m.d_context, wk_n, dk, grads->dwk, grads->dbk)) ||
        (st = attn_linear_backward_params(c, rows_kv, m.d_context, wv_n, dv, grads->dwv, grads->dbv)))
        goto cleanup;
    const float *const dys[3] = {dq, dk, dv};
    const float *const ws[3] = {m.wq, m.wk, m.wv};
    const int64_t widths[3] = {wq_n, wk_n, wv_n};
    if (grads->dx && (st = attn_linear_backward_input(self ? 3 : 1, dys, ws, widths, rows_q,
                                                      m.d_model, grads->dx)))
        goto cleanup;
    if (grads->dcontext && (st = attn_linear_backward_input(2, dys + 1, ws + 1, widths + 1, rows_kv,
                                                            m.d_context, grads->dcontext)))
        goto cleanup;

cleanup:
    free(q); free(k); free(v); free(z); free(lse);
    free(dq); free(dk); free(dv); free(dz);
    return st;
}
