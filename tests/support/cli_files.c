#include "cli_files.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

void test_save_array(const char *path, attn_dtype dtype, int ndim, const int64_t *shape, const void *data) {
    attn_array a = {.dtype = dtype, .ndim = ndim, .count = 1, .data = (void *)data};
    for (int d = 0; d < ndim; d++) {
        a.shape[d] = shape[d];
        a.count *= shape[d];
    }
    if (attn_npy_save(path, &a)) fail_msg("saving %s: %s", path, attn_last_error());
}

void test_save_f32(const char *path, int ndim, const int64_t *shape, const float *data) {
    test_save_array(path, ATTN_F32, ndim, shape, data);
}

attn_array test_load_array(const char *path, attn_dtype dtype) {
    attn_array a = {0};
    assert_ok(attn_npy_load(path, &a));
    assert_ok(attn_array_convert(&a, dtype));
    return a;
}

float *test_load_f32(const char *path, int ndim, const int64_t *shape) {
    attn_array a = {0};
    if (attn_npy_load(path, &a)) fail_msg("loading %s: %s", path, attn_last_error());
    if (a.dtype != ATTN_F32) fail_msg("%s has dtype %s, want float32", path, attn_dtype_name(a.dtype));
    if (a.ndim != ndim) fail_msg("%s has rank %d, want %d", path, a.ndim, ndim);
    for (int d = 0; d < ndim; d++)
        if (a.shape[d] != shape[d])
            fail_msg("%s: dimension %d is %lld, want %lld", path, d, (long long)a.shape[d], (long long)shape[d]);
    return a.data;
}

void test_expect_close(const char *what, const float *want, const float *got, int64_t n, double rel) {
    double scale = 1, diff = 0;
    for (int64_t e = 0; e < n; e++) {
        scale = fmax(scale, fabs((double)want[e]));
        diff = fmax(diff, fabs((double)want[e] - (double)got[e]));
        if (isnan(got[e])) fail_msg("%s: NaN at %lld", what, (long long)e);
    }
    if (diff > rel * scale) fail_msg("%s: max diff %.3g (scale %.3g)", what, diff, scale);
}

void random_case_cli_flags(const random_case *rc, char *flags, size_t size) {
    const oracle_case *c = &rc->c;
    size_t n = 0;
    flags[0] = 0;
    if (c->scale > 0) n += (size_t)snprintf(flags + n, size - n, " --scale %.9g", c->scale);
    if (c->causal == 1) n += (size_t)snprintf(flags + n, size - n, " --causal");
    if (c->causal == 2) n += (size_t)snprintf(flags + n, size - n, " --causal-lower-right");
    if (!c->causal && c->lower_right_window) n += (size_t)snprintf(flags + n, size - n, " --align lower-right");
    if (c->window) n += (size_t)snprintf(flags + n, size - n, " --window %lld,%lld", (long long)c->left, (long long)c->right);
    if (c->key_lengths) {
        test_save_array(test_path("lens.npy"), ATTN_I64, 1, (int64_t[]){c->B}, c->key_lengths);
        n += (size_t)snprintf(flags + n, size - n, " --key-lengths %s", test_path("lens.npy"));
    }
    if (c->mask) {
        test_save_array(test_path("mask.npy"), ATTN_U8, 4, c->mask_shape, c->mask);
        n += (size_t)snprintf(flags + n, size - n, " --mask %s", test_path("mask.npy"));
    }
    if (c->bias) {
        test_save_f32(test_path("bias.npy"), 4, c->bias_shape, c->bias);
        n += (size_t)snprintf(flags + n, size - n, " --bias %s", test_path("bias.npy"));
    }
}
