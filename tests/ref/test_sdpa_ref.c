/*
 * test_sdpa_ref.c — the reference kernel against the independent oracle
 * (tests/oracle.c) on a randomized sweep of odd sizes, every mask kind,
 * grouped-query attention, cross-attention and Dv != D; plus the cases that
 * are easy to get wrong: fully masked rows, broadcasting masks, strides.
 */
#include "oracle.h"
#include "tolerances.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* Runs one case through attn_sdpa_forward (reference kernel) and the oracle. */
static void check_case(random_case *rc, const char *label) {
    const oracle_case *c = &rc->c;
    int64_t n_out = c->B * c->L * c->Hq * c->Dv, n_w = c->B * c->Hq * c->L * c->S, n_lse = c->B * c->Hq * c->L;
    double *want_out = malloc(sizeof(double) * (size_t)n_out), *want_w = malloc(sizeof(double) * (size_t)n_w),
           *want_lse = malloc(sizeof(double) * (size_t)n_lse);
    float *out = malloc(sizeof(float) * (size_t)n_out), *w = malloc(sizeof(float) * (size_t)n_w),
          *lse = malloc(sizeof(float) * (size_t)n_lse);
    oracle_attention(c, rc->q, rc->k, rc->v, want_out, want_w, want_lse);

    attn_tensor q = attn_tensor_4d(rc->q, c->B, c->L, c->Hq, c->D);
    attn_tensor k = attn_tensor_4d(rc->k, c->B, c->S, c->Hkv, c->D);
    attn_tensor v = attn_tensor_4d(rc->v, c->B, c->S, c->Hkv, c->Dv);
    attn_tensor o = attn_tensor_4d(out, c->B, c->L, c->Hq, c->Dv);
    attn_sdpa_options opt = random_case_options(rc);
    opt.kernel = ATTN_KERNEL_REF;
    attn_status st = attn_sdpa_forward(&q, &k, &v, &opt, &o, w, lse);
    if (st != ATTN_OK) fail_msg("%s: status %d: %s", label, st, attn_last_error());

    double scale = max_abs(want_out, n_out) > 1 ? max_abs(want_out, n_out) : 1;
    double d_out = max_abs_diff(want_out, out, n_out), d_w = max_abs_diff(want_w, w, n_w),
           d_lse = max_abs_diff(want_lse, lse, n_lse);
    if (d_out > REF_OUT_REL_FAIL * scale || d_w > REF_WEIGHT_ABS_FAIL || d_lse > REF_LSE_ABS_FAIL)
        fail_msg("%s: max diff out %.3g (max|O| %.3g), weights %.3g, lse %.3g", label, d_out, scale, d_w, d_lse);
    for (int64_t e = 0; e < n_out; e++)
        if (isnan(out[e])) fail_msg("%s: NaN in output at %lld", label, (long long)e);
    free(want_out); free(want_w); free(want_lse); free(out); free(w); free(lse);
}

static void sweep_odd_sizes(void **state) {
    (void)state;
    static const int64_t lens[] = {1, 2, 3, 17, 113};
    static const int64_t widths[] = {1, 2, 7, 64};
    static const int64_t batches[] = {1, 3};
    static const int64_t ratios[] = {1, 2, 4};
    test_rng r;
    test_rng_seed(&r, 2026);
    int cases = 0;
    for (int li = 0; li < 5; li++)
        for (int si = 0; si < 5; si++)
            for (int di = 0; di < 4; di++)
                for (int bi = 0; bi < 2; bi++)
                    for (int gi = 0; gi < 3; gi++) {
                        int64_t L = lens[li], S = lens[si], D = widths[di];
                        int64_t Hkv = 1 + test_rng_range(&r, 2), Hq = Hkv * ratios[gi];
                        /* Dv differs from D in about half the cases. */
                        int64_t Dv = test_rng_range(&r, 2) ? D : 1 + test_rng_range(&r, 9);
                        enum mask_kind kind = (enum mask_kind)((li * 5 + si + di + gi * 7 + bi * 3) % MASK_KIND_COUNT);
                        random_case rc;
                        random_case_make(&rc, &r, batches[bi], L, S, Hq, Hkv, D, Dv, kind);
                        char label[160];
                        snprintf(label, sizeof label, "B=%lld L=%lld S=%lld Hq=%lld Hkv=%lld D=%lld Dv=%lld mask=%s",
                                 (long long)batches[bi], (long long)L, (long long)S, (long long)Hq,
                                 (long long)Hkv, (long long)D, (long long)Dv, mask_kind_names[kind]);
                        check_case(&rc, label);
                        random_case_free(&rc);
                        cases++;
                    }
    print_message("checked %d sweep cases\n", cases);
}

/* Every mask kind on several shapes, including cross-attention (L != S). */
static void every_mask_kind(void **state) {
    (void)state;
    test_rng r;
    test_rng_seed(&r, 7);
    static const int64_t shapes[][2] = {{17, 17}, {5, 31}, {31, 5}, {1, 113}, {113, 1}};
    for (int kind = 0; kind < MASK_KIND_COUNT; kind++)
        for (int s = 0; s < 5; s++)
            for (int rep = 0; rep < 3; rep++) {
                random_case rc;
                random_case_make(&rc, &r, 3, shapes[s][0], shapes[s][1], 4, 2, 7, 5, (enum mask_kind)kind);
                char label[96];
                snprintf(label, sizeof label, "mask=%s L=%lld S=%lld rep=%d", mask_kind_names[kind],
                         (long long)shapes[s][0], (long long)shapes[s][1], rep);
                check_case(&rc, label);
                random_case_free(&rc);
            }
}

/* Rows that see no key: output 0, weights 0, lse -inf, never NaN. */
static void fully_masked_rows(void **state) {
    (void)state;
    test_rng r;
    test_rng_seed(&r, 11);
    /* Lower-right causal with L > S hides every key from the first L - S rows. */
    random_case rc;
    random_case_make(&rc, &r, 1, 9, 4, 2, 1, 3, 3, MASK_CAUSAL_LOWER_RIGHT);
    rc.c.scale = 0;
    float out[9 * 2 * 3], w[2 * 9 * 4], lse[2 * 9];
    attn_tensor q = attn_tensor_4d(rc.q, 1, 9, 2, 3), k = attn_tensor_4d(rc.k, 1, 4, 1, 3),
                v = attn_tensor_4d(rc.v, 1, 4, 1, 3), o = attn_tensor_4d(out, 1, 9, 2, 3);
    attn_sdpa_options opt = random_case_options(&rc);
    assert_int_equal(attn_sdpa_forward(&q, &k, &v, &opt, &o, w, lse), ATTN_OK);
    for (int h = 0; h < 2; h++)
        for (int i = 0; i < 9; i++) {
            int hidden = i < 9 - 4;
            for (int d = 0; d < 3; d++)
                if (hidden) assert_true(out[(i * 2 + h) * 3 + d] == 0.0f);
            if (hidden) {
                assert_true(isinf(lse[h * 9 + i]) && lse[h * 9 + i] < 0);
                for (int j = 0; j < 4; j++) assert_true(w[(h * 9 + i) * 4 + j] == 0.0f);
            } else {
                assert_true(isfinite(lse[h * 9 + i]));
            }
        }
    check_case(&rc, "lower-right L > S");
    random_case_free(&rc);

    /* Key length 0, an all-zero mask row, an all -inf bias row. */
    for (int kind = 0; kind < 3; kind++) {
        random_case_make(&rc, &r, 2, 3, 5, 1, 1, 4, 2,
                         kind == 0 ? MASK_KEY_LENGTHS : kind == 1 ? MASK_BOOL_2D : MASK_BIAS);
        if (kind == 0) rc.key_lengths[1] = 0;
        if (kind == 1) for (int j = 0; j < 5; j++) rc.mask[1 * 5 + j] = 0;
        if (kind == 2) for (int j = 0; j < 5; j++) rc.bias[1 * 5 + j] = -INFINITY;
        check_case(&rc, kind == 0 ? "key length 0" : kind == 1 ? "all-zero mask row" : "all -inf bias row");
        random_case_free(&rc);
    }
}

/* Non-contiguous views: q, k, v as slices of wider buffers. */
static void strided_views(void **state) {
    (void)state;
    test_rng r;
    test_rng_seed(&r, 5);
    random_case rc;
    random_case_make(&rc, &r, 2, 6, 7, 2, 1, 3, 3, MASK_CAUSAL);
    /* Copy q into a buffer with padding between heads and rows. */
    const int64_t pad = 5, hs = 3 + pad, ls = 2 * hs + 1, bs = 6 * ls + 2;
    float *wide = calloc((size_t)(2 * bs), sizeof(float));
    for (int64_t b = 0; b < 2; b++)
        for (int64_t i = 0; i < 6; i++)
            for (int64_t h = 0; h < 2; h++)
                for (int64_t d = 0; d < 3; d++) wide[b * bs + i * ls + h * hs + d] = rc.q[((b * 6 + i) * 2 + h) * 3 + d];
    attn_tensor q = {wide, ATTN_F32, {2, 6, 2, 3}, {bs, ls, hs, 1}};
    attn_tensor q_dense = attn_tensor_4d(rc.q, 2, 6, 2, 3);
    attn_tensor k = attn_tensor_4d(rc.k, 2, 7, 1, 3), v = attn_tensor_4d(rc.v, 2, 7, 1, 3);
    float a[2 * 6 * 2 * 3], b_[2 * 6 * 2 * 3];
    attn_tensor oa = attn_tensor_4d(a, 2, 6, 2, 3), ob = attn_tensor_4d(b_, 2, 6, 2, 3);
    attn_sdpa_options opt = random_case_options(&rc);
    assert_int_equal(attn_sdpa_forward(&q, &k, &v, &opt, &oa, NULL, NULL), ATTN_OK);
    assert_int_equal(attn_sdpa_forward(&q_dense, &k, &v, &opt, &ob, NULL, NULL), ATTN_OK);
    assert_memory_equal(a, b_, sizeof a);
    free(wide);
    random_case_free(&rc);
}

/* Position offsets: computing query chunks (query_start) gives the whole
 * call's rows (the same bits for the reference kernel, which computes each
 * row alone; within rounding for the fast kernel, whose decode path may take
 * a short chunk), and key halves (key_start) merged by their lse give the
 * whole call's output: the rules are evaluated at global positions. */
static void check_chunks(attn_kernel kernel) {
    test_rng r;
    test_rng_seed(&r, 17);
    static const enum mask_kind kinds[] = {MASK_NONE, MASK_CAUSAL, MASK_CAUSAL_LOWER_RIGHT, MASK_WINDOW,
                                           MASK_WINDOW_CAUSAL, MASK_KEY_LENGTHS};
    for (size_t t = 0; t < sizeof kinds / sizeof kinds[0]; t++)
        for (int rep = 0; rep < 4; rep++) {
            const int64_t B = 2, L = 5 + test_rng_range(&r, 20), S = 5 + test_rng_range(&r, 20), H = 2, D = 4;
            random_case rc;
            random_case_make(&rc, &r, B, L, S, H, 1, D, D, kinds[t]);
            attn_sdpa_options opt = random_case_options(&rc);
            opt.kernel = kernel;
            float *whole = malloc(sizeof(float) * (size_t)(B * L * H * D)), *whole_lse = malloc(sizeof(float) * (size_t)(B * H * L));
            attn_tensor q = attn_tensor_4d(rc.q, B, L, H, D), k = attn_tensor_4d(rc.k, B, S, 1, D),
                        v = attn_tensor_4d(rc.v, B, S, 1, D), o = attn_tensor_4d(whole, B, L, H, D);
            assert_int_equal(attn_sdpa_forward(&q, &k, &v, &opt, &o, NULL, whole_lse), ATTN_OK);

            /* Query chunks: a view of rows [a, b) of q and of the output. */
            const int64_t a = 1 + test_rng_range(&r, L - 1), b = L;
            float *part = malloc(sizeof(float) * (size_t)(B * L * H * D));
            attn_tensor qa = q, oa = attn_tensor_4d(part, B, L, H, D);
            qa.data = rc.q + a * H * D; qa.shape[1] = b - a;
            oa.data = part + a * H * D; oa.shape[1] = b - a;
            attn_sdpa_options chunk = opt;
            chunk.query_start = a;
            chunk.total_len_q = L;
            assert_int_equal(attn_sdpa_forward(&qa, &k, &v, &chunk, &oa, NULL, NULL), ATTN_OK);
            for (int64_t bb = 0; bb < B; bb++) {
                const float *got = part + (bb * L + a) * H * D, *want = whole + (bb * L + a) * H * D;
                if (kernel == ATTN_KERNEL_REF)
                    assert_memory_equal(got, want, sizeof(float) * (size_t)((b - a) * H * D));
                else
                    for (int64_t e = 0; e < (b - a) * H * D; e++)
                        assert_float_equal(got[e], want[e], CHUNK_OUT_ABS_FAIL);
            }

            /* Key halves merged by lse. */
            const int64_t split = 1 + test_rng_range(&r, S - 1);
            float *o1 = malloc(sizeof(float) * (size_t)(B * L * H * D)), *o2 = malloc(sizeof(float) * (size_t)(B * L * H * D));
            float *l1 = malloc(sizeof(float) * (size_t)(B * H * L)), *l2 = malloc(sizeof(float) * (size_t)(B * H * L));
            attn_tensor k1 = k, v1 = v, k2 = k, v2 = v, t1 = attn_tensor_4d(o1, B, L, H, D), t2 = attn_tensor_4d(o2, B, L, H, D);
            k1.shape[1] = v1.shape[1] = split;
            k2.shape[1] = v2.shape[1] = S - split;
            k2.data = rc.k + split * D; v2.data = rc.v + split * D;
            attn_sdpa_options h1 = opt, h2 = opt;
            h1.total_len_kv = h2.total_len_kv = S;
            h2.key_start = split;
            assert_int_equal(attn_sdpa_forward(&q, &k1, &v1, &h1, &t1, NULL, l1), ATTN_OK);
            assert_int_equal(attn_sdpa_forward(&q, &k2, &v2, &h2, &t2, NULL, l2), ATTN_OK);
            for (int64_t bb = 0; bb < B; bb++)
                for (int64_t i = 0; i < L; i++)
                    for (int64_t h = 0; h < H; h++) {
                        float la = l1[(bb * H + h) * L + i], lb = l2[(bb * H + h) * L + i], lw = whole_lse[(bb * H + h) * L + i];
                        double m = fmax(la, lb);
                        double wa = isinf(la) ? 0 : exp(la - m), wb = isinf(lb) ? 0 : exp(lb - m);
                        if (isinf(lw)) { assert_true(isinf(la) && isinf(lb)); continue; }
                        assert_float_equal(m + log(wa + wb), lw, KEY_SPLIT_LSE_ABS_FAIL);
                        for (int64_t d = 0; d < D; d++) {
                            int64_t e = ((bb * L + i) * H + h) * D + d;
                            double merged = (wa * o1[e] + wb * o2[e]) / (wa + wb);
                            assert_float_equal(merged, whole[e], KEY_SPLIT_OUT_ABS_FAIL);
                        }
                    }
            free(whole); free(whole_lse); free(part); free(o1); free(o2); free(l1); free(l2);
            random_case_free(&rc);
        }
}

static void chunks_match_the_whole_sequence(void **state) {
    (void)state;
    check_chunks(ATTN_KERNEL_REF);
    check_chunks(ATTN_KERNEL_AUTO);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(sweep_odd_sizes),
        cmocka_unit_test(every_mask_kind),
        cmocka_unit_test(fully_masked_rows),
        cmocka_unit_test(strided_views),
        cmocka_unit_test(chunks_match_the_whole_sequence),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
