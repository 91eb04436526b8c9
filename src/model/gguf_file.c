/*
 * gguf_file.c — GGUF files: mapped read-only and parsed from the mapping
 * (gguf.c), so that opening a 500 MB model reads only its header's pages
 * and the tensors' pages are read when rows of them are converted.
 *
 * The file is opened as every input of attn is (src/io/file.h): a regular
 * file only, without blocking, so that a FIFO, a device or a directory is
 * refused with a message rather than waited on or mapped.
 */
#include "model/gguf.h"

#include "io/file.h"

#include <stdlib.h>
#include <sys/mman.h>

attn_status attn_gguf_open(const char *path, attn_gguf **out) {
    if (!out) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_gguf_open: out is NULL");
    *out = NULL;
    if (!path) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_gguf_open: path is NULL");
    int fd = -1;
    uint64_t size = 0;
    attn_status st = file_open_regular(path, "GGUF models", &fd, &size);
    if (st != ATTN_OK) return st;
    if (size > SIZE_MAX) {
        close(fd);
        return attn__fail(ATTN_ERR_UNSUPPORTED, "'%s' is %llu bytes, more than this machine can map", path,
                          (unsigned long long)size);
    }
    /* An empty file cannot be mapped; it is parsed as an empty buffer (and
     * refused as truncated). */
    void *map = NULL;
    if (size > 0) {
        map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED) {
            char reason[256];
            const int err = errno;
            close(fd);
            return attn__fail(ATTN_ERR_IO, "cannot map '%s': %s", path, errno_text(err, reason, sizeof reason));
        }
    }
    close(fd); /* the mapping keeps the file */
    attn_gguf *g;
    st = attn_gguf_parse(map, (size_t)size, &g);
    if (st != ATTN_OK) {
        if (map) munmap(map, (size_t)size);
        return attn__fail(st, "'%s': %s", path, attn_last_error());
    }
    g->mapping = map;
    g->mapping_size = (size_t)size;
    *out = g;
    return ATTN_OK;
}

void attn_gguf_close(attn_gguf *g) {
    if (!g) return;
    attn__gguf_free_tables(g);
    if (g->mapping) munmap(g->mapping, g->mapping_size);
    free(g);
}
