/*
 * problem.c — tensor views, the finiteness check, option structs that can
 * grow, and attn__problem_init: the one place where the arguments of an
 * attention call are validated, so that every kernel can trust what it is
 * given.
 *
 * Shape legend: q [B, L, Hq, D]  k [B, S, Hkv, D]  v [B, S, Hkv, Dv]
 *               out [B, L, Hq, Dv]
 */
#include "base/problem.h"


#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

attn_tensor attn_tensor_view(void *data, attn_dtype dtype, int64_t b, int64_t l, int64_t h,
                             int64_t d) {
    attn_tensor t = {data, dtype, {b, l, h, d}, {l * h * d, h * d, d, 1}};
    return t;
}

attn_tensor attn_tensor_4d(float *data, int64_t b, int64_t l, int64_t h, int64_t d) {
    return attn_tensor_view(data, ATTN_F32, b, l, h, d);
}

attn_tensor attn_tensor_3d(float *data, int64_t l, int64_t h, int64_t d) {
    return attn_tensor_4d(data, 1, l, h, d);
}

attn_tensor attn_tensor_2d(float *data, int64_t l, int64_t d) {
    return attn_tensor_4d(data, 1, l, 1, d);
}

attn_status attn_check_finite(const float *data, int64_t n, int64_t *first_bad) {
    if (!data && n > 0) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_check_finite: data is NULL");
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(data[i])) {
            if (first_bad) *first_bad = i;
            return attn__fail(ATTN_ERR_NONFINITE, "value %g at index %lld is not finite",
                             (double)data[i], (long long)i);
        }
    }
    return ATTN_OK;
}

/* The dtypes a tensor may hold (the kernels say which they compute). */
static bool tensor_dtype_valid(attn_dtype dtype) {
    return dtype == ATTN_F32 || dtype == ATTN_F16 || dtype == ATTN_BF16;
}

attn_status attn__tensor_check(const attn_tensor *t, const char *name, problem_data data) {
    if (!t) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "%s is NULL", name);
    if (!t->data && data == PROBLEM_WITH_DATA)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "%s->data is NULL", name);
    if (dtype_is_kv8(t->dtype))
        return attn__fail(ATTN_ERR_UNSUPPORTED, "%s holds %s: the 8-bit block formats are taken for k and v of the "
                          "forward only (and by the KV cache)", name, attn_dtype_name(t->dtype));
    if (!tensor_dtype_valid(t->dtype))
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT,
                          "%s: dtype %d is not a tensor dtype (ATTN_F32, ATTN_F16 or ATTN_BF16)", name,
                          (int)t->dtype);
    static const char *dim_names[4] = {"batch", "positions", "heads", "width"};
    for (int i = 0; i < 4; i++)
        if (t->shape[i] <= 0)
            return attn__fail(ATTN_ERR_SHAPE, "%s: %s must be positive, got %lld", name,
                              dim_names[i], (long long)t->shape[i]);
    for (int i = 0; i < 4; i++) {
        if (t->stride[i] < 0)
            return attn__fail(ATTN_ERR_SHAPE, "%s: stride of %s is negative (%lld)", name,
                              dim_names[i], (long long)t->stride[i]);
    }
    if (t->stride[3] != 1)
        return attn__fail(ATTN_ERR_SHAPE, "%s: the last dimension must be contiguous (stride 1), got %lld",
                          name, (long long)t->stride[3]);
    /* The largest element offset, and the number of elements, must be
     * representable in bytes. */
    const int64_t element_bytes = dtype_is_kv8(t->dtype) ? 2 : (int64_t)attn_dtype_size(t->dtype);
    int64_t last = 0;
    for (int i = 0; i < 4; i++) {
        int64_t term;
        if (mul_overflows(t->shape[i] - 1, t->stride[i], &term) || last > INT64_MAX - term)
            return attn__fail(ATTN_ERR_OVERFLOW, "%s: shape times strides overflows", name);
        last += term;
    }
    int64_t elements;
    if (last > INT64_MAX / element_bytes || mul_overflows(t->shape[0], t->shape[1], &elements) ||
        mul_overflows(elements, t->shape[2], &elements) ||
        mul_overflows(elements, t->shape[3], &elements) || elements > INT64_MAX / element_bytes)
        return attn__fail(ATTN_ERR_OVERFLOW, "%s: the number of elements overflows", name);
    return ATTN_OK;
}

/* k or v: attn__tensor_check, and the 8-bit block formats allowed (whole
 * blocks: width and strides multiples of 32). */
static attn_status tensor_check_kv(const attn_tensor *t, const char *name, problem_data data) {
    if (!t || !dtype_is_kv8(t->dtype)) return attn__tensor_check(t, name, data);
    attn_tensor plain = *t;
    plain.dtype = ATTN_F16; /* the other checks, on the element count */
    attn_status st = attn__tensor_check(&plain, name, data);
    if (st) return st;
    if (t->shape[3] % KV8_BLOCK)
        return attn__fail(ATTN_ERR_SHAPE, "%s holds %s, blocks of 32 values: its width %lld must be a multiple of 32",
                          name, attn_dtype_name(t->dtype), (long long)t->shape[3]);
    for (int i = 0; i < 3; i++)
        if (t->stride[i] % KV8_BLOCK)
            return attn__fail(ATTN_ERR_SHAPE,
                              "%s holds %s, blocks of 32 values: its stride[%d] = %lld must be a multiple of 32", name,
                              attn_dtype_name(t->dtype), i, (long long)t->stride[i]);
    return ATTN_OK;
}

attn_status attn__tensor_check_shape(const attn_tensor *t, const char *name, const int64_t want[4],
                                     const char *like) {
    attn_status st = attn__tensor_check(t, name, PROBLEM_WITH_DATA);
    if (st) return st;
    for (int d = 0; d < 4; d++)
        if (t->shape[d] != want[d])
            return attn__fail(ATTN_ERR_SHAPE,
                              "%s is [%lld, %lld, %lld, %lld] but must be shaped like %s [%lld, %lld, "
                              "%lld, %lld]",
                              name, (long long)t->shape[0], (long long)t->shape[1],
                              (long long)t->shape[2], (long long)t->shape[3], like,
                              (long long)want[0], (long long)want[1], (long long)want[2],
                              (long long)want[3]);
    return ATTN_OK;
}

attn_status attn__problem_require_f32(const sdpa_problem *p, const attn_tensor *out,
                                      const char *kernel) {
    const attn_tensor *tensors[4] = {&p->q, &p->k, p->dim_v ? &p->v : NULL, out};
    static const char *const names[4] = {"q", "k", "v", "out"};
    for (int i = 0; i < 4; i++)
        if (tensors[i] && tensors[i]->dtype != ATTN_F32)
            return attn__fail(ATTN_ERR_UNSUPPORTED,
                              "the %s kernel computes on float32 tensors only, and %s holds %s "
                              "(convert it to float32 first)",
                              kernel, names[i], attn_dtype_name(tensors[i]->dtype));
    return ATTN_OK;
}

/* A broadcastable [B|1, Hq|1, L|1, S|1] shape for mask or bias. */
static attn_status check_broadcast(const int64_t shape[4], const int64_t full[4], const char *name) {
    static const char *dim_names[4] = {"batch", "heads", "query positions", "key positions"};
    for (int i = 0; i < 4; i++) {
        if (shape[i] != 1 && shape[i] != full[i])
            return attn__fail(ATTN_ERR_SHAPE,
                             "%s: %s dimension is %lld, must be 1 or %lld (shape [B, Hq, L, S], "
                             "size-1 dimensions broadcast)",
                             name, dim_names[i], (long long)shape[i], (long long)full[i]);
    }
    int64_t n;
    if (mul_overflows(shape[0], shape[1], &n) || mul_overflows(n, shape[2], &n) ||
        mul_overflows(n, shape[3], &n))
        return attn__fail(ATTN_ERR_OVERFLOW, "%s: the number of elements overflows", name);
    return ATTN_OK;
}

/* Validates the options of the score stage (logits.h applies them):
 * softcap 0 or positive and finite, sinks finite or -inf, ALiBi slopes
 * finite and not given together with alibi_standard. */
static attn_status check_score_stage(const sdpa_problem *p) {
    const attn_sdpa_options *o = &p->opt;
    if (!(o->softcap >= 0.0f) || isinf(o->softcap))
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT,
                          "softcap must be 0 (off) or a positive finite number, got %g", (double)o->softcap);
    for (int64_t h = 0; o->sinks && h < p->heads_q; h++)
        if (isnan(o->sinks[h]) || o->sinks[h] == INFINITY)
            return attn__fail(ATTN_ERR_INVALID_ARGUMENT,
                              "sinks[%lld] is %g: a sink logit must be finite, or -inf for no sink", (long long)h,
                              (double)o->sinks[h]);
    if (o->alibi_slopes && o->alibi_standard)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT,
                          "alibi_slopes and alibi_standard are both set: give the slopes, or ask for the "
                          "standard ones, not both");
    for (int64_t h = 0; o->alibi_slopes && h < p->heads_q; h++)
        if (!isfinite(o->alibi_slopes[h]))
            return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "alibi_slopes[%lld] is %g: slopes must be finite",
                              (long long)h, (double)o->alibi_slopes[h]);
    return ATTN_OK;
}

attn_status attn__problem_init(sdpa_problem *p, const attn_tensor *q, const attn_tensor *k,
                               const attn_tensor *v, const attn_tensor *out,
                               const attn_sdpa_options *opt, problem_data data) {
    attn_status st;
    memset(p, 0, sizeof *p);
    if ((st = attn__tensor_check(q, "q", data)) || (st = tensor_check_kv(k, "k", data))) return st;
    if (v && (st = tensor_check_kv(v, "v", data))) return st;
    if (out && (st = attn__tensor_check(out, "out", data))) return st;

    p->batch = q->shape[0];
    p->len_q = q->shape[1];
    p->heads_q = q->shape[2];
    p->dim = q->shape[3];
    p->len_kv = k->shape[1];
    p->heads_kv = k->shape[2];
    p->dim_v = v ? v->shape[3] : 0;

    if (k->shape[0] != p->batch)
        return attn__fail(ATTN_ERR_SHAPE, "k has batch %lld but q has batch %lld",
                         (long long)k->shape[0], (long long)p->batch);
    if (k->shape[3] != p->dim)
        return attn__fail(ATTN_ERR_SHAPE, "k has width %lld but q has width %lld (q and k must share D)",
                         (long long)k->shape[3], (long long)p->dim);
    if (p->heads_q % p->heads_kv != 0)
        return attn__fail(ATTN_ERR_SHAPE,
                         "q has %lld heads, not a multiple of k's %lld heads (grouped-query attention "
                         "needs Hq = G * Hkv)",
                         (long long)p->heads_q, (long long)p->heads_kv);
    p->group = p->heads_q / p->heads_kv;
    if (v && (st = problem_check_v_like_k(k, v))) return st;
    if (out) {
        if (out->shape[0] != p->batch || out->shape[1] != p->len_q || out->shape[2] != p->heads_q ||
            (v && out->shape[3] != p->dim_v))
            return attn__fail(ATTN_ERR_SHAPE,
                             "out is [%lld, %lld, %lld, %lld] but must be [B, L, Hq, Dv] = [%lld, %lld, "
                             "%lld, %lld]",
                             (long long)out->shape[0], (long long)out->shape[1],
                             (long long)out->shape[2], (long long)out->shape[3], (long long)p->batch,
                             (long long)p->len_q, (long long)p->heads_q, (long long)p->dim_v);
    }
    /* The weight table [B, Hq, L, S] must be addressable too. */
    int64_t cells;
    if (mul_overflows(p->batch * p->heads_q, p->len_q, &cells) ||
        mul_overflows(cells, p->len_kv, &cells) || cells > INT64_MAX / (int64_t)sizeof(double))
        return attn__fail(ATTN_ERR_OVERFLOW, "the score table B*Hq*L*S overflows");

    static const attn_sdpa_options defaults = ATTN_SDPA_OPTIONS_INIT;
    if ((st = options_copy(&p->opt, sizeof p->opt, &defaults, opt, "attn_sdpa_options"))) return st;
    const attn_sdpa_options *o = &p->opt;
    if (!(o->scale >= 0.0f) || isinf(o->scale))
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "scale must be a positive finite number, got %g",
                         (double)o->scale);
    p->scale = o->scale > 0.0f ? o->scale : (float)(1.0 / sqrt((double)p->dim));
    if (o->align != ATTN_ALIGN_TOP_LEFT && o->align != ATTN_ALIGN_LOWER_RIGHT)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "align must be top-left or lower-right, got %d",
                         (int)o->align);
    if (o->query_start < 0 || o->key_start < 0)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "query_start (%lld) and key_start (%lld) must be >= 0",
                         (long long)o->query_start, (long long)o->key_start);
    int64_t total_q = o->total_len_q ? o->total_len_q : p->len_q;
    int64_t total_kv = o->total_len_kv ? o->total_len_kv : p->len_kv;
    if (total_q < 0 || total_kv < 0 || o->query_start > total_q - p->len_q ||
        o->key_start > total_kv - p->len_kv)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT,
                          "%lld query rows from position %lld of %lld, and %lld key rows from position %lld "
                          "of %lld, do not fit: query_start + L must be <= total_len_q and key_start + S "
                          "<= total_len_kv",
                          (long long)p->len_q, (long long)o->query_start, (long long)total_q,
                          (long long)p->len_kv, (long long)o->key_start, (long long)total_kv);
    p->total_len_kv = total_kv;
    p->diagonal_offset = problem_diagonal_offset(o, p->len_q, p->len_kv);
    if (o->window && (o->window_left < -1 || o->window_right < -1))
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT,
                         "window (%lld, %lld): each side must be >= 0, or -1 for unbounded",
                         (long long)o->window_left, (long long)o->window_right);
    if (o->key_lengths) {
        for (int64_t b = 0; b < p->batch; b++)
            if (o->key_lengths[b] < 0 || o->key_lengths[b] > total_kv)
                return attn__fail(ATTN_ERR_INVALID_ARGUMENT,
                                 "key_lengths[%lld] = %lld is outside [0, S = %lld]", (long long)b,
                                 (long long)o->key_lengths[b], (long long)total_kv);
    }
    const int64_t full[4] = {p->batch, p->heads_q, p->len_q, p->len_kv};
    if (o->mask && (st = check_broadcast(o->mask_shape, full, "mask"))) return st;
    if (o->bias && (st = check_broadcast(o->bias_shape, full, "bias"))) return st;
    if (o->kernel != ATTN_KERNEL_AUTO && o->kernel != ATTN_KERNEL_REF && o->kernel != ATTN_KERNEL_FLASH)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "kernel must be auto, ref or flash, got %d",
                         (int)o->kernel);
    if (o->threads < 0)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "threads must be >= 0 (0 = default), got %d",
                         o->threads);
    if (o->precision != ATTN_PRECISION_EXACT && o->precision != ATTN_PRECISION_FAST)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "precision must be exact or fast, got %d",
                         (int)o->precision);
    if (o->workspace_size > 0 && !o->workspace)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "workspace_size is %zu but workspace is NULL",
                         o->workspace_size);
    /* The one plausibility bound a size can be held to (attn.h): no C
     * object is larger than PTRDIFF_MAX bytes or wraps the address space
     * (a size computed as -1, a pointer and a length swapped). */
    if (o->workspace && (o->workspace_size > (size_t)PTRDIFF_MAX ||
                         (uintptr_t)o->workspace > UINTPTR_MAX - o->workspace_size))
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT,
                          "workspace_size is %zu: no buffer at %p can be that large (give the buffer's real size, "
                          "at least what attn_sdpa_workspace_size reports)", o->workspace_size, o->workspace);

    if ((st = check_score_stage(p))) return st;

    p->q = *q;
    p->k = *k;
    if (v) p->v = *v;
    return ATTN_OK;
}
