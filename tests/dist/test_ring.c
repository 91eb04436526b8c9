/*
 * test_ring.c — `mpirun -np P attn ring` against single-process `attn sdpa`
 * on the same files: P = 1..4 ranks (oversubscribed), lengths that 2P does
 * not divide, fewer positions than ranks, both layouts, causal in both
 * alignments, sliding windows, key lengths (a batch with none), GQA and MQA,
 * cross-attention, Dv != D, 2-D/3-D/4-D files, a custom scale; outputs and
 * lse within RING_OUT_FAIL x max|O|, gradients within RING_GRAD_FAIL x
 * max|gradient|.  And failures: a bad input on one rank or all, an
 * unwritable output, refused options, ranks started with different options
 * (and, through ring_probe, ranks passing the library different ones);
 * each ends every rank within a bounded time with one message and a
 * non-zero status, leaving no output file.
 *
 * The launcher settings this machine needs (root, 2 cores for 4 ranks,
 * shared-memory transport) are set here, for the tests only.
 */
#include "cli_files.h"
#include "testutil.h"
#include "tolerances.h"

#include "attn.h"
#include "attn_chapter.h"
#include "attn_interp.h"
#include "attn_io.h"
#include "attn_machine.h"
#include "attn_viz.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define RING_FAIL_SECONDS 60
/* Open MPI ends a job within about a second of a rank's death (measured
 * 1.0-1.2 s here); the bound leaves room for a loaded machine. */
#define RING_KILLED_SECONDS 15

#ifndef ATTN_MPIEXEC

/* Without MPI the command exists and says why it cannot run. */
static void ring_is_off_without_mpi(void **state) {
    (void)state;
    char *output;
    int rc = test_run_cli(&output, "ring -q q.npy -k k.npy -v v.npy -o o.npy");
    assert_int_equal(rc, 2);
    assert_non_null(strstr(output, "built without MPI"));
    free(output);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(ring_is_off_without_mpi)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}

#else

/* Runs a shell command with stdout and stderr captured; returns the exit
 * status (128 + signal if killed) and the seconds it took. */
static int run_shell(char **output, double *seconds, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int run_shell(char **output, double *seconds, const char *fmt, ...) {
    char cmd[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd - 8, fmt, ap);
    va_end(ap);
    strcat(cmd, " 2>&1");
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    FILE *f = popen(cmd, "r");
    if (!f) fail_msg("popen failed");
    size_t cap = 4096, n = 0, got;
    char *buf = malloc(cap);
    while ((got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (cap - n < 2) buf = realloc(buf, cap *= 2);
    }
    buf[n] = 0;
    int st = pclose(f);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (seconds) *seconds = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    *output = buf;
    return WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : -1;
}

/* `timeout T mpirun LAUNCH`, LAUNCH being mpirun's arguments (several
 * programs for MPMD: "-np 1 A : -np 2 B"); returns the exit status. */
static int run_launch(char **output, double *seconds, const char *launch) {
    return run_shell(output, seconds, "timeout %d %s %s", RING_FAIL_SECONDS * 2, ATTN_MPIEXEC, launch);
}

/* `timeout T mpirun -np P attn ring ARGS`; returns the exit status. */
static int run_ring(char **output, double *seconds, int ranks, const char *args) {
    char launch[8192];
    snprintf(launch, sizeof launch, "-np %d %s ring %s", ranks, ATTN_CLI_PATH, args);
    return run_launch(output, seconds, launch);
}

static float *random_file(test_rng *r, const char *name, int ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    float *x = malloc(sizeof(float) * (size_t)n);
    test_fill_normal(r, x, n, 1.0);
    test_save_f32(test_path(name), ndim, shape, x);
    return x;
}

/* *diff = max |got - want| (equal infinities equal; infinite where only
 * one side is infinite), *scale = max |want| over finite elements. */
static void compare(const char *got_name, const char *want_name, double *diff, double *scale) {
    attn_array got = {0}, want = {0};
    if (attn_npy_load(test_path(got_name), &got)) fail_msg("%s: %s", got_name, attn_last_error());
    if (attn_npy_load(test_path(want_name), &want)) fail_msg("%s: %s", want_name, attn_last_error());
    assert_int_equal(got.ndim, want.ndim);
    for (int d = 0; d < got.ndim; d++) assert_int_equal(got.shape[d], want.shape[d]);
    const float *g = got.data, *w = want.data;
    *diff = 0;
    *scale = 1e-30;
    for (int64_t i = 0; i < got.count; i++) {
        if (isinf(w[i]) || isinf(g[i])) {
            if (g[i] != w[i]) *diff = INFINITY;
            continue;
        }
        *diff = fmax(*diff, fabs((double)g[i] - w[i]));
        *scale = fmax(*scale, fabs((double)w[i]));
    }
    attn_array_free(&got);
    attn_array_free(&want);
}

/* The worst relative differences seen, printed at the end. */
static double worst_out, worst_lse, worst_grad;

typedef struct ring_case {
    int ndim;                        /* of the files: 2, 3 or 4 */
    int64_t B, L, S, Hq, Hkv, D, Dv;
    const char *flags;               /* mask and scale flags, shared by both runs */
    const int64_t *key_lengths;      /* [B] or NULL */
    int grads;                       /* also compare dq, dk, dv */
    const char *mask, *bias;         /* their files' shapes, as "B,H,L,S",
                                        "H,1,S", "L,S" (letters: the case's
                                        sizes, H = Hq), or NULL */
} ring_case;

/* The shape a mask or bias spec names; returns its rank. */
static int table_shape(const ring_case *c, const char *spec, int64_t *shape) {
    int ndim = 0;
    for (const char *p = spec; *p; p++) {
        if (*p == ',') continue;
        shape[ndim++] = *p == 'B' ? c->B : *p == 'H' ? c->Hq : *p == 'L' ? c->L : *p == 'S' ? c->S : 1;
    }
    return ndim;
}

/* A random mask (three keys in four visible, int32 for 2-D files and bool
 * for the others, which the commands convert alike) or bias (normal, one
 * entry in ten -inf), written as `name`; with a query axis, one query row
 * is hidden entirely (output 0, lse -inf through the ring). */
static void write_table(test_rng *r, const ring_case *c, const char *spec, bool is_mask, const char *name) {
    int64_t shape[4];
    const int ndim = table_shape(c, spec, shape);
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    const bool has_rows = ndim >= 2 && shape[ndim - 2] == c->L && c->L > 1;
    const int64_t keys = shape[ndim - 1], rows = shape[ndim - 2], hidden_row = rows / 3;
    attn_array a = {.dtype = is_mask ? (ndim == 2 ? ATTN_I32 : ATTN_BOOL) : ATTN_F32, .ndim = ndim, .count = n};
    memcpy(a.shape, shape, sizeof(int64_t) * (size_t)ndim);
    a.data = malloc(attn_dtype_size(a.dtype) * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
        const bool hide = has_rows && i / keys % rows == hidden_row;
        const double u = test_rng_uniform(r);
        if (a.dtype == ATTN_I32) ((int32_t *)a.data)[i] = !hide && u < 0.75 ? 7 : 0;
        else if (is_mask) ((uint8_t *)a.data)[i] = !hide && u < 0.75;
        else ((float *)a.data)[i] = hide || u < 0.1 ? -INFINITY : (float)test_rng_normal(r);
    }
    if (attn_npy_save(test_path(name), &a)) fail_msg("saving %s: %s", name, attn_last_error());
    free(a.data);
}


static void shape_of(int ndim, int64_t B, int64_t n, int64_t H, int64_t W, int64_t *shape) {
    const int64_t full[4] = {B, n, H, W};
    if (ndim == 2) { shape[0] = n; shape[1] = W; }
    else memcpy(shape, full + (4 - ndim), sizeof(int64_t) * (size_t)ndim);
}

/* Writes the case's inputs and the single-process answers (o_ref, lse_ref,
 * and the gradients); returns the extra flags both commands take. */
static void write_case(test_rng *r, const ring_case *c, char *flags, size_t cap) {
    int64_t qs[4], ks[4], vs[4], os[4];
    shape_of(c->ndim, c->B, c->L, c->Hq, c->D, qs);
    shape_of(c->ndim, c->B, c->S, c->Hkv, c->D, ks);
    shape_of(c->ndim, c->B, c->S, c->Hkv, c->Dv, vs);
    shape_of(c->ndim, c->B, c->L, c->Hq, c->Dv, os);
    free(random_file(r, "q.npy", c->ndim, qs));
    free(random_file(r, "k.npy", c->ndim, ks));
    free(random_file(r, "v.npy", c->ndim, vs));
    size_t n = (size_t)snprintf(flags, cap, "%s --threads 1", c->flags);
    if (c->key_lengths) {
        attn_array a = {.dtype = ATTN_I64, .ndim = 1, .shape = {c->B}, .count = c->B, .data = (void *)c->key_lengths};
        if (attn_npy_save(test_path("lens.npy"), &a)) fail_msg("%s", attn_last_error());
        n += (size_t)snprintf(flags + n, cap - n, " --key-lengths %s", test_path("lens.npy"));
    }
    if (c->mask) {
        write_table(r, c, c->mask, true, "mask.npy");
        n += (size_t)snprintf(flags + n, cap - n, " --mask %s", test_path("mask.npy"));
    }
    if (c->bias) {
        write_table(r, c, c->bias, false, "bias.npy");
        n += (size_t)snprintf(flags + n, cap - n, " --bias %s", test_path("bias.npy"));
    }
    char *output;
    int rc;
    if (c->grads) {
        free(random_file(r, "do.npy", c->ndim, os));
        rc = test_run_cli(&output, "sdpa -q %s -k %s -v %s -o %s --lse %s --grad-out %s --dq %s --dk %s --dv %s %s",
                          test_path("q.npy"), test_path("k.npy"), test_path("v.npy"), test_path("o_ref.npy"),
                          test_path("lse_ref.npy"), test_path("do.npy"), test_path("dq_ref.npy"),
                          test_path("dk_ref.npy"), test_path("dv_ref.npy"), flags);
    } else {
        rc = test_run_cli(&output, "sdpa -q %s -k %s -v %s -o %s --lse %s %s", test_path("q.npy"), test_path("k.npy"),
                          test_path("v.npy"), test_path("o_ref.npy"), test_path("lse_ref.npy"), flags);
    }
    if (rc) fail_msg("attn sdpa %s exited %d: %s", flags, rc, output);
    free(output);
}

/* Runs the ring on the written case and compares with the references. */
static void check_ring(const ring_case *c, const char *flags, int ranks, const char *layout) {
    char args[4096], *output;
    int n = snprintf(args, sizeof args, "-q %s -k %s -v %s -o %s --lse %s %s%s%s", test_path("q.npy"),
                     test_path("k.npy"), test_path("v.npy"), test_path("o.npy"), test_path("lse.npy"), flags,
                     layout ? " --shard " : "", layout ? layout : "");
    if (c->grads)
        snprintf(args + n, sizeof args - (size_t)n, " --grad-out %s --dq %s --dk %s --dv %s", test_path("do.npy"),
                 test_path("dq.npy"), test_path("dk.npy"), test_path("dv.npy"));
    int rc = run_ring(&output, NULL, ranks, args);
    if (rc) {
        printf("mpirun -np %d attn ring %s exited %d:\n%s\n", ranks, args, rc, output);
        fail_msg("attn ring exited %d", rc);
    }
    free(output);
    /* Both against max|O|, as the issue asks. */
    double d_out, max_out, d_lse, max_lse;
    compare("o.npy", "o_ref.npy", &d_out, &max_out);
    compare("lse.npy", "lse_ref.npy", &d_lse, &max_lse);
    d_out /= max_out;
    d_lse /= max_out;
    worst_out = fmax(worst_out, d_out);
    worst_lse = fmax(worst_lse, d_lse);
    if (!(d_out <= RING_OUT_FAIL) || !(d_lse <= RING_OUT_FAIL))
        fail_msg("P=%d %s%s: out differs by %.3g, lse by %.3g (x max|O|)", ranks, flags, layout ? layout : "", d_out,
                 d_lse);
    if (!c->grads) return;
    const char *names[3][2] = {{"dq.npy", "dq_ref.npy"}, {"dk.npy", "dk_ref.npy"}, {"dv.npy", "dv_ref.npy"}};
    for (int g = 0; g < 3; g++) {
        double d, scale;
        compare(names[g][0], names[g][1], &d, &scale);
        d /= scale;
        worst_grad = fmax(worst_grad, d);
        if (!(d <= RING_GRAD_FAIL)) fail_msg("P=%d %s: %s differs by %.3g (relative)", ranks, flags, names[g][0], d);
    }
}

static void sweep(const ring_case *c, uint64_t seed, const int *ranks, int count, const char *layout) {
    test_rng r;
    test_rng_seed(&r, seed);
    char flags[1024];
    write_case(&r, c, flags, sizeof flags);
    for (int i = 0; i < count; i++) check_ring(c, flags, ranks[i], layout);
}

static const int all_ranks[] = {1, 2, 3, 4};

/* Self-attention, causal, GQA 2, 4-D files; L = 37 is divisible by no 2P. */
static void causal_gqa_every_rank_count(void **state) {
    (void)state;
    const ring_case c = {4, 2, 37, 37, 4, 2, 16, 16, "--causal", NULL, 0, NULL, NULL};
    sweep(&c, 1, all_ranks, 4, NULL);                          /* zigzag by default */
    sweep(&c, 1, (const int[]){3, 4}, 2, "contiguous");
}

/* No mask, MQA, Dv != D, 3-D files, both layouts. */
static void full_mqa_value_width(void **state) {
    (void)state;
    const ring_case c = {3, 1, 29, 29, 2, 1, 8, 12, "--scale 0.4", NULL, 0, NULL, NULL};
    sweep(&c, 2, all_ranks, 4, NULL);
    sweep(&c, 2, (const int[]){4}, 1, "zigzag");
}

/* Cross-attention L != S, lower-right causal, and a window around the
 * lower-right diagonal without causality. */
static void cross_attention_lower_right(void **state) {
    (void)state;
    const ring_case c = {4, 2, 23, 41, 4, 4, 8, 8, "--causal-lower-right", NULL, 0, NULL, NULL};
    sweep(&c, 3, (const int[]){2, 3, 4}, 3, NULL);
    const ring_case w = {4, 1, 20, 30, 2, 1, 8, 8, "--align lower-right --window 3,3", NULL, 0, NULL, NULL};
    sweep(&w, 4, (const int[]){3, 4}, 2, NULL);
}

/* Sliding windows (causal and two-sided), so whole blocks are skipped. */
static void sliding_windows(void **state) {
    (void)state;
    const ring_case c = {4, 1, 50, 50, 2, 2, 8, 8, "--causal --window 6,0", NULL, 0, NULL, NULL};
    sweep(&c, 5, (const int[]){2, 4}, 2, NULL);
    const ring_case d = {3, 1, 45, 45, 4, 2, 8, 8, "--window 4,9", NULL, 0, NULL, NULL};
    sweep(&d, 6, (const int[]){3}, 1, "contiguous");
}

/* Key lengths, one batch with none at all: its rows are 0 with lse -inf. */
static void key_lengths_and_empty_rows(void **state) {
    (void)state;
    static const int64_t lens[3] = {31, 10, 0};
    const ring_case c = {4, 3, 31, 31, 2, 1, 8, 8, "", lens, 0, NULL, NULL};
    sweep(&c, 7, (const int[]){2, 3}, 2, NULL);
    const ring_case d = {4, 3, 31, 31, 2, 1, 8, 8, "--causal", lens, 0, NULL, NULL};
    sweep(&d, 8, (const int[]){4}, 1, NULL);
}

/* 2-D files, fewer positions than ranks on some shards (L = 3 < 2P). */
static void tiny_and_two_d(void **state) {
    (void)state;
    const ring_case c = {2, 1, 19, 19, 1, 1, 4, 4, "--causal --scale 0.3", NULL, 0, NULL, NULL};
    sweep(&c, 9, (const int[]){4}, 1, NULL);
    const ring_case t = {4, 1, 3, 5, 2, 1, 4, 4, "", NULL, 0, NULL, NULL};
    sweep(&t, 10, (const int[]){4}, 1, "contiguous");
    const ring_case u = {4, 1, 3, 5, 2, 1, 4, 4, "--causal-lower-right", NULL, 0, NULL, NULL};
    sweep(&u, 11, (const int[]){3, 4}, 2, NULL);
}

/* Backward across the ring against attn sdpa's gradients. */
static void gradients(void **state) {
    (void)state;
    const ring_case c = {4, 2, 27, 27, 4, 2, 8, 8, "--causal", NULL, 1, NULL, NULL};
    sweep(&c, 12, (const int[]){1, 3}, 2, NULL);
    sweep(&c, 12, (const int[]){4}, 1, "contiguous");
    const ring_case x = {4, 1, 13, 22, 2, 1, 8, 6, "--causal-lower-right", NULL, 1, NULL, NULL};
    sweep(&x, 13, (const int[]){2, 4}, 2, NULL);
    static const int64_t lens[2] = {17, 5};
    const ring_case k = {4, 2, 17, 17, 2, 2, 4, 4, "--window 3,2", lens, 1, NULL, NULL};
    sweep(&k, 14, (const int[]){3}, 1, NULL);
}

/* Masks and biases across ranks: every shape attn sdpa takes ([L, S],
 * [H, L, S], [B, H, L, S], size-1 dimensions broadcast, one query row for
 * all included), with causal masks in the zigzag layout, windows, key
 * lengths, GQA and cross-attention; a query row hidden entirely; outputs,
 * lse and gradients against attn sdpa's. */
static void masks_and_biases(void **state) {
    (void)state;
    const int two_three[] = {2, 3};
    const ring_case a = {4, 2, 23, 23, 4, 2, 8, 8, "--causal", NULL, 0, "L,S", NULL};
    sweep(&a, 21, two_three, 2, NULL); /* zigzag */
    const ring_case b = {3, 1, 29, 29, 4, 2, 8, 8, "", NULL, 0, "H,L,S", "1,L,S"};
    sweep(&b, 22, two_three, 2, NULL);
    sweep(&b, 22, (const int[]){3}, 1, "zigzag");
    const ring_case x = {4, 2, 19, 31, 2, 1, 8, 6, "--causal-lower-right", NULL, 0, "B,1,1,S", "B,H,L,S"};
    sweep(&x, 23, two_three, 2, NULL);
    const ring_case t = {2, 1, 26, 26, 1, 1, 4, 4, "--window 5,1", NULL, 0, "L,S", "L,1"};
    sweep(&t, 24, two_three, 2, NULL);
    /* Fewer query rows than ranks: some ranks hold no rows of the tables. */
    const ring_case u = {4, 1, 3, 5, 2, 1, 4, 4, "", NULL, 0, "L,S", "1,1,L,S"};
    sweep(&u, 27, (const int[]){4}, 1, "contiguous");
}

/* The backward with masks and biases. */
static void masks_and_biases_gradients(void **state) {
    (void)state;
    const int two_three[] = {2, 3};
    static const int64_t lens[2] = {21, 12};
    const ring_case c = {4, 2, 21, 21, 2, 2, 8, 8, "--causal", lens, 1, "L,S", "H,L,S"};
    sweep(&c, 25, two_three, 2, NULL);
    sweep(&c, 25, (const int[]){3}, 1, "contiguous");
    const ring_case w = {4, 1, 17, 25, 4, 2, 4, 4, "--window 3,2", NULL, 1, "1,H,1,S", "1,1,L,S"};
    sweep(&w, 26, two_three, 2, NULL);
}

/* ----------------------------------------------------------------- failures */

/* `mpirun LAUNCH` fails quickly, with a non-zero status, one message
 * containing `expect` (printed once, not once per rank), and no output
 * file. */
/* --layout BHLD: PyTorch's [B, H, L, D] files, each rank reading its rows
 * along the third axis, give the BLHD run's output and gradients bit for
 * bit, written back in BHLD (the same computation, reordered). */
static void swap_middle(const float *x, float *y, int64_t B, int64_t X, int64_t Y, int64_t W) {
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < X; i++)
            for (int64_t j = 0; j < Y; j++)
                memcpy(y + ((b * Y + j) * X + i) * W, x + ((b * X + i) * Y + j) * W, sizeof(float) * (size_t)W);
}

static void heads_first_layout(void **state) {
    (void)state;
    test_rng r;
    test_rng_seed(&r, 77);
    const int64_t B = 2, L = 13, S = 11, Hq = 4, Hkv = 2, D = 8, Dv = 6;
    const int64_t qs[4] = {B, L, Hq, D}, ks[4] = {B, S, Hkv, D}, vs[4] = {B, S, Hkv, Dv}, os[4] = {B, L, Hq, Dv};
    const int64_t qt[4] = {B, Hq, L, D}, kt[4] = {B, Hkv, S, D}, vt[4] = {B, Hkv, S, Dv}, ot[4] = {B, Hq, L, Dv};
    const char *names[4] = {"lq.npy", "lk.npy", "lv.npy", "ldo.npy"}, *tnames[4] = {"tq.npy", "tk.npy", "tv.npy", "tdo.npy"};
    const int64_t *shapes[4] = {qs, ks, vs, os}, *tshapes[4] = {qt, kt, vt, ot};
    for (int n = 0; n < 4; n++) {
        float *x = random_file(&r, names[n], 4, shapes[n]);
        const int64_t *sh = shapes[n], count = sh[0] * sh[1] * sh[2] * sh[3];
        float *y = malloc(sizeof(float) * (size_t)count);
        swap_middle(x, y, sh[0], sh[1], sh[2], sh[3]);
        test_save_f32(test_path(tnames[n]), 4, tshapes[n], y);
        free(x);
        free(y);
    }
    char args[4096], *output;
    for (int t = 0; t < 2; t++) {
        const char *const *in = t ? tnames : names, *tag = t ? "t" : "l";
        snprintf(args, sizeof args, "-q %s -k %s -v %s -o %s --grad-out %s --dq %s --dk %s --dv %s --causal-lower-right%s",
                 test_path(in[0]), test_path(in[1]), test_path(in[2]), test_path(t ? "to.npy" : "lo.npy"),
                 test_path(in[3]), test_path(t ? "tdq.npy" : "ldq.npy"), test_path(t ? "tdk.npy" : "ldk.npy"),
                 test_path(t ? "tdv.npy" : "ldv.npy"), t ? " --layout BHLD" : "");
        int rc = run_ring(&output, NULL, 3, args);
        if (rc) fail_msg("ring (%s) exited %d:\n%s", tag, rc, output);
        free(output);
    }
    const char *outs[4] = {"o", "dq", "dk", "dv"};
    const int64_t *oshape[4] = {os, qs, ks, vs};
    for (int n = 0; n < 4; n++) {
        char lname[32], tname[32];
        snprintf(lname, sizeof lname, "l%s.npy", outs[n]);
        snprintf(tname, sizeof tname, "t%s.npy", outs[n]);
        attn_array a = {0}, b = {0};
        if (attn_npy_load(test_path(lname), &a) || attn_npy_load(test_path(tname), &b)) fail_msg("%s", attn_last_error());
        const int64_t *sh = oshape[n], count = sh[0] * sh[1] * sh[2] * sh[3];
        assert_int_equal(b.ndim, 4);
        assert_int_equal(b.shape[1], sh[2]); /* heads before positions */
        assert_int_equal(b.shape[2], sh[1]);
        float *back = malloc(sizeof(float) * (size_t)count);
        swap_middle(b.data, back, sh[0], sh[2], sh[1], sh[3]);
        if (memcmp(back, a.data, sizeof(float) * (size_t)count) != 0)
            fail_msg("%s: the BHLD run differs from the BLHD run", outs[n]);
        free(back);
        attn_array_free(&a);
        attn_array_free(&b);
    }
}

static void expect_launch_failure(const char *launch, int want_status, const char *expect) {
    char *output;
    double seconds;
    remove(test_path("o_fail.npy"));
    int rc = run_launch(&output, &seconds, launch);
    int messages = 0;
    for (const char *p = output; (p = strstr(p, "attn ring:")); p++) messages++;
    if (rc == 0 || rc == 124 || rc >= 128 || seconds > RING_FAIL_SECONDS ||
        (want_status && rc != want_status) || messages != 1 || !strstr(output, expect)) {
        printf("mpirun %s\nexited %d after %.1f s with %d messages:\n%s\n", launch, rc, seconds, messages, output);
        fail_msg("expected a failure within %d s, status %d, one message containing '%s'", RING_FAIL_SECONDS,
                 want_status, expect);
    }
    assert_false(test_file_exists(test_path("o_fail.npy")));
    free(output);
}

static void expect_failure(int ranks, const char *args, int want_status, const char *expect) {
    char launch[8192];
    snprintf(launch, sizeof launch, "-np %d %s ring %s", ranks, ATTN_CLI_PATH, args);
    expect_launch_failure(launch, want_status, expect);
}

static void failures_end_every_rank(void **state) {
    (void)state;
    test_rng r;
    test_rng_seed(&r, 99);
    const int64_t qs[4] = {1, 40, 2, 8}, ks[4] = {1, 40, 2, 8}, bad_d[4] = {1, 40, 2, 6};
    float *q = random_file(&r, "fq.npy", 4, qs);
    free(random_file(&r, "fk.npy", 4, ks));
    free(random_file(&r, "fv.npy", 4, ks));
    free(random_file(&r, "fk6.npy", 4, bad_d));
    char args[4096];
#define FAIL_ARGS(qn, kn, extra)                                                                          \
    (snprintf(args, sizeof args, "-q %s -k %s -v %s -o %s --threads 1 %s", test_path(qn), test_path(kn), \
              test_path("fv.npy"), test_path("o_fail.npy"), extra),                                       \
     args)

    /* A missing file: every rank fails to open it, one message. */
    expect_failure(4, FAIL_ARGS("fq.npy", "missing.npy", ""), 1, "missing.npy");
    /* A shape mismatch (k's width 6, q's 8). */
    expect_failure(3, FAIL_ARGS("fq.npy", "fk6.npy", "--causal"), 1, "width");
    /* A NaN in rows only rank 2 of 4 reads (contiguous: rows 20..29). */
    q[(int64_t)25 * 2 * 8 + 3] = NAN;
    test_save_f32(test_path("fq_nan.npy"), 4, qs, q);
    expect_failure(4, FAIL_ARGS("fq_nan.npy", "fk.npy", "--shard contiguous"), 1,
                   "rank 2 of 4: -q");
    expect_failure(4, FAIL_ARGS("fq_nan.npy", "fk.npy", "--shard contiguous"), 1, "position 25 is NaN");
    /* A truncated file. */
    size_t size;
    char *bytes = test_read_file(test_path("fk.npy"), &size);
    test_write_file(test_path("fk_short.npy"), bytes, size - 100);
    free(bytes);
    expect_failure(2, FAIL_ARGS("fq.npy", "fk_short.npy", ""), 1, "truncated");
    /* An output nobody can write. */
    snprintf(args, sizeof args, "-q %s -k %s -v %s -o /nonexistent-dir/o.npy --threads 1", test_path("fq.npy"),
             test_path("fk.npy"), test_path("fv.npy"));
    expect_failure(3, args, 1, "/nonexistent-dir/o.npy");
    /* A mask of the wrong shape; a NaN in the rows of a bias only rank 2
     * of 4 reads. */
    const int64_t mask_shape[2] = {7, 40}, bias_shape[3] = {2, 40, 40};
    char extra[1024];
    free(random_file(&r, "fmask.npy", 2, mask_shape));
    snprintf(extra, sizeof extra, "--mask %s", test_path("fmask.npy"));
    expect_failure(2, FAIL_ARGS("fq.npy", "fk.npy", extra), 1, "its L dimension must be 1 or 40");
    float *bias = random_file(&r, "fbias.npy", 3, bias_shape);
    bias[(int64_t)1 * 40 * 40 + 23 * 40 + 5] = NAN;
    test_save_f32(test_path("fbias_nan.npy"), 3, bias_shape, bias);
    free(bias);
    snprintf(extra, sizeof extra, "--shard contiguous --bias %s", test_path("fbias_nan.npy"));
    expect_failure(4, FAIL_ARGS("fq.npy", "fk.npy", extra), 1, "rank 2 of 4: --bias");
    expect_failure(4, FAIL_ARGS("fq.npy", "fk.npy", extra), 1, "query row 23 is NaN");
    /* What cannot be sharded: a usage error, once. */
    expect_failure(2, FAIL_ARGS("fq.npy", "fk.npy", "--weights w.npy"), 2, "--weights");
    expect_failure(2, FAIL_ARGS("fq.npy", "fk.npy", "--shard diagonal"), 2, "--shard");
    expect_failure(2, FAIL_ARGS("fq.npy", "fk.npy", "--timeout -1"), 2, "--timeout");
    free(q);
#undef FAIL_ARGS
}

/* ------------------------------------------------ ranks that stop or die */

/* Starts a command (exec, so the rank is the command itself) and, once it
 * has used TICKS hundredths of a second of CPU (by then the ring is
 * computing: startup takes little CPU), sends it SIGNAL and logs the time
 * (seconds since the epoch) to LOG:  stopper.sh SIGNAL TICKS LOG CMD...  */
static const char stopper_script[] =
    "#!/bin/sh\n"
    "sig=$1; ticks=$2; log=$3; shift 3; pid=$$\n"
    "( while kill -0 $pid 2>/dev/null; do\n"
    "    t=$(awk '{print $14 + $15}' /proc/$pid/stat 2>/dev/null)\n"
    "    if [ -n \"$t\" ] && [ \"$t\" -ge \"$ticks\" ]; then\n"
    "      kill -$sig $pid; date +%s.%N > \"$log\"; exit 0\n"
    "    fi\n"
    "    sleep 0.05\n"
    "  done ) </dev/null >/dev/null 2>&1 &\n"
    "exec \"$@\"\n";

/* Processes still running (zombies aside: nothing here reaps orphans)
 * whose program was started as `argv0`. */
static int live_processes(const char *argv0) {
    int live = 0;
    char *listing;
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "for p in /proc/[0-9]*; do tr '\\0' '\\n' 2>/dev/null <$p/cmdline | head -n 1 | "
             "grep -qxF '%s' || continue; s=$(awk '{print $3}' $p/stat 2>/dev/null); "
             "[ -n \"$s\" ] && [ \"$s\" != Z ] && echo \"live $p\"; done", argv0);
    run_shell(&listing, NULL, "%s", cmd);
    for (const char *p = listing; (p = strstr(p, "live /proc/")); p++) live++;
    if (live) printf("still running: %s\n", listing);
    free(listing);
    return live;
}

/* Rank 2 of 3 gets `signal` in the middle of the ring; every rank must be
 * gone within bound seconds of it, with exit status want_status and
 * output containing `expect` and `expect2` (if not NULL).  Returns the
 * seconds from the signal to the end. */
static double signal_rank_in_ring(const char *signal, const char *extra, double bound, const char *expect,
                                  const char *expect2, int want_status) {
    char launch[8192], marker[1024], ring[2048], *output;
    snprintf(marker, sizeof marker, "%s", test_path("attn-ring-marker"));
    remove(marker);
    if (symlink(ATTN_CLI_PATH, marker) != 0) fail_msg("symlink %s", marker);
    test_write_file(test_path("stopper.sh"), stopper_script, strlen(stopper_script));
    chmod(test_path("stopper.sh"), 0755);
    remove(test_path("signalled"));
    /* Several seconds of compute on each rank, in steps of one or two, so
     * that the signal lands inside the ring and a waiting rank soon starts
     * to wait (AddressSanitizer makes the kernels about 25 times slower,
     * the portable kernels about 10: a step of 98304 positions would take
     * them a minute, longer than the bound). */
#if defined(__SANITIZE_ADDRESS__)
    const int positions = 24576;
#else
    const int positions = strcmp(attn_isa_name(), "generic") == 0 ? 24576 : 98304;
#endif
    snprintf(ring, sizeof ring, "%s ring --bench %d,%d,1,1,64 --threads 1 %s", marker, positions, positions, extra);
    snprintf(launch, sizeof launch, "-np 2 %s : -np 1 %s %s 100 %s %s", ring, test_path("stopper.sh"), signal,
             test_path("signalled"), ring);
    int rc = run_launch(&output, NULL, launch);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    size_t size;
    char *stamp = test_file_exists(test_path("signalled")) ? test_read_file(test_path("signalled"), &size) : NULL;
    if (!stamp) fail_msg("rank 2 ended before it got SIG%s (exit %d):\n%s", signal, rc, output);
    const double after = (double)now.tv_sec + 1e-9 * (double)now.tv_nsec - strtod(stamp, NULL);
    free(stamp);
    if (rc != want_status || after > bound || !strstr(output, expect) || (expect2 && !strstr(output, expect2))) {
        printf("mpirun %s\nexited %d, %.1f s after SIG%s:\n%s\n", launch, rc, after, signal, output);
        fail_msg("expected status %d within %.0f s of SIG%s, with '%s'", want_status, bound, signal, expect);
    }
    assert_int_equal(live_processes(marker), 0);
    free(output);
    return after;
}

/* A stopped rank (SIGSTOP: alive, silent) used to hold every other rank
 * forever.  With --timeout the ranks waiting on it give up, name it, and
 * MPI_Abort ends the job, the stopped rank included.  The bound: the
 * timeout, plus the rest of the step the waiting rank was computing, plus
 * the abort. */
static void stopped_rank_times_out(void **state) {
    (void)state;
    const double after =
        signal_rank_in_ring("STOP", "--timeout 10", 10 + RING_FAIL_SECONDS, "rank 2", "for 10 s", 1);
    printf("stopped rank: every rank gone %.1f s after SIGSTOP (--timeout 10)\n", after);
}

/* A killed rank: Open MPI's runtime notices the exit and kills the rest. */
static void killed_rank_ends_the_job(void **state) {
    (void)state;
    const double after = signal_rank_in_ring("KILL", "", RING_KILLED_SECONDS, "exited on signal 9", NULL, 137);
    printf("killed rank: every rank gone %.1f s after SIGKILL\n", after);
}

/* The library alone: a rank stopped before the call leaves the others in
 * its first agreement; rank 0 gives up after the timeout naming it and
 * tells rank 1, which names it too. */
static void library_times_out_on_a_stopped_rank(void **state) {
    (void)state;
    char launch[1024], *output;
    double seconds;
    snprintf(launch, sizeof launch, "-np 3 %s stop", ATTN_RING_PROBE_PATH);
    const int rc = run_launch(&output, &seconds, launch);
    const char *expect[2] = {"rank 0: timed out: rank 0 of 3: no answer from rank 2 for 2 s",
                             "rank 1: timed out: rank 0 of 3: no answer from rank 2 for 2 s"};
    if (rc != 1 || seconds > RING_FAIL_SECONDS || !strstr(output, expect[0]) || !strstr(output, expect[1])) {
        printf("mpirun %s exited %d after %.1f s:\n%s\n", launch, rc, seconds, output);
        fail_msg("expected status 1 within %d s, and '%s' and '%s'", RING_FAIL_SECONDS, expect[0], expect[1]);
    }
    assert_int_equal(live_processes(ATTN_RING_PROBE_PATH), 0);
    free(output);
}

/* Ranks started with different options (mpirun's MPMD form gives each
 * program its own arguments) would compute a silently mixed result; they
 * must refuse it together, naming the first difference and the ranks. */
static void ranks_must_agree(void **state) {
    (void)state;
    test_rng r;
    test_rng_seed(&r, 98);
    const int64_t shape[4] = {1, 40, 2, 8}, lens[1] = {30};
    free(random_file(&r, "aq.npy", 4, shape));
    free(random_file(&r, "ak.npy", 4, shape));
    free(random_file(&r, "av.npy", 4, shape));
    attn_array a = {.dtype = ATTN_I64, .ndim = 1, .shape = {1}, .count = 1, .data = (void *)lens};
    if (attn_npy_save(test_path("alens.npy"), &a)) fail_msg("%s", attn_last_error());
    char base[2048], launch[8192];
    snprintf(base, sizeof base, "%s ring -q %s -k %s -v %s -o %s --threads 1", ATTN_CLI_PATH, test_path("aq.npy"),
             test_path("ak.npy"), test_path("av.npy"), test_path("o_fail.npy"));
    static const struct {
        int first_ranks, other_ranks;
        const char *first, *other, *expect;
        int status;
    } cases[] = {
        /* (the first program also gets the zigzag layout by default) */
        {1, 2, "--causal", "", "ranks disagree on causal: rank 0 has 1, rank 1 has 0", 1},
        {2, 1, "--window 3,0", "--window 4,0", "ranks disagree on window left: rank 0 has 3, rank 2 has 4", 1},
        {1, 1, "--scale 0.5", "--scale 0.25", "ranks disagree on scale: rank 0 has 0.5, rank 1 has 0.25", 1},
        {2, 1, "--kernel ref", "--kernel flash", "ranks disagree on kernel: rank 0 has ref, rank 2 has flash", 1},
        {1, 2, "--shard zigzag", "--shard contiguous", "ranks disagree on layout", 1},
        {1, 1, "", "--key-lengths ALENS", "ranks disagree on whether --key-lengths is given", 2},
        {2, 1, "--mask AMASK", "", "ranks disagree on whether --mask is given: rank 0 has 1, rank 2 has 0", 2},
        {2, 1, "", "--report", "ranks disagree on whether --report is given", 2},
        /* A usage error on one rank only: every rank stops, rank 0 prints it. */
        {2, 1, "", "--piece-rows 0", "rank 2 of 3: --piece-rows", 2},
    };
    const int64_t mask_shape[2] = {40, 40};
    free(random_file(&r, "amask.npy", 2, mask_shape)); /* never read: the ranks disagree first */
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char args[2][512];
        const char *given[2] = {cases[i].first, cases[i].other};
        for (int g = 0; g < 2; g++) {
            if (strstr(given[g], "ALENS")) snprintf(args[g], sizeof args[g], "--key-lengths %s", test_path("alens.npy"));
            else if (strstr(given[g], "AMASK")) snprintf(args[g], sizeof args[g], "--mask %s", test_path("amask.npy"));
            else snprintf(args[g], sizeof args[g], "%s", given[g]);
        }
        snprintf(launch, sizeof launch, "-np %d %s %s : -np %d %s %s", cases[i].first_ranks, base, args[0],
                 cases[i].other_ranks, base, args[1]);
        expect_launch_failure(launch, cases[i].status, cases[i].expect);
    }
    /* Per-rank settings that do not change the result are not compared. */
    char *output;
    /* (base gives --threads 1; a flag given twice is refused, so the first
     * rank's --threads 2 replaces it by hand.) */
    char base2[2048];
    snprintf(base2, sizeof base2, "%.*s--threads 2", (int)(strlen(base) - strlen("--threads 1")), base);
    snprintf(launch, sizeof launch, "-np 1 %s : -np 1 %s --piece-rows 7", base2, base);
    int rc = run_launch(&output, NULL, launch);
    if (rc) fail_msg("different --threads and --piece-rows per rank: exited %d:\n%s", rc, output);
    free(output);
    remove(test_path("o_fail.npy"));
}

/* Issue 33: ranks launched with different files (MPMD) are refused before
 * any rank reads rows or writes, naming the flag, the ranks and the files:
 * -o a.npy on one rank and -o b.npy on the other exited 0 and never wrote
 * b.npy; different -q files of one shape computed a mixture.  An output
 * that is a device (-o /dev/stdout wrote the .npy header, then failed) is
 * refused with nothing written.  And the "wrote" line, once, unless --quiet. */
static void ranks_must_name_the_same_files(void **state) {
    (void)state;
    test_rng r;
    test_rng_seed(&r, 33);
    const int64_t shape[3] = {12, 2, 4};
    free(random_file(&r, "sq.npy", 3, shape));
    free(random_file(&r, "sq_other.npy", 3, shape)); /* one shape, other values */
    free(random_file(&r, "sk.npy", 3, shape));
    free(random_file(&r, "sv.npy", 3, shape));
    char base[2048], launch[8192], other_out[512];
    snprintf(other_out, sizeof other_out, "%s", test_path("o_other.npy"));
    snprintf(base, sizeof base, "%s ring -k %s -v %s --threads 1", ATTN_CLI_PATH, test_path("sk.npy"),
             test_path("sv.npy"));
    snprintf(launch, sizeof launch, "-np 1 %s -q %s -o %s : -np 1 %s -q %s -o %s", base, test_path("sq.npy"),
             test_path("o_fail.npy"), base, test_path("sq.npy"), other_out);
    expect_launch_failure(launch, 2, "ranks disagree on -o: rank 0 writes");
    assert_false(test_file_exists(other_out));
    snprintf(launch, sizeof launch, "-np 2 %s -q %s -o %s : -np 1 %s -q %s -o %s", base, test_path("sq.npy"),
             test_path("o_fail.npy"), base, test_path("sq_other.npy"), test_path("o_fail.npy"));
    char expect[2048];
    snprintf(expect, sizeof expect, "ranks disagree on -q: rank 0 reads '%s' (float32 [12, 2, 4], 512 bytes), rank 2 "
             "reads '%s' (float32 [12, 2, 4], 512 bytes)", test_path("sq.npy"), test_path("sq_other.npy"));
    expect_launch_failure(launch, 2, expect);
    /* an attention option's file (the options table's): one shape, other
     * values; compared before either is read as a mask */
    const int64_t table[2] = {12, 12};
    free(random_file(&r, "smask.npy", 2, table));
    free(random_file(&r, "smask_other.npy", 2, table));
    snprintf(launch, sizeof launch, "-np 1 %s -q %s -o %s --mask %s : -np 1 %s -q %s -o %s --mask %s", base,
             test_path("sq.npy"), test_path("o_fail.npy"), test_path("smask.npy"), base, test_path("sq.npy"),
             test_path("o_fail.npy"), test_path("smask_other.npy"));
    snprintf(expect, sizeof expect, "ranks disagree on --mask: rank 0 reads '%s'", test_path("smask.npy"));
    expect_launch_failure(launch, 2, expect);

    char *output;
    snprintf(launch, sizeof launch, "-np 2 %s -q %s -o /dev/stdout", base, test_path("sq.npy"));
    expect_launch_failure(launch, 2, "-o '/dev/stdout'");
    assert_int_equal(run_launch(&output, NULL, launch), 2);
    if (strstr(output, "NUMPY")) fail_msg("a .npy header reached stdout:\n%s", output);
    free(output);

    snprintf(launch, sizeof launch, "-np 2 %s -q %s -o %s", base, test_path("sq.npy"), test_path("o_ok.npy"));
    assert_int_equal(run_launch(&output, NULL, launch), 0);
    const char *wrote = strstr(output, "attn ring: wrote ");
    if (!wrote || strstr(wrote + 1, "attn ring: wrote") || !strstr(wrote, "o_ok.npy [12, 2, 4]") ||
        !strstr(wrote, "2 ranks"))
        fail_msg("expected one line 'attn ring: wrote ...o_ok.npy [12, 2, 4] (2 ranks, ...)':\n%s", output);
    free(output);
    strcat(launch, " --quiet");
    assert_int_equal(run_launch(&output, NULL, launch), 0);
    if (strstr(output, "wrote")) fail_msg("--quiet still said what was written:\n%s", output);
    free(output);
    remove(test_path("o_ok.npy"));
}

/* The same through the library: ring_probe passes the last rank options
 * the others do not have; every rank gets the same error. */
static void library_ranks_must_agree(void **state) {
    (void)state;
    static const struct {
        const char *mode, *expect;
    } cases[] = {
        {"same", "rank 2: ok: \n"},
        {"threads", "rank 2: ok: \n"},
        {"key-lengths", "rank 1: invalid argument: ranks disagree on key lengths"},
        {"len", "rank 0: invalid argument: ranks disagree on len_kv (S): rank 0 has 13, rank 2 has 14"},
        {"mask", "rank 2: invalid argument: ranks disagree on the mask (one query row for all: a hash"},
        {"aliased", "rank 2: invalid argument: rank 2 of 3: out overlaps q in memory"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char launch[1024], *output;
        snprintf(launch, sizeof launch, "-np 3 %s %s", ATTN_RING_PROBE_PATH, cases[i].mode);
        int rc = run_launch(&output, NULL, launch);
        int lines = 0;
        for (const char *p = output; (p = strstr(p, cases[i].expect + 8)); p++) lines++;
        if (rc != 0 || !strstr(output, cases[i].expect) || lines != 3) {
            printf("mpirun %s exited %d:\n%s\n", launch, rc, output);
            fail_msg("expected every rank to print '%s'", cases[i].expect + 8);
        }
        free(output);
    }
}

static int report_worst(void **state) {
    (void)state;
    printf("ring vs sdpa, worst differences: out %.3g and lse %.3g (x max|O|), gradients %.3g "
           "(x max|gradient|); limits %.0e, %.0e, %.0e\n",
           worst_out, worst_lse, worst_grad, RING_OUT_FAIL, RING_OUT_FAIL, RING_GRAD_FAIL);
    test_tmpdir_cleanup();
    return 0;
}

int main(void) {
    /* This machine: run as root, 4 ranks on 2 cores, shared memory. */
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
    setenv("OMPI_MCA_rmaps_base_oversubscribe", "1", 0);
    setenv("OMPI_MCA_btl", "self,vader", 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(causal_gqa_every_rank_count),
        cmocka_unit_test(full_mqa_value_width),
        cmocka_unit_test(cross_attention_lower_right),
        cmocka_unit_test(sliding_windows),
        cmocka_unit_test(key_lengths_and_empty_rows),
        cmocka_unit_test(tiny_and_two_d),
        cmocka_unit_test(gradients),
        cmocka_unit_test(masks_and_biases),
        cmocka_unit_test(masks_and_biases_gradients),
        cmocka_unit_test(heads_first_layout),
        cmocka_unit_test(failures_end_every_rank),
        cmocka_unit_test(ranks_must_agree),
        cmocka_unit_test(stopped_rank_times_out),
        cmocka_unit_test(killed_rank_ends_the_job),
        cmocka_unit_test(library_times_out_on_a_stopped_rank),
        cmocka_unit_test(library_ranks_must_agree),
        cmocka_unit_test(ranks_must_name_the_same_files),
    };
    return cmocka_run_group_tests(tests, NULL, report_worst);
}

#endif /* ATTN_MPIEXEC */
