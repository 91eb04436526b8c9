/*
 * viz_file.c — the byte buffer pictures and reports are rendered into, the
 * format a path names, and the checks on a weight table.
 */
#include "viz/viz.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

void attn__viz_buf_append(viz_buf *b, const void *data, size_t size) {
    if (b->failed || size == 0) return;
    if (size > SIZE_MAX / 2 - b->len) {
        b->failed = true;
        return;
    }
    if (b->len + size + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + size + 1) cap *= 2;
        char *grown = realloc(b->data, cap);
        if (!grown) {
            b->failed = true;
            return;
        }
        b->data = grown;
        b->cap = cap;
    }
    memcpy(b->data + b->len, data, size);
    b->len += size;
    b->data[b->len] = 0; /* text stays NUL-terminated */
}

void attn__viz_buf_puts(viz_buf *b, const char *text) { attn__viz_buf_append(b, text, strlen(text)); }

void attn__viz_buf_printf(viz_buf *b, const char *fmt, ...) {
    char small[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->failed = true;
        return;
    }
    if ((size_t)n < sizeof small) {
        attn__viz_buf_append(b, small, (size_t)n);
        return;
    }
    char *big = malloc((size_t)n + 1);
    if (!big) {
        b->failed = true;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    attn__viz_buf_append(b, big, (size_t)n);
    free(big);
}

void attn__viz_buf_free(viz_buf *b) {
    free(b->data);
    *b = (viz_buf){0};
}

viz_format attn__viz_format_of(const char *path) {
    const char *dot = strrchr(path, '.');
    const char *slash = strrchr(path, '/');
    if (!dot || (slash && dot < slash)) return VIZ_FORMAT_UNKNOWN;
    if (strcasecmp(dot, ".png") == 0) return VIZ_FORMAT_PNG;
    if (strcasecmp(dot, ".svg") == 0) return VIZ_FORMAT_SVG;
    if (strcasecmp(dot, ".pdf") == 0) return VIZ_FORMAT_PDF;
    return VIZ_FORMAT_UNKNOWN;
}

attn_status attn__viz_check_weights(const char *what, const float *weights, int64_t heads,
                              int64_t len_q, int64_t len_kv) {
    if (!weights) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "%s: weights is NULL", what);
    if (heads < 1 || len_q < 1 || len_kv < 1)
        return attn__fail(ATTN_ERR_SHAPE, "%s: heads, len_q and len_kv must be at least 1, got %lld, %lld, %lld",
                         what, (long long)heads, (long long)len_q, (long long)len_kv);
    int64_t cells, bytes;
    if (mul_overflows(heads, len_q, &cells) || mul_overflows(cells, len_kv, &cells) ||
        mul_overflows(cells, (int64_t)sizeof(float), &bytes) || (uint64_t)bytes > SIZE_MAX)
        return attn__fail(ATTN_ERR_OVERFLOW, "%s: %lld x %lld x %lld weights do not fit in memory",
                         what, (long long)heads, (long long)len_q, (long long)len_kv);
    for (int64_t n = 0; n < cells; n++)
        if (isnan(weights[n]) || (isinf(weights[n]) && weights[n] > 0))
            return attn__fail(ATTN_ERR_NONFINITE, "%s: weights[%lld, %lld, %lld] is %s", what,
                             (long long)(n / (len_q * len_kv)), (long long)(n / len_kv % len_q),
                             (long long)(n % len_kv), isnan(weights[n]) ? "NaN" : "+inf");
    return ATTN_OK;
}
