/*
 * tokenizer_vocab.h — the tokenizer itself, as every file of src/tokenizer/
 * reads it, and the builders that fill it (tokenizer_vocab.c, the bottom of
 * the folder).  Above it: tokenizer_merge.c merges one piece of text into
 * ids (BPE by merge rank, SentencePiece-style by vocabulary position);
 * tokenizer_split.c cuts text into pieces with the pre-tokenizer's PCRE2
 * pattern (tokenizer_split_off.c in a build without PCRE2); tokenizer.c
 * builds a tokenizer from a GGUF, matches special tokens, encodes and
 * decodes; tokenizer_json.c builds one from tokenizer.json.
 *
 * Strings: every token has its piece (as the GGUF spells it) and its key
 * (the string merges and lookups use).  They differ only where the
 * reference respells a token: a byte-level token holding a character
 * outside the byte alphabet is keyed by its UTF-8 bytes spelled in that
 * alphabet; a Gemma token of blanks ("  ") by as many U+2581.
 */
#ifndef ATTN_TOKENIZER_TOKENIZER_VOCAB_H
#define ATTN_TOKENIZER_TOKENIZER_VOCAB_H

#include "attn_tokenizer.h"
#include "base/base.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A merge of two adjacent ids (BPE): its rank (lower merges first) and the
 * id it makes.  Empty slots have rank -1. */
typedef struct tok_merge {
    uint64_t pair; /* (left << 32) | right */
    int32_t rank, merged;
} tok_merge;

/* The special tokens whose text starts with one byte, longest first. */
typedef struct tok_bucket {
    int32_t *ids;
    uint32_t count;
} tok_bucket;

/* An added token's flags (tokenizer.json's added_tokens; a GGUF's have
 * none): whitespace around it is taken into its match (lstrip: on its
 * left, rstrip: on its right), and it is matched in the normalized text,
 * after the tokens without the flag (normalized). */
enum { TOK_LSTRIP = 1, TOK_RSTRIP = 2, TOK_NORMALIZED = 4 };

struct attn_tokenizer {
    attn_tokenizer_kind kind;
    int64_t n_tokens;
    char *strings;           /* pieces and keys, each NUL-terminated        */
    size_t strings_size;
    uint32_t *piece_off, *piece_len, *key_off, *key_len; /* [n_tokens]    */
    uint8_t *type;           /* [n_tokens] attn_token_type                  */
    int32_t *lookup;         /* key -> id, open addressing, -1 empty        */
    uint64_t lookup_mask;
    tok_merge *merges;       /* BPE: (left, right) -> rank, merged          */
    uint64_t merge_mask;
    int64_t n_merges;
    int32_t byte_token[256]; /* BPE: each byte's letter; SPM: <0xNN>; or -1 */
    /* What the merge model makes of what it has no token for (the
     * reference's BPE model's unk_token and fuse_unk): BPE a byte whose
     * letter is not in the vocabulary, SPM a character without a token or
     * byte tokens.  -1: dropped (BPE: a GGUF's, and tokenizer.json's with
     * no model.unk_token), before the merges, so that its neighbours may
     * merge.  fuse_unk: consecutive ones make one. */
    int32_t model_unk_id;
    bool fuse_unk;
    /* Special tokens: [0] matched in the raw text, [1] (TOK_NORMALIZED) in
     * each normalized span between those. */
    tok_bucket specials[2][256];
    int32_t *special_ids;    /* the buckets' storage                        */
    uint8_t *added_flags;    /* [n_tokens] TOK_*, or NULL: none             */
    int32_t bos_id, eos_id, pad_id, unk_id;
    int add_bos;
    char pre[32];
    void *splitter;          /* BPE: the compiled pre-tokenizer (tokenizer_split.h) */
    size_t memory_bytes;
};

static inline const char *tok_key(const attn_tokenizer *t, int32_t id) { return t->strings + t->key_off[id]; }

/* The id whose key is key[0..len), or -1. */
int32_t attn__tok_lookup(const attn_tokenizer *t, const char *key, size_t len);

/* Building, shared by the GGUF reader (tokenizer.c) and the tokenizer.json
 * reader (tokenizer_json.c), so that one vocabulary makes one tokenizer
 * whichever file it came from.  The caller sets t->kind (and t->pre for
 * BPE) first, then:
 *   attn__tok_vocab_begin   room for n tokens whose pieces total piece_bytes
 *   attn__tok_vocab_add     token i's piece and type, for i = 0 .. n-1 in
 *                           order (a key given twice goes to the later id)
 *   attn__tok_vocab_end     gives back the unused room
 *   attn__tok_merges_begin, attn__tok_merge_add   BPE: the merge of rank
 *                           0 .. n-1, each naming two tokens whose
 *                           concatenation is a token
 * and last attn__tok_finish (tokenizer.h).  `what` names the source in
 * messages ("tokenizer.ggml.tokens"); each refusal says which token or
 * merge and why.  On failure the caller frees t with attn_tokenizer_free. */
attn_status attn__tok_vocab_begin(attn_tokenizer *t, int64_t n, uint64_t piece_bytes, const char *what);
attn_status attn__tok_vocab_add(attn_tokenizer *t, int64_t i, const char *piece, size_t len, int type,
                                const char *what);
void attn__tok_vocab_end(attn_tokenizer *t);
attn_status attn__tok_merges_begin(attn_tokenizer *t, int64_t n, const char *what);
attn_status attn__tok_merge_add(attn_tokenizer *t, int64_t rank, const char *left, size_t llen, const char *right,
                                size_t rlen, const char *what);

/* A growing list of ids. */
typedef struct tok_ids {
    int32_t *ids;
    size_t n, cap;
} tok_ids;
attn_status attn__tok_push(tok_ids *out, int32_t id);

/* The pre-tokenizers' patterns by name (tokenizer.ggml.pre; tokenizer.json's
 * Split pattern is matched against them), ending with {NULL, NULL}. */
typedef struct attn__tok_pre {
    const char *name, *pattern;
} attn__tok_pre;
extern const attn__tok_pre attn__tok_pre_tokenizers[];

/* UTF-8: the length of the valid sequence at s[0..n) (1..4), or 0 when
 * s starts with an invalid one; *cp gets the code point. */
size_t attn__utf8_next(const uint8_t *s, size_t n, uint32_t *cp);

/* cp (a valid code point) as UTF-8 into out[0..4): its length. */
static inline size_t tok_utf8_put(uint32_t cp, char *out) {
    if (cp < 0x80) return out[0] = (char)cp, 1;
    if (cp < 0x800) return out[0] = (char)(0xC0 | cp >> 6), out[1] = (char)(0x80 | (cp & 0x3F)), 2;
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | cp >> 12);
        out[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | cp >> 18);
    out[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    out[2] = (char)(0x80 | (cp >> 6 & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* The byte alphabet of byte-level BPE, GPT-2's: the printable bytes
 * ('!'..'~', U+00A1..U+00AC, U+00AE..U+00FF) stand for themselves; the
 * other 68, in order, for U+0100..U+0143: 0x00..0x20 -> U+0100..,
 * 0x7F..0xA0 -> U+0121.., 0xAD -> U+0143.  The letter of byte b: */
static inline uint32_t tok_byte_letter(uint8_t b) {
    if (b <= 0x20) return 0x100u + b;
    if (b >= 0x7F && b <= 0xA0) return 0x121u + (b - 0x7Fu);
    if (b == 0xAD) return 0x143;
    return b;
}

/* The byte a letter of the alphabet stands for, or -1. */
static inline int tok_letter_byte(uint32_t cp) {
    if (cp < 0x100) return tok_byte_letter((uint8_t)cp) == cp ? (int)cp : -1;
    if (cp <= 0x120) return (int)(cp - 0x100);
    if (cp <= 0x142) return (int)(0x7F + cp - 0x121);
    return cp == 0x143 ? 0xAD : -1;
}

#endif /* ATTN_TOKENIZER_TOKENIZER_VOCAB_H */
