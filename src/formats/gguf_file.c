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

void attn_gguf_free(attn_gguf *g) {
    if (!g) return;
    attn__gguf_free_tables(g);
    if (g->mapping) munmap(g->mapping, g->mapping_size);
    free(g);
}

/* Deprecated names, until 1.0 (attn_gguf.h). */
void attn_gguf_close(attn_gguf *g) { attn_gguf_free(g); }
/* End of the deprecated names. */
