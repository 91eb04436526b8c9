/*
 * backward_bench.c — times attn_sdpa_backward against this machine's FP32
 * FMA peak, until `attn bench` has backward rows (docs/backward.md).
 *
 *   cc -O2 -fopenmp -I include -I build/include bench/backward_bench.c \
 *      build/libattn.a -lm -o backward_bench
 *   ./backward_bench [L [Hq [D [threads [causal [runs]]]]]]
 *                                      (default 4096 16 128 2 0 3)
 *
 * q, k, v, dout [1, L, Hq, D] (S = L, Hkv = Hq), random in [-0.5, 0.5].
 * FLOPs: 2.5 x the forward's 4 * B * Hq * (visible pairs) * D.
 * Two efficiency figures, because these machines are shared:
 *   wall  median wall time against attn_measure_fma_peak(threads), measured
 *         before and after the runs (the mean of the two);
 *   cpu   FLOPs per second of process CPU time, against the FMA peak per
 *         thread also measured in CPU time, with all `threads` threads
 *         running the peak loop at once (x86 AVX-512 only): time other
 *         programs take from this one counts in neither, so it reads the
 *         kernel's own efficiency even under load (OpenMP barrier spinning
 *         counts as work, so imbalance still shows).  The per-thread peak is
 *         measured with every thread busy because two threads can share FMA
 *         units (SMT siblings on the host) or clock lower than one.
 */
#include "attn.h"
#include "attn_chapter.h"
#include "attn_interp.h"
#include "attn_io.h"
#include "attn_machine.h"
#include "attn_viz.h"

#include "bench_timing.h"

#include <stdio.h>
#include <stdlib.h>

/* One timed call. */
typedef struct backward_call {
    attn_tensor q, k, v, out, dout, dq, dk, dv;
    const float *lse;
    attn_sdpa_options opt;
} backward_call;

static int call_backward(void *p) {
    backward_call *c = p;
    if (attn_sdpa_backward(&c->q, &c->k, &c->v, &c->opt, &c->out, c->lse, &c->dout, &c->dq, &c->dk, &c->dv) == ATTN_OK)
        return 0;
    fprintf(stderr, "backward: %s\n", attn_last_error());
    return 1;
}

int main(int argc, char **argv) {
    const int64_t L = argc > 1 ? atoll(argv[1]) : 4096, H = argc > 2 ? atoll(argv[2]) : 16,
                  D = argc > 3 ? atoll(argv[3]) : 128;
    const int threads = argc > 4 ? atoi(argv[4]) : 2, causal = argc > 5 ? atoi(argv[5]) : 0;
    const int runs = argc > 6 ? atoi(argv[6]) : 3;
    if (L <= 0 || H <= 0 || D <= 0 || threads <= 0 || runs <= 0 || runs > 100) {
        fprintf(stderr, "usage: %s [L [Hq [D [threads [causal [runs]]]]]]\n", argv[0]);
        return 2;
    }
    const size_t n = (size_t)(L * H * D);
    float *buf[8];
    for (int i = 0; i < 8; i++) buf[i] = malloc(n * sizeof(float));
    float *lse = malloc((size_t)(H * L) * sizeof(float));
    srand(1);
    for (int i = 0; i < 4; i++)
        for (size_t e = 0; e < n; e++) buf[i][e] = (float)rand() / (float)RAND_MAX - 0.5f;
    attn_tensor q = attn_tensor_4d(buf[0], 1, L, H, D), k = attn_tensor_4d(buf[1], 1, L, H, D),
                v = attn_tensor_4d(buf[2], 1, L, H, D), dout = attn_tensor_4d(buf[3], 1, L, H, D),
                out = attn_tensor_4d(buf[4], 1, L, H, D), dq = attn_tensor_4d(buf[5], 1, L, H, D),
                dk = attn_tensor_4d(buf[6], 1, L, H, D), dv = attn_tensor_4d(buf[7], 1, L, H, D);
    attn_sdpa_options opt = ATTN_SDPA_OPTIONS_INIT;
    opt.threads = threads;
    opt.causal = causal;
    if (attn_sdpa_forward(&q, &k, &v, &opt, &out, NULL, lse)) {
        fprintf(stderr, "forward: %s\n", attn_last_error());
        return 1;
    }
    size_t bytes;
    attn_sdpa_backward_workspace_size(&q, &k, &v, &opt, &bytes);
    opt.workspace = malloc(bytes);
    opt.workspace_size = bytes;

    double flops = 0.0; /* 2.5 times the forward's, as attn_sdpa_flops counts them */
    attn_sdpa_flops(&q, &k, &v, &opt, &flops);
    flops *= 2.5;
    double peak_before = 0, peak_after = 0;
    attn_measure_fma_peak(threads, 0.5, &peak_before);
    const double core = bench_thread_peak(threads);
    backward_call call = {q, k, v, out, dout, dq, dk, dv, lse, opt};
    bench_timing t;
    if (bench_time_calls(call_backward, &call, runs, 0.0, runs, &t)) return 1;
    attn_measure_fma_peak(threads, 0.5, &peak_after);
    const double median = t.median, gflops = flops / median * 1e-9, peak = (peak_before + peak_after) / 2;
    const double cpu_gflops = flops * runs / t.cpu * 1e-9; /* per CPU-second */
    printf("backward L=S=%lld Hq=Hkv=%lld D=%lld %s, %d threads, kernel %s on %s, workspace %.1f MB\n",
           (long long)L, (long long)H, (long long)D, causal ? "causal" : "full", threads,
           attn_sdpa_backward_kernel_name(&q, &k, &v, &opt), attn_isa_name(), (double)bytes / 1e6);
    printf("  wall: median %.3f s of %d runs, %.1f GFLOP/s = %.1f%% of the %d-thread FMA peak %.1f GFLOP/s "
           "(%.1f before, %.1f after)\n",
           median, runs, gflops, 100 * gflops / peak, threads, peak, peak_before, peak_after);
    if (core > 0)
        printf("  cpu:  %.1f GFLOP/s per CPU-second = %.1f%% of the peak per thread, %.1f GFLOP/s per "
               "CPU-second with %d threads busy\n",
               cpu_gflops, 100 * cpu_gflops / core, core, threads);
    return 0;
}
