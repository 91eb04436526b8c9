/*
 * test_gguf.c — the GGUF reader on good files: metadata of every type as
 * two independent writers wrote it (this test's byte builder, and gguf-py's
 * GGUFWriter: tests/fixtures/gguf/metadata.gguf), and the dequantization of
 * every converted type against the gguf package's numpy reference, bit for
 * bit (tests/fixtures/gguf/types.gguf and types/NAME.npy, made by
 * tests/fixtures/make_gguf_fixtures.py).  Bad files: test_hostile_gguf.c;
 * the real models: test_gguf_models.c.
 *
 * Shape legend: GGUF dims [D0, D1, ...] (D0 fastest) are numpy's shape
 * reversed; a row is D0 elements.
 */
#include "testutil.h"
#include "gguf_builder.h"

#include "attn.h"
#include "attn_io.h"
#include "attn_decoder.h"
#include "attn_gguf.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FIXTURES ATTN_SOURCE_DIR "/tests/fixtures/gguf"

static void assert_string(const attn_gguf *g, const char *key, const void *want, size_t want_len) {
    const char *s;
    size_t len;
    assert_ok(attn_gguf_get_string(g, key, &s, &len));
    assert_int_equal(len, want_len);
    assert_memory_equal(s, want, want_len);
}

static uint32_t f32_bits(float f) {
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    return b;
}

/* The float32 values as bits, so that NaN payloads and -0 count. */
static void assert_same_bits(const float *got, const float *want, int64_t n, const char *what) {
    for (int64_t i = 0; i < n; i++)
        if (f32_bits(got[i]) != f32_bits(want[i]))
            fail_msg("%s: element %lld is %.9g (0x%08x), the reference %.9g (0x%08x)", what, (long long)i,
                     (double)got[i], f32_bits(got[i]), (double)want[i], f32_bits(want[i]));
}

/* ------------------------------------------------- metadata by gguf-py */

/* The values make_gguf_fixtures.py's write_metadata wrote. */
static void metadata_written_by_gguf_py(void **state) {
    (void)state;
    attn_gguf *g;
    assert_ok(attn_gguf_open(FIXTURES "/metadata.gguf", &g));
    attn_gguf_info info;
    attn_gguf_describe(g, &info);
    assert_int_equal(info.version, 3);
    assert_int_equal(info.n_keys, 25);
    assert_int_equal(info.n_tensors, 2);
    assert_int_equal(info.alignment, 64);
    assert_int_equal(info.data_offset % 64, 0);

    const char *key;
    attn_gguf_value v;
    assert_ok(attn_gguf_key_at(g, 0, &key, &v));
    assert_string_equal(key, "general.architecture");
    assert_ok(attn_gguf_key_at(g, 1, &key, NULL));
    assert_string_equal(key, "general.alignment");
    assert_string(g, "general.architecture", "attn-fixture", 12);

    uint32_t u32;
    int32_t i32;
    uint64_t u64;
    int64_t i64;
    float f32;
    double f64;
    int b;
    assert_ok(attn_gguf_get_value(g, "test.uint8", &v));
    assert_int_equal(v.type, ATTN_GGUF_VALUE_UINT8);
    assert_ok(attn_gguf_get_u32(g, "test.uint8", &u32));
    assert_int_equal(u32, 200);
    assert_ok(attn_gguf_get_i32(g, "test.int8", &i32));
    assert_int_equal(i32, -100);
    assert_ok(attn_gguf_get_u32(g, "test.uint16", &u32));
    assert_int_equal(u32, 60000);
    assert_ok(attn_gguf_get_i32(g, "test.int16", &i32));
    assert_int_equal(i32, -30000);
    assert_ok(attn_gguf_get_u32(g, "test.uint32", &u32));
    assert_int_equal(u32, 4000000000u);
    assert_ok(attn_gguf_get_i32(g, "test.int32", &i32));
    assert_int_equal(i32, -2000000000);
    assert_ok(attn_gguf_get_f32(g, "test.float32", &f32));
    assert_true(f32 == 0.1f);
    assert_ok(attn_gguf_get_bool(g, "test.bool", &b));
    assert_int_equal(b, 1);
    assert_string(g, "test.string", "h\xc3\xa9llo, \xe4\xb8\x96\xe7\x95\x8c", 14);
    assert_string(g, "test.empty_string", "", 0);
    assert_ok(attn_gguf_get_u64(g, "test.uint64", &u64));
    assert_true(u64 == (1ull << 63) + 5);
    assert_ok(attn_gguf_get_i64(g, "test.int64", &i64));
    assert_true(i64 == -(1ll << 62) - 7);
    assert_ok(attn_gguf_get_f64(g, "test.float64", &f64));
    assert_true(f64 == 0.1);

    /* Arrays of every element type. */
    static const struct {
        const char *key;
        attn_gguf_value_type type;
        int64_t ints[3];
        int n;
    } int_arrays[] = {
        {"test.array.uint8", ATTN_GGUF_VALUE_UINT8, {1, 2, 255}, 3},
        {"test.array.int32", ATTN_GGUF_VALUE_INT32, {-1, 0, 2147483647}, 3},
        {"test.array.bool", ATTN_GGUF_VALUE_BOOL, {1, 0, 1}, 3},
        {"test.array.int64", ATTN_GGUF_VALUE_INT64, {INT64_MIN, INT64_MAX}, 2},
    };
    for (size_t a = 0; a < sizeof int_arrays / sizeof int_arrays[0]; a++) {
        assert_ok(attn_gguf_get_array(g, int_arrays[a].key, (int)int_arrays[a].type, &v));
        assert_int_equal(v.count, int_arrays[a].n);
        for (int i = 0; i < int_arrays[a].n; i++) {
            assert_ok(attn_gguf_array_int(&v, (uint64_t)i, &i64));
            assert_true(i64 == int_arrays[a].ints[i]);
        }
    }
    assert_ok(attn_gguf_get_array(g, "test.array.uint64", ATTN_GGUF_VALUE_UINT64, &v));
    assert_refused(attn_gguf_array_int(&v, 0, &i64), ATTN_ERR_FORMAT, "past the int64 range");
    assert_ok(attn_gguf_array_int(&v, 1, &i64));
    assert_int_equal(i64, 0);
    assert_ok(attn_gguf_get_array(g, "test.array.float32", ATTN_GGUF_VALUE_FLOAT32, &v));
    const float want_f32[] = {0.5f, -1.25f, 0.1f};
    for (int i = 0; i < 3; i++) {
        assert_ok(attn_gguf_array_float(&v, (uint64_t)i, &f64));
        assert_true((float)f64 == want_f32[i]);
    }
    assert_ok(attn_gguf_get_array(g, "test.array.float64", ATTN_GGUF_VALUE_FLOAT64, &v));
    assert_ok(attn_gguf_array_float(&v, 0, &f64));
    assert_true(f64 == 0.1);
    assert_ok(attn_gguf_array_float(&v, 1, &f64));
    assert_true(f64 == -2.5);

    assert_ok(attn_gguf_get_array(g, "test.array.string", ATTN_GGUF_VALUE_STRING, &v));
    const char *want_strings[] = {"a", "", "\xe4\xb8\x96\xe7\x95\x8c"};
    uint64_t cursor = 0;
    attn_gguf_value e;
    for (int i = 0; i < 3; i++) {
        assert_ok(attn_gguf_array_next(&v, &cursor, &e));
        assert_int_equal(e.type, ATTN_GGUF_VALUE_STRING);
        assert_int_equal(e.size, strlen(want_strings[i]));
        assert_memory_equal(e.data, want_strings[i], e.size);
    }
    assert_refused(attn_gguf_array_next(&v, &cursor, &e), ATTN_ERR_INVALID_ARGUMENT, "past the last");

    /* [[1, 2], [3]]: arrays of int32 arrays. */
    assert_ok(attn_gguf_get_array(g, "test.array.nested", ATTN_GGUF_VALUE_ARRAY, &v));
    assert_int_equal(v.count, 2);
    cursor = 0;
    const int64_t nested[2][2] = {{1, 2}, {3, 0}};
    for (int i = 0; i < 2; i++) {
        assert_ok(attn_gguf_array_next(&v, &cursor, &e));
        assert_int_equal(e.type, ATTN_GGUF_VALUE_ARRAY);
        assert_int_equal(e.elem_type, ATTN_GGUF_VALUE_INT32);
        assert_int_equal(e.count, 2 - i);
        for (uint64_t j = 0; j < e.count; j++) {
            assert_ok(attn_gguf_array_int(&e, j, &i64));
            assert_int_equal(i64, nested[i][j]);
        }
    }
    /* [["x"], ["y", "zz"]] */
    assert_ok(attn_gguf_get_array(g, "test.array.nested_strings", ATTN_GGUF_VALUE_ARRAY, &v));
    cursor = 0;
    assert_ok(attn_gguf_array_next(&v, &cursor, &e));
    assert_ok(attn_gguf_array_next(&v, &cursor, &e));
    uint64_t inner = 0;
    attn_gguf_value s;
    assert_ok(attn_gguf_array_next(&e, &inner, &s));
    assert_ok(attn_gguf_array_next(&e, &inner, &s));
    assert_int_equal(s.size, 2);
    assert_memory_equal(s.data, "zz", 2);

    /* The two tensors: a = arange(3) float32, b = arange(5) float16 as (1, 5). */
    attn_gguf_tensor t;
    float row[5];
    assert_ok(attn_gguf_find_tensor(g, "a", &t));
    assert_int_equal(t.type, ATTN_GGUF_TYPE_F32);
    assert_int_equal(t.n_dims, 1);
    assert_int_equal(t.dims[0], 3);
    assert_int_equal(t.offset % 64, 0);
    assert_ok(attn_gguf_dequantize_rows(g, &t, 0, 1, row));
    for (int i = 0; i < 3; i++) assert_true(row[i] == (float)i);
    assert_ok(attn_gguf_find_tensor(g, "b", &t));
    assert_int_equal(t.type, ATTN_GGUF_TYPE_F16);
    assert_int_equal(t.n_dims, 2);
    assert_int_equal(t.dims[0], 5);
    assert_int_equal(t.dims[1], 1);
    assert_int_equal(t.offset % 64, 0);
    assert_ok(attn_gguf_dequantize_rows(g, &t, 0, 1, row));
    for (int i = 0; i < 5; i++) assert_true(row[i] == (float)i);
    attn_gguf_free(g);
}

/* ----------------------------------------- metadata by the byte builder */

#define V_U8 ATTN_GGUF_VALUE_UINT8
#define V_I8 ATTN_GGUF_VALUE_INT8
#define V_U16 ATTN_GGUF_VALUE_UINT16
#define V_I16 ATTN_GGUF_VALUE_INT16
#define V_U32 ATTN_GGUF_VALUE_UINT32
#define V_I32 ATTN_GGUF_VALUE_INT32
#define V_F32 ATTN_GGUF_VALUE_FLOAT32
#define V_BOOL ATTN_GGUF_VALUE_BOOL
#define V_STR ATTN_GGUF_VALUE_STRING
#define V_ARR ATTN_GGUF_VALUE_ARRAY
#define V_U64 ATTN_GGUF_VALUE_UINT64
#define V_I64 ATTN_GGUF_VALUE_INT64
#define V_F64 ATTN_GGUF_VALUE_FLOAT64

/* A file with a key of every type at its extremes, arrays of every type
 * (empty, nested three deep), a string holding NUL and non-UTF-8 bytes,
 * and tensors of 4 dimensions and of a type attn sizes but does not
 * convert (Q2_K). */
#define ROUND_TRIP_KEYS 22
static void build_every_type(gguf_bytes *b, uint32_t version) {
    gb_header(b, version, 2, ROUND_TRIP_KEYS);
    gb_key(b, "u8", V_U8), gb_u8(b, 250);
    gb_key(b, "i8", V_I8), gb_u8(b, 0x80);
    gb_key(b, "u16", V_U16), gb_u16(b, 65535);
    gb_key(b, "i16", V_I16), gb_u16(b, 0x8000);
    gb_key(b, "u32", V_U32), gb_u32(b, UINT32_MAX);
    gb_key(b, "i32", V_I32), gb_u32(b, 0x80000000u);
    gb_key(b, "f32", V_F32), gb_f32(b, 3.25f);
    gb_key(b, "bool", V_BOOL), gb_u8(b, 0);
    gb_key(b, "str", V_STR), gb_strn(b, "a\0b\xff", 4);
    gb_key(b, "u64", V_U64), gb_u64(b, UINT64_MAX);
    gb_key(b, "i64", V_I64), gb_u64(b, 1ull << 63);
    gb_key(b, "f64", V_F64), gb_f64(b, -1e300);
    gb_key(b, "arr.u16", V_ARR), gb_array(b, V_U16, 2), gb_u16(b, 1), gb_u16(b, 65535);
    gb_key(b, "arr.i8", V_ARR), gb_array(b, V_I8, 2), gb_u8(b, 0xFF), gb_u8(b, 127);
    gb_key(b, "arr.i16", V_ARR), gb_array(b, V_I16, 1), gb_u16(b, 0x8000);
    gb_key(b, "arr.u32", V_ARR), gb_array(b, V_U32, 2), gb_u32(b, 7), gb_u32(b, UINT32_MAX);
    gb_key(b, "arr.empty", V_ARR), gb_array(b, V_U8, 0);
    gb_key(b, "arr.str", V_ARR), gb_array(b, V_STR, 3), gb_str(b, ""), gb_str(b, "x"), gb_str(b, "yz");
    /* [[[1]], []] of int64 */
    gb_key(b, "arr.nested", V_ARR), gb_array(b, V_ARR, 2);
    gb_array(b, V_ARR, 1), gb_array(b, V_I64, 1), gb_u64(b, 1);
    gb_array(b, V_I64, 0);
    gb_key(b, "arr.f64", V_ARR), gb_array(b, V_F64, 2), gb_f64(b, 0.25), gb_f64(b, -0.0);
    gb_key(b, "arr.bool", V_ARR), gb_array(b, V_BOOL, 2), gb_u8(b, 1), gb_u8(b, 0);
    gb_key(b, "general.alignment", V_U32), gb_u32(b, 16);
    const uint64_t dims4[] = {2, 1, 3, 1}, dims_q2[] = {256};
    gb_tensor(b, "four", 4, dims4, ATTN_GGUF_TYPE_F32, 0);
    gb_tensor(b, "q2", 1, dims_q2, ATTN_GGUF_TYPE_Q2_K, 32);
    gb_pad(b, 16);
    for (int i = 0; i < 6; i++) gb_f32(b, (float)i - 2.5f);
    gb_zeros(b, 8 + 84); /* to offset 32, then one Q2_K block */
}

static void metadata_round_trips(void **state) {
    (void)state;
    for (uint32_t version = 2; version <= 3; version++) {
        gguf_bytes b = {0};
        build_every_type(&b, version);
        attn_gguf *g;
        assert_ok(attn_gguf_parse(b.data, b.len, &g));
        attn_gguf_info info;
        attn_gguf_describe(g, &info);
        assert_int_equal(info.version, version);
        assert_int_equal(info.n_keys, ROUND_TRIP_KEYS);
        assert_int_equal(info.alignment, 16);

        /* File order, and every key found by name. */
        static const char *const order[ROUND_TRIP_KEYS] = {
            "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "str", "u64", "i64", "f64", "arr.u16", "arr.i8",
            "arr.i16", "arr.u32", "arr.empty", "arr.str", "arr.nested", "arr.f64", "arr.bool", "general.alignment"};
        for (int i = 0; i < ROUND_TRIP_KEYS; i++) {
            const char *key;
            assert_ok(attn_gguf_key_at(g, i, &key, NULL));
            assert_string_equal(key, order[i]);
            assert_int_equal(attn_gguf_key_index(g, order[i]), i);
        }

        uint32_t u32;
        int32_t i32;
        uint64_t u64;
        int64_t i64;
        float f32;
        double f64;
        int flag;
        assert_ok(attn_gguf_get_u32(g, "u8", &u32));
        assert_int_equal(u32, 250);
        assert_ok(attn_gguf_get_i64(g, "i8", &i64));
        assert_int_equal(i64, -128);
        assert_ok(attn_gguf_get_u32(g, "u16", &u32));
        assert_int_equal(u32, 65535);
        assert_ok(attn_gguf_get_i32(g, "i16", &i32));
        assert_int_equal(i32, -32768);
        assert_ok(attn_gguf_get_u32(g, "u32", &u32));
        assert_int_equal(u32, UINT32_MAX);
        assert_ok(attn_gguf_get_i32(g, "i32", &i32));
        assert_int_equal(i32, INT32_MIN);
        assert_ok(attn_gguf_get_f32(g, "f32", &f32));
        assert_true(f32 == 3.25f);
        assert_ok(attn_gguf_get_f64(g, "f32", &f64));
        assert_true(f64 == 3.25);
        assert_ok(attn_gguf_get_bool(g, "bool", &flag));
        assert_int_equal(flag, 0);
        assert_string(g, "str", "a\0b\xff", 4);
        assert_ok(attn_gguf_get_u64(g, "u64", &u64));
        assert_true(u64 == UINT64_MAX);
        assert_ok(attn_gguf_get_i64(g, "i64", &i64));
        assert_true(i64 == INT64_MIN);
        assert_ok(attn_gguf_get_f64(g, "f64", &f64));
        assert_true(f64 == -1e300);

        /* Typed getters refuse what does not fit, naming the key. */
        assert_refused(attn_gguf_get_u32(g, "i8", &u32), ATTN_ERR_FORMAT, "key 'i8' is -128, outside the range of uint32");
        assert_refused(attn_gguf_get_i32(g, "u32", &i32), ATTN_ERR_FORMAT, "key 'u32' is 4294967295, outside the range of int32");
        assert_refused(attn_gguf_get_i64(g, "u64", &i64), ATTN_ERR_FORMAT, "outside the range of int64");
        assert_refused(attn_gguf_get_u64(g, "i64", &u64), ATTN_ERR_FORMAT, "outside the range of uint64");
        assert_refused(attn_gguf_get_u32(g, "str", &u32), ATTN_ERR_FORMAT, "key 'str' is a string, not an integer");
        assert_refused(attn_gguf_get_f32(g, "f64", &f32), ATTN_ERR_FORMAT, "key 'f64' is a float64, not a float32");
        assert_refused(attn_gguf_get_f64(g, "u8", &f64), ATTN_ERR_FORMAT, "not a float64 or a float32");
        assert_refused(attn_gguf_get_bool(g, "u8", &flag), ATTN_ERR_FORMAT, "key 'u8' is a uint8, not a bool");
        assert_refused(attn_gguf_get_string(g, "u8", NULL, NULL), ATTN_ERR_FORMAT, "not a string");
        assert_refused(attn_gguf_get_u32(g, "nothing.here", &u32), ATTN_ERR_FORMAT, "no key 'nothing.here'");
        attn_gguf_value v;
        assert_refused(attn_gguf_get_array(g, "u8", -1, &v), ATTN_ERR_FORMAT, "not a array");
        assert_refused(attn_gguf_get_array(g, "arr.str", V_U8, &v), ATTN_ERR_FORMAT,
                       "key 'arr.str' is an array of string, not of uint8");
        /* Looking up an absent key sets no error. */
        attn_set_error(ATTN_ERR_INTERNAL, "a marker");
        assert_int_equal(attn_gguf_key_index(g, "absent"), -1);
        assert_int_equal(attn_gguf_tensor_index(g, "absent"), -1);
        assert_string_equal(attn_last_error(), "a marker");

        static const struct {
            const char *key;
            int64_t want[2];
            uint64_t n;
        } ints[] = {{"arr.u16", {1, 65535}, 2}, {"arr.i8", {-1, 127}, 2}, {"arr.i16", {-32768, 0}, 1},
                    {"arr.u32", {7, UINT32_MAX}, 2}, {"arr.bool", {1, 0}, 2}, {"arr.empty", {0, 0}, 0}};
        for (size_t a = 0; a < sizeof ints / sizeof ints[0]; a++) {
            assert_ok(attn_gguf_get_array(g, ints[a].key, -1, &v));
            assert_int_equal(v.count, ints[a].n);
            for (uint64_t i = 0; i < ints[a].n; i++) {
                assert_ok(attn_gguf_array_int(&v, i, &i64));
                assert_true(i64 == ints[a].want[i]);
            }
            assert_refused(attn_gguf_array_int(&v, ints[a].n, &i64), ATTN_ERR_INVALID_ARGUMENT, "element");
            assert_refused(attn_gguf_array_float(&v, 0, &f64), ints[a].n ? ATTN_ERR_FORMAT : ATTN_ERR_INVALID_ARGUMENT,
                           "attn_gguf_array_float");
        }
        assert_ok(attn_gguf_get_array(g, "arr.f64", V_F64, &v));
        assert_ok(attn_gguf_array_float(&v, 1, &f64));
        assert_true(f64 == 0.0 && signbit(f64));
        assert_refused(attn_gguf_array_int(&v, 0, &i64), ATTN_ERR_FORMAT, "not integers");
        /* An empty array: nothing to walk. */
        uint64_t cursor = 0;
        attn_gguf_value e;
        assert_ok(attn_gguf_get_array(g, "arr.empty", V_U8, &v));
        assert_refused(attn_gguf_array_next(&v, &cursor, &e), ATTN_ERR_INVALID_ARGUMENT, "past the last of 0");

        assert_ok(attn_gguf_get_array(g, "arr.str", V_STR, &v));
        assert_refused(attn_gguf_array_int(&v, 0, &i64), ATTN_ERR_INVALID_ARGUMENT, "walk them with attn_gguf_array_next");
        const char *strs[] = {"", "x", "yz"};
        for (int i = 0; i < 3; i++) {
            assert_ok(attn_gguf_array_next(&v, &cursor, &e));
            assert_int_equal(e.count, strlen(strs[i]));
            assert_memory_equal(e.data, strs[i], e.count);
        }

        /* [[[1]], []] */
        assert_ok(attn_gguf_get_array(g, "arr.nested", V_ARR, &v));
        cursor = 0;
        attn_gguf_value level2;
        assert_ok(attn_gguf_array_next(&v, &cursor, &e));
        assert_int_equal(e.elem_type, V_ARR);
        uint64_t c2 = 0;
        assert_ok(attn_gguf_array_next(&e, &c2, &level2));
        assert_int_equal(level2.elem_type, V_I64);
        assert_ok(attn_gguf_array_int(&level2, 0, &i64));
        assert_int_equal(i64, 1);
        assert_ok(attn_gguf_array_next(&v, &cursor, &e));
        assert_int_equal(e.count, 0);
        assert_int_equal(e.elem_type, V_I64);
        assert_int_equal(cursor, v.size);

        /* A value made up by the caller cannot lead the walk outside it. */
        const uint8_t lies[12] = {100, 0, 0, 0, 0, 0, 0, 0, 'a', 'b', 'c', 'd'}; /* a string "of 100 bytes" */
        attn_gguf_value forged = {.type = V_ARR, .elem_type = V_STR, .count = 1, .data = lies, .size = sizeof lies};
        cursor = 0;
        assert_refused(attn_gguf_array_next(&forged, &cursor, &e), ATTN_ERR_FORMAT, "runs past the end");

        /* The tensors: 4-D F32, and a type that is sized but not converted. */
        attn_gguf_tensor t;
        float out[6];
        assert_ok(attn_gguf_find_tensor(g, "four", &t));
        assert_int_equal(t.n_dims, 4);
        assert_int_equal(t.n_rows, 3);
        assert_int_equal(t.row_bytes, 8);
        assert_ok(attn_gguf_dequantize_rows(g, &t, 0, 3, out));
        for (int i = 0; i < 6; i++) assert_true(out[i] == (float)i - 2.5f);
        assert_ok(attn_gguf_find_tensor(g, "q2", &t));
        assert_int_equal(t.n_bytes, 84);
        assert_false(attn_gguf_type_dequantizable(t.type));
        assert_refused(attn_gguf_dequantize_rows(g, &t, 0, 1, out), ATTN_ERR_UNSUPPORTED,
                       "tensor 'q2' is of type Q2_K, which attn does not convert");
        assert_refused(attn_gguf_find_tensor(g, "five", &t), ATTN_ERR_FORMAT, "no tensor 'five'");
        attn_gguf_free(g);
        gb_free(&b);
    }
}

/* ------------------------------------------------- dequantization */

/* The converted types; each must appear in types.gguf. */
static const attn_gguf_tensor_type converted[] = {
    ATTN_GGUF_TYPE_F32,  ATTN_GGUF_TYPE_F16,  ATTN_GGUF_TYPE_BF16, ATTN_GGUF_TYPE_Q8_0,
    ATTN_GGUF_TYPE_Q4_0, ATTN_GGUF_TYPE_Q4_1, ATTN_GGUF_TYPE_Q5_0, ATTN_GGUF_TYPE_Q5_1,
    ATTN_GGUF_TYPE_Q4_K, ATTN_GGUF_TYPE_Q5_K, ATTN_GGUF_TYPE_Q6_K};
#define N_CONVERTED (sizeof converted / sizeof converted[0])

/* Every tensor of g against its reference, whole and row by row. */
static void check_against_reference(const attn_gguf *g, int *seen) {
    attn_gguf_info info;
    attn_gguf_describe(g, &info);
    for (int64_t i = 0; i < info.n_tensors; i++) {
        attn_gguf_tensor t;
        assert_ok(attn_gguf_tensor_at(g, i, &t));
        char path[600];
        snprintf(path, sizeof path, FIXTURES "/types/%s.npy", t.name);
        attn_array want;
        assert_ok(attn_npy_load(path, &want));
        assert_int_equal(want.dtype, ATTN_F32);
        /* numpy's shape is GGUF's dims reversed. */
        assert_int_equal(want.ndim, t.n_dims);
        for (int d = 0; d < t.n_dims; d++) assert_int_equal(want.shape[d], t.dims[t.n_dims - 1 - d]);
        assert_int_equal(want.count, t.n_elements);
        float *got = malloc((size_t)t.n_elements * sizeof *got);
        assert_ok(attn_gguf_dequantize_rows(g, &t, 0, t.n_rows, got));
        assert_same_bits(got, want.data, t.n_elements, t.name);
        /* One row at a time, and the middle rows: the same bits. */
        memset(got, 0, (size_t)t.n_elements * sizeof *got);
        for (int64_t r = 0; r < t.n_rows; r++) assert_ok(attn_gguf_dequantize_rows(g, &t, r, 1, got + r * t.dims[0]));
        assert_same_bits(got, want.data, t.n_elements, t.name);
        if (t.n_rows > 2) {
            assert_ok(attn_gguf_dequantize_rows(g, &t, 1, t.n_rows - 2, got));
            assert_same_bits(got, (const float *)want.data + t.dims[0], (t.n_rows - 2) * t.dims[0], t.name);
        }
        /* The blocks alone, without the file. */
        assert_ok(attn_gguf_dequantize(t.type, t.data, (size_t)t.n_bytes, t.n_elements, got));
        assert_same_bits(got, want.data, t.n_elements, t.name);
        for (size_t c = 0; c < N_CONVERTED; c++) seen[c] += converted[c] == t.type;
        free(got);
        attn_array_free(&want);
    }
}

static void dequantize_matches_gguf_py(void **state) {
    (void)state;
    attn_gguf *g;
    assert_ok(attn_gguf_open(FIXTURES "/types.gguf", &g));
    int seen[N_CONVERTED] = {0};
    check_against_reference(g, seen);
    for (size_t c = 0; c < N_CONVERTED; c++)
        if (!seen[c]) fail_msg("types.gguf holds no %s tensor", attn_gguf_type_name(converted[c]));
    attn_gguf_free(g);

    /* From memory at an odd address: nothing needs alignment. */
    size_t size;
    uint8_t *image = test_read_file(FIXTURES "/types.gguf", &size);
    assert_non_null(image);
    uint8_t *odd = malloc(size + 1);
    memcpy(odd + 1, image, size);
    assert_ok(attn_gguf_parse(odd + 1, size, &g));
    memset(seen, 0, sizeof seen);
    check_against_reference(g, seen);
    attn_gguf_free(g);
    free(odd);
    free(image);
}

/* ------------------------------------------------------------- the API */

static void type_table(void **state) {
    (void)state;
    int64_t elements, bytes;
    static const struct {
        attn_gguf_tensor_type type;
        const char *name;
        int64_t elements, bytes;
    } known[] = {{ATTN_GGUF_TYPE_F32, "F32", 1, 4},      {ATTN_GGUF_TYPE_BF16, "BF16", 1, 2},
                 {ATTN_GGUF_TYPE_Q8_0, "Q8_0", 32, 34},  {ATTN_GGUF_TYPE_Q4_0, "Q4_0", 32, 18},
                 {ATTN_GGUF_TYPE_Q5_1, "Q5_1", 32, 24},  {ATTN_GGUF_TYPE_Q4_K, "Q4_K", 256, 144},
                 {ATTN_GGUF_TYPE_Q5_K, "Q5_K", 256, 176}, {ATTN_GGUF_TYPE_Q6_K, "Q6_K", 256, 210},
                 {ATTN_GGUF_TYPE_Q3_K, "Q3_K", 256, 110}, {ATTN_GGUF_TYPE_IQ4_XS, "IQ4_XS", 256, 136},
                 {ATTN_GGUF_TYPE_MXFP4, "MXFP4", 32, 17}};
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        assert_string_equal(attn_gguf_type_name(known[i].type), known[i].name);
        assert_ok(attn_gguf_type_block(known[i].type, &elements, &bytes));
        assert_int_equal(elements, known[i].elements);
        assert_int_equal(bytes, known[i].bytes);
    }
    for (size_t c = 0; c < N_CONVERTED; c++) assert_true(attn_gguf_type_dequantizable(converted[c]));
    assert_false(attn_gguf_type_dequantizable(ATTN_GGUF_TYPE_Q3_K));
    /* Removed and never-defined numbers. */
    const int unknown[] = {4, 5, 31, 36, 42, -1, 1000};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        assert_null(attn_gguf_type_name((attn_gguf_tensor_type)unknown[i]));
        assert_refused(attn_gguf_type_block((attn_gguf_tensor_type)unknown[i], &elements, &bytes),
                       ATTN_ERR_UNSUPPORTED, "is not a GGUF tensor type");
        assert_false(attn_gguf_type_dequantizable((attn_gguf_tensor_type)unknown[i]));
    }
    assert_string_equal(attn_gguf_value_type_name(ATTN_GGUF_VALUE_FLOAT64), "float64");
    assert_null(attn_gguf_value_type_name((attn_gguf_value_type)13));
}

static void api_misuse(void **state) {
    (void)state;
    attn_gguf *g = (attn_gguf *)(uintptr_t)1;
    assert_refused(attn_gguf_parse(NULL, 10, &g), ATTN_ERR_INVALID_ARGUMENT, "buf is NULL");
    assert_null(g);
    assert_refused(attn_gguf_parse("GGUF", 4, NULL), ATTN_ERR_INVALID_ARGUMENT, "out is NULL");
    assert_refused(attn_gguf_open(NULL, &g), ATTN_ERR_INVALID_ARGUMENT, "path is NULL");
    attn_gguf_free(NULL);

    gguf_bytes b = {0};
    build_every_type(&b, 3);
    assert_ok(attn_gguf_parse(b.data, b.len, &g));
    attn_gguf_tensor t;
    float out[8];
    assert_refused(attn_gguf_tensor_at(g, 2, &t), ATTN_ERR_INVALID_ARGUMENT, "index 2 is not one of the 2 tensors");
    assert_refused(attn_gguf_tensor_at(g, -1, &t), ATTN_ERR_INVALID_ARGUMENT, "index -1");
    assert_refused(attn_gguf_key_at(g, ROUND_TRIP_KEYS, NULL, NULL), ATTN_ERR_INVALID_ARGUMENT, "is not one of the");
    assert_ok(attn_gguf_find_tensor(g, "four", &t));
    assert_refused(attn_gguf_dequantize_rows(g, &t, 2, 2, out), ATTN_ERR_INVALID_ARGUMENT,
                   "are not within tensor 'four' (3 rows)");
    assert_refused(attn_gguf_dequantize_rows(g, &t, -1, 1, out), ATTN_ERR_INVALID_ARGUMENT, "not within");
    assert_refused(attn_gguf_dequantize_rows(g, &t, INT64_MAX, INT64_MAX, out), ATTN_ERR_INVALID_ARGUMENT,
                   "not within");
    assert_refused(attn_gguf_dequantize_rows(g, &t, 0, 1, NULL), ATTN_ERR_INVALID_ARGUMENT, "out is NULL");
    assert_ok(attn_gguf_dequantize_rows(g, &t, 3, 0, NULL)); /* nothing asked, nothing written */
    /* The library uses its own description of the tensor, not the caller's. */
    attn_gguf_tensor forged = t;
    forged.data = out;
    forged.n_rows = 1000000;
    forged.dims[0] = 1 << 20;
    assert_ok(attn_gguf_dequantize_rows(g, &forged, 0, 1, out));
    assert_true(out[0] == -2.5f && out[1] == -1.5f);
    forged.index = 7;
    assert_refused(attn_gguf_dequantize_rows(g, &forged, 0, 1, out), ATTN_ERR_INVALID_ARGUMENT,
                   "tensor index 7 is not one of the file's 2 tensors");
    assert_refused(attn_gguf_dequantize_rows(NULL, &t, 0, 1, out), ATTN_ERR_INVALID_ARGUMENT, "g is NULL");

    /* Blocks without a file. */
    uint8_t block[34] = {0x00, 0x3C}; /* Q8_0, d = 1.0 */
    block[2] = 0x81;                  /* -127 */
    float q8[32];
    assert_ok(attn_gguf_dequantize(ATTN_GGUF_TYPE_Q8_0, block, sizeof block, 32, q8));
    assert_true(q8[0] == -127.0f && q8[1] == 0.0f);
    assert_refused(attn_gguf_dequantize(ATTN_GGUF_TYPE_Q8_0, block, sizeof block, 31, q8), ATTN_ERR_INVALID_ARGUMENT,
                   "not a whole number of Q8_0 blocks");
    assert_refused(attn_gguf_dequantize(ATTN_GGUF_TYPE_Q8_0, block, sizeof block - 1, 32, q8),
                   ATTN_ERR_INVALID_ARGUMENT, "need 1 blocks of 34 bytes, the buffer has 33 bytes");
    assert_refused(attn_gguf_dequantize(ATTN_GGUF_TYPE_Q8_0, block, sizeof block, 64, q8), ATTN_ERR_INVALID_ARGUMENT,
                   "need 2 blocks of 34 bytes");
    assert_refused(attn_gguf_dequantize(ATTN_GGUF_TYPE_F32, block, sizeof block, INT64_MAX, q8),
                   ATTN_ERR_INVALID_ARGUMENT, "the buffer has 34 bytes"); /* 4 x INT64_MAX bytes: no wrap */
    assert_refused(attn_gguf_dequantize(ATTN_GGUF_TYPE_IQ2_XS, block, sizeof block, 256, q8), ATTN_ERR_UNSUPPORTED,
                   "type IQ2_XS is not converted");
    assert_refused(attn_gguf_dequantize((attn_gguf_tensor_type)4, block, sizeof block, 32, q8), ATTN_ERR_UNSUPPORTED,
                   "4 is not a GGUF tensor type");
    assert_refused(attn_gguf_dequantize(ATTN_GGUF_TYPE_Q8_0, NULL, 0, 32, q8), ATTN_ERR_INVALID_ARGUMENT,
                   "blocks is NULL");
    assert_ok(attn_gguf_dequantize(ATTN_GGUF_TYPE_Q8_0, NULL, 0, 0, NULL));

    attn_gguf_info info;
    attn_gguf_describe(NULL, &info);
    assert_int_equal(info.n_tensors, 0);
    assert_int_equal(attn_gguf_key_index(NULL, "x"), -1);
    assert_int_equal(attn_gguf_key_index(g, NULL), -1);
    attn_gguf_free(g);
    gb_free(&b);
}

/* The configuration attn_decoder_read_config reads from the file in b
 * (freed). */
static attn_status config_of(gguf_bytes *b, attn_decoder_config *c) {
    attn_gguf *g = NULL;
    attn_status st = attn_gguf_parse(b->data, b->len, &g);
    if (st == ATTN_OK) st = attn_decoder_read_config(g, c);
    attn_gguf_free(g);
    gb_free(b);
    return st;
}

/* A llama file's metadata with RoPE scaling keys as llama.cpp writes them
 * (scaling type and factor; extra: a rope_freqs.weight tensor), and the
 * decoder's reading of them: linear is run (its forward against
 * transformers is in test_safetensors_models), what is not is refused by
 * name rather than run unscaled. */
static attn_status rope_config(const char *scaling_type, double scale_linear, bool rope_freqs,
                               attn_decoder_config *c) {
    gguf_bytes b = {0};
    const int n_kv = 6 + (scaling_type ? 2 : 0) + (scale_linear > 0.0);
    gb_header(&b, 3, rope_freqs ? 2 : 1, (uint64_t)n_kv);
    gb_kv_string(&b, "general.architecture", "llama");
    gb_kv_u32(&b, "llama.block_count", 2);
    gb_kv_u32(&b, "llama.embedding_length", 8);
    gb_kv_u32(&b, "llama.feed_forward_length", 16);
    gb_kv_u32(&b, "llama.attention.head_count", 2);
    gb_key(&b, "llama.attention.layer_norm_rms_epsilon", 6);
    gb_f32(&b, 1e-6f);
    if (scaling_type) {
        gb_kv_string(&b, "llama.rope.scaling.type", scaling_type);
        gb_key(&b, "llama.rope.scaling.factor", 6);
        gb_f32(&b, 4.0f);
    }
    if (scale_linear > 0.0) {
        gb_key(&b, "llama.rope.scale_linear", 6);
        gb_f32(&b, (float)scale_linear);
    }
    const uint64_t embd[2] = {8, 10}, freqs[1] = {2};
    gb_tensor(&b, "token_embd.weight", 2, embd, 0, 0);
    if (rope_freqs) gb_tensor(&b, "rope_freqs.weight", 1, freqs, 0, 320);
    gb_pad(&b, 32);
    gb_zeros(&b, 320 + 32);
    return config_of(&b, c);
}

static void rope_scaling_keys(void **state) {
    (void)state;
    attn_decoder_config c;
    assert_int_equal(rope_config(NULL, 0.0, false, &c), ATTN_OK);
    assert_int_equal(c.rope_scaling, ATTN_ROPE_SCALING_NONE);
    assert_int_equal(rope_config("none", 0.0, false, &c), ATTN_OK);
    assert_int_equal(c.rope_scaling, ATTN_ROPE_SCALING_NONE);
    assert_int_equal(rope_config("linear", 0.0, false, &c), ATTN_OK);
    assert_true(c.rope_scaling == ATTN_ROPE_SCALING_LINEAR && c.rope_factor == 4.0 && c.rope_scale_local);
    assert_int_equal(rope_config(NULL, 2.0, false, &c), ATTN_OK); /* the older key */
    assert_true(c.rope_scaling == ATTN_ROPE_SCALING_LINEAR && c.rope_factor == 2.0);
    assert_int_equal(rope_config("yarn", 0.0, false, &c), ATTN_ERR_UNSUPPORTED);
    assert_non_null(strstr(attn_last_error(), "llama.rope.scaling.type"));
    assert_non_null(strstr(attn_last_error(), "yarn"));
    assert_int_equal(rope_config(NULL, 0.0, true, &c), ATTN_ERR_UNSUPPORTED);
    assert_non_null(strstr(attn_last_error(), "rope_freqs.weight"));
}

/* The limits' keys: llama.context_length and llama.rope.dimension_count
 * (0: absent), in a llama file of head width 4 (d 8, 2 heads). */
static attn_status limits_config(uint32_t context, uint32_t rope_dim, attn_decoder_config *c) {
    gguf_bytes b = {0};
    gb_header(&b, 3, 1, (uint64_t)(6 + (context > 0) + (rope_dim > 0)));
    gb_kv_string(&b, "general.architecture", "llama");
    gb_kv_u32(&b, "llama.block_count", 2);
    gb_kv_u32(&b, "llama.embedding_length", 8);
    gb_kv_u32(&b, "llama.feed_forward_length", 16);
    gb_kv_u32(&b, "llama.attention.head_count", 2);
    gb_key(&b, "llama.attention.layer_norm_rms_epsilon", 6);
    gb_f32(&b, 1e-6f);
    if (context) gb_kv_u32(&b, "llama.context_length", context);
    if (rope_dim) gb_kv_u32(&b, "llama.rope.dimension_count", rope_dim);
    const uint64_t embd[2] = {8, 10};
    gb_tensor(&b, "token_embd.weight", 2, embd, 0, 0);
    gb_pad(&b, 32);
    gb_zeros(&b, 320);
    return config_of(&b, c);
}

static void limits_keys(void **state) {
    (void)state;
    attn_decoder_config c;
    assert_ok(limits_config(0, 0, &c));
    assert_true(c.context_length == 0 && c.rope_dim == 4);
    assert_ok(limits_config(2048, 2, &c));
    assert_true(c.context_length == 2048 && c.rope_dim == 2 && attn_decoder_context_limit(&c) == 2048);
    attn_rope_options rope;
    attn_decoder_rope_options(&c, 1, &rope);
    assert_int_equal(rope.rotary_dim, 2);
    assert_refused(limits_config(0, 6, &c), ATTN_ERR_FORMAT,
                   "key 'llama.rope.dimension_count' is 6: RoPE rotates an even number of widths of a head, at most "
                   "its 4");
    assert_refused(limits_config(0, 3, &c), ATTN_ERR_FORMAT, "key 'llama.rope.dimension_count' is 3");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(rope_scaling_keys),
        cmocka_unit_test(limits_keys),
        cmocka_unit_test(metadata_written_by_gguf_py),
        cmocka_unit_test(metadata_round_trips),
        cmocka_unit_test(dequantize_matches_gguf_py),
        cmocka_unit_test(type_table),
        cmocka_unit_test(api_misuse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
