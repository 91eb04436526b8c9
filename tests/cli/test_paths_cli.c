/*
 * test_paths_cli.c — `attn paths`, `attn nullspace` and `attn trace` as a
 * user meets them: the chapter's Figure 2 and exercise 3 on the command
 * line, the same numbers from .npy inputs (bare attention and a module),
 * hook files that match the library, patches given as flags, and bad input
 * with its documented exit status and a message naming the flag or file.
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static float *load_f32(const char *path, int want_ndim, int64_t want_count) {
    attn_array a = {0};
    if (attn_npy_load(path, &a)) fail_msg("loading %s: %s", path, attn_last_error());
    assert_int_equal(a.dtype, ATTN_F32);
    assert_int_equal(a.ndim, want_ndim);
    assert_int_equal(a.count, want_count);
    return a.data; /* the caller frees */
}

/* The first line of text that starts with prefix (a static copy), or fails. */
static const char *line_starting(const char *text, const char *prefix) {
    static char line[1024];
    for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        if (strncmp(p, prefix, strlen(prefix)) == 0) {
            size_t n = strcspn(p, "\n");
            if (n >= sizeof line) n = sizeof line - 1;
            memcpy(line, p, n);
            line[n] = 0;
            return line;
        }
    fail_msg("no line starting with '%s' in:\n%s", prefix, text);
    return NULL;
}

static void expect_contains(const char *text, const char *needle) {
    if (!strstr(text, needle)) fail_msg("'%s' not found in:\n%s", needle, text);
}

/* Runs the CLI, checks its exit status, returns its output (free it). */
static char *run(int want_status, const char *args) {
    char *out;
    int st = test_run_cli(&out, "%s", args);
    if (st != want_status) fail_msg("attn %s: exit %d, want %d; output:\n%s", args, st, want_status, out);
    return out;
}

/* The chapter's Figure 2 for q3, in the table's rows. */
static void expect_figure2_table(const char *out) {
    expect_contains(line_starting(out, "  base "), "[1.5, 0.75]");
    expect_contains(line_starting(out, "  K only "), "[1.2, 0.8]");
    expect_contains(line_starting(out, "  V only "), "[1.5, 1]");
    expect_contains(line_starting(out, "  both "), "[1.2, 1.2]");
    expect_contains(line_starting(out, "  changed "), "[1.2, 1.2]");
    expect_contains(line_starting(out, "  interaction"), "[0, 0.15]");
    /* weights of q3: 1/4, 1/4, 1/2 unless the keys changed, then 1/5, 2/5, 2/5 */
    expect_contains(line_starting(out, "  V only "), "[0.25, 0.25, 0.5]");
    expect_contains(line_starting(out, "  K only "), "[0.2, 0.4, 0.4]");
}

static void paths_chapter(void **state) {
    (void)state;
    char *out = run(0, "paths --chapter");
    expect_contains(out, "query 2, head 0");
    expect_figure2_table(out);
    free(out);
    out = run(0, "paths --chapter --json");
    expect_contains(out, "\"cases\": [\"base\", \"K only\", \"V only\", \"both\", \"changed\"]");
    expect_contains(out, "\"z\": [[1.5, 0.75], [1.20000005, 0.800000012], [1.5, 1], [1.20000005, 1.20000005]");
    expect_contains(out, "\"interaction_z\": [0, 0.15");
    free(out);
    out = run(0, "paths --help");
    expect_contains(out, "interaction = both - K only - V only + base");
    free(out);
}

/* The chapter's Q, K, V and the changed K, V as files (bare attention), and
 * X, X2 and the W as files (the module): the same table. */
static void paths_from_files(void **state) {
    (void)state;
    const float c = (float)(sqrt(2.0) * log(2.0));
    const float q[6] = {1, 0, 0, 1, 1, 1}, k[6] = {c, 0, 0, c, c, c}, v[6] = {2, 0, 0, 1, 2, 1};
    const float k2[6] = {c, 0, 0, 2 * c, c, c}, v2[6] = {2, 0, 0, 2, 2, 1};
    const float x2[6] = {1, 0, 0, 2, 1, 1}, wq[4] = {1, 0, 0, 1}, wk[4] = {c, 0, 0, c}, wv[4] = {2, 0, 0, 1};
    const int64_t s32[2] = {3, 2}, s22[2] = {2, 2};
    test_save_f32(test_path("q.npy"), 2, s32, q);
    test_save_f32(test_path("k.npy"), 2, s32, k);
    test_save_f32(test_path("v.npy"), 2, s32, v);
    test_save_f32(test_path("k2.npy"), 2, s32, k2);
    test_save_f32(test_path("v2.npy"), 2, s32, v2);
    test_save_f32(test_path("x2.npy"), 2, s32, x2);
    test_save_f32(test_path("wq.npy"), 2, s22, wq);
    test_save_f32(test_path("wk.npy"), 2, s22, wk);
    test_save_f32(test_path("wv.npy"), 2, s22, wv);
    char args[2048], *out;
    snprintf(args, sizeof args, "paths --base-q %s --base-k %s --base-v %s --changed-k %s --changed-v %s --query 2",
             test_path("q.npy"), test_path("k.npy"), test_path("v.npy"), test_path("k2.npy"), test_path("v2.npy"));
    out = run(0, args);
    expect_figure2_table(out);
    free(out);
    snprintf(args, sizeof args, "paths --base %s --changed %s --wq %s --wk %s --wv %s --heads 1 --query 2",
             test_path("q.npy"), test_path("x2.npy"), test_path("wq.npy"), test_path("wk.npy"), test_path("wv.npy"));
    out = run(0, args);
    expect_figure2_table(out);
    free(out);

    /* Bad input: exit 2 for usage, 1 for data, messages naming flag or file. */
    out = run(2, "paths");
    expect_contains(out, "no input");
    free(out);
    snprintf(args, sizeof args, "paths --chapter --base-q %s", test_path("q.npy"));
    out = run(2, args);
    expect_contains(out, "one kind of input");
    free(out);
    snprintf(args, sizeof args, "paths --base-q %s --base-k %s --base-v %s", test_path("q.npy"), test_path("k.npy"), test_path("v.npy"));
    out = run(2, args);
    expect_contains(out, "nothing changed");
    free(out);
    snprintf(args, sizeof args, "paths --base-q %s --base-k %s --base-v %s --changed-k %s", test_path("q.npy"),
             test_path("k.npy"), test_path("v.npy"), test_path("wq.npy"));
    out = run(1, args);
    expect_contains(out, "--changed-k");
    expect_contains(out, "wq.npy");
    free(out);
    snprintf(args, sizeof args, "paths --base-q %s --base-k %s --base-v %s --changed-k %s", test_path("q.npy"),
             test_path("missing.npy"), test_path("v.npy"), test_path("k2.npy"));
    out = run(1, args);
    expect_contains(out, "missing.npy");
    free(out);
    out = run(2, "paths --chapter --query 3");
    expect_contains(out, "--query 3");
    free(out);
    out = run(2, "paths --chapter --frobnicate");
    expect_contains(out, "--frobnicate");
    free(out);
}

/* A module with two heads and W_O: the tables name every head and the
 * module's output, and the JSON carries the library's own numbers. */
static void paths_module_json(void **state) {
    (void)state;
    test_rng r;
    test_rng_seed(&r, 61);
    const int64_t L = 4, dm = 3, H = 2, D = 2, d_out = 3;
    float x[L * dm], x2[L * dm], wq[dm * H * D], wk[dm * H * D], wv[dm * H * D], wo[H * D * d_out];
    test_fill_normal(&r, x, L * dm, 1);
    memcpy(x2, x, sizeof x);
    x2[1 * dm + 0] += 1.5f; /* position 1 changes */
    test_fill_normal(&r, wq, dm * H * D, 1);
    test_fill_normal(&r, wk, dm * H * D, 1);
    test_fill_normal(&r, wv, dm * H * D, 1);
    test_fill_normal(&r, wo, H * D * d_out, 1);
    test_save_f32(test_path("mx.npy"), 2, (int64_t[]){L, dm}, x);
    test_save_f32(test_path("mx2.npy"), 2, (int64_t[]){L, dm}, x2);
    test_save_f32(test_path("mwq.npy"), 2, (int64_t[]){dm, H * D}, wq);
    test_save_f32(test_path("mwk.npy"), 2, (int64_t[]){dm, H * D}, wk);
    test_save_f32(test_path("mwv.npy"), 2, (int64_t[]){dm, H * D}, wv);
    test_save_f32(test_path("mwo.npy"), 2, (int64_t[]){H * D, d_out}, wo);
    char args[2048];
    snprintf(args, sizeof args, "paths --base %s --changed %s --wq %s --wk %s --wv %s --wo %s --heads 2 --causal%s",
             test_path("mx.npy"), test_path("mx2.npy"), test_path("mwq.npy"), test_path("mwk.npy"), test_path("mwv.npy"),
             test_path("mwo.npy"), " --query 3");
    char *out = run(0, args);
    expect_contains(out, "query 3, head 0");
    expect_contains(out, "query 3, head 1");
    expect_contains(out, "query 3, the module's output");
    free(out);

    attn_mha m = {.struct_size = sizeof(attn_mha), .d_model = dm, .heads = H, .head_dim = D, .d_out = d_out, .wq = wq, .wk = wk, .wv = wv, .wo = wo};
    attn_sdpa_options opt = ATTN_SDPA_OPTIONS_INIT;
    opt.causal = 1;
    attn_paths p = {0};
    attn_status st = attn_mha_paths(&m, x, x2, 1, L, NULL, NULL, 0, &opt, &p);
    if (st) fail_msg("%s", attn_last_error());
    strncat(args, " --json", sizeof args - strlen(args) - 1);
    out = run(0, args);
    char want[256];
    snprintf(want, sizeof want, "\"interaction_out\": [%.9g, %.9g, %.9g]", (double)p.interaction_out[3 * d_out],
             (double)p.interaction_out[3 * d_out + 1], (double)p.interaction_out[3 * d_out + 2]);
    expect_contains(out, want);
    snprintf(want, sizeof want, "\"interaction_z\": [%.9g, %.9g]", (double)p.interaction_z[(3 * H + 1) * D],
             (double)p.interaction_z[(3 * H + 1) * D + 1]);
    expect_contains(out, want);
    free(out);
    attn_paths_free(&p);
}

/* ------------------------------------------------------------ nullspace */

static void nullspace_cli(void **state) {
    (void)state;
    char *out = run(0, "nullspace --chapter");
    expect_contains(out, "the chapter's row [0.7, 0.3] gives [2, 1]");
    expect_contains(out, "largest L1 move found: 1.6");
    expect_contains(line_starting(out, "  moved to"), "[1, 0]");
    expect_contains(out, "The worked example, query 3");
    free(out);

    /* rows [2, 4] and values [4, 1]: keys 0 and 2 share a value */
    const float w[8] = {0.1f, 0.2f, 0.3f, 0.4f, 0.25f, 0.25f, 0.25f, 0.25f}, v[4] = {1, 5, 1, 3};
    test_save_f32(test_path("w.npy"), 2, (int64_t[]){2, 4}, w);
    test_save_f32(test_path("vals.npy"), 2, (int64_t[]){4, 1}, v);
    char args[2048];
    snprintf(args, sizeof args, "nullspace --weights %s --values %s --query 1 -o %s", test_path("w.npy"),
             test_path("vals.npy"), test_path("moved.npy"));
    out = run(0, args);
    expect_contains(out, "exact");
    free(out);
    float *moved = load_f32(test_path("moved.npy"), 1, 4);
    double sum = 0, change = 0;
    for (int j = 0; j < 4; j++) {
        assert_true(moved[j] >= 0);
        sum += moved[j];
        change += ((double)moved[j] - w[4 + j]) * v[j];
    }
    assert_true(fabs(sum - 1) < CLI_ROW_SUM_ABS_FAIL);
    assert_true(fabs(change) < CLI_NULLSPACE_OUT_ABS_FAIL);
    free(moved);

    /* q/k/v with a causal mask: query 0 sees one key, nothing moves */
    const float q[6] = {1, 0, 0, 1, 1, 1};
    test_save_f32(test_path("nq.npy"), 2, (int64_t[]){3, 2}, q);
    snprintf(args, sizeof args, "nullspace -q %s -k %s -v %s --query 0 --causal", test_path("nq.npy"),
             test_path("nq.npy"), test_path("nq.npy"));
    out = run(0, args);
    expect_contains(out, "largest L1 move found: 0 ");
    expect_contains(out, "1 of 3 keys visible");
    free(out);

    snprintf(args, sizeof args, "nullspace --weights %s", test_path("w.npy"));
    out = run(2, args);
    expect_contains(out, "--values");
    free(out);
    snprintf(args, sizeof args, "nullspace --weights %s --values %s", test_path("w.npy"), test_path("vals.npy"));
    out = run(2, args); /* two rows, no --query */
    expect_contains(out, "--query");
    free(out);
    snprintf(args, sizeof args, "nullspace --weights %s --values %s --query 0", test_path("w.npy"), test_path("nq.npy"));
    out = run(1, args);
    expect_contains(out, "nq.npy");
    free(out);
    out = run(2, "nullspace --chapter --tol abc");
    expect_contains(out, "--tol");
    free(out);
}

/* ---------------------------------------------------------------- trace */

static void trace_cli(void **state) {
    (void)state;
    test_rng r;
    test_rng_seed(&r, 62);
    const int64_t B = 2, L = 3, dm = 4, H = 2, D = 3, d_out = 2;
    float x[B * L * dm], x2[B * L * dm], wq[dm * H * D], wk[dm * H * D], wv[dm * H * D], wo[H * D * d_out], bo[d_out];
    test_fill_normal(&r, x, B * L * dm, 1);
    test_fill_normal(&r, x2, B * L * dm, 1);
    test_fill_normal(&r, wq, dm * H * D, 1);
    test_fill_normal(&r, wk, dm * H * D, 1);
    test_fill_normal(&r, wv, dm * H * D, 1);
    test_fill_normal(&r, wo, H * D * d_out, 1);
    test_fill_normal(&r, bo, d_out, 1);
    test_save_f32(test_path("tx.npy"), 3, (int64_t[]){B, L, dm}, x);
    test_save_f32(test_path("tx2.npy"), 3, (int64_t[]){B, L, dm}, x2);
    test_save_f32(test_path("twq.npy"), 2, (int64_t[]){dm, H * D}, wq);
    test_save_f32(test_path("twk.npy"), 2, (int64_t[]){dm, H * D}, wk);
    test_save_f32(test_path("twv.npy"), 2, (int64_t[]){dm, H * D}, wv);
    test_save_f32(test_path("two.npy"), 2, (int64_t[]){H * D, d_out}, wo);
    test_save_f32(test_path("tbo.npy"), 1, (int64_t[]){d_out}, bo);
    char module[2048], args[4096];
    snprintf(module, sizeof module, "-x %s --wq %s --wk %s --wv %s --wo %s --bo %s --heads 2 --causal", test_path("tx.npy"),
             test_path("twq.npy"), test_path("twk.npy"), test_path("twv.npy"), test_path("two.npy"), test_path("tbo.npy"));

    /* Hook files match the library's trace bit for bit. */
    attn_mha m = {.struct_size = sizeof(attn_mha), .d_model = dm, .heads = H, .head_dim = D, .d_out = d_out, .wq = wq, .wk = wk, .wv = wv, .wo = wo, .bo = bo};
    attn_sdpa_options opt = ATTN_SDPA_OPTIONS_INIT;
    opt.causal = 1;
    attn_trace t = {0};
    if (attn_mha_forward_traced(&m, x, B, L, NULL, 0, &opt, NULL, 0, &t, NULL)) fail_msg("%s", attn_last_error());
    snprintf(args, sizeof args, "trace %s --dir %s -o %s", module, test_path("hooks"), test_path("tout.npy"));
    char *out = run(0, args);
    expect_contains(out, "wrote 8 hooks");
    expect_contains(out, "batch head_index query_pos key_pos");
    free(out);
    for (int h = 0; h < ATTN_HOOK_COUNT; h++) {
        attn_hook_tensor view;
        if (attn_trace_get(&t, (attn_hook)h, &view)) fail_msg("%s", attn_last_error());
        char name[600];
        snprintf(name, sizeof name, "%s/%s.npy", test_path("hooks"), view.name);
        int64_t n = 1;
        for (int d = 0; d < view.ndim; d++) n *= view.shape[d];
        float *got = load_f32(name, view.ndim, n);
        if (memcmp(got, view.data, sizeof(float) * (size_t)n)) fail_msg("%s differs from the library's", name);
        free(got);
    }
    float *o = load_f32(test_path("tout.npy"), 3, B * L * d_out);
    assert_memory_equal(o, t.attn_out, sizeof(float) * (size_t)(B * L * d_out));
    free(o);
    attn_trace_free(&t);

    /* Ablating both heads leaves the bias. */
    snprintf(args, sizeof args, "trace %s --ablate 0 --ablate 1 -o %s", module, test_path("ablated.npy"));
    free(run(0, args));
    o = load_f32(test_path("ablated.npy"), 3, B * L * d_out);
    for (int64_t row = 0; row < B * L; row++) assert_memory_equal(o + row * d_out, bo, sizeof bo);
    free(o);

    /* Activation patching from a source run: hook_k and hook_v of position 1
     * are the source's, the rest the base's. */
    attn_trace src = {0}, base = {0};
    if (attn_mha_forward_traced(&m, x2, B, L, NULL, 0, &opt, NULL, 0, &src, NULL) ||
        attn_mha_forward_traced(&m, x, B, L, NULL, 0, &opt, NULL, 0, &base, NULL))
        fail_msg("%s", attn_last_error());
    snprintf(args, sizeof args, "trace %s --source %s --replace k:1=source --replace 'hook_v:1:*=source' --dir %s", module,
             test_path("tx2.npy"), test_path("patched"));
    free(run(0, args));
    char name[600];
    snprintf(name, sizeof name, "%s/hook_k.npy", test_path("patched"));
    float *k = load_f32(name, 4, B * L * H * D);
    for (int64_t b = 0; b < B; b++)
        for (int64_t pos = 0; pos < L; pos++) {
            const float *want = (pos == 1 ? src.k : base.k) + (b * L + pos) * H * D;
            assert_memory_equal(k + (b * L + pos) * H * D, want, sizeof(float) * (size_t)(H * D));
        }
    free(k);
    attn_trace_free(&src);
    attn_trace_free(&base);

    /* Bare attention writes the six hooks it has; a pattern patch needs an
     * explicit renormalisation choice. */
    const float q[6] = {1, 0, 0, 1, 1, 1};
    test_save_f32(test_path("bq.npy"), 2, (int64_t[]){3, 2}, q);
    snprintf(args, sizeof args, "trace -q %s -k %s -v %s --zero pattern:2::0 --renormalise --dir %s", test_path("bq.npy"),
             test_path("bq.npy"), test_path("bq.npy"), test_path("bare"));
    out = run(0, args);
    expect_contains(out, "wrote 6 hooks");
    free(out);
    snprintf(name, sizeof name, "%s/hook_pattern.npy", test_path("bare"));
    float *pattern = load_f32(name, 4, 9);
    assert_true(pattern[6] == 0.0f);
    assert_true(fabs(pattern[7] + pattern[8] - 1.0) < CLI_ROW_SUM_ABS_FAIL);
    free(pattern);

    /* Bad input */
    snprintf(args, sizeof args, "trace -q %s -k %s -v %s --zero pattern:2::0 --dir %s", test_path("bq.npy"),
             test_path("bq.npy"), test_path("bq.npy"), test_path("bare"));
    out = run(2, args);
    expect_contains(out, "--renormalise");
    free(out);
    snprintf(args, sizeof args, "trace -q %s -k %s -v %s --zero w:1 --dir %s", test_path("bq.npy"), test_path("bq.npy"),
             test_path("bq.npy"), test_path("bare"));
    out = run(2, args);
    expect_contains(out, "unknown hook 'w'");
    free(out);
    snprintf(args, sizeof args, "trace -q %s -k %s -v %s --zero k:9 --dir %s", test_path("bq.npy"), test_path("bq.npy"),
             test_path("bq.npy"), test_path("bare"));
    out = run(1, args);
    expect_contains(out, "position = 9");
    expect_contains(out, "--zero k:9");
    free(out);
    snprintf(args, sizeof args, "trace -q %s -k %s -v %s --replace q:0=%s --dir %s", test_path("bq.npy"), test_path("bq.npy"),
             test_path("bq.npy"), test_path("bq.npy"), test_path("bare"));
    out = run(1, args);
    expect_contains(out, "a row of hook_q has 2 floats");
    free(out);
    snprintf(args, sizeof args, "trace -q %s -k %s -v %s --replace k=source --dir %s", test_path("bq.npy"), test_path("bq.npy"),
             test_path("bq.npy"), test_path("bare"));
    out = run(2, args);
    expect_contains(out, "source run");
    free(out);
    out = run(2, "trace --dir /tmp");
    expect_contains(out, "no input");
    free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(paths_chapter),
        cmocka_unit_test(paths_from_files),
        cmocka_unit_test(paths_module_json),
        cmocka_unit_test(nullspace_cli),
        cmocka_unit_test(trace_cli),
    };
    return cmocka_run_group_tests(tests, NULL, test_group_teardown);
}
