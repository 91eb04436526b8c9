/*
 * npy_file_fuzz.c — libFuzzer target for the .npy FILE readers
 * (src/io/npy_file.c): attn_npy_load, attn_npy_read_header and
 * attn_npy_read_rows, the positional reader the ring uses, which the
 * in-memory target (npy_fuzz.c) never reaches.  The reliability audit's
 * fuzzer for it found a signed overflow within 149 runs (issue 15).
 *
 * Input: the first 8 bytes choose the read (axis, first row, row count,
 * each from one byte or two, so that values past the shape and negative
 * ones are tried), the rest is the file.  The file lives in memory
 * (memfd_create) and is read through /proc/self/fd/N.  Whatever the bytes,
 * each reader accepts or refuses with a message; what it accepts must
 * agree with the in-memory parser (attn_npy_parse) on dtype, shape and
 * bytes, rows included.
 */
#define _GNU_SOURCE /* memfd_create */

#include "attn.h"
#include "attn_io.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_refusal(attn_status status) {
    if (status != ATTN_OK && attn_last_error()[0] == '\0') __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 8) return 0;
    const int axis = (int8_t)data[0] % 10;
    const int64_t first = (int16_t)(data[1] | data[2] << 8), count = (int16_t)(data[3] | data[4] << 8);
    const uint8_t *image = data + 8;
    const size_t image_size = size - 8;

    int fd = memfd_create("npy_file_fuzz", 0);
    if (fd < 0) return 0;
    if (image_size && write(fd, image, image_size) != (ssize_t)image_size) __builtin_trap();
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);

    attn_array whole, parsed, header, rows;
    attn_status st_load = attn_npy_load(path, &whole), st_parse = attn_npy_parse(image, image_size, &parsed);
    check_refusal(st_load);
    check_refusal(st_parse);
    /* The file reader and the memory parser accept the same images. */
    if ((st_load == ATTN_OK) != (st_parse == ATTN_OK)) __builtin_trap();
    if (st_load == ATTN_OK) {
        const size_t bytes = (size_t)whole.count * attn_dtype_size(whole.dtype);
        if (whole.dtype != parsed.dtype || whole.ndim != parsed.ndim ||
            memcmp(whole.shape, parsed.shape, sizeof whole.shape) != 0 || memcmp(whole.data, parsed.data, bytes) != 0)
            __builtin_trap();
    }
    attn_status st = attn_npy_read_header(path, &header, NULL);
    check_refusal(st);
    if ((st == ATTN_OK) != (st_load == ATTN_OK)) __builtin_trap();
    st = attn_npy_read_rows(path, axis, first, count, &rows);
    check_refusal(st);
    if (st == ATTN_OK) {
        /* The rows are the whole array's rows [first, first + count) of axis. */
        if (st_load != ATTN_OK || rows.dtype != whole.dtype || rows.ndim != whole.ndim) __builtin_trap();
        int64_t outer = 1, inner = 1;
        for (int d = 0; d < axis; d++) outer *= whole.shape[d];
        for (int d = axis + 1; d < whole.ndim; d++) inner *= whole.shape[d];
        const size_t elem = attn_dtype_size(whole.dtype), run = (size_t)(count * inner) * elem;
        for (int64_t o = 0; o < outer && whole.count > 0; o++) {
            const uint8_t *want = (const uint8_t *)whole.data + (size_t)((o * whole.shape[axis] + first) * inner) * elem;
            if (memcmp((const uint8_t *)rows.data + (size_t)o * run, want, run) != 0) __builtin_trap();
        }
        attn_array_free(&rows);
    }
    if (st_load == ATTN_OK) attn_array_free(&whole);
    if (st_parse == ATTN_OK) attn_array_free(&parsed);
    close(fd);
    return 0;
}
