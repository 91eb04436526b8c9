/*
 * cli_interp.h — what the interpretability subcommands (trace, paths,
 * nullspace) share: loading a multi-head module or bare q/k/v from .npy
 * flags, and printing short vectors.  (The chapter's worked example, which
 * their --chapter takes as input, is the library's: attn_chapter.h.)
 */
#ifndef ATTN_CLI_INTERP_H
#define ATTN_CLI_INTERP_H

#include "cli.h"

/* ------------------------------------------------ a module from flags
 * --wq --wk --wv [--wo] [--bq --bk --bv --bo] --heads H [--kv-heads G]
 * (W stored [d_in, d_out], the row convention, as `attn mha`). */
enum { MOD_WQ, MOD_WK, MOD_WV, MOD_WO, MOD_BQ, MOD_BK, MOD_BV, MOD_BO, MOD_COUNT };

typedef struct cli_module {
    const char *paths[MOD_COUNT];
    int64_t heads, kv_heads;
    attn_array arrays[MOD_COUNT]; /* owned once loaded */
    attn_mha m;                   /* filled by cli_module_load */
} cli_module;

extern const char cli_module_help[];

/* Consumes argv[*i] (and its value) if it is a module flag: returns 1; 0 if
 * it is not one; -1 after printing a usage error. */
int cli_parse_module_option(const char *cmd, int argc, char **argv, int *i, cli_module *mod);
/* True when any module flag was given. */
bool cli_module_given(const cli_module *mod);
/* Loads and checks the weights against the input widths and fills mod->m;
 * returns CLI_OK, CLI_USAGE_ERROR (a required flag missing) or
 * CLI_DATA_ERROR (printed). */
int cli_module_load(const char *cmd, cli_module *mod, int64_t d_model, int64_t d_context);
void cli_module_free(cli_module *mod);

/* Loads a sequence [L, d] or [B, L, d]: dims = {B, L, d}. */
int cli_load_sequence(const char *cmd, const char *flag, const char *path, attn_array *a,
                      int64_t dims[3]);
/* Loads q, k or v of rank 2 [P, W], 3 [P, H, W] or 4 [B, P, H, W] as a tensor. */
int cli_load_tensor(const char *cmd, const char *flag, const char *path, attn_array *a,
                    attn_tensor *t);

/* ------------------------------------------------------------- printing */
/* Writes "[1.5, 0.75]" (%g to 6 digits, at most max entries, then ", ...")
 * into buf and returns buf.  Entries smaller than 1e-6 times the vector's
 * largest magnitude print as 0: at 6 digits they are float rounding of an
 * exact 0. */
const char *cli_format_vector(char *buf, size_t size, const float *x, int64_t n, int64_t max);
const char *cli_format_vector_d(char *buf, size_t size, const double *x, int64_t n, int64_t max);
/* The same vector as a JSON array, %.9g. */
void cli_print_json_vector(FILE *f, const float *x, int64_t n);

#endif /* ATTN_CLI_INTERP_H */
