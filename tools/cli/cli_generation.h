/*
 * cli_generation.h — what `attn model generate` and `attn model chat`
 * share: a model opened from a GGUF file or a Hugging Face checkpoint with
 * its tokenizer and chat template, the sampling flags, and the generation
 * loop that streams whole UTF-8 characters to stdout and stops at an end
 * token, a stop string, --max-tokens or Ctrl-C.
 */
#ifndef ATTN_CLI_GENERATION_H
#define ATTN_CLI_GENERATION_H

#include "cli_args.h"

#include "attn_chat.h"
#include "attn_decoder.h"
#include "attn_tokenizer.h"

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* ------------------------------------------------------------ the model */

enum { CLI_MAX_END_IDS = 16, CLI_MAX_STOPS = 16 };

typedef struct cli_model {
    attn_decoder *decoder;
    attn_tokenizer *tokenizer;
    attn_chat_template *chat;       /* NULL when not asked for                       */
    char *bos_token, *eos_token;    /* the special tokens' text, for the template (or NULL) */
    int32_t end_ids[CLI_MAX_END_IDS];
    int n_end_ids;
    double load_seconds;
} cli_model;

/* Opens path (a GGUF file, or a checkpoint: a directory, or a
 * .safetensors / index file with config.json beside it): the decoder, its
 * tokenizer, and when want_chat its chat template (template_path's file
 * when given, else the model's own).  End ids: the tokenizer's EOS and
 * end-of-turn tokens (attn_tokenizer_end_ids) and those the model's
 * metadata names (a GGUF's eos, eot and eom ids; a checkpoint's
 * generation_config.json or config.json eos_token_id list).  Prints the error and
 * returns its exit status (CLI_DATA_ERROR). */
int cli_model_open(const char *cmd, const char *path, const attn_decoder_options *load, bool want_chat,
                   const char *template_path, cli_model *m);
void cli_model_close(cli_model *m);
/* The configuration of path (a GGUF file or a checkpoint, as
 * cli_model_open takes), read without the weights, so that a command can
 * check its arguments against it before a load that takes seconds.
 * Prints the error (naming path) and returns CLI_DATA_ERROR, else CLI_OK. */
int cli_model_config(const char *cmd, const char *path, attn_decoder_config *cfg);
/* A checkpoint rather than a GGUF file: a directory, a .safetensors file or an index. */
bool cli_is_checkpoint(const char *path);

/* The whole of f, NUL-terminated (malloc'd, *len its bytes); NULL after
 * printing an error naming what. */
char *cli_read_stream(const char *cmd, FILE *f, const char *what, size_t *len);

/* ------------------------------------------------------------ sampling */

/* The flags of sampling and of when to stop, shared by generate and chat
 * (ids CLI_SHARED_IDS + 100 and up). */
extern const cli_flag cli_sampling_flags[];
/* Hints (CLI_HINT) for the flags of attn model run a user may give generate or chat. */
extern const cli_flag cli_sampling_hints[];

typedef struct cli_sampling {
    attn_sampler_options sampler;
    int64_t max_tokens;
    const char *stops[CLI_MAX_STOPS]; /* --stop STR, repeatable */
    int n_stops;
    bool stop_at_eos;
} cli_sampling;

/* Defaults (greedy, stop at end tokens, max_tokens as given). */
void cli_sampling_init(cli_sampling *s, int64_t max_tokens);
/* Handles one of cli_sampling_flags (id, value); false after printing a
 * usage error. */
bool cli_sampling_flag(const char *cmd, cli_args *args, int id, const char *value, int64_t max_tokens_max,
                       cli_sampling *s);
/* Handles one of cli_sampling_flags or cli_decoder_flags (the flags every
 * generating command shares: generate, chat); false after printing a usage
 * error. */
bool cli_generation_flag(const char *cmd, cli_args *args, int id, const char *value, int64_t max_tokens_max,
                         cli_sampling *s, attn_decoder_options *load);
/* After the walk: --top-k/--top-p/--min-p alone mean temperature 1; the
 * contradictions refused.  False after printing a usage error. */
bool cli_sampling_finish(const char *cmd, const cli_args *args, cli_sampling *s);
/* The flags' lines for a help text. */
void cli_sampling_help(FILE *out, int64_t max_tokens_default, int64_t max_tokens_max);

/* ------------------------------------------------------------ generation */

typedef struct cli_reply {
    char *text;          /* what was printed (whole characters, U+FFFD for bad bytes), malloc'd */
    size_t len;
    int32_t *ids;        /* the tokens kept (not the end token), malloc'd */
    int64_t n_ids;
    int64_t steps;       /* decode steps run                              */
    double first_at;     /* CLOCK_MONOTONIC seconds when the first token was sampled, 0 if none */
    const char *why;     /* "--max-tokens", "an end token", "a stop string", "Ctrl-C", "the context" */
} cli_reply;

/* Samples from logits (the prompt's, after its prefill) and runs each new
 * token at the next position of session (which holds prompt [position]:
 * the sampler's history, which its penalties count, starts with them), printing the reply to out as it
 * comes (NULL: nothing printed), until s's end tokens, stop strings or
 * max_tokens, the session's capacity, or *interrupted (NULL: never) turns
 * nonzero.  A stop string is not printed, nor kept in the reply.  Prints
 * the error and returns CLI_DATA_ERROR on failure (the reply so far kept). */
int cli_generate(const char *cmd, attn_decoder_session *session, attn_sampler *sampler, const cli_model *m,
                 const cli_sampling *s, const int32_t *prompt, float *logits, FILE *out, volatile sig_atomic_t *interrupted,
                 cli_reply *reply);
void cli_reply_free(cli_reply *r);

/* --print-prompt: "--- prompt: N tokens ---", the text exactly, "--- ids ---",
 * the ids comma-separated, "--- reply ---" (stdout). */
void cli_print_prompt(const char *text, size_t len, const int32_t *ids, size_t n);

#endif /* ATTN_CLI_GENERATION_H */
