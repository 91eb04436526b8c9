/*
 * sdpa.c — the public entry points of scaled dot-product attention: validate
 * once (attn_problem_init), choose a kernel, provide its workspace, run it.
 *
 * Shape legend: q [B, L, Hq, D]  k [B, S, Hkv, D]  v [B, S, Hkv, Dv]
 *               out [B, L, Hq, Dv]  weights [B, Hq, L, S]  lse [B, Hq, L]
 */
#include "core/internal.h"

#include <stdlib.h>

/* The kernel a validated problem runs on.  Automatic means flash: it is
 * 13-70x faster than the reference from L = S = 17 up, a microsecond slower
 * only on toy sizes (docs/kernels.md), and needs no L x S table.
 * $ATTN_ARCH=ref sends every call, an explicit flash request included, to
 * the reference: the oracle is always one flag away. */
static attn_status choose_kernel(const attn_problem *p, attn_kernel *chosen) {
    switch (p->opt.kernel) {
    case ATTN_KERNEL_FLASH:
    case ATTN_KERNEL_AUTO:
        *chosen = attn_dispatch_uses_ref() ? ATTN_KERNEL_REF : ATTN_KERNEL_FLASH;
        return ATTN_OK;
    case ATTN_KERNEL_REF:
        *chosen = ATTN_KERNEL_REF;
        return ATTN_OK;
    }
    return attn_fail(ATTN_ERR_INVALID_ARGUMENT, "unknown kernel %d", (int)p->opt.kernel);
}

static size_t kernel_workspace_size(const attn_problem *p, attn_kernel kernel) {
    return kernel == ATTN_KERNEL_FLASH ? attn_sdpa_flash_workspace_size(p)
                                       : attn_sdpa_ref_workspace_size(p);
}

attn_status attn_sdpa_workspace_size(const attn_tensor *q, const attn_tensor *k,
                                     const attn_tensor *v, const attn_sdpa_options *opt,
                                     size_t *bytes) {
    attn_problem p;
    attn_kernel kernel;
    attn_status st;
    if (!bytes) return attn_fail(ATTN_ERR_INVALID_ARGUMENT, "bytes is NULL");
    if ((st = attn_problem_init(&p, q, k, v, NULL, opt)) || (st = choose_kernel(&p, &kernel)))
        return st;
    *bytes = kernel_workspace_size(&p, kernel);
    return ATTN_OK;
}

const char *attn_sdpa_kernel_name(const attn_tensor *q, const attn_tensor *k,
                                  const attn_tensor *v, const attn_sdpa_options *opt) {
    attn_problem p;
    attn_kernel kernel;
    if (attn_problem_init(&p, q, k, v, NULL, opt) || choose_kernel(&p, &kernel)) return "invalid";
    return kernel == ATTN_KERNEL_FLASH ? "flash" : "ref";
}

attn_status attn_sdpa_forward(const attn_tensor *q, const attn_tensor *k,
                              const attn_tensor *v, const attn_sdpa_options *opt,
                              attn_tensor *out, float *weights, float *lse) {
    attn_problem p;
    attn_kernel kernel;
    attn_status st;
    if (!v) return attn_fail(ATTN_ERR_INVALID_ARGUMENT, "v is NULL");
    if (!out) return attn_fail(ATTN_ERR_INVALID_ARGUMENT, "out is NULL");
    if ((st = attn_problem_init(&p, q, k, v, out, opt)) || (st = choose_kernel(&p, &kernel)))
        return st;

    size_t need = kernel_workspace_size(&p, kernel);
    void *workspace = p.opt.workspace, *owned = NULL;
    if (need > p.opt.workspace_size) {
        if (p.opt.workspace)
            return attn_fail(ATTN_ERR_INVALID_ARGUMENT,
                             "workspace has %zu bytes, this call needs %zu (attn_sdpa_workspace_size)",
                             p.opt.workspace_size, need);
        workspace = owned = malloc(need);
        if (!workspace)
            return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "cannot allocate %zu bytes of workspace", need);
    }
    st = kernel == ATTN_KERNEL_FLASH ? attn_sdpa_flash_forward(&p, workspace, out, weights, lse)
                                     : attn_sdpa_ref_forward(&p, workspace, out, weights, lse);
    free(owned);
    return st;
}

attn_status attn_sdpa_scores(const attn_tensor *q, const attn_tensor *k,
                             const attn_sdpa_options *opt, float *scores) {
    attn_problem p;
    attn_status st;
    if (!scores) return attn_fail(ATTN_ERR_INVALID_ARGUMENT, "scores is NULL");
    if ((st = attn_problem_init(&p, q, k, NULL, NULL, opt))) return st;
    return attn_sdpa_ref_scores(&p, scores);
}
