/*
 * test_grad_cli.c — the gradient flags of `attn sdpa` and `attn mha`: the
 * files they write against the library's reference backward (inputs written
 * with attn_npy_save, the program run as a user runs it), the shapes of the
 * outputs for every input rank, and bad input: the documented exit status, a
 * message naming the file or flag, and no output left behind.
 */
#include "cli_files.h"
#include "tolerances.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ sdpa */

/* Runs `attn sdpa --grad-out` on a random case, in the given input rank, and
 * compares dq, dk, dv with the reference backward. */
static void sdpa_case(test_rng *r, int rank, int64_t B, int64_t L, int64_t S, int64_t Hq, int64_t Hkv, int64_t D,
                      int64_t Dv, enum mask_kind kind) {
    random_case rc;
    random_case_make(&rc, r, B, L, S, Hq, Hkv, D, Dv, kind);
    const int drop = 4 - rank; /* rank 3 drops B, rank 2 drops B and H */
    const int64_t qs[4] = {B, L, Hq, D}, ks[4] = {B, S, Hkv, D}, vs[4] = {B, S, Hkv, Dv}, os[4] = {B, L, Hq, Dv};
    const int64_t *shape_q = qs + drop, *shape_k = ks + drop, *shape_v = vs + drop, *shape_o = os + drop;
    int64_t q2[2] = {L, D}, k2[2] = {S, D}, v2[2] = {S, Dv}, o2[2] = {L, Dv};
    if (rank == 2) { shape_q = q2; shape_k = k2; shape_v = v2; shape_o = o2; }
    const int64_t no = B * L * Hq * Dv;
    float *dout = malloc(sizeof(float) * (size_t)no);
    test_fill_normal(r, dout, no, 1.0);
    test_save_f32(test_path("q.npy"), rank, shape_q, rc.q);
    test_save_f32(test_path("k.npy"), rank, shape_k, rc.k);
    test_save_f32(test_path("v.npy"), rank, shape_v, rc.v);
    test_save_f32(test_path("do.npy"), rank, shape_o, dout);
    char flags[1024], *output;
    random_case_cli_flags(&rc, flags, sizeof flags);
    int st = test_run_cli(&output, "sdpa -q %s -k %s -v %s -o %s --grad-out %s --dq %s --dk %s --dv %s%s",
                          test_path("q.npy"), test_path("k.npy"), test_path("v.npy"), test_path("o.npy"),
                          test_path("do.npy"), test_path("dq.npy"), test_path("dk.npy"), test_path("dv.npy"), flags);
    if (st) fail_msg("attn sdpa --grad-out%s exited %d: %s", flags, st, output);
    free(output);

    const int64_t nq = B * L * Hq * D, nk = B * S * Hkv * D, nv = B * S * Hkv * Dv;
    float *want_dq = malloc(sizeof(float) * (size_t)nq), *want_dk = malloc(sizeof(float) * (size_t)nk),
          *want_dv = malloc(sizeof(float) * (size_t)nv);
    attn_tensor q = attn_tensor_4d(rc.q, B, L, Hq, D), k = attn_tensor_4d(rc.k, B, S, Hkv, D),
                v = attn_tensor_4d(rc.v, B, S, Hkv, Dv), dot = attn_tensor_4d(dout, B, L, Hq, Dv),
                dqt = attn_tensor_4d(want_dq, B, L, Hq, D), dkt = attn_tensor_4d(want_dk, B, S, Hkv, D),
                dvt = attn_tensor_4d(want_dv, B, S, Hkv, Dv);
    attn_sdpa_options opt = random_case_options(&rc);
    opt.kernel = ATTN_KERNEL_REF;
    if (attn_sdpa_backward(&q, &k, &v, &opt, NULL, NULL, &dot, &dqt, &dkt, &dvt))
        fail_msg("reference backward: %s", attn_last_error());
    float *dq = test_load_f32(test_path("dq.npy"), rank, shape_q), *dk = test_load_f32(test_path("dk.npy"), rank, shape_k),
          *dv = test_load_f32(test_path("dv.npy"), rank, shape_v);
    char what[1100];
    snprintf(what, sizeof what, "rank %d dq%s", rank, flags);
    test_expect_close(what, want_dq, dq, nq, CLI_GRAD_REL_FAIL);
    what[8] = 'k';
    test_expect_close(what, want_dk, dk, nk, CLI_GRAD_REL_FAIL);
    what[8] = 'v';
    test_expect_close(what, want_dv, dv, nv, CLI_GRAD_REL_FAIL);
    free(dq); free(dk); free(dv); free(want_dq); free(want_dk); free(want_dv); free(dout);
    random_case_free(&rc);
}

static void sdpa_gradients(void **state) {
    (void)state;
    test_rng r;
    test_rng_seed(&r, 71);
    for (int kind = 0; kind < MASK_KIND_COUNT; kind++) {
        sdpa_case(&r, 4, 2, 6, 9, 4, 2, 5, 3, (enum mask_kind)kind); /* cross, GQA 2, Dv != D */
        sdpa_case(&r, 4, 1, 9, 4, 2, 1, 4, 4, (enum mask_kind)kind); /* L > S, MQA */
    }
    sdpa_case(&r, 3, 1, 7, 7, 4, 1, 6, 6, MASK_CAUSAL);
    sdpa_case(&r, 2, 1, 5, 8, 1, 1, 3, 2, MASK_NONE);
}

/* ------------------------------------------------------------------- mha */

enum { X, CTX, WQ, WK, WV, WO, BQ, BK, BV, BO, N_ARRAYS };
static const char *const names[N_ARRAYS] = {"x", "context", "wq", "wk", "wv", "wo", "bq", "bk", "bv", "bo"};

/* Runs `attn mha --grad-out` with every gradient flag and compares the ten
 * gradients with attn_mha_backward on the reference kernel. */
static void mha_case(test_rng *r, int cross, int with_bias, int64_t Hq, int64_t Hkv, enum mask_kind kind) {
    const int64_t B = 2, L = 5, S = cross ? 7 : L, dm = 6, dc = cross ? 4 : dm, D = 3, Dv = 2, dout_w = 5;
    int64_t shapes[N_ARRAYS][3] = {{B, L, dm}, {B, S, dc}, {dm, Hq * D}, {dc, Hkv * D}, {dc, Hkv * Dv},
                                   {Hq * Dv, dout_w}, {Hq * D}, {Hkv * D}, {Hkv * Dv}, {dout_w}};
    const int ranks[N_ARRAYS] = {3, 3, 2, 2, 2, 2, 1, 1, 1, 1};
    float *arrays[N_ARRAYS] = {0}, *want[N_ARRAYS] = {0};
    int64_t counts[N_ARRAYS];
    char flags[4096];
    size_t n = 0;
    for (int a = 0; a < N_ARRAYS; a++) {
        counts[a] = 1;
        for (int d = 0; d < ranks[a]; d++) counts[a] *= shapes[a][d];
        want[a] = malloc(sizeof(float) * (size_t)counts[a]);
        if ((a == CTX && !cross) || (a >= BQ && !with_bias)) continue;
        arrays[a] = malloc(sizeof(float) * (size_t)counts[a]);
        test_fill_normal(r, arrays[a], counts[a], a <= CTX ? 1.0 : 0.5);
        char file[32];
        snprintf(file, sizeof file, "%s.npy", names[a]);
        test_save_f32(test_path(file), ranks[a], shapes[a], arrays[a]);
        n += (size_t)snprintf(flags + n, sizeof flags - n, " %s%s %s", a == X ? "-" : "--", names[a], test_path(file));
    }
    for (int a = 0; a < N_ARRAYS; a++) {
        if (a == CTX && !cross) continue;
        char file[32];
        snprintf(file, sizeof file, "d%s.npy", names[a]);
        n += (size_t)snprintf(flags + n, sizeof flags - n, " --d%s %s", names[a], test_path(file));
    }
    float *dout = malloc(sizeof(float) * (size_t)(B * L * dout_w));
    test_fill_normal(r, dout, B * L * dout_w, 1.0);
    test_save_f32(test_path("dout.npy"), 3, (int64_t[]){B, L, dout_w}, dout);
    random_case rc; /* only its masks are used */
    random_case_make(&rc, r, B, L, S, Hq, Hkv, D, Dv, kind);
    char masks[1024], *output;
    random_case_cli_flags(&rc, masks, sizeof masks);
    int st = test_run_cli(&output, "mha%s --heads %lld --kv-heads %lld --grad-out %s%s", flags, (long long)Hq,
                          (long long)Hkv, test_path("dout.npy"), masks);
    if (st) fail_msg("attn mha --grad-out exited %d: %s", st, output);
    free(output);

    attn_mha m = {.struct_size = sizeof(attn_mha), .d_model = dm, .d_context = dc, .heads = Hq, .kv_heads = Hkv, .head_dim = D, .value_dim = Dv,
                  .d_out = dout_w, .wq = arrays[WQ], .wk = arrays[WK], .wv = arrays[WV], .wo = arrays[WO],
                  .bq = arrays[BQ], .bk = arrays[BK], .bv = arrays[BV], .bo = arrays[BO]};
    attn_mha_grads g = {sizeof(attn_mha_grads), want[X], cross ? want[CTX] : NULL, want[WQ], want[WK], want[WV], want[WO],
                        want[BQ], want[BK], want[BV], want[BO]};
    attn_sdpa_options opt = random_case_options(&rc);
    opt.kernel = ATTN_KERNEL_REF;
    if (attn_mha_backward(&m, arrays[X], B, L, arrays[CTX], S, &opt, dout, &g))
        fail_msg("reference module backward: %s", attn_last_error());
    for (int a = 0; a < N_ARRAYS; a++) {
        if (a == CTX && !cross) continue;
        char file[32], what[200];
        snprintf(file, sizeof file, "d%s.npy", names[a]);
        float *got = test_load_f32(test_path(file), ranks[a], shapes[a]);
        snprintf(what, sizeof what, "mha cross=%d bias=%d Hq=%lld Hkv=%lld mask=%s: d%s", cross, with_bias,
                 (long long)Hq, (long long)Hkv, mask_kind_names[kind], names[a]);
        test_expect_close(what, want[a], got, counts[a], CLI_GRAD_REL_FAIL);
        free(got);
    }
    for (int a = 0; a < N_ARRAYS; a++) { free(arrays[a]); free(want[a]); }
    free(dout);
    random_case_free(&rc);
}

static void mha_gradients(void **state) {
    (void)state;
    test_rng r;
    test_rng_seed(&r, 72);
    mha_case(&r, 0, 1, 2, 2, MASK_CAUSAL);
    mha_case(&r, 0, 0, 4, 2, MASK_KEY_LENGTHS);
    mha_case(&r, 1, 1, 4, 1, MASK_BIAS);
    mha_case(&r, 1, 0, 2, 1, MASK_ALL);
}

/* ------------------------------------------------------------ bad input */

/* Runs the command, expects exit status want and a message containing
 * needle, and checks that no file named in `absent` was left. */
static void expect_error(int want, const char *needle, const char *absent, const char *args) {
    char *output;
    remove(absent);
    int st = test_run_cli(&output, "%s", args);
    if (st != want) fail_msg("'attn %s' exited %d, want %d: %s", args, st, want, output);
    if (!strstr(output, needle)) fail_msg("'attn %s': message '%s' lacks '%s'", args, output, needle);
    if (test_file_exists(absent)) fail_msg("'attn %s' left %s behind", args, absent);
    free(output);
}

static void bad_input(void **state) {
    (void)state;
    test_rng r;
    test_rng_seed(&r, 73);
    float data[64];
    test_fill_normal(&r, data, 64, 1.0);
    test_save_f32(test_path("q.npy"), 2, (int64_t[]){3, 2}, data);
    test_save_f32(test_path("k.npy"), 2, (int64_t[]){4, 2}, data);
    test_save_f32(test_path("v.npy"), 2, (int64_t[]){4, 3}, data);
    test_save_f32(test_path("do.npy"), 2, (int64_t[]){3, 3}, data);
    test_save_f32(test_path("do_bad.npy"), 2, (int64_t[]){3, 2}, data);
    char args[2048];
    const char *o = test_path("o.npy"), *dq = test_path("dq.npy");

    snprintf(args, sizeof args, "sdpa -q %s -k %s -v %s -o %s --dq %s", test_path("q.npy"), test_path("k.npy"),
             test_path("v.npy"), o, dq);
    expect_error(2, "--grad-out", o, args);
    snprintf(args, sizeof args, "sdpa -q %s -k %s -v %s -o %s --grad-out %s", test_path("q.npy"), test_path("k.npy"),
             test_path("v.npy"), o, test_path("do.npy"));
    expect_error(2, "--dq", o, args);
    snprintf(args, sizeof args, "sdpa -q %s -k %s -v %s -o %s --grad-out %s --dq %s", test_path("q.npy"),
             test_path("k.npy"), test_path("v.npy"), o, test_path("do_bad.npy"), dq);
    expect_error(1, "do_bad.npy", o, args);
    /* An unwritable gradient: nothing of the set is left, not even -o. */
    snprintf(args, sizeof args, "sdpa -q %s -k %s -v %s -o %s --grad-out %s --dq %s/missing/dq.npy", test_path("q.npy"),
             test_path("k.npy"), test_path("v.npy"), o, test_path("do.npy"), test_tmpdir());
    expect_error(1, "dq.npy", o, args);
    /* Gradients alone, without -o, are fine. */
    char *output;
    assert_int_equal(test_run_cli(&output, "sdpa -q %s -k %s -v %s --grad-out %s --dv %s", test_path("q.npy"),
                                  test_path("k.npy"), test_path("v.npy"), test_path("do.npy"), test_path("dv.npy")), 0);
    free(output);
    float *dv = test_load_f32(test_path("dv.npy"), 2, (int64_t[]){4, 3});
    free(dv);

    test_save_f32(test_path("x.npy"), 2, (int64_t[]){3, 4}, data);
    test_save_f32(test_path("w.npy"), 2, (int64_t[]){4, 2}, data);
    test_save_f32(test_path("mdo.npy"), 2, (int64_t[]){3, 2}, data);
    test_save_f32(test_path("mdo_bad.npy"), 3, (int64_t[]){1, 3, 3}, data);
    const char *dx = test_path("dx.npy");
    snprintf(args, sizeof args, "mha -x %s --wq %s --wk %s --wv %s --heads 1 --grad-out %s --dx %s --dcontext %s",
             test_path("x.npy"), test_path("w.npy"), test_path("w.npy"), test_path("w.npy"), test_path("mdo.npy"), dx,
             test_path("dc.npy"));
    expect_error(2, "--context", dx, args);
    snprintf(args, sizeof args, "mha -x %s --wq %s --wk %s --wv %s --heads 1 --grad-out %s --dwo %s",
             test_path("x.npy"), test_path("w.npy"), test_path("w.npy"), test_path("w.npy"), test_path("mdo.npy"),
             test_path("dwo.npy"));
    expect_error(2, "--wo", test_path("dwo.npy"), args);
    snprintf(args, sizeof args, "mha -x %s --wq %s --wk %s --wv %s --heads 1 -o %s --grad-out %s --dx %s",
             test_path("x.npy"), test_path("w.npy"), test_path("w.npy"), test_path("w.npy"), o, test_path("mdo_bad.npy"), dx);
    expect_error(1, "mdo_bad.npy", o, args);
    snprintf(args, sizeof args, "mha -x %s --wq %s --wk %s --wv %s --heads 1 -o %s --dx %s", test_path("x.npy"),
             test_path("w.npy"), test_path("w.npy"), test_path("w.npy"), o, dx);
    expect_error(2, "--grad-out", o, args);
    /* 2-D X: gradients like their inputs, biases [width] without the bias. */
    assert_int_equal(test_run_cli(&output, "mha -x %s --wq %s --wk %s --wv %s --heads 2 --grad-out %s --dx %s --dbv %s",
                                  test_path("x.npy"), test_path("w.npy"), test_path("w.npy"), test_path("w.npy"),
                                  test_path("mdo.npy"), dx, test_path("dbv.npy")), 0);
    free(output);
    float *g = test_load_f32(dx, 2, (int64_t[]){3, 4});
    free(g);
    g = test_load_f32(test_path("dbv.npy"), 1, (int64_t[]){2});
    free(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(sdpa_gradients),
        cmocka_unit_test(mha_gradients),
        cmocka_unit_test(bad_input),
    };
    return cmocka_run_group_tests(tests, NULL, test_group_teardown);
}
