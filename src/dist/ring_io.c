/*
 * ring_io.c — sharded .npy files: every rank reads only its rows, every rank
 * writes its rows at their offsets in one output file.
 *
 * Shape legend: an array (d0, ..., d{n-1}) cut along axis a, seen as
 *   [outer, N, inner]   outer = d0 * ... * d{a-1}   N = d{a}
 *                       inner = d{a+1} * ... * d{n-1}
 *   local rows [outer, rows, inner], rows = the shard's runs concatenated.
 *
 * Writing uses positional writes (pwrite) of disjoint byte ranges into a
 * temporary file that rank 0 created and sized: no collective file handle,
 * so a rank that cannot open the file cannot leave the others blocked in a
 * collective MPI-IO call; every outcome is agreed before the next phase.
 */
#include "dist/ring_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void axis_sizes(int ndim, const int64_t *shape, int axis, int64_t *outer, int64_t *inner) {
    *outer = *inner = 1;
    for (int d = 0; d < axis; d++) *outer *= shape[d];
    for (int d = axis + 1; d < ndim; d++) *inner *= shape[d];
}

/* Reads this rank's runs and concatenates them along axis. */
static attn_status read_shard(const char *path, int axis, const attn_ring_shard *sh,
                              attn_array *local) {
    int run[2], used = 0;
    for (int r = 0; r < sh->runs; r++)
        if (sh->len[r] > 0) run[used++] = r;
    if (used == 0) return attn_npy_read_rows(path, axis, 0, 0, local);
    if (used == 1) return attn_npy_read_rows(path, axis, sh->start[run[0]], sh->len[run[0]], local);

    attn_array part[2] = {{0}, {0}};
    attn_status st;
    if ((st = attn_npy_read_rows(path, axis, sh->start[0], sh->len[0], &part[0])) ||
        (st = attn_npy_read_rows(path, axis, sh->start[1], sh->len[1], &part[1])))
        goto done;
    int64_t shape[ATTN_MAX_DIMS], outer, inner;
    memcpy(shape, part[0].shape, sizeof shape);
    shape[axis] = sh->rows;
    if ((st = attn_array_alloc(local, part[0].dtype, part[0].ndim, shape))) goto done;
    axis_sizes(part[0].ndim, shape, axis, &outer, &inner);
    const size_t row_bytes = (size_t)inner * attn_dtype_size(part[0].dtype);
    uint8_t *dst = local->data;
    for (int64_t o = 0; o < outer; o++)
        for (int r = 0; r < 2; r++) {
            const size_t n = (size_t)sh->len[r] * row_bytes;
            memcpy(dst, (const uint8_t *)part[r].data + (size_t)o * n, n);
            dst += n;
        }
done:
    attn_array_free(&part[0]);
    attn_array_free(&part[1]);
    return st;
}

attn_status attn_ring_read_npy(MPI_Comm comm, const char *path, int axis, attn_ring_layout layout,
                               attn_array *local, attn_array *header) {
    int rank, ranks;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &ranks);
    attn_array head = {0}, mine = {0};
    attn_ring_shard sh;
    attn_status st = !path || !local
                         ? attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_ring_read_npy: path or local is NULL")
                         : attn_npy_read_header(path, &head, NULL);
    if (st == ATTN_OK && (axis < 0 || axis >= head.ndim))
        st = attn__fail(ATTN_ERR_SHAPE, "%s: axis %d does not exist in an array of %d dimensions",
                       path, axis, head.ndim);
    if (st == ATTN_OK) st = attn_ring_shard_of(head.shape[axis], ranks, rank, layout, &sh);
    if (st == ATTN_OK) st = read_shard(path, axis, &sh, &mine);
    if ((st = attn_ring_agree(comm, st, NULL))) {
        attn_array_free(&mine);
        if (local) memset(local, 0, sizeof *local);
        return st;
    }
    *local = mine;
    if (header) *header = head;
    return ATTN_OK;
}

/* ------------------------------------------------------------------ write */

/* Rank 0: opens the output (a temporary file beside the target,
 * attn_io.h), writes the header and sizes the file, so that every rank can
 * write its rows at their offsets. */
static attn_status begin_output(const attn_ring_output *o, attn_output **out) {
    uint8_t header[ATTN_NPY_HEADER_MAX];
    size_t header_size;
    attn_status st = attn_npy_format_header(ATTN_F32, o->ndim, o->shape, header, sizeof header,
                                            &header_size);
    if (st) return attn__fail(st, "%s: %s", o->path, attn_last_error());
    if ((st = attn_output_open(o->path, out))) return st;
    int64_t count = 1;
    for (int d = 0; d < o->ndim; d++) count *= o->shape[d];
    if ((st = attn_output_write(*out, header, header_size)) ||
        (st = attn_output_resize(*out, (uint64_t)header_size + (uint64_t)count * sizeof(float)))) {
        attn_output_discard(*out);
        *out = NULL;
    }
    return st;
}

/* Every rank: writes its runs of rows into the temporary file. */
static attn_status write_rows(const attn_ring_output *o, const char *tmp, attn_ring_layout layout,
                              int ranks, int rank) {
    char reason[256];
    attn_ring_shard sh;
    attn_status st = attn_ring_shard_of(o->shape[o->axis], ranks, rank, layout, &sh);
    if (st || sh.rows == 0) return st;
    int64_t outer, inner;
    axis_sizes(o->ndim, o->shape, o->axis, &outer, &inner);
    uint8_t header[ATTN_NPY_HEADER_MAX];
    size_t header_size;
    if ((st = attn_npy_format_header(ATTN_F32, o->ndim, o->shape, header, sizeof header, &header_size)))
        return st;
    int fd = open(tmp, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return attn__fail(ATTN_ERR_IO, "cannot open '%s' for writing: %s", tmp,
                          errno_text(errno, reason, sizeof reason));
    const int64_t N = o->shape[o->axis];
    const uint8_t *src = (const uint8_t *)o->data;
    for (int64_t b = 0; b < outer && st == ATTN_OK; b++)
        for (int r = 0; r < sh.runs && st == ATTN_OK; r++) {
            size_t bytes = (size_t)(sh.len[r] * inner) * sizeof(float), done = 0;
            off_t at = (off_t)header_size + (off_t)((b * N + sh.start[r]) * inner) * (off_t)sizeof(float);
            while (done < bytes) {
                ssize_t n = pwrite(fd, src + done, bytes - done, at + (off_t)done);
                if (n < 0 && errno == EINTR) continue;
                if (n <= 0) {
                    st = attn__fail(ATTN_ERR_IO, "cannot write '%s': %s", o->path,
                                    errno_text(n < 0 ? errno : EIO, reason, sizeof reason));
                    break;
                }
                done += (size_t)n;
            }
            src += bytes;
        }
    /* The data must be on disk before rank 0 renames the file. */
    if (st == ATTN_OK && fsync(fd) != 0 && errno != EINVAL)
        st = attn__fail(ATTN_ERR_IO, "cannot write '%s': %s", o->path, errno_text(errno, reason, sizeof reason));
    if (close(fd) != 0 && st == ATTN_OK)
        st = attn__fail(ATTN_ERR_IO, "cannot write '%s': %s", o->path,
                        errno_text(errno, reason, sizeof reason));
    return st;
}

/* Outputs are written as a set: every output's rows go to its temporary
 * file first, and only when all of them are complete does rank 0 rename
 * them over their targets; a failure before that leaves every target as it
 * was (attn_io.h: a file the run did not finish is never under its name). */
attn_status attn_ring_save_npy(MPI_Comm comm, attn_ring_layout layout,
                               const attn_ring_output *outputs, int count) {
    int rank, ranks;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &ranks);
    attn_status st = count < 0 || (count > 0 && !outputs)
                         ? attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_ring_save_npy: no outputs")
                         : ATTN_OK;
    for (int i = 0; i < count && st == ATTN_OK; i++) {
        const attn_ring_output *o = &outputs[i];
        if (o->path && (o->ndim < 1 || o->ndim > ATTN_MAX_DIMS || o->axis < 0 || o->axis >= o->ndim))
            st = attn__fail(ATTN_ERR_INVALID_ARGUMENT, "%s: axis %d of %d dimensions", o->path,
                            o->axis, o->ndim);
    }
    if ((st = attn_ring_agree(comm, st, NULL))) return st;

    attn_output **open_files = calloc(count > 0 ? (size_t)count : 1, sizeof *open_files); /* rank 0's */
    st = open_files ? ATTN_OK : attn__fail(ATTN_ERR_OUT_OF_MEMORY, "cannot allocate the list of outputs");
    if ((st = attn_ring_agree(comm, st, NULL))) goto done;
    for (int i = 0; i < count; i++) {
        const attn_ring_output *o = &outputs[i];
        if (!o->path) continue;
        char temp[4096] = "";
        if (rank == 0 && (st = begin_output(o, &open_files[i])) == ATTN_OK) {
            const char *name = attn_output_temp_path(open_files[i]);
            if (!name)
                st = attn__fail(ATTN_ERR_IO, "'%s' is not a regular file: the ranks cannot write their rows into it",
                                o->path);
            else if (strlen(name) >= sizeof temp)
                st = attn__fail(ATTN_ERR_IO, "'%s': the path is too long to share between ranks", o->path);
            else
                snprintf(temp, sizeof temp, "%s", name);
        }
        if ((st = attn_ring_agree(comm, st, NULL))) goto done;
        MPI_Bcast(temp, (int)sizeof temp, MPI_CHAR, 0, comm);
        if ((st = attn_ring_agree(comm, write_rows(o, temp, layout, ranks, rank), NULL))) goto done;
    }
    /* Every rank wrote every output: rank 0 publishes the set. */
    if (rank == 0)
        for (int i = 0; i < count && st == ATTN_OK; i++) {
            if (!open_files[i]) continue;
            st = attn_output_commit(open_files[i]);
            open_files[i] = NULL;
        }
    st = attn_ring_agree(comm, st, NULL);
done:
    for (int i = 0; open_files && i < count; i++) attn_output_discard(open_files[i]);
    free(open_files);
    return st;
}
