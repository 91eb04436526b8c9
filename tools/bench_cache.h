/*
 * bench_cache.h — the KV cache's rows of `attn bench` (bench_cache.c):
 * decoding through attn_kv_cache_attend, contiguous against paged on the
 * same data, and a batch of sequences of mixed lengths.  cmd_bench.c
 * counts, lists and runs them through these three calls.
 */
#ifndef ATTN_TOOLS_BENCH_CACHE_H
#define ATTN_TOOLS_BENCH_CACHE_H

#include <stdbool.h>

/* How cmd_bench.c's filter matches a row name. */
typedef bool (*bench_cache_matcher)(const char *filter, const char *name);

typedef struct bench_cache_settings {
    bool quick, csv;
    int threads;
    const char *filter;
    bench_cache_matcher matches;
    double read_gbps;      /* what %bw divides by: the measured read bandwidth, as for decode rows */
    int min_runs, max_runs;
    double target_seconds; /* of timed work per row */
} bench_cache_settings;

/* Their part of `attn bench --help`. */
extern const char bench_cache_help[];

/* The rows the filter selects (printed, one name a line, when list is set). */
int bench_cache_rows(bool quick, const char *filter, bench_cache_matcher matches, bool list);

/* Measures and prints the selected rows (CSV rows in cmd_bench.c's
 * columns with --csv, else a table).  CLI_OK, or CLI_DATA_ERROR after a
 * failed call (its message on stderr). */
int bench_cache_run(const bench_cache_settings *s);

#endif /* ATTN_TOOLS_BENCH_CACHE_H */
