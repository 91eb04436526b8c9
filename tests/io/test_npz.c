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
 *     discarded writer leaves the old file as it was;
 *   - issue 33: a member of 128 MiB of zeros deflated to about 128 KiB
 *     (made here with zlib): `attn npz list` inflates only its header and
 *     `attn npz get` streams it, each in a few MiB (the old code took the
 *     member's size, twice over for get); a damaged CRC found as get
 *     streams leaves no file; an empty member's message names the archive
 *     and the member.
 */
#include "testutil.h"

#include "attn.h"
#include "attn_io.h"
#include "attn_npz.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#ifdef ATTN_TEST_HAVE_ZLIB
#include <zlib.h>
#endif

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
        attn_array got = {0}, header;
        assert_ok(attn_npz_read(z, s[i].name, &got));
        expect_same(s[i].name, &s[i].a, &got);
        /* The header alone says the same, to the unused dimensions (0). */
        memset(&header, 0x5a, sizeof header);
        assert_ok(attn_npz_read_header(z, s[i].name, &header));
        assert_true(header.dtype == got.dtype && header.ndim == got.ndim && header.count == got.count && !header.data);
        assert_memory_equal(header.shape, got.shape, sizeof got.shape);
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
    /* A stored member whose directory claims 4 GiB (the fuzzer's second
     * find, fuzz/corpus/npz/stored-member-claims-4gb.npz): its sizes are
     * checked against the file before anything is allocated for it. */
    {
        const char *big = test_path("stored-claims-big.npz");
        write_samples(big, 0, s, 1);
        assert_ok(attn_read_file(big, 1 << 20, &bytes, &n));
        size_t at = 0;
        while (at + 46 <= n && memcmp((uint8_t *)bytes + at, "PK\1\2", 4) != 0) at++;
        assert_true(at + 46 <= n);
        memcpy((uint8_t *)bytes + at + 20, "\xf0\xff\xff\xff\xf0\xff\xff\xff", 8); /* both sizes 0xfffffff0 */
        assert_ok(attn_output_write_file(big, bytes, n));
        free(bytes);
        if (attn_npz_open(big, &z) == ATTN_OK) {
            assert_refused(attn_npz_read(z, "grid", &a), ATTN_ERR_FORMAT, "runs past the end of the file");
            attn_npz_free(z);
        }
    }
    free_samples(s, SAMPLES);
}

/* ---------------------------------------------- archives made byte by byte */

static void put16(uint8_t *p, uint32_t v) { p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8); }
static void put32(uint8_t *p, uint32_t v) { put16(p, v), put16(p + 2, v >> 16); }

/* A zip of one member NAME.npy: method 0 (stored) or 8 (deflated), its
 * CRC-32 and uncompressed size as given, data (n bytes) as stored. */
static void write_zip(const char *path, const char *name, int method, uint32_t crc, uint32_t size, const void *data,
                      size_t n) {
    char member[64];
    snprintf(member, sizeof member, "%s.npy", name);
    const size_t len = strlen(member), total = 30 + len + n + 46 + len + 22;
    uint8_t *z = calloc(1, total), *c = z + 30 + len + n, *e = c + 46 + len;
    put32(z, 0x04034b50), put16(z + 4, 20), put16(z + 8, (uint32_t)method), put32(z + 14, crc);
    put32(z + 18, (uint32_t)n), put32(z + 22, size), put16(z + 26, (uint32_t)len);
    memcpy(z + 30, member, len);
    if (n) memcpy(z + 30 + len, data, n);
    put32(c, 0x02014b50), put16(c + 4, 20), put16(c + 6, 20), put16(c + 10, (uint32_t)method), put32(c + 16, crc);
    put32(c + 20, (uint32_t)n), put32(c + 24, size), put16(c + 28, (uint32_t)len);
    memcpy(c + 46, member, len);
    put32(e, 0x06054b50), put16(e + 8, 1), put16(e + 10, 1), put32(e + 12, (uint32_t)(46 + len));
    put32(e + 16, (uint32_t)(30 + len + n));
    assert_ok(attn_output_write_file(path, z, total));
    free(z);
}

/* An empty member: every message names the archive and the member. */
static void test_empty_member_is_named(void **state) {
    (void)state;
    const char *path = test_path("empty-member.npz");
    write_zip(path, "hollow", 0, 0, 0, NULL, 0);
    attn_npz *z;
    attn_array a = {0};
    assert_ok(attn_npz_open(path, &z));
    assert_refused(attn_npz_read(z, "hollow", &a), ATTN_ERR_FORMAT, path);
    assert_non_null(strstr(attn_last_error(), "'hollow'"));
    assert_refused(attn_npz_read_header(z, "hollow", &a), ATTN_ERR_FORMAT, path);
    assert_non_null(strstr(attn_last_error(), "'hollow'"));
    attn_npz_free(z);
    char *out = NULL;
    assert_int_equal(test_run_cli(&out, "npz list %s", path), 1);
    if (!strstr(out, path) || !strstr(out, "'hollow'") || !strstr(out, "not a .npy array"))
        fail_msg("attn npz list: the message names neither archive nor member:\n%s", out);
    free(out);
    assert_int_equal(test_run_cli(&out, "npz get %s hollow -o %s", path, test_path("hollow.npy")), 1);
    if (!strstr(out, path) || !strstr(out, "'hollow'")) fail_msg("attn npz get: the message names neither:\n%s", out);
    assert_false(test_file_exists(test_path("hollow.npy")));
    free(out);
}

#define BIG_ELEMENTS ((int64_t)32 << 20) /* float32: 128 MiB */
/* Peak memory of list and get on the 128 MiB member: the old code took
 * 128 MiB and 256 MiB. */
#define BIG_RSS_KB (48L * 1024)

#ifdef ATTN_TEST_HAVE_ZLIB
/* An archive of one member "big": BIG_ELEMENTS float32 zeros, deflated a
 * chunk at a time (memory: the compressed bytes); damage_crc: its CRC-32
 * in the archive off by one bit. */
static void write_big_archive(const char *path, int damage_crc) {
    uint8_t header[ATTN_NPY_HEADER_MAX];
    size_t header_size;
    const int64_t shape[1] = {BIG_ELEMENTS};
    assert_ok(attn_npy_format_header(ATTN_F32, 1, shape, header, sizeof header, &header_size));
    const uint64_t size = header_size + (uint64_t)BIG_ELEMENTS * 4;
    enum { CHUNK = 1 << 20 };
    uint8_t *zeros = calloc(1, CHUNK);
    size_t cap = (size_t)(size / 256) + (1 << 20), n = 0;
    uint8_t *packed = malloc(cap);
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    assert_int_equal(deflateInit2(&zs, 9, Z_DEFLATED, -15, 9, Z_DEFAULT_STRATEGY), Z_OK);
    uLong crc = crc32(0, header, (uInt)header_size);
    zs.next_in = header;
    zs.avail_in = (uInt)header_size;
    for (uint64_t left = size - header_size;;) {
        const int finish = left == 0 && zs.avail_in == 0;
        if (zs.avail_in == 0 && left) {
            const uInt step = (uInt)(left < CHUNK ? left : CHUNK);
            crc = crc32(crc, zeros, step);
            zs.next_in = zeros;
            zs.avail_in = step;
            left -= step;
        }
        zs.next_out = packed + n;
        zs.avail_out = (uInt)(cap - n);
        const int rc = deflate(&zs, finish ? Z_FINISH : Z_NO_FLUSH);
        n = cap - zs.avail_out;
        if (rc == Z_STREAM_END) break;
        assert_true(rc == Z_OK || rc == Z_BUF_ERROR);
        assert_true(n < cap);
    }
    deflateEnd(&zs);
    write_zip(path, "big", 8, (uint32_t)crc ^ (damage_crc ? 1u : 0u), (uint32_t)size, packed, n);
    free(packed);
    free(zeros);
}
#endif

#ifdef ATTN_TEST_HAVE_ZLIB
/* A member of n uint8 values (0..15: Huffman-coded, about 2:1) as one
 * deflated .npy image in an archive at path; its deflated size. */
static size_t write_u8_archive(const char *path, int64_t n, uint64_t seed) {
    uint8_t header[ATTN_NPY_HEADER_MAX];
    size_t header_size;
    assert_ok(attn_npy_format_header(ATTN_U8, 1, &n, header, sizeof header, &header_size));
    const size_t size = header_size + (size_t)n;
    uint8_t *image = malloc(size), *packed = malloc(compressBound((uLong)size));
    memcpy(image, header, header_size);
    test_rng r;
    test_rng_seed(&r, seed);
    for (int64_t i = 0; i < n; i++) image[header_size + (size_t)i] = (uint8_t)test_rng_range(&r, 16);
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    assert_int_equal(deflateInit2(&zs, 6, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY), Z_OK);
    zs.next_in = image;
    zs.avail_in = (uInt)size;
    zs.next_out = packed;
    zs.avail_out = (uInt)compressBound((uLong)size);
    assert_int_equal(deflate(&zs, Z_FINISH), Z_STREAM_END);
    const size_t packed_size = zs.total_out;
    deflateEnd(&zs);
    write_zip(path, "u8", 8, (uint32_t)crc32(0, image, (uInt)size), (uint32_t)size, packed, packed_size);
    free(image);
    free(packed);
    return packed_size;
}
#endif

/* The reader inflates 64 KiB of input at a time: members whose deflated
 * stream ends just before, at and after that boundary (its last codes in
 * the next chunk) read, list and stream whole. */
static void test_stream_ends_across_input_chunks(void **state) {
    (void)state;
#ifndef ATTN_TEST_HAVE_ZLIB
    skip();
#else
    if (!have_deflate()) skip();
    const char *path = strdup(test_path("boundary.npz"));
    /* about 2:1: n near 2 x 64 KiB puts the stream's end near the boundary */
    const size_t trial = write_u8_archive(path, 131072, 1);
    const int64_t centre = (int64_t)(131072.0 * 65536.0 / (double)trial);
    int crossed = 0;
    for (int64_t n = centre - 48; n <= centre + 48; n++) {
        const size_t packed = write_u8_archive(path, n, (uint64_t)n);
        crossed += packed > 65536 - 8 && packed < 65536 + 8;
        attn_npz *z;
        attn_array a = {0}, h = {0};
        assert_ok(attn_npz_open(path, &z));
        if (attn_npz_read(z, "u8", &a) || attn_npz_read_header(z, "u8", &h) ||
            attn_npz_extract(z, "u8", "/dev/null"))
            fail_msg("n = %lld, deflated to %zu bytes: %s", (long long)n, packed, attn_last_error());
        assert_true(a.count == n && h.count == n);
        attn_array_free(&a);
        attn_npz_free(z);
    }
    assert_true(crossed > 0);
    free((void *)path);
#endif
}

/* List reads the header only, get streams: both in a few MiB. */
static void test_high_ratio_member(void **state) {
    (void)state;
#ifndef ATTN_TEST_HAVE_ZLIB
    print_message("skipped: the test makes its archive with zlib, which this build lacks\n");
    skip();
#else
    if (!have_deflate()) skip();
    test_launcher_start();
    const char *path = strdup(test_path("high-ratio.npz")), *out = strdup(test_path("big.npy"));
    write_big_archive(path, 0);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    print_message("a %lld-byte archive of one %lld MiB member\n", (long long)st.st_size,
                  (long long)(BIG_ELEMENTS * 4 >> 20));

    attn_npz *z;
    attn_array a = {0};
    assert_ok(attn_npz_open(path, &z));
    assert_ok(attn_npz_read_header(z, "big", &a));
    assert_true(a.dtype == ATTN_F32 && a.ndim == 1 && a.shape[0] == BIG_ELEMENTS && !a.data);
    attn_npz_free(z);

    const char *list[] = {"npz", "list", path, NULL}, *get[] = {"npz", "get", path, "big", "-o", out, NULL};
    test_child c;
    test_child_run_cli(&c, list, 60, NULL, NULL);
    if (c.status != 0 || !strstr(c.output, "float32") || !strstr(c.output, "[33554432]"))
        fail_msg("attn npz list: exit %d:\n%s", c.status, c.output);
    const long list_kb = c.maxrss_kb;
    test_child_free(&c);
    test_child_run_cli(&c, get, 120, NULL, NULL);
    if (c.status != 0) fail_msg("attn npz get: exit %d:\n%s", c.status, c.output);
    const long get_kb = c.maxrss_kb;
    test_child_free(&c);
    print_message("peak RSS: list %ld KiB, get %ld KiB (limit %ld KiB outside the sanitizers)\n", list_kb, get_kb,
                  BIG_RSS_KB);
    if (!UNDER_SANITIZER && (list_kb > BIG_RSS_KB || get_kb > BIG_RSS_KB))
        fail_msg("list took %ld KiB and get %ld KiB: more than %ld", list_kb, get_kb, BIG_RSS_KB);
    attn_array got = {0};
    size_t offset;
    assert_ok(attn_npy_read_header(out, &got, &offset));
    assert_true(got.dtype == ATTN_F32 && got.shape[0] == BIG_ELEMENTS);
    remove(out);

    /* A CRC-32 that does not match is found as get streams: no file. */
    write_big_archive(path, 1);
    test_child_run_cli(&c, get, 120, NULL, NULL);
    if (c.status != 1 || !strstr(c.output, "CRC-32") || test_file_exists(out))
        fail_msg("attn npz get of a damaged member: exit %d, %s:\n%s", c.status,
                 test_file_exists(out) ? "the output exists" : "no output", c.output);
    test_child_free(&c);
    remove(path);
    free((void *)path);
    free((void *)out);
#endif
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_numpy_written),
        cmocka_unit_test(test_numpy_reads),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_empty_member_is_named),
        cmocka_unit_test(test_high_ratio_member),
        cmocka_unit_test(test_stream_ends_across_input_chunks),
    };
    return cmocka_run_group_tests(tests, NULL, test_group_teardown);
}
