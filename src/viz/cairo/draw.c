/*
 * draw.c — documents, colours, text and shapes shared by the heat maps and
 * the chapter's figures (see draw.h).
 */
#include "viz/cairo/draw.h"

#include <cairo-pdf.h>
#include <cairo-svg.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#define VIZ_FONT "Noto Sans CJK SC"
#define VIZ_MAX_PIXELS 8000.0  /* a PNG side above this drops to 1 pixel per point */
#define VIZ_CAIRO_LIMIT 32767.0 /* cairo's largest image surface side             */

/* ------------------------------------------------------------ documents */

static cairo_status_t append_bytes(void *closure, const unsigned char *data, unsigned int length) {
    viz_buf *b = closure;
    attn__viz_buf_append(b, data, length);
    return b->failed ? CAIRO_STATUS_NO_MEMORY : CAIRO_STATUS_SUCCESS;
}

attn_status attn__viz_doc_begin(viz_doc *d, const char *path, double width, double height,
                          double pixel_scale) {
    *d = (viz_doc){.path = path, .format = attn__viz_format_of(path)};
    if (!(width > 0) || !(height > 0))
        return attn__fail(ATTN_ERR_INTERNAL, "'%s': empty picture (%g x %g)", path, width, height);
    switch (d->format) {
    case VIZ_FORMAT_PNG: {
        double s = pixel_scale > 0 ? pixel_scale : 2.0;
        if (pixel_scale <= 0 && fmax(width, height) * s > VIZ_MAX_PIXELS) s = 1.0;
        if (ceil(fmax(width, height) * s) > VIZ_CAIRO_LIMIT)
            return attn__fail(ATTN_ERR_UNSUPPORTED,
                             "'%s': the picture would be %.0f x %.0f pixels, over the PNG limit of "
                             "%.0f; draw fewer heads or use .svg or .pdf",
                             path, ceil(width * s), ceil(height * s), VIZ_CAIRO_LIMIT);
        d->pixel_scale = s;
        d->surface = cairo_image_surface_create(CAIRO_FORMAT_RGB24, (int)ceil(width * s),
                                                (int)ceil(height * s));
        break;
    }
    case VIZ_FORMAT_SVG:
        d->surface = cairo_svg_surface_create_for_stream(append_bytes, &d->bytes, width, height);
        break;
    case VIZ_FORMAT_PDF:
        d->surface = cairo_pdf_surface_create_for_stream(append_bytes, &d->bytes, width, height);
        break;
    default:
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT,
                         "'%s': unknown picture format; the name must end in .png, .svg or .pdf", path);
    }
    if (cairo_surface_status(d->surface) != CAIRO_STATUS_SUCCESS) {
        attn_status st = attn__fail(ATTN_ERR_OUT_OF_MEMORY, "'%s': cannot create the picture: %s", path,
                                   cairo_status_to_string(cairo_surface_status(d->surface)));
        attn__viz_doc_abort(d);
        return st;
    }
    d->cr = cairo_create(d->surface);
    if (d->format == VIZ_FORMAT_PNG) cairo_scale(d->cr, d->pixel_scale, d->pixel_scale);
    cairo_set_source_rgb(d->cr, 1, 1, 1);
    cairo_paint(d->cr);
    return ATTN_OK;
}

attn_status attn__viz_doc_next_page(viz_doc *d, double width, double height) {
    if (d->format != VIZ_FORMAT_PDF)
        return attn__fail(ATTN_ERR_INTERNAL, "'%s': only a PDF has pages", d->path);
    cairo_show_page(d->cr);
    cairo_pdf_surface_set_size(d->surface, width, height);
    cairo_set_source_rgb(d->cr, 1, 1, 1);
    cairo_paint(d->cr);
    return ATTN_OK;
}

attn_status attn__viz_doc_finish(viz_doc *d) {
    cairo_status_t cs = cairo_status(d->cr);
    if (cs == CAIRO_STATUS_SUCCESS && d->format == VIZ_FORMAT_PNG) {
        cairo_surface_flush(d->surface);
        cs = cairo_surface_write_to_png_stream(d->surface, append_bytes, &d->bytes);
    } else if (cs == CAIRO_STATUS_SUCCESS) {
        cairo_show_page(d->cr);
        cairo_surface_finish(d->surface);
        cs = cairo_surface_status(d->surface);
    }
    attn_status st = ATTN_OK;
    if (cs != CAIRO_STATUS_SUCCESS || d->bytes.failed)
        st = attn__fail(cs == CAIRO_STATUS_NO_MEMORY || d->bytes.failed ? ATTN_ERR_OUT_OF_MEMORY
                                                                       : ATTN_ERR_INTERNAL,
                       "'%s': drawing failed: %s", d->path,
                       d->bytes.failed ? "out of memory" : cairo_status_to_string(cs));
    else
        st = attn_output_write_file(d->path, d->bytes.data, d->bytes.len);
    attn__viz_doc_abort(d);
    return st;
}

void attn__viz_doc_abort(viz_doc *d) {
    if (d->cr) cairo_destroy(d->cr);
    if (d->surface) cairo_surface_destroy(d->surface);
    attn__viz_buf_free(&d->bytes);
    d->cr = NULL;
    d->surface = NULL;
}

cairo_t *attn__viz_measure_context(void) {
    cairo_surface_t *s = cairo_image_surface_create(CAIRO_FORMAT_RGB24, 1, 1);
    cairo_t *cr = cairo_create(s);
    cairo_surface_destroy(s); /* the context keeps its own reference */
    return cr;
}

void attn__viz_measure_release(cairo_t *cr) { cairo_destroy(cr); }

/* --------------------------------------------------------------- colour */

viz_rgb attn__viz_hex(unsigned rgb) {
    return (viz_rgb){((rgb >> 16) & 255) / 255.0, ((rgb >> 8) & 255) / 255.0, (rgb & 255) / 255.0};
}

void attn__viz_source(cairo_t *cr, viz_rgb c) { cairo_set_source_rgb(cr, c.r, c.g, c.b); }

viz_rgb attn__viz_scale_colour(double t) {
    static const unsigned blues[] = {0xf7fbff, 0xdeebf7, 0xc6dbef, 0x9ecae1, 0x6baed6,
                                     0x4292c6, 0x2171b5, 0x08519c, 0x08306b};
    const int n = (int)(sizeof blues / sizeof blues[0]);
    if (!(t > 0)) t = 0; /* NaN too */
    if (t > 1) t = 1;
    double x = t * (n - 1);
    int i = (int)x;
    if (i >= n - 1) return attn__viz_hex(blues[n - 1]);
    double f = x - i;
    viz_rgb a = attn__viz_hex(blues[i]), b = attn__viz_hex(blues[i + 1]);
    return (viz_rgb){a.r + f * (b.r - a.r), a.g + f * (b.g - a.g), a.b + f * (b.b - a.b)};
}

viz_rgb attn__viz_scale_ink(double t) { return t > 0.55 ? attn__viz_hex(0xffffff) : attn__viz_hex(VIZ_INK); }

/* ----------------------------------------------------------------- text */

void attn__viz_font(cairo_t *cr, double size, bool bold) {
    cairo_select_font_face(cr, VIZ_FONT, CAIRO_FONT_SLANT_NORMAL,
                           bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
    cairo_set_font_size(cr, size);
}

double attn__viz_text_width(cairo_t *cr, const char *text) {
    cairo_text_extents_t e;
    cairo_text_extents(cr, text, &e);
    return e.x_advance;
}

/* Baseline offset that puts the middle of Latin capitals and CJK glyphs on
 * the requested centre line. */
static double centre_to_baseline(cairo_t *cr) {
    cairo_matrix_t m;
    cairo_get_font_matrix(cr, &m);
    return 0.36 * m.yy;
}

void attn__viz_text(cairo_t *cr, double x, double y, const char *text, double align) {
    cairo_move_to(cr, x - align * attn__viz_text_width(cr, text), y + centre_to_baseline(cr));
    cairo_show_text(cr, text);
    cairo_new_path(cr);
}

void attn__viz_text_up(cairo_t *cr, double x, double y, const char *text, double align) {
    cairo_save(cr);
    cairo_translate(cr, x, y);
    cairo_rotate(cr, -VIZ_PI / 2);
    attn__viz_text(cr, 0, 0, text, align);
    cairo_restore(cr);
}

void attn__viz_text_fit(cairo_t *cr, const char *text, double max_width, char *out, size_t size) {
    static const char ellipsis[] = "…";
    snprintf(out, size, "%s", text);
    if (attn__viz_text_width(cr, out) <= max_width) return;
    size_t len = strlen(out);
    while (len > 0) {
        do len--; /* back to the start of the previous UTF-8 character */
        while (len > 0 && ((unsigned char)out[len] & 0xC0) == 0x80);
        if (len + sizeof ellipsis > size) continue;
        memcpy(out + len, ellipsis, sizeof ellipsis);
        if (attn__viz_text_width(cr, out) <= max_width) return;
    }
    snprintf(out, size, "%s", ellipsis);
}

/* --------------------------------------------------------------- shapes */

void attn__viz_fill_hidden(cairo_t *cr, double x, double y, double w, double h) {
    cairo_save(cr);
    cairo_rectangle(cr, x, y, w, h);
    attn__viz_source(cr, attn__viz_hex(VIZ_HIDDEN_BG));
    if (w < 4 || h < 4) {
        cairo_fill(cr);
        cairo_restore(cr);
        return;
    }
    cairo_fill_preserve(cr);
    cairo_clip(cr);
    double step = fmin(6.0, fmax(3.0, fmin(w, h) / 4));
    attn__viz_source(cr, attn__viz_hex(VIZ_HIDDEN_FG));
    cairo_set_line_width(cr, fmin(1.0, step / 4));
    for (double o = -h; o < w; o += step) {
        cairo_move_to(cr, x + o, y + h);
        cairo_line_to(cr, x + o + h, y);
    }
    cairo_stroke(cr);
    cairo_restore(cr);
}

void attn__viz_round_rect(cairo_t *cr, double x, double y, double w, double h, double r) {
    cairo_new_sub_path(cr);
    cairo_arc(cr, x + w - r, y + r, r, -VIZ_PI / 2, 0);
    cairo_arc(cr, x + w - r, y + h - r, r, 0, VIZ_PI / 2);
    cairo_arc(cr, x + r, y + h - r, r, VIZ_PI / 2, VIZ_PI);
    cairo_arc(cr, x + r, y + r, r, VIZ_PI, 3 * VIZ_PI / 2);
    cairo_close_path(cr);
}

void attn__viz_arrow_path(cairo_t *cr, const double *xy, int n, viz_rgb c, double width) {
    double head = 4 + 2.2 * width;
    double x1 = xy[2 * n - 4], y1 = xy[2 * n - 3], x2 = xy[2 * n - 2], y2 = xy[2 * n - 1];
    double len = hypot(x2 - x1, y2 - y1);
    if (len <= 0) return;
    double ux = (x2 - x1) / len, uy = (y2 - y1) / len;
    cairo_save(cr);
    attn__viz_source(cr, c);
    cairo_set_line_width(cr, width);
    cairo_set_line_join(cr, CAIRO_LINE_JOIN_ROUND);
    cairo_move_to(cr, xy[0], xy[1]);
    for (int i = 1; i < n - 1; i++) cairo_line_to(cr, xy[2 * i], xy[2 * i + 1]);
    cairo_line_to(cr, x2 - ux * head * 0.8, y2 - uy * head * 0.8); /* stop inside the head */
    cairo_stroke(cr);
    cairo_move_to(cr, x2, y2);
    cairo_line_to(cr, x2 - ux * head - uy * head * 0.5, y2 - uy * head + ux * head * 0.5);
    cairo_line_to(cr, x2 - ux * head + uy * head * 0.5, y2 - uy * head - ux * head * 0.5);
    cairo_close_path(cr);
    cairo_fill(cr);
    cairo_restore(cr);
}

void attn__viz_arrow(cairo_t *cr, double x1, double y1, double x2, double y2, viz_rgb c, double width) {
    const double xy[4] = {x1, y1, x2, y2};
    attn__viz_arrow_path(cr, xy, 2, c, width);
}

void attn__viz_number(char *out, size_t size, double x, int decimals, bool fractions) {
    if (x == 0) {
        snprintf(out, size, "0");
        return;
    }
    if (fractions && fabs(x) >= 1.0 / 24) {
        for (int den = 1; den <= 12; den++) {
            double num = round(x * den);
            if (fabs(x - num / den) < 1e-5 && fabs(num) < 1000) {
                if (den == 1) snprintf(out, size, "%.0f", num);
                else snprintf(out, size, "%.0f/%d", num, den);
                return;
            }
        }
    }
    snprintf(out, size, "%.*f", decimals, x);
}

/* ---------------------------------------------------------------- grids */

static double scale_position(double v, double vmin, double vmax) {
    return vmax > vmin ? (v - vmin) / (vmax - vmin) : 0.0;
}

/* Text of a cell's value: at most 4 characters wide for [0, 1] weights. */
static void cell_text(char *out, size_t size, double v, int mode) {
    if (mode == 2) {
        attn__viz_number(out, size, v, 2, true);
        return;
    }
    if (v == 0 || v == 1) {
        snprintf(out, size, "%.0f", v);
    } else if (fabs(v) < 0.005) {
        snprintf(out, size, v > 0 ? "<.01" : ">-.01");
    } else if (fabs(v) < 10) {
        snprintf(out, size, "%.2f", v);
    } else {
        snprintf(out, size, "%.3g", v);
    }
}

static void draw_grid_image(cairo_t *cr, const viz_grid *g) {
    cairo_surface_t *img = cairo_image_surface_create(CAIRO_FORMAT_RGB24, (int)g->cols, (int)g->rows);
    if (cairo_surface_status(img) != CAIRO_STATUS_SUCCESS) {
        cairo_surface_destroy(img);
        return; /* the document's status reports nothing: draw an empty frame */
    }
    cairo_surface_flush(img);
    unsigned char *px = cairo_image_surface_get_data(img);
    int stride = cairo_image_surface_get_stride(img);
    viz_rgb hidden = attn__viz_hex(0xc8c8c8);
    for (int64_t i = 0; i < g->rows; i++) {
        uint32_t *row = (uint32_t *)(void *)(px + i * stride);
        for (int64_t j = 0; j < g->cols; j++) {
            int64_t idx = i * g->cols + j;
            viz_rgb c = viz_hidden(g->visible, g->values, idx)
                            ? hidden
                            : attn__viz_scale_colour(scale_position(g->values[idx], g->vmin, g->vmax));
            row[j] = (uint32_t)lround(c.r * 255) << 16 | (uint32_t)lround(c.g * 255) << 8 |
                     (uint32_t)lround(c.b * 255);
        }
    }
    cairo_surface_mark_dirty(img);
    cairo_save(cr);
    cairo_translate(cr, g->x, g->y);
    cairo_scale(cr, g->cell, g->cell);
    cairo_set_source_surface(cr, img, 0, 0);
    cairo_pattern_set_filter(cairo_get_source(cr), CAIRO_FILTER_NEAREST);
    cairo_rectangle(cr, 0, 0, (double)g->cols, (double)g->rows);
    cairo_fill(cr);
    cairo_restore(cr);
    cairo_surface_destroy(img);
}

void attn__viz_draw_grid(cairo_t *cr, const viz_grid *g) {
    const double c = g->cell;
    if (c < 4 || g->rows * g->cols > 128 * 128) {
        draw_grid_image(cr, g);
    } else {
        char text[32];
        attn__viz_font(cr, g->font_size, false);
        for (int64_t i = 0; i < g->rows; i++)
            for (int64_t j = 0; j < g->cols; j++) {
                int64_t idx = i * g->cols + j;
                double x = g->x + j * c, y = g->y + i * c;
                if (viz_hidden(g->visible, g->values, idx)) {
                    attn__viz_fill_hidden(cr, x, y, c, c);
                    continue;
                }
                double t = scale_position(g->values[idx], g->vmin, g->vmax);
                attn__viz_source(cr, attn__viz_scale_colour(t));
                cairo_rectangle(cr, x, y, c, c);
                cairo_fill(cr);
                if (g->text) {
                    cell_text(text, sizeof text, g->values[idx], g->text);
                    attn__viz_source(cr, attn__viz_scale_ink(t));
                    attn__viz_text(cr, x + c / 2, y + c / 2, text, 0.5);
                }
            }
        if (c >= 8) { /* thin white seams keep neighbouring cells apart */
            cairo_set_source_rgb(cr, 1, 1, 1);
            cairo_set_line_width(cr, fmin(1.5, c / 16));
            for (int64_t i = 1; i < g->rows; i++) {
                cairo_move_to(cr, g->x, g->y + i * c);
                cairo_line_to(cr, g->x + g->cols * c, g->y + i * c);
            }
            for (int64_t j = 1; j < g->cols; j++) {
                cairo_move_to(cr, g->x + j * c, g->y);
                cairo_line_to(cr, g->x + j * c, g->y + g->rows * c);
            }
            cairo_stroke(cr);
        }
    }
    attn__viz_source(cr, attn__viz_hex(VIZ_MUTED));
    cairo_set_line_width(cr, 0.8);
    cairo_rectangle(cr, g->x, g->y, g->cols * c, g->rows * c);
    cairo_stroke(cr);
}

void attn__viz_draw_legend(cairo_t *cr, double x, double y, double w, double h, double vmin, double vmax,
                     const char *heading, const char *hidden_label, bool show_hidden) {
    attn__viz_font(cr, 10, true);
    attn__viz_source(cr, attn__viz_hex(VIZ_INK));
    attn__viz_text(cr, x, y - 12, heading, 0);
    const int steps = 64; /* top = vmax, bottom = vmin */
    for (int s = 0; s < steps; s++) {
        attn__viz_source(cr, attn__viz_scale_colour(1.0 - (s + 0.5) / steps));
        cairo_rectangle(cr, x, y + h * s / steps, w, h / steps + 0.4);
        cairo_fill(cr);
    }
    attn__viz_source(cr, attn__viz_hex(VIZ_MUTED));
    cairo_set_line_width(cr, 0.8);
    cairo_rectangle(cr, x, y, w, h);
    cairo_stroke(cr);
    attn__viz_font(cr, 9, false);
    char text[32];
    for (int t = 0; t <= 4; t++) {
        double v = vmin + (vmax - vmin) * t / 4, ty = y + h * (1 - t / 4.0);
        cairo_move_to(cr, x + w, ty);
        cairo_line_to(cr, x + w + 3, ty);
        cairo_stroke(cr);
        snprintf(text, sizeof text, "%.3g", v);
        attn__viz_text(cr, x + w + 5, ty, text, 0);
    }
    if (show_hidden) {
        attn__viz_fill_hidden(cr, x, y + h + 14, w, w);
        attn__viz_source(cr, attn__viz_hex(VIZ_MUTED));
        cairo_rectangle(cr, x, y + h + 14, w, w);
        cairo_stroke(cr);
        attn__viz_source(cr, attn__viz_hex(VIZ_INK));
        attn__viz_text(cr, x + w + 5, y + h + 14 + w / 2, hidden_label, 0);
    }
}
