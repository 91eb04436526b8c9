/*
 * cli_pictures.h — what `attn map` and `attn report` share: token lists
 * (--tokens, --key-tokens), head lists (--heads 0,3 / 0-3), and the
 * visibility of each cell under the shared mask options.
 */
#ifndef ATTN_CLI_PICTURES_H
#define ATTN_CLI_PICTURES_H

#include "cli.h"

/* Token labels: "我,吃,了" (comma-separated; an empty list item is an empty
 * label), or "@FILE" for one token per line of a UTF-8 file. */
typedef struct cli_tokens {
    char **items;
    int64_t count;
    char *storage; /* owns the text the items point into */
} cli_tokens;

/* Parses flag's value into t.  Returns CLI_OK, CLI_USAGE_ERROR (empty list)
 * or CLI_DATA_ERROR (unreadable file), printed. */
int cli_tokens_parse(const char *cmd, const char *flag, const char *text, cli_tokens *t);
/* CLI_OK when t has exactly want items (or was not given), else a data
 * error naming flag, the counts and what they must match. */
int cli_tokens_check(const char *cmd, const char *flag, const cli_tokens *t, int64_t want,
                     const char *what);
void cli_tokens_free(cli_tokens *t);

/* A list of indices "0,3,5" or ranges "0-3" (inclusive), each in
 * [0, 1 << 20].  Returns false after printing a usage error. */
typedef struct cli_index_list {
    int64_t *items;
    int64_t count;
} cli_index_list;
bool cli_index_list_parse(const char *cmd, const char *flag, const char *text, cli_index_list *l);
void cli_index_list_free(cli_index_list *l);

/* visible [B, H, L, S] (1 = the query may read the key) under o's mask
 * options, computed by the library: the scores of zero queries and keys are
 * -inf exactly where a key is hidden.  malloc'd; NULL (printed) on failure. */
uint8_t *cli_visibility(const char *cmd, const cli_attention_options *o, int64_t batch,
                        int64_t heads, int64_t len_q, int64_t len_kv);

#endif /* ATTN_CLI_PICTURES_H */
