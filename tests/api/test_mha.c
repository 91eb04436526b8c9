/*
 * test_mha.c — multi-head attention as a module against an independent
 * composition in the test: projections written as plain long-double loops,
 * the oracle's attention, concatenation, output projection.  Self- and
 * cross-attention, group ratios 1, 2, 4, with and without biases and W_O,
 * under several mask kinds.
 */
#include "oracle.h"
#include "tolerances.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static void check_module(test_rng *r, int64_t B, int64_t L, int64_t S, int cross, int64_t Hq, int64_t Hkv,
                         int64_t D, int64_t Dv, int with_bias, int with_wo, enum mask_kind kind) {
    const int64_t dm = 6, dc = cross ? 5 : dm, dout = with_wo ? 3 : Hq * Dv;
    if (!cross) S = L;
    float *x = test_random_floats(r, B * L * dm, 1), *ctx = cross ? test_random_floats(r, B * S * dc, 1) : x;
    float *wq = test_random_floats(r, dm * Hq * D, 0.5), *wk = test_random_floats(r, dc * Hkv * D, 0.5),
          *wv = test_random_floats(r, dc * Hkv * Dv, 0.5), *wo = with_wo ? test_random_floats(r, Hq * Dv * dout, 0.5) : NULL;
    float *bq = with_bias ? test_random_floats(r, Hq * D, 0.3) : NULL, *bk = with_bias ? test_random_floats(r, Hkv * D, 0.3) : NULL,
          *bv = with_bias ? test_random_floats(r, Hkv * Dv, 0.3) : NULL, *bo = with_bias ? test_random_floats(r, dout, 0.3) : NULL;

    /* Expected: project, attend (oracle), concatenate, project. */
    random_case rc;
    random_case_make(&rc, r, B, L, S, Hq, Hkv, D, Dv, kind); /* only its masks are used */
    oracle_project(x, B * L, dm, wq, bq, Hq * D, rc.q);
    oracle_project(ctx, B * S, dc, wk, bk, Hkv * D, rc.k);
    oracle_project(ctx, B * S, dc, wv, bv, Hkv * Dv, rc.v);
    double *z = malloc(sizeof(double) * (size_t)(B * L * Hq * Dv));
    double *want_w = malloc(sizeof(double) * (size_t)(B * Hq * L * S));
    oracle_attention(&rc.c, rc.q, rc.k, rc.v, z, want_w, NULL);
    double *want = malloc(sizeof(double) * (size_t)(B * L * dout));
    oracle_output_projection(z, B * L, Hq * Dv, wo, bo, dout, want);

    attn_mha m = {.struct_size = sizeof(attn_mha), .d_model = dm, .d_context = dc, .heads = Hq, .kv_heads = Hkv, .head_dim = D,
                  .value_dim = Dv, .d_out = dout, .wq = wq, .wk = wk, .wv = wv, .wo = wo,
                  .bq = bq, .bk = bk, .bv = bv, .bo = bo};
    float *out = malloc(sizeof(float) * (size_t)(B * L * dout)), *w = malloc(sizeof(float) * (size_t)(B * Hq * L * S));
    attn_sdpa_options opt = random_case_options(&rc);
    attn_status st = attn_mha_forward(&m, x, B, L, cross ? ctx : NULL, S, &opt, out, w, NULL);
    char label[200];
    snprintf(label, sizeof label, "B=%lld L=%lld S=%lld cross=%d Hq=%lld Hkv=%lld D=%lld Dv=%lld bias=%d wo=%d mask=%s",
             (long long)B, (long long)L, (long long)S, cross, (long long)Hq, (long long)Hkv, (long long)D,
             (long long)Dv, with_bias, with_wo, mask_kind_names[kind]);
    if (st) fail_msg("%s: %s", label, attn_last_error());
    double scale = fmax(1.0, max_abs(want, B * L * dout));
    double d_out = max_abs_diff(want, out, B * L * dout), d_w = max_abs_diff(want_w, w, B * Hq * L * S);
    if (d_out > MHA_OUT_REL_FAIL * scale || d_w > MHA_WEIGHT_ABS_FAIL)
        fail_msg("%s: out diff %.3g, weights diff %.3g", label, d_out, d_w);

    free(x); if (cross) free(ctx);
    free(wq); free(wk); free(wv); free(wo); free(bq); free(bk); free(bv); free(bo);
    free(z); free(want_w); free(want); free(out); free(w);
    random_case_free(&rc);
}

static void module_sweep(void **state) {
    (void)state;
    test_rng r;
    test_rng_seed(&r, 99);
    static const int64_t ratios[] = {1, 2, 4};
    int n = 0;
    for (int cross = 0; cross < 2; cross++)
        for (int g = 0; g < 3; g++)
            for (int with_bias = 0; with_bias < 2; with_bias++)
                for (int with_wo = 0; with_wo < 2; with_wo++) {
                    int64_t Hkv = 1 + (n % 2), Hq = Hkv * ratios[g];
                    int64_t D = 1 + test_rng_range(&r, 7), Dv = (n % 3) ? D : 1 + test_rng_range(&r, 5);
                    enum mask_kind kind = (enum mask_kind)(n % MASK_KIND_COUNT);
                    check_module(&r, 1 + 2 * (n % 2), 1 + test_rng_range(&r, 17), 1 + test_rng_range(&r, 17), cross,
                                 Hq, Hkv, D, Dv, with_bias, with_wo, kind);
                    n++;
                }
}

/* The chapter's multi-head shape walk: two heads of 3x2 concatenate to 3x4,
 * and W_O [4, 2] brings the output back to 3x2. */
static void chapter_shape_walk(void **state) {
    (void)state;
    float x[6] = {1, 0, 0, 1, 1, 1};
    float wq[2 * 4] = {1, 0, 0.5f, 0, 0, 1, 0, 0.5f}, wk[2 * 4] = {1, 0, 1, 0, 0, 1, 0, 1},
          wv[2 * 4] = {2, 0, 1, 0, 0, 1, 0, 1}, wo[4 * 2] = {1, 0, 0, 1, 1, 0, 0, 1};
    float concat[3 * 4], out[3 * 2];
    attn_mha m = {.struct_size = sizeof(attn_mha), .d_model = 2, .heads = 2, .head_dim = 2, .d_out = 4, .wq = wq, .wk = wk, .wv = wv};
    assert_int_equal(attn_mha_forward(&m, x, 1, 3, NULL, 0, NULL, concat, NULL, NULL), ATTN_OK);
    m.wo = wo;
    m.d_out = 2;
    assert_int_equal(attn_mha_forward(&m, x, 1, 3, NULL, 0, NULL, out, NULL, NULL), ATTN_OK);
    /* W_O here adds the two heads' outputs: out = head0 + head1. */
    for (int i = 0; i < 3; i++)
        for (int d = 0; d < 2; d++)
            assert_float_equal(out[i * 2 + d], concat[i * 4 + d] + concat[i * 4 + 2 + d], CHAPTER_HEAD_SUM_ABS_FAIL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(module_sweep),
        cmocka_unit_test(chapter_shape_walk),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
