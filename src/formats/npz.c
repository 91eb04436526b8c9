/*
 * npz.c — numpy's .npz archives (attn_npz.h): a zip of NAME.npy members.
 * Part of libattn_model (zlib is its dependency, not libattn's); it builds
 * on the core's .npy serialiser and its atomic output files.
 *
 * The zip records used (PKWARE APPNOTE 6.3, little-endian):
 *   local header    30 bytes + name      then the member's bytes
 *   central entry   46 bytes + name (+ zip64 extra when read)
 *   end of directory 22 bytes (+ a comment the reader skips)
 * Each member is serialised (and deflated) in memory before its local
 * header is written, so the header carries the CRC-32 and sizes and no
 * data descriptor is needed: the writer only appends.
 */
#include "attn_npz.h"

#include "base/base.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#ifdef ATTN_HAVE_ZLIB
#include <zlib.h>
#endif

#define ZIP_LOCAL_SIG 0x04034b50u
#define ZIP_CENTRAL_SIG 0x02014b50u
#define ZIP_END_SIG 0x06054b50u
#define ZIP_LIMIT 0xffffffffu   /* a 32-bit field at this value means "see zip64" */
#define ZIP_DOS_DATE 0x0021u    /* 1980-01-01: fixed, so that output is reproducible */
#define NPZ_NAME_MAX 250
#define NPZ_DIRECTORY_MAX (256u << 20) /* bytes of central directory the reader accepts */

/* ------------------------------------------------------------------ CRC-32 */

/* The zip CRC (reflected polynomial 0xEDB88320), by a table built once;
 * its own code rather than zlib's, so that stored archives need no zlib. */
static uint32_t crc_table[256];
static int crc_ready;

/* The CRC of the bytes before p followed by p's n (crc 0: none before),
 * so that a member is checked as it streams. */
static uint32_t crc32_update(uint32_t crc, const uint8_t *p, size_t n) {
    if (!crc_ready) { /* racing threads write the same values */
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++) c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
            crc_table[i] = c;
        }
        crc_ready = 1;
    }
    uint32_t c = crc ^ 0xffffffffu;
    for (size_t i = 0; i < n; i++) c = crc_table[(c ^ p[i]) & 0xff] ^ (c >> 8);
    return c ^ 0xffffffffu;
}

static uint32_t crc32_of(const uint8_t *p, size_t n) { return crc32_update(0, p, n); }

static void put16(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}
static void put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get16(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8; }
static uint32_t get32(const uint8_t *p) { return get16(p) | get16(p + 2) << 16; }
static uint64_t get64(const uint8_t *p) { return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32; }

/* ------------------------------------------------------------------ writer */

typedef struct npz_entry {
    char *name; /* NAME.npy */
    uint32_t crc, stored_size, size, offset;
    int deflated;
} npz_entry;

struct attn_npz_writer {
    attn_output *out;
    int compress;
    uint64_t offset; /* bytes written so far */
    npz_entry *entries;
    int64_t n, cap;
};

attn_status attn_npz_create(const char *path, int compress, attn_npz_writer **out) {
    if (!path || !out)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_npz_create: %s is NULL", !path ? "path" : "out");
    *out = NULL;
#ifndef ATTN_HAVE_ZLIB
    if (compress)
        return attn__fail(ATTN_ERR_UNSUPPORTED, "%s: deflated .npz needs zlib, which this build lacks "
                                                "(Debian: zlib1g-dev); write it stored", path);
#endif
    attn_npz_writer *w = calloc(1, sizeof *w);
    if (!w) return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "attn_npz_create: out of memory");
    w->compress = compress != 0;
    attn_status st = attn_output_open(path, &w->out);
    if (st) {
        free(w);
        return st;
    }
    *out = w;
    return ATTN_OK;
}

static void writer_free(attn_npz_writer *w) {
    for (int64_t i = 0; i < w->n; i++) free(w->entries[i].name);
    free(w->entries);
    free(w);
}

void attn_npz_discard(attn_npz_writer *w) {
    if (!w) return;
    attn_output_discard(w->out);
    writer_free(w);
}

#ifdef ATTN_HAVE_ZLIB
/* Raw deflate (no zlib header: zip's method 8) of src into *dst (malloc'd). */
static attn_status deflate_raw(const uint8_t *src, size_t n, uint8_t **dst, size_t *dst_size) {
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    if (deflateInit2(&zs, 6, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY) != Z_OK)
        return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "zlib: deflateInit2 failed");
    const uLong bound = deflateBound(&zs, (uLong)n);
    uint8_t *buf = malloc(bound);
    if (!buf) {
        deflateEnd(&zs);
        return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "cannot allocate %lu bytes to deflate a member", (unsigned long)bound);
    }
    zs.next_in = (Bytef *)(uintptr_t)src;
    zs.avail_in = (uInt)n;
    zs.next_out = buf;
    zs.avail_out = (uInt)bound;
    const int rc = deflate(&zs, Z_FINISH);
    *dst_size = zs.total_out;
    deflateEnd(&zs);
    if (rc != Z_STREAM_END) {
        free(buf);
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "zlib: deflate did not finish (%d)", rc);
    }
    *dst = buf;
    return ATTN_OK;
}
#endif

attn_status attn_npz_add(attn_npz_writer *w, const char *name, const attn_array *a) {
    if (!w || !name || !a)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_npz_add: %s is NULL", !w ? "w" : !name ? "name" : "a");
    const size_t len = strlen(name);
    if (len == 0 || len > NPZ_NAME_MAX || name[0] == '/' || name[len - 1] == '/')
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT,
                          "attn_npz_add: the name '%s' must have 1 to %d bytes and no '/' at either end", name,
                          NPZ_NAME_MAX);
    if (w->n >= 65535)
        return attn__fail(ATTN_ERR_UNSUPPORTED, "attn_npz_add: 65,535 members already: zip64 archives are not written");
    char full[NPZ_NAME_MAX + 8];
    snprintf(full, sizeof full, "%s.npy", name);
    for (int64_t i = 0; i < w->n; i++)
        if (strcmp(w->entries[i].name, full) == 0)
            return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_npz_add: '%s' is already in the archive", name);
    if (w->n == w->cap) {
        const int64_t cap = w->cap ? 2 * w->cap : 32;
        npz_entry *e = realloc(w->entries, (size_t)cap * sizeof *e);
        if (!e) return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "attn_npz_add: out of memory");
        w->entries = e;
        w->cap = cap;
    }
    void *npy = NULL;
    uint8_t *packed = NULL;
    size_t npy_size = 0;
    attn_status st = attn_npy_serialize(a, &npy, &npy_size);
    if (st) return st;
    npz_entry e = {NULL, crc32_of(npy, npy_size), 0, 0, 0, w->compress};
    const uint8_t *data = npy;
    size_t data_size = npy_size;
    /* Refused before anything is written: a member past 4 GiB, or an
     * archive whose offsets would pass it, needs zip64. */
    if (npy_size >= ZIP_LIMIT) {
        st = attn__fail(ATTN_ERR_UNSUPPORTED, "attn_npz_add: '%s' is %zu bytes: members of 4 GiB or more need zip64, "
                                              "which is not written (save fewer hooks or positions)", name, npy_size);
        goto done;
    }
#ifdef ATTN_HAVE_ZLIB
    if (w->compress) {
        size_t packed_size = 0;
        if ((st = deflate_raw(npy, npy_size, &packed, &packed_size))) goto done;
        data = packed;
        data_size = packed_size;
    }
#endif
    const uint64_t end = w->offset + 30 + len + 4 + data_size;
    if (end >= ZIP_LIMIT) {
        st = attn__fail(ATTN_ERR_UNSUPPORTED, "attn_npz_add: with '%s' the archive would pass 4 GiB: zip64 is not "
                                              "written (save fewer hooks or positions, or split the cache)", name);
        goto done;
    }
    e.name = malloc(len + 5);
    if (!e.name) {
        st = attn__fail(ATTN_ERR_OUT_OF_MEMORY, "attn_npz_add: out of memory");
        goto done;
    }
    memcpy(e.name, full, len + 5);
    e.size = (uint32_t)npy_size;
    e.stored_size = (uint32_t)data_size;
    e.offset = (uint32_t)w->offset;
    uint8_t h[30];
    put32(h, ZIP_LOCAL_SIG);
    put16(h + 4, 20);             /* version needed: 2.0 (deflate) */
    put16(h + 6, 0);              /* flags: no descriptor, names in CP437/ASCII */
    put16(h + 8, e.deflated ? 8 : 0);
    put16(h + 10, 0);             /* time */
    put16(h + 12, ZIP_DOS_DATE);
    put32(h + 14, e.crc);
    put32(h + 18, e.stored_size);
    put32(h + 22, e.size);
    put16(h + 26, (uint32_t)(len + 4));
    put16(h + 28, 0);
    if ((st = attn_output_write(w->out, h, sizeof h)) || (st = attn_output_write(w->out, full, len + 4)) ||
        (st = attn_output_write(w->out, data, data_size))) {
        free(e.name);
        goto done;
    }
    w->offset = end;
    w->entries[w->n++] = e;
done:
    free(npy);
    free(packed);
    return st;
}

attn_status attn_npz_commit(attn_npz_writer *w) {
    if (!w) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_npz_commit: w is NULL");
    attn_status st = ATTN_OK;
    uint64_t directory = 0;
    for (int64_t i = 0; i < w->n; i++) directory += 46 + strlen(w->entries[i].name);
    if (w->offset + directory + 22 >= ZIP_LIMIT) {
        st = attn__fail(ATTN_ERR_UNSUPPORTED, "attn_npz_commit: the archive would pass 4 GiB: zip64 is not written");
        goto fail;
    }
    for (int64_t i = 0; i < w->n && !st; i++) {
        const npz_entry *e = &w->entries[i];
        const size_t len = strlen(e->name);
        uint8_t c[46];
        put32(c, ZIP_CENTRAL_SIG);
        put16(c + 4, 20 | 3u << 8);   /* made by: 2.0 on UNIX (the external attributes below) */
        put16(c + 6, 20);
        put16(c + 8, 0);
        put16(c + 10, e->deflated ? 8 : 0);
        put16(c + 12, 0);
        put16(c + 14, ZIP_DOS_DATE);
        put32(c + 16, e->crc);
        put32(c + 20, e->stored_size);
        put32(c + 24, e->size);
        put16(c + 28, (uint32_t)len);
        put16(c + 30, 0);
        put16(c + 32, 0);
        put16(c + 34, 0);
        put16(c + 36, 0);
        put32(c + 38, 0100644u << 16); /* a regular file, rw-r--r-- */
        put32(c + 42, e->offset);
        if (!(st = attn_output_write(w->out, c, sizeof c))) st = attn_output_write(w->out, e->name, len);
    }
    if (st) goto fail;
    uint8_t end[22];
    put32(end, ZIP_END_SIG);
    put16(end + 4, 0);
    put16(end + 6, 0);
    put16(end + 8, (uint32_t)w->n);
    put16(end + 10, (uint32_t)w->n);
    put32(end + 12, (uint32_t)directory);
    put32(end + 16, (uint32_t)w->offset);
    put16(end + 20, 0);
    if ((st = attn_output_write(w->out, end, sizeof end))) goto fail;
    st = attn_output_commit(w->out);
    writer_free(w);
    return st;
fail:
    attn_npz_discard(w);
    return st;
}

/* ------------------------------------------------------------------ reader */

typedef struct npz_member {
    char *name; /* without .npy */
    int deflated;
    uint32_t crc;
    uint64_t size, stored_size, offset;
} npz_member;

struct attn_npz {
    char *path;
    int fd;
    uint64_t file_size;
    npz_member *members;
    int64_t n;
};

static attn_status read_at(const attn_npz *z, void *buf, size_t size, uint64_t offset) {
    char reason[256];
    size_t done = 0;
    while (done < size) {
        const ssize_t got = pread(z->fd, (uint8_t *)buf + done, size - done, (off_t)(offset + done));
        if (got < 0 && errno == EINTR) continue;
        if (got < 0)
            return attn__fail(ATTN_ERR_IO, "cannot read '%s': %s", z->path, errno_text(errno, reason, sizeof reason));
        if (got == 0)
            return attn__fail(ATTN_ERR_FORMAT, "'%s': truncated at byte %llu", z->path,
                              (unsigned long long)(offset + done));
        done += (size_t)got;
    }
    return ATTN_OK;
}

void attn_npz_free(attn_npz *z) {
    if (!z) return;
    for (int64_t i = 0; i < z->n; i++) free(z->members[i].name);
    free(z->members);
    if (z->fd >= 0) close(z->fd);
    free(z->path);
    free(z);
}

/* Deprecated names, until 1.0 (attn_npz.h). */
void attn_npz_close(attn_npz *z) { attn_npz_free(z); }
/* End of the deprecated names. */

/* The zip64 extra field (id 1) of a central entry: the 64-bit values of
 * the fields that read 0xffffffff, in the order usize, csize, offset. */
static attn_status read_zip64_extra(const attn_npz *z, const uint8_t *extra, size_t n, npz_member *m,
                                    uint32_t usize32, uint32_t csize32, uint32_t offset32) {
    for (size_t p = 0; p + 4 <= n;) {
        const uint32_t id = get16(extra + p), size = get16(extra + p + 2);
        if (p + 4 + size > n) break;
        if (id == 1) {
            const uint8_t *f = extra + p + 4;
            size_t at = 0;
            uint64_t *want[3] = {usize32 == ZIP_LIMIT ? &m->size : NULL, csize32 == ZIP_LIMIT ? &m->stored_size : NULL,
                                 offset32 == ZIP_LIMIT ? &m->offset : NULL};
            for (int k = 0; k < 3; k++)
                if (want[k]) {
                    if (at + 8 > size) return attn__fail(ATTN_ERR_FORMAT, "%s: a zip64 extra field is short", z->path);
                    *want[k] = get64(f + at);
                    at += 8;
                }
            return ATTN_OK;
        }
        p += 4 + size;
    }
    if (usize32 == ZIP_LIMIT || csize32 == ZIP_LIMIT || offset32 == ZIP_LIMIT)
        return attn__fail(ATTN_ERR_FORMAT, "%s: a member's size or offset says zip64 but it has no zip64 field", z->path);
    return ATTN_OK;
}

static attn_status parse_directory(attn_npz *z, const uint8_t *d, size_t size, int64_t count) {
    z->members = calloc((size_t)(count ? count : 1), sizeof *z->members);
    if (!z->members) return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", z->path);
    size_t p = 0;
    for (int64_t i = 0; i < count; i++) {
        if (p + 46 > size || get32(d + p) != ZIP_CENTRAL_SIG)
            return attn__fail(ATTN_ERR_FORMAT, "%s: central directory entry %lld is damaged", z->path, (long long)i);
        const uint8_t *c = d + p;
        const uint32_t flags = get16(c + 8), method = get16(c + 10);
        const size_t name_len = get16(c + 28), extra_len = get16(c + 30), comment_len = get16(c + 32);
        if (p + 46 + name_len + extra_len + comment_len > size)
            return attn__fail(ATTN_ERR_FORMAT, "%s: central directory entry %lld overruns it", z->path, (long long)i);
        const char *name = (const char *)c + 46;
        if (flags & 1)
            return attn__fail(ATTN_ERR_FORMAT, "%s: member '%.*s' is encrypted", z->path, (int)name_len, name);
        if (method != 0 && method != 8)
            return attn__fail(ATTN_ERR_FORMAT, "%s: member '%.*s' uses compression method %u (only stored 0 and "
                                               "deflated 8 are read)", z->path, (int)name_len, name, method);
        if (name_len < 5 || memcmp(name + name_len - 4, ".npy", 4) != 0 || memchr(name, 0, name_len))
            return attn__fail(ATTN_ERR_FORMAT, "%s: member '%.*s' is not a NAME.npy array", z->path, (int)name_len,
                              name);
        npz_member *m = &z->members[i];
        m->deflated = method == 8;
        m->crc = get32(c + 16);
        m->stored_size = get32(c + 20);
        m->size = get32(c + 24);
        m->offset = get32(c + 42);
        attn_status st = read_zip64_extra(z, c + 46 + name_len, extra_len, m, get32(c + 24), get32(c + 20),
                                          get32(c + 42));
        if (st) return st;
        m->name = malloc(name_len - 3);
        if (!m->name) return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", z->path);
        memcpy(m->name, name, name_len - 4);
        m->name[name_len - 4] = '\0';
        z->n = i + 1;
        p += 46 + name_len + extra_len + comment_len;
    }
    return ATTN_OK;
}

attn_status attn_npz_open(const char *path, attn_npz **out) {
    if (!path || !out)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_npz_open: %s is NULL", !path ? "path" : "out");
    *out = NULL;
    char reason[256];
    attn_npz *z = calloc(1, sizeof *z);
    uint8_t *tail = NULL, *directory = NULL;
    if (!z || !(z->path = strdup(path))) {
        free(z);
        return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "attn_npz_open: out of memory");
    }
    attn_status st = ATTN_OK;
    struct stat sb;
    z->fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (z->fd < 0) {
        st = attn__fail(ATTN_ERR_IO, "cannot open '%s': %s", path, errno_text(errno, reason, sizeof reason));
        goto fail;
    }
    if (fstat(z->fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        st = attn__fail(ATTN_ERR_IO, "cannot read '%s': not a regular file (.npz archives are read from files)", path);
        goto fail;
    }
    z->file_size = (uint64_t)sb.st_size;
    /* The end record sits in the last 22 + 65,535 bytes (its comment is at
     * most that long): search backwards for its signature. */
    const size_t tail_size = (size_t)(z->file_size < 22 + 65535 ? z->file_size : 22 + 65535);
    if (tail_size < 22) {
        st = attn__fail(ATTN_ERR_FORMAT, "%s: %llu bytes: not a zip (.npz) archive", path,
                        (unsigned long long)z->file_size);
        goto fail;
    }
    if (!(tail = malloc(tail_size))) {
        st = attn__fail(ATTN_ERR_OUT_OF_MEMORY, "attn_npz_open: out of memory");
        goto fail;
    }
    if ((st = read_at(z, tail, tail_size, z->file_size - tail_size))) goto fail;
    const uint8_t *end = NULL;
    for (size_t p = tail_size - 22 + 1; p-- > 0;)
        if (get32(tail + p) == ZIP_END_SIG && p + 22 + get16(tail + p + 20) <= tail_size) {
            end = tail + p;
            break;
        }
    if (!end) {
        st = attn__fail(ATTN_ERR_FORMAT, "%s: no end-of-directory record: not a zip (.npz) archive", path);
        goto fail;
    }
    const uint32_t count = get16(end + 10), dir_size = get32(end + 12), dir_offset = get32(end + 16);
    if (get16(end + 4) != 0 || get16(end + 6) != 0 || get16(end + 8) != count) {
        st = attn__fail(ATTN_ERR_FORMAT, "%s: a multi-disk archive", path);
        goto fail;
    }
    if (count == 0xffff || dir_size == ZIP_LIMIT || dir_offset == ZIP_LIMIT) {
        st = attn__fail(ATTN_ERR_UNSUPPORTED, "%s: a zip64 archive (over 4 GiB or 65,535 members): not read", path);
        goto fail;
    }
    if ((uint64_t)dir_offset + dir_size > z->file_size || dir_size > NPZ_DIRECTORY_MAX) {
        st = attn__fail(ATTN_ERR_FORMAT, "%s: the central directory (%u bytes at %u) lies outside the file", path,
                        dir_size, dir_offset);
        goto fail;
    }
    if (!(directory = malloc(dir_size ? dir_size : 1))) {
        st = attn__fail(ATTN_ERR_OUT_OF_MEMORY, "attn_npz_open: out of memory");
        goto fail;
    }
    if ((st = read_at(z, directory, dir_size, dir_offset)) || (st = parse_directory(z, directory, dir_size, count)))
        goto fail;
    free(tail);
    free(directory);
    *out = z;
    return ATTN_OK;
fail:
    free(tail);
    free(directory);
    attn_npz_free(z);
    return st;
}

int64_t attn_npz_count(const attn_npz *z) { return z ? z->n : 0; }

attn_status attn_npz_member_at(const attn_npz *z, int64_t i, attn_npz_member *m) {
    if (!z || !m) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_npz_member_at: %s is NULL", !z ? "z" : "m");
    if (i < 0 || i >= z->n)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_npz_member_at: member %lld of %lld", (long long)i,
                          (long long)z->n);
    const npz_member *s = &z->members[i];
    m->name = s->name;
    m->deflated = s->deflated;
    m->size = s->size;
    m->stored_size = s->stored_size;
    return ATTN_OK;
}

/* ------------------------------------------------------- member streams
 * A member's .npy bytes in order, a chunk at a time: stored bytes read by
 * offset, deflated ones inflated from STREAM_IN bytes of input at a time,
 * the CRC-32 and the count kept as they pass.  Memory: the caller's chunk,
 * the input buffer and zlib's window, whatever the member's size. */

#define STREAM_IN ((size_t)1 << 16)

typedef struct member_stream {
    const attn_npz *z;
    const npz_member *m;
    uint64_t in_at, in_left; /* stored bytes not yet read, from file offset in_at */
    uint64_t produced;       /* .npy bytes handed out                            */
    uint32_t crc;            /* of those bytes                                   */
#ifdef ATTN_HAVE_ZLIB
    z_stream zs;
    int inflating, ended;
    uint8_t in[STREAM_IN];
#endif
} member_stream;

/* The member called name; ATTN_ERR_INVALID_ARGUMENT naming it when absent. */
static attn_status member_named(const attn_npz *z, const char *name, const npz_member **m) {
    *m = NULL;
    for (int64_t i = 0; i < z->n && !*m; i++)
        if (strcmp(z->members[i].name, name) == 0) *m = &z->members[i];
    if (!*m) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "%s: no array '%s' (attn npz list shows them)", z->path, name);
    return ATTN_OK;
}

/* Finds m's data after its local header and checks its sizes; s is then
 * ready to read (stream_close releases it, whatever happened). */
static attn_status stream_open(member_stream *s, const attn_npz *z, const npz_member *m) {
    s->z = z;
    s->m = m;
    s->in_at = s->in_left = s->produced = 0;
    s->crc = 0;
#ifdef ATTN_HAVE_ZLIB
    memset(&s->zs, 0, sizeof s->zs);
    s->inflating = s->ended = 0;
#endif
    const char *name = m->name;
    uint8_t h[30];
    attn_status st = read_at(z, h, sizeof h, m->offset);
    if (st) return st;
    if (get32(h) != ZIP_LOCAL_SIG)
        return attn__fail(ATTN_ERR_FORMAT, "%s: '%s': no local header at byte %llu", z->path, name,
                          (unsigned long long)m->offset);
    const uint64_t data_at = m->offset + 30 + get16(h + 26) + get16(h + 28);
    if (data_at + m->stored_size > z->file_size || m->size > SIZE_MAX / 2 || m->stored_size > SIZE_MAX / 2)
        return attn__fail(ATTN_ERR_FORMAT, "%s: '%s' (%llu bytes at %llu) runs past the end of the file", z->path, name,
                          (unsigned long long)m->stored_size, (unsigned long long)data_at);
    if (!m->deflated && m->stored_size != m->size)
        return attn__fail(ATTN_ERR_FORMAT, "%s: '%s' is stored with two different sizes", z->path, name);
    /* Deflate cannot expand more than 1032 to 1 (a 258-byte match in one
     * bit or so): a size beyond that is a damaged or hostile directory. */
    if (m->deflated && m->size > m->stored_size * 1032 + 64)
        return attn__fail(ATTN_ERR_FORMAT, "%s: '%s' claims to inflate to %llu bytes from %llu, more than deflate can "
                          "produce (the archive is damaged)", z->path, name, (unsigned long long)m->size,
                          (unsigned long long)m->stored_size);
#ifndef ATTN_HAVE_ZLIB
    if (m->deflated)
        return attn__fail(ATTN_ERR_UNSUPPORTED, "%s: '%s' is deflated and this build has no zlib (Debian: zlib1g-dev)",
                          z->path, name);
#else
    if (m->deflated) {
        if (inflateInit2(&s->zs, -15) != Z_OK) return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "zlib: inflateInit2 failed");
        s->inflating = 1;
    }
#endif
    s->in_at = data_at;
    s->in_left = m->stored_size;
    return ATTN_OK;
}

static void stream_close(member_stream *s) {
#ifdef ATTN_HAVE_ZLIB
    if (s->inflating) inflateEnd(&s->zs);
    s->inflating = 0;
#else
    (void)s;
#endif
}

/* The member's next bytes into buf: *got = want, or fewer only at its end
 * (0 once it is over).  Never more than the directory's size for it: a
 * stream that would inflate past it is refused as it happens. */
static attn_status stream_read(member_stream *s, uint8_t *buf, size_t want, size_t *got) {
    const npz_member *m = s->m;
    const uint64_t left = m->size - s->produced;
    size_t n = want < left ? want : (size_t)left;
    *got = 0;
    attn_status st = ATTN_OK;
    if (!m->deflated) {
        if (n && (st = read_at(s->z, buf, n, s->in_at + s->produced))) return st;
    }
#ifdef ATTN_HAVE_ZLIB
    else {
        size_t done = 0;
        while (done < n && !s->ended) {
            if (s->zs.avail_in == 0 && s->in_left) {
                const size_t chunk = s->in_left < STREAM_IN ? (size_t)s->in_left : STREAM_IN;
                if ((st = read_at(s->z, s->in, chunk, s->in_at))) return st;
                s->in_at += chunk;
                s->in_left -= chunk;
                s->zs.next_in = s->in;
                s->zs.avail_in = (uInt)chunk;
            }
            /* At most 1 GiB a call: zlib's counts are 32-bit. */
            const size_t step = n - done < ((size_t)1 << 30) ? n - done : (size_t)1 << 30;
            s->zs.next_out = buf + done;
            s->zs.avail_out = (uInt)step;
            const int rc = inflate(&s->zs, Z_NO_FLUSH);
            done += step - s->zs.avail_out;
            if (rc == Z_STREAM_END) s->ended = 1;
            else if (rc != Z_OK && !(rc == Z_BUF_ERROR && s->zs.avail_in == 0 && s->in_left == 0))
                return attn__fail(ATTN_ERR_FORMAT, "%s: '%s' does not inflate (zlib %d: %s)", s->z->path, m->name, rc,
                                  s->zs.msg ? s->zs.msg : "damaged data");
            else if (rc == Z_BUF_ERROR)
                break; /* input exhausted before the stream's end: told below */
        }
        n = done;
    }
#endif
    s->crc = crc32_update(s->crc, buf, n);
    s->produced += n;
    *got = n;
    return ATTN_OK;
}

/* After the last byte: the member gave exactly its size and its CRC. */
static attn_status stream_finish(member_stream *s) {
    const npz_member *m = s->m;
#ifdef ATTN_HAVE_ZLIB
    /* A deflated member must end where the directory says: once its bytes
     * are out, what input is left may hold only the end of the stream (its
     * last codes can lie in the next chunk of input). */
    bool longer = false;
    while (m->deflated && !s->ended && !longer && s->produced == m->size) {
        if (s->zs.avail_in == 0) {
            if (!s->in_left) break;
            const size_t chunk = s->in_left < STREAM_IN ? (size_t)s->in_left : STREAM_IN;
            attn_status st = read_at(s->z, s->in, chunk, s->in_at);
            if (st) return st;
            s->in_at += chunk;
            s->in_left -= chunk;
            s->zs.next_in = s->in;
            s->zs.avail_in = (uInt)chunk;
        }
        uint8_t extra;
        s->zs.next_out = &extra;
        s->zs.avail_out = 1;
        const int rc = inflate(&s->zs, Z_NO_FLUSH);
        longer = s->zs.avail_out == 0;
        if (rc == Z_STREAM_END) s->ended = 1;
        else if (rc != Z_OK) break;
    }
    if (m->deflated && (!s->ended || longer))
        return attn__fail(ATTN_ERR_FORMAT, "%s: '%s' does not inflate to its %llu bytes (the archive is damaged)",
                          s->z->path, m->name, (unsigned long long)m->size);
#endif
    if (s->produced != m->size)
        return attn__fail(ATTN_ERR_FORMAT, "%s: '%s' does not inflate to its %llu bytes (the archive is damaged)",
                          s->z->path, m->name, (unsigned long long)m->size);
    if (s->crc != m->crc)
        return attn__fail(ATTN_ERR_FORMAT, "%s: '%s' fails its CRC-32 check (the archive is damaged)", s->z->path,
                          m->name);
    return ATTN_OK;
}

/* The member's .npy preamble and header, read (inflated) alone into *header
 * (malloc'd, *header_size bytes: the first bytes of the member, at least
 * its header; the stream goes on after them), checked by
 * attn_npy_parse_header into shape_only and against the member's size.
 * Messages name the archive and the member. */
static attn_status stream_header(member_stream *s, attn_array *shape_only, uint8_t **header, size_t *header_size) {
    const npz_member *m = s->m;
    enum { PREAMBLE = 12, HEADER_MAX = (1 << 20) + PREAMBLE }; /* attn_npy_parse's limit on headers */
    *header = NULL;
    *header_size = 0;
    uint8_t *h = malloc(HEADER_MAX);
    if (!h) return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "%s: '%s': out of memory", s->z->path, m->name);
    size_t have = 0, need = PREAMBLE, got;
    attn_status st = stream_read(s, h, need, &got);
    have = got;
    /* "\x93NUMPY", major, minor, then the header's length: 2 bytes in
     * version 1, 4 after. */
    if (!st && have >= 10 && memcmp(h, "\x93NUMPY", 6) == 0) {
        need = h[6] == 1 ? 10 + (size_t)get16(h + 8) : have >= 12 ? 12 + (size_t)get32(h + 8) : have;
        if (need > HEADER_MAX) need = HEADER_MAX; /* refused by the parse below */
        if (need > have && !(st = stream_read(s, h + have, need - have, &got))) have += got;
    }
    size_t data_offset = 0;
    if (!st && (st = attn_npy_parse_header(h, have, shape_only, &data_offset)))
        st = attn__fail(st, "%s: '%s' (%llu bytes) is not a .npy array: %s", s->z->path, m->name,
                        (unsigned long long)m->size, attn_last_error());
    if (!st) {
        const uint64_t data = (uint64_t)shape_only->count * attn_dtype_size(shape_only->dtype);
        if (data_offset + data != m->size)
            st = attn__fail(ATTN_ERR_FORMAT, "%s: '%s': its header says %llu bytes of data after %zu of header, the "
                            "member holds %llu (the archive is damaged)", s->z->path, m->name,
                            (unsigned long long)data, data_offset, (unsigned long long)m->size);
    }
    if (st) {
        free(h);
        return st;
    }
    *header = h;
    *header_size = have;
    return ATTN_OK;
}

attn_status attn_npz_read_header(const attn_npz *z, const char *name, attn_array *shape_only) {
    if (!z || !name || !shape_only)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_npz_read_header: %s is NULL",
                          !z ? "z" : !name ? "name" : "shape_only");
    memset(shape_only, 0, sizeof *shape_only);
    const npz_member *m;
    member_stream *s = malloc(sizeof *s);
    if (!s) return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "attn_npz_read_header: out of memory");
    attn_status st = member_named(z, name, &m);
    uint8_t *header = NULL;
    size_t header_size;
    if (!st) {
        if (!(st = stream_open(s, z, m))) st = stream_header(s, shape_only, &header, &header_size);
        stream_close(s);
    }
    free(header);
    free(s);
    return st;
}

attn_status attn_npz_read(const attn_npz *z, const char *name, attn_array *out) {
    if (!z || !name || !out)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_npz_read: %s is NULL", !z ? "z" : !name ? "name" : "out");
    const npz_member *m;
    attn_status st = member_named(z, name, &m);
    if (st) return st;
    member_stream *s = malloc(sizeof *s);
    uint8_t *npy = NULL;
    size_t got = 0;
    if (!s) return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "%s: cannot allocate '%s'", z->path, name);
    /* The member's sizes are checked against the file (and deflate's
     * ratio) by stream_open before its claimed size is allocated. */
    if (!(st = stream_open(s, z, m))) {
        if (!(npy = malloc(m->size ? (size_t)m->size : 1)))
            st = attn__fail(ATTN_ERR_OUT_OF_MEMORY, "%s: cannot allocate '%s'", z->path, name);
        else if (!(st = stream_read(s, npy, (size_t)m->size, &got)))
            st = stream_finish(s);
    }
    stream_close(s);
    if (!st && (st = attn_npy_parse(npy, (size_t)m->size, out)))
        st = attn__fail(st, "%s: '%s': %s", z->path, name, attn_last_error());
    free(npy);
    free(s);
    return st;
}

attn_status attn_npz_extract(const attn_npz *z, const char *name, const char *path) {
    if (!z || !name || !path)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_npz_extract: %s is NULL", !z ? "z" : !name ? "name" : "path");
    enum { CHUNK = 1 << 20 };
    const npz_member *m;
    attn_status st = member_named(z, name, &m);
    if (st) return st;
    member_stream *s = malloc(sizeof *s);
    uint8_t *chunk = malloc(CHUNK), *header = NULL;
    size_t header_size = 0, got = 0;
    attn_array shape_only;
    attn_output *out = NULL;
    if (!s || !chunk) {
        free(s);
        free(chunk);
        return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "attn_npz_extract: out of memory");
    }
    /* The header is checked before the output is opened: a member that is
     * not an array leaves the target untouched, with no temporary file. */
    if ((st = stream_open(s, z, m)) || (st = stream_header(s, &shape_only, &header, &header_size)) ||
        (st = attn_output_open(path, &out)) || (st = attn_output_write(out, header, header_size)))
        goto done;
    do {
        if ((st = stream_read(s, chunk, CHUNK, &got)) || (got && (st = attn_output_write(out, chunk, got)))) goto done;
    } while (got);
    if ((st = stream_finish(s))) goto done;
    st = attn_output_commit(out);
    out = NULL; /* committed or, on failure, discarded by the commit */
done:
    if (out) attn_output_discard(out);
    stream_close(s);
    free(s);
    free(chunk);
    free(header);
    return st;
}
