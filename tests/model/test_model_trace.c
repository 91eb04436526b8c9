/*
 * test_model_trace.c — the decoder's hook points (attn_decoder.h) and the
 * recording, patching and ablation of attn model trace (tools/model_trace.c,
 * compiled in: the very functions the command runs).
 *
 * Without models (always run): KL(P || Q) >= 0 and 0 for identical rows,
 * against a direct sum in double; the patch grammar and its refusals; the
 * hook names round-trip.
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
#include "attn_decoder.h"
#include "attn_io.h"
#include "attn_model.h"
#include "attn_npz.h"
#include "model_trace.h"

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
        const double got = trace_kl(p, q, V);
        assert_true(got >= 0.0);
        if (fabs(got - kl) > 1e-9 * fmax(1.0, kl)) fail_msg("KL %.17g, direct %.17g", got, kl);
        assert_true(trace_kl(p, p, V) == 0.0);
    }
    free(p);
    free(q);
}

static void test_parse(void **state) {
    (void)state;
    trace_patch p;
    char err[512];
    assert_true(trace_parse_patch("blocks.3.hook_resid_pre@-1", 0, 18, &p, err, sizeof err));
    assert_int_equal(p.point, ATTN_DECODER_HOOK_RESID_PRE);
    assert_int_equal(p.layer, 3);
    assert_int_equal(p.n_positions, 1);
    assert_int_equal(p.positions[0], -1);
    assert_true(trace_parse_patch("blocks.*.attn.hook_z@0,2:1,3", 0, 18, &p, err, sizeof err));
    assert_int_equal(p.point, ATTN_DECODER_HOOK_Z);
    assert_int_equal(p.layer, -1);
    assert_int_equal(p.n_positions, 2);
    assert_int_equal(p.n_heads, 2);
    assert_int_equal(p.heads[1], 3);
    assert_true(trace_parse_patch("hook_resid_post", 0, 18, &p, err, sizeof err));
    assert_int_equal(p.layer, -1);
    assert_true(trace_parse_patch("blocks.5.attn.hook_z:0=mean", 1, 18, &p, err, sizeof err));
    assert_int_equal(p.kind, TRACE_ABLATE_MEAN);
    static const struct { const char *text; int ablate; const char *says; } bad[] = {
        {"blocks.18.hook_resid_pre", 0, "layer 18"},
        {"blocks.1.hook_resid", 0, "not a hook point"},
        {"hook_embed", 0, "no layer"},
        {"blocks.1.hook_resid_pre:2", 0, "no heads axis"},
        {"blocks.1.attn.hook_z@x", 0, "positions"},
        {"blocks.1.attn.hook_z:0", 1, "=zero"},
        {"blocks.1.attn.hook_pattern:0=mean", 1, "mean ablation"},
        {"blocks.1.attn.hook_z:0=zero", 0, "unexpected"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (trace_parse_patch(bad[i].text, bad[i].ablate, 18, &p, err, sizeof err))
            fail_msg("'%s' was accepted", bad[i].text);
        if (!strstr(err, bad[i].says)) fail_msg("'%s': message '%s' does not say '%s'", bad[i].text, err, bad[i].says);
    }
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
        assert_int_equal(layer, p == ATTN_DECODER_HOOK_EMBED || p == ATTN_DECODER_HOOK_LN_FINAL ? -1 : 7);
    }
    assert_string_equal(attn_decoder_hook_name(ATTN_DECODER_HOOK_PATTERN, 3, buf, sizeof buf),
                        "blocks.3.attn.hook_pattern");
    attn_decoder_hook_point back;
    int64_t layer;
    assert_int_equal(attn_decoder_hook_parse("blocks.3.hook_embed", &back, &layer), ATTN_ERR_INVALID_ARGUMENT);
    assert_int_equal(attn_decoder_hook_parse("attn.hook_q", &back, &layer), ATTN_ERR_INVALID_ARGUMENT);
    assert_null(attn_decoder_hook_name(ATTN_DECODER_HOOK_POINTS, 0, buf, sizeof buf));
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

static void expect_identical(const char *what, const float *want, const float *got, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (memcmp(&want[i], &got[i], sizeof(float)) != 0)
            fail_msg("%s: element %lld is %.9g, expected %.9g (bit for bit)", what, (long long)i, (double)got[i],
                     (double)want[i]);
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
        assert_int_equal(k.calls[p], p == ATTN_DECODER_HOOK_EMBED || p == ATTN_DECODER_HOOK_LN_FINAL ? 1 : N);
    free(clean), free(hooked), free(hidden), free(att), free(att_ptr), free(k.embed), free(k.resid_post),
        free(k.pattern);
}

/* Patches from `source` (its run recorded first) into ids_a; logits out. */
static void patched_logits(const int32_t *source, const char *const *texts, int n, float *logits) {
    trace_patch patches[32];
    char err[512];
    for (int i = 0; i < n; i++)
        if (!trace_parse_patch(texts[i], 0, N, &patches[i], err, sizeof err)) fail_msg("%s", err);
    trace_store store;
    if (trace_record_source(gemma, source, LEN, patches, n, &store, err, sizeof err)) fail_msg("%s", err);
    trace_run_spec spec = {patches, n, -1, &store, LEN, NULL, NULL, 0, NULL};
    if (trace_run(gemma, ids_a, LEN, &spec, logits, err, sizeof err)) fail_msg("%s", err);
    trace_store_free(&store);
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
    assert_true(trace_kl(clean, patched, V) == 0.0);
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
    assert_true(trace_kl(clean, source, V) > 0.0); /* the two texts do differ */
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
    /* Every head of layer 5 zeroed by trace_run, its hook_attn_out recorded
     * into an .npz cache (after the patch: what the pass used). */
    trace_patch p;
    char err[512], path[600];
    if (!trace_parse_patch("blocks.5.attn.hook_z=zero", 1, N, &p, err, sizeof err)) fail_msg("%s", err);
    float *logits = malloc((size_t)V * 4);
    snprintf(path, sizeof path, "%s/ablated.npz", test_tmpdir());
    static const char *const patterns[] = {"blocks.[45].hook_attn_out"};
    attn_npz_writer *w;
    assert_ok(attn_npz_create(path, 0, &w));
    int64_t recorded = 0;
    trace_run_spec spec = {&p, 1, -1, NULL, 0, w, patterns, 1, &recorded};
    if (trace_run(gemma, ids_a, LEN, &spec, logits, err, sizeof err)) fail_msg("%s", err);
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
    static const struct { const char *name, *patch; } cases[] = {
        {"clean", NULL}, {"L3H1", "blocks.3.attn.hook_z:1=zero"}, {"L5H0", "blocks.5.attn.hook_z:0=zero"},
        {"L5H2", "blocks.5.attn.hook_z:2=zero"}};
    float *logits = malloc((size_t)V * 4);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char path[512], err[512];
        attn_array top_ids = {0}, top_logits = {0};
        snprintf(path, sizeof path, FIXTURES "/gemma3_%s_top_ids.npy", cases[c].name);
        assert_ok(attn_npy_load(path, &top_ids));
        assert_ok(attn_array_convert(&top_ids, ATTN_I64));
        snprintf(path, sizeof path, FIXTURES "/gemma3_%s_top_logits.npy", cases[c].name);
        assert_ok(attn_npy_load(path, &top_logits));
        trace_patch p;
        int n = 0;
        if (cases[c].patch) {
            if (!trace_parse_patch(cases[c].patch, 1, N, &p, err, sizeof err)) fail_msg("%s", err);
            n = 1;
        }
        trace_run_spec spec = {&p, n, -1, NULL, 0, NULL, NULL, 0, NULL};
        if (trace_run(gemma, ids_a, LEN, &spec, logits, err, sizeof err)) fail_msg("%s", err);
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
    trace_head_paths *p = malloc((size_t)(N * Hq) * sizeof *p);
    float *za = malloc((size_t)(N * LEN * Hq * Dh) * 4), *zb = malloc((size_t)(N * LEN * Hq * Dh) * 4);
    char err[512];
    if (trace_paths(gemma, ids_a, ids_b, LEN, -1, p, err, sizeof err)) fail_msg("%s", err);
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
            const trace_head_paths *q = &p[l * Hq + h];
            worst = fmax(worst, fabs(sqrt(base) - q->base) / fmax(1.0, sqrt(base)));
            worst = fmax(worst, fabs(sqrt(changed) - q->changed) / fmax(1.0, sqrt(base)));
            /* Layer 0 at the last position: the texts differ at position 4
             * only, which the last query reads. */
            assert_true(q->weight >= 0 && q->content >= 0 && q->interaction >= 0);
        }
    print_message("paths: base and changed |z| against the decoder's own runs: worst %.2e (relative)\n", worst);
    if (worst > 1e-5) fail_msg("the decomposition's runs differ from the decoder's by %.3g", worst);
    /* A head that reads nothing new: identical texts give zero everywhere. */
    if (trace_paths(gemma, ids_a, ids_a, LEN, -1, p, err, sizeof err)) fail_msg("%s", err);
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
    char err[512];
    const double tol = 1e-3;
    if (trace_nullspace(gemma, ids_a, LEN, 12, 2, -1, tol, w, moved, &r, err, sizeof err)) fail_msg("%s", err);
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
    assert_int_equal(trace_nullspace(gemma, ids_a, LEN, 18, 0, -1, tol, w, moved, &r, err, sizeof err),
                     ATTN_ERR_INVALID_ARGUMENT);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kl),
        cmocka_unit_test(test_parse),
        cmocka_unit_test(test_names),
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
