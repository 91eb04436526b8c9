/*
 * machine.c — this machine's physical limits, measured rather than assumed
 * (DESIGN.md §5): the FP32 fused multiply-add peak of the cores and the
 * memory bandwidth of a STREAM-style triad.  `attn bench` reports every
 * kernel as a fraction of these two numbers, measured in the same run.
 *
 * The peak loop keeps twelve independent accumulators in NAMED vector
 * variables: an array of accumulators can be compiled to a store and a
 * reload every iteration, which then reports half the real peak or less.
 * Twelve chains cover an FMA latency of 4 cycles on two pipes with room to
 * spare.  Check with `objdump -d` that the inner loop is only FMAs, a
 * counter and a branch (no loads or stores).
 *
 * Changelog:
 *   v1  12 named accumulators per ISA (AVX-512, AVX2+FMA, portable C), all
 *       starting from the same value: gcc 12 folded the twelve identical
 *       chains into ONE (objdump showed a single vfmadd per iteration), so
 *       the count of FLOPs no longer matched the work.  Fixed by seeding
 *       each chain differently.
 *   v2  the best of 0.1 s windows instead of one long average: on a shared
 *       machine a moment of contention is not the peak.  Measured on the
 *       development machine (Xeon, Emerald Rapids, KVM): 150 GFLOP/s on one
 *       thread with AVX-512 (64 FLOP/cycle at ~2.35 GHz), half that with AVX2.
 */
#include "core/internal.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

/* FMAs per accumulator between two looks at the clock: long enough that the
 * clock costs nothing, short enough (~40 µs) to stop close to the deadline. */
enum { ATTN_PEAK_INNER = 1 << 14 };
/* Length of one timed window of the peak loop, in seconds. */
#define ATTN_PEAK_WINDOW 0.1

/* The triad: default size (3 arrays of 256 MiB; 2.5x the 300 MiB L3 that
 * the development machine's VM reports, and far beyond a core's share of
 * it) and passes (the first is a warm-up). */
#define ATTN_TRIAD_DEFAULT_BYTES ((size_t)3 << 28)
enum { ATTN_TRIAD_REPEATS = 8 };

/* Each chain computes acc = acc * mul + add, which converges to
 * add / (1 - mul) without overflow, underflow or denormals. */
static const float peak_mul = 0.999999f, peak_add = 1e-6f;

static double now_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* One peak loop per ISA: runs ATTN_PEAK_INNER FMAs on each of twelve chains
 * of `lanes` floats per call, and returns a value depending on every chain
 * so that the compiler cannot drop any of them. */
typedef float (*peak_chunk_fn)(float seed);

#define PEAK_BODY(FMA)                                                                  \
    for (int i = 0; i < ATTN_PEAK_INNER; i++) {                                         \
        a0 = FMA(a0, m, s); a1 = FMA(a1, m, s); a2 = FMA(a2, m, s); a3 = FMA(a3, m, s);  \
        a4 = FMA(a4, m, s); a5 = FMA(a5, m, s); a6 = FMA(a6, m, s); a7 = FMA(a7, m, s);  \
        a8 = FMA(a8, m, s); a9 = FMA(a9, m, s); a10 = FMA(a10, m, s);                  \
        a11 = FMA(a11, m, s);                                                           \
    }

#if defined(__x86_64__)
#define FMA512(a, b, c) _mm512_fmadd_ps(a, b, c)
__attribute__((target("avx512f"))) static float peak_chunk_avx512(float seed) {
    const __m512 m = _mm512_set1_ps(peak_mul), s = _mm512_set1_ps(peak_add);
    __m512 a0 = _mm512_set1_ps(seed), a1 = _mm512_set1_ps(seed + 1), a2 = _mm512_set1_ps(seed + 2),
           a3 = _mm512_set1_ps(seed + 3), a4 = _mm512_set1_ps(seed + 4), a5 = _mm512_set1_ps(seed + 5),
           a6 = _mm512_set1_ps(seed + 6), a7 = _mm512_set1_ps(seed + 7), a8 = _mm512_set1_ps(seed + 8),
           a9 = _mm512_set1_ps(seed + 9), a10 = _mm512_set1_ps(seed + 10), a11 = _mm512_set1_ps(seed + 11);
    PEAK_BODY(FMA512)
    __m512 sum = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                               _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
    sum = _mm512_add_ps(sum, _mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11)));
    return _mm512_reduce_add_ps(sum);
}

#define FMA256(a, b, c) _mm256_fmadd_ps(a, b, c)
__attribute__((target("avx2,fma"))) static float peak_chunk_avx2(float seed) {
    const __m256 m = _mm256_set1_ps(peak_mul), s = _mm256_set1_ps(peak_add);
    __m256 a0 = _mm256_set1_ps(seed), a1 = _mm256_set1_ps(seed + 1), a2 = _mm256_set1_ps(seed + 2),
           a3 = _mm256_set1_ps(seed + 3), a4 = _mm256_set1_ps(seed + 4), a5 = _mm256_set1_ps(seed + 5),
           a6 = _mm256_set1_ps(seed + 6), a7 = _mm256_set1_ps(seed + 7), a8 = _mm256_set1_ps(seed + 8),
           a9 = _mm256_set1_ps(seed + 9), a10 = _mm256_set1_ps(seed + 10), a11 = _mm256_set1_ps(seed + 11);
    PEAK_BODY(FMA256)
    __m256 sum = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                               _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
    sum = _mm256_add_ps(sum, _mm256_add_ps(_mm256_add_ps(a8, a9), _mm256_add_ps(a10, a11)));
    float lanes[8];
    _mm256_storeu_ps(lanes, sum);
    return lanes[0] + lanes[1] + lanes[2] + lanes[3] + lanes[4] + lanes[5] + lanes[6] + lanes[7];
}
#endif

/* Portable: what the compiler makes of scalar fmaf (a libm call where the
 * target has no FMA instruction, so expect a low figure there). */
#define FMA1(a, b, c) fmaf(a, b, c)
static float peak_chunk_scalar(float seed) {
    const float m = peak_mul, s = peak_add;
    float a0 = seed, a1 = seed + 1, a2 = seed + 2, a3 = seed + 3, a4 = seed + 4, a5 = seed + 5,
          a6 = seed + 6, a7 = seed + 7, a8 = seed + 8, a9 = seed + 9, a10 = seed + 10,
          a11 = seed + 11;
    PEAK_BODY(FMA1)
    return ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7)) + ((a8 + a9) + (a10 + a11));
}

typedef struct peak_isa {
    const char *name;
    int lanes; /* floats per accumulator */
    peak_chunk_fn chunk;
} peak_isa;

/* The widest FMA this CPU runs: that is the machine's limit, whichever
 * instruction set a kernel happens to use. */
static peak_isa widest_peak_isa(void) {
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return (peak_isa){"avx512", 16, peak_chunk_avx512};
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return (peak_isa){"avx2", 8, peak_chunk_avx2};
#endif
    return (peak_isa){"scalar", 1, peak_chunk_scalar};
}

const char *attn_fma_peak_isa(void) {
    return widest_peak_isa().name;
}

int attn_thread_count(int requested) {
    return attn_resolve_threads(requested > 0 ? requested : 0);
}

/* One timed window: every thread runs chunks until the shared deadline; the
 * rate is the total work over the wall time between the two barriers, so a
 * thread that was descheduled lowers the figure rather than hiding.
 * Returns GFLOP/s, or a non-finite value if the loop went wrong. */
static double peak_window(const peak_isa *isa, int nthreads, double seconds) {
    double total_chunks = 0.0, sink = 0.0, t_start = 0.0, t_end = 0.0;
#ifdef ATTN_HAVE_OPENMP
#pragma omp parallel num_threads(nthreads) reduction(+ : total_chunks, sink)
#else
    (void)nthreads;
#endif
    {
#ifdef ATTN_HAVE_OPENMP
#pragma omp single
#endif
        t_start = now_seconds();
        const double deadline = t_start + seconds;
        int64_t chunks = 0;
        float value = 1.0f;
        do {
            value = isa->chunk(value * 1e-6f + 1.0f);
            chunks++;
        } while (now_seconds() < deadline);
        total_chunks += (double)chunks;
        sink += value;
#ifdef ATTN_HAVE_OPENMP
#pragma omp barrier
#pragma omp single
#endif
        t_end = now_seconds();
    }
    if (!isfinite(sink) || t_end <= t_start) return NAN;
    return total_chunks * 2.0 * 12.0 * isa->lanes * (double)ATTN_PEAK_INNER / (t_end - t_start) * 1e-9;
}

attn_status attn_measure_fma_peak(int threads, double seconds, double *gflops) {
    if (!gflops) return attn_fail(ATTN_ERR_INVALID_ARGUMENT, "gflops is NULL");
    if (threads < 0) return attn_fail(ATTN_ERR_INVALID_ARGUMENT, "threads is %d; expected 0 (default) or more", threads);
    if (!(seconds > 0.0 && seconds <= 600.0))
        return attn_fail(ATTN_ERR_INVALID_ARGUMENT, "seconds is %g; expected a value in (0, 600]", seconds);
    const peak_isa isa = widest_peak_isa();
    const int nthreads = attn_resolve_threads(threads);

    /* The best of short windows: on a shared machine another process takes
     * a core now and then, and the peak is what the cores do when it does not. */
    const double window = seconds < ATTN_PEAK_WINDOW ? seconds : ATTN_PEAK_WINDOW;
    const int windows = (int)(seconds / window + 0.5);
    double best = 0.0;
    for (int w = 0; w < windows; w++) {
        double rate = peak_window(&isa, nthreads, window);
        if (!isfinite(rate))
            return attn_fail(ATTN_ERR_INTERNAL, "the FMA peak loop produced no usable measurement");
        if (rate > best) best = rate;
    }
    *gflops = best;
    return ATTN_OK;
}

attn_status attn_measure_bandwidth(int threads, size_t bytes, double *gbytes_per_s) {
    if (!gbytes_per_s) return attn_fail(ATTN_ERR_INVALID_ARGUMENT, "gbytes_per_s is NULL");
    if (threads < 0) return attn_fail(ATTN_ERR_INVALID_ARGUMENT, "threads is %d; expected 0 (default) or more", threads);
    if (bytes == 0) bytes = ATTN_TRIAD_DEFAULT_BYTES;
    const size_t n = bytes / (3 * sizeof(double)); /* elements per array */
    if (n < 4096)
        return attn_fail(ATTN_ERR_INVALID_ARGUMENT, "bytes is %zu; the triad needs at least %zu",
                         bytes, (size_t)4096 * 3 * sizeof(double));
    const int nthreads = attn_resolve_threads(threads);
#ifndef ATTN_HAVE_OPENMP
    (void)nthreads;
#endif
    attn_status status = ATTN_OK;
    double *a = malloc(n * sizeof(double)), *b = malloc(n * sizeof(double)),
           *c = malloc(n * sizeof(double));
    if (!a || !b || !c) {
        status = attn_fail(ATTN_ERR_OUT_OF_MEMORY, "cannot allocate 3 arrays of %zu bytes for the triad",
                           n * sizeof(double));
        goto cleanup;
    }
    const int64_t count = (int64_t)n;
    const double scalar = 3.0;

    /* First touch with the same static schedule as the triad, so that each
     * thread's pages sit on its own memory node. */
#ifdef ATTN_HAVE_OPENMP
#pragma omp parallel for schedule(static) num_threads(nthreads)
#endif
    for (int64_t i = 0; i < count; i++) {
        a[i] = 0.0;
        b[i] = 1.0;
        c[i] = 2.0;
    }
    double best = INFINITY;
    for (int rep = 0; rep < ATTN_TRIAD_REPEATS; rep++) {
        double t0 = now_seconds();
#ifdef ATTN_HAVE_OPENMP
#pragma omp parallel for schedule(static) num_threads(nthreads)
#endif
        for (int64_t i = 0; i < count; i++) a[i] = b[i] + scalar * c[i];
        double t = now_seconds() - t0;
        if (rep > 0 && t < best) best = t; /* pass 0 is the warm-up */
    }
    /* The result is read back so that the triad cannot be optimised away. */
    if (a[0] != 7.0 || a[count - 1] != 7.0 || !(best > 0.0)) {
        status = attn_fail(ATTN_ERR_INTERNAL, "the triad produced a wrong result or no time");
        goto cleanup;
    }
    /* STREAM's count: 2 reads + 1 write of 8 bytes per element.  The write
     * also costs a read for ownership on write-allocate caches, which STREAM
     * does not count; neither do we. */
    *gbytes_per_s = 3.0 * sizeof(double) * (double)n / best * 1e-9;

cleanup:
    free(a);
    free(b);
    free(c);
    return status;
}
