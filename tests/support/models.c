/*
 * models.c — where the tests find the real models (models.h).
 */
#include "models.h"

#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

const char *test_model_dir(void) {
    static char dir[512];
    const char *env = getenv("ATTN_MODEL_DIR");
    const char *home = getenv("HOME");
    if (env && *env)
        snprintf(dir, sizeof dir, "%s", env);
    else
        snprintf(dir, sizeof dir, "%s/.cache/attn/models", home ? home : "");
    return dir;
}

const char *test_model_path(const char *file) {
    static char path[8][768];
    static int turn;
    char *p = path[turn++ % 8];
    snprintf(p, sizeof path[0], "%s/%s", test_model_dir(), file);
    struct stat st;
    return stat(p, &st) == 0 ? p : NULL;
}

const char *test_model_or_skip(const char *file) {
    const char *path = test_model_path(file);
    if (!path) {
        print_message("skipped: %s/%s is not there (scripts/fetch-models.sh fetches it)\n", test_model_dir(), file);
        skip();
    }
    return path;
}
