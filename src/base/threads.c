/*
 * threads.c — the parallel policy (threads.h).
 */
#include "base/threads.h"

#include <stdlib.h>

#ifdef ATTN_HAVE_OPENMP
#include <omp.h>
#endif

int attn__threads_requested(int requested) {
#ifdef ATTN_HAVE_OPENMP
    if (requested > 0) return requested;
    const char *env = getenv("ATTN_NUM_THREADS");
    if (env && *env) {
        char *end;
        long n = strtol(env, &end, 10);
        if (*end == 0 && n > 0 && n <= 4096) return (int)n;
    }
    return omp_get_max_threads();
#else
    (void)requested;
    return 1;
#endif
}

int attn__threads_for(int requested, double flops, double items) {
    double threads = attn__threads_requested(requested);
    const double deserved = flops / THREADS_MIN_FLOPS_PER_THREAD;
    if (threads > deserved) threads = deserved;
    if (items > 0 && threads > items) threads = items;
    return threads < 1 ? 1 : (int)threads;
}
