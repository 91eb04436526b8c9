/*
 * cli_stdout.h — standard output, checked.  A write that fails (a full
 * disk, /dev/full, a closed descriptor) is an error naming "standard
 * output", exit status 1, never a silent cut: attn.c checks stdout after
 * every command returns, and commands that stream (model generate's text)
 * check each chunk as they print it.
 */
#ifndef ATTN_CLI_STDOUT_H
#define ATTN_CLI_STDOUT_H

#include <stdbool.h>

/* At start: a standard descriptor (0, 1, 2) that is closed is opened on
 * "/" read-only, so that no file the program opens takes its number (a
 * table printed into an output file), every write to it fails (EBADF, then
 * reported) and /dev/stdout cannot be reopened for writing. */
void cli_stdout_guard(void);

/* Flushes stdout; true when it and every earlier write succeeded.  Else
 * "attn CMD: cannot write standard output: REASON" on stderr (once per
 * process) and false. */
bool cli_stdout_ok(const char *cmd);

/* rc, or CLI_DATA_ERROR (1) when rc is 0 and stdout failed (reported):
 * the last thing every command does (attn.c). */
int cli_stdout_finish(const char *cmd, int rc);

#endif /* ATTN_CLI_STDOUT_H */
