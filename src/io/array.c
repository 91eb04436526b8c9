/*
 * array.c — the n-dimensional array that the .npy reader fills and the CLI
 * consumes: allocation, and in-place conversion to the three types the
 * kernels use (float32 data, int64 lengths, bool masks).
 *
 * Shape legend: an attn_array holds shape[0 .. ndim-1] in C order (the last
 * index varies fastest), count = prod(shape) elements (1 for a scalar,
 * ndim == 0), always in native byte order.  float16 and bfloat16 elements
 * are stored as their raw 16 bits (uint16_t); bool elements are bytes 0 or 1.
 */
#include "io/array.h"

#include "base/dtype.h"

#include <stdlib.h>
#include <string.h>

#define ARRAY_ALIGN 64 /* a cache line and a 512-bit vector */

/* bytes (> 0) of uninitialised, 64-byte aligned memory that free()
 * releases.  Not advised as transparent huge pages (MADV_HUGEPAGE), which
 * was measured: a huge page costs 3x less to fault in than 512 small ones
 * when the guest's free huge pages are backed by the host, but 6x more when
 * they are not, as under a virtio balloon's free page reporting a few
 * seconds after they were freed (128 MiB: 15 ms hot, 260 ms cold, 46 ms in
 * 4 KiB pages either way, on the machine of BENCHMARKS.md). */
static void *alloc_uninit(size_t bytes) {
    void *data = NULL;
    return posix_memalign(&data, ARRAY_ALIGN, bytes) == 0 ? data : NULL;
}

/* Zeroes *a first, so that attn_array_free is safe on it whatever happens.
 * An empty array (some dimension 0) still gets a non-NULL data pointer. */
static attn_status array_alloc(attn_array *a, attn_dtype dtype, int ndim, const int64_t *shape, bool zeroed) {
    if (!a) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_array_alloc: array is NULL");
    memset(a, 0, sizeof *a);
    if (!attn__dtype_valid(dtype))
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_array_alloc: invalid dtype %d", (int)dtype);
    if (ndim < 0 || ndim > ATTN_MAX_DIMS)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT,
                         "attn_array_alloc: ndim = %d, must be between 0 and %d", ndim,
                         ATTN_MAX_DIMS);
    if (ndim > 0 && !shape)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_array_alloc: shape is NULL");

    for (int i = 0; i < ndim; i++)
        if (shape[i] < 0)
            return attn__fail(ATTN_ERR_INVALID_ARGUMENT,
                             "attn_array_alloc: shape[%d] = %lld is negative", i,
                             (long long)shape[i]);
    const int64_t elem = (int64_t)attn_dtype_size(dtype);
    int64_t count;
    if (!shape_elements(ndim, shape, elem, &count) || (uint64_t)count * (uint64_t)elem > SIZE_MAX)
        return attn__fail(ATTN_ERR_OVERFLOW,
                         "attn_array_alloc: the shape's non-zero dimensions times the %zu bytes of %s "
                         "overflow int64 (numpy refuses such a shape too, even with a zero dimension)",
                         (size_t)elem, attn_dtype_name(dtype));
    const int64_t bytes = count * elem;

    void *data = zeroed ? calloc(bytes > 0 ? (size_t)bytes : 1, 1) : alloc_uninit(bytes > 0 ? (size_t)bytes : 1);
    if (!data)
        return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "attn_array_alloc: cannot allocate %lld bytes",
                         (long long)bytes);
    a->dtype = dtype;
    a->ndim = ndim;
    for (int i = 0; i < ndim; i++) a->shape[i] = shape[i];
    a->count = count;
    a->data = data;
    return ATTN_OK;
}

attn_status attn_array_alloc(attn_array *a, attn_dtype dtype, int ndim, const int64_t *shape) {
    return array_alloc(a, dtype, ndim, shape, true);
}

attn_status attn__array_alloc_for_reading(attn_array *a, attn_dtype dtype, int ndim, const int64_t *shape) {
    return array_alloc(a, dtype, ndim, shape, false);
}

void attn_array_free(attn_array *a) {
    if (!a) return;
    free(a->data);
    memset(a, 0, sizeof *a);
}

static bool dtype_is_integer(attn_dtype dtype) { return dtype >= ATTN_BOOL && dtype <= ATTN_U64; }

/* Element i of an integer or bool array as an int64 in *value; false (and
 * *value untouched) for a uint64 above INT64_MAX, which is nonzero. */
static bool integer_at(const attn_array *a, int64_t i, int64_t *value) {
    switch (a->dtype) {
    case ATTN_BOOL: *value = ((const uint8_t *)a->data)[i]; return true;
    case ATTN_U8: *value = ((const uint8_t *)a->data)[i]; return true;
    case ATTN_U16: *value = ((const uint16_t *)a->data)[i]; return true;
    case ATTN_U32: *value = ((const uint32_t *)a->data)[i]; return true;
    case ATTN_I8: *value = ((const int8_t *)a->data)[i]; return true;
    case ATTN_I16: *value = ((const int16_t *)a->data)[i]; return true;
    case ATTN_I32: *value = ((const int32_t *)a->data)[i]; return true;
    case ATTN_I64: *value = ((const int64_t *)a->data)[i]; return true;
    case ATTN_U64: {
        uint64_t u = ((const uint64_t *)a->data)[i];
        if (u > (uint64_t)INT64_MAX) return false;
        *value = (int64_t)u;
        return true;
    }
    default: return false;
    }
}

/* Converts element by element into a new buffer and swaps it in only when
 * every element converted, so a refused conversion leaves *a unchanged. */
attn_status attn_array_convert(attn_array *a, attn_dtype to) {
    if (!a) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_array_convert: array is NULL");
    if (!attn__dtype_valid(a->dtype) || !attn__dtype_valid(to))
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_array_convert: invalid dtype %d",
                         attn__dtype_valid(to) ? (int)a->dtype : (int)to);
    if (a->count > 0 && !a->data)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_array_convert: data is NULL");
    if (a->dtype == to) return ATTN_OK;

    bool from_float = dtype_is_float(a->dtype);
    const bool to_half = to == ATTN_F16 || to == ATTN_BF16;
    bool supported = ((to == ATTN_F32 || to_half) && from_float) ||
                     ((to == ATTN_I64 || to == ATTN_BOOL) && dtype_is_integer(a->dtype));
    if (!supported)
        return attn__fail(ATTN_ERR_UNSUPPORTED, "cannot convert %s to %s: %s",
                         attn_dtype_name(a->dtype), attn_dtype_name(to),
                         to == ATTN_F32 || to_half ? "a floating-point array (float16/32/64, bfloat16) was expected"
                         : to == ATTN_I64 || to == ATTN_BOOL
                             ? "an integer or bool array was expected"
                             : "the conversion targets are float32, float16, bfloat16, int64 and bool");

    /* Checked although the source already holds count elements: a target
     * element may be wider than a source element. */
    int64_t bytes;
    if (a->count < 0 || mul_overflows(a->count, (int64_t)attn_dtype_size(to), &bytes) ||
        (uint64_t)bytes > SIZE_MAX)
        return attn__fail(ATTN_ERR_OVERFLOW, "attn_array_convert: %lld elements overflow",
                         (long long)a->count);
    void *converted = alloc_uninit(bytes > 0 ? (size_t)bytes : 1); /* every element is written below */
    if (!converted)
        return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "attn_array_convert: cannot allocate %lld bytes",
                         (long long)bytes);

    attn_status status = ATTN_OK;
    const int64_t n = a->count;
    if (to == ATTN_F32) {
        float *dst = converted;
        /* IEEE rounding (C Annex F): float64 values beyond the float32 range
         * become +/-inf, which attn_check_finite reports to those who ask. */
        if (a->dtype == ATTN_F64)
            for (int64_t i = 0; i < n; i++) dst[i] = (float)((const double *)a->data)[i];
        else if (a->dtype == ATTN_BF16)
            for (int64_t i = 0; i < n; i++) dst[i] = dtype_bf16_to_f32(((const uint16_t *)a->data)[i]);
        else
            for (int64_t i = 0; i < n; i++) dst[i] = dtype_f16_to_f32(((const uint16_t *)a->data)[i]);
    } else if (to_half) {
        /* Each value rounded once to nearest even (base/dtype.h), from
         * its exact double. */
        uint16_t *dst = converted;
        for (int64_t i = 0; i < n; i++) {
            const double x = a->dtype == ATTN_F64   ? ((const double *)a->data)[i]
                             : a->dtype == ATTN_F32 ? (double)((const float *)a->data)[i]
                             : a->dtype == ATTN_BF16 ? (double)dtype_bf16_to_f32(((const uint16_t *)a->data)[i])
                                                     : (double)dtype_f16_to_f32(((const uint16_t *)a->data)[i]);
            dst[i] = to == ATTN_F16 ? dtype_f64_to_f16(x) : dtype_f64_to_bf16(x);
        }
    } else if (to == ATTN_I64) {
        int64_t *dst = converted;
        for (int64_t i = 0; i < n; i++) {
            if (!integer_at(a, i, &dst[i])) {
                status = attn__fail(ATTN_ERR_UNSUPPORTED,
                                   "cannot convert %s to int64: element %lld = %llu exceeds "
                                   "the int64 range",
                                   attn_dtype_name(a->dtype), (long long)i,
                                   (unsigned long long)((const uint64_t *)a->data)[i]);
                goto cleanup;
            }
        }
    } else {
        uint8_t *dst = converted;
        for (int64_t i = 0; i < n; i++) {
            int64_t value = 1; /* stays nonzero for a uint64 above INT64_MAX */
            integer_at(a, i, &value);
            dst[i] = value != 0;
        }
    }

    free(a->data);
    a->data = converted;
    a->dtype = to;
    converted = NULL;
cleanup:
    free(converted);
    return status;
}
