/*
 * attn_io.h — arrays and files (libattn): n-dimensional arrays as .npy
 * files hold them, the .npy format (whole, or rows by offset), and output
 * files that are never left half-written.
 *
 * Shape legend: an attn_array has shape[0 .. ndim-1] in C order (the last
 * index varies fastest), count = prod(shape) elements (1 for a scalar,
 * ndim == 0), always in native byte order.  float16 and bfloat16 elements
 * are stored as their raw 16 bits (uint16_t); bool elements are bytes 0 or 1.
 */
#ifndef ATTN_IO_H
#define ATTN_IO_H

#include "attn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ arrays */

#define ATTN_MAX_DIMS 8

/* An n-dimensional array in native byte order and C order; owns its data. */
typedef struct attn_array {
    attn_dtype dtype;
    int ndim;                      /* 0 (a scalar) .. ATTN_MAX_DIMS          */
    int64_t shape[ATTN_MAX_DIMS];
    int64_t count;                 /* product of shape (1 for a scalar)      */
    void *data;                    /* count elements; free with attn_array_free */
} attn_array;

/* Allocates a zeroed array.  Sizes are checked for overflow by numpy's rule,
 * which the .npy readers and safetensors share: the bytes of the non-zero
 * dimensions must fit int64 even when a zero dimension leaves no elements
 * (numpy refuses (0, 2^62, 4) as "array is too big"; so does attn), which
 * keeps every partial product of an accepted shape defined. */
ATTN_API attn_status attn_array_alloc(attn_array *a, attn_dtype dtype, int ndim,
                                      const int64_t *shape);
ATTN_API void attn_array_free(attn_array *a); /* safe on a zeroed or freed array */

/* Converts in place.  To ATTN_F32: from F32, F64, F16, BF16 (integers
 * refused: a float array was expected).  To ATTN_F16 or ATTN_BF16: from
 * the same, each value rounded once to nearest, ties to even (overflow
 * gives infinity).  To ATTN_I64: from any integer or
 * bool (floats refused).  To ATTN_BOOL: from any integer or bool,
 * nonzero -> 1.  A refused conversion leaves the array as it was. */
ATTN_API attn_status attn_array_convert(attn_array *a, attn_dtype to);

/* Whether every element of a float32, float16 or bfloat16 array is finite
 * (-inf allowed when allow_neg_inf is nonzero: a bias that hides keys).  ATTN_OK, or
 * ATTN_ERR_NONFINITE with *first_bad (if not NULL) the index of the first
 * element in C order that is NaN or infinite and a message naming it
 * ("element 5 is NaN; inputs must be finite"); *first_bad is -1 when all
 * are.  Other dtypes: ATTN_ERR_UNSUPPORTED.  Vectorised: a few ms for
 * 32 MiB. */
ATTN_API attn_status attn_array_check_finite(const attn_array *a, int allow_neg_inf, int64_t *first_bad);

/* -------------------------------------------------------------------- .npy
 * NumPy's format, versions 1.0, 2.0 and 3.0.  numpy has no bfloat16: the
 * ml_dtypes package's bfloat16 arrays are saved by np.save with the descr
 * '<V2' (two opaque bytes), and some writers spell it 'bfloat16'.  attn's
 * convention: a 2-byte void ('<V2', '>V2', '|V2', '=V2') is bfloat16 in
 * the byte order the descr names ('|' and '=' native), and so is
 * 'bfloat16'.  (A file of other 2-byte records would be misread as
 * bfloat16: numpy cannot compute on such records, and bfloat16 is what they
 * hold in practice.)  ATTN_BF16 is written as '<V2' (on little-endian
 * hosts), which ml_dtypes reads back with
 * np.load(path).view(ml_dtypes.bfloat16). */

/* Parses a complete .npy image held in memory.  Refuses Fortran order,
 * object and structured dtypes, headers over 1 MiB, shapes whose byte size
 * overflows, and truncated data.  The array keeps the file's dtype,
 * converted to native byte order. */
ATTN_API attn_status attn_npy_parse(const void *buf, size_t size, attn_array *out);

/* Parses only the preamble and header of a .npy image, held in buf (its
 * data need not follow): attn_npy_parse's rules.  shape_only gets dtype,
 * ndim, shape and count with data NULL (nothing to free); *data_offset (if
 * not NULL) the byte where element 0 starts.  For a reader that streams
 * the data itself (an .npz member). */
ATTN_API attn_status attn_npy_parse_header(const void *buf, size_t size, attn_array *shape_only,
                                           size_t *data_offset);

/* Reads and parses a file.  Error messages name the path.  The data are
 * read straight into out's buffer (64-byte aligned), in 1 MiB chunks on the
 * library's threads ($ATTN_NUM_THREADS, else OpenMP's default) when the
 * file holds several. */
ATTN_API attn_status attn_npy_load(const char *path, attn_array *out);

/* attn_npy_load, and a float32, float16 or bfloat16 array is checked as
 * attn_array_check_finite checks it, chunk by chunk as it is read (by the
 * thread that read the chunk, while it is in the cache: no second pass over
 * the array).  A non-finite element fails with ATTN_ERR_NONFINITE,
 * *first_bad (if not NULL) its index, a message naming the file and the
 * element, and *out freed.  Arrays of other dtypes are loaded unchecked
 * (*first_bad -1): check float64 after its conversion to float32, which
 * can overflow to infinity. */
ATTN_API attn_status attn_npy_load_finite(const char *path, int allow_neg_inf, attn_array *out,
                                          int64_t *first_bad);

/* Serialises to a malloc'd .npy image (version 1.0, or 2.0 if the header
 * needs it); free *buf with free(). */
ATTN_API attn_status attn_npy_serialize(const attn_array *a, void **buf, size_t *size);

/* Writes path through attn_output_open (below): a failure never leaves a
 * half-written file under the final name. */
ATTN_API attn_status attn_npy_save(const char *path, const attn_array *a);

/* .npy by offset, for programs that hold only part of an array (attn ring:
 * each MPI rank its own positions; attn_mpi.h).  "Rows" are the indices
 * [first, first + count) of one axis together with every index of the other
 * axes: for a [B, L, H, D] file and axis 1, positions first .. first+count-1
 * of every batch; for [L, D] or [L, H, D] files the positions are axis 0. */

/* Reads only the header.  shape_only gets dtype, ndim, shape and count, with
 * data NULL (nothing to free); *data_offset (if not NULL) the byte where
 * element 0 starts.  The file's size must match the shape exactly, as for
 * attn_npy_load; messages name the path. */
ATTN_API attn_status attn_npy_read_header(const char *path, attn_array *shape_only,
                                          size_t *data_offset);

/* Reads rows [first, first + count) of axis and nothing else: one positional
 * read per index of the axes before axis (B reads for a [B, L, H, D] file and
 * axis 1).  out keeps the file's dtype, in native byte order, and the file's
 * shape with shape[axis] = count (count 0: an empty array).  Memory holds
 * only those rows, so a file larger than memory can be read in parts. */
ATTN_API attn_status attn_npy_read_rows(const char *path, int axis, int64_t first, int64_t count,
                                        attn_array *out);

/* The preamble and header numpy.save writes for an array of this dtype and
 * shape, into header (cap bytes; ATTN_NPY_HEADER_MAX always suffice).  *size
 * is a multiple of 64 and element i of the C-order data belongs at byte
 * *size + i * attn_dtype_size(dtype): for writers that place rows themselves. */
#define ATTN_NPY_HEADER_MAX 512
ATTN_API attn_status attn_npy_format_header(attn_dtype dtype, int ndim, const int64_t *shape,
                                            void *header, size_t cap, size_t *size);

/* ------------------------------------------------------------- input files
 * Reads a whole regular file of at most max_bytes into *data (malloc'd, one
 * extra 0 byte after the *size bytes, for text).  A FIFO, device or
 * directory is refused at once (a FIFO is not waited on), and a file larger
 * than max_bytes is refused before anything is allocated. */
ATTN_API attn_status attn_read_file(const char *path, size_t max_bytes, void **data, size_t *size);

/* ------------------------------------------------------------ output files
 * Every file attn writes (.npy, pictures, reports, the ring's shards) goes
 * through these, so that a file under its final name is always complete:
 *   - a regular file, or a new name: the data go to a temporary file beside
 *     it (PATH.tmp-<pid>-<n>, created exclusively, mode 0666 less the
 *     umask), which attn_output_commit fsyncs and renames over the target
 *     only when everything is written; attn_output_discard (and any
 *     failure) removes it.  The target is never removed or truncated by a
 *     failed write.  A symbolic link is followed: the file it names is
 *     replaced and the link stays.
 *   - an existing non-regular file (a character device such as /dev/null or
 *     a terminal, a FIFO with a reader), and the names of open descriptors
 *     (/dev/stdout, /dev/stderr, /dev/fd/N, /proc/self/fd/N, whatever they
 *     lead to): written in place, from the start, since there is nothing to
 *     replace and renaming over it would destroy it.  Errors (/dev/full)
 *     are reported as for any file.
 *   - a directory, a socket, a dangling symbolic link: refused. */
typedef struct attn_output attn_output; /* opaque */

/* Starts writing path.  *out is the handle to write through, then commit
 * or discard (exactly one of the two, which frees it). */
ATTN_API attn_status attn_output_open(const char *path, attn_output **out);

/* Appends size bytes. */
ATTN_API attn_status attn_output_write(attn_output *o, const void *data, size_t size);

/* The temporary file's name, for writers that fill it otherwise (several
 * processes writing their parts at their offsets, as the ring does); NULL
 * for a target written in place. */
ATTN_API const char *attn_output_temp_path(const attn_output *o);

/* Sets the temporary file's size (ftruncate): the parts not written read 0.
 * Refused for a target written in place. */
ATTN_API attn_status attn_output_resize(attn_output *o, uint64_t size);

/* Finishes: fsync, close, and rename over the target (then fsync of its
 * directory).  Frees o whatever happens; on failure the target is unchanged
 * and the temporary file is gone. */
ATTN_API attn_status attn_output_commit(attn_output *o);

/* Abandons: removes the temporary file and frees o (NULL is allowed). */
ATTN_API void attn_output_discard(attn_output *o);

/* Writes a whole file through the calls above. */
ATTN_API attn_status attn_output_write_file(const char *path, const void *data, size_t size);

/* For a program's handler of SIGINT, SIGTERM and the like (the library
 * installs none): removes the temporary file of every output not yet
 * committed or discarded.  Async-signal-safe (it only reads a table and
 * calls unlink); the outputs themselves are left for the exiting process. */
ATTN_API void attn_output_discard_all(void);

#ifdef __cplusplus
}
#endif

#endif /* ATTN_IO_H */
