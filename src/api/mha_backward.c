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
 * The forward (mha.c, whose pass this file runs again):
 *   Q = X WQ + bq,  K = C WK + bk,  V = C WV + bv
 *   Z = concat_h sdpa(Q_h, K_g, V_g)
 *   out = Z WO + bo          (out = Z + bo without WO)
 */
#include "api/mha.h"

#include "api/linear.h"
#include "base/overlap.h"
#include "base/problem.h"

#include <stdlib.h>

static attn_status alloc_floats(float **out, int64_t rows, int64_t width, const char *what) {
    return attn__alloc_floats(out, rows, width, "mha backward", what);
}

/* The gradients against the call's inputs (dout among them) and each
 * other (overlap.h). */
static attn_status check_gradients(const mha_call *call, const attn_sdpa_options *opt, const float *dout,
                                   const attn_mha_grads *g) {
    const attn_mha *m = &call->m;
    const int64_t f = (int64_t)sizeof(float), rows_q = call->rows_q, rows_kv = call->rows_kv,
                  wq_n = m->heads * m->head_dim, wk_n = m->kv_heads * m->head_dim,
                  wv_n = m->kv_heads * m->value_dim, z_n = m->heads * m->value_dim;
    mem_extent inputs[MHA_INPUT_EXTENTS + 1];
    int n_inputs = attn__mha_input_extents(call, opt, inputs);
    inputs[n_inputs++] = extent_of_array("dout", dout, extent_mul(rows_q, m->d_out), f);
    const mem_extent outputs[10] = {
        extent_of_array("grads.dx", g->dx, extent_mul(rows_q, m->d_model), f),
        extent_of_array("grads.dcontext", g->dcontext, extent_mul(rows_kv, m->d_context), f),
        extent_of_array("grads.dwq", g->dwq, extent_mul(m->d_model, wq_n), f),
        extent_of_array("grads.dwk", g->dwk, extent_mul(m->d_context, wk_n), f),
        extent_of_array("grads.dwv", g->dwv, extent_mul(m->d_context, wv_n), f),
        extent_of_array("grads.dwo", g->dwo, extent_mul(z_n, m->d_out), f),
        extent_of_array("grads.dbq", g->dbq, wq_n, f),
        extent_of_array("grads.dbk", g->dbk, wk_n, f),
        extent_of_array("grads.dbv", g->dbv, wv_n, f),
        extent_of_array("grads.dbo", g->dbo, m->d_out, f),
    };
    return overlap_check("mha backward", outputs, 10, inputs, n_inputs);
}

attn_status attn_mha_backward(const attn_mha *module, const float *x, int64_t batch, int64_t len,
                              const float *context, int64_t context_len,
                              const attn_sdpa_options *opt, const float *dout,
                              const attn_mha_grads *grads_in) {
    mha_call call;
    attn_mha_grads grads_copy, *grads = &grads_copy;
    attn_status st = attn__mha_call_init(&call, module, x, batch, len, context, context_len);
    if (st) return st;
    if (!dout || !grads_in)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "mha backward: %s is NULL", !dout ? "dout" : "grads");
    static const attn_mha_grads grads_defaults = ATTN_MHA_GRADS_INIT;
    if ((st = options_copy(grads, sizeof *grads, &grads_defaults, grads_in, "attn_mha_grads"))) return st;
    const attn_mha m = call.m;
    const float *c = call.context;
    const int64_t rows_q = call.rows_q, rows_kv = call.rows_kv;
    context_len = call.context_len;
    if (grads->dcontext && call.self)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT,
                          "mha backward: dcontext asked for without a context (self-attention's "
                          "K and V paths flow into dx)");
    if (grads->dwo && !m.wo)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "mha backward: dwo asked for but the module has no wo");
    const bool self = call.self;
    const int64_t wq_n = m.heads * m.head_dim, wk_n = m.kv_heads * m.head_dim,
                  wv_n = m.kv_heads * m.value_dim, z_n = m.heads * m.value_dim;
    if ((st = check_gradients(&call, opt, dout, grads))) return st;

    /* The attention step's options: the caller's workspace was sized for one
     * call, and this function makes two different ones. */
    static const attn_sdpa_options sdpa_defaults = ATTN_SDPA_OPTIONS_INIT;
    attn_sdpa_options sdpa_opt;
    if ((st = options_copy(&sdpa_opt, sizeof sdpa_opt, &sdpa_defaults, opt, "attn_sdpa_options"))) return st;
    sdpa_opt.workspace = NULL;
    sdpa_opt.workspace_size = 0;

    attn_trace t = {0}; /* the forward's Q, K, V and Z: the pass without W_O */
    attn__mha_trace_sizes(&t, &call);
    float *lse = NULL, *dq = NULL, *dk = NULL, *dv = NULL, *dz = NULL;
    if ((st = alloc_floats(&t.q, rows_q, wq_n, "Q")) || (st = alloc_floats(&t.k, rows_kv, wk_n, "K")) ||
        (st = alloc_floats(&t.v, rows_kv, wv_n, "V")) || (st = alloc_floats(&t.z, rows_q, z_n, "Z")) ||
        (st = alloc_floats(&lse, rows_q, m.heads, "lse")) ||
        (st = alloc_floats(&dq, rows_q, wq_n, "dQ")) || (st = alloc_floats(&dk, rows_kv, wk_n, "dK")) ||
        (st = alloc_floats(&dv, rows_kv, wv_n, "dV")) ||
        (m.wo && (st = alloc_floats(&dz, rows_q, z_n, "dZ"))))
        goto cleanup;

    /* The forward again, keeping what the backward needs. */
    if ((st = attn__mha_pass(&call, &t, &sdpa_opt, NULL, lse))) goto cleanup;
    const float *z = t.z;
    attn_tensor qt = attn_tensor_4d(t.q, batch, len, m.heads, m.head_dim);
    attn_tensor kt = attn_tensor_4d(t.k, batch, context_len, m.kv_heads, m.head_dim);
    attn_tensor vt = attn_tensor_4d(t.v, batch, context_len, m.kv_heads, m.value_dim);
    attn_tensor zt = attn_tensor_4d(t.z, batch, len, m.heads, m.value_dim);

    /* forward was: out = Z WO + bo   so: dZ = dout WO^T, dWO = Z^T dout, dbo = sum dout
     * (without WO: out = Z + bo, so dZ = dout). */
    if ((m.wo && (st = attn__linear_backward_input(1, &dout, &m.wo, &m.d_out, rows_q, z_n, dz))) ||
        (st = attn__linear_backward_params(z, rows_q, z_n, m.d_out, dout, grads->dwo, grads->dbo)))
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
    if ((st = attn__linear_backward_params(x, rows_q, m.d_model, wq_n, dq, grads->dwq, grads->dbq)) ||
        (st = attn__linear_backward_params(c, rows_kv, m.d_context, wk_n, dk, grads->dwk, grads->dbk)) ||
        (st = attn__linear_backward_params(c, rows_kv, m.d_context, wv_n, dv, grads->dwv, grads->dbv)))
        goto cleanup;
    const float *const dys[3] = {dq, dk, dv};
    const float *const ws[3] = {m.wq, m.wk, m.wv};
    const int64_t widths[3] = {wq_n, wk_n, wv_n};
    if (grads->dx && (st = attn__linear_backward_input(self ? 3 : 1, dys, ws, widths, rows_q,
                                                       m.d_model, grads->dx)))
        goto cleanup;
    if (grads->dcontext && (st = attn__linear_backward_input(2, dys + 1, ws + 1, widths + 1, rows_kv,
                                                             m.d_context, grads->dcontext)))
        goto cleanup;

cleanup:
    free(t.q); free(t.k); free(t.v); free(t.z); free(lse);
    free(dq); free(dk); free(dv); free(dz);
    return st;
}
