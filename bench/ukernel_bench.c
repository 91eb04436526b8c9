/*
 * ukernel_bench.c — the forward's tile micro-kernels in isolation, hot in
 * cache: the fastest of 30 batches of 200 calls each, in ns per call, and
 * GFLOP/s for the two products (compare with one core's FMA peak, `attn
 * bench`'s fma_peak_1thread).  What a change to a kernel alone buys,
 * without the loop nest, the copies and the host's noise around it.
 *
 *   cc -O2 -fopenmp -I src -I include -I build/include bench/ukernel_bench.c \
 *      build/libattn.a -lopenblas -lm -o ukernel_bench
 *   ./ukernel_bench [ISA...]      (default: every ISA of the library's registry
 *                                 that the CPU runs; names as ATTN_ARCH's)
 *
 * One tile of the ISA's shape (Br rows, Bc keys), D = Dv = 128: qk_tile,
 * softmax_tile (its input restored by a memcpy each call, timed alone on
 * the next line), mask_tile over the whole tile and over a 16-key diagonal,
 * pv_tile.
 */
#include "isa/isa.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

#define BENCH(label, flops, stmt)                                                  \
    do {                                                                           \
        double best = 1e30;                                                        \
        for (int batch = 0; batch < 30; batch++) {                                 \
            const double t0 = now_ns();                                            \
            for (int it = 0; it < 200; it++) {                                     \
                stmt;                                                              \
                __asm__ volatile("" ::: "memory");                                 \
            }                                                                      \
            const double t = (now_ns() - t0) / 200;                                \
            if (t < best) best = t;                                                \
        }                                                                          \
        printf("  %-22s %9.1f ns", label, best);                                   \
        if ((flops) > 0) printf("  %6.1f GFLOP/s", (flops) / best);                \
        printf("\n");                                                              \
    } while (0)

static float *floats(int64_t n) { return aligned_alloc(64, (size_t)((n * 4 + 63) / 64 * 64)); }

/* The tile kernels of ISA isa (an index into the registry), timed. */
static void bench_isa(int isa) {
    const ukernel_table *k = attn__isa_flash(isa);
    const int br = k->tile_rows, bc = k->tile_keys;
    const int64_t dim = 128, ld = dim + 16;
    float *qp = floats(dim * br), *kt = floats(bc * ld), *st = floats(bc * br), *st0 = floats(bc * br);
    float *ot = floats(dim * br), *m = floats(br), *l = floats(br), *alpha = floats(br), *lo = floats(br), *hi = floats(br);
    for (int64_t i = 0; i < dim * br; i++) qp[i] = (float)((i * 37 % 101) - 50) * 0.002f, ot[i] = 0.0f;
    for (int64_t i = 0; i < bc * ld; i++) kt[i] = (float)((i * 53 % 97) - 48) * 0.003f;
    for (int r = 0; r < br; r++) m[r] = l[r] = 1.0f, alpha[r] = 0.99f, lo[r] = (float)(r % 7), hi[r] = (float)(bc - r % 13);
    const flash_prefetch none = {NULL, 0, 0, 0, 1, 0};
    printf("%s: Br = %d rows, Bc = %d keys, D = Dv = %lld\n", attn__isa_name(isa), br, bc, (long long)dim);
    k->qk_tile(qp, dim, kt, ld, bc, st0, &none);
    BENCH("qk_tile", 2.0 * bc * br * dim, k->qk_tile(qp, dim, kt, ld, bc, st, &none));
    BENCH("softmax_tile + memcpy", 0, (memcpy(st, st0, sizeof(float) * (size_t)(bc * br)), m[0] = 1.0f,
                                       k->softmax_tile(st, bc, m, l, alpha)));
    BENCH("memcpy alone", 0, memcpy(st, st0, sizeof(float) * (size_t)(bc * br)));
    BENCH("mask_tile, whole tile", 0, k->mask_tile(st, 0, bc, lo, hi));
    BENCH("mask_tile, 16 keys", 0, k->mask_tile(st, bc - 16, bc, lo, hi));
    BENCH("pv_tile", 2.0 * bc * br * dim, k->pv_tile(st0, bc, kt, ld, dim, alpha, ot, &none));
    free(qp), free(kt), free(st), free(st0), free(ot), free(m), free(l), free(alpha), free(lo), free(hi);
}

int main(int argc, char **argv) {
    for (int a = 1; a < argc; a++) {
        if (attn__isa_force(argv[a]) != ATTN_OK) {
            fprintf(stderr, "%s\n", attn_last_error());
            return 1;
        }
        bench_isa(attn__isa_chosen());
    }
    if (argc == 1)
        for (int i = 0; i < attn__isa_count(); i++)
            if (attn__isa_supported(i)) bench_isa(i);
    return 0;
}
