/*
 * test_model_trace_cli.c — `attn model trace` and `attn npz` as a user
 * types them: help, the --patch / --ablate grammar (its parser compiled
 * in), usage errors before any weight is loaded (a pattern that matches no
 * hook, a patch that does not parse, a missing source),
 * and with Gemma 3 270M (skipped with a message when absent) a real run:
 * a cache written and read back with attn npz list / get, an ablation's
 * KL line, a layer sweep's one line per layer, the analyses' tables
 * (--value-norms, --rollout --flow, --logit-lens, --logit-attribution,
 * --attribute; their numbers are test_analysis's, test_model_interp's and
 * test_attribution's).
 */
#include "testutil.h"

#include "attn.h"
#include "attn_io.h"
#include "cli_model_patch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define GEMMA "gemma-3-270m-q4_k_m.gguf"
#define IDS "2,818,5279,529,7001,563"

static char gemma[768];

static int setup(void **state) {
    (void)state;
    const char *dir = getenv("ATTN_MODEL_DIR"), *home = getenv("HOME");
    if (dir && *dir) snprintf(gemma, sizeof gemma, "%s/" GEMMA, dir);
    else snprintf(gemma, sizeof gemma, "%s/.cache/attn/models/" GEMMA, home ? home : "");
    struct stat st;
    if (stat(gemma, &st) != 0) gemma[0] = '\0';
    return 0;
}

static void need_model(void) {
    if (!gemma[0]) {
        print_message("skipped: " GEMMA " is not in the model directory (scripts/fetch-models.sh)\n");
        skip();
    }
}

/* st: test_run_cli's status; *output its output (freed here).  The output
 * is passed by address: it is set by the call in the same argument list. */
static void expect(int st, int want, char **output, const char *says) {
    if (st != want) fail_msg("exit %d (expected %d): %s", st, want, *output);
    if (says && !strstr(*output, says)) fail_msg("output does not say '%s':\n%s", says, *output);
    free(*output);
}

static void test_help_and_usage(void **state) {
    (void)state;
    char *out;
    expect(test_run_cli(&out, "model trace --help"), 0, &out, "blocks.L.attn.hook_pattern");
    expect(test_run_cli(&out, "model --help"), 0, &out, "attn model trace");
    expect(test_run_cli(&out, "model trace --text x"), 2, &out, "--model");
    expect(test_run_cli(&out, "model trace --model m.gguf --text x --ids 1"), 2, &out, "one of them");
    expect(test_run_cli(&out, "model trace --model m.gguf --text x --hooks 'blocks.*'"), 2, &out, "go together");
    expect(test_run_cli(&out, "npz --help"), 0, &out, "attn npz get");
    expect(test_run_cli(&out, "npz get x.npz"), 2, &out, "NAME -o");
    expect(test_run_cli(&out, "npz list %s", test_path("absent.npz")), 1, &out, "absent.npz");
}

/* The grammar of --patch and --ablate (tools/cli/cli_model_patch.c,
 * compiled in) and its refusals, without a model. */
static void test_parse(void **state) {
    (void)state;
    cli_model_patch c;
    const attn_model_patch *p = &c.p;
    char err[512];
    assert_true(cli_model_patch_parse("blocks.3.hook_resid_pre@-1", CLI_PATCH, 18, &c, err, sizeof err));
    assert_int_equal(p->point, ATTN_DECODER_HOOK_RESID_PRE);
    assert_int_equal(p->layer, 3);
    assert_int_equal(p->n_positions, 1);
    assert_int_equal(p->positions[0], -1);
    assert_true(cli_model_patch_parse("blocks.*.attn.hook_z@0,2:1,3", CLI_PATCH, 18, &c, err, sizeof err));
    assert_int_equal(p->point, ATTN_DECODER_HOOK_Z);
    assert_int_equal(p->layer, -1);
    assert_int_equal(p->n_positions, 2);
    assert_int_equal(p->n_heads, 2);
    assert_int_equal(p->heads[1], 3);
    assert_true(cli_model_patch_parse("hook_resid_post", CLI_PATCH, 18, &c, err, sizeof err));
    assert_int_equal(p->layer, -1);
    assert_true(cli_model_patch_parse("blocks.5.attn.hook_z:0=mean", CLI_ABLATE, 18, &c, err, sizeof err));
    assert_int_equal(p->kind, ATTN_MODEL_ABLATE_MEAN);
    assert_true(cli_model_patch_parse("attn.hook_z@-1,-2", CLI_ATTRIBUTE, 18, &c, err, sizeof err));
    assert_int_equal(p->point, ATTN_DECODER_HOOK_Z);
    assert_int_equal(p->n_positions, 2);
    static const struct { const char *text; cli_patch_flag flag; const char *says; } bad[] = {
        {"blocks.18.hook_resid_pre", CLI_PATCH, "layer 18"},
        {"blocks.1.hook_resid", CLI_PATCH, "not a hook point"},
        {"hook_embed", CLI_PATCH, "no layer"},
        {"blocks.1.hook_resid_pre:2", CLI_PATCH, "no heads axis"},
        {"blocks.1.attn.hook_z@x", CLI_PATCH, "positions"},
        {"blocks.1.attn.hook_z:0", CLI_ABLATE, "=zero"},
        {"blocks.1.attn.hook_pattern:0=mean", CLI_ABLATE, "mean ablation"},
        {"blocks.1.attn.hook_z:0=zero", CLI_PATCH, "unexpected"},
        {"attn.hook_z@-1:0", CLI_ATTRIBUTE, "--attribute 'attn.hook_z@-1:0': every head"},
        {"attn.hook_pattern", CLI_ATTRIBUTE, "cannot be estimated"},
        {"hook_q_input", CLI_ATTRIBUTE, "no gradient"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (cli_model_patch_parse(bad[i].text, bad[i].flag, 18, &c, err, sizeof err))
            fail_msg("'%s' was accepted", bad[i].text);
        if (!strstr(err, bad[i].says)) fail_msg("'%s': message '%s' does not say '%s'", bad[i].text, err, bad[i].says);
    }
}

static void test_refused_before_loading(void **state) {
    (void)state;
    need_model();
    char *out;
    expect(test_run_cli(&out, "model trace --model %s --ids " IDS " --hooks 'blocks.*.attn.hook_patern' -o %s", gemma,
                        test_path("c.npz")),
           2, &out, "matches no hook");
    expect(test_run_cli(&out, "model trace --model %s --ids " IDS " --hooks 'blocks.99.*' -o %s", gemma,
                        test_path("c.npz")),
           2, &out, "matches no hook");
    expect(test_run_cli(&out, "model trace --model %s --ids " IDS " --patch blocks.3.hook_resid_pre", gemma), 2, &out,
           "--source-text");
    expect(test_run_cli(&out, "model trace --model %s --ids " IDS " --source-ids " IDS " --patch blocks.30.hook_resid_pre",
                        gemma),
           2, &out, "layer 30");
    expect(test_run_cli(&out, "model trace --model %s --ids " IDS " --source-ids " IDS " --patch hook_resid_pre", gemma),
           2, &out, "--sweep-layers");
    struct stat st;
    assert_int_not_equal(stat(test_path("c.npz"), &st), 0); /* nothing written */
}

static void test_real_run(void **state) {
    (void)state;
    need_model();
    char *out;
    const char *cache = test_path("cache.npz");
    expect(test_run_cli(&out, "model trace --model %s --ids " IDS " --hooks 'blocks.5.attn.hook_*,hook_embed' -o %s "
                              "--ablate blocks.5.attn.hook_z:0=zero --answer ' Paris'",
                        gemma, cache),
           0, &out, "KL(clean || patched)");
    expect(test_run_cli(&out, "npz list %s", cache), 0, &out, "blocks.5.attn.hook_pattern");
    expect(test_run_cli(&out, "npz get %s blocks.5.attn.hook_z -o %s", cache, test_path("z.npy")), 0, &out, NULL);
    attn_array z = {0};
    if (attn_npy_load(test_path("z.npy"), &z)) fail_msg("%s", attn_last_error());
    assert_int_equal(z.ndim, 3);
    assert_int_equal(z.shape[0], 6);
    assert_int_equal(z.shape[1], 4);
    /* The cache holds the run as patched: head 0's z is 0 everywhere. */
    for (int64_t i = 0; i < 6; i++)
        for (int64_t e = 0; e < z.shape[2]; e++) assert_true(((float *)z.data)[(i * 4) * z.shape[2] + e] == 0.0f);
    attn_array_free(&z);
    expect(test_run_cli(&out, "model trace --model %s --ids " IDS " --source-ids 2,818,5279,529,11702,563 "
                              "--patch 'blocks.*.hook_resid_post@-2' --sweep-layers --answer ' Rome'",
                        gemma),
           0, &out, "17     ");
}

/* --nullspace L:all: a line per head, then a histogram that counts every
 * head once; with 6 visible keys (<= 12) every search is the exact LP, and
 * the v rows of width 256 are independent, so only the tolerance's slack
 * can move (each L1 move is small: the first bin). */
static void test_nullspace_sweep(void **state) {
    (void)state;
    need_model();
    char *out;
    const int st = test_run_cli(&out, "model trace --model %s --ids " IDS " --nullspace 5:all", gemma);
    if (st != 0) fail_msg("exit %d: %s", st, out);
    if (!strstr(out, "L1 moves of the 4 heads (4 exact, the rest lower bounds)")) fail_msg("no summary:\n%s", out);
    if (!strstr(out, "[0.0, 0.2)   4  ####\n")) fail_msg("the histogram does not put the 4 heads in the first bin:\n%s", out);
    for (int h = 0; h < 4; h++) {
        char line[16];
        snprintf(line, sizeof line, "\n%-5d %8d", h, 6);
        if (!strstr(out, line)) fail_msg("no line for head %d with 6 visible keys:\n%s", h, out);
    }
    free(out);
    expect(test_run_cli(&out, "model trace --model %s --ids " IDS " --nullspace 99:all", gemma), 2, &out, "layers 0 ..");
}

/* --value-norms and --rollout [--flow]: their flags' rules, then a real
 * run each: a line per head (weights and norms), a row per token (three
 * layers' rollout and the flow). */
static void test_analyses(void **state) {
    (void)state;
    char *out;
    expect(test_run_cli(&out, "model trace --model m.gguf --text x --flow"), 2, &out, "--flow goes with --rollout");
    expect(test_run_cli(&out, "model trace --model m.gguf --text x --no-wo"), 2, &out, "--no-wo applies");
    expect(test_run_cli(&out, "model trace --model m.gguf --text x --rollout --value-norms 1"), 2, &out, "one of them");
    expect(test_run_cli(&out, "model trace --model m.gguf --text x --rollout --residual 2"), 2, &out, "--residual");
    expect(test_run_cli(&out, "model trace --model m.gguf --text x --head 1"), 2, &out, "apply to --rollout");
    expect(test_run_cli(&out, "model trace --model m.gguf --text x --rollout --ablate blocks.1.attn.hook_z:0=zero"), 2,
           &out, "runs of their own");
    need_model();
    int st = test_run_cli(&out, "model trace --model %s --ids " IDS " --value-norms 5 --top 2", gemma);
    if (st != 0) fail_msg("exit %d: %s", st, out);
    for (int h = 0; h < 4; h++) {
        char line[32];
        snprintf(line, sizeof line, "\nhead %-3d by weight:", h);
        if (!strstr(out, line)) fail_msg("no line for head %d:\n%s", h, out);
    }
    if (!strstr(out, "||a_ij v_j W_O^h||")) fail_msg("no heading:\n%s", out);
    free(out);
    st = test_run_cli(&out, "model trace --model %s --ids " IDS " --rollout --flow --position 4", gemma);
    if (st != 0) fail_msg("exit %d: %s", st, out);
    /* Key 0 (<bos>, read by every query of every layer) gets flow 1: the
     * output node's row sums to 1 and each layer's residual keeps a path. */
    if (!strstr(out, "query 4 ( France)") || !strstr(out, "layer 17") || !strstr(out, "1.0000\n"))
        fail_msg("no rollout table:\n%s", out);
    free(out);
    expect(test_run_cli(&out, "model trace --model %s --ids " IDS " --value-norms 99", gemma), 2, &out, "layers 0 ..");
}

/* --logit-lens and --logit-attribution: their flags' rules, then a run
 * each.  The lens's last row is the model's own next token ( the, 0.1913
 * in test_real_run's run); the attribution's parts add up to its total
 * (test_model_interp checks the numbers). */
static void test_logit_lens(void **state) {
    (void)state;
    char *out;
    expect(test_run_cli(&out, "model trace --model m.gguf --text x --logit-attribution"), 2, &out, "needs --answer");
    expect(test_run_cli(&out, "model trace --model m.gguf --text x --logit-lens --rollout"), 2, &out, "one of them");
    need_model();
    int st = test_run_cli(&out, "model trace --model %s --ids " IDS " --logit-lens --answer ' Paris' --wrong ' the'",
                          gemma);
    if (st != 0) fail_msg("exit %d: %s", st, out);
    if (!strstr(out, "\nembed ") || !strstr(out, "\n17   ") || !strstr(out, "  the 0.191"))
        fail_msg("no lens table ending in the model's own top token:\n%s", out);
    free(out);
    st = test_run_cli(&out, "model trace --model %s --ids " IDS " --logit-attribution --answer ' Paris' --top 3",
                      gemma);
    if (st != 0) fail_msg("exit %d: %s", st, out);
    if (!strstr(out, "of logit( Paris) = ") || !strstr(out, "\n17    ") || !strstr(out, "heads by |share|"))
        fail_msg("no attribution table:\n%s", out);
    free(out);
}

/* --attribute: its rules, then the chapter's situation on Gemma: two runs
 * of different lengths ending in the same token, the last position
 * estimated and patched for real at every layer.  Layer 0's stream there
 * is that token's embedding in both runs, so both columns must be 0; the
 * estimates' own numbers are test_attribution's. */
static void test_attribute(void **state) {
    (void)state;
    char *out;
    expect(test_run_cli(&out, "model trace --model m.gguf --text x --attribute hook_resid_pre"), 2, &out,
           "--source-text");
    expect(test_run_cli(&out, "model trace --model m.gguf --text x --check"), 2, &out, "goes with --attribute");
    expect(test_run_cli(&out, "model trace --model m.gguf --text x --source-text y --attribute hook_resid_pre "
                              "--paths"),
           2, &out, "a run of its own");
    need_model();
    expect(test_run_cli(&out, "model trace --model %s --ids " IDS " --source-ids 2,9,563 --attribute hook_resid_pre",
                        gemma),
           2, &out, "@-1 for the last of each");
    expect(test_run_cli(&out, "model trace --model %s --ids " IDS " --source-ids 2,9,563 --attribute attn.hook_pattern",
                        gemma),
           2, &out, "cannot be estimated");
    int st = test_run_cli(&out, "model trace --model %s --ids " IDS " --source-ids 2,9,1018,563 --attribute "
                                "'hook_resid_pre@-1' --check --answer ' Paris'", gemma);
    if (st != 0) fail_msg("exit %d: %s", st, out);
    if (!strstr(out, "\n0           0.0000      0.0000\n") || !strstr(out, "\n17    ") ||
        !strstr(out, "estimates against real patches: Pearson r"))
        fail_msg("no attribution table with layer 0 unmoved:\n%s", out);
    free(out);
    st = test_run_cli(&out, "model trace --model %s --ids " IDS " --source-ids 2,9,1018,563 --attribute "
                            "'blocks.3.attn.hook_z@-1,-2'", gemma);
    if (st != 0) fail_msg("exit %d: %s", st, out);
    if (!strstr(out, "head 3") || !strstr(out, "heads' sum") || !strstr(out, "position -2") || strstr(out, "\n4  "))
        fail_msg("no per-head table of layer 3 alone:\n%s", out);
    free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_help_and_usage),
        cmocka_unit_test(test_parse),
        cmocka_unit_test(test_refused_before_loading),
        cmocka_unit_test(test_real_run),
        cmocka_unit_test(test_nullspace_sweep),
        cmocka_unit_test(test_analyses),
        cmocka_unit_test(test_logit_lens),
        cmocka_unit_test(test_attribute),
    };
    return cmocka_run_group_tests(tests, setup, test_group_teardown);
}
