/*
 * cli_timing.h — `--timing`: where a run's time goes, phase by phase
 * (reading and checking the inputs, converting them, the kernel, writing,
 * fsync, freeing), wall and CPU time, printed on stderr at the end.  Off by
 * default; two clock reads per phase when on, nothing when off.
 *
 * What it cannot see: the process start before main (exec, the dynamic
 * loader, OpenMP's constructors) and its exit after the command returns
 * (OpenMP's destructors, the kernel unmapping the address space).  Time the
 * whole process from outside (`/usr/bin/time`, `perf stat`) and subtract the
 * "total in the command" line for those.
 */
#ifndef ATTN_CLI_TIMING_H
#define ATTN_CLI_TIMING_H

#include <stdbool.h>

/* Switches the timing on and marks the command's start. */
void cli_timing_enable(void);
bool cli_timing_enabled(void);
/* A clock reading when the timing is on, else 0 (cheap to call anyway). */
double cli_timing_now(void);
/* Adds the time since `since` (a cli_timing_now value) to phase, a string
 * literal; phases keep the order of their first use. */
void cli_timing_add(const char *phase, double since);
/* The table, on stderr: each phase in ms and % of the command's time so
 * far; with flops > 0, also GFLOP/s over the kernel phase and over the
 * command.  Nothing when the timing is off. */
void cli_timing_print(const char *cmd, const char *kernel_phase, double flops);

#endif /* ATTN_CLI_TIMING_H */
