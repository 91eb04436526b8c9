/*
 * attn_mpi.h — ring attention across MPI ranks (docs/distributed.md).
 *
 * The libattn_mpi component, built when CMake finds MPI (and
 * ATTN_WITH_MPI is not OFF): link attn::mpi, or pkg-config attn-mpi; it
 * brings libattn and MPI.  libattn itself stays MPI-free.
 *
 * Shape legend (the whole problem; docs and attn.h use the same names):
 *   q [B, L, Hq, D]   k [B, S, Hkv, D]   v [B, S, Hkv, Dv]
 *   out [B, L, Hq, Dv]   lse [B, Hq, L]
 * Sharding: the POSITION axes are cut, nothing else.  Every rank of the
 * communicator holds the rows of L that its shard names (q, out, lse, dq,
 * dout) and the rows of S that the same layout names for S (k, v, dk, dv),
 * for every batch and every head:
 *   local q [B, Lr, Hq, D]   local k [B, Sr, Hkv, D]   local v [B, Sr, Hkv, Dv]
 *   local out [B, Lr, Hq, Dv]   local lse [B, Hq, Lr] (contiguous)
 * where Lr and Sr are the rows of the rank's shard (attn_ring_shard_of), the
 * shard's runs concatenated in order along the position axis.  A rank may
 * hold no rows (L < ranks): its tensors then have 0 positions and may have
 * NULL data.
 *
 * Layouts (the same for queries and keys):
 *   contiguous  P blocks, rank r holds block r.  Under a causal mask rank 0
 *               sees one block of keys and rank P-1 all of them: the busiest
 *               rank does about 2x the mean work.
 *   zigzag      2P chunks, rank r holds chunks r and 2P-1-r (two runs).
 *               Every rank gets one early and one late chunk, so causal work
 *               is balanced to within a chunk pair (Striped/zigzag ring
 *               attention, as in Megatron's context parallelism).
 * Blocks of n rows into m parts: part i has n/m rows, one more for the first
 * n % m parts.  Any n >= 1 works with any number of ranks.
 *
 * Collective calls: every function below taking an MPI_Comm must be called
 * by every rank of comm, with the same options.  attn_ring_forward and
 * attn_ring_backward check it: before any data moves, every rank's
 * description of its call (shapes, causal, alignment, window, the scale as
 * it acts, whether key lengths are given and a hash of them, the mask's and
 * bias's shapes and, when they have one query row for all, a hash of them,
 * kernel, layout, L and S, the gradients asked for) is gathered at rank 0 and
 * compared, and a difference fails on every rank with
 *     ranks disagree on causal: rank 0 has 1, rank 2 has 0
 * naming the first field that differs (in that order) and the lowest rank
 * that differs.  Threads, precision (the ring's tensors are float32,
 * which it does not touch) and piece_rows may differ per rank: they do not
 * change the result.  Which sdpa options are compared, which may differ and
 * which the ring refuses is the ranks column of attn.h's table
 * (attn_sdpa_option).  Each returns the SAME status
 * on every rank: ATTN_OK when every rank succeeded, else the status of the
 * lowest failing rank, with attn_last_error() on every rank reading
 * "rank R of P: <that rank's message>" ("rank R of P (and N more): ..." when
 * several failed).  Errors are agreed (every rank's status and message
 * sent to rank 0, its verdict sent back) after each phase and before any
 * data is exchanged, so a bad input on one rank never leaves the others
 * waiting.  MPI's own failures follow the communicator's error handler
 * (MPI_ERRORS_ARE_FATAL by default: mpirun aborts the whole job).
 *
 * A rank that stops answering (stopped, hung, far slower): inside
 * attn_ring_forward and attn_ring_backward every wait for another rank is
 * bounded by attn_ring_options.timeout_seconds (60 s by default), and the
 * ranks that waited in vain return ATTN_ERR_TIMEOUT with a message that
 * begins with the rank that noticed and names the silent one:
 *     rank 0 of 3: no data from rank 2 for 60 s (waiting for a key/value
 *     block: is rank 2 stopped, or much slower?)
 * That status is NOT agreed (the silent rank cannot take part): other ranks
 * may still be waiting, or time out later naming a neighbour that gave up.
 * After it, comm is unusable: the job can only end, with MPI_Abort (what
 * attn ring does).  The buffers of abandoned transfers are deliberately
 * left allocated (a rank that resumes could still make MPI touch them).
 * The other collective calls (attn_ring_agree, attn_ring_agree_values, the
 * .npy reader and writer) wait without a limit.
 *
 * Messages: the ring uses tags 16720-16723 on comm (point to point, for
 * the blocks and the agreements); keep no receives of your own that could
 * match them (MPI_ANY_TAG) pending on comm during a call.
 */
#ifndef ATTN_MPI_H
#define ATTN_MPI_H

#include <mpi.h>

#include "attn.h"
#include "attn_io.h" /* attn_array, for the sharded .npy reader */

#ifdef __cplusplus
extern "C" {
#endif

typedef enum attn_ring_layout {
    ATTN_RING_CONTIGUOUS = 0, /* rank r: block r of P                         */
    ATTN_RING_ZIGZAG = 1      /* rank r: chunks r and 2P-1-r of 2P (causal)    */
} attn_ring_layout;

/* The global rows one rank holds: one run (contiguous) or two (zigzag), in
 * increasing order; a run may be empty. */
typedef struct attn_ring_shard {
    int runs;          /* 1 or 2                                       */
    int64_t start[2];  /* first global row of each run                 */
    int64_t len[2];    /* rows of each run (len[1] = 0 when runs = 1)  */
    int64_t rows;      /* len[0] + len[1]: the local position count    */
} attn_ring_shard;

/* The shard of rank `rank` of `ranks` for a position axis of total_rows. */
ATTN_API attn_status attn_ring_shard_of(int64_t total_rows, int ranks, int rank, attn_ring_layout layout,
                               attn_ring_shard *shard);

/* Collective: every rank passes its own status and, when it failed, its
 * message (NULL: attn_last_error(), i.e. the failing library call's); every
 * rank gets the agreed status described above, with the lowest failing
 * rank's message.  For callers that do per-rank work of their own (reading,
 * checking) before the next collective step. */
ATTN_API attn_status attn_ring_agree(MPI_Comm comm, attn_status mine, const char *message);

/* A setting every rank must share, for attn_ring_agree_values. */
typedef struct attn_ring_value {
    const char *name; /* for the message: "causal", "whether --mask is given" */
    int64_t value;
} attn_ring_value;

#define ATTN_RING_MAX_VALUES 64

/* Collective: every rank passes its values of the same `count` settings
 * (at most ATTN_RING_MAX_VALUES), in the same order.  ATTN_OK on every rank
 * when every rank's values equal rank 0's; otherwise
 * ATTN_ERR_INVALID_ARGUMENT on every rank, with the message
 *     ranks disagree on NAME: rank 0 has A, rank R has B
 * for the first setting in the list that differs and the lowest rank R
 * that differs (names are rank 0's).  For callers' own settings that decide
 * which collective steps follow (which optional inputs a program reads),
 * checked before those steps so that no rank is left in a step the others
 * skip.  attn_ring_forward and attn_ring_backward do the same for the
 * problem they are given (see there). */
ATTN_API attn_status attn_ring_agree_values(MPI_Comm comm, const attn_ring_value *values, int count);

/* --------------------------------------------------------- ring attention */

typedef struct attn_ring_options {
    size_t struct_size;    /* sizeof(attn_ring_options): set by ATTN_RING_OPTIONS_INIT */
    /* scale, causal, align, window, key_lengths ([B], global positions, the
     * same values on every rank), mask, bias, kernel and threads, as for
     * attn_sdpa_forward; NULL = the defaults.  query_start, key_start,
     * total_len_q, total_len_kv and workspace must be zero: the ring places
     * every block at its global positions itself.
     * mask and bias are sharded like q: mask_shape and bias_shape give the
     * WHOLE table's shape [B|1, Hq|1, L|1, S|1] (the same on every rank),
     * and the pointer this rank's rows of it, [B|1, Hq|1, Lr, S|1]
     * contiguous (its query rows, runs concatenated, as attn_ring_read_npy
     * reads them along the L axis), or, for a table with one query row for
     * all (shape[2] == 1), that row, on every rank.  Every key column is
     * held: the ring copies each piece's block of columns for the kernel.
     * Every rank passes a mask (a bias) or none; for a sharded table a rank
     * without query rows passes any non-NULL pointer.  A table with one
     * query row is compared across ranks (a hash of it); sharded contents
     * cannot be. */
    const attn_sdpa_options *sdpa;
    attn_ring_layout layout;
    int64_t len_q, len_kv; /* L and S of the whole problem; 0 = the sum of the
                              ranks' local rows                               */
    int64_t piece_rows;    /* query rows per kernel call; between calls the
                              ring drives MPI progress (MPI_Testall).  0 = about
                              a quarter of the local rows, at least 64         */
    int time_comm_alone;   /* nonzero: before the work, time one rotation of
                              the blocks with no compute (comm_alone_s)        */
    /* The longest this rank waits for another: for a block or a gradient
     * from a neighbour, for a neighbour to take one, for an agreement.
     * Past it the call fails with ATTN_ERR_TIMEOUT ("rank 1 of 3: no data
     * from rank 2 for 60 s ...") instead of hanging on a rank that stopped.
     * 0 = ATTN_RING_DEFAULT_TIMEOUT_SECONDS, < 0 = no limit.  A legitimate
     * wait is at most about one ring step of a busier neighbour (an
     * unbalanced layout, a slower machine): raise it when steps take
     * minutes.  May differ per rank. */
    double timeout_seconds;
} attn_ring_options;

#define ATTN_RING_OPTIONS_INIT {.struct_size = sizeof(attn_ring_options)}
#define ATTN_RING_DEFAULT_TIMEOUT_SECONDS 60.0

/* Per-rank timings of one call (this rank's own; gather them to compare). */
typedef struct attn_ring_stats {
    double total_s;        /* wall time of the call (less comm_alone_s)       */
    double busy_s;         /* in attention kernels and the merges (compute)   */
    double busy_cpu_s;     /* the same in CPU-seconds of all threads: what the
                              compute cost, whatever else the machine ran     */
    double wait_s;         /* waiting for a block or gradient to arrive or leave:
                              the communication the compute did not hide      */
    double progress_s;     /* in MPI_Testall between kernel calls: Open MPI
                              moving messages along (over shared memory the
                              copy itself happens here, on this rank's core)  */
    double comm_alone_s;   /* one rotation with nothing to overlap, when asked */
    int64_t pairs_computed;/* (query run, key run) pairs handed to the kernel  */
    int64_t pairs_skipped; /* pairs the causal/window/key-length rules hide    */
    int64_t bytes_sent;    /* payload this rank sent around the ring           */
} attn_ring_stats;

/* Ring attention, forward.  Each of P steps computes the local queries
 * against the key/value block in hand while the next block travels from the
 * left neighbour (MPI_Isend/MPI_Irecv, two buffers); partial results merge
 * by their lse in double precision (exact up to rounding, stable, -inf lse
 * of a fully hidden block handled, never NaN).  Pairs of runs that the
 * causal, window and key-length rules hide entirely are skipped (a mask or
 * bias only hides more: a piece it hides entirely is computed, to lse -inf).
 *   q [B, Lr, Hq, D]  k [B, Sr, Hkv, D]  v [B, Sr, Hkv, Dv]     local shards
 *   out [B, Lr, Hq, Dv] (written)  lse [B, Hq, Lr] contiguous, or NULL
 *   stats: this rank's timings, or NULL.
 * Memory per rank beyond the shards: two key/value blocks of the largest
 * shard, the output in double, and one piece of kernel output (and of the
 * mask and bias: [B|1, Hq|1, piece rows, block rows]). */
ATTN_API attn_status attn_ring_forward(MPI_Comm comm, const attn_tensor *q, const attn_tensor *k,
                              const attn_tensor *v, const attn_ring_options *opt,
                              attn_tensor *out, float *lse, attn_ring_stats *stats);

/* Ring attention, backward.  dq stays local; dk and dv travel WITH their
 * key/value block: at each step a rank adds its contribution to the
 * gradient of the block in hand and passes it on, and after the last step
 * one extra hop returns each block's gradient to its owner.  Accumulation
 * order is fixed (the ring order), so results are reproducible.
 *   out, lse: this rank's rows of attn_ring_forward's results (required:
 *             the global lse normalises every block's weights)
 *   dout [B, Lr, Hq, Dv]   dq [B, Lr, Hq, D]  dk [B, Sr, Hkv, D]
 *   dv [B, Sr, Hkv, Dv]    (written; each may be NULL, but every rank must
 *                           ask for the same ones)
 * Each block's gradient comes from attn_sdpa_backward on the block plus an
 * exact correction for the block's share of the row's softmax
 * (docs/distributed.md): about one forward and two backward kernel calls
 * per block pair. */
ATTN_API attn_status attn_ring_backward(MPI_Comm comm, const attn_tensor *q, const attn_tensor *k,
                               const attn_tensor *v, const attn_ring_options *opt,
                               const attn_tensor *out, const float *lse, const attn_tensor *dout,
                               attn_tensor *dq, attn_tensor *dk, attn_tensor *dv,
                               attn_ring_stats *stats);

/* -------------------------------------------------------- sharded .npy */

/* Collective read of this rank's shard of a .npy file: the rows of `axis`
 * that attn_ring_shard_of(shape[axis], P, rank, layout) names, every index
 * of the other axes, read by offset (attn_npy_read_rows), runs
 * concatenated.  local keeps the file's dtype; header (if not NULL) gets the
 * whole file's dtype and shape with data NULL.  No rank reads more than its
 * own rows (briefly twice its shard's memory for two runs).  Paths must name
 * the same file on every rank (a shared file system). */
ATTN_API attn_status attn_ring_read_npy(MPI_Comm comm, const char *path, int axis, attn_ring_layout layout,
                               attn_array *local, attn_array *header);

/* One float32 array to write from shards. */
typedef struct attn_ring_output {
    const char *path;             /* NULL: nothing to write for this entry       */
    int ndim;
    int64_t shape[ATTN_MAX_DIMS]; /* of the WHOLE array                          */
    int axis;                     /* the sharded position axis                   */
    const float *data;            /* this rank's rows, as attn_ring_read_npy lays
                                     them out                                    */
} attn_ring_output;

/* Collective write of a set of outputs: for each, rank 0 creates a
 * temporary file beside path and writes the header, every rank writes its
 * rows at their offsets (MPI-IO, a file view and MPI_File_write_all), and
 * only when every rank succeeded with every output does rank 0 rename the
 * temporary files over the paths.  On any failure the temporaries are
 * removed and no output is left half-written under its name (outputs
 * already renamed by a failing set are removed too). */
ATTN_API attn_status attn_ring_save_npy(MPI_Comm comm, attn_ring_layout layout,
                               const attn_ring_output *outputs, int count);

#ifdef __cplusplus
}
#endif

#endif /* ATTN_MPI_H */
