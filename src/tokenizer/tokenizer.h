/*
 * tokenizer.h — what tokenizer.c (a GGUF's vocabulary as a tokenizer,
 * encoding, decoding) offers the tokenizer.json reader above it.
 */
#ifndef ATTN_TOKENIZER_TOKENIZER_H
#define ATTN_TOKENIZER_TOKENIZER_H

#include "tokenizer/tokenizer_vocab.h"

/* The last builder (tokenizer_vocab.h): the byte tokens, the pre-tokenizer
 * (BPE), the special tokens; t->bos_id etc., t->model_unk_id and
 * t->fuse_unk set before it. */
attn_status attn__tok_finish(attn_tokenizer *t);

#endif /* ATTN_TOKENIZER_TOKENIZER_H */
