/*
 * test_chapter.c — every number of the chapter's worked example, computed by
 * the library (attn_linear_forward, attn_sdpa_scores, attn_sdpa_forward,
 * attn_mha_forward) and compared with the chapter's own closed forms
 * (shared/chapter/README.md): 1/4, 2/5, ln2, [1.5, 0.75], 2/3, 3/5 ...
 * The expected values are written here as the chapter writes them, so they
 * are independent of the library.
 *
 * Shape legend: X [3, 2]  W_Q, W_K, W_V [2, 2]  Q, K, V, O [3, 2]
 *               scores, weights [3, 3] (rows: queries, columns: keys)
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
#include <stdlib.h>
#include <string.h>

enum { POS = 3, WIDTH = 2 };

static double ln2(void) { return log(2.0); }
static double chapter_c(void) { return sqrt(2.0) * log(2.0); }

/* The chapter's inputs (§2). */
static const float X[POS * WIDTH] = {1, 0, 0, 1, 1, 1};
static const float X_CHANGED[POS * WIDTH] = {1, 0, 0, 2, 1, 1}; /* x2 -> [0, 2] (§4) */
static const float W_Q[WIDTH * WIDTH] = {1, 0, 0, 1};
static const float W_V[WIDTH * WIDTH] = {2, 0, 0, 1};
static void w_k(float w[WIDTH * WIDTH]) {
    float c = (float)chapter_c();
    w[0] = c, w[1] = 0, w[2] = 0, w[3] = c;
}

/* got[i] ~ want[i] for n values; -inf must match exactly. */
static void expect_near(const float *got, const double *want, int n, const char *what) {
    for (int i = 0; i < n; i++) {
        if (isinf(want[i])) {
            if (!(isinf(got[i]) && (got[i] < 0) == (want[i] < 0)))
                fail_msg("%s[%d] = %.9g, want %g", what, i, got[i], want[i]);
            continue;
        }
        if (!(fabs((double)got[i] - want[i]) <= CHAPTER_ABS_FAIL))
            fail_msg("%s[%d] = %.9g, want %.9g (diff %.3g)", what, i, got[i], want[i],
                     fabs((double)got[i] - want[i]));
    }
}

/* Q, K, V of an input through the library's projection. */
static void project(const float *x, float *q, float *k, float *v) {
    float wk[WIDTH * WIDTH];
    w_k(wk);
    assert_int_equal(attn_linear_forward(x, POS, WIDTH, W_Q, NULL, WIDTH, q), ATTN_OK);
    assert_int_equal(attn_linear_forward(x, POS, WIDTH, wk, NULL, WIDTH, k), ATTN_OK);
    assert_int_equal(attn_linear_forward(x, POS, WIDTH, W_V, NULL, WIDTH, v), ATTN_OK);
}

/* One attention call on 3×2 Q, K, V.  Returns the status so that a kernel
 * this build lacks (ATTN_ERR_UNSUPPORTED) can be skipped. */
static attn_status attend(float *q, float *k, float *v, int causal, attn_kernel kernel, float *out,
                          float *weights, float *lse) {
    attn_tensor qt = attn_tensor_2d(q, POS, WIDTH), kt = attn_tensor_2d(k, POS, WIDTH),
                vt = attn_tensor_2d(v, POS, WIDTH), ot = attn_tensor_2d(out, POS, WIDTH);
    attn_sdpa_options opt = ATTN_SDPA_OPTIONS_INIT;
    opt.causal = causal;
    opt.kernel = kernel;
    return attn_sdpa_forward(&qt, &kt, &vt, &opt, &ot, weights, lse);
}

static void scores(float *q, float *k, float scale, int causal, float *table) {
    attn_tensor qt = attn_tensor_2d(q, POS, WIDTH), kt = attn_tensor_2d(k, POS, WIDTH);
    attn_sdpa_options opt = ATTN_SDPA_OPTIONS_INIT;
    opt.scale = scale;
    opt.causal = causal;
    assert_int_equal(attn_sdpa_scores(&qt, &kt, &opt, table), ATTN_OK);
}

static const attn_kernel KERNELS[] = {ATTN_KERNEL_AUTO, ATTN_KERNEL_REF, ATTN_KERNEL_FLASH};
enum { NKERNELS = sizeof KERNELS / sizeof KERNELS[0] };

/* §2: Q rows [1,0] [0,1] [1,1]; K rows [c,0] [0,c] [c,c]; V rows [2,0] [0,1] [2,1]. */
static void projections(void **state) {
    (void)state;
    const double c = chapter_c();
    float q[6], k[6], v[6];
    project(X, q, k, v);
    const double want_q[6] = {1, 0, 0, 1, 1, 1};
    const double want_k[6] = {c, 0, 0, c, c, c};
    const double want_v[6] = {2, 0, 0, 1, 2, 1};
    expect_near(q, want_q, 6, "Q");
    expect_near(k, want_k, 6, "K");
    expect_near(v, want_v, 6, "V");
    assert_true(fabs(c - 0.9803) < CHAPTER_ROUNDED_ABS_FAIL); /* c ≈ 0.9803 */
}

/* §3: raw scores q·k (q3: c, c, 2c); scaled by 1/√2 they are multiples of
 * ln2 (q3: ln2, ln2, 2ln2), whose exp values are 2, 2, 4 with sum 8. */
static void scores_and_exp(void **state) {
    (void)state;
    const double c = chapter_c(), l = ln2();
    float q[6], k[6], v[6], raw[9], scaled[9];
    project(X, q, k, v);
    scores(q, k, 1.0f, 0, raw);
    scores(q, k, 0.0f, 0, scaled); /* 0 = the default 1/√d */
    const double want_raw[9] = {c, 0, c, 0, c, c, c, c, 2 * c};
    const double want_scaled[9] = {l, 0, l, 0, l, l, l, l, 2 * l};
    expect_near(raw, want_raw, 9, "raw scores");
    expect_near(scaled, want_scaled, 9, "scaled scores");

    const double want_exp[9] = {2, 1, 2, 1, 2, 2, 2, 2, 4};
    const double want_sum[3] = {5, 5, 8};
    for (int i = 0; i < POS; i++) {
        float e[3], sum = 0;
        for (int j = 0; j < POS; j++) sum += e[j] = (float)exp((double)scaled[i * POS + j]);
        expect_near(e, want_exp + i * POS, 3, "exp of scaled scores");
        expect_near(&sum, &want_sum[i], 1, "sum of exp");
    }
}

/* §3–4: weights per query row, outputs, lse = log of the row's exp sum. */
static void weights_and_outputs(void **state) {
    (void)state;
    const double want_w[9] = {2.0 / 5, 1.0 / 5, 2.0 / 5, 1.0 / 5, 2.0 / 5, 2.0 / 5, 1.0 / 4, 1.0 / 4, 1.0 / 2};
    /* o3 = 1/4·[2,0] + 1/4·[0,1] + 1/2·[2,1] = [1.5, 0.75]; o1 = [1.6, 0.6]; o2 = [1.2, 0.8] */
    const double want_o[6] = {1.6, 0.6, 1.2, 0.8, 1.5, 0.75};
    const double want_lse[3] = {log(5.0), log(5.0), log(8.0)}; /* log(2+1+2), log(1+2+2), log(2+2+4) */
    int ran = 0;
    for (int kn = 0; kn < NKERNELS; kn++) {
        float q[6], k[6], v[6], o[6], w[9], lse[3];
        project(X, q, k, v);
        attn_status st = attend(q, k, v, 0, KERNELS[kn], o, w, lse);
        if (st == ATTN_ERR_UNSUPPORTED) continue;
        assert_int_equal(st, ATTN_OK);
        ran++;
        expect_near(w, want_w, 9, "weights");
        expect_near(o, want_o, 6, "outputs");
        expect_near(lse, want_lse, 3, "lse");
        for (int i = 0; i < POS; i++) {
            /* each row sums to 1, and each output coordinate lies in the
             * values' range: [0, 2] and [0, 1] */
            const double one = 1.0;
            float row = w[i * 3] + w[i * 3 + 1] + w[i * 3 + 2];
            expect_near(&row, &one, 1, "row sum");
            assert_true(o[i * 2] >= 0.0f && o[i * 2] <= 2.0f);
            assert_true(o[i * 2 + 1] >= 0.0f && o[i * 2 + 1] <= 1.0f);
        }
    }
    assert_true(ran >= 2); /* auto and ref at least */
}

/* §4: x2 -> [0, 2]: k2 = [0, 2c], v2 = [0, 2]; q3's scaled scores ln2, 2ln2,
 * 2ln2 -> weights 1/5, 2/5, 2/5 -> o3 = [1.2, 1.2]. */
static void context_change(void **state) {
    (void)state;
    const double c = chapter_c(), l = ln2();
    float q[6], k[6], v[6], o[6], w[9], lse[3], scaled[9];
    project(X_CHANGED, q, k, v);
    const double want_k2[2] = {0, 2 * c}, want_v2[2] = {0, 2};
    expect_near(k + 2, want_k2, 2, "k2");
    expect_near(v + 2, want_v2, 2, "v2");
    scores(q, k, 0.0f, 0, scaled);
    const double want_s3[3] = {l, 2 * l, 2 * l};
    expect_near(scaled + 6, want_s3, 3, "q3 scaled scores");
    assert_int_equal(attend(q, k, v, 0, ATTN_KERNEL_AUTO, o, w, lse), ATTN_OK);
    const double want_w3[3] = {1.0 / 5, 2.0 / 5, 2.0 / 5}, want_o3[2] = {1.2, 1.2};
    const double want_lse3 = log(10.0); /* log(2 + 4 + 4) */
    expect_near(w + 6, want_w3, 3, "q3 weights");
    expect_near(o + 4, want_o3, 2, "o3");
    expect_near(lse + 2, &want_lse3, 1, "q3 lse");
}

/* Figure 2 and exercise 1: the four controlled interventions on position 3. */
static void interventions(void **state) {
    (void)state;
    float q[6], k[6], v[6], k_new[6], v_new[6], q_unused[6];
    project(X, q, k, v);
    project(X_CHANGED, q_unused, k_new, v_new);
    static const struct {
        const char *name;
        int new_k, new_v;
        double w3[3], o3[2];
    } cases[] = {
        {"original", 0, 0, {1.0 / 4, 1.0 / 4, 1.0 / 2}, {1.5, 0.75}},
        {"K only", 1, 0, {1.0 / 5, 2.0 / 5, 2.0 / 5}, {1.2, 0.8}},
        {"V only (exercise 1)", 0, 1, {1.0 / 4, 1.0 / 4, 1.0 / 2}, {1.5, 1.0}},
        {"both", 1, 1, {1.0 / 5, 2.0 / 5, 2.0 / 5}, {1.2, 1.2}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        float qc[6], kc[6], vc[6], o[6], w[9];
        memcpy(qc, q, sizeof qc);
        memcpy(kc, cases[i].new_k ? k_new : k, sizeof kc);
        memcpy(vc, cases[i].new_v ? v_new : v, sizeof vc);
        assert_int_equal(attend(qc, kc, vc, 0, ATTN_KERNEL_AUTO, o, w, NULL), ATTN_OK);
        expect_near(w + 6, cases[i].w3, 3, cases[i].name);
        expect_near(o + 4, cases[i].o3, 2, cases[i].name);
    }
}

/* §5 and exercise 2: the causal mask.  Row 2: scores 0, ln2, -inf -> exp 1,
 * 2, 0 -> weights 1/3, 2/3, 0 -> o2 = [2/3, 2/3]; striking the third of the
 * unmasked weights instead leaves 1/5 + 2/5 = 3/5. */
static void causal_mask(void **state) {
    (void)state;
    const double l = ln2();
    for (int kn = 0; kn < NKERNELS; kn++) {
        float q[6], k[6], v[6], o[6], w[9], lse[3], scaled[9], w_full[9], o_full[6];
        project(X, q, k, v);
        attn_status st = attend(q, k, v, 1, KERNELS[kn], o, w, lse);
        if (st == ATTN_ERR_UNSUPPORTED) continue;
        assert_int_equal(st, ATTN_OK);
        scores(q, k, 0.0f, 1, scaled);
        const double want_scaled[9] = {l, -INFINITY, -INFINITY, 0, l, -INFINITY, l, l, 2 * l};
        expect_near(scaled, want_scaled, 9, "causal scaled scores");
        float e2[3];
        for (int j = 0; j < POS; j++) e2[j] = (float)exp((double)scaled[3 + j]);
        const double want_e2[3] = {1, 2, 0};
        expect_near(e2, want_e2, 3, "row 2 exp values");

        const double want_w[9] = {1, 0, 0, 1.0 / 3, 2.0 / 3, 0, 1.0 / 4, 1.0 / 4, 1.0 / 2};
        const double want_o[6] = {2, 0, 2.0 / 3, 2.0 / 3, 1.5, 0.75}; /* o1 = v1 */
        const double want_lse[3] = {l, log(3.0), log(8.0)};
        expect_near(w, want_w, 9, "causal weights");
        expect_near(o, want_o, 6, "causal outputs");
        expect_near(lse, want_lse, 3, "causal lse");

        assert_int_equal(attend(q, k, v, 0, KERNELS[kn], o_full, w_full, NULL), ATTN_OK);
        float struck = 0;
        for (int j = 0; j < POS; j++)
            if (!isinf(scaled[3 + j])) struck += w_full[3 + j];
        const double want_struck = 3.0 / 5;
        expect_near(&struck, &want_struck, 1, "unmasked weights kept by the mask");
    }
}

/* §6: the chapter's head alone through attn_mha_forward gives §4's outputs;
 * with a second (illustrative) head: 3×2 + 3×2 -> 3×4 -> ×W_O (4×2) -> 3×2. */
static void multi_head(void **state) {
    (void)state;
    const float c = (float)chapter_c();
    /* Head 2 swaps coordinates: W_Q2 = W_V2 = [[0,1],[1,0]], W_K2 = c·I. */
    const float wq[2 * 4] = {1, 0, 0, 1, /**/ 0, 1, 1, 0};
    const float wk[2 * 4] = {c, 0, c, 0, /**/ 0, c, 0, c};
    const float wv[2 * 4] = {2, 0, 0, 1, /**/ 0, 1, 1, 0};
    const float wo[4 * 2] = {1, 0, 0, 1, -1, 0, 0, 1};

    float wk1[4];
    w_k(wk1);
    attn_mha one = {.struct_size = sizeof(attn_mha), .d_model = 2, .heads = 1, .head_dim = 2, .d_out = 2, .wq = W_Q, .wk = wk1, .wv = W_V};
    float o1[6];
    assert_int_equal(attn_mha_forward(&one, X, 1, POS, NULL, 0, NULL, o1, NULL, NULL), ATTN_OK);
    const double want_head1[6] = {1.6, 0.6, 1.2, 0.8, 1.5, 0.75};
    expect_near(o1, want_head1, 6, "one-head mha");

    attn_mha two = {.struct_size = sizeof(attn_mha), .d_model = 2, .heads = 2, .head_dim = 2, .d_out = 4, .wq = wq, .wk = wk, .wv = wv};
    float z[3 * 4], w[2 * 9], out[3 * 2];
    assert_int_equal(attn_mha_forward(&two, X, 1, POS, NULL, 0, NULL, z, w, NULL), ATTN_OK);
    /* head 2: queries [0,1] [1,0] [1,1], values [0,1] [1,0] [1,1];
     * o1' = 1/5·[0,1] + 2/5·[1,0] + 2/5·[1,1] = [0.8, 0.6], and so on */
    const double want_z[12] = {1.6, 0.6, 0.8, 0.6, 1.2, 0.8, 0.6, 0.8, 1.5, 0.75, 0.75, 0.75};
    const double want_w[18] = {2.0 / 5, 1.0 / 5, 2.0 / 5, 1.0 / 5, 2.0 / 5, 2.0 / 5, 1.0 / 4, 1.0 / 4, 1.0 / 2,
                               1.0 / 5, 2.0 / 5, 2.0 / 5, 2.0 / 5, 1.0 / 5, 2.0 / 5, 1.0 / 4, 1.0 / 4, 1.0 / 2};
    expect_near(z, want_z, 12, "concatenation");
    expect_near(w, want_w, 18, "per-head weights [Hq, L, S]");

    two.wo = wo;
    two.d_out = 2;
    assert_int_equal(attn_mha_forward(&two, X, 1, POS, NULL, 0, NULL, out, NULL, NULL), ATTN_OK);
    const double want_out[6] = {1.6 - 0.8, 0.6 + 0.6, 1.2 - 0.6, 0.8 + 0.8, 1.5 - 0.75, 0.75 + 0.75};
    expect_near(out, want_out, 6, "concat·W_O");
}

/* §7: grouped-query attention, two query heads sharing the chapter's K, V:
 * the same keys, different queries, different weights. */
static void grouped_query(void **state) {
    (void)state;
    float q[6], k[6], v[6];
    project(X, q, k, v);
    float q2[3 * 2 * 2], o[3 * 2 * 2], w[2 * 9];
    for (int i = 0; i < POS; i++) {
        q2[i * 4 + 0] = q[i * 2 + 0]; /* head 1: the chapter's query   */
        q2[i * 4 + 1] = q[i * 2 + 1];
        q2[i * 4 + 2] = q[i * 2 + 1]; /* head 2: coordinates swapped   */
        q2[i * 4 + 3] = q[i * 2 + 0];
    }
    attn_tensor qt = attn_tensor_3d(q2, POS, 2, WIDTH), kt = attn_tensor_3d(k, POS, 1, WIDTH),
                vt = attn_tensor_3d(v, POS, 1, WIDTH), ot = attn_tensor_3d(o, POS, 2, WIDTH);
    assert_int_equal(attn_sdpa_forward(&qt, &kt, &vt, NULL, &ot, w, NULL), ATTN_OK);
    const double want_w[18] = {2.0 / 5, 1.0 / 5, 2.0 / 5, 1.0 / 5, 2.0 / 5, 2.0 / 5, 1.0 / 4, 1.0 / 4, 1.0 / 2,
                               1.0 / 5, 2.0 / 5, 2.0 / 5, 2.0 / 5, 1.0 / 5, 2.0 / 5, 1.0 / 4, 1.0 / 4, 1.0 / 2};
    expect_near(w, want_w, 18, "GQA weights");
    /* both heads read the same V: head 2's o1 = 1/5·[2,0] + 2/5·[0,1] + 2/5·[2,1] */
    const double want_o[12] = {1.6, 0.6, 1.2, 0.8, 1.2, 0.8, 1.6, 0.6, 1.5, 0.75, 1.5, 0.75};
    expect_near(o, want_o, 12, "GQA outputs");
}

/* §8 and exercise 3: v1 = v2 = [2, 1]; weights [0.2, 0.8] and [0.7, 0.3]
 * (made by the additive bias log w) both give [2, 1]. */
static void equal_values(void **state) {
    (void)state;
    static const double targets[2][2] = {{0.2, 0.8}, {0.7, 0.3}};
    for (int r = 0; r < 2; r++) {
        float q[1] = {0}, k[2] = {0, 0}, v[4] = {2, 1, 2, 1}, o[2], w[2];
        float bias[2] = {(float)log(targets[r][0]), (float)log(targets[r][1])};
        attn_tensor qt = attn_tensor_2d(q, 1, 1), kt = attn_tensor_2d(k, 2, 1), vt = attn_tensor_2d(v, 2, 2),
                    ot = attn_tensor_2d(o, 1, 2);
        attn_sdpa_options opt = ATTN_SDPA_OPTIONS_INIT;
        opt.bias = bias;
        opt.bias_shape[0] = opt.bias_shape[1] = opt.bias_shape[2] = 1;
        opt.bias_shape[3] = 2;
        assert_int_equal(attn_sdpa_forward(&qt, &kt, &vt, &opt, &ot, w, NULL), ATTN_OK);
        const double want_o[2] = {2, 1};
        expect_near(w, targets[r], 2, "exercise 3 weights");
        expect_near(o, want_o, 2, "exercise 3 output");
    }
}

/* §8: without position information, permuting the key/value pairs together
 * leaves every output unchanged; the map's columns move with them. */
static void permutation(void **state) {
    (void)state;
    static const int order[POS] = {2, 0, 1}; /* positions 3, 1, 2 */
    float q[6], k[6], v[6], kp[6], vp[6], o[6], w[9];
    project(X, q, k, v);
    for (int j = 0; j < POS; j++) {
        memcpy(kp + 2 * j, k + 2 * order[j], 2 * sizeof(float));
        memcpy(vp + 2 * j, v + 2 * order[j], 2 * sizeof(float));
    }
    assert_int_equal(attend(q, kp, vp, 0, ATTN_KERNEL_AUTO, o, w, NULL), ATTN_OK);
    const double want_o[6] = {1.6, 0.6, 1.2, 0.8, 1.5, 0.75};
    const double want_w3[3] = {1.0 / 2, 1.0 / 4, 1.0 / 4};
    expect_near(o, want_o, 6, "outputs after permuting K, V");
    expect_near(w + 6, want_w3, 3, "q3 weights after permuting K, V");
}

/* §8: the score table has n² cells: 100 -> 200 positions is 10,000 -> 40,000. */
static void n_squared(void **state) {
    (void)state;
    static const struct { int64_t n, cells; } sizes[] = {{100, 10000}, {200, 40000}};
    test_rng rng;
    test_rng_seed(&rng, 2017);
    for (size_t s = 0; s < 2; s++) {
        int64_t n = sizes[s].n;
        float *q = malloc((size_t)(n * 2) * sizeof *q), *table = malloc((size_t)(n * n) * sizeof *table);
        assert_non_null(q);
        assert_non_null(table);
        test_fill_normal(&rng, q, n * 2, 1.0);
        attn_tensor qt = attn_tensor_2d(q, n, 2);
        assert_int_equal(attn_sdpa_scores(&qt, &qt, NULL, table), ATTN_OK);
        int64_t cells = 0;
        for (int64_t i = 0; i < n * n; i++) cells += isfinite(table[i]) ? 1 : 0;
        assert_int_equal(cells, sizes[s].cells);
        free(q);
        free(table);
    }
    assert_int_equal(sizes[1].cells / sizes[0].cells, 4);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(projections),    cmocka_unit_test(scores_and_exp),
        cmocka_unit_test(weights_and_outputs), cmocka_unit_test(context_change),
        cmocka_unit_test(interventions),  cmocka_unit_test(causal_mask),
        cmocka_unit_test(multi_head),     cmocka_unit_test(grouped_query),
        cmocka_unit_test(equal_values),   cmocka_unit_test(permutation),
        cmocka_unit_test(n_squared),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
