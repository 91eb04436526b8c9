/*
 * testutil.h — small helpers shared by the tests: a seeded random generator,
 * temporary files, and running the attn program.  Nothing here computes
 * attention: oracles live in the tests themselves, written independently of
 * the library's kernels.
 */
#ifndef ATTN_TESTUTIL_H
#define ATTN_TESTUTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

/* xorshift64*: deterministic, seeded, the same on every machine. */
typedef struct { uint64_t state; } test_rng;
void test_rng_seed(test_rng *r, uint64_t seed);
uint64_t test_rng_next(test_rng *r);
double test_rng_uniform(test_rng *r);           /* [0, 1) */
double test_rng_normal(test_rng *r);            /* N(0, 1) */
int64_t test_rng_range(test_rng *r, int64_t n); /* [0, n) */
void test_fill_normal(test_rng *r, float *x, int64_t n, double scale);

/* A fresh private temporary directory (removed by test_tmpdir_cleanup). */
const char *test_tmpdir(void);
/* Path tmpdir/name in a static buffer that rotates among 64: keep a copy
 * if it must outlive many later calls. */
const char *test_path(const char *name);
void test_tmpdir_cleanup(void);
/* A cmocka group teardown that removes the temporary directory. */
int test_group_teardown(void **state);

/* Runs `ATTN_CLI_PATH args...` through /bin/sh with output captured.
 * Returns the exit status (or 128 + signal); *output gets stdout+stderr,
 * malloc'd, NUL-terminated (free it). */
int test_run_cli(char **output, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Under LeakSanitizer (-DATTN_SANITIZE=ON): fontconfig keeps its
 * configuration for the life of a process, and cairo 1.16 leaks one font
 * subset (768 bytes) for every PDF with text it writes.  Neither is ours:
 * with cairo_debug_reset_static_data() and FcFini() called before exit, PNG
 * and SVG output shows no leak and PDF output only cairo's subset.  A test
 * that draws in its own process returns this text from
 * __lsan_default_suppressions; test_suppress_picture_leaks_in_children gives
 * it to the attn processes a test starts (LSAN_OPTIONS, through a file in
 * the temporary directory). */
#define TEST_PICTURE_LIBRARY_LEAKS "leak:libfontconfig.so\nleak:libcairo.so\n"
void test_suppress_picture_leaks_in_children(void);

/* Writes raw bytes to a file; returns 0 on success. */
int test_write_file(const char *path, const void *data, size_t size);
/* Reads a whole file (malloc'd); NULL if missing. */
void *test_read_file(const char *path, size_t *size);
int test_file_exists(const char *path);

#endif
