/*
 * types.c — the storage types the quantized kernels take (their traits,
 * quant.h) and the checks of a weight view (attn_quant.h).
 */
#include "quant/quant.h"

const quant_traits attn__quant_traits[QT_COUNT] = {
    /*            name    gguf             elements bytes quantized offset min group */
    [QT_F32] = {"F32", ATTN_QTYPE_F32, 1, 4, false, 0, false, 0},
    [QT_F16] = {"F16", ATTN_QTYPE_F16, 1, 2, false, 0, false, 0},
    [QT_BF16] = {"BF16", ATTN_QTYPE_BF16, 1, 2, false, 0, false, 0},
    [QT_Q8_0] = {"Q8_0", ATTN_QTYPE_Q8_0, 32, 34, true, 128, false, 32},
    [QT_Q4_0] = {"Q4_0", ATTN_QTYPE_Q4_0, 32, 18, true, 8, false, 32},
    [QT_Q4_1] = {"Q4_1", ATTN_QTYPE_Q4_1, 32, 20, true, 0, true, 32},
    [QT_Q5_0] = {"Q5_0", ATTN_QTYPE_Q5_0, 32, 22, true, 16, false, 32},
    [QT_Q5_1] = {"Q5_1", ATTN_QTYPE_Q5_1, 32, 24, true, 0, true, 32},
    [QT_Q4_K] = {"Q4_K", ATTN_QTYPE_Q4_K, 256, 144, true, 0, true, 32},
    [QT_Q5_K] = {"Q5_K", ATTN_QTYPE_Q5_K, 256, 176, true, 0, true, 32},
    [QT_Q6_K] = {"Q6_K", ATTN_QTYPE_Q6_K, 256, 210, true, 32, false, 16},
};

int attn__quant_type_index(int gguf) {
    for (int i = 0; i < QT_COUNT; i++)
        if (attn__quant_traits[i].gguf == gguf) return i;
    return -1;
}

const char *attn_quant_type_name(int type) {
    int t = attn__quant_type_index(type);
    return t < 0 ? NULL : attn__quant_traits[t].name;
}

#define QUANT_TYPES "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K and Q6_K"

attn_status attn_quant_type_block(int type, int64_t *block_elements, size_t *block_bytes) {
    int t = attn__quant_type_index(type);
    if (t < 0)
        return attn__fail(ATTN_ERR_UNSUPPORTED,
                          "attn_quant_type_block: type %d has no quantized kernel (they take " QUANT_TYPES
                          ", numbered as GGUF numbers them)", type);
    if (block_elements) *block_elements = attn__quant_traits[t].block_elements;
    if (block_bytes) *block_bytes = (size_t)attn__quant_traits[t].block_bytes;
    return ATTN_OK;
}

attn_status attn_quant_check(const attn_qtensor *w) {
    if (!w) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_qtensor: w is NULL");
    int t = attn__quant_type_index(w->type);
    if (t < 0)
        return attn__fail(ATTN_ERR_UNSUPPORTED,
                          "attn_qtensor: type %d has no quantized kernel (they take " QUANT_TYPES
                          ", numbered as GGUF numbers them)", w->type);
    const quant_traits *tr = &attn__quant_traits[t];
    if (w->rows < 0 || w->cols < 0)
        return attn__fail(ATTN_ERR_SHAPE, "attn_qtensor: rows = %lld and cols = %lld must not be negative",
                          (long long)w->rows, (long long)w->cols);
    if (w->cols % tr->block_elements != 0)
        return attn__fail(ATTN_ERR_SHAPE,
                          "attn_qtensor: cols = %lld is not a whole number of %s blocks (%d elements each)",
                          (long long)w->cols, tr->name, tr->block_elements);
    if (w->cols > INT64_MAX / 4)
        return attn__fail(ATTN_ERR_OVERFLOW, "attn_qtensor: cols = %lld is too large", (long long)w->cols);
    const int64_t row_bytes = quant_row_bytes(tr, w->cols); /* cols / block * bytes <= cols * 4 */
    if (w->row_stride != 0 && w->row_stride < (uint64_t)row_bytes)
        return attn__fail(ATTN_ERR_SHAPE,
                          "attn_qtensor: row_stride = %zu bytes is less than a row of %lld %s elements "
                          "(%lld bytes)", w->row_stride, (long long)w->cols, tr->name, (long long)row_bytes);
    int64_t total;
    const int64_t stride = w->row_stride ? (int64_t)w->row_stride : row_bytes;
    if (w->row_stride > (size_t)INT64_MAX || mul_overflows(w->rows, stride, &total))
        return attn__fail(ATTN_ERR_OVERFLOW, "attn_qtensor: %lld rows of %lld bytes overflow", (long long)w->rows,
                          (long long)stride);
    if (!w->data && w->rows > 0 && w->cols > 0) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_qtensor: data is NULL");
    return ATTN_OK;
}

/* float16 bits: exponent all ones is an infinity (mantissa 0) or NaN. */
static int f16_nonfinite(const unsigned char *p, int *is_nan) {
    const uint16_t h = (uint16_t)(p[0] | p[1] << 8);
    if ((h & 0x7C00u) != 0x7C00u) return 0;
    *is_nan = (h & 0x03FFu) != 0;
    return 1;
}

attn_status attn_quant_check_finite(const attn_qtensor *w, int64_t *row, int64_t *col) {
    attn_status st = attn_quant_check(w);
    if (st) return st;
    const int t = attn__quant_type_index(w->type);
    const quant_traits *tr = &attn__quant_traits[t];
    const int64_t row_bytes = quant_row_bytes(tr, w->cols);
    const int64_t stride = w->row_stride ? (int64_t)w->row_stride : row_bytes;
    const int64_t blocks = w->cols / tr->block_elements;
    int nan_found = 0;
    /* Where the float16 scales sit in a block: Q6_K keeps d last. */
    const int64_t scale_at = t == QT_Q6_K ? tr->block_bytes - 2 : 0;
    for (int64_t r = 0; r < w->rows; r++) {
        const unsigned char *p = (const unsigned char *)w->data + r * stride;
        for (int64_t b = 0; b < blocks; b++) {
            const unsigned char *block = p + b * tr->block_bytes;
            int found = 0;
            if (t == QT_F32) {
                const uint32_t v = (uint32_t)block[0] | (uint32_t)block[1] << 8 | (uint32_t)block[2] << 16 |
                                   (uint32_t)block[3] << 24;
                if ((v & 0x7F800000u) == 0x7F800000u) found = 1, nan_found = (v & 0x007FFFFFu) != 0;
            } else if (t == QT_BF16) {
                const uint16_t v = (uint16_t)(block[0] | block[1] << 8);
                if ((v & 0x7F80u) == 0x7F80u) found = 1, nan_found = (v & 0x007Fu) != 0;
            } else {
                found = f16_nonfinite(block + scale_at, &nan_found) || (tr->has_min && f16_nonfinite(block + 2, &nan_found));
            }
            if (found) {
                if (row) *row = r;
                if (col) *col = b * tr->block_elements;
                if (tr->quantized)
                    return attn__fail(ATTN_ERR_NONFINITE, "attn_quant_check_finite: the %s block at row %lld, columns "
                                      "%lld..%lld has a scale that is %s", tr->name, (long long)r,
                                      (long long)(b * tr->block_elements),
                                      (long long)((b + 1) * tr->block_elements - 1), nan_found ? "NaN" : "infinite");
                return attn__fail(ATTN_ERR_NONFINITE, "attn_quant_check_finite: row %lld, column %lld is %s",
                                  (long long)r, (long long)(b * tr->block_elements), nan_found ? "NaN" : "infinite");
            }
        }
    }
    return ATTN_OK;
}
