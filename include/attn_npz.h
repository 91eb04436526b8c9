/*
 * attn_npz.h — .npz files (libattn_model): numpy's archive of arrays, a zip
 * whose members are .npy files named NAME.npy, as np.savez (stored) and
 * np.savez_compressed (deflated) write them and np.load reads them.  attn
 * model trace writes its activation caches in it (docs/model-trace.md).
 *
 * The writer streams each member through attn_output (attn_io.h): the file
 * appears under its name complete or not at all.  Members are stored or
 * deflated with zlib (raw deflate, level 6), each with its CRC-32; the
 * archive is plain zip (no zip64): an archive that would pass 4 GiB, or
 * 65,535 members, is refused with a message rather than written wrong.
 * Times are fixed (1980-01-01), so the same arrays give the same bytes.
 *
 * The reader takes stored and deflated members (zip64 sizes in the central
 * directory too, which numpy's zipfile writes for large members), checks
 * the CRC-32 of every member it reads whole, and reads one member at a
 * time, in bounded memory: a member's header alone (attn_npz_read_header
 * inflates only its first bytes), or a member streamed to a file
 * (attn_npz_extract, a chunk at a time).  A member whose directory entry
 * claims more than deflate can produce (1032:1) is refused before anything
 * is inflated.  Without zlib at build time, deflate is refused with a
 * message (stored still works).
 */
#ifndef ATTN_NPZ_H
#define ATTN_NPZ_H

#include "attn.h"
#include "attn_io.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct attn_npz_writer attn_npz_writer; /* opaque */

/* Starts writing path; compress: 0 stored (np.savez), 1 deflated
 * (np.savez_compressed).  Then attn_npz_add for each array and exactly one
 * of attn_npz_commit and attn_npz_discard, which free w. */
ATTN_API attn_status attn_npz_create(const char *path, int compress, attn_npz_writer **out);

/* Adds a as member NAME.npy (np.load(path)[name] reads it).  name: 1 to
 * 250 bytes, no '/' at either end, no NUL, not already added.  On failure
 * the writer is still usable (discard it, or add another array). */
ATTN_API attn_status attn_npz_add(attn_npz_writer *w, const char *name, const attn_array *a);

/* Writes the central directory and renames the file into place. */
ATTN_API attn_status attn_npz_commit(attn_npz_writer *w);
ATTN_API void attn_npz_discard(attn_npz_writer *w); /* NULL allowed */

typedef struct attn_npz attn_npz; /* opaque: an open archive */

/* One member as the central directory describes it. */
typedef struct attn_npz_member {
    const char *name;           /* without ".npy" (valid until attn_npz_free) */
    int deflated;               /* 0 stored, 1 deflated                        */
    uint64_t size;              /* bytes of the .npy                           */
    uint64_t stored_size;       /* bytes in the archive                        */
} attn_npz_member;

/* Opens path and reads its central directory (ATTN_ERR_FORMAT naming the
 * problem: not a zip, a member that is not NAME.npy, a method other than
 * stored or deflated, an encrypted or multi-disk archive). */
ATTN_API attn_status attn_npz_open(const char *path, attn_npz **out);
ATTN_API void attn_npz_free(attn_npz *z); /* NULL allowed */
/* Deprecated names, until 1.0: attn_npz_free under its former name. */
ATTN_API void attn_npz_close(attn_npz *z) ATTN_DEPRECATED("renamed attn_npz_free");
/* End of the deprecated names. */
ATTN_API int64_t attn_npz_count(const attn_npz *z);
ATTN_API attn_status attn_npz_member_at(const attn_npz *z, int64_t i, attn_npz_member *m);

/* Reads member name (without ".npy") into out (attn_npy_parse's rules);
 * ATTN_ERR_INVALID_ARGUMENT naming it when absent, ATTN_ERR_FORMAT on a
 * CRC-32 or size mismatch.  Messages name the archive and the member. */
ATTN_API attn_status attn_npz_read(const attn_npz *z, const char *name, attn_array *out);

/* Only the .npy header of member name: shape_only gets its dtype, ndim,
 * shape and count, data NULL (nothing to free).  Reads (inflates) just the
 * header's bytes, at most about 1 MiB whatever the member's size; checks
 * that the header's data size is the member's (the CRC-32, which covers
 * the data, is not checked: attn_npz_read and attn_npz_extract do). */
ATTN_API attn_status attn_npz_read_header(const attn_npz *z, const char *name, attn_array *shape_only);

/* Writes member name to path as a .npy file — its bytes as the archive
 * holds them, a valid .npy (attn_npy_parse_header checks its header
 * first) — through attn_output (attn_io.h): streamed a chunk of 1 MiB at a
 * time, the CRC-32 and the size checked as it streams; a mismatch at the
 * end discards the output (a regular file is then untouched; a device or
 * pipe has been written to).  Memory: about 1.2 MiB whatever the size. */
ATTN_API attn_status attn_npz_extract(const attn_npz *z, const char *name, const char *path);

#ifdef __cplusplus
}
#endif

#endif /* ATTN_NPZ_H */
