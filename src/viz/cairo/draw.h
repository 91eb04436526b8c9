/*
 * draw.h — the small drawing vocabulary the heat maps and the chapter's
 * figures share, on top of cairo: documents that render to PNG, SVG or PDF
 * in memory and land on disk atomically, one colour scale, text placed by
 * its centre line, hatched "hidden" cells, arrows and boxes.
 *
 * Units are points (1/72 inch); a PNG has pixel_scale pixels per point.
 */
#ifndef ATTN_VIZ_DRAW_H
#define ATTN_VIZ_DRAW_H

#include "viz/viz.h"

#include <cairo.h>

#define VIZ_PI 3.14159265358979323846

/* ------------------------------------------------------------ documents */

typedef struct viz_doc {
    viz_format format;
    const char *path;
    double pixel_scale;
    cairo_surface_t *surface;
    cairo_t *cr;
    viz_buf bytes;
} viz_doc;

/* Starts a document of width x height points for path (format by extension).
 * PNG: pixel_scale pixels per point (0 = 2, or 1 when that would exceed 8000
 * pixels on a side); the page starts white. */
attn_status attn__viz_doc_begin(viz_doc *d, const char *path, double width, double height,
                          double pixel_scale);
/* PDF only: ends the current page and starts one of the given size. */
attn_status attn__viz_doc_next_page(viz_doc *d, double width, double height);
/* Finishes the document and writes it atomically to d->path; always releases d. */
attn_status attn__viz_doc_finish(viz_doc *d);
/* Releases d without writing anything (safe on a zeroed doc). */
void attn__viz_doc_abort(viz_doc *d);

/* A context on a 1x1 surface for measuring text before a layout is fixed. */
cairo_t *attn__viz_measure_context(void);
void attn__viz_measure_release(cairo_t *cr);

/* --------------------------------------------------------------- colour */

typedef struct viz_rgb {
    double r, g, b;
} viz_rgb;

viz_rgb attn__viz_hex(unsigned rgb);
void attn__viz_source(cairo_t *cr, viz_rgb c);
/* The sequential colour scale of every map: t in [0, 1] from near-white to
 * dark blue (ColorBrewer "Blues"); t is clamped. */
viz_rgb attn__viz_scale_colour(double t);
/* Text colour that stays readable on attn__viz_scale_colour(t). */
viz_rgb attn__viz_scale_ink(double t);

#define VIZ_INK 0x1f2328u       /* body text          */
#define VIZ_MUTED 0x57606au     /* captions, shapes   */
#define VIZ_LINE 0xd0d7deu      /* cell borders       */
#define VIZ_HIDDEN_BG 0xe4e4e4u /* hidden cells       */
#define VIZ_HIDDEN_FG 0xa8a8a8u /* their hatching     */

/* ----------------------------------------------------------------- text */

/* Selects the CJK-capable sans font ("Noto Sans CJK SC") at size points. */
void attn__viz_font(cairo_t *cr, double size, bool bold);
double attn__viz_text_width(cairo_t *cr, const char *text);
/* Draws text whose vertical centre is y; align 0 = starts at x, 0.5 =
 * centred on x, 1 = ends at x. */
void attn__viz_text(cairo_t *cr, double x, double y, const char *text, double align);
/* The same, turned 90 degrees counter-clockwise (reads bottom to top) about
 * (x, y); align is along the text direction. */
void attn__viz_text_up(cairo_t *cr, double x, double y, const char *text, double align);
/* Copies text into out (size bytes), cut on a UTF-8 boundary and ended with
 * "…" so that it is at most max_width wide in the current font. */
void attn__viz_text_fit(cairo_t *cr, const char *text, double max_width, char *out, size_t size);

/* --------------------------------------------------------------- shapes */

/* A rectangle drawn as hidden: light grey with diagonal hatching (plain grey
 * when the rectangle is under 4 points on a side). */
void attn__viz_fill_hidden(cairo_t *cr, double x, double y, double w, double h);
void attn__viz_round_rect(cairo_t *cr, double x, double y, double w, double h, double r);
/* A line from (x1, y1) to (x2, y2) ending in a filled arrow head. */
void attn__viz_arrow(cairo_t *cr, double x1, double y1, double x2, double y2, viz_rgb c, double width);
/* An arrow along a polyline of n points (the head at the last point). */
void attn__viz_arrow_path(cairo_t *cr, const double *xy, int n, viz_rgb c, double width);

/* A table of coloured cells: the body of every heat map and of the figures'
 * match tables.  Small grids are drawn cell by cell (vector output, values
 * printed); large ones as one image with a pixel per cell, scaled up without
 * smoothing, so a 512 x 512 map stays small in SVG and PDF. */
typedef struct viz_grid {
    double x, y, cell;       /* top-left corner, cell side                   */
    int64_t rows, cols;
    const float *values;     /* [rows, cols]                                 */
    const uint8_t *visible;  /* [rows, cols] nonzero = visible, or NULL      */
    double vmin, vmax;       /* the colour scale                             */
    int text;                /* 0 none, 1 decimals, 2 small fractions        */
    double font_size;        /* of the printed values                        */
} viz_grid;
void attn__viz_draw_grid(cairo_t *cr, const viz_grid *g);

/* A vertical colour bar for [vmin, vmax] at (x, y), w x h, with ticks, a
 * heading above it and, when show_hidden, a hatched "hidden" swatch below. */
void attn__viz_draw_legend(cairo_t *cr, double x, double y, double w, double h, double vmin, double vmax,
                     const char *heading, const char *hidden_label, bool show_hidden);
/* The narrowest width attn__viz_draw_legend needs, bar and tick labels included. */
#define VIZ_LEGEND_WIDTH 92.0

/* Compact text of a number: "0", "1", a small fraction "2/5" when x is one
 * (within 1e-5) and fractions is set, else %.*f with the given decimals. */
void attn__viz_number(char *out, size_t size, double x, int decimals, bool fractions);

#endif /* ATTN_VIZ_DRAW_H */
