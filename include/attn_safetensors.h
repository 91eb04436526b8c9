/*
 * attn_safetensors.h — Hugging Face's safetensors checkpoints (libattn_model;
 * pkg-config attn-model, CMake attn::model).
 *
 * A header of its own, not a section of attn_gguf.h, because it is the one
 * part of libattn_model that needs cJSON (the JSON header is parsed with
 * it, as DESIGN.md chooses): a build without cJSON (Debian: libcjson-dev)
 * still declares these functions, and each returns ATTN_ERR_UNSUPPORTED
 * saying so, while the GGUF reader stays as it is.
 *
 * A file is
 *   N             8 bytes, little-endian u64: the header's length
 *   header        N bytes of UTF-8 JSON, one object:
 *                   "NAME": {"dtype": "F32", "shape": [2, 3],
 *                            "data_offsets": [BEGIN, END]}, ...
 *                   "__metadata__": {"format": "pt", ...}  (optional; strings)
 *                 possibly padded with spaces after the object
 *   data          the rest of the file: tensor NAME is bytes BEGIN .. END-1
 *                 of it, row-major (C order), little-endian.
 *
 * Shape legend: a tensor's shape is numpy's / PyTorch's (shape[0] the
 * slowest index) <- the REVERSE of GGUF's dims.  A PyTorch nn.Linear
 * weight is [out, in]: each output's weights one row (what the decoder
 * uses as it stands, attn_decoder.h).  A rank-0 tensor (shape []) has one
 * element; a dimension may be 0 (no elements, BEGIN == END), though the
 * other dimensions' bytes must still fit int64, as numpy requires.
 *
 * What is checked, before anything is used or allocated for it: N against
 * the file (at most 100,000,000 bytes, the limit of the reference Rust
 * crate); the header is one JSON object (cJSON) followed only by spaces,
 * with no NUL byte; every entry is an object with a known "dtype" string, a
 * "shape" array of at most 8 non-negative integers and "data_offsets" two
 * integers BEGIN <= END; the element count (shape product) and its bytes
 * do not overflow and equal END - BEGIN; taken in order the tensors are
 * contiguous and cover the data section exactly (the first begins at 0,
 * each begins where the previous ends, the last ends at the file's end);
 * names are unique (and non-empty); "__metadata__" is an object of
 * strings.  Numbers must be integers JSON writes exactly (at most 2^53).
 * A refusal is ATTN_ERR_FORMAT (ATTN_ERR_UNSUPPORTED for a valid file this
 * reader does not read: more than 8 dimensions) with a message naming the
 * tensor or key, the problem and the byte offset.
 *
 * dtypes: every fixed-width safetensors dtype is known (its size is used
 * in the checks: BOOL U8 I8 F8_E5M2 F8_E4M3 F8_E8M0 I16 U16 F16 BF16 I32 U32
 * F32 F64 I64 U64 C64); attn_safetensors_read_f32 converts F32, F16 and BF16
 * and refuses the others by name.  An unknown dtype is refused when the
 * file is opened.
 *
 * Sharded checkpoints: a directory holding model.safetensors.index.json
 * ({"weight_map": {"NAME": "model-00001-of-00002.safetensors", ...}}) is
 * opened as one set: every shard it names is opened (a shard name is a
 * plain file name in that directory: no '/', no "..", no leading '.'),
 * every name in the map is found in its shard, every tensor of a shard is
 * in the map under that shard, and no tensor is in two shards.
 *
 * Threads: an attn_safetensors is read-only once opened; every function
 * below may be called on it from any number of threads at once.  Opening
 * several files at once from several threads is safe too, with one caveat
 * of cJSON 1.7: a failed parse also records its position in a global of
 * cJSON's (attn reads the position from the parse itself, never from that
 * global, so only a race detector notices).
 */
#ifndef ATTN_SAFETENSORS_H
#define ATTN_SAFETENSORS_H

#include "attn.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct attn_safetensors attn_safetensors; /* a file, a buffer or a set of shards (opaque) */

#define ATTN_SAFETENSORS_MAX_DIMS 8

typedef enum attn_safetensors_dtype {
    ATTN_SAFETENSORS_BOOL = 0,
    ATTN_SAFETENSORS_U8,
    ATTN_SAFETENSORS_I8,
    ATTN_SAFETENSORS_F8_E5M2,
    ATTN_SAFETENSORS_F8_E4M3,
    ATTN_SAFETENSORS_F8_E8M0,
    ATTN_SAFETENSORS_I16,
    ATTN_SAFETENSORS_U16,
    ATTN_SAFETENSORS_F16,     /* converted                                 */
    ATTN_SAFETENSORS_BF16,    /* converted                                 */
    ATTN_SAFETENSORS_I32,
    ATTN_SAFETENSORS_U32,
    ATTN_SAFETENSORS_F32,     /* converted                                 */
    ATTN_SAFETENSORS_F64,
    ATTN_SAFETENSORS_I64,
    ATTN_SAFETENSORS_U64,
    ATTN_SAFETENSORS_C64
} attn_safetensors_dtype;

/* A tensor's description (filled in by the library). */
typedef struct attn_safetensors_tensor {
    const char *name;           /* NUL-terminated; lives as long as the attn_safetensors */
    int64_t index;              /* its place: header order, shard after shard, 0-based   */
    int64_t shard;              /* which file of a set (0 for one file or a buffer)      */
    attn_safetensors_dtype dtype;
    int n_dims;                 /* 0 .. ATTN_SAFETENSORS_MAX_DIMS                        */
    int64_t shape[ATTN_SAFETENSORS_MAX_DIMS]; /* numpy order; unused entries are 1       */
    int64_t n_elements;         /* the product of shape (1 for rank 0)                   */
    uint64_t n_bytes;           /* n_elements times the dtype's size                     */
    uint64_t offset;            /* its first byte, from the start of its file            */
    const void *data;           /* that byte, in the mapping or the buffer               */
} attn_safetensors_tensor;

/* Parses a complete safetensors image held in memory.  The buffer is not
 * copied: it must stay unchanged and alive until attn_safetensors_free. */
ATTN_API attn_status attn_safetensors_parse(const void *buf, size_t size, attn_safetensors **out);

/* Opens path, which is
 *   a .safetensors file          mapped read-only (mmap) and parsed
 *   a directory                  its model.safetensors.index.json when it has
 *                                one (a sharded checkpoint), else its
 *                                model.safetensors
 *   an index file (*.json)       the shards it names, beside it
 * Only regular files are read (a FIFO or a device is refused without
 * blocking).  Opening costs the parsed tables and the headers' pages; the
 * tensors stay on disk until read.  Messages name the file. */
ATTN_API attn_status attn_safetensors_open(const char *path, attn_safetensors **out);

/* Frees the tables and unmaps the files (NULL is allowed). */
ATTN_API void attn_safetensors_free(attn_safetensors *st);
/* Deprecated names, until 1.0: attn_safetensors_free under its former name. */
ATTN_API void attn_safetensors_close(attn_safetensors *st) ATTN_DEPRECATED("renamed attn_safetensors_free");
/* End of the deprecated names. */

ATTN_API int64_t attn_safetensors_n_tensors(const attn_safetensors *st);
ATTN_API int64_t attn_safetensors_n_shards(const attn_safetensors *st);

/* Tensors in order, 0 .. n_tensors-1. */
ATTN_API attn_status attn_safetensors_tensor_at(const attn_safetensors *st, int64_t index,
                                                attn_safetensors_tensor *info);
/* The index of the tensor called name, or -1 (no error set). */
ATTN_API int64_t attn_safetensors_tensor_index(const attn_safetensors *st, const char *name);
/* The tensor called name; ATTN_ERR_FORMAT "no tensor 'x'" when missing. */
ATTN_API attn_status attn_safetensors_find_tensor(const attn_safetensors *st, const char *name,
                                                  attn_safetensors_tensor *info);

/* "__metadata__" of the file (of the first shard of a set): its entries in
 * header order, and a lookup that returns NULL (no error set) for a key it
 * does not have.  Keys and values are NUL-terminated and live as long as
 * st. */
ATTN_API int64_t attn_safetensors_n_metadata(const attn_safetensors *st);
ATTN_API attn_status attn_safetensors_metadata_at(const attn_safetensors *st, int64_t index, const char **key,
                                                  const char **value);
ATTN_API const char *attn_safetensors_metadata(const attn_safetensors *st, const char *key);

/* "F32", "BF16", ... ; NULL for a number that is no dtype. */
ATTN_API const char *attn_safetensors_dtype_name(attn_safetensors_dtype dtype);
/* Bytes of one element; 0 for a number that is no dtype. */
ATTN_API int attn_safetensors_dtype_size(attn_safetensors_dtype dtype);

/* The whole tensor (the library's own description of tensor->index) to
 * float32, exactly (every F16 and BF16 value is a float32 value):
 *   out: [n_elements] float32, in the tensor's (row-major) order
 * ATTN_ERR_UNSUPPORTED, naming the tensor and its dtype, for a dtype other
 * than F32, F16 and BF16. */
ATTN_API attn_status attn_safetensors_read_f32(const attn_safetensors *st, const attn_safetensors_tensor *tensor,
                                               float *out);

#ifdef __cplusplus
}
#endif

#endif /* ATTN_SAFETENSORS_H */
