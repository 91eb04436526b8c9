/*
 * ring_probe.c — an MPI program that calls libattn_mpi directly, for what
 * the attn command cannot set up: ranks that pass the library different
 * options.  test_ring launches it under mpirun:
 *     mpirun -np P ring_probe CASE
 * Every rank builds its own rows of one small problem (the same numbers for
 * any P), sets its options as CASE says, calls attn_ring_forward and prints
 *     rank R: STATUS_NAME: MESSAGE
 * (the message empty on success).  It exits 0 whenever the call returned,
 * whatever it returned: the driver reads the lines.
 *
 * Shape legend: q [B, Lr, Hq, D]  k, v [B, Sr, Hkv, D]  out [B, Lr, Hq, D]
 *   (local rows of L = S = LEN positions, contiguous layout).
 *
 * Cases (the last rank differs from the others unless said):
 *   same          every rank passes the same options: must succeed
 *   threads       only the thread count differs: must succeed (not a
 *                 property of the result)
 *   key-lengths   key_lengths[1] differs
 *   mask          a mask broadcast over query rows ([1, 1, 1, S]) differs
 *   len           attn_ring_options.len_kv: one more than the keys held (the
 *                 others pass 0, the keys held)
 *   aliased       the last rank's out is its q (an output over an input)
 *   stop          the last rank stops itself (SIGSTOP) before the call; the
 *                 others, with a 2 s timeout, must time out naming it, and
 *                 then end the job with MPI_Abort (rank 0 a second later, so
 *                 that every rank's line is printed first)
 */
#include "attn_mpi.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { B = 2, LEN = 13, HQ = 2, HKV = 1, D = 4 };

static float value_at(int stream, int64_t index) {
    uint64_t z = (uint64_t)index * 0x9E3779B97F4A7C15ull + (uint64_t)stream * 0xD1B54A32D192ED03ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z ^= z >> 31;
    return (float)((double)(z >> 11) / 9007199254740992.0 - 0.5);
}

/* This rank's rows [B, rows, heads, D] of stream's [B, LEN, heads, D]. */
static float *rows_of(int stream, const attn_ring_shard *sh, int64_t heads) {
    float *x = malloc(sizeof(float) * (size_t)(B * sh->rows * heads * D + 1));
    for (int64_t b = 0; b < B; b++)
        for (int64_t r = 0; r < sh->rows; r++)
            for (int64_t e = 0; e < heads * D; e++)
                x[(b * sh->rows + r) * heads * D + e] =
                    value_at(stream, (b * LEN + sh->start[0] + r) * heads * D + e);
    return x;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, ranks;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    const char *mode = argc > 1 ? argv[1] : "same";
    const int odd = rank == ranks - 1 && ranks > 1;

    attn_ring_shard sh;
    attn_ring_shard_of(LEN, ranks, rank, ATTN_RING_CONTIGUOUS, &sh);
    float *q = rows_of(1, &sh, HQ), *k = rows_of(2, &sh, HKV), *v = rows_of(3, &sh, HKV);
    float *o = malloc(sizeof(float) * (size_t)(B * sh.rows * HQ * D + 1));
    attn_tensor tq = attn_tensor_4d(q, B, sh.rows, HQ, D), tk = attn_tensor_4d(k, B, sh.rows, HKV, D),
                tv = attn_tensor_4d(v, B, sh.rows, HKV, D), to = attn_tensor_4d(o, B, sh.rows, HQ, D);

    attn_sdpa_options so = ATTN_SDPA_OPTIONS_INIT;
    attn_ring_options ro = ATTN_RING_OPTIONS_INIT;
    ro.sdpa = &so;
    so.threads = 1;
    int64_t lens[B] = {LEN, 7};
    uint8_t mask[LEN];
    for (int j = 0; j < LEN; j++) mask[j] = (uint8_t)(j % 3 != 0);
    if (strcmp(mode, "threads") == 0) {
        so.threads = odd ? 2 : 1;
    } else if (strcmp(mode, "key-lengths") == 0) {
        so.key_lengths = lens;
        if (odd) lens[1] = 8;
    } else if (strcmp(mode, "mask") == 0) {
        so.mask = mask;
        const int64_t shape[4] = {1, 1, 1, LEN};
        memcpy(so.mask_shape, shape, sizeof shape);
        if (odd) mask[4] = 0;
    } else if (strcmp(mode, "len") == 0) {
        ro.len_kv = odd ? LEN + 1 : 0;
    } else if (strcmp(mode, "aliased") == 0) {
        if (odd) to.data = q;
    } else if (strcmp(mode, "stop") == 0) {
        ro.timeout_seconds = 2;
        if (odd) raise(SIGSTOP);
    } else if (strcmp(mode, "same") != 0) {
        fprintf(stderr, "ring_probe: unknown case '%s'\n", mode);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    attn_status st = attn_ring_forward(MPI_COMM_WORLD, &tq, &tk, &tv, &ro, &to, NULL, NULL);
    printf("rank %d: %s: %s\n", rank, attn_status_str(st), st ? attn_last_error() : "");
    fflush(stdout);
    if (st == ATTN_ERR_TIMEOUT) {
        /* A silent rank cannot take part in MPI_Finalize. */
        if (rank == 0) sleep(1);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    free(q);
    free(k);
    free(v);
    free(o);
    MPI_Finalize();
    return 0;
}
