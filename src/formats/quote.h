/*
 * quote.h — names read from files (tensor names, metadata keys, config
 * values) as printable text for messages, so that a hostile file cannot put
 * control bytes or a megabyte of name into a message.  The bottom of
 * src/formats/: every reader of a model file, and the tokenizers and the
 * decoder above them, quote with it.
 */
#ifndef ATTN_FORMATS_QUOTE_H
#define ATTN_FORMATS_QUOTE_H

#include "base/base.h"

/* Writes at most 48 bytes of name into buf as printable text for a
 * message: bytes outside ASCII's printable range as \xNN, a longer name cut
 * with "...".  Returns buf. */
const char *attn__quote(const void *name, uint64_t len, char *buf, size_t cap);

#endif /* ATTN_FORMATS_QUOTE_H */
