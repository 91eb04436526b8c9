/*
 * cmd_sdpa.c — `attn sdpa`: scaled dot-product attention on .npy arrays.
 *
 * Shapes (the rank of -q chooses the layout of the outputs):
 *   2-D  q [L, D]          k [S, D]          v [S, Dv]         o [L, Dv]
 *   3-D  q [L, Hq, D]      k [S, Hkv, D]     v [S, Hkv, Dv]    o [L, Hq, Dv]
 *   4-D  q [B, L, Hq, D]   k [B, S, Hkv, D]  v [B, S, Hkv, Dv] o [B, L, Hq, Dv]
 *   weights [B, Hq, L, S], lse [B, Hq, L], with the leading dims the input
 *   rank leaves out dropped ([L, S] and [L] for 2-D inputs).
 * Gradients (--grad-out dO, shaped like o): dq like q, dk like k, dv like v.
 */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

static const char sdpa_usage[] =
    "usage: attn sdpa -q Q.npy -k K.npy -v V.npy -o O.npy [--weights W.npy] [--lse LSE.npy]\n"
    "                 [--grad-out DO.npy [--dq DQ.npy] [--dk DK.npy] [--dv DV.npy]]\n"
    "                 [mask and computation options]\n\n"
    "Scaled dot-product attention: O = softmax(scale * Q K^T + bias, over visible keys) V.\n"
    "With --grad-out, also its backward pass: the gradients of a loss whose gradient with\n"
    "respect to O is DO.\n\n"
    "inputs (float32; float64 and float16 are converted; NaN/Inf refused):\n"
    "  -q Q.npy   queries [L, D], [L, Hq, D] or [B, L, Hq, D]\n"
    "  -k K.npy   keys    [S, D], [S, Hkv, D] or [B, S, Hkv, D]   (Hq a multiple of Hkv: GQA)\n"
    "  -v V.npy   values  [S, Dv], [S, Hkv, Dv] or [B, S, Hkv, Dv] (Dv may differ from D)\n"
    "outputs (float32, written atomically):\n"
    "  -o O.npy          output [.., L, Hq, Dv], same rank as Q\n"
    "  --weights W.npy   attention weights [B, Hq, L, S]  (heads before positions)\n"
    "  --lse LSE.npy     log-sum-exp of each row's scores [B, Hq, L]\n"
    "  (for 2-D/3-D inputs the leading B/Hq dimensions are dropped likewise)\n"
    "gradients (-o is optional when one of these is asked for):\n"
    "  --grad-out DO.npy dLoss/dO, shaped like O (same rank as Q)\n"
    "  --dq DQ.npy       dLoss/dQ, shaped like Q\n"
    "  --dk DK.npy       dLoss/dK, shaped like K   (GQA: summed over the query heads of a group)\n"
    "  --dv DV.npy       dLoss/dV, shaped like V\n"
    "  (the masks and the bias are constants: no gradient of --bias is written)\n\n"
    "%s\n"
    "examples (the chapter's 3x2 example with a causal mask; its gradients):\n"
    "  attn sdpa -q Q.npy -k K.npy -v V.npy -o O.npy --weights W.npy --causal\n"
    "  attn sdpa -q Q.npy -k K.npy -v V.npy --causal --grad-out DO.npy --dq DQ.npy --dk DK.npy --dv DV.npy\n";

/* Views a loaded array of rank 2..4 as [B, positions, heads, width]. */
static int as_tensor(const char *flag, const char *path, attn_array *a, attn_tensor *t) {
    char buf[128];
    if (a->ndim < 2 || a->ndim > 4)
        return cli_data_error("sdpa", "%s '%s' has shape %s; expected rank 2 [L, D], 3 [L, H, D] or 4 [B, L, H, D]",
                              flag, path, cli_shape_str(a, buf, sizeof buf));
    int64_t s[4] = {1, 1, 1, 1};
    if (a->ndim == 2) { s[1] = a->shape[0]; s[3] = a->shape[1]; }
    else for (int d = 0; d < a->ndim; d++) s[4 - a->ndim + d] = a->shape[d];
    for (int d = 0; d < 4; d++)
        if (s[d] == 0)
            return cli_data_error("sdpa", "%s '%s' has shape %s; every dimension must be at least 1", flag,
                                  path, cli_shape_str(a, buf, sizeof buf));
    *t = attn_tensor_4d(a->data, s[0], s[1], s[2], s[3]);
    return CLI_OK;
}

/* Loads --grad-out: dLoss/dO must have the shape O gets, [.., L, Hq, Dv] in
 * the rank of q. */
static int load_dout(const char *path, attn_array *douta, const attn_array *qa, int64_t Dv) {
    char got[128], want[128];
    if (!cli_load_f32("sdpa", "--grad-out", path, false, douta)) return CLI_DATA_ERROR;
    attn_array expected = *qa; /* only its shape is used */
    expected.shape[expected.ndim - 1] = Dv;
    bool same = douta->ndim == expected.ndim;
    for (int d = 0; same && d < expected.ndim; d++) same = douta->shape[d] == expected.shape[d];
    if (!same)
        return cli_data_error("sdpa", "--grad-out '%s' has shape %s; it must be shaped like the output O, %s",
                              path, cli_shape_str(douta, got, sizeof got),
                              cli_shape_str(&expected, want, sizeof want));
    return CLI_OK;
}

int cmd_sdpa(int argc, char **argv) {
    const char *q_path = NULL, *k_path = NULL, *v_path = NULL, *o_path = NULL;
    const char *weights_path = NULL, *lse_path = NULL;
    const char *dout_path = NULL, *dq_path = NULL, *dk_path = NULL, *dv_path = NULL;
    cli_attention_options ao = CLI_ATTENTION_OPTIONS_INIT;
    attn_array qa = {0}, ka = {0}, va = {0}, douta = {0};
    float *out = NULL, *weights = NULL, *lse = NULL, *dq = NULL, *dk = NULL, *dv = NULL;
    int rc = CLI_OK;

    for (int i = 1; i < argc;) {
        const char *flag = argv[i];
        if (cli_is_help(flag)) {
            printf(sdpa_usage, cli_attention_options_help);
            return CLI_OK;
        }
        int taken = cli_parse_attention_option("sdpa", argc, argv, &i, &ao);
        if (taken < 0) return CLI_USAGE_ERROR;
        if (taken) continue;
        const char **target = strcmp(flag, "-q") == 0 ? &q_path
                            : strcmp(flag, "-k") == 0 ? &k_path
                            : strcmp(flag, "-v") == 0 ? &v_path
                            : strcmp(flag, "-o") == 0 ? &o_path
                            : strcmp(flag, "--weights") == 0 ? &weights_path
                            : strcmp(flag, "--lse") == 0 ? &lse_path
                            : strcmp(flag, "--grad-out") == 0 ? &dout_path
                            : strcmp(flag, "--dq") == 0 ? &dq_path
                            : strcmp(flag, "--dk") == 0 ? &dk_path
                            : strcmp(flag, "--dv") == 0 ? &dv_path : NULL;
        if (!target) return cli_usage_error("sdpa", "unknown option '%s'", flag);
        if (i + 1 >= argc) return cli_usage_error("sdpa", "%s needs a file name", flag);
        *target = argv[i + 1];
        i += 2;
    }
    const bool grads = dq_path || dk_path || dv_path;
    if (!q_path || !k_path || !v_path || (!o_path && !grads))
        return cli_usage_error("sdpa", "missing %s", !q_path ? "-q Q.npy" : !k_path ? "-k K.npy"
                                                   : !v_path ? "-v V.npy" : "-o O.npy");
    if (grads != (dout_path != NULL))
        return cli_usage_error("sdpa", grads ? "--dq, --dk and --dv need --grad-out DO.npy (dLoss/dO)"
                                             : "--grad-out needs at least one of --dq, --dk, --dv");
    const char *const inputs[] = {q_path, k_path, v_path, ao.key_lengths_path, ao.mask_path, ao.bias_path,
                                  dout_path};
    const char *const output_paths[] = {o_path, weights_path, lse_path, dq_path, dk_path, dv_path};
    if (cli_check_paths("sdpa", inputs, 7, output_paths, 6)) return CLI_USAGE_ERROR;

    attn_tensor q, k, v;
    if (!cli_load_f32("sdpa", "-q", q_path, false, &qa) || !cli_load_f32("sdpa", "-k", k_path, false, &ka) ||
        !cli_load_f32("sdpa", "-v", v_path, false, &va) || as_tensor("-q", q_path, &qa, &q) ||
        as_tensor("-k", k_path, &ka, &k) || as_tensor("-v", v_path, &va, &v)) {
        rc = CLI_DATA_ERROR;
        goto cleanup;
    }
    const int64_t B = q.shape[0], L = q.shape[1], Hq = q.shape[2], S = k.shape[1], Dv = v.shape[3];
    if ((rc = cli_load_attention_inputs("sdpa", &ao, B, Hq, L, S))) goto cleanup;
    if (grads && (rc = load_dout(dout_path, &douta, &qa, Dv))) goto cleanup;

    /* Sizes come from files already held in memory, so these products fit. */
    out = malloc((size_t)(B * L * Hq * Dv) * sizeof(float));
    weights = weights_path ? malloc((size_t)(B * Hq * L * S) * sizeof(float)) : NULL;
    lse = lse_path || grads ? malloc((size_t)(B * Hq * L) * sizeof(float)) : NULL;
    dq = dq_path ? malloc((size_t)qa.count * sizeof(float)) : NULL;
    dk = dk_path ? malloc((size_t)ka.count * sizeof(float)) : NULL;
    dv = dv_path ? malloc((size_t)va.count * sizeof(float)) : NULL;
    if (!out || (weights_path && !weights) || ((lse_path || grads) && !lse) || (dq_path && !dq) ||
        (dk_path && !dk) || (dv_path && !dv)) {
        rc = cli_data_error("sdpa", "out of memory for the outputs (%lld x %lld weights table?)",
                            (long long)L, (long long)S);
        goto cleanup;
    }
    attn_tensor o = attn_tensor_4d(out, B, L, Hq, Dv);
    attn_status st = attn_sdpa_forward(&q, &k, &v, &ao.opt, &o, weights, lse);
    if (st == ATTN_OK && grads) {
        attn_tensor dot = attn_tensor_4d(douta.data, B, L, Hq, Dv);
        attn_tensor dqt = attn_tensor_4d(dq, B, L, Hq, q.shape[3]);
        attn_tensor dkt = attn_tensor_4d(dk, B, S, k.shape[2], k.shape[3]);
        attn_tensor dvt = attn_tensor_4d(dv, B, S, v.shape[2], Dv);
        st = attn_sdpa_backward(&q, &k, &v, &ao.opt, &o, lse, &dot, dq ? &dqt : NULL, dk ? &dkt : NULL,
                                dv ? &dvt : NULL);
    }
    if (st != ATTN_OK) {
        char qs[96], ks[96], vs[96];
        rc = cli_data_error("sdpa", "%s: %s\n  (-q '%s' %s, -k '%s' %s, -v '%s' %s)", attn_status_str(st),
                            attn_last_error(), q_path, cli_shape_str(&qa, qs, sizeof qs), k_path,
                            cli_shape_str(&ka, ks, sizeof ks), v_path, cli_shape_str(&va, vs, sizeof vs));
        goto cleanup;
    }

    /* Outputs mirror the rank of q: drop the leading dims the input left out. */
    int drop = 4 - qa.ndim;
    int64_t o_shape4[4] = {B, L, Hq, Dv};
    cli_output outputs[6] = {{o_path, qa.ndim, {0}, out},
                             {weights_path, qa.ndim, {0}, weights},
                             {lse_path, qa.ndim - 1, {0}, lse},
                             {dq_path, qa.ndim, {0}, dq},
                             {dk_path, ka.ndim, {0}, dk},
                             {dv_path, va.ndim, {0}, dv}};
    memcpy(outputs[3].shape, qa.shape, (size_t)qa.ndim * sizeof(int64_t));
    memcpy(outputs[4].shape, ka.shape, (size_t)ka.ndim * sizeof(int64_t));
    memcpy(outputs[5].shape, va.shape, (size_t)va.ndim * sizeof(int64_t));
    if (qa.ndim == 2) { outputs[0].shape[0] = L; outputs[0].shape[1] = Dv; }
    else memcpy(outputs[0].shape, o_shape4 + drop, (size_t)qa.ndim * sizeof(int64_t));
    int64_t w_shape4[4] = {B, Hq, L, S};
    memcpy(outputs[1].shape, w_shape4 + drop, (size_t)qa.ndim * sizeof(int64_t));
    memcpy(outputs[2].shape, w_shape4 + drop, (size_t)(qa.ndim - 1) * sizeof(int64_t));
    if (!cli_save_outputs("sdpa", outputs, 6)) rc = CLI_DATA_ERROR;

cleanup:
    free(out);
    free(weights);
    free(lse);
    free(dq);
    free(dk);
    free(dv);
    attn_array_free(&douta);
    attn_array_free(&qa);
    attn_array_free(&ka);
    attn_array_free(&va);
    cli_attention_options_free(&ao);
    return rc;
}
