/*
 * output.c — output files that are never left half-written (attn_io.h).
 * The one place attn writes a file: .npy arrays, pictures, reports and the
 * ring's shards all come through here.
 *
 * A regular target (or a new name) is written to a temporary file beside it
 * and renamed over it when complete, after fsync of the data; the directory
 * is fsynced after the rename.  A symbolic link is followed: the file it
 * names is the one replaced, and the link stays a link.  A target that
 * exists and is not a regular file (a character device such as /dev/null
 * or /dev/stdout, a FIFO) is written in place: there is nothing to replace,
 * and renaming over it would destroy it.  A directory or socket is refused.
 *
 * The temporary files in flight are listed in a table that
 * attn_output_discard_all reads from a signal handler: it only loads
 * pointers and calls unlink, which is async-signal-safe.
 */
#define _XOPEN_SOURCE 700 /* realpath */

#include "attn_io.h"

#include "base/base.h"
#include "base/writeback.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

struct attn_output {
    char *path;  /* the file to write: the target, its symlinks resolved      */
    char *shown; /* the target as the caller named it, for messages            */
    char *temp;  /* path.tmp-<pid>-<n>, created exclusively; NULL when direct  */
    int fd;
    int slot;    /* the temporary file's entry in `in_flight`, or -1          */
    uint64_t written;    /* bytes written so far                              */
    uint64_t writeback;  /* bytes before this offset are being written back   */
};

/* Writeback of a temporary file is started every WRITEBACK_CHUNK bytes
 * (Linux's sync_file_range, which does not wait): the disk then writes the
 * first chunks while the later ones are still being copied into the page
 * cache, and the fsync of the commit waits only for the rest.  On a 32 MiB
 * output that overlaps most of the copy (tens of ms) with the disk's
 * write.  The fsync still guarantees the data; this only starts it early
 * (base/writeback.c). */
#define WRITEBACK_CHUNK ((uint64_t)4 << 20)

/* The temporary files not yet committed or discarded.  A slot holds the
 * temp name of a live output (owned by it) or NULL.  Outputs beyond the
 * table's size still work; only a signal would then leave their
 * temporaries behind. */
enum { IN_FLIGHT_SLOTS = 64 };
static _Atomic(char *) in_flight[IN_FLIGHT_SLOTS];

static int in_flight_add(char *temp) {
    for (int i = 0; i < IN_FLIGHT_SLOTS; i++) {
        char *expected = NULL;
        if (atomic_compare_exchange_strong(&in_flight[i], &expected, temp)) return i;
    }
    return -1;
}

static void in_flight_remove(int slot) {
    if (slot >= 0) atomic_store(&in_flight[slot], NULL);
}

void attn_output_discard_all(void) {
    for (int i = 0; i < IN_FLIGHT_SLOTS; i++) {
        char *temp = atomic_load(&in_flight[i]);
        if (temp) unlink(temp);
    }
}

/* Creates path.tmp-<pid>-<n> exclusively with mode 0666 less the umask, as
 * for any new file (mkstemp would force 0600 on a file meant to be shared).
 * The counter is per thread; O_EXCL settles any collision, which is retried.
 * The name is listed in `in_flight` (*slot) before the file is created: a
 * signal that came between the creation and the listing would leave the
 * file behind, while one that comes before the creation only unlinks a
 * name that is not there yet.  Returns the descriptor, or -1 with errno
 * set and nothing listed. */
static int create_temp_beside(const char *path, char *temp, size_t cap, int *slot) {
    static _Thread_local unsigned counter;
    for (int attempt = 0; attempt < 1000; attempt++) {
        if ((size_t)snprintf(temp, cap, "%s.tmp-%ld-%u", path, (long)getpid(), counter++) >= cap) {
            errno = ENAMETOOLONG;
            return -1;
        }
        *slot = in_flight_add(temp);
        int fd = open(temp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd >= 0) return fd;
        int err = errno;
        in_flight_remove(*slot); /* before the name is rewritten */
        *slot = -1;
        if (err != EEXIST) {
            errno = err;
            return -1;
        }
    }
    errno = EEXIST;
    return -1;
}

static void output_free(attn_output *o) {
    in_flight_remove(o->slot);
    free(o->path);
    free(o->shown);
    free(o->temp);
    free(o);
}

static const char *kind_of(mode_t mode) {
    return S_ISDIR(mode) ? "a directory" : S_ISSOCK(mode) ? "a socket" : "a special file";
}

/* True for the names of an already open descriptor (/dev/stdout, /dev/fd/3,
 * /proc/self/fd/1): they lead through a symbolic link to whatever the
 * descriptor is, and replacing that by a rename would leave the process
 * writing to an unlinked file; they are written in place. */
static bool names_open_descriptor(const char *path) {
    return strcmp(path, "/dev/stdout") == 0 || strcmp(path, "/dev/stderr") == 0 ||
           strncmp(path, "/dev/fd/", 8) == 0 || strncmp(path, "/proc/self/fd/", 14) == 0;
}

/* Where the data go: the target itself when it is not a regular file
 * (*direct), else the file a symlink chain ends at, or the path as given
 * when nothing is there yet.  *target is malloc'd. */
static attn_status resolve_target(const char *path, char **target, bool *direct) {
    char reason[256];
    struct stat st;
    *direct = false;
    if (names_open_descriptor(path)) {
        *direct = true;
        *target = strdup(path);
        return *target ? ATTN_OK : attn__fail(ATTN_ERR_OUT_OF_MEMORY, "'%s': out of memory", path);
    }
    if (stat(path, &st) != 0) {
        if (errno != ENOENT)
            return attn__fail(ATTN_ERR_IO, "cannot write '%s': %s", path, errno_text(errno, reason, sizeof reason));
        struct stat link;
        if (lstat(path, &link) == 0 && S_ISLNK(link.st_mode))
            return attn__fail(ATTN_ERR_IO, "cannot write '%s': it is a symbolic link to a file that does not "
                              "exist (write to the file itself)", path);
        *target = strdup(path); /* a new file */
    } else if (S_ISREG(st.st_mode)) {
        *target = realpath(path, NULL); /* through any symbolic links */
    } else if (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode) || S_ISBLK(st.st_mode)) {
        *direct = true;
        *target = strdup(path);
    } else {
        return attn__fail(ATTN_ERR_IO, "cannot write '%s': it is %s", path, kind_of(st.st_mode));
    }
    if (!*target)
        return attn__fail(errno == ENOMEM ? ATTN_ERR_OUT_OF_MEMORY : ATTN_ERR_IO, "cannot write '%s': %s", path,
                          errno_text(errno, reason, sizeof reason));
    return ATTN_OK;
}

attn_status attn_output_open(const char *path, attn_output **out) {
    char reason[256];
    if (!out) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_output_open: out is NULL");
    *out = NULL;
    if (!path || !*path)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_output_open: %s", path ? "path is empty" : "path is NULL");
    attn_output *o = calloc(1, sizeof *o);
    if (!o) return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "'%s': out of memory", path);
    o->fd = -1;
    o->slot = -1;
    bool direct;
    attn_status st = resolve_target(path, &o->path, &direct);
    if (st == ATTN_OK && !(o->shown = strdup(path)))
        st = attn__fail(ATTN_ERR_OUT_OF_MEMORY, "'%s': out of memory", path);
    if (st) {
        output_free(o);
        return st;
    }
    if (direct) {
        /* A FIFO without a reader would block: refuse it instead. */
        o->fd = open(o->path, O_WRONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
        if (o->fd >= 0) {
            int flags = fcntl(o->fd, F_GETFL);
            if (flags >= 0) (void)fcntl(o->fd, F_SETFL, flags & ~O_NONBLOCK);
        } else {
            st = attn__fail(ATTN_ERR_IO, "cannot open '%s' for writing: %s", path,
                            errno == ENXIO ? "a FIFO with no reader" : errno_text(errno, reason, sizeof reason));
        }
    } else {
        const size_t cap = strlen(o->path) + 48;
        if (!(o->temp = malloc(cap))) {
            st = attn__fail(ATTN_ERR_OUT_OF_MEMORY, "'%s': out of memory", path);
        } else if ((o->fd = create_temp_beside(o->path, o->temp, cap, &o->slot)) < 0) {
            st = attn__fail(ATTN_ERR_IO, "cannot create a temporary file beside '%s': %s", path,
                            errno_text(errno, reason, sizeof reason));
            free(o->temp);
            o->temp = NULL; /* nothing was created */
        }
    }
    if (st) {
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
        const size_t left = size - written, piece = o->temp && left > WRITEBACK_CHUNK ? (size_t)WRITEBACK_CHUNK : left;
        ssize_t n = write(o->fd, (const char *)data + written, piece);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0)
            return attn__fail(ATTN_ERR_IO, "cannot write '%s': %s", o->shown,
                              errno_text(n < 0 ? errno : EIO, reason, sizeof reason));
        written += (size_t)n;
        o->written += (uint64_t)n;
        if (o->temp && o->written - o->writeback >= WRITEBACK_CHUNK) {
            attn__start_writeback(o->fd, o->writeback, o->written - o->writeback);
            o->writeback = o->written;
        }
    }
    return ATTN_OK;
}

const char *attn_output_temp_path(const attn_output *o) { return o ? o->temp : NULL; }

attn_status attn_output_resize(attn_output *o, uint64_t size) {
    char reason[256];
    if (!o) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_output_resize: output is NULL");
    if (!o->temp)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "'%s' is not a regular file: it cannot be sized", o->shown);
    if (size > (uint64_t)INT64_MAX || ftruncate(o->fd, (off_t)size) != 0)
        return attn__fail(ATTN_ERR_IO, "cannot size '%s' to %llu bytes: %s", o->shown, (unsigned long long)size,
                          errno_text(size > (uint64_t)INT64_MAX ? EFBIG : errno, reason, sizeof reason));
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
     * write errors (a full disk) that write() deferred.  Devices and FIFOs
     * may not support it (EINVAL): nothing to wait for there. */
    if (fsync(o->fd) != 0 && errno != EINVAL && errno != EROFS && errno != ENOTSUP)
        st = attn__fail(ATTN_ERR_IO, "cannot write '%s': %s", o->shown, errno_text(errno, reason, sizeof reason));
    if (close(o->fd) != 0 && st == ATTN_OK)
        st = attn__fail(ATTN_ERR_IO, "cannot write '%s': %s", o->shown, errno_text(errno, reason, sizeof reason));
    o->fd = -1;
    if (o->temp) {
        if (st == ATTN_OK && rename(o->temp, o->path) != 0)
            st = attn__fail(ATTN_ERR_IO, "cannot rename the temporary file to '%s': %s", o->shown,
                            errno_text(errno, reason, sizeof reason));
        if (st == ATTN_OK)
            sync_directory(o->path);
        else
            unlink(o->temp);
    }
    output_free(o);
    return st;
}

void attn_output_discard(attn_output *o) {
    if (!o) return;
    if (o->fd >= 0) close(o->fd);
    if (o->temp) unlink(o->temp);
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
