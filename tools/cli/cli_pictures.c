/*
 * cli_pictures.c — token lists, head lists and cell visibility for the
 * picture subcommands (see cli_pictures.h).
 */
#include "cli_pictures.h"
#include "cli_input.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Splits storage in place at sep; items point into it. */
static int split(char *storage, char sep, cli_tokens *t) {
    int64_t n = 1;
    for (const char *p = storage; *p; p++) n += *p == sep;
    t->items = calloc((size_t)n, sizeof *t->items);
    if (!t->items) return -1;
    char *start = storage;
    for (char *p = storage;; p++) {
        if (*p == sep || *p == 0) {
            bool end = *p == 0;
            *p = 0;
            t->items[t->count++] = start;
            if (end) break;
            start = p + 1;
        }
    }
    return 0;
}

int cli_tokens_parse(const char *cmd, const char *flag, const char *text, cli_tokens *t) {
    cli_tokens_free(t);
    if (!text || !*text) return cli_usage_error(cmd, "%s needs a comma-separated list or @FILE", flag);
    if (text[0] == '@') {
        /* A token file is text: a regular file of at most 64 MiB (not a
         * FIFO, not /dev/zero), read once. */
        size_t len;
        int rc = cli_read_whole(cmd, flag, text + 1, false, CLI_LABELS_MAX, &t->storage, &len);
        if (rc) return rc;
        if (memchr(t->storage, 0, len)) {
            cli_tokens_free(t);
            return cli_data_error(cmd, "%s: '%s' holds a NUL byte: a token file is UTF-8 text, one token per line",
                                  flag, text + 1);
        }
        if (len && t->storage[len - 1] == '\n') t->storage[--len] = 0; /* no empty last token */
        if (len && t->storage[len - 1] == '\r') t->storage[--len] = 0; /* ... nor a CR on the last one */
        /* CRLF ends a token as LF does: the CR is dropped (a NUL in its
         * place would end the whole list there). */
        size_t kept = 0;
        for (size_t i = 0; i < len; i++)
            if (!(t->storage[i] == '\r' && i + 1 < len && t->storage[i + 1] == '\n')) t->storage[kept++] = t->storage[i];
        t->storage[kept] = 0;
        if (split(t->storage, '\n', t)) goto oom;
        return CLI_OK;
    }
    t->storage = strdup(text);
    if (!t->storage || split(t->storage, ',', t)) goto oom;
    return CLI_OK;
oom:
    cli_tokens_free(t);
    return cli_data_error(cmd, "%s: out of memory", flag);
}

int cli_tokens_check(const char *cmd, const char *flag, const cli_tokens *t, int64_t want,
                     const char *what) {
    if (!t->items || t->count == want) return CLI_OK;
    return cli_data_error(cmd, "%s has %lld tokens but there are %lld %s; give one token per position",
                          flag, (long long)t->count, (long long)want, what);
}

void cli_tokens_free(cli_tokens *t) {
    free(t->items);
    free(t->storage);
    *t = (cli_tokens){0};
}

bool cli_index_list_parse(const char *cmd, const char *flag, const char *text, cli_index_list *l) {
    cli_index_list_free(l);
    const char *p = text ? text : "";
    for (;;) {
        char *end;
        long long first = strtoll(p, &end, 10), last = first;
        bool ok = end != p && first >= 0 && first <= (1 << 20);
        if (ok && *end == '-') {
            const char *q = end + 1;
            last = strtoll(q, &end, 10);
            ok = end != q && last >= first && last <= (1 << 20);
        }
        if (!ok || (*end != ',' && *end != 0)) {
            cli_index_list_free(l);
            cli_usage_error(cmd, "%s expects indices like 0,3 or 0-3, got '%s'", flag, text ? text : "");
            return false;
        }
        int64_t *grown = realloc(l->items, (size_t)(l->count + (last - first) + 1) * sizeof *grown);
        if (!grown) {
            cli_index_list_free(l);
            cli_data_error(cmd, "%s: out of memory", flag);
            return false;
        }
        l->items = grown;
        for (long long i = first; i <= last; i++) l->items[l->count++] = i;
        if (*end == 0) return true;
        p = end + 1;
    }
}

void cli_index_list_free(cli_index_list *l) {
    free(l->items);
    *l = (cli_index_list){0};
}

uint8_t *cli_visibility(const char *cmd, const cli_attention_options *o, int64_t batch,
                        int64_t heads, int64_t len_q, int64_t len_kv) {
    size_t cells = (size_t)(batch * heads * len_q * len_kv);
    float *zeros_q = calloc((size_t)(batch * len_q * heads), sizeof(float));
    float *zeros_k = calloc((size_t)(batch * len_kv * heads), sizeof(float));
    float *scores = malloc(cells * sizeof(float));
    uint8_t *visible = malloc(cells);
    if (!zeros_q || !zeros_k || !scores || !visible) {
        cli_data_error(cmd, "out of memory for a %lld x %lld x %lld x %lld visibility table",
                       (long long)batch, (long long)heads, (long long)len_q, (long long)len_kv);
        goto fail;
    }
    attn_tensor q = attn_tensor_4d(zeros_q, batch, len_q, heads, 1);
    attn_tensor k = attn_tensor_4d(zeros_k, batch, len_kv, heads, 1);
    attn_status st = attn_sdpa_scores(&q, &k, &o->opt, scores);
    if (st != ATTN_OK) {
        cli_data_error(cmd, "%s: %s", attn_status_str(st), attn_last_error());
        goto fail;
    }
    for (size_t n = 0; n < cells; n++) visible[n] = !(isinf(scores[n]) && scores[n] < 0);
    free(zeros_q);
    free(zeros_k);
    free(scores);
    return visible;
fail:
    free(zeros_q);
    free(zeros_k);
    free(scores);
    free(visible);
    return NULL;
}
