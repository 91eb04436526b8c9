/*
 * traced.c — attention and multi-head attention with every intermediate
 * recorded (the hooks of trace.c) and patches applied on the way.  The
 * pass is the module's own (src/api/mha.c: attn_mha_forward runs the same
 * one, so without patches every hook and the output are bit-identical to
 * it); this file only records, and patches between its steps.  Only when
 * the pattern itself is patched is z computed here, as the weighted sum of
 * v under the patched pattern.
 *
 * Shape legend:
 *   x [B, L, d_model]   context [B, S, d_context]
 *   q [B, L, Hq, D]  k [B, S, Hkv, D]  v [B, S, Hkv, Dv]
 *   scores, pattern [B, Hq, L, S]  z [B, L, Hq, Dv]
 *   result [B, L, Hq, d_out]  attn_out, out [B, L, d_out]
 */
#include "interp/interp.h"

#include "api/mha.h"
#include "base/overlap.h"
#include "base/problem.h"

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

/* The patches of one traced call, in the library's layout. */
typedef struct patch_set {
    const attn_patch *patches;
    int count;
} patch_set;

static attn_status before_attention(void *ctx, attn_trace *t) {
    const patch_set *ps = ctx;
    return attn__patches_apply(t, ps->patches, ps->count, PATCH_STAGE_QKV, NULL);
}

static attn_status after_attention(void *ctx, attn_trace *t) {
    const patch_set *ps = ctx;
    attn_status st;
    bool pattern_patches = false;
    for (int i = 0; i < ps->count; i++) pattern_patches |= ps->patches[i].hook == ATTN_HOOK_PATTERN;
    if (pattern_patches) {
        /* One byte per pattern row; sizes were checked when the trace was allocated. */
        uint8_t *touched = calloc((size_t)(t->batch * t->heads * t->len), 1);
        if (!touched) return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "trace: cannot allocate the pattern row flags");
        st = attn__patches_apply(t, ps->patches, ps->count, PATCH_STAGE_PATTERN, touched);
        if (!st) weighted_sum(t, touched);
        free(touched);
        if (st) return st;
    }
    return attn__patches_apply(t, ps->patches, ps->count, PATCH_STAGE_Z, NULL);
}

/* Copies a strided float32 tensor into a contiguous [B, P, H, W] buffer. */
static void gather(const attn_tensor *src, float *dst) {
    const int64_t W = src->shape[3];
    for (int64_t b = 0; b < src->shape[0]; b++)
        for (int64_t p = 0; p < src->shape[1]; p++)
            for (int64_t h = 0; h < src->shape[2]; h++) {
                memcpy(dst, problem_row(src, b, p, h), (size_t)W * sizeof(float));
                dst += W;
            }
}

/* Checks the patches against t's sizes, copies them into the library's
 * layout (*set, free set->patches after), allocates t's buffers.  On
 * failure t is freed and left zeroed. */
static attn_status prepare(attn_trace *t, const attn_patch *patches, int n_patches, patch_set *set) {
    attn_patch *copy = NULL;
    attn_status st = attn__patches_copy(patches, n_patches, &copy);
    if (!st) st = attn__patches_check(t, copy, n_patches);
    if (!st) st = attn__trace_alloc(t);
    if (st) {
        free(copy);
        attn_trace_free(t);
        return st;
    }
    set->patches = copy;
    set->count = n_patches;
    return ATTN_OK;
}

/* The caller's trace, or a local one when it passed NULL; on failure the
 * trace is freed (and so left zeroed). */
static attn_status finish(attn_trace *t, attn_trace *caller, patch_set *set, attn_status st) {
    free((void *)set->patches);
    if (st || !caller) attn_trace_free(t);
    return st;
}

attn_status attn_sdpa_forward_traced(const attn_tensor *q, const attn_tensor *k,
                                     const attn_tensor *v, const attn_sdpa_options *opt,
                                     const attn_patch *patches, int n_patches,
                                     attn_trace *trace, attn_tensor *out) {
    sdpa_problem p;
    attn_status st;
    if (!v) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "v is NULL");
    if (!out && !trace)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "out and trace are both NULL: nothing to write");
    const mem_extent written = extent_of_tensor("out", out);
    if ((st = attn__problem_init(&p, q, k, v, out, opt, PROBLEM_WITH_DATA)) ||
        (st = attn__problem_require_f32(&p, out, "traced")) ||
        (st = attn__problem_check_outputs(&p, &written, 1, NULL, 0)))
        return st;

    attn_trace local = {0}, *t = trace ? trace : &local;
    patch_set set = {NULL, 0};
    memset(t, 0, sizeof *t);
    t->batch = p.batch;
    t->len = p.len_q;
    t->context_len = p.len_kv;
    t->heads = p.heads_q;
    t->kv_heads = p.heads_kv;
    t->head_dim = p.dim;
    t->value_dim = p.dim_v;
    if ((st = prepare(t, patches, n_patches, &set))) return st;
    gather(q, t->q);
    gather(k, t->k);
    gather(v, t->v);
    const mha_hooks hooks = {&set, before_attention, after_attention};
    if ((st = attn__mha_pass(NULL, t, opt, &hooks, NULL))) return finish(t, trace, &set, st);
    if (out) {
        const float *z = t->z;
        for (int64_t b = 0; b < t->batch; b++)
            for (int64_t i = 0; i < t->len; i++)
                for (int64_t h = 0; h < t->heads; h++, z += t->value_dim)
                    memcpy(problem_row(out, b, i, h), z, (size_t)t->value_dim * sizeof(float));
    }
    return finish(t, trace, &set, ATTN_OK);
}

attn_status attn_mha_forward_traced(const attn_mha *module, const float *x, int64_t batch,
                                    int64_t len, const float *context, int64_t context_len,
                                    const attn_sdpa_options *opt, const attn_patch *patches,
                                    int n_patches, attn_trace *trace, float *out) {
    mha_call c;
    attn_status st = attn__mha_call_init(&c, module, x, batch, len, context, context_len);
    if (st) return st;
    if (!out && !trace)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "out and trace are both NULL: nothing to write");
    mem_extent inputs[MHA_INPUT_EXTENTS];
    const int n_inputs = attn__mha_input_extents(&c, opt, inputs);
    const mem_extent output = extent_of_array("out", out, extent_mul(c.rows_q, c.m.d_out), (int64_t)sizeof(float));
    if ((st = overlap_check("mha", &output, 1, inputs, n_inputs))) return st;

    attn_trace local = {0}, *t = trace ? trace : &local;
    patch_set set = {NULL, 0};
    memset(t, 0, sizeof *t);
    attn__mha_trace_sizes(t, &c);
    if ((st = prepare(t, patches, n_patches, &set))) return st;
    const mha_hooks hooks = {&set, before_attention, after_attention};
    if ((st = attn__mha_pass(&c, t, opt, &hooks, NULL))) return finish(t, trace, &set, st);
    if (out) memcpy(out, t->attn_out, (size_t)(c.rows_q * c.m.d_out) * sizeof(float));
    return finish(t, trace, &set, ATTN_OK);
}
