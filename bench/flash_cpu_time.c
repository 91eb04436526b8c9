/*
 * flash_cpu_time.c — the CPU time of one flash attn_sdpa_forward call, for
 * A/B comparisons of kernel changes on a shared machine: the process's CPU
 * time does not count the time other processes take from its cores (the
 * wall time does), so two builds run interleaved (bench/flash_ab.sh)
 * compare within a few percent where `attn bench` rows move by 2x.
 *
 *   cc -O2 -fopenmp -I include -I build/include bench/flash_cpu_time.c \
 *      build/libattn.a -lopenblas -lm -o flash_cpu_time
 *   ./flash_cpu_time L HKV D CAUSAL THREADS RUNS
 *
 * q [1, L, 16, D], k and v [1, L, HKV, D] contiguous, uniform in [-0.5, 0.5)
 * from a fixed seed (attn bench's shapes); one warm-up call, then RUNS
 * calls.  Prints the median and fastest wall and CPU milliseconds and the
 * visible-pair GFLOP per CPU-second (compare with one core's FMA peak).
 */
#include "attn.h"
#include "bench_timing.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_ms(clockid_t clock) { return bench_seconds(clock) * 1e3; }

int main(int argc, char **argv) {
    if (argc < 7) {
        fprintf(stderr, "usage: %s L HKV D CAUSAL THREADS RUNS\n", argv[0]);
        return 2;
    }
    const int64_t len = atoll(argv[1]), heads_kv = atoll(argv[2]), dim = atoll(argv[3]), heads_q = 16;
    const int causal = atoi(argv[4]), threads = atoi(argv[5]), runs = atoi(argv[6]);
    const size_t n_q = (size_t)(len * heads_q * dim), n_kv = (size_t)(len * heads_kv * dim);
    float *q = malloc(n_q * sizeof *q), *k = malloc(n_kv * sizeof *k), *v = malloc(n_kv * sizeof *v);
    float *o = malloc(n_q * sizeof *o);
    double *wall = malloc((size_t)runs * sizeof *wall), *cpu = malloc((size_t)runs * sizeof *cpu);
    if (!q || !k || !v || !o || !wall || !cpu || runs < 1) return 1;
    unsigned seed = 1;
    bench_fill_uniform(q, n_q, &seed);
    bench_fill_uniform(k, n_kv, &seed);
    bench_fill_uniform(v, n_kv, &seed);
    attn_tensor tq = attn_tensor_4d(q, 1, len, heads_q, dim), tk = attn_tensor_4d(k, 1, len, heads_kv, dim);
    attn_tensor tv = attn_tensor_4d(v, 1, len, heads_kv, dim), to = attn_tensor_4d(o, 1, len, heads_q, dim);
    attn_sdpa_options opt = ATTN_SDPA_OPTIONS_INIT;
    opt.kernel = ATTN_KERNEL_FLASH;
    opt.threads = threads;
    opt.causal = causal;
    for (int r = -1; r < runs; r++) {
        const double w0 = now_ms(CLOCK_MONOTONIC), c0 = now_ms(CLOCK_PROCESS_CPUTIME_ID);
        if (attn_sdpa_forward(&tq, &tk, &tv, &opt, &to, NULL, NULL) != ATTN_OK) {
            fprintf(stderr, "%s\n", attn_last_error());
            return 1;
        }
        if (r < 0) continue; /* the warm-up */
        wall[r] = now_ms(CLOCK_MONOTONIC) - w0;
        cpu[r] = now_ms(CLOCK_PROCESS_CPUTIME_ID) - c0;
    }
    qsort(wall, (size_t)runs, sizeof *wall, bench_compare_doubles);
    qsort(cpu, (size_t)runs, sizeof *cpu, bench_compare_doubles);
    const double pairs = causal ? (double)len * (double)(len + 1) / 2 : (double)len * (double)len;
    const double gflop = 4.0 * (double)heads_q * pairs * (double)dim * 1e-9;
    printf("L=%lld Hkv=%lld D=%lld %s threads=%d: wall median %.2f fastest %.2f ms | cpu median %.2f fastest %.2f ms | "
           "%.1f GFLOP per cpu-s\n",
           (long long)len, (long long)heads_kv, (long long)dim, causal ? "causal" : "full", threads, wall[runs / 2], wall[0],
           cpu[runs / 2], cpu[0], gflop / (cpu[runs / 2] * 1e-3));
    return 0;
}
