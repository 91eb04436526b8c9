/*
 * tokenizer_fuzz.c — libFuzzer target for the tokenizers (libattn_model's
 * attn_tokenizer.h).
 *
 * Input: the first byte chooses the case, the rest is its material.
 *   0  text, encoded with a small fixed byte-level BPE vocabulary (every
 *      byte's letter, a few merges, a control and a user-defined token);
 *      byte-level BPE is lossless, so the ids must decode to the text again
 *   1  text, encoded with a small fixed SentencePiece-style vocabulary
 *      (with byte fallback), then decoded, raw and with invalid UTF-8
 *      replaced (the replaced text must be valid UTF-8)
 *   2, 3  a hostile vocabulary: the material up to the first 0xFF byte is
 *      tokens and merges (lines; a line "-" switches from tokens to merges,
 *      a token's first byte its type), the rest a text; built as a GGUF in
 *      memory (BPE over the 256 letters for 2, SPM for 3) — refused with a
 *      message, or built and then every text encodes, decodes, and every
 *      id's piece is read
 * Whatever the input, nothing may crash, read out of bounds or leak
 * (AddressSanitizer and UBSan watch), and every refusal says why.  Seeds:
 * fuzz/corpus/tokenizer/.
 */
#include "attn.h"
#include "attn_tokenizer.h"
#include "gguf_builder.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { GGUF_I32 = 5, GGUF_BOOL = 7, GGUF_STRING = 8, GGUF_ARRAY = 9 };

static void check_refusal(attn_status status) {
    if (status != ATTN_OK && attn_last_error()[0] == '\0') __builtin_trap();
}

/* GPT-2's byte alphabet, by its construction: the printable bytes stand for
 * themselves, the others in order for U+0100.. */
static void byte_letter(int b, char out[3]) {
    static int next_of[256];
    int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    if (!next_of[255]) /* first call: number the non-printable bytes */
        for (int c = 0, next = 256; c < 256; c++) {
            int p = (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE;
            next_of[c] = p ? c : next++;
        }
    int cp = printable ? b : next_of[b];
    memset(out, 0, 3);
    if (cp < 0x80) out[0] = (char)cp;
    else out[0] = (char)(0xC0 | cp >> 6), out[1] = (char)(0x80 | (cp & 0x3F));
}

typedef struct vocab {
    const char *arch, *model;
    char **tokens;
    size_t *token_len;
    int32_t *types;
    size_t n_tokens;
    char **merges;
    size_t *merge_len;
    size_t n_merges;
} vocab;

static attn_tokenizer *build(const vocab *v) {
    gguf_bytes b = {0};
    const int gpt2 = !strcmp(v->model, "gpt2");
    gb_header(&b, 3, 0, 5 + (gpt2 ? 2 : v->n_merges ? 1 : 0));
    gb_kv_string(&b, "general.architecture", v->arch);
    gb_kv_string(&b, "tokenizer.ggml.model", v->model);
    gb_key(&b, "tokenizer.ggml.tokens", GGUF_ARRAY);
    gb_array(&b, GGUF_STRING, v->n_tokens);
    for (size_t i = 0; i < v->n_tokens; i++) gb_strn(&b, v->tokens[i], v->token_len[i]);
    gb_key(&b, "tokenizer.ggml.token_type", GGUF_ARRAY);
    gb_array(&b, GGUF_I32, v->n_tokens);
    for (size_t i = 0; i < v->n_tokens; i++) gb_u32(&b, (uint32_t)v->types[i]);
    gb_key(&b, "tokenizer.ggml.add_bos_token", GGUF_BOOL);
    gb_u8(&b, 0);
    if (gpt2) {
        gb_kv_string(&b, "tokenizer.ggml.pre", "qwen2");
        gb_key(&b, "tokenizer.ggml.merges", GGUF_ARRAY);
        gb_array(&b, GGUF_STRING, v->n_merges);
        for (size_t i = 0; i < v->n_merges; i++) gb_strn(&b, v->merges[i], v->merge_len[i]);
    } else if (v->n_merges) {
        gb_kv_string(&b, "tokenizer.ggml.pre", "default");
    }
    attn_gguf *g;
    attn_tokenizer *t = NULL;
    attn_status st = attn_gguf_parse(b.data, b.len, &g);
    check_refusal(st);
    if (st == ATTN_OK) {
        check_refusal(attn_tokenizer_from_gguf(g, &t));
        attn_gguf_free(g);
    }
    gb_free(&b);
    return t;
}

/* Valid UTF-8 (no overlong forms, surrogates or code points past U+10FFFF),
 * checked independently of the library's decoder. */
static int valid_utf8(const uint8_t *s, size_t n) {
    for (size_t i = 0; i < n;) {
        uint32_t c = s[i], len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
        if (!len || i + len > n) return 0;
        uint32_t cp = len == 1 ? c : c & (0x7F >> len);
        for (uint32_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return 0;
            cp = cp << 6 | (s[i + k] & 0x3F);
        }
        static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < min[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
        i += len;
    }
    return 1;
}

/* Every check of one text on one tokenizer; lossless: decode must give the
 * text back. */
static void exercise(const attn_tokenizer *t, const uint8_t *text, size_t len, int lossless) {
    size_t cap = len + 2, n = 0, back_len = 0, query = 0;
    int32_t *ids = malloc(cap * sizeof *ids);
    char *back = NULL;
    for (unsigned flags = 0; flags < 4; flags++) {
        attn_status st = attn_tokenizer_encode(t, (const char *)text, len, flags, ids, cap, &n);
        check_refusal(st);
        if (st != ATTN_OK) continue;
        if (n > cap) __builtin_trap(); /* len + 1 ids always suffice */
        if (attn_tokenizer_encode(t, (const char *)text, len, flags, NULL, 0, &query) != ATTN_OK || query != n)
            __builtin_trap(); /* the size query agrees */
        for (unsigned dflags = 0; dflags < 4; dflags++) {
            if (attn_tokenizer_decode(t, ids, n, dflags, NULL, 0, &back_len) != ATTN_OK) __builtin_trap();
            back = realloc(back, back_len + 1);
            size_t len2;
            if (attn_tokenizer_decode(t, ids, n, dflags, back, back_len + 1, &len2) != ATTN_OK || len2 != back_len)
                __builtin_trap();
            if (lossless && flags == 0 && dflags == 0 && (back_len != len || memcmp(back, text, len) != 0))
                __builtin_trap();
            if ((dflags & ATTN_DECODE_VALID_UTF8) && !valid_utf8((const uint8_t *)back, back_len)) __builtin_trap();
        }
    }
    attn_tokenizer_info info;
    attn_tokenizer_describe(t, &info);
    for (int64_t id = 0; id < info.vocab_size; id++) {
        const char *piece;
        size_t piece_len;
        if (attn_tokenizer_token(t, (int32_t)id, &piece, &piece_len, NULL) != ATTN_OK) __builtin_trap();
        if (piece[piece_len] != 0) __builtin_trap();
    }
    free(ids);
    free(back);
}

/* The fixed vocabularies of cases 0 and 1. */
static attn_tokenizer *fixed_bpe(void) {
    static char letters[256][3];
    static char *tokens[263];
    static size_t token_len[263];
    static int32_t types[263];
    static char *merges[] = {"h e", "l l", "he ll", "Ġ Ġ", "1 2"};
    static size_t merge_len[5];
    static const char *const merged[] = {"he", "ll", "hell", "ĠĠ", "12", "<|end|>", "<tool>"};
    for (int b = 0; b < 256; b++) {
        byte_letter(b, letters[b]);
        tokens[b] = letters[b], token_len[b] = strlen(letters[b]), types[b] = 1;
    }
    for (int i = 0; i < 7; i++) {
        tokens[256 + i] = (char *)merged[i];
        token_len[256 + i] = strlen(merged[i]);
        types[256 + i] = i == 5 ? 3 : i == 6 ? 4 : 1;
    }
    for (int i = 0; i < 5; i++) merge_len[i] = strlen(merges[i]);
    vocab v = {"qwen2", "gpt2", tokens, token_len, types, 263, merges, merge_len, 5};
    return build(&v);
}

static attn_tokenizer *fixed_spm(void) {
    static char names[256][8];
    static char *tokens[266];
    static size_t token_len[266];
    static int32_t types[266];
    static const char *const words[] = {"<pad>", "<eos>", "<bos>", "<unk>", "▁", "a", "ab", "▁a", "  ", "\n"};
    for (int i = 0; i < 10; i++) {
        tokens[i] = (char *)words[i], token_len[i] = strlen(words[i]);
        types[i] = i < 3 ? 3 : i == 3 ? 2 : i >= 8 ? 4 : 1;
    }
    for (int b = 0; b < 256; b++) {
        snprintf(names[b], sizeof names[b], "<0x%02X>", b);
        tokens[10 + b] = names[b], token_len[10 + b] = 6, types[10 + b] = 6;
    }
    vocab v = {"gemma3", "llama", tokens, token_len, types, 266, NULL, NULL, 0};
    return build(&v);
}

/* Case 2 and 3: lines of the material before the first 0xFF. */
static void hostile(const uint8_t *data, size_t size, int bpe) {
    const uint8_t *end = memchr(data, 0xFF, size);
    size_t spec_len = end ? (size_t)(end - data) : size;
    const uint8_t *text = end ? end + 1 : data + size;
    size_t text_len = (size_t)(data + size - text);
    size_t max = 256 + spec_len + 1;
    vocab v = {bpe ? "qwen2" : "gemma3", bpe ? "gpt2" : "llama", calloc(max, sizeof(char *)),
               calloc(max, sizeof(size_t)), calloc(max, sizeof(int32_t)), 0, calloc(max, sizeof(char *)),
               calloc(max, sizeof(size_t)), 0};
    static char letters[256][3];
    if (bpe)
        for (int b = 0; b < 256; b++) {
            byte_letter(b, letters[b]);
            v.tokens[v.n_tokens] = letters[b], v.token_len[v.n_tokens] = strlen(letters[b]);
            v.types[v.n_tokens++] = 1;
        }
    int in_merges = 0;
    for (size_t at = 0; at < spec_len;) {
        const uint8_t *nl = memchr(data + at, '\n', spec_len - at);
        size_t line_len = nl ? (size_t)(nl - data - at) : spec_len - at;
        const char *line = (const char *)data + at;
        if (line_len == 1 && line[0] == '-') {
            in_merges = 1;
        } else if (in_merges) {
            v.merges[v.n_merges] = (char *)line, v.merge_len[v.n_merges++] = line_len;
        } else if (line_len > 0) {
            /* The first byte is the type (1..6 mostly, anything sometimes). */
            v.types[v.n_tokens] = (uint8_t)line[0] % 8;
            v.tokens[v.n_tokens] = (char *)line + 1, v.token_len[v.n_tokens++] = line_len - 1;
        }
        at += line_len + 1;
    }
    if (v.n_tokens) {
        attn_tokenizer *t = build(&v);
        if (t) {
            /* Not lossless: a special's text may use letters of the byte
             * alphabet ("Ġx" decodes to " x"), as in the reference. */
            exercise(t, text, text_len, 0);
            /* Arbitrary ids from the text's bytes, in and out of range. */
            int32_t ids[16];
            size_t n = text_len / 2 < 16 ? text_len / 2 : 16, len;
            for (size_t i = 0; i < n; i++) ids[i] = (int32_t)((text[2 * i] << 8 | text[2 * i + 1]) % (v.n_tokens + 2));
            check_refusal(attn_tokenizer_decode(t, ids, n, 0, NULL, 0, &len));
            attn_tokenizer_free(t);
        }
    }
    free(v.tokens), free(v.token_len), free(v.types), free(v.merges), free(v.merge_len);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static attn_tokenizer *bpe, *spm;
    if (!bpe) bpe = fixed_bpe(); /* built once: kept for the process's life */
    if (!spm) spm = fixed_spm();
    if (!bpe || !spm) __builtin_trap();
    if (size == 0) return 0;
    switch (data[0] % 4) {
    case 0: exercise(bpe, data + 1, size - 1, 1); break;
    case 1: exercise(spm, data + 1, size - 1, 0); break;
    default: hostile(data + 1, size - 1, data[0] % 4 == 2); break;
    }
    return 0;
}
