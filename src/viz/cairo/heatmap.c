/*
 * heatmap.c — attn_heatmap_write: attention maps as PNG, SVG or PDF.
 *
 * Shape legend: weights [H, L, S] (heads, queries, keys), visible likewise.
 * Each head is one panel: its title, the key labels above the columns, the
 * query labels left of the rows, the cells; one colour legend serves all
 * panels.  PNG and SVG lay the panels out in a grid, PDF puts one per page.
 */
#include "viz/cairo/draw.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MARGIN 16.0
#define GAP 28.0          /* between panels, and before the legend       */
#define TITLE_H 24.0      /* the line above all panels                   */
#define HEAD_H 20.0       /* a panel's "head 3" line                     */
#define CAPTION_H 15.0    /* "keys: positions read →"                    */
#define LABEL_MAX_W 96.0  /* longer token labels are cut with "…"        */
#define AUTO_SPAN 520.0   /* automatic cells make a map about this wide  */
#define VALUE_CELL 30.0   /* smallest cell that holds a printed value    */
#define GRID_SPAN 160.0   /* ... each, at least, in a grid of many panels */
#define STRIP_CELL 12.0   /* a decode row's cells: room for a label each   */
#define STRIP_SPAN 768.0  /* a decode row wraps at this width (64 keys)    */
#define STRIP_LABEL_W 64.0 /* its key labels are cut shorter             */
#define STRIP_GAP 10.0    /* between the lines of a wrapped row          */

typedef struct {
    const char *head, *keys, *queries, *weight, *value, *hidden;
    const char *strip;             /* a decode row's caption: the query's label  */
    const char *scale_fixed, *scale_given, *scale_range, *scale_quantile[3]; /* the colour bar's rule */
} heatmap_text;

static const heatmap_text text_en = {"head %lld", "keys: positions read →", "queries ↓",
                                     "weight", "value", "hidden (masked)",
                                     "query “%s” reads the keys →",
                                     "scale: fixed 0 – 1", "scale: given %.3g – %.3g", "scale: the data's range",
                                     {"scale: 0 – %.3g,", "the %s percentile of", "the visible weights"}};
static const heatmap_text text_zh = {"头 %lld", "键：被读取的位置 →", "查询位置 ↓",
                                     "权重", "数值", "被遮住（mask）",
                                     "查询 “%s” 读取的键 →",
                                     "色标：固定 0 – 1", "色标：指定 %.3g – %.3g", "色标：数据的范围",
                                     {"色标：0 – %.3g，", "即可见权重的", "第 %s 百分位"}};

/* Everything the drawing needs, fixed before the surface exists. */
typedef struct {
    const attn_heatmap_options *opt;
    const heatmap_text *text;
    const float *weights;
    int64_t heads, len_q, len_kv;
    const char *const *titles;        /* panel titles, or NULL           */
    double quantile;                  /* the scale's quantile, or 0      */
    char **row_labels, **col_labels; /* fitted, owned */
    bool strip;                       /* one query: a wrapped strip      */
    int64_t per_line, lines;          /* the strip's keys per line, lines */
    char scale_note[3][96];           /* the colour bar's rule, 1-3 lines */
    double cell, label_size, value_size;
    int64_t row_step, col_step;       /* label every n-th row / column */
    bool cols_upright;                /* column labels turned 90 degrees */
    bool print_values, any_hidden, in_unit; /* in_unit: every visible value in [0, 1] */
    double vmin, vmax;
    double row_label_w, col_label_h;  /* label bands                    */
    double panel_w, panel_h, legend_w, legend_h; /* legend_h: bar and notes, from a panel's top */
    int64_t columns, rows;            /* panel grid (PNG, SVG)          */
} heatmap_layout;

static void free_labels(char **labels, int64_t n) {
    if (!labels) return;
    for (int64_t i = 0; i < n; i++) free(labels[i]);
    free(labels);
}

/* Copies the labels to show (given or "0", "1", ...), cut to LABEL_MAX_W in
 * the label font, and returns the widest. */
static char **fit_labels(cairo_t *cr, const char *const *given, int64_t n, double max_w, double *widest) {
    char **out = calloc((size_t)n, sizeof *out);
    if (!out) return NULL;
    *widest = 0;
    for (int64_t i = 0; i < n; i++) {
        char buf[256], number[24];
        snprintf(number, sizeof number, "%lld", (long long)i);
        attn__viz_text_fit(cr, given && given[i] ? given[i] : number, max_w, buf, sizeof buf);
        out[i] = strdup(buf);
        if (!out[i]) {
            free_labels(out, n);
            return NULL;
        }
        *widest = fmax(*widest, attn__viz_text_width(cr, buf));
    }
    return out;
}

/* The value at quantile q in (0, 1] of x[0..n) (n >= 1), by selection: x
 * is reordered.  The rank is ceil(q n) - 1, so q = 1 gives the maximum. */
static float select_quantile(float *x, int64_t n, double q) {
    int64_t k = (int64_t)ceil(q * (double)n) - 1;
    if (k < 0) k = 0;
    if (k > n - 1) k = n - 1;
    int64_t lo = 0, hi = n - 1;
    while (lo < hi) {
        const float pivot = x[lo + (hi - lo) / 2];
        int64_t i = lo, j = hi;
        while (i <= j) {
            while (x[i] < pivot) i++;
            while (x[j] > pivot) j--;
            if (i <= j) {
                const float t = x[i];
                x[i++] = x[j];
                x[j--] = t;
            }
        }
        if (k <= j) hi = j;
        else if (k >= i) lo = i;
        else break; /* x[k] equals the pivot */
    }
    return x[k];
}

/* "99th", "95th", "50th", "99.5th" for the colour bar. */
static void ordinal(char *out, size_t size, double percent) {
    const double r = round(percent);
    if (fabs(percent - r) > 1e-9) {
        snprintf(out, size, "%.3gth", percent);
        return;
    }
    const long n = (long)r;
    const char *suffix = (n % 100 >= 11 && n % 100 <= 13) ? "th" : n % 10 == 1 ? "st" : n % 10 == 2 ? "nd" : n % 10 == 3 ? "rd" : "th";
    snprintf(out, size, "%ld%s", n, suffix);
}

/* The colour bar's height: beside the cells, leaving room for the hidden
 * swatch and the scale's rule under it (taller only for short maps). */
static double legend_bar_h(const heatmap_layout *lo) {
    const double below = (lo->any_hidden ? 26.0 : 0.0) + 56.0;
    return fmin(240.0, fmax(120.0, (double)lo->len_q * lo->cell - below));
}

static attn_status plan(heatmap_layout *lo, cairo_t *cr) {
    const attn_heatmap_options *opt = lo->opt;
    const int64_t L = lo->len_q, S = lo->len_kv, n = lo->heads * L * S;
    int64_t longest = L > S ? L : S;

    lo->print_values = opt->values > 0 || (opt->values == 0 && L <= 16 && S <= 16);
    lo->strip = L == 1 && S > 1;
    if (lo->strip) {
        /* One decode step: cells big enough for a label each, wrapped. */
        lo->cell = opt->cell > 0 ? opt->cell : STRIP_CELL;
        if (lo->print_values && opt->cell <= 0) lo->cell = fmax(lo->cell, VALUE_CELL);
        lo->per_line = (int64_t)fmax(1.0, floor(STRIP_SPAN / lo->cell));
        if (lo->per_line > S) lo->per_line = S;
        lo->lines = (S + lo->per_line - 1) / lo->per_line;
    } else if (opt->cell > 0) {
        lo->cell = opt->cell;
    } else {
        /* Many panels (a layer x head grid) get smaller ones, and cells
         * under a point when the maps are long: a pixel per cell or less
         * still shows where the weight goes. */
        double span = lo->heads > 4 ? fmax(GRID_SPAN, AUTO_SPAN / sqrt((double)lo->heads / 4.0)) : AUTO_SPAN;
        double cell = fmin(40.0, span / (double)longest);
        lo->cell = cell >= 1.0 || lo->heads <= 4 ? fmax(1.0, floor(cell)) : fmax(0.25, cell);
        if (lo->print_values) lo->cell = fmax(lo->cell, VALUE_CELL);
    }
    lo->label_size = fmin(12.0, fmax(7.0, lo->cell * 0.5));
    lo->value_size = fmin(11.0, fmax(6.0, lo->cell * 0.3));

    bool in_unit = true;
    double lo_v = INFINITY, hi_v = -INFINITY;
    for (int64_t i = 0; i < n; i++) {
        if (viz_hidden(opt->visible, lo->weights, i)) {
            lo->any_hidden = true;
            continue;
        }
        double w = lo->weights[i];
        lo_v = fmin(lo_v, w);
        hi_v = fmax(hi_v, w);
        if (w < 0 || w > 1) in_unit = false;
    }
    lo->in_unit = in_unit;
    if (lo->quantile > 0) {
        /* Real maps spread weight thin: over 512 keys most weights are
         * near 1/512 and a [0, 1] scale leaves them white.  A high
         * quantile of the visible weights keeps the contrast, and clips
         * only the few heaviest cells (an attention sink, the diagonal). */
        int64_t count = 0;
        float *sample = malloc((size_t)(n > 0 ? n : 1) * sizeof *sample);
        if (!sample) return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "attn_heatmap_write: out of memory for the colour scale");
        for (int64_t i = 0; i < n; i++)
            if (!viz_hidden(opt->visible, lo->weights, i)) sample[count++] = lo->weights[i];
        double top = count ? select_quantile(sample, count, lo->quantile) : 1.0;
        free(sample);
        lo->vmin = in_unit ? 0.0 : (count ? lo_v : 0.0);
        lo->vmax = top > lo->vmin ? top : lo->vmin + 1.0;
        char pct[32];
        ordinal(pct, sizeof pct, lo->quantile * 100.0);
        snprintf(lo->scale_note[0], sizeof lo->scale_note[0], lo->text->scale_quantile[0], lo->vmax);
        snprintf(lo->scale_note[1], sizeof lo->scale_note[1], lo->text->scale_quantile[1], pct);
        snprintf(lo->scale_note[2], sizeof lo->scale_note[2], lo->text->scale_quantile[2], pct);
    } else if (opt->vmax > opt->vmin) {
        lo->vmin = opt->vmin;
        lo->vmax = opt->vmax;
        snprintf(lo->scale_note[0], sizeof lo->scale_note[0], lo->text->scale_given, lo->vmin, lo->vmax);
    } else if (in_unit || !(hi_v > lo_v)) {
        lo->vmin = 0;
        lo->vmax = 1;
        snprintf(lo->scale_note[0], sizeof lo->scale_note[0], "%s", lo->text->scale_fixed);
    } else {
        lo->vmin = lo_v;
        lo->vmax = hi_v;
        snprintf(lo->scale_note[0], sizeof lo->scale_note[0], "%s", lo->text->scale_range);
    }

    attn__viz_font(cr, lo->label_size, false);
    double row_w, col_w;
    const char *const *keys = opt->key_labels ? opt->key_labels : S == L ? opt->query_labels : NULL;
    lo->row_labels = fit_labels(cr, opt->query_labels, L, LABEL_MAX_W, &row_w);
    lo->col_labels = fit_labels(cr, keys, S, lo->strip ? STRIP_LABEL_W : LABEL_MAX_W, &col_w);
    if (!lo->row_labels || !lo->col_labels)
        return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "attn_heatmap_write: out of memory for the labels");
    double pitch = lo->label_size * 1.3; /* room one label needs across its line */
    lo->row_step = (int64_t)ceil(pitch / lo->cell);
    lo->col_step = lo->row_step;
    lo->cols_upright = !(lo->col_step == 1 && col_w <= lo->cell - 2);
    lo->row_label_w = row_w + 8;
    lo->col_label_h = lo->cols_upright ? col_w + 8 : lo->label_size * 1.6;

    if (lo->strip) {
        /* Left of each line: the position of its first key. */
        char first[24];
        snprintf(first, sizeof first, "%lld", (long long)((lo->lines - 1) * lo->per_line));
        lo->row_label_w = attn__viz_text_width(cr, first) + 8;
        lo->panel_w = CAPTION_H + lo->row_label_w + (double)lo->per_line * lo->cell;
        lo->panel_h = HEAD_H + CAPTION_H + (double)lo->lines * (lo->col_label_h + lo->cell + STRIP_GAP);
    } else {
        lo->panel_w = CAPTION_H + lo->row_label_w + (double)S * lo->cell;
        lo->panel_h = HEAD_H + CAPTION_H + lo->col_label_h + (double)L * lo->cell;
    }
    attn__viz_font(cr, 9, false);
    lo->legend_w = fmax(VIZ_LEGEND_WIDTH, 12 + 5 + attn__viz_text_width(cr, lo->text->hidden) + 6);
    for (int k = 0; k < 3; k++) lo->legend_w = fmax(lo->legend_w, attn__viz_text_width(cr, lo->scale_note[k]) + 6);
    lo->legend_h = HEAD_H + CAPTION_H + lo->col_label_h + legend_bar_h(lo) + (lo->any_hidden ? 26 : 0) + 20 + 36;

    /* Automatic grid: as many panels per row as fit in about 1500 points,
     * but close to square once there are more than four. */
    int64_t columns = opt->columns;
    if (columns <= 0) {
        columns = (int64_t)floor(1500.0 / (lo->panel_w + GAP));
        int64_t square = (int64_t)ceil(sqrt((double)lo->heads));
        if (lo->heads > 4 && columns > square) columns = square;
    }
    if (columns < 1) columns = 1;
    if (columns > lo->heads) columns = lo->heads;
    lo->rows = (lo->heads + columns - 1) / columns;
    lo->columns = opt->columns > 0 ? columns : (lo->heads + lo->rows - 1) / lo->rows;
    return ATTN_OK;
}

/* A single query row, wrapped every per_line keys: each line its key
 * labels above, the cells, its first key's position to the left. */
static void draw_strip(cairo_t *cr, const heatmap_layout *lo, int64_t h, double x, double y) {
    const attn_heatmap_options *opt = lo->opt;
    const int64_t S = lo->len_kv;
    const double gx = x + CAPTION_H + lo->row_label_w;
    char caption[256];
    attn__viz_font(cr, 9, false);
    attn__viz_source(cr, attn__viz_hex(VIZ_MUTED));
    snprintf(caption, sizeof caption, lo->text->strip, lo->row_labels[0]);
    attn__viz_text(cr, gx, y + HEAD_H + CAPTION_H / 2, caption, 0);
    for (int64_t line = 0; line < lo->lines; line++) {
        const int64_t first = line * lo->per_line;
        const int64_t count = S - first < lo->per_line ? S - first : lo->per_line;
        const double ly = y + HEAD_H + CAPTION_H + (double)line * (lo->col_label_h + lo->cell + STRIP_GAP);
        const double gy = ly + lo->col_label_h;
        attn__viz_font(cr, lo->label_size, false);
        attn__viz_source(cr, attn__viz_hex(VIZ_INK));
        for (int64_t j = 0; j < count; j += lo->col_step) {
            double cx = gx + ((double)j + 0.5) * lo->cell;
            if (lo->cols_upright) attn__viz_text_up(cr, cx, gy - 4, lo->col_labels[first + j], 0);
            else attn__viz_text(cr, cx, gy - lo->col_label_h / 2, lo->col_labels[first + j], 0.5);
        }
        char number[24];
        snprintf(number, sizeof number, "%lld", (long long)first);
        attn__viz_source(cr, attn__viz_hex(VIZ_MUTED));
        attn__viz_text(cr, gx - 5, gy + lo->cell / 2, number, 1);
        viz_grid grid = {.x = gx, .y = gy, .cell = lo->cell, .rows = 1, .cols = count,
                         .values = lo->weights + h * S + first,
                         .visible = opt->visible ? opt->visible + h * S + first : NULL,
                         .vmin = lo->vmin, .vmax = lo->vmax, .text = lo->print_values ? 1 : 0,
                         .font_size = lo->value_size};
        attn__viz_draw_grid(cr, &grid);
    }
}

/* Draws head h's panel with its top-left corner at (x, y). */
static void draw_panel(cairo_t *cr, const heatmap_layout *lo, int64_t h, double x, double y) {
    const attn_heatmap_options *opt = lo->opt;
    const int64_t L = lo->len_q, S = lo->len_kv;
    const double gx = x + CAPTION_H + lo->row_label_w;
    const double gy = y + HEAD_H + CAPTION_H + lo->col_label_h;
    char title[128];

    attn__viz_font(cr, 12, true);
    attn__viz_source(cr, attn__viz_hex(VIZ_INK));
    if (lo->titles && lo->titles[h]) snprintf(title, sizeof title, "%s", lo->titles[h]);
    else snprintf(title, sizeof title, lo->text->head, (long long)(opt->head_ids ? opt->head_ids[h] : h));
    attn__viz_text(cr, gx, y + HEAD_H / 2, title, 0);
    if (lo->strip) {
        draw_strip(cr, lo, h, x, y);
        return;
    }

    attn__viz_font(cr, 9, false);
    attn__viz_source(cr, attn__viz_hex(VIZ_MUTED));
    attn__viz_text(cr, gx, y + HEAD_H + CAPTION_H / 2, lo->text->keys, 0);
    attn__viz_text_up(cr, x + CAPTION_H / 2, gy, lo->text->queries, 1);

    attn__viz_font(cr, lo->label_size, false);
    attn__viz_source(cr, attn__viz_hex(VIZ_INK));
    for (int64_t i = 0; i < L; i += lo->row_step)
        attn__viz_text(cr, gx - 5, gy + (i + 0.5) * lo->cell, lo->row_labels[i], 1);
    for (int64_t j = 0; j < S; j += lo->col_step) {
        double cx = gx + (j + 0.5) * lo->cell;
        if (lo->cols_upright) attn__viz_text_up(cr, cx, gy - 4, lo->col_labels[j], 0);
        else attn__viz_text(cr, cx, gy - lo->col_label_h / 2, lo->col_labels[j], 0.5);
    }

    viz_grid grid = {.x = gx, .y = gy, .cell = lo->cell, .rows = L, .cols = S,
                     .values = lo->weights + h * L * S,
                     .visible = opt->visible ? opt->visible + h * L * S : NULL,
                     .vmin = lo->vmin, .vmax = lo->vmax, .text = lo->print_values ? 1 : 0,
                     .font_size = lo->value_size};
    attn__viz_draw_grid(cr, &grid);
}

/* The colour bar, and under it the rule that fixed its range. */
static void draw_legend(cairo_t *cr, const heatmap_layout *lo, double x, double y) {
    double bar_h = legend_bar_h(lo);
    double top = y + HEAD_H + CAPTION_H + lo->col_label_h;
    attn__viz_draw_legend(cr, x, top, 12, bar_h, lo->vmin, lo->vmax,
                    lo->in_unit ? lo->text->weight : lo->text->value, lo->text->hidden, lo->any_hidden);
    double ny = top + bar_h + (lo->any_hidden ? 14 + 12 : 0) + 20;
    attn__viz_font(cr, 9, false);
    attn__viz_source(cr, attn__viz_hex(VIZ_MUTED));
    for (int k = 0; k < 3; k++)
        if (lo->scale_note[k][0]) attn__viz_text(cr, x, ny + 12.0 * k, lo->scale_note[k], 0);
}

attn_status attn_heatmap_write(const char *path, const float *weights, int64_t heads,
                               int64_t len_q, int64_t len_kv, const attn_heatmap_options *opt_in) {
    static const attn_heatmap_options defaults = ATTN_HEATMAP_OPTIONS_INIT;
    if (!path) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_heatmap_write: path is NULL");
    if (attn__viz_format_of(path) == VIZ_FORMAT_UNKNOWN)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT,
                         "'%s': unknown picture format; the name must end in .png, .svg or .pdf", path);
    attn_status st = attn__viz_check_weights("attn_heatmap_write", weights, heads, len_q, len_kv);
    if (st != ATTN_OK) return st;
    attn_heatmap_options options;
    if ((st = options_copy(&options, sizeof options, &defaults, opt_in, "attn_heatmap_options"))) return st;
    const attn_heatmap_options *opt = &options;
    const double quantile = opt->vmax_quantile;
    if (!(opt->cell >= 0) || opt->cell > 400 || !(opt->pixel_scale >= 0) || opt->pixel_scale > 16 ||
        opt->columns < 0 || !isfinite(opt->vmin) || !isfinite(opt->vmax) || !(quantile >= 0 && quantile <= 1))
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT,
                         "attn_heatmap_write: options out of range (cell %g in [0, 400], pixel_scale "
                         "%g in [0, 16], columns %d >= 0, finite vmin/vmax, vmax_quantile %g in [0, 1])",
                         opt->cell, opt->pixel_scale, opt->columns, quantile);
    if ((double)len_q * len_kv > 4096.0 * 4096.0)
        return attn__fail(ATTN_ERR_UNSUPPORTED,
                         "'%s': a %lld x %lld map is too large to draw (at most 4096 x 4096 cells)",
                         path, (long long)len_q, (long long)len_kv);

    heatmap_layout lo = {.opt = opt, .weights = weights, .heads = heads, .len_q = len_q,
                         .len_kv = len_kv, .quantile = quantile,
                         .titles = opt->panel_titles,
                         .text = opt->lang && strcmp(opt->lang, "zh") == 0 ? &text_zh : &text_en};
    viz_doc doc = {0};
    cairo_t *measure = attn__viz_measure_context();
    st = plan(&lo, measure);
    attn__viz_measure_release(measure);
    if (st != ATTN_OK) goto cleanup;

    const double title_h = opt->title ? TITLE_H : 0;
    const double legend_x_one = MARGIN + lo.panel_w + GAP;
    if (attn__viz_format_of(path) == VIZ_FORMAT_PDF) {
        double w = legend_x_one + lo.legend_w + MARGIN, h = MARGIN + title_h + fmax(lo.panel_h, lo.legend_h) + MARGIN;
        if ((st = attn__viz_doc_begin(&doc, path, w, h, opt->pixel_scale))) goto cleanup;
        for (int64_t head = 0; head < heads; head++) {
            if (head > 0 && (st = attn__viz_doc_next_page(&doc, w, h))) goto cleanup;
            if (opt->title) {
                attn__viz_font(doc.cr, 13, true);
                attn__viz_source(doc.cr, attn__viz_hex(VIZ_INK));
                attn__viz_text(doc.cr, MARGIN, MARGIN + TITLE_H / 2 - 2, opt->title, 0);
            }
            draw_panel(doc.cr, &lo, head, MARGIN, MARGIN + title_h);
            draw_legend(doc.cr, &lo, legend_x_one, MARGIN + title_h);
        }
    } else {
        double grid_w = lo.columns * lo.panel_w + (lo.columns - 1) * GAP;
        double grid_h = lo.rows * lo.panel_h + (lo.rows - 1) * GAP;
        double w = MARGIN + grid_w + GAP + lo.legend_w + MARGIN, h = MARGIN + title_h + fmax(grid_h, lo.legend_h) + MARGIN;
        if ((st = attn__viz_doc_begin(&doc, path, w, h, opt->pixel_scale))) goto cleanup;
        if (opt->title) {
            attn__viz_font(doc.cr, 13, true);
            attn__viz_source(doc.cr, attn__viz_hex(VIZ_INK));
            attn__viz_text(doc.cr, MARGIN, MARGIN + TITLE_H / 2 - 2, opt->title, 0);
        }
        for (int64_t head = 0; head < heads; head++)
            draw_panel(doc.cr, &lo, head, MARGIN + (head % lo.columns) * (lo.panel_w + GAP),
                       MARGIN + title_h + (head / lo.columns) * (lo.panel_h + GAP));
        draw_legend(doc.cr, &lo, MARGIN + grid_w + GAP, MARGIN + title_h);
    }
    st = attn__viz_doc_finish(&doc);

cleanup:
    attn__viz_doc_abort(&doc);
    free_labels(lo.row_labels, len_q);
    free_labels(lo.col_labels, len_kv);
    return st;
}

int attn_pictures_available(void) { return 1; }
