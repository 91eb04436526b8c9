/*
 * bench_timing.h — what the C benchmarks share: the clocks, one core's FP32
 * FMA peak in CPU time, the timed-calls loop (the median wall time and
 * the CPU time of the calls) and the inputs' fill.  Static functions,
 * included by backward_bench.c, gemm_bench.c, flash_cpu_time.c and
 * ggml_compare.c, which are built one file at a time
 * (each file's header gives its build line; this header is found beside
 * it).  Needs OpenMP (-fopenmp).
 */
#ifndef ATTN_BENCH_TIMING_H
#define ATTN_BENCH_TIMING_H

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <time.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

static inline double bench_seconds(clockid_t which) {
    struct timespec t;
    clock_gettime(which, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static inline double bench_wall_seconds(void) { return bench_seconds(CLOCK_MONOTONIC); }

/* One core's FMA peak in GFLOP/s of thread CPU time: twelve independent
 * zmm FMA chains in named registers, each started from a different value
 * (identical chains would be merged into one by the compiler). */
#if defined(__x86_64__)
__attribute__((target("avx512f,fma"), noinline, unused)) static double bench_core_peak_avx512(float seed) {
    const long n = 20000000;
    __m512 a0 = _mm512_set1_ps(seed), a1 = _mm512_set1_ps(seed + 1), a2 = _mm512_set1_ps(seed + 2),
           a3 = _mm512_set1_ps(seed + 3), a4 = _mm512_set1_ps(seed + 4), a5 = _mm512_set1_ps(seed + 5),
           a6 = _mm512_set1_ps(seed + 6), a7 = _mm512_set1_ps(seed + 7), a8 = _mm512_set1_ps(seed + 8),
           a9 = _mm512_set1_ps(seed + 9), a10 = _mm512_set1_ps(seed + 10), a11 = _mm512_set1_ps(seed + 11);
    const __m512 x = _mm512_set1_ps(0.999999f), y = _mm512_set1_ps(1e-7f);
    double t0 = bench_seconds(CLOCK_THREAD_CPUTIME_ID);
    for (long i = 0; i < n; i++) {
        a0 = _mm512_fmadd_ps(a0, x, y); a1 = _mm512_fmadd_ps(a1, x, y); a2 = _mm512_fmadd_ps(a2, x, y);
        a3 = _mm512_fmadd_ps(a3, x, y); a4 = _mm512_fmadd_ps(a4, x, y); a5 = _mm512_fmadd_ps(a5, x, y);
        a6 = _mm512_fmadd_ps(a6, x, y); a7 = _mm512_fmadd_ps(a7, x, y); a8 = _mm512_fmadd_ps(a8, x, y);
        a9 = _mm512_fmadd_ps(a9, x, y); a10 = _mm512_fmadd_ps(a10, x, y); a11 = _mm512_fmadd_ps(a11, x, y);
    }
    double t = bench_seconds(CLOCK_THREAD_CPUTIME_ID) - t0;
    __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                             _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
    s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11)));
    volatile float sink = _mm512_reduce_add_ps(s);
    (void)sink;
    return (double)n * 12 * 32 / t * 1e-9;
}
#endif

/* The mean over `threads` concurrent threads of bench_core_peak_avx512:
 * the peak per thread with every thread busy (two threads can share FMA
 * units, or clock lower than one).  NaN where AVX-512 is missing. */
static inline double bench_thread_peak(int threads) {
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512f")) return NAN;
    double sum = 0.0;
#pragma omp parallel num_threads(threads) reduction(+ : sum)
    sum += bench_core_peak_avx512((float)omp_get_thread_num());
    return sum / threads;
#else
    (void)threads;
    return NAN;
#endif
}

static inline int bench_compare_doubles(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* x[0 .. n) uniform in [-0.5, 0.5) from the linear congruential *seed
 * (attn bench's inputs' distribution; the same numbers on every machine). */
static inline void bench_fill_uniform(float *x, size_t n, unsigned *seed) {
    for (size_t e = 0; e < n; e++) {
        *seed = *seed * 1103515245u + 12345u;
        x[e] = (float)((*seed >> 8) & 0xffff) / 65536.0f - 0.5f;
    }
}

enum { BENCH_MAX_CALLS = 1000 };

typedef struct bench_timing {
    int calls;     /* how many were timed                         */
    double median; /* their median wall time, seconds             */
    double cpu;    /* the process's CPU seconds over all of them  */
} bench_timing;

/* Calls fn(ctx) once as a warm-up (pages, packing buffers, thread pools),
 * then times calls: at least min_calls, and more until min_seconds of wall
 * time have passed, at most max_calls (<= BENCH_MAX_CALLS).  Returns
 * nonzero, at once, when a call of fn does. */
static inline int bench_time_calls(int (*fn)(void *), void *ctx, int min_calls, double min_seconds, int max_calls,
                            bench_timing *out) {
    static double times[BENCH_MAX_CALLS];
    if (max_calls > BENCH_MAX_CALLS) max_calls = BENCH_MAX_CALLS;
    int status = fn(ctx);
    if (status) return status;
    int calls = 0;
    double cpu = 0.0;
    const double start = bench_wall_seconds();
    while (calls < max_calls && (calls < min_calls || bench_wall_seconds() - start < min_seconds)) {
        const double c0 = bench_seconds(CLOCK_PROCESS_CPUTIME_ID), t0 = bench_wall_seconds();
        if ((status = fn(ctx))) return status;
        times[calls++] = bench_wall_seconds() - t0;
        cpu += bench_seconds(CLOCK_PROCESS_CPUTIME_ID) - c0;
    }
    qsort(times, (size_t)calls, sizeof *times, bench_compare_doubles);
    out->calls = calls;
    out->median = times[calls / 2];
    out->cpu = cpu;
    return 0;
}

#endif /* ATTN_BENCH_TIMING_H */
