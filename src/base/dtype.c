/*
 * dtype.c — the element types' names (numpy's, np.dtype(...).name) and sizes.
 */
#include "base/dtype.h"

static const struct {
    const char *name;
    size_t size;
} dtype_table[] = {
    [ATTN_F32] = {"float32", 4}, [ATTN_F64] = {"float64", 8},  [ATTN_F16] = {"float16", 2},
    [ATTN_BF16] = {"bfloat16", 2}, [ATTN_BOOL] = {"bool", 1},  [ATTN_I8] = {"int8", 1},
    [ATTN_I16] = {"int16", 2},   [ATTN_I32] = {"int32", 4},    [ATTN_I64] = {"int64", 8},
    [ATTN_U8] = {"uint8", 1},    [ATTN_U16] = {"uint16", 2},   [ATTN_U32] = {"uint32", 4},
    [ATTN_U64] = {"uint64", 8},  [ATTN_Q8_0] = {"q8_0", 0},   [ATTN_FP8_E4M3] = {"fp8_e4m3", 0},
};

bool attn__dtype_valid(attn_dtype dtype) {
    return (int)dtype >= 0 && (size_t)dtype < sizeof dtype_table / sizeof dtype_table[0];
}

const char *attn_dtype_name(attn_dtype dtype) {
    return attn__dtype_valid(dtype) ? dtype_table[dtype].name : "unknown dtype";
}

size_t attn_dtype_size(attn_dtype dtype) { return attn__dtype_valid(dtype) ? dtype_table[dtype].size : 0; }
