/*
 * test_kv8.c — the 8-bit K/V formats (attn.h: ATTN_Q8_0, ATTN_FP8_E4M3):
 * the codecs against brute-force nearest values (round to nearest even,
 * saturation, e4m3's NaN and max, zero blocks), attn_sdpa_forward with
 * 8-bit K/V on every ISA against the reference kernel (the twin) and
 * against a double computation on the dequantized values written here,
 * the bits for 1 and 2 threads, the error against float32 K/V within the
 * bound docs/cache.md states, 8-bit caches (contiguous and paged agree
 * bit for bit, quantization on append is attn_quantize's), and refusals.
 *
 * Shape legend: q [1, L, Hq, D]  k [1, S, Hkv, D]  v [1, S, Hkv, Dv]
 */
#include "testutil.h"

#include "attn_cache.h"
#include "base/kv8.h"
#include "isa_list.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const attn_dtype KV8[2] = {ATTN_Q8_0, ATTN_FP8_E4M3};

/* ----------------------------------------------------------- the codecs */

/* The e4m3 value of code c, from its fields (written apart from kv8.h). */
static double e4m3_value(int c) {
    const int e = (c >> 3) & 15, m = c & 7;
    const double a = e == 0 ? m / 512.0 : ldexp(1.0 + m / 8.0, e - 7);
    return c & 0x80 ? -a : a;
}

/* The nearest e4m3 code to y >= 0 by search (ties to the even code),
 * saturating at 448 (code 0x7E). */
static int nearest_e4m3(double y) {
    int best = 0;
    for (int c = 1; c <= 0x7E; c++) {
        const double dc = fabs(e4m3_value(c) - y), db = fabs(e4m3_value(best) - y);
        if (dc < db || (dc == db && c % 2 == 0)) best = c;
    }
    return best;
}

static void test_e4m3_codes(void **state) {
    (void)state;
    int64_t sat = 0;
    for (int c = 0; c < 256; c++) {
        const float f = kv8_e4m3_to_f32((uint8_t)c);
        if ((c & 0x7F) == 0x7F) {
            assert_true(isnan(f));
            assert_int_equal(kv8_f32_to_e4m3(f, &sat) & 0x7F, 0x7F); /* NaN stays NaN */
            continue;
        }
        assert_true((double)f == e4m3_value(c));
        assert_int_equal(kv8_f32_to_e4m3(f, &sat), c); /* every code round-trips, -0 included */
    }
    assert_int_equal(sat, 0);
    assert_true(kv8_e4m3_to_f32(0x7E) == 448.0f);
    /* Ties between neighbours go to the even code; just off a tie, to the nearer. */
    for (int c = 0; c < 0x7E; c++) {
        const double mid = (e4m3_value(c) + e4m3_value(c + 1)) / 2;
        assert_int_equal(kv8_f32_to_e4m3((float)mid, &sat), c % 2 == 0 ? c : c + 1);
        assert_int_equal(kv8_f32_to_e4m3(nextafterf((float)mid, 0.0f), &sat), c);
        assert_int_equal(kv8_f32_to_e4m3(nextafterf((float)mid, INFINITY), &sat), c + 1);
    }
    assert_int_equal(sat, 0);
    /* Random magnitudes against the search. */
    test_rng r;
    test_rng_seed(&r, 35);
    for (int i = 0; i < 20000; i++) {
        const float y = (float)ldexp(test_rng_uniform(&r), (int)test_rng_range(&r, 20) - 11);
        assert_int_equal(kv8_f32_to_e4m3(y, &sat), nearest_e4m3(y));
        assert_int_equal(kv8_f32_to_e4m3(-y, &sat), 0x80 | nearest_e4m3(y));
    }
    assert_int_equal(sat, 0);
    /* Saturation: 464 is a tie that rounds to 448 (even), beyond it clamps, counted. */
    assert_int_equal(kv8_f32_to_e4m3(464.0f, &sat), 0x7E);
    assert_int_equal(sat, 0);
    assert_int_equal(kv8_f32_to_e4m3(465.0f, &sat), 0x7E);
    assert_int_equal(kv8_f32_to_e4m3(-INFINITY, &sat), 0xFE);
    assert_int_equal(kv8_f32_to_e4m3(1e30f, &sat), 0x7E);
    assert_int_equal(sat, 3);
}

static float f16_round(float x) { return dtype_f16_to_f32(dtype_f32_to_f16(x)); }

static void test_blocks(void **state) {
    (void)state;
    float x[64], y[64];
    uint8_t blocks[2 * KV8_BLOCK_BYTES];
    int64_t sat = -1;
    for (int t = 0; t < 2; t++) {
        /* A zero block: scale 0, codes 0, zeros back. */
        memset(x, 0, sizeof x);
        memset(blocks, 0xAB, sizeof blocks);
        assert_ok(attn_quantize(x, 64, KV8[t], blocks, &sat));
        for (size_t i = 0; i < sizeof blocks; i++) assert_int_equal(blocks[i], 0);
        assert_ok(attn_dequantize(blocks, KV8[t], 64, y));
        for (int i = 0; i < 64; i++) assert_true(y[i] == 0.0f);
        assert_int_equal(sat, 0);
        /* Random blocks: the scale is amax / top in float16, each value the
         * nearest the block holds (q8_0), or within e4m3's half step. */
        test_rng r;
        test_rng_seed(&r, 7 + (uint64_t)t);
        for (int rep = 0; rep < 200; rep++) {
            test_fill_normal(&r, x, 64, rep % 7 == 0 ? 1e-3 : 3.0);
            assert_ok(attn_quantize(x, 64, KV8[t], blocks, &sat));
            assert_int_equal(sat, 0);
            assert_ok(attn_dequantize(blocks, KV8[t], 64, y));
            for (int b = 0; b < 2; b++) {
                float amax = 0;
                for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(x[32 * b + i]));
                const float d = f16_round(amax / (KV8[t] == ATTN_Q8_0 ? 127.0f : 448.0f));
                assert_true(kv8_scale(blocks + b * KV8_BLOCK_BYTES) == d);
                for (int i = 0; i < 32; i++) {
                    const double xi = x[32 * b + i], yi = y[32 * b + i];
                    if (KV8[t] == ATTN_Q8_0) {
                        const double code = nearbyint(xi / d); /* an independent RNE quotient */
                        assert_true(yi == (float)(d * (float)code));
                    } else {
                        assert_true(fabs(yi - xi) <= fabs(xi) / 16 + d * 0x1p-10);
                    }
                }
            }
        }
    }
    /* Q8_0 ties: d = 1 exactly (amax 127), x = k + 0.5 goes to the even k. */
    for (int i = 0; i < 32; i++) x[i] = i == 0 ? 127.0f : (float)(i - 16) + 0.5f;
    assert_ok(attn_quantize(x, 32, ATTN_Q8_0, blocks, &sat));
    for (int i = 1; i < 32; i++) {
        const int code = (int8_t)blocks[2 + i];
        assert_int_equal(code % 2, 0);
        assert_true(fabs(code - x[i]) == 0.5);
    }
    /* Saturation: a scale beyond float16 is 65504, and what it cannot reach clamps, counted. */
    for (int i = 0; i < 32; i++) x[i] = 1.0f;
    x[3] = 1e9f;
    x[9] = -INFINITY;
    for (int t = 0; t < 2; t++) {
        assert_ok(attn_quantize(x, 32, KV8[t], blocks, &sat));
        assert_int_equal(sat, 2);
        assert_true(kv8_scale(blocks) == 65504.0f);
        assert_ok(attn_dequantize(blocks, KV8[t], 32, y));
        assert_true(isfinite(y[3]) && isfinite(y[9]) && y[3] > 0 && y[9] < 0);
    }
    /* NaN: fp8 keeps it, q8_0 refuses it. */
    x[9] = NAN;
    assert_ok(attn_quantize(x, 32, ATTN_FP8_E4M3, blocks, &sat));
    assert_ok(attn_dequantize(blocks, ATTN_FP8_E4M3, 32, y));
    assert_true(isnan(y[9]) && isfinite(y[8]));
    assert_refused(attn_quantize(x, 32, ATTN_Q8_0, blocks, &sat), ATTN_ERR_NONFINITE, "NaN");
    assert_refused(attn_quantize(x, 31, ATTN_Q8_0, blocks, &sat), ATTN_ERR_SHAPE, "blocks of 32");
    assert_refused(attn_quantize(x, 32, ATTN_F16, blocks, &sat), ATTN_ERR_UNSUPPORTED, "8-bit");
    assert_int_equal(attn_dtype_bytes(ATTN_Q8_0, 64), 68);
    assert_int_equal(attn_dtype_bytes(ATTN_FP8_E4M3, 33), 0);
    assert_string_equal(attn_dtype_name(ATTN_FP8_E4M3), "fp8_e4m3");
}

/* -------------------------------------------------------- the forward */

enum { HQ = 4, HKV = 2, D = 64, DV = 32, S = 100 };

/* K or V [1, S, Hkv, width] quantized, and its dequantized values. */
typedef struct kv8_tensor {
    uint8_t *bytes;
    float *values;
    attn_tensor t;
} kv8_tensor;

static kv8_tensor kv8_make(const float *x, int64_t rows, int64_t width, attn_dtype dtype) {
    const int64_t n = rows * HKV * width;
    kv8_tensor k = {malloc(attn_dtype_bytes(dtype, n)), malloc((size_t)n * sizeof(float)), {0}};
    assert_true(k.bytes && k.values);
    assert_ok(attn_quantize(x, n, dtype, k.bytes, NULL));
    assert_ok(attn_dequantize(k.bytes, dtype, n, k.values));
    k.t = attn_tensor_view(k.bytes, dtype, 1, rows, HKV, width);
    return k;
}

static void kv8_free(kv8_tensor *k) {
    free(k->bytes);
    free(k->values);
}

/* The attention of q over float K/V [S, Hkv, *], in double, written here:
 * causal lower-right when asked. */
static void oracle(const float *q, int64_t L, const float *k, const float *v, int64_t s_len, bool causal,
                   double *out) {
    const double scale = 1.0 / sqrt((double)D);
    double *w = malloc((size_t)s_len * sizeof(double));
    for (int64_t i = 0; i < L; i++)
        for (int64_t h = 0; h < HQ; h++) {
            const int64_t g = h / (HQ / HKV), last = causal ? s_len - L + i : s_len - 1;
            double mx = -INFINITY, sum = 0;
            for (int64_t j = 0; j <= last; j++) {
                double dot = 0;
                for (int64_t d = 0; d < D; d++) dot += (double)q[(i * HQ + h) * D + d] * k[(j * HKV + g) * D + d];
                w[j] = dot * scale;
                mx = fmax(mx, w[j]);
            }
            for (int64_t j = 0; j <= last; j++) sum += w[j] = exp(w[j] - mx);
            for (int64_t d = 0; d < DV; d++) {
                double acc = 0;
                for (int64_t j = 0; j <= last; j++) acc += w[j] * v[(j * HKV + g) * DV + d];
                out[(i * HQ + h) * DV + d] = acc / sum;
            }
        }
    free(w);
}

static double max_diff(const float *a, const double *b, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++) m = fmax(m, fabs((double)a[i] - b[i]));
    return m;
}

static void test_forward(void **state) {
    (void)state;
    test_rng r;
    test_rng_seed(&r, 3535);
    float *k = test_random_floats(&r, S * HKV * D, 1.0), *v = test_random_floats(&r, S * HKV * DV, 1.0);
    const int64_t lens[3] = {1, 3, 40}; /* the rows path, and the tile path */
    for (int t = 0; t < 2; t++) {
        kv8_tensor kq = kv8_make(k, S, D, KV8[t]), vq = kv8_make(v, S, DV, KV8[t]);
        for (int li = 0; li < 3; li++)
            for (int causal = 0; causal < 2; causal++) {
                const int64_t L = lens[li];
                float *q = test_random_floats(&r, L * HQ * D, 1.0);
                float *out = malloc((size_t)(L * HQ * DV) * sizeof(float));
                float *out1 = malloc((size_t)(L * HQ * DV) * sizeof(float));
                double *want = malloc((size_t)(L * HQ * DV) * sizeof(double));
                oracle(q, L, kq.values, vq.values, S, causal, want);
                attn_tensor qt = attn_tensor_4d(q, 1, L, HQ, D), ot = attn_tensor_4d(out, 1, L, HQ, DV),
                            o1 = attn_tensor_4d(out1, 1, L, HQ, DV);
                attn_sdpa_options opt = ATTN_SDPA_OPTIONS_INIT;
                opt.causal = causal;
                opt.align = ATTN_ALIGN_LOWER_RIGHT;
                opt.kernel = ATTN_KERNEL_REF; /* the twin */
                assert_ok(attn_sdpa_forward(&qt, &kq.t, &vq.t, &opt, &ot, NULL, NULL));
                if (max_diff(out, want, L * HQ * DV) > 1e-6)
                    fail_msg("%s ref L=%lld: %g from the double oracle", attn_dtype_name(KV8[t]), (long long)L,
                             max_diff(out, want, L * HQ * DV));
                opt.kernel = ATTN_KERNEL_FLASH;
                for (int i = 0; i < attn__isa_count(); i++) {
                    if (!test_isa_use(i)) continue;
                    opt.threads = 1;
                    assert_ok(attn_sdpa_forward(&qt, &kq.t, &vq.t, &opt, &o1, NULL, NULL));
                    opt.threads = 2;
                    assert_ok(attn_sdpa_forward(&qt, &kq.t, &vq.t, &opt, &ot, NULL, NULL));
                    assert_memory_equal(out, out1, (size_t)(L * HQ * DV) * sizeof(float));
                    if (max_diff(out, want, L * HQ * DV) > 2e-5)
                        fail_msg("%s flash on %s, L=%lld causal %d: %g from the double oracle", attn_dtype_name(KV8[t]),
                                 attn__isa_name(i), (long long)L, causal, max_diff(out, want, L * HQ * DV));
                }
                test_isa_restore();
                free(q);
                free(out);
                free(out1);
                free(want);
            }
        kv8_free(&kq);
        kv8_free(&vq);
    }
    free(k);
    free(v);
}

/* The error of 8-bit K/V against float32 K/V on N(0, 1) data, S = 512,
 * D = Dv = 128: within docs/cache.md's bounds (q8_0 5e-3, fp8 3e-2 max abs,
 * the outputs being O(0.1)). */
static void test_error_bound(void **state) {
    (void)state;
    enum { SL = 512, W = 128, H = 2 };
    test_rng r;
    test_rng_seed(&r, 99);
    float *q = test_random_floats(&r, H * W, 1.0), *k = test_random_floats(&r, SL * H * W, 1.0),
          *v = test_random_floats(&r, SL * H * W, 1.0);
    float ref[H * W], got[H * W];
    attn_tensor qt = attn_tensor_4d(q, 1, 1, H, W), kt = attn_tensor_4d(k, 1, SL, H, W), vt = attn_tensor_4d(v, 1, SL, H, W);
    attn_tensor rt = attn_tensor_4d(ref, 1, 1, H, W), gt = attn_tensor_4d(got, 1, 1, H, W);
    assert_ok(attn_sdpa_forward(&qt, &kt, &vt, NULL, &rt, NULL, NULL));
    const double bound[2] = {5e-3, 3e-2};
    for (int t = 0; t < 2; t++) {
        uint8_t *kb = malloc(attn_dtype_bytes(KV8[t], SL * H * W)), *vb = malloc(attn_dtype_bytes(KV8[t], SL * H * W));
        assert_ok(attn_quantize(k, SL * H * W, KV8[t], kb, NULL));
        assert_ok(attn_quantize(v, SL * H * W, KV8[t], vb, NULL));
        attn_tensor k8 = attn_tensor_view(kb, KV8[t], 1, SL, H, W), v8 = attn_tensor_view(vb, KV8[t], 1, SL, H, W);
        assert_ok(attn_sdpa_forward(&qt, &k8, &v8, NULL, &gt, NULL, NULL));
        double err = 0;
        for (int i = 0; i < H * W; i++) err = fmax(err, fabs((double)got[i] - ref[i]));
        print_message("%s: max abs error vs float32 K/V %.3g\n", attn_dtype_name(KV8[t]), err);
        assert_true(err <= bound[t]);
        free(kb);
        free(vb);
    }
    free(q);
    free(k);
    free(v);
}

/* ----------------------------------------------------------- the cache */

static attn_kv_cache *cache_of(attn_dtype dtype, bool paged) {
    attn_kv_cache_config cfg = ATTN_KV_CACHE_CONFIG_INIT;
    cfg.layers = 2;
    cfg.kv_heads = HKV;
    cfg.head_dim = D;
    cfg.value_dim = DV;
    cfg.dtype = dtype;
    cfg.max_seqs = 2;
    cfg.capacity = 160;
    if (paged) {
        cfg.layout = ATTN_KV_PAGED;
        cfg.block_rows = 16;
        cfg.num_blocks = 24;
    }
    attn_kv_cache *c = NULL;
    assert_ok(attn_kv_cache_new(&cfg, &c));
    return c;
}

static void test_cache(void **state) {
    (void)state;
    test_rng r;
    test_rng_seed(&r, 8);
    float *k = test_random_floats(&r, S * HKV * D, 1.0), *v = test_random_floats(&r, S * HKV * DV, 1.0);
    float *q = test_random_floats(&r, HQ * D, 1.0);
    for (int t = 0; t < 2; t++) {
        kv8_tensor kq = kv8_make(k, S, D, KV8[t]), vq = kv8_make(v, S, DV, KV8[t]);
        float out[2][HQ * DV];
        for (int paged = 0; paged < 2; paged++) {
            attn_kv_cache *c = cache_of(KV8[t], paged);
            int64_t seq, other;
            assert_ok(attn_kv_cache_seq_add(c, &other));
            assert_ok(attn_kv_cache_seq_add(c, &seq));
            for (int64_t at = 0, n = 1; at < S; at += n, n = n % 13 + 2) { /* uneven chunks */
                if (n > S - at) n = S - at;
                attn_tensor kt = attn_tensor_4d(k + at * HKV * D, 1, n, HKV, D),
                            vt = attn_tensor_4d(v + at * HKV * DV, 1, n, HKV, DV);
                assert_ok(attn_kv_cache_append(c, other, 0, &kt, &vt)); /* interleaved: the blocks are scattered */
                assert_ok(attn_kv_cache_append(c, seq, 0, &kt, &vt));
            }
            /* Stored as attn_quantize stores them. */
            attn_kv_segment segs[16];
            int64_t count = 0;
            assert_ok(attn_kv_cache_view(c, seq, 0, segs, 16, &count));
            for (int64_t s = 0; s < count; s++) {
                const int64_t rows = segs[s].k.shape[1];
                assert_memory_equal(segs[s].k.data, kq.bytes + kv8_offset_bytes(segs[s].position * HKV * D),
                                    attn_dtype_bytes(KV8[t], rows * HKV * D));
                assert_memory_equal(segs[s].v.data, vq.bytes + kv8_offset_bytes(segs[s].position * HKV * DV),
                                    attn_dtype_bytes(KV8[t], rows * HKV * DV));
            }
            attn_tensor qt = attn_tensor_4d(q, 1, 1, HQ, D), ot = attn_tensor_4d(out[paged], 1, 1, HQ, DV);
            assert_ok(attn_kv_cache_attend(c, 0, 1, &seq, NULL, &qt, NULL, &ot, NULL));
            int64_t sat = -1;
            assert_ok(attn_kv_cache_saturated(c, &sat));
            assert_int_equal(sat, 0);
            attn_kv_cache_free(c);
        }
        assert_memory_equal(out[0], out[1], sizeof out[0]); /* paged gives the contiguous bits */
        double want[HQ * DV];
        oracle(q, 1, kq.values, vq.values, S, false, want);
        assert_true(max_diff(out[0], want, HQ * DV) <= 2e-5);
        kv8_free(&kq);
        kv8_free(&vq);
    }
    free(k);
    free(v);
    free(q);
}

/* bfloat16 rounding of x, to nearest even, written out here (finite x):
 * what a bf16 cache stores of it. */
static float bf16_round(float x) {
    uint32_t bits;
    memcpy(&bits, &x, sizeof bits);
    bits += 0x7FFFu + ((bits >> 16) & 1u);
    bits &= 0xFFFF0000u;
    memcpy(&x, &bits, sizeof x);
    return x;
}

/* Keys and values of their own dtypes (value_dtype): K at bf16, V at q8_0,
 * as the decoder's --kv-cache bf16:q8_0 stores them.  Each pool holds its
 * own bytes, the attention reads each in its own dtype (the oracle's keys
 * rounded to bf16, its values q8_0's), paged = contiguous bit for bit, and
 * a v given in the keys' dtype is refused by name. */
static void test_split_dtypes(void **state) {
    (void)state;
    test_rng r;
    test_rng_seed(&r, 9);
    float *k = test_random_floats(&r, S * HKV * D, 1.0), *v = test_random_floats(&r, S * HKV * DV, 1.0);
    float *q = test_random_floats(&r, HQ * D, 1.0), *k16 = malloc((size_t)(S * HKV * D) * sizeof(float));
    for (int64_t i = 0; i < S * HKV * D; i++) k16[i] = bf16_round(k[i]);
    kv8_tensor vq = kv8_make(v, S, DV, ATTN_Q8_0);
    float out[2][HQ * DV];
    for (int paged = 0; paged < 2; paged++) {
        attn_kv_cache_config cfg = ATTN_KV_CACHE_CONFIG_INIT;
        cfg.layers = 1;
        cfg.kv_heads = HKV;
        cfg.head_dim = D;
        cfg.value_dim = DV;
        cfg.dtype = ATTN_BF16;
        cfg.value_dtype = ATTN_Q8_0;
        cfg.max_seqs = 1;
        cfg.capacity = 128;
        if (paged) cfg.layout = ATTN_KV_PAGED, cfg.block_rows = 16, cfg.num_blocks = 8;
        attn_kv_cache *c = NULL;
        assert_ok(attn_kv_cache_new(&cfg, &c));
        int64_t seq;
        assert_ok(attn_kv_cache_seq_add(c, &seq));
        attn_tensor kt = attn_tensor_4d(k, 1, S, HKV, D), vt = attn_tensor_4d(v, 1, S, HKV, DV);
        assert_ok(attn_kv_cache_append(c, seq, 0, &kt, &vt));
        attn_kv_segment segs[16];
        int64_t count = 0;
        assert_ok(attn_kv_cache_view(c, seq, 0, segs, 16, &count));
        for (int64_t i = 0; i < count; i++) {
            assert_int_equal(segs[i].k.dtype, ATTN_BF16);
            assert_int_equal(segs[i].v.dtype, ATTN_Q8_0);
            assert_memory_equal(segs[i].v.data, vq.bytes + kv8_offset_bytes(segs[i].position * HKV * DV),
                                attn_dtype_bytes(ATTN_Q8_0, segs[i].v.shape[1] * HKV * DV));
        }
        attn_tensor qt = attn_tensor_4d(q, 1, 1, HQ, D), ot = attn_tensor_4d(out[paged], 1, 1, HQ, DV);
        assert_ok(attn_kv_cache_attend(c, 0, 1, &seq, NULL, &qt, NULL, &ot, NULL));
        /* A v in the keys' dtype is not the values' own. */
        uint16_t half[HKV * DV] = {0};
        attn_tensor k1 = attn_tensor_4d(k, 1, 1, HKV, D), v16 = attn_tensor_view(half, ATTN_BF16, 1, 1, HKV, DV);
        assert_refused(attn_kv_cache_append(c, seq, 0, &k1, &v16), ATTN_ERR_UNSUPPORTED, "the dtype it stores v in, q8_0");
        attn_kv_cache_free(c);
    }
    assert_memory_equal(out[0], out[1], sizeof out[0]);
    double want[HQ * DV];
    oracle(q, 1, k16, vq.values, S, false, want);
    assert_true(max_diff(out[0], want, HQ * DV) <= 2e-5);
    /* The config's refusals name the side. */
    attn_kv_cache_config bad = ATTN_KV_CACHE_CONFIG_INIT;
    bad.layers = bad.kv_heads = bad.max_seqs = 1;
    bad.head_dim = 48;
    bad.capacity = 8;
    bad.dtype = ATTN_BF16;
    bad.value_dtype = ATTN_FP8_E4M3;
    attn_kv_cache *c = NULL;
    assert_refused(attn_kv_cache_new(&bad, &c), ATTN_ERR_SHAPE, "fp8_e4m3 V");
    bad.value_dtype = ATTN_F64;
    assert_refused(attn_kv_cache_new(&bad, &c), ATTN_ERR_UNSUPPORTED, "value_dtype");
    kv8_free(&vq);
    free(k);
    free(k16);
    free(v);
    free(q);
}

/* ----------------------------------------------------------- refusals */

static void test_refusals(void **state) {
    (void)state;
    attn_kv_cache_config cfg = ATTN_KV_CACHE_CONFIG_INIT;
    cfg.layers = 1;
    cfg.kv_heads = 1;
    cfg.head_dim = 48;
    cfg.dtype = ATTN_Q8_0;
    cfg.max_seqs = 1;
    cfg.capacity = 8;
    attn_kv_cache *c = NULL;
    assert_refused(attn_kv_cache_new(&cfg, &c), ATTN_ERR_SHAPE, "head_dim (48) must be a multiple of 32");
    assert_null(c);

    float q[32 * 2] = {0}, out[32] = {0}, x[64 * 2] = {0};
    uint8_t kb[4 * KV8_BLOCK_BYTES] = {0};
    attn_tensor qt = attn_tensor_4d(q, 1, 1, 1, 32), ot = attn_tensor_4d(out, 1, 1, 1, 32);
    attn_tensor k8 = attn_tensor_view(kb, ATTN_Q8_0, 1, 2, 1, 32), v8 = k8;
    assert_ok(attn_sdpa_forward(&qt, &k8, &v8, NULL, &ot, NULL, NULL));
    attn_tensor q8 = attn_tensor_view(kb, ATTN_Q8_0, 1, 1, 1, 32);
    assert_refused(attn_sdpa_forward(&q8, &k8, &v8, NULL, &ot, NULL, NULL), ATTN_ERR_UNSUPPORTED, "k and v");
    attn_tensor k48 = attn_tensor_view(kb, ATTN_FP8_E4M3, 1, 2, 1, 48);
    attn_tensor q48 = attn_tensor_4d(x, 1, 1, 1, 48);
    assert_refused(attn_sdpa_forward(&q48, &k48, &k48, NULL, &ot, NULL, NULL), ATTN_ERR_SHAPE, "multiple of 32");
    float dq[32], dk[64], dv[64];
    attn_tensor dqt = attn_tensor_4d(dq, 1, 1, 1, 32), dkt = attn_tensor_4d(dk, 1, 2, 1, 32),
                dvt = attn_tensor_4d(dv, 1, 2, 1, 32);
    assert_refused(attn_sdpa_backward(&qt, &k8, &v8, NULL, NULL, NULL, &ot, &dqt, &dkt, &dvt), ATTN_ERR_UNSUPPORTED,
                   "backward does not take 8-bit");
    size_t bytes;
    assert_refused(attn_sdpa_backward_workspace_size(&qt, &k8, &v8, NULL, &bytes), ATTN_ERR_UNSUPPORTED,
                   "backward does not take 8-bit");

    /* A q8_0 cache refuses NaN (nothing appended); fp8 counts what it saturates. */
    cfg.head_dim = 32;
    assert_ok(attn_kv_cache_new(&cfg, &c));
    int64_t seq, len = -1, sat = -1;
    assert_ok(attn_kv_cache_seq_add(c, &seq));
    x[5] = NAN;
    attn_tensor xt = attn_tensor_4d(x, 1, 1, 1, 32), ok = attn_tensor_4d(x + 32, 1, 1, 1, 32);
    assert_refused(attn_kv_cache_append(c, seq, 0, &xt, &ok), ATTN_ERR_NONFINITE, "NaN");
    assert_ok(attn_kv_cache_seq_length(c, seq, 0, &len));
    assert_int_equal(len, 0);
    attn_kv_cache_free(c);
    cfg.dtype = ATTN_FP8_E4M3;
    assert_ok(attn_kv_cache_new(&cfg, &c));
    assert_ok(attn_kv_cache_seq_add(c, &seq));
    x[5] = INFINITY;
    assert_ok(attn_kv_cache_append(c, seq, 0, &xt, &ok));
    assert_ok(attn_kv_cache_saturated(c, &sat));
    assert_int_equal(sat, 1);
    attn_kv_cache_free(c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_e4m3_codes), cmocka_unit_test(test_blocks),  cmocka_unit_test(test_forward),
        cmocka_unit_test(test_error_bound), cmocka_unit_test(test_cache), cmocka_unit_test(test_split_dtypes),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
