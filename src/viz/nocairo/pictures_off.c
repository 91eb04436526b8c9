/*
 * pictures_off.c — the picture entry points of a build without cairo: each
 * says so and returns ATTN_ERR_UNSUPPORTED.  (CMake compiles this file only
 * when pkg-config finds no cairo; the HTML report does not need cairo.)
 */
#include "viz/viz.h"

#define PICTURES_OFF                                                                            \
    "this libattn was built without cairo, so it draws no pictures (install cairo, e.g. "      \
    "Debian's libcairo2-dev, and rebuild); the HTML report (attn_report_write_html) still works"

int attn_pictures_available(void) { return 0; }

void attn_pictures_release(void) {}

attn_status attn_heatmap_write(const char *path, const float *weights, int64_t heads,
                               int64_t len_q, int64_t len_kv, const attn_heatmap_options *opt) {
    (void)weights, (void)heads, (void)len_q, (void)len_kv, (void)opt;
    return attn__fail(ATTN_ERR_UNSUPPORTED, "'%s': %s", path ? path : "(null)", PICTURES_OFF);
}

attn_status attn_chapter_figure_write(const char *path, int figure, const char *lang) {
    (void)figure, (void)lang;
    return attn__fail(ATTN_ERR_UNSUPPORTED, "'%s': %s", path ? path : "(null)", PICTURES_OFF);
}

attn_status attn_lineplot_write(const char *path, const double *y, int64_t n, const attn_lineplot_options *opt) {
    (void)y, (void)n, (void)opt;
    return attn__fail(ATTN_ERR_UNSUPPORTED, "'%s': %s", path ? path : "(null)", PICTURES_OFF);
}
