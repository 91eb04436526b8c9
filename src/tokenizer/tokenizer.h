/*
 * tokenizer.h — what the tokenizer's files share (libattn_model):
 * tokenizer.c builds it from a GGUF, matches special tokens and decodes;
 * tokenizer_merge.c merges one piece of text into ids (BPE by merge rank,
 * SentencePiece-style by vocabulary position); tokenizer_split.c cuts text
 * into pieces with the pre-tokenizer's PCRE2 pattern (tokenizer_split_off.c
 * in a build without PCRE2).
 *
 * Strings: every token has its piece (as the GGUF spells it) and its key
 * (the string merges and lookups use).  They differ only where the
 * reference respells a token: a byte-level token holding a character
 * outside the byte alphabet is keyed by its UTF-8 bytes spelled in that
 * alphabet; a Gemma token of blanks ("  ") by as many U+2581.
 */
#ifndef ATTN_TOKENIZER_TOKENIZER_H
#define ATTN_TOKENIZER_TOKENIZER_H

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
    int32_t byte_token[256]; /* BPE: each byte's letter; SPM: <0xNN>, or -1 */
    tok_bucket specials[256];
    int32_t *special_ids;    /* the buckets' storage                        */
    int32_t bos_id, eos_id, pad_id, unk_id;
    int add_bos;
    char pre[32];
    void *splitter;          /* BPE: the compiled pre-tokenizer (tokenizer_split.c) */
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
 *   attn__tok_finish        the byte tokens, the pre-tokenizer (BPE), the
 *                           special tokens; t->bos_id etc. set before it
 * `what` names the source in messages ("tokenizer.ggml.tokens"); each
 * refusal says which token or merge and why.  On failure the caller frees
 * t with attn_tokenizer_free. */
attn_status attn__tok_vocab_begin(attn_tokenizer *t, int64_t n, uint64_t piece_bytes, const char *what);
attn_status attn__tok_vocab_add(attn_tokenizer *t, int64_t i, const char *piece, size_t len, int type,
                                const char *what);
void attn__tok_vocab_end(attn_tokenizer *t);
attn_status attn__tok_merges_begin(attn_tokenizer *t, int64_t n, const char *what);
attn_status attn__tok_merge_add(attn_tokenizer *t, int64_t rank, const char *left, size_t llen, const char *right,
                                size_t rlen, const char *what);
attn_status attn__tok_finish(attn_tokenizer *t, const char *what);

/* tokenizer.json (and tokenizer_config.json, NULL when there is none)
 * from memory (tokenizer_json.c). */
attn_status attn__tokenizer_from_json_config(const char *json, size_t size, const char *config, size_t config_size,
                                             attn_tokenizer **out);

/* A growing list of ids. */
typedef struct tok_ids {
    int32_t *ids;
    size_t n, cap;
} tok_ids;
attn_status attn__tok_push(tok_ids *out, int32_t id);

/* Appends the ids of text[0..len) (no special tokens in it) merged the way
 * t->kind merges: BPE on the bytes of one pre-tokenized piece, SPM on a
 * span of text between special tokens. */
attn_status attn__tok_merge_bpe(const attn_tokenizer *t, const uint8_t *text, size_t len, tok_ids *out);
attn_status attn__tok_merge_spm(const attn_tokenizer *t, const uint8_t *text, size_t len, tok_ids *out);

/* The pre-tokenizers' patterns by name (tokenizer.ggml.pre; tokenizer.json's
 * Split pattern is matched against them), ending with {NULL, NULL}. */
typedef struct attn__tok_pre {
    const char *name, *pattern;
} attn__tok_pre;
extern const attn__tok_pre attn__tok_pre_tokenizers[];

/* The pre-tokenizer called name ("qwen2"), compiled into *splitter;
 * ATTN_ERR_UNSUPPORTED for a name it does not know, or in a build without
 * PCRE2. */
attn_status attn__tok_splitter_new(const char *name, void **splitter);
void attn__tok_splitter_free(void *splitter);
/* Cuts text[0..len) into pieces (the pattern's matches and the gaps between
 * them, which only invalid UTF-8 leaves) and BPE-merges each into out. */
attn_status attn__tok_split_encode(const attn_tokenizer *t, const uint8_t *text, size_t len, tok_ids *out);

/* UTF-8: the length of the valid sequence at s[0..n) (1..4), or 0 when
 * s starts with an invalid one; *cp gets the code point. */
size_t attn__utf8_next(const uint8_t *s, size_t n, uint32_t *cp);

#endif /* ATTN_TOKENIZER_TOKENIZER_H */
