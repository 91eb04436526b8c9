/*
 * decoder_hook_extra.c — the hook points whose tensors the forward does not
 * compute on its own (attn_decoder.h, "hook points"): the per-head inputs
 * hook_q_input / hook_k_input / hook_v_input, the norms' hook_scale, and
 * each head's hook_result.  Each is computed only when a tensor hook asks
 * for it, and a hook that writes back what it was shown changes nothing,
 * bit for bit: the forward's own values are kept unless the hook changed
 * something (compared with a copy), and only what changed is recomputed.
 *
 * Shape legend: L tokens, d d_model, Hq / Hkv heads, Dh head width, H the
 * heads of one projection (Hq for q, Hkv for k and v).
 *   input  [L, H, d]   the residual stream into the layer, once per head
 *   scale  [L, 1]      sqrt(mean(x^2) + eps) of each row, in double
 *   result [L, Hq, d]  z of head h through its Dh columns of W_O
 */
#include "model/decoder.h"
#include "model/eltwise.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------- per-head q, k, v inputs */

static const attn_decoder_hook_point input_point[3] = {ATTN_DECODER_HOOK_Q_INPUT, ATTN_DECODER_HOOK_K_INPUT,
                                                       ATTN_DECODER_HOOK_V_INPUT};

void attn__decoder_inputs_free(decoder_inputs *in) {
    for (int p = 0; p < 3; p++) {
        free(in->rows[p]);
        free(in->changed[p]);
    }
    memset(in, 0, sizeof *in);
}

attn_status attn__decoder_inputs_take(const attn_decoder_outputs *out, const attn_decoder_config *c, int64_t layer,
                                      const float *x, int64_t L, decoder_inputs *in) {
    memset(in, 0, sizeof *in);
    const int64_t d = c->d_model;
    attn_status st = ATTN_OK;
    float *copy = NULL;
    for (int p = 0; p < 3 && !st; p++) {
        if (!attn__decoder_hook_wanted(out, input_point[p])) continue;
        const int64_t H = p == 0 ? c->n_heads : c->n_kv_heads;
        float *rows = malloc((size_t)(L * H * d) * sizeof(float));
        copy = malloc((size_t)(L * H * d) * sizeof(float));
        bool *changed = calloc((size_t)H, sizeof(bool));
        if (!rows || !copy || !changed) {
            free(rows);
            free(changed);
            st = attn__fail(ATTN_ERR_OUT_OF_MEMORY, "attn_decoder_forward: cannot allocate layer %lld's %s",
                            (long long)layer, attn_decoder_hook_suffix(input_point[p]));
            break;
        }
        for (int64_t t = 0; t < L; t++)
            for (int64_t h = 0; h < H; h++) memcpy(rows + (t * H + h) * d, x + t * d, (size_t)d * sizeof(float));
        memcpy(copy, rows, (size_t)(L * H * d) * sizeof(float));
        st = attn__decoder_hook_call(out, input_point[p], layer, rows, 3, L, H, d);
        bool any = false;
        for (int64_t t = 0; t < L && !st; t++)
            for (int64_t h = 0; h < H; h++)
                if (memcmp(rows + (t * H + h) * d, copy + (t * H + h) * d, (size_t)d * sizeof(float)) != 0)
                    any = changed[h] = true;
        free(copy);
        copy = NULL;
        /* Nothing written: nothing to recompute, the buffer is not kept. */
        if (any) {
            in->rows[p] = rows;
            in->changed[p] = changed;
            in->heads[p] = H;
        } else {
            free(rows);
            free(changed);
        }
    }
    if (st) attn__decoder_inputs_free(in);
    return st;
}

attn_status attn__decoder_inputs_apply(const attn_decoder *m, const decoder_inputs *in, int which,
                                       const eltwise_kernels *ek, const float *norm_weight, const decoder_weight *w,
                                       const float *bias, int64_t L, float *proj) {
    if (!in->rows[which]) return ATTN_OK;
    const attn_decoder_config *c = &m->cfg;
    const int64_t d = c->d_model, H = in->heads[which], Dh = c->head_dim, width = H * Dh;
    float *normed = malloc((size_t)(L * d) * sizeof(float)), *full = malloc((size_t)(L * width) * sizeof(float));
    attn_status st = ATTN_OK;
    if (!normed || !full) {
        st = attn__fail(ATTN_ERR_OUT_OF_MEMORY, "attn_decoder_forward: cannot allocate a patched head's projection");
        goto done;
    }
    /* A changed head's rows through the layer's norm (the forward's
     * kernel) and the whole projection; its own Dh columns replace the
     * forward's. */
    for (int64_t h = 0; h < H && !st; h++) {
        if (!in->changed[which][h]) continue;
        for (int64_t t = 0; t < L; t++) ek->rmsnorm(in->rows[which] + (t * H + h) * d, d, norm_weight, c->rms_eps,
                                                    normed + t * d);
        if ((st = attn__decoder_matmul(m, normed, L, w, bias, full))) break;
        for (int64_t t = 0; t < L; t++)
            memcpy(proj + t * width + h * Dh, full + t * width + h * Dh, (size_t)Dh * sizeof(float));
    }
done:
    free(normed);
    free(full);
    return st;
}

/* ------------------------------------------------------------- the norms */

attn_status attn__decoder_norm_hooks(const attn_decoder_outputs *out, attn_decoder_hook_point scale_point,
                                     attn_decoder_hook_point normalized_point, int64_t layer, const float *x,
                                     int64_t rows, int64_t d, const float *w, double eps, float *y) {
    if (attn__decoder_hook_wanted(out, scale_point)) {
        double *exact = malloc((size_t)rows * sizeof(double));
        float *scale = malloc((size_t)rows * sizeof(float));
        attn_status st = ATTN_OK;
        if (!exact || !scale) {
            st = attn__fail(ATTN_ERR_OUT_OF_MEMORY, "attn_decoder_forward: cannot allocate %s",
                            attn_decoder_hook_suffix(scale_point));
        } else {
            for (int64_t r = 0; r < rows; r++) {
                double ss = 0.0;
                for (int64_t i = 0; i < d; i++) ss += (double)x[r * d + i] * x[r * d + i];
                exact[r] = sqrt(ss / (double)d + eps);
                scale[r] = (float)exact[r];
            }
            st = attn__decoder_hook_call(out, scale_point, layer, scale, 2, rows, 1, 0);
            /* A row whose scale was written is divided by the new one; the
             * others keep the kernel's output (y, computed by the caller). */
            for (int64_t r = 0; r < rows && !st; r++) {
                if (scale[r] == (float)exact[r]) continue;
                const float inv = 1.0f / scale[r];
                for (int64_t i = 0; i < d; i++) y[r * d + i] = (x[r * d + i] * inv) * w[i];
            }
        }
        free(exact);
        free(scale);
        if (st) return st;
    }
    return attn__decoder_hook_call(out, normalized_point, layer, y, 2, rows, d, 0);
}

/* ------------------------------------------------------- each head's result */

attn_status attn__decoder_result_hook(const attn_decoder *m, const attn_decoder_outputs *out, const decoder_weight *wo,
                                      int64_t layer, const float *z, int64_t L, float *o) {
    if (!attn__decoder_hook_wanted(out, ATTN_DECODER_HOOK_RESULT)) return ATTN_OK;
    const attn_decoder_config *c = &m->cfg;
    const int64_t d = c->d_model, Hq = c->n_heads, Dh = c->head_dim, width = Hq * Dh;
    float *masked = calloc((size_t)(L * width), sizeof(float)), *part = malloc((size_t)(L * d) * sizeof(float));
    float *result = malloc((size_t)(L * Hq * d) * sizeof(float)), *copy = malloc((size_t)(L * Hq * d) * sizeof(float));
    attn_status st = ATTN_OK;
    if (!masked || !part || !result || !copy) {
        st = attn__fail(ATTN_ERR_OUT_OF_MEMORY, "attn_decoder_forward: cannot allocate layer %lld's hook_result",
                        (long long)layer);
        goto done;
    }
    /* Head h's result: z with every other head's columns zero, through W_O
     * (the stored weight's own kernel: one projection per head). */
    for (int64_t h = 0; h < Hq && !st; h++) {
        for (int64_t t = 0; t < L; t++)
            memcpy(masked + t * width + h * Dh, z + t * width + h * Dh, (size_t)Dh * sizeof(float));
        st = attn__decoder_matmul(m, masked, L, wo, NULL, part);
        for (int64_t t = 0; t < L; t++) {
            memset(masked + t * width + h * Dh, 0, (size_t)Dh * sizeof(float));
            memcpy(result + (t * Hq + h) * d, part + t * d, (size_t)d * sizeof(float));
        }
    }
    if (st) goto done;
    memcpy(copy, result, (size_t)(L * Hq * d) * sizeof(float));
    if ((st = attn__decoder_hook_call(out, ATTN_DECODER_HOOK_RESULT, layer, result, 3, L, Hq, d))) goto done;
    /* Written: the projection's output becomes the heads' sum (in double,
     * heads in order), as TransformerLens's attn_out is with
     * use_attn_result. */
    if (memcmp(copy, result, (size_t)(L * Hq * d) * sizeof(float)) != 0)
        for (int64_t t = 0; t < L; t++)
            for (int64_t i = 0; i < d; i++) {
                double sum = 0.0;
                for (int64_t h = 0; h < Hq; h++) sum += result[(t * Hq + h) * d + i];
                o[t * d + i] = (float)sum;
            }
done:
    free(masked);
    free(part);
    free(result);
    free(copy);
    return st;
}
