/*
 * cmd_map.c — `attn map`: attention weights as heat maps (PNG, SVG or PDF).
 *
 * Shapes: --weights [L, S] (one head), [H, L, S] or [B, H, L, S] (as written
 * by `attn sdpa --weights` / `attn mha --weights`); rows are queries, columns
 * the keys they read.  The shared mask options mark the cells a mask hides,
 * so hidden keys are drawn hatched rather than as weight 0.
 */
#include "cli_pictures.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const char map_usage[] =
    "usage: attn map --weights W.npy -o MAP.png|MAP.svg|MAP.pdf [--tokens LIST] [--key-tokens LIST]\n"
    "                [--heads LIST] [--batch N] [--title TEXT] [--lang en|zh] [--values auto|on|off]\n"
    "                [--vmin X] [--vmax X] [--columns N] [mask options]\n\n"
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
    "  --vmin X --vmax X  the colour scale (default [0, 1])      --columns N   panels per row\n\n"
    "masks: the options below (as in attn sdpa) mark the cells they hide; hidden cells are drawn\n"
    "hatched grey, never as the colour of 0.\n"
    "%s\n"
    "example:\n"
    "  attn sdpa -q Q.npy -k K.npy -v V.npy -o O.npy --weights W.npy --causal\n"
    "  attn map --weights W.npy --causal --tokens \"我,吃,了,一,个,苹,果\" -o map.png\n";

int cmd_map(int argc, char **argv) {
    const char *weights_path = NULL, *out_path = NULL, *heads_text = NULL;
    const char *tokens_text = NULL, *key_tokens_text = NULL;
    int64_t batch = 0;
    double vmin = 0, vmax = 0;
    attn_heatmap_options hopt = ATTN_HEATMAP_OPTIONS_INIT;
    cli_attention_options ao = CLI_ATTENTION_OPTIONS_INIT;
    cli_tokens tokens = {0}, key_tokens = {0};
    cli_index_list heads = {0};
    attn_array w = {0};
    float *selected = NULL;
    uint8_t *visible_all = NULL, *visible = NULL;
    int rc = CLI_OK;

    for (int i = 1; i < argc;) {
        const char *flag = argv[i], *value = i + 1 < argc ? argv[i + 1] : NULL;
        if (cli_is_help(flag)) {
            printf(map_usage, cli_attention_options_help);
            return CLI_OK;
        }
        int taken = cli_parse_attention_option("map", argc, argv, &i, &ao);
        if (taken < 0) return CLI_USAGE_ERROR;
        if (taken) continue;
        static const char *const known[] = {"--weights", "-o", "--heads", "--tokens", "--key-tokens",
                                            "--title", "--lang", "--values", "--batch", "--columns",
                                            "--vmin", "--vmax"};
        bool is_known = false;
        for (size_t n = 0; n < sizeof known / sizeof known[0]; n++) is_known |= strcmp(flag, known[n]) == 0;
        if (!is_known) return cli_usage_error("map", "unknown option '%s'", flag);
        if (!value) return cli_usage_error("map", "%s needs a value", flag);
        if (strcmp(flag, "--weights") == 0) weights_path = value;
        else if (strcmp(flag, "-o") == 0) out_path = value;
        else if (strcmp(flag, "--heads") == 0) heads_text = value;
        else if (strcmp(flag, "--tokens") == 0) tokens_text = value;
        else if (strcmp(flag, "--key-tokens") == 0) key_tokens_text = value;
        else if (strcmp(flag, "--title") == 0) hopt.title = value;
        else if (strcmp(flag, "--lang") == 0) {
            if (strcmp(value, "en") && strcmp(value, "zh"))
                return cli_usage_error("map", "--lang expects en or zh, got '%s'", value);
            hopt.lang = value;
        } else if (strcmp(flag, "--values") == 0) {
            if (strcmp(value, "auto") == 0) hopt.values = 0;
            else if (strcmp(value, "on") == 0) hopt.values = 1;
            else if (strcmp(value, "off") == 0) hopt.values = -1;
            else return cli_usage_error("map", "--values expects auto, on or off, got '%s'", value);
        } else if (strcmp(flag, "--batch") == 0) {
            if (!cli_parse_int("map", flag, value, 0, INT64_MAX, &batch)) return CLI_USAGE_ERROR;
        } else if (strcmp(flag, "--columns") == 0) {
            int64_t columns;
            if (!cli_parse_int("map", flag, value, 1, 64, &columns)) return CLI_USAGE_ERROR;
            hopt.columns = (int)columns;
        } else { /* --vmin, --vmax */
            if (!cli_parse_float("map", flag, value, -1e30, 1e30, flag[3] == 'i' ? &vmin : &vmax))
                return CLI_USAGE_ERROR;
        }
        i += 2;
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
    if ((vmin != 0 || vmax != 0) && !(vmax > vmin))
        return cli_usage_error("map", "--vmax (%g) must be greater than --vmin (%g)", vmax, vmin);
    hopt.vmin = (float)vmin;
    hopt.vmax = (float)vmax;
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
    attn_status st = attn_heatmap_write(out_path, selected, n_heads, L, S, &hopt);
    if (st != ATTN_OK) rc = cli_data_error("map", "%s", attn_last_error());

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
