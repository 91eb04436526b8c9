/*
 * gemm_bench.c — the projections' GEMMs on this machine: a BLAS loaded at
 * run time (any of Debian's OpenBLAS and BLIS builds, by path) against
 * attn's own loops, in GFLOP/s and as a fraction of the FP32 FMA peak
 * measured in the same process (docs/kernels.md, "Projections").
 *
 *   cc -O3 -fopenmp -I include -I BUILD/include bench/gemm_bench.c \
 *      BUILD/libattn.a -ldl -lm -o gemm_bench
 *   ./gemm_bench LIB MODE THREADS [SHAPE...]      one line per shape
 *   ./gemm_bench LIB check [SHAPE...]             bits at 1, 2, 4, 8 threads
 *   ./gemm_bench mha THREADS [D_MODEL [L [HEADS]]]  the module (default
 *        1024 512 16): its projections, its attention, forward, backward
 *
 * LIB:   a path to libopenblas.so.0 or libblis.so.4 (OpenBLAS or BLIS is
 *        told from its symbols), or "attn" for attn_linear_forward (run
 *        with ATTN_KERNEL=ref for the double-accumulating reference), or
 *        "dot" for the decoder's former float dot-product loop (16 partial
 *        sums, one thread: src/model/decoder_matmul.c before the BLAS).
 * MODE:  "own"   the library's own threads (openblas_set_num_threads /
 *                bli_thread_set_num_threads to THREADS);
 *        "split" the output columns cut into fixed blocks of split_columns,
 *                OpenMP's THREADS threads taking blocks, each block one
 *                single-threaded sgemm call: attn's scheme
 *                (src/api/linear.c);
 *        "splitv" the same with sgemv for one row (faster, but its bits
 *                differ from sgemm's for the same row: attn does not).
 * SHAPE: ROWSxDINxDOUT[t]: y [rows, d_out] = x [rows, d_in] . W, W stored
 *        [d_in, d_out], or with "t" [d_out, d_in] (y = x . W^T, GGUF's and
 *        PyTorch's layout).  Default: the shapes of docs/kernels.md.
 *
 * Each line: LIB MODE THREADS SHAPE, GFLOP/s of the median call (after a
 * warm-up; at least 3 calls and 0.5 s), % of attn_measure_fma_peak(THREADS)
 * and that peak, and the % of one thread's FMA peak reached per CPU-second
 * (FLOPs over the process's CPU time; the host's other guests taking time
 * from this process count in neither; spinning BLAS threads count as work).  The host is shared: bench/gemm_bench.sh runs
 * every library and mode in turn, several rounds, and reports medians and
 * the spread of the rounds.
 */
#include "attn.h"
#include "attn_machine.h"

#include "bench_timing.h"

#include <dlfcn.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { ROW_MAJOR = 101, NO_TRANS = 111, TRANS = 112 };

/* Columns per block in "split" mode: src/api/linear.c's BLAS_COLUMNS, or
 * $GEMM_BENCH_COLUMNS to try another width. */
static long split_columns = 512;

typedef void (*sgemm_fn)(int order, int ta, int tb, int m, int n, int k, float alpha, const float *a,
                         int lda, const float *b, int ldb, float beta, float *c, int ldc);
typedef void (*sgemv_fn)(int order, int ta, int m, int n, float alpha, const float *a, int lda, const float *x,
                         int incx, float beta, float *y, int incy);
typedef void (*set_threads_fn)(int);
typedef void (*blis_set_threads_fn)(long);

static sgemm_fn sgemm;
static sgemv_fn sgemv;
static set_threads_fn openblas_threads;
static blis_set_threads_fn blis_threads;

typedef struct {
    long rows, d_in, d_out;
    int transposed;
} shape;

static const char *const default_shapes[] = {
    "512x1024x1024",                                   /* attn mha d_model 1024, L 512 */
    "1x896x4864t", "128x896x4864t", "512x896x4864t",   /* Qwen2.5 0.5B: gate, up */
    "1x4864x896t", "128x4864x896t", "512x4864x896t",   /* down */
    "128x896x896t", "128x896x128t",                    /* q, k / v (2 KV heads) */
    "1x640x2048t", "128x640x2048t", "128x2048x640t",   /* Gemma 3 270M FFN */
    "1x640x262144t", "16x640x262144t",                 /* its output head */
};

static void set_lib_threads(int n) {
    if (openblas_threads) openblas_threads(n);
    if (blis_threads) blis_threads(n);
}

static float dot_f32(const float *a, const float *b, long n) {
    float acc[16] = {0};
    long i = 0;
    for (; i + 16 <= n; i += 16)
        for (int k = 0; k < 16; k++) acc[k] += a[i + k] * b[i + k];
    double sum = 0.0;
    for (int k = 0; k < 16; k++) sum += (double)acc[k];
    for (; i < n; i++) sum += (double)a[i] * (double)b[i];
    return (float)sum;
}

/* y = x . W (or W^T) by the chosen library and mode. */
static void run(const char *lib, const char *mode, int threads, const shape *s, const float *x,
                const float *w, float *y) {
    if (strcmp(lib, "dot") == 0) {
        for (long o = 0; o < s->d_out; o++)
            for (long r = 0; r < s->rows; r++) y[r * s->d_out + o] = dot_f32(x + r * s->d_in, w + o * s->d_in, s->d_in);
        return;
    }
    if (strcmp(lib, "attn") == 0) {
        attn_linear_forward(x, s->rows, s->d_in, w, NULL, s->d_out, y);
        return;
    }
    const int tb = s->transposed ? TRANS : NO_TRANS;
    const int ldb = s->transposed ? (int)s->d_in : (int)s->d_out;
    if (strcmp(mode, "own") == 0) {
        sgemm(ROW_MAJOR, NO_TRANS, tb, (int)s->rows, (int)s->d_out, (int)s->d_in, 1.0f, x, (int)s->d_in, w,
              ldb, 0.0f, y, (int)s->d_out);
        return;
    }
    const int gemv = strcmp(mode, "splitv") == 0;
    const long blocks = (s->d_out + split_columns - 1) / split_columns;
#pragma omp parallel for schedule(static) num_threads(threads)
    for (long j = 0; j < blocks; j++) {
        const long o = j * split_columns, n = s->d_out - o < split_columns ? s->d_out - o : split_columns;
        const float *w_o = s->transposed ? w + o * s->d_in : w + o;
        if (s->rows == 1 && s->transposed && gemv)
            sgemv(ROW_MAJOR, NO_TRANS, (int)n, (int)s->d_in, 1.0f, w_o, ldb, x, 1, 0.0f, y + o, 1);
        else if (s->rows == 1 && gemv)
            sgemv(ROW_MAJOR, TRANS, (int)s->d_in, (int)n, 1.0f, w_o, ldb, x, 1, 0.0f, y + o, 1);
        else
            sgemm(ROW_MAJOR, NO_TRANS, tb, (int)s->rows, (int)n, (int)s->d_in, 1.0f, x, (int)s->d_in, w_o, ldb, 0.0f,
                  y + o, (int)s->d_out);
    }
}

/* One call of run, for bench_time_calls. */
typedef struct {
    const char *lib, *mode;
    int threads;
    const shape *s;
    const float *x, *w;
    float *y;
} run_ctx;

static int run_call(void *p) {
    const run_ctx *c = p;
    run(c->lib, c->mode, c->threads, c->s, c->x, c->w, c->y);
    return 0;
}

static float *random_floats(long n, unsigned seed);

/* Median seconds of calls of fn(ctx) after a warm-up (>= 3 calls, 0.5 s). */
static double median_time(int (*fn)(void *), void *ctx) {
    bench_timing t;
    if (bench_time_calls(fn, ctx, 3, 0.5, BENCH_MAX_CALLS, &t)) {
        fprintf(stderr, "gemm_bench: a timed call failed (%s)\n", attn_last_error());
        exit(1);
    }
    return t.median;
}

/* The module at d_model = heads x 64, self-attention, W_O: its four
 * projections alone, its attention alone, the whole forward and backward. */
typedef struct {
    attn_mha m;
    long len;
    float *x, *q, *k, *v, *z, *out;
    attn_mha_grads g;
    float *dout;
} mha_ctx;

static int mha_projections(void *p) {
    mha_ctx *c = p;
    const long d = c->m.d_model;
    attn_linear_forward(c->x, c->len, d, c->m.wq, c->m.bq, d, c->q);
    attn_linear_forward(c->x, c->len, d, c->m.wk, c->m.bk, d, c->k);
    attn_linear_forward(c->x, c->len, d, c->m.wv, c->m.bv, d, c->v);
    attn_linear_forward(c->z, c->len, d, c->m.wo, c->m.bo, d, c->out);
    return 0;
}

static int mha_attention(void *p) {
    mha_ctx *c = p;
    const long H = c->m.heads, D = c->m.head_dim;
    attn_tensor q = attn_tensor_4d(c->q, 1, c->len, H, D), k = attn_tensor_4d(c->k, 1, c->len, H, D),
                v = attn_tensor_4d(c->v, 1, c->len, H, D), z = attn_tensor_4d(c->z, 1, c->len, H, D);
    attn_sdpa_forward(&q, &k, &v, NULL, &z, NULL, NULL);
    return 0;
}

static int mha_whole(void *p) {
    mha_ctx *c = p;
    attn_mha_forward(&c->m, c->x, 1, c->len, NULL, c->len, NULL, c->out, NULL, NULL);
    return 0;
}

static int mha_whole_backward(void *p) {
    mha_ctx *c = p;
    attn_mha_backward(&c->m, c->x, 1, c->len, NULL, c->len, NULL, c->dout, &c->g);
    return 0;
}

static int run_mha(long d, long len, long heads, int threads, double peak) {
    mha_ctx c = {.m = ATTN_MHA_INIT, .len = len};
    c.m.d_model = d, c.m.heads = heads, c.m.head_dim = d / heads, c.m.d_out = d;
    float *w[4], *dw[4], *b[4];
    for (int i = 0; i < 4; i++) {
        w[i] = random_floats(d * d, 10 + (unsigned)i), b[i] = random_floats(d, 20 + (unsigned)i);
        dw[i] = random_floats(d * d, 30);
    }
    c.m.wq = w[0], c.m.wk = w[1], c.m.wv = w[2], c.m.wo = w[3];
    c.m.bq = b[0], c.m.bk = b[1], c.m.bv = b[2], c.m.bo = b[3];
    c.x = random_floats(len * d, 1), c.dout = random_floats(len * d, 2);
    c.q = random_floats(len * d, 3), c.k = random_floats(len * d, 4), c.v = random_floats(len * d, 5);
    c.z = random_floats(len * d, 6), c.out = random_floats(len * d, 7);
    c.g = (attn_mha_grads)ATTN_MHA_GRADS_INIT;
    c.g.dx = random_floats(len * d, 8);
    c.g.dwq = dw[0], c.g.dwk = dw[1], c.g.dwv = dw[2], c.g.dwo = dw[3];
    const double proj_flops = 4 * 2.0 * len * d * d, att_flops = 4.0 * len * len * d;
    const double tp = median_time(mha_projections, &c), ta = median_time(mha_attention, &c);
    const double tf = median_time(mha_whole, &c), tb = median_time(mha_whole_backward, &c);
    /* backward: 2x the forward's projection FLOPs (dx and dw) plus 2.5x the
     * attention's, plus the recomputed forward. */
    const double fwd = proj_flops + att_flops, bwd = fwd + 2 * proj_flops + 2.5 * att_flops;
    printf("mha d_model=%ld L=%ld heads=%ld threads=%d peak %.1f GFLOP/s\n", d, len, heads, threads, peak);
    printf("  projections (4)  %8.2f ms  %6.1f GFLOP/s  %5.1f%% of peak\n", tp * 1e3, proj_flops / tp * 1e-9,
           100 * proj_flops / tp * 1e-9 / peak);
    printf("  attention        %8.2f ms  %6.1f GFLOP/s  %5.1f%% of peak\n", ta * 1e3, att_flops / ta * 1e-9,
           100 * att_flops / ta * 1e-9 / peak);
    printf("  forward (whole)  %8.2f ms  %6.1f GFLOP/s  %5.1f%% of peak\n", tf * 1e3, fwd / tf * 1e-9,
           100 * fwd / tf * 1e-9 / peak);
    printf("  backward (whole) %8.2f ms  %6.1f GFLOP/s  %5.1f%% of peak\n", tb * 1e3, bwd / tb * 1e-9,
           100 * bwd / tb * 1e-9 / peak);
    return 0;
}

static int parse_shape(const char *text, shape *s) {
    char t = 0;
    int n = sscanf(text, "%ldx%ldx%ld%c", &s->rows, &s->d_in, &s->d_out, &t);
    s->transposed = n == 4 && t == 't';
    return (n == 3 || (n == 4 && t == 't')) && s->rows > 0 && s->d_in > 0 && s->d_out > 0;
}

static float *random_floats(long n, unsigned seed) {
    float *p = malloc((size_t)n * sizeof(float));
    for (long i = 0; i < n && p; i++) {
        seed = seed * 1664525u + 1013904223u;
        p[i] = (float)((seed >> 8) * (1.0 / 16777216.0)) - 0.5f;
    }
    return p;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s LIB MODE THREADS [SHAPE...] | %s LIB check [SHAPE...]\n", argv[0], argv[0]);
        return 2;
    }
    const char *lib = argv[1], *mode = argv[2];
    if (getenv("GEMM_BENCH_COLUMNS")) split_columns = atol(getenv("GEMM_BENCH_COLUMNS"));
    if (strcmp(lib, "mha") == 0) {
        /* ./gemm_bench mha THREADS [D_MODEL [L [HEADS]]] */
        const int t = atoi(argv[2]);
        double peak = NAN;
        omp_set_num_threads(t);
        if (attn_measure_fma_peak(t, 0.5, &peak) != ATTN_OK) peak = NAN;
        return run_mha(argc > 3 ? atol(argv[3]) : 1024, argc > 4 ? atol(argv[4]) : 512, argc > 5 ? atol(argv[5]) : 16,
                       t, peak);
    }
    const int check = strcmp(mode, "check") == 0;
    const int threads = check ? 1 : (argc > 3 ? atoi(argv[3]) : 1);
    const int first_shape = check ? 3 : 4;
    if (strcmp(lib, "attn") != 0 && strcmp(lib, "dot") != 0) {
        void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            fprintf(stderr, "%s\n", dlerror());
            return 1;
        }
        sgemm = (sgemm_fn)dlsym(h, "cblas_sgemm");
        sgemv = (sgemv_fn)dlsym(h, "cblas_sgemv");
        openblas_threads = (set_threads_fn)dlsym(h, "openblas_set_num_threads");
        blis_threads = (blis_set_threads_fn)dlsym(h, "bli_thread_set_num_threads");
        if (!sgemm || !sgemv) {
            fprintf(stderr, "%s has no cblas_sgemm or cblas_sgemv\n", lib);
            return 1;
        }
    }
    const char *const *names = default_shapes;
    int count = (int)(sizeof default_shapes / sizeof *default_shapes);
    if (argc > first_shape) {
        names = (const char *const *)argv + first_shape;
        count = argc - first_shape;
    }
    double peak = 0.0, core_peak = NAN;
    if (!check && attn_measure_fma_peak(threads, 0.5, &peak) != ATTN_OK) peak = NAN;
    if (!check) core_peak = bench_thread_peak(threads);

    for (int i = 0; i < count; i++) {
        shape s;
        if (!parse_shape(names[i], &s)) {
            fprintf(stderr, "bad shape %s\n", names[i]);
            return 2;
        }
        float *x = random_floats(s.rows * s.d_in, 1), *w = random_floats(s.d_in * s.d_out, 2);
        float *y = malloc((size_t)(s.rows * s.d_out) * sizeof(float));
        if (!x || !w || !y) return 1;
        if (check) {
            float *y1 = malloc((size_t)(s.rows * s.d_out) * sizeof(float));
            if (!y1) return 1;
            printf("%s %s", lib, names[i]);
            const char *modes[] = {"own", "split"};
            for (int m = 0; m < 2; m++) {
                set_lib_threads(1);
                run(lib, modes[m], 1, &s, x, w, y1);
                printf("  %s:", modes[m]);
                for (int t = 2; t <= 8; t *= 2) {
                    set_lib_threads(strcmp(modes[m], "own") == 0 ? t : 1);
                    run(lib, modes[m], t, &s, x, w, y);
                    printf(" %d=%s", t, memcmp(y, y1, (size_t)(s.rows * s.d_out) * sizeof(float)) ? "DIFFERS" : "same");
                }
            }
            printf("\n");
            free(y1);
        } else {
            set_lib_threads(strcmp(mode, "own") == 0 ? threads : 1);
            omp_set_num_threads(threads);
            run_ctx call = {lib, mode, threads, &s, x, w, y};
            bench_timing t;
            if (bench_time_calls(run_call, &call, 3, 0.5, BENCH_MAX_CALLS, &t)) {
                fprintf(stderr, "gemm_bench: a timed call failed\n");
                return 1;
            }
            const double flops = 2.0 * (double)s.rows * (double)s.d_in * (double)s.d_out;
            const double gflops = flops / t.median * 1e-9;
            /* per CPU-second, against one thread's peak in CPU time: time the
             * host's other guests take from this process counts in neither */
            const double cpu_gflops = flops * t.calls / t.cpu * 1e-9;
            printf("%s %s %d %s %.2f %.1f %.1f %.1f\n", lib, mode, threads, names[i], gflops, 100.0 * gflops / peak,
                   peak, 100.0 * cpu_gflops / core_peak);
        }
        fflush(stdout);
        free(x);
        free(w);
        free(y);
    }
    return 0;
}
