/*
 * quant_bench.c — the quantized products (attn_quant_matmul) on Qwen2.5
 * 0.5B's shapes, against this machine's limits measured in the same run,
 * and against OpenBLAS's sgemm on the same matrices dequantized to float32
 * (docs/quant.md, "Speed").
 *
 *   cc -O3 -fopenmp -I include -I BUILD/include bench/quant_bench.c \
 *      BUILD/libattn.a $(pkg-config --libs openblas) -lm -o quant_bench
 *   ./quant_bench [ROUNDS [FILTER]]        (bench/quant_bench.sh does both)
 *
 * Rows (W [N, K] random blocks with sane scales, x [M, K] uniform):
 *   types Q8_0, Q5_0, Q4_K, Q6_K (the K-quants where 256 divides K: 4864);
 *   N x K = 896x896 (q, o), 128x896 (k, v),
 *   4864x896 (gate, up), 896x4864 (down), 151936x896 (the head; M = 1 only
 *   unless FILTER names it: 512 rows of the head are 139 GFLOP);
 *   M = 1 (decode) and 512 (prefill); threads 1 and 2; exact and fast;
 *   and "sgemm": cblas_sgemm on W dequantized, its own threads.
 * Decode rows read W cold: as many copies of it as fill 256 MiB (8x the
 * L3), one copy a call in turn, as a model's layers are; with
 * QUANT_BENCH_HOT=1 one copy, from the caches (the kernels' compute limit).
 * Each round measures the read bandwidth, the FP32 FMA peak and the
 * AVX-512 VNNI int8 peak at 1 and 2 threads, then every row once (median
 * call of >= 3 and 0.2 s after a warm-up); the rows interleave, the rounds
 * repeat, and the table gives each row's median over the rounds with the
 * rounds' spread (min-max).  Columns:
 *   GB/s %rd     bytes of W as stored / time, % of the read bandwidth
 *                (decode rows: the limit is W's bytes)
 *   GFLOP/s      2 M N K / time; %fma against the FP32 FMA peak, %int8
 *                against the VNNI peak (2 ops a byte product): fast rows
 */
#include "attn.h"
#include "attn_machine.h"
#include "attn_gguf.h"
#include "attn_quant.h"

#include "bench_timing.h"

#include <cblas.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* OpenBLAS's thread count (its header may not declare it in every version). */
void openblas_set_num_threads(int);

/* ---------------------------------------------------------- the int8 peak */

#if defined(__x86_64__)
/* One thread: twelve independent vpdpbusd chains in named registers; ops
 * per second (a byte product and its sum: 2 ops). */
__attribute__((target("avx512f,avx512vnni"), noinline)) static double int8_core_ops(long n) {
    __m512i a0 = _mm512_set1_epi32(0), a1 = _mm512_set1_epi32(1), a2 = _mm512_set1_epi32(2), a3 = _mm512_set1_epi32(3),
            a4 = _mm512_set1_epi32(4), a5 = _mm512_set1_epi32(5), a6 = _mm512_set1_epi32(6), a7 = _mm512_set1_epi32(7),
            a8 = _mm512_set1_epi32(8), a9 = _mm512_set1_epi32(9), a10 = _mm512_set1_epi32(10),
            a11 = _mm512_set1_epi32(11);
    const __m512i u = _mm512_set1_epi8(3), s = _mm512_set1_epi8(-1);
    const double t0 = bench_wall_seconds();
    for (long i = 0; i < n; i++) {
        a0 = _mm512_dpbusd_epi32(a0, u, s), a1 = _mm512_dpbusd_epi32(a1, u, s), a2 = _mm512_dpbusd_epi32(a2, u, s);
        a3 = _mm512_dpbusd_epi32(a3, u, s), a4 = _mm512_dpbusd_epi32(a4, u, s), a5 = _mm512_dpbusd_epi32(a5, u, s);
        a6 = _mm512_dpbusd_epi32(a6, u, s), a7 = _mm512_dpbusd_epi32(a7, u, s), a8 = _mm512_dpbusd_epi32(a8, u, s);
        a9 = _mm512_dpbusd_epi32(a9, u, s), a10 = _mm512_dpbusd_epi32(a10, u, s), a11 = _mm512_dpbusd_epi32(a11, u, s);
    }
    const double t = bench_wall_seconds() - t0;
    __m512i sum = _mm512_add_epi32(_mm512_add_epi32(_mm512_add_epi32(a0, a1), _mm512_add_epi32(a2, a3)),
                                   _mm512_add_epi32(_mm512_add_epi32(a4, a5), _mm512_add_epi32(a6, a7)));
    sum = _mm512_add_epi32(sum, _mm512_add_epi32(_mm512_add_epi32(a8, a9), _mm512_add_epi32(a10, a11)));
    volatile int sink = _mm512_reduce_add_epi32(sum);
    (void)sink;
    return (double)n * 12 * 64 * 2 / t;
}
#endif

/* GOP/s of `threads` threads at once, the best of 5 windows; NaN without VNNI. */
static double int8_peak(int threads) {
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512vnni")) return NAN;
    double best = 0;
    for (int rep = 0; rep < 5; rep++) {
        double sum = 0;
#pragma omp parallel num_threads(threads) reduction(+ : sum)
        sum += int8_core_ops(4000000);
        if (sum > best) best = sum;
    }
    return best * 1e-9;
#else
    (void)threads;
    return NAN;
#endif
}

/* ---------------------------------------------------------------- weights */

static uint16_t f16_bits(float f) {
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    return (uint16_t)(((b >> 16) & 0x8000u) | (uint32_t)((int)((b >> 23) & 0xFF) - 112) << 10 | ((b >> 13) & 0x3FF));
}

static void put_f16(uint8_t *p, float f) {
    uint16_t h = f16_bits(f);
    p[0] = (uint8_t)h, p[1] = (uint8_t)(h >> 8);
}

/* A matrix of random blocks with scales about 2^-8 (x's sums stay finite). */
static uint8_t *random_matrix(int type, int64_t n, int64_t k, size_t *bytes, unsigned *seed) {
    int64_t be;
    size_t bb;
    attn_quant_type_block(type, &be, &bb);
    *bytes = (size_t)(n * (k / be)) * bb;
    uint8_t *w = malloc(*bytes);
    for (size_t i = 0; i < *bytes; i++) *seed = *seed * 1103515245u + 12345u, w[i] = (uint8_t)(*seed >> 16);
    for (size_t b = 0; b < *bytes / bb; b++) {
        uint8_t *p = w + b * bb;
        if (type == ATTN_QTYPE_Q6_K) put_f16(p + 208, 1.0f / 4096);
        else put_f16(p, 1.0f / 256), put_f16(p + 2, 1.0f / 1024);
    }
    return w;
}

/* ------------------------------------------------------------------- rows */

typedef struct row {
    char name[96];
    int type;            /* -1: sgemm                                          */
    int64_t n, k, m;
    int threads;
    attn_precision precision;
    /* per round */
    double gbps[64], gflops[64], pct_rd[64], pct_fma[64], pct_int8[64];
} row;

typedef struct matrix {
    int type;
    int64_t n, k;
    size_t bytes;
    int copies;
    uint8_t **w;
    float *wf;           /* one copy dequantized, for sgemm (prefill rows) */
} matrix;

typedef struct call {
    const row *r;
    matrix *mat;
    int next;            /* the copy the next call reads                   */
    float *x, *y;
    int failed;
} call;

static int run_call(void *ctx) {
    call *c = ctx;
    const row *r = c->r;
    if (r->type < 0) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)r->m, (int)r->n, (int)r->k, 1.0f, c->x, (int)r->k,
                    c->mat->wf, (int)r->k, 0.0f, c->y, (int)r->n);
        return 0;
    }
    attn_qtensor w = {.type = r->type, .rows = r->n, .cols = r->k, .data = c->mat->w[c->next]};
    c->next = (c->next + 1) % c->mat->copies;
    attn_quant_options opt = ATTN_QUANT_OPTIONS_INIT;
    opt.precision = r->precision, opt.threads = r->threads;
    if (attn_quant_matmul(c->x, r->m, &w, c->y, &opt) != ATTN_OK) {
        fprintf(stderr, "%s: %s\n", r->name, attn_last_error());
        return c->failed = 1;
    }
    return 0;
}

static int compare(const void *a, const void *b) { return bench_compare_doubles(a, b); }

static double median_of(const double *v, int n, double *lo, double *hi) {
    double s[64];
    memcpy(s, v, sizeof(double) * (size_t)n);
    qsort(s, (size_t)n, sizeof *s, compare);
    *lo = s[0], *hi = s[n - 1];
    return n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

int main(int argc, char **argv) {
    const int rounds = argc > 1 ? atoi(argv[1]) : 3;
    const char *filter = argc > 2 ? argv[2] : NULL;
    /* QUANT_BENCH_HOT=1: one copy of W, read again and again from the caches: the kernels' compute limit */
    const bool hot = getenv("QUANT_BENCH_HOT") && atoi(getenv("QUANT_BENCH_HOT")) == 1;
    if (rounds < 1 || rounds > 64) return fprintf(stderr, "ROUNDS: 1 .. 64\n"), 2;
    static const int types[] = {ATTN_QTYPE_Q8_0, ATTN_QTYPE_Q5_0, ATTN_QTYPE_Q4_K, ATTN_QTYPE_Q6_K};
    static const int64_t shapes[][2] = {{896, 896}, {128, 896}, {4864, 896}, {896, 4864}, {151936, 896}};
    static const int64_t ms[] = {1, 512};
    enum { N_TYPES = 4, N_SHAPES = 5 };
    row *rows = calloc(1024, sizeof *rows);
    int n_rows = 0;
    for (int s = 0; s < N_SHAPES; s++)
        for (int mi = 0; mi < 2; mi++)
            for (int t = 1; t <= 2; t++) {
                for (int ti = -1; ti < N_TYPES; ti++)
                    for (int p = 0; p < (ti < 0 ? 1 : 2); p++) {
                        row *r = &rows[n_rows];
                        r->type = ti < 0 ? -1 : types[ti];
                        r->n = shapes[s][0], r->k = shapes[s][1], r->m = ms[mi], r->threads = t;
                        r->precision = p ? ATTN_PRECISION_FAST : ATTN_PRECISION_EXACT;
                        snprintf(r->name, sizeof r->name, "%s %s N=%lld K=%lld M=%lld thr=%d",
                                 ti < 0 ? "sgemm" : attn_quant_type_name(r->type), ti < 0 ? "f32" : p ? "fast" : "exact",
                                 (long long)r->n, (long long)r->k, (long long)r->m, t);
                        const bool head_prefill = r->n > 100000 && r->m > 1;
                        int64_t be = 1;
                        if (ti >= 0) attn_quant_type_block(r->type, &be, NULL);
                        if (r->k % be != 0) continue; /* K-quants: K = 4864 only (Qwen's ffn_down) */
                        if (filter ? strstr(r->name, filter) != NULL : !head_prefill) n_rows++;
                    }
            }
    if (!n_rows) return fprintf(stderr, "no row matches %s\n", filter), 2;

    /* the matrices, once: cold copies for the decode rows */
    matrix mats[N_TYPES][N_SHAPES];
    unsigned seed = 1;
    for (int ti = 0; ti < N_TYPES; ti++)
        for (int s = 0; s < N_SHAPES; s++) {
            matrix *mt = &mats[ti][s];
            mt->type = types[ti], mt->n = shapes[s][0], mt->k = shapes[s][1], mt->wf = NULL, mt->w = NULL;
            bool used = false, decode = false, prefill = false;
            for (int i = 0; i < n_rows; i++)
                if (rows[i].n == mt->n && rows[i].k == mt->k && (rows[i].type == mt->type || (rows[i].type < 0 && ti == 0)))
                    used = true, decode |= rows[i].m == 1, prefill |= rows[i].m > 1 && rows[i].type < 0;
            if (!used) continue;
            int64_t be;
            size_t bb;
            attn_quant_type_block(mt->type, &be, &bb);
            mt->bytes = (size_t)(mt->n * (mt->k / be)) * bb;
            mt->copies = decode && !hot ? (int)((256u << 20) / mt->bytes + 1) : 1;
            mt->w = malloc(sizeof *mt->w * (size_t)mt->copies);
            for (int c = 0; c < mt->copies; c++) mt->w[c] = random_matrix(mt->type, mt->n, mt->k, &mt->bytes, &seed);
            if (prefill || ti == 0) {
                mt->wf = malloc(sizeof(float) * (size_t)(mt->n * mt->k));
                attn_qtensor w = {.type = mt->type, .rows = mt->n, .cols = mt->k, .data = mt->w[0]};
                attn_quant_dequantize_rows(&w, 0, mt->n, mt->wf);
            }
        }
    const int64_t max_x = 512 * 4864, max_y = 512 * 151936;
    float *x = malloc(sizeof(float) * (size_t)max_x), *y = malloc(sizeof(float) * (size_t)max_y);
    bench_fill_uniform(x, (size_t)max_x, &seed);

    printf("quant_bench: %d rows, %d rounds, W %s; exact on %s, fast on %s\n", n_rows, rounds, hot ? "hot" : "cold",
           attn_quant_isa(ATTN_PRECISION_EXACT), attn_quant_isa(ATTN_PRECISION_FAST));
    double rd[2][64], fma[2][64], i8[2][64];
    for (int round = 0; round < rounds; round++) {
        for (int t = 1; t <= 2; t++) {
            attn_measure_read_bandwidth(t, 0, &rd[t - 1][round]);
            attn_measure_fma_peak(t, 0.3, &fma[t - 1][round]);
            i8[t - 1][round] = int8_peak(t);
        }
        printf("round %d: read %.1f / %.1f GB/s, FMA peak %.0f / %.0f GFLOP/s, int8 peak %.0f / %.0f GOP/s "
               "(1 / 2 threads)\n", round + 1, rd[0][round], rd[1][round], fma[0][round], fma[1][round],
               i8[0][round], i8[1][round]);
        fflush(stdout);
        for (int i = 0; i < n_rows; i++) {
            row *r = &rows[i];
            int s = 0;
            while (shapes[s][0] != r->n || shapes[s][1] != r->k) s++;
            int ti = 0;
            while (r->type >= 0 && types[ti] != r->type) ti++;
            call c = {.r = r, .mat = &mats[ti][s], .x = x, .y = y};
            if (r->type < 0) openblas_set_num_threads(r->threads);
            bench_timing tm;
            if (bench_time_calls(run_call, &c, 3, 0.2, 1000, &tm)) return 1;
            const double bytes = r->type < 0 ? 4.0 * (double)(r->n * r->k) : (double)c.mat->bytes;
            const double flops = 2.0 * (double)r->m * (double)r->n * (double)r->k;
            r->gbps[round] = bytes / tm.median * 1e-9;
            r->gflops[round] = flops / tm.median * 1e-9;
            r->pct_rd[round] = 100 * r->gbps[round] / rd[r->threads - 1][round];
            r->pct_fma[round] = 100 * r->gflops[round] / fma[r->threads - 1][round];
            r->pct_int8[round] = 100 * r->gflops[round] / i8[r->threads - 1][round];
        }
    }
    const char *labels[] = {"read 1 thr", "read 2 thr", "FMA peak 1 thr", "FMA peak 2 thr", "int8 1 thr", "int8 2 thr"};
    const double *series[] = {rd[0], rd[1], fma[0], fma[1], i8[0], i8[1]};
    printf("\nmachine, median over rounds (min-max):");
    for (int i = 0; i < 6; i++) {
        double lo, hi;
        const double med = median_of(series[i], rounds, &lo, &hi);
        printf("%s %s %.1f (%.1f-%.1f)", i ? "," : "", labels[i], med, lo, hi);
    }
    printf("  [GB/s, GFLOP/s, GOP/s]\n\n");
    printf("%-44s %16s %14s %18s %14s %12s\n", "row", "GB/s", "%rd", "GFLOP/s", "%fma", "%int8");
    for (int i = 0; i < n_rows; i++) {
        const row *r = &rows[i];
        double v[5], l[5], h[5];
        v[0] = median_of(r->gbps, rounds, &l[0], &h[0]);
        v[1] = median_of(r->pct_rd, rounds, &l[1], &h[1]);
        v[2] = median_of(r->gflops, rounds, &l[2], &h[2]);
        v[3] = median_of(r->pct_fma, rounds, &l[3], &h[3]);
        v[4] = median_of(r->pct_int8, rounds, &l[4], &h[4]);
        printf("%-44s %5.1f (%4.1f-%4.1f) %3.0f (%3.0f-%3.0f) %6.1f (%5.1f-%5.1f) %3.0f (%3.0f-%3.0f)", r->name, v[0], l[0],
               h[0], v[1], l[1], h[1], v[2], l[2], h[2], v[3], l[3], h[3]);
        if (r->precision == ATTN_PRECISION_FAST) printf(" %3.0f (%3.0f-%3.0f)", v[4], l[4], h[4]);
        printf("\n");
    }
    return 0;
}
