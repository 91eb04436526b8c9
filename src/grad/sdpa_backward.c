/*
 * sdpa_backward.c — the public entry points of attention's backward pass:
 * validate once, choose a kernel, provide the forward's out and lse when the
 * caller did not keep them, provide the workspace, run.
 *
 * Shape legend: q [B, L, Hq, D]  k [B, S, Hkv, D]  v [B, S, Hkv, Dv]
 *               out, dout [B, L, Hq, Dv]  lse [B, Hq, L]
 *               dq like q  dk like k  dv like v
 */
#include "core/internal.h"

#include <stdlib.h>

/* A gradient (or dout) tensor: present, the wanted shape, a contiguous last
 * dimension and non-negative strides whose largest offset fits in int64. */
static attn_status check_like(const attn_tensor *t, const char *name, const int64_t want[4],
                              const char *like) {
    if (!t->data) return attn_fail(ATTN_ERR_INVALID_ARGUMENT, "%s->data is NULL", name);
    for (int d = 0; d < 4; d++)
        if (t->shape[d] != want[d])
            return attn_fail(ATTN_ERR_SHAPE,
                             "%s is [%lld, %lld, %lld, %lld] but must be shaped like %s [%lld, %lld, "
                             "%lld, %lld]",
                             name, (long long)t->shape[0], (long long)t->shape[1],
                             (long long)t->shape[2], (long long)t->shape[3], like,
                             (long long)want[0], (long long)want[1], (long long)want[2],
                             (long long)want[3]);
    if (t->stride[3] != 1)
        return attn_fail(ATTN_ERR_SHAPE, "%s: the last dimension must be contiguous (stride 1), got %lld",
                         name, (long long)t->stride[3]);
    int64_t last = 0;
    for (int d = 0; d < 4; d++) {
        int64_t term;
        if (t->stride[d] < 0)
            return attn_fail(ATTN_ERR_SHAPE, "%s: stride %d is negative (%lld)", name, d,
                             (long long)t->stride[d]);
        if (attn_mul_overflows(t->shape[d] - 1, t->stride[d], &term) || last > INT64_MAX - term)
            return attn_fail(ATTN_ERR_OVERFLOW, "%s: shape times strides overflows", name);
        last += term;
    }
    return ATTN_OK;
}

/* Below this many query-key cells times (D + Dv), summed over batches and
 * heads, the reference backward is faster than the flash one, whose tiles,
 * packing and workspace cost a fixed ~10-100 us (docs/backward.md: e.g.
 * B = 32, L = 1, S = 8, D = 32 takes 30 us on the reference, 150 us on
 * flash; B = 4, L = S = 16, Hq = 2, D = 32 takes 205 us and 75 us). */
#define REF_BACKWARD_BELOW ((int64_t)1 << 16)

/* The kernel a validated problem's backward runs on: auto is flash except
 * for tiny problems; flash on request; the reference on request, or for
 * every call when $ATTN_ARCH=ref, as in the forward. */
static attn_kernel choose_kernel(const attn_problem *p) {
    if (p->opt.kernel == ATTN_KERNEL_REF || attn_dispatch_uses_ref()) return ATTN_KERNEL_REF;
    if (p->opt.kernel == ATTN_KERNEL_FLASH) return ATTN_KERNEL_FLASH;
    const double work = (double)(p->batch * p->heads_q) * (double)p->len_q * (double)p->len_kv *
                        (double)(p->dim + p->dim_v);
    return work < (double)REF_BACKWARD_BELOW ? ATTN_KERNEL_REF : ATTN_KERNEL_FLASH;
}

static size_t kernel_workspace_size(const attn_problem *p, attn_kernel kernel) {
    return kernel == ATTN_KERNEL_REF ? attn_sdpa_ref_backward_workspace_size(p)
                                     : attn_sdpa_flash_backward_workspace_size(p);
}

/* Validates the inputs of a backward call (v is required, unlike in
 * attn_problem_init) and fills p. */
static attn_status init_problem(attn_problem *p, const attn_tensor *q, const attn_tensor *k,
                                const attn_tensor *v, const attn_tensor *out,
                                const attn_sdpa_options *opt) {
    if (!v) return attn_fail(ATTN_ERR_INVALID_ARGUMENT, "v is NULL");
    return attn_problem_init(p, q, k, v, out, opt);
}

attn_status attn_sdpa_backward_workspace_size(const attn_tensor *q, const attn_tensor *k,
                                              const attn_tensor *v,
                                              const attn_sdpa_options *opt, size_t *bytes) {
    attn_problem p;
    attn_status st;
    if (!bytes) return attn_fail(ATTN_ERR_INVALID_ARGUMENT, "bytes is NULL");
    if ((st = init_problem(&p, q, k, v, NULL, opt))) return st;
    *bytes = kernel_workspace_size(&p, choose_kernel(&p));
    return ATTN_OK;
}

const char *attn_sdpa_backward_kernel_name(const attn_tensor *q, const attn_tensor *k,
                                           const attn_tensor *v, const attn_sdpa_options *opt) {
    attn_problem p;
    if (init_problem(&p, q, k, v, NULL, opt)) return "invalid";
    return choose_kernel(&p) == ATTN_KERNEL_REF ? "ref" : "flash";
}

attn_status attn_sdpa_backward(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                               const attn_sdpa_options *opt, const attn_tensor *out,
                               const float *lse, const attn_tensor *dout, attn_tensor *dq,
                               attn_tensor *dk, attn_tensor *dv) {
    attn_problem p;
    attn_status st;
    if ((st = init_problem(&p, q, k, v, out, opt))) return st;
    if (!out != !lse)
        return attn_fail(ATTN_ERR_INVALID_ARGUMENT,
                         "out and lse go together: pass both (from the forward) or neither "
                         "(recomputed); %s is NULL", out ? "lse" : "out");
    if (!dout) return attn_fail(ATTN_ERR_INVALID_ARGUMENT, "dout is NULL");
    const int64_t out_shape[4] = {p.batch, p.len_q, p.heads_q, p.dim_v};
    if ((st = check_like(dout, "dout", out_shape, "out")) ||
        (dq && (st = check_like(dq, "dq", q->shape, "q"))) ||
        (dk && (st = check_like(dk, "dk", k->shape, "k"))) ||
        (dv && (st = check_like(dv, "dv", v->shape, "v"))))
        return st;
    if (!dq && !dk && !dv) return ATTN_OK;

    attn_kernel kernel = choose_kernel(&p);
    size_t need = kernel_workspace_size(&p, kernel);
    void *workspace = p.opt.workspace, *owned = NULL;
    float *owned_out = NULL, *owned_lse = NULL;
    attn_tensor recomputed_out;
    if (need > p.opt.workspace_size) {
        if (p.opt.workspace)
            return attn_fail(ATTN_ERR_INVALID_ARGUMENT,
                             "workspace has %zu bytes, this call needs %zu "
                             "(attn_sdpa_backward_workspace_size)",
                             p.opt.workspace_size, need);
        workspace = owned = malloc(need ? need : 1);
        if (!workspace)
            return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "cannot allocate %zu bytes of workspace", need);
    }
    if (!out && kernel != ATTN_KERNEL_REF) {
        /* The flash kernel needs the forward's out and lse: recompute them. */
        size_t n_out = (size_t)(p.batch * p.len_q * p.heads_q * p.dim_v);
        size_t n_lse = (size_t)(p.batch * p.heads_q * p.len_q);
        owned_out = malloc(n_out * sizeof(float));
        owned_lse = malloc(n_lse * sizeof(float));
        if (!owned_out || !owned_lse) {
            st = attn_fail(ATTN_ERR_OUT_OF_MEMORY, "cannot allocate the recomputed forward output");
            goto cleanup;
        }
        attn_sdpa_options forward_opt = p.opt;
        forward_opt.kernel = ATTN_KERNEL_AUTO;
        forward_opt.workspace = NULL;
        forward_opt.workspace_size = 0;
        recomputed_out = attn_tensor_4d(owned_out, p.batch, p.len_q, p.heads_q, p.dim_v);
        if ((st = attn_sdpa_forward(q, k, v, &forward_opt, &recomputed_out, NULL, owned_lse)))
            goto cleanup;
        out = &recomputed_out;
        lse = owned_lse;
    }

    const attn_backward_args args = {out, lse, dout, dq, dk, dv};
    st = kernel == ATTN_KERNEL_REF ? attn_sdpa_ref_backward(&p, workspace, &args)
                                   : attn_sdpa_flash_backward(&p, workspace, &args);
cleanup:
    free(owned);
    free(owned_out);
    free(owned_lse);
    return st;
}
