/*
 * eltwise.c — which elementwise micro-kernels the decoder runs (eltwise.h),
 * and their reference twins.
 */
#include "model/eltwise.h"

#include "attn.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------- reference twins */

static void ref_exp(const float *x, int64_t n, float *y) {
    for (int64_t i = 0; i < n; i++) y[i] = (float)exp((double)x[i]);
}

static void ref_silu_mul(float *g, const float *u, int64_t n) {
    for (int64_t i = 0; i < n; i++) g[i] = (float)((double)g[i] / (1.0 + exp(-(double)g[i]))) * u[i];
}

/* PyTorch's gelu(approximate="tanh"), Hugging Face's gelu_pytorch_tanh:
 * 0.5 x (1 + tanh t) as x / (1 + e^-2t), which does not cancel to 0
 * below x = -5.6 as 1 + tanh t does even in double. */
static void ref_gelu_tanh_mul(float *g, const float *u, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        const double x = g[i];
        g[i] = (float)(x / (1.0 + exp(-2.0 * 0.7978845608028654 * (x + 0.044715 * x * x * x)))) * u[i];
    }
}

/* The mean of squares in double: Hugging Face's float32 mean is within a
 * few ulps of it. */
static void ref_rmsnorm(const float *x, int64_t n, const float *w, double eps, float *y) {
    double ss = 0.0;
    for (int64_t i = 0; i < n; i++) ss += (double)x[i] * (double)x[i];
    const float inv = (float)(1.0 / sqrt(ss / (double)n + eps));
    for (int64_t i = 0; i < n; i++) y[i] = (x[i] * inv) * w[i];
}

static void ref_add(float *x, const float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] += y[i];
}

static const eltwise_kernels ref_kernels = {
    .isa = "ref",
    .exp = ref_exp,
    .silu_mul = ref_silu_mul,
    .gelu_tanh_mul = ref_gelu_tanh_mul,
    .rmsnorm = ref_rmsnorm,
    .add = ref_add,
};

/* ------------------------------------------------------------ the choice */

static const eltwise_kernels *const isas[] = {&attn__eltwise_generic, &attn__eltwise_avx2, &attn__eltwise_avx512};

const eltwise_kernels *attn__eltwise_named(const char *isa) {
    if (!isa) return NULL;
    if (!strcmp(isa, "ref")) return &ref_kernels;
    for (size_t i = 0; i < sizeof isas / sizeof isas[0]; i++)
        if (!strcmp(isas[i]->isa, isa)) return !isas[i]->supported || isas[i]->supported() ? isas[i] : NULL;
    return NULL;
}

static int env_is(const char *name, const char *value) {
    const char *e = getenv(name);
    return e && !strcmp(e, value);
}

const eltwise_kernels *attn__eltwise(int ref) {
    if (ref || env_is("ATTN_KERNEL", "ref") || env_is("ATTN_ARCH", "ref")) return &ref_kernels;
    /* libattn's choice, made once there ($ATTN_ARCH, the CPU); an ISA that
     * has no elementwise table here runs the portable one. */
    const eltwise_kernels *k = attn__eltwise_named(attn_isa_name());
    return k ? k : &attn__eltwise_generic;
}
