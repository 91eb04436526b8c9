/*
 * lineplot.c — attn_lineplot_write (attn_viz.h): one series against its
 * index, on the drawing vocabulary of draw.h.
 */
#include "viz/cairo/draw.h"

#include <math.h>
#include <stdio.h>

#define PLOT_W 520.0  /* the plotting area, points */
#define PLOT_H 280.0
#define MARGIN_L 64.0
#define MARGIN_R 24.0
#define MARGIN_T 44.0
#define MARGIN_B 56.0

attn_status attn_lineplot_write(const char *path, const double *y, int64_t n, const attn_lineplot_options *opt_in) {
    static const attn_lineplot_options defaults = ATTN_LINEPLOT_OPTIONS_INIT;
    if (!path) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_lineplot_write: path is NULL");
    if (attn__viz_format_of(path) == VIZ_FORMAT_UNKNOWN)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT,
                          "'%s': unknown picture format; the name must end in .png, .svg or .pdf", path);
    if (!y || n < 1 || n > 10000)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "'%s': %lld points (1 to 10000, y not NULL)", path,
                          (long long)n);
    attn_lineplot_options options;
    attn_status st = options_copy(&options, sizeof options, &defaults, opt_in, "attn_lineplot_options");
    if (st) return st;
    const attn_lineplot_options *opt = &options;
    double lo = opt->ymin, hi = opt->ymax;
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(y[i]) || (opt->y2 && !isfinite(opt->y2[i])))
            return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "'%s': point %lld%s is not finite", path, (long long)i,
                              isfinite(y[i]) ? " of the second series" : "");
    if (!isfinite(lo) || !isfinite(hi) || lo > hi)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "'%s': ymin %g and ymax %g", path, lo, hi);
    if (lo == hi) {
        lo = hi = y[0];
        for (int64_t i = 1; i < n; i++) lo = fmin(lo, y[i]), hi = fmax(hi, y[i]);
        for (int64_t i = 0; opt->y2 && i < n; i++) lo = fmin(lo, opt->y2[i]), hi = fmax(hi, opt->y2[i]);
        lo = floor(lo * 10.0) / 10.0;
        hi = ceil(hi * 10.0) / 10.0;
        if (hi <= lo) hi = lo + 0.1;
    }
    viz_doc doc = {0};
    st = attn__viz_doc_begin(&doc, path, MARGIN_L + PLOT_W + MARGIN_R, MARGIN_T + PLOT_H + MARGIN_B, 0);
    if (st) return st;
    cairo_t *cr = doc.cr;
    const double x0 = MARGIN_L, y0 = MARGIN_T + PLOT_H;
    const double dx = n > 1 ? PLOT_W / (double)(n - 1) : 0;
#define PX(i) (x0 + dx * (double)(i) + (n > 1 ? 0 : PLOT_W / 2))
#define PY(v) (y0 - ((v) - lo) / (hi - lo) * PLOT_H)
    /* Grid and y ticks every tenth (every fifth when the range is wide). */
    const double step = hi - lo > 1.0 ? 0.5 : 0.1;
    attn__viz_font(cr, 10, false);
    for (double v = lo; v <= hi + 1e-9; v += step) {
        attn__viz_source(cr, attn__viz_hex(VIZ_LINE));
        cairo_set_line_width(cr, 0.5);
        cairo_move_to(cr, x0, PY(v));
        cairo_line_to(cr, x0 + PLOT_W, PY(v));
        cairo_stroke(cr);
        char tick[32];
        snprintf(tick, sizeof tick, "%.1f", v);
        attn__viz_source(cr, attn__viz_hex(VIZ_MUTED));
        attn__viz_text(cr, x0 - 6, PY(v), tick, 1.0);
    }
    const int64_t every = n > 30 ? 10 : n > 12 ? 2 : 1;
    for (int64_t i = 0; i < n; i += every) {
        char tick[32];
        snprintf(tick, sizeof tick, "%lld", (long long)i);
        attn__viz_text(cr, PX(i), y0 + 12, tick, 0.5);
    }
    attn__viz_source(cr, attn__viz_hex(VIZ_INK));
    cairo_set_line_width(cr, 1.0);
    cairo_move_to(cr, x0, MARGIN_T);
    cairo_line_to(cr, x0, y0);
    cairo_line_to(cr, x0 + PLOT_W, y0);
    cairo_stroke(cr);
    /* The series. */
    const viz_rgb line = attn__viz_scale_colour(0.85);
    attn__viz_source(cr, line);
    cairo_set_line_width(cr, 2.0);
    for (int64_t i = 0; i < n; i++) {
        if (i == 0) cairo_move_to(cr, PX(i), PY(y[i]));
        else cairo_line_to(cr, PX(i), PY(y[i]));
    }
    cairo_stroke(cr);
    for (int64_t i = 0; i < n; i++) {
        cairo_arc(cr, PX(i), PY(y[i]), 2.5, 0, 2 * VIZ_PI);
        cairo_fill(cr);
    }
    /* The second series, dashed in orange, and the legend. */
    const viz_rgb second = attn__viz_hex(0xd9822bu);
    if (opt->y2) {
        const double dash[2] = {6.0, 3.0};
        attn__viz_source(cr, second);
        cairo_set_line_width(cr, 2.0);
        cairo_set_dash(cr, dash, 2, 0);
        for (int64_t i = 0; i < n; i++) {
            if (i == 0) cairo_move_to(cr, PX(i), PY(opt->y2[i]));
            else cairo_line_to(cr, PX(i), PY(opt->y2[i]));
        }
        cairo_stroke(cr);
        cairo_set_dash(cr, NULL, 0, 0);
        for (int64_t i = 0; i < n; i++) {
            cairo_arc(cr, PX(i), PY(opt->y2[i]), 2.5, 0, 2 * VIZ_PI);
            cairo_fill(cr);
        }
    }
    if (opt->name || opt->name2) {
        attn__viz_font(cr, 10, false);
        const char *names[2] = {opt->name ? opt->name : "", opt->name2 ? opt->name2 : ""};
        /* Bottom left: the series start at the top left (cosines from 1). */
        const int rows = opt->y2 ? 2 : 1;
        for (int k = 0; k < rows; k++) {
            const double ly = y0 - 14 - 16 * (rows - 1 - k), lx = x0 + 12;
            attn__viz_source(cr, k ? second : line);
            cairo_set_line_width(cr, 2.0);
            cairo_move_to(cr, lx, ly);
            cairo_line_to(cr, lx + 22, ly);
            cairo_stroke(cr);
            attn__viz_source(cr, attn__viz_hex(VIZ_INK));
            attn__viz_text(cr, lx + 28, ly, names[k], 0.0);
        }
    }
#undef PX
#undef PY
    attn__viz_source(cr, attn__viz_hex(VIZ_INK));
    if (opt->title) {
        attn__viz_font(cr, 13, true);
        attn__viz_text(cr, MARGIN_L + PLOT_W / 2, MARGIN_T / 2, opt->title, 0.5);
    }
    attn__viz_font(cr, 11, false);
    if (opt->x_label) attn__viz_text(cr, MARGIN_L + PLOT_W / 2, y0 + 36, opt->x_label, 0.5);
    if (opt->y_label) attn__viz_text_up(cr, 18, MARGIN_T + PLOT_H / 2, opt->y_label, 0.5);
    return attn__viz_doc_finish(&doc);
}
