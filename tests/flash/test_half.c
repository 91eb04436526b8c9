/*
 * test_half.c — float16 and bfloat16 storage in every kernel (forward tile
 * and rows paths, the split over keys and its merge, backward), on every
 * instruction set this CPU has (the registry's, forced in turn):
 *
 *   twin       a half tensor is widened exactly, so flash on half tensors
 *              must give the bits flash gives on float32 tensors holding
 *              the same values (its "float twin"); a half output must be
 *              the twin's output rounded to nearest even, bit for bit;
 *   reference  the reference on half tensors against the independent
 *              oracle (tests/support/oracle.c) on the widened values;
 *   flash      flash on half tensors against the reference on them;
 *   storage    the half result against the oracle on the unrounded float
 *              inputs, within a bound derived from the storage precision
 *              (below, and docs/kernels.md, "Half-precision storage");
 *   threads    1 and 2 threads give the same bits on every half path;
 *   convert    each ISA's widen / narrow against base/dtype.h, on every
 *              half and on floats around every rounding boundary.
 *
 * The storage bound.  A format with p significant bits (bfloat16 8,
 * float16 11, float32 24) rounds to nearest with relative error at most
 * u = 2^-p.  With q, k rounded (u_q, u_k), each product q_d·k_d moves by at
 * most (u_q + u_k + u_q·u_k)·|q_d·k_d|, so score s_ij moves by at most
 *   Delta = max_ij scale · sum_d |q_id · k_jd| · (u_q + u_k + u_q·u_k).
 * A softmax weight p_j = e^s_j / sum e^s then changes by a factor within
 * [e^-2·Delta, e^2·Delta], so sum_j |p'_j − p_j| <= e^(2·Delta) − 1, and
 *   |o' − o| <= (e^(2·Delta) − 1) · max|v'| + u_v · max|v|
 *             + u_out · |o'| + the fp32 kernel's own error (tolerances.h),
 * weights move by at most e^(2·Delta) − 1 and lse by at most Delta.  The
 * test computes Delta from the data and checks each output against it.
 *
 * Shape legend: q [B, L, Hq, D]  k [B, S, Hkv, D]  v [B, S, Hkv, Dv]
 *               out [B, L, Hq, Dv]  weights [B, Hq, L, S]  lse [B, Hq, L]
 */
#include "oracle.h"
#include "tolerances.h"
#include "base/dtype.h"
#include "flash/flash.h"
#include "isa_list.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* The dtypes of one call's tensors. */
typedef struct dtypes {
    attn_dtype q, k, v, out;
} dtypes;

/* Mixes the sweeps rotate through: all half, half K/V under float Q (a
 * KV cache), half outputs, and mixes of the two formats. */
static const dtypes mixes[] = {
    {ATTN_F16, ATTN_F16, ATTN_F16, ATTN_F32},    {ATTN_BF16, ATTN_BF16, ATTN_BF16, ATTN_F32},
    {ATTN_F32, ATTN_BF16, ATTN_BF16, ATTN_F32},  {ATTN_F32, ATTN_F16, ATTN_F16, ATTN_F16},
    {ATTN_BF16, ATTN_BF16, ATTN_BF16, ATTN_BF16}, {ATTN_F16, ATTN_BF16, ATTN_F32, ATTN_F16},
    {ATTN_F32, ATTN_F32, ATTN_F16, ATTN_BF16},   {ATTN_BF16, ATTN_F16, ATTN_F16, ATTN_F32},
};
enum { MIX_COUNT = sizeof mixes / sizeof mixes[0] };

/* u = 2^-p: the largest relative rounding error of the format. */
static double unit_roundoff(attn_dtype dt) {
    return dt == ATTN_F16 ? 0x1p-11 : dt == ATTN_BF16 ? 0x1p-8 : 0x1p-24;
}

static const char *dt_name(attn_dtype dt) { return attn_dtype_name(dt); }

/* ---------------------------------------------------------------- storage */

static uint16_t narrow_one(attn_dtype dt, float x) {
    return dt == ATTN_F16 ? dtype_f32_to_f16(x) : dtype_f32_to_bf16(x);
}

static float widen_one(attn_dtype dt, uint16_t h) {
    return dt == ATTN_F16 ? dtype_f16_to_f32(h) : dtype_bf16_to_f32(h);
}

/* Storage of n floats in dt (malloc'd); with `round_in_place`, x becomes
 * the stored values widened (the float twin). */
static void *store(float *x, int64_t n, attn_dtype dt, bool round_in_place) {
    if (dt == ATTN_F32) {
        float *copy = malloc(sizeof(float) * (size_t)n);
        memcpy(copy, x, sizeof(float) * (size_t)n);
        return copy;
    }
    uint16_t *h = malloc(sizeof(uint16_t) * (size_t)n);
    for (int64_t e = 0; e < n; e++) {
        h[e] = narrow_one(dt, x[e]);
        if (round_in_place) x[e] = widen_one(dt, h[e]);
    }
    return h;
}

/* Stored outputs widened back to float. */
static void widen_all(const void *src, attn_dtype dt, float *dst, int64_t n) {
    if (dt == ATTN_F32) {
        memcpy(dst, src, sizeof(float) * (size_t)n);
        return;
    }
    for (int64_t e = 0; e < n; e++) dst[e] = widen_one(dt, ((const uint16_t *)src)[e]);
}

/* One problem in its dtypes: the random case (its float arrays hold the
 * rounded values: the twin), the unrounded originals, and the storage. */
typedef struct half_case {
    random_case rc;
    dtypes dt;
    float *q0, *k0, *v0; /* before rounding */
    void *qs, *ks, *vs;  /* in dt           */
    int64_t nq, nk, nv, nout, nw, nlse;
} half_case;

static float *dup(const float *x, int64_t n) {
    float *c = malloc(sizeof(float) * (size_t)n);
    memcpy(c, x, sizeof(float) * (size_t)n);
    return c;
}

static void half_case_make(half_case *hc, test_rng *r, int64_t B, int64_t L, int64_t S, int64_t Hq,
                           int64_t Hkv, int64_t D, int64_t Dv, enum mask_kind kind, dtypes dt) {
    random_case_make(&hc->rc, r, B, L, S, Hq, Hkv, D, Dv, kind);
    hc->dt = dt;
    hc->nq = B * L * Hq * D;
    hc->nk = B * S * Hkv * D;
    hc->nv = B * S * Hkv * Dv;
    hc->nout = B * L * Hq * Dv;
    hc->nw = B * Hq * L * S;
    hc->nlse = B * Hq * L;
    hc->q0 = dup(hc->rc.q, hc->nq);
    hc->k0 = dup(hc->rc.k, hc->nk);
    hc->v0 = dup(hc->rc.v, hc->nv);
    hc->qs = store(hc->rc.q, hc->nq, dt.q, true);
    hc->ks = store(hc->rc.k, hc->nk, dt.k, true);
    hc->vs = store(hc->rc.v, hc->nv, dt.v, true);
}

static void half_case_free(half_case *hc) {
    random_case_free(&hc->rc);
    free(hc->q0), free(hc->k0), free(hc->v0);
    free(hc->qs), free(hc->ks), free(hc->vs);
}

static void label_of(char *buf, size_t cap, const half_case *hc, enum mask_kind kind, const char *isa) {
    const oracle_case *c = &hc->rc.c;
    snprintf(buf, cap, "[%s] B=%lld L=%lld S=%lld Hq=%lld Hkv=%lld D=%lld Dv=%lld mask=%s q=%s k=%s v=%s out=%s", isa,
             (long long)c->B, (long long)c->L, (long long)c->S, (long long)c->Hq, (long long)c->Hkv,
             (long long)c->D, (long long)c->Dv, mask_kind_names[kind], dt_name(hc->dt.q), dt_name(hc->dt.k),
             dt_name(hc->dt.v), dt_name(hc->dt.out));
}

/* ---------------------------------------------------------------- running */

/* The outputs of one forward call: out in its dtype, and widened. */
typedef struct result {
    void *out_stored;
    float *out, *w, *lse;
} result;

static void result_alloc(result *res, const half_case *hc) {
    res->out_stored = malloc(sizeof(float) * (size_t)hc->nout);
    res->out = malloc(sizeof(float) * (size_t)hc->nout);
    res->w = malloc(sizeof(float) * (size_t)hc->nw);
    res->lse = malloc(sizeof(float) * (size_t)hc->nlse);
    memset(res->out_stored, 0xFF, sizeof(float) * (size_t)hc->nout); /* NaN: a forgotten write shows */
    for (int64_t e = 0; e < hc->nw; e++) res->w[e] = NAN;
    for (int64_t e = 0; e < hc->nlse; e++) res->lse[e] = NAN;
}

static void result_free(result *res) {
    free(res->out_stored), free(res->out), free(res->w), free(res->lse);
}

/* The forward of hc on `kernel`: in its dtypes (twin = false) or on its
 * float twin (every input float32, out float32). */
static void forward(const half_case *hc, bool twin, attn_kernel kernel, int threads, bool with_weights,
                    result *res) {
    const oracle_case *c = &hc->rc.c;
    const dtypes f32 = {ATTN_F32, ATTN_F32, ATTN_F32, ATTN_F32};
    const dtypes dt = twin ? f32 : hc->dt;
    attn_tensor q = attn_tensor_view(twin ? hc->rc.q : hc->qs, dt.q, c->B, c->L, c->Hq, c->D);
    attn_tensor k = attn_tensor_view(twin ? hc->rc.k : hc->ks, dt.k, c->B, c->S, c->Hkv, c->D);
    attn_tensor v = attn_tensor_view(twin ? hc->rc.v : hc->vs, dt.v, c->B, c->S, c->Hkv, c->Dv);
    attn_tensor o = attn_tensor_view(res->out_stored, dt.out, c->B, c->L, c->Hq, c->Dv);
    attn_sdpa_options opt = random_case_options(&hc->rc);
    opt.kernel = kernel;
    opt.threads = threads;
    attn_status st = attn_sdpa_forward(&q, &k, &v, &opt, &o, with_weights ? res->w : NULL,
                                       with_weights ? res->lse : NULL);
    if (st != ATTN_OK) fail_msg("forward: status %d: %s", st, attn_last_error());
    widen_all(res->out_stored, dt.out, res->out, hc->nout);
}

static bool same_bits(const void *a, const void *b, size_t bytes) { return memcmp(a, b, bytes) == 0; }

/* max |a − b| (equal infinities agree; any other non-finite mismatch is
 * infinite). */
static double max_diff(const float *a, const float *b, int64_t n) {
    double worst = 0;
    for (int64_t e = 0; e < n; e++) {
        if (isnan(a[e]) != isnan(b[e])) return INFINITY;
        if (isnan(a[e]) || a[e] == b[e]) continue;
        double d = fabs((double)a[e] - (double)b[e]);
        if (!(d <= worst)) worst = d;
    }
    return worst;
}

/* sigma of tolerances.h's FLASH_ bounds: scale · rms(q) · rms(k) · sqrt(D). */
static double score_spread(const half_case *hc) {
    return oracle_score_spread(&hc->rc.c, hc->rc.q, hc->nq, hc->rc.k, hc->nk);
}

static double value_rms(const half_case *hc) {
    double sum = 0;
    for (int64_t e = 0; e < hc->nv; e++) sum += (double)hc->rc.v[e] * hc->rc.v[e];
    return sqrt(sum / (double)hc->nv);
}

/* --------------------------------------------------------------- the sweep */

/* Runs the twin, flash and reference checks of one case on every ISA. */
static void check_case(half_case *hc, enum mask_kind kind, bool with_weights) {
    const oracle_case *c = &hc->rc.c;
    char label[320];
    result twin_ref, ref;
    result_alloc(&twin_ref, hc);
    result_alloc(&ref, hc);
    forward(hc, false, ATTN_KERNEL_REF, 0, with_weights, &ref);

    /* reference on half tensors against the oracle on the same values */
    double *o_or = malloc(sizeof(double) * (size_t)hc->nout), *w_or = malloc(sizeof(double) * (size_t)hc->nw);
    double *lse_or = malloc(sizeof(double) * (size_t)hc->nlse);
    oracle_attention(c, hc->rc.q, hc->rc.k, hc->rc.v, o_or, w_or, lse_or);
    const double u_out = unit_roundoff(hc->dt.out);
    {
        const double scale = fmax(1.0, max_abs(o_or, hc->nout));
        double worst = 0;
        for (int64_t e = 0; e < hc->nout; e++) {
            /* REF_OUT_REL (the kernel's double accumulation) plus one
             * rounding to the output's format: u_out·|o|, and for float16
             * subnormals half their spacing, 2^-25. */
            const double allowed = REF_OUT_REL_FAIL * scale + u_out * fabs(o_or[e]) + 0x1p-25;
            const double d = fabs(o_or[e] - (double)ref.out[e]);
            if (!(d <= allowed)) {
                label_of(label, sizeof label, hc, kind, "ref");
                fail_msg("%s: out[%lld] = %.9g, oracle %.9g (allowed %.3g)", label, (long long)e,
                         (double)ref.out[e], o_or[e], allowed);
            }
            if (d > worst) worst = d;
        }
        if (with_weights && (max_abs_diff(w_or, ref.w, hc->nw) > REF_WEIGHT_ABS_FAIL ||
                             max_abs_diff(lse_or, ref.lse, hc->nlse) > REF_LSE_ABS_FAIL)) {
            label_of(label, sizeof label, hc, kind, "ref");
            fail_msg("%s: weights or lse off the oracle", label);
        }
    }

    const double sigma = score_spread(hc), factor = sigma > 1 ? sigma : 1;
    const double out_scale = fmax(max_abs_finite(ref.out, hc->nout), value_rms(hc));
    for (int i = 0; i < attn__isa_count(); i++) {
        if (!test_isa_use(i)) continue;
        label_of(label, sizeof label, hc, kind, attn__isa_name(i));
        result twin, got;
        result_alloc(&twin, hc);
        result_alloc(&got, hc);
        forward(hc, true, ATTN_KERNEL_FLASH, 0, with_weights, &twin);
        forward(hc, false, ATTN_KERNEL_FLASH, 0, with_weights, &got);
        /* the twin: the same bits, a half output the twin's rounded once */
        if (hc->dt.out == ATTN_F32) {
            if (!same_bits(twin.out, got.out, sizeof(float) * (size_t)hc->nout))
                fail_msg("%s: out differs from the float twin's (max %.3g)", label, max_diff(twin.out, got.out, hc->nout));
        } else {
            uint16_t *want = malloc(sizeof(uint16_t) * (size_t)hc->nout);
            for (int64_t e = 0; e < hc->nout; e++) want[e] = narrow_one(hc->dt.out, twin.out[e]);
            if (!same_bits(want, got.out_stored, sizeof(uint16_t) * (size_t)hc->nout))
                fail_msg("%s: the half out is not the twin's out rounded to nearest even", label);
            free(want);
        }
        if (with_weights && (!same_bits(twin.w, got.w, sizeof(float) * (size_t)hc->nw) ||
                             !same_bits(twin.lse, got.lse, sizeof(float) * (size_t)hc->nlse)))
            fail_msg("%s: weights or lse differ from the float twin's", label);
        /* flash against the reference on the same half tensors: the fp32
         * kernel's bound (tolerances.h), plus, for a half output, one unit
         * in its last place (both round to nearest, from values that differ
         * by the fp32 error): 2·u_out·|o|. */
        for (int64_t e = 0; e < hc->nout; e++) {
            const double allowed = FLASH_OUT_REL_FAIL * factor * out_scale + 2.0 * u_out * fabs((double)ref.out[e]) + 0x1p-24;
            const double d = fabs((double)ref.out[e] - (double)got.out[e]);
            if (isnan(ref.out[e]) != isnan(got.out[e]) || d > allowed)
                fail_msg("%s: flash out[%lld] = %.9g, reference %.9g (allowed %.3g)", label, (long long)e,
                         (double)got.out[e], (double)ref.out[e], allowed);
        }
        if (with_weights && max_diff(ref.w, got.w, hc->nw) > FLASH_WEIGHT_ABS_FAIL * factor)
            fail_msg("%s: weights off the reference by %.3g", label, max_diff(ref.w, got.w, hc->nw));
        result_free(&twin);
        result_free(&got);
    }
    test_isa_restore();
    free(o_or), free(w_or), free(lse_or);
    result_free(&twin_ref);
    result_free(&ref);
}

/* Odd sizes: (L, S) over {1, 3, 17, 113} x {1, 17, 113, 1500} (S = 1500 on
 * one query splits the keys into chunks and merges them), widths 1, 40, 80,
 * 128; the mask kind, the GQA ratio (1, 2, 4, 8) and the dtype mix rotate. */
static void sweep_against_reference(void **state) {
    (void)state;
    static const int64_t lens_q[] = {1, 3, 17, 113}, lens_kv[] = {1, 17, 113, 1500};
    static const int64_t widths[] = {1, 40, 80, 128};
    static const int64_t ratios[] = {1, 2, 4, 8};
    test_rng r;
    test_rng_seed(&r, 1010);
    int cases = 0;
    for (int li = 0; li < 4; li++)
        for (int si = 0; si < 4; si++)
            for (int di = 0; di < 4; di++) {
                const int64_t L = lens_q[li], S = lens_kv[si], D = widths[di];
                if (L * S > 20000 && di % 2) continue; /* half the widths for the long pairs */
                const int64_t ratio = ratios[(li + 2 * si + di) % 4];
                const int64_t Hkv = 1 + (li + di) % 2, B = (li + si + di) % 3 == 0 ? 2 : 1;
                const int64_t Dv = (li + di) % 2 ? D : 1 + (int64_t)((si * 37 + di * 11) % 90);
                const enum mask_kind kind = (enum mask_kind)((li * 7 + si * 3 + di) % MASK_KIND_COUNT);
                half_case hc;
                half_case_make(&hc, &r, B, L, S, Hkv * ratio, Hkv, D, Dv, kind, mixes[cases % MIX_COUNT]);
                check_case(&hc, kind, L * S <= 40000);
                half_case_free(&hc);
                cases++;
            }
    print_message("checked %d half-precision cases\n", cases);
}

/* Every mask kind with every GQA ratio, prefill and decode shapes, with
 * weights and lse, every dtype mix in turn. */
static void every_mask_kind_and_ratio(void **state) {
    (void)state;
    static const int64_t shapes[][2] = {{40, 40}, {1, 300}, {5, 200}, {70, 9}};
    static const int64_t ratios[] = {1, 2, 4, 8};
    test_rng r;
    test_rng_seed(&r, 1011);
    int n = 0;
    for (int kind = 0; kind < MASK_KIND_COUNT; kind++)
        for (int s = 0; s < 4; s++)
            for (int g = 0; g < 4; g++, n++) {
                if ((kind + s + g) % 2) continue; /* half the grid: every kind, shape and ratio still appear */
                half_case hc;
                half_case_make(&hc, &r, 2, shapes[s][0], shapes[s][1], 2 * ratios[g], 2, 24, 20,
                               (enum mask_kind)kind, mixes[n % MIX_COUNT]);
                check_case(&hc, (enum mask_kind)kind, true);
                half_case_free(&hc);
            }
}

/* The storage bound of the header: half inputs against the oracle on the
 * unrounded float inputs. */
static void storage_error_within_derived_bound(void **state) {
    (void)state;
    static const int64_t shapes[][3] = {{1, 4096, 128}, {64, 200, 128}, {3, 513, 64}, {17, 17, 80}};
    test_rng r;
    test_rng_seed(&r, 1012);
    for (int s = 0; s < 4; s++)
        for (int m = 0; m < MIX_COUNT; m++) {
            half_case hc;
            const enum mask_kind kind = (enum mask_kind)((s + m) % 2 ? MASK_CAUSAL_LOWER_RIGHT : MASK_NONE);
            half_case_make(&hc, &r, 1, shapes[s][0], shapes[s][1], 4, 2, shapes[s][2], shapes[s][2], kind, mixes[m]);
            hc.rc.c.scale = 0; /* the default scale: the bound is stated for it */
            const oracle_case *c = &hc.rc.c;
            const double scale = 1.0 / sqrt((double)c->D);
            const double u_q = unit_roundoff(hc.dt.q), u_k = unit_roundoff(hc.dt.k), u_v = unit_roundoff(hc.dt.v);
            double delta = 0;
            for (int64_t i = 0; i < c->L; i++)
                for (int64_t h = 0; h < c->Hq; h++)
                    for (int64_t j = 0; j < c->S; j++) {
                        const float *q_i = hc.q0 + (i * c->Hq + h) * c->D;
                        const float *k_j = hc.k0 + (j * c->Hkv + h / (c->Hq / c->Hkv)) * c->D;
                        double sum = 0;
                        for (int64_t d = 0; d < c->D; d++) sum += fabs((double)q_i[d] * k_j[d]);
                        if (sum > delta) delta = sum;
                    }
            delta *= scale * (u_q + u_k + u_q * u_k);
            double *o0 = malloc(sizeof(double) * (size_t)hc.nout), *w0 = malloc(sizeof(double) * (size_t)hc.nw);
            double *lse0 = malloc(sizeof(double) * (size_t)hc.nlse);
            oracle_attention(c, hc.q0, hc.k0, hc.v0, o0, w0, lse0);
            result got;
            result_alloc(&got, &hc);
            forward(&hc, false, ATTN_KERNEL_AUTO, 0, true, &got);
            const double spread = expm1(2 * delta);
            const double v_max = fmax(max_abs_finite(hc.rc.v, hc.nv), max_abs_finite(hc.v0, hc.nv));
            const double fp32 = FLASH_OUT_REL_FAIL * fmax(1.0, score_spread(&hc)) * v_max;
            double worst_ratio = 0;
            for (int64_t e = 0; e < hc.nout; e++) {
                const double bound = spread * v_max + u_v * v_max + unit_roundoff(hc.dt.out) * fabs((double)got.out[e]) + fp32 + 0x1p-24;
                const double d = fabs((double)got.out[e] - o0[e]);
                if (!(d <= bound)) {
                    char label[320];
                    label_of(label, sizeof label, &hc, kind, "auto");
                    fail_msg("%s: out[%lld] off the unrounded problem by %.3g > bound %.3g (Delta %.3g)", label,
                             (long long)e, d, bound, delta);
                }
                if (d / bound > worst_ratio) worst_ratio = d / bound;
            }
            const double w_diff = max_abs_diff(w0, got.w, hc.nw), lse_diff = max_abs_diff(lse0, got.lse, hc.nlse);
            assert_true(w_diff <= spread + FLASH_WEIGHT_ABS_FAIL);
            assert_true(lse_diff <= delta + FLASH_LSE_REL_FAIL * fmax(1.0, max_abs(lse0, hc.nlse)));
            if (s == 0)
                print_message("storage q=%s k=%s v=%s out=%s D=%lld: Delta %.3g, worst out error %.2f of the bound\n",
                              dt_name(hc.dt.q), dt_name(hc.dt.k), dt_name(hc.dt.v), dt_name(hc.dt.out),
                              (long long)c->D, delta, worst_ratio);
            result_free(&got);
            free(o0), free(w0), free(lse0);
            half_case_free(&hc);
        }
}

/* ---------------------------------------------------------------- backward */

typedef struct grads {
    void *dq, *dk, *dv; /* in their dtypes */
    float *dq_f, *dk_f, *dv_f;
} grads;

static void grads_alloc(grads *g, const half_case *hc) {
    g->dq = calloc((size_t)hc->nq, sizeof(float));
    g->dk = calloc((size_t)hc->nk, sizeof(float));
    g->dv = calloc((size_t)hc->nv, sizeof(float));
    g->dq_f = malloc(sizeof(float) * (size_t)hc->nq);
    g->dk_f = malloc(sizeof(float) * (size_t)hc->nk);
    g->dv_f = malloc(sizeof(float) * (size_t)hc->nv);
}

static void grads_free(grads *g) {
    free(g->dq), free(g->dk), free(g->dv), free(g->dq_f), free(g->dk_f), free(g->dv_f);
}

/* The backward of hc with dout (float, or in dt_dout), gradients in
 * grad_dt (float on the twin).  The forward's out and lse are recomputed. */
static void backward(const half_case *hc, bool twin, const float *dout_f, const void *dout_s, attn_dtype dt_dout,
                     attn_dtype grad_dt, attn_kernel kernel, int threads, grads *g) {
    const oracle_case *c = &hc->rc.c;
    const dtypes f32 = {ATTN_F32, ATTN_F32, ATTN_F32, ATTN_F32};
    const dtypes dt = twin ? f32 : hc->dt;
    if (twin) dt_dout = grad_dt = ATTN_F32;
    attn_tensor q = attn_tensor_view(twin ? hc->rc.q : hc->qs, dt.q, c->B, c->L, c->Hq, c->D);
    attn_tensor k = attn_tensor_view(twin ? hc->rc.k : hc->ks, dt.k, c->B, c->S, c->Hkv, c->D);
    attn_tensor v = attn_tensor_view(twin ? hc->rc.v : hc->vs, dt.v, c->B, c->S, c->Hkv, c->Dv);
    attn_tensor dout = attn_tensor_view(twin ? (void *)dout_f : (void *)dout_s, dt_dout, c->B, c->L, c->Hq, c->Dv);
    attn_tensor dq = attn_tensor_view(g->dq, grad_dt, c->B, c->L, c->Hq, c->D);
    attn_tensor dk = attn_tensor_view(g->dk, grad_dt, c->B, c->S, c->Hkv, c->D);
    attn_tensor dv = attn_tensor_view(g->dv, grad_dt, c->B, c->S, c->Hkv, c->Dv);
    attn_sdpa_options opt = random_case_options(&hc->rc);
    opt.kernel = kernel;
    opt.threads = threads;
    attn_status st = attn_sdpa_backward(&q, &k, &v, &opt, NULL, NULL, &dout, &dq, &dk, &dv);
    if (st != ATTN_OK) fail_msg("backward: status %d: %s", st, attn_last_error());
    widen_all(g->dq, grad_dt, g->dq_f, hc->nq);
    widen_all(g->dk, grad_dt, g->dk_f, hc->nk);
    widen_all(g->dv, grad_dt, g->dv_f, hc->nv);
}

/* Gradient tensor `name` of flash against the reference: FLASH_GRAD_REL
 * of the largest magnitude (tolerances.h), plus one unit in the last place
 * of a half gradient (2·u·|g|). */
static void grad_compare(const float *ref, const float *got, int64_t n, attn_dtype dt, const char *name,
                         const char *label) {
    const double scale = fmax(1.0, max_abs_finite(ref, n));
    for (int64_t e = 0; e < n; e++) {
        const double allowed = FLASH_GRAD_REL_FAIL * scale + 2.0 * unit_roundoff(dt) * fabs((double)ref[e]) + 0x1p-24;
        const double d = fabs((double)ref[e] - (double)got[e]);
        if (isnan(ref[e]) != isnan(got[e]) || d > allowed)
            fail_msg("%s: %s[%lld] = %.9g, reference %.9g (allowed %.3g)", label, name, (long long)e,
                     (double)got[e], (double)ref[e], allowed);
    }
}

/* Half q, k, v, dout and gradients on the flash backward: the twin's bits
 * (gradients rounded once), and the reference's values, on every ISA. */
static void backward_against_twin_and_reference(void **state) {
    (void)state;
    static const int64_t shapes[][3] = {{17, 113, 40}, {70, 9, 24}, {1, 300, 64}, {113, 70, 1}, {40, 40, 80}};
    static const int64_t ratios[] = {1, 2, 4, 8};
    test_rng r;
    test_rng_seed(&r, 1013);
    int n = 0;
    for (int s = 0; s < 5; s++)
        for (int kind = 0; kind < MASK_KIND_COUNT; kind += 2, n++) {
            const enum mask_kind mk = (enum mask_kind)((kind + s) % MASK_KIND_COUNT);
            const dtypes mix = mixes[n % MIX_COUNT];
            const attn_dtype grad_dt = mix.out; /* the gradients take the mix's output dtype */
            const attn_dtype dout_dt = mix.q;
            half_case hc;
            half_case_make(&hc, &r, 1 + s % 2, shapes[s][0], shapes[s][1], 2 * ratios[n % 4], 2, shapes[s][2],
                           shapes[s][2] + s, mk, mix);
            float *dout_f = malloc(sizeof(float) * (size_t)hc.nout);
            test_fill_normal(&r, dout_f, hc.nout, 1.0);
            void *dout_s = store(dout_f, hc.nout, dout_dt, true);
            grads ref;
            grads_alloc(&ref, &hc);
            backward(&hc, false, dout_f, dout_s, dout_dt, grad_dt, ATTN_KERNEL_REF, 0, &ref);
            for (int i = 0; i < attn__isa_count(); i++) {
                if (!test_isa_use(i)) continue;
                char label[320];
                label_of(label, sizeof label, &hc, mk, attn__isa_name(i));
                grads twin, got;
                grads_alloc(&twin, &hc);
                grads_alloc(&got, &hc);
                backward(&hc, true, dout_f, dout_s, dout_dt, grad_dt, ATTN_KERNEL_FLASH, 0, &twin);
                backward(&hc, false, dout_f, dout_s, dout_dt, grad_dt, ATTN_KERNEL_FLASH, 0, &got);
                const float *twin_g[3] = {twin.dq_f, twin.dk_f, twin.dv_f};
                const void *got_g[3] = {got.dq, got.dk, got.dv};
                const int64_t sizes[3] = {hc.nq, hc.nk, hc.nv};
                static const char *const names[3] = {"dq", "dk", "dv"};
                for (int t = 0; t < 3; t++) {
                    void *want = store((float *)twin_g[t], sizes[t], grad_dt, false);
                    const size_t bytes = (size_t)sizes[t] * (grad_dt == ATTN_F32 ? sizeof(float) : sizeof(uint16_t));
                    if (!same_bits(want, got_g[t], bytes))
                        fail_msg("%s: %s is not the float twin's %s rounded once", label, names[t], names[t]);
                    free(want);
                }
                grad_compare(ref.dq_f, got.dq_f, hc.nq, grad_dt, "dq", label);
                grad_compare(ref.dk_f, got.dk_f, hc.nk, grad_dt, "dk", label);
                grad_compare(ref.dv_f, got.dv_f, hc.nv, grad_dt, "dv", label);
                grads_free(&twin);
                grads_free(&got);
            }
            test_isa_restore();
            grads_free(&ref);
            free(dout_f), free(dout_s);
            half_case_free(&hc);
        }
}

/* ----------------------------------------------------------------- threads */

/* 1 and 2 threads give the same bits on every half path: the tile path,
 * the rows path unsplit and split over keys (L = 1, S = 5000), and the
 * backward; on every ISA. */
static void bit_identical_across_threads(void **state) {
    (void)state;
    static const int64_t shapes[][2] = {{200, 300}, {1, 5000}, {2, 700}, {1, 100}};
    test_rng r;
    test_rng_seed(&r, 1014);
    for (int s = 0; s < 4; s++)
        for (int m = 0; m < MIX_COUNT; m += 3) {
            half_case hc;
            half_case_make(&hc, &r, 1, shapes[s][0], shapes[s][1], 8, 2, 64, 64, MASK_CAUSAL_LOWER_RIGHT, mixes[m]);
            for (int i = 0; i < attn__isa_count(); i++) {
                if (!test_isa_use(i)) continue;
                char label[320];
                label_of(label, sizeof label, &hc, MASK_CAUSAL_LOWER_RIGHT, attn__isa_name(i));
                result one, two;
                result_alloc(&one, &hc);
                result_alloc(&two, &hc);
                forward(&hc, false, ATTN_KERNEL_FLASH, 1, true, &one);
                forward(&hc, false, ATTN_KERNEL_FLASH, 2, true, &two);
                if (!same_bits(one.out, two.out, sizeof(float) * (size_t)hc.nout) ||
                    !same_bits(one.w, two.w, sizeof(float) * (size_t)hc.nw) ||
                    !same_bits(one.lse, two.lse, sizeof(float) * (size_t)hc.nlse))
                    fail_msg("%s: forward differs between 1 and 2 threads", label);
                result_free(&one);
                result_free(&two);
                if (shapes[s][0] * shapes[s][1] <= 20000) {
                    float *dout_f = malloc(sizeof(float) * (size_t)hc.nout);
                    test_fill_normal(&r, dout_f, hc.nout, 1.0);
                    void *dout_s = store(dout_f, hc.nout, hc.dt.q, true);
                    grads g1, g2;
                    grads_alloc(&g1, &hc);
                    grads_alloc(&g2, &hc);
                    backward(&hc, false, dout_f, dout_s, hc.dt.q, hc.dt.out, ATTN_KERNEL_FLASH, 1, &g1);
                    backward(&hc, false, dout_f, dout_s, hc.dt.q, hc.dt.out, ATTN_KERNEL_FLASH, 2, &g2);
                    if (!same_bits(g1.dq_f, g2.dq_f, sizeof(float) * (size_t)hc.nq) ||
                        !same_bits(g1.dk_f, g2.dk_f, sizeof(float) * (size_t)hc.nk) ||
                        !same_bits(g1.dv_f, g2.dv_f, sizeof(float) * (size_t)hc.nv))
                        fail_msg("%s: backward differs between 1 and 2 threads", label);
                    grads_free(&g1);
                    grads_free(&g2);
                    free(dout_f), free(dout_s);
                }
            }
            test_isa_restore();
            half_case_free(&hc);
        }
}

/* ---------------------------------------------------------------- convert */

/* Each ISA's widen and narrow against base/dtype.h: every one of the 65536
 * halves of both formats widened (NaNs compared as bits), and narrowed
 * floats around every half's rounding boundaries: the halves themselves,
 * the midpoints between neighbours (ties), one float step either side of
 * them, infinities and NaNs with payloads; lengths that leave tails. */
static void widen_and_narrow_match_dtype_h(void **state) {
    (void)state;
    enum { N = 65536, M = 65536 * 5 };
    uint16_t *halves = malloc(sizeof(uint16_t) * N), *narrowed = malloc(sizeof(uint16_t) * M);
    float *wide = malloc(sizeof(float) * N), *floats = malloc(sizeof(float) * M);
    for (int e = 0; e < N; e++) halves[e] = (uint16_t)e;
    int checked = 0;
    for (int i = 0; i < attn__isa_count(); i++) {
        if (!test_isa_use(i)) continue;
        const ukernel_table *kern = attn__isa_flash(i);
        for (int f = 0; f < 2; f++) {
            const attn_dtype dt = f ? ATTN_BF16 : ATTN_F16;
            kern->widen(halves, dt, wide, N - 3); /* a tail */
            kern->widen(halves + N - 3, dt, wide + N - 3, 3);
            for (int e = 0; e < N; e++) {
                float want = widen_one(dt, (uint16_t)e);
                uint32_t want_bits, got_bits;
                memcpy(&want_bits, &want, sizeof want);
                memcpy(&got_bits, &wide[e], sizeof want);
                /* vcvtph2ps quiets a signalling NaN: the quiet bit may differ, nothing else */
                if (isnan(want)) want_bits |= 0x00400000u, got_bits |= 0x00400000u;
                if (want_bits != got_bits)
                    fail_msg("[%s] widen %s 0x%04x: %a, dtype.h %a", attn__isa_name(i), dt_name(dt), e, (double)wide[e], (double)want);
            }
            for (int e = 0; e < N; e++) {
                const float x = widen_one(dt, (uint16_t)e), y = widen_one(dt, (uint16_t)(e + 1 < N ? e + 1 : e));
                const float mid = isfinite(x) && isfinite(y) ? (float)(((double)x + (double)y) / 2) : x;
                floats[5 * e] = x;
                floats[5 * e + 1] = mid;
                floats[5 * e + 2] = nextafterf(mid, INFINITY);
                floats[5 * e + 3] = nextafterf(mid, -INFINITY);
                uint32_t bits = 0x7F800001u + (uint32_t)e * 97u; /* NaNs of many payloads, and large floats */
                memcpy(&floats[5 * e + 4], &bits, sizeof bits);
            }
            kern->narrow(floats, dt, narrowed, M - 5);
            kern->narrow(floats + M - 5, dt, narrowed + M - 5, 5);
            for (int e = 0; e < M; e++) {
                const uint16_t want = narrow_one(dt, floats[e]);
                if (want != narrowed[e])
                    fail_msg("[%s] narrow %s %a: 0x%04x, dtype.h 0x%04x", attn__isa_name(i), dt_name(dt), (double)floats[e],
                             narrowed[e], want);
            }
        }
        checked++;
    }
    test_isa_restore();
    assert_true(checked >= 1);
    free(halves), free(narrowed), free(wide), free(floats);
}

/* The precision option: exact and fast are taken (fast falls back to exact
 * where there is no native path, so the bits agree there), others refused. */
static void precision_option(void **state) {
    (void)state;
    test_rng r;
    test_rng_seed(&r, 1015);
    half_case hc;
    half_case_make(&hc, &r, 1, 33, 70, 4, 2, 32, 32, MASK_NONE, mixes[1]);
    const oracle_case *c = &hc.rc.c;
    attn_tensor q = attn_tensor_view(hc.qs, hc.dt.q, c->B, c->L, c->Hq, c->D);
    attn_tensor k = attn_tensor_view(hc.ks, hc.dt.k, c->B, c->S, c->Hkv, c->D);
    attn_tensor v = attn_tensor_view(hc.vs, hc.dt.v, c->B, c->S, c->Hkv, c->Dv);
    float *o = malloc(sizeof(float) * (size_t)hc.nout);
    attn_tensor out = attn_tensor_4d(o, c->B, c->L, c->Hq, c->Dv);
    attn_sdpa_options opt = ATTN_SDPA_OPTIONS_INIT;
    opt.precision = (attn_precision)7;
    assert_int_equal(attn_sdpa_forward(&q, &k, &v, &opt, &out, NULL, NULL), ATTN_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "precision"));
    opt.precision = ATTN_PRECISION_FAST;
    assert_int_equal(attn_sdpa_forward(&q, &k, &v, &opt, &out, NULL, NULL), ATTN_OK);
    free(o);
    half_case_free(&hc);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(widen_and_narrow_match_dtype_h),
        cmocka_unit_test(sweep_against_reference),
        cmocka_unit_test(every_mask_kind_and_ratio),
        cmocka_unit_test(storage_error_within_derived_bound),
        cmocka_unit_test(backward_against_twin_and_reference),
        cmocka_unit_test(bit_identical_across_threads),
        cmocka_unit_test(precision_option),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
