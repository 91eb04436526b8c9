/*
 * test_flops.c — attn_sdpa_flops, the one count of visible pairs that
 * `attn bench`, `attn ring` and the benchmarks report FLOPs with, against
 * counts made elsewhere: closed forms for the full and causal masks, and
 * the independent oracle's weights (a pair is visible exactly when the
 * oracle gives it a nonzero weight) for every mask kind.
 */
#include "oracle.h"

#include <math.h>
#include <stdlib.h>

/* 2 (D + Dv) FLOPs per visible (batch, head, query, key), DESIGN.md §5. */
static double flops_of(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                       const attn_sdpa_options *opt) {
    double flops = -1.0;
    attn_status st = attn_sdpa_flops(q, k, v, opt, &flops);
    if (st) fail_msg("attn_sdpa_flops: %s", attn_last_error());
    return flops;
}

static void closed_forms(void **state) {
    (void)state;
    /* Shapes only: the data may be NULL. */
    const int64_t B = 2, L = 37, S = 37, Hq = 4, Hkv = 2, D = 8, Dv = 6;
    attn_tensor q = attn_tensor_4d(NULL, B, L, Hq, D), k = attn_tensor_4d(NULL, B, S, Hkv, D),
                v = attn_tensor_4d(NULL, B, S, Hkv, Dv);
    attn_sdpa_options opt = ATTN_SDPA_OPTIONS_INIT;
    const double per_pair = 2.0 * (double)(D + Dv) * (double)(B * Hq);
    assert_true(flops_of(&q, &k, &v, &opt) == per_pair * (double)(L * S));
    opt.causal = 1;
    assert_true(flops_of(&q, &k, &v, &opt) == per_pair * (double)(L * (L + 1) / 2));
    /* One decode step against S keys, lower-right: the query sees all of them. */
    attn_tensor q1 = attn_tensor_4d(NULL, B, 1, Hq, D);
    opt.align = ATTN_ALIGN_LOWER_RIGHT;
    assert_true(flops_of(&q1, &k, &v, &opt) == per_pair * (double)S);
    /* ... and top-left, only the first key (the mistake issue 15 warns of). */
    opt.align = ATTN_ALIGN_TOP_LEFT;
    assert_true(flops_of(&q1, &k, &v, &opt) == per_pair * 1.0);
    assert_int_equal(attn_sdpa_flops(&q, &k, &v, &opt, NULL), ATTN_ERR_INVALID_ARGUMENT);
    assert_int_equal(attn_sdpa_flops(&q, &k, NULL, &opt, &(double){0}), ATTN_ERR_INVALID_ARGUMENT);
}

/* Every mask kind on odd shapes: the count equals the number of nonzero
 * weights of the oracle, which builds visibility from the rules' own
 * formulas as a dense table. */
static void every_mask_kind_against_the_oracle(void **state) {
    (void)state;
    test_rng r;
    test_rng_seed(&r, 4242);
    static const int64_t shapes[][7] = {{1, 17, 17, 2, 1, 5, 5}, {3, 7, 23, 4, 2, 3, 6}, {2, 29, 11, 2, 2, 4, 1}};
    for (int kind = 0; kind < MASK_KIND_COUNT; kind++)
        for (size_t sh = 0; sh < sizeof shapes / sizeof shapes[0]; sh++)
            for (int rep = 0; rep < 3; rep++) {
                const int64_t *s = shapes[sh];
                random_case rc;
                random_case_make(&rc, &r, s[0], s[1], s[2], s[3], s[4], s[5], s[6], (enum mask_kind)kind);
                const oracle_case *c = &rc.c;
                const int64_t cells = c->B * c->Hq * c->L * c->S;
                double *out = malloc(sizeof(double) * (size_t)(c->B * c->L * c->Hq * c->Dv));
                double *w = malloc(sizeof(double) * (size_t)cells);
                oracle_attention(c, rc.q, rc.k, rc.v, out, w, NULL);
                double visible = 0;
                for (int64_t e = 0; e < cells; e++) visible += w[e] > 0.0;
                attn_tensor q = attn_tensor_4d(rc.q, c->B, c->L, c->Hq, c->D);
                attn_tensor k = attn_tensor_4d(rc.k, c->B, c->S, c->Hkv, c->D);
                attn_tensor v = attn_tensor_4d(rc.v, c->B, c->S, c->Hkv, c->Dv);
                attn_sdpa_options opt = random_case_options(&rc);
                const double want = 2.0 * (double)(c->D + c->Dv) * visible, got = flops_of(&q, &k, &v, &opt);
                if (got != want)
                    fail_msg("%s, shape %zu: %g FLOPs, the oracle's weights give %g", mask_kind_names[kind], sh,
                             got, want);
                free(out);
                free(w);
                random_case_free(&rc);
            }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(closed_forms),
        cmocka_unit_test(every_mask_kind_against_the_oracle),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
