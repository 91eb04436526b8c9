/*
 * eltwise_bench.c — the decoder's elementwise micro-kernels
 * (src/isa/eltwise_table.h) on the models' shapes, each ISA this CPU runs
 * against the reference twins (double, libm: the decoder's arithmetic
 * before the kernels).  Prints, per kernel and shape, the median time per
 * call over ROUNDS interleaved rounds (each round: every table once),
 * its spread (min..max) and the speedup over "ref".  One thread (the
 * kernels run on one).  Built and run by bench/eltwise_bench.sh.
 *
 * usage: eltwise_bench [ROUNDS]
 */
#include "model/eltwise.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

enum { KERNELS = 4, TABLES = 4, MAX_ROUNDS = 64 };
static const char *const kernel_names[KERNELS] = {"silu_mul", "gelu_tanh_mul", "rmsnorm", "add"};
static const char *const table_names[TABLES] = {"ref", "generic", "avx2", "avx512"};

/* Seconds per call of kernel k on table e over n elements (rows of width
 * `width` for rmsnorm), the best of a few repetitions within ~20 ms. */
static double time_kernel(const eltwise_kernels *e, int k, float *g, const float *u, const float *w, int64_t n,
                          int64_t width) {
    int reps = 1;
    double best = 1e30;
    for (int pass = 0; pass < 2; pass++) {
        const double t0 = now();
        for (int r = 0; r < reps; r++) {
            switch (k) {
            case 0: e->silu_mul(g, u, n); break;
            case 1: e->gelu_tanh_mul(g, u, n); break;
            case 2:
                for (int64_t i = 0; i < n; i += width) e->rmsnorm(g + i, width, w, 1e-6, g + i);
                break;
            case 3: e->add(g, u, n); break;
            default: break; /* the copy alone */
            }
            /* keep the values in range (the gates shrink them, add grows
             * them): the copy's own time is taken off below */
            if (k != 2) memcpy(g, u, (size_t)n * sizeof *g);
            if (k == 4) memcpy(g, u, (size_t)n * sizeof *g);
        }
        const double t = (now() - t0) / reps;
        if (t < best) best = t;
        if (pass == 0) reps = (int)fmax(1.0, 0.02 / fmax(t, 1e-9));
    }
    return best;
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 5;
    if (rounds < 1 || rounds > MAX_ROUNDS) rounds = 5;
    /* Gemma 3 270M: d 640, F 2048; Qwen2.5 0.5B: d 896, F 4864; decode one token, prefill 512 */
    const struct { const char *name; int64_t rows, width; } shapes[] = {
        {"gemma FFN decode (1x2048)", 1, 2048},     {"gemma FFN prefill (512x2048)", 512, 2048},
        {"qwen FFN decode (1x4864)", 1, 4864},      {"qwen FFN prefill (512x4864)", 512, 4864},
        {"gemma d decode (1x640)", 1, 640},         {"qwen d prefill (512x896)", 512, 896},
    };
    const int64_t maxn = 512 * 4864;
    float *g = malloc((size_t)maxn * sizeof *g), *u = malloc((size_t)maxn * sizeof *u), *w = malloc(8192 * sizeof *w);
    srand(1);
    for (int64_t i = 0; i < maxn; i++) u[i] = (float)rand() / (float)RAND_MAX * 8.0f - 4.0f;
    for (int i = 0; i < 8192; i++) w[i] = 1.0f + (float)i / 8192.0f;
    const eltwise_kernels *tables[TABLES];
    for (int t = 0; t < TABLES; t++) tables[t] = attn__eltwise_named(table_names[t]);
    printf("%-30s %-14s %-8s %12s %22s %8s\n", "shape", "kernel", "table", "median us", "spread us", "vs ref");
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int k = 0; k < KERNELS; k++) {
            /* gates on the FFN shapes, rmsnorm and add on the d shapes and FFN alike */
            static double times[TABLES][MAX_ROUNDS];
            const int64_t n = shapes[s].rows * shapes[s].width;
            for (int r = 0; r < rounds; r++)
                for (int t = 0; t < TABLES; t++)
                    if (tables[t]) {
                        memcpy(g, u, (size_t)n * sizeof *g);
                        times[t][r] = time_kernel(tables[t], k, g, u, w, n, shapes[s].width);
                        if (k != 2) times[t][r] -= time_kernel(tables[t], 4, g, u, w, n, shapes[s].width) / 2;
                    }
            double ref_median = 0;
            for (int t = 0; t < TABLES; t++) {
                if (!tables[t]) continue;
                qsort(times[t], (size_t)rounds, sizeof(double), cmp);
                const double med = times[t][rounds / 2];
                if (t == 0) ref_median = med;
                char spread[64];
                snprintf(spread, sizeof spread, "%.2f..%.2f", 1e6 * times[t][0], 1e6 * times[t][rounds - 1]);
                printf("%-30s %-14s %-8s %12.2f %22s %7.1fx\n", shapes[s].name, kernel_names[k], table_names[t],
                       1e6 * med, spread, ref_median / med);
            }
        }
    free(g), free(u), free(w);
    return 0;
}
