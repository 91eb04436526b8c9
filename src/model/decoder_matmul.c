/*
 * decoder_matmul.c — the decoder's projections: y = x . W^T + b with W in
 * GGUF's [d_out, d_in] layout (each output's weights one row), float32.
 *
 * Shape legend: x [rows, d_in]  w [d_out, d_in]  b [d_out]  y [rows, d_out]
 *
 * Why not api/linear.c's attn_linear_forward: it takes W as [d_in, d_out]
 * (the chapter's row convention) and sums in double, so using it would mean
 * transposing every weight at load and running at half the speed.  Here a
 * weight row (3.5 KB for d = 896) stays in L1 while it meets every token
 * (the tokens, a few dozen rows, stay in L2), so the weights stream from
 * memory once per forward.  Each dot product keeps 16 float partial sums
 * (which the compiler turns into vector registers) and adds them in
 * double: a sum of d_in products to within ~sqrt(d_in / 16) ulps, like a
 * BLAS sgemm.  One thread: libattn_model depends on libattn and libm only
 * (no OpenMP of its own), and on this project's shared 2-core machines a
 * second thread did not help.  A real BLAS, threaded, is a later issue
 * (docs/models.md has the speed).
 */
#include "model/decoder.h"

enum { PARTIAL_SUMS = 16 };

static float dot_f32(const float *a, const float *b, int64_t n) {
    float acc[PARTIAL_SUMS] = {0};
    int64_t i = 0;
    for (; i + PARTIAL_SUMS <= n; i += PARTIAL_SUMS)
        for (int k = 0; k < PARTIAL_SUMS; k++) acc[k] += a[i + k] * b[i + k];
    double sum = 0.0;
    for (int k = 0; k < PARTIAL_SUMS; k++) sum += (double)acc[k];
    for (; i < n; i++) sum += (double)a[i] * (double)b[i];
    return (float)sum;
}

void attn__decoder_matmul(const float *x, int64_t rows, int64_t d_in, const float *w, const float *b,
                          int64_t d_out, float *y) {
    for (int64_t o = 0; o < d_out; o++) {
        const float *w_o = w + o * d_in;
        const float bias = b ? b[o] : 0.0f;
        for (int64_t r = 0; r < rows; r++) y[r * d_out + o] = dot_f32(x + r * d_in, w_o, d_in) + bias;
    }
}
