/*
 * cmd_trace.c — `attn trace`: run attention or a multi-head module with
 * every intermediate recorded under TransformerLens's hook names, patched
 * on the way if asked, and write each hook as DIR/hook_*.npy.
 *
 * Hook files always carry the batch dimension:
 *   hook_q [B, L, Hq, D]  hook_k [B, S, Hkv, D]  hook_v [B, S, Hkv, Dv]
 *   hook_attn_scores, hook_pattern [B, Hq, L, S]  hook_z [B, L, Hq, Dv]
 *   hook_result [B, L, Hq, d_out]  hook_attn_out [B, L, d_out]  (modules only)
 */
#include "cli_interp.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static void trace_help(FILE *out) {
    fprintf(out,
    "usage: attn trace -x X.npy [--context C.npy] --wq WQ.npy --wk WK.npy --wv WV.npy [--wo ..]\n"
    "                  [biases] --heads H [--kv-heads G]  --dir DIR [-o OUT.npy] [patches] [options]\n"
    "       attn trace -q Q.npy -k K.npy -v V.npy [--layout BLHD|BHLD] --dir DIR [-o OUT.npy] [patches]\n"
    "                  [options]\n\n"
    "Runs a module (or bare attention), records every intermediate per head under TransformerLens's\n"
    "hook names and writes DIR/hook_q.npy, hook_k, hook_v, hook_attn_scores, hook_pattern, hook_z and,\n"
    "for a module, hook_result (each head through its slice of W_O) and hook_attn_out.  Hooks hold\n"
    "the values the pass used, i.e. after the patches below.\n\n"
    "inputs (float32; float64/float16 converted):\n"
    "  -x X.npy  [L, d_model] or [B, L, d_model]    --context C.npy  [S, d_ctx] or [B, S, d_ctx]\n"
    "%s"
    "  -q/-k/-v F.npy   bare attention, as `attn sdpa` (--layout BHLD for PyTorch's [B, H, L, D])\n"
    "outputs:\n"
    "  --dir DIR        the hook files (created if missing; every file keeps the batch dimension)\n"
    "  -o OUT.npy       the output ([L, d_out] / [B, L, d_out]; bare attention: the rank of -q)\n\n"
    "patches (q/k/v patches run first, then pattern, then z; in order within each):\n"
    "  --replace SEL=FILE.npy    selected rows := the vector in FILE (as many floats as a row)\n"
    "  --replace SEL=source      selected rows := the same rows of the source run (activation patching)\n"
    "  --zero SEL                selected rows (or pattern entries) := 0\n"
    "  --mean SEL                selected rows := their mean over all positions (q, k, v, z)\n"
    "  --scale SEL=F             selected rows (or pattern entries) *= F  (--scale S, a number\n"
    "                            alone, is the score scale of the computation options)\n"
    "  --set SEL=W               pattern entries := W (hook pattern only)\n"
    "  --ablate HEAD[:mean]      zero (or mean-ablate) one query head: --zero z::HEAD\n"
    "  --renormalise | --no-renormalise\n"
    "                            required with pattern patches: divide each touched row by its new sum,\n"
    "                            or use it as written (it may no longer sum to 1)\n"
    "  --batch B                 patches touch batch B only (default every batch)\n"
    "  SEL is HOOK[:POS[:HEAD[:KEY]]]; HOOK is q, k, v, pattern or z (hook_ prefix allowed); an empty\n"
    "  or * field selects all.  For q, z and pattern POS is a query position and HEAD a query head;\n"
    "  for k and v POS is a key position and HEAD a key/value head; KEY picks pattern entries.\n"
    "source run (for =source):\n"
    "  --source X2.npy [--source-context C2.npy]     a module's second input\n"
    "  --source-q/-k/-v F.npy                        bare attention's (each defaults to the base's)\n\n"
    "%s%s%s\n"
    "examples:\n"
    "  attn trace -x X.npy --wq WQ.npy --wk WK.npy --wv WV.npy --heads 1 --dir hooks/\n"
    "  attn trace -x X.npy ... --source X2.npy --replace k:1=source --replace v:1=source --dir kv/\n"
    "  attn trace -q Q.npy -k K.npy -v V.npy --zero pattern:2::1 --renormalise --dir hide/\n",
    cli_module_help, cli_layout_help, cli_mask_help, cli_compute_help);
}

enum { IN_X, IN_CONTEXT, IN_Q, IN_K, IN_V, IN_SOURCE, IN_SOURCE_CONTEXT, IN_SOURCE_Q, IN_SOURCE_K,
       IN_SOURCE_V, IN_COUNT };
static const char *const input_flags[IN_COUNT] = {"-x", "--context", "-q", "-k", "-v", "--source",
                                                  "--source-context", "--source-q", "--source-k",
                                                  "--source-v"};

/* Flag ids: an input's is F_INPUT + IN_*. */
enum { F_INPUT = 1, F_DIR = F_INPUT + IN_COUNT, F_O, F_REPLACE, F_ZERO, F_MEAN, F_SCALE, F_SET, F_ABLATE,
       F_RENORMALISE, F_NO_RENORMALISE, F_BATCH };

static const cli_flag trace_flags[] = {
    {"-x", "X.npy", F_INPUT + IN_X, 0},              {"--context", "C.npy", F_INPUT + IN_CONTEXT, 0},
    {"-q", "Q.npy", F_INPUT + IN_Q, 0},              {"-k", "K.npy", F_INPUT + IN_K, 0},
    {"-v", "V.npy", F_INPUT + IN_V, 0},              {"--source", "X2.npy", F_INPUT + IN_SOURCE, 0},
    {"--source-context", "C2.npy", F_INPUT + IN_SOURCE_CONTEXT, 0},
    {"--source-q", "Q2.npy", F_INPUT + IN_SOURCE_Q, 0}, {"--source-k", "K2.npy", F_INPUT + IN_SOURCE_K, 0},
    {"--source-v", "V2.npy", F_INPUT + IN_SOURCE_V, 0},
    {"--dir", "DIR", F_DIR, 0},                      {"-o", "OUT.npy", F_O, 0},
    {"--replace", "SEL=FILE|SEL=source", F_REPLACE, CLI_REPEATABLE},
    {"--zero", "SEL", F_ZERO, CLI_REPEATABLE},       {"--mean", "SEL", F_MEAN, CLI_REPEATABLE},
    /* Before the computation options' --scale: SEL=F is a patch, a number the score scale. */
    {"--scale", "SEL=F|S", F_SCALE, CLI_REPEATABLE}, {"--set", "SEL=W", F_SET, CLI_REPEATABLE},
    {"--ablate", "HEAD[:mean]", F_ABLATE, CLI_REPEATABLE},
    {"--renormalise", NULL, F_RENORMALISE, 0},       {"--no-renormalise", NULL, F_NO_RENORMALISE, 0},
    {"--batch", "B", F_BATCH, 0},
    CLI_FLAGS_END};

static const cli_flag *const trace_tables[] = {trace_flags, cli_module_flags, cli_layout_flags, cli_mask_flags,
                                               cli_compute_flags, NULL};
const cli_spec cli_trace_spec = {"trace", trace_tables, trace_help, false};

typedef struct patch_spec {
    attn_patch p;
    const char *flag, *text; /* as typed, for messages */
    const char *file;        /* --replace from a file  */
    bool from_source;
    attn_array values;
} patch_spec;

/* One selector field: empty or "*" = ATTN_ALL, else an index. */
static bool parse_field(const char *cmd, const char *flag, const char *text, size_t len, int64_t *out) {
    char buf[32];
    if (len == 0 || (len == 1 && text[0] == '*')) {
        *out = ATTN_ALL;
        return true;
    }
    if (len >= sizeof buf) return cli_usage_error(cmd, "%s: selector field '%.*s' is too long", flag, (int)len, text), false;
    memcpy(buf, text, len);
    buf[len] = 0;
    return cli_parse_int(cmd, flag, buf, 0, INT64_MAX, out);
}

/* Parses "HOOK[:POS[:HEAD[:KEY]]]" (up to end) into s->p. */
static bool parse_selector(const char *flag, const char *text, const char *end, patch_spec *s) {
    const char *colon = memchr(text, ':', (size_t)(end - text));
    const char *hook_end = colon ? colon : end;
    char name[32];
    if ((size_t)(hook_end - text) >= sizeof name) return cli_usage_error("trace", "%s: unknown hook in '%s'", flag, s->text), false;
    memcpy(name, text, (size_t)(hook_end - text));
    name[hook_end - text] = 0;
    if (attn_hook_from_name(name, &s->p.hook))
        return cli_usage_error("trace", "%s '%s': %s", flag, s->text, attn_last_error()), false;
    if (s->p.hook == ATTN_HOOK_ATTN_SCORES || s->p.hook == ATTN_HOOK_RESULT || s->p.hook == ATTN_HOOK_ATTN_OUT)
        return cli_usage_error("trace", "%s '%s': %s cannot be patched; patch q, k, v, pattern or z", flag, s->text,
                               attn_hook_name(s->p.hook)), false;
    int64_t *fields[3] = {&s->p.position, &s->p.head, &s->p.key};
    const char *at = colon;
    for (int n = 0; at && at < end; n++) {
        if (n == 3) return cli_usage_error("trace", "%s '%s': at most HOOK:POS:HEAD:KEY", flag, s->text), false;
        const char *next = memchr(at + 1, ':', (size_t)(end - at - 1));
        const char *field_end = next ? next : end;
        if (!parse_field("trace", flag, at + 1, (size_t)(field_end - at - 1), fields[n])) return false;
        at = next;
    }
    return true;
}

/* Parses one patch flag and its value into s; false after a usage error. */
static bool parse_patch(const char *flag, const char *value, patch_spec *s) {
    static const struct { const char *flag; attn_patch_kind kind; bool needs_value; } kinds[] = {
        {"--replace", ATTN_PATCH_REPLACE, true}, {"--zero", ATTN_PATCH_ZERO, false},
        {"--mean", ATTN_PATCH_MEAN, false},      {"--scale", ATTN_PATCH_SCALE, true},
        {"--set", ATTN_PATCH_SET, true}};
    memset(s, 0, sizeof *s);
    s->flag = flag;
    s->text = value;
    if (!value) return cli_usage_error("trace", "%s needs a value (see --help)", flag), false;
    if (strcmp(flag, "--ablate") == 0) {
        /* HEAD[:mean] */
        const char *colon = strchr(value, ':');
        bool mean = colon && strcmp(colon + 1, "mean") == 0;
        if (colon && !mean)
            return cli_usage_error("trace", "--ablate expects HEAD or HEAD:mean, got '%s'", value), false;
        s->p = attn_patch_make(mean ? ATTN_PATCH_MEAN : ATTN_PATCH_ZERO, ATTN_HOOK_Z);
        return parse_field("trace", "--ablate", value, colon ? (size_t)(colon - value) : strlen(value), &s->p.head);
    }
    for (size_t n = 0; n < sizeof kinds / sizeof kinds[0]; n++) {
        if (strcmp(flag, kinds[n].flag) != 0) continue;
        s->p = attn_patch_make(kinds[n].kind, ATTN_HOOK_Q);
        const char *eq = strchr(value, '=');
        if (kinds[n].needs_value != (eq != NULL))
            return cli_usage_error("trace", "%s expects %s, got '%s'", flag,
                                   kinds[n].needs_value ? "SEL=VALUE" : "SEL (no =)", value), false;
        if (!parse_selector(flag, value, eq ? eq : value + strlen(value), s)) return false;
        if (kinds[n].kind == ATTN_PATCH_REPLACE) {
            s->from_source = strcmp(eq + 1, "source") == 0;
            s->file = s->from_source ? NULL : eq + 1;
            if (!s->from_source && !*s->file) return cli_usage_error("trace", "%s '%s': no file after =", flag, value), false;
        } else if (eq) {
            double f;
            if (!cli_parse_float("trace", flag, eq + 1, -1e30, 1e30, &f)) return false;
            s->p.factor = (float)f;
        }
        return true;
    }
    return false;
}

/* Width of one row of a patchable hook in a trace of these sizes. */
static int64_t row_width(const attn_trace *t, attn_hook hook) {
    return hook == ATTN_HOOK_PATTERN ? t->context_len
         : hook == ATTN_HOOK_Q || hook == ATTN_HOOK_K ? t->head_dim : t->value_dim;
}

/* Loads the --replace files now that the widths are known (from the
 * source or an unpatched sizing run). */
static int load_patch_values(patch_spec *specs, int n, const attn_trace *sizes) {
    for (int i = 0; i < n; i++) {
        patch_spec *s = &specs[i];
        if (!s->file) continue;
        if (!cli_load_f32("trace", s->flag, s->file, false, &s->values)) return CLI_DATA_ERROR;
        const int64_t want = row_width(sizes, s->p.hook);
        if (s->values.count != want) {
            char buf[96];
            return cli_data_error("trace", "%s '%s': '%s' has shape %s; a row of %s has %lld floats", s->flag, s->text,
                                  s->file, cli_shape_str(&s->values, buf, sizeof buf), attn_hook_name(s->p.hook),
                                  (long long)want);
        }
        s->p.values = s->values.data;
    }
    return CLI_OK;
}

/* Creates dir if missing. */
static int make_dir(const char *dir) {
    struct stat st;
    if (stat(dir, &st) == 0) {
        if (S_ISDIR(st.st_mode)) return CLI_OK;
        return cli_data_error("trace", "--dir '%s' exists and is not a directory", dir);
    }
    if (mkdir(dir, 0777) != 0)
        return cli_data_error("trace", "--dir '%s': cannot create it: %s", dir, strerror(errno));
    return CLI_OK;
}

/* The hook file names under dir, in hook order (names[h] empty for a hook
 * this kind of run does not have: bare attention has no result, attn_out). */
static void hook_paths(const char *dir, char names[ATTN_HOOK_COUNT][4096]) {
    for (int h = 0; h < ATTN_HOOK_COUNT; h++)
        snprintf(names[h], sizeof names[h], "%s/%s.npy", dir, attn_hook_name((attn_hook)h));
}

/* Every file of the run as one set: the hooks under dir (if given), then
 * -o (if given): all of them complete, or none touched. */
static int write_outputs(const char *dir, const char *o_path, const attn_trace *t, int out_ndim,
                         const int64_t *out_shape, const float *out_data) {
    cli_output outputs[ATTN_HOOK_COUNT + 1];
    char names[ATTN_HOOK_COUNT][4096];
    int n = 0;
    if (dir) {
        hook_paths(dir, names);
        for (int h = 0; h < ATTN_HOOK_COUNT; h++) {
            attn_hook_tensor view;
            if (attn_trace_get(t, (attn_hook)h, &view)) continue; /* bare attention: no result / attn_out */
            outputs[n] = (cli_output){names[h], view.ndim, {0}, view.data, ATTN_F32};
            memcpy(outputs[n].shape, view.shape, sizeof view.shape);
            n++;
        }
    }
    const int hooks = n;
    if (o_path) {
        outputs[n] = (cli_output){o_path, out_ndim, {0}, out_data, ATTN_F32};
        memcpy(outputs[n].shape, out_shape, sizeof(int64_t) * (size_t)out_ndim);
        n++;
    }
    if (!cli_save_outputs("trace", outputs, n)) return CLI_DATA_ERROR;
    if (dir) {
        printf("attn trace: wrote %d hooks to %s/\n", hooks, dir);
        for (int h = 0; h < ATTN_HOOK_COUNT; h++) {
            attn_hook_tensor view;
            if (attn_trace_get(t, (attn_hook)h, &view)) continue;
            char shape[96];
            attn_array a = {.ndim = view.ndim};
            memcpy(a.shape, view.shape, sizeof view.shape);
            printf("  %-17s %-18s %-36s %s\n", view.name, cli_shape_str(&a, shape, sizeof shape), view.axes, names[h]);
        }
    }
    if (o_path) printf("attn trace: wrote the output to %s\n", o_path);
    return CLI_OK;
}

/* The library names a failing patch by index ("patch 2: ..."); say which
 * flag that was. */
static int patch_error(attn_status st, const patch_spec *specs, int n) {
    int index = -1;
    if (sscanf(attn_last_error(), "patch %d:", &index) == 1 && index >= 0 && index < n)
        return cli_data_error("trace", "%s: %s\n  (patch %d is %s %s)", attn_status_str(st), attn_last_error(), index,
                              specs[index].flag, specs[index].text);
    return cli_data_error("trace", "%s: %s", attn_status_str(st), attn_last_error());
}

int cmd_trace(int argc, char **argv) {
    const char *paths[IN_COUNT] = {0}, *dir = NULL, *o_path = NULL;
    attn_array in[IN_COUNT] = {{0}};
    cli_module mod = {0};
    cli_attention_options ao = CLI_ATTENTION_OPTIONS_INIT;
    patch_spec *specs = calloc((size_t)argc, sizeof *specs);
    attn_patch *patches = calloc((size_t)argc, sizeof *patches);
    attn_trace t = {0}, source = {0};
    int n_specs = 0, renormalise = -1, rc = CLI_OK;
    int64_t batch = ATTN_ALL;
    float *z_copy = NULL;
    if (!specs || !patches) {
        rc = cli_data_error("trace", "out of memory");
        goto cleanup;
    }

    cli_args args;
    const char *value;
    bool score_scale_given = false;
    cli_args_begin(&args, &cli_trace_spec, argc, argv);
    for (int id; (id = cli_args_next(&args, &value)) != CLI_ARGS_END;) {
        if (id == CLI_ARGS_STOP) {
            rc = args.status;
            goto cleanup;
        }
        if (id == F_SCALE && !strchr(value, '=')) { /* the score scale, not a patch */
            if (score_scale_given) {
                rc = cli_usage_error("trace", "the score scale (--scale S) is given twice; give it once");
                goto cleanup;
            }
            score_scale_given = true;
            id = cli_attention_id("--scale");
        }
        int taken = cli_attention_take(&ao, &args, id, value);
        if (!taken) taken = cli_module_take(&mod, &args, id, value);
        if (taken < 0) {
            rc = CLI_USAGE_ERROR;
            goto cleanup;
        }
        if (taken) continue;
        if (id >= F_INPUT && id < F_INPUT + IN_COUNT) {
            paths[id - F_INPUT] = value;
        } else if (id == F_DIR) {
            dir = value;
        } else if (id == F_O) {
            o_path = value;
        } else if (id == F_RENORMALISE || id == F_NO_RENORMALISE) {
            if (renormalise >= 0) {
                rc = cli_usage_error("trace", "give only one of --renormalise and --no-renormalise");
                goto cleanup;
            }
            renormalise = id == F_RENORMALISE;
        } else if (id == F_BATCH) {
            if (!cli_parse_int("trace", "--batch", value, 0, INT64_MAX, &batch)) {
                rc = CLI_USAGE_ERROR;
                goto cleanup;
            }
        } else if (!parse_patch(args.flag, value, &specs[n_specs++])) { /* a patch flag */
            rc = CLI_USAGE_ERROR;
            goto cleanup;
        }
    }

    const bool module = paths[IN_X] || paths[IN_CONTEXT] || paths[IN_SOURCE] || paths[IN_SOURCE_CONTEXT] ||
                        cli_module_given(&mod);
    const bool bare = paths[IN_Q] || paths[IN_K] || paths[IN_V] || paths[IN_SOURCE_Q] || paths[IN_SOURCE_K] ||
                      paths[IN_SOURCE_V];
    bool uses_source = false, pattern_patched = false;
    for (int n = 0; n < n_specs; n++) {
        uses_source |= specs[n].from_source;
        pattern_patched |= specs[n].p.hook == ATTN_HOOK_PATTERN;
        specs[n].p.batch = batch;
        if (specs[n].p.hook == ATTN_HOOK_PATTERN) specs[n].p.renormalise = renormalise == 1;
    }
    if (module == bare) {
        rc = cli_usage_error("trace", module ? "give a module (-x and weights) or bare attention (-q/-k/-v), not both"
                                             : "no input: give -x with weights, or -q/-k/-v");
    } else if (module && !paths[IN_X]) {
        rc = cli_usage_error("trace", "missing -x X.npy");
    } else if (bare && (!paths[IN_Q] || !paths[IN_K] || !paths[IN_V])) {
        rc = cli_usage_error("trace", "missing %s", !paths[IN_Q] ? "-q Q.npy" : !paths[IN_K] ? "-k K.npy" : "-v V.npy");
    } else if (!dir && !o_path) {
        rc = cli_usage_error("trace", "nothing to write: give --dir DIR and/or -o OUT.npy");
    } else if (pattern_patched && renormalise < 0) {
        rc = cli_usage_error("trace", "a pattern patch needs an explicit choice: --renormalise or --no-renormalise");
    } else if (uses_source && !paths[IN_SOURCE] && !paths[IN_SOURCE_CONTEXT] && !paths[IN_SOURCE_Q] &&
               !paths[IN_SOURCE_K] && !paths[IN_SOURCE_V]) {
        rc = cli_usage_error("trace", "=source needs a source run: --source X2.npy (module) or --source-q/-k/-v");
    } else if (module && paths[IN_SOURCE_CONTEXT] && !paths[IN_CONTEXT]) {
        rc = cli_usage_error("trace", "--source-context needs --context");
    } else if (module && ao.layout_given) {
        rc = cli_usage_error("trace", "--layout is for -q/-k/-v; -x is [L, d_model] or [B, L, d_model]");
    }
    if (!rc) {
        /* Every file read (patch files too), against every file written. */
        const char *inputs[IN_COUNT + MOD_COUNT + 3 + 64];
        int n_inputs = 0;
        for (int n = 0; n < IN_COUNT; n++) inputs[n_inputs++] = paths[n];
        for (int n = 0; n < MOD_COUNT; n++) inputs[n_inputs++] = mod.paths[n];
        inputs[n_inputs++] = ao.key_lengths_path, inputs[n_inputs++] = ao.mask_path, inputs[n_inputs++] = ao.bias_path;
        for (int n = 0; n < n_specs && n < 64; n++) inputs[n_inputs++] = specs[n].file;
        char names[ATTN_HOOK_COUNT][4096];
        const char *outputs[ATTN_HOOK_COUNT + 1];
        if (dir) hook_paths(dir, names);
        for (int h = 0; h < ATTN_HOOK_COUNT; h++) outputs[h] = dir ? names[h] : NULL;
        outputs[ATTN_HOOK_COUNT] = o_path;
        rc = cli_check_paths("trace", inputs, n_inputs, outputs, ATTN_HOOK_COUNT + 1);
    }
    if (rc) goto cleanup;

    attn_status st;
    int64_t out_shape[4], out_ndim;
    const float *out_data = NULL;
    if (module) {
        int64_t dims[IN_COUNT][3];
        for (int n = 0; n < IN_COUNT; n++)
            if (paths[n] && (n == IN_X || n == IN_CONTEXT || n == IN_SOURCE || n == IN_SOURCE_CONTEXT) &&
                (rc = cli_load_sequence("trace", input_flags[n], paths[n], &in[n], dims[n])))
                goto cleanup;
        const int pairs[3][2] = {{IN_X, IN_SOURCE}, {IN_CONTEXT, IN_SOURCE_CONTEXT}, {IN_X, IN_CONTEXT}};
        for (int n = 0; n < 3; n++) {
            const int a = pairs[n][0], b = pairs[n][1];
            if (!paths[a] || !paths[b]) continue;
            if (n < 2 ? memcmp(dims[a], dims[b], sizeof dims[a]) != 0 : dims[a][0] != dims[b][0]) {
                char sa[96], sb[96];
                rc = cli_data_error("trace", "%s '%s' has shape %s, %s '%s' has %s: %s", input_flags[b], paths[b],
                                    cli_shape_str(&in[b], sb, sizeof sb), input_flags[a], paths[a],
                                    cli_shape_str(&in[a], sa, sizeof sa), n < 2 ? "they must match" : "batches differ");
                goto cleanup;
            }
        }
        const int64_t B = dims[IN_X][0], L = dims[IN_X][1], S = paths[IN_CONTEXT] ? dims[IN_CONTEXT][1] : L;
        const int64_t d_ctx = paths[IN_CONTEXT] ? dims[IN_CONTEXT][2] : dims[IN_X][2];
        if ((rc = cli_module_load("trace", &mod, dims[IN_X][2], d_ctx)) ||
            (rc = cli_load_attention_inputs("trace", &ao, B, mod.m.heads, L, S)) ||
            (rc = cli_check_traced_budget("trace", &ao, B, mod.m.heads, mod.m.kv_heads, L, S, mod.m.head_dim,
                                          mod.m.value_dim, 2)))
            goto cleanup;
        /* The source run (or, without one, an unpatched run to size the patch files). */
        const float *source_x = paths[IN_SOURCE] ? in[IN_SOURCE].data : in[IN_X].data;
        const float *source_ctx = paths[IN_SOURCE_CONTEXT] ? in[IN_SOURCE_CONTEXT].data : in[IN_CONTEXT].data;
        if ((st = attn_mha_forward_traced(&mod.m, source_x, B, L, source_ctx, S, &ao.opt, NULL, 0, &source, NULL))) {
            rc = cli_data_error("trace", "source run: %s: %s", attn_status_str(st), attn_last_error());
            goto cleanup;
        }
        if ((rc = load_patch_values(specs, n_specs, &source))) goto cleanup;
        for (int n = 0; n < n_specs; n++) {
            if (specs[n].from_source) specs[n].p.source = &source;
            patches[n] = specs[n].p;
        }
        if ((st = attn_mha_forward_traced(&mod.m, in[IN_X].data, B, L, in[IN_CONTEXT].data, S, &ao.opt, patches,
                                          n_specs, &t, NULL))) {
            rc = patch_error(st, specs, n_specs);
            goto cleanup;
        }
        const int drop = in[IN_X].ndim == 3 ? 0 : 1;
        const int64_t full[3] = {B, L, mod.m.d_out};
        out_ndim = 3 - drop;
        memcpy(out_shape, full + drop, sizeof(int64_t) * (size_t)out_ndim);
        out_data = t.attn_out;
    } else {
        attn_tensor qkv[IN_COUNT];
        for (int n = IN_Q; n < IN_COUNT; n++)
            if (paths[n] && n != IN_SOURCE && n != IN_SOURCE_CONTEXT &&
                (rc = cli_load_qkv("trace", input_flags[n], paths[n], ao.layout, &in[n], &qkv[n])))
                goto cleanup;
        const attn_tensor *q = &qkv[IN_Q], *k = &qkv[IN_K];
        cli_warn_if_transposed("trace", &ao, q, paths[IN_Q], k, paths[IN_K]);
        if ((rc = cli_load_attention_inputs("trace", &ao, q->shape[0], q->shape[2], q->shape[1], k->shape[1])) ||
            (rc = cli_check_traced_budget("trace", &ao, q->shape[0], q->shape[2], k->shape[2], q->shape[1], k->shape[1],
                                          q->shape[3], qkv[IN_V].shape[3], 2)))
            goto cleanup;
        const attn_tensor *src[3];
        for (int n = 0; n < 3; n++) src[n] = paths[IN_SOURCE_Q + n] ? &qkv[IN_SOURCE_Q + n] : &qkv[IN_Q + n];
        if ((st = attn_sdpa_forward_traced(src[0], src[1], src[2], &ao.opt, NULL, 0, &source, NULL))) {
            rc = cli_data_error("trace", "source run: %s: %s", attn_status_str(st), attn_last_error());
            goto cleanup;
        }
        if ((rc = load_patch_values(specs, n_specs, &source))) goto cleanup;
        for (int n = 0; n < n_specs; n++) {
            if (specs[n].from_source) specs[n].p.source = &source;
            patches[n] = specs[n].p;
        }
        if ((st = attn_sdpa_forward_traced(&qkv[IN_Q], &qkv[IN_K], &qkv[IN_V], &ao.opt, patches, n_specs, &t, NULL))) {
            rc = patch_error(st, specs, n_specs);
            goto cleanup;
        }
        /* -o mirrors the rank and layout of -q, as `attn sdpa -o` (the
         * hooks keep TransformerLens's [B, L, H, D]). */
        const int64_t blhd[4] = {t.batch, t.len, t.heads, t.value_dim};
        out_ndim = in[IN_Q].ndim;
        cli_qkv_file_shape(ao.layout, (int)out_ndim, blhd, out_shape);
        const size_t bytes = sizeof(float) * (size_t)(t.batch * t.len * t.heads * t.value_dim);
        if (o_path && !(z_copy = malloc(bytes))) {
            rc = cli_data_error("trace", "out of memory for -o");
            goto cleanup;
        }
        if (z_copy) {
            memcpy(z_copy, t.z, bytes);
            if (!cli_qkv_to_layout("trace", ao.layout, z_copy, blhd)) {
                rc = CLI_DATA_ERROR;
                goto cleanup;
            }
        }
        out_data = z_copy;
    }
    if ((dir && (rc = make_dir(dir))) || (rc = write_outputs(dir, o_path, &t, (int)out_ndim, out_shape, out_data)))
        goto cleanup;

cleanup:
    free(z_copy);
    for (int n = 0; n < n_specs; n++) attn_array_free(&specs[n].values);
    free(specs);
    free(patches);
    attn_trace_free(&t);
    attn_trace_free(&source);
    for (int n = 0; n < IN_COUNT; n++) attn_array_free(&in[n]);
    cli_module_free(&mod);
    cli_attention_options_free(&ao);
    return rc;
}
