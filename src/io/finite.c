/*
 * finite.c — finiteness of float arrays on their bits (finite.h), and
 * attn_array_check_finite.
 *
 * A float32, float16 or bfloat16 element is NaN or infinite exactly when
 * all its exponent bits are set; -inf is the one such pattern with the sign
 * set and a zero significand.  Each block is reduced with a branch-free OR,
 * which compilers vectorise, so a 32 MiB array is checked at the speed
 * memory delivers it (a few ms); only a block found bad is searched
 * element by element for the first culprit.
 */
#include "io/finite.h"

#include "base/base.h"


typedef struct float_bits {
    uint32_t exponent, significand, negative_infinity; /* -inf: the sign and the exponent bits */
} float_bits;

static float_bits bits_of(attn_dtype dtype) {
    return dtype == ATTN_F32    ? (float_bits){0x7f800000u, 0x007fffffu, 0xff800000u}
           : dtype == ATTN_BF16 ? (float_bits){0x7f80u, 0x007fu, 0xff80u}
                                : (float_bits){0x7c00u, 0x03ffu, 0xfc00u};
}

/* Element i of data (32 or 16 bits wide), as bits. */
static inline uint32_t bits_at(attn_dtype dtype, const void *data, int64_t i) {
    return dtype == ATTN_F32 ? ((const uint32_t *)data)[i] : ((const uint16_t *)data)[i];
}

/* The rule, once: 1 when b is NaN or infinite (all exponent bits set), but
 * for -inf where it is allowed. */
static inline uint32_t is_bad(uint32_t b, float_bits fb, bool allow_neg_inf) {
    return ((b & fb.exponent) == fb.exponent) & !(allow_neg_inf && b == fb.negative_infinity);
}

/* Whether any of n elements is bad: expanded once per element width and
 * per -inf rule (both constants where any_bad calls it), each loop without
 * a branch or an early exit so that it vectorises. */
static inline __attribute__((always_inline)) bool any_bad_of(attn_dtype dtype, const void *data, int64_t n,
                                                             float_bits fb, bool allow_neg_inf) {
    uint32_t bad = 0;
    for (int64_t i = 0; i < n; i++) bad |= is_bad(bits_at(dtype, data, i), fb, allow_neg_inf);
    return bad != 0;
}

/* (bits_at reads only the width from the dtype: ATTN_F16 stands for both
 * 16-bit types.) */
static bool any_bad(attn_dtype dtype, const void *data, int64_t n, float_bits fb, bool allow_neg_inf) {
    if (dtype == ATTN_F32)
        return allow_neg_inf ? any_bad_of(ATTN_F32, data, n, fb, true) : any_bad_of(ATTN_F32, data, n, fb, false);
    return allow_neg_inf ? any_bad_of(ATTN_F16, data, n, fb, true) : any_bad_of(ATTN_F16, data, n, fb, false);
}

bool attn__finite_checkable(attn_dtype dtype) {
    return dtype == ATTN_F32 || dtype == ATTN_F16 || dtype == ATTN_BF16;
}

int64_t attn__first_nonfinite(attn_dtype dtype, const void *data, int64_t count, bool allow_neg_inf) {
    const float_bits fb = bits_of(dtype);
    const int64_t block = 1 << 14; /* 64 KiB of float32: in L2 for the search */
    for (int64_t start = 0; start < count; start += block) {
        const int64_t n = count - start < block ? count - start : block;
        const size_t width = dtype == ATTN_F32 ? sizeof(uint32_t) : sizeof(uint16_t);
        if (!any_bad(dtype, (const char *)data + (size_t)start * width, n, fb, allow_neg_inf)) continue;
        for (int64_t i = start; i < start + n; i++)
            if (is_bad(bits_at(dtype, data, i), fb, allow_neg_inf)) return i;
    }
    return -1;
}

attn_status attn__nonfinite_failure(const char *path, attn_dtype dtype, const void *data, int64_t index,
                                    bool allow_neg_inf) {
    const uint32_t b = bits_at(dtype, data, index);
    const float_bits fb = bits_of(dtype);
    const char *what = (b & fb.significand) ? "NaN" : b == fb.negative_infinity ? "-inf" : "+inf";
    (void)allow_neg_inf; /* a -inf that is allowed is never the culprit */
    return attn__fail(ATTN_ERR_NONFINITE, "%s%s%selement %lld is %s; inputs must be finite", path ? "'" : "",
                      path ? path : "", path ? "': " : "", (long long)index, what);
}

attn_status attn_array_check_finite(const attn_array *a, int allow_neg_inf, int64_t *first_bad) {
    if (!a) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_array_check_finite: array is NULL");
    if (first_bad) *first_bad = -1;
    if (!attn__finite_checkable(a->dtype))
        return attn__fail(ATTN_ERR_UNSUPPORTED, "attn_array_check_finite: %s is not float32, float16 or bfloat16",
                          attn_dtype_name(a->dtype));
    if (a->count > 0 && !a->data) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_array_check_finite: data is NULL");
    const int64_t i = attn__first_nonfinite(a->dtype, a->data, a->count, allow_neg_inf);
    if (i < 0) return ATTN_OK;
    if (first_bad) *first_bad = i;
    return attn__nonfinite_failure(NULL, a->dtype, a->data, i, allow_neg_inf);
}
