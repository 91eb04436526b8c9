/*
 * test_model_interp.c — the decoder's hook points (attn_decoder.h), the one
 * hook vocabulary (attn_interp.h) and interpretability over a whole model
 * (attn_model_interp.h): recording, patching and ablation, the path
 * decomposition and the null space, the functions `attn model trace` runs.
 * (The --patch / --ablate grammar is the command's: test_model_trace_cli.c.)
 *
 * Without models (always run): KL(P || Q) >= 0 and 0 for identical rows,
 * against a direct sum in double; the hook names round-trip, in every form
 * the vocabulary parses, and a model's names in forward order and under
 * globs; the cosine of two streams against a direct sum; a layer's
 * visibility against the causal and sliding-window rule; patches refused
 * before any forward (a tiny model, support/tiny_model.h); the analyses of
 * attn_analysis.h on tiny models (value-weighted norms against the file's
 * own W_O, rollout and flow against the tensor-level functions; the logit
 * lens against the norm and unembedding summed in double, the logit
 * attribution's parts against the logit difference).
 *
 * With Gemma 3 270M (skipped with a message when ~/.cache/attn/models, or
 * $ATTN_MODEL_DIR, lacks it), each an independent reference:
 *   - read-only hooks at every point change nothing, and record exactly
 *     the decoder's own outputs (hidden = embed and resid_post, attention
 *     = pattern), bit for bit;
 *   - patching every hook of every layer with a run of the same text
 *     changes nothing: bit-identical logits;
 *   - patching blocks.L.hook_resid_pre at every position from a source
 *     text of the same length gives the source run's logits bit for bit
 *     (L = 0 and a middle layer): everything after depends on it alone;
 *   - patching blocks.5.attn.hook_pattern with the source's pattern gives
 *     z = pattern . v with the target's own v, summed here in double;
 *   - zero-ablating every head of a layer makes its hook_attn_out 0 (no
 *     o_proj bias in these models);
 *   - zero-ablating one head (hook_z) matches transformers with that head's
 *     slice of o_proj's input zeroed (tests/fixtures/trace/, made by
 *     scripts/models/make_trace_fixtures.py);
 *   - the path decomposition of every head: its base and changed cases are
 *     the two texts' own z (the decoder's hooks), all zero for one text
 *     against itself;
 *   - the null-space search on a real head returns a distribution with
 *     the row's sum whose output moves within the tolerance.
 */
#include "testutil.h"
#include "tolerances.h"

#include "attn.h"
#include "attn_analysis.h"
#include "attn_decoder.h"
#include "attn_io.h"
#include "attn_gguf.h"
#include "attn_model_interp.h"
#include "attn_npz.h"
#include "tiny_model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define FIXTURES ATTN_SOURCE_DIR "/tests/fixtures/trace"
#define GEMMA "gemma-3-270m-q4_k_m.gguf"

/* A patched pattern's z against the same sum in double, relative to the
 * largest |v|: float32 sums of <= 6 terms. */
#define TRACE_Z_REL_FAIL 1e-6

/* ================================================================ no model */

static void test_kl(void **state) {
    (void)state;
    test_rng rng;
    test_rng_seed(&rng, 12);
    enum { V = 1000 };
    float *p = malloc(V * sizeof *p), *q = malloc(V * sizeof *q);
    for (int trial = 0; trial < 20; trial++) {
        test_fill_normal(&rng, p, V, 1.0 + trial);
        test_fill_normal(&rng, q, V, 1.0 + trial);
        /* Direct: softmaxes in double, then sum p log(p / q). */
        double zp = 0, zq = 0, kl = 0;
        for (int i = 0; i < V; i++) zp += exp(p[i]), zq += exp(q[i]);
        for (int i = 0; i < V; i++) kl += exp(p[i]) / zp * log((exp(p[i]) / zp) / (exp(q[i]) / zq));
        const double got = attn_logits_kl(p, q, V);
        assert_true(got >= 0.0);
        if (fabs(got - kl) > 1e-9 * fmax(1.0, kl)) fail_msg("KL %.17g, direct %.17g", got, kl);
        assert_true(attn_logits_kl(p, p, V) == 0.0);
        /* softmax(p)[i] against the direct sum too. */
        for (int i = 0; i < V; i += 97)
            if (fabs(attn_logits_prob(p, V, i) - exp(p[i]) / zp) > 1e-12) fail_msg("prob of %d", i);
    }
    free(p);
    free(q);
}

static void test_names(void **state) {
    (void)state;
    char buf[96];
    for (int p = 0; p < ATTN_DECODER_HOOK_POINTS; p++) {
        attn_decoder_hook_point back;
        int64_t layer;
        assert_non_null(attn_decoder_hook_name((attn_decoder_hook_point)p, 7, buf, sizeof buf));
        assert_ok(attn_decoder_hook_parse(buf, &back, &layer));
        assert_int_equal(back, p);
        assert_int_equal(layer, p == ATTN_DECODER_HOOK_EMBED || p == ATTN_DECODER_HOOK_LN_FINAL ||
                                        p == ATTN_DECODER_HOOK_LN_FINAL_SCALE
                                    ? -1
                                    : 7);
    }
    assert_string_equal(attn_decoder_hook_name(ATTN_DECODER_HOOK_LN1_SCALE, 2, buf, sizeof buf),
                        "blocks.2.ln1.hook_scale");
    assert_string_equal(attn_decoder_hook_name(ATTN_DECODER_HOOK_Q_INPUT, 2, buf, sizeof buf),
                        "blocks.2.hook_q_input");
    assert_string_equal(attn_decoder_hook_name(ATTN_DECODER_HOOK_MLP_PRE_LINEAR, 0, buf, sizeof buf),
                        "blocks.0.mlp.hook_pre_linear");
    assert_string_equal(attn_decoder_hook_name(ATTN_DECODER_HOOK_PATTERN, 3, buf, sizeof buf),
                        "blocks.3.attn.hook_pattern");
    attn_decoder_hook_point back;
    int64_t layer;
    assert_int_equal(attn_decoder_hook_parse("blocks.3.hook_embed", &back, &layer), ATTN_ERR_INVALID_ARGUMENT);
    assert_int_equal(attn_decoder_hook_parse("attn.hook_q", &back, &layer), ATTN_ERR_INVALID_ARGUMENT);
    assert_null(attn_decoder_hook_name(ATTN_DECODER_HOOK_POINTS, 0, buf, sizeof buf));
}

static void expect_identical(const char *what, const float *want, const float *got, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (memcmp(&want[i], &got[i], sizeof(float)) != 0)
            fail_msg("%s: element %lld is %.9g, expected %.9g (bit for bit)", what, (long long)i, (double)got[i],
                     (double)want[i]);
}

/* Every form of a name the vocabulary parses, and what it refuses. */
static void test_vocabulary(void **state) {
    (void)state;
    static const struct { const char *name; unsigned forms; attn_hook_site site; int64_t layer; } good[] = {
        {"blocks.3.attn.hook_pattern", ATTN_HOOK_NAME_FULL, ATTN_HOOK_SITE_PATTERN, 3},
        {"blocks.12.hook_resid_post", ATTN_HOOK_NAME_FULL, ATTN_HOOK_SITE_RESID_POST, 12},
        {"hook_embed", ATTN_HOOK_NAME_FULL, ATTN_HOOK_SITE_EMBED, -1},
        {"ln_final.hook_normalized", ATTN_HOOK_NAME_FULL, ATTN_HOOK_SITE_LN_FINAL, -1},
        {"blocks.0.attn.hook_result", ATTN_HOOK_NAME_FULL, ATTN_HOOK_SITE_RESULT, 0},
        {"blocks.*.attn.hook_z", ATTN_HOOK_NAME_ANY_LAYER, ATTN_HOOK_SITE_Z, -1},
        {"attn.hook_rot_k", ATTN_HOOK_NAME_SUFFIX, ATTN_HOOK_SITE_ROT_K, -1},
        {"hook_mlp_out", ATTN_HOOK_NAME_SUFFIX, ATTN_HOOK_SITE_MLP_OUT, -1},
        {"pattern", ATTN_HOOK_NAME_SHORT, ATTN_HOOK_SITE_PATTERN, -1},
        {"hook_attn_scores", ATTN_HOOK_NAME_SHORT, ATTN_HOOK_SITE_ATTN_SCORES, -1},
        {"anything.hook_resid_mid", ATTN_HOOK_NAME_SHORT, ATTN_HOOK_SITE_RESID_MID, -1},
        {"blocks.4.ln2.hook_normalized", ATTN_HOOK_NAME_FULL, ATTN_HOOK_SITE_LN2_NORMALIZED, 4},
        {"ln_final.hook_scale", ATTN_HOOK_NAME_FULL, ATTN_HOOK_SITE_LN_FINAL_SCALE, -1},
        {"mlp.hook_post", ATTN_HOOK_NAME_SUFFIX, ATTN_HOOK_SITE_MLP_POST, -1},
        {"v_input", ATTN_HOOK_NAME_SHORT, ATTN_HOOK_SITE_V_INPUT, -1},
        /* ambiguous short names mean ln_final's, as get_act_name's without a layer */
        {"scale", ATTN_HOOK_NAME_SHORT, ATTN_HOOK_SITE_LN_FINAL_SCALE, -1},
        {"normalized", ATTN_HOOK_NAME_SHORT, ATTN_HOOK_SITE_LN_FINAL, -1},
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        attn_hook_site site = ATTN_HOOK_SITES;
        int64_t layer = 99;
        if (attn_hook_parse(good[i].name, good[i].forms, &site, &layer))
            fail_msg("'%s' refused: %s", good[i].name, attn_last_error());
        if (site != good[i].site || layer != good[i].layer)
            fail_msg("'%s': site %d layer %lld", good[i].name, (int)site, (long long)layer);
    }
    /* Each form only when asked for; the messages name the name. */
    static const struct { const char *name; unsigned forms; const char *says; } bad[] = {
        {"blocks.*.attn.hook_z", ATTN_HOOK_NAME_FULL, "expected blocks.LAYER.NAME"},
        {"blocks.-1.attn.hook_z", ATTN_HOOK_NAME_FULL, "expected blocks.LAYER.NAME"},
        {"blocks. 3.attn.hook_z", ATTN_HOOK_NAME_FULL, "expected blocks.LAYER.NAME"},
        {"attn.hook_z", ATTN_HOOK_NAME_FULL, "is not a hook point"},
        {"pattern", ATTN_HOOK_NAME_SUFFIX, "'pattern'"},
        {"blocks.3.hook_embed", ATTN_HOOK_NAME_FULL | ATTN_HOOK_NAME_SUFFIX, "is not a hook point"},
        {"blocks.*.hook_embed", ATTN_HOOK_NAME_ANY_LAYER, "is not a hook point"},
        {"blocks.3.hook_resid", ATTN_HOOK_NAME_FULL, "blocks.3.hook_resid"},
        {"blocks.3.attn.hook_q_input", ATTN_HOOK_NAME_FULL, "is not a hook point"}, /* TransformerLens: blocks.3.hook_q_input */
        {"blocks.3.ln_final.hook_scale", ATTN_HOOK_NAME_FULL, "is not a hook point"},
        {"", ATTN_HOOK_NAME_SHORT, "is not a hook point"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        attn_hook_site site = ATTN_HOOK_SITES;
        int64_t layer = 99;
        if (attn_hook_parse(bad[i].name, bad[i].forms, &site, &layer) != ATTN_ERR_INVALID_ARGUMENT)
            fail_msg("'%s' was accepted", bad[i].name);
        if (!strstr(attn_last_error(), bad[i].says))
            fail_msg("'%s': message '%s' does not say '%s'", bad[i].name, attn_last_error(), bad[i].says);
        assert_int_equal(site, ATTN_HOOK_SITES); /* untouched */
        assert_int_equal(layer, 99);
    }
    /* Every site's full name parses back to it. */
    char buf[96];
    for (int s = 0; s < ATTN_HOOK_SITES; s++) {
        attn_hook_site site;
        int64_t layer;
        assert_non_null(attn_hook_site_name((attn_hook_site)s, 7, buf, sizeof buf));
        assert_ok(attn_hook_parse(buf, ATTN_HOOK_NAME_FULL, &site, &layer));
        assert_int_equal(site, s);
        assert_int_equal(layer, attn_hook_site_per_layer((attn_hook_site)s) ? 7 : -1);
    }
    assert_null(attn_hook_site_name(ATTN_HOOK_SITES, 0, buf, sizeof buf));
    assert_null(attn_hook_site_name(ATTN_HOOK_SITE_Z, 123, buf, 10)); /* too small */
    assert_null(attn_hook_site_suffix(ATTN_HOOK_SITES));
    assert_int_equal(attn_hook_site_layout(ATTN_HOOK_SITE_PATTERN), ATTN_HOOK_HEADS_FIRST);
    assert_int_equal(attn_hook_site_layout(ATTN_HOOK_SITE_ATTN_SCORES), ATTN_HOOK_HEADS_FIRST);
    assert_int_equal(attn_hook_site_layout(ATTN_HOOK_SITE_ROT_Q), ATTN_HOOK_HEADS);
    assert_int_equal(attn_hook_site_layout(ATTN_HOOK_SITE_RESID_MID), ATTN_HOOK_ROWS);
    assert_int_equal(attn_hook_site_layout(ATTN_HOOK_SITES), ATTN_HOOK_LAYOUT_NONE);
    /* The two enums read one table: the decoder's suffixes are the sites',
     * the module's names the last part of them. */
    for (int p = 0; p < ATTN_DECODER_HOOK_POINTS; p++)
        assert_ptr_equal(attn_decoder_hook_suffix((attn_decoder_hook_point)p), attn_hook_site_suffix((attn_hook_site)p));
    static const attn_hook_site module_sites[ATTN_HOOK_COUNT] = {
        ATTN_HOOK_SITE_Q, ATTN_HOOK_SITE_K, ATTN_HOOK_SITE_V, ATTN_HOOK_SITE_ATTN_SCORES, ATTN_HOOK_SITE_PATTERN,
        ATTN_HOOK_SITE_Z, ATTN_HOOK_SITE_RESULT, ATTN_HOOK_SITE_ATTN_OUT};
    for (int h = 0; h < ATTN_HOOK_COUNT; h++) {
        const char *suffix = attn_hook_site_suffix(module_sites[h]), *name = attn_hook_name((attn_hook)h);
        assert_string_equal(suffix + strlen(suffix) - strlen(name), name);
    }
    /* The module's refusal lists its hooks, as it always has. */
    attn_hook h;
    assert_int_equal(attn_hook_from_name("hook_resid_pre", &h), ATTN_ERR_INVALID_ARGUMENT);
    assert_string_equal(attn_last_error(), "unknown hook 'hook_resid_pre' (expected hook_q, hook_k, hook_v, "
                                           "hook_attn_scores, hook_pattern, hook_z, hook_result or hook_attn_out)");
    /* hook_result is a decoder point too. */
    attn_decoder_hook_point point;
    int64_t layer;
    assert_ok(attn_decoder_hook_parse("blocks.0.attn.hook_result", &point, &layer));
    assert_int_equal(point, ATTN_DECODER_HOOK_RESULT);
}

/* The per-layer names of a layer, in the order the forward reaches them:
 * the list attn_decoder.h's table documents, written out again here. */
static const char *const layer_order[] = {
    "hook_resid_pre",      "hook_q_input",     "hook_k_input",        "hook_v_input",
    "ln1.hook_scale",      "ln1.hook_normalized", "attn.hook_q",      "attn.hook_k",
    "attn.hook_v",         "attn.hook_rot_q",  "attn.hook_rot_k",     "attn.hook_attn_scores",
    "attn.hook_pattern",   "attn.hook_z",      "attn.hook_result",    "hook_attn_out",
    "hook_resid_mid",      "ln2.hook_scale",   "ln2.hook_normalized", "mlp.hook_pre",
    "mlp.hook_pre_linear", "mlp.hook_post",    "hook_mlp_out",        "hook_resid_post",
};
enum { PER_LAYER = sizeof layer_order / sizeof layer_order[0] };

/* A model's names: 24 N + 3 of them, in the order a forward reaches them,
 * each once; and globs over them. */
static void test_model_names(void **state) {
    (void)state;
    enum { LAYERS = 18 };
    const int64_t count = attn_model_hook_count(LAYERS);
    assert_int_equal(count, PER_LAYER * LAYERS + 3);
    char name[96], previous[96] = "";
    int64_t last_layer = -1;
    int last_point = -1;
    for (int64_t i = 0; i < count; i++) {
        attn_decoder_hook_point point;
        int64_t layer;
        assert_ok(attn_model_hook_at(LAYERS, i, &point, &layer));
        assert_non_null(attn_decoder_hook_name(point, layer, name, sizeof name));
        if (i == 0) assert_string_equal(name, "hook_embed");
        if (i == count - 2) assert_string_equal(name, "ln_final.hook_scale");
        if (i == count - 1) assert_string_equal(name, "ln_final.hook_normalized");
        /* forward order: by layer, then the layer's points as listed */
        if (i > 0 && i < count - 2) {
            char want[96];
            snprintf(want, sizeof want, "blocks.%lld.%s", (long long)((i - 1) / PER_LAYER),
                     layer_order[(i - 1) % PER_LAYER]);
            assert_string_equal(name, want);
            assert_true(layer > last_layer || (layer == last_layer && (int)point != last_point));
            last_layer = layer;
            last_point = (int)point;
        }
        attn_decoder_hook_point back;
        int64_t back_layer;
        assert_ok(attn_decoder_hook_parse(name, &back, &back_layer));
        assert_int_equal(back, point);
        assert_int_equal(back_layer, layer);
        assert_string_not_equal(name, previous);
        snprintf(previous, sizeof previous, "%s", name);
    }
    attn_decoder_hook_point point;
    int64_t layer;
    assert_int_equal(attn_model_hook_at(LAYERS, count, &point, &layer), ATTN_ERR_INVALID_ARGUMENT);
    static const struct { const char *pattern; int64_t count; uint32_t points; } globs[] = {
        {"blocks.*.attn.hook_pattern", LAYERS, 1u << ATTN_DECODER_HOOK_PATTERN},
        {"blocks.1[0-3].*", 4 * PER_LAYER,
         ATTN_DECODER_HOOK_ALL & ~(1u << ATTN_DECODER_HOOK_EMBED | 1u << ATTN_DECODER_HOOK_LN_FINAL |
                                   1u << ATTN_DECODER_HOOK_LN_FINAL_SCALE)},
        {"hook_embed", 1, 1u << ATTN_DECODER_HOOK_EMBED},
        {"ln_final.*", 2, 1u << ATTN_DECODER_HOOK_LN_FINAL | 1u << ATTN_DECODER_HOOK_LN_FINAL_SCALE},
        {"*", PER_LAYER * LAYERS + 3, ATTN_DECODER_HOOK_ALL},
        {"blocks.99.*", 0, 0},
        {"blocks.*.attn.hook_patern", 0, 0},
        {"blocks.*.attn.hook_result", LAYERS, 1u << ATTN_DECODER_HOOK_RESULT},
        {"blocks.*.ln?.hook_scale", 2 * LAYERS, 1u << ATTN_DECODER_HOOK_LN1_SCALE | 1u << ATTN_DECODER_HOOK_LN2_SCALE},
    };
    for (size_t i = 0; i < sizeof globs / sizeof globs[0]; i++) {
        uint32_t points = 7;
        int64_t n = -1;
        assert_ok(attn_model_hooks_matching(LAYERS, globs[i].pattern, &points, &n));
        if (n != globs[i].count || points != globs[i].points)
            fail_msg("'%s': %lld names, points %#x", globs[i].pattern, (long long)n, points);
    }
}

/* The cosine of two streams' rows against a direct sum, at negative
 * positions too; 0 for a zero row. */
static void test_stream_cosine(void **state) {
    (void)state;
    enum { ROWS = 5, LA = 4, LB = 7, D = 33 };
    test_rng rng;
    test_rng_seed(&rng, 3);
    float a[ROWS * LA * D], b[ROWS * LB * D];
    test_fill_normal(&rng, a, ROWS * LA * D, 1.0);
    test_fill_normal(&rng, b, ROWS * LB * D, 1.0);
    for (int i = 0; i < D; i++) b[(3 * LB + 2) * D + i] = 0.0f; /* row 3 of b at position 2 */
    double got[ROWS];
    assert_ok(attn_model_stream_cosine(a, LA, -1, b, LB, 2, ROWS, D, got));
    for (int r = 0; r < ROWS; r++) {
        const float *x = a + (r * LA + LA - 1) * D, *y = b + (r * LB + 2) * D;
        long double xy = 0, xx = 0, yy = 0;
        for (int i = 0; i < D; i++) xy += (long double)x[i] * y[i], xx += (long double)x[i] * x[i], yy += (long double)y[i] * y[i];
        const double want = r == 3 ? 0.0 : (double)(xy / sqrtl(xx * yy));
        if (fabs(got[r] - want) > 1e-14) fail_msg("row %d: %.17g, direct %.17g", r, got[r], want);
    }
    assert_int_equal(attn_model_stream_cosine(a, LA, LA, b, LB, 0, ROWS, D, got), ATTN_ERR_INVALID_ARGUMENT);
    assert_int_equal(attn_model_stream_cosine(a, LA, 0, b, LB, -LB - 1, ROWS, D, got), ATTN_ERR_INVALID_ARGUMENT);
}

/* A layer's visibility: causal everywhere; a sliding-window layer's query
 * i reads min(i + 1, W) keys, the last ones. */
static void test_layer_visible(void **state) {
    (void)state;
    attn_decoder_config c = {0};
    c.n_layers = 7;
    c.sliding_window = 3;
    c.sliding_pattern = 6; /* layer 5 global, the others local */
    enum { L = 9 };
    uint8_t v[L * L];
    for (int64_t layer = 0; layer < c.n_layers; layer++) {
        assert_ok(attn_model_layer_visible(&c, layer, L, v));
        const int local = layer != 5;
        for (int64_t i = 0; i < L; i++) {
            int64_t count = 0, first = -1;
            for (int64_t j = 0; j < L; j++)
                if (v[i * L + j]) {
                    count++;
                    if (first < 0) first = j;
                }
            const int64_t want = local && i + 1 > 3 ? 3 : i + 1;
            assert_int_equal(count, want);
            assert_int_equal(first, i + 1 - want); /* the last keys, up to the query */
        }
    }
    assert_int_equal(attn_model_layer_visible(&c, 7, L, v), ATTN_ERR_INVALID_ARGUMENT);
}

/* ======================================================== a tiny model */

/* What test_extra_hooks keeps of layer 1 (the tiny Qwen: 5 tokens), and
 * what it writes there. */
enum { EXTRA_L = 5, EXTRA_LAYER = 1 };
typedef struct extra_ctx {
    int64_t d, F, Hq, Dh;
    float resid_pre[EXTRA_L * 16], scale[EXTRA_L], normalized[EXTRA_L * 16], q[EXTRA_L * 4 * 4];
    float z[EXTRA_L * 4 * 4], result[EXTRA_L * 4 * 16], attn_out[EXTRA_L * 16];
    float pre[EXTRA_L * 64], pre_linear[EXTRA_L * 64], post[EXTRA_L * 64], final_scale[EXTRA_L];
    int zero_q_input_head; /* >= 0: that head's hook_q_input rows are written 0 */
    int double_scale;      /* ln1.hook_scale written times 2 */
    int double_result;     /* head 0's hook_result written times 2 */
} extra_ctx;

static int extra_hook(void *user, const attn_decoder_hook_tensor *t) {
    extra_ctx *k = user;
    size_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= (size_t)t->shape[i];
    if (t->point == ATTN_DECODER_HOOK_LN_FINAL_SCALE) memcpy(k->final_scale, t->data, n * 4);
    if (t->layer != EXTRA_LAYER) return 0;
    switch (t->point) {
    case ATTN_DECODER_HOOK_RESID_PRE: memcpy(k->resid_pre, t->data, n * 4); break;
    case ATTN_DECODER_HOOK_Q_INPUT:
        assert_int_equal(t->ndim, 3);
        assert_int_equal(t->shape[1], k->Hq);
        assert_int_equal(t->shape[2], k->d);
        for (int64_t i = 0; i < EXTRA_L; i++)
            for (int64_t h = 0; h < k->Hq; h++)
                if (memcmp(t->data + (i * k->Hq + h) * k->d, k->resid_pre + i * k->d, (size_t)k->d * 4) != 0)
                    fail_msg("hook_q_input row %lld head %lld is not resid_pre's", (long long)i, (long long)h);
        if (k->zero_q_input_head >= 0)
            for (int64_t i = 0; i < EXTRA_L; i++) memset(t->data + (i * k->Hq + k->zero_q_input_head) * k->d, 0, (size_t)k->d * 4);
        break;
    case ATTN_DECODER_HOOK_LN1_SCALE:
        assert_int_equal(t->shape[1], 1);
        if (k->double_scale)
            for (size_t i = 0; i < n; i++) t->data[i] *= 2.0f;
        memcpy(k->scale, t->data, n * 4);
        break;
    case ATTN_DECODER_HOOK_LN1_NORMALIZED: memcpy(k->normalized, t->data, n * 4); break;
    case ATTN_DECODER_HOOK_Q: memcpy(k->q, t->data, n * 4); break;
    case ATTN_DECODER_HOOK_Z: memcpy(k->z, t->data, n * 4); break;
    case ATTN_DECODER_HOOK_RESULT:
        if (k->double_result)
            for (int64_t i = 0; i < EXTRA_L; i++)
                for (int64_t e = 0; e < k->d; e++) t->data[(i * k->Hq + 0) * k->d + e] *= 2.0f;
        memcpy(k->result, t->data, n * 4);
        break;
    case ATTN_DECODER_HOOK_ATTN_OUT: memcpy(k->attn_out, t->data, n * 4); break;
    case ATTN_DECODER_HOOK_MLP_PRE: memcpy(k->pre, t->data, n * 4); break;
    case ATTN_DECODER_HOOK_MLP_PRE_LINEAR: memcpy(k->pre_linear, t->data, n * 4); break;
    case ATTN_DECODER_HOOK_MLP_POST: memcpy(k->post, t->data, n * 4); break;
    default: break;
    }
    return 0;
}

static void extra_run(attn_decoder *m, const int32_t *ids, extra_ctx *k, float *logits) {
    attn_decoder_outputs o = ATTN_DECODER_OUTPUTS_INIT;
    o.logits = logits;
    o.tensor_hook = extra_hook;
    o.tensor_hook_user = k;
    o.tensor_hook_points = ATTN_DECODER_HOOK_ALL;
    assert_ok(attn_decoder_forward(m, ids, EXTRA_L, &o));
}

/* The hook points TransformerLens has beyond the stream's: each against
 * the weights read back from the model's file and sums in double, and what
 * a write to each does. */
static void test_extra_hooks(void **state) {
    (void)state;
    tiny_model tm;
    tiny_build(&tm, &TINY_QWEN, 5);
    attn_decoder *m = tiny_load(&tm);
    const attn_decoder_config *c = attn_decoder_get_config(m);
    const int64_t d = c->d_model, F = c->d_ffn, Hq = c->n_heads, Dh = c->head_dim, V = c->vocab;
    assert_true(d == 16 && Hq == 4 && Dh == 4 && F <= 64);
    const int32_t ids[EXTRA_L] = {1, 7, 3, 9, 4};
    float *clean = malloc((size_t)(EXTRA_L * V) * 4), *got = malloc((size_t)(EXTRA_L * V) * 4);
    extra_ctx k = {.d = d, .F = F, .Hq = Hq, .Dh = Dh, .zero_q_input_head = -1};
    extra_run(m, ids, &k, clean);
    /* ln1: scale = sqrt(mean(x^2) + eps), normalized = x / scale * w. */
    const float *ln1 = tiny_get(&tm, "blk.%lld.attn_norm.weight", EXTRA_LAYER);
    for (int64_t i = 0; i < EXTRA_L; i++) {
        double ss = 0;
        for (int64_t e = 0; e < d; e++) ss += (double)k.resid_pre[i * d + e] * k.resid_pre[i * d + e];
        const double scale = sqrt(ss / (double)d + c->rms_eps);
        assert_float_equal(k.scale[i], scale, 1e-6 * scale);
        for (int64_t e = 0; e < d; e++)
            assert_float_equal(k.normalized[i * d + e], k.resid_pre[i * d + e] / scale * ln1[e], 1e-5);
    }
    /* hook_result: head h's z through its columns of W_O; their sum is
     * hook_attn_out (no post-attention norm in Qwen2). */
    const float *wo = tiny_get(&tm, "blk.%lld.attn_output.weight", EXTRA_LAYER); /* [d, Hq*Dh] */
    for (int64_t i = 0; i < EXTRA_L; i++)
        for (int64_t e = 0; e < d; e++) {
            double total = 0;
            for (int64_t h = 0; h < Hq; h++) {
                double want = 0;
                for (int64_t j = 0; j < Dh; j++) want += (double)k.z[(i * Hq + h) * Dh + j] * wo[e * Hq * Dh + h * Dh + j];
                assert_float_equal(k.result[(i * Hq + h) * d + e], want, 1e-5);
                total += k.result[(i * Hq + h) * d + e];
            }
            assert_float_equal(k.attn_out[i * d + e], total, 1e-5);
        }
    /* mlp: post = silu(pre) * pre_linear. */
    for (int64_t i = 0; i < EXTRA_L * F; i++) {
        const double g = k.pre[i], want = g / (1.0 + exp(-g)) * k.pre_linear[i];
        assert_float_equal(k.post[i], want, 1e-5 * (1.0 + fabs(want)));
    }
    for (int64_t i = 0; i < EXTRA_L; i++) assert_true(k.final_scale[i] > 0.0f);

    /* Writes.  Head 2's q input zeroed: its q is its bias (the norm of a
     * zero row is 0), the other heads' q bit for bit as before. */
    extra_ctx w = k;
    w.zero_q_input_head = 2;
    extra_run(m, ids, &w, got);
    const float *bq = tiny_get(&tm, "blk.%lld.attn_q.bias", EXTRA_LAYER);
    for (int64_t i = 0; i < EXTRA_L; i++)
        for (int64_t h = 0; h < Hq; h++)
            for (int64_t j = 0; j < Dh; j++) {
                const float a = w.q[(i * Hq + h) * Dh + j], b = h == 2 ? bq[h * Dh + j] : k.q[(i * Hq + h) * Dh + j];
                if (memcmp(&a, &b, 4) != 0)
                    fail_msg("q_input of head 2 zeroed: q[%lld, %lld, %lld] = %g, expected %g", (long long)i,
                             (long long)h, (long long)j, (double)a, (double)b);
            }
    assert_true(memcmp(clean, got, (size_t)(EXTRA_L * V) * 4) != 0);
    /* ln1's scale doubled: normalized halves. */
    w = k;
    w.double_scale = 1;
    extra_run(m, ids, &w, got);
    for (int64_t i = 0; i < EXTRA_L * d; i++) assert_float_equal(w.normalized[i], k.normalized[i] / 2, 1e-6);
    /* Head 0's result doubled: attn_out grows by it. */
    w = k;
    w.double_result = 1;
    extra_run(m, ids, &w, got);
    for (int64_t i = 0; i < EXTRA_L; i++)
        for (int64_t e = 0; e < d; e++)
            assert_float_equal(w.attn_out[i * d + e], k.attn_out[i * d + e] + k.result[(i * Hq + 0) * d + e], 1e-5);
    /* Written back unchanged (every hook returns what it was shown): the
     * same bits. */
    w = k;
    extra_run(m, ids, &w, got);
    assert_memory_equal(clean, got, (size_t)(EXTRA_L * V) * 4);
    free(clean);
    free(got);
    attn_decoder_free(m);
    tiny_free(&tm);
}


/* Patches the library refuses before any forward, each message naming the
 * patch; and the properties of the others on a model of random weights:
 * patching a run with itself changes no bit, patching the stream into
 * layer 0 at every position gives the source's own logits bit for bit,
 * zero-ablating every head zeroes what the layer adds. */
static void test_tiny_patches(void **state) {
    (void)state;
    attn_decoder *m = tiny_decoder(&TINY_QWEN, 5);
    const attn_decoder_config *c = attn_decoder_get_config(m);
    const int32_t a[5] = {1, 7, 3, 9, 4}, b[5] = {2, 7, 5, 9, 4};
    float *clean = malloc((size_t)c->vocab * 4), *got = malloc((size_t)c->vocab * 4), *source = malloc((size_t)c->vocab * 4);
    const int64_t head = 1, position = -1;
    struct { attn_model_patch p; const char *says; } bad[] = {
        {{.kind = ATTN_MODEL_ABLATE_ZERO, .point = ATTN_DECODER_HOOK_EMBED, .layer = -1}, "hook_embed has no layer"},
        {{.kind = ATTN_MODEL_ABLATE_ZERO, .point = ATTN_DECODER_HOOK_Z, .layer = 3}, "patch 0: layer 3, the model has 3"},
        {{.kind = ATTN_MODEL_ABLATE_ZERO, .point = ATTN_DECODER_HOOK_RESID_PRE, .layer = 1, .heads = &head, .n_heads = 1},
         "blocks.1.hook_resid_pre has no heads axis"},
        {{.kind = ATTN_MODEL_ABLATE_MEAN, .point = ATTN_DECODER_HOOK_PATTERN, .layer = -1}, "mean ablation"},
        {{.kind = ATTN_MODEL_PATCH_SOURCE, .point = ATTN_DECODER_HOOK_Z, .layer = -1}, "blocks.*.attn.hook_z copies from a source run"},
        {{.kind = 7, .point = ATTN_DECODER_HOOK_Z, .layer = 0}, "kind 7"},
        {{.kind = ATTN_MODEL_ABLATE_ZERO, .point = ATTN_DECODER_HOOK_POINTS, .layer = 0}, "point 27"},
        {{.kind = ATTN_MODEL_ABLATE_ZERO, .point = ATTN_DECODER_HOOK_Z, .layer = 0, .n_positions = 2}, "2 positions"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        attn_model_run_options opt = ATTN_MODEL_RUN_OPTIONS_INIT;
        opt.patches = &bad[i].p;
        opt.n_patches = 1;
        assert_refused(attn_model_run(m, a, 5, &opt, got), ATTN_ERR_INVALID_ARGUMENT, bad[i].says);
    }
    attn_model_run_options sweep = ATTN_MODEL_RUN_OPTIONS_INIT;
    sweep.sweep_layer = 3;
    assert_refused(attn_model_run(m, a, 5, &sweep, got), ATTN_ERR_INVALID_ARGUMENT, "sweep_layer 3");
    /* Positions and heads are checked against the tensor as it comes. */
    const int64_t far = 5, many_heads = 4;
    attn_model_patch at_far = {.kind = ATTN_MODEL_ABLATE_ZERO, .point = ATTN_DECODER_HOOK_Z, .layer = 0,
                               .positions = &far, .n_positions = 1};
    attn_model_run_options opt = ATTN_MODEL_RUN_OPTIONS_INIT;
    opt.patches = &at_far;
    opt.n_patches = 1;
    assert_refused(attn_model_run(m, a, 5, &opt, got), ATTN_ERR_INVALID_ARGUMENT, "position 5 is outside the target (5 tokens)");
    attn_model_patch bad_head = {.kind = ATTN_MODEL_ABLATE_ZERO, .point = ATTN_DECODER_HOOK_K, .layer = 0,
                                 .heads = &many_heads, .n_heads = 1};
    opt.patches = &bad_head;
    assert_refused(attn_model_run(m, a, 5, &opt, got), ATTN_ERR_INVALID_ARGUMENT, "blocks.0.attn.hook_k: head 4, it has 2 (0..1)");

    assert_ok(attn_model_run(m, a, 5, NULL, clean));
    assert_ok(attn_model_run(m, b, 5, NULL, source));
    /* Every patchable point of every layer, from a run of the same text. */
    attn_model_patch every[ATTN_DECODER_HOOK_POINTS];
    int n = 0;
    for (int p = ATTN_DECODER_HOOK_RESID_PRE; p < ATTN_DECODER_HOOK_LN_FINAL; p++)
        every[n++] = (attn_model_patch){.kind = ATTN_MODEL_PATCH_SOURCE, .point = (attn_decoder_hook_point)p, .layer = ATTN_ALL};
    attn_model_record *record;
    assert_ok(attn_model_record_new(m, a, 5, every, n, &record));
    assert_int_equal(attn_model_record_length(record), 5);
    opt.patches = every;
    opt.n_patches = n;
    opt.source = record;
    assert_ok(attn_model_run(m, a, 5, &opt, got));
    expect_identical("logits patched with their own run", clean, got, c->vocab);
    attn_model_record_free(record);
    /* The stream into layer 0 at every position carries everything. */
    const attn_model_patch stream = {.kind = ATTN_MODEL_PATCH_SOURCE, .point = ATTN_DECODER_HOOK_RESID_PRE, .layer = 0};
    assert_ok(attn_model_record_new(m, b, 5, &stream, 1, &record));
    opt.patches = &stream;
    opt.n_patches = 1;
    opt.source = record;
    assert_ok(attn_model_run(m, a, 5, &opt, got));
    expect_identical("logits with the source's stream into layer 0", source, got, c->vocab);
    assert_true(attn_logits_kl(clean, got, c->vocab) > 0.0);
    attn_model_record_free(record);
    /* A source of another length: positions from the end of each. */
    const int32_t longer[7] = {3, 3, 2, 7, 5, 9, 4};
    const attn_model_patch last = {.kind = ATTN_MODEL_PATCH_SOURCE, .point = ATTN_DECODER_HOOK_RESID_POST, .layer = 2,
                                   .positions = &position, .n_positions = 1};
    assert_ok(attn_model_record_new(m, longer, 7, &last, 1, &record));
    assert_ok(attn_model_run(m, longer, 7, NULL, source));
    opt.patches = &last;
    opt.source = record;
    assert_ok(attn_model_run(m, a, 5, &opt, got));
    /* The last layer's last row is all the logits read. */
    expect_identical("logits with the source's last row after the last layer", source, got, c->vocab);
    const attn_model_patch everywhere = {.kind = ATTN_MODEL_PATCH_SOURCE, .point = ATTN_DECODER_HOOK_RESID_POST, .layer = 2};
    opt.patches = &everywhere;
    assert_refused(attn_model_run(m, a, 5, &opt, got), ATTN_ERR_INVALID_ARGUMENT, "needs texts of the same length");
    attn_model_record_free(record);
    free(clean), free(got), free(source);
    attn_decoder_free(m);
}

/* ============================================================= with Gemma */

static attn_decoder *gemma;
static int64_t N, V, Hq, d;
/* "The capital of France is" and "The capital of Italy is", with BOS:
 * the same length, as the fixture's ids. */
static const int32_t ids_a[] = {2, 818, 5279, 529, 7001, 563};
static const int32_t ids_b[] = {2, 818, 5279, 529, 11702, 563};
enum { LEN = 6 };

static int setup(void **state) {
    (void)state;
    const char *dir = getenv("ATTN_MODEL_DIR"), *home = getenv("HOME");
    char path[768];
    if (dir && *dir) snprintf(path, sizeof path, "%s/" GEMMA, dir);
    else snprintf(path, sizeof path, "%s/.cache/attn/models/" GEMMA, home ? home : "");
    struct stat st;
    if (stat(path, &st) != 0) {
        print_message("the real-model tests will skip: %s is not there (scripts/fetch-models.sh fetches it)\n", path);
        return 0;
    }
    attn_gguf *g;
    assert_ok(attn_gguf_open(path, &g));
    assert_ok(attn_decoder_load(g, &gemma));
    attn_gguf_free(g);
    const attn_decoder_config *c = attn_decoder_get_config(gemma);
    N = c->n_layers, V = c->vocab, Hq = c->n_heads, d = c->d_model;
    return 0;
}

static int teardown(void **state) {
    attn_decoder_free(gemma);
    return test_group_teardown(state);
}

/* Keeps every layer's pattern [N, Hq, L, L] and v [N, L, Hkv, Dh]. */
typedef struct analysis_ctx {
    float *pattern, *v;
} analysis_ctx;

static int keep_pattern_v(void *user, const attn_decoder_hook_tensor *t) {
    analysis_ctx *k = user;
    size_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= (size_t)t->shape[i];
    float *to = t->point == ATTN_DECODER_HOOK_PATTERN ? k->pattern : k->v;
    memcpy(to + t->layer * (int64_t)n, t->data, n * sizeof(float));
    return 0;
}

/* attn_model_value_norms, _rollout and _flow on the tiny models (GQA 4 / 2
 * with biases; Gemma's sliding windows, Hq Dh != d): the norms against
 * alpha ||v_j W_O^h|| summed here from the file's own attn_output.weight
 * ([d, Hq Dh] as stored: the test's reading of the layout, not the
 * library's), the rollout and flow against attn_analysis.h's functions on
 * the patterns a plain forward's hooks show. */
static void test_tiny_analyses(void **state) {
    (void)state;
    const tiny_spec *specs[2] = {&TINY_QWEN, &TINY_GEMMA};
    const int32_t ids[5] = {1, 7, 3, 9, 4};
    enum { L = 5 };
    for (int s = 0; s < 2; s++) {
        tiny_model tm;
        tiny_build(&tm, specs[s], 11);
        attn_decoder *m = tiny_load(&tm);
        const attn_decoder_config *c = attn_decoder_get_config(m);
        const int64_t layers = c->n_layers, heads = c->n_heads, Hkv = c->n_kv_heads, Dh = c->head_dim, width = c->d_model;
        analysis_ctx k = {malloc((size_t)(layers * heads * L * L) * sizeof(float)), malloc((size_t)(layers * L * Hkv * Dh) * sizeof(float))};
        float *pattern = malloc((size_t)(heads * L * L) * sizeof *pattern), *norms = malloc((size_t)(heads * L * L) * sizeof *norms);
        double *rollout = malloc((size_t)(layers * L * L) * sizeof *rollout), *want = malloc((size_t)(layers * L * L) * sizeof *want);
        attn_decoder_outputs o = ATTN_DECODER_OUTPUTS_INIT;
        o.tensor_hook = keep_pattern_v;
        o.tensor_hook_user = &k;
        o.tensor_hook_points = 1u << ATTN_DECODER_HOOK_PATTERN | 1u << ATTN_DECODER_HOOK_V;
        assert_ok(attn_decoder_forward(m, ids, L, &o));
        for (int64_t l = 0; l < layers; l++) {
            const float *wo = tiny_get(&tm, "blk.%lld.attn_output.weight", l), *pl = k.pattern + l * heads * L * L,
                        *vl = k.v + l * L * Hkv * Dh;
            assert_non_null(wo);
            assert_ok(attn_model_value_norms(m, ids, L, l, 1, pattern, norms));
            expect_identical("the pattern beside the norms", pl, pattern, heads * L * L);
            for (int64_t h = 0; h < heads; h++)
                for (int64_t j = 0; j < L; j++) {
                    const float *v_j = vl + (j * Hkv + h / (heads / Hkv)) * Dh;
                    double ss = 0;
                    for (int64_t r = 0; r < width; r++) {
                        double f = 0;
                        for (int64_t e = 0; e < Dh; e++) f += (double)v_j[e] * wo[r * heads * Dh + h * Dh + e];
                        ss += f * f;
                    }
                    for (int64_t i = 0; i < L; i++) {
                        const double w = pl[(h * L + i) * L + j] * sqrt(ss);
                        if (fabs(norms[(h * L + i) * L + j] - w) > ANALYSIS_NORM_REL_FAIL * fmax(1.0, w))
                            fail_msg("%s layer %lld head %lld cell (%lld, %lld): norm %.9g, want %.9g", c->architecture,
                                     (long long)l, (long long)h, (long long)i, (long long)j,
                                     (double)norms[(h * L + i) * L + j], w);
                    }
                }
        }
        /* Every layer from one forward: the per-layer calls' numbers. */
        float *all = malloc((size_t)(layers * heads * L * L) * sizeof *all);
        assert_ok(attn_model_value_norms(m, ids, L, ATTN_ALL, 1, NULL, all));
        for (int64_t l = 0; l < layers; l++) {
            assert_ok(attn_model_value_norms(m, ids, L, l, 1, NULL, norms));
            assert_memory_equal(all + l * heads * L * L, norms, (size_t)(heads * L * L) * sizeof *norms);
        }
        free(all);
        for (int64_t head = ATTN_ALL; head < heads; head++) {
            assert_ok(attn_model_rollout(m, ids, L, head, 0.5, rollout));
            assert_ok(attn_attention_rollout(k.pattern, layers, heads, L, head, 0.5, want));
            assert_memory_equal(rollout, want, (size_t)(layers * L * L) * sizeof *want);
            assert_ok(attn_model_flow(m, ids, L, head, 0.5, -2, rollout));
            assert_ok(attn_attention_flow(k.pattern, layers, heads, L, head, 0.5, L - 2, want));
            assert_memory_equal(rollout, want, L * sizeof *want);
        }
        assert_refused(attn_model_value_norms(m, ids, L, layers, 1, NULL, norms), ATTN_ERR_INVALID_ARGUMENT, "layer");
        assert_refused(attn_model_rollout(m, ids, L, heads, 0.5, rollout), ATTN_ERR_INVALID_ARGUMENT, "head");
        free(k.pattern), free(k.v), free(pattern), free(norms), free(rollout), free(want);
        attn_decoder_free(m);
        tiny_free(&tm);
    }
}

/* attn_model_logit_lens and attn_model_logit_attribution on the tiny
 * models.  The lens: its last row is the forward's own logits there, and
 * (qwen2: its norm weight and W_U as the file stores them) every row is
 * rmsnorm(hidden[r]) * output_norm . W_U summed here in double from the
 * decoder's hidden states.  The attribution: its parts add up to the
 * forward's logit difference, and a layer's heads add up to its attn_out
 * (on gemma3 through the post-attention norm's frozen scale). */
static void test_tiny_logit_lens(void **state) {
    (void)state;
    const tiny_spec *specs[2] = {&TINY_QWEN, &TINY_GEMMA};
    const int32_t ids[5] = {1, 7, 3, 9, 4};
    enum { L = 5 };
    for (int s = 0; s < 2; s++) {
        tiny_model tm;
        tiny_build(&tm, specs[s], 13);
        attn_decoder *m = tiny_load(&tm);
        const attn_decoder_config *c = attn_decoder_get_config(m);
        const int64_t layers = c->n_layers, heads = c->n_heads, width = c->d_model, vocab = c->vocab;
        float *hidden = malloc((size_t)((layers + 1) * L * width) * sizeof *hidden),
              *logits = malloc((size_t)(L * vocab) * sizeof *logits),
              *lens = malloc((size_t)((layers + 1) * vocab) * sizeof *lens);
        double *attn = malloc((size_t)layers * sizeof *attn), *mlp = malloc((size_t)layers * sizeof *mlp),
               *head_parts = malloc((size_t)(layers * heads) * sizeof *head_parts), embed;
        attn_decoder_outputs o = ATTN_DECODER_OUTPUTS_INIT;
        o.hidden = hidden;
        o.logits = logits;
        assert_ok(attn_decoder_forward(m, ids, L, &o));
        for (int64_t pos = 0; pos < L; pos += 2) {
            assert_ok(attn_model_logit_lens(m, ids, L, pos, lens));
            double top = 0;
            for (int64_t v = 0; v < vocab; v++) top = fmax(top, fabs(logits[pos * vocab + v]));
            for (int64_t v = 0; v < vocab; v++)
                if (fabs(lens[layers * vocab + v] - logits[pos * vocab + v]) > LENS_LOGIT_REL_FAIL * fmax(1, top))
                    fail_msg("%s: the lens's last row at %lld, token %lld: %.9g, the forward's %.9g",
                             c->architecture, (long long)pos, (long long)v, (double)lens[layers * vocab + v],
                             (double)logits[pos * vocab + v]);
            if (s == 0) {
                const float *norm = tiny_get(&tm, "output_norm.weight", 0), *w_u = tiny_get(&tm, "output.weight", 0);
                for (int64_t r = 0; r <= layers; r++) {
                    const float *x = hidden + (r * L + pos) * width;
                    double ss = 0;
                    for (int64_t e = 0; e < width; e++) ss += (double)x[e] * x[e];
                    const double inv = 1 / sqrt(ss / (double)width + c->rms_eps);
                    for (int64_t v = 0; v < vocab; v++) {
                        double want = 0;
                        for (int64_t e = 0; e < width; e++) want += x[e] * inv * norm[e] * w_u[v * width + e];
                        if (fabs(lens[r * vocab + v] - want) > LENS_LOGIT_REL_FAIL * fmax(1, fabs(want)))
                            fail_msg("lens row %lld token %lld: %.9g, want %.9g", (long long)r, (long long)v,
                                     (double)lens[r * vocab + v], want);
                    }
                }
            }
            const int64_t token = 3, other = 11;
            assert_ok(attn_model_logit_attribution(m, ids, L, pos, token, other, &embed, attn, mlp, head_parts));
            double total = embed;
            for (int64_t l = 0; l < layers; l++) total += attn[l] + mlp[l];
            const double diff = (double)logits[pos * vocab + token] - logits[pos * vocab + other];
            if (fabs(total - diff) > LENS_LOGIT_REL_FAIL * fmax(1, top))
                fail_msg("%s position %lld: the parts sum to %.9g, the logit difference is %.9g", c->architecture,
                         (long long)pos, total, diff);
            for (int64_t l = 0; l < layers; l++) {
                double sum = 0;
                for (int64_t h = 0; h < heads; h++) sum += head_parts[l * heads + h];
                if (fabs(sum - attn[l]) > LENS_LOGIT_REL_FAIL * fmax(1, fabs(attn[l])))
                    fail_msg("layer %lld: the heads sum to %.9g, attn_out gives %.9g", (long long)l, sum, attn[l]);
            }
        }
        assert_refused(attn_model_logit_lens(m, ids, L, L, lens), ATTN_ERR_INVALID_ARGUMENT, "position 5");
        assert_refused(attn_model_logit_attribution(m, ids, L, 0, vocab, -1, &embed, attn, mlp, NULL),
                       ATTN_ERR_INVALID_ARGUMENT, "token");
        free(hidden), free(logits), free(lens), free(attn), free(mlp), free(head_parts);
        attn_decoder_free(m);
        tiny_free(&tm);
    }
}

static void need_model(void) {
    if (!gemma) {
        print_message("skipped: " GEMMA " is not in the model directory\n");
        skip();
    }
}

static void forward_logits(const int32_t *ids, float *logits) {
    attn_decoder_outputs o = ATTN_DECODER_OUTPUTS_INIT;
    o.logits = logits;
    o.last_only = 1;
    assert_ok(attn_decoder_forward(gemma, ids, LEN, &o));
}


/* Keeps copies of every embed, resid_post and pattern it is shown. */
typedef struct keep_ctx {
    float *embed, *resid_post, *pattern; /* [L, d], [N, L, d], [N, Hq, L, L] */
    int64_t calls[ATTN_DECODER_HOOK_POINTS];
} keep_ctx;

static int keep_hook(void *user, const attn_decoder_hook_tensor *t) {
    keep_ctx *k = user;
    k->calls[t->point]++;
    size_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= (size_t)t->shape[i];
    if (t->point == ATTN_DECODER_HOOK_EMBED) memcpy(k->embed, t->data, n * 4);
    if (t->point == ATTN_DECODER_HOOK_RESID_POST) memcpy(k->resid_post + t->layer * (int64_t)n, t->data, n * 4);
    if (t->point == ATTN_DECODER_HOOK_PATTERN) memcpy(k->pattern + t->layer * (int64_t)n, t->data, n * 4);
    return 0;
}

static void test_hooks_match_outputs(void **state) {
    (void)state;
    need_model();
    float *clean = malloc((size_t)V * 4), *hooked = malloc((size_t)V * 4);
    float *hidden = malloc((size_t)((N + 1) * LEN * d) * 4), *att = malloc((size_t)(N * Hq * LEN * LEN) * 4);
    float **att_ptr = malloc((size_t)N * sizeof *att_ptr);
    keep_ctx k = {malloc((size_t)(LEN * d) * 4), malloc((size_t)(N * LEN * d) * 4),
                  malloc((size_t)(N * Hq * LEN * LEN) * 4), {0}};
    for (int64_t l = 0; l < N; l++) att_ptr[l] = att + l * Hq * LEN * LEN;
    forward_logits(ids_a, clean);
    attn_decoder_outputs o = ATTN_DECODER_OUTPUTS_INIT;
    o.logits = hooked;
    o.last_only = 1;
    o.hidden = hidden;
    o.attention = att_ptr;
    o.tensor_hook = keep_hook;
    o.tensor_hook_user = &k;
    o.tensor_hook_points = ATTN_DECODER_HOOK_ALL;
    assert_ok(attn_decoder_forward(gemma, ids_a, LEN, &o));
    expect_identical("logits with read-only hooks everywhere", clean, hooked, V);
    expect_identical("hook_embed = hidden[0]", hidden, k.embed, LEN * d);
    expect_identical("hook_resid_post = hidden[1..]", hidden + LEN * d, k.resid_post, N * LEN * d);
    expect_identical("hook_pattern = attention", att, k.pattern, N * Hq * LEN * LEN);
    for (int p = 0; p < ATTN_DECODER_HOOK_POINTS; p++)
        assert_int_equal(k.calls[p], p == ATTN_DECODER_HOOK_EMBED || p == ATTN_DECODER_HOOK_LN_FINAL ||
                                             p == ATTN_DECODER_HOOK_LN_FINAL_SCALE
                                         ? 1
                                         : N);
    free(clean), free(hooked), free(hidden), free(att), free(att_ptr), free(k.embed), free(k.resid_post),
        free(k.pattern);
}

/* A patch of the hook `name` (a full name, or blocks.*.NAME for every
 * layer) at every position and head. */
static attn_model_patch patch_of(const char *name, attn_model_patch_kind kind) {
    attn_hook_site site;
    int64_t layer;
    assert_ok(attn_hook_parse(name, ATTN_HOOK_NAME_ANY_LAYER, &site, &layer));
    return (attn_model_patch){.kind = kind, .point = (attn_decoder_hook_point)site, .layer = layer};
}

/* Patches from `source` (its run recorded first) into ids_a; logits out. */
static void patched_logits(const int32_t *source, const char *const *names, int n, float *logits) {
    attn_model_patch patches[32];
    for (int i = 0; i < n; i++) patches[i] = patch_of(names[i], ATTN_MODEL_PATCH_SOURCE);
    attn_model_record *record;
    assert_ok(attn_model_record_new(gemma, source, LEN, patches, n, &record));
    attn_model_run_options opt = ATTN_MODEL_RUN_OPTIONS_INIT;
    opt.patches = patches;
    opt.n_patches = n;
    opt.source = record;
    assert_ok(attn_model_run(gemma, ids_a, LEN, &opt, logits));
    attn_model_record_free(record);
}

static void test_patch_with_itself(void **state) {
    (void)state;
    need_model();
    float *clean = malloc((size_t)V * 4), *patched = malloc((size_t)V * 4);
    forward_logits(ids_a, clean);
    /* Every patchable hook of every layer at once (layer -1 with no sweep). */
    static const char *const every[] = {
        "blocks.*.hook_resid_pre", "blocks.*.attn.hook_q", "blocks.*.attn.hook_k", "blocks.*.attn.hook_v",
        "blocks.*.attn.hook_rot_q", "blocks.*.attn.hook_rot_k", "blocks.*.attn.hook_attn_scores",
        "blocks.*.attn.hook_pattern", "blocks.*.attn.hook_z", "blocks.*.hook_attn_out", "blocks.*.hook_resid_mid",
        "blocks.*.hook_mlp_out", "blocks.*.hook_resid_post"};
    patched_logits(ids_a, every, (int)(sizeof every / sizeof every[0]), patched);
    expect_identical("logits patched with their own run", clean, patched, V);
    assert_true(attn_logits_kl(clean, patched, V) == 0.0);
    free(clean), free(patched);
}

static void test_patch_resid_pre_gives_source(void **state) {
    (void)state;
    need_model();
    float *source = malloc((size_t)V * 4), *patched = malloc((size_t)V * 4), *clean = malloc((size_t)V * 4);
    forward_logits(ids_b, source);
    forward_logits(ids_a, clean);
    static const char *const layers[] = {"blocks.0.hook_resid_pre", "blocks.9.hook_resid_pre"};
    for (int i = 0; i < 2; i++) {
        patched_logits(ids_b, &layers[i], 1, patched);
        expect_identical(layers[i], source, patched, V);
    }
    assert_true(attn_logits_kl(clean, source, V) > 0.0); /* the two texts do differ */
    free(source), free(patched), free(clean);
}

/* Hooks of layer 5: the source's pattern is written over the target's, and
 * the target's v and the resulting z are kept. */
typedef struct pattern_ctx {
    const float *source_pattern;
    float *v, *z, *pattern; /* copies: [L, Hkv, Dh], [L, Hq, Dh], [Hq, L, L] */
    int64_t Hkv, Dh;
} pattern_ctx;

static int pattern_hook(void *user, const attn_decoder_hook_tensor *t) {
    pattern_ctx *c = user;
    if (t->layer != 5) return 0;
    size_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= (size_t)t->shape[i];
    if (t->point == ATTN_DECODER_HOOK_V) memcpy(c->v, t->data, n * 4), c->Hkv = t->shape[1], c->Dh = t->shape[2];
    if (t->point == ATTN_DECODER_HOOK_PATTERN) {
        if (c->source_pattern) memcpy(t->data, c->source_pattern, n * 4);
        memcpy(c->pattern, t->data, n * 4);
    }
    if (t->point == ATTN_DECODER_HOOK_Z) memcpy(c->z, t->data, n * 4);
    return 0;
}

static void run_layer5(const int32_t *ids, pattern_ctx *c) {
    attn_decoder_outputs o = ATTN_DECODER_OUTPUTS_INIT;
    o.tensor_hook = pattern_hook;
    o.tensor_hook_user = c;
    o.tensor_hook_points = 1u << ATTN_DECODER_HOOK_V | 1u << ATTN_DECODER_HOOK_PATTERN | 1u << ATTN_DECODER_HOOK_Z;
    assert_ok(attn_decoder_forward(gemma, ids, LEN, &o));
}

static void test_patch_pattern_keeps_values(void **state) {
    (void)state;
    need_model();
    const attn_decoder_config *cfg = attn_decoder_get_config(gemma);
    const int64_t Dh = cfg->head_dim, Hkv = cfg->n_kv_heads;
    pattern_ctx src = {NULL, malloc((size_t)(LEN * Hkv * Dh) * 4), malloc((size_t)(LEN * Hq * Dh) * 4),
                       malloc((size_t)(Hq * LEN * LEN) * 4), 0, 0};
    run_layer5(ids_b, &src);
    pattern_ctx tgt = {src.pattern, malloc((size_t)(LEN * Hkv * Dh) * 4), malloc((size_t)(LEN * Hq * Dh) * 4),
                       malloc((size_t)(Hq * LEN * LEN) * 4), 0, 0};
    run_layer5(ids_a, &tgt);
    /* z[i, h] = sum_j P_source[h, i, j] v_target[j, h / group], in double. */
    double worst = 0, vmax = 0;
    for (int64_t i = 0; i < LEN * Hkv * Dh; i++) vmax = fmax(vmax, fabs(tgt.v[i]));
    for (int64_t i = 0; i < LEN; i++)
        for (int64_t h = 0; h < Hq; h++)
            for (int64_t e = 0; e < Dh; e++) {
                double z = 0;
                for (int64_t j = 0; j < LEN; j++)
                    z += (double)src.pattern[(h * LEN + i) * LEN + j] * tgt.v[(j * Hkv + h / (Hq / Hkv)) * Dh + e];
                worst = fmax(worst, fabs(z - tgt.z[(i * Hq + h) * Dh + e]));
            }
    print_message("patched pattern: z against pattern . v by hand: worst %.2e (|v| up to %.3g)\n", worst, vmax);
    if (worst > TRACE_Z_REL_FAIL * fmax(1.0, vmax)) fail_msg("z differs by %.3g", worst);
    /* And the pattern did change z: the source's weights are not the target's. */
    pattern_ctx clean = {NULL, malloc((size_t)(LEN * Hkv * Dh) * 4), malloc((size_t)(LEN * Hq * Dh) * 4),
                         malloc((size_t)(Hq * LEN * LEN) * 4), 0, 0};
    run_layer5(ids_a, &clean);
    assert_true(memcmp(clean.z, tgt.z, (size_t)(LEN * Hq * Dh) * 4) != 0);
    pattern_ctx *all[] = {&src, &tgt, &clean};
    for (int i = 0; i < 3; i++) free(all[i]->v), free(all[i]->z), free(all[i]->pattern);
}

static void test_ablate_every_head(void **state) {
    (void)state;
    need_model();
    /* Every head of layer 5 zeroed by attn_model_run, its hook_attn_out
     * recorded into an .npz cache (after the patch: what the pass used). */
    const attn_model_patch p = patch_of("blocks.5.attn.hook_z", ATTN_MODEL_ABLATE_ZERO);
    char path[600];
    float *logits = malloc((size_t)V * 4);
    snprintf(path, sizeof path, "%s/ablated.npz", test_tmpdir());
    static const char *const patterns[] = {"blocks.[45].hook_attn_out"};
    attn_npz_writer *w;
    assert_ok(attn_npz_create(path, 0, &w));
    int64_t recorded = 0;
    attn_model_run_options opt = ATTN_MODEL_RUN_OPTIONS_INIT;
    opt.patches = &p;
    opt.n_patches = 1;
    opt.cache = w;
    opt.patterns = patterns;
    opt.n_patterns = 1;
    opt.recorded = &recorded;
    assert_ok(attn_model_run(gemma, ids_a, LEN, &opt, logits));
    assert_ok(attn_npz_commit(w));
    assert_int_equal(recorded, 2);
    attn_npz *z;
    attn_array out5 = {0}, out4 = {0};
    assert_ok(attn_npz_open(path, &z));
    assert_ok(attn_npz_read(z, "blocks.5.hook_attn_out", &out5));
    assert_ok(attn_npz_read(z, "blocks.4.hook_attn_out", &out4));
    attn_npz_free(z);
    assert_int_equal(out5.count, LEN * d);
    int64_t nonzero5 = 0, nonzero4 = 0;
    for (int64_t i = 0; i < out5.count; i++) nonzero5 += ((float *)out5.data)[i] != 0.0f;
    for (int64_t i = 0; i < out4.count; i++) nonzero4 += ((float *)out4.data)[i] != 0.0f;
    assert_int_equal(nonzero5, 0); /* no o_proj bias: 0 in, 0 out (and Gemma's post-norm of 0 is 0) */
    assert_true(nonzero4 > 0);     /* layer 4, not ablated */
    attn_array_free(&out5);
    attn_array_free(&out4);
    free(logits);
}

static void test_ablate_head_against_transformers(void **state) {
    (void)state;
    need_model();
    /* hook_z of one head of one layer zeroed at every position (layer -1:
     * the clean run). */
    static const struct { const char *name; int64_t layer, head; } cases[] = {
        {"clean", -1, 0}, {"L3H1", 3, 1}, {"L5H0", 5, 0}, {"L5H2", 5, 2}};
    float *logits = malloc((size_t)V * 4);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char path[512];
        attn_array top_ids = {0}, top_logits = {0};
        snprintf(path, sizeof path, FIXTURES "/gemma3_%s_top_ids.npy", cases[c].name);
        assert_ok(attn_npy_load(path, &top_ids));
        assert_ok(attn_array_convert(&top_ids, ATTN_I64));
        snprintf(path, sizeof path, FIXTURES "/gemma3_%s_top_logits.npy", cases[c].name);
        assert_ok(attn_npy_load(path, &top_logits));
        const attn_model_patch p = {.kind = ATTN_MODEL_ABLATE_ZERO, .point = ATTN_DECODER_HOOK_Z,
                                    .layer = cases[c].layer, .heads = &cases[c].head, .n_heads = 1};
        attn_model_run_options opt = ATTN_MODEL_RUN_OPTIONS_INIT;
        opt.patches = &p;
        opt.n_patches = cases[c].layer >= 0;
        assert_ok(attn_model_run(gemma, ids_a, LEN, &opt, logits));
        double worst = 0;
        const int64_t *want_ids = top_ids.data;
        const float *want = top_logits.data;
        for (int64_t j = 0; j < top_ids.count; j++) worst = fmax(worst, fabs(logits[want_ids[j]] - want[j]));
        int64_t best[1];
        best[0] = 0;
        for (int64_t i = 1; i < V; i++)
            if (logits[i] > logits[best[0]]) best[0] = i;
        print_message("%s: transformers' top-10 logits within %.2e; top token %lld (transformers %lld)\n",
                      cases[c].name, worst, (long long)best[0], (long long)want_ids[0]);
        if (worst > DECODER_LOGIT_ABS_FAIL) fail_msg("%s: logits differ by %.3g", cases[c].name, worst);
        assert_int_equal(best[0], want_ids[0]);
        attn_array_free(&top_ids);
        attn_array_free(&top_logits);
    }
    free(logits);
}

/* Keeps every layer's hook_z. */
static int keep_z(void *user, const attn_decoder_hook_tensor *t) {
    float *z = user;
    const size_t n = (size_t)(t->shape[0] * t->shape[1] * t->shape[2]);
    memcpy(z + t->layer * (int64_t)n, t->data, n * 4);
    return 0;
}

static void run_z(const int32_t *ids, float *z) {
    attn_decoder_outputs o = ATTN_DECODER_OUTPUTS_INIT;
    o.tensor_hook = keep_z;
    o.tensor_hook_user = z;
    o.tensor_hook_points = 1u << ATTN_DECODER_HOOK_Z;
    assert_ok(attn_decoder_forward(gemma, ids, LEN, &o));
}

static void test_paths(void **state) {
    (void)state;
    need_model();
    const int64_t Dh = attn_decoder_get_config(gemma)->head_dim;
    attn_model_head_paths *p = malloc((size_t)(N * Hq) * sizeof *p);
    float *za = malloc((size_t)(N * LEN * Hq * Dh) * 4), *zb = malloc((size_t)(N * LEN * Hq * Dh) * 4);
    assert_ok(attn_model_paths(gemma, ids_a, ids_b, LEN, -1, p));
    /* The base and changed cases are the two texts' own runs: their z at
     * the last position, from the decoder's hooks (the flash kernel, where
     * the decomposition runs the traced reference). */
    run_z(ids_a, za);
    run_z(ids_b, zb);
    double worst = 0;
    for (int64_t l = 0; l < N; l++)
        for (int64_t h = 0; h < Hq; h++) {
            const float *a = za + ((l * LEN + LEN - 1) * Hq + h) * Dh, *b = zb + ((l * LEN + LEN - 1) * Hq + h) * Dh;
            double base = 0, changed = 0;
            for (int64_t e = 0; e < Dh; e++) base += (double)a[e] * a[e], changed += ((double)b[e] - a[e]) * ((double)b[e] - a[e]);
            const attn_model_head_paths *q = &p[l * Hq + h];
            worst = fmax(worst, fabs(sqrt(base) - q->base) / fmax(1.0, sqrt(base)));
            worst = fmax(worst, fabs(sqrt(changed) - q->changed) / fmax(1.0, sqrt(base)));
            /* Layer 0 at the last position: the texts differ at position 4
             * only, which the last query reads. */
            assert_true(q->weight >= 0 && q->content >= 0 && q->interaction >= 0);
        }
    print_message("paths: base and changed |z| against the decoder's own runs: worst %.2e (relative)\n", worst);
    if (worst > 1e-5) fail_msg("the decomposition's runs differ from the decoder's by %.3g", worst);
    /* A head that reads nothing new: identical texts give zero everywhere. */
    assert_ok(attn_model_paths(gemma, ids_a, ids_a, LEN, -1, p));
    for (int64_t i = 0; i < N * Hq; i++)
        assert_true(p[i].weight == 0 && p[i].content == 0 && p[i].interaction == 0 && p[i].changed == 0);
    free(p), free(za), free(zb);
}

static void test_nullspace(void **state) {
    (void)state;
    need_model();
    float w[LEN];
    double moved[LEN];
    attn_nullspace_result r;
    const double tol = 1e-3;
    attn_nullspace_options opt = ATTN_NULLSPACE_OPTIONS_INIT;
    opt.tolerance = tol;
    assert_ok(attn_model_nullspace(gemma, ids_a, LEN, 12, 2, -1, &opt, w, moved, &r));
    /* A distribution with the row's sum, within the tolerance: checked here
     * again, in double, against the row's own values. */
    double sum_w = 0, sum_m = 0, l1 = 0;
    for (int j = 0; j < LEN; j++) {
        assert_true(moved[j] >= 0);
        sum_w += w[j], sum_m += moved[j], l1 += fabs(moved[j] - w[j]);
    }
    assert_true(fabs(sum_w - sum_m) < 1e-9);
    assert_true(fabs(l1 - r.l1) < 1e-9);
    assert_true(r.max_output_change <= tol);
    assert_true(r.exact); /* 6 keys: enumerated */
    assert_int_equal(r.visible, LEN);
    assert_int_equal(attn_model_nullspace(gemma, ids_a, LEN, 18, 0, -1, &opt, w, moved, &r),
                     ATTN_ERR_INVALID_ARGUMENT);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kl),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_vocabulary),
        cmocka_unit_test(test_model_names),
        cmocka_unit_test(test_stream_cosine),
        cmocka_unit_test(test_layer_visible),
        cmocka_unit_test(test_tiny_patches),
        cmocka_unit_test(test_extra_hooks),
        cmocka_unit_test(test_tiny_analyses),
        cmocka_unit_test(test_tiny_logit_lens),
        cmocka_unit_test(test_hooks_match_outputs),
        cmocka_unit_test(test_patch_with_itself),
        cmocka_unit_test(test_patch_resid_pre_gives_source),
        cmocka_unit_test(test_patch_pattern_keeps_values),
        cmocka_unit_test(test_ablate_every_head),
        cmocka_unit_test(test_ablate_head_against_transformers),
        cmocka_unit_test(test_paths),
        cmocka_unit_test(test_nullspace),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
