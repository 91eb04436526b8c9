/*
 * gguf_builder.h — GGUF files built byte by byte from the format's
 * description (ggml's docs/gguf.md), never by attn's reader or a writer
 * library, for the tests of tests/model/: every field is written as the
 * test says, lies included.  All integers little-endian.
 */
#ifndef ATTN_TEST_GGUF_BUILDER_H
#define ATTN_TEST_GGUF_BUILDER_H

#include <stddef.h>
#include <stdint.h>

typedef struct gguf_bytes {
    uint8_t *data;
    size_t len, cap;
} gguf_bytes;

void gb_free(gguf_bytes *b);
void gb_raw(gguf_bytes *b, const void *p, size_t n);
void gb_zeros(gguf_bytes *b, size_t n);
void gb_u8(gguf_bytes *b, uint8_t v);
void gb_u16(gguf_bytes *b, uint16_t v);
void gb_u32(gguf_bytes *b, uint32_t v);
void gb_u64(gguf_bytes *b, uint64_t v);
void gb_f32(gguf_bytes *b, float v);
void gb_f64(gguf_bytes *b, double v);
/* A GGUF string: u64 length, then the bytes (n of them; gb_str: strlen). */
void gb_strn(gguf_bytes *b, const void *s, uint64_t n);
void gb_str(gguf_bytes *b, const char *s);
/* "GGUF", version, tensor count, key count. */
void gb_header(gguf_bytes *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv);
/* A key and its value type; the value follows (gb_u32 ...). */
void gb_key(gguf_bytes *b, const char *key, uint32_t type);
/* An array value's header: element type and count; the elements follow. */
void gb_array(gguf_bytes *b, uint32_t elem_type, uint64_t count);
/* Common pairs. */
void gb_kv_u32(gguf_bytes *b, const char *key, uint32_t v);
void gb_kv_string(gguf_bytes *b, const char *key, const char *v);
/* A tensor info: name, n_dims, dims[n_dims], type, offset. */
void gb_tensor(gguf_bytes *b, const char *name, uint32_t n_dims, const uint64_t *dims, uint32_t type,
               uint64_t offset);
/* Zeros up to the next multiple of align. */
void gb_pad(gguf_bytes *b, size_t align);

#endif
