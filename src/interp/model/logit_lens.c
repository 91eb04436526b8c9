/*
 * logit_lens.c — the logit lens and direct logit attribution on a
 * decoder's run: the residual stream, or one component of it, read through
 * the final RMSNorm and the unembedding W_U.
 *
 * Shape legend: L tokens, N layers, Hq heads, Dh head width, d width, V vocabulary;
 *   resid_pre / resid_post, attn_out, mlp_out [L, d]   z [L, Hq, Dh]
 *   lens logits [N + 1, V]   heads [N, Hq]   attn, mlp [N]
 *
 * The lens (nostalgebraist 2020) applies the final norm to each layer's
 * stream as if it were the last: the norm's own scale for each row.
 * Attribution (TransformerLens's logit_attrs over decompose_resid /
 * stack_head_results) freezes the final norm's scale, 1 / rms(x_final):
 * the stream is the sum embed + sum_l (attn_out_l + mlp_out_l), so with
 * the scale fixed each component's share of the logit is linear and the
 * shares add up to the logit (difference) itself.
 */
#include "interp/model/model_interp.h"

#include "model/decoder.h"
#include "model/eltwise.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The position's row of a kept [L, d] tensor. */
static const float *row_at(const attn_model_record *r, attn_decoder_hook_point point, int64_t layer, int64_t pos,
                           int64_t d) {
    return attn__model_record_find(r, point, layer)->data + pos * d;
}

static double dot(const float *x, const double *u, int64_t d) {
    double sum = 0;
    for (int64_t e = 0; e < d; e++) sum += x[e] * u[e];
    return sum;
}

static attn_status check_position(const char *fn, const attn_decoder *m, const int32_t *ids, int64_t L, int64_t *pos) {
    if (!m || !ids) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn, !m ? "the decoder" : "ids");
    if (*pos < 0) *pos += L;
    if (*pos < 0 || *pos >= L)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "%s: position %lld is outside the %lld tokens", fn,
                          (long long)*pos, (long long)L);
    return ATTN_OK;
}

attn_status attn_model_logit_lens(const attn_decoder *m, const int32_t *ids, int64_t L, int64_t pos, float *logits) {
    attn_status st = check_position(__func__, m, ids, L, &pos);
    if (st) return st;
    if (!logits) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "%s: logits is NULL", __func__);
    const attn_decoder_config *c = &m->cfg;
    const int64_t N = c->n_layers, d = c->d_model;
    const attn_model_patch want[2] = {
        {.kind = ATTN_MODEL_PATCH_SOURCE, .point = ATTN_DECODER_HOOK_RESID_PRE, .layer = 0},
        {.kind = ATTN_MODEL_PATCH_SOURCE, .point = ATTN_DECODER_HOOK_RESID_POST, .layer = ATTN_ALL}};
    attn_model_record s = {0};
    float *normed = malloc((size_t)((N + 1) * d) * sizeof *normed);
    if (!normed) return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", __func__);
    if ((st = attn__model_record(m, ids, L, want, 2, &s))) goto done;
    /* The forward's own final step on each row: its norm kernel, its
     * weights, its product (the last row is the model's logits). */
    const eltwise_kernels *ek = attn__eltwise(0);
    for (int64_t r = 0; r <= N; r++) {
        const float *x = r == 0 ? row_at(&s, ATTN_DECODER_HOOK_RESID_PRE, 0, pos, d)
                                : row_at(&s, ATTN_DECODER_HOOK_RESID_POST, r - 1, pos, d);
        ek->rmsnorm(x, d, m->output_norm, c->rms_eps, normed + r * d);
    }
    st = attn__decoder_matmul(m, normed, N + 1, &m->output, NULL, logits);
done:
    free(normed);
    attn__model_record_clear(&s);
    return st;
}

attn_status attn_model_logit_attribution(const attn_decoder *m, const int32_t *ids, int64_t L, int64_t pos,
                                         int64_t token, int64_t other, double *embed, double *attn, double *mlp,
                                         double *heads) {
    attn_status st = check_position(__func__, m, ids, L, &pos);
    if (st) return st;
    const attn_decoder_config *c = &m->cfg;
    const int64_t N = c->n_layers, d = c->d_model, Hq = c->n_heads, Dh = c->head_dim, V = c->vocab;
    if (!embed || !attn || !mlp)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "%s: %s is NULL", __func__, !embed ? "embed" : !attn ? "attn" : "mlp");
    if (token < 0 || token >= V || other < -1 || other >= V)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "%s: token %lld, other %lld: expected ids in [0, %lld) (other "
                          "-1: none)", __func__, (long long)token, (long long)other, (long long)V);
    const attn_model_patch want[5] = {
        {.kind = ATTN_MODEL_PATCH_SOURCE, .point = ATTN_DECODER_HOOK_RESID_PRE, .layer = 0},
        {.kind = ATTN_MODEL_PATCH_SOURCE, .point = ATTN_DECODER_HOOK_ATTN_OUT, .layer = ATTN_ALL},
        {.kind = ATTN_MODEL_PATCH_SOURCE, .point = ATTN_DECODER_HOOK_MLP_OUT, .layer = ATTN_ALL},
        {.kind = ATTN_MODEL_PATCH_SOURCE, .point = ATTN_DECODER_HOOK_RESID_POST, .layer = N - 1},
        {.kind = ATTN_MODEL_PATCH_SOURCE, .point = ATTN_DECODER_HOOK_Z, .layer = ATTN_ALL}};
    attn_model_record s = {0};
    double *u = malloc((size_t)d * sizeof *u), *o_sum = malloc((size_t)d * sizeof *o_sum),
           *head_out = malloc((size_t)(Hq * d) * sizeof *head_out);
    float *w_u = malloc((size_t)(2 * d) * sizeof *w_u), *wo = NULL;
    if (!u || !o_sum || !head_out || !w_u) {
        st = attn__fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", __func__);
        goto done;
    }
    if ((st = attn__model_record(m, ids, L, want, heads ? 5 : 4, &s))) goto done;
    /* The direction: the final norm's weight times W_U's row of token (less
     * other's), scaled by the final stream's 1 / rms, frozen for every part. */
    if ((st = attn_quant_dequantize_rows(&m->output.q, token, 1, w_u)) ||
        (other >= 0 && (st = attn_quant_dequantize_rows(&m->output.q, other, 1, w_u + d))))
        goto done;
    const float *final = row_at(&s, ATTN_DECODER_HOOK_RESID_POST, N - 1, pos, d);
    double ss = 0;
    for (int64_t e = 0; e < d; e++) ss += (double)final[e] * final[e];
    const double scale = 1.0 / sqrt(ss / (double)d + c->rms_eps);
    for (int64_t e = 0; e < d; e++)
        u[e] = scale * m->output_norm[e] * ((double)w_u[e] - (other >= 0 ? (double)w_u[d + e] : 0.0));
    *embed = dot(row_at(&s, ATTN_DECODER_HOOK_RESID_PRE, 0, pos, d), u, d);
    for (int64_t l = 0; l < N; l++) {
        attn[l] = dot(row_at(&s, ATTN_DECODER_HOOK_ATTN_OUT, l, pos, d), u, d);
        mlp[l] = dot(row_at(&s, ATTN_DECODER_HOOK_MLP_OUT, l, pos, d), u, d);
        if (!heads) continue;
        /* Head h's output z_h . W_O^h.  Gemma normalises o = sum_h of them
         * (post_attention_norm): its scale is frozen as the final one is,
         * w / rms(o), so the heads' shares still add up to attn_out's. */
        if ((st = attn__model_output_projection(m, l, &wo))) goto done;
        const float *z = attn__model_record_find(&s, ATTN_DECODER_HOOK_Z, l)->data + pos * Hq * Dh;
        const float *post = m->layers[l].post_attn_norm;
        for (int64_t e = 0; e < d; e++) o_sum[e] = 0;
        for (int64_t h = 0; h < Hq; h++)
            for (int64_t e = 0; e < d; e++) {
                double o = 0;
                for (int64_t k = 0; k < Dh; k++) o += (double)z[h * Dh + k] * wo[(h * Dh + k) * d + e];
                head_out[h * d + e] = o;
                o_sum[e] += o;
            }
        double o_ss = 0;
        for (int64_t e = 0; e < d; e++) o_ss += o_sum[e] * o_sum[e];
        const double o_scale = post ? 1.0 / sqrt(o_ss / (double)d + c->rms_eps) : 1.0;
        for (int64_t h = 0; h < Hq; h++) {
            double a = 0;
            for (int64_t e = 0; e < d; e++) a += head_out[h * d + e] * (post ? o_scale * post[e] : 1.0) * u[e];
            heads[l * Hq + h] = a;
        }
        free(wo);
        wo = NULL;
    }
done:
    free(u);
    free(o_sum);
    free(head_out);
    free(w_u);
    free(wo);
    attn__model_record_clear(&s);
    return st;
}
