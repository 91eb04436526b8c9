/*
 * test_pictures_exit.c — `attn map` (PNG, SVG) and `attn demo --figures`
 * end with nothing of the drawing libraries left for LeakSanitizer to
 * report: the program hands cairo's font caches back at exit
 * (attn_pictures_release).  Issue 33's seventh finding: in the sanitizer
 * build, on a machine with fonts, both exited 1 with LeakSanitizer
 * reporting cairo's toy-font cache (cairo_select_font_face, via fontconfig),
 * which tests/lsan.supp does not cover.
 *
 * The children get this process's environment and nothing more: under
 * .ci/run's sanitizer step that is LSAN_OPTIONS with tests/lsan.supp only
 * (no picture suppressions, unlike the other drawing tests).  PDF is left
 * out: cairo 1.16 leaks one font subset per PDF it writes, which no call
 * can free (the drawing tests suppress libcairo for it).  Outside the
 * sanitizer build this checks that the commands succeed.
 */
#include "testutil.h"

#include "attn.h"
#include "attn_io.h"
#include "attn_viz.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void run_ok(const char *const *args) {
    test_child c;
    test_child_run_cli(&c, args, 300, NULL, NULL);
    if (c.status != 0) {
        char line[1024] = "";
        for (int i = 0; args[i]; i++) snprintf(line + strlen(line), sizeof line - strlen(line), " %s", args[i]);
        const char *lsan = getenv("LSAN_OPTIONS");
        fail_msg("attn%s: exit %d (LSAN_OPTIONS=%s):\n%s", line, c.status, lsan ? lsan : "", c.output);
    }
    test_child_free(&c);
}

static void drawing_commands_exit_clean(void **state) {
    (void)state;
    if (!attn_pictures_available()) {
        print_message("skipped: this build draws no pictures (no cairo)\n");
        skip();
    }
    /* Whether fonts are there decides whether the caches fill at all. */
    if (system("find /usr/share/fonts -name '*.tt[fc]' -o -name '*.otf' 2>/dev/null | grep -q .") != 0)
        print_message("note: no font is installed here, so cairo's font caches stay small; the finding needs fonts\n");
    const int64_t shape[4] = {1, 2, 3, 3};
    float w[18];
    for (int i = 0; i < 18; i++) w[i] = (float)(i % 3) / 3.0f;
    attn_array a = {.dtype = ATTN_F32, .ndim = 4, .count = 18, .data = w};
    memcpy(a.shape, shape, sizeof shape);
    if (attn_npy_save(test_path("w.npy"), &a)) fail_msg("%s", attn_last_error());
    char weights[512], png[512], svg[512], figures[512];
    snprintf(weights, sizeof weights, "%s", test_path("w.npy"));
    snprintf(png, sizeof png, "%s", test_path("map.png"));
    snprintf(svg, sizeof svg, "%s", test_path("map.svg"));
    snprintf(figures, sizeof figures, "%s", test_path("figures"));
    const char *map_png[] = {"map", "--weights", weights, "--tokens", "我,吃,了", "-o", png, "--quiet", NULL};
    const char *map_svg[] = {"map", "--weights", weights, "-o", svg, "--quiet", NULL};
    const char *demo[] = {"demo", "--lang", "zh", "--figures", figures, NULL};
    run_ok(map_png);
    run_ok(map_svg);
    run_ok(demo);
    assert_true(test_file_exists(png) && test_file_exists(svg));
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(drawing_commands_exit_clean)};
    return cmocka_run_group_tests(tests, NULL, test_group_teardown);
}
