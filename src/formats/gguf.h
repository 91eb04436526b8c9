/*
 * gguf.h — the parsed GGUF file (gguf.c parses it from memory), and what the
 * file wrapper above it (gguf_file.c: the mapping) needs of it.  The tensor
 * types' table is below both, in gguf_dequant.h.
 */
#ifndef ATTN_FORMATS_GGUF_H
#define ATTN_FORMATS_GGUF_H

#include "attn_gguf.h"
#include "base/base.h"

/* One metadata key/value pair. */
typedef struct gguf_kv {
    const char *key; /* NUL-terminated, in attn_gguf.names */
    attn_gguf_value value;
} gguf_kv;

struct attn_gguf {
    const uint8_t *base; /* the file's bytes (the mapping or the caller's buffer) */
    size_t size;
    uint32_t version;
    uint64_t alignment, data_offset;
    int64_t n_kv, n_tensors;
    gguf_kv *kv;                               /* [n_kv], in file order        */
    const gguf_kv **kv_by_key;                 /* [n_kv], sorted by key        */
    char *key_names;                           /* the keys, NUL-terminated     */
    attn_gguf_tensor *tensors;                 /* [n_tensors], in file order   */
    const attn_gguf_tensor **tensors_by_name;  /* [n_tensors], sorted by name  */
    char *tensor_names;                        /* the names, NUL-terminated    */
    void *mapping;                             /* attn_gguf_open's mmap, or NULL */
    size_t mapping_size;
    void *owned_buffer;                        /* attn__gguf_keep's copy, or NULL */
    int holders;                               /* attn__gguf_keep's extra owners  */
};

/* Frees what attn_gguf_parse allocated, not g itself (attn_gguf_free, in
 * gguf_file.c, also unmaps). */
void attn__gguf_free_tables(attn_gguf *g);

/* A reference to g's tensors that outlives the caller's attn_gguf_free:
 * for a mapped file, g itself with one more holder (attn_gguf_free unmaps
 * when the last one lets go); for a caller's buffer, a copy of the buffer
 * parsed again (the caller may free its buffer).  Release with
 * attn_gguf_free.  Used by a decoder that reads the weights where they are
 * stored. */
attn_status attn__gguf_keep(const attn_gguf *g, attn_gguf **kept);

/* Nested arrays deeper than this are refused: the reader recurses into
 * them, and a hostile file must not be able to exhaust the stack. */
#define GGUF_MAX_ARRAY_DEPTH 16
/* The format's limit on a key's length (ggml's docs/gguf.md), used for
 * tensor names too. */
#define GGUF_MAX_NAME_BYTES 65535
#define GGUF_DEFAULT_ALIGNMENT 32

#endif /* ATTN_FORMATS_GGUF_H */
