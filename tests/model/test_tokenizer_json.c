/*
 * test_tokenizer_json.c — Hugging Face tokenizer.json (attn_tokenizer_from_json):
 *   - two tiny byte-level BPE tokenizers trained with the `tokenizers`
 *     library (Qwen2's Split pattern with merges as [a, b] pairs; GPT-2's
 *     ByteLevel pattern with merges as "a b", lstrip and rstrip tokens) and
 *     a tiny one of Gemma's SentencePiece-style shape (byte fallback, <unk>
 *     fused, lstrip, rstrip and normalized added tokens) against
 *     transformers' ids and decoding on the fixture corpus;
 *   - the real Qwen2.5 and SmolLM2 tokenizer.json (committed gzipped: 2 MB
 *     and 0.6 MB; read with zlib, skipped without it) against the
 *     reference ids the GGUF fixtures hold, and, when the model's GGUF is in
 *     $ATTN_MODEL_DIR, against the GGUF's tokenizer: the same pieces and
 *     control tokens for every id;
 *   - a vocabulary without some byte letters (dropped, or model.unk_token,
 *     fused or not), and the Gemma-shaped file without byte_fallback;
 *   - tokenizer_config.json (BOS, EOS, pad; add_bos_token), a
 *     TemplateProcessing BOS;
 *   - tables of hostile files (byte-level and Gemma-shaped), each refused
 *     with its status and a message naming the key and the problem;
 *   - attn tokenize --model DIR on a directory holding tokenizer.json, and
 *     attn model run DIR --text on the tiny Qwen2 checkpoint.
 * Fixtures: tests/fixtures/tokenizer/, made by
 * scripts/models/make_tokenizer_json_fixtures.py.
 */
#include "testutil.h"
#include "tokenizer_fixture.h"

#include "attn_tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#ifdef ATTN_TEST_HAVE_ZLIB
#include <zlib.h>
#endif

#define FIXTURES ATTN_SOURCE_DIR "/tests/fixtures/tokenizer/"

static attn_tokenizer *from_file(const char *path) {
    attn_tokenizer *t = NULL;
    attn_status st = attn_tokenizer_from_json_file(path, &t);
    tok_skip_without_pcre2(st);
    assert_ok(st);
    return t;
}

/* ------------------------------------------------- against the reference */

static void tiny_qwen2_matches_reference(void **state) {
    (void)state;
    attn_tokenizer *t = from_file(FIXTURES "tiny-qwen2.tokenizer.json");
    attn_tokenizer_info info;
    attn_tokenizer_describe(t, &info);
    assert_int_equal(info.kind, ATTN_TOKENIZER_BPE);
    assert_int_equal(info.vocab_size, 661);
    assert_int_equal(info.n_merges, 400);
    assert_string_equal(info.pre, "qwen2");
    assert_int_equal(info.add_bos, 0);
    attn_token_type type;
    assert_ok(attn_tokenizer_token(t, 657, NULL, NULL, &type));
    assert_int_equal(type, ATTN_TOKEN_CONTROL);
    assert_ok(attn_tokenizer_token(t, 659, NULL, NULL, &type));
    assert_int_equal(type, ATTN_TOKEN_USER_DEFINED);
    tok_fixture_check(t, "tiny-qwen2", FIXTURES "tiny-qwen2.txt");
    attn_tokenizer_free(t);
}

static void tiny_gpt2_matches_reference(void **state) {
    (void)state;
    attn_tokenizer *t = from_file(FIXTURES "tiny-gpt2.tokenizer.json");
    attn_tokenizer_info info;
    attn_tokenizer_describe(t, &info);
    assert_string_equal(info.pre, "gpt2");
    assert_int_equal(info.n_merges, 400);
    tok_fixture_check(t, "tiny-gpt2", FIXTURES "tiny-gpt2.txt");
    attn_tokenizer_free(t);
}

/* A real model's tokenizer.json (committed gzipped), inflated into memory,
 * against the GGUF fixture's reference ids (transformers' for the
 * tokenizer this file was saved from), and, when the model's GGUF is in
 * $ATTN_MODEL_DIR, against the GGUF's own tokenizer: every id's piece the
 * same, the same control tokens, both identical on the fixture. */
static void check_model_json(const char *gz_name, const char *fixture, const char *gguf, int64_t vocab,
                             int64_t merges) {
#ifndef ATTN_TEST_HAVE_ZLIB
    (void)gz_name, (void)fixture, (void)gguf, (void)vocab, (void)merges;
    print_message("skipped: this test build has no zlib to inflate the gzipped tokenizer.json\n");
    skip();
#else
    char gz_path[512];
    snprintf(gz_path, sizeof gz_path, FIXTURES "%s", gz_name);
    gzFile gz = gzopen(gz_path, "rb");
    assert_non_null(gz);
    size_t cap = 16u << 20, n = 0;
    char *json = malloc(cap);
    assert_non_null(json);
    for (int got; (got = gzread(gz, json + n, (unsigned)(cap - n))) > 0;) {
        n += (size_t)got;
        if (n == cap) {
            cap *= 2;
            json = realloc(json, cap);
            assert_non_null(json);
        }
    }
    gzclose(gz);
    attn_tokenizer *t = NULL;
    attn_status st = attn_tokenizer_from_json(json, n, &t);
    free(json);
    tok_skip_without_pcre2(st);
    assert_ok(st);
    attn_tokenizer_info info;
    attn_tokenizer_describe(t, &info);
    assert_int_equal(info.vocab_size, vocab);
    assert_int_equal(info.n_merges, merges);
    print_message("%s: %.1f MB\n", gz_name, (double)info.memory_bytes / 1e6);
    tok_fixture_check(t, gz_name, fixture);

    const char *dir = getenv("ATTN_MODEL_DIR"), *home = getenv("HOME");
    char path[768];
    if (dir && *dir)
        snprintf(path, sizeof path, "%s/%s", dir, gguf);
    else
        snprintf(path, sizeof path, "%s/.cache/attn/models/%s", home ? home : "", gguf);
    struct stat sb;
    if (stat(path, &sb) == 0) {
        attn_gguf *g;
        assert_ok(attn_gguf_open(path, &g));
        attn_tokenizer *tg;
        assert_ok(attn_tokenizer_from_gguf(g, &tg));
        attn_gguf_free(g);
        int64_t differ = 0, types_differ = 0;
        for (int32_t id = 0; id < info.vocab_size; id++) {
            const char *a, *b;
            size_t la, lb;
            attn_token_type ta, tb;
            assert_ok(attn_tokenizer_token(t, id, &a, &la, &ta));
            assert_ok(attn_tokenizer_token(tg, id, &b, &lb, &tb));
            differ += la != lb || memcmp(a, b, la) != 0;
            types_differ += (ta == ATTN_TOKEN_CONTROL) != (tb == ATTN_TOKEN_CONTROL);
        }
        print_message("%s: tokenizer.json and GGUF: %lld pieces differ, %lld control flags differ\n", gguf,
                      (long long)differ, (long long)types_differ);
        assert_int_equal(differ, 0);
        assert_int_equal(types_differ, 0);
        tok_fixture_check(tg, gguf, fixture);
        attn_tokenizer_free(tg);
    } else {
        print_message("%s is not there: the GGUF comparison is skipped\n", path);
    }
    attn_tokenizer_free(t);
#endif
}

static void qwen_tokenizer_json(void **state) {
    (void)state;
    check_model_json("qwen2.5-coder-0.5b.tokenizer.json.gz", FIXTURES "qwen2.5-coder-0.5b.txt",
                     "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", 151936, 151387);
}

/* SmolLM2's: GPT-2's ByteLevel pre-tokenizer, no model.unk_token (the 21
 * bytes without a letter are dropped). */
static void smollm2_tokenizer_json(void **state) {
    (void)state;
    check_model_json("smollm2-135m.tokenizer.json.gz", FIXTURES "smollm2-135m.txt", "smollm2-135m-instruct-q4_1.gguf",
                     49152, 48900);
}

/* Gemma's shape of tokenizer.json, small: a SentencePiece-style BPE
 * (spaces as U+2581, byte fallback, <unk> fused, <bos> added, explicit
 * merges ranked as listed), special tokens taking white space on their
 * left (<mask>, lstrip) or right (<sep>, rstrip), a normalized non-special
 * one (<tool>). */
static void tiny_gemma_matches_reference(void **state) {
    (void)state;
    attn_tokenizer *t = NULL;
    assert_ok(attn_tokenizer_from_json_file(FIXTURES "tiny-gemma.tokenizer.json", &t));
    attn_tokenizer_info info;
    attn_tokenizer_describe(t, &info);
    assert_int_equal(info.kind, ATTN_TOKENIZER_SPM);
    assert_int_equal(info.bos_id, 2);
    assert_int_equal(info.unk_id, 3);
    assert_int_equal(info.add_bos, 1);
    assert_true(info.n_merges > 500);
    tok_fixture_check(t, "tiny-gemma", FIXTURES "tiny-gemma.txt");
    attn_tokenizer_free(t);
}

/* --------------------------------------------------- a byte-built file */

/* A tokenizer.json: the 256 byte letters (ids 0..255, GPT-2's alphabet by
 * its construction), "he" (256), "<|end|>" (257, special), "<tool>" (258,
 * not special); one merge h + e; Qwen2's pre-tokenizer. */
static char *base_json(void) {
    size_t cap = 1 << 16, n = 0;
    char *s = malloc(cap);
    n += (size_t)snprintf(s + n, cap - n,
                          "{\"version\": \"1.0\", \"added_tokens\": [{\"id\": 257, \"content\": \"<|end|>\", "
                          "\"special\": true, \"lstrip\": false}, {\"id\": 258, \"content\": \"<tool>\", \"special\": "
                          "false}], \"normalizer\": null, \"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": "
                          "[{\"type\": \"Split\", \"pattern\": {\"Regex\": \"(?i:'s|'t|'re|'ve|'m|'ll|'d)|"
                          "[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}| ?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|"
                          "\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+\"}, \"behavior\": \"Isolated\", \"invert\": false}, "
                          "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": false}]}, "
                          "\"post_processor\": null, \"decoder\": {\"type\": \"ByteLevel\"}, \"model\": {\"type\": "
                          "\"BPE\", \"dropout\": null, \"byte_fallback\": false, \"vocab\": {");
    int next = 256;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        int cp = printable ? b : next++;
        char letter[4] = {0};
        if (cp < 0x80) letter[0] = (char)cp;
        else letter[0] = (char)(0xC0 | cp >> 6), letter[1] = (char)(0x80 | (cp & 0x3F));
        n += (size_t)snprintf(s + n, cap - n, "\"%s%s\": %d, ", cp == '"' || cp == '\\' ? "\\" : "", letter, b);
    }
    snprintf(s + n, cap - n, "\"he\": 256, \"<|end|>\": 257, \"<tool>\": 258}, \"merges\": [[\"h\", \"e\"]]}}");
    return s;
}

/* base (freed) with its first `find` replaced by `with`. */
static char *replaced(char *base, const char *find, const char *with) {
    char *at = strstr(base, find);
    if (!at) fail_msg("the tokenizer.json has no '%s'", find);
    size_t n = strlen(base) + strlen(with) + 1;
    char *s = malloc(n);
    snprintf(s, n, "%.*s%s%s", (int)(at - base), base, with, at + strlen(find));
    free(base);
    return s;
}

static char *edited(const char *find, const char *with) { return replaced(base_json(), find, with); }

/* The ids of text, as "1 2 3". */
static const char *ids_of(const attn_tokenizer *t, const char *text) {
    static char line[512];
    int32_t ids[64];
    size_t n, at = 0;
    assert_ok(attn_tokenizer_encode(t, text, strlen(text), 0, ids, 64, &n));
    line[0] = 0;
    for (size_t i = 0; i < n; i++) at += (size_t)snprintf(line + at, sizeof line - at, "%s%d", i ? " " : "", ids[i]);
    return line;
}

/* A vocabulary without the letter of 'x' (SmolLM2's lacks 21 letters):
 * with no model.unk_token the byte is dropped before the merges (h and e
 * meet and merge); with one, it is that token, one per byte, or one per run
 * with fuse_unk.  The expected ids are what tokenizers 0.23.3 gives for
 * the same vocabulary, merges and pre-tokenizer built in Python (checked
 * once, by hand). */
static void bytes_without_letters(void **state) {
    (void)state;
    char *json = edited("\"x\": 120", "\"[x]\": 120");
    attn_tokenizer *t;
    attn_status st = attn_tokenizer_from_json(json, strlen(json), &t);
    tok_skip_without_pcre2(st);
    assert_ok(st);
    assert_string_equal(ids_of(t, "hxe"), "256");
    assert_string_equal(ids_of(t, "axxb xx"), "97 98 32");
    attn_tokenizer_free(t);
    json = replaced(json, "\"dropout\": null", "\"dropout\": null, \"unk_token\": \"<tool>\"");
    assert_ok(attn_tokenizer_from_json(json, strlen(json), &t));
    assert_string_equal(ids_of(t, "hxe"), "104 258 101");
    assert_string_equal(ids_of(t, "axxb xx"), "97 258 258 98 32 258 258");
    attn_tokenizer_info info;
    attn_tokenizer_describe(t, &info);
    assert_int_equal(info.unk_id, 258);
    attn_tokenizer_free(t);
    json = replaced(json, "\"dropout\": null", "\"dropout\": null, \"fuse_unk\": true");
    assert_ok(attn_tokenizer_from_json(json, strlen(json), &t));
    assert_string_equal(ids_of(t, "axxb xx"), "97 258 98 32 258");
    attn_tokenizer_free(t);
    free(json);
}

static void byte_built_file_works(void **state) {
    (void)state;
    char *json = base_json();
    attn_tokenizer *t;
    attn_status st = attn_tokenizer_from_json(json, strlen(json), &t);
    tok_skip_without_pcre2(st);
    assert_ok(st);
    int32_t ids[16];
    size_t n;
    assert_ok(attn_tokenizer_encode(t, "hello<|end|><tool>", 18, 0, ids, 16, &n));
    const int32_t want[] = {256, 'l', 'l', 'o', 257, 258}; /* a printable byte's letter is itself */
    assert_int_equal(n, 6);
    assert_memory_equal(ids, want, sizeof want);
    attn_tokenizer_info info;
    attn_tokenizer_describe(t, &info);
    assert_int_equal(info.bos_id, -1);
    assert_int_equal(info.add_bos, 0);
    attn_tokenizer_free(t);
    free(json);

    /* A TemplateProcessing [<|end|>, A] is a BOS. */
    json = edited("\"post_processor\": null", "\"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": "
                  "[{\"SpecialToken\": {\"id\": \"<|end|>\", \"type_id\": 0}}, {\"Sequence\": {\"id\": \"A\", "
                  "\"type_id\": 0}}], \"special_tokens\": {}}");
    assert_ok(attn_tokenizer_from_json(json, strlen(json), &t));
    assert_ok(attn_tokenizer_encode(t, "he", 2, 0, ids, 16, &n));
    assert_int_equal(n, 2);
    assert_int_equal(ids[0], 257);
    assert_int_equal(ids[1], 256);
    attn_tokenizer_free(t);

    /* tokenizer_config.json beside it: BOS, EOS, pad, add_bos_token. */
    free(json);
    json = base_json();
    const char *dir = test_tmpdir();
    char path[512];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs(json, f);
    fclose(f);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    f = fopen(path, "wb");
    assert_non_null(f);
    fputs("{\"bos_token\": {\"content\": \"<|end|>\"}, \"eos_token\": \"<tool>\", \"pad_token\": null, "
          "\"add_bos_token\": true}", f);
    fclose(f);
    assert_ok(attn_tokenizer_from_json_file(dir, &t));
    attn_tokenizer_describe(t, &info);
    assert_int_equal(info.bos_id, 257);
    assert_int_equal(info.eos_id, 258);
    assert_int_equal(info.pad_id, -1);
    assert_int_equal(info.add_bos, 1);
    attn_tokenizer_free(t);
    f = fopen(path, "wb");
    fputs("{\"bos_token\": \"<s>\"}", f);
    fclose(f);
    st = attn_tokenizer_from_json_file(dir, &t);
    assert_int_equal(st, ATTN_ERR_FORMAT);
    assert_non_null(strstr(attn_last_error(), "bos_token '<s>' is not a token"));
    assert_non_null(strstr(attn_last_error(), "tokenizer.json"));
    /* A key given twice (Python's json takes the last, cJSON the first). */
    f = fopen(path, "wb");
    fputs("{\"add_bos_token\": false, \"bos_token\": \"<|end|>\", \"add_bos_token\": true}", f);
    fclose(f);
    assert_refused(attn_tokenizer_from_json_file(dir, &t), ATTN_ERR_FORMAT,
                   "tokenizer_config.json: the key \"add_bos_token\" is given twice in the top-level object");
    f = fopen(path, "wb");
    fputs("{\"added_tokens_decoder\": {\"257\": {\"content\": \"<|end|>\", \"special\": true, "
          "\"special\": false}}}", f);
    fclose(f);
    assert_refused(attn_tokenizer_from_json_file(dir, &t), ATTN_ERR_FORMAT,
                   "the key \"special\" is given twice in \"added_tokens_decoder.257\"");
    remove(path);

    /* attn tokenize --model DIR reads the directory's tokenizer.json. */
    char *out;
    assert_int_equal(test_run_cli(&out, "tokenize --model %s --ids --text 'hello<|end|>'", dir), 0);
    assert_string_equal(out, "256 108 108 111 257\n");
    free(out);
    assert_int_equal(test_run_cli(&out, "detokenize --model %s/tokenizer.json 256 108 257", dir), 0);
    assert_string_equal(out, "hel<|end|>");
    free(out);
    free(json);
    assert_int_equal(attn_tokenizer_from_json(NULL, 0, NULL), ATTN_ERR_INVALID_ARGUMENT);
    snprintf(path, sizeof path, "%s/none", dir);
    assert_int_equal(attn_tokenizer_from_json_file(path, &t), ATTN_ERR_IO);
    assert_null(t);
    /* A file over the bound (sparse: no byte written) is refused before it
     * is mapped, by name and size. */
    snprintf(path, sizeof path, "%s/huge.json", dir);
    f = fopen(path, "wb");
    assert_non_null(f);
    fclose(f);
    assert_int_equal(truncate(path, (512 << 20) + 1), 0);
    assert_int_equal(attn_tokenizer_from_json_file(path, &t), ATTN_ERR_FORMAT);
    assert_null(t);
    assert_non_null(strstr(attn_last_error(), "huge.json' is 536870913 bytes: a tokenizer file is at most 512 MiB"));
    remove(path);
}

/* ------------------------------------------------------------- hostile */

static const struct hostile {
    const char *find, *with; /* the edit of the base file */
    attn_status want;
    const char *keyword;     /* in the message */
} hostile_rows[] = {
    {"\"model\": {", "\"model\": {,", ATTN_ERR_FORMAT, "not valid JSON (at byte"},
    {"{\"version\"", "[{\"version\"", ATTN_ERR_FORMAT, "not valid JSON"},
    {"\"type\": \"BPE\"", "\"type\": \"Unigram\"", ATTN_ERR_UNSUPPORTED, "model.type 'Unigram'"},
    {"\"type\": \"BPE\"", "\"type\": \"WordPiece\"", ATTN_ERR_UNSUPPORTED, "model.type 'WordPiece'"},
    {"\"type\": \"BPE\"", "\"type\": 7", ATTN_ERR_FORMAT, "model is not an object with a \"type\""},
    {"[[\"h\", \"e\"]]", "[[\"h\", \"q\"]]", ATTN_ERR_FORMAT, "model.merges[0] 'h q': 'hq' is not a token"},
    {"[[\"h\", \"e\"]]", "[[\"zz\", \"e\"]]", ATTN_ERR_FORMAT, "'zz' is not a token"},
    {"[[\"h\", \"e\"]]", "[\"h e\", \"h  e\"]", ATTN_ERR_FORMAT, "merges[1] 'h  e' is not two tokens"},
    {"[[\"h\", \"e\"]]", "[[\"h\"]]", ATTN_ERR_FORMAT, "merges[0] is neither"},
    {"[[\"h\", \"e\"]]", "{}", ATTN_ERR_FORMAT, "model.merges is not an array"},
    {"\"he\": 256", "\"he\": 100000", ATTN_ERR_FORMAT, "id 100000, but model.vocab and added_tokens give 261"},
    {"\"he\": 256", "\"he\": 4000000000", ATTN_ERR_FORMAT, "'he': its id is not an integer"},
    {"\"he\": 256", "\"he\": 1e300", ATTN_ERR_FORMAT, "'he': its id is not an integer"},
    {"\"he\": 256", "\"he\": -1", ATTN_ERR_FORMAT, "'he': its id is not an integer"},
    {"\"he\": 256", "\"he\": 2.5", ATTN_ERR_FORMAT, "'he': its id is not an integer"},
    {"\"he\": 256", "\"he\": 255", ATTN_ERR_FORMAT, "both have id 255"},
    {"\"he\": 256", "\"he\": 256, \"he\": 259", ATTN_ERR_FORMAT, "'he' has two ids"},
    {"\"he\": 256", "\"xy\": 259", ATTN_ERR_FORMAT, "no token has id 256"},
    {"\"he\": 256", "\"\": 256", ATTN_ERR_FORMAT, "an empty token (id 256)"},
    {"\"dropout\": null", "\"unk_token\": \"<nope>\"", ATTN_ERR_FORMAT, "model.unk_token '<nope>' is not a token"},
    {"\"dropout\": null", "\"unk_token\": 3", ATTN_ERR_FORMAT, "model.unk_token is not a string"},
    {"\"dropout\": null", "\"fuse_unk\": 1", ATTN_ERR_FORMAT, "model.fuse_unk is not true or false"},
    {"\"content\": \"<|end|>\"", "\"content\": \"<|other|>\"", ATTN_ERR_FORMAT,
     "added_tokens[0] gives id 257 the text '<|other|>', but it is '<|end|>'"},
    {"\"id\": 258, \"content\": \"<tool>\"", "\"id\": 257, \"content\": \"<|end|>\"", ATTN_ERR_FORMAT,
     "added_tokens[1]: id 257 is added twice"},
    {"\"id\": 257", "\"id\": \"257\"", ATTN_ERR_FORMAT, "added_tokens[0] is not {\"id\""},
    {"\"lstrip\": false", "\"single_word\": true", ATTN_ERR_UNSUPPORTED, "has single_word set"},
    {"\"lstrip\": false", "\"lstrip\": 1", ATTN_ERR_FORMAT, "added_tokens[0].lstrip is not true or false"},
    {"\"byte_fallback\": false", "\"byte_fallback\": 0", ATTN_ERR_FORMAT, "model.byte_fallback is not true or false"},
    {"\"decoder\": {\"type\": \"ByteLevel\"}", "\"decoder\": {\"type\": \"Sequence\", \"decoders\": [{\"type\": "
     "\"ByteFallback\"}]}", ATTN_ERR_UNSUPPORTED, "decoder 'Sequence': implemented are ByteLevel"},
    {"\"special\": true", "\"special\": 1", ATTN_ERR_FORMAT, "added_tokens[0].special is not true or false"},
    {"\"added_tokens\": [", "\"added_tokens\": 3, \"x\": [", ATTN_ERR_FORMAT, "added_tokens is not an array"},
    {"\"vocab\": {", "\"vocab\": [], \"v\": {", ATTN_ERR_FORMAT, "model.vocab is not an object"},
    {"\"normalizer\": null", "\"normalizer\": {\"type\": \"NFC\"}", ATTN_ERR_UNSUPPORTED, "normalizer 'NFC'"},
    {"\"Regex\": \"(?i:", "\"Regex\": \"(?x:", ATTN_ERR_UNSUPPORTED, "is none of the pre-tokenizers"},
    {"\"Regex\"", "\"String\"", ATTN_ERR_UNSUPPORTED, "a String pattern is not implemented"},
    {"\"Isolated\"", "\"Removed\"", ATTN_ERR_UNSUPPORTED, "behavior is not \"Isolated\""},
    {"\"invert\": false", "\"invert\": true", ATTN_ERR_UNSUPPORTED, "invert is set"},
    {"\"use_regex\": false", "\"use_regex\": true", ATTN_ERR_UNSUPPORTED, "use_regex is true"},
    {"\"add_prefix_space\": false", "\"add_prefix_space\": true", ATTN_ERR_UNSUPPORTED, "add_prefix_space is set"},
    {"\"type\": \"Sequence\"", "\"type\": \"Whitespace\"", ATTN_ERR_UNSUPPORTED, "pre_tokenizer 'Whitespace'"},
    {"\"decoder\": {\"type\": \"ByteLevel\"}", "\"decoder\": {\"type\": \"WordPiece\"}", ATTN_ERR_UNSUPPORTED,
     "decoder 'WordPiece'"},
    {"\"decoder\": {\"type\": \"ByteLevel\"}", "\"decoder\": null", ATTN_ERR_UNSUPPORTED, "decoder 'null'"},
    {"\"post_processor\": null", "\"post_processor\": {\"type\": \"BertProcessing\"}", ATTN_ERR_UNSUPPORTED,
     "post_processor 'BertProcessing'"},
    {"\"post_processor\": null", "\"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": "
     "[{\"SpecialToken\": {\"id\": \"<s>\"}}, {\"Sequence\": {\"id\": \"A\"}}]}", ATTN_ERR_FORMAT,
     "post_processor's '<s>' is not a token"},
    {"\"post_processor\": null", "\"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": "
     "[{\"Sequence\": {\"id\": \"A\"}}, {\"SpecialToken\": {\"id\": \"<|end|>\"}}]}", ATTN_ERR_UNSUPPORTED,
     "post_processor.single is not [A] or [SPECIAL, A]"},
    {"\"byte_fallback\": false", "\"byte_fallback\": true", ATTN_ERR_UNSUPPORTED, "model.byte_fallback is set"},
    {"\"dropout\": null", "\"dropout\": 0.1", ATTN_ERR_UNSUPPORTED, "dropout"},
    {"\"dropout\": null", "\"continuing_subword_prefix\": \"##\"", ATTN_ERR_UNSUPPORTED,
     "continuing_subword_prefix is set"},
    {"\"dropout\": null", "\"ignore_merges\": true", ATTN_ERR_UNSUPPORTED, "ignore_merges is set"},
    {"\"vocab\": {", "\"vocab\": {}, \"x\": {", ATTN_ERR_FORMAT, "model.vocab is empty"},
};

static void hostile_files(void **state) {
    (void)state;
    char *json = base_json();
    attn_tokenizer *t;
    attn_status st = attn_tokenizer_from_json(json, strlen(json), &t);
    tok_skip_without_pcre2(st);
    assert_ok(st);
    attn_tokenizer_free(t);
    size_t failures = 0;
    for (size_t i = 0; i < sizeof hostile_rows / sizeof hostile_rows[0]; i++) {
        const struct hostile *r = &hostile_rows[i];
        char *bad = edited(r->find, r->with);
        t = (attn_tokenizer *)&t;
        st = attn_tokenizer_from_json(bad, strlen(bad), &t);
        if (st != r->want || !strstr(attn_last_error(), r->keyword) || t != NULL) {
            failures++;
            print_message("row %zu ('%s' -> '%s'): status %d (want %d), \"%s\" (want \"%s\")\n", i, r->find, r->with,
                          (int)st, (int)r->want, attn_last_error(), r->keyword);
        }
        free(bad);
    }
    /* Truncated at every prefix: refused, never a crash (the sanitizers watch). */
    const size_t len = strlen(json);
    for (size_t cut = 0; cut < len; cut += cut < 2000 ? 1 : 97) {
        st = attn_tokenizer_from_json(json, cut, &t);
        if (st != ATTN_ERR_FORMAT) {
            failures++;
            print_message("cut at %zu: status %d, %s\n", cut, (int)st, attn_last_error());
            attn_tokenizer_free(t);
        }
    }
    json[100] = 0;
    st = attn_tokenizer_from_json(json, len, &t);
    if (st != ATTN_ERR_FORMAT || !strstr(attn_last_error(), "NUL byte (at byte 100)")) {
        failures++;
        print_message("NUL: %d %s\n", (int)st, attn_last_error());
    }
    free(json);
    print_message("%zu hostile rows\n", sizeof hostile_rows / sizeof hostile_rows[0]);
    assert_int_equal(failures, 0);
}

/* attn model run DIR --text on the tiny Qwen2 checkpoint, whose
 * tokenizer.json holds the 256 byte letters and no merges: one token per
 * byte, each token's text printed beside its id (a blank as a blank, not
 * the byte-level letter Ġ; a byte inside a character as \xNN, not
 * the letter è the vocabulary spells it with). */
static void model_run_text(void **state) {
    (void)state;
    attn_tokenizer_free(from_file(ATTN_SOURCE_DIR "/tests/fixtures/tiny_models/qwen2")); /* skips without PCRE2 */
    char *out;
    assert_int_equal(test_run_cli(&out, "model run %s/tests/fixtures/tiny_models/qwen2 --text 'hi 苹' --top 2",
                                  ATTN_SOURCE_DIR), 0);
    assert_non_null(strstr(out, "tokens (6): 104 \"h\" 105 \"i\" 32 \" \" 232 \"\\xe8\" 139 \"\\x8b\" 185 \"\\xb9\""));
    assert_non_null(strstr(out, "next token after position 5 (id 185)"));
    free(out);
    /* The same ids as --ids give the same next tokens. */
    char *by_ids;
    assert_int_equal(test_run_cli(&by_ids, "model run %s/tests/fixtures/tiny_models/qwen2 --ids 104,105,32,232,139,185 "
                                  "--top 2", ATTN_SOURCE_DIR), 0);
    assert_int_equal(test_run_cli(&out, "model run %s/tests/fixtures/tiny_models/qwen2 --text 'hi 苹' --top 2",
                                  ATTN_SOURCE_DIR), 0);
    assert_non_null(strstr(out, strstr(by_ids, "next token")));
    free(out);
    free(by_ids);
    assert_int_equal(test_run_cli(&out, "model run %s/tests/fixtures/tiny_models/gemma3 --text hi", ATTN_SOURCE_DIR), 1);
    assert_non_null(strstr(out, "no tokenizer.json"));
    free(out);
    assert_int_equal(test_run_cli(&out, "model run %s/tests/fixtures/tiny_models/qwen2 --text hi --ids 1",
                                  ATTN_SOURCE_DIR), 2);
    free(out);
}

/* The tiny Gemma-shaped file, edited: byte_fallback off (a character
 * without a token becomes <unk>, fused; the ids are tokenizers 0.23.3's for
 * the file and for the edited file), and the refusals of what the
 * SentencePiece-style reading does not implement. */
static void spm_json_edits(void **state) {
    (void)state;
    FILE *f = fopen(FIXTURES "tiny-gemma.tokenizer.json", "rb");
    assert_non_null(f);
    char *base = calloc(1, 1 << 17);
    const size_t size = fread(base, 1, (1 << 17) - 1, f);
    fclose(f);
    assert_true(size > 0 && size < (1 << 17) - 1);
    attn_tokenizer *t;
    assert_ok(attn_tokenizer_from_json(base, size, &t));
    /* 𝔘 (F0 9D 94 98) and 中 are no tokens: their bytes are. */
    assert_string_equal(ids_of(t, "x\xF0\x9D\x94\x98\xE4\xB8\xADx"), "2 341 248 165 156 160 236 192 181 341");
    attn_tokenizer_free(t);
    char *json = replaced(strdup(base), "\"byte_fallback\": true", "\"byte_fallback\": false");
    assert_ok(attn_tokenizer_from_json(json, strlen(json), &t));
    assert_string_equal(ids_of(t, "x\xF0\x9D\x94\x98\xE4\xB8\xADx"), "2 341 3 341");
    attn_tokenizer_free(t);
    free(json);
    static const struct hostile rows[] = {
        {"\"content\": \"\u2581\"", "\"content\": \"_\"", ATTN_ERR_UNSUPPORTED,
         "normalizer 'Replace': a SentencePiece-style BPE (Gemma's) is implemented with Replace"},
        {"\"behavior\": \"MergedWithPrevious\"", "\"behavior\": \"Isolated\"", ATTN_ERR_UNSUPPORTED,
         "pre_tokenizer 'Split': a SentencePiece-style BPE"},
        {"\"content\": \"<tool>\"", "\"content\": \"<to ol>\"", ATTN_ERR_UNSUPPORTED,
         "the added token '<to ol>' is normalized and holds a space"},
        {"\"unk_token\": \"<unk>\"", "\"unk_token\": \"<none>\"", ATTN_ERR_FORMAT,
         "model.unk_token '<none>' is not a token"},
        {"\"type\": \"ByteFallback\"", "\"type\": \"Strip\"", ATTN_ERR_UNSUPPORTED, "decoder 'Sequence'"},
    };
    size_t failures = 0;
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        char *bad = replaced(strdup(base), rows[i].find, rows[i].with);
        t = (attn_tokenizer *)&t;
        attn_status st = attn_tokenizer_from_json(bad, strlen(bad), &t);
        if (st != rows[i].want || !strstr(attn_last_error(), rows[i].keyword) || t != NULL) {
            failures++;
            print_message("row %zu: status %d (want %d), \"%s\" (want \"%s\")\n", i, (int)st, (int)rows[i].want,
                          attn_last_error(), rows[i].keyword);
        }
        free(bad);
    }
    free(base);
    assert_int_equal(failures, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(tiny_qwen2_matches_reference),
        cmocka_unit_test(tiny_gpt2_matches_reference),
        cmocka_unit_test(qwen_tokenizer_json),
        cmocka_unit_test(smollm2_tokenizer_json),
        cmocka_unit_test(tiny_gemma_matches_reference),
        cmocka_unit_test(spm_json_edits),
        cmocka_unit_test(byte_built_file_works),
        cmocka_unit_test(bytes_without_letters),
        cmocka_unit_test(hostile_files),
        cmocka_unit_test(model_run_text),
    };
    return cmocka_run_group_tests(tests, NULL, test_group_teardown);
}
