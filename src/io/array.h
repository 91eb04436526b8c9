/*
 * array.h — the allocation the .npy readers use (array.c): an array whose
 * buffer the caller fills completely, so it is not zeroed first.
 */
#ifndef ATTN_IO_ARRAY_H
#define ATTN_IO_ARRAY_H

#include "attn_io.h"

/* As attn_array_alloc, but the data are left uninitialised (the caller
 * writes every byte: a read of the whole array) and 64-byte aligned.
 * attn_array_free releases it. */
attn_status attn__array_alloc_for_reading(attn_array *a, attn_dtype dtype, int ndim, const int64_t *shape);

#endif /* ATTN_IO_ARRAY_H */
