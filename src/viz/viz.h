/*
 * viz.h — what the picture and report modules share: a growable byte buffer,
 * the output format chosen by a path's extension, and the checks every
 * picture entry point makes on a weight table.  Files are written through
 * libattn's attn_output_write_file (attn_io.h): never half-written.
 *
 * Shape legend: weights [H, L, S] (heads, queries, keys), one batch.
 */
#ifndef ATTN_VIZ_INTERNAL_H
#define ATTN_VIZ_INTERNAL_H

#include "attn_io.h"
#include "attn_viz.h"

#include "base/base.h"

#include <math.h>
#include <stdbool.h>
#include <stddef.h>

/* A byte buffer that grows as text or binary data is appended.  After an
 * allocation failure every later append is a no-op and `failed` stays set,
 * so writers check once at the end. */
typedef struct viz_buf {
    char *data;
    size_t len, cap;
    bool failed;
} viz_buf;

void attn__viz_buf_append(viz_buf *b, const void *data, size_t size);
void attn__viz_buf_puts(viz_buf *b, const char *text);
void attn__viz_buf_printf(viz_buf *b, const char *fmt, ...) ATTN_PRINTF(2, 3);
void attn__viz_buf_free(viz_buf *b);

typedef enum viz_format { VIZ_FORMAT_UNKNOWN = 0, VIZ_FORMAT_PNG, VIZ_FORMAT_SVG, VIZ_FORMAT_PDF } viz_format;

/* The format named by path's extension (case-insensitive): .png, .svg, .pdf. */
viz_format attn__viz_format_of(const char *path);

/* Validates a weight table handed to a picture or report function: sizes
 * positive and their product fitting in memory, no NaN or +inf (a -inf cell
 * counts as hidden).  what names the calling function in messages. */
attn_status attn__viz_check_weights(const char *what, const float *weights, int64_t heads,
                              int64_t len_q, int64_t len_kv);

/* True when cell (h, i, j) is hidden: visible says so, or the cell holds -inf. */
static inline bool viz_hidden(const uint8_t *visible, const float *weights, int64_t idx) {
    return (visible && !visible[idx]) || (isinf(weights[idx]) && weights[idx] < 0);
}

#endif /* ATTN_VIZ_INTERNAL_H */
