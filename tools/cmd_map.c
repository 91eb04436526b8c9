/*
 * cmd_map.c — `attn map`: attention weights as heat maps (PNG, SVG or PDF).
 *
 * Shapes: --weights [L, S] (one head), [H, L, S] or [B, H, L, S] (as written
 * by `attn sdpa --weights` / `attn mha --weights`), with --layer [layers, H,
 * L, S], or [layers, B, H, L, S]; or a model's run over a text (--model
 * --text: every layer [Hq, L, L]).  Rows are queries, columns the keys they
 * read; several layers make a layer x head grid.  The shared mask options
 * mark the cells a mask hides, so hidden keys are drawn hatched rather than
 * as weight 0 (a model's run brings its own: causal, and sliding windows).
 */
#include "cli_maps.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

enum { F_WEIGHTS = 1, F_O, F_HEADS, F_TOKENS, F_KEY_TOKENS, F_TITLE, F_LANG, F_VALUES, F_BATCH, F_COLUMNS,
       F_VMIN, F_VMAX, F_MODEL, F_TEXT, F_LAYER };

/* The automatic colour scale's quantile, and the map size from which it is
 * the default (the HTML report's rule too): 0 to the 99th percentile of the
 * visible weights once a map has more than 64 queries or keys. */
#define AUTO_QUANTILE 0.99
#define AUTO_FROM 64

static const cli_flag map_flags[] = {
    {"--weights", "W.npy", F_WEIGHTS, 0},       {"-o", "MAP.png|.svg|.pdf", F_O, 0},
    {"--heads", "LIST|all", F_HEADS, 0},        {"--head", "LIST|all", F_HEADS, 0},
    {"--layer", "LIST|all", F_LAYER, 0},        {"--model", "MODEL", F_MODEL, 0},
    {"--text", "TEXT|@FILE", F_TEXT, 0},        {"--tokens", "LIST|@FILE", F_TOKENS, 0},
    {"--key-tokens", "LIST|@FILE", F_KEY_TOKENS, 0}, {"--title", "TEXT", F_TITLE, 0},
    {"--lang", "en|zh", F_LANG, 0},             {"--values", "auto|on|off", F_VALUES, 0},
    {"--batch", "N", F_BATCH, 0},               {"--columns", "N", F_COLUMNS, 0},
    {"--vmin", "X", F_VMIN, 0},                 {"--vmax", "auto|X", F_VMAX, 0},
    CLI_FLAGS_END};

static void map_help(FILE *out) {
    fprintf(out,
    "usage: attn map --weights W.npy -o MAP.png|MAP.svg|MAP.pdf [--tokens LIST] [--key-tokens LIST]\n"
    "                [--layer LIST|all] [--head LIST|all] [--batch N] [--title TEXT] [--lang en|zh]\n"
    "                [--values auto|on|off] [--vmin X] [--vmax auto|X] [--columns N] [mask options]\n"
    "       attn map --model MODEL --text TEXT -o MAP.png [--layer LIST|all] [--head LIST|all] ...\n\n"
    "Draws attention weights as heat maps, one panel per head: rows are queries, columns the keys\n"
    "they read (as in the chapter's Figure 3), token labels on both axes, a colour legend, hidden\n"
    "cells hatched, each weight printed when a map is at most 16 x 16.  Several layers make a grid,\n"
    "a row per layer and a column per head.  A single query row (one decode step, 1 x S) is drawn as\n"
    "a strip wrapped every 64 keys, each key labelled.\n\n"
    "input, either:\n"
    "  --weights W.npy    float weights [L, S], [H, L, S], [B, H, L, S] (attn sdpa --weights), or\n"
    "                     [layers, B, H, L, S]; with --layer a 4-D file is [layers, H, L, S]: e.g.\n"
    "                     transformers' output_attentions, numpy.stack'ed and saved as float32\n"
    "  --model MODEL --text TEXT|@FILE   run the model (a GGUF file or a checkpoint directory) over\n"
    "                     the text (its tokenizer, its BOS)\n"
    "                     and draw its attention maps, labelled with its tokens; the model's own\n"
    "                     mask (causal, sliding windows on local layers) marks the hidden cells\n"
    "and:\n"
    "  --layer LIST|all   layers to draw, e.g. 0,3 or 0-3 (default all)\n"
    "  --head LIST|all    heads to draw (also --heads; default all)\n"
    "  --batch N          the batch to draw from a file with a batch axis (default 0)\n"
    "  --tokens LIST      query labels: \"我,吃,了\" (comma-separated) or @FILE (one per line);\n"
    "                     also the key labels when L = S (not with --model: its tokens label)\n"
    "  --key-tokens LIST  key labels (cross-attention)\n"
    "output (by extension; written atomically):\n"
    "  -o MAP.png|.svg    the heads side by side in a grid (a row per layer)\n"
    "  -o MAP.pdf         one map per page\n"
    "  --title TEXT       a line above the maps        --lang en|zh   axis captions\n"
    "  --values auto|on|off   print each weight in its cell (auto: maps of at most 16 x 16)\n"
    "  --vmax auto        the colour scale from 0 to the 99th percentile of the visible weights\n"
    "                     (heavier cells take the darkest colour); the colour bar states it.\n"
    "                     The default when a map has more than 64 queries or keys: over hundreds\n"
    "                     of keys most weights are near 1/S and a [0, 1] scale leaves them white\n"
    "  --vmin X --vmax X  a fixed colour scale, vmin < vmax (default for small maps: [0, 1], or\n"
    "                     the data's range when values lie outside it)   --columns N  panels per row\n"
    "  --quiet            no line on stderr naming what was written\n\n"
    "masks: the options below (as in attn sdpa) mark the cells they hide; hidden cells are drawn\n"
    "hatched grey, never as the colour of 0.  Give the options the weights were computed with:\n"
    "a hidden cell that holds weight, or cells of weight exactly 0 with no mask given, are warned of.\n"
    "%s\n"
    "examples:\n"
    "  attn sdpa -q Q.npy -k K.npy -v V.npy -o O.npy --weights W.npy --causal\n"
    "  attn map --weights W.npy --causal --tokens \"我,吃,了,一,个,苹,果\" -o map.png\n"
    "  attn map --model ~/.cache/attn/models/gemma-3-270m-q4_k_m.gguf --text 我吃了一个苹果 \\\n"
    "           --layer 0-5 -o grid.png\n"
    "  attn map --weights attentions.npy --layer 3 --head all --causal --tokens @tokens.txt -o l3.pdf\n",
    cli_mask_help);
}

static const cli_flag *const map_tables[] = {map_flags, cli_mask_flags, cli_quiet_flags, NULL};
const cli_spec cli_map_spec = {"map", map_tables, map_help, false};

/* The plausible mistake the hatching cannot show: weights computed with
 * other mask options than the ones given.  Warns when a cell the options
 * hide holds weight, and when no mask was given but cells hold exactly 0
 * (a softmax gives exactly 0 only to hidden keys, or after underflow). */
static void check_hidden_cells(const cli_maps *m, bool masks_given) {
    const float *w = m->weights;
    const uint8_t *visible = m->visible;
    const int64_t n_heads = m->n_layers * m->n_heads, L = m->len_q, S = m->len_kv;
    int64_t holding = 0, zeros = 0, at = -1;
    float largest = 0;
    for (int64_t c = 0; c < n_heads * L * S; c++) {
        if (!visible[c] && w[c] != 0) {
            if (holding++ == 0 || fabsf(w[c]) > largest) largest = fabsf(w[c]), at = c;
        }
        zeros += w[c] == 0;
    }
    if (holding) {
        const int64_t panel = at / (L * S), query = at / S % L, key = at % S;
        char where[64] = "";
        if (m->layered) snprintf(where, sizeof where, "layer %lld, ", (long long)m->layer_ids[panel / m->n_heads]);
        cli_warning("map", "%lld cells the mask options hide hold weight (the largest, %.3g, at %shead %lld, query "
                    "%lld, key %lld): the weights were computed with other mask options than these; the cells are "
                    "drawn hatched all the same", (long long)holding, (double)largest, where,
                    (long long)m->head_ids[panel % m->n_heads], (long long)query, (long long)key);
    } else if (!masks_given && zeros) {
        cli_warning("map", "%lld cells hold weight exactly 0 and are drawn as the colour of 0; if a mask hid them, "
                    "give its options (e.g. --causal) to draw them hatched", (long long)zeros);
    }
}

int cmd_map(int argc, char **argv) {
    const char *out_path = NULL, *tokens_text = NULL, *key_tokens_text = NULL;
    cli_map_source src = {0};
    double vmin = 0, vmax = 1; /* one end given: the other is its default */
    bool vmax_auto = false;
    attn_heatmap_options hopt = ATTN_HEATMAP_OPTIONS_INIT;
    cli_attention_options ao = CLI_ATTENTION_OPTIONS_INIT;
    cli_tokens tokens = {0}, key_tokens = {0};
    cli_maps maps = {0};
    char **titles = NULL;
    int64_t n_titles = 0;
    int rc = CLI_OK;

    cli_args args;
    const char *value;
    cli_args_begin(&args, &cli_map_spec, argc, argv);
    for (int id; (id = cli_args_next(&args, &value)) != CLI_ARGS_END;) {
        if (id == CLI_ARGS_STOP) return args.status;
        int taken = cli_attention_take(&ao, &args, id, value);
        if (taken < 0) return CLI_USAGE_ERROR;
        if (taken) continue;
        const char *flag = args.flag;
        switch (id) {
        case F_WEIGHTS: src.weights_path = value; break;
        case F_MODEL: src.model_path = value; break;
        case F_TEXT: src.text = value; break;
        case F_LAYER: src.layer_text = value; break;
        case F_O: out_path = value; break;
        case F_HEADS:
            src.head_text = value;
            src.head_flag = flag;
            break;
        case F_TOKENS: tokens_text = value; break;
        case F_KEY_TOKENS: key_tokens_text = value; break;
        case F_TITLE: hopt.title = value; break;
        case F_LANG:
            if (strcmp(value, "en") && strcmp(value, "zh"))
                return cli_usage_error("map", "--lang expects en or zh, got '%s'", value);
            hopt.lang = value;
            break;
        case F_VALUES:
            if (strcmp(value, "auto") == 0) hopt.values = 0;
            else if (strcmp(value, "on") == 0) hopt.values = 1;
            else if (strcmp(value, "off") == 0) hopt.values = -1;
            else return cli_usage_error("map", "--values expects auto, on or off, got '%s'", value);
            break;
        case F_BATCH:
            if (!cli_parse_int("map", flag, value, 0, INT64_MAX, &src.batch)) return CLI_USAGE_ERROR;
            break;
        case F_COLUMNS: {
            int64_t columns;
            if (!cli_parse_int("map", flag, value, 1, 64, &columns)) return CLI_USAGE_ERROR;
            hopt.columns = (int)columns;
            break;
        }
        default: /* --vmin, --vmax */
            if (id == F_VMAX && strcmp(value, "auto") == 0) vmax_auto = true;
            else if (!cli_parse_float("map", flag, value, -1e30, 1e30, id == F_VMIN ? &vmin : &vmax))
                return CLI_USAGE_ERROR;
            break;
        }
    }
    if (!src.weights_path && !src.model_path)
        return cli_usage_error("map", "missing --weights W.npy (maps made elsewhere), or --model MODEL --text TEXT (a run)");
    if (src.weights_path && src.model_path)
        return cli_usage_error("map", "give either --weights (maps made elsewhere) or --model (a run), not both");
    if (!src.model_path != !src.text)
        return cli_usage_error("map", src.text ? "--text needs --model MODEL" : "--model needs --text TEXT (the text to run)");
    if (src.model_path && (tokens_text || key_tokens_text || cli_attention_given(&args) || cli_args_given(&args, F_BATCH)))
        return cli_usage_error("map", "with --model the labels are the model's tokens and the mask its own: "
                               "--tokens, --key-tokens, --batch and the mask options are for --weights");
    if (!out_path) return cli_usage_error("map", "missing -o MAP.png|.svg|.pdf");
    if (!strrchr(out_path, '.') || (strcasecmp(strrchr(out_path, '.'), ".png") &&
                                    strcasecmp(strrchr(out_path, '.'), ".svg") &&
                                    strcasecmp(strrchr(out_path, '.'), ".pdf")))
        return cli_usage_error("map", "-o '%s': the name must end in .png, .svg or .pdf", out_path);
    {
        const char *tokens_file = tokens_text && tokens_text[0] == '@' ? tokens_text + 1 : NULL;
        const char *key_tokens_file = key_tokens_text && key_tokens_text[0] == '@' ? key_tokens_text + 1 : NULL;
        const char *text_file = src.text && src.text[0] == '@' ? src.text + 1 : NULL;
        const char *const inputs[] = {src.weights_path, src.model_path, text_file, tokens_file, key_tokens_file,
                                      ao.mask_path, ao.bias_path, ao.key_lengths_path};
        const char *const outputs[] = {out_path};
        if (cli_check_paths("map", inputs, 8, outputs, 1)) return CLI_USAGE_ERROR;
    }
    const bool fixed = cli_args_given(&args, F_VMIN) || (cli_args_given(&args, F_VMAX) && !vmax_auto);
    if (vmax_auto && cli_args_given(&args, F_VMIN))
        return cli_usage_error("map", "--vmax auto starts the scale at 0: drop --vmin, or give --vmax a number");
    if (fixed) {
        if (!(vmax > vmin))
            return cli_usage_error("map", "--vmax (%g) must be greater than --vmin (%g)%s", vmax, vmin,
                                   cli_args_given(&args, F_VMIN) != cli_args_given(&args, F_VMAX)
                                       ? " (the end not given is its default: 0 for --vmin, 1 for --vmax)" : "");
        hopt.vmin = (float)vmin;
        hopt.vmax = (float)vmax;
    }
    if (!attn_pictures_available()) {
        /* Before a model is loaded for nothing: the library's own message. */
        attn_heatmap_write(out_path, NULL, 0, 0, 0, NULL);
        return cli_data_error("map", "%s", attn_last_error());
    }
    if ((tokens_text && (rc = cli_tokens_parse("map", "--tokens", tokens_text, &tokens))) ||
        (key_tokens_text && (rc = cli_tokens_parse("map", "--key-tokens", key_tokens_text, &key_tokens))))
        goto cleanup;

    src.quiet = cli_args_given(&args, CLI_ID_QUIET);
    if ((rc = cli_maps_load("map", &src, &ao, &maps))) goto cleanup;
    const int64_t L = maps.len_q, S = maps.len_kv, n_maps = maps.n_layers * maps.n_heads;
    if ((rc = cli_tokens_check("map", "--tokens", &tokens, L, "queries (L) in --weights")) ||
        (rc = cli_tokens_check("map", "--key-tokens", &key_tokens, S, "keys (S) in --weights")))
        goto cleanup;
    if (key_tokens.items == NULL && tokens.items && S != L) {
        rc = cli_data_error("map", "--tokens labels the %lld queries; the %lld keys differ in number, so "
                            "give --key-tokens for them too", (long long)L, (long long)S);
        goto cleanup;
    }
    /* Automatic colour scale: asked for, or a long map and no scale given. */
    if (vmax_auto || (!fixed && (L > AUTO_FROM || S > AUTO_FROM))) hopt.vmax_quantile = AUTO_QUANTILE;
    hopt.query_labels = maps.labels ? (const char *const *)maps.labels : (const char *const *)tokens.items;
    hopt.key_labels = (const char *const *)key_tokens.items;
    hopt.visible = maps.visible;
    hopt.head_ids = maps.head_ids;
    if (!hopt.title && maps.about) hopt.title = maps.about;
    if (maps.layered) {
        /* A layer x head grid: a row per layer, each panel titled with both. */
        const bool zh = hopt.lang && strcmp(hopt.lang, "zh") == 0;
        titles = calloc((size_t)n_maps, sizeof *titles);
        if (!titles) {
            rc = cli_data_error("map", "out of memory");
            goto cleanup;
        }
        for (int64_t k = 0; k < n_maps; k++, n_titles++) {
            char title[64];
            snprintf(title, sizeof title, zh ? "层 %lld · 头 %lld" : "layer %lld · head %lld",
                     (long long)maps.layer_ids[k / maps.n_heads], (long long)maps.head_ids[k % maps.n_heads]);
            if (!(titles[k] = strdup(title))) {
                rc = cli_data_error("map", "out of memory");
                goto cleanup;
            }
        }
        hopt.panel_titles = (const char *const *)titles;
        hopt.head_ids = NULL;
        if (!hopt.columns && maps.n_layers > 1) hopt.columns = (int)(maps.n_heads < 64 ? maps.n_heads : 64);
    }
    if (!src.model_path)
        check_hidden_cells(&maps, ao.opt.causal || ao.opt.window || ao.key_lengths_path || ao.mask_path || ao.bias_path);
    attn_status st = attn_heatmap_write(out_path, maps.weights, n_maps, L, S, &hopt);
    if (st != ATTN_OK) {
        rc = cli_data_error("map", "%s", attn_last_error());
    } else if (!cli_args_given(&args, CLI_ID_QUIET)) {
        fprintf(stderr, "attn map: wrote %s (", out_path);
        if (maps.layered) fprintf(stderr, "%lld layer%s x ", (long long)maps.n_layers, maps.n_layers == 1 ? "" : "s");
        fprintf(stderr, "%lld head%s of %lld x %lld", (long long)maps.n_heads, maps.n_heads == 1 ? "" : "s",
                (long long)L, (long long)S);
        if (hopt.vmax_quantile > 0) fprintf(stderr, ", colour scale 0 to the 99th percentile");
        fprintf(stderr, ")\n");
    }

cleanup:
    for (int64_t k = 0; k < n_titles; k++) free(titles[k]);
    free(titles);
    cli_maps_free(&maps);
    cli_tokens_free(&tokens);
    cli_tokens_free(&key_tokens);
    cli_attention_options_free(&ao);
    return rc;
}
