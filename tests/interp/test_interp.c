/*
 * test_interp.c — hooks, patches, the path decomposition and the null-space
 * search, through the library.
 *
 * Expected numbers come from the chapter (docs: /shared/chapter/README.md,
 * "Controlled interventions"), from hand derivations written next to each
 * check, or from invariants: patching a pass with its own recorded values
 * changes no bit; zero-ablating every head leaves the output bias; a
 * replaced key moves only its own column of scores.
 */
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

#define CHECK(call)                                                                     \
    do {                                                                                \
        attn_status st_ = (call);                                                       \
        if (st_ != ATTN_OK) fail_msg("%s: %s (%s)", #call, attn_status_str(st_), attn_last_error()); \
    } while (0)

static void expect_near(const char *what, double got, double want, double tol) {
    if (!(fabs(got - want) <= tol)) fail_msg("%s: got %.9g, want %.9g (tolerance %g)", what, got, want, tol);
}

/* --------------------------------------------------------- the chapter */

/* The chapter's module: X (3 x 2), W_Q = I, W_K = c I with c = sqrt(2) ln 2,
 * W_V = diag(2, 1), one head, no W_O; the changed input has x2 = [0, 2]. */
static const float chapter_x[6] = {1, 0, 0, 1, 1, 1}, chapter_x2[6] = {1, 0, 0, 2, 1, 1};
static float chapter_wk[4];
static const float chapter_wq[4] = {1, 0, 0, 1}, chapter_wv[4] = {2, 0, 0, 1};

static attn_mha chapter_module(void) {
    const float c = (float)(sqrt(2.0) * log(2.0));
    chapter_wk[0] = c; chapter_wk[1] = 0; chapter_wk[2] = 0; chapter_wk[3] = c;
    attn_mha m = {.struct_size = sizeof(attn_mha), .d_model = 2, .heads = 1, .head_dim = 2, .d_out = 2,
                  .wq = chapter_wq, .wk = chapter_wk, .wv = chapter_wv};
    return m;
}

/* Figure 2, query 3 (index 2):        weights of q3        output o3 */
static const double fig2_weights[ATTN_PATH_CASES][3] = {
    {0.25, 0.25, 0.5}, {0.2, 0.4, 0.4}, {0.25, 0.25, 0.5}, {0.2, 0.4, 0.4}, {0.2, 0.4, 0.4}};
static const double fig2_out[ATTN_PATH_CASES][2] = {
    {1.5, 0.75}, {1.2, 0.8}, {1.5, 1.0}, {1.2, 1.2}, {1.2, 1.2}};

static void expect_figure2(const attn_paths *p) {
    char what[96];
    for (int c = 0; c < ATTN_PATH_CASES; c++) {
        const attn_trace *t = &p->run[c];
        for (int j = 0; j < 3; j++) {
            snprintf(what, sizeof what, "%s: weight of q3 on key %d", attn_path_case_name((attn_path_case)c), j + 1);
            expect_near(what, t->pattern[2 * 3 + j], fig2_weights[c][j], CHAPTER_ABS_FAIL);
        }
        for (int d = 0; d < 2; d++) {
            snprintf(what, sizeof what, "%s: o3[%d]", attn_path_case_name((attn_path_case)c), d);
            expect_near(what, t->z[2 * 2 + d], fig2_out[c][d], CHAPTER_ABS_FAIL);
        }
    }
    /* interaction = both - K only - V only + base = [1.2-1.2-1.5+1.5, 1.2-0.8-1.0+0.75] */
    expect_near("interaction o3[0]", p->interaction_z[4], 0.0, CHAPTER_ABS_FAIL);
    expect_near("interaction o3[1]", p->interaction_z[5], 0.15, CHAPTER_ABS_FAIL);
}

static void chapter_paths_mha(void **state) {
    (void)state;
    attn_mha m = chapter_module();
    attn_paths p = {0};
    CHECK(attn_mha_paths(&m, chapter_x, chapter_x2, 1, 3, NULL, NULL, 0, NULL, &p));
    expect_figure2(&p);
    /* Without W_O the module output is the head's z. */
    for (int d = 0; d < 2; d++) {
        expect_near("attn_out o3, both", p.run[ATTN_PATH_BOTH].attn_out[4 + d], fig2_out[ATTN_PATH_BOTH][d], CHAPTER_ABS_FAIL);
        expect_near("interaction_out o3", p.interaction_out[4 + d], d ? 0.15 : 0.0, CHAPTER_ABS_FAIL);
    }
    /* Query 2's own input changed, so its query differs and "changed"
     * differs from "both" there: q2 = [0, 2] against k = [c, 0], [0, 2c],
     * [c, c] gives scaled scores 0, 4 ln2, 2 ln2 -> exp 1, 16, 4 -> weights
     * 1/21, 16/21, 4/21; "both" keeps q2 = [0, 1]: 0, 2 ln2, ln2 -> 1/7,
     * 4/7, 2/7. */
    expect_near("changed: weight of q2 on key 1", p.run[ATTN_PATH_CHANGED].pattern[3], 1.0 / 21, CHAPTER_ABS_FAIL);
    expect_near("changed: weight of q2 on key 2", p.run[ATTN_PATH_CHANGED].pattern[4], 16.0 / 21, CHAPTER_ABS_FAIL);
    expect_near("both: weight of q2 on key 1", p.run[ATTN_PATH_BOTH].pattern[3], 1.0 / 7, CHAPTER_ABS_FAIL);
    expect_near("both: weight of q2 on key 2", p.run[ATTN_PATH_BOTH].pattern[4], 4.0 / 7, CHAPTER_ABS_FAIL);
    attn_paths_free(&p);
    attn_paths_free(&p); /* safe twice */
}

static void chapter_paths_sdpa(void **state) {
    (void)state;
    const float c = (float)(sqrt(2.0) * log(2.0));
    float q[6] = {1, 0, 0, 1, 1, 1}, k[6] = {c, 0, 0, c, c, c}, v[6] = {2, 0, 0, 1, 2, 1};
    float k2[6] = {c, 0, 0, 2 * c, c, c}, v2[6] = {2, 0, 0, 2, 2, 1};
    attn_tensor qt = attn_tensor_2d(q, 3, 2), kt = attn_tensor_2d(k, 3, 2), vt = attn_tensor_2d(v, 3, 2);
    attn_tensor k2t = attn_tensor_2d(k2, 3, 2), v2t = attn_tensor_2d(v2, 3, 2);
    attn_paths p = {0};
    CHECK(attn_sdpa_paths(&qt, &kt, &vt, NULL, &k2t, &v2t, NULL, &p));
    expect_figure2(&p);
    assert_null(p.interaction_out);
    assert_null(p.run[0].result);
    attn_paths_free(&p);

    attn_tensor bad = attn_tensor_2d(k2, 2, 2);
    assert_int_equal(attn_sdpa_paths(&qt, &kt, &vt, NULL, &bad, NULL, NULL, &p), ATTN_ERR_SHAPE);
    assert_non_null(strstr(attn_last_error(), "k_changed"));
}

/* ------------------------------------------------------ random modules */

typedef struct module_case {
    attn_mha m;
    int64_t B, L;
    float *x, *w[8]; /* wq wk wv wo bq bk bv bo */
} module_case;

static float *random_floats(test_rng *r, int64_t n, double scale) {
    float *x = malloc(sizeof(float) * (size_t)n);
    test_fill_normal(r, x, n, scale);
    return x;
}

static void module_make(module_case *mc, test_rng *r, int64_t B, int64_t L, int64_t Hq, int64_t Hkv,
                        int64_t D, int64_t Dv, int with_wo, int with_bias) {
    const int64_t dm = 5, d_out = with_wo ? 3 : Hq * Dv;
    memset(mc, 0, sizeof *mc);
    mc->B = B;
    mc->L = L;
    mc->x = random_floats(r, B * L * dm, 1);
    const int64_t sizes[8] = {dm * Hq * D, dm * Hkv * D, dm * Hkv * Dv, Hq * Dv * d_out, Hq * D, Hkv * D, Hkv * Dv, d_out};
    for (int i = 0; i < 8; i++)
        if ((i != 3 || with_wo) && (i < 4 || with_bias)) mc->w[i] = random_floats(r, sizes[i], 0.6);
    mc->m = (attn_mha){.struct_size = sizeof(attn_mha), .d_model = dm, .heads = Hq, .kv_heads = Hkv, .head_dim = D, .value_dim = Dv, .d_out = d_out,
                       .wq = mc->w[0], .wk = mc->w[1], .wv = mc->w[2], .wo = mc->w[3],
                       .bq = mc->w[4], .bk = mc->w[5], .bv = mc->w[6], .bo = mc->w[7]};
}

static void module_free(module_case *mc) {
    free(mc->x);
    for (int i = 0; i < 8; i++) free(mc->w[i]);
}

static int64_t hook_count(const attn_trace *t, attn_hook hook) {
    attn_hook_tensor view;
    if (attn_trace_get(t, hook, &view)) return -1;
    int64_t n = 1;
    for (int d = 0; d < view.ndim; d++) n *= view.shape[d];
    return n;
}

/* Every hook of a and b has the same bits. */
static void expect_same_trace(const attn_trace *a, const attn_trace *b, const char *label) {
    for (int h = 0; h < ATTN_HOOK_COUNT; h++) {
        attn_hook_tensor va, vb;
        int have_a = attn_trace_get(a, (attn_hook)h, &va) == ATTN_OK;
        int have_b = attn_trace_get(b, (attn_hook)h, &vb) == ATTN_OK;
        assert_int_equal(have_a, have_b);
        if (!have_a) continue;
        if (memcmp(va.data, vb.data, (size_t)hook_count(a, (attn_hook)h) * sizeof(float)))
            fail_msg("%s: %s differs", label, va.name);
    }
}

/* ------------------------------------------------------ hooks, tracing */

static void hook_names(void **state) {
    (void)state;
    attn_hook h;
    CHECK(attn_hook_from_name("blocks.0.attn.hook_pattern", &h));
    assert_int_equal(h, ATTN_HOOK_PATTERN);
    CHECK(attn_hook_from_name("hook_attn_scores", &h));
    assert_int_equal(h, ATTN_HOOK_ATTN_SCORES);
    CHECK(attn_hook_from_name("z", &h));
    assert_int_equal(h, ATTN_HOOK_Z);
    assert_int_equal(attn_hook_from_name("hook_w", &h), ATTN_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "hook_w"));
    for (int i = 0; i < ATTN_HOOK_COUNT; i++) {
        CHECK(attn_hook_from_name(attn_hook_name((attn_hook)i), &h));
        assert_int_equal(h, i);
    }
    assert_null(attn_hook_name(ATTN_HOOK_COUNT));
    assert_string_equal(attn_path_case_name(ATTN_PATH_K_ONLY), "K only");
}

/* Unpatched traces reproduce attn_mha_forward / attn_sdpa_forward bit for
 * bit; hook shapes are TransformerLens's; sum_h result + bo = out. */
static void trace_matches_forward(void **state) {
    (void)state;
    test_rng r;
    test_rng_seed(&r, 51);
    for (int with_wo = 0; with_wo < 2; with_wo++) {
        module_case mc;
        module_make(&mc, &r, 2, 7, 4, 2, 3, 5, with_wo, 1);
        attn_sdpa_options opt = ATTN_SDPA_OPTIONS_INIT;
        opt.causal = 1;
        const int64_t n_out = mc.B * mc.L * mc.m.d_out;
        float *out = malloc(sizeof(float) * (size_t)n_out), *out_t = malloc(sizeof(float) * (size_t)n_out);
        float *w = malloc(sizeof(float) * (size_t)(mc.B * 4 * mc.L * mc.L));
        CHECK(attn_mha_forward(&mc.m, mc.x, mc.B, mc.L, NULL, 0, &opt, out, w, NULL));
        attn_trace t = {0};
        CHECK(attn_mha_forward_traced(&mc.m, mc.x, mc.B, mc.L, NULL, 0, &opt, NULL, 0, &t, out_t));
        assert_memory_equal(out, out_t, sizeof(float) * (size_t)n_out);
        assert_memory_equal(out, t.attn_out, sizeof(float) * (size_t)n_out);
        assert_memory_equal(w, t.pattern, sizeof(float) * (size_t)(mc.B * 4 * mc.L * mc.L));

        attn_hook_tensor view;
        CHECK(attn_trace_get(&t, ATTN_HOOK_RESULT, &view));
        assert_int_equal(view.ndim, 4);
        assert_int_equal(view.shape[1], mc.L);
        assert_int_equal(view.shape[2], 4);
        assert_int_equal(view.shape[3], mc.m.d_out);
        assert_string_equal(view.axes, "batch pos head_index d_model");
        CHECK(attn_trace_get(&t, ATTN_HOOK_K, &view));
        assert_int_equal(view.shape[2], 2); /* kv heads, not repeated */
        CHECK(attn_trace_get(&t, ATTN_HOOK_ATTN_SCORES, &view));
        assert_true(isinf(t.scores[1]) && t.scores[1] < 0); /* query 0 cannot see key 1 */

        for (int64_t row = 0; row < mc.B * mc.L; row++)
            for (int64_t o = 0; o < mc.m.d_out; o++) {
                double sum = mc.m.bo[o];
                for (int64_t h = 0; h < 4; h++) sum += t.result[(row * 4 + h) * mc.m.d_out + o];
                expect_near("sum of hook_result + bo", sum, out[row * mc.m.d_out + o], INTERP_OUT_ABS_FAIL);
            }
        attn_trace_free(&t);
        free(out); free(out_t); free(w);
        module_free(&mc);
    }

    /* Bare attention with a strided q (heads interleaved with padding). */
    float q[3 * 2 * 4], k[3 * 2], v[3 * 2], o[3 * 2 * 2], o_t[3 * 2 * 2];
    test_fill_normal(&r, q, 24, 1);
    test_fill_normal(&r, k, 6, 1);
    test_fill_normal(&r, v, 6, 1);
    attn_tensor qt = attn_tensor_4d(q, 1, 3, 2, 2), kt = attn_tensor_4d(k, 1, 3, 1, 2), vt = attn_tensor_4d(v, 1, 3, 1, 2);
    qt.stride[1] = 8; qt.stride[2] = 4; qt.stride[0] = 24;
    attn_tensor ot = attn_tensor_4d(o, 1, 3, 2, 2), ot_t = attn_tensor_4d(o_t, 1, 3, 2, 2);
    CHECK(attn_sdpa_forward(&qt, &kt, &vt, NULL, &ot, NULL, NULL));
    attn_trace t = {0};
    CHECK(attn_sdpa_forward_traced(&qt, &kt, &vt, NULL, NULL, 0, &t, &ot_t));
    assert_memory_equal(o, o_t, sizeof o);
    assert_memory_equal(o, t.z, sizeof o);
    attn_hook_tensor view;
    assert_int_equal(attn_trace_get(&t, ATTN_HOOK_RESULT, &view), ATTN_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "no hook_result"));
    attn_trace_free(&t);
    /* out NULL is fine with a trace; both NULL is not. */
    assert_int_equal(attn_sdpa_forward_traced(&qt, &kt, &vt, NULL, NULL, 0, NULL, NULL), ATTN_ERR_INVALID_ARGUMENT);
}

/* ------------------------------------------------------------ patching */

/* Activation patching with the pass's own recorded q, k, v (whole tensors
 * from a source trace, and single rows given as vectors) changes no bit. */
static void self_patch_is_identity(void **state) {
    (void)state;
    test_rng r;
    test_rng_seed(&r, 52);
    module_case mc;
    module_make(&mc, &r, 2, 6, 4, 2, 3, 2, 1, 1);
    attn_sdpa_options opt = ATTN_SDPA_OPTIONS_INIT;
    opt.causal = 1;
    attn_trace base = {0}, patched = {0};
    CHECK(attn_mha_forward_traced(&mc.m, mc.x, mc.B, mc.L, NULL, 0, &opt, NULL, 0, &base, NULL));

    attn_patch patches[6];
    const attn_hook hooks[3] = {ATTN_HOOK_Q, ATTN_HOOK_K, ATTN_HOOK_V};
    for (int i = 0; i < 3; i++) {
        patches[i] = attn_patch_make(ATTN_PATCH_REPLACE, hooks[i]);
        patches[i].source = &base;
    }
    /* One row each, as explicit vectors: q (b1, pos 4, head 3), k (b0, pos 2,
     * kv head 1), v (b1, pos 5, kv head 0). */
    const float *q_row = base.q + ((1 * 6 + 4) * 4 + 3) * 3, *k_row = base.k + ((0 * 6 + 2) * 2 + 1) * 3,
                *v_row = base.v + ((1 * 6 + 5) * 2 + 0) * 2;
    const float *rows[3] = {q_row, k_row, v_row};
    const int64_t where[3][3] = {{1, 4, 3}, {0, 2, 1}, {1, 5, 0}};
    for (int i = 0; i < 3; i++) {
        patches[3 + i] = attn_patch_make(ATTN_PATCH_REPLACE, hooks[i]);
        patches[3 + i].batch = where[i][0];
        patches[3 + i].position = where[i][1];
        patches[3 + i].head = where[i][2];
        patches[3 + i].values = rows[i];
    }
    CHECK(attn_mha_forward_traced(&mc.m, mc.x, mc.B, mc.L, NULL, 0, &opt, patches, 6, &patched, NULL));
    expect_same_trace(&base, &patched, "self-patched");
    attn_trace_free(&patched);

    /* A pattern scaled by 1 and not renormalised is the same pattern; z is
     * then the library's weighted sum again, so compare within rounding. */
    attn_patch identity = attn_patch_make(ATTN_PATCH_SCALE, ATTN_HOOK_PATTERN);
    CHECK(attn_mha_forward_traced(&mc.m, mc.x, mc.B, mc.L, NULL, 0, &opt, &identity, 1, &patched, NULL));
    assert_memory_equal(base.pattern, patched.pattern, sizeof(float) * (size_t)hook_count(&base, ATTN_HOOK_PATTERN));
    for (int64_t i = 0; i < hook_count(&base, ATTN_HOOK_Z); i++)
        expect_near("z from the unpatched pattern", patched.z[i], base.z[i], INTERP_OUT_ABS_FAIL);
    attn_trace_free(&patched);
    attn_trace_free(&base);
    module_free(&mc);
}

/* Zero-ablating every head leaves exactly the output bias; mean-ablating a
 * head gives every position of it the same z. */
static void ablation(void **state) {
    (void)state;
    test_rng r;
    test_rng_seed(&r, 53);
    module_case mc;
    module_make(&mc, &r, 2, 5, 3, 3, 2, 4, 1, 1);
    attn_trace t = {0};
    attn_patch zero = attn_patch_make(ATTN_PATCH_ZERO, ATTN_HOOK_Z);
    float *out = malloc(sizeof(float) * (size_t)(mc.B * mc.L * mc.m.d_out));
    CHECK(attn_mha_forward_traced(&mc.m, mc.x, mc.B, mc.L, NULL, 0, NULL, &zero, 1, &t, out));
    for (int64_t row = 0; row < mc.B * mc.L; row++)
        assert_memory_equal(out + row * mc.m.d_out, mc.m.bo, sizeof(float) * (size_t)mc.m.d_out);
    attn_trace_free(&t);

    /* Heads one at a time, as three patches: the same result. */
    attn_patch per_head[3];
    for (int h = 0; h < 3; h++) {
        per_head[h] = attn_patch_make(ATTN_PATCH_ZERO, ATTN_HOOK_Z);
        per_head[h].head = h;
    }
    CHECK(attn_mha_forward_traced(&mc.m, mc.x, mc.B, mc.L, NULL, 0, NULL, per_head, 3, &t, out));
    for (int64_t row = 0; row < mc.B * mc.L; row++)
        assert_memory_equal(out + row * mc.m.d_out, mc.m.bo, sizeof(float) * (size_t)mc.m.d_out);
    attn_trace_free(&t);

    attn_trace base = {0};
    CHECK(attn_mha_forward_traced(&mc.m, mc.x, mc.B, mc.L, NULL, 0, NULL, NULL, 0, &base, NULL));
    attn_patch mean = attn_patch_make(ATTN_PATCH_MEAN, ATTN_HOOK_Z);
    mean.head = 1;
    CHECK(attn_mha_forward_traced(&mc.m, mc.x, mc.B, mc.L, NULL, 0, NULL, &mean, 1, &t, NULL));
    for (int64_t b = 0; b < mc.B; b++)
        for (int64_t d = 0; d < 4; d++) {
            double want = 0;
            for (int64_t i = 0; i < mc.L; i++) want += base.z[((b * mc.L + i) * 3 + 1) * 4 + d];
            want /= (double)mc.L;
            for (int64_t i = 0; i < mc.L; i++) {
                expect_near("mean-ablated z", t.z[((b * mc.L + i) * 3 + 1) * 4 + d], want, INTERP_MEAN_ABS_FAIL);
                /* other heads untouched */
                assert_memory_equal(&t.z[((b * mc.L + i) * 3 + 0) * 4], &base.z[((b * mc.L + i) * 3 + 0) * 4], 4 * sizeof(float));
            }
        }
    attn_trace_free(&t);
    attn_trace_free(&base);
    free(out);
    module_free(&mc);
}

/* Replacing key j of kv head g changes only column j of the scores of the
 * query heads reading g; their weights change, but among the other keys
 * every row keeps its proportions; queries that cannot see key j (causal)
 * and heads of other groups keep every bit. */
static void replaced_key(void **state) {
    (void)state;
    test_rng r;
    test_rng_seed(&r, 54);
    const int64_t B = 2, L = 9, Hq = 4, Hkv = 2, D = 3, Dv = 2, S = L;
    for (int causal = 0; causal < 2; causal++)
        for (int64_t j = 0; j < S; j += 4) {
            float q[B * L * Hq * D], k[B * S * Hkv * D], v[B * S * Hkv * Dv], k_new[D];
            test_fill_normal(&r, q, B * L * Hq * D, 1);
            test_fill_normal(&r, k, B * S * Hkv * D, 1);
            test_fill_normal(&r, v, B * S * Hkv * Dv, 1);
            test_fill_normal(&r, k_new, D, 2);
            attn_tensor qt = attn_tensor_4d(q, B, L, Hq, D), kt = attn_tensor_4d(k, B, S, Hkv, D),
                        vt = attn_tensor_4d(v, B, S, Hkv, Dv);
            attn_sdpa_options opt = ATTN_SDPA_OPTIONS_INIT;
            opt.causal = causal;
            attn_patch patch = attn_patch_make(ATTN_PATCH_REPLACE, ATTN_HOOK_K);
            patch.batch = 1;
            patch.position = j;
            patch.head = 1; /* kv head 1: query heads 2 and 3 */
            patch.values = k_new;
            attn_trace base = {0}, t = {0};
            CHECK(attn_sdpa_forward_traced(&qt, &kt, &vt, &opt, NULL, 0, &base, NULL));
            CHECK(attn_sdpa_forward_traced(&qt, &kt, &vt, &opt, &patch, 1, &t, NULL));
            for (int64_t b = 0; b < B; b++)
                for (int64_t h = 0; h < Hq; h++)
                    for (int64_t i = 0; i < L; i++) {
                        const int64_t row = ((b * Hq + h) * L + i) * S;
                        const int touched = b == 1 && h / 2 == 1;
                        const int sees_j = !causal || j <= i;
                        for (int64_t c = 0; c < S; c++) {
                            int same = memcmp(&base.scores[row + c], &t.scores[row + c], sizeof(float)) == 0;
                            if (same != !(touched && c == j && sees_j))
                                fail_msg("causal=%d j=%lld: score (b%lld h%lld i%lld key %lld) %s", causal, (long long)j,
                                         (long long)b, (long long)h, (long long)i, (long long)c,
                                         same ? "did not change" : "changed");
                        }
                        if (!touched || !sees_j) {
                            assert_memory_equal(&base.pattern[row], &t.pattern[row], (size_t)S * sizeof(float));
                            continue;
                        }
                        /* proportions among keys a, c != j: p'_a / p'_c = p_a / p_c */
                        for (int64_t a = 0; a < S; a++)
                            for (int64_t c = 0; c < S; c++) {
                                if (a == j || c == j || base.pattern[row + c] == 0) continue;
                                double before = (double)base.pattern[row + a] / base.pattern[row + c];
                                double after = (double)t.pattern[row + a] / t.pattern[row + c];
                                if (fabs(after - before) > INTERP_RATIO_REL_FAIL * fmax(1.0, before))
                                    fail_msg("row proportions moved: %g -> %g", before, after);
                            }
                    }
            attn_trace_free(&base);
            attn_trace_free(&t);
        }
}

/* Pattern overrides: with renormalisation, zeroing key j is the same as
 * hiding it with a mask; without, the row keeps its other weights and no
 * longer sums to 1. */
static void pattern_override(void **state) {
    (void)state;
    test_rng r;
    test_rng_seed(&r, 55);
    const int64_t L = 4, S = 5, D = 3, Dv = 2, j = 2, i = 1;
    float q[L * D], k[S * D], v[S * Dv];
    test_fill_normal(&r, q, L * D, 1);
    test_fill_normal(&r, k, S * D, 1);
    test_fill_normal(&r, v, S * Dv, 1);
    attn_tensor qt = attn_tensor_2d(q, L, D), kt = attn_tensor_2d(k, S, D), vt = attn_tensor_2d(v, S, Dv);
    attn_trace base = {0}, t = {0};
    CHECK(attn_sdpa_forward_traced(&qt, &kt, &vt, NULL, NULL, 0, &base, NULL));

    /* hide key j from query i, renormalised == mask */
    attn_patch hide = attn_patch_make(ATTN_PATCH_ZERO, ATTN_HOOK_PATTERN);
    hide.position = i;
    hide.key = j;
    hide.renormalise = 1;
    CHECK(attn_sdpa_forward_traced(&qt, &kt, &vt, NULL, &hide, 1, &t, NULL));
    uint8_t mask[L * S];
    memset(mask, 1, sizeof mask);
    mask[i * S + j] = 0;
    attn_sdpa_options masked = ATTN_SDPA_OPTIONS_INIT;
    masked.mask = mask;
    masked.mask_shape[0] = masked.mask_shape[1] = 1;
    masked.mask_shape[2] = L;
    masked.mask_shape[3] = S;
    float want_o[L * Dv], want_w[L * S];
    attn_tensor ot = attn_tensor_2d(want_o, L, Dv);
    CHECK(attn_sdpa_forward(&qt, &kt, &vt, &masked, &ot, want_w, NULL));
    for (int64_t n = 0; n < L * S; n++)
        expect_near("renormalised pattern = masked weights", t.pattern[n], want_w[n], INTERP_WEIGHT_ABS_FAIL);
    for (int64_t n = 0; n < L * Dv; n++)
        expect_near("renormalised z = masked output", t.z[n], want_o[n], INTERP_OUT_ABS_FAIL);
    attn_trace_free(&t);

    /* the same without renormalisation: z_i = sum_{c != j} p_c v_c */
    hide.renormalise = 0;
    CHECK(attn_sdpa_forward_traced(&qt, &kt, &vt, NULL, &hide, 1, &t, NULL));
    double sum = 0;
    for (int64_t c = 0; c < S; c++) sum += t.pattern[i * S + c];
    expect_near("unrenormalised row sum", sum, 1.0 - base.pattern[i * S + j], INTERP_WEIGHT_ABS_FAIL);
    for (int64_t d = 0; d < Dv; d++) {
        double want = 0;
        for (int64_t c = 0; c < S; c++)
            if (c != j) want += (double)base.pattern[i * S + c] * v[c * Dv + d];
        expect_near("unrenormalised z", t.z[i * Dv + d], want, INTERP_OUT_ABS_FAIL);
    }
    /* other rows untouched */
    assert_memory_equal(t.pattern, base.pattern, (size_t)(i * S) * sizeof(float));
    assert_memory_equal(t.z, base.z, (size_t)(i * Dv) * sizeof(float));
    attn_trace_free(&t);

    /* SET one entry to 1 and renormalise: the row sums to 1 again */
    attn_patch set = attn_patch_make(ATTN_PATCH_SET, ATTN_HOOK_PATTERN);
    set.position = 3;
    set.key = 0;
    set.factor = 1.0f;
    set.renormalise = 1;
    CHECK(attn_sdpa_forward_traced(&qt, &kt, &vt, NULL, &set, 1, &t, NULL));
    sum = 0;
    for (int64_t c = 0; c < S; c++) sum += t.pattern[3 * S + c];
    expect_near("set + renormalise: row sum", sum, 1.0, INTERP_WEIGHT_ABS_FAIL);
    expect_near("set + renormalise: entry", t.pattern[3 * S], 1.0 / (1.0 + 1.0 - base.pattern[3 * S]),
                INTERP_WEIGHT_ABS_FAIL);
    attn_trace_free(&t);

    /* SCALE a whole row by 2 without renormalising doubles z */
    attn_patch twice = attn_patch_make(ATTN_PATCH_SCALE, ATTN_HOOK_PATTERN);
    twice.position = 0;
    twice.factor = 2.0f;
    CHECK(attn_sdpa_forward_traced(&qt, &kt, &vt, NULL, &twice, 1, &t, NULL));
    for (int64_t d = 0; d < Dv; d++) expect_near("scaled row doubles z", t.z[d], 2.0 * base.z[d], INTERP_OUT_ABS_FAIL);
    attn_trace_free(&t);

    /* REPLACE a row with uniform weights: z = mean of the values */
    float uniform[S];
    for (int64_t c = 0; c < S; c++) uniform[c] = 1.0f / (float)S;
    attn_patch flat = attn_patch_make(ATTN_PATCH_REPLACE, ATTN_HOOK_PATTERN);
    flat.position = 2;
    flat.values = uniform;
    CHECK(attn_sdpa_forward_traced(&qt, &kt, &vt, NULL, &flat, 1, &t, NULL));
    for (int64_t d = 0; d < Dv; d++) {
        double want = 0;
        for (int64_t c = 0; c < S; c++) want += v[c * Dv + d] / (double)S;
        expect_near("uniform row reads the mean value", t.z[2 * Dv + d], want, INTERP_OUT_ABS_FAIL);
    }
    attn_trace_free(&t);
    attn_trace_free(&base);
}

/* Bad patches fail with a message naming the patch and the field. */
static void bad_patches(void **state) {
    (void)state;
    float q[6] = {1, 0, 0, 1, 1, 1}, o[6];
    attn_tensor t3 = attn_tensor_2d(q, 3, 2), ot = attn_tensor_2d(o, 3, 2);
    struct { attn_patch p; const char *needle; } cases[7];
    cases[0].p = attn_patch_make(ATTN_PATCH_ZERO, ATTN_HOOK_RESULT); cases[0].needle = "cannot be patched";
    cases[1].p = attn_patch_make(ATTN_PATCH_SET, ATTN_HOOK_Q); cases[1].needle = "SET applies to hook_pattern only";
    cases[2].p = attn_patch_make(ATTN_PATCH_ZERO, ATTN_HOOK_K); cases[2].p.position = 3; cases[2].needle = "position = 3";
    cases[3].p = attn_patch_make(ATTN_PATCH_ZERO, ATTN_HOOK_V); cases[3].p.key = 0; cases[3].needle = "key selects pattern";
    cases[4].p = attn_patch_make(ATTN_PATCH_REPLACE, ATTN_HOOK_Q); cases[4].needle = "needs values or a source";
    cases[5].p = attn_patch_make(ATTN_PATCH_SCALE, ATTN_HOOK_PATTERN); cases[5].p.factor = -1; cases[5].needle = "factor";
    cases[6].p = attn_patch_make(ATTN_PATCH_ZERO, ATTN_HOOK_Z); cases[6].p.renormalise = 1; cases[6].needle = "renormalise";
    for (int n = 0; n < 7; n++) {
        attn_trace t = {0};
        assert_int_not_equal(attn_sdpa_forward_traced(&t3, &t3, &t3, NULL, &cases[n].p, 1, &t, &ot), ATTN_OK);
        if (!strstr(attn_last_error(), cases[n].needle))
            fail_msg("case %d: message '%s' lacks '%s'", n, attn_last_error(), cases[n].needle);
        assert_null(t.q); /* left zeroed */
    }
    /* A source trace of another shape is refused. */
    float big[8] = {0};
    attn_tensor t4 = attn_tensor_2d(big, 4, 2);
    attn_trace other = {0}, t = {0};
    CHECK(attn_sdpa_forward_traced(&t4, &t4, &t4, NULL, NULL, 0, &other, NULL));
    attn_patch from = attn_patch_make(ATTN_PATCH_REPLACE, ATTN_HOOK_K);
    from.source = &other;
    assert_int_equal(attn_sdpa_forward_traced(&t3, &t3, &t3, NULL, &from, 1, &t, NULL), ATTN_ERR_SHAPE);
    assert_non_null(strstr(attn_last_error(), "source's hook_k"));
    attn_trace_free(&other);
}

/* ----------------------------------------------------------- null space */

/* Checks a returned row: a distribution with the input's visible total,
 * hidden keys unchanged, output within tolerance (recomputed here in long
 * double), and the reported L1 distance. */
static void expect_valid_move(const float *w, const float *v, int64_t S, int64_t width, const uint8_t *visible,
                              const double *moved, const attn_nullspace_result *res, double tol, const char *label) {
    long double total_w = 0, total_m = 0, l1 = 0;
    for (int64_t j = 0; j < S; j++) {
        if (!(moved[j] >= 0)) fail_msg("%s: moved[%lld] = %g < 0", label, (long long)j, moved[j]);
        if (visible && !visible[j] && moved[j] != w[j]) fail_msg("%s: hidden key %lld moved", label, (long long)j);
        total_w += w[j];
        total_m += moved[j];
        l1 += fabsl(moved[j] - (long double)w[j]);
    }
    if (fabsl(total_m - total_w) > NULLSPACE_TOTAL_ABS_FAIL)
        fail_msg("%s: sum %.17Lg, want %.17Lg", label, total_m, total_w);
    if (fabsl(l1 - res->l1) > NULLSPACE_L1_ABS_FAIL) fail_msg("%s: reported L1 %g, recomputed %Lg", label, res->l1, l1);
    for (int64_t d = 0; d < width; d++) {
        long double change = 0;
        for (int64_t j = 0; j < S; j++) change += (moved[j] - (long double)w[j]) * v[j * width + d];
        if (fabsl(change) > tol * (1 + NULLSPACE_RECOMPUTE_REL_FAIL)) fail_msg("%s: output %lld moved by %Lg > %g", label, (long long)d, fabsl(change), tol);
    }
    if (res->max_output_change > tol) fail_msg("%s: reported output change %g > %g", label, res->max_output_change, tol);
}

static void nullspace_chapter(void **state) {
    (void)state;
    /* Exercise 3: v1 = v2 = [2, 1]; every row on the simplex gives [2, 1].
     * From [0.2, 0.8] the furthest row is [1, 0]: L1 = 0.8 + 0.8 = 1.6
     * (the chapter's [0.7, 0.3] is L1 = 1.0 away). */
    const float w[2] = {0.2f, 0.8f}, v[4] = {2, 1, 2, 1};
    attn_nullspace_options opt = {.struct_size = sizeof(attn_nullspace_options), .tolerance = NULLSPACE_OUT_ABS_FAIL};
    attn_nullspace_result res;
    double moved[2];
    CHECK(attn_nullspace_search(w, v, 2, 2, NULL, &opt, moved, &res));
    expect_valid_move(w, v, 2, 2, NULL, moved, &res, NULLSPACE_OUT_ABS_FAIL, "exercise 3");
    expect_near("exercise 3: L1", res.l1, 1.6, NULLSPACE_ANSWER_ABS_FAIL);
    expect_near("exercise 3: moved[0]", moved[0], 1.0, NULLSPACE_ANSWER_ABS_FAIL);
    assert_int_equal(res.exact, 1);

    /* The worked example's query 3: v3 = v1 + v2 makes the values affinely
     * independent (V^T d = 0 and sum d = 0 force d = 0), so nothing moves
     * beyond what the tolerance allows. */
    const float w3[3] = {0.25f, 0.25f, 0.5f}, v3[6] = {2, 0, 0, 1, 2, 1};
    double moved3[3];
    CHECK(attn_nullspace_search(w3, v3, 3, 2, NULL, &opt, moved3, &res));
    expect_valid_move(w3, v3, 3, 2, NULL, moved3, &res, NULLSPACE_OUT_ABS_FAIL, "query 3");
    assert_true(res.l1 < NULLSPACE_PINNED_L1_FAIL);

    /* Two equal values and one distinct (1-D): mass moves only between the
     * equal pair, [0.3, 0.3, 0.4] -> [0.6, 0, 0.4]: L1 = 0.6. */
    const float wp[3] = {0.3f, 0.3f, 0.4f}, vp[3] = {1, 1, 5};
    CHECK(attn_nullspace_search(wp, vp, 3, 1, NULL, &opt, moved3, &res));
    expect_valid_move(wp, vp, 3, 1, NULL, moved3, &res, NULLSPACE_OUT_ABS_FAIL, "pair");
    expect_near("pair: L1", res.l1, 0.6, NULLSPACE_ANSWER_ABS_FAIL);
    expect_near("pair: key 2 keeps its weight", moved3[2], 0.4, NULLSPACE_ANSWER_ABS_FAIL);

    /* Bad input */
    const float neg[2] = {-0.1f, 1.1f};
    assert_int_equal(attn_nullspace_search(neg, v, 2, 2, NULL, &opt, moved, &res), ATTN_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "weights[0]"));
    opt.tolerance = -1;
    assert_int_equal(attn_nullspace_search(w, v, 2, 2, NULL, &opt, moved, &res), ATTN_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "tolerance"));
}

/* Random rows (softmax of random scores), random values with some keys
 * sharing a value so there is room to move, some hidden keys: every answer
 * is valid; the exact search is never beaten by the local search. */
static void nullspace_random(void **state) {
    (void)state;
    test_rng r;
    test_rng_seed(&r, 56);
    for (int trial = 0; trial < 120; trial++) {
        const int64_t S = 2 + test_rng_range(&r, trial < 90 ? 8 : 30), width = 1 + test_rng_range(&r, 4);
        float *w = malloc(sizeof(float) * (size_t)S), *v = malloc(sizeof(float) * (size_t)(S * width));
        uint8_t *visible = malloc((size_t)S);
        double *moved = malloc(sizeof(double) * (size_t)S), *moved_local = malloc(sizeof(double) * (size_t)S);
        test_fill_normal(&r, v, S * width, 1);
        for (int64_t j = 1; j < S; j++)
            if (test_rng_uniform(&r) < 0.4) memcpy(&v[j * width], &v[test_rng_range(&r, j) * width], sizeof(float) * (size_t)width);
        double sum = 0;
        for (int64_t j = 0; j < S; j++) {
            visible[j] = trial % 3 == 0 ? test_rng_uniform(&r) < 0.8 : 1;
            w[j] = visible[j] ? (float)exp(2 * test_rng_normal(&r)) : 0.0f;
            sum += w[j];
        }
        for (int64_t j = 0; j < S; j++) w[j] = (float)(w[j] / (sum > 0 ? sum : 1));
        const double tol = trial % 2 ? NULLSPACE_OUT_ABS_FAIL : NULLSPACE_LOOSE_OUT_ABS_FAIL;
        attn_nullspace_options opt = {.struct_size = sizeof(attn_nullspace_options), .tolerance = tol};
        attn_nullspace_result res, res_local;
        char label[64];
        snprintf(label, sizeof label, "trial %d (S=%lld, width=%lld)", trial, (long long)S, (long long)width);
        CHECK(attn_nullspace_search(w, v, S, width, visible, &opt, moved, &res));
        expect_valid_move(w, v, S, width, visible, moved, &res, tol, label);
        opt.exact_limit = 1; /* force the local search */
        CHECK(attn_nullspace_search(w, v, S, width, visible, &opt, moved_local, &res_local));
        expect_valid_move(w, v, S, width, visible, moved_local, &res_local, tol, label);
        if (res_local.visible > 1) assert_int_equal(res_local.exact, 0);
        if (res.exact && res_local.l1 > res.l1 + NULLSPACE_LOCAL_L1_ABS_FAIL)
            fail_msg("%s: local search %g beats the exact maximum %g", label, res_local.l1, res.l1);
        free(w); free(v); free(visible); free(moved); free(moved_local);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(chapter_paths_mha),
        cmocka_unit_test(chapter_paths_sdpa),
        cmocka_unit_test(hook_names),
        cmocka_unit_test(trace_matches_forward),
        cmocka_unit_test(self_patch_is_identity),
        cmocka_unit_test(ablation),
        cmocka_unit_test(replaced_key),
        cmocka_unit_test(pattern_override),
        cmocka_unit_test(bad_patches),
        cmocka_unit_test(nullspace_chapter),
        cmocka_unit_test(nullspace_random),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
