/*
 * writeback.c — writeback.h.  A file of its own because sync_file_range
 * needs _GNU_SOURCE, which would also switch the rest of output.c to GNU's
 * strerror_r (a char * result, where errno_text expects POSIX's int).
 */
#if defined(__linux__)
#define _GNU_SOURCE /* sync_file_range */
#include <fcntl.h>
#endif

#include "base/writeback.h"

void attn__start_writeback(int fd, uint64_t offset, uint64_t length) {
#if defined(__linux__) && defined(SYNC_FILE_RANGE_WRITE)
    (void)sync_file_range(fd, (off_t)offset, (off_t)length, SYNC_FILE_RANGE_WRITE);
#else
    (void)fd;
    (void)offset;
    (void)length;
#endif
}
