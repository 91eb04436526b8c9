#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

void test_rng_seed(test_rng *r, uint64_t seed) { r->state = seed * 2654435761u + 0x9E3779B97F4A7C15ull; if (!r->state) r->state = 1; }

uint64_t test_rng_next(test_rng *r) {
    r->state ^= r->state >> 12;
    r->state ^= r->state << 25;
    r->state ^= r->state >> 27;
    return r->state * 0x2545F4914F6CDD1Dull;
}

double test_rng_uniform(test_rng *r) { return (double)(test_rng_next(r) >> 11) * (1.0 / 9007199254740992.0); }

double test_rng_normal(test_rng *r) {
    /* Box-Muller; 1 - u keeps the log argument in (0, 1]. */
    double u = 1.0 - test_rng_uniform(r), w = test_rng_uniform(r);
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * w);
}

int64_t test_rng_range(test_rng *r, int64_t n) { return (int64_t)(test_rng_next(r) % (uint64_t)n); }

void test_fill_normal(test_rng *r, float *x, int64_t n, double scale) {
    for (int64_t i = 0; i < n; i++) x[i] = (float)(scale * test_rng_normal(r));
}

static char tmpdir_buf[256];

const char *test_tmpdir(void) {
    if (!tmpdir_buf[0]) {
        const char *base = getenv("TMPDIR");
        snprintf(tmpdir_buf, sizeof tmpdir_buf, "%s/attn-test-XXXXXX", base && *base ? base : "/tmp");
        if (!mkdtemp(tmpdir_buf)) { perror("mkdtemp"); abort(); }
    }
    return tmpdir_buf;
}

const char *test_path(const char *name) {
    static char bufs[64][512];
    static int next;
    char *b = bufs[next++ % 64];
    snprintf(b, 512, "%s/%s", test_tmpdir(), name);
    return b;
}

void test_tmpdir_cleanup(void) {
    if (!tmpdir_buf[0]) return;
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir_buf);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir_buf);
    tmpdir_buf[0] = 0;
}

int test_group_teardown(void **state) {
    (void)state;
    test_tmpdir_cleanup();
    return 0;
}

int test_run_cli(char **output, const char *fmt, ...) {
    char args[8192], cmd[8400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "%s %s 2>&1", ATTN_CLI_PATH, args);
    FILE *f = popen(cmd, "r");
    if (!f) { perror("popen"); abort(); }
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    size_t got;
    while ((got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (cap - n < 2) buf = realloc(buf, cap *= 2);
    }
    buf[n] = 0;
    int st = pclose(f);
    if (output) *output = buf; else free(buf);
    if (WIFEXITED(st)) return WEXITSTATUS(st);
    if (WIFSIGNALED(st)) return 128 + WTERMSIG(st);
    return -1;
}

void test_suppress_picture_leaks_in_children(void) {
    const char *path = test_path("lsan-pictures.supp");
    if (test_write_file(path, TEST_PICTURE_LIBRARY_LEAKS, strlen(TEST_PICTURE_LIBRARY_LEAKS)) != 0) return;
    char options[1024];
    const char *old = getenv("LSAN_OPTIONS");
    snprintf(options, sizeof options, "%s%ssuppressions=%s:print_suppressions=0", old ? old : "", old ? ":" : "", path);
    setenv("LSAN_OPTIONS", options, 1);
}

int test_write_file(const char *path, const void *data, size_t size) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(data, 1, size, f);
    return (fclose(f) == 0 && w == size) ? 0 : -1;
}

void *test_read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    size_t got = fread(buf, 1, (size_t)n, f);
    fclose(f);
    buf[got] = 0;
    if (size) *size = got;
    return buf;
}

int test_file_exists(const char *path) { struct stat st; return stat(path, &st) == 0; }
