/*
 * test_eltwise.c — the decoder's elementwise micro-kernels
 * (src/isa/eltwise_table.h) of every ISA this CPU runs, and their
 * reference twins, against double-precision libm over dense sweeps:
 *   exp           every 67th float in [-104, 88.72] (about 33 million
 *                 arguments), max 2 ulp from exp() rounded to float where
 *                 that is a normal float, within FLT_MIN below; the
 *                 extremes: +inf above 88.73, ±inf, NaN
 *   SiLU, GELU    every 31st float in [-30, 30] and the extremes, against
 *                 x / (1 + exp(-x)) and PyTorch's formula in double:
 *                 max 4 + 3 |a| ulp, a the argument of e^-a (x, 2t: the
 *                 formula's own conditioning, the float roundings of a
 *                 become |a| times larger in e^-a), where |value| >=
 *                 2^-100, an error below 2^-100 under it (GELU below
 *                 x = -10); times u exactly one rounding
 *   RMSNorm       rows of random widths against double, 4e-7 relative
 *   add           bit for bit
 * and, for each, any length n gives each element the bits it has alone
 * (the masked tail computes what the full vectors compute).  The maxima
 * measured are printed (docs/models.md quotes them).
 */
#include "testutil.h"

#include "model/eltwise.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const names[] = {"ref", "generic", "avx2", "avx512"};
enum { NAMES = sizeof names / sizeof names[0] };

static uint32_t bits_of(float x) {
    uint32_t b;
    memcpy(&b, &x, sizeof b);
    return b;
}

static float float_of(uint32_t b) {
    float x;
    memcpy(&x, &b, sizeof x);
    return x;
}

/* Distance in ulps (floats between a and b), for finite a, b. */
static int64_t ulps(float a, float b) {
    int64_t ia = (int32_t)bits_of(a), ib = (int32_t)bits_of(b);
    if (ia < 0) ia = INT32_MIN - ia;
    if (ib < 0) ib = INT32_MIN - ib;
    return ia > ib ? ia - ib : ib - ia;
}

static int same_bits(float a, float b) { return bits_of(a) == bits_of(b) || (isnan(a) && isnan(b)); }

/* The floats from lo to hi (same sign or across 0), every step-th. */
static float *sweep(float lo, float hi, uint32_t step, int64_t *n) {
    int64_t count = 0, cap = 1 << 20;
    float *x = malloc((size_t)cap * sizeof *x);
    for (float v = lo; v <= hi;) {
        if (count == cap) x = realloc(x, (size_t)(cap *= 2) * sizeof *x);
        x[count++] = v;
        uint32_t b = bits_of(v);
        if (v < 0) b = b > 0x80000000u + step ? b - step : 0u; /* towards 0, then through it */
        else b += step;
        v = float_of(b);
    }
    *n = count;
    return x;
}

static double silu_d(double x) { return x / (1.0 + exp(-x)); }
/* PyTorch's formula 0.5 x (1 + tanh t) written as x / (1 + e^-2t), its
 * identity: in double 1 + tanh t cancels to 0 below x = -5.6 (the
 * reference twin's own limit, harmless at that size). */
static double gelu_two_t(double x) { return 2.0 * 0.7978845608028654 * (x + 0.044715 * x * x * x); }
static double gelu_d(double x) { return x / (1.0 + exp(-gelu_two_t(x))); }
static double silu_slack(double x) { return 3.0 * fabs(x); }
static double gelu_slack(double x) { return 3.0 * fabs(gelu_two_t(x)); }

/* The error of got against the double truth: ulps where |truth| >= tiny,
 * else 0 if within tiny (and a large count if not). */
static int64_t error_below(float got, double truth, double tiny) {
    const float t = (float)truth;
    if (isnan(truth)) return isnan(got) ? 0 : INT32_MAX;
    if (isinf(t)) return got == t ? 0 : INT32_MAX;
    if (fabs(truth) < tiny) return fabs((double)got - truth) <= tiny ? 0 : INT32_MAX;
    if (!isfinite(got)) return INT32_MAX;
    return ulps(got, t);
}

static int64_t error_of(float got, double truth) { return error_below(got, truth, FLT_MIN); }

static void test_exp(void **state) {
    (void)state;
    int64_t n;
    float *x = sweep(-104.0f, 88.72f, 67, &n);
    float *y = malloc((size_t)n * sizeof *y);
    for (int k = 0; k < NAMES; k++) {
        const eltwise_kernels *e = attn__eltwise_named(names[k]);
        if (!e) continue;
        e->exp(x, n, y);
        int64_t worst = 0;
        float at = 0;
        for (int64_t i = 0; i < n; i++) {
            const int64_t u = error_of(y[i], exp((double)x[i]));
            if (u > worst) worst = u, at = x[i];
        }
        printf("# exp %-8s %lld arguments in [-104, 88.72]: max %lld ulp (at %a)\n", names[k], (long long)n,
               (long long)worst, (double)at);
        if (worst > 2) fail_msg("exp on %s: %lld ulp at %a", names[k], (long long)worst, (double)at);
        const float special[] = {INFINITY, -INFINITY, NAN, 88.73f, 100.0f, 1e30f, -87.34f, -100.0f, -1e30f, 0.0f, -0.0f, 88.72f};
        float out[sizeof special / sizeof special[0]];
        e->exp(special, (int64_t)(sizeof special / sizeof special[0]), out);
        assert_true(out[0] == INFINITY && out[1] == 0.0f && isnan(out[2]) && out[3] == INFINITY && out[4] == INFINITY &&
                    out[5] == INFINITY);
        assert_true(out[6] > 0.0f && out[6] <= FLT_MIN && out[7] >= 0.0f && out[7] <= FLT_MIN && out[8] == 0.0f);
        assert_true(out[9] == 1.0f && out[10] == 1.0f && isfinite(out[11]) && ulps(out[11], expf(88.72f)) <= 2);
    }
    free(x);
    free(y);
}

/* slack(x): the ulps the argument a of e^-a may cost on top of the 4:
 * 3 |a| (a carries up to 1.5 ulp of float roundings, which e^-a turns
 * into a relative error |a| times larger: the formula's own conditioning
 * in float). */
static void check_gate(const char *what, void (*fn)(float *, const float *, int64_t), double (*truth)(double),
                       double (*slack)(double), const char *isa) {
    int64_t n, m;
    float *pos = sweep(0.0f, 30.0f, 31, &n), *neg = sweep(-30.0f, -0.0f, 31, &m);
    const float extremes[] = {INFINITY, -INFINITY, NAN, FLT_MAX, -FLT_MAX, 1e20f, -1e20f, 100.0f, -100.0f,
                              FLT_MIN, -FLT_MIN, 1e-40f, -1e-40f, 0.0f, -0.0f};
    const int64_t ne = (int64_t)(sizeof extremes / sizeof extremes[0]), total = n + m + ne;
    float *x = malloc((size_t)total * sizeof *x), *g = malloc((size_t)total * sizeof *g);
    float *ones = malloc((size_t)total * sizeof *ones);
    memcpy(x, pos, (size_t)n * sizeof *x);
    memcpy(x + n, neg, (size_t)m * sizeof *x);
    memcpy(x + n + m, extremes, sizeof extremes);
    for (int64_t i = 0; i < total; i++) ones[i] = 1.0f;
    memcpy(g, x, (size_t)total * sizeof *g);
    fn(g, ones, total);
    int64_t worst = 0, worst_near = 0;
    double excess = -1e300;
    float at = 0;
    for (int64_t i = 0; i < total; i++) {
        const double t = truth((double)x[i]); /* at -inf NaN, as in double (-inf / inf) */
        const int64_t u = error_below(g[i], t, 0x1p-100);
        const double sl = isfinite(x[i]) ? slack((double)x[i]) : 0.0;
        if (u > worst) worst = u;
        if (fabs(x[i]) <= 3.0f && u > worst_near) worst_near = u;
        if ((double)u - sl > excess) excess = (double)u - sl, at = x[i];
    }
    printf("# %s %-8s %lld arguments in [-30, 30] and the extremes: max %lld ulp, %lld for |x| <= 3, "
           "max (ulps - slack) %.1f (at %a)\n",
           what, isa, (long long)total, (long long)worst, (long long)worst_near, excess, (double)at);
    if (excess > 4) fail_msg("%s on %s: %.1f ulp beyond the slack at %a", what, isa, excess, (double)at);
    /* times u: the gate's value times u, one rounding */
    test_rng rng;
    test_rng_seed(&rng, 7);
    float gx[257], u[257], alone[257];
    for (int i = 0; i < 257; i++) gx[i] = (float)(test_rng_uniform(&rng) * 16 - 8), u[i] = (float)(test_rng_uniform(&rng) * 4 - 2);
    memcpy(alone, gx, sizeof gx);
    for (int i = 0; i < 257; i++) fn(alone + i, ones, 1);
    fn(gx, u, 257);
    for (int i = 0; i < 257; i++) assert_true(same_bits(gx[i], alone[i] * u[i]));
    free(pos), free(neg), free(x), free(g), free(ones);
}

static void test_gates(void **state) {
    (void)state;
    for (int k = 0; k < NAMES; k++) {
        const eltwise_kernels *e = attn__eltwise_named(names[k]);
        if (!e) continue;
        check_gate("silu", e->silu_mul, silu_d, silu_slack, names[k]);
        check_gate("gelu_tanh", e->gelu_tanh_mul, gelu_d, gelu_slack, names[k]);
    }
}

/* Any n: each element has the bits it has alone (the tail masks lanes,
 * never computes differently), for exp, the gates and add. */
static void test_lengths(void **state) {
    (void)state;
    test_rng rng;
    test_rng_seed(&rng, 11);
    float x[70], y[70], a[70], b[70];
    for (int k = 0; k < NAMES; k++) {
        const eltwise_kernels *e = attn__eltwise_named(names[k]);
        if (!e) continue;
        for (int n = 0; n <= 69; n++) {
            for (int i = 0; i < 70; i++) x[i] = (float)(test_rng_uniform(&rng) * 20 - 10), y[i] = (float)test_rng_uniform(&rng);
            const float sentinel = 12345.0f;
            memcpy(a, x, sizeof x);
            a[n] = sentinel;
            e->gelu_tanh_mul(a, y, n);
            assert_true(a[n] == sentinel);
            for (int i = 0; i < n; i++) {
                b[i] = x[i];
                e->gelu_tanh_mul(b + i, y + i, 1);
                assert_true(same_bits(a[i], b[i]));
            }
            memcpy(a, x, sizeof x);
            a[n] = sentinel;
            e->silu_mul(a, y, n);
            assert_true(a[n] == sentinel);
            for (int i = 0; i < n; i++) {
                b[i] = x[i];
                e->silu_mul(b + i, y + i, 1);
                assert_true(same_bits(a[i], b[i]));
            }
            b[n] = sentinel;
            e->exp(x, n, b);
            assert_true(b[n] == sentinel);
            for (int i = 0; i < n; i++) {
                float one;
                e->exp(x + i, 1, &one);
                assert_true(same_bits(b[i], one));
            }
            memcpy(a, x, sizeof x);
            e->add(a, y, n);
            for (int i = 0; i < 70; i++) assert_true(same_bits(a[i], i < n ? x[i] + y[i] : x[i]));
        }
    }
}

static void test_rmsnorm(void **state) {
    (void)state;
    test_rng rng;
    test_rng_seed(&rng, 5);
    enum { MAXN = 1100 };
    float *x = malloc(MAXN * sizeof *x), *w = malloc(MAXN * sizeof *w), *y = malloc(MAXN * sizeof *y);
    const int widths[] = {1, 2, 7, 15, 16, 17, 31, 33, 64, 100, 256, 640, 896, 1024, 1031};
    for (int k = 0; k < NAMES; k++) {
        const eltwise_kernels *e = attn__eltwise_named(names[k]);
        if (!e) continue;
        double worst = 0;
        for (size_t t = 0; t < sizeof widths / sizeof widths[0]; t++) {
            const int n = widths[t];
            const double scale = pow(10.0, (double)(t % 5) - 2);
            for (int i = 0; i < n; i++)
                x[i] = (float)((test_rng_uniform(&rng) * 2 - 1) * scale), w[i] = (float)(test_rng_uniform(&rng) * 3);
            double ss = 0;
            for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
            const double inv = 1.0 / sqrt(ss / n + 1e-6);
            e->rmsnorm(x, n, w, 1e-6, y);
            double big = 0;
            for (int i = 0; i < n; i++) big = fmax(big, fabs(x[i] * inv * w[i]));
            for (int i = 0; i < n; i++) worst = fmax(worst, fabs(y[i] - x[i] * inv * w[i]) / big);
        }
        printf("# rmsnorm %-8s max error %.2g of the row's largest value\n", names[k], worst);
        if (worst > 4e-7) fail_msg("rmsnorm on %s: error %g", names[k], worst);
    }
    free(x), free(w), free(y);
}

/* The choice: the reference on request, else a table this CPU runs. */
static void test_choice(void **state) {
    (void)state;
    assert_string_equal(attn__eltwise(1)->isa, "ref");
    const eltwise_kernels *e = attn__eltwise(0);
    assert_non_null(e);
    assert_non_null(attn__eltwise_named(e->isa));
    assert_null(attn__eltwise_named("no-such-isa"));
    assert_non_null(attn__eltwise_named("generic"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exp),
        cmocka_unit_test(test_gates),
        cmocka_unit_test(test_lengths),
        cmocka_unit_test(test_rmsnorm),
        cmocka_unit_test(test_choice),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
