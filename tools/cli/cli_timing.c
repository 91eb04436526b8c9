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
    double start, cpu_start;
    int count;
    const char *name[TIMING_PHASES];
    double seconds[TIMING_PHASES], cpu[TIMING_PHASES];
    double since_cpu; /* the process CPU time at the last cli_timing_now */
} timing;

static double clock_seconds(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double monotonic_seconds(void) { return clock_seconds(CLOCK_MONOTONIC); }

/* The CPU time of every thread of the process: on a machine shared with
 * other work a phase's wall time grows with the competition, its CPU time
 * much less, so the two together say whether a phase is slow or waited. */
static double cpu_seconds(void) { return clock_seconds(CLOCK_PROCESS_CPUTIME_ID); }

void cli_timing_enable(void) {
    timing.on = true;
    timing.start = monotonic_seconds();
    timing.cpu_start = cpu_seconds();
}

bool cli_timing_enabled(void) { return timing.on; }

/* Phases do not nest, so the CPU clock read here belongs to the phase
 * whose start this is. */
double cli_timing_now(void) {
    if (!timing.on) return 0.0;
    timing.since_cpu = cpu_seconds();
    return monotonic_seconds();
}

void cli_timing_add(const char *phase, double since) {
    if (!timing.on) return;
    const double elapsed = monotonic_seconds() - since, cpu = cpu_seconds() - timing.since_cpu;
    int i = 0;
    while (i < timing.count && strcmp(timing.name[i], phase) != 0) i++;
    if (i == timing.count) {
        if (timing.count == TIMING_PHASES) return; /* more phases than any command has */
        timing.name[timing.count++] = phase;
        timing.seconds[i] = timing.cpu[i] = 0;
    }
    timing.seconds[i] += elapsed;
    timing.cpu[i] += cpu;
}

void cli_timing_print(const char *cmd, const char *kernel_phase, double flops) {
    if (!timing.on) return;
    const double total = monotonic_seconds() - timing.start, total_cpu = cpu_seconds() - timing.cpu_start;
    double listed = 0, listed_cpu = 0, kernel = 0;
    fprintf(stderr, "attn %s: timing (phase, wall ms, %% of the command's wall time, CPU ms of all threads):\n", cmd);
    for (int i = 0; i < timing.count; i++) {
        listed += timing.seconds[i];
        listed_cpu += timing.cpu[i];
        if (kernel_phase && strcmp(timing.name[i], kernel_phase) == 0) kernel = timing.seconds[i];
        fprintf(stderr, "  %-28s %10.2f  %5.1f%%  %10.2f\n", timing.name[i], 1e3 * timing.seconds[i],
                total > 0 ? 100.0 * timing.seconds[i] / total : 0.0, 1e3 * timing.cpu[i]);
    }
    fprintf(stderr, "  %-28s %10.2f  %5.1f%%  %10.2f\n", "other (parsing, checks)", 1e3 * (total - listed),
            total > 0 ? 100.0 * (total - listed) / total : 0.0, 1e3 * (total_cpu - listed_cpu));
    fprintf(stderr, "  %-28s %10.2f  %5s   %10.2f\n", "total in the command", 1e3 * total, "", 1e3 * total_cpu);
    if (flops > 0 && kernel > 0 && total > 0)
        fprintf(stderr, "  GFLOP/s: %.1f over the kernel, %.1f over the command (the process start and exit "
                "are not counted: time the process from outside for them)\n", flops / kernel / 1e9,
                flops / total / 1e9);
}
