/*
 * release.c — attn_pictures_release (attn_viz.h): what cairo keeps for the
 * life of the process handed back, so that LeakSanitizer at a program's
 * exit reports none of it.  cairo's toy-font cache (filled by
 * cairo_select_font_face in draw.c) goes with cairo_debug_reset_static_data;
 * the fontconfig patterns and configuration behind it with FcFini, which is
 * looked up at run time: libattn_viz links cairo, not fontconfig, and a
 * cairo built without fontconfig has none to release.
 */
#define _GNU_SOURCE /* RTLD_DEFAULT */
#include "viz/viz.h"

#include <cairo.h>
#include <dlfcn.h>
#include <string.h>

void attn_pictures_release(void) {
    cairo_debug_reset_static_data(); /* first: it drops cairo's references to fontconfig's patterns */
    void *symbol = dlsym(RTLD_DEFAULT, "FcFini");
    void (*fc_fini)(void);
    memcpy(&fc_fini, &symbol, sizeof fc_fini); /* POSIX's way from a symbol to a function */
    if (symbol) fc_fini();
}
