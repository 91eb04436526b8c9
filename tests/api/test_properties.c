/*
 * test_properties.c — properties the chapter states, checked on random
 * inputs through the library:
 *   - each visible row of weights sums to 1 (§3);
 *   - weights are exactly 0 where masked (§5);
 *   - without a mask, permuting key/value pairs together leaves the output
 *     unchanged: bare attention cannot see order (§8);
 *   - under a causal mask, changing inputs after position i leaves outputs at
 *     positions <= i bit-for-bit unchanged: no peeking (§5);
 *   - moving weight between keys with identical values leaves the output
 *     unchanged (exercise 3);
 *   - each output coordinate of a bare head lies within the values' range (§4).
 */
#include "oracle.h"
#include "tolerances.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int64_t L, S, H, D;
    float *q, *k, *v, *out, *w, *lse;
} problem;

static void problem_make(problem *p, test_rng *r, int64_t L, int64_t S, int64_t H, int64_t D) {
    p->L = L; p->S = S; p->H = H; p->D = D;
    p->q = malloc(sizeof(float) * (size_t)(L * H * D));
    p->k = malloc(sizeof(float) * (size_t)(S * H * D));
    p->v = malloc(sizeof(float) * (size_t)(S * H * D));
    p->out = malloc(sizeof(float) * (size_t)(L * H * D));
    p->w = malloc(sizeof(float) * (size_t)(H * L * S));
    p->lse = malloc(sizeof(float) * (size_t)(H * L));
    test_fill_normal(r, p->q, L * H * D, 1.5);
    test_fill_normal(r, p->k, S * H * D, 1.5);
    test_fill_normal(r, p->v, S * H * D, 1.0);
}

static void problem_run(problem *p, const attn_sdpa_options *opt) {
    attn_tensor q = attn_tensor_3d(p->q, p->L, p->H, p->D), k = attn_tensor_3d(p->k, p->S, p->H, p->D),
                v = attn_tensor_3d(p->v, p->S, p->H, p->D), o = attn_tensor_3d(p->out, p->L, p->H, p->D);
    attn_status st = attn_sdpa_forward(&q, &k, &v, opt, &o, p->w, p->lse);
    if (st) fail_msg("attn_sdpa_forward: %s", attn_last_error());
}

static void problem_free(problem *p) {
    free(p->q); free(p->k); free(p->v); free(p->out); free(p->w); free(p->lse);
}

static void rows_sum_to_one_and_masked_weights_are_zero(void **state) {
    (void)state;
    test_rng r;
    test_rng_seed(&r, 1);
    for (int kind = 0; kind < MASK_KIND_COUNT; kind++) {
        random_case rc;
        random_case_make(&rc, &r, 2, 13, 19, 2, 1, 5, 5, (enum mask_kind)kind);
        const oracle_case *c = &rc.c;
        int64_t n_w = c->B * c->Hq * c->L * c->S;
        float *w = malloc(sizeof(float) * (size_t)n_w), *out = malloc(sizeof(float) * (size_t)(c->B * c->L * c->Hq * c->Dv));
        double *ref_w = malloc(sizeof(double) * (size_t)n_w), *ref_out = malloc(sizeof(double) * (size_t)(c->B * c->L * c->Hq * c->Dv));
        attn_tensor q = attn_tensor_4d(rc.q, 2, 13, 2, 5), k = attn_tensor_4d(rc.k, 2, 19, 1, 5),
                    v = attn_tensor_4d(rc.v, 2, 19, 1, 5), o = attn_tensor_4d(out, 2, 13, 2, 5);
        attn_sdpa_options opt = random_case_options(&rc);
        assert_int_equal(attn_sdpa_forward(&q, &k, &v, &opt, &o, w, NULL), ATTN_OK);
        /* The oracle's weights tell which cells are hidden (exactly 0). */
        oracle_attention(c, rc.q, rc.k, rc.v, ref_out, ref_w, NULL);
        for (int64_t row = 0; row < c->B * c->Hq * c->L; row++) {
            double sum = 0;
            int visible = 0;
            for (int64_t j = 0; j < c->S; j++) {
                float x = w[row * c->S + j];
                assert_true(x >= 0.0f);
                if (ref_w[row * c->S + j] == 0.0 && x != 0.0f)
                    fail_msg("mask %s: hidden cell (%lld, %lld) has weight %g", mask_kind_names[kind],
                             (long long)row, (long long)j, (double)x);
                visible |= ref_w[row * c->S + j] != 0.0;
                sum += x;
            }
            if (visible && fabs(sum - 1.0) > PROP_ROW_SUM_FAIL)
                fail_msg("mask %s: row %lld sums to %.9f", mask_kind_names[kind], (long long)row, sum);
            if (!visible) assert_true(sum == 0.0);
        }
        free(w); free(out); free(ref_w); free(ref_out);
        random_case_free(&rc);
    }
}

static void permuting_keys_and_values_together_changes_nothing(void **state) {
    (void)state;
    test_rng r;
    test_rng_seed(&r, 2);
    problem p, perm;
    problem_make(&p, &r, 11, 23, 3, 8);
    problem_make(&perm, &r, 11, 23, 3, 8);
    memcpy(perm.q, p.q, sizeof(float) * 11 * 3 * 8);
    int64_t order[23];
    for (int j = 0; j < 23; j++) order[j] = j;
    for (int j = 22; j > 0; j--) { int64_t t = test_rng_range(&r, j + 1), x = order[j]; order[j] = order[t]; order[t] = x; }
    for (int j = 0; j < 23; j++) {
        memcpy(perm.k + j * 24, p.k + order[j] * 24, sizeof(float) * 24);
        memcpy(perm.v + j * 24, p.v + order[j] * 24, sizeof(float) * 24);
    }
    problem_run(&p, NULL);
    problem_run(&perm, NULL);
    for (int e = 0; e < 11 * 3 * 8; e++) assert_float_equal(p.out[e], perm.out[e], PROP_PERMUTE_REL_FAIL * 4);
    /* The weights move with their keys. */
    for (int h = 0; h < 3; h++)
        for (int i = 0; i < 11; i++)
            for (int j = 0; j < 23; j++)
                assert_float_equal(perm.w[(h * 11 + i) * 23 + j], p.w[(h * 11 + i) * 23 + order[j]],
                                   PROP_PERMUTE_WEIGHT_ABS_FAIL);
    problem_free(&p);
    problem_free(&perm);
}

static void causal_outputs_do_not_peek(void **state) {
    (void)state;
    test_rng r;
    test_rng_seed(&r, 3);
    for (int align = 0; align < 2; align++) {
        problem a, b;
        problem_make(&a, &r, 17, 17, 2, 6);
        problem_make(&b, &r, 17, 17, 2, 6);
        memcpy(b.q, a.q, sizeof(float) * 17 * 12);
        memcpy(b.k, a.k, sizeof(float) * 17 * 12);
        memcpy(b.v, a.v, sizeof(float) * 17 * 12);
        const int64_t i = 8; /* change every input after position i */
        test_fill_normal(&r, b.q + (i + 1) * 12, (17 - i - 1) * 12, 3.0);
        test_fill_normal(&r, b.k + (i + 1) * 12, (17 - i - 1) * 12, 3.0);
        test_fill_normal(&r, b.v + (i + 1) * 12, (17 - i - 1) * 12, 3.0);
        attn_sdpa_options opt = {.struct_size = sizeof(attn_sdpa_options), .causal = 1, .align = align ? ATTN_ALIGN_LOWER_RIGHT : ATTN_ALIGN_TOP_LEFT};
        problem_run(&a, &opt);
        problem_run(&b, &opt);
        assert_memory_equal(a.out, b.out, sizeof(float) * (size_t)((i + 1) * 12));
        /* ...and the change is visible after i, so the test can fail. */
        assert_memory_not_equal(a.out + (i + 1) * 12, b.out + (i + 1) * 12, sizeof(float) * 12);
        problem_free(&a);
        problem_free(&b);
    }
}

/* Exercise 3: v1 = v2, so moving weight between keys 1 and 2 (through the
 * bias) changes the map but not the output. */
static void weight_moves_between_identical_values(void **state) {
    (void)state;
    test_rng r;
    test_rng_seed(&r, 4);
    problem p;
    problem_make(&p, &r, 1, 5, 1, 4);
    memcpy(p.v + 4, p.v, sizeof(float) * 4); /* v[1] = v[0] */
    /* With q = 0 every score is 0, so a bias of log(w) makes softmax return
     * exactly w: the pair (keys 0 and 1) keeps a total of 0.6 while its split
     * moves from 0.2/0.8 to 0.7/0.3 of it. */
    memset(p.q, 0, sizeof(float) * 4);
    attn_sdpa_options opt = {.struct_size = sizeof(attn_sdpa_options), .bias_shape = {1, 1, 1, 5}};
    const float pair_splits[3] = {0.2f, 0.5f, 0.7f};
    float first[4];
    for (int s = 0; s < 3; s++) {
        float bias[5] = {logf(0.6f * pair_splits[s]), logf(0.6f * (1 - pair_splits[s])), logf(0.1f), logf(0.2f), logf(0.1f)};
        opt.bias = bias;
        problem_run(&p, &opt);
        assert_float_equal(p.w[0], 0.6f * pair_splits[s], PROP_BIAS_WEIGHT_ABS_FAIL);
        if (s == 0) memcpy(first, p.out, sizeof first);
        for (int d = 0; d < 4; d++) assert_float_equal(p.out[d], first[d], PROP_SPLIT_OUT_ABS_FAIL);
    }
    problem_free(&p);
}

static void outputs_lie_within_the_values_range(void **state) {
    (void)state;
    test_rng r;
    test_rng_seed(&r, 5);
    for (int kind = 0; kind < MASK_KIND_COUNT; kind++) {
        random_case rc;
        random_case_make(&rc, &r, 1, 9, 14, 1, 1, 3, 4, (enum mask_kind)kind);
        float out[9 * 4];
        attn_tensor q = attn_tensor_4d(rc.q, 1, 9, 1, 3), k = attn_tensor_4d(rc.k, 1, 14, 1, 3),
                    v = attn_tensor_4d(rc.v, 1, 14, 1, 4), o = attn_tensor_4d(out, 1, 9, 1, 4);
        attn_sdpa_options opt = random_case_options(&rc);
        assert_int_equal(attn_sdpa_forward(&q, &k, &v, &opt, &o, NULL, NULL), ATTN_OK);
        for (int d = 0; d < 4; d++) {
            float lo = INFINITY, hi = -INFINITY;
            for (int j = 0; j < 14; j++) {
                lo = fminf(lo, rc.v[j * 4 + d]);
                hi = fmaxf(hi, rc.v[j * 4 + d]);
            }
            for (int i = 0; i < 9; i++) {
                float x = out[i * 4 + d];
                /* A fully masked row is 0, which need not lie in the range. */
                if (x == 0.0f) continue;
                assert_true(x >= lo - PROP_RANGE_ABS_FAIL && x <= hi + PROP_RANGE_ABS_FAIL);
            }
        }
        random_case_free(&rc);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(rows_sum_to_one_and_masked_weights_are_zero),
        cmocka_unit_test(permuting_keys_and_values_together_changes_nothing),
        cmocka_unit_test(causal_outputs_do_not_peek),
        cmocka_unit_test(weight_moves_between_identical_values),
        cmocka_unit_test(outputs_lie_within_the_values_range),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
