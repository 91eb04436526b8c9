/*
 * test_progress.c — attn_sdpa_options.progress: a long call reports how far
 * it has got, on the calling thread only, never twice at once, with
 * fractions that only grow and end at 1; a short call does not report; and
 * the results are the same bits with and without a callback (it observes,
 * it does not take part).  Every kernel: the reference, the flash forward
 * on 1 and 2 threads (tiles and the split decode), the flash backward.
 */
#include "oracle.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

typedef struct watcher {
    pthread_t caller;
    int calls, wrong_thread, backwards, out_of_range;
    atomic_int inside, overlapped;
    double last;
} watcher;

static void watch(void *user, double fraction) {
    watcher *w = user;
    if (atomic_fetch_add(&w->inside, 1) != 0) atomic_fetch_add(&w->overlapped, 1);
    w->calls++;
    if (!pthread_equal(pthread_self(), w->caller)) w->wrong_thread++;
    if (fraction < w->last) w->backwards++;
    if (!(fraction >= 0.0 && fraction <= 1.0)) w->out_of_range++;
    w->last = fraction;
    atomic_fetch_sub(&w->inside, 1);
}

static int reports_seen; /* over a test: some call must have been long enough */

typedef struct problem {
    int64_t B, L, S, Hq, Hkv, D;
    float *q, *k, *v, *dout;
} problem;

static void problem_make(problem *p, uint64_t seed) {
    test_rng r;
    test_rng_seed(&r, seed);
    const int64_t nq = p->B * p->L * p->Hq * p->D, nk = p->B * p->S * p->Hkv * p->D;
    p->q = malloc(sizeof(float) * (size_t)nq);
    p->dout = malloc(sizeof(float) * (size_t)nq);
    p->k = malloc(sizeof(float) * (size_t)nk);
    p->v = malloc(sizeof(float) * (size_t)nk);
    test_fill_normal(&r, p->q, nq, 1.0);
    test_fill_normal(&r, p->dout, nq, 1.0);
    test_fill_normal(&r, p->k, nk, 1.0);
    test_fill_normal(&r, p->v, nk, 1.0);
}

static void problem_free(problem *p) {
    free(p->q);
    free(p->k);
    free(p->v);
    free(p->dout);
}

/* Runs the forward (and the backward when asked) with and without the
 * callback; checks the reports and that the bits agree, and that a watched
 * call that lasted long (0.3 s: three report intervals) did report, one
 * that was short (under the 0.1 s interval) did not.  Returns the number of
 * reports. */
static int run(const problem *p, attn_kernel kernel, int threads, bool backward, int causal_lower_right) {
    const int64_t no = p->B * p->L * p->Hq * p->D, nk = p->B * p->S * p->Hkv * p->D;
    attn_tensor q = attn_tensor_4d(p->q, p->B, p->L, p->Hq, p->D), k = attn_tensor_4d(p->k, p->B, p->S, p->Hkv, p->D),
                v = attn_tensor_4d(p->v, p->B, p->S, p->Hkv, p->D), dot = attn_tensor_4d(p->dout, p->B, p->L, p->Hq, p->D);
    float *o[2], *lse[2], *dq[2], *dk[2], *dv[2];
    watcher w = {.caller = pthread_self()};
    double longest = 0; /* the longest watched call */
    int calls_before_backward = 0; /* reports made by the watched forward */
    for (int watched = 0; watched < 2; watched++) {
        attn_sdpa_options opt = ATTN_SDPA_OPTIONS_INIT;
        opt.kernel = kernel;
        opt.threads = threads;
        opt.causal = causal_lower_right;
        opt.align = ATTN_ALIGN_LOWER_RIGHT;
        double start = 0;
        if (watched) {
            opt.progress = watch;
            opt.progress_user = &w;
            start = test_now();
        }
        o[watched] = malloc(sizeof(float) * (size_t)no);
        lse[watched] = malloc(sizeof(float) * (size_t)(p->B * p->Hq * p->L));
        dq[watched] = malloc(sizeof(float) * (size_t)no);
        dk[watched] = malloc(sizeof(float) * (size_t)nk);
        dv[watched] = malloc(sizeof(float) * (size_t)nk);
        attn_tensor ot = attn_tensor_4d(o[watched], p->B, p->L, p->Hq, p->D);
        assert_int_equal(attn_sdpa_forward(&q, &k, &v, &opt, &ot, NULL, lse[watched]), ATTN_OK);
        if (backward) {
            attn_tensor dqt = attn_tensor_4d(dq[watched], p->B, p->L, p->Hq, p->D);
            attn_tensor dkt = attn_tensor_4d(dk[watched], p->B, p->S, p->Hkv, p->D);
            attn_tensor dvt = attn_tensor_4d(dv[watched], p->B, p->S, p->Hkv, p->D);
            if (watched) {
                /* the forward, if it reported, ended with 1; the backward
                 * starts again from 0 and may be too short to report */
                if (w.calls) assert_true(w.last == 1.0);
                calls_before_backward = w.calls;
                w.last = 0.0;
                longest = test_now() - start; /* each call reports on its own */
                start = test_now();
            }
            assert_int_equal(attn_sdpa_backward(&q, &k, &v, &opt, &ot, lse[watched], &dot, &dqt, &dkt, &dvt), ATTN_OK);
        }
        if (watched) {
            const double last_call = test_now() - start;
            longest = last_call > longest ? last_call : longest;
        }
    }
    assert_memory_equal(o[0], o[1], sizeof(float) * (size_t)no);
    assert_memory_equal(lse[0], lse[1], sizeof(float) * (size_t)(p->B * p->Hq * p->L));
    if (backward) {
        assert_memory_equal(dq[0], dq[1], sizeof(float) * (size_t)no);
        assert_memory_equal(dk[0], dk[1], sizeof(float) * (size_t)nk);
        assert_memory_equal(dv[0], dv[1], sizeof(float) * (size_t)nk);
    }
    for (int i = 0; i < 2; i++) {
        free(o[i]);
        free(lse[i]);
        free(dq[i]);
        free(dk[i]);
        free(dv[i]);
    }
    assert_int_equal(w.wrong_thread, 0);
    assert_int_equal(atomic_load(&w.overlapped), 0);
    assert_int_equal(w.backwards, 0);
    assert_int_equal(w.out_of_range, 0);
    reports_seen += w.calls;
    if (w.calls > calls_before_backward && w.last != 1.0) /* a call that reported ends with 1 */
        fail_msg("%d reports, the last %.17g (not 1)", w.calls, w.last);
    if (longest > 0.3 && w.calls == 0) fail_msg("a call of %.2f s did not report", longest);
    if (longest < 0.1 && w.calls != 0) fail_msg("calls of at most %.3f s reported %d times", longest, w.calls);
    return w.calls;
}

/* Calls of a tenth of a second to a second here: the reference on 1024 x
 * 1024, the flash kernel on 4096 x 4096 with 8 heads (1 and 2 threads), a
 * split decode over a long cache, backwards.  At least the slowest of them
 * lasts past three report intervals on any machine this runs on. */
static void long_calls_report(void **state) {
    (void)state;
    reports_seen = 0;
    problem ref = {.B = 1, .L = 1024, .S = 1024, .Hq = 2, .Hkv = 2, .D = 64};
    problem_make(&ref, 1);
    run(&ref, ATTN_KERNEL_REF, 1, false, 0);
    problem_free(&ref);

    problem tiles = {.B = 1, .L = 4096, .S = 4096, .Hq = 8, .Hkv = 4, .D = 64};
    problem_make(&tiles, 2);
    for (int threads = 1; threads <= 2; threads++) run(&tiles, ATTN_KERNEL_FLASH, threads, false, 0);
    problem_free(&tiles);

    /* one query over 256k positions: the split path (268 MB of k and v) */
    problem decode = {.B = 1, .L = 1, .S = 1 << 18, .Hq = 8, .Hkv = 2, .D = 64};
    problem_make(&decode, 3);
    for (int threads = 1; threads <= 2; threads++) run(&decode, ATTN_KERNEL_FLASH, threads, false, 1);
    problem_free(&decode);

    problem back = {.B = 1, .L = 2048, .S = 2048, .Hq = 4, .Hkv = 2, .D = 64};
    problem_make(&back, 4);
    run(&back, ATTN_KERNEL_FLASH, 2, true, 0);
    problem ref_back = {.B = 1, .L = 512, .S = 512, .Hq = 2, .Hkv = 1, .D = 32};
    problem_make(&ref_back, 5);
    run(&ref_back, ATTN_KERNEL_REF, 1, true, 0);
    problem_free(&ref_back);
    problem_free(&back);
    assert_true(reports_seen > 0);
}

/* A call of a few microseconds never calls back. */
static void short_calls_do_not(void **state) {
    (void)state;
    problem small = {.B = 1, .L = 8, .S = 8, .Hq = 2, .Hkv = 1, .D = 16};
    problem_make(&small, 6);
    assert_int_equal(run(&small, ATTN_KERNEL_FLASH, 2, true, 0), 0);
    assert_int_equal(run(&small, ATTN_KERNEL_REF, 1, true, 0), 0);
    problem_free(&small);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(long_calls_report),
        cmocka_unit_test(short_calls_do_not),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
