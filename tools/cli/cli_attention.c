/*
 * cli_attention.c — the option families every attention subcommand shares
 * (masks, score stage, computation: made from libattn's table of
 * attn_sdpa_options; the layout of q/k/v), parsed and loaded in one place,
 * and the guards against plausible mistakes with them: a layout that looks
 * transposed, a causal alignment a decode step does not mean, a reference
 * run that would not end today.
 */
#include "cli.h"
#include "cli_timing.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------ the families, from the table */

/* The attention options' flags and their --help lines are made from
 * libattn's table of attn_sdpa_options (attn_sdpa_option): a family is
 * the options of one group of it, in the table's order, plus the command
 * line's own flags of that part of the help (placed after the option they
 * follow).  Built once, by cli_args_begin, before any table is read. */
enum { FAMILY_FLAGS = 24, FAMILY_HELP = 4096 };

cli_flag cli_mask_flags[FAMILY_FLAGS], cli_compute_flags[FAMILY_FLAGS], cli_logits_flags[FAMILY_FLAGS];
char cli_mask_help[FAMILY_HELP], cli_compute_help[FAMILY_HELP], cli_logits_help[FAMILY_HELP];

/* A flag of the command line's own, in a family's help after an option. */
typedef struct own_flag {
    const char *after; /* the option (the table's name) it follows */
    cli_flag flag;
    const char *help;
} own_flag;

static const own_flag compute_own[] = {
    {"threads", {"--allow-slow", NULL, CLI_ID_ALLOW_SLOW, 0},
     "run the reference kernel beyond its budget (by default a request\n"
     "of more than " CLI_REF_BUDGET_TEXT " is refused: --kernel flash is\n"
     "about a hundred times faster)"},
    {NULL, CLI_FLAGS_END, NULL}};
static const own_flag no_own[] = {{NULL, CLI_FLAGS_END, NULL}};

static const struct family {
    const char *group; /* the table's */
    const char *header, *footer;
    const own_flag *own;
    cli_flag *flags;
    char *help;
} families[] = {
    {"masks", "masks (combine freely; a key is visible when every rule allows it):\n",
     "a row that sees no key gets output 0, weights 0 and lse -inf (never NaN)\n", no_own, cli_mask_flags,
     cli_mask_help},
    {"score stage", "score stage (docs/logits.md), applied in this order:\n", "", no_own, cli_logits_flags,
     cli_logits_help},
    {"computation", "computation:\n", "", compute_own, cli_compute_flags, cli_compute_help},
};

const char cli_layout_help[] =
    "layout of q, k, v (and of the outputs shaped like them):\n"
    "  --layout BLHD|BHLD      BLHD [B, L, H, D]: positions before heads (the default; FlashAttention,\n"
    "                          llama.cpp); BHLD [B, H, L, D]: heads before positions (PyTorch's\n"
    "                          scaled_dot_product_attention, Hugging Face); 3-D files drop B\n";

const cli_flag cli_layout_flags[] = {{"--layout", "BLHD|BHLD", CLI_ID_LAYOUT, 0}, CLI_FLAGS_END};

const cli_flag cli_quiet_flags[] = {{"--quiet", NULL, CLI_ID_QUIET, 0}, CLI_FLAGS_END};

/* The id of flag n of table row `row`, and back. */
static int option_flag_id(int row, int n) { return CLI_ID_OPTION_FIRST + 2 * row + n; }
static const attn_sdpa_option_info *option_of_id(int id, int *n) {
    if (id < CLI_ID_OPTION_FIRST) return NULL;
    *n = (id - CLI_ID_OPTION_FIRST) % 2;
    const attn_sdpa_option_info *row = attn_sdpa_option((id - CLI_ID_OPTION_FIRST) / 2);
    return row && row->flags[*n].name ? row : NULL;
}

/* Appends to a help text (truncation cannot happen: FAMILY_HELP is ample,
 * and test_options checks every flag is shown). */
static void help_add(char *help, const char *fmt, ...) CLI_PRINTF(2, 3);
static void help_add(char *help, const char *fmt, ...) {
    const size_t used = strlen(help);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(help + used, FAMILY_HELP - used, fmt, ap);
    va_end(ap);
}

/* One flag's lines: "  --window LEFT,RIGHT     keys within ...", the text
 * in a column of its own (on the next line when the flag is too wide),
 * its further lines indented to that column.  An array's file is shown as
 * F.npy, short enough for the column. */
static void help_flag(char *help, const char *name, const char *value, bool file, const char *text) {
    char usage[64];
    snprintf(usage, sizeof usage, "%s%s%s", name, value ? " " : "", value ? (file ? "F.npy" : value) : "");
    if (strlen(usage) < 24) help_add(help, "  %-24s", usage);
    else help_add(help, "  %s\n%26s", usage, "");
    for (const char *line = text; *line;) {
        const size_t len = strcspn(line, "\n");
        help_add(help, "%s%.*s\n", line == text ? "" : "                          ", (int)len, line);
        line += len + (line[len] == '\n');
    }
}

static bool is_file(const attn_sdpa_option_info *row) {
    return row->kind == ATTN_OPTION_PER_BATCH || row->kind == ATTN_OPTION_PER_HEAD ||
           row->kind == ATTN_OPTION_BOOL_TABLE || row->kind == ATTN_OPTION_FLOAT_TABLE;
}

static void build_family(const struct family *f) {
    int count = 0;
    f->help[0] = 0;
    help_add(f->help, "%s", f->header);
    for (int i = 0; attn_sdpa_option(i); i++) {
        const attn_sdpa_option_info *row = attn_sdpa_option(i);
        if (!row->group || strcmp(row->group, f->group)) continue;
        for (int n = 0; n < 2 && row->flags[n].name && count + 1 < FAMILY_FLAGS; n++) {
            const attn_option_flag *flag = &row->flags[n];
            f->flags[count++] = (cli_flag){flag->name, flag->value, option_flag_id(i, n), 0};
            help_flag(f->help, flag->name, flag->value, is_file(row), flag->help);
        }
        for (const own_flag *own = f->own; own->after && count + 1 < FAMILY_FLAGS; own++)
            if (!strcmp(own->after, row->name)) {
                f->flags[count++] = own->flag;
                help_flag(f->help, own->flag.name, own->flag.value_name, false, own->help);
            }
    }
    help_add(f->help, "%s", f->footer);
    f->flags[count] = (cli_flag)CLI_FLAGS_END;
}

void cli_attention_build(void) {
    static bool built;
    if (built) return;
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++) build_family(&families[i]);
    built = true;
}

int cli_attention_id(const char *flag) {
    for (int i = 0; attn_sdpa_option(i); i++)
        for (int n = 0; n < 2 && attn_sdpa_option(i)->flags[n].name; n++)
            if (!strcmp(attn_sdpa_option(i)->flags[n].name, flag)) return option_flag_id(i, n);
    return 0;
}

/* ------------------------------------------------------ taking the flags */

static void set_int(attn_sdpa_options *opt, const attn_sdpa_option_info *row, int n, int value) {
    memcpy((char *)opt + row->offset[n], &value, sizeof value);
}
static void set_i64(attn_sdpa_options *opt, const attn_sdpa_option_info *row, int n, int64_t value) {
    memcpy((char *)opt + row->offset[n], &value, sizeof value);
}

/* "auto, ref or flash": a choice's names for a message. */
static const char *choices_text(const attn_sdpa_option_info *row, char *buf, size_t size) {
    int count = 0;
    while (row->choices[count]) count++;
    buf[0] = 0;
    for (int c = 0; c < count; c++) {
        const size_t used = strlen(buf);
        snprintf(buf + used, size - used, "%s%s", c == 0 ? "" : c + 1 == count ? " or " : ", ", row->choices[c]);
    }
    return buf;
}

/* A choice's flag: one of its names ("--kernel expects auto, ref or flash"). */
static int take_choice(const char *cmd, const attn_sdpa_option_info *row, int n, const char *value,
                       attn_sdpa_options *opt) {
    char names[256];
    for (int c = 0; row->choices[c]; c++)
        if (!strcmp(value, row->choices[c])) return set_int(opt, row, 0, c), 1;
    return cli_usage_error(cmd, "%s expects %s, got '%s'", row->flags[n].name,
                           choices_text(row, names, sizeof names), value), -1;
}

/* A window's "LEFT,RIGHT": on, and its two sides. */
static bool parse_window(const char *cmd, const attn_sdpa_option_info *row, const char *flag, const char *text,
                         attn_sdpa_options *opt) {
    char left[64], right[64], side[96];
    const char *comma = text ? strchr(text, ',') : NULL;
    if (!comma || (size_t)(comma - text) >= sizeof left || strlen(comma + 1) >= sizeof right) {
        cli_usage_error(cmd, "%s expects %s (e.g. 128,0; -1 = unbounded), got '%s'", flag, row->flags[0].value,
                        text ? text : "");
        return false;
    }
    memcpy(left, text, (size_t)(comma - text));
    left[comma - text] = 0;
    strcpy(right, comma + 1);
    set_int(opt, row, 0, 1);
    int64_t sides[2];
    snprintf(side, sizeof side, "%s LEFT", flag);
    if (!cli_parse_int(cmd, side, left, -1, INT64_MAX, &sides[0])) return false;
    snprintf(side, sizeof side, "%s RIGHT", flag);
    if (!cli_parse_int(cmd, side, right, -1, INT64_MAX, &sides[1])) return false;
    set_i64(opt, row, 1, sides[0]);
    set_i64(opt, row, 2, sides[1]);
    return true;
}

/* A causal flag fixes the diagonal's alignment; an --align that says the
 * other would silently lose to whichever came later. */
static int align_conflict(const char *cmd, attn_align causal_align) {
    const bool top_left = causal_align == ATTN_ALIGN_TOP_LEFT;
    return cli_usage_error(cmd, "%s aligns the diagonal %s, and --align says %s: give %s alone (--align is for "
                           "--window without a causal flag)", top_left ? "--causal" : "--causal-lower-right",
                           top_left ? "top-left" : "lower-right", top_left ? "lower-right" : "top-left",
                           top_left ? "--causal-lower-right" : "--causal");
}

/* Where a file option's path is kept until cli_load_attention_inputs
 * loads it (each has its own checks there). */
static const char **path_of(cli_attention_options *o, const attn_sdpa_option_info *row) {
    return !strcmp(row->name, "key_lengths") ? &o->key_lengths_path
         : !strcmp(row->name, "mask")        ? &o->mask_path
         : !strcmp(row->name, "bias")        ? &o->bias_path
         : !strcmp(row->name, "sinks")       ? &o->sinks_path
         : !strcmp(row->name, "alibi_slopes") ? &o->alibi_slopes_path
                                             : NULL;
}

/* The flags with rules of their own: causal's two alignments and --align
 * (which must agree), and ALiBi's two spellings (one or the other).
 * 1 when id was one of them and valid, 0 when it is none, -1 after a
 * usage error. */
static int take_combined(cli_attention_options *o, const char *cmd, const attn_sdpa_option_info *row, int n,
                         const char *value) {
    if (!strcmp(row->name, "causal")) {
        if (o->opt.causal) return cli_usage_error(cmd, "give only one of --causal and --causal-lower-right"), -1;
        /* its flags are the alignments', in attn_align's order */
        const attn_align align = n == 0 ? ATTN_ALIGN_TOP_LEFT : ATTN_ALIGN_LOWER_RIGHT;
        /* Whichever of the two comes second sees the first: the same
         * answer in either order. */
        if (o->align_given && o->opt.align != align) return align_conflict(cmd, align), -1;
        o->opt.causal = 1;
        o->opt.align = align;
        return 1;
    }
    if (!strcmp(row->name, "align")) {
        int align = 0;
        while (row->choices[align] && strcmp(value, row->choices[align])) align++;
        if (!row->choices[align]) return take_choice(cmd, row, n, value, &o->opt);
        if (o->opt.causal && o->opt.align != (attn_align)align) return align_conflict(cmd, o->opt.align), -1;
        o->opt.align = (attn_align)align;
        o->align_given = true;
        return 1;
    }
    if (!strcmp(row->name, "alibi_standard") || !strcmp(row->name, "alibi_slopes")) {
        /* Whichever comes second sees the first: the same answer in either order. */
        if (o->opt.alibi_standard || o->alibi_slopes_path)
            return cli_usage_error(cmd, "give only one of --alibi (the standard slopes) and --alibi-slopes F.npy"), -1;
        if (row->kind == ATTN_OPTION_SWITCH) o->opt.alibi_standard = 1;
        else o->alibi_slopes_path = value;
        return 1;
    }
    return 0;
}

/* A flag of the table's, by its option's kind. */
static int take_option(cli_attention_options *o, const char *cmd, const attn_sdpa_option_info *row, int n,
                       const char *value) {
    const int combined = take_combined(o, cmd, row, n, value);
    if (combined) return combined;
    const char *flag = row->flags[n].name;
    switch (row->kind) {
    case ATTN_OPTION_SWITCH: set_int(&o->opt, row, 0, 1); return 1;
    case ATTN_OPTION_CHOICE: return take_choice(cmd, row, n, value, &o->opt);
    case ATTN_OPTION_FLOAT: {
        double x;
        if (!cli_parse_float(cmd, flag, value, row->min, row->max, &x)) return -1;
        const float f = (float)x;
        memcpy((char *)&o->opt + row->offset[0], &f, sizeof f);
        return 1;
    }
    case ATTN_OPTION_INT:
    case ATTN_OPTION_POSITION: {
        int64_t x;
        if (!cli_parse_int(cmd, flag, value, (int64_t)row->min, (int64_t)row->max, &x)) return -1;
        if (row->kind == ATTN_OPTION_INT) set_int(&o->opt, row, 0, (int)x);
        else set_i64(&o->opt, row, 0, x);
        return 1;
    }
    case ATTN_OPTION_WINDOW: return parse_window(cmd, row, flag, value, &o->opt) ? 1 : -1;
    default: {
        const char **path = path_of(o, row);
        if (!path) return cli_usage_error(cmd, "%s: this attn cannot read it from a file yet", flag), -1;
        *path = value;
        return 1;
    }
    }
}

int cli_attention_take(cli_attention_options *o, const cli_args *a, int id, const char *value) {
    const char *cmd = a->spec->cmd;
    int n;
    const attn_sdpa_option_info *row = option_of_id(id, &n);
    if (row) return take_option(o, cmd, row, n, value);
    switch (id) {
    case CLI_ID_ALLOW_SLOW: o->allow_slow = true; return 1;
    case CLI_ID_LAYOUT:
        if (strcasecmp(value, "BLHD") == 0) o->layout = CLI_LAYOUT_BLHD;
        else if (strcasecmp(value, "BHLD") == 0) o->layout = CLI_LAYOUT_BHLD;
        else return cli_usage_error(cmd, "--layout expects BLHD ([B, L, H, D], the default) or BHLD "
                                    "([B, H, L, D], PyTorch's), got '%s'", value), -1;
        o->layout_given = true;
        return 1;
    case CLI_ID_QUIET: return 1; /* read with cli_args_given */
    default: return 0;
    }
}

bool cli_attention_given(const cli_args *a) {
    for (int i = 0; attn_sdpa_option(i); i++) {
        /* --precision has never counted here (report --model and nullspace
         * --chapter accept it and do nothing with it); kept so by the move
         * to the table. */
        if (!strcmp(attn_sdpa_option(i)->name, "precision")) continue;
        for (int n = 0; n < 2 && attn_sdpa_option(i)->flags[n].name; n++)
            if (cli_args_given(a, option_flag_id(i, n))) return true;
    }
    return false;
}

const char *cli_ring_refused_given(const cli_args *a) {
    for (int i = 0; attn_sdpa_option(i); i++) {
        const attn_sdpa_option_info *row = attn_sdpa_option(i);
        for (int n = 0; row->ranks == ATTN_RANKS_REFUSED && n < 2 && row->flags[n].name; n++)
            if (cli_args_given(a, option_flag_id(i, n))) return row->flags[n].name;
    }
    return NULL;
}

/* A per-head float array [Hq] (--sinks, --alibi-slopes); sinks may hold -inf. */
static int load_per_head(const char *cmd, const char *flag, const char *path, bool allow_neg_inf, int64_t heads_q,
                         attn_array *a) {
    char buf[128];
    if (!cli_load_f32(cmd, flag, path, allow_neg_inf, a)) return CLI_DATA_ERROR;
    if (a->ndim != 1 || a->count != heads_q)
        return cli_data_error(cmd, "%s '%s' has shape %s; expected one value per query head, [Hq] = [%lld]", flag,
                              path, cli_shape_str(a, buf, sizeof buf), (long long)heads_q);
    return CLI_OK;
}

/* ------------------------------------------------------ q, k, v and layouts */

/* The [B, P, H, W] sizes of a file of rank 2..4 in a layout. */
static void blhd_of_file(cli_layout layout, const attn_array *a, int64_t s[4]) {
    s[0] = s[1] = s[2] = s[3] = 1;
    if (a->ndim == 2) {
        s[1] = a->shape[0];
        s[3] = a->shape[1];
        return;
    }
    int64_t f[4] = {1, 1, 1, 1}; /* the file's [B, x, y, W] */
    for (int d = 0; d < a->ndim; d++) f[4 - a->ndim + d] = a->shape[d];
    s[0] = f[0];
    s[1] = layout == CLI_LAYOUT_BHLD ? f[2] : f[1];
    s[2] = layout == CLI_LAYOUT_BHLD ? f[1] : f[2];
    s[3] = f[3];
}

/* Swaps the middle two axes of data [B, X, Y, W] into [B, Y, X, W]. */
static bool swap_middle_axes(const char *cmd, void *data_any, size_t elem, const int64_t s[4]) {
    const int64_t B = s[0], X = s[1], Y = s[2], W = s[3];
    if (X == 1 || Y == 1) return true; /* the same order in memory */
    char *data = data_any, *copy = malloc(elem * (size_t)(B * X * Y * W));
    if (!copy) return cli_data_error(cmd, "out of memory for a change of layout"), false;
    memcpy(copy, data, elem * (size_t)(B * X * Y * W));
    for (int64_t b = 0; b < B; b++)
        for (int64_t x = 0; x < X; x++)
            for (int64_t y = 0; y < Y; y++)
                memcpy(data + (size_t)(((b * Y + y) * X + x) * W) * elem, copy + (size_t)(((b * X + x) * Y + y) * W) * elem,
                       elem * (size_t)W);
    free(copy);
    return true;
}

static int load_qkv(const char *cmd, const char *flag, const char *path, cli_layout layout, bool keep_half,
                    attn_array *a, attn_tensor *t) {
    char buf[128];
    if (!cli_load_float(cmd, flag, path, false, keep_half, a)) return CLI_DATA_ERROR;
    if (a->ndim < 2 || a->ndim > 4)
        return cli_data_error(cmd, "%s '%s' has shape %s; expected rank 2 [P, W], 3 [%s] or 4 [%s]", flag, path,
                              cli_shape_str(a, buf, sizeof buf), layout == CLI_LAYOUT_BHLD ? "H, P, W" : "P, H, W",
                              layout == CLI_LAYOUT_BHLD ? "B, H, P, W" : "B, P, H, W");
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] == 0)
            return cli_data_error(cmd, "%s '%s' has shape %s; every dimension must be at least 1", flag, path,
                                  cli_shape_str(a, buf, sizeof buf));
    int64_t s[4];
    blhd_of_file(layout, a, s);
    const int64_t file_order[4] = {s[0], s[2], s[1], s[3]};
    if (layout == CLI_LAYOUT_BHLD && !swap_middle_axes(cmd, a->data, attn_dtype_size(a->dtype), file_order))
        return CLI_DATA_ERROR;
    *t = attn_tensor_view(a->data, a->dtype, s[0], s[1], s[2], s[3]);
    return CLI_OK;
}

int cli_load_qkv(const char *cmd, const char *flag, const char *path, cli_layout layout, attn_array *a,
                 attn_tensor *t) {
    return load_qkv(cmd, flag, path, layout, false, a, t);
}

int cli_load_qkv_stored(const char *cmd, const char *flag, const char *path, cli_layout layout, attn_array *a,
                        attn_tensor *t) {
    return load_qkv(cmd, flag, path, layout, true, a, t);
}

void cli_qkv_file_shape(cli_layout layout, int rank, const int64_t blhd[4], int64_t *shape) {
    if (rank == 2) {
        shape[0] = blhd[1];
        shape[1] = blhd[3];
        return;
    }
    const int64_t file[4] = {blhd[0], layout == CLI_LAYOUT_BHLD ? blhd[2] : blhd[1],
                             layout == CLI_LAYOUT_BHLD ? blhd[1] : blhd[2], blhd[3]};
    memcpy(shape, file + (4 - rank), sizeof(int64_t) * (size_t)rank);
}

bool cli_qkv_to_layout_of(const char *cmd, cli_layout layout, void *data, attn_dtype dtype, const int64_t blhd[4]) {
    return layout == CLI_LAYOUT_BLHD || !data || swap_middle_axes(cmd, data, attn_dtype_size(dtype), blhd);
}

bool cli_qkv_to_layout(const char *cmd, cli_layout layout, float *data, const int64_t blhd[4]) {
    return cli_qkv_to_layout_of(cmd, layout, data, ATTN_F32, blhd);
}

bool cli_qkv_from_layout(const char *cmd, cli_layout layout, float *data, const int64_t blhd[4]) {
    const int64_t file_order[4] = {blhd[0], blhd[2], blhd[1], blhd[3]};
    return layout == CLI_LAYOUT_BLHD || !data || swap_middle_axes(cmd, data, sizeof(float), file_order);
}

int cli_qkv_position_axis(cli_layout layout, int rank) {
    return rank == 4 ? (layout == CLI_LAYOUT_BHLD ? 2 : 1) : rank == 3 ? (layout == CLI_LAYOUT_BHLD ? 1 : 0)
         : rank == 2 ? 0 : -1;
}

void cli_warn_if_transposed(const char *cmd, const cli_attention_options *o, const attn_tensor *q,
                            const char *q_path, const attn_tensor *k, const char *k_path) {
    if (o->layout_given) return;
    const attn_tensor *t[2] = {q, k};
    const char *paths[2] = {q_path, k_path}, *flags[2] = {"-q", "-k"};
    /* A model has at most a few hundred heads.  A decode step (one query)
     * legitimately has more heads than positions, and early in a generation
     * so may its cache: one query is never taken for transposed. */
    const bool both_wide = q->shape[2] > q->shape[1] && k->shape[2] > k->shape[1] && q->shape[1] > 1;
    for (int n = 0; n < 2; n++) {
        const int64_t P = t[n]->shape[1], H = t[n]->shape[2];
        if (H > 256 || (both_wide && n == 0)) {
            cli_warning(cmd, "%s '%s' read as %s [B, L, H, D] has %lld position%s and %lld heads; if it is "
                        "PyTorch's [B, H, L, D], add --layout BHLD (--layout BLHD silences this)", flags[n],
                        paths[n], o->layout == CLI_LAYOUT_BHLD ? "BHLD" : "BLHD", (long long)P, P == 1 ? "" : "s",
                        (long long)H);
            return;
        }
    }
}

/* Broadcast shape [B|1, H|1, L|1, S|1] of a mask or bias file of rank 2..4. */
static int broadcast_shape(const char *cmd, const char *flag, const char *path, const attn_array *a,
                           const int64_t full[4], int64_t shape[4]) {
    char buf[128];
    if (a->ndim < 2 || a->ndim > 4)
        return cli_data_error(cmd, "%s '%s' has shape %s; expected [L, S], [H, L, S] or [B, H, L, S]",
                              flag, path, cli_shape_str(a, buf, sizeof buf));
    for (int d = 0; d < 4; d++) shape[d] = 1;
    for (int d = 0; d < a->ndim; d++) shape[4 - a->ndim + d] = a->shape[d];
    static const char *names[4] = {"B", "H", "L", "S"};
    for (int d = 0; d < 4; d++)
        if (shape[d] != 1 && shape[d] != full[d])
            return cli_data_error(cmd, "%s '%s' has shape %s: its %s dimension must be 1 or %lld", flag,
                                  path, cli_shape_str(a, buf, sizeof buf), names[d], (long long)full[d]);
    return CLI_OK;
}

int cli_load_attention_inputs(const char *cmd, cli_attention_options *o, int64_t batch,
                              int64_t heads_q, int64_t len_q, int64_t len_kv) {
    const int64_t full[4] = {batch, heads_q, len_q, len_kv};
    char buf[128];
    if (o->key_lengths_path) {
        if (!cli_load_ints(cmd, "--key-lengths", o->key_lengths_path, ATTN_I64, &o->key_lengths))
            return CLI_DATA_ERROR;
        if (o->key_lengths.ndim > 1 || o->key_lengths.count != batch)
            return cli_data_error(cmd, "--key-lengths '%s' has shape %s; expected [B] = [%lld]",
                                  o->key_lengths_path, cli_shape_str(&o->key_lengths, buf, sizeof buf),
                                  (long long)batch);
        const int64_t *lens = o->key_lengths.data;
        for (int64_t b = 0; b < batch; b++)
            if (lens[b] < 0 || lens[b] > len_kv)
                return cli_data_error(cmd, "--key-lengths '%s': element %lld is %lld, outside [0, S = %lld]",
                                      o->key_lengths_path, (long long)b, (long long)lens[b],
                                      (long long)len_kv);
        o->opt.key_lengths = lens;
    }
    if (o->mask_path) {
        if (!cli_load_ints(cmd, "--mask", o->mask_path, ATTN_BOOL, &o->mask)) return CLI_DATA_ERROR;
        if (broadcast_shape(cmd, "--mask", o->mask_path, &o->mask, full, o->opt.mask_shape))
            return CLI_DATA_ERROR;
        o->opt.mask = o->mask.data;
    }
    if (o->bias_path) {
        if (!cli_load_f32(cmd, "--bias", o->bias_path, true, &o->bias)) return CLI_DATA_ERROR;
        if (broadcast_shape(cmd, "--bias", o->bias_path, &o->bias, full, o->opt.bias_shape))
            return CLI_DATA_ERROR;
        o->opt.bias = o->bias.data;
    }
    if (o->sinks_path) {
        if (load_per_head(cmd, "--sinks", o->sinks_path, true, heads_q, &o->sinks)) return CLI_DATA_ERROR;
        o->opt.sinks = o->sinks.data;
    }
    if (o->alibi_slopes_path) {
        if (load_per_head(cmd, "--alibi-slopes", o->alibi_slopes_path, false, heads_q, &o->alibi_slopes))
            return CLI_DATA_ERROR;
        o->opt.alibi_slopes = o->alibi_slopes.data;
    }
    cli_progress_attach(o, cmd); /* every command computes right after this */
    /* Alignments that are valid but rarely meant. */
    if (o->opt.causal && o->opt.align == ATTN_ALIGN_TOP_LEFT && len_q < len_kv)
        cli_warning(cmd, "--causal aligns the diagonal top-left: with %lld quer%s and %lld keys, query i sees keys "
                    "0..i only, not the %lld key%s before it (a decode step or a chunk appended to a cache wants "
                    "--causal-lower-right)", (long long)len_q, len_q == 1 ? "y" : "ies", (long long)len_kv,
                    (long long)(len_kv - len_q), len_kv - len_q == 1 ? "" : "s");
    if (o->opt.causal && o->opt.align == ATTN_ALIGN_LOWER_RIGHT && len_q > len_kv)
        cli_warning(cmd, "--causal-lower-right with %lld queries and %lld keys: the first %lld queries see no key "
                    "and get output 0 (lse -inf)", (long long)len_q, (long long)len_kv,
                    (long long)(len_q - len_kv));
    return CLI_OK;
}

int cli_check_budget(const char *cmd, const cli_attention_options *o, const attn_tensor *q,
                     const attn_tensor *k, const attn_tensor *v, double passes, double output_bytes) {
    double flops;
    if (!o->allow_slow && strcmp(attn_sdpa_kernel_name(q, k, v, &o->opt), "ref") == 0 &&
        attn_sdpa_flops(q, k, v, &o->opt, &flops) == ATTN_OK && flops * passes > CLI_REF_BUDGET_GFLOP * 1e9)
        return cli_data_error(cmd, "the reference kernel would need %.0f GFLOP for this request, beyond its budget of "
                              CLI_REF_BUDGET_TEXT " (it runs at a few GFLOP/s: minutes to hours); use --kernel flash "
                              "(or auto)%s, or add --allow-slow to run it anyway", flops * passes / 1e9,
                              o->opt.kernel == ATTN_KERNEL_REF ? "" : " and unset ATTN_KERNEL=ref");
    const double memory = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
    if (memory > 0 && output_bytes > memory)
        return cli_data_error(cmd, "this run needs %.1f GB for its outputs and tables, more than this machine's %.1f GB "
                              "of memory (--weights and every traced run keep [B, Hq, L, S] tables): give fewer "
                              "positions or heads", output_bytes / 1e9, memory / 1e9);
    return CLI_OK;
}

int cli_check_traced_budget(const char *cmd, const cli_attention_options *o, int64_t B, int64_t Hq, int64_t Hkv,
                            int64_t L, int64_t S, int64_t D, int64_t Dv, int runs) {
    const attn_tensor q = attn_tensor_4d(NULL, B, L, Hq, D), k = attn_tensor_4d(NULL, B, S, Hkv, D),
                      v = attn_tensor_4d(NULL, B, S, Hkv, Dv);
    /* Each traced run keeps hook_attn_scores and hook_pattern, [B, Hq, L, S] each. */
    return cli_check_budget(cmd, o, &q, &k, &v, runs, runs * 2.0 * 4.0 * (double)B * (double)Hq * (double)L * (double)S);
}

void cli_attention_options_free(cli_attention_options *o) {
    attn_array_free(&o->key_lengths);
    attn_array_free(&o->mask);
    attn_array_free(&o->bias);
    attn_array_free(&o->sinks);
    attn_array_free(&o->alibi_slopes);
}

bool cli_save_outputs(const char *cmd, const cli_output *outputs, int count) {
    attn_output **open_files = calloc(count > 0 ? (size_t)count : 1, sizeof *open_files);
    bool ok = open_files != NULL;
    if (!ok) cli_data_error(cmd, "out of memory for the list of outputs");
    /* 1. Every file written to its temporary: nothing is touched yet. */
    for (int i = 0; i < count && ok; i++) {
        const cli_output *o = &outputs[i];
        if (!o->path) continue;
        uint8_t header[ATTN_NPY_HEADER_MAX];
        size_t header_size;
        size_t bytes = attn_dtype_size(o->dtype);
        for (int d = 0; d < o->ndim; d++) bytes *= (size_t)o->shape[d];
        const double t = cli_timing_now();
        ok = attn_npy_format_header(o->dtype, o->ndim, o->shape, header, sizeof header, &header_size) == ATTN_OK &&
             attn_output_open(o->path, &open_files[i]) == ATTN_OK &&
             attn_output_write(open_files[i], header, header_size) == ATTN_OK &&
             attn_output_write(open_files[i], o->data, bytes) == ATTN_OK;
        if (!ok) cli_data_error(cmd, "%s", attn_last_error());
        cli_timing_add("write outputs", t);
    }
    if (!ok) {
        for (int i = 0; open_files && i < count; i++) attn_output_discard(open_files[i]);
        free(open_files);
        return false;
    }
    /* 2. All complete: each renamed over its target.  A rename that fails
     * now (rare: the directory changed under us) leaves the earlier outputs
     * written and complete, and says so. */
    int committed = 0;
    for (int i = 0; i < count; i++) {
        if (!open_files[i]) continue;
        attn_output *o = open_files[i];
        open_files[i] = NULL;
        const double t = cli_timing_now();
        const bool done = ok && attn_output_commit(o) == ATTN_OK;
        cli_timing_add("fsync + rename outputs", t);
        if (done) {
            committed++;
            continue;
        }
        if (ok) {
            cli_data_error(cmd, "%s%s", attn_last_error(),
                           committed ? " (the outputs before it were written; it and the ones after were not)"
                                     : "");
            ok = false;
        } else {
            attn_output_discard(o);
        }
    }
    free(open_files);
    return ok;
}

void cli_print_written(const char *cmd, const cli_output *outputs, int count, const char *how) {
    /* Silent when stderr is one of the outputs (-o /dev/stdout > f 2>&1):
     * the line would land inside the array. */
    struct stat err, out;
    if (fstat(STDERR_FILENO, &err) == 0)
        for (int i = 0; i < count; i++)
            if (outputs[i].path && stat(outputs[i].path, &out) == 0 && out.st_dev == err.st_dev &&
                out.st_ino == err.st_ino)
                return;
    fprintf(stderr, "attn %s: wrote", cmd);
    int n = 0;
    for (int i = 0; i < count; i++) {
        if (!outputs[i].path) continue;
        attn_array shape = {.ndim = outputs[i].ndim};
        memcpy(shape.shape, outputs[i].shape, sizeof(int64_t) * (size_t)outputs[i].ndim);
        char buf[128];
        fprintf(stderr, "%s %s %s", n++ ? "," : "", outputs[i].path, cli_shape_str(&shape, buf, sizeof buf));
    }
    if (how) fprintf(stderr, " (%s)", how);
    fputc('\n', stderr);
}

double cli_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void cli_describe_run(char *buf, size_t size, const char *kernel, int threads, double seconds) {
    const bool flash = strcmp(kernel, "flash") == 0;
    const int n = flash ? attn_thread_count(threads) : 1; /* the reference kernel runs on one */
    snprintf(buf, size, "%s kernel%s%s, %d thread%s, %.3g %s", kernel, flash ? " on " : "", flash ? attn_isa_name() : "",
             n, n == 1 ? "" : "s", seconds < 1 ? 1e3 * seconds : seconds, seconds < 1 ? "ms" : "s");
}

/* ------------------------------------------------------------ progress */

/* The line a long call keeps up to date on a terminal: shown after a
 * second, cleared at the end.  A fraction smaller than the last one starts
 * the next call (mha's backward, trace's second run, paths' five). */
typedef struct cli_progress {
    const char *cmd;
    double start, last;
    bool shown;
    char line[128]; /* what the terminal shows: redrawn only when it changes */
} cli_progress;

static cli_progress progress_line;

static void print_progress(void *user, double done) {
    cli_progress *p = user;
    const double now = cli_seconds();
    if (done < p->last) p->start = now;
    p->last = done;
    if (done >= 1.0) {
        if (p->shown) fputs("\r\033[K", stderr);
        p->shown = false;
        return;
    }
    const double elapsed = now - p->start;
    if (elapsed < 1.0) return;
    char line[sizeof p->line];
    if (done > 0.02)
        snprintf(line, sizeof line, "attn %s: %3.0f%%, %.0f s, about %.0f s left", p->cmd, 100.0 * done, elapsed,
                 elapsed * (1.0 - done) / done);
    else
        snprintf(line, sizeof line, "attn %s: %3.0f%%, %.0f s", p->cmd, 100.0 * done, elapsed);
    if (p->shown && strcmp(line, p->line) == 0) return;
    memcpy(p->line, line, sizeof line);
    fprintf(stderr, "\r\033[K%s", line);
    fflush(stderr);
    p->shown = true;
}

void cli_progress_attach(cli_attention_options *o, const char *cmd) {
    if (!isatty(STDERR_FILENO)) return;
    progress_line = (cli_progress){cmd, cli_seconds(), 0.0, false, ""};
    o->opt.progress = print_progress;
    o->opt.progress_user = &progress_line;
}
