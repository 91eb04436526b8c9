/*
 * test_safetensors.c — the safetensors reader and config.json, on files built
 * byte by byte here (from the format's definition: an 8-byte little-endian
 * header length, the JSON header, the data), never by a safetensors writer.
 *
 *   - a valid file: every field (dtypes, shapes, rank 0, a zero-size
 *     tensor, offsets, metadata), F32 / F16 / BF16 read to float32 against
 *     values written here by their bit patterns, another dtype refused by
 *     name;
 *   - a table of hostile files, one flaw each (header length lies, bad
 *     JSON, trailing bytes, NUL bytes, unknown or mistyped dtypes, shapes
 *     negative, fractional, overflowing, too deep; data_offsets reversed,
 *     past the end, of the wrong size, overlapping, with gaps, not starting
 *     at 0, trailing data; duplicate names and metadata): each through
 *     attn_safetensors_parse and through attn_safetensors_open from a file,
 *     refused with the row's status and a message naming the row's keyword;
 *   - every prefix of the valid file, both ways: refused;
 *   - sharded checkpoints in a temporary directory: a good index, a missing
 *     shard, a tensor in two shards, a tensor in no map, a map entry in the
 *     wrong shard or in none, a shard name that climbs out, a directory with
 *     neither file;
 *   - config.json: each architecture's keys, the older keys, and refusals
 *     (missing and mistyped keys, unknown model_type, scaled RoPE, biases,
 *     layer_types without a pattern), and a checkpoint whose tensor has the
 *     wrong shape, named in the message.
 */
#define _DEFAULT_SOURCE /* mkdtemp */

#include "testutil.h"

#include "attn.h"
#include "attn_decoder.h"
#include "attn_safetensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

/* ------------------------------------------------------------ building */

/* An image: 8-byte length (length, or the header's own when length is
 * UINT64_MAX... no: when use_length is 0), the header, data_len data bytes
 * (byte i holds i & 0xFF). */
static uint8_t *build(const char *header, size_t data_len, int use_length, uint64_t length, size_t *size) {
    const size_t h = strlen(header);
    *size = 8 + h + data_len;
    uint8_t *b = malloc(*size);
    assert_non_null(b);
    const uint64_t n = use_length ? length : h;
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(n >> (8 * i));
    memcpy(b + 8, header, h);
    for (size_t i = 0; i < data_len; i++) b[8 + h + i] = (uint8_t)i;
    return b;
}

static char tmpdir[64];

static void write_file(const char *name, const void *data, size_t size) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    assert_int_equal(test_write_file(path, data, size), 0);
}

static void write_text(const char *name, const char *text) { write_file(name, text, strlen(text)); }

static void remove_all(void) {
    const char *names[] = {"x.safetensors", "a.safetensors", "b.safetensors", "model.safetensors",
                           "model.safetensors.index.json", "config.json"};
    char path[256];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", tmpdir, names[i]);
        unlink(path);
    }
}

/* ---------------------------------------------------------- a valid file */

/* w: F32 [2, 3] = 1 .. 6     h: F16 [2] = 1.0, -2.5     b: BF16 [] = 3.0
 * e: F32 [0, 3] (no bytes)   i: I64 [1] */
static const char valid_header[] =
    "{\"__metadata__\":{\"format\":\"pt\",\"note\":\"tiny\"},"
    "\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
    "\"h\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[24,28]},"
    "\"b\":{\"dtype\":\"BF16\",\"shape\":[],\"data_offsets\":[28,30]},"
    "\"e\":{\"dtype\":\"F32\",\"shape\":[0,3],\"data_offsets\":[30,30]},"
    "\"i\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[30,38]}}   ";

static uint8_t *valid_file(size_t *size) {
    uint8_t *b = build(valid_header, 38, 0, 0, size);
    uint8_t *d = b + 8 + strlen(valid_header);
    const uint32_t f32[6] = {0x3F800000u, 0x40000000u, 0x40400000u, 0x40800000u, 0x40A00000u, 0x40C00000u};
    for (int i = 0; i < 6; i++)
        for (int k = 0; k < 4; k++) d[4 * i + k] = (uint8_t)(f32[i] >> (8 * k));
    const uint16_t half[3] = {0x3C00u /* 1.0 */, 0xC100u /* -2.5 */, 0x4040u /* bf16 3.0 */};
    for (int i = 0; i < 3; i++) {
        d[24 + 2 * i] = (uint8_t)half[i];
        d[25 + 2 * i] = (uint8_t)(half[i] >> 8);
    }
    return b;
}

static void valid_fields(void **state) {
    (void)state;
    size_t size;
    uint8_t *b = valid_file(&size);
    attn_safetensors *st = NULL;
    assert_ok(attn_safetensors_parse(b, size, &st));
    assert_int_equal(attn_safetensors_n_tensors(st), 5);
    assert_int_equal(attn_safetensors_n_shards(st), 1);
    assert_int_equal(attn_safetensors_n_metadata(st), 2);
    assert_string_equal(attn_safetensors_metadata(st, "format"), "pt");
    assert_null(attn_safetensors_metadata(st, "nope"));
    const char *k, *v;
    assert_ok(attn_safetensors_metadata_at(st, 1, &k, &v));
    assert_string_equal(k, "note");
    assert_string_equal(v, "tiny");
    attn_safetensors_tensor t;
    assert_ok(attn_safetensors_tensor_at(st, 0, &t));
    assert_string_equal(t.name, "w");
    assert_int_equal(t.dtype, ATTN_SAFETENSORS_F32);
    assert_int_equal(t.n_dims, 2);
    assert_int_equal(t.shape[0], 2);
    assert_int_equal(t.shape[1], 3);
    assert_int_equal(t.n_elements, 6);
    assert_int_equal(t.n_bytes, 24);
    assert_int_equal(t.offset, 8 + strlen(valid_header));
    float out[6];
    assert_ok(attn_safetensors_read_f32(st, &t, out));
    for (int i = 0; i < 6; i++) assert_true(out[i] == (float)(i + 1));
    assert_ok(attn_safetensors_find_tensor(st, "h", &t));
    assert_int_equal(t.index, 1);
    assert_ok(attn_safetensors_read_f32(st, &t, out));
    assert_true(out[0] == 1.0f && out[1] == -2.5f);
    assert_ok(attn_safetensors_find_tensor(st, "b", &t));
    assert_int_equal(t.n_dims, 0);
    assert_int_equal(t.n_elements, 1);
    assert_ok(attn_safetensors_read_f32(st, &t, out));
    assert_true(out[0] == 3.0f);
    assert_ok(attn_safetensors_find_tensor(st, "e", &t));
    assert_int_equal(t.n_elements, 0);
    assert_int_equal(t.n_bytes, 0);
    assert_ok(attn_safetensors_find_tensor(st, "i", &t));
    assert_refused(attn_safetensors_read_f32(st, &t, out), ATTN_ERR_UNSUPPORTED, "I64");
    assert_refused(attn_safetensors_find_tensor(st, "zz", &t), ATTN_ERR_FORMAT, "zz");
    assert_int_equal(attn_safetensors_tensor_index(st, "zz"), -1);
    assert_string_equal(attn_safetensors_dtype_name(ATTN_SAFETENSORS_BF16), "BF16");
    assert_int_equal(attn_safetensors_dtype_size(ATTN_SAFETENSORS_C64), 8);
    assert_null(attn_safetensors_dtype_name((attn_safetensors_dtype)99));
    attn_safetensors_free(st);
    /* The same from a file, through the mapping. */
    write_file("x.safetensors", b, size);
    char path[256];
    snprintf(path, sizeof path, "%s/x.safetensors", tmpdir);
    assert_ok(attn_safetensors_open(path, &st));
    assert_int_equal(attn_safetensors_n_tensors(st), 5);
    attn_safetensors_free(st);
    remove_all();
    free(b);
}

/* ------------------------------------------------------------- hostile */

typedef struct hostile {
    const char *row, *header;
    size_t data_len;
    int use_length;
    uint64_t length;
    attn_status status;
    const char *keyword;
} hostile;

#define T(name, dtype, shape, b, e) "\"" name "\":{\"dtype\":\"" dtype "\",\"shape\":" shape ",\"data_offsets\":[" b "," e "]}"

static const hostile rows[] = {
    {"empty", "", 0, 0, 0, ATTN_ERR_FORMAT, "too short"},
    {"length past the file", "{}", 0, 1, 3, ATTN_ERR_FORMAT, "header's length"},
    {"length 2^64-1", "{}", 0, 1, UINT64_MAX, ATTN_ERR_FORMAT, "header's length"},
    {"length 2^63", "{}", 4, 1, (uint64_t)1 << 63, ATTN_ERR_FORMAT, "header's length"},
    {"length short of the JSON", "{\"a\":1}", 0, 1, 3, ATTN_ERR_FORMAT, "not valid JSON"},
    {"bad JSON", "{\"w\":", 0, 0, 0, ATTN_ERR_FORMAT, "not valid JSON"},
    {"not an object", "[1, 2]", 0, 0, 0, ATTN_ERR_FORMAT, "not an object"},
    {"trailing bytes", "{} x", 0, 0, 0, ATTN_ERR_FORMAT, "bytes after"},
    {"two objects", "{}{}", 0, 0, 0, ATTN_ERR_FORMAT, "bytes after"},
    {"NUL in the header", "{}\0 ", 0, 1, 4, ATTN_ERR_FORMAT, "NUL"},
    {"unknown dtype", "{" T("w", "F33", "[1]", "0", "4") "}", 4, 0, 0, ATTN_ERR_FORMAT, "F33"},
    {"dtype not a string", "{\"w\":{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,4]}}", 4, 0, 0, ATTN_ERR_FORMAT,
     "dtype"},
    {"no dtype", "{\"w\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, 0, 0, ATTN_ERR_FORMAT, "'w'"},
    {"no shape", "{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, 0, 0, ATTN_ERR_FORMAT, "shape"},
    {"no data_offsets", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, 0, 0, ATTN_ERR_FORMAT, "data_offsets"},
    {"entry not an object", "{\"w\":[1]}", 0, 0, 0, ATTN_ERR_FORMAT, "'w'"},
    {"shape not an array", "{" T("w", "F32", "4", "0", "4") "}", 4, 0, 0, ATTN_ERR_FORMAT, "shape"},
    {"negative dimension", "{" T("w", "F32", "[-1]", "0", "4") "}", 4, 0, 0, ATTN_ERR_FORMAT, "dimension 0"},
    {"fractional dimension", "{" T("w", "F32", "[1.5]", "0", "4") "}", 4, 0, 0, ATTN_ERR_FORMAT, "dimension 0"},
    {"dimension as a string", "{" T("w", "F32", "[\"1\"]", "0", "4") "}", 4, 0, 0, ATTN_ERR_FORMAT, "dimension"},
    {"dimension past 2^53", "{" T("w", "U8", "[1e300]", "0", "4") "}", 4, 0, 0, ATTN_ERR_FORMAT, "2^53"},
    {"shape product overflows", "{" T("w", "U8", "[4294967296,4294967296]", "0", "4") "}", 4, 0, 0,
     ATTN_ERR_OVERFLOW, "overflows"},
    /* No elements, but the bytes of the other dimensions overflow: numpy
     * refuses such a shape ("array is too big"), in either order. */
    {"zero times an overflow", "{" T("w", "F32", "[0,4294967296,4294967296]", "0", "0") "}", 0, 0, 0,
     ATTN_ERR_OVERFLOW, "non-zero dimensions"},
    {"an overflow times zero", "{" T("w", "F32", "[4294967296,4294967296,0]", "0", "0") "}", 0, 0, 0,
     ATTN_ERR_OVERFLOW, "non-zero dimensions"},
    {"bytes overflow", "{" T("w", "F64", "[4611686018427387904]", "0", "4") "}", 4, 0, 0, ATTN_ERR_FORMAT,
     "2^53"},
    {"bytes overflow under 2^53", "{" T("w", "F64", "[9007199254740992,4096]", "0", "4") "}", 4, 0, 0,
     ATTN_ERR_OVERFLOW, "overflows"},
    {"9 dimensions", "{" T("w", "U8", "[1,1,1,1,1,1,1,1,1]", "0", "1") "}", 1, 0, 0, ATTN_ERR_UNSUPPORTED,
     "9 dimensions"},
    {"three offsets", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", 8, 0, 0,
     ATTN_ERR_FORMAT, "data_offsets"},
    {"negative offset", "{" T("w", "F32", "[1]", "-4", "0") "}", 4, 0, 0, ATTN_ERR_FORMAT, "data_offsets"},
    {"offsets reversed", "{" T("w", "F32", "[1]", "4", "0") "}", 4, 0, 0, ATTN_ERR_FORMAT, "end before"},
    {"offsets past the data", "{" T("w", "F32", "[1]", "0", "4") "}", 2, 0, 0, ATTN_ERR_FORMAT, "past the data"},
    {"offsets 2^64", "{" T("w", "F32", "[1]", "18446744073709551612", "18446744073709551616") "}", 4, 0, 0,
     ATTN_ERR_FORMAT, "data_offsets"},
    {"size mismatch", "{" T("w", "F32", "[2]", "0", "4") "}", 4, 0, 0, ATTN_ERR_FORMAT, "8 bytes"},
    {"overlap", "{" T("a", "F32", "[2]", "0", "8") "," T("b", "F32", "[2]", "4", "12") "}", 12, 0, 0,
     ATTN_ERR_FORMAT, "overlap"},
    {"same bytes twice", "{" T("a", "F32", "[1]", "0", "4") "," T("b", "F32", "[1]", "0", "4") "}", 4, 0, 0,
     ATTN_ERR_FORMAT, "overlap"},
    {"gap", "{" T("a", "F32", "[1]", "0", "4") "," T("b", "F32", "[1]", "8", "12") "}", 12, 0, 0,
     ATTN_ERR_FORMAT, "gap of 4"},
    {"not starting at 0", "{" T("a", "F32", "[1]", "4", "8") "}", 8, 0, 0, ATTN_ERR_FORMAT, "gap of 4"},
    {"trailing data", "{" T("a", "F32", "[1]", "0", "4") "}", 12, 0, 0, ATTN_ERR_FORMAT, "trailing"},
    {"no tensors but data", "{}", 4, 0, 0, ATTN_ERR_FORMAT, "no tensors"},
    {"duplicate name", "{" T("a", "F32", "[1]", "0", "4") "," T("a", "F32", "[1]", "4", "8") "}", 8, 0, 0,
     ATTN_ERR_FORMAT, "appears twice"},
    {"empty name", "{" T("", "F32", "[1]", "0", "4") "}", 4, 0, 0, ATTN_ERR_FORMAT, "empty name"},
    {"metadata not an object", "{\"__metadata__\":[1]}", 0, 0, 0, ATTN_ERR_FORMAT, "__metadata__"},
    {"metadata value not a string", "{\"__metadata__\":{\"format\":1}}", 0, 0, 0, ATTN_ERR_FORMAT, "format"},
    {"metadata twice", "{\"__metadata__\":{},\"__metadata__\":{}}", 0, 0, 0, ATTN_ERR_FORMAT, "twice"},
    {"metadata key twice", "{\"__metadata__\":{\"k\":\"a\",\"k\":\"b\"}}", 0, 0, 0, ATTN_ERR_FORMAT, "twice"},
};

static void every_row(void **state) {
    (void)state;
    char path[256];
    snprintf(path, sizeof path, "%s/x.safetensors", tmpdir);
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const hostile *r = &rows[i];
        size_t size;
        /* The NUL row's header holds a NUL: its length is given. */
        uint8_t *b = build(r->header, r->data_len, r->use_length, r->length, &size);
        if (r->use_length && r->length == 4 && strcmp(r->row, "NUL in the header") == 0) {
            free(b);
            const char h[4] = {'{', '}', 0, ' '};
            size = 12;
            b = malloc(size);
            assert_non_null(b);
            memset(b, 0, 8);
            b[0] = 4;
            memcpy(b + 8, h, 4);
        }
        attn_safetensors *st = (attn_safetensors *)&st; /* must be set to NULL */
        const attn_status got = attn_safetensors_parse(b, size, &st);
        if (got != r->status || !strstr(attn_last_error(), r->keyword) || st)
            fail_msg("row '%s' (memory): status %d (expected %d), message '%s' (expected '%s')", r->row, (int)got,
                     (int)r->status, attn_last_error(), r->keyword);
        write_file("x.safetensors", b, size);
        const attn_status from_file = attn_safetensors_open(path, &st);
        if (from_file != r->status || !strstr(attn_last_error(), r->keyword) || !strstr(attn_last_error(), path) || st)
            fail_msg("row '%s' (file): status %d (expected %d), message '%s'", r->row, (int)from_file, (int)r->status,
                     attn_last_error());
        free(b);
    }
    remove_all();
}

static void every_prefix(void **state) {
    (void)state;
    size_t size;
    uint8_t *b = valid_file(&size);
    char path[256];
    snprintf(path, sizeof path, "%s/x.safetensors", tmpdir);
    for (size_t n = 0; n < size; n++) {
        attn_safetensors *st = NULL;
        uint8_t *copy = malloc(n ? n : 1); /* exactly n bytes: ASan sees a read past them */
        assert_non_null(copy);
        memcpy(copy, b, n);
        const attn_status got = attn_safetensors_parse(copy, n, &st);
        if (got != ATTN_ERR_FORMAT || st) fail_msg("prefix of %zu bytes: status %d: %s", n, (int)got, attn_last_error());
        if (n % 7 == 0 || n + 1 == size) {
            write_file("x.safetensors", copy, n);
            if (attn_safetensors_open(path, &st) != ATTN_ERR_FORMAT || st)
                fail_msg("prefix of %zu bytes from a file: %s", n, attn_last_error());
        }
        free(copy);
    }
    free(b);
    remove_all();
}

/* Things that are no safetensors file: refused at once, without blocking
 * (a FIFO would block open()) and without reading /dev/zero forever. */
static void not_regular_files(void **state) {
    (void)state;
    char fifo[256], link[256];
    snprintf(fifo, sizeof fifo, "%s/fifo.safetensors", tmpdir);
    snprintf(link, sizeof link, "%s/zero.safetensors", tmpdir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    assert_int_equal(symlink("/dev/zero", link), 0);
    attn_safetensors *st = NULL;
    assert_refused(attn_safetensors_open(fifo, &st), ATTN_ERR_IO, "a FIFO");
    assert_refused(attn_safetensors_open(link, &st), ATTN_ERR_IO, "a character device");
    assert_refused(attn_safetensors_open("/nonexistent/x.safetensors", &st), ATTN_ERR_IO, "No such file");
    /* An index naming a FIFO as its shard. */
    write_text("model.safetensors.index.json", "{\"weight_map\":{\"x\":\"fifo.safetensors\"}}");
    assert_refused(attn_safetensors_open(tmpdir, &st), ATTN_ERR_IO, "a FIFO");
    /* config.json as a FIFO. */
    attn_decoder_config c;
    char config[256];
    snprintf(config, sizeof config, "%s/config.json", tmpdir);
    assert_int_equal(mkfifo(config, 0600), 0);
    assert_refused(attn_decoder_config_from_checkpoint(tmpdir, &c), ATTN_ERR_IO, "a FIFO");
    unlink(config);
    /* config.json over its bound (sparse: no byte written), refused before
     * it is mapped, by name and size. */
    FILE *f = fopen(config, "wb");
    assert_non_null(f);
    fclose(f);
    assert_int_equal(truncate(config, (64 << 20) + 1), 0);
    assert_refused(attn_decoder_config_from_checkpoint(tmpdir, &c), ATTN_ERR_FORMAT,
                   "config.json' is 67108865 bytes: a config.json is at most 64 MiB");
    unlink(config);
    unlink(fifo);
    unlink(link);
    remove_all();
}

/* --------------------------------------------------------------- shards */

static void write_shard(const char *name, const char *header, size_t data_len) {
    size_t size;
    uint8_t *b = build(header, data_len, 0, 0, &size);
    write_file(name, b, size);
    free(b);
}

static const char shard_a[] = "{" T("x", "F32", "[1]", "0", "4") "," T("y", "F32", "[1]", "4", "8") "}";
static const char shard_b[] = "{" T("z", "F16", "[2]", "0", "4") "}";

static void shards(void **state) {
    (void)state;
    attn_safetensors *st = NULL;
    attn_safetensors_tensor t;
    write_shard("a.safetensors", shard_a, 8);
    write_shard("b.safetensors", shard_b, 4);
    write_text("model.safetensors.index.json", "{\"metadata\":{\"total_size\":12},\"weight_map\":{\"x\":"
                                                "\"a.safetensors\",\"z\":\"b.safetensors\",\"y\":\"a.safetensors\"}}");
    assert_ok(attn_safetensors_open(tmpdir, &st));
    assert_int_equal(attn_safetensors_n_shards(st), 2);
    assert_int_equal(attn_safetensors_n_tensors(st), 3);
    assert_ok(attn_safetensors_find_tensor(st, "z", &t));
    assert_int_equal(t.shard, 1);
    assert_int_equal(t.offset, 8 + strlen(shard_b));
    attn_safetensors_free(st);
    char path[256];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", tmpdir);
    assert_ok(attn_safetensors_open(path, &st)); /* the index itself */
    attn_safetensors_free(st);

    const struct {
        const char *row, *index;
        attn_status status;
        const char *keyword;
    } bad[] = {
        {"missing shard", "{\"weight_map\":{\"x\":\"a.safetensors\",\"y\":\"a.safetensors\",\"z\":\"c.safetensors\"}}",
         ATTN_ERR_IO, "c.safetensors"},
        {"wrong shard", "{\"weight_map\":{\"x\":\"b.safetensors\",\"y\":\"a.safetensors\",\"z\":\"b.safetensors\"}}",
         ATTN_ERR_FORMAT, "'x' is mapped to shard 'b.safetensors'"},
        {"not in the map", "{\"weight_map\":{\"x\":\"a.safetensors\",\"z\":\"b.safetensors\"}}", ATTN_ERR_FORMAT,
         "'y' of shard 'a.safetensors' is not in the weight_map"},
        {"in no shard", "{\"weight_map\":{\"x\":\"a.safetensors\",\"y\":\"a.safetensors\",\"z\":\"b.safetensors\","
                        "\"w\":\"b.safetensors\"}}", ATTN_ERR_FORMAT, "'w' is not in its shard"},
        {"listed twice", "{\"weight_map\":{\"x\":\"a.safetensors\",\"y\":\"a.safetensors\",\"z\":\"b.safetensors\","
                         "\"x\":\"a.safetensors\"}}", ATTN_ERR_FORMAT, "twice"},
        {"climbs out", "{\"weight_map\":{\"x\":\"../a.safetensors\"}}", ATTN_ERR_FORMAT, "plain file name"},
        {"hidden file", "{\"weight_map\":{\"x\":\".a\"}}", ATTN_ERR_FORMAT, "plain file name"},
        {"shard not a string", "{\"weight_map\":{\"x\":3}}", ATTN_ERR_FORMAT, "not a string"},
        {"no weight_map", "{\"metadata\":{}}", ATTN_ERR_FORMAT, "weight_map"},
        {"bad JSON", "{\"weight_map\":", ATTN_ERR_FORMAT, "not valid JSON"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_text("model.safetensors.index.json", bad[i].index);
        const attn_status got = attn_safetensors_open(tmpdir, &st);
        if (got != bad[i].status || !strstr(attn_last_error(), bad[i].keyword) || st)
            fail_msg("index row '%s': status %d (expected %d): '%s'", bad[i].row, (int)got, (int)bad[i].status,
                     attn_last_error());
    }
    /* More shard files than a set may have: refused before any is opened. */
    {
        const size_t cap = 1100 * 48 + 64;
        char *json = malloc(cap);
        assert_non_null(json);
        size_t n = (size_t)snprintf(json, cap, "{\"weight_map\":{");
        for (int i = 0; i < 1100; i++)
            n += (size_t)snprintf(json + n, cap - n, "%s\"t%d\":\"s%d.safetensors\"", i ? "," : "", i, i);
        snprintf(json + n, cap - n, "}}");
        write_text("model.safetensors.index.json", json);
        free(json);
        assert_refused(attn_safetensors_open(tmpdir, &st), ATTN_ERR_UNSUPPORTED, "more than 1024 shard files");
    }
    /* A tensor in two shards. */
    write_shard("b.safetensors", "{" T("x", "F32", "[1]", "0", "4") "}", 4);
    write_text("model.safetensors.index.json",
               "{\"weight_map\":{\"x\":\"a.safetensors\",\"y\":\"a.safetensors\",\"q\":\"b.safetensors\"}}");
    assert_refused(attn_safetensors_open(tmpdir, &st), ATTN_ERR_FORMAT, "two shards");
    /* A directory with neither file; with model.safetensors alone. */
    remove_all();
    assert_refused(attn_safetensors_open(tmpdir, &st), ATTN_ERR_IO, "model.safetensors");
    write_shard("model.safetensors", shard_a, 8);
    assert_ok(attn_safetensors_open(tmpdir, &st));
    assert_int_equal(attn_safetensors_n_tensors(st), 2);
    attn_safetensors_free(st);
    /* A directory given as a shard's file is refused without blocking. */
    assert_refused(attn_safetensors_open("/", &st), ATTN_ERR_IO, "directory");
    remove_all();
}

/* --------------------------------------------------------- config.json */

static attn_status config_of(const char *json, attn_decoder_config *c) {
    return attn_decoder_config_from_json(json, strlen(json), c);
}

#define BASE "\"hidden_size\":32,\"num_hidden_layers\":3,\"num_attention_heads\":4,\"intermediate_size\":64,\"vocab_size\":256"

static void config_json(void **state) {
    (void)state;
    attn_decoder_config c;
    assert_ok(config_of("{\"model_type\":\"qwen3\"," BASE ",\"num_key_value_heads\":2,\"head_dim\":16,"
                        "\"rope_parameters\":{\"rope_theta\":1e6,\"rope_type\":\"default\"},\"rms_norm_eps\":1e-5,"
                        "\"layer_types\":[\"full_attention\",\"full_attention\",\"full_attention\"],"
                        "\"sliding_window\":null}", &c));
    assert_int_equal(c.arch, ATTN_DECODER_QWEN3);
    assert_int_equal(c.n_kv_heads, 2);
    assert_int_equal(c.head_dim, 16);
    assert_true(c.qk_norm && !c.qkv_bias && !c.post_norms && !c.tied_embeddings);
    assert_true(c.rope_theta == 1e6 && c.rms_eps == 1e-5 && c.sliding_window == 0);
    assert_ok(config_of("{\"model_type\":\"qwen2\"," BASE ",\"rope_theta\":1000000.0,\"tie_word_embeddings\":true}",
                        &c));
    assert_true(c.qkv_bias && !c.qk_norm && c.tied_embeddings && c.head_dim == 8 && c.n_kv_heads == 4);
    assert_true(c.rope_theta == 1e6);
    assert_ok(config_of("{\"model_type\":\"llama\"," BASE ",\"rope_scaling\":null,\"attention_bias\":false}", &c));
    assert_true(c.arch == ATTN_DECODER_LLAMA && c.rope_theta == 10000.0 && !c.tied_embeddings);
    /* Gemma 3 as older transformers wrote it: pattern 6, local base freq. */
    assert_ok(config_of("{\"model_type\":\"gemma3_text\",\"hidden_size\":32,\"num_hidden_layers\":12,"
                        "\"num_attention_heads\":2,\"intermediate_size\":64,\"vocab_size\":256,\"head_dim\":16,"
                        "\"sliding_window\":512,\"sliding_window_pattern\":6,\"rope_theta\":1000000.0,"
                        "\"rope_local_base_freq\":10000.0,\"query_pre_attn_scalar\":256}", &c));
    assert_true(c.arch == ATTN_DECODER_GEMMA3 && c.sliding_window == 512 && c.sliding_pattern == 6);
    assert_true(attn_decoder_layer_is_local(&c, 4) && !attn_decoder_layer_is_local(&c, 5));
    assert_true(c.rope_theta == 1e6 && c.rope_theta_local == 1e4 && c.tied_embeddings && c.post_norms);
    assert_true(c.attn_scale == 0.0625f && c.activation == ATTN_DECODER_GEGLU_TANH);
    assert_int_equal(c.rope_scaling, ATTN_ROPE_SCALING_NONE);

    /* RoPE scaling, as transformers' configs name it; each layer's options
     * are what attn_decoder_rope_options hands the forward. */
    attn_rope_options rope;
    assert_ok(config_of("{\"model_type\":\"gemma3_text\",\"hidden_size\":32,\"num_hidden_layers\":6,"
                        "\"num_attention_heads\":2,\"intermediate_size\":64,\"vocab_size\":256,\"head_dim\":16,"
                        "\"sliding_window\":512,\"rope_theta\":1000000.0,\"rope_local_base_freq\":10000.0,"
                        "\"rope_scaling\":{\"rope_type\":\"linear\",\"factor\":8.0}}", &c));
    assert_true(c.rope_scaling == ATTN_ROPE_SCALING_LINEAR && c.rope_factor == 8.0 && !c.rope_scale_local);
    attn_decoder_rope_options(&c, 5, &rope); /* global: scaled */
    assert_true(rope.scaling == ATTN_ROPE_SCALING_LINEAR && rope.factor == 8.0 && rope.theta == 1e6);
    attn_decoder_rope_options(&c, 0, &rope); /* local: its own theta, unscaled (as HF's Gemma 3) */
    assert_true(rope.scaling == ATTN_ROPE_SCALING_NONE && rope.theta == 1e4);
    assert_ok(config_of("{\"model_type\":\"qwen2\"," BASE ",\"max_position_embeddings\":32768,"
                        "\"rope_scaling\":{\"type\":\"yarn\",\"factor\":4.0,\"original_max_position_embeddings\":"
                        "32768},\"rope_theta\":1000000.0}", &c));
    attn_decoder_rope_options(&c, 2, &rope);
    assert_true(rope.scaling == ATTN_ROPE_SCALING_YARN && rope.factor == 4.0 && rope.theta == 1e6 &&
                rope.original_max_position_embeddings == 32768 && rope.beta_fast == 0.0 && !rope.yarn_no_truncate);
    /* yarn without a factor: HF takes max_position_embeddings / original. */
    assert_ok(config_of("{\"model_type\":\"qwen3\"," BASE ",\"max_position_embeddings\":131072,"
                        "\"rope_parameters\":{\"rope_type\":\"yarn\",\"original_max_position_embeddings\":32768,"
                        "\"beta_fast\":16,\"truncate\":false,\"rope_theta\":5e5}}", &c));
    assert_true(c.rope_factor == 4.0 && c.rope_beta_fast == 16.0 && c.rope_yarn_no_truncate && c.rope_scale_local);
    assert_ok(config_of("{\"model_type\":\"llama\"," BASE ",\"max_position_embeddings\":131072,"
                        "\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":32.0,\"low_freq_factor\":1.0,"
                        "\"high_freq_factor\":4.0,\"original_max_position_embeddings\":8192}}", &c));
    attn_decoder_rope_options(&c, 0, &rope);
    assert_true(rope.scaling == ATTN_ROPE_SCALING_LLAMA3 && rope.factor == 32.0 && rope.low_freq_factor == 1.0 &&
                rope.high_freq_factor == 4.0 && rope.original_max_position_embeddings == 8192);
    /* The limits: max_position_embeddings (here the extended length, llama3
     * trained at 8192 with factor 32 reaching 262144); partial rotary. */
    assert_int_equal(c.context_length, 131072);
    assert_int_equal(attn_decoder_context_limit(&c), 262144);
    assert_ok(config_of("{\"model_type\":\"qwen2\"," BASE ",\"max_position_embeddings\":64,"
                        "\"partial_rotary_factor\":0.5}", &c));
    assert_true(c.context_length == 64 && attn_decoder_context_limit(&c) == 64 && c.rope_dim == 4);
    attn_decoder_rope_options(&c, 0, &rope);
    assert_int_equal(rope.rotary_dim, 4);
    int beyond = -1;
    assert_ok(attn_decoder_check_context(&c, 60, 4, 0, &beyond));
    assert_int_equal(beyond, 0);
    assert_refused(attn_decoder_check_context(&c, 60, 5, 0, &beyond), ATTN_ERR_SHAPE,
                   "60 prompt tokens + 5 new ones = 65 positions, beyond the model's context of 64");
    assert_ok(attn_decoder_check_context(&c, 60, 5, 1, &beyond));
    assert_true(beyond == 1 && strstr(attn_last_error(), "never trained"));
    assert_ok(config_of("{\"model_type\":\"qwen2\"," BASE "}", &c)); /* no length: anything fits */
    assert_true(c.context_length == 0 && c.rope_dim == 8);
    assert_ok(attn_decoder_check_context(&c, 1 << 30, 1 << 30, 0, NULL));

    const struct {
        const char *row, *json;
        attn_status status;
        const char *keyword;
    } bad[] = {
        {"not JSON", "{\"model_type\":", ATTN_ERR_FORMAT, "not valid JSON"},
        {"not an object", "[]", ATTN_ERR_FORMAT, "not a JSON object"},
        {"no model_type", "{" BASE "}", ATTN_ERR_FORMAT, "model_type"},
        {"unknown model_type", "{\"model_type\":\"bert\"," BASE "}", ATTN_ERR_UNSUPPORTED, "bert"},
        {"multimodal gemma3", "{\"model_type\":\"gemma3\",\"text_config\":{}}", ATTN_ERR_UNSUPPORTED, "gemma3"},
        {"missing hidden_size", "{\"model_type\":\"llama\",\"num_hidden_layers\":3}", ATTN_ERR_FORMAT, "hidden_size"},
        {"string size", "{\"model_type\":\"llama\"," BASE ",\"head_dim\":\"8\"}", ATTN_ERR_FORMAT, "head_dim"},
        {"zero layers", "{\"model_type\":\"llama\",\"hidden_size\":32,\"num_hidden_layers\":0}", ATTN_ERR_FORMAT,
         "num_hidden_layers"},
        {"fractional heads", "{\"model_type\":\"llama\",\"hidden_size\":32,\"num_hidden_layers\":2,"
                             "\"num_attention_heads\":2.5}", ATTN_ERR_FORMAT, "num_attention_heads"},
        {"kv heads not dividing", "{\"model_type\":\"llama\"," BASE ",\"num_key_value_heads\":3}", ATTN_ERR_FORMAT,
         "kv heads"},
        {"odd head width", "{\"model_type\":\"llama\"," BASE ",\"head_dim\":7}", ATTN_ERR_FORMAT, "odd"},
        {"negative eps", "{\"model_type\":\"llama\"," BASE ",\"rms_norm_eps\":-1}", ATTN_ERR_FORMAT, "rms_norm_eps"},
        {"yarn without lengths", "{\"model_type\":\"qwen3\"," BASE ",\"rope_parameters\":{\"rope_type\":\"yarn\","
                                 "\"factor\":4}}", ATTN_ERR_FORMAT, "original_max_position_embeddings"},
        {"llama3 without factor", "{\"model_type\":\"llama\"," BASE ",\"max_position_embeddings\":64,"
                                  "\"rope_scaling\":{\"rope_type\":\"llama3\"}}", ATTN_ERR_FORMAT, "factor"},
        {"linear factor 0", "{\"model_type\":\"llama\"," BASE ",\"rope_scaling\":{\"type\":\"linear\",\"factor\":0}}",
         ATTN_ERR_FORMAT, "factor"},
        {"llama3 bands reversed", "{\"model_type\":\"llama\"," BASE ",\"max_position_embeddings\":64,"
                                  "\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8,\"low_freq_factor\":4,"
                                  "\"high_freq_factor\":1}}", ATTN_ERR_INVALID_ARGUMENT, "RoPE scaling"},
        {"dynamic NTK", "{\"model_type\":\"llama\"," BASE ",\"rope_scaling\":{\"type\":\"dynamic\",\"factor\":2}}",
         ATTN_ERR_UNSUPPORTED, "dynamic"},
        {"longrope", "{\"model_type\":\"llama\"," BASE ",\"rope_scaling\":{\"type\":\"longrope\"}}",
         ATTN_ERR_UNSUPPORTED, "longrope"},
        {"scaled sliding layers", "{\"model_type\":\"gemma3_text\"," BASE ",\"sliding_window\":4,\"rope_parameters\":"
                                  "{\"sliding_attention\":{\"rope_type\":\"linear\",\"factor\":2}}}",
         ATTN_ERR_UNSUPPORTED, "sliding"},
        {"partial rotary above 1", "{\"model_type\":\"llama\"," BASE ",\"partial_rotary_factor\":1.5}",
         ATTN_ERR_FORMAT, "partial_rotary_factor is 1.5: it rotates a fraction of each head, at most 1"},
        {"partial rotary of odd widths", "{\"model_type\":\"llama\"," BASE ",\"partial_rotary_factor\":0.375}",
         ATTN_ERR_FORMAT, "partial_rotary_factor 0.375 of head width 8 rotates 3 widths"},
        {"partial rotary of no width", "{\"model_type\":\"llama\"," BASE ",\"rope_parameters\":{"
                                       "\"partial_rotary_factor\":0.1}}", ATTN_ERR_FORMAT, "rotates 0 widths"},
        {"partial rotary on sliding layers", "{\"model_type\":\"gemma3_text\"," BASE ",\"sliding_window\":4,"
                                             "\"rope_parameters\":{\"sliding_attention\":{"
                                             "\"partial_rotary_factor\":0.5}}}", ATTN_ERR_UNSUPPORTED,
         "sliding-window layers rotate whole heads"},
        {"duplicate key", "{\"model_type\":\"llama\"," BASE ",\"rope_theta\":1e4,\"rope_theta\":5e5}",
         ATTN_ERR_FORMAT, "config.json: the key \"rope_theta\" is given twice in the top-level object (readers "
         "disagree on which one counts: Python's json takes the last, cJSON the first)"},
        {"duplicate nested key", "{\"model_type\":\"llama\"," BASE ",\"rope_scaling\":{\"type\":\"linear\","
                                 "\"factor\":2,\"factor\":4}}", ATTN_ERR_FORMAT,
         "the key \"factor\" is given twice in \"rope_scaling\""},
        {"duplicate key among many", "{\"model_type\":\"llama\"," BASE ",\"a\":1,\"b\":2,\"c\":3,\"d\":4,"
                                     "\"e\":5,\"f\":6,\"g\":7,\"h\":8,\"i\":9,\"j\":10,\"k\":11,\"l\":12,"
                                     "\"vocab_size\":256}", ATTN_ERR_FORMAT, "the key \"vocab_size\" is given twice"},
        {"attention bias", "{\"model_type\":\"llama\"," BASE ",\"attention_bias\":true}", ATTN_ERR_UNSUPPORTED,
         "attention_bias"},
        {"mlp bias", "{\"model_type\":\"llama\"," BASE ",\"mlp_bias\":true}", ATTN_ERR_UNSUPPORTED, "mlp_bias"},
        {"bias not a bool", "{\"model_type\":\"llama\"," BASE ",\"attention_bias\":1}", ATTN_ERR_FORMAT,
         "attention_bias"},
        {"activation", "{\"model_type\":\"llama\"," BASE ",\"hidden_act\":\"relu\"}", ATTN_ERR_UNSUPPORTED, "relu"},
        {"layer_types length", "{\"model_type\":\"qwen3\"," BASE ",\"layer_types\":[\"full_attention\"]}",
         ATTN_ERR_FORMAT, "layer_types"},
        {"layer_types no pattern", "{\"model_type\":\"gemma3_text\"," BASE ",\"sliding_window\":4,\"layer_types\":"
                                   "[\"full_attention\",\"sliding_attention\",\"full_attention\"]}",
         ATTN_ERR_UNSUPPORTED, "pattern"},
        {"layer_types unknown", "{\"model_type\":\"gemma3_text\"," BASE ",\"layer_types\":[\"x\",\"x\",\"x\"]}",
         ATTN_ERR_UNSUPPORTED, "layer_types[0]"},
        {"sliding without window", "{\"model_type\":\"gemma3_text\"," BASE ",\"sliding_window\":null}",
         ATTN_ERR_FORMAT, "sliding_window"},
        {"qwen sliding", "{\"model_type\":\"qwen2\"," BASE ",\"use_sliding_window\":true}", ATTN_ERR_UNSUPPORTED,
         "use_sliding_window"},
        {"softcapping", "{\"model_type\":\"gemma3_text\"," BASE ",\"sliding_window\":4,"
                        "\"final_logit_softcapping\":30.0}", ATTN_ERR_UNSUPPORTED, "final_logit_softcapping"},
        /* Found by model_config_fuzz: the scale 5.5e125^-1/2 rounds to 0 in float32. */
        {"scale underflows", "{\"model_type\":\"gemma3_text\"," BASE ",\"sliding_window\":4,"
                             "\"query_pre_attn_scalar\":5.5e125}", ATTN_ERR_FORMAT, "attention scale is 0"},
        {"scale overflows", "{\"model_type\":\"gemma3_text\"," BASE ",\"sliding_window\":4,"
                            "\"query_pre_attn_scalar\":1e-300}", ATTN_ERR_FORMAT, "attention scale is inf"},
        {"huge vocab", "{\"model_type\":\"llama\",\"hidden_size\":2147483648,\"num_hidden_layers\":3,"
                       "\"num_attention_heads\":1,\"intermediate_size\":1,\"vocab_size\":2147483648}",
         ATTN_ERR_OVERFLOW, "overflow"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const attn_status got = config_of(bad[i].json, &c);
        if (got != bad[i].status || !strstr(attn_last_error(), bad[i].keyword))
            fail_msg("config row '%s': status %d (expected %d): '%s'", bad[i].row, (int)got, (int)bad[i].status,
                     attn_last_error());
    }
    assert_refused(attn_decoder_config_from_json("{\"model_type\":\0}", 16, &c), ATTN_ERR_FORMAT, "NUL");
}

/* config.json of each architecture the decoder lists (attn_decoder_architecture)
 * is read, and an unknown model_type's refusal names every one. */
static void config_architectures(void **state) {
    (void)state;
    attn_decoder_config c;
    assert_int_equal(config_of("{\"model_type\":\"bert\"," BASE "}", &c), ATTN_ERR_UNSUPPORTED);
    char message[512];
    snprintf(message, sizeof message, "%s", attn_last_error());
    for (int i = 0; attn_decoder_architecture(i); i++) {
        const char *name = attn_decoder_architecture(i);
        if (!strstr(message, name)) fail_msg("'%s' is not in: %s", name, message);
        char json[512];
        /* gemma3's model_type is gemma3_text (a bare gemma3 without text_config reads too). */
        snprintf(json, sizeof json, "{\"model_type\":\"%s\"," BASE ",\"sliding_window\":4}", name);
        assert_ok(config_of(json, &c));
        assert_string_equal(c.architecture, name);
    }
}

/* A checkpoint whose embedding has the wrong shape: the message names it. */
static void wrong_shape_named(void **state) {
    (void)state;
    write_text("config.json", "{\"model_type\":\"llama\",\"hidden_size\":4,\"num_hidden_layers\":1,"
                              "\"num_attention_heads\":2,\"intermediate_size\":4,\"vocab_size\":3,"
                              "\"tie_word_embeddings\":true}");
    write_shard("model.safetensors", "{" T("model.embed_tokens.weight", "F32", "[4,3]", "0", "48") "}", 48);
    attn_decoder *m = NULL;
    assert_refused(attn_decoder_load_safetensors(tmpdir, &m), ATTN_ERR_FORMAT,
                   "'model.embed_tokens.weight' has shape [4, 3], expected [3, 4]");
    assert_null(m);
    write_shard("model.safetensors", "{" T("model.embed_tokens.weight", "F32", "[3,4]", "0", "48") "}", 48);
    assert_refused(attn_decoder_load_safetensors(tmpdir, &m), ATTN_ERR_FORMAT, "model.norm.weight");
    char path[256];
    snprintf(path, sizeof path, "%s/model.safetensors", tmpdir);
    assert_refused(attn_decoder_load_safetensors(path, &m), ATTN_ERR_FORMAT, "model.norm.weight");
    snprintf(path, sizeof path, "%s/config.json", tmpdir);
    unlink(path);
    assert_refused(attn_decoder_load_safetensors(tmpdir, &m), ATTN_ERR_IO, "config.json");
    /* No weights: the checkpoint is named, not the config. */
    remove_all();
    assert_refused(attn_decoder_load_safetensors(tmpdir, &m), ATTN_ERR_IO, "model.safetensors");
    snprintf(path, sizeof path, "%s/nothing.safetensors", tmpdir);
    assert_refused(attn_decoder_load_safetensors(path, &m), ATTN_ERR_IO, "nothing.safetensors");
}

/* A tiny llama checkpoint (d 2, one head of width 2, FFN 2, tied) with the
 * vocabulary vocab, one layer's tensors and extra, each tensor's bytes as
 * build() writes them (byte i holds i & 0xFF: finite floats under byte 252,
 * where the first NaN's bit pattern 0xfffefdfc lies). */
static void write_tiny_llama(int64_t vocab, int64_t layers, const char *extra) {
    char config[256];
    snprintf(config, sizeof config, "{\"model_type\":\"llama\",\"hidden_size\":2,\"num_hidden_layers\":%lld,"
             "\"num_attention_heads\":1,\"intermediate_size\":2,\"vocab_size\":%lld,\"tie_word_embeddings\":true}",
             (long long)layers, (long long)vocab);
    write_text("config.json", config);
    const char *names[16] = {"model.embed_tokens.weight", "model.norm.weight", "model.layers.0.input_layernorm.weight",
                             "model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.k_proj.weight",
                             "model.layers.0.self_attn.v_proj.weight", "model.layers.0.self_attn.o_proj.weight",
                             "model.layers.0.post_attention_layernorm.weight", "model.layers.0.mlp.gate_proj.weight",
                             "model.layers.0.mlp.up_proj.weight", "model.layers.0.mlp.down_proj.weight", extra};
    char header[4096] = "{";
    size_t at = 0;
    for (int i = 0; names[i]; i++) {
        const int vector = strstr(names[i], "norm") != NULL || (extra && names[i] == extra);
        const int64_t n_rows = i == 0 ? vocab : 2, bytes = (vector ? 2 : n_rows * 2) * 4;
        char shape[32], entry[256];
        if (vector) snprintf(shape, sizeof shape, "[2]");
        else snprintf(shape, sizeof shape, "[%lld,2]", (long long)n_rows);
        snprintf(entry, sizeof entry, "%s\"%s\":{\"dtype\":\"F32\",\"shape\":%s,\"data_offsets\":[%zu,%zu]}",
                 i ? "," : "", names[i], shape, at, at + (size_t)bytes);
        strcat(header, entry);
        at += (size_t)bytes;
    }
    strcat(header, "}");
    write_shard("model.safetensors", header, at);
}

/* Issue 38's refusals on a checkpoint: a tensor no part of the model reads,
 * layers past num_hidden_layers, NaN weights (named with the row). */
static void limits_named(void **state) {
    (void)state;
    attn_decoder *m = NULL;
    write_tiny_llama(2, 1, NULL);
    assert_ok(attn_decoder_load_safetensors(tmpdir, &m));
    attn_decoder_free(m);
    /* Older checkpoints' RoPE tables are not weights (transformers skips them). */
    write_tiny_llama(2, 1, "model.layers.0.self_attn.rotary_emb.inv_freq");
    assert_ok(attn_decoder_load_safetensors(tmpdir, &m));
    attn_decoder_free(m);
    write_tiny_llama(2, 1, "model.layers.0.mlp.act_scale");
    assert_refused(attn_decoder_load_safetensors(tmpdir, &m), ATTN_ERR_FORMAT,
                   "1 tensor is used by no part of the model ('model.layers.0.mlp.act_scale')");
    assert_null(m);
    write_tiny_llama(2, 1, "model.layers.1.input_layernorm.weight");
    assert_refused(attn_decoder_load_safetensors(tmpdir, &m), ATTN_ERR_FORMAT,
                   "1 tensor is used by no layer ('model.layers.1.input_layernorm.weight'): the file holds layers "
                   "0..1, but config.json's num_hidden_layers is 1");
    /* A layer missing a tensor: num_hidden_layers 2 with one layer's tensors. */
    write_tiny_llama(2, 2, NULL);
    assert_refused(attn_decoder_load_safetensors(tmpdir, &m), ATTN_ERR_FORMAT,
                   "no tensor 'model.layers.1.input_layernorm.weight' in the checkpoint");
    /* Vocabulary 20: the embedding takes bytes 0..160, and byte 252 (NaN)
     * falls in the gate's [2, 2] at bytes 248..264: row 0, column 1. */
    write_tiny_llama(20, 1, NULL);
    assert_refused(attn_decoder_load_safetensors(tmpdir, &m), ATTN_ERR_FORMAT,
                   "tensor 'model.layers.0.mlp.gate_proj.weight' holds NaN at row 0, column 1");
    remove_all();
}

static int make_tmpdir(void **state) {
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/attn-st-XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int remove_tmpdir(void **state) {
    (void)state;
    remove_all();
    return rmdir(tmpdir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(valid_fields), cmocka_unit_test(every_row),   cmocka_unit_test(every_prefix),
        cmocka_unit_test(shards),       cmocka_unit_test(config_json), cmocka_unit_test(config_architectures),
        cmocka_unit_test(limits_named),
        cmocka_unit_test(wrong_shape_named),
        cmocka_unit_test(not_regular_files),
    };
    return cmocka_run_group_tests(tests, make_tmpdir, remove_tmpdir);
}
