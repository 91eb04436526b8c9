/*
 * testutil.h — small helpers shared by the tests: the checks of a library
 * call's status, a seeded random generator, temporary files, and running the
 * attn program.  Nothing here computes attention: oracles live in the tests
 * themselves, written independently of the library's kernels.
 */
#ifndef ATTN_TESTUTIL_H
#define ATTN_TESTUTIL_H

#include "attn.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

/* Fails the test unless the call returns ATTN_OK, naming the call, its
 * status and attn_last_error(). */
#define assert_ok(call)                                                                            \
    do {                                                                                           \
        attn_status assert_ok_st_ = (call);                                                        \
        if (assert_ok_st_ != ATTN_OK)                                                              \
            fail_msg("%s: %s (%s)", #call, attn_status_str(assert_ok_st_), attn_last_error());     \
    } while (0)

/* Fails the test unless the call returns status and attn_last_error()
 * contains needle, printing the actual status and message either way it
 * goes wrong. */
#define assert_refused(call, status, needle)                                                       \
    do {                                                                                           \
        attn_status assert_refused_st_ = (call);                                                   \
        if (assert_refused_st_ != (status) || !strstr(attn_last_error(), (needle)))                \
            fail_msg("%s: got status %d (want %d), message \"%s\" (want it to mention \"%s\")",    \
                     #call, (int)assert_refused_st_, (int)(status), attn_last_error(), (needle));  \
    } while (0)

/* A row-by-row sweep's failures (the hostile-input tables): each is printed
 * and counted, and the sweep goes on, so that one run shows every row that
 * goes wrong; test_assert_no_row_failed fails the test at its end if any
 * did (and resets the count). */
void test_row_failed(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int test_rows_failed(void); /* the count so far */
void test_assert_no_row_failed(void);

/* 1 in a build under AddressSanitizer (-DATTN_SANITIZE=ON), where the
 * model forwards run ~20x slower: the tests with real models do less. */
#if defined(__SANITIZE_ADDRESS__)
#define UNDER_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_SANITIZER 1
#endif
#endif
#ifndef UNDER_SANITIZER
#define UNDER_SANITIZER 0
#endif

/* xorshift64*: deterministic, seeded, the same on every machine. */
typedef struct { uint64_t state; } test_rng;
void test_rng_seed(test_rng *r, uint64_t seed);
uint64_t test_rng_next(test_rng *r);
double test_rng_uniform(test_rng *r);           /* [0, 1) */
double test_rng_normal(test_rng *r);            /* N(0, 1) */
int64_t test_rng_range(test_rng *r, int64_t n); /* [0, n) */
void test_fill_normal(test_rng *r, float *x, int64_t n, double scale);
/* n values of N(0, scale^2), malloc'd (at least one element: n may be 0). */
float *test_random_floats(test_rng *r, int64_t n, double scale);
/* n NaNs, malloc'd (at least one element): an output buffer in which
 * anything left unwritten shows. */
float *test_nan_filled(int64_t n);

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
/* Every flag `attn CMD --list-options` prints is shown by `attn CMD --help`
 * (fails naming the first that is not); returns how many flags there are.
 * test_cli_matrix checks the subcommands so; this is for a command's actions
 * (model generate, model bench). */
int test_cli_flags_in_help(const char *cmd);
/* Runs `attn args...` (as test_run_cli) and fails the test unless it exits
 * with want_status and its output contains needle ("" for any output). */
void test_cli_expect(int want_status, const char *needle, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* A child process run without a shell, for the tests that must watch it:
 * its exit, its peak memory, a hang, a signal sent mid-run.  stdout and
 * stderr go together to a file of the temporary directory. */
typedef struct test_child {
    int pid;
    int status;     /* exit status, or 128 + signal; -1 before it ended */
    int timed_out;  /* it ran past the limit and was killed (SIGKILL)   */
    long maxrss_kb; /* peak resident set size (wait4's ru_maxrss)        */
    double seconds; /* wall time from start to end                       */
    char *output;   /* stdout + stderr, NUL-terminated (malloc'd)        */
    char log[512];
    double started;
    int launched;   /* started by the launcher (below)                   */
} test_child;

/* Forks, now, a small process that starts the children asked for later
 * (those without a setup function).  A child forked by the test itself
 * starts with the test's resident pages counted as its own, and wait4
 * reports the larger of those and what the program used; started by the
 * launcher, it starts with the launcher's few, and maxrss_kb is the
 * program's.  Call it early (a group setup), before the test grows. */
void test_launcher_start(void);

/* Starts argv[0] with argv (NULL-terminated).  setup, if not NULL, runs in
 * the child just before exec (rlimits, signal dispositions); such a child
 * is forked by the test itself.  Aborts the test on failure to fork. */
void test_child_start(test_child *c, const char *const *argv, void (*setup)(void *), void *arg);
/* Waits for the child, killing it with SIGKILL after timeout_s seconds,
 * and fills status, timed_out, maxrss_kb, seconds and output. */
void test_child_finish(test_child *c, double timeout_s);
/* True once the child has ended (reaped and filled in as by finish). */
int test_child_poll(test_child *c);
void test_child_free(test_child *c);
/* Runs ATTN_CLI_PATH with args (NULL-terminated, without argv[0]) to the
 * end, as start + finish. */
void test_child_run_cli(test_child *c, const char *const *args, double timeout_s, void (*setup)(void *),
                        void *arg);
/* A monotonic clock in seconds. */
double test_now(void);

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

/* The number of entries of dir whose name contains ".tmp-": the temporary
 * files of attn's atomic outputs (attn_io.h) left behind. */
int test_temp_files_in(const char *dir);

/* Creates a Unix socket named path (bound, then closed: the name stays),
 * for the tests that hand the library a path that is not a file. */
void test_make_socket(const char *path);

/* Writes raw bytes to a file; returns 0 on success. */
int test_write_file(const char *path, const void *data, size_t size);
/* Reads a whole file (malloc'd); NULL if missing. */
void *test_read_file(const char *path, size_t *size);
int test_file_exists(const char *path);

#endif
