/*
 * cmd_demo.c — `attn demo`: the chapter's worked example, step by step, in the
 * chapter's order (§1–§8, then the exercises), in English or Chinese.
 *
 * The chapter's worked example itself (X, W_Q, W_K = c·I with c = √2·ln2,
 * W_V, the changed x2, and every pass over them) comes from the library's
 * attn_chapter_compute (attn_chapter.h).  Typed in here are only what the
 * demo adds: exercise 3's values and target weights, the sizes 100 and 200
 * of the n² count, the published head counts of §7, the key order of §8, and
 * the second head and W_O of the multi-head example, which are illustrative
 * choices of this program (the chapter gives only their shapes; the output
 * says so).  Every derived number is computed by the library
 * (attn_chapter_compute, attn_chapter_attend, attn_linear_forward,
 * attn_sdpa_forward, attn_mha_forward); the only arithmetic done here is exp
 * of the library's scores (without the max-subtraction, to show the
 * chapter's 2, 2, 4), sums and ratios of library results, and n².
 *
 * Layout: the numbers are computed first into one `chapter` struct; the
 * printers then only format them.  Prose lives apart from the code, in one
 * table of strings per language (demo.h: text_en.c, text_zh.c), so both
 * languages share every line of printing code.
 *
 * Shape legend: X [3, 2]  W_Q, W_K, W_V [2, 2]  Q, K, V, O [3, 2]
 *               scores, weights [3, 3] (rows: queries, columns: positions read)
 *               multi-head: concat [3, 4]  W_O [4, 2]  out [3, 2]
 */
#include "cli.h"
#include "cli_stdout.h"
#include "demo.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

enum {
    POS = ATTN_CHAPTER_POSITIONS, /* positions of the example                           */
    WIDTH = ATTN_CHAPTER_WIDTH,   /* numbers per position = d, the query/key width      */
    HEADS = 2,                    /* heads of the multi-head and grouped-query examples */
    EX3 = 2                       /* positions of exercise 3 (v1 = v2)                  */
};

/* ------------------------------------------------------------ the numbers */

/* The demo's numbers: the chapter's worked example as the library computes
 * it (inputs, base, changed, Figure 2's cases, causal), then what the demo
 * adds to it, inputs (typed in) first and results (computed) after. */
typedef struct {
    attn_chapter example;
    /* inputs */
    float wq2[WIDTH][WIDTH], wk2[WIDTH][WIDTH], wv2[WIDTH][WIDTH]; /* illustrative */
    float wo[HEADS * WIDTH][WIDTH];                                /* illustrative */
    int perm[POS];
    float ex3_v[WIDTH], ex3_target[2][EX3];
    int64_t n[2];
    int paper_heads, paper_width, qwen_heads, qwen_kv_heads;
    double sqrt_demo_d[3];
    /* results */
    float base_expv[POS][POS], causal_expv[POS][POS]; /* exp(scaled), no max subtraction */
    attn_chapter_pass permuted; /* base Q; K and V rows permuted together */
    float concat[POS][HEADS * WIDTH], mh_out[POS][WIDTH];
    float gqa_weights[HEADS][POS][POS];
    float ex3_weights[2][EX3], ex3_out[2][WIDTH];
    int64_t cells[2];
} chapter;

/* The inputs the demo adds to the library's example (§6, §7, §8, the
 * exercises): the illustrative second head and W_O of §6 first. */
static void demo_inputs(chapter *ch) {
    const float swap[WIDTH][WIDTH] = {{0, 1}, {1, 0}};
    const float wo[HEADS * WIDTH][WIDTH] = {{1, 0}, {0, 1}, {-1, 0}, {0, 1}};
    memcpy(ch->wq2, swap, sizeof swap);
    memcpy(ch->wk2, ch->example.wk, sizeof ch->wk2); /* head 2 keeps the chapter's W_K = c·I */
    memcpy(ch->wv2, swap, sizeof swap);
    memcpy(ch->wo, wo, sizeof wo);
    ch->perm[0] = 2; /* keys and values in the order 3, 1, 2 */
    ch->perm[1] = 0;
    ch->perm[2] = 1;
    ch->ex3_v[0] = 2;
    ch->ex3_v[1] = 1;
    ch->ex3_target[0][0] = 0.2f;
    ch->ex3_target[0][1] = 0.8f;
    ch->ex3_target[1][0] = 0.7f;
    ch->ex3_target[1][1] = 0.3f;
    ch->n[0] = 100;
    ch->n[1] = 200;
    ch->paper_heads = 8;
    ch->paper_width = 64;
    ch->qwen_heads = 16;
    ch->qwen_kv_heads = 8;
    ch->sqrt_demo_d[0] = 1;
    ch->sqrt_demo_d[1] = 4;
    ch->sqrt_demo_d[2] = 16;
}

/* The chapter shows exp of the scaled scores themselves (2, 2, 4, sum 8);
 * the library subtracts the row maximum first, which changes no weight. */
static void exp_of_scores(const attn_chapter_pass *p, float expv[POS][POS]) {
    for (int i = 0; i < POS; i++)
        for (int j = 0; j < POS; j++) expv[i][j] = (float)exp((double)p->scaled[i][j]);
}

/* §6: two heads through attn_mha_forward, once without W_O (the
 * concatenation) and once with it. */
static attn_status multi_head(chapter *ch) {
    const attn_chapter *ex = &ch->example;
    float wq[WIDTH][HEADS * WIDTH], wk[WIDTH][HEADS * WIDTH], wv[WIDTH][HEADS * WIDTH];
    const float *head_wq[HEADS] = {&ex->wq[0][0], &ch->wq2[0][0]};
    const float *head_wk[HEADS] = {&ex->wk[0][0], &ch->wk2[0][0]};
    const float *head_wv[HEADS] = {&ex->wv[0][0], &ch->wv2[0][0]};
    /* Head h owns columns h*WIDTH .. h*WIDTH + WIDTH-1 of the stacked projections. */
    for (int h = 0; h < HEADS; h++)
        for (int i = 0; i < WIDTH; i++)
            for (int j = 0; j < WIDTH; j++) {
                wq[i][h * WIDTH + j] = head_wq[h][i * WIDTH + j];
                wk[i][h * WIDTH + j] = head_wk[h][i * WIDTH + j];
                wv[i][h * WIDTH + j] = head_wv[h][i * WIDTH + j];
            }
    attn_mha m = ATTN_MHA_INIT;
    m.d_model = WIDTH;
    m.heads = HEADS;
    m.head_dim = WIDTH;
    m.d_out = HEADS * WIDTH;
    m.wq = &wq[0][0];
    m.wk = &wk[0][0];
    m.wv = &wv[0][0];
    attn_status st = attn_mha_forward(&m, &ex->x[0][0], 1, POS, NULL, 0, NULL, &ch->concat[0][0],
                                      NULL, NULL);
    if (st) return st;
    m.wo = &ch->wo[0][0];
    m.d_out = WIDTH;
    return attn_mha_forward(&m, &ex->x[0][0], 1, POS, NULL, 0, NULL, &ch->mh_out[0][0], NULL, NULL);
}

/* §7: two query heads (W_Q and W_Q2) sharing the chapter's one K and V. */
static attn_status grouped_query(chapter *ch) {
    attn_chapter *ex = &ch->example; /* not const: attn_tensor_3d takes float * */
    float q1[POS][WIDTH], q2[POS][WIDTH], q[POS][HEADS][WIDTH], out[POS][HEADS][WIDTH];
    attn_status st;
    if ((st = attn_linear_forward(&ex->x[0][0], POS, WIDTH, &ex->wq[0][0], NULL, WIDTH, &q1[0][0])) ||
        (st = attn_linear_forward(&ex->x[0][0], POS, WIDTH, &ch->wq2[0][0], NULL, WIDTH, &q2[0][0])))
        return st;
    for (int i = 0; i < POS; i++)
        for (int d = 0; d < WIDTH; d++) {
            q[i][0][d] = q1[i][d];
            q[i][1][d] = q2[i][d];
        }
    attn_tensor qt = attn_tensor_3d(&q[0][0][0], POS, HEADS, WIDTH);
    attn_tensor kt = attn_tensor_3d(&ex->base.k[0][0], POS, 1, WIDTH);
    attn_tensor vt = attn_tensor_3d(&ex->base.v[0][0], POS, 1, WIDTH);
    attn_tensor ot = attn_tensor_3d(&out[0][0][0], POS, HEADS, WIDTH);
    return attn_sdpa_forward(&qt, &kt, &vt, NULL, &ot, &ch->gqa_weights[0][0][0], NULL);
}

/* §8: the base queries, the base keys and values with their rows permuted
 * together by ch->perm. */
static attn_status permuted_pass(chapter *ch) {
    const attn_chapter_pass *base = &ch->example.base;
    attn_chapter_pass *p = &ch->permuted;
    memcpy(p->q, base->q, sizeof p->q);
    for (int j = 0; j < POS; j++) {
        memcpy(p->k[j], base->k[ch->perm[j]], sizeof p->k[j]);
        memcpy(p->v[j], base->v[ch->perm[j]], sizeof p->v[j]);
    }
    return attn_chapter_attend(p, 0);
}

/* Exercise 3: two keys with equal values; an additive bias log w makes the
 * softmax return exactly the target weights w, so the library does the mixing. */
static attn_status exercise3(chapter *ch) {
    float q[1][1] = {{0}}, k[EX3][1] = {{0}, {0}}, v[EX3][WIDTH];
    for (int j = 0; j < EX3; j++) memcpy(v[j], ch->ex3_v, sizeof v[j]);
    attn_tensor qt = attn_tensor_2d(&q[0][0], 1, 1);
    attn_tensor kt = attn_tensor_2d(&k[0][0], EX3, 1);
    attn_tensor vt = attn_tensor_2d(&v[0][0], EX3, WIDTH);
    for (int r = 0; r < 2; r++) {
        float bias[EX3];
        for (int j = 0; j < EX3; j++) bias[j] = (float)log((double)ch->ex3_target[r][j]);
        attn_sdpa_options opt = ATTN_SDPA_OPTIONS_INIT;
        opt.bias = bias;
        opt.bias_shape[0] = opt.bias_shape[1] = opt.bias_shape[2] = 1;
        opt.bias_shape[3] = EX3;
        attn_tensor ot = attn_tensor_2d(ch->ex3_out[r], 1, WIDTH);
        attn_status st = attn_sdpa_forward(&qt, &kt, &vt, &opt, &ot, ch->ex3_weights[r], NULL);
        if (st) return st;
    }
    return ATTN_OK;
}

/* The library's example first: the demo's own inputs and passes build on it. */
static attn_status chapter_compute(chapter *ch) {
    memset(ch, 0, sizeof *ch);
    attn_status st;
    if ((st = attn_chapter_compute(&ch->example))) return st;
    demo_inputs(ch);
    exp_of_scores(&ch->example.base, ch->base_expv);
    exp_of_scores(&ch->example.causal, ch->causal_expv);
    if ((st = multi_head(ch)) || (st = grouped_query(ch)) || (st = permuted_pass(ch)) || (st = exercise3(ch)))
        return st;
    for (int i = 0; i < 2; i++) ch->cells[i] = ch->n[i] * ch->n[i];
    return ATTN_OK;
}

/* ------------------------------------------------------------- formatting */

enum { CELL = 320, MAX_LINES = 8 };

/* A number is shown as a rational multiple of a named unit (c, ln2) or of 1. */
typedef struct {
    double size;
    const char *name; /* NULL for plain numbers */
} unit;

static const unit ONE = {1.0, NULL};

/* Formats into buf, truncating silently: every buffer here is sized for the
 * demo's short lines, and a truncated line would still be readable. */
static void set(char *buf, size_t size, const char *fmt, ...) CLI_PRINTF(3, 4);
static void set(char *buf, size_t size, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, size, fmt, ap);
    va_end(ap);
}

/* Appends printf-style text to the NUL-terminated buf of the given size. */
static void append(char *buf, size_t size, const char *fmt, ...) CLI_PRINTF(3, 4);
static void append(char *buf, size_t size, const char *fmt, ...) {
    size_t used = strlen(buf);
    if (used + 1 >= size) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + used, size - used, fmt, ap);
    va_end(ap);
}

/* p/q with 1 <= q <= 64 within 1e-6 (relative above 1) of x, smallest q first. */
static bool find_fraction(double x, long *num, long *den) {
    if (!isfinite(x) || fabs(x) > 1e6) return false;
    for (long q = 1; q <= 64; q++) {
        double p = floor(x * (double)q + 0.5);
        if (fabs(x - p / (double)q) <= 1e-6 * fmax(1.0, fabs(x))) {
            *num = (long)p;
            *den = q;
            return true;
        }
    }
    return false;
}

/* The exact form of x in unit u ("2/5", "2ln2", "c", "−∞"); false if x is not
 * a small-denominator multiple of u.  *den gets the denominator (0 for −∞). */
static bool fmt_exact(char *buf, size_t size, double x, unit u, long *den) {
    long p, q;
    *den = 0;
    if (isinf(x) && x < 0) {
        set(buf, size, "−∞");
        return true;
    }
    if (!find_fraction(x / u.size, &p, &q)) return false;
    *den = q;
    if (p == 0) set(buf, size, "0");
    else if (!u.name && q == 1) set(buf, size, "%ld", p);
    else if (!u.name) set(buf, size, "%ld/%ld", p, q);
    else if (q > 1) set(buf, size, "%ld/%ld·%s", p, q, u.name);
    else if (p == 1) set(buf, size, "%s", u.name);
    else if (p == -1) set(buf, size, "-%s", u.name);
    else set(buf, size, "%ld%s", p, u.name);
    return true;
}

/* Four decimals; −∞ for a hidden score; no "-0.0000". */
static void fmt_dec(char *buf, size_t size, double x) {
    if (isinf(x) && x < 0) set(buf, size, "−∞");
    else set(buf, size, "%.4f", fabs(x) < 0.5e-4 ? 0.0 : x);
}

/* Four decimals with trailing zeros removed ("0.2"), for typed-in inputs. */
static void fmt_short(char *buf, size_t size, double x) {
    fmt_dec(buf, size, x);
    if (!strchr(buf, '.')) return;
    size_t n = strlen(buf);
    while (n > 0 && buf[n - 1] == '0') buf[--n] = 0;
    if (n > 0 && buf[n - 1] == '.') buf[--n] = 0;
}

/* 10000 -> "10,000". */
static void fmt_count(char *buf, size_t size, int64_t n) {
    char digits[32];
    set(digits, sizeof digits, "%lld", (long long)n);
    size_t len = strlen(digits), o = 0;
    for (size_t i = 0; i < len && o + 2 < size; i++) {
        if (i > 0 && (len - i) % 3 == 0 && digits[i - 1] != '-') buf[o++] = ',';
        buf[o++] = digits[i];
    }
    buf[o] = 0;
}

/* How a vector or number is shown:
 *   SHOW_EXACT  the exact form first ("[1/4, 1/4, 1/2]"), then "= decimals"
 *               unless every entry is a plain integer;
 *   SHOW_FRACTION  the exact form alone, decimals only where there is none
 *               (compact tables whose decimals were shown before);
 *   SHOW_DEC    decimals first ("[1.5000, 0.7500]"), then "= exact form"
 *               only if four decimals cannot show the value exactly (2/3). */
typedef enum { SHOW_EXACT, SHOW_FRACTION, SHOW_DEC } show;

typedef struct {
    char main[CELL];
    char alt[CELL]; /* "" when the main form says it all */
} shown;

static shown fmt_values(const float *x, int n, unit u, show how, bool brackets) {
    shown s;
    char exact[CELL] = "", dec[CELL] = "";
    bool all_exact = true, all_integer = true, all_terminating = true;
    for (int i = 0; i < n; i++) {
        char e[64], d[64];
        long den;
        const char *sep = i ? ", " : "";
        fmt_dec(d, sizeof d, x[i]);
        append(dec, sizeof dec, "%s%s", sep, d);
        if (fmt_exact(e, sizeof e, x[i], u, &den)) {
            append(exact, sizeof exact, "%s%s", sep, e);
            if (u.name || den > 1) all_integer = false;
            if (u.name || (den > 0 && 10000 % den != 0)) all_terminating = false;
        } else {
            all_exact = all_integer = false;
        }
    }
    const char *open = brackets ? "[" : "", *close = brackets ? "]" : "";
    s.main[0] = s.alt[0] = 0;
    if (how != SHOW_DEC && all_exact) {
        set(s.main, CELL, "%s%s%s", open, exact, close);
        if (how == SHOW_EXACT && !all_integer) set(s.alt, CELL, "%s%s%s", open, dec, close);
    } else {
        set(s.main, CELL, "%s%s%s", open, dec, close);
        if (all_exact && !all_terminating) set(s.alt, CELL, "%s%s%s", open, exact, close);
    }
    return s;
}

static shown fmt_vec(const float *x, int n, unit u, show how) {
    return fmt_values(x, n, u, how, true);
}

/* One number as "main" or "main = alt": "3/5 = 0.6000", "0.9803", "8". */
static const char *fmt_num(char *buf, size_t size, double x, unit u, show how) {
    float xf = (float)x;
    shown s = fmt_values(&xf, 1, u, how, false);
    set(buf, size, "%s%s%s", s.main, s.alt[0] ? " = " : "", s.alt);
    return buf;
}

/* A vector as "main" or "main = alt" in one string. */
static const char *fmt_vec_full(char *buf, size_t size, const float *x, int n, unit u, show how) {
    shown s = fmt_vec(x, n, u, how);
    set(buf, size, "%s%s%s", s.main, s.alt[0] ? " = " : "", s.alt);
    return buf;
}

/* "1/4·[2, 0] + 1/4·[0, 1] + 1/2·[2, 1]": the weighted sum, zero weights left
 * out, coefficients as fractions (or as short decimals when decimal is set). */
static void fmt_mix(char *buf, size_t size, const float *w, const float *values, int n, bool decimal) {
    buf[0] = 0;
    for (int j = 0; j < n; j++) {
        char coef[64];
        long den;
        if (w[j] == 0.0f) continue;
        if (decimal || !fmt_exact(coef, sizeof coef, w[j], ONE, &den)) fmt_short(coef, sizeof coef, w[j]);
        append(buf, size, "%s%s·%s", buf[0] ? " + " : "", coef,
               fmt_vec(values + j * WIDTH, WIDTH, ONE, SHOW_EXACT).main);
    }
}

/* Terminal columns of UTF-8 text: CJK and full-width forms take two. */
int demo_display_width(const char *s) {
    int width = 0;
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        unsigned cp = *p;
        int len = *p < 0x80 ? 1 : (*p & 0xE0) == 0xC0 ? 2 : (*p & 0xF0) == 0xE0 ? 3 : 4;
        if (len > 1) cp &= 0x3Fu >> (len - 1);
        int i = 1;
        for (; i < len && (p[i] & 0xC0) == 0x80; i++) cp = (cp << 6) | (p[i] & 0x3Fu);
        p += i;
        bool wide = (cp >= 0x1100 && cp <= 0x115F) || (cp >= 0x2E80 && cp <= 0xA4CF) ||
                    (cp >= 0xAC00 && cp <= 0xD7A3) || (cp >= 0xF900 && cp <= 0xFAFF) ||
                    (cp >= 0xFE30 && cp <= 0xFE4F) || (cp >= 0xFF00 && cp <= 0xFF60) ||
                    (cp >= 0xFFE0 && cp <= 0xFFE6);
        width += wide ? 2 : 1;
    }
    return width;
}

static void pad_to(char *buf, size_t size, int width) {
    for (int w = demo_display_width(buf); w < width; w++) append(buf, size, " ");
}

/* ---------------------------------------------------------------- columns */

/* A column of text lines; print_columns sets columns side by side. */
typedef struct {
    int n;
    char line[MAX_LINES][CELL];
} column;

static void col_add(column *c, const char *fmt, ...) CLI_PRINTF(2, 3);
static void col_add(column *c, const char *fmt, ...) {
    if (c->n >= MAX_LINES) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->line[c->n++], CELL, fmt, ap);
    va_end(ap);
}

static const char *const INDENT = "    ";

static void print_columns(const column *cols, int ncols) {
    int lines = 0, width[8] = {0};
    for (int c = 0; c < ncols; c++) {
        if (cols[c].n > lines) lines = cols[c].n;
        for (int i = 0; i < cols[c].n; i++) {
            int w = demo_display_width(cols[c].line[i]);
            if (w > width[c]) width[c] = w;
        }
    }
    for (int i = 0; i < lines; i++) {
        char out[8 * CELL] = "";
        for (int c = 0; c < ncols; c++) {
            append(out, sizeof out, "%s", i < cols[c].n ? cols[c].line[i] : "");
            if (c + 1 < ncols) {
                int target = 0;
                for (int k = 0; k <= c; k++) target += width[k] + 3;
                pad_to(out, sizeof out, target);
            }
        }
        size_t n = strlen(out);
        while (n > 0 && out[n - 1] == ' ') out[--n] = 0;
        printf("%s%s\n", INDENT, out);
    }
}

/* A matrix as a titled column: "title  R×C", then "label1  [..] = [..]"
 * rows with the "=" signs aligned.  label may be NULL (rows unlabelled).
 * The demo's matrices have at most 4 rows (W_O), below MAX_LINES - 1. */
static void col_matrix(column *c, const char *title, const char *label, const float *m, int rows,
                       int cols, unit u, show how) {
    shown s[MAX_LINES];
    int main_width = 0;
    c->n = 0;
    col_add(c, "%s  %d×%d", title, rows, cols);
    for (int i = 0; i < rows; i++) {
        s[i] = fmt_vec(m + i * cols, cols, u, how);
        if (demo_display_width(s[i].main) > main_width) main_width = demo_display_width(s[i].main);
    }
    for (int i = 0; i < rows; i++) {
        char line[CELL] = "";
        if (label) append(line, sizeof line, "%s%d  ", label, i + 1);
        append(line, sizeof line, "%s", s[i].main);
        if (s[i].alt[0]) {
            pad_to(line, sizeof line, demo_display_width(line) + main_width - demo_display_width(s[i].main));
            append(line, sizeof line, " = %s", s[i].alt);
        }
        col_add(c, "%s", line);
    }
}

/* Walk lines "label   main   = alt" aligned in three columns. */
typedef struct {
    column label, main, alt;
} walk;

static void walk_add(walk *w, const char *label, shown s) {
    col_add(&w->label, "%s", label);
    col_add(&w->main, "%s", s.main);
    col_add(&w->alt, "%s%s", s.alt[0] ? "= " : "", s.alt);
}

/* The exp line of a walk: exp of one row of scores, and its sum. */
static void walk_add_exp(walk *w, const demo_text *t, const float *expv) {
    char num[64];
    double sum = 0;
    for (int j = 0; j < POS; j++) sum += expv[j];
    col_add(&w->label, "%s", t->lbl_exp);
    col_add(&w->main, "%s", fmt_vec(expv, POS, ONE, SHOW_EXACT).main);
    col_add(&w->alt, t->sum, fmt_num(num, sizeof num, sum, ONE, SHOW_EXACT));
}

static void walk_print(const walk *w) {
    column cols[3] = {w->label, w->main, w->alt};
    print_columns(cols, 3);
}

/* Prose: every line indented by two spaces. */
static void say(const char *text) {
    fputs("  ", stdout);
    for (const char *p = text; *p; p++) {
        putchar(*p);
        if (*p == '\n') fputs("  ", stdout);
    }
    putchar('\n');
}

/* An answer line: the answer mark on the first, later lines hang under it. */
static void say_answer(const demo_text *t, bool first, const char *text) {
    int hang = demo_display_width(t->answer);
    printf("  %s%*s", first ? t->answer : "", first ? 0 : hang, "");
    for (const char *p = text; *p; p++) {
        putchar(*p);
        if (*p == '\n') printf("  %*s", hang, "");
    }
    putchar('\n');
}

static void sayf(const char *fmt, ...) {
    char buf[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    say(buf);
}

static void heading(const char *text) {
    printf("\n%s\n", text);
}

static const char *shape_str(char *buf, size_t size, int rows, int cols) {
    set(buf, size, "%d×%d", rows, cols);
    return buf;
}

/* ------------------------------------------------------------- sections */

static void print_inputs(const demo_text *t, const chapter *ch) {
    const attn_chapter *ex = &ch->example;
    const unit u_c = {ex->c, "c"};
    char buf[CELL];
    column cols[4];
    heading(t->sec_qkv);
    say(t->input_note);
    sayf(t->c_line, fmt_num(buf, sizeof buf, ex->c, ONE, SHOW_DEC));
    putchar('\n');
    col_matrix(&cols[0], "X", "x", &ex->x[0][0], POS, WIDTH, ONE, SHOW_EXACT);
    col_matrix(&cols[1], "W_Q", NULL, &ex->wq[0][0], WIDTH, WIDTH, ONE, SHOW_EXACT);
    col_matrix(&cols[2], "W_K", NULL, &ex->wk[0][0], WIDTH, WIDTH, u_c, SHOW_EXACT);
    col_matrix(&cols[3], "W_V", NULL, &ex->wv[0][0], WIDTH, WIDTH, ONE, SHOW_EXACT);
    print_columns(cols, 4);
    putchar('\n');
    say(t->roles);
    putchar('\n');
    col_matrix(&cols[0], "Q = X·W_Q", "q", &ex->base.q[0][0], POS, WIDTH, ONE, SHOW_EXACT);
    col_matrix(&cols[1], "K = X·W_K", "k", &ex->base.k[0][0], POS, WIDTH, u_c, SHOW_EXACT);
    col_matrix(&cols[2], "V = X·W_V", "v", &ex->base.v[0][0], POS, WIDTH, ONE, SHOW_EXACT);
    print_columns(cols, 3);
}

/* The four steps of one query row of the original input: raw scores,
 * scaled, exp, weights. */
static void walk_query(const demo_text *t, const chapter *ch, int i, walk *w) {
    const attn_chapter_pass *base = &ch->example.base;
    const unit u_c = {ch->example.c, "c"}, u_ln2 = {log(2.0), "ln2"};
    char label[CELL];
    memset(w, 0, sizeof *w);
    walk_add(w, t->lbl_raw, fmt_vec(base->raw[i], POS, u_c, SHOW_EXACT));
    set(label, sizeof label, t->lbl_scaled, WIDTH);
    walk_add(w, label, fmt_vec(base->scaled[i], POS, u_ln2, SHOW_EXACT));
    walk_add_exp(w, t, ch->base_expv[i]);
    walk_add(w, t->lbl_weights, fmt_vec(base->weights[i], POS, ONE, SHOW_EXACT));
}

static void print_match(const demo_text *t, const chapter *ch) {
    const attn_chapter *ex = &ch->example;
    const int order[POS] = {2, 0, 1}; /* the chapter works row 3 first */
    char ds[CELL] = "", roots[CELL] = "", share[64];
    heading(t->sec_match);
    for (int r = 0; r < POS; r++) {
        int i = order[r];
        walk w;
        sayf(t->query_heading, i + 1, i + 1, fmt_vec(ex->base.q[i], WIDTH, ONE, SHOW_EXACT).main);
        walk_query(t, ch, i, &w);
        walk_print(&w);
    }
    putchar('\n');
    for (int k = 0; k < 3; k++) {
        char a[32], b[32];
        append(ds, sizeof ds, "%s%s", k ? ", " : "", fmt_num(a, sizeof a, ch->sqrt_demo_d[k], ONE, SHOW_EXACT));
        append(roots, sizeof roots, "%s%s", k ? ", " : "",
               fmt_num(b, sizeof b, sqrt(ch->sqrt_demo_d[k]), ONE, SHOW_EXACT));
    }
    sayf(t->why_sqrt, ds, roots);
    long den;
    if (!fmt_exact(share, sizeof share, ex->base.weights[2][2], ONE, &den))
        fmt_dec(share, sizeof share, ex->base.weights[2][2]);
    sayf(t->per_row, share, share);
}

static void print_mix(const demo_text *t, const chapter *ch) {
    const attn_chapter *ex = &ch->example;
    const unit u_ln2 = {log(2.0), "ln2"};
    char mix[CELL], buf[CELL], s1[32], s2[32], s3[32], range[2][64];
    column cols[3];
    walk w;
    heading(t->sec_mix);
    say(t->values_not_keys);
    fmt_mix(mix, sizeof mix, ex->base.weights[2], &ex->base.v[0][0], POS, false);
    printf("%so3 = %s = %s\n\n", INDENT, mix, fmt_vec_full(buf, sizeof buf, ex->base.out[2], WIDTH, ONE, SHOW_DEC));
    col_matrix(&cols[0], t->blk_weights, "q", &ex->base.weights[0][0], POS, POS, ONE, SHOW_FRACTION);
    col_matrix(&cols[1], "V", "v", &ex->base.v[0][0], POS, WIDTH, ONE, SHOW_EXACT);
    col_matrix(&cols[2], t->blk_out, "o", &ex->base.out[0][0], POS, WIDTH, ONE, SHOW_DEC);
    print_columns(cols, 3);
    putchar('\n');
    for (int d = 0; d < WIDTH; d++) {
        float lo = ex->base.v[0][d], hi = lo;
        for (int j = 1; j < POS; j++) {
            lo = fminf(lo, ex->base.v[j][d]);
            hi = fmaxf(hi, ex->base.v[j][d]);
        }
        float bounds[2] = {lo, hi};
        set(range[d], sizeof range[d], "%s", fmt_vec(bounds, 2, ONE, SHOW_EXACT).main);
    }
    sayf(t->shape_note, shape_str(s1, sizeof s1, POS, WIDTH), shape_str(s2, sizeof s2, POS, POS),
         shape_str(s3, sizeof s3, POS, WIDTH), range[0], range[WIDTH - 1]);

    /* The context change: x2 -> [0, 2]. */
    putchar('\n');
    sayf(t->context_change, fmt_vec(ex->x_changed[1], WIDTH, ONE, SHOW_EXACT).main);
    const unit u_c = {ex->c, "c"};
    memset(&w, 0, sizeof w);
    set(buf, sizeof buf, "%s   %s", fmt_vec(ex->changed.k[1], WIDTH, u_c, SHOW_EXACT).main,
             fmt_vec(ex->changed.v[1], WIDTH, ONE, SHOW_EXACT).main);
    col_add(&w.label, "%s", t->lbl_k2v2);
    col_add(&w.main, "%s", buf);
    col_add(&w.alt, "%s", "");
    walk_add(&w, t->lbl_q3_scaled, fmt_vec(ex->changed.scaled[2], POS, u_ln2, SHOW_EXACT));
    walk_add(&w, t->lbl_q3_weights, fmt_vec(ex->changed.weights[2], POS, ONE, SHOW_EXACT));
    shown o = fmt_vec(ex->changed.out[2], WIDTH, ONE, SHOW_DEC);
    set(o.alt, CELL, t->was, fmt_vec(ex->base.out[2], WIDTH, ONE, SHOW_DEC).main);
    col_add(&w.label, "%s", t->lbl_o3);
    col_add(&w.main, "%s", o.main);
    col_add(&w.alt, "%s", o.alt);
    walk_print(&w);
    say(t->not_linear);

    /* Figure 2: the four controlled interventions. */
    putchar('\n');
    say(t->interventions);
    column tab[5];
    memset(tab, 0, sizeof tab);
    col_add(&tab[0], "%s", t->col_case);
    col_add(&tab[1], "k2");
    col_add(&tab[2], "v2");
    col_add(&tab[3], "%s", t->col_weights_q3);
    col_add(&tab[4], "o3");
    for (int i = 0; i < 4; i++) {
        const attn_chapter_pass *p = &ex->cases[i];
        col_add(&tab[0], "%s", t->case_name[i]);
        col_add(&tab[1], "%s", fmt_vec(p->k[1], WIDTH, u_c, SHOW_EXACT).main);
        col_add(&tab[2], "%s", fmt_vec(p->v[1], WIDTH, ONE, SHOW_EXACT).main);
        col_add(&tab[3], "%s", fmt_vec(p->weights[2], POS, ONE, SHOW_EXACT).main);
        col_add(&tab[4], "%s", fmt_vec(p->out[2], WIDTH, ONE, SHOW_DEC).main);
    }
    print_columns(tab, 5);
    say(t->two_paths);
}

/* "1/5 + 2/5 = 3/5 = 0.6000": the weights of row 2 that the causal mask
 * keeps, taken from the UNMASKED softmax, and their sum. */
static void fmt_struck_sum(char *buf, size_t size, const chapter *ch) {
    const attn_chapter *ex = &ch->example;
    char one[64];
    double sum = 0;
    buf[0] = 0;
    for (int j = 0; j < POS; j++) {
        if (isinf(ex->causal.scaled[1][j])) continue;
        sum += ex->base.weights[1][j];
        append(buf, size, "%s%s", buf[0] ? " + " : "",
               fmt_num(one, sizeof one, ex->base.weights[1][j], ONE, SHOW_FRACTION));
    }
    append(buf, size, " = %s", fmt_num(one, sizeof one, sum, ONE, SHOW_EXACT));
}

static void print_causal(const demo_text *t, const chapter *ch) {
    const attn_chapter *ex = &ch->example;
    const unit u_ln2 = {log(2.0), "ln2"};
    const attn_chapter_pass *p = &ex->causal;
    char buf[CELL], mix[CELL], sum_text[CELL];
    column cols[2];
    walk w;
    heading(t->sec_causal);
    say(t->causal_intro);
    putchar('\n');
    /* Visibility read off the library's causal scores: -inf means hidden. */
    memset(cols, 0, sizeof cols);
    col_add(&cols[0], "%s", t->blk_visible);
    for (int i = 0; i < POS; i++) {
        char line[CELL] = "";
        append(line, sizeof line, "q%d ", i + 1);
        for (int j = 0; j < POS; j++) append(line, sizeof line, " %s", isinf(p->scaled[i][j]) ? "·" : "■");
        col_add(&cols[0], "%s", line);
    }
    col_matrix(&cols[1], t->blk_causal_weights, "q", &p->weights[0][0], POS, POS, ONE, SHOW_FRACTION);
    print_columns(cols, 2);

    putchar('\n');
    say(t->pos2_heading);
    memset(&w, 0, sizeof w);
    set(buf, sizeof buf, t->lbl_scaled, WIDTH);
    walk_add(&w, buf, fmt_vec(ex->base.scaled[1], POS, u_ln2, SHOW_EXACT));
    walk_add(&w, t->lbl_masked, fmt_vec(p->scaled[1], POS, u_ln2, SHOW_EXACT));
    walk_add_exp(&w, t, ch->causal_expv[1]);
    walk_add(&w, t->lbl_renorm, fmt_vec(p->weights[1], POS, ONE, SHOW_EXACT));
    walk_print(&w);
    fmt_mix(mix, sizeof mix, p->weights[1], &p->v[0][0], POS, false);
    printf("%so2 = %s = %s\n\n", INDENT, mix, fmt_vec_full(buf, sizeof buf, p->out[1], WIDTH, ONE, SHOW_DEC));

    fmt_struck_sum(sum_text, sizeof sum_text, ch);
    sayf(t->wrong_way, fmt_vec(ex->base.weights[1], POS, ONE, SHOW_EXACT).main, sum_text);
    say(t->not_serial);
}

static void print_heads(const demo_text *t, const chapter *ch) {
    const attn_chapter *ex = &ch->example;
    const unit u_c = {ex->c, "c"};
    char title[2][64], walk_text[CELL], s[5][32];
    float head_out[HEADS][POS][WIDTH];
    column cols[4];
    heading(t->sec_heads);
    say(t->heads_intro);
    putchar('\n');
    col_matrix(&cols[0], "W_Q2", NULL, &ch->wq2[0][0], WIDTH, WIDTH, ONE, SHOW_EXACT);
    col_matrix(&cols[1], "W_K2", NULL, &ch->wk2[0][0], WIDTH, WIDTH, u_c, SHOW_EXACT);
    col_matrix(&cols[2], "W_V2", NULL, &ch->wv2[0][0], WIDTH, WIDTH, ONE, SHOW_EXACT);
    col_matrix(&cols[3], "W_O", NULL, &ch->wo[0][0], HEADS * WIDTH, WIDTH, ONE, SHOW_EXACT);
    print_columns(cols, 4);
    putchar('\n');
    /* Each head's output is its slice of the concatenation. */
    for (int h = 0; h < HEADS; h++) {
        for (int i = 0; i < POS; i++) memcpy(head_out[h][i], &ch->concat[i][h * WIDTH], sizeof head_out[h][i]);
        set(title[h], sizeof title[h], t->blk_head, h + 1);
        col_matrix(&cols[h], title[h], "o", &head_out[h][0][0], POS, WIDTH, ONE, SHOW_DEC);
    }
    print_columns(cols, HEADS);
    putchar('\n');
    col_matrix(&cols[0], t->blk_concat, "z", &ch->concat[0][0], POS, HEADS * WIDTH, ONE, SHOW_DEC);
    col_matrix(&cols[1], t->blk_mh_out, "o", &ch->mh_out[0][0], POS, WIDTH, ONE, SHOW_DEC);
    print_columns(cols, 2);
    putchar('\n');
    set(walk_text, sizeof walk_text, "%s + %s → %s → ×W_O %s → %s", shape_str(s[0], 32, POS, WIDTH),
             shape_str(s[1], 32, POS, WIDTH), shape_str(s[2], 32, POS, HEADS * WIDTH),
             shape_str(s[3], 32, HEADS * WIDTH, WIDTH), shape_str(s[4], 32, POS, WIDTH));
    sayf(t->shape_walk, walk_text);
    say(t->concat_note);
}

static void print_gqa(const demo_text *t, const chapter *ch) {
    char title[HEADS][64];
    column cols[HEADS];
    heading(t->sec_gqa);
    sayf(t->gqa_facts, ch->paper_heads, ch->paper_width, ch->qwen_heads, ch->qwen_kv_heads,
         ch->qwen_heads / ch->qwen_kv_heads);
    sayf(t->gqa_toy, HEADS, 1);
    putchar('\n');
    for (int h = 0; h < HEADS; h++) {
        set(title[h], sizeof title[h], t->blk_gqa_head, h + 1);
        col_matrix(&cols[h], title[h], "q", &ch->gqa_weights[h][0][0], POS, POS, ONE, SHOW_FRACTION);
    }
    print_columns(cols, HEADS);
    say(t->gqa_note);
}

static void print_explain(const demo_text *t, const chapter *ch) {
    char order[64] = "", title[CELL], n_text[2][32], cells[2][32], ratio[32];
    column cols[2];
    heading(t->sec_explain);
    for (int j = 0; j < POS; j++) append(order, sizeof order, "%s%d", j ? ", " : "", ch->perm[j] + 1);
    sayf(t->permute_intro, order);
    putchar('\n');
    set(title, sizeof title, t->blk_perm_weights, order);
    col_matrix(&cols[0], title, "q", &ch->permuted.weights[0][0], POS, POS, ONE, SHOW_FRACTION);
    col_matrix(&cols[1], "O", "o", &ch->permuted.out[0][0], POS, WIDTH, ONE, SHOW_DEC);
    print_columns(cols, 2);
    say(t->no_order);
    putchar('\n');
    say(t->cost_intro);
    column cost[3];
    memset(cost, 0, sizeof cost);
    for (int i = 0; i < 2; i++) {
        fmt_count(n_text[i], sizeof n_text[i], ch->n[i]);
        fmt_count(cells[i], sizeof cells[i], ch->cells[i]);
        col_add(&cost[0], "n = %s", n_text[i]);
        col_add(&cost[1], t->cost_cells, cells[i]);
    }
    col_add(&cost[2], "%s", "");
    col_add(&cost[2], t->cost_ratio,
            fmt_num(ratio, sizeof ratio, (double)ch->cells[1] / (double)ch->cells[0], ONE, SHOW_EXACT));
    print_columns(cost, 3);
    say(t->cost_note);
}

static void print_exercises(const demo_text *t, const chapter *ch) {
    const attn_chapter *ex = &ch->example;
    const attn_chapter_pass *v_only = &ex->cases[2];
    const attn_chapter_pass *causal = &ex->causal;
    char a[CELL], b[CELL], c[CELL], line[2 * CELL], mix[CELL], kept[CELL];
    heading(t->sec_exercises);

    /* 1: V only: the same weights, a new output. */
    sayf(t->ex1_q, fmt_vec(ex->base.v[1], WIDTH, ONE, SHOW_EXACT).main,
         fmt_vec(v_only->v[1], WIDTH, ONE, SHOW_EXACT).main);
    set(line, sizeof line, t->ex1_a1, fmt_vec(v_only->weights[2], POS, ONE, SHOW_EXACT).main);
    say_answer(t, true, line);
    fmt_mix(mix, sizeof mix, v_only->weights[2], &v_only->v[0][0], POS, false);
    set(line, sizeof line, "o3 = %s = %s", mix, fmt_vec_full(a, sizeof a, v_only->out[2], WIDTH, ONE, SHOW_DEC));
    say_answer(t, false, line);
    say_answer(t, false, t->ex1_a2);
    putchar('\n');

    /* 2: mask first, then normalise. */
    say(t->ex2_q);
    set(a, sizeof a, "%s", fmt_vec(ch->causal_expv[1], POS, ONE, SHOW_EXACT).main);
    set(b, sizeof b, "%s", fmt_vec(causal->weights[1], POS, ONE, SHOW_EXACT).main);
    fmt_vec_full(c, sizeof c, causal->out[1], WIDTH, ONE, SHOW_DEC);
    set(line, sizeof line, t->ex2_a1, a, b, c);
    say_answer(t, true, line);
    fmt_struck_sum(kept, sizeof kept, ch);
    set(line, sizeof line, t->ex2_a2, kept);
    say_answer(t, false, line);
    putchar('\n');

    /* 3: identical values, different maps, the same output. */
    char targets[2][CELL];
    for (int r = 0; r < 2; r++) {
        targets[r][0] = 0;
        for (int j = 0; j < EX3; j++) {
            char one[32];
            fmt_short(one, sizeof one, ch->ex3_target[r][j]);
            append(targets[r], sizeof targets[r], "%s%s", j ? ", " : "[", one);
        }
        append(targets[r], sizeof targets[r], "]");
    }
    sayf(t->ex3_q, fmt_vec(ch->ex3_v, WIDTH, ONE, SHOW_EXACT).main, targets[0], targets[1]);
    for (int r = 0; r < 2; r++) {
        float values[EX3][WIDTH];
        for (int j = 0; j < EX3; j++) memcpy(values[j], ch->ex3_v, sizeof values[j]);
        fmt_mix(mix, sizeof mix, ch->ex3_weights[r], &values[0][0], EX3, true);
        set(line, sizeof line, "%s = %s", mix, fmt_vec(ch->ex3_out[r], WIDTH, ONE, SHOW_DEC).main);
        say_answer(t, r == 0, line);
    }
    say_answer(t, false, t->ex3_a);
}

/* ------------------------------------------------------------ the command */

/* "en" or "zh" -> its table; NULL for anything else. */
static const demo_text *text_for(const char *lang) {
    if (strcmp(lang, "en") == 0) return &demo_text_en;
    if (strcmp(lang, "zh") == 0) return &demo_text_zh;
    return NULL;
}

/* The default language: Chinese when $LANG starts with "zh", else English. */
static const demo_text *text_from_environment(void) {
    const char *lang = getenv("LANG");
    return lang && strncmp(lang, "zh", 2) == 0 ? &demo_text_zh : &demo_text_en;
}

enum { F_LANG = 1, F_FIGURES, F_MODEL, F_PLOT, F_HEADS, F_NO_COST };
static const cli_flag demo_flags[] = {{"--lang", "en|zh", F_LANG, 0},   {"--figures", "DIR", F_FIGURES, 0},
                                      {"--model", "FILE", F_MODEL, 0},  {"--plot", "FILE", F_PLOT, 0},
                                      {"--heads", NULL, F_HEADS, 0},    {"--no-cost", NULL, F_NO_COST, 0},
                                      CLI_FLAGS_END};
static const cli_flag *const demo_tables[] = {demo_flags, NULL};
/* The help is printed after the rest is read: --lang chooses its language. */
const cli_spec cli_demo_spec = {"demo", demo_tables, NULL, false};

int cmd_demo(int argc, char **argv) {
    const demo_text *t = NULL;
    const char *figures_dir = NULL;
    bool help = false;
    demo_model_options model = {0};
    cli_args args;
    const char *value;
    cli_args_begin(&args, &cli_demo_spec, argc, argv);
    for (int id; (id = cli_args_next(&args, &value)) != CLI_ARGS_END;) {
        if (id == CLI_ARGS_STOP) return args.status;
        if (id == CLI_ARGS_HELP) help = true;
        else if (id == F_FIGURES) figures_dir = value;
        else if (id == F_MODEL) model.model = value;
        else if (id == F_PLOT) model.plot = value;
        else if (id == F_HEADS) model.heads = true;
        else if (id == F_NO_COST) model.no_cost = true;
        else if (!(t = text_for(value)))
            return cli_usage_error("demo", "--lang must be en or zh, got '%s'", value);
    }
    if (!t) t = text_from_environment();
    if (help) {
        fputs(t->usage, stdout);
        return CLI_OK;
    }
    if (!model.model && (model.plot || model.heads || model.no_cost))
        return cli_usage_error("demo", "--plot, --heads and --no-cost are options of --model MODEL");
    if (model.model) {
        if (figures_dir) return cli_usage_error("demo", "--figures draws the toy example's figures, not --model's");
        return demo_model_run(t, t == &demo_text_zh ? &demo_model_text_zh : &demo_model_text_en, &model);
    }

    /* An unwritable --figures DIR is told before the walk-through, not
     * after a screenful of it. */
    if (figures_dir) {
        const int rc = demo_figures_dir_ready(figures_dir);
        if (rc != CLI_OK) return rc;
    }
    chapter ch;
    attn_status st = chapter_compute(&ch);
    if (st)
        return cli_data_error("demo", "the library failed: %s (%s)", attn_last_error(),
                              attn_status_str(st));

    printf("%s\n", t->title);
    printf(t->intro, attn_version());
    putchar('\n');
    print_inputs(t, &ch);
    print_match(t, &ch);
    print_mix(t, &ch);
    print_causal(t, &ch);
    print_heads(t, &ch);
    print_gqa(t, &ch);
    print_explain(t, &ch);
    print_exercises(t, &ch);
    if (figures_dir) {
        putchar('\n');
        int rc = demo_write_figures(figures_dir, t == &demo_text_zh ? "zh" : "en");
        if (rc != CLI_OK) return rc;
    }
    return cli_stdout_ok("demo") ? CLI_OK : CLI_DATA_ERROR;
}
