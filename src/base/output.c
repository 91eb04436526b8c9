/*
 * output.c — output files that are never left half-written (attn_io.h):
 * a temporary file beside the target, renamed over it when complete.  The
 * one place attn writes a file: .npy arrays, pictures, reports and the
 * ring's shards all come through here.
 */
#include "attn_io.h"

#include "base/base.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

struct attn_output {
    char *path; /* the target                                */
    char *temp; /* path.tmp-<pid>-<n>, created exclusively   */
    int fd;
};

/* Creates path.tmp-<pid>-<n> exclusively with mode 0666 less the umask, as
 * for any new file (mkstemp would force 0600 on a file meant to be shared).
 * The counter is per thread; O_EXCL settles any collision, which is retried.
 * Returns the descriptor, or -1 with errno set. */
static int create_temp_beside(const char *path, char *temp, size_t cap) {
    static _Thread_local unsigned counter;
    for (int attempt = 0; attempt < 1000; attempt++) {
        if ((size_t)snprintf(temp, cap, "%s.tmp-%ld-%u", path, (long)getpid(), counter++) >= cap) {
            errno = ENAMETOOLONG;
            return -1;
        }
        int fd = open(temp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd >= 0 || errno != EEXIST) return fd;
    }
    errno = EEXIST;
    return -1;
}

static void output_free(attn_output *o) {
    free(o->path);
    free(o->temp);
    free(o);
}

attn_status attn_output_open(const char *path, attn_output **out) {
    char reason[256];
    if (!out) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_output_open: out is NULL");
    *out = NULL;
    if (!path || !*path)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_output_open: %s", path ? "path is empty" : "path is NULL");
    attn_output *o = calloc(1, sizeof *o);
    const size_t len = strlen(path), cap = len + 48;
    if (o) o->path = malloc(len + 1);
    if (o) o->temp = malloc(cap);
    if (!o || !o->path || !o->temp) {
        if (o) output_free(o);
        return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "'%s': cannot allocate a file name", path);
    }
    memcpy(o->path, path, len + 1);
    o->fd = create_temp_beside(path, o->temp, cap);
    if (o->fd < 0) {
        attn_status st = attn__fail(ATTN_ERR_IO, "cannot create a temporary file beside '%s': %s", path,
                                    errno_text(errno, reason, sizeof reason));
        output_free(o);
        return st;
    }
    *out = o;
    return ATTN_OK;
}

attn_status attn_output_write(attn_output *o, const void *data, size_t size) {
    char reason[256];
    if (!o) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_output_write: output is NULL");
    if (size > 0 && !data) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_output_write: data is NULL");
    size_t written = 0;
    while (written < size) {
        ssize_t n = write(o->fd, (const char *)data + written, size - written);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0)
            return attn__fail(ATTN_ERR_IO, "cannot write '%s': %s", o->path,
                              errno_text(n < 0 ? errno : EIO, reason, sizeof reason));
        written += (size_t)n;
    }
    return ATTN_OK;
}

const char *attn_output_temp_path(const attn_output *o) { return o ? o->temp : NULL; }

attn_status attn_output_resize(attn_output *o, uint64_t size) {
    char reason[256];
    if (!o) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_output_resize: output is NULL");
    if (size > (uint64_t)INT64_MAX || ftruncate(o->fd, (off_t)size) != 0)
        return attn__fail(ATTN_ERR_IO, "cannot size '%s' to %llu bytes: %s", o->path,
                          (unsigned long long)size, errno_text(size > (uint64_t)INT64_MAX ? EFBIG : errno,
                                                               reason, sizeof reason));
    return ATTN_OK;
}

/* fsync of the directory holding path, so that the rename itself survives
 * a crash.  Best effort: some file systems refuse directory fsync. */
static void sync_directory(const char *path) {
    char *copy = strdup(path);
    if (!copy) return;
    int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
    free(copy);
}

attn_status attn_output_commit(attn_output *o) {
    char reason[256];
    if (!o) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_output_commit: output is NULL");
    attn_status st = ATTN_OK;
    /* The data reach the disk before the name does: a crash after the
     * rename leaves the complete file, never an empty one under the name
     * (ext4 and XFS otherwise may reorder the two).  fsync also reports the
     * write errors (a full disk) that write() deferred. */
    if (fsync(o->fd) != 0 && errno != EINVAL && errno != EROFS)
        st = attn__fail(ATTN_ERR_IO, "cannot write '%s': %s", o->path, errno_text(errno, reason, sizeof reason));
    if (close(o->fd) != 0 && st == ATTN_OK)
        st = attn__fail(ATTN_ERR_IO, "cannot write '%s': %s", o->path, errno_text(errno, reason, sizeof reason));
    o->fd = -1;
    if (st == ATTN_OK && rename(o->temp, o->path) != 0)
        st = attn__fail(ATTN_ERR_IO, "cannot rename the temporary file to '%s': %s", o->path,
                        errno_text(errno, reason, sizeof reason));
    if (st == ATTN_OK)
        sync_directory(o->path);
    else
        unlink(o->temp);
    output_free(o);
    return st;
}

void attn_output_discard(attn_output *o) {
    if (!o) return;
    if (o->fd >= 0) close(o->fd);
    unlink(o->temp);
    output_free(o);
}

attn_status attn_output_write_file(const char *path, const void *data, size_t size) {
    attn_output *o;
    attn_status st = attn_output_open(path, &o);
    if (st) return st;
    if ((st = attn_output_write(o, data, size))) {
        attn_output_discard(o);
        return st;
    }
    return attn_output_commit(o);
}
