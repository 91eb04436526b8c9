/*
 * cmd_report.c — `attn report`: one self-contained HTML page of attention
 * maps, from bare attention inputs (-q -k -v) or a multi-head module (-x and
 * the projections), with the path decomposition of Figure 2 when changed
 * inputs are given.
 *
 * Shapes as in `attn sdpa` (q [L, D], [L, Hq, D] or [B, L, Hq, D], ...) and
 * `attn mha` (x [L, d_model] or [B, L, d_model], W stored [d_in, d_out]).
 * The library records every intermediate (attn_sdpa_forward_traced /
 * attn_mha_forward_traced, or attn_sdpa_paths / attn_mha_paths); the page
 * shows one batch: the pattern [Hq, L, S] and which keys the scores hid.
 */
#include "cli_pictures.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char report_usage[] =
    "usage: attn report -q Q.npy -k K.npy -v V.npy [--changed-q F] [--changed-k F] [--changed-v F]\n"
    "                   [mask options] [--tokens LIST] [--key-tokens LIST] --html OUT.html\n"
    "       attn report -x X.npy [--context C.npy] --wq WQ.npy --wk WK.npy --wv WV.npy [--wo WO.npy]\n"
    "                   [--bq F] [--bk F] [--bv F] [--bo F] --heads H [--kv-heads G]\n"
    "                   [--changed-x F] [--changed-context F] [mask options] ... --html OUT.html\n\n"
    "Writes ONE self-contained HTML file (no network access, no external scripts or fonts): a heat\n"
    "map per head (hover a cell for the token pair and its exact weight), a token view with lines\n"
    "from each query to the keys it reads (hover or click a token to focus it), and, when changed\n"
    "inputs are given, the path decomposition of the chapter's Figure 2: base, K only (changed keys,\n"
    "base values), V only (base weights, changed values), both, and their interaction.\n\n"
    "bare attention inputs (as attn sdpa):\n"
    "  -q Q.npy -k K.npy -v V.npy        [L, D] / [S, D] / [S, Dv], or with heads and batch\n"
    "  --changed-q/-k/-v F.npy           the changed input's tensors (same shapes; default: the base)\n"
    "multi-head inputs (as attn mha):\n"
    "  -x X.npy [--context C.npy] --wq .. --wk .. --wv .. [--wo ..] [--bq .. --bk .. --bv .. --bo ..]\n"
    "  --heads H [--kv-heads G]\n"
    "  --changed-x F.npy [--changed-context F.npy]   the changed input\n"
    "the page:\n"
    "  --html OUT.html     the report (written atomically)\n"
    "  --tokens LIST       query labels: \"我,吃,了\" or @FILE (one per line); also the keys' when L = S\n"
    "  --key-tokens LIST   key labels (cross-attention)\n"
    "  --batch N           the batch shown (default 0)\n"
    "  --show-heads LIST   the heads shown, e.g. 0,3 or 0-3 (default all)\n"
    "  --title TEXT        the page's title\n\n"
    "%s\n"
    "examples:\n"
    "  attn report -q Q.npy -k K.npy -v V.npy --causal --tokens \"我,吃,了\" --html report.html\n"
    "  attn report -q Q.npy -k K.npy -v V.npy --changed-k K2.npy --changed-v V2.npy --html paths.html\n";

enum {
    IN_Q, IN_K, IN_V, IN_CQ, IN_CK, IN_CV,                     /* bare attention */
    IN_X, IN_CONTEXT, IN_WQ, IN_WK, IN_WV, IN_WO, IN_BQ, IN_BK, IN_BV, IN_BO, IN_CX, IN_CCONTEXT,
    IN_COUNT
};
static const char *const input_flags[IN_COUNT] = {
    "-q", "-k", "-v", "--changed-q", "--changed-k", "--changed-v",
    "-x", "--context", "--wq", "--wk", "--wv", "--wo", "--bq", "--bk", "--bv", "--bo",
    "--changed-x", "--changed-context"};

typedef struct {
    const char *paths[IN_COUNT];
    attn_array in[IN_COUNT];
    int64_t heads, kv_heads;
} report_inputs;

/* Views an array of rank 2..4 as [B, positions, heads, width] (as attn sdpa). */
static int as_tensor(const report_inputs *r, int n, attn_tensor *t) {
    const attn_array *a = &r->in[n];
    char buf[128];
    if (a->ndim < 2 || a->ndim > 4 || a->count == 0)
        return cli_data_error("report", "%s '%s' has shape %s; expected [L, D], [L, H, D] or [B, L, H, D]",
                              input_flags[n], r->paths[n], cli_shape_str(a, buf, sizeof buf));
    int64_t s[4] = {1, 1, 1, 1};
    if (a->ndim == 2) { s[1] = a->shape[0]; s[3] = a->shape[1]; }
    else for (int d = 0; d < a->ndim; d++) s[4 - a->ndim + d] = a->shape[d];
    *t = attn_tensor_4d(a->data, s[0], s[1], s[2], s[3]);
    return CLI_OK;
}

/* Splits a sequence [L, d] or [B, L, d] into (batch, len, width). */
static int sequence_dims(const report_inputs *r, int n, int64_t dims[3]) {
    const attn_array *a = &r->in[n];
    char buf[128];
    if ((a->ndim != 2 && a->ndim != 3) || a->count == 0)
        return cli_data_error("report", "%s '%s' has shape %s; expected [L, d] or [B, L, d]", input_flags[n],
                              r->paths[n], cli_shape_str(a, buf, sizeof buf));
    dims[0] = a->ndim == 3 ? a->shape[0] : 1;
    dims[1] = a->shape[a->ndim - 2];
    dims[2] = a->shape[a->ndim - 1];
    return CLI_OK;
}

static int check_shape(const report_inputs *r, int n, int ndim, const int64_t *shape, const char *what) {
    const attn_array *a = &r->in[n];
    bool ok = a->ndim == ndim;
    for (int d = 0; ok && d < ndim; d++) ok = a->shape[d] == shape[d];
    if (ok) return CLI_OK;
    char have[128], want[128];
    attn_array expected = {.ndim = ndim};
    memcpy(expected.shape, shape, (size_t)ndim * sizeof(int64_t));
    return cli_data_error("report", "%s '%s' has shape %s; expected %s (%s)", input_flags[n], r->paths[n],
                          cli_shape_str(a, have, sizeof have), cli_shape_str(&expected, want, sizeof want), what);
}

/* Bare attention: the traced pass, or the four paths when a changed tensor is given. */
static int run_sdpa(report_inputs *r, cli_attention_options *ao, attn_trace *trace, attn_paths *paths,
                    bool *have_paths) {
    attn_tensor t[6];
    int rc;
    for (int n = IN_Q; n <= IN_CV; n++)
        if (r->paths[n] && (rc = as_tensor(r, n, &t[n]))) return rc;
    const int64_t B = t[IN_Q].shape[0], L = t[IN_Q].shape[1], Hq = t[IN_Q].shape[2];
    const int64_t S = t[IN_K].shape[1];
    for (int n = IN_CQ; n <= IN_CV; n++)
        if (r->paths[n] && (rc = check_shape(r, n, r->in[n - 3].ndim, r->in[n - 3].shape,
                                             "the shape of the base tensor")))
            return rc;
    if ((rc = cli_load_attention_inputs("report", ao, B, Hq, L, S))) return rc;
    *have_paths = r->paths[IN_CQ] || r->paths[IN_CK] || r->paths[IN_CV];
    attn_status st = *have_paths
        ? attn_sdpa_paths(&t[IN_Q], &t[IN_K], &t[IN_V], r->paths[IN_CQ] ? &t[IN_CQ] : NULL,
                          r->paths[IN_CK] ? &t[IN_CK] : NULL, r->paths[IN_CV] ? &t[IN_CV] : NULL, &ao->opt, paths)
        : attn_sdpa_forward_traced(&t[IN_Q], &t[IN_K], &t[IN_V], &ao->opt, NULL, 0, trace, NULL);
    if (st != ATTN_OK) {
        char qs[96], ks[96], vs[96];
        return cli_data_error("report", "%s: %s\n  (-q %s, -k %s, -v %s)", attn_status_str(st), attn_last_error(),
                              cli_shape_str(&r->in[IN_Q], qs, sizeof qs), cli_shape_str(&r->in[IN_K], ks, sizeof ks),
                              cli_shape_str(&r->in[IN_V], vs, sizeof vs));
    }
    return CLI_OK;
}

/* Multi-head attention: checks every matrix against the widths, then runs. */
static int run_mha(report_inputs *r, cli_attention_options *ao, attn_trace *trace, attn_paths *paths,
                   bool *have_paths) {
    int64_t xd[3] = {0}, cd[3] = {0};
    int rc;
    if ((rc = sequence_dims(r, IN_X, xd))) return rc;
    if (r->paths[IN_CONTEXT]) {
        if ((rc = sequence_dims(r, IN_CONTEXT, cd))) return rc;
        if (cd[0] != xd[0])
            return cli_data_error("report", "--context has batch %lld but -x has batch %lld", (long long)cd[0],
                                  (long long)xd[0]);
    } else {
        memcpy(cd, xd, sizeof cd);
    }
    if (r->paths[IN_CCONTEXT] && !r->paths[IN_CONTEXT])
        return cli_usage_error("report", "--changed-context needs --context (for self-attention use --changed-x)");
    const int64_t H = r->heads, G = r->kv_heads ? r->kv_heads : r->heads;
    if (H % G) return cli_usage_error("report", "--heads %lld is not a multiple of --kv-heads %lld", (long long)H, (long long)G);
    const attn_array *wq = &r->in[IN_WQ], *wk = &r->in[IN_WK], *wv = &r->in[IN_WV];
    if (wq->ndim != 2 || wk->ndim != 2 || wv->ndim != 2 || wq->shape[1] % H || wk->shape[1] % G ||
        wv->shape[1] % G || wq->shape[1] == 0 || wv->shape[1] == 0)
        return cli_data_error("report", "--wq, --wk, --wv must be matrices [d_in, heads * width] whose columns split "
                              "into %lld query heads and %lld key/value heads", (long long)H, (long long)G);
    attn_mha m = {.struct_size = sizeof(attn_mha), .d_model = xd[2], .d_context = cd[2], .heads = H, .kv_heads = G,
                  .head_dim = wq->shape[1] / H, .value_dim = wv->shape[1] / G};
    m.d_out = H * m.value_dim;
    const int64_t sq[2] = {m.d_model, H * m.head_dim}, sk[2] = {m.d_context, G * m.head_dim},
                  sv[2] = {m.d_context, G * m.value_dim};
    if ((rc = check_shape(r, IN_WQ, 2, sq, "[width of X, heads * D]")) ||
        (rc = check_shape(r, IN_WK, 2, sk, "[context width, kv heads * D]")) ||
        (rc = check_shape(r, IN_WV, 2, sv, "[context width, kv heads * Dv]")))
        return rc;
    if (r->paths[IN_WO]) {
        if (r->in[IN_WO].ndim != 2 || r->in[IN_WO].shape[0] != m.d_out)
            return cli_data_error("report", "--wo must be [heads * Dv = %lld, d_out]", (long long)m.d_out);
        m.d_out = r->in[IN_WO].shape[1];
    }
    const int64_t nq = H * m.head_dim, nk = G * m.head_dim, nv = G * m.value_dim;
    if ((r->paths[IN_BQ] && (rc = check_shape(r, IN_BQ, 1, &nq, "heads * D"))) ||
        (r->paths[IN_BK] && (rc = check_shape(r, IN_BK, 1, &nk, "kv heads * D"))) ||
        (r->paths[IN_BV] && (rc = check_shape(r, IN_BV, 1, &nv, "kv heads * Dv"))) ||
        (r->paths[IN_BO] && (rc = check_shape(r, IN_BO, 1, &m.d_out, "d_out"))) ||
        (r->paths[IN_CX] && (rc = check_shape(r, IN_CX, r->in[IN_X].ndim, r->in[IN_X].shape, "the shape of -x"))) ||
        (r->paths[IN_CCONTEXT] && (rc = check_shape(r, IN_CCONTEXT, r->in[IN_CONTEXT].ndim,
                                                    r->in[IN_CONTEXT].shape, "the shape of --context"))))
        return rc;
    m.wq = wq->data; m.wk = wk->data; m.wv = wv->data; m.wo = r->in[IN_WO].data;
    m.bq = r->in[IN_BQ].data; m.bk = r->in[IN_BK].data; m.bv = r->in[IN_BV].data; m.bo = r->in[IN_BO].data;
    const int64_t B = xd[0], L = xd[1], S = cd[1];
    if ((rc = cli_load_attention_inputs("report", ao, B, H, L, S))) return rc;
    const float *x = r->in[IN_X].data, *ctx = r->in[IN_CONTEXT].data;
    *have_paths = r->paths[IN_CX] || r->paths[IN_CCONTEXT];
    attn_status st = *have_paths
        ? attn_mha_paths(&m, x, r->paths[IN_CX] ? r->in[IN_CX].data : x, B, L, ctx, r->in[IN_CCONTEXT].data, S,
                         &ao->opt, paths)
        : attn_mha_forward_traced(&m, x, B, L, ctx, S, &ao->opt, NULL, 0, trace, NULL);
    if (st != ATTN_OK) return cli_data_error("report", "%s: %s", attn_status_str(st), attn_last_error());
    return CLI_OK;
}

/* "attn report -q Q.npy ..." for the page's subtitle. */
static char *command_line(int argc, char **argv) {
    size_t len = strlen("attn") + 1;
    for (int i = 0; i < argc; i++) len += strlen(argv[i]) + 3;
    char *text = malloc(len);
    if (!text) return NULL;
    strcpy(text, "attn");
    for (int i = 0; i < argc; i++) {
        bool quote = strchr(argv[i], ' ') != NULL || !*argv[i];
        strcat(text, quote ? " \"" : " ");
        strcat(text, argv[i]);
        if (quote) strcat(text, "\"");
    }
    return text;
}

int cmd_report(int argc, char **argv) {
    report_inputs r = {0};
    const char *html_path = NULL, *tokens_text = NULL, *key_tokens_text = NULL, *show_text = NULL, *title = NULL;
    int64_t batch = 0;
    cli_attention_options ao = CLI_ATTENTION_OPTIONS_INIT;
    cli_tokens tokens = {0}, key_tokens = {0};
    cli_index_list show = {0};
    attn_trace trace = {0};
    attn_paths paths = {0};
    float *weights = NULL;
    uint8_t *visible = NULL;
    char *subtitle = NULL;
    bool have_paths = false;
    int rc = CLI_OK;

    for (int i = 1; i < argc;) {
        const char *flag = argv[i], *value = i + 1 < argc ? argv[i + 1] : NULL;
        if (cli_is_help(flag)) {
            printf(report_usage, cli_attention_options_help);
            return CLI_OK;
        }
        int taken = cli_parse_attention_option("report", argc, argv, &i, &ao);
        if (taken < 0) return CLI_USAGE_ERROR;
        if (taken) continue;
        const char **target = strcmp(flag, "--html") == 0 ? &html_path
                            : strcmp(flag, "--tokens") == 0 ? &tokens_text
                            : strcmp(flag, "--key-tokens") == 0 ? &key_tokens_text
                            : strcmp(flag, "--show-heads") == 0 ? &show_text
                            : strcmp(flag, "--title") == 0 ? &title : NULL;
        for (int n = 0; n < IN_COUNT && !target; n++)
            if (strcmp(flag, input_flags[n]) == 0) target = &r.paths[n];
        bool number = strcmp(flag, "--heads") == 0 || strcmp(flag, "--kv-heads") == 0 || strcmp(flag, "--batch") == 0;
        if (!target && !number) return cli_usage_error("report", "unknown option '%s'", flag);
        if (!value) return cli_usage_error("report", "%s needs a value", flag);
        if (target) *target = value;
        else if (!cli_parse_int("report", flag, value, flag[2] == 'b' ? 0 : 1, flag[2] == 'b' ? INT64_MAX : 1 << 20,
                                flag[2] == 'b' ? &batch : flag[2] == 'h' ? &r.heads : &r.kv_heads))
            return CLI_USAGE_ERROR;
        i += 2;
    }
    const bool sdpa = r.paths[IN_Q] || r.paths[IN_K] || r.paths[IN_V];
    const bool mha = r.paths[IN_X] != NULL;
    if (!html_path) return cli_usage_error("report", "missing --html OUT.html");
    {
        const char *inputs[IN_COUNT + 3];
        for (int n = 0; n < IN_COUNT; n++) inputs[n] = r.paths[n];
        inputs[IN_COUNT] = ao.key_lengths_path, inputs[IN_COUNT + 1] = ao.mask_path, inputs[IN_COUNT + 2] = ao.bias_path;
        const char *const outputs[] = {html_path};
        if (cli_check_paths("report", inputs, IN_COUNT + 3, outputs, 1)) return CLI_USAGE_ERROR;
    }
    if (sdpa == mha)
        return cli_usage_error("report", sdpa ? "give either -q/-k/-v (bare attention) or -x (multi-head), not both"
                                              : "missing the inputs: -q Q.npy -k K.npy -v V.npy, or -x X.npy and the projections");
    for (int n = 0; n < IN_COUNT; n++) {
        bool belongs = n <= IN_CV ? sdpa : mha;
        if (r.paths[n] && !belongs)
            return cli_usage_error("report", "%s belongs to the %s inputs", input_flags[n], sdpa ? "multi-head" : "bare attention");
    }
    if (sdpa && (!r.paths[IN_Q] || !r.paths[IN_K] || !r.paths[IN_V]))
        return cli_usage_error("report", "missing %s", !r.paths[IN_Q] ? "-q Q.npy" : !r.paths[IN_K] ? "-k K.npy" : "-v V.npy");
    if (mha && (!r.paths[IN_WQ] || !r.paths[IN_WK] || !r.paths[IN_WV] || !r.heads))
        return cli_usage_error("report", "missing %s", !r.paths[IN_WQ] ? "--wq WQ.npy" : !r.paths[IN_WK] ? "--wk WK.npy"
                                                     : !r.paths[IN_WV] ? "--wv WV.npy" : "--heads H");
    if (sdpa && (r.heads || r.kv_heads))
        return cli_usage_error("report", "--heads and --kv-heads belong to the multi-head inputs; with -q/-k/-v the "
                               "heads come from the arrays (use --show-heads to choose the heads shown)");
    if (show_text && !cli_index_list_parse("report", "--show-heads", show_text, &show)) return CLI_USAGE_ERROR;
    if ((tokens_text && (rc = cli_tokens_parse("report", "--tokens", tokens_text, &tokens))) ||
        (key_tokens_text && (rc = cli_tokens_parse("report", "--key-tokens", key_tokens_text, &key_tokens))))
        goto cleanup;

    for (int n = 0; n < IN_COUNT; n++)
        if (r.paths[n] && !cli_load_f32("report", input_flags[n], r.paths[n], false, &r.in[n])) {
            rc = CLI_DATA_ERROR;
            goto cleanup;
        }
    if ((rc = sdpa ? run_sdpa(&r, &ao, &trace, &paths, &have_paths) : run_mha(&r, &ao, &trace, &paths, &have_paths)))
        goto cleanup;
    const attn_trace *t = have_paths ? &paths.run[ATTN_PATH_BASE] : &trace;
    const int64_t B = t->batch, Hq = t->heads, L = t->len, S = t->context_len;
    if (batch >= B) {
        rc = cli_data_error("report", "--batch %lld is out of range: the inputs have %lld batch%s", (long long)batch,
                            (long long)B, B == 1 ? "" : "es");
        goto cleanup;
    }
    for (int64_t n = 0; n < show.count; n++)
        if (show.items[n] >= Hq) {
            rc = cli_data_error("report", "--show-heads: head %lld is out of range: the inputs have %lld head%s",
                                (long long)show.items[n], (long long)Hq, Hq == 1 ? "" : "s");
            goto cleanup;
        }
    if ((rc = cli_tokens_check("report", "--tokens", &tokens, L, "query positions")) ||
        (rc = cli_tokens_check("report", "--key-tokens", &key_tokens, S, "key positions")))
        goto cleanup;
    if (!key_tokens.items && tokens.items && S != L) {
        rc = cli_data_error("report", "--tokens labels the %lld queries; the %lld keys differ in number, so give "
                            "--key-tokens for them too", (long long)L, (long long)S);
        goto cleanup;
    }

    /* The shown heads of the shown batch: weights and visibility [n, L, S]. */
    const int64_t n_heads = show.count ? show.count : Hq, map = L * S;
    weights = malloc((size_t)(n_heads * map) * sizeof(float));
    visible = malloc((size_t)(n_heads * map));
    subtitle = command_line(argc, argv);
    if (!weights || !visible || !subtitle) {
        rc = cli_data_error("report", "out of memory");
        goto cleanup;
    }
    for (int64_t n = 0; n < n_heads; n++) {
        int64_t h = show.count ? show.items[n] : n;
        const float *pattern = t->pattern + (batch * Hq + h) * map, *scores = t->scores + (batch * Hq + h) * map;
        memcpy(weights + n * map, pattern, (size_t)map * sizeof(float));
        for (int64_t c = 0; c < map; c++) visible[n * map + c] = !(isinf(scores[c]) && scores[c] < 0);
    }
    attn_report report = {.title = title, .subtitle = subtitle, .heads = n_heads, .len_q = L, .len_kv = S,
                          .weights = weights, .visible = visible, .head_ids = show.count ? show.items : NULL,
                          .query_labels = (const char *const *)tokens.items,
                          .key_labels = (const char *const *)key_tokens.items,
                          .paths = have_paths ? &paths : NULL, .paths_batch = batch};
    if (attn_report_write_html(html_path, &report) != ATTN_OK) rc = cli_data_error("report", "%s", attn_last_error());

cleanup:
    free(weights);
    free(visible);
    free(subtitle);
    attn_trace_free(&trace);
    attn_paths_free(&paths);
    for (int n = 0; n < IN_COUNT; n++) attn_array_free(&r.in[n]);
    cli_tokens_free(&tokens);
    cli_tokens_free(&key_tokens);
    cli_index_list_free(&show);
    cli_attention_options_free(&ao);
    return rc;
}
