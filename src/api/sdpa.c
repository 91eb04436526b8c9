/*
 * sdpa.c — the public entry points of scaled dot-product attention, forward
 * and backward: validate once (attn__problem_init), choose a kernel,
 * provide its workspace, run it; the queries about a call (its workspace,
 * its kernel, its FLOPs) through the same validation and choice.
 *
 * Shape legend: q [B, L, Hq, D]  k [B, S, Hkv, D]  v [B, S, Hkv, Dv]
 *               out, dout [B, L, Hq, Dv]  weights [B, Hq, L, S]  lse [B, Hq, L]
 *               dq like q  dk like k  dv like v
 */
#include "api/sdpa.h"
#include "base/overlap.h"
#include "base/problem.h"
#include "base/visibility.h"
#include "base/workspace.h"
#include "flash/flash.h"
#include "isa/isa.h"
#include "ref/ref.h"

#include <stdlib.h>

/* ----------------------------------------------------------- the choices */

/* The forward's kernel.  Automatic means flash: it is 13-70x faster than
 * the reference from L = S = 17 up, a microsecond slower only on toy sizes
 * (docs/kernels.md), and needs no L x S table.  $ATTN_KERNEL=ref sends every
 * call, an explicit flash request included, to the reference: the oracle is
 * always one flag away. */
static attn_kernel forward_kernel(const sdpa_problem *p) {
    if (p->opt.kernel == ATTN_KERNEL_REF || attn__isa_forces_ref()) return ATTN_KERNEL_REF;
    return ATTN_KERNEL_FLASH;
}

/* Below this many query-key cells times (D + Dv), summed over batches and
 * heads, the reference backward is faster than the flash one, whose tiles,
 * packing and workspace cost a fixed ~10-100 us (docs/backward.md: e.g.
 * B = 32, L = 1, S = 8, D = 32 takes 30 us on the reference, 150 us on
 * flash; B = 4, L = S = 16, Hq = 2, D = 32 takes 205 us and 75 us). */
#define REF_BACKWARD_BELOW ((int64_t)1 << 16)

/* The backward's kernel: auto is flash except for tiny problems; flash on
 * request; the reference on request, or for every call when
 * $ATTN_KERNEL=ref, as in the forward. */
static attn_kernel backward_kernel(const sdpa_problem *p) {
    if (forward_kernel(p) == ATTN_KERNEL_REF) return ATTN_KERNEL_REF;
    if (p->opt.kernel == ATTN_KERNEL_FLASH) return ATTN_KERNEL_FLASH;
    const double work = (double)(p->batch * p->heads_q) * (double)p->len_q * (double)p->len_kv *
                        (double)(p->dim + p->dim_v);
    return work < (double)REF_BACKWARD_BELOW ? ATTN_KERNEL_REF : ATTN_KERNEL_FLASH;
}

static size_t forward_workspace_size(const sdpa_problem *p, attn_kernel kernel) {
    return kernel == ATTN_KERNEL_FLASH ? attn__flash_forward_workspace_size(p)
                                       : attn__ref_forward_workspace_size(p);
}

static size_t backward_workspace_size(const sdpa_problem *p, attn_kernel kernel) {
    return kernel == ATTN_KERNEL_FLASH ? attn__flash_backward_workspace_size(p)
                                       : attn__ref_backward_workspace_size(p);
}

static const char *kernel_name(attn_kernel kernel) { return kernel == ATTN_KERNEL_FLASH ? "flash" : "ref"; }

/* One direction of a call: how its kernel is chosen and what it needs. */
typedef struct direction {
    attn_kernel (*kernel)(const sdpa_problem *p);
    size_t (*workspace_size)(const sdpa_problem *p, attn_kernel kernel);
    bool needs_v; /* the forward's workspace does not depend on Dv */
} direction;

/* The backward of 8-bit K/V is not provided: refused with a message. */
static attn_status refuse_kv8_backward(const sdpa_problem *p) {
    const attn_tensor *t = dtype_is_kv8(p->k.dtype) ? &p->k : &p->v;
    if (!dtype_is_kv8(t->dtype)) return ATTN_OK;
    return attn__fail(ATTN_ERR_UNSUPPORTED,
                      "the backward does not take 8-bit K/V (%s holds %s); the 8-bit formats are for the forward "
                      "and decoding: dequantize (attn_dequantize) to differentiate",
                      t == &p->k ? "k" : "v", attn_dtype_name(t->dtype));
}

static const direction forward = {forward_kernel, forward_workspace_size, false};
static const direction backward = {backward_kernel, backward_workspace_size, true};

/* Validates the shapes and options of a call (data not needed) and chooses
 * its kernel: what the queries below answer from. */
static attn_status query(const direction *dir, const attn_tensor *q, const attn_tensor *k,
                         const attn_tensor *v, const attn_sdpa_options *opt, sdpa_problem *p,
                         attn_kernel *kernel) {
    attn_status st;
    if (!v && dir->needs_v) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "v is NULL");
    if ((st = attn__problem_init(p, q, k, v, NULL, opt, PROBLEM_SHAPES_ONLY))) return st;
    if (dir->needs_v && (st = refuse_kv8_backward(p))) return st;
    *kernel = dir->kernel(p);
    return ATTN_OK;
}

/* pages: NULL, or the block table a paged forward reads K and V through. */
static attn_status workspace_query(const direction *dir, const attn_tensor *q, const attn_tensor *k,
                                   const attn_tensor *v, const problem_pages *pages, const attn_sdpa_options *opt,
                                   size_t *bytes) {
    sdpa_problem p;
    attn_kernel kernel = ATTN_KERNEL_AUTO;
    attn_status st;
    if (!bytes) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "bytes is NULL");
    if ((st = query(dir, q, k, v, opt, &p, &kernel))) return st;
    p.pages = pages;
    *bytes = workspace_bytes(dir->workspace_size(&p, kernel));
    return ATTN_OK;
}

static const char *kernel_query(const direction *dir, const attn_tensor *q, const attn_tensor *k,
                                const attn_tensor *v, const attn_sdpa_options *opt) {
    sdpa_problem p;
    attn_kernel kernel = ATTN_KERNEL_AUTO;
    if (query(dir, q, k, v, opt, &p, &kernel)) return "invalid";
    /* precision fast is a request: say when the forward would honour it */
    if (dir == &forward && kernel == ATTN_KERNEL_FLASH && attn__flash_forward_native_bf16(&p)) return "flash-bf16";
    return kernel_name(kernel);
}

attn_status attn_sdpa_workspace_size(const attn_tensor *q, const attn_tensor *k,
                                     const attn_tensor *v, const attn_sdpa_options *opt,
                                     size_t *bytes) {
    return workspace_query(&forward, q, k, v, NULL, opt, bytes);
}

attn_status attn__sdpa_workspace_size_paged(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                                            const problem_pages *pages, const attn_sdpa_options *opt,
                                            size_t *bytes) {
    if (!pages) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn__sdpa_workspace_size_paged: pages is NULL");
    return workspace_query(&forward, q, k, v, pages, opt, bytes);
}

attn_status attn_sdpa_backward_workspace_size(const attn_tensor *q, const attn_tensor *k,
                                              const attn_tensor *v, const attn_sdpa_options *opt,
                                              size_t *bytes) {
    return workspace_query(&backward, q, k, v, NULL, opt, bytes);
}

const char *attn_sdpa_kernel_name(const attn_tensor *q, const attn_tensor *k,
                                  const attn_tensor *v, const attn_sdpa_options *opt) {
    return kernel_query(&forward, q, k, v, opt);
}

const char *attn_sdpa_backward_kernel_name(const attn_tensor *q, const attn_tensor *k,
                                           const attn_tensor *v, const attn_sdpa_options *opt) {
    return kernel_query(&backward, q, k, v, opt);
}

attn_status attn_sdpa_flops(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                            const attn_sdpa_options *opt, double *flops) {
    sdpa_problem p;
    attn_kernel kernel = ATTN_KERNEL_AUTO;
    attn_status st;
    if (!flops) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "flops is NULL");
    if (!v) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "v is NULL");
    if ((st = query(&forward, q, k, v, opt, &p, &kernel))) return st;
    *flops = 2.0 * (double)(p.dim + p.dim_v) * attn__visibility_pairs(&p);
    return ATTN_OK;
}

/* ---------------------------------------------------------------- forward */

/* The forward's outputs against its inputs and each other (overlap.h). */
static attn_status check_forward_outputs(const sdpa_problem *p, const attn_tensor *out, const float *weights,
                                         const float *lse) {
    const int64_t rows = p->batch * p->heads_q * p->len_q;
    const mem_extent outputs[3] = {
        extent_of_tensor("out", out),
        extent_of_array("weights", weights, rows * p->len_kv, (int64_t)sizeof(float)),
        extent_of_array("lse", lse, rows, (int64_t)sizeof(float)),
    };
    return attn__problem_check_outputs(p, outputs, 3, NULL, 0);
}

/* The forward, with K and V read through pages when not NULL (the KV
 * cache's own call, into its own scratch: its outputs are not checked). */
static attn_status forward_call(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                                const problem_pages *pages, const attn_sdpa_options *opt, attn_tensor *out,
                                float *weights, float *lse) {
    sdpa_problem p;
    workspace w;
    attn_status st;
    if (!v) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "v is NULL");
    if (!out) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "out is NULL");
    if ((st = attn__problem_init(&p, q, k, v, out, opt, PROBLEM_WITH_DATA))) return st;
    p.pages = pages;
    if (!pages && (st = check_forward_outputs(&p, out, weights, lse))) return st;
    const attn_kernel kernel = forward_kernel(&p);
    if ((st = attn__workspace_acquire(&w, &p.opt, forward_workspace_size(&p, kernel),
                                      "attn_sdpa_workspace_size")))
        return st;
    st = kernel == ATTN_KERNEL_FLASH ? attn__flash_forward(&p, w.aligned, out, weights, lse)
                                     : attn__ref_forward(&p, w.aligned, out, weights, lse);
    attn__workspace_release(&w);
    return st;
}

attn_status attn_sdpa_forward(const attn_tensor *q, const attn_tensor *k,
                              const attn_tensor *v, const attn_sdpa_options *opt,
                              attn_tensor *out, float *weights, float *lse) {
    return forward_call(q, k, v, NULL, opt, out, weights, lse);
}

attn_status attn__sdpa_forward_paged(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                                     const problem_pages *pages, const attn_sdpa_options *opt, attn_tensor *out,
                                     float *lse) {
    if (!pages) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn__sdpa_forward_paged: pages is NULL");
    return forward_call(q, k, v, pages, opt, out, NULL, lse);
}

attn_status attn_sdpa_scores(const attn_tensor *q, const attn_tensor *k,
                             const attn_sdpa_options *opt, float *scores) {
    sdpa_problem p;
    attn_status st;
    if (!scores) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "scores is NULL");
    if ((st = attn__problem_init(&p, q, k, NULL, NULL, opt, PROBLEM_WITH_DATA))) return st;
    const mem_extent table = extent_of_array("scores", scores, p.batch * p.heads_q * p.len_q * p.len_kv,
                                             (int64_t)sizeof(float));
    if ((st = attn__problem_check_outputs(&p, &table, 1, NULL, 0))) return st;
    return attn__ref_scores(&p, scores);
}

/* --------------------------------------------------------------- backward
 * Provides the forward's out and lse when the caller did not keep them. */

attn_status attn_sdpa_backward(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                               const attn_sdpa_options *opt, const attn_tensor *out,
                               const float *lse, const attn_tensor *dout, attn_tensor *dq,
                               attn_tensor *dk, attn_tensor *dv) {
    attn_sdpa_grads grads = ATTN_SDPA_GRADS_INIT;
    grads.dq = dq;
    grads.dk = dk;
    grads.dv = dv;
    return attn_sdpa_backward_grads(q, k, v, opt, out, lse, dout, &grads);
}

attn_status attn_sdpa_backward_grads(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                                     const attn_sdpa_options *opt, const attn_tensor *out,
                                     const float *lse, const attn_tensor *dout,
                                     const attn_sdpa_grads *grads_in) {
    sdpa_problem p;
    attn_sdpa_grads grads;
    attn_status st;
    if (!grads_in) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "grads is NULL");
    static const attn_sdpa_grads defaults = ATTN_SDPA_GRADS_INIT;
    if ((st = options_copy(&grads, sizeof grads, &defaults, grads_in, "attn_sdpa_grads"))) return st;
    attn_tensor *dq = grads.dq, *dk = grads.dk, *dv = grads.dv;
    if (!v) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "v is NULL");
    if ((st = attn__problem_init(&p, q, k, v, out, opt, PROBLEM_WITH_DATA)) || (st = refuse_kv8_backward(&p)))
        return st;
    if (grads.dsinks && !p.opt.sinks)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT,
                          "grads.dsinks is set but opt.sinks is NULL: there is no sink to differentiate");
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
    const attn_kernel kernel = backward_kernel(&p);
    if (!dq && !dk && !dv && !grads.dsinks) return ATTN_OK;
    const mem_extent gradients[4] = {
        extent_of_tensor("dq", dq), extent_of_tensor("dk", dk), extent_of_tensor("dv", dv),
        extent_of_array("grads.dsinks", grads.dsinks, p.heads_q, (int64_t)sizeof(float)),
    };
    const mem_extent forward_results[3] = {
        extent_of_tensor("out", out), extent_of_tensor("dout", dout),
        extent_of_array("lse", lse, p.batch * p.heads_q * p.len_q, (int64_t)sizeof(float)),
    };
    if ((st = attn__problem_check_outputs(&p, gradients, 4, forward_results, 3))) return st;

    workspace w;
    float *owned_out = NULL, *owned_lse = NULL;
    attn_tensor recomputed_out;
    if ((st = attn__workspace_acquire(&w, &p.opt, backward_workspace_size(&p, kernel),
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

    const sdpa_backward_args args = {out, lse, dout, dq, dk, dv, grads.dsinks};
    st = kernel == ATTN_KERNEL_REF ? attn__ref_backward(&p, w.aligned, &args)
                                   : attn__flash_backward(&p, w.aligned, &args);
cleanup:
    attn__workspace_release(&w);
    free(owned_out);
    free(owned_lse);
    return st;
}
