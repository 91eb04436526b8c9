/*
 * attn.c — the attn program: one command, several subcommands.
 *
 *   attn demo       the chapter's worked example, every intermediate number
 *   attn sdpa       scaled dot-product attention on .npy files (and gradients)
 *   attn decode     the same through a KV cache, step by step, proved equal
 *   attn mha        multi-head attention (projections, heads, W_O) on .npy files
 *   attn trace      hooks and patches; attn paths, attn nullspace: reading attention
 *   attn map        heat maps; attn report: a self-contained HTML page
 *   attn train      attention learning where to look, from the loss alone
 *   attn bench      kernels against this machine's measured limits
 *   attn ring       ring attention across MPI ranks
 *   attn model      a real model's GGUF file: its layout, a forward over token ids,
 *                   its hooks traced, patched and ablated (attn model trace)
 *   attn npz        numpy .npz archives: list the arrays, get one as .npy
 *   attn tokenize   a GGUF model's tokenizer: text to ids; attn detokenize: back
 *
 * Exit status: 0 success, 1 data error, 2 usage error; a failed write to
 * standard output (a full disk, a closed descriptor) is a data error.
 */
#include "cli.h"
#include "cli_stdout.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} subcommand;

static const subcommand subcommands[] = {
    {"demo", cmd_demo, "walk through the chapter's example: Q, K, V, scores, weights, masks, heads"},
    {"sdpa", cmd_sdpa, "scaled dot-product attention on .npy arrays (GQA, masks, cross-attention)"},
    {"decode", cmd_decode, "a stream through a KV cache (paged, chunked prefill, RoPE), proved against sdpa"},
    {"mha", cmd_mha, "multi-head attention: projections, heads, concatenation, output projection"},
    {"trace", cmd_trace, "record every intermediate under TransformerLens hook names; patch q/k/v/pattern/z"},
    {"paths", cmd_paths, "path decomposition (Figure 2): base, K only, V only, both, interaction"},
    {"nullspace", cmd_nullspace, "how far a weight row can move with the output unchanged (exercise 3)"},
    {"map", cmd_map, "draw attention weights as heat maps: PNG, SVG or PDF, token labels, masks"},
    {"report", cmd_report, "one self-contained HTML page: heat maps, token view, path decomposition"},
    {"train", cmd_train, "attention learns where to look: associative recall, trained by backprop + Adam"},
    {"bench", cmd_bench, "measure this machine's FMA peak and bandwidth, time the kernels against them"},
    {"model", cmd_model,
     "a GGUF model: heads and layers (info), next tokens (run), text continued (generate), hooks, patching, ablation (trace)"},
    {"npz", cmd_npz, "numpy .npz archives (attn model trace's caches): list the arrays, get one as .npy"},
    {"ring", cmd_ring, "ring attention across MPI ranks: mpirun -np P attn ring (sharded .npy in and out)"},
    {"tokenize", cmd_tokenize, "text to token ids with a model's tokenizer (BPE: Qwen2, SmolLM2; Gemma SentencePiece)"},
    {"detokenize", cmd_detokenize, "token ids back to text with a GGUF model's tokenizer"},
};

static void print_usage(FILE *f) {
    fprintf(f, "attn %s: the attention mechanism, from the chapter's 3x2 example to fast kernels\n\n"
               "usage: attn <command> [options]     (attn <command> --help, or attn help <command>, for its options)\n\n"
               "commands:\n",
            attn_version());
    for (size_t i = 0; i < sizeof subcommands / sizeof subcommands[0]; i++)
        fprintf(f, "  %-10s %s\n", subcommands[i].name, subcommands[i].summary);
    fprintf(f, "\nexit status: 0 success, 1 data error (bad file, shape mismatch), 2 usage error\n");
}

/* Interrupted (Ctrl-C, kill, a closed terminal): the temporary files of the
 * outputs being written are removed, then the signal ends the process as it
 * would have. */
static void on_terminating_signal(int sig) {
    attn_output_discard_all();
    signal(sig, SIG_DFL);
    raise(sig);
}

static void remove_temporaries_on_signals(void) {
    static const int signals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE};
    for (size_t i = 0; i < sizeof signals / sizeof signals[0]; i++) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_terminating_signal;
        sigemptyset(&sa.sa_mask);
        /* A signal the parent chose to ignore stays ignored. */
        struct sigaction old;
        if (sigaction(signals[i], NULL, &old) == 0 && old.sa_handler == SIG_IGN) continue;
        sigaction(signals[i], &sa, NULL);
    }
    /* A write past the file size limit (ulimit -f) raises SIGXFSZ, whose
     * default ends the process with a core and no message, its temporary
     * files left behind.  Ignored, the write fails with EFBIG instead and
     * is reported like a full disk: the file named, exit status 1. */
    signal(SIGXFSZ, SIG_IGN);
}

/* attn model: OpenMP's idle threads sleep (OMP_WAIT_POLICY=PASSIVE) unless
 * the user chose a policy.  OpenMP reads the variable when it loads,
 * before main, so the program sets it and runs itself again, once (the
 * variable is then set); if that fails it goes on as it is.  Spinning
 * waits, OpenMP's default, make 2 threads slower than 1 when another
 * process keeps a core busy (docs/models.md, "Threads on a shared host"). */
static void model_wait_policy(char **argv) {
#ifdef __linux__
    if (getenv("OMP_WAIT_POLICY") || setenv("OMP_WAIT_POLICY", "PASSIVE", 1)) return;
    execv("/proc/self/exe", argv);
    unsetenv("OMP_WAIT_POLICY");
#else
    (void)argv;
#endif
}

int main(int argc, char **argv) {
    remove_temporaries_on_signals();
    if (argc >= 2 && strcmp(argv[1], "model") == 0) model_wait_policy(argv);
    cli_stdout_guard();
    if (argc < 2) {
        print_usage(stderr);
        return CLI_USAGE_ERROR;
    }
    if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0 || (strcmp(argv[1], "help") == 0 && argc == 2)) {
        print_usage(stdout);
        return cli_stdout_finish("help", CLI_OK);
    }
    if (strcmp(argv[1], "help") == 0) { /* attn help CMD: CMD's own help */
        for (size_t i = 0; i < sizeof subcommands / sizeof subcommands[0]; i++)
            if (strcmp(argv[2], subcommands[i].name) == 0) {
                char *help_argv[] = {argv[2], "--help", NULL};
                return cli_stdout_finish(argv[2], subcommands[i].run(2, help_argv));
            }
        fprintf(stderr, "attn help: unknown command '%s'\n\n", argv[2]);
        print_usage(stderr);
        return CLI_USAGE_ERROR;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("attn %s\n", attn_version());
        return cli_stdout_finish("--version", CLI_OK);
    }
    for (size_t i = 0; i < sizeof subcommands / sizeof subcommands[0]; i++)
        if (strcmp(argv[1], subcommands[i].name) == 0) {
            const int rc = cli_stdout_finish(argv[1], subcommands[i].run(argc - 1, argv + 1));
            /* cairo's font caches, which live as long as the process, handed
             * back: a sanitizer build's leak check at exit is then clean. */
            attn_pictures_release();
            return rc;
        }
    const char *names[sizeof subcommands / sizeof subcommands[0]];
    for (size_t i = 0; i < sizeof subcommands / sizeof subcommands[0]; i++) names[i] = subcommands[i].name;
    const char *guess = cli_nearest_name(argv[1], strlen(argv[1]), names, (int)(sizeof names / sizeof names[0]));
    if (guess) fprintf(stderr, "attn: unknown command '%s' (did you mean %s?)\n\n", argv[1], guess);
    else fprintf(stderr, "attn: unknown command '%s'\n\n", argv[1]);
    print_usage(stderr);
    return CLI_USAGE_ERROR;
}
