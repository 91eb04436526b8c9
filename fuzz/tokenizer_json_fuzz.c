/*
 * tokenizer_json_fuzz.c — libFuzzer target for Hugging Face's tokenizer.json
 * (attn_tokenizer_from_json, cJSON; the vocabulary then goes through the
 * same builders as a GGUF's).
 *
 * Input: the file's bytes up to the first NUL byte; what follows the NUL
 * (or, without one, a fixed mixed text) is a text to encode.  The reader
 * must build a tokenizer (byte-level BPE, or Gemma's SentencePiece-style
 * one) or refuse with a message, never crash or leak; a built one must
 * encode the text, answer size queries that agree, decode with every flag,
 * and give every id's NUL-terminated piece.  Seeds: fuzz/corpus/tokenizer_json/
 * (the tiny fixtures and byte-built variants).
 */
#include "attn.h"
#include "attn_tokenizer.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char default_text[] = "Hello, world! 我吃了一个苹果 <|im_start|>user\n  x = f(y);\t😀 it's 1234";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    const size_t json_len = nul ? (size_t)(nul - data) : size;
    const char *text = nul ? (const char *)nul + 1 : default_text;
    const size_t text_len = nul ? size - json_len - 1 : sizeof default_text - 1;
    char *json = malloc(json_len ? json_len : 1); /* exactly the bytes: ASan sees any overread */
    if (!json) return 0;
    memcpy(json, data, json_len);
    attn_tokenizer *t = NULL;
    attn_status st = attn_tokenizer_from_json(json, json_len, &t);
    free(json); /* the tokenizer keeps copies */
    if (st != ATTN_OK) {
        if (attn_last_error()[0] == '\0' || t != NULL) __builtin_trap();
        return 0;
    }
    size_t cap = text_len + 2, n = 0, query = 0;
    int32_t *ids = malloc(cap * sizeof *ids);
    char *back = NULL;
    for (unsigned flags = 0; ids && flags < 4; flags++) {
        st = attn_tokenizer_encode(t, text, text_len, flags, ids, cap, &n);
        if (st != ATTN_OK) {
            if (attn_last_error()[0] == '\0') __builtin_trap();
            continue;
        }
        if (attn_tokenizer_encode(t, text, text_len, flags, NULL, 0, &query) != ATTN_OK || query != n) __builtin_trap();
        for (unsigned dflags = 0; dflags < 4; dflags++) {
            size_t len = 0, len2 = 0;
            if (attn_tokenizer_decode(t, ids, n, dflags, NULL, 0, &len) != ATTN_OK) __builtin_trap();
            char *b = realloc(back, len + 1);
            if (!b) break;
            back = b;
            if (attn_tokenizer_decode(t, ids, n, dflags, back, len + 1, &len2) != ATTN_OK || len2 != len)
                __builtin_trap();
        }
    }
    attn_tokenizer_info info;
    attn_tokenizer_describe(t, &info);
    if ((info.kind != ATTN_TOKENIZER_BPE && info.kind != ATTN_TOKENIZER_SPM) || info.vocab_size <= 0) __builtin_trap();
    for (int64_t id = 0; id < info.vocab_size; id++) {
        const char *piece;
        size_t piece_len;
        if (attn_tokenizer_token(t, (int32_t)id, &piece, &piece_len, NULL) != ATTN_OK || piece[piece_len] != 0)
            __builtin_trap();
    }
    free(ids);
    free(back);
    attn_tokenizer_free(t);
    return 0;
}
