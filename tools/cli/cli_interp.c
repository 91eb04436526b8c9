/*
 * cli_interp.c — loading modules and q/k/v for the interpretability
 * subcommands, and vector printing.
 *
 * Shapes (row convention): wq [d_model, H*D]  wk [d_ctx, G*D]  wv [d_ctx, G*Dv]
 *   wo [H*Dv, d_out]  bq [H*D]  bk [G*D]  bv [G*Dv]  bo [d_out]
 */
#include "cli_interp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *const cli_module_flag_names[MOD_COUNT] = {"--wq", "--wk", "--wv", "--wo",
                                                     "--bq", "--bk", "--bv", "--bo"};


const cli_flag cli_module_flags[] = {
    {"--wq", "WQ.npy", CLI_ID_MODULE_FIRST + MOD_WQ, 0}, {"--wk", "WK.npy", CLI_ID_MODULE_FIRST + MOD_WK, 0},
    {"--wv", "WV.npy", CLI_ID_MODULE_FIRST + MOD_WV, 0}, {"--wo", "WO.npy", CLI_ID_MODULE_FIRST + MOD_WO, 0},
    {"--bq", "BQ.npy", CLI_ID_MODULE_FIRST + MOD_BQ, 0}, {"--bk", "BK.npy", CLI_ID_MODULE_FIRST + MOD_BK, 0},
    {"--bv", "BV.npy", CLI_ID_MODULE_FIRST + MOD_BV, 0}, {"--bo", "BO.npy", CLI_ID_MODULE_FIRST + MOD_BO, 0},
    {"--heads", "H", CLI_ID_MODULE_HEADS, 0},           {"--kv-heads", "G", CLI_ID_MODULE_KV_HEADS, 0},
    {"--weight-layout", "rows|torch", CLI_ID_WEIGHT_LAYOUT, 0},
    CLI_FLAGS_END};

const char cli_module_help[] =
    "  --wq WQ.npy  [d_model, H*D]      --bq BQ.npy  [H*D]\n"
    "  --wk WK.npy  [d_ctx, G*D]        --bk BK.npy  [G*D]\n"
    "  --wv WV.npy  [d_ctx, G*Dv]       --bv BV.npy  [G*Dv]\n"
    "  --wo WO.npy  [H*Dv, d_out]       --bo BO.npy  [d_out]   (without --wo: out = concatenated heads)\n"
    "  --heads H    query heads;  --kv-heads G  key/value heads (default H; H a multiple of G)\n"
    "  --weight-layout rows|torch\n"
    "               rows (default): W is [d_in, d_out] and y = x W, the chapter's convention;\n"
    "               torch: W is [d_out, d_in] as PyTorch's nn.Linear.weight, y = x W^T\n"
    "               (a square W cannot tell them apart: say which you have)\n";

int cli_module_take(cli_module *mod, const cli_args *a, int id, const char *value) {
    const char *cmd = a->spec->cmd;
    if (id >= CLI_ID_MODULE_FIRST && id < CLI_ID_MODULE_FIRST + MOD_COUNT) {
        mod->paths[id - CLI_ID_MODULE_FIRST] = value;
        return 1;
    }
    if (id == CLI_ID_MODULE_HEADS || id == CLI_ID_MODULE_KV_HEADS)
        return cli_parse_int(cmd, cli_args_flag_name(a, id), value, 1, 1 << 20,
                             id == CLI_ID_MODULE_HEADS ? &mod->heads : &mod->kv_heads) ? 1 : -1;
    if (id == CLI_ID_WEIGHT_LAYOUT) {
        if (strcmp(value, "rows") != 0 && strcmp(value, "torch") != 0)
            return cli_usage_error(cmd, "--weight-layout expects rows ([d_in, d_out], y = x W) or torch "
                                   "([d_out, d_in], nn.Linear.weight), got '%s'", value), -1;
        mod->torch_layout = strcmp(value, "torch") == 0;
        return 1;
    }
    return 0;
}

bool cli_module_given(const cli_module *mod) {
    for (int n = 0; n < MOD_COUNT; n++)
        if (mod->paths[n]) return true;
    return mod->heads || mod->kv_heads;
}

/* Transposes a matrix [rows, cols] in place (through a copy). */
static bool transpose(const char *cmd, float *data, int64_t rows, int64_t cols) {
    float *copy = malloc(sizeof(float) * (size_t)(rows * cols));
    if (!copy) return cli_data_error(cmd, "out of memory transposing a weight matrix"), false;
    memcpy(copy, data, sizeof(float) * (size_t)(rows * cols));
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) data[c * rows + r] = copy[r * cols + c];
    free(copy);
    return true;
}

/* Checks matrix n, held [d_in, d_out] (its rows must be want_rows when
 * > 0), and names the layout assumed when it does not fit. */
static int check_matrix(const char *cmd, int n, const cli_module *mod, int64_t want_rows, const char *rows_name) {
    char buf[128];
    const attn_array *a = &mod->arrays[n];
    const char *assumed = mod->torch_layout ? "--weight-layout torch: the file holds [d_out, d_in] = W^T"
                                            : "attn reads W as [d_in, d_out], y = x W";
    if (a->ndim != 2 || !a->shape[0] || !a->shape[1])
        return cli_data_error(cmd, "%s '%s' has shape %s; a weight matrix is expected (%s)", cli_module_flag_names[n],
                              mod->paths[n], cli_shape_str(a, buf, sizeof buf), assumed);
    const int64_t in = mod->torch_layout ? a->shape[1] : a->shape[0];
    if (want_rows > 0 && in != want_rows) {
        const int64_t other = mod->torch_layout ? a->shape[0] : a->shape[1];
        return cli_data_error(cmd, "%s '%s' has shape %s; its %s dimension must be %s = %lld (%s)%s", cli_module_flag_names[n],
                              mod->paths[n], cli_shape_str(a, buf, sizeof buf), mod->torch_layout ? "second" : "first",
                              rows_name, (long long)want_rows, assumed,
                              other != want_rows ? ""
                              : mod->torch_layout ? "; its transpose fits: drop --weight-layout torch if it is [d_in, d_out]"
                                                  : "; its transpose fits: if it is PyTorch's nn.Linear.weight [d_out, "
                                                    "d_in], add --weight-layout torch");
    }
    return CLI_OK;
}

int cli_module_check_flags(const char *cmd, const cli_module *mod) {
    if (!mod->paths[MOD_WQ] || !mod->paths[MOD_WK] || !mod->paths[MOD_WV] || !mod->heads)
        return cli_usage_error(cmd, "missing %s", !mod->paths[MOD_WQ] ? "--wq WQ.npy" : !mod->paths[MOD_WK] ? "--wk WK.npy"
                                                : !mod->paths[MOD_WV] ? "--wv WV.npy" : "--heads H");
    const int64_t H = mod->heads, G = mod->kv_heads ? mod->kv_heads : mod->heads;
    if (H % G)
        return cli_usage_error(cmd, "--heads %lld is not a multiple of --kv-heads %lld", (long long)H, (long long)G);
    return CLI_OK;
}

int cli_module_load(const char *cmd, cli_module *mod, int64_t d_model, int64_t d_context) {
    char buf[128];
    int rc = cli_module_check_flags(cmd, mod);
    if (rc) return rc;
    const int64_t H = mod->heads, G = mod->kv_heads ? mod->kv_heads : mod->heads;
    for (int n = 0; n < MOD_COUNT; n++)
        if (mod->paths[n] && !cli_load_f32(cmd, cli_module_flag_names[n], mod->paths[n], false, &mod->arrays[n]))
            return CLI_DATA_ERROR;
    const char *ctx_name = d_context == d_model ? "the width of the input" : "the context width";
    if ((rc = check_matrix(cmd, MOD_WQ, mod, d_model, "the width of the input")) ||
        (rc = check_matrix(cmd, MOD_WK, mod, d_context, ctx_name)) ||
        (rc = check_matrix(cmd, MOD_WV, mod, d_context, ctx_name)) ||
        (mod->paths[MOD_WO] && (rc = check_matrix(cmd, MOD_WO, mod, 0, ""))))
        return rc;
    /* From here on every matrix is held [d_in, d_out]. */
    if (mod->torch_layout)
        for (int n = MOD_WQ; n <= MOD_WO; n++) {
            attn_array *a = &mod->arrays[n];
            if (!mod->paths[n]) continue;
            if (!transpose(cmd, a->data, a->shape[0], a->shape[1])) return CLI_DATA_ERROR;
            const int64_t rows = a->shape[0];
            a->shape[0] = a->shape[1];
            a->shape[1] = rows;
        }
    const attn_array *wq = &mod->arrays[MOD_WQ], *wk = &mod->arrays[MOD_WK], *wv = &mod->arrays[MOD_WV];
    if (wq->shape[1] % H || wk->shape[1] % G || wv->shape[1] % G)
        return cli_data_error(cmd, "--wq has %lld columns, --wk %lld and --wv %lld: they must split evenly into %lld "
                              "query heads and %lld key/value heads", (long long)wq->shape[1], (long long)wk->shape[1],
                              (long long)wv->shape[1], (long long)H, (long long)G);
    if (wk->shape[1] != G * (wq->shape[1] / H))
        return cli_data_error(cmd, "--wk '%s' has %lld columns; with head width D = %lld (from --wq) and %lld key/value "
                              "heads it must have %lld", mod->paths[MOD_WK], (long long)wk->shape[1],
                              (long long)(wq->shape[1] / H), (long long)G, (long long)(G * (wq->shape[1] / H)));
    attn_mha *m = &mod->m;
    *m = (attn_mha){.struct_size = sizeof(attn_mha), .d_model = d_model, .d_context = d_context, .heads = H, .kv_heads = G,
                    .head_dim = wq->shape[1] / H, .value_dim = wv->shape[1] / G};
    m->d_out = H * m->value_dim;
    if (mod->paths[MOD_WO]) {
        if (mod->arrays[MOD_WO].shape[0] != m->d_out)
            return cli_data_error(cmd, "--wo '%s' is [%lld, %lld] as [d_in, d_out]; its d_in must be heads * Dv = %lld",
                                  mod->paths[MOD_WO], (long long)mod->arrays[MOD_WO].shape[0],
                                  (long long)mod->arrays[MOD_WO].shape[1], (long long)m->d_out);
        m->d_out = mod->arrays[MOD_WO].shape[1];
    }
    const int64_t bias_width[4] = {H * m->head_dim, G * m->head_dim, G * m->value_dim, m->d_out};
    for (int n = MOD_BQ; n <= MOD_BO; n++) {
        const attn_array *b = &mod->arrays[n];
        if (mod->paths[n] && (b->ndim != 1 || b->shape[0] != bias_width[n - MOD_BQ]))
            return cli_data_error(cmd, "%s '%s' has shape %s; expected [%lld]", cli_module_flag_names[n], mod->paths[n],
                                  cli_shape_str(b, buf, sizeof buf), (long long)bias_width[n - MOD_BQ]);
    }
    m->wq = mod->arrays[MOD_WQ].data; m->wk = mod->arrays[MOD_WK].data;
    m->wv = mod->arrays[MOD_WV].data; m->wo = mod->arrays[MOD_WO].data;
    m->bq = mod->arrays[MOD_BQ].data; m->bk = mod->arrays[MOD_BK].data;
    m->bv = mod->arrays[MOD_BV].data; m->bo = mod->arrays[MOD_BO].data;
    return CLI_OK;
}

bool cli_module_gradient_to_file(const char *cmd, const cli_module *mod, int n, float *data, int64_t shape[2]) {
    const attn_array *a = &mod->arrays[n];
    shape[0] = mod->torch_layout ? a->shape[1] : a->shape[0];
    shape[1] = mod->torch_layout ? a->shape[0] : a->shape[1];
    return !mod->torch_layout || transpose(cmd, data, a->shape[0], a->shape[1]);
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
