/*
 * cli_answer.h — the tokens a logit difference compares (--answer TOKEN,
 * --wrong TOKEN), as `attn model trace` and `attn report --model` read
 * them, and an id's rank among a row of logits.
 */
#ifndef ATTN_CLI_ANSWER_H
#define ATTN_CLI_ANSWER_H

#include "attn_tokenizer.h"

#include <stdbool.h>
#include <stdint.h>

/* TOKEN of flag: "#ID" (0 <= ID < vocab) or a text that encodes to exactly
 * one token (no BOS).  False after a usage error, printed naming cmd and
 * the flag. */
bool cli_answer_token(const char *cmd, const attn_tokenizer *t, const char *flag, const char *text, int64_t vocab,
                      int64_t *id);

/* The rank of id among logits [V]: how many logits are larger (0: the top). */
int64_t cli_logit_rank(const float *logits, int64_t V, int64_t id);

#endif /* ATTN_CLI_ANSWER_H */
