/*
 * tokenizer_split.c — the byte-level BPE pre-tokenizer: text cut into
 * pieces by the model's regular expression, with PCRE2 (UTF-8, Unicode
 * properties for \p{L}, \p{N} and \s, JIT-compiled where PCRE2 has a JIT
 * for this machine).  Each match is a piece, and so is each gap between
 * matches (Hugging Face's Split(..., behavior="isolated")); the patterns
 * below match every valid character, so only invalid UTF-8, which
 * PCRE2_MATCH_INVALID_UTF lets no pattern match, is left in gaps — a
 * piece of its own, merged from its bytes like any other.
 */
#include "tokenizer/tokenizer_split.h"

#include "tokenizer/tokenizer_merge.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdlib.h>

typedef struct tok_splitter {
    pcre2_code *code;
} tok_splitter;

attn_status attn__tok_splitter_new(const char *name, void **splitter) {
    *splitter = NULL;
    const char *pattern = NULL;
    for (const attn__tok_pre *p = attn__tok_pre_tokenizers; p->name; p++)
        if (strcmp(name, p->name) == 0) pattern = p->pattern;
    if (!pattern)
        return attn__fail(ATTN_ERR_UNSUPPORTED, "pre-tokenizer '%s': this library knows 'qwen2', 'gpt2' and 'smollm' "
                          "only", name);
    int err;
    PCRE2_SIZE err_offset;
    pcre2_code *code = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED,
                                     PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &err_offset, NULL);
    if (!code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        return attn__fail(ATTN_ERR_INTERNAL, "tokenizer: PCRE2 refused the '%s' pattern at %zu: %s", name,
                          (size_t)err_offset, (const char *)msg);
    }
    /* Without a JIT for this machine (or this PCRE2 build) the interpreter
     * matches the same: the JIT only makes it faster. */
    (void)pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
    tok_splitter *s = malloc(sizeof *s);
    if (!s) {
        pcre2_code_free(code);
        return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "tokenizer: no memory for the pre-tokenizer");
    }
    s->code = code;
    *splitter = s;
    return ATTN_OK;
}

void attn__tok_splitter_free(void *splitter) {
    tok_splitter *s = splitter;
    if (!s) return;
    pcre2_code_free(s->code);
    free(s);
}

attn_status attn__tok_split_encode(const attn_tokenizer *t, const uint8_t *text, size_t len, tok_ids *out) {
    const tok_splitter *s = t->splitter;
    /* Match data per call: the compiled pattern is shared by every thread,
     * the match state is not. */
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(s->code, NULL);
    if (!md) return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "tokenizer: no memory for PCRE2's match data");
    attn_status st = ATTN_OK;
    size_t at = 0;
    while (at < len && st == ATTN_OK) {
        int rc = pcre2_match(s->code, (PCRE2_SPTR)text, len, at, 0, md, NULL);
        size_t begin = len, end = len;
        if (rc >= 0) {
            const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
            begin = ov[0];
            end = ov[1];
        } else if (rc != PCRE2_ERROR_NOMATCH) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            st = attn__fail(ATTN_ERR_INTERNAL, "tokenizer: PCRE2 failed at byte %zu: %s", at, (const char *)msg);
            break;
        }
        /* Every alternative matches at least one character; were a match
         * empty, the byte after it would be a gap of its own. */
        if (end == at) end = begin = at + 1;
        if (begin > at) st = attn__tok_merge_bpe(t, text + at, begin - at, out); /* a gap: invalid UTF-8 */
        if (st == ATTN_OK && end > begin) st = attn__tok_merge_bpe(t, text + begin, end - begin, out);
        at = end;
    }
    pcre2_match_data_free(md);
    return st;
}
