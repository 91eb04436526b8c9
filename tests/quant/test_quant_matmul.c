/*
 * test_quant_matmul.c — y = x·Wᵀ on stored weights (include/attn_quant.h)
 * against oracles built from the GGUF reader's dequantizer
 * (attn_gguf_dequantize, libattn_model: a separate implementation):
 *   - every ISA's dequantization, bit for bit;
 *   - EXACT against the double sum of the dequantized products, within the
 *     worst-case bound of its float32 sums (tolerances.h);
 *   - FAST bit for bit against the test's own step-by-step evaluation of
 *     quant.h's arithmetic (the activations quantized by the documented
 *     rule: the same bits on every ISA), within its bound of the double
 *     evaluation of the same decomposition, and against EXACT's reference
 *     within the activations' rounding;
 *   - the same bits for threads 1, 2 and 3, for one and three rows alone
 *     (the decode kernels) and within many (a prefill), for a padded row
 *     stride;
 * on every storage type, odd shapes (N 1, 3, 17, 113; M 1, 3, 17, 64; K a
 * few blocks), every ISA this CPU has; then bad input, and tensors of the
 * real model when it is there (FAST's error against EXACT measured on
 * them).
 *
 * Shape legend: x [M, K]  W [N, K] stored  y [M, N] = x·Wᵀ
 */
#include "isa_list.h"
#include "models.h"
#include "testutil.h"
#include "tolerances.h"

#include "attn_gguf.h"
#include "attn_quant.h"
#include "quant/quant.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const int all_types[] = {ATTN_QTYPE_F32,  ATTN_QTYPE_F16,  ATTN_QTYPE_BF16, ATTN_QTYPE_Q8_0,
                                ATTN_QTYPE_Q4_0, ATTN_QTYPE_Q4_1, ATTN_QTYPE_Q5_0, ATTN_QTYPE_Q5_1,
                                ATTN_QTYPE_Q4_K, ATTN_QTYPE_Q5_K, ATTN_QTYPE_Q6_K};
enum { N_TYPES = sizeof all_types / sizeof all_types[0] };

#define U32 0x1p-24

static double gamma_n(double n) { return n * U32 / (1.0 - n * U32); }

static int64_t block_of(int type) {
    int64_t be;
    size_t bb;
    assert_int_equal(attn_quant_type_block(type, &be, &bb), ATTN_OK);
    return be;
}

static size_t block_bytes_of(int type) {
    size_t bb;
    assert_int_equal(attn_quant_type_block(type, NULL, &bb), ATTN_OK);
    return bb;
}

static bool quantized(int type) {
    return type != ATTN_QTYPE_F32 && type != ATTN_QTYPE_F16 && type != ATTN_QTYPE_BF16;
}

/* ------------------------------------------------------------ weights */

/* IEEE binary16 bits of f, which must be a normal fp16 value's magnitude
 * or more precise (the mantissa is truncated: the test wants sane values,
 * not a rounding). */
static uint16_t f16_bits(float f) {
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    const uint32_t sign = (b >> 16) & 0x8000u;
    const int exponent = (int)((b >> 23) & 0xFF) - 127 + 15;
    assert_true(exponent >= 1 && exponent <= 30);
    return (uint16_t)(sign | (uint32_t)exponent << 10 | ((b >> 13) & 0x3FF));
}

static void put_f16(uint8_t *p, float f) {
    uint16_t h = f16_bits(f);
    p[0] = (uint8_t)h, p[1] = (uint8_t)(h >> 8);
}

/* A scale of random sign and magnitude between 2^-9 and 2^-6. */
static float random_scale(test_rng *r, bool positive) {
    float s = ldexpf((float)(1.0 + test_rng_uniform(r)), -9 + (int)test_rng_range(r, 3));
    return positive || test_rng_range(r, 2) ? s : -s;
}

/* One block of type at p: random codes, sane fp16 fields. */
static void random_block(test_rng *r, int type, uint8_t *p) {
    const size_t bytes = block_bytes_of(type);
    for (size_t i = 0; i < bytes; i++) p[i] = (uint8_t)test_rng_next(r);
    float f;
    uint32_t bits;
    switch (type) {
    case ATTN_QTYPE_F32:
        f = (float)test_rng_normal(r);
        memcpy(&bits, &f, sizeof bits);
        for (int i = 0; i < 4; i++) p[i] = (uint8_t)(bits >> (8 * i));
        break;
    case ATTN_QTYPE_F16:
        put_f16(p, (float)((0.25 + fabs(test_rng_normal(r))) * (test_rng_range(r, 2) ? 1.0 : -1.0)));
        break;
    case ATTN_QTYPE_BF16:
        f = (float)test_rng_normal(r);
        memcpy(&bits, &f, sizeof bits);
        p[0] = (uint8_t)(bits >> 16), p[1] = (uint8_t)(bits >> 24);
        break;
    case ATTN_QTYPE_Q8_0:
    case ATTN_QTYPE_Q4_0:
    case ATTN_QTYPE_Q5_0:
        put_f16(p, random_scale(r, false));
        break;
    case ATTN_QTYPE_Q4_1:
    case ATTN_QTYPE_Q5_1:
        put_f16(p, random_scale(r, false));
        put_f16(p + 2, 16 * random_scale(r, false));
        break;
    case ATTN_QTYPE_Q4_K:
    case ATTN_QTYPE_Q5_K:
        put_f16(p, random_scale(r, true));
        put_f16(p + 2, random_scale(r, true));
        break;
    case ATTN_QTYPE_Q6_K:
        put_f16(p + 208, random_scale(r, true) / 16);
        break;
    default:
        fail_msg("no blocks for type %d", type);
    }
}

typedef struct weights {
    int type;
    int64_t n, k;
    size_t row_bytes, stride;
    uint8_t *bytes; /* n rows of stride bytes                  */
    float *w;       /* [n, k] attn_gguf_dequantize's values    */
} weights;

/* Random W [n, k] of type, rows stride bytes apart (0: packed; padding
 * bytes random too), and its values as the GGUF reader dequantizes them. */
static void weights_make(weights *wt, test_rng *r, int type, int64_t n, int64_t k, size_t pad) {
    const int64_t be = block_of(type);
    wt->type = type, wt->n = n, wt->k = k;
    wt->row_bytes = (size_t)(k / be) * block_bytes_of(type);
    wt->stride = wt->row_bytes + pad;
    wt->bytes = malloc(wt->stride * (size_t)n + 1);
    wt->w = malloc(sizeof(float) * (size_t)(n * k + 1));
    for (int64_t j = 0; j < n; j++) {
        uint8_t *row = wt->bytes + (size_t)j * wt->stride;
        for (int64_t b = 0; b < k / be; b++) random_block(r, type, row + (size_t)b * block_bytes_of(type));
        for (size_t i = wt->row_bytes; i < wt->stride; i++) row[i] = (uint8_t)test_rng_next(r);
        assert_int_equal(attn_gguf_dequantize((attn_gguf_tensor_type)type, row, wt->row_bytes, k, wt->w + j * k),
                         ATTN_OK);
    }
}

static attn_qtensor weights_view(const weights *wt) {
    attn_qtensor v = {.type = wt->type, .rows = wt->n, .cols = wt->k, .data = wt->bytes,
                      .row_stride = wt->stride == wt->row_bytes ? 0 : wt->stride};
    return v;
}

static void weights_free(weights *wt) { free(wt->bytes), free(wt->w); }

/* ---------------------------------------------------- the FAST oracle
 * The documented decomposition (src/quant/quant.h), written from the
 * formats: per element its code wu (the integer plus the type's offset),
 * and per group of 16 the scale ws and the correction wc, such that
 * w = ws * wu + wc. */

static float f16_at(const uint8_t *p) {
    const uint16_t h = (uint16_t)(p[0] | p[1] << 8);
    const int e = (h >> 10) & 31, mant = h & 1023;
    const float mag = e == 0 ? ldexpf((float)mant, -24) : ldexpf((float)(mant | 1024), e - 25);
    return h & 0x8000 ? -mag : mag;
}

static void decompose_row(int type, const uint8_t *row, int64_t k, int *wu, double *ws, double *wc) {
    for (int64_t b = 0; b < k / block_of(type); b++) {
        const uint8_t *p = row + (size_t)b * block_bytes_of(type);
        if (block_of(type) == 32) {
            int *u = wu + 32 * b;
            double *s = ws + 2 * b, *c = wc + 2 * b;
            const float d = f16_at(p);
            const uint8_t *qs = type == ATTN_QTYPE_Q4_0 ? p + 2 : type == ATTN_QTYPE_Q4_1 ? p + 4
                              : type == ATTN_QTYPE_Q5_0 ? p + 6 : p + 8;
            const uint32_t qh = type == ATTN_QTYPE_Q5_0 ? (uint32_t)(p[2] | p[3] << 8 | p[4] << 16 | (uint32_t)p[5] << 24)
                              : (uint32_t)(p[4] | p[5] << 8 | p[6] << 16 | (uint32_t)p[7] << 24);
            for (int i = 0; i < 32; i++) {
                const int nib = i < 16 ? qs[i] & 15 : qs[i - 16] >> 4;
                if (type == ATTN_QTYPE_Q8_0) u[i] = (int8_t)p[2 + i] + 128;
                else if (type == ATTN_QTYPE_Q4_0 || type == ATTN_QTYPE_Q4_1) u[i] = nib;
                else u[i] = nib | (int)((qh >> i) & 1) << 4;
            }
            const double offset = type == ATTN_QTYPE_Q8_0 ? 128 : type == ATTN_QTYPE_Q4_0 ? 8
                                : type == ATTN_QTYPE_Q5_0 ? 16 : 0;
            const double min = type == ATTN_QTYPE_Q4_1 || type == ATTN_QTYPE_Q5_1 ? f16_at(p + 2) : 0;
            s[0] = s[1] = d;
            c[0] = c[1] = -offset * d + min;
        } else if (type == ATTN_QTYPE_Q6_K) {
            int *u = wu + 256 * b;
            double *s = ws + 16 * b, *c = wc + 16 * b;
            const float d = f16_at(p + 208);
            for (int e = 0; e < 256; e++) {
                const int h = e / 128, q = e % 128, part = q / 32, l = q % 32;
                const int low = (p[64 * h + 32 * (part % 2) + l] >> (4 * (part / 2))) & 15;
                u[e] = low | ((p[128 + 32 * h + l] >> (2 * part)) & 3) << 4;
            }
            for (int g = 0; g < 16; g++) {
                s[g] = (float)(d * (float)(int8_t)p[192 + g]); /* the float product the format rounds */
                c[g] = -32.0 * s[g];
            }
        } else { /* Q4_K, Q5_K */
            int *u = wu + 256 * b;
            double *s = ws + 16 * b, *c = wc + 16 * b;
            const float d = f16_at(p), dmin = f16_at(p + 2);
            const uint8_t *sc = p + 4, *qh = type == ATTN_QTYPE_Q5_K ? p + 16 : NULL;
            const uint8_t *qs = type == ATTN_QTYPE_Q5_K ? p + 48 : p + 16;
            for (int sub = 0; sub < 8; sub++) {
                const int scale = sub < 4 ? sc[sub] & 63 : (sc[sub + 4] & 15) | (sc[sub - 4] >> 6) << 4;
                const int min = sub < 4 ? sc[sub + 4] & 63 : (sc[sub + 4] >> 4) | (sc[sub] >> 6) << 4;
                for (int l = 0; l < 32; l++) {
                    int v = (qs[32 * (sub / 2) + l] >> (4 * (sub % 2))) & 15;
                    if (qh) v |= ((qh[l] >> sub) & 1) << 4;
                    u[32 * sub + l] = v;
                }
                s[2 * sub] = s[2 * sub + 1] = (float)(d * (float)scale);
                c[2 * sub] = c[2 * sub + 1] = -(double)(float)(dmin * (float)min);
            }
        }
    }
}

/* The activations quantized by the documented rule (attn_quant.h). */
static void quantize_row(const float *x, int64_t k, int *q, float *xs, float *xsum) {
    for (int64_t b = 0; b < k / 32; b++) {
        const float *x_b = x + 32 * b;
        float amax = 0.0f;
        for (int i = 0; i < 32; i++) amax = fabsf(x_b[i]) > amax ? fabsf(x_b[i]) : amax;
        const bool tiny = amax < 0x1p-100f;
        const float d = tiny ? 0.0f : amax / 127.0f, id = tiny ? 0.0f : 127.0f / amax;
        for (int h = 0; h < 2; h++) {
            int sum = 0;
            for (int i = 16 * h; i < 16 * h + 16; i++) sum += q[32 * b + i] = (int)nearbyintf(x_b[i] * id);
            xs[2 * b + h] = d;
            xsum[2 * b + h] = d * (float)sum;
        }
    }
}

/* ------------------------------------------------------------ oracles */

typedef struct oracle {
    double *ref, *absum;          /* EXACT: sum x w, sum |x w|                 */
    double *fast, *fast_terms;    /* FAST: the decomposition, its terms' sizes */
    double *qerr, *fast_absum;    /* sum |w| |x - xs q|, sum |w| |xs q|         */
    float *fast_bits;             /* FAST: quant.h's float arithmetic, step by step */
} oracle;

/* The FAST result of one output as quant.h writes the arithmetic down:
 * groups of G (16 for Q6_K, else 32), the integers offset to signed where
 * the type has no min, two sums by fmaf (correctly rounded), then their sum.
 * wu, ws, wc: decompose_row's (ws, wc per 16, float values); q, xs: the
 * quantized row (xs per 16). */
static float fast_arithmetic(int type, const int *wu, const double *ws, const double *wc, const int *q,
                             const float *xs, int64_t k) {
    const int G = type == ATTN_QTYPE_Q6_K ? 16 : 32;
    const bool has_min = type == ATTN_QTYPE_Q4_1 || type == ATTN_QTYPE_Q5_1 || type == ATTN_QTYPE_Q4_K ||
                         type == ATTN_QTYPE_Q5_K;
    const int o = type == ATTN_QTYPE_Q8_0 ? 128 : type == ATTN_QTYPE_Q4_0 ? 8 : type == ATTN_QTYPE_Q5_0 ? 16
                : type == ATTN_QTYPE_Q6_K ? 32 : 0;
    float a[2] = {0.0f, 0.0f};
    for (int64_t g = 0; g < k / G; g++) {
        int32_t isum = 0, qsum = 0;
        for (int64_t c = g * G; c < (g + 1) * G; c++) isum += (wu[c] - o) * q[c], qsum += q[c];
        const float x_scale = xs[g * G / 16], scale = (float)ws[g * G / 16] * x_scale;
        a[g % 2] = fmaf((float)isum, scale, a[g % 2]);
        if (has_min) a[g % 2] = fmaf((float)wc[g * G / 16], x_scale * (float)qsum, a[g % 2]);
    }
    return a[0] + a[1];
}

static void oracle_make(oracle *o, const weights *wt, const float *x, int64_t m) {
    const int64_t n = wt->n, k = wt->k, g = k / 16;
    o->ref = calloc((size_t)(m * n), sizeof(double));
    o->absum = calloc((size_t)(m * n), sizeof(double));
    o->fast = calloc((size_t)(m * n), sizeof(double));
    o->fast_terms = calloc((size_t)(m * n), sizeof(double));
    o->qerr = calloc((size_t)(m * n), sizeof(double));
    o->fast_absum = calloc((size_t)(m * n), sizeof(double));
    o->fast_bits = calloc((size_t)(m * n), sizeof(float));
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++)
            for (int64_t c = 0; c < k; c++) {
                const double p = (double)x[i * k + c] * wt->w[j * k + c];
                o->ref[i * n + j] += p;
                o->absum[i * n + j] += fabs(p);
            }
    if (!quantized(wt->type)) return;
    int *q = malloc(sizeof(int) * (size_t)k), *wu = malloc(sizeof(int) * (size_t)k);
    float *xs = malloc(sizeof(float) * (size_t)g), *xsum = malloc(sizeof(float) * (size_t)g);
    double *ws = malloc(sizeof(double) * (size_t)g), *wc = malloc(sizeof(double) * (size_t)g);
    for (int64_t j = 0; j < n; j++) {
        decompose_row(wt->type, wt->bytes + (size_t)j * wt->stride, k, wu, ws, wc);
        for (int64_t i = 0; i < m; i++) {
            quantize_row(x + i * k, k, q, xs, xsum);
            double sum = 0, terms = 0, qerr = 0, absum = 0;
            for (int64_t gi = 0; gi < g; gi++) {
                long long isum = 0, iabs = 0;
                for (int64_t c = 16 * gi; c < 16 * gi + 16; c++) {
                    isum += (long long)wu[c] * q[c];
                    iabs += llabs((long long)wu[c] * q[c]);
                    const double xq = (double)xs[gi] * q[c], w = wt->w[j * k + c];
                    qerr += fabs(w) * fabs((double)x[i * k + c] - xq);
                    absum += fabs(w * xq);
                }
                const double t1 = ws[gi] * xs[gi] * (double)isum, t2 = wc[gi] * xsum[gi];
                sum += t1 + t2;
                /* each product's size: a kernel may split the group's integer sum anywhere */
                terms += fabs(ws[gi] * xs[gi]) * (double)iabs + fabs(t2);
            }
            o->fast[i * n + j] = sum, o->fast_terms[i * n + j] = terms;
            o->qerr[i * n + j] = qerr, o->fast_absum[i * n + j] = absum;
            o->fast_bits[i * n + j] = fast_arithmetic(wt->type, wu, ws, wc, q, xs, k);
        }
    }
    free(q), free(wu), free(xs), free(xsum), free(ws), free(wc);
}

static void oracle_free(oracle *o) {
    free(o->ref), free(o->absum), free(o->fast), free(o->fast_terms), free(o->qerr), free(o->fast_absum);
    free(o->fast_bits);
}

/* Largest error / bound seen, for the summary line. */
static double worst_exact, worst_fast_kernel, worst_fast_quant, worst_fast_rel;

static void check_exact(const float *y, const oracle *o, int64_t m, int64_t n, int64_t k, const char *what) {
    const double g = gamma_n((double)k / 8 + 4);
    for (int64_t e = 0; e < m * n; e++) {
        const double bound = QUANT_EXACT_BOUND_FAIL * (g * o->absum[e] + U32 * fabs(o->ref[e])) + 1e-30;
        const double err = fabs((double)y[e] - o->ref[e]);
        if (err / bound > worst_exact) worst_exact = err / bound;
        if (!(err <= bound))
            fail_msg("%s: exact y[%lld][%lld] = %.9g, reference %.9g (error %.3g > bound %.3g)", what,
                     (long long)(e / n), (long long)(e % n), y[e], o->ref[e], err, bound);
    }
}

static void check_fast(const float *y, const oracle *o, int64_t m, int64_t n, int64_t k, const char *what) {
    const double g = gamma_n((double)k / 8 + 8);
    for (int64_t e = 0; e < m * n; e++) {
        if (memcmp(&y[e], &o->fast_bits[e], sizeof(float)) != 0 && !(isnan(y[e]) && isnan(o->fast_bits[e])))
            fail_msg("%s: fast y[%lld][%lld] = %.9g, quant.h's arithmetic gives %.9g", what, (long long)(e / n),
                     (long long)(e % n), y[e], o->fast_bits[e]);
        const double kernel_bound = QUANT_FAST_KERNEL_BOUND_FAIL * g * o->fast_terms[e] + 1e-30;
        const double kernel_err = fabs((double)y[e] - o->fast[e]);
        if (kernel_err / kernel_bound > worst_fast_kernel) worst_fast_kernel = kernel_err / kernel_bound;
        if (!(kernel_err <= kernel_bound))
            fail_msg("%s: fast y[%lld][%lld] = %.9g, its decomposition %.9g (error %.3g > bound %.3g)", what,
                     (long long)(e / n), (long long)(e % n), y[e], o->fast[e], kernel_err, kernel_bound);
        const double quant_bound = QUANT_FAST_QUANT_BOUND_FAIL *
                                       (o->qerr[e] + g * o->fast_terms[e] + 2 * U32 * o->fast_absum[e] +
                                        gamma_n((double)k / 8 + 4) * o->absum[e] + U32 * fabs(o->ref[e])) + 1e-30;
        const double quant_err = fabs((double)y[e] - o->ref[e]);
        if (quant_err / quant_bound > worst_fast_quant) worst_fast_quant = quant_err / quant_bound;
        if (o->absum[e] > 0 && quant_err / o->absum[e] > worst_fast_rel) worst_fast_rel = quant_err / o->absum[e];
        if (!(quant_err <= quant_bound))
            fail_msg("%s: fast y[%lld][%lld] = %.9g, reference %.9g (error %.3g > the activations' rounding "
                     "bound %.3g)", what, (long long)(e / n), (long long)(e % n), y[e], o->ref[e], quant_err,
                     quant_bound);
    }
}

static void matmul_ok(const float *x, int64_t m, const attn_qtensor *w, float *y, attn_precision precision,
                      int threads) {
    attn_quant_options opt = ATTN_QUANT_OPTIONS_INIT;
    opt.precision = precision, opt.threads = threads;
    if (attn_quant_matmul(x, m, w, y, &opt) != ATTN_OK) fail_msg("attn_quant_matmul: %s", attn_last_error());
}

/* -------------------------------------------------------------- tests */

/* Every ISA's dequantizer (attn_quant_dequantize_rows) against the GGUF
 * reader's, bit for bit, on every type. */
static void test_dequantize_bits(void **state) {
    (void)state;
    test_rng r;
    test_rng_seed(&r, 1);
    for (int ti = 0; ti < N_TYPES; ti++) {
        const int type = all_types[ti];
        const int64_t k = block_of(type) == 1 ? 999 : 5 * 256;
        weights wt;
        weights_make(&wt, &r, type, 7, k, 3);
        attn_qtensor v = weights_view(&wt);
        float *out = malloc(sizeof(float) * (size_t)(7 * k));
        for (int i = 0; i < attn__isa_count(); i++) {
            if (!test_isa_use(i)) continue; /* the CPU or build lacks it */
            memset(out, 0xFF, sizeof(float) * (size_t)(7 * k));
            assert_int_equal(attn_quant_dequantize_rows(&v, 2, 5, out), ATTN_OK);
            if (memcmp(out, wt.w + 2 * k, sizeof(float) * (size_t)(5 * k)) != 0)
                fail_msg("%s: %s dequantization differs from the GGUF reader's", attn__isa_name(i), attn_quant_type_name(type));
        }
        free(out);
        weights_free(&wt);
    }
    test_isa_restore();
}

/* The Ks a type is tested on: odd counts of blocks, and past the decode
 * chunk (512 and more elements). */
static int ks_of(int type, int64_t *ks) {
    if (block_of(type) == 1) return ks[0] = 1, ks[1] = 17, ks[2] = 1000, 3;
    if (block_of(type) == 32) return ks[0] = 32, ks[1] = 96, ks[2] = 1056, 3;
    return ks[0] = 256, ks[1] = 1280, 2;
}

/* Every type x K x M in {1, 3, 17, 64} x N in {1, 3, 17, 113} x ISA:
 * EXACT and FAST against the oracles; a row alone (M = 1) and three rows
 * (the decode kernels on every ISA: M <= MR) give the bits they have
 * within M = 17. */
static void test_against_oracles(void **state) {
    (void)state;
    static const int64_t ms[] = {1, 3, 17, 64}, ns[] = {1, 3, 17, 113};
    test_rng r;
    test_rng_seed(&r, 2);
    for (int ti = 0; ti < N_TYPES; ti++) {
        const int type = all_types[ti];
        int64_t ks[3];
        const int nk = ks_of(type, ks);
        for (int ki = 0; ki < nk; ki++)
            for (int ni = 0; ni < 4; ni++)
                for (int mi = 0; mi < 4; mi++) {
                    const int64_t k = ks[ki], n = ns[ni], m = ms[mi];
                    if (UNDER_SANITIZER && m * n * k > 200000) continue;
                    weights wt;
                    weights_make(&wt, &r, type, n, k, (size_t)(ni % 2) * 5);
                    attn_qtensor v = weights_view(&wt);
                    float *x = malloc(sizeof(float) * (size_t)(m * k)), *y = malloc(sizeof(float) * (size_t)(m * n));
                    float *few = malloc(sizeof(float) * 3 * (size_t)n);
                    test_fill_normal(&r, x, m * k, 1.0);
                    oracle o;
                    oracle_make(&o, &wt, x, m);
                    for (int i = 0; i < attn__isa_count(); i++) {
                        if (!test_isa_use(i)) continue; /* the CPU or build lacks it */
                        char what[96];
                        snprintf(what, sizeof what, "%s %s M=%lld N=%lld K=%lld", attn__isa_name(i), attn_quant_type_name(type),
                                 (long long)m, (long long)n, (long long)k);
                        for (int fast = 0; fast <= (quantized(type) ? 1 : 0); fast++) {
                            const attn_precision prec = fast ? ATTN_PRECISION_FAST : ATTN_PRECISION_EXACT;
                            matmul_ok(x, m, &v, y, prec, 1);
                            if (fast) check_fast(y, &o, m, n, k, what);
                            else check_exact(y, &o, m, n, k, what);
                            if (m == 17) /* decode (1 and 3 rows) and prefill: the same bits */
                                for (int64_t i0 = 0; i0 < m; i0 += 8)
                                    for (int64_t rows = 1; rows <= 3 && i0 + rows <= m; rows += 2) {
                                        matmul_ok(x + i0 * k, rows, &v, few, prec, 1);
                                        if (memcmp(few, y + i0 * n, sizeof(float) * (size_t)(rows * n)) != 0)
                                            fail_msg("%s %s: rows %lld .. %lld alone differ from within M = 17",
                                                     what, fast ? "fast" : "exact", (long long)i0,
                                                     (long long)(i0 + rows - 1));
                                    }
                        }
                    }
                    oracle_free(&o);
                    free(x), free(y), free(few);
                    weights_free(&wt);
                }
    }
    test_isa_restore();
    print_message("[          ] largest error / bound: exact %.3g, fast kernel %.3g, fast vs reference %.3g; "
                  "fast's largest error / sum |x w|: %.3g\n",
                  worst_exact, worst_fast_kernel, worst_fast_quant, worst_fast_rel);
}

/* The same bits for 1, 2 and 3 threads, decode (M = 1, 3) and prefill
 * (M = 40), on shapes big enough to be split (the library gives a thread
 * to at least 2 MFLOP). */
static void test_threads(void **state) {
    (void)state;
    test_rng r;
    test_rng_seed(&r, 3);
    const int64_t n = UNDER_SANITIZER ? 1100 : 2100, k = 1024;
    static const int64_t ms[] = {1, 3, 40};
    for (int ti = 0; ti < N_TYPES; ti++) {
        const int type = all_types[ti];
        weights wt;
        weights_make(&wt, &r, type, n, k, 0);
        attn_qtensor v = weights_view(&wt);
        float *x = malloc(sizeof(float) * 40 * (size_t)k);
        float *y1 = malloc(sizeof(float) * 40 * (size_t)n), *yt = malloc(sizeof(float) * 40 * (size_t)n);
        test_fill_normal(&r, x, 40 * k, 1.0);
        for (int i = 0; i < attn__isa_count(); i++) {
            if (!test_isa_use(i)) continue; /* the CPU or build lacks it */
            for (int mi = 0; mi < 3; mi++)
                for (int fast = 0; fast <= (quantized(type) ? 1 : 0); fast++) {
                    const attn_precision prec = fast ? ATTN_PRECISION_FAST : ATTN_PRECISION_EXACT;
                    matmul_ok(x, ms[mi], &v, y1, prec, 1);
                    for (int t = 2; t <= 3; t++) {
                        matmul_ok(x, ms[mi], &v, yt, prec, t);
                        if (memcmp(y1, yt, sizeof(float) * (size_t)(ms[mi] * n)) != 0)
                            fail_msg("%s %s %s M=%lld: %d threads differ from 1", attn__isa_name(i), attn_quant_type_name(type),
                                     fast ? "fast" : "exact", (long long)ms[mi], t);
                    }
                }
        }
        free(x), free(y1), free(yt);
        weights_free(&wt);
    }
    test_isa_restore();
}

/* use_ref and ATTN_KERNEL=ref run the reference: the double sums rounded
 * once, so within half an ulp of the oracle. */
static void test_reference(void **state) {
    (void)state;
    test_rng r;
    test_rng_seed(&r, 4);
    weights wt;
    weights_make(&wt, &r, ATTN_QTYPE_Q5_0, 9, 96, 0);
    attn_qtensor v = weights_view(&wt);
    float x[3 * 96], y[27], y_env[27];
    test_fill_normal(&r, x, 3 * 96, 1.0);
    oracle o;
    oracle_make(&o, &wt, x, 3);
    attn_quant_options opt = ATTN_QUANT_OPTIONS_INIT;
    opt.use_ref = 1, opt.precision = ATTN_PRECISION_FAST;
    assert_int_equal(attn_quant_matmul(x, 3, &v, y, &opt), ATTN_OK);
    for (int e = 0; e < 27; e++) assert_true(y[e] == (float)o.ref[e]);
    assert_int_equal(attn__isa_force("ref"), ATTN_OK);
    assert_string_equal(attn_quant_isa(ATTN_PRECISION_EXACT), "ref");
    matmul_ok(x, 3, &v, y_env, ATTN_PRECISION_EXACT, 1);
    assert_memory_equal(y, y_env, sizeof y);
    test_isa_restore();
    oracle_free(&o);
    weights_free(&wt);
}

/* Sets $name to value (NULL: unset) and returns its old value (a copy, or
 * NULL), for env_restore. */
static char *env_swap(const char *name, const char *value) {
    const char *old = getenv(name);
    char *copy = old ? strdup(old) : NULL;
    if (value) setenv(name, value, 1);
    else unsetenv(name);
    return copy;
}

static void env_restore(const char *name, char *old) {
    if (old) setenv(name, old, 1);
    else unsetenv(name);
    free(old);
}

/* ATTN_ARCH chooses the instruction set (read again on a force(NULL)), for
 * the quantized products as for every kind of kernel: one registry. */
static void test_environment(void **state) {
    (void)state;
    char *arch = env_swap("ATTN_ARCH", "generic");
    test_isa_restore();
    assert_string_equal(attn_quant_isa(ATTN_PRECISION_EXACT), "generic");
    assert_string_equal(attn_quant_isa(ATTN_PRECISION_FAST), "generic");
    assert_int_equal(attn_quant_decode_rows(ATTN_PRECISION_EXACT), 4);
    assert_int_equal(attn_quant_decode_rows(ATTN_PRECISION_FAST), 4);
    setenv("ATTN_ARCH", "no-such-isa", 1);
    test_isa_restore();
    assert_string_not_equal(attn_quant_isa(ATTN_PRECISION_EXACT), "ref");
    unsetenv("ATTN_ARCH");
    test_isa_restore();
    assert_int_equal(attn__isa_force("no-such-isa"), ATTN_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "no-such-isa"));
    /* each ISA this CPU runs: its name for EXACT; for FAST its own int8
     * kernels, or where the CPU lacks them (AVX-512 without VNNI) those of
     * the ISA below, as the registry's description says */
    for (int i = 0; i < attn__isa_count(); i++) {
        if (!test_isa_use(i)) continue;
        char line[512];
        attn__isa_describe(i, NULL, line, sizeof line);
        assert_string_equal(attn_quant_isa(ATTN_PRECISION_EXACT), attn__isa_name(i));
        const char *fast = attn_quant_isa(ATTN_PRECISION_FAST);
        char want[96];
        snprintf(want, sizeof want, "quantized products on %s int8 kernels", fast);
        if (!strstr(line, want)) fail_msg("%s: \"%s\" does not say \"%s\"", attn__isa_name(i), line, want);
#if defined(__x86_64__) && !defined(ATTN_PORTABLE)
        if (strcmp(attn__isa_name(i), "avx512") == 0) {
            __builtin_cpu_init();
            const bool vnni = __builtin_cpu_supports("avx512vnni");
            assert_string_equal(fast, vnni ? "avx512-vnni" : "avx2");
            assert_true(vnni == !strstr(line, "this CPU lacks avx512-vnni"));
        }
#endif
    }
    env_restore("ATTN_ARCH", arch);
    test_isa_restore();
}

static bool says_no(void) { return false; }

/* The registry's rule for the FAST group (quant_table.h): an ISA whose
 * FAST kernels this CPU cannot run (fast_supported() says no: AVX-512
 * without VNNI) runs the group of the ISA below — down to the portable
 * one — whole, keeps its own EXACT kernels, and ATTN_ARCH_DEBUG=1 says
 * what the CPU lacks (issue 34).  Checked with the widest table this CPU
 * has, its FAST group declared unrunnable. */
static void test_fast_fallback(void **state) {
    (void)state;
    const int top = attn__isa_widest();
    const quant_table *portable = attn__isa_quant(0);
    quant_table own = *attn__isa_quant(top);
    own.fast_isa = "pretend-vnni", own.fast_supported = says_no;
    const quant_table t = attn__isa_complete_quant(&own, portable, false);
    assert_ptr_equal(t.q8_tile, portable->q8_tile);
    assert_ptr_equal(t.quantize, portable->quantize);
    assert_int_equal(t.q8_mr, portable->q8_mr);
    assert_int_equal(t.q8_nr, portable->q8_nr);
    assert_int_equal(t.q8_nrv, portable->q8_nrv);
    for (int q = 0; q < QT_COUNT; q++) {
        assert_ptr_equal(t.unpack[q], portable->unpack[q]);
        assert_ptr_equal(t.q8_gemv[q], portable->q8_gemv[q]);
        assert_ptr_equal(t.f32_gemv[q], own.f32_gemv[q]);
    }
    assert_ptr_equal(t.f32_tile, own.f32_tile);
    assert_string_equal(t.fast_isa, portable->fast_isa);
    assert_string_equal(t.fast_lacks, "pretend-vnni");
    char line[512];
    attn__isa_describe(top, &t, line, sizeof line);
    if (!strstr(line, "quantized products on generic int8 kernels (this CPU lacks pretend-vnni"))
        fail_msg("\"%s\" does not say that fast falls back to the portable kernels", line);
    /* when the CPU runs them, the ISA's own group, and nothing lacking */
    own.fast_supported = NULL;
    const quant_table u = attn__isa_complete_quant(&own, portable, true);
    assert_ptr_equal(u.q8_tile, own.q8_tile);
    assert_string_equal(u.fast_isa, "pretend-vnni");
    assert_null(u.fast_lacks);
    /* an ISA without a table of this kind runs the one below whole */
    const quant_table none = attn__isa_complete_quant(NULL, portable, true);
    assert_ptr_equal(none.f32_tile, portable->f32_tile);
    assert_ptr_equal(none.q8_tile, portable->q8_tile);
}

/* ATTN_ARCH_DEBUG=1 prints the choice once on stderr, the quantized
 * products' FAST kernels named: run on stderr redirected to a file. */
static void test_debug_message(void **state) {
    (void)state;
    const char *asked = getenv("ATTN_ARCH_DEBUG");
    if (asked && *asked && strcmp(asked, "0") != 0) {
        print_message("[          ] ATTN_ARCH_DEBUG is set: the process printed its one message already\n");
        return;
    }
    char *arch = env_swap("ATTN_ARCH", "generic"), *debug = env_swap("ATTN_ARCH_DEBUG", "1");
    FILE *out = tmpfile();
    assert_non_null(out);
    fflush(stderr);
    const int saved = dup(2);
    assert_true(saved >= 0 && dup2(fileno(out), 2) == 2);
    test_isa_restore(); /* the choice made again: the message */
    fflush(stderr);
    assert_int_equal(dup2(saved, 2), 2);
    close(saved);
    env_restore("ATTN_ARCH_DEBUG", debug);
    env_restore("ATTN_ARCH", arch);
    test_isa_restore();
    char text[1024] = "";
    rewind(out);
    const size_t got = fread(text, 1, sizeof text - 1, out);
    text[got] = 0;
    fclose(out);
    static const char *const says[] = {"attn: instruction set generic (forced by ATTN_ARCH)",
                                       "quantized products on generic int8 kernels"};
    for (size_t s = 0; s < sizeof says / sizeof says[0]; s++)
        if (!strstr(text, says[s])) fail_msg("ATTN_ARCH_DEBUG=1 printed \"%s\", without \"%s\"", text, says[s]);
}

static void expect_error(attn_status got, attn_status want, const char *fragment) {
    assert_int_equal(got, want);
    if (!strstr(attn_last_error(), fragment))
        fail_msg("message \"%s\" does not say \"%s\"", attn_last_error(), fragment);
}

static void test_bad_input(void **state) {
    (void)state;
    uint8_t blocks[34 * 4] = {0};
    float x[64] = {0}, y[8];
    attn_qtensor w = {.type = ATTN_QTYPE_Q8_0, .rows = 2, .cols = 64, .data = blocks};
    attn_quant_options opt = ATTN_QUANT_OPTIONS_INIT;
    assert_int_equal(attn_quant_matmul(x, 1, &w, y, &opt), ATTN_OK);

    attn_qtensor bad = w;
    bad.type = ATTN_GGUF_TYPE_Q2_K;
    expect_error(attn_quant_matmul(x, 1, &bad, y, &opt), ATTN_ERR_UNSUPPORTED, "type 10");
    expect_error(attn_quant_check(&bad), ATTN_ERR_UNSUPPORTED, "Q8_0");
    expect_error(attn_quant_type_block(99, NULL, NULL), ATTN_ERR_UNSUPPORTED, "99");
    assert_null(attn_quant_type_name(ATTN_GGUF_TYPE_IQ4_XS));
    bad = w, bad.cols = 48;
    expect_error(attn_quant_matmul(x, 1, &bad, y, &opt), ATTN_ERR_SHAPE, "cols = 48 is not a whole number of Q8_0");
    bad = w, bad.rows = -1;
    expect_error(attn_quant_matmul(x, 1, &bad, y, &opt), ATTN_ERR_SHAPE, "negative");
    bad = w, bad.row_stride = 33;
    expect_error(attn_quant_matmul(x, 1, &bad, y, &opt), ATTN_ERR_SHAPE, "row_stride = 33");
    bad = w, bad.data = NULL;
    expect_error(attn_quant_matmul(x, 1, &bad, y, &opt), ATTN_ERR_INVALID_ARGUMENT, "data is NULL");
    bad = w, bad.rows = INT64_MAX / 8;
    expect_error(attn_quant_check(&bad), ATTN_ERR_OVERFLOW, "overflow");
    expect_error(attn_quant_matmul(x, 1, NULL, y, &opt), ATTN_ERR_INVALID_ARGUMENT, "w is NULL");
    expect_error(attn_quant_matmul(NULL, 1, &w, y, &opt), ATTN_ERR_INVALID_ARGUMENT, "x is NULL");
    expect_error(attn_quant_matmul(x, 1, &w, NULL, &opt), ATTN_ERR_INVALID_ARGUMENT, "y is NULL");
    expect_error(attn_quant_matmul(x, -1, &w, y, &opt), ATTN_ERR_SHAPE, "m = -1");

    attn_quant_options zero = {0};
    expect_error(attn_quant_matmul(x, 1, &w, y, &zero), ATTN_ERR_INVALID_ARGUMENT, "ATTN_QUANT_OPTIONS_INIT");
    attn_quant_options o2 = ATTN_QUANT_OPTIONS_INIT;
    o2.precision = (attn_precision)7;
    expect_error(attn_quant_matmul(x, 1, &w, y, &o2), ATTN_ERR_INVALID_ARGUMENT, "precision 7");
    o2 = opt, o2.threads = -2;
    expect_error(attn_quant_matmul(x, 1, &w, y, &o2), ATTN_ERR_INVALID_ARGUMENT, "threads = -2");

    /* a workspace: exactly the size asked for works, one byte less is refused */
    size_t need;
    assert_int_equal(attn_quant_workspace_size(1, &w, &opt, &need), ATTN_OK);
    assert_true(need > 0);
    void *ws = malloc(need);
    o2 = opt, o2.workspace = ws, o2.workspace_size = need;
    assert_int_equal(attn_quant_matmul(x, 1, &w, y, &o2), ATTN_OK);
    o2.workspace_size = need - 1;
    expect_error(attn_quant_matmul(x, 1, &w, y, &o2), ATTN_ERR_INVALID_ARGUMENT, "attn_quant_workspace_size");
    free(ws);

    expect_error(attn_quant_dequantize_rows(&w, 1, 2, y), ATTN_ERR_INVALID_ARGUMENT, "not within");
    expect_error(attn_quant_dequantize_rows(&w, 0, 1, NULL), ATTN_ERR_INVALID_ARGUMENT, "out is NULL");

    /* empty products */
    attn_qtensor empty = {.type = ATTN_QTYPE_Q4_K, .rows = 3, .cols = 0, .data = NULL};
    for (int i = 0; i < 6; i++) y[i] = NAN;
    assert_int_equal(attn_quant_matmul(x, 2, &empty, y, NULL), ATTN_OK);
    for (int i = 0; i < 6; i++) assert_true(y[i] == 0.0f);
    assert_int_equal(attn_quant_matmul(NULL, 0, &w, NULL, NULL), ATTN_OK);
}

/* A NaN or an infinity in x: EXACT follows IEEE, FAST makes the row NaN;
 * the other rows keep their values. */
static void test_nonfinite(void **state) {
    (void)state;
    test_rng r;
    test_rng_seed(&r, 5);
    weights wt;
    weights_make(&wt, &r, ATTN_QTYPE_Q5_0, 5, 64, 0);
    attn_qtensor v = weights_view(&wt);
    float x[3 * 64], y[15];
    test_fill_normal(&r, x, 3 * 64, 1.0);
    x[64 + 40] = NAN;
    x[128 + 3] = INFINITY;
    for (int i = 0; i < attn__isa_count(); i++) {
        if (!test_isa_use(i)) continue; /* the CPU or build lacks it */
        for (int fast = 0; fast <= 1; fast++) {
            matmul_ok(x, 3, &v, y, fast ? ATTN_PRECISION_FAST : ATTN_PRECISION_EXACT, 1);
            for (int j = 0; j < 5; j++) {
                assert_true(isfinite(y[j]));
                assert_true(isnan(y[5 + j]));
                assert_false(isfinite(y[10 + j]));
            }
        }
    }
    test_isa_restore();
    weights_free(&wt);
}

/* attn_quant_check_finite: clean weights of every type pass; one NaN or
 * infinity planted in row 2 (an element, or a block's scale or minimum)
 * is found there, and the row as the library converts it holds a
 * non-finite value from that column's block on (the property it stands
 * for: the scan finds what the conversion would produce). */
static void test_check_finite(void **state) {
    (void)state;
    test_rng r;
    test_rng_seed(&r, 11);
    for (int t = 0; t < N_TYPES; t++) {
        const int type = all_types[t];
        const int64_t be = block_of(type), k = 2 * (be < 32 ? 32 : be);
        for (int variant = 0; variant < 3; variant++) { /* NaN, +inf, the minimum (types with one) */
            weights wt;
            weights_make(&wt, &r, type, 4, k, variant == 2 ? 8 : 0);
            attn_qtensor v = weights_view(&wt);
            int64_t row = -1, col = -1;
            assert_int_equal(attn_quant_check_finite(&v, &row, &col), ATTN_OK);
            uint8_t *p = wt.bytes + 2 * wt.stride;
            int64_t want_col;
            const bool has_min = type == ATTN_QTYPE_Q4_1 || type == ATTN_QTYPE_Q5_1 || type == ATTN_QTYPE_Q4_K ||
                                 type == ATTN_QTYPE_Q5_K;
            if (variant == 2 && !has_min) {
                weights_free(&wt);
                continue;
            }
            if (!quantized(type)) {
                want_col = 7;
                uint8_t *e = p + 7 * block_bytes_of(type);
                if (type == ATTN_QTYPE_F32) e[2] = variant ? 0x80 : 0xC0, e[3] = 0x7F; /* bits 0x7F80xxxx / 0x7FC0xxxx */
                else if (type == ATTN_QTYPE_F16) e[1] = 0x7C, e[0] = variant ? 0 : 1;
                else e[1] = 0x7F, e[0] = variant ? 0x80 : 0xC0;
                if (type == ATTN_QTYPE_F32 && variant) e[0] = e[1] = 0;
            } else {
                want_col = be; /* the second block */
                uint8_t *b = p + block_bytes_of(type);
                uint8_t *scale = type == ATTN_QTYPE_Q6_K ? b + 208 : variant == 2 ? b + 2 : b;
                scale[0] = variant == 0 ? 1 : 0, scale[1] = 0x7C;
            }
            expect_error(attn_quant_check_finite(&v, &row, &col), ATTN_ERR_NONFINITE,
                         variant == 0 ? "NaN" : "infinite");
            assert_int_equal(row, 2);
            assert_int_equal(col, want_col);
            float *converted = malloc((size_t)k * sizeof *converted);
            assert_int_equal(attn_quant_dequantize_rows(&v, 2, 1, converted), ATTN_OK);
            bool bad = false;
            for (int64_t i = 0; i < k; i++) bad |= !isfinite(converted[i]) && i >= want_col && i < want_col + be;
            if (!bad) fail_msg("%s: the planted value converts to finite numbers", attn_quant_type_name(type));
            free(converted);
            weights_free(&wt);
        }
    }
}

/* Tensors of the real model, in place in the mapped file: a slice of rows
 * of each stored type it has, against the GGUF reader's float matrix; and
 * FAST's error against EXACT on the whole tensor, measured (docs/quant.md
 * quotes it) and held to QUANT_FAST_REAL_REL_RMS_FAIL.  x: rows of the
 * token embedding times layer 0's attention norm weight where K is the
 * model's width (what layer 0's projections see, less the norm's scale),
 * normal noise for ffn_down (K = 4864: no activation at hand). */
static void test_real_model(void **state) {
    (void)state;
    const char *path = test_model_or_skip(TEST_QWEN_GGUF);
    attn_gguf *g;
    assert_int_equal(attn_gguf_open(path, &g), ATTN_OK);
    static const char *const names[] = {"output.weight", "token_embd.weight", "blk.0.attn_q.weight",
                                        "blk.0.ffn_down.weight", "blk.0.attn_v.weight", "blk.3.ffn_down.weight"};
    test_rng r;
    test_rng_seed(&r, 6);
    bool seen[64] = {false};
    attn_gguf_tensor embd, norm;
    assert_int_equal(attn_gguf_find_tensor(g, "token_embd.weight", &embd), ATTN_OK);
    assert_int_equal(attn_gguf_find_tensor(g, "blk.0.attn_norm.weight", &norm), ATTN_OK);
    const int64_t width = embd.dims[0];
    float *gain = malloc(sizeof(float) * (size_t)width);
    assert_int_equal(attn_gguf_dequantize_rows(g, &norm, 0, 1, gain), ATTN_OK);
    for (size_t t = 0; t < sizeof names / sizeof names[0]; t++) {
        attn_gguf_tensor info;
        assert_int_equal(attn_gguf_find_tensor(g, names[t], &info), ATTN_OK);
        seen[info.type] = true;
        weights wt = {.type = (int)info.type, .n = info.n_rows < 300 ? info.n_rows : 300, .k = info.dims[0],
                      .row_bytes = info.row_bytes, .stride = info.row_bytes, .bytes = (uint8_t *)info.data};
        wt.w = malloc(sizeof(float) * (size_t)(wt.n * wt.k));
        assert_int_equal(attn_gguf_dequantize_rows(g, &info, 0, wt.n, wt.w), ATTN_OK);
        attn_qtensor v = weights_view(&wt);
        const int64_t m = 5;
        float *x = malloc(sizeof(float) * (size_t)(m * wt.k)), *y = malloc(sizeof(float) * (size_t)(m * wt.n));
        if (wt.k == width) {
            for (int64_t i = 0; i < m; i++) {
                assert_int_equal(attn_gguf_dequantize_rows(g, &embd, 1000 + 7919 * i, 1, x + i * wt.k), ATTN_OK);
                for (int64_t c = 0; c < wt.k; c++) x[i * wt.k + c] *= gain[c];
            }
        } else {
            test_fill_normal(&r, x, m * wt.k, 1.0);
        }
        oracle o;
        oracle_make(&o, &wt, x, m);
        for (int i = 0; i < attn__isa_count(); i++) {
            if (!test_isa_use(i)) continue; /* the CPU or build lacks it */
            char what[96];
            snprintf(what, sizeof what, "%s %s (%s)", attn__isa_name(i), names[t], attn_quant_type_name(wt.type));
            matmul_ok(x, m, &v, y, ATTN_PRECISION_EXACT, 2);
            check_exact(y, &o, m, wt.n, wt.k, what);
            matmul_ok(x, m, &v, y, ATTN_PRECISION_FAST, 2);
            check_fast(y, &o, m, wt.n, wt.k, what);
        }
        test_isa_restore();
        /* FAST against EXACT over all rows of the tensor */
        const int64_t n = info.n_rows;
        attn_qtensor whole = {.type = (int)info.type, .rows = n, .cols = wt.k, .data = info.data};
        float *ye = malloc(sizeof(float) * (size_t)(m * n)), *yf = malloc(sizeof(float) * (size_t)(m * n));
        matmul_ok(x, m, &whole, ye, ATTN_PRECISION_EXACT, 2);
        matmul_ok(x, m, &whole, yf, ATTN_PRECISION_FAST, 2);
        double num = 0, den = 0, worst = 0, top = 0;
        for (int64_t e = 0; e < m * n; e++) {
            const double d = (double)yf[e] - ye[e];
            num += d * d, den += (double)ye[e] * ye[e];
            worst = fmax(worst, fabs(d)), top = fmax(top, fabs((double)ye[e]));
        }
        const double rel_rms = sqrt(num / den);
        print_message("[          ] %-22s %-4s N=%-6lld K=%-4lld fast vs exact: rms %.2e of rms(y), max %.2e of max|y|\n",
                      names[t], attn_quant_type_name(wt.type), (long long)n, (long long)wt.k, rel_rms, worst / top);
        if (!(rel_rms <= QUANT_FAST_REAL_REL_RMS_FAIL))
            fail_msg("%s: fast's rms error %.3g of the output's exceeds %.3g", names[t], rel_rms,
                     QUANT_FAST_REAL_REL_RMS_FAIL);
        free(ye), free(yf);
        oracle_free(&o);
        free(x), free(y), free(wt.w);
    }
    assert_true(seen[ATTN_GGUF_TYPE_Q8_0] && seen[ATTN_GGUF_TYPE_Q5_0] && seen[ATTN_GGUF_TYPE_Q6_K]);
    free(gain);
    attn_gguf_free(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dequantize_bits), cmocka_unit_test(test_against_oracles),
        cmocka_unit_test(test_threads),         cmocka_unit_test(test_reference),
        cmocka_unit_test(test_environment),     cmocka_unit_test(test_fast_fallback),
        cmocka_unit_test(test_debug_message),   cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_nonfinite),       cmocka_unit_test(test_check_finite),
        cmocka_unit_test(test_real_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
