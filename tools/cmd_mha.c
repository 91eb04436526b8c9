/*
 * cmd_mha.c — `attn mha`: multi-head attention as a module on .npy arrays.
 *
 * Shapes (row convention, W stored [d_in, d_out]):
 *   x [L, d_model] or [B, L, d_model]     context [S, d_ctx] / [B, S, d_ctx]
 *   wq [d_model, Hq*D]   wk [d_ctx, Hkv*D]   wv [d_ctx, Hkv*Dv]
 *   wo [Hq*Dv, d_out]    bq [Hq*D]  bk [Hkv*D]  bv [Hkv*Dv]  bo [d_out]
 *   out [L, d_out] or [B, L, d_out]; weights [B, Hq, L, S]; lse [B, Hq, L]
 * Gradients (--grad-out dO, shaped like out): each d<name> is shaped like
 * <name>; db* are [width] whether or not the bias was given.
 */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

static const char mha_usage[] =
    "usage: attn mha -x X.npy [--context C.npy] --wq WQ.npy --wk WK.npy --wv WV.npy\n"
    "                [--wo WO.npy] [--bq BQ.npy] [--bk BK.npy] [--bv BV.npy] [--bo BO.npy]\n"
    "                --heads H [--kv-heads G] -o OUT.npy [--weights W.npy] [--lse LSE.npy]\n"
    "                [--grad-out DO.npy --dx DX.npy [--dcontext DC.npy] --dwq DWQ.npy ...]\n"
    "                [mask and computation options]\n\n"
    "Multi-head attention: Q = X WQ + bq, K = C WK + bk, V = C WV + bv (C = X for self-attention),\n"
    "per-head attention, heads concatenated per position, then OUT = Z WO + bo.\n"
    "With --grad-out, also its backward pass: the gradients of a loss whose gradient with\n"
    "respect to OUT is DO.\n\n"
    "inputs (float32; float64 and float16 are converted; W stored [d_in, d_out], the row convention):\n"
    "  -x X.npy          [L, d_model] or [B, L, d_model]\n"
    "  --context C.npy   keys/values from a second sequence (cross-attention), [S, d_ctx] or [B, S, d_ctx]\n"
    "  --wq WQ.npy       [d_model, H*D]        --bq BQ.npy  [H*D]\n"
    "  --wk WK.npy       [d_ctx, G*D]          --bk BK.npy  [G*D]\n"
    "  --wv WV.npy       [d_ctx, G*Dv]         --bv BV.npy  [G*Dv]\n"
    "  --wo WO.npy       [H*Dv, d_out]         --bo BO.npy  [d_out]  (without --wo: OUT = Z)\n"
    "  --heads H         query heads;  --kv-heads G  key/value heads (default H; H a multiple of G)\n"
    "outputs (float32, written atomically):\n"
    "  -o OUT.npy        [L, d_out] or [B, L, d_out]\n"
    "  --weights W.npy   attention weights [B, H, L, S]  (heads before positions; [H, L, S] for 2-D X)\n"
    "  --lse LSE.npy     log-sum-exp per row [B, H, L]\n"
    "gradients (-o is optional when one of these is asked for; each is shaped like its input):\n"
    "  --grad-out DO.npy dLoss/dOUT, shaped like OUT\n"
    "  --dx DX.npy       dLoss/dX (self-attention: through Q, K and V)\n"
    "  --dcontext DC.npy dLoss/dC (with --context: through K and V)\n"
    "  --dwq F  --dwk F  --dwv F  --dwo F (with --wo)      weight gradients [d_in, d_out]\n"
    "  --dbq F  --dbk F  --dbv F  --dbo F                  bias gradients (also without the bias)\n\n"
    "%s\n"
    "examples (the chapter's two heads, concatenated to 3x4, projected by a 4x2 W_O; gradients):\n"
    "  attn mha -x X.npy --wq WQ.npy --wk WK.npy --wv WV.npy --wo WO.npy --heads 2 -o OUT.npy\n"
    "  attn mha -x X.npy --wq WQ.npy --wk WK.npy --wv WV.npy --wo WO.npy --heads 2 \\\n"
    "           --grad-out DO.npy --dx DX.npy --dwq DWQ.npy --dwk DWK.npy --dwv DWV.npy --dwo DWO.npy\n";

enum { IN_X, IN_CONTEXT, IN_WQ, IN_WK, IN_WV, IN_WO, IN_BQ, IN_BK, IN_BV, IN_BO, IN_COUNT };
static const char *input_flags[IN_COUNT] = {"-x", "--context", "--wq", "--wk", "--wv",
                                            "--wo", "--bq", "--bk", "--bv", "--bo"};
/* --dx ... --dbo: the gradient of each input, in the same order. */
static const char *grad_flags[IN_COUNT] = {"--dx", "--dcontext", "--dwq", "--dwk", "--dwv",
                                           "--dwo", "--dbq", "--dbk", "--dbv", "--dbo"};

/* Checks a matrix [rows, cols] (rows must equal want_rows when > 0). */
static int check_matrix(const char *flag, const char *path, const attn_array *a, int64_t want_rows,
                        const char *rows_name) {
    char buf[128];
    if (a->ndim != 2)
        return cli_data_error("mha", "%s '%s' has shape %s; a weight matrix [d_in, d_out] is expected",
                              flag, path, cli_shape_str(a, buf, sizeof buf));
    if (a->shape[0] == 0 || a->shape[1] == 0)
        return cli_data_error("mha", "%s '%s' has shape %s; every dimension must be at least 1", flag,
                              path, cli_shape_str(a, buf, sizeof buf));
    if (want_rows > 0 && a->shape[0] != want_rows)
        return cli_data_error("mha", "%s '%s' has shape %s; its first dimension must be %s = %lld", flag,
                              path, cli_shape_str(a, buf, sizeof buf), rows_name, (long long)want_rows);
    return CLI_OK;
}

static int check_vector(const char *flag, const char *path, const attn_array *a, int64_t want) {
    char buf[128];
    if (a->ndim != 1 || a->shape[0] != want)
        return cli_data_error("mha", "%s '%s' has shape %s; expected [%lld]", flag, path,
                              cli_shape_str(a, buf, sizeof buf), (long long)want);
    return CLI_OK;
}

/* Splits a sequence array [L, d] or [B, L, d] into (batch, len, width). */
static int sequence_dims(const char *flag, const char *path, const attn_array *a, int64_t dims[3]) {
    char buf[128];
    if (a->ndim != 2 && a->ndim != 3)
        return cli_data_error("mha", "%s '%s' has shape %s; expected [L, d] or [B, L, d]", flag, path,
                              cli_shape_str(a, buf, sizeof buf));
    dims[0] = a->ndim == 3 ? a->shape[0] : 1;
    dims[1] = a->shape[a->ndim - 2];
    dims[2] = a->shape[a->ndim - 1];
    if (!dims[0] || !dims[1] || !dims[2])
        return cli_data_error("mha", "%s '%s' has shape %s; every dimension must be at least 1", flag,
                              path, cli_shape_str(a, buf, sizeof buf));
    return CLI_OK;
}

/* Loads --grad-out: dLoss/dOUT must be shaped like OUT, [L, d_out] or
 * [B, L, d_out] in the rank of X. */
static int load_dout(const char *path, attn_array *douta, const attn_array *x, int64_t d_out) {
    char got[128], want[128];
    if (!cli_load_f32("mha", "--grad-out", path, false, douta)) return CLI_DATA_ERROR;
    attn_array expected = *x; /* only its shape is used */
    expected.shape[expected.ndim - 1] = d_out;
    bool same = douta->ndim == expected.ndim;
    for (int d = 0; same && d < expected.ndim; d++) same = douta->shape[d] == expected.shape[d];
    if (!same)
        return cli_data_error("mha", "--grad-out '%s' has shape %s; it must be shaped like OUT, %s", path,
                              cli_shape_str(douta, got, sizeof got), cli_shape_str(&expected, want, sizeof want));
    return CLI_OK;
}

int cmd_mha(int argc, char **argv) {
    const char *paths[IN_COUNT] = {0}, *grad_paths[IN_COUNT] = {0};
    const char *o_path = NULL, *weights_path = NULL, *lse_path = NULL, *dout_path = NULL;
    int64_t heads = 0, kv_heads = 0;
    cli_attention_options ao = CLI_ATTENTION_OPTIONS_INIT;
    attn_array in[IN_COUNT] = {{0}};
    attn_array douta = {0};
    float *out = NULL, *weights = NULL, *lse = NULL, *grads[IN_COUNT] = {0};
    int rc = CLI_OK;

    for (int i = 1; i < argc;) {
        const char *flag = argv[i];
        if (cli_is_help(flag)) {
            printf(mha_usage, cli_attention_options_help);
            return CLI_OK;
        }
        int taken = cli_parse_attention_option("mha", argc, argv, &i, &ao);
        if (taken < 0) return CLI_USAGE_ERROR;
        if (taken) continue;
        const char *value = i + 1 < argc ? argv[i + 1] : NULL;
        const char **target = strcmp(flag, "-o") == 0 ? &o_path
                            : strcmp(flag, "--weights") == 0 ? &weights_path
                            : strcmp(flag, "--lse") == 0 ? &lse_path
                            : strcmp(flag, "--grad-out") == 0 ? &dout_path : NULL;
        for (int n = 0; n < IN_COUNT && !target; n++)
            if (strcmp(flag, input_flags[n]) == 0) target = &paths[n];
            else if (strcmp(flag, grad_flags[n]) == 0) target = &grad_paths[n];
        if (strcmp(flag, "--heads") == 0 || strcmp(flag, "--kv-heads") == 0) {
            if (!cli_parse_int("mha", flag, value, 1, 1 << 20, flag[2] == 'h' ? &heads : &kv_heads))
                return CLI_USAGE_ERROR;
        } else if (target) {
            if (!value) return cli_usage_error("mha", "%s needs a file name", flag);
            *target = value;
        } else {
            return cli_usage_error("mha", "unknown option '%s'", flag);
        }
        i += 2;
    }
    bool want_grads = false;
    for (int n = 0; n < IN_COUNT; n++) want_grads |= grad_paths[n] != NULL;
    if (!paths[IN_X] || !paths[IN_WQ] || !paths[IN_WK] || !paths[IN_WV] || (!o_path && !want_grads) || !heads)
        return cli_usage_error("mha", "missing %s", !paths[IN_X] ? "-x X.npy" : !paths[IN_WQ] ? "--wq WQ.npy"
                                                  : !paths[IN_WK] ? "--wk WK.npy" : !paths[IN_WV] ? "--wv WV.npy"
                                                  : !o_path ? "-o OUT.npy" : "--heads H");
    if (want_grads != (dout_path != NULL))
        return cli_usage_error("mha", want_grads ? "gradient outputs need --grad-out DO.npy (dLoss/dOUT)"
                                                 : "--grad-out needs at least one gradient output (--dx, --dwq, ...)");
    for (int n = IN_CONTEXT; n <= IN_WO; n += IN_WO - IN_CONTEXT)
        if (grad_paths[n] && !paths[n])
            return cli_usage_error("mha", "%s needs %s", grad_flags[n], input_flags[n]);
    {
        const char *inputs[IN_COUNT + 4], *outputs[IN_COUNT + 3];
        for (int n = 0; n < IN_COUNT; n++) inputs[n] = paths[n], outputs[n] = grad_paths[n];
        inputs[IN_COUNT] = ao.key_lengths_path, inputs[IN_COUNT + 1] = ao.mask_path;
        inputs[IN_COUNT + 2] = ao.bias_path, inputs[IN_COUNT + 3] = dout_path;
        outputs[IN_COUNT] = o_path, outputs[IN_COUNT + 1] = weights_path, outputs[IN_COUNT + 2] = lse_path;
        if (cli_check_paths("mha", inputs, IN_COUNT + 4, outputs, IN_COUNT + 3)) return CLI_USAGE_ERROR;
    }
    if (!kv_heads) kv_heads = heads;
    if (heads % kv_heads)
        return cli_usage_error("mha", "--heads %lld is not a multiple of --kv-heads %lld", (long long)heads,
                               (long long)kv_heads);

    for (int n = 0; n < IN_COUNT; n++)
        if (paths[n] && !cli_load_f32("mha", input_flags[n], paths[n], false, &in[n])) {
            rc = CLI_DATA_ERROR;
            goto cleanup;
        }

    int64_t xd[3], cd[3];
    if ((rc = sequence_dims("-x", paths[IN_X], &in[IN_X], xd))) goto cleanup;
    if (paths[IN_CONTEXT]) {
        if ((rc = sequence_dims("--context", paths[IN_CONTEXT], &in[IN_CONTEXT], cd))) goto cleanup;
        if (cd[0] != xd[0]) {
            rc = cli_data_error("mha", "--context '%s' has batch %lld but -x '%s' has batch %lld",
                                paths[IN_CONTEXT], (long long)cd[0], paths[IN_X], (long long)xd[0]);
            goto cleanup;
        }
    } else {
        memcpy(cd, xd, sizeof cd);
    }
    const int64_t B = xd[0], L = xd[1], S = cd[1];
    attn_mha m = {.struct_size = sizeof(attn_mha), .d_model = xd[2], .d_context = cd[2], .heads = heads, .kv_heads = kv_heads};
    const char *ctx_name = paths[IN_CONTEXT] ? "the context width" : "the width of X";
    if ((rc = check_matrix("--wq", paths[IN_WQ], &in[IN_WQ], m.d_model, "the width of X")) ||
        (rc = check_matrix("--wk", paths[IN_WK], &in[IN_WK], m.d_context, ctx_name)) ||
        (rc = check_matrix("--wv", paths[IN_WV], &in[IN_WV], m.d_context, ctx_name)))
        goto cleanup;
    if (in[IN_WQ].shape[1] % heads || in[IN_WK].shape[1] % kv_heads || in[IN_WV].shape[1] % kv_heads) {
        rc = cli_data_error("mha", "--wq has %lld columns, --wk %lld and --wv %lld: they must split evenly "
                            "into %lld query heads and %lld key/value heads",
                            (long long)in[IN_WQ].shape[1], (long long)in[IN_WK].shape[1],
                            (long long)in[IN_WV].shape[1], (long long)heads, (long long)kv_heads);
        goto cleanup;
    }
    m.head_dim = in[IN_WQ].shape[1] / heads;
    m.value_dim = in[IN_WV].shape[1] / kv_heads;
    if (in[IN_WK].shape[1] != kv_heads * m.head_dim) {
        rc = cli_data_error("mha", "--wk '%s' has %lld columns; with head width D = %lld (from --wq) and "
                            "%lld key/value heads it must have %lld",
                            paths[IN_WK], (long long)in[IN_WK].shape[1], (long long)m.head_dim,
                            (long long)kv_heads, (long long)(kv_heads * m.head_dim));
        goto cleanup;
    }
    m.d_out = heads * m.value_dim;
    if (paths[IN_WO]) {
        if ((rc = check_matrix("--wo", paths[IN_WO], &in[IN_WO], m.d_out, "heads * Dv"))) goto cleanup;
        m.d_out = in[IN_WO].shape[1];
    }
    if ((paths[IN_BQ] && (rc = check_vector("--bq", paths[IN_BQ], &in[IN_BQ], heads * m.head_dim))) ||
        (paths[IN_BK] && (rc = check_vector("--bk", paths[IN_BK], &in[IN_BK], kv_heads * m.head_dim))) ||
        (paths[IN_BV] && (rc = check_vector("--bv", paths[IN_BV], &in[IN_BV], kv_heads * m.value_dim))) ||
        (paths[IN_BO] && (rc = check_vector("--bo", paths[IN_BO], &in[IN_BO], m.d_out))))
        goto cleanup;
    m.wq = in[IN_WQ].data; m.wk = in[IN_WK].data; m.wv = in[IN_WV].data; m.wo = in[IN_WO].data;
    m.bq = in[IN_BQ].data; m.bk = in[IN_BK].data; m.bv = in[IN_BV].data; m.bo = in[IN_BO].data;
    if ((rc = cli_load_attention_inputs("mha", &ao, B, heads, L, S))) goto cleanup;
    if (want_grads && (rc = load_dout(dout_path, &douta, &in[IN_X], m.d_out))) goto cleanup;

    /* Shapes of the gradients: like the inputs, biases [width] even when absent. */
    const int64_t bias_widths[IN_COUNT] = {[IN_BQ] = heads * m.head_dim, [IN_BK] = kv_heads * m.head_dim,
                                           [IN_BV] = kv_heads * m.value_dim, [IN_BO] = m.d_out};
    cli_output outputs[3 + IN_COUNT] = {{0}};
    for (int n = 0; n < IN_COUNT; n++) {
        cli_output *g = &outputs[3 + n];
        if (!(g->path = grad_paths[n])) continue;
        g->ndim = n >= IN_BQ ? 1 : in[n].ndim;
        if (n >= IN_BQ) g->shape[0] = bias_widths[n];
        else memcpy(g->shape, in[n].shape, (size_t)in[n].ndim * sizeof(int64_t));
        int64_t count = 1;
        for (int d = 0; d < g->ndim; d++) count *= g->shape[d];
        if (!(grads[n] = malloc((size_t)count * sizeof(float)))) {
            rc = cli_data_error("mha", "out of memory for %s", grad_flags[n]);
            goto cleanup;
        }
        g->data = grads[n];
    }

    out = malloc((size_t)(B * L * m.d_out) * sizeof(float));
    weights = weights_path ? malloc((size_t)(B * heads * L * S) * sizeof(float)) : NULL;
    lse = lse_path ? malloc((size_t)(B * heads * L) * sizeof(float)) : NULL;
    if (!out || (weights_path && !weights) || (lse_path && !lse)) {
        rc = cli_data_error("mha", "out of memory for the outputs");
        goto cleanup;
    }
    attn_status st = attn_mha_forward(&m, in[IN_X].data, B, L, in[IN_CONTEXT].data, S, &ao.opt, out,
                                      weights, lse);
    if (st == ATTN_OK && want_grads) {
        attn_mha_grads g = {sizeof(attn_mha_grads), grads[IN_X], grads[IN_CONTEXT], grads[IN_WQ], grads[IN_WK], grads[IN_WV],
                            grads[IN_WO], grads[IN_BQ], grads[IN_BK], grads[IN_BV], grads[IN_BO]};
        st = attn_mha_backward(&m, in[IN_X].data, B, L, in[IN_CONTEXT].data, S, &ao.opt, douta.data, &g);
    }
    if (st != ATTN_OK) {
        rc = cli_data_error("mha", "%s: %s", attn_status_str(st), attn_last_error());
        goto cleanup;
    }
    int drop = in[IN_X].ndim == 3 ? 0 : 1; /* 2-D X: outputs drop the batch dimension */
    int64_t w4[4] = {B, heads, L, S};
    outputs[0] = (cli_output){o_path, 3 - drop, {0}, out};
    outputs[1] = (cli_output){weights_path, 4 - drop, {0}, weights};
    outputs[2] = (cli_output){lse_path, 3 - drop, {0}, lse};
    int64_t o3[3] = {B, L, m.d_out};
    memcpy(outputs[0].shape, o3 + drop, (size_t)(3 - drop) * sizeof(int64_t));
    memcpy(outputs[1].shape, w4 + drop, (size_t)(4 - drop) * sizeof(int64_t));
    memcpy(outputs[2].shape, w4 + drop, (size_t)(3 - drop) * sizeof(int64_t));
    if (!cli_save_outputs("mha", outputs, 3 + IN_COUNT)) rc = CLI_DATA_ERROR;

cleanup:
    free(out);
    free(weights);
    free(lse);
    for (int n = 0; n < IN_COUNT; n++) free(grads[n]);
    attn_array_free(&douta);
    for (int n = 0; n < IN_COUNT; n++) attn_array_free(&in[n]);
    cli_attention_options_free(&ao);
    return rc;
}
