/*
 * test_tokenizer.c — the tokenizers on small vocabularies built here, byte
 * by byte, as GGUF files in memory (support/gguf_builder.h), so that CI
 * without the real models exercises every rule: BPE merge ranks and the
 * pre-tokenizer's pieces, SentencePiece-style merges by vocabulary place,
 * blanks as U+2581, byte fallback and the unknown token, special tokens
 * (kept whole, or read as text), BOS, decoding and its invalid UTF-8, the
 * size queries, and a refusal naming the key for each malformed vocabulary.
 * The real models against the reference: test_tokenizer_models.c.
 *
 * Token ids: the BPE vocabulary's ids 0..255 are the bytes' letters in byte
 * order (GPT-2's alphabet, derived here by its published construction), then
 * the merges' tokens and the specials; the SPM one's are listed in spm_vocab.
 */
#include "testutil.h"
#include "tokenizer_fixture.h"
#include "gguf_builder.h"

#include "attn_tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { GGUF_U32 = 4, GGUF_I32 = 5, GGUF_BOOL = 7, GGUF_STRING = 8, GGUF_ARRAY = 9 };

/* ------------------------------------------------------ building a GGUF */

typedef struct vocab_spec {
    const char *arch, *model, *pre;  /* NULL: the key is left out */
    const char *const *tokens;
    int n_tokens;
    const int32_t *types;            /* NULL: no token_type key */
    int n_types;
    const char *const *merges;       /* NULL: no merges key */
    int n_merges;
    int64_t bos;                     /* < 0: no bos_token_id */
    int add_bos;                     /* -1: no add_bos_token */
} vocab_spec;

static void kv_strings(gguf_bytes *b, const char *key, const char *const *s, int n) {
    gb_key(b, key, GGUF_ARRAY);
    gb_array(b, GGUF_STRING, (uint64_t)n);
    for (int i = 0; i < n; i++) gb_str(b, s[i]);
}

static gguf_bytes build_gguf(const vocab_spec *v) {
    gguf_bytes b = {0};
    int n_kv = (v->arch != NULL) + (v->model != NULL) + (v->pre != NULL) + (v->tokens != NULL) + (v->types != NULL) +
               (v->merges != NULL) + (v->bos >= 0) + (v->add_bos >= 0);
    gb_header(&b, 3, 0, (uint64_t)n_kv);
    if (v->arch) gb_kv_string(&b, "general.architecture", v->arch);
    if (v->model) gb_kv_string(&b, "tokenizer.ggml.model", v->model);
    if (v->pre) gb_kv_string(&b, "tokenizer.ggml.pre", v->pre);
    if (v->tokens) kv_strings(&b, "tokenizer.ggml.tokens", v->tokens, v->n_tokens);
    if (v->types) {
        gb_key(&b, "tokenizer.ggml.token_type", GGUF_ARRAY);
        gb_array(&b, GGUF_I32, (uint64_t)v->n_types);
        for (int i = 0; i < v->n_types; i++) gb_u32(&b, (uint32_t)v->types[i]);
    }
    if (v->merges) kv_strings(&b, "tokenizer.ggml.merges", v->merges, v->n_merges);
    if (v->bos >= 0) gb_kv_u32(&b, "tokenizer.ggml.bos_token_id", (uint32_t)v->bos);
    if (v->add_bos >= 0) {
        gb_key(&b, "tokenizer.ggml.add_bos_token", GGUF_BOOL);
        gb_u8(&b, (uint8_t)v->add_bos);
    }
    return b;
}

/* The tokenizer of v, or the status of building it (*out NULL then). */
static attn_status tokenizer_of(const vocab_spec *v, attn_tokenizer **out) {
    gguf_bytes b = build_gguf(v);
    attn_gguf *g;
    attn_status st = attn_gguf_parse(b.data, b.len, &g);
    if (st == ATTN_OK) {
        st = attn_tokenizer_from_gguf(g, out);
        attn_gguf_free(g);
    }
    gb_free(&b); /* the tokenizer keeps copies */
    return st;
}

/* ------------------------------------------------ a byte-level vocabulary
 * GPT-2's bytes_to_unicode: the bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF
 * stand for themselves, the others, in order, for 256, 257, ... */
static char letters[256][4];

static void make_letters(void) {
    int next = 256;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        int cp = printable ? b : next++;
        if (cp < 0x80) {
            letters[b][0] = (char)cp;
        } else {
            letters[b][0] = (char)(0xC0 | cp >> 6);
            letters[b][1] = (char)(0x80 | (cp & 0x3F));
        }
    }
}

/* Merges, in rank order; ids 256.. are their tokens in the same order. */
static const char *const bpe_merges[] = {
    "h e", "l l", "he ll", "hell o", "Ġ w", "o r", "Ġw or", "Ġwor l", "Ġworl d", "o Ġ", "b c", "a b", "Ġ Ġ", "1 2",
};
#define BPE_N_MERGES 14
static const char *const bpe_merged[BPE_N_MERGES] = {
    "he", "ll", "hell", "hello", "Ġw", "or", "Ġwor", "Ġworl", "Ġworld", "oĠ", "bc", "ab", "ĠĠ", "12",
};
enum { ID_HELLO = 259, ID_WORLD = 264, ID_O_SPACE = 265, ID_BC = 266, ID_AB = 267, ID_SPACES = 268, ID_12 = 269,
       ID_END = 270, ID_TOOL = 271, BPE_N_TOKENS = 272 };

static const char *bpe_tokens[BPE_N_TOKENS];
static int32_t bpe_types[BPE_N_TOKENS];

static vocab_spec bpe_spec(void) {
    make_letters();
    for (int b = 0; b < 256; b++) bpe_tokens[b] = letters[b], bpe_types[b] = ATTN_TOKEN_NORMAL;
    for (int i = 0; i < BPE_N_MERGES; i++) bpe_tokens[256 + i] = bpe_merged[i], bpe_types[256 + i] = ATTN_TOKEN_NORMAL;
    bpe_tokens[ID_END] = "<|end|>", bpe_types[ID_END] = ATTN_TOKEN_CONTROL;
    bpe_tokens[ID_TOOL] = "<tool>", bpe_types[ID_TOOL] = ATTN_TOKEN_USER_DEFINED;
    return (vocab_spec){"qwen2", "gpt2", "qwen2", bpe_tokens, BPE_N_TOKENS, bpe_types, BPE_N_TOKENS,
                        bpe_merges, BPE_N_MERGES, ID_END, 0};
}

/* Byte-level BPE needs PCRE2: a build without it refuses the vocabulary,
 * and these tests are skipped with a message. */
static attn_tokenizer *bpe_tokenizer(void) {
    vocab_spec v = bpe_spec();
    attn_tokenizer *t;
    attn_status st = tokenizer_of(&v, &t);
    tok_skip_without_pcre2(st);
    assert_ok(st);
    return t;
}

static void assert_encodes(const attn_tokenizer *t, const char *text, size_t len, unsigned flags, const int32_t *want,
                           size_t n_want) {
    int32_t got[256];
    size_t n;
    assert_ok(attn_tokenizer_encode(t, text, len, flags, got, 256, &n));
    if (n != n_want || memcmp(got, want, n * sizeof *got) != 0) {
        char line[1024];
        size_t at = 0;
        for (size_t i = 0; i < n && at < 1000; i++) at += (size_t)snprintf(line + at, sizeof line - at, " %d", got[i]);
        line[at] = 0;
        fail_msg("'%.*s' encodes to%s (%zu ids, want %zu)", (int)len, text, line, n, n_want);
    }
}
#define ENCODES(t, text, flags, ...)                                                                        \
    do {                                                                                                    \
        const int32_t want_[] = {__VA_ARGS__};                                                              \
        assert_encodes(t, text, strlen(text), flags, want_, sizeof want_ / sizeof want_[0]);                \
    } while (0)

static void assert_decodes(const attn_tokenizer *t, const int32_t *ids, size_t n, unsigned flags, const char *want,
                           size_t want_len) {
    char out[1024];
    size_t len;
    assert_ok(attn_tokenizer_decode(t, ids, n, flags, out, sizeof out, &len));
    if (len != want_len || memcmp(out, want, len) != 0 || out[len] != 0)
        fail_msg("decodes to '%.*s' (%zu bytes), want '%.*s'", (int)len, out, len, (int)want_len, want);
}

static void bpe_merges_by_rank(void **state) {
    (void)state;
    attn_tokenizer *t = bpe_tokenizer();
    ENCODES(t, "hello", 0, ID_HELLO);
    ENCODES(t, "hello world", 0, ID_HELLO, ID_WORLD);
    /* "b c" ranks before "a b": abc is a + bc, not ab + c. */
    ENCODES(t, "abc", 0, 'a', ID_BC);
    ENCODES(t, "ab", 0, ID_AB);
    /* Bytes without merges are their letters' ids: a space is Ġ (byte 0x20). */
    ENCODES(t, "x", 0, 'x');
    ENCODES(t, "\xff", 0, 0xff);
    attn_tokenizer_free(t);
}

/* The pre-tokenizer's pieces never merge with each other: "o Ġ" exists
 * but "hello world" splits as "hello" | " world". */
static void bpe_pieces_do_not_merge_across(void **state) {
    (void)state;
    attn_tokenizer *t = bpe_tokenizer();
    int32_t ids[64];
    size_t n;
    assert_ok(attn_tokenizer_encode(t, "o w", 3, 0, ids, 64, &n));
    for (size_t i = 0; i < n; i++) assert_int_not_equal(ids[i], ID_O_SPACE);
    /* Qwen2's split: single digits ("1 2" merges, but 1 | 2 | 3 are
     * pieces), blanks before a word leave the last blank to it ("Ġ Ġ"
     * merges, but "a  b" is a | " " | " b"). */
    ENCODES(t, "123", 0, '1', '2', '3');
    ENCODES(t, "a  b", 0, 'a', ' ', ' ', 'b');
    ENCODES(t, "a  ", 0, 'a', ID_SPACES);
    attn_tokenizer_free(t);
}

static void bpe_special_tokens(void **state) {
    (void)state;
    attn_tokenizer *t = bpe_tokenizer();
    ENCODES(t, "hello<|end|>hello", 0, ID_HELLO, ID_END, ID_HELLO);
    ENCODES(t, "<tool>", 0, ID_TOOL);
    /* Split: the control token is text; the user-defined one stays whole. */
    ENCODES(t, "<|end|>", ATTN_ENCODE_SPLIT_SPECIAL, '<', '|', 'e', 'n', 'd', '|', '>');
    ENCODES(t, "<tool>", ATTN_ENCODE_SPLIT_SPECIAL, ID_TOOL);
    /* A prefix of a special is no special. */
    ENCODES(t, "<|end|", 0, '<', '|', 'e', 'n', 'd', '|');
    const int32_t ids[] = {ID_HELLO, ID_END, ID_WORLD};
    assert_decodes(t, ids, 3, 0, "hello<|end|> world", 18);
    assert_decodes(t, ids, 3, ATTN_DECODE_SKIP_SPECIAL, "hello world", 11);
    attn_tokenizer_free(t);
}

/* Byte-level BPE is lossless: any bytes, invalid UTF-8 and NULs included,
 * decode back to themselves. */
static void bpe_round_trips_any_bytes(void **state) {
    (void)state;
    attn_tokenizer *t = bpe_tokenizer();
    test_rng rng;
    test_rng_seed(&rng, 11);
    char text[200], back[256];
    int32_t ids[256];
    for (int trial = 0; trial < 300; trial++) {
        size_t len = (size_t)test_rng_range(&rng, 200);
        for (size_t i = 0; i < len; i++) {
            static const char common[] = "hello world abc 12 \t\n\r<|end|>";
            text[i] = test_rng_range(&rng, 2) ? common[test_rng_range(&rng, sizeof common - 1)]
                                              : (char)test_rng_range(&rng, 256);
        }
        size_t n, back_len;
        assert_ok(attn_tokenizer_encode(t, text, len, 0, ids, 256, &n));
        assert_ok(attn_tokenizer_decode(t, ids, n, 0, back, sizeof back, &back_len));
        if (back_len != len || memcmp(back, text, len) != 0) fail_msg("trial %d: %zu bytes came back as %zu", trial, len, back_len);
    }
    attn_tokenizer_free(t);
}

/* A vocabulary without some bytes' letters (SmolLM2's lacks 21): such a
 * byte is dropped before the merges, as the reference's BPE model (no
 * unk_token) drops a character it has no token for, so that the letters
 * around it meet and merge; the rest of the text is untouched. */
static void bpe_bytes_without_letters(void **state) {
    (void)state;
    vocab_spec v = bpe_spec();
    bpe_tokens['x'] = "[no x]", bpe_tokens[0x04] = "[no 04]", bpe_tokens[0xFF] = "[no ff]";
    attn_tokenizer *t;
    attn_status st = tokenizer_of(&v, &t);
    tok_skip_without_pcre2(st);
    assert_ok(st);
    ENCODES(t, "hxe", 0, 256); /* "he": h and e meet once x is gone */
    ENCODES(t, "hexllo wxorld", 0, ID_HELLO, ID_WORLD);
    ENCODES(t, "a\x04 \xff" "b", 0, 'a', ' ', 'b');
    ENCODES(t, "<|end|>x\x04x<|end|>", 0, ID_END, ID_END);
    size_t n = 1;
    assert_ok(attn_tokenizer_encode(t, "x\x04\xffxx", 5, 0, NULL, 0, &n));
    assert_int_equal(n, 0);
    attn_tokenizer_free(t);
}

/* -------------------------------------------- a SentencePiece vocabulary */

#define SPM_N_WORDS 12
static const char *const spm_words[SPM_N_WORDS] = {
    "▁", "a", "b", "c", "ab", "bc", "▁a", "▁ab", "  ", "\n", "<|x|>", "é",
};
enum { SPM_PAD = 0, SPM_EOS = 1, SPM_BOS = 2, SPM_UNK = 3, SPM_BYTE0 = 4, SPM_SPACE = 260, SPM_A, SPM_B, SPM_C,
       SPM_AB, SPM_BC, SPM_SPACE_A, SPM_SPACE_AB, SPM_BLANKS, SPM_NEWLINE, SPM_CONTROL, SPM_E_ACUTE, SPM_N_TOKENS };

static const char *spm_tokens[SPM_N_TOKENS];
static int32_t spm_types[SPM_N_TOKENS];
static char spm_byte_names[256][8];

/* with_bytes: the 256 byte tokens; else they are ordinary "(NN)" tokens. */
static vocab_spec spm_spec(int with_bytes) {
    static const char *const specials[4] = {"<pad>", "<eos>", "<bos>", "<unk>"};
    for (int i = 0; i < 4; i++) spm_tokens[i] = specials[i], spm_types[i] = ATTN_TOKEN_CONTROL;
    spm_types[SPM_UNK] = ATTN_TOKEN_UNKNOWN;
    for (int b = 0; b < 256; b++) {
        snprintf(spm_byte_names[b], sizeof spm_byte_names[b], with_bytes ? "<0x%02X>" : "(%02X)", b);
        spm_tokens[SPM_BYTE0 + b] = spm_byte_names[b];
        spm_types[SPM_BYTE0 + b] = with_bytes ? ATTN_TOKEN_BYTE : ATTN_TOKEN_NORMAL;
    }
    for (int i = 0; i < SPM_N_WORDS; i++) spm_tokens[SPM_SPACE + i] = spm_words[i], spm_types[SPM_SPACE + i] = ATTN_TOKEN_NORMAL;
    spm_types[SPM_BLANKS] = spm_types[SPM_NEWLINE] = ATTN_TOKEN_USER_DEFINED;
    spm_types[SPM_CONTROL] = ATTN_TOKEN_CONTROL;
    return (vocab_spec){"gemma3", "llama", NULL, spm_tokens, SPM_N_TOKENS, spm_types, SPM_N_TOKENS, NULL, 0,
                        SPM_BOS, 1};
}

static attn_tokenizer *spm_tokenizer(int with_bytes) {
    vocab_spec v = spm_spec(with_bytes);
    attn_tokenizer *t;
    assert_ok(tokenizer_of(&v, &t));
    return t;
}

static void spm_merges_by_vocabulary_place(void **state) {
    (void)state;
    attn_tokenizer *t = spm_tokenizer(1);
    ENCODES(t, "", 0, SPM_BOS);
    ENCODES(t, "abc", 0, SPM_BOS, SPM_AB, SPM_C); /* ab comes before bc in the vocabulary */
    ENCODES(t, "abc", ATTN_ENCODE_NO_BOS, SPM_AB, SPM_C);
    ENCODES(t, " ab", 0, SPM_BOS, SPM_SPACE_AB);
    ENCODES(t, "a ab", 0, SPM_BOS, SPM_A, SPM_SPACE_AB);
    /* Two blanks: the respelled blank token, reached by merging ▁ + ▁. */
    ENCODES(t, "a  b", 0, SPM_BOS, SPM_A, SPM_BLANKS, SPM_B);
    attn_tokenizer_free(t);
}

static void spm_byte_fallback_and_unknown(void **state) {
    (void)state;
    attn_tokenizer *t = spm_tokenizer(1);
    ENCODES(t, "é", 0, SPM_BOS, SPM_E_ACUTE);
    /* 中 (E4 B8 AD) is no token: its bytes are. */
    ENCODES(t, "a中", 0, SPM_BOS, SPM_A, SPM_BYTE0 + 0xE4, SPM_BYTE0 + 0xB8, SPM_BYTE0 + 0xAD);
    /* An invalid byte is a character of its own. */
    ENCODES(t, "\xff" "a", 0, SPM_BOS, SPM_BYTE0 + 0xFF, SPM_A);
    const int32_t ids[] = {SPM_BOS, SPM_SPACE_AB, SPM_BYTE0 + 0xE4, SPM_BYTE0 + 0xB8, SPM_BYTE0 + 0xAD, SPM_BLANKS};
    assert_decodes(t, ids, 6, 0, "<bos> ab中  ", strlen("<bos> ab中  "));
    assert_decodes(t, ids, 6, ATTN_DECODE_SKIP_SPECIAL, " ab中  ", strlen(" ab中  "));
    /* A character cut short: raw, or replaced as Python's errors="replace". */
    assert_decodes(t, ids + 2, 2, 0, "\xE4\xB8", 2);
    assert_decodes(t, ids + 2, 2, ATTN_DECODE_VALID_UTF8, "\xEF\xBF\xBD", 3);
    const int32_t two_bad[] = {SPM_BYTE0 + 0xFF, SPM_A, SPM_BYTE0 + 0xC3};
    assert_decodes(t, two_bad, 3, ATTN_DECODE_VALID_UTF8, "\xEF\xBF\xBD" "a\xEF\xBF\xBD", 7);
    attn_tokenizer_free(t);

    /* Without byte tokens, one unknown token for a run of unknown characters. */
    t = spm_tokenizer(0);
    ENCODES(t, "a中文b", 0, SPM_BOS, SPM_A, SPM_UNK, SPM_B);
    attn_tokenizer_free(t);
}

static void spm_special_tokens(void **state) {
    (void)state;
    attn_tokenizer *t = spm_tokenizer(1);
    ENCODES(t, "<bos>a", 0, SPM_BOS, SPM_BOS, SPM_A);
    ENCODES(t, "a\n<|x|>", 0, SPM_BOS, SPM_A, SPM_NEWLINE, SPM_CONTROL);
    /* Split: "<|x|>" is text (its characters' bytes), "\n" stays whole. */
    ENCODES(t, "\n<|x|>", ATTN_ENCODE_SPLIT_SPECIAL | ATTN_ENCODE_NO_BOS, SPM_NEWLINE, SPM_BYTE0 + '<',
            SPM_BYTE0 + '|', SPM_BYTE0 + 'x', SPM_BYTE0 + '|', SPM_BYTE0 + '>');
    /* The blank run "  " is no special: its text is spelled ▁▁ before lookup. */
    ENCODES(t, "  ", ATTN_ENCODE_NO_BOS, SPM_BLANKS);
    attn_tokenizer_free(t);
}

/* ------------------------------------------------------------- the API */

static void sizes_and_arguments(void **state) {
    (void)state;
    attn_tokenizer *t = bpe_tokenizer();
    size_t n;
    assert_ok(attn_tokenizer_encode(t, "hello world", 11, 0, NULL, 0, &n));
    assert_int_equal(n, 2);
    int32_t one[1];
    assert_refused(attn_tokenizer_encode(t, "hello world", 11, 0, one, 1, &n), ATTN_ERR_SHAPE, "needs 2 ids");
    assert_int_equal(n, 2);
    assert_refused(attn_tokenizer_encode(NULL, "x", 1, 0, one, 1, &n), ATTN_ERR_INVALID_ARGUMENT, "tokenizer");
    assert_refused(attn_tokenizer_encode(t, NULL, 1, 0, one, 1, &n), ATTN_ERR_INVALID_ARGUMENT, "text");
    assert_ok(attn_tokenizer_encode(t, NULL, 0, 0, one, 1, &n));
    assert_int_equal(n, 0);

    const int32_t ids[] = {ID_HELLO, ID_WORLD};
    size_t len;
    assert_ok(attn_tokenizer_decode(t, ids, 2, 0, NULL, 0, &len));
    assert_int_equal(len, 11);
    char small[11];
    assert_refused(attn_tokenizer_decode(t, ids, 2, 0, small, sizeof small, &len), ATTN_ERR_SHAPE, "needs 11 bytes");
    const int32_t bad[] = {ID_HELLO, BPE_N_TOKENS};
    char out[64];
    assert_refused(attn_tokenizer_decode(t, bad, 2, 0, out, sizeof out, &len), ATTN_ERR_INVALID_ARGUMENT, "ids[1]");

    const char *piece;
    size_t piece_len;
    attn_token_type type;
    assert_ok(attn_tokenizer_token(t, ID_WORLD, &piece, &piece_len, &type));
    assert_string_equal(piece, "Ġworld");
    assert_int_equal(piece_len, strlen("Ġworld"));
    assert_int_equal(type, ATTN_TOKEN_NORMAL);
    assert_refused(attn_tokenizer_token(t, -1, &piece, NULL, NULL), ATTN_ERR_INVALID_ARGUMENT, "outside");
    assert_int_equal(attn_tokenizer_find(t, "<|end|>", 7), ID_END);
    assert_int_equal(attn_tokenizer_find(t, "nope", 4), -1);

    attn_tokenizer_info info;
    attn_tokenizer_describe(t, &info);
    assert_int_equal(info.kind, ATTN_TOKENIZER_BPE);
    assert_int_equal(info.vocab_size, BPE_N_TOKENS);
    assert_int_equal(info.n_merges, BPE_N_MERGES);
    assert_int_equal(info.bos_id, ID_END);
    assert_int_equal(info.eos_id, -1);
    assert_int_equal(info.add_bos, 0);
    assert_true(info.memory_bytes > 0);
    attn_tokenizer_free(t);
    attn_tokenizer_free(NULL);
    assert_refused(attn_tokenizer_from_gguf(NULL, &t), ATTN_ERR_INVALID_ARGUMENT, "NULL");
}

/* --------------------------------------------------------------- errors */

static void refuse(vocab_spec v, attn_status want, const char *keyword) {
    attn_tokenizer *t = (attn_tokenizer *)&v; /* anything but NULL: a refusal sets it NULL */
    assert_refused(tokenizer_of(&v, &t), want, keyword);
    assert_null(t);
}

static void malformed_vocabularies(void **state) {
    (void)state;
    vocab_spec v = bpe_spec();
    v.tokens = NULL;
    refuse(v, ATTN_ERR_FORMAT, "tokenizer.ggml.tokens");
    v = bpe_spec();
    v.model = NULL;
    refuse(v, ATTN_ERR_FORMAT, "tokenizer.ggml.model");
    v = bpe_spec();
    v.model = "bert";
    refuse(v, ATTN_ERR_UNSUPPORTED, "'bert'");
    v = bpe_spec();
    v.pre = "falcon";
    refuse(v, ATTN_ERR_UNSUPPORTED, "'falcon'");
    v = bpe_spec();
    v.pre = NULL;
    refuse(v, ATTN_ERR_FORMAT, "tokenizer.ggml.pre");
    v = bpe_spec();
    v.n_types = BPE_N_TOKENS - 1;
    refuse(v, ATTN_ERR_FORMAT, "token_type has");
    v = bpe_spec();
    v.merges = NULL;
    refuse(v, ATTN_ERR_FORMAT, "tokenizer.ggml.merges");
    static const char *const no_space[] = {"he"};
    v = bpe_spec();
    v.merges = no_space, v.n_merges = 1;
    refuse(v, ATTN_ERR_FORMAT, "merges[0] 'he' is not two tokens");
    static const char *const unknown[] = {"h e", "x yz"};
    v = bpe_spec();
    v.merges = unknown, v.n_merges = 2;
    refuse(v, ATTN_ERR_FORMAT, "merges[1] 'x yz': 'yz' is not a token");
    v = bpe_spec();
    v.bos = BPE_N_TOKENS;
    refuse(v, ATTN_ERR_FORMAT, "bos_token_id is 272, outside");
    static int32_t bad_types[BPE_N_TOKENS];
    memcpy(bad_types, bpe_types, sizeof bad_types);
    bad_types[7] = 9;
    v = bpe_spec();
    v.types = bad_types;
    refuse(v, ATTN_ERR_FORMAT, "token_type[7] is 9");
    v = spm_spec(1);
    v.arch = "llama";
    refuse(v, ATTN_ERR_UNSUPPORTED, "architecture 'llama'");
    v = spm_spec(1);
    v.bos = -1;
    refuse(v, ATTN_ERR_FORMAT, "add_bos_token is set but");
}

/* ------------------------------------------------ attn tokenize, detokenize */

static void cli_round_trip(void **state) {
    (void)state;
    attn_tokenizer_free(bpe_tokenizer()); /* skips without PCRE2 */
    vocab_spec v = bpe_spec();
    gguf_bytes b = build_gguf(&v);
    const char *model = test_path("bpe.gguf");
    FILE *f = fopen(model, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b.data, 1, b.len, f), b.len);
    fclose(f);
    gb_free(&b);
    char *out;
    assert_int_equal(test_run_cli(&out, "tokenize --model %s --ids --text 'hello world<|end|>'", model), 0);
    assert_string_equal(out, "259 264 270\n");
    free(out);
    assert_int_equal(test_run_cli(&out, "tokenize --model %s --ids --no-special --text '<|end|>'", model), 0);
    assert_string_equal(out, "60 124 101 110 100 124 62\n");
    free(out);
    assert_int_equal(test_run_cli(&out, "tokenize --model %s --pieces --text 'hello world'", model), 0);
    assert_string_equal(out, "hello Ġworld\n");
    free(out);
    assert_int_equal(test_run_cli(&out, "tokenize --model %s --text ' x'", model), 0);
    assert_string_equal(out, "32\tĠ\t\\x20\n120\tx\n");
    free(out);
    assert_int_equal(test_run_cli(&out, "detokenize --model %s 259 264 270", model), 0);
    assert_string_equal(out, "hello world<|end|>");
    free(out);
    assert_int_equal(test_run_cli(&out, "detokenize --model %s --skip-special 259,270", model), 0);
    assert_string_equal(out, "hello");
    free(out);
    /* A data error names the problem; a usage error the argument. */
    assert_int_equal(test_run_cli(&out, "detokenize --model %s 272", model), 1);
    assert_non_null(strstr(out, "outside the vocabulary"));
    free(out);
    assert_int_equal(test_run_cli(&out, "detokenize --model %s 12x", model), 2);
    assert_non_null(strstr(out, "'12x' is not a token id"));
    free(out);
    assert_int_equal(test_run_cli(&out, "tokenize --model %s", model), 2);
    assert_non_null(strstr(out, "missing --text"));
    free(out);
    assert_int_equal(test_run_cli(&out, "tokenize --model %s/nothing.gguf --text x", test_tmpdir()), 1);
    assert_non_null(strstr(out, "nothing.gguf"));
    free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(bpe_merges_by_rank),
        cmocka_unit_test(bpe_pieces_do_not_merge_across),
        cmocka_unit_test(bpe_special_tokens),
        cmocka_unit_test(bpe_round_trips_any_bytes),
        cmocka_unit_test(bpe_bytes_without_letters),
        cmocka_unit_test(spm_merges_by_vocabulary_place),
        cmocka_unit_test(spm_byte_fallback_and_unknown),
        cmocka_unit_test(spm_special_tokens),
        cmocka_unit_test(sizes_and_arguments),
        cmocka_unit_test(malformed_vocabularies),
        cmocka_unit_test(cli_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, test_group_teardown);
}
