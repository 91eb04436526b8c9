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
 * Or maps that are not computed here (cli_maps.h): a model's run over a
 * text (--model --text, every layer [Hq, L, L]) or a weights file
 * (--weights, with a layer axis or without), with a layer selector; a
 * model's run against a changed text (--source-text) adds every shown
 * layer's path table, as `attn model trace --paths` decomposes it.  A
 * model's run also takes panels at one position (cli_report_panels.h):
 * attention flow beside rollout, the logit lens, direct logit attribution
 * and attribution patching against --source-text.
 */
#include "cli_interp.h"
#include "cli_maps.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { IN_Q, IN_K, IN_V, IN_CQ, IN_CK, IN_CV, /* bare attention */
       IN_X, IN_CONTEXT, IN_CX, IN_CCONTEXT,   /* a module, with cli_module's weights */
       IN_COUNT };
static const char *const input_flags[IN_COUNT] = {"-q", "-k", "-v", "--changed-q", "--changed-k", "--changed-v",
                                                  "-x", "--context", "--changed-x", "--changed-context"};

/* Flag ids: an input's is F_INPUT + IN_*. */
enum { F_INPUT = 1, F_HTML = F_INPUT + IN_COUNT, F_TOKENS, F_KEY_TOKENS, F_SHOW_HEADS, F_TITLE, F_BATCH,
       F_WEIGHTS, F_MODEL, F_TEXT, F_LAYER, F_COMPARE, F_SOURCE, F_POSITION, F_CONTROL, F_MAPS,
       F_FLOW, F_LOGIT_LENS, F_LOGIT_ATTRIBUTION, F_ANSWER, F_WRONG, F_ATTRIBUTE };

static const cli_flag report_flags[] = {
    {"-q", "Q.npy", F_INPUT + IN_Q, 0},                  {"-k", "K.npy", F_INPUT + IN_K, 0},
    {"-v", "V.npy", F_INPUT + IN_V, 0},                  {"--changed-q", "Q2.npy", F_INPUT + IN_CQ, 0},
    {"--changed-k", "K2.npy", F_INPUT + IN_CK, 0},       {"--changed-v", "V2.npy", F_INPUT + IN_CV, 0},
    {"-x", "X.npy", F_INPUT + IN_X, 0},                  {"--context", "C.npy", F_INPUT + IN_CONTEXT, 0},
    {"--changed-x", "X2.npy", F_INPUT + IN_CX, 0},
    {"--changed-context", "C2.npy", F_INPUT + IN_CCONTEXT, 0},
    {"--html", "OUT.html", F_HTML, 0},                   {"--tokens", "LIST|@FILE", F_TOKENS, 0},
    {"--key-tokens", "LIST|@FILE", F_KEY_TOKENS, 0},     {"--show-heads", "LIST", F_SHOW_HEADS, 0},
    {"--title", "TEXT", F_TITLE, 0},                     {"--batch", "N", F_BATCH, 0},
    {"--head", "LIST|all", F_SHOW_HEADS, 0},             {"--layer", "LIST|all", F_LAYER, 0},
    {"--weights", "W.npy", F_WEIGHTS, 0},                {"--model", "MODEL", F_MODEL, 0},
    {"--text", "TEXT|@FILE", F_TEXT, 0},                 {"--compare-text", "TEXT|@FILE", F_COMPARE, 0},
    {"--control-text", "TEXT|@FILE", F_CONTROL, 0},
    {"--source-text", "TEXT|@FILE", F_SOURCE, 0},        {"--position", "P", F_POSITION, 0},
    {"--maps", "weights|value-norms|rollout", F_MAPS, 0},
    {"--flow", NULL, F_FLOW, 0},                         {"--logit-lens", NULL, F_LOGIT_LENS, 0},
    {"--logit-attribution", NULL, F_LOGIT_ATTRIBUTION, 0},
    {"--answer", "TOKEN", F_ANSWER, 0},                  {"--wrong", "TOKEN", F_WRONG, 0},
    {"--attribute", "HOOK[@POS,..]", F_ATTRIBUTE, 0},
    CLI_FLAGS_END};

static void report_help(FILE *out) {
    fprintf(out,
    "usage: attn report -q Q.npy -k K.npy -v V.npy [--changed-q F] [--changed-k F] [--changed-v F]\n"
    "                   [--position P] [--layout BLHD|BHLD] [mask options] [--tokens LIST] [--key-tokens LIST]\n"
    "                   --html OUT.html\n"
    "       attn report -x X.npy [--context C.npy] --wq WQ.npy --wk WK.npy --wv WV.npy [--wo WO.npy]\n"
    "                   [--bq F] [--bk F] [--bv F] [--bo F] --heads H [--kv-heads G] [--weight-layout rows|torch]\n"
    "                   [--changed-x F] [--changed-context F] [mask options] ... --html OUT.html\n"
    "       attn report --model MODEL --text TEXT|@FILE [--compare-text TEXT|@FILE [--control-text TEXT|@FILE]]\n"
    "                   [--source-text TEXT|@FILE] [--layer LIST|all] [--head LIST|all]\n"
    "                   [--flow] [--logit-lens] [--logit-attribution] [--answer TOKEN [--wrong TOKEN]]\n"
    "                   [--attribute HOOK[@POS,..] (with --source-text and --answer)]\n"
    "                   [--position P] --html OUT.html\n"
    "       attn report --weights W.npy [--layer LIST|all] [--head LIST|all] [--tokens LIST] [mask options]\n"
    "                   --html OUT.html\n\n"
    "Writes ONE self-contained HTML file (no network access, no external scripts or fonts): a heat\n"
    "map per head (hover a cell for the token pair and its exact weight), a token view with lines\n"
    "from each query to the keys it reads (hover or click a token to focus it), and, when changed\n"
    "inputs are given, the path decomposition of the chapter's Figure 2: base, K only (changed keys,\n"
    "base values), V only (base weights, changed values), both, and their interaction, with the heads\n"
    "ranked by how far each path moved their output at one position.\n\n"
    "bare attention inputs (as attn sdpa):\n"
    "  -q Q.npy -k K.npy -v V.npy        [L, D] / [S, D] / [S, Dv], or with heads and batch\n"
    "  --changed-q/-k/-v F.npy           the changed input's tensors (same shapes; default: the base)\n"
    "multi-head inputs (as attn mha):\n"
    "  -x X.npy [--context C.npy]        [L, d_model] / [S, d_ctx], or with batch\n"
    "%s"
    "  --changed-x F.npy [--changed-context F.npy]   the changed input\n"
    "maps computed elsewhere (a layer selector on the page):\n"
    "  --model MODEL --text TEXT|@FILE   run the model (a GGUF file or a checkpoint directory) over\n"
    "                      the text: every layer's maps, the\n"
    "                      model's tokens as labels, its mask (causal, sliding windows) hatched\n"
    "  --compare-text TEXT   a second run (with --model): the page adds the cosine of the two texts'\n"
    "                      last tokens' vectors, embeddings then layer by layer (the chapter's two\n"
    "                      苹果: --text 我吃了一个苹果 --compare-text 这台电脑来自苹果), and after the\n"
    "                      final norm\n"
    "  --control-text TEXT   with --compare-text: a same-sense control of --text (--control-text\n"
    "                      我买了一个苹果); its cosine with --text is drawn dashed beside the first\n"
    "                      series, so that a gap can be told from what a change of words alone does\n"
    "  --source-text TEXT  the changed input (with --model; the name attn model trace gives it): at\n"
    "                      every shown layer, the path table of each head from that layer's own q, k, v\n"
    "                      in the two runs (same number of tokens), and the heads ranked by the weight\n"
    "                      path (K only) and the content path (V only); the layer selector switches it\n"
    "  --position P        the position the heads are ranked at (default -1, the last; negative counts\n"
    "                      from the end; the page can change it); with any path table, and where the\n"
    "                      panels below look\n"
    "  --weights W.npy     [L, S], [H, L, S], [B, H, L, S], with --layer [layers, H, L, S], or\n"
    "                      [layers, B, H, L, S] (transformers' output_attentions stacked, float32)\n"
    "  --layer LIST|all    the layers shown (default all)\n",
    cli_module_help);
    fputs("  --maps KIND         with --model, what the maps show: weights (default); value-norms, each head's\n"
          "                      value-weighted norms ||a_ij v_j W_O^h|| (Kobayashi et al. 2020), each row\n"
          "                      divided by its sum so that it reads as shares beside the weights; rollout,\n"
          "                      attention rollout up to each layer (Abnar & Zuidema 2020: heads averaged,\n"
          "                      residual 0.5), one map a layer (the numbers attn model trace prints)\n"
          "panels under the maps (with --model; each at --position P, default -1, the last token):\n"
          "  --flow              attention flow into P from each token (the max-flow through every layer's\n"
          "                      attention, heads averaged, residual 0.5: Abnar & Zuidema 2020) as a bar row,\n"
          "                      beside the rollout row of P after the last layer (what --maps rollout shows)\n"
          "  --logit-lens        the stream at P after each layer through the final norm and the unembedding:\n"
          "                      each layer's top 5 tokens and their probabilities; with --answer the answer's\n"
          "                      probability and rank a layer, with --wrong the logit difference too\n"
          "  --logit-attribution direct logit attribution at P of logit(answer) - logit(wrong) (needs --answer;\n"
          "                      without --wrong, of logit(answer)): each layer's attention and MLP bars, a\n"
          "                      layers x heads map of each head's share, the embeddings' term, and the sum\n"
          "                      beside the model's own logit difference\n"
          "  --attribute HOOK[@POS,..]  attribution patching (Nanda 2023) of --source-text (the corrupted run)\n"
          "                      into --text, metric logit(answer) - logit(wrong) at the text's last token (needs\n"
          "                      --answer): every layer's first-order estimate as a diverging map, layers x\n"
          "                      positions (@POS, else every position: texts of one length), or for a per-head\n"
          "                      point (attn.hook_q/k/v, rot_q/k, hook_z, hook_result) layers x heads at P (or\n"
          "                      @POS); the metric of both runs in its note.  HOOK as attn model trace\n"
          "                      --attribute reads it (hook_resid_pre, blocks.*.attn.hook_z, blocks.3.hook_mlp_out).\n"
          "                      Texts of different lengths compare from the end and get no path tables\n"
          "  --answer TOKEN      the token of the logit lens's answer row, of the attribution and of\n"
          "                      --attribute's metric (TOKEN: a text of one token, or #ID, as attn model trace\n"
          "                      reads it)\n"
          "  --wrong TOKEN       the other side of the logit difference (without it: logit(answer) alone)\n", out);
    fprintf(out,
    "the page:\n"
    "  --html OUT.html     the report (written atomically)\n"
    "  --tokens LIST       query labels: \"我,吃,了\" or @FILE (one per line); also the keys' when L = S\n"
    "  --key-tokens LIST   key labels (cross-attention)\n"
    "  --batch N           the batch shown (default 0)\n"
    "  --show-heads LIST   the heads shown, e.g. 0,3 or 0-3 (default all; also --head LIST|all)\n"
    "  --title TEXT        the page's title\n"
    "  --quiet             no line on stderr naming what was written\n\n"
    "%s%s%s\n"
    "examples:\n"
    "  attn report -q Q.npy -k K.npy -v V.npy --causal --tokens \"我,吃,了\" --html report.html\n"
    "  attn report -q Q.npy -k K.npy -v V.npy --changed-k K2.npy --changed-v V2.npy --html paths.html\n"
    "  attn report --model ~/.cache/attn/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf --text @text.txt \\\n"
    "              --html run.html\n"
    "  attn report --model ~/.cache/attn/models/gemma-3-270m-q4_k_m.gguf --text 我吃了一个苹果 \\\n"
    "              --compare-text 这台电脑来自苹果 --html apples.html\n"
    "  attn report --model ~/.cache/attn/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf \\\n"
    "              --text 'The cat sat on the mat' --source-text 'The dog sat on the mat' --html paths.html\n"
    "  attn report --model ~/.cache/attn/models/gemma-3-270m-q4_k_m.gguf --text 'The capital of France is' \\\n"
    "              --flow --logit-lens --logit-attribution --answer ' Paris' --wrong ' London' --html lens.html\n",
    cli_layout_help, cli_mask_help, cli_compute_help);
}

static const cli_flag *const report_tables[] = {report_flags, cli_module_flags, cli_layout_flags, cli_mask_flags,
                                                cli_compute_flags, cli_quiet_flags, NULL};
const cli_spec cli_report_spec = {"report", report_tables, report_help, false};

typedef struct {
    const char *paths[IN_COUNT];
    attn_array in[IN_COUNT];
    cli_module mod;
} report_inputs;

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
        if (r->paths[n] && (rc = cli_load_qkv("report", input_flags[n], r->paths[n], ao->layout, &r->in[n], &t[n])))
            return rc;
    cli_warn_if_transposed("report", ao, &t[IN_Q], r->paths[IN_Q], &t[IN_K], r->paths[IN_K]);
    const int64_t B = t[IN_Q].shape[0], L = t[IN_Q].shape[1], Hq = t[IN_Q].shape[2];
    const int64_t S = t[IN_K].shape[1];
    for (int n = IN_CQ; n <= IN_CV; n++)
        if (r->paths[n] && (rc = check_shape(r, n, r->in[n - 3].ndim, r->in[n - 3].shape,
                                             "the shape of the base tensor")))
            return rc;
    if ((rc = cli_load_attention_inputs("report", ao, B, Hq, L, S))) return rc;
    *have_paths = r->paths[IN_CQ] || r->paths[IN_CK] || r->paths[IN_CV];
    if ((rc = cli_check_traced_budget("report", ao, B, Hq, t[IN_K].shape[2], L, S, t[IN_Q].shape[3], t[IN_V].shape[3],
                                      *have_paths ? ATTN_PATH_CASES : 1)))
        return rc;
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

/* Multi-head attention: the weights checked against the widths, then the run. */
static int run_mha(report_inputs *r, cli_attention_options *ao, attn_trace *trace, attn_paths *paths,
                   bool *have_paths) {
    int64_t xd[3] = {0}, cd[3] = {0}, unused[3];
    int rc;
    if (r->paths[IN_CCONTEXT] && !r->paths[IN_CONTEXT])
        return cli_usage_error("report", "--changed-context needs --context (for self-attention use --changed-x)");
    if ((rc = cli_load_sequence("report", "-x", r->paths[IN_X], &r->in[IN_X], xd))) return rc;
    if (r->paths[IN_CONTEXT]) {
        if ((rc = cli_load_sequence("report", "--context", r->paths[IN_CONTEXT], &r->in[IN_CONTEXT], cd))) return rc;
        if (cd[0] != xd[0])
            return cli_data_error("report", "--context has batch %lld but -x has batch %lld", (long long)cd[0],
                                  (long long)xd[0]);
    } else {
        memcpy(cd, xd, sizeof cd);
    }
    if ((r->paths[IN_CX] && (rc = cli_load_sequence("report", "--changed-x", r->paths[IN_CX], &r->in[IN_CX], unused))) ||
        (r->paths[IN_CCONTEXT] &&
         (rc = cli_load_sequence("report", "--changed-context", r->paths[IN_CCONTEXT], &r->in[IN_CCONTEXT], unused))) ||
        (r->paths[IN_CX] && (rc = check_shape(r, IN_CX, r->in[IN_X].ndim, r->in[IN_X].shape, "the shape of -x"))) ||
        (r->paths[IN_CCONTEXT] && (rc = check_shape(r, IN_CCONTEXT, r->in[IN_CONTEXT].ndim,
                                                    r->in[IN_CONTEXT].shape, "the shape of --context"))))
        return rc;
    if ((rc = cli_module_load("report", &r->mod, xd[2], cd[2]))) return rc;
    const attn_mha *m = &r->mod.m;
    const int64_t B = xd[0], L = xd[1], S = cd[1];
    if ((rc = cli_load_attention_inputs("report", ao, B, m->heads, L, S))) return rc;
    const float *x = r->in[IN_X].data, *ctx = r->in[IN_CONTEXT].data;
    *have_paths = r->paths[IN_CX] || r->paths[IN_CCONTEXT];
    if ((rc = cli_check_traced_budget("report", ao, B, m->heads, m->kv_heads, L, S, m->head_dim, m->value_dim,
                                      *have_paths ? ATTN_PATH_CASES : 1)))
        return rc;
    attn_status st = *have_paths
        ? attn_mha_paths(m, x, r->paths[IN_CX] ? r->in[IN_CX].data : x, B, L, ctx, r->in[IN_CCONTEXT].data, S,
                         &ao->opt, paths)
        : attn_mha_forward_traced(m, x, B, L, ctx, S, &ao->opt, NULL, 0, trace, NULL);
    if (st != ATTN_OK) return cli_data_error("report", "%s: %s", attn_status_str(st), attn_last_error());
    return CLI_OK;
}

/* The first panel flag given, for messages. */
static const char *panel_flag(const cli_panel_request *q) {
    return q->flow ? "--flow" : q->logit_lens ? "--logit-lens" : q->logit_attribution ? "--logit-attribution"
         : q->attribute ? "--attribute" : q->answer ? "--answer" : "--wrong";
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

/* The page for maps made elsewhere: a model's run or a weights file. */
static int report_maps(const cli_map_source *src, cli_attention_options *ao, const char *html_path,
                       const cli_tokens *tokens, const cli_tokens *key_tokens, const char *title,
                       const char *subtitle, int64_t position, bool quiet) {
    cli_maps maps;
    int rc = cli_maps_load("report", src, ao, &maps);
    if (rc) return rc;
    const int64_t L = maps.len_q, S = maps.len_kv;
    if ((rc = cli_tokens_check("report", "--tokens", tokens, L, "query positions")) ||
        (rc = cli_tokens_check("report", "--key-tokens", key_tokens, S, "key positions")))
        goto done;
    if (!key_tokens->items && tokens->items && S != L) {
        rc = cli_data_error("report", "--tokens labels the %lld queries; the %lld keys differ in number, so give "
                            "--key-tokens for them too", (long long)L, (long long)S);
        goto done;
    }
    if (position < -L || position >= L) {
        rc = cli_data_error("report", "--position %lld is outside the text's %lld tokens (0 to %lld, or -1 to -%lld "
                            "from the end)", (long long)position, (long long)L, (long long)L - 1, (long long)L);
        goto done;
    }
    attn_report report = ATTN_REPORT_INIT;
    report.title = title ? title : maps.about;
    report.subtitle = subtitle;
    report.heads = maps.n_heads;
    report.len_q = L;
    report.len_kv = S;
    report.weights = maps.weights;
    report.visible = maps.visible;
    report.head_ids = maps.head_ids;
    report.query_labels = maps.labels ? (const char *const *)maps.labels : (const char *const *)tokens->items;
    report.key_labels = (const char *const *)key_tokens->items;
    report.layers = maps.n_layers;
    report.layer_ids = maps.layer_ids;
    report.line = maps.cosine;
    report.line_len = maps.n_cosine;
    report.line_labels = (const char *const *)maps.cosine_labels;
    report.line_title = maps.cosine_title;
    report.line2 = maps.cosine2;
    report.line_name = maps.cosine2 ? "--text and --compare-text" : NULL;
    report.line2_name = maps.cosine2 ? "--text and --control-text (same sense)" : NULL;
    report.layer_paths = maps.paths;
    report.paths_position = position;
    report.panels = maps.panels.items;
    report.n_panels = maps.panels.count;
    if (attn_report_write_html(html_path, &report) != ATTN_OK)
        rc = cli_data_error("report", "%s", attn_last_error());
    else if (!quiet)
        fprintf(stderr, "attn report: wrote %s (%lld layer%s x %lld head%s of %lld x %lld%s)\n", html_path,
                (long long)maps.n_layers, maps.n_layers == 1 ? "" : "s", (long long)maps.n_heads,
                maps.n_heads == 1 ? "" : "s", (long long)L, (long long)S,
                maps.paths ? ", with each layer's path decomposition against --source-text" : "");
    if (!quiet && maps.panels.count)
        fprintf(stderr, "attn report: %lld panel%s at position %lld\n", (long long)maps.panels.count,
                maps.panels.count == 1 ? "" : "s", (long long)(position < 0 ? L + position : position));
done:
    cli_maps_free(&maps);
    return rc;
}

int cmd_report(int argc, char **argv) {
    report_inputs r = {0};
    const char *html_path = NULL, *tokens_text = NULL, *key_tokens_text = NULL, *show_text = NULL, *title = NULL;
    int64_t batch = 0, position = -1;
    cli_attention_options ao = CLI_ATTENTION_OPTIONS_INIT;
    cli_tokens tokens = {0}, key_tokens = {0};
    cli_index_list show = {0};
    attn_trace trace = {0};
    attn_paths paths = {0};
    float *weights = NULL;
    uint8_t *visible = NULL;
    char *subtitle = NULL;
    bool have_paths = false;
    cli_map_source src = {0};
    int rc = CLI_OK;

    cli_args args;
    const char *value;
    cli_args_begin(&args, &cli_report_spec, argc, argv);
    for (int id; (id = cli_args_next(&args, &value)) != CLI_ARGS_END;) {
        if (id == CLI_ARGS_STOP) return args.status;
        int taken = cli_attention_take(&ao, &args, id, value);
        if (!taken) taken = cli_module_take(&r.mod, &args, id, value);
        if (taken < 0) return CLI_USAGE_ERROR;
        if (taken) continue;
        if (id >= F_INPUT && id < F_INPUT + IN_COUNT) r.paths[id - F_INPUT] = value;
        else if (id == F_HTML) html_path = value;
        else if (id == F_TOKENS) tokens_text = value;
        else if (id == F_KEY_TOKENS) key_tokens_text = value;
        else if (id == F_SHOW_HEADS) show_text = value;
        else if (id == F_TITLE) title = value;
        else if (id == F_WEIGHTS) src.weights_path = value;
        else if (id == F_MODEL) src.model_path = value;
        else if (id == F_TEXT) src.text = value;
        else if (id == F_LAYER) src.layer_text = value;
        else if (id == F_COMPARE) src.compare_text = value;
        else if (id == F_CONTROL) src.control_text = value;
        else if (id == F_SOURCE) src.source_text = value;
        else if (id == F_MAPS) src.maps_kind = value;
        else if (id == F_FLOW) src.panels.flow = true;
        else if (id == F_LOGIT_LENS) src.panels.logit_lens = true;
        else if (id == F_LOGIT_ATTRIBUTION) src.panels.logit_attribution = true;
        else if (id == F_ANSWER) src.panels.answer = value;
        else if (id == F_WRONG) src.panels.wrong = value;
        else if (id == F_ATTRIBUTE) src.panels.attribute = value;
        else if (id == F_POSITION) {
            if (!cli_parse_int("report", "--position", value, -((int64_t)1 << 40), (int64_t)1 << 40, &position))
                return CLI_USAGE_ERROR;
        } else if (!cli_parse_int("report", "--batch", value, 0, INT64_MAX, &batch)) return CLI_USAGE_ERROR;
    }
    const bool sdpa = r.paths[IN_Q] || r.paths[IN_K] || r.paths[IN_V];
    const bool mha = r.paths[IN_X] != NULL;
    const bool maps_given = src.weights_path || src.model_path;
    if (!html_path) return cli_usage_error("report", "missing --html OUT.html");
    if (maps_given) {
        bool other = cli_module_given(&r.mod);
        for (int n = 0; n < IN_COUNT; n++) other = other || r.paths[n];
        if (other)
            return cli_usage_error("report", "--weights and --model bring their maps: they do not combine with "
                                   "-q/-k/-v, -x or the module's weights");
        if (src.weights_path && src.model_path)
            return cli_usage_error("report", "give either --weights (maps made elsewhere) or --model (a run), not both");
        if (src.compare_text && !src.model_path)
            return cli_usage_error("report", "--compare-text is a second run of --model");
        if (src.maps_kind && !src.model_path)
            return cli_usage_error("report", "--maps chooses what a run of --model shows");
        if (src.maps_kind && strcmp(src.maps_kind, "weights") != 0 && strcmp(src.maps_kind, "value-norms") != 0 &&
            strcmp(src.maps_kind, "rollout") != 0)
            return cli_usage_error("report", "--maps '%s': expected weights, value-norms or rollout", src.maps_kind);
        if (src.maps_kind && strcmp(src.maps_kind, "rollout") == 0 && (src.source_text || show_text))
            return cli_usage_error("report", "--maps rollout is one map a layer (the heads averaged): no --head or "
                                             "--source-text");
        if (src.control_text && !src.compare_text)
            return cli_usage_error("report", "--control-text is the control of --compare-text: give both");
        if (src.source_text && !src.model_path)
            return cli_usage_error("report", "--source-text is the changed run of --model (for --weights there are "
                                   "no keys and values to swap)");
        if ((cli_panels_requested(&src.panels) || src.panels.answer || src.panels.wrong) && !src.model_path)
            return cli_usage_error("report", "%s analyses a run of --model", panel_flag(&src.panels));
        if (src.panels.logit_attribution && !src.panels.answer)
            return cli_usage_error("report", "--logit-attribution needs --answer TOKEN (the logit it attributes)");
        if (src.panels.attribute && !src.source_text)
            return cli_usage_error("report", "--attribute estimates patches from a second run: give --source-text "
                                   "TEXT (the corrupted run)");
        if (src.panels.attribute && !src.panels.answer)
            return cli_usage_error("report", "--attribute needs --answer TOKEN (its metric is logit(answer) - "
                                   "logit(wrong))");
        if (src.panels.wrong && !src.panels.answer)
            return cli_usage_error("report", "--wrong is the other side of --answer's logit difference: give both");
        if (src.panels.answer && !src.panels.logit_lens && !src.panels.logit_attribution && !src.panels.attribute)
            return cli_usage_error("report", "--answer is for --logit-lens, --logit-attribution or --attribute");
        if (cli_args_given(&args, F_POSITION) && !src.source_text && !cli_panels_requested(&src.panels))
            return cli_usage_error("report", "--position is where the path table ranks the heads and the panels "
                                   "look: with --model it needs --source-text, --flow, --logit-lens, "
                                   "--logit-attribution or --attribute");
        src.panels.position = position;
        if (!src.model_path != !src.text)
            return cli_usage_error("report", src.text ? "--text needs --model MODEL"
                                                      : "--model needs --text TEXT (the text to run)");
        if (src.model_path && (tokens_text || key_tokens_text || cli_attention_given(&args) ||
                               cli_args_given(&args, F_BATCH)))
            return cli_usage_error("report", "with --model the labels are the model's tokens and the mask its own: "
                                   "--tokens, --key-tokens, --batch and the mask options are for --weights");
        const char *text_file = src.text && src.text[0] == '@' ? src.text + 1 : NULL;
        const char *compare_file = src.compare_text && src.compare_text[0] == '@' ? src.compare_text + 1 : NULL;
        const char *source_file = src.source_text && src.source_text[0] == '@' ? src.source_text + 1 : NULL;
        const char *control_file = src.control_text && src.control_text[0] == '@' ? src.control_text + 1 : NULL;
        const char *tokens_file = tokens_text && tokens_text[0] == '@' ? tokens_text + 1 : NULL;
        const char *key_tokens_file = key_tokens_text && key_tokens_text[0] == '@' ? key_tokens_text + 1 : NULL;
        const char *const inputs[] = {src.weights_path, src.model_path, text_file, compare_file, source_file,
                                      tokens_file, key_tokens_file, ao.key_lengths_path, ao.mask_path, ao.bias_path,
                                      control_file};
        const char *const outputs[] = {html_path};
        if (cli_check_paths("report", inputs, 11, outputs, 1)) return CLI_USAGE_ERROR;
        src.head_text = show_text;
        src.head_flag = "--head";
        src.quiet = cli_args_given(&args, CLI_ID_QUIET);
        src.batch = batch;
        if ((tokens_text && (rc = cli_tokens_parse("report", "--tokens", tokens_text, &tokens))) ||
            (key_tokens_text && (rc = cli_tokens_parse("report", "--key-tokens", key_tokens_text, &key_tokens))))
            goto cleanup;
        if (!(subtitle = command_line(argc, argv))) {
            rc = cli_data_error("report", "out of memory");
            goto cleanup;
        }
        rc = report_maps(&src, &ao, html_path, &tokens, &key_tokens, title, subtitle, position,
                         cli_args_given(&args, CLI_ID_QUIET));
        goto cleanup;
    }
    if (cli_panels_requested(&src.panels) || src.panels.answer || src.panels.wrong)
        return cli_usage_error("report", "%s analyses a run of --model", panel_flag(&src.panels));
    if (src.text || src.layer_text || src.compare_text || src.source_text || src.control_text || src.maps_kind)
        return cli_usage_error("report", "%s belongs to --model or --weights",
                               src.text ? "--text" : src.layer_text ? "--layer"
                               : src.compare_text ? "--compare-text" : src.control_text ? "--control-text"
                               : src.maps_kind ? "--maps" : "--source-text");
    {
        const char *inputs[IN_COUNT + MOD_COUNT + 3];
        int n_inputs = 0;
        for (int n = 0; n < IN_COUNT; n++) inputs[n_inputs++] = r.paths[n];
        for (int n = 0; n < MOD_COUNT; n++) inputs[n_inputs++] = r.mod.paths[n];
        inputs[n_inputs++] = ao.key_lengths_path, inputs[n_inputs++] = ao.mask_path, inputs[n_inputs++] = ao.bias_path;
        const char *const outputs[] = {html_path};
        if (cli_check_paths("report", inputs, n_inputs, outputs, 1)) return CLI_USAGE_ERROR;
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
    if (sdpa && cli_module_given(&r.mod))
        return cli_usage_error("report", "the weights, --heads and --kv-heads belong to the multi-head inputs (-x); "
                               "with -q/-k/-v the heads come from the arrays (use --show-heads to choose the heads shown)");
    if (mha && ao.layout_given)
        return cli_usage_error("report", "--layout is for -q/-k/-v; -x is [L, d_model] or [B, L, d_model]");
    if (show_text && strcmp(show_text, "all") != 0 && !cli_index_list_parse("report", "--show-heads", show_text, &show))
        return CLI_USAGE_ERROR;
    if ((tokens_text && (rc = cli_tokens_parse("report", "--tokens", tokens_text, &tokens))) ||
        (key_tokens_text && (rc = cli_tokens_parse("report", "--key-tokens", key_tokens_text, &key_tokens))))
        goto cleanup;

    if ((rc = sdpa ? run_sdpa(&r, &ao, &trace, &paths, &have_paths) : run_mha(&r, &ao, &trace, &paths, &have_paths)))
        goto cleanup;
    if (cli_args_given(&args, F_POSITION) && !have_paths) {
        rc = cli_usage_error("report", "--position is where the path table ranks the heads: give a changed input "
                             "(--changed-q/-k/-v, --changed-x or --changed-context)");
        goto cleanup;
    }
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
    if (position < -L || position >= L) {
        rc = cli_data_error("report", "--position %lld is outside the %lld queries (0 to %lld, or -1 to -%lld from "
                            "the end)", (long long)position, (long long)L, (long long)L - 1, (long long)L);
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
    attn_report report = {.struct_size = sizeof(attn_report), .title = title, .subtitle = subtitle,
                          .heads = n_heads, .len_q = L, .len_kv = S,
                          .weights = weights, .visible = visible, .head_ids = show.count ? show.items : NULL,
                          .query_labels = (const char *const *)tokens.items,
                          .key_labels = (const char *const *)key_tokens.items,
                          .paths = have_paths ? &paths : NULL, .paths_batch = batch, .paths_position = position};
    if (attn_report_write_html(html_path, &report) != ATTN_OK)
        rc = cli_data_error("report", "%s", attn_last_error());
    else if (!cli_args_given(&args, CLI_ID_QUIET))
        fprintf(stderr, "attn report: wrote %s (%lld head%s of %lld x %lld%s)\n", html_path, (long long)n_heads,
                n_heads == 1 ? "" : "s", (long long)L, (long long)S, have_paths ? ", with the path decomposition" : "");

cleanup:
    free(weights);
    free(visible);
    free(subtitle);
    attn_trace_free(&trace);
    attn_paths_free(&paths);
    for (int n = 0; n < IN_COUNT; n++) attn_array_free(&r.in[n]);
    cli_module_free(&r.mod);
    cli_tokens_free(&tokens);
    cli_tokens_free(&key_tokens);
    cli_index_list_free(&show);
    cli_attention_options_free(&ao);
    return rc;
}
