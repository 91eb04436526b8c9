/*
 * test_concurrency.c — the library called from 8 threads at once.
 *
 * Each thread has its own problem (sizes, masks and kernels differ from
 * thread to thread) and makes the same list of calls: attn_sdpa_forward on
 * the reference and the flash kernel, attn_sdpa_backward on both,
 * attn_mha_forward, attn_npy_save and attn_npy_load of a file of its own,
 * and three calls that fail (a missing file, a directory that does not
 * exist, a shape mismatch).  Every result must equal, bit for bit, the same
 * calls made serially before the threads start, and each thread's
 * attn_last_error() must hold its own failure's message — the one the
 * serial run left — also after every other thread has failed in between.
 *
 * The independent check here is the serial run: the property tested is
 * that concurrency changes nothing (the design's determinism promise), so
 * the values themselves are other tests' business.  Built with
 * -DATTN_SANITIZE_THREAD=ON (OpenMP off), ThreadSanitizer watches every
 * access; in the other builds the threads still race for real.
 *
 * Shape legend: q [B, L, Hq, D]  k [B, S, Hkv, D]  v [B, S, Hkv, Dv]
 *               out [B, L, Hq, Dv]  weights [B, Hq, L, S]  lse [B, Hq, L]
 */
#include "testutil.h"

#include "attn.h"
#include "attn_io.h"
#include "oracle.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { N_THREADS = 8, ROUNDS = 3, N_KERNELS = 2 };
/* The calls of a run, in order, by their index in results.status: four
 * (forward, backward) x 2 kernels, the module, save, load, then the three
 * that must fail. */
enum { CALL_MHA = 4, CALL_SAVE, CALL_LOAD, CALL_LOAD_MISSING, CALL_SAVE_NO_DIR, CALL_SHAPE, N_CALLS };
static const attn_kernel kernels[N_KERNELS] = {ATTN_KERNEL_REF, ATTN_KERNEL_FLASH};
static const enum mask_kind masks[N_THREADS] = {MASK_NONE,        MASK_CAUSAL, MASK_CAUSAL_LOWER_RIGHT,
                                                MASK_WINDOW_CAUSAL, MASK_KEY_LENGTHS, MASK_BOOL_4D,
                                                MASK_BIAS,         MASK_ALL};

/* A module's weights: x [1, L, d_model] -> out [1, L, d_out]. */
enum { MHA_D_MODEL = 24, MHA_HEADS = 4, MHA_KV_HEADS = 2, MHA_HEAD_DIM = 8, MHA_D_OUT = 12 };

/* One thread's problem. */
typedef struct job {
    int id;
    random_case rc;
    attn_sdpa_options opt;
    float *dout;
    float *x, *wq, *wk, *wv, *wo; /* the module */
    int64_t mha_len;
} job;

/* What one run of a job's calls produced. */
typedef struct results {
    float *out[N_KERNELS], *weights[N_KERNELS], *lse[N_KERNELS];
    float *dq[N_KERNELS], *dk[N_KERNELS], *dv[N_KERNELS];
    float *mha_out;
    attn_array loaded;
    attn_status status[N_CALLS];
    char missing_message[1024], no_dir_message[1024], shape_message[1024], after_barrier[1024];
} results;

static job jobs[N_THREADS];
static results serial[N_THREADS], concurrent[ROUNDS][N_THREADS];
static pthread_barrier_t failed_together;

static int64_t n_out(const job *j) { const oracle_case *c = &j->rc.c; return c->B * c->L * c->Hq * c->Dv; }
static int64_t n_weights(const job *j) { const oracle_case *c = &j->rc.c; return c->B * c->Hq * c->L * c->S; }
static int64_t n_lse(const job *j) { const oracle_case *c = &j->rc.c; return c->B * c->Hq * c->L; }
static int64_t n_q(const job *j) { const oracle_case *c = &j->rc.c; return c->B * c->L * c->Hq * c->D; }
static int64_t n_k(const job *j) { const oracle_case *c = &j->rc.c; return c->B * c->S * c->Hkv * c->D; }
static int64_t n_v(const job *j) { const oracle_case *c = &j->rc.c; return c->B * c->S * c->Hkv * c->Dv; }

static void make_job(job *j, int id) {
    test_rng r;
    test_rng_seed(&r, 1000 + (uint64_t)id);
    j->id = id;
    /* Odd sizes, a different shape per thread; GQA 2:1 on even threads. */
    const int64_t B = 1 + id % 2, L = 17 + 4 * id, S = 23 + 3 * id, Hkv = 1 + id % 2, Hq = 2 * Hkv;
    const int64_t D = 16 + (id % 3) * 8, Dv = 8 + (id % 2) * 8;
    random_case_make(&j->rc, &r, B, L, S, Hq, Hkv, D, Dv, masks[id]);
    j->opt = random_case_options(&j->rc);
    j->opt.threads = 1 + id % 2;
    j->dout = test_random_floats(&r, n_out(j), 1.0);
    j->mha_len = 9 + id;
    j->x = test_random_floats(&r, j->mha_len * MHA_D_MODEL, 1.0);
    j->wq = test_random_floats(&r, MHA_D_MODEL * MHA_HEADS * MHA_HEAD_DIM, 0.3);
    j->wk = test_random_floats(&r, MHA_D_MODEL * MHA_KV_HEADS * MHA_HEAD_DIM, 0.3);
    j->wv = test_random_floats(&r, MHA_D_MODEL * MHA_KV_HEADS * MHA_HEAD_DIM, 0.3);
    j->wo = test_random_floats(&r, MHA_HEADS * MHA_HEAD_DIM * MHA_D_OUT, 0.3);
}

static void free_job(job *j) {
    random_case_free(&j->rc);
    free(j->dout);
    free(j->x);
    free(j->wq);
    free(j->wk);
    free(j->wv);
    free(j->wo);
}

static void free_results(results *r) {
    for (int k = 0; k < N_KERNELS; k++) {
        free(r->out[k]);
        free(r->weights[k]);
        free(r->lse[k]);
        free(r->dq[k]);
        free(r->dk[k]);
        free(r->dv[k]);
    }
    free(r->mha_out);
    attn_array_free(&r->loaded);
    memset(r, 0, sizeof *r);
}

static void copy_message(char *to) { snprintf(to, 1024, "%s", attn_last_error()); }

/* Every call of the list, results into *r.  tag names the run's files;
 * barrier (NULL when serial) is waited on once all three failures are in. */
static void run_job(const job *j, results *r, const char *tag, pthread_barrier_t *barrier) {
    const oracle_case *c = &j->rc.c;
    attn_tensor q = attn_tensor_4d(j->rc.q, c->B, c->L, c->Hq, c->D);
    attn_tensor k = attn_tensor_4d(j->rc.k, c->B, c->S, c->Hkv, c->D);
    attn_tensor v = attn_tensor_4d(j->rc.v, c->B, c->S, c->Hkv, c->Dv);
    attn_tensor dout = attn_tensor_4d(j->dout, c->B, c->L, c->Hq, c->Dv);
    int s = 0;
    for (int kn = 0; kn < N_KERNELS; kn++) {
        attn_sdpa_options opt = j->opt;
        opt.kernel = kernels[kn];
        r->out[kn] = malloc(sizeof(float) * (size_t)n_out(j));
        r->weights[kn] = malloc(sizeof(float) * (size_t)n_weights(j));
        r->lse[kn] = malloc(sizeof(float) * (size_t)n_lse(j));
        r->dq[kn] = malloc(sizeof(float) * (size_t)n_q(j));
        r->dk[kn] = malloc(sizeof(float) * (size_t)n_k(j));
        r->dv[kn] = malloc(sizeof(float) * (size_t)n_v(j));
        attn_tensor out = attn_tensor_4d(r->out[kn], c->B, c->L, c->Hq, c->Dv);
        r->status[s++] = attn_sdpa_forward(&q, &k, &v, &opt, &out, r->weights[kn], r->lse[kn]);
        attn_tensor dq = attn_tensor_4d(r->dq[kn], c->B, c->L, c->Hq, c->D);
        attn_tensor dk = attn_tensor_4d(r->dk[kn], c->B, c->S, c->Hkv, c->D);
        attn_tensor dv = attn_tensor_4d(r->dv[kn], c->B, c->S, c->Hkv, c->Dv);
        r->status[s++] = attn_sdpa_backward(&q, &k, &v, &opt, &out, r->lse[kn], &dout, &dq, &dk, &dv);
    }

    attn_mha m = ATTN_MHA_INIT;
    m.d_model = MHA_D_MODEL;
    m.heads = MHA_HEADS;
    m.kv_heads = MHA_KV_HEADS;
    m.head_dim = MHA_HEAD_DIM;
    m.d_out = MHA_D_OUT;
    m.wq = j->wq;
    m.wk = j->wk;
    m.wv = j->wv;
    m.wo = j->wo;
    attn_sdpa_options mha_opt = ATTN_SDPA_OPTIONS_INIT;
    mha_opt.causal = 1;
    mha_opt.threads = j->opt.threads;
    r->mha_out = malloc(sizeof(float) * (size_t)(j->mha_len * MHA_D_OUT));
    r->status[s++] = attn_mha_forward(&m, j->x, 1, j->mha_len, NULL, 0, &mha_opt, r->mha_out, NULL, NULL);

    /* The flash output through a file of this run's own. */
    char path[600];
    snprintf(path, sizeof path, "%s/%s-%d.npy", test_tmpdir(), tag, j->id);
    attn_array a = {ATTN_F32, 4, {c->B, c->L, c->Hq, c->Dv}, n_out(j), r->out[1]};
    r->status[s++] = attn_npy_save(path, &a);
    r->status[s++] = attn_npy_load(path, &r->loaded);

    /* Three failures, each message particular to this job. */
    char missing[600], no_dir[600];
    snprintf(missing, sizeof missing, "%s/missing-%d.npy", test_tmpdir(), j->id);
    snprintf(no_dir, sizeof no_dir, "%s/no-such-dir-%d/out.npy", test_tmpdir(), j->id);
    attn_array none;
    r->status[s++] = attn_npy_load(missing, &none);
    copy_message(r->missing_message);
    r->status[s++] = attn_npy_save(no_dir, &a);
    copy_message(r->no_dir_message);
    attn_tensor k_wide = attn_tensor_4d(j->rc.k, c->B, c->S / 2, c->Hkv, c->D + 1 + j->id);
    attn_tensor out = attn_tensor_4d(r->out[0], c->B, c->L, c->Hq, c->Dv);
    r->status[s++] = attn_sdpa_forward(&q, &k_wide, &v, &j->opt, &out, NULL, NULL);
    copy_message(r->shape_message);
    if (barrier) pthread_barrier_wait(barrier);
    copy_message(r->after_barrier);
}

typedef struct thread_arg { int id; } thread_arg;

static void *thread_main(void *p) {
    const thread_arg *t = p;
    for (int round = 0; round < ROUNDS; round++) {
        char tag[32];
        snprintf(tag, sizeof tag, "round%d", round);
        run_job(&jobs[t->id], &concurrent[round][t->id], tag, &failed_together);
    }
    return NULL;
}

static void assert_same_floats(const float *want, const float *got, int64_t n, const char *what, int id,
                               int round) {
    if (memcmp(want, got, sizeof(float) * (size_t)n) != 0) {
        int64_t i = 0;
        while (memcmp(want + i, got + i, sizeof(float)) == 0) i++;
        fail_msg("thread %d, round %d: %s differs from the serial run at element %lld (%a, serial %a)", id, round,
                 what, (long long)i, (double)got[i], (double)want[i]);
    }
}

static void assert_same_message(const char *want, const char *got, const char *what, int id, int round) {
    if (strcmp(want, got) != 0)
        fail_msg("thread %d, round %d: %s message \"%s\", the serial run's \"%s\"", id, round, what, got, want);
}

static void eight_threads_equal_the_serial_run(void **state) {
    (void)state;
    for (int id = 0; id < N_THREADS; id++) {
        make_job(&jobs[id], id);
        run_job(&jobs[id], &serial[id], "serial", NULL);
        /* The serial run is the reference: its calls must have done what
         * they should, or the comparison means nothing. */
        const results *r = &serial[id];
        for (int s = 0; s < CALL_LOAD_MISSING; s++)
            if (r->status[s] != ATTN_OK) fail_msg("thread %d's problem, call %d: %s", id, s, attn_status_str(r->status[s]));
        assert_int_equal(r->status[CALL_LOAD_MISSING], ATTN_ERR_IO);
        assert_int_equal(r->status[CALL_SAVE_NO_DIR], ATTN_ERR_IO);
        assert_int_equal(r->status[CALL_SHAPE], ATTN_ERR_SHAPE);
        assert_int_equal(r->loaded.count, n_out(&jobs[id]));
        assert_memory_equal(r->loaded.data, r->out[1], sizeof(float) * (size_t)n_out(&jobs[id]));
        char path[64];
        snprintf(path, sizeof path, "missing-%d.npy", id);
        assert_non_null(strstr(r->missing_message, path));
        snprintf(path, sizeof path, "no-such-dir-%d", id);
        assert_non_null(strstr(r->no_dir_message, path));
        assert_string_equal(r->after_barrier, r->shape_message);
    }

    pthread_t threads[N_THREADS];
    thread_arg args[N_THREADS];
    assert_int_equal(pthread_barrier_init(&failed_together, NULL, N_THREADS), 0);
    for (int id = 0; id < N_THREADS; id++) {
        args[id].id = id;
        assert_int_equal(pthread_create(&threads[id], NULL, thread_main, &args[id]), 0);
    }
    for (int id = 0; id < N_THREADS; id++) assert_int_equal(pthread_join(threads[id], NULL), 0);
    pthread_barrier_destroy(&failed_together);

    for (int round = 0; round < ROUNDS; round++)
        for (int id = 0; id < N_THREADS; id++) {
            const job *j = &jobs[id];
            const results *want = &serial[id], *got = &concurrent[round][id];
            for (int s = 0; s < N_CALLS; s++)
                if (got->status[s] != want->status[s])
                    fail_msg("thread %d, round %d: call %d returned %s, serially %s", id, round, s,
                             attn_status_str(got->status[s]), attn_status_str(want->status[s]));
            for (int kn = 0; kn < N_KERNELS; kn++) {
                char what[64];
                const char *name = kn ? "flash" : "ref";
                snprintf(what, sizeof what, "%s out", name);
                assert_same_floats(want->out[kn], got->out[kn], n_out(j), what, id, round);
                snprintf(what, sizeof what, "%s weights", name);
                assert_same_floats(want->weights[kn], got->weights[kn], n_weights(j), what, id, round);
                snprintf(what, sizeof what, "%s lse", name);
                assert_same_floats(want->lse[kn], got->lse[kn], n_lse(j), what, id, round);
                snprintf(what, sizeof what, "%s dq", name);
                assert_same_floats(want->dq[kn], got->dq[kn], n_q(j), what, id, round);
                snprintf(what, sizeof what, "%s dk", name);
                assert_same_floats(want->dk[kn], got->dk[kn], n_k(j), what, id, round);
                snprintf(what, sizeof what, "%s dv", name);
                assert_same_floats(want->dv[kn], got->dv[kn], n_v(j), what, id, round);
            }
            assert_same_floats(want->mha_out, got->mha_out, j->mha_len * MHA_D_OUT, "mha out", id, round);
            assert_same_floats(want->loaded.data, got->loaded.data, n_out(j), "the reloaded .npy", id, round);
            /* The messages name this job's paths and sizes, the same in
             * both runs: they must match exactly. */
            assert_same_message(want->missing_message, got->missing_message, "missing file", id, round);
            assert_same_message(want->no_dir_message, got->no_dir_message, "missing directory", id, round);
            assert_same_message(want->shape_message, got->shape_message, "shape", id, round);
            assert_same_message(want->shape_message, got->after_barrier, "after the others failed, the last",
                                id, round);
        }
    for (int id = 0; id < N_THREADS; id++) {
        free_results(&serial[id]);
        for (int round = 0; round < ROUNDS; round++) free_results(&concurrent[round][id]);
        free_job(&jobs[id]);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(eight_threads_equal_the_serial_run),
    };
    return cmocka_run_group_tests(tests, NULL, test_group_teardown);
}
