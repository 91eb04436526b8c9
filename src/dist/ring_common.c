/*
 * ring_common.c — shards, agreement on errors, validation of a ring call and
 * the machinery both rings use (block packing and views, the nonblocking
 * exchange, progress, timers).
 *
 * Shape legend: q [B, Lr, Hq, D]  k [B, Sr, Hkv, D]  v [B, Sr, Hkv, Dv] local;
 *   block [B, rows, Hkv, Dv + D], per (batch, position, kv head) [v | k].
 */
#include "dist/ring_internal.h"

#include "base/options.h"
#include "base/visibility.h"

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

/* ------------------------------------------------------- waiting, bounded */

/* Tests the requests until every one is complete or the deadline (an
 * MPI_Wtime; INFINITY: none) passes.  Returns -1 when all completed, else
 * the index of the first one still pending.  It spins for the first
 * millisecond, as MPI_Waitall would (a neighbour a moment behind is served
 * at once), then sleeps 100 us between tests, leaving the core to a rank
 * that computes (ranks often share cores); over shared memory a large
 * message is one copy inside a single test (Open MPI's CMA), so the sleeps
 * do not slow a transfer under way. */
static int poll_until(MPI_Request *req, int n, double deadline) {
    const double start = MPI_Wtime();
    for (;;) {
        int done;
        MPI_Testall(n, req, &done, MPI_STATUSES_IGNORE);
        if (done) return -1;
        const double now = MPI_Wtime();
        if (now >= deadline) break;
        if (now - start > 1e-3) nanosleep(&(struct timespec){0, 100000}, NULL);
    }
    for (int i = 0; i < n; i++) {
        int done;
        MPI_Test(&req[i], &done, MPI_STATUS_IGNORE);
        if (!done) return i;
    }
    return -1; /* the last ones completed at the deadline */
}

/* Gives up on requests that will not complete: receives are cancelled (so
 * a late message is not written into a buffer the caller reuses), and every
 * request is freed.  A send cannot be cancelled in Open MPI: its buffer
 * must outlive it (the callers leak the ring's blocks after a timeout). */
static void abandon(MPI_Request *req, const bool *sending, int n) {
    for (int i = 0; i < n; i++) {
        if (req[i] == MPI_REQUEST_NULL) continue;
        if (!sending[i]) MPI_Cancel(&req[i]);
        MPI_Request_free(&req[i]);
    }
}

static double deadline_after(double timeout) { return isinf(timeout) ? INFINITY : MPI_Wtime() + timeout; }

/* ------------------------------------------------------------- agreements */

/* What rank 0 decided, sent to every rank. */
typedef struct ring_verdict {
    int32_t status;     /* attn_status                                   */
    int64_t value[2];   /* what the decision computed (L and S)          */
    char message[1152]; /* room for a rank's message and the prefix      */
} ring_verdict;

/* How rank 0 reaches a verdict: take() sees every rank's record in rank
 * order (rank 0's first), then decide() fills the verdict. */
typedef struct ring_decision {
    void (*take)(void *ctx, int rank, const void *record);
    void (*decide)(void *ctx, int ranks, ring_verdict *verdict);
    void *ctx;
} ring_decision;

/* Rank 0: the verdict to rank r (small: it leaves at once), the wait
 * bounded so that one stopped rank cannot hold the others' word. */
static attn_status send_verdict(MPI_Comm comm, const ring_verdict *verdict, int r, double timeout) {
    MPI_Request req;
    const bool sending = true;
    MPI_Isend(verdict, (int)sizeof *verdict, MPI_BYTE, r, RING_TAG_VERDICT, comm, &req);
    if (poll_until(&req, 1, deadline_after(timeout)) < 0) return ATTN_OK;
    abandon(&req, &sending, 1);
    int ranks;
    MPI_Comm_size(comm, &ranks);
    return attn__fail(ATTN_ERR_TIMEOUT, "rank 0 of %d: rank %d took no answer for %g s (stopped, or much slower?)",
                      ranks, r, timeout);
}

/* Every rank sends rank 0 a record of `bytes` bytes; rank 0 decides and
 * sends every rank the verdict.  The pattern behind every agreement: a
 * status and a message, the problem's description, a caller's values.
 * Point to point rather than collectives, so that a rank that does not
 * answer is known by name: rank 0 gives up on it after timeout seconds and
 * tells the others which rank it missed; the others give up on rank 0
 * itself after 1.5 times the timeout (so that rank 0's word arrives first
 * when another rank is the one missing).  scratch: `bytes` bytes rank 0
 * receives into.  Returns the verdict's status on every rank, with its
 * message as the last error. */
static attn_status gather_decide(MPI_Comm comm, double timeout, const void *mine, void *scratch, size_t bytes,
                                 const ring_decision *d, ring_verdict *verdict) {
    int rank, ranks;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &ranks);
    memset(verdict, 0, sizeof *verdict);
    if (rank != 0) {
        MPI_Request req[2];
        const bool sending[2] = {true, false};
        MPI_Isend(mine, (int)bytes, MPI_BYTE, 0, RING_TAG_RECORD, comm, &req[0]);
        MPI_Irecv(verdict, (int)sizeof *verdict, MPI_BYTE, 0, RING_TAG_VERDICT, comm, &req[1]);
        if (poll_until(req, 2, deadline_after(1.5 * timeout)) >= 0) {
            abandon(req, sending, 2);
            return attn__fail(ATTN_ERR_TIMEOUT,
                              "rank %d of %d: no answer from rank 0 for %g s (it gathers every agreement of the "
                              "ranks: stopped, or much slower?)",
                              rank, ranks, 1.5 * timeout);
        }
        return verdict->status ? attn__fail((attn_status)verdict->status, "%s", verdict->message) : ATTN_OK;
    }

    /* Records in rank order, each wait up to the common deadline.  Once a
     * rank is missing the verdict is fixed: the ranks after it that have
     * answered already (their records wait here) get it at once, so that
     * they too hear which rank is missing. */
    const double deadline = deadline_after(timeout);
    d->take(d->ctx, 0, mine);
    int missing = -1;
    attn_status st = ATTN_OK;
    for (int r = 1; r < ranks; r++) {
        MPI_Request req;
        const bool sending = false;
        MPI_Irecv(scratch, (int)bytes, MPI_BYTE, r, RING_TAG_RECORD, comm, &req);
        if (poll_until(&req, 1, missing < 0 ? deadline : -INFINITY) >= 0) {
            abandon(&req, &sending, 1);
            if (missing >= 0) continue;
            missing = r;
            verdict->status = ATTN_ERR_TIMEOUT;
            snprintf(verdict->message, sizeof verdict->message,
                     "rank 0 of %d: no answer from rank %d for %g s (stopped, or much slower?)", ranks, missing,
                     timeout);
        } else if (missing < 0) {
            d->take(d->ctx, r, scratch);
        } else if (!st) {
            st = send_verdict(comm, verdict, r, timeout);
        }
    }
    if (missing < 0) d->decide(d->ctx, ranks, verdict);
    for (int r = 1; r < (missing < 0 ? ranks : missing) && !st; r++) st = send_verdict(comm, verdict, r, timeout);
    if (st) return st;
    return verdict->status ? attn__fail((attn_status)verdict->status, "%s", verdict->message) : ATTN_OK;
}

/* attn_ring_agree: a record is a status and a message; the verdict is the
 * lowest failing rank's, with the count of the others. */
typedef struct status_record {
    int32_t status;
    char message[1020];
} status_record;

typedef struct status_decision {
    status_record first;
    int first_rank, failed;
} status_decision;

static void take_status(void *ctx, int rank, const void *record) {
    status_decision *s = ctx;
    const status_record *r = record;
    if (r->status == ATTN_OK) return;
    if (s->failed++ == 0) {
        s->first = *r;
        s->first_rank = rank;
    }
}

static void decide_status(void *ctx, int ranks, ring_verdict *verdict) {
    const status_decision *s = ctx;
    verdict->status = s->failed ? s->first.status : ATTN_OK;
    char *m = verdict->message;
    const size_t cap = sizeof verdict->message;
    if (!s->failed) return;
    if (ranks == 1) snprintf(m, cap, "%s", s->first.message);
    else if (s->failed == 1) snprintf(m, cap, "rank %d of %d: %s", s->first_rank, ranks, s->first.message);
    else snprintf(m, cap, "rank %d of %d (and %d more): %s", s->first_rank, ranks, s->failed - 1, s->first.message);
}

attn_status attn__ring_agree_within(MPI_Comm comm, attn_status mine, const char *message, double timeout) {
    status_record record = {mine, ""}, scratch;
    if (mine != ATTN_OK) snprintf(record.message, sizeof record.message, "%s", message ? message : attn_last_error());
    status_decision s = {.failed = 0};
    const ring_decision d = {take_status, decide_status, &s};
    ring_verdict verdict;
    return gather_decide(comm, timeout, &record, &scratch, sizeof record, &d, &verdict);
}

attn_status attn_ring_agree(MPI_Comm comm, attn_status mine, const char *message) {
    return attn__ring_agree_within(comm, mine, message, INFINITY);
}

/* How a compared value reads in a message: AS_NAME with the names of
 * values 0, 1, ... (NULL-terminated; others as numbers). */
typedef enum value_format { AS_INT, AS_HASH, AS_FLOAT_BITS, AS_NAME } value_format;

static const char *format_value(value_format format, const char *const *names, int64_t value, char *buf,
                                size_t cap) {
    int64_t known = 0;
    while (format == AS_NAME && names[known]) known++;
    if (format == AS_HASH) {
        snprintf(buf, cap, "%016llx", (unsigned long long)value);
    } else if (format == AS_FLOAT_BITS) {
        const uint32_t bits = (uint32_t)value;
        float x;
        memcpy(&x, &bits, sizeof x);
        snprintf(buf, cap, "%g", (double)x);
    } else if (value >= 0 && value < known) {
        snprintf(buf, cap, "%s", names[value]);
    } else {
        snprintf(buf, cap, "%lld", (long long)value);
    }
    return buf;
}

/* Values compared across ranks, one record per rank: the first field (in
 * the record's order) where some rank differs from rank 0, and the lowest
 * such rank. */
typedef struct difference {
    int field, rank; /* field = -1: none yet */
    int64_t ours, theirs;
} difference;

static void find_difference(difference *d, int rank, const int64_t *ours, const int64_t *theirs, int count) {
    for (int f = 0; f < count && (d->field < 0 || f < d->field); f++)
        if (theirs[f] != ours[f]) {
            *d = (difference){f, rank, ours[f], theirs[f]};
            return;
        }
}

static void report_difference(const difference *d, const char *name, value_format format, const char *const *names,
                              attn_status status, ring_verdict *verdict) {
    char a[64], b[64];
    verdict->status = status;
    snprintf(verdict->message, sizeof verdict->message, "ranks disagree on %s: rank 0 has %s, rank %d has %s%s",
             name, format_value(format, names, d->ours, a, sizeof a), d->rank,
             format_value(format, names, d->theirs, b, sizeof b),
             status == ATTN_ERR_SHAPE ? " (only the position axes are sharded: every rank holds every batch, "
                                        "head and width)"
                                      : "");
}

/* attn_ring_agree_values: a record is the count, then the values. */
enum { VALUES_RECORD = 1 + ATTN_RING_MAX_VALUES };

typedef struct values_decision {
    const attn_ring_value *names; /* rank 0's */
    int64_t ours[VALUES_RECORD];
    difference d;
} values_decision;

static void take_values(void *ctx, int rank, const void *record) {
    values_decision *v = ctx;
    if (rank == 0) memcpy(v->ours, record, sizeof v->ours);
    else find_difference(&v->d, rank, v->ours, record, 1 + (int)v->ours[0]);
}

static void decide_values(void *ctx, int ranks, ring_verdict *verdict) {
    (void)ranks;
    const values_decision *v = ctx;
    if (v->d.field >= 0)
        report_difference(&v->d, v->d.field == 0 ? "the number of values" : v->names[v->d.field - 1].name, AS_INT,
                          NULL, ATTN_ERR_INVALID_ARGUMENT, verdict);
}

attn_status attn_ring_agree_values(MPI_Comm comm, const attn_ring_value *values, int count) {
    attn_status st = ATTN_OK;
    if (count < 0 || count > ATTN_RING_MAX_VALUES || (count > 0 && !values))
        st = attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_ring_agree_values: %d values (at most %d, not NULL)",
                        count, ATTN_RING_MAX_VALUES);
    for (int i = 0; st == ATTN_OK && i < count; i++)
        if (!values[i].name) st = attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_ring_agree_values: value %d has no name", i);
    if ((st = attn_ring_agree(comm, st, NULL))) return st;
    int64_t mine[VALUES_RECORD] = {count}, scratch[VALUES_RECORD];
    for (int i = 0; i < count; i++) mine[1 + i] = values[i].value;
    values_decision v = {.names = values, .d = {.field = -1}};
    const ring_decision d = {take_values, decide_values, &v};
    ring_verdict verdict;
    return gather_decide(comm, INFINITY, mine, scratch, sizeof mine, &d, &verdict);
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
    /* Blocks are packed and merged as floats. */
    if (t->dtype != ATTN_F32)
        return attn__fail(ATTN_ERR_UNSUPPORTED, "%s holds %s; ring attention computes on float32 tensors",
                          name, attn_dtype_name(t->dtype));
    return ATTN_OK;
}

/* The names of the options the ring treats as `ranks` ("query_start,
 * key_start and total_len_q"), and whether any of them is set in s. */
static bool options_set(const attn_sdpa_options *s, attn_option_ranks ranks, char *names, size_t cap) {
    int count = 0, listed = 0;
    bool set = false;
    for (int i = 0; attn_sdpa_option(i); i++) count += attn_sdpa_option(i)->ranks == ranks;
    names[0] = 0;
    for (int i = 0; attn_sdpa_option(i); i++) {
        const attn_sdpa_option_info *row = attn_sdpa_option(i);
        if (row->ranks != ranks) continue;
        set = set || option_is_set(s, row);
        const size_t used = strlen(names);
        snprintf(names + used, cap - used, "%s%s", listed == 0 ? "" : listed + 1 == count ? " and " : ", ", row->name);
        listed++;
    }
    return set;
}

/* The first option of the kind the ring treats as `ranks` set in s, or NULL. */
static const attn_sdpa_option_info *first_set(const attn_sdpa_options *s, attn_option_ranks ranks) {
    for (int i = 0; attn_sdpa_option(i); i++)
        if (attn_sdpa_option(i)->ranks == ranks && option_is_set(s, attn_sdpa_option(i))) return attn_sdpa_option(i);
    return NULL;
}

/* What the ring refuses of the caller's sdpa options, by the table's
 * ranks column (attn_option_ranks): positions it places itself, scratch it
 * keeps itself, options it does not support, and tables without a shape. */
static attn_status check_sdpa_options(const attn_sdpa_options *s) {
    char names[256];
    if (options_set(s, ATTN_RANKS_PLACED, names, sizeof names))
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT,
                          "ring options: sdpa.%s must be 0 (the ring places every block at its global positions)",
                          names);
    for (int i = 0; attn_sdpa_option(i); i++) {
        const attn_sdpa_option_info *row = attn_sdpa_option(i);
        if (row->kind != ATTN_OPTION_BOOL_TABLE && row->kind != ATTN_OPTION_FLOAT_TABLE) continue;
        const int64_t *shape = option_field(s, row, 1);
        if (option_pointer(s, row, 0) && (shape[0] < 1 || shape[1] < 1 || shape[2] < 1 || shape[3] < 1))
            return attn__fail(ATTN_ERR_SHAPE,
                              "%s_shape is [%lld, %lld, %lld, %lld]; every dimension must be >= 1 (the whole "
                              "table's shape [B|1, Hq|1, L|1, S|1])",
                              row->name, (long long)shape[0], (long long)shape[1], (long long)shape[2],
                              (long long)shape[3]);
    }
    const attn_sdpa_option_info *row = first_set(s, ATTN_RANKS_KEPT);
    if (row)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "ring options: sdpa.%s must be NULL (the ring keeps its own)",
                          row->name);
    /* The ring merges its blocks' partial results through their lse: a sink
     * would join every block's denominator, once per block; soft-capping
     * and ALiBi are not tested across blocks yet (the refused options are
     * the score stage's, hence the page named). */
    if ((row = first_set(s, ATTN_RANKS_REFUSED)))
        return attn__fail(ATTN_ERR_UNSUPPORTED,
                          "ring attention does not support sdpa.%s yet (docs/logits.md); run attn_sdpa_forward "
                          "on one process instead",
                          row->name);
    return ATTN_OK;
}

static attn_status check_local(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                               const attn_tensor *out, const attn_ring_options *o,
                               const attn_sdpa_options *s) {
    attn_status st;
    if ((st = check_sdpa_options(s))) return st;
    if (o->layout != ATTN_RING_CONTIGUOUS && o->layout != ATTN_RING_ZIGZAG)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "layout must be contiguous or zigzag, got %d",
                         (int)o->layout);
    if (o->len_q < 0 || o->len_kv < 0 || o->piece_rows < 0)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT,
                         "ring options: len_q, len_kv and piece_rows must be >= 0");
    if (isnan(o->timeout_seconds))
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT,
                          "ring options: timeout_seconds is NaN (0 = the default, < 0 = no limit)");
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

/* What every rank describes of its call: everything that determines the
 * result, which must be the same on every rank (F_COMPARED fields, in the
 * order a disagreement is reported), then what differs by design (its
 * rows).  The sdpa options every rank must agree on are the table's
 * (attn_sdpa_option, ranks ATTN_RANKS_AGREE), in its order, from
 * F_OPTIONS on, each as its kind records it (option_values), as they act
 * (options_as_acting: the scale resolved, the window sides only with a
 * window, the alignment only where a rule uses it); the lengths L and S
 * are resolved by rank 0 (0 = the sum of the rows). */
enum { RING_OPTION_VALUES = 48 }; /* room for the options' values; the rest stay 0 */
enum {
    F_BATCH, F_HEADS_Q, F_DIM, F_BATCH_K, F_HEADS_KV, F_DIM_K, F_DIM_V,
    F_OPTIONS,
    F_LAYOUT = F_OPTIONS + RING_OPTION_VALUES, F_LEN_Q, F_LEN_KV,
    F_TIME_COMM_ALONE, F_GRADIENTS,
    F_COMPARED,
    F_ROWS_Q = F_COMPARED, F_ROWS_KV,
    F_COUNT
};

static const char *const ring_layouts[] = {"contiguous", "zigzag", NULL};

typedef struct problem_field {
    const char *name;
    value_format format;
    const char *const *names; /* AS_NAME's */
    attn_status status;
} problem_field;

static const problem_field problem_fields[F_COMPARED] = {
    [F_BATCH] = {"batch B of q", AS_INT, NULL, ATTN_ERR_SHAPE},
    [F_HEADS_Q] = {"query heads Hq", AS_INT, NULL, ATTN_ERR_SHAPE},
    [F_DIM] = {"query width D", AS_INT, NULL, ATTN_ERR_SHAPE},
    [F_BATCH_K] = {"batch of k", AS_INT, NULL, ATTN_ERR_SHAPE},
    [F_HEADS_KV] = {"key/value heads Hkv", AS_INT, NULL, ATTN_ERR_SHAPE},
    [F_DIM_K] = {"key width", AS_INT, NULL, ATTN_ERR_SHAPE},
    [F_DIM_V] = {"value width Dv", AS_INT, NULL, ATTN_ERR_SHAPE},
    [F_LAYOUT] = {"layout", AS_NAME, ring_layouts, ATTN_ERR_INVALID_ARGUMENT},
    [F_LEN_Q] = {"len_q (L)", AS_INT, NULL, ATTN_ERR_INVALID_ARGUMENT},
    [F_LEN_KV] = {"len_kv (S)", AS_INT, NULL, ATTN_ERR_INVALID_ARGUMENT},
    [F_TIME_COMM_ALONE] = {"time_comm_alone", AS_INT, NULL, ATTN_ERR_INVALID_ARGUMENT},
    [F_GRADIENTS] = {"the gradients asked for (dq 1 + dk 2 + dv 4)", AS_INT, NULL, ATTN_ERR_INVALID_ARGUMENT},
};

/* How many values an option records, by its kind: one for a number, the
 * window's on and sides, an array's presence and a hash of it, a table's
 * presence, shape and (with one query row for all ranks) a hash. */
static int option_values(const attn_sdpa_option_info *row) {
    if (row->ranks != ATTN_RANKS_AGREE) return 0;
    switch (row->kind) {
    case ATTN_OPTION_WINDOW: return 3;
    case ATTN_OPTION_PER_BATCH:
    case ATTN_OPTION_PER_HEAD: return 2;
    case ATTN_OPTION_BOOL_TABLE:
    case ATTN_OPTION_FLOAT_TABLE: return 6;
    case ATTN_OPTION_BUFFER:
    case ATTN_OPTION_CALLBACK: return 0; /* the caller's own memory: nothing to compare */
    default: return 1;
    }
}

static int options_values_total(void) {
    int n = 0;
    for (int i = 0; attn_sdpa_option(i); i++) n += option_values(attn_sdpa_option(i));
    return n;
}

/* Compared field f: its description, the name of an option's value
 * written into buf ("window left", "the mask's key dimension"). */
static problem_field field_of(int f, char *buf, size_t cap) {
    if (f < F_OPTIONS || f >= F_OPTIONS + RING_OPTION_VALUES) return problem_fields[f];
    int n = f - F_OPTIONS;
    const attn_sdpa_option_info *row = NULL;
    for (int i = 0; (row = attn_sdpa_option(i)) && n >= option_values(row); i++) n -= option_values(row);
    problem_field d = {buf, AS_INT, NULL, ATTN_ERR_INVALID_ARGUMENT};
    if (!row) {
        snprintf(buf, cap, "option value %d", f - F_OPTIONS);
        return d;
    }
    char spaced[64];
    snprintf(spaced, sizeof spaced, "%s", row->name);
    for (char *c = spaced; *c; c++)
        if (*c == '_') *c = ' ';
    static const char *const dims[4] = {"batch", "head", "query", "key"};
    switch (row->kind) {
    case ATTN_OPTION_WINDOW: snprintf(buf, cap, "%s%s", spaced, n == 0 ? "" : n == 1 ? " left" : " right"); break;
    case ATTN_OPTION_PER_BATCH:
    case ATTN_OPTION_PER_HEAD:
        snprintf(buf, cap, n == 0 ? "%s given" : "%s (a hash of the values)", spaced);
        d.format = n == 0 ? AS_INT : AS_HASH;
        break;
    case ATTN_OPTION_BOOL_TABLE:
    case ATTN_OPTION_FLOAT_TABLE:
        if (n == 0) snprintf(buf, cap, "%s given", spaced);
        else if (n < 5) snprintf(buf, cap, "the %s's %s dimension", spaced, dims[n - 1]);
        else snprintf(buf, cap, "the %s (one query row for all: a hash of its values)", spaced);
        d.format = n == 5 ? AS_HASH : AS_INT;
        break;
    default:
        snprintf(buf, cap, "%s", spaced);
        d.format = row->kind == ATTN_OPTION_CHOICE ? AS_NAME : row->kind == ATTN_OPTION_FLOAT ? AS_FLOAT_BITS : AS_INT;
        d.names = row->choices;
        break;
    }
    return d;
}

/* FNV-1a: a fingerprint of contents every rank must hold identically. */
static int64_t hash_bytes(const void *data, size_t n) {
    const unsigned char *p = data;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return (int64_t)h;
}

/* An option's values (option_values of them) at v.  A table with one query
 * row is the same on every rank, so its values are compared too; one
 * sharded by query rows differs by design. */
static void record_option(const attn_sdpa_options *s, const attn_sdpa_option_info *row, int64_t batch,
                          int64_t heads_q, int64_t *v) {
    const void *data = option_pointer(s, row, 0);
    switch (row->kind) {
    case ATTN_OPTION_SWITCH: v[0] = option_int(s, row, 0) != 0; break;
    case ATTN_OPTION_CHOICE:
    case ATTN_OPTION_INT: v[0] = option_int(s, row, 0); break;
    case ATTN_OPTION_FLOAT: {
        uint32_t bits;
        memcpy(&bits, option_field(s, row, 0), sizeof bits);
        v[0] = bits;
        break;
    }
    case ATTN_OPTION_POSITION: v[0] = option_i64(s, row, 0); break;
    case ATTN_OPTION_WINDOW:
        v[0] = option_int(s, row, 0) != 0;
        v[1] = option_i64(s, row, 1);
        v[2] = option_i64(s, row, 2);
        break;
    case ATTN_OPTION_PER_BATCH:
    case ATTN_OPTION_PER_HEAD:
        v[0] = data != NULL;
        if (data)
            v[1] = row->kind == ATTN_OPTION_PER_BATCH ? hash_bytes(data, sizeof(int64_t) * (size_t)batch)
                                                      : hash_bytes(data, sizeof(float) * (size_t)heads_q);
        break;
    case ATTN_OPTION_BOOL_TABLE:
    case ATTN_OPTION_FLOAT_TABLE: {
        if (!data) break;
        const int64_t *shape = option_field(s, row, 1);
        v[0] = 1;
        memcpy(v + 1, shape, sizeof(int64_t) * 4);
        const size_t size = row->kind == ATTN_OPTION_FLOAT_TABLE ? sizeof(float) : 1;
        if (shape[2] == 1) v[5] = hash_bytes(data, size * (size_t)(shape[0] * shape[1] * shape[3]));
        break;
    }
    default: break;
    }
}

static void describe(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                     const attn_ring_options *o, const attn_sdpa_options *s, int extra_flags, int64_t *d) {
    memset(d, 0, sizeof(int64_t) * F_COUNT);
    d[F_BATCH] = q->shape[0];
    d[F_HEADS_Q] = q->shape[2];
    d[F_DIM] = q->shape[3];
    d[F_BATCH_K] = k->shape[0];
    d[F_HEADS_KV] = k->shape[2];
    d[F_DIM_K] = k->shape[3];
    d[F_DIM_V] = v->shape[3];
    attn_sdpa_options acting = *s;
    options_as_acting(&acting, q->shape[3]);
    int64_t *values = d + F_OPTIONS;
    for (int i = 0; attn_sdpa_option(i); i++) {
        const attn_sdpa_option_info *row = attn_sdpa_option(i);
        if (!option_values(row)) continue;
        record_option(&acting, row, q->shape[0], q->shape[2], values);
        values += option_values(row);
    }
    d[F_LAYOUT] = o->layout;
    d[F_LEN_Q] = o->len_q;
    d[F_LEN_KV] = o->len_kv;
    d[F_TIME_COMM_ALONE] = o->time_comm_alone != 0;
    d[F_GRADIENTS] = extra_flags;
    d[F_ROWS_Q] = q->shape[1];
    d[F_ROWS_KV] = k->shape[1];
}

/* Rank 0's table of every rank's description. */
static void take_description(void *ctx, int rank, const void *record) {
    memcpy((int64_t *)ctx + (size_t)rank * F_COUNT, record, sizeof(int64_t) * F_COUNT);
}

/* Rank 0's decision on the ranks' descriptions: the first field where a
 * rank differs from rank 0, then whether the shapes fit together and each
 * rank holds the rows the layout gives it.  verdict->value: L and S. */
static void decide_problem(void *ctx, int ranks, ring_verdict *verdict) {
    int64_t *all = ctx;
    int64_t sum_q = 0, sum_kv = 0;
    for (int i = 0; i < ranks; i++) {
        sum_q += all[(size_t)i * F_COUNT + F_ROWS_Q];
        sum_kv += all[(size_t)i * F_COUNT + F_ROWS_KV];
    }
    for (int i = 0; i < ranks; i++) {
        int64_t *ri = all + (size_t)i * F_COUNT;
        if (ri[F_LEN_Q] == 0) ri[F_LEN_Q] = sum_q;
        if (ri[F_LEN_KV] == 0) ri[F_LEN_KV] = sum_kv;
    }
    difference d = {.field = -1};
    for (int i = 1; i < ranks; i++) find_difference(&d, i, all, all + (size_t)i * F_COUNT, F_COMPARED);
    if (d.field >= 0) {
        char name[128];
        const problem_field f = field_of(d.field, name, sizeof name);
        report_difference(&d, f.name, f.format, f.names, f.status, verdict);
        return;
    }

    const int64_t *r0 = all;
    const int64_t L = r0[F_LEN_Q], S = r0[F_LEN_KV];
    const attn_ring_layout layout = (attn_ring_layout)r0[F_LAYOUT];
    attn_status *st = (attn_status *)&verdict->status;
    char *msg = verdict->message;
    const size_t cap = sizeof verdict->message;
    if (r0[F_BATCH_K] != r0[F_BATCH]) {
        *st = ATTN_ERR_SHAPE;
        snprintf(msg, cap, "k has batch %lld but q has batch %lld", (long long)r0[F_BATCH_K], (long long)r0[F_BATCH]);
        return;
    }
    if (r0[F_HEADS_Q] % r0[F_HEADS_KV] != 0) {
        *st = ATTN_ERR_SHAPE;
        snprintf(msg, cap, "q has %lld heads, not a multiple of k's %lld heads (grouped-query attention needs "
                 "Hq = G * Hkv)", (long long)r0[F_HEADS_Q], (long long)r0[F_HEADS_KV]);
        return;
    }
    if (L < 1 || S < 1) {
        *st = ATTN_ERR_SHAPE;
        snprintf(msg, cap, "the ranks hold %lld query and %lld key positions in all; ring attention needs at "
                 "least one of each", (long long)L, (long long)S);
        return;
    }
    const int64_t full[4] = {r0[F_BATCH], r0[F_HEADS_Q], L, S};
    static const char *const dims[4] = {"batch", "heads", "query positions", "key positions"};
    const int64_t *f = r0 + F_OPTIONS; /* each option's values, as record_option put them */
    for (int t = 0; attn_sdpa_option(t); f += option_values(attn_sdpa_option(t)), t++) {
        const attn_sdpa_option_info *row = attn_sdpa_option(t);
        if (!option_values(row) || (row->kind != ATTN_OPTION_BOOL_TABLE && row->kind != ATTN_OPTION_FLOAT_TABLE))
            continue;
        for (int i = 0; f[0] && i < 4; i++)
            if (f[1 + i] != 1 && f[1 + i] != full[i]) {
                *st = ATTN_ERR_SHAPE;
                snprintf(msg, cap, "%s: %s dimension is %lld, must be 1 or %lld (the whole table's shape "
                         "[B, Hq, L, S], size-1 dimensions broadcast)", row->name, dims[i],
                         (long long)f[1 + i], (long long)full[i]);
                return;
            }
    }
    int64_t max_kv_rows = 0;
    for (int i = 0; i < ranks; i++) {
        attn_ring_shard qs, ks;
        attn_ring_shard_of(L, ranks, i, layout, &qs);
        attn_ring_shard_of(S, ranks, i, layout, &ks);
        const int64_t *ri = all + (size_t)i * F_COUNT;
        if (ri[F_ROWS_Q] != qs.rows || ri[F_ROWS_KV] != ks.rows) {
            *st = ATTN_ERR_SHAPE;
            snprintf(msg, cap, "rank %d holds %lld query and %lld key rows, but the %s layout of L = %lld and "
                     "S = %lld over %d ranks gives it %lld and %lld", i, (long long)ri[F_ROWS_Q],
                     (long long)ri[F_ROWS_KV], layout == ATTN_RING_ZIGZAG ? "zigzag" : "contiguous",
                     (long long)L, (long long)S, ranks, (long long)qs.rows, (long long)ks.rows);
            return;
        }
        if (ks.rows > max_kv_rows) max_kv_rows = ks.rows;
    }
    /* Blocks travel as B * rows units of Hkv * (Dv + D) floats: MPI counts are int. */
    const int64_t unit = r0[F_HEADS_KV] * (r0[F_DIM_V] + r0[F_DIM]);
    if (unit > INT_MAX || r0[F_BATCH] * max_kv_rows > INT_MAX) {
        *st = ATTN_ERR_UNSUPPORTED;
        snprintf(msg, cap, "a key/value block of %lld x %lld rows of %lld floats exceeds MPI's int counts; use "
                 "more ranks", (long long)r0[F_BATCH], (long long)max_kv_rows, (long long)unit);
        return;
    }
    verdict->value[0] = L;
    verdict->value[1] = S;
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
    const ring_piece pc = {qa ? rp->q_shard.len[0] : 0, rp->q_shard.start[qa], rp->q_shard.len[qa],
                           ka ? ks->len[0] : 0, ks->start[ka], ks->len[ka]};
    attn_sdpa_options o;
    attn__ring_piece_options(rp, &pc, NULL, &o);
    size_t bytes;
    return attn_sdpa_workspace_size(&qv, &kv, &vv, &o, &bytes);
}

attn_status attn__ring_problem_init(ring_problem *rp, MPI_Comm comm, const attn_tensor *q,
                              const attn_tensor *k, const attn_tensor *v,
                              const attn_tensor *out, const attn_ring_options *opt,
                              attn_status mine_status, int extra_flags) {
    attn_ring_options o = ATTN_RING_OPTIONS_INIT;
    memset(rp, 0, sizeof *rp);
    rp->unit_type = MPI_DATATYPE_NULL;
    rp->comm = comm;
    MPI_Comm_rank(comm, &rp->rank);
    MPI_Comm_size(comm, &rp->ranks);
    rp->left = (rp->rank + rp->ranks - 1) % rp->ranks;
    rp->right = (rp->rank + 1) % rp->ranks;
    rp->sdpa = (attn_sdpa_options)ATTN_SDPA_OPTIONS_INIT;

    /* Every rank's description, gathered at rank 0. */
    int64_t mine[F_COUNT] = {0};
    int64_t *all = rp->rank == 0 ? malloc(sizeof mine * (size_t)rp->ranks) : NULL;
    rp->kv_shards = calloc((size_t)rp->ranks, sizeof *rp->kv_shards);
    attn_status st = mine_status;
    if (st == ATTN_OK && ((rp->rank == 0 && !all) || !rp->kv_shards))
        st = attn__fail(ATTN_ERR_OUT_OF_MEMORY, "cannot allocate the shard table");
    static const attn_ring_options ring_defaults = ATTN_RING_OPTIONS_INIT;
    static const attn_sdpa_options sdpa_defaults = ATTN_SDPA_OPTIONS_INIT;
    if (st == ATTN_OK) st = options_copy(&o, sizeof o, &ring_defaults, opt, "attn_ring_options");
    /* Every wait from here on is bounded, this first agreement included. */
    rp->timeout_s = o.timeout_seconds > 0 ? o.timeout_seconds
                    : o.timeout_seconds < 0 ? INFINITY
                                            : ATTN_RING_DEFAULT_TIMEOUT_SECONDS;
    if (st == ATTN_OK) st = options_copy(&rp->sdpa, sizeof rp->sdpa, &sdpa_defaults, o.sdpa, "attn_sdpa_options");
    if (st == ATTN_OK) st = check_local(q, k, v, out, &o, &rp->sdpa);
    if (st == ATTN_OK && options_values_total() > RING_OPTION_VALUES)
        st = attn__fail(ATTN_ERR_INTERNAL, "ring attention records %d values of the options in room for %d: "
                        "raise RING_OPTION_VALUES (src/dist/ring_common.c)", options_values_total(),
                        RING_OPTION_VALUES);
    if (st == ATTN_OK) describe(q, k, v, &o, &rp->sdpa, extra_flags, mine);
    if ((st = attn__ring_agree_within(comm, st, NULL, rp->timeout_s))) goto fail;

    /* The same problem everywhere, or the same error everywhere. */
    ring_verdict verdict;
    int64_t scratch[F_COUNT];
    const ring_decision decision = {take_description, decide_problem, all};
    if ((st = gather_decide(comm, rp->timeout_s, mine, scratch, sizeof mine, &decision, &verdict))) goto fail;
    rp->batch = mine[F_BATCH];
    rp->heads_q = mine[F_HEADS_Q];
    rp->dim = mine[F_DIM];
    rp->heads_kv = mine[F_HEADS_KV];
    rp->dim_v = mine[F_DIM_V];
    rp->len_q = verdict.value[0];
    rp->len_kv = verdict.value[1];
    rp->unit = rp->heads_kv * (rp->dim_v + rp->dim);
    attn_ring_shard_of(rp->len_q, rp->ranks, rp->rank, o.layout, &rp->q_shard);
    for (int i = 0; i < rp->ranks; i++) {
        attn_ring_shard_of(rp->len_kv, rp->ranks, i, o.layout, &rp->kv_shards[i]);
        if (rp->kv_shards[i].rows > rp->max_kv_rows) rp->max_kv_rows = rp->kv_shards[i].rows;
    }
    if ((st = attn__ring_agree_within(comm, check_options(rp, q, k, v), NULL, rp->timeout_s))) goto fail;

    rp->piece_rows = o.piece_rows;
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

/* Copies one piece's block of a rank's rows of a table (mask or bias),
 * `local` [s0, s1, rows, s3] with rows = the rank's query rows, or 1 when
 * the table has one query row for all (shape[2] == 1), into dst
 * [s0, s1, n|1, m|1]; elements of `size` bytes.  shape: the whole table's
 * [B|1, Hq|1, L|1, S|1]; out: dst's shape. */
static void slice_table(const void *local, const int64_t shape[4], int64_t rows, size_t size,
                        const ring_piece *pc, void *dst, int64_t out[4]) {
    const bool all_rows = shape[2] == 1, all_keys = shape[3] == 1;
    const int64_t n = all_rows ? 1 : pc->n, m = all_keys ? 1 : pc->m;
    const int64_t row0 = all_rows ? 0 : pc->q_row, key0 = all_keys ? 0 : pc->k_start;
    const int64_t local_rows = all_rows ? 1 : rows;
    out[0] = shape[0];
    out[1] = shape[1];
    out[2] = n;
    out[3] = m;
    if (!dst) return;
    const unsigned char *src = local;
    unsigned char *d = dst;
    for (int64_t bh = 0; bh < shape[0] * shape[1]; bh++)
        for (int64_t i = 0; i < n; i++)
            memcpy(d + (size_t)((bh * n + i) * m) * size,
                   src + (size_t)(((bh * local_rows + row0 + i) * shape[3]) + key0) * size, (size_t)m * size);
}

attn_status attn__ring_piece_options(const ring_problem *rp, const ring_piece *pc, ring_slices *slices,
                                     attn_sdpa_options *o) {
    *o = rp->sdpa;
    o->query_start = pc->q_start;
    o->key_start = pc->k_start;
    o->total_len_q = rp->len_q;
    o->total_len_kv = rp->len_kv;
    o->workspace = NULL;
    o->workspace_size = 0;
    const int64_t rows = rp->q_shard.rows;
    attn_status st;
    if (o->mask) {
        int64_t shape[4];
        slice_table(rp->sdpa.mask, rp->sdpa.mask_shape, rows, 1, pc, NULL, shape);
        if (slices) {
            if ((st = attn__ring_scratch_reserve(&slices->mask, (size_t)(shape[0] * shape[1] * shape[2] * shape[3]))))
                return st;
            slice_table(rp->sdpa.mask, rp->sdpa.mask_shape, rows, 1, pc, slices->mask.data, shape);
            o->mask = slices->mask.data;
        }
        memcpy(o->mask_shape, shape, sizeof shape);
    }
    if (o->bias) {
        int64_t shape[4];
        slice_table(rp->sdpa.bias, rp->sdpa.bias_shape, rows, sizeof(float), pc, NULL, shape);
        if (slices) {
            if ((st = attn__ring_scratch_reserve(
                     &slices->bias, sizeof(float) * (size_t)(shape[0] * shape[1] * shape[2] * shape[3]))))
                return st;
            slice_table(rp->sdpa.bias, rp->sdpa.bias_shape, rows, sizeof(float), pc, slices->bias.data, shape);
            o->bias = slices->bias.data;
        }
        memcpy(o->bias_shape, shape, sizeof shape);
    }
    return ATTN_OK;
}

void attn__ring_slices_free(ring_slices *s) {
    free(s->mask.data);
    free(s->bias.data);
    memset(s, 0, sizeof *s);
}

bool attn__ring_runs_interact(const ring_problem *rp, int64_t qs, int64_t lq, int64_t ks, int64_t lk) {
    if (lq <= 0 || lk <= 0) return false;
    /* The piece the kernel would be given for the two runs, placed at their
     * global positions (as attn__ring_piece_options places it): the keys
     * its rows may see are base/visibility's to say. */
    sdpa_problem piece = {.batch = rp->batch, .len_q = lq, .len_kv = lk, .opt = rp->sdpa};
    piece.opt.query_start = qs;
    piece.opt.key_start = ks;
    piece.opt.total_len_q = rp->len_q;
    piece.opt.total_len_kv = rp->len_kv;
    piece.diagonal_offset = problem_diagonal_offset(&piece.opt, lq, lk);
    for (int64_t b = 0; b < rp->batch; b++) {
        int64_t begin, end;
        visibility_rows_key_range(&piece, b, 0, lq, &begin, &end);
        if (begin < end) return true;
    }
    return false;
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

void attn__ring_post(const ring_problem *rp, ring_requests *r, bool send, void *buf, int64_t count,
                     int peer, int tag, const char *what) {
    const int i = r->count++;
    r->peer[i] = peer;
    r->sending[i] = send;
    r->what[i] = what;
    if (send) MPI_Isend(buf, (int)count, rp->unit_type, peer, tag, rp->comm, &r->req[i]);
    else MPI_Irecv(buf, (int)count, rp->unit_type, peer, tag, rp->comm, &r->req[i]);
}

void attn__ring_post_shift(const ring_problem *rp, ring_requests *r, int step, const float *send, float *recv,
                           attn_ring_stats *stats) {
    if (step + 1 >= rp->ranks) return;
    const int64_t send_rows = rp->kv_shards[ring_owner_at(rp, step)].rows;
    const int64_t recv_rows = rp->kv_shards[ring_owner_at(rp, step + 1)].rows;
    attn__ring_post(rp, r, false, recv, rp->batch * recv_rows, rp->left, RING_TAG_KV, "a key/value block");
    attn__ring_post(rp, r, true, (void *)send, rp->batch * send_rows, rp->right, RING_TAG_KV, "a key/value block");
    if (stats) stats->bytes_sent += rp->batch * send_rows * rp->unit * (int64_t)sizeof(float);
}

void attn__ring_store_rows(const double *acc, int64_t batch, int64_t rows, int64_t heads, int64_t width,
                           attn_tensor *t) {
    for (int64_t b = 0; b < batch; b++)
        for (int64_t i = 0; i < rows; i++)
            for (int64_t h = 0; h < heads; h++) {
                float *t_bih = problem_row(t, b, i, h);
                const double *acc_bih = acc + ((b * rows + i) * heads + h) * width;
                for (int64_t d = 0; d < width; d++) t_bih[d] = (float)acc_bih[d];
            }
}

void attn__ring_progress(ring_requests *r, attn_ring_stats *stats) {
    int done;
    if (r->count == 0) return;
    double start = MPI_Wtime();
    MPI_Testall(r->count, r->req, &done, MPI_STATUSES_IGNORE);
    stats->progress_s += MPI_Wtime() - start;
}

void attn__ring_abandon(ring_requests *r) {
    abandon(r->req, r->sending, r->count);
    r->count = 0;
}

attn_status attn__ring_wait(const ring_problem *rp, ring_requests *r, attn_ring_stats *stats) {
    if (r->count == 0) return ATTN_OK;
    const double start = MPI_Wtime();
    const int pending = poll_until(r->req, r->count, deadline_after(rp->timeout_s));
    if (stats) stats->wait_s += MPI_Wtime() - start;
    const int count = r->count;
    r->count = 0;
    if (pending < 0) return ATTN_OK;
    abandon(r->req, r->sending, count);
    const int peer = r->peer[pending];
    if (r->sending[pending])
        return attn__fail(ATTN_ERR_TIMEOUT,
                          "rank %d of %d: rank %d took no data for %g s (sending it %s: is rank %d stopped, or "
                          "much slower?)",
                          rp->rank, rp->ranks, peer, rp->timeout_s, r->what[pending], peer);
    return attn__fail(ATTN_ERR_TIMEOUT,
                      "rank %d of %d: no data from rank %d for %g s (waiting for %s: is rank %d stopped, or much "
                      "slower?)",
                      rp->rank, rp->ranks, peer, rp->timeout_s, r->what[pending], peer);
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

attn_status attn__ring_time_rotation(const ring_problem *rp, float *a, float *b, attn_ring_stats *stats) {
    stats->comm_alone_s = 0.0;
    if (rp->ranks == 1) return ATTN_OK;
    attn_status st = attn__ring_agree_within(rp->comm, ATTN_OK, NULL, rp->timeout_s); /* start together */
    double start = MPI_Wtime();
    for (int t = 0; st == ATTN_OK && t + 1 < rp->ranks; t++) {
        ring_requests r = {0};
        attn__ring_post_shift(rp, &r, t, a, b, NULL);
        st = attn__ring_wait(rp, &r, NULL);
        ring_swap_blocks(&a, &b);
    }
    stats->comm_alone_s = MPI_Wtime() - start;
    return st;
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
