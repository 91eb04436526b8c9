/*
 * attn_viz.h — pictures of attention (libattn_viz): heat maps as PNG, SVG
 * or PDF, the chapter's three figures, and a self-contained HTML report
 * (docs/pictures.md).  Link with libattn_viz (pkg-config attn-viz, CMake
 * attn::viz); it depends on libattn and, for the pictures, cairo.
 *
 * Shape legend: weights, visible [H, L, S] (heads, queries, keys), one batch.
 */
#ifndef ATTN_VIZ_H
#define ATTN_VIZ_H

#include "attn.h"
#include "attn_interp.h" /* attn_paths, for the report's path table */

#ifdef __cplusplus
extern "C" {
#endif

/* Pictures need cairo at build time (PNG, SVG, PDF); without it these three
 * functions return ATTN_ERR_UNSUPPORTED and attn_pictures_available() is 0.
 * The HTML report below needs nothing and always works.  Text is drawn with
 * the "Noto Sans CJK SC" font (Debian: fonts-noto-cjk), so labels such as
 * 我 吃 了 render; another font is substituted when it is missing. */
ATTN_API int attn_pictures_available(void); /* 1 when built with cairo */

/* Hands back what the drawing library keeps for the life of the process
 * (cairo's font caches and the fontconfig patterns they hold), so that a
 * leak checker at exit (LeakSanitizer) reports none of it.  For the end of
 * a program: no other thread may be drawing; a later picture fills the
 * caches again.  Without cairo it does nothing. */
ATTN_API void attn_pictures_release(void);

/* Options of a heat map.  ATTN_HEATMAP_OPTIONS_INIT means: labels 0, 1, 2 ..., every
 * cell visible, colour scale [0, 1], values printed when a map has at most
 * 16 x 16 cells, automatic cell size and panel grid. */
typedef struct attn_heatmap_options {
    size_t struct_size;              /* sizeof: set by ATTN_HEATMAP_OPTIONS_INIT     */
    const char *const *query_labels; /* [L] UTF-8 row labels, or NULL: 0 .. L-1      */
    const char *const *key_labels;   /* [S] column labels, or NULL: query_labels
                                        when S == L, else 0 .. S-1                   */
    const uint8_t *visible;          /* [H, L, S] nonzero = the query may read the
                                        key, or NULL: all visible.  Hidden cells
                                        (and cells holding -inf, as in the tables
                                        of attn_sdpa_scores) are drawn hatched grey,
                                        never as the colour of 0                     */
    const int64_t *head_ids;         /* [H] numbers for the panel titles ("head 3"),
                                        or NULL: 0 .. H-1                            */
    const char *title;               /* a line above the panels, or NULL             */
    const char *lang;                /* "en" (default) or "zh": axis captions        */
    float vmin, vmax;                /* colour scale; vmin == vmax: [0, 1] when every
                                        value lies in it, else the data's range      */
    int values;                      /* print each cell's value: 0 = when the map is
                                        at most 16 x 16, 1 = always, -1 = never      */
    int columns;                     /* PNG/SVG: panels per row, 0 = automatic       */
    double cell;                     /* cell side in points, 0 = automatic           */
    double pixel_scale;              /* PNG pixels per point, 0 = 2 (1 for pictures
                                        over 8000 pixels on a side)                  */
    /* Fields below were added later; a caller built against an older header
     * passes a smaller struct_size and gets their defaults. */
    const char *const *panel_titles; /* [H] one title per panel, e.g. "layer 3 · head
                                        5" (a layer x head grid), or NULL: "head N" */
    double vmax_quantile;            /* in (0, 1]: the colour scale runs from 0 to
                                        this quantile of the visible weights of all
                                        panels (0.99 for `attn map --vmax auto`);
                                        heavier cells take the darkest colour and the
                                        colour bar states the rule and the value.
                                        0 = off: vmin, vmax as above                 */
} attn_heatmap_options;

#define ATTN_HEATMAP_OPTIONS_INIT {.struct_size = sizeof(attn_heatmap_options)}

/* Draws attention maps, one panel per head: rows are queries, columns are the
 * keys they read (as in the chapter's Figure 3), token labels on both axes,
 * a colour-scale legend.  A single query row (len_q = 1, one decode step)
 * is drawn as a strip of tall cells, wrapped every 64 keys, with every key's
 * label, so that 512 keys stay readable.  The format follows path's extension: .png and .svg
 * put the heads side by side in a grid, .pdf puts one head on each page.
 * Written atomically (a temporary file renamed over path); messages name path.
 *   weights: [H, L, S] contiguous (one batch of attn_sdpa_forward's weights);
 *   NaN and +inf are refused. */
ATTN_API attn_status attn_heatmap_write(const char *path, const float *weights, int64_t heads,
                               int64_t len_q, int64_t len_kv, const attn_heatmap_options *opt);

/* The chapter's three figures, drawn from numbers the library computes
 * (attn_linear_forward, attn_sdpa_scores, attn_sdpa_forward):
 *   1  X splits into Q, K, V (3x2 each); Q and K meet in the 3x3 match table,
 *      V takes its own path to the weighted sum; q3's weights aligned with
 *      the values they multiply.
 *   2  the four interventions on position 3 side by side: original, K only,
 *      V only, both ([1.5, 0.75], [1.2, 0.8], [1.5, 1.0], [1.2, 1.2]).
 *   3  the causal mask: rows are queries, columns the positions read; row 2
 *      renormalised to 1/3, 2/3, 0; hidden cells drawn distinctly.
 * Format by extension as above (.png, .svg, .pdf); lang "en" or "zh" (NULL = en). */
ATTN_API attn_status attn_chapter_figure_write(const char *path, int figure, const char *lang);

/* A line plot of one series y[0..n) (and opt->y2, a second) against x = 0 .. n-1 (points joined,
 * each marked), with a y axis of ticks and a grid: `attn demo --model`
 * draws the cosine of the two 苹果 vectors layer by layer with it.
 * ATTN_LINEPLOT_OPTIONS_INIT means: no title or axis labels, the y range
 * from the data (rounded out to tenths).  Format by extension as
 * above (.png, .svg, .pdf); written atomically; NaN and inf are refused;
 * n in [1, 10000]. */
typedef struct attn_lineplot_options {
    size_t struct_size;     /* sizeof: set by ATTN_LINEPLOT_OPTIONS_INIT      */
    const char *title;      /* UTF-8 or NULL                                  */
    const char *x_label, *y_label;
    double ymin, ymax;      /* ymin == ymax: from the data                    */
    /* Added later (a smaller struct_size gets these defaults): a second
     * series of the same n points, drawn dashed in orange (`attn demo
     * --model`'s same-sense control beside the two senses), and the two
     * series' names for a legend (drawn when either is set). */
    const double *y2;       /* [n] finite, or NULL: one series                */
    const char *name, *name2; /* UTF-8 or NULL                                */
} attn_lineplot_options;

#define ATTN_LINEPLOT_OPTIONS_INIT {.struct_size = sizeof(attn_lineplot_options)}

ATTN_API attn_status attn_lineplot_write(const char *path, const double *y, int64_t n,
                                         const attn_lineplot_options *opt);

/* A self-contained HTML report of attention maps: one file, no network
 * access, no external scripts or fonts.  The data are embedded as JSON (the
 * weights as base64 little-endian float32, so hovering shows each weight
 * exactly; where visible hides cells only the visible ones are stored, which
 * halves a causal map); heat maps are drawn on <canvas>, so 512 tokens x 16
 * heads, or 24 layers x 14 heads x 256 tokens, stay usable.  The page holds a heat map per head (hover: the token pair and the
 * exact weight), a bertviz-style token view (lines from each query to the
 * keys it reads, thickness and opacity = weight; hover or click a token to
 * focus it), and, when paths is set, the path-decomposition table of the
 * chapter's Figure 2 (base, K only, V only, both, interaction) per head, and
 * for multi-head attention also after W_O, with the heads ranked by how far
 * each path moved their output at one position; a model's run has one such
 * table per layer (layer_paths).  Opening the file with #selftest
 * appended makes the page switch layer and head through its selectors, hover
 * cells and report what it showed in <pre id="selftest"> (the tests drive it
 * with headless Chromium; docs/pictures.md has the syntax). */
/* A panel of the report, under the maps: a grid of values with labels (a
 * model's attention flow, logit lens, logit attribution), drawn as
 *   ATTN_REPORT_PANEL_HEAT       blues from 0 to the panel's largest value
 *   ATTN_REPORT_PANEL_DIVERGING  blue below 0, red above, symmetric about 0
 *                                (the largest |value| is the full colour)
 *   ATTN_REPORT_PANEL_BARS       each row a row of bars over the columns,
 *                                scaled to that row's largest |value|
 *                                (negative bars hang below the axis)
 * Hovering a cell shows its row and column labels, its text and its exact
 * value.  A NaN value is an empty cell (no colour, no bar). */
typedef enum attn_report_panel_style {
    ATTN_REPORT_PANEL_HEAT = 0,
    ATTN_REPORT_PANEL_DIVERGING = 1,
    ATTN_REPORT_PANEL_BARS = 2
} attn_report_panel_style;

typedef struct attn_report_panel {
    const char *title;              /* the section's heading (UTF-8), not NULL     */
    const char *note;               /* a paragraph under it, or NULL                */
    attn_report_panel_style style;
    int64_t rows, cols;             /* >= 1 each, rows x cols <= 1000000            */
    const double *values;           /* [rows, cols]: finite, or NaN for no value    */
    const char *const *row_labels;  /* [rows], or NULL: 0 .. rows-1                 */
    const char *const *col_labels;  /* [cols], or NULL: 0 .. cols-1                 */
    const char *const *cell_text;   /* [rows, cols] text written in each cell (a
                                       token), or NULL                              */
} attn_report_panel;

typedef struct attn_report {
    size_t struct_size;              /* sizeof(attn_report): set by ATTN_REPORT_INIT */
    const char *title;               /* or NULL                                     */
    const char *subtitle;            /* e.g. the command line, or NULL              */
    int64_t heads, len_q, len_kv;    /* H, L, S of the maps below                   */
    const float *weights;            /* [H, L, S]                                   */
    const uint8_t *visible;          /* [H, L, S] nonzero = visible, or NULL        */
    const int64_t *head_ids;         /* [H] the heads' numbers, or NULL: 0 .. H-1   */
    const char *const *query_labels; /* [L] UTF-8, or NULL                          */
    const char *const *key_labels;   /* [S], or NULL (query_labels when S == L)     */
    const attn_paths *paths;         /* from attn_sdpa_paths / attn_mha_paths, or
                                        NULL: no path table.  Its query heads are
                                        indexed by head_ids (or 0 .. H-1)           */
    int64_t paths_batch;             /* the batch of paths shown                    */
    /* Fields below were added later; a caller built against an older header
     * passes a smaller struct_size and gets their defaults. */
    int64_t layers;                  /* > 1: weights and visible hold [layers, H, L, S]
                                        (a model's run; the page gets a layer
                                        selector); 0 or 1: one layer [H, L, S].
                                        paths need one layer (layer_paths: many)    */
    const int64_t *layer_ids;        /* [layers] the layers' numbers, or NULL        */
    /* A line plot under the maps, e.g. the cosine of the chapter's two 苹果
     * layer by layer (`attn report --model --compare-text`); hovering a
     * point shows its exact value.  line_len 0: none. */
    const double *line;              /* [line_len] finite values                    */
    int64_t line_len;                /* 0 .. 10000                                   */
    const char *const *line_labels;  /* [line_len] x labels ("embed", "0", ...) or NULL */
    const char *line_title;          /* or NULL                                     */
    /* A model's run with a changed input (`attn report --model --text
     * --source-text`): a path table per layer, the page's layer selector
     * switching it.  Each entry as paths above (its heads indexed by
     * head_ids); the writer reads only run[c].z, run[ATTN_PATH_K_ONLY]
     * .pattern, interaction_z and, for a module, attn_out and
     * interaction_out, so the other buffers may have been freed (NULL). */
    const attn_paths *layer_paths;   /* [max(layers, 1)], or NULL; paths must then be NULL */
    /* The query position whose heads the page ranks by how far each path
     * moved their z (the L2 norm of K only - base, V only - base), for
     * paths or layer_paths: 0 .. len_q - 1, or negative from the end (-1:
     * the last).  The page's own selector changes it. */
    int64_t paths_position;
    /* A second series of the line plot, line_len values drawn dashed
     * beside line (`attn report --model --compare-text --control-text`:
     * the same-sense control's cosine), and the two series' names for the
     * legend; NULL: none. */
    const double *line2;             /* [line_len] finite values, or NULL           */
    const char *line_name, *line2_name;
    /* Panels under the maps, in order (`attn report --model --flow
     * --logit-lens --logit-attribution --attribute`); n_panels 0: none. */
    const attn_report_panel *panels;   /* [n_panels]                              */
    int64_t n_panels;                  /* 0 .. 64                                   */
} attn_report;

#define ATTN_REPORT_INIT {.struct_size = sizeof(attn_report)}

ATTN_API attn_status attn_report_write_html(const char *path, const attn_report *report);

#ifdef __cplusplus
}
#endif

#endif /* ATTN_VIZ_H */
