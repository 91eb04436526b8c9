/*
 * cmd_map.c — `attn map`: attention weights as heat maps (PNG, SVG or PDF).
 *
 * Shapes: --weights [L, S] (one head), [H, L, S] or [B, H, L, S] (as written
 * by `attn sdpa --weights` / `attn mha --weights`); rows are queries, columns
 * the keys they read.  The shared mask options mark the cells a mask hides,
 * so hidden keys are drawn hatched rather than as weight 0.
 */
#include "cli_pictures.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

enum { F_WEIGHTS = 1, F_O, F_HEADS, F_TOKENS, F_KEY_TOKENS, F_TITLE, F_LANG, F_VALUES, F_BATCH, F_COLUMNS,
       F_VMIN, F_VMAX };

static const cli_flag map_flags[] = {
    {"--weights", "W.npy", F_WEIGHTS, 0},       {"-o", "MAP.png|.svg|.pdf", F_O, 0},
    {"--heads", "LIST", F_HEADS, 0},            {"--tokens", "LIST|@FILE", F_TOKENS, 0},
    {"--key-tokens", "LIST|@FILE", F_KEY_TOKENS, 0}, {"--title", "TEXT", F_TITLE, 0},
    {"--lang", "en|zh", F_LANG, 0},             {"--values", "auto|on|off", F_VALUES, 0},
    {"--batch", "N", F_BATCH, 0},               {"--columns", "N", F_COLUMNS, 0},
    {"--vmin", "X", F_VMIN, 0},                 {"--vmax", "X", F_VMAX, 0},
    CLI_FLAGS_END};

static void map_help(FILE *out) {
    fprintf(out,
    "usage: attn map --weights W.npy -o MAP.png|MAP.svg|MAP.pdf [--tokens LIST] [--key-tokens LIST]\n"
    "                [--heads LIST] [--batch N] [--title TEXT] [--lang en|zh] [--values auto|on|off]\n"
    "                [--vmin X] [--vmax X] [--columns N] [mask options] [--quiet]\n\n"
    "Draws attention weights as heat maps, one panel per head: rows are queries, columns the keys\n"
    "they read (as in the chapter's Figure 3), token labels on both axes, a colour legend, hidden\n"
    "cells hatched, each weight printed when a map is at most 16 x 16.\n\n"
    "input:\n"
    "  --weights W.npy    float weights [L, S], [H, L, S] or [B, H, L, S]\n"
    "  --batch N          the batch to draw from a 4-D file (default 0)\n"
    "  --heads LIST       heads to draw, e.g. 0,3 or 0-3 (default all)\n"
    "  --tokens LIST      query labels: \"我,吃,了\" (comma-separated) or @FILE (one per line);\n"
    "                     also the key labels when L = S\n"
    "  --key-tokens LIST  key labels (cross-attention)\n"
    "output (by extension; written atomically):\n"
    "  -o MAP.png|.svg    the heads side by side in a grid\n"
    "  -o MAP.pdf         one head per page\n"
    "  --title TEXT       a line above the maps        --lang en|zh   axis captions\n"
    "  --values auto|on|off   print each weight in its cell (auto: maps of at most 16 x 16)\n"
    "  --vmin X --vmax X  the colour scale, vmin < vmax (default [0, 1], or the data's range when\n"
    "                     values lie outside it)       --columns N   panels per row\n"
    "  --quiet            no line on stderr naming what was written\n\n"
    "masks: the options below (as in attn sdpa) mark the cells they hide; hidden cells are drawn\n"
    "hatched grey, never as the colour of 0.  Give the options the weights were computed with:\n"
    "a hidden cell that holds weight, or cells of weight exactly 0 with no mask given, are warned of.\n"
    "%s\n"
    "example:\n"
    "  attn sdpa -q Q.npy -k K.npy -v V.npy -o O.npy --weights W.npy --causal\n"
    "  attn map --weights W.npy --causal --tokens \"我,吃,了,一,个,苹,果\" -o map.png\n",
    cli_mask_help);
}

static const cli_flag *const map_tables[] = {map_flags, cli_mask_flags, cli_quiet_flags, NULL};
const cli_spec cli_map_spec = {"map", map_tables, map_help, false};

/* The plausible mistake the hatching cannot show: weights computed with
 * other mask options than the ones given.  Warns when a cell the options
 * hide holds weight, and when no mask was given but cells hold exactly 0
 * (a softmax gives exactly 0 only to hidden keys, or after underflow). */
static void check_hidden_cells(const float *w, const uint8_t *visible, int64_t n_heads, int64_t L, int64_t S,
                               const int64_t *head_ids, bool masks_given) {
    int64_t holding = 0, zeros = 0, at = -1;
    float largest = 0;
    for (int64_t c = 0; c < n_heads * L * S; c++) {
        if (!visible[c] && w[c] != 0) {
            if (holding++ == 0 || fabsf(w[c]) > largest) largest = fabsf(w[c]), at = c;
        }
        zeros += w[c] == 0;
    }
    if (holding) {
        const int64_t head = at / (L * S), query = at / S % L, key = at % S;
        cli_warning("map", "%lld cells the mask options hide hold weight (the largest, %.3g, at head %lld, query "
                    "%lld, key %lld): the weights were computed with other mask options than these; the cells are "
                    "drawn hatched all the same", (long long)holding, (double)largest,
                    (long long)(head_ids ? head_ids[head] : head), (long long)query, (long long)key);
    } else if (!masks_given && zeros) {
        cli_warning("map", "%lld cells hold weight exactly 0 and are drawn as the colour of 0; if a mask hid them, "
                    "give its options (e.g. --causal) to draw them hatched", (long long)zeros);
    }
}

int cmd_map(int argc, char **argv) {
    const char *weights_path = NULL, *out_path = NULL, *heads_text = NULL;
    const char *tokens_text = NULL, *key_tokens_text = NULL;
    int64_t batch = 0;
    double vmin = 0, vmax = 1; /* one end given: the other is its default */
    attn_heatmap_options hopt = ATTN_HEATMAP_OPTIONS_INIT;
    cli_attention_options ao = CLI_ATTENTION_OPTIONS_INIT;
    cli_tokens tokens = {0}, key_tokens = {0};
    cli_index_list heads = {0};
    attn_array w = {0};
    float *selected = NULL;
    uint8_t *visible_all = NULL, *visible = NULL;
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
        case F_WEIGHTS: weights_path = value; break;
        case F_O: out_path = value; break;
        case F_HEADS: heads_text = value; break;
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
            if (!cli_parse_int("map", flag, value, 0, INT64_MAX, &batch)) return CLI_USAGE_ERROR;
            break;
        case F_COLUMNS: {
            int64_t columns;
            if (!cli_parse_int("map", flag, value, 1, 64, &columns)) return CLI_USAGE_ERROR;
            hopt.columns = (int)columns;
            break;
        }
        default: /* --vmin, --vmax */
            if (!cli_parse_float("map", flag, value, -1e30, 1e30, id == F_VMIN ? &vmin : &vmax)) return CLI_USAGE_ERROR;
            break;
        }
    }
    if (!weights_path || !out_path)
        return cli_usage_error("map", "missing %s", !weights_path ? "--weights W.npy" : "-o MAP.png|.svg|.pdf");
    if (!strrchr(out_path, '.') || (strcasecmp(strrchr(out_path, '.'), ".png") &&
                                    strcasecmp(strrchr(out_path, '.'), ".svg") &&
                                    strcasecmp(strrchr(out_path, '.'), ".pdf")))
        return cli_usage_error("map", "-o '%s': the name must end in .png, .svg or .pdf", out_path);
    {
        const char *tokens_file = tokens_text && tokens_text[0] == '@' ? tokens_text + 1 : NULL;
        const char *key_tokens_file = key_tokens_text && key_tokens_text[0] == '@' ? key_tokens_text + 1 : NULL;
        const char *const inputs[] = {weights_path, tokens_file, key_tokens_file, ao.mask_path, ao.bias_path,
                                      ao.key_lengths_path};
        const char *const outputs[] = {out_path};
        if (cli_check_paths("map", inputs, 6, outputs, 1)) return CLI_USAGE_ERROR;
    }
    /* Neither end given: the library's automatic scale ([0, 1], or the
     * data's range when values lie outside it). */
    if (cli_args_given(&args, F_VMIN) || cli_args_given(&args, F_VMAX)) {
        if (!(vmax > vmin))
            return cli_usage_error("map", "--vmax (%g) must be greater than --vmin (%g)%s", vmax, vmin,
                                   cli_args_given(&args, F_VMIN) != cli_args_given(&args, F_VMAX)
                                       ? " (the end not given is its default: 0 for --vmin, 1 for --vmax)" : "");
        hopt.vmin = (float)vmin;
        hopt.vmax = (float)vmax;
    }
    if (heads_text && !cli_index_list_parse("map", "--heads", heads_text, &heads)) return CLI_USAGE_ERROR;
    if ((tokens_text && (rc = cli_tokens_parse("map", "--tokens", tokens_text, &tokens))) ||
        (key_tokens_text && (rc = cli_tokens_parse("map", "--key-tokens", key_tokens_text, &key_tokens))))
        goto cleanup;

    if (!cli_load_f32("map", "--weights", weights_path, false, &w)) {
        rc = CLI_DATA_ERROR;
        goto cleanup;
    }
    char shape[128];
    if (w.ndim < 2 || w.ndim > 4 || w.count == 0) {
        rc = cli_data_error("map", "--weights '%s' has shape %s; expected [L, S], [H, L, S] or [B, H, L, S]",
                            weights_path, cli_shape_str(&w, shape, sizeof shape));
        goto cleanup;
    }
    const int64_t B = w.ndim == 4 ? w.shape[0] : 1, H = w.ndim >= 3 ? w.shape[w.ndim - 3] : 1;
    const int64_t L = w.shape[w.ndim - 2], S = w.shape[w.ndim - 1];
    if (batch >= B) {
        rc = cli_data_error("map", "--batch %lld is out of range: '%s' has shape %s, batch 0 to %lld",
                            (long long)batch, weights_path, cli_shape_str(&w, shape, sizeof shape),
                            (long long)B - 1);
        goto cleanup;
    }
    for (int64_t n = 0; n < heads.count; n++)
        if (heads.items[n] >= H) {
            rc = cli_data_error("map", "--heads: head %lld is out of range: '%s' has shape %s, heads 0 to %lld",
                                (long long)heads.items[n], weights_path, cli_shape_str(&w, shape, sizeof shape),
                                (long long)H - 1);
            goto cleanup;
        }
    if ((rc = cli_tokens_check("map", "--tokens", &tokens, L, "queries (L) in --weights")) ||
        (rc = cli_tokens_check("map", "--key-tokens", &key_tokens, S, "keys (S) in --weights")))
        goto cleanup;
    if (key_tokens.items == NULL && tokens.items && S != L) {
        rc = cli_data_error("map", "--tokens labels the %lld queries; the %lld keys differ in number, so "
                            "give --key-tokens for them too", (long long)L, (long long)S);
        goto cleanup;
    }
    if ((rc = cli_load_attention_inputs("map", &ao, B, H, L, S))) goto cleanup;
    visible_all = cli_visibility("map", &ao, B, H, L, S);
    if (!visible_all) {
        rc = CLI_DATA_ERROR;
        goto cleanup;
    }

    /* The chosen heads of the chosen batch, contiguous: [n, L, S]. */
    const int64_t n_heads = heads.count ? heads.count : H, map = L * S;
    selected = malloc((size_t)(n_heads * map) * sizeof(float));
    visible = malloc((size_t)(n_heads * map));
    int64_t *ids = heads.count ? heads.items : NULL;
    if (!selected || !visible) {
        rc = cli_data_error("map", "out of memory");
        goto cleanup;
    }
    for (int64_t n = 0; n < n_heads; n++) {
        int64_t h = ids ? ids[n] : n;
        memcpy(selected + n * map, (float *)w.data + (batch * H + h) * map, (size_t)map * sizeof(float));
        memcpy(visible + n * map, visible_all + (batch * H + h) * map, (size_t)map);
    }
    hopt.query_labels = (const char *const *)tokens.items;
    hopt.key_labels = (const char *const *)key_tokens.items;
    hopt.visible = visible;
    hopt.head_ids = ids;
    check_hidden_cells(selected, visible, n_heads, L, S, ids,
                       ao.opt.causal || ao.opt.window || ao.key_lengths_path || ao.mask_path || ao.bias_path);
    attn_status st = attn_heatmap_write(out_path, selected, n_heads, L, S, &hopt);
    if (st != ATTN_OK) {
        rc = cli_data_error("map", "%s", attn_last_error());
    } else if (!cli_args_given(&args, CLI_ID_QUIET)) {
        fprintf(stderr, "attn map: wrote %s (%lld head%s of %lld x %lld)\n", out_path, (long long)n_heads,
                n_heads == 1 ? "" : "s", (long long)L, (long long)S);
    }

cleanup:
    free(selected);
    free(visible);
    free(visible_all);
    attn_array_free(&w);
    cli_tokens_free(&tokens);
    cli_tokens_free(&key_tokens);
    cli_index_list_free(&heads);
    cli_attention_options_free(&ao);
    return rc;
}
