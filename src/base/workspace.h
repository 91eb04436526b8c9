/*
 * workspace.h — the scratch memory of one kernel call: the caller's
 * workspace when it is large enough, else one allocation freed when the
 * call returns (DESIGN.md §2, "Memory").  Kernels receive it 64-byte
 * aligned; the sizes the front doors report include the room to align it.
 */
#ifndef ATTN_BASE_WORKSPACE_H
#define ATTN_BASE_WORKSPACE_H

#include "base/problem.h"

#define WORKSPACE_ALIGN 64

typedef struct workspace {
    void *aligned; /* what the kernel gets                           */
    void *owned;   /* what this call allocated (freed by _release)   */
} workspace;

/* The size a front door reports for a kernel that needs kernel_bytes. */
static inline size_t workspace_bytes(size_t kernel_bytes) { return kernel_bytes + WORKSPACE_ALIGN; }

/* Takes opt's workspace (opt->workspace, opt->workspace_size bytes) when it
 * holds workspace_bytes(kernel_bytes), else allocates; fails when the
 * caller passed a workspace that is too small (what is needed is named,
 * with the function that reports it: size_fn). */
attn_status attn__workspace_acquire(workspace *w, const attn_sdpa_options *opt, size_t kernel_bytes,
                                    const char *size_fn);
void attn__workspace_release(workspace *w);

#endif /* ATTN_BASE_WORKSPACE_H */
