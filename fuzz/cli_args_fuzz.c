/*
 * cli_args_fuzz.c — libFuzzer target for the command line's parsers: the
 * table-driven argument walk (tools/cli/cli_args.c) and the value parsers
 * of the shared option families (masks, computation, layout, a module's
 * weights), integers, numbers, index lists ("0,3-5") and token lists.
 *
 * Input: arbitrary bytes, split at NUL bytes into an argv of at most 64
 * arguments.  Whatever they are, the walk must end (every call consumes an
 * argument or stops), every refusal must come with a message, and an
 * accepted value must respect its documented range; nothing may crash,
 * read out of bounds or leak (AddressSanitizer and UBSan watch).
 * Messages go to /dev/null: the fuzzer checks the status, not the text
 * (that the message is there is the CLI tests' business).
 */
#include "cli.h"
#include "cli_interp.h"
#include "cli_pictures.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { F_FILE = 1, F_SWITCH, F_INT, F_FLOAT, F_LIST, F_TOKENS, F_REPEAT };

static const cli_flag fuzz_flags[] = {
    {"-o", "OUT.npy", F_FILE, 0},          {"--switch", NULL, F_SWITCH, 0},
    {"--int", "N", F_INT, 0},              {"--float", "X", F_FLOAT, 0},
    {"--heads-list", "LIST", F_LIST, 0},   {"--tokens", "LIST", F_TOKENS, 0},
    {"--replace", "SEL", F_REPEAT, CLI_REPEATABLE},
    CLI_FLAGS_END};

static void fuzz_help(FILE *out) { fputs("usage: fuzz\n", out); }

static const cli_flag *const tables[] = {fuzz_flags, cli_module_flags, cli_layout_flags, cli_mask_flags,
                                         cli_compute_flags, cli_quiet_flags, NULL};
static const cli_spec spec = {"fuzz", tables, fuzz_help, true};

/* The messages and the help go to /dev/null; stderr stays libFuzzer's and
 * the sanitizers'. */
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    FILE *sink = fopen("/dev/null", "w");
    if (!sink || !freopen("/dev/null", "w", stdout)) abort();
    cli_set_message_stream(sink);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* argv[0] is the command's name; the rest are the input's NUL-separated pieces. */
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = 0;
    char *argv[65] = {"fuzz"};
    int argc = 1;
    for (size_t start = 0; start <= size && argc < 64;) {
        argv[argc++] = text + start;
        size_t len = strlen(text + start);
        start += len + 1;
    }
    argv[argc] = NULL;

    cli_attention_options ao = CLI_ATTENTION_OPTIONS_INIT;
    cli_module mod = {0};
    cli_args args;
    const char *value;
    cli_args_begin(&args, &spec, argc, argv);
    int steps = 0;
    for (int id; (id = cli_args_next(&args, &value)) != CLI_ARGS_END;) {
        if (++steps > argc) __builtin_trap(); /* every call consumes an argument */
        if (id == CLI_ARGS_STOP) {
            if (args.status != CLI_OK && args.status != CLI_USAGE_ERROR) __builtin_trap();
            break;
        }
        if (id == CLI_ARGS_POSITIONAL || id == CLI_ARGS_HELP) continue;
        if (id <= 0) __builtin_trap();
        int taken = cli_attention_take(&ao, &args, id, value);
        if (!taken) taken = cli_module_take(&mod, &args, id, value);
        if (taken < 0) break;
        if (taken) continue;
        int64_t n;
        double x;
        switch (id) {
        case F_INT:
            if (cli_parse_int("fuzz", "--int", value, -5, 1000, &n) && (n < -5 || n > 1000)) __builtin_trap();
            break;
        case F_FLOAT:
            if (cli_parse_float("fuzz", "--float", value, -1.5, 1e10, &x) && !(x >= -1.5 && x <= 1e10))
                __builtin_trap();
            break;
        case F_LIST: {
            cli_index_list l = {0};
            if (cli_index_list_parse("fuzz", "--heads-list", value, &l))
                for (int64_t i = 0; i < l.count; i++)
                    if (l.items[i] < 0 || l.items[i] > (1 << 20)) __builtin_trap();
            cli_index_list_free(&l);
            break;
        }
        case F_TOKENS:
            if (value[0] != '@') { /* token files are the file readers' business */
                cli_tokens t = {0};
                if (cli_tokens_parse("fuzz", "--tokens", value, &t) == CLI_OK && t.count < 1) __builtin_trap();
                cli_tokens_free(&t);
            }
            break;
        default: break;
        }
    }
    /* What was accepted is within its documented range. */
    if (ao.opt.threads < 0 || ao.opt.threads > 4096) __builtin_trap();
    if (ao.opt.window && (ao.opt.window_left < -1 || ao.opt.window_right < -1)) __builtin_trap();
    if (ao.opt.scale != 0 && !(ao.opt.scale >= 1e-30f && ao.opt.scale <= 1e30f)) __builtin_trap();
    if (mod.heads < 0 || mod.heads > (1 << 20) || mod.kv_heads < 0 || mod.kv_heads > (1 << 20)) __builtin_trap();
    cli_attention_options_free(&ao);
    cli_module_free(&mod);
    free(text);
    return 0;
}
