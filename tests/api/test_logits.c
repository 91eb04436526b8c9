/*
 * test_logits.c — the score stage (docs/logits.md): logit soft-capping,
 * attention sinks and ALiBi, in every kernel (the reference; flash on
 * prefill tiles, on the decode rows path and with its key split and merge;
 * both backward kernels), on every instruction set this CPU has.
 *
 *   oracle        ref and flash against the independent long-double oracle
 *                 (tests/support/oracle.c), odd sizes, every mask kind,
 *                 GQA ratios 1, 2 and 4, each feature alone and all at once
 *   slopes        the standard ALiBi slopes against the oracle's recursion
 *                 and hand-derived values (8 and 12 heads)
 *   gradients     the reference's dq, dk, dv and dsinks against finite
 *                 differences of its forward; flash's against the
 *                 reference's
 *   determinism   flash forward and backward: the same bits for 1 and 2
 *                 threads
 *   positions     ALiBi at query_start / key_start: a chunk's rows are the
 *                 whole problem's rows
 *   numerics      a cap bounds the scores, so q = k = 1e19 gives the
 *                 oracle's answer; sinks of -inf are no sinks, to the bit;
 *                 a row that sees no key gets out 0, lse = sink, dq 0;
 *                 NaN in a row's q propagates, a hidden key's never matters
 *   errors        bad options are refused with a message that names them
 *
 * Shape legend: q [B, L, Hq, D]  k [B, S, Hkv, D]  v [B, S, Hkv, Dv]
 *               out [B, L, Hq, Dv]  weights [B, Hq, L, S]  lse [B, Hq, L]
 *               sinks, dsinks, alibi slopes [Hq]
 */
#include "oracle.h"
#include "tolerances.h"

#include "base/logits.h"
#include "isa_list.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------- features */

enum feature { F_NONE, F_SOFTCAP, F_SINKS, F_ALIBI, F_ALIBI_STANDARD, F_ALL, F_COUNT };
static const char *const feature_names[F_COUNT] = {"none", "softcap", "sinks", "alibi", "alibi-standard",
                                                   "softcap+sinks+alibi"};

/* The arrays a feature needs, owned by the test. */
typedef struct features {
    float sinks[16], slopes[16];
} features;

/* Turns feature f on in rc: a cap that bites (scores of unit data spread
 * about 1), sinks around the scores' size with one head's -inf (none),
 * slopes of either sign. */
static void features_apply(random_case *rc, features *fs, enum feature f, test_rng *r) {
    oracle_case *c = &rc->c;
    memset(fs, 0, sizeof *fs);
    if (f == F_SOFTCAP || f == F_ALL) c->softcap = 0.5 + 2.0 * test_rng_uniform(r);
    if (f == F_SINKS || f == F_ALL) {
        for (int64_t h = 0; h < c->Hq; h++) fs->sinks[h] = (float)(1.5 * test_rng_normal(r));
        if (c->Hq > 1) fs->sinks[c->Hq - 1] = -INFINITY;
        c->sinks = fs->sinks;
    }
    if (f == F_ALIBI) {
        for (int64_t h = 0; h < c->Hq; h++) fs->slopes[h] = (float)(0.3 * test_rng_normal(r));
        c->alibi_slopes = fs->slopes;
    }
    if (f == F_ALIBI_STANDARD || f == F_ALL) c->alibi_standard = 1;
}

/* ------------------------------------------------------------- running */


typedef struct results {
    float *out, *w, *lse, *dq, *dk, *dv, *dsinks;
} results;

static void results_free(results *r) {
    free(r->out); free(r->w); free(r->lse); free(r->dq); free(r->dk); free(r->dv); free(r->dsinks);
    *r = (results){0};
}

static int64_t n_out(const oracle_case *c) { return c->B * c->L * c->Hq * c->Dv; }
static int64_t n_w(const oracle_case *c) { return c->B * c->Hq * c->L * c->S; }
static int64_t n_lse(const oracle_case *c) { return c->B * c->Hq * c->L; }
static int64_t n_q(const oracle_case *c) { return c->B * c->L * c->Hq * c->D; }
static int64_t n_k(const oracle_case *c) { return c->B * c->S * c->Hkv * c->D; }
static int64_t n_v(const oracle_case *c) { return c->B * c->S * c->Hkv * c->Dv; }

/* The forward (weights and lse too) and, when dout is given, the backward
 * from its out and lse (dsinks when the case has sinks). */
static void run(const random_case *rc, const float *dout, attn_kernel kernel, int threads, results *res) {
    const oracle_case *c = &rc->c;
    *res = (results){0};
    res->out = test_nan_filled(n_out(c));
    res->w = test_nan_filled(n_w(c));
    res->lse = test_nan_filled(n_lse(c));
    random_case_tensors t = random_case_views(rc, res->out);
    attn_sdpa_options opt = random_case_options(rc);
    opt.kernel = kernel;
    opt.threads = threads;
    if (attn_sdpa_forward(&t.q, &t.k, &t.v, &opt, &t.out, res->w, res->lse) != ATTN_OK)
        fail_msg("forward: %s", attn_last_error());
    if (!dout) return;
    res->dq = test_nan_filled(n_q(c));
    res->dk = test_nan_filled(n_k(c));
    res->dv = test_nan_filled(n_v(c));
    res->dsinks = c->sinks ? test_nan_filled(c->Hq) : NULL;
    attn_tensor dot = attn_tensor_4d((float *)dout, c->B, c->L, c->Hq, c->Dv);
    attn_tensor dq = attn_tensor_4d(res->dq, c->B, c->L, c->Hq, c->D);
    attn_tensor dk = attn_tensor_4d(res->dk, c->B, c->S, c->Hkv, c->D);
    attn_tensor dv = attn_tensor_4d(res->dv, c->B, c->S, c->Hkv, c->Dv);
    attn_sdpa_grads g = ATTN_SDPA_GRADS_INIT;
    g.dq = &dq;
    g.dk = &dk;
    g.dv = &dv;
    g.dsinks = res->dsinks;
    if (attn_sdpa_backward_grads(&t.q, &t.k, &t.v, &opt, &t.out, res->lse, &dot, &g) != ATTN_OK)
        fail_msg("backward: %s", attn_last_error());
}

/* ---------------------------------------------------- against the oracle */

static const int64_t oracle_shapes[][7] = {
    /* B, L, S, Hq, Hkv, D, Dv */
    {1, 1, 17, 4, 1, 40, 40},     /* rows path, GQA 4                         */
    {3, 3, 113, 2, 1, 16, 24},    /* rows path, GQA 2, three batches          */
    {2, 17, 33, 4, 2, 40, 40},    /* tile path, GQA 2                         */
    {1, 113, 77, 2, 2, 80, 64},   /* tile path, GQA 1, odd tiles              */
    {1, 1, 1500, 4, 4, 64, 64},   /* rows path split into chunks, merged      */
    {1, 40, 1100, 2, 1, 32, 32},  /* tile path split into chunks              */
};

/* The oracle's largest visible score magnitude: what the fp32 kernels'
 * rounding of the scores grows with (ALiBi's biases grow with S). */
static double score_spread(const double *scores, int64_t n) {
    double m = 1.0;
    for (int64_t e = 0; e < n; e++)
        if (isfinite(scores[e]) && fabs(scores[e]) > m) m = fabs(scores[e]);
    return m;
}

static double worst_out, worst_w, worst_lse; /* flash's errors / their tolerances */

static void compare_with_oracle(const random_case *rc, const results *got, const char *label, bool flash) {
    const oracle_case *c = &rc->c;
    double *out = malloc(sizeof(double) * (size_t)n_out(c)), *w = malloc(sizeof(double) * (size_t)n_w(c));
    double *lse = malloc(sizeof(double) * (size_t)n_lse(c)), *scores = malloc(sizeof(double) * (size_t)n_w(c));
    oracle_attention_scores(c, rc->q, rc->k, rc->v, out, w, lse, scores);
    const double spread = score_spread(scores, n_w(c));
    const double out_scale = fmax(1.0, max_abs(out, n_out(c)));
    /* the reference in double: its own tolerances; flash: scaled by the
     * scores' spread as tolerances.h says, with the cap's tanh error */
    const double tol_out = flash ? LOGITS_FLASH_OUT_REL_FAIL * spread * out_scale : REF_OUT_REL_FAIL * out_scale;
    const double tol_w = flash ? LOGITS_FLASH_WEIGHT_ABS_FAIL * spread : REF_WEIGHT_ABS_FAIL;
    const double e_out = max_abs_diff(out, got->out, n_out(c)), e_w = max_abs_diff(w, got->w, n_w(c));
    double e_lse = 0.0;
    for (int64_t e = 0; e < n_lse(c); e++) {
        const double tol = flash ? LOGITS_FLASH_LSE_REL_FAIL * fmax(spread, fabs(lse[e])) : REF_LSE_ABS_FAIL;
        const double a = lse[e], b = got->lse[e];
        const double d = (isinf(a) && a == b) ? 0.0 : fabs(a - b);
        if (!(d <= tol)) fail_msg("%s: lse[%lld] = %.9g, oracle %.9g", label, (long long)e, b, a);
        if (flash && d / tol > e_lse) e_lse = d / tol;
    }
    if (!(e_out <= tol_out)) fail_msg("%s: out differs from the oracle by %.3g (tolerance %.3g)", label, e_out, tol_out);
    if (!(e_w <= tol_w)) fail_msg("%s: weights differ from the oracle by %.3g (tolerance %.3g)", label, e_w, tol_w);
    if (flash) {
        if (e_out / tol_out > worst_out) worst_out = e_out / tol_out;
        if (e_w / tol_w > worst_w) worst_w = e_w / tol_w;
        if (e_lse > worst_lse) worst_lse = e_lse;
    }
    free(out); free(w); free(lse); free(scores);
}

static void forward_against_oracle(void **state) {
    (void)state;
    test_rng r;
    test_rng_seed(&r, 20261201);
    int cases = 0;
    for (size_t s = 0; s < sizeof oracle_shapes / sizeof oracle_shapes[0]; s++) {
        const int64_t *sh = oracle_shapes[s];
        for (int f = F_SOFTCAP; f < F_COUNT; f++)
            for (int kind = 0; kind < MASK_KIND_COUNT; kind++) {
                /* the long shapes once per feature, with every rule */
                if (sh[2] > 200 && kind != MASK_ALL && kind != MASK_CAUSAL_LOWER_RIGHT) continue;
                random_case rc;
                features fs;
                random_case_make(&rc, &r, sh[0], sh[1], sh[2], sh[3], sh[4], sh[5], sh[6], (enum mask_kind)kind);
                features_apply(&rc, &fs, (enum feature)f, &r);
                char label[160];
                snprintf(label, sizeof label, "shape %zu, %s, %s, ref", s, feature_names[f], mask_kind_names[kind]);
                results res;
                run(&rc, NULL, ATTN_KERNEL_REF, 0, &res);
                compare_with_oracle(&rc, &res, label, false);
                results_free(&res);
                for (int i = 0; i < attn__isa_count(); i++) {
                    if (!test_isa_use(i)) continue;
                    snprintf(label, sizeof label, "shape %zu, %s, %s, flash/%s", s, feature_names[f],
                             mask_kind_names[kind], attn__isa_name(i));
                    run(&rc, NULL, ATTN_KERNEL_FLASH, 0, &res);
                    compare_with_oracle(&rc, &res, label, true);
                    results_free(&res);
                }
                test_isa_restore();
                random_case_free(&rc);
                cases++;
            }
    }
    print_message("%d cases; flash's worst error / tolerance: out %.2f, weights %.2f, lse %.2f\n", cases,
                  worst_out, worst_w, worst_lse);
}

/* ------------------------------------------------------------- slopes */

static void standard_slopes(void **state) {
    (void)state;
    for (int64_t n = 1; n <= 40; n++) {
        double want[40];
        oracle_alibi_standard_slopes(n, want);
        for (int64_t h = 0; h < n; h++) {
            const double got = attn__logits_alibi_standard_slope(h, n);
            if (fabs(got - want[h]) > 1e-15 * want[h])
                fail_msg("%lld heads: slope %lld is %.17g, the oracle's %.17g", (long long)n, (long long)h, got,
                         want[h]);
        }
    }
    /* by hand: 8 heads 1/2 ... 1/256; 12 heads the 8 of 8 heads, then
     * 2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5 (slopes 0, 2, 4, 6 of 16 heads) */
    for (int64_t h = 0; h < 8; h++) assert_true(attn__logits_alibi_standard_slope(h, 8) == ldexp(1.0, (int)-(h + 1)));
    for (int64_t h = 0; h < 8; h++) assert_true(attn__logits_alibi_standard_slope(h, 12) == ldexp(1.0, (int)-(h + 1)));
    for (int64_t k = 0; k < 4; k++)
        assert_true(fabs(attn__logits_alibi_standard_slope(8 + k, 12) - pow(2.0, -0.5 - (double)k)) < 1e-15);
}

/* The softcap_n micro-kernel of every ISA against cap·tanh(x/cap) in
 * double: its absolute error, relative to the cap, over x in [-4 cap, 4 cap]
 * and beyond (±inf give ±cap; NaN stays NaN). */
static void softcap_kernel_accuracy(void **state) {
    (void)state;
    enum { N = 4001 };
    static float x[N];
    static const float caps[] = {0.5f, 1.0f, 20.0f, 50.0f};
    for (int i = 0; i < attn__isa_count(); i++) {
        if (!test_isa_use(i)) continue;
        const ukernel_table *kern = attn__isa_flash(i);
        double worst = 0.0;
        for (size_t c = 0; c < sizeof caps / sizeof caps[0]; c++) {
            const float cap = caps[c];
            for (int e = 0; e < N; e++) x[e] = cap * (-4.0f + 8.0f * (float)e / (float)(N - 1));
            float y[N];
            memcpy(y, x, sizeof y);
            kern->softcap_n(y, N - 3, cap); /* a tail that is not a whole vector */
            for (int e = 0; e < N - 3; e++) {
                const double err = fabs((double)y[e] - (double)cap * tanh((double)x[e] / cap)) / cap;
                if (!(err <= LOGITS_SOFTCAP_ABS_FAIL))
                    fail_msg("%s: softcap_n(%.9g, cap %g) = %.9g, off by %.3g of the cap", attn__isa_name(i), x[e], cap, y[e], err);
                if (err > worst) worst = err;
            }
            float edge[3] = {INFINITY, -INFINITY, NAN};
            kern->softcap_n(edge, 3, cap);
            assert_true(edge[0] == cap && edge[1] == -cap && isnan(edge[2]));
        }
        print_message("softcap_n on %s: largest error %.3g of the cap (fail above %.3g)\n", attn__isa_name(i), worst,
                      LOGITS_SOFTCAP_ABS_FAIL);
    }
    test_isa_restore();
}

/* ------------------------------------------------------------ gradients */

#define FD_STEP (1.0 / 64.0) /* h = 2^-6 (and 2h), as tests/ref/test_ref_backward.c */
#define FD_GRID 4096.0       /* inputs on multiples of 2^-12: x +- h is exact */

static void quantize(float *x, int64_t n) {
    for (int64_t e = 0; e < n; e++)
        if (isfinite(x[e])) x[e] = (float)(nearbyint((double)x[e] * FD_GRID) / FD_GRID);
}

/* L = sum(dout * out) of the reference forward (float outputs). */
static double loss_of(const random_case *rc, const float *dout) {
    results res;
    run(rc, NULL, ATTN_KERNEL_REF, 1, &res);
    double loss = 0.0;
    for (int64_t e = 0; e < n_out(&rc->c); e++) loss += (double)dout[e] * (double)res.out[e];
    results_free(&res);
    return loss;
}

static double worst_fd;

/* Richardson-combined central differences of the loss in each element of
 * x against grad (FD_ABS_FAIL, FD_REL_FAIL of tolerances.h). */
static void check_fd(const char *label, const char *what, float *x, int64_t n, const float *grad,
                     const random_case *rc, const float *dout) {
    for (int64_t e = 0; e < n; e++) {
        if (!isfinite(x[e])) continue; /* a sink of -inf: no gradient to check */
        const float saved = x[e];
        double central[2];
        for (int k = 0; k < 2; k++) {
            const double h = FD_STEP * (1 << k);
            x[e] = (float)((double)saved + h);
            const double plus = loss_of(rc, dout);
            x[e] = (float)((double)saved - h);
            central[k] = (plus - loss_of(rc, dout)) / (2.0 * h);
        }
        x[e] = saved;
        const double fd = central[0] + (central[0] - central[1]) / 3.0;
        const double tol = FD_ABS_FAIL + FD_REL_FAIL * fabs(fd), err = fabs((double)grad[e] - fd);
        if (!(err <= tol))
            fail_msg("%s: d%s[%lld] = %.7g but finite differences give %.7g", label, what, (long long)e,
                     (double)grad[e], fd);
        if (err / tol > worst_fd) worst_fd = err / tol;
    }
}

static void gradients_fd(void **state) {
    (void)state;
    static const int64_t shapes[][7] = {{1, 3, 5, 2, 1, 3, 2}, {2, 4, 3, 4, 2, 2, 3}};
    static const enum mask_kind kinds[] = {MASK_NONE, MASK_CAUSAL_LOWER_RIGHT, MASK_BIAS, MASK_KEY_LENGTHS};
    test_rng r;
    test_rng_seed(&r, 77);
    for (size_t s = 0; s < 2; s++)
        for (int f = F_SOFTCAP; f < F_COUNT; f++)
            for (size_t kk = 0; kk < sizeof kinds / sizeof kinds[0]; kk++) {
                const int64_t *sh = shapes[s];
                random_case rc;
                features fs;
                random_case_make(&rc, &r, sh[0], sh[1], sh[2], sh[3], sh[4], sh[5], sh[6], kinds[kk]);
                features_apply(&rc, &fs, (enum feature)f, &r);
                quantize(rc.q, n_q(&rc.c));
                quantize(rc.k, n_k(&rc.c));
                quantize(rc.v, n_v(&rc.c));
                quantize(fs.sinks, rc.c.Hq);
                float *dout = malloc(sizeof(float) * (size_t)n_out(&rc.c));
                test_fill_normal(&r, dout, n_out(&rc.c), 1.0);
                char label[128];
                snprintf(label, sizeof label, "shape %zu, %s, %s", s, feature_names[f], mask_kind_names[kinds[kk]]);
                results ref;
                run(&rc, dout, ATTN_KERNEL_REF, 1, &ref);
                check_fd(label, "q", rc.q, n_q(&rc.c), ref.dq, &rc, dout);
                check_fd(label, "k", rc.k, n_k(&rc.c), ref.dk, &rc, dout);
                check_fd(label, "v", rc.v, n_v(&rc.c), ref.dv, &rc, dout);
                if (rc.c.sinks) check_fd(label, "sinks", fs.sinks, rc.c.Hq, ref.dsinks, &rc, dout);
                results_free(&ref);
                free(dout);
                random_case_free(&rc);
            }
    print_message("worst |analytic - fd| / tolerance: %.3f\n", worst_fd);
}

/* Max |a - b| relative to max(1, max |a|). */
static double rel_diff(const float *a, const float *b, int64_t n) {
    double scale = 1.0, worst = 0.0;
    for (int64_t e = 0; e < n; e++) scale = fmax(scale, fabs((double)a[e]));
    for (int64_t e = 0; e < n; e++) {
        const double d = fabs((double)a[e] - (double)b[e]);
        if (!(d <= worst)) worst = d; /* NaN sticks */
    }
    return worst / scale;
}

static void flash_backward_against_ref(void **state) {
    (void)state;
    static const int64_t shapes[][7] = {{1, 1, 300, 4, 1, 40, 40}, {2, 37, 70, 4, 2, 24, 16}, {1, 130, 129, 2, 1, 64, 64}};
    static const enum mask_kind kinds[] = {MASK_NONE, MASK_CAUSAL, MASK_CAUSAL_LOWER_RIGHT, MASK_WINDOW_CAUSAL,
                                           MASK_BOOL_4D, MASK_BIAS, MASK_ALL};
    test_rng r;
    test_rng_seed(&r, 5);
    double worst = 0.0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int f = F_SOFTCAP; f < F_COUNT; f++)
            for (size_t kk = 0; kk < sizeof kinds / sizeof kinds[0]; kk++) {
                const int64_t *sh = shapes[s];
                random_case rc;
                features fs;
                random_case_make(&rc, &r, sh[0], sh[1], sh[2], sh[3], sh[4], sh[5], sh[6], kinds[kk]);
                features_apply(&rc, &fs, (enum feature)f, &r);
                float *dout = malloc(sizeof(float) * (size_t)n_out(&rc.c));
                test_fill_normal(&r, dout, n_out(&rc.c), 1.0);
                results ref, got;
                run(&rc, dout, ATTN_KERNEL_REF, 1, &ref);
                for (int i = 0; i < attn__isa_count(); i++) {
                    if (!test_isa_use(i)) continue;
                    run(&rc, dout, ATTN_KERNEL_FLASH, 0, &got);
                    const double e[4] = {rel_diff(ref.dq, got.dq, n_q(&rc.c)), rel_diff(ref.dk, got.dk, n_k(&rc.c)),
                                         rel_diff(ref.dv, got.dv, n_v(&rc.c)),
                                         rc.c.sinks ? rel_diff(ref.dsinks, got.dsinks, rc.c.Hq) : 0.0};
                    static const char *const names[4] = {"dq", "dk", "dv", "dsinks"};
                    for (int t = 0; t < 4; t++) {
                        if (!(e[t] <= LOGITS_FLASH_GRAD_REL_FAIL))
                            fail_msg("shape %zu, %s, %s, flash/%s: %s differs from the reference's by %.3g", s,
                                     feature_names[f], mask_kind_names[kinds[kk]], attn__isa_name(i), names[t], e[t]);
                        if (e[t] > worst) worst = e[t];
                    }
                    results_free(&got);
                }
                test_isa_restore();
                results_free(&ref);
                free(dout);
                random_case_free(&rc);
            }
    print_message("flash gradients' worst relative difference from the reference's: %.3g (fail above %.3g)\n",
                  worst, LOGITS_FLASH_GRAD_REL_FAIL);
}

/* ---------------------------------------------------------- determinism */

static void threads_bit_identical(void **state) {
    (void)state;
    static const int64_t shapes[][7] = {{1, 1, 3000, 4, 2, 64, 64}, {1, 300, 300, 4, 1, 32, 32}};
    test_rng r;
    test_rng_seed(&r, 9);
    for (size_t s = 0; s < 2; s++) {
        const int64_t *sh = shapes[s];
        random_case rc;
        features fs;
        random_case_make(&rc, &r, sh[0], sh[1], sh[2], sh[3], sh[4], sh[5], sh[6], MASK_CAUSAL_LOWER_RIGHT);
        features_apply(&rc, &fs, F_ALL, &r);
        float *dout = malloc(sizeof(float) * (size_t)n_out(&rc.c));
        test_fill_normal(&r, dout, n_out(&rc.c), 1.0);
        results one, two;
        run(&rc, dout, ATTN_KERNEL_FLASH, 1, &one);
        run(&rc, dout, ATTN_KERNEL_FLASH, 2, &two);
        const oracle_case *c = &rc.c;
        assert_memory_equal(one.out, two.out, sizeof(float) * (size_t)n_out(c));
        assert_memory_equal(one.w, two.w, sizeof(float) * (size_t)n_w(c));
        assert_memory_equal(one.lse, two.lse, sizeof(float) * (size_t)n_lse(c));
        assert_memory_equal(one.dq, two.dq, sizeof(float) * (size_t)n_q(c));
        assert_memory_equal(one.dk, two.dk, sizeof(float) * (size_t)n_k(c));
        assert_memory_equal(one.dv, two.dv, sizeof(float) * (size_t)n_v(c));
        assert_memory_equal(one.dsinks, two.dsinks, sizeof(float) * (size_t)c->Hq);
        results_free(&one);
        results_free(&two);
        free(dout);
        random_case_free(&rc);
    }
}

/* ALiBi follows the positions query_start, key_start and the alignment
 * give (as causal does): the rows [5, 12) of a 12-query problem, computed
 * as a chunk placed at query_start = 5, and the key rows [4, 20) placed at
 * key_start = 4 (the first four are hidden from those rows by the window,
 * which is evaluated at the same global positions in both calls), are the
 * whole problem's rows, to the bit on the reference, within tolerance on
 * flash. */
static void alibi_follows_positions(void **state) {
    (void)state;
    enum { L = 12, S = 20, HQ = 4, HKV = 2, D = 16, Q0 = 5, K0 = 4 };
    test_rng r;
    test_rng_seed(&r, 12);
    static float q[L * HQ * D], k[S * HKV * D], v[S * HKV * D], whole[L * HQ * D], part[(L - Q0) * HQ * D];
    test_fill_normal(&r, q, L * HQ * D, 1.0);
    test_fill_normal(&r, k, S * HKV * D, 1.0);
    test_fill_normal(&r, v, S * HKV * D, 1.0);
    const float sinks_h[HQ] = {0.3f, -0.5f, 1.0f, 0.0f};
    for (int kernel = ATTN_KERNEL_REF; kernel <= ATTN_KERNEL_FLASH; kernel++) {
        attn_sdpa_options opt = ATTN_SDPA_OPTIONS_INIT;
        opt.kernel = (attn_kernel)kernel;
        opt.causal = 1;
        opt.align = ATTN_ALIGN_LOWER_RIGHT;
        opt.window = 1;
        opt.window_left = S - K0 - 1 - (L - 1 - Q0); /* row Q0 sees back to key K0 exactly */
        opt.window_right = -1;
        opt.alibi_standard = 1;
        opt.softcap = 2.0f;
        opt.sinks = sinks_h;
        attn_tensor tq = attn_tensor_3d(q, L, HQ, D), tk = attn_tensor_3d(k, S, HKV, D), tv = attn_tensor_3d(v, S, HKV, D);
        attn_tensor to = attn_tensor_3d(whole, L, HQ, D);
        assert_int_equal(attn_sdpa_forward(&tq, &tk, &tv, &opt, &to, NULL, NULL), ATTN_OK);
        /* the chunk: its queries and the keys from K0 on, at their positions */
        attn_tensor cq = attn_tensor_3d(q + Q0 * HQ * D, L - Q0, HQ, D), ck = attn_tensor_3d(k + K0 * HKV * D, S - K0, HKV, D),
                    cv = attn_tensor_3d(v + K0 * HKV * D, S - K0, HKV, D), co = attn_tensor_3d(part, L - Q0, HQ, D);
        opt.query_start = Q0;
        opt.total_len_q = L;
        opt.key_start = K0;
        opt.total_len_kv = S;
        assert_int_equal(attn_sdpa_forward(&cq, &ck, &cv, &opt, &co, NULL, NULL), ATTN_OK);
        const float *want = whole + Q0 * HQ * D;
        if (kernel == ATTN_KERNEL_REF)
            assert_memory_equal(want, part, sizeof part);
        else
            for (int e = 0; e < (L - Q0) * HQ * D; e++) assert_true(fabsf(want[e] - part[e]) <= 1e-5f);
    }
}

/* ------------------------------------------------------------- numerics */

/* Every kernel run, k <= attn__isa_count(): 0 the reference, 1.. flash on
 * ISA k - 1; false when the CPU or build lacks the ISA. */
static bool select_run(int k, attn_kernel *kernel) {
    *kernel = k == 0 ? ATTN_KERNEL_REF : ATTN_KERNEL_FLASH;
    return test_isa_use(k == 0 ? TEST_ISA_AUTO : k - 1);
}

/* q = k = 1e19: every score overflows fp32, but the cap bounds it, so each
 * kernel gives the oracle's answer (equal capped scores: uniform weights). */
static void softcap_bounds_overflow(void **state) {
    (void)state;
    static const int64_t shapes[][7] = {{1, 1, 40, 2, 1, 16, 16}, {1, 33, 40, 2, 2, 16, 16}};
    test_rng r;
    test_rng_seed(&r, 3);
    for (size_t s = 0; s < 2; s++) {
        const int64_t *sh = shapes[s];
        random_case rc;
        features fs;
        random_case_make(&rc, &r, sh[0], sh[1], sh[2], sh[3], sh[4], sh[5], sh[6], MASK_CAUSAL);
        features_apply(&rc, &fs, F_SOFTCAP, &r);
        rc.c.softcap = 30.0;
        for (int64_t e = 0; e < n_q(&rc.c); e++) rc.q[e] = 1e19f;
        for (int64_t e = 0; e < n_k(&rc.c); e++) rc.k[e] = 1e19f;
        double *out = malloc(sizeof(double) * (size_t)n_out(&rc.c)), *lse = malloc(sizeof(double) * (size_t)n_lse(&rc.c));
        oracle_attention(&rc.c, rc.q, rc.k, rc.v, out, NULL, lse);
        for (int k = 0; k <= attn__isa_count(); k++) {
            attn_kernel kernel;
            if (!select_run(k, &kernel)) continue;
            results res;
            run(&rc, NULL, kernel, 0, &res);
            const double scale = fmax(1.0, max_abs(out, n_out(&rc.c)));
            assert_true(max_abs_diff(out, res.out, n_out(&rc.c)) <= OVERFLOW_OUT_REL_FAIL * scale);
            for (int64_t e = 0; e < n_lse(&rc.c); e++)
                assert_true(fabs(lse[e] - res.lse[e]) <= OVERFLOW_LSE_REL_FAIL * fmax(1.0, fabs(lse[e])));
            results_free(&res);
        }
        test_isa_restore();
        free(out);
        free(lse);
        random_case_free(&rc);
    }
}

/* Sinks of -inf are no sinks: the same bits as sinks = NULL, forward and
 * backward, in every kernel; and dsinks is 0 for them. */
static void sinks_neg_inf_are_off(void **state) {
    (void)state;
    static const int64_t shapes[][7] = {{2, 1, 700, 4, 2, 32, 32}, {1, 50, 90, 2, 1, 24, 24}};
    test_rng r;
    test_rng_seed(&r, 4);
    for (size_t s = 0; s < 2; s++) {
        const int64_t *sh = shapes[s];
        random_case rc;
        random_case_make(&rc, &r, sh[0], sh[1], sh[2], sh[3], sh[4], sh[5], sh[6], MASK_ALL);
        float *dout = malloc(sizeof(float) * (size_t)n_out(&rc.c));
        test_fill_normal(&r, dout, n_out(&rc.c), 1.0);
        float off[16];
        for (int h = 0; h < 16; h++) off[h] = -INFINITY;
        for (int k = 0; k <= attn__isa_count(); k++) {
            attn_kernel kernel;
            if (!select_run(k, &kernel)) continue;
            results none, neg;
            rc.c.sinks = NULL;
            run(&rc, dout, kernel, 0, &none);
            rc.c.sinks = off;
            run(&rc, dout, kernel, 0, &neg);
            const oracle_case *c = &rc.c;
            assert_memory_equal(none.out, neg.out, sizeof(float) * (size_t)n_out(c));
            assert_memory_equal(none.w, neg.w, sizeof(float) * (size_t)n_w(c));
            assert_memory_equal(none.lse, neg.lse, sizeof(float) * (size_t)n_lse(c));
            assert_memory_equal(none.dq, neg.dq, sizeof(float) * (size_t)n_q(c));
            assert_memory_equal(none.dk, neg.dk, sizeof(float) * (size_t)n_k(c));
            assert_memory_equal(none.dv, neg.dv, sizeof(float) * (size_t)n_v(c));
            for (int64_t h = 0; h < c->Hq; h++) assert_true(neg.dsinks[h] == 0.0f);
            results_free(&none);
            results_free(&neg);
        }
        test_isa_restore();
        free(dout);
        random_case_free(&rc);
    }
}

/* Batch 0 sees no key (key length 0): with a sink its rows get out 0,
 * weights 0, lse = the sink, dq 0, and add nothing to dsinks. */
static void sink_row_without_keys(void **state) {
    (void)state;
    static const int64_t shapes[][7] = {{2, 1, 600, 2, 1, 16, 16}, {2, 30, 40, 2, 2, 16, 16}};
    test_rng r;
    test_rng_seed(&r, 6);
    for (size_t s = 0; s < 2; s++) {
        const int64_t *sh = shapes[s];
        random_case rc;
        features fs;
        random_case_make(&rc, &r, sh[0], sh[1], sh[2], sh[3], sh[4], sh[5], sh[6], MASK_KEY_LENGTHS);
        features_apply(&rc, &fs, F_ALL, &r);
        fs.sinks[rc.c.Hq - 1] = 0.25f; /* every head has a sink here */
        rc.key_lengths[0] = 0;
        const oracle_case *c = &rc.c;
        float *dout = malloc(sizeof(float) * (size_t)n_out(c));
        test_fill_normal(&r, dout, n_out(c), 1.0);
        for (int k = 0; k <= attn__isa_count(); k++) {
            attn_kernel kernel;
            if (!select_run(k, &kernel)) continue;
            results res, one;
            run(&rc, dout, kernel, 0, &res);
            for (int64_t i = 0; i < c->L; i++)
                for (int64_t h = 0; h < c->Hq; h++) {
                    for (int64_t d = 0; d < c->Dv; d++) assert_true(res.out[(i * c->Hq + h) * c->Dv + d] == 0.0f);
                    for (int64_t d = 0; d < c->D; d++) assert_true(res.dq[(i * c->Hq + h) * c->D + d] == 0.0f);
                    for (int64_t j = 0; j < c->S; j++) assert_true(res.w[(h * c->L + i) * c->S + j] == 0.0f);
                    assert_true(res.lse[h * c->L + i] == fs.sinks[h]);
                }
            /* batch 1 alone gives the same dsinks: batch 0 adds exactly 0 */
            random_case one_batch = rc;
            one_batch.c.B = 1;
            one_batch.q += c->L * c->Hq * c->D;
            one_batch.k += c->S * c->Hkv * c->D;
            one_batch.v += c->S * c->Hkv * c->Dv;
            one_batch.key_lengths += 1;
            one_batch.c.key_lengths = one_batch.key_lengths;
            run(&one_batch, dout + c->L * c->Hq * c->Dv, kernel, 0, &one);
            for (int64_t h = 0; h < c->Hq; h++) assert_true(isfinite(res.dsinks[h]));
            for (int64_t h = 0; h < c->Hq; h++) assert_true(fabsf(res.dsinks[h] - one.dsinks[h]) <= 1e-6f * (1.0f + fabsf(one.dsinks[h])));
            results_free(&res);
            results_free(&one);
        }
        test_isa_restore();
        free(dout);
        random_case_free(&rc);
    }
}

/* With every feature on: a NaN in row 0's q poisons that row only; NaN in
 * k and v of a key past the key length (hidden) changes no bit. */
static void nonfinite_with_features(void **state) {
    (void)state;
    static const int64_t shapes[][7] = {{1, 1, 700, 4, 2, 32, 32}, {1, 40, 50, 2, 1, 16, 16}};
    test_rng r;
    test_rng_seed(&r, 8);
    for (size_t s = 0; s < 2; s++) {
        const int64_t *sh = shapes[s];
        random_case rc;
        features fs;
        random_case_make(&rc, &r, sh[0], sh[1], sh[2], sh[3], sh[4], sh[5], sh[6], MASK_KEY_LENGTHS);
        features_apply(&rc, &fs, F_ALL, &r);
        const oracle_case *c = &rc.c;
        rc.key_lengths[0] = c->S - 3;
        float *dout = malloc(sizeof(float) * (size_t)n_out(c));
        test_fill_normal(&r, dout, n_out(c), 1.0);
        for (int k = 0; k <= attn__isa_count(); k++) {
            attn_kernel kernel;
            if (!select_run(k, &kernel)) continue;
            results clean, hidden, poisoned;
            for (int64_t d = 0; d < c->D; d++) rc.k[((c->S - 1) * c->Hkv) * c->D + d] = 0.0f;
            for (int64_t d = 0; d < c->Dv; d++) rc.v[((c->S - 1) * c->Hkv) * c->Dv + d] = 0.0f;
            run(&rc, dout, kernel, 0, &clean);
            for (int64_t d = 0; d < c->D; d++) rc.k[((c->S - 1) * c->Hkv) * c->D + d] = NAN;
            for (int64_t d = 0; d < c->Dv; d++) rc.v[((c->S - 1) * c->Hkv) * c->Dv + d] = NAN;
            run(&rc, dout, kernel, 0, &hidden);
            assert_memory_equal(clean.out, hidden.out, sizeof(float) * (size_t)n_out(c));
            assert_memory_equal(clean.lse, hidden.lse, sizeof(float) * (size_t)n_lse(c));
            assert_memory_equal(clean.dq, hidden.dq, sizeof(float) * (size_t)n_q(c));
            assert_memory_equal(clean.dsinks, hidden.dsinks, sizeof(float) * (size_t)c->Hq);
            const float saved = rc.q[0];
            rc.q[0] = NAN; /* row (i = 0, h = 0) */
            run(&rc, dout, kernel, 0, &poisoned);
            rc.q[0] = saved;
            assert_true(isnan(poisoned.out[0]) && isnan(poisoned.lse[0]));
            for (int64_t e = c->Dv; e < n_out(c); e++) assert_true(isfinite(poisoned.out[e]));
            assert_true(isnan(poisoned.dsinks[0])); /* the poisoned row's head */
            results_free(&clean);
            results_free(&hidden);
            results_free(&poisoned);
        }
        test_isa_restore();
        free(dout);
        random_case_free(&rc);
    }
}

/* --------------------------------------------------------------- errors */

static void expect_error(attn_sdpa_options *opt, const char *needle) {
    float q[2 * 4] = {0}, k[3 * 4] = {0}, v[3 * 4] = {0}, o[2 * 4];
    attn_tensor tq = attn_tensor_3d(q, 2, 2, 2), tk = attn_tensor_3d(k, 3, 2, 2), tv = attn_tensor_3d(v, 3, 2, 2);
    attn_tensor to = attn_tensor_3d(o, 2, 2, 2);
    assert_int_equal(attn_sdpa_forward(&tq, &tk, &tv, opt, &to, NULL, NULL), ATTN_ERR_INVALID_ARGUMENT);
    if (!strstr(attn_last_error(), needle)) fail_msg("message \"%s\" does not name %s", attn_last_error(), needle);
}

static void bad_options(void **state) {
    (void)state;
    const float nan_sinks[2] = {0.0f, NAN}, inf_sinks[2] = {INFINITY, 0.0f}, bad_slopes[2] = {0.5f, INFINITY};
    const float slopes[2] = {0.5f, 0.25f};
    attn_sdpa_options opt = ATTN_SDPA_OPTIONS_INIT;
    opt.softcap = -1.0f;
    expect_error(&opt, "softcap");
    opt.softcap = NAN;
    expect_error(&opt, "softcap");
    opt.softcap = INFINITY;
    expect_error(&opt, "softcap");
    opt = (attn_sdpa_options)ATTN_SDPA_OPTIONS_INIT;
    opt.sinks = nan_sinks;
    expect_error(&opt, "sinks[1]");
    opt.sinks = inf_sinks;
    expect_error(&opt, "sinks[0]");
    opt = (attn_sdpa_options)ATTN_SDPA_OPTIONS_INIT;
    opt.alibi_slopes = bad_slopes;
    expect_error(&opt, "alibi_slopes[1]");
    opt.alibi_slopes = slopes;
    opt.alibi_standard = 1;
    expect_error(&opt, "alibi_standard");

    /* dsinks without sinks */
    float q[4] = {0}, k[4] = {0}, v[4] = {0}, o[4] = {0}, dout[4] = {0}, ds[2];
    attn_tensor tq = attn_tensor_2d(q, 2, 2), tk = attn_tensor_2d(k, 2, 2), tv = attn_tensor_2d(v, 2, 2);
    attn_tensor tdo = attn_tensor_2d(dout, 2, 2);
    (void)o;
    attn_sdpa_grads g = ATTN_SDPA_GRADS_INIT;
    g.dsinks = ds;
    assert_int_equal(attn_sdpa_backward_grads(&tq, &tk, &tv, NULL, NULL, NULL, &tdo, &g), ATTN_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "dsinks"));
    attn_sdpa_grads zeroed = {0};
    assert_int_equal(attn_sdpa_backward_grads(&tq, &tk, &tv, NULL, NULL, NULL, &tdo, &zeroed), ATTN_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "ATTN_SDPA_GRADS_INIT"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(standard_slopes),
        cmocka_unit_test(bad_options),
        cmocka_unit_test(softcap_kernel_accuracy),
        cmocka_unit_test(forward_against_oracle),
        cmocka_unit_test(gradients_fd),
        cmocka_unit_test(flash_backward_against_ref),
        cmocka_unit_test(threads_bit_identical),
        cmocka_unit_test(alibi_follows_positions),
        cmocka_unit_test(softcap_bounds_overflow),
        cmocka_unit_test(sinks_neg_inf_are_off),
        cmocka_unit_test(sink_row_without_keys),
        cmocka_unit_test(nonfinite_with_features),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
