/*
 * cmd_demo_model.c — `attn demo --model FILE` and `attn model chapter FILE`:
 * the chapter's opening on a real model.  The numbers come from
 * model_chapter_compute (model_chapter.h: the decoder and the tokenizer);
 * this file loads the model, prints them with the prose of demo.h's
 * demo_model_text, draws the cosine series (attn_lineplot_write) and times
 * the n² part on a real text.
 *
 * Sections: 1 the two sentences' tokens, 苹果 the same id and the same
 * embedding row; 2 the cosine of the two 苹果 vectors layer by layer, beside
 * the same-sense control's (我吃了一个苹果 / 我买了一个苹果) and a matched
 * English pair's (" bank" in two senses, and in one), with a reading of
 * each gap (context, or too small to mean anything);
 * 3 what each 苹果 reads (top-3 keys per layer, averaged over heads, or per
 * head with --heads) and the top-5 next tokens; 4 the GQA layout beside the
 * chapter's Qwen3-0.6B; 5 the causal mask checked on every real map; 6 the
 * cost at 100 and 200 tokens (--no-cost skips it).
 */
#include "cli.h"
#include "cli_generation.h"
#include "cli_stdout.h"
#include "demo.h"
#include "model_chapter.h"

#include "attn_viz.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

enum { TOP_KEYS = 3, PIECE = 96 };

/* The chapter's Qwen3-0.6B, as the chapter states it (§7 of `attn demo`). */
static const int chapter_q_heads = 16, chapter_kv_heads = 8;
/* The lengths of the cost table. */
static const int64_t cost_lengths[2] = {100, 200};

/* Token id's text (its bytes, invalid UTF-8 replaced), control characters
 * escaped, into buf. */
static const char *token_text(const attn_tokenizer *t, int32_t id, char *buf, size_t size) {
    char raw[PIECE];
    size_t len = 0;
    buf[0] = '\0';
    if (attn_tokenizer_decode(t, &id, 1, ATTN_DECODE_VALID_UTF8, raw, sizeof raw, &len)) return buf;
    size_t o = 0;
    for (size_t i = 0; i < len && o + 5 < size; i++) {
        const unsigned char c = (unsigned char)raw[i];
        if (c == '\n') o += (size_t)snprintf(buf + o, size - o, "\\n");
        else if (c < 0x20 || c == 0x7f) o += (size_t)snprintf(buf + o, size - o, "\\x%02x", c);
        else buf[o++] = (char)c;
    }
    buf[o] = '\0';
    return buf;
}

/* Prints s padded to width terminal columns. */
static void print_padded(const char *s, int width) {
    fputs(s, stdout);
    for (int w = demo_display_width(s); w < width; w++) putchar(' ');
}

static void heading(const char *text) { printf("\n%s\n\n", text); }

static void print_tokens(const demo_model_text *mt, const model_chapter *mc, const attn_tokenizer *t) {
    heading(mt->sec_tokens);
    for (int k = 0; k < MODEL_CHAPTER_SENTENCES; k++) {
        const model_chapter_sentence *s = &mc->s[k];
        printf(mt->sentence, 'A' + k, model_chapter_sentences[k], (long long)s->L);
        printf("\n  %-4s %8s  ", mt->col_pos, mt->col_id);
        print_padded(mt->col_piece, 16);
        printf("%s\n", mt->col_text);
        for (int64_t i = 0; i < s->L; i++) {
            const char *piece = "";
            char text[PIECE];
            attn_tokenizer_token(t, s->ids[i], &piece, NULL, NULL);
            printf("  %-4lld %8ld  ", (long long)i, (long)s->ids[i]);
            print_padded(piece, 16);
            printf("%s\n", token_text(t, s->ids[i], text, sizeof text));
        }
        putchar('\n');
    }
    char apple[PIECE];
    const model_chapter_sentence *a = &mc->s[0], *b = &mc->s[1];
    printf(mt->same_token, token_text(t, a->ids[a->apple], apple, sizeof apple), (long)a->ids[a->apple],
           (long long)a->apple, (long long)b->apple);
    printf("\n%s\n", mc->embeddings_equal ? mt->embed_equal : mt->embed_differ);
}

static void row_label(const demo_model_text *mt, const model_chapter *mc, int64_t row, char *buf, size_t size) {
    if (row == 0) snprintf(buf, size, "%s", mt->row_embed);
    else if (row == mc->config.n_layers + 1) snprintf(buf, size, "%s", mt->row_final);
    else snprintf(buf, size, mt->row_layer, (long long)(row - 1));
}

/* The reading of a two-sense pair against its same-sense control, after
 * the final norm: context, or a gap too small to mean anything. */
static void print_gap(const demo_model_text *mt, const char *word, double senses, double control, const char *a,
                      const char *b) {
    const double ratio = model_chapter_gap_ratio(senses, control);
    char s[16], c[16], r[16], pair[256];
    snprintf(s, sizeof s, "%.4f", senses);
    snprintf(c, sizeof c, "%.4f", control);
    if (isfinite(ratio)) snprintf(r, sizeof r, "%.1f", ratio);
    else snprintf(r, sizeof r, "∞");
    snprintf(pair, sizeof pair, "%s / %s", a, b);
    printf(ratio >= MODEL_CHAPTER_GAP_MEANINGFUL ? mt->gap_meaningful : mt->gap_noise, word, s, pair, c, r);
    putchar('\n');
}

static int print_cosine(const demo_model_text *mt, const model_chapter *mc, const char *plot) {
    heading(mt->sec_cosine);
    printf("%s\n\n  ", mt->cosine_intro);
    const int64_t rows = mc->config.n_layers + 2;
    const double *control = mc->pair_cosine[MODEL_CHAPTER_CONTROL], *en = mc->pair_cosine[MODEL_CHAPTER_EN_SENSES],
                 *en_control = mc->pair_cosine[MODEL_CHAPTER_EN_CONTROL];
    print_padded(mt->col_layer, 18);
    print_padded("苹果", 36);
    printf("bank\n  ");
    print_padded("", 18);
    for (int k = 0; k < 2; k++) {
        print_padded(mt->col_senses, 12);
        print_padded(mt->col_control, 12);
        if (k) printf("%s\n", mt->col_gap);
        else print_padded(mt->col_gap, 12);
    }
    int64_t lowest = 0;
    for (int64_t r = 0; r < rows; r++) {
        char label[64];
        row_label(mt, mc, r, label, sizeof label);
        printf("  ");
        print_padded(label, 18);
        printf("%-12.4f%-12.4f%-+12.4f%-12.4f%-12.4f%+.4f\n", mc->cosine[r], control[r], control[r] - mc->cosine[r],
               en[r], en_control[r], en_control[r] - en[r]);
        if (mc->cosine[r] < mc->cosine[lowest]) lowest = r;
    }
    char last[16], final[16], low[16], where[64];
    snprintf(last, sizeof last, "%.4f", mc->cosine[rows - 2]);
    snprintf(final, sizeof final, "%.4f", mc->cosine[rows - 1]);
    snprintf(low, sizeof low, "%.4f", mc->cosine[lowest]);
    row_label(mt, mc, lowest, where, sizeof where);
    putchar('\n');
    printf(mt->cosine_read, last, final, low, where);
    printf("\n\n");
    print_gap(mt, "苹果", mc->cosine[rows - 1], control[rows - 1], model_chapter_pairs[MODEL_CHAPTER_CONTROL][0],
              model_chapter_pairs[MODEL_CHAPTER_CONTROL][1]);
    print_gap(mt, "bank", en[rows - 1], en_control[rows - 1], model_chapter_pairs[MODEL_CHAPTER_EN_CONTROL][0],
              model_chapter_pairs[MODEL_CHAPTER_EN_CONTROL][1]);
    printf("%s\n", mt->gap_rule);
    if (!plot) return CLI_OK;
    attn_lineplot_options o = ATTN_LINEPLOT_OPTIONS_INIT;
    o.title = mt->plot_title;
    o.x_label = mt->plot_x;
    o.y_label = mt->plot_y;
    o.y2 = control;
    o.name = mt->plot_senses;
    o.name2 = mt->plot_control;
    if (attn_lineplot_write(plot, mc->cosine, rows, &o)) return cli_data_error("demo", "--plot: %s", attn_last_error());
    printf(mt->wrote, plot);
    putchar('\n');
    return CLI_OK;
}

/* The top TOP_KEYS keys of row[0..L) as "position:text weight" cells, the
 * last one unpadded when last is set (no trailing blanks). */
static void print_top_keys(const attn_tokenizer *t, const model_chapter_sentence *s, const float *row, bool last) {
    int64_t best[TOP_KEYS];
    const int64_t k = s->L < TOP_KEYS ? s->L : TOP_KEYS;
    attn_top_k(row, s->L, k, best);
    for (int64_t j = 0; j < k; j++) {
        char text[PIECE], cell[PIECE + 32];
        snprintf(cell, sizeof cell, "%lld:%s %.3f", (long long)best[j], token_text(t, s->ids[best[j]], text, sizeof text),
                 (double)row[best[j]]);
        if (last && j == k - 1) fputs(cell, stdout);
        else print_padded(cell, 16);
    }
}

static void print_reads(const demo_model_text *mt, const model_chapter *mc, const attn_tokenizer *t, bool heads) {
    const attn_decoder_config *c = &mc->config;
    const int64_t N = c->n_layers, Hq = c->n_heads, group = c->n_heads / c->n_kv_heads;
    heading(mt->sec_reads);
    printf("%s\n\n", heads ? mt->reads_heads_intro : mt->reads_intro);
    printf("  ");
    print_padded(mt->col_layer, heads ? 20 : 8);
    for (int k = 0; k < MODEL_CHAPTER_SENTENCES; k++) {
        char title[96];
        snprintf(title, sizeof title, "%c: %s", 'A' + k, model_chapter_sentences[k]);
        if (k + 1 < MODEL_CHAPTER_SENTENCES) print_padded(title, 16 * TOP_KEYS + 2);
        else fputs(title, stdout);
    }
    putchar('\n');
    float mean[MODEL_CHAPTER_TOKENS];
    for (int64_t l = 0; l < N; l++)
        for (int64_t h = 0; h < (heads ? Hq : 1); h++) {
            char label[128];
            if (heads) {
                char head[64];
                snprintf(head, sizeof head, mt->head_label, (long long)h, (long long)(h / group));
                snprintf(label, sizeof label, "%lld %s", (long long)l, head);
            } else {
                snprintf(label, sizeof label, "%lld", (long long)l);
            }
            printf("  ");
            print_padded(label, heads ? 20 : 8);
            for (int k = 0; k < MODEL_CHAPTER_SENTENCES; k++) {
                const model_chapter_sentence *s = &mc->s[k];
                const int64_t L = s->L;
                const float *maps = s->attention + l * Hq * L * L;
                const float *row;
                if (heads) {
                    row = maps + (h * L + s->apple) * L;
                } else {
                    for (int64_t j = 0; j < L; j++) {
                        double sum = 0;
                        for (int64_t hh = 0; hh < Hq; hh++) sum += maps[(hh * L + s->apple) * L + j];
                        mean[j] = (float)(sum / (double)Hq);
                    }
                    row = mean;
                }
                const bool last = k + 1 == MODEL_CHAPTER_SENTENCES;
                print_top_keys(t, s, row, last);
                if (!last) printf("  ");
            }
            putchar('\n');
        }
    heading(mt->sec_next);
    for (int k = 0; k < MODEL_CHAPTER_SENTENCES; k++) {
        const model_chapter_sentence *s = &mc->s[k];
        printf(mt->next_heading, 'A' + k);
        printf("  %s\n  %-5s %8s %8s  %s\n", model_chapter_sentences[k], mt->col_rank, mt->col_prob, mt->col_id,
               mt->col_text);
        for (int j = 0; j < MODEL_CHAPTER_TOP; j++) {
            char text[PIECE];
            printf("  %-5d %8.4f %8lld  \"%s\"\n", j + 1, s->top_probs[j], (long long)s->top_ids[j],
                   token_text(t, (int32_t)s->top_ids[j], text, sizeof text));
        }
        putchar('\n');
    }
    printf("%s\n", mt->next_read);
}

static void print_gqa(const demo_model_text *mt, const model_chapter *mc) {
    const attn_decoder_config *c = &mc->config;
    const int64_t group = c->n_heads / c->n_kv_heads;
    heading(mt->sec_gqa);
    printf(mt->gqa_line, (long long)c->n_heads, (long long)c->n_kv_heads, (long long)c->head_dim, (long long)group);
    putchar('\n');
    for (int64_t j = 0; j < c->n_kv_heads; j++) {
        printf(mt->gqa_group, (long long)j, (long long)(j * group), (long long)((j + 1) * group - 1));
        putchar('\n');
    }
    printf(mt->gqa_chapter, chapter_q_heads, chapter_kv_heads, chapter_q_heads / chapter_kv_heads);
    putchar('\n');
}

static void print_mask(const demo_model_text *mt, const model_chapter *mc) {
    heading(mt->sec_mask);
    char worst[32];
    snprintf(worst, sizeof worst, "%.3g", mc->mask_row_error);
    printf(mt->mask_line, (long long)(MODEL_CHAPTER_SENTENCES * mc->config.n_layers * mc->config.n_heads),
           (long long)mc->mask_cells, worst, (long long)mc->mask_upper_nonzero);
    printf("\n%s\n", mt->mask_note);
}

/* The cost text: the walkthrough's own explanatory paragraphs. */
static char *cost_text(const demo_text *t) {
    const char *const parts[] = {t->roles, t->not_linear, t->interventions, t->two_paths, t->not_serial,
                                 t->concat_note, t->gqa_note, t->cost_note, t->ex1_a2, t->ex3_a};
    size_t n = 1;
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) n += strlen(parts[i]) + 1;
    char *text = malloc(n);
    if (!text) return NULL;
    text[0] = '\0';
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        strcat(text, parts[i]);
        strcat(text, "\n");
    }
    return text;
}

static int print_cost(const demo_text *t, const demo_model_text *mt, const attn_decoder *m, const attn_tokenizer *tok,
                      bool skip) {
    heading(mt->sec_cost);
    if (skip) {
        printf("%s\n", mt->cost_skipped);
        return CLI_OK;
    }
    char *text = cost_text(t);
    if (!text) return cli_data_error("demo", "out of memory");
    size_t n_ids = 0;
    attn_tokenizer_encode(tok, text, strlen(text), 0, NULL, 0, &n_ids);
    model_chapter_cost cost[2];
    char error[512];
    const attn_status st = model_chapter_cost_run(m, tok, text, cost_lengths, 2, cost, cli_seconds, error, sizeof error);
    free(text);
    if (st) return cli_data_error("demo", "%s", error);
    printf(mt->cost_intro, (long long)n_ids);
    printf("\n\n  %8s %10s %14s %14s %18s %16s\n", mt->col_tokens, mt->col_seconds, mt->col_cells, mt->col_visible,
           mt->col_table, mt->col_flash);
    for (int i = 0; i < 2; i++)
        printf("  %8lld %10.2f %14lld %14lld %14.1f KiB %12.1f KiB\n", (long long)cost[i].L, cost[i].seconds,
               (long long)cost[i].cells, (long long)cost[i].visible_cells, (double)cost[i].score_table_bytes / 1024.0,
               (double)cost[i].flash_workspace_bytes / 1024.0);
    char cells[16], time[16];
    snprintf(cells, sizeof cells, "%.2f", (double)cost[1].cells / (double)cost[0].cells);
    snprintf(time, sizeof time, "%.2f", cost[1].seconds / cost[0].seconds);
    putchar('\n');
    printf(mt->cost_read, cells, time);
    putchar('\n');
    return CLI_OK;
}

int demo_model_run(const demo_text *t, const demo_model_text *mt, const demo_model_options *opt) {
    struct stat st_file;
    if (stat(opt->model, &st_file) != 0) {
        char message[1024];
        snprintf(message, sizeof message, mt->no_file, opt->model);
        return cli_data_error("demo", "%s", message);
    }
    int rc = CLI_OK;
    cli_model model = {0};
    const attn_decoder *m = NULL;
    const attn_tokenizer *tok = NULL;
    model_chapter mc;
    memset(&mc, 0, sizeof mc);
    fprintf(stderr, mt->loading, opt->model);
    const double t0 = cli_seconds();
    if ((rc = cli_model_open("demo", opt->model, NULL, false, NULL, &model))) goto done; /* names the file */
    m = model.decoder;
    tok = model.tokenizer;
    fprintf(stderr, mt->loaded, cli_seconds() - t0, (double)attn_decoder_weight_bytes(m) / 1048576.0);
    if (model_chapter_compute(m, tok, &mc)) {
        rc = cli_data_error("demo", "%s: %s", opt->model, mc.error);
        goto done;
    }
    const char *base = strrchr(opt->model, '/');
    printf(mt->title, base ? base + 1 : opt->model, mc.config.architecture);
    printf("\n%s\n", mt->intro);
    print_tokens(mt, &mc, tok);
    if ((rc = print_cosine(mt, &mc, opt->plot))) goto done;
    print_reads(mt, &mc, tok, opt->heads);
    print_gqa(mt, &mc);
    print_mask(mt, &mc);
    if ((rc = print_cost(t, mt, m, tok, opt->no_cost))) goto done;
    if (!cli_stdout_ok("demo")) rc = CLI_DATA_ERROR;
done:
    model_chapter_free(&mc);
    cli_model_close(&model);
    return rc;
}
