/*
 * tokenizer_fixture.c — a tokenizer against a reference fixture
 * (tokenizer_fixture.h).
 */
#include "tokenizer_fixture.h"

#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Hex digits into bytes; returns the count. */
static size_t unhex(const char *hex, char *out) {
    size_t n = 0;
    for (; hex[0] && hex[0] != '\n' && hex[1]; hex += 2) {
        unsigned v;
        if (sscanf(hex, "%2x", &v) != 1) fail_msg("bad hex in the fixture: %.8s", hex);
        out[n++] = (char)v;
    }
    return n;
}

static void print_ids(const char *what, const int32_t *ids, size_t n) {
    char line[4096];
    size_t at = 0;
    for (size_t i = 0; i < n && at + 16 < sizeof line; i++) at += (size_t)snprintf(line + at, sizeof line - at, " %d", ids[i]);
    print_message("  %s:%s\n", what, line);
}

void tok_fixture_check(const attn_tokenizer *t, const char *model, const char *fixture) {
    FILE *f = fopen(fixture, "r");
    if (!f) fail_msg("cannot open %s", fixture);
    size_t cap = 1 << 16;
    char *line = malloc(cap), *text = malloc(cap), *decoded_want = malloc(cap), *decoded = malloc(cap);
    int32_t *want = malloc(cap * sizeof *want), *got = malloc(cap * sizeof *got);
    unsigned flags = 0;
    size_t text_len = 0, n_want = 0, cases = 0, ids_total = 0, failures = 0;
    while (fgets(line, (int)cap, f)) {
        if (strncmp(line, "case ", 5) == 0) {
            flags = strncmp(line + 5, "nospecial", 9) == 0 ? ATTN_ENCODE_SPLIT_SPECIAL : 0;
        } else if (strncmp(line, "text ", 5) == 0) {
            text_len = unhex(line + 5, text);
        } else if (strncmp(line, "ids", 3) == 0) {
            n_want = 0;
            for (char *p = line + 3, *end;; p = end) {
                long v = strtol(p, &end, 10);
                if (end == p) break;
                want[n_want++] = (int32_t)v;
            }
        } else if (strncmp(line, "decoded ", 8) == 0) {
            size_t want_len = unhex(line + 8, decoded_want);
            size_t n_got;
            assert_ok(attn_tokenizer_encode(t, text, text_len, flags, got, cap, &n_got));
            cases++;
            ids_total += n_want;
            if (n_got != n_want || memcmp(got, want, n_got * sizeof *got) != 0) {
                failures++;
                print_message("%s: '%.*s'%s: ids differ\n", model, (int)text_len, text, flags ? " (no special)" : "");
                print_ids("reference", want, n_want);
                print_ids("attn     ", got, n_got);
                continue;
            }
            size_t len;
            assert_ok(attn_tokenizer_decode(t, got, n_got, ATTN_DECODE_SKIP_SPECIAL | ATTN_DECODE_VALID_UTF8,
                                            decoded, cap, &len));
            if (len != want_len || memcmp(decoded, decoded_want, len) != 0) {
                failures++;
                print_message("%s: '%.*s': decodes to '%.*s', the reference to '%.*s'\n", model, (int)text_len, text,
                              (int)len, decoded, (int)want_len, decoded_want);
            }
        }
    }
    fclose(f);
    print_message("%s: %zu texts, %zu reference ids, %zu differ\n", model, cases, ids_total, failures);
    free(line), free(text), free(decoded_want), free(decoded), free(want), free(got);
    if (cases == 0) fail_msg("%s holds no case", fixture);
    if (failures) fail_msg("%zu of %zu texts differ from the reference", failures, cases);
}


void tok_skip_without_pcre2(attn_status st) {
    if (st == ATTN_ERR_UNSUPPORTED && strstr(attn_last_error(), "without PCRE2")) {
        print_message("skipped: %s\n", attn_last_error());
        skip();
    }
}
