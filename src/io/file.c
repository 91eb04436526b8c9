/*
 * file.c — reading input files safely: only regular files (a FIFO or a
 * device would block or never end), opened without blocking so that a FIFO
 * is refused rather than waited on, and never more bytes than the caller's
 * limit or than the file held when it was opened (a growing file, a hole).
 */
#include "io/file.h"

#include <stdlib.h>

int attn__read_range(int fd, void *buf, size_t size, uint64_t offset, uint64_t *stopped_at) {
    size_t done = 0;
    while (done < size) {
        ssize_t got = pread(fd, (uint8_t *)buf + done, size - done, (off_t)(offset + done));
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) {
            *stopped_at = offset + done;
            return got < 0 ? errno : -1;
        }
        done += (size_t)got;
    }
    return 0;
}

attn_status attn__read_failed(const char *path, int result, uint64_t stopped_at) {
    char reason[256];
    if (result > 0)
        return attn__fail(ATTN_ERR_IO, "cannot read '%s': %s", path, errno_text(result, reason, sizeof reason));
    return attn__fail(ATTN_ERR_FORMAT, "'%s': truncated: the file ends at byte %llu", path,
                      (unsigned long long)stopped_at);
}

attn_status attn__read_exactly(int fd, const char *path, void *buf, size_t size, uint64_t offset) {
    uint64_t stopped_at = 0;
    const int result = attn__read_range(fd, buf, size, offset, &stopped_at);
    return result == 0 ? ATTN_OK : attn__read_failed(path, result, stopped_at);
}

attn_status attn_read_file(const char *path, size_t max_bytes, void **data, size_t *size) {
    if (!path || !data || !size)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_read_file: %s is NULL", !path ? "path" : !data ? "data" : "size");
    *data = NULL;
    *size = 0;
    int fd;
    uint64_t file_size;
    attn_status status = file_open_regular(path, "inputs", &fd, &file_size);
    if (status != ATTN_OK) return status;
    if (file_size > max_bytes) {
        close(fd);
        return attn__fail(ATTN_ERR_FORMAT, "'%s' is %llu bytes, more than the %zu this input may have", path,
                          (unsigned long long)file_size, max_bytes);
    }
    /* One byte more, for the terminating 0 text readers want. */
    uint8_t *buf = malloc((size_t)file_size + 1);
    if (!buf) {
        close(fd);
        return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "'%s': cannot allocate %llu bytes", path,
                          (unsigned long long)file_size);
    }
    status = attn__read_exactly(fd, path, buf, (size_t)file_size, 0);
    close(fd);
    if (status != ATTN_OK) {
        free(buf);
        return status;
    }
    buf[file_size] = 0;
    *data = buf;
    *size = (size_t)file_size;
    return ATTN_OK;
}
