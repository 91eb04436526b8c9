/*
 * cli_timing.c — the phase table of `--timing` (cli_timing.h).
 */
#include "cli_timing.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

enum { TIMING_PHASES = 24 };

static struct {
    bool on;
    double start;
    int count;
    const char *name[TIMING_PHASES];
    double seconds[TIMING_PHASES];
} timing;

static double monotonic_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void cli_timing_enable(void) {
    timing.on = true;
    timing.start = monotonic_seconds();
}

bool cli_timing_enabled(void) { return timing.on; }

double cli_timing_now(void) { return timing.on ? monotonic_seconds() : 0.0; }

void cli_timing_add(const char *phase, double since) {
    if (!timing.on) return;
    const double elapsed = monotonic_seconds() - since;
    int i = 0;
    while (i < timing.count && strcmp(timing.name[i], phase) != 0) i++;
    if (i == timing.count) {
        if (timing.count == TIMING_PHASES) return; /* more phases than any command has */
        timing.name[timing.count++] = phase;
        timing.seconds[i] = 0;
    }
    timing.seconds[i] += elapsed;
}

void cli_timing_print(const char *cmd, const char *kernel_phase, double flops) {
    if (!timing.on) return;
    const double total = monotonic_seconds() - timing.start;
    double listed = 0, kernel = 0;
    fprintf(stderr, "attn %s: timing (wall clock, ms):\n", cmd);
    for (int i = 0; i < timing.count; i++) {
        listed += timing.seconds[i];
        if (kernel_phase && strcmp(timing.name[i], kernel_phase) == 0) kernel = timing.seconds[i];
        fprintf(stderr, "  %-28s %10.2f  %5.1f%%\n", timing.name[i], 1e3 * timing.seconds[i],
                total > 0 ? 100.0 * timing.seconds[i] / total : 0.0);
    }
    fprintf(stderr, "  %-28s %10.2f  %5.1f%%\n", "other (parsing, checks)", 1e3 * (total - listed),
            total > 0 ? 100.0 * (total - listed) / total : 0.0);
    fprintf(stderr, "  %-28s %10.2f\n", "total in the command", 1e3 * total);
    if (flops > 0 && kernel > 0 && total > 0)
        fprintf(stderr, "  GFLOP/s: %.1f over the kernel, %.1f over the command (the process start and exit "
                "are not counted: time the process from outside for them)\n", flops / kernel / 1e9,
                flops / total / 1e9);
}
