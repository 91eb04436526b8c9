/*
 * base.h — what every file of every attn library shares and users never
 * see: the error setter under its internal name, overflow-checked sizes,
 * and small integer helpers.  Everything here is a macro or static inline,
 * so the component libraries (libattn_viz, libattn_mpi) use it without
 * linking against anything but libattn's public API.
 *
 * Naming: public symbols start with attn_ and are declared in include/;
 * internal symbols with external linkage start with attn__ (two
 * underscores, as libuv's uv__), and are declared in src/ headers; static
 * functions and the inline helpers of internal headers are named by their
 * module.  tests/base/test_exports checks the first rule on the shared
 * libraries.
 */
#ifndef ATTN_BASE_H
#define ATTN_BASE_H

#include "attn.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#if defined(__GNUC__)
#define ATTN_PRINTF(fmt_index, first_arg) __attribute__((format(printf, fmt_index, first_arg)))
#else
#define ATTN_PRINTF(fmt_index, first_arg)
#endif

/* Records status and a printf-style message for attn_last_error() and
 * returns status, so a failure reads `return attn__fail(ATTN_ERR_SHAPE, ...)`.
 * The internal name of the public attn_set_error. */
#define attn__fail attn_set_error

/* a * b into *out and false; true (and *out untouched) on overflow or a
 * negative input, so checks read `if (mul_overflows(...)) fail`. */
static inline bool mul_overflows(int64_t a, int64_t b, int64_t *out) {
    if (a < 0 || b < 0) return true;
    if (a != 0 && b > INT64_MAX / a) return true;
    *out = a * b;
    return false;
}

/* The element count of a shape, by numpy's rule: no dimension negative, and
 * the product of the non-zero dimensions, times elem_size, fits int64.  An
 * array with a zero dimension has no elements, but numpy still refuses
 * (0, 2^62, 4) ("array is too big"); following it keeps every partial
 * product of an accepted shape defined, so code that walks an empty array's
 * strides cannot overflow.  *count is 0 when a dimension is 0.  False (and
 * *count untouched) on a negative dimension or an overflow. */
static inline bool shape_elements(int ndim, const int64_t *shape, int64_t elem_size, int64_t *count) {
    int64_t bytes = elem_size; /* >= 1: every caller passes a valid dtype's size */
    bool empty = false;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] == 0) empty = true;
        else if (mul_overflows(bytes, shape[i], &bytes)) return false; /* a negative one too */
    }
    *count = empty ? 0 : bytes / elem_size;
    return true;
}

/* log2(e) and ln(2) in double: scores move to base 2 for exp2. */
#define LOG2E 1.4426950408889634
#define LN2 0.6931471805599453

/* a + b and a - b clamped to the int64 range: position arithmetic with
 * user-given window sides and offsets near INT64_MAX stays defined (and a
 * clamped bound is beyond every real position anyway). */
static inline int64_t sat_add(int64_t a, int64_t b) {
    int64_t r;
    return __builtin_add_overflow(a, b, &r) ? (b > 0 ? INT64_MAX : INT64_MIN) : r;
}
static inline int64_t sat_sub(int64_t a, int64_t b) {
    int64_t r;
    return __builtin_sub_overflow(a, b, &r) ? (b < 0 ? INT64_MAX : INT64_MIN) : r;
}

static inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
static inline int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }
static inline int64_t min_i64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t max_i64(int64_t a, int64_t b) { return a > b ? a : b; }

/* strerror_r's text for err into buf, for messages ("No such file or directory"). */
static inline const char *errno_text(int err, char *buf, size_t cap) {
    if (strerror_r(err, buf, cap) != 0) snprintf(buf, cap, "error %d", err);
    return buf;
}

/* The largest struct_size accepted: far above any struct the headers will
 * hold (the largest today is a few hundred bytes), so that a garbage size
 * (a struct never initialised, a pointer to something else) is refused
 * instead of read far beyond the caller's object. */
#define OPTIONS_SIZE_MAX 4096

/* The one ABI rule (attn.h, "ABI") for every struct that begins with
 * `size_t struct_size`: copies the caller's src into dst, the library's own
 * layout of dst_size bytes, and says which callers it reads:
 *   - src NULL: dst is the defaults (NULL options mean defaults; callers
 *     whose struct is required refuse NULL before this);
 *   - struct_size 0 (a struct zeroed with = {0}, or never initialised):
 *     refused, naming the initialiser (ATTN_ERR_INVALID_ARGUMENT);
 *   - above OPTIONS_SIZE_MAX: refused as implausible (ATTN_ERR_INVALID_ARGUMENT);
 *   - smaller than dst_size (a caller built against an older header): its
 *     bytes are copied and the fields it does not know keep the defaults;
 *   - larger (a newer header): accepted when the bytes this library does not
 *     know are all zero, else refused (ATTN_ERR_UNSUPPORTED), since the call
 *     would silently ignore what the caller asked for.
 * defaults is a struct of dst_size bytes (the header's initialiser), or NULL
 * for all zeros.  dst.struct_size is dst_size afterwards.  name is the
 * struct's type name for messages.  Inline, so that the component libraries
 * use the same rule without an internal symbol. */
static inline attn_status options_copy(void *dst, size_t dst_size, const void *defaults, const void *src,
                                       const char *name) {
    if (defaults) memcpy(dst, defaults, dst_size);
    else memset(dst, 0, dst_size);
    memcpy(dst, &dst_size, sizeof dst_size);
    if (!src) return ATTN_OK;
    size_t src_size;
    memcpy(&src_size, src, sizeof src_size); /* struct_size, the first member */
    if (src_size < sizeof(size_t) || src_size > OPTIONS_SIZE_MAX) {
        const bool patch = strcmp(name, "attn_patch") == 0; /* made by a function, not a macro */
        char init[64] = "ATTN_"; /* attn_sdpa_options -> ATTN_SDPA_OPTIONS_INIT */
        size_t n = 5;
        for (const char *c = name + 5; *c && n < sizeof init - 6; c++)
            init[n++] = (char)(*c >= 'a' && *c <= 'z' ? *c - 'a' + 'A' : *c);
        memcpy(init + n, "_INIT", 6);
        if (src_size > OPTIONS_SIZE_MAX)
            return attn__fail(ATTN_ERR_INVALID_ARGUMENT,
                              "%s: struct_size is %zu, more than any version of it has (at most %d here): "
                              "initialise it with %s",
                              name, src_size, OPTIONS_SIZE_MAX, patch ? "attn_patch_make" : init);
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT,
                          "%s: struct_size is %zu; initialise it with %s (%s x = %s;) before "
                          "setting fields",
                          name, src_size, patch ? "attn_patch_make" : init, name,
                          patch ? "attn_patch_make(kind, hook)" : init);
    }
    if (src_size > dst_size) {
        /* A caller built against a newer header: its newer fields must be
         * unused, or the call would silently ignore what the caller asked. */
        const unsigned char *extra = (const unsigned char *)src + dst_size;
        for (size_t i = 0; i < src_size - dst_size; i++)
            if (extra[i])
                return attn__fail(ATTN_ERR_UNSUPPORTED,
                                  "%s: the caller's struct has %zu bytes, this library knows %zu, "
                                  "and byte %zu is set: a field this library version does not have",
                                  name, src_size, dst_size, dst_size + i);
    }
    memcpy(dst, src, src_size < dst_size ? src_size : dst_size);
    memcpy(dst, &dst_size, sizeof dst_size);
    return ATTN_OK;
}

#endif /* ATTN_BASE_H */
