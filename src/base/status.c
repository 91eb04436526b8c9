/*
 * status.c — the error model: status codes, their names, and the
 * thread-local message of the last failure (DESIGN.md §2); the version.
 */
#include "base/base.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char last_error[1024];

const char *attn_version(void) { return ATTN_VERSION_STRING; }

long attn_version_number(void) { return ATTN_VERSION_NUMBER; }

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
    case ATTN_ERR_TIMEOUT: return "timed out";
    case ATTN_ERR_BUDGET: return "beyond the work budget";
    case ATTN_ERR_CAPACITY: return "capacity exhausted";
    }
    return "unknown status";
}

const char *attn_last_error(void) { return last_error; }

attn_status attn_set_error(attn_status status, const char *fmt, ...) {
    /* Formatted aside first: the arguments may include attn_last_error()
     * itself (a message that wraps the previous one). */
    char message[sizeof last_error];
    message[0] = 0;
    if (fmt) { /* NULL: an empty message (not vsnprintf of "": clang's -Wformat-zero-length) */
        va_list ap;
        va_start(ap, fmt);
        if (vsnprintf(message, sizeof message, fmt, ap) < 0) message[0] = 0;
        va_end(ap);
    }
    memcpy(last_error, message, sizeof last_error);
    return status;
}
