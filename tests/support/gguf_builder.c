/*
 * gguf_builder.c — GGUF bytes as the tests write them (gguf_builder.h).
 */
#include "gguf_builder.h"

#include <stdlib.h>
#include <string.h>

void gb_free(gguf_bytes *b) {
    free(b->data);
    *b = (gguf_bytes){0};
}

void gb_raw(gguf_bytes *b, const void *p, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        b->data = realloc(b->data, cap);
        if (!b->data) abort(); /* a test helper: out of memory ends the test */
        b->cap = cap;
    }
    if (n) memcpy(b->data + b->len, p, n);
    b->len += n;
}

void gb_zeros(gguf_bytes *b, size_t n) {
    for (size_t i = 0; i < n; i++) gb_u8(b, 0);
}

void gb_u8(gguf_bytes *b, uint8_t v) { gb_raw(b, &v, 1); }

void gb_u16(gguf_bytes *b, uint16_t v) {
    const uint8_t bytes[2] = {(uint8_t)v, (uint8_t)(v >> 8)};
    gb_raw(b, bytes, 2);
}

void gb_u32(gguf_bytes *b, uint32_t v) {
    gb_u16(b, (uint16_t)v);
    gb_u16(b, (uint16_t)(v >> 16));
}

void gb_u64(gguf_bytes *b, uint64_t v) {
    gb_u32(b, (uint32_t)v);
    gb_u32(b, (uint32_t)(v >> 32));
}

void gb_f32(gguf_bytes *b, float v) {
    uint32_t bits;
    memcpy(&bits, &v, sizeof bits);
    gb_u32(b, bits);
}

void gb_f64(gguf_bytes *b, double v) {
    uint64_t bits;
    memcpy(&bits, &v, sizeof bits);
    gb_u64(b, bits);
}

void gb_strn(gguf_bytes *b, const void *s, uint64_t n) {
    gb_u64(b, n);
    gb_raw(b, s, (size_t)n);
}

void gb_str(gguf_bytes *b, const char *s) { gb_strn(b, s, strlen(s)); }

void gb_header(gguf_bytes *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    gb_raw(b, "GGUF", 4);
    gb_u32(b, version);
    gb_u64(b, n_tensors);
    gb_u64(b, n_kv);
}

void gb_key(gguf_bytes *b, const char *key, uint32_t type) {
    gb_str(b, key);
    gb_u32(b, type);
}

void gb_array(gguf_bytes *b, uint32_t elem_type, uint64_t count) {
    gb_u32(b, elem_type);
    gb_u64(b, count);
}

void gb_kv_u32(gguf_bytes *b, const char *key, uint32_t v) {
    gb_key(b, key, 4);
    gb_u32(b, v);
}

void gb_kv_string(gguf_bytes *b, const char *key, const char *v) {
    gb_key(b, key, 8);
    gb_str(b, v);
}

void gb_tensor(gguf_bytes *b, const char *name, uint32_t n_dims, const uint64_t *dims, uint32_t type,
               uint64_t offset) {
    gb_str(b, name);
    gb_u32(b, n_dims);
    for (uint32_t d = 0; d < n_dims; d++) gb_u64(b, dims[d]);
    gb_u32(b, type);
    gb_u64(b, offset);
}

void gb_pad(gguf_bytes *b, size_t align) {
    while (b->len % align) gb_u8(b, 0);
}
