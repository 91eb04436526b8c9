/*
 * sdpa.h — the forward pass over keys and values read through a block table
 * (sdpa.c), for attn_kv_cache_attend (src/cache): a paged cache's sequence
 * is attended in one call per piece of keys, whatever its blocks, instead
 * of one call per block or a copy of its blocks.
 *
 * Shape legend: q [1, L, Hq, D]  out [1, L, Hq, Dv]  lse [Hq, L]
 *               k [1, S, Hkv, D], v [1, S, Hkv, Dv]: the shapes and strides
 *               of one block's rows, data at block 0 (problem_pages)
 */
#ifndef ATTN_API_SDPA_H
#define ATTN_API_SDPA_H

#include "base/problem.h"

/* attn_sdpa_forward with K and V read through `pages` (not NULL): the same
 * validation, kernel choice and results, bit for bit, as a call on the
 * gathered rows (the kernels read a block as one run of rows and add keys
 * in order; blocks under 64 rows are copied a step at a time). */
attn_status attn__sdpa_forward_paged(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                                     const problem_pages *pages, const attn_sdpa_options *opt, attn_tensor *out,
                                     float *lse);

/* attn_sdpa_workspace_size for that call (pages change what the flash
 * kernel keeps per thread: short blocks are copied a step at a time). */
attn_status attn__sdpa_workspace_size_paged(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                                            const problem_pages *pages, const attn_sdpa_options *opt,
                                            size_t *bytes);

#endif /* ATTN_API_SDPA_H */
