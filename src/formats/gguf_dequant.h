/*
 * gguf_dequant.h — GGUF's tensor types (gguf_dequant.c): the table of their
 * blocks and converters, which the parser (gguf.c, above it) sizes every
 * tensor by, and the little-endian loads both read the file with.
 */
#ifndef ATTN_FORMATS_GGUF_DEQUANT_H
#define ATTN_FORMATS_GGUF_DEQUANT_H

#include "attn_gguf.h"
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

/* The types converted, for messages. */
#define GGUF_CONVERTED "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K and Q6_K"

/* Little-endian loads from unaligned bytes. */
static inline uint16_t gguf_u16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static inline uint32_t gguf_u32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static inline uint64_t gguf_u64(const uint8_t *p) { return (uint64_t)gguf_u32(p) | ((uint64_t)gguf_u32(p + 4) << 32); }

#endif /* ATTN_FORMATS_GGUF_DEQUANT_H */
