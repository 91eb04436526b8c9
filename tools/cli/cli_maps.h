/*
 * cli_maps.h — the attention maps `attn map` and `attn report` draw when
 * they are not computed from Q, K, V: a real model's run over a text
 * (--model FILE --text TEXT, every layer's weights from attn_decoder_forward)
 * or maps made elsewhere (--weights W.npy, e.g. transformers'
 * output_attentions stacked and saved as float32); for a model's run also
 * the cosine of a second text's last token and the path decomposition
 * against a changed text of the same length, layer by layer.
 *
 * Shape legend: maps [n_layers, n_heads, L, S] (the selected layers and
 * heads of one batch), visible likewise.  Accepted --weights files:
 *   [L, S]                 one map
 *   [H, L, S]              one layer's heads
 *   [B, H, L, S]           batches (attn sdpa --weights); with --layer:
 *                          [layers, H, L, S] instead
 *   [layers, B, H, L, S]   transformers' tuple of [B, H, T, T] stacked
 */
#ifndef ATTN_CLI_MAPS_H
#define ATTN_CLI_MAPS_H

#include "cli_pictures.h"
#include "cli_report_panels.h"

#include "attn_interp.h"
#include "attn_tokenizer.h"

/* What the command line named. */
typedef struct cli_map_source {
    const char *model_path, *text; /* --model MODEL --text TEXT|@FILE           */
    const char *compare_text;      /* --compare-text TEXT|@FILE (report), or NULL */
    const char *control_text;      /* --control-text TEXT|@FILE (report, with
                                      compare_text): a same-sense control of
                                      text, or NULL */
    const char *source_text;       /* --source-text TEXT|@FILE (report): the changed
                                      input of the path decomposition, or NULL */
    const char *weights_path;      /* --weights W.npy                           */
    const char *layer_text;        /* --layer LIST|all, or NULL (all)            */
    const char *head_text;         /* --head LIST|all, or NULL (all)             */
    const char *head_flag;         /* the flag typed for it (messages), or NULL  */
    const char *maps_kind;         /* --maps (report, with a model): NULL or "weights",
                                      "value-norms" (each row's value-weighted norms
                                      ||a v W_O||, divided by the row's sum) or
                                      "rollout" (attention rollout up to each layer,
                                      heads averaged: one map a layer) */
    cli_panel_request panels;      /* --flow, --logit-lens, --logit-attribution
                                      (report, with a model): panels at a position */
    int64_t batch;                 /* --batch                                   */
    bool quiet;                    /* --quiet: no progress line on stderr       */
} cli_map_source;

typedef struct cli_maps {
    int64_t n_layers, n_heads, len_q, len_kv;
    int64_t *layer_ids, *head_ids; /* [n_layers], [n_heads]: numbers in the source */
    bool layered;                  /* the source has a layer axis (a model, --layer, 5-D) */
    float *weights;                /* [n_layers, n_heads, L, S]                 */
    uint8_t *visible;              /* the same shape; 1 = the query may read the key */
    char **labels;                 /* [L] the model's tokens, decoded; or NULL  */
    char *about;                   /* "gemma3, 8 tokens" for titles; or NULL    */
    /* With compare_text: the cosine of the two texts' last tokens' residual
     * streams, row 0 the embeddings, row l + 1 after layer l, the last row
     * after the final norm (the chapter's two 苹果 when the texts are its
     * two sentences); with control_text, the same of text and control_text. */
    double *cosine;                /* [n_cosine] or NULL                        */
    double *cosine2;               /* [n_cosine] text against control_text, or NULL */
    int64_t n_cosine;
    char **cosine_labels;          /* [n_cosine] "embed", "0", "1", ...          */
    char *cosine_title;
    /* With source_text: each shown layer's path decomposition (Figure 2),
     * the text as base and the source text (same length) as changed, from
     * attn_model_paths_each (attn_model_interp.h) as `attn model trace
     * --paths` makes it; only the buffers attn_report_write_html reads are
     * kept. */
    attn_paths *paths;             /* [n_layers] or NULL                        */
    cli_panels panels;             /* what src->panels asked for (count 0: none) */
} cli_maps;

/* Loads the maps src names, the visibility under ao's mask options (for a
 * file) or the model's own (causal, and its sliding window on local
 * layers).  Returns CLI_OK, CLI_USAGE_ERROR or CLI_DATA_ERROR (printed,
 * naming the flag, the file and the shapes accepted). */
int cli_maps_load(const char *cmd, const cli_map_source *src, cli_attention_options *ao, cli_maps *out);
void cli_maps_free(cli_maps *m);

/* A token's label: its own bytes decoded; bytes that are not whole UTF-8
 * characters (a byte-level token's part of a character) as \xNN, newlines
 * and tabs as \n, \t.  malloc'd, NULL when out of memory. */
char *cli_token_label(const attn_tokenizer *t, int32_t id);

#endif /* ATTN_CLI_MAPS_H */
