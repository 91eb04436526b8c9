/*
 * tokenizer.c — a GGUF's vocabulary as a tokenizer (include/attn_tokenizer.h):
 * building it (with tokenizer_vocab.c's builders), special tokens found in
 * the text before anything else, encoding's outer loop, decoding.
 *
 * What each part follows is Hugging Face transformers' tokenizer built from
 * the same GGUF (integrations/gguf: GPT2Tokenizer for "gpt2",
 * GemmaTokenizer for Gemma's "llama"), since that is what the fixtures of
 * tests/fixtures/tokenizer/ were made with; docs/tokenizers.md has the
 * details and where llama.cpp differs.
 */
#include "tokenizer/tokenizer.h"

#include "tokenizer/tokenizer_merge.h"
#include "tokenizer/tokenizer_split.h"

#include <stdlib.h>

/* ------------------------------------------------------ from the GGUF */

/* An optional integer key read as an id: -1 when absent. */
static attn_status read_id(const attn_gguf *g, const char *key, int64_t n_tokens, int32_t *id) {
    *id = -1;
    if (attn_gguf_key_index(g, key) < 0) return ATTN_OK;
    int64_t v;
    attn_status st = attn_gguf_get_i64(g, key, &v);
    if (st != ATTN_OK) return st;
    if (v < 0 || v >= n_tokens)
        return attn__fail(ATTN_ERR_FORMAT, "%s is %lld, outside the vocabulary of %lld tokens", key, (long long)v,
                          (long long)n_tokens);
    *id = (int32_t)v;
    return ATTN_OK;
}

static attn_status read_vocabulary(attn_tokenizer *t, const attn_gguf *g) {
    attn_gguf_value tokens, types;
    attn_status st = attn_gguf_get_array(g, "tokenizer.ggml.tokens", ATTN_GGUF_VALUE_STRING, &tokens);
    if (st != ATTN_OK) return st;
    if (tokens.count == 0 || tokens.count > INT32_MAX / 4)
        return attn__fail(ATTN_ERR_FORMAT, "tokenizer.ggml.tokens holds %llu tokens (1 .. %d are read)",
                          (unsigned long long)tokens.count, INT32_MAX / 4);
    const int64_t n = (int64_t)tokens.count;
    bool have_types = attn_gguf_key_index(g, "tokenizer.ggml.token_type") >= 0;
    if (have_types) {
        st = attn_gguf_get_array(g, "tokenizer.ggml.token_type", -1, &types);
        if (st != ATTN_OK) return st;
        if (types.count != tokens.count)
            return attn__fail(ATTN_ERR_FORMAT, "tokenizer.ggml.token_type has %llu entries, tokenizer.ggml.tokens %lld",
                              (unsigned long long)types.count, (long long)n);
    }
    if ((st = attn__tok_vocab_begin(t, n, tokens.size, "tokenizer.ggml.tokens")) != ATTN_OK) return st;
    uint64_t cursor = 0;
    for (int64_t i = 0; i < n; i++) {
        attn_gguf_value s;
        st = attn_gguf_array_next(&tokens, &cursor, &s);
        if (st != ATTN_OK) return st;
        int64_t type = ATTN_TOKEN_NORMAL;
        if (have_types) {
            st = attn_gguf_array_int(&types, (uint64_t)i, &type);
            if (st != ATTN_OK) return attn__fail(st, "tokenizer.ggml.token_type[%lld]: %s", (long long)i,
                                                 attn_last_error());
            if (type < ATTN_TOKEN_NORMAL || type > ATTN_TOKEN_BYTE)
                return attn__fail(ATTN_ERR_FORMAT, "tokenizer.ggml.token_type[%lld] is %lld (1 .. 6 are types)",
                                  (long long)i, (long long)type);
        }
        if (s.size > UINT32_MAX / 8)
            return attn__fail(ATTN_ERR_FORMAT, "tokenizer.ggml.tokens: more than 2 GB of pieces by token %lld",
                              (long long)i);
        st = attn__tok_vocab_add(t, i, s.data, (size_t)s.size, (int)type, "tokenizer.ggml.tokens");
        if (st != ATTN_OK) return st;
    }
    attn__tok_vocab_end(t);
    return ATTN_OK;
}

static attn_status read_merges(attn_tokenizer *t, const attn_gguf *g) {
    attn_gguf_value merges;
    attn_status st = attn_gguf_get_array(g, "tokenizer.ggml.merges", ATTN_GGUF_VALUE_STRING, &merges);
    if (st != ATTN_OK) return st;
    if (merges.count > INT32_MAX / 4)
        return attn__fail(ATTN_ERR_FORMAT, "tokenizer.ggml.merges holds %llu merges (at most %d are read)",
                          (unsigned long long)merges.count, INT32_MAX / 4);
    if ((st = attn__tok_merges_begin(t, (int64_t)merges.count, "tokenizer.ggml.merges")) != ATTN_OK) return st;
    uint64_t cursor = 0;
    for (int64_t r = 0; r < t->n_merges && st == ATTN_OK; r++) {
        attn_gguf_value s;
        st = attn_gguf_array_next(&merges, &cursor, &s);
        if (st != ATTN_OK) break;
        const char *m = s.data, *space = memchr(m, ' ', (size_t)s.size);
        /* "left right": exactly one space (the byte alphabet spells a
         * space as Ġ, so no token holds one). */
        if (!space || space == m || space == m + s.size - 1 || memchr(space + 1, ' ', (size_t)(m + s.size - space - 1))) {
            st = attn__fail(ATTN_ERR_FORMAT, "tokenizer.ggml.merges[%lld] '%.*s' is not two tokens and one space",
                            (long long)r, (int)(s.size > 64 ? 64 : s.size), m);
            break;
        }
        size_t llen = (size_t)(space - m);
        st = attn__tok_merge_add(t, r, m, llen, space + 1, (size_t)s.size - llen - 1, "tokenizer.ggml.merges");
    }
    return st;
}

/* Special tokens, bucketed by first byte, longest first (tokenizer.h). */
static bool is_special(const attn_tokenizer *t, int32_t id) {
    const char *piece = t->strings + t->piece_off[id];
    if (t->piece_len[id] == 0) return false;
    /* A special is matched by its own text, and found as the id its text
     * looks up (the reference adds it by content): a CONTROL token
     * respelled for the byte alphabet is no special there, nor is a
     * USER_DEFINED one whose text is no key (Gemma's blank runs). */
    if (t->type[id] == ATTN_TOKEN_CONTROL)
        return t->kind == ATTN_TOKENIZER_SPM || t->key_off[id] == t->piece_off[id];
    if (t->type[id] == ATTN_TOKEN_USER_DEFINED) return attn__tok_lookup(t, piece, t->piece_len[id]) >= 0;
    return false;
}

static int u64_ascending(const void *pa, const void *pb) {
    uint64_t a = *(const uint64_t *)pa, b = *(const uint64_t *)pb;
    return (a > b) - (a < b);
}

static int tok_flags(const attn_tokenizer *t, int32_t id) { return t->added_flags ? t->added_flags[id] : 0; }

static attn_status collect_specials(attn_tokenizer *t) {
    size_t count = 0;
    uint32_t per_byte[2][256] = {{0}};
    for (int32_t id = 0; id < t->n_tokens; id++)
        if (is_special(t, id)) {
            count++;
            per_byte[!!(tok_flags(t, id) & TOK_NORMALIZED)][(uint8_t)t->strings[t->piece_off[id]]]++;
        }
    t->special_ids = malloc((count ? count : 1) * sizeof *t->special_ids);
    if (!t->special_ids) return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "tokenizer: no memory for %zu special tokens", count);
    t->memory_bytes += count * sizeof *t->special_ids;
    size_t at = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int b = 0; b < 256; b++) {
            t->specials[pass][b].ids = t->special_ids + at;
            at += per_byte[pass][b];
        }
    for (int32_t id = 0; id < t->n_tokens; id++)
        if (is_special(t, id)) {
            tok_bucket *bucket = &t->specials[!!(tok_flags(t, id) & TOK_NORMALIZED)][(uint8_t)t->strings[t->piece_off[id]]];
            bucket->ids[bucket->count++] = id;
        }
    /* Longest first (ties by id), sorted as (UINT32_MAX - length, id). */
    uint64_t *order = malloc((count ? count : 1) * sizeof *order);
    if (!order) return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "tokenizer: no memory for %zu special tokens", count);
    for (int pass = 0; pass < 2; pass++)
        for (int b = 0; b < 256; b++) {
            tok_bucket *bucket = &t->specials[pass][b];
            for (uint32_t i = 0; i < bucket->count; i++)
                order[i] = (uint64_t)(UINT32_MAX - t->piece_len[bucket->ids[i]]) << 32 | (uint32_t)bucket->ids[i];
            qsort(order, bucket->count, sizeof *order, u64_ascending);
            for (uint32_t i = 0; i < bucket->count; i++) bucket->ids[i] = (int32_t)(uint32_t)order[i];
        }
    free(order);
    return ATTN_OK;
}

/* The kind tokenizer.ggml.model names, with the architectures whose
 * reference behaviour this library reproduces. */
static attn_status read_kind(const attn_gguf *g, attn_tokenizer_kind *kind) {
    const char *model, *arch = "";
    size_t len, arch_len = 0;
    attn_status st = attn_gguf_get_string(g, "tokenizer.ggml.model", &model, &len);
    if (st != ATTN_OK) return st;
    if (len == 4 && memcmp(model, "gpt2", 4) == 0) {
        *kind = ATTN_TOKENIZER_BPE;
        return ATTN_OK;
    }
    if (len == 5 && memcmp(model, "llama", 5) == 0) {
        if (attn_gguf_key_index(g, "general.architecture") >= 0 &&
            attn_gguf_get_string(g, "general.architecture", &arch, &arch_len) != ATTN_OK)
            return attn__fail(ATTN_ERR_FORMAT, "general.architecture: %s", attn_last_error());
        /* transformers builds Gemma's SentencePiece vocabulary its own way
         * (blank runs respelled, merges in vocabulary order); other
         * "llama" vocabularies differ in prefix spaces and merge order. */
        static const char *const gemmas[] = {"gemma", "gemma2", "gemma3"};
        for (size_t i = 0; i < sizeof gemmas / sizeof gemmas[0]; i++)
            if (arch_len == strlen(gemmas[i]) && memcmp(arch, gemmas[i], arch_len) == 0) {
                *kind = ATTN_TOKENIZER_SPM;
                return ATTN_OK;
            }
        return attn__fail(ATTN_ERR_UNSUPPORTED, "tokenizer.ggml.model 'llama' of architecture '%.*s': only Gemma's "
                          "(gemma, gemma2, gemma3) SentencePiece vocabularies are implemented", (int)arch_len, arch);
    }
    return attn__fail(ATTN_ERR_UNSUPPORTED, "tokenizer.ggml.model '%.*s': this library implements 'gpt2' (byte-level "
                      "BPE) and 'llama' (Gemma's SentencePiece vocabulary)", (int)(len > 64 ? 64 : len), model);
}

static attn_status build(attn_tokenizer *t, const attn_gguf *g) {
    attn_status st = read_kind(g, &t->kind);
    if (st == ATTN_OK) st = read_vocabulary(t, g);
    if (st != ATTN_OK) return st;
    const int64_t n = t->n_tokens;
    if ((st = read_id(g, "tokenizer.ggml.bos_token_id", n, &t->bos_id)) != ATTN_OK ||
        (st = read_id(g, "tokenizer.ggml.eos_token_id", n, &t->eos_id)) != ATTN_OK ||
        (st = read_id(g, "tokenizer.ggml.padding_token_id", n, &t->pad_id)) != ATTN_OK ||
        (st = read_id(g, "tokenizer.ggml.unknown_token_id", n, &t->unk_id)) != ATTN_OK)
        return st;
    /* A SentencePiece vocabulary that does not say adds BOS (llama.cpp's
     * default, and transformers' for these files); GPT-2's does not. */
    t->add_bos = t->kind == ATTN_TOKENIZER_SPM;
    if (attn_gguf_key_index(g, "tokenizer.ggml.add_bos_token") >= 0 &&
        (st = attn_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &t->add_bos)) != ATTN_OK)
        return st;
    if (t->add_bos && t->bos_id < 0)
        return attn__fail(ATTN_ERR_FORMAT, "tokenizer.ggml.add_bos_token is set but tokenizer.ggml.bos_token_id is missing");
    if (t->kind == ATTN_TOKENIZER_BPE) {
        const char *pre;
        size_t pre_len;
        if ((st = attn_gguf_get_string(g, "tokenizer.ggml.pre", &pre, &pre_len)) != ATTN_OK) return st;
        snprintf(t->pre, sizeof t->pre, "%.*s", (int)(pre_len < sizeof t->pre ? pre_len : sizeof t->pre - 1), pre);
        if (pre_len >= sizeof t->pre || strlen(t->pre) != pre_len)
            return attn__fail(ATTN_ERR_UNSUPPORTED, "tokenizer.ggml.pre '%s...': no such pre-tokenizer", t->pre);
        if ((st = read_merges(t, g)) != ATTN_OK) return st;
    }
    /* The reference's models: GPT2Tokenizer's BPE has no unk_token (a byte
     * whose letter the vocabulary lacks is dropped, whatever
     * tokenizer.ggml.unknown_token_id says); GemmaTokenizer's has <unk>,
     * fused. */
    if (t->kind == ATTN_TOKENIZER_SPM && t->unk_id < 0) t->unk_id = attn__tok_lookup(t, "<unk>", 5);
    t->model_unk_id = t->kind == ATTN_TOKENIZER_SPM ? t->unk_id : -1;
    t->fuse_unk = true;
    return attn__tok_finish(t);
}

attn_status attn__tok_finish(attn_tokenizer *t) {
    if (t->kind == ATTN_TOKENIZER_BPE) {
        /* A byte whose letter is not in the vocabulary (SmolLM2 lacks 21)
         * becomes t->model_unk_id or nothing (tokenizer_merge.c), as in
         * the reference's BPE model. */
        for (int b = 0; b < 256; b++) {
            char letter[4];
            size_t len = tok_utf8_put(tok_byte_letter((uint8_t)b), letter);
            t->byte_token[b] = attn__tok_lookup(t, letter, len);
        }
        attn_status st = attn__tok_splitter_new(t->pre, &t->splitter);
        if (st != ATTN_OK) return st;
    } else {
        for (int b = 0; b < 256; b++) {
            char name[8];
            snprintf(name, sizeof name, "<0x%02X>", b);
            t->byte_token[b] = attn__tok_lookup(t, name, 6);
        }
    }
    t->memory_bytes += sizeof *t;
    return collect_specials(t);
}

attn_status attn_tokenizer_from_gguf(const attn_gguf *g, attn_tokenizer **out) {
    if (!out) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_tokenizer_from_gguf: out is NULL");
    *out = NULL;
    if (!g) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_tokenizer_from_gguf: the GGUF is NULL");
    attn_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "tokenizer: no memory");
    attn_status st = build(t, g);
    if (st != ATTN_OK) {
        attn_tokenizer_free(t);
        return st;
    }
    *out = t;
    return ATTN_OK;
}

void attn_tokenizer_free(attn_tokenizer *t) {
    if (!t) return;
    attn__tok_splitter_free(t->splitter);
    free(t->strings);
    free(t->piece_off);
    free(t->piece_len);
    free(t->key_off);
    free(t->key_len);
    free(t->type);
    free(t->lookup);
    free(t->merges);
    free(t->special_ids);
    free(t->added_flags);
    free(t);
}

void attn_tokenizer_describe(const attn_tokenizer *t, attn_tokenizer_info *info) {
    if (!info) return;
    memset(info, 0, sizeof *info);
    if (!t) return;
    info->kind = t->kind;
    info->vocab_size = t->n_tokens;
    info->n_merges = t->n_merges;
    info->bos_id = t->bos_id;
    info->eos_id = t->eos_id;
    info->pad_id = t->pad_id;
    info->unk_id = t->unk_id;
    info->add_bos = t->add_bos;
    info->pre = t->pre;
    info->memory_bytes = t->memory_bytes;
}

attn_status attn_tokenizer_token(const attn_tokenizer *t, int32_t id, const char **piece, size_t *len,
                                 attn_token_type *type) {
    if (!t) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_tokenizer_token: the tokenizer is NULL");
    if (id < 0 || id >= t->n_tokens)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "token id %d is outside the vocabulary (0 .. %lld)", (int)id,
                          (long long)t->n_tokens - 1);
    if (piece) *piece = t->strings + t->piece_off[id];
    if (len) *len = t->piece_len[id];
    if (type) *type = (attn_token_type)t->type[id];
    return ATTN_OK;
}

int32_t attn_tokenizer_find(const attn_tokenizer *t, const char *piece, size_t len) {
    if (!t || (!piece && len)) return -1;
    /* By piece, not by key: the inverse of attn_tokenizer_token.  Nearly
     * every piece is its own key; the rest (respelled ones) are searched. */
    int32_t id = attn__tok_lookup(t, piece, len);
    if (id >= 0 && t->piece_len[id] == len && memcmp(t->strings + t->piece_off[id], piece, len) == 0) return id;
    for (id = (int32_t)t->n_tokens - 1; id >= 0; id--)
        if (t->piece_len[id] == len && memcmp(t->strings + t->piece_off[id], piece, len) == 0) return id;
    return -1;
}

int attn_tokenizer_end_ids(const attn_tokenizer *t, int32_t ids[ATTN_TOKENIZER_MAX_END_IDS]) {
    if (!t || !ids) return 0;
    attn_tokenizer_info info;
    attn_tokenizer_describe(t, &info);
    int n = 0;
    if (info.eos_id >= 0) ids[n++] = info.eos_id;
    static const char *const pieces[] = {"<|im_end|>", "<|endoftext|>", "<end_of_turn>"};
    for (size_t i = 0; i < sizeof pieces / sizeof pieces[0]; i++) {
        const int32_t id = attn_tokenizer_find(t, pieces[i], strlen(pieces[i]));
        if (id >= 0 && id != info.eos_id) ids[n++] = id;
    }
    return n;
}

/* ------------------------------------------------------------- encoding */

/* The special token of pass (0: raw text, 1: normalized) at
 * text[0..len), longest first, or -1. */
static int32_t special_at(const attn_tokenizer *t, int pass, const uint8_t *text, size_t len, unsigned flags) {
    const tok_bucket *b = &t->specials[pass][text[0]];
    for (uint32_t i = 0; i < b->count; i++) {
        int32_t id = b->ids[i];
        if ((flags & ATTN_ENCODE_SPLIT_SPECIAL) && t->type[id] == ATTN_TOKEN_CONTROL) continue;
        if (t->piece_len[id] <= len && memcmp(t->strings + t->piece_off[id], text, t->piece_len[id]) == 0)
            return attn__tok_lookup(t, t->strings + t->piece_off[id], t->piece_len[id]);
    }
    return -1;
}

/* Unicode's White_Space (the reference's \s, Rust's char::is_whitespace). */
static bool is_white_space(uint32_t cp) {
    return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
           cp == 0x3000;
}

/* How many bytes of white space end s[0..n) (lstrip) or start it (rstrip). */
static size_t white_space_before(const uint8_t *s, size_t n) {
    size_t at = n;
    while (at > 0) {
        size_t begin = at - 1;
        while (begin > 0 && at - begin < 4 && (s[begin] & 0xC0) == 0x80) begin--;
        uint32_t cp;
        if (attn__utf8_next(s + begin, at - begin, &cp) != at - begin || !is_white_space(cp)) break;
        at = begin;
    }
    return n - at;
}

static size_t white_space_after(const uint8_t *s, size_t n) {
    size_t at = 0;
    for (uint32_t cp; at < n;) {
        size_t len = attn__utf8_next(s + at, n - at, &cp);
        if (!len || !is_white_space(cp)) break;
        at += len;
    }
    return at;
}

/* Text without special tokens, normalized: BPE cuts it with the
 * pre-tokenizer, SPM merges it whole. */
static attn_status encode_plain(const attn_tokenizer *t, const uint8_t *text, size_t len, tok_ids *out) {
    if (len == 0) return ATTN_OK;
    if (t->kind == ATTN_TOKENIZER_BPE) return attn__tok_split_encode(t, text, len, out);
    return attn__tok_merge_spm(t, text, len, out);
}

static attn_status encode_span(const attn_tokenizer *t, const uint8_t *text, size_t len, unsigned flags,
                               tok_ids *out);

/* text cut at the special tokens of pass (leftmost, the longest there, as
 * the reference's Aho-Corasick LeftmostLongest finds them; an lstrip or
 * rstrip token takes the white space beside it, never past the previous
 * token), each token pushed, the text between encoded: pass 0's as a raw
 * span (encode_span), pass 1's as normalized text (encode_plain). */
static attn_status encode_specials(const attn_tokenizer *t, int pass, const uint8_t *s, size_t len, unsigned flags,
                                   tok_ids *out) {
    attn_status st = ATTN_OK;
    size_t span = 0; /* where the text since the last special token starts */
    for (size_t i = 0; i < len && st == ATTN_OK;) {
        int32_t id = special_at(t, pass, s + i, len - i, flags);
        if (id < 0) {
            i++;
            continue;
        }
        size_t start = i, end = i + t->key_len[id]; /* the special's text is its key */
        if (tok_flags(t, id) & TOK_LSTRIP) start -= white_space_before(s + span, start - span);
        if (tok_flags(t, id) & TOK_RSTRIP) end += white_space_after(s + end, len - end);
        st = pass ? encode_plain(t, s + span, start - span, out) : encode_span(t, s + span, start - span, flags, out);
        if (st == ATTN_OK) st = attn__tok_push(out, id);
        i = span = end;
    }
    if (st == ATTN_OK)
        st = pass ? encode_plain(t, s + span, len - span, out) : encode_span(t, s + span, len - span, flags, out);
    return st;
}

/* A span without raw special tokens, normalized (SPM writes each space as
 * U+2581, the reference's normalizer; BPE has no normalizer), then cut at
 * the normalized special tokens. */
static attn_status encode_span(const attn_tokenizer *t, const uint8_t *text, size_t len, unsigned flags,
                               tok_ids *out) {
    if (len == 0) return ATTN_OK;
    if (t->kind == ATTN_TOKENIZER_BPE) return encode_specials(t, 1, text, len, flags, out);
    if (len > SIZE_MAX / 3) return attn__fail(ATTN_ERR_OVERFLOW, "tokenizer: a text of %zu bytes is too long", len);
    uint8_t *normal = malloc(3 * len);
    if (!normal) return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "tokenizer: no memory for %zu bytes of text", 3 * len);
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') n += tok_utf8_put(0x2581, (char *)normal + n);
        else normal[n++] = text[i];
    }
    attn_status st = encode_specials(t, 1, normal, n, flags, out);
    free(normal);
    return st;
}

attn_status attn_tokenizer_encode(const attn_tokenizer *t, const char *text, size_t len, unsigned flags, int32_t *ids,
                                  size_t capacity, size_t *n_ids) {
    if (!t || !n_ids || (!text && len) || (!ids && capacity))
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_tokenizer_encode: %s is NULL",
                          !t ? "the tokenizer" : !n_ids ? "n_ids" : !ids && capacity ? "ids" : "text");
    *n_ids = 0;
    tok_ids out = {0};
    attn_status st = ATTN_OK;
    if (t->add_bos && !(flags & ATTN_ENCODE_NO_BOS)) st = attn__tok_push(&out, t->bos_id);
    if (st == ATTN_OK) st = encode_specials(t, 0, (const uint8_t *)text, len, flags, &out);
    if (st == ATTN_OK) {
        *n_ids = out.n;
        if (ids || capacity) {
            if (capacity < out.n)
                st = attn__fail(ATTN_ERR_SHAPE, "attn_tokenizer_encode: the text needs %zu ids, the buffer holds %zu",
                                out.n, capacity);
            else if (out.n)
                memcpy(ids, out.ids, out.n * sizeof *ids);
        }
    }
    free(out.ids);
    return st;
}

/* ------------------------------------------------------------- decoding */

typedef struct tok_bytes {
    char *data;
    size_t n, cap;
} tok_bytes;

static attn_status bytes_put(tok_bytes *b, const void *p, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *data = realloc(b->data, cap);
        if (!data) return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "tokenizer: no memory for %zu bytes of text", cap);
        b->data = data;
        b->cap = cap;
    }
    memcpy(b->data + b->n, p, n);
    b->n += n;
    return ATTN_OK;
}

/* The bytes of one token: BPE through the byte alphabet (a character
 * outside it as itself); SPM with U+2581 as a space and <0xNN> as the byte,
 * as the reference's decoders (ByteLevel; Replace, ByteFallback, Fuse). */
static attn_status decode_token(const attn_tokenizer *t, int32_t id, tok_bytes *b) {
    const uint8_t *k = (const uint8_t *)tok_key(t, id);
    const size_t n = t->key_len[id];
    attn_status st = ATTN_OK;
    if (t->kind == ATTN_TOKENIZER_SPM && n == 6 && memcmp(k, "<0x", 3) == 0 && k[5] == '>' &&
        strchr("0123456789ABCDEFabcdef", k[3]) && strchr("0123456789ABCDEFabcdef", k[4])) {
        char hex[3] = {(char)k[3], (char)k[4], 0};
        uint8_t byte = (uint8_t)strtoul(hex, NULL, 16);
        return bytes_put(b, &byte, 1);
    }
    for (size_t i = 0; i < n && st == ATTN_OK;) {
        uint32_t cp;
        size_t len = attn__utf8_next(k + i, n - i, &cp);
        if (len == 0) {
            st = bytes_put(b, k + i, 1);
            i++;
            continue;
        }
        int byte = t->kind == ATTN_TOKENIZER_BPE ? tok_letter_byte(cp) : -1;
        if (byte >= 0) {
            uint8_t c = (uint8_t)byte;
            st = bytes_put(b, &c, 1);
        } else if (t->kind == ATTN_TOKENIZER_SPM && cp == 0x2581) {
            st = bytes_put(b, " ", 1);
        } else {
            st = bytes_put(b, k + i, len);
        }
        i += len;
    }
    return st;
}

/* Invalid UTF-8 replaced: each maximal invalid subsequence (a lead byte
 * with the continuation bytes that fit it, or a lone byte) becomes one
 * U+FFFD, as Python's decode(errors="replace") and Rust's from_utf8_lossy
 * do. */
static attn_status replace_invalid(tok_bytes *b) {
    tok_bytes fixed = {0};
    attn_status st = ATTN_OK;
    const uint8_t *s = (const uint8_t *)b->data;
    for (size_t i = 0; i < b->n && st == ATTN_OK;) {
        uint32_t cp;
        size_t len = attn__utf8_next(s + i, b->n - i, &cp);
        if (len) {
            st = bytes_put(&fixed, s + i, len);
            i += len;
            continue;
        }
        /* How far the invalid sequence's prefix is valid: a lead byte and
         * the continuation bytes its ranges allow. */
        size_t skip = 1;
        uint8_t c = s[i];
        size_t need = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 1;
        for (size_t k = 1; k < need && i + k < b->n; k++) {
            uint8_t x = s[i + k];
            uint8_t lo = 0x80, hi = 0xBF;
            if (k == 1 && c == 0xE0) lo = 0xA0;
            if (k == 1 && c == 0xED) hi = 0x9F;
            if (k == 1 && c == 0xF0) lo = 0x90;
            if (k == 1 && c == 0xF4) hi = 0x8F;
            if (x < lo || x > hi) break;
            skip++;
        }
        st = bytes_put(&fixed, "\xEF\xBF\xBD", 3);
        i += skip;
    }
    if (st == ATTN_OK) {
        free(b->data);
        *b = fixed;
    } else {
        free(fixed.data);
    }
    return st;
}

attn_status attn_tokenizer_decode(const attn_tokenizer *t, const int32_t *ids, size_t n, unsigned flags, char *out,
                                  size_t capacity, size_t *len) {
    if (!t || !len || (!ids && n) || (!out && capacity))
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_tokenizer_decode: %s is NULL",
                          !t ? "the tokenizer" : !len ? "len" : !out && capacity ? "out" : "ids");
    *len = 0;
    tok_bytes b = {0};
    attn_status st = ATTN_OK;
    for (size_t i = 0; i < n && st == ATTN_OK; i++) {
        if (ids[i] < 0 || ids[i] >= t->n_tokens) {
            st = attn__fail(ATTN_ERR_INVALID_ARGUMENT, "ids[%zu] is %d, outside the vocabulary (0 .. %lld)", i,
                            (int)ids[i], (long long)t->n_tokens - 1);
            break;
        }
        if ((flags & ATTN_DECODE_SKIP_SPECIAL) && t->type[ids[i]] == ATTN_TOKEN_CONTROL) continue;
        st = decode_token(t, ids[i], &b);
    }
    if (st == ATTN_OK && (flags & ATTN_DECODE_VALID_UTF8)) st = replace_invalid(&b);
    if (st == ATTN_OK) {
        *len = b.n;
        if (out || capacity) {
            if (capacity < b.n + 1)
                st = attn__fail(ATTN_ERR_SHAPE, "attn_tokenizer_decode: the text needs %zu bytes and its NUL, the "
                                "buffer holds %zu", b.n, capacity);
            else {
                if (b.n) memcpy(out, b.data, b.n);
                out[b.n] = 0;
            }
        }
    }
    free(b.data);
    return st;
}
