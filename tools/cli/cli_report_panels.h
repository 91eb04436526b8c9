/*
 * cli_report_panels.h — the panels `attn report --model` adds under the
 * maps, each a library analysis of the run at one position
 * (attn_model_interp.h) laid out as an attn_report_panel (attn_viz.h):
 *   --flow               attention flow into the position from each token,
 *                        beside the rollout row of the last layer
 *   --logit-lens         the top tokens of each layer's stream, and with
 *                        --answer its probability, rank and logit difference
 *   --logit-attribution  each layer's attention and MLP share of the logit
 *                        difference, and each head's (layers x heads)
 *   --attribute HOOK     attribution patching of --source-text (the
 *                        corrupted run) into --text: layers x positions, or
 *                        layers x heads for a per-head point
 *
 * Shape legend: L tokens, N layers, Hq heads, V vocabulary; a panel's
 * values [rows, cols] as attn_report_panel lays them out.
 */
#ifndef ATTN_CLI_REPORT_PANELS_H
#define ATTN_CLI_REPORT_PANELS_H

#include "attn_decoder.h"
#include "attn_tokenizer.h"
#include "attn_viz.h"

#include <stdbool.h>
#include <stdint.h>

enum { CLI_PANELS_MAX = 8, CLI_LENS_TOP = 5 };

/* What the command line asked for. */
typedef struct cli_panel_request {
    bool flow, logit_lens, logit_attribution;
    const char *answer, *wrong; /* --answer, --wrong TOKEN (#ID or one token's text), or NULL */
    const char *attribute;      /* --attribute HOOK[@POS,..] (cli_model_patch.h's grammar), or NULL */
    int64_t position;           /* --position: >= 0, or negative from the end */
} cli_panel_request;

/* The panels built, and every buffer they point into (freed together). */
typedef struct cli_panels {
    attn_report_panel items[CLI_PANELS_MAX];
    int64_t count;
    void **owned;
    int64_t n_owned, cap_owned;
} cli_panels;

/* True when q asks for any panel. */
bool cli_panels_requested(const cli_panel_request *q);

/* Builds the panels q asks for from a run of dec over ids [L]; labels [L]
 * are the tokens' texts (cli_token_label); source [source_len] the
 * corrupted run of --attribute (else NULL, 0).  CLI_OK, or CLI_USAGE_ERROR /
 * CLI_DATA_ERROR printed naming the flag. */
int cli_panels_build(const char *cmd, const cli_panel_request *q, const attn_decoder *dec, const attn_tokenizer *tok,
                     const int32_t *ids, int64_t L, char *const *labels, const int32_t *source, int64_t source_len,
                     cli_panels *out);
void cli_panels_free(cli_panels *p);

#endif /* ATTN_CLI_REPORT_PANELS_H */
