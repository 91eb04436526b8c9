/*
 * npy_file.c — .npy files: load a whole file, read a file's header alone,
 * read some rows of one axis with positional reads, format the header a
 * writer of rows puts in front of them.  The header grammar is npy.c's
 * (npy_format.h).
 *
 * Every reader validates the header, and the file's size against it,
 * before it allocates anything for the data, and then reads exactly the
 * bytes the header justifies into the array's own buffer: a small header
 * in front of a large hole, /dev/zero or a growing file costs nothing.
 * Only regular files are read (a FIFO or a device would block or never
 * end); they are opened without blocking, so that a FIFO is refused, not
 * waited on.
 *
 * Shape legend: a file of shape (d0, ..., d{n-1}) seen around one axis a as
 *   [outer, rows, inner]   outer = d0 * ... * d{a-1}   rows = d{a}
 *                          inner = d{a+1} * ... * d{n-1}
 * so rows [first, first + count) are `outer` runs of count * inner elements,
 * run o starting at element (o * rows + first) * inner.
 */
#include "io/npy_format.h"
#include "io/array.h"
#include "io/finite.h"
#include "io/file.h"

#include "base/base.h"
#include "base/threads.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Opens path and parses its header; the file's size must be exactly the
 * header plus the data, as attn_npy_load requires.  *fd is open on success. */
static attn_status open_and_parse(const char *path, int *fd, npy_layout *layout) {
    uint8_t *header = NULL;
    uint64_t file_size = 0;
    attn_status status = file_open_regular(path, ".npy inputs", fd, &file_size);
    if (status != ATTN_OK) return status;
    /* The preamble (10 or 12 bytes) says how long the header is. */
    uint8_t preamble[12];
    size_t have = file_size < sizeof preamble ? (size_t)file_size : sizeof preamble;
    size_t data_offset = 0;
    if ((status = attn__read_exactly(*fd, path, preamble, have, 0)) ||
        (status = attn__npy_parse_preamble(preamble, have, &data_offset))) {
        if (status != ATTN_ERR_IO) status = npy_fail_with_path(status, path);
        goto cleanup;
    }
    if (file_size < data_offset) {
        status = attn__fail(ATTN_ERR_FORMAT, "%s: truncated: the header needs %zu bytes, the file has %llu",
                           path, data_offset, (unsigned long long)file_size);
        goto cleanup;
    }
    header = malloc(data_offset);
    if (!header) {
        status = attn__fail(ATTN_ERR_OUT_OF_MEMORY, "%s: cannot allocate the header", path);
        goto cleanup;
    }
    if ((status = attn__read_exactly(*fd, path, header, data_offset, 0))) goto cleanup;
    if ((status = attn__npy_parse_header_image(header, data_offset, layout))) {
        status = npy_fail_with_path(status, path);
        goto cleanup;
    }
    uint64_t found = file_size - data_offset;
    if (found != (uint64_t)layout->data_bytes) {
        status = attn__fail(ATTN_ERR_FORMAT, "%s: %s: expected %lld bytes of data, found %llu", path,
                           found < (uint64_t)layout->data_bytes ? "truncated" : "trailing data",
                           (long long)layout->data_bytes, (unsigned long long)found);
        goto cleanup;
    }
cleanup:
    free(header);
    if (status != ATTN_OK) {
        close(*fd);
        *fd = -1;
    }
    return status;
}

/* The checks both readers begin with: out (named out_name for messages)
 * zeroed, path present, then the file opened and its header parsed. */
static attn_status begin_reading(const char *fn, const char *path, attn_array *out,
                                 const char *out_name, int *fd, npy_layout *layout) {
    if (!out) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn, out_name);
    memset(out, 0, sizeof *out);
    if (!path) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "%s: path is NULL", fn);
    return open_and_parse(path, fd, layout);
}

attn_status attn_npy_read_header(const char *path, attn_array *shape_only, size_t *data_offset) {
    int fd;
    npy_layout layout;
    attn_status status = begin_reading("attn_npy_read_header", path, shape_only, "shape_only", &fd, &layout);
    if (status != ATTN_OK) return status;
    close(fd);
    npy_layout_answer(&layout, shape_only, data_offset);
    return ATTN_OK;
}

/* What read_data checks in each chunk it reads. */
typedef enum { CHECK_NOTHING, CHECK_FINITE, CHECK_FINITE_BUT_NEG_INF } read_check;

/* Reads a file's whole data (layout->data_bytes from layout->data_offset)
 * into data, converted to native order and, when asked, checked finite: in
 * chunks of READ_CHUNK bytes, on the library's threads when there are
 * several chunks.  Copying out of the page cache and faulting in the pages
 * it lands in is work for the kernel's copy loop and the page allocator,
 * which one core does not saturate; and each chunk is put in native order
 * and checked while it is still in that core's cache, so the array is
 * swept once, not three times.  A failure (an I/O error, the file
 * shrinking under us, a non-finite element) is the one of the first chunk
 * that failed, whatever the thread count: the messages are deterministic.
 * On ATTN_ERR_NONFINITE *first_bad is the element's index. */
#define READ_CHUNK ((size_t)1 << 20)

static attn_status read_data(int fd, const char *path, const npy_layout *layout, void *data, read_check check,
                             int64_t *first_bad) {
    const size_t bytes = (size_t)layout->data_bytes, elem = attn_dtype_size(layout->dtype);
    const int64_t chunks = (int64_t)((bytes + READ_CHUNK - 1) / READ_CHUNK);
    const int threads = chunks > 1 ? attn__threads_for(0, (double)bytes, (double)chunks) : 1;
    const bool checked = check != CHECK_NOTHING && attn__finite_checkable(layout->dtype);
    int64_t failed = chunks; /* the first chunk that failed                          */
    int result = 0;          /* its attn__read_range result; 0: a non-finite element  */
    uint64_t stopped_at = 0;
    int64_t bad = -1;        /* that element's index                                  */
#ifdef ATTN_HAVE_OPENMP
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
#endif
    for (int64_t c = 0; c < chunks; c++) {
        const size_t at = (size_t)c * READ_CHUNK, n = bytes - at < READ_CHUNK ? bytes - at : READ_CHUNK;
        uint8_t *chunk = (uint8_t *)data + at;
        uint64_t where = 0;
        int64_t bad_here = -1;
        const int r = attn__read_range(fd, chunk, n, (uint64_t)layout->data_offset + at, &where);
        if (r == 0) {
            attn__npy_to_native(layout, chunk, (int64_t)(n / elem));
            if (!checked) continue;
            bad_here = attn__first_nonfinite(layout->dtype, chunk, (int64_t)(n / elem),
                                             check == CHECK_FINITE_BUT_NEG_INF);
            if (bad_here < 0) continue;
        }
#ifdef ATTN_HAVE_OPENMP
#pragma omp critical /* unnamed: a named one is an exported symbol */
#endif
        if (c < failed) {
            failed = c;
            result = r;
            stopped_at = where;
            bad = bad_here < 0 ? -1 : (int64_t)(at / elem) + bad_here;
        }
    }
    (void)threads;
    if (failed == chunks) return ATTN_OK;
    if (result != 0) return attn__read_failed(path, result, stopped_at);
    if (first_bad) *first_bad = bad;
    return attn__nonfinite_failure(path, layout->dtype, data, bad, check == CHECK_FINITE_BUT_NEG_INF);
}

static attn_status load(const char *fn, const char *path, read_check check, attn_array *out, int64_t *first_bad) {
    int fd;
    npy_layout layout;
    if (first_bad) *first_bad = -1;
    attn_status status = begin_reading(fn, path, out, "out", &fd, &layout);
    if (status != ATTN_OK) return status;
    if ((status = attn__array_alloc_for_reading(out, layout.dtype, layout.ndim, layout.shape))) {
        status = npy_fail_with_path(status, path);
        goto cleanup;
    }
    if ((status = read_data(fd, path, &layout, out->data, check, first_bad))) {
        attn_array_free(out);
        goto cleanup;
    }
    /* The size was checked before reading: more bytes now means the file
     * grew while it was read, and what was read may not be what it holds. */
    uint8_t extra;
    ssize_t more = pread(fd, &extra, 1, (off_t)layout.data_offset + (off_t)layout.data_bytes);
    if (more != 0) {
        attn_array_free(out);
        status = attn__fail(ATTN_ERR_IO, "'%s' changed while it was read (it grew past the %lld bytes its "
                            "header describes)", path, (long long)(layout.data_offset + (size_t)layout.data_bytes));
        goto cleanup;
    }
cleanup:
    close(fd);
    return status;
}

attn_status attn_npy_load(const char *path, attn_array *out) {
    return load("attn_npy_load", path, CHECK_NOTHING, out, NULL);
}

attn_status attn_npy_load_finite(const char *path, int allow_neg_inf, attn_array *out, int64_t *first_bad) {
    return load("attn_npy_load_finite", path, allow_neg_inf ? CHECK_FINITE_BUT_NEG_INF : CHECK_FINITE, out,
                first_bad);
}

attn_status attn_npy_read_rows(const char *path, int axis, int64_t first, int64_t count,
                               attn_array *out) {
    int fd;
    npy_layout layout;
    attn_status status = begin_reading("attn_npy_read_rows", path, out, "out", &fd, &layout);
    if (status != ATTN_OK) return status;

    if (axis < 0 || axis >= layout.ndim) {
        status = attn__fail(ATTN_ERR_SHAPE, "%s: axis %d does not exist in an array of %d dimensions",
                           path, axis, layout.ndim);
        goto cleanup;
    }
    const int64_t rows = layout.shape[axis];
    if (first < 0 || count < 0 || first > rows || count > rows - first) {
        status = attn__fail(ATTN_ERR_SHAPE, "%s: %lld rows from row %lld of axis %d are outside [0, %lld)",
                            path, (long long)count, (long long)first, axis, (long long)rows);
        goto cleanup;
    }
    int64_t shape[ATTN_MAX_DIMS];
    memcpy(shape, layout.shape, sizeof shape);
    shape[axis] = count;
    if ((status = attn__array_alloc_for_reading(out, layout.dtype, layout.ndim, shape))) goto cleanup;
    /* An empty array has nothing to read.  (Its other dimensions' products
     * are defined all the same: the header's shape passed shape_elements.) */
    if (layout.count == 0 || out->count == 0) goto cleanup;
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < axis; d++) outer *= layout.shape[d];
    for (int d = axis + 1; d < layout.ndim; d++) inner *= layout.shape[d];

    const size_t elem = attn_dtype_size(layout.dtype);
    const size_t run = (size_t)(count * inner) * elem;
    for (int64_t o = 0; o < outer && run > 0; o++) {
        const uint64_t at = (uint64_t)layout.data_offset + (uint64_t)((o * rows + first) * inner) * elem;
        if ((status = attn__read_exactly(fd, path, (uint8_t *)out->data + (size_t)o * run, run, at))) {
            attn_array_free(out);
            goto cleanup;
        }
    }
    attn__npy_to_native(&layout, out->data, out->count);
cleanup:
    close(fd);
    return status;
}

attn_status attn_npy_format_header(attn_dtype dtype, int ndim, const int64_t *shape,
                                   void *header, size_t cap, size_t *size) {
    if (!header || !size || (ndim > 0 && !shape))
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT,
                         "attn_npy_format_header: header, size or shape is NULL");
    if (attn_dtype_size(dtype) == 0)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_npy_format_header: invalid dtype %d",
                         (int)dtype);
    if (ndim < 0 || ndim > ATTN_MAX_DIMS)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT,
                         "attn_npy_format_header: ndim = %d, must be between 0 and %d", ndim,
                         ATTN_MAX_DIMS);
    int64_t count = 1, bytes;
    for (int d = 0; d < ndim; d++)
        if (shape[d] < 0)
            return attn__fail(ATTN_ERR_INVALID_ARGUMENT,
                             "attn_npy_format_header: shape[%d] = %lld is negative", d,
                             (long long)shape[d]);
    for (int d = 0; d < ndim; d++)
        if (mul_overflows(count, shape[d], &count))
            return attn__fail(ATTN_ERR_OVERFLOW, "attn_npy_format_header: the element count overflows");
    if (mul_overflows(count, (int64_t)attn_dtype_size(dtype), &bytes))
        return attn__fail(ATTN_ERR_OVERFLOW, "attn_npy_format_header: the byte size overflows");
    uint8_t image[NPY_HEADER_CAP];
    size_t length = attn__npy_format_header(dtype, ndim, shape, image);
    if (cap < length)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT,
                         "attn_npy_format_header: the header needs %zu bytes, cap is %zu", length,
                         cap);
    memcpy(header, image, length);
    *size = length;
    return ATTN_OK;
}
