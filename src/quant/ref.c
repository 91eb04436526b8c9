/*
 * ref.c — the reference quantized product (attn_quant.h's use_ref, and
 * $ATTN_KERNEL=ref): each row of W dequantized by the portable kernels
 * (bit for bit the GGUF reader's values), then every output a double sum
 * in k order, rounded once to float.  The oracle the fast paths are
 * compared with; one thread, no tiling.
 */
#include "quant/quant.h"

#include <stdlib.h>

attn_status attn__quant_matmul_ref(const float *x, int64_t m, const attn_qtensor *w, float *y) {
    const quant_traits *t = &attn__quant_traits[attn__quant_type_index(w->type)];
    const quant_dequant_fn dequant = attn__quant_kernels_generic.dequant[attn__quant_type_index(w->type)];
    const int64_t n = w->rows, k = w->cols;
    const size_t stride = w->row_stride ? w->row_stride : (size_t)quant_row_bytes(t, k);
    float *row = malloc(sizeof(float) * (size_t)(k > 0 ? k : 1));
    if (!row) return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "attn_quant_matmul: no memory for a row of %lld floats", (long long)k);
    for (int64_t j = 0; j < n; j++) {
        dequant((const uint8_t *)w->data + (size_t)j * stride, k, row);
        for (int64_t i = 0; i < m; i++) {
            const float *x_i = x + i * k;
            double sum = 0.0;
            for (int64_t c = 0; c < k; c++) sum += (double)x_i[c] * (double)row[c];
            y[i * n + j] = (float)sum;
        }
    }
    free(row);
    return ATTN_OK;
}
