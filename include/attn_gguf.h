/*
 * attn_gguf.h — the GGUF reader: real models' weights as llama.cpp and ggml
 * store them (libattn_model; pkg-config attn-model, CMake attn::model).
 * It depends on libattn and libm only.
 *
 * Built on it, in the same library: attn_tokenizer.h (a GGUF's vocabulary
 * as a tokenizer) and attn_decoder.h (a model's configuration and its
 * float32 forward over token ids).  docs/models.md has the prose: the
 * checks, the memory each way of reading costs, the real models and their
 * licences, the decoder.  Up to 0.3 this header was called attn_model.h;
 * that name still works until 1.0 (it includes this one).
 */
#ifndef ATTN_GGUF_H
#define ATTN_GGUF_H

#include "attn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ==================================================================== GGUF
 * GGUF, versions 2 and 3 (little-endian; a big-endian file is refused):
 * the format llama.cpp and ggml write (ggml's docs/gguf.md).  A file is
 *   header        "GGUF", version u32, tensor count u64, key count u64
 *   metadata      key/value pairs: key = string (u64 length + bytes),
 *                 type u32, value (scalar, string, or array: element type
 *                 u32, count u64, elements; arrays may nest)
 *   tensor infos  name (string), n_dims u32 (1..4), dims u64[n_dims],
 *                 type u32, offset u64 (from the data section's start)
 *   data          from the end of the infos rounded up to general.alignment
 *                 (a u32 key, default 32), each tensor at its offset.
 * All integers are little-endian and fields are packed without padding.
 *
 * Shape legend: a tensor's dims are GGUF's (ggml's ne): dims[0] is the
 * fastest-varying index, so
 *   dims = [D0, D1, D2, D3]   <- the REVERSE of numpy's / PyTorch's shape
 * (a weight ggml stores as [896, 151936] is numpy's (151936, 896)).  A
 * "row" is dims[0] consecutive elements; n_rows = D1 * D2 * D3.  Quantized
 * types store a row as whole blocks, so dims[0] is a multiple of the type's
 * block (32 or 256 elements).
 *
 * Every size and offset in the file is checked before it is used and
 * before anything is allocated for it: string lengths and array counts
 * against the bytes left, counts times element sizes and dims products for
 * overflow, each tensor's byte size (from its type's blocks) against the
 * data section, tensors against each other (no overlap), offsets against
 * the alignment; duplicate keys and tensor names, unknown types, bools
 * other than 0/1 and truncation anywhere are refused.  A refusal is
 * ATTN_ERR_FORMAT (ATTN_ERR_UNSUPPORTED for a valid file this reader does
 * not read: version 1, big-endian, nesting past 16 levels) with a message
 * naming the key or tensor, the problem and the byte offset.
 *
 * Threads: an attn_gguf is read-only once opened; every function below may
 * be called on it from any number of threads at once. */

typedef struct attn_gguf attn_gguf; /* an opened file or buffer (opaque) */

/* Metadata value types, numbered as in the file. */
typedef enum attn_gguf_value_type {
    ATTN_GGUF_VALUE_UINT8 = 0,
    ATTN_GGUF_VALUE_INT8 = 1,
    ATTN_GGUF_VALUE_UINT16 = 2,
    ATTN_GGUF_VALUE_INT16 = 3,
    ATTN_GGUF_VALUE_UINT32 = 4,
    ATTN_GGUF_VALUE_INT32 = 5,
    ATTN_GGUF_VALUE_FLOAT32 = 6,
    ATTN_GGUF_VALUE_BOOL = 7,     /* one byte, 0 or 1 (anything else is refused) */
    ATTN_GGUF_VALUE_STRING = 8,   /* UTF-8 bytes, NOT NUL-terminated               */
    ATTN_GGUF_VALUE_ARRAY = 9,
    ATTN_GGUF_VALUE_UINT64 = 10,
    ATTN_GGUF_VALUE_INT64 = 11,
    ATTN_GGUF_VALUE_FLOAT64 = 12
} attn_gguf_value_type;

/* Tensor types, numbered as ggml numbers them.  The reader knows the block
 * size of every type gguf-py 0.19 knows (so any such file opens and every
 * tensor's size is checked); attn_gguf_dequantize_rows converts the types
 * marked *.  Any other number is refused as unknown. */
typedef enum attn_gguf_tensor_type {
    ATTN_GGUF_TYPE_F32 = 0,      /* *                                      */
    ATTN_GGUF_TYPE_F16 = 1,      /* *                                      */
    ATTN_GGUF_TYPE_Q4_0 = 2,     /* *  32 elements in 18 bytes             */
    ATTN_GGUF_TYPE_Q4_1 = 3,     /* *  32 in 20                            */
    ATTN_GGUF_TYPE_Q5_0 = 6,     /* *  32 in 22                            */
    ATTN_GGUF_TYPE_Q5_1 = 7,     /* *  32 in 24                            */
    ATTN_GGUF_TYPE_Q8_0 = 8,     /* *  32 in 34                            */
    ATTN_GGUF_TYPE_Q8_1 = 9,
    ATTN_GGUF_TYPE_Q2_K = 10,
    ATTN_GGUF_TYPE_Q3_K = 11,
    ATTN_GGUF_TYPE_Q4_K = 12,    /* *  256 in 144                          */
    ATTN_GGUF_TYPE_Q5_K = 13,    /* *  256 in 176                          */
    ATTN_GGUF_TYPE_Q6_K = 14,    /* *  256 in 210                          */
    ATTN_GGUF_TYPE_Q8_K = 15,
    ATTN_GGUF_TYPE_IQ2_XXS = 16,
    ATTN_GGUF_TYPE_IQ2_XS = 17,
    ATTN_GGUF_TYPE_IQ3_XXS = 18,
    ATTN_GGUF_TYPE_IQ1_S = 19,
    ATTN_GGUF_TYPE_IQ4_NL = 20,
    ATTN_GGUF_TYPE_IQ3_S = 21,
    ATTN_GGUF_TYPE_IQ2_S = 22,
    ATTN_GGUF_TYPE_IQ4_XS = 23,
    ATTN_GGUF_TYPE_I8 = 24,
    ATTN_GGUF_TYPE_I16 = 25,
    ATTN_GGUF_TYPE_I32 = 26,
    ATTN_GGUF_TYPE_I64 = 27,
    ATTN_GGUF_TYPE_F64 = 28,
    ATTN_GGUF_TYPE_IQ1_M = 29,
    ATTN_GGUF_TYPE_BF16 = 30,    /* *                                      */
    ATTN_GGUF_TYPE_TQ1_0 = 34,
    ATTN_GGUF_TYPE_TQ2_0 = 35,
    ATTN_GGUF_TYPE_MXFP4 = 39,
    ATTN_GGUF_TYPE_NVFP4 = 40,
    ATTN_GGUF_TYPE_Q1_0 = 41
} attn_gguf_tensor_type;

/* A metadata value as the file holds it.  data points into the file (or
 * the buffer given to attn_gguf_parse) and lives as long as the attn_gguf.
 * Numbers are little-endian and UNALIGNED: read them with the getters, or
 * memcpy.
 *   scalar  count 1, data its bytes (size 1, 2, 4 or 8)
 *   string  count = size = its length in bytes, data the bytes (no NUL)
 *   array   elem_type the elements' type, count how many, data the first
 *           element's bytes, size all elements' bytes; walk it with
 *           attn_gguf_array_next (any elements) or read numbers with
 *           attn_gguf_array_int / attn_gguf_array_float */
typedef struct attn_gguf_value {
    attn_gguf_value_type type;
    attn_gguf_value_type elem_type; /* arrays: the elements' type; else = type */
    uint64_t count;
    const void *data;
    uint64_t size;
} attn_gguf_value;

/* A tensor's description (filled in by the library; changes only with the
 * SONAME, as every result struct). */
typedef struct attn_gguf_tensor {
    const char *name;           /* NUL-terminated; lives as long as the attn_gguf */
    int64_t index;              /* its place among the file's tensors, 0-based   */
    attn_gguf_tensor_type type;
    int n_dims;                 /* 1 .. 4                                         */
    int64_t dims[4];            /* GGUF order (dims[0] fastest); unused dims are 1 */
    int64_t n_elements;         /* the product of dims                            */
    int64_t n_rows;             /* n_elements / dims[0]                           */
    uint64_t row_bytes;         /* bytes of one row in its type                   */
    uint64_t n_bytes;           /* n_rows * row_bytes                             */
    uint64_t offset;            /* its first byte, from the start of the file     */
    const void *data;           /* that byte, in the mapping or the buffer        */
} attn_gguf_tensor;

/* The file as a whole. */
typedef struct attn_gguf_info {
    uint32_t version;           /* 2 or 3                                         */
    int64_t n_keys, n_tensors;
    uint64_t alignment;         /* general.alignment, or 32                       */
    uint64_t data_offset;       /* where the data section starts                  */
    uint64_t size;              /* bytes of the file or buffer                    */
} attn_gguf_info;

/* ------------------------------------------------------ opening and closing */

/* Maps the file at path read-only (mmap) and parses it.  Only a regular
 * file is read (a FIFO, a device or a directory is refused without
 * blocking).  Opening costs the parsed tables (a few dozen bytes per key and
 * tensor, plus their names) and the pages of the header the parser touched;
 * the tensor data stay on disk until rows are read.  Messages name the
 * path.  The file must not be truncated while it is open (a mapping of a
 * shortened file faults on access, as with any mmap). */
ATTN_API attn_status attn_gguf_open(const char *path, attn_gguf **out);

/* Parses a complete GGUF image held in memory.  The buffer is not copied:
 * it must stay unchanged and alive until attn_gguf_free.  A buffer aligned
 * to the file's alignment keeps the tensors aligned as well (they need not
 * be: every read is byte-wise). */
ATTN_API attn_status attn_gguf_parse(const void *buf, size_t size, attn_gguf **out);

/* Frees the tables and unmaps the file (NULL is allowed).  A decoder loaded
 * from an opened file (attn_decoder_load) holds the mapping too: it is
 * unmapped when the last of them is freed. */
ATTN_API void attn_gguf_free(attn_gguf *g);
/* Deprecated names, until 1.0: attn_gguf_free under its former name. */
ATTN_API void attn_gguf_close(attn_gguf *g) ATTN_DEPRECATED("renamed attn_gguf_free");
/* End of the deprecated names. */

ATTN_API void attn_gguf_describe(const attn_gguf *g, attn_gguf_info *info);

/* ------------------------------------------------------------- metadata */

/* Keys in file order, 0 .. n_keys-1: *key gets the NUL-terminated name
 * (GGUF keys hold no NUL; the reader refuses one that does) and *value the
 * value (either may be NULL). */
ATTN_API attn_status attn_gguf_key_at(const attn_gguf *g, int64_t index, const char **key, attn_gguf_value *value);

/* The index of key, or -1 when the file has no such key; sets no error, so
 * that optional keys are looked up by it. */
ATTN_API int64_t attn_gguf_key_index(const attn_gguf *g, const char *key);

/* The value of key; ATTN_ERR_FORMAT "no key 'x'" when it is missing. */
ATTN_API attn_status attn_gguf_get_value(const attn_gguf *g, const char *key, attn_gguf_value *value);

/* Typed getters: ATTN_ERR_FORMAT, naming the key, when it is missing or of
 * another type.  The integer getters take a value of any integer type whose
 * value fits (a uint8 or an int32 head count read as uint32; a negative
 * value or one past the range is refused); get_f64 takes float32 or
 * float64; get_f32 float32 only (narrowing a float64 would round);
 * get_bool a bool only.  get_string gives the bytes and their length, NOT
 * NUL-terminated (they may hold any byte). */
ATTN_API attn_status attn_gguf_get_u32(const attn_gguf *g, const char *key, uint32_t *out);
ATTN_API attn_status attn_gguf_get_i32(const attn_gguf *g, const char *key, int32_t *out);
ATTN_API attn_status attn_gguf_get_u64(const attn_gguf *g, const char *key, uint64_t *out);
ATTN_API attn_status attn_gguf_get_i64(const attn_gguf *g, const char *key, int64_t *out);
ATTN_API attn_status attn_gguf_get_f32(const attn_gguf *g, const char *key, float *out);
ATTN_API attn_status attn_gguf_get_f64(const attn_gguf *g, const char *key, double *out);
ATTN_API attn_status attn_gguf_get_bool(const attn_gguf *g, const char *key, int *out);
ATTN_API attn_status attn_gguf_get_string(const attn_gguf *g, const char *key, const char **str, size_t *len);
/* An array; elem_type is checked unless it is -1 (any).  Walk it with the
 * three functions below. */
ATTN_API attn_status attn_gguf_get_array(const attn_gguf *g, const char *key, int elem_type, attn_gguf_value *array);

/* Element i of an array of integers or bools, as int64 (a uint64 past
 * INT64_MAX is refused), or of floats as double. */
ATTN_API attn_status attn_gguf_array_int(const attn_gguf_value *array, uint64_t i, int64_t *out);
ATTN_API attn_status attn_gguf_array_float(const attn_gguf_value *array, uint64_t i, double *out);
/* The elements in order, of any type (strings and nested arrays, whose
 * elements are not of one size, are read this way): *cursor starts at 0
 * and each call puts the next element in *element and advances it.
 * Returns ATTN_ERR_INVALID_ARGUMENT past the last element. */
ATTN_API attn_status attn_gguf_array_next(const attn_gguf_value *array, uint64_t *cursor, attn_gguf_value *element);

/* --------------------------------------------------------------- tensors */

/* Tensors in file order, 0 .. n_tensors-1. */
ATTN_API attn_status attn_gguf_tensor_at(const attn_gguf *g, int64_t index, attn_gguf_tensor *info);
/* The index of the tensor called name, or -1 (no error set). */
ATTN_API int64_t attn_gguf_tensor_index(const attn_gguf *g, const char *name);
/* The tensor called name; ATTN_ERR_FORMAT "no tensor 'x'" when missing. */
ATTN_API attn_status attn_gguf_find_tensor(const attn_gguf *g, const char *name, attn_gguf_tensor *info);

/* "Q4_K", "F32", ... for a type the reader knows; NULL otherwise. */
ATTN_API const char *attn_gguf_type_name(attn_gguf_tensor_type type);
/* "uint32", "string", ... ; NULL for a number that is no value type. */
ATTN_API const char *attn_gguf_value_type_name(attn_gguf_value_type type);
/* Elements and bytes of one block of type (1 and the element's size for
 * F32, F16, BF16 ...); ATTN_ERR_UNSUPPORTED for an unknown type. */
ATTN_API attn_status attn_gguf_type_block(attn_gguf_tensor_type type, int64_t *block_elements, int64_t *block_bytes);
/* 1 when attn_gguf_dequantize_rows converts type, else 0. */
ATTN_API int attn_gguf_type_dequantizable(attn_gguf_tensor_type type);

/* ------------------------------------------------------- dequantization
 * To float32, with the arithmetic of the gguf package's numpy reference
 * (gguf.quants.dequantize), which computes in float32 as ggml's C reference
 * does: the results are bit for bit the same (docs/models.md says how each
 * type computes).  Row by row, so that a caller chooses between converting
 * a whole tensor at load (4 bytes per element of memory) and converting the
 * rows it needs when it needs them (nothing kept, the mapping's pages read
 * on demand).
 *   out: [count, dims[0]] float32 (count rows of dims[0] elements)
 * Rows first_row .. first_row+count-1 of the tensor (the library's own
 * description of tensor->index is used, not the caller's copy of the
 * other fields).  ATTN_ERR_UNSUPPORTED for a type it does not convert. */
ATTN_API attn_status attn_gguf_dequantize_rows(const attn_gguf *g, const attn_gguf_tensor *tensor, int64_t first_row,
                                               int64_t count, float *out);

/* The same conversion on blocks the caller holds: n elements (a multiple
 * of the type's block) from size bytes at blocks (at least the n elements'
 * bytes) into out[n]. */
ATTN_API attn_status attn_gguf_dequantize(attn_gguf_tensor_type type, const void *blocks, size_t size, int64_t n,
                                          float *out);

#ifdef __cplusplus
}
#endif

#endif /* ATTN_GGUF_H */
