/*
 * tokenizer_json.c — Hugging Face's tokenizer.json (the `tokenizers`
 * library's serialization) as a tokenizer (include/attn_tokenizer.h), with
 * cJSON; the vocabulary is handed to the builders the GGUF reader uses
 * (tokenizer_vocab.h, and tokenizer.h's finish), so the BPE, the
 * pre-tokenizer and the special tokens are the same code whichever file a
 * model came in.
 *
 * What is read (everything else is refused by name, not ignored, so that a
 * tokenizer this library would run differently never runs).  Two shapes,
 * told apart by the decoder:
 *   byte-level BPE (Qwen2, SmolLM2, GPT-2)
 *     decoder         ByteLevel
 *     normalizer      null
 *     pre_tokenizer   ByteLevel (add_prefix_space false, use_regex true:
 *                     GPT-2's pattern), or Sequence [Split {Regex P,
 *                     "Isolated"}, ByteLevel (use_regex false)] with P one
 *                     of the patterns of attn__tok_pre_tokenizers
 *     model           byte_fallback false
 *   SentencePiece-style BPE (Gemma's, as transformers saves it)
 *     decoder         Sequence [Replace "\u2581" -> " ", ByteFallback, Fuse]
 *     normalizer      Replace " " -> "\u2581"
 *     pre_tokenizer   null, or Split {String " "} MergedWithPrevious (which
 *                     finds nothing once the normalizer has run)
 *     model           byte_fallback true (<0xNN> tokens) or false
 * and for both:
 *   model           {"type": "BPE", "vocab": {"piece": id, ...},
 *                    "merges": ["a b", ...] or [["a", "b"], ...]},
 *                   unk_token (what a byte or character without a token
 *                   becomes; none: dropped), fuse_unk (dropout null,
 *                   ignore_merges false, no subword prefix or suffix)
 *   added_tokens    [{"id", "content", "special", "lstrip", "rstrip",
 *                   "normalized", single_word false}, ...]: special ->
 *                   CONTROL, else USER_DEFINED; the flags as tokenizers
 *                   reads them (tokenizer.c: normalized tokens are matched
 *                   in the normalized spans between the others)
 *   post_processor  null, ByteLevel, or TemplateProcessing whose "single" is
 *                   [A] or [SPECIAL, A] (the latter adds SPECIAL as BOS)
 * and from tokenizer_config.json, when given: bos_token, eos_token,
 * pad_token, unk_token (a string, or {"content": ...}), add_bos_token.
 *
 * Ids: model.vocab and added_tokens together must number 0 .. n-1, each
 * once; an id past the count of entries given is refused before anything
 * is allocated for it (a "huge vocabulary" claim costs nothing).
 */
#include "tokenizer/tokenizer.h"

#include "formats/json_keys.h"
#include "formats/quote.h"
#include "io/file.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <sys/mman.h>

#define TJ "tokenizer.json"

/* tokenizer.json and tokenizer_config.json are read whole: Qwen2's is
 * 11 MB; a bound keeps a huge or endless file from being mapped. */
#define TOKENIZER_JSON_MAX_BYTES (512u << 20)

static const char *quote(const char *s, char *buf, size_t cap) { return attn__quote(s, strlen(s), buf, cap); }

/* obj[key] when present and not null, else NULL. */
static const cJSON *item(const cJSON *obj, const char *key) {
    const cJSON *v = cJSON_IsObject(obj) ? cJSON_GetObjectItemCaseSensitive(obj, key) : NULL;
    return v && !cJSON_IsNull(v) ? v : NULL;
}

/* An exact integer in [0, max]. */
static bool json_index(const cJSON *v, double max, int64_t *out) {
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0.0) || v->valuedouble > max ||
        v->valuedouble != floor(v->valuedouble))
        return false;
    *out = (int64_t)v->valuedouble;
    return true;
}

/* key of obj, which must be absent, null or false (where = its name). */
static attn_status must_be_false(const cJSON *obj, const char *key, const char *where) {
    const cJSON *v = item(obj, key);
    if (!v || cJSON_IsFalse(v)) return ATTN_OK;
    return attn__fail(ATTN_ERR_UNSUPPORTED, TJ ": %s.%s is set: not implemented (only false)", where, key);
}

/* key of obj, absent, null or "" (BPE's subword prefix and suffix). */
static attn_status must_be_empty(const cJSON *obj, const char *key, const char *where) {
    const cJSON *v = item(obj, key);
    if (!v || (cJSON_IsString(v) && v->valuestring && !v->valuestring[0])) return ATTN_OK;
    return attn__fail(ATTN_ERR_UNSUPPORTED, TJ ": %s.%s is set: not implemented (only null or \"\")", where, key);
}

/* The "type" string of a component, or NULL with a message. */
static const char *type_of(const cJSON *obj, const char *where) {
    const cJSON *t = item(obj, "type");
    if (!cJSON_IsObject(obj) || !cJSON_IsString(t) || !t->valuestring) {
        attn__fail(ATTN_ERR_FORMAT, TJ ": %s is not an object with a \"type\" string", where);
        return NULL;
    }
    return t->valuestring;
}

static attn_status unsupported(const char *where, const char *type, const char *what_is) {
    char q[128];
    return attn__fail(ATTN_ERR_UNSUPPORTED, TJ ": %s '%s': %s", where, quote(type, q, sizeof q), what_is);
}

/* A ByteLevel component with add_prefix_space false; use_regex as wanted. */
static attn_status byte_level(const cJSON *obj, const char *where, bool want_regex) {
    attn_status st = must_be_false(obj, "add_prefix_space", where);
    if (st) return st;
    const cJSON *r = item(obj, "use_regex");
    const bool regex = !r || cJSON_IsTrue(r); /* tokenizers' default is true */
    if (r && !cJSON_IsBool(r)) return attn__fail(ATTN_ERR_FORMAT, TJ ": %s.use_regex is not true or false", where);
    if (regex != want_regex)
        return attn__fail(ATTN_ERR_UNSUPPORTED, TJ ": %s.use_regex is %s: only %s is implemented here", where,
                          regex ? "true" : "false", want_regex ? "true" : "false");
    return ATTN_OK;
}

/* pre_tokenizer -> the name of one of attn__tok_pre_tokenizers. */
static attn_status read_pre_tokenizer(const cJSON *pre, char name[32]) {
    if (!pre) return attn__fail(ATTN_ERR_UNSUPPORTED, TJ ": pre_tokenizer is null: byte-level BPE needs ByteLevel");
    const char *type = type_of(pre, "pre_tokenizer");
    if (!type) return ATTN_ERR_FORMAT;
    attn_status st;
    if (strcmp(type, "ByteLevel") == 0) {
        if ((st = byte_level(pre, "pre_tokenizer", true))) return st;
        snprintf(name, 32, "gpt2");
        return ATTN_OK;
    }
    if (strcmp(type, "Sequence") != 0)
        return unsupported("pre_tokenizer", type, "implemented are ByteLevel and Sequence [Split, ByteLevel]");
    const cJSON *list = item(pre, "pretokenizers");
    if (!cJSON_IsArray(list) || cJSON_GetArraySize(list) != 2)
        return attn__fail(ATTN_ERR_UNSUPPORTED, TJ ": pre_tokenizer.pretokenizers is not [Split, ByteLevel] (the "
                          "only Sequence implemented)");
    const cJSON *split = list->child, *bl = split->next;
    const char *t0 = type_of(split, "pre_tokenizer.pretokenizers[0]");
    if (!t0) return ATTN_ERR_FORMAT;
    const char *t1 = type_of(bl, "pre_tokenizer.pretokenizers[1]");
    if (!t1) return ATTN_ERR_FORMAT;
    if (strcmp(t0, "Split") != 0) return unsupported("pre_tokenizer.pretokenizers[0]", t0, "only Split is implemented");
    if (strcmp(t1, "ByteLevel") != 0)
        return unsupported("pre_tokenizer.pretokenizers[1]", t1, "only ByteLevel is implemented");
    if ((st = byte_level(bl, "pre_tokenizer.pretokenizers[1]", false))) return st;
    const cJSON *behavior = item(split, "behavior");
    if (!cJSON_IsString(behavior) || strcmp(behavior->valuestring, "Isolated") != 0)
        return attn__fail(ATTN_ERR_UNSUPPORTED, TJ ": pre_tokenizer.pretokenizers[0].behavior is not \"Isolated\" "
                          "(the only one implemented)");
    if ((st = must_be_false(split, "invert", "pre_tokenizer.pretokenizers[0]"))) return st;
    const cJSON *pattern = item(item(split, "pattern"), "Regex");
    if (!cJSON_IsString(pattern) || !pattern->valuestring)
        return attn__fail(ATTN_ERR_UNSUPPORTED, TJ ": pre_tokenizer.pretokenizers[0].pattern is not {\"Regex\": "
                          "...} (a String pattern is not implemented)");
    for (const attn__tok_pre *p = attn__tok_pre_tokenizers; p->name; p++)
        if (strcmp(pattern->valuestring, p->pattern) == 0) {
            snprintf(name, 32, "%s", p->name);
            return ATTN_OK;
        }
    char q[160];
    return attn__fail(ATTN_ERR_UNSUPPORTED, TJ ": pre_tokenizer.pretokenizers[0].pattern '%s' is none of the "
                      "pre-tokenizers implemented (Qwen2's, GPT-2's: docs/tokenizers.md)",
                      quote(pattern->valuestring, q, sizeof q));
}

/* A {"String": s} pattern's s, or NULL. */
static const char *string_pattern(const cJSON *obj) {
    const cJSON *p = item(item(obj, "pattern"), "String");
    return cJSON_IsString(p) ? p->valuestring : NULL;
}

/* obj is {"type": type, "pattern": {"String": from}, "content": to}. */
static bool is_replace(const cJSON *obj, const char *from, const char *to) {
    const cJSON *type = item(obj, "type"), *content = item(obj, "content");
    const char *pattern = string_pattern(obj);
    return cJSON_IsString(type) && strcmp(type->valuestring, "Replace") == 0 && pattern && strcmp(pattern, from) == 0 &&
           cJSON_IsString(content) && strcmp(content->valuestring, to) == 0;
}

/* The i-th element of a Sequence's list is {"type": type}. */
static bool element_is(const cJSON *list, int i, const char *type) {
    const cJSON *t = item(cJSON_GetArrayItem(list, i), "type");
    return cJSON_IsString(t) && strcmp(t->valuestring, type) == 0;
}

/* Gemma's decoder: Sequence [Replace "\u2581" -> " ", ByteFallback, Fuse]. */
static bool is_spm_decoder(const cJSON *decoder) {
    const cJSON *list = item(decoder, "decoders");
    return cJSON_IsArray(list) && cJSON_GetArraySize(list) == 3 &&
           is_replace(cJSON_GetArrayItem(list, 0), "\u2581", " ") && element_is(list, 1, "ByteFallback") &&
           element_is(list, 2, "Fuse");
}

/* A SentencePiece-style BPE's normalizer: each space written as U+2581
 * (Gemma's), which the encoder does (tokenizer.c). */
static attn_status read_spm_normalizer(const cJSON *normalizer) {
    if (normalizer && is_replace(normalizer, " ", "\u2581")) return ATTN_OK;
    const char *n = normalizer ? type_of(normalizer, "normalizer") : "null";
    if (!n) return ATTN_ERR_FORMAT;
    return unsupported("normalizer", n, "a SentencePiece-style BPE (Gemma's) is implemented with Replace \" \" -> "
                       "\"\u2581\" only");
}

/* Its pre-tokenizer: none, or Gemma's Split on " " merged with the
 * previous piece, which finds nothing once the normalizer has written
 * every space as U+2581. */
static attn_status read_spm_pre_tokenizer(const cJSON *pre) {
    if (!pre) return ATTN_OK;
    const char *type = type_of(pre, "pre_tokenizer");
    if (!type) return ATTN_ERR_FORMAT;
    const cJSON *behavior = item(pre, "behavior");
    const char *pattern = string_pattern(pre);
    if (strcmp(type, "Split") == 0 && pattern && strcmp(pattern, " ") == 0 && cJSON_IsString(behavior) &&
        strcmp(behavior->valuestring, "MergedWithPrevious") == 0 && !cJSON_IsTrue(item(pre, "invert")))
        return ATTN_OK;
    return unsupported("pre_tokenizer", type, "a SentencePiece-style BPE (Gemma's) is implemented with none or "
                       "Split {\"String\": \" \"} MergedWithPrevious only");
}

/* What the reader collects before building. */
typedef struct json_vocab {
    int64_t n;             /* tokens: ids 0 .. n-1                       */
    const char **piece;    /* [n] cJSON's strings (live with the tree)   */
    uint8_t *type;         /* [n]                                        */
    uint8_t *flags;        /* [n] TOK_LSTRIP etc. of the added tokens     */
    bool any_flags;
    const char *bos_piece; /* post_processor's BOS, or NULL              */
} json_vocab;

static attn_status read_vocab(const cJSON *model, const cJSON *added, json_vocab *v) {
    const cJSON *vocab = item(model, "vocab");
    if (!cJSON_IsObject(vocab)) return attn__fail(ATTN_ERR_FORMAT, TJ ": model.vocab is not an object");
    if (added && !cJSON_IsArray(added)) return attn__fail(ATTN_ERR_FORMAT, TJ ": added_tokens is not an array");
    int64_t n_vocab = 0, n_added = 0, max_id = -1;
    char q[160];
    for (const cJSON *e = vocab->child; e; e = e->next) {
        int64_t id;
        if (!json_index(e, (double)(INT32_MAX / 4), &id))
            return attn__fail(ATTN_ERR_FORMAT, TJ ": model.vocab '%s': its id is not an integer in [0, %d]",
                              quote(e->string ? e->string : "", q, sizeof q), INT32_MAX / 4);
        n_vocab++;
        if (id > max_id) max_id = id;
    }
    for (const cJSON *e = added ? added->child : NULL; e; e = e->next, n_added++) {
        int64_t id;
        const cJSON *content = item(e, "content");
        if (!cJSON_IsObject(e) || !json_index(item(e, "id"), (double)(INT32_MAX / 4), &id) ||
            !cJSON_IsString(content) || !content->valuestring)
            return attn__fail(ATTN_ERR_FORMAT, TJ ": added_tokens[%lld] is not {\"id\": integer in [0, %d], "
                              "\"content\": string, ...}", (long long)n_added, INT32_MAX / 4);
        const cJSON *single = item(e, "single_word");
        if (single && !cJSON_IsFalse(single))
            return attn__fail(ATTN_ERR_UNSUPPORTED, TJ ": added_tokens[%lld] ('%s') has single_word set: not "
                              "implemented", (long long)n_added, quote(content->valuestring, q, sizeof q));
        static const char *const flags[] = {"special", "lstrip", "rstrip", "normalized"};
        for (int f = 0; f < 4; f++) {
            const cJSON *x = item(e, flags[f]);
            if (x && !cJSON_IsBool(x))
                return attn__fail(ATTN_ERR_FORMAT, TJ ": added_tokens[%lld].%s is not true or false",
                                  (long long)n_added, flags[f]);
        }
        if (id > max_id) max_id = id;
    }
    if (n_vocab == 0) return attn__fail(ATTN_ERR_FORMAT, TJ ": model.vocab is empty");
    /* Every id once: the largest is below the number of entries, or some id
     * has no token — refused before a table is sized by the claim. */
    if (max_id >= n_vocab + n_added)
        return attn__fail(ATTN_ERR_FORMAT, TJ ": id %lld, but model.vocab and added_tokens give %lld tokens: ids "
                          "must be 0 .. n-1 without gaps", (long long)max_id, (long long)(n_vocab + n_added));
    v->n = max_id + 1;
    v->piece = calloc((size_t)v->n, sizeof *v->piece);
    v->type = malloc((size_t)v->n);
    v->flags = calloc((size_t)v->n, 1);
    if (!v->piece || !v->type || !v->flags)
        return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "tokenizer: no memory for %lld tokens", (long long)v->n);
    memset(v->type, ATTN_TOKEN_NORMAL, (size_t)v->n);
    char q2[160];
    for (const cJSON *e = vocab->child; e; e = e->next) {
        const int64_t id = (int64_t)e->valuedouble;
        const char *s = e->string ? e->string : "";
        if (v->piece[id])
            return attn__fail(ATTN_ERR_FORMAT, TJ ": model.vocab: '%s' and '%s' both have id %lld",
                              quote(v->piece[id], q, sizeof q), quote(s, q2, sizeof q2), (long long)id);
        if (!*s) return attn__fail(ATTN_ERR_FORMAT, TJ ": model.vocab: an empty token (id %lld)", (long long)id);
        v->piece[id] = s;
    }
    int64_t k = 0;
    for (const cJSON *e = added ? added->child : NULL; e; e = e->next, k++) {
        const int64_t id = (int64_t)item(e, "id")->valuedouble;
        const char *content = item(e, "content")->valuestring;
        if (!*content) return attn__fail(ATTN_ERR_FORMAT, TJ ": added_tokens[%lld] is empty", (long long)k);
        /* An added token may name a vocabulary entry (to mark it special),
         * but not give its id another text. */
        if (v->piece[id] && strcmp(v->piece[id], content) != 0)
            return attn__fail(ATTN_ERR_FORMAT, TJ ": added_tokens[%lld] gives id %lld the text '%s', but it is '%s'",
                              (long long)k, (long long)id, quote(content, q, sizeof q),
                              quote(v->piece[id], q2, sizeof q2));
        if (v->type[id] != ATTN_TOKEN_NORMAL)
            return attn__fail(ATTN_ERR_FORMAT, TJ ": added_tokens[%lld]: id %lld is added twice", (long long)k,
                              (long long)id);
        v->piece[id] = content;
        const bool special = cJSON_IsTrue(item(e, "special"));
        v->type[id] = special ? ATTN_TOKEN_CONTROL : ATTN_TOKEN_USER_DEFINED;
        /* normalized: absent means !special, as tokenizers' AddedToken::from. */
        const cJSON *normalized = item(e, "normalized");
        v->flags[id] = (uint8_t)((cJSON_IsTrue(item(e, "lstrip")) ? TOK_LSTRIP : 0) |
                                 (cJSON_IsTrue(item(e, "rstrip")) ? TOK_RSTRIP : 0) |
                                 ((normalized ? cJSON_IsTrue(normalized) : !special) ? TOK_NORMALIZED : 0));
        v->any_flags = v->any_flags || v->flags[id];
    }
    for (int64_t id = 0; id < v->n; id++)
        if (!v->piece[id])
            return attn__fail(ATTN_ERR_FORMAT, TJ ": no token has id %lld (ids must be 0 .. %lld without gaps)",
                              (long long)id, (long long)v->n - 1);
    return ATTN_OK;
}

static attn_status read_merges(attn_tokenizer *t, const cJSON *merges) {
    if (!cJSON_IsArray(merges)) return attn__fail(ATTN_ERR_FORMAT, TJ ": model.merges is not an array");
    attn_status st = attn__tok_merges_begin(t, cJSON_GetArraySize(merges), TJ ": model.merges");
    int64_t r = 0;
    for (const cJSON *m = merges->child; m && st == ATTN_OK; m = m->next, r++) {
        const char *left, *right;
        size_t llen, rlen;
        if (cJSON_IsString(m) && m->valuestring) {
            /* "left right": one space, as tokenizers splits it. */
            const char *s = m->valuestring, *space = strchr(s, ' ');
            if (!space || space == s || !space[1] || strchr(space + 1, ' ')) {
                char q[160];
                return attn__fail(ATTN_ERR_FORMAT, TJ ": model.merges[%lld] '%s' is not two tokens and one space",
                                  (long long)r, quote(s, q, sizeof q));
            }
            left = s, llen = (size_t)(space - s), right = space + 1, rlen = strlen(right);
        } else if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 && cJSON_IsString(m->child) &&
                   cJSON_IsString(m->child->next) && m->child->valuestring && m->child->next->valuestring &&
                   m->child->valuestring[0] && m->child->next->valuestring[0]) {
            left = m->child->valuestring, llen = strlen(left);
            right = m->child->next->valuestring, rlen = strlen(right);
        } else {
            return attn__fail(ATTN_ERR_FORMAT, TJ ": model.merges[%lld] is neither \"a b\" nor [\"a\", \"b\"] "
                              "(two non-empty tokens)", (long long)r);
        }
        st = attn__tok_merge_add(t, r, left, llen, right, rlen, TJ ": model.merges");
    }
    return st;
}

/* post_processor: nothing to add, or a BOS (TemplateProcessing [X, A]). */
static attn_status read_post_processor(const cJSON *post, json_vocab *v) {
    if (!post) return ATTN_OK;
    const char *type = type_of(post, "post_processor");
    if (!type) return ATTN_ERR_FORMAT;
    if (strcmp(type, "ByteLevel") == 0) return ATTN_OK; /* offsets only */
    if (strcmp(type, "TemplateProcessing") != 0)
        return unsupported("post_processor", type, "implemented are ByteLevel and TemplateProcessing");
    const cJSON *single = item(post, "single");
    const int n = cJSON_IsArray(single) ? cJSON_GetArraySize(single) : 0;
    const cJSON *last = n ? cJSON_GetArrayItem(single, n - 1) : NULL;
    const cJSON *first = n == 2 ? item(single->child, "SpecialToken") : NULL;
    const cJSON *first_id = item(first, "id");
    if (!item(last, "Sequence") || n > 2 || (n == 2 && !(cJSON_IsString(first_id) && first_id->valuestring)))
        return attn__fail(ATTN_ERR_UNSUPPORTED, TJ ": post_processor.single is not [A] or [SPECIAL, A] (a BOS): "
                          "other templates are not implemented");
    if (n == 2) v->bos_piece = first_id->valuestring;
    return ATTN_OK;
}

/* A token of tokenizer_config.json ("<|endoftext|>" or {"content": ...})
 * as an id; absent or null: -1. */
static attn_status config_token(const attn_tokenizer *t, const cJSON *config, const char *key, int32_t *id) {
    const cJSON *v = item(config, key);
    if (!v) return ATTN_OK;
    if (cJSON_IsObject(v)) v = item(v, "content");
    if (!cJSON_IsString(v) || !v->valuestring)
        return attn__fail(ATTN_ERR_FORMAT, "tokenizer_config.json: \"%s\" is not a string or {\"content\": string}",
                          key);
    *id = attn_tokenizer_find(t, v->valuestring, strlen(v->valuestring));
    if (*id < 0) {
        char q[160];
        return attn__fail(ATTN_ERR_FORMAT, "tokenizer_config.json: %s '%s' is not a token of " TJ, key,
                          quote(v->valuestring, q, sizeof q));
    }
    return ATTN_OK;
}

static attn_status read_config(attn_tokenizer *t, const cJSON *config) {
    if (!cJSON_IsObject(config)) return attn__fail(ATTN_ERR_FORMAT, "tokenizer_config.json is not a JSON object");
    attn_status st;
    if ((st = config_token(t, config, "bos_token", &t->bos_id)) || (st = config_token(t, config, "eos_token", &t->eos_id)) ||
        (st = config_token(t, config, "pad_token", &t->pad_id)) || (st = config_token(t, config, "unk_token", &t->unk_id)))
        return st;
    const cJSON *add = item(config, "add_bos_token");
    if (add && !cJSON_IsBool(add)) return attn__fail(ATTN_ERR_FORMAT, "tokenizer_config.json: add_bos_token is not true or false");
    if (add) t->add_bos = cJSON_IsTrue(add);
    const cJSON *eos = item(config, "add_eos_token");
    if (eos && !cJSON_IsFalse(eos))
        return attn__fail(ATTN_ERR_UNSUPPORTED, "tokenizer_config.json: add_eos_token is set: not implemented");
    if (t->add_bos && t->bos_id < 0)
        return attn__fail(ATTN_ERR_FORMAT, "tokenizer_config.json: add_bos_token is true but there is no bos_token");
    return ATTN_OK;
}

/* Parses text[0..size) (NUL-free) with cJSON, naming the file and the
 * byte where it stops. */
static attn_status parse(const char *name, const char *text, size_t size, cJSON **out) {
    *out = NULL;
    const char *nul = memchr(text, 0, size);
    if (nul) return attn__fail(ATTN_ERR_FORMAT, "%s holds a NUL byte (at byte %zu)", name, (size_t)(nul - text));
    const char *end = NULL;
    *out = cJSON_ParseWithLengthOpts(text, size, &end, 0);
    if (!*out) {
        const size_t at = end && end >= text && end <= text + size ? (size_t)(end - text) : 0;
        return attn__fail(ATTN_ERR_FORMAT, "%s is not valid JSON (at byte %zu)", name, at);
    }
    return ATTN_OK;
}

static attn_status build(attn_tokenizer *t, const cJSON *root, const cJSON *config) {
    if (!cJSON_IsObject(root)) return attn__fail(ATTN_ERR_FORMAT, TJ " is not a JSON object");
    const cJSON *model = item(root, "model");
    const char *type = type_of(model, "model");
    if (!type) return ATTN_ERR_FORMAT;
    if (strcmp(type, "BPE") != 0)
        return unsupported("model.type", type, "only BPE (byte-level, GPT-2 / Qwen2) is implemented; Unigram, "
                           "WordPiece and WordLevel are not");
    attn_status st;
    if ((st = must_be_false(model, "ignore_merges", "model")) ||
        (st = must_be_empty(model, "continuing_subword_prefix", "model")) ||
        (st = must_be_empty(model, "end_of_word_suffix", "model")))
        return st;
    const cJSON *dropout = item(model, "dropout"), *fallback = item(model, "byte_fallback");
    if (dropout && !(cJSON_IsNumber(dropout) && dropout->valuedouble == 0.0))
        return attn__fail(ATTN_ERR_UNSUPPORTED, TJ ": model.dropout is set: BPE dropout is not implemented");
    if (fallback && !cJSON_IsBool(fallback))
        return attn__fail(ATTN_ERR_FORMAT, TJ ": model.byte_fallback is not true or false");
    /* The decoder says which of the two BPEs this is. */
    const cJSON *decoder = item(root, "decoder");
    const char *d = decoder ? type_of(decoder, "decoder") : "null";
    if (!d) return ATTN_ERR_FORMAT;
    if (strcmp(d, "ByteLevel") == 0) {
        t->kind = ATTN_TOKENIZER_BPE;
        if (cJSON_IsTrue(fallback))
            return attn__fail(ATTN_ERR_UNSUPPORTED, TJ ": model.byte_fallback is set: a byte-level BPE (ByteLevel "
                              "decoder) has a letter for every byte (only false)");
        const cJSON *normalizer = item(root, "normalizer");
        if (normalizer) {
            const char *n = type_of(normalizer, "normalizer");
            if (!n) return ATTN_ERR_FORMAT;
            return unsupported("normalizer", n, "no normalizer is implemented for a byte-level BPE (only null)");
        }
        if ((st = read_pre_tokenizer(item(root, "pre_tokenizer"), t->pre))) return st;
    } else if (strcmp(d, "Sequence") == 0 && is_spm_decoder(decoder)) {
        t->kind = ATTN_TOKENIZER_SPM;
        if ((st = read_spm_normalizer(item(root, "normalizer"))) || (st = read_spm_pre_tokenizer(item(root, "pre_tokenizer"))))
            return st;
    } else {
        return unsupported("decoder", d, "implemented are ByteLevel (byte-level BPE) and Sequence [Replace \"\u2581\" "
                           "-> \" \", ByteFallback, Fuse] (Gemma's SentencePiece-style BPE)");
    }
    json_vocab v = {0};
    st = read_vocab(model, item(root, "added_tokens"), &v);
    if (!st) st = read_post_processor(item(root, "post_processor"), &v);
    uint64_t bytes = 0;
    for (int64_t i = 0; !st && i < v.n; i++) bytes += strlen(v.piece[i]);
    /* SPM's normalizer writes spaces as U+2581, so a normalized added token
     * holding either would be matched against its normalized text: not
     * implemented. */
    for (int64_t i = 0; !st && t->kind == ATTN_TOKENIZER_SPM && i < v.n; i++)
        if ((v.flags[i] & TOK_NORMALIZED) && (strchr(v.piece[i], ' ') || strstr(v.piece[i], "\u2581"))) {
            char q[160];
            st = attn__fail(ATTN_ERR_UNSUPPORTED, TJ ": the added token '%s' is normalized and holds a space or "
                            "U+2581: not implemented", quote(v.piece[i], q, sizeof q));
        }
    if (!st) st = attn__tok_vocab_begin(t, v.n, bytes, TJ " token");
    for (int64_t i = 0; !st && i < v.n; i++) st = attn__tok_vocab_add(t, i, v.piece[i], strlen(v.piece[i]), v.type[i], TJ " token");
    if (!st) {
        attn__tok_vocab_end(t);
        /* A text twice (cJSON keeps repeated keys) would alias two ids. */
        for (int64_t i = 0; !st && i < v.n; i++) {
            const int32_t j = attn__tok_lookup(t, tok_key(t, (int32_t)i), t->key_len[i]);
            if (j != i && j >= 0 && t->piece_len[j] == t->piece_len[i] &&
                memcmp(t->strings + t->piece_off[j], t->strings + t->piece_off[i], t->piece_len[i]) == 0) {
                char q[160];
                st = attn__fail(ATTN_ERR_FORMAT, TJ ": the token '%s' has two ids, %lld and %d",
                                quote(v.piece[i], q, sizeof q), (long long)i, (int)j);
            }
        }
    }
    if (!st) st = read_merges(t, item(model, "merges"));
    t->bos_id = t->eos_id = t->pad_id = t->unk_id = -1;
    if (!st && v.bos_piece) {
        t->add_bos = 1;
        if ((t->bos_id = attn_tokenizer_find(t, v.bos_piece, strlen(v.bos_piece))) < 0) {
            char q[160];
            st = attn__fail(ATTN_ERR_FORMAT, TJ ": post_processor's '%s' is not a token", quote(v.bos_piece, q, sizeof q));
        }
    }
    /* model.unk_token: what a byte without a letter becomes; none drops it. */
    t->model_unk_id = -1;
    const cJSON *unk = item(model, "unk_token"), *fuse = item(model, "fuse_unk");
    if (!st && unk && !(cJSON_IsString(unk) && unk->valuestring))
        st = attn__fail(ATTN_ERR_FORMAT, TJ ": model.unk_token is not a string");
    if (!st && unk && (t->unk_id = t->model_unk_id = attn_tokenizer_find(t, unk->valuestring, strlen(unk->valuestring))) < 0) {
        char q[160];
        st = attn__fail(ATTN_ERR_FORMAT, TJ ": model.unk_token '%s' is not a token", quote(unk->valuestring, q, sizeof q));
    }
    if (!st && fuse && !cJSON_IsBool(fuse)) st = attn__fail(ATTN_ERR_FORMAT, TJ ": model.fuse_unk is not true or false");
    t->fuse_unk = cJSON_IsTrue(fuse);
    if (!st && config) st = read_config(t, config);
    if (!st && v.any_flags) {
        t->added_flags = v.flags; /* kept: the special tokens' matching reads them */
        v.flags = NULL;
        t->memory_bytes += (size_t)v.n;
    }
    free(v.piece);
    free(v.type);
    free(v.flags);
    if (!st) st = attn__tok_finish(t);
    /* Without byte_fallback no <0xNN> token stands for a byte. */
    if (!st && t->kind == ATTN_TOKENIZER_SPM && !cJSON_IsTrue(fallback))
        for (int b = 0; b < 256; b++) t->byte_token[b] = -1;
    return st;
}

/* tokenizer.json (and tokenizer_config.json, NULL when there is none) from
 * memory. */
static attn_status from_json_config(const char *json, size_t size, const char *config, size_t config_size,
                                    attn_tokenizer **out) {
    cJSON *root = NULL, *conf = NULL;
    attn_status st = parse(TJ, json, size, &root);
    if (!st && config) st = parse("tokenizer_config.json", config, config_size, &conf);
    if (!st && conf) st = attn__json_unique_keys(conf, "tokenizer_config.json");
    attn_tokenizer *t = NULL;
    if (!st && !(t = calloc(1, sizeof *t))) st = attn__fail(ATTN_ERR_OUT_OF_MEMORY, "tokenizer: no memory");
    if (!st) st = build(t, root, conf);
    cJSON_Delete(root);
    cJSON_Delete(conf);
    if (st) {
        attn_tokenizer_free(t);
        return st;
    }
    *out = t;
    return ATTN_OK;
}

attn_status attn_tokenizer_from_json(const void *buf, size_t size, attn_tokenizer **out) {
    if (!out) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_tokenizer_from_json: out is NULL");
    *out = NULL;
    if (!buf && size) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_tokenizer_from_json: buf is NULL");
    return from_json_config(buf ? buf : "", size, NULL, 0, out);
}

/* The whole of path, mapped; *map NULL for an empty file.  *present false
 * (no error) when optional and the file does not exist. */
static attn_status map_file(const char *path, bool optional, void **map, size_t *size, bool *present) {
    *map = NULL, *size = 0, *present = true;
    struct stat sb;
    if (optional && stat(path, &sb) != 0 && errno == ENOENT) {
        *present = false;
        return ATTN_OK;
    }
    return file_map_regular(path, "tokenizer files", TOKENIZER_JSON_MAX_BYTES, "a tokenizer file", map, size);
}

attn_status attn_tokenizer_from_json_file(const char *path, attn_tokenizer **out) {
    if (!out) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_tokenizer_from_json_file: out is NULL");
    *out = NULL;
    if (!path) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_tokenizer_from_json_file: path is NULL");
    /* A directory holds tokenizer.json; tokenizer_config.json is beside it. */
    struct stat sb;
    const bool is_dir = stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
    const size_t n = strlen(path);
    char *file = malloc(n + 64), *config = malloc(n + 64);
    if (!file || !config) {
        free(file), free(config);
        return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "cannot copy a path");
    }
    if (is_dir) {
        snprintf(file, n + 64, "%s/" TJ, path);
        snprintf(config, n + 64, "%s/tokenizer_config.json", path);
    } else {
        const char *slash = strrchr(path, '/');
        snprintf(file, n + 64, "%s", path);
        snprintf(config, n + 64, "%.*stokenizer_config.json", slash ? (int)(slash - path + 1) : 0, path);
    }
    void *json = NULL, *conf = NULL;
    size_t json_size = 0, conf_size = 0;
    bool present, conf_present = false;
    attn_status st = map_file(file, false, &json, &json_size, &present);
    if (!st) st = map_file(config, true, &conf, &conf_size, &conf_present);
    if (!st) {
        st = from_json_config(json ? json : "", json_size, conf_present ? (conf ? conf : "") : NULL,
                                              conf_size, out);
        if (st) st = attn__fail(st, "'%s': %s", file, attn_last_error());
    }
    if (json) munmap(json, json_size);
    if (conf) munmap(conf, conf_size);
    free(file);
    free(config);
    return st;
}
