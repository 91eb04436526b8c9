/*
 * test_logits_cli.c — the score-stage flags of the attn program
 * (--softcap, --sinks, --alibi, --alibi-slopes; --dsinks for sdpa's
 * backward): what `attn sdpa` writes against the library called with the
 * same options, `attn mha` taking them, the help naming them, and bad
 * values refused with the documented exit status and a message that names
 * the flag.  `attn ring` refuses them (when the program has MPI).
 */
#include "cli_files.h"
#include "tolerances.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { B = 1, L = 5, S = 7, HQ = 4, HKV = 2, D = 8, DV = 8 };

/* q, k, v, dout, sinks and slopes in the temporary directory; the arrays
 * stay in `rc` and the two below for the library's side. */
static float sinks[HQ] = {0.5f, -1.0f, -INFINITY, 2.0f}, slopes[HQ] = {0.5f, 0.25f, -0.1f, 0.05f};
static float dout[B * L * HQ * DV];

static void write_inputs(random_case *rc) {
    test_rng r;
    test_rng_seed(&r, 41);
    random_case_make(rc, &r, B, L, S, HQ, HKV, D, DV, MASK_NONE);
    test_fill_normal(&r, dout, B * L * HQ * DV, 1.0);
    const int64_t qs[3] = {L, HQ, D}, ks[3] = {S, HKV, D}, vs[3] = {S, HKV, DV}, os[3] = {L, HQ, DV}, hs[1] = {HQ};
    test_save_f32(test_path("q.npy"), 3, qs, rc->q);
    test_save_f32(test_path("k.npy"), 3, ks, rc->k);
    test_save_f32(test_path("v.npy"), 3, vs, rc->v);
    test_save_f32(test_path("do.npy"), 3, os, dout);
    test_save_f32(test_path("sinks.npy"), 1, hs, sinks);
    test_save_f32(test_path("slopes.npy"), 1, hs, slopes);
}

/* attn sdpa with every flag of the score stage, forward and backward,
 * against the library with the same options. */
static void sdpa_matches_library(void **state) {
    (void)state;
    random_case rc;
    write_inputs(&rc);
    for (int standard = 0; standard < 2; standard++) {
        char *output;
        int st = test_run_cli(&output,
                              "sdpa -q %s -k %s -v %s -o %s --lse %s --causal-lower-right --softcap 1.5 --sinks %s %s%s "
                              "--grad-out %s --dq %s --dk %s --dv %s --dsinks %s --quiet",
                              test_path("q.npy"), test_path("k.npy"), test_path("v.npy"), test_path("o.npy"),
                              test_path("lse.npy"), test_path("sinks.npy"), standard ? "--alibi" : "--alibi-slopes ",
                              standard ? "" : test_path("slopes.npy"), test_path("do.npy"), test_path("dq.npy"),
                              test_path("dk.npy"), test_path("dv.npy"), test_path("ds.npy"));
        if (st) fail_msg("attn sdpa exited %d: %s", st, output);
        free(output);

        float want_o[L * HQ * DV], want_lse[HQ * L], want_dq[L * HQ * D], want_dk[S * HKV * D], want_dv[S * HKV * DV],
            want_ds[HQ];
        attn_tensor q = attn_tensor_3d(rc.q, L, HQ, D), k = attn_tensor_3d(rc.k, S, HKV, D),
                    v = attn_tensor_3d(rc.v, S, HKV, DV), o = attn_tensor_3d(want_o, L, HQ, DV),
                    dot = attn_tensor_3d(dout, L, HQ, DV), dq = attn_tensor_3d(want_dq, L, HQ, D),
                    dk = attn_tensor_3d(want_dk, S, HKV, D), dv = attn_tensor_3d(want_dv, S, HKV, DV);
        attn_sdpa_options opt = ATTN_SDPA_OPTIONS_INIT;
        opt.causal = 1;
        opt.align = ATTN_ALIGN_LOWER_RIGHT;
        opt.softcap = 1.5f;
        opt.sinks = sinks;
        opt.alibi_standard = standard;
        opt.alibi_slopes = standard ? NULL : slopes;
        assert_int_equal(attn_sdpa_forward(&q, &k, &v, &opt, &o, NULL, want_lse), ATTN_OK);
        attn_sdpa_grads g = ATTN_SDPA_GRADS_INIT;
        g.dq = &dq;
        g.dk = &dk;
        g.dv = &dv;
        g.dsinks = want_ds;
        assert_int_equal(attn_sdpa_backward_grads(&q, &k, &v, &opt, &o, want_lse, &dot, &g), ATTN_OK);

        const int64_t os[3] = {L, HQ, DV}, ls[2] = {HQ, L}, qs[3] = {L, HQ, D}, ks[3] = {S, HKV, D},
                      vs[3] = {S, HKV, DV}, hs[1] = {HQ};
        struct { const char *file, *what; int ndim; const int64_t *shape; const float *want; int64_t n; double tol; } files[] = {
            {"o.npy", "o", 3, os, want_o, L * HQ * DV, CLI_OUT_REL_FAIL},
            {"lse.npy", "lse", 2, ls, want_lse, HQ * L, CLI_OUT_REL_FAIL},
            {"dq.npy", "dq", 3, qs, want_dq, L * HQ * D, CLI_GRAD_REL_FAIL},
            {"dk.npy", "dk", 3, ks, want_dk, S * HKV * D, CLI_GRAD_REL_FAIL},
            {"dv.npy", "dv", 3, vs, want_dv, S * HKV * DV, CLI_GRAD_REL_FAIL},
            {"ds.npy", "dsinks", 1, hs, want_ds, HQ, CLI_GRAD_REL_FAIL}};
        for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
            float *got = test_load_f32(test_path(files[f].file), files[f].ndim, files[f].shape);
            test_expect_close(files[f].what, files[f].want, got, files[f].n, files[f].tol);
            free(got);
        }
        /* the sinks changed the answer: without them lse differs */
        st = test_run_cli(&output, "sdpa -q %s -k %s -v %s -o %s --lse %s --causal-lower-right --quiet",
                          test_path("q.npy"), test_path("k.npy"), test_path("v.npy"), test_path("o.npy"),
                          test_path("lse.npy"));
        assert_int_equal(st, 0);
        free(output);
        float *plain = test_load_f32(test_path("lse.npy"), 2, ls);
        assert_true(fabsf(plain[0] - want_lse[0]) > 1e-3f);
        free(plain);
    }
    random_case_free(&rc);
}

/* attn mha takes the flags (per-head arrays of its --heads). */
static void mha_takes_them(void **state) {
    (void)state;
    test_rng r;
    test_rng_seed(&r, 42);
    enum { DM = 6, H = 4, HD = 3 };
    float x[L * DM], w[DM * H * HD];
    test_fill_normal(&r, x, L * DM, 1.0);
    test_fill_normal(&r, w, DM * H * HD, 0.5);
    const int64_t xs[2] = {L, DM}, ws[2] = {DM, H * HD}, hs[1] = {H};
    test_save_f32(test_path("x.npy"), 2, xs, x);
    test_save_f32(test_path("w.npy"), 2, ws, w);
    test_save_f32(test_path("sinks.npy"), 1, hs, sinks);
    char *output;
    const char *plain = "mha -x %s --wq %s --wk %s --wv %s --heads 4 -o %s --causal --quiet";
    int st = test_run_cli(&output, plain, test_path("x.npy"), test_path("w.npy"), test_path("w.npy"),
                          test_path("w.npy"), test_path("a.npy"));
    if (st) fail_msg("attn mha exited %d: %s", st, output);
    free(output);
    st = test_run_cli(&output, "mha -x %s --wq %s --wk %s --wv %s --heads 4 -o %s --causal --quiet --softcap 2 "
                      "--sinks %s --alibi", test_path("x.npy"), test_path("w.npy"), test_path("w.npy"),
                      test_path("w.npy"), test_path("b.npy"), test_path("sinks.npy"));
    if (st) fail_msg("attn mha with the score stage exited %d: %s", st, output);
    free(output);
    const int64_t outs[2] = {L, H * HD};
    float *a = test_load_f32(test_path("a.npy"), 2, outs), *b = test_load_f32(test_path("b.npy"), 2, outs);
    assert_true(memcmp(a, b, sizeof(float) * L * H * HD) != 0);
    free(a);
    free(b);
}

static void help_names_them(void **state) {
    (void)state;
    static const char *const commands[] = {"sdpa", "mha"};
    for (int c = 0; c < 2; c++) {
        char *output;
        assert_int_equal(test_run_cli(&output, "%s --help", commands[c]), 0);
        static const char *const flags[] = {"--softcap CAP", "--sinks F.npy", "--alibi ", "--alibi-slopes F.npy"};
        for (int f = 0; f < 4; f++)
            if (!strstr(output, flags[f])) fail_msg("attn %s --help does not mention %s", commands[c], flags[f]);
        if (c == 0 && !strstr(output, "--dsinks DS.npy")) fail_msg("attn sdpa --help does not mention --dsinks");
        free(output);
    }
}

/* Runs attn with `args` after the inputs; expects exit status `want` and
 * `needle` in the message. */
static void expect_refused(int want, const char *needle, const char *args) {
    char *output;
    int st = test_run_cli(&output, "sdpa -q %s -k %s -v %s -o %s %s", test_path("q.npy"), test_path("k.npy"),
                          test_path("v.npy"), test_path("o.npy"), args);
    if (st != want || !strstr(output, needle))
        fail_msg("attn sdpa ... %s: exit %d (want %d), message without '%s': %s", args, st, want, needle, output);
    free(output);
}

static void bad_values(void **state) {
    (void)state;
    random_case rc;
    write_inputs(&rc);
    const int64_t three[1] = {3}, four[1] = {HQ};
    const float short_sinks[3] = {0, 0, 0}, nan_sinks[HQ] = {0, NAN, 0, 0};
    test_save_f32(test_path("short.npy"), 1, three, short_sinks);
    test_save_f32(test_path("nan.npy"), 1, four, nan_sinks);
    char args[512];
    expect_refused(2, "--softcap", "--softcap -1");
    expect_refused(2, "--softcap", "--softcap 0");
    expect_refused(2, "--softcap", "--softcap abc");
    snprintf(args, sizeof args, "--sinks %s", test_path("short.npy"));
    expect_refused(1, "--sinks", args);
    snprintf(args, sizeof args, "--sinks %s", test_path("nan.npy"));
    expect_refused(1, "--sinks", args);
    snprintf(args, sizeof args, "--alibi-slopes %s", test_path("short.npy"));
    expect_refused(1, "--alibi-slopes", args);
    snprintf(args, sizeof args, "--alibi --alibi-slopes %s", test_path("slopes.npy"));
    expect_refused(2, "--alibi-slopes", args);
    snprintf(args, sizeof args, "--grad-out %s --dsinks %s", test_path("do.npy"), test_path("ds.npy"));
    expect_refused(2, "--sinks", args);

    /* attn ring starts MPI (a singleton), whose own allocations LeakSanitizer
     * reports at exit in a sanitized build: what is checked here is the
     * refusal, so that child runs without leak detection. */
    char *output;
    const char *asan = getenv("ASAN_OPTIONS");
    char *saved = asan ? strdup(asan) : NULL;
    char options[1024];
    snprintf(options, sizeof options, "%s%sdetect_leaks=0", saved ? saved : "", saved ? ":" : "");
    setenv("ASAN_OPTIONS", options, 1);
    int st = test_run_cli(&output, "ring -q %s -k %s -v %s -o %s --softcap 2", test_path("q.npy"), test_path("k.npy"),
                          test_path("v.npy"), test_path("o.npy"));
    if (saved) setenv("ASAN_OPTIONS", saved, 1);
    else unsetenv("ASAN_OPTIONS");
    free(saved);
    if (!strstr(output, "without MPI") && (st != 2 || !strstr(output, "--softcap is not available in ring")))
        fail_msg("attn ring --softcap: exit %d: %s", st, output);
    free(output);
    random_case_free(&rc);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(sdpa_matches_library),
        cmocka_unit_test(mha_takes_them),
        cmocka_unit_test(help_names_them),
        cmocka_unit_test(bad_values),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
