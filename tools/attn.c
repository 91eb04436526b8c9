/*
 * attn.c — the attn program: one command, several subcommands.
 *
 *   attn demo    the chapter's worked example, every intermediate number
 *   attn sdpa    scaled dot-product attention on .npy files
 *   attn mha     multi-head attention (projections, heads, W_O) on .npy files
 *
 * Exit status: 0 success, 1 data error, 2 usage error.
 */
#include "cli.h"

#include <stdio.h>
#include <string.h>

typedef struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} subcommand;

static const subcommand subcommands[] = {
    {"demo", cmd_demo, "walk through the chapter's example: Q, K, V, scores, weights, masks, heads"},
    {"sdpa", cmd_sdpa, "scaled dot-product attention on .npy arrays (GQA, masks, cross-attention)"},
    {"mha", cmd_mha, "multi-head attention: projections, heads, concatenation, output projection"},
    /* @@anchor: subcommand table (one line each) */
};

static void print_usage(FILE *f) {
    fprintf(f, "attn %s: the attention mechanism, from the chapter's 3x2 example to fast kernels\n\n"
               "usage: attn <command> [options]     (attn <command> --help for its options)\n\n"
               "commands:\n",
            attn_version());
    for (size_t i = 0; i < sizeof subcommands / sizeof subcommands[0]; i++)
        fprintf(f, "  %-8s %s\n", subcommands[i].name, subcommands[i].summary);
    fprintf(f, "\nexit status: 0 success, 1 data error (bad file, shape mismatch), 2 usage error\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        print_usage(stderr);
        return CLI_USAGE_ERROR;
    }
    if (cli_is_help(argv[1]) || strcmp(argv[1], "help") == 0) {
        print_usage(stdout);
        return CLI_OK;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("attn %s\n", attn_version());
        return CLI_OK;
    }
    for (size_t i = 0; i < sizeof subcommands / sizeof subcommands[0]; i++)
        if (strcmp(argv[1], subcommands[i].name) == 0) return subcommands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "attn: unknown command '%s'\n\n", argv[1]);
    print_usage(stderr);
    return CLI_USAGE_ERROR;
}
