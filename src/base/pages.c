/*
 * pages.c — pages.h.  A file of its own because MAP_ANONYMOUS and
 * MADV_HUGEPAGE need _DEFAULT_SOURCE beside the library's
 * _POSIX_C_SOURCE.
 *
 * On Linux an array of 2 MiB or more is a fresh anonymous mapping (zero
 * and untouched, so the advice comes before any page is faulted in as a
 * small one) of 2 MiB more than asked, the data at the first 2 MiB
 * boundary inside.  Under AddressSanitizer the slack before and after the
 * data is poisoned, so an access past the array is reported as it would
 * be past a calloc of its own size.  Smaller arrays, and other systems,
 * get calloc.
 */
#if defined(__linux__)
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS, MADV_HUGEPAGE */
#include <sys/mman.h>
#endif

#include "base/pages.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__SANITIZE_ADDRESS__)
#define PAGES_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PAGES_ASAN 1
#endif
#endif
#ifdef PAGES_ASAN
#include <sanitizer/asan_interface.h>
#define PAGES_POISON(at, n) __asan_poison_memory_region((at), (n))
#define PAGES_UNPOISON(at, n) __asan_unpoison_memory_region((at), (n))
#else
#define PAGES_POISON(at, n) ((void)(at), (void)(n))
#define PAGES_UNPOISON(at, n) ((void)(at), (void)(n))
#endif

#if defined(__linux__) && defined(MAP_ANONYMOUS) && defined(MADV_HUGEPAGE)
#define PAGES_MAP 1

/* Whether to ask for huge pages: ATTN_HUGE_PAGES=0 says no (to compare,
 * or where the memory they round up to matters more). */
static bool huge_pages_wanted(void) {
    const char *env = getenv("ATTN_HUGE_PAGES");
    return !(env && strcmp(env, "0") == 0);
}

/* The mapping of a large array: false when mmap refuses (calloc is then
 * tried, as for any array). */
static bool map_large(page_array *p, size_t bytes) {
    const size_t length = bytes + PAGES_HUGE_BYTES;
    void *raw = mmap(NULL, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) return false;
    const uintptr_t at = ((uintptr_t)raw + PAGES_HUGE_BYTES - 1) & ~(uintptr_t)(PAGES_HUGE_BYTES - 1);
    unsigned char *data = (unsigned char *)raw + (at - (uintptr_t)raw);
    const size_t head = (size_t)(data - (unsigned char *)raw);
    p->data = data;
    p->owned = raw;
    p->mapped = length;
    PAGES_POISON(raw, head);
    PAGES_POISON(data + bytes, length - head - bytes);
    /* Advice only: a kernel with transparent huge pages off refuses it,
     * and the array keeps small pages. */
    if (huge_pages_wanted()) p->advised = madvise(data, bytes / PAGES_HUGE_BYTES * PAGES_HUGE_BYTES, MADV_HUGEPAGE) == 0;
    return true;
}
#endif

bool attn__pages_alloc(page_array *p, size_t bytes) {
    memset(p, 0, sizeof *p);
    p->bytes = bytes;
    if (bytes == 0) return true;
#ifdef PAGES_MAP
    if (bytes >= PAGES_HUGE_BYTES && bytes <= SIZE_MAX - PAGES_HUGE_BYTES && map_large(p, bytes)) return true;
#endif
    p->owned = p->data = calloc(1, bytes);
    return p->data != NULL;
}

void attn__pages_free(page_array *p) {
#ifdef PAGES_MAP
    if (p->mapped) {
        PAGES_UNPOISON(p->owned, p->mapped);
        munmap(p->owned, p->mapped);
    } else
#endif
        free(p->owned);
    memset(p, 0, sizeof *p);
}
