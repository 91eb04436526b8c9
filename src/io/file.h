/*
 * file.h — the one way the library opens a file to read it (file.c): a
 * regular file, opened without blocking; npy_file.c and attn_read_file
 * build on it.
 */
#ifndef ATTN_IO_FILE_H
#define ATTN_IO_FILE_H

#include "attn_io.h"

/* Opens path for reading and checks it is a regular file (what: "inputs",
 * ".npy inputs": for the message when it is not).  *fd is open and *size
 * its size on success; on failure nothing is left open. */
attn_status attn__open_regular(const char *path, const char *what, int *fd, uint64_t *size);
/* Reads exactly size bytes at offset; a short file is a truncation. */
attn_status attn__read_exactly(int fd, const char *path, void *buf, size_t size, uint64_t offset);

#endif /* ATTN_IO_FILE_H */
