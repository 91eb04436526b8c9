/*
 * cli_args.c — the table-driven argument walk of cli_args.h.
 */
#include "cli_args.h"

#include "cli.h"
#include "cli_stdout.h"

#include <string.h>

void cli_args_begin(cli_args *a, const cli_spec *spec, int argc, char **argv) {
    cli_attention_build(); /* the attention families' tables, before any is read */
    memset(a, 0, sizeof *a);
    a->spec = spec;
    a->argc = argc;
    a->argv = argv;
    a->next = 1; /* argv[0] is the command's name */
}

/* The first entry of the tables that match() accepts, and its index
 * counting across the tables (for `seen`); NULL if none. */
static const cli_flag *find(const cli_args *a, bool (*match)(const cli_flag *, const void *), const void *key,
                            int *index) {
    int n = 0;
    for (const cli_flag *const *t = a->spec->tables; *t; t++)
        for (const cli_flag *f = *t; f->name; f++, n++)
            if (match(f, key)) {
                if (index) *index = n;
                return f;
            }
    return NULL;
}

typedef struct { const char *text; size_t len; } name_key;

static bool match_name(const cli_flag *f, const void *key) {
    const name_key *k = key;
    return !(f->flags & CLI_HINT) && strlen(f->name) == k->len && strncmp(f->name, k->text, k->len) == 0;
}

static bool match_id(const cli_flag *f, const void *key) { return f->id == *(const int *)key; }

const char *cli_args_flag_name(const cli_args *a, int id) {
    const cli_flag *f = find(a, match_id, &id, NULL);
    return f ? f->name : "?";
}

bool cli_args_given(const cli_args *a, int id) {
    int index;
    return find(a, match_id, &id, &index) && index < (int)sizeof a->seen && a->seen[index];
}

/* Edit distance (insertions, deletions, substitutions, adjacent swaps)
 * between two short names; names longer than 63 bytes count as far apart. */
static int distance(const char *s, size_t m, const char *t) {
    size_t n = strlen(t);
    if (m > 63 || n > 63) return 99;
    int d[64][64];
    for (size_t i = 0; i <= m; i++) d[i][0] = (int)i;
    for (size_t j = 0; j <= n; j++) d[0][j] = (int)j;
    for (size_t i = 1; i <= m; i++)
        for (size_t j = 1; j <= n; j++) {
            int best = d[i - 1][j - 1] + (s[i - 1] != t[j - 1]);
            if (d[i - 1][j] + 1 < best) best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && s[i - 1] == t[j - 2] && s[i - 2] == t[j - 1] && d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    return d[m][n];
}

const char *cli_nearest_name(const char *typed, size_t len, const char *const *names, int count) {
    while (len && *typed == '-') typed++, len--;
    if (!len) return NULL;
    const char *best = NULL, *prefix_of = NULL;
    int best_distance = 99, prefixes = 0;
    for (int i = 0; i < count; i++) {
        const char *bare = names[i] + strspn(names[i], "-");
        int dist = distance(typed, len, bare);
        if (dist < best_distance) best_distance = dist, best = names[i];
        if (len >= 2 && strncmp(bare, typed, len) == 0) prefixes++, prefix_of = names[i];
    }
    int allowed = best ? (int)strlen(best + strspn(best, "-")) / 3 : 0;
    if (allowed < 1) allowed = 1;
    if (best && best_distance <= allowed) return best;
    return prefixes == 1 ? prefix_of : NULL;
}

/* The flag a mistyped name most likely meant, among the command's own. */
static const char *suggestion(const cli_args *a, const char *typed, size_t len) {
    const char *names[256];
    int count = 0;
    for (const cli_flag *const *t = a->spec->tables; *t; t++)
        for (const cli_flag *f = *t; f->name && count < 256; f++)
            if (!(f->flags & CLI_HINT)) names[count++] = f->name;
    return cli_nearest_name(typed, len, names, count);
}

/* True when text is one of this command's flags, or looks like a long flag:
 * as a value it is almost certainly a forgotten value. */
static bool looks_like_flag(const cli_args *a, const char *text) {
    if (text[0] != '-' || text[1] == 0) return false;
    if (text[1] == '-' && text[2] != 0) return true;
    name_key key = {text, strlen(text)};
    return find(a, match_name, &key, NULL) != NULL || strcmp(text, "-h") == 0;
}

static int stop(cli_args *a, int status) {
    a->status = status;
    return CLI_ARGS_STOP;
}

int cli_args_next(cli_args *a, const char **value) {
    const char *cmd = a->spec->cmd;
    *value = NULL;
    if (a->next >= a->argc) return CLI_ARGS_END;
    const char *arg = a->argv[a->next++];
    a->flag = arg;

    const bool is_flag = !a->after_dashes && arg[0] == '-' && arg[1] != 0;
    if (is_flag && strcmp(arg, "--") == 0) {
        a->after_dashes = true;
        return cli_args_next(a, value);
    }
    if (!is_flag) {
        if (a->spec->positionals) {
            *value = arg;
            return CLI_ARGS_POSITIONAL;
        }
        return stop(a, cli_usage_error(cmd, "unexpected argument '%s': attn %s takes only options", arg, cmd));
    }
    if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
        if (!a->spec->print_help) return CLI_ARGS_HELP;
        a->spec->print_help(stdout);
        return stop(a, cli_stdout_ok(a->spec->cmd) ? CLI_OK : CLI_DATA_ERROR);
    }
    if (strcmp(arg, "--list-options") == 0) {
        for (const cli_flag *const *t = a->spec->tables; *t; t++)
            for (const cli_flag *f = *t; f->name; f++)
                if (!(f->flags & CLI_HINT))
                    printf("%s%s%s\n", f->name, f->value_name ? " " : "", f->value_name ? f->value_name : "");
        return stop(a, CLI_OK);
    }

    /* --name=value: only long flags take the = form. */
    const char *eq = arg[1] == '-' ? strchr(arg, '=') : NULL;
    name_key key = {arg, eq ? (size_t)(eq - arg) : strlen(arg)};
    int index;
    const cli_flag *f = find(a, match_name, &key, &index);
    if (!f && arg[1] != '-' && strchr(arg, '=')) {
        const name_key short_key = {arg, (size_t)(strchr(arg, '=') - arg)};
        const cli_flag *meant = find(a, match_name, &short_key, NULL);
        if (meant && meant->value_name)
            return stop(a, cli_usage_error(cmd, "'%s': a short flag takes its value after a space: %s %s", arg,
                                           meant->name, strchr(arg, '=') + 1));
    }
    if (!f) {
        /* Another command's flag (exactly, else near it): the hint says which and why. */
        for (int pass = 0; pass < 2; pass++)
            for (const cli_flag *const *t = a->spec->tables; *t; t++)
                for (const cli_flag *h = *t; h->name; h++) {
                    if (!(h->flags & CLI_HINT)) continue;
                    const char *names[1] = {h->name};
                    const bool hit = pass == 0 ? strlen(h->name) == key.len && !strncmp(h->name, key.text, key.len)
                                               : cli_nearest_name(key.text, key.len, names, 1) == h->name;
                    if (hit)
                        return stop(a, cli_usage_error(cmd, "unknown option '%.*s' (did you mean %s?)", (int)key.len,
                                                       key.text, h->value_name));
                }
        const char *guess = suggestion(a, key.text, key.len);
        if (guess)
            return stop(a, cli_usage_error(cmd, "unknown option '%.*s' (did you mean %s?)", (int)key.len, key.text,
                                           guess));
        return stop(a, cli_usage_error(cmd, "unknown option '%.*s'", (int)key.len, key.text));
    }
    a->flag = f->name;
    if (index < (int)sizeof a->seen) {
        if (a->seen[index] && !(f->flags & CLI_REPEATABLE))
            return stop(a, cli_usage_error(cmd, "%s is given twice; give it once", f->name));
        a->seen[index] = 1;
    }
    if (!f->value_name) {
        if (eq) return stop(a, cli_usage_error(cmd, "%s takes no value (got '%s')", f->name, arg));
        return f->id;
    }
    if (eq) {
        *value = eq + 1;
        if (!**value) return stop(a, cli_usage_error(cmd, "%s needs a value (%s), got an empty one", f->name, f->value_name));
        return f->id;
    }
    if (a->next >= a->argc)
        return stop(a, cli_usage_error(cmd, "%s needs a value: %s %s", f->name, f->name, f->value_name));
    const char *next = a->argv[a->next];
    if (looks_like_flag(a, next))
        return stop(a, cli_usage_error(cmd, "%s needs a value (%s), but the next argument is the option '%s'%s",
                                       f->name, f->value_name, next,
                                       f->name[1] == '-' ? "; write --flag=VALUE for a value that starts with -"
                                                         : ""));
    if (!*next) return stop(a, cli_usage_error(cmd, "%s needs a value (%s), got an empty one", f->name, f->value_name));
    a->next++;
    *value = next;
    return f->id;
}
