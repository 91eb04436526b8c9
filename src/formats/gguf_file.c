/*
 * gguf_file.c — GGUF files: mapped read-only and parsed from the mapping
 * (gguf.c), so that opening a 500 MB model reads only its header's pages
 * and the tensors' pages are read when rows of them are converted.
 *
 * The file is opened as every input of attn is (src/io/file.h): a regular
 * file only, without blocking, so that a FIFO, a device or a directory is
 * refused with a message rather than waited on or mapped.
 */
#include "formats/gguf.h"

#include "io/file.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

attn_status attn_gguf_open(const char *path, attn_gguf **out) {
    if (!out) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_gguf_open: out is NULL");
    *out = NULL;
    if (!path) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_gguf_open: path is NULL");
    /* An empty file is not mapped; it is parsed as an empty buffer (and
     * refused as truncated). */
    void *map = NULL;
    size_t size = 0;
    attn_status st = file_map_regular(path, "GGUF models", 0, NULL, &map, &size);
    if (st != ATTN_OK) return st;
    attn_gguf *g;
    st = attn_gguf_parse(map, size, &g);
    if (st != ATTN_OK) {
        if (map) munmap(map, size);
        return attn__fail(st, "'%s': %s", path, attn_last_error());
    }
    g->mapping = map;
    g->mapping_size = size;
    *out = g;
    return ATTN_OK;
}

attn_status attn__gguf_keep(const attn_gguf *g, attn_gguf **kept) {
    *kept = NULL;
    if (g->mapping) {
        attn_gguf *shared = (attn_gguf *)g; /* only the count of holders changes */
        __atomic_add_fetch(&shared->holders, 1, __ATOMIC_RELAXED);
        *kept = shared;
        return ATTN_OK;
    }
    void *copy = malloc(g->size ? g->size : 1);
    if (!copy) return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "cannot copy a GGUF buffer of %zu bytes", g->size);
    if (g->size) memcpy(copy, g->base, g->size);
    attn_status st = attn_gguf_parse(copy, g->size, kept);
    if (st) {
        free(copy);
        return st;
    }
    (*kept)->owned_buffer = copy;
    return ATTN_OK;
}

void attn_gguf_free(attn_gguf *g) {
    if (!g) return;
    /* Another holder (attn__gguf_keep) still reads the mapping. */
    if (__atomic_sub_fetch(&g->holders, 1, __ATOMIC_ACQ_REL) >= 0) return;
    attn__gguf_free_tables(g);
    if (g->mapping) munmap(g->mapping, g->mapping_size);
    free(g->owned_buffer);
    free(g);
}

/* Deprecated names, until 1.0 (attn_gguf.h). */
void attn_gguf_close(attn_gguf *g) { attn_gguf_free(g); }
/* End of the deprecated names. */
