/*
 * decoder_forward.c — the float32 forward of a decoder (attn_decoder.h), one
 * layer at a time: over a whole sequence (attn_decoder_forward, attention by
 * attn_sdpa_forward), or over the next tokens of a session whose keys and
 * values are in attn's KV cache (decoder_session.c; attention by
 * attn_kv_cache_attend).  One layer implementation serves both: only where
 * k and v go and what the queries attend over differ.
 *
 * Shape legend: L tokens, d d_model, F d_ffn, Hq / Hkv heads, Dh head width,
 * V vocabulary.  Activations are row-major [L, width]; q, k, v are [L, H*Dh],
 * which is attn's [1, L, H, Dh] as it stands (no transposes).
 *
 * Per layer, with x the residual stream [L, d] (docs/models.md has the
 * equations with Hugging Face's names; the hook points, attn_decoder.h,
 * show each step):
 *   h = rmsnorm(x) * attn_norm
 *   q = h Wq^T (+ bq)   k = h Wk^T (+ bk)   v = h Wv^T (+ bv)
 *   q, k = rmsnorm per head * q_norm, k_norm           (gemma3: QK-norm)
 *   q, k = rope(q, k; theta of the layer: local or global; positions p0 ..)
 *       (cos and sin read from the sequence's tables, decoder_rope: built
 *        once per forward or session, never per layer)
 *   a = sdpa(q, k, v; causal, sliding window on local layers, GQA)
 *       (cached: k, v appended to the cache, rotated, and a = the queries
 *        over all the cache's rows, lower-right causal: the same visibility
 *        at the absolute positions)
 *   o = a Wo^T;  o = rmsnorm(o) * post_attn_norm       (gemma3)
 *   x = x + o
 *   h = rmsnorm(x) * ffn_norm
 *   f = (act(h Wgate^T) * (h Wup^T)) Wdown^T            (silu | gelu_tanh)
 *   f = rmsnorm(f) * post_ffn_norm                      (gemma3)
 *   x = x + f
 * then logits = (rmsnorm(x) * output_norm) Wout^T.
 */
#include "model/decoder.h"
#include "model/eltwise.h"

#include "base/dtype.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* y[r] = x[r] / rms(x[r]) * w for each of rows rows of width n (in place
 * allowed), by the elementwise kernels (eltwise.h). */
static void rmsnorm_rows(const eltwise_kernels *ek, const float *x, int64_t rows, int64_t n, const float *w,
                         double eps, float *y) {
    for (int64_t r = 0; r < rows; r++) ek->rmsnorm(x + r * n, n, w, eps, y + r * n);
}

/* The scratch of one forward. */
typedef struct scratch {
    float *x, *h, *q, *k, *v, *a, *o, *gate, *up;
    const eltwise_kernels *ek; /* the elementwise kernels of the forward */
} scratch;

static void scratch_free(scratch *s) {
    float *all[] = {s->x, s->h, s->q, s->k, s->v, s->a, s->o, s->gate, s->up};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
}

static attn_status scratch_alloc(const attn_decoder_config *c, int64_t L, scratch *s, const char *fn) {
    memset(s, 0, sizeof *s);
    const int64_t qw = c->n_heads * c->head_dim, kvw = c->n_kv_heads * c->head_dim;
    int64_t widest = c->d_model > qw ? c->d_model : qw, n;
    if (mul_overflows(L, c->d_ffn > widest ? c->d_ffn : widest, &n) || n > INT64_MAX / 4)
        return attn__fail(ATTN_ERR_OVERFLOW, "%s: %lld tokens overflow the scratch", fn, (long long)L);
    s->x = malloc((size_t)(L * c->d_model) * sizeof(float));
    s->h = malloc((size_t)(L * c->d_model) * sizeof(float));
    s->o = malloc((size_t)(L * c->d_model) * sizeof(float));
    s->q = malloc((size_t)(L * qw) * sizeof(float));
    s->a = malloc((size_t)(L * qw) * sizeof(float));
    s->k = malloc((size_t)(L * kvw) * sizeof(float));
    s->v = malloc((size_t)(L * kvw) * sizeof(float));
    s->gate = malloc((size_t)(L * c->d_ffn) * sizeof(float));
    s->up = malloc((size_t)(L * c->d_ffn) * sizeof(float));
    if (!s->x || !s->h || !s->o || !s->q || !s->a || !s->k || !s->v || !s->gate || !s->up) {
        scratch_free(s);
        return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "%s: cannot allocate the scratch for %lld tokens", fn,
                          (long long)L);
    }
    return ATTN_OK;
}

/* Self-attention of one layer: s->h [L, d] in, s->o [L, d] out (before the
 * post-norm); weights [Hq, L, L] or NULL (full sequence only).  out's tensor
 * hook sees q, k, v (before and after RoPE), the scores, the pattern and z
 * (the last three on the full sequence only).  With kv->cache the L tokens
 * are at positions kv->pos0 .. kv->pos0 + L - 1 of kv->seq: their rotated
 * keys and their values are appended to the cache's layer, and the queries
 * attend over every row the layer then holds. */
/* One layer of a cached step with a score, pattern or z hook: the layer's
 * rows for the sequence (the step's just appended) widened into one float32
 * copy [1, S, Hkv, Dh], S = pos0 + L, and the queries, at positions pos0 ..,
 * attended over it with the hooks as the full forward does (scores and
 * pattern [Hq, L, S]).  Costs a copy of the layer's cache per hooked step. */
static attn_status attend_cache_hooked(const attn_decoder_outputs *out, int64_t layer, const decoder_kv *kv,
                                       const attn_tensor *q, const attn_sdpa_options *base, attn_tensor *z) {
    const int64_t Dh = q->shape[3];
    int64_t count = 0, S = 0;
    attn_status st = attn_kv_cache_view(kv->cache, kv->seq, layer, NULL, 0, &count);
    if (st && st != ATTN_ERR_SHAPE) return st;
    attn_kv_segment *seg = malloc((size_t)(count > 0 ? count : 1) * sizeof *seg);
    if (!seg) return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "attn_decoder_step: out of memory (cache view)");
    if ((st = attn_kv_cache_view(kv->cache, kv->seq, layer, seg, count, &count))) {
        free(seg);
        return st;
    }
    for (int64_t i = 0; i < count; i++) S += seg[i].k.shape[1];
    const int64_t Hkv = count ? seg[0].k.shape[2] : 1, row = Hkv * Dh;
    float *kf = malloc((size_t)(S * row) * sizeof(float)), *vf = malloc((size_t)(S * row) * sizeof(float));
    if (!kf || !vf) {
        st = attn__fail(ATTN_ERR_OUT_OF_MEMORY, "attn_decoder_step: cannot copy layer %lld's %lld cached rows",
                        (long long)layer, (long long)S);
        goto done;
    }
    /* Each segment row by row (its views are strided), in the cache's dtype. */
    for (int64_t i = 0, r0 = 0; i < count; r0 += seg[i].k.shape[1], i++)
        for (int pass = 0; pass < 2; pass++) {
            const attn_tensor *t = pass ? &seg[i].v : &seg[i].k;
            float *dst = (pass ? vf : kf) + r0 * row;
            for (int64_t r = 0; r < t->shape[1]; r++)
                for (int64_t h = 0; h < Hkv; h++) {
                    const unsigned char *src =
                        (const unsigned char *)t->data + attn_dtype_bytes(t->dtype, r * t->stride[1] + h * t->stride[2]);
                    dtype_load_f32(src, t->dtype, Dh, dst + (r * Hkv + h) * Dh);
                }
        }
    {
        attn_tensor k = attn_tensor_4d(kf, 1, S, Hkv, Dh), v = attn_tensor_4d(vf, 1, S, Hkv, Dh);
        attn_sdpa_options opt = *base;
        opt.causal = 1;
        opt.query_start = kv->pos0;
        opt.key_start = 0;
        opt.total_len_q = opt.total_len_kv = S;
        st = attn__decoder_attend_hooked(out, layer, q, &k, &v, &opt, NULL, z);
    }
done:
    free(kf);
    free(vf);
    free(seg);
    return st;
}

static attn_status attention_forward(const attn_decoder *m, const decoder_layer *w, int64_t layer, int64_t L,
                                     const decoder_kv *kv, const decoder_rope *rope, scratch *s, attn_kernel kernel,
                                     float *weights, const decoder_inputs *inputs, const attn_decoder_outputs *out) {
    const attn_decoder_config *c = &m->cfg;
    const int64_t Hq = c->n_heads, Hkv = c->n_kv_heads, Dh = c->head_dim;
    attn_status st;
    if ((st = attn__decoder_matmul(m, s->h, L, &w->wq, w->bq, s->q)) ||
        (st = attn__decoder_matmul(m, s->h, L, &w->wk, w->bk, s->k)) ||
        (st = attn__decoder_matmul(m, s->h, L, &w->wv, w->bv, s->v)) ||
        (st = attn__decoder_inputs_apply(m, inputs, 0, s->ek, w->attn_norm, &w->wq, w->bq, L, s->q)) ||
        (st = attn__decoder_inputs_apply(m, inputs, 1, s->ek, w->attn_norm, &w->wk, w->bk, L, s->k)) ||
        (st = attn__decoder_inputs_apply(m, inputs, 2, s->ek, w->attn_norm, &w->wv, w->bv, L, s->v)))
        return st;
    if (w->q_norm) rmsnorm_rows(s->ek, s->q, L * Hq, Dh, w->q_norm, c->rms_eps, s->q);
    if (w->k_norm) rmsnorm_rows(s->ek, s->k, L * Hkv, Dh, w->k_norm, c->rms_eps, s->k);
    if ((st = attn__decoder_hook_call(out, ATTN_DECODER_HOOK_Q, layer, s->q, 3, L, Hq, Dh)) ||
        (st = attn__decoder_hook_call(out, ATTN_DECODER_HOOK_K, layer, s->k, 3, L, Hkv, Dh)) ||
        (st = attn__decoder_hook_call(out, ATTN_DECODER_HOOK_V, layer, s->v, 3, L, Hkv, Dh)))
        return st;
    const int local = attn_decoder_layer_is_local(c, layer);
    /* The sequence's table of this layer's rotation: no cos or sin here. */
    const attn_rope_table *table = local ? rope->local : rope->global;
    attn_tensor q = attn_tensor_4d(s->q, 1, L, Hq, Dh), k = attn_tensor_4d(s->k, 1, L, Hkv, Dh),
                v = attn_tensor_4d(s->v, 1, L, Hkv, Dh), a = attn_tensor_4d(s->a, 1, L, Hq, Dh);
    const int64_t pos0 = kv ? kv->pos0 : 0;
    if ((st = attn_rope_apply_table(&q, NULL, pos0, table)) || (st = attn_rope_apply_table(&k, NULL, pos0, table)) ||
        (st = attn__decoder_hook_call(out, ATTN_DECODER_HOOK_ROT_Q, layer, s->q, 3, L, Hq, Dh)) ||
        (st = attn__decoder_hook_call(out, ATTN_DECODER_HOOK_ROT_K, layer, s->k, 3, L, Hkv, Dh)))
        return st;
    attn_sdpa_options opt = ATTN_SDPA_OPTIONS_INIT;
    opt.scale = c->attn_scale;
    opt.causal = 1;
    if (local) {
        /* Hugging Face's sliding mask: key j visible to query i iff
         * i - W < j <= i, so W - 1 keys left of the diagonal. */
        opt.window = 1;
        opt.window_left = c->sliding_window - 1;
        opt.window_right = 0;
    }
    opt.kernel = kernel;
    if (kv) {
        /* The cache sets the lower-right causal alignment itself, and holds
         * the window at absolute positions: query p sees keys p - W + 1 .. p,
         * exactly the full forward's rule.  Its attend computes no weights:
         * with a score, pattern or z hook the step's queries attend instead
         * over a float32 copy of the layer's whole cache, as the full
         * forward's last rows would. */
        const int64_t q_rows = L;
        if ((st = attn_kv_cache_append(kv->cache, kv->seq, layer, &k, &v))) return st;
        st = attn__decoder_attention_hooked(out)
                 ? attend_cache_hooked(out, layer, kv, &q, &opt, &a)
                 : attn_kv_cache_attend(kv->cache, layer, 1, &kv->seq, &q_rows, &q, &opt, &a, NULL);
        if (st) return st;
    } else {
        if (attn__decoder_attention_hooked(out)) st = attn__decoder_attend_hooked(out, layer, &q, &k, &v, &opt, weights, &a);
        else st = attn_sdpa_forward(&q, &k, &v, &opt, &a, weights, NULL);
        if (st) return st;
    }
    if ((st = attn__decoder_matmul(m, s->a, L, &w->wo, NULL, s->o))) return st;
    return attn__decoder_result_hook(m, out, &w->wo, layer, s->a, L, s->o);
}

/* The FFN of one layer: s->h [L, d] in, s->o [L, d] out (before the post-norm). */
static attn_status ffn_forward(const attn_decoder *m, const decoder_layer *w, int64_t layer, int64_t L, scratch *s,
                               const attn_decoder_outputs *out) {
    const attn_decoder_config *c = &m->cfg;
    const int64_t F = c->d_ffn;
    attn_status st;
    if ((st = attn__decoder_matmul(m, s->h, L, &w->w_gate, NULL, s->gate)) ||
        (st = attn__decoder_matmul(m, s->h, L, &w->w_up, NULL, s->up)) ||
        (st = attn__decoder_hook_call(out, ATTN_DECODER_HOOK_MLP_PRE, layer, s->gate, 2, L, F, 0)) ||
        (st = attn__decoder_hook_call(out, ATTN_DECODER_HOOK_MLP_PRE_LINEAR, layer, s->up, 2, L, F, 0)))
        return st;
    if (c->activation == ATTN_DECODER_SWIGLU) s->ek->silu_mul(s->gate, s->up, L * F);
    else s->ek->gelu_tanh_mul(s->gate, s->up, L * F);
    if ((st = attn__decoder_hook_call(out, ATTN_DECODER_HOOK_MLP_POST, layer, s->gate, 2, L, F, 0))) return st;
    return attn__decoder_matmul(m, s->gate, L, &w->w_down, NULL, s->o);
}

/* Checks what every forward checks (fn names the caller in the messages)
 * and copies the caller's outputs struct into *out by the ABI rule. */
attn_status attn__decoder_check(const attn_decoder *m, const int32_t *ids, int64_t L,
                                const attn_decoder_outputs *caller, attn_decoder_outputs *out, const char *fn) {
    if (!m || !ids || !caller)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn, !m ? "the decoder" : !ids ? "ids" : "out");
    static const attn_decoder_outputs defaults = ATTN_DECODER_OUTPUTS_INIT;
    attn_status st = options_copy(out, sizeof *out, &defaults, caller, "attn_decoder_outputs");
    if (st) return attn__fail(st, "%s: %s", fn, attn_last_error());
    if (L <= 0) return attn__fail(ATTN_ERR_SHAPE, "%s: %lld tokens: at least one is needed", fn, (long long)L);
    const attn_decoder_config *c = &m->cfg;
    for (int64_t t = 0; t < L; t++)
        if (ids[t] < 0 || ids[t] >= c->vocab)
            return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "%s: token %lld is id %ld, outside the vocabulary [0, %lld)",
                              fn, (long long)t, (long)ids[t], (long long)c->vocab);
    return ATTN_OK;
}

attn_status attn__decoder_run(const attn_decoder *m, const int32_t *ids, int64_t L, const decoder_kv *kv,
                              attn_decoder_outputs *out, const char *fn) {
    const attn_decoder_config *c = &m->cfg;
    const int64_t d = c->d_model;
    scratch s;
    attn_status st = scratch_alloc(c, L, &s, fn);
    if (st) return st;
    /* A session's tables are its own (kv->rope); a whole sequence's are
     * built here for its L positions, once for all layers. */
    decoder_rope own = {NULL, NULL};
    const decoder_rope *rope = kv ? kv->rope : &own;
    if (!kv && ((st = attn__decoder_rope_new(m, &own)) || (st = attn__decoder_rope_reserve(&own, L)))) {
        st = attn__fail(st, "%s: RoPE tables: %s", fn, attn_last_error());
        goto done;
    }
    s.ek = attn__eltwise(out->kernel == ATTN_KERNEL_REF);
    if ((st = attn__decoder_embed(m, ids, L, c->embed_scale, s.x))) goto done;
    if ((st = attn__decoder_hook_call(out, ATTN_DECODER_HOOK_EMBED, -1, s.x, 2, L, d, 0))) goto done;
    if (out->hidden) memcpy(out->hidden, s.x, (size_t)(L * d) * sizeof(float));
    for (int64_t l = 0; l < c->n_layers; l++) {
        const decoder_layer *w = &m->layers[l];
        float *weights = out->attention ? out->attention[l] : NULL;
        if ((st = attn__decoder_hook_call(out, ATTN_DECODER_HOOK_RESID_PRE, l, s.x, 2, L, d, 0))) goto done;
        decoder_inputs inputs;
        if ((st = attn__decoder_inputs_take(out, c, l, s.x, L, &inputs))) goto done;
        rmsnorm_rows(s.ek, s.x, L, d, w->attn_norm, c->rms_eps, s.h);
        if (!(st = attn__decoder_norm_hooks(out, ATTN_DECODER_HOOK_LN1_SCALE, ATTN_DECODER_HOOK_LN1_NORMALIZED, l, s.x,
                                            L, d, w->attn_norm, c->rms_eps, s.h)))
            st = attention_forward(m, w, l, L, kv, rope, &s, out->kernel, weights, &inputs, out);
        attn__decoder_inputs_free(&inputs);
        if (st) goto done;
        if (w->post_attn_norm) rmsnorm_rows(s.ek, s.o, L, d, w->post_attn_norm, c->rms_eps, s.o);
        if ((st = attn__decoder_hook_call(out, ATTN_DECODER_HOOK_ATTN_OUT, l, s.o, 2, L, d, 0))) goto done;
        s.ek->add(s.x, s.o, L * d);
        if ((st = attn__decoder_hook_call(out, ATTN_DECODER_HOOK_RESID_MID, l, s.x, 2, L, d, 0))) goto done;
        rmsnorm_rows(s.ek, s.x, L, d, w->ffn_norm, c->rms_eps, s.h);
        if ((st = attn__decoder_norm_hooks(out, ATTN_DECODER_HOOK_LN2_SCALE, ATTN_DECODER_HOOK_LN2_NORMALIZED, l, s.x, L,
                                           d, w->ffn_norm, c->rms_eps, s.h)) ||
            (st = ffn_forward(m, w, l, L, &s, out)))
            goto done;
        if (w->post_ffn_norm) rmsnorm_rows(s.ek, s.o, L, d, w->post_ffn_norm, c->rms_eps, s.o);
        if ((st = attn__decoder_hook_call(out, ATTN_DECODER_HOOK_MLP_OUT, l, s.o, 2, L, d, 0))) goto done;
        s.ek->add(s.x, s.o, L * d);
        if ((st = attn__decoder_hook_call(out, ATTN_DECODER_HOOK_RESID_POST, l, s.x, 2, L, d, 0))) goto done;
        if (out->hidden) memcpy(out->hidden + (l + 1) * L * d, s.x, (size_t)(L * d) * sizeof(float));
        if (out->hook && out->hook(out->hook_user, l, s.x, L, d)) {
            st = attn__fail(ATTN_ERR_INVALID_ARGUMENT, "%s: stopped by the layer hook after layer %lld", fn,
                            (long long)l);
            goto done;
        }
    }
    if (out->logits) {
        const int64_t first = out->last_only ? L - 1 : 0;
        rmsnorm_rows(s.ek, s.x + first * d, L - first, d, m->output_norm, c->rms_eps, s.h);
        if ((st = attn__decoder_norm_hooks(out, ATTN_DECODER_HOOK_LN_FINAL_SCALE, ATTN_DECODER_HOOK_LN_FINAL, -1,
                                           s.x + first * d, L - first, d, m->output_norm, c->rms_eps, s.h)))
            goto done;
        if ((st = attn__decoder_matmul(m, s.h, L - first, &m->output, NULL, out->logits))) goto done;
        /* The weights were checked at load: a non-finite logit is an
         * activation that overflowed; never handed on as a number. */
        const float *bad = NULL;
        for (int64_t i = 0; i < (L - first) * c->vocab && !bad; i++)
            if (!isfinite(out->logits[i])) bad = &out->logits[i];
        if (bad) {
            const int64_t at = bad - out->logits;
            st = attn__fail(ATTN_ERR_FORMAT, "%s: the logit of token id %lld at position %lld is %s: the "
                            "activations overflowed float32 (weights too large for these inputs?)", fn,
                            (long long)(at % c->vocab), (long long)(first + at / c->vocab),
                            isnan(*bad) ? "NaN" : *bad > 0 ? "+inf" : "-inf");
        }
    }
done:
    attn__decoder_rope_free(&own);
    scratch_free(&s);
    return st;
}

attn_status attn_decoder_forward(const attn_decoder *m, const int32_t *ids, int64_t L, attn_decoder_outputs *caller) {
    attn_decoder_outputs out;
    attn_status st = attn__decoder_check(m, ids, L, caller, &out, "attn_decoder_forward");
    if (st) return st;
    return attn__decoder_run(m, ids, L, NULL, &out, "attn_decoder_forward");
}
