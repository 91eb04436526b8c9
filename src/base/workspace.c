/*
 * workspace.c — a call's scratch memory (workspace.h).
 */
#include "base/workspace.h"

#include <stdlib.h>

attn_status attn__workspace_acquire(workspace *w, const attn_sdpa_options *opt, size_t kernel_bytes,
                                    const char *size_fn) {
    const size_t need = workspace_bytes(kernel_bytes);
    void *base = opt->workspace;
    w->owned = NULL;
    if (need > opt->workspace_size) {
        if (opt->workspace)
            return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "workspace has %zu bytes, this call needs %zu (%s)",
                              opt->workspace_size, need, size_fn);
        base = w->owned = malloc(need);
        if (!base) return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "cannot allocate %zu bytes of workspace", need);
    }
    const uintptr_t at = (uintptr_t)base;
    w->aligned = (void *)((at + WORKSPACE_ALIGN - 1) & ~(uintptr_t)(WORKSPACE_ALIGN - 1));
    return ATTN_OK;
}

void attn__workspace_release(workspace *w) {
    free(w->owned);
    w->owned = w->aligned = NULL;
}
