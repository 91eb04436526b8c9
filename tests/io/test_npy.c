/*
 * test_npy.c — arrays and the .npy reader/writer.
 *
 * The .npy images are built here byte by byte (magic, version, header length,
 * header text, data), independently of attn_npy_serialize, so the reader is
 * checked against the format itself and not against its own writer.
 * Shape legend: shape (d0, ..., d{ndim-1}), C order; a scalar has shape ().
 */
#include "testutil.h"

#include "attn.h"
#include "attn_chapter.h"
#include "attn_interp.h"
#include "attn_io.h"
#include "attn_machine.h"
#include "attn_viz.h"

#include <dirent.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ----------------------------------------------------------------- helpers */

static bool host_little_endian(void) {
    const uint16_t one = 1;
    uint8_t first;
    memcpy(&first, &one, 1);
    return first == 1;
}

/* A .npy image: magic, major.0, the header length (2 bytes little-endian for
 * version 1, 4 bytes otherwise), the header text as given (no padding is
 * added), then the data bytes.  Free with free(). */
static uint8_t *npy_image(int major, const char *header, size_t header_len, const void *data,
                          size_t data_len, size_t *size) {
    size_t len_bytes = major == 1 ? 2 : 4;
    *size = 8 + len_bytes + header_len + data_len;
    uint8_t *img = malloc(*size + 1);
    assert_non_null(img);
    memcpy(img, "\x93NUMPY", 6);
    img[6] = (uint8_t)major;
    img[7] = 0;
    for (size_t i = 0; i < len_bytes; i++) img[8 + i] = (uint8_t)(header_len >> (8 * i));
    memcpy(img + 8 + len_bytes, header, header_len);
    if (data_len) memcpy(img + 8 + len_bytes + header_len, data, data_len);
    return img;
}

/* npy_image for a NUL-terminated header. */
static uint8_t *npy_image_str(int major, const char *header, const void *data, size_t data_len,
                              size_t *size) {
    return npy_image(major, header, strlen(header), data, data_len, size);
}

static attn_status parse_str(int major, const char *header, const void *data, size_t data_len,
                             attn_array *out) {
    size_t size;
    uint8_t *img = npy_image_str(major, header, data, data_len, &size);
    attn_status st = attn_npy_parse(img, size, out);
    free(img);
    return st;
}

/* Element i of a native-order array, widened to 64 bits by its size. */
static uint64_t native_element(const attn_array *a, int64_t i) {
    size_t s = attn_dtype_size(a->dtype);
    const uint8_t *p = (const uint8_t *)a->data + (size_t)i * s;
    switch (s) {
    case 1: return *p;
    case 2: { uint16_t v; memcpy(&v, p, 2); return v; }
    case 4: { uint32_t v; memcpy(&v, p, 4); return v; }
    default: { uint64_t v; memcpy(&v, p, 8); return v; }
    }
}

/* The value of `size` bytes at p read in the given byte order. */
static uint64_t bytes_value(const uint8_t *p, size_t size, bool little) {
    uint64_t v = 0;
    for (size_t j = 0; j < size; j++) v |= (uint64_t)p[little ? j : size - 1 - j] << (8 * j);
    return v;
}

static float float_from_bits(uint32_t bits) { float f; memcpy(&f, &bits, 4); return f; }

/* Number of directory entries other than . and .. */
static int count_dir_entries(const char *dir) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    closedir(d);
    return n;
}

static const char *const dtype_descr[] = {
    [ATTN_F32] = "f4", [ATTN_F64] = "f8", [ATTN_F16] = "f2", [ATTN_BOOL] = "b1",
    [ATTN_I8] = "i1",  [ATTN_I16] = "i2", [ATTN_I32] = "i4", [ATTN_I64] = "i8",
    [ATTN_U8] = "u1",  [ATTN_U16] = "u2", [ATTN_U32] = "u4", [ATTN_U64] = "u8",
    [ATTN_BF16] = "V2",
};
#define N_DTYPES 13

/* ------------------------------------------------------------------ arrays */

static void test_dtype_names_and_sizes(void **state) {
    (void)state;
    static const struct { attn_dtype t; const char *name; size_t size; } want[] = {
        {ATTN_F32, "float32", 4}, {ATTN_F64, "float64", 8}, {ATTN_F16, "float16", 2},
        {ATTN_BOOL, "bool", 1},   {ATTN_I8, "int8", 1},     {ATTN_I16, "int16", 2},
        {ATTN_I32, "int32", 4},   {ATTN_I64, "int64", 8},   {ATTN_U8, "uint8", 1},
        {ATTN_U16, "uint16", 2},  {ATTN_U32, "uint32", 4},  {ATTN_U64, "uint64", 8},
        {ATTN_BF16, "bfloat16", 2},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        assert_string_equal(attn_dtype_name(want[i].t), want[i].name);
        assert_int_equal(attn_dtype_size(want[i].t), want[i].size);
    }
    assert_int_equal(attn_dtype_size((attn_dtype)99), 0);
    assert_non_null(attn_dtype_name((attn_dtype)99));
}

static void test_array_alloc(void **state) {
    (void)state;
    attn_array a;
    int64_t shape[9] = {2, 3, 4, 1, 1, 1, 1, 1, 1};
    assert_int_equal(attn_array_alloc(&a, ATTN_I32, 3, shape), ATTN_OK);
    assert_int_equal(a.ndim, 3);
    assert_int_equal(a.count, 24);
    for (int64_t i = 0; i < a.count; i++) assert_int_equal(((int32_t *)a.data)[i], 0);
    attn_array_free(&a);
    assert_null(a.data);
    attn_array_free(&a); /* twice is safe */

    assert_int_equal(attn_array_alloc(&a, ATTN_F32, 0, NULL), ATTN_OK); /* a scalar */
    assert_int_equal(a.count, 1);
    attn_array_free(&a);

    int64_t empty[2] = {3, 0};
    assert_int_equal(attn_array_alloc(&a, ATTN_F64, 2, empty), ATTN_OK);
    assert_int_equal(a.count, 0);
    assert_non_null(a.data);
    attn_array_free(&a);

    int64_t negative[2] = {3, -1};
    assert_refused(attn_array_alloc(&a, ATTN_F32, 2, negative), ATTN_ERR_INVALID_ARGUMENT,
                   "negative");
    assert_null(a.data);
    attn_array_free(&a);
    assert_refused(attn_array_alloc(&a, ATTN_F32, 9, shape), ATTN_ERR_INVALID_ARGUMENT, "ndim");
    assert_refused(attn_array_alloc(&a, ATTN_F32, -1, shape), ATTN_ERR_INVALID_ARGUMENT, "ndim");
    assert_refused(attn_array_alloc(&a, (attn_dtype)42, 1, shape), ATTN_ERR_INVALID_ARGUMENT,
                   "dtype");
    /* A zero dimension leaves no elements, but the other dimensions' bytes
     * must fit int64 all the same: numpy 1.26 refuses np.empty((2**63-1, 2,
     * 0), 'u1') and np.empty((2**61, 0), 'f4') as "array is too big" and
     * accepts np.empty((2**63-1, 1, 0), 'u1') and np.empty((2**61-1, 0), 'f4'). */
    int64_t zero_last[3] = {INT64_MAX, 1, 0};
    assert_int_equal(attn_array_alloc(&a, ATTN_U8, 3, zero_last), ATTN_OK);
    assert_int_equal(a.count, 0);
    attn_array_free(&a);
    int64_t zero_last_too_big[3] = {INT64_MAX, 2, 0};
    assert_refused(attn_array_alloc(&a, ATTN_U8, 3, zero_last_too_big), ATTN_ERR_OVERFLOW, "numpy");
    int64_t empty_f32[2] = {INT64_MAX / 4, 0}, empty_f32_too_big[2] = {INT64_MAX / 4 + 1, 0};
    assert_int_equal(attn_array_alloc(&a, ATTN_F32, 2, empty_f32), ATTN_OK);
    assert_int_equal(a.count, 0);
    attn_array_free(&a);
    assert_refused(attn_array_alloc(&a, ATTN_F32, 2, empty_f32_too_big), ATTN_ERR_OVERFLOW, "overflow");
    int64_t huge[2] = {INT64_MAX, 2};
    assert_refused(attn_array_alloc(&a, ATTN_U8, 2, huge), ATTN_ERR_OVERFLOW, "overflow");
    int64_t huge_bytes[1] = {INT64_MAX / 4};
    assert_refused(attn_array_alloc(&a, ATTN_F64, 1, huge_bytes), ATTN_ERR_OVERFLOW, "overflow");
    assert_refused(attn_array_alloc(NULL, ATTN_F32, 0, NULL), ATTN_ERR_INVALID_ARGUMENT, "NULL");
    attn_array_free(NULL);
}

/* An n-element 1-D array of the given dtype holding raw bytes. */
static attn_array array_of(attn_dtype dtype, int64_t n, const void *bytes) {
    attn_array a;
    assert_int_equal(attn_array_alloc(&a, dtype, 1, &n), ATTN_OK);
    memcpy(a.data, bytes, (size_t)n * attn_dtype_size(dtype));
    return a;
}

static void test_convert_to_f32(void **state) {
    (void)state;
    const double f64[4] = {1.5, -2.25, 1e-3, 3.0e38};
    attn_array a = array_of(ATTN_F64, 4, f64);
    assert_int_equal(attn_array_convert(&a, ATTN_F32), ATTN_OK);
    assert_int_equal(a.dtype, ATTN_F32);
    for (int i = 0; i < 4; i++) assert_true(((float *)a.data)[i] == (float)f64[i]);
    assert_int_equal(attn_array_convert(&a, ATTN_F32), ATTN_OK); /* already float32 */
    attn_array_free(&a);

    /* Integers are refused: a float array was expected; *a stays intact. */
    const int32_t i32[2] = {1, 2};
    a = array_of(ATTN_I32, 2, i32);
    assert_refused(attn_array_convert(&a, ATTN_F32), ATTN_ERR_UNSUPPORTED, "int32");
    assert_non_null(strstr(attn_last_error(), "float32"));
    assert_int_equal(a.dtype, ATTN_I32);
    assert_int_equal(((int32_t *)a.data)[1], 2);
    attn_array_free(&a);
    const uint8_t b[2] = {0, 1};
    a = array_of(ATTN_BOOL, 2, b);
    assert_refused(attn_array_convert(&a, ATTN_F32), ATTN_ERR_UNSUPPORTED, "bool");
    assert_refused(attn_array_convert(&a, ATTN_F64), ATTN_ERR_UNSUPPORTED, "float64");
    attn_array_free(&a);
}

/* Every one of the 65536 float16 bit patterns against a formula written
 * from the IEEE 754 definition, in double precision. */
static void test_convert_f16_exhaustive(void **state) {
    (void)state;
    attn_array a;
    int64_t n = 65536;
    assert_int_equal(attn_array_alloc(&a, ATTN_F16, 1, &n), ATTN_OK);
    for (int64_t i = 0; i < n; i++) ((uint16_t *)a.data)[i] = (uint16_t)i;
    assert_int_equal(attn_array_convert(&a, ATTN_F32), ATTN_OK);
    for (int64_t i = 0; i < n; i++) {
        int sign = (int)(i >> 15), exponent = (int)(i >> 10) & 31, mantissa = (int)i & 1023;
        float got = ((float *)a.data)[i];
        assert_int_equal(signbit(got) != 0, sign);
        if (exponent == 31) {
            if (mantissa) assert_true(isnan(got));
            else assert_true(isinf(got));
            continue;
        }
        double want = exponent == 0 ? ldexp(mantissa, -24) : ldexp(1024 + mantissa, exponent - 25);
        if (sign) want = -want;
        if ((double)got != want) fail_msg("half 0x%04x: got %.9g, want %.9g", (unsigned)i, got, want);
    }
    attn_array_free(&a);
}

static void test_convert_to_i64_and_bool(void **state) {
    (void)state;
    const int8_t i8[3] = {-128, 127, 0};
    const int16_t i16[3] = {-32768, 32767, 5};
    const int32_t i32[3] = {INT32_MIN, INT32_MAX, -1};
    const int64_t i64[3] = {INT64_MIN, INT64_MAX, 7};
    const uint8_t u8[3] = {255, 0, 1};
    const uint16_t u16[3] = {65535, 0, 2};
    const uint32_t u32[3] = {UINT32_MAX, 0, 3};
    const uint64_t u64[3] = {(uint64_t)INT64_MAX, 0, 4};
    const uint8_t b1[3] = {1, 0, 1};
    const struct { attn_dtype t; const void *data; int64_t want[3]; } cases[] = {
        {ATTN_I8, i8, {-128, 127, 0}},
        {ATTN_I16, i16, {-32768, 32767, 5}},
        {ATTN_I32, i32, {INT32_MIN, INT32_MAX, -1}},
        {ATTN_I64, i64, {INT64_MIN, INT64_MAX, 7}},
        {ATTN_U8, u8, {255, 0, 1}},
        {ATTN_U16, u16, {65535, 0, 2}},
        {ATTN_U32, u32, {UINT32_MAX, 0, 3}},
        {ATTN_U64, u64, {INT64_MAX, 0, 4}},
        {ATTN_BOOL, b1, {1, 0, 1}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        attn_array a = array_of(cases[c].t, 3, cases[c].data);
        assert_int_equal(attn_array_convert(&a, ATTN_I64), ATTN_OK);
        assert_int_equal(a.dtype, ATTN_I64);
        for (int i = 0; i < 3; i++) assert_true(((int64_t *)a.data)[i] == cases[c].want[i]);
        attn_array_free(&a);

        a = array_of(cases[c].t, 3, cases[c].data);
        assert_int_equal(attn_array_convert(&a, ATTN_BOOL), ATTN_OK);
        assert_int_equal(a.dtype, ATTN_BOOL);
        for (int i = 0; i < 3; i++)
            assert_int_equal(((uint8_t *)a.data)[i], cases[c].want[i] != 0);
        attn_array_free(&a);
    }

    /* uint64 beyond INT64_MAX: refused for int64 (array unchanged), 1 as bool. */
    const uint64_t big[2] = {1, (uint64_t)INT64_MAX + 1};
    attn_array a = array_of(ATTN_U64, 2, big);
    assert_refused(attn_array_convert(&a, ATTN_I64), ATTN_ERR_UNSUPPORTED, "int64 range");
    assert_non_null(strstr(attn_last_error(), "9223372036854775808"));
    assert_int_equal(a.dtype, ATTN_U64);
    assert_true(((uint64_t *)a.data)[1] == big[1]);
    assert_int_equal(attn_array_convert(&a, ATTN_BOOL), ATTN_OK);
    assert_int_equal(((uint8_t *)a.data)[0], 1);
    assert_int_equal(((uint8_t *)a.data)[1], 1);
    attn_array_free(&a);

    /* Floats are refused for integer targets, naming both dtypes. */
    const float f32[1] = {1.0f};
    a = array_of(ATTN_F32, 1, f32);
    assert_refused(attn_array_convert(&a, ATTN_I64), ATTN_ERR_UNSUPPORTED, "float32 to int64");
    assert_refused(attn_array_convert(&a, ATTN_BOOL), ATTN_ERR_UNSUPPORTED, "float32 to bool");
    assert_refused(attn_array_convert(&a, ATTN_I32), ATTN_ERR_UNSUPPORTED, "float32 to int32");
    assert_refused(attn_array_convert(&a, (attn_dtype)77), ATTN_ERR_INVALID_ARGUMENT, "dtype");
    attn_array_free(&a);
    assert_refused(attn_array_convert(NULL, ATTN_F32), ATTN_ERR_INVALID_ARGUMENT, "NULL");
}

/* ------------------------------------------------------------- .npy parse */

static const char HEADER_2x3_F4[] = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";

static void test_versions(void **state) {
    (void)state;
    const float data[6] = {1, 2, 3, 4, 5, 6};
    uint8_t le[24];
    for (int i = 0; i < 6; i++) {
        uint32_t bits;
        memcpy(&bits, &data[i], 4);
        for (int j = 0; j < 4; j++) le[4 * i + j] = (uint8_t)(bits >> (8 * j));
    }
    for (int major = 1; major <= 3; major++) {
        attn_array a;
        assert_int_equal(parse_str(major, HEADER_2x3_F4, le, sizeof le, &a), ATTN_OK);
        assert_int_equal(a.dtype, ATTN_F32);
        assert_int_equal(a.ndim, 2);
        assert_int_equal(a.shape[0], 2);
        assert_int_equal(a.shape[1], 3);
        assert_int_equal(a.count, 6);
        assert_memory_equal(a.data, data, sizeof data);
        attn_array_free(&a);
    }
    attn_array a;
    size_t size;
    uint8_t *img = npy_image_str(1, HEADER_2x3_F4, le, sizeof le, &size);
    img[6] = 4;
    assert_refused(attn_npy_parse(img, size, &a), ATTN_ERR_UNSUPPORTED, "version 4.0");
    img[6] = 1;
    img[7] = 1;
    assert_refused(attn_npy_parse(img, size, &a), ATTN_ERR_UNSUPPORTED, "version 1.1");
    img[7] = 0;
    img[5] = 'Z';
    assert_refused(attn_npy_parse(img, size, &a), ATTN_ERR_FORMAT, "not a .npy file");
    free(img);
    static const char zip[] = "PK\x03\x04 a zip file, maybe an .npz";
    assert_refused(attn_npy_parse(zip, sizeof zip - 1, &a), ATTN_ERR_FORMAT, "not a .npy file");
    assert_refused(attn_npy_parse(NULL, 0, &a), ATTN_ERR_FORMAT, "truncated");
    assert_refused(attn_npy_parse("x", 1, NULL), ATTN_ERR_INVALID_ARGUMENT, "NULL");
}

/* Every dtype in both byte orders (and the native and "no order" spellings):
 * element k must equal the file's bytes read in the file's byte order. */
static void test_every_dtype_both_orders(void **state) {
    (void)state;
    const char orders[] = {'<', '>', '=', '|', 0};
    for (int t = 0; t < N_DTYPES; t++) {
        size_t s = attn_dtype_size((attn_dtype)t);
        for (const char *o = orders; ; o++) {
            if (*o == '|' && s > 1) continue; /* numpy writes '|' for 1-byte types only */
            char header[160];
            snprintf(header, sizeof header, "{'descr': '%s%s', 'fortran_order': False, 'shape': (5,), }\n",
                     *o ? (char[]){*o, 0} : "", dtype_descr[t]);
            uint8_t data[40];
            for (size_t i = 0; i < 5 * s; i++)
                data[i] = t == ATTN_BOOL ? (uint8_t)(i % 2) : (uint8_t)(i * 37 + 11);
            attn_array a;
            attn_status st = parse_str(1, header, data, 5 * s, &a);
            if (st != ATTN_OK) fail_msg("%s: %s", header, attn_last_error());
            assert_int_equal(a.dtype, t);
            assert_int_equal(a.ndim, 1);
            assert_int_equal(a.count, 5);
            bool little = *o == '<' || (*o != '>' && host_little_endian());
            for (int64_t k = 0; k < 5; k++)
                assert_true(native_element(&a, k) == bytes_value(data + k * s, s, little));
            attn_array_free(&a);
            if (!*o) break;
        }
    }
}

/* Values whose bytes are written out by hand in the file's byte order. */
static void test_known_values(void **state) {
    (void)state;
    attn_array a;
    /* 1.0f big-endian, then 1.5 as a little-endian double. */
    assert_int_equal(parse_str(1, "{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }",
                               "\x3f\x80\x00\x00", 4, &a), ATTN_OK);
    assert_true(((float *)a.data)[0] == 1.0f);
    attn_array_free(&a);
    assert_int_equal(parse_str(1, "{'descr': '<f8', 'fortran_order': False, 'shape': (1,), }",
                               "\x00\x00\x00\x00\x00\x00\xf8\x3f", 8, &a), ATTN_OK);
    assert_int_equal(attn_array_convert(&a, ATTN_F32), ATTN_OK);
    assert_true(((float *)a.data)[0] == 1.5f);
    attn_array_free(&a);
    /* -2 as a big-endian int64, 258 as a big-endian uint16. */
    assert_int_equal(parse_str(1, "{'descr': '>i8', 'fortran_order': False, 'shape': (1,), }",
                               "\xff\xff\xff\xff\xff\xff\xff\xfe", 8, &a), ATTN_OK);
    assert_true(((int64_t *)a.data)[0] == -2);
    attn_array_free(&a);
    assert_int_equal(parse_str(1, "{'descr': '>u2', 'fortran_order': False, 'shape': (1,), }",
                               "\x01\x02", 2, &a), ATTN_OK);
    assert_int_equal(((uint16_t *)a.data)[0], 258);
    attn_array_free(&a);
    /* Bool bytes other than 0 and 1 are normalised to 1. */
    assert_int_equal(parse_str(1, "{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }",
                               "\x00\x07\xff", 3, &a), ATTN_OK);
    assert_memory_equal(a.data, "\x00\x01\x01", 3);
    attn_array_free(&a);
}

static void test_float16_specials(void **state) {
    (void)state;
    static const struct { uint16_t half; uint32_t want_bits; } cases[] = {
        {0x3C00, 0x3F800000}, /* 1.0 */
        {0xBC00, 0xBF800000}, /* -1.0 */
        {0x7BFF, 0x477FE000}, /* 65504, the largest half */
        {0x0001, 0x33800000}, /* 2^-24, the smallest subnormal */
        {0x8001, 0xB3800000}, /* -2^-24 */
        {0x03FF, 0x387FC000}, /* 1023 * 2^-24, the largest subnormal */
        {0x0400, 0x38800000}, /* 2^-14, the smallest normal */
        {0x0000, 0x00000000}, /* +0 */
        {0x8000, 0x80000000}, /* -0 */
        {0x7C00, 0x7F800000}, /* +inf */
        {0xFC00, 0xFF800000}, /* -inf */
        {0x3555, 0x3EAAA000}, /* 0.333251953125 */
    };
    enum { N = sizeof cases / sizeof cases[0] };
    for (int big = 0; big < 2; big++) {
        uint8_t data[2 * (N + 1)];
        for (int i = 0; i <= N; i++) {
            uint16_t h = i < N ? cases[i].half : 0x7E00; /* the last one is a NaN */
            data[2 * i + big] = (uint8_t)(h & 0xFF);
            data[2 * i + 1 - big] = (uint8_t)(h >> 8);
        }
        char header[128];
        snprintf(header, sizeof header, "{'descr': '%cf2', 'fortran_order': False, 'shape': (%d,), }",
                 big ? '>' : '<', N + 1);
        attn_array a;
        assert_int_equal(parse_str(1, header, data, sizeof data, &a), ATTN_OK);
        assert_int_equal(a.dtype, ATTN_F16);
        assert_int_equal(attn_array_convert(&a, ATTN_F32), ATTN_OK);
        const float *f = a.data;
        for (int i = 0; i < N; i++) {
            uint32_t got;
            memcpy(&got, &f[i], 4);
            if (got != cases[i].want_bits)
                fail_msg("half 0x%04x: got bits 0x%08x (%g), want 0x%08x (%g)",
                         cases[i].half, got, f[i], cases[i].want_bits,
                         float_from_bits(cases[i].want_bits));
        }
        assert_true(f[0] == 1.0f && f[2] == 65504.0f && f[3] == ldexpf(1.0f, -24));
        assert_true(isnan(f[N]));
        attn_array_free(&a);
    }
}

static void test_shapes(void **state) {
    (void)state;
    attn_array a;
    /* A scalar: shape (), one element. */
    assert_int_equal(parse_str(1, "{'descr': '<i4', 'fortran_order': False, 'shape': (), }",
                               "\x2a\x00\x00\x00", 4, &a), ATTN_OK);
    assert_int_equal(a.ndim, 0);
    assert_int_equal(a.count, 1);
    assert_int_equal(((int32_t *)a.data)[0], 42);
    attn_array_free(&a);
    /* 1-D (n,). */
    assert_int_equal(parse_str(1, "{'descr': '|u1', 'fortran_order': False, 'shape': (3,), }",
                               "abc", 3, &a), ATTN_OK);
    assert_int_equal(a.ndim, 1);
    assert_int_equal(a.shape[0], 3);
    attn_array_free(&a);
    /* Empty arrays: no data bytes at all. */
    assert_int_equal(parse_str(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 0, 3), }",
                               NULL, 0, &a), ATTN_OK);
    assert_int_equal(a.ndim, 3);
    assert_int_equal(a.count, 0);
    attn_array_free(&a);
    /* Eight dimensions are the most; nine are refused. */
    uint8_t eight[1] = {9};
    assert_int_equal(parse_str(1, "{'descr': '|u1', 'fortran_order': False, "
                                  "'shape': (1, 1, 1, 1, 1, 1, 1, 1), }", eight, 1, &a), ATTN_OK);
    assert_int_equal(a.ndim, 8);
    attn_array_free(&a);
    assert_refused(parse_str(1, "{'descr': '|u1', 'fortran_order': False, "
                                "'shape': (1, 1, 1, 1, 1, 1, 1, 1, 1), }", eight, 1, &a),
                   ATTN_ERR_UNSUPPORTED, "dimensions");
}

/* Spellings a Python dict literal allows and numpy would read. */
static void test_header_tolerance(void **state) {
    (void)state;
    static const char *const headers[] = {
        "{'descr': '<i2', 'fortran_order': False, 'shape': (2, 2), }",
        "{'descr': '<i2', 'fortran_order': False, 'shape': (2, 2)}",
        "{'shape': (2, 2), 'fortran_order': False, 'descr': '<i2'}",
        "{\"descr\": \"<i2\", \"fortran_order\": False, \"shape\": (2, 2)}",
        "  {\n\t'descr' :'<i2' ,\r\n 'fortran_order':False,'shape':( 2 ,2 , ) , }   \n",
        ("{'descr': '<i2', 'fortran_order': False, 'shape': (2, 2,), }"
         "                                                           \n"),
    };
    const uint8_t data[8] = {1, 0, 2, 0, 3, 0, 4, 0};
    for (size_t i = 0; i < sizeof headers / sizeof headers[0]; i++) {
        attn_array a;
        attn_status st = parse_str(1, headers[i], data, sizeof data, &a);
        if (st != ATTN_OK) fail_msg("header %zu refused: %s", i, attn_last_error());
        assert_int_equal(a.ndim, 2);
        assert_int_equal(a.shape[0], 2);
        assert_int_equal(a.shape[1], 2);
        assert_int_equal(((int16_t *)a.data)[3], 4);
        attn_array_free(&a);
    }
}

/* Headers numpy would not write or read, each refused with a reason. */
static void test_header_strictness(void **state) {
    (void)state;
    static const struct { const char *header; attn_status code; const char *needle; } cases[] = {
        {"", ATTN_ERR_FORMAT, "expected '{'"},
        {"{'descr': '<i2', 'shape': (4,)}", ATTN_ERR_FORMAT, "missing key 'fortran_order'"},
        {"{'fortran_order': False, 'shape': (4,)}", ATTN_ERR_FORMAT, "missing key 'descr'"},
        {"{'descr': '<i2', 'fortran_order': False}", ATTN_ERR_FORMAT, "missing key 'shape'"},
        {"{'descr': '<i2', 'descr': '<i2', 'fortran_order': False, 'shape': (4,)}",
         ATTN_ERR_FORMAT, "twice"},
        {"{'descr': '<i2', 'fortran_order': False, 'shape': (4,), 'extra': 1}", ATTN_ERR_FORMAT,
         "unknown key 'extra'"},
        {"{'descr': '<i2', 'fortran_order': False, 'shape': (4)}", ATTN_ERR_FORMAT, "not a tuple"},
        {"{'descr': '<i2', 'fortran_order': False, 'shape': [4]}", ATTN_ERR_FORMAT, "'('"},
        {"{'descr': '<i2', 'fortran_order': False, 'shape': (-4,)}", ATTN_ERR_FORMAT, "negative"},
        {"{'descr': '<i2', 'fortran_order': False, 'shape': (4,,)}", ATTN_ERR_FORMAT, "integer"},
        {"{'descr': '<i2', 'fortran_order': False, 'shape': (2 2)}", ATTN_ERR_FORMAT, "','"},
        {"{'descr': '<i2', 'fortran_order': 0, 'shape': (4,)}", ATTN_ERR_FORMAT, "True or False"},
        {"{'descr' '<i2', 'fortran_order': False, 'shape': (4,)}", ATTN_ERR_FORMAT, "':'"},
        {"{'descr': '<i2', 'fortran_order': False, 'shape': (4,)", ATTN_ERR_FORMAT, "'}'"},
        {"{'descr': '<i2', 'fortran_order': False, 'shape': (4,)} x", ATTN_ERR_FORMAT, "after"},
        {"{'descr': '<i2' 'fortran_order': False, 'shape': (4,)}", ATTN_ERR_FORMAT, "','"},
        {"{'descr': '<i\\x32', 'fortran_order': False, 'shape': (4,)}", ATTN_ERR_FORMAT,
         "character"},
        {"{'descr': '<i2', 'fortran_order': False, 'shape': (4,)}\n\n{", ATTN_ERR_FORMAT, "after"},
        {"{'descr': '<i2', 'fortran_order': Falsey, 'shape': (4,)}", ATTN_ERR_FORMAT, "','"},
        {"{'descr': '|O', 'fortran_order': False, 'shape': (4,)}", ATTN_ERR_UNSUPPORTED, "'|O'"},
        {"{'descr': '<U3', 'fortran_order': False, 'shape': (4,)}", ATTN_ERR_UNSUPPORTED, "'<U3'"},
        {"{'descr': '|S2', 'fortran_order': False, 'shape': (4,)}", ATTN_ERR_UNSUPPORTED, "'|S2'"},
        {"{'descr': '<c8', 'fortran_order': False, 'shape': (4,)}", ATTN_ERR_UNSUPPORTED, "'<c8'"},
        {"{'descr': '<f16', 'fortran_order': False, 'shape': (4,)}", ATTN_ERR_UNSUPPORTED,
         "'<f16'"},
        {"{'descr': '<M8[ns]', 'fortran_order': False, 'shape': (4,)}", ATTN_ERR_UNSUPPORTED,
         "not supported"},
        {"{'descr': '', 'fortran_order': False, 'shape': (4,)}", ATTN_ERR_UNSUPPORTED,
         "not supported"},
        {"{'descr': [('x', '<i2')], 'fortran_order': False, 'shape': (4,)}",
         ATTN_ERR_UNSUPPORTED, "structured"},
        {"{'descr': '<i2', 'fortran_order': True, 'shape': (4,)}", ATTN_ERR_UNSUPPORTED,
         "Fortran"},
    };
    const uint8_t data[8] = {0};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        attn_array a;
        attn_status st = parse_str(1, cases[i].header, data, sizeof data, &a);
        if (st != cases[i].code || !strstr(attn_last_error(), cases[i].needle))
            fail_msg("header %s: status %d (want %d), message \"%s\" (want \"%s\")",
                     cases[i].header, (int)st, (int)cases[i].code, attn_last_error(),
                     cases[i].needle);
        assert_null(a.data);
    }
    /* A NUL byte inside the header. */
    static const char with_nul[] = "{'descr': '<i2',\0 'fortran_order': False, 'shape': (4,)}";
    size_t size;
    uint8_t *img = npy_image(1, with_nul, sizeof with_nul - 1, data, sizeof data, &size);
    attn_array a;
    assert_refused(attn_npy_parse(img, size, &a), ATTN_ERR_FORMAT, "malformed header");
    free(img);
}

static void test_fortran_order_refused(void **state) {
    (void)state;
    attn_array a;
    const uint8_t data[24] = {0};
    assert_refused(parse_str(1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }",
                             data, sizeof data, &a),
                   ATTN_ERR_UNSUPPORTED, "Fortran order");
    assert_non_null(strstr(attn_last_error(), "np.ascontiguousarray"));
}

/* A numpy-style file (header padded to 64 bytes) cut at every length
 * shorter than itself: always a clean "truncated" refusal, never a crash. */
static void test_every_truncation(void **state) {
    (void)state;
    uint8_t data[24];
    for (int i = 0; i < 24; i++) data[i] = (uint8_t)(i + 1);
    for (int major = 1; major <= 2; major++) {
        char header[200];
        size_t preamble = major == 1 ? 10 : 12;
        int n = snprintf(header, sizeof header, "%s", HEADER_2x3_F4);
        while ((preamble + (size_t)n + 1) % 64) header[n++] = ' ';
        header[n++] = '\n';
        header[n] = 0;
        size_t size;
        uint8_t *img = npy_image_str(major, header, data, sizeof data, &size);
        assert_int_equal(size, 128 + 24);
        attn_array a;
        assert_int_equal(attn_npy_parse(img, size, &a), ATTN_OK);
        attn_array_free(&a);
        for (size_t len = 0; len < size; len++) {
            /* A fresh copy of exactly len bytes, so ASan catches any read past it. */
            uint8_t *prefix = malloc(len ? len : 1);
            memcpy(prefix, img, len);
            attn_status st = attn_npy_parse(prefix, len, &a);
            free(prefix);
            if (st != ATTN_ERR_FORMAT || !strstr(attn_last_error(), "truncated"))
                fail_msg("prefix of %zu bytes: status %d, \"%s\"", len, (int)st, attn_last_error());
            assert_null(a.data);
        }
        assert_refused(attn_npy_parse(img, size - 1, &a), ATTN_ERR_FORMAT,
                       "truncated: expected 24 bytes of data");
        assert_non_null(strstr(attn_last_error(), "found 23"));
        free(img);
    }
    /* One byte too many is refused as well. */
    uint8_t extra[25] = {0};
    attn_array a;
    assert_refused(parse_str(1, HEADER_2x3_F4, extra, sizeof extra, &a), ATTN_ERR_FORMAT,
                   "trailing data: expected 24 bytes of data, found 25");
}

/* Shapes whose sizes overflow are refused before anything is allocated;
 * a huge shape that fits int64 fails as truncated, also without allocating. */
static void test_size_overflow(void **state) {
    (void)state;
    attn_array a;
    assert_refused(parse_str(1, "{'descr': '<f4', 'fortran_order': False, "
                                "'shape': (4294967296, 4294967296), }", NULL, 0, &a),
                   ATTN_ERR_OVERFLOW, "element count overflows");
    assert_refused(parse_str(1, "{'descr': '<f8', 'fortran_order': False, "
                                "'shape': (2305843009213693952,), }", NULL, 0, &a),
                   ATTN_ERR_OVERFLOW, "byte size overflows");
    assert_refused(parse_str(1, "{'descr': '<f4', 'fortran_order': False, "
                                "'shape': (99999999999999999999,), }", NULL, 0, &a),
                   ATTN_ERR_OVERFLOW, "int64");
    assert_refused(parse_str(1, "{'descr': '<f4', 'fortran_order': False, "
                                "'shape': (3, 4294967296, 4294967296), }", NULL, 0, &a),
                   ATTN_ERR_OVERFLOW, "overflow");
    /* With a zero dimension there are no elements, but numpy 1.26 refuses
     * np.load of this header all the same ("array is too big": it checks the
     * non-zero dimensions' bytes), and so does attn. */
    assert_refused(parse_str(1, "{'descr': '<f4', 'fortran_order': False, "
                                "'shape': (4294967296, 4294967296, 0), }", NULL, 0, &a),
                   ATTN_ERR_OVERFLOW, "too big");
    assert_int_equal(parse_str(1, "{'descr': '<f4', 'fortran_order': False, "
                                  "'shape': (1099511627776, 0, 1048575), }", NULL, 0, &a),
                     ATTN_OK);
    assert_int_equal(a.count, 0);
    attn_array_free(&a);
    assert_refused(parse_str(1, "{'descr': '|u1', 'fortran_order': False, "
                                "'shape': (9223372036854775807,), }", "x", 1, &a),
                   ATTN_ERR_FORMAT, "expected 9223372036854775807 bytes of data");
}

/* The header length field is bounded at 1 MiB: exactly 1 MiB is read,
 * one byte more is refused (even when the bytes are all there). */
static void test_header_limit(void **state) {
    (void)state;
    const size_t limit = 1u << 20;
    char *header = malloc(limit + 2);
    memset(header, ' ', limit + 1);
    memcpy(header, HEADER_2x3_F4, strlen(HEADER_2x3_F4));
    header[limit - 1] = '\n';
    uint8_t data[24] = {0};
    size_t size;
    attn_array a;
    uint8_t *img = npy_image(2, header, limit, data, sizeof data, &size);
    assert_int_equal(attn_npy_parse(img, size, &a), ATTN_OK);
    attn_array_free(&a);
    free(img);
    img = npy_image(2, header, limit + 1, data, sizeof data, &size);
    assert_refused(attn_npy_parse(img, size, &a), ATTN_ERR_FORMAT, "1 MiB");
    /* A length field claiming 4 GiB with no header behind it. */
    memset(img + 8, 0xFF, 4);
    assert_refused(attn_npy_parse(img, 12, &a), ATTN_ERR_FORMAT, "1 MiB");
    free(img);
    free(header);
}

/* ------------------------------------------------------ serialise, round trip */

/* numpy.save(f, np.zeros((2, 3), np.float32)) writes exactly these bytes. */
static void test_serialize_matches_numpy(void **state) {
    (void)state;
    if (!host_little_endian()) skip();
    attn_array a;
    int64_t shape[2] = {2, 3};
    assert_int_equal(attn_array_alloc(&a, ATTN_F32, 2, shape), ATTN_OK);
    void *buf;
    size_t size;
    assert_int_equal(attn_npy_serialize(&a, &buf, &size), ATTN_OK);
    uint8_t want[128 + 24] = {0};
    memcpy(want, "\x93NUMPY\x01\x00\x76\x00", 10);
    memset(want + 10, ' ', 117);
    memcpy(want + 10, HEADER_2x3_F4, strlen(HEADER_2x3_F4));
    want[127] = '\n';
    assert_int_equal(size, sizeof want);
    assert_memory_equal(buf, want, sizeof want);
    free(buf);
    attn_array_free(&a);

    /* A scalar and a 1-D array spell their shapes as Python does. */
    assert_int_equal(attn_array_alloc(&a, ATTN_BOOL, 0, NULL), ATTN_OK);
    assert_int_equal(attn_npy_serialize(&a, &buf, &size), ATTN_OK);
    assert_non_null(strstr((char *)buf + 10, "{'descr': '|b1', 'fortran_order': False, 'shape': (), }"));
    free(buf);
    attn_array_free(&a);
    int64_t n = 7;
    assert_int_equal(attn_array_alloc(&a, ATTN_I64, 1, &n), ATTN_OK);
    assert_int_equal(attn_npy_serialize(&a, &buf, &size), ATTN_OK);
    assert_non_null(strstr((char *)buf + 10, "{'descr': '<i8', 'fortran_order': False, 'shape': (7,), }"));
    free(buf);

    /* An inconsistent hand-filled struct is refused. */
    a.count = 8;
    assert_refused(attn_npy_serialize(&a, &buf, &size), ATTN_ERR_INVALID_ARGUMENT, "count");
    assert_null(buf);
    a.count = 7;
    attn_array_free(&a);
}

/* bfloat16 by attn_io.h's convention: ml_dtypes' np.save writes '<V2';
 * 'bfloat16' is the name some writers use.  The values are the top halves
 * of float32 bits, so the expected floats are built from the bits here. */
static void test_bfloat16(void **state) {
    (void)state;
    if (!host_little_endian()) skip();
    /* 1.5, -2.0, the smallest normal 2^-126, +inf, 3.140625 (0x4049) */
    const uint16_t bits[5] = {0x3FC0, 0xC000, 0x0080, 0x7F80, 0x4049};
    const float want[5] = {1.5f, -2.0f, 0x1p-126f, INFINITY, 3.140625f};
    static const char *const descrs[] = {"<V2", "|V2", "bfloat16"};
    for (size_t d = 0; d < sizeof descrs / sizeof descrs[0]; d++) {
        char header[128];
        snprintf(header, sizeof header, "{'descr': '%s', 'fortran_order': False, 'shape': (5,), }\n", descrs[d]);
        attn_array a;
        if (parse_str(1, header, bits, sizeof bits, &a) != ATTN_OK) fail_msg("%s: %s", descrs[d], attn_last_error());
        assert_int_equal(a.dtype, ATTN_BF16);
        assert_memory_equal(a.data, bits, sizeof bits);
        assert_int_equal(attn_array_convert(&a, ATTN_F32), ATTN_OK);
        assert_memory_equal(a.data, want, sizeof want);
        attn_array_free(&a);
    }
    /* Big-endian bytes under '>V2'. */
    uint8_t swapped[10];
    for (int i = 0; i < 5; i++) {
        swapped[2 * i] = (uint8_t)(bits[i] >> 8);
        swapped[2 * i + 1] = (uint8_t)bits[i];
    }
    attn_array a;
    assert_int_equal(parse_str(1, "{'descr': '>V2', 'fortran_order': False, 'shape': (5,), }\n", swapped,
                               sizeof swapped, &a),
                     ATTN_OK);
    assert_memory_equal(a.data, bits, sizeof bits);
    /* Written back as '<V2', which reads back unchanged. */
    void *buf;
    size_t size;
    assert_int_equal(attn_npy_serialize(&a, &buf, &size), ATTN_OK);
    assert_non_null(strstr((char *)buf + 10, "{'descr': '<V2', 'fortran_order': False, 'shape': (5,), }"));
    attn_array back;
    assert_int_equal(attn_npy_parse(buf, size, &back), ATTN_OK);
    assert_int_equal(back.dtype, ATTN_BF16);
    assert_memory_equal(back.data, bits, sizeof bits);
    free(buf);
    attn_array_free(&back);
    attn_array_free(&a);
    /* Other void widths are not bfloat16. */
    assert_refused(parse_str(1, "{'descr': '<V4', 'fortran_order': False, 'shape': (1,), }\n", bits, 4, &a),
                   ATTN_ERR_UNSUPPORTED, "V4");
}

static void test_round_trip_random(void **state) {
    (void)state;
    test_rng rng;
    test_rng_seed(&rng, 20240611);
    for (int iter = 0; iter < 300; iter++) {
        attn_dtype dtype = (attn_dtype)test_rng_range(&rng, N_DTYPES);
        int ndim = (int)test_rng_range(&rng, ATTN_MAX_DIMS + 1);
        int64_t shape[ATTN_MAX_DIMS];
        for (int i = 0; i < ndim; i++) shape[i] = test_rng_range(&rng, ndim > 4 ? 3 : 7);
        attn_array a, b;
        assert_int_equal(attn_array_alloc(&a, dtype, ndim, shape), ATTN_OK);
        size_t bytes = (size_t)a.count * attn_dtype_size(dtype);
        for (size_t i = 0; i < bytes; i++)
            ((uint8_t *)a.data)[i] = (uint8_t)(dtype == ATTN_BOOL ? test_rng_range(&rng, 2)
                                                                  : test_rng_range(&rng, 256));
        void *buf;
        size_t size;
        assert_int_equal(attn_npy_serialize(&a, &buf, &size), ATTN_OK);
        const uint8_t *img = buf;
        assert_memory_equal(img, "\x93NUMPY\x01\x00", 8);
        size_t data_offset = 10 + (size_t)(img[8] | img[9] << 8);
        assert_int_equal(data_offset % 64, 0);
        assert_int_equal(data_offset + bytes, size);
        assert_int_equal(img[data_offset - 1], '\n');
        assert_int_equal(attn_npy_parse(buf, size, &b), ATTN_OK);
        assert_int_equal(b.dtype, dtype);
        assert_int_equal(b.ndim, ndim);
        assert_int_equal(b.count, a.count);
        for (int i = 0; i < ndim; i++) assert_int_equal(b.shape[i], shape[i]);
        if (bytes) assert_memory_equal(a.data, b.data, bytes);
        free(buf);
        attn_array_free(&a);
        attn_array_free(&b);
    }
}

/* -------------------------------------------------------- load and save */

static void test_load_errors(void **state) {
    (void)state;
    attn_array a;
    const char *missing = test_path("missing.npy");
    char want[600];
    snprintf(want, sizeof want, "cannot open '%s': No such file or directory", missing);
    assert_refused(attn_npy_load(missing, &a), ATTN_ERR_IO, want);
    assert_refused(attn_npy_load(test_tmpdir(), &a), ATTN_ERR_IO, "cannot read");

    /* A truncated file: the message starts with the path. */
    size_t size;
    uint8_t data[24] = {0};
    uint8_t *img = npy_image_str(1, HEADER_2x3_F4, data, sizeof data, &size);
    const char *path = test_path("Q.npy");
    assert_int_equal(test_write_file(path, img, size - 5), 0);
    snprintf(want, sizeof want, "%s: truncated: expected 24 bytes of data", path);
    assert_refused(attn_npy_load(path, &a), ATTN_ERR_FORMAT, want);
    assert_ptr_equal(strstr(attn_last_error(), path), attn_last_error());
    assert_int_equal(test_write_file(path, img, size), 0);
    assert_int_equal(attn_npy_load(path, &a), ATTN_OK);
    assert_int_equal(a.count, 6);
    attn_array_free(&a);
    free(img);
    assert_refused(attn_npy_load(NULL, &a), ATTN_ERR_INVALID_ARGUMENT, "NULL");
    remove(path);
}

/* attn_npy_load_finite: the check runs per 1 MiB chunk as it is read, on
 * several threads; the first bad element of the file is the one reported,
 * whatever the thread count and wherever the chunks' boundaries fall.  A
 * big-endian file is checked after its bytes are swapped. */
static void write_f32_file(const char *path, const float *v, int64_t n, bool big_endian) {
    const char *header = big_endian ? "{'descr': '>f4', 'fortran_order': False, 'shape': (%lld,), }"
                                    : "{'descr': '<f4', 'fortran_order': False, 'shape': (%lld,), }";
    char dict[128];
    snprintf(dict, sizeof dict, header, (long long)n);
    size_t dict_len = strlen(dict), pad = 64 - (10 + dict_len + 1) % 64, hlen = dict_len + pad + 1;
    size_t size = 10 + hlen + (size_t)n * 4;
    uint8_t *img = malloc(size);
    assert_non_null(img);
    memcpy(img, "\x93NUMPY\x01\x00", 8);
    img[8] = (uint8_t)hlen;
    img[9] = (uint8_t)(hlen >> 8);
    memcpy(img + 10, dict, dict_len);
    memset(img + 10 + dict_len, ' ', pad);
    img[10 + hlen - 1] = '\n';
    for (int64_t i = 0; i < n; i++) {
        uint32_t b;
        memcpy(&b, &v[i], 4);
        for (int k = 0; k < 4; k++) img[10 + hlen + 4 * i + k] = (uint8_t)(big_endian ? b >> (24 - 8 * k) : b >> (8 * k));
    }
    assert_int_equal(test_write_file(path, img, size), 0);
    free(img);
}

static void test_load_finite(void **state) {
    (void)state;
    const int64_t n = (5 << 20) / 4 + 7; /* 5 MiB and a bit: six chunks, the last one short */
    float *v = malloc((size_t)n * sizeof *v);
    assert_non_null(v);
    for (int64_t i = 0; i < n; i++) v[i] = (float)(i % 1000) * 0.25f - 100.0f;
    const char *path = test_path("finite.npy");
    attn_array a;
    int64_t bad;

    /* All finite: the data as written, either byte order. */
    for (int big = 0; big < 2; big++) {
        write_f32_file(path, v, n, big);
        assert_int_equal(attn_npy_load_finite(path, 0, &a, &bad), ATTN_OK);
        assert_int_equal(bad, -1);
        assert_int_equal(a.count, n);
        assert_memory_equal(a.data, v, (size_t)n * sizeof *v);
        assert_int_equal(attn_array_check_finite(&a, 0, &bad), ATTN_OK);
        attn_array_free(&a);
    }
    /* Bad elements in the last chunk, then also in an earlier one, at a
     * chunk's first element and at the file's last: the first is named. */
    const int64_t chunk = (1 << 20) / 4;
    const struct { int64_t at; float value; const char *says; } cases[] = {
        {n - 1, NAN, "element %lld is NaN"}, {3 * chunk, INFINITY, "element %lld is +inf"},
        {chunk - 1, -INFINITY, "element %lld is -inf"}, {0, NAN, "element %lld is NaN"}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        v[cases[c].at] = cases[c].value;
        char want[700];
        snprintf(want, sizeof want, cases[c].says, (long long)cases[c].at);
        for (int big = 0; big < 2; big++) {
            write_f32_file(path, v, n, big);
            assert_refused(attn_npy_load_finite(path, 0, &a, &bad), ATTN_ERR_NONFINITE, want);
            assert_int_equal(bad, cases[c].at);
            assert_null(a.data);
            assert_non_null(strstr(attn_last_error(), path));
            /* Unchecked, the same file loads; checked afterwards it fails the same way. */
            assert_int_equal(attn_npy_load(path, &a), ATTN_OK);
            assert_refused(attn_array_check_finite(&a, 0, &bad), ATTN_ERR_NONFINITE, want);
            assert_int_equal(bad, cases[c].at);
            attn_array_free(&a);
        }
    }
    /* -inf may be allowed (a bias); NaN and +inf never are. */
    for (int64_t i = 0; i < n; i++) v[i] = i % 3 ? -INFINITY : 1.0f;
    write_f32_file(path, v, n, false);
    assert_refused(attn_npy_load_finite(path, 0, &a, &bad), ATTN_ERR_NONFINITE, "element 1 is -inf");
    assert_int_equal(attn_npy_load_finite(path, 1, &a, &bad), ATTN_OK);
    attn_array_free(&a);
    v[2 * chunk + 5] = INFINITY;
    write_f32_file(path, v, n, false);
    char want[64];
    snprintf(want, sizeof want, "element %lld is +inf", (long long)(2 * chunk + 5));
    assert_refused(attn_npy_load_finite(path, 1, &a, &bad), ATTN_ERR_NONFINITE, want);

    /* float16 and bfloat16 bits; other dtypes are not checked here. */
    attn_array h = {0};
    int64_t shape1[1] = {5};
    assert_int_equal(attn_array_alloc(&h, ATTN_F16, 1, shape1), ATTN_OK);
    ((uint16_t *)h.data)[3] = 0xFC00; /* -inf */
    assert_refused(attn_array_check_finite(&h, 0, &bad), ATTN_ERR_NONFINITE, "element 3 is -inf");
    assert_int_equal(attn_array_check_finite(&h, 1, &bad), ATTN_OK);
    ((uint16_t *)h.data)[1] = 0x7C01; /* NaN */
    assert_refused(attn_array_check_finite(&h, 1, &bad), ATTN_ERR_NONFINITE, "element 1 is NaN");
    h.dtype = ATTN_BF16; /* 0x7C01 is a finite bfloat16; 0xFC00 too */
    assert_int_equal(attn_array_check_finite(&h, 0, &bad), ATTN_OK);
    ((uint16_t *)h.data)[4] = 0x7F80; /* +inf */
    assert_refused(attn_array_check_finite(&h, 0, &bad), ATTN_ERR_NONFINITE, "element 4 is +inf");
    h.dtype = ATTN_F64;
    h.count = 2;
    assert_refused(attn_array_check_finite(&h, 0, &bad), ATTN_ERR_UNSUPPORTED, "float32");
    h.dtype = ATTN_BF16;
    h.count = 5;
    attn_array_free(&h);
    assert_refused(attn_array_check_finite(NULL, 0, &bad), ATTN_ERR_INVALID_ARGUMENT, "NULL");
    free(v);
    remove(path);
}

static void test_save_atomic(void **state) {
    (void)state;
    char dir[600];
    snprintf(dir, sizeof dir, "%s", test_path("save"));
    assert_int_equal(mkdir(dir, 0700), 0);
    char path[700];
    snprintf(path, sizeof path, "%s/out.npy", dir);

    attn_array a, b;
    int64_t shape[3] = {3, 1, 5};
    assert_int_equal(attn_array_alloc(&a, ATTN_F32, 3, shape), ATTN_OK);
    for (int64_t i = 0; i < a.count; i++) ((float *)a.data)[i] = (float)i * 0.5f - 3.0f;

    /* Success: the file reads back and nothing else is left in the directory. */
    assert_int_equal(attn_npy_save(path, &a), ATTN_OK);
    assert_int_equal(count_dir_entries(dir), 1);
    assert_int_equal(attn_npy_load(path, &b), ATTN_OK);
    assert_int_equal(b.count, 15);
    assert_memory_equal(a.data, b.data, 15 * sizeof(float));
    attn_array_free(&b);

    /* The new file gets the usual permissions (0666 less the umask). */
    mode_t mask = umask(022);
    umask(mask);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0666 & ~mask);

    /* Saving again replaces the file whole. */
    ((float *)a.data)[0] = 42.0f;
    assert_int_equal(attn_npy_save(path, &a), ATTN_OK);
    assert_int_equal(count_dir_entries(dir), 1);
    assert_int_equal(attn_npy_load(path, &b), ATTN_OK);
    assert_true(((float *)b.data)[0] == 42.0f);
    attn_array_free(&b);

    /* Into a directory that does not exist: an I/O error naming the path. */
    char bad[800];
    snprintf(bad, sizeof bad, "%s/no/such/dir/out.npy", dir);
    assert_refused(attn_npy_save(bad, &a), ATTN_ERR_IO, bad);
    assert_false(test_file_exists(bad));

    /* Over a directory: the rename fails, the temporary file is removed. */
    char sub[800];
    snprintf(sub, sizeof sub, "%s/sub.npy", dir);
    assert_int_equal(mkdir(sub, 0700), 0);
    assert_refused(attn_npy_save(sub, &a), ATTN_ERR_IO, sub);
    assert_int_equal(count_dir_entries(dir), 2);
    rmdir(sub);

    /* An invalid array: nothing is written. */
    char other[800];
    snprintf(other, sizeof other, "%s/other.npy", dir);
    a.shape[1] = -1;
    assert_refused(attn_npy_save(other, &a), ATTN_ERR_INVALID_ARGUMENT, other);
    a.shape[1] = 1;
    assert_false(test_file_exists(other));
    assert_int_equal(count_dir_entries(dir), 1);
    assert_refused(attn_npy_save(NULL, &a), ATTN_ERR_INVALID_ARGUMENT, "NULL");

    attn_array_free(&a);
    remove(path);
    rmdir(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dtype_names_and_sizes),
        cmocka_unit_test(test_array_alloc),
        cmocka_unit_test(test_convert_to_f32),
        cmocka_unit_test(test_convert_f16_exhaustive),
        cmocka_unit_test(test_convert_to_i64_and_bool),
        cmocka_unit_test(test_versions),
        cmocka_unit_test(test_every_dtype_both_orders),
        cmocka_unit_test(test_known_values),
        cmocka_unit_test(test_float16_specials),
        cmocka_unit_test(test_shapes),
        cmocka_unit_test(test_header_tolerance),
        cmocka_unit_test(test_header_strictness),
        cmocka_unit_test(test_fortran_order_refused),
        cmocka_unit_test(test_every_truncation),
        cmocka_unit_test(test_size_overflow),
        cmocka_unit_test(test_header_limit),
        cmocka_unit_test(test_serialize_matches_numpy),
        cmocka_unit_test(test_bfloat16),
        cmocka_unit_test(test_round_trip_random),
        cmocka_unit_test(test_load_errors),
        cmocka_unit_test(test_load_finite),
        cmocka_unit_test(test_save_atomic),
    };
    return cmocka_run_group_tests(tests, NULL, test_group_teardown);
}
