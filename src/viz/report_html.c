/*
 * report_html.c — attn_report_write_html: one self-contained HTML file of
 * attention maps.  The page itself (CSS and JavaScript, src/viz/report/
 * page.html) is embedded at build time; this file only serialises the data
 * as JSON into the page's marker and writes the result atomically.
 *
 * Shape legend: weights, visible [H, L, S]; paths' z [B, L, Hq, Dv],
 * pattern [B, Hq, L, S], attn_out [B, L, d_out]; a panel's values
 * [rows, cols] (a few thousand doubles at most, written as decimals).  The JSON holds the report's
 * heads only (H of them, in head_ids order), one batch; the path tables one
 * per layer (a model's run), or one (bare attention, a module).
 *
 * Floats travel as base64 of little-endian float32, so the page shows each
 * weight exactly (and 512 x 512 x 16 weights stay near 22 MB); the visible
 * mask as base64 of bits, least significant bit first.  Weights and mask go
 * one base64 string per layer, so the page decodes a layer when it is
 * shown; where some cells are hidden, a layer's string holds only its
 * visible cells, in order (a causal map's upper triangle is never stored).
 */
#include "viz/viz.h"

#include "viz_report_page.h" /* generated: viz_report_page[], the template */

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define DATA_MARKER "@ATTN_REPORT_DATA@"

static const char b64_digits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* Appends the base64 text of n bytes, as a JSON string. */
static void json_base64(viz_buf *b, const unsigned char *bytes, size_t n) {
    char out[4096];
    size_t used = 0;
    attn__viz_buf_puts(b, "\"");
    for (size_t i = 0; i < n; i += 3) {
        unsigned v = (unsigned)bytes[i] << 16 | (i + 1 < n ? (unsigned)bytes[i + 1] << 8 : 0) |
                     (i + 2 < n ? bytes[i + 2] : 0);
        out[used++] = b64_digits[v >> 18 & 63];
        out[used++] = b64_digits[v >> 12 & 63];
        out[used++] = i + 1 < n ? b64_digits[v >> 6 & 63] : '=';
        out[used++] = i + 2 < n ? b64_digits[v & 63] : '=';
        if (used + 4 > sizeof out) {
            attn__viz_buf_append(b, out, used);
            used = 0;
        }
    }
    attn__viz_buf_append(b, out, used);
    attn__viz_buf_puts(b, "\"");
}

/* float32 values as little-endian bytes in base64, whatever the host order. */
static attn_status json_floats(viz_buf *b, const float *x, size_t n) {
    unsigned char *bytes = malloc(n * 4 > 0 ? n * 4 : 1);
    if (!bytes) return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "attn_report_write_html: out of memory");
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], 4);
        for (int k = 0; k < 4; k++) bytes[4 * i + (size_t)k] = (unsigned char)(u >> (8 * k));
    }
    json_base64(b, bytes, n * 4);
    free(bytes);
    return ATTN_OK;
}

/* Length of the valid UTF-8 sequence at s, or 0 if the bytes there are not one. */
static size_t utf8_sequence(const unsigned char *s) {
    if (s[0] < 0x80) return 1;
    size_t len = s[0] >= 0xF0 && s[0] <= 0xF4 ? 4 : s[0] >= 0xE0 ? 3 : s[0] >= 0xC2 ? 2 : 0;
    if (!len || s[0] > 0xF4) return 0;
    for (size_t i = 1; i < len; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    uint32_t cp = len == 2 ? (s[0] & 0x1Fu) << 6 | (s[1] & 0x3Fu)
                : len == 3 ? (s[0] & 0x0Fu) << 12 | (s[1] & 0x3Fu) << 6 | (s[2] & 0x3Fu)
                           : (s[0] & 0x07u) << 18 | (s[1] & 0x3Fu) << 12 | (s[2] & 0x3Fu) << 6 | (s[3] & 0x3Fu);
    if ((len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
        return 0;
    return len;
}

/* A JSON string that is also safe inside <script>: '<', '>' and '&' are
 * escaped, and bytes that are not UTF-8 become U+FFFD. */
static void json_string(viz_buf *b, const char *text) {
    if (!text) {
        attn__viz_buf_puts(b, "null");
        return;
    }
    attn__viz_buf_puts(b, "\"");
    const unsigned char *s = (const unsigned char *)text;
    while (*s) {
        if (*s == '"' || *s == '\\') {
            attn__viz_buf_printf(b, "\\%c", *s++);
        } else if (*s < 0x20 || *s == '<' || *s == '>' || *s == '&') {
            attn__viz_buf_printf(b, "\\u%04x", *s++);
        } else {
            size_t len = utf8_sequence(s);
            if (len) {
                attn__viz_buf_append(b, s, len);
                s += len;
            } else {
                attn__viz_buf_puts(b, "\\ufffd");
                s++;
            }
        }
    }
    attn__viz_buf_puts(b, "\"");
}

static void json_labels(viz_buf *b, const char *const *labels, int64_t n) {
    if (!labels) {
        attn__viz_buf_puts(b, "null");
        return;
    }
    attn__viz_buf_puts(b, "[");
    for (int64_t i = 0; i < n; i++) {
        if (i) attn__viz_buf_puts(b, ",");
        if (labels[i]) json_string(b, labels[i]);
        else attn__viz_buf_printf(b, "\"%lld\"", (long long)i);
    }
    attn__viz_buf_puts(b, "]");
}

/* The report's heads of one batch of a paths hook with rows (b, position,
 * head) of width w: [L, H, w] for the page. */
static attn_status json_head_rows(viz_buf *b, const attn_report *r, const float *data,
                                  int64_t heads_all, int64_t width) {
    const int64_t H = r->heads, L = r->len_q;
    float *sel = malloc((size_t)(L * H * width) * sizeof(float));
    if (!sel) return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "attn_report_write_html: out of memory");
    const float *batch = data + r->paths_batch * L * heads_all * width;
    for (int64_t i = 0; i < L; i++)
        for (int64_t h = 0; h < H; h++) {
            int64_t src = r->head_ids ? r->head_ids[h] : h;
            memcpy(sel + (i * H + h) * width, batch + (i * heads_all + src) * width,
                   (size_t)width * sizeof(float));
        }
    attn_status st = json_floats(b, sel, (size_t)(L * H * width));
    free(sel);
    return st;
}

/* A layer's visible weights, in order, as base64 float32. */
static attn_status json_visible_floats(viz_buf *b, const float *w, const uint8_t *visible, int64_t cells) {
    int64_t kept = 0;
    for (int64_t n = 0; n < cells; n++) kept += visible[n] != 0;
    float *packed = malloc((size_t)(kept > 0 ? kept : 1) * sizeof(float));
    if (!packed) return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "attn_report_write_html: out of memory");
    for (int64_t n = 0, k = 0; n < cells; n++)
        if (visible[n]) packed[k++] = w[n];
    attn_status st = json_floats(b, packed, (size_t)kept);
    free(packed);
    return st;
}

/* The path tables the report holds: layer_paths [layers], or paths (one). */
static const attn_paths *report_paths(const attn_report *r, int64_t *count, int64_t layers) {
    const attn_paths *per_layer = r->layer_paths;
    *count = per_layer ? layers : r->paths ? 1 : 0;
    return per_layer ? per_layer : r->paths;
}

static attn_status check_paths(const attn_report *r, const attn_paths *p, int64_t layer) {
    const attn_trace *t = &p->run[ATTN_PATH_BASE];
    bool filled = p->interaction_z && p->run[ATTN_PATH_K_ONLY].pattern;
    for (int c = 0; c < ATTN_PATH_CASES; c++) filled = filled && p->run[c].z;
    if (!filled)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_report_write_html: paths of layer %lld are empty (fill them "
                         "with attn_sdpa_paths or attn_mha_paths)", (long long)layer);
    if (t->len != r->len_q || t->context_len != r->len_kv)
        return attn__fail(ATTN_ERR_SHAPE,
                         "attn_report_write_html: paths are for %lld queries x %lld keys, the maps for %lld x %lld",
                         (long long)t->len, (long long)t->context_len, (long long)r->len_q, (long long)r->len_kv);
    if (r->paths_batch < 0 || r->paths_batch >= t->batch)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_report_write_html: paths_batch %lld outside [0, %lld)",
                         (long long)r->paths_batch, (long long)t->batch);
    for (int64_t h = 0; h < r->heads; h++) {
        int64_t id = r->head_ids ? r->head_ids[h] : h;
        if (id < 0 || id >= t->heads)
            return attn__fail(ATTN_ERR_INVALID_ARGUMENT,
                             "attn_report_write_html: head %lld is outside the %lld heads of paths",
                             (long long)id, (long long)t->heads);
    }
    return ATTN_OK;
}

/* One layer's table: {"z": [cases], "interaction_z", "weights_k",
 * "weights_k_packed", and for a module "out": [cases], "interaction_out"}.
 * visible: the layer's [H, L, S] when the maps are packed, else NULL; the
 * K-only weights are packed like the maps when their hidden cells are 0. */
static attn_status json_layer_paths(viz_buf *b, const attn_report *r, const attn_paths *p, const uint8_t *visible) {
    const attn_trace *t = &p->run[ATTN_PATH_BASE];
    attn_status st;
    attn__viz_buf_puts(b, "{\"z\":[");
    for (int c = 0; c < ATTN_PATH_CASES; c++) {
        if (c) attn__viz_buf_puts(b, ",");
        if ((st = json_head_rows(b, r, p->run[c].z, t->heads, t->value_dim))) return st;
    }
    attn__viz_buf_puts(b, "],\"interaction_z\":");
    if ((st = json_head_rows(b, r, p->interaction_z, t->heads, t->value_dim))) return st;

    /* The K-only weights (the same as both's): the keys moved them. */
    const int64_t H = r->heads, L = r->len_q, S = r->len_kv;
    float *wk = malloc((size_t)(H * L * S) * sizeof(float));
    if (!wk) return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "attn_report_write_html: out of memory");
    for (int64_t h = 0; h < H; h++) {
        int64_t id = r->head_ids ? r->head_ids[h] : h;
        memcpy(wk + h * L * S, p->run[ATTN_PATH_K_ONLY].pattern + (r->paths_batch * t->heads + id) * L * S,
               (size_t)(L * S) * sizeof(float));
    }
    bool pack = visible != NULL;
    for (int64_t n = 0; pack && n < H * L * S; n++) pack = visible[n] || wk[n] == 0;
    attn__viz_buf_printf(b, ",\"weights_k_packed\":%s,\"weights_k\":", pack ? "true" : "false");
    st = pack ? json_visible_floats(b, wk, visible, H * L * S) : json_floats(b, wk, (size_t)(H * L * S));
    free(wk);
    if (st) return st;

    if (t->d_out && p->run[ATTN_PATH_BASE].attn_out && p->interaction_out) {
        attn__viz_buf_puts(b, ",\"out\":[");
        for (int c = 0; c < ATTN_PATH_CASES; c++) {
            if (c) attn__viz_buf_puts(b, ",");
            if ((st = json_floats(b, p->run[c].attn_out + r->paths_batch * L * t->d_out, (size_t)(L * t->d_out))))
                return st;
        }
        attn__viz_buf_puts(b, "],\"interaction_out\":");
        if ((st = json_floats(b, p->interaction_out + r->paths_batch * L * t->d_out, (size_t)(L * t->d_out))))
            return st;
    }
    attn__viz_buf_puts(b, "}");
    return ATTN_OK;
}

/* {"value_dim", "d_out", "position", "layers": [one table per layer]}. */
static attn_status json_paths(viz_buf *b, const attn_report *r, const attn_paths *p, int64_t count, bool packed) {
    const attn_trace *t = &p[0].run[ATTN_PATH_BASE];
    const int64_t position = r->paths_position;
    attn__viz_buf_printf(b, "{\"value_dim\":%lld,\"d_out\":%lld,\"position\":%lld,\"layers\":[",
                         (long long)t->value_dim, (long long)t->d_out,
                         (long long)(position < 0 ? r->len_q + position : position));
    const int64_t cells = r->heads * r->len_q * r->len_kv;
    for (int64_t l = 0; l < count; l++) {
        if (l) attn__viz_buf_puts(b, ",");
        attn_status st = json_layer_paths(b, r, &p[l], packed ? r->visible + l * cells : NULL);
        if (st) return st;
    }
    attn__viz_buf_puts(b, "]}");
    return ATTN_OK;
}

/* The line plot: {"title", "values" (shortest round-trip decimals),
 * "values2" (the second series or null), "name", "name2", "labels"}. */
static void json_line(viz_buf *b, const attn_report *r, int64_t n) {
    attn__viz_buf_puts(b, "{\"title\":");
    json_string(b, r->line_title);
    attn__viz_buf_puts(b, ",\"values\":[");
    for (int64_t i = 0; i < n; i++) attn__viz_buf_printf(b, "%s%.17g", i ? "," : "", r->line[i]);
    attn__viz_buf_puts(b, "],\"values2\":");
    if (r->line2) {
        attn__viz_buf_puts(b, "[");
        for (int64_t i = 0; i < n; i++) attn__viz_buf_printf(b, "%s%.17g", i ? "," : "", r->line2[i]);
        attn__viz_buf_puts(b, "]");
    } else {
        attn__viz_buf_puts(b, "null");
    }
    attn__viz_buf_puts(b, ",\"name\":");
    json_string(b, r->line_name);
    attn__viz_buf_puts(b, ",\"name2\":");
    json_string(b, r->line2_name);
    attn__viz_buf_puts(b, ",\"labels\":");
    json_labels(b, r->line_labels, n);
    attn__viz_buf_puts(b, "}");
}

/* The panels: [{"title", "note", "style", "rows", "cols", "values" (shortest
 * round-trip decimals, null for NaN), "row_labels", "col_labels",
 * "cell_text" (rows x cols, row by row, or null)}]. */
static void json_panels(viz_buf *b, const attn_report *r) {
    static const char *const styles[] = {"heat", "diverging", "bars"};
    attn__viz_buf_puts(b, "[");
    for (int64_t p = 0; p < r->n_panels; p++) {
        const attn_report_panel *panel = &r->panels[p];
        const int64_t cells = panel->rows * panel->cols;
        attn__viz_buf_puts(b, p ? ",{\"title\":" : "{\"title\":");
        json_string(b, panel->title);
        attn__viz_buf_puts(b, ",\"note\":");
        json_string(b, panel->note);
        attn__viz_buf_printf(b, ",\"style\":\"%s\",\"rows\":%lld,\"cols\":%lld,\"values\":[", styles[panel->style],
                             (long long)panel->rows, (long long)panel->cols);
        for (int64_t n = 0; n < cells; n++) {
            if (n) attn__viz_buf_puts(b, ",");
            if (isnan(panel->values[n])) attn__viz_buf_puts(b, "null");
            else attn__viz_buf_printf(b, "%.17g", panel->values[n]);
        }
        attn__viz_buf_puts(b, "],\"row_labels\":");
        json_labels(b, panel->row_labels, panel->rows);
        attn__viz_buf_puts(b, ",\"col_labels\":");
        json_labels(b, panel->col_labels, panel->cols);
        attn__viz_buf_puts(b, ",\"cell_text\":");
        json_labels(b, panel->cell_text, cells);
        attn__viz_buf_puts(b, "}");
    }
    attn__viz_buf_puts(b, "]");
}

/* A panel's fields checked: its style, sizes, title and values. */
static attn_status check_panel(const attn_report_panel *panel, int64_t p) {
    if (!panel->title)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_report_write_html: panels[%lld].title is NULL", (long long)p);
    if ((int)panel->style < ATTN_REPORT_PANEL_HEAT || (int)panel->style > ATTN_REPORT_PANEL_BARS)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_report_write_html: panels[%lld].style is %d (heat 0, "
                          "diverging 1, bars 2)", (long long)p, (int)panel->style);
    if (panel->rows < 1 || panel->cols < 1 || panel->rows > 1000000 || panel->cols > 1000000 ||
        panel->rows * panel->cols > 1000000 || !panel->values)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_report_write_html: panels[%lld] is %lld x %lld (1 to "
                          "1000000 cells) or its values are NULL", (long long)p, (long long)panel->rows,
                          (long long)panel->cols);
    for (int64_t n = 0; n < panel->rows * panel->cols; n++)
        if (isinf(panel->values[n]))
            return attn__fail(ATTN_ERR_NONFINITE, "attn_report_write_html: panels[%lld].values[%lld] is infinite "
                              "(NaN marks an empty cell)", (long long)p, (long long)n);
    return ATTN_OK;
}

static attn_status json_report(viz_buf *b, const attn_report *r, int64_t layers, const int64_t *layer_ids) {
    const int64_t H = r->heads, L = r->len_q, S = r->len_kv, cells = H * L * S;
    attn_status st;
    attn__viz_buf_puts(b, "{\"title\":");
    json_string(b, r->title);
    attn__viz_buf_puts(b, ",\"subtitle\":");
    json_string(b, r->subtitle);
    attn__viz_buf_printf(b, ",\"library\":\"libattn %s\",\"heads\":%lld,\"len_q\":%lld,\"len_kv\":%lld,\"head_ids\":[",
                   attn_version(), (long long)H, (long long)L, (long long)S);
    for (int64_t h = 0; h < H; h++)
        attn__viz_buf_printf(b, "%s%lld", h ? "," : "", (long long)(r->head_ids ? r->head_ids[h] : h));
    attn__viz_buf_puts(b, "],\"query_labels\":");
    json_labels(b, r->query_labels, L);
    attn__viz_buf_puts(b, ",\"key_labels\":");
    json_labels(b, r->key_labels ? r->key_labels : S == L ? r->query_labels : NULL, S);
    attn__viz_buf_printf(b, ",\"layers\":%lld,\"layer_ids\":[", (long long)layers);
    for (int64_t l = 0; l < layers; l++)
        attn__viz_buf_printf(b, "%s%lld", l ? "," : "", (long long)(layer_ids ? layer_ids[l] : l));
    attn__viz_buf_puts(b, "]");
    bool any_hidden = false;
    for (int64_t n = 0; r->visible && n < layers * cells && !any_hidden; n++) any_hidden = !r->visible[n];
    /* packed: each layer's string holds its visible cells only */
    attn__viz_buf_printf(b, ",\"packed\":%s,\"weights\":[", any_hidden ? "true" : "false");
    for (int64_t l = 0; l < layers; l++) {
        if (l) attn__viz_buf_puts(b, ",");
        st = any_hidden ? json_visible_floats(b, r->weights + l * cells, r->visible + l * cells, cells)
                        : json_floats(b, r->weights + l * cells, (size_t)cells);
        if (st) return st;
    }
    attn__viz_buf_puts(b, "],\"visible\":");
    if (any_hidden) {
        size_t nbytes = (size_t)((cells + 7) / 8);
        unsigned char *packed = malloc(nbytes);
        if (!packed) return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "attn_report_write_html: out of memory");
        attn__viz_buf_puts(b, "[");
        for (int64_t l = 0; l < layers; l++) {
            const uint8_t *v = r->visible + l * cells;
            memset(packed, 0, nbytes);
            for (int64_t n = 0; n < cells; n++)
                if (v[n]) packed[n >> 3] |= (unsigned char)(1u << (n & 7));
            if (l) attn__viz_buf_puts(b, ",");
            json_base64(b, packed, nbytes);
        }
        attn__viz_buf_puts(b, "]");
        free(packed);
    } else {
        attn__viz_buf_puts(b, "null");
    }
    const int64_t line_len = r->line_len;
    attn__viz_buf_puts(b, ",\"line\":");
    if (line_len > 0) json_line(b, r, line_len);
    else attn__viz_buf_puts(b, "null");
    attn__viz_buf_puts(b, ",\"paths\":");
    int64_t n_paths;
    const attn_paths *paths = report_paths(r, &n_paths, layers);
    if (paths) {
        if ((st = json_paths(b, r, paths, n_paths, any_hidden))) return st;
    } else {
        attn__viz_buf_puts(b, "null");
    }
    attn__viz_buf_puts(b, ",\"panels\":");
    json_panels(b, r);
    attn__viz_buf_puts(b, "}");
    return ATTN_OK;
}

attn_status attn_report_write_html(const char *path, const attn_report *caller) {
    if (!path) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_report_write_html: path is NULL");
    if (!caller) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_report_write_html: report is NULL");
    /* The fields a caller built before paths_position existed do not set:
     * zero, but the heads ranked at the last position (-1), as such a
     * caller's page did. */
    static const attn_report older_defaults = {.struct_size = sizeof(attn_report), .paths_position = -1};
    attn_report report;
    attn_status st = options_copy(&report, sizeof report, &older_defaults, caller, "attn_report");
    if (st) return st;
    const attn_report *r = &report;
    const int64_t layers_given = r->layers;
    const int64_t layers = layers_given > 1 ? layers_given : 1;
    const int64_t *layer_ids = r->layer_ids;
    if (layers_given < 0)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_report_write_html: layers is %lld (0 or 1: one layer)",
                         (long long)layers_given);
    if (r->paths && r->layer_paths)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_report_write_html: give paths or layer_paths, not both");
    if (layers > 1 && r->paths)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT,
                         "attn_report_write_html: paths is one layer's table; layers is %lld (give layer_paths, "
                         "one per layer)", (long long)layers);
    /* The layers as one table of layers x H heads: one check covers sizes,
     * overflow and non-finite values. */
    int64_t all_heads;
    if (mul_overflows(layers, r->heads, &all_heads))
        return attn__fail(ATTN_ERR_OVERFLOW, "attn_report_write_html: %lld layers x %lld heads overflow",
                         (long long)layers, (long long)r->heads);
    st = attn__viz_check_weights("attn_report_write_html", r->weights, all_heads, r->len_q, r->len_kv);
    if (st) return st;
    for (int64_t n = 0; n < all_heads * r->len_q * r->len_kv; n++)
        if (isinf(r->weights[n]))
            return attn__fail(ATTN_ERR_NONFINITE, "attn_report_write_html: weights[%lld] is -inf; pass "
                             "weights (0 where hidden) and mark hidden cells in visible", (long long)n);
    int64_t n_paths;
    const attn_paths *paths = report_paths(r, &n_paths, layers);
    for (int64_t l = 0; l < n_paths; l++)
        if ((st = check_paths(r, &paths[l], l))) return st;
    if (n_paths) {
        const int64_t position = r->paths_position;
        if (position < -r->len_q || position >= r->len_q)
            return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_report_write_html: paths_position %lld is outside the "
                             "%lld queries", (long long)position, (long long)r->len_q);
    }
    if (r->line_len) {
        if (r->line_len < 0 || r->line_len > 10000 || !r->line)
            return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_report_write_html: line_len %lld outside [0, 10000], "
                             "or line is NULL", (long long)r->line_len);
        for (int64_t i = 0; i < r->line_len; i++)
            if (!isfinite(r->line[i]) || (r->line2 && !isfinite(r->line2[i])))
                return attn__fail(ATTN_ERR_NONFINITE, "attn_report_write_html: line%s[%lld] is not finite",
                                  isfinite(r->line[i]) ? "2" : "", (long long)i);
    }

    if (r->n_panels < 0 || r->n_panels > 64 || (r->n_panels && !r->panels))
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_report_write_html: n_panels %lld outside [0, 64], or "
                          "panels is NULL", (long long)r->n_panels);
    for (int64_t p = 0; p < r->n_panels; p++)
        if ((st = check_panel(&r->panels[p], p))) return st;

    const char *page = (const char *)viz_report_page;
    const char *marker = strstr(page, DATA_MARKER);
    if (!marker) return attn__fail(ATTN_ERR_INTERNAL, "attn_report_write_html: the page template has no data marker");
    viz_buf b = {0};
    attn__viz_buf_append(&b, page, (size_t)(marker - page));
    if ((st = json_report(&b, r, layers, layer_ids))) goto cleanup;
    attn__viz_buf_puts(&b, marker + strlen(DATA_MARKER));
    if (b.failed) {
        st = attn__fail(ATTN_ERR_OUT_OF_MEMORY, "'%s': out of memory for the report", path);
        goto cleanup;
    }
    st = attn_output_write_file(path, b.data, b.len);
cleanup:
    attn__viz_buf_free(&b);
    return st;
}
