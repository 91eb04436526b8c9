/*
 * test_viz.c — pictures: heat maps (attn_heatmap_write, `attn map`) and the
 * chapter's figures (attn_chapter_figure_write, `attn demo --figures`).
 *
 * The files are checked as files, independently of cairo: a PNG's
 * signature, every chunk's CRC, IHDR first and IEND last, and the IHDR size
 * against the layout's promises; an SVG is parsed as XML by xmllint; a PDF's
 * page objects are counted (and pdfinfo asked when it is installed).
 * Without cairo the picture tests are skipped with a message, and the entry
 * points must say ATTN_ERR_UNSUPPORTED.
 *
 * Shape legend: weights [H, L, S] (heads, queries, keys).
 */
#include "cli_files.h"
#include "testutil.h"

#include "attn.h"
#include "attn_chapter.h"
#include "attn_interp.h"
#include "attn_io.h"
#include "attn_machine.h"
#include "attn_viz.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ----------------------------------------------------------------- helpers */

/* Under LeakSanitizer: the picture libraries' own leaks (testutil.h). */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) { return TEST_PICTURE_LIBRARY_LEAKS; }

/* Skips the calling test (with a message) when this build draws no pictures. */
#define require_pictures()                                                                        \
    do {                                                                                          \
        if (!attn_pictures_available()) {                                                         \
            print_message("skipped: libattn was built without cairo, so it draws no pictures\n"); \
            skip();                                                                               \
        }                                                                                         \
    } while (0)

static bool have_tool(const char *name) {
    char cmd[256];
    snprintf(cmd, sizeof cmd, "command -v %s >/dev/null 2>&1", name);
    return system(cmd) == 0;
}

static uint32_t crc32_of(const uint8_t *p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
    }
    return c ^ 0xFFFFFFFFu;
}

static uint32_t be32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Checks a PNG file's structure (signature, chunk CRCs, IHDR first, at least
 * one IDAT, IEND last) and returns its size. */
static void png_size(const char *path, uint32_t *width, uint32_t *height) {
    size_t n;
    uint8_t *png = test_read_file(path, &n);
    if (!png) fail_msg("%s was not written", path);
    static const uint8_t signature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
    if (n < 8 || memcmp(png, signature, 8) != 0) fail_msg("%s: no PNG signature", path);
    size_t at = 8;
    int idat = 0;
    bool ended = false;
    for (int chunk = 0; at + 12 <= n && !ended; chunk++) {
        uint32_t len = be32(png + at);
        if (at + 12 + len > n) fail_msg("%s: chunk %d runs past the end", path, chunk);
        const uint8_t *type = png + at + 4;
        if (crc32_of(type, 4 + (size_t)len) != be32(png + at + 8 + len))
            fail_msg("%s: chunk %.4s has a bad CRC", path, (const char *)type);
        if (chunk == 0) {
            if (memcmp(type, "IHDR", 4) != 0 || len != 13) fail_msg("%s: the first chunk is not IHDR", path);
            *width = be32(type + 4);
            *height = be32(type + 8);
        }
        idat += memcmp(type, "IDAT", 4) == 0;
        ended = memcmp(type, "IEND", 4) == 0;
        at += 12 + len;
    }
    if (!ended || at != n || idat == 0) fail_msg("%s: no IDAT, or no IEND at the end", path);
    free(png);
}

/* Parses an SVG as XML with xmllint (libxml2-utils) and checks its root. */
static void check_svg(const char *path) {
    size_t n;
    char *svg = test_read_file(path, &n);
    if (!svg) fail_msg("%s was not written", path);
    if (!strstr(svg, "<svg")) fail_msg("%s: no <svg element", path);
    free(svg);
    if (!have_tool("xmllint")) {
        print_message("note: xmllint (libxml2-utils) not installed; %s not parsed as XML\n", path);
        return;
    }
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "xmllint --noout '%s'", path);
    if (system(cmd) != 0) fail_msg("%s is not well-formed XML (xmllint --noout failed)", path);
}

/* Page objects of a PDF: "/Type /Page" not followed by "s" (cairo writes
 * page dictionaries uncompressed); pdfinfo (poppler-utils) must agree. */
static int pdf_pages(const char *path) {
    size_t n;
    char *pdf = test_read_file(path, &n);
    if (!pdf) fail_msg("%s was not written", path);
    if (n < 5 || memcmp(pdf, "%PDF-", 5) != 0) fail_msg("%s: no %%PDF- header", path);
    int pages = 0;
    static const char key[] = "/Type /Page";
    for (size_t i = 0; i + sizeof key - 1 < n; i++)
        if (memcmp(pdf + i, key, sizeof key - 1) == 0 && pdf[i + sizeof key - 1] != 's') pages++;
    free(pdf);
    if (have_tool("pdfinfo")) {
        char cmd[1024], line[256];
        snprintf(cmd, sizeof cmd, "pdfinfo '%s' 2>/dev/null", path);
        FILE *f = popen(cmd, "r");
        assert_non_null(f);
        int reported = -1;
        while (fgets(line, sizeof line, f))
            if (strncmp(line, "Pages:", 6) == 0) reported = atoi(line + 6);
        pclose(f);
        if (reported != pages) fail_msg("%s: pdfinfo says %d pages, the file has %d page objects", path, reported, pages);
    }
    return pages;
}

/* Causal weights of H heads over L positions with shares depending on the
 * head: row i of head h gives key j <= i a share proportional to 1 + h*j. */
static float *causal_weights(int64_t heads, int64_t len, uint8_t **visible) {
    float *w = calloc((size_t)(heads * len * len), sizeof *w);
    *visible = calloc((size_t)(heads * len * len), 1);
    assert_true(w && *visible);
    for (int64_t h = 0; h < heads; h++)
        for (int64_t i = 0; i < len; i++) {
            double sum = 0;
            for (int64_t j = 0; j <= i; j++) sum += 1.0 + (double)(h * j);
            for (int64_t j = 0; j <= i; j++) {
                w[(h * len + i) * len + j] = (float)((1.0 + (double)(h * j)) / sum);
                (*visible)[(h * len + i) * len + j] = 1;
            }
        }
    return w;
}

/* -------------------------------------------------------------- heat maps */

static const char *const apple[7] = {"我", "吃", "了", "一", "个", "苹", "果"};

static void heatmap_png_size_follows_the_layout(void **state) {
    (void)state;
    require_pictures();
    uint8_t *visible;
    float *w = causal_weights(2, 7, &visible);
    attn_heatmap_options opt = {.struct_size = sizeof(attn_heatmap_options), .query_labels = apple, .visible = visible, .cell = 30, .pixel_scale = 1};
    uint32_t w1, h1, w2, h2, w1x2, h1x2;

    assert_ok(attn_heatmap_write(test_path("one.png"), w, 1, 7, 7, &opt));
    png_size(test_path("one.png"), &w1, &h1);
    /* the grid of cells alone is 7 x 30 points; labels, title, legend add more */
    assert_true(w1 > 7 * 30 && h1 > 7 * 30 && w1 < 7 * 30 + 400 && h1 < 7 * 30 + 200);

    assert_ok(attn_heatmap_write(test_path("two.png"), w, 2, 7, 7, &opt));
    png_size(test_path("two.png"), &w2, &h2);
    assert_true(w2 >= w1 + 7 * 30); /* two heads side by side, one legend */
    assert_int_equal(h2, h1);

    opt.pixel_scale = 2;
    assert_ok(attn_heatmap_write(test_path("one@2x.png"), w, 1, 7, 7, &opt));
    png_size(test_path("one@2x.png"), &w1x2, &h1x2);
    assert_true(w1x2 >= 2 * w1 - 2 && w1x2 <= 2 * w1); /* ceil(2x) vs 2 ceil(x) */
    assert_true(h1x2 >= 2 * h1 - 2 && h1x2 <= 2 * h1);

    opt.columns = 1; /* the same two heads stacked */
    opt.pixel_scale = 1;
    assert_ok(attn_heatmap_write(test_path("stacked.png"), w, 2, 7, 7, &opt));
    uint32_t ws, hs;
    png_size(test_path("stacked.png"), &ws, &hs);
    assert_int_equal(ws, w1);
    assert_true(hs >= 2 * h1 - 60);
    free(w);
    free(visible);
}

static void heatmap_svg_is_well_formed_xml(void **state) {
    (void)state;
    require_pictures();
    uint8_t *visible;
    float *w = causal_weights(3, 7, &visible);
    attn_heatmap_options opt = {.struct_size = sizeof(attn_heatmap_options), .query_labels = apple, .visible = visible, .title = "<causal> & \"quoted\"",
                                .lang = "zh"};
    assert_ok(attn_heatmap_write(test_path("map.svg"), w, 3, 7, 7, &opt));
    check_svg(test_path("map.svg"));
    free(w);
    free(visible);

    /* a large map goes in as one image per head: still XML, and small */
    const int64_t L = 300;
    float *big = calloc((size_t)(L * L), sizeof *big);
    assert_non_null(big);
    for (int64_t i = 0; i < L; i++) big[i * L + i] = 1;
    assert_ok(attn_heatmap_write(test_path("big.svg"), big, 1, L, L, NULL));
    check_svg(test_path("big.svg"));
    size_t n;
    free(test_read_file(test_path("big.svg"), &n));
    assert_true(n < 2 * 1024 * 1024);
    free(big);
}

static void heatmap_pdf_has_one_page_per_head(void **state) {
    (void)state;
    require_pictures();
    uint8_t *visible;
    float *w = causal_weights(3, 5, &visible);
    const int64_t ids[3] = {0, 4, 7};
    attn_heatmap_options opt = {.struct_size = sizeof(attn_heatmap_options), .visible = visible, .head_ids = ids};
    for (int64_t heads = 1; heads <= 3; heads++) {
        assert_ok(attn_heatmap_write(test_path("map.pdf"), w, heads, 5, 5, &opt));
        assert_int_equal(pdf_pages(test_path("map.pdf")), heads);
    }
    free(w);
    free(visible);
}

static void heatmap_cross_attention_and_scores(void **state) {
    (void)state;
    require_pictures();
    /* 2 queries x 5 keys, labels on both axes, and a score table whose -inf
     * cells count as hidden (as attn_sdpa_scores writes them) */
    const char *const q[2] = {"apple", "computer"};
    const char *const k[5] = {"this", "computer", "comes", "from", "Apple"};
    float scores[10] = {0.5f, 1.0f, -2.0f, 0.0f, 3.0f, -INFINITY, 2.0f, 1.0f, -INFINITY, 0.25f};
    attn_heatmap_options opt = {.struct_size = sizeof(attn_heatmap_options), .query_labels = q, .key_labels = k, .values = 1};
    assert_ok(attn_heatmap_write(test_path("cross.png"), scores, 1, 2, 5, &opt));
    uint32_t w, h;
    png_size(test_path("cross.png"), &w, &h);
    assert_true(w > h);
}

static void heatmap_refuses_bad_input_and_leaves_no_file(void **state) {
    (void)state;
    require_pictures();
    float w[4] = {1, 0, 0.5f, 0.5f};
    assert_refused(attn_heatmap_write(test_path("map.gif"), w, 1, 2, 2, NULL), ATTN_ERR_INVALID_ARGUMENT,
                   "map.gif");
    assert_refused(attn_heatmap_write(test_path("map.png"), w, 0, 2, 2, NULL), ATTN_ERR_SHAPE, "at least 1");
    assert_refused(attn_heatmap_write(test_path("map.png"), NULL, 1, 2, 2, NULL), ATTN_ERR_INVALID_ARGUMENT,
                   "NULL");
    assert_refused(attn_heatmap_write(NULL, w, 1, 2, 2, NULL), ATTN_ERR_INVALID_ARGUMENT, "path");
    attn_heatmap_options bad = {.struct_size = sizeof(attn_heatmap_options), .cell = -1};
    assert_refused(attn_heatmap_write(test_path("map.png"), w, 1, 2, 2, &bad), ATTN_ERR_INVALID_ARGUMENT,
                   "cell");

    /* a NaN is refused and the existing file is left as it was */
    assert_int_equal(test_write_file(test_path("keep.png"), "old", 3), 0);
    float nan_w[4] = {1, 0, NAN, 0.5f};
    assert_refused(attn_heatmap_write(test_path("keep.png"), nan_w, 1, 2, 2, NULL), ATTN_ERR_NONFINITE,
                   "weights[0, 1, 0] is NaN");
    size_t n;
    char *kept = test_read_file(test_path("keep.png"), &n);
    assert_true(n == 3 && memcmp(kept, "old", 3) == 0);
    free(kept);

    /* a directory that does not exist: an I/O error naming the path */
    assert_refused(attn_heatmap_write(test_path("no/such/dir/map.png"), w, 1, 2, 2, NULL), ATTN_ERR_IO,
                   "no/such/dir/map.png");
}

/* ---------------------------------------------------------------- figures */

static void chapter_figures_in_every_format(void **state) {
    (void)state;
    require_pictures();
    static const char *const langs[2] = {"en", "zh"};
    char name[64];
    for (int figure = 1; figure <= 3; figure++)
        for (int l = 0; l < 2; l++) {
            snprintf(name, sizeof name, "figure%d-%s.png", figure, langs[l]);
            assert_ok(attn_chapter_figure_write(test_path(name), figure, langs[l]));
            uint32_t w, h;
            png_size(test_path(name), &w, &h);
            assert_true(w >= 1500 && h >= 600); /* drawn at 2 pixels per point */
            snprintf(name, sizeof name, "figure%d-%s.svg", figure, langs[l]);
            assert_ok(attn_chapter_figure_write(test_path(name), figure, langs[l]));
            check_svg(test_path(name));
            snprintf(name, sizeof name, "figure%d-%s.pdf", figure, langs[l]);
            assert_ok(attn_chapter_figure_write(test_path(name), figure, langs[l]));
            assert_int_equal(pdf_pages(test_path(name)), 1);
        }
    assert_refused(attn_chapter_figure_write(test_path("f.png"), 4, NULL), ATTN_ERR_INVALID_ARGUMENT,
                   "figure must be 1, 2 or 3");
    assert_refused(attn_chapter_figure_write(test_path("f.png"), 1, "fr"), ATTN_ERR_INVALID_ARGUMENT, "fr");
    assert_refused(attn_chapter_figure_write(test_path("f.jpg"), 1, NULL), ATTN_ERR_INVALID_ARGUMENT, "f.jpg");
}

/* The figures show the chapter's numbers: its fractions, outputs and shapes
 * appear in the text of the PDF (pdftotext from poppler-utils reads it back;
 * cairo embeds the font with its Unicode map). */
static void chapter_figures_show_the_chapter_numbers(void **state) {
    (void)state;
    require_pictures();
    if (!have_tool("pdftotext")) {
        print_message("skipped: pdftotext (poppler-utils) not installed\n");
        skip();
    }
    static const char *const expected[3][6] = {
        {"2/5", "1/4", "1/2", "0.75", "3×2", "3×3"},
        {"1.5", "0.75", "1.2", "0.8", "2/5", "1/4"},
        {"1/3", "2/3", "3/5", "ln2", "−∞", "2/3, 2/3"},
    };
    for (int figure = 1; figure <= 3; figure++) {
        char pdf[64], cmd[512];
        snprintf(pdf, sizeof pdf, "numbers%d.pdf", figure);
        assert_ok(attn_chapter_figure_write(test_path(pdf), figure, "en"));
        snprintf(cmd, sizeof cmd, "pdftotext -layout '%s' '%s.txt'", test_path(pdf), test_path(pdf));
        assert_int_equal(system(cmd), 0);
        snprintf(cmd, sizeof cmd, "%s.txt", test_path(pdf));
        char *text = test_read_file(cmd, NULL);
        assert_non_null(text);
        for (int k = 0; k < 6; k++)
            if (!strstr(text, expected[figure - 1][k]))
                fail_msg("figure %d does not show \"%s\"; its text:\n%s", figure, expected[figure - 1][k], text);
        free(text);
    }
}

static void pictures_off_says_unsupported(void **state) {
    (void)state;
    if (attn_pictures_available()) {
        print_message("skipped: this build draws pictures (the no-cairo stubs are not compiled)\n");
        skip();
    }
    float w[1] = {1};
    assert_refused(attn_heatmap_write(test_path("m.png"), w, 1, 1, 1, NULL), ATTN_ERR_UNSUPPORTED, "cairo");
    assert_refused(attn_chapter_figure_write(test_path("f.png"), 1, NULL), ATTN_ERR_UNSUPPORTED, "cairo");
    const double y[1] = {1};
    assert_refused(attn_lineplot_write(test_path("l.png"), y, 1, NULL), ATTN_ERR_UNSUPPORTED, "cairo");
}

/* A line plot: drawn in every format (the SVG holds its title), refusals
 * name the problem. */
static void lineplot_draws_and_refuses(void **state) {
    (void)state;
    require_pictures();
    const double y[5] = {1.0, 0.98, 0.92, 0.75, 0.55};
    attn_lineplot_options opt = ATTN_LINEPLOT_OPTIONS_INIT;
    opt.title = "cosine 苹果";
    opt.x_label = "layer";
    opt.y_label = "cosine";
    static const char *const names[] = {"line.png", "line.svg", "line.pdf"};
    for (int i = 0; i < 3; i++) {
        assert_ok(attn_lineplot_write(test_path(names[i]), y, 5, &opt));
        size_t n = 0;
        char *bytes = test_read_file(test_path(names[i]), &n);
        assert_true(n > 500);
        free(bytes);
    }
    assert_ok(attn_lineplot_write(test_path("one.png"), y, 1, NULL));
    const double bad[2] = {0.5, NAN};
    assert_refused(attn_lineplot_write(test_path("bad.png"), bad, 2, NULL), ATTN_ERR_INVALID_ARGUMENT, "point 1");
    assert_refused(attn_lineplot_write(test_path("bad.txt"), y, 5, NULL), ATTN_ERR_INVALID_ARGUMENT, "format");
    assert_refused(attn_lineplot_write(test_path("bad.png"), y, 0, NULL), ATTN_ERR_INVALID_ARGUMENT, "0 points");
    opt.ymin = 1, opt.ymax = 0;
    assert_refused(attn_lineplot_write(test_path("bad.png"), y, 5, &opt), ATTN_ERR_INVALID_ARGUMENT, "ymin");
}

/* ------------------------------------------------------------ attn map CLI */

static void cli_map_draws_and_names_errors(void **state) {
    (void)state;
    require_pictures();
    uint8_t *visible;
    float *w = causal_weights(2, 3, &visible);
    const int64_t shape3[3] = {2, 3, 3}, shape4[4] = {1, 2, 3, 3};
    test_save_f32(test_path("w3.npy"), 3, shape3, w);
    test_save_f32(test_path("w4.npy"), 4, shape4, w);
    test_cli_expect(0, "", "map --weights '%s' --causal --tokens '我,吃,了' -o '%s'", test_path("w3.npy"), test_path("m.png"));
    uint32_t pw, ph;
    png_size(test_path("m.png"), &pw, &ph);
    test_cli_expect(0, "", "map --weights '%s' --heads 1 --causal -o '%s'", test_path("w4.npy"), test_path("m.svg"));
    check_svg(test_path("m.svg"));
    test_cli_expect(0, "", "map --weights '%s' --heads 0-1 -o '%s' --title 'two heads'", test_path("w3.npy"),
                    test_path("m.pdf"));
    assert_int_equal(pdf_pages(test_path("m.pdf")), 2);
    test_cli_expect(0, "usage: attn map", "map --help");

    test_cli_expect(1, "head 2 is out of range", "map --weights '%s' --heads 0,2 -o '%s'", test_path("w3.npy"), test_path("x.png"));
    test_cli_expect(1, "--tokens has 2 tokens but there are 3", "map --weights '%s' --tokens a,b -o '%s'", test_path("w3.npy"),
                    test_path("x.png"));
    test_cli_expect(1, "--batch 1 is out of range", "map --weights '%s' --batch 1 -o '%s'", test_path("w4.npy"), test_path("x.png"));
    test_cli_expect(1, "missing.npy", "map --weights '%s' -o '%s'", test_path("missing.npy"), test_path("x.png"));
    test_cli_expect(2, "must end in .png, .svg or .pdf", "map --weights '%s' -o '%s'", test_path("w3.npy"), test_path("x.gif"));
    test_cli_expect(2, "unknown option '--bogus'", "map --weights '%s' --bogus -o '%s'", test_path("w3.npy"), test_path("x.png"));
    test_cli_expect(2, "--heads expects indices", "map --weights '%s' --heads 1-0 -o '%s'", test_path("w3.npy"), test_path("x.png"));
    test_cli_expect(2, "missing --weights", "map -o '%s'", test_path("x.png"));
    assert_false(test_file_exists(test_path("x.png")));
    free(w);
    free(visible);
}


/* pdftotext of a PDF (malloc'd), or NULL when poppler-utils is missing. */
static char *pdf_text(const char *pdf) {
    if (!have_tool("pdftotext")) return NULL;
    char cmd[1024], txt[600];
    snprintf(txt, sizeof txt, "%s.txt", pdf);
    snprintf(cmd, sizeof cmd, "pdftotext -layout '%s' '%s'", pdf, txt);
    assert_int_equal(system(cmd), 0);
    char *text = test_read_file(txt, NULL);
    assert_non_null(text);
    return text;
}

/* Maps [layers, heads, T, T] of causal rows whose shares grow with the key. */
static float *layered_maps(int64_t layers, int64_t heads, int64_t T) {
    float *w = calloc((size_t)(layers * heads * T * T), sizeof *w);
    assert_non_null(w);
    for (int64_t m = 0; m < layers * heads; m++)
        for (int64_t i = 0; i < T; i++) {
            double sum = 0;
            for (int64_t j = 0; j <= i; j++) sum += 1.0 + (double)((m + j) % 7);
            for (int64_t j = 0; j <= i; j++) w[(m * T + i) * T + j] = (float)((1.0 + (double)((m + j) % 7)) / sum);
        }
    return w;
}

/* `attn map --layer`: a layer x head grid in every format (a PDF page per
 * map, titled with its layer and head); maps over 64 positions get the
 * automatic scale and the colour bar says so; --vmax auto and a fixed
 * --vmax are stated too; a decode row [H, 1, S] is a labelled strip. */
static void cli_map_layer_grid_scale_and_decode_row(void **state) {
    (void)state;
    require_pictures();
    enum { NL = 3, H = 2, T = 80 };
    float *w = layered_maps(NL, H, T);
    const int64_t shape[4] = {NL, H, T, T};
    test_save_f32(test_path("layers.npy"), 4, shape, w);
    test_cli_expect(0, "3 layers x 2 heads of 80 x 80, colour scale 0 to the 99th percentile",
                    "map --weights '%s' --layer all --causal -o '%s'", test_path("layers.npy"), test_path("grid.png"));
    uint32_t gw, gh, ow, oh;
    png_size(test_path("grid.png"), &gw, &gh);
    test_cli_expect(0, "", "map --weights '%s' --layer 1 --head 0 --causal -o '%s'", test_path("layers.npy"), test_path("one.png"));
    png_size(test_path("one.png"), &ow, &oh);
    assert_true(gw > ow && gh > 2 * oh); /* three rows of two panels */
    test_cli_expect(0, "", "map --weights '%s' --layer all --causal -o '%s'", test_path("layers.npy"), test_path("grid.svg"));
    check_svg(test_path("grid.svg"));
    test_cli_expect(0, "", "map --weights '%s' --layer 0,2 --causal -o '%s'", test_path("layers.npy"), test_path("grid.pdf"));
    assert_int_equal(pdf_pages(test_path("grid.pdf")), 4);
    char *text = pdf_text(test_path("grid.pdf"));
    if (text) {
        if (!strstr(text, "layer 2 · head 1") || !strstr(text, "the 99th percentile of"))
            fail_msg("the PDF does not title its maps by layer and head, or hides its scale:\n%s", text);
        free(text);
    }
    test_cli_expect(0, "", "map --weights '%s' --layer 0 --vmax 0.25 --causal -o '%s'", test_path("layers.npy"),
                    test_path("fixed.pdf"));
    if ((text = pdf_text(test_path("fixed.pdf")))) {
        if (!strstr(text, "scale: given 0 – 0.25")) fail_msg("the fixed scale is not stated:\n%s", text);
        free(text);
    }
    const int64_t small[4] = {NL, H, 8, 8};
    float *w8 = layered_maps(NL, H, 8);
    test_save_f32(test_path("small.npy"), 4, small, w8);
    free(w8);
    test_cli_expect(0, "", "map --weights '%s' --layer 0 --head 0 --causal --vmax auto -o '%s'", test_path("small.npy"),
                    test_path("auto.pdf"));
    if ((text = pdf_text(test_path("auto.pdf")))) {
        if (!strstr(text, "the 99th percentile of")) fail_msg("--vmax auto is not stated:\n%s", text);
        free(text);
    }
    test_cli_expect(0, "", "map --weights '%s' --layer 0 --head 0 --causal -o '%s'", test_path("small.npy"), test_path("unit.pdf"));
    if ((text = pdf_text(test_path("unit.pdf")))) {
        if (!strstr(text, "scale: fixed 0 – 1")) fail_msg("a short map's [0, 1] scale is not stated:\n%s", text);
        free(text);
    }

    /* one decode step over 150 keys: a strip wrapped every 64 keys, every key labelled */
    enum { S = 150 };
    float row[2 * S];
    for (int h = 0; h < 2; h++)
        for (int j = 0; j < S; j++) row[h * S + j] = (float)((j % 10 == h ? 10.0 : 1.0) / (S + 9.0 * 15));
    const int64_t rshape[3] = {2, 1, S};
    test_save_f32(test_path("row.npy"), 3, rshape, row);
    FILE *f = fopen(test_path("keys.txt"), "w");
    assert_non_null(f);
    for (int j = 0; j < S; j++) fprintf(f, "k%d\n", j);
    fclose(f);
    test_cli_expect(0, "2 heads of 1 x 150", "map --weights '%s' --tokens 果 --key-tokens @'%s' -o '%s'", test_path("row.npy"),
                    test_path("keys.txt"), test_path("row.png"));
    uint32_t rw, rh;
    png_size(test_path("row.png"), &rw, &rh);
    assert_true(rw < 2 * 1200 * 2 && rh > 3 * 20); /* wrapped, not 150 cells in one line */
    test_cli_expect(0, "", "map --weights '%s' --tokens 果 --key-tokens @'%s' -o '%s'", test_path("row.npy"), test_path("keys.txt"),
                    test_path("row.pdf"));
    assert_int_equal(pdf_pages(test_path("row.pdf")), 2);
    if ((text = pdf_text(test_path("row.pdf")))) {
        if (!strstr(text, "k0") || !strstr(text, "k149") || !strstr(text, "k64") || !strstr(text, "果"))
            fail_msg("the decode row does not label every key and its query:\n%s", text);
        free(text);
    }
    test_cli_expect(0, "", "map --weights '%s' -o '%s'", test_path("row.npy"), test_path("row.svg"));
    check_svg(test_path("row.svg"));

    test_cli_expect(2, "--vmax auto starts the scale at 0", "map --weights '%s' --vmin 0.1 --vmax auto -o '%s'",
                    test_path("layers.npy"), test_path("x.png"));
    test_cli_expect(1, "which holds one layer", "map --weights '%s' --layer 1 -o '%s'", test_path("row.npy"), test_path("x.png"));
    test_cli_expect(1, "--layer: layer 3 is out of range", "map --weights '%s' --layer 3 -o '%s'", test_path("layers.npy"),
                    test_path("x.png"));
    test_cli_expect(2, "missing --weights", "map --text hi -o '%s'", test_path("x.png"));
    test_cli_expect(2, "are for --weights", "map --model m.gguf --text hi --tokens a -o '%s'", test_path("x.png"));
    assert_false(test_file_exists(test_path("x.png")));
    free(w);
}

/* `attn map --model` on Gemma 3 270M (skipped when the file is absent): a
 * grid of two layers x its 4 heads, labelled with its tokens. */
static void cli_map_of_a_model_run(void **state) {
    (void)state;
    require_pictures();
    char model[600];
    const char *dir = getenv("ATTN_MODEL_DIR"), *home = getenv("HOME");
    if (dir && *dir) snprintf(model, sizeof model, "%s/gemma-3-270m-q4_k_m.gguf", dir);
    else snprintf(model, sizeof model, "%s/.cache/attn/models/gemma-3-270m-q4_k_m.gguf", home ? home : "");
    struct stat st;
    if (stat(model, &st) != 0) {
        print_message("skipped: %s is not there (scripts/fetch-models.sh fetches it)\n", model);
        skip();
    }
    char *out = NULL;
    int rc = test_run_cli(&out, "map --model '%s' --text 我吃了一个苹果 --layer 0-1 -o '%s'", model, test_path("gemma.pdf"));
    if (rc != 0 || !strstr(out, "wrote")) fail_msg("attn map --model: exit %d\n%s", rc, out);
    free(out);
    assert_int_equal(pdf_pages(test_path("gemma.pdf")), 8);
    char *text = pdf_text(test_path("gemma.pdf"));
    if (text) {
        if (!strstr(text, "苹果") || !strstr(text, "<bos>") || !strstr(text, "layer 1 · head 3"))
            fail_msg("the model's tokens or the panel titles are missing:\n%s", text);
        free(text);
    }
    rc = test_run_cli(&out, "map --model '%s' --text 我吃了一个苹果 --layer 5 -o '%s'", model, test_path("gemma.png"));
    if (rc != 0) fail_msg("attn map --model: exit %d\n%s", rc, out);
    free(out);
    uint32_t w, h;
    png_size(test_path("gemma.png"), &w, &h);
}

/* `attn demo --figures DIR` writes the three figures (the demo wires in
 * demo_write_figures from tools/demo_figures.c). */
static void cli_demo_writes_the_three_figures(void **state) {
    (void)state;
    require_pictures();
    char *out = NULL;
    test_run_cli(&out, "demo --help");
    bool wired = strstr(out, "--figures") != NULL;
    free(out);
    if (!wired) {
        print_message("skipped: attn demo has no --figures option yet\n");
        skip();
    }
    int rc = test_run_cli(&out, "demo --lang zh --figures '%s'", test_path("figures"));
    if (rc != 0) fail_msg("attn demo --figures: exit %d\n%s", rc, out);
    free(out);
    char name[64];
    for (int figure = 1; figure <= 3; figure++) {
        uint32_t w, h;
        snprintf(name, sizeof name, "figures/figure%d.png", figure);
        png_size(test_path(name), &w, &h);
        snprintf(name, sizeof name, "figures/figure%d.svg", figure);
        check_svg(test_path(name));
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(heatmap_png_size_follows_the_layout),
        cmocka_unit_test(heatmap_svg_is_well_formed_xml),
        cmocka_unit_test(heatmap_pdf_has_one_page_per_head),
        cmocka_unit_test(heatmap_cross_attention_and_scores),
        cmocka_unit_test(heatmap_refuses_bad_input_and_leaves_no_file),
        cmocka_unit_test(chapter_figures_in_every_format),
        cmocka_unit_test(chapter_figures_show_the_chapter_numbers),
        cmocka_unit_test(lineplot_draws_and_refuses),
        cmocka_unit_test(pictures_off_says_unsupported),
        cmocka_unit_test(cli_map_draws_and_names_errors),
        cmocka_unit_test(cli_demo_writes_the_three_figures),
        cmocka_unit_test(cli_map_layer_grid_scale_and_decode_row),
        cmocka_unit_test(cli_map_of_a_model_run),
    };
    test_suppress_picture_leaks_in_children();
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    test_tmpdir_cleanup();
    return failed;
}
