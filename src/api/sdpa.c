/*
 * sdpa.c — the public entry points of scaled dot-product attention's
 * forward pass: validate once (attn__problem_init), choose a kernel,
 * provide its workspace, run it; and the FLOP count of a call.
 *
 * Shape legend: q [B, L, Hq, D]  k [B, S, Hkv, D]  v [B, S, Hkv, Dv]
 *               out [B, L, Hq, Dv]  weights [B, Hq, L, S]  lse [B, Hq, L]
 */
#include "base/problem.h"
#include "base/visibility.h"
#include "base/workspace.h"
#include "flash/flash.h"
#include "flash/ukernels.h"
#include "ref/ref.h"

/* The kernel a validated problem runs on.  Automatic means flash: it is
 * 13-70x faster than the reference from L = S = 17 up, a microsecond slower
 * only on toy sizes (docs/kernels.md), and needs no L x S table.
 * $ATTN_KERNEL=ref sends every call, an explicit flash request included, to
 * the reference: the oracle is always one flag away. */
static attn_kernel choose_kernel(const sdpa_problem *p) {
    if (p->opt.kernel == ATTN_KERNEL_REF || attn__dispatch_forces_ref()) return ATTN_KERNEL_REF;
    return ATTN_KERNEL_FLASH;
}

static size_t kernel_workspace_size(const sdpa_problem *p, attn_kernel kernel) {
    return kernel == ATTN_KERNEL_FLASH ? attn__flash_forward_workspace_size(p)
                                       : attn__ref_forward_workspace_size(p);
}

static const char *kernel_name(attn_kernel kernel) { return kernel == ATTN_KERNEL_FLASH ? "flash" : "ref"; }

attn_status attn_sdpa_workspace_size(const attn_tensor *q, const attn_tensor *k,
                                     const attn_tensor *v, const attn_sdpa_options *opt,
                                     size_t *bytes) {
    sdpa_problem p;
    attn_status st;
    if (!bytes) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "bytes is NULL");
    if ((st = attn__problem_init(&p, q, k, v, NULL, opt, PROBLEM_SHAPES_ONLY))) return st;
    *bytes = workspace_bytes(kernel_workspace_size(&p, choose_kernel(&p)));
    return ATTN_OK;
}

const char *attn_sdpa_kernel_name(const attn_tensor *q, const attn_tensor *k,
                                  const attn_tensor *v, const attn_sdpa_options *opt) {
    sdpa_problem p;
    if (attn__problem_init(&p, q, k, v, NULL, opt, PROBLEM_SHAPES_ONLY)) return "invalid";
    return kernel_name(choose_kernel(&p));
}

attn_status attn_sdpa_flops(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                            const attn_sdpa_options *opt, double *flops) {
    sdpa_problem p;
    attn_status st;
    if (!flops) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "flops is NULL");
    if (!v) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "v is NULL");
    if ((st = attn__problem_init(&p, q, k, v, NULL, opt, PROBLEM_SHAPES_ONLY))) return st;
    *flops = 2.0 * (double)(p.dim + p.dim_v) * attn__visibility_pairs(&p);
    return ATTN_OK;
}

attn_status attn_sdpa_forward(const attn_tensor *q, const attn_tensor *k,
                              const attn_tensor *v, const attn_sdpa_options *opt,
                              attn_tensor *out, float *weights, float *lse) {
    sdpa_problem p;
    workspace w;
    attn_status st;
    if (!v) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "v is NULL");
    if (!out) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "out is NULL");
    if ((st = attn__problem_init(&p, q, k, v, out, opt, PROBLEM_WITH_DATA))) return st;
    const attn_kernel kernel = choose_kernel(&p);
    if ((st = attn__problem_require_f32(&p, out, kernel_name(kernel))) ||
        (st = attn__workspace_acquire(&w, &p.opt, kernel_workspace_size(&p, kernel),
                                      "attn_sdpa_workspace_size")))
        return st;
    st = kernel == ATTN_KERNEL_FLASH ? attn__flash_forward(&p, w.aligned, out, weights, lse)
                                     : attn__ref_forward(&p, w.aligned, out, weights, lse);
    attn__workspace_release(&w);
    return st;
}

attn_status attn_sdpa_scores(const attn_tensor *q, const attn_tensor *k,
                             const attn_sdpa_options *opt, float *scores) {
    sdpa_problem p;
    attn_status st;
    if (!scores) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "scores is NULL");
    if ((st = attn__problem_init(&p, q, k, NULL, NULL, opt, PROBLEM_WITH_DATA)) ||
        (st = attn__problem_require_f32(&p, NULL, "ref")))
        return st;
    return attn__ref_scores(&p, scores);
}
