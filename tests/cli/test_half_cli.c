/*
 * test_half_cli.c — `attn sdpa` on float16 and bfloat16 files: inputs used
 * as stored (the result is the library's on the same half tensors, bit for
 * bit: no float32 round trip in the file path), --out-dtype f32|f16|bf16
 * (O written in that dtype, rounded once), --layout BHLD on 2-byte
 * elements, --precision exact|fast, and the refusals: a bad --out-dtype or
 * --precision (exit 2), a NaN in a half file (exit 1).
 *
 * Shape legend: q [B, L, Hq, D]  k, v [B, S, Hkv, D]  o [B, L, Hq, D]
 */
#include "cli_files.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { B = 2, L = 5, S = 37, HQ = 4, HKV = 2, D = 24 };

static uint16_t *to_half(const float *x, int64_t n, attn_dtype dtype) {
    attn_array a = {0};
    const int64_t shape[1] = {n};
    if (attn_array_alloc(&a, ATTN_F32, 1, shape)) fail_msg("%s", attn_last_error());
    memcpy(a.data, x, sizeof(float) * (size_t)n);
    if (attn_array_convert(&a, dtype)) fail_msg("%s", attn_last_error());
    return a.data; /* the caller frees */
}

/* The library's answer on the same tensors, out in out_dtype. */
static void *library_out(const void *q, attn_dtype q_dt, const void *k, const void *v, attn_dtype kv_dt,
                         attn_dtype out_dt) {
    attn_tensor qt = attn_tensor_view((void *)q, q_dt, B, L, HQ, D);
    attn_tensor kt = attn_tensor_view((void *)k, kv_dt, B, S, HKV, D);
    attn_tensor vt = attn_tensor_view((void *)v, kv_dt, B, S, HKV, D);
    void *out = malloc(sizeof(float) * B * L * HQ * D);
    attn_tensor ot = attn_tensor_view(out, out_dt, B, L, HQ, D);
    attn_sdpa_options opt = ATTN_SDPA_OPTIONS_INIT;
    opt.causal = 1;
    opt.align = ATTN_ALIGN_LOWER_RIGHT;
    if (attn_sdpa_forward(&qt, &kt, &vt, &opt, &ot, NULL, NULL)) fail_msg("%s", attn_last_error());
    return out;
}

/* Reads path back: it must hold dtype, shape [B, L, HQ, D] and exactly the
 * bytes of want. */
static void expect_file(const char *path, attn_dtype dtype, const void *want, const char *what) {
    attn_array a = {0};
    if (attn_npy_load(path, &a)) fail_msg("%s: %s", what, attn_last_error());
    if (a.dtype != dtype) fail_msg("%s: O has dtype %s, want %s", what, attn_dtype_name(a.dtype), attn_dtype_name(dtype));
    const int64_t shape[4] = {B, L, HQ, D};
    assert_int_equal(a.ndim, 4);
    for (int d = 0; d < 4; d++) assert_int_equal(a.shape[d], shape[d]);
    if (memcmp(a.data, want, (size_t)a.count * attn_dtype_size(dtype)) != 0)
        fail_msg("%s: O differs from the library's on the same half tensors", what);
    attn_array_free(&a);
}

/* [B, X, Y, W] -> [B, Y, X, W] for 2-byte elements (a BHLD file). */
static uint16_t *swap_axes(const uint16_t *x, int64_t X, int64_t Y, int64_t W) {
    uint16_t *y = malloc(sizeof(uint16_t) * (size_t)(B * X * Y * W));
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < X; i++)
            for (int64_t j = 0; j < Y; j++)
                memcpy(y + ((b * Y + j) * X + i) * W, x + ((b * X + i) * Y + j) * W, sizeof(uint16_t) * (size_t)W);
    return y;
}

static void half_inputs_as_stored(void **state) {
    (void)state;
    test_rng r;
    test_rng_seed(&r, 77);
    float q[B * L * HQ * D], k[B * S * HKV * D], v[B * S * HKV * D];
    test_fill_normal(&r, q, B * L * HQ * D, 1.0);
    test_fill_normal(&r, k, B * S * HKV * D, 1.0);
    test_fill_normal(&r, v, B * S * HKV * D, 1.0);
    static const attn_dtype kv_dtypes[2] = {ATTN_F16, ATTN_BF16};
    static const attn_dtype out_dtypes[3] = {ATTN_F32, ATTN_F16, ATTN_BF16};
    static const char *const out_names[3] = {"f32", "f16", "bf16"};
    for (int t = 0; t < 2; t++) {
        const attn_dtype kv_dt = kv_dtypes[t];
        uint16_t *qh = to_half(q, B * L * HQ * D, kv_dt), *kh = to_half(k, B * S * HKV * D, kv_dt),
                 *vh = to_half(v, B * S * HKV * D, kv_dt);
        test_save_array(test_path("q.npy"), kv_dt, 4, (int64_t[]){B, L, HQ, D}, qh);
        test_save_array(test_path("qf.npy"), ATTN_F32, 4, (int64_t[]){B, L, HQ, D}, q);
        test_save_array(test_path("k.npy"), kv_dt, 4, (int64_t[]){B, S, HKV, D}, kh);
        test_save_array(test_path("v.npy"), kv_dt, 4, (int64_t[]){B, S, HKV, D}, vh);
        for (int o = 0; o < 3; o++) {
            /* all half, and float q over a half cache */
            for (int qf = 0; qf < 2; qf++) {
                char *out = NULL;
                const char *extra = o == 0 && qf == 0 ? "" : " --out-dtype ";
                int rc = test_run_cli(&out, "sdpa -q %s -k %s -v %s -o %s --causal-lower-right --quiet%s%s",
                                      test_path(qf ? "qf.npy" : "q.npy"), test_path("k.npy"), test_path("v.npy"),
                                      test_path("o.npy"), extra, o == 0 && qf == 0 ? "" : out_names[o]);
                if (rc != 0) fail_msg("attn sdpa exited %d: %s", rc, out);
                free(out);
                void *want = library_out(qf ? (const void *)q : qh, qf ? ATTN_F32 : kv_dt, kh, vh, kv_dt, out_dtypes[o]);
                char what[96];
                snprintf(what, sizeof what, "k, v %s, q %s, --out-dtype %s", attn_dtype_name(kv_dt),
                         qf ? "float32" : attn_dtype_name(kv_dt), out_names[o]);
                expect_file(test_path("o.npy"), out_dtypes[o], want, what);
                free(want);
            }
        }
        /* --layout BHLD on 2-byte elements: the same answer, O in BHLD */
        uint16_t *qb = swap_axes(qh, L, HQ, D), *kb = swap_axes(kh, S, HKV, D), *vb = swap_axes(vh, S, HKV, D);
        test_save_array(test_path("qb.npy"), kv_dt, 4, (int64_t[]){B, HQ, L, D}, qb);
        test_save_array(test_path("kb.npy"), kv_dt, 4, (int64_t[]){B, HKV, S, D}, kb);
        test_save_array(test_path("vb.npy"), kv_dt, 4, (int64_t[]){B, HKV, S, D}, vb);
        char *out = NULL;
        int rc = test_run_cli(&out, "sdpa -q %s -k %s -v %s -o %s --layout BHLD --causal-lower-right --quiet --out-dtype %s",
                              test_path("qb.npy"), test_path("kb.npy"), test_path("vb.npy"), test_path("ob.npy"),
                              out_names[1 + t]);
        if (rc != 0) fail_msg("attn sdpa --layout BHLD exited %d: %s", rc, out);
        free(out);
        uint16_t *want = library_out(qh, kv_dt, kh, vh, kv_dt, kv_dt);
        uint16_t *want_bhld = swap_axes(want, L, HQ, D);
        attn_array a = {0};
        if (attn_npy_load(test_path("ob.npy"), &a)) fail_msg("%s", attn_last_error());
        assert_int_equal(a.dtype, kv_dt);
        assert_int_equal(a.shape[1], HQ);
        if (memcmp(a.data, want_bhld, sizeof(uint16_t) * B * L * HQ * D) != 0)
            fail_msg("--layout BHLD with %s files: O differs", attn_dtype_name(kv_dt));
        attn_array_free(&a);
        free(want), free(want_bhld), free(qb), free(kb), free(vb);
        free(qh), free(kh), free(vh);
    }
}

static void options_and_refusals(void **state) {
    (void)state;
    char *out = NULL;
    assert_int_equal(test_run_cli(&out, "sdpa --help"), 0);
    assert_non_null(strstr(out, "--out-dtype f32|f16|bf16"));
    assert_non_null(strstr(out, "--precision exact|fast"));
    free(out);

    test_rng r;
    test_rng_seed(&r, 78);
    float x[3 * 4];
    test_fill_normal(&r, x, 12, 1.0);
    uint16_t *h = to_half(x, 12, ATTN_BF16);
    test_save_array(test_path("h.npy"), ATTN_BF16, 2, (int64_t[]){3, 4}, h);
    /* --precision fast is taken (exact where the CPU has no native path) */
    assert_int_equal(test_run_cli(&out, "sdpa -q %s -k %s -v %s -o %s --precision fast --quiet", test_path("h.npy"),
                                  test_path("h.npy"), test_path("h.npy"), test_path("of.npy")), 0);
    free(out);
    static const char *const bad[] = {"--out-dtype f64", "--out-dtype", "--precision nope", "--precision"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = test_run_cli(&out, "sdpa -q %s -k %s -v %s -o %s %s", test_path("h.npy"), test_path("h.npy"),
                              test_path("h.npy"), test_path("bad.npy"), bad[i]);
        if (rc != 2) fail_msg("'%s' exited %d, want 2: %s", bad[i], rc, out);
        assert_non_null(strstr(out, bad[i][2] == 'o' ? "--out-dtype" : "--precision"));
        free(out);
    }
    /* a NaN in a half file is refused like one in a float32 file */
    h[5] = 0x7FC0; /* bfloat16 NaN */
    test_save_array(test_path("nan.npy"), ATTN_BF16, 2, (int64_t[]){3, 4}, h);
    int rc = test_run_cli(&out, "sdpa -q %s -k %s -v %s -o %s", test_path("h.npy"), test_path("nan.npy"),
                          test_path("h.npy"), test_path("bad.npy"));
    if (rc != 1) fail_msg("a NaN in a bfloat16 k exited %d, want 1: %s", rc, out);
    assert_non_null(strstr(out, "element 5 is NaN"));
    free(out);
    free(h);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(half_inputs_as_stored),
        cmocka_unit_test(options_and_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, test_group_teardown);
}
