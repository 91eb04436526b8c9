/*
 * test_analysis.c — value-weighted norms, attention rollout and attention
 * flow (attn_analysis.h), through the library.
 *
 * Expected numbers come from the chapter's exercise 3 (v1 = v2 = [2, 1],
 * weights [0.2, 0.8] then [0.7, 0.3]: the output [2, 1] both times), from
 * hand derivations written beside each check, and from computations built
 * differently from the library's: each head's output vector through the
 * concatenated W_O in long double (the module's own formula, z . W_O with
 * the other heads' slots zero), and every cut of a small layered graph
 * (max-flow = min-cut).
 *
 * Shape legend: pattern, norms [Hq, L, S]  v [S, Hkv, Dh]  wo [Hq, Dh, d]
 *               patterns [N, Hq, L, L]  rollout [N, L, L]  flow [L]
 */
#include "testutil.h"
#include "tolerances.h"

#include "attn.h"
#include "attn_analysis.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(call)                                                                                  \
    do {                                                                                             \
        attn_status st_ = (call);                                                                    \
        if (st_ != ATTN_OK) fail_msg("%s: %s (%s)", #call, attn_status_str(st_), attn_last_error()); \
    } while (0)

static void expect_near(const char *what, double got, double want, double tol) {
    if (!(fabs(got - want) <= tol)) fail_msg("%s: got %.12g, want %.12g (tolerance %g)", what, got, want, tol);
}

typedef attn_status (*norms_fn)(const float *, int64_t, int64_t, int64_t, const float *, int64_t, int64_t,
                                const float *, int64_t, float *);
static const norms_fn both_paths[2] = {attn_value_weighted_norms, attn_value_weighted_norms_ref};

/* ------------------------------------------------------ value-weighted norms */

/* Exercise 3, one head, two query rows: the two weight rows of the exercise
 * over two keys whose values are both [2, 1].  Each norm is alpha * sqrt(5):
 * the norms move exactly as the weights do (they are not the invariant);
 * what does not move is the head's output, sum_j alpha_j v_j = [2, 1], and
 * its norm equals the sum of the row's norms (parallel vectors). */
static void exercise3(void **state) {
    (void)state;
    const float pattern[4] = {0.2f, 0.8f, 0.7f, 0.3f}, v[4] = {2, 1, 2, 1};
    /* A W_O of 2 -> 3 that mixes the coordinates: f(v) = [2,1] . wo = [5, -1, 4]. */
    const float wo[6] = {2, 0, 1, 1, -1, 2};
    for (int p = 0; p < 2; p++)
        for (int with_wo = 0; with_wo < 2; with_wo++) {
            float norms[4];
            CHECK(both_paths[p](pattern, 1, 2, 2, v, 1, 2, with_wo ? wo : NULL, 3, norms));
            const double fnorm = with_wo ? sqrt(25.0 + 1 + 16) : sqrt(5.0);
            for (int c = 0; c < 4; c++)
                expect_near("exercise 3: alpha * ||f(v)||", norms[c], pattern[c] * fnorm,
                            ANALYSIS_NORM_REL_FAIL * fnorm);
            for (int i = 0; i < 2; i++) {
                double out[3] = {0}, out_norm = 0;
                for (int j = 0; j < 2; j++)
                    for (int c = 0; c < (with_wo ? 3 : 2); c++) {
                        const double f = with_wo ? 2.0 * wo[c] + 1.0 * wo[3 + c] : v[j * 2 + c];
                        out[c] += pattern[i * 2 + j] * f;
                    }
                for (int c = 0; c < 3; c++) out_norm += out[c] * out[c];
                expect_near("exercise 3: the output's norm is the row's sum of norms", sqrt(out_norm),
                            (double)norms[i * 2] + norms[i * 2 + 1], ANALYSIS_NORM_REL_FAIL * fnorm);
                expect_near("exercise 3: the output does not move", out[0], with_wo ? 5.0 : 2.0, 1e-6);
            }
        }
}

/* Kobayashi et al.'s observation in two keys: the weights rank key 0 first
 * (0.8 against 0.2), its value is short ([0.1, 0]) and key 1's long
 * ([1, 1]): norms 0.08 and 0.2 sqrt(2) = 0.28284..., the order reversed. */
static void weights_and_norms_disagree(void **state) {
    (void)state;
    const float pattern[2] = {0.8f, 0.2f}, v[4] = {0.1f, 0, 1, 1};
    for (int p = 0; p < 2; p++) {
        float norms[2];
        CHECK(both_paths[p](pattern, 1, 1, 2, v, 1, 2, NULL, 0, norms));
        expect_near("short value, large weight", norms[0], 0.08, ANALYSIS_NORM_REL_FAIL);
        expect_near("long value, small weight", norms[1], 0.2 * sqrt(2.0), ANALYSIS_NORM_REL_FAIL);
    }
}

/* Random sizes (odd on purpose, GQA ratios 1, 2, 3, 4) against each head's
 * output vector formed the module's way: z with head h's slot holding
 * alpha v_j and every other head's slot zero, times the whole W_O
 * [Hq * Dh, d], in long double. */
static void norms_against_module_formula(void **state) {
    (void)state;
    const struct { int64_t Hq, Hkv, L, S, Dh, d; } cases[] = {
        {1, 1, 1, 1, 1, 1}, {2, 1, 3, 17, 5, 7}, {4, 2, 3, 5, 8, 1}, {6, 2, 7, 3, 3, 40}, {4, 1, 1, 13, 16, 9}};
    test_rng rng;
    test_rng_seed(&rng, 37);
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        const int64_t Hq = cases[t].Hq, Hkv = cases[t].Hkv, L = cases[t].L, S = cases[t].S, Dh = cases[t].Dh,
                      d = cases[t].d, group = Hq / Hkv;
        float *pattern = test_random_floats(&rng, Hq * L * S, 1.0), *v = test_random_floats(&rng, S * Hkv * Dh, 1.0),
              *wo = test_random_floats(&rng, Hq * Dh * d, 1.0);
        float *fast = malloc((size_t)(Hq * L * S) * sizeof *fast), *ref = malloc((size_t)(Hq * L * S) * sizeof *ref);
        long double *z = malloc((size_t)(Hq * Dh) * sizeof *z);
        assert_non_null(fast);
        assert_non_null(ref);
        assert_non_null(z);
        for (int with_wo = 0; with_wo < 2; with_wo++) {
            CHECK(attn_value_weighted_norms(pattern, Hq, L, S, v, Hkv, Dh, with_wo ? wo : NULL, d, fast));
            CHECK(attn_value_weighted_norms_ref(pattern, Hq, L, S, v, Hkv, Dh, with_wo ? wo : NULL, d, ref));
            for (int64_t h = 0; h < Hq; h++)
                for (int64_t i = 0; i < L; i++)
                    for (int64_t j = 0; j < S; j++) {
                        for (int64_t k = 0; k < Hq * Dh; k++) z[k] = 0;
                        const long double alpha = pattern[(h * L + i) * S + j];
                        for (int64_t k = 0; k < Dh; k++) z[h * Dh + k] = alpha * v[(j * Hkv + h / group) * Dh + k];
                        long double ss = 0;
                        if (with_wo) {
                            for (int64_t c = 0; c < d; c++) {
                                long double o = 0;
                                for (int64_t k = 0; k < Hq * Dh; k++) o += z[k] * wo[k * d + c];
                                ss += o * o;
                            }
                        } else {
                            for (int64_t k = 0; k < Hq * Dh; k++) ss += z[k] * z[k];
                        }
                        const double want = (double)sqrtl(ss), tol = ANALYSIS_NORM_REL_FAIL * fmax(1.0, want);
                        expect_near("fast norm", fast[(h * L + i) * S + j], want, tol);
                        expect_near("reference norm", ref[(h * L + i) * S + j], want, tol);
                    }
        }
        free(pattern);
        free(v);
        free(wo);
        free(fast);
        free(ref);
        free(z);
    }
}

static void norms_bad_arguments(void **state) {
    (void)state;
    float x[64] = {0}, out[64];
    for (int p = 0; p < 2; p++) {
        assert_int_equal(both_paths[p](x, 3, 1, 1, x, 2, 1, NULL, 0, out), ATTN_ERR_SHAPE);
        assert_non_null(strstr(attn_last_error(), "not a multiple"));
        assert_int_equal(both_paths[p](NULL, 1, 1, 1, x, 1, 1, NULL, 0, out), ATTN_ERR_INVALID_ARGUMENT);
        assert_non_null(strstr(attn_last_error(), "pattern is NULL"));
        assert_int_equal(both_paths[p](x, 1, 1, 1, x, 1, 1, x, 0, out), ATTN_ERR_INVALID_ARGUMENT);
        assert_non_null(strstr(attn_last_error(), "positive"));
    }
}

/* ------------------------------------------------------ rollout and flow */

/* Two layers over two tokens, causal, by hand (residual 0.5):
 *   A_0 = [[1, 0], [0.5, 0.5]]  ->  Ahat_0 = [[1, 0], [0.25, 0.75]]
 *   A_1 = [[1, 0], [0.125, 0.875]]  ->  Ahat_1 = [[1, 0], [0.0625, 0.9375]]
 *   rollout[1] = Ahat_1 Ahat_0 = [[1, 0], [0.0625 + 0.9375 * 0.25, 0.9375 * 0.75]]
 *                              = [[1, 0], [0.296875, 0.703125]]
 * Flow into (2, 1): from token 0 along (0,0)->(1,0)->(2,1), min(1, 0.0625),
 * and (0,0)->(1,1)->(2,1), min(0.25, 0.9375): 0.3125; from token 1 only
 * (0,1)->(1,1)->(2,1), min(0.75, 0.9375): 0.75 (all binary fractions: the
 * float inputs are exact).  Layer 0 is given as two heads
 * whose mean is A_0 (the paper averages heads); head 1 alone is
 * [[1, 0], [0, 1]] in both layers: rollout and flow the identity's. */
static const float two_layers[2 * 2 * 4] = {1, 0, 1, 0, 1, 0, 0, 1, /* layer 0: heads 0, 1 */
                                             1, 0, 0.25f, 0.75f, 1, 0, 0, 1 /* layer 1 */};

static void rollout_by_hand(void **state) {
    (void)state;
    double r[2 * 4];
    CHECK(attn_attention_rollout(two_layers, 2, 2, 2, ATTN_ALL, 0.5, r));
    const double want[8] = {1, 0, 0.25, 0.75, 1, 0, 0.296875, 0.703125};
    for (int c = 0; c < 8; c++) expect_near("rollout by hand", r[c], want[c], ANALYSIS_ROLLOUT_ABS_FAIL);
    CHECK(attn_attention_rollout(two_layers, 2, 2, 2, 1, 0.5, r));
    const double identity[4] = {1, 0, 0, 1};
    for (int c = 0; c < 8; c++) expect_near("rollout of head 1", r[c], identity[c % 4], ANALYSIS_ROLLOUT_ABS_FAIL);
    /* residual 0: the bare product, A_1 A_0 = [[1, 0], [0.125 + 0.875 * 0.5, 0.875 * 0.5]]. */
    CHECK(attn_attention_rollout(two_layers, 2, 2, 2, ATTN_ALL, 0, r));
    expect_near("bare product", r[6], 0.5625, ANALYSIS_ROLLOUT_ABS_FAIL);
    expect_near("bare product", r[7], 0.4375, ANALYSIS_ROLLOUT_ABS_FAIL);
}

static void flow_by_hand(void **state) {
    (void)state;
    double f[2];
    CHECK(attn_attention_flow(two_layers, 2, 2, 2, ATTN_ALL, 0.5, -1, f));
    expect_near("flow from token 0", f[0], 0.3125, ANALYSIS_FLOW_ABS_FAIL);
    expect_near("flow from token 1", f[1], 0.75, ANALYSIS_FLOW_ABS_FAIL);
    CHECK(attn_attention_flow(two_layers, 2, 2, 2, ATTN_ALL, 0.5, 0, f));
    expect_near("causal: token 1 never reaches position 0", f[1], 0, ANALYSIS_FLOW_ABS_FAIL);
    expect_near("position 0 reads token 0 alone", f[0], 1, ANALYSIS_FLOW_ABS_FAIL);
}

/* Random rows (softmax of normals, causal or not) of `heads` heads. */
static void random_patterns(test_rng *rng, float *p, int64_t N, int64_t Hq, int64_t L, bool causal) {
    for (int64_t r = 0; r < N * Hq * L; r++) {
        const int64_t i = r % L;
        double sum = 0;
        for (int64_t j = 0; j < L; j++) {
            const double e = causal && j > i ? 0 : exp(2 * test_rng_normal(rng));
            p[r * L + j] = (float)e;
            sum += e;
        }
        for (int64_t j = 0; j < L; j++) p[r * L + j] = (float)(p[r * L + j] / sum);
    }
}

/* Rows of every layer's rollout sum to 1 (each Ahat is row-stochastic, so
 * are their products), for the mean and for each head. */
static void rollout_rows_sum_to_one(void **state) {
    (void)state;
    enum { N = 3, HQ = 4, L = 17 };
    test_rng rng;
    test_rng_seed(&rng, 2020);
    float *p = malloc(N * HQ * L * L * sizeof *p);
    double *r = malloc(N * L * L * sizeof *r);
    assert_non_null(p);
    assert_non_null(r);
    for (int causal = 0; causal < 2; causal++) {
        random_patterns(&rng, p, N, HQ, L, causal);
        for (int64_t head = ATTN_ALL; head < HQ; head++) {
            CHECK(attn_attention_rollout(p, N, HQ, L, head, 0.5, r));
            for (int64_t row = 0; row < N * L; row++) {
                double s = 0;
                for (int64_t j = 0; j < L; j++) s += r[row * L + j];
                expect_near("rollout row sum", s, 1, ANALYSIS_ROLLOUT_ABS_FAIL);
            }
        }
    }
    free(p);
    free(r);
}

/* Max-flow = min-cut: every cut of a small layered graph (N layers of L
 * tokens; the source and sink fixed, each other node on either side),
 * its capacity the sum of Ahat over edges from the source's side to the
 * sink's; the flow must equal the smallest.  Ahat is rebuilt here from the
 * definition, not taken from the library. */
static void flow_is_min_cut(void **state) {
    (void)state;
    enum { N = 3, HQ = 3, L = 3, NODES = (N + 1) * L };
    test_rng rng;
    test_rng_seed(&rng, 2020);
    float p[N * HQ * L * L];
    double ahat[N][L][L], f[L];
    for (int trial = 0; trial < 12; trial++) {
        const bool causal = trial % 2;
        const int64_t head = trial < 4 ? ATTN_ALL : (trial - 4) % HQ;
        const double residual = trial < 2 ? 0.5 : trial < 4 ? 0.25 : trial < 8 ? 0.5 : 0;
        random_patterns(&rng, p, N, HQ, L, causal);
        for (int l = 0; l < N; l++)
            for (int i = 0; i < L; i++) {
                double sum = 0;
                for (int j = 0; j < L; j++) {
                    double a = 0;
                    int count = 0;
                    for (int h = 0; h < HQ; h++)
                        if (head == ATTN_ALL || h == head) a += p[((l * HQ + h) * L + i) * L + j], count++;
                    ahat[l][i][j] = (1 - residual) * a / count + (i == j ? residual : 0);
                    sum += ahat[l][i][j];
                }
                for (int j = 0; j < L; j++) ahat[l][i][j] /= sum;
            }
        for (int64_t pos = 0; pos < L; pos++) {
            CHECK(attn_attention_flow(p, N, HQ, L, head, residual, pos, f));
            for (int src = 0; src < L; src++) {
                const int sink = N * L + (int)pos;
                double best = INFINITY;
                for (unsigned mask = 0; mask < 1u << NODES; mask++) {
                    if (!(mask >> src & 1) || (mask >> sink & 1)) continue; /* source side: the bits set */
                    double cut = 0;
                    for (int l = 0; l < N; l++)
                        for (int i = 0; i < L; i++)
                            for (int j = 0; j < L; j++)
                                if ((mask >> (l * L + j) & 1) && !(mask >> ((l + 1) * L + i) & 1))
                                    cut += ahat[l][i][j];
                    best = cut < best ? cut : best;
                }
                expect_near("flow = min cut", f[src], best, ANALYSIS_FLOW_ABS_FAIL);
            }
        }
    }
}

static void flow_bad_arguments(void **state) {
    (void)state;
    enum { N = ATTN_ATTENTION_FLOW_MAX_NODES };
    float *p = calloc(N, sizeof *p);
    double f[2];
    assert_non_null(p);
    assert_int_equal(attn_attention_flow(p, N, 1, 1, ATTN_ALL, 0.5, 0, f), ATTN_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "ATTN_ATTENTION_FLOW_MAX_NODES"));
    assert_int_equal(attn_attention_flow(p, 1, 1, 1, ATTN_ALL, 0.5, 0, f), ATTN_OK);
    assert_int_equal(attn_attention_flow(p, 1, 1, 1, ATTN_ALL, 0.5, 1, f), ATTN_ERR_INVALID_ARGUMENT);
    assert_int_equal(attn_attention_rollout(p, 1, 1, 1, 1, 0.5, f), ATTN_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "head 1"));
    assert_int_equal(attn_attention_rollout(p, 1, 1, 1, ATTN_ALL, 1.5, f), ATTN_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "residual"));
    free(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(exercise3),
        cmocka_unit_test(weights_and_norms_disagree),
        cmocka_unit_test(norms_against_module_formula),
        cmocka_unit_test(norms_bad_arguments),
        cmocka_unit_test(rollout_by_hand),
        cmocka_unit_test(flow_by_hand),
        cmocka_unit_test(rollout_rows_sum_to_one),
        cmocka_unit_test(flow_is_min_cut),
        cmocka_unit_test(flow_bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
