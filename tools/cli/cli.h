/*
 * cli.h — what the subcommands of the attn program share.  The CLI uses only
 * the public header attn.h, so it doubles as an example of the API.
 *
 * Exit status of every subcommand: 0 success, 1 data error (a file that
 * cannot be read, a wrong shape), 2 usage error (an unknown flag, a
 * non-numeric value).  Every message names the file or flag at fault.
 */
#ifndef ATTN_CLI_H
#define ATTN_CLI_H

#include "attn.h"
#include "attn_chapter.h"
#include "attn_interp.h"
#include "attn_io.h"
#include "attn_machine.h"
#include "attn_viz.h"

#include <stdbool.h>
#include <stdio.h>

enum { CLI_OK = 0, CLI_DATA_ERROR = 1, CLI_USAGE_ERROR = 2 };

#if defined(__GNUC__)
#define CLI_PRINTF(fmt_index, first_arg) __attribute__((format(printf, fmt_index, first_arg)))
#else
#define CLI_PRINTF(fmt_index, first_arg)
#endif

/* Subcommands: each receives argv with argv[0] = its own name. */
int cmd_demo(int argc, char **argv);
int cmd_sdpa(int argc, char **argv);
int cmd_mha(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_map(int argc, char **argv);
int cmd_report(int argc, char **argv);
/* attn demo --figures DIR: the chapter's Figures 1-3 as DIR/figureN.png and .svg
 * (tools/demo_figures.c); lang "en" or "zh".  Returns CLI_OK or CLI_DATA_ERROR. */
int demo_write_figures(const char *dir, const char *lang);
int cmd_ring(int argc, char **argv);
int cmd_trace(int argc, char **argv);
int cmd_paths(int argc, char **argv);
int cmd_nullspace(int argc, char **argv);
int cmd_train(int argc, char **argv);

/* "attn CMD: message" plus a pointer to --help on stderr; returns 2. */
int cli_usage_error(const char *cmd, const char *fmt, ...) CLI_PRINTF(2, 3);
/* "attn CMD: message" on stderr; returns 1. */
int cli_data_error(const char *cmd, const char *fmt, ...) CLI_PRINTF(2, 3);

/* Strict number parsing of a flag's value: the whole text must be a number
 * in [min, max].  On failure prints a usage error naming flag and returns false. */
bool cli_parse_int(const char *cmd, const char *flag, const char *text, int64_t min,
                   int64_t max, int64_t *out);
bool cli_parse_float(const char *cmd, const char *flag, const char *text, double min,
                     double max, double *out);

/* True if arg is exactly "-h" or "--help". */
bool cli_is_help(const char *arg);

/* Loads a float array (float32, or float64/float16 converted) and refuses
 * NaN/Inf unless allow_neg_inf is set, in which case -inf is allowed (a bias)
 * but NaN and +inf are not.  Prints a data error naming flag and path and
 * returns false on any problem. */
bool cli_load_f32(const char *cmd, const char *flag, const char *path, bool allow_neg_inf,
                  attn_array *out);
/* Loads any integer/bool array converted to dtype (ATTN_I64 or ATTN_BOOL). */
bool cli_load_ints(const char *cmd, const char *flag, const char *path, attn_dtype dtype,
                   attn_array *out);
/* Saves float32 data (never half-written: attn_io.h's output files);
 * prints a data error naming path on failure. */
bool cli_save_f32(const char *cmd, const char *path, int ndim, const int64_t *shape,
                  const float *data);

/* Refuses, before any work is done, a run whose outputs would destroy its
 * inputs or each other: an output that is the same file as an input (by
 * device and inode, so symbolic and hard links count), and two outputs that
 * name the same file (only the last would survive).  Devices (-o /dev/null
 * twice) are exempt.  NULL paths are skipped.  Returns CLI_OK or prints a
 * usage error naming both and returns CLI_USAGE_ERROR. */
int cli_check_paths(const char *cmd, const char *const *inputs, int n_inputs,
                    const char *const *outputs, int n_outputs);

/* "[3, 2]" style text of a shape, for messages; returns buf. */
const char *cli_shape_str(const attn_array *a, char *buf, size_t size);


/* ------------------------------------------------------------------------
 * The attention options sdpa, mha (and later commands) share:
 *   --causal | --causal-lower-right  --align top-left|lower-right
 *   --window LEFT,RIGHT  --key-lengths F  --mask F  --bias F
 *   --scale S  --kernel auto|ref|flash  --threads N
 */
typedef struct cli_attention_options {
    attn_sdpa_options opt;
    const char *key_lengths_path, *mask_path, *bias_path;
    attn_array key_lengths, mask, bias; /* owned once loaded */
} cli_attention_options;

#define CLI_ATTENTION_OPTIONS_INIT {.opt = ATTN_SDPA_OPTIONS_INIT}

/* The options' lines for a --help text. */
extern const char cli_attention_options_help[];

/* If argv[*i] is one of the shared options, consumes it (and its value),
 * advancing *i, and returns 1; returns 0 if it is not one; returns -1 after
 * printing a usage error. */
int cli_parse_attention_option(const char *cmd, int argc, char **argv, int *i,
                               cli_attention_options *o);

/* Loads --key-lengths, --mask and --bias and checks them against the
 * problem's sizes; fills o->opt.  Returns CLI_OK or CLI_DATA_ERROR (printed). */
int cli_load_attention_inputs(const char *cmd, cli_attention_options *o, int64_t batch,
                              int64_t heads_q, int64_t len_q, int64_t len_kv);
void cli_attention_options_free(cli_attention_options *o);

/* Saves each (path, array) pair that has a path, as a set: every file is
 * written in full to its temporary file first, and only when all of them
 * are complete are they renamed over their targets.  On a failure before
 * that, no target is touched (a previous good file stays as it was); the
 * message names the file at fault. */
typedef struct cli_output {
    const char *path;
    int ndim;
    int64_t shape[4];
    const float *data;
} cli_output;
bool cli_save_outputs(const char *cmd, const cli_output *outputs, int count);

#endif /* ATTN_CLI_H */
