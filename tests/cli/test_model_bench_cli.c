/*
 * test_model_bench_cli.c — `attn model bench`: the help (every flag the
 * parser takes is shown), the usage errors (exit 2, each naming the flag),
 * a file that is not a model (exit 1, naming it), and runs on the tiny GGUF
 * fixtures (tests/fixtures/tiny_models) that check the output's shape, never
 * its timings: the tests llama-bench would form from the lists (every P and
 * every N at every depth, in its order and with its names), one CSV row
 * each with the columns the help lists, R samples per row, min <= median <=
 * max, the thread count asked for; and the table's rows in the same order.
 */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TINY ATTN_SOURCE_DIR "/tests/fixtures/tiny_models/"
#define CSV_HEADER                                                                                                  \
    "model,architecture,threads,kv_dtype,test,n_prompt,n_gen,n_depth,rounds,median_tps,min_tps,max_tps,samples_tps," \
    "load_s,load_rss_bytes,peak_rss_bytes"

static void expect(int want_status, const char *want_text, const char *args) {
    char *out = NULL;
    const int status = test_run_cli(&out, "model bench %s", args);
    if (status != want_status || !strstr(out, want_text))
        fail_msg("attn model bench %s: exit %d (expected %d), output:\n%s\n(expected it to contain '%s')", args,
                 status, want_status, out, want_text);
    free(out);
}

static void test_help_and_usage_errors(void **state) {
    (void)state;
    expect(0, "usage: attn model bench --model FILE.gguf", "--help");
    expect(0, "llama-bench", "-h");
    assert_int_equal(test_cli_flags_in_help("model bench"), 17); /* 15 of its own, --weights and --precision */;
    expect(2, "--model FILE.gguf is required", "-p 128");
    expect(2, "-p", "--model m.gguf -p 12x");
    expect(2, "--n-prompt", "--model m.gguf --n-prompt 128,,512");
    expect(2, "-n", "--model m.gguf -n -1");
    expect(2, "-d", "--model m.gguf -d 0,");
    expect(2, "more than 16 lengths", "--model m.gguf -d 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16");
    expect(2, "-d", "--model m.gguf -d 2000000");
    expect(2, "no test: every -p and -n length is 0", "--model m.gguf -p 0 -n 0");
    expect(2, "--threads", "--model m.gguf --threads 0");
    expect(2, "-r", "--model m.gguf -r 0");
    expect(2, "--kv-dtype must be f32, f16, bf16, q8_0 or fp8, got 'q8'", "--model m.gguf --kv-dtype q8");
    expect(2, "--seed", "--model m.gguf --seed -1");
    expect(2, "given twice", "--model m.gguf -p 128 --n-prompt 512");
    expect(2, "unknown", "--model m.gguf --depth 4096");
    expect(2, "bench", "m.gguf");
    /* attn model lists the action, and suggests it for a typo */
    char *out = NULL;
    assert_int_equal(test_run_cli(&out, "model --help"), 0);
    assert_non_null(strstr(out, "attn model bench OPTIONS"));
    free(out);
    assert_int_equal(test_run_cli(&out, "model bnech --model m.gguf"), 2);
    if (!strstr(out, "did you mean bench?")) fail_msg("attn model bnech:\n%s", out);
    free(out);
}

static void test_data_errors(void **state) {
    (void)state;
    char args[1024];
    snprintf(args, sizeof args, "--model %s/absent.gguf", test_tmpdir());
    expect(1, "absent.gguf", args);
    const char *junk = test_path("junk.gguf");
    FILE *f = fopen(junk, "wb");
    assert_non_null(f);
    fputs("this is not a GGUF file at all, just text", f);
    fclose(f);
    snprintf(args, sizeof args, "--model %s -p 4 -n 0", junk);
    expect(1, "junk.gguf", args);
}

/* The CSV fields of one line, split in place at commas (no field of these
 * rows is quoted but the first, which has no comma). */
static int split_fields(char *line, char **fields, int max) {
    int n = 0;
    for (char *save, *f = strtok_r(line, ",", &save); f && n < max; f = strtok_r(NULL, ",", &save)) fields[n++] = f;
    return n;
}

/* The CSV of `model bench --model TINY/model args --csv`, checked row by row
 * against the tests expected (names[k], their P, N, D), rounds samples each. */
static void check_csv(const char *model, const char *args, int rounds, const char *threads,
                      const char *const *names, const long (*pnd)[3], int n_rows) {
    char *out = NULL;
    const int status = test_run_cli(&out, "model bench --model '%s%s' %s --csv 2>/dev/null", TINY, model, args);
    if (status != 0) fail_msg("model bench %s %s: exit %d\n%s", model, args, status, out);
    char *save, *line = strtok_r(out, "\n", &save);
    assert_non_null(line);
    assert_string_equal(line, CSV_HEADER);
    for (int k = 0; k < n_rows; k++) {
        line = strtok_r(NULL, "\n", &save);
        if (!line) fail_msg("%s %s: %d rows, expected %d", model, args, k, n_rows);
        char *fields[20];
        const int n = split_fields(line, fields, 20);
        assert_int_equal(n, 16);
        assert_non_null(strstr(fields[0], model));
        assert_string_equal(fields[2], threads);
        assert_string_equal(fields[4], names[k]);
        for (int j = 0; j < 3; j++) assert_int_equal(strtol(fields[5 + j], NULL, 10), pnd[k][j]);
        assert_int_equal(strtol(fields[8], NULL, 10), rounds);
        const double median = strtod(fields[9], NULL), lo = strtod(fields[10], NULL), hi = strtod(fields[11], NULL);
        if (!(lo > 0 && lo <= median && median <= hi)) fail_msg("row %s: min %g median %g max %g", names[k], lo, median, hi);
        int samples = 0;
        for (char *s2, *s = strtok_r(fields[12], " ", &s2); s; s = strtok_r(NULL, " ", &s2)) {
            const double v = strtod(s, NULL);
            if (!(v >= lo - 0.01 && v <= hi + 0.01)) fail_msg("row %s: sample %g outside [%g, %g]", names[k], v, lo, hi);
            samples++;
        }
        assert_int_equal(samples, rounds);
        const double load_rss = strtod(fields[14], NULL), peak = strtod(fields[15], NULL);
        if (!(strtod(fields[13], NULL) >= 0 && load_rss > 0 && peak >= load_rss))
            fail_msg("row %s: load %s s, RSS after load %s, peak %s", names[k], fields[13], fields[14], fields[15]);
    }
    assert_null(strtok_r(NULL, "\n", &save));
    free(out);
}

static void test_tiny_models(void **state) {
    (void)state;
    /* llama-bench's tests: each P at each depth, then each N at each depth. */
    static const char *const names[] = {"pp16", "pp16 @ d8", "pp5", "pp5 @ d8", "tg3", "tg3 @ d8"};
    static const long pnd[][3] = {{16, 0, 0}, {16, 0, 8}, {5, 0, 0}, {5, 0, 8}, {0, 3, 0}, {0, 3, 8}};
    check_csv("llama/llama.gguf", "-p 16,0,5 -n 3 -d 0,8 -r 3 -t 1", 3, "1", names, pnd, 6);
    check_csv("qwen3/qwen3.gguf", "-n 0,2 -p 7 --rounds 2 --threads 2 --kv-dtype f16 --seed 9 --no-warmup", 2, "2",
              (const char *const[]){"pp7", "tg2"}, (const long[][3]){{7, 0, 0}, {0, 2, 0}}, 2);
    /* The table: a header, the same tests, a row each. */
    char *out = NULL;
    assert_int_equal(test_run_cli(&out, "model bench --model '%sllama/llama.gguf' -p 4 -n 2 -d 0,3 -r 1", TINY), 0);
    const char *const rows[] = {"\npp4 ", "\npp4 @ d3 ", "\ntg2 ", "\ntg2 @ d3 "};
    const char *at = strstr(out, "t/s median");
    if (!at || !strstr(out, "llama, 2 layers") || !strstr(out, "loaded in")) fail_msg("no header:\n%s", out);
    for (int k = 0; k < 4; k++) {
        const char *row = strstr(at, rows[k]);
        if (!row) fail_msg("no row '%s' after the previous one:\n%s", rows[k] + 1, out);
        at = row + 1;
    }
    free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_help_and_usage_errors),
        cmocka_unit_test(test_data_errors),
        cmocka_unit_test(test_tiny_models),
    };
    return cmocka_run_group_tests(tests, NULL, test_group_teardown);
}
