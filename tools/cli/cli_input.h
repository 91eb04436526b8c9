/*
 * cli_input.h — the one way the attn program reads a file whole (a text,
 * a list of ids or labels): a regular file only, refused at once when it is
 * a FIFO (opened without blocking, so one without a writer cannot hang),
 * a device (/dev/zero), a socket or a directory; never more bytes than the
 * cap of its kind; standard input ("-", where a flag takes it) read with
 * the same cap.  Files with a header the libraries validate (.npy, GGUF,
 * safetensors, .npz, tokenizer.json) are read by the libraries' own rule
 * (src/io/file.h), which this one shares through attn_read_file.
 */
#ifndef ATTN_CLI_INPUT_H
#define ATTN_CLI_INPUT_H

#include "cli.h"

#include <stddef.h>

/* The cap of each kind of file (bytes). */
#define CLI_TEXT_MAX ((size_t)64 << 20)   /* tokenize --file: a text to encode            */
#define CLI_IDS_MAX ((size_t)64 << 20)    /* detokenize --file: token ids                 */
#define CLI_LABELS_MAX ((size_t)64 << 20) /* --tokens, --key-tokens @FILE: one label a line */
#define CLI_PROMPT_MAX ((size_t)16 << 20) /* map, report --text @FILE: a model's input    */

/* The whole of path into *data (malloc'd, NUL-terminated, *len bytes
 * before the NUL); path "-" is standard input when stdin_ok.  At most
 * max_bytes.  On failure prints a data error naming cmd, flag and the file
 * ("attn tokenize: --file: cannot read 'd': it is a directory, not a
 * regular file ...") and returns CLI_DATA_ERROR; CLI_OK otherwise. */
int cli_read_whole(const char *cmd, const char *flag, const char *path, bool stdin_ok, size_t max_bytes, char **data,
                   size_t *len);

#endif /* ATTN_CLI_INPUT_H */
