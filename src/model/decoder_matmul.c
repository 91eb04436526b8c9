/*
 * decoder_matmul.c — the decoder's projections: y = x . W^T + b with W in
 * GGUF's [d_out, d_in] layout (each output's weights one row), float32.
 *
 * Shape legend: x [rows, d_in]  w [d_out, d_in]  b [d_out]  y [rows, d_out]
 *
 * libattn's attn_linear_forward_transposed does the work: the BLAS attn was
 * built with, on attn's threads, in column blocks that keep the bits
 * independent of the thread count (src/api/linear.c; docs/kernels.md,
 * "Projections", has the benchmark).  libattn_model so needs no BLAS and no
 * OpenMP of its own.  The former loop here (float dot products with 16
 * partial sums, one thread) ran at 11–16 GFLOP/s, 5–7% of one core's FMA
 * peak.
 */
#include "model/decoder.h"

#include "attn.h"

void attn__decoder_matmul(const float *x, int64_t rows, int64_t d_in, const float *w, const float *b,
                          int64_t d_out, float *y) {
    /* The decoder's sizes come from a model whose tensors were checked at
     * load, and the call allocates nothing on the BLAS path (the reference
     * path allocates one double per thread): it cannot fail here. */
    (void)attn_linear_forward_transposed(x, rows, d_in, w, b, d_out, y);
}
