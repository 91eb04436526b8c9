/*
 * cli_maps.c — the maps of a model's run or of a weights file, for `attn
 * map` and `attn report` (cli_maps.h).
 *
 * Shape legend: a file's maps [NL, B, H, L, S] (layers, batches, heads,
 * queries, keys, the absent axes 1); the selection [n_layers, n_heads, L, S].
 */
#include "cli_maps.h"
#include "cli_generation.h"
#include "cli_input.h"

#include "attn_analysis.h"
#include "attn_decoder.h"
#include "attn_gguf.h"
#include "attn_model_interp.h"
#include "attn_tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Tokens of one model run: the forward costs O(L^2) per layer and the maps
 * layers x heads x L^2 floats (Qwen2.5 0.5B at 1024 tokens: 1.4 GiB). */
#define MODEL_TOKENS_MAX 1024
#define MAPS_BYTES_MAX ((uint64_t)2 << 30)

/* "all" or a list "0,3" / "0-3", each below count; NULL text means all.
 * Fills ids (malloc'd) and *n.  Prints and returns the error. */
static int select_indices(const char *cmd, const char *flag, const char *text, int64_t count, const char *what,
                          int64_t **ids, int64_t *n) {
    cli_index_list list = {0};
    if (text && strcmp(text, "all") != 0) {
        if (!cli_index_list_parse(cmd, flag, text, &list)) return CLI_USAGE_ERROR;
        for (int64_t k = 0; k < list.count; k++)
            if (list.items[k] >= count) {
                const long long bad = (long long)list.items[k];
                cli_index_list_free(&list);
                return cli_data_error(cmd, "%s: %s %lld is out of range: there are %lld (0 to %lld)", flag, what, bad,
                                      (long long)count, (long long)count - 1);
            }
        *ids = list.items;
        *n = list.count;
        return CLI_OK;
    }
    *ids = malloc((size_t)count * sizeof **ids);
    if (!*ids) return cli_data_error(cmd, "out of memory");
    for (int64_t k = 0; k < count; k++) (*ids)[k] = k;
    *n = count;
    return CLI_OK;
}

/* Length of the valid UTF-8 character at s (n bytes left), or 0. */
static size_t utf8_char(const unsigned char *s, size_t n) {
    if (s[0] < 0x80) return 1;
    const size_t len = s[0] >= 0xC2 && s[0] <= 0xDF ? 2 : s[0] >= 0xE0 && s[0] <= 0xEF ? 3
                     : s[0] >= 0xF0 && s[0] <= 0xF4 ? 4 : 0;
    if (!len || len > n) return 0;
    for (size_t i = 1; i < len; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    if ((s[0] == 0xE0 && s[1] < 0xA0) || (s[0] == 0xED && s[1] > 0x9F) || (s[0] == 0xF0 && s[1] < 0x90) ||
        (s[0] == 0xF4 && s[1] > 0x8F))
        return 0; /* overlong, surrogate or past U+10FFFF */
    return len;
}

/* A token's label (cli_maps.h): its own bytes decoded.  A byte-level BPE token may hold
 * part of a character (a Chinese character is 3 bytes, sometimes split over
 * two tokens): such bytes are shown as \xNN rather than replaced, so that
 * the label says what the token is.  Newlines and tabs are written \n, \t. */
char *cli_token_label(const attn_tokenizer *t, int32_t id) {
    char raw[256];
    size_t len = 0;
    if (attn_tokenizer_decode(t, &id, 1, 0, raw, sizeof raw, &len) != ATTN_OK) len = 0;
    if (len >= sizeof raw) len = sizeof raw - 1;
    char *out = malloc(len * 4 + 1);
    if (!out) return NULL;
    size_t o = 0;
    const unsigned char *s = (const unsigned char *)raw;
    for (size_t i = 0; i < len;) {
        const size_t c = utf8_char(s + i, len - i);
        if (s[i] == '\n' || s[i] == '\t') {
            o += (size_t)sprintf(out + o, "\\%c", s[i] == '\n' ? 'n' : 't');
            i++;
        } else if (c == 0 || s[i] < 0x20 || s[i] == 0x7f) {
            o += (size_t)sprintf(out + o, "\\x%02x", s[i]);
            i++;
        } else {
            memcpy(out + o, s + i, c);
            o += c;
            i += c;
        }
    }
    out[o] = 0;
    return out;
}

/* The text of flag (--text, --compare-text, --source-text): the value, or
 * the file @FILE names. */
static int read_text(const char *cmd, const char *flag, const char *value, char **text, size_t *len) {
    if (value[0] != '@') {
        *text = strdup(value);
        *len = strlen(value);
        return *text ? CLI_OK : cli_data_error(cmd, "out of memory");
    }
    return cli_read_whole(cmd, flag, value + 1, false, CLI_PROMPT_MAX, text, len);
}

/* A run's last row after the final norm (ln_final.hook_normalized; the
 * forward computes it when logits are asked for). */
typedef struct final_row {
    float *row;      /* [d] */
    float *logits;   /* [V], the last position's (not read) */
} final_row;

static int keep_final_row(void *user, const attn_decoder_hook_tensor *t) {
    const final_row *f = user;
    memcpy(f->row, t->data + (t->shape[0] - 1) * t->shape[1], (size_t)t->shape[1] * sizeof(float));
    return 0;
}

/* out asks for the last position's final-norm row into f (buffers malloc'd
 * here, freed by final_row_free). */
static int final_row_ask(const char *cmd, const attn_decoder_config *c, final_row *f, attn_decoder_outputs *out) {
    f->row = malloc((size_t)c->d_model * sizeof(float));
    f->logits = malloc((size_t)c->vocab * sizeof(float));
    if (!f->row || !f->logits) return cli_data_error(cmd, "out of memory");
    out->logits = f->logits;
    out->last_only = 1;
    out->tensor_hook = keep_final_row;
    out->tensor_hook_user = f;
    out->tensor_hook_points = 1u << ATTN_DECODER_HOOK_LN_FINAL;
    return CLI_OK;
}

static void final_row_free(final_row *f) {
    free(f->row);
    free(f->logits);
}

/* The cosine of the last positions of two runs' residual streams, row by
 * row (attn_model_stream_cosine): hidden_a [N + 1, La, d], hidden_b
 * [N + 1, Lb, d], then of their rows after the final norm (final_a,
 * final_b [d]), as `attn demo --model` shows them; and the rows' labels. */
static int cosine_series(const char *cmd, const float *hidden_a, int64_t la, const float *hidden_b, int64_t lb,
                         const float *final_a, const float *final_b, int64_t rows, int64_t d, cli_maps *m) {
    m->cosine = malloc((size_t)(rows + 1) * sizeof *m->cosine);
    m->cosine_labels = calloc((size_t)(rows + 1), sizeof *m->cosine_labels);
    if (!m->cosine || !m->cosine_labels) return cli_data_error(cmd, "out of memory");
    m->n_cosine = rows + 1;
    if (attn_model_stream_cosine(hidden_a, la, -1, hidden_b, lb, -1, rows, d, m->cosine) ||
        attn_model_stream_cosine(final_a, 1, 0, final_b, 1, 0, 1, d, m->cosine + rows))
        return cli_data_error(cmd, "%s", attn_last_error());
    for (int64_t r = 0; r <= rows; r++) {
        char label[24];
        if (r == 0) snprintf(label, sizeof label, "embed");
        else if (r == rows) snprintf(label, sizeof label, "final norm");
        else snprintf(label, sizeof label, "%lld", (long long)(r - 1));
        if (!(m->cosine_labels[r] = strdup(label))) return cli_data_error(cmd, "out of memory");
    }
    return CLI_OK;
}

/* The ids of a second text (--compare-text, --source-text), malloc'd. */
static int encode_text(const char *cmd, const char *flag, const attn_tokenizer *tok, const char *value, int32_t **ids,
                       int64_t *n) {
    char *text = NULL;
    size_t len = 0, n_ids = 0;
    int rc = read_text(cmd, flag, value, &text, &len);
    if (rc) return rc;
    if (!(*ids = malloc((len + 2) * sizeof **ids)))
        rc = cli_data_error(cmd, "out of memory");
    else if (attn_tokenizer_encode(tok, text, len, 0, *ids, len + 2, &n_ids))
        rc = cli_data_error(cmd, "%s: %s", flag, attn_last_error());
    else if (n_ids == 0 || n_ids > MODEL_TOKENS_MAX)
        rc = cli_data_error(cmd, "%s is %zu tokens in this model's vocabulary; give 1 to %d", flag, n_ids,
                            MODEL_TOKENS_MAX);
    *n = (int64_t)n_ids;
    free(text);
    return rc;
}

/* The second text's ids and residual stream [N + 1, L, d] (malloc'd). */
static int run_compare(const char *cmd, const char *flag, const attn_decoder *dec, const attn_tokenizer *tok,
                       const char *value, float **hidden, final_row *final, int64_t *L, char **last_label) {
    int32_t *ids = NULL;
    int rc = encode_text(cmd, flag, tok, value, &ids, L);
    const attn_decoder_config *c = attn_decoder_get_config(dec);
    if (!rc && !(*hidden = malloc((size_t)((c->n_layers + 1) * *L * c->d_model) * sizeof(float))))
        rc = cli_data_error(cmd, "out of memory");
    attn_decoder_outputs out = ATTN_DECODER_OUTPUTS_INIT;
    if (!rc) rc = final_row_ask(cmd, c, final, &out);
    if (!rc) {
        out.hidden = *hidden;
        if (attn_decoder_forward(dec, ids, *L, &out))
            rc = cli_data_error(cmd, "the forward over %s: %s", flag, attn_last_error());
        else if (!(*last_label = cli_token_label(tok, ids[*L - 1])))
            rc = cli_data_error(cmd, "out of memory");
    }
    free(ids);
    return rc;
}

typedef struct kept_paths {
    const cli_maps *m;
    attn_paths *out; /* [m->n_layers] */
} kept_paths;

/* attn_model_paths_each's callback: a shown layer's buffers the report
 * reads (every case's z, the K-only weights, the interaction) taken out of
 * its decomposition; the rest (q, k, v, scores, the other patterns) is freed. */
static attn_status keep_layer_paths(void *user, int64_t layer, attn_paths *p) {
    const kept_paths *k = user;
    for (int64_t n = 0; n < k->m->n_layers; n++) {
        if (k->m->layer_ids[n] != layer) continue;
        attn_paths *keep = &k->out[n];
        for (int c = 0; c < ATTN_PATH_CASES; c++) {
            keep->run[c] = p->run[c];
            attn_trace *t = &keep->run[c];
            t->q = t->k = t->v = t->scores = t->result = t->attn_out = NULL;
            if (c != ATTN_PATH_K_ONLY) t->pattern = NULL;
            p->run[c].z = NULL;
        }
        p->run[ATTN_PATH_K_ONLY].pattern = NULL;
        keep->interaction_z = p->interaction_z;
        p->interaction_z = NULL;
        break; /* model_paths refuses a layer listed twice */
    }
    return ATTN_OK;
}

/* The path decomposition of the shown layers against --source-text. */
static int model_paths(const char *cmd, const cli_map_source *src, const attn_decoder *dec, const attn_tokenizer *tok,
                       const int32_t *ids, int64_t L, cli_maps *m) {
    int32_t *changed = NULL;
    int64_t n = 0;
    for (int64_t a = 0; a < m->n_layers; a++)
        for (int64_t b = a + 1; b < m->n_layers; b++)
            if (m->layer_ids[a] == m->layer_ids[b])
                return cli_usage_error(cmd, "--layer lists layer %lld twice; with --source-text name each layer once",
                                       (long long)m->layer_ids[a]);
    int rc = encode_text(cmd, "--source-text", tok, src->source_text, &changed, &n);
    if (!rc && n != L && src->panels.attribute) { /* attribution patching compares from the end: no tables */
        if (!src->quiet)
            fprintf(stderr, "attn %s: --text is %lld tokens and --source-text %lld: no path tables (they pair the "
                    "positions one to one), attribution patching only\n", cmd, (long long)L, (long long)n);
        free(changed);
        return CLI_OK;
    }
    if (!rc && n != L)
        rc = cli_data_error(cmd, "--text is %lld tokens and --source-text %lld: the path decomposition swaps the "
                            "source's keys and values into the text's run position by position, so the two need "
                            "the same number of tokens", (long long)L, (long long)n);
    if (!rc && !(m->paths = calloc((size_t)m->n_layers, sizeof *m->paths))) rc = cli_data_error(cmd, "out of memory");
    kept_paths k = {m, m->paths};
    if (!rc && attn_model_paths_each(dec, ids, changed, L, keep_layer_paths, &k))
        rc = cli_data_error(cmd, "the path decomposition: %s", attn_last_error());
    free(changed);
    return rc;
}

/* --maps value-norms | rollout: the chosen layers' maps in attention[]
 * replaced.  Value-weighted norms (attn_model_value_norms) divided by each
 * row's sum, so that a row reads as shares like the weights it replaces
 * (a zero row stays zero).  Rollout (attn_model_rollout, the heads
 * averaged): one map a layer, in the first chosen head's slot, and the
 * page shows that head alone. */
static int analysis_maps(const char *cmd, const char *kind, const attn_decoder *dec, const int32_t *ids, int64_t L,
                         cli_maps *m, float **attention) {
    const attn_decoder_config *c = attn_decoder_get_config(dec);
    const int64_t H = c->n_heads, N = c->n_layers;
    if (strcmp(kind, "rollout") == 0) {
        double *r = malloc((size_t)(N * L * L) * sizeof *r);
        if (!r) return cli_data_error(cmd, "out of memory");
        if (attn_model_rollout(dec, ids, L, ATTN_ALL, 0.5, r)) {
            free(r);
            return cli_data_error(cmd, "--maps rollout: %s", attn_last_error());
        }
        for (int64_t k = 0; k < m->n_layers; k++)
            for (int64_t i = 0; i < L * L; i++)
                attention[m->layer_ids[k]][m->head_ids[0] * L * L + i] = (float)r[m->layer_ids[k] * L * L + i];
        m->n_heads = 1;
        free(r);
        return CLI_OK;
    }
    float *all = malloc((size_t)(N * H * L * L) * sizeof *all);
    if (!all) return cli_data_error(cmd, "out of memory");
    if (attn_model_value_norms(dec, ids, L, ATTN_ALL, 1, NULL, all)) {
        free(all);
        return cli_data_error(cmd, "--maps value-norms: %s", attn_last_error());
    }
    for (int64_t k = 0; k < m->n_layers; k++) {
        float *a = attention[m->layer_ids[k]];
        memcpy(a, all + m->layer_ids[k] * H * L * L, (size_t)(H * L * L) * sizeof *a);
        for (int64_t row = 0; row < H * L; row++) {
            double sum = 0;
            for (int64_t j = 0; j < L; j++) sum += a[row * L + j];
            if (sum > 0)
                for (int64_t j = 0; j < L; j++) a[row * L + j] = (float)(a[row * L + j] / sum);
        }
    }
    free(all);
    return CLI_OK;
}

static int load_model(const char *cmd, const cli_map_source *src, cli_maps *m) {
    cli_model model = {0};
    const attn_decoder *dec = NULL;
    const attn_tokenizer *tok = NULL;
    char *text = NULL;
    int32_t *ids = NULL;
    float **attention = NULL, *hidden = NULL, *hidden_b = NULL;
    char *last_b = NULL;
    int32_t *corrupted = NULL; /* --source-text's ids, for --attribute */
    int64_t len_b = 0, len_corrupted = 0;
    final_row final_a = {0}, final_b = {0};
    size_t text_len = 0, n_ids = 0;
    int rc = CLI_OK;
    if ((rc = read_text(cmd, "--text", src->text, &text, &text_len))) goto done;
    const double t0 = cli_seconds();
    if ((rc = cli_model_open(cmd, src->model_path, NULL, false, NULL, &model))) goto done; /* names the file */
    dec = model.decoder;
    tok = model.tokenizer;
    const attn_decoder_config *c = attn_decoder_get_config(dec);
    ids = malloc((text_len + 2) * sizeof *ids);
    if (!ids) {
        rc = cli_data_error(cmd, "out of memory");
        goto done;
    }
    if (attn_tokenizer_encode(tok, text, text_len, 0, ids, text_len + 2, &n_ids)) {
        rc = cli_data_error(cmd, "--text: %s", attn_last_error());
        goto done;
    }
    if (n_ids == 0 || n_ids > MODEL_TOKENS_MAX) {
        rc = cli_data_error(cmd, "--text is %zu tokens in this model's vocabulary; give 1 to %d", n_ids,
                            MODEL_TOKENS_MAX);
        goto done;
    }
    const int64_t L = (int64_t)n_ids, H = c->n_heads;
    const bool rollout = src->maps_kind && strcmp(src->maps_kind, "rollout") == 0;
    if ((rc = select_indices(cmd, "--layer", src->layer_text, c->n_layers, "layer", &m->layer_ids, &m->n_layers)) ||
        (rc = select_indices(cmd, src->head_flag ? src->head_flag : "--head", src->head_text, H, "head", &m->head_ids, &m->n_heads)))
        goto done;
    /* The maps (weights and visibility), and with --source-text each
     * layer's kept decomposition: its K-only weights and 6 cases' z. */
    const uint64_t per_layer = (uint64_t)(H * L * L) * (src->source_text ? 9 : 5) +
                               (src->source_text ? (uint64_t)(6 * L * H * c->head_dim) * 4 : 0);
    if ((uint64_t)m->n_layers * per_layer > MAPS_BYTES_MAX) {
        rc = cli_data_error(cmd, "%lld layers x %lld heads x %lld x %lld tokens%s would take over %llu MiB; choose "
                            "fewer layers (--layer) or a shorter text", (long long)m->n_layers, (long long)H,
                            (long long)L, (long long)L, src->source_text ? " with the path decomposition" : "",
                            (unsigned long long)(MAPS_BYTES_MAX >> 20));
        goto done;
    }
    /* Every head of the chosen layers from the forward, then the chosen heads. */
    attention = calloc((size_t)c->n_layers, sizeof *attention);
    if (!attention) {
        rc = cli_data_error(cmd, "out of memory");
        goto done;
    }
    for (int64_t k = 0; k < m->n_layers && !rc; k++) {
        float **slot = &attention[m->layer_ids[k]];
        if (!*slot && !(*slot = malloc((size_t)(H * L * L) * sizeof(float)))) rc = cli_data_error(cmd, "out of memory");
    }
    if (rc) goto done;
    attn_decoder_outputs out = ATTN_DECODER_OUTPUTS_INIT;
    out.attention = attention;
    if (src->compare_text) {
        if (!(hidden = malloc((size_t)((c->n_layers + 1) * L * c->d_model) * sizeof(float)))) {
            rc = cli_data_error(cmd, "out of memory");
            goto done;
        }
        out.hidden = hidden;
        if ((rc = final_row_ask(cmd, c, &final_a, &out))) goto done;
    }
    if (attn_decoder_forward(dec, ids, L, &out)) {
        rc = cli_data_error(cmd, "the forward over --text: %s", attn_last_error());
        goto done;
    }
    if (src->source_text && (rc = model_paths(cmd, src, dec, tok, ids, L, m))) goto done;
    if (src->compare_text) {
        if ((rc = run_compare(cmd, "--compare-text", dec, tok, src->compare_text, &hidden_b, &final_b, &len_b,
                              &last_b)) ||
            (rc = cosine_series(cmd, hidden, L, hidden_b, len_b, final_a.row, final_b.row, c->n_layers + 1,
                                c->d_model, m)))
            goto done;
        if (src->control_text) {
            /* The control's series, into cosine2 (cosine_series fills
             * m->cosine: the first one is kept aside meanwhile). */
            float *hidden_c = NULL;
            final_row final_c = {0};
            int64_t len_c = 0;
            char *last_c = NULL, **labels = m->cosine_labels;
            double *first = m->cosine;
            m->cosine = NULL;
            m->cosine_labels = NULL;
            rc = run_compare(cmd, "--control-text", dec, tok, src->control_text, &hidden_c, &final_c, &len_c, &last_c);
            if (!rc)
                rc = cosine_series(cmd, hidden, L, hidden_c, len_c, final_a.row, final_c.row, c->n_layers + 1,
                                   c->d_model, m);
            if (m->cosine_labels)
                for (int64_t r = 0; r < m->n_cosine; r++) free(m->cosine_labels[r]);
            free(m->cosine_labels);
            m->cosine2 = m->cosine;
            m->cosine = first;
            m->cosine_labels = labels;
            free(hidden_c);
            free(last_c);
            final_row_free(&final_c);
            if (rc) goto done;
        }
        char *last_a = cli_token_label(tok, ids[L - 1]);
        m->cosine_title = malloc(512);
        if (!last_a || !m->cosine_title) {
            free(last_a);
            rc = cli_data_error(cmd, "out of memory");
            goto done;
        }
        snprintf(m->cosine_title, 512, "Cosine of the last tokens' vectors, “%s” of --text and “%s” of "
                 "--compare-text: the embeddings, after each layer, and after the final norm", last_a, last_b);
        free(last_a);
    }
    if (src->maps_kind && strcmp(src->maps_kind, "weights") != 0 &&
        (rc = analysis_maps(cmd, src->maps_kind, dec, ids, L, m, attention)))
        goto done;
    const int64_t map = L * L, n_maps = m->n_layers * m->n_heads;
    m->len_q = m->len_kv = L;
    m->layered = true;
    m->weights = malloc((size_t)(n_maps * map) * sizeof(float));
    m->visible = malloc((size_t)(n_maps * map));
    m->labels = calloc((size_t)L, sizeof *m->labels);
    m->about = malloc(256);
    if (!m->weights || !m->visible || !m->labels || !m->about) {
        rc = cli_data_error(cmd, "out of memory");
        goto done;
    }
    for (int64_t k = 0; k < m->n_layers; k++) {
        const int64_t layer = m->layer_ids[k];
        /* The decoder's visibility: causal, and on a local layer the
         * sliding window; the same for every head. */
        for (int64_t n = 0; n < m->n_heads; n++) {
            const int64_t slot = (k * m->n_heads + n) * map;
            memcpy(m->weights + slot, attention[layer] + m->head_ids[n] * map, (size_t)map * sizeof(float));
            if (n > 0) memcpy(m->visible + slot, m->visible + k * m->n_heads * map, (size_t)map);
            else if (!rollout) attn_model_layer_visible(c, layer, L, m->visible + slot);
            else /* through the layers a token reaches every later one, sliding windows or not */
                for (int64_t i = 0; i < map; i++) m->visible[slot + i] = i % L <= i / L;
        }
    }
    for (int64_t i = 0; i < L; i++)
        if (!(m->labels[i] = cli_token_label(tok, ids[i]))) {
            rc = cli_data_error(cmd, "out of memory");
            goto done;
        }
    if (src->panels.attribute &&
        (rc = encode_text(cmd, "--source-text", tok, src->source_text, &corrupted, &len_corrupted)))
        goto done;
    if (cli_panels_requested(&src->panels) &&
        (rc = cli_panels_build(cmd, &src->panels, dec, tok, ids, L, m->labels, corrupted, len_corrupted, &m->panels)))
        goto done;
    const char *base = strrchr(src->model_path, '/');
    snprintf(m->about, 256, "%s (%s), %lld tokens%s", base ? base + 1 : src->model_path, c->architecture, (long long)L,
             rollout ? ": attention rollout (Abnar & Zuidema 2020), heads averaged, residual 0.5"
             : src->maps_kind && strcmp(src->maps_kind, "value-norms") == 0
             ? ": value-weighted norms ||a v W_O|| (Kobayashi et al. 2020), each row divided by its sum" : "");
    if (!src->quiet)
        fprintf(stderr, "attn %s: %s: %lld tokens, %lld layers x %lld heads, loaded and run in %.2f s\n", cmd,
                c->architecture, (long long)L, (long long)c->n_layers, (long long)H, cli_seconds() - t0);
done:
    if (attention)
        for (int64_t l = 0; l < (dec ? attn_decoder_get_config(dec)->n_layers : 0); l++) free(attention[l]);
    free(attention);
    free(hidden);
    free(hidden_b);
    free(last_b);
    free(corrupted);
    final_row_free(&final_a);
    final_row_free(&final_b);
    free(ids);
    free(text);
    cli_model_close(&model);
    return rc;
}

static int load_file(const char *cmd, const cli_map_source *src, cli_attention_options *ao, cli_maps *m) {
    attn_array w = {0};
    uint8_t *visible_all = NULL;
    int rc = CLI_OK;
    char shape[128];
    if (!cli_load_f32(cmd, "--weights", src->weights_path, false, &w)) return CLI_DATA_ERROR;
    /* [NL, B, H, L, S] from the file's rank (cli_maps.h lists them). */
    int64_t dims[5] = {1, 1, 1, 1, 1};
    const bool layer_axis = w.ndim == 5 || (w.ndim == 4 && src->layer_text);
    if (w.ndim < 2 || w.ndim > 5 || w.count == 0) {
        rc = cli_data_error(cmd, "--weights '%s' has shape %s; expected [L, S], [H, L, S], [B, H, L, S], with --layer "
                            "[layers, H, L, S], or [layers, B, H, L, S] (float32; transformers' output_attentions "
                            "stacked: numpy.stack([a.numpy() for a in out.attentions]))",
                            src->weights_path, cli_shape_str(&w, shape, sizeof shape));
        goto done;
    }
    for (int d = 0; d < w.ndim; d++) dims[5 - w.ndim + d] = w.shape[d];
    if (w.ndim == 4 && layer_axis) { /* [layers, H, L, S]: no batch axis */
        dims[0] = w.shape[0];
        dims[1] = 1;
    }
    const int64_t NL = dims[0], B = dims[1], H = dims[2], L = dims[3], S = dims[4];
    if (src->batch >= B) {
        rc = cli_data_error(cmd, "--batch %lld is out of range: '%s' has shape %s, batch 0 to %lld",
                            (long long)src->batch, src->weights_path, cli_shape_str(&w, shape, sizeof shape),
                            (long long)B - 1);
        goto done;
    }
    if (src->layer_text && !layer_axis && strcmp(src->layer_text, "all") && strcmp(src->layer_text, "0")) {
        rc = cli_data_error(cmd, "--layer %s: '%s' has shape %s, which holds one layer", src->layer_text,
                            src->weights_path, cli_shape_str(&w, shape, sizeof shape));
        goto done;
    }
    if ((rc = select_indices(cmd, "--layer", layer_axis ? src->layer_text : NULL, NL, "layer", &m->layer_ids,
                             &m->n_layers)) ||
        (rc = select_indices(cmd, src->head_flag ? src->head_flag : "--head", src->head_text, H, "head", &m->head_ids, &m->n_heads)))
        goto done;
    if ((rc = cli_load_attention_inputs(cmd, ao, B, H, L, S))) goto done;
    if (!(visible_all = cli_visibility(cmd, ao, B, H, L, S))) {
        rc = CLI_DATA_ERROR;
        goto done;
    }
    const int64_t map = L * S, n_maps = m->n_layers * m->n_heads;
    m->len_q = L;
    m->len_kv = S;
    m->layered = layer_axis;
    m->weights = malloc((size_t)(n_maps * map) * sizeof(float));
    m->visible = malloc((size_t)(n_maps * map));
    if (!m->weights || !m->visible) {
        rc = cli_data_error(cmd, "out of memory");
        goto done;
    }
    for (int64_t k = 0; k < m->n_layers; k++)
        for (int64_t n = 0; n < m->n_heads; n++) {
            const int64_t slot = (k * m->n_heads + n) * map, h = m->head_ids[n];
            const int64_t from = ((m->layer_ids[k] * B + src->batch) * H + h) * map;
            memcpy(m->weights + slot, (const float *)w.data + from, (size_t)map * sizeof(float));
            memcpy(m->visible + slot, visible_all + (src->batch * H + h) * map, (size_t)map);
        }
done:
    free(visible_all);
    attn_array_free(&w);
    return rc;
}

int cli_maps_load(const char *cmd, const cli_map_source *src, cli_attention_options *ao, cli_maps *out) {
    memset(out, 0, sizeof *out);
    const int rc = src->model_path ? load_model(cmd, src, out) : load_file(cmd, src, ao, out);
    if (rc) cli_maps_free(out);
    return rc;
}

void cli_maps_free(cli_maps *m) {
    if (m->labels)
        for (int64_t i = 0; i < m->len_q; i++) free(m->labels[i]);
    free(m->labels);
    free(m->layer_ids);
    free(m->head_ids);
    free(m->weights);
    free(m->visible);
    free(m->about);
    if (m->cosine_labels)
        for (int64_t r = 0; r < m->n_cosine; r++) free(m->cosine_labels[r]);
    free(m->cosine_labels);
    free(m->cosine);
    free(m->cosine2);
    free(m->cosine_title);
    if (m->paths)
        for (int64_t l = 0; l < m->n_layers; l++) attn_paths_free(&m->paths[l]);
    free(m->paths);
    cli_panels_free(&m->panels);
    memset(m, 0, sizeof *m);
}
