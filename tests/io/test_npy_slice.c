/*
 * test_npy_slice.c — .npy by offset (src/io/npy_file.c): the header alone,
 * rows of any axis read with positional reads equal the same rows of the
 * whole array as attn_npy_load reads it (native and swapped byte order,
 * bools normalised), empty and full reads, and every refusal with its
 * status: rows or axis out of range, truncated and trailing data, a missing
 * file, not a .npy; attn_npy_format_header writes what attn_npy_save writes.
 */
#include "testutil.h"

#include "attn.h"
#include "attn_chapter.h"
#include "attn_interp.h"
#include "attn_io.h"
#include "attn_machine.h"
#include "attn_viz.h"

#include <stdlib.h>
#include <string.h>

static void save(const char *name, attn_dtype dtype, int ndim, const int64_t *shape, const void *data) {
    attn_array a = {.dtype = dtype, .ndim = ndim, .count = 1, .data = (void *)data};
    for (int d = 0; d < ndim; d++) { a.shape[d] = shape[d]; a.count *= shape[d]; }
    if (attn_npy_save(test_path(name), &a)) fail_msg("%s", attn_last_error());
}

/* Rows [first, first + count) of axis, cut from a whole C-order array. */
static void *cut_rows(const void *whole, size_t elem, int ndim, const int64_t *shape, int axis, int64_t first,
                      int64_t count) {
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < axis; d++) outer *= shape[d];
    for (int d = axis + 1; d < ndim; d++) inner *= shape[d];
    size_t run = (size_t)(count * inner) * elem;
    char *out = malloc(run * (size_t)outer + 1);
    for (int64_t o = 0; o < outer; o++)
        memcpy(out + (size_t)o * run, (const char *)whole + (size_t)((o * shape[axis] + first) * inner) * elem, run);
    return out;
}

static void rows_equal_the_whole_array(void **state) {
    (void)state;
    test_rng r;
    test_rng_seed(&r, 5);
    const int64_t shape[4] = {3, 7, 2, 5};
    float x[3 * 7 * 2 * 5];
    test_fill_normal(&r, x, 210, 1.0);
    save("x.npy", ATTN_F32, 4, shape, x);

    attn_array head;
    size_t offset;
    assert_int_equal(attn_npy_read_header(test_path("x.npy"), &head, &offset), ATTN_OK);
    assert_int_equal(head.ndim, 4);
    assert_int_equal(head.count, 210);
    assert_null(head.data);
    assert_int_equal(offset % 64, 0);

    static const int64_t cuts[][3] = {{1, 2, 3}, {1, 0, 7}, {1, 6, 1}, {1, 4, 0}, {0, 1, 2}, {3, 1, 3}, {2, 0, 2}};
    for (size_t c = 0; c < sizeof cuts / sizeof cuts[0]; c++) {
        const int axis = (int)cuts[c][0];
        attn_array part;
        assert_int_equal(attn_npy_read_rows(test_path("x.npy"), axis, cuts[c][1], cuts[c][2], &part), ATTN_OK);
        assert_int_equal(part.dtype, ATTN_F32);
        for (int d = 0; d < 4; d++) assert_int_equal(part.shape[d], d == axis ? cuts[c][2] : shape[d]);
        float *want = cut_rows(x, sizeof(float), 4, shape, axis, cuts[c][1], cuts[c][2]);
        assert_memory_equal(part.data, want, sizeof(float) * (size_t)part.count);
        free(want);
        attn_array_free(&part);
    }
}

/* A big-endian int16 file (descr '>i2') and a bool file with values other
 * than 0 and 1: rows come out as attn_npy_load gives them. */
static void byte_order_and_bools(void **state) {
    (void)state;
    const int64_t shape[2] = {6, 3};
    int16_t v[18];
    for (int i = 0; i < 18; i++) v[i] = (int16_t)(i * 1001 - 7000);
    attn_array a = {.dtype = ATTN_I16, .ndim = 2, .shape = {6, 3}, .count = 18, .data = v};
    void *image;
    size_t size;
    assert_int_equal(attn_npy_serialize(&a, &image, &size), ATTN_OK);
    char *descr = strstr((char *)image + 10, "'<i2'"); /* the preamble may hold a 0 byte */
    assert_non_null(descr);
    descr[1] = '>';
    uint8_t *data = (uint8_t *)image + size - sizeof v;
    for (int i = 0; i < 18; i++) {
        uint8_t t = data[2 * i];
        data[2 * i] = data[2 * i + 1];
        data[2 * i + 1] = t;
    }
    assert_int_equal(test_write_file(test_path("be.npy"), image, size), 0);
    free(image);
    attn_array part;
    assert_int_equal(attn_npy_read_rows(test_path("be.npy"), 0, 2, 3, &part), ATTN_OK);
    assert_int_equal(part.dtype, ATTN_I16);
    assert_memory_equal(part.data, v + 6, sizeof(int16_t) * 9);
    attn_array_free(&part);

    uint8_t b[18];
    for (int i = 0; i < 18; i++) b[i] = (uint8_t)(i % 3 == 0 ? 0 : i * 13);
    save("b.npy", ATTN_BOOL, 2, shape, b);
    attn_array whole;
    assert_int_equal(attn_npy_load(test_path("b.npy"), &whole), ATTN_OK);
    assert_int_equal(attn_npy_read_rows(test_path("b.npy"), 1, 1, 2, &part), ATTN_OK);
    uint8_t *want = cut_rows(whole.data, 1, 2, shape, 1, 1, 2);
    assert_memory_equal(part.data, want, 12);
    for (int i = 0; i < 12; i++) assert_true(((uint8_t *)part.data)[i] <= 1);
    free(want);
    attn_array_free(&part);
    attn_array_free(&whole);
}

static void refusals(void **state) {
    (void)state;
    const int64_t shape[2] = {4, 3};
    float x[12] = {0};
    save("small.npy", ATTN_F32, 2, shape, x);
    attn_array part, head;
    assert_int_equal(attn_npy_read_rows(test_path("small.npy"), 0, 3, 2, &part), ATTN_ERR_SHAPE);
    assert_non_null(strstr(attn_last_error(), "outside"));
    assert_int_equal(attn_npy_read_rows(test_path("small.npy"), 0, -1, 1, &part), ATTN_ERR_SHAPE);
    assert_int_equal(attn_npy_read_rows(test_path("small.npy"), 2, 0, 1, &part), ATTN_ERR_SHAPE);
    assert_null(part.data);

    size_t size;
    char *bytes = test_read_file(test_path("small.npy"), &size);
    assert_int_equal(test_write_file(test_path("short.npy"), bytes, size - 4), 0);
    assert_int_equal(attn_npy_read_header(test_path("short.npy"), &head, NULL), ATTN_ERR_FORMAT);
    assert_non_null(strstr(attn_last_error(), "truncated"));
    assert_non_null(strstr(attn_last_error(), "short.npy"));
    char *longer = malloc(size + 8);
    memcpy(longer, bytes, size);
    memset(longer + size, 0, 8);
    assert_int_equal(test_write_file(test_path("long.npy"), longer, size + 8), 0);
    assert_int_equal(attn_npy_read_rows(test_path("long.npy"), 0, 0, 1, &part), ATTN_ERR_FORMAT);
    assert_non_null(strstr(attn_last_error(), "trailing"));
    assert_int_equal(test_write_file(test_path("notnpy.npy"), "hello, world", 12), 0);
    assert_int_equal(attn_npy_read_header(test_path("notnpy.npy"), &head, NULL), ATTN_ERR_FORMAT);
    assert_int_equal(test_write_file(test_path("tiny.npy"), bytes, 7), 0);
    assert_int_equal(attn_npy_read_header(test_path("tiny.npy"), &head, NULL), ATTN_ERR_FORMAT);
    assert_int_equal(attn_npy_read_header(test_path("missing.npy"), &head, NULL), ATTN_ERR_IO);
    assert_non_null(strstr(attn_last_error(), "missing.npy"));
    free(bytes);
    free(longer);
}

/* The header a sharded writer puts in front of its rows is attn_npy_save's;
 * a header whose rows were never written is a truncated file. */
static void format_header_matches_save(void **state) {
    (void)state;
    static const int64_t shapes[][4] = {{5, 0, 0, 0}, {3, 4, 0, 0}, {2, 3, 4, 0}, {2, 5, 3, 7}};
    for (int s = 0; s < 4; s++) {
        const int ndim = s + 1;
        uint8_t header[ATTN_NPY_HEADER_MAX];
        size_t length, size;
        assert_int_equal(attn_npy_format_header(ATTN_F32, ndim, shapes[s], header, sizeof header, &length), ATTN_OK);
        assert_int_equal(length % 64, 0);
        attn_array a = {.dtype = ATTN_F32, .ndim = ndim, .count = 1};
        for (int d = 0; d < ndim; d++) { a.shape[d] = shapes[s][d]; a.count *= shapes[s][d]; }
        a.data = calloc((size_t)a.count, sizeof(float));
        void *image;
        assert_int_equal(attn_npy_serialize(&a, &image, &size), ATTN_OK);
        assert_int_equal(size, length + sizeof(float) * (size_t)a.count);
        assert_memory_equal(image, header, length);
        free(image);
        free(a.data);
    }
    const int64_t huge[4] = {2, 1000003, 16, 128};
    uint8_t header[ATTN_NPY_HEADER_MAX];
    size_t length;
    attn_array head;
    assert_int_equal(attn_npy_format_header(ATTN_F32, 4, huge, header, sizeof header, &length), ATTN_OK);
    assert_int_equal(test_write_file(test_path("h.npy"), header, length), 0);
    assert_int_equal(attn_npy_read_header(test_path("h.npy"), &head, NULL), ATTN_ERR_FORMAT);
    assert_int_equal(attn_npy_format_header(ATTN_F32, 4, huge, header, 16, &length), ATTN_ERR_INVALID_ARGUMENT);
    assert_int_equal(attn_npy_format_header(ATTN_F32, 9, huge, header, sizeof header, &length),
                     ATTN_ERR_INVALID_ARGUMENT);
}

static int cleanup(void **state) {
    (void)state;
    test_tmpdir_cleanup();
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(rows_equal_the_whole_array),
        cmocka_unit_test(byte_order_and_bools),
        cmocka_unit_test(refusals),
        cmocka_unit_test(format_header_matches_save),
    };
    return cmocka_run_group_tests(tests, NULL, cleanup);
}
