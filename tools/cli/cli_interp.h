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
 * [--weight-layout rows|torch]: W stored [d_in, d_out] (the row
 * convention, y = x W, as `attn mha`), or [d_out, d_in] as PyTorch's
 * nn.Linear.weight keeps it (y = x W^T); cli_module_load transposes those. */
enum { MOD_WQ, MOD_WK, MOD_WV, MOD_WO, MOD_BQ, MOD_BK, MOD_BV, MOD_BO, MOD_COUNT };
enum { CLI_ID_MODULE_HEADS = CLI_ID_MODULE_FIRST + MOD_COUNT, CLI_ID_MODULE_KV_HEADS, CLI_ID_WEIGHT_LAYOUT };

typedef struct cli_module {
    const char *paths[MOD_COUNT];
    int64_t heads, kv_heads;
    bool torch_layout;            /* --weight-layout torch */
    attn_array arrays[MOD_COUNT]; /* owned once loaded; matrices in [d_in, d_out] order */
    attn_mha m;                   /* filled by cli_module_load */
} cli_module;

extern const cli_flag cli_module_flags[];
extern const char cli_module_help[];
/* The flag of each MOD_* input ("--wq"). */
extern const char *const cli_module_flag_names[MOD_COUNT];

/* Applies a module flag: 1 when id is one, 0 when not, -1 after a usage error. */
int cli_module_take(cli_module *mod, const cli_args *a, int id, const char *value);
/* True when any module flag was given. */
bool cli_module_given(const cli_module *mod);
/* The checks that need no file: the required flags given, --heads a
 * multiple of --kv-heads.  CLI_OK or CLI_USAGE_ERROR (printed). */
int cli_module_check_flags(const char *cmd, const cli_module *mod);
/* Loads and checks the weights against the input widths and fills mod->m;
 * returns CLI_OK, CLI_USAGE_ERROR (a required flag missing) or
 * CLI_DATA_ERROR (printed). */
int cli_module_load(const char *cmd, cli_module *mod, int64_t d_model, int64_t d_context);
/* A gradient of matrix n, computed [d_in, d_out], into the file's layout
 * (transposed under --weight-layout torch), with its file shape.  False
 * (printed) when out of memory. */
bool cli_module_gradient_to_file(const char *cmd, const cli_module *mod, int n, float *data, int64_t shape[2]);
void cli_module_free(cli_module *mod);

/* Loads a sequence [L, d] or [B, L, d]: dims = {B, L, d}. */
int cli_load_sequence(const char *cmd, const char *flag, const char *path, attn_array *a,
                      int64_t dims[3]);

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
