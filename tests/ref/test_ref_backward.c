/*
 * test_grad.c — the reference gradients against finite differences.
 *
 * The loss is L = sum(dout * O) with a random dout, so dL/dO = dout and the
 * backward's dq, dk, dv are dL/dq, dL/dk, dL/dv.  Each input element x is
 * perturbed to x +- h and x +- 2h and the reference FORWARD (kernel ref,
 * float outputs) is run four times; the two central differences
 * c(h) = (L(x + h) - L(x - h)) / 2h are combined by Richardson,
 * fd = c(h) + (c(h) - c(2h)) / 3, which cancels the h^2 error term.
 *
 * Why the tolerance is sound (and why the test can fail) is told beside
 * FD_ABS_FAIL in tolerances.h.
 * The worst error seen is printed so that the margin is visible.
 */
#include "oracle.h"
#include "testutil.h"
#include "tolerances.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FD_STEP (1.0 / 64.0)     /* h = 2^-6 (and 2h)                 */
#define FD_GRID 4096.0           /* inputs rounded to multiples of 2^-12 */

static double worst_seen; /* max over all checks of |analytic - fd| / tolerance */

static void quantize(float *x, int64_t n) {
    for (int64_t e = 0; e < n; e++) x[e] = (float)(nearbyint((double)x[e] * FD_GRID) / FD_GRID);
}

/* Compares an analytic gradient with finite differences of loss(), which
 * reads the perturbed element x[e]. */
typedef double (*loss_fn)(void *ctx);

static void check_fd(const char *label, const char *what, float *x, int64_t n, const float *grad,
                     loss_fn loss, void *ctx) {
    for (int64_t e = 0; e < n; e++) {
        const float saved = x[e];
        double central[2];
        for (int k = 0; k < 2; k++) {
            const double h = FD_STEP * (1 << k);
            x[e] = (float)((double)saved + h);
            double plus = loss(ctx);
            x[e] = (float)((double)saved - h);
            double minus = loss(ctx);
            central[k] = (plus - minus) / (2.0 * h);
        }
        x[e] = saved;
        /* Richardson: the h^2 terms of steps h and 2h cancel. */
        double fd = central[0] + (central[0] - central[1]) / 3.0;
        double tol = FD_ABS_FAIL + FD_REL_FAIL * fabs(fd);
        double err = fabs((double)grad[e] - fd);
        if (!(err <= tol))
            fail_msg("%s: d%s[%lld] = %.7g but finite differences give %.7g (|diff| %.3g > %.3g)", label,
                     what, (long long)e, (double)grad[e], fd, err, tol);
        if (isnan((double)grad[e])) fail_msg("%s: d%s[%lld] is NaN", label, what, (long long)e);
        if (err / tol > worst_seen) worst_seen = err / tol;
        if (err > FD_ABS_WARN + FD_REL_FAIL * fabs(fd))
            print_message("warning: %s: d%s[%lld] off by %.3g\n", label, what, (long long)e, err);
    }
}

/* ------------------------------------------------------------- attention */


typedef struct sdpa_ctx {
    random_case *rc;
    attn_sdpa_options opt;
    float *dout, *out;
} sdpa_ctx;

static double sdpa_loss(void *p) {
    sdpa_ctx *c = p;
    const oracle_case *oc = &c->rc->c;
    attn_tensor q = attn_tensor_4d(c->rc->q, oc->B, oc->L, oc->Hq, oc->D);
    attn_tensor k = attn_tensor_4d(c->rc->k, oc->B, oc->S, oc->Hkv, oc->D);
    attn_tensor v = attn_tensor_4d(c->rc->v, oc->B, oc->S, oc->Hkv, oc->Dv);
    attn_tensor o = attn_tensor_4d(c->out, oc->B, oc->L, oc->Hq, oc->Dv);
    attn_status st = attn_sdpa_forward(&q, &k, &v, &c->opt, &o, NULL, NULL);
    if (st) fail_msg("forward: %s", attn_last_error());
    double sum = 0;
    for (int64_t e = 0; e < oc->B * oc->L * oc->Hq * oc->Dv; e++) sum += (double)c->dout[e] * c->out[e];
    return sum;
}

/* Finite differences of every element of q, k and v for one problem. */
static void check_sdpa_case(random_case *rc, test_rng *r, const char *label) {
    const oracle_case *c = &rc->c;
    const int64_t nq = c->B * c->L * c->Hq * c->D, nk = c->B * c->S * c->Hkv * c->D,
                  nv = c->B * c->S * c->Hkv * c->Dv, no = c->B * c->L * c->Hq * c->Dv;
    quantize(rc->q, nq);
    quantize(rc->k, nk);
    quantize(rc->v, nv);
    sdpa_ctx ctx = {rc, random_case_options(rc), malloc(sizeof(float) * (size_t)no),
                    malloc(sizeof(float) * (size_t)no)};
    ctx.opt.kernel = ATTN_KERNEL_REF;
    test_fill_normal(r, ctx.dout, no, 1.0);
    float *dq = malloc(sizeof(float) * (size_t)nq), *dk = malloc(sizeof(float) * (size_t)nk),
          *dv = malloc(sizeof(float) * (size_t)nv);
    attn_tensor q = attn_tensor_4d(rc->q, c->B, c->L, c->Hq, c->D);
    attn_tensor k = attn_tensor_4d(rc->k, c->B, c->S, c->Hkv, c->D);
    attn_tensor v = attn_tensor_4d(rc->v, c->B, c->S, c->Hkv, c->Dv);
    attn_tensor dout = attn_tensor_4d(ctx.dout, c->B, c->L, c->Hq, c->Dv);
    attn_tensor dqt = attn_tensor_4d(dq, c->B, c->L, c->Hq, c->D);
    attn_tensor dkt = attn_tensor_4d(dk, c->B, c->S, c->Hkv, c->D);
    attn_tensor dvt = attn_tensor_4d(dv, c->B, c->S, c->Hkv, c->Dv);
    attn_status st = attn_sdpa_backward(&q, &k, &v, &ctx.opt, NULL, NULL, &dout, &dqt, &dkt, &dvt);
    if (st) fail_msg("%s: backward: %s", label, attn_last_error());
    check_fd(label, "q", rc->q, nq, dq, sdpa_loss, &ctx);
    check_fd(label, "k", rc->k, nk, dk, sdpa_loss, &ctx);
    check_fd(label, "v", rc->v, nv, dv, sdpa_loss, &ctx);
    free(ctx.dout); free(ctx.out); free(dq); free(dk); free(dv);
}

/* Every mask kind x group ratios 1, 2, 4, cross-attention shapes (L != S,
 * Dv != D) and self-attention shapes, random custom scales. */
static void sdpa_every_mask_and_group(void **state) {
    (void)state;
    test_rng r;
    test_rng_seed(&r, 404);
    static const int64_t ratios[] = {1, 2, 4};
    static const int64_t shapes[][4] = {{4, 4, 3, 3}, {3, 6, 4, 2}, {6, 3, 2, 5}}; /* L, S, D, Dv */
    int cases = 0;
    for (int kind = 0; kind < MASK_KIND_COUNT; kind++)
        for (int g = 0; g < 3; g++)
            for (int s = 0; s < 3; s++) {
                const int64_t Hkv = 1 + (kind + s) % 2, Hq = Hkv * ratios[g];
                random_case rc;
                random_case_make(&rc, &r, 2, shapes[s][0], shapes[s][1], Hq, Hkv, shapes[s][2], shapes[s][3],
                                 (enum mask_kind)kind);
                char label[160];
                snprintf(label, sizeof label, "mask=%s Hq=%lld Hkv=%lld L=%lld S=%lld D=%lld Dv=%lld scale=%g",
                         mask_kind_names[kind], (long long)Hq, (long long)Hkv, (long long)shapes[s][0],
                         (long long)shapes[s][1], (long long)shapes[s][2], (long long)shapes[s][3], rc.c.scale);
                check_sdpa_case(&rc, &r, label);
                random_case_free(&rc);
                cases++;
            }
    print_message("%d attention cases; worst |analytic - fd| / tolerance = %.3f\n", cases, worst_seen);
}

/* A custom scale, and rows that see no key (lower-right causal with L > S,
 * a key length of 0): their gradient is exactly 0, and never NaN. */
static void sdpa_scale_and_empty_rows(void **state) {
    (void)state;
    test_rng r;
    test_rng_seed(&r, 405);
    random_case rc;
    random_case_make(&rc, &r, 1, 5, 4, 2, 1, 3, 3, MASK_NONE);
    rc.c.scale = 0.7;
    check_sdpa_case(&rc, &r, "scale 0.7");
    random_case_free(&rc);

    random_case_make(&rc, &r, 1, 7, 3, 2, 1, 3, 2, MASK_CAUSAL_LOWER_RIGHT);
    check_sdpa_case(&rc, &r, "lower-right causal, L > S");
    random_case_free(&rc);

    random_case_make(&rc, &r, 2, 3, 4, 2, 2, 3, 3, MASK_KEY_LENGTHS);
    rc.key_lengths[0] = 0;
    rc.key_lengths[1] = 2;
    /* Check exact zeros on the empty batch, then finite differences. */
    float dout[2 * 3 * 2 * 3], dq[2 * 3 * 2 * 3], dk[2 * 4 * 2 * 3], dv[2 * 4 * 2 * 3];
    test_fill_normal(&r, dout, 36, 1.0);
    attn_tensor q = attn_tensor_4d(rc.q, 2, 3, 2, 3), k = attn_tensor_4d(rc.k, 2, 4, 2, 3),
                v = attn_tensor_4d(rc.v, 2, 4, 2, 3), dot = attn_tensor_4d(dout, 2, 3, 2, 3),
                dqt = attn_tensor_4d(dq, 2, 3, 2, 3), dkt = attn_tensor_4d(dk, 2, 4, 2, 3),
                dvt = attn_tensor_4d(dv, 2, 4, 2, 3);
    attn_sdpa_options opt = random_case_options(&rc);
    opt.kernel = ATTN_KERNEL_REF;
    assert_int_equal(attn_sdpa_backward(&q, &k, &v, &opt, NULL, NULL, &dot, &dqt, &dkt, &dvt), ATTN_OK);
    for (int e = 0; e < 18; e++) assert_true(dq[e] == 0.0f);             /* batch 0: no key */
    for (int e = 0; e < 24; e++) assert_true(dk[e] == 0.0f && dv[e] == 0.0f);
    for (int e = 24 + 12; e < 48; e++) assert_true(dk[e] == 0.0f && dv[e] == 0.0f); /* keys 2, 3 */
    check_sdpa_case(&rc, &r, "key lengths 0 and 2");
    random_case_free(&rc);
}

/* ---------------------------------------------------------------- module */

typedef struct mha_ctx {
    attn_mha m;
    const float *x, *context;
    int64_t B, L, S;
    attn_sdpa_options opt;
    float *dout, *out;
} mha_ctx;

static double mha_loss(void *p) {
    mha_ctx *c = p;
    attn_status st = attn_mha_forward(&c->m, c->x, c->B, c->L, c->context, c->S, &c->opt, c->out, NULL, NULL);
    if (st) fail_msg("mha forward: %s", attn_last_error());
    double sum = 0;
    for (int64_t e = 0; e < c->B * c->L * c->m.d_out; e++) sum += (double)c->dout[e] * c->out[e];
    return sum;
}

static float *random_param(test_rng *r, int64_t n, double scale) {
    float *x = malloc(sizeof(float) * (size_t)n);
    test_fill_normal(r, x, n, scale);
    quantize(x, n);
    return x;
}

/* Finite differences of every input and parameter of one module. */
static void check_module(test_rng *r, int cross, int64_t Hq, int64_t Hkv, int with_bias, int with_wo,
                         enum mask_kind kind) {
    const int64_t B = 2, L = 3, S = cross ? 5 : L, dm = 4, dc = cross ? 3 : dm, D = 2, Dv = 3;
    const int64_t dout_w = with_wo ? 3 : Hq * Dv;
    const int64_t n_wq = dm * Hq * D, n_wk = dc * Hkv * D, n_wv = dc * Hkv * Dv, n_wo = Hq * Dv * dout_w;
    float *x = random_param(r, B * L * dm, 1.0), *ctx = cross ? random_param(r, B * S * dc, 1.0) : NULL;
    float *wq = random_param(r, n_wq, 0.6), *wk = random_param(r, n_wk, 0.6), *wv = random_param(r, n_wv, 0.6);
    float *wo = with_wo ? random_param(r, n_wo, 0.6) : NULL;
    /* Biases are always allocated: without with_bias they are zero, which
     * must give the same gradients as a module without biases. */
    float *bq = random_param(r, Hq * D, with_bias ? 0.3 : 0), *bk = random_param(r, Hkv * D, with_bias ? 0.3 : 0),
          *bv = random_param(r, Hkv * Dv, with_bias ? 0.3 : 0), *bo = random_param(r, dout_w, with_bias ? 0.3 : 0);
    random_case rc; /* only its masks are used */
    random_case_make(&rc, r, B, L, S, Hq, Hkv, D, Dv, kind);
    mha_ctx c = {{.struct_size = sizeof(attn_mha), .d_model = dm, .d_context = dc, .heads = Hq, .kv_heads = Hkv, .head_dim = D, .value_dim = Dv,
                  .d_out = dout_w, .wq = wq, .wk = wk, .wv = wv, .wo = wo, .bq = bq, .bk = bk, .bv = bv, .bo = bo},
                 x, ctx, B, L, S, random_case_options(&rc), random_param(r, B * L * dout_w, 1.0),
                 malloc(sizeof(float) * (size_t)(B * L * dout_w))};
    c.opt.kernel = ATTN_KERNEL_REF;

    float *g[10];
    const int64_t sizes[10] = {B * L * dm, cross ? B * S * dc : 1, n_wq, n_wk, n_wv, with_wo ? n_wo : 1,
                               Hq * D, Hkv * D, Hkv * Dv, dout_w};
    for (int t = 0; t < 10; t++) g[t] = malloc(sizeof(float) * (size_t)sizes[t]);
    attn_mha_grads grads = {sizeof(attn_mha_grads), g[0], cross ? g[1] : NULL, g[2], g[3], g[4], with_wo ? g[5] : NULL,
                            g[6], g[7], g[8], g[9]};
    char label[160];
    snprintf(label, sizeof label, "mha cross=%d Hq=%lld Hkv=%lld bias=%d wo=%d mask=%s", cross, (long long)Hq,
             (long long)Hkv, with_bias, with_wo, mask_kind_names[kind]);
    if (attn_mha_backward(&c.m, x, B, L, ctx, S, &c.opt, c.dout, &grads))
        fail_msg("%s: backward: %s", label, attn_last_error());
    if (!with_bias) { /* the same gradients without the (zero) biases */
        attn_mha bare = c.m;
        bare.bq = bare.bk = bare.bv = bare.bo = NULL;
        float *g2[10];
        for (int t = 0; t < 10; t++) g2[t] = malloc(sizeof(float) * (size_t)sizes[t]);
        attn_mha_grads grads2 = {sizeof(attn_mha_grads), g2[0], cross ? g2[1] : NULL, g2[2], g2[3], g2[4], with_wo ? g2[5] : NULL,
                                 g2[6], g2[7], g2[8], g2[9]};
        if (attn_mha_backward(&bare, x, B, L, ctx, S, &c.opt, c.dout, &grads2))
            fail_msg("%s: backward without biases: %s", label, attn_last_error());
        for (int t = 0; t < 10; t++)
            if ((t != 1 || cross) && (t != 5 || with_wo))
                assert_memory_equal(g[t], g2[t], sizeof(float) * (size_t)sizes[t]);
        for (int t = 0; t < 10; t++) free(g2[t]);
    }
    check_fd(label, "x", x, B * L * dm, g[0], mha_loss, &c);
    if (cross) check_fd(label, "context", ctx, B * S * dc, g[1], mha_loss, &c);
    check_fd(label, "wq", wq, n_wq, g[2], mha_loss, &c);
    check_fd(label, "wk", wk, n_wk, g[3], mha_loss, &c);
    check_fd(label, "wv", wv, n_wv, g[4], mha_loss, &c);
    if (with_wo) check_fd(label, "wo", wo, n_wo, g[5], mha_loss, &c);
    check_fd(label, "bq", bq, Hq * D, g[6], mha_loss, &c);
    check_fd(label, "bk", bk, Hkv * D, g[7], mha_loss, &c);
    check_fd(label, "bv", bv, Hkv * Dv, g[8], mha_loss, &c);
    check_fd(label, "bo", bo, dout_w, g[9], mha_loss, &c);

    for (int t = 0; t < 10; t++) free(g[t]);
    free(x); free(ctx); free(wq); free(wk); free(wv); free(wo); free(bq); free(bk); free(bv); free(bo);
    free(c.dout); free(c.out);
    random_case_free(&rc);
}

/* Self- and cross-attention, group ratios 1, 2, 4, with and without biases
 * and W_O, under several mask kinds. */
static void module_gradients(void **state) {
    (void)state;
    test_rng r;
    test_rng_seed(&r, 406);
    static const enum mask_kind kinds[] = {MASK_NONE, MASK_CAUSAL, MASK_KEY_LENGTHS, MASK_BOOL_4D, MASK_BIAS, MASK_ALL};
    static const int64_t groups[][2] = {{2, 2}, {2, 1}, {4, 1}};
    int cases = 0;
    worst_seen = 0;
    for (int cross = 0; cross < 2; cross++)
        for (int gi = 0; gi < 3; gi++)
            for (int variant = 0; variant < 4; variant++) {
                enum mask_kind kind = kinds[(cross * 3 + gi * 2 + variant) % 6];
                check_module(&r, cross, groups[gi][0], groups[gi][1], variant & 1, (variant >> 1) & 1, kind);
                cases++;
            }
    print_message("%d module cases; worst |analytic - fd| / tolerance = %.3f\n", cases, worst_seen);
}

/* ------------------------------------------------------------ bad input */

/* Every error names the argument at fault; nothing is written on failure. */
static void bad_input(void **state) {
    (void)state;
    float buf[6][64] = {{0}};
    attn_tensor q = attn_tensor_4d(buf[0], 1, 3, 2, 2), k = attn_tensor_4d(buf[1], 1, 4, 1, 2),
                v = attn_tensor_4d(buf[2], 1, 4, 1, 3), dout = attn_tensor_4d(buf[3], 1, 3, 2, 3),
                dq = attn_tensor_4d(buf[4], 1, 3, 2, 2), dk = attn_tensor_4d(buf[5], 1, 4, 1, 2);
    float lse[6];
    attn_tensor wrong = attn_tensor_4d(buf[4], 1, 3, 2, 3);
    assert_refused(attn_sdpa_backward(&q, &k, NULL, NULL, NULL, NULL, &dout, &dq, NULL, NULL), ATTN_ERR_INVALID_ARGUMENT, "v");
    assert_refused(attn_sdpa_backward(&q, &k, &v, NULL, NULL, NULL, NULL, &dq, NULL, NULL), ATTN_ERR_INVALID_ARGUMENT, "dout");
    assert_refused(attn_sdpa_backward(&q, &k, &v, NULL, &dout, NULL, &dout, &dq, NULL, NULL), ATTN_ERR_INVALID_ARGUMENT, "lse");
    assert_refused(attn_sdpa_backward(&q, &k, &v, NULL, NULL, lse, &dout, &dq, NULL, NULL), ATTN_ERR_INVALID_ARGUMENT, "out");
    assert_refused(attn_sdpa_backward(&q, &k, &v, NULL, NULL, NULL, &dout, &wrong, NULL, NULL), ATTN_ERR_SHAPE, "dq");
    assert_refused(attn_sdpa_backward(&q, &k, &v, NULL, NULL, NULL, &dout, NULL, &wrong, NULL), ATTN_ERR_SHAPE, "dk");
    assert_refused(attn_sdpa_backward(&q, &k, &v, NULL, NULL, NULL, &dout, NULL, NULL, &dk), ATTN_ERR_SHAPE, "dv");
    assert_refused(attn_sdpa_backward(&q, &k, &v, NULL, NULL, NULL, &dq, NULL, NULL, &v), ATTN_ERR_SHAPE, "dout");
    attn_tensor strided = dq;
    strided.stride[3] = 2;
    assert_refused(attn_sdpa_backward(&q, &k, &v, NULL, NULL, NULL, &dout, &strided, NULL, NULL), ATTN_ERR_SHAPE, "contiguous");
    size_t bytes;
    assert_refused(attn_sdpa_backward_workspace_size(&q, &k, &v, NULL, NULL), ATTN_ERR_INVALID_ARGUMENT, "bytes");
    assert_int_equal(attn_sdpa_backward_workspace_size(&q, &k, &v, NULL, &bytes), ATTN_OK);
    attn_sdpa_options small = ATTN_SDPA_OPTIONS_INIT;
    small.workspace = buf[5];
    small.workspace_size = 1;
    if (bytes > 1)
        assert_refused(attn_sdpa_backward(&q, &k, &v, &small, NULL, NULL, &dout, &dq, NULL, NULL),
                       ATTN_ERR_INVALID_ARGUMENT, "workspace");

    assert_refused(attn_linear_backward(buf[0], 2, 2, buf[1], 2, NULL, buf[2], NULL, NULL), ATTN_ERR_INVALID_ARGUMENT, "dy");
    assert_refused(attn_linear_backward(buf[0], 2, 2, NULL, 2, buf[3], buf[2], NULL, NULL), ATTN_ERR_INVALID_ARGUMENT, "w");
    assert_refused(attn_linear_backward(buf[0], 0, 2, buf[1], 2, buf[3], buf[2], NULL, NULL), ATTN_ERR_SHAPE, "rows");

    attn_mha m = {.struct_size = sizeof(attn_mha), .d_model = 2, .heads = 2, .head_dim = 1, .d_out = 2, .wq = buf[0], .wk = buf[1], .wv = buf[2]};
    attn_mha_grads g = {.struct_size = sizeof(attn_mha_grads), .dx = buf[4]};
    assert_int_equal(attn_mha_backward(&m, buf[3], 1, 3, NULL, 0, NULL, buf[5], &g), ATTN_OK);
    g.dcontext = buf[5];
    assert_refused(attn_mha_backward(&m, buf[3], 1, 3, NULL, 0, NULL, buf[5], &g), ATTN_ERR_INVALID_ARGUMENT, "dcontext");
    g.dcontext = NULL;
    g.dwo = buf[5];
    assert_refused(attn_mha_backward(&m, buf[3], 1, 3, NULL, 0, NULL, buf[5], &g), ATTN_ERR_INVALID_ARGUMENT, "wo");
    assert_refused(attn_mha_backward(&m, buf[3], 1, 3, NULL, 0, NULL, NULL, &g), ATTN_ERR_INVALID_ARGUMENT, "dout");
    m.d_out = 3;
    g.dwo = NULL;
    assert_refused(attn_mha_backward(&m, buf[3], 1, 3, NULL, 0, NULL, buf[5], &g), ATTN_ERR_SHAPE, "d_out");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(sdpa_every_mask_and_group),
        cmocka_unit_test(sdpa_scale_and_empty_rows),
        cmocka_unit_test(module_gradients),
        cmocka_unit_test(bad_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
