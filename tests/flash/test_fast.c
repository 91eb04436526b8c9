/*
 * test_fast.c — `precision = fast` (native bfloat16 dot products on the
 * flash forward's tile path, docs/kernels.md "precision = fast"):
 *
 *   accuracy   fast (and exact) against a double-precision reference
 *              computed here on the stored half values, for bfloat16 and
 *              float16 storage, D = 64 and 128, full and causal, within the
 *              bound derived below; an emulated kernel that accumulates P·V
 *              in bfloat16 must FAIL the same bound (so the bound has teeth);
 *   threads    fast gives the same bits on 1 and 2 threads;
 *   fallback   where fast cannot run natively (a CPU without AVX512-BF16, or
 *              ATTN_ARCH forcing avx2 / generic), fast gives exact's bits;
 *   nonfinite  an Inf in V: fast marks the same rows non-finite as exact,
 *              and the other rows stay finite;
 *   name       attn_sdpa_kernel_name says "flash-bf16" exactly when the
 *              native path runs;
 *   mixed      float32 q with half k, v (only P·V native), half q, k with
 *              float32 v (only Q·Kᵀ native).
 *
 * With ATTN_FAST_TABLE=1 the accuracy test prints the table of
 * docs/kernels.md instead (L = S up to 4096; a few minutes).
 *
 * The bound.  u = 2^-8 (bfloat16's unit roundoff: 8 significant bits,
 * round to nearest).  The fast path rounds to bf16: the scaled queries (and
 * float16 q, k, v), and each probability P; products are exact and
 * accumulated in fp32.  To first order, with w_j the exact weights of a row
 * and o its output,
 *     o' − o = sum_j w_j (e_j + ds_j) (v_j − o) + sum_j w_j f_j v_j
 * where |e_j| <= 2u (P rounded, normalised by the sum of rounded P), f_j
 * the rounding of v (u for float16, 0 for bfloat16), and ds_j the score's
 * error in natural units: each of its D products carries a relative
 * rounding error of at most u_s (u for bf16, 3u for f16 storage), and these
 * are independent with mean zero (round to nearest even), so ds_j is about
 * u_s · scale · sqrt(sum_d (q_d k_d)^2) <= u_s · sigma, sigma the score
 * spread scale·rms(q)·rms(k)·sqrt(D).  Independent terms over j add in
 * quadrature: |o' − o| ≈ ||w||_2 · (2u + u_s·sigma + u_v) · 2·max|v|, and
 * the test allows FAST_Z = 6 such standard deviations for the maximum over
 * every element:
 *     |o' − o| <= FAST_Z · ||w||_2 · (2u + u_s·sigma + u_v) · 2·max|v| + exact's fp32 bound.
 * (A worst-case bound, every error pointing one way, replaces ||w||_2 by
 * sum_j w_j = 1 and the sqrt(D) inside sigma by D: true but too loose to
 * catch a kernel that accumulates in bfloat16, whose error grows like
 * u·sqrt(S)·|v|, i.e. ~sqrt(S) times ||w||_2 ~ 1/sqrt(S) times bigger.)
 * lse: to first order lse' − lse = sum_j w_j (e_j + ds_j).  The rounding of
 * the scaled query is one perturbation dq shared by every key, so its part
 * is scale · dq · k_bar with k_bar = sum_j w_j k_j, the weighted mean key,
 * which does NOT shrink with S (softmax tilts k_bar towards q): it is
 * bounded by u · scale · sum_d |q_d k_bar_d| outright; the rest (P's
 * rounding, a float16 key's) is independent per key as above:
 *     |lse' − lse| <= FAST_Z·||w||_2·(2u + (u_s − u)·sigma) + u·scale·sum_d |q_d·k_bar_d| + 2^-20·|lse|.
 *
 * Shape legend: q [B, L, Hq, D]  k [B, S, Hkv, D]  v [B, S, Hkv, Dv]
 *               out [B, L, Hq, Dv]  lse [B, Hq, L]
 */
#include "testutil.h"
#include "base/dtype.h"
#include "isa_list.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FAST_Z 6.0
#define U_BF16 0x1p-8

/* ------------------------------------------------------------------ data */

static uint64_t rng_state;
static double rng_normal(void) {
    double u[2];
    for (int i = 0; i < 2; i++) {
        rng_state += 0x9E3779B97F4A7C15ull;
        uint64_t z = rng_state;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        u[i] = ((double)(z >> 11) + 0.5) * 0x1p-53;
    }
    return sqrt(-2.0 * log(u[0])) * cos(6.283185307179586 * u[1]);
}

/* A problem in one storage dtype: the stored tensors and their values. */
typedef struct fast_case {
    int64_t L, S, Hq, Hkv, D;
    int causal;
    attn_dtype dt;
    uint16_t *q, *k, *v;   /* stored                 */
    double *qd, *kd, *vd;  /* the stored values      */
} fast_case;

static void fill(uint16_t **h, double **d, int64_t n, attn_dtype dt, double spread) {
    *h = malloc(sizeof(uint16_t) * (size_t)n);
    *d = malloc(sizeof(double) * (size_t)n);
    for (int64_t e = 0; e < n; e++) {
        float x = (float)(spread * rng_normal());
        (*h)[e] = dt == ATTN_F16 ? dtype_f32_to_f16(x) : dtype_f32_to_bf16(x);
        (*d)[e] = dt == ATTN_F16 ? dtype_f16_to_f32((*h)[e]) : dtype_bf16_to_f32((*h)[e]);
    }
}

static void case_make(fast_case *c, int64_t L, int64_t S, int64_t Hq, int64_t Hkv, int64_t D, int causal,
                      attn_dtype dt, uint64_t seed) {
    *c = (fast_case){L, S, Hq, Hkv, D, causal, dt, NULL, NULL, NULL, NULL, NULL, NULL};
    rng_state = seed;
    fill(&c->q, &c->qd, L * Hq * D, dt, 1.0);
    fill(&c->k, &c->kd, S * Hkv * D, dt, 1.0);
    fill(&c->v, &c->vd, S * Hkv * D, dt, 1.0);
}

static void case_free(fast_case *c) {
    free(c->q), free(c->k), free(c->v), free(c->qd), free(c->kd), free(c->vd);
}

/* out (float32) and lse of c on the flash kernel. */
static void run(const fast_case *c, attn_precision precision, int threads, float *out, float *lse) {
    attn_tensor q = attn_tensor_view(c->q, c->dt, 1, c->L, c->Hq, c->D);
    attn_tensor k = attn_tensor_view(c->k, c->dt, 1, c->S, c->Hkv, c->D);
    attn_tensor v = attn_tensor_view(c->v, c->dt, 1, c->S, c->Hkv, c->D);
    attn_tensor o = attn_tensor_4d(out, 1, c->L, c->Hq, c->D);
    attn_sdpa_options opt = ATTN_SDPA_OPTIONS_INIT;
    opt.kernel = ATTN_KERNEL_FLASH;
    opt.causal = c->causal;
    opt.precision = precision;
    opt.threads = threads;
    attn_status st = attn_sdpa_forward(&q, &k, &v, &opt, &o, NULL, lse);
    if (st != ATTN_OK) fail_msg("forward: %s", attn_last_error());
}

static const char *kernel_name_of(const fast_case *c, attn_precision precision) {
    attn_tensor q = attn_tensor_view(c->q, c->dt, 1, c->L, c->Hq, c->D);
    attn_tensor k = attn_tensor_view(c->k, c->dt, 1, c->S, c->Hkv, c->D);
    attn_sdpa_options opt = ATTN_SDPA_OPTIONS_INIT;
    opt.precision = precision;
    opt.causal = c->causal;
    return attn_sdpa_kernel_name(&q, &k, &k, &opt);
}

/* ------------------------------------------------------------- reference */

/* Row (i, h) in double: out[D], lse, ||w||_2; and `bad`, the same row with
 * P·V accumulated in bfloat16 (each partial sum rounded: what the bound
 * must reject). */
static void reference_row(const fast_case *c, int64_t i, int64_t h, double *out, double *lse, double *wnorm,
                          double *qk_bar, double *bad, double *s) {
    const int64_t D = c->D, kvh = h / (c->Hq / c->Hkv), end = c->causal ? i + 1 : c->S;
    const double scale = 1.0 / sqrt((double)D);
    const double *q = c->qd + (i * c->Hq + h) * D;
    double m = -INFINITY;
    for (int64_t j = 0; j < end; j++) {
        const double *k = c->kd + (j * c->Hkv + kvh) * D;
        double dot = 0;
        for (int64_t d = 0; d < D; d++) dot += q[d] * k[d];
        s[j] = dot * scale;
        if (s[j] > m) m = s[j];
    }
    double l = 0, l2 = 0;
    for (int64_t j = 0; j < end; j++) {
        s[j] = exp(s[j] - m);
        l += s[j];
    }
    double k_bar[512];
    for (int64_t d = 0; d < D; d++) out[d] = 0, bad[d] = 0, k_bar[d] = 0;
    for (int64_t j = 0; j < end; j++) {
        const double *v = c->vd + (j * c->Hkv + kvh) * D, *k = c->kd + (j * c->Hkv + kvh) * D;
        for (int64_t d = 0; d < D; d++) k_bar[d] += s[j] / l * k[d];
        l2 += (s[j] / l) * (s[j] / l);
        for (int64_t d = 0; d < D; d++) {
            out[d] += s[j] * v[d];
            bad[d] = dtype_bf16_to_f32(dtype_f32_to_bf16((float)(bad[d] + s[j] * v[d])));
        }
    }
    for (int64_t d = 0; d < D; d++) out[d] /= l, bad[d] /= l;
    *lse = m + log(l);
    *wnorm = sqrt(l2);
    *qk_bar = 0;
    for (int64_t d = 0; d < D; d++) *qk_bar += scale * fabs(q[d] * k_bar[d]);
}

/* The errors of one run over the sampled rows. */
typedef struct errors {
    double max_abs, sum_abs, max_rel, sum_rel, lse_max;
    int64_t n;
    double worst_ratio;     /* max over elements of |error| / bound          */
    double lse_ratio;       /* the same for lse                               */
    double bad_ratio;       /* the same for the bf16-accumulating emulation  */
} errors;

/* Rows checked: every row when L <= 256, else 64 spread over the length
 * (the last included: causal rows see the most keys there). */
static int64_t sampled_rows(const fast_case *c, int64_t *rows) {
    if (c->L <= 256) {
        for (int64_t i = 0; i < c->L; i++) rows[i] = i;
        return c->L;
    }
    for (int64_t t = 0; t < 64; t++) rows[t] = (c->L - 1) - t * (c->L / 64);
    return 64;
}

static double score_spread(const fast_case *c) {
    double sq = 0, sk = 0;
    for (int64_t e = 0; e < c->L * c->Hq * c->D; e++) sq += c->qd[e] * c->qd[e];
    for (int64_t e = 0; e < c->S * c->Hkv * c->D; e++) sk += c->kd[e] * c->kd[e];
    return sqrt(sq / (double)(c->L * c->Hq * c->D)) * sqrt(sk / (double)(c->S * c->Hkv * c->D));
}

static errors measure(const fast_case *c, const float *out, const float *lse) {
    errors e = {0};
    int64_t rows[256];
    const int64_t nrows = sampled_rows(c, rows), D = c->D;
    double *ref = malloc(sizeof(double) * (size_t)D), *bad = malloc(sizeof(double) * (size_t)D);
    double *s = malloc(sizeof(double) * (size_t)c->S);
    double vsum = 0, vmax = 0;
    for (int64_t x = 0; x < c->S * c->Hkv * D; x++) vsum += c->vd[x] * c->vd[x], vmax = fmax(vmax, fabs(c->vd[x]));
    const double vrms = sqrt(vsum / (double)(c->S * c->Hkv * D));
    const double u = U_BF16, u_s = c->dt == ATTN_F16 ? 3 * u : u, u_v = c->dt == ATTN_F16 ? u : 0;
    const double sigma = score_spread(c);
    for (int64_t t = 0; t < nrows; t++)
        for (int64_t h = 0; h < c->Hq; h++) {
            const int64_t i = rows[t];
            double ref_lse, wnorm, qk_bar;
            reference_row(c, i, h, ref, &ref_lse, &wnorm, &qk_bar, bad, s);
            const double bound = FAST_Z * wnorm * (2 * u + u_s * sigma + u_v) * vrms + 1e-5 * vmax;
            double rmax = 0;
            for (int64_t d = 0; d < D; d++) rmax = fmax(rmax, fabs(ref[d]));
            for (int64_t d = 0; d < D; d++) {
                const double err = fabs((double)out[(i * c->Hq + h) * D + d] - ref[d]);
                e.max_abs = fmax(e.max_abs, err);
                e.sum_abs += err;
                e.max_rel = fmax(e.max_rel, err / rmax);
                e.sum_rel += err / rmax;
                e.worst_ratio = fmax(e.worst_ratio, err / bound);
                e.bad_ratio = fmax(e.bad_ratio, fabs(bad[d] - ref[d]) / bound);
                e.n++;
            }
            const double lse_err = fabs((double)lse[h * c->L + i] - ref_lse);
            e.lse_max = fmax(e.lse_max, lse_err);
            const double lse_bound = FAST_Z * wnorm * (2 * u + (u_s - u) * sigma) + u * qk_bar +
                                     0x1p-20 * fabs(ref_lse) + 1e-6;
            e.lse_ratio = fmax(e.lse_ratio, lse_err / lse_bound);
        }
    free(ref), free(bad), free(s);
    return e;
}

static bool native_here(void) {
    const ukernel_table *t = attn__isa_flash(attn__isa_chosen());
    return t->bf16_supported && t->bf16_supported();
}

/* -------------------------------------------------------------- accuracy */

static void accuracy_within_derived_bound(void **state) {
    (void)state;
    const bool table = getenv("ATTN_FAST_TABLE") && strcmp(getenv("ATTN_FAST_TABLE"), "1") == 0;
    static const int64_t lens_test[] = {128, 2048}, lens_table[] = {128, 1024, 4096};
    const int64_t *lens = table ? lens_table : lens_test;
    const int n_lens = table ? 3 : 2;
    static const attn_dtype dts[] = {ATTN_BF16, ATTN_F16};
    if (table)
        printf("| storage | D | L=S | mask | precision | O max abs | O mean abs | O max rel | O mean rel | lse max abs "
               "| O err/bound | lse err/bound | bf16-acc/bound |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (int di = 0; di < 2; di++)
        for (int64_t D = 64; D <= 128; D *= 2)
            for (int li = 0; li < n_lens; li++)
                for (int causal = 0; causal < 2; causal++) {
                    fast_case c;
                    const int64_t L = lens[li];
                    case_make(&c, L, L, 4, 2, D, causal, dts[di], 1000 + (uint64_t)(L * 7 + D + causal));
                    float *out = malloc(sizeof(float) * (size_t)(L * 4 * D)), *lse = malloc(sizeof(float) * (size_t)(4 * L));
                    for (int fast = 0; fast < 2; fast++) {
                        run(&c, fast ? ATTN_PRECISION_FAST : ATTN_PRECISION_EXACT, 0, out, lse);
                        errors e = measure(&c, out, lse);
                        if (table)
                            printf("| %s | %lld | %lld | %s | %s | %.2e | %.2e | %.2e | %.2e | %.2e | %.3f | %.3f | %.2f |\n",
                                   attn_dtype_name(c.dt), (long long)D, (long long)L, causal ? "causal" : "full",
                                   fast ? (native_here() ? "fast" : "fast (ran exact)") : "exact", e.max_abs,
                                   e.sum_abs / (double)e.n, e.max_rel, e.sum_rel / (double)e.n, e.lse_max,
                                   e.worst_ratio, e.lse_ratio, e.bad_ratio);
                        if (e.worst_ratio > 1.0 || e.lse_ratio > 1.0)
                            fail_msg("%s D=%lld L=S=%lld causal=%d %s: error %.3g (lse %.3g) x the bound",
                                     attn_dtype_name(c.dt), (long long)D, (long long)L, causal,
                                     fast ? "fast" : "exact", e.worst_ratio, e.lse_ratio);
                        /* the bound rejects a kernel that accumulates in bf16 (its
                         * error grows like sqrt(S); at the smallest S it is ~2x) */
                        if (L >= 2048 && e.bad_ratio <= 1.0)
                            fail_msg("the bound does not reject bf16 accumulation (%.3g) at L=S=%lld", e.bad_ratio,
                                     (long long)L);
                    }
                    free(out), free(lse);
                    case_free(&c);
                }
}

/* ---------------------------------------------------- threads and fallback */

static void bit_identical_across_threads(void **state) {
    (void)state;
    static const attn_dtype dts[] = {ATTN_BF16, ATTN_F16};
    for (int di = 0; di < 2; di++)
        for (int causal = 0; causal < 2; causal++) {
            fast_case c;
            /* odd sizes: an odd D pads a pair, an odd S a key pair, GQA 4 */
            case_make(&c, 203, 301, 8, 2, 41, causal, dts[di], 77 + (uint64_t)causal);
            const int64_t n = c.L * c.Hq * c.D;
            float *o1 = malloc(sizeof(float) * (size_t)n), *o2 = malloc(sizeof(float) * (size_t)n);
            float *l1 = malloc(sizeof(float) * (size_t)(c.Hq * c.L)), *l2 = malloc(sizeof(float) * (size_t)(c.Hq * c.L));
            run(&c, ATTN_PRECISION_FAST, 1, o1, l1);
            run(&c, ATTN_PRECISION_FAST, 2, o2, l2);
            assert_memory_equal(o1, o2, sizeof(float) * (size_t)n);
            assert_memory_equal(l1, l2, sizeof(float) * (size_t)(c.Hq * c.L));
            /* and close to exact (the odd shapes' pads must be zeros) */
            run(&c, ATTN_PRECISION_EXACT, 2, o2, l2);
            double worst = 0;
            for (int64_t e = 0; e < n; e++) worst = fmax(worst, fabs((double)o1[e] - o2[e]));
            if (worst > 0.05) fail_msg("fast vs exact on odd shapes: %.3g", worst);
            free(o1), free(o2), free(l1), free(l2);
            case_free(&c);
        }
}

/* fast gives exact's bits wherever it is not native: the ISAs without bf16
 * dot products, forced in turn, and this CPU's own ISA if it lacks them. */
static void fallback_equals_exact(void **state) {
    (void)state;
    fast_case c;
    case_make(&c, 130, 130, 4, 2, 64, 1, ATTN_BF16, 5);
    const int64_t n = c.L * c.Hq * c.D;
    float *o1 = malloc(sizeof(float) * (size_t)n), *o2 = malloc(sizeof(float) * (size_t)n);
    float *l1 = malloc(sizeof(float) * (size_t)(c.Hq * c.L)), *l2 = malloc(sizeof(float) * (size_t)(c.Hq * c.L));
    int checked = 0;
    for (int i = TEST_ISA_AUTO; i < attn__isa_count(); i++) {
        if (!test_isa_use(i)) continue;
        const bool native = native_here();
        assert_string_equal(kernel_name_of(&c, ATTN_PRECISION_FAST), native ? "flash-bf16" : "flash");
        assert_string_equal(kernel_name_of(&c, ATTN_PRECISION_EXACT), "flash");
        if (native) continue;
        run(&c, ATTN_PRECISION_FAST, 2, o1, l1);
        run(&c, ATTN_PRECISION_EXACT, 2, o2, l2);
        assert_memory_equal(o1, o2, sizeof(float) * (size_t)n);
        assert_memory_equal(l1, l2, sizeof(float) * (size_t)(c.Hq * c.L));
        checked++;
    }
    test_isa_restore();
    assert_true(checked >= 1);
    free(o1), free(o2), free(l1), free(l2);
    case_free(&c);
}

/* An Inf in one value row: the rows that see it come out non-finite, as on
 * the exact path, and no other row does. */
static void nonfinite_value_like_exact(void **state) {
    (void)state;
    fast_case c;
    case_make(&c, 150, 150, 4, 2, 64, 1, ATTN_BF16, 9);
    c.v[(70 * c.Hkv + 1) * c.D + 5] = 0x7F80; /* +inf, key 70, kv head 1 */
    const int64_t n = c.L * c.Hq * c.D;
    float *o1 = malloc(sizeof(float) * (size_t)n), *o2 = malloc(sizeof(float) * (size_t)n);
    float *l1 = malloc(sizeof(float) * (size_t)(c.Hq * c.L)), *l2 = malloc(sizeof(float) * (size_t)(c.Hq * c.L));
    run(&c, ATTN_PRECISION_FAST, 2, o1, l1);
    run(&c, ATTN_PRECISION_EXACT, 2, o2, l2);
    int64_t nonfinite = 0;
    for (int64_t e = 0; e < n; e++) {
        assert_int_equal(isfinite(o1[e]), isfinite(o2[e]));
        nonfinite += !isfinite(o1[e]);
    }
    assert_true(nonfinite > 0);
    free(o1), free(o2), free(l1), free(l2);
    case_free(&c);
}

/* Mixed storage: float32 q over a bf16 KV cache (P·V native, Q·Kᵀ exact),
 * and float32 v (Q·Kᵀ native, P·V exact): each half of the fast path on its
 * own, close to exact and bit-identical across threads. */
static void mixed_dtypes(void **state) {
    (void)state;
    fast_case c;
    case_make(&c, 100, 333, 4, 2, 64, 1, ATTN_BF16, 21);
    const int64_t nq = c.L * c.Hq * c.D, nkv = c.S * c.Hkv * c.D;
    float *qf = malloc(sizeof(float) * (size_t)nq), *vf = malloc(sizeof(float) * (size_t)nkv);
    for (int64_t e = 0; e < nq; e++) qf[e] = (float)c.qd[e];
    for (int64_t e = 0; e < nkv; e++) vf[e] = (float)c.vd[e];
    float *o[3], *lse = malloc(sizeof(float) * (size_t)(c.Hq * c.L));
    for (int i = 0; i < 3; i++) o[i] = malloc(sizeof(float) * (size_t)nq);
    for (int mix = 0; mix < 2; mix++) {
        attn_tensor q = mix == 0 ? attn_tensor_4d(qf, 1, c.L, c.Hq, c.D) : attn_tensor_view(c.q, c.dt, 1, c.L, c.Hq, c.D);
        attn_tensor k = attn_tensor_view(c.k, c.dt, 1, c.S, c.Hkv, c.D);
        attn_tensor v = mix == 1 ? attn_tensor_4d(vf, 1, c.S, c.Hkv, c.D) : attn_tensor_view(c.v, c.dt, 1, c.S, c.Hkv, c.D);
        attn_sdpa_options opt = ATTN_SDPA_OPTIONS_INIT;
        opt.causal = 1;
        for (int i = 0; i < 3; i++) {
            opt.precision = i < 2 ? ATTN_PRECISION_FAST : ATTN_PRECISION_EXACT;
            opt.threads = i == 0 ? 1 : 2;
            attn_tensor out = attn_tensor_4d(o[i], 1, c.L, c.Hq, c.D);
            assert_int_equal(attn_sdpa_forward(&q, &k, &v, &opt, &out, NULL, lse), ATTN_OK);
        }
        opt.precision = ATTN_PRECISION_FAST;
        assert_string_equal(attn_sdpa_kernel_name(&q, &k, &v, &opt), native_here() ? "flash-bf16" : "flash");
        assert_memory_equal(o[0], o[1], sizeof(float) * (size_t)nq);
        double worst = 0;
        for (int64_t e = 0; e < nq; e++) worst = fmax(worst, fabs((double)o[1][e] - o[2][e]));
        if (worst > 0.05) fail_msg("mix %d: fast vs exact %.3g", mix, worst);
    }
    for (int i = 0; i < 3; i++) free(o[i]);
    free(qf), free(vf), free(lse);
    case_free(&c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(accuracy_within_derived_bound),
        cmocka_unit_test(bit_identical_across_threads),
        cmocka_unit_test(fallback_equals_exact),
        cmocka_unit_test(nonfinite_value_like_exact),
        cmocka_unit_test(mixed_dtypes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
