/*
 * test_demo.c — `attn demo` prints every number of the chapter digest
 * (shared/chapter/README.md) in both languages, picks its language from
 * --lang or $LANG, and follows the CLI's exit-status contract.
 *
 * The expected strings are built here from the chapter's own values (1/4,
 * ln2, [1.5, 0.75], √2·ln2 ...) in the demo's documented formats:
 *   exact forms   "[1/4, 1/4, 1/2]", "[c, c, 2c]", "[ln2, 0, ln2]", "−∞"
 *   decimals      "[1.5000, 0.7500]" (four places)
 *   one number    "3/5 = 0.6000" (fraction, then decimals)
 */
#include "testutil.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------ expected-text builders */

enum { TEXT = 256 };
#define NEG_INF INT_MIN /* marks a masked score in unit vectors */

/* "[1/4, 1/4, 1/2]"; den 1 prints an integer ("[1, 0, 0]"). */
static const char *fractions(char *buf, int n, const int *num, const int *den) {
    buf[0] = 0;
    for (int i = 0; i < n; i++) {
        char one[32];
        if (num[i] == 0 || den[i] == 1) snprintf(one, sizeof one, "%d", num[i]);
        else snprintf(one, sizeof one, "%d/%d", num[i], den[i]);
        snprintf(buf + strlen(buf), TEXT - strlen(buf), "%s%s", i ? ", " : "[", one);
    }
    strcat(buf, "]");
    return buf;
}

/* "[1.5000, 0.7500]". */
static const char *decimals(char *buf, int n, const double *x) {
    buf[0] = 0;
    for (int i = 0; i < n; i++)
        snprintf(buf + strlen(buf), TEXT - strlen(buf), "%s%.4f", i ? ", " : "[", x[i]);
    strcat(buf, "]");
    return buf;
}

/* Integer multiples of a named unit: {1, 1, 2} in "c" -> "[c, c, 2c]". */
static const char *multiples(char *buf, int n, const int *k, const char *unit) {
    buf[0] = 0;
    for (int i = 0; i < n; i++) {
        char one[32];
        if (k[i] == NEG_INF) snprintf(one, sizeof one, "−∞");
        else if (k[i] == 0) snprintf(one, sizeof one, "0");
        else if (k[i] == 1) snprintf(one, sizeof one, "%s", unit);
        else snprintf(one, sizeof one, "%d%s", k[i], unit);
        snprintf(buf + strlen(buf), TEXT - strlen(buf), "%s%s", i ? ", " : "[", one);
    }
    strcat(buf, "]");
    return buf;
}

static void expect_text(const char *out, const char *want, const char *what) {
    if (!strstr(out, want)) fail_msg("%s: the demo output lacks \"%s\"", what, want);
}

/* The line of out that contains key (static buffer), for row-wise checks. */
static const char *line_with(const char *out, const char *key) {
    static char line[1024];
    const char *hit = strstr(out, key);
    if (!hit) fail_msg("no line contains \"%s\"", key);
    const char *start = hit, *end = strchr(hit, '\n');
    while (start > out && start[-1] != '\n') start--;
    size_t n = end ? (size_t)(end - start) : strlen(start);
    if (n >= sizeof line) n = sizeof line - 1;
    memcpy(line, start, n);
    line[n] = 0;
    return line;
}

/* Copies text with every run of spaces collapsed to one. */
static void squeeze(char *dst, size_t size, const char *text, size_t len) {
    size_t n = 0;
    for (size_t i = 0; i < len && text[i] && n + 1 < size; i++)
        if (!(text[i] == ' ' && n > 0 && dst[n - 1] == ' ')) dst[n++] = text[i];
    dst[n] = 0;
}

/* Some line of out contains row, once the column padding of both is
 * collapsed (the demo aligns its columns, so spacing depends on widths). */
static void expect_row(const char *out, const char *row, const char *what) {
    char want[1024], got[1024];
    squeeze(want, sizeof want, row, strlen(row));
    for (const char *line = out; *line;) {
        const char *eol = strchr(line, '\n');
        size_t len = eol ? (size_t)(eol - line) : strlen(line);
        squeeze(got, sizeof got, line, len);
        if (strstr(got, want)) return;
        line += len + (eol ? 1 : 0);
    }
    fail_msg("%s: no line of the demo output reads \"%s\"", what, want);
}

/* ------------------------------------------------- the digest's numbers */

/* Every number of the digest's worked example and exercises, in the
 * printed formats.  The numbers are the same in both languages; only the
 * word before a row's exp sum differs (sum_word). */
static void expect_chapter_numbers(const char *out, const char *sum_word) {
    char a[TEXT], b[TEXT], want[2 * TEXT];
    const double c = sqrt(2.0) * log(2.0), ln2 = log(2.0);

    /* c = √2·ln2 ≈ 0.9803 */
    snprintf(want, sizeof want, "√2·ln2 ≈ %.4f", c);
    expect_text(out, want, "c");

    /* X, W and Q, K, V (§2) */
    static const int x[3][2] = {{1, 0}, {0, 1}, {1, 1}}, vrow[3][2] = {{2, 0}, {0, 1}, {2, 1}};
    static const int ones[3] = {1, 1, 1};
    for (int i = 0; i < 3; i++) {
        snprintf(want, sizeof want, "x%d  %s", i + 1, fractions(a, 2, x[i], ones));
        expect_text(out, want, "X");
        snprintf(want, sizeof want, "q%d  %s", i + 1, fractions(a, 2, x[i], ones));
        expect_text(out, want, "Q");
        double kd[2] = {c * x[i][0], c * x[i][1]};
        snprintf(want, sizeof want, "k%d  %s = %s", i + 1, multiples(a, 2, x[i], "c"), decimals(b, 2, kd));
        expect_text(out, want, "K");
        snprintf(want, sizeof want, "v%d  %s", i + 1, fractions(a, 2, vrow[i], ones));
        expect_text(out, want, "V");
    }

    /* §3: raw scores, scaled scores, exp values and sums, weights per row */
    static const int score_k[3][3] = {{1, 0, 1}, {0, 1, 1}, {1, 1, 2}}; /* in c, then in ln2 */
    static const int exps[3][3] = {{2, 1, 2}, {1, 2, 2}, {2, 2, 4}}, sums[3] = {5, 5, 8};
    static const int wnum[3][3] = {{2, 1, 2}, {1, 2, 2}, {1, 1, 1}}, wden[3][3] = {{5, 5, 5}, {5, 5, 5}, {4, 4, 2}};
    for (int i = 0; i < 3; i++) {
        double raw[3], scaled[3], w[3];
        for (int j = 0; j < 3; j++) {
            raw[j] = c * score_k[i][j];
            scaled[j] = ln2 * score_k[i][j];
            w[j] = (double)wnum[i][j] / wden[i][j];
        }
        snprintf(want, sizeof want, "%s = %s", multiples(a, 3, score_k[i], "c"), decimals(b, 3, raw));
        expect_row(out, want, "raw scores");
        snprintf(want, sizeof want, "%s = %s", multiples(a, 3, score_k[i], "ln2"), decimals(b, 3, scaled));
        expect_row(out, want, "scaled scores");
        snprintf(want, sizeof want, "%s ", fractions(a, 3, exps[i], ones));
        snprintf(b, sizeof b, "%s %d", sum_word, sums[i]);
        expect_text(line_with(out, want), b, "exp sum");
        snprintf(want, sizeof want, "%s = %s", fractions(a, 3, wnum[i], wden[i]), decimals(b, 3, w));
        expect_row(out, want, "weights");
    }

    /* §4: o3 = 1/4·[2, 0] + 1/4·[0, 1] + 1/2·[2, 1] = [1.5, 0.75]; all outputs */
    const double o[3][2] = {{1.6, 0.6}, {1.2, 0.8}, {1.5, 0.75}};
    snprintf(want, sizeof want, "o3 = 1/4·[2, 0] + 1/4·[0, 1] + 1/2·[2, 1] = %s", decimals(a, 2, o[2]));
    expect_text(out, want, "o3 worked");
    for (int i = 0; i < 3; i++) {
        snprintf(want, sizeof want, "o%d  %s", i + 1, decimals(a, 2, o[i]));
        expect_text(out, want, "outputs");
    }
    expect_text(out, "3×2", "shape 3×2");
    expect_text(out, "3×3", "shape 3×3");

    /* Context change: k2 = [0, 2c], v2 = [0, 2]; q3: ln2, 2ln2, 2ln2 ->
     * 1/5, 2/5, 2/5 -> [1.2, 1.2] */
    static const int k2_new[2] = {0, 2}, s3_new[3] = {1, 2, 2};
    expect_text(out, multiples(a, 2, k2_new, "c"), "changed k2");
    expect_text(out, multiples(a, 3, s3_new, "ln2"), "changed q3 scores");
    static const double o3_both[2] = {1.2, 1.2};
    expect_text(out, decimals(a, 2, o3_both), "changed o3");

    /* Figure 2: original / K only / V only / both, one row each */
    static const struct { int wn[3], wd[3]; double o3[2]; } fig2[4] = {
        {{1, 1, 1}, {4, 4, 2}, {1.5, 0.75}},
        {{1, 2, 2}, {5, 5, 5}, {1.2, 0.8}},
        {{1, 1, 1}, {4, 4, 2}, {1.5, 1.0}},
        {{1, 2, 2}, {5, 5, 5}, {1.2, 1.2}},
    };
    static const int k2_old[2] = {0, 1}, v2_old[2] = {0, 1}, v2_new[2] = {0, 2};
    for (int i = 0; i < 4; i++) {
        char row[4 * TEXT], k2[TEXT], v2[TEXT], w3[TEXT], o3[TEXT];
        snprintf(row, sizeof row, "%s %s %s %s", multiples(k2, 2, (i & 1) ? k2_new : k2_old, "c"),
                 fractions(v2, 2, (i & 2) ? v2_new : v2_old, ones), fractions(w3, 3, fig2[i].wn, fig2[i].wd),
                 decimals(o3, 2, fig2[i].o3));
        expect_row(out, row, "Figure 2");
    }

    /* §5 causal mask, row 2: 0, ln2, −∞ -> exp [1, 2, 0], sum 3 -> [1/3, 2/3, 0]
     * -> o2 = [2/3, 2/3]; wrong way: 1/5 + 2/5 = 3/5 */
    static const int masked[3] = {0, 1, NEG_INF}, e2[3] = {1, 2, 0};
    static const int cw_num[3] = {1, 2, 0}, cw_den[3] = {3, 3, 1};
    expect_text(out, multiples(a, 3, masked, "ln2"), "masked scores");
    snprintf(want, sizeof want, "%s %d", sum_word, 3);
    expect_text(line_with(out, fractions(a, 3, e2, ones)), want, "masked exp");
    expect_text(out, fractions(a, 3, cw_num, cw_den), "causal weights");
    const double o2c[2] = {2.0 / 3, 2.0 / 3};
    static const int two_thirds_n[2] = {2, 2}, two_thirds_d[2] = {3, 3};
    snprintf(want, sizeof want, "o2 = 1/3·[2, 0] + 2/3·[0, 1] = %s = %s", decimals(a, 2, o2c),
             fractions(b, 2, two_thirds_n, two_thirds_d));
    expect_text(out, want, "causal o2");
    snprintf(want, sizeof want, "1/5 + 2/5 = 3/5 = %.4f", 3.0 / 5);
    expect_text(out, want, "wrong-way sum");
    static const int causal_row1[3] = {1, 0, 0};
    snprintf(want, sizeof want, "q1  %s", fractions(a, 3, causal_row1, ones));
    expect_text(out, want, "causal row 1");

    /* §6 shapes: 3×2 + 3×2 -> 3×4 -> ×W_O 4×2 -> 3×2 */
    snprintf(want, sizeof want, "%d×%d + %d×%d → %d×%d → ×W_O %d×%d → %d×%d", 3, 2, 3, 2, 3, 2 * 2, 2 * 2, 2, 3, 2);
    expect_text(out, want, "multi-head shape walk");
    snprintf(want, sizeof want, "W_O  %d×%d", 4, 2);
    expect_text(out, want, "W_O shape");

    /* §7: 8 heads of width 64; Qwen3-0.6B 16 query / 8 key-value heads */
    expect_text(out, "Qwen3-0.6B", "Qwen3");
    const char *qwen = line_with(out, "Qwen3-0.6B");
    snprintf(want, sizeof want, "%d", 16);
    expect_text(qwen, want, "Qwen3 query heads");
    snprintf(want, sizeof want, "%d", 64);
    expect_text(out, want, "2017 head width");

    /* §8: 100 -> 200 positions, 10,000 -> 40,000 cells, ×4 */
    expect_text(line_with(out, "n = 100 "), "10,000", "n² for 100");
    expect_text(line_with(out, "n = 200 "), "40,000", "n² for 200");
    snprintf(want, sizeof want, "×%d", 40000 / 10000);
    expect_text(line_with(out, "n = 200 "), want, "n² ratio");

    /* Exercises: 1 -> [1.5, 1.0]; 2 -> as §5; 3 -> [2, 1] twice */
    static const double o3_v_only[2] = {1.5, 1.0};
    snprintf(want, sizeof want, "o3 = 1/4·[2, 0] + 1/4·[0, 2] + 1/2·[2, 1] = %s", decimals(a, 2, o3_v_only));
    expect_text(out, want, "exercise 1");
    static const double ex3_out[2] = {2, 1};
    static const double ex3_w[2][2] = {{0.2, 0.8}, {0.7, 0.3}};
    for (int r = 0; r < 2; r++) {
        snprintf(want, sizeof want, "%.1f·[2, 1] + %.1f·[2, 1] = %s", ex3_w[r][0], ex3_w[r][1],
                 decimals(a, 2, ex3_out));
        expect_text(out, want, "exercise 3");
    }
}

/* ------------------------------------------------------------- the tests */

/* Runs the demo with LANG set to lang (NULL: unset), restoring LANG after. */
static int run_with_lang(char **out, const char *lang, const char *args) {
    const char *saved = getenv("LANG");
    char *copy = saved ? strdup(saved) : NULL;
    if (lang) setenv("LANG", lang, 1);
    else unsetenv("LANG");
    int rc = test_run_cli(out, "%s", args);
    if (copy) setenv("LANG", copy, 1);
    else unsetenv("LANG");
    free(copy);
    return rc;
}

static void english(void **state) {
    (void)state;
    char *out;
    assert_int_equal(test_run_cli(&out, "demo --lang en"), 0);
    expect_chapter_numbers(out, "sum");
    const char *const terms[] = {"query", "key", "value", "share", "causal mask",
                                 "Figure 2", "concatenation", "grouped-query", "Exercises"};
    for (size_t i = 0; i < sizeof terms / sizeof terms[0]; i++) expect_text(out, terms[i], "English term");
    assert_null(strstr(out, "查询"));
    /* readable in an ordinary terminal: no line wider than 100 columns */
    for (const char *line = out; *line;) {
        const char *eol = strchr(line, '\n');
        size_t bytes = eol ? (size_t)(eol - line) : strlen(line);
        int columns = 0;
        for (size_t i = 0; i < bytes; i++) columns += ((unsigned char)line[i] & 0xC0) != 0x80;
        if (columns > 100) fail_msg("line of %d columns: %.*s", columns, (int)bytes, line);
        line += bytes + (eol ? 1 : 0);
    }
    free(out);
}

static void chinese(void **state) {
    (void)state;
    char *out;
    assert_int_equal(test_run_cli(&out, "demo --lang zh"), 0);
    expect_chapter_numbers(out, "总和");
    /* the chapter's own terms */
    const char *const terms[] = {"查询", "键", "值", "份额", "匹配", "缩放", "归一化", "加权组合",
                                 "匹配表", "上下文改动", "受控检查", "因果路径", "因果掩码",
                                 "多头注意力", "拼接", "输出投影", "自注意力", "交叉注意力",
                                 "分组查询注意力", "注意力图", "本章练习"};
    for (size_t i = 0; i < sizeof terms / sizeof terms[0]; i++) expect_text(out, terms[i], "Chinese term");
    assert_null(strstr(out, "Exercises"));
    free(out);
}

static void language_from_environment(void **state) {
    (void)state;
    char *out;
    assert_int_equal(run_with_lang(&out, "zh_CN.UTF-8", "demo"), 0);
    expect_text(out, "查询", "LANG=zh_CN.UTF-8");
    free(out);
    assert_int_equal(run_with_lang(&out, "zh_TW", "demo"), 0);
    expect_text(out, "查询", "LANG=zh_TW");
    free(out);
    assert_int_equal(run_with_lang(&out, "en_US.UTF-8", "demo"), 0);
    expect_text(out, "Exercises", "LANG=en_US.UTF-8");
    free(out);
    assert_int_equal(run_with_lang(&out, NULL, "demo"), 0);
    expect_text(out, "Exercises", "LANG unset");
    free(out);
    /* --lang wins over the environment, in both spellings */
    assert_int_equal(run_with_lang(&out, "zh_CN.UTF-8", "demo --lang en"), 0);
    expect_text(out, "Exercises", "--lang en over LANG=zh");
    free(out);
    assert_int_equal(run_with_lang(&out, "C", "demo --lang=zh"), 0);
    expect_text(out, "查询", "--lang=zh over LANG=C");
    free(out);
}

static void usage(void **state) {
    (void)state;
    char *out;
    assert_int_equal(test_run_cli(&out, "demo --help"), 0);
    expect_text(out, "--lang en|zh", "help");
    free(out);
    assert_int_equal(test_run_cli(&out, "demo -h --lang zh"), 0);
    expect_text(out, "--lang en|zh", "help in Chinese");
    expect_text(out, "用法", "help in Chinese");
    free(out);
    assert_int_equal(test_run_cli(&out, "demo --lang xx"), 2);
    expect_text(out, "xx", "unknown language named");
    free(out);
    assert_int_equal(test_run_cli(&out, "demo --lang"), 2);
    expect_text(out, "--lang", "missing value");
    free(out);
    assert_int_equal(test_run_cli(&out, "demo --bogus"), 2);
    expect_text(out, "--bogus", "unknown flag named");
    free(out);
    assert_int_equal(test_run_cli(&out, "demo extra"), 2);
    expect_text(out, "extra", "stray argument named");
    free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(english),
        cmocka_unit_test(chinese),
        cmocka_unit_test(language_from_environment),
        cmocka_unit_test(usage),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
