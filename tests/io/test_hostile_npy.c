/*
 * test_hostile_npy.c — bad .npy inputs, one table, two levels.
 *
 * Every row is a file a user (or an attacker) may hand to attn: lies in the
 * preamble, headers numpy's format does not allow or attn does not support,
 * shapes whose sizes overflow or claim gigabytes the file does not hold,
 * things that are not files at all.  The files are built here byte by byte
 * from the format's specification (numpy.lib.format), never by attn's
 * writer.  Each row runs
 *   - through the library: attn_npy_load, attn_npy_read_header,
 *     attn_npy_read_rows (and attn_npy_parse for the byte images) must fail
 *     with the row's status, allocate nothing for the caller, and leave a
 *     message in attn_last_error() that names the file and says the row's
 *     keyword;
 *   - through the program: `attn sdpa -q BAD -k good -v good -o out` must
 *     exit 1 within a time limit, say the path and the keyword on stderr,
 *     create no output (nor a temporary file), and stay below a peak
 *     resident set size however large the header claims the data to be.
 * Rows marked ATTN_OK are well-formed .npy files the library reads, but
 * `attn sdpa` must refuse as a query (a zero dimension, NaN, an integer
 * dtype, the wrong rank).  After the table: every prefix of a valid file,
 * through both levels.
 *
 * The loader's policy on alignment: numpy writes the header padded so that
 * the data start at a multiple of 64 (16 before numpy 1.14), but its reader
 * does not insist, and neither does attn's (tests/io/test_npy.c reads
 * unpadded headers).  So "not a multiple of 64" is not a row here; a length
 * field that disagrees with the header or the file is.
 */
#define _DEFAULT_SOURCE /* symlink, mkfifo, inotify */

#include "testutil.h"

#include "attn.h"
#include "attn_io.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* The program's peak resident set size on a bad input, whatever the header
 * claims.  The program itself needs about 15 MB (under AddressSanitizer
 * too); anything that allocated what a hostile header claims would be in
 * the gigabytes. */
#define HOSTILE_RSS_LIMIT_KB (64L * 1024)
/* A run that takes longer has hung (a FIFO read, /dev/zero read to its end). */
#define HOSTILE_TIMEOUT_S 20.0
/* Children run at once for the prefix sweep. */
#define HOSTILE_PARALLEL 4

/* ------------------------------------------------------------------ the rows */

typedef enum hostile_kind {
    IMAGE,      /* a .npy image: preamble, header, data, built from the fields below */
    RAW,        /* the bytes of .raw as they are                                     */
    DIRECTORY,  /* a directory                                                       */
    FIFO,       /* a FIFO no one writes to (a read would block forever)              */
    DEV_ZERO,   /* a symbolic link to /dev/zero (a read would never end)             */
    PROC_FILE,  /* a symbolic link to /proc/self/status: regular, size 0, not empty  */
    MISSING,    /* nothing under the name                                            */
    DANGLING,   /* a symbolic link to nothing                                        */
    LINK_LOOP,  /* two symbolic links naming each other                              */
    UNDER_FILE, /* a name below a regular file (file.npy/q.npy)                      */
    SOCKET,     /* a UNIX socket                                                     */
    GROWING,    /* a valid file that grows as soon as it is opened                   */
} hostile_kind;

typedef struct hostile {
    const char *name;
    hostile_kind kind;
    /* IMAGE: magic \x93NUMPY, version major.minor (0.0 means 1.0), the
     * length field (2 bytes for 1.x, 4 otherwise), the header text (padded
     * as numpy pads it, with spaces, or NULs for nul_padding, and '\n' to
     * a multiple of 64), then data_bytes bytes of data, each 4 bytes the
     * float `fill` (0.25f unless given).  header_size: for a header holding
     * a NUL (0: strlen).  length_delta is added to the length field;
     * length_field, when nonzero, replaces it; length_zero makes it 0. */
    int major, minor;
    const char *header;
    size_t header_size;
    bool nul_padding;
    long length_delta;
    uint32_t length_field;
    bool length_zero;
    size_t data_bytes;
    uint32_t fill;
    /* RAW */
    const char *raw;
    size_t raw_size;
    /* What the library returns (ATTN_OK: it reads the file, the program
     * refuses it; status_too: another status accepted) and the keyword of
     * its message; the program's keyword when it differs.  "a|b" accepts
     * either. */
    attn_status status, status_too;
    const char *keyword;
    const char *cli_keyword;
} hostile;

#define F32_12 "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2), }"
#define F32_NAN 0x7fc00000u
#define F32_INF 0x7f800000u

/* A header of ndim 1000 (every dimension 1), filled in by main. */
static char ndim_1000_header[4096];

static const hostile rows[] = {
    /* ---- what is not a .npy file at all */
    {"empty", RAW, .raw = "", .raw_size = 0, .status = ATTN_ERR_FORMAT, .keyword = "truncated: 0 bytes"},
    {"one-byte", RAW, .raw = "\x93", .raw_size = 1, .status = ATTN_ERR_FORMAT, .keyword = "truncated"},
    {"bad-magic", RAW, .raw = "\x93NUMPZ\x01\x00\x10\x00{}              ", .raw_size = 26,
     .status = ATTN_ERR_FORMAT, .keyword = "not a .npy file"},
    {"magic-without-x93", RAW, .raw = "NUMPY\x01\x00\x10\x00{}               ", .raw_size = 26,
     .status = ATTN_ERR_FORMAT, .keyword = "not a .npy file"},
    {"npz-archive", RAW, .raw = "PK\x03\x04\x14\x00\x00\x00\x00\x00q.npy", .raw_size = 15,
     .status = ATTN_ERR_FORMAT, .keyword = "zip archive"},
    {"text-file", RAW, .raw = "1.0, 2.0\n3.0, 4.0\n", .raw_size = 18, .status = ATTN_ERR_FORMAT,
     .keyword = "not a .npy file"},
    /* ---- versions */
    {"version-0.0", RAW, .raw = "\x93NUMPY\x00\x00\x10\x00", .raw_size = 10, .status = ATTN_ERR_UNSUPPORTED,
     .keyword = "version 0.0 is not supported"},
    {"version-4.0", IMAGE, .major = 4, .header = F32_12, .data_bytes = 8, .status = ATTN_ERR_UNSUPPORTED,
     .keyword = "version 4.0 is not supported"},
    {"version-1.1", IMAGE, .major = 1, .minor = 1, .header = F32_12, .data_bytes = 8,
     .status = ATTN_ERR_UNSUPPORTED, .keyword = "version 1.1 is not supported"},
    {"version-255.255", IMAGE, .major = 255, .minor = 255, .header = F32_12, .data_bytes = 8,
     .status = ATTN_ERR_UNSUPPORTED, .keyword = "version 255.255"},
    /* ---- the header length field lies */
    {"length-past-the-file", IMAGE, .header = F32_12, .length_field = 0xFFFF, .data_bytes = 8,
     .status = ATTN_ERR_FORMAT, .keyword = "truncated: the header needs"},
    {"length-4-GiB", IMAGE, .major = 2, .header = F32_12, .length_field = 0xFFFFFFFFu, .data_bytes = 8,
     .status = ATTN_ERR_FORMAT, .keyword = "exceeds the limit of 1 MiB"},
    {"length-zero", IMAGE, .header = F32_12, .length_zero = true, .data_bytes = 8,
     .status = ATTN_ERR_FORMAT, .keyword = "expected '{'"},
    {"length-one-long", IMAGE, .header = F32_12, .length_delta = 1, .data_bytes = 8,
     .status = ATTN_ERR_FORMAT, .keyword = "unexpected text after the dictionary"},
    {"length-one-short", IMAGE, .header = F32_12, .length_delta = -1, .data_bytes = 8,
     .status = ATTN_ERR_FORMAT, .keyword = "trailing data"},
    {"length-cuts-the-dict", IMAGE, .header = F32_12, .length_delta = -100, .data_bytes = 8,
     .status = ATTN_ERR_FORMAT, .keyword = "malformed header"},
    {"nul-padding", IMAGE, .header = F32_12, .nul_padding = true, .data_bytes = 8,
     .status = ATTN_ERR_FORMAT, .keyword = "unexpected text after the dictionary"},
    /* ---- shapes */
    {"count-overflows-int64", IMAGE, .header = "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }",
     .status = ATTN_ERR_OVERFLOW, .keyword = "element count overflows int64"},
    {"empty-but-too-big", IMAGE, .header = "{'descr': '<f4', 'fortran_order': False, 'shape': (0, 3000000000000000, 1615, 3), }",
     .status = ATTN_ERR_OVERFLOW, .keyword = "array is too big"},
    {"bytes-overflow-int64", IMAGE, .header = "{'descr': '<f8', 'fortran_order': False, 'shape': (1152921504606846976, 2), }",
     .status = ATTN_ERR_OVERFLOW, .keyword = "byte size overflows"},
    {"dimension-past-int64", IMAGE, .header = "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999, 2), }",
     .status = ATTN_ERR_OVERFLOW, .keyword = "exceeds the int64 range"},
    {"claims-4-EiB", IMAGE, .header = "{'descr': '|u1', 'fortran_order': False, 'shape': (2147483648, 2147483647), }",
     .data_bytes = 8, .status = ATTN_ERR_FORMAT, .keyword = "truncated: expected 4611686016279904256 bytes"},
    {"claims-40-GB", IMAGE, .header = "{'descr': '<f4', 'fortran_order': False, 'shape': (100000, 100000), }",
     .data_bytes = 8, .status = ATTN_ERR_FORMAT, .keyword = "truncated: expected 40000000000 bytes"},
    {"negative-dimension", IMAGE, .header = "{'descr': '<f4', 'fortran_order': False, 'shape': (-1, 2), }",
     .data_bytes = 8, .status = ATTN_ERR_FORMAT, .keyword = "negative dimension"},
    {"nine-dimensions", IMAGE, .header = "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 1, 1, 1, 1, 1, 1, 2), }",
     .data_bytes = 8, .status = ATTN_ERR_UNSUPPORTED, .keyword = "more than 8 dimensions"},
    {"ndim-1000", IMAGE, .header = ndim_1000_header, .data_bytes = 8, .status = ATTN_ERR_UNSUPPORTED,
     .keyword = "more than 8 dimensions"},
    {"shape-not-a-tuple", IMAGE, .header = "{'descr': '<f4', 'fortran_order': False, 'shape': (2), }",
     .data_bytes = 8, .status = ATTN_ERR_FORMAT, .keyword = "not a tuple"},
    {"shape-a-list", IMAGE, .header = "{'descr': '<f4', 'fortran_order': False, 'shape': [1, 2], }",
     .data_bytes = 8, .status = ATTN_ERR_FORMAT, .keyword = "expected '(' to open 'shape'"},
    {"shape-float", IMAGE, .header = "{'descr': '<f4', 'fortran_order': False, 'shape': (1.5, 2), }",
     .data_bytes = 8, .status = ATTN_ERR_FORMAT, .keyword = "expected ',' or ')' in 'shape'"},
    {"shape-hex", IMAGE, .header = "{'descr': '<f4', 'fortran_order': False, 'shape': (0x1, 2), }",
     .data_bytes = 8, .status = ATTN_ERR_FORMAT, .keyword = "expected ',' or ')' in 'shape'"},
    {"zero-dimension", IMAGE, .header = "{'descr': '<f4', 'fortran_order': False, 'shape': (0, 2), }",
     .status = ATTN_OK, .cli_keyword = "every dimension must be at least 1"},
    {"zero-times-huge", IMAGE, .header = "{'descr': '<f4', 'fortran_order': False, 'shape': (0, 1099511627776), }",
     .status = ATTN_OK, .cli_keyword = "every dimension must be at least 1"},
    {"rank-1", IMAGE, .header = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }",
     .data_bytes = 8, .status = ATTN_OK, .cli_keyword = "expected rank 2"},
    {"rank-5", IMAGE, .header = "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 1, 1, 2), }",
     .data_bytes = 8, .status = ATTN_OK, .cli_keyword = "expected rank 2"},
    {"width-mismatch", IMAGE, .header = "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 3), }",
     .data_bytes = 12, .status = ATTN_OK, .cli_keyword = "shape mismatch"},
    /* ---- dtypes */
    {"unicode-dtype", IMAGE, .header = "{'descr': '<U10', 'fortran_order': False, 'shape': (1, 2), }",
     .data_bytes = 80, .status = ATTN_ERR_UNSUPPORTED, .keyword = "dtype '<U10' is not supported"},
    {"object-dtype", IMAGE, .header = "{'descr': '|O', 'fortran_order': False, 'shape': (1, 2), }",
     .data_bytes = 16, .status = ATTN_ERR_UNSUPPORTED, .keyword = "dtype '|O' is not supported"},
    {"complex64", IMAGE, .header = "{'descr': '<c8', 'fortran_order': False, 'shape': (1, 2), }",
     .data_bytes = 16, .status = ATTN_ERR_UNSUPPORTED, .keyword = "dtype '<c8' is not supported"},
    {"complex128-big-endian", IMAGE, .header = "{'descr': '>c16', 'fortran_order': False, 'shape': (1, 2), }",
     .data_bytes = 32, .status = ATTN_ERR_UNSUPPORTED, .keyword = "dtype '>c16' is not supported"},
    {"bytes-dtype", IMAGE, .header = "{'descr': '|S4', 'fortran_order': False, 'shape': (1, 2), }",
     .data_bytes = 8, .status = ATTN_ERR_UNSUPPORTED, .keyword = "dtype '|S4' is not supported"},
    {"datetime", IMAGE, .header = "{'descr': '<M8[ns]', 'fortran_order': False, 'shape': (1, 2), }",
     .data_bytes = 16, .status = ATTN_ERR_UNSUPPORTED, .keyword = "dtype '<M8[ns]' is not supported"},
    {"long-double", IMAGE, .header = "{'descr': '<f16', 'fortran_order': False, 'shape': (1, 2), }",
     .data_bytes = 32, .status = ATTN_ERR_UNSUPPORTED, .keyword = "dtype '<f16' is not supported"},
    {"void-4", IMAGE, .header = "{'descr': '|V4', 'fortran_order': False, 'shape': (1, 2), }",
     .data_bytes = 8, .status = ATTN_ERR_UNSUPPORTED, .keyword = "dtype '|V4' is not supported"},
    {"structured", IMAGE, .header = "{'descr': [('a', '<f4'), ('b', '<f4')], 'fortran_order': False, 'shape': (1,), }",
     .data_bytes = 8, .status = ATTN_ERR_UNSUPPORTED, .keyword = "structured dtypes"},
    {"empty-descr", IMAGE, .header = "{'descr': '', 'fortran_order': False, 'shape': (1, 2), }",
     .data_bytes = 8, .status = ATTN_ERR_UNSUPPORTED, .keyword = "dtype '' is not supported"},
    {"int32-query", IMAGE, .header = "{'descr': '<i4', 'fortran_order': False, 'shape': (1, 2), }",
     .data_bytes = 8, .status = ATTN_OK, .cli_keyword = "not a float array"},
    {"bool-query", IMAGE, .header = "{'descr': '|b1', 'fortran_order': False, 'shape': (1, 2), }",
     .data_bytes = 2, .status = ATTN_OK, .cli_keyword = "not a float array"},
    /* ---- fortran order */
    {"fortran-order", IMAGE, .header = "{'descr': '<f4', 'fortran_order': True, 'shape': (1, 2), }",
     .data_bytes = 8, .status = ATTN_ERR_UNSUPPORTED, .keyword = "Fortran order"},
    {"fortran-order-int", IMAGE, .header = "{'descr': '<f4', 'fortran_order': 1, 'shape': (1, 2), }",
     .data_bytes = 8, .status = ATTN_ERR_FORMAT, .keyword = "expected True or False"},
    /* ---- the dictionary */
    {"missing-descr", IMAGE, .header = "{'fortran_order': False, 'shape': (1, 2), }", .data_bytes = 8,
     .status = ATTN_ERR_FORMAT, .keyword = "missing key 'descr'"},
    {"missing-fortran-order", IMAGE, .header = "{'descr': '<f4', 'shape': (1, 2), }", .data_bytes = 8,
     .status = ATTN_ERR_FORMAT, .keyword = "missing key 'fortran_order'"},
    {"missing-shape", IMAGE, .header = "{'descr': '<f4', 'fortran_order': False, }", .data_bytes = 8,
     .status = ATTN_ERR_FORMAT, .keyword = "missing key 'shape'"},
    {"duplicate-shape", IMAGE, .header = "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2), 'shape': (1, 2), }",
     .data_bytes = 8, .status = ATTN_ERR_FORMAT, .keyword = "key 'shape' appears twice"},
    {"unknown-key", IMAGE, .header = "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2), 'align': 16, }",
     .data_bytes = 8, .status = ATTN_ERR_FORMAT, .keyword = "unknown key 'align'"},
    {"unterminated-string", IMAGE, .header = "{'descr': \"<f4', 'fortran_order': False, 'shape': (1, 2), }",
     .data_bytes = 8, .status = ATTN_ERR_FORMAT, .keyword = "unterminated string"},
    {"unterminated-at-end", IMAGE, .header = "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2), 'x",
     .data_bytes = 8, .status = ATTN_ERR_FORMAT, .keyword = "unterminated string"},
    {"trailing-garbage-in-header", IMAGE, .header = F32_12 " garbage", .data_bytes = 8,
     .status = ATTN_ERR_FORMAT, .keyword = "unexpected text after the dictionary"},
    {"dict-not-closed", IMAGE, .header = "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2)", .data_bytes = 8,
     .status = ATTN_ERR_FORMAT, .keyword = "expected ',' or '}'"},
    {"not-a-dict", IMAGE, .header = "[('descr', '<f4'), ('fortran_order', False), ('shape', (1, 2))]",
     .data_bytes = 8, .status = ATTN_ERR_FORMAT, .keyword = "expected '{'"},
    {"python-code", IMAGE, .header = "__import__('os').system('touch /tmp/attn-pwned')", .data_bytes = 8,
     .status = ATTN_ERR_FORMAT, .keyword = "expected '{'"},
    {"descr-a-dict", IMAGE, .header = "{'descr': {'names': ['a'], 'formats': ['<f4']}, 'fortran_order': False, 'shape': (1, 2), }",
     .data_bytes = 8, .status = ATTN_ERR_FORMAT, .keyword = "expected a quoted string"},
    {"escape-in-string", IMAGE, .header = "{'descr': '\\x3cf4', 'fortran_order': False, 'shape': (1, 2), }",
     .data_bytes = 8, .status = ATTN_ERR_FORMAT, .keyword = "unsupported character in a string"},
    {"nul-in-header", IMAGE, .header = "{'descr': '<f4',\0 'fortran_order': False, 'shape': (1, 2), }",
     .header_size = 61, .data_bytes = 8, .status = ATTN_ERR_FORMAT, .keyword = "malformed header"},
    {"non-ascii-key", IMAGE, .header = "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2), '\xc3\xa9': 1, }",
     .data_bytes = 8, .status = ATTN_ERR_FORMAT, .keyword = "unknown key"},
    {"non-ascii-outside-strings", IMAGE, .header = "{'descr': '<f4',\xa0'fortran_order': False, 'shape': (1, 2), }",
     .data_bytes = 8, .status = ATTN_ERR_FORMAT, .keyword = "malformed header"},
    /* ---- the data */
    {"data-one-byte-short", IMAGE, .header = F32_12, .data_bytes = 7, .status = ATTN_ERR_FORMAT,
     .keyword = "truncated: expected 8 bytes of data"},
    {"trailing-garbage-after-data", IMAGE, .header = F32_12, .data_bytes = 16, .status = ATTN_ERR_FORMAT,
     .keyword = "trailing data: expected 8 bytes of data"},
    {"nan-in-data", IMAGE, .header = F32_12, .data_bytes = 8, .fill = F32_NAN, .status = ATTN_OK,
     .cli_keyword = "element 0 is NaN"},
    {"inf-in-data", IMAGE, .header = F32_12, .data_bytes = 8, .fill = F32_INF, .status = ATTN_OK,
     .cli_keyword = "element 0 is +inf"},
    /* ---- not regular files, or not there */
    {"directory", DIRECTORY, .status = ATTN_ERR_IO, .keyword = "it is a directory"},
    {"fifo", FIFO, .status = ATTN_ERR_IO, .keyword = "it is a FIFO"},
    {"dev-zero", DEV_ZERO, .status = ATTN_ERR_IO, .keyword = "it is a character device"},
    {"proc-file", PROC_FILE, .status = ATTN_ERR_FORMAT, .keyword = "truncated: 0 bytes"},
    {"missing", MISSING, .status = ATTN_ERR_IO, .keyword = "No such file or directory"},
    {"dangling-link", DANGLING, .status = ATTN_ERR_IO, .keyword = "No such file or directory"},
    {"link-loop", LINK_LOOP, .status = ATTN_ERR_IO, .keyword = "Too many levels of symbolic links"},
    {"under-a-file", UNDER_FILE, .status = ATTN_ERR_IO, .keyword = "Not a directory"},
    {"socket", SOCKET, .status = ATTN_ERR_IO, .keyword = "it is a socket"},
    /* Grown before the reader looked at its size, it is a malformed file
     * (trailing data); grown after, it changed while it was read. */
    {"growing", GROWING, .status = ATTN_ERR_IO, .status_too = ATTN_ERR_FORMAT,
     .keyword = "changed while it was read|trailing data"},
};
#define N_ROWS (sizeof rows / sizeof rows[0])

/* ------------------------------------------------------------- the files */

/* The image of an IMAGE or RAW row (malloc'd). */
static uint8_t *row_image(const hostile *h, size_t *size) {
    if (h->kind == RAW) {
        uint8_t *img = malloc(h->raw_size + 1);
        memcpy(img, h->raw, h->raw_size);
        *size = h->raw_size;
        return img;
    }
    const int major = h->major ? h->major : 1;
    const size_t preamble = major == 1 ? 10 : 12;
    const size_t text = h->header_size ? h->header_size : strlen(h->header);
    const size_t header_len = text + 1 + (64 - (preamble + text + 1) % 64) % 64;
    *size = preamble + header_len + h->data_bytes;
    uint8_t *img = malloc(*size);
    assert_non_null(img);
    memcpy(img, "\x93NUMPY", 6);
    img[6] = (uint8_t)major;
    img[7] = (uint8_t)h->minor;
    const uint32_t field = h->length_zero    ? 0
                           : h->length_field ? h->length_field
                                             : (uint32_t)((long)header_len + h->length_delta);
    for (size_t i = 0; i < preamble - 8; i++) img[8 + i] = (uint8_t)(field >> (8 * i));
    memcpy(img + preamble, h->header, text);
    memset(img + preamble + text, h->nul_padding ? 0 : ' ', header_len - text - 1);
    img[preamble + header_len - 1] = '\n';
    const uint32_t fill = h->fill ? h->fill : 0x3e800000u; /* 0.25f */
    for (size_t i = 0; i < h->data_bytes; i++) img[preamble + header_len + i] = (uint8_t)(fill >> (8 * (i % 4)));
    return img;
}

/* A valid [rows, 2] float32 file of 0.25s, numpy's layout. */
static void write_valid(const char *path, int64_t n_rows) {
    char header[128];
    snprintf(header, sizeof header, "{'descr': '<f4', 'fortran_order': False, 'shape': (%lld, 2), }",
             (long long)n_rows);
    hostile h = {.kind = IMAGE, .header = header, .data_bytes = (size_t)n_rows * 8};
    size_t size;
    uint8_t *img = row_image(&h, &size);
    assert_int_equal(test_write_file(path, img, size), 0);
    free(img);
}

/* Appends to path once, as soon as anyone opens it (inotify IN_OPEN): a
 * file that grows while a reader holds it.  Returns the grower's pid once
 * it is watching. */
static pid_t grow_when_opened(const char *path) {
    int ready[2];
    assert_int_equal(pipe(ready), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(ready[0]);
        int fd = open(path, O_WRONLY | O_APPEND);
        int watch = inotify_init1(IN_CLOEXEC);
        if (fd < 0 || watch < 0 || inotify_add_watch(watch, path, IN_OPEN) < 0) _exit(1);
        if (write(ready[1], "r", 1) != 1) _exit(1);
        char event[sizeof(struct inotify_event) + 256];
        if (read(watch, event, sizeof event) <= 0) _exit(1);
        static const uint8_t more[4096];
        _exit(write(fd, more, sizeof more) == (ssize_t)sizeof more ? 0 : 1);
    }
    close(ready[1]);
    char byte;
    assert_int_equal(read(ready[0], &byte, 1), 1);
    close(ready[0]);
    return pid;
}

static void stop_grower(pid_t pid) {
    kill(pid, SIGKILL); /* it has appended and exited, or it was never woken */
    waitpid(pid, NULL, 0);
}

/* Rows of the growing file: 2 Mi rows of 2 floats, 16 MiB, long enough to
 * read that the grower's append lands before the reader looks for it. */
#define GROWING_ROWS (2 * 1024 * 1024)

/* Makes the row's file (or its absence) at path; returns the image for
 * IMAGE and RAW rows (NULL otherwise, malloc'd). */
static uint8_t *make_row(const hostile *h, const char *path, size_t *size) {
    *size = 0;
    switch (h->kind) {
    case IMAGE:
    case RAW: {
        uint8_t *img = row_image(h, size);
        assert_int_equal(test_write_file(path, img, *size), 0);
        return img;
    }
    case DIRECTORY: assert_int_equal(mkdir(path, 0755), 0); break;
    case FIFO: assert_int_equal(mkfifo(path, 0600), 0); break;
    case DEV_ZERO: assert_int_equal(symlink("/dev/zero", path), 0); break;
    case PROC_FILE: assert_int_equal(symlink("/proc/self/status", path), 0); break;
    case MISSING: break;
    case DANGLING: assert_int_equal(symlink("/nonexistent/attn-hostile.npy", path), 0); break;
    case LINK_LOOP: {
        char other[600];
        snprintf(other, sizeof other, "%s.other", path);
        assert_int_equal(symlink(other, path), 0);
        assert_int_equal(symlink(path, other), 0);
        break;
    }
    case UNDER_FILE: {
        /* path is <dir>/under-a-file.npy/q.npy: make its parent a file. */
        char parent[600];
        snprintf(parent, sizeof parent, "%s", path);
        *strrchr(parent, '/') = 0;
        write_valid(parent, 1);
        break;
    }
    case SOCKET: {
        test_make_socket(path);
        break;
    }
    case GROWING: write_valid(path, GROWING_ROWS); break;
    }
    return NULL;
}

/* Where a row's file goes: tmpdir/<name>.npy, or below it for UNDER_FILE. */
static void row_path(const hostile *h, const char *tag, char *buf, size_t cap) {
    if (h->kind == UNDER_FILE)
        snprintf(buf, cap, "%s/%s-%s.npy/q.npy", test_tmpdir(), tag, h->name);
    else
        snprintf(buf, cap, "%s/%s-%s.npy", test_tmpdir(), tag, h->name);
}

/* ---------------------------------------------------------------- checks */

/* A row's failure is printed and counted (test_row_failed), and the sweep
 * goes on, so that one run shows every row that goes wrong; each test fails
 * at its end if any did. */

/* True if message contains one of the '|'-separated alternatives. */
static bool says(const char *message, const char *keyword) {
    char alternatives[256];
    snprintf(alternatives, sizeof alternatives, "%s", keyword);
    char *save = NULL;
    for (char *k = strtok_r(alternatives, "|", &save); k; k = strtok_r(NULL, "|", &save))
        if (strstr(message, k)) return true;
    return false;
}

/* One library call's failure: the row's status, nothing handed back, a
 * message with the path (when there is one) and the keyword. */
static void check_failure(const char *row, const char *call, attn_status st, const attn_array *a,
                          attn_status want, attn_status want_too, const char *path, const char *keyword) {
    const char *msg = attn_last_error();
    bool status_ok = st == want || (want_too != ATTN_OK && st == want_too);
    if (!status_ok || (path && !strstr(msg, path)) || !says(msg, keyword))
        test_row_failed("%s: %s: status %d '%s' (want %d '%s'), message \"%s\" (want the path and \"%s\")", row, call,
                 (int)st, attn_status_str(st), (int)want, attn_status_str(want), msg, keyword);
    if (a->data) test_row_failed("%s: %s failed but handed back data", row, call);
}

/* The three file readers (and the parser, given the image). */
static void check_library(const char *row, const char *path, const uint8_t *img, size_t size, attn_status want,
                          const char *keyword, bool load_only) {
    attn_array a;
    if (want == ATTN_OK) {
        attn_status st = attn_npy_load(path, &a);
        if (st != ATTN_OK) test_row_failed("%s: a valid .npy file was refused: %s", row, attn_last_error());
        attn_array_free(&a);
        return;
    }
    check_failure(row, "attn_npy_load", attn_npy_load(path, &a), &a, want, ATTN_OK, path, keyword);
    if (!load_only) {
        size_t offset = 0;
        check_failure(row, "attn_npy_read_header", attn_npy_read_header(path, &a, &offset), &a, want, ATTN_OK,
                      path, keyword);
        check_failure(row, "attn_npy_read_rows", attn_npy_read_rows(path, 0, 0, 1, &a), &a, want, ATTN_OK, path,
                      keyword);
    }
    if (img) check_failure(row, "attn_npy_parse", attn_npy_parse(img, size, &a), &a, want, ATTN_OK, NULL, keyword);
}

static char good_k[512], good_v[512];
static long peak_rss_kb, floor_rss_kb, growing_rss_kb;
static char peak_rss_row[128];
static int cli_runs;

static void start_sdpa(test_child *c, const char *q, const char *out) {
    const char *args[] = {"sdpa", "-q", q, "-k", good_k, "-v", good_v, "-o", out, NULL};
    const char *argv[11] = {ATTN_CLI_PATH};
    memcpy(argv + 1, args, sizeof args);
    test_child_start(c, argv, NULL, NULL);
}

/* The program's refusal: exit 1 in time, the path and the keyword on
 * stderr, no output, memory bounded. */
static void check_cli_result(const char *row, test_child *c, const char *path, const char *out,
                             const char *keyword) {
    cli_runs++;
    if (c->timed_out) test_row_failed("%s: attn sdpa hung (killed after %.0f s)", row, HOSTILE_TIMEOUT_S);
    if (c->status != 1 || !strstr(c->output, path) || !says(c->output, keyword))
        test_row_failed("%s: attn sdpa exited %d (want 1), stderr \"%s\" (want the path and \"%s\")", row, c->status,
                 c->output, keyword);
    if (c->maxrss_kb > HOSTILE_RSS_LIMIT_KB)
        test_row_failed("%s: attn sdpa peaked at %ld KiB resident, over the limit of %ld KiB", row, c->maxrss_kb,
                 HOSTILE_RSS_LIMIT_KB);
    /* The growing file is 16 MiB of real data: its figure is apart. */
    if (strcmp(row, "growing") == 0) {
        growing_rss_kb = c->maxrss_kb;
    } else if (c->maxrss_kb > peak_rss_kb) {
        peak_rss_kb = c->maxrss_kb;
        snprintf(peak_rss_row, sizeof peak_rss_row, "%s", row);
    }
    if (test_file_exists(out)) test_row_failed("%s: attn sdpa failed but created its output %s", row, out);
    if (test_temp_files_in(test_tmpdir()) != 0) test_row_failed("%s: a temporary file was left behind", row);
}

static void check_cli(const char *row, const char *path, const char *keyword) {
    char out[600];
    snprintf(out, sizeof out, "%s/out-%s.npy", test_tmpdir(), row);
    test_child c;
    start_sdpa(&c, path, out);
    test_child_finish(&c, HOSTILE_TIMEOUT_S);
    check_cli_result(row, &c, path, out, keyword);
    test_child_free(&c);
}

/* ----------------------------------------------------------------- tests */

static int setup_inputs(void **state) {
    (void)state;
    test_launcher_start();
    snprintf(good_k, sizeof good_k, "%s", test_path("good-k.npy"));
    snprintf(good_v, sizeof good_v, "%s", test_path("good-v.npy"));
    write_valid(good_k, 2);
    write_valid(good_v, 2);
    /* The floor under every figure: a child starts with its launcher's
     * pages resident, and wait4 reports the larger of those and what the
     * program used. */
    const char *argv[] = {"/bin/true", NULL};
    test_child c;
    test_child_start(&c, argv, NULL, NULL);
    test_child_finish(&c, HOSTILE_TIMEOUT_S);
    floor_rss_kb = c.maxrss_kb;
    test_child_free(&c);
    if (floor_rss_kb > HOSTILE_RSS_LIMIT_KB / 2)
        fail_msg("the launcher holds %ld KiB: too much for a memory bound of %ld KiB to mean anything",
                 floor_rss_kb, HOSTILE_RSS_LIMIT_KB);
    return 0;
}

/* The table's positive control: the good inputs work, so every refusal
 * below is the bad file's doing. */
static void good_inputs_are_accepted(void **state) {
    (void)state;
    char out[600];
    snprintf(out, sizeof out, "%s", test_path("control-out.npy"));
    const char *args[] = {"sdpa", "-q", good_k, "-k", good_k, "-v", good_v, "-o", out, NULL};
    test_child c;
    test_child_run_cli(&c, args, HOSTILE_TIMEOUT_S, NULL, NULL);
    if (c.status != 0) fail_msg("attn sdpa on good inputs exited %d: %s", c.status, c.output);
    print_message("good inputs: %ld KiB peak resident (/bin/true: %ld KiB)\n", c.maxrss_kb,
                  floor_rss_kb);
    test_child_free(&c);
    attn_array o;
    assert_int_equal(attn_npy_load(out, &o), ATTN_OK);
    /* Every key equal, every value 0.25: the output is 0.25. */
    assert_int_equal(o.count, 4);
    for (int i = 0; i < 4; i++) assert_true(((float *)o.data)[i] == 0.25f);
    attn_array_free(&o);
}

static void every_row_through_the_library(void **state) {
    (void)state;
    for (size_t r = 0; r < N_ROWS; r++) {
        const hostile *h = &rows[r];
        char path[600];
        row_path(h, "lib", path, sizeof path);
        size_t size;
        uint8_t *img = make_row(h, path, &size);
        if (h->kind != GROWING) {
            check_library(h->name, path, img, size, h->status, h->keyword, false);
        } else {
            /* If the reader finished before the grower woke, it read a
             * valid file: try again; a library that never notices fails. */
            int tries = 0;
            attn_status st = ATTN_OK;
            attn_array a;
            for (; tries < 5 && st == ATTN_OK; tries++) {
                if (tries) write_valid(path, GROWING_ROWS);
                pid_t grower = grow_when_opened(path);
                st = attn_npy_load(path, &a);
                stop_grower(grower);
                attn_array_free(&a);
            }
            check_failure(h->name, "attn_npy_load", st, &a, h->status, h->status_too, path, h->keyword);
            print_message("growing file: refused (\"%s\") after %d tries\n", attn_last_error(), tries);
        }
        free(img);
    }
    test_assert_no_row_failed();
}

static void every_row_through_the_program(void **state) {
    (void)state;
    for (size_t r = 0; r < N_ROWS; r++) {
        const hostile *h = &rows[r];
        char path[600];
        row_path(h, "cli", path, sizeof path);
        size_t size;
        free(make_row(h, path, &size));
        const char *keyword = h->cli_keyword ? h->cli_keyword : h->keyword;
        if (h->kind != GROWING) {
            check_cli(h->name, path, keyword);
            continue;
        }
        char out[600];
        snprintf(out, sizeof out, "%s/out-growing.npy", test_tmpdir());
        test_child c = {0};
        int tries = 0;
        for (; tries < 5; tries++) {
            if (tries) {
                write_valid(path, GROWING_ROWS);
                unlink(out);
                test_child_free(&c);
            }
            pid_t grower = grow_when_opened(path);
            start_sdpa(&c, path, out);
            test_child_finish(&c, HOSTILE_TIMEOUT_S);
            stop_grower(grower);
            if (c.status != 0) break;
        }
        print_message("growing file: attn sdpa exited %d after %d tries\n", c.status, tries + 1);
        check_cli_result(h->name, &c, path, out, keyword);
        test_child_free(&c);
    }
    print_message("%d runs of attn sdpa on bad files: peak resident %ld KiB (%s), %ld KiB on the 16 MiB growing "
                  "file; /bin/true %ld KiB; the limit %ld KiB\n", cli_runs, peak_rss_kb, peak_rss_row, growing_rss_kb,
                  floor_rss_kb, HOSTILE_RSS_LIMIT_KB);
    test_assert_no_row_failed();
}

/* A valid numpy-style file cut at every length shorter than itself, in
 * both header versions: each prefix is refused as truncated, by the
 * library and by the program. */
static void every_prefix_of_a_valid_file(void **state) {
    (void)state;
    int cases = 0;
    for (int major = 1; major <= 2; major++) {
        hostile h = {.kind = IMAGE, .major = major, .header = F32_12, .data_bytes = 8};
        size_t size;
        uint8_t *img = row_image(&h, &size);
        assert_int_equal(size, 128 + 8);
        /* The whole file is good. */
        char path[600];
        snprintf(path, sizeof path, "%s/whole-v%d.npy", test_tmpdir(), major);
        assert_int_equal(test_write_file(path, img, size), 0);
        check_library("whole file", path, img, size, ATTN_OK, NULL, false);
        unlink(path);
        /* The program's runs go HOSTILE_PARALLEL at a time. */
        test_child running[HOSTILE_PARALLEL];
        char paths[HOSTILE_PARALLEL][600], outs[HOSTILE_PARALLEL][600], names[HOSTILE_PARALLEL][64];
        int n_running = 0;
        for (size_t len = 0; len <= size; len++) {
            if (len < size) {
                int slot = n_running++;
                snprintf(names[slot], sizeof names[slot], "v%d prefix of %zu bytes", major, len);
                snprintf(paths[slot], sizeof paths[slot], "%s/prefix-v%d-%zu.npy", test_tmpdir(), major, len);
                snprintf(outs[slot], sizeof outs[slot], "%s/prefix-out-v%d-%zu.npy", test_tmpdir(), major, len);
                /* A fresh copy of exactly len bytes for the parser, so that
                 * AddressSanitizer sees any read past it. */
                uint8_t *prefix = malloc(len ? len : 1);
                memcpy(prefix, img, len);
                assert_int_equal(test_write_file(paths[slot], prefix, len), 0);
                check_library(names[slot], paths[slot], prefix, len, ATTN_ERR_FORMAT, "truncated", false);
                free(prefix);
                start_sdpa(&running[slot], paths[slot], outs[slot]);
                cases++;
            }
            if (n_running == HOSTILE_PARALLEL || (len == size && n_running > 0)) {
                for (int s = 0; s < n_running; s++) {
                    test_child_finish(&running[s], HOSTILE_TIMEOUT_S);
                    check_cli_result(names[s], &running[s], paths[s], outs[s], "truncated");
                    test_child_free(&running[s]);
                    unlink(paths[s]);
                }
                n_running = 0;
            }
        }
        free(img);
    }
    print_message("%d prefixes refused by the library and the program\n", cases);
    test_assert_no_row_failed();
}

/* A library call that blocks (a FIFO opened for reading waits for a
 * writer) would hang the test itself: the alarm ends it with a message. */
#define HOSTILE_TEST_ALARM_S 300
static void on_alarm(int sig) {
    (void)sig;
    static const char msg[] = "test_hostile_npy: hung (a library call blocked?)\n";
    if (write(2, msg, sizeof msg - 1) < 0) _exit(3);
    _exit(2);
}

int main(void) {
    signal(SIGALRM, on_alarm);
    alarm(HOSTILE_TEST_ALARM_S);
    /* shape (1, 1, ..., 1): 1000 dimensions. */
    size_t n = (size_t)snprintf(ndim_1000_header, sizeof ndim_1000_header,
                                "{'descr': '<f4', 'fortran_order': False, 'shape': (");
    for (int d = 0; d < 1000; d++) n += (size_t)snprintf(ndim_1000_header + n, sizeof ndim_1000_header - n, "1, ");
    snprintf(ndim_1000_header + n, sizeof ndim_1000_header - n, "), }");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(good_inputs_are_accepted),
        cmocka_unit_test(every_row_through_the_library),
        cmocka_unit_test(every_row_through_the_program),
        cmocka_unit_test(every_prefix_of_a_valid_file),
    };
    print_message("%zu hostile rows\n", N_ROWS);
    return cmocka_run_group_tests(tests, setup_inputs, test_group_teardown);
}
