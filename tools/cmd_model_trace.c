/*
 * cmd_model_trace.c — `attn model trace`: a real model's activations under
 * TransformerLens's hook names, recorded into an .npz cache, patched from a
 * second (source) run or ablated, with the next-token distribution before
 * and after.  The work is the library's (attn_model_interp.h); this file
 * parses the flags and prints (docs/model-trace.md).
 */
#include "cli.h"
#include "cli_answer.h"
#include "cli_generation.h"
#include "cli_stdout.h"

#include "attn_analysis.h"
#include "attn_decoder.h"
#include "attn_gguf.h"
#include "attn_model_interp.h"
#include "attn_npz.h"
#include "attn_tokenizer.h"
#include "cli_model_patch.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TOP_DEFAULT 5
#define TRACE_TOKENS_MAX 512 /* tokens of a text here: the scores and patterns are L^2 a layer */
#define PATCHES_MAX 32
#define PATTERNS_MAX 64

static void trace_help(FILE *out) {
    char architectures[256];
    fprintf(out,
    "usage: attn model trace --model MODEL (--text TEXT | --ids ID,..) [--hooks PATTERN,.. -o CACHE.npz]\n"
    "                        [--source-text TEXT | --source-ids ID,..] [--patch HOOK[@POS,..][:HEAD,..]]...\n"
    "                        [--ablate HOOK[@POS,..]:HEAD,..=zero|mean]... [--sweep-layers]\n"
    "                        [--answer TOKEN] [--wrong TOKEN] [--top K] [--compress]\n"
    "                        [--weights stored|f32] [--precision exact|fast]\n"
    "       attn model trace --model MODEL --text TEXT --source-text TEXT --paths [--position P]\n"
    "       attn model trace --model MODEL --text TEXT --nullspace LAYER:HEAD|LAYER:all [--position P]\n"
    "                        [--tolerance T]\n"
    "       attn model trace --model MODEL --text TEXT --value-norms LAYER [--no-wo] [--position P] [--top K]\n"
    "       attn model trace --model MODEL --text TEXT --rollout [--flow] [--head H] [--residual R] [--position P]\n"
    "       attn model trace --model MODEL --text TEXT --logit-lens [--answer TOKEN [--wrong TOKEN]] [--position P]\n"
    "       attn model trace --model MODEL --text TEXT --logit-attribution --answer TOKEN [--wrong TOKEN]\n"
    "                        [--position P] [--top K]\n"
    "       attn model trace --model MODEL --text TEXT --source-text TEXT --attribute HOOK[@POS,..] [--check]\n"
    "                        [--answer TOKEN [--wrong TOKEN]]\n\n"
    "Runs a decoder over a text and shows its activations at TransformerLens's hook points:\n"
    "  hook_embed, blocks.L.hook_resid_pre, blocks.L.hook_q_input / hook_k_input / hook_v_input,\n"
    "  blocks.L.ln1.hook_scale / hook_normalized, blocks.L.attn.hook_q / hook_k / hook_v (before RoPE),\n"
    "  blocks.L.attn.hook_rot_q / hook_rot_k (after RoPE), blocks.L.attn.hook_attn_scores,\n"
    "  blocks.L.attn.hook_pattern, blocks.L.attn.hook_z, blocks.L.attn.hook_result (per head, after W_O),\n"
    "  blocks.L.hook_attn_out, blocks.L.hook_resid_mid, blocks.L.ln2.hook_scale / hook_normalized,\n"
    "  blocks.L.mlp.hook_pre / hook_pre_linear / hook_post, blocks.L.hook_mlp_out,\n"
    "  blocks.L.hook_resid_post, ln_final.hook_scale, ln_final.hook_normalized\n"
    "(shapes without the batch axis: [L, d], [L, heads, d_head], scores and pattern [heads, L, L],\n"
    "q/k/v_input and result [L, heads, d], scales [L, 1], mlp [L, d_ffn]; docs/model-trace.md).\n\n");
    /* (The options in a second string: C99 promises 4095 bytes a literal.) */
    fprintf(out,
    "  --model MODEL       the model (%s): a GGUF file (its tokenizer\n"
    "                      read from it), or a Hugging Face checkpoint (a directory with config.json,\n"
    "                      model.safetensors and tokenizer.json)\n"
    "  --text TEXT         the run (the target of patches); --ids ID,.. gives token ids instead\n"
    "  --hooks PATTERNS    glob patterns, comma-separated (blocks.*.attn.hook_pattern, blocks.3.*):\n"
    "                      every matching hook of the run is saved into -o CACHE.npz (np.load reads it;\n"
    "                      attn npz list / get too). With patches the cache holds the patched run.\n"
    "  --compress          deflate the cache's arrays (np.savez_compressed); default stored (np.savez)\n"
    "  --source-text TEXT  a second run whose activations --patch copies in (--source-ids: ids)\n"
    "  --patch HOOK[@POS][:HEADS]  replace HOOK's rows at those positions (default all; negative count\n"
    "                      from the end of each text: @-1 is the last token of both) and heads (q, k, v,\n"
    "                      rot_q, rot_k, z, scores, pattern; default all) with the source run's. A patched\n"
    "                      pattern feeds z = pattern . v with this run's v (the weight path alone).\n"
    "  --ablate HOOK[@POS]:HEADS=zero|mean  set those heads to 0, or to their mean over every position\n"
    "                      of this run (blocks.L.attn.hook_z:3=zero removes head 3 of layer L)\n"
    "  --sweep-layers      the patches whose hook has no layer (blocks.*.NAME, or NAME alone) are applied\n"
    "                      at one layer at a time, one line per layer\n"
    "  --answer TOKEN      report this next token's probability and the logit difference\n"
    "                      answer - wrong (TOKEN: a text of one token, or #ID)\n"
    "  --wrong TOKEN       the other side of the logit difference (default: the clean run's top token)\n"
    "  --top K             next tokens shown before and after (default %d)\n"
    CLI_ALLOW_BEYOND_CONTEXT_HELP,
    cli_model_architectures(architectures, sizeof architectures), TOP_DEFAULT);
    fputs(cli_decoder_help, out);
    fprintf(out,
    "  --paths             the path decomposition (Figure 2) of every head of every layer, the text as\n"
    "                      base and the source (same length) as changed: with the base queries fixed,\n"
    "                      keys only (the weight path), values only (the content path), both, and their\n"
    "                      interaction, at --position P (default -1, the last); the heads ranked by each\n"
    "                      path's L2 change of z. Each layer is decomposed on its own.\n"
    "  --nullspace L:H     \"weights are not an explanation\": how far head H of layer L's weight row at\n"
    "                      --position P (default -1) can move in L1 with its z unchanged within\n"
    "                      --tolerance T (default 1e-3) in every coordinate (attn nullspace's search on\n"
    "                      the head's real v rows; exact up to 12 visible keys, a lower bound beyond);\n"
    "                      L:all searches every head of layer L, a line each, then a histogram of the moves\n"
    "  --value-norms L     value-weighted norms ||a_ij v_j W_O^h|| (Kobayashi et al. 2020) of every head of\n"
    "                      layer L at query --position P (default -1): each head's top --top keys by weight,\n"
    "                      with their norms, then by norm, with their weights (a large weight on a short\n"
    "                      vector moves little); --no-wo: ||a_ij v_j||, without the output projection\n"
    "  --rollout           attention rollout (Abnar & Zuidema 2020): how much of each input token reaches\n"
    "                      --position P after layers 0, the middle one and the last, the maps multiplied\n"
    "                      layer by layer with the residual as (1 - R) A + R I (--residual R, default 0.5),\n"
    "                      the heads averaged (--head H: head H of every layer alone)\n"
    "  --flow              with --rollout: attention flow, the max-flow from each input token to\n"
    "                      --position P through the same layered graph (at most %d nodes: (layers + 1)\n"
    "                      x tokens)\n"
    "  --logit-lens        the residual stream at --position P after each layer read through the final\n"
    "                      norm and the unembedding as if it were the last: the top 3 tokens a layer, and\n"
    "                      with --answer its probability and rank (with --wrong, the logit difference)\n"
    "  --logit-attribution direct logit attribution at --position P: the share of logit(answer) (minus\n"
    "                      logit(wrong) with --wrong) of the embeddings, each layer's attention and MLP\n"
    "                      output and each head's z W_O, the final norm's scale frozen; the --top K heads\n"
    "                      (default 5, at most 64) by |share|\n", ATTN_ATTENTION_FLOW_MAX_NODES);
    fputs(
    "  --attribute HOOK[@POS,..]  attribution patching (Nanda 2023): for every layer (blocks.*.NAME or\n"
    "                      NAME; blocks.L.NAME: one layer) and position (default all: texts of one length;\n"
    "                      @-1: the last token of each), the linear estimate (source - text) . d metric /\n"
    "                      d activation of patching the --source-text run's activation into the --text\n"
    "                      run, per head for q, k, v, rot_q, rot_k, z and result; from one forward and\n"
    "                      backward of the text and one forward of the source. metric: logit(answer) -\n"
    "                      logit(wrong) at the text's last token (defaults: the text's top token and the\n"
    "                      source's, or the answer's logit alone when they agree)\n"
    "  --check             with --attribute: each estimate beside the real patch's effect (one forward\n"
    "                      each), and their correlation\n\n"
    "Printed: the clean run's next tokens, the patched run's, KL(clean || patched) in nats over the\n"
    "whole vocabulary, and with --answer its probability and logit difference in both runs.\n\n"
    "exit status: 0 success, 1 the model cannot be read or run, 2 usage error (a pattern that matches\n"
    "no hook, a patch that does not parse)\n\n"
    "examples:\n"
    "  attn model trace --model qwen.gguf --text 我吃了一个苹果 --hooks 'blocks.*.attn.hook_pattern' -o cache.npz\n"
    "  attn model trace --model qwen.gguf --text 我吃了一个苹果 --source-text 这台电脑来自苹果 \\\n"
    "      --patch 'blocks.*.hook_resid_pre@-1' --sweep-layers --answer 公司\n"
    "  attn model trace --model gemma.gguf --text 'The capital of France is' --ablate blocks.5.attn.hook_z:0=zero\n"
    "  attn model trace --model qwen.gguf --text 我吃了一个苹果 --value-norms 3\n"
    "  attn model trace --model qwen.gguf --text 我吃了一个苹果 --rollout --flow\n"
    "  attn model trace --model gemma.gguf --text 'The capital of France is' --logit-attribution --answer ' Paris'\n"
    "  attn model trace --model qwen.gguf --text 我吃了一个苹果 --source-text 这台电脑来自苹果 \\\n"
    "      --attribute 'hook_resid_pre@-1' --check\n", out);
}

enum {
    F_MODEL = 1, F_TEXT, F_IDS, F_HOOKS, F_OUT, F_COMPRESS, F_SOURCE_TEXT, F_SOURCE_IDS, F_PATCH, F_ABLATE, F_SWEEP,
    F_ANSWER, F_WRONG, F_TOP, F_PATHS, F_POSITION, F_NULLSPACE, F_TOLERANCE, F_BEYOND, F_VALUE_NORMS, F_NO_WO,
    F_ROLLOUT, F_FLOW, F_HEAD, F_RESIDUAL, F_LOGIT_LENS, F_LOGIT_ATTRIBUTION, F_ATTRIBUTE, F_CHECK
};

static const cli_flag trace_flags[] = {
    {"--model", "FILE", F_MODEL, 0},          {"--text", "TEXT", F_TEXT, 0},
    {"--ids", "ID,..", F_IDS, 0},             {"--hooks", "PATTERN,..", F_HOOKS, 0},
    {"-o", "CACHE.npz", F_OUT, 0},            {"--compress", NULL, F_COMPRESS, 0},
    {"--source-text", "TEXT", F_SOURCE_TEXT, 0}, {"--source-ids", "ID,..", F_SOURCE_IDS, 0},
    {"--patch", "HOOK[@POS][:HEADS]", F_PATCH, CLI_REPEATABLE},
    {"--ablate", "HOOK:HEADS=zero|mean", F_ABLATE, CLI_REPEATABLE},
    {"--sweep-layers", NULL, F_SWEEP, 0},     {"--answer", "TOKEN", F_ANSWER, 0},
    {"--wrong", "TOKEN", F_WRONG, 0},         {"--top", "K", F_TOP, 0},
    {"--paths", NULL, F_PATHS, 0},            {"--position", "P", F_POSITION, 0},
    {"--nullspace", "LAYER:HEAD", F_NULLSPACE, 0}, {"--tolerance", "T", F_TOLERANCE, 0},
    {"--allow-beyond-context", NULL, F_BEYOND, 0},
    {"--value-norms", "LAYER", F_VALUE_NORMS, 0}, {"--no-wo", NULL, F_NO_WO, 0},
    {"--rollout", NULL, F_ROLLOUT, 0},        {"--flow", NULL, F_FLOW, 0},
    {"--head", "H", F_HEAD, 0},               {"--residual", "R", F_RESIDUAL, 0},
    {"--logit-lens", NULL, F_LOGIT_LENS, 0},  {"--logit-attribution", NULL, F_LOGIT_ATTRIBUTION, 0},
    {"--attribute", "HOOK[@POS,..]", F_ATTRIBUTE, 0}, {"--check", NULL, F_CHECK, 0},
    CLI_FLAGS_END};

static const cli_flag *const trace_tables[] = {trace_flags, cli_decoder_flags, NULL};
static const cli_spec trace_spec = {"model trace", trace_tables, trace_help, false};

#define CMD "model trace"

typedef struct run_text {
    int32_t *ids;
    int64_t L;
} run_text;

/* Token id's text (invalid UTF-8 replaced, control characters escaped). */
static const char *token_text(const attn_tokenizer *t, int32_t id, char *buf, size_t size) {
    char raw[256];
    size_t len = 0;
    buf[0] = '\0';
    if (attn_tokenizer_decode(t, &id, 1, ATTN_DECODE_VALID_UTF8, raw, sizeof raw, &len)) return buf;
    size_t o = 0;
    for (size_t i = 0; i < len && o + 5 < size; i++) {
        const unsigned char ch = (unsigned char)raw[i];
        if (ch == '\n') o += (size_t)snprintf(buf + o, size - o, "\\n");
        else if (ch < 0x20 || ch == 0x7f) o += (size_t)snprintf(buf + o, size - o, "\\x%02x", ch);
        else buf[o++] = (char)ch;
    }
    buf[o] = '\0';
    return buf;
}

/* --text or --ids into r; false with the message printed. */
static bool take_text(const attn_tokenizer *t, const char *flag, const char *text, const char *ids, int64_t vocab,
                      run_text *r, int *rc) {
    *rc = CLI_USAGE_ERROR;
    r->ids = malloc(TRACE_TOKENS_MAX * sizeof *r->ids);
    if (!r->ids) return (*rc = cli_data_error(CMD, "out of memory")), false;
    if (text) {
        size_t n;
        if (attn_tokenizer_encode(t, text, strlen(text), 0, r->ids, TRACE_TOKENS_MAX, &n)) {
            cli_usage_error(CMD, "%s: %s (at most %d tokens)", flag, attn_last_error(), TRACE_TOKENS_MAX);
            return false;
        }
        r->L = (int64_t)n;
    } else {
        r->L = 0;
        for (const char *p = ids; *p;) {
            char *end;
            const long long v = strtoll(p, &end, 10);
            if (end == p || (*end != ',' && *end) || v < 0 || v >= vocab || r->L >= TRACE_TOKENS_MAX) {
                cli_usage_error(CMD, "%s: '%s': expected at most %d token ids in [0, %lld), comma-separated", flag,
                                ids, TRACE_TOKENS_MAX, (long long)vocab);
                return false;
            }
            r->ids[r->L++] = (int32_t)v;
            p = *end ? end + 1 : end;
        }
    }
    if (r->L == 0) {
        cli_usage_error(CMD, "%s: no tokens", flag);
        return false;
    }
    *rc = CLI_OK;
    return true;
}

static void print_tokens(const attn_tokenizer *t, const char *label, const run_text *r) {
    char buf[256];
    printf("%-8s %lld tokens:", label, (long long)r->L);
    for (int64_t i = 0; i < r->L; i++) printf(" %s(%ld)", token_text(t, r->ids[i], buf, sizeof buf), (long)r->ids[i]);
    printf("\n");
}

static void print_top(const attn_tokenizer *t, const char *label, const float *logits, int64_t V, int64_t top) {
    int64_t best[64];
    attn_top_k(logits, V, top, best);
    char buf[256];
    printf("%-8s", label);
    for (int64_t j = 0; j < top; j++)
        printf("  %s %.4f", token_text(t, (int32_t)best[j], buf, sizeof buf), attn_logits_prob(logits, V, best[j]));
    printf("\n");
}

typedef struct trace_cli {
    const char *model, *text, *ids, *hooks, *out, *source_text, *source_ids, *answer, *wrong;
    const char *patch_texts[PATCHES_MAX];
    int patch_ablate[PATCHES_MAX];
    int n_patches;
    bool compress, sweep, paths, allow_beyond_context;
    attn_decoder_options load;
    int64_t top, position;
    const char *nullspace;
    double tolerance;
    int64_t value_norms; /* the layer, or -1 */
    bool no_wo, rollout, flow, logit_lens, logit_attribution;
    const char *attribute; /* --attribute HOOK[@POS], or NULL */
    bool check;
    int64_t head;        /* ATTN_ALL: the mean of the heads */
    double residual;
} trace_cli;

typedef struct ranked {
    const attn_model_head_paths *all;
    int by_content;
} ranked;

static ranked rank_by; /* qsort has no user pointer */

static int compare_heads(const void *a, const void *b) {
    const attn_model_head_paths *x = &rank_by.all[*(const int64_t *)a], *y = &rank_by.all[*(const int64_t *)b];
    const double vx = rank_by.by_content ? x->content : x->weight, vy = rank_by.by_content ? y->content : y->weight;
    return vx < vy ? 1 : vx > vy ? -1 : (*(const int64_t *)a > *(const int64_t *)b) - (*(const int64_t *)a < *(const int64_t *)b);
}

/* --paths: the decomposition, and the heads ranked by each path. */
static int print_paths(const attn_decoder *m, const attn_tokenizer *tok, const run_text *base, const run_text *changed,
                       int64_t position) {
    const attn_decoder_config *c = attn_decoder_get_config(m);
    if (base->L != changed->L)
        return cli_usage_error(CMD, "--paths needs a base and a changed text of one length (they have %lld and %lld "
                                    "tokens): the keys and values of one replace the other's",
                               (long long)base->L, (long long)changed->L);
    const int64_t n = c->n_layers * c->n_heads;
    attn_model_head_paths *all = malloc((size_t)n * sizeof *all);
    int64_t *order = malloc((size_t)n * sizeof *order);
    char buf[256];
    int rc = CLI_OK;
    if (!all || !order) {
        rc = cli_data_error(CMD, "out of memory");
        goto done;
    }
    if (attn_model_paths(m, base->ids, changed->ids, base->L, position, all)) {
        rc = cli_data_error(CMD, "%s", attn_last_error());
        goto done;
    }
    const int64_t pos = position < 0 ? base->L + position : position;
    printf("\npath decomposition at position %lld (%s), base = --text, changed = --source-text; |dz| are L2 norms of\n"
           "the change of a head's z there, with the base queries fixed (Figure 2); 'changed' is the changed\n"
           "text's own run (its queries too):\n",
           (long long)pos, token_text(tok, base->ids[pos], buf, sizeof buf));
    for (int by = 0; by < 2; by++) {
        for (int64_t i = 0; i < n; i++) order[i] = i;
        rank_by = (ranked){all, by};
        qsort(order, (size_t)n, sizeof *order, compare_heads);
        printf("\nthrough the %s path (%s changed, %s kept):\n", by ? "content" : "weight", by ? "values" : "keys",
               by ? "weights" : "values");
        printf("%-5s %-6s %-5s %11s %11s %13s %12s %9s\n", "rank", "layer", "head", "|dz| K only", "|dz| V only",
               "|interaction|", "|dz| changed", "|z| base");
        for (int64_t r = 0; r < 10 && r < n; r++) {
            const attn_model_head_paths *h = &all[order[r]];
            printf("%-5lld %-6lld %-5lld %11.4f %11.4f %13.4f %12.4f %9.4f\n", (long long)(r + 1),
                   (long long)(order[r] / c->n_heads), (long long)(order[r] % c->n_heads), h->weight, h->content,
                   h->interaction, h->changed, h->base);
        }
    }
done:
    free(all);
    free(order);
    return rc;
}

/* --nullspace LAYER:all: every head of the layer searched, one line each,
 * then a histogram of the L1 moves (the chapter's claim as a distribution
 * over real heads, not one example). */
static int print_nullspace_sweep(const attn_decoder *m, const run_text *r, const trace_cli *o, long long layer) {
    const attn_decoder_config *c = attn_decoder_get_config(m);
    enum { BINS = 10 }; /* [0, 0.2), [0.2, 0.4), ... [1.8, 2] */
    int64_t counts[BINS] = {0}, exact = 0;
    float *w = malloc((size_t)r->L * sizeof *w);
    double *moved = malloc((size_t)r->L * sizeof *moved);
    attn_nullspace_options opt = ATTN_NULLSPACE_OPTIONS_INIT;
    opt.tolerance = o->tolerance;
    int rc = CLI_OK;
    if (!w || !moved) {
        rc = cli_data_error(CMD, "out of memory");
        goto done;
    }
    const int64_t pos = o->position < 0 ? r->L + o->position : o->position;
    printf("\nlayer %lld, query %lld: how far each head's weight row moves (L1, at most 2) with its z unchanged "
           "within %.3g\n", layer, (long long)pos, o->tolerance);
    printf("%-5s %8s %11s %9s %-12s %9s\n", "head", "visible", "top weight", "L1 move", "", "programs");
    const bool tty = isatty(STDERR_FILENO);
    for (int64_t h = 0; h < c->n_heads; h++) {
        if (tty) fprintf(stderr, "\rattn model trace: head %lld of %lld...", (long long)h + 1, (long long)c->n_heads);
        attn_nullspace_result res;
        if (attn_model_nullspace(m, r->ids, r->L, layer, h, o->position, &opt, w, moved, &res)) {
            if (tty) fprintf(stderr, "\n");
            rc = cli_data_error(CMD, "%s", attn_last_error());
            goto done;
        }
        float top = 0;
        for (int64_t j = 0; j <= pos && j < r->L; j++) top = w[j] > top ? w[j] : top;
        int bin = (int)(res.l1 / (2.0 / BINS));
        counts[bin < 0 ? 0 : bin >= BINS ? BINS - 1 : bin]++;
        exact += res.exact != 0;
        printf("%-5lld %8lld %11.4f %9.4f %-12s %9lld\n", (long long)h, (long long)res.visible, (double)top, res.l1,
               res.exact ? "exact" : "lower bound", (long long)res.programs);
        if (!cli_stdout_ok(CMD)) { /* each head takes seconds: stop at once */
            rc = CLI_DATA_ERROR;
            goto done;
        }
    }
    if (tty) fprintf(stderr, "\r%60s\r", "");
    printf("\nL1 moves of the %lld heads (%lld exact, the rest lower bounds):\n", (long long)c->n_heads,
           (long long)exact);
    for (int b = 0; b < BINS; b++) {
        printf("  [%.1f, %.1f%c %3lld  ", b * 0.2, (b + 1) * 0.2, b == BINS - 1 ? ']' : ')', (long long)counts[b]);
        for (int64_t i = 0; i < counts[b]; i++) putchar('#');
        putchar('\n');
    }
done:
    free(w);
    free(moved);
    return rc;
}

/* --nullspace LAYER:HEAD: the row, the row found and the search's numbers. */
static int print_nullspace(const attn_decoder *m, const attn_tokenizer *tok, const run_text *r, const trace_cli *o) {
    long long layer, head;
    char tail;
    int at = 0;
    if (sscanf(o->nullspace, "%lld:all%n", &layer, &at) == 1 && at > 0 && o->nullspace[at] == 0) {
        if (layer < 0 || layer >= attn_decoder_get_config(m)->n_layers)
            return cli_usage_error(CMD, "--nullspace '%s': the model has layers 0 .. %lld", o->nullspace,
                                   (long long)attn_decoder_get_config(m)->n_layers - 1);
        return print_nullspace_sweep(m, r, o, layer);
    }
    if (sscanf(o->nullspace, "%lld:%lld%c", &layer, &head, &tail) != 2)
        return cli_usage_error(CMD, "--nullspace '%s': expected LAYER:HEAD (two integers) or LAYER:all",
                               o->nullspace);
    float *w = malloc((size_t)r->L * sizeof *w);
    double *moved = malloc((size_t)r->L * sizeof *moved);
    char buf[256];
    int rc = CLI_OK;
    attn_nullspace_result res;
    attn_nullspace_options opt = ATTN_NULLSPACE_OPTIONS_INIT;
    opt.tolerance = o->tolerance;
    if (!w || !moved) {
        rc = cli_data_error(CMD, "out of memory");
    } else if (attn_model_nullspace(m, r->ids, r->L, layer, head, o->position, &opt, w, moved, &res)) {
        rc = cli_data_error(CMD, "%s", attn_last_error());
    } else {
        const int64_t pos = o->position < 0 ? r->L + o->position : o->position;
        printf("\nblocks.%lld.attn.hook_pattern, head %lld, query %lld (%s): %lld visible keys, v rows of width %lld\n",
               layer, head, (long long)pos, token_text(tok, r->ids[pos], buf, sizeof buf), (long long)res.visible,
               (long long)attn_decoder_get_config(m)->head_dim);
        printf("%-5s %-16s %10s %10s\n", "key", "token", "weight", "moved to");
        for (int64_t j = 0; j <= pos; j++)
            printf("%-5lld %-16s %10.6f %10.6f\n", (long long)j, token_text(tok, r->ids[j], buf, sizeof buf),
                   (double)w[j], moved[j]);
        printf("L1 move %.6f of at most 2 (%s), the head's z changes by at most %.3g <= tolerance %.3g; %lld linear "
               "programs\n", res.l1, res.exact ? "the exact maximum" : "a lower bound: local search",
               res.max_output_change, o->tolerance, (long long)res.programs);
    }
    free(w);
    free(moved);
    return rc;
}

/* The index of the largest of row[0 .. n) not yet in taken (marked there). */
static int64_t take_largest(const float *row, int64_t n, bool *taken) {
    int64_t best = -1;
    for (int64_t j = 0; j < n; j++)
        if (!taken[j] && (best < 0 || row[j] > row[best])) best = j;
    if (best >= 0) taken[best] = true;
    return best;
}

/* --value-norms LAYER: per head, the query's top keys by weight with their
 * norms, then by norm with their weights. */
static int print_value_norms(const attn_decoder *m, const attn_tokenizer *tok, const run_text *r, const trace_cli *o) {
    const attn_decoder_config *c = attn_decoder_get_config(m);
    const int64_t L = r->L, Hq = c->n_heads, pos = o->position < 0 ? L + o->position : o->position;
    if (o->value_norms >= c->n_layers)
        return cli_usage_error(CMD, "--value-norms %lld: the model has layers 0 .. %lld", (long long)o->value_norms,
                               (long long)c->n_layers - 1);
    if (pos < 0 || pos >= L)
        return cli_usage_error(CMD, "--position %lld: the text has %lld tokens", (long long)o->position, (long long)L);
    float *pattern = malloc((size_t)(Hq * L * L) * sizeof *pattern), *norms = malloc((size_t)(Hq * L * L) * sizeof *norms);
    bool *taken = malloc((size_t)L * sizeof *taken);
    char buf[256];
    int rc = CLI_OK;
    if (!pattern || !norms || !taken) {
        rc = cli_data_error(CMD, "out of memory");
        goto done;
    }
    if (attn_model_value_norms(m, r->ids, L, o->value_norms, !o->no_wo, pattern, norms)) {
        rc = cli_data_error(CMD, "%s", attn_last_error());
        goto done;
    }
    printf("\nblocks.%lld.attn, query %lld (%s): value-weighted norms %s (Kobayashi et al. 2020) beside the weights;\n"
           "a head's output is the sum of these vectors, so a large weight on a short vector contributes little\n",
           (long long)o->value_norms, (long long)pos, token_text(tok, r->ids[pos], buf, sizeof buf),
           o->no_wo ? "||a_ij v_j||" : "||a_ij v_j W_O^h||");
    const int64_t shown = o->top < pos + 1 ? o->top : pos + 1;
    for (int64_t h = 0; h < Hq; h++) {
        const float *w = pattern + (h * L + pos) * L, *n = norms + (h * L + pos) * L;
        double total = 0;
        for (int64_t j = 0; j <= pos; j++) total += n[j];
        for (int by_norm = 0; by_norm < 2; by_norm++) {
            memset(taken, 0, (size_t)L * sizeof *taken);
            if (by_norm) printf("%-8s by norm:  ", "");
            else printf("head %-3lld by weight:", (long long)h);
            for (int64_t k = 0; k < shown; k++) {
                const int64_t j = take_largest(by_norm ? n : w, pos + 1, taken);
                printf("  %lld %s w %.3f n %.3f", (long long)j, token_text(tok, r->ids[j], buf, sizeof buf),
                       (double)w[j], (double)n[j]);
            }
            if (by_norm) printf("   (the row's norms sum to %.3f)", total);
            printf("\n");
        }
    }
done:
    free(pattern);
    free(norms);
    free(taken);
    return rc;
}

/* --rollout [--flow]: what reaches the query from each input token. */
static int print_rollout(const attn_decoder *m, const attn_tokenizer *tok, const run_text *r, const trace_cli *o) {
    const attn_decoder_config *c = attn_decoder_get_config(m);
    const int64_t L = r->L, N = c->n_layers, pos = o->position < 0 ? L + o->position : o->position;
    if (o->head >= c->n_heads)
        return cli_usage_error(CMD, "--head %lld: the model has heads 0 .. %lld", (long long)o->head,
                               (long long)c->n_heads - 1);
    if (pos < 0 || pos >= L)
        return cli_usage_error(CMD, "--position %lld: the text has %lld tokens", (long long)o->position, (long long)L);
    double *rollout = malloc((size_t)(N * L * L) * sizeof *rollout), *flow = malloc((size_t)L * sizeof *flow);
    char buf[256];
    int rc = CLI_OK;
    if (!rollout || !flow) {
        rc = cli_data_error(CMD, "out of memory");
        goto done;
    }
    if (attn_model_rollout(m, r->ids, L, o->head, o->residual, rollout) ||
        (o->flow && attn_model_flow(m, r->ids, L, o->head, o->residual, pos, flow))) {
        rc = cli_data_error(CMD, "%s", attn_last_error());
        goto done;
    }
    char heads[32];
    if (o->head == ATTN_ALL) snprintf(heads, sizeof heads, "the %lld heads averaged", (long long)c->n_heads);
    else snprintf(heads, sizeof heads, "head %lld of every layer", (long long)o->head);
    printf("\nattention rollout%s (Abnar & Zuidema 2020) into query %lld (%s): each layer's map as\n"
           "(1 - %.3g) A + %.3g I, %s; the share of each input token after a layer\n",
           o->flow ? " and flow" : "", (long long)pos, token_text(tok, r->ids[pos], buf, sizeof buf), o->residual,
           o->residual, heads);
    const int64_t layers[3] = {0, N / 2, N - 1};
    printf("%-5s %-16s", "key", "token");
    for (int k = 0; k < 3; k++) printf(" %9s %-3lld", "layer", (long long)layers[k]);
    if (o->flow) printf(" %10s", "flow");
    printf("\n");
    for (int64_t j = 0; j < L; j++) {
        printf("%-5lld %-16s", (long long)j, token_text(tok, r->ids[j], buf, sizeof buf));
        for (int k = 0; k < 3; k++) printf(" %13.4f", rollout[(layers[k] * L + pos) * L + j]);
        if (o->flow) printf(" %10.4f", flow[j]);
        printf("\n");
    }
    if (o->flow)
        printf("rollout rows sum to 1 (shares); flows are separate max-flows, each at most 1, and need not sum to 1\n");
done:
    free(rollout);
    free(flow);
    return rc;
}

/* --logit-lens: per layer, the top tokens of the stream read as the last. */
static int print_logit_lens(const attn_decoder *m, const attn_tokenizer *tok, const run_text *r, int64_t position,
                            int64_t answer, int64_t wrong) {
    const attn_decoder_config *c = attn_decoder_get_config(m);
    const int64_t N = c->n_layers, V = c->vocab, pos = position < 0 ? r->L + position : position;
    if (pos < 0 || pos >= r->L)
        return cli_usage_error(CMD, "--position %lld: the text has %lld tokens", (long long)position, (long long)r->L);
    float *lens = malloc((size_t)((N + 1) * V) * sizeof *lens);
    char buf[256], buf2[256];
    int rc = CLI_OK;
    if (!lens) return cli_data_error(CMD, "out of memory");
    if (attn_model_logit_lens(m, r->ids, r->L, pos, lens)) {
        rc = cli_data_error(CMD, "%s", attn_last_error());
        goto done;
    }
    printf("\nlogit lens at position %lld (%s): the stream after each layer through the final norm and W_U\n",
           (long long)pos, token_text(tok, r->ids[pos], buf, sizeof buf));
    if (answer >= 0) printf("answer %s", token_text(tok, (int32_t)answer, buf, sizeof buf));
    if (wrong >= 0) printf(", logit difference answer - %s", token_text(tok, (int32_t)wrong, buf2, sizeof buf2));
    if (answer >= 0) printf("\n");
    printf("%-6s", "layer");
    if (answer >= 0) printf(" %10s %6s", "p(answer)", "rank");
    if (wrong >= 0) printf(" %11s", "logit diff");
    printf("  top tokens\n");
    for (int64_t row = 0; row <= N; row++) {
        const float *logits = lens + row * V;
        if (row == 0) printf("%-6s", "embed");
        else printf("%-6lld", (long long)row - 1);
        if (answer >= 0)
            printf(" %10.6f %6lld", attn_logits_prob(logits, V, answer), (long long)cli_logit_rank(logits, V, answer));
        if (wrong >= 0) printf(" %11.4f", (double)(logits[answer] - logits[wrong]));
        int64_t tops[3];
        attn_top_k(logits, V, 3, tops);
        printf(" ");
        for (int j = 0; j < 3; j++)
            printf(" %s %.3f", token_text(tok, (int32_t)tops[j], buf, sizeof buf), attn_logits_prob(logits, V, tops[j]));
        printf("\n");
    }
done:
    free(lens);
    return rc;
}

/* --logit-attribution: the parts' shares of the logit (difference). */
static int print_logit_attribution(const attn_decoder *m, const attn_tokenizer *tok, const run_text *r,
                                   const trace_cli *o, int64_t answer, int64_t wrong) {
    const attn_decoder_config *c = attn_decoder_get_config(m);
    const int64_t N = c->n_layers, Hq = c->n_heads, pos = o->position < 0 ? r->L + o->position : o->position;
    if (pos < 0 || pos >= r->L)
        return cli_usage_error(CMD, "--position %lld: the text has %lld tokens", (long long)o->position, (long long)r->L);
    double embed, *attn = malloc((size_t)N * sizeof *attn), *mlp = malloc((size_t)N * sizeof *mlp),
                  *heads = malloc((size_t)(N * Hq) * sizeof *heads);
    float *shares = malloc((size_t)(N * Hq) * sizeof *shares); /* |share|, for ranking */
    bool *taken = calloc((size_t)(N * Hq), sizeof *taken);
    char buf[256], buf2[256];
    int rc = CLI_OK;
    if (!attn || !mlp || !heads || !shares || !taken) {
        rc = cli_data_error(CMD, "out of memory");
        goto done;
    }
    if (attn_model_logit_attribution(m, r->ids, r->L, pos, answer, wrong, &embed, attn, mlp, heads)) {
        rc = cli_data_error(CMD, "%s", attn_last_error());
        goto done;
    }
    double total = embed;
    for (int64_t l = 0; l < N; l++) total += attn[l] + mlp[l];
    printf("\ndirect logit attribution at position %lld (%s) of logit(%s)", (long long)pos,
           token_text(tok, r->ids[pos], buf, sizeof buf), token_text(tok, (int32_t)answer, buf2, sizeof buf2));
    if (wrong >= 0) printf(" - logit(%s)", token_text(tok, (int32_t)wrong, buf, sizeof buf));
    printf(" = %.4f:\neach part through the final norm's weight and W_U, scaled by the final stream's 1/rms\n"
           "%-6s %10s %10s\n%-6s %10.4f\n", total, "layer", "attention", "MLP", "embed", embed);
    for (int64_t l = 0; l < N; l++) printf("%-6lld %10.4f %10.4f\n", (long long)l, attn[l], mlp[l]);
    for (int64_t i = 0; i < N * Hq; i++) shares[i] = (float)fabs(heads[i]);
    printf("heads by |share| (z_h W_O^h, Gemma's post-attention norm scale frozen: a layer's heads add up to its "
           "attention column):\n");
    for (int64_t k = 0; k < o->top && k < N * Hq; k++) {
        const int64_t i = take_largest(shares, N * Hq, taken);
        printf("  L%lldH%lld %10.4f\n", (long long)(i / Hq), (long long)(i % Hq), heads[i]);
    }
done:
    free(attn);
    free(mlp);
    free(heads);
    free(shares);
    free(taken);
    return rc;
}

/* Pearson's r of x and y [n] (0 when either is constant). */
static double correlation(const double *x, const double *y, int64_t n) {
    double mx = 0, my = 0, sxy = 0, sxx = 0, syy = 0;
    for (int64_t i = 0; i < n; i++) mx += x[i], my += y[i];
    mx /= (double)n, my /= (double)n;
    for (int64_t i = 0; i < n; i++) {
        sxy += (x[i] - mx) * (y[i] - my);
        sxx += (x[i] - mx) * (x[i] - mx);
        syy += (y[i] - my) * (y[i] - my);
    }
    return sxx > 0 && syy > 0 ? sxy / sqrt(sxx * syy) : 0.0;
}

static double logit_metric(const float *logits, int64_t answer, int64_t wrong) {
    return (double)logits[answer] - (wrong >= 0 ? (double)logits[wrong] : 0.0);
}

/* --attribute HOOK[@POS]: attribution patching of the source (corrupted)
 * run into the text's (clean) run, every layer (or the one named) and the
 * positions; with --check, beside each estimate the real patch (of every
 * head at once for a per-head point, beside the heads' sum). */
static int print_attribution(const attn_decoder *m, const attn_tokenizer *tok, const run_text *clean,
                             const run_text *corrupted, const attn_model_patch *at, int64_t answer, int64_t wrong,
                             bool check) {
    const attn_decoder_config *c = attn_decoder_get_config(m);
    const int64_t N = c->n_layers, V = c->vocab, H = attn_model_attribution_heads(m, at->point);
    const int64_t K = at->n_positions ? at->n_positions : clean->L;
    const int64_t first = at->layer < 0 ? 0 : at->layer, last = at->layer < 0 ? N - 1 : at->layer;
    const int64_t cells = (last - first + 1) * K;
    double *estimate = malloc((size_t)(N * K * H) * sizeof *estimate);
    double *summed = malloc((size_t)cells * sizeof *summed), *real = malloc((size_t)cells * sizeof *real);
    float *patched = malloc((size_t)V * sizeof *patched);
    attn_model_record *record = NULL;
    double metric[2];
    char name[128], buf[256], buf2[256];
    int rc = CLI_OK;
    if (!estimate || !summed || !real || !patched) {
        rc = cli_data_error(CMD, "out of memory");
        goto done;
    }
    fprintf(stderr, "attn model trace: attribution patching (2 forwards, 1 backward)...\n");
    if (attn_model_attribution_patching(m, clean->ids, clean->L, corrupted->ids, corrupted->L, at->point,
                                        at->positions, at->n_positions, answer, wrong, estimate, metric)) {
        rc = cli_data_error(CMD, "%s", attn_last_error());
        goto done;
    }
    attn_model_patch one = *at;
    one.layer = ATTN_ALL;
    if (check && attn_model_record_new(m, corrupted->ids, corrupted->L, &one, 1, &record)) {
        rc = cli_data_error(CMD, "%s", attn_last_error());
        goto done;
    }
    attn_decoder_hook_name(at->point, at->layer, name, sizeof name);
    if (at->layer < 0) snprintf(name, sizeof name, "blocks.*.%s", attn_decoder_hook_suffix(at->point));
    printf("\nattribution patching (Nanda 2023) at %s: the --source-text run's activation patched into the --text "
           "run, estimated as (source - text) . d metric / d activation;\nmetric logit(%s)",
           name, token_text(tok, (int32_t)answer, buf, sizeof buf));
    if (wrong >= 0) printf(" - logit(%s)", token_text(tok, (int32_t)wrong, buf, sizeof buf));
    printf(" at the text's last token: text %.4f, source %.4f (the whole change %+.4f)\n", metric[0], metric[1],
           metric[1] - metric[0]);
    if (check)
        printf("--check: beside each estimate, the metric's change when that activation is patched for real (one "
               "forward each%s)\n", H > 1 ? "; every head at once, beside the heads' sum" : "");
    for (int64_t k = 0; k < K; k++) {
        const int64_t p = at->n_positions ? at->positions[k] : k;
        const int64_t pc = p < 0 ? clean->L + p : p, px = p < 0 ? corrupted->L + p : p;
        printf("\nposition %lld: text %s, source %s\n%-6s", (long long)p,
               token_text(tok, clean->ids[pc], buf, sizeof buf), token_text(tok, corrupted->ids[px], buf2, sizeof buf2),
               "layer");
        if (H > 1)
            for (int64_t h = 0; h < H; h++) printf(" %8s%-3lld", "head ", (long long)h);
        printf(" %11s%s\n", H > 1 ? "heads' sum" : "estimate", check ? "     patched" : "");
        for (int64_t l = first; l <= last; l++) {
            const double *e = estimate + (l * K + k) * H;
            double sum = 0;
            printf("%-6lld", (long long)l);
            for (int64_t h = 0; h < H; h++) {
                sum += e[h];
                if (H > 1) printf(" %11.4f", e[h]);
            }
            printf(" %11.4f", sum);
            const int64_t cell = (l - first) * K + k;
            summed[cell] = sum;
            if (check) {
                attn_model_patch only = one;
                only.positions = &p;
                only.n_positions = 1;
                attn_model_run_options spec = ATTN_MODEL_RUN_OPTIONS_INIT;
                spec.patches = &only;
                spec.n_patches = 1;
                spec.sweep_layer = l;
                spec.source = record;
                if (attn_model_run(m, clean->ids, clean->L, &spec, patched)) {
                    printf("\n");
                    rc = cli_data_error(CMD, "%s", attn_last_error());
                    goto done;
                }
                real[cell] = logit_metric(patched, answer, wrong) - metric[0];
                printf(" %11.4f", real[cell]);
            }
            printf("\n");
            if (!cli_stdout_ok(CMD)) {
                rc = CLI_DATA_ERROR;
                goto done;
            }
        }
    }
    if (check) {
        int64_t same = 0;
        for (int64_t i = 0; i < cells; i++) same += (summed[i] > 0) == (real[i] > 0);
        printf("\nestimates against real patches: Pearson r %.3f over %lld, the same sign in %lld\n",
               correlation(summed, real, cells), (long long)cells, (long long)same);
    }
done:
    attn_model_record_free(record);
    free(estimate);
    free(summed);
    free(real);
    free(patched);
    return rc;
}

static int trace_main(const trace_cli *o) {
    cli_model model = {0};
    attn_decoder *m = NULL;
    attn_tokenizer *tok = NULL;
    attn_npz_writer *cache = NULL;
    run_text target = {0}, source = {0};
    attn_model_record *record = NULL;
    float *clean = NULL, *patched = NULL, *source_logits = NULL;
    char *hooks_copy = NULL;
    const char *patterns[PATTERNS_MAX];
    int n_patterns = 0, rc = CLI_OK;
    cli_model_patch parsed[PATCHES_MAX];
    attn_model_patch patches[PATCHES_MAX];
    char error[512];
    attn_decoder_config c;
    if ((rc = cli_model_config(CMD, o->model, &c))) return rc;
    /* Everything that can be checked without the weights is checked first:
     * loading them takes seconds. */
    for (int i = 0; i < o->n_patches; i++)
        if (!cli_model_patch_parse(o->patch_texts[i], o->patch_ablate[i] ? CLI_ABLATE : CLI_PATCH, c.n_layers, &parsed[i], error,
                                   sizeof error)) {
            rc = cli_usage_error(CMD, "%s", error);
            goto done;
        }
    for (int i = 0; i < o->n_patches; i++) patches[i] = parsed[i].p;
    cli_model_patch attribute;
    if (o->attribute &&
        !cli_model_patch_parse(o->attribute, CLI_ATTRIBUTE, c.n_layers, &attribute, error, sizeof error)) {
        rc = cli_usage_error(CMD, "%s", error);
        goto done;
    }
    bool any_source = false, any_sweep = false;
    for (int i = 0; i < o->n_patches; i++) {
        any_source |= patches[i].kind == ATTN_MODEL_PATCH_SOURCE;
        any_sweep |= patches[i].layer < 0;
    }
    if (any_source && !o->source_text && !o->source_ids) {
        rc = cli_usage_error(CMD, "--patch copies from a source run: give --source-text TEXT (or --source-ids)");
        goto done;
    }
    if (any_sweep != o->sweep) {
        rc = cli_usage_error(CMD, any_sweep ? "a patch names every layer (blocks.*. or no layer): add --sweep-layers, "
                                              "or name one layer (blocks.L.NAME)"
                                            : "--sweep-layers needs a patch without a layer (blocks.*.NAME)");
        goto done;
    }
    if (o->paths && (!o->source_text && !o->source_ids)) {
        rc = cli_usage_error(CMD, "--paths compares two runs: give --source-text TEXT (or --source-ids)");
        goto done;
    }
    if (o->hooks) {
        if (!(hooks_copy = strdup(o->hooks))) {
            rc = cli_data_error(CMD, "out of memory");
            goto done;
        }
        for (char *save = NULL, *p = strtok_r(hooks_copy, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
            if (n_patterns == PATTERNS_MAX) {
                rc = cli_usage_error(CMD, "--hooks: at most %d patterns", PATTERNS_MAX);
                goto done;
            }
            int64_t matches = 0;
            attn_model_hooks_matching(c.n_layers, p, NULL, &matches);
            if (matches == 0) {
                rc = cli_usage_error(CMD, "--hooks: '%s' matches no hook of this model (%lld layers; names such as "
                                          "blocks.0.attn.hook_pattern, blocks.*.hook_resid_post, hook_embed)",
                                     p, (long long)c.n_layers);
                goto done;
            }
            patterns[n_patterns++] = p;
        }
        if (n_patterns == 0) {
            rc = cli_usage_error(CMD, "--hooks: no pattern");
            goto done;
        }
    }
    const double t0 = cli_seconds();
    if ((rc = cli_model_open(CMD, o->model, &o->load, false, NULL, &model))) goto done;
    m = model.decoder;
    tok = model.tokenizer;
    const int64_t V = c.vocab;
    int64_t answer = -1, wrong = -1;
    if (!take_text(tok, o->text ? "--text" : "--ids", o->text, o->ids, V, &target, &rc) ||
        ((o->source_text || o->source_ids) &&
         !take_text(tok, o->source_text ? "--source-text" : "--source-ids", o->source_text, o->source_ids, V, &source,
                    &rc)))
        goto done;
    if ((rc = cli_check_context(CMD, &c, target.L > source.L ? target.L : source.L, 0, o->allow_beyond_context)))
        goto done;
    if ((o->answer && !cli_answer_token(CMD, tok, "--answer", o->answer, V, &answer)) ||
        (o->wrong && !cli_answer_token(CMD, tok, "--wrong", o->wrong, V, &wrong))) {
        rc = CLI_USAGE_ERROR;
        goto done;
    }
    clean = malloc((size_t)V * sizeof *clean);
    patched = malloc((size_t)V * sizeof *patched);
    source_logits = malloc((size_t)V * sizeof *source_logits);
    if (!clean || !patched || !source_logits) {
        rc = cli_data_error(CMD, "out of memory");
        goto done;
    }
    fprintf(stderr, "attn model trace: %s loaded in %.1f s\n", c.architecture, cli_seconds() - t0);
    print_tokens(tok, "target", &target);
    if (source.L) print_tokens(tok, "source", &source);
    /* The clean run, and the source's own (its next token, for reference). */
    if (attn_model_run(m, target.ids, target.L, NULL, clean) ||
        (source.L && attn_model_run(m, source.ids, source.L, NULL, source_logits)) ||
        (any_source && attn_model_record_new(m, source.ids, source.L, patches, o->n_patches, &record))) {
        rc = cli_data_error(CMD, "%s", attn_last_error());
        goto done;
    }
    int64_t best;
    attn_top_k(clean, V, 1, &best);
    if (wrong < 0) wrong = best;
    char buf[256], buf2[256];
    printf("\nnext token (top %lld with probabilities):\n", (long long)o->top);
    print_top(tok, "clean", clean, V, o->top);
    if (source.L) print_top(tok, "source", source_logits, V, o->top);
    if (o->paths) {
        rc = print_paths(m, tok, &target, &source, o->position);
        goto done;
    }
    if (o->nullspace) {
        rc = print_nullspace(m, tok, &target, o);
        goto done;
    }
    if (o->value_norms >= 0) {
        rc = print_value_norms(m, tok, &target, o);
        goto done;
    }
    if (o->rollout) {
        rc = print_rollout(m, tok, &target, o);
        goto done;
    }
    if (o->attribute) {
        if (!attribute.p.n_positions && target.L != source.L) {
            rc = cli_usage_error(CMD, "--attribute '%s': every position needs texts of one length (they have %lld "
                                      "and %lld tokens): name positions, @-1 for the last of each",
                                 o->attribute, (long long)target.L, (long long)source.L);
            goto done;
        }
        /* The metric by default: the text's top token against the source's
         * (the logit alone when they agree). */
        int64_t source_best;
        attn_top_k(source_logits, V, 1, &source_best);
        const int64_t to = answer >= 0 ? answer : best;
        const int64_t against = o->wrong ? wrong : source_best != to ? source_best : -1;
        rc = print_attribution(m, tok, &target, &source, &attribute.p, to, against, o->check);
        goto done;
    }
    if (o->logit_lens || o->logit_attribution) { /* --wrong only as given: no default here */
        const int64_t given_wrong = o->wrong ? wrong : -1;
        rc = o->logit_lens ? print_logit_lens(m, tok, &target, o->position, answer, given_wrong)
                           : print_logit_attribution(m, tok, &target, o, answer, given_wrong);
        goto done;
    }
    attn_model_run_options spec = ATTN_MODEL_RUN_OPTIONS_INIT;
    spec.patches = patches;
    spec.n_patches = o->n_patches;
    spec.source = record;
    spec.patterns = patterns;
    spec.n_patterns = n_patterns;
    if (o->out) {
        if (attn_npz_create(o->out, o->compress, &cache)) {
            rc = cli_data_error(CMD, "%s", attn_last_error());
            goto done;
        }
        spec.cache = cache;
    }
    int64_t recorded = 0;
    spec.recorded = &recorded;
    if (!o->sweep) {
        if (attn_model_run(m, target.ids, target.L, &spec, patched)) {
            rc = cli_data_error(CMD, "%s", attn_last_error());
            goto done;
        }
        if (o->n_patches) {
            print_top(tok, "patched", patched, V, o->top);
            printf("\nKL(clean || patched) = %.6g nats\n", attn_logits_kl(clean, patched, V));
            if (answer >= 0)
                printf("p(%s) clean %.6f -> patched %.6f;  logit difference %s - %s: clean %.4f -> patched %.4f\n",
                       token_text(tok, (int32_t)answer, buf, sizeof buf), attn_logits_prob(clean, V, answer),
                       attn_logits_prob(patched, V, answer), buf, token_text(tok, (int32_t)wrong, buf2, sizeof buf2),
                       (double)(clean[answer] - clean[wrong]), (double)(patched[answer] - patched[wrong]));
        } else if (answer >= 0) {
            printf("\np(%s) = %.6f;  logit difference %s - %s = %.4f\n", token_text(tok, (int32_t)answer, buf, sizeof buf),
                   attn_logits_prob(clean, V, answer), buf, token_text(tok, (int32_t)wrong, buf2, sizeof buf2),
                   (double)(clean[answer] - clean[wrong]));
        }
    } else {
        if (answer >= 0)
            printf("\np(%s): clean %.6f, source %.6f.  Per layer, with the patch at that layer alone:\n",
                   token_text(tok, (int32_t)answer, buf, sizeof buf), attn_logits_prob(clean, V, answer),
                   source.L ? attn_logits_prob(source_logits, V, answer) : NAN);
        else
            printf("\nper layer, with the patch at that layer alone:\n");
        printf("%-6s %10s %12s %12s  %s\n", "layer", answer >= 0 ? "p(answer)" : "", answer >= 0 ? "logit diff" : "",
               "KL", "top next tokens");
        for (int64_t l = 0; l < c.n_layers; l++) {
            spec.sweep_layer = l;
            spec.cache = NULL; /* the cache holds the unswept run: one layer's patch would be arbitrary */
            if (attn_model_run(m, target.ids, target.L, &spec, patched)) {
                rc = cli_data_error(CMD, "%s", attn_last_error());
                goto done;
            }
            int64_t tops[3];
            attn_top_k(patched, V, 3, tops);
            printf("%-6lld ", (long long)l);
            if (answer >= 0)
                printf("%10.6f %12.4f ", attn_logits_prob(patched, V, answer), (double)(patched[answer] - patched[wrong]));
            else
                printf("%10s %12s ", "", "");
            printf("%12.6g ", attn_logits_kl(clean, patched, V));
            for (int j = 0; j < 3; j++)
                printf(" %s %.3f", token_text(tok, (int32_t)tops[j], buf, sizeof buf), attn_logits_prob(patched, V, tops[j]));
            printf("\n");
        }
        if (cache) { /* the clean run's hooks */
            spec.n_patches = 0;
            spec.cache = cache;
            if (attn_model_run(m, target.ids, target.L, &spec, patched)) {
                rc = cli_data_error(CMD, "%s", attn_last_error());
                goto done;
            }
        }
    }
    if (cache) {
        attn_npz_writer *w = cache;
        cache = NULL;
        if (attn_npz_commit(w)) {
            rc = cli_data_error(CMD, "%s", attn_last_error());
            goto done;
        }
        fprintf(stderr, "attn model trace: %lld arrays written to %s\n", (long long)recorded, o->out);
    }
done:
    attn_npz_discard(cache);
    attn_model_record_free(record);
    free(hooks_copy);
    free(clean);
    free(patched);
    free(source_logits);
    free(target.ids);
    free(source.ids);
    cli_model_close(&model); /* m and tok are its */
    return rc;
}

int cmd_model_trace(int argc, char **argv) {
    trace_cli o = {0};
    o.top = TOP_DEFAULT;
    o.position = -1;
    o.tolerance = 1e-3;
    o.value_norms = -1;
    o.head = ATTN_ALL;
    o.residual = 0.5;
    o.load = (attn_decoder_options)ATTN_DECODER_OPTIONS_INIT;
    cli_args args;
    const char *value;
    cli_args_begin(&args, &trace_spec, argc, argv);
    for (int id; (id = cli_args_next(&args, &value)) != CLI_ARGS_END;) {
        if (id == CLI_ARGS_STOP) return args.status;
        switch (id) {
        case F_MODEL: o.model = value; break;
        case F_TEXT: o.text = value; break;
        case F_IDS: o.ids = value; break;
        case F_HOOKS: o.hooks = value; break;
        case F_OUT: o.out = value; break;
        case F_COMPRESS: o.compress = true; break;
        case F_SOURCE_TEXT: o.source_text = value; break;
        case F_SOURCE_IDS: o.source_ids = value; break;
        case F_PATCH:
        case F_ABLATE:
            if (o.n_patches == PATCHES_MAX) return cli_usage_error(CMD, "at most %d patches and ablations", PATCHES_MAX);
            o.patch_ablate[o.n_patches] = id == F_ABLATE;
            o.patch_texts[o.n_patches++] = value;
            break;
        case F_SWEEP: o.sweep = true; break;
        case F_PATHS: o.paths = true; break;
        case F_BEYOND: o.allow_beyond_context = true; break;
        case F_NULLSPACE: o.nullspace = value; break;
        case F_VALUE_NORMS:
            if (!cli_parse_int(CMD, args.flag, value, 0, INT32_MAX, &o.value_norms)) return CLI_USAGE_ERROR;
            break;
        case F_NO_WO: o.no_wo = true; break;
        case F_ROLLOUT: o.rollout = true; break;
        case F_FLOW: o.flow = true; break;
        case F_LOGIT_LENS: o.logit_lens = true; break;
        case F_LOGIT_ATTRIBUTION: o.logit_attribution = true; break;
        case F_ATTRIBUTE: o.attribute = value; break;
        case F_CHECK: o.check = true; break;
        case F_HEAD:
            if (!cli_parse_int(CMD, args.flag, value, 0, INT32_MAX, &o.head)) return CLI_USAGE_ERROR;
            break;
        case F_RESIDUAL:
            if (!cli_parse_float(CMD, args.flag, value, 0, 1, &o.residual)) return CLI_USAGE_ERROR;
            break;
        case F_TOLERANCE:
            if (!cli_parse_float(CMD, args.flag, value, 0, 1e30, &o.tolerance)) return CLI_USAGE_ERROR;
            break;
        case F_POSITION:
            if (!cli_parse_int(CMD, args.flag, value, -TRACE_TOKENS_MAX, TRACE_TOKENS_MAX - 1, &o.position))
                return CLI_USAGE_ERROR;
            break;
        case F_ANSWER: o.answer = value; break;
        case F_WRONG: o.wrong = value; break;
        case F_TOP:
            if (!cli_parse_int(CMD, args.flag, value, 1, 64, &o.top)) return CLI_USAGE_ERROR;
            break;
        default:
            if (cli_decoder_take(&o.load, CMD, id, value) < 0) return CLI_USAGE_ERROR;
            break;
        }
    }
    if (!o.model) return cli_usage_error(CMD, "--model MODEL is needed (a GGUF file or a checkpoint)");
    if (!o.text == !o.ids) return cli_usage_error(CMD, "give the run as --text TEXT or as --ids ID,.. (one of them)");
    if (o.source_text && o.source_ids) return cli_usage_error(CMD, "--source-text and --source-ids: one of them");
    if (!o.hooks != !o.out) return cli_usage_error(CMD, "--hooks PATTERNS and -o CACHE.npz go together");
    if (o.compress && !o.out) return cli_usage_error(CMD, "--compress applies to -o CACHE.npz");
    if (o.wrong && !o.answer) return cli_usage_error(CMD, "--wrong needs --answer");
    if (o.paths && (o.n_patches || o.sweep || o.out || o.answer))
        return cli_usage_error(CMD, "--paths is a run of its own: no --patch, --ablate, --sweep-layers, --hooks or --answer");
    if (o.nullspace && (o.paths || o.n_patches || o.sweep || o.out || o.answer))
        return cli_usage_error(CMD, "--nullspace is a run of its own: no --paths, --patch, --ablate, --sweep-layers, "
                                    "--hooks or --answer");
    const bool lens = o.logit_lens || o.logit_attribution, analysis = o.value_norms >= 0 || o.rollout || lens;
    if ((o.value_norms >= 0) + o.rollout + !!o.nullspace + o.paths + o.logit_lens + o.logit_attribution > 1)
        return cli_usage_error(CMD, "--paths, --nullspace, --value-norms, --rollout, --logit-lens and "
                                    "--logit-attribution: one of them");
    if (analysis && (o.n_patches || o.sweep || o.out || o.source_text || o.source_ids || (o.answer && !lens)))
        return cli_usage_error(CMD, "--value-norms, --rollout, --logit-lens and --logit-attribution are runs of "
                                    "their own: no --patch, --ablate, --sweep-layers, --hooks or source (--answer: "
                                    "the logit lens and attribution only)");
    if (o.logit_attribution && !o.answer)
        return cli_usage_error(CMD, "--logit-attribution needs --answer TOKEN (the logit it splits)");
    if (o.attribute && (!o.source_text && !o.source_ids))
        return cli_usage_error(CMD, "--attribute estimates patches from a second run: give --source-text TEXT (or "
                                    "--source-ids)");
    if (o.attribute && (o.n_patches || o.sweep || o.out || o.paths || o.nullspace || analysis))
        return cli_usage_error(CMD, "--attribute is a run of its own: no --patch, --ablate, --sweep-layers, --hooks, "
                                    "--paths, --nullspace or analysis");
    if (o.check && !o.attribute) return cli_usage_error(CMD, "--check goes with --attribute");
    if (o.no_wo && o.value_norms < 0) return cli_usage_error(CMD, "--no-wo applies to --value-norms");
    if (o.flow && !o.rollout) return cli_usage_error(CMD, "--flow goes with --rollout");
    if ((cli_args_given(&args, F_HEAD) || cli_args_given(&args, F_RESIDUAL)) && !o.rollout)
        return cli_usage_error(CMD, "--head and --residual apply to --rollout");
    if (cli_args_given(&args, F_POSITION) && !o.paths && !o.nullspace && !analysis)
        return cli_usage_error(CMD, "--position applies to --paths, --nullspace and the analyses");
    if (cli_args_given(&args, F_TOLERANCE) && !o.nullspace) return cli_usage_error(CMD, "--tolerance applies to --nullspace");
    if (o.out) {
        const char *outs[] = {o.out};
        const char *ins[] = {o.model};
        const int rc = cli_check_paths(CMD, ins, 1, outs, 1);
        if (rc) return rc;
    }
    return trace_main(&o);
}
