/*
 * decoder_hooks.c — the decoder's hook points (attn_decoder.h): their
 * TransformerLens names (from the one vocabulary of attn_interp.h), calling
 * a tensor hook, and the attention of a layer whose scores, pattern or z a
 * hook may read and overwrite.
 *
 * Shape legend: L tokens, Hq / Hkv heads, Dh head width, group = Hq / Hkv.
 *   q [1, L, Hq, Dh]  k, v [1, L, Hkv, Dh]  scores, pattern [Hq, L, L]
 *   z [1, L, Hq, Dh]
 */
#include "model/decoder.h"

#include "attn_interp.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>

/* The decoder's point p is the vocabulary's site p (attn_interp.h): its
 * names, and their parsing, come from there. */
#define SAME(p) ((int)ATTN_DECODER_HOOK_##p == (int)ATTN_HOOK_SITE_##p)
_Static_assert(SAME(EMBED) && SAME(RESID_PRE) && SAME(Q) && SAME(K) &&
                   SAME(V) && SAME(ROT_Q) && SAME(ROT_K) && SAME(ATTN_SCORES) &&
                   SAME(PATTERN) && SAME(Z) && SAME(ATTN_OUT) && SAME(RESID_MID) &&
                   SAME(MLP_OUT) && SAME(RESID_POST) && SAME(LN_FINAL) && SAME(RESULT) &&
                   SAME(LN_FINAL_SCALE) && SAME(Q_INPUT) && SAME(K_INPUT) && SAME(V_INPUT) &&
                   SAME(LN1_SCALE) && SAME(LN1_NORMALIZED) && SAME(LN2_SCALE) && SAME(LN2_NORMALIZED) &&
                   SAME(MLP_PRE) && SAME(MLP_PRE_LINEAR) && SAME(MLP_POST) &&
                   (int)ATTN_DECODER_HOOK_POINTS == (int)ATTN_HOOK_SITES && ATTN_HOOK_SITES <= 32,
               "attn_decoder_hook_point numbers the sites of attn_hook_site (a bit each of a uint32_t)");
#undef SAME

const char *attn_decoder_hook_suffix(attn_decoder_hook_point point) {
    return (unsigned)point < ATTN_DECODER_HOOK_POINTS ? attn_hook_site_suffix((attn_hook_site)point) : NULL;
}

const char *attn_decoder_hook_name(attn_decoder_hook_point point, int64_t layer, char *buf, size_t size) {
    if ((unsigned)point >= ATTN_DECODER_HOOK_POINTS) return NULL;
    return attn_hook_site_name((attn_hook_site)point, layer, buf, size);
}

attn_status attn_decoder_hook_parse(const char *name, attn_decoder_hook_point *point, int64_t *layer) {
    if (!name || !point || !layer)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_decoder_hook_parse: %s is NULL",
                          !name ? "name" : !point ? "point" : "layer");
    attn_hook_site site;
    int64_t l;
    const attn_status st = attn_hook_parse(name, ATTN_HOOK_NAME_FULL, &site, &l);
    if (st) return st;
    *point = (attn_decoder_hook_point)site;
    *layer = l;
    return ATTN_OK;
}

int attn__decoder_hook_wanted(const attn_decoder_outputs *out, attn_decoder_hook_point point) {
    return out->tensor_hook &&
           (out->tensor_hook_points & (1u << point));
}

attn_status attn__decoder_hook_call(const attn_decoder_outputs *out, attn_decoder_hook_point point, int64_t layer,
                                    float *data, int ndim, int64_t s0, int64_t s1, int64_t s2) {
    if (!attn__decoder_hook_wanted(out, point)) return ATTN_OK;
    char name[96];
    attn_decoder_hook_tensor t = {point, attn_hook_site_per_layer((attn_hook_site)point) ? layer : -1,
                                  attn_decoder_hook_name(point, layer, name, sizeof name), data, ndim, {s0, s1, s2}};
    if (out->tensor_hook(out->tensor_hook_user, &t))
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_decoder_forward: stopped by the tensor hook at %s", name);
    return ATTN_OK;
}

/* pattern [Hq, L, S] := the softmax of each row of scores, over its finite
 * entries (max-subtracted, in double); -inf entries weigh 0, a row with no
 * finite entry is all 0 (attn's rule for a fully masked row). */
static void softmax_rows(const float *scores, int64_t rows, int64_t n, float *pattern) {
    for (int64_t r = 0; r < rows; r++) {
        const float *s_r = scores + r * n;
        float *p_r = pattern + r * n;
        double max = -INFINITY, sum = 0.0;
        for (int64_t j = 0; j < n; j++)
            if (s_r[j] > max) max = s_r[j];
        for (int64_t j = 0; j < n; j++) sum += max == -INFINITY || s_r[j] == -INFINITY ? 0.0 : exp(s_r[j] - max);
        for (int64_t j = 0; j < n; j++)
            p_r[j] = sum > 0.0 && s_r[j] != -INFINITY ? (float)(exp(s_r[j] - max) / sum) : 0.0f;
    }
}

/* z[i, h, :] = sum_j pattern[h, i, j] v[j, h / group, :], float32 sums in
 * key order: the value path under a pattern a hook wrote.  pattern
 * [Hq, L, S], v [S, Hkv, Dh], z [L, Hq, Dh]. */
static void z_from_pattern(const float *pattern, const float *v, int64_t L, int64_t S, int64_t Hq, int64_t Hkv,
                           int64_t Dh, float *z) {
    const int64_t group = Hq / Hkv;
    for (int64_t i = 0; i < L; i++)
        for (int64_t h = 0; h < Hq; h++) {
            float *z_ih = z + (i * Hq + h) * Dh;
            const float *p_hi = pattern + (h * L + i) * S;
            for (int64_t e = 0; e < Dh; e++) z_ih[e] = 0.0f;
            for (int64_t j = 0; j < S; j++) {
                const float w = p_hi[j];
                if (w == 0.0f) continue;
                const float *v_j = v + (j * Hkv + h / group) * Dh;
                for (int64_t e = 0; e < Dh; e++) z_ih[e] += w * v_j[e];
            }
        }
}

int attn__decoder_attention_hooked(const attn_decoder_outputs *out) {
    return attn__decoder_hook_wanted(out, ATTN_DECODER_HOOK_ATTN_SCORES) ||
           attn__decoder_hook_wanted(out, ATTN_DECODER_HOOK_PATTERN) ||
           attn__decoder_hook_wanted(out, ATTN_DECODER_HOOK_Z);
}

attn_status attn__decoder_attend_hooked(const attn_decoder_outputs *out, int64_t layer, const attn_tensor *q,
                                        const attn_tensor *k, const attn_tensor *v, const attn_sdpa_options *opt,
                                        float *weights, attn_tensor *z) {
    const int64_t L = q->shape[1], S = k->shape[1], Hq = q->shape[2], Hkv = k->shape[2], Dh = q->shape[3];
    const int want_s = attn__decoder_hook_wanted(out, ATTN_DECODER_HOOK_ATTN_SCORES);
    const int want_p = attn__decoder_hook_wanted(out, ATTN_DECODER_HOOK_PATTERN);
    const size_t cells = (size_t)(Hq * L * S);
    float *scores = NULL, *copy = NULL, *own_pattern = NULL;
    float *pattern = weights;
    attn_status st = ATTN_OK;
    if (!pattern && (want_s || want_p)) pattern = own_pattern = malloc(cells * sizeof(float));
    if (want_s || want_p) copy = malloc(cells * sizeof(float));
    if (want_s) scores = malloc(cells * sizeof(float));
    if (((want_s || want_p) && (!pattern || !copy)) || (want_s && !scores)) {
        st = attn__fail(ATTN_ERR_OUT_OF_MEMORY, "attn_decoder_forward: cannot allocate layer %lld's hooked pattern",
                        (long long)layer);
        goto done;
    }
    int rewritten = 0;
    if (want_s) {
        if ((st = attn_sdpa_scores(q, k, opt, scores))) goto done;
        memcpy(copy, scores, cells * sizeof(float));
        if ((st = attn__decoder_hook_call(out, ATTN_DECODER_HOOK_ATTN_SCORES, layer, scores, 3, Hq, L, S))) goto done;
        if (memcmp(copy, scores, cells * sizeof(float)) != 0) {
            softmax_rows(scores, Hq * L, S, pattern);
            z_from_pattern(pattern, v->data, L, S, Hq, Hkv, Dh, z->data);
            rewritten = 1;
        }
    }
    /* Unchanged scores: the kernel's own output, bit for bit what an
     * unhooked forward computes. */
    if (!rewritten && (st = attn_sdpa_forward(q, k, v, opt, z, pattern, NULL))) goto done;
    if (want_p) {
        memcpy(copy, pattern, cells * sizeof(float));
        if ((st = attn__decoder_hook_call(out, ATTN_DECODER_HOOK_PATTERN, layer, pattern, 3, Hq, L, S))) goto done;
        if (memcmp(copy, pattern, cells * sizeof(float)) != 0) z_from_pattern(pattern, v->data, L, S, Hq, Hkv, Dh, z->data);
    }
    st = attn__decoder_hook_call(out, ATTN_DECODER_HOOK_Z, layer, z->data, 3, L, Hq, Dh);
done:
    free(scores);
    free(copy);
    free(own_pattern);
    return st;
}
