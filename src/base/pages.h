/*
 * pages.h — large arrays that are read as streams: zero-filled, mapped
 * lazily (a page when it is first touched), and on Linux laid on 2 MiB
 * boundaries with transparent huge pages asked for (madvise
 * MADV_HUGEPAGE), so that streaming them walks 512 times fewer page-table
 * entries.  The KV cache's pools live here: a decoding step streams them.
 *
 * Why: on a KVM guest (Zen 4, 2026-12-04) a decoding step through a
 * contiguous cache took 0.75-0.84x the time on such pages (docs/cache.md,
 * "Memory pages").  Not for arrays read once (a loaded .npy): a huge page
 * the host has not backed yet costs 4-6x more to fault in than 512 small
 * ones.  (The read-bandwidth probe streams one array per thread and read
 * the same on either kind.)  Arrays under 2 MiB gain nothing and are plain
 * calloc.  Where the system has no huge pages, or ATTN_HUGE_PAGES=0 is
 * set, the advice is not given: the arrays are the same, only their pages
 * differ.
 */
#ifndef ATTN_BASE_PAGES_H
#define ATTN_BASE_PAGES_H

#include <stdbool.h>
#include <stddef.h>

#define PAGES_HUGE_BYTES ((size_t)2 << 20)

typedef struct page_array {
    void *data;       /* `bytes` zero bytes; PAGES_HUGE_BYTES-aligned when mapped */
    size_t bytes;
    void *owned;      /* what was allocated (data or before it), or NULL     */
    size_t mapped;    /* bytes of owned's mapping; 0: owned came from calloc */
    bool advised;     /* huge pages asked for and accepted                    */
} page_array;

/* Allocates p->data (NULL and false when there is no memory; bytes = 0
 * gives a NULL data and true). */
bool attn__pages_alloc(page_array *p, size_t bytes);
void attn__pages_free(page_array *p);

#endif /* ATTN_BASE_PAGES_H */
