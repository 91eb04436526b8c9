/*
 * ring_backward.c — ring attention, backward.
 *
 * Shape legend: q, dq [B, Lr, Hq, D]  out, dout [B, Lr, Hq, Dv]  lse [B, Hq, Lr]
 *   (local rows, global normalisation: attn_ring_forward's results)
 *   block [B, rows, Hkv, Dv + D] ([v | k] per kv head), and its gradient
 *   dblock in the same layout ([dv | dk]), which travels with it.
 *   A piece: n query rows against a key run of m rows.
 *
 * The gradient of a block.  With the whole row's lse and out, a block b of
 * keys contributes (P = the row's weights, p = the block's own softmax,
 * w = exp(lse_b - lse) the block's share of the row, so P = w p):
 *   dv_j += sum_i P_ij dout_i
 *   ds_ij = P_ij (dout_i . v_j - dout_i . out_i)
 *   dq_i += scale sum_j ds_ij k_j      dk_j += scale sum_i ds_ij q_i
 * attn_sdpa_backward on the block alone, given dout_b = w dout, produces
 * everything except one term: it normalises with the block's own output o_b
 * instead of out, i.e. its ds lacks p_ij c_i with
 *   c_i = w dout_i . (o_b,i - out_i).
 * That term is added exactly:
 *   dq_i += scale c_i kbar_i,   kbar_i = sum_j p_ij k_j
 *   dk_j += sum_i p_ij (scale c_i q_i)
 * kbar is the block's forward with k as the values, and the dk term is the
 * "dv" of a backward call with k as the values and scale c_i q_i as dout.  So
 * per piece: one forward with values [v | k] (o_b and kbar at once, from one
 * view of the block), one backward for dq, dk, dv, one for the dk term.  Both
 * backward calls get the (out, lse) of that forward, as the library's
 * contract asks, so any backward kernel (reference or flash) is right.
 *
 * The ring: step t as in the forward (the block of rank (r - t) mod P in hand,
 * the next one in flight).  The block's gradient so far arrives from the left
 * during the compute (the left neighbour held this block at step t - 1); the
 * rank adds its own part and sends it right.  After step P - 1 the block in
 * hand belongs to the right neighbour, so that last send is the extra hop
 * that returns each gradient to its owner.  Sums run in ring order
 * (owner, owner + 1, ...): reproducible.
 */
#include "dist/ring_internal.h"
#include "dist/ring_overlap.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { WANT_DQ = 1, WANT_DK = 2, WANT_DV = 4 };

typedef struct backward_args {
    const attn_tensor *q, *out, *dout;
    const float *lse;
} backward_args;

typedef struct backward_state {
    bool want_dq, want_dkv;
    double scale;
    double *dq_acc;          /* [B, Lr, Hq, D]                           */
    double *dblock_part;     /* this rank's part of the block in hand    */
    float *dblock_in;        /* the block's gradient from the left       */
    float *dblock_send[2];   /* gradients on their way right             */
    float *o_aug, *lse_b;    /* [B, n, Hq, Dv + D] = [o_b | kbar], [B, Hq, n] */
    float *dout_b, *dout_c;  /* [B, n, Hq, Dv] w dout, [B, n, Hq, D] scale c q */
    float *dq_b;             /* [B, n, Hq, D]                            */
    float *dk_b, *dv_b, *dk_c; /* [B, m, Hkv, D], [B, m, Hkv, Dv], [B, m, Hkv, D] */
    ring_scratch workspace;
    ring_slices slices;      /* the piece's mask and bias                */
} backward_state;

static attn_status check_like(const attn_tensor *t, const char *name, const attn_tensor *like,
                              const char *like_name) {
    if (!t) return ATTN_OK;
    for (int d = 0; d < 4; d++)
        if (t->shape[d] != like->shape[d])
            return attn__fail(ATTN_ERR_SHAPE, "%s must be shaped like %s [%lld, %lld, %lld, %lld]",
                             name, like_name, (long long)like->shape[0], (long long)like->shape[1],
                             (long long)like->shape[2], (long long)like->shape[3]);
    if (t->stride[3] != 1 || t->stride[0] < 0 || t->stride[1] < 0 || t->stride[2] < 0)
        return attn__fail(ATTN_ERR_SHAPE, "%s: strides must be >= 0 with a contiguous last dimension",
                         name);
    if (t->shape[1] > 0 && !t->data) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "%s->data is NULL", name);
    return ATTN_OK;
}

static attn_status check_args(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                              const attn_tensor *out, const float *lse, const attn_tensor *dout,
                              const attn_tensor *dq, const attn_tensor *dk, const attn_tensor *dv) {
    if (!q || !k || !v || !out || !dout)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "%s is NULL",
                         !q ? "q" : !k ? "k" : !v ? "v" : !out ? "out" : "dout");
    if (!lse && q->shape[1] > 0)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT,
                         "lse is NULL: the ring's backward needs the forward's lse (the whole "
                         "row's normaliser)");
    attn_status st;
    if ((st = check_like(dout, "dout", out, "out")) || (st = check_like(dq, "dq", q, "q")) ||
        (st = check_like(dk, "dk", k, "k")) || (st = check_like(dv, "dv", v, "v")))
        return st;
    return ATTN_OK;
}

/* Adds a [B, m, Hkv, width] float tensor into columns [col, col + width) of
 * rows [off, off + m) of a double block gradient of `rows` positions. */
static void add_to_block(const ring_problem *rp, double *dblock, int64_t rows, int64_t off,
                         int64_t m, const float *x, int64_t width, int64_t col) {
    const int64_t stride = rp->dim_v + rp->dim;
    for (int64_t b = 0; b < rp->batch; b++)
        for (int64_t j = 0; j < m; j++)
            for (int64_t g = 0; g < rp->heads_kv; g++) {
                double *dst = dblock + ((b * rows + off + j) * rp->heads_kv + g) * stride + col;
                const float *src = x + ((b * m + j) * rp->heads_kv + g) * width;
                for (int64_t d = 0; d < width; d++) dst[d] += src[d];
            }
}

/* Grows the workspace to what the call needs and hands it to opt. */
static attn_status reserve(backward_state *s, attn_sdpa_options *opt, size_t need) {
    attn_status st = attn__ring_scratch_reserve(&s->workspace, need);
    opt->workspace = s->workspace.data;
    opt->workspace_size = s->workspace.size;
    return st;
}

/* The gradient of a piece's n query rows (local row `row`) against key run
 * [k_off, k_off + m) of the block of `rows` positions. */
static attn_status backward_piece(const ring_problem *rp, const backward_args *x, float *block,
                                  int64_t rows, const ring_piece *pc, backward_state *s,
                                  ring_requests *reqs, attn_ring_stats *stats) {
    const int64_t B = rp->batch, Hq = rp->heads_q, Hkv = rp->heads_kv, D = rp->dim,
                  Dv = rp->dim_v, Lr = rp->q_shard.rows, W = Dv + D;
    const int64_t row = pc->q_row, n = pc->n, k_off = pc->k_off, m = pc->m;
    attn_status st;
    attn_tensor qv = *x->q;
    qv.data = (float *)qv.data + row * x->q->stride[1];
    qv.shape[1] = n;
    attn_tensor k = attn__ring_block_view(rp, block, rows, k_off, m, 'k');
    attn_tensor v = attn__ring_block_view(rp, block, rows, k_off, m, 'v');
    attn_tensor vk = attn__ring_block_view(rp, block, rows, k_off, m, 'a');
    attn_sdpa_options opt;
    size_t need;

    /* The block's own forward with values [v | k]: o_b and kbar, lse_b. */
    attn_tensor o_aug = attn_tensor_4d(s->o_aug, B, n, Hq, W);
    if ((st = attn__ring_piece_options(rp, pc, &s->slices, &opt)) ||
        (st = attn_sdpa_workspace_size(&qv, &k, &vk, &opt, &need)) || (st = reserve(s, &opt, need)) ||
        (st = attn_sdpa_forward(&qv, &k, &vk, &opt, &o_aug, NULL, s->lse_b)))
        return st;
    attn__ring_progress(reqs, stats);

    /* w, c and the two douts; the kbar part of dq. */
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < n; i++)
            for (int64_t h = 0; h < Hq; h++) {
                const double l_row = x->lse[(b * Hq + h) * Lr + row + i];
                const double l_block = s->lse_b[(b * Hq + h) * n + i];
                const double w = l_row == -INFINITY || l_block == -INFINITY ? 0.0 : exp(l_block - l_row);
                const float *dout_bih = problem_row(x->dout, b, row + i, h);
                const float *out_bih = problem_row(x->out, b, row + i, h);
                const float *o_b = s->o_aug + ((b * n + i) * Hq + h) * W, *kbar = o_b + Dv;
                float *dout_b = s->dout_b + ((b * n + i) * Hq + h) * Dv;
                double c = 0.0;
                for (int64_t d = 0; d < Dv; d++) {
                    dout_b[d] = (float)(w * dout_bih[d]);
                    c += (double)dout_bih[d] * ((double)o_b[d] - (double)out_bih[d]);
                }
                c *= w * s->scale;
                if (s->want_dkv) {
                    const float *q_bih = problem_row(x->q, b, row + i, h);
                    float *dout_c = s->dout_c + ((b * n + i) * Hq + h) * D;
                    for (int64_t d = 0; d < D; d++) dout_c[d] = (float)(c * q_bih[d]);
                }
                if (s->want_dq) {
                    double *dq = s->dq_acc + ((b * Lr + row + i) * Hq + h) * D;
                    for (int64_t d = 0; d < D; d++) dq[d] += c * kbar[d];
                }
            }

    /* The block's own backward with dout_b = w dout. */
    const attn_tensor o_b = {s->o_aug, ATTN_F32, {B, n, Hq, Dv}, {n * Hq * W, Hq * W, W, 1}};
    const attn_tensor kbar = {s->o_aug + Dv, ATTN_F32, {B, n, Hq, D}, {n * Hq * W, Hq * W, W, 1}};
    attn_tensor dout_b = attn_tensor_4d(s->dout_b, B, n, Hq, Dv);
    attn_tensor dq_b = attn_tensor_4d(s->dq_b, B, n, Hq, D);
    attn_tensor dk_b = attn_tensor_4d(s->dk_b, B, m, Hkv, D);
    attn_tensor dv_b = attn_tensor_4d(s->dv_b, B, m, Hkv, Dv);
    if ((st = attn_sdpa_backward_workspace_size(&qv, &k, &v, &opt, &need)) ||
        (st = reserve(s, &opt, need)) ||
        (st = attn_sdpa_backward(&qv, &k, &v, &opt, &o_b, s->lse_b, &dout_b,
                                 s->want_dq ? &dq_b : NULL, s->want_dkv ? &dk_b : NULL,
                                 s->want_dkv ? &dv_b : NULL)))
        return st;
    attn__ring_progress(reqs, stats);
    if (s->want_dq)
        for (int64_t b = 0; b < B; b++)
            for (int64_t i = 0; i < n * Hq * D; i++)
                s->dq_acc[(b * Lr + row) * Hq * D + i] += s->dq_b[b * n * Hq * D + i];
    if (!s->want_dkv) return ATTN_OK;
    add_to_block(rp, s->dblock_part, rows, k_off, m, s->dk_b, D, Dv);
    add_to_block(rp, s->dblock_part, rows, k_off, m, s->dv_b, Dv, 0);

    /* The correction's dk: k as the values, scale c q as dout. */
    attn_tensor dout_c = attn_tensor_4d(s->dout_c, B, n, Hq, D);
    attn_tensor dk_c = attn_tensor_4d(s->dk_c, B, m, Hkv, D);
    if ((st = attn_sdpa_backward_workspace_size(&qv, &k, &k, &opt, &need)) ||
        (st = reserve(s, &opt, need)) ||
        (st = attn_sdpa_backward(&qv, &k, &k, &opt, &kbar, s->lse_b, &dout_c, NULL, NULL, &dk_c)))
        return st;
    attn__ring_progress(reqs, stats);
    add_to_block(rp, s->dblock_part, rows, k_off, m, s->dk_c, D, Dv);
    return ATTN_OK;
}

/* What a backward piece works on. */
typedef struct backward_piece_ctx {
    const ring_problem *rp;
    const backward_args *x;
    float *block;
    int64_t block_rows;
    backward_state *s;
    ring_requests *reqs;
    attn_ring_stats *stats;
} backward_piece_ctx;

static attn_status step_piece(void *ctx, const ring_piece *pc) {
    const backward_piece_ctx *c = ctx;
    return backward_piece(c->rp, c->x, c->block, c->block_rows, pc, c->s, c->reqs, c->stats);
}

/* Writes a [B, rows, Hkv, Dv + D] float block gradient into dk and dv. */
static void unpack_gradient(const ring_problem *rp, const float *dblock, int64_t rows,
                            attn_tensor *dk, attn_tensor *dv) {
    const int64_t W = rp->dim_v + rp->dim;
    for (int64_t b = 0; b < rp->batch; b++)
        for (int64_t j = 0; j < rows; j++)
            for (int64_t g = 0; g < rp->heads_kv; g++) {
                const float *src = dblock + ((b * rows + j) * rp->heads_kv + g) * W;
                if (dv) memcpy(problem_row(dv, b, j, g), src, sizeof(float) * (size_t)rp->dim_v);
                if (dk) memcpy(problem_row(dk, b, j, g), src + rp->dim_v, sizeof(float) * (size_t)rp->dim);
            }
}

attn_status attn_ring_backward(MPI_Comm comm, const attn_tensor *q, const attn_tensor *k,
                               const attn_tensor *v, const attn_ring_options *opt,
                               const attn_tensor *out, const float *lse, const attn_tensor *dout,
                               attn_tensor *dq, attn_tensor *dk, attn_tensor *dv,
                               attn_ring_stats *stats) {
    const double start = MPI_Wtime();
    attn_ring_stats own_stats;
    if (!stats) stats = &own_stats;
    memset(stats, 0, sizeof *stats);
    ring_problem rp;
    const int flags = (dq ? WANT_DQ : 0) | (dk ? WANT_DK : 0) | (dv ? WANT_DV : 0);
    attn_status mine = check_args(q, k, v, out, lse, dout, dq, dk, dv);
    if (mine == ATTN_OK) mine = attn__ring_backward_overlap(q, k, v, opt, out, lse, dout, dq, dk, dv);
    attn_status st = attn__ring_problem_init(&rp, comm, q, k, v, out, opt, mine, flags);
    if (st) return st;

    const int64_t B = rp.batch, Lr = rp.q_shard.rows, Hq = rp.heads_q, Hkv = rp.heads_kv,
                  D = rp.dim, Dv = rp.dim_v, W = Dv + D, M = rp.max_kv_rows;
    const int64_t n = rp.piece_rows < Lr ? rp.piece_rows : Lr;
    const size_t block_floats = (size_t)(B * M * rp.unit) + 1;
    backward_state s = {0};
    s.want_dq = dq != NULL;
    s.want_dkv = dk || dv;
    s.scale = rp.sdpa.scale > 0.0f ? rp.sdpa.scale : (float)(1.0 / sqrt((double)D));
    float *blocks[2] = {malloc(sizeof(float) * block_floats), malloc(sizeof(float) * block_floats)};
    s.dq_acc = calloc((size_t)(B * Lr * Hq * D) + 1, sizeof(double));
    s.dblock_part = malloc(sizeof(double) * block_floats);
    s.dblock_in = malloc(sizeof(float) * block_floats);
    s.dblock_send[0] = malloc(sizeof(float) * block_floats);
    s.dblock_send[1] = malloc(sizeof(float) * block_floats);
    s.o_aug = malloc(sizeof(float) * (size_t)(B * n * Hq * W + 1));
    s.lse_b = malloc(sizeof(float) * (size_t)(B * Hq * n + 1));
    s.dout_b = malloc(sizeof(float) * (size_t)(B * n * Hq * Dv + 1));
    s.dout_c = malloc(sizeof(float) * (size_t)(B * n * Hq * D + 1));
    s.dq_b = malloc(sizeof(float) * (size_t)(B * n * Hq * D + 1));
    s.dk_b = malloc(sizeof(float) * (size_t)(B * M * Hkv * D + 1));
    s.dv_b = malloc(sizeof(float) * (size_t)(B * M * Hkv * Dv + 1));
    s.dk_c = malloc(sizeof(float) * (size_t)(B * M * Hkv * D + 1));
    st = !blocks[0] || !blocks[1] || !s.dq_acc || !s.dblock_part || !s.dblock_in ||
                 !s.dblock_send[0] || !s.dblock_send[1] || !s.o_aug || !s.lse_b || !s.dout_b ||
                 !s.dout_c || !s.dq_b || !s.dk_b || !s.dv_b || !s.dk_c
             ? attn__fail(ATTN_ERR_OUT_OF_MEMORY, "cannot allocate the ring's backward buffers "
                         "(blocks of %lld key rows)", (long long)M)
             : ATTN_OK;
    if ((st = attn__ring_agree_within(comm, st, NULL, rp.timeout_s))) goto cleanup;

    attn__ring_pack_block(&rp, k, v, blocks[0]);
    const backward_args x = {q, out, dout, lse};
    attn_status failed = ATTN_OK;
    ring_requests sends[2];
    memset(sends, 0, sizeof sends);
    for (int t = 0; t < rp.ranks; t++) {
        const attn_ring_shard *ks = &rp.kv_shards[ring_owner_at(&rp, t)];
        const size_t part = (size_t)(B * ks->rows * rp.unit);
        ring_requests reqs = {0}, incoming = {0};
        attn__ring_post_shift(&rp, &reqs, t, blocks[0], blocks[1], stats);
        if (s.want_dkv && t > 0)
            attn__ring_post(&rp, &incoming, false, s.dblock_in, B * ks->rows, rp.left, RING_TAG_DKV,
                            "a block's gradient");
        memset(s.dblock_part, 0, sizeof(double) * part);
        /* backward_piece drives MPI progress itself, between its kernel calls */
        backward_piece_ctx ctx = {&rp, &x, blocks[0], ks->rows, &s, &reqs, stats};
        if (failed == ATTN_OK) failed = attn__ring_step(&rp, ks, step_piece, &ctx, NULL, stats);
        if (s.want_dkv) {
            /* Sum in ring order: what came from the left, then this rank's part. */
            if ((st = attn__ring_wait(&rp, &incoming, stats)) ||
                (st = attn__ring_wait(&rp, &sends[t % 2], stats))) { /* the buffer's previous send */
                attn__ring_abandon(&reqs);
                goto abandon;
            }
            float *sum = s.dblock_send[t % 2];
            for (size_t i = 0; i < part; i++)
                sum[i] = (float)((t > 0 ? (double)s.dblock_in[i] : 0.0) + s.dblock_part[i]);
            attn__ring_post(&rp, &sends[t % 2], true, sum, B * ks->rows, rp.right, RING_TAG_DKV,
                            "a block's gradient");
            stats->bytes_sent += (int64_t)(part * sizeof(float));
        }
        if ((st = attn__ring_wait(&rp, &reqs, stats))) goto abandon;
        ring_swap_blocks(&blocks[0], &blocks[1]);
    }
    if (s.want_dkv) {
        /* The extra hop: this rank's own block's gradient, complete. */
        ring_requests last = {0};
        attn__ring_post(&rp, &last, false, s.dblock_in, B * rp.kv_shards[rp.rank].rows, rp.left, RING_TAG_DKV,
                        "its own block's gradient");
        if ((st = attn__ring_wait(&rp, &last, stats)) || (st = attn__ring_wait(&rp, &sends[0], stats)) ||
            (st = attn__ring_wait(&rp, &sends[1], stats)))
            goto abandon;
    }
    if ((st = attn__ring_agree_within(comm, failed, NULL, rp.timeout_s))) goto cleanup;

    if (dq) attn__ring_store_rows(s.dq_acc, B, Lr, Hq, D, dq);
    if (s.want_dkv) unpack_gradient(&rp, s.dblock_in, rp.kv_shards[rp.rank].rows, dk, dv);
    goto cleanup;
abandon:
    /* A wait timed out: the other exchanges are abandoned too, and the
     * buffers MPI may still touch if the silent rank resumes stay
     * allocated. */
    attn__ring_abandon(&sends[0]);
    attn__ring_abandon(&sends[1]);
    blocks[0] = blocks[1] = s.dblock_in = s.dblock_send[0] = s.dblock_send[1] = NULL;
cleanup:
    free(blocks[0]);
    free(blocks[1]);
    free(s.dq_acc);
    free(s.dblock_part);
    free(s.dblock_in);
    free(s.dblock_send[0]);
    free(s.dblock_send[1]);
    free(s.o_aug);
    free(s.lse_b);
    free(s.dout_b);
    free(s.dout_c);
    free(s.dq_b);
    free(s.dk_b);
    free(s.dv_b);
    free(s.dk_c);
    free(s.workspace.data);
    attn__ring_slices_free(&s.slices);
    attn__ring_problem_free(&rp);
    stats->total_s = MPI_Wtime() - start;
    return st;
}
