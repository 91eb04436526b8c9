/*
 * machine.c — this machine's physical limits, measured rather than assumed
 * (DESIGN.md §5): the FP32 fused multiply-add peak of the cores and the
 * memory bandwidth of a STREAM-style triad.  `attn bench` reports every
 * kernel as a fraction of these two numbers, measured in the same run.
 *
 * The peak loop is a micro-kernel of each instruction set
 * (src/isa/templates/peak.h says why it is written as it is: twelve chains
 * in named variables), in the table of src/flash/ukernels.h, so it uses the
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
#include "flash/ukernels.h"

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

static double now_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The widest FMA this CPU runs is the machine's limit, whichever
 * instruction set a kernel happens to use. */
const char *attn_fma_peak_isa(void) { return attn__ukernels_widest()->peak_isa; }

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
    const ukernel_table *isa = attn__ukernels_widest();
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
