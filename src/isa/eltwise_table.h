/*
 * eltwise_table.h — the elementwise micro-kernels of the decoder (SiLU and
 * tanh-GELU gates, RMSNorm, residual adds, exp), one table per ISA:
 * src/isa/templates/eltwise.h written once, instantiated in each ISA's
 * eltwise_ukernels.c with that ISA's vector vocabulary (vec.h, exp2.h).
 * The tables are compiled into libattn_model (the only caller), which
 * picks one with attn_isa_name()'s choice (src/model/eltwise.c); the
 * reference twins (double arithmetic, libm) are there too, one switch
 * away ($ATTN_KERNEL=ref or a forward's kernel = ATTN_KERNEL_REF).
 *
 * Contracts (n elements; in place where the names say so):
 *   exp(x, n, y)            y = e^x, max 2 ulp from libm's exp rounded
 *                           to float where e^x is a normal float (x in
 *                           [-87.33, 88.72]; tests/model/test_eltwise.c
 *                           measures it), within FLT_MIN below (the
 *                           subnormals); +inf above, 0 for -inf, NaN
 *                           propagates
 *   silu_mul(g, u, n)       g = g / (1 + e^-g) * u
 *   gelu_tanh_mul(g, u, n)  g = PyTorch's gelu(g, approximate="tanh") * u,
 *                           through 0.5 g (1 + tanh t) = g / (1 + e^-2t),
 *                           t = sqrt(2/pi) (g + 0.044715 g^3): no
 *                           cancellation, no tanh.  Both gates: max
 *                           4 + 3|a| ulp from double, a = g or 2t (the
 *                           float roundings of a, |a| times larger in
 *                           e^-a; measured: SiLU 3 ulp, GELU 13 ulp for
 *                           |g| <= 3, 150 at g = -9), where |value| >=
 *                           2^-100, within 2^-100 below; NaN at -inf, as
 *                           the formulas give in double
 *   rmsnorm(x, n, w, eps, y) y = x / sqrt(mean(x^2) + eps) * w (the sum of
 *                           squares in float lanes, the scale in double)
 *   add(x, y, n)            x += y
 * Bits depend on the ISA (lanes), never on the thread count (one thread
 * runs each call).
 */
#ifndef ATTN_ISA_ELTWISE_TABLE_H
#define ATTN_ISA_ELTWISE_TABLE_H

#include <stdbool.h>
#include <stdint.h>

typedef struct eltwise_kernels {
    const char *isa;              /* the registry's name of the ISA          */
    bool (*supported)(void);      /* this CPU and build run it; NULL: always */
    void (*exp)(const float *x, int64_t n, float *y);
    void (*silu_mul)(float *g, const float *u, int64_t n);
    void (*gelu_tanh_mul)(float *g, const float *u, int64_t n);
    void (*rmsnorm)(const float *x, int64_t n, const float *w, double eps, float *y);
    void (*add)(float *x, const float *y, int64_t n);
} eltwise_kernels;

extern const eltwise_kernels attn__eltwise_generic;
extern const eltwise_kernels attn__eltwise_avx2;
extern const eltwise_kernels attn__eltwise_avx512;

/* supported() of an ISA this build cannot compile. */
static inline bool eltwise_absent(void) { return false; }
#define ELTWISE_ABSENT(table, name) const eltwise_kernels table = {.isa = name, .supported = eltwise_absent}

#endif /* ATTN_ISA_ELTWISE_TABLE_H */
