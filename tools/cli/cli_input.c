/*
 * cli_input.c — reading a whole file with a cap (cli_input.h).
 */
#include "cli_input.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Standard input, up to max_bytes: whatever it is (a pipe, a terminal, a
 * redirected file or device), one byte past the cap ends the read. */
static int read_stdin(const char *cmd, const char *flag, size_t max_bytes, char **data, size_t *len) {
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        if (n == cap) {
            if (cap > max_bytes) break; /* n = cap > max_bytes: too much */
            const size_t bigger = cap * 2 > max_bytes + 1 ? max_bytes + 1 : cap * 2;
            char *grown = realloc(buf, bigger + 1);
            if (!grown) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = grown;
            cap = bigger;
        }
        const ssize_t got = read(STDIN_FILENO, buf + n, cap - n);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) {
            const int err = errno;
            free(buf);
            return cli_data_error(cmd, "%s -: cannot read standard input: %s", flag, strerror(err));
        }
        if (got == 0) break;
        n += (size_t)got;
    }
    if (!buf) return cli_data_error(cmd, "%s -: out of memory reading standard input", flag);
    if (n > max_bytes) {
        free(buf);
        return cli_data_error(cmd, "%s -: standard input holds more than %zu MiB, the most %s reads", flag,
                              max_bytes >> 20, flag);
    }
    buf[n] = 0;
    *data = buf;
    *len = n;
    return CLI_OK;
}

int cli_read_whole(const char *cmd, const char *flag, const char *path, bool stdin_ok, size_t max_bytes, char **data,
                   size_t *len) {
    *data = NULL;
    *len = 0;
    if (stdin_ok && strcmp(path, "-") == 0) return read_stdin(cmd, flag, max_bytes, data, len);
    void *bytes;
    if (attn_read_file(path, max_bytes, &bytes, len) != ATTN_OK) {
        /* A pipe given by name (a FIFO, bash's <(command)) can come on
         * standard input instead. */
        struct stat st;
        if (stdin_ok && stat(path, &st) == 0 && S_ISFIFO(st.st_mode))
            return cli_data_error(cmd, "%s: %s; a pipe is read from standard input (%s - < '%s')", flag,
                                  attn_last_error(), flag, path);
        return cli_data_error(cmd, "%s: %s", flag, attn_last_error());
    }
    *data = bytes;
    return CLI_OK;
}
