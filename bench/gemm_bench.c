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
 *
 * LIB:   a path to libopenblas.so.0 or libblis.so.4 (OpenBLAS or BLIS is
 *        told from its symbols), or "attn" for attn_linear_forward (run
 *        with ATTN_KERNEL=ref for the double-accumulating reference), or
 *        "dot" for the decoder's former float dot-product loop (16 partial
 *        sums, one thread: src/model/decoder_matmul.c before the BLAS).
 * MODE:  "own"   the library's own threads (openblas_set_num_threads /
 *                bli_thread_set_num_threads to THREADS);
 *        "split" the output columns cut into fixed blocks of SPLIT_COLUMNS,
 *                OpenMP's THREADS threads taking blocks, each block one
 *                single-threaded sgemm call: attn's scheme
 *                (src/api/linear.c);
 *        "splitv" the same with sgemv for one row (faster, but its bits
 *                differ from sgemm's for the same row: attn does not).
 * SHAPE: ROWSxDINxDOUT[t]: y [rows, d_out] = x [rows, d_in] . W, W stored
 *        [d_in, d_out], or with "t" [d_out, d_in] (y = x . W^T, GGUF's and
 *        PyTorch's layout).  Default: the shapes of docs/kernels.md.
 *
 * Each line is the median of the calls' times after a warm-up call (at
 * least 3 calls and 0.5 s).  The host is shared: bench/gemm_bench.sh runs
 * every library and mode in turn, several rounds, and reports medians and
 * the spread of the rounds.
 */
#include "attn.h"
#include "attn_machine.h"

#include <dlfcn.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { SPLIT_COLUMNS = 256, ROW_MAJOR = 101, NO_TRANS = 111, TRANS = 112 };

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

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

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
    const long blocks = (s->d_out + SPLIT_COLUMNS - 1) / SPLIT_COLUMNS;
#pragma omp parallel for schedule(static) num_threads(threads)
    for (long j = 0; j < blocks; j++) {
        const long o = j * SPLIT_COLUMNS, n = s->d_out - o < SPLIT_COLUMNS ? s->d_out - o : SPLIT_COLUMNS;
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

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
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
    double peak = 0.0;
    if (!check && attn_measure_fma_peak(threads, 0.5, &peak) != ATTN_OK) peak = NAN;

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
            run(lib, mode, threads, &s, x, w, y); /* warm-up: pages, packing buffers, thread pools */
            double times[1000];
            int calls = 0;
            const double start = now();
            while (calls < 1000 && (calls < 3 || now() - start < 0.5)) {
                const double t0 = now();
                run(lib, mode, threads, &s, x, w, y);
                times[calls++] = now() - t0;
            }
            qsort(times, (size_t)calls, sizeof *times, cmp_double);
            const double gflops = 2.0 * (double)s.rows * (double)s.d_in * (double)s.d_out / times[calls / 2] * 1e-9;
            printf("%s %s %d %s %.2f %.1f %.1f\n", lib, mode, threads, names[i], gflops, 100.0 * gflops / peak, peak);
        }
        fflush(stdout);
        free(x);
        free(w);
        free(y);
    }
    return 0;
}
