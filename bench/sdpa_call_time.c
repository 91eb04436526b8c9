/*
 * sdpa_call_time.c — the time of one attn_sdpa_forward call from C, the
 * baseline bench/python_overhead.py compares the Python calls with.
 *
 *   cc -O2 -fopenmp -I include -I build/include bench/sdpa_call_time.c \
 *      build/libattn.a -lm -o sdpa_call_time
 *   ./sdpa_call_time L H D [threads [runs]]        (default threads 1, runs 200)
 *
 * q, k, v [1, L, H, D] contiguous (S = L), causal off; prints the fastest
 * and the median of `runs` calls in microseconds.
 */
#include "attn.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec * 1e-3;
}

static int by_value(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s L H D [threads [runs]]\n", argv[0]);
        return 2;
    }
    const int64_t l = atoll(argv[1]), h = atoll(argv[2]), d = atoll(argv[3]);
    const int threads = argc > 4 ? atoi(argv[4]) : 1, runs = argc > 5 ? atoi(argv[5]) : 200;
    const size_t n = (size_t)(l * h * d);
    float *q = malloc(n * sizeof *q), *o = malloc(n * sizeof *o);
    double *times = malloc((size_t)runs * sizeof *times);
    if (!q || !o || !times || runs < 1) return 1;
    for (size_t i = 0; i < n; i++) q[i] = (float)rand() / (float)RAND_MAX - 0.5f;
    attn_tensor Q = attn_tensor_4d(q, 1, l, h, d), O = attn_tensor_4d(o, 1, l, h, d);
    attn_sdpa_options opt = ATTN_SDPA_OPTIONS_INIT;
    opt.threads = threads;
    for (int r = 0; r < runs; r++) {
        const double t0 = now_us();
        if (attn_sdpa_forward(&Q, &Q, &Q, &opt, &O, NULL, NULL) != ATTN_OK) {
            fprintf(stderr, "attn: %s\n", attn_last_error());
            return 1;
        }
        times[r] = now_us() - t0;
    }
    qsort(times, (size_t)runs, sizeof *times, by_value);
    printf("C attn_sdpa_forward L=%lld H=%lld D=%lld threads=%d: min %.1f us, median %.1f us\n",
           (long long)l, (long long)h, (long long)d, threads, times[0], times[runs / 2]);
    free(q);
    free(o);
    free(times);
    return 0;
}
