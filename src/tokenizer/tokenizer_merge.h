/*
 * tokenizer_merge.h — one piece of text into ids by pairwise merges
 * (tokenizer_merge.c), above the vocabulary's tables (tokenizer_vocab.h).
 */
#ifndef ATTN_TOKENIZER_TOKENIZER_MERGE_H
#define ATTN_TOKENIZER_TOKENIZER_MERGE_H

#include "tokenizer/tokenizer_vocab.h"

/* Appends the ids of text[0..len) (no special tokens in it) merged the way
 * t->kind merges: BPE on the bytes of one pre-tokenized piece, SPM on a
 * span of text between special tokens. */
attn_status attn__tok_merge_bpe(const attn_tokenizer *t, const uint8_t *text, size_t len, tok_ids *out);
attn_status attn__tok_merge_spm(const attn_tokenizer *t, const uint8_t *text, size_t len, tok_ids *out);

#endif /* ATTN_TOKENIZER_TOKENIZER_MERGE_H */
