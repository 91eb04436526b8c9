/*
 * machine.c — this machine's physical limits, measured rather than assumed
 * (DESIGN.md §5): the FP32 fused multiply-add peak of the cores and the
 * memory bandwidth of a STREAM-style triad, and the read-only bandwidth a
 * decode step can reach.  `attn bench` reports every kernel as a fraction
 * of these numbers, measured in the same run.
 *
 * The peak loop is a micro-kernel of each instruction set
 * (src/isa/templates/peak.h says why it is written as it is: twelve chains
 * in named variables), in the table of src/isa/flash_table.h, so it uses the
 * attention kernels' own vector mapping; the widest table the CPU runs
 * measures the peak.
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
 *   v3  the loop moved into the ISA layer (one template for every ISA).
 */
#include "attn_machine.h"

#include "base/base.h"
#include "base/threads.h"
#include "isa/isa.h"

#ifdef ATTN_HAVE_OPENMP
#include <omp.h>
#endif
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

/* Length of one timed window of the peak loop, in seconds. */
#define ATTN_PEAK_WINDOW 0.1

/* The triad: default size (3 arrays of 256 MiB; 2.5x the 300 MiB L3 that
 * the development machine's VM reports, and far beyond a core's share of
 * it) and passes (the first is a warm-up). */
#define ATTN_TRIAD_DEFAULT_BYTES ((size_t)3 << 28)
enum { ATTN_TRIAD_REPEATS = 8 };
/* The read probe's default buffer, and its passes (the first a warm-up). */
#define ATTN_READ_DEFAULT_BYTES ((size_t)1 << 30)
enum { ATTN_READ_REPEATS = 8 };

static double now_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The widest FMA this CPU runs is the machine's limit, whichever
 * instruction set a kernel happens to use. */
const char *attn_fma_peak_isa(void) { return attn__isa_flash(attn__isa_widest())->peak_isa; }

int attn_thread_count(int requested) { return attn__threads_requested(requested > 0 ? requested : 0); }

/* One timed window: every thread runs chunks until the shared deadline; the
 * rate is the total work over the wall time between the two barriers, so a
 * thread that was descheduled lowers the figure rather than hiding.
 * Returns GFLOP/s, or a non-finite value if the loop went wrong. */
static double peak_window(const ukernel_table *isa, int nthreads, double seconds) {
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
            value = isa->peak_chunk(value * 1e-6f + 1.0f);
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
    return total_chunks * 2.0 * 12.0 * isa->peak_lanes * (double)UKERNEL_PEAK_INNER / (t_end - t_start) * 1e-9;
}

attn_status attn_measure_fma_peak(int threads, double seconds, double *gflops) {
    if (!gflops) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "gflops is NULL");
    if (threads < 0) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "threads is %d; expected 0 (default) or more", threads);
    if (!(seconds > 0.0 && seconds <= 600.0))
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "seconds is %g; expected a value in (0, 600]", seconds);
    const ukernel_table *isa = attn__isa_flash(attn__isa_widest());
    const int nthreads = attn__threads_requested(threads);

    /* The best of short windows: on a shared machine another process takes
     * a core now and then, and the peak is what the cores do when it does not. */
    const double window = seconds < ATTN_PEAK_WINDOW ? seconds : ATTN_PEAK_WINDOW;
    const int windows = (int)(seconds / window + 0.5);
    double best = 0.0;
    for (int w = 0; w < windows; w++) {
        double rate = peak_window(isa, nthreads, window);
        if (!isfinite(rate))
            return attn__fail(ATTN_ERR_INTERNAL, "the FMA peak loop produced no usable measurement");
        if (rate > best) best = rate;
    }
    *gflops = best;
    return ATTN_OK;
}

attn_status attn_measure_bandwidth(int threads, size_t bytes, double *gbytes_per_s) {
    if (!gbytes_per_s) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "gbytes_per_s is NULL");
    if (threads < 0) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "threads is %d; expected 0 (default) or more", threads);
    if (bytes == 0) bytes = ATTN_TRIAD_DEFAULT_BYTES;
    const size_t n = bytes / (3 * sizeof(double)); /* elements per array */
    if (n < 4096)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "bytes is %zu; the triad needs at least %zu",
                         bytes, (size_t)4096 * 3 * sizeof(double));
    const int nthreads = attn__threads_requested(threads);
#ifndef ATTN_HAVE_OPENMP
    (void)nthreads;
#endif
    attn_status status = ATTN_OK;
    double *a = malloc(n * sizeof(double)), *b = malloc(n * sizeof(double)),
           *c = malloc(n * sizeof(double));
    if (!a || !b || !c) {
        status = attn__fail(ATTN_ERR_OUT_OF_MEMORY, "cannot allocate 3 arrays of %zu bytes for the triad",
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
        status = attn__fail(ATTN_ERR_INTERNAL, "the triad produced a wrong result or no time");
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

/* The sum of words [begin, end) of x: eight independent sums, one word of
 * each cache line apiece, so that the adds never wait on each other and the
 * loads are the only limit; integer adds, which the compiler may reorder
 * and vectorise freely (a float sum in order would be latency-bound). */
static uint64_t sum_words(const uint64_t *x, int64_t begin, int64_t end) {
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0;
    for (int64_t i = begin; i < end; i += 8) {
        s0 += x[i];
        s1 += x[i + 1];
        s2 += x[i + 2];
        s3 += x[i + 3];
        s4 += x[i + 4];
        s5 += x[i + 5];
        s6 += x[i + 6];
        s7 += x[i + 7];
    }
    return s0 + s1 + s2 + s3 + s4 + s5 + s6 + s7;
}

attn_status attn_measure_read_bandwidth(int threads, size_t bytes, double *gbytes_per_s) {
    if (!gbytes_per_s) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "gbytes_per_s is NULL");
    if (threads < 0) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "threads is %d; expected 0 (default) or more", threads);
    if (bytes == 0) bytes = ATTN_READ_DEFAULT_BYTES;
    const size_t lines = bytes / 64; /* whole cache lines of 8 words */
    if (lines < 4096)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "bytes is %zu; the read probe needs at least %zu",
                          bytes, (size_t)4096 * 64);
    const int nthreads = attn__threads_requested(threads);
#ifndef ATTN_HAVE_OPENMP
    (void)nthreads;
#endif
    const int64_t words = (int64_t)lines * 8;
    uint64_t *x = malloc((size_t)words * sizeof(uint64_t));
    if (!x) return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "cannot allocate %zu bytes for the read probe", bytes);
    /* First touch with the schedule of the passes: each thread's share sits
     * on its own memory node. */
#ifdef ATTN_HAVE_OPENMP
#pragma omp parallel for schedule(static) num_threads(nthreads)
#endif
    for (int64_t line = 0; line < (int64_t)lines; line++)
        for (int w = 0; w < 8; w++) x[line * 8 + w] = 1;
    double best = INFINITY;
    uint64_t total = 0;
    for (int rep = 0; rep < ATTN_READ_REPEATS; rep++) {
        uint64_t sum = 0;
        double t0 = now_seconds();
#ifdef ATTN_HAVE_OPENMP
#pragma omp parallel num_threads(nthreads) reduction(+ : sum)
        {
            const int64_t n = omp_get_num_threads(), t = omp_get_thread_num();
            const int64_t share = ((int64_t)lines + n - 1) / n;
            const int64_t first = t * share, last = first + share < (int64_t)lines ? first + share : (int64_t)lines;
            if (first < last) sum += sum_words(x, first * 8, last * 8);
        }
#else
        sum = sum_words(x, 0, words);
#endif
        double t = now_seconds() - t0;
        total = sum;
        if (rep > 0 && t < best) best = t; /* pass 0 is the warm-up */
    }
    attn_status status = ATTN_OK;
    /* The sums are checked so that the passes cannot be optimised away. */
    if (total != (uint64_t)words || !(best > 0.0))
        status = attn__fail(ATTN_ERR_INTERNAL, "the read probe produced a wrong sum or no time");
    else
        *gbytes_per_s = (double)words * sizeof(uint64_t) / best * 1e-9;
    free(x);
    return status;
}
