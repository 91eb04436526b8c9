/*
 * decoder_matmul.c — the decoder's projections, y = x . W^T + b with W in
 * GGUF's [d_out, d_in] layout (each output's weights one row), and its
 * embedding lookup.
 *
 * Shape legend: x [rows, d_in]  w [d_out, d_in]  b [d_out]  y [rows, d_out]
 *
 * Stored weights (the default): attn_quant_matmul on the file's blocks
 * (attn_quant.h: the GEMV shape for a decode step, panels for a prefill),
 * in the decoder's precision; the bias is added after, in float32.
 *
 * Float32 weights (ATTN_WEIGHTS_F32, the reference twin): libattn's
 * attn_linear_forward_transposed, the BLAS attn was built with, on attn's
 * threads, in column blocks that keep the bits independent of the thread
 * count (src/api/linear.c; docs/kernels.md, "Projections").
 *
 * Either way libattn_model needs no BLAS and no OpenMP of its own.
 */
#include "model/decoder.h"

#include "attn.h"

attn_status attn__decoder_matmul(const attn_decoder *m, const float *x, int64_t rows, const decoder_weight *w,
                                 const float *b, float *y) {
    const int64_t d_in = w->q.cols, d_out = w->q.rows;
    if (w->f32) return attn_linear_forward_transposed(x, rows, d_in, w->f32, b, d_out, y);
    attn_quant_options opt = ATTN_QUANT_OPTIONS_INIT;
    opt.precision = m->opt.precision;
    attn_status st = attn_quant_matmul(x, rows, &w->q, y, &opt);
    if (st || !b) return st;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < d_out; j++) y[r * d_out + j] += b[j];
    return ATTN_OK;
}

attn_status attn__decoder_embed(const attn_decoder *m, const int32_t *ids, int64_t n, float scale, float *out) {
    const decoder_weight *e = &m->token_embd;
    const int64_t d = e->q.cols;
    for (int64_t t = 0; t < n; t++) {
        float *row = out + t * d;
        if (e->f32) {
            memcpy(row, e->f32 + (int64_t)ids[t] * d, (size_t)d * sizeof *row);
        } else {
            attn_status st = attn_quant_dequantize_rows(&e->q, ids[t], 1, row);
            if (st) return st;
        }
        for (int64_t i = 0; i < d; i++) row[i] *= scale;
    }
    return ATTN_OK;
}
