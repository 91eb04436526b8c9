/*
 * cli_interp.c — loading modules and q/k/v for the interpretability
 * subcommands, and vector printing.
 *
 * Shapes (row convention): wq [d_model, H*D]  wk [d_ctx, G*D]  wv [d_ctx, G*Dv]
 *   wo [H*Dv, d_out]  bq [H*D]  bk [G*D]  bv [G*Dv]  bo [d_out]
 */
#include "cli_interp.h"

#include <math.h>
#include <string.h>

static const char *const module_flags[MOD_COUNT] = {"--wq", "--wk", "--wv", "--wo",
                                                    "--bq", "--bk", "--bv", "--bo"};

const char cli_module_help[] =
    "  --wq WQ.npy  [d_model, H*D]      --bq BQ.npy  [H*D]\n"
    "  --wk WK.npy  [d_ctx, G*D]        --bk BK.npy  [G*D]\n"
    "  --wv WV.npy  [d_ctx, G*Dv]       --bv BV.npy  [G*Dv]\n"
    "  --wo WO.npy  [H*Dv, d_out]       --bo BO.npy  [d_out]   (without --wo: out = concatenated heads)\n"
    "  --heads H    query heads;  --kv-heads G  key/value heads (default H; H a multiple of G)\n";

int cli_parse_module_option(const char *cmd, int argc, char **argv, int *i, cli_module *mod) {
    const char *flag = argv[*i], *value = *i + 1 < argc ? argv[*i + 1] : NULL;
    if (strcmp(flag, "--heads") == 0 || strcmp(flag, "--kv-heads") == 0) {
        if (!cli_parse_int(cmd, flag, value, 1, 1 << 20, flag[2] == 'h' ? &mod->heads : &mod->kv_heads))
            return -1;
        *i += 2;
        return 1;
    }
    for (int n = 0; n < MOD_COUNT; n++)
        if (strcmp(flag, module_flags[n]) == 0) {
            if (!value) return cli_usage_error(cmd, "%s needs a file name", flag), -1;
            mod->paths[n] = value;
            *i += 2;
            return 1;
        }
    return 0;
}

bool cli_module_given(const cli_module *mod) {
    for (int n = 0; n < MOD_COUNT; n++)
        if (mod->paths[n]) return true;
    return mod->heads || mod->kv_heads;
}

static int check_matrix(const char *cmd, int n, const cli_module *mod, int64_t want_rows,
                        const char *rows_name) {
    char buf[128];
    const attn_array *a = &mod->arrays[n];
    if (a->ndim != 2 || !a->shape[0] || !a->shape[1] || (want_rows > 0 && a->shape[0] != want_rows))
        return cli_data_error(cmd, "%s '%s' has shape %s; expected a matrix [%s = %lld, d_out]",
                              module_flags[n], mod->paths[n], cli_shape_str(a, buf, sizeof buf), rows_name,
                              (long long)want_rows);
    return CLI_OK;
}

int cli_module_load(const char *cmd, cli_module *mod, int64_t d_model, int64_t d_context) {
    char buf[128];
    if (!mod->paths[MOD_WQ] || !mod->paths[MOD_WK] || !mod->paths[MOD_WV] || !mod->heads)
        return cli_usage_error(cmd, "missing %s", !mod->paths[MOD_WQ] ? "--wq WQ.npy" : !mod->paths[MOD_WK] ? "--wk WK.npy"
                                                : !mod->paths[MOD_WV] ? "--wv WV.npy" : "--heads H");
    const int64_t H = mod->heads, G = mod->kv_heads ? mod->kv_heads : mod->heads;
    if (H % G)
        return cli_usage_error(cmd, "--heads %lld is not a multiple of --kv-heads %lld", (long long)H, (long long)G);
    for (int n = 0; n < MOD_COUNT; n++)
        if (mod->paths[n] && !cli_load_f32(cmd, module_flags[n], mod->paths[n], false, &mod->arrays[n]))
            return CLI_DATA_ERROR;
    int rc;
    if ((rc = check_matrix(cmd, MOD_WQ, mod, d_model, "d_model")) ||
        (rc = check_matrix(cmd, MOD_WK, mod, d_context, "d_ctx")) ||
        (rc = check_matrix(cmd, MOD_WV, mod, d_context, "d_ctx")))
        return rc;
    const attn_array *wq = &mod->arrays[MOD_WQ], *wk = &mod->arrays[MOD_WK], *wv = &mod->arrays[MOD_WV];
    if (wq->shape[1] % H || wv->shape[1] % G || wk->shape[1] != G * (wq->shape[1] / H))
        return cli_data_error(cmd, "--wq has %lld columns, --wk %lld and --wv %lld: with %lld query heads and "
                              "%lld key/value heads they must be H*D, G*D and G*Dv",
                              (long long)wq->shape[1], (long long)wk->shape[1], (long long)wv->shape[1],
                              (long long)H, (long long)G);
    attn_mha *m = &mod->m;
    *m = (attn_mha){.struct_size = sizeof(attn_mha), .d_model = d_model, .d_context = d_context, .heads = H, .kv_heads = G,
                    .head_dim = wq->shape[1] / H, .value_dim = wv->shape[1] / G};
    m->d_out = H * m->value_dim;
    if (mod->paths[MOD_WO]) {
        if ((rc = check_matrix(cmd, MOD_WO, mod, m->d_out, "H*Dv"))) return rc;
        m->d_out = mod->arrays[MOD_WO].shape[1];
    }
    const int64_t bias_width[4] = {H * m->head_dim, G * m->head_dim, G * m->value_dim, m->d_out};
    for (int n = MOD_BQ; n <= MOD_BO; n++) {
        const attn_array *b = &mod->arrays[n];
        if (mod->paths[n] && (b->ndim != 1 || b->shape[0] != bias_width[n - MOD_BQ]))
            return cli_data_error(cmd, "%s '%s' has shape %s; expected [%lld]", module_flags[n], mod->paths[n],
                                  cli_shape_str(b, buf, sizeof buf), (long long)bias_width[n - MOD_BQ]);
    }
    m->wq = mod->arrays[MOD_WQ].data; m->wk = mod->arrays[MOD_WK].data;
    m->wv = mod->arrays[MOD_WV].data; m->wo = mod->arrays[MOD_WO].data;
    m->bq = mod->arrays[MOD_BQ].data; m->bk = mod->arrays[MOD_BK].data;
    m->bv = mod->arrays[MOD_BV].data; m->bo = mod->arrays[MOD_BO].data;
    return CLI_OK;
}

void cli_module_free(cli_module *mod) {
    for (int n = 0; n < MOD_COUNT; n++) attn_array_free(&mod->arrays[n]);
}

int cli_load_sequence(const char *cmd, const char *flag, const char *path, attn_array *a,
                      int64_t dims[3]) {
    char buf[128];
    if (!cli_load_f32(cmd, flag, path, false, a)) return CLI_DATA_ERROR;
    if (a->ndim != 2 && a->ndim != 3)
        return cli_data_error(cmd, "%s '%s' has shape %s; expected [L, d] or [B, L, d]", flag, path,
                              cli_shape_str(a, buf, sizeof buf));
    dims[0] = a->ndim == 3 ? a->shape[0] : 1;
    dims[1] = a->shape[a->ndim - 2];
    dims[2] = a->shape[a->ndim - 1];
    if (!dims[0] || !dims[1] || !dims[2])
        return cli_data_error(cmd, "%s '%s' has shape %s; every dimension must be at least 1", flag, path,
                              cli_shape_str(a, buf, sizeof buf));
    return CLI_OK;
}

int cli_load_tensor(const char *cmd, const char *flag, const char *path, attn_array *a,
                    attn_tensor *t) {
    char buf[128];
    if (!cli_load_f32(cmd, flag, path, false, a)) return CLI_DATA_ERROR;
    if (a->ndim < 2 || a->ndim > 4)
        return cli_data_error(cmd, "%s '%s' has shape %s; expected [P, W], [P, H, W] or [B, P, H, W]", flag,
                              path, cli_shape_str(a, buf, sizeof buf));
    int64_t s[4] = {1, 1, 1, 1};
    if (a->ndim == 2) {
        s[1] = a->shape[0];
        s[3] = a->shape[1];
    } else {
        for (int d = 0; d < a->ndim; d++) s[4 - a->ndim + d] = a->shape[d];
    }
    for (int d = 0; d < 4; d++)
        if (!s[d])
            return cli_data_error(cmd, "%s '%s' has shape %s; every dimension must be at least 1", flag, path,
                                  cli_shape_str(a, buf, sizeof buf));
    *t = attn_tensor_4d(a->data, s[0], s[1], s[2], s[3]);
    return CLI_OK;
}

static const char *format_vector(char *buf, size_t size, const float *xf, const double *xd, int64_t n,
                                 int64_t max) {
    double biggest = 0;
    for (int64_t i = 0; i < n; i++) biggest = fmax(biggest, fabs(xf ? (double)xf[i] : xd[i]));
    size_t used = (size_t)snprintf(buf, size, "[");
    for (int64_t i = 0; i < n && i < max && used < size; i++) {
        double x = xf ? (double)xf[i] : xd[i];
        if (fabs(x) <= 1e-6 * biggest) x = 0.0; /* float rounding of an exact 0 */
        used += (size_t)snprintf(buf + used, size - used, "%s%.6g", i ? ", " : "", x);
    }
    if (used < size) snprintf(buf + used, size - used, "%s", n > max ? ", ...]" : "]");
    return buf;
}

const char *cli_format_vector(char *buf, size_t size, const float *x, int64_t n, int64_t max) {
    return format_vector(buf, size, x, NULL, n, max);
}

const char *cli_format_vector_d(char *buf, size_t size, const double *x, int64_t n, int64_t max) {
    return format_vector(buf, size, NULL, x, n, max);
}

void cli_print_json_vector(FILE *f, const float *x, int64_t n) {
    fputc('[', f);
    for (int64_t i = 0; i < n; i++) fprintf(f, "%s%.9g", i ? ", " : "", (double)x[i]);
    fputc(']', f);
}
