/*
 * ring_common.c — shards, agreement on errors, validation of a ring call and
 * the machinery both rings use (block packing and views, the nonblocking
 * exchange, progress, timers).
 *
 * Shape legend: q [B, Lr, Hq, D]  k [B, Sr, Hkv, D]  v [B, Sr, Hkv, Dv] local;
 *   block [B, rows, Hkv, Dv + D], per (batch, position, kv head) [v | k].
 */
#include "dist/ring_internal.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Part i of n rows cut into m parts: n / m rows, one more for the first n % m. */
static int64_t part_start(int64_t n, int64_t m, int64_t i) {
    return i * (n / m) + (i < n % m ? i : n % m);
}
static int64_t part_len(int64_t n, int64_t m, int64_t i) { return n / m + (i < n % m ? 1 : 0); }

attn_status attn_ring_shard_of(int64_t total_rows, int ranks, int rank, attn_ring_layout layout,
                               attn_ring_shard *shard) {
    if (!shard) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_ring_shard_of: shard is NULL");
    memset(shard, 0, sizeof *shard);
    if (total_rows < 0 || ranks < 1 || rank < 0 || rank >= ranks)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT,
                         "attn_ring_shard_of: %lld rows, rank %d of %d is not a valid shard",
                         (long long)total_rows, rank, ranks);
    if (layout == ATTN_RING_CONTIGUOUS) {
        shard->runs = 1;
        shard->start[0] = part_start(total_rows, ranks, rank);
        shard->len[0] = part_len(total_rows, ranks, rank);
        shard->start[1] = shard->start[0] + shard->len[0];
    } else if (layout == ATTN_RING_ZIGZAG) {
        const int64_t chunks = 2 * (int64_t)ranks, late = chunks - 1 - rank;
        shard->runs = 2;
        shard->start[0] = part_start(total_rows, chunks, rank);
        shard->len[0] = part_len(total_rows, chunks, rank);
        shard->start[1] = part_start(total_rows, chunks, late);
        shard->len[1] = part_len(total_rows, chunks, late);
    } else {
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT,
                         "layout must be contiguous (0) or zigzag (1), got %d", (int)layout);
    }
    shard->rows = shard->len[0] + shard->len[1];
    return ATTN_OK;
}

attn_status attn_ring_agree(MPI_Comm comm, attn_status mine, const char *message) {
    int rank, ranks, flag, first;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &ranks);
    flag = mine != ATTN_OK ? rank : ranks;
    MPI_Allreduce(&flag, &first, 1, MPI_INT, MPI_MIN, comm);
    if (first == ranks) return ATTN_OK;
    /* The lowest failing rank's status and message, to everyone. */
    int status = mine;
    char text[1024] = "";
    if (rank == first) snprintf(text, sizeof text, "%s", message ? message : attn_last_error());
    int failing = mine != ATTN_OK, failed;
    MPI_Allreduce(&failing, &failed, 1, MPI_INT, MPI_SUM, comm);
    MPI_Bcast(&status, 1, MPI_INT, first, comm);
    MPI_Bcast(text, (int)sizeof text, MPI_CHAR, first, comm);
    if (ranks == 1) return attn__fail((attn_status)status, "%s", text);
    if (failed == 1) return attn__fail((attn_status)status, "rank %d of %d: %s", first, ranks, text);
    return attn__fail((attn_status)status, "rank %d of %d (and %d more): %s", first, ranks, failed - 1,
                     text);
}

/* ------------------------------------------------------------- validation */

static attn_status check_local_tensor(const attn_tensor *t, const char *name) {
    if (!t) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "%s is NULL", name);
    static const char *dims[4] = {"batch", "positions", "heads", "width"};
    for (int d = 0; d < 4; d++)
        if (t->shape[d] < (d == 1 ? 0 : 1))
            return attn__fail(ATTN_ERR_SHAPE, "%s: %s must be %s, got %lld", name, dims[d],
                             d == 1 ? ">= 0" : "positive", (long long)t->shape[d]);
    for (int d = 0; d < 4; d++)
        if (t->stride[d] < 0)
            return attn__fail(ATTN_ERR_SHAPE, "%s: stride of %s is negative (%lld)", name, dims[d],
                             (long long)t->stride[d]);
    if (t->stride[3] != 1)
        return attn__fail(ATTN_ERR_SHAPE, "%s: the last dimension must be contiguous (stride 1)", name);
    if (t->shape[1] > 0 && !t->data)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "%s->data is NULL", name);
    return ATTN_OK;
}

static attn_status check_local(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                               const attn_tensor *out, const attn_ring_options *o) {
    attn_status st;
    const attn_sdpa_options *s = o->sdpa;
    if (!s) s = &(const attn_sdpa_options)ATTN_SDPA_OPTIONS_INIT;
    if (s->query_start || s->key_start || s->total_len_q || s->total_len_kv)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT,
                         "ring options: sdpa.query_start, key_start, total_len_q and total_len_kv "
                         "must be 0 (the ring places every block at its global positions)");
    if (s->mask || s->bias)
        return attn__fail(ATTN_ERR_UNSUPPORTED,
                         "ring attention does not support a boolean mask or a bias (each block "
                         "would need its slice of them); use causal, window and key lengths, or "
                         "attn_sdpa_forward in one process");
    if (s->workspace || s->workspace_size)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT,
                         "ring options: sdpa.workspace must be NULL (the ring keeps its own)");
    if (o->layout != ATTN_RING_CONTIGUOUS && o->layout != ATTN_RING_ZIGZAG)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "layout must be contiguous or zigzag, got %d",
                         (int)o->layout);
    if (o->len_q < 0 || o->len_kv < 0 || o->piece_rows < 0)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT,
                         "ring options: len_q, len_kv and piece_rows must be >= 0");
    if ((st = check_local_tensor(q, "q")) || (st = check_local_tensor(k, "k")) ||
        (st = check_local_tensor(v, "v")) || (st = check_local_tensor(out, "out")))
        return st;
    if ((st = problem_check_v_like_k(k, v))) return st;
    if (out->shape[0] != q->shape[0] || out->shape[1] != q->shape[1] ||
        out->shape[2] != q->shape[2] || out->shape[3] != v->shape[3])
        return attn__fail(ATTN_ERR_SHAPE,
                         "out is [%lld, %lld, %lld, %lld] but must be [B, Lr, Hq, Dv] = [%lld, "
                         "%lld, %lld, %lld]",
                         (long long)out->shape[0], (long long)out->shape[1],
                         (long long)out->shape[2], (long long)out->shape[3],
                         (long long)q->shape[0], (long long)q->shape[1], (long long)q->shape[2],
                         (long long)v->shape[3]);
    return ATTN_OK;
}

enum { DIM_B, DIM_LR, DIM_HQ, DIM_D, DIM_KB, DIM_SR, DIM_HKV, DIM_DV, DIM_FLAGS, DIM_COUNT };

/* Checks what every rank reported; every rank runs this on the same table
 * and reaches the same verdict and message, so no agreement is needed. */
static attn_status check_global(ring_problem *rp, const int64_t *all, const attn_ring_options *o) {
    const int64_t *r0 = all;
    const char *layout = o->layout == ATTN_RING_ZIGZAG ? "zigzag" : "contiguous";
    for (int i = 0; i < rp->ranks; i++) {
        const int64_t *ri = all + (size_t)i * DIM_COUNT;
        if (ri[DIM_B] != r0[DIM_B] || ri[DIM_HQ] != r0[DIM_HQ] || ri[DIM_D] != r0[DIM_D] ||
            ri[DIM_HKV] != r0[DIM_HKV] || ri[DIM_DV] != r0[DIM_DV] || ri[DIM_KB] != r0[DIM_KB])
            return attn__fail(ATTN_ERR_SHAPE,
                             "rank %d has (B, Hq, D, Hkv, Dv) = (%lld, %lld, %lld, %lld, %lld) but "
                             "rank 0 has (%lld, %lld, %lld, %lld, %lld): every rank must hold the "
                             "same batches, heads and widths",
                             i, (long long)ri[DIM_B], (long long)ri[DIM_HQ], (long long)ri[DIM_D],
                             (long long)ri[DIM_HKV], (long long)ri[DIM_DV], (long long)r0[DIM_B],
                             (long long)r0[DIM_HQ], (long long)r0[DIM_D], (long long)r0[DIM_HKV],
                             (long long)r0[DIM_DV]);
        if (ri[DIM_FLAGS] != r0[DIM_FLAGS])
            return attn__fail(ATTN_ERR_INVALID_ARGUMENT,
                             "rank %d asks for other gradients than rank 0: every rank must pass "
                             "the same set of dq, dk, dv (NULL or not)", i);
    }
    rp->batch = r0[DIM_B];
    rp->heads_q = r0[DIM_HQ];
    rp->dim = r0[DIM_D];
    rp->heads_kv = r0[DIM_HKV];
    rp->dim_v = r0[DIM_DV];
    if (r0[DIM_KB] != rp->batch)
        return attn__fail(ATTN_ERR_SHAPE, "k has batch %lld but q has batch %lld",
                         (long long)r0[DIM_KB], (long long)rp->batch);
    if (rp->heads_q % rp->heads_kv != 0)
        return attn__fail(ATTN_ERR_SHAPE,
                         "q has %lld heads, not a multiple of k's %lld heads (grouped-query "
                         "attention needs Hq = G * Hkv)",
                         (long long)rp->heads_q, (long long)rp->heads_kv);
    int64_t sum_q = 0, sum_kv = 0;
    for (int i = 0; i < rp->ranks; i++) {
        sum_q += all[(size_t)i * DIM_COUNT + DIM_LR];
        sum_kv += all[(size_t)i * DIM_COUNT + DIM_SR];
    }
    rp->len_q = o->len_q ? o->len_q : sum_q;
    rp->len_kv = o->len_kv ? o->len_kv : sum_kv;
    if (rp->len_q < 1 || rp->len_kv < 1)
        return attn__fail(ATTN_ERR_SHAPE,
                         "the ranks hold %lld query and %lld key positions in all; ring attention "
                         "needs at least one of each",
                         (long long)rp->len_q, (long long)rp->len_kv);
    for (int i = 0; i < rp->ranks; i++) {
        attn_ring_shard qs, ks;
        attn_ring_shard_of(rp->len_q, rp->ranks, i, o->layout, &qs);
        attn_ring_shard_of(rp->len_kv, rp->ranks, i, o->layout, &ks);
        const int64_t *ri = all + (size_t)i * DIM_COUNT;
        if (ri[DIM_LR] != qs.rows || ri[DIM_SR] != ks.rows)
            return attn__fail(ATTN_ERR_SHAPE,
                             "rank %d holds %lld query and %lld key rows, but the %s layout of "
                             "L = %lld and S = %lld over %d ranks gives it %lld and %lld",
                             i, (long long)ri[DIM_LR], (long long)ri[DIM_SR], layout,
                             (long long)rp->len_q, (long long)rp->len_kv, rp->ranks,
                             (long long)qs.rows, (long long)ks.rows);
        rp->kv_shards[i] = ks;
        if (ks.rows > rp->max_kv_rows) rp->max_kv_rows = ks.rows;
        if (i == rp->rank) rp->q_shard = qs;
    }
    /* Blocks travel as B * rows units of Hkv * (Dv + D) floats: MPI counts
     * are int. */
    rp->unit = rp->heads_kv * (rp->dim_v + rp->dim);
    if (rp->unit > INT_MAX || rp->batch * rp->max_kv_rows > INT_MAX)
        return attn__fail(ATTN_ERR_UNSUPPORTED,
                         "a key/value block of %lld x %lld rows of %lld floats exceeds MPI's int "
                         "counts; use more ranks",
                         (long long)rp->batch, (long long)rp->max_kv_rows, (long long)rp->unit);
    return ATTN_OK;
}

/* The library's own checks of the options (scale, window, key lengths,
 * kernel, threads), on one call this rank will make. */
static attn_status check_options(const ring_problem *rp, const attn_tensor *q,
                                 const attn_tensor *k, const attn_tensor *v) {
    const attn_ring_shard *ks = &rp->kv_shards[rp->rank];
    if (q->shape[1] == 0 || k->shape[1] == 0) return ATTN_OK;
    int qa = rp->q_shard.len[0] > 0 ? 0 : 1, ka = ks->len[0] > 0 ? 0 : 1;
    attn_tensor qv = *q, kv = *k, vv = *v;
    qv.data = (float *)qv.data + (qa ? rp->q_shard.len[0] : 0) * q->stride[1];
    qv.shape[1] = rp->q_shard.len[qa];
    kv.data = (float *)kv.data + (ka ? ks->len[0] : 0) * k->stride[1];
    vv.data = (float *)vv.data + (ka ? ks->len[0] : 0) * v->stride[1];
    kv.shape[1] = vv.shape[1] = ks->len[ka];
    attn_sdpa_options o = attn__ring_call_options(rp, rp->q_shard.start[qa], ks->start[ka], NULL, 0);
    size_t bytes;
    return attn_sdpa_workspace_size(&qv, &kv, &vv, &o, &bytes);
}

attn_status attn__ring_problem_init(ring_problem *rp, MPI_Comm comm, const attn_tensor *q,
                              const attn_tensor *k, const attn_tensor *v,
                              const attn_tensor *out, const attn_ring_options *opt,
                              int extra_flags) {
    attn_ring_options options = ATTN_RING_OPTIONS_INIT;
    const attn_ring_options *o = &options;
    memset(rp, 0, sizeof *rp);
    rp->unit_type = MPI_DATATYPE_NULL;
    rp->comm = comm;
    MPI_Comm_rank(comm, &rp->rank);
    MPI_Comm_size(comm, &rp->ranks);
    rp->left = (rp->rank + rp->ranks - 1) % rp->ranks;
    rp->right = (rp->rank + 1) % rp->ranks;
    rp->sdpa = (attn_sdpa_options)ATTN_SDPA_OPTIONS_INIT;

    int64_t *all = malloc(sizeof(int64_t) * DIM_COUNT * (size_t)rp->ranks);
    rp->kv_shards = calloc((size_t)rp->ranks, sizeof *rp->kv_shards);
    attn_status st = !all || !rp->kv_shards
                         ? attn__fail(ATTN_ERR_OUT_OF_MEMORY, "cannot allocate the shard table")
                         : ATTN_OK;
    if (st == ATTN_OK && opt) st = options_copy(&options, sizeof options, opt, "attn_ring_options");
    if (st == ATTN_OK && options.sdpa)
        st = options_copy(&rp->sdpa, sizeof rp->sdpa, options.sdpa, "attn_sdpa_options");
    if (st == ATTN_OK) st = check_local(q, k, v, out, o);
    if ((st = attn_ring_agree(comm, st, NULL))) goto fail;

    const int64_t mine[DIM_COUNT] = {q->shape[0], q->shape[1], q->shape[2], q->shape[3],
                                     k->shape[0], k->shape[1], k->shape[2], v->shape[3],
                                     extra_flags};
    MPI_Allgather(mine, DIM_COUNT, MPI_INT64_T, all, DIM_COUNT, MPI_INT64_T, comm);
    if ((st = check_global(rp, all, o))) goto fail;
    if ((st = attn_ring_agree(comm, check_options(rp, q, k, v), NULL))) goto fail;

    rp->max_key_length = rp->len_kv;
    if (rp->sdpa.key_lengths) {
        rp->max_key_length = 0;
        for (int64_t b = 0; b < rp->batch; b++)
            if (rp->sdpa.key_lengths[b] > rp->max_key_length)
                rp->max_key_length = rp->sdpa.key_lengths[b];
    }
    rp->piece_rows = o->piece_rows;
    if (rp->piece_rows == 0) {
        rp->piece_rows = (rp->q_shard.rows + 3) / 4;
        if (rp->piece_rows < 64) rp->piece_rows = 64;
    }
    MPI_Type_contiguous((int)rp->unit, MPI_FLOAT, &rp->unit_type);
    MPI_Type_commit(&rp->unit_type);
    free(all);
    return ATTN_OK;
fail:
    free(all);
    attn__ring_problem_free(rp);
    return st;
}

void attn__ring_problem_free(ring_problem *rp) {
    free(rp->kv_shards);
    rp->kv_shards = NULL;
    if (rp->unit_type != MPI_DATATYPE_NULL) MPI_Type_free(&rp->unit_type);
}

attn_sdpa_options attn__ring_call_options(const ring_problem *rp, int64_t q_start, int64_t k_start,
                                    void *workspace, size_t workspace_size) {
    attn_sdpa_options o = rp->sdpa;
    o.query_start = q_start;
    o.key_start = k_start;
    o.total_len_q = rp->len_q;
    o.total_len_kv = rp->len_kv;
    o.workspace = workspace;
    o.workspace_size = workspace_size;
    return o;
}

bool attn__ring_runs_interact(const ring_problem *rp, int64_t qs, int64_t lq, int64_t ks, int64_t lk) {
    const attn_sdpa_options *o = &rp->sdpa;
    if (lq <= 0 || lk <= 0) return false;
    /* Query g's diagonal is key g + offset (global positions); the keys a
     * run of queries may see form one interval [lo, hi] around the
     * diagonals of its first and last query. */
    const int64_t offset = o->align == ATTN_ALIGN_LOWER_RIGHT ? rp->len_kv - rp->len_q : 0;
    const int64_t first = qs + offset, last = qs + lq - 1 + offset;
    int64_t lo = INT64_MIN, hi = rp->max_key_length - 1;
    if (o->causal && last < hi) hi = last;
    if (o->window) { /* saturated: window sides may be anything up to INT64_MAX */
        if (o->window_left >= 0) lo = sat_sub(first, o->window_left);
        if (o->window_right >= 0 && sat_add(last, o->window_right) < hi) hi = last + o->window_right;
    }
    if (lo < ks) lo = ks;
    if (hi > ks + lk - 1) hi = ks + lk - 1;
    return lo <= hi;
}

/* -------------------------------------------------------- blocks, exchange */

void attn__ring_pack_block(const ring_problem *rp, const attn_tensor *k, const attn_tensor *v,
                     float *block) {
    const int64_t rows = k->shape[1], width = rp->dim_v + rp->dim;
    for (int64_t b = 0; b < rp->batch; b++)
        for (int64_t s = 0; s < rows; s++)
            for (int64_t g = 0; g < rp->heads_kv; g++) {
                float *row = block + ((b * rows + s) * rp->heads_kv + g) * width;
                memcpy(row, problem_row(v, b, s, g), sizeof(float) * (size_t)rp->dim_v);
                memcpy(row + rp->dim_v, problem_row(k, b, s, g), sizeof(float) * (size_t)rp->dim);
            }
}

attn_tensor attn__ring_block_view(const ring_problem *rp, float *block, int64_t rows, int64_t off,
                            int64_t len, char which) {
    const int64_t width = rp->dim_v + rp->dim;
    float *base = block + off * rp->unit;
    attn_tensor t = {base, ATTN_F32,
                     {rp->batch, len, rp->heads_kv, width},
                     {rows * rp->unit, rp->unit, width, 1}};
    if (which == 'k') {
        t.data = base + rp->dim_v;
        t.shape[3] = rp->dim;
    } else if (which == 'v') {
        t.shape[3] = rp->dim_v;
    }
    return t;
}

void attn__ring_post_shift(const ring_problem *rp, ring_requests *r, const float *send,
                     int64_t send_rows, float *recv, int64_t recv_rows, int tag,
                     attn_ring_stats *stats) {
    MPI_Irecv(recv, (int)(rp->batch * recv_rows), rp->unit_type, rp->left, tag, rp->comm,
              &r->req[r->count++]);
    MPI_Isend(send, (int)(rp->batch * send_rows), rp->unit_type, rp->right, tag, rp->comm,
              &r->req[r->count++]);
    if (stats) stats->bytes_sent += rp->batch * send_rows * rp->unit * (int64_t)sizeof(float);
}

void attn__ring_progress(ring_requests *r, attn_ring_stats *stats) {
    int done;
    if (r->count == 0) return;
    double start = MPI_Wtime();
    MPI_Testall(r->count, r->req, &done, MPI_STATUSES_IGNORE);
    stats->progress_s += MPI_Wtime() - start;
}

void attn__ring_wait(ring_requests *r, attn_ring_stats *stats) {
    if (r->count == 0) return;
    double start = MPI_Wtime();
    MPI_Waitall(r->count, r->req, MPI_STATUSES_IGNORE);
    if (stats) stats->wait_s += MPI_Wtime() - start;
    r->count = 0;
}

double attn__ring_cpu_seconds(void) {
    struct timespec t;
    if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t) != 0) return 0.0;
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

attn_status attn__ring_scratch_reserve(ring_scratch *s, size_t bytes) {
    if (bytes <= s->size) return ATTN_OK;
    free(s->data);
    s->data = malloc(bytes);
    s->size = s->data ? bytes : 0;
    if (!s->data) return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "cannot allocate %zu bytes of workspace", bytes);
    return ATTN_OK;
}

void attn__ring_time_rotation(const ring_problem *rp, float *a, float *b, attn_ring_stats *stats) {
    stats->comm_alone_s = 0.0;
    if (rp->ranks == 1) return;
    MPI_Barrier(rp->comm);
    double start = MPI_Wtime();
    for (int t = 0; t + 1 < rp->ranks; t++) {
        ring_requests r = {0};
        attn__ring_post_shift(rp, &r, a, rp->kv_shards[ring_owner_at(rp, t)].rows, b,
                        rp->kv_shards[ring_owner_at(rp, t + 1)].rows, 0, NULL);
        attn__ring_wait(&r, NULL);
        float *swap = a;
        a = b;
        b = swap;
    }
    stats->comm_alone_s = MPI_Wtime() - start;
}

attn_status attn__ring_step(const ring_problem *rp, const attn_ring_shard *ks, ring_piece_fn fn, void *ctx,
                            ring_requests *reqs, attn_ring_stats *stats) {
    const attn_ring_shard *qs = &rp->q_shard;
    for (int a = 0; a < qs->runs; a++)
        for (int c = 0; c < ks->runs; c++) {
            if (qs->len[a] == 0 || ks->len[c] == 0) continue;
            if (!attn__ring_runs_interact(rp, qs->start[a], qs->len[a], ks->start[c], ks->len[c])) {
                stats->pairs_skipped++;
                continue;
            }
            stats->pairs_computed++;
            ring_piece piece = {0, 0, 0, c ? ks->len[0] : 0, ks->start[c], ks->len[c]};
            const int64_t q_off = a ? qs->len[0] : 0;
            for (int64_t p0 = 0; p0 < qs->len[a]; p0 += rp->piece_rows) {
                piece.q_row = q_off + p0;
                piece.q_start = qs->start[a] + p0;
                piece.n = qs->len[a] - p0 < rp->piece_rows ? qs->len[a] - p0 : rp->piece_rows;
                const double start = MPI_Wtime(), cpu_start = attn__ring_cpu_seconds();
                attn_status st = fn(ctx, &piece);
                stats->busy_s += MPI_Wtime() - start;
                stats->busy_cpu_s += attn__ring_cpu_seconds() - cpu_start;
                if (st) return st;
                if (reqs) attn__ring_progress(reqs, stats);
            }
        }
    return ATTN_OK;
}
