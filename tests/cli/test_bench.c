/*
 * test_bench.c — the measurement side of issue 3, by properties, never by
 * times (DESIGN.md §5: times on shared machines drift; STYLE.md: no timing
 * assertions in the test suite).  The machine limits come back positive and
 * finite with status codes for bad arguments; `attn bench --csv` prints
 * well-formed rows under its documented header; bad flags exit 2.
 */
#include "testutil.h"
#include "tolerances.h"
#include "isa/isa.h"

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

/* The header `attn bench --help` documents and `--csv` prints first. */
static const char csv_header[] =
    "section,name,kernel,isa,threads,B,L,S,Hq,Hkv,D,mask,runs,median_ms,gflops,pct_peak,gbps,"
    "pct_bw,workspace_bytes,peak_rss_bytes,io_bytes,status";
enum { CSV_FIELDS = 22 };

static void fma_peak_is_positive_and_finite(void **state) {
    (void)state;
    double gflops = -1.0;
    assert_int_equal(attn_measure_fma_peak(1, 0.05, &gflops), ATTN_OK);
    assert_true(isfinite(gflops) && gflops > 0.0);
    gflops = -1.0;
    assert_int_equal(attn_measure_fma_peak(0, 0.05, &gflops), ATTN_OK);
    assert_true(isfinite(gflops) && gflops > 0.0);
    /* the peak loop of one of the registry's ISAs, one this CPU runs */
    const char *isa = attn_fma_peak_isa();
    bool known = false;
    for (int i = 0; i < attn__isa_count(); i++)
        known = known || (attn__isa_supported(i) && strcmp(isa, attn__isa_flash(i)->peak_isa) == 0);
    assert_true(known);
}

static void bandwidth_is_positive_and_finite(void **state) {
    (void)state;
    double gbps = -1.0;
    assert_int_equal(attn_measure_bandwidth(1, (size_t)3 << 20, &gbps), ATTN_OK);
    assert_true(isfinite(gbps) && gbps > 0.0);
    for (int threads = 0; threads <= 2; threads++) {
        gbps = -1.0;
        assert_int_equal(attn_measure_read_bandwidth(threads, (size_t)4 << 20, &gbps), ATTN_OK);
        assert_true(isfinite(gbps) && gbps > 0.0);
    }
    assert_true(attn_thread_count(3) == 3);
    assert_true(attn_thread_count(0) >= 1);
}

static void machine_limits_refuse_bad_arguments(void **state) {
    (void)state;
    double x;
    assert_int_equal(attn_measure_fma_peak(1, 0.05, NULL), ATTN_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "gflops"));
    assert_int_equal(attn_measure_fma_peak(1, 0.0, &x), ATTN_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "seconds"));
    assert_int_equal(attn_measure_fma_peak(-1, 0.05, &x), ATTN_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "threads"));
    assert_int_equal(attn_measure_bandwidth(1, 0, NULL), ATTN_ERR_INVALID_ARGUMENT);
    assert_int_equal(attn_measure_bandwidth(1, 100, &x), ATTN_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "bytes"));
    assert_int_equal(attn_measure_read_bandwidth(1, 0, NULL), ATTN_ERR_INVALID_ARGUMENT);
    assert_int_equal(attn_measure_read_bandwidth(-1, 0, &x), ATTN_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "threads"));
    assert_int_equal(attn_measure_read_bandwidth(1, 1000, &x), ATTN_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "bytes"));
}

/* Splits one CSV line (no quoting: the bench never writes commas inside a
 * field) into at most max fields; returns the count.  Modifies line. */
static int split_csv(char *line, char **fields, int max) {
    int n = 0;
    for (char *p = line; n < max;) {
        fields[n++] = p;
        char *comma = strchr(p, ',');
        if (!comma) break;
        *comma = 0;
        p = comma + 1;
    }
    return n;
}

static bool is_number(const char *text) {
    char *end;
    double x = strtod(text, &end);
    return *text && !*end && isfinite(x);
}

static void csv_rows_are_well_formed(void **state) {
    (void)state;
    char *out = NULL;
    int rc = test_run_cli(&out, "bench --csv --quick --threads 2 --filter 'decode S=4096'");
    if (rc != 0) fail_msg("attn bench exited %d:\n%s", rc, out);
    char *save = NULL, *line = strtok_r(out, "\n", &save);
    assert_non_null(line);
    assert_string_equal(line, csv_header);
    int machine_rows = 0, decode_rows = 0;
    while ((line = strtok_r(NULL, "\n", &save))) {
        char *f[CSV_FIELDS + 1];
        int n = split_csv(line, f, CSV_FIELDS + 1);
        if (n != CSV_FIELDS) fail_msg("%d fields, want %d: '%s'", n, CSV_FIELDS, line);
        /* Threads as asked; the reference kernel and the one-thread
         * machine figures run on one. */
        bool one = strcmp(f[2], "ref") == 0 || strstr(f[1], "_1thread");
        assert_string_equal(f[4], one ? "1" : "2");
        if (strcmp(f[0], "machine") == 0) {
            machine_rows++;
            const char *value = strncmp(f[1], "triad", 5) == 0 || strncmp(f[1], "read", 4) == 0 ? f[16] : f[14];
            assert_true(is_number(value) && atof(value) > 0.0);
            continue;
        }
        /* Only the filtered rows (K/V in float32, float16, bfloat16, q8_0, fp8), for
         * each kernel, the float32 one first; io_bytes counts each tensor
         * in its dtype. */
        assert_string_equal(f[0], "decode");
        static const char *const names[5] = {"decode S=4096", "decode S=4096 kv=f16", "decode S=4096 kv=bf16",
                                             "decode S=4096 kv=q8_0", "decode S=4096 kv=fp8"};
        static const double kv_bytes[5] = {4, 2, 2, 34.0 / 32, 34.0 / 32};
        const int t = decode_rows / 2;
        assert_string_equal(f[1], names[t]);
        const double io = 2.0 * 16 * 128 * 4 + 2.0 * 4096 * 8 * 128 * kv_bytes[t];
        assert_float_equal(atof(f[20]), io, 0.5);
        assert_string_equal(f[7], "4096");
        assert_string_equal(f[11], "causal-lower-right");
        decode_rows++;
        if (strcmp(f[21], "ok") == 0) {
            assert_true(is_number(f[12]) && atoi(f[12]) >= 1);
            assert_true(is_number(f[13]) && atof(f[13]) > 0.0);
            assert_true(is_number(f[14]) && atof(f[14]) > 0.0);
            assert_true(is_number(f[16]) && atof(f[16]) > 0.0);
            assert_true(is_number(f[18]));
        } else {
            assert_true(strcmp(f[21], "unavailable") == 0 || strcmp(f[21], "skipped") == 0);
        }
    }
    /* fma_peak, triad and read with their _threads and _1thread parts,
     * fma_peak_end and read_end */
    assert_int_equal(machine_rows, 11);
    assert_int_equal(decode_rows, 10);
    free(out);
}

/* Backward rows: section "backward", FLOPs counted as 2.5 x the forward's
 * (checked against the row's own time), a measured time and workspace. */
static void backward_rows(void **state) {
    (void)state;
    char *out = NULL;
    int rc = test_run_cli(&out, "bench --csv --quick --threads 2 --kernel flash --filter 'backward L=1024 Hkv=16 D=128 full'");
    if (rc != 0) fail_msg("attn bench exited %d:\n%s", rc, out);
    char *save = NULL, *line = strtok_r(out, "\n", &save);
    int rows = 0;
    while ((line = strtok_r(NULL, "\n", &save))) {
        char *f[CSV_FIELDS + 1];
        if (split_csv(line, f, CSV_FIELDS + 1) != CSV_FIELDS || strcmp(f[0], "backward") != 0) continue;
        assert_string_equal(f[1], "backward L=1024 Hkv=16 D=128 full");
        assert_string_equal(f[21], "ok");
        double ms = atof(f[13]), gflops = atof(f[14]);
        double flops = 2.5 * 4.0 * 16 * 1024.0 * 1024.0 * 128; /* 2.5 x 4·Hq·pairs·D */
        assert_true(ms > 0.0 && gflops > 0.0);
        assert_float_equal(gflops, flops / (ms * 1e-3) / 1e9, BENCH_GFLOPS_REL_FAIL * gflops);
        rows++;
    }
    assert_int_equal(rows, 1);
    free(out);
}

static void kernel_choice_and_help(void **state) {
    (void)state;
    char *out = NULL;
    assert_int_equal(test_run_cli(&out, "bench --help"), 0);
    assert_non_null(strstr(out, csv_header));
    assert_non_null(strstr(out, "median_ms"));
    free(out);
    assert_int_equal(test_run_cli(&out, "bench --csv --quick --kernel ref --filter 'decode S=4096'"), 0);
    assert_null(strstr(out, ",flash,"));
    assert_non_null(strstr(out, ",ref,"));
    free(out);
}

/* The rows a plan holds, counted from the sections --help documents:
 * prefill and backward each L x Hkv x D x {full, causal}; the bfloat16
 * prefill rows L x {exact, fast} x {full, causal}; decode per S x {f32,
 * f16, bf16, q8_0, fp8}; the long row in the full plan only; scaling n = 100, 200,
 * ... up to its last n; the cache rows (S = 4096, and 32768 in the full
 * plan, then the batch). */
static int documented_rows(bool quick) {
    const int prefill = quick ? 2 * 2 + 1 * 2    /* L=1024: Hkv 16, 8; L=4096: Hkv 16; D=128 */
                              : 5 * 2 * 2 * 2;   /* L=512..8192, Hkv 16 and 8, D 64 and 128 */
    const int prefill_bf16 = (quick ? 1 : 2) * 2 * 2;
    const int decode = (quick ? 2 : 3) * 5, longs = quick ? 0 : 1; /* f32, f16, bf16, q8_0, fp8 */
    int scaling = 0;
    for (int n = 100; n <= (quick ? 3200 : 12800); n *= 2) scaling++;
    /* float32, per S: sdpa, contiguous, paged x 2; the batch x 3; then
     * bfloat16, q8_0 and fp8, per S: contiguous, paged x 2; the batch x 3 */
    const int cache = quick ? (4 + 3) + 3 * (3 + 3) : (2 * 4 + 3) + 3 * (2 * 3 + 3);
    return 2 * prefill + prefill_bf16 + decode + longs + scaling + cache;
}

/* Counts the lines of text. */
static int count_lines(const char *text) {
    int n = 0;
    for (const char *p = text; *p; p++) n += *p == '\n';
    return n;
}

/* The full plan (92 rows) once overflowed a fixed array of 64 cases, so
 * every full run crashed and some filters picked the wrong rows: the plan
 * holds what --help documents, and a filter selects exactly the rows whose
 * names contain it.  Then the full plan runs, filtered to its smallest rows
 * of two sections, on 1 and 2 threads (the sanitizer build runs this too). */
static void full_plan_and_filters(void **state) {
    (void)state;
    char *out = NULL;
    for (int quick = 0; quick < 2; quick++) {
        int rc = test_run_cli(&out, "bench --list%s", quick ? " --quick" : "");
        if (rc != 0) fail_msg("bench --list exited %d:\n%s", rc, out);
        assert_int_equal(count_lines(out), documented_rows(quick));
        free(out);
    }
    static const struct {
        const char *filter;
        int rows;
    } filters[] = {
        {"prefill L=512 ", 8}, {"backward L=8192 Hkv=8", 4}, {"decode", 15}, {"long", 1},
        {"scaling n=12800", 1}, {"causal", 45}, {"decode S=131072,scaling n=100", 6},
        {"kv=bf16", 3 + 9}, {"bf16 fast", 4}, /* kv=bf16: decode, and the cache section's bfloat16 rows */
        {"kv=q8_0", 3 + 9}, {"kv=fp8", 3 + 9},
    };
    for (size_t f = 0; f < sizeof filters / sizeof filters[0]; f++) {
        assert_int_equal(test_run_cli(&out, "bench --list --filter '%s'", filters[f].filter), 0);
        if (count_lines(out) != filters[f].rows)
            fail_msg("--filter '%s' selects %d rows, want %d:\n%s", filters[f].filter, count_lines(out),
                     filters[f].rows, out);
        char *save = NULL;
        for (char *line = strtok_r(out, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
            bool matched = false;
            char pieces[64];
            snprintf(pieces, sizeof pieces, "%s", filters[f].filter);
            char *save2 = NULL;
            for (char *p = strtok_r(pieces, ",", &save2); p; p = strtok_r(NULL, ",", &save2))
                matched |= strstr(line, p) != NULL;
            if (!matched) fail_msg("--filter '%s' selected '%s'", filters[f].filter, line);
        }
        free(out);
    }
    for (int threads = 1; threads <= 2; threads++) {
        int rc = test_run_cli(&out, "bench --csv --threads %d --filter 'scaling n=100,decode S=4096'", threads);
        if (rc != 0) fail_msg("full plan, %d threads: exit %d:\n%s", threads, rc, out);
        assert_non_null(strstr(out, "scaling,scaling n=100,flash"));
        assert_non_null(strstr(out, "decode,decode S=4096,flash"));
        free(out);
    }
}

static void bad_flags_exit_2(void **state) {
    (void)state;
    static const char *const bad[] = {
        "bench --nope", "bench --threads", "bench --threads 0", "bench --threads two",
        "bench --kernel fast", "bench --filter", "bench extra", "bench --filter 'no such row'",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *out = NULL;
        int rc = test_run_cli(&out, "%s", bad[i]);
        if (rc != 2) fail_msg("'%s' exited %d, want 2:\n%s", bad[i], rc, out);
        assert_non_null(strstr(out, "attn bench"));
        free(out);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(fma_peak_is_positive_and_finite),
        cmocka_unit_test(bandwidth_is_positive_and_finite),
        cmocka_unit_test(machine_limits_refuse_bad_arguments),
        cmocka_unit_test(csv_rows_are_well_formed),
        cmocka_unit_test(backward_rows),
        cmocka_unit_test(full_plan_and_filters),
        cmocka_unit_test(kernel_choice_and_help),
        cmocka_unit_test(bad_flags_exit_2),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
