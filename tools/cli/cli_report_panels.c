/*
 * cli_report_panels.c — the analyses at one position that `attn report
 * --model` shows as panels (cli_report_panels.h).  The numbers are the
 * library's (attn_model_flow, attn_model_rollout, attn_model_logit_lens,
 * attn_model_logit_attribution, attn_model_attribution_patching); this
 * file lays them out and labels them.
 */
#include "cli_report_panels.h"
#include "cli.h"
#include "cli_answer.h"
#include "cli_maps.h"
#include "cli_model_patch.h"

#include "attn_interp.h"
#include "attn_model_interp.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Keeps ptr to be freed with the panels; NULL (a failed allocation) is
 * returned as is. */
static void *own(cli_panels *p, void *ptr) {
    if (!ptr) return NULL;
    if (p->n_owned == p->cap_owned) {
        const int64_t cap = p->cap_owned ? 2 * p->cap_owned : 64;
        void **grown = realloc(p->owned, (size_t)cap * sizeof *grown);
        if (!grown) {
            free(ptr);
            return NULL;
        }
        p->owned = grown;
        p->cap_owned = cap;
    }
    return p->owned[p->n_owned++] = ptr;
}

static char *own_printf(cli_panels *p, const char *fmt, ...) CLI_PRINTF(2, 3);
static char *own_printf(cli_panels *p, const char *fmt, ...) {
    char text[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    return own(p, strdup(text));
}

/* The next panel, its values [rows, cols] and labels allocated (NULL when
 * out of memory). */
static attn_report_panel *panel_new(cli_panels *p, attn_report_panel_style style, int64_t rows, int64_t cols,
                                    bool with_text) {
    attn_report_panel *panel = &p->items[p->count++];
    memset(panel, 0, sizeof *panel);
    panel->style = style;
    panel->rows = rows;
    panel->cols = cols;
    double *values = own(p, malloc((size_t)(rows * cols) * sizeof *values));
    char **row_labels = own(p, calloc((size_t)rows, sizeof *row_labels));
    char **col_labels = own(p, calloc((size_t)cols, sizeof *col_labels));
    char **text = with_text ? own(p, calloc((size_t)(rows * cols), sizeof *text)) : NULL;
    if (!values || !row_labels || !col_labels || (with_text && !text)) return NULL;
    for (int64_t n = 0; n < rows * cols; n++) values[n] = NAN;
    panel->values = values;
    panel->row_labels = (const char *const *)row_labels;
    panel->col_labels = (const char *const *)col_labels;
    panel->cell_text = (const char *const *)text;
    return panel;
}

/* Writable views of a panel's label arrays (panel_new allocated them). */
#define VALUES(panel) ((double *)(panel)->values)
#define ROW_LABELS(panel) ((char **)(panel)->row_labels)
#define COL_LABELS(panel) ((char **)(panel)->col_labels)
#define CELL_TEXT(panel) ((char **)(panel)->cell_text)

/* "embed", "0", "1", ...: the rows of the logit lens, the streams read. */
static bool stream_labels(cli_panels *p, char **labels, int64_t rows) {
    for (int64_t r = 0; r < rows; r++)
        if (!(labels[r] = r == 0 ? own_printf(p, "embed") : own_printf(p, "%lld", (long long)r - 1))) return false;
    return true;
}

/* --flow: the flow into pos from each token, and the last layer's rollout
 * row at pos (attn_model_rollout, what --maps rollout shows), both with the
 * heads averaged and residual 0.5 (Abnar & Zuidema's). */
static int flow_panel(const char *cmd, cli_panels *p, const attn_decoder *dec, const int32_t *ids, int64_t L,
                      int64_t pos, char *const *labels) {
    const int64_t N = attn_decoder_get_config(dec)->n_layers;
    double *rollout = malloc((size_t)(N * L * L) * sizeof *rollout);
    attn_report_panel *panel = panel_new(p, ATTN_REPORT_PANEL_BARS, 2, L, false);
    int rc = CLI_OK;
    if (!rollout || !panel) {
        rc = cli_data_error(cmd, "out of memory");
        goto done;
    }
    if (attn_model_flow(dec, ids, L, ATTN_ALL, 0.5, pos, VALUES(panel)) ||
        attn_model_rollout(dec, ids, L, ATTN_ALL, 0.5, rollout)) {
        rc = cli_data_error(cmd, "--flow: %s", attn_last_error());
        goto done;
    }
    memcpy(VALUES(panel) + L, rollout + ((N - 1) * L + pos) * L, (size_t)L * sizeof *rollout);
    ROW_LABELS(panel)[0] = own_printf(p, "flow");
    ROW_LABELS(panel)[1] = own_printf(p, "rollout");
    for (int64_t j = 0; j < L; j++) COL_LABELS(panel)[j] = own_printf(p, "%lld %s", (long long)j, labels[j]);
    panel->title = own_printf(p, "Attention flow into position %lld “%s”", (long long)pos, labels[pos]);
    panel->note = own_printf(p, "From each input token to position %lld after the last layer, over every layer's "
                             "attention with the heads averaged and the residual 0.5 (Abnar & Zuidema 2020). Flow: "
                             "the max-flow through that graph (each at most 1; they need not sum to 1). Rollout: "
                             "the product of the same graphs, the last layer's row (it sums to 1). Hover a bar for "
                             "its exact value.", (long long)pos);
    if (!panel->title || !panel->note || !ROW_LABELS(panel)[1] || !COL_LABELS(panel)[L - 1])
        rc = cli_data_error(cmd, "out of memory");
done:
    free(rollout);
    return rc;
}

/* --logit-lens: the top CLI_LENS_TOP tokens of each stream read as the last
 * (their probabilities); with --answer its probability and rank, with
 * --wrong the logit difference, per stream. */
static int lens_panels(const char *cmd, cli_panels *p, const attn_decoder *dec, const attn_tokenizer *tok,
                       const int32_t *ids, int64_t L, int64_t pos, char *const *labels, int64_t answer, int64_t wrong) {
    const attn_decoder_config *c = attn_decoder_get_config(dec);
    const int64_t rows = c->n_layers + 1, V = c->vocab;
    float *lens = malloc((size_t)(rows * V) * sizeof *lens);
    attn_report_panel *top = panel_new(p, ATTN_REPORT_PANEL_HEAT, rows, CLI_LENS_TOP, true);
    int rc = CLI_OK;
    if (!lens || !top || !stream_labels(p, ROW_LABELS(top), rows)) {
        rc = cli_data_error(cmd, "out of memory");
        goto done;
    }
    if (attn_model_logit_lens(dec, ids, L, pos, lens)) {
        rc = cli_data_error(cmd, "--logit-lens: %s", attn_last_error());
        goto done;
    }
    for (int64_t k = 0; k < CLI_LENS_TOP; k++) COL_LABELS(top)[k] = own_printf(p, "top %lld", (long long)k + 1);
    for (int64_t r = 0; r < rows; r++) {
        int64_t best[CLI_LENS_TOP];
        attn_top_k(lens + r * V, V, CLI_LENS_TOP, best);
        for (int64_t k = 0; k < CLI_LENS_TOP; k++) {
            VALUES(top)[r * CLI_LENS_TOP + k] = attn_logits_prob(lens + r * V, V, best[k]);
            if (!(CELL_TEXT(top)[r * CLI_LENS_TOP + k] = own(p, cli_token_label(tok, (int32_t)best[k])))) {
                rc = cli_data_error(cmd, "out of memory");
                goto done;
            }
        }
    }
    top->title = own_printf(p, "Logit lens at position %lld “%s”", (long long)pos, labels[pos]);
    top->note = own_printf(p, "The residual stream after each layer (embed: before the first) read as if it were "
                           "the last, through the final norm and the unembedding: its %d most likely next tokens "
                           "and their probabilities. The last row is the model's own prediction.", CLI_LENS_TOP);
    if (!top->title || !top->note) {
        rc = cli_data_error(cmd, "out of memory");
        goto done;
    }
    if (answer < 0) goto done;

    attn_report_panel *a = panel_new(p, ATTN_REPORT_PANEL_BARS, wrong >= 0 ? 2 : 1, rows, true);
    if (!a || !stream_labels(p, COL_LABELS(a), rows)) {
        rc = cli_data_error(cmd, "out of memory");
        goto done;
    }
    char *answer_label = own(p, cli_token_label(tok, (int32_t)answer));
    char *wrong_label = wrong >= 0 ? own(p, cli_token_label(tok, (int32_t)wrong)) : NULL;
    ROW_LABELS(a)[0] = own_printf(p, "p(%s)", answer_label ? answer_label : "");
    if (wrong >= 0)
        ROW_LABELS(a)[1] = own_printf(p, "logit(%s) − logit(%s)", answer_label ? answer_label : "",
                                      wrong_label ? wrong_label : "");
    for (int64_t r = 0; r < rows; r++) {
        const float *logits = lens + r * V;
        VALUES(a)[r] = attn_logits_prob(logits, V, answer);
        CELL_TEXT(a)[r] = own_printf(p, "rank %lld", (long long)cli_logit_rank(logits, V, answer));
        if (wrong >= 0) {
            VALUES(a)[rows + r] = (double)logits[answer] - (double)logits[wrong];
            CELL_TEXT(a)[rows + r] = own_printf(p, "rank of %s %lld", wrong_label ? wrong_label : "",
                                                (long long)cli_logit_rank(logits, V, wrong));
        }
    }
    a->title = own_printf(p, "Logit lens: the answer “%s” layer by layer", answer_label ? answer_label : "");
    a->note = own_printf(p, "Per stream (columns), the answer's probability (its rank among the %lld tokens in the "
                         "tooltip)%s.", (long long)V, wrong >= 0 ? " and the logit difference answer − wrong" : "");
    if (!answer_label || !a->title || !a->note || !ROW_LABELS(a)[a->rows - 1]) rc = cli_data_error(cmd, "out of memory");
done:
    free(lens);
    return rc;
}

/* --logit-attribution: each part's share of logit(answer) - logit(wrong)
 * (or of logit(answer) without --wrong): per layer attention and MLP, per
 * head, and the embeddings' term; the check line sets their sum beside the
 * model's own logit difference at pos (the logit lens's last row). */
static int attribution_panels(const char *cmd, cli_panels *p, const attn_decoder *dec, const attn_tokenizer *tok,
                              const int32_t *ids, int64_t L, int64_t pos, char *const *labels, int64_t answer,
                              int64_t wrong) {
    const attn_decoder_config *c = attn_decoder_get_config(dec);
    const int64_t N = c->n_layers, Hq = c->n_heads, V = c->vocab;
    float *lens = malloc((size_t)((N + 1) * V) * sizeof *lens);
    double embed, *mlp = malloc((size_t)N * sizeof *mlp);
    attn_report_panel *layers = panel_new(p, ATTN_REPORT_PANEL_BARS, 2, N, false);
    attn_report_panel *heads = panel_new(p, ATTN_REPORT_PANEL_DIVERGING, N, Hq, false);
    int rc = CLI_OK;
    if (!lens || !mlp || !layers || !heads) {
        rc = cli_data_error(cmd, "out of memory");
        goto done;
    }
    if (attn_model_logit_attribution(dec, ids, L, pos, answer, wrong, &embed, VALUES(layers), mlp, VALUES(heads)) ||
        attn_model_logit_lens(dec, ids, L, pos, lens)) {
        rc = cli_data_error(cmd, "--logit-attribution: %s", attn_last_error());
        goto done;
    }
    memcpy(VALUES(layers) + N, mlp, (size_t)N * sizeof *mlp);
    double sum = embed;
    for (int64_t l = 0; l < N; l++) sum += VALUES(layers)[l] + mlp[l];
    const float *logits = lens + N * V;
    const double model = (double)logits[answer] - (wrong >= 0 ? (double)logits[wrong] : 0);
    char *answer_label = own(p, cli_token_label(tok, (int32_t)answer));
    char *wrong_label = wrong >= 0 ? own(p, cli_token_label(tok, (int32_t)wrong)) : NULL;
    char quantity[640];
    if (wrong >= 0)
        snprintf(quantity, sizeof quantity, "logit(%s) − logit(%s)", answer_label ? answer_label : "",
                 wrong_label ? wrong_label : "");
    else
        snprintf(quantity, sizeof quantity, "logit(%s)", answer_label ? answer_label : "");
    ROW_LABELS(layers)[0] = own_printf(p, "attention");
    ROW_LABELS(layers)[1] = own_printf(p, "MLP");
    for (int64_t l = 0; l < N; l++) {
        COL_LABELS(layers)[l] = own_printf(p, "%lld", (long long)l);
        ROW_LABELS(heads)[l] = own_printf(p, "layer %lld", (long long)l);
    }
    for (int64_t h = 0; h < Hq; h++) COL_LABELS(heads)[h] = own_printf(p, "head %lld", (long long)h);
    layers->title = own_printf(p, "Direct logit attribution of %s at position %lld “%s”", quantity, (long long)pos,
                               labels[pos]);
    layers->note = own_printf(p, "Each layer's attention and MLP output through the final norm's weight and the "
                              "unembedding, scaled by the final stream's 1/rms (frozen). embed = %.6g; "
                              "sum = embed + Σ attention + Σ MLP = %.6g; the model's own %s = %.6g "
                              "(sum − model = %.3g).", embed, sum, quantity, model, sum - model);
    heads->title = own_printf(p, "Direct logit attribution per head (layers × heads) of %s", quantity);
    heads->note = own_printf(p, "Each head's z_h W_O^h through the same map: a layer's heads add up to its attention "
                             "bar above (on Gemma 3 the post-attention norm's scale is frozen too).");
    if (!answer_label || !layers->title || !layers->note || !heads->title || !heads->note ||
        !COL_LABELS(heads)[Hq - 1] || !ROW_LABELS(heads)[N - 1])
        rc = cli_data_error(cmd, "out of memory");
done:
    free(lens);
    free(mlp);
    return rc;
}

/* --attribute HOOK[@POS,..]: attribution patching of source (the corrupted
 * run) into ids (the clean run), the metric logit(answer) - logit(wrong)
 * at the text's last token.  A point without heads: layers x positions
 * (@POS, else every position); a per-head point: layers x heads at each of
 * @POS's positions, else at --position (both by the legend's rule). */
static int patching_panel(const char *cmd, cli_panels *p, const cli_panel_request *q, const attn_decoder *dec,
                          const attn_tokenizer *tok, const int32_t *ids, int64_t L, char *const *labels,
                          const int32_t *source, int64_t source_len, int64_t answer, int64_t wrong) {
    const int64_t N = attn_decoder_get_config(dec)->n_layers;
    cli_model_patch at;
    char error[512];
    if (!cli_model_patch_parse(q->attribute, CLI_ATTRIBUTE, N, &at, error, sizeof error))
        return cli_usage_error(cmd, "%s", error);
    const int64_t H = attn_model_attribution_heads(dec, at.p.point);
    if (H > 1 && !at.p.n_positions) { /* a per-head point: at the chosen position */
        at.positions[0] = q->position; /* the legend's rule in both runs */
        at.p.n_positions = 1;
    }
    if (!at.p.n_positions && source_len != L)
        return cli_usage_error(cmd, "--attribute '%s': every position needs texts of one length (--text is %lld "
                               "tokens, --source-text %lld): name positions, e.g. %s@-1", q->attribute, (long long)L,
                               (long long)source_len, q->attribute);
    const int64_t K = at.p.n_positions ? at.p.n_positions : L;
    const int64_t first = at.p.layer < 0 ? 0 : at.p.layer, rows = at.p.layer < 0 ? N : 1;
    double *estimate = malloc((size_t)(N * K * H) * sizeof *estimate), metric[2];
    attn_report_panel *panel = panel_new(p, ATTN_REPORT_PANEL_DIVERGING, rows, K * H, false);
    if (!estimate || !panel) {
        free(estimate);
        return cli_data_error(cmd, "out of memory");
    }
    if (attn_model_attribution_patching(dec, ids, L, source, source_len, at.p.point, at.p.positions, at.p.n_positions,
                                        answer, wrong, estimate, metric)) {
        free(estimate);
        return cli_data_error(cmd, "--attribute '%s': %s", q->attribute, attn_last_error());
    }
    /* estimate [N, K, H] (the parser takes per-layer points only): the
     * shown rows from first, one when a layer is named */
    memcpy(VALUES(panel), estimate + first * K * H, (size_t)(rows * K * H) * sizeof *estimate);
    free(estimate);
    for (int64_t r = 0; r < rows; r++) ROW_LABELS(panel)[r] = own_printf(p, "layer %lld", (long long)(first + r));
    for (int64_t k = 0; k < K; k++) {
        const int64_t at_k = at.p.n_positions ? at.p.positions[k] : k;
        const int64_t pc = at_k < 0 ? L + at_k : at_k, px = at_k < 0 ? source_len + at_k : at_k;
        char *source_label = own(p, cli_token_label(tok, source[px]));
        for (int64_t h = 0; h < H; h++)
            COL_LABELS(panel)[k * H + h] =
                H == 1   ? own_printf(p, "%lld “%s” / “%s”", (long long)pc, labels[pc], source_label ? source_label : "")
                : K == 1 ? own_printf(p, "head %lld", (long long)h)
                         : own_printf(p, "%lld h%lld", (long long)pc, (long long)h);
    }
    char *answer_label = own(p, cli_token_label(tok, (int32_t)answer));
    char *wrong_label = wrong >= 0 ? own(p, cli_token_label(tok, (int32_t)wrong)) : NULL;
    char hook[160];
    attn_decoder_hook_name(at.p.point, at.p.layer, hook, sizeof hook);
    if (at.p.layer < 0) snprintf(hook, sizeof hook, "blocks.*.%s", attn_decoder_hook_suffix(at.p.point));
    const int64_t shown = at.p.positions[0] < 0 ? L + at.p.positions[0] : at.p.positions[0];
    panel->title = H > 1 && K == 1 ? own_printf(p, "Attribution patching at %s, position %lld “%s” (layers × heads)",
                                                hook, (long long)shown, labels[shown])
                 : own_printf(p, "Attribution patching at %s (layers × positions%s)", hook, H > 1 ? " and heads" : "");
    panel->note = own_printf(p, "The --source-text run's activation patched into the --text run%s, each layer%s on "
                             "its own, estimated to first order as (source − text) · d metric / d activation (Nanda "
                             "2023; attn model trace --attribute --check sets real patches beside it). metric = "
                             "logit(%s)%s%s%s at the text's last token: text %.6g, source %.6g (the whole change "
                             "%+.6g).", H == 1 ? " (columns: position, “text token” / “source token”; negative "
                             "positions count from the end of each run)" : "", H > 1 ? " and head" : " and position",
                             answer_label ? answer_label : "",
                             wrong >= 0 ? " − logit(" : "", wrong >= 0 && wrong_label ? wrong_label : "",
                             wrong >= 0 ? ")" : "", metric[0], metric[1], metric[1] - metric[0]);
    if (!answer_label || !panel->title || !panel->note || !COL_LABELS(panel)[K * H - 1])
        return cli_data_error(cmd, "out of memory");
    return CLI_OK;
}

bool cli_panels_requested(const cli_panel_request *q) {
    return q->flow || q->logit_lens || q->logit_attribution || q->attribute;
}

int cli_panels_build(const char *cmd, const cli_panel_request *q, const attn_decoder *dec, const attn_tokenizer *tok,
                     const int32_t *ids, int64_t L, char *const *labels, const int32_t *source, int64_t source_len,
                     cli_panels *out) {
    memset(out, 0, sizeof *out);
    const int64_t V = attn_decoder_get_config(dec)->vocab;
    const int64_t pos = q->position < 0 ? L + q->position : q->position;
    int64_t answer = -1, wrong = -1;
    int rc = CLI_OK;
    if (pos < 0 || pos >= L)
        return cli_data_error(cmd, "--position %lld is outside the text's %lld tokens (0 to %lld, or -1 to -%lld from "
                              "the end)", (long long)q->position, (long long)L, (long long)L - 1, (long long)L);
    if ((q->answer && !cli_answer_token(cmd, tok, "--answer", q->answer, V, &answer)) ||
        (q->wrong && !cli_answer_token(cmd, tok, "--wrong", q->wrong, V, &wrong)))
        return CLI_USAGE_ERROR;
    if (q->flow) rc = flow_panel(cmd, out, dec, ids, L, pos, labels);
    if (!rc && q->logit_lens) rc = lens_panels(cmd, out, dec, tok, ids, L, pos, labels, answer, wrong);
    if (!rc && q->logit_attribution) rc = attribution_panels(cmd, out, dec, tok, ids, L, pos, labels, answer, wrong);
    if (!rc && q->attribute)
        rc = patching_panel(cmd, out, q, dec, tok, ids, L, labels, source, source_len, answer, wrong);
    if (rc) cli_panels_free(out);
    return rc;
}

void cli_panels_free(cli_panels *p) {
    for (int64_t n = 0; n < p->n_owned; n++) free(p->owned[n]);
    free(p->owned);
    memset(p, 0, sizeof *p);
}
