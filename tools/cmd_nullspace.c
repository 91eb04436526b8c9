/*
 * cmd_nullspace.c — `attn nullspace`: "weights are not an explanation"
 * (chapter §8, exercise 3).  For one query's weight row, the largest L1
 * move of the row that leaves the output unchanged within a tolerance
 * (attn_nullspace_search: moves in the null space of the values, kept on
 * the simplex).
 *
 * Inputs, one of:
 *   --weights W.npy [S] or [L, S] (+ --query I) with --values V.npy [S, Dv]
 *   -q Q.npy -k K.npy -v V.npy --query I [--head H] [--batch B] [mask options]
 *   --chapter   exercise 3 (v1 = v2 = [2, 1]) and the worked example's q3
 */
#include "cli_interp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void nullspace_help(FILE *out) {
    fprintf(out,
    "usage: attn nullspace --chapter\n"
    "       attn nullspace --weights W.npy --values V.npy [--query I] [options]\n"
    "       attn nullspace -q Q.npy -k K.npy -v V.npy --query I [--head H] [--batch B] [--layout BLHD|BHLD]\n"
    "                      [mask and computation options] [options]\n\n"
    "Weights are not an explanation: how far can one query's weight row move (L1 distance) while\n"
    "its output sum_j w_j v_j stays the same within a tolerance?  The search maximises\n"
    "||w' - w||_1 over rows w' >= 0 with the same sum and |V^T (w' - w)| <= tolerance in every\n"
    "output coordinate (a move in the null space of the values, on the simplex).  Keys the query\n"
    "cannot see keep their weight 0.  Up to --exact-limit visible keys every sign pattern of the\n"
    "move is solved as a linear program (the true maximum); beyond it a local search gives a\n"
    "lower bound.  See docs/interpretability.md.\n\n"
    "inputs:\n"
    "  --weights W.npy      one row [S], or rows [L, S] with --query I (e.g. a head of attn sdpa --weights)\n"
    "  --values V.npy       the value rows [S, Dv] the query mixes\n"
    "  --zero-keys-may-gain with --weights: keys of weight 0 may gain weight (default: they are\n"
    "                       treated as hidden, as a softmax row gives 0 only to hidden keys)\n"
    "  -q/-k/-v F.npy       queries, keys, values as `attn sdpa`; the row is query --query of head\n"
    "                       --head (default 0) in batch --batch (default 0)\n"
    "  --chapter            exercise 3 (v1 = v2 = [2, 1], rows [0.2, 0.8] and [0.7, 0.3]) and the\n"
    "                       worked example's query 3\n"
    "options:\n"
    "  --tol T              allowed change of any output coordinate (default 1e-6)\n"
    "  --exact-limit N      solve every sign pattern up to N visible keys (default 12, at most 20);\n"
    "                       an enumeration of more than about a minute is refused (with the default\n"
    "                       limit the local search runs instead) unless --allow-slow is given\n"
    "  --starts N           local-search starts beyond the limit (default 32)\n"
    "  -o MOVED.npy         save the row found (float32 [S])\n\n"
    "%s%s%s",
    cli_layout_help, cli_mask_help, cli_compute_help);
}

#define PRINT_MAX 12
#define NULLSPACE_EXACT_MAX 20 /* attn_nullspace_options.exact_limit's range */

enum { F_WEIGHTS = 1, F_VALUES, F_ZERO_KEYS_MAY_GAIN, F_Q, F_K, F_V, F_CHAPTER, F_TOL, F_EXACT_LIMIT, F_STARTS, F_O,
       F_QUERY, F_HEAD, F_BATCH };

static const cli_flag nullspace_flags[] = {
    {"--weights", "W.npy", F_WEIGHTS, 0},       {"--values", "V.npy", F_VALUES, 0},
    {"--zero-keys-may-gain", NULL, F_ZERO_KEYS_MAY_GAIN, 0},
    {"-q", "Q.npy", F_Q, 0},                    {"-k", "K.npy", F_K, 0},          {"-v", "V.npy", F_V, 0},
    {"--chapter", NULL, F_CHAPTER, 0},          {"--tol", "T", F_TOL, 0},
    {"--exact-limit", "N", F_EXACT_LIMIT, 0},   {"--starts", "N", F_STARTS, 0},
    {"-o", "MOVED.npy", F_O, 0},                {"--query", "I", F_QUERY, 0},
    {"--head", "H", F_HEAD, 0},                 {"--batch", "B", F_BATCH, 0},
    CLI_FLAGS_END};

static const cli_flag *const nullspace_tables[] = {nullspace_flags, cli_layout_flags, cli_mask_flags,
                                                   cli_compute_flags, NULL};
const cli_spec cli_nullspace_spec = {"nullspace", nullspace_tables, nullspace_help, false};

typedef struct row_problem {
    const float *weights, *values; /* [S], [S, Dv] */
    int64_t keys, width;
    const uint8_t *visible;        /* or NULL */
} row_problem;

/* out = sum_j w_j v_j in double. */
static void mix(const row_problem *r, const double *w, double *out) {
    for (int64_t d = 0; d < r->width; d++) {
        out[d] = 0;
        for (int64_t j = 0; j < r->keys; j++) out[d] += w[j] * (double)r->values[j * r->width + d];
    }
}

/* Runs the search and prints the original row, the row found and the check;
 * returns CLI_OK or CLI_DATA_ERROR. */
static int search_and_print(const row_problem *r, const attn_nullspace_options *opt, const char *o_path) {
    double *w = malloc(sizeof(double) * (size_t)r->keys), *moved = malloc(sizeof(double) * (size_t)r->keys);
    double *out = malloc(sizeof(double) * (size_t)r->width), *out_moved = malloc(sizeof(double) * (size_t)r->width);
    float *moved_f = malloc(sizeof(float) * (size_t)r->keys);
    int rc = CLI_OK;
    if (!w || !moved || !out || !out_moved || !moved_f) {
        rc = cli_data_error("nullspace", "out of memory for %lld keys", (long long)r->keys);
        goto cleanup;
    }
    attn_nullspace_result res;
    attn_status st = attn_nullspace_search(r->weights, r->values, r->keys, r->width, r->visible, opt, moved, &res);
    if (st) {
        rc = cli_data_error("nullspace", "%s: %s%s", attn_status_str(st), attn_last_error(),
                            st == ATTN_ERR_BUDGET ? "\n  (here: a lower --exact-limit, or --allow-slow)" : "");
        goto cleanup;
    }
    for (int64_t j = 0; j < r->keys; j++) w[j] = r->weights[j];
    mix(r, w, out);
    mix(r, moved, out_moved);
    char rows[2][1024], outs[2][1024];
    cli_format_vector_d(rows[0], sizeof rows[0], w, r->keys, PRINT_MAX);
    cli_format_vector_d(rows[1], sizeof rows[1], moved, r->keys, PRINT_MAX);
    const int width = (int)(strlen(rows[0]) > strlen(rows[1]) ? strlen(rows[0]) : strlen(rows[1]));
    printf("  weights   %-*s  output %s\n", width, rows[0], cli_format_vector_d(outs[0], sizeof outs[0], out, r->width, PRINT_MAX));
    printf("  moved to  %-*s  output %s\n", width, rows[1],
           cli_format_vector_d(outs[1], sizeof outs[1], out_moved, r->width, PRINT_MAX));
    printf("  largest L1 move found: %.6g  (%s, %lld of %lld keys visible, %lld linear programs)\n", res.l1,
           res.exact ? "exact: every sign pattern solved" : "local search: a lower bound",
           (long long)res.visible, (long long)r->keys, (long long)res.programs);
    printf("  output check: max |change| = %.3g <= tolerance %.3g\n", res.max_output_change, opt->tolerance);
    if (o_path) {
        for (int64_t j = 0; j < r->keys; j++) moved_f[j] = (float)moved[j];
        if (!cli_save_f32("nullspace", o_path, 1, &r->keys, moved_f)) rc = CLI_DATA_ERROR;
    }
cleanup:
    free(w);
    free(moved);
    free(out);
    free(out_moved);
    free(moved_f);
    return rc;
}

/* Exercise 3, then the worked example's query 3 (its weights from a traced
 * pass of the chapter's module). */
static int run_chapter(const attn_nullspace_options *opt, const char *o_path) {
    const float v[4] = {2, 1, 2, 1}, rows[2][2] = {{0.2f, 0.8f}, {0.7f, 0.3f}};
    char a[256], b[256];
    printf("Exercise 3: two keys with the same value, v1 = v2 = [2, 1].\n");
    row_problem r = {.weights = rows[0], .values = v, .keys = 2, .width = 2};
    for (int n = 0; n < 2; n++) {
        double w[2] = {rows[n][0], rows[n][1]}, out[2];
        mix(&r, w, out);
        printf("  the chapter's row %s gives %s\n", cli_format_vector(a, sizeof a, rows[n], 2, 2),
               cli_format_vector_d(b, sizeof b, out, 2, 2));
    }
    printf("  L1 distance between them: %.6g; the map changed, the output did not.\n",
           fabs((double)rows[0][0] - rows[1][0]) + fabs((double)rows[0][1] - rows[1][1]));
    printf("Searching from [0.2, 0.8]:\n");
    int rc = search_and_print(&r, opt, o_path);
    if (rc) return rc;

    attn_chapter ch;
    attn_status st = attn_chapter_compute(&ch);
    const attn_mha m = attn_chapter_module(&ch);
    attn_trace t = {0};
    if (st == ATTN_OK) st = attn_mha_forward_traced(&m, &ch.x[0][0], 1, 3, NULL, 0, NULL, NULL, 0, &t, NULL);
    if (st) return cli_data_error("nullspace", "%s: %s", attn_status_str(st), attn_last_error());
    printf("\nThe worked example, query 3: v1 = [2, 0], v2 = [0, 1], v3 = [2, 1] = v1 + v2.\n");
    row_problem q3 = {.weights = t.pattern + 2 * 3, .values = t.v, .keys = 3, .width = 2};
    rc = search_and_print(&q3, opt, NULL);
    printf("  (V^T d = 0 with sum d = 0 forces d = 0 here: any move left is the tolerance's own slack.)\n");
    attn_trace_free(&t);
    return rc;
}

/* The row of --query in --weights [S] or [L, S], with --values [S, Dv]. */
static int run_weights(const char *w_path, const char *v_path, int64_t query, bool zero_keys_may_gain,
                       const attn_nullspace_options *opt, const char *o_path) {
    attn_array wa = {0}, va = {0};
    uint8_t *visible = NULL;
    char buf[96];
    int rc = CLI_DATA_ERROR;
    if (!cli_load_f32("nullspace", "--weights", w_path, false, &wa) ||
        !cli_load_f32("nullspace", "--values", v_path, false, &va))
        goto cleanup;
    if (wa.ndim != 1 && wa.ndim != 2) {
        cli_data_error("nullspace", "--weights '%s' has shape %s; expected [S] or [L, S]", w_path,
                       cli_shape_str(&wa, buf, sizeof buf));
        goto cleanup;
    }
    const int64_t S = wa.shape[wa.ndim - 1], L = wa.ndim == 2 ? wa.shape[0] : 1;
    if (va.ndim != 2 || va.shape[0] != S || !S || !va.shape[1]) {
        cli_data_error("nullspace", "--values '%s' has shape %s; expected [S = %lld, Dv] (one value row per key of --weights '%s')",
                       v_path, cli_shape_str(&va, buf, sizeof buf), (long long)S, w_path);
        goto cleanup;
    }
    if (query < 0 && L > 1) {
        rc = cli_usage_error("nullspace", "--weights '%s' has %lld rows: choose one with --query I", w_path, (long long)L);
        goto cleanup;
    }
    if (query >= L) {
        rc = cli_usage_error("nullspace", "--query %lld is out of range: --weights '%s' has %lld rows", (long long)query,
                             w_path, (long long)L);
        goto cleanup;
    }
    const float *row = (const float *)wa.data + (query < 0 ? 0 : query) * S;
    visible = malloc((size_t)S);
    if (!visible) {
        cli_data_error("nullspace", "out of memory");
        goto cleanup;
    }
    for (int64_t j = 0; j < S; j++) visible[j] = zero_keys_may_gain || row[j] != 0.0f;
    printf("attn nullspace: row %lld of '%s' (%lld keys), values '%s' (width %lld)\n", (long long)(query < 0 ? 0 : query),
           w_path, (long long)S, v_path, (long long)va.shape[1]);
    row_problem r = {.weights = row, .values = va.data, .keys = S, .width = va.shape[1], .visible = visible};
    rc = search_and_print(&r, opt, o_path);
cleanup:
    free(visible);
    attn_array_free(&wa);
    attn_array_free(&va);
    return rc;
}

/* The row of (batch, head, query) of attention on -q/-k/-v; the keys the
 * masks hide are the hidden keys. */
static int run_qkv(const char *const qkv_paths[3], int64_t batch, int64_t head, int64_t query,
                   cli_attention_options *ao, const attn_nullspace_options *opt, const char *o_path) {
    static const char *const flags[3] = {"-q", "-k", "-v"};
    attn_array a[3] = {{0}};
    attn_tensor t[3];
    attn_trace tr = {0};
    uint8_t *visible = NULL;
    float *values = NULL;
    int rc = CLI_OK;
    for (int n = 0; n < 3; n++)
        if ((rc = cli_load_qkv("nullspace", flags[n], qkv_paths[n], ao->layout, &a[n], &t[n]))) goto cleanup;
    cli_warn_if_transposed("nullspace", ao, &t[0], qkv_paths[0], &t[1], qkv_paths[1]);
    const int64_t B = t[0].shape[0], L = t[0].shape[1], Hq = t[0].shape[2], S = t[1].shape[1];
    const int64_t sizes[3] = {B, Hq, L}, want[3] = {batch, head, query};
    static const char *const names[3] = {"--batch", "--head", "--query"};
    for (int n = 0; n < 3; n++)
        if (want[n] >= sizes[n]) {
            rc = cli_usage_error("nullspace", "%s %lld is out of range: -q '%s' has %lld", names[n], (long long)want[n],
                                 qkv_paths[0], (long long)sizes[n]);
            goto cleanup;
        }
    if ((rc = cli_load_attention_inputs("nullspace", ao, B, Hq, L, S)) ||
        (rc = cli_check_traced_budget("nullspace", ao, B, Hq, t[1].shape[2], L, S, t[0].shape[3], t[2].shape[3], 1)))
        goto cleanup;
    attn_status st = attn_sdpa_forward_traced(&t[0], &t[1], &t[2], &ao->opt, NULL, 0, &tr, NULL);
    if (st) {
        rc = cli_data_error("nullspace", "%s: %s", attn_status_str(st), attn_last_error());
        goto cleanup;
    }
    const int64_t Dv = tr.value_dim, kv_head = head / (tr.heads / tr.kv_heads);
    const int64_t row = ((batch * Hq + head) * L + query) * S;
    visible = malloc((size_t)S);
    values = malloc(sizeof(float) * (size_t)(S * Dv));
    if (!visible || !values) {
        rc = cli_data_error("nullspace", "out of memory");
        goto cleanup;
    }
    for (int64_t j = 0; j < S; j++) {
        visible[j] = tr.scores[row + j] != -INFINITY;
        memcpy(values + j * Dv, tr.v + ((batch * S + j) * tr.kv_heads + kv_head) * Dv, sizeof(float) * (size_t)Dv);
    }
    printf("attn nullspace: batch %lld, head %lld, query %lld (%lld keys, value width %lld)\n", (long long)batch,
           (long long)head, (long long)query, (long long)S, (long long)Dv);
    row_problem r = {.weights = tr.pattern + row, .values = values, .keys = S, .width = Dv, .visible = visible};
    rc = search_and_print(&r, opt, o_path);
cleanup:
    attn_trace_free(&tr);
    free(visible);
    free(values);
    for (int n = 0; n < 3; n++) attn_array_free(&a[n]);
    return rc;
}

int cmd_nullspace(int argc, char **argv) {
    const char *w_path = NULL, *v_path = NULL, *o_path = NULL, *qkv[3] = {0};
    int64_t batch = 0, head = 0, query = -1;
    bool chapter = false, zero_keys_may_gain = false;
    attn_nullspace_options opt = {.struct_size = sizeof(attn_nullspace_options), .tolerance = 1e-6};
    cli_attention_options ao = CLI_ATTENTION_OPTIONS_INIT;

    cli_args args;
    const char *value;
    cli_args_begin(&args, &cli_nullspace_spec, argc, argv);
    for (int id; (id = cli_args_next(&args, &value)) != CLI_ARGS_END;) {
        if (id == CLI_ARGS_STOP) return args.status;
        int taken = cli_attention_take(&ao, &args, id, value);
        if (taken < 0) return CLI_USAGE_ERROR;
        if (taken) continue;
        const char *flag = args.flag;
        bool ok = true;
        switch (id) {
        case F_CHAPTER: chapter = true; break;
        case F_ZERO_KEYS_MAY_GAIN: zero_keys_may_gain = true; break;
        case F_TOL: ok = cli_parse_float("nullspace", flag, value, 0, 1e30, &opt.tolerance); break;
        case F_EXACT_LIMIT:
            ok = cli_parse_int("nullspace", flag, value, 1, NULLSPACE_EXACT_MAX, &opt.exact_limit);
            break;
        case F_STARTS: ok = cli_parse_int("nullspace", flag, value, 1, 1 << 20, &opt.starts); break;
        case F_QUERY: ok = cli_parse_int("nullspace", flag, value, 0, INT64_MAX, &query); break;
        case F_HEAD: ok = cli_parse_int("nullspace", flag, value, 0, INT64_MAX, &head); break;
        case F_BATCH: ok = cli_parse_int("nullspace", flag, value, 0, INT64_MAX, &batch); break;
        case F_WEIGHTS: w_path = value; break;
        case F_VALUES: v_path = value; break;
        case F_O: o_path = value; break;
        default: qkv[id - F_Q] = value; break; /* -q, -k, -v */
        }
        if (!ok) return CLI_USAGE_ERROR;
    }
    const bool rows = w_path || v_path, attention = qkv[0] || qkv[1] || qkv[2];
    if (chapter + rows + attention != 1)
        return cli_usage_error("nullspace", (chapter + rows + attention)
                                                ? "give one kind of input: --chapter, --weights/--values, or -q/-k/-v"
                                                : "no input: give --chapter, --weights W.npy --values V.npy, or -q/-k/-v");
    if (rows && (!w_path || !v_path))
        return cli_usage_error("nullspace", "missing %s", !w_path ? "--weights W.npy" : "--values V.npy");
    if (attention && (!qkv[0] || !qkv[1] || !qkv[2] || query < 0))
        return cli_usage_error("nullspace", "missing %s", !qkv[0] ? "-q Q.npy" : !qkv[1] ? "-k K.npy"
                                                        : !qkv[2] ? "-v V.npy" : "--query I");
    opt.allow_slow = ao.allow_slow;
    if (!attention && (cli_attention_given(&args) || ao.layout_given))
        return cli_usage_error("nullspace", "mask, layout and computation options apply to -q/-k/-v input only");

    const char *const inputs[] = {w_path, v_path, qkv[0], qkv[1], qkv[2], ao.key_lengths_path, ao.mask_path,
                                  ao.bias_path};
    const char *const outputs[] = {o_path};
    if (cli_check_paths("nullspace", inputs, 8, outputs, 1)) return CLI_USAGE_ERROR;
    int rc = chapter ? run_chapter(&opt, o_path)
           : rows    ? run_weights(w_path, v_path, query, zero_keys_may_gain, &opt, o_path)
                     : run_qkv(qkv, batch, head, query, &ao, &opt, o_path);
    cli_attention_options_free(&ao);
    return rc;
}
