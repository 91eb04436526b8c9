/*
 * gguf.h — what the GGUF reader's files share (libattn_model): the parsed
 * file (gguf.c parses, gguf_file.c maps, gguf_dequant.c converts), and the
 * table of tensor types.
 */
#ifndef ATTN_MODEL_GGUF_H
#define ATTN_MODEL_GGUF_H

#include "attn_model.h"
#include "base/base.h"

/* Converts n elements (a multiple of the type's block) of one type from
 * src (n / block_elements * block_bytes bytes) to float32. */
typedef void (*gguf_dequantize_fn)(const uint8_t *src, int64_t n, float *out);

/* A tensor type: its name, its block (elements, bytes) and its converter
 * (NULL: the reader checks its sizes but does not convert it). */
typedef struct gguf_type_traits {
    const char *name;
    int64_t block_elements, block_bytes;
    gguf_dequantize_fn dequantize;
} gguf_type_traits;

/* The traits of type, or NULL for a number ggml does not define (or no
 * longer defines). */
const gguf_type_traits *attn__gguf_type_traits(uint32_t type);

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
};

/* Frees what attn_gguf_parse allocated (attn_gguf_free, in gguf_file.c,
 * also unmaps). */
void attn__gguf_free_tables(attn_gguf *g);

/* Nested arrays deeper than this are refused: the reader recurses into
 * them, and a hostile file must not be able to exhaust the stack. */
#define GGUF_MAX_ARRAY_DEPTH 16
/* The format's limit on a key's length (ggml's docs/gguf.md), used for
 * tensor names too. */
#define GGUF_MAX_NAME_BYTES 65535
#define GGUF_DEFAULT_ALIGNMENT 32

/* Little-endian loads from unaligned bytes. */
static inline uint16_t gguf_u16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static inline uint32_t gguf_u32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static inline uint64_t gguf_u64(const uint8_t *p) { return (uint64_t)gguf_u32(p) | ((uint64_t)gguf_u32(p + 4) << 32); }

/* Writes at most 48 bytes of name into buf as printable text for a
 * message: bytes outside ASCII's printable range as \xNN, a longer name cut
 * with "...".  Returns buf. */
const char *attn__gguf_quote(const void *name, uint64_t len, char *buf, size_t cap);

#endif /* ATTN_MODEL_GGUF_H */
