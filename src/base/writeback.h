/*
 * writeback.h — asking the kernel to start writing a file's dirty pages to
 * disk without waiting for them (output.c overlaps an output's copy into
 * the page cache with its disk write this way; the commit's fsync still
 * waits for all of it).
 */
#ifndef ATTN_BASE_WRITEBACK_H
#define ATTN_BASE_WRITEBACK_H

#include <stdint.h>

/* Starts writeback of bytes [offset, offset + length) of fd; returns at
 * once.  Best effort: a no-op where the system has no such call (only
 * Linux's sync_file_range is used) or refuses it. */
void attn__start_writeback(int fd, uint64_t offset, uint64_t length);

#endif /* ATTN_BASE_WRITEBACK_H */
