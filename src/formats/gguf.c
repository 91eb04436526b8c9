/*
 * gguf.c — the GGUF parser (from memory) and its lookups: the header, the
 * metadata key/values, the tensor infos, and the checks that make every
 * later read of the buffer safe (include/attn_gguf.h lists them); rows of
 * a tensor converted to float32 by the types' table (gguf_dequant.c, below
 * it).  The file wrapper, gguf_file.c, sits above: it maps, this parses.
 *
 * Layout (little-endian, packed):
 *   "GGUF" | version u32 | n_tensors u64 | n_kv u64
 *   n_kv x      key: string | type u32 | value
 *   n_tensors x name: string | n_dims u32 | dims u64[n_dims] | type u32 | offset u64
 *   padding to general.alignment | tensor data (offsets relative to its start)
 * where string = length u64 | bytes, and an array value is
 *   element type u32 | count u64 | count elements (nested arrays recurse).
 *
 * The rule that keeps a hostile file harmless: a length or count read from
 * the file is compared with the bytes that remain before it is used, as a
 * division (count > remaining / element_size), so that no product of
 * attacker-chosen numbers is ever formed unchecked; every table allocated
 * is bounded by the file's size that way.
 */
#include "formats/gguf.h"

#include "formats/gguf_dequant.h"
#include "formats/quote.h"

#include <stdarg.h>
#include <stdlib.h>

/* A cursor over the buffer.  what names the part being read ("key
 * 'general.name'", "tensor 3 of 291") for the messages. */
typedef struct reader {
    const uint8_t *base;
    uint64_t size, pos;
    char what[128];
} reader;

static uint64_t remaining(const reader *r) { return r->size - r->pos; }

/* "<what>: <message> (at byte N)" */
static attn_status reader_fail(const reader *r, attn_status status, const char *fmt, ...) ATTN_PRINTF(3, 4);
static attn_status reader_fail(const reader *r, attn_status status, const char *fmt, ...) {
    char message[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    return attn__fail(status, "%s: %s (at byte %llu)", r->what, message, (unsigned long long)r->pos);
}

/* n more bytes, or a truncation naming the field that needed them. */
static attn_status need(const reader *r, uint64_t n, const char *field) {
    if (n <= remaining(r)) return ATTN_OK;
    return reader_fail(r, ATTN_ERR_FORMAT, "truncated: %s needs %llu bytes, the file ends %llu bytes later", field,
                       (unsigned long long)n, (unsigned long long)remaining(r));
}

static attn_status read_u32(reader *r, const char *field, uint32_t *v) {
    attn_status st = need(r, 4, field);
    if (st != ATTN_OK) return st;
    *v = gguf_u32(r->base + r->pos);
    r->pos += 4;
    return ATTN_OK;
}

static attn_status read_u64(reader *r, const char *field, uint64_t *v) {
    attn_status st = need(r, 8, field);
    if (st != ATTN_OK) return st;
    *v = gguf_u64(r->base + r->pos);
    r->pos += 8;
    return ATTN_OK;
}

/* A string's bytes (in the buffer) and length. */
static attn_status read_string(reader *r, const char *field, const uint8_t **bytes, uint64_t *len) {
    attn_status st = read_u64(r, field, len);
    if (st != ATTN_OK) return st;
    if (*len > remaining(r)) {
        r->pos -= 8; /* point at the length that lies */
        return reader_fail(r, ATTN_ERR_FORMAT, "%s: its length %llu runs past the end of the file (%llu bytes left)",
                           field, (unsigned long long)*len, (unsigned long long)(remaining(r) - 8));
    }
    *bytes = r->base + r->pos;
    r->pos += *len;
    return ATTN_OK;
}

/* ----------------------------------------------------------------- values */

static const char *const value_type_names[] = {"uint8", "int8",  "uint16", "int16", "uint32", "int32", "float32",
                                               "bool",  "string", "array", "uint64", "int64", "float64"};
#define N_VALUE_TYPES 13
/* Bytes of a fixed-size value; 0 for strings and arrays. */
static const uint8_t value_type_size[N_VALUE_TYPES] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

const char *attn_gguf_value_type_name(attn_gguf_value_type type) {
    return (unsigned)type < N_VALUE_TYPES ? value_type_names[type] : NULL;
}

/* The fewest bytes a value of type takes: an element count claimed for an
 * array is checked against remaining / this. */
static uint64_t min_value_bytes(uint32_t type) {
    return type == ATTN_GGUF_VALUE_STRING ? 8 : type == ATTN_GGUF_VALUE_ARRAY ? 12 : value_type_size[type];
}

/* Reads one value of type at the cursor, checking everything in it, and
 * describes it in *v (NULL: only checked).  depth counts the arrays around
 * it. */
static attn_status parse_value(reader *r, uint32_t type, int depth, attn_gguf_value *v) {
    if (type >= N_VALUE_TYPES) return reader_fail(r, ATTN_ERR_FORMAT, "unknown value type %u", type);
    attn_gguf_value val = {.type = (attn_gguf_value_type)type, .elem_type = (attn_gguf_value_type)type, .count = 1};
    attn_status st;
    if (type == ATTN_GGUF_VALUE_STRING) {
        const uint8_t *bytes = NULL;
        st = read_string(r, "the string", &bytes, &val.count);
        if (st != ATTN_OK) return st;
        val.data = bytes;
        val.size = val.count;
    } else if (type != ATTN_GGUF_VALUE_ARRAY) {
        st = need(r, value_type_size[type], value_type_names[type]);
        if (st != ATTN_OK) return st;
        val.data = r->base + r->pos;
        val.size = value_type_size[type];
        if (type == ATTN_GGUF_VALUE_BOOL && r->base[r->pos] > 1)
            return reader_fail(r, ATTN_ERR_FORMAT, "a bool holds %u (a bool is 0 or 1)", r->base[r->pos]);
        r->pos += val.size;
    } else {
        if (depth >= GGUF_MAX_ARRAY_DEPTH)
            return reader_fail(r, ATTN_ERR_UNSUPPORTED, "arrays nested more than %d deep", GGUF_MAX_ARRAY_DEPTH);
        uint32_t elem;
        st = read_u32(r, "the array's element type", &elem);
        if (st != ATTN_OK) return st;
        if (elem >= N_VALUE_TYPES) {
            r->pos -= 4;
            return reader_fail(r, ATTN_ERR_FORMAT, "an array of unknown value type %u", elem);
        }
        st = read_u64(r, "the array's count", &val.count);
        if (st != ATTN_OK) return st;
        val.elem_type = (attn_gguf_value_type)elem;
        const uint64_t least = min_value_bytes(elem);
        if (val.count > remaining(r) / least) {
            r->pos -= 8;
            return reader_fail(r, ATTN_ERR_FORMAT,
                               "an array of %llu %s elements (each at least %llu byte%s) runs past the end of the "
                               "file (%llu bytes left)", (unsigned long long)val.count, value_type_names[elem],
                               (unsigned long long)least, least == 1 ? "" : "s", (unsigned long long)(remaining(r) - 8));
        }
        const uint64_t start = r->pos;
        val.data = r->base + start;
        if (value_type_size[elem]) {
            val.size = val.count * value_type_size[elem]; /* <= remaining: checked above */
            if (elem == ATTN_GGUF_VALUE_BOOL)
                for (uint64_t i = 0; i < val.count; i++)
                    if (r->base[start + i] > 1) {
                        r->pos = start + i;
                        return reader_fail(r, ATTN_ERR_FORMAT, "element %llu of a bool array holds %u (a bool is 0 "
                                           "or 1)", (unsigned long long)i, r->base[start + i]);
                    }
            r->pos += val.size;
        } else {
            for (uint64_t i = 0; i < val.count; i++) {
                st = parse_value(r, elem, depth + 1, NULL);
                if (st != ATTN_OK) return st;
            }
            val.size = r->pos - start;
        }
    }
    if (v) *v = val;
    return ATTN_OK;
}

/* ------------------------------------------------------------------ names */

/* A key or a tensor name: 1 .. 65535 bytes, no NUL (they are handed out as
 * C strings). */
static attn_status check_name(const reader *r, const uint8_t *bytes, uint64_t len) {
    if (len == 0) return reader_fail(r, ATTN_ERR_FORMAT, "an empty name");
    if (len > GGUF_MAX_NAME_BYTES)
        return reader_fail(r, ATTN_ERR_FORMAT, "a name of %llu bytes (the format allows %d)", (unsigned long long)len,
                           GGUF_MAX_NAME_BYTES);
    if (memchr(bytes, 0, (size_t)len)) return reader_fail(r, ATTN_ERR_FORMAT, "a name holding a NUL byte");
    return ATTN_OK;
}

/* Copies n names (pointers into the buffer, with their lengths) into one
 * allocation, NUL-terminated, and points names[i] at the copies. */
static attn_status copy_names(const char **names, size_t stride, const uint64_t *lens, int64_t n, char **arena) {
    uint64_t total = 0;
    for (int64_t i = 0; i < n; i++) total += lens[i] + 1; /* each <= the file's size */
    *arena = malloc(total ? (size_t)total : 1);
    if (!*arena) return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "cannot allocate %llu bytes of names",
                                   (unsigned long long)total);
    char *at = *arena;
    for (int64_t i = 0; i < n; i++) {
        const char **name = (const char **)(void *)((char *)names + (size_t)i * stride);
        memcpy(at, *name, (size_t)lens[i]);
        at[lens[i]] = 0;
        *name = at;
        at += lens[i] + 1;
    }
    return ATTN_OK;
}

static int compare_kv_keys(const void *a, const void *b) {
    return strcmp((*(const gguf_kv *const *)a)->key, (*(const gguf_kv *const *)b)->key);
}
static int compare_tensor_names(const void *a, const void *b) {
    return strcmp((*(const attn_gguf_tensor *const *)a)->name, (*(const attn_gguf_tensor *const *)b)->name);
}
static int compare_tensor_offsets(const void *a, const void *b) {
    uint64_t x = (*(const attn_gguf_tensor *const *)a)->offset, y = (*(const attn_gguf_tensor *const *)b)->offset;
    return x < y ? -1 : x > y;
}
static int find_kv_key(const void *key, const void *elem) {
    return strcmp(key, (*(const gguf_kv *const *)elem)->key);
}
static int find_tensor_name(const void *name, const void *elem) {
    return strcmp(name, (*(const attn_gguf_tensor *const *)elem)->name);
}

/* ----------------------------------------------------------------- parsing */

/* The fewest bytes of a key/value pair (a 1-byte key, a 1-byte value) and
 * of a tensor info (a 1-byte name, one dimension): claimed counts are
 * checked against remaining / these before anything is allocated. */
#define MIN_KV_BYTES (8 + 1 + 4 + 1)
#define MIN_TENSOR_INFO_BYTES (8 + 1 + 4 + 8 + 4 + 8)

static attn_status parse_header(attn_gguf *g, reader *r, uint64_t *n_tensors, uint64_t *n_kv) {
    snprintf(r->what, sizeof r->what, "the header");
    const size_t magic_len = g->size < 4 ? g->size : 4;
    if (g->size == 0) return attn__fail(ATTN_ERR_FORMAT, "truncated: 0 bytes (a GGUF file starts with 'GGUF')");
    if (memcmp(g->base, "GGUF", magic_len) != 0) {
        char start[64];
        return attn__fail(ATTN_ERR_FORMAT, "not a GGUF file: it starts with '%s', not 'GGUF'",
                          attn__quote(g->base, magic_len, start, sizeof start));
    }
    attn_status st = need(r, 4, "the magic 'GGUF'");
    if (st != ATTN_OK) return st;
    r->pos = 4;
    st = read_u32(r, "the version", &g->version);
    if (st != ATTN_OK) return st;
    const uint32_t v = g->version;
    const uint32_t swapped = (v >> 24) | ((v >> 8) & 0xFF00u) | ((v << 8) & 0xFF0000u) | (v << 24);
    if (v == 1)
        return attn__fail(ATTN_ERR_UNSUPPORTED, "GGUF version 1 is not supported (it had 32-bit counts; versions 2 "
                          "and 3 are read): convert the model again with a current llama.cpp");
    if ((v & 0xFFFFu) == 0 && (swapped == 2 || swapped == 3))
        return attn__fail(ATTN_ERR_UNSUPPORTED, "a big-endian GGUF file (version %u, byte-swapped): only "
                          "little-endian files are read", swapped);
    if (v != 2 && v != 3)
        return attn__fail(ATTN_ERR_UNSUPPORTED, "GGUF version %u is not supported (versions 2 and 3 are)", v);
    st = read_u64(r, "the tensor count", n_tensors);
    if (st == ATTN_OK) st = read_u64(r, "the key count", n_kv);
    if (st != ATTN_OK) return st;
    if (*n_kv > remaining(r) / MIN_KV_BYTES)
        return attn__fail(ATTN_ERR_FORMAT, "the header claims %llu metadata keys; the %llu bytes after it hold at "
                          "most %llu (the file is truncated, or the count is wrong)", (unsigned long long)*n_kv,
                          (unsigned long long)remaining(r), (unsigned long long)(remaining(r) / MIN_KV_BYTES));
    if (*n_tensors > remaining(r) / MIN_TENSOR_INFO_BYTES)
        return attn__fail(ATTN_ERR_FORMAT, "the header claims %llu tensors; the %llu bytes after it hold at most %llu "
                          "(the file is truncated, or the count is wrong)", (unsigned long long)*n_tensors,
                          (unsigned long long)remaining(r), (unsigned long long)(remaining(r) / MIN_TENSOR_INFO_BYTES));
    return ATTN_OK;
}

static attn_status parse_metadata(attn_gguf *g, reader *r) {
    uint64_t *lens = malloc((size_t)(g->n_kv ? g->n_kv : 1) * sizeof *lens);
    g->kv = calloc((size_t)(g->n_kv ? g->n_kv : 1), sizeof *g->kv);
    if (!lens || !g->kv) {
        free(lens);
        return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "cannot allocate the table of %lld keys", (long long)g->n_kv);
    }
    attn_status st = ATTN_OK;
    for (int64_t i = 0; i < g->n_kv && st == ATTN_OK; i++) {
        snprintf(r->what, sizeof r->what, "key %lld of %lld", (long long)i + 1, (long long)g->n_kv);
        const uint8_t *key = NULL;
        st = read_string(r, "its name", &key, &lens[i]);
        if (st == ATTN_OK) st = check_name(r, key, lens[i]);
        if (st != ATTN_OK) break;
        char quoted[256];
        snprintf(r->what, sizeof r->what, "key '%s'", attn__quote(key, lens[i], quoted, sizeof quoted));
        g->kv[i].key = (const char *)key;
        uint32_t type;
        st = read_u32(r, "its value type", &type);
        if (st == ATTN_OK && type >= N_VALUE_TYPES) {
            r->pos -= 4;
            st = reader_fail(r, ATTN_ERR_FORMAT, "unknown value type %u", type);
        }
        if (st == ATTN_OK) st = parse_value(r, type, 0, &g->kv[i].value);
    }
    if (st == ATTN_OK) st = copy_names(&g->kv[0].key, sizeof g->kv[0], lens, g->n_kv, &g->key_names);
    free(lens);
    if (st != ATTN_OK) return st;

    g->kv_by_key = malloc((size_t)(g->n_kv ? g->n_kv : 1) * sizeof *g->kv_by_key);
    if (!g->kv_by_key) return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "cannot allocate the index of %lld keys",
                                         (long long)g->n_kv);
    for (int64_t i = 0; i < g->n_kv; i++) g->kv_by_key[i] = &g->kv[i];
    qsort(g->kv_by_key, (size_t)g->n_kv, sizeof *g->kv_by_key, compare_kv_keys);
    for (int64_t i = 1; i < g->n_kv; i++)
        if (strcmp(g->kv_by_key[i - 1]->key, g->kv_by_key[i]->key) == 0) {
            const int64_t a = g->kv_by_key[i - 1] - g->kv, b = g->kv_by_key[i] - g->kv;
            char quoted[256];
            return attn__fail(ATTN_ERR_FORMAT, "key '%s' appears twice (keys %lld and %lld)",
                              attn__quote(g->kv_by_key[i]->key, strlen(g->kv_by_key[i]->key), quoted,
                                               sizeof quoted),
                              (long long)(a < b ? a : b) + 1, (long long)(a < b ? b : a) + 1);
        }
    return ATTN_OK;
}

/* general.alignment: a uint32, a power of two (gguf-py and ggml require
 * both). */
static attn_status parse_alignment(attn_gguf *g) {
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    const int64_t i = attn_gguf_key_index(g, "general.alignment");
    if (i < 0) return ATTN_OK;
    const attn_gguf_value *v = &g->kv[i].value;
    if (v->type != ATTN_GGUF_VALUE_UINT32)
        return attn__fail(ATTN_ERR_FORMAT, "key 'general.alignment' is a %s; it must be a uint32",
                          value_type_names[v->type]);
    const uint32_t a = gguf_u32(v->data);
    if (a == 0 || (a & (a - 1)) != 0)
        return attn__fail(ATTN_ERR_FORMAT, "key 'general.alignment' is %u; it must be a power of two", a);
    g->alignment = a;
    return ATTN_OK;
}

/* One tensor info: name, dims, type and offset (relative to the data
 * section, made absolute by check_tensor_data). */
static attn_status parse_tensor_info(reader *r, attn_gguf_tensor *t, uint64_t *name_len) {
    const uint8_t *name = NULL;
    attn_status st = read_string(r, "its name", &name, name_len);
    if (st == ATTN_OK) st = check_name(r, name, *name_len);
    if (st != ATTN_OK) return st;
    t->name = (const char *)name;
    char quoted[256];
    snprintf(r->what, sizeof r->what, "tensor '%s'", attn__quote(name, *name_len, quoted, sizeof quoted));
    uint32_t n_dims;
    st = read_u32(r, "its number of dimensions", &n_dims);
    if (st != ATTN_OK) return st;
    if (n_dims < 1 || n_dims > 4) {
        r->pos -= 4;
        return reader_fail(r, ATTN_ERR_FORMAT, "%u dimensions (a GGUF tensor has 1 to 4)", n_dims);
    }
    t->n_dims = (int)n_dims;
    t->n_elements = 1;
    for (int d = 0; d < 4; d++) t->dims[d] = 1;
    for (int d = 0; d < t->n_dims; d++) {
        uint64_t dim;
        st = read_u64(r, "its dimensions", &dim);
        if (st != ATTN_OK) return st;
        r->pos -= 8;
        if (dim == 0) return reader_fail(r, ATTN_ERR_FORMAT, "dimension %d is 0 (every dimension is at least 1)", d);
        if (dim > (uint64_t)INT64_MAX)
            return reader_fail(r, ATTN_ERR_OVERFLOW, "dimension %d is %llu, past the int64 range", d,
                               (unsigned long long)dim);
        t->dims[d] = (int64_t)dim;
        if (mul_overflows(t->n_elements, t->dims[d], &t->n_elements))
            return reader_fail(r, ATTN_ERR_OVERFLOW, "dimensions %lld x %lld x %lld x %lld: the element count "
                               "overflows int64", (long long)t->dims[0], (long long)t->dims[1], (long long)t->dims[2],
                               (long long)t->dims[3]);
        r->pos += 8;
    }
    uint32_t type;
    st = read_u32(r, "its type", &type);
    if (st != ATTN_OK) return st;
    const gguf_type_traits *traits = attn__gguf_type_traits(type);
    if (!traits) {
        r->pos -= 4;
        return reader_fail(r, ATTN_ERR_FORMAT, "unknown tensor type %u", type);
    }
    t->type = (attn_gguf_tensor_type)type;
    if (t->dims[0] % traits->block_elements != 0)
        return reader_fail(r, ATTN_ERR_FORMAT, "rows of %lld elements are not whole %s blocks (%lld elements each)",
                           (long long)t->dims[0], traits->name, (long long)traits->block_elements);
    t->n_rows = t->n_elements / t->dims[0];
    if (__builtin_mul_overflow((uint64_t)(t->dims[0] / traits->block_elements), (uint64_t)traits->block_bytes,
                               &t->row_bytes) ||
        __builtin_mul_overflow(t->row_bytes, (uint64_t)t->n_rows, &t->n_bytes))
        return reader_fail(r, ATTN_ERR_OVERFLOW, "%lld elements of %s: the byte size overflows 64 bits",
                           (long long)t->n_elements, traits->name);
    return read_u64(r, "its offset", &t->offset);
}

/* Every tensor's bytes lie within the data section, at a multiple of the
 * alignment, and no two overlap. */
static attn_status check_tensor_data(attn_gguf *g) {
    const uint64_t avail = g->size - g->data_offset;
    for (int64_t i = 0; i < g->n_tensors; i++) {
        attn_gguf_tensor *t = &g->tensors[i];
        char quoted[256];
        attn__quote(t->name, strlen(t->name), quoted, sizeof quoted);
        if (t->offset % g->alignment != 0)
            return attn__fail(ATTN_ERR_FORMAT, "tensor '%s': its offset %llu is not a multiple of the alignment %llu",
                              quoted, (unsigned long long)t->offset, (unsigned long long)g->alignment);
        if (t->offset > avail || t->n_bytes > avail - t->offset)
            return attn__fail(ATTN_ERR_FORMAT, "tensor '%s': its %llu bytes at offset %llu of the data section "
                              "(which starts at byte %llu) run past the end of the file (%llu bytes)", quoted,
                              (unsigned long long)t->n_bytes, (unsigned long long)t->offset,
                              (unsigned long long)g->data_offset, (unsigned long long)g->size);
        t->offset += g->data_offset;
        t->data = g->base + t->offset;
    }
    if (g->n_tensors < 2) return ATTN_OK;
    const attn_gguf_tensor **by_offset = malloc((size_t)g->n_tensors * sizeof *by_offset);
    if (!by_offset) return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "cannot sort %lld tensors", (long long)g->n_tensors);
    for (int64_t i = 0; i < g->n_tensors; i++) by_offset[i] = &g->tensors[i];
    qsort(by_offset, (size_t)g->n_tensors, sizeof *by_offset, compare_tensor_offsets);
    attn_status st = ATTN_OK;
    for (int64_t i = 1; i < g->n_tensors && st == ATTN_OK; i++) {
        const attn_gguf_tensor *a = by_offset[i - 1], *b = by_offset[i];
        if (a->offset + a->n_bytes > b->offset) {
            char qa[256], qb[256];
            st = attn__fail(ATTN_ERR_FORMAT, "tensors '%s' and '%s' overlap: '%s' holds bytes %llu .. %llu, '%s' "
                            "starts at byte %llu", attn__quote(a->name, strlen(a->name), qa, sizeof qa),
                            attn__quote(b->name, strlen(b->name), qb, sizeof qb), qa,
                            (unsigned long long)a->offset, (unsigned long long)(a->offset + a->n_bytes - 1), qb,
                            (unsigned long long)b->offset);
        }
    }
    free(by_offset);
    return st;
}

static attn_status parse_tensors(attn_gguf *g, reader *r) {
    snprintf(r->what, sizeof r->what, "the tensor infos");
    if ((uint64_t)g->n_tensors > remaining(r) / MIN_TENSOR_INFO_BYTES)
        return reader_fail(r, ATTN_ERR_FORMAT, "the header claims %lld tensors; the %llu bytes after the metadata "
                           "hold at most %llu (the file is truncated, or the count is wrong)", (long long)g->n_tensors,
                           (unsigned long long)remaining(r), (unsigned long long)(remaining(r) / MIN_TENSOR_INFO_BYTES));
    uint64_t *lens = malloc((size_t)(g->n_tensors ? g->n_tensors : 1) * sizeof *lens);
    g->tensors = calloc((size_t)(g->n_tensors ? g->n_tensors : 1), sizeof *g->tensors);
    if (!lens || !g->tensors) {
        free(lens);
        return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "cannot allocate the table of %lld tensors",
                          (long long)g->n_tensors);
    }
    attn_status st = ATTN_OK;
    for (int64_t i = 0; i < g->n_tensors && st == ATTN_OK; i++) {
        snprintf(r->what, sizeof r->what, "tensor %lld of %lld", (long long)i + 1, (long long)g->n_tensors);
        g->tensors[i].index = i;
        st = parse_tensor_info(r, &g->tensors[i], &lens[i]);
    }
    if (st == ATTN_OK)
        st = copy_names(&g->tensors[0].name, sizeof g->tensors[0], lens, g->n_tensors, &g->tensor_names);
    free(lens);
    if (st != ATTN_OK) return st;

    g->tensors_by_name = malloc((size_t)(g->n_tensors ? g->n_tensors : 1) * sizeof *g->tensors_by_name);
    if (!g->tensors_by_name)
        return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "cannot allocate the index of %lld tensors", (long long)g->n_tensors);
    for (int64_t i = 0; i < g->n_tensors; i++) g->tensors_by_name[i] = &g->tensors[i];
    qsort(g->tensors_by_name, (size_t)g->n_tensors, sizeof *g->tensors_by_name, compare_tensor_names);
    for (int64_t i = 1; i < g->n_tensors; i++)
        if (strcmp(g->tensors_by_name[i - 1]->name, g->tensors_by_name[i]->name) == 0) {
            const int64_t a = g->tensors_by_name[i - 1]->index, b = g->tensors_by_name[i]->index;
            char quoted[256];
            return attn__fail(ATTN_ERR_FORMAT, "two tensors are called '%s' (tensors %lld and %lld)",
                              attn__quote(g->tensors_by_name[i]->name, strlen(g->tensors_by_name[i]->name),
                                               quoted, sizeof quoted),
                              (long long)(a < b ? a : b) + 1, (long long)(a < b ? b : a) + 1);
        }

    /* The data section starts at the next multiple of the alignment; a
     * file without tensors may end before it (writers need not pad). */
    g->data_offset = (r->pos + g->alignment - 1) / g->alignment * g->alignment;
    if (g->data_offset > g->size) {
        if (g->n_tensors > 0)
            return attn__fail(ATTN_ERR_FORMAT, "truncated: the tensor data start at byte %llu (the tensor infos end "
                              "at byte %llu, aligned to %llu), past the end of the file (%zu bytes)",
                              (unsigned long long)g->data_offset, (unsigned long long)r->pos,
                              (unsigned long long)g->alignment, g->size);
        g->data_offset = g->size;
    }
    return check_tensor_data(g);
}

attn_status attn_gguf_parse(const void *buf, size_t size, attn_gguf **out) {
    if (!out) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_gguf_parse: out is NULL");
    *out = NULL;
    if (!buf && size) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_gguf_parse: buf is NULL");
    attn_gguf *g = calloc(1, sizeof *g);
    if (!g) return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "attn_gguf_parse: cannot allocate");
    g->base = buf ? buf : (const uint8_t *)"";
    g->size = size;
    reader r = {.base = g->base, .size = size};
    uint64_t n_tensors = 0, n_kv = 0;
    attn_status st = parse_header(g, &r, &n_tensors, &n_kv);
    /* Both counts are below size / 14 now: they fit int64 and size_t. */
    g->n_tensors = (int64_t)n_tensors;
    g->n_kv = (int64_t)n_kv;
    if (st == ATTN_OK) st = parse_metadata(g, &r);
    if (st == ATTN_OK) st = parse_alignment(g);
    if (st == ATTN_OK) st = parse_tensors(g, &r);
    if (st != ATTN_OK) {
        attn__gguf_free_tables(g);
        free(g);
        return st;
    }
    *out = g;
    return ATTN_OK;
}

void attn__gguf_free_tables(attn_gguf *g) {
    free(g->kv);
    free(g->kv_by_key);
    free(g->key_names);
    free(g->tensors);
    free(g->tensors_by_name);
    free(g->tensor_names);
}

void attn_gguf_describe(const attn_gguf *g, attn_gguf_info *info) {
    if (!info) return;
    memset(info, 0, sizeof *info);
    if (!g) return;
    info->version = g->version;
    info->n_keys = g->n_kv;
    info->n_tensors = g->n_tensors;
    info->alignment = g->alignment;
    info->data_offset = g->data_offset;
    info->size = g->size;
}

/* --------------------------------------------------------------- metadata */

int64_t attn_gguf_key_index(const attn_gguf *g, const char *key) {
    if (!g || !key || !g->kv_by_key) return -1;
    const gguf_kv *const *found = bsearch(key, g->kv_by_key, (size_t)g->n_kv, sizeof *g->kv_by_key, find_kv_key);
    return found ? *found - g->kv : -1;
}

attn_status attn_gguf_key_at(const attn_gguf *g, int64_t index, const char **key, attn_gguf_value *value) {
    if (!g) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_gguf_key_at: g is NULL");
    if (index < 0 || index >= g->n_kv)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_gguf_key_at: index %lld is not one of the %lld keys",
                          (long long)index, (long long)g->n_kv);
    if (key) *key = g->kv[index].key;
    if (value) *value = g->kv[index].value;
    return ATTN_OK;
}

attn_status attn_gguf_get_value(const attn_gguf *g, const char *key, attn_gguf_value *value) {
    if (!g || !key || !value)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_gguf_get_value: %s is NULL",
                          !g ? "g" : !key ? "key" : "value");
    const int64_t i = attn_gguf_key_index(g, key);
    if (i < 0) {
        char quoted[256];
        return attn__fail(ATTN_ERR_FORMAT, "no key '%s' in the file", attn__quote(key, strlen(key), quoted,
                                                                                         sizeof quoted));
    }
    *value = g->kv[i].value;
    return ATTN_OK;
}

/* An integer value as sign and magnitude; false when it is no integer. */
static bool value_integer(attn_gguf_value_type type, const uint8_t *p, bool *negative, uint64_t *magnitude) {
    int64_t s;
    switch (type) {
    case ATTN_GGUF_VALUE_UINT8: *negative = false; *magnitude = p[0]; return true;
    case ATTN_GGUF_VALUE_UINT16: *negative = false; *magnitude = gguf_u16(p); return true;
    case ATTN_GGUF_VALUE_UINT32: *negative = false; *magnitude = gguf_u32(p); return true;
    case ATTN_GGUF_VALUE_UINT64: *negative = false; *magnitude = gguf_u64(p); return true;
    case ATTN_GGUF_VALUE_INT8: s = (int8_t)p[0]; break;
    case ATTN_GGUF_VALUE_INT16: s = (int16_t)gguf_u16(p); break;
    case ATTN_GGUF_VALUE_INT32: s = (int32_t)gguf_u32(p); break;
    case ATTN_GGUF_VALUE_INT64: s = (int64_t)gguf_u64(p); break;
    default: return false;
    }
    *negative = s < 0;
    *magnitude = s < 0 ? (uint64_t)(-(s + 1)) + 1 : (uint64_t)s;
    return true;
}

/* key's value as an integer within [-(min_magnitude), max]: *negative and
 * *magnitude.  want names the getter's type for messages. */
static attn_status get_integer(const attn_gguf *g, const char *key, uint64_t min_magnitude, uint64_t max,
                               const char *want, bool *negative, uint64_t *magnitude) {
    attn_gguf_value v;
    attn_status st = attn_gguf_get_value(g, key, &v);
    if (st != ATTN_OK) return st;
    char quoted[256];
    attn__quote(key, strlen(key), quoted, sizeof quoted);
    if (!value_integer(v.type, v.data, negative, magnitude))
        return attn__fail(ATTN_ERR_FORMAT, "key '%s' is a %s, not an integer (read as %s)", quoted,
                          value_type_names[v.type], want);
    if (*negative ? *magnitude > min_magnitude : *magnitude > max)
        return attn__fail(ATTN_ERR_FORMAT, "key '%s' is %s%llu, outside the range of %s", quoted,
                          *negative ? "-" : "", (unsigned long long)*magnitude, want);
    return ATTN_OK;
}

static int64_t signed_of(bool negative, uint64_t magnitude) {
    return negative ? -(int64_t)(magnitude - 1) - 1 : (int64_t)magnitude;
}

attn_status attn_gguf_get_u32(const attn_gguf *g, const char *key, uint32_t *out) {
    bool negative;
    uint64_t magnitude;
    attn_status st = get_integer(g, key, 0, UINT32_MAX, "uint32", &negative, &magnitude);
    if (st == ATTN_OK && out) *out = (uint32_t)magnitude;
    return st;
}

attn_status attn_gguf_get_i32(const attn_gguf *g, const char *key, int32_t *out) {
    bool negative;
    uint64_t magnitude;
    attn_status st = get_integer(g, key, (uint64_t)INT32_MAX + 1, INT32_MAX, "int32", &negative, &magnitude);
    if (st == ATTN_OK && out) *out = (int32_t)signed_of(negative, magnitude);
    return st;
}

attn_status attn_gguf_get_u64(const attn_gguf *g, const char *key, uint64_t *out) {
    bool negative;
    uint64_t magnitude;
    attn_status st = get_integer(g, key, 0, UINT64_MAX, "uint64", &negative, &magnitude);
    if (st == ATTN_OK && out) *out = magnitude;
    return st;
}

attn_status attn_gguf_get_i64(const attn_gguf *g, const char *key, int64_t *out) {
    bool negative;
    uint64_t magnitude;
    attn_status st = get_integer(g, key, (uint64_t)INT64_MAX + 1, INT64_MAX, "int64", &negative, &magnitude);
    if (st == ATTN_OK && out) *out = signed_of(negative, magnitude);
    return st;
}

/* key's value, checked to be of type (two types accepted when other != type). */
static attn_status get_typed(const attn_gguf *g, const char *key, attn_gguf_value_type type,
                             attn_gguf_value_type other, attn_gguf_value *v) {
    attn_status st = attn_gguf_get_value(g, key, v);
    if (st != ATTN_OK) return st;
    if (v->type != type && v->type != other) {
        char quoted[256];
        return attn__fail(ATTN_ERR_FORMAT, "key '%s' is a %s, not a %s%s%s",
                          attn__quote(key, strlen(key), quoted, sizeof quoted), value_type_names[v->type],
                          value_type_names[type], other != type ? " or a " : "",
                          other != type ? value_type_names[other] : "");
    }
    return ATTN_OK;
}

static float f32_of(const uint8_t *p) {
    uint32_t bits = gguf_u32(p);
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static double f64_of(const uint8_t *p) {
    uint64_t bits = gguf_u64(p);
    double f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

attn_status attn_gguf_get_f32(const attn_gguf *g, const char *key, float *out) {
    attn_gguf_value v;
    attn_status st = get_typed(g, key, ATTN_GGUF_VALUE_FLOAT32, ATTN_GGUF_VALUE_FLOAT32, &v);
    if (st == ATTN_OK && out) *out = f32_of(v.data);
    return st;
}

attn_status attn_gguf_get_f64(const attn_gguf *g, const char *key, double *out) {
    attn_gguf_value v;
    attn_status st = get_typed(g, key, ATTN_GGUF_VALUE_FLOAT64, ATTN_GGUF_VALUE_FLOAT32, &v);
    if (st == ATTN_OK && out) *out = v.type == ATTN_GGUF_VALUE_FLOAT32 ? (double)f32_of(v.data) : f64_of(v.data);
    return st;
}

attn_status attn_gguf_get_bool(const attn_gguf *g, const char *key, int *out) {
    attn_gguf_value v;
    attn_status st = get_typed(g, key, ATTN_GGUF_VALUE_BOOL, ATTN_GGUF_VALUE_BOOL, &v);
    if (st == ATTN_OK && out) *out = *(const uint8_t *)v.data;
    return st;
}

attn_status attn_gguf_get_string(const attn_gguf *g, const char *key, const char **str, size_t *len) {
    attn_gguf_value v;
    attn_status st = get_typed(g, key, ATTN_GGUF_VALUE_STRING, ATTN_GGUF_VALUE_STRING, &v);
    if (st != ATTN_OK) return st;
    if (str) *str = v.data;
    if (len) *len = (size_t)v.size;
    return ATTN_OK;
}

attn_status attn_gguf_get_array(const attn_gguf *g, const char *key, int elem_type, attn_gguf_value *array) {
    attn_gguf_value v;
    attn_status st = get_typed(g, key, ATTN_GGUF_VALUE_ARRAY, ATTN_GGUF_VALUE_ARRAY, &v);
    if (st != ATTN_OK) return st;
    if (elem_type != -1 && (int)v.elem_type != elem_type) {
        char quoted[256];
        const char *want = attn_gguf_value_type_name((attn_gguf_value_type)elem_type);
        return attn__fail(ATTN_ERR_FORMAT, "key '%s' is an array of %s, not of %s",
                          attn__quote(key, strlen(key), quoted, sizeof quoted), value_type_names[v.elem_type],
                          want ? want : "(no such type)");
    }
    if (array) *array = v;
    return ATTN_OK;
}

/* Element i of a fixed-size array, or a message. */
static attn_status array_element(const attn_gguf_value *array, uint64_t i, const char *fn, const uint8_t **p) {
    if (!array || array->type != ATTN_GGUF_VALUE_ARRAY || (unsigned)array->elem_type >= N_VALUE_TYPES ||
        (!array->data && array->size))
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "%s: not an array value", fn);
    const unsigned esize = value_type_size[array->elem_type];
    if (esize == 0)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "%s: the elements are %ss: walk them with attn_gguf_array_next",
                          fn, value_type_names[array->elem_type]);
    if (i >= array->count || array->count > array->size / esize)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "%s: element %llu of an array of %llu", fn,
                          (unsigned long long)i, (unsigned long long)array->count);
    *p = (const uint8_t *)array->data + i * esize;
    return ATTN_OK;
}

attn_status attn_gguf_array_int(const attn_gguf_value *array, uint64_t i, int64_t *out) {
    const uint8_t *p = NULL;
    attn_status st = array_element(array, i, "attn_gguf_array_int", &p);
    if (st != ATTN_OK) return st;
    bool negative = false;
    uint64_t magnitude;
    if (array->elem_type == ATTN_GGUF_VALUE_BOOL)
        magnitude = p[0];
    else if (!value_integer(array->elem_type, p, &negative, &magnitude))
        return attn__fail(ATTN_ERR_FORMAT, "attn_gguf_array_int: the elements are %ss, not integers",
                          value_type_names[array->elem_type]);
    if (!negative && magnitude > INT64_MAX)
        return attn__fail(ATTN_ERR_FORMAT, "attn_gguf_array_int: element %llu is %llu, past the int64 range",
                          (unsigned long long)i, (unsigned long long)magnitude);
    if (out) *out = signed_of(negative, magnitude);
    return ATTN_OK;
}

attn_status attn_gguf_array_float(const attn_gguf_value *array, uint64_t i, double *out) {
    const uint8_t *p = NULL;
    attn_status st = array_element(array, i, "attn_gguf_array_float", &p);
    if (st != ATTN_OK) return st;
    if (array->elem_type != ATTN_GGUF_VALUE_FLOAT32 && array->elem_type != ATTN_GGUF_VALUE_FLOAT64)
        return attn__fail(ATTN_ERR_FORMAT, "attn_gguf_array_float: the elements are %ss, not floats",
                          value_type_names[array->elem_type]);
    if (out) *out = array->elem_type == ATTN_GGUF_VALUE_FLOAT32 ? (double)f32_of(p) : f64_of(p);
    return ATTN_OK;
}

attn_status attn_gguf_array_next(const attn_gguf_value *array, uint64_t *cursor, attn_gguf_value *element) {
    if (!array || !cursor || !element)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_gguf_array_next: %s is NULL",
                          !array ? "array" : !cursor ? "cursor" : "element");
    if (array->type != ATTN_GGUF_VALUE_ARRAY || (!array->data && array->size))
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_gguf_array_next: not an array value");
    if (*cursor >= array->size)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_gguf_array_next: past the last of %llu elements",
                          (unsigned long long)array->count);
    /* The array was checked when the file was parsed; the reader keeps to
     * its bytes all the same, so that a caller's made-up value cannot lead
     * it astray. */
    reader r = {.base = array->data, .size = array->size, .pos = *cursor};
    snprintf(r.what, sizeof r.what, "attn_gguf_array_next");
    attn_status st = parse_value(&r, (uint32_t)array->elem_type, 1, element);
    if (st == ATTN_OK) *cursor = r.pos;
    return st;
}

/* ---------------------------------------------------------------- tensors */

int64_t attn_gguf_tensor_index(const attn_gguf *g, const char *name) {
    if (!g || !name || !g->tensors_by_name) return -1;
    const attn_gguf_tensor *const *found =
        bsearch(name, g->tensors_by_name, (size_t)g->n_tensors, sizeof *g->tensors_by_name, find_tensor_name);
    return found ? (*found)->index : -1;
}

attn_status attn_gguf_tensor_at(const attn_gguf *g, int64_t index, attn_gguf_tensor *info) {
    if (!g || !info)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_gguf_tensor_at: %s is NULL", !g ? "g" : "info");
    if (index < 0 || index >= g->n_tensors)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_gguf_tensor_at: index %lld is not one of the %lld tensors",
                          (long long)index, (long long)g->n_tensors);
    *info = g->tensors[index];
    return ATTN_OK;
}

attn_status attn_gguf_find_tensor(const attn_gguf *g, const char *name, attn_gguf_tensor *info) {
    if (!g || !name || !info)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_gguf_find_tensor: %s is NULL",
                          !g ? "g" : !name ? "name" : "info");
    const int64_t i = attn_gguf_tensor_index(g, name);
    if (i < 0) {
        char quoted[256];
        return attn__fail(ATTN_ERR_FORMAT, "no tensor '%s' in the file",
                          attn__quote(name, strlen(name), quoted, sizeof quoted));
    }
    *info = g->tensors[i];
    return ATTN_OK;
}

/* ------------------------------------------------------------------ rows */

attn_status attn_gguf_dequantize_rows(const attn_gguf *g, const attn_gguf_tensor *tensor, int64_t first_row,
                                      int64_t count, float *out) {
    if (!g || !tensor)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_gguf_dequantize_rows: %s is NULL", !g ? "g" : "tensor");
    if (tensor->index < 0 || tensor->index >= g->n_tensors)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT,
                          "attn_gguf_dequantize_rows: tensor index %lld is not one of the file's %lld tensors",
                          (long long)tensor->index, (long long)g->n_tensors);
    const attn_gguf_tensor *t = &g->tensors[tensor->index];
    const gguf_type_traits *traits = attn__gguf_type_traits((uint32_t)t->type);
    if (!traits->dequantize)
        return attn__fail(ATTN_ERR_UNSUPPORTED, "tensor '%s' is of type %s, which attn does not convert (only "
                          GGUF_CONVERTED ")", t->name, traits->name);
    if (first_row < 0 || count < 0 || first_row > t->n_rows || count > t->n_rows - first_row)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT,
                          "attn_gguf_dequantize_rows: rows %lld .. %lld + %lld are not within tensor '%s' "
                          "(%lld rows)", (long long)first_row, (long long)first_row, (long long)count, t->name,
                          (long long)t->n_rows);
    if (count == 0) return ATTN_OK;
    if (!out) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_gguf_dequantize_rows: out is NULL");
    /* In the file: checked at parse time to lie within it. */
    const uint8_t *src = (const uint8_t *)t->data + (uint64_t)first_row * t->row_bytes;
    traits->dequantize(src, count * t->dims[0], out);
    return ATTN_OK;
}
