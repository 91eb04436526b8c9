/*
 * npy.c — NumPy's .npy format: parse an image held in memory, serialise to
 * memory, save a file (never half-written).  Reading files, whole or by
 * rows, is npy_file.c's.
 *
 * File layout (numpy.lib.format):
 *   bytes 0..5   "\x93NUMPY"                       magic
 *   bytes 6, 7   major, minor version              1.0, 2.0 or 3.0
 *   bytes 8..    header length, little-endian      2 bytes (1.0), 4 bytes (2.0, 3.0)
 *   then         the header: a Python dict literal, ASCII (1.0, 2.0) or UTF-8 (3.0)
 *                  {'descr': '<f4', 'fortran_order': False, 'shape': (L, D), }
 *                padded with spaces and one final '\n' so that the data
 *                starts at a multiple of 64 bytes
 *   then         prod(shape) elements in C order, in the byte order of descr,
 *                and nothing after them
 *
 * Shape legend: shape (d0, d1, ..., d{ndim-1}), ndim 0 (a scalar, shape ())
 * up to ATTN_MAX_DIMS; the array in memory is C order, native byte order.
 */
#include "io/npy_format.h"
#include "io/array.h"

#include "base/base.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define NPY_MAGIC "\x93NUMPY"
#define NPY_MAGIC_LEN 6
#define NPY_MAX_HEADER (1u << 20) /* headers beyond 1 MiB are refused */
#define NPY_ALIGN 64              /* numpy aligns the data to 64 bytes */

static bool host_is_little_endian(void) {
    const uint16_t one = 1;
    uint8_t first;
    memcpy(&first, &one, 1);
    return first == 1;
}

/* "(3, 4)", "(3,)" or "()" — the shape as Python writes a tuple. */
static void format_shape(char *buf, size_t cap, int ndim, const int64_t *shape) {
    size_t used = (size_t)snprintf(buf, cap, "(");
    for (int i = 0; i < ndim && used < cap; i++)
        used += (size_t)snprintf(buf + used, cap - used, "%s%lld", i ? ", " : "",
                                 (long long)shape[i]);
    if (used < cap) snprintf(buf + used, cap - used, ndim == 1 ? ",)" : ")");
}

/* ------------------------------------------------------------- the header */

/* A cursor over the header text, which is not NUL-terminated. */
typedef struct header_cursor {
    const char *text;
    size_t len, pos;
} header_cursor;

static attn_status header_malformed(const header_cursor *c, const char *what) {
    return attn__fail(ATTN_ERR_FORMAT, "malformed header: %s at byte %zu of the header", what,
                     c->pos);
}

static void skip_space(header_cursor *c) {
    while (c->pos < c->len && (c->text[c->pos] == ' ' || c->text[c->pos] == '\t' ||
                               c->text[c->pos] == '\r' || c->text[c->pos] == '\n'))
        c->pos++;
}

/* Skips whitespace; consumes ch and returns true if it comes next. */
static bool accept_char(header_cursor *c, char ch) {
    skip_space(c);
    if (c->pos < c->len && c->text[c->pos] == ch) {
        c->pos++;
        return true;
    }
    return false;
}

/* A Python string literal in single or double quotes, without escapes (no
 * key or supported descr needs one).  *str points into the header. */
static attn_status parse_string(header_cursor *c, const char **str, size_t *len) {
    skip_space(c);
    if (c->pos >= c->len || (c->text[c->pos] != '\'' && c->text[c->pos] != '"'))
        return header_malformed(c, "expected a quoted string");
    char quote = c->text[c->pos++];
    size_t start = c->pos;
    while (c->pos < c->len && c->text[c->pos] != quote) {
        unsigned char ch = (unsigned char)c->text[c->pos];
        /* A line ends a Python string literal: the quote is missing. */
        if (ch == '\n' || ch == '\r') return header_malformed(c, "unterminated string");
        if (ch == '\\' || ch < 0x20) return header_malformed(c, "unsupported character in a string");
        c->pos++;
    }
    if (c->pos >= c->len) return header_malformed(c, "unterminated string");
    *str = c->text + start;
    *len = c->pos - start;
    c->pos++;
    return ATTN_OK;
}

/* Python's True or False, as a whole word. */
static attn_status parse_bool(header_cursor *c, bool *value) {
    skip_space(c);
    static const char *const words[2] = {"False", "True"};
    for (int w = 0; w < 2; w++) {
        size_t n = strlen(words[w]);
        if (c->len - c->pos >= n && memcmp(c->text + c->pos, words[w], n) == 0) {
            c->pos += n;
            *value = w == 1;
            return ATTN_OK;
        }
    }
    return header_malformed(c, "expected True or False for 'fortran_order'");
}

/* One non-negative decimal dimension; values beyond int64 are an overflow. */
static attn_status parse_dimension(header_cursor *c, int64_t *dim) {
    skip_space(c);
    if (c->pos < c->len && c->text[c->pos] == '-')
        return header_malformed(c, "negative dimension in 'shape'");
    if (c->pos >= c->len || c->text[c->pos] < '0' || c->text[c->pos] > '9')
        return header_malformed(c, "expected a non-negative integer in 'shape'");
    int64_t value = 0;
    while (c->pos < c->len && c->text[c->pos] >= '0' && c->text[c->pos] <= '9') {
        int digit = c->text[c->pos] - '0';
        if (value > (INT64_MAX - digit) / 10)
            return attn__fail(ATTN_ERR_OVERFLOW,
                             "shape dimension at byte %zu of the header exceeds the int64 range",
                             c->pos);
        value = value * 10 + digit;
        c->pos++;
    }
    *dim = value;
    return ATTN_OK;
}

/* A tuple of dimensions: (), (n,), (n, m), (n, m,) ...  A bare (n) is an
 * int in Python, not a tuple, and is refused. */
static attn_status parse_shape(header_cursor *c, int *ndim, int64_t *shape) {
    if (!accept_char(c, '(')) return header_malformed(c, "expected '(' to open 'shape'");
    *ndim = 0;
    if (accept_char(c, ')')) return ATTN_OK;
    for (;;) {
        if (*ndim == ATTN_MAX_DIMS)
            return attn__fail(ATTN_ERR_UNSUPPORTED,
                             "arrays of more than %d dimensions are not supported",
                             ATTN_MAX_DIMS);
        attn_status status = parse_dimension(c, &shape[*ndim]);
        if (status != ATTN_OK) return status;
        ++*ndim;
        if (accept_char(c, ',')) {
            if (accept_char(c, ')')) return ATTN_OK;
        } else if (accept_char(c, ')')) {
            if (*ndim == 1) return header_malformed(c, "'shape' (n) is not a tuple, expected (n,)");
            return ATTN_OK;
        } else {
            return header_malformed(c, "expected ',' or ')' in 'shape'");
        }
    }
}

/* The dtype a descr string names, and whether its bytes need swapping to
 * native order.  Accepted: an optional byte order ('<' little, '>' big,
 * '=' or '|' native) and one of f2 f4 f8 b1 i1 i2 i4 i8 u1 u2 u4 u8, or V2:
 * bfloat16, as ml_dtypes' arrays reach np.save ('<V2'), the convention
 * attn_io.h documents; or the name 'bfloat16' (native order). */
static attn_status descr_to_dtype(const char *descr, size_t len, attn_dtype *dtype, bool *swap) {
    if (len == 8 && memcmp(descr, "bfloat16", 8) == 0) {
        *dtype = ATTN_BF16;
        *swap = false;
        return ATTN_OK;
    }
    static const struct {
        const char *code;
        attn_dtype dtype;
    } codes[] = {
        {"f2", ATTN_F16}, {"f4", ATTN_F32}, {"f8", ATTN_F64}, {"b1", ATTN_BOOL},
        {"i1", ATTN_I8},  {"i2", ATTN_I16}, {"i4", ATTN_I32}, {"i8", ATTN_I64},
        {"u1", ATTN_U8},  {"u2", ATTN_U16}, {"u4", ATTN_U32}, {"u8", ATTN_U64},
        {"V2", ATTN_BF16},
    };
    const char *code = descr;
    size_t code_len = len;
    char order = '=';
    if (code_len > 0 && (code[0] == '<' || code[0] == '>' || code[0] == '=' || code[0] == '|')) {
        order = code[0];
        code++;
        code_len--;
    }
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
        if (code_len == 2 && memcmp(code, codes[i].code, 2) == 0) {
            bool little = host_is_little_endian();
            *dtype = codes[i].dtype;
            *swap = attn_dtype_size(*dtype) > 1 &&
                    ((order == '<' && !little) || (order == '>' && little));
            return ATTN_OK;
        }
    }
    return attn__fail(ATTN_ERR_UNSUPPORTED,
                     "dtype '%.*s' is not supported (supported: float16, float32, float64, "
                     "bfloat16 as '<V2' or 'bfloat16', bool, int8..int64, uint8..uint64)",
                     (int)(len > 40 ? 40 : len), descr);
}

typedef struct npy_header {
    attn_dtype dtype;
    bool swap;
    bool fortran_order;
    int ndim;
    int64_t shape[ATTN_MAX_DIMS];
} npy_header;

/* Parses the dict literal strictly: exactly the keys 'descr',
 * 'fortran_order' and 'shape', each once, in any order, with any whitespace
 * and an optional trailing comma; only whitespace may follow the '}'. */
static attn_status parse_header(const char *text, size_t len, npy_header *h) {
    header_cursor c = {text, len, 0};
    bool have_descr = false, have_fortran = false, have_shape = false;
    attn_status status = ATTN_OK;

    if (!accept_char(&c, '{')) return header_malformed(&c, "expected '{'");
    while (!accept_char(&c, '}')) {
        const char *key;
        size_t key_len;
        if ((status = parse_string(&c, &key, &key_len)) != ATTN_OK) return status;
        if (!accept_char(&c, ':')) return header_malformed(&c, "expected ':' after a key");

        bool *seen;
        if (key_len == 5 && memcmp(key, "descr", 5) == 0) {
            seen = &have_descr;
            skip_space(&c);
            if (c.pos < c.len && c.text[c.pos] == '[')
                return attn__fail(ATTN_ERR_UNSUPPORTED,
                                 "structured dtypes (a list of fields in 'descr') are not "
                                 "supported");
            const char *descr;
            size_t descr_len;
            if ((status = parse_string(&c, &descr, &descr_len)) != ATTN_OK) return status;
            status = descr_to_dtype(descr, descr_len, &h->dtype, &h->swap);
        } else if (key_len == 13 && memcmp(key, "fortran_order", 13) == 0) {
            seen = &have_fortran;
            status = parse_bool(&c, &h->fortran_order);
        } else if (key_len == 5 && memcmp(key, "shape", 5) == 0) {
            seen = &have_shape;
            status = parse_shape(&c, &h->ndim, h->shape);
        } else {
            return attn__fail(ATTN_ERR_FORMAT,
                             "malformed header: unknown key '%.*s' (expected 'descr', "
                             "'fortran_order' and 'shape')",
                             (int)(key_len > 40 ? 40 : key_len), key);
        }
        if (status != ATTN_OK) return status;
        if (*seen)
            return attn__fail(ATTN_ERR_FORMAT, "malformed header: key '%.*s' appears twice",
                             (int)key_len, key);
        *seen = true;

        if (!accept_char(&c, ',')) {
            if (accept_char(&c, '}')) break;
            return header_malformed(&c, "expected ',' or '}'");
        }
    }
    skip_space(&c);
    if (c.pos != c.len) return header_malformed(&c, "unexpected text after the dictionary");
    if (!have_descr || !have_fortran || !have_shape)
        return attn__fail(ATTN_ERR_FORMAT, "malformed header: missing key '%s'",
                         !have_descr ? "descr" : !have_fortran ? "fortran_order" : "shape");
    if (h->fortran_order)
        return attn__fail(ATTN_ERR_UNSUPPORTED,
                         "Fortran order (fortran_order: True) is not supported; save the array "
                         "with np.save(path, np.ascontiguousarray(a))");
    return ATTN_OK;
}

/* ------------------------------------------------------------ parse, load */

/* Reverses the bytes of each of count elements of size bytes. */
static void swap_bytes(uint8_t *data, int64_t count, size_t size) {
    for (int64_t i = 0; i < count; i++, data += size)
        for (size_t lo = 0, hi = size - 1; lo < hi; lo++, hi--) {
            uint8_t t = data[lo];
            data[lo] = data[hi];
            data[hi] = t;
        }
}

attn_status attn__npy_parse_preamble(const void *buf, size_t size, size_t *data_offset) {
    const uint8_t *bytes = buf;
    size_t magic_seen = size < NPY_MAGIC_LEN ? size : NPY_MAGIC_LEN;
    /* np.savez writes a zip of .npy files: users hand those over for one. */
    if (size >= 4 && memcmp(bytes, "PK\x03\x04", 4) == 0)
        return attn__fail(ATTN_ERR_FORMAT, "not a .npy file: it is a zip archive (a .npz from np.savez?); "
                          "save the array it holds with np.save(path, np.load(npz)[name])");
    if (magic_seen > 0 && memcmp(bytes, NPY_MAGIC, magic_seen) != 0)
        return attn__fail(ATTN_ERR_FORMAT, "not a .npy file: it does not start with \\x93NUMPY");
    if (size < 8)
        return attn__fail(ATTN_ERR_FORMAT, "truncated: %zu bytes, a .npy preamble needs at least 10",
                         size);
    unsigned major = bytes[6], minor = bytes[7];
    if (major < 1 || major > 3 || minor != 0)
        return attn__fail(ATTN_ERR_UNSUPPORTED,
                         ".npy format version %u.%u is not supported (1.0, 2.0 and 3.0 are)", major,
                         minor);
    size_t preamble = major == 1 ? 10 : 12;
    if (size < preamble)
        return attn__fail(ATTN_ERR_FORMAT,
                         "truncated: %zu bytes, a version %u.0 preamble needs %zu", size, major,
                         preamble);
    uint32_t header_len = (uint32_t)bytes[8] | (uint32_t)bytes[9] << 8;
    if (major > 1) header_len |= (uint32_t)bytes[10] << 16 | (uint32_t)bytes[11] << 24;
    if (header_len > NPY_MAX_HEADER)
        return attn__fail(ATTN_ERR_FORMAT, "header of %lu bytes exceeds the limit of 1 MiB",
                         (unsigned long)header_len);
    *data_offset = preamble + header_len;
    return ATTN_OK;
}

attn_status attn__npy_parse_header_image(const void *buf, size_t size, npy_layout *layout) {
    const uint8_t *bytes = buf;
    size_t data_offset = 0;
    attn_status status = attn__npy_parse_preamble(buf, size, &data_offset);
    if (status != ATTN_OK) return status;
    size_t preamble = bytes[6] == 1 ? 10 : 12, header_len = data_offset - preamble;
    if (size - preamble < header_len)
        return attn__fail(ATTN_ERR_FORMAT, "truncated: the header needs %lu bytes, found %zu",
                         (unsigned long)header_len, size - preamble);

    npy_header h;
    status = parse_header((const char *)bytes + preamble, header_len, &h);
    if (status != ATTN_OK) return status;

    char shape_text[256];
    format_shape(shape_text, sizeof shape_text, h.ndim, h.shape);
    const int64_t elem = (int64_t)attn_dtype_size(h.dtype);
    int64_t count;
    if (!shape_elements(h.ndim, h.shape, elem, &count)) {
        int64_t elements;
        bool empty = false;
        for (int i = 0; i < h.ndim; i++) empty = empty || h.shape[i] == 0;
        return attn__fail(ATTN_ERR_OVERFLOW, "shape %s of %s: the %s overflows int64%s", shape_text,
                         attn_dtype_name(h.dtype),
                         shape_elements(h.ndim, h.shape, 1, &elements) ? "byte size" : "element count",
                         empty ? " (a zero dimension leaves no elements, but numpy refuses such a shape "
                                 "as \"array is too big\" too)" : "");
    }
    const int64_t data_bytes = count * elem;
    layout->dtype = h.dtype;
    layout->swap = h.swap;
    layout->ndim = h.ndim;
    memcpy(layout->shape, h.shape, sizeof h.shape);
    layout->count = count;
    layout->data_offset = data_offset;
    layout->data_bytes = data_bytes;
    return ATTN_OK;
}

void attn__npy_to_native(const npy_layout *layout, void *data, int64_t count) {
    if (layout->swap) swap_bytes(data, count, attn_dtype_size(layout->dtype));
    if (layout->dtype == ATTN_BOOL)
        for (int64_t i = 0; i < count; i++) ((uint8_t *)data)[i] = ((uint8_t *)data)[i] != 0;
}

/* Every size is checked against the buffer before anything is allocated, so
 * a tiny file declaring a huge shape costs nothing.  Bool elements are
 * normalised to 0 or 1. */
attn_status attn_npy_parse(const void *buf, size_t size, attn_array *out) {
    if (!out) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_npy_parse: out is NULL");
    memset(out, 0, sizeof *out);
    if (!buf && size > 0) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_npy_parse: buf is NULL");
    const uint8_t *bytes = buf;
    npy_layout h;
    attn_status status = attn__npy_parse_header_image(buf, size, &h);
    if (status != ATTN_OK) return status;
    char shape_text[256];
    format_shape(shape_text, sizeof shape_text, h.ndim, h.shape);
    const int64_t data_bytes = h.data_bytes;

    size_t found = size - h.data_offset;
    if ((uint64_t)data_bytes > (uint64_t)found)
        return attn__fail(ATTN_ERR_FORMAT,
                         "truncated: expected %lld bytes of data, found %zu (shape %s of %s)",
                         (long long)data_bytes, found, shape_text, attn_dtype_name(h.dtype));
    if ((uint64_t)data_bytes < (uint64_t)found)
        return attn__fail(ATTN_ERR_FORMAT,
                         "trailing data: expected %lld bytes of data, found %zu (shape %s of %s)",
                         (long long)data_bytes, found, shape_text, attn_dtype_name(h.dtype));

    if ((status = attn__array_alloc_for_reading(out, h.dtype, h.ndim, h.shape)) != ATTN_OK) return status;
    memcpy(out->data, bytes + h.data_offset, (size_t)data_bytes);
    attn__npy_to_native(&h, out->data, h.count);
    return ATTN_OK;
}

attn_status attn_npy_parse_header(const void *buf, size_t size, attn_array *shape_only, size_t *data_offset) {
    if (!shape_only) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_npy_parse_header: shape_only is NULL");
    memset(shape_only, 0, sizeof *shape_only);
    if (!buf && size > 0) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_npy_parse_header: buf is NULL");
    npy_layout h;
    const attn_status status = attn__npy_parse_header_image(buf, size, &h);
    if (status != ATTN_OK) return status;
    npy_layout_answer(&h, shape_only, data_offset);
    return ATTN_OK;
}

/* ------------------------------------------------------- serialise, save */

/* Checks that *a is a well-formed array (the caller may have filled it by
 * hand) and returns its data size in bytes. */
static attn_status check_array(const attn_array *a, int64_t *data_bytes) {
    if (!a) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "array is NULL");
    size_t elem = attn_dtype_size(a->dtype);
    if (elem == 0) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "invalid dtype %d", (int)a->dtype);
    if (a->ndim < 0 || a->ndim > ATTN_MAX_DIMS)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "ndim = %d, must be between 0 and %d",
                         a->ndim, ATTN_MAX_DIMS);
    int64_t count;
    if (!shape_elements(a->ndim, a->shape, (int64_t)elem, &count))
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT,
                         "a dimension of the shape is negative or the byte size of its non-zero "
                         "dimensions overflows int64");
    if (count != a->count)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT,
                         "count = %lld does not match the product of the shape, %lld",
                         (long long)a->count, (long long)count);
    *data_bytes = count * (int64_t)elem;
    if ((uint64_t)*data_bytes > SIZE_MAX)
        return attn__fail(ATTN_ERR_OVERFLOW, "the byte size of %lld elements overflows",
                         (long long)count);
    if (!a->data) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "data is NULL");
    return ATTN_OK;
}

/* Writes the header exactly as numpy.save does: the dict, then 1..64 spaces
 * and '\n' so that the data starts at a multiple of 64 bytes. */
size_t attn__npy_format_header(attn_dtype dtype, int ndim, const int64_t *shape,
                         uint8_t header[NPY_HEADER_CAP]) {
    size_t elem = attn_dtype_size(dtype);
    char order = elem == 1 ? '|' : host_is_little_endian() ? '<' : '>';
    /* bfloat16 as ml_dtypes' arrays are saved: '<V2' (attn_io.h). */
    const char *code = dtype == ATTN_F16 || dtype == ATTN_F32 || dtype == ATTN_F64 ? "f"
                       : dtype == ATTN_BF16                                        ? "V"
                       : dtype == ATTN_BOOL                                        ? "b"
                       : dtype >= ATTN_U8                                          ? "u"
                                                                                   : "i";
    char shape_text[256], dict[400];
    format_shape(shape_text, sizeof shape_text, ndim, shape);
    size_t dict_len = (size_t)snprintf(dict, sizeof dict,
                                       "{'descr': '%c%s%zu', 'fortran_order': False, 'shape': %s, }",
                                       order, code, elem, shape_text);

    /* Version 2.0 only when the padded header outgrows the 2-byte length
     * field, which ATTN_MAX_DIMS keeps from ever happening today. */
    size_t preamble = 10;
    size_t pad = NPY_ALIGN - (preamble + dict_len + 1) % NPY_ALIGN;
    if (dict_len + pad + 1 > 65535) {
        preamble = 12;
        pad = NPY_ALIGN - (preamble + dict_len + 1) % NPY_ALIGN;
    }
    size_t header_len = dict_len + pad + 1;
    memcpy(header, NPY_MAGIC, NPY_MAGIC_LEN);
    header[6] = preamble == 10 ? 1 : 2;
    header[7] = 0;
    for (size_t i = 0; i < preamble - 8; i++) header[8 + i] = (uint8_t)(header_len >> (8 * i));
    memcpy(header + preamble, dict, dict_len);
    memset(header + preamble + dict_len, ' ', pad);
    header[preamble + header_len - 1] = '\n';
    return preamble + header_len;
}

/* The image is attn__npy_format_header's bytes followed by the data. */
attn_status attn_npy_serialize(const attn_array *a, void **buf, size_t *size) {
    if (!buf || !size)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_npy_serialize: buf or size is NULL");
    *buf = NULL;
    *size = 0;
    int64_t data_bytes;
    attn_status status = check_array(a, &data_bytes);
    if (status != ATTN_OK) return status;

    uint8_t header[NPY_HEADER_CAP];
    size_t header_size = attn__npy_format_header(a->dtype, a->ndim, a->shape, header);
    size_t total = header_size + (size_t)data_bytes;
    if (total < (size_t)data_bytes)
        return attn__fail(ATTN_ERR_OVERFLOW, "attn_npy_serialize: the file size overflows");
    uint8_t *image = malloc(total);
    if (!image)
        return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "attn_npy_serialize: cannot allocate %zu bytes",
                         total);
    memcpy(image, header, header_size);
    memcpy(image + header_size, a->data, (size_t)data_bytes);
    *buf = image;
    *size = total;
    return ATTN_OK;
}

attn_status attn_npy_save(const char *path, const attn_array *a) {
    if (!path) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_npy_save: path is NULL");
    int64_t data_bytes;
    attn_status status = check_array(a, &data_bytes);
    if (status != ATTN_OK) return npy_fail_with_path(status, path);
    uint8_t header[NPY_HEADER_CAP];
    const size_t header_size = attn__npy_format_header(a->dtype, a->ndim, a->shape, header);
    attn_output *out;
    if ((status = attn_output_open(path, &out))) return status;
    if ((status = attn_output_write(out, header, header_size)) ||
        (status = attn_output_write(out, a->data, (size_t)data_bytes))) {
        attn_output_discard(out);
        return status;
    }
    return attn_output_commit(out);
}
