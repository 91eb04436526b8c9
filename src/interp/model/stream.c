/*
 * stream.c — comparing two runs' residual streams: the cosine of one
 * position's rows, layer by layer (the chapter's two 苹果).
 *
 * Shape legend: hidden [rows, len, d] (attn_decoder_outputs' hidden: rows =
 * N + 1, row 0 the embeddings, row l + 1 after layer l).
 */
#include "interp/model/model_interp.h"

#include <math.h>

attn_status attn_model_stream_cosine(const float *hidden_a, int64_t len_a, int64_t pos_a, const float *hidden_b,
                                     int64_t len_b, int64_t pos_b, int64_t rows, int64_t d, double *cosine) {
    if (!hidden_a || !hidden_b || !cosine)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_model_stream_cosine: %s is NULL",
                          !hidden_a ? "hidden_a" : !hidden_b ? "hidden_b" : "cosine");
    if (pos_a < 0) pos_a += len_a;
    if (pos_b < 0) pos_b += len_b;
    if (pos_a < 0 || pos_a >= len_a || pos_b < 0 || pos_b >= len_b || rows < 0 || d < 0)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "positions %lld and %lld of streams of %lld and %lld tokens "
                          "(%lld rows of width %lld): outside them", (long long)pos_a, (long long)pos_b,
                          (long long)len_a, (long long)len_b, (long long)rows, (long long)d);
    for (int64_t r = 0; r < rows; r++) {
        const float *a = hidden_a + (r * len_a + pos_a) * d, *b = hidden_b + (r * len_b + pos_b) * d;
        double ab = 0, aa = 0, bb = 0;
        for (int64_t i = 0; i < d; i++) {
            ab += (double)a[i] * b[i];
            aa += (double)a[i] * a[i];
            bb += (double)b[i] * b[i];
        }
        cosine[r] = aa > 0 && bb > 0 ? ab / sqrt(aa * bb) : 0.0;
    }
    return ATTN_OK;
}
