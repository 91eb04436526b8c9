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

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <omp.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

static double wall_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static double cpu_seconds(clockid_t which) {
    struct timespec t;
    clock_gettime(which, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* One core's FMA peak in GFLOP/s of thread CPU time: twelve independent
 * zmm FMA chains in named registers, each started from a different value
 * (identical chains would be merged into one by the compiler); 0 where
 * AVX-512 is missing. */
#if defined(__x86_64__)
__attribute__((target("avx512f,fma"), noinline)) static double core_peak_avx512(float seed) {
    const long n = 20000000;
    __m512 a0 = _mm512_set1_ps(seed), a1 = _mm512_set1_ps(seed + 1), a2 = _mm512_set1_ps(seed + 2),
           a3 = _mm512_set1_ps(seed + 3), a4 = _mm512_set1_ps(seed + 4), a5 = _mm512_set1_ps(seed + 5),
           a6 = _mm512_set1_ps(seed + 6), a7 = _mm512_set1_ps(seed + 7), a8 = _mm512_set1_ps(seed + 8),
           a9 = _mm512_set1_ps(seed + 9), a10 = _mm512_set1_ps(seed + 10), a11 = _mm512_set1_ps(seed + 11);
    const __m512 x = _mm512_set1_ps(0.999999f), y = _mm512_set1_ps(1e-7f);
    double t0 = cpu_seconds(CLOCK_THREAD_CPUTIME_ID);
    for (long i = 0; i < n; i++) {
        a0 = _mm512_fmadd_ps(a0, x, y); a1 = _mm512_fmadd_ps(a1, x, y); a2 = _mm512_fmadd_ps(a2, x, y);
        a3 = _mm512_fmadd_ps(a3, x, y); a4 = _mm512_fmadd_ps(a4, x, y); a5 = _mm512_fmadd_ps(a5, x, y);
        a6 = _mm512_fmadd_ps(a6, x, y); a7 = _mm512_fmadd_ps(a7, x, y); a8 = _mm512_fmadd_ps(a8, x, y);
        a9 = _mm512_fmadd_ps(a9, x, y); a10 = _mm512_fmadd_ps(a10, x, y); a11 = _mm512_fmadd_ps(a11, x, y);
    }
    double t = cpu_seconds(CLOCK_THREAD_CPUTIME_ID) - t0;
    __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                             _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
    s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11)));
    volatile float sink = _mm512_reduce_add_ps(s);
    (void)sink;
    return (double)n * 12 * 32 / t * 1e-9;
}
#endif

/* The mean over `threads` concurrent threads of core_peak_avx512. */
static double thread_peak(int threads) {
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512f")) return 0.0;
    double sum = 0.0;
#pragma omp parallel num_threads(threads) reduction(+ : sum)
    sum += core_peak_avx512((float)omp_get_thread_num());
    return sum / threads;
#else
    (void)threads;
    return 0.0;
#endif
}

static int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
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
    const double core = thread_peak(threads);
    double times[100], cpu_total = 0;
    attn_sdpa_backward(&q, &k, &v, &opt, &out, lse, &dout, &dq, &dk, &dv); /* warm-up */
    for (int r = 0; r < runs; r++) {
        double c0 = cpu_seconds(CLOCK_PROCESS_CPUTIME_ID), w0 = wall_seconds();
        if (attn_sdpa_backward(&q, &k, &v, &opt, &out, lse, &dout, &dq, &dk, &dv)) {
            fprintf(stderr, "backward: %s\n", attn_last_error());
            return 1;
        }
        times[r] = wall_seconds() - w0;
        cpu_total += cpu_seconds(CLOCK_PROCESS_CPUTIME_ID) - c0;
    }
    attn_measure_fma_peak(threads, 0.5, &peak_after);
    qsort(times, (size_t)runs, sizeof times[0], compare_doubles);
    const double median = times[runs / 2], gflops = flops / median * 1e-9, peak = (peak_before + peak_after) / 2;
    const double cpu_gflops = flops * runs / cpu_total * 1e-9; /* per CPU-second */
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
