/*
 * sdpa_backward.c — the public entry points of attention's backward pass:
 * validate once, choose a kernel, provide the forward's out and lse when the
 * caller did not keep them, provide the workspace, run.
 *
 * Shape legend: q [B, L, Hq, D]  k [B, S, Hkv, D]  v [B, S, Hkv, Dv]
 *               out, dout [B, L, Hq, Dv]  lse [B, Hq, L]
 *               dq like q  dk like k  dv like v
 */
#include "base/problem.h"
#include "base/workspace.h"
#include "flash/flash.h"
#include "flash/ukernels.h"
#include "ref/ref.h"

#include <stdlib.h>

/* Below this many query-key cells times (D + Dv), summed over batches and
 * heads, the reference backward is faster than the flash one, whose tiles,
 * packing and workspace cost a fixed ~10-100 us (docs/backward.md: e.g.
 * B = 32, L = 1, S = 8, D = 32 takes 30 us on the reference, 150 us on
 * flash; B = 4, L = S = 16, Hq = 2, D = 32 takes 205 us and 75 us). */
#define REF_BACKWARD_BELOW ((int64_t)1 << 16)

/* The kernel a validated problem's backward runs on: auto is flash except
 * for tiny problems; flash on request; the reference on request, or for
 * every call when $ATTN_ARCH=ref, as in the forward. */
static attn_kernel choose_kernel(const sdpa_problem *p) {
    if (p->opt.kernel == ATTN_KERNEL_REF || attn__dispatch_forces_ref()) return ATTN_KERNEL_REF;
    if (p->opt.kernel == ATTN_KERNEL_FLASH) return ATTN_KERNEL_FLASH;
    const double work = (double)(p->batch * p->heads_q) * (double)p->len_q * (double)p->len_kv *
                        (double)(p->dim + p->dim_v);
    return work < (double)REF_BACKWARD_BELOW ? ATTN_KERNEL_REF : ATTN_KERNEL_FLASH;
}

static size_t kernel_workspace_size(const sdpa_problem *p, attn_kernel kernel) {
    return kernel == ATTN_KERNEL_REF ? attn__ref_backward_workspace_size(p)
                                     : attn__flash_backward_workspace_size(p);
}

/* Validates the inputs of a backward call (v is required, unlike in
 * attn__problem_init) and fills p. */
static attn_status init_problem(sdpa_problem *p, const attn_tensor *q, const attn_tensor *k,
                                const attn_tensor *v, const attn_tensor *out,
                                const attn_sdpa_options *opt, problem_data data) {
    if (!v) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "v is NULL");
    return attn__problem_init(p, q, k, v, out, opt, data);
}

attn_status attn_sdpa_backward_workspace_size(const attn_tensor *q, const attn_tensor *k,
                                              const attn_tensor *v,
                                              const attn_sdpa_options *opt, size_t *bytes) {
    sdpa_problem p;
    attn_status st;
    if (!bytes) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "bytes is NULL");
    if ((st = init_problem(&p, q, k, v, NULL, opt, PROBLEM_SHAPES_ONLY))) return st;
    *bytes = workspace_bytes(kernel_workspace_size(&p, choose_kernel(&p)));
    return ATTN_OK;
}

const char *attn_sdpa_backward_kernel_name(const attn_tensor *q, const attn_tensor *k,
                                           const attn_tensor *v, const attn_sdpa_options *opt) {
    sdpa_problem p;
    if (init_problem(&p, q, k, v, NULL, opt, PROBLEM_SHAPES_ONLY)) return "invalid";
    return choose_kernel(&p) == ATTN_KERNEL_REF ? "ref" : "flash";
}

attn_status attn_sdpa_backward(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                               const attn_sdpa_options *opt, const attn_tensor *out,
                               const float *lse, const attn_tensor *dout, attn_tensor *dq,
                               attn_tensor *dk, attn_tensor *dv) {
    sdpa_problem p;
    attn_status st;
    if ((st = init_problem(&p, q, k, v, out, opt, PROBLEM_WITH_DATA))) return st;
    if (!out != !lse)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT,
                         "out and lse go together: pass both (from the forward) or neither "
                         "(recomputed); %s is NULL", out ? "lse" : "out");
    if (!dout) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "dout is NULL");
    const int64_t out_shape[4] = {p.batch, p.len_q, p.heads_q, p.dim_v};
    if ((st = attn__tensor_check_shape(dout, "dout", out_shape, "out")) ||
        (dq && (st = attn__tensor_check_shape(dq, "dq", q->shape, "q"))) ||
        (dk && (st = attn__tensor_check_shape(dk, "dk", k->shape, "k"))) ||
        (dv && (st = attn__tensor_check_shape(dv, "dv", v->shape, "v"))))
        return st;
    const attn_kernel kernel = choose_kernel(&p);
    const char *name = kernel == ATTN_KERNEL_REF ? "ref" : "flash";
    const attn_tensor *f32[4] = {dout, dq, dk, dv};
    static const char *const f32_names[4] = {"dout", "dq", "dk", "dv"};
    if ((st = attn__problem_require_f32(&p, out, name))) return st;
    for (int t = 0; t < 4; t++)
        if (f32[t] && f32[t]->dtype != ATTN_F32)
            return attn__fail(ATTN_ERR_UNSUPPORTED, "the %s backward computes float32 tensors only, and %s holds %s",
                              name, f32_names[t], attn_dtype_name(f32[t]->dtype));
    if (!dq && !dk && !dv) return ATTN_OK;

    workspace w;
    float *owned_out = NULL, *owned_lse = NULL;
    attn_tensor recomputed_out;
    if ((st = attn__workspace_acquire(&w, &p.opt, kernel_workspace_size(&p, kernel),
                                      "attn_sdpa_backward_workspace_size")))
        return st;
    if (!out && kernel != ATTN_KERNEL_REF) {
        /* The flash kernel needs the forward's out and lse: recompute them. */
        size_t n_out = (size_t)(p.batch * p.len_q * p.heads_q * p.dim_v);
        size_t n_lse = (size_t)(p.batch * p.heads_q * p.len_q);
        owned_out = malloc(n_out * sizeof(float));
        owned_lse = malloc(n_lse * sizeof(float));
        if (!owned_out || !owned_lse) {
            st = attn__fail(ATTN_ERR_OUT_OF_MEMORY, "cannot allocate the recomputed forward output");
            goto cleanup;
        }
        attn_sdpa_options forward_opt = p.opt; /* the library's own layout: struct_size is set */
        forward_opt.kernel = ATTN_KERNEL_AUTO;
        forward_opt.workspace = NULL;
        forward_opt.workspace_size = 0;
        recomputed_out = attn_tensor_4d(owned_out, p.batch, p.len_q, p.heads_q, p.dim_v);
        if ((st = attn_sdpa_forward(q, k, v, &forward_opt, &recomputed_out, NULL, owned_lse)))
            goto cleanup;
        out = &recomputed_out;
        lse = owned_lse;
    }

    const sdpa_backward_args args = {out, lse, dout, dq, dk, dv};
    st = kernel == ATTN_KERNEL_REF ? attn__ref_backward(&p, w.aligned, &args)
                                   : attn__flash_backward(&p, w.aligned, &args);
cleanup:
    attn__workspace_release(&w);
    free(owned_out);
    free(owned_lse);
    return st;
}
