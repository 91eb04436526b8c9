/*
 * test_flash.c — the flash kernel against the reference kernel: a randomized
 * sweep of odd sizes (S >> L, L > S with lower-right causal, every mask
 * kind, GQA ratios 1..8, Dv != D, custom scales, extreme logits) on every
 * instruction set this CPU has; bit-identical results for 1, 2 and 3
 * threads, prefill and decode (split) shapes alike; the vector exp2 and the
 * finiteness check; the ISA registry's controls; and memory that does not grow with the sequence.
 *
 * Shape legend: q [B, L, Hq, D]  k [B, S, Hkv, D]  v [B, S, Hkv, Dv]
 *               out [B, L, Hq, Dv]  weights [B, Hq, L, S]  lse [B, Hq, L]
 */
#include "oracle.h"
#include "tolerances.h"
#include "flash/flash.h"
#include "isa_list.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* The outputs of one call. */
typedef struct result {
    float *out, *w, *lse;
    int64_t n_out, n_w, n_lse;
} result;

static void result_alloc(result *res, const oracle_case *c) {
    res->n_out = c->B * c->L * c->Hq * c->Dv;
    res->n_w = c->B * c->Hq * c->L * c->S;
    res->n_lse = c->B * c->Hq * c->L;
    res->out = malloc(sizeof(float) * (size_t)res->n_out);
    res->w = malloc(sizeof(float) * (size_t)res->n_w);
    res->lse = malloc(sizeof(float) * (size_t)res->n_lse);
    /* NaN everywhere first: anything a kernel forgets to write shows. */
    for (int64_t e = 0; e < res->n_out; e++) res->out[e] = NAN;
    for (int64_t e = 0; e < res->n_w; e++) res->w[e] = NAN;
    for (int64_t e = 0; e < res->n_lse; e++) res->lse[e] = NAN;
}

static void result_free(result *res) {
    free(res->out);
    free(res->w);
    free(res->lse);
}

static void run(const random_case *rc, attn_kernel kernel, int threads, bool with_weights,
                result *res) {
    attn_status st = random_case_forward(rc, kernel, threads, res->out, with_weights ? res->w : NULL,
                                         with_weights ? res->lse : NULL);
    if (st != ATTN_OK) fail_msg("status %d: %s", st, attn_last_error());
}

/* max |a - b| over n floats; equal infinities agree, any other non-finite
 * mismatch (or a NaN) is infinite. */
static double max_diff(const float *a, const float *b, int64_t n) {
    double worst = 0;
    for (int64_t e = 0; e < n; e++) {
        if (isnan(a[e]) || isnan(b[e])) return INFINITY;
        if (isinf(a[e]) || isinf(b[e])) {
            if (a[e] == b[e]) continue;
            return INFINITY;
        }
        double d = fabs((double)a[e] - (double)b[e]);
        if (d > worst) worst = d;
    }
    return worst;
}

/* sigma of the problem of rc (see the FLASH_ thresholds in tolerances.h). */
static double score_spread(const random_case *rc) {
    const oracle_case *c = &rc->c;
    return oracle_score_spread(c, rc->q, c->B * c->L * c->Hq * c->D, rc->k, c->B * c->S * c->Hkv * c->D);
}

/* rms of the values of rc. */
static double value_rms(const random_case *rc) {
    const oracle_case *c = &rc->c;
    int64_t n = c->B * c->S * c->Hkv * c->Dv;
    double sum = 0;
    for (int64_t e = 0; e < n; e++) sum += (double)rc->v[e] * rc->v[e];
    return sqrt(sum / (double)n);
}

/* Compares a flash result with the reference one for score spread sigma
 * and value rms v_rms; fails with label. */
static void compare(const result *ref, const result *got, bool with_weights, double sigma,
                    double v_rms, const char *label) {
    double factor = sigma > 1 ? sigma : 1;
    double out_scale = fmax(max_abs_finite(ref->out, ref->n_out), v_rms);
    double d_out = max_diff(ref->out, got->out, ref->n_out);
    double d_w = 0, d_lse = 0;
    if (with_weights) {
        d_w = max_diff(ref->w, got->w, ref->n_w);
        for (int64_t e = 0; e < ref->n_lse; e++) {
            double a = ref->lse[e], b = got->lse[e];
            if (isinf(a) || isinf(b) || isnan(a) || isnan(b)) {
                if (a != b) d_lse = INFINITY;
                continue;
            }
            double rel = fabs(a - b) / fmax(fmax(1.0, fabs(a)), sigma);
            if (rel > d_lse) d_lse = rel;
        }
    }
    if (d_out > FLASH_OUT_REL_FAIL * factor * out_scale || d_w > FLASH_WEIGHT_ABS_FAIL * factor ||
        d_lse > FLASH_LSE_REL_FAIL)
        fail_msg("%s: out diff %.3g (scale %.3g, rel %.3g), weights %.3g, lse rel %.3g, "
                 "sigma %.3g", label, d_out, out_scale,
                 d_out / (out_scale > 0 ? out_scale : 1), d_w, d_lse, sigma);
    if (d_out > FLASH_OUT_REL_WARN * factor * out_scale || d_w > FLASH_WEIGHT_ABS_WARN * factor ||
        d_lse > FLASH_LSE_REL_WARN)
        print_message("warning: %s: out rel %.3g, weights %.3g, lse rel %.3g (sigma %.3g)\n",
                      label, d_out / (out_scale > 0 ? out_scale : 1), d_w, d_lse, sigma);
}

/* Runs rc on the reference and on flash with every instruction set this CPU
 * has; returns how many instruction sets were checked. */
static int check_all_isas(const random_case *rc, bool with_weights, const char *label) {
    double sigma = score_spread(rc), v_rms = value_rms(rc);
    result ref;
    result_alloc(&ref, &rc->c);
    run(rc, ATTN_KERNEL_REF, 0, with_weights, &ref);
    int checked = 0;
    for (int i = 0; i < attn__isa_count(); i++) {
        if (!test_isa_use(i)) continue;
        result got;
        result_alloc(&got, &rc->c);
        run(rc, ATTN_KERNEL_FLASH, 0, with_weights, &got);
        char full[256];
        snprintf(full, sizeof full, "[%s] %s", attn__isa_name(i), label);
        compare(&ref, &got, with_weights, sigma, v_rms, full);
        result_free(&got);
        checked++;
    }
    test_isa_restore();
    result_free(&ref);
    return checked;
}

static void case_label(char *buf, size_t size, const random_case *rc, enum mask_kind kind) {
    const oracle_case *c = &rc->c;
    snprintf(buf, size, "B=%lld L=%lld S=%lld Hq=%lld Hkv=%lld D=%lld Dv=%lld scale=%g mask=%s",
             (long long)c->B, (long long)c->L, (long long)c->S, (long long)c->Hq,
             (long long)c->Hkv, (long long)c->D, (long long)c->Dv, c->scale, mask_kind_names[kind]);
}

/* Odd sizes: every (L, S) pair of {1, 3, 17, 113, 1031} with every width;
 * ratio, batch, mask kind and Dv rotate.  The long cases use half the
 * widths, one kv head, group ratios up to 2 and narrow values, to keep the
 * reference's cost (and the sanitizer build's) moderate. */
static void sweep_against_reference(void **state) {
    (void)state;
    static const int64_t lens[] = {1, 3, 17, 113, 1031};
    static const int64_t widths[] = {1, 40, 64, 80, 128, 256};
    static const int64_t ratios[] = {1, 2, 4, 8};
    test_rng r;
    test_rng_seed(&r, 303);
    int cases = 0, runs = 0;
    for (int li = 0; li < 5; li++)
        for (int si = 0; si < 5; si++)
            for (int di = 0; di < 6; di++) {
                int64_t L = lens[li], S = lens[si], D = widths[di];
                bool big = L * S > 20000;
                if (big && (di % 2)) continue; /* half the widths for the long pairs */
                int64_t ratio = ratios[(li + 2 * si + di) % (big ? 2 : 4)];
                int64_t Hkv = big ? 1 : 1 + test_rng_range(&r, 2);
                int64_t B = (li + si + di) % 3 == 0 && !big ? 3 : 1;
                int64_t Dv = (li + di) % 2 ? D : 1 + test_rng_range(&r, big ? 48 : 140);
                enum mask_kind kind = (enum mask_kind)((li * 7 + si * 3 + di) % MASK_KIND_COUNT);
                random_case rc;
                random_case_make(&rc, &r, B, L, S, Hkv * ratio, Hkv, D, Dv, kind);
                char label[192];
                case_label(label, sizeof label, &rc, kind);
                runs += check_all_isas(&rc, L * S <= 200000, label);
                random_case_free(&rc);
                cases++;
            }
    print_message("checked %d sweep cases, %d kernel runs\n", cases, runs);
}

/* Every mask kind on prefill and decode shapes, the GQA ratio rotating
 * through 1..8, with weights and lse. */
static void every_mask_kind_and_ratio(void **state) {
    (void)state;
    static const int64_t shapes[][2] = {{40, 40}, {1, 300}, {5, 200}, {70, 9}, {9, 70}};
    static const int64_t ratios[] = {1, 2, 4, 8};
    test_rng r;
    test_rng_seed(&r, 17);
    for (int kind = 0; kind < MASK_KIND_COUNT; kind++)
        for (int s = 0; s < 5; s++) {
            random_case rc;
            random_case_make(&rc, &r, 2, shapes[s][0], shapes[s][1], 2 * ratios[(kind + s) % 4], 2, 24,
                             20, (enum mask_kind)kind);
            char label[192];
            case_label(label, sizeof label, &rc, (enum mask_kind)kind);
            check_all_isas(&rc, true, label);
            random_case_free(&rc);
        }
}

/* Lower-right causal with L > S: the first L - S rows see nothing (output
 * 0, weights 0, lse -inf, no NaN), on the tile and the rows paths. */
static void fully_masked_rows(void **state) {
    (void)state;
    static const int64_t shapes[][3] = {{50, 20, 1}, {8, 3, 2}, {113, 17, 4}, {40, 1, 1}};
    test_rng r;
    test_rng_seed(&r, 23);
    for (int s = 0; s < 4; s++) {
        int64_t L = shapes[s][0], S = shapes[s][1], ratio = shapes[s][2];
        random_case rc;
        random_case_make(&rc, &r, 1, L, S, ratio, 1, 16, 8, MASK_CAUSAL_LOWER_RIGHT);
        char label[192];
        case_label(label, sizeof label, &rc, MASK_CAUSAL_LOWER_RIGHT);
        check_all_isas(&rc, true, label);
        result got;
        result_alloc(&got, &rc.c);
        run(&rc, ATTN_KERNEL_FLASH, 0, true, &got);
        for (int64_t h = 0; h < ratio; h++)
            for (int64_t i = 0; i < L - S; i++) {
                for (int64_t d = 0; d < 8; d++) assert_true(got.out[(i * ratio + h) * 8 + d] == 0.0f);
                assert_true(isinf(got.lse[h * L + i]) && got.lse[h * L + i] < 0);
                for (int64_t j = 0; j < S; j++) assert_true(got.w[(h * L + i) * S + j] == 0.0f);
            }
        result_free(&got);
        random_case_free(&rc);
    }
}

/* Scores around ±1e4: q is scaled so that scale·q·k is that large.  The
 * online softmax must neither overflow nor produce NaN, and agree with the
 * reference within the thresholds for that spread: the fp32 rounding of
 * such scores is ~1e-3, which moves weight only between near-tied keys. */
static void extreme_logits(void **state) {
    (void)state;
    test_rng r;
    test_rng_seed(&r, 41);
    static const int64_t shapes[][2] = {{33, 200}, {1, 2000}, {3, 17}, {120, 120}};
    for (int s = 0; s < 4; s++)
        for (int kind = 0; kind < MASK_KIND_COUNT; kind += 3) {
            random_case rc;
            random_case_make(&rc, &r, 1, shapes[s][0], shapes[s][1], 4, 2, 64, 32, (enum mask_kind)kind);
            /* scale·|q·k| ~ 1e4: q ~ N(0, 1e4), q·k ~ 1e4·8, scale 1/8. */
            for (int64_t e = 0; e < rc.c.L * rc.c.Hq * rc.c.D; e++) rc.q[e] *= 1e4f;
            rc.c.scale = 0;
            char label[192];
            case_label(label, sizeof label, &rc, (enum mask_kind)kind);
            check_all_isas(&rc, true, label);
            result got;
            result_alloc(&got, &rc.c);
            run(&rc, ATTN_KERNEL_FLASH, 0, true, &got);
            for (int64_t e = 0; e < got.n_out; e++) assert_true(isfinite(got.out[e]));
            for (int64_t e = 0; e < got.n_w; e++) assert_true(isfinite(got.w[e]));
            for (int64_t e = 0; e < got.n_lse; e++) assert_false(isnan(got.lse[e]));
            result_free(&got);
            random_case_free(&rc);
        }
}

/* The same call with 1, 2 and 3 threads gives the same bits, on every
 * instruction set: prefill tiles, the decode split (few units, long S, so
 * the keys are cut into chunks merged by lse), and weights and lse too. */
static void bit_identical_across_thread_counts(void **state) {
    (void)state;
    /* B, L, S, Hq, Hkv, D, Dv, mask */
    static const int64_t shapes[][8] = {
        {2, 300, 300, 4, 2, 64, 64, MASK_CAUSAL},       /* prefill, tile kernels          */
        {1, 77, 1500, 4, 1, 40, 24, MASK_ALL},          /* prefill, every mask, split     */
        {1, 1, 4000, 4, 2, 128, 128, MASK_NONE},        /* decode, rows kernels, split    */
        {3, 4, 3000, 2, 1, 80, 80, MASK_CAUSAL_LOWER_RIGHT}, /* a KV-cache step of 4   */
        {1, 8, 2500, 2, 2, 64, 32, MASK_KEY_LENGTHS},
    };
    test_rng r;
    test_rng_seed(&r, 99);
    for (int s = 0; s < 5; s++) {
        const int64_t *x = shapes[s];
        random_case rc;
        random_case_make(&rc, &r, x[0], x[1], x[2], x[3], x[4], x[5], x[6], (enum mask_kind)x[7]);
        for (int i = 0; i < attn__isa_count(); i++) {
            if (!test_isa_use(i)) continue;
            result one;
            result_alloc(&one, &rc.c);
            run(&rc, ATTN_KERNEL_FLASH, 1, true, &one);
            for (int threads = 2; threads <= 3; threads++) {
                result many;
                result_alloc(&many, &rc.c);
                run(&rc, ATTN_KERNEL_FLASH, threads, true, &many);
                if (memcmp(one.out, many.out, sizeof(float) * (size_t)one.n_out) ||
                    memcmp(one.w, many.w, sizeof(float) * (size_t)one.n_w) ||
                    memcmp(one.lse, many.lse, sizeof(float) * (size_t)one.n_lse))
                    fail_msg("[%s] shape %d: %d threads differ from 1 thread", attn__isa_name(i), s, threads);
                result_free(&many);
            }
            result_free(&one);
        }
        test_isa_restore();
        random_case_free(&rc);
    }
}

/* Non-contiguous q, k and v (views into wider buffers) give the same bits as
 * contiguous copies. */
static void strided_views(void **state) {
    (void)state;
    test_rng r;
    test_rng_seed(&r, 5);
    const int64_t B = 2, L = 37, S = 41, Hq = 4, Hkv = 2, D = 20, Dv = 12, pad = 7;
    random_case rc;
    random_case_make(&rc, &r, B, L, S, Hq, Hkv, D, Dv, MASK_CAUSAL);
    float *wide_q = calloc((size_t)(B * L * Hq * (D + pad)), sizeof(float));
    float *wide_k = calloc((size_t)(B * S * Hkv * (D + pad)), sizeof(float));
    float *wide_v = calloc((size_t)(B * S * Hkv * (Dv + pad)), sizeof(float));
    for (int64_t row = 0; row < B * L * Hq; row++)
        memcpy(wide_q + row * (D + pad), rc.q + row * D, sizeof(float) * (size_t)D);
    for (int64_t row = 0; row < B * S * Hkv; row++) {
        memcpy(wide_k + row * (D + pad), rc.k + row * D, sizeof(float) * (size_t)D);
        memcpy(wide_v + row * (Dv + pad), rc.v + row * Dv, sizeof(float) * (size_t)Dv);
    }
    attn_tensor q = {wide_q, ATTN_F32, {B, L, Hq, D}, {L * Hq * (D + pad), Hq * (D + pad), D + pad, 1}};
    attn_tensor k = {wide_k, ATTN_F32, {B, S, Hkv, D}, {S * Hkv * (D + pad), Hkv * (D + pad), D + pad, 1}};
    attn_tensor v = {wide_v, ATTN_F32, {B, S, Hkv, Dv}, {S * Hkv * (Dv + pad), Hkv * (Dv + pad), Dv + pad, 1}};
    attn_tensor qd = attn_tensor_4d(rc.q, B, L, Hq, D), kd = attn_tensor_4d(rc.k, B, S, Hkv, D),
                vd = attn_tensor_4d(rc.v, B, S, Hkv, Dv);
    size_t n = (size_t)(B * L * Hq * Dv);
    float *a = malloc(sizeof(float) * n), *b = malloc(sizeof(float) * n);
    attn_tensor oa = attn_tensor_4d(a, B, L, Hq, Dv), ob = attn_tensor_4d(b, B, L, Hq, Dv);
    attn_sdpa_options opt = random_case_options(&rc);
    opt.kernel = ATTN_KERNEL_FLASH;
    assert_int_equal(attn_sdpa_forward(&q, &k, &v, &opt, &oa, NULL, NULL), ATTN_OK);
    assert_int_equal(attn_sdpa_forward(&qd, &kd, &vd, &opt, &ob, NULL, NULL), ATTN_OK);
    assert_memory_equal(a, b, sizeof(float) * n);
    free(a); free(b); free(wide_q); free(wide_k); free(wide_v);
    random_case_free(&rc);
}

/* K and V stored heads-major ([B, Hkv, S, D] in memory, described by
 * strides), as some caches keep them: the same bits as the [B, S, Hkv, D]
 * layout, on the rows (decode) path and the tile path. */
static void heads_major_cache(void **state) {
    (void)state;
    test_rng r;
    test_rng_seed(&r, 8);
    static const int64_t lens[] = {1, 50}; /* L: rows path, tile path */
    for (int li = 0; li < 2; li++) {
        const int64_t B = 2, L = lens[li], S = 700, Hq = 4, Hkv = 2, D = 24;
        random_case rc;
        random_case_make(&rc, &r, B, L, S, Hq, Hkv, D, D, MASK_CAUSAL_LOWER_RIGHT);
        float *k_hm = malloc(sizeof(float) * (size_t)(B * S * Hkv * D));
        float *v_hm = malloc(sizeof(float) * (size_t)(B * S * Hkv * D));
        for (int64_t b = 0; b < B; b++)
            for (int64_t j = 0; j < S; j++)
                for (int64_t h = 0; h < Hkv; h++) {
                    memcpy(k_hm + ((b * Hkv + h) * S + j) * D, rc.k + ((b * S + j) * Hkv + h) * D, sizeof(float) * (size_t)D);
                    memcpy(v_hm + ((b * Hkv + h) * S + j) * D, rc.v + ((b * S + j) * Hkv + h) * D, sizeof(float) * (size_t)D);
                }
        attn_tensor k = {k_hm, ATTN_F32, {B, S, Hkv, D}, {Hkv * S * D, D, S * D, 1}};
        attn_tensor v = {v_hm, ATTN_F32, {B, S, Hkv, D}, {Hkv * S * D, D, S * D, 1}};
        attn_tensor q = attn_tensor_4d(rc.q, B, L, Hq, D), kd = attn_tensor_4d(rc.k, B, S, Hkv, D),
                    vd = attn_tensor_4d(rc.v, B, S, Hkv, D);
        size_t n = (size_t)(B * L * Hq * D);
        float *a = malloc(sizeof(float) * n), *b_ = malloc(sizeof(float) * n);
        attn_tensor oa = attn_tensor_4d(a, B, L, Hq, D), ob = attn_tensor_4d(b_, B, L, Hq, D);
        attn_sdpa_options opt = random_case_options(&rc);
        opt.kernel = ATTN_KERNEL_FLASH;
        assert_int_equal(attn_sdpa_forward(&q, &k, &v, &opt, &oa, NULL, NULL), ATTN_OK);
        assert_int_equal(attn_sdpa_forward(&q, &kd, &vd, &opt, &ob, NULL, NULL), ATTN_OK);
        assert_memory_equal(a, b_, sizeof(float) * n);
        free(a); free(b_); free(k_hm); free(v_hm);
        random_case_free(&rc);
    }
}

/* The vector exp2 of each instruction set: relative error over a dense
 * sweep of [-126, 0]; exactly 0 below, NaN stays NaN. */
static void vector_exp2(void **state) {
    (void)state;
    const int64_t n = 1 << 20;
    float *x = malloc(sizeof(float) * (size_t)n), *y = malloc(sizeof(float) * (size_t)n);
    for (int64_t e = 0; e < n; e++) x[e] = (float)(-126.0 * (double)e / (double)(n - 1));
    for (int i = 0; i < attn__isa_count(); i++) {
        if (!test_isa_use(i)) continue;
        assert_int_equal(attn__isa_chosen(), i);
        const ukernel_table *kern = attn__isa_flash(i);
        kern->exp2_n(x, y, n);
        double worst = 0;
        for (int64_t e = 0; e < n; e++) {
            double want = exp2((double)x[e]);
            double rel = fabs((double)y[e] - want) / want;
            if (rel > worst) worst = rel;
        }
        print_message("[%s] exp2 max relative error over [-126, 0]: %.3g\n", attn__isa_name(i), worst);
        if (worst > FLASH_EXP2_REL_WARN) print_message("warning: [%s] exp2 error %.3g\n", attn__isa_name(i), worst);
        assert_true(worst <= FLASH_EXP2_REL_FAIL);
        float special[5] = {-126.5f, -1000.0f, -INFINITY, NAN, 0.0f}, out[5];
        kern->exp2_n(special, out, 5);
        assert_true(out[0] == 0.0f && out[1] == 0.0f && out[2] == 0.0f);
        assert_true(isnan(out[3]));
        assert_true(out[4] == 1.0f);
    }
    test_isa_restore();
    free(x);
    free(y);
}

/* all_finite of each instruction set, the flash kernels' check for the
 * rows that need the exact path: true on finite data (FLT_MAX, denormals,
 * -0 included), false with one NaN, +Inf or -Inf at any position of any
 * row, and blind to what lies past n in a row or past the last row. */
static void vector_all_finite(void **state) {
    (void)state;
    enum { LD = 80, ROWS = 3 };
    float x[LD * ROWS + LD];
    const float bad[3] = {NAN, INFINITY, -INFINITY};
    for (int i = 0; i < attn__isa_count(); i++) {
        if (!test_isa_use(i)) continue;
        const ukernel_table *kern = attn__isa_flash(i);
        for (int64_t n = 1; n <= 70; n++)
            for (int rows = 1; rows <= ROWS; rows++) {
                for (int e = 0; e < LD * ROWS + LD; e++) x[e] = NAN;
                for (int r = 0; r < rows; r++)
                    for (int64_t j = 0; j < n; j++)
                        x[r * LD + j] = j % 4 == 0 ? FLT_MAX : j % 4 == 1 ? -1e-40f : j % 4 == 2 ? -0.0f : (float)j;
                assert_true(kern->all_finite(x, LD, rows, n));
                for (int r = 0; r < rows; r++)
                    for (int64_t j = 0; j < n; j++)
                        for (int b = 0; b < 3; b++) {
                            const float keep = x[r * LD + j];
                            x[r * LD + j] = bad[b];
                            if (kern->all_finite(x, LD, rows, n))
                                fail_msg("[%s] all_finite missed %g at row %d of %d, element %lld of %lld", attn__isa_name(i),
                                         (double)bad[b], r, rows, (long long)j, (long long)n);
                            x[r * LD + j] = keep;
                        }
            }
    }
    test_isa_restore();
}

/* n bytes, 64-byte aligned (free() releases them). */
static void *alloc64(size_t n) { return aligned_alloc(64, (n + 63) / 64 * 64); }

/* mask_tile of each instruction set (the structural mask of a score tile,
 * one rule for every ISA: templates/mask_tile.h) against the rule written
 * out here: a score stays, bit for bit, where lo <= j < hi, becomes -inf
 * elsewhere for j0 <= j < j1, and nothing outside [j0, j1) is touched.
 * Every nk up to the tile's keys, bounds anywhere in [0, nk] (empty and
 * inverted ranges included), key ranges [j0, j1) within it, scores with
 * NaN and infinities among them. */
static void mask_tile_rule(void **state) {
    (void)state;
    test_rng r;
    test_rng_seed(&r, 71);
    for (int i = 0; i < attn__isa_count(); i++) {
        if (!test_isa_use(i)) continue;
        const ukernel_table *kern = attn__isa_flash(i);
        assert_non_null(kern->mask_tile);
        const int br = kern->tile_rows, keys = kern->tile_keys + 3;
        float *st = alloc64(sizeof(float) * (size_t)(keys * br));
        float *before = malloc(sizeof(float) * (size_t)(keys * br));
        float *lo = alloc64(sizeof(float) * (size_t)br), *hi = alloc64(sizeof(float) * (size_t)br);
        for (int nk = 1; nk <= kern->tile_keys; nk++)
            for (int rep = 0; rep < 3; rep++) {
                for (int e = 0; e < keys * br; e++) {
                    const int64_t kind = test_rng_range(&r, 40);
                    before[e] = st[e] = kind == 0 ? NAN : kind == 1 ? INFINITY : kind == 2 ? -INFINITY
                                                                     : (float)test_rng_normal(&r);
                }
                for (int l = 0; l < br; l++) {
                    lo[l] = (float)test_rng_range(&r, nk + 1);
                    hi[l] = rep == 2 ? (float)test_rng_range(&r, nk + 1) /* may lie below lo */
                                     : lo[l] + (float)test_rng_range(&r, nk + 1 - (int64_t)lo[l]);
                }
                const int j0 = rep == 0 ? 0 : (int)test_rng_range(&r, nk + 1);
                const int j1 = rep == 0 ? nk : j0 + (int)test_rng_range(&r, nk + 1 - j0);
                kern->mask_tile(st, j0, j1, lo, hi);
                for (int j = 0; j < keys; j++)
                    for (int l = 0; l < br; l++) {
                        const bool hidden = j >= j0 && j < j1 && !(j >= lo[l] && j < hi[l]);
                        const float want = hidden ? -INFINITY : before[j * br + l];
                        if (memcmp(&want, &st[j * br + l], sizeof want) != 0)
                            fail_msg("[%s] mask_tile keys [%d, %d) lane %d key %d (lo %g hi %g): %g, want %g", attn__isa_name(i),
                                     j0, j1, l, j, (double)lo[l], (double)hi[l], (double)st[j * br + l], (double)want);
                    }
            }
        free(st);
        free(lo);
        free(hi);
        free(before);
    }
    test_isa_restore();
}

/* The structural masks (causal both ways, windows, key lengths: what
 * mask_tile applies) on shapes whose diagonals and window edges cross the
 * tiles at odd offsets, against the independent oracle (oracle.h) as well
 * as the reference, on every ISA, with weights and lse.  Windows of every
 * width from 0 to past the tile, left and right, and GQA groups that put
 * several heads in a tile's lanes. */
static void structural_masks_at_odd_offsets(void **state) {
    (void)state;
    static const int64_t shapes[][2] = {{97, 97}, {131, 203}, {203, 131}, {70, 260}};
    static const int64_t windows[][2] = {{0, 0}, {1, 0}, {5, 3}, {37, -1}, {-1, 11}, {95, 96}, {130, 2}};
    static const int64_t ratios[] = {1, 2, 4, 3};
    test_rng r;
    test_rng_seed(&r, 113);
    int runs = 0;
    for (int s = 0; s < 4; s++)
        for (int w = 0; w < 7; w++) {
            const int64_t L = shapes[s][0], S = shapes[s][1], ratio = ratios[(s + w) % 4];
            const enum mask_kind kind = w % 3 == 0 ? MASK_WINDOW_CAUSAL : w % 3 == 1 ? MASK_WINDOW : MASK_ALL;
            random_case rc;
            random_case_make(&rc, &r, 2, L, S, 2 * ratio, 2, 24, 16, kind);
            if (kind == MASK_ALL) { /* structural rules only: no boolean mask, no bias */
                rc.c.mask = NULL;
                rc.c.bias = NULL;
            }
            rc.c.window = 1;
            rc.c.left = windows[w][0];
            rc.c.right = windows[w][1];
            char label[192];
            case_label(label, sizeof label, &rc, kind);
            runs += check_all_isas(&rc, true, label);

            /* the oracle: an explicit visibility table from the rules' own formulas */
            const oracle_case *c = &rc.c;
            const int64_t n_out = c->B * c->L * c->Hq * c->Dv;
            double *want = malloc(sizeof(double) * (size_t)n_out);
            oracle_attention(c, rc.q, rc.k, rc.v, want, NULL, NULL);
            const double sigma = score_spread(&rc), out_scale = fmax(max_abs(want, n_out), value_rms(&rc));
            for (int i = 0; i < attn__isa_count(); i++) {
                if (!test_isa_use(i)) continue;
                result got;
                result_alloc(&got, c);
                run(&rc, ATTN_KERNEL_FLASH, 0, false, &got);
                const double d = max_abs_diff(want, got.out, n_out);
                if (d > FLASH_OUT_REL_FAIL * fmax(1.0, sigma) * out_scale)
                    fail_msg("[%s] %s left=%lld right=%lld: out differs from the oracle by %.3g (scale %.3g)", attn__isa_name(i),
                             label, (long long)c->left, (long long)c->right, d, out_scale);
                result_free(&got);
            }
            test_isa_restore();
            free(want);
            random_case_free(&rc);
        }
    print_message("checked %d structural-mask kernel runs against the reference and the oracle\n", runs);
}

/* attn_isa_name, attn__isa_force and the kernel choice. */
static void dispatch_controls(void **state) {
    (void)state;
    /* the name is the registry's name of the chosen ISA, one this CPU runs */
    const int chosen = attn__isa_chosen();
    assert_true(chosen >= 0 && chosen < attn__isa_count() && attn__isa_supported(chosen));
    assert_string_equal(attn_isa_name(), attn__isa_name(chosen));
    float q_buf[12] = {0}, o_buf[12];
    attn_tensor q = attn_tensor_2d(q_buf, 4, 3), o = attn_tensor_2d(o_buf, 4, 3);
    attn_sdpa_options opt = {.struct_size = sizeof(attn_sdpa_options), .kernel = ATTN_KERNEL_FLASH};
    assert_int_equal(attn__isa_force("avx1024"), ATTN_ERR_INVALID_ARGUMENT);
    assert_int_equal(attn__isa_force("generic"), ATTN_OK);
    assert_string_equal(attn_isa_name(), "generic");
    assert_string_equal(attn_sdpa_kernel_name(&q, &q, &q, &opt), "flash");
    assert_int_equal(attn_sdpa_forward(&q, &q, &q, &opt, &o, NULL, NULL), ATTN_OK);
    /* The reference is a kernel, not an instruction set: forcing it leaves
     * the ISA as it was. */
    assert_int_equal(attn__isa_force("ref"), ATTN_OK);
    assert_string_equal(attn_isa_name(), "generic");
    assert_string_equal(attn_sdpa_kernel_name(&q, &q, &q, &opt), "ref");
    test_isa_restore();
    opt.kernel = ATTN_KERNEL_AUTO;
    assert_string_equal(attn_sdpa_kernel_name(&q, &q, &q, &opt),
                        attn__isa_forces_ref() ? "ref" : "flash");
}

/* Extra memory does not grow with the sequence: the workspace of a prefill
 * problem is the same at L = S = 8192 and 65536 and no smaller at 2048 (long
 * problems' units hold more query tiles, up to a fixed most), and a decode
 * step's is the same at S = 64k and 1M (the split has a fixed most number of
 * chunks). */
static void workspace_independent_of_length(void **state) {
    (void)state;
    float dummy[1];
    attn_sdpa_options opt = {.struct_size = sizeof(attn_sdpa_options), .kernel = ATTN_KERNEL_FLASH, .threads = 2, .causal = 1};
    size_t small = 0, large = 0;
    attn_tensor q = {dummy, ATTN_F32, {1, 2048, 16, 128}, {0, 0, 0, 1}}, k = {dummy, ATTN_F32, {1, 2048, 8, 128}, {0, 0, 0, 1}};
    size_t larger = 0;
    assert_int_equal(attn_sdpa_workspace_size(&q, &k, &k, &opt, &small), ATTN_OK);
    q.shape[1] = k.shape[1] = 8192;
    assert_int_equal(attn_sdpa_workspace_size(&q, &k, &k, &opt, &large), ATTN_OK);
    q.shape[1] = k.shape[1] = 65536;
    assert_int_equal(attn_sdpa_workspace_size(&q, &k, &k, &opt, &larger), ATTN_OK);
    if (!attn__isa_forces_ref()) {
        assert_true(small <= large);
        assert_true(large == larger);
        assert_true(larger < (size_t)8 << 20);
    }
    q.shape[1] = 1;
    k.shape[1] = 65536;
    assert_int_equal(attn_sdpa_workspace_size(&q, &k, &k, &opt, &small), ATTN_OK);
    k.shape[1] = 1 << 20;
    assert_int_equal(attn_sdpa_workspace_size(&q, &k, &k, &opt, &large), ATTN_OK);
    if (!attn__isa_forces_ref()) {
        assert_true(small == large);
        assert_true(large < (size_t)8 << 20);
    }
}

/* Long problems (S >= 4096 keys) hold up to 32 query tiles in a unit
 * instead of 8 (forward_plan.c, plan_subtiles).  Here 64 kv heads of 2 query
 * heads each, L = 300, S = 4096, causal with 200 valid keys (so that the
 * reference stays cheap and the subtiles of a unit see different keys):
 * the workspace shows the wider units (larger than at S = 1024); every ISA
 * agrees with the reference; 1 and 3 threads give the same bits; and each
 * kv head computed alone, a problem of a few units of 8 tiles, gives the
 * very bits of the wide units, as a row's operations do not depend on
 * which rows share its unit. */
static void long_problems_wider_units(void **state) {
    (void)state;
    const int64_t L = 300, S = 4096, Hq = 128, Hkv = 64, D = 16, Dv = 8, G = Hq / Hkv;
    test_rng r;
    test_rng_seed(&r, 41);
    random_case rc;
    random_case_make(&rc, &r, 1, L, S, Hq, Hkv, D, Dv, MASK_NONE);
    rc.c.causal = 1;
    rc.key_lengths = malloc(sizeof(int64_t));
    rc.key_lengths[0] = 200;
    rc.c.key_lengths = rc.key_lengths;
    attn_sdpa_options opt = random_case_options(&rc);
    opt.kernel = ATTN_KERNEL_FLASH;
    attn_tensor q = attn_tensor_4d(rc.q, 1, L, Hq, D), k = attn_tensor_4d(rc.k, 1, S, Hkv, D),
                v = attn_tensor_4d(rc.v, 1, S, Hkv, Dv);

    const int64_t n_out = L * Hq * Dv;
    result ref = {.out = malloc(sizeof(float) * (size_t)n_out), .n_out = n_out};
    run(&rc, ATTN_KERNEL_REF, 0, false, &ref);
    const double sigma = score_spread(&rc), v_rms = value_rms(&rc);
    float *alone = malloc(sizeof(float) * (size_t)n_out);
    for (int i = 0; i < attn__isa_count(); i++) {
        if (!test_isa_use(i)) continue;
        size_t wide = 0, narrow = 0;
        assert_int_equal(attn_sdpa_workspace_size(&q, &k, &v, &opt, &wide), ATTN_OK);
        attn_tensor k_short = attn_tensor_4d(rc.k, 1, 1024, Hkv, D), v_short = attn_tensor_4d(rc.v, 1, 1024, Hkv, Dv);
        assert_int_equal(attn_sdpa_workspace_size(&q, &k_short, &v_short, &opt, &narrow), ATTN_OK);
        if (wide <= narrow) fail_msg("[%s] workspace %zu at S = 4096, %zu at 1024: units not wider", attn__isa_name(i), wide, narrow);

        result one = {.out = malloc(sizeof(float) * (size_t)n_out), .n_out = n_out};
        result many = {.out = malloc(sizeof(float) * (size_t)n_out), .n_out = n_out};
        run(&rc, ATTN_KERNEL_FLASH, 1, false, &one);
        run(&rc, ATTN_KERNEL_FLASH, 3, false, &many);
        char label[64];
        snprintf(label, sizeof label, "[%s] wide units", attn__isa_name(i));
        compare(&ref, &one, false, sigma, v_rms, label);
        if (memcmp(one.out, many.out, sizeof(float) * (size_t)n_out))
            fail_msg("[%s] wide units: 3 threads differ from 1", attn__isa_name(i));
        for (int64_t kh = 0; kh < Hkv; kh++) {
            attn_tensor q_h = {rc.q + kh * G * D, ATTN_F32, {1, L, G, D}, {L * Hq * D, Hq * D, D, 1}};
            attn_tensor k_h = {rc.k + kh * D, ATTN_F32, {1, S, 1, D}, {S * Hkv * D, Hkv * D, D, 1}};
            attn_tensor v_h = {rc.v + kh * Dv, ATTN_F32, {1, S, 1, Dv}, {S * Hkv * Dv, Hkv * Dv, Dv, 1}};
            attn_tensor o_h = {alone + kh * G * Dv, ATTN_F32, {1, L, G, Dv}, {L * Hq * Dv, Hq * Dv, Dv, 1}};
            assert_int_equal(attn_sdpa_forward(&q_h, &k_h, &v_h, &opt, &o_h, NULL, NULL), ATTN_OK);
        }
        if (memcmp(one.out, alone, sizeof(float) * (size_t)n_out))
            fail_msg("[%s] wide units: the kv heads computed alone differ", attn__isa_name(i));
        free(one.out);
        free(many.out);
    }
    test_isa_restore();
    free(alone);
    free(ref.out);
    random_case_free(&rc);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(vector_exp2),
        cmocka_unit_test(vector_all_finite),
        cmocka_unit_test(mask_tile_rule),
        cmocka_unit_test(structural_masks_at_odd_offsets),
        cmocka_unit_test(dispatch_controls),
        cmocka_unit_test(workspace_independent_of_length),
        cmocka_unit_test(long_problems_wider_units),
        cmocka_unit_test(fully_masked_rows),
        cmocka_unit_test(extreme_logits),
        cmocka_unit_test(strided_views),
        cmocka_unit_test(heads_major_cache),
        cmocka_unit_test(every_mask_kind_and_ratio),
        cmocka_unit_test(bit_identical_across_thread_counts),
        cmocka_unit_test(sweep_against_reference),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
