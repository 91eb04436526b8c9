/*
 * viz_file.c — the byte buffer pictures and reports are rendered into, and
 * the atomic write that puts a finished buffer on disk.
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

void viz_buf_append(viz_buf *b, const void *data, size_t size) {
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

void viz_buf_puts(viz_buf *b, const char *text) { viz_buf_append(b, text, strlen(text)); }

void viz_buf_printf(viz_buf *b, const char *fmt, ...) {
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
        viz_buf_append(b, small, (size_t)n);
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
    viz_buf_append(b, big, (size_t)n);
    free(big);
}

void viz_buf_free(viz_buf *b) {
    free(b->data);
    *b = (viz_buf){0};
}

/* Creates path.tmp-<pid>-<n> exclusively with the usual 0666-less-umask mode
 * (mkstemp would force 0600 on a picture meant to be shared). */
static int create_temp_beside(const char *path, char *tmp, size_t cap) {
    static _Thread_local unsigned counter;
    for (int attempt = 0; attempt < 1000; attempt++) {
        snprintf(tmp, cap, "%s.tmp-%ld-%u", path, (long)getpid(), counter++);
        int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd >= 0 || errno != EEXIST) return fd;
    }
    errno = EEXIST;
    return -1;
}

attn_status viz_write_atomic(const char *path, const void *data, size_t size) {
    size_t cap = strlen(path) + 48;
    char *tmp = malloc(cap);
    if (!tmp) return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "'%s': cannot allocate a file name", path);
    int fd = create_temp_beside(path, tmp, cap);
    if (fd < 0) {
        attn_status st = attn_fail(ATTN_ERR_IO, "cannot create a temporary file beside '%s': %s",
                                   path, strerror(errno));
        free(tmp);
        return st;
    }
    attn_status status = ATTN_OK;
    size_t written = 0;
    while (written < size) {
        ssize_t n = write(fd, (const char *)data + written, size - written);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            status = attn_fail(ATTN_ERR_IO, "cannot write '%s': %s", path,
                               strerror(n < 0 ? errno : EIO));
            break;
        }
        written += (size_t)n;
    }
    if (close(fd) != 0 && status == ATTN_OK)
        status = attn_fail(ATTN_ERR_IO, "cannot write '%s': %s", path, strerror(errno));
    if (status == ATTN_OK && rename(tmp, path) != 0)
        status = attn_fail(ATTN_ERR_IO, "cannot rename the temporary file to '%s': %s", path,
                           strerror(errno));
    if (status != ATTN_OK) unlink(tmp);
    free(tmp);
    return status;
}

viz_format viz_format_of(const char *path) {
    const char *dot = strrchr(path, '.');
    const char *slash = strrchr(path, '/');
    if (!dot || (slash && dot < slash)) return VIZ_FORMAT_UNKNOWN;
    if (strcasecmp(dot, ".png") == 0) return VIZ_FORMAT_PNG;
    if (strcasecmp(dot, ".svg") == 0) return VIZ_FORMAT_SVG;
    if (strcasecmp(dot, ".pdf") == 0) return VIZ_FORMAT_PDF;
    return VIZ_FORMAT_UNKNOWN;
}

attn_status viz_check_weights(const char *what, const float *weights, int64_t heads,
                              int64_t len_q, int64_t len_kv) {
    if (!weights) return attn_fail(ATTN_ERR_INVALID_ARGUMENT, "%s: weights is NULL", what);
    if (heads < 1 || len_q < 1 || len_kv < 1)
        return attn_fail(ATTN_ERR_SHAPE, "%s: heads, len_q and len_kv must be at least 1, got %lld, %lld, %lld",
                         what, (long long)heads, (long long)len_q, (long long)len_kv);
    int64_t cells, bytes;
    if (attn_mul_overflows(heads, len_q, &cells) || attn_mul_overflows(cells, len_kv, &cells) ||
        attn_mul_overflows(cells, (int64_t)sizeof(float), &bytes) || (uint64_t)bytes > SIZE_MAX)
        return attn_fail(ATTN_ERR_OVERFLOW, "%s: %lld x %lld x %lld weights do not fit in memory",
                         what, (long long)heads, (long long)len_q, (long long)len_kv);
    for (int64_t n = 0; n < cells; n++)
        if (isnan(weights[n]) || (isinf(weights[n]) && weights[n] > 0))
            return attn_fail(ATTN_ERR_NONFINITE, "%s: weights[%lld, %lld, %lld] is %s", what,
                             (long long)(n / (len_q * len_kv)), (long long)(n / len_kv % len_q),
                             (long long)(n % len_kv), isnan(weights[n]) ? "NaN" : "+inf");
    return ATTN_OK;
}
