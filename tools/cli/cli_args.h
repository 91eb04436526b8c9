/*
 * cli_args.h — the one argument parser every subcommand uses: a table of
 * the flags a command accepts (its own, plus the shared families it takes:
 * masks, computation, tensor layout, a module's weights), walked in order.
 *
 * What it does for every command alike:
 *   --flag value and --flag=value; -f value (short flags take no =)
 *   a flag given twice is refused unless it is CLI_REPEATABLE (--replace)
 *   a switch given =value is refused; a missing value is named
 *   a value that is itself a flag (-o --weights W.npy) is refused: write
 *     --flag=VALUE for a value that really starts with "--"
 *   an unknown flag gets "did you mean ...?" from the command's own table,
 *     or from its hints (CLI_HINT) when it is another command's flag
 *   -h/--help print the command's help and end it with status 0;
 *   --list-options prints the table (for tests and shell completion)
 *   "--" ends the flags: what follows is positional
 */
#ifndef ATTN_CLI_ARGS_H
#define ATTN_CLI_ARGS_H

#include <stdbool.h>
#include <stdio.h>

/* CLI_HINT: not a flag of the command but another command's that a user
 * may give it by mistake: {"--top-k", "what to say", 0, CLI_HINT} makes
 * "unknown option '--top-k' (did you mean what to say?)", for the name
 * typed exactly or at a near miss.  The walk, --list-options and the
 * spelling suggestions never take a hint for a flag. */
enum { CLI_REPEATABLE = 1u << 0, CLI_HINT = 1u << 1 };

/* One flag.  id > 0 is what cli_args_next returns for it; ids of the shared
 * families are >= CLI_SHARED_IDS, a command's own are below. */
typedef struct cli_flag {
    const char *name;       /* "--weights" or "-q" */
    const char *value_name; /* "W.npy" (shown in messages); NULL: a switch */
    int id;
    unsigned flags;         /* CLI_REPEATABLE */
} cli_flag;

#define CLI_SHARED_IDS 1000
#define CLI_FLAGS_END {NULL, NULL, 0, 0}

/* What a command accepts: its tables (each ended by CLI_FLAGS_END; the list
 * ended by NULL) and its help. */
typedef struct cli_spec {
    const char *cmd;
    const cli_flag *const *tables;
    void (*print_help)(FILE *out); /* NULL: -h/--help return CLI_ARGS_HELP instead */
    bool positionals;              /* may take arguments that are not flags */
} cli_spec;

/* The walk's state.  Read flag for the flag as typed (messages). */
typedef struct cli_args {
    const cli_spec *spec;
    int argc, next;
    char **argv;
    bool after_dashes;
    const char *flag;      /* the current flag's name */
    int status;            /* with CLI_ARGS_STOP: the command's exit status */
    unsigned char seen[256]; /* per table entry: given already (first 256 entries) */
} cli_args;

enum {
    CLI_ARGS_END = 0,         /* every argument read */
    CLI_ARGS_STOP = -1,       /* stop now and return args.status (help printed: 0; an error printed: 2) */
    CLI_ARGS_POSITIONAL = -2, /* *value is an argument that is not a flag */
    CLI_ARGS_HELP = -3,       /* -h/--help, for a command that prints its help after reading the rest */
};

void cli_args_begin(cli_args *a, const cli_spec *spec, int argc, char **argv);
/* The next flag's id (its value in *value, NULL for a switch), or one of
 * the CLI_ARGS_* codes above. */
int cli_args_next(cli_args *a, const char **value);

/* The name of the flag with this id in a's tables ("--causal"), for
 * messages; "?" if none. */
const char *cli_args_flag_name(const cli_args *a, int id);
/* True when the flag with this id was given. */
bool cli_args_given(const cli_args *a, int id);

/* The name among names[0..count) that typed (len bytes) most likely means:
 * the nearest within a third of its length (at least 1 edit; leading
 * dashes ignored on both sides), else the only one it is a prefix of; NULL
 * if none. */
const char *cli_nearest_name(const char *typed, size_t len, const char *const *names, int count);

#endif /* ATTN_CLI_ARGS_H */
