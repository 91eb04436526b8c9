/*
 * ring_internal.h — what the forward and backward rings share: the validated
 * problem (global sizes, every rank's shard), the travelling block's layout,
 * the double-buffered exchange with its timers, and the test that a pair of
 * runs has any visible query-key pair at all.
 *
 * Shape legend: q [B, Lr, Hq, D] (local rows)   k, v: a block in hand
 *   block [B, rows_o, Hkv, Dv + D]: for each (batch, position, kv head) the
 *   value row THEN the key row, [v | k].  So one buffer gives the views
 *   v = columns [0, Dv), k = columns [Dv, Dv + D), and [v | k] = all of it,
 *   which the backward uses as the values of one forward call (docs).
 *   unit = Hkv * (Dv + D) floats: one (batch, position) row of a block, the
 *   MPI datatype blocks travel in.
 */
#ifndef ATTN_RING_INTERNAL_H
#define ATTN_RING_INTERNAL_H

#include "attn_mpi.h"
#include "base/problem.h"

typedef struct ring_problem {
    MPI_Comm comm;
    int rank, ranks, left, right;
    int64_t batch, len_q, len_kv;   /* B, L, S of the whole problem           */
    int64_t heads_q, heads_kv;      /* Hq, Hkv                                */
    int64_t dim, dim_v;             /* D, Dv                                  */
    int64_t unit;                   /* Hkv * (Dv + D): floats per block row   */
    attn_ring_shard q_shard;        /* this rank's query rows                 */
    attn_ring_shard *kv_shards;     /* [ranks] every rank's key rows          */
    int64_t max_kv_rows;            /* rows of the largest key shard          */
    int64_t piece_rows;             /* query rows per kernel call             */
    attn_sdpa_options sdpa;         /* the caller's options, positions zero;
                                       mask and bias: this rank's rows, their
                                       shapes the whole tables' (attn_mpi.h) */
    MPI_Datatype unit_type;         /* unit contiguous floats                 */
    double timeout_s;               /* the longest any wait may take; INFINITY
                                       for no limit                           */
} ring_problem;

/* The message tags of the ring on the caller's communicator. */
enum {
    RING_TAG_KV = 16720,  /* a key/value block                        */
    RING_TAG_DKV,         /* a block's gradient                       */
    RING_TAG_RECORD,      /* a rank's record for an agreement         */
    RING_TAG_VERDICT      /* rank 0's decision on the records          */
};

/* Validates a ring call on every rank and agrees on the outcome (collective).
 * mine: the caller's own checks of its arguments, agreed with the rest.
 * extra_flags: bits every rank must pass identically (which gradients the
 * backward computes), compared across ranks.  On success rp owns kv_shards and
 * unit_type: release with attn__ring_problem_free. */
attn_status attn__ring_problem_init(ring_problem *rp, MPI_Comm comm, const attn_tensor *q,
                              const attn_tensor *k, const attn_tensor *v,
                              const attn_tensor *out, const attn_ring_options *opt,
                              attn_status mine, int extra_flags);

/* attn_ring_agree with every wait bounded by timeout seconds (INFINITY:
 * none).  On a timeout the status is ATTN_ERR_TIMEOUT on the ranks that
 * noticed, with a message naming the rank that did not answer. */
attn_status attn__ring_agree_within(MPI_Comm comm, attn_status mine, const char *message, double timeout);
void attn__ring_problem_free(ring_problem *rp);

/* True unless the causal, window and key-length rules hide every pair of
 * global query rows [qs, qs + lq) and key rows [ks, ks + lk)
 * (base/visibility.h's visibility_rows_key_range decides). */
bool attn__ring_runs_interact(const ring_problem *rp, int64_t qs, int64_t lq, int64_t ks, int64_t lk);

/* Whose block a rank holds at step t (0 .. P-1): its own at t = 0, then the
 * left neighbour's, and so on around the ring. */
static inline int ring_owner_at(const ring_problem *rp, int step) {
    return (rp->rank - step % rp->ranks + rp->ranks) % rp->ranks;
}

/* Packs local k [B, Sr, Hkv, D] and v [B, Sr, Hkv, Dv] into a block. */
void attn__ring_pack_block(const ring_problem *rp, const attn_tensor *k, const attn_tensor *v,
                     float *block);

/* Views of key run [off, off + len) of a block of `rows` positions:
 * which = 'k' (width D), 'v' (width Dv) or 'a' ([v | k], width Dv + D). */
attn_tensor attn__ring_block_view(const ring_problem *rp, float *block, int64_t rows, int64_t off,
                            int64_t len, char which);

/* Nonblocking requests of one step, and for each what it waits for (the
 * timeout's message names the peer and the data). */
typedef struct ring_requests {
    MPI_Request req[4];
    int peer[4];           /* the rank at the other end                 */
    bool sending[4];       /* a send; else a receive                    */
    const char *what[4];   /* "a key/value block"                       */
    int count;
} ring_requests;

/* Posts a send of `count` units at buf to peer, or a receive into it. */
void attn__ring_post(const ring_problem *rp, ring_requests *r, bool send, void *buf, int64_t count,
                     int peer, int tag, const char *what);

/* Posts step t's turn of the key/value ring: the block of step t's owner
 * (send) to the right, the next step's from the left into recv; nothing
 * on the last step.  The bytes sent go to stats when it is not NULL. */
void attn__ring_post_shift(const ring_problem *rp, ring_requests *r, int step, const float *send, float *recv,
                           attn_ring_stats *stats);

/* Once the turn is complete: the block received is the one to work on. */
static inline void ring_swap_blocks(float **a, float **b) {
    float *swap = *a;
    *a = *b;
    *b = swap;
}

/* Rounds acc ([B, rows, heads, width] doubles, packed) into t (any strides). */
void attn__ring_store_rows(const double *acc, int64_t batch, int64_t rows, int64_t heads, int64_t width,
                           attn_tensor *t);

/* MPI_Testall: lets Open MPI move the messages along while the caller
 * computes (it makes no progress on its own); the time goes to
 * stats->progress_s. */
void attn__ring_progress(ring_requests *r, attn_ring_stats *stats);

/* Waits for every request (polling, the time added to stats->wait_s when
 * stats is not NULL), at most rp->timeout_s.  On a timeout: ATTN_ERR_TIMEOUT
 * with a message naming the peer of the first request not complete, and
 * every request abandoned (receives cancelled, all freed) — the caller must
 * then NOT free the requests' buffers (a peer that resumes could still
 * make MPI read or write them) and must not communicate on comm again. */
attn_status attn__ring_wait(const ring_problem *rp, ring_requests *r, attn_ring_stats *stats);

/* Abandons r's pending requests as attn__ring_wait does on a timeout: for
 * the other requests of a call that timed out. */
void attn__ring_abandon(ring_requests *r);

/* CPU seconds this process has used (all its threads): the busy time in
 * CPU-seconds, which other load on a shared machine does not inflate. */
double attn__ring_cpu_seconds(void);

/* One piece of a step: n query rows (local row q_row, global row q_start)
 * against the block's key run of m rows at row k_off (global row k_start). */
typedef struct ring_piece {
    int64_t q_row, q_start, n;
    int64_t k_off, k_start, m;
} ring_piece;

typedef attn_status (*ring_piece_fn)(void *ctx, const ring_piece *piece);

/* One step of a ring: for every pair of this rank's query runs and the
 * runs of the key shard ks in hand that can see each other (the others are
 * counted in stats->pairs_skipped), fn on each piece of at most piece_rows
 * query rows; the pieces' wall and CPU time count as busy.  After each
 * piece, when reqs is not NULL, MPI progress is driven (attn__ring_progress).
 * Stops at the first failure. */
attn_status attn__ring_step(const ring_problem *rp, const attn_ring_shard *ks, ring_piece_fn fn, void *ctx,
                            ring_requests *reqs, attn_ring_stats *stats);

/* A grow-only scratch buffer for kernel workspaces. */
typedef struct ring_scratch {
    void *data;
    size_t size;
} ring_scratch;
attn_status attn__ring_scratch_reserve(ring_scratch *s, size_t bytes);

/* One piece's slices of the mask and the bias. */
typedef struct ring_slices {
    ring_scratch mask, bias;
} ring_slices;
void attn__ring_slices_free(ring_slices *s);

/* The options of the kernel calls of one piece: its queries' and keys'
 * global positions (the causal, window and key-length rules act on them),
 * and its block of the mask and the bias, copied into `slices` as the
 * kernel wants them: [B|1, Hq|1, n|1, m|1], contiguous.  With slices NULL
 * only the shapes are set, for workspace queries (the pointers then still
 * point at the rank's rows, which such a query does not read).  No
 * workspace is set. */
attn_status attn__ring_piece_options(const ring_problem *rp, const ring_piece *pc, ring_slices *slices,
                                     attn_sdpa_options *o);

/* One rotation of the blocks with nothing to overlap, timed
 * (attn_ring_options.time_comm_alone).  ATTN_ERR_TIMEOUT as attn__ring_wait. */
attn_status attn__ring_time_rotation(const ring_problem *rp, float *a, float *b, attn_ring_stats *stats);

#endif /* ATTN_RING_INTERNAL_H */
