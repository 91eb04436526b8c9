/*
 * cli_answer.c — --answer / --wrong tokens and logit ranks (cli_answer.h).
 */
#include "cli_answer.h"
#include "cli.h"

#include <stdlib.h>
#include <string.h>

bool cli_answer_token(const char *cmd, const attn_tokenizer *t, const char *flag, const char *text, int64_t vocab,
                      int64_t *id) {
    if (text[0] == '#') {
        char *end;
        const long long v = strtoll(text + 1, &end, 10);
        if (end == text + 1 || *end || v < 0 || v >= vocab)
            return cli_usage_error(cmd, "%s '%s': expected #ID with ID in [0, %lld)", flag, text, (long long)vocab),
                   false;
        *id = v;
        return true;
    }
    int32_t ids[8];
    size_t n = 0;
    if (attn_tokenizer_encode(t, text, strlen(text), ATTN_ENCODE_NO_BOS, ids, 8, &n) || n != 1)
        return cli_usage_error(cmd, "%s '%s' is %zu tokens, not one (give a single token's text, or #ID)", flag,
                               text, n), false;
    *id = ids[0];
    return true;
}

int64_t cli_logit_rank(const float *logits, int64_t V, int64_t id) {
    int64_t above = 0;
    for (int64_t v = 0; v < V; v++) above += logits[v] > logits[id];
    return above;
}
