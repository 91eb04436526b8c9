/*
 * cmd_sdpa.c — `attn sdpa`: scaled dot-product attention on .npy arrays.
 *
 * Shapes (the rank of -q chooses the layout of the outputs):
 *   2-D  q [L, D]          k [S, D]          v [S, Dv]         o [L, Dv]
 *   3-D  q [L, Hq, D]      k [S, Hkv, D]     v [S, Hkv, Dv]    o [L, Hq, Dv]
 *   4-D  q [B, L, Hq, D]   k [B, S, Hkv, D]  v [B, S, Hkv, Dv] o [B, L, Hq, Dv]
 *   weights [B, Hq, L, S], lse [B, Hq, L], with the leading dims the input
 *   rank leaves out dropped ([L, S] and [L] for 2-D inputs).
 * With --layout BHLD the files of q, k, v, o (and their gradients) hold
 * heads before positions ([B, Hq, L, D], PyTorch's); they are reordered to
 * [B, L, Hq, D] on reading and back on writing.
 * Gradients (--grad-out dO, shaped like o): dq like q, dk like k, dv like v,
 * and with --sinks, dsinks [Hq].
 * q, k, v files of float16 or bfloat16 are handed to the kernels as stored
 * (no float32 copy); --out-dtype chooses o's dtype (the kernels write it).
 */
#include "cli.h"
#include "cli_timing.h"

#include <stdlib.h>
#include <string.h>

enum { F_Q = 1, F_K, F_V, F_O, F_WEIGHTS, F_LSE, F_DOUT, F_DQ, F_DK, F_DV, F_DSINKS, F_OUT_DTYPE, F_TIMING };

static const cli_flag sdpa_flags[] = {
    {"-q", "Q.npy", F_Q, 0},           {"-k", "K.npy", F_K, 0},         {"-v", "V.npy", F_V, 0},
    {"-o", "O.npy", F_O, 0},           {"--weights", "W.npy", F_WEIGHTS, 0},
    {"--lse", "LSE.npy", F_LSE, 0},    {"--grad-out", "DO.npy", F_DOUT, 0},
    {"--dq", "DQ.npy", F_DQ, 0},       {"--dk", "DK.npy", F_DK, 0},     {"--dv", "DV.npy", F_DV, 0},
    {"--dsinks", "DS.npy", F_DSINKS, 0},
    {"--out-dtype", "f32|f16|bf16", F_OUT_DTYPE, 0},
    {"--timing", NULL, F_TIMING, 0},
    CLI_FLAGS_END};

static void sdpa_help(FILE *out) {
    fprintf(out,
    "usage: attn sdpa -q Q.npy -k K.npy -v V.npy -o O.npy [--weights W.npy] [--lse LSE.npy]\n"
    "                 [--grad-out DO.npy [--dq DQ.npy] [--dk DK.npy] [--dv DV.npy] [--dsinks DS.npy]]\n"
    "                 [--out-dtype f32|f16|bf16] [--layout BLHD|BHLD]\n"
    "                 [mask, score stage and computation options] [--quiet] [--timing]\n\n"
    "Scaled dot-product attention: O = softmax(scale * Q K^T + bias, over visible keys) V.\n"
    "With --grad-out, also its backward pass: the gradients of a loss whose gradient with\n"
    "respect to O is DO.\n\n"
    "inputs (float32, float16 or bfloat16, any mix, used as stored: the kernels widen each\n"
    "element to float32 and accumulate in float32; float64 is converted to float32; NaN/Inf\n"
    "refused):\n"
    "  -q Q.npy   queries [L, D], [L, Hq, D] or [B, L, Hq, D]\n"
    "  -k K.npy   keys    [S, D], [S, Hkv, D] or [B, S, Hkv, D]   (Hq a multiple of Hkv: GQA)\n"
    "  -v V.npy   values  [S, Dv], [S, Hkv, Dv] or [B, S, Hkv, Dv] (Dv may differ from D)\n"
    "             (with --layout BHLD heads come before positions: [B, Hq, L, D] and so on)\n"
    "outputs (float32; written as a set: every file complete, or none touched):\n"
    "  -o O.npy          output [.., L, Hq, Dv], same rank (and layout) as Q\n"
    "  --out-dtype f32|f16|bf16\n"
    "                    dtype of O (default f32: the project's working type, and no\n"
    "                    precision lost after the float32 accumulation; f16/bf16 round it\n"
    "                    once to nearest even); weights, lse and gradients stay float32\n"
    "  --weights W.npy   attention weights [B, Hq, L, S]  (heads before positions)\n"
    "  --lse LSE.npy     log-sum-exp of each row's scores [B, Hq, L]\n"
    "  (for 2-D/3-D inputs the leading B/Hq dimensions are dropped likewise)\n"
    "  --quiet           no line on stderr naming what was written\n"
    "  --timing          where the run's time went, on stderr: reading, converting and checking\n"
    "                    the inputs, the kernel, writing, fsync and freeing (docs/kernels.md)\n"
    "gradients (-o is optional when one of these is asked for):\n"
    "  --grad-out DO.npy dLoss/dO, shaped like O (same rank as Q)\n"
    "  --dq DQ.npy       dLoss/dQ, shaped like Q\n"
    "  --dk DK.npy       dLoss/dK, shaped like K   (GQA: summed over the query heads of a group)\n"
    "  --dv DV.npy       dLoss/dV, shaped like V\n"
    "  --dsinks DS.npy   dLoss/dsinks [Hq], summed over batches and rows (needs --sinks)\n"
    "  (the masks, the bias and the ALiBi slopes are constants: no gradient of them is written)\n\n"
    "%s%s%s%s\n"
    "examples (the chapter's 3x2 example with a causal mask; its gradients; a decode step):\n"
    "  attn sdpa -q Q.npy -k K.npy -v V.npy -o O.npy --weights W.npy --causal\n"
    "  attn sdpa -q Q.npy -k K.npy -v V.npy --causal --grad-out DO.npy --dq DQ.npy --dk DK.npy --dv DV.npy\n"
    "  attn sdpa -q q_step.npy -k cache_k.npy -v cache_v.npy -o o.npy --causal-lower-right\n",
    cli_layout_help, cli_mask_help, cli_logits_help, cli_compute_help);
}

static const cli_flag *const sdpa_tables[] = {sdpa_flags, cli_layout_flags, cli_mask_flags, cli_logits_flags,
                                              cli_compute_flags, cli_quiet_flags, NULL};
const cli_spec cli_sdpa_spec = {"sdpa", sdpa_tables, sdpa_help, false};

/* Loads --grad-out: dLoss/dO must be shaped like O, [.., L, Hq, Dv] in the
 * rank and layout of q. */
static int load_dout(const char *path, cli_layout layout, attn_array *douta, attn_tensor *dout, int rank,
                     const int64_t o_blhd[4]) {
    if (cli_load_qkv("sdpa", "--grad-out", path, layout, douta, dout)) return CLI_DATA_ERROR;
    if (douta->ndim == rank && memcmp(dout->shape, o_blhd, sizeof dout->shape) == 0) return CLI_OK;
    char got[128], want[128];
    attn_array expected = {.ndim = rank};
    cli_qkv_file_shape(layout, rank, o_blhd, expected.shape);
    return cli_data_error("sdpa", "--grad-out '%s' has shape %s; it must be shaped like the output O, %s", path,
                          cli_shape_str(douta, got, sizeof got), cli_shape_str(&expected, want, sizeof want));
}

int cmd_sdpa(int argc, char **argv) {
    const char *path[F_DSINKS + 1] = {0};
    attn_dtype out_dtype = ATTN_F32;
    cli_attention_options ao = CLI_ATTENTION_OPTIONS_INIT;
    attn_array qa = {0}, ka = {0}, va = {0}, douta = {0};
    float *out = NULL, *weights = NULL, *lse = NULL, *dq = NULL, *dk = NULL, *dv = NULL, *dsinks = NULL;
    int rc = CLI_OK;
    double flops = 0; /* of the forward, for --timing */

    cli_args args;
    const char *value;
    cli_args_begin(&args, &cli_sdpa_spec, argc, argv);
    for (int id; (id = cli_args_next(&args, &value)) != CLI_ARGS_END;) {
        if (id == CLI_ARGS_STOP) return args.status;
        int taken = cli_attention_take(&ao, &args, id, value);
        if (taken < 0) return CLI_USAGE_ERROR;
        if (taken) continue;
        if (id == F_TIMING) {
            cli_timing_enable();
            continue;
        }
        if (id == F_OUT_DTYPE) {
            if (strcmp(value, "f32") == 0) out_dtype = ATTN_F32;
            else if (strcmp(value, "f16") == 0) out_dtype = ATTN_F16;
            else if (strcmp(value, "bf16") == 0) out_dtype = ATTN_BF16;
            else return cli_usage_error("sdpa", "--out-dtype expects f32, f16 or bf16, got '%s'", value);
            continue;
        }
        path[id] = value; /* every other flag of sdpa_flags names a file */
    }
    const bool grads = path[F_DQ] || path[F_DK] || path[F_DV] || path[F_DSINKS], quiet = cli_args_given(&args, CLI_ID_QUIET);
    if (!path[F_Q] || !path[F_K] || !path[F_V] || (!path[F_O] && !grads))
        return cli_usage_error("sdpa", "missing %s", !path[F_Q] ? "-q Q.npy" : !path[F_K] ? "-k K.npy"
                                                   : !path[F_V] ? "-v V.npy" : "-o O.npy");
    if (grads != (path[F_DOUT] != NULL))
        return cli_usage_error("sdpa", grads ? "--dq, --dk and --dv need --grad-out DO.npy (dLoss/dO), and so does "
                                               "--dsinks"
                                             : "--grad-out needs at least one of --dq, --dk, --dv, --dsinks");
    if (path[F_DSINKS] && !ao.sinks_path)
        return cli_usage_error("sdpa", "--dsinks needs --sinks SINKS.npy: there is no sink to differentiate");
    const char *const inputs[] = {path[F_Q], path[F_K], path[F_V], ao.key_lengths_path, ao.mask_path,
                                  ao.bias_path, path[F_DOUT], ao.sinks_path, ao.alibi_slopes_path};
    const char *const output_paths[] = {path[F_O], path[F_WEIGHTS], path[F_LSE], path[F_DQ], path[F_DK], path[F_DV],
                                        path[F_DSINKS]};
    if (cli_check_paths("sdpa", inputs, 9, output_paths, 7)) return CLI_USAGE_ERROR;

    attn_tensor q, k, v, dot;
    if (cli_load_qkv_stored("sdpa", "-q", path[F_Q], ao.layout, &qa, &q) ||
        cli_load_qkv_stored("sdpa", "-k", path[F_K], ao.layout, &ka, &k) ||
        cli_load_qkv_stored("sdpa", "-v", path[F_V], ao.layout, &va, &v)) {
        rc = CLI_DATA_ERROR;
        goto cleanup;
    }
    cli_warn_if_transposed("sdpa", &ao, &q, path[F_Q], &k, path[F_K]);
    const int64_t B = q.shape[0], L = q.shape[1], Hq = q.shape[2], S = k.shape[1], Dv = v.shape[3];
    const int64_t o_blhd[4] = {B, L, Hq, Dv};
    if ((rc = cli_load_attention_inputs("sdpa", &ao, B, Hq, L, S))) goto cleanup;
    if (grads && (rc = load_dout(path[F_DOUT], ao.layout, &douta, &dot, qa.ndim, o_blhd))) goto cleanup;
    const double output_bytes = 4.0 * ((double)(B * L * Hq * Dv) + (path[F_WEIGHTS] ? (double)(B * Hq) * L * S : 0) +
                                       (double)qa.count + (double)ka.count + (double)va.count);
    if ((rc = cli_check_budget("sdpa", &ao, &q, &k, &v, grads ? 3.5 : 1, output_bytes))) goto cleanup;

    /* Sizes come from files already held in memory, so these products fit. */
    out = cli_alloc_large((size_t)(B * L * Hq * Dv) * attn_dtype_size(out_dtype));
    weights = path[F_WEIGHTS] ? malloc((size_t)(B * Hq * L * S) * sizeof(float)) : NULL;
    lse = path[F_LSE] || grads ? malloc((size_t)(B * Hq * L) * sizeof(float)) : NULL;
    dq = path[F_DQ] ? malloc((size_t)qa.count * sizeof(float)) : NULL;
    dk = path[F_DK] ? malloc((size_t)ka.count * sizeof(float)) : NULL;
    dv = path[F_DV] ? malloc((size_t)va.count * sizeof(float)) : NULL;
    dsinks = path[F_DSINKS] ? malloc((size_t)Hq * sizeof(float)) : NULL;
    if (!out || (path[F_WEIGHTS] && !weights) || ((path[F_LSE] || grads) && !lse) || (path[F_DQ] && !dq) ||
        (path[F_DK] && !dk) || (path[F_DV] && !dv) || (path[F_DSINKS] && !dsinks)) {
        rc = cli_data_error("sdpa", "out of memory for the outputs (%lld x %lld weights table?)",
                            (long long)L, (long long)S);
        goto cleanup;
    }
    const double start = cli_seconds();
    double t = cli_timing_now();
    attn_tensor o = attn_tensor_view(out, out_dtype, B, L, Hq, Dv);
    attn_status st = attn_sdpa_forward(&q, &k, &v, &ao.opt, &o, weights, lse);
    cli_timing_add("kernel (forward)", t);
    if (cli_timing_enabled()) {
        t = cli_timing_now();
        if (attn_sdpa_flops(&q, &k, &v, &ao.opt, &flops) != ATTN_OK) flops = 0;
        cli_timing_add("count FLOPs (for --timing)", t);
    }
    t = cli_timing_now();
    if (st == ATTN_OK && grads) {
        attn_tensor dqt = attn_tensor_4d(dq, B, L, Hq, q.shape[3]);
        attn_tensor dkt = attn_tensor_4d(dk, B, S, k.shape[2], k.shape[3]);
        attn_tensor dvt = attn_tensor_4d(dv, B, S, v.shape[2], Dv);
        attn_sdpa_grads g = ATTN_SDPA_GRADS_INIT;
        g.dq = dq ? &dqt : NULL;
        g.dk = dk ? &dkt : NULL;
        g.dv = dv ? &dvt : NULL;
        g.dsinks = dsinks;
        st = attn_sdpa_backward_grads(&q, &k, &v, &ao.opt, &o, lse, &dot, &g);
        cli_timing_add("kernel (backward)", t);
    }
    const double elapsed = cli_seconds() - start;
    if (st != ATTN_OK) {
        char qs[96], ks[96], vs[96];
        rc = cli_data_error("sdpa", "%s: %s\n  (-q '%s' %s, -k '%s' %s, -v '%s' %s)", attn_status_str(st),
                            attn_last_error(), path[F_Q], cli_shape_str(&qa, qs, sizeof qs), path[F_K],
                            cli_shape_str(&ka, ks, sizeof ks), path[F_V], cli_shape_str(&va, vs, sizeof vs));
        goto cleanup;
    }

    /* Outputs mirror the rank (and layout) of their inputs: o and dq of q,
     * dk of k, dv of v; weights and lse drop the leading dims q leaves out. */
    const int drop = 4 - qa.ndim;
    t = cli_timing_now();
    cli_output outputs[7] = {{path[F_O], qa.ndim, {0}, out, out_dtype},
                             {path[F_WEIGHTS], qa.ndim, {0}, weights, ATTN_F32},
                             {path[F_LSE], qa.ndim - 1, {0}, lse, ATTN_F32}, {path[F_DQ], qa.ndim, {0}, dq, ATTN_F32},
                             {path[F_DK], ka.ndim, {0}, dk, ATTN_F32},     {path[F_DV], va.ndim, {0}, dv, ATTN_F32},
                             {path[F_DSINKS], 1, {Hq}, dsinks, ATTN_F32}};
    const attn_tensor *like[6] = {&o, NULL, NULL, &q, &k, &v};
    for (int n = 0; n < 6; n++) {
        if (!like[n]) continue;
        cli_qkv_file_shape(ao.layout, outputs[n].ndim, like[n]->shape, outputs[n].shape);
        if (!cli_qkv_to_layout_of("sdpa", ao.layout, (void *)outputs[n].data, outputs[n].dtype, like[n]->shape)) {
            rc = CLI_DATA_ERROR;
            goto cleanup;
        }
    }
    const int64_t w_shape4[4] = {B, Hq, L, S};
    memcpy(outputs[1].shape, w_shape4 + drop, (size_t)qa.ndim * sizeof(int64_t));
    memcpy(outputs[2].shape, w_shape4 + drop, (size_t)(qa.ndim - 1) * sizeof(int64_t));
    if (ao.layout != CLI_LAYOUT_BLHD) cli_timing_add("change of layout (outputs)", t);
    if (!cli_save_outputs("sdpa", outputs, 7)) {
        rc = CLI_DATA_ERROR;
    } else if (!quiet) {
        char how[160];
        cli_describe_run(how, sizeof how, attn_sdpa_kernel_name(&q, &k, &v, &ao.opt), ao.opt.threads, elapsed);
        cli_print_written("sdpa", outputs, 7, how);
    }

cleanup:
    t = cli_timing_now();
    free(out);
    free(weights);
    free(lse);
    free(dq);
    free(dk);
    free(dv);
    free(dsinks);
    attn_array_free(&douta);
    attn_array_free(&qa);
    attn_array_free(&ka);
    attn_array_free(&va);
    cli_attention_options_free(&ao);
    cli_timing_add("free buffers", t);
    if (rc == CLI_OK) cli_timing_print("sdpa", grads ? NULL : "kernel (forward)", grads ? 0 : flops);
    return rc;
}
