/*
 * figures.c — attn_chapter_figure_write: the chapter's three figures, drawn
 * from numbers the library computes.
 *
 * The numbers are the chapter's worked example as attn_chapter_compute
 * fills it (attn_chapter.h); nothing of the example is typed in here.  The
 * drawing code itself only takes exp of the library's scores (to show the
 * chapter's 1, 2, 0), sums the unmasked weights (the wrong way's 3/5) and
 * multiplies each weight by its value (Figure 1's term-by-term row).
 *
 * Shape legend: X, Q, K, V, O [3, 2]   W [2, 2]   scores, weights [3, 3]
 *               (rows: queries, columns: positions read)
 */
#include "viz/cairo/draw.h"

#include "attn_chapter.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

enum { POS = ATTN_CHAPTER_POSITIONS, WIDTH = ATTN_CHAPTER_WIDTH };

/* ------------------------------------------------------------------ text */

typedef struct {
    const char *fig1_title, *fig2_title, *fig3_title;
    /* Figure 1 */
    const char *shape, *match1, *match2, *weights, *read, *sum1, *sum2, *v_path, *row_note;
    const char *row_heading, *weight_of, *value, *product, *position, *fig1_note;
    /* Figure 2 */
    const char *case_name[4], *keys_original, *keys_changed, *values_original, *values_changed;
    const char *weights_q3, *values_label, *same_weights, *new_weights, *fig2_note;
    /* Figure 3 */
    const char *visible_title, *queries, *positions_read, *row2_title;
    const char *step_scaled, *step_masked, *step_exp, *step_weights, *wrong_way, *causal_title, *o2;
} figure_text;

static const figure_text text_en = {
    .fig1_title = "Figure 1  X splits three ways into Q, K and V: Q and K decide the weights, V supplies the content",
    .fig2_title = "Figure 2  q_3 and every parameter fixed: swap in the changed key, the changed value, or both",
    .fig3_title = "Figure 3  The causal mask: hide first, then normalise",
    .shape = "%d×%d",
    .match1 = "match  q·k ÷ √d",
    .match2 = "softmax per row",
    .weights = "weights",
    .read = "positions read →",
    .sum1 = "weighted sum",
    .sum2 = "Σ weight × value",
    .v_path = "V takes its own path to the sum",
    .row_note = "row q_3, unfolded below",
    .row_heading = "Row q_3 in full: each weight multiplies the value of the position it reads",
    .weight_of = "weight",
    .value = "value",
    .product = "product",
    .position = "position %d",
    .fig1_note = "Only row q_3 is unfolded; no mask yet, and no position information or output projection.",
    .case_name = {"original", "K only", "V only", "both"},
    .keys_original = "keys: original",
    .keys_changed = "keys: k_2 → [0, 2c]",
    .values_original = "values: original",
    .values_changed = "values: v_2 → [0, 2]",
    .weights_q3 = "weights of q_3 (positions 1, 2, 3)",
    .values_label = "values read",
    .same_weights = "weights as in the original",
    .new_weights = "weights moved",
    .fig2_note = "\"original\" and \"V only\" share their weights yet their outputs differ: weight and content "
                 "are two causal paths,\nso looking only at the weights cannot explain a change in the output.",
    .visible_title = "visible to each query",
    .queries = "query position ↓",
    .positions_read = "position read →",
    .row2_title = "Position 2, step by step",
    .step_scaled = "scaled scores q_2·k ÷ √2",
    .step_masked = "hide position 3 (−∞)",
    .step_exp = "exp",
    .step_weights = "weights = exp ÷ sum",
    .wrong_way = "wrong way: keep %s, %s and strike the third → sum %s, not 1",
    .causal_title = "causal weights",
    .o2 = "o_2 = %s·v_1 + %s·v_2 = [%s, %s]",
};

static const figure_text text_zh = {
    .fig1_title = "图1｜X分三路得到Q、K、V；Q、K决定读取权重，V提供混合内容",
    .fig2_title = "图2｜固定q_3与全部参数，对照原例、只换K、只换V、两路都换",
    .fig3_title = "图3｜因果mask：先排除，再归一化",
    .shape = "%d×%d",
    .match1 = "匹配  q·k ÷ √d",
    .match2 = "每行softmax",
    .weights = "权重",
    .read = "被读取位置 →",
    .sum1 = "加权求和",
    .sum2 = "Σ 权重 × 值",
    .v_path = "V沿另一条路到加权求和",
    .row_note = "q_3这一行，下方展开",
    .row_heading = "q_3这一行逐项展开：每个权重乘以它读取的那个位置的值",
    .weight_of = "权重",
    .value = "值",
    .product = "乘积",
    .position = "位置%d",
    .fig1_note = "数值展开只追踪q_3这一行，暂不加mask，省略位置机制与输出投影。",
    .case_name = {"原例", "只换K", "只换V", "两路都换"},
    .keys_original = "键：原样",
    .keys_changed = "键：k_2 → [0, 2c]",
    .values_original = "值：原样",
    .values_changed = "值：v_2 → [0, 2]",
    .weights_q3 = "q_3的权重（位置1、2、3）",
    .values_label = "读取的值",
    .same_weights = "权重与原例相同",
    .new_weights = "权重变了",
    .fig2_note = "“原例”与“只换V”权重相同，输出却不同：权重与内容是不同的因果路径，\n"
                 "不能只看权重就解释输出改动。",
    .visible_title = "每个查询可见的位置",
    .queries = "查询位置 ↓",
    .positions_read = "被读取位置 →",
    .row2_title = "位置2，一步一步",
    .step_scaled = "缩放分数 q_2·k ÷ √2",
    .step_masked = "排除位置3（−∞）",
    .step_exp = "指数",
    .step_weights = "权重 = 指数 ÷ 总和",
    .wrong_way = "错误做法：保留%s、%s，只划掉第三项 → 总和%s，不是1",
    .causal_title = "因果mask下的权重",
    .o2 = "o_2 = %s·v_1 + %s·v_2 = [%s, %s]",
};

/* ------------------------------------------------------ drawing helpers */

#define C_X 0x57606au
#define C_Q 0x2f6fb0u
#define C_K 0xd9822bu
#define C_V 0x2e9d5bu
#define C_O 0x7b4fb3u
#define C_WRONG 0xc0392bu

static viz_rgb tint(unsigned rgb, double amount) {
    viz_rgb c = attn__viz_hex(rgb);
    return (viz_rgb){1 - amount * (1 - c.r), 1 - amount * (1 - c.g), 1 - amount * (1 - c.b)};
}

/* "1", "0.98", "1.5", "0.75": at most two decimals, no trailing zeros. */
static void short_number(char *out, size_t size, double x) {
    snprintf(out, size, "%.2f", x);
    char *dot = strchr(out, '.');
    if (!dot) return;
    char *end = out + strlen(out) - 1;
    while (end > dot && *end == '0') *end-- = 0;
    if (end == dot) *end = 0;
    if (strcmp(out, "-0") == 0) snprintf(out, size, "0");
}

/* A scaled score as a multiple of ln2 when it is one: "0", "ln2", "2ln2". */
static void ln2_number(char *out, size_t size, double x) {
    if (isinf(x)) {
        snprintf(out, size, x < 0 ? "−∞" : "∞");
        return;
    }
    double k = x / log(2.0);
    if (fabs(k - round(k)) < 1e-4) {
        long m = lround(k);
        if (m == 0) snprintf(out, size, "0");
        else if (m == 1) snprintf(out, size, "ln2");
        else snprintf(out, size, "%ldln2", m);
        return;
    }
    short_number(out, size, x);
}

/* Text with subscripts: "W_Q" draws Q lowered and smaller after W. */
static double rich(cairo_t *cr, double x, double y, const char *text, double align, bool draw) {
    cairo_matrix_t m;
    cairo_get_font_matrix(cr, &m);
    const double size = m.yy;
    double width = 0;
    for (int pass = 0; pass < (draw ? 2 : 1); pass++) {
        double pen = x - (pass ? align * width : 0);
        const char *p = text;
        char piece[256];
        while (*p) {
            bool sub = *p == '_' && p[1];
            if (sub) p++;
            size_t len = 0;
            if (sub) { /* one UTF-8 character */
                len = 1;
                while (((unsigned char)p[len] & 0xC0) == 0x80) len++;
            } else {
                while (p[len] && p[len] != '_') len++;
            }
            if (len >= sizeof piece) len = sizeof piece - 1;
            memcpy(piece, p, len);
            piece[len] = 0;
            p += len;
            cairo_set_font_size(cr, sub ? size * 0.72 : size);
            double w = attn__viz_text_width(cr, piece);
            if (pass) attn__viz_text(cr, pen, y + (sub ? size * 0.22 : 0), piece, 0);
            pen += w;
            if (!pass) width += w;
        }
        cairo_set_font_size(cr, size);
    }
    return width;
}

static void label(cairo_t *cr, double x, double y, const char *text, double size, bool bold,
                  unsigned colour, double align) {
    attn__viz_font(cr, size, bold);
    attn__viz_source(cr, attn__viz_hex(colour));
    rich(cr, x, y, text, align, true);
}

/* A matrix of numbers in cells tinted by its role colour. */
typedef enum {
    NUM_SHORT,    /* 0.98, 1.5                                   */
    NUM_FRACTION, /* 2/5                                          */
    NUM_LN2,      /* ln2, 2ln2                                    */
    NUM_WEIGHT    /* fractions on the heat-map colour of weights  */
} number_style;

static void matrix(cairo_t *cr, double x, double y, int rows, int cols, const float *values,
                   double cw, double chh, unsigned colour, number_style style) {
    char text[32];
    attn__viz_font(cr, fmin(12.0, chh * 0.45), false);
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++) {
            double cx = x + j * cw, cy = y + i * chh, v = values[i * cols + j];
            if (isinf(v) && v < 0) {
                attn__viz_fill_hidden(cr, cx, cy, cw, chh);
            } else {
                attn__viz_source(cr, style == NUM_WEIGHT ? attn__viz_scale_colour(v) : tint(colour, 0.13));
                cairo_rectangle(cr, cx, cy, cw, chh);
                cairo_fill(cr);
            }
            if (style == NUM_FRACTION || style == NUM_WEIGHT) attn__viz_number(text, sizeof text, v, 2, true);
            else if (style == NUM_LN2) ln2_number(text, sizeof text, v);
            else short_number(text, sizeof text, v);
            attn__viz_source(cr, style == NUM_WEIGHT ? attn__viz_scale_ink(v) : attn__viz_hex(VIZ_INK));
            attn__viz_text(cr, cx + cw / 2, cy + chh / 2, text, 0.5);
        }
    cairo_set_line_width(cr, 0.6);
    attn__viz_source(cr, tint(colour, 0.45));
    for (int i = 1; i < rows; i++) {
        cairo_move_to(cr, x, y + i * chh);
        cairo_line_to(cr, x + cols * cw, y + i * chh);
    }
    for (int j = 1; j < cols; j++) {
        cairo_move_to(cr, x + j * cw, y);
        cairo_line_to(cr, x + j * cw, y + rows * chh);
    }
    cairo_stroke(cr);
    cairo_set_line_width(cr, 1.4);
    attn__viz_source(cr, attn__viz_hex(colour));
    cairo_rectangle(cr, x, y, cols * cw, rows * chh);
    cairo_stroke(cr);
}

/* A matrix with its name above and its shape below. */
static void named_matrix(cairo_t *cr, double x, double y, const char *name, const figure_text *t,
                         int rows, int cols, const float *values, double cell, unsigned colour,
                         number_style style) {
    char shape[32];
    matrix(cr, x, y, rows, cols, values, cell, cell * 0.8, colour, style);
    label(cr, x + cols * cell / 2, y - 13, name, 15, true, colour, 0.5);
    snprintf(shape, sizeof shape, t->shape, rows, cols);
    label(cr, x + cols * cell / 2, y + rows * cell * 0.8 + 12, shape, 10, false, VIZ_MUTED, 0.5);
}

/* A rounded box with one or two centred lines. */
static void box(cairo_t *cr, double x, double y, double w, double h, unsigned colour,
                const char *line1, const char *line2) {
    attn__viz_round_rect(cr, x, y, w, h, 7);
    attn__viz_source(cr, tint(colour, 0.1));
    cairo_fill_preserve(cr);
    attn__viz_source(cr, attn__viz_hex(colour));
    cairo_set_line_width(cr, 1.3);
    cairo_stroke(cr);
    if (line2) {
        label(cr, x + w / 2, y + h / 2 - 8, line1, 11, true, VIZ_INK, 0.5);
        label(cr, x + w / 2, y + h / 2 + 9, line2, 10, false, VIZ_INK, 0.5);
    } else {
        label(cr, x + w / 2, y + h / 2, line1, 11, true, VIZ_INK, 0.5);
    }
}

static void pill(cairo_t *cr, double cx, double cy, const char *text, unsigned colour) {
    attn__viz_font(cr, 11, true);
    double w = rich(cr, 0, 0, text, 0, false) + 14;
    attn__viz_round_rect(cr, cx - w / 2, cy - 10, w, 20, 10);
    cairo_set_source_rgb(cr, 1, 1, 1);
    cairo_fill_preserve(cr);
    attn__viz_source(cr, attn__viz_hex(colour));
    cairo_set_line_width(cr, 1.2);
    cairo_stroke(cr);
    label(cr, cx, cy, text, 11, true, colour, 0.5);
}

/* A heat-coloured weight table (the scale of attn map) with fractions. */
static void weight_table(cairo_t *cr, double x, double y, double cell, int rows, int cols,
                         const float *w) {
    viz_grid g = {.x = x, .y = y, .cell = cell, .rows = rows, .cols = cols, .values = w,
                  .vmin = 0, .vmax = 1, .text = 2, .font_size = fmin(12.0, cell * 0.34)};
    attn__viz_draw_grid(cr, &g);
}

static void dashed_rect(cairo_t *cr, double x, double y, double w, double h, unsigned colour) {
    static const double dash[] = {4, 3};
    cairo_save(cr);
    cairo_set_dash(cr, dash, 2, 0);
    cairo_set_line_width(cr, 1.6);
    attn__viz_source(cr, attn__viz_hex(colour));
    cairo_rectangle(cr, x, y, w, h);
    cairo_stroke(cr);
    cairo_restore(cr);
}

/* ------------------------------------------------------------- Figure 1 */

#define FIG1_W 980.0
#define FIG1_H 720.0

static void figure1(cairo_t *cr, const attn_chapter *n, const figure_text *t) {
    const attn_chapter_pass *b = &n->base;
    const double cell = 34, mh = 3 * cell * 0.8; /* a 3x2 matrix: 68 x 81.6 */
    char text[96];
    label(cr, 24, 26, t->fig1_title, 15, true, VIZ_INK, 0);

    /* X, then three projections. */
    const double xx = 60, xy = 175, qx = 300, qy = 72, ky = 200, vy = 350;
    named_matrix(cr, xx, xy, "X", t, POS, WIDTH, &n->x[0][0], cell, C_X, NUM_SHORT);
    for (int i = 0; i < POS; i++) {
        snprintf(text, sizeof text, "x_%d", i + 1);
        label(cr, xx - 8, xy + (i + 0.5) * cell * 0.8, text, 11, false, VIZ_MUTED, 1);
    }
    const struct { double y; const char *name, *w; unsigned colour; const float *values; } proj[3] = {
        {qy, "Q", "× W_Q", C_Q, &b->q[0][0]},
        {ky, "K", "× W_K", C_K, &b->k[0][0]},
        {vy, "V", "× W_V", C_V, &b->v[0][0]},
    };
    for (int p = 0; p < 3; p++) {
        double y1 = xy + mh / 2, y2 = proj[p].y + mh / 2;
        attn__viz_arrow(cr, xx + 2 * cell + 4, y1, qx - 6, y2, attn__viz_hex(proj[p].colour), 2.0);
        pill(cr, (xx + 2 * cell + qx) / 2 + 6, (y1 + y2) / 2, proj[p].w, proj[p].colour);
        named_matrix(cr, qx, proj[p].y, proj[p].name, t, POS, WIDTH, proj[p].values, cell, proj[p].colour,
                     NUM_SHORT);
    }

    snprintf(text, sizeof text, "c = √2·ln2 ≈ %.4f", n->c);
    label(cr, qx + cell, ky + mh + 30, text, 9.5, false, VIZ_MUTED, 0.5);

    /* Q and K meet in the match; the weights table follows. */
    const double mx = 430, my = 128, mw = 150, mhh = 56;
    const double qx2 = qx + 2 * cell + 4;
    attn__viz_arrow(cr, qx2, qy + mh / 2, mx - 4, my + 18, attn__viz_hex(C_Q), 2.0);
    attn__viz_arrow(cr, qx2, ky + mh / 2, mx - 4, my + mhh - 18, attn__viz_hex(C_K), 2.0);
    box(cr, mx, my, mw, mhh, C_Q, t->match1, t->match2);
    const double tc = 40, tx = 640, ty = my + mhh / 2 - 1.5 * tc;
    attn__viz_arrow(cr, mx + mw + 2, my + mhh / 2, tx - 30, my + mhh / 2, attn__viz_hex(VIZ_MUTED), 2.0);
    weight_table(cr, tx, ty, tc, POS, POS, &b->weights[0][0]);
    label(cr, tx + 1.5 * tc, ty - 30, t->weights, 15, true, VIZ_INK, 0.5);
    label(cr, tx + 1.5 * tc, ty - 14, t->read, 9, false, VIZ_MUTED, 0.5);
    for (int i = 0; i < POS; i++) {
        snprintf(text, sizeof text, "q_%d", i + 1);
        label(cr, tx - 8, ty + (i + 0.5) * tc, text, 11, false, VIZ_MUTED, 1);
    }
    for (int j = 0; j < POS; j++) {
        snprintf(text, sizeof text, "%d", j + 1);
        label(cr, tx + (j + 0.5) * tc, ty + 3 * tc + 10, text, 10, false, VIZ_MUTED, 0.5);
    }
    dashed_rect(cr, tx - 3, ty + 2 * tc - 3, 3 * tc + 6, tc + 6, C_O);
    label(cr, tx + 3 * tc + 10, ty + 2.5 * tc, t->row_note, 10, false, C_O, 0);
    snprintf(text, sizeof text, t->shape, POS, POS);
    label(cr, tx + 3 * tc + 10, ty + 0.5 * tc, text, 10, false, VIZ_MUTED, 0);

    /* V's own path, the weighted sum, and O. */
    const double sx = 600, sy = vy + mh / 2 - 28, sw = 160, sh = 56;
    attn__viz_arrow(cr, qx2, vy + mh / 2, sx - 4, vy + mh / 2, attn__viz_hex(C_V), 3.0);
    label(cr, (qx2 + sx) / 2, vy + mh / 2 - 14, t->v_path, 11, false, C_V, 0.5);
    attn__viz_arrow(cr, tx + 1.5 * tc, ty + 3 * tc + 20, tx + 1.5 * tc, sy - 4, attn__viz_hex(VIZ_MUTED), 2.0);
    box(cr, sx, sy, sw, sh, C_O, t->sum1, t->sum2);
    const double ox = 840, oy = vy;
    attn__viz_arrow(cr, sx + sw + 2, sy + sh / 2, ox - 6, oy + mh / 2, attn__viz_hex(C_O), 2.0);
    named_matrix(cr, ox, oy, "O", t, POS, WIDTH, &b->out[0][0], cell, C_O, NUM_SHORT);

    /* The lower half: row q3 term by term. */
    const double ly = 478;
    cairo_save(cr);
    static const double dash[] = {3, 4};
    cairo_set_dash(cr, dash, 2, 0);
    attn__viz_source(cr, attn__viz_hex(VIZ_LINE));
    cairo_set_line_width(cr, 1);
    cairo_move_to(cr, 24, ly - 24);
    cairo_line_to(cr, FIG1_W - 24, ly - 24);
    cairo_stroke(cr);
    cairo_restore(cr);
    label(cr, 24, ly, t->row_heading, 13, true, VIZ_INK, 0);

    const double col0 = 230, colw = 170, wy = ly + 48, vy2 = wy + 62, py = vy2 + 64;
    label(cr, col0 - 70, wy + 15, t->weight_of, 11, false, VIZ_MUTED, 1);
    label(cr, col0 - 70, vy2 + 14, t->value, 11, false, C_V, 1);
    label(cr, col0 - 70, py + 14, t->product, 11, false, C_O, 1);
    float o3_terms[POS][WIDTH];
    for (int j = 0; j < POS; j++) {
        double cx = col0 + j * colw;
        snprintf(text, sizeof text, t->position, j + 1);
        label(cr, cx, wy - 18, text, 10, false, VIZ_MUTED, 0.5);
        /* weight w3j, heat-coloured */
        float w = b->weights[2][j];
        attn__viz_source(cr, attn__viz_scale_colour(w));
        cairo_rectangle(cr, cx - 30, wy, 60, 30);
        cairo_fill(cr);
        attn__viz_number(text, sizeof text, w, 2, true);
        attn__viz_font(cr, 13, true);
        attn__viz_source(cr, attn__viz_scale_ink(w));
        attn__viz_text(cr, cx, wy + 15, text, 0.5);
        label(cr, cx, wy + 46, "×", 14, false, VIZ_MUTED, 0.5);
        /* value v_j */
        matrix(cr, cx - 34, vy2, 1, WIDTH, &b->v[j][0], 34, 28, C_V, NUM_SHORT);
        snprintf(text, sizeof text, "v_%d", j + 1);
        label(cr, cx + 40, vy2 + 14, text, 10, false, C_V, 0);
        label(cr, cx, vy2 + 45, "=", 14, false, VIZ_MUTED, 0.5);
        for (int d = 0; d < WIDTH; d++) o3_terms[j][d] = w * b->v[j][d];
        matrix(cr, cx - 34, py, 1, WIDTH, o3_terms[j], 34, 28, C_O, NUM_SHORT);
        if (j > 0) label(cr, cx - colw / 2, py + 14, "+", 16, true, VIZ_MUTED, 0.5);
    }
    const double ex = col0 + 3 * colw - 40;
    label(cr, ex, py + 14, "=", 16, true, VIZ_MUTED, 0.5);
    matrix(cr, ex + 20, py, 1, WIDTH, &b->out[2][0], 40, 28, C_O, NUM_SHORT);
    label(cr, ex + 60, py - 14, "o_3", 12, true, C_O, 0.5);
    label(cr, 24, FIG1_H - 20, t->fig1_note, 10, false, VIZ_MUTED, 0);
}

/* ------------------------------------------------------------- Figure 2 */

#define FIG2_W 980.0
#define FIG2_H 520.0

static void figure2(cairo_t *cr, const attn_chapter *n, const figure_text *t) {
    char text[64];
    label(cr, 24, 26, t->fig2_title, 15, true, VIZ_INK, 0);
    const double pw = 221, gap = 12, px0 = 24, py = 52, ph = 400;
    for (int c = 0; c < 4; c++) {
        const attn_chapter_pass *p = &n->cases[c];
        const bool k_changed = c & 1, v_changed = c & 2;
        const double x = px0 + c * (pw + gap), mid = x + pw / 2;
        attn__viz_round_rect(cr, x, py, pw, ph, 10);
        attn__viz_source(cr, attn__viz_hex(0xf6f8fa));
        cairo_fill_preserve(cr);
        attn__viz_source(cr, attn__viz_hex(VIZ_LINE));
        cairo_set_line_width(cr, 1);
        cairo_stroke(cr);
        label(cr, mid, py + 22, t->case_name[c], 15, true, VIZ_INK, 0.5);
        label(cr, mid, py + 46, k_changed ? t->keys_changed : t->keys_original, 11, k_changed,
              k_changed ? C_K : VIZ_MUTED, 0.5);
        label(cr, mid, py + 64, v_changed ? t->values_changed : t->values_original, 11, v_changed,
              v_changed ? C_V : VIZ_MUTED, 0.5);

        /* q3's weights as bars, each above the value it multiplies. */
        bool moved = false;
        for (int j = 0; j < POS; j++)
            if (fabsf(p->weights[2][j] - n->cases[0].weights[2][j]) > 1e-6f) moved = true;
        label(cr, mid, py + 92, moved ? t->new_weights : t->same_weights, 11, moved,
              moved ? C_K : VIZ_MUTED, 0.5);
        label(cr, mid, py + 114, t->weights_q3, 10, false, VIZ_MUTED, 0.5);
        const double base_y = py + 262, bar_scale = 220, bw = 36;
        for (int j = 0; j < POS; j++) {
            float w = p->weights[2][j];
            double bx = mid + (j - 1) * 56;
            attn__viz_source(cr, attn__viz_scale_colour(0.25 + 0.75 * w));
            cairo_rectangle(cr, bx - bw / 2, base_y - w * bar_scale, bw, w * bar_scale);
            cairo_fill(cr);
            attn__viz_number(text, sizeof text, w, 2, true);
            label(cr, bx, base_y - w * bar_scale - 11, text, 12, true, VIZ_INK, 0.5);
            /* v_j as a column, under its bar */
            const float col[2][1] = {{p->v[j][0]}, {p->v[j][1]}};
            bool changed_here = v_changed && j == 1;
            snprintf(text, sizeof text, "v_%d", j + 1);
            label(cr, bx, base_y + 14, text, 10, changed_here, changed_here ? C_V : VIZ_MUTED, 0.5);
            matrix(cr, bx - 17, base_y + 26, 2, 1, &col[0][0], 34, 24, changed_here ? C_V : VIZ_MUTED,
                   NUM_SHORT);
        }
        attn__viz_source(cr, attn__viz_hex(VIZ_MUTED));
        cairo_set_line_width(cr, 1);
        cairo_move_to(cr, mid - 84, base_y);
        cairo_line_to(cr, mid + 84, base_y);
        cairo_stroke(cr);

        /* the output o3 */
        const double oy = py + ph - 56;
        label(cr, mid - 52, oy + 16, "o_3 =", 14, true, C_O, 1);
        matrix(cr, mid - 44, oy, 1, WIDTH, &p->out[2][0], 48, 32, C_O, NUM_SHORT);
    }
    attn__viz_font(cr, 11, false);
    attn__viz_source(cr, attn__viz_hex(VIZ_INK));
    const char *note = t->fig2_note;
    const char *nl = strchr(note, '\n');
    char first[512];
    size_t len = nl ? (size_t)(nl - note) : strlen(note);
    if (len >= sizeof first) len = sizeof first - 1;
    memcpy(first, note, len);
    first[len] = 0;
    label(cr, 24, py + ph + 26, first, 11, false, VIZ_INK, 0);
    if (nl) label(cr, 24, py + ph + 44, nl + 1, 11, false, VIZ_INK, 0);
}

/* ------------------------------------------------------------- Figure 3 */

#define FIG3_W 980.0
#define FIG3_H 390.0

static void axis_labels(cairo_t *cr, double x, double y, double cell, const figure_text *t) {
    char text[16];
    for (int i = 0; i < POS; i++) {
        snprintf(text, sizeof text, "%d", i + 1);
        label(cr, x - 10, y + (i + 0.5) * cell, text, 11, false, VIZ_MUTED, 1);
        label(cr, x + (i + 0.5) * cell, y - 10, text, 11, false, VIZ_MUTED, 0.5);
    }
    label(cr, x + 1.5 * cell, y - 28, t->positions_read, 10, false, VIZ_MUTED, 0.5);
    attn__viz_font(cr, 10, false);
    attn__viz_source(cr, attn__viz_hex(VIZ_MUTED));
    attn__viz_text_up(cr, x - 32, y + 1.5 * cell, t->queries, 0.5);
}

static void figure3(cairo_t *cr, const attn_chapter *n, const figure_text *t) {
    const attn_chapter_pass *cz = &n->causal, *b = &n->base;
    char text[160], a[16], bb[16], s[16];
    label(cr, 24, 26, t->fig3_title, 15, true, VIZ_INK, 0);

    /* Left: which positions each query may read. */
    const double vc = 52, vx = 84, vy = 130;
    label(cr, vx + 1.5 * vc, vy - 58, t->visible_title, 13, true, VIZ_INK, 0.5);
    axis_labels(cr, vx, vy, vc, t);
    for (int i = 0; i < POS; i++)
        for (int j = 0; j < POS; j++) {
            double x = vx + j * vc, y = vy + i * vc;
            if (isinf(cz->scaled[i][j])) {
                attn__viz_fill_hidden(cr, x, y, vc, vc);
            } else {
                attn__viz_source(cr, tint(C_Q, 0.22));
                cairo_rectangle(cr, x, y, vc, vc);
                cairo_fill(cr);
                label(cr, x + vc / 2, y + vc / 2, "✓", 16, true, C_Q, 0.5);
            }
        }
    cairo_set_source_rgb(cr, 1, 1, 1);
    cairo_set_line_width(cr, 2);
    for (int i = 1; i < POS; i++) {
        cairo_move_to(cr, vx, vy + i * vc);
        cairo_line_to(cr, vx + 3 * vc, vy + i * vc);
        cairo_move_to(cr, vx + i * vc, vy);
        cairo_line_to(cr, vx + i * vc, vy + 3 * vc);
    }
    cairo_stroke(cr);
    dashed_rect(cr, vx - 3, vy + vc - 3, 3 * vc + 6, vc + 6, C_O);

    /* Middle: row 2, hide first, then normalise. */
    const double rx = 500, ry = 116, rcw = 58, rch = 34, step = 56;
    label(cr, rx + 1.5 * rcw - 60, ry - 44, t->row2_title, 13, true, VIZ_INK, 0.5);
    float unmasked[POS], masked[POS], expv[POS];
    for (int j = 0; j < POS; j++) {
        unmasked[j] = b->scaled[1][j];
        masked[j] = cz->scaled[1][j];
        expv[j] = (float)exp((double)masked[j]);
    }
    const struct { const char *name; const float *values; number_style style; } steps[4] = {
        {t->step_scaled, unmasked, NUM_LN2},
        {t->step_masked, masked, NUM_LN2},
        {t->step_exp, expv, NUM_FRACTION},
        {t->step_weights, cz->weights[1], NUM_WEIGHT},
    };
    for (int r = 0; r < 4; r++) {
        double y = ry + r * step;
        label(cr, rx - 14, y + rch / 2, steps[r].name, 11, r == 3, VIZ_INK, 1);
        matrix(cr, rx, y, 1, POS, steps[r].values, rcw, rch, r == 0 ? C_X : C_Q, steps[r].style);
        if (r > 0) attn__viz_arrow(cr, rx + 1.5 * rcw, y - step + rch + 3, rx + 1.5 * rcw, y - 3,
                             attn__viz_hex(VIZ_MUTED), 1.4);
    }
    double expsum = 0;
    for (int j = 0; j < POS; j++) expsum += expv[j];
    attn__viz_number(s, sizeof s, expsum, 2, true);
    snprintf(text, sizeof text, "÷ %s", s);
    label(cr, rx + 1.5 * rcw + 10, ry + 2 * step + rch + (step - rch) / 2, text, 11, true, C_Q, 0);
    attn__viz_number(a, sizeof a, b->weights[1][0], 2, true);
    attn__viz_number(bb, sizeof bb, b->weights[1][1], 2, true);
    attn__viz_number(s, sizeof s, (double)b->weights[1][0] + b->weights[1][1], 2, true);
    snprintf(text, sizeof text, t->wrong_way, a, bb, s);
    label(cr, rx + 1.5 * rcw - 60, ry + 4 * step + 12, text, 10.5, false, C_WRONG, 0.5);

    /* Right: the causal weights, hidden cells hatched, row 2 marked. */
    const double wc = 52, wx = 790, wy = 130;
    label(cr, wx + 1.5 * wc, wy - 58, t->causal_title, 13, true, VIZ_INK, 0.5);
    axis_labels(cr, wx, wy, wc, t);
    uint8_t visible[POS][POS];
    for (int i = 0; i < POS; i++)
        for (int j = 0; j < POS; j++) visible[i][j] = !isinf(cz->scaled[i][j]);
    viz_grid g = {.x = wx, .y = wy, .cell = wc, .rows = POS, .cols = POS, .values = &cz->weights[0][0],
                  .visible = &visible[0][0], .vmin = 0, .vmax = 1, .text = 2, .font_size = 13};
    attn__viz_draw_grid(cr, &g);
    dashed_rect(cr, wx - 3, wy + wc - 3, 3 * wc + 6, wc + 6, C_O);
    char o0[16], o1[16];
    attn__viz_number(o0, sizeof o0, cz->out[1][0], 2, true);
    attn__viz_number(o1, sizeof o1, cz->out[1][1], 2, true);
    attn__viz_number(a, sizeof a, cz->weights[1][0], 2, true);
    attn__viz_number(bb, sizeof bb, cz->weights[1][1], 2, true);
    snprintf(text, sizeof text, t->o2, a, bb, o0, o1);
    label(cr, wx + 1.5 * wc, wy + 3 * wc + 26, text, 11, false, C_O, 0.5);
}

/* ------------------------------------------------------------ the entry */

attn_status attn_chapter_figure_write(const char *path, int figure, const char *lang) {
    if (!path) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_chapter_figure_write: path is NULL");
    if (figure < 1 || figure > 3)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT,
                         "attn_chapter_figure_write: figure must be 1, 2 or 3, got %d", figure);
    if (lang && strcmp(lang, "en") != 0 && strcmp(lang, "zh") != 0)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT,
                         "attn_chapter_figure_write: lang must be \"en\" or \"zh\", got \"%s\"", lang);
    const figure_text *t = lang && strcmp(lang, "zh") == 0 ? &text_zh : &text_en;
    attn_chapter n;
    attn_status st = attn_chapter_compute(&n);
    if (st != ATTN_OK) return st;
    static const double size[3][2] = {{FIG1_W, FIG1_H}, {FIG2_W, FIG2_H}, {FIG3_W, FIG3_H}};
    viz_doc doc;
    if ((st = attn__viz_doc_begin(&doc, path, size[figure - 1][0], size[figure - 1][1], 0))) return st;
    if (figure == 1) figure1(doc.cr, &n, t);
    else if (figure == 2) figure2(doc.cr, &n, t);
    else figure3(doc.cr, &n, t);
    return attn__viz_doc_finish(&doc);
}
