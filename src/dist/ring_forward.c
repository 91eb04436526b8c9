/*
 * ring_forward.c — ring attention, forward (Liu, Zaharia & Abbeel 2023).
 *
 * Shape legend: q [B, Lr, Hq, D]  out [B, Lr, Hq, Dv]  lse [B, Hq, Lr] (local rows)
 *   block [B, rows, Hkv, Dv + D] ([v | k] per kv head)  acc_o like out, acc_lse
 *   like lse, both double; piece_o [B, n, Hq, Dv], piece_lse [B, Hq, n].
 *
 * Step t of P: the rank holds the block of rank (r - t) mod P.  It posts the
 * block's send to the right and the receive of the next one from the left,
 * computes its queries against the block in pieces of query rows (one
 * attn_sdpa_forward each, with the pieces' and the block's global positions),
 * calling MPI_Testall between pieces so the transfer advances during the
 * compute, then waits for the exchange and swaps the two buffers.  Each
 * piece's (out, lse) merges into the running (acc_o, acc_lse):
 *     m = max(l_a, l_b),  w_a = exp(l_a - m),  w_b = exp(l_b - m)
 *     o = (w_a o_a + w_b o_b) / (w_a + w_b),   l = m + log(w_a + w_b)
 * which is exact, never overflows, and skips a piece whose row saw no key
 * (l_b = -inf); a row that no block shows a key keeps o = 0, l = -inf.
 */
#include "dist/ring_internal.h"
#include "dist/ring_overlap.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct forward_state {
    double *acc_o, *acc_lse;
    float *piece_o, *piece_lse;
    ring_scratch workspace;
    ring_slices slices;
} forward_state;

/* Folds a piece of n rows, starting at local row `row`, into the accumulators. */
static void merge_piece(const ring_problem *rp, forward_state *s, int64_t row, int64_t n) {
    const int64_t Hq = rp->heads_q, Dv = rp->dim_v, Lr = rp->q_shard.rows;
    for (int64_t b = 0; b < rp->batch; b++)
        for (int64_t h = 0; h < Hq; h++)
            for (int64_t i = 0; i < n; i++) {
                const double l_b = s->piece_lse[(b * Hq + h) * n + i];
                if (l_b == -INFINITY) continue; /* this block hides every key of the row */
                double *l_a = &s->acc_lse[(b * Hq + h) * Lr + row + i];
                double *o_a = s->acc_o + ((b * Lr + row + i) * Hq + h) * Dv;
                const float *o_b = s->piece_o + ((b * n + i) * Hq + h) * Dv;
                if (*l_a == -INFINITY) {
                    for (int64_t d = 0; d < Dv; d++) o_a[d] = o_b[d];
                    *l_a = l_b;
                    continue;
                }
                const double m = *l_a > l_b ? *l_a : l_b;
                const double w_a = exp(*l_a - m), w_b = exp(l_b - m), sum = w_a + w_b;
                for (int64_t d = 0; d < Dv; d++) o_a[d] = (w_a * o_a[d] + w_b * o_b[d]) / sum;
                *l_a = m + log(sum);
            }
}

/* What a forward piece works on. */
typedef struct forward_piece_ctx {
    const ring_problem *rp;
    const attn_tensor *q;
    float *block;
    int64_t block_rows;
    forward_state *s;
} forward_piece_ctx;

/* One piece: its queries against the key run, merged into the running
 * (acc_o, acc_lse). */
static attn_status forward_piece(void *ctx, const ring_piece *pc) {
    const forward_piece_ctx *x = ctx;
    const ring_problem *rp = x->rp;
    forward_state *s = x->s;
    attn_tensor k = attn__ring_block_view(rp, x->block, x->block_rows, pc->k_off, pc->m, 'k');
    attn_tensor v = attn__ring_block_view(rp, x->block, x->block_rows, pc->k_off, pc->m, 'v');
    attn_tensor qv = *x->q;
    qv.data = (float *)qv.data + pc->q_row * x->q->stride[1];
    qv.shape[1] = pc->n;
    attn_tensor o = attn_tensor_4d(s->piece_o, rp->batch, pc->n, rp->heads_q, rp->dim_v);
    attn_sdpa_options opt;
    size_t need;
    attn_status st;
    if ((st = attn__ring_piece_options(rp, pc, &s->slices, &opt)) ||
        (st = attn_sdpa_workspace_size(&qv, &k, &v, &opt, &need)) ||
        (st = attn__ring_scratch_reserve(&s->workspace, need)))
        return st;
    opt.workspace = s->workspace.data;
    opt.workspace_size = s->workspace.size;
    if ((st = attn_sdpa_forward(&qv, &k, &v, &opt, &o, NULL, s->piece_lse))) return st;
    merge_piece(rp, s, pc->q_row, pc->n);
    return ATTN_OK;
}

attn_status attn_ring_forward(MPI_Comm comm, const attn_tensor *q, const attn_tensor *k,
                              const attn_tensor *v, const attn_ring_options *opt,
                              attn_tensor *out, float *lse, attn_ring_stats *stats) {
    const double start = MPI_Wtime();
    attn_ring_stats own_stats;
    if (!stats) stats = &own_stats;
    memset(stats, 0, sizeof *stats);
    ring_problem rp;
    attn_status st = attn__ring_problem_init(&rp, comm, q, k, v, out, opt,
                                             attn__ring_forward_overlap(q, k, v, opt, out, lse), 0);
    if (st) return st;

    const int64_t B = rp.batch, Lr = rp.q_shard.rows, Hq = rp.heads_q, Dv = rp.dim_v;
    const size_t block_floats = (size_t)(B * rp.max_kv_rows * rp.unit);
    const size_t piece = (size_t)(rp.piece_rows < Lr ? rp.piece_rows : Lr);
    float *blocks[2] = {malloc(sizeof(float) * (block_floats ? block_floats : 1)),
                        malloc(sizeof(float) * (block_floats ? block_floats : 1))};
    forward_state s = {0};
    /* After a timeout in a block's exchange the blocks stay allocated: MPI
     * may still touch them if the silent rank resumes. */
    bool abandoned = false;
    s.acc_o = calloc((size_t)(B * Lr * Hq * Dv) + 1, sizeof(double));
    s.acc_lse = malloc(sizeof(double) * ((size_t)(B * Hq * Lr) + 1));
    s.piece_o = malloc(sizeof(float) * ((size_t)B * piece * (size_t)(Hq * Dv) + 1));
    s.piece_lse = malloc(sizeof(float) * ((size_t)B * piece * (size_t)Hq + 1));
    st = !blocks[0] || !blocks[1] || !s.acc_o || !s.acc_lse || !s.piece_o || !s.piece_lse
             ? attn__fail(ATTN_ERR_OUT_OF_MEMORY, "cannot allocate the ring's buffers (two blocks "
                         "of %lld key rows, the output in double)", (long long)rp.max_kv_rows)
             : ATTN_OK;
    if ((st = attn__ring_agree_within(comm, st, NULL, rp.timeout_s))) goto cleanup;
    for (int64_t i = 0; i < B * Hq * Lr; i++) s.acc_lse[i] = -INFINITY;

    attn__ring_pack_block(&rp, k, v, blocks[0]);
    if (opt && opt->time_comm_alone) {
        if ((st = attn__ring_time_rotation(&rp, blocks[0], blocks[1], stats))) {
            abandoned = st == ATTN_ERR_TIMEOUT;
            goto cleanup;
        }
        attn__ring_pack_block(&rp, k, v, blocks[0]);
    }

    /* A rank whose kernel fails keeps passing blocks on (so no neighbour
     * waits forever) and reports at the end. */
    attn_status failed = ATTN_OK;
    for (int t = 0; t < rp.ranks; t++) {
        const attn_ring_shard *ks = &rp.kv_shards[ring_owner_at(&rp, t)];
        ring_requests reqs = {0};
        attn__ring_post_shift(&rp, &reqs, t, blocks[0], blocks[1], stats);
        forward_piece_ctx ctx = {&rp, q, blocks[0], ks->rows, &s};
        if (failed == ATTN_OK) failed = attn__ring_step(&rp, ks, forward_piece, &ctx, &reqs, stats);
        if ((st = attn__ring_wait(&rp, &reqs, stats))) {
            abandoned = true;
            goto cleanup;
        }
        ring_swap_blocks(&blocks[0], &blocks[1]);
    }
    if ((st = attn__ring_agree_within(comm, failed, NULL, rp.timeout_s))) goto cleanup;

    attn__ring_store_rows(s.acc_o, B, Lr, Hq, Dv, out);
    if (lse)
        for (int64_t i = 0; i < B * Hq * Lr; i++) lse[i] = (float)s.acc_lse[i];
cleanup:
    if (!abandoned) {
        free(blocks[0]);
        free(blocks[1]);
    }
    free(s.acc_o);
    free(s.acc_lse);
    free(s.piece_o);
    free(s.piece_lse);
    free(s.workspace.data);
    attn__ring_slices_free(&s.slices);
    attn__ring_problem_free(&rp);
    stats->total_s = MPI_Wtime() - start - stats->comm_alone_s;
    return st;
}
