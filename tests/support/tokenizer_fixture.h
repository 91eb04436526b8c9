/*
 * tokenizer_fixture.h — a tokenizer against a reference fixture of
 * tests/fixtures/tokenizer/ (scripts/models/make_tokenizer_fixtures.py's
 * format: per case its mode, the text's hex, the reference's ids and its
 * decode(ids, skip_special_tokens=True) in hex), and the skip the
 * tokenizer tests share on a build without PCRE2.
 */
#ifndef ATTN_TEST_TOKENIZER_FIXTURE_H
#define ATTN_TEST_TOKENIZER_FIXTURE_H

#include "attn_tokenizer.h"

#include <stddef.h>

/* Encodes every text of fixture with t (special tokens read as text for
 * "nospecial" cases), requires the reference's ids, then decodes them
 * (special tokens skipped, invalid UTF-8 replaced) and requires the
 * reference's text; prints each difference and a summary line under name.
 * Fails the test (cmocka) when the file is missing or holds no case, or
 * when any case differs. */
void tok_fixture_check(const attn_tokenizer *t, const char *name, const char *fixture);

/* Skips the running test (with the library's message) when st says this
 * build has no PCRE2, which byte-level BPE vocabularies need. */
void tok_skip_without_pcre2(attn_status st);

#endif /* ATTN_TEST_TOKENIZER_FIXTURE_H */
