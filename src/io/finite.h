/*
 * finite.h — whether the elements of a float array (float32, float16,
 * bfloat16: the dtypes the kernels read) are finite, tested on their bits
 * so that the loop vectorises (finite.c).  attn_array_check_finite and the
 * .npy loader's chunk-by-chunk check (npy_file.c) share it.
 */
#ifndef ATTN_IO_FINITE_H
#define ATTN_IO_FINITE_H

#include "attn_io.h"

#include <stdbool.h>

/* True for the dtypes the check understands (F32, F16, BF16). */
bool attn__finite_checkable(attn_dtype dtype);

/* The index (from 0, within data) of the first of count elements of dtype
 * that is NaN or infinite, -inf excepted when allow_neg_inf; -1 if none. */
int64_t attn__first_nonfinite(attn_dtype dtype, const void *data, int64_t count, bool allow_neg_inf);

/* Fails with ATTN_ERR_NONFINITE naming element index (its value read from
 * data, the whole array) and, when path is not NULL, the file. */
attn_status attn__nonfinite_failure(const char *path, attn_dtype dtype, const void *data, int64_t index,
                                    bool allow_neg_inf);

#endif /* ATTN_IO_FINITE_H */
