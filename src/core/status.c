/*
 * status.c — the error model: status codes, their names, and the
 * thread-local message of the last failure (DESIGN.md §2).
 */
#include "core/internal.h"

#include <stdarg.h>
#include <stdio.h>

static _Thread_local char last_error[1024];

const char *attn_version(void) { return "0.1.0"; }

const char *attn_status_str(attn_status status) {
    switch (status) {
    case ATTN_OK: return "ok";
    case ATTN_ERR_INVALID_ARGUMENT: return "invalid argument";
    case ATTN_ERR_SHAPE: return "shape mismatch";
    case ATTN_ERR_OVERFLOW: return "size overflow";
    case ATTN_ERR_OUT_OF_MEMORY: return "out of memory";
    case ATTN_ERR_IO: return "input/output error";
    case ATTN_ERR_FORMAT: return "malformed file";
    case ATTN_ERR_UNSUPPORTED: return "unsupported";
    case ATTN_ERR_NONFINITE: return "non-finite value";
    case ATTN_ERR_INTERNAL: return "internal error";
    }
    return "unknown status";
}

const char *attn_last_error(void) { return last_error; }

attn_status attn_fail(attn_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return status;
}

bool attn_mul_overflows(int64_t a, int64_t b, int64_t *out) {
    if (a < 0 || b < 0) return true;
    if (a != 0 && b > INT64_MAX / a) return true;
    *out = a * b;
    return false;
}
