/*
 * cli_stdout.c — standard output, checked (cli_stdout.h).
 */
#include "cli_stdout.h"

#include "cli.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

void cli_stdout_guard(void) {
    for (int fd = 0; fd <= 2; fd++) {
        if (fcntl(fd, F_GETFD) != -1 || errno != EBADF) continue;
        /* open() takes the lowest free number: this one. */
        const int got = open("/", O_RDONLY | O_DIRECTORY);
        if (got >= 0 && got != fd) close(got);
    }
}

/* Why an earlier write failed, when the flush that finds the error state
 * has nothing left to write (stdio drops what it could not write): a
 * descriptor not open for writing is told apart; a full disk is not. */
static const char *earlier_failure(void) {
    const int flags = fcntl(STDOUT_FILENO, F_GETFL);
    if (flags == -1 || (flags & O_ACCMODE) == O_RDONLY) return strerror(EBADF);
    return "a write to it failed";
}

bool cli_stdout_ok(const char *cmd) {
    static bool reported;
    errno = 0;
    const bool flushed = fflush(stdout) == 0;
    const int err = errno;
    if (flushed && !ferror(stdout)) return true;
    if (!reported) {
        reported = true;
        cli_data_error(cmd, "cannot write standard output: %s", !flushed && err ? strerror(err) : earlier_failure());
    }
    return false;
}

int cli_stdout_finish(const char *cmd, int rc) {
    if (cli_stdout_ok(cmd)) return rc;
    return rc ? rc : CLI_DATA_ERROR;
}
