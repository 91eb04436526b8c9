/*
 * file.h — the one way the libraries open a file to read it: a regular
 * file, opened without blocking (a FIFO would block open() forever, a
 * device or /proc file never end).  Static inline, as base.h's helpers, so
 * that the component libraries (libattn_model's GGUF reader) open files by
 * the same rule without an internal symbol of libattn; file.c
 * (attn_read_file) builds on it too.
 */
#ifndef ATTN_IO_FILE_H
#define ATTN_IO_FILE_H

#include "attn_io.h"
#include "base/base.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static inline const char *file_kind_of(mode_t mode) {
    return S_ISDIR(mode) ? "a directory" : S_ISFIFO(mode) ? "a FIFO" : S_ISCHR(mode) ? "a character device"
         : S_ISBLK(mode) ? "a block device" : S_ISSOCK(mode) ? "a socket" : "a special file";
}

/* Opens path for reading and checks it is a regular file (what: "inputs",
 * "GGUF models": for the message when it is not).  *fd is open and *size
 * its size on success; on failure nothing is left open. */
static inline attn_status file_open_regular(const char *path, const char *what, int *fd, uint64_t *size) {
    char reason[256];
    struct stat st;
    *fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (*fd < 0) {
        /* A UNIX socket cannot be opened at all (ENXIO, "No such device or
         * address"): say what it is instead. */
        const int err = errno;
        if (err == ENXIO && stat(path, &st) == 0 && !S_ISREG(st.st_mode))
            return attn__fail(ATTN_ERR_IO, "cannot read '%s': it is %s, not a regular file (%s are read from files)",
                              path, file_kind_of(st.st_mode), what);
        return attn__fail(ATTN_ERR_IO, "cannot open '%s': %s", path, errno_text(err, reason, sizeof reason));
    }
    attn_status status = ATTN_OK;
    if (fstat(*fd, &st) != 0)
        status = attn__fail(ATTN_ERR_IO, "cannot stat '%s': %s", path, errno_text(errno, reason, sizeof reason));
    else if (!S_ISREG(st.st_mode))
        status = attn__fail(ATTN_ERR_IO, "cannot read '%s': it is %s, not a regular file (%s are read from files)",
                            path, file_kind_of(st.st_mode), what);
    if (status != ATTN_OK) {
        close(*fd);
        *fd = -1;
        return status;
    }
    *size = (uint64_t)st.st_size;
    return ATTN_OK;
}

/* Maps the whole of path read-only (file_open_regular's rule and `what`):
 * *map (NULL for an empty file, which cannot be mapped) and *size; the
 * caller munmaps a non-NULL *map.  A file over max_bytes (0: no bound but
 * the address space) is refused as ATTN_ERR_FORMAT, "'path' is N bytes:
 * <limit_name> is at most M MiB", before anything is mapped: a bound keeps
 * /dev/zero-like surprises and huge files from being mapped and parsed.
 * On failure nothing is left open or mapped. */
static inline attn_status file_map_regular(const char *path, const char *what, uint64_t max_bytes,
                                           const char *limit_name, void **map, size_t *size) {
    int fd = -1;
    uint64_t bytes = 0;
    *map = NULL;
    *size = 0;
    attn_status st = file_open_regular(path, what, &fd, &bytes);
    if (st != ATTN_OK) return st;
    if (max_bytes && bytes > max_bytes)
        st = attn__fail(ATTN_ERR_FORMAT, "'%s' is %llu bytes: %s is at most %llu MiB", path, (unsigned long long)bytes,
                        limit_name, (unsigned long long)(max_bytes >> 20));
    else if (bytes > SIZE_MAX)
        st = attn__fail(ATTN_ERR_UNSUPPORTED, "'%s' is %llu bytes, more than this machine can map", path,
                        (unsigned long long)bytes);
    if (st == ATTN_OK && bytes > 0) {
        void *m = mmap(NULL, (size_t)bytes, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            char reason[256];
            st = attn__fail(ATTN_ERR_IO, "cannot map '%s': %s", path, errno_text(errno, reason, sizeof reason));
        } else {
            *map = m;
        }
    }
    close(fd); /* the mapping keeps the file */
    if (st == ATTN_OK) *size = (size_t)bytes;
    return st;
}

/* Reads exactly size bytes at offset; a short file is a truncation. */
attn_status attn__read_exactly(int fd, const char *path, void *buf, size_t size, uint64_t offset);

/* attn__read_exactly in two halves, for readers that read in several
 * threads (the thread-local message would be lost in a worker):
 * attn__read_range sets nothing and returns 0, an errno value, or -1 when
 * the file ended (*stopped_at: the byte where it stopped);
 * attn__read_failed turns that into attn__read_exactly's failure. */
int attn__read_range(int fd, void *buf, size_t size, uint64_t offset, uint64_t *stopped_at);
attn_status attn__read_failed(const char *path, int result, uint64_t stopped_at);

#endif /* ATTN_IO_FILE_H */
