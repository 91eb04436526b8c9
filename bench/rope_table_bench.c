/*
 * rope_table_bench.c — what a decoder's RoPE costs per forward with the
 * angles computed per call (attn_rope_apply in every layer, as before
 * attn_rope_table) and read from a table per sequence (attn_rope_table:
 * built once, grown as decoding advances), on the shapes of the models in
 * ~/.cache/attn/models (docs/rope.md, "Tables per sequence", has the
 * results).
 *
 * Shape legend: q [1, L, Hq, D]  k [1, L, Hkv, D], rotated once per layer;
 *               N layers, of which those with (l + 1) % 6 != 0 are local
 *               where the model has a local theta (Gemma 3).
 *
 *   prefill  one forward over L = 512 positions: per call, 2N applies;
 *            table, the tables' reserve of 512 positions plus 2N applies
 *   decode   128 steps of one token at positions 512 .. 639 after that
 *            prefill: per call, 2N applies a step; table, a reserve and
 *            2N applies a step (the tables already cover [0, 512))
 *
 * Timed in thread CPU time on one thread (the host is shared: CPU time is
 * what the work costs, whatever else runs), ROUNDS interleaved rounds
 * (per call, then table), medians and ranges printed; the rotated bits
 * are compared (they must be equal).
 *
 * build: cc -O2 -fopenmp -I include -I BUILD/include bench/rope_table_bench.c \
 *           BUILD/libattn.a $(pkg-config --libs openblas) -lm -o BUILD/rope_table_bench
 * usage: rope_table_bench [ROUNDS]   (default 9)
 */
#include "attn.h"
#include "attn_rope.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct model_shape {
    const char *name;
    int64_t layers, hq, hkv, dim;
    double theta_global, theta_local; /* theta_local 0: every layer global */
} model_shape;

static const model_shape shapes[] = {
    {"gemma-3-270m", 18, 4, 1, 256, 1e6, 1e4},
    {"qwen2.5-0.5b", 24, 14, 2, 64, 1e6, 0},
    {"smollm2-135m", 30, 9, 3, 64, 1e5, 0},
};

enum { PREFILL = 512, DECODE = 128 };

static double cpu_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void die(const char *what) {
    fprintf(stderr, "rope_table_bench: %s: %s\n", what, attn_last_error());
    exit(1);
}

static int is_local(const model_shape *m, int64_t layer) { return m->theta_local > 0 && (layer + 1) % 6 != 0; }

/* One forward's rotations: L positions from pos0, every layer's q and k
 * (the same buffers rotated again by each layer: the work does not depend
 * on the values, and both paths must end on the same bits). */
static void rotate_all(const model_shape *m, float *q, float *k, int64_t L, int64_t pos0,
                       attn_rope_table *const tables[2], const attn_rope_options opt[2]) {
    for (int64_t l = 0; l < m->layers; l++) {
        const int which = is_local(m, l);
        attn_tensor tq = attn_tensor_4d(q, 1, L, m->hq, m->dim), tk = attn_tensor_4d(k, 1, L, m->hkv, m->dim);
        if (tables) {
            if (attn_rope_apply_table(&tq, NULL, pos0, tables[which]) ||
                attn_rope_apply_table(&tk, NULL, pos0, tables[which]))
                die("apply_table");
        } else if (attn_rope_apply(&tq, NULL, pos0, &opt[which]) || attn_rope_apply(&tk, NULL, pos0, &opt[which])) {
            die("apply");
        }
    }
}

static int compare_doubles(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    const int rounds = argc > 1 ? atoi(argv[1]) : 9;
    if (rounds < 1 || rounds > 1000) {
        fprintf(stderr, "usage: %s [ROUNDS]\n", argv[0]);
        return 2;
    }
    printf("model,phase,per_call_ms_median,per_call_ms_min,per_call_ms_max,table_ms_median,table_ms_min,"
           "table_ms_max,ratio_of_medians\n");
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const model_shape *m = &shapes[s];
        attn_rope_options opt[2] = {ATTN_ROPE_OPTIONS_INIT, ATTN_ROPE_OPTIONS_INIT};
        opt[0].theta = m->theta_global;
        opt[1].theta = m->theta_local > 0 ? m->theta_local : m->theta_global;
        opt[0].threads = opt[1].threads = 1;
        const size_t nq = (size_t)(PREFILL * m->hq * m->dim), nk = (size_t)(PREFILL * m->hkv * m->dim);
        float *q0 = malloc(nq * sizeof(float)), *k0 = malloc(nk * sizeof(float)), *q = malloc(nq * sizeof(float)),
              *k = malloc(nk * sizeof(float)), *q_ref = malloc(nq * sizeof(float));
        for (size_t i = 0; i < nq; i++) q0[i] = (float)((int)(i * 2654435761u % 2001) - 1000) / 1000.0f;
        for (size_t i = 0; i < nk; i++) k0[i] = (float)((int)(i * 2246822519u % 2001) - 1000) / 1000.0f;
        double *t_call[2], *t_table[2]; /* [phase][round], milliseconds */
        for (int p = 0; p < 2; p++) {
            t_call[p] = malloc((size_t)rounds * sizeof(double));
            t_table[p] = malloc((size_t)rounds * sizeof(double));
        }
        for (int r = 0; r < rounds; r++) {
            /* per call */
            memcpy(q, q0, nq * sizeof(float));
            memcpy(k, k0, nk * sizeof(float));
            double t0 = cpu_seconds();
            rotate_all(m, q, k, PREFILL, 0, NULL, opt);
            t_call[0][r] = 1e3 * (cpu_seconds() - t0);
            memcpy(q_ref, q, nq * sizeof(float));
            t0 = cpu_seconds();
            for (int64_t step = 0; step < DECODE; step++) rotate_all(m, q, k, 1, PREFILL + step, NULL, opt);
            t_call[1][r] = 1e3 * (cpu_seconds() - t0);
            memcpy(q_ref + nq - (size_t)(m->hq * m->dim), q, (size_t)(m->hq * m->dim) * sizeof(float));
            /* table: the session's tables, created with it (not timed: once per session) */
            attn_rope_table *tables[2] = {NULL, NULL};
            for (int w = 0; w < 1 + (m->theta_local > 0); w++)
                if (attn_rope_table_new(m->dim, &opt[w], &tables[w])) die("table_new");
            if (!tables[1]) tables[1] = tables[0];
            memcpy(q, q0, nq * sizeof(float));
            memcpy(k, k0, nk * sizeof(float));
            t0 = cpu_seconds();
            for (int w = 0; w < 2; w++)
                if ((w == 0 || tables[1] != tables[0]) && attn_rope_table_reserve(tables[w], PREFILL)) die("reserve");
            rotate_all(m, q, k, PREFILL, 0, tables, opt);
            t_table[0][r] = 1e3 * (cpu_seconds() - t0);
            if (memcmp(q, q_ref, (nq - (size_t)(m->hq * m->dim)) * sizeof(float))) {
                fprintf(stderr, "rope_table_bench: %s: the table's rotation differs from attn_rope_apply's\n",
                        m->name);
                return 1;
            }
            t0 = cpu_seconds();
            for (int64_t step = 0; step < DECODE; step++) {
                for (int w = 0; w < 2; w++)
                    if ((w == 0 || tables[1] != tables[0]) && attn_rope_table_reserve(tables[w], PREFILL + step + 1))
                        die("reserve");
                rotate_all(m, q, k, 1, PREFILL + step, tables, opt);
            }
            t_table[1][r] = 1e3 * (cpu_seconds() - t0);
            if (memcmp(q, q_ref + nq - (size_t)(m->hq * m->dim), (size_t)(m->hq * m->dim) * sizeof(float))) {
                fprintf(stderr, "rope_table_bench: %s: decode: the table's rotation differs\n", m->name);
                return 1;
            }
            if (tables[1] != tables[0]) attn_rope_table_free(tables[1]);
            attn_rope_table_free(tables[0]);
        }
        for (int p = 0; p < 2; p++) {
            qsort(t_call[p], (size_t)rounds, sizeof(double), compare_doubles);
            qsort(t_table[p], (size_t)rounds, sizeof(double), compare_doubles);
            const double mc = t_call[p][rounds / 2], mt = t_table[p][rounds / 2];
            printf("%s,%s,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.2f\n", m->name, p ? "decode 128 @512" : "prefill 512", mc,
                   t_call[p][0], t_call[p][rounds - 1], mt, t_table[p][0], t_table[p][rounds - 1], mc / mt);
            free(t_call[p]);
            free(t_table[p]);
        }
        free(q0), free(k0), free(q), free(k), free(q_ref);
    }
    return 0;
}
