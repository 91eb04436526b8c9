/*
 * tokenizer_split.h — byte-level BPE's pre-tokenizer: text cut into pieces
 * by the model's pattern, each merged (tokenizer_split.c with PCRE2,
 * tokenizer_split_off.c without), above the merges (tokenizer_merge.h).
 */
#ifndef ATTN_TOKENIZER_TOKENIZER_SPLIT_H
#define ATTN_TOKENIZER_TOKENIZER_SPLIT_H

#include "tokenizer/tokenizer_vocab.h"

/* The pre-tokenizer called name ("qwen2"), compiled into *splitter;
 * ATTN_ERR_UNSUPPORTED for a name it does not know, or in a build without
 * PCRE2. */
attn_status attn__tok_splitter_new(const char *name, void **splitter);
void attn__tok_splitter_free(void *splitter);
/* Cuts text[0..len) into pieces (the pattern's matches and the gaps between
 * them, which only invalid UTF-8 leaves) and BPE-merges each into out. */
attn_status attn__tok_split_encode(const attn_tokenizer *t, const uint8_t *text, size_t len, tok_ids *out);

#endif /* ATTN_TOKENIZER_TOKENIZER_SPLIT_H */
