/*
 * npy_format.h — the pieces of the .npy codec (npy.c) that the by-offset
 * reader and the header writer (npy_file.c) share with it: parse the
 * preamble and header of an image without its data, convert read data to
 * native order, format the header numpy.save writes.
 *
 * Shape legend: shape (d0, ..., d{ndim-1}); data_offset is the byte where
 * element 0 starts (a multiple of 64 for files numpy or attn wrote).
 */
#ifndef ATTN_NPY_FORMAT_H
#define ATTN_NPY_FORMAT_H

#include "attn_io.h"

#include <stdbool.h>
#include <string.h>

#define NPY_HEADER_CAP 512 /* bytes: the largest header attn__npy_format_header writes */

/* What a .npy header says about the data that follows it. */
typedef struct npy_layout {
    attn_dtype dtype;
    bool swap;                    /* the file's byte order is not native  */
    int ndim;
    int64_t shape[ATTN_MAX_DIMS];
    int64_t count;                /* elements                              */
    size_t data_offset;           /* preamble + header: where data starts  */
    int64_t data_bytes;           /* count * element size, overflow-checked */
} npy_layout;

/* Checks the magic, the version and the header length in the first 10 or 12
 * bytes of buf and sets *data_offset (the header itself is not looked at). */
attn_status attn__npy_parse_preamble(const void *buf, size_t size, size_t *data_offset);

/* Parses the preamble and header held in buf (size bytes; the data need not
 * follow).  Errors are those of attn_npy_parse. */
attn_status attn__npy_parse_header_image(const void *buf, size_t size, npy_layout *layout);

/* A header's answer to the header-only readers (attn_npy_parse_header,
 * attn_npy_read_header): dtype, ndim, shape and count into shape_only
 * (data NULL; the dimensions past ndim 0, as attn_npy_parse leaves them,
 * where the layout holds whatever the parse left there), the data's offset
 * into *data_offset when not NULL. */
static inline void npy_layout_answer(const npy_layout *layout, attn_array *shape_only, size_t *data_offset) {
    shape_only->dtype = layout->dtype;
    shape_only->ndim = layout->ndim;
    memset(shape_only->shape, 0, sizeof shape_only->shape);
    memcpy(shape_only->shape, layout->shape, sizeof(int64_t) * (size_t)layout->ndim);
    shape_only->count = layout->count;
    shape_only->data = NULL;
    if (data_offset) *data_offset = layout->data_offset;
}

/* Converts count elements read from such a file to native byte order and
 * normalises bools to 0 or 1, in place. */
void attn__npy_to_native(const npy_layout *layout, void *data, int64_t count);

/* Writes the preamble and header numpy.save writes for this dtype and shape
 * (the caller has validated them) into header and returns its length, which
 * is the offset of the data: a multiple of 64. */
size_t attn__npy_format_header(attn_dtype dtype, int ndim, const int64_t *shape,
                         uint8_t header[NPY_HEADER_CAP]);

/* Re-issues the current failure with "path: " in front of its message. */
static inline attn_status npy_fail_with_path(attn_status status, const char *path) {
    return attn_set_error(status, "%s: %s", path, attn_last_error());
}

#endif /* ATTN_NPY_FORMAT_H */
