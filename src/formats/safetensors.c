/*
 * safetensors.c — the safetensors parser (from memory, the JSON header with
 * cJSON), its lookups and its conversion to float32 (attn_safetensors.h
 * lists the checks).
 *
 * Layout: N (u64 little-endian) | N bytes of JSON | data
 * where each tensor's data_offsets [BEGIN, END) are relative to the data
 * section's start, byte 8 + N of the file.
 *
 * The rule that keeps a hostile file harmless: N is compared with the
 * bytes that follow before the JSON is parsed (cJSON's allocations are then
 * bounded by a constant times N); every number taken from the JSON is
 * checked to be an exact non-negative integer before it is converted, the
 * shape product and its byte size are formed with overflow checks, and each
 * tensor's bytes are compared with its data_offsets and the data section
 * before any pointer into the data is formed.
 */
#include "formats/safetensors.h"

#include "base/dtype.h"
#include "formats/quote.h"

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdlib.h>

/* ------------------------------------------------------------------ dtypes */

static const struct {
    const char *name;
    int size;
} dtypes[] = {
    [ATTN_SAFETENSORS_BOOL] = {"BOOL", 1},       [ATTN_SAFETENSORS_U8] = {"U8", 1},
    [ATTN_SAFETENSORS_I8] = {"I8", 1},           [ATTN_SAFETENSORS_F8_E5M2] = {"F8_E5M2", 1},
    [ATTN_SAFETENSORS_F8_E4M3] = {"F8_E4M3", 1}, [ATTN_SAFETENSORS_F8_E8M0] = {"F8_E8M0", 1},
    [ATTN_SAFETENSORS_I16] = {"I16", 2},         [ATTN_SAFETENSORS_U16] = {"U16", 2},
    [ATTN_SAFETENSORS_F16] = {"F16", 2},         [ATTN_SAFETENSORS_BF16] = {"BF16", 2},
    [ATTN_SAFETENSORS_I32] = {"I32", 4},         [ATTN_SAFETENSORS_U32] = {"U32", 4},
    [ATTN_SAFETENSORS_F32] = {"F32", 4},         [ATTN_SAFETENSORS_F64] = {"F64", 8},
    [ATTN_SAFETENSORS_I64] = {"I64", 8},         [ATTN_SAFETENSORS_U64] = {"U64", 8},
    [ATTN_SAFETENSORS_C64] = {"C64", 8},
};
#define N_DTYPES ((int)(sizeof dtypes / sizeof dtypes[0]))

const char *attn_safetensors_dtype_name(attn_safetensors_dtype dtype) {
    return (unsigned)dtype < (unsigned)N_DTYPES ? dtypes[dtype].name : NULL;
}

int attn_safetensors_dtype_size(attn_safetensors_dtype dtype) {
    return (unsigned)dtype < (unsigned)N_DTYPES ? dtypes[dtype].size : 0;
}

/* --------------------------------------------------------------- messages */

/* A name (or any bytes) as printable text: attn__quote's rule. */
static const char *quote(const char *s, char *buf, size_t cap) { return attn__quote(s, strlen(s), buf, cap); }

/* The byte of the file where the header mentions "name" (the first time),
 * for messages about its entry; 0 when it is not found as written (a name
 * with escapes) or is longer than 256 bytes (a linear scan of a 100 MB
 * header comparing a huge name at every quote would be quadratic). */
static uint64_t entry_byte(const safetensors_shard *s, const char *name) {
    const size_t n = strlen(name);
    if (n > 256) return 0;
    const char *header = (const char *)s->base + 8;
    const size_t len = (size_t)(s->data_offset - 8);
    for (size_t i = 0; n + 2 <= len && i <= len - n - 2; i++)
        if (header[i] == '"' && memcmp(header + i + 1, name, n) == 0 && header[i + 1 + n] == '"') return 8 + i;
    return 0;
}

/* "<file>: tensor 'x' (its entry at byte P): <message>" */
static attn_status entry_fail(const safetensors_shard *s, const char *what, const char *name, attn_status status,
                              const char *fmt, ...) ATTN_PRINTF(5, 6);
static attn_status entry_fail(const safetensors_shard *s, const char *what, const char *name, attn_status status,
                              const char *fmt, ...) {
    char message[512], quoted[256], where[64] = "";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    const uint64_t at = entry_byte(s, name);
    if (at) snprintf(where, sizeof where, " (its entry at byte %llu)", (unsigned long long)at);
    return attn__fail(status, "%s%s%s '%s'%s: %s", s->file ? s->file : "", s->file ? ": " : "", what,
                      quote(name, quoted, sizeof quoted), where, message);
}

/* ------------------------------------------------------------------- sets */

attn_status attn__safetensors_new(int64_t n_shards, attn_safetensors **out) {
    *out = NULL;
    attn_safetensors *st = calloc(1, sizeof *st);
    if (st) st->shards = calloc((size_t)(n_shards > 0 ? n_shards : 1), sizeof *st->shards);
    if (!st || !st->shards) {
        free(st);
        return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "cannot allocate a safetensors set of %lld shards",
                          (long long)n_shards);
    }
    st->n_shards = n_shards;
    *out = st;
    return ATTN_OK;
}

void attn__safetensors_free(attn_safetensors *st) {
    if (!st) return;
    for (int64_t i = 0; i < st->n_tensors; i++) free((char *)st->tensors[i].name);
    for (int64_t i = 0; i < st->n_meta; i++) {
        free(st->meta_keys[i]);
        free(st->meta_values[i]);
    }
    for (int64_t i = 0; i < st->n_shards; i++) free(st->shards[i].file);
    free(st->meta_keys);
    free(st->meta_values);
    free(st->tensors);
    free(st->by_name);
    free(st->shards);
    free(st);
}

/* ---------------------------------------------------------------- parsing */

/* A JSON number that is an exact integer in [0, max]: *out. */
static bool json_integer(const cJSON *item, double max, uint64_t *out) {
    if (!cJSON_IsNumber(item)) return false;
    const double d = item->valuedouble;
    if (!(d >= 0.0) || d > max || d != (double)(uint64_t)d) return false;
    *out = (uint64_t)d;
    return true;
}

/* "F32" -> its dtype; -1 for a name that is no dtype. */
static int dtype_of(const char *name) {
    for (int i = 0; i < N_DTYPES; i++)
        if (strcmp(dtypes[i].name, name) == 0) return i;
    return -1;
}

static attn_status grow_tensors(attn_safetensors *st, int64_t more) {
    if (st->n_tensors + more <= st->cap_tensors) return ATTN_OK;
    int64_t cap = st->cap_tensors ? st->cap_tensors : 16;
    while (cap < st->n_tensors + more) cap *= 2;
    attn_safetensors_tensor *t = realloc(st->tensors, (size_t)cap * sizeof *t);
    if (!t) return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "cannot allocate the table of %lld tensors", (long long)cap);
    st->tensors = t;
    st->cap_tensors = cap;
    return ATTN_OK;
}

static char *copy_string(const char *s) {
    const size_t n = strlen(s) + 1;
    char *c = malloc(n);
    if (c) memcpy(c, s, n);
    return c;
}

static int compare_strings(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* "__metadata__": an object of strings, kept for shard 0. */
static attn_status parse_metadata(attn_safetensors *st, const safetensors_shard *s, const cJSON *meta, bool keep) {
    if (!cJSON_IsObject(meta))
        return entry_fail(s, "key", "__metadata__", ATTN_ERR_FORMAT, "it is not an object of strings");
    int64_t n = 0;
    for (const cJSON *e = meta->child; e; e = e->next) {
        if (!cJSON_IsString(e) || !e->valuestring)
            return entry_fail(s, "metadata key", e->string ? e->string : "", ATTN_ERR_FORMAT,
                              "its value is not a string (__metadata__ holds strings only)");
        n++;
    }
    if (!keep || n == 0) return ATTN_OK;
    st->meta_keys = calloc((size_t)n, sizeof *st->meta_keys);
    st->meta_values = calloc((size_t)n, sizeof *st->meta_values);
    if (!st->meta_keys || !st->meta_values)
        return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "cannot allocate %lld metadata entries", (long long)n);
    for (const cJSON *e = meta->child; e; e = e->next) {
        char *k = copy_string(e->string), *v = copy_string(e->valuestring);
        st->meta_keys[st->n_meta] = k;
        st->meta_values[st->n_meta] = v;
        st->n_meta++;
        if (!k || !v) return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "cannot copy the metadata");
    }
    /* Duplicates by sorting a copy of the keys (a header of millions of
     * keys must not cost a quadratic scan). */
    char **sorted = malloc((size_t)n * sizeof *sorted);
    if (!sorted) return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "cannot sort %lld metadata keys", (long long)n);
    memcpy(sorted, st->meta_keys, (size_t)n * sizeof *sorted);
    qsort(sorted, (size_t)n, sizeof *sorted, compare_strings);
    attn_status status = ATTN_OK;
    for (int64_t i = 1; i < n && status == ATTN_OK; i++)
        if (strcmp(sorted[i - 1], sorted[i]) == 0)
            status = entry_fail(s, "metadata key", sorted[i], ATTN_ERR_FORMAT, "it appears twice");
    free(sorted);
    return status;
}

/* One tensor's entry into *t (its name already copied). */
static attn_status parse_entry(const safetensors_shard *s, const cJSON *e, uint64_t data_size,
                               attn_safetensors_tensor *t) {
    const char *name = t->name;
    if (!cJSON_IsObject(e))
        return entry_fail(s, "tensor", name, ATTN_ERR_FORMAT,
                          "its entry is not an object {\"dtype\", \"shape\", \"data_offsets\"}");
    const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *offsets = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!dtype || !shape || !offsets)
        return entry_fail(s, "tensor", name, ATTN_ERR_FORMAT, "its entry has no \"%s\"",
                          !dtype ? "dtype" : !shape ? "shape" : "data_offsets");
    if (!cJSON_IsString(dtype) || !dtype->valuestring)
        return entry_fail(s, "tensor", name, ATTN_ERR_FORMAT, "its \"dtype\" is not a string");
    const int type = dtype_of(dtype->valuestring);
    if (type < 0) {
        char quoted[256];
        return entry_fail(s, "tensor", name, ATTN_ERR_FORMAT, "dtype '%s' is no safetensors dtype",
                          quote(dtype->valuestring, quoted, sizeof quoted));
    }
    t->dtype = (attn_safetensors_dtype)type;
    if (!cJSON_IsArray(shape))
        return entry_fail(s, "tensor", name, ATTN_ERR_FORMAT, "its \"shape\" is not an array");
    const int rank = cJSON_GetArraySize(shape);
    if (rank > ATTN_SAFETENSORS_MAX_DIMS)
        return entry_fail(s, "tensor", name, ATTN_ERR_UNSUPPORTED, "%d dimensions (this reader reads up to %d)", rank,
                          ATTN_SAFETENSORS_MAX_DIMS);
    t->n_dims = rank;
    for (int d = 0; d < ATTN_SAFETENSORS_MAX_DIMS; d++) t->shape[d] = 1;
    int d = 0;
    for (const cJSON *x = shape->child; x; x = x->next, d++) {
        uint64_t dim;
        if (!json_integer(x, SAFETENSORS_MAX_EXACT, &dim))
            return entry_fail(s, "tensor", name, ATTN_ERR_FORMAT,
                              "dimension %d of its shape is not an integer in [0, 2^53]", d);
        t->shape[d] = (int64_t)dim;
    }
    /* numpy's rule (shape_elements): a zero dimension makes no elements, but
     * the non-zero dimensions' bytes must still fit int64. */
    if (!shape_elements(rank, t->shape, dtypes[type].size, &t->n_elements))
        return entry_fail(s, "tensor", name, ATTN_ERR_OVERFLOW,
                          "the byte size of its shape as %s (its non-zero dimensions multiplied) overflows int64",
                          dtypes[type].name);
    t->n_bytes = (uint64_t)t->n_elements * (uint64_t)dtypes[type].size;
    uint64_t begin = 0, end = 0;
    if (!cJSON_IsArray(offsets) || cJSON_GetArraySize(offsets) != 2 ||
        !json_integer(offsets->child, SAFETENSORS_MAX_EXACT, &begin) ||
        !json_integer(offsets->child->next, SAFETENSORS_MAX_EXACT, &end))
        return entry_fail(s, "tensor", name, ATTN_ERR_FORMAT,
                          "its \"data_offsets\" is not two integers [BEGIN, END] in [0, 2^53]");
    if (begin > end)
        return entry_fail(s, "tensor", name, ATTN_ERR_FORMAT, "data_offsets [%llu, %llu] end before they begin",
                          (unsigned long long)begin, (unsigned long long)end);
    if (end > data_size)
        return entry_fail(s, "tensor", name, ATTN_ERR_FORMAT,
                          "data_offsets [%llu, %llu] run past the data section, which holds %llu bytes (bytes "
                          "%llu .. %llu of the file)",
                          (unsigned long long)begin, (unsigned long long)end, (unsigned long long)data_size,
                          (unsigned long long)s->data_offset, (unsigned long long)(s->data_offset + data_size));
    if (end - begin != t->n_bytes)
        return entry_fail(s, "tensor", name, ATTN_ERR_FORMAT,
                          "data_offsets [%llu, %llu] hold %llu bytes, but %lld elements of %s are %llu bytes "
                          "(at byte %llu of the file)",
                          (unsigned long long)begin, (unsigned long long)end, (unsigned long long)(end - begin),
                          (long long)t->n_elements, dtypes[type].name, (unsigned long long)t->n_bytes,
                          (unsigned long long)(s->data_offset + begin));
    t->offset = s->data_offset + begin;
    t->data = s->base + t->offset;
    return ATTN_OK;
}

static int compare_offsets(const void *a, const void *b) {
    const attn_safetensors_tensor *x = *(const attn_safetensors_tensor *const *)a;
    const attn_safetensors_tensor *y = *(const attn_safetensors_tensor *const *)b;
    if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
    return x->n_bytes < y->n_bytes ? -1 : x->n_bytes > y->n_bytes;
}

/* The shard's tensors first .. st->n_tensors-1, in the order of their
 * data, are contiguous and cover the data section exactly. */
static attn_status check_coverage(const attn_safetensors *st, const safetensors_shard *s, int64_t first) {
    const int64_t n = st->n_tensors - first;
    const uint64_t end_of_file = s->size;
    if (n == 0) {
        if (s->data_offset == end_of_file) return ATTN_OK;
        return attn__fail(ATTN_ERR_FORMAT, "%s%sno tensors, but %llu bytes of data follow the header (bytes %llu .. %llu)",
                          s->file ? s->file : "", s->file ? ": " : "",
                          (unsigned long long)(end_of_file - s->data_offset), (unsigned long long)s->data_offset,
                          (unsigned long long)end_of_file);
    }
    const attn_safetensors_tensor **order = malloc((size_t)n * sizeof *order);
    if (!order) return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "cannot sort %lld tensors", (long long)n);
    for (int64_t i = 0; i < n; i++) order[i] = &st->tensors[first + i];
    qsort(order, (size_t)n, sizeof *order, compare_offsets);
    attn_status status = ATTN_OK;
    uint64_t at = s->data_offset;
    for (int64_t i = 0; i < n && status == ATTN_OK; i++) {
        const attn_safetensors_tensor *t = order[i];
        if (t->offset < at)
            status = entry_fail(s, "tensor", t->name, ATTN_ERR_FORMAT,
                                "its bytes %llu .. %llu of the data section overlap '%s', which ends at %llu",
                                (unsigned long long)(t->offset - s->data_offset),
                                (unsigned long long)(t->offset - s->data_offset + t->n_bytes), order[i - 1]->name,
                                (unsigned long long)(at - s->data_offset));
        else if (t->offset > at)
            status = entry_fail(s, "tensor", t->name, ATTN_ERR_FORMAT,
                                "it begins at byte %llu of the data section, leaving a gap of %llu bytes after %s "
                                "(at byte %llu of the file)",
                                (unsigned long long)(t->offset - s->data_offset), (unsigned long long)(t->offset - at),
                                i ? "the tensor before it" : "the header", (unsigned long long)at);
        at = t->offset + t->n_bytes;
    }
    if (status == ATTN_OK && at != end_of_file)
        status = attn__fail(ATTN_ERR_FORMAT,
                            "%s%sthe tensors end at byte %llu of the data section, but it holds %llu bytes (%llu "
                            "bytes of trailing data at byte %llu of the file)",
                            s->file ? s->file : "", s->file ? ": " : "", (unsigned long long)(at - s->data_offset),
                            (unsigned long long)(end_of_file - s->data_offset), (unsigned long long)(end_of_file - at),
                            (unsigned long long)at);
    free(order);
    return status;
}

attn_status attn__safetensors_parse_shard(attn_safetensors *st, int64_t shard, const uint8_t *base, size_t size) {
    safetensors_shard *s = &st->shards[shard];
    s->base = base;
    s->size = size;
    const char *file = s->file ? s->file : "", *colon = s->file ? ": " : "";
    if (size < 8)
        return attn__fail(ATTN_ERR_FORMAT,
                          "%s%struncated: %zu bytes (a safetensors file starts with its header's length, 8 bytes)",
                          file, colon, size);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | base[i];
    if (n > size - 8)
        return attn__fail(ATTN_ERR_FORMAT,
                          "%s%sthe header's length (bytes 0 .. 7) is %llu, but only %zu bytes follow it (the file "
                          "is truncated, or it is not a safetensors file)",
                          file, colon, (unsigned long long)n, size - 8);
    if (n > SAFETENSORS_MAX_HEADER_BYTES)
        return attn__fail(ATTN_ERR_FORMAT, "%s%sthe header's length (bytes 0 .. 7) is %llu, more than the %u bytes "
                          "safetensors allows", file, colon, (unsigned long long)n, SAFETENSORS_MAX_HEADER_BYTES);
    if (n < 2)
        return attn__fail(ATTN_ERR_FORMAT, "%s%sthe header's length (bytes 0 .. 7) is %llu: too short for a JSON "
                          "object", file, colon, (unsigned long long)n);
    s->data_offset = 8 + n;
    const char *header = (const char *)base + 8;
    const char *nul = memchr(header, 0, (size_t)n);
    if (nul)
        return attn__fail(ATTN_ERR_FORMAT, "%s%sthe header holds a NUL byte (at byte %llu)", file, colon,
                          (unsigned long long)(8 + (uint64_t)(nul - header)));
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(header, (size_t)n, &end, 0);
    if (!root) {
        const uint64_t at = end && end >= header && end <= header + n ? (uint64_t)(end - header) : 0;
        return attn__fail(ATTN_ERR_FORMAT, "%s%sthe header is not valid JSON (at byte %llu of the file)", file,
                          colon, (unsigned long long)(8 + at));
    }
    attn_status status = ATTN_OK;
    for (const char *p = end; p < header + n && status == ATTN_OK; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r')
            status = attn__fail(ATTN_ERR_FORMAT, "%s%sthe header has bytes after its JSON object (at byte %llu; "
                                "only spaces may pad it)", file, colon, (unsigned long long)(8 + (p - header)));
    if (status == ATTN_OK && !cJSON_IsObject(root))
        status = attn__fail(ATTN_ERR_FORMAT, "%s%sthe header is JSON but not an object (at byte 8)", file, colon);
    const int64_t first = st->n_tensors;
    int64_t count = 0;
    if (status == ATTN_OK)
        for (const cJSON *e = root->child; e; e = e->next) count++;
    if (status == ATTN_OK) status = grow_tensors(st, count);
    bool seen_metadata = false;
    for (const cJSON *e = status == ATTN_OK ? root->child : NULL; e && status == ATTN_OK; e = e->next) {
        const char *name = e->string ? e->string : "";
        if (strcmp(name, "__metadata__") == 0) {
            if (seen_metadata)
                status = entry_fail(s, "key", name, ATTN_ERR_FORMAT, "it appears twice");
            else
                status = parse_metadata(st, s, e, shard == 0);
            seen_metadata = true;
            continue;
        }
        if (!*name) {
            status = attn__fail(ATTN_ERR_FORMAT, "%s%sa tensor with an empty name", file, colon);
            break;
        }
        attn_safetensors_tensor *t = &st->tensors[st->n_tensors];
        memset(t, 0, sizeof *t);
        t->name = copy_string(name);
        if (!t->name) {
            status = attn__fail(ATTN_ERR_OUT_OF_MEMORY, "cannot copy a tensor's name");
            break;
        }
        t->index = st->n_tensors;
        t->shard = shard;
        st->n_tensors++; /* owned now, freed by close whatever follows */
        status = parse_entry(s, e, size - s->data_offset, t);
    }
    cJSON_Delete(root);
    if (status == ATTN_OK) status = check_coverage(st, s, first);
    return status;
}

/* --------------------------------------------------------------- lookups */

static int compare_names(const void *a, const void *b) {
    return strcmp((*(const attn_safetensors_tensor *const *)a)->name, (*(const attn_safetensors_tensor *const *)b)->name);
}

static int find_name(const void *name, const void *elem) {
    return strcmp(name, (*(const attn_safetensors_tensor *const *)elem)->name);
}

attn_status attn__safetensors_finish(attn_safetensors *st) {
    st->by_name = malloc((size_t)(st->n_tensors ? st->n_tensors : 1) * sizeof *st->by_name);
    if (!st->by_name)
        return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "cannot allocate the index of %lld tensors", (long long)st->n_tensors);
    for (int64_t i = 0; i < st->n_tensors; i++) st->by_name[i] = &st->tensors[i];
    qsort(st->by_name, (size_t)st->n_tensors, sizeof *st->by_name, compare_names);
    for (int64_t i = 1; i < st->n_tensors; i++) {
        const attn_safetensors_tensor *a = st->by_name[i - 1], *b = st->by_name[i];
        if (strcmp(a->name, b->name) != 0) continue;
        char quoted[256];
        if (a->shard == b->shard) {
            const safetensors_shard *s = &st->shards[a->shard];
            return attn__fail(ATTN_ERR_FORMAT, "%s%stensor '%s' appears twice in the header (at byte %llu)",
                              s->file ? s->file : "", s->file ? ": " : "", quote(a->name, quoted, sizeof quoted),
                              (unsigned long long)entry_byte(s, a->name));
        }
        const char *fa = st->shards[a->shard].file, *fb = st->shards[b->shard].file;
        return attn__fail(ATTN_ERR_FORMAT, "tensor '%s' is in two shards: %s and %s", quote(a->name, quoted, sizeof quoted),
                          fa ? fa : "?", fb ? fb : "?");
    }
    return ATTN_OK;
}

attn_status attn_safetensors_parse(const void *buf, size_t size, attn_safetensors **out) {
    if (!out) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_safetensors_parse: out is NULL");
    *out = NULL;
    if (!buf && size) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_safetensors_parse: buf is NULL");
    attn_safetensors *st;
    attn_status status = attn__safetensors_new(1, &st);
    if (status != ATTN_OK) return status;
    status = attn__safetensors_parse_shard(st, 0, buf ? buf : (const uint8_t *)"", size);
    if (status == ATTN_OK) status = attn__safetensors_finish(st);
    if (status != ATTN_OK) {
        attn__safetensors_free(st);
        return status;
    }
    *out = st;
    return ATTN_OK;
}

int64_t attn_safetensors_n_tensors(const attn_safetensors *st) { return st ? st->n_tensors : 0; }
int64_t attn_safetensors_n_shards(const attn_safetensors *st) { return st ? st->n_shards : 0; }

attn_status attn_safetensors_tensor_at(const attn_safetensors *st, int64_t index, attn_safetensors_tensor *info) {
    if (!st || !info)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_safetensors_tensor_at: %s is NULL", !st ? "st" : "info");
    if (index < 0 || index >= st->n_tensors)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT,
                          "attn_safetensors_tensor_at: index %lld is not one of the %lld tensors", (long long)index,
                          (long long)st->n_tensors);
    *info = st->tensors[index];
    return ATTN_OK;
}

int64_t attn_safetensors_tensor_index(const attn_safetensors *st, const char *name) {
    if (!st || !name || !st->by_name) return -1;
    const attn_safetensors_tensor *const *found =
        bsearch(name, st->by_name, (size_t)st->n_tensors, sizeof *st->by_name, find_name);
    return found ? (*found)->index : -1;
}

attn_status attn_safetensors_find_tensor(const attn_safetensors *st, const char *name, attn_safetensors_tensor *info) {
    if (!st || !name || !info)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_safetensors_find_tensor: %s is NULL",
                          !st ? "st" : !name ? "name" : "info");
    const int64_t i = attn_safetensors_tensor_index(st, name);
    if (i < 0) {
        char quoted[256];
        return attn__fail(ATTN_ERR_FORMAT, "no tensor '%s' in the checkpoint", quote(name, quoted, sizeof quoted));
    }
    *info = st->tensors[i];
    return ATTN_OK;
}

int64_t attn_safetensors_n_metadata(const attn_safetensors *st) { return st ? st->n_meta : 0; }

attn_status attn_safetensors_metadata_at(const attn_safetensors *st, int64_t index, const char **key,
                                         const char **value) {
    if (!st) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_safetensors_metadata_at: st is NULL");
    if (index < 0 || index >= st->n_meta)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT,
                          "attn_safetensors_metadata_at: index %lld is not one of the %lld entries", (long long)index,
                          (long long)st->n_meta);
    if (key) *key = st->meta_keys[index];
    if (value) *value = st->meta_values[index];
    return ATTN_OK;
}

const char *attn_safetensors_metadata(const attn_safetensors *st, const char *key) {
    if (!st || !key) return NULL;
    for (int64_t i = 0; i < st->n_meta; i++)
        if (strcmp(st->meta_keys[i], key) == 0) return st->meta_values[i];
    return NULL;
}

/* ------------------------------------------------------------- conversion */

attn_status attn_safetensors_read_f32(const attn_safetensors *st, const attn_safetensors_tensor *tensor, float *out) {
    if (!st || !tensor || !out)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_safetensors_read_f32: %s is NULL",
                          !st ? "st" : !tensor ? "tensor" : "out");
    if (tensor->index < 0 || tensor->index >= st->n_tensors)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_safetensors_read_f32: tensor index %lld is not one of the "
                          "%lld tensors", (long long)tensor->index, (long long)st->n_tensors);
    const attn_safetensors_tensor *t = &st->tensors[tensor->index];
    const uint8_t *p = t->data;
    const int64_t n = t->n_elements;
    char quoted[256];
    switch (t->dtype) {
    case ATTN_SAFETENSORS_F32:
        for (int64_t i = 0; i < n; i++) {
            const uint8_t *b = p + 4 * i;
            const uint32_t bits = (uint32_t)b[0] | ((uint32_t)b[1] << 8) | ((uint32_t)b[2] << 16) | ((uint32_t)b[3] << 24);
            memcpy(&out[i], &bits, sizeof bits);
        }
        return ATTN_OK;
    case ATTN_SAFETENSORS_F16:
        for (int64_t i = 0; i < n; i++) out[i] = dtype_f16_to_f32((uint16_t)(p[2 * i] | (p[2 * i + 1] << 8)));
        return ATTN_OK;
    case ATTN_SAFETENSORS_BF16:
        for (int64_t i = 0; i < n; i++) out[i] = dtype_bf16_to_f32((uint16_t)(p[2 * i] | (p[2 * i + 1] << 8)));
        return ATTN_OK;
    default:
        return attn__fail(ATTN_ERR_UNSUPPORTED, "tensor '%s' is %s: only F32, F16 and BF16 tensors are read as float32",
                          quote(t->name, quoted, sizeof quoted), dtypes[t->dtype].name);
    }
}

/* ----------------------------------------------------------------- index */

void attn__safetensors_index_free(safetensors_index *index) {
    for (int64_t i = 0; i < index->n_entries; i++) free(index->names[i]);
    for (int64_t i = 0; i < index->n_files; i++) free(index->files[i]);
    free(index->names);
    free(index->file_of);
    free(index->files);
    memset(index, 0, sizeof *index);
}

/* A shard's name names a file in the index's own directory and nothing
 * else: no path, no hidden file, nothing that climbs out. */
static bool plain_file_name(const char *name) {
    return name[0] && name[0] != '.' && !strchr(name, '/') && !strchr(name, '\\');
}

attn_status attn__safetensors_index_parse(const char *json, size_t len, safetensors_index *index) {
    memset(index, 0, sizeof *index);
    if (memchr(json, 0, len))
        return attn__fail(ATTN_ERR_FORMAT, "the index holds a NUL byte (at byte %zu)",
                          (size_t)((const char *)memchr(json, 0, len) - json));
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(json, len, &end, 0);
    if (!root) {
        const size_t at = end && end >= json && end <= json + len ? (size_t)(end - json) : 0;
        return attn__fail(ATTN_ERR_FORMAT, "the index is not valid JSON (at byte %zu)", at);
    }
    attn_status status = ATTN_OK;
    enum { FILE_SLOTS = 2 * SAFETENSORS_MAX_SHARDS }; /* at most half full: a probe always ends */
    int64_t file_slot[FILE_SLOTS];
    for (size_t i = 0; i < FILE_SLOTS; i++) file_slot[i] = -1;
    const cJSON *map = cJSON_IsObject(root) ? cJSON_GetObjectItemCaseSensitive(root, "weight_map") : NULL;
    int64_t n = 0;
    if (!cJSON_IsObject(map))
        status = attn__fail(ATTN_ERR_FORMAT, "the index has no \"weight_map\" object (tensor name -> shard file)");
    else
        for (const cJSON *e = map->child; e; e = e->next) n++;
    if (status == ATTN_OK) {
        index->names = calloc((size_t)(n ? n : 1), sizeof *index->names);
        index->file_of = calloc((size_t)(n ? n : 1), sizeof *index->file_of);
        index->files = calloc((size_t)(n ? n : 1), sizeof *index->files);
        if (!index->names || !index->file_of || !index->files)
            status = attn__fail(ATTN_ERR_OUT_OF_MEMORY, "cannot allocate an index of %lld entries", (long long)n);
    }
    for (const cJSON *e = status == ATTN_OK ? map->child : NULL; e && status == ATTN_OK; e = e->next) {
        char quoted[256], quoted_file[256];
        const char *name = e->string ? e->string : "";
        if (!*name) {
            status = attn__fail(ATTN_ERR_FORMAT, "weight_map has an empty tensor name");
            break;
        }
        if (!cJSON_IsString(e) || !e->valuestring || !plain_file_name(e->valuestring)) {
            status = attn__fail(ATTN_ERR_FORMAT, "weight_map entry '%s': its shard %s%s%s is not a plain file name "
                                "in the index's directory", quote(name, quoted, sizeof quoted),
                                cJSON_IsString(e) ? "'" : "(not a string)",
                                cJSON_IsString(e) && e->valuestring ? quote(e->valuestring, quoted_file, sizeof quoted_file) : "",
                                cJSON_IsString(e) ? "'" : "");
            break;
        }
        /* The shard's number, through a small hash table of the names seen
         * (a hostile index of millions of entries over many shard names must
         * not cost entries x shards comparisons). */
        uint64_t h = 14695981039346656037u; /* FNV-1a */
        for (const unsigned char *c = (const unsigned char *)e->valuestring; *c; c++) h = (h ^ *c) * 1099511628211u;
        size_t slot = (size_t)(h % FILE_SLOTS);
        while (file_slot[slot] >= 0 && strcmp(index->files[file_slot[slot]], e->valuestring) != 0)
            slot = (slot + 1) % FILE_SLOTS;
        int64_t f = file_slot[slot] >= 0 ? file_slot[slot] : index->n_files;
        if (f == index->n_files && f == SAFETENSORS_MAX_SHARDS) {
            status = attn__fail(ATTN_ERR_UNSUPPORTED, "weight_map entry '%s': more than %d shard files",
                                quote(name, quoted, sizeof quoted), SAFETENSORS_MAX_SHARDS);
            break;
        }
        if (f == index->n_files) {
            if (!(index->files[f] = copy_string(e->valuestring))) {
                status = attn__fail(ATTN_ERR_OUT_OF_MEMORY, "cannot copy the index");
                break;
            }
            file_slot[slot] = f;
            index->n_files++;
        }
        if (!(index->names[index->n_entries] = copy_string(name))) {
            status = attn__fail(ATTN_ERR_OUT_OF_MEMORY, "cannot copy the index");
            break;
        }
        index->file_of[index->n_entries++] = f;
    }
    cJSON_Delete(root);
    if (status != ATTN_OK) attn__safetensors_index_free(index);
    return status;
}
