/*
 * test_report.c — the self-contained HTML report (attn_report_write_html,
 * `attn report`), opened in headless Chromium.
 *
 * The page has a self-test hook: with #selftest&cells=H:I:J;... in its URL it
 * hovers those heat-map cells the way a mouse does and writes what the
 * tooltip showed into <pre id="selftest">; window.onerror and console.error
 * land in <pre id="errors">.  `chromium --dump-dom` prints the DOM after the
 * page ran, so a test reads both.  Each hovered weight must read back as
 * the very float the library computed (strtof of the tooltip's number,
 * compared bit for bit).  A screenshot is decoded with zlib and must hold
 * more than a handful of colours.  A model's run with --source-text (a tiny
 * qwen2 GGUF written here, so it always runs) has its path table read
 * through the page's selectors (#selftest&paths=...) and checked against
 * Figure 2's rule written out in double on the decoder's own q, k, v.
 * Without Chromium these tests are skipped with a message (set
 * ATTN_CHROMIUM to name the browser's binary).
 *
 * Shape legend: q, k [L, H, D]; weights [H, L, S].
 */
#include "cli_files.h"
#include "testutil.h"
#include "tolerances.h"

#include "attn.h"
#include "attn_analysis.h"
#include "attn_chapter.h"
#include "attn_decoder.h"
#include "attn_interp.h"
#include "attn_io.h"
#include "attn_machine.h"
#include "attn_model_interp.h"
#include "attn_tokenizer.h"
#include "attn_viz.h"
#include "gguf_builder.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#ifdef ATTN_TEST_HAVE_ZLIB
#include <zlib.h>
#endif

/* ----------------------------------------------------------------- helpers */

/* The browser: $ATTN_CHROMIUM, else the first of the usual names on PATH. */
static const char *chromium(void) {
    static char found[256];
    static bool looked;
    if (!looked) {
        looked = true;
        const char *env = getenv("ATTN_CHROMIUM");
        if (env && *env) {
            snprintf(found, sizeof found, "%s", env);
        } else {
            static const char *const names[] = {"chromium", "chromium-browser", "google-chrome-stable",
                                                "google-chrome"};
            for (size_t i = 0; i < sizeof names / sizeof names[0] && !found[0]; i++) {
                char cmd[128];
                snprintf(cmd, sizeof cmd, "command -v %s >/dev/null 2>&1", names[i]);
                if (system(cmd) == 0) snprintf(found, sizeof found, "%s", names[i]);
            }
        }
    }
    return found[0] ? found : NULL;
}

#define require_chromium()                                                                        \
    do {                                                                                          \
        if (!chromium()) {                                                                        \
            print_message("skipped: no Chromium found (Debian: apt-get install chromium; or set ATTN_CHROMIUM)\n"); \
            skip();                                                                               \
        }                                                                                         \
    } while (0)

/* Runs headless Chromium on file://path + fragment with the given action
 * ("--dump-dom" or "--screenshot=FILE --window-size=W,H") and returns its
 * standard output (malloc'd). */
static char *run_chromium(const char *action, const char *path, const char *fragment) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "timeout 120 %s --headless --no-sandbox --disable-gpu --hide-scrollbars --no-first-run "
             "--user-data-dir='%s' %s 'file://%s%s' 2>/dev/null",
             chromium(), test_path("chromium-profile"), action, path, fragment);
    FILE *f = popen(cmd, "r");
    assert_non_null(f);
    size_t cap = 1 << 16, n = 0, got;
    char *out = malloc(cap);
    assert_non_null(out);
    while ((got = fread(out + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (cap - n < 2) {
            out = realloc(out, cap *= 2);
            assert_non_null(out);
        }
    }
    out[n] = 0;
    int st = pclose(f);
    if (st != 0) fail_msg("chromium exited with status %d:\n%s", st, cmd);
    return out;
}

/* The text of <pre id="ID"> in a dumped DOM, with &amp; &lt; &gt; &quot;
 * decoded (malloc'd; "" when the element is empty). */
static char *pre_text(const char *dom, const char *id) {
    char open[64];
    snprintf(open, sizeof open, "<pre id=\"%s\">", id);
    const char *start = strstr(dom, open);
    if (!start) fail_msg("the page has no <pre id=\"%s\">:\n%.2000s", id, dom);
    start += strlen(open);
    const char *end = strstr(start, "</pre>");
    assert_non_null(end);
    char *text = malloc((size_t)(end - start) + 1);
    assert_non_null(text);
    size_t n = 0;
    static const struct { const char *entity; char c; } entities[] = {
        {"&amp;", '&'}, {"&lt;", '<'}, {"&gt;", '>'}, {"&quot;", '"'}, {"&#39;", '\''}};
    for (const char *p = start; p < end;) {
        bool decoded = false;
        for (size_t e = 0; e < sizeof entities / sizeof entities[0] && !decoded; e++)
            if (strncmp(p, entities[e].entity, strlen(entities[e].entity)) == 0) {
                text[n++] = entities[e].c;
                p += strlen(entities[e].entity);
                decoded = true;
            }
        if (!decoded) text[n++] = *p++;
    }
    text[n] = 0;
    return text;
}

/* Opens the report with #selftest&cells=..., checks that the page ran to the
 * end without errors, and returns the self-test's report (malloc'd). */
static char *selftest(const char *path, const char *cells) {
    char fragment[512];
    snprintf(fragment, sizeof fragment, "#selftest&cells=%s", cells);
    char *dom = run_chromium("--dump-dom", path, fragment);
    char *errors = pre_text(dom, "errors");
    if (*errors) fail_msg("the page reported errors:\n%s", errors);
    char *report = pre_text(dom, "selftest");
    if (!strstr(report, "status=done")) fail_msg("the self-test did not finish:\n%s", report);
    free(errors);
    free(dom);
    return report;
}

/* The weight the tooltip showed for cell a:h:i:j (layer index a, or -1 for
 * the three-number form h:i:j; "hidden" for a hidden cell), after checking
 * that the page switched to that layer and head and that the synthetic mouse
 * landed on that very cell. */
static void hovered_in(const char *report, int a, int h, int i, int j, char *out, size_t size) {
    char key[128];
    if (a < 0) snprintf(key, sizeof key, "cell %d:%d:%d shown=0:%d hovered=%d,%d weight=", h, i, j, h, i, j);
    else snprintf(key, sizeof key, "cell %d:%d:%d:%d shown=%d:%d hovered=%d,%d weight=", a, h, i, j, a, h, i, j);
    const char *at = strstr(report, key);
    if (!at) fail_msg("no line \"%s\": the page showed another layer or head, or the mouse landed elsewhere:\n%s",
                      key, report);
    at += strlen(key);
    size_t n = strcspn(at, " \n");
    if (n >= size) n = size - 1;
    memcpy(out, at, n);
    out[n] = 0;
}

static void hovered(const char *report, int h, int i, int j, char *out, size_t size) {
    hovered_in(report, -1, h, i, j, out, size);
}

/* The tooltip must show exactly the float the library computed (or the
 * test wrote): layer index a (-1: the three-number form), head h, cell i, j. */
static void assert_layer_shows_exactly(const char *report, int a, int h, int i, int j, float expected) {
    char shown[64];
    hovered_in(report, a, h, i, j, shown, sizeof shown);
    char *end;
    float value = strtof(shown, &end);
    uint32_t got_bits, want_bits;
    memcpy(&got_bits, &value, 4);
    memcpy(&want_bits, &expected, 4);
    if (*end || got_bits != want_bits)
        fail_msg("cell %d:%d:%d:%d: the tooltip shows \"%s\", expected %.9g", a, h, i, j, shown,
                 (double)expected);
}

static void assert_shows_exactly(const char *report, int h, int i, int j, float expected) {
    assert_layer_shows_exactly(report, -1, h, i, j, expected);
}

/* A report must not reach outside its own file. */
static void assert_self_contained(const char *path) {
    size_t n;
    char *html = test_read_file(path, &n);
    assert_non_null(html);
    static const char *const outside[] = {"http://", "https://", "<script src", "<link", "@import", "url("};
    for (size_t k = 0; k < sizeof outside / sizeof outside[0]; k++)
        if (strstr(html, outside[k])) fail_msg("%s refers outside itself (\"%s\")", path, outside[k]);
    free(html);
}

/* --------------------------------------------------- the chapter example */

/* The chapter's Q, K, V and the changed k2, v2 of Figure 2. */
typedef struct {
    float q[3][2], k[3][2], v[3][2], k2[3][2], v2[3][2];
} chapter_inputs;

static void chapter(chapter_inputs *c) {
    const float s = (float)(sqrt(2.0) * log(2.0));
    const chapter_inputs in = {{{1, 0}, {0, 1}, {1, 1}}, {{s, 0}, {0, s}, {s, s}}, {{2, 0}, {0, 1}, {2, 1}},
                               {{s, 0}, {0, 2 * s}, {s, s}}, {{2, 0}, {0, 2}, {2, 1}}};
    *c = in;
}

static void chapter_report_in_chromium(void **state) {
    (void)state;
    require_chromium();
    chapter_inputs c;
    chapter(&c);
    attn_tensor q = attn_tensor_2d(&c.q[0][0], 3, 2), k = attn_tensor_2d(&c.k[0][0], 3, 2),
                v = attn_tensor_2d(&c.v[0][0], 3, 2), k2 = attn_tensor_2d(&c.k2[0][0], 3, 2),
                v2 = attn_tensor_2d(&c.v2[0][0], 3, 2);
    float weights[9], out[6];
    attn_tensor o = attn_tensor_2d(out, 3, 2);
    assert_ok(attn_sdpa_forward(&q, &k, &v, NULL, &o, weights, NULL));
    attn_paths paths = {0};
    assert_ok(attn_sdpa_paths(&q, &k, &v, NULL, &k2, &v2, NULL, &paths));

    /* labels that try to break out of the page: a closing script tag, quotes,
     * an ampersand and a byte that is not UTF-8 */
    const char *const labels[3] = {"x1 </script><b>", "x2 \"q\" & 'a'", "x3 \xff"};
    attn_report r = {.struct_size = sizeof(attn_report), .title = "the chapter's example", .heads = 1, .len_q = 3, .len_kv = 3,
                     .weights = weights, .query_labels = labels, .paths = &paths};
    const char *path = test_path("chapter.html");
    assert_ok(attn_report_write_html(path, &r));
    attn_paths_free(&paths);
    assert_self_contained(path);

    char *report = selftest(path, "0:2:0;0:2:2;0:0:1");
    assert_shows_exactly(report, 0, 2, 0, weights[6]); /* 1/4 */
    assert_shows_exactly(report, 0, 2, 2, weights[8]); /* 1/2 */
    assert_shows_exactly(report, 0, 0, 1, weights[1]); /* 1/5 */
    if (!strstr(report, "query 2 “x3 \xef\xbf\xbd”  →  key 0 “x1 </script><b>”"))
        fail_msg("the tooltip does not name the token pair as given:\n%s", report);
    if (!strstr(report, "key 1 “x2 \"q\" & 'a'”")) fail_msg("quotes or & were mangled:\n%s", report);
    if (!strstr(report, "focus=q 2")) fail_msg("hovering query 2 in the token view did not focus it:\n%s", report);
    if (!strstr(report, "paths=yes")) fail_msg("the path table is missing:\n%s", report);
    free(report);
}

#ifdef ATTN_TEST_HAVE_ZLIB
static uint32_t be32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int paeth(int a, int b, int c) {
    int p = a + b - c, pa = abs(p - a), pb = abs(p - b), pc = abs(p - c);
    return pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
}

/* Decodes an 8-bit RGB or RGBA PNG (no interlace) and counts its distinct
 * colours, up to limit. */
static int png_colours(const char *path, int limit) {
    size_t n;
    uint8_t *png = test_read_file(path, &n);
    if (!png || n < 33 || memcmp(png + 12, "IHDR", 4) != 0) fail_msg("%s is not a PNG", path);
    const uint32_t width = be32(png + 16), height = be32(png + 20);
    const int depth = png[24], type = png[25], interlace = png[28];
    if (depth != 8 || (type != 2 && type != 6) || interlace)
        fail_msg("%s: unexpected PNG format (depth %d, colour type %d, interlace %d)", path, depth, type, interlace);
    const size_t bpp = type == 6 ? 4 : 3, stride = width * bpp;
    uint8_t *z = malloc(n);
    size_t zn = 0;
    for (size_t at = 8; at + 12 <= n;) {
        uint32_t len = be32(png + at);
        if (memcmp(png + at + 4, "IDAT", 4) == 0) {
            memcpy(z + zn, png + at + 8, len);
            zn += len;
        }
        at += 12 + len;
    }
    uLongf raw_len = (uLongf)((stride + 1) * height);
    uint8_t *raw = malloc(raw_len), *img = malloc(stride * height);
    assert_true(z && raw && img);
    if (uncompress(raw, &raw_len, z, (uLong)zn) != Z_OK || raw_len != (stride + 1) * height)
        fail_msg("%s: the image data do not inflate", path);
    for (uint32_t y = 0; y < height; y++) {
        const uint8_t filter = raw[y * (stride + 1)], *line = raw + y * (stride + 1) + 1;
        uint8_t *row = img + y * stride;
        const uint8_t *up = y ? row - stride : NULL;
        for (size_t x = 0; x < stride; x++) {
            int a = x >= bpp ? row[x - bpp] : 0, b = up ? up[x] : 0, c = up && x >= bpp ? up[x - bpp] : 0;
            int pred = filter == 0 ? 0 : filter == 1 ? a : filter == 2 ? b : filter == 3 ? (a + b) / 2 : paeth(a, b, c);
            row[x] = (uint8_t)(line[x] + pred);
        }
    }
    uint32_t *seen = malloc((size_t)limit * sizeof *seen);
    int colours = 0;
    for (size_t p = 0; p < (size_t)width * height && colours < limit; p++) {
        const uint8_t *px = img + p * bpp;
        uint32_t rgb = (uint32_t)px[0] << 16 | (uint32_t)px[1] << 8 | px[2];
        bool known = false;
        for (int k = 0; k < colours && !known; k++) known = seen[k] == rgb;
        if (!known) seen[colours++] = rgb;
    }
    free(seen);
    free(img);
    free(raw);
    free(z);
    free(png);
    return colours;
}
#endif

static void report_screenshot_is_not_blank(void **state) {
    (void)state;
    require_chromium();
#ifndef ATTN_TEST_HAVE_ZLIB
    print_message("skipped: built without zlib, so the screenshot cannot be decoded\n");
    skip();
#else
    chapter_inputs c;
    chapter(&c);
    attn_tensor q = attn_tensor_2d(&c.q[0][0], 3, 2), k = attn_tensor_2d(&c.k[0][0], 3, 2),
                v = attn_tensor_2d(&c.v[0][0], 3, 2);
    float weights[9], out[6];
    attn_tensor o = attn_tensor_2d(out, 3, 2);
    attn_sdpa_options opt = {.struct_size = sizeof(attn_sdpa_options), .causal = 1};
    assert_ok(attn_sdpa_forward(&q, &k, &v, &opt, &o, weights, NULL));
    uint8_t visible[9] = {1, 0, 0, 1, 1, 0, 1, 1, 1};
    attn_report r = {.struct_size = sizeof(attn_report), .heads = 1, .len_q = 3, .len_kv = 3, .weights = weights, .visible = visible};
    const char *path = test_path("shot.html");
    assert_ok(attn_report_write_html(path, &r));
    char action[600];
    snprintf(action, sizeof action, "--screenshot='%s' --window-size=1000,800", test_path("shot.png"));
    free(run_chromium(action, path, ""));
    int colours = png_colours(test_path("shot.png"), 64);
    if (colours < 16) fail_msg("the screenshot has only %d colours: the page looks blank", colours);
#endif
}

/* ------------------------------------------------- multi-head via the CLI */

static void cli_report_multi_head_causal_with_paths(void **state) {
    (void)state;
    require_chromium();
    enum { L = 5, DM = 4, H = 2, D = 3 };
    test_rng rng;
    test_rng_seed(&rng, 5);
    float x[L][DM], x2[L][DM], wq[DM][H * D], wk[DM][H * D], wv[DM][H * D], wo[H * D][DM];
    test_fill_normal(&rng, &x[0][0], L * DM, 1.0);
    test_fill_normal(&rng, &wq[0][0], DM * H * D, 1.0);
    test_fill_normal(&rng, &wk[0][0], DM * H * D, 1.0);
    test_fill_normal(&rng, &wv[0][0], DM * H * D, 1.0);
    test_fill_normal(&rng, &wo[0][0], H * D * DM, 1.0);
    memcpy(x2, x, sizeof x);
    x2[1][2] += 1.5f; /* change position 1 */
    const int64_t sx[2] = {L, DM}, sw[2] = {DM, H * D}, so[2] = {H * D, DM};
    test_save_f32(test_path("x.npy"), 2, sx, &x[0][0]);
    test_save_f32(test_path("x2.npy"), 2, sx, &x2[0][0]);
    test_save_f32(test_path("wq.npy"), 2, sw, &wq[0][0]);
    test_save_f32(test_path("wk.npy"), 2, sw, &wk[0][0]);
    test_save_f32(test_path("wv.npy"), 2, sw, &wv[0][0]);
    test_save_f32(test_path("wo.npy"), 2, so, &wo[0][0]);

    /* the weights attn mha computes, for comparison */
    attn_mha m = {.struct_size = sizeof(attn_mha), .d_model = DM, .heads = H, .head_dim = D, .d_out = DM,
                  .wq = &wq[0][0], .wk = &wk[0][0], .wv = &wv[0][0], .wo = &wo[0][0]};
    attn_sdpa_options opt = {.struct_size = sizeof(attn_sdpa_options), .causal = 1};
    float out[L][DM], weights[H][L][L];
    assert_ok(attn_mha_forward(&m, &x[0][0], 1, L, NULL, 0, &opt, &out[0][0], &weights[0][0][0], NULL));

    char *output = NULL;
    const char *path = test_path("mha.html");
    int rc = test_run_cli(&output, "report -x '%s' --wq '%s' --wk '%s' --wv '%s' --wo '%s' --heads %d --causal "
                          "--changed-x '%s' --tokens 我,吃,了,苹,果 --title 'two heads' --html '%s'",
                          test_path("x.npy"), test_path("wq.npy"), test_path("wk.npy"), test_path("wv.npy"),
                          test_path("wo.npy"), H, test_path("x2.npy"), path);
    if (rc != 0) fail_msg("attn report: exit %d\n%s", rc, output);
    free(output);
    assert_self_contained(path);

    char *report = selftest(path, "1:0:2;1:3:1;0:4:4");
    char shown[64];
    hovered(report, 1, 0, 2, shown, sizeof shown);
    assert_string_equal(shown, "hidden"); /* query 0 may not read key 2 */
    if (!strstr(report, "hidden by the mask")) fail_msg("a hidden cell's tooltip does not say so:\n%s", report);
    assert_shows_exactly(report, 1, 3, 1, weights[1][3][1]);
    assert_shows_exactly(report, 0, 4, 4, weights[0][4][4]);
    if (!strstr(report, "query 3 “苹”  →  key 1 “吃”")) fail_msg("the tokens are missing:\n%s", report);
    if (!strstr(report, "paths=yes module_output=yes")) fail_msg("the path tables are missing:\n%s", report);
    free(report);
}

/* ------------------------------------------------------ 512 x 16 heads */

static void large_report_stays_usable(void **state) {
    (void)state;
    require_chromium();
    enum { L = 512, H = 16, D = 16 };
    test_rng rng;
    test_rng_seed(&rng, 512);
    float *q = malloc(sizeof(float) * L * H * D), *k = malloc(sizeof(float) * L * H * D),
          *v = malloc(sizeof(float) * L * H * D), *out = malloc(sizeof(float) * L * H * D);
    float *weights = malloc(sizeof(float) * H * L * L);
    uint8_t *visible = malloc((size_t)H * L * L);
    assert_true(q && k && v && out && weights && visible);
    test_fill_normal(&rng, q, L * H * D, 1.0);
    test_fill_normal(&rng, k, L * H * D, 1.0);
    test_fill_normal(&rng, v, L * H * D, 1.0);
    attn_tensor qt = attn_tensor_3d(q, L, H, D), kt = attn_tensor_3d(k, L, H, D), vt = attn_tensor_3d(v, L, H, D),
                ot = attn_tensor_3d(out, L, H, D);
    attn_sdpa_options opt = {.struct_size = sizeof(attn_sdpa_options), .causal = 1};
    assert_ok(attn_sdpa_forward(&qt, &kt, &vt, &opt, &ot, weights, NULL));
    for (int64_t h = 0; h < H; h++)
        for (int64_t i = 0; i < L; i++)
            for (int64_t j = 0; j < L; j++) visible[(h * L + i) * L + j] = j <= i;
    attn_report r = {.struct_size = sizeof(attn_report), .title = "512 positions, 16 heads", .heads = H, .len_q = L, .len_kv = L,
                     .weights = weights, .visible = visible};
    const char *path = test_path("large.html");
    assert_ok(attn_report_write_html(path, &r));

    /* base64 float32: 4/3 x 4 bytes a visible weight (the hidden upper
     * triangle is not stored), plus the visibility bits and the page itself */
    size_t n;
    free(test_read_file(path, &n));
    const double data = 4.0 / 3.0 * 4.0 * H * L * (L + 1) / 2.0;
    if ((double)n < data || (double)n > data + 2.0 * 1024 * 1024)
        fail_msg("large.html is %zu bytes; expected about %.0f", n, data);

    char *report = selftest(path, "15:511:3;0:100:100;7:300:0;3:2:5");
    assert_shows_exactly(report, 15, 511, 3, weights[(15 * L + 511) * L + 3]);
    assert_shows_exactly(report, 0, 100, 100, weights[(0 * L + 100) * L + 100]);
    assert_shows_exactly(report, 7, 300, 0, weights[(7 * L + 300) * L + 0]);
    char shown[64];
    hovered(report, 3, 2, 5, shown, sizeof shown);
    assert_string_equal(shown, "hidden");
    if (!strstr(report, "heads=16 len_q=512 len_kv=512")) fail_msg("wrong sizes:\n%s", report);
    const char *colours = strstr(report, "map_colours=");
    assert_non_null(colours);
    if (atoi(colours + strlen("map_colours=")) < 16) fail_msg("the heat map looks blank:\n%s", report);
    free(report);
    free(q);
    free(k);
    free(v);
    free(out);
    free(weights);
    free(visible);
}


/* ------------------------------------------- maps made elsewhere, layers */

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Causal softmax rows of random scores: maps [layers, heads, T, T], every
 * visible row summing to 1, the upper triangle 0 (as transformers writes
 * output_attentions). */
static float *random_causal_maps(test_rng *rng, int64_t layers, int64_t heads, int64_t T) {
    float *w = calloc((size_t)(layers * heads * T * T), sizeof *w);
    assert_non_null(w);
    for (int64_t m = 0; m < layers * heads; m++)
        for (int64_t i = 0; i < T; i++) {
            float *row = w + (m * T + i) * T;
            double sum = 0;
            for (int64_t j = 0; j <= i; j++) sum += row[j] = (float)exp(3.0 * test_rng_normal(rng));
            for (int64_t j = 0; j <= i; j++) row[j] = (float)(row[j] / sum);
        }
    return w;
}

/* The page of a [layers, H, T, T] file: switching layer and head by the
 * selectors shows the very float the file holds, hidden cells say so, the
 * tokens label the cells; a chosen subset of layers keeps its numbers; a
 * 5-D file [layers, B, H, T, T] reads its batch. */
static void cli_report_of_a_layered_weights_file(void **state) {
    (void)state;
    require_chromium();
    enum { NL = 3, H = 2, T = 6 };
    test_rng rng;
    test_rng_seed(&rng, 12);
    float *w = random_causal_maps(&rng, NL, H, T);
    const int64_t shape[4] = {NL, H, T, T};
    test_save_f32(test_path("layers.npy"), 4, shape, w);
#define W(l, h, i, j) w[(((l) * H + (h)) * T + (i)) * T + (j)]
    char *out = NULL;
    const char *path = test_path("layers.html");
    int rc = test_run_cli(&out, "report --weights '%s' --layer all --causal --tokens 我,吃,了,一个,苹果,。 --html '%s'",
                          test_path("layers.npy"), path);
    if (rc != 0) fail_msg("attn report: exit %d\n%s", rc, out);
    free(out);
    assert_self_contained(path);
    char *report = selftest(path, "2:1:5:3;0:0:3:3;1:1:4:0;1:0:1:4");
    assert_layer_shows_exactly(report, 2, 1, 5, 3, W(2, 1, 5, 3));
    assert_layer_shows_exactly(report, 0, 0, 3, 3, W(0, 0, 3, 3));
    assert_layer_shows_exactly(report, 1, 1, 4, 0, W(1, 1, 4, 0));
    char shown[64];
    hovered_in(report, 1, 0, 1, 4, shown, sizeof shown);
    assert_string_equal(shown, "hidden");
    if (!strstr(report, "query 4 “苹果”  →  key 0 “我”") || !strstr(report, "(layer 1, head 1, base input)"))
        fail_msg("the tooltip does not name the tokens, layer and head:\n%s", report);
    if (!strstr(report, "layers=3 heads=2 len_q=6 len_kv=6")) fail_msg("wrong sizes:\n%s", report);
    free(report);

    /* layers 1 and 2, head 1: the page's first layer is the file's layer 1 */
    rc = test_run_cli(&out, "report --weights '%s' --layer 1-2 --head 1 --causal --html '%s'", test_path("layers.npy"),
                      path);
    if (rc != 0) fail_msg("attn report: exit %d\n%s", rc, out);
    free(out);
    report = selftest(path, "0:0:5:2;1:0:2:1");
    assert_layer_shows_exactly(report, 0, 0, 5, 2, W(1, 1, 5, 2));
    assert_layer_shows_exactly(report, 1, 0, 2, 1, W(2, 1, 2, 1));
    if (!strstr(report, "(layer 2, head 1, base input)")) fail_msg("the numbers of the layers are lost:\n%s", report);
    free(report);

    /* [layers, B = 2, H, T, T]: batch 1 is the second copy */
    float *w5 = malloc(sizeof(float) * 2 * NL * H * T * T);
    assert_non_null(w5);
    for (int64_t l = 0; l < NL; l++)
        for (int64_t b = 0; b < 2; b++)
            for (int64_t n = 0; n < H * T * T; n++)
                w5[(l * 2 + b) * H * T * T + n] = b ? w[l * H * T * T + n] : 0.5f;
    const int64_t shape5[5] = {NL, 2, H, T, T};
    test_save_f32(test_path("layers5.npy"), 5, shape5, w5);
    free(w5);
    rc = test_run_cli(&out, "report --weights '%s' --batch 1 --causal --html '%s'", test_path("layers5.npy"), path);
    if (rc != 0) fail_msg("attn report: exit %d\n%s", rc, out);
    free(out);
    report = selftest(path, "2:0:4:4");
    assert_layer_shows_exactly(report, 2, 0, 4, 4, W(2, 0, 4, 4));
    free(report);
#undef W
    free(w);
}

/* What the layered inputs refuse, by name. */
static void cli_report_layered_refusals(void **state) {
    (void)state;
    const float w[6] = {1, 0, 0, 1, 0.5f, 0.5f};
    const int64_t s1[1] = {6}, s3[3] = {1, 2, 3}, s4[4] = {1, 1, 2, 3};
    test_save_f32(test_path("flat.npy"), 1, s1, w);
    test_save_f32(test_path("one.npy"), 3, s3, w);
    test_save_f32(test_path("four.npy"), 4, s4, w);
    const char *x = test_path("x.html");
    test_cli_expect(1, "expected [L, S], [H, L, S], [B, H, L, S], with --layer [layers, H, L, S], or [layers, B, H, L, S]",
                    "report --weights '%s' --html '%s'", test_path("flat.npy"), x);
    test_cli_expect(1, "which holds one layer", "report --weights '%s' --layer 2 --html '%s'", test_path("one.npy"), x);
    test_cli_expect(1, "--layer: layer 1 is out of range: there are 1", "report --weights '%s' --layer 1 --html '%s'",
                    test_path("four.npy"), x);
    test_cli_expect(1, "--head: head 3 is out of range", "report --weights '%s' --head 3 --html '%s'", test_path("one.npy"), x);
    test_cli_expect(2, "not both", "report --weights '%s' --model m.gguf --text a --html '%s'", test_path("one.npy"), x);
    test_cli_expect(2, "--model needs --text", "report --model m.gguf --html '%s'", x);
    test_cli_expect(2, "--text needs --model", "report --weights '%s' --text hi --html '%s'", test_path("one.npy"), x);
    test_cli_expect(2, "do not combine", "report --weights '%s' -q '%s' --html '%s'", test_path("one.npy"), test_path("one.npy"), x);
    test_cli_expect(2, "are for --weights", "report --model m.gguf --text a --causal --html '%s'", x);
    test_cli_expect(2, "--layer belongs to --model or --weights", "report -q a.npy -k a.npy -v a.npy --layer 0 --html '%s'", x);
    test_cli_expect(1, "no-such.gguf", "report --model '%s' --text a --html '%s'", test_path("no-such.gguf"), x);
    test_cli_expect(2, "expected weights, value-norms or rollout", "report --model m.gguf --text a --maps norms "
                    "--html '%s'", x);
    test_cli_expect(2, "--maps chooses what a run of --model shows", "report --weights '%s' --maps rollout --html '%s'",
                    test_path("one.npy"), x);
    test_cli_expect(2, "no --head", "report --model m.gguf --text a --maps rollout --head 1 --html '%s'", x);
    test_cli_expect(2, "--maps belongs to --model", "report -q a.npy -k a.npy -v a.npy --maps rollout --html '%s'", x);
    assert_false(test_file_exists(x));
}

/* The size the issue asks for: 24 layers x 14 heads x 256 tokens (Qwen2.5
 * 0.5B's heads over 256 tokens), causal.  The file holds every visible
 * weight exactly (16/3 bytes each) and the page still answers a hover in
 * any layer with the exact float. */
static void report_24_layers_14_heads_256_tokens(void **state) {
    (void)state;
    require_chromium();
    enum { NL = 24, H = 14, T = 256 };
    test_rng rng;
    test_rng_seed(&rng, 24);
    float *w = random_causal_maps(&rng, NL, H, T);
    uint8_t *visible = malloc((size_t)NL * H * T * T);
    assert_non_null(visible);
    for (int64_t m = 0; m < NL * H; m++)
        for (int64_t i = 0; i < T; i++)
            for (int64_t j = 0; j < T; j++) visible[(m * T + i) * T + j] = j <= i;
    attn_report r = ATTN_REPORT_INIT;
    r.title = "24 layers x 14 heads x 256 tokens";
    r.heads = H;
    r.len_q = r.len_kv = T;
    r.weights = w;
    r.visible = visible;
    r.layers = NL;
    const char *path = test_path("big-model.html");
    const double t0 = now_seconds();
    assert_ok(attn_report_write_html(path, &r));
    const double written = now_seconds() - t0;
    size_t n;
    free(test_read_file(path, &n));
    const double data = 16.0 / 3.0 * NL * H * T * (T + 1) / 2.0;
    print_message("note: 24 x 14 x 256 report: %.1f MB (visible weights alone %.1f MB), written in %.2f s\n",
                  (double)n / 1e6, data / 1e6, written);
    if ((double)n < data || (double)n > data + 4.0 * 1024 * 1024)
        fail_msg("big-model.html is %zu bytes; expected about %.0f", n, data);
    const double t1 = now_seconds();
    char *report = selftest(path, "23:13:255:0;0:0:100:7;11:5:200:200;7:3:3:9");
    print_message("note: Chromium opened it, ran the self-test and dumped the DOM in %.2f s\n", now_seconds() - t1);
#define W(l, h, i, j) w[(((int64_t)(l) * H + (h)) * T + (i)) * T + (j)]
    assert_layer_shows_exactly(report, 23, 13, 255, 0, W(23, 13, 255, 0));
    assert_layer_shows_exactly(report, 0, 0, 100, 7, W(0, 0, 100, 7));
    assert_layer_shows_exactly(report, 11, 5, 200, 200, W(11, 5, 200, 200));
#undef W
    char shown[64];
    hovered_in(report, 7, 3, 3, 9, shown, sizeof shown);
    assert_string_equal(shown, "hidden");
    const char *colours = strstr(report, "map_colours=");
    assert_non_null(colours);
    if (atoi(colours + strlen("map_colours=")) < 16) fail_msg("the heat map looks blank:\n%s", report);
    free(report);
    free(w);
    free(visible);
}

/* --------------------------------------------------------- a real model */

#define GEMMA "gemma-3-270m-q4_k_m.gguf"

/* The model's path, or skips the test with a message when it is absent. */
static void model_path_or_skip(const char *file, char *path, size_t size) {
    const char *dir = getenv("ATTN_MODEL_DIR"), *home = getenv("HOME");
    if (dir && *dir) snprintf(path, size, "%s/%s", dir, file);
    else snprintf(path, size, "%s/.cache/attn/models/%s", home ? home : "", file);
    struct stat st;
    if (stat(path, &st) != 0) {
        print_message("skipped: %s is not there (scripts/fetch-models.sh fetches it)\n", path);
        skip();
    }
}

/* The cosine of the last rows of two residual streams, row r of [N + 1, L, d]. */
static double last_cosine(const float *a, int64_t la, const float *b, int64_t lb, int64_t r, int64_t d) {
    const float *x = a + (r * la + la - 1) * d, *y = b + (r * lb + lb - 1) * d;
    double xy = 0, xx = 0, yy = 0;
    for (int64_t i = 0; i < d; i++) xy += (double)x[i] * y[i], xx += (double)x[i] * x[i], yy += (double)y[i] * y[i];
    return xy / sqrt(xx * yy);
}

/* `attn report --model` on Gemma 3 270M over the chapter's first sentence,
 * with its second as --compare-text: the page's hovered weights equal the
 * decoder's own maps, computed here through the library; the model's
 * tokens label the cells (<bos>, 苹果); the cosine plot's points show the
 * cosine of the two 苹果 vectors layer by layer, as computed here from the
 * decoder's residual streams, and after the final norm, as transformers
 * gives it; with --control-text, the same-sense control's series too. */
static void cli_report_of_a_model_run(void **state) {
    (void)state;
    require_chromium();
    char model[600];
    model_path_or_skip(GEMMA, model, sizeof model);
    const char *text = "我吃了一个苹果", *other = "这台电脑来自苹果";
    char *out = NULL;
    const char *path = test_path("gemma.html");
    int rc = test_run_cli(&out, "report --model '%s' --text '%s' --compare-text '%s' --control-text 我买了一个苹果 "
                          "--html '%s'", model, text, other, path);
    if (rc != 0) fail_msg("attn report --model: exit %d\n%s", rc, out);
    free(out);
    assert_self_contained(path);

    attn_gguf *g;
    attn_decoder *m;
    attn_tokenizer *t;
    assert_ok(attn_gguf_open(model, &g));
    assert_ok(attn_decoder_load(g, &m));
    assert_ok(attn_tokenizer_from_gguf(g, &t));
    const attn_decoder_config *c = attn_decoder_get_config(m);
    int32_t ids[32], ids_b[32];
    size_t L, Lb;
    assert_ok(attn_tokenizer_encode(t, text, strlen(text), 0, ids, 32, &L));
    assert_ok(attn_tokenizer_encode(t, other, strlen(other), 0, ids_b, 32, &Lb));
    const int64_t N = c->n_layers, H = c->n_heads, d = c->d_model;
    float *hidden = malloc(sizeof(float) * (size_t)((N + 1) * (int64_t)L * d));
    float *hidden_b = malloc(sizeof(float) * (size_t)((N + 1) * (int64_t)Lb * d));
    assert_true(hidden && hidden_b);
    float **maps = calloc((size_t)N, sizeof *maps);
    assert_non_null(maps);
    maps[3] = malloc(sizeof(float) * (size_t)(H * (int64_t)L * (int64_t)L));
    maps[N - 1] = malloc(sizeof(float) * (size_t)(H * (int64_t)L * (int64_t)L));
    attn_decoder_outputs o = ATTN_DECODER_OUTPUTS_INIT;
    o.attention = maps;
    o.hidden = hidden;
    assert_ok(attn_decoder_forward(m, ids, (int64_t)L, &o));
    attn_decoder_outputs ob = ATTN_DECODER_OUTPUTS_INIT;
    ob.hidden = hidden_b;
    assert_ok(attn_decoder_forward(m, ids_b, (int64_t)Lb, &ob));

    const int last = (int)N - 1, q = (int)L - 1;
    char cells[128];
    snprintf(cells, sizeof cells, "3:1:%d:2;%d:%d:%d:0;0:0:1:%d", q, last, (int)H - 1, q, q);
    char *report = selftest(path, cells);
    assert_layer_shows_exactly(report, 3, 1, q, 2, maps[3][(1 * (int64_t)L + q) * (int64_t)L + 2]);
    assert_layer_shows_exactly(report, last, (int)H - 1, q, 0, maps[N - 1][((H - 1) * (int64_t)L + q) * (int64_t)L]);
    char shown[64];
    hovered_in(report, 0, 0, 1, q, shown, sizeof shown);
    assert_string_equal(shown, "hidden"); /* causal: query 1 does not read the last key */
    if (!strstr(report, "“苹果”  →  key 0 “<bos>”")) fail_msg("the model's tokens do not label the cells:\n%s", report);
    char sizes[96];
    snprintf(sizes, sizeof sizes, "layers=%lld heads=%lld len_q=%zu", (long long)N, (long long)H, L);
    if (!strstr(report, sizes)) fail_msg("not every layer and head is on the page (want %s):\n%s", sizes, report);
    for (int64_t r = 0; r <= N; r++) {
        char key[48];
        snprintf(key, sizeof key, "line %lld value=", (long long)r);
        const char *at = strstr(report, key);
        if (!at) fail_msg("the cosine plot has no point %lld:\n%s", (long long)r, report);
        const double point = strtod(at + strlen(key), NULL), want = last_cosine(hidden, (int64_t)L, hidden_b,
                                                                                 (int64_t)Lb, r, d);
        if (fabs(point - want) > 1e-12)
            fail_msg("cosine point %lld shows %.17g, the decoder's residual streams give %.17g", (long long)r, point, want);
    }
    /* The final-norm point (as attn demo --model shows it), against
     * transformers' (tests/fixtures/chapter_model/gemma3/cosine.npy). */
    attn_array want_cos = test_load_array(ATTN_SOURCE_DIR "/tests/fixtures/chapter_model/gemma3/cosine.npy", ATTN_F64);
    assert_int_equal(want_cos.count, N + 2);
    char key[48];
    snprintf(key, sizeof key, "line %lld value=", (long long)(N + 1));
    const char *at = strstr(report, key);
    if (!at) fail_msg("the cosine plot has no final-norm point:\n%s", report);
    const double final = strtod(at + strlen(key), NULL), want_final = ((const double *)want_cos.data)[N + 1];
    if (!(fabs(final - want_final) <= CHAPTER_COSINE_ABS_FAIL))
        fail_msg("the final-norm point shows %.9g, transformers gives %.9g", final, want_final);
    attn_array_free(&want_cos);
    snprintf(key, sizeof key, "line %lld value=", (long long)(N + 2));
    if (strstr(report, key)) fail_msg("the cosine plot has more points than rows:\n%s", report);
    /* --control-text: the same-sense control's series, every point against
     * transformers' (control_cosine.npy: 我吃了一个苹果 / 我买了一个苹果). */
    attn_array want_control =
        test_load_array(ATTN_SOURCE_DIR "/tests/fixtures/chapter_model/gemma3/control_cosine.npy", ATTN_F64);
    for (int64_t r = 0; r < N + 2; r++) {
        snprintf(key, sizeof key, "line2 %lld value=", (long long)r);
        at = strstr(report, key);
        if (!at) fail_msg("the control series has no point %lld:\n%s", (long long)r, report);
        const double point = strtod(at + strlen(key), NULL), want = ((const double *)want_control.data)[r];
        if (!(fabs(point - want) <= CHAPTER_COSINE_ABS_FAIL))
            fail_msg("control point %lld shows %.9g, transformers gives %.9g", (long long)r, point, want);
    }
    attn_array_free(&want_control);
    free(report);
    free(hidden);
    free(hidden_b);
    free(maps[3]);
    free(maps[N - 1]);
    free(maps);
    attn_tokenizer_free(t);
    attn_decoder_free(m);
    attn_gguf_free(g);
}

/* `attn report --model --maps value-norms | rollout` on Gemma 3 270M: the
 * page's hovered cells hold the library's numbers (attn_model_value_norms,
 * each row divided by its sum; attn_model_rollout, one map a layer) at the
 * layer and head asked. */
static void cli_report_of_analysis_maps(void **state) {
    (void)state;
    require_chromium();
    char model[600];
    model_path_or_skip(GEMMA, model, sizeof model);
    const char *text = "我吃了一个苹果";
    attn_gguf *g;
    attn_decoder *m;
    attn_tokenizer *t;
    assert_ok(attn_gguf_open(model, &g));
    assert_ok(attn_decoder_load(g, &m));
    assert_ok(attn_tokenizer_from_gguf(g, &t));
    const attn_decoder_config *c = attn_decoder_get_config(m);
    int32_t ids[32];
    size_t n;
    assert_ok(attn_tokenizer_encode(t, text, strlen(text), 0, ids, 32, &n));
    const int64_t L = (int64_t)n, N = c->n_layers, H = c->n_heads;
    const int q = (int)L - 1;
    float *norms = malloc(sizeof(float) * (size_t)(H * L * L));
    double *rollout = malloc(sizeof(double) * (size_t)(N * L * L));
    assert_true(norms && rollout);

    char *out = NULL;
    const char *path = test_path("norms.html");
    int rc = test_run_cli(&out, "report --model '%s' --text '%s' --maps value-norms --html '%s'", model, text, path);
    if (rc != 0) fail_msg("attn report --maps value-norms: exit %d\n%s", rc, out);
    free(out);
    assert_ok(attn_model_value_norms(m, ids, L, 3, 1, NULL, norms));
    double sum = 0;
    const float *row = norms + (1 * L + q) * L; /* head 1, the last query */
    for (int64_t j = 0; j < L; j++) sum += row[j];
    char cells[64];
    snprintf(cells, sizeof cells, "3:1:%d:1", q);
    char *report = selftest(path, cells);
    assert_layer_shows_exactly(report, 3, 1, q, 1, (float)(row[1] / sum));
    free(report);

    path = test_path("rollout.html");
    rc = test_run_cli(&out, "report --model '%s' --text '%s' --maps rollout --html '%s'", model, text, path);
    if (rc != 0) fail_msg("attn report --maps rollout: exit %d\n%s", rc, out);
    free(out);
    assert_ok(attn_model_rollout(m, ids, L, ATTN_ALL, 0.5, rollout));
    snprintf(cells, sizeof cells, "%d:0:%d:0", (int)N - 1, q);
    report = selftest(path, cells);
    assert_layer_shows_exactly(report, (int)N - 1, 0, q, 0, (float)rollout[((N - 1) * L + q) * L]);
    char sizes[96];
    snprintf(sizes, sizeof sizes, "layers=%lld heads=1 len_q=%lld", (long long)N, (long long)L);
    if (!strstr(report, sizes)) fail_msg("rollout is one map a layer (want %s):\n%s", sizes, report);
    free(report);
    free(norms);
    free(rollout);
    attn_tokenizer_free(t);
    attn_decoder_free(m);
    attn_gguf_free(g);
}

/* ------------------------------------------- a model's run with its paths */

/* A tiny qwen2 decoder written byte by byte (support/gguf_builder.h) with
 * random float32 weights and a byte-level tokenizer (GPT-2's letters for
 * the 256 bytes, one merge no text here uses), so that `attn report
 * --model --text` runs in milliseconds.  Two layers of 4 query heads over
 * 2 key/value heads of width 4. */
enum { TINY_LAYERS = 2, TINY_D = 16, TINY_F = 24, TINY_HQ = 4, TINY_HKV = 2, TINY_DH = 4, TINY_V = 257 };
enum { GGUF_U32 = 4, GGUF_I32 = 5, GGUF_F32 = 6, GGUF_STRING = 8, GGUF_ARRAY = 9 };

typedef struct tiny_tensor {
    char name[48];
    uint64_t d0, d1; /* GGUF's ne0 (contiguous), ne1 */
    float *data;
} tiny_tensor;

static void write_tiny_qwen2(const char *path) {
    tiny_tensor t[4 + 12 * TINY_LAYERS];
    int n = 0;
    test_rng rng;
    test_rng_seed(&rng, 2024);
#define TENSOR(d0_, d1_, scale, offset, ...)                                                        \
    do {                                                                                            \
        tiny_tensor *x = &t[n++];                                                                   \
        snprintf(x->name, sizeof x->name, __VA_ARGS__);                                             \
        x->d0 = (d0_), x->d1 = (d1_);                                                               \
        x->data = malloc(sizeof(float) * (size_t)(x->d0 * x->d1));                                  \
        assert_non_null(x->data);                                                                   \
        for (uint64_t e = 0; e < x->d0 * x->d1; e++) x->data[e] = (float)((offset) + (scale) * test_rng_normal(&rng)); \
    } while (0)
    const double in = 1.0 / sqrt((double)TINY_D);
    TENSOR(TINY_D, TINY_V, 1.0, 0.0, "token_embd.weight");
    TENSOR(TINY_D, 1, 0.1, 1.0, "output_norm.weight");
    TENSOR(TINY_D, TINY_V, in, 0.0, "output.weight");
    for (int l = 0; l < TINY_LAYERS; l++) {
        TENSOR(TINY_D, 1, 0.1, 1.0, "blk.%d.attn_norm.weight", l);
        TENSOR(TINY_D, TINY_HQ * TINY_DH, 2 * in, 0.0, "blk.%d.attn_q.weight", l); /* peaked enough maps */
        TENSOR(TINY_D, TINY_HKV * TINY_DH, 2 * in, 0.0, "blk.%d.attn_k.weight", l);
        TENSOR(TINY_D, TINY_HKV * TINY_DH, in, 0.0, "blk.%d.attn_v.weight", l);
        TENSOR(TINY_HQ * TINY_DH, 1, 0.3, 0.0, "blk.%d.attn_q.bias", l);
        TENSOR(TINY_HKV * TINY_DH, 1, 0.3, 0.0, "blk.%d.attn_k.bias", l);
        TENSOR(TINY_HKV * TINY_DH, 1, 0.3, 0.0, "blk.%d.attn_v.bias", l);
        TENSOR(TINY_HQ * TINY_DH, TINY_D, 1.0 / sqrt((double)(TINY_HQ * TINY_DH)), 0.0, "blk.%d.attn_output.weight", l);
        TENSOR(TINY_D, 1, 0.1, 1.0, "blk.%d.ffn_norm.weight", l);
        TENSOR(TINY_D, TINY_F, in, 0.0, "blk.%d.ffn_gate.weight", l);
        TENSOR(TINY_D, TINY_F, in, 0.0, "blk.%d.ffn_up.weight", l);
        TENSOR(TINY_F, TINY_D, 1.0 / sqrt((double)TINY_F), 0.0, "blk.%d.ffn_down.weight", l);
    }
#undef TENSOR
    /* GPT-2's bytes_to_unicode: '!'..'~', 0xA1..0xAC and 0xAE..0xFF stand
     * for themselves, the other bytes, in order, for U+0100, U+0101, ... */
    char letters[256][8];
    for (int b = 0, next = 256; b < 256; b++) {
        const int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        const int cp = printable ? b : next++;
        if (cp < 0x80) snprintf(letters[b], sizeof letters[b], "%c", cp);
        else snprintf(letters[b], sizeof letters[b], "%c%c", 0xC0 | cp >> 6, 0x80 | (cp & 0x3F));
    }
    char pair[16]; /* token 256, the merge's "ĠĠ" */
    snprintf(pair, sizeof pair, "%s%s", letters[' '], letters[' ']);

    gguf_bytes g = {0};
    gb_header(&g, 3, (uint64_t)n, 13);
    gb_kv_string(&g, "general.architecture", "qwen2");
    gb_kv_u32(&g, "qwen2.block_count", TINY_LAYERS);
    gb_kv_u32(&g, "qwen2.embedding_length", TINY_D);
    gb_kv_u32(&g, "qwen2.feed_forward_length", TINY_F);
    gb_kv_u32(&g, "qwen2.attention.head_count", TINY_HQ);
    gb_kv_u32(&g, "qwen2.attention.head_count_kv", TINY_HKV);
    gb_key(&g, "qwen2.attention.layer_norm_rms_epsilon", GGUF_F32);
    gb_f32(&g, 1e-6f);
    gb_key(&g, "qwen2.rope.freq_base", GGUF_F32);
    gb_f32(&g, 1e6f);
    gb_kv_string(&g, "tokenizer.ggml.model", "gpt2");
    gb_kv_string(&g, "tokenizer.ggml.pre", "qwen2");
    gb_key(&g, "tokenizer.ggml.tokens", GGUF_ARRAY);
    gb_array(&g, GGUF_STRING, TINY_V);
    for (int i = 0; i < TINY_V; i++) gb_str(&g, i < 256 ? letters[i] : pair);
    gb_key(&g, "tokenizer.ggml.token_type", GGUF_ARRAY);
    gb_array(&g, GGUF_I32, TINY_V);
    for (int i = 0; i < TINY_V; i++) gb_u32(&g, ATTN_TOKEN_NORMAL);
    gb_key(&g, "tokenizer.ggml.merges", GGUF_ARRAY);
    gb_array(&g, GGUF_STRING, 1);
    char merge[24];
    snprintf(merge, sizeof merge, "%s %s", letters[' '], letters[' ']);
    gb_str(&g, merge);
    uint64_t offset = 0;
    for (int i = 0; i < n; i++) {
        const uint64_t dims[2] = {t[i].d0, t[i].d1};
        gb_tensor(&g, t[i].name, t[i].d1 == 1 ? 1 : 2, dims, 0 /* F32 */, offset);
        offset += (t[i].d0 * t[i].d1 * 4 + 31) / 32 * 32;
    }
    gb_pad(&g, 32);
    for (int i = 0; i < n; i++) {
        gb_raw(&g, t[i].data, (size_t)(t[i].d0 * t[i].d1) * 4);
        gb_pad(&g, 32);
        free(t[i].data);
    }
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(g.data, 1, g.len, f), g.len);
    assert_int_equal(fclose(f), 0);
    gb_free(&g);
}

/* One run's rotated q and k and its v, every layer, from the decoder's
 * hooks: q [L, Hq, Dh], k and v [L, Hkv, Dh] per layer. */
typedef struct qkv_run {
    float *q[TINY_LAYERS], *k[TINY_LAYERS], *v[TINY_LAYERS];
} qkv_run;

static int keep_qkv(void *user, const attn_decoder_hook_tensor *t) {
    qkv_run *r = user;
    float **slot = t->point == ATTN_DECODER_HOOK_ROT_Q ? &r->q[t->layer]
                 : t->point == ATTN_DECODER_HOOK_ROT_K ? &r->k[t->layer] : &r->v[t->layer];
    const size_t n = (size_t)(t->shape[0] * t->shape[1] * t->shape[2]);
    *slot = malloc(n * sizeof(float));
    assert_non_null(*slot);
    memcpy(*slot, t->data, n * sizeof(float));
    return 0;
}

static void run_qkv(const attn_decoder *m, const int32_t *ids, int64_t L, qkv_run *r) {
    memset(r, 0, sizeof *r);
    attn_decoder_outputs o = ATTN_DECODER_OUTPUTS_INIT;
    o.tensor_hook = keep_qkv;
    o.tensor_hook_user = r;
    o.tensor_hook_points = 1u << ATTN_DECODER_HOOK_ROT_Q | 1u << ATTN_DECODER_HOOK_ROT_K | 1u << ATTN_DECODER_HOOK_V;
    assert_ok(attn_decoder_forward(m, ids, L, &o));
}

static void qkv_free(qkv_run *r) {
    for (int l = 0; l < TINY_LAYERS; l++) free(r->q[l]), free(r->k[l]), free(r->v[l]);
}

/* Figure 2's rule written out, in double: z of head h at query i from
 * queries q, keys k, values v (causal, scale 1 / sqrt(Dh), the kv head
 * h / (Hq / Hkv)). */
static void oracle_z(const float *q, const float *k, const float *v, int64_t i, int64_t h, double *z) {
    const int64_t kv = h / (TINY_HQ / TINY_HKV);
    double s[64], top = -INFINITY, sum = 0;
    for (int64_t j = 0; j <= i; j++) {
        double dot = 0;
        for (int e = 0; e < TINY_DH; e++) dot += (double)q[(i * TINY_HQ + h) * TINY_DH + e] * k[(j * TINY_HKV + kv) * TINY_DH + e];
        s[j] = dot / sqrt((double)TINY_DH);
        top = fmax(top, s[j]);
    }
    for (int64_t j = 0; j <= i; j++) sum += (s[j] = exp(s[j] - top));
    for (int e = 0; e < TINY_DH; e++) {
        z[e] = 0;
        for (int64_t j = 0; j <= i; j++) z[e] += s[j] / sum * v[(j * TINY_HKV + kv) * TINY_DH + e];
    }
}

/* The six columns of the page's z table (base, K only, V only, both,
 * interaction, changed) at layer l, head h, query i: z[c][e]. */
static void oracle_columns(const qkv_run *a, const qkv_run *b, int l, int64_t i, int64_t h, double z[6][TINY_DH]) {
    oracle_z(a->q[l], a->k[l], a->v[l], i, h, z[0]);
    oracle_z(a->q[l], b->k[l], a->v[l], i, h, z[1]);
    oracle_z(a->q[l], a->k[l], b->v[l], i, h, z[2]);
    oracle_z(a->q[l], b->k[l], b->v[l], i, h, z[3]);
    for (int e = 0; e < TINY_DH; e++) z[4][e] = z[3][e] - z[1][e] - z[2][e] + z[0][e];
    oracle_z(b->q[l], b->k[l], b->v[l], i, h, z[5]);
}

static double l2_diff(const double *x, const double *y) {
    double ss = 0;
    for (int e = 0; e < TINY_DH; e++) ss += (x[e] - y[e]) * (x[e] - y[e]);
    return sqrt(ss);
}

/* A z value or a norm from float32 sums of at most 7 terms of size ~1. */
#define PATHS_ABS_FAIL 2e-6

/* `attn report --model --text --source-text` on the tiny model: the page's
 * layer and head selectors switch its path table, and the cells it shows
 * (the exact float behind each, and the 4 digits in the table) equal Figure
 * 2's rule written out here in double on the decoder's own q, k, v of the
 * two runs; its two rankings at --position list every head once, in
 * descending order, with the norms of K only - base and V only - base from
 * the same rule. */
static void cli_report_model_paths_in_chromium(void **state) {
    (void)state;
    require_chromium();
    const char *model = test_path("tiny-qwen2.gguf"), *path = test_path("tiny-paths.html");
    write_tiny_qwen2(model);
    const char *text = "the cat sat", *changed = "the dog sat";
    enum { POSITION = 8 };
    char *out = NULL;
    int rc = test_run_cli(&out, "report --model '%s' --text '%s' --source-text '%s' --position %d --html '%s'", model,
                          text, changed, POSITION, path);
    if (rc != 0) fail_msg("attn report --model --source-text: exit %d\n%s", rc, out);
    if (!strstr(out, "path decomposition")) fail_msg("no word of the path tables:\n%s", out);
    free(out);
    assert_self_contained(path);

    attn_gguf *g;
    attn_decoder *m;
    attn_tokenizer *t;
    assert_ok(attn_gguf_open(model, &g));
    assert_ok(attn_decoder_load(g, &m));
    assert_ok(attn_tokenizer_from_gguf(g, &t));
    int32_t ids_a[32], ids_b[32];
    size_t L, Lb;
    assert_ok(attn_tokenizer_encode(t, text, strlen(text), 0, ids_a, 32, &L));
    assert_ok(attn_tokenizer_encode(t, changed, strlen(changed), 0, ids_b, 32, &Lb));
    assert_int_equal(L, 11); /* one token a byte */
    assert_int_equal(Lb, L);
    qkv_run a, b;
    run_qkv(m, ids_a, (int64_t)L, &a);
    run_qkv(m, ids_b, (int64_t)L, &b);

    /* layer:head:position:column:element, layers and heads switched back
     * and forth: a cell that moved (position 8 reads the changed 4..6),
     * one before the change (the K-only column equals base there), the
     * changed run's own, an interaction. */
    static const int specs[][5] = {{1, 3, 8, 1, 2}, {0, 1, 8, 2, 0}, {1, 0, 10, 5, 3}, {0, 2, 3, 1, 1}, {1, 2, 9, 4, 0}};
    char cells[256] = "0:0:1&paths=";
    for (size_t s = 0; s < sizeof specs / sizeof specs[0]; s++)
        snprintf(cells + strlen(cells), sizeof cells - strlen(cells), "%s%d:%d:%d:%d:%d", s ? ";" : "", specs[s][0],
                 specs[s][1], specs[s][2], specs[s][3], specs[s][4]);
    char *report = selftest(path, cells);
    char want[96];
    snprintf(want, sizeof want, "paths=yes path_layers=%d position=%d", TINY_LAYERS, POSITION);
    if (!strstr(report, want)) fail_msg("want \"%s\":\n%s", want, report);
    double worst = 0;
    for (size_t s = 0; s < sizeof specs / sizeof specs[0]; s++) {
        const int l = specs[s][0], h = specs[s][1], i = specs[s][2], c = specs[s][3], e = specs[s][4];
        char key[96];
        snprintf(key, sizeof key, "pathcell %d:%d:%d:%d:%d shown=%d:%d text=", l, h, i, c, e, l, h);
        const char *at = strstr(report, key);
        if (!at) fail_msg("no line \"%s\": the selectors did not switch the table:\n%s", key, report);
        char *end;
        const double text_value = strtod(at + strlen(key), &end);
        if (strncmp(end, " exact=", 7)) fail_msg("the table has no number at %s:\n%s", key, report);
        const double exact_value = strtod(end + 7, NULL);
        double z[6][TINY_DH];
        oracle_columns(&a, &b, l, i, h, z);
        const double expect = z[c][e];
        worst = fmax(worst, fabs(exact_value - expect));
        if (fabs(exact_value - expect) > PATHS_ABS_FAIL)
            fail_msg("%s: the page holds %.9g, Figure 2's rule gives %.9g", key, exact_value, expect);
        /* the table's 4 significant digits of the same number */
        if (fabs(text_value - exact_value) > 5e-4 * fabs(exact_value) + 1e-12)
            fail_msg("%s: the table shows %.9g for %.9g", key, text_value, exact_value);
        if (c == 1 && i < 4 && exact_value != z[0][e] && fabs(exact_value - z[0][e]) > PATHS_ABS_FAIL)
            fail_msg("%s: before the change K only must equal base", key);

        /* This layer's rankings at POSITION: every head once, descending,
         * each the rule's norm. */
        snprintf(key, sizeof key, "ranks layer=%d position=%d weight=", l, POSITION);
        const char *line = strstr(at, key);
        if (!line) fail_msg("no ranking after %s:\n%s", key, report);
        const char *p = line + strlen(key);
        for (int path_kind = 0; path_kind < 2; path_kind++) {
            bool seen[TINY_HQ] = {false};
            double previous = INFINITY;
            for (int r = 0; r < TINY_HQ; r++) {
                const long head = strtol(p, &end, 10);
                if (*end != ':' || head < 0 || head >= TINY_HQ || seen[head])
                    fail_msg("ranking %d of layer %d is not a list of every head:\n%s", path_kind, l, line);
                seen[head] = true;
                const double value = strtod(end + 1, &end);
                double zz[6][TINY_DH];
                oracle_columns(&a, &b, l, POSITION, head, zz);
                const double expect_norm = l2_diff(zz[path_kind ? 2 : 1], zz[0]);
                if (fabs(value - expect_norm) > PATHS_ABS_FAIL)
                    fail_msg("layer %d head %ld: the %s path ranks |dz| %.9g, the rule gives %.9g", l, head,
                             path_kind ? "content" : "weight", value, expect_norm);
                if (value > previous) fail_msg("ranking %d of layer %d is not descending:\n%s", path_kind, l, line);
                previous = value;
                p = end + (*end == ',');
            }
            if (path_kind == 0) {
                if (strncmp(p, " content=", 9)) fail_msg("no content ranking:\n%s", line);
                p += 9;
            }
        }
    }
    print_message("model paths: the page's cells against Figure 2's rule in double: worst %.2e\n", worst);
    free(report);

    /* Refusals, by name: texts of two lengths, --source-text without
     * --model, --position outside the text. */
    rc = test_run_cli(&out, "report --model '%s' --text '%s' --source-text 'the dogs sat' --html '%s'", model, text,
                      test_path("x.html"));
    if (rc != 1 || !strstr(out, "--text is 11 tokens and --source-text 12"))
        fail_msg("exit %d, want 1 naming both token counts:\n%s", rc, out);
    free(out);
    rc = test_run_cli(&out, "report --weights w.npy --source-text a --html '%s'", test_path("x.html"));
    if (rc != 2 || !strstr(out, "--source-text is the changed run of --model")) fail_msg("exit %d:\n%s", rc, out);
    free(out);
    rc = test_run_cli(&out, "report --model '%s' --text '%s' --position 1 --html '%s'", model, text, test_path("x.html"));
    if (rc != 2 || !strstr(out, "needs --source-text")) fail_msg("exit %d:\n%s", rc, out);
    free(out);
    rc = test_run_cli(&out, "report --model '%s' --text '%s' --source-text '%s' --position 11 --html '%s'", model, text,
                      changed, test_path("x.html"));
    if (rc != 1 || !strstr(out, "--position 11 is outside the text's 11 tokens")) fail_msg("exit %d:\n%s", rc, out);
    free(out);
    assert_false(test_file_exists(test_path("x.html")));

    qkv_free(&a);
    qkv_free(&b);
    attn_tokenizer_free(t);
    attn_decoder_free(m);
    attn_gguf_free(g);
}


/* ------------------------------------------------- panels at one position */

/* The values of the index-th panel in a report's JSON, in order (null: NaN),
 * read straight from the page's data: count of them into *n (malloc'd). */
static double *panel_values(const char *html, int index, int64_t *n) {
    const char *at = strstr(html, "\"panels\":[");
    assert_non_null(at);
    for (int k = 0; k <= index; k++) {
        at = strstr(at + 1, "{\"title\":");
        if (!at) fail_msg("the page has no panel %d", index);
    }
    at = strstr(at, "\"values\":[");
    assert_non_null(at);
    at += strlen("\"values\":[");
    size_t cap = 64;
    double *v = malloc(cap * sizeof *v);
    assert_non_null(v);
    *n = 0;
    while (*at != ']') {
        if ((size_t)*n == cap) {
            v = realloc(v, (cap *= 2) * sizeof *v);
            assert_non_null(v);
        }
        if (strncmp(at, "null", 4) == 0) {
            v[(*n)++] = NAN;
            at += 4;
        } else {
            char *end;
            v[(*n)++] = strtod(at, &end);
            assert_true(end != at);
            at = end;
        }
        if (*at == ',') at++;
    }
    return v;
}

/* The probability of id under logits [V], written out in double. */
static double softmax_at(const float *logits, int64_t V, int64_t id) {
    double top = -INFINITY, sum = 0;
    for (int64_t v = 0; v < V; v++) top = fmax(top, logits[v]);
    for (int64_t v = 0; v < V; v++) sum += exp((double)logits[v] - top);
    return exp((double)logits[id] - top) / sum;
}

static int by_descending(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x < y) - (x > y);
}

/* A probability from float32 logits through exp and a sum of 257 terms. */
#define PANEL_PROB_ABS_FAIL 1e-9

/* `attn report --model --flow --logit-lens --logit-attribution --answer
 * --wrong --position` on the tiny model: the page holds five panels, and
 * their numbers are the library's, read back from the page's data (and,
 * with Chromium, from the tooltips of hovered cells) against direct calls
 * of attn_model_flow, attn_model_rollout and attn_model_logit_attribution,
 * and the logit lens's probabilities against a softmax written out here. */
static void cli_report_panels_at_a_position(void **state) {
    (void)state;
    const char *model = test_path("tiny-qwen2-panels.gguf"), *path = test_path("tiny-panels.html");
    write_tiny_qwen2(model);
    const char *text = "the cat sat";
    enum { POSITION = 8, ANSWER = 'a', WRONG = 't', TOP = 5 };
    char *out = NULL;
    int rc = test_run_cli(&out, "report --model '%s' --text '%s' --flow --logit-lens --logit-attribution --answer a "
                          "--wrong '#%d' --position %d --html '%s'", model, text, WRONG, POSITION, path);
    if (rc != 0) fail_msg("attn report --flow --logit-lens --logit-attribution: exit %d\n%s", rc, out);
    if (!strstr(out, "5 panels at position 8")) fail_msg("no word of the panels:\n%s", out);
    free(out);
    assert_self_contained(path);

    attn_gguf *g;
    attn_decoder *m;
    attn_tokenizer *t;
    assert_ok(attn_gguf_open(model, &g));
    assert_ok(attn_decoder_load(g, &m));
    assert_ok(attn_tokenizer_from_gguf(g, &t));
    int32_t ids[32];
    size_t n_ids;
    assert_ok(attn_tokenizer_encode(t, text, strlen(text), 0, ids, 32, &n_ids));
    const int64_t L = (int64_t)n_ids, N = TINY_LAYERS, Hq = TINY_HQ, V = TINY_V;
    size_t size;
    char *html = test_read_file(path, &size);
    assert_non_null(html);
    int64_t n;

    /* 0: flow and rollout over the tokens */
    double flow[32], rollout[TINY_LAYERS * 32 * 32];
    assert_ok(attn_model_flow(m, ids, L, ATTN_ALL, 0.5, POSITION, flow));
    assert_ok(attn_model_rollout(m, ids, L, ATTN_ALL, 0.5, rollout));
    double *v = panel_values(html, 0, &n);
    assert_int_equal(n, 2 * L);
    for (int64_t j = 0; j < L; j++) {
        assert_true(v[j] == flow[j]);
        assert_true(v[L + j] == rollout[((N - 1) * L + POSITION) * L + j]);
    }
    free(v);

    /* 1: each stream's top 5 probabilities; 2: the answer's probability and
     * the logit difference answer - wrong, stream by stream */
    float lens[(TINY_LAYERS + 1) * TINY_V];
    assert_ok(attn_model_logit_lens(m, ids, L, POSITION, lens));
    double *top = panel_values(html, 1, &n), *answer = NULL;
    assert_int_equal(n, (N + 1) * TOP);
    int64_t n_answer;
    answer = panel_values(html, 2, &n_answer);
    assert_int_equal(n_answer, 2 * (N + 1));
    for (int64_t r = 0; r <= N; r++) {
        const float *logits = lens + r * V;
        double probs[TINY_V];
        for (int64_t id = 0; id < V; id++) probs[id] = softmax_at(logits, V, id);
        const double p_answer = probs[ANSWER];
        qsort(probs, (size_t)V, sizeof *probs, by_descending);
        for (int k = 0; k < TOP; k++)
            if (fabs(top[r * TOP + k] - probs[k]) > PANEL_PROB_ABS_FAIL)
                fail_msg("logit lens row %lld, top %d: the page has %.17g, the softmax %.17g", (long long)r, k + 1,
                         top[r * TOP + k], probs[k]);
        if (fabs(answer[r] - p_answer) > PANEL_PROB_ABS_FAIL)
            fail_msg("p(answer) at row %lld: the page has %.17g, the softmax %.17g", (long long)r, answer[r], p_answer);
        assert_true(answer[N + 1 + r] == (double)logits[ANSWER] - (double)logits[WRONG]);
    }
    free(top);
    free(answer);

    /* 3: attention and MLP per layer; 4: layers x heads */
    double embed, attn[TINY_LAYERS], mlp[TINY_LAYERS], heads[TINY_LAYERS * TINY_HQ];
    assert_ok(attn_model_logit_attribution(m, ids, L, POSITION, ANSWER, WRONG, &embed, attn, mlp, heads));
    v = panel_values(html, 3, &n);
    assert_int_equal(n, 2 * N);
    for (int64_t l = 0; l < N; l++) {
        assert_true(v[l] == attn[l]);
        assert_true(v[N + l] == mlp[l]);
    }
    free(v);
    v = panel_values(html, 4, &n);
    assert_int_equal(n, N * Hq);
    for (int64_t k = 0; k < N * Hq; k++) assert_true(v[k] == heads[k]);
    free(v);
    double sum = embed;
    for (int64_t l = 0; l < N; l++) sum += attn[l] + mlp[l];
    char check[160];
    snprintf(check, sizeof check, "embed = %.6g; sum = embed + Σ attention + Σ MLP = %.6g", embed, sum);
    if (!strstr(html, check)) fail_msg("the check line \"%s\" is not on the page", check);
    assert_true(fabs(sum - ((double)lens[N * V + ANSWER] - lens[N * V + WRONG])) < 1e-4);
    free(html);

    /* The tooltips of hovered cells show those values exactly. */
    if (chromium()) {
        char cells[160];
        snprintf(cells, sizeof cells, "0:0:0&panels=0:0:%d;2:1:%d;3:1:1;4:1:2", POSITION, (int)N);
        char *report = selftest(path, cells);
        if (!strstr(report, "panels=5")) fail_msg("the page did not draw five panels:\n%s", report);
        const struct { const char *spec; double want; } shown[] = {
            {"0:0:8", flow[POSITION]},
            {"2:1:2", (double)lens[N * V + ANSWER] - (double)lens[N * V + WRONG]},
            {"3:1:1", mlp[1]},
            {"4:1:2", heads[1 * Hq + 2]}};
        for (size_t k = 0; k < sizeof shown / sizeof shown[0]; k++) {
            char key[64];
            snprintf(key, sizeof key, "panelcell %s value=", shown[k].spec);
            const char *at = strstr(report, key);
            if (!at) fail_msg("no line \"%s\":\n%s", key, report);
            char *end;
            const double value = strtod(at + strlen(key), &end);
            if (*end != ' ' || value != shown[k].want)
                fail_msg("panel cell %s: the tooltip shows %.*s, expected %.17g", shown[k].spec, (int)strcspn(at, "\n"),
                         at, shown[k].want);
        }
        free(report);
    } else {
        print_message("no Chromium: the panels' tooltips were not hovered (their data were checked)\n");
    }

    /* What the panels need, named. */
    const char *html_out = test_path("refused.html");
    test_cli_expect(2, "--logit-attribution needs --answer",
                    "report --model '%s' --text '%s' --logit-attribution --html '%s'", model, text, html_out);
    test_cli_expect(2, "--wrong is the other side of --answer",
                    "report --model '%s' --text '%s' --logit-lens --wrong a --html '%s'", model, text, html_out);
    test_cli_expect(2, "--answer is for --logit-lens, --logit-attribution or --attribute",
                    "report --model '%s' --text '%s' --flow --answer a --html '%s'", model, text, html_out);
    test_cli_expect(2, "--flow analyses a run of --model", "report --weights '%s' --flow --html '%s'",
                    test_path("w.npy"), html_out);
    test_cli_expect(2, "--answer 'ab' is 2 tokens",
                    "report --model '%s' --text '%s' --logit-lens --answer ab --html '%s'", model, text, html_out);
    test_cli_expect(1, "--position 11 is outside",
                    "report --model '%s' --text '%s' --flow --position 11 --html '%s'", model, text, html_out);
    assert_false(test_file_exists(html_out));

    attn_tokenizer_free(t);
    attn_decoder_free(m);
    attn_gguf_free(g);
}

/* `attn report --model --source-text --attribute HOOK --answer --wrong` on
 * the tiny model: the attribution-patching panel holds
 * attn_model_attribution_patching's estimates, layers x positions for
 * hook_resid_pre and layers x heads at --position for attn.hook_z, and its
 * note the metric of both runs; what it needs is named when missing. */
static void cli_report_attribution_patching_panel(void **state) {
    (void)state;
    const char *model = test_path("tiny-qwen2-patching.gguf"), *path = test_path("tiny-patching.html");
    write_tiny_qwen2(model);
    const char *text = "the cat sat", *corrupted = "the dog sat";
    enum { POSITION = 8, ANSWER = 'a', WRONG = 't' };
    attn_gguf *g;
    attn_decoder *m;
    attn_tokenizer *t;
    assert_ok(attn_gguf_open(model, &g));
    assert_ok(attn_decoder_load(g, &m));
    assert_ok(attn_tokenizer_from_gguf(g, &t));
    int32_t ids[32], ids_c[32];
    size_t L, Lc;
    assert_ok(attn_tokenizer_encode(t, text, strlen(text), 0, ids, 32, &L));
    assert_ok(attn_tokenizer_encode(t, corrupted, strlen(corrupted), 0, ids_c, 32, &Lc));
    const int64_t N = TINY_LAYERS, Hq = TINY_HQ;

    static const struct { const char *hook; attn_decoder_hook_point point; bool per_head; } cases[] = {
        {"hook_resid_pre", ATTN_DECODER_HOOK_RESID_PRE, false}, {"attn.hook_z", ATTN_DECODER_HOOK_Z, true}};
    for (size_t n = 0; n < sizeof cases / sizeof cases[0]; n++) {
        char *out = NULL;
        int rc = test_run_cli(&out, "report --model '%s' --text '%s' --source-text '%s' --attribute %s --answer a "
                              "--wrong t --position %d --html '%s'", model, text, corrupted, cases[n].hook, POSITION,
                              path);
        if (rc != 0) fail_msg("attn report --attribute %s: exit %d\n%s", cases[n].hook, rc, out);
        free(out);
        const int64_t pos = POSITION, K = cases[n].per_head ? 1 : (int64_t)L, H = cases[n].per_head ? Hq : 1;
        double estimate[TINY_LAYERS * 32 * TINY_HQ], metric[2];
        assert_int_equal(attn_model_attribution_heads(m, cases[n].point), H);
        assert_ok(attn_model_attribution_patching(m, ids, (int64_t)L, ids_c, (int64_t)Lc, cases[n].point,
                                                  cases[n].per_head ? &pos : NULL, cases[n].per_head ? 1 : 0, ANSWER,
                                                  WRONG, estimate, metric));
        size_t size;
        char *html = test_read_file(path, &size);
        assert_non_null(html);
        int64_t count;
        double *v = panel_values(html, 0, &count);
        assert_int_equal(count, N * K * H);
        for (int64_t k = 0; k < count; k++)
            if (v[k] != estimate[k])
                fail_msg("--attribute %s: cell %lld is %.17g on the page, %.17g from the library", cases[n].hook,
                         (long long)k, v[k], estimate[k]);
        free(v);
        char line[128];
        snprintf(line, sizeof line, "text %.6g, source %.6g", metric[0], metric[1]);
        if (!strstr(html, line)) fail_msg("--attribute %s: the note lacks the metric \"%s\"", cases[n].hook, line);
        if (cases[n].per_head && !strstr(html, "position 8 “s” (layers × heads)"))
            fail_msg("--attribute attn.hook_z: not shown at --position 8 as layers x heads");
        free(html);
    }
    if (chromium()) {
        char *report = selftest(path, "0:0:0&panels=0:1:3");
        if (!strstr(report, "panels=1")) fail_msg("the page did not draw the panel:\n%s", report);
        if (!strstr(report, "panelcell 0:1:3 value=") || strstr(report, "panelcell 0:1:3 value=none"))
            fail_msg("no tooltip on the panel's cell:\n%s", report);
        free(report);
    }

    const char *html_out = test_path("refused.html");
    test_cli_expect(2, "--attribute estimates patches from a second run: give --source-text",
                    "report --model '%s' --text '%s' --attribute hook_resid_pre --answer a --html '%s'", model, text,
                    html_out);
    test_cli_expect(2, "--attribute needs --answer",
                    "report --model '%s' --text '%s' --source-text '%s' --attribute hook_resid_pre --html '%s'", model,
                    text, corrupted, html_out);
    test_cli_expect(2, "--attribute 'attn.hook_pattern': attn.hook_pattern cannot be estimated",
                    "report --model '%s' --text '%s' --source-text '%s' --attribute attn.hook_pattern --answer a "
                    "--html '%s'", model, text, corrupted, html_out);
    test_cli_expect(2, "every position needs texts of one length",
                    "report --model '%s' --text '%s' --source-text 'the bird sat' --attribute hook_resid_pre --answer a "
                    "--html '%s'", model, text, html_out);
    assert_false(test_file_exists(html_out));
    attn_tokenizer_free(t);
    attn_decoder_free(m);
    attn_gguf_free(g);
}

/* --------------------------------------------------- errors (no browser) */

static void report_refuses_bad_input(void **state) {
    (void)state;
    float w[4] = {1, 0, 0.5f, 0.5f};
    attn_report r = {.struct_size = sizeof(attn_report), .heads = 1, .len_q = 2, .len_kv = 2, .weights = w};
    assert_refused(attn_report_write_html(NULL, &r), ATTN_ERR_INVALID_ARGUMENT, "path");
    assert_refused(attn_report_write_html(test_path("r.html"), NULL), ATTN_ERR_INVALID_ARGUMENT, "report");
    r.heads = 0;
    assert_refused(attn_report_write_html(test_path("r.html"), &r), ATTN_ERR_SHAPE, "at least 1");
    r.heads = 1;
    w[1] = NAN;
    assert_refused(attn_report_write_html(test_path("r.html"), &r), ATTN_ERR_NONFINITE, "NaN");
    w[1] = -INFINITY;
    assert_refused(attn_report_write_html(test_path("r.html"), &r), ATTN_ERR_NONFINITE, "-inf");
    w[1] = 0;
    assert_refused(attn_report_write_html(test_path("no/dir/r.html"), &r), ATTN_ERR_IO, "no/dir/r.html");
    /* panels: a title, a known style, 1 to 1000000 cells, no infinity (NaN
     * is an empty cell, written null) */
    double cells[2] = {0.25, NAN};
    attn_report_panel panel = {.title = "p", .style = ATTN_REPORT_PANEL_BARS, .rows = 1, .cols = 2, .values = cells};
    r.panels = &panel;
    r.n_panels = 65;
    assert_refused(attn_report_write_html(test_path("r.html"), &r), ATTN_ERR_INVALID_ARGUMENT, "n_panels 65");
    r.n_panels = 1;
    panel.title = NULL;
    assert_refused(attn_report_write_html(test_path("r.html"), &r), ATTN_ERR_INVALID_ARGUMENT, "panels[0].title");
    panel.title = "p";
    panel.style = (attn_report_panel_style)3;
    assert_refused(attn_report_write_html(test_path("r.html"), &r), ATTN_ERR_INVALID_ARGUMENT, "panels[0].style is 3");
    panel.style = ATTN_REPORT_PANEL_HEAT;
    panel.cols = 0;
    assert_refused(attn_report_write_html(test_path("r.html"), &r), ATTN_ERR_INVALID_ARGUMENT, "1 x 0");
    panel.cols = 2;
    cells[0] = INFINITY;
    assert_refused(attn_report_write_html(test_path("r.html"), &r), ATTN_ERR_NONFINITE, "values[0] is infinite");
    assert_false(test_file_exists(test_path("r.html")));
    cells[0] = 0.25;
    assert_ok(attn_report_write_html(test_path("r.html"), &r));
    size_t size;
    char *page = test_read_file(test_path("r.html"), &size);
    assert_non_null(page);
    if (!strstr(page, "\"style\":\"heat\",\"rows\":1,\"cols\":2,\"values\":[0.25,null]"))
        fail_msg("the panel's values are not on the page as written");
    free(page);
    assert_int_equal(remove(test_path("r.html")), 0);
    r.panels = NULL;
    r.n_panels = 0;

    /* paths must describe the same problem as the maps */
    chapter_inputs c;
    chapter(&c);
    attn_tensor q = attn_tensor_2d(&c.q[0][0], 3, 2), k = attn_tensor_2d(&c.k[0][0], 3, 2),
                v = attn_tensor_2d(&c.v[0][0], 3, 2), v2 = attn_tensor_2d(&c.v2[0][0], 3, 2);
    attn_paths paths = {0};
    assert_ok(attn_sdpa_paths(&q, &k, &v, NULL, NULL, &v2, NULL, &paths));
    r.paths = &paths;
    assert_refused(attn_report_write_html(test_path("r.html"), &r), ATTN_ERR_SHAPE, "3 queries x 3 keys");
    /* a table per layer, or one: not both, and paths alone for one layer;
     * the ranking's position inside the queries; empty tables named */
    float w9[2 * 9] = {0};
    for (int n = 0; n < 18; n += 3) w9[n] = 1;
    attn_report many = {.struct_size = sizeof(attn_report), .heads = 1, .len_q = 3, .len_kv = 3, .weights = w9,
                        .layers = 2, .paths = &paths};
    assert_refused(attn_report_write_html(test_path("r.html"), &many), ATTN_ERR_INVALID_ARGUMENT, "layer_paths");
    attn_paths per_layer[2] = {0};
    per_layer[0] = paths;
    many.layer_paths = per_layer;
    assert_refused(attn_report_write_html(test_path("r.html"), &many), ATTN_ERR_INVALID_ARGUMENT, "not both");
    many.paths = NULL;
    assert_refused(attn_report_write_html(test_path("r.html"), &many), ATTN_ERR_INVALID_ARGUMENT,
                   "paths of layer 1 are empty");
    per_layer[1] = paths;
    many.paths_position = 3;
    assert_refused(attn_report_write_html(test_path("r.html"), &many), ATTN_ERR_INVALID_ARGUMENT,
                   "paths_position 3 is outside the 3 queries");
    many.paths_position = -3;
    assert_ok(attn_report_write_html(test_path("r.html"), &many));
    size_t n;
    char *html = test_read_file(test_path("r.html"), &n);
    assert_non_null(html);
    if (!strstr(html, "\"position\":0,\"layers\":[{")) fail_msg("position -3 of 3 is not query 0 on the page");
    free(html);
    attn_paths_free(&paths);
}

static void cli_report_names_its_errors(void **state) {
    (void)state;
    chapter_inputs c;
    chapter(&c);
    const int64_t s2[2] = {3, 2};
    test_save_f32(test_path("q.npy"), 2, s2, &c.q[0][0]);
    test_save_f32(test_path("k.npy"), 2, s2, &c.k[0][0]);
    test_save_f32(test_path("v.npy"), 2, s2, &c.v[0][0]);
    test_save_f32(test_path("v2.npy"), 2, s2, &c.v2[0][0]);
    const int64_t s1[1] = {6};
    test_save_f32(test_path("flat.npy"), 1, s1, &c.v[0][0]);
    const char *q = test_path("q.npy"), *k = test_path("k.npy"), *v = test_path("v.npy"), *v2 = test_path("v2.npy");

    test_cli_expect(0, "", "report -q '%s' -k '%s' -v '%s' --changed-v '%s' --tokens a,b,c --html '%s'", q, k, v, v2,
                    test_path("ok.html"));
    size_t n;
    char *html = test_read_file(test_path("ok.html"), &n);
    assert_non_null(html);
    assert_non_null(strstr(html, "\"paths\":{\"value_dim\":2"));
    free(html);
    test_cli_expect(0, "usage: attn report", "report --help");
    test_cli_expect(2, "missing --html", "report -q '%s' -k '%s' -v '%s'", q, k, v);
    test_cli_expect(2, "missing the inputs", "report --html '%s'", test_path("x.html"));
    test_cli_expect(2, "not both", "report -q '%s' -k '%s' -v '%s' -x '%s' --html '%s'", q, k, v, q, test_path("x.html"));
    test_cli_expect(2, "--heads and --kv-heads belong", "report -q '%s' -k '%s' -v '%s' --heads 2 --html '%s'", q, k, v,
                    test_path("x.html"));
    test_cli_expect(2, "unknown option '--bogus'", "report --bogus");
    test_cli_expect(2, "--show-heads expects", "report -q '%s' -k '%s' -v '%s' --show-heads x --html '%s'", q, k, v,
                    test_path("x.html"));
    test_cli_expect(1, "--tokens has 2 tokens but there are 3", "report -q '%s' -k '%s' -v '%s' --tokens a,b --html '%s'", q,
                    k, v, test_path("x.html"));
    test_cli_expect(1, "head 1 is out of range", "report -q '%s' -k '%s' -v '%s' --show-heads 0,1 --html '%s'", q, k, v,
                    test_path("x.html"));
    test_cli_expect(1, "--batch 2 is out of range", "report -q '%s' -k '%s' -v '%s' --batch 2 --html '%s'", q, k, v,
                    test_path("x.html"));
    test_cli_expect(1, "--changed-v", "report -q '%s' -k '%s' -v '%s' --changed-v '%s' --html '%s'", q, k, v,
                    test_path("flat.npy"), test_path("x.html"));
    test_cli_expect(1, "missing.npy", "report -q '%s' -k '%s' -v '%s' --html '%s'", test_path("missing.npy"), k, v,
                    test_path("x.html"));
    assert_false(test_file_exists(test_path("x.html")));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(chapter_report_in_chromium),
        cmocka_unit_test(report_screenshot_is_not_blank),
        cmocka_unit_test(cli_report_multi_head_causal_with_paths),
        cmocka_unit_test(large_report_stays_usable),
        cmocka_unit_test(cli_report_of_a_layered_weights_file),
        cmocka_unit_test(cli_report_layered_refusals),
        cmocka_unit_test(report_24_layers_14_heads_256_tokens),
        cmocka_unit_test(cli_report_of_a_model_run),
        cmocka_unit_test(cli_report_of_analysis_maps),
        cmocka_unit_test(cli_report_model_paths_in_chromium),
        cmocka_unit_test(cli_report_panels_at_a_position),
        cmocka_unit_test(cli_report_attribution_patching_panel),
        cmocka_unit_test(report_refuses_bad_input),
        cmocka_unit_test(cli_report_names_its_errors),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    test_tmpdir_cleanup();
    return failed;
}
