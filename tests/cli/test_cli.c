/*
 * test_cli.c — the attn program as a user meets it: `attn sdpa` and
 * `attn mha` against the independent oracle on random problems with every
 * mask kind, and bad input of every kind the issue lists, each with its
 * documented exit status, a message naming the file or flag, and no output
 * file left behind.
 */
#include "cli_files.h"
#include "tolerances.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Runs `attn sdpa` on a random case written to files and compares O,
 * weights and lse with the oracle. */
static void sdpa_case(test_rng *r, int64_t B, int64_t L, int64_t S, int64_t Hq, int64_t Hkv, int64_t D, int64_t Dv,
                      enum mask_kind kind) {
    random_case rc;
    random_case_make(&rc, r, B, L, S, Hq, Hkv, D, Dv, kind);
    const oracle_case *c = &rc.c;
    test_save_f32(test_path("q.npy"), 4, (int64_t[]){B, L, Hq, D}, rc.q);
    test_save_f32(test_path("k.npy"), 4, (int64_t[]){B, S, Hkv, D}, rc.k);
    test_save_f32(test_path("v.npy"), 4, (int64_t[]){B, S, Hkv, Dv}, rc.v);
    char flags[1024];
    random_case_cli_flags(&rc, flags, sizeof flags);
    char *output;
    int rc_exit = test_run_cli(&output, "sdpa -q %s -k %s -v %s -o %s --weights %s --lse %s%s", test_path("q.npy"),
                               test_path("k.npy"), test_path("v.npy"), test_path("o.npy"), test_path("w.npy"),
                               test_path("lse.npy"), flags);
    if (rc_exit != 0) fail_msg("attn sdpa%s exited %d: %s", flags, rc_exit, output);
    free(output);

    int64_t n_out = B * L * Hq * Dv, n_w = B * Hq * L * S, n_lse = B * Hq * L;
    double *want_out = malloc(sizeof(double) * (size_t)n_out), *want_w = malloc(sizeof(double) * (size_t)n_w),
           *want_lse = malloc(sizeof(double) * (size_t)n_lse);
    oracle_attention(c, rc.q, rc.k, rc.v, want_out, want_w, want_lse);
    float *out = test_load_f32(test_path("o.npy"), 4, (int64_t[]){B, L, Hq, Dv}),
          *w = test_load_f32(test_path("w.npy"), 4, (int64_t[]){B, Hq, L, S}),
          *lse = test_load_f32(test_path("lse.npy"), 3, (int64_t[]){B, Hq, L});
    double scale = fmax(1.0, max_abs(want_out, n_out));
    double d_out = max_abs_diff(want_out, out, n_out), d_w = max_abs_diff(want_w, w, n_w),
           d_lse = max_abs_diff(want_lse, lse, n_lse);
    if (d_out > CLI_OUT_REL_FAIL * scale || d_w > CLI_WEIGHT_ABS_FAIL || d_lse > CLI_LSE_ABS_FAIL)
        fail_msg("sdpa%s: diff out %.3g weights %.3g lse %.3g", flags, d_out, d_w, d_lse);
    free(want_out); free(want_w); free(want_lse); free(out); free(w); free(lse);
    random_case_free(&rc);
}

static void sdpa_matches_oracle(void **state) {
    (void)state;
    test_rng r;
    test_rng_seed(&r, 31);
    for (int kind = 0; kind < MASK_KIND_COUNT; kind++) {
        sdpa_case(&r, 1, 7, 7, 2, 2, 5, 5, (enum mask_kind)kind);     /* self, MHA */
        sdpa_case(&r, 3, 5, 12, 4, 2, 3, 6, (enum mask_kind)kind);    /* cross, GQA 2, Dv != D */
        sdpa_case(&r, 2, 9, 4, 4, 1, 8, 2, (enum mask_kind)kind);     /* L > S, MQA */
    }
}

/* The 2-D shorthand: outputs drop B and H as the inputs do. */
/* --timing: the phase table on stderr (never in the array: -o /dev/stdout
 * stays a clean .npy stream), the output unchanged by it, and every phase
 * of a forward run named.  Properties only: no time is asserted. */
static void sdpa_timing(void **state) {
    (void)state;
    test_rng r;
    test_rng_seed(&r, 5);
    float q[3 * 2 * 4], k[5 * 2 * 4];
    test_fill_normal(&r, q, 24, 1.0);
    test_fill_normal(&r, k, 40, 1.0);
    test_save_f32(test_path("tq.npy"), 3, (int64_t[]){3, 2, 4}, q);
    test_save_f32(test_path("tk.npy"), 3, (int64_t[]){5, 2, 4}, k);
    char *plain, *timed;
    assert_int_equal(test_run_cli(&plain, "sdpa -q %s -k %s -v %s -o %s --quiet", test_path("tq.npy"),
                                  test_path("tk.npy"), test_path("tk.npy"), test_path("to.npy")), 0);
    size_t plain_size, timed_size;
    void *want = test_read_file(test_path("to.npy"), &plain_size);
    assert_int_equal(test_run_cli(&timed, "sdpa -q %s -k %s -v %s -o %s --quiet --timing", test_path("tq.npy"),
                                  test_path("tk.npy"), test_path("tk.npy"), test_path("to.npy")), 0);
    void *got = test_read_file(test_path("to.npy"), &timed_size);
    assert_int_equal(plain_size, timed_size);
    assert_memory_equal(want, got, plain_size);
    static const char *const phases[] = {"timing (phase, wall ms", "read + check inputs", "kernel (forward)",
                                         "write outputs", "fsync + rename outputs", "free buffers",
                                         "total in the command", "GFLOP/s"};
    for (size_t i = 0; i < sizeof phases / sizeof phases[0]; i++)
        if (!strstr(timed, phases[i])) fail_msg("--timing output lacks '%s':\n%s", phases[i], timed);
    assert_null(strstr(plain, "timing"));
    free(plain);
    free(timed);
    free(got);
    /* To stdout: the .npy stream is the whole of stdout (byte for byte the
     * file above), the table goes to stderr (here a file, shown after). */
    char *table;
    assert_int_equal(test_run_cli(&table, "sdpa -q %s -k %s -v %s -o /dev/stdout --quiet --timing > %s 2> %s && cat %s",
                                  test_path("tq.npy"), test_path("tk.npy"), test_path("tk.npy"), test_path("ts.npy"),
                                  test_path("ts.err"), test_path("ts.err")), 0);
    assert_non_null(strstr(table, "kernel (forward)"));
    size_t stream_size;
    void *stream = test_read_file(test_path("ts.npy"), &stream_size);
    assert_int_equal(stream_size, plain_size);
    assert_memory_equal(stream, want, plain_size);
    free(table);
    free(stream);
    free(want);
}

static void sdpa_two_d_shapes(void **state) {
    (void)state;
    float q[6] = {1, 0, 0, 1, 1, 1}, k[6] = {1, 0, 0, 1, 1, 1}, v[6] = {2, 0, 0, 1, 2, 1};
    test_save_f32(test_path("q2.npy"), 2, (int64_t[]){3, 2}, q);
    test_save_f32(test_path("k2.npy"), 2, (int64_t[]){3, 2}, k);
    test_save_f32(test_path("v2.npy"), 2, (int64_t[]){3, 2}, v);
    char *output;
    int st = test_run_cli(&output, "sdpa -q %s -k %s -v %s -o %s --weights %s --lse %s --causal", test_path("q2.npy"),
                          test_path("k2.npy"), test_path("v2.npy"), test_path("o2.npy"), test_path("w2.npy"),
                          test_path("l2.npy"));
    if (st) fail_msg("exit %d: %s", st, output);
    free(output);
    float *o = test_load_f32(test_path("o2.npy"), 2, (int64_t[]){3, 2}), *w = test_load_f32(test_path("w2.npy"), 2, (int64_t[]){3, 3}),
          *l = test_load_f32(test_path("l2.npy"), 1, (int64_t[]){3});
    /* Row 1 sees only key 1 under the causal mask: weight 1, output v1. */
    assert_float_equal(w[0], 1.0, CLI_ONE_KEY_WEIGHT_ABS_FAIL);
    assert_float_equal(o[0], 2.0, CLI_ONE_KEY_ABS_FAIL);
    assert_float_equal(l[0], 1.0 / sqrt(2.0), CLI_ONE_KEY_ABS_FAIL);
    free(o); free(w); free(l);
}

/* attn mha through files equals the library call on the same arrays. */
static void mha_matches_library(void **state) {
    (void)state;
    test_rng r;
    test_rng_seed(&r, 77);
    const int64_t B = 2, L = 5, S = 7, dm = 6, dc = 4, H = 4, G = 2, D = 3, Dv = 2, dout = 5;
    float x[2 * 5 * 6], ctx[2 * 7 * 4], wq[6 * 12], wk[4 * 6], wv[4 * 4], wo[8 * 5], bq[12], bo[5];
    test_fill_normal(&r, x, 60, 1); test_fill_normal(&r, ctx, 56, 1); test_fill_normal(&r, wq, 72, 0.5);
    test_fill_normal(&r, wk, 24, 0.5); test_fill_normal(&r, wv, 16, 0.5); test_fill_normal(&r, wo, 40, 0.5);
    test_fill_normal(&r, bq, 12, 0.3); test_fill_normal(&r, bo, 5, 0.3);
    test_save_f32(test_path("x.npy"), 3, (int64_t[]){B, L, dm}, x);
    test_save_f32(test_path("c.npy"), 3, (int64_t[]){B, S, dc}, ctx);
    test_save_f32(test_path("wq.npy"), 2, (int64_t[]){dm, H * D}, wq);
    test_save_f32(test_path("wk.npy"), 2, (int64_t[]){dc, G * D}, wk);
    test_save_f32(test_path("wv.npy"), 2, (int64_t[]){dc, G * Dv}, wv);
    test_save_f32(test_path("wo.npy"), 2, (int64_t[]){H * Dv, dout}, wo);
    test_save_f32(test_path("bq.npy"), 1, (int64_t[]){H * D}, bq);
    test_save_f32(test_path("bo.npy"), 1, (int64_t[]){dout}, bo);
    char *output;
    int st = test_run_cli(&output, "mha -x %s --context %s --wq %s --wk %s --wv %s --wo %s --bq %s --bo %s --heads 4 "
                          "--kv-heads 2 -o %s --weights %s --causal-lower-right",
                          test_path("x.npy"), test_path("c.npy"), test_path("wq.npy"), test_path("wk.npy"),
                          test_path("wv.npy"), test_path("wo.npy"), test_path("bq.npy"), test_path("bo.npy"),
                          test_path("mo.npy"), test_path("mw.npy"));
    if (st) fail_msg("exit %d: %s", st, output);
    free(output);
    attn_mha m = {.struct_size = sizeof(attn_mha), .d_model = dm, .d_context = dc, .heads = H, .kv_heads = G, .head_dim = D, .value_dim = Dv,
                  .d_out = dout, .wq = wq, .wk = wk, .wv = wv, .wo = wo, .bq = bq, .bo = bo};
    float want[2 * 5 * 5], want_w[2 * 4 * 5 * 7];
    attn_sdpa_options opt = {.struct_size = sizeof(attn_sdpa_options), .causal = 1, .align = ATTN_ALIGN_LOWER_RIGHT};
    assert_int_equal(attn_mha_forward(&m, x, B, L, ctx, S, &opt, want, want_w, NULL), ATTN_OK);
    float *got = test_load_f32(test_path("mo.npy"), 3, (int64_t[]){B, L, dout}),
          *got_w = test_load_f32(test_path("mw.npy"), 4, (int64_t[]){B, H, L, S});
    assert_memory_equal(got, want, sizeof want);
    assert_memory_equal(got_w, want_w, sizeof want_w);
    free(got); free(got_w);
}

/* ------------------------------------------------------------ bad input */

/* Runs the CLI, expects the exit status, a message containing every needle
 * (NULL-terminated), and that the output file does not exist afterwards. */
static void expect_error(int want_status, const char *out_path, const char *args, ...) {
    char *output;
    int st = test_run_cli(&output, "%s", args);
    if (st != want_status) fail_msg("attn %s: exit %d, want %d; output:\n%s", args, st, want_status, output);
    va_list ap;
    va_start(ap, args);
    for (const char *needle; (needle = va_arg(ap, const char *));)
        if (!strstr(output, needle)) fail_msg("attn %s: message lacks '%s':\n%s", args, needle, output);
    va_end(ap);
    if (out_path && test_file_exists(out_path)) fail_msg("attn %s left %s behind", args, out_path);
    free(output);
}

static void good_inputs(void) {
    float q[12] = {0}, k[15] = {0}, v[10] = {0};
    test_save_f32(test_path("gq.npy"), 2, (int64_t[]){4, 3}, q);
    test_save_f32(test_path("gk.npy"), 2, (int64_t[]){5, 3}, k);
    test_save_f32(test_path("gv.npy"), 2, (int64_t[]){5, 2}, v);
}

static void bad_files(void **state) {
    (void)state;
    good_inputs();
    char out[512];
    snprintf(out, sizeof out, "%s", test_path("never.npy"));
    char args[2048];
#define SDPA_WITH_Q(qfile) (snprintf(args, sizeof args, "sdpa -q %s -k %s -v %s -o %s", qfile, test_path("gk.npy"), test_path("gv.npy"), out), args)

    expect_error(1, out, SDPA_WITH_Q(test_path("missing.npy")), "missing.npy", "No such file", NULL);

    /* Truncated: a valid file cut short. */
    size_t size;
    char *img = test_read_file(test_path("gq.npy"), &size);
    test_write_file(test_path("trunc.npy"), img, size - 7);
    expect_error(1, out, SDPA_WITH_Q(test_path("trunc.npy")), "trunc.npy", "truncated", NULL);
    test_write_file(test_path("trunc2.npy"), img, 9); /* inside the header */
    expect_error(1, out, SDPA_WITH_Q(test_path("trunc2.npy")), "trunc2.npy", NULL);
    free(img);

    /* Fortran order. */
    char header[128];
    int hl = snprintf(header, sizeof header, "{'descr': '<f4', 'fortran_order': True, 'shape': (4, 3), }");
    while ((hl + 10 + 1) % 64) header[hl++] = ' ';
    header[hl++] = '\n';
    char fimg[256 + 48] = "\x93NUMPY\x01\x00";
    fimg[8] = (char)hl; fimg[9] = 0;
    memcpy(fimg + 10, header, (size_t)hl);
    memset(fimg + 10 + hl, 0, 48);
    test_write_file(test_path("fortran.npy"), fimg, (size_t)(10 + hl + 48));
    expect_error(1, out, SDPA_WITH_Q(test_path("fortran.npy")), "fortran.npy", "Fortran", NULL);

    /* Wrong dtype: integers where floats are expected. */
    int32_t ints[12] = {0};
    test_save_array(test_path("ints.npy"), ATTN_I32, 2, (int64_t[]){4, 3}, ints);
    expect_error(1, out, SDPA_WITH_Q(test_path("ints.npy")), "ints.npy", "int32", NULL);

    /* Not a .npy file at all. */
    test_write_file(test_path("text.npy"), "hello, world\n", 13);
    expect_error(1, out, SDPA_WITH_Q(test_path("text.npy")), "text.npy", NULL);

    /* Wrong rank. */
    float flat[12] = {0};
    test_save_f32(test_path("flat.npy"), 1, (int64_t[]){12}, flat);
    expect_error(1, out, SDPA_WITH_Q(test_path("flat.npy")), "flat.npy", "[12]", NULL);
    test_save_f32(test_path("five.npy"), 5, (int64_t[]){1, 1, 4, 1, 3}, flat);
    expect_error(1, out, SDPA_WITH_Q(test_path("five.npy")), "five.npy", NULL);

    /* Mismatched shapes: q width 4 against k width 3. */
    float q4[16] = {0};
    test_save_f32(test_path("q4.npy"), 2, (int64_t[]){4, 4}, q4);
    expect_error(1, out, SDPA_WITH_Q(test_path("q4.npy")), "q4.npy", "gk.npy", "width", NULL);

    /* NaN and Inf in inputs are refused by the CLI. */
    float nanq[12] = {0};
    nanq[5] = NAN;
    test_save_f32(test_path("nan.npy"), 2, (int64_t[]){4, 3}, nanq);
    expect_error(1, out, SDPA_WITH_Q(test_path("nan.npy")), "nan.npy", "NaN", "element 5", NULL);
    nanq[5] = INFINITY;
    test_save_f32(test_path("inf.npy"), 2, (int64_t[]){4, 3}, nanq);
    expect_error(1, out, SDPA_WITH_Q(test_path("inf.npy")), "inf.npy", "inf", NULL);

    /* Zero-sized dimension. */
    test_save_f32(test_path("empty.npy"), 2, (int64_t[]){0, 3}, flat);
    expect_error(1, out, SDPA_WITH_Q(test_path("empty.npy")), "empty.npy", NULL);

    /* A mask of the wrong shape, key lengths out of range, float mask. */
    uint8_t mask[6] = {1, 1, 1, 1, 1, 1};
    test_save_array(test_path("mask23.npy"), ATTN_U8, 2, (int64_t[]){2, 3}, mask);
    snprintf(args, sizeof args, "sdpa -q %s -k %s -v %s -o %s --mask %s", test_path("gq.npy"), test_path("gk.npy"),
             test_path("gv.npy"), out, test_path("mask23.npy"));
    expect_error(1, out, args, "mask23.npy", "--mask", NULL);
    int64_t lens[1] = {9};
    test_save_array(test_path("lens9.npy"), ATTN_I64, 1, (int64_t[]){1}, lens);
    snprintf(args, sizeof args, "sdpa -q %s -k %s -v %s -o %s --key-lengths %s", test_path("gq.npy"),
             test_path("gk.npy"), test_path("gv.npy"), out, test_path("lens9.npy"));
    expect_error(1, out, args, "lens9.npy", "outside", NULL);
    snprintf(args, sizeof args, "sdpa -q %s -k %s -v %s -o %s --key-lengths %s", test_path("gq.npy"),
             test_path("gk.npy"), test_path("gv.npy"), out, test_path("gv.npy"));
    expect_error(1, out, args, "gv.npy", "float32", NULL);

    /* An unwritable output: nothing is left, exit 1. */
    snprintf(args, sizeof args, "sdpa -q %s -k %s -v %s -o /nonexistent-dir/o.npy", test_path("gq.npy"),
             test_path("gk.npy"), test_path("gv.npy"));
    expect_error(1, NULL, args, "/nonexistent-dir/o.npy", NULL);
    /* The second output failing removes the first. */
    snprintf(args, sizeof args, "sdpa -q %s -k %s -v %s -o %s --weights /nonexistent-dir/w.npy", test_path("gq.npy"),
             test_path("gk.npy"), test_path("gv.npy"), out);
    expect_error(1, out, args, "/nonexistent-dir/w.npy", NULL);
#undef SDPA_WITH_Q
}

static void bad_usage(void **state) {
    (void)state;
    good_inputs();
    char out[512];
    snprintf(out, sizeof out, "%s", test_path("never.npy"));
    char base[1024], args[1200];
    snprintf(base, sizeof base, "sdpa -q %s -k %s -v %s -o %s", test_path("gq.npy"), test_path("gk.npy"),
             test_path("gv.npy"), out);
    static const struct { const char *flags, *needle; } cases[] = {
        {"--scale abc", "--scale"},      {"--scale -1", "--scale"},      {"--scale nan", "--scale"},
        {"--threads x", "--threads"},    {"--threads 0", "--threads"},   {"--window 3", "--window"},
        {"--window a,b", "--window"},    {"--window -5,0", "--window"},  {"--kernel fast", "--kernel"},
        {"--align middle", "--align"},   {"--bogus", "--bogus"},         {"--causal --causal-lower-right", "only one"},
        {"--mask", "--mask"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(args, sizeof args, "%s %s", base, cases[i].flags);
        expect_error(2, out, args, cases[i].needle, NULL);
    }
    expect_error(2, out, "sdpa -q x.npy", "missing", NULL);
    expect_error(2, NULL, "", "usage", NULL);
    expect_error(2, NULL, "frobnicate", "unknown command", NULL);
    expect_error(2, out, "mha -x x.npy --heads two", "--heads", NULL);
    expect_error(2, out, "mha -x x.npy --wq a --wk b --wv c -o o.npy", "--heads", NULL);
    expect_error(2, out, "mha -x x.npy --wq a --wk b --wv c -o o.npy --heads 3 --kv-heads 2", "multiple", NULL);
    /* --help succeeds and documents the mask convention. */
    char *output;
    assert_int_equal(test_run_cli(&output, "sdpa --help"), 0);
    assert_non_null(strstr(output, "NONZERO = MAY ATTEND"));
    free(output);
    assert_int_equal(test_run_cli(&output, "mha --help"), 0);
    assert_non_null(strstr(output, "--kv-heads"));
    free(output);
    assert_int_equal(test_run_cli(&output, "--help"), 0);
    free(output);
}

static void mha_bad_files(void **state) {
    (void)state;
    char out[512];
    snprintf(out, sizeof out, "%s", test_path("never.npy"));
    float x[6] = {1, 0, 0, 1, 1, 1}, w4[8] = {0}, w6[12] = {0};
    test_save_f32(test_path("mx.npy"), 2, (int64_t[]){3, 2}, x);
    test_save_f32(test_path("w24.npy"), 2, (int64_t[]){2, 4}, w4);
    test_save_f32(test_path("w34.npy"), 2, (int64_t[]){3, 4}, w6);
    test_save_f32(test_path("w26.npy"), 2, (int64_t[]){2, 6}, w6);
    char args[2048];
    /* W_Q's rows must equal X's width. */
    snprintf(args, sizeof args, "mha -x %s --wq %s --wk %s --wv %s --heads 2 -o %s", test_path("mx.npy"),
             test_path("w34.npy"), test_path("w24.npy"), test_path("w24.npy"), out);
    expect_error(1, out, args, "--wq", "w34.npy", NULL);
    /* 6 columns do not split into 4 heads. */
    snprintf(args, sizeof args, "mha -x %s --wq %s --wk %s --wv %s --heads 4 -o %s", test_path("mx.npy"),
             test_path("w26.npy"), test_path("w24.npy"), test_path("w24.npy"), out);
    expect_error(1, out, args, "split evenly", NULL);
    /* W_O with the wrong number of rows. */
    snprintf(args, sizeof args, "mha -x %s --wq %s --wk %s --wv %s --wo %s --heads 2 -o %s", test_path("mx.npy"),
             test_path("w24.npy"), test_path("w24.npy"), test_path("w24.npy"), test_path("w26.npy"), out);
    expect_error(1, out, args, "--wo", "heads * Dv", NULL);
    /* A bias of the wrong length. */
    snprintf(args, sizeof args, "mha -x %s --wq %s --wk %s --wv %s --bq %s --heads 2 -o %s", test_path("mx.npy"),
             test_path("w24.npy"), test_path("w24.npy"), test_path("w24.npy"), test_path("mx.npy"), out);
    expect_error(1, out, args, "--bq", NULL);
    /* The chapter's two heads through the CLI work. */
    snprintf(args, sizeof args, "mha -x %s --wq %s --wk %s --wv %s --heads 2 -o %s", test_path("mx.npy"),
             test_path("w24.npy"), test_path("w24.npy"), test_path("w24.npy"), test_path("ok.npy"));
    char *output;
    int st = test_run_cli(&output, "%s", args);
    if (st) fail_msg("exit %d: %s", st, output);
    free(output);
    float *o = test_load_f32(test_path("ok.npy"), 2, (int64_t[]){3, 4});
    free(o);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(sdpa_matches_oracle),
        cmocka_unit_test(sdpa_two_d_shapes),
        cmocka_unit_test(sdpa_timing),
        cmocka_unit_test(mha_matches_library),
        cmocka_unit_test(bad_files),
        cmocka_unit_test(bad_usage),
        cmocka_unit_test(mha_bad_files),
    };
    return cmocka_run_group_tests(tests, NULL, test_group_teardown);
}
