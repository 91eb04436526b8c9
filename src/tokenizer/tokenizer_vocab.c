/*
 * tokenizer_vocab.c — the bottom of the tokenizers: a vocabulary's tokens
 * and merges into the tables every tokenizer reads (tokenizer_vocab.h: the
 * builders that the GGUF reader, tokenizer.c, and the tokenizer.json
 * reader, tokenizer_json.c, both call), the string -> id table, UTF-8, and
 * the pre-tokenizers' patterns by name.
 */
#include "tokenizer/tokenizer_vocab.h"

#include <stdlib.h>

/* ----------------------------------------------------------------- UTF-8 */

size_t attn__utf8_next(const uint8_t *s, size_t n, uint32_t *cp) {
    if (n == 0) return 0;
    uint8_t c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    size_t len;
    uint32_t v, min;
    if (c >= 0xC2 && c <= 0xDF) len = 2, v = c & 0x1F, min = 0x80;
    else if (c >= 0xE0 && c <= 0xEF) len = 3, v = c & 0x0F, min = 0x800;
    else if (c >= 0xF0 && c <= 0xF4) len = 4, v = c & 0x07, min = 0x10000;
    else return 0;
    if (n < len) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        v = v << 6 | (s[i] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
    *cp = v;
    return len;
}

/* ------------------------------------------------------ pre-tokenizers */

/* The pre-tokenizers, by tokenizer.ggml.pre.  Qwen2's is its
 * tokenizer.json's Split pattern (transformers' PRETOKENIZE_REGEX for
 * qwen2, llama.cpp's LLAMA_VOCAB_PRE_TYPE_QWEN2): contractions, letters
 * with at most one leading non-letter, single digits, punctuation runs with
 * an optional leading space, newline runs, and blanks (all but the last
 * blank before a non-blank). */
#define GPT2_PATTERN "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"
const attn__tok_pre attn__tok_pre_tokenizers[] = {
    {"qwen2", "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
              "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
    /* GPT-2's, the pattern of tokenizers' ByteLevel(use_regex=true) (and
     * llama.cpp's LLAMA_VOCAB_PRE_TYPE_GPT2): contractions in lower case
     * only, letters, digit runs and punctuation runs each with an optional
     * leading space, then blanks as qwen2's. */
    {"gpt2", GPT2_PATTERN},
    /* SmolLM2's GGUF says "smollm"; the reference (transformers, which has
     * no split for that name) runs GPT2Tokenizer's own ByteLevel, GPT-2's
     * pattern.  llama.cpp isolates every digit first ("\\p{N}" as a pass of
     * its own, as the model's original tokenizer.json's Digits does): the
     * two differ where blanks precede a number character ("a  1": the
     * reference makes " ", " ", "1", llama.cpp "  ", "1"; " ½½": " \xC2",
     * "\xBD", "½" against " ", "½", "½"). */
    {"smollm", GPT2_PATTERN},
    {NULL, NULL},
};

/* -------------------------------------------------------- string -> id */

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 0x100000001b3ull;
    return h;
}

int32_t attn__tok_lookup(const attn_tokenizer *t, const char *key, size_t len) {
    for (uint64_t i = hash_bytes(key, len);; i++) {
        int32_t id = t->lookup[i & t->lookup_mask];
        if (id < 0) return -1;
        if (t->key_len[id] == len && memcmp(tok_key(t, id), key, len) == 0) return id;
    }
}

/* A key given twice goes to the later id, as a Python dict built from the
 * vocabulary (the reference's) keeps the last. */
static void lookup_insert(attn_tokenizer *t, int32_t id) {
    for (uint64_t i = hash_bytes(tok_key(t, id), t->key_len[id]);; i++) {
        int32_t *slot = &t->lookup[i & t->lookup_mask];
        if (*slot < 0 || (t->key_len[*slot] == t->key_len[id] &&
                          memcmp(tok_key(t, *slot), tok_key(t, id), t->key_len[id]) == 0)) {
            *slot = id;
            return;
        }
    }
}

attn_status attn__tok_push(tok_ids *out, int32_t id) {
    if (out->n == out->cap) {
        size_t cap = out->cap ? out->cap * 2 : 64;
        int32_t *ids = realloc(out->ids, cap * sizeof *ids);
        if (!ids) return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "tokenizer: no memory for %zu ids", cap);
        out->ids = ids;
        out->cap = cap;
    }
    out->ids[out->n++] = id;
    return ATTN_OK;
}

/* ----------------------------------------------------------- building */

/* The smallest power of two >= 2 n (a table at most half full). */
static uint64_t table_size(uint64_t n) {
    uint64_t size = 16;
    while (size < 2 * n) size *= 2;
    return size;
}

/* Gemma's blank tokens: a space among nothing but ASCII blanks. */
static bool is_blank_run(const char *s, size_t n) {
    bool space = false;
    for (size_t i = 0; i < n; i++) {
        if (!strchr(" \t\n\r\v\f", s[i]) || s[i] == 0) return false;
        space = space || s[i] == ' ';
    }
    return space;
}

/* The key of a piece (tokenizer.h): spelled into buf (room for 3 n + 1
 * bytes), its length returned; *same says whether it is the piece. */
static size_t make_key(attn_tokenizer_kind kind, const char *piece, size_t n, char *buf, bool *same) {
    const uint8_t *p = (const uint8_t *)piece;
    size_t k = 0;
    *same = true;
    if (kind == ATTN_TOKENIZER_SPM) {
        if (is_blank_run(piece, n)) {
            *same = false;
            for (size_t i = 0; i < n; i++) k += tok_utf8_put(0x2581, buf + k);
            return k;
        }
    } else {
        bool in_alphabet = true;
        for (size_t i = 0; i < n && in_alphabet;) {
            uint32_t cp;
            size_t len = attn__utf8_next(p + i, n - i, &cp);
            in_alphabet = len && tok_letter_byte(cp) >= 0;
            i += len;
        }
        if (!in_alphabet) {
            *same = false;
            for (size_t i = 0; i < n; i++) k += tok_utf8_put(tok_byte_letter(p[i]), buf + k);
            return k;
        }
    }
    memcpy(buf, piece, n);
    return n;
}

/* The shared builders (tokenizer.h): what the GGUF reader below and
 * tokenizer_json.c both call, so that one vocabulary gives one tokenizer
 * whichever file it came from. */

attn_status attn__tok_vocab_begin(attn_tokenizer *t, int64_t n, uint64_t piece_bytes, const char *what) {
    if (n <= 0 || n > INT32_MAX / 4)
        return attn__fail(ATTN_ERR_FORMAT, "%s holds %lld tokens (1 .. %d are read)", what, (long long)n,
                          INT32_MAX / 4);
    /* Pieces, then keys where they differ: at most 4 n bytes of a piece
     * (a key is at most 3 bytes per byte of it) plus the NULs. */
    if (piece_bytes > SIZE_MAX / 5 || piece_bytes > UINT32_MAX)
        return attn__fail(ATTN_ERR_OVERFLOW, "%s: %llu bytes of pieces is too large", what,
                          (unsigned long long)piece_bytes);
    t->n_tokens = n;
    t->strings_size = 0;
    size_t cap = (size_t)piece_bytes * 4 + 2 * (size_t)n + 1;
    t->strings = malloc(cap);
    t->piece_off = malloc((size_t)n * sizeof *t->piece_off);
    t->piece_len = malloc((size_t)n * sizeof *t->piece_len);
    t->key_off = malloc((size_t)n * sizeof *t->key_off);
    t->key_len = malloc((size_t)n * sizeof *t->key_len);
    t->type = malloc((size_t)n);
    t->lookup_mask = table_size((uint64_t)n) - 1;
    t->lookup = malloc((t->lookup_mask + 1) * sizeof *t->lookup);
    if (!t->strings || !t->piece_off || !t->piece_len || !t->key_off || !t->key_len || !t->type || !t->lookup)
        return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "tokenizer: no memory for %lld tokens", (long long)n);
    memset(t->lookup, 0xFF, (t->lookup_mask + 1) * sizeof *t->lookup);
    return ATTN_OK;
}

attn_status attn__tok_vocab_add(attn_tokenizer *t, int64_t i, const char *piece, size_t len, int type,
                                const char *what) {
    size_t used = t->strings_size;
    /* Offsets are 32-bit: 4 GB of pieces and keys is past any vocabulary. */
    if (len > UINT32_MAX / 8 || used > UINT32_MAX / 2)
        return attn__fail(ATTN_ERR_FORMAT, "%s: more than 2 GB of pieces by token %lld", what, (long long)i);
    if (len == 0 && t->kind == ATTN_TOKENIZER_BPE)
        return attn__fail(ATTN_ERR_FORMAT, "%s[%lld] is empty", what, (long long)i);
    if (memchr(piece, 0, len)) return attn__fail(ATTN_ERR_FORMAT, "%s[%lld] holds a NUL byte", what, (long long)i);
    if (type < ATTN_TOKEN_NORMAL || type > ATTN_TOKEN_BYTE)
        return attn__fail(ATTN_ERR_FORMAT, "%s[%lld]: type %d (1 .. 6 are types)", what, (long long)i, type);
    t->piece_off[i] = (uint32_t)used;
    t->piece_len[i] = (uint32_t)len;
    memcpy(t->strings + used, piece, len);
    used += len;
    t->strings[used++] = 0;
    bool same;
    size_t klen = make_key(t->kind, piece, len, t->strings + used, &same);
    if (same) {
        t->key_off[i] = t->piece_off[i];
    } else {
        t->key_off[i] = (uint32_t)used;
        used += klen;
        t->strings[used++] = 0;
    }
    t->key_len[i] = (uint32_t)klen;
    t->type[i] = (uint8_t)type;
    t->strings_size = used;
    lookup_insert(t, (int32_t)i);
    return ATTN_OK;
}

void attn__tok_vocab_end(attn_tokenizer *t) {
    /* The buffer was sized for the worst respelling: give back the rest. */
    char *fitted = realloc(t->strings, t->strings_size ? t->strings_size : 1);
    if (fitted) t->strings = fitted;
    t->memory_bytes += t->strings_size + (size_t)t->n_tokens * (4 * sizeof(uint32_t) + 1) +
                       (t->lookup_mask + 1) * sizeof *t->lookup;
}

attn_status attn__tok_merges_begin(attn_tokenizer *t, int64_t n, const char *what) {
    if (n < 0 || n > INT32_MAX / 4)
        return attn__fail(ATTN_ERR_FORMAT, "%s holds %lld merges (at most %d are read)", what, (long long)n,
                          INT32_MAX / 4);
    t->n_merges = n;
    t->merge_mask = table_size((uint64_t)n) - 1;
    t->merges = malloc((t->merge_mask + 1) * sizeof *t->merges);
    if (!t->merges) return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "tokenizer: no memory for %lld merges", (long long)n);
    for (uint64_t i = 0; i <= t->merge_mask; i++) t->merges[i].rank = -1;
    t->memory_bytes += (t->merge_mask + 1) * sizeof *t->merges;
    return ATTN_OK;
}

attn_status attn__tok_merge_add(attn_tokenizer *t, int64_t rank, const char *left, size_t llen, const char *right,
                                size_t rlen, const char *what) {
    if (rank < 0 || rank >= t->n_merges)
        return attn__fail(ATTN_ERR_INTERNAL, "%s: merge rank %lld of %lld", what, (long long)rank,
                          (long long)t->n_merges);
    if (llen > UINT32_MAX / 8 || rlen > UINT32_MAX / 8)
        return attn__fail(ATTN_ERR_FORMAT, "%s[%lld] is too long", what, (long long)rank);
    char small[256], *both = llen + rlen <= sizeof small ? small : malloc(llen + rlen);
    if (!both) return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "tokenizer: no memory for a merge");
    memcpy(both, left, llen);
    memcpy(both + llen, right, rlen);
    int32_t l = attn__tok_lookup(t, left, llen), r = attn__tok_lookup(t, right, rlen);
    int32_t merged = attn__tok_lookup(t, both, llen + rlen);
    attn_status st = ATTN_OK;
    if (l < 0 || r < 0 || merged < 0) {
        const int show = (int)(llen + rlen > 64 ? 64 : llen + rlen);
        st = attn__fail(ATTN_ERR_FORMAT, "%s[%lld] '%.*s %.*s': '%.*s' is not a token", what, (long long)rank,
                        (int)(llen > 64 ? 64 : llen), left, (int)(rlen > 64 ? 64 : rlen), right,
                        l < 0 ? (int)(llen > 64 ? 64 : llen) : r < 0 ? (int)(rlen > 64 ? 64 : rlen) : show,
                        l < 0 ? left : r < 0 ? right : both);
    } else {
        /* A pair listed twice keeps its later rank, as the reference's
         * merge map does. */
        uint64_t pair = (uint64_t)(uint32_t)l << 32 | (uint32_t)r;
        for (uint64_t i = (pair * 0x9E3779B97F4A7C15ull) >> 20;; i++) {
            tok_merge *slot = &t->merges[i & t->merge_mask];
            if (slot->rank < 0 || slot->pair == pair) {
                *slot = (tok_merge){pair, (int32_t)rank, merged};
                break;
            }
        }
    }
    if (both != small) free(both);
    return st;
}
