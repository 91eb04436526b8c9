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
 * --weight-layout torch: every W file is [d_out, d_in] (nn.Linear.weight),
 * and so are the dW written.
 */
#include "cli_interp.h"

#include <stdlib.h>
#include <string.h>

/* The inputs besides the module's weights, and every gradient: dX, dC, then
 * one per MOD_* input in cli_interp.h's order. */
enum { F_X = 1, F_CONTEXT, F_O, F_WEIGHTS, F_LSE, F_DOUT, F_DX, F_DCONTEXT, F_DW_FIRST };
enum { GRAD_X, GRAD_CONTEXT, GRAD_MODULE, GRAD_COUNT = GRAD_MODULE + MOD_COUNT };
static const char *const grad_flags[GRAD_COUNT] = {"--dx", "--dcontext", "--dwq", "--dwk", "--dwv", "--dwo",
                                                   "--dbq", "--dbk", "--dbv", "--dbo"};

static const cli_flag mha_flags[] = {
    {"-x", "X.npy", F_X, 0},              {"--context", "C.npy", F_CONTEXT, 0},
    {"-o", "OUT.npy", F_O, 0},            {"--weights", "W.npy", F_WEIGHTS, 0},
    {"--lse", "LSE.npy", F_LSE, 0},       {"--grad-out", "DO.npy", F_DOUT, 0},
    {"--dx", "DX.npy", F_DX, 0},          {"--dcontext", "DC.npy", F_DCONTEXT, 0},
    {"--dwq", "DWQ.npy", F_DW_FIRST + MOD_WQ, 0}, {"--dwk", "DWK.npy", F_DW_FIRST + MOD_WK, 0},
    {"--dwv", "DWV.npy", F_DW_FIRST + MOD_WV, 0}, {"--dwo", "DWO.npy", F_DW_FIRST + MOD_WO, 0},
    {"--dbq", "DBQ.npy", F_DW_FIRST + MOD_BQ, 0}, {"--dbk", "DBK.npy", F_DW_FIRST + MOD_BK, 0},
    {"--dbv", "DBV.npy", F_DW_FIRST + MOD_BV, 0}, {"--dbo", "DBO.npy", F_DW_FIRST + MOD_BO, 0},
    CLI_FLAGS_END};

static void mha_help(FILE *out) {
    fprintf(out,
    "usage: attn mha -x X.npy [--context C.npy] --wq WQ.npy --wk WK.npy --wv WV.npy\n"
    "                [--wo WO.npy] [--bq BQ.npy] [--bk BK.npy] [--bv BV.npy] [--bo BO.npy]\n"
    "                --heads H [--kv-heads G] [--weight-layout rows|torch]\n"
    "                -o OUT.npy [--weights W.npy] [--lse LSE.npy]\n"
    "                [--grad-out DO.npy --dx DX.npy [--dcontext DC.npy] --dwq DWQ.npy ...]\n"
    "                [mask and computation options] [--quiet]\n\n"
    "Multi-head attention: Q = X WQ + bq, K = C WK + bk, V = C WV + bv (C = X for self-attention),\n"
    "per-head attention, heads concatenated per position, then OUT = Z WO + bo.\n"
    "With --grad-out, also its backward pass: the gradients of a loss whose gradient with\n"
    "respect to OUT is DO.\n\n"
    "inputs (float32; float64 and float16 are converted):\n"
    "  -x X.npy          [L, d_model] or [B, L, d_model]\n"
    "  --context C.npy   keys/values from a second sequence (cross-attention), [S, d_ctx] or [B, S, d_ctx]\n"
    "%s"
    "outputs (float32; written as a set: every file complete, or none touched):\n"
    "  -o OUT.npy        [L, d_out] or [B, L, d_out]\n"
    "  --weights W.npy   attention weights [B, H, L, S]  (heads before positions; [H, L, S] for 2-D X)\n"
    "  --lse LSE.npy     log-sum-exp per row [B, H, L]\n"
    "  --quiet           no line on stderr naming what was written\n"
    "gradients (-o is optional when one of these is asked for; each is shaped like its input):\n"
    "  --grad-out DO.npy dLoss/dOUT, shaped like OUT\n"
    "  --dx DX.npy       dLoss/dX (self-attention: through Q, K and V)\n"
    "  --dcontext DC.npy dLoss/dC (with --context: through K and V)\n"
    "  --dwq F  --dwk F  --dwv F  --dwo F (with --wo)      weight gradients, in the weights' layout\n"
    "  --dbq F  --dbk F  --dbv F  --dbo F                  bias gradients (also without the bias)\n\n"
    "%s%s%s\n"
    "examples (the chapter's two heads, concatenated to 3x4, projected by a 4x2 W_O; gradients):\n"
    "  attn mha -x X.npy --wq WQ.npy --wk WK.npy --wv WV.npy --wo WO.npy --heads 2 -o OUT.npy\n"
    "  attn mha -x X.npy --wq WQ.npy --wk WK.npy --wv WV.npy --wo WO.npy --heads 2 \\\n"
    "           --grad-out DO.npy --dx DX.npy --dwq DWQ.npy --dwk DWK.npy --dwv DWV.npy --dwo DWO.npy\n",
    cli_module_help, cli_mask_help, cli_logits_help, cli_compute_help);
}

static const cli_flag *const mha_tables[] = {mha_flags, cli_module_flags, cli_mask_flags, cli_logits_flags,
                                             cli_compute_flags, cli_quiet_flags, NULL};
const cli_spec cli_mha_spec = {"mha", mha_tables, mha_help, false};

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
    const char *path[F_DW_FIRST + MOD_COUNT] = {0};
    cli_module mod = {0};
    cli_attention_options ao = CLI_ATTENTION_OPTIONS_INIT;
    attn_array xa = {0}, ca = {0}, douta = {0};
    float *out = NULL, *weights = NULL, *lse = NULL, *grads[GRAD_COUNT] = {0};
    int rc = CLI_OK;

    cli_args args;
    const char *value;
    cli_args_begin(&args, &cli_mha_spec, argc, argv);
    for (int id; (id = cli_args_next(&args, &value)) != CLI_ARGS_END;) {
        if (id == CLI_ARGS_STOP) return args.status;
        int taken = cli_attention_take(&ao, &args, id, value);
        if (!taken) taken = cli_module_take(&mod, &args, id, value);
        if (taken < 0) return CLI_USAGE_ERROR;
        if (!taken) path[id] = value; /* mha_flags: every one names a file */
    }
    /* grad_path[g]: the file of gradient g. */
    const char *grad_path[GRAD_COUNT] = {path[F_DX], path[F_DCONTEXT]};
    for (int n = 0; n < MOD_COUNT; n++) grad_path[GRAD_MODULE + n] = path[F_DW_FIRST + n];
    bool want_grads = false;
    for (int g = 0; g < GRAD_COUNT; g++) want_grads |= grad_path[g] != NULL;
    if (!path[F_X] || !mod.paths[MOD_WQ] || !mod.paths[MOD_WK] || !mod.paths[MOD_WV] || (!path[F_O] && !want_grads) ||
        !mod.heads)
        return cli_usage_error("mha", "missing %s", !path[F_X] ? "-x X.npy" : !mod.paths[MOD_WQ] ? "--wq WQ.npy"
                                                  : !mod.paths[MOD_WK] ? "--wk WK.npy" : !mod.paths[MOD_WV] ? "--wv WV.npy"
                                                  : !mod.heads ? "--heads H" : "-o OUT.npy");
    if (want_grads != (path[F_DOUT] != NULL))
        return cli_usage_error("mha", want_grads ? "gradient outputs need --grad-out DO.npy (dLoss/dOUT)"
                                                 : "--grad-out needs at least one gradient output (--dx, --dwq, ...)");
    if ((rc = cli_module_check_flags("mha", &mod))) return rc;
    if (path[F_DCONTEXT] && !path[F_CONTEXT]) return cli_usage_error("mha", "--dcontext needs --context");
    if (path[F_DW_FIRST + MOD_WO] && !mod.paths[MOD_WO]) return cli_usage_error("mha", "--dwo needs --wo");
    {
        const char *inputs[MOD_COUNT + 8], *outputs[GRAD_COUNT + 3];
        for (int n = 0; n < MOD_COUNT; n++) inputs[n] = mod.paths[n];
        inputs[MOD_COUNT] = path[F_X], inputs[MOD_COUNT + 1] = path[F_CONTEXT], inputs[MOD_COUNT + 2] = path[F_DOUT];
        inputs[MOD_COUNT + 3] = ao.key_lengths_path, inputs[MOD_COUNT + 4] = ao.mask_path;
        inputs[MOD_COUNT + 5] = ao.bias_path;
        inputs[MOD_COUNT + 6] = ao.sinks_path, inputs[MOD_COUNT + 7] = ao.alibi_slopes_path;
        for (int g = 0; g < GRAD_COUNT; g++) outputs[g] = grad_path[g];
        outputs[GRAD_COUNT] = path[F_O], outputs[GRAD_COUNT + 1] = path[F_WEIGHTS];
        outputs[GRAD_COUNT + 2] = path[F_LSE];
        if (cli_check_paths("mha", inputs, MOD_COUNT + 8, outputs, GRAD_COUNT + 3)) return CLI_USAGE_ERROR;
    }

    int64_t xd[3], cd[3];
    if ((rc = cli_load_sequence("mha", "-x", path[F_X], &xa, xd))) goto cleanup;
    if (path[F_CONTEXT]) {
        if ((rc = cli_load_sequence("mha", "--context", path[F_CONTEXT], &ca, cd))) goto cleanup;
        if (cd[0] != xd[0]) {
            rc = cli_data_error("mha", "--context '%s' has batch %lld but -x '%s' has batch %lld", path[F_CONTEXT],
                                (long long)cd[0], path[F_X], (long long)xd[0]);
            goto cleanup;
        }
    } else {
        memcpy(cd, xd, sizeof cd);
    }
    const int64_t B = xd[0], L = xd[1], S = cd[1];
    if ((rc = cli_module_load("mha", &mod, xd[2], cd[2]))) goto cleanup;
    const attn_mha *m = &mod.m;
    if ((rc = cli_load_attention_inputs("mha", &ao, B, m->heads, L, S))) goto cleanup;
    if (want_grads && (rc = load_dout(path[F_DOUT], &douta, &xa, m->d_out))) goto cleanup;
    {
        /* The attention inside, by shape alone, for the reference's budget. */
        attn_tensor q = attn_tensor_4d(NULL, B, L, m->heads, m->head_dim);
        attn_tensor k = attn_tensor_4d(NULL, B, S, m->kv_heads, m->head_dim);
        attn_tensor v = attn_tensor_4d(NULL, B, S, m->kv_heads, m->value_dim);
        const double bytes = 4.0 * ((double)(B * L * m->d_out) + (path[F_WEIGHTS] ? (double)(B * m->heads) * L * S : 0));
        if ((rc = cli_check_budget("mha", &ao, &q, &k, &v, want_grads ? 3.5 : 1, bytes))) goto cleanup;
    }

    /* Shapes of the gradients: like the inputs, biases [width] even when absent. */
    const int64_t bias_widths[MOD_COUNT] = {[MOD_BQ] = m->heads * m->head_dim, [MOD_BK] = m->kv_heads * m->head_dim,
                                            [MOD_BV] = m->kv_heads * m->value_dim, [MOD_BO] = m->d_out};
    cli_output outputs[3 + GRAD_COUNT] = {{0}};
    for (int g = 0; g < GRAD_COUNT; g++) {
        cli_output *o = &outputs[3 + g];
        if (!(o->path = grad_path[g])) continue;
        const int n = g - GRAD_MODULE;
        const attn_array *like = g == GRAD_X ? &xa : g == GRAD_CONTEXT ? &ca : &mod.arrays[n];
        o->ndim = n >= MOD_BQ ? 1 : like->ndim;
        if (n >= MOD_BQ) o->shape[0] = bias_widths[n];
        else memcpy(o->shape, like->shape, (size_t)like->ndim * sizeof(int64_t));
        int64_t count = 1;
        for (int d = 0; d < o->ndim; d++) count *= o->shape[d];
        if (!(grads[g] = malloc((size_t)count * sizeof(float)))) {
            rc = cli_data_error("mha", "out of memory for %s", grad_flags[g]);
            goto cleanup;
        }
        o->data = grads[g];
    }

    out = malloc((size_t)(B * L * m->d_out) * sizeof(float));
    weights = path[F_WEIGHTS] ? malloc((size_t)(B * m->heads * L * S) * sizeof(float)) : NULL;
    lse = path[F_LSE] ? malloc((size_t)(B * m->heads * L) * sizeof(float)) : NULL;
    if (!out || (path[F_WEIGHTS] && !weights) || (path[F_LSE] && !lse)) {
        rc = cli_data_error("mha", "out of memory for the outputs");
        goto cleanup;
    }
    const double start = cli_seconds();
    attn_status st = attn_mha_forward(m, xa.data, B, L, ca.data, S, &ao.opt, out, weights, lse);
    if (st == ATTN_OK && want_grads) {
        attn_mha_grads g = {sizeof(attn_mha_grads), grads[GRAD_X], grads[GRAD_CONTEXT],
                            grads[GRAD_MODULE + MOD_WQ], grads[GRAD_MODULE + MOD_WK], grads[GRAD_MODULE + MOD_WV],
                            grads[GRAD_MODULE + MOD_WO], grads[GRAD_MODULE + MOD_BQ], grads[GRAD_MODULE + MOD_BK],
                            grads[GRAD_MODULE + MOD_BV], grads[GRAD_MODULE + MOD_BO]};
        st = attn_mha_backward(m, xa.data, B, L, ca.data, S, &ao.opt, douta.data, &g);
    }
    const double elapsed = cli_seconds() - start;
    if (st != ATTN_OK) {
        rc = cli_data_error("mha", "%s: %s", attn_status_str(st), attn_last_error());
        goto cleanup;
    }
    for (int n = MOD_WQ; n <= MOD_WO; n++)
        if (grads[GRAD_MODULE + n] &&
            !cli_module_gradient_to_file("mha", &mod, n, grads[GRAD_MODULE + n], outputs[3 + GRAD_MODULE + n].shape)) {
            rc = CLI_DATA_ERROR;
            goto cleanup;
        }
    const int drop = xa.ndim == 3 ? 0 : 1; /* 2-D X: outputs drop the batch dimension */
    const int64_t w4[4] = {B, m->heads, L, S}, o3[3] = {B, L, m->d_out};
    outputs[0] = (cli_output){path[F_O], 3 - drop, {0}, out, ATTN_F32};
    outputs[1] = (cli_output){path[F_WEIGHTS], 4 - drop, {0}, weights, ATTN_F32};
    outputs[2] = (cli_output){path[F_LSE], 3 - drop, {0}, lse, ATTN_F32};
    memcpy(outputs[0].shape, o3 + drop, (size_t)(3 - drop) * sizeof(int64_t));
    memcpy(outputs[1].shape, w4 + drop, (size_t)(4 - drop) * sizeof(int64_t));
    memcpy(outputs[2].shape, w4 + drop, (size_t)(3 - drop) * sizeof(int64_t));
    if (!cli_save_outputs("mha", outputs, 3 + GRAD_COUNT)) {
        rc = CLI_DATA_ERROR;
    } else if (!cli_args_given(&args, CLI_ID_QUIET)) {
        attn_tensor q = attn_tensor_4d(NULL, B, L, m->heads, m->head_dim);
        attn_tensor k = attn_tensor_4d(NULL, B, S, m->kv_heads, m->head_dim);
        attn_tensor v = attn_tensor_4d(NULL, B, S, m->kv_heads, m->value_dim);
        char how[160];
        cli_describe_run(how, sizeof how, attn_sdpa_kernel_name(&q, &k, &v, &ao.opt), ao.opt.threads, elapsed);
        cli_print_written("mha", outputs, 3 + GRAD_COUNT, how);
    }

cleanup:
    free(out);
    free(weights);
    free(lse);
    for (int g = 0; g < GRAD_COUNT; g++) free(grads[g]);
    attn_array_free(&douta);
    attn_array_free(&xa);
    attn_array_free(&ca);
    cli_module_free(&mod);
    cli_attention_options_free(&ao);
    return rc;
}
