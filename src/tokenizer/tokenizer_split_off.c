/*
 * tokenizer_split_off.c — the pre-tokenizer in a build without PCRE2
 * (libpcre2-dev): byte-level BPE vocabularies are refused with a message
 * saying so; SentencePiece-style ones, which need no pre-tokenizer, work.
 */
#include "tokenizer/tokenizer_split.h"

attn_status attn__tok_splitter_new(const char *name, void **splitter) {
    *splitter = NULL;
    return attn__fail(ATTN_ERR_UNSUPPORTED, "tokenizer.ggml.pre '%s': this libattn_model was built without PCRE2 "
                      "(Debian: libpcre2-dev), which byte-level BPE needs to split text", name);
}

void attn__tok_splitter_free(void *splitter) { (void)splitter; }

attn_status attn__tok_split_encode(const attn_tokenizer *t, const uint8_t *text, size_t len, tok_ids *out) {
    (void)t, (void)text, (void)len, (void)out;
    return attn__fail(ATTN_ERR_UNSUPPORTED, "tokenizer: built without PCRE2");
}
