/*
 * test_npz.c — .npz archives (attn_npz.h).
 *
 *   - attn writes, attn reads back (stored and deflated; float32, int64,
 *     float16, bool, a scalar, an empty array): bytes and shapes equal;
 *   - numpy wrote (tests/fixtures/npz/, made by make_npz_fixtures.py with
 *     numpy's zipfile and its zip64 local extras), attn reads: the values
 *     the script lists;
 *   - attn writes, numpy reads (np.load, values checked in Python), when a
 *     python3 with numpy is found ($ATTN_PYTHON, else python3; skipped
 *     with a message otherwise);
 *   - refusals: a duplicate or malformed name, a damaged member (CRC-32), a
 *     file that is not a zip, a truncated one, a missing member, a deflated
 *     member claiming more than deflate can expand to; a
 *     discarded writer leaves the old file as it was.
 */
#include "testutil.h"

#include "attn.h"
#include "attn_io.h"
#include "attn_npz.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define FIXTURES ATTN_SOURCE_DIR "/tests/fixtures/npz"

typedef struct sample {
    const char *name;
    attn_array a;
} sample;

enum { SAMPLES = 6 };

static void make_samples(sample *s) {
    const int64_t grid[2] = {3, 4}, ids[1] = {5}, half[2] = {2, 2}, q[3] = {2, 3, 4}, empty[2] = {0, 7};
    s[0].name = "grid";
    assert_ok(attn_array_alloc(&s[0].a, ATTN_F32, 2, grid));
    for (int i = 0; i < 12; i++) ((float *)s[0].a.data)[i] = (float)i / 4.0f;
    s[1].name = "ids";
    assert_ok(attn_array_alloc(&s[1].a, ATTN_I64, 1, ids));
    const int64_t idv[5] = {-2, 0, 7, 151935, (int64_t)1 << 40};
    memcpy(s[1].a.data, idv, sizeof idv);
    s[2].name = "half";
    assert_ok(attn_array_alloc(&s[2].a, ATTN_F16, 2, half));
    const uint16_t hv[4] = {0x3800, 0xbc00, 0x7bff, 0x0001}; /* 0.5, -1, 65504, 2^-24 */
    memcpy(s[2].a.data, hv, sizeof hv);
    s[3].name = "blocks.0.attn.hook_q";
    assert_ok(attn_array_alloc(&s[3].a, ATTN_F32, 3, q));
    for (int i = 0; i < 24; i++) ((float *)s[3].a.data)[i] = (float)i - 11.5f;
    s[4].name = "scalar";
    assert_ok(attn_array_alloc(&s[4].a, ATTN_F64, 0, NULL));
    *(double *)s[4].a.data = 3.25;
    s[5].name = "empty";
    assert_ok(attn_array_alloc(&s[5].a, ATTN_BOOL, 2, empty));
}

static void free_samples(sample *s, int n) {
    for (int i = 0; i < n; i++) attn_array_free(&s[i].a);
}

static void expect_same(const char *what, const attn_array *want, const attn_array *got) {
    if (want->dtype != got->dtype || want->ndim != got->ndim || want->count != got->count)
        fail_msg("%s: dtype/ndim/count %d/%d/%lld, expected %d/%d/%lld", what, (int)got->dtype, got->ndim,
                 (long long)got->count, (int)want->dtype, want->ndim, (long long)want->count);
    for (int k = 0; k < want->ndim; k++) assert_int_equal(want->shape[k], got->shape[k]);
    if (want->count && memcmp(want->data, got->data, (size_t)want->count * attn_dtype_size(want->dtype)) != 0)
        fail_msg("%s: the values differ", what);
}

static void write_samples(const char *path, int compress, const sample *s, int n) {
    attn_npz_writer *w;
    assert_ok(attn_npz_create(path, compress, &w));
    for (int i = 0; i < n; i++) assert_ok(attn_npz_add(w, s[i].name, &s[i].a));
    assert_ok(attn_npz_commit(w));
}

static void read_and_compare(const char *path, const sample *s, int n, int deflated) {
    attn_npz *z;
    assert_ok(attn_npz_open(path, &z));
    assert_int_equal(attn_npz_count(z), n);
    /* Out of order, one at a time. */
    for (int i = n - 1; i >= 0; i--) {
        attn_npz_member m;
        assert_ok(attn_npz_member_at(z, i, &m));
        assert_string_equal(m.name, s[i].name);
        assert_int_equal(m.deflated, deflated);
        attn_array got = {0};
        assert_ok(attn_npz_read(z, s[i].name, &got));
        expect_same(s[i].name, &s[i].a, &got);
        attn_array_free(&got);
    }
    attn_array none = {0};
    assert_refused(attn_npz_read(z, "nope", &none), ATTN_ERR_INVALID_ARGUMENT, "no array 'nope'");
    attn_npz_free(z);
}

/* Deflate needs zlib at build time; without it the deflated cases are
 * skipped (stored archives are tested all the same). */
static int have_deflate(void) {
    attn_npz_writer *w;
    const attn_status st = attn_npz_create(test_path("probe.npz"), 1, &w);
    if (st == ATTN_ERR_UNSUPPORTED) {
        print_message("deflated cases skipped: this build has no zlib\n");
        return 0;
    }
    assert_ok(st);
    attn_npz_discard(w);
    return 1;
}

static void test_round_trip(void **state) {
    (void)state;
    sample s[SAMPLES];
    make_samples(s);
    const int deflate = have_deflate();
    for (int compress = 0; compress < 1 + deflate; compress++) {
        const char *path = test_path(compress ? "deflated.npz" : "stored.npz");
        write_samples(path, compress, s, SAMPLES);
        read_and_compare(path, s, SAMPLES, compress);
    }
    /* Same arrays, same bytes (fixed times): reproducible caches. */
    write_samples(test_path("again.npz"), deflate, s, SAMPLES);
    void *a, *b;
    size_t na, nb;
    assert_ok(attn_read_file(test_path(deflate ? "deflated.npz" : "stored.npz"), 1 << 20, &a, &na));
    assert_ok(attn_read_file(test_path("again.npz"), 1 << 20, &b, &nb));
    assert_true(na == nb && memcmp(a, b, na) == 0);
    free(a);
    free(b);
    free_samples(s, SAMPLES);
}

static void test_numpy_written(void **state) {
    (void)state;
    sample s[SAMPLES];
    make_samples(s);
    read_and_compare(FIXTURES "/numpy_stored.npz", s, 4, 0);
    if (have_deflate()) read_and_compare(FIXTURES "/numpy_deflated.npz", s, 4, 1);
    free_samples(s, SAMPLES);
}

static void test_numpy_reads(void **state) {
    (void)state;
    /* $ATTN_PYTHON, else the first python3 on PATH with numpy, else
     * Debian's own (python3-numpy installs there; PATH may name another). */
    const char *env = getenv("ATTN_PYTHON");
    const char *candidates[] = {env && *env ? env : "python3", "/usr/bin/python3"}, *py = NULL;
    char cmd[2048];
    for (size_t i = 0; i < sizeof candidates / sizeof candidates[0] && !py; i++) {
        snprintf(cmd, sizeof cmd, "%s -c 'import numpy' >/dev/null 2>&1", candidates[i]);
        if (system(cmd) == 0) py = candidates[i];
    }
    if (!py) {
        print_message("skipped: no python3 with numpy (set ATTN_PYTHON=/path/to/python; Debian: python3-numpy)\n");
        skip();
    }
    sample s[SAMPLES];
    make_samples(s);
    const int deflate = have_deflate();
    for (int compress = 0; compress < 1 + deflate; compress++) {
        const char *path = test_path(compress ? "for_numpy_deflated.npz" : "for_numpy_stored.npz");
        write_samples(path, compress, s, SAMPLES);
        snprintf(cmd, sizeof cmd,
                 "%s -c '\n"
                 "import numpy as np, sys\n"
                 "z = np.load(sys.argv[1])\n"
                 "assert sorted(z.files) == sorted([\"grid\", \"ids\", \"half\", \"blocks.0.attn.hook_q\", \"scalar\", \"empty\"]), z.files\n"
                 "assert (z[\"grid\"] == (np.arange(12, dtype=np.float32) / 4).reshape(3, 4)).all()\n"
                 "assert z[\"ids\"].dtype == np.int64 and z[\"ids\"].tolist() == [-2, 0, 7, 151935, 2**40]\n"
                 "assert z[\"half\"].dtype == np.float16 and z[\"half\"].tolist() == [[0.5, -1], [65504, 2**-24]]\n"
                 "assert (z[\"blocks.0.attn.hook_q\"] == (np.arange(24, dtype=np.float32) - 11.5).reshape(2, 3, 4)).all()\n"
                 "assert z[\"scalar\"].shape == () and z[\"scalar\"] == 3.25\n"
                 "assert z[\"empty\"].shape == (0, 7) and z[\"empty\"].dtype == bool\n"
                 "import zipfile; assert zipfile.ZipFile(sys.argv[1]).testzip() is None\n"
                 "' %s",
                 py, path);
        if (system(cmd) != 0) fail_msg("numpy could not read %s as written (the command printed why)", path);
    }
    print_message("numpy read attn's stored and deflated archives (values, dtypes, shapes, CRC-32)\n");
    free_samples(s, SAMPLES);
}

static void test_refusals(void **state) {
    (void)state;
    sample s[SAMPLES];
    make_samples(s);
    const char *path = test_path("refusals.npz");
    write_samples(path, 0, s, 2);
    /* A failed or abandoned writer leaves the old file as it was. */
    attn_npz_writer *w;
    assert_ok(attn_npz_create(path, 0, &w));
    assert_ok(attn_npz_add(w, "grid", &s[0].a));
    assert_refused(attn_npz_add(w, "grid", &s[0].a), ATTN_ERR_INVALID_ARGUMENT, "already");
    assert_refused(attn_npz_add(w, "", &s[0].a), ATTN_ERR_INVALID_ARGUMENT, "name");
    assert_refused(attn_npz_add(w, "/abs", &s[0].a), ATTN_ERR_INVALID_ARGUMENT, "name");
    attn_npz_discard(w);
    read_and_compare(path, s, 2, 0);
    /* A damaged member: one byte of grid's data flipped. */
    void *bytes;
    size_t n;
    assert_ok(attn_read_file(path, 1 << 20, &bytes, &n));
    ((uint8_t *)bytes)[30 + 8 + 128 + 5] ^= 0x40; /* local header, "grid.npy", the .npy header, then data */
    const char *damaged = test_path("damaged.npz");
    assert_ok(attn_output_write_file(damaged, bytes, n));
    attn_npz *z;
    attn_array a = {0};
    assert_ok(attn_npz_open(damaged, &z));
    assert_refused(attn_npz_read(z, "grid", &a), ATTN_ERR_FORMAT, "CRC-32");
    assert_ok(attn_npz_read(z, "ids", &a)); /* the other member is intact */
    attn_array_free(&a);
    attn_npz_free(z);
    /* Truncated: the end record is gone. */
    const char *cut = test_path("cut.npz");
    assert_ok(attn_output_write_file(cut, bytes, n - 10));
    assert_refused(attn_npz_open(cut, &z), ATTN_ERR_FORMAT, "not a zip");
    free(bytes);
    /* Not a zip at all. */
    const char *text = test_path("text.npz");
    static const char words[] = "this is not an archive, only some words long enough for an end record";
    assert_ok(attn_output_write_file(text, words, sizeof words));
    assert_refused(attn_npz_open(text, &z), ATTN_ERR_FORMAT, "not a zip");
    assert_refused(attn_npz_open(test_path("absent.npz"), &z), ATTN_ERR_IO, "absent.npz");
    /* A deflated member whose directory claims 4 GiB from a few bytes (the
     * fuzzer's find): refused by deflate's 1032:1 limit, not allocated. */
    if (have_deflate()) {
        const char *big = test_path("claims-big.npz");
        write_samples(big, 1, s, 1);
        assert_ok(attn_read_file(big, 1 << 20, &bytes, &n));
        size_t at = 0;
        while (at + 46 <= n && memcmp((uint8_t *)bytes + at, "PK\1\2", 4) != 0) at++;
        assert_true(at + 46 <= n);
        memcpy((uint8_t *)bytes + at + 24, "\xf0\xff\xff\xff", 4); /* uncompressed size 0xfffffff0 */
        assert_ok(attn_output_write_file(big, bytes, n));
        free(bytes);
        assert_ok(attn_npz_open(big, &z));
        assert_refused(attn_npz_read(z, "grid", &a), ATTN_ERR_FORMAT, "more than deflate");
        attn_npz_free(z);
    }
    free_samples(s, SAMPLES);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_numpy_written),
        cmocka_unit_test(test_numpy_reads),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, test_group_teardown);
}
