/*
 * cmd_paths.c — `attn paths`: the path decomposition of the chapter's
 * Figure 2 on the user's inputs.  With the base queries held fixed, the
 * changed keys (K only), the changed values (V only) or both are swapped in;
 * the interaction term says how far the two paths fail to add up.
 *
 * Inputs, one of:
 *   bare attention  --base-q/-k/-v  [B?, P, H?, W] and --changed-q/-k/-v
 *   a module        --base X [L, d] or [B, L, d], --changed X2 (same shape),
 *                   [--context C --changed-context C2], --wq ... --heads H
 *   --chapter       the chapter's X, W_Q = I, W_K = c I, W_V = diag(2, 1),
 *                   x2 = [0, 1] -> [0, 2]
 * Output: per (batch, head, query) the weights and z of every case, and for
 * a module with several heads or W_O, hook_attn_out per query; --json for
 * machines.
 */
#include "cli_interp.h"

#include <stdlib.h>
#include <string.h>

#define PRINT_ROWS 32 /* (batch, query, head) tables printed without --all */
#define PRINT_ROWS_TEXT "32"

static void paths_help(FILE *out) {
    fprintf(out,
    "usage: attn paths --chapter [--query I] [--json]\n"
    "       attn paths --base-q Q.npy --base-k K.npy --base-v V.npy\n"
    "                  [--changed-q Q2.npy] [--changed-k K2.npy] [--changed-v V2.npy] [--layout BLHD|BHLD]\n"
    "                  [options]\n"
    "       attn paths --base X.npy --changed X2.npy [--context C.npy [--changed-context C2.npy]]\n"
    "                  --wq WQ.npy --wk WK.npy --wv WV.npy [--wo ..] [biases] --heads H [options]\n\n"
    "Path decomposition (the chapter's Figure 2): weight and content are separate causal paths.\n"
    "The base queries are held fixed and the changed input's keys, values or both are swapped in:\n"
    "  base     base keys,    base values\n"
    "  K only   changed keys, base values     (the weights move, the content does not)\n"
    "  V only   base keys,    changed values  (the base weights read new content)\n"
    "  both     changed keys, changed values\n"
    "  changed  the changed input's own run   (its queries change too)\n"
    "  interaction = both - K only - V only + base   (0 when the two paths simply add)\n\n"
    "bare attention (arrays as `attn sdpa`: [P, W], [P, H, W] or [B, P, H, W]):\n"
    "  --base-q/-k/-v F.npy         the base queries, keys, values\n"
    "  --changed-q/-k/-v F.npy      the changed ones (each defaults to the base's; give at least one)\n"
    "a multi-head module (as `attn mha`, W stored [d_in, d_out]):\n"
    "  --base X.npy --changed X2.npy    input sequences [L, d_model] or [B, L, d_model]\n"
    "  --context C.npy                  cross-attention keys/values [S, d_ctx] or [B, S, d_ctx]\n"
    "  --changed-context C2.npy         the changed context (default: --context)\n"
    "%s"
    "selection and output:\n"
    "  --batch B  --head H  --query I   print only these (0-based; default all)\n"
    "  --all                            print every row (without it the tables stop after " PRINT_ROWS_TEXT "\n"
    "                                   rows and say how to see the rest)\n"
    "  --chapter                        the chapter's example; --query defaults to 2 (the chapter's q3)\n"
    "  --json                           one JSON object on stdout instead of the tables\n\n"
    "%s%s%s\n"
    "example:\n"
    "  attn paths --chapter        # q3: [1.5, 0.75] / [1.2, 0.8] / [1.5, 1] / [1.2, 1.2]\n",
    cli_module_help, cli_layout_help, cli_mask_help, cli_compute_help);
}

enum { IN_BASE_Q, IN_BASE_K, IN_BASE_V, IN_CHANGED_Q, IN_CHANGED_K, IN_CHANGED_V,
       IN_BASE, IN_CHANGED, IN_CONTEXT, IN_CHANGED_CONTEXT, IN_COUNT };
static const char *const input_flags[IN_COUNT] = {
    "--base-q", "--base-k", "--base-v", "--changed-q", "--changed-k", "--changed-v",
    "--base", "--changed", "--context", "--changed-context"};

/* Flag ids: an input's is F_INPUT + IN_*. */
enum { F_INPUT = 1, F_CHAPTER = F_INPUT + IN_COUNT, F_JSON, F_ALL, F_BATCH, F_HEAD, F_QUERY };

static const cli_flag paths_flags[] = {
    {"--base-q", "Q.npy", F_INPUT + IN_BASE_Q, 0},        {"--base-k", "K.npy", F_INPUT + IN_BASE_K, 0},
    {"--base-v", "V.npy", F_INPUT + IN_BASE_V, 0},        {"--changed-q", "Q2.npy", F_INPUT + IN_CHANGED_Q, 0},
    {"--changed-k", "K2.npy", F_INPUT + IN_CHANGED_K, 0}, {"--changed-v", "V2.npy", F_INPUT + IN_CHANGED_V, 0},
    {"--base", "X.npy", F_INPUT + IN_BASE, 0},            {"--changed", "X2.npy", F_INPUT + IN_CHANGED, 0},
    {"--context", "C.npy", F_INPUT + IN_CONTEXT, 0},
    {"--changed-context", "C2.npy", F_INPUT + IN_CHANGED_CONTEXT, 0},
    {"--chapter", NULL, F_CHAPTER, 0},                    {"--json", NULL, F_JSON, 0},
    {"--all", NULL, F_ALL, 0},                            {"--batch", "B", F_BATCH, 0},
    {"--head", "H", F_HEAD, 0},                           {"--query", "I", F_QUERY, 0},
    CLI_FLAGS_END};

static const cli_flag *const paths_tables[] = {paths_flags, cli_module_flags, cli_layout_flags, cli_mask_flags,
                                               cli_compute_flags, NULL};
const cli_spec cli_paths_spec = {"paths", paths_tables, paths_help, false};

#define PRINT_MAX 8 /* entries of a vector shown in the tables */

typedef struct selection {
    int64_t batch, head, query; /* -1 = all */
} selection;

static bool selected(int64_t want, int64_t index) { return want < 0 || want == index; }

/* ------------------------------------------------------------ text table */

static void print_case_rows(const attn_paths *p, int64_t b, int64_t h, int64_t i) {
    const attn_trace *t = &p->run[ATTN_PATH_BASE];
    const int64_t S = t->context_len, Dv = t->value_dim;
    static const char *const what[ATTN_PATH_CASES][3] = {
        {"base", "base", "base"}, {"changed", "base", "base"}, {"base", "changed", "base"},
        {"changed", "changed", "base"}, {"changed", "changed", "changed"}};
    char weights[ATTN_PATH_CASES][512], z[ATTN_PATH_CASES][512], inter[512];
    int width = 7;
    for (int c = 0; c < ATTN_PATH_CASES; c++) {
        const attn_trace *r = &p->run[c];
        cli_format_vector(weights[c], sizeof weights[c], r->pattern + ((b * t->heads + h) * t->len + i) * S, S, PRINT_MAX);
        cli_format_vector(z[c], sizeof z[c], r->z + ((b * t->len + i) * t->heads + h) * Dv, Dv, PRINT_MAX);
        if ((int)strlen(weights[c]) > width) width = (int)strlen(weights[c]);
    }
    printf("  %-8s %-8s %-8s %-8s %-*s  z (this head's output)\n", "case", "keys", "values", "queries", width, "weights");
    for (int c = 0; c < ATTN_PATH_CASES; c++)
        printf("  %-8s %-8s %-8s %-8s %-*s  %s\n", attn_path_case_name((attn_path_case)c), what[c][0], what[c][1],
               what[c][2], width, weights[c], z[c]);
    cli_format_vector(inter, sizeof inter, p->interaction_z + ((b * t->len + i) * t->heads + h) * Dv, Dv, PRINT_MAX);
    printf("  %-*s  %s\n", 8 * 4 + 3 + width, "interaction = both - K only - V only + base", inter);
}

static void print_module_rows(const attn_paths *p, int64_t b, int64_t i) {
    const attn_trace *t = &p->run[ATTN_PATH_BASE];
    const int64_t d_out = t->d_out;
    char buf[512];
    printf("  %-8s hook_attn_out (every head, through W_O, + bo)\n", "case");
    for (int c = 0; c < ATTN_PATH_CASES; c++)
        printf("  %-8s %s\n", attn_path_case_name((attn_path_case)c),
               cli_format_vector(buf, sizeof buf, p->run[c].attn_out + (b * t->len + i) * d_out, d_out, PRINT_MAX));
    printf("  %-8s %s\n", "interaction",
           cli_format_vector(buf, sizeof buf, p->interaction_out + (b * t->len + i) * d_out, d_out, PRINT_MAX));
}

/* The tables of every selected (batch, query, head), at most PRINT_ROWS of
 * them unless all: a long input would otherwise print megabytes. */
static void print_tables(const attn_paths *p, const selection *sel, bool module_block, bool all) {
    const attn_trace *t = &p->run[ATTN_PATH_BASE];
    if (t->context_len > PRINT_MAX)
        printf("(weights and vectors show their first %d entries; --json has them all)\n", PRINT_MAX);
    int64_t printed = 0, left = 0;
    for (int64_t b = 0; b < t->batch; b++) {
        if (!selected(sel->batch, b)) continue;
        for (int64_t i = 0; i < t->len; i++) {
            if (!selected(sel->query, i)) continue;
            bool shown = false;
            for (int64_t h = 0; h < t->heads; h++) {
                if (!selected(sel->head, h)) continue;
                if (!all && printed >= PRINT_ROWS) {
                    left++;
                    continue;
                }
                printed++;
                shown = true;
                printf("\n");
                if (t->batch > 1) printf("batch %lld, ", (long long)b);
                printf("query %lld, head %lld\n", (long long)i, (long long)h);
                print_case_rows(p, b, h, i);
            }
            if (module_block && shown) {
                printf("\n");
                if (t->batch > 1) printf("batch %lld, ", (long long)b);
                printf("query %lld, the module's output\n", (long long)i);
                print_module_rows(p, b, i);
            }
        }
    }
    if (left)
        printf("\n(%lld more (batch, query, head) tables not printed: choose with --batch, --query and --head, "
               "or print them all with --all or --json)\n", (long long)left);
}

/* ------------------------------------------------------------------ JSON */

static void print_json(const attn_paths *p, const selection *sel) {
    const attn_trace *t = &p->run[ATTN_PATH_BASE];
    const int64_t L = t->len, S = t->context_len, Hq = t->heads, Dv = t->value_dim, d_out = t->d_out;
    printf("{\n  \"cases\": [");
    for (int c = 0; c < ATTN_PATH_CASES; c++) printf("%s\"%s\"", c ? ", " : "", attn_path_case_name((attn_path_case)c));
    printf("],\n  \"batch\": %lld, \"queries\": %lld, \"keys\": %lld, \"heads\": %lld, \"kv_heads\": %lld, "
           "\"value_dim\": %lld, \"d_out\": %lld,\n  \"rows\": [",
           (long long)t->batch, (long long)L, (long long)S, (long long)Hq, (long long)t->kv_heads,
           (long long)Dv, (long long)d_out);
    int first = 1;
    for (int64_t b = 0; b < t->batch; b++)
        for (int64_t i = 0; i < L; i++)
            for (int64_t h = 0; h < Hq; h++) {
                if (!selected(sel->batch, b) || !selected(sel->query, i) || !selected(sel->head, h)) continue;
                printf("%s\n    {\"batch\": %lld, \"head\": %lld, \"query\": %lld,\n     \"weights\": [",
                       first ? "" : ",", (long long)b, (long long)h, (long long)i);
                first = 0;
                for (int c = 0; c < ATTN_PATH_CASES; c++) {
                    printf("%s", c ? ", " : "");
                    cli_print_json_vector(stdout, p->run[c].pattern + ((b * Hq + h) * L + i) * S, S);
                }
                printf("],\n     \"z\": [");
                for (int c = 0; c < ATTN_PATH_CASES; c++) {
                    printf("%s", c ? ", " : "");
                    cli_print_json_vector(stdout, p->run[c].z + ((b * L + i) * Hq + h) * Dv, Dv);
                }
                printf("],\n     \"interaction_z\": ");
                cli_print_json_vector(stdout, p->interaction_z + ((b * L + i) * Hq + h) * Dv, Dv);
                printf("}");
            }
    printf("\n  ]");
    if (d_out) {
        printf(",\n  \"attn_out\": [");
        first = 1;
        for (int64_t b = 0; b < t->batch; b++)
            for (int64_t i = 0; i < L; i++) {
                if (!selected(sel->batch, b) || !selected(sel->query, i)) continue;
                printf("%s\n    {\"batch\": %lld, \"query\": %lld, \"out\": [", first ? "" : ",", (long long)b, (long long)i);
                first = 0;
                for (int c = 0; c < ATTN_PATH_CASES; c++) {
                    printf("%s", c ? ", " : "");
                    cli_print_json_vector(stdout, p->run[c].attn_out + (b * L + i) * d_out, d_out);
                }
                printf("], \"interaction_out\": ");
                cli_print_json_vector(stdout, p->interaction_out + (b * L + i) * d_out, d_out);
                printf("}");
            }
        printf("\n  ]");
    }
    printf("\n}\n");
}

/* ---------------------------------------------------------------- inputs */

/* Bare attention from --base-q/-k/-v and --changed-q/-k/-v. */
static int run_sdpa(const char *const paths[IN_COUNT], attn_array in[IN_COUNT], cli_attention_options *ao,
                    attn_paths *p) {
    attn_tensor t[6];
    int rc;
    for (int n = IN_BASE_Q; n <= IN_CHANGED_V; n++)
        if (paths[n] && (rc = cli_load_qkv("paths", input_flags[n], paths[n], ao->layout, &in[n], &t[n]))) return rc;
    cli_warn_if_transposed("paths", ao, &t[IN_BASE_Q], paths[IN_BASE_Q], &t[IN_BASE_K], paths[IN_BASE_K]);
    for (int n = IN_CHANGED_Q; n <= IN_CHANGED_V; n++) {
        const attn_tensor *base = &t[n - 3];
        if (paths[n] && memcmp(t[n].shape, base->shape, sizeof base->shape)) {
            char a[96], b[96];
            return cli_data_error("paths", "%s '%s' has shape %s but %s '%s' has %s; the changed input must have the base's shape",
                                  input_flags[n], paths[n], cli_shape_str(&in[n], a, sizeof a), input_flags[n - 3],
                                  paths[n - 3], cli_shape_str(&in[n - 3], b, sizeof b));
        }
    }
    const attn_tensor *q = &t[IN_BASE_Q], *k = &t[IN_BASE_K];
    if ((rc = cli_load_attention_inputs("paths", ao, q->shape[0], q->shape[2], q->shape[1], k->shape[1])) ||
        (rc = cli_check_traced_budget("paths", ao, q->shape[0], q->shape[2], k->shape[2], q->shape[1], k->shape[1],
                                      q->shape[3], t[IN_BASE_V].shape[3], ATTN_PATH_CASES)))
        return rc;
    attn_status st = attn_sdpa_paths(&t[IN_BASE_Q], &t[IN_BASE_K], &t[IN_BASE_V],
                                     paths[IN_CHANGED_Q] ? &t[IN_CHANGED_Q] : NULL,
                                     paths[IN_CHANGED_K] ? &t[IN_CHANGED_K] : NULL,
                                     paths[IN_CHANGED_V] ? &t[IN_CHANGED_V] : NULL, &ao->opt, p);
    if (st) return cli_data_error("paths", "%s: %s", attn_status_str(st), attn_last_error());
    return CLI_OK;
}

/* A module from --base/--changed (+ context) and the weight flags. */
static int run_mha(const char *const paths[IN_COUNT], attn_array in[IN_COUNT], cli_module *mod,
                   cli_attention_options *ao, attn_paths *p) {
    int64_t dims[IN_COUNT][3];
    int rc;
    for (int n = IN_BASE; n < IN_COUNT; n++)
        if (paths[n] && (rc = cli_load_sequence("paths", input_flags[n], paths[n], &in[n], dims[n]))) return rc;
    const int pairs[2][2] = {{IN_BASE, IN_CHANGED}, {IN_CONTEXT, IN_CHANGED_CONTEXT}};
    for (int n = 0; n < 2; n++) {
        const int a = pairs[n][0], b = pairs[n][1];
        if (paths[b] && memcmp(dims[a], dims[b], sizeof dims[a])) {
            char sa[96], sb[96];
            return cli_data_error("paths", "%s '%s' has shape %s but %s '%s' has %s; they must match",
                                  input_flags[b], paths[b], cli_shape_str(&in[b], sb, sizeof sb), input_flags[a],
                                  paths[a], cli_shape_str(&in[a], sa, sizeof sa));
        }
    }
    if (paths[IN_CONTEXT] && dims[IN_CONTEXT][0] != dims[IN_BASE][0])
        return cli_data_error("paths", "--context '%s' has batch %lld but --base '%s' has batch %lld", paths[IN_CONTEXT],
                              (long long)dims[IN_CONTEXT][0], paths[IN_BASE], (long long)dims[IN_BASE][0]);
    const int64_t B = dims[IN_BASE][0], L = dims[IN_BASE][1];
    const int64_t S = paths[IN_CONTEXT] ? dims[IN_CONTEXT][1] : L;
    const int64_t d_ctx = paths[IN_CONTEXT] ? dims[IN_CONTEXT][2] : dims[IN_BASE][2];
    if ((rc = cli_module_load("paths", mod, dims[IN_BASE][2], d_ctx)) ||
        (rc = cli_load_attention_inputs("paths", ao, B, mod->m.heads, L, S)) ||
        (rc = cli_check_traced_budget("paths", ao, B, mod->m.heads, mod->m.kv_heads, L, S, mod->m.head_dim,
                                      mod->m.value_dim, ATTN_PATH_CASES)))
        return rc;
    attn_status st = attn_mha_paths(&mod->m, in[IN_BASE].data, in[IN_CHANGED].data, B, L, in[IN_CONTEXT].data,
                                    in[IN_CHANGED_CONTEXT].data, S, &ao->opt, p);
    if (st) return cli_data_error("paths", "%s: %s", attn_status_str(st), attn_last_error());
    return CLI_OK;
}

int cmd_paths(int argc, char **argv) {
    const char *paths[IN_COUNT] = {0};
    attn_array in[IN_COUNT] = {{0}};
    cli_module mod = {0};
    cli_attention_options ao = CLI_ATTENTION_OPTIONS_INIT;
    attn_paths p = {0};
    selection sel = {-1, -1, -1};
    bool chapter = false, json = false;
    int rc = CLI_OK;

    bool all = false;
    cli_args args;
    const char *value;
    cli_args_begin(&args, &cli_paths_spec, argc, argv);
    for (int id; (id = cli_args_next(&args, &value)) != CLI_ARGS_END;) {
        if (id == CLI_ARGS_STOP) return args.status;
        int taken = cli_attention_take(&ao, &args, id, value);
        if (!taken) taken = cli_module_take(&mod, &args, id, value);
        if (taken < 0) return CLI_USAGE_ERROR;
        if (taken) continue;
        if (id >= F_INPUT && id < F_INPUT + IN_COUNT) paths[id - F_INPUT] = value;
        else if (id == F_CHAPTER) chapter = true;
        else if (id == F_JSON) json = true;
        else if (id == F_ALL) all = true;
        else if (!cli_parse_int("paths", args.flag, value, 0, INT64_MAX,
                                id == F_BATCH ? &sel.batch : id == F_HEAD ? &sel.head : &sel.query))
            return CLI_USAGE_ERROR;
    }

    bool sdpa = false, mha = false;
    for (int n = 0; n < IN_COUNT; n++) *(n < IN_BASE ? &sdpa : &mha) |= paths[n] != NULL;
    mha |= cli_module_given(&mod);
    if (chapter + sdpa + mha != 1)
        return cli_usage_error("paths", (chapter + sdpa + mha) ? "give one kind of input: --chapter, --base-q/-k/-v "
                                                               "(bare attention) or --base/--changed with weights (a module)"
                                                             : "no input: give --chapter, --base-q/-k/-v, or --base/--changed");
    if (sdpa && (!paths[IN_BASE_Q] || !paths[IN_BASE_K] || !paths[IN_BASE_V]))
        return cli_usage_error("paths", "missing %s", !paths[IN_BASE_Q] ? "--base-q Q.npy" : !paths[IN_BASE_K] ? "--base-k K.npy" : "--base-v V.npy");
    if (sdpa && !paths[IN_CHANGED_Q] && !paths[IN_CHANGED_K] && !paths[IN_CHANGED_V])
        return cli_usage_error("paths", "nothing changed: give --changed-q, --changed-k and/or --changed-v");
    if (mha && (!paths[IN_BASE] || !paths[IN_CHANGED]))
        return cli_usage_error("paths", "missing %s", !paths[IN_BASE] ? "--base X.npy" : "--changed X2.npy");
    if (mha && paths[IN_CHANGED_CONTEXT] && !paths[IN_CONTEXT])
        return cli_usage_error("paths", "--changed-context needs --context (for self-attention, change --changed)");
    if (!sdpa && ao.layout_given)
        return cli_usage_error("paths", "--layout is for --base-q/-k/-v; %s", chapter ? "--chapter has no layout to choose"
                                                                                  : "--base is [L, d_model] or [B, L, d_model]");

    attn_chapter ch;
    if (chapter) {
        if (sel.query < 0) sel.query = 2;
        if ((rc = cli_load_attention_inputs("paths", &ao, 1, 1, 3, 3))) goto cleanup;
        attn_status st = attn_chapter_compute(&ch);
        const attn_mha m = attn_chapter_module(&ch);
        if (st == ATTN_OK)
            st = attn_mha_paths(&m, &ch.x[0][0], &ch.x_changed[0][0], 1, 3, NULL, NULL, 0, &ao.opt, &p);
        if (st) {
            rc = cli_data_error("paths", "%s: %s", attn_status_str(st), attn_last_error());
            goto cleanup;
        }
    } else if ((rc = sdpa ? run_sdpa(paths, in, &ao, &p) : run_mha(paths, in, &mod, &ao, &p))) {
        goto cleanup;
    }
    const attn_trace *t = &p.run[ATTN_PATH_BASE];
    const int64_t sizes[3] = {t->batch, t->heads, t->len};
    const int64_t *want[3] = {&sel.batch, &sel.head, &sel.query};
    static const char *const names[3] = {"--batch", "--head", "--query"};
    for (int n = 0; n < 3; n++)
        if (*want[n] >= sizes[n]) {
            rc = cli_usage_error("paths", "%s %lld is out of range: the input has %lld", names[n], (long long)*want[n],
                                 (long long)sizes[n]);
            goto cleanup;
        }

    if (json) {
        print_json(&p, &sel);
    } else {
        printf("attn paths: base vs changed input, the base queries held fixed (the chapter's Figure 2)\n");
        if (chapter)
            printf("the chapter's example: X = [[1,0],[0,1],[1,1]], W_Q = I, W_K = c*I (c = sqrt(2)*ln 2 = %.6g),\n"
                   "W_V = diag(2, 1); changed input: x2 = [0, 1] -> [0, 2].  Query 2 (0-based) is the chapter's q3.\n",
                   ch.c);
        const bool module_block = mha && (t->heads > 1 || mod.m.wo || mod.m.bo);
        print_tables(&p, &sel, module_block, all);
    }

cleanup:
    attn_paths_free(&p);
    for (int n = 0; n < IN_COUNT; n++) attn_array_free(&in[n]);
    cli_module_free(&mod);
    cli_attention_options_free(&ao);
    return rc;
}
