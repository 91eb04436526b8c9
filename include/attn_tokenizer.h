/*
 * attn_tokenizer.h — text to token ids and back, from a GGUF file's
 * vocabulary (libattn_model; pkg-config attn-model, CMake attn::model).
 *
 * Formats (what goes in and out):
 *   text     bytes, normally UTF-8; NOT NUL-terminated (a length is given),
 *            so a text may hold NUL bytes.  Invalid UTF-8 is encoded too
 *            (below), never refused.
 *   ids      int32, 0 .. vocab_size-1, in the caller's buffer
 *   decoded  bytes, NUL-terminated in the caller's buffer; the length
 *            returned excludes the NUL.  Raw bytes by default (a token may
 *            end inside a character, so decoding a part of a sequence can
 *            give invalid UTF-8); ATTN_DECODE_VALID_UTF8 replaces each
 *            invalid byte with U+FFFD, as Hugging Face's decoders do.
 *   pieces   a token's string as the GGUF spells it: "Ġhello" (byte-level,
 *            GPT-2's byte alphabet), "▁hello" (SentencePiece, U+2581 for a
 *            space), "<0x41>" (a byte-fallback token), "<|im_start|>"
 *
 * Two kinds, chosen by the GGUF's tokenizer.ggml.model:
 *   "gpt2"   byte-level BPE (GPT-2, Qwen2, SmolLM2): special tokens matched
 *            first, the rest split by the pre-tokenizer's regular
 *            expression (tokenizer.ggml.pre; PCRE2, UTF-8 and Unicode
 *            properties), each piece's bytes spelled in the byte alphabet
 *            and merged by the rank of tokenizer.ggml.merges; a byte whose
 *            letter the vocabulary lacks (SmolLM2 lacks 21) is dropped
 *            before the merges, as the reference's BPE drops it.
 *   "llama"  SentencePiece-style vocabulary (Gemma 3): special tokens matched
 *            first, spaces written U+2581, then characters merged pairwise,
 *            best token first (the one earliest in the vocabulary), a
 *            character outside the vocabulary spelled by byte-fallback
 *            tokens <0xNN>; BOS prepended when tokenizer.ggml.add_bos_token
 *            says so (the default when the key is absent).
 * or from Hugging Face's tokenizer.json (attn_tokenizer_from_json: byte-level
 * BPE, the same tokenizer as "gpt2" above, or Gemma's SentencePiece-style
 * shape, as "llama": merges, pre-tokenizer and special tokens are one
 * implementation whichever file they came from).
 * Both reproduce Hugging Face transformers' tokenizer built from the same
 * GGUF (tests/fixtures/tokenizer/, docs/tokenizers.md has the algorithms,
 * the reference, and the cases where the two could differ).
 *
 * Special tokens: tokens of type CONTROL (3, e.g. <|im_start|>, <bos>) and
 * USER_DEFINED (4, e.g. <tool_call>, "\n\n") are found in the text before
 * anything else, longest first at the leftmost place, and kept whole.
 * ATTN_ENCODE_SPLIT_SPECIAL reads CONTROL tokens' text as plain text
 * (transformers' split_special_tokens=True); USER_DEFINED ones stay whole.
 *
 * Memory: a tokenizer copies what it needs out of the GGUF (which may be
 * closed afterwards): the token strings, a hash table from string to id,
 * and for BPE one from merge pair to rank — about 30 bytes per token plus
 * its string, and 32 to 64 bytes per merge (the tables are at most half
 * full): Qwen2.5's 151,936 tokens and 151,387 merges take 14.6 MB, Gemma
 * 3's 262,144 tokens 9.2 MB.  attn_tokenizer_describe reports the exact
 * figure.  Encoding allocates scratch proportional to the text (up to about
 * 100 bytes per byte of it) and frees it before returning.
 *
 * Threads: a tokenizer is read-only once built; every function may be
 * called on it from any number of threads at once.
 */
#ifndef ATTN_TOKENIZER_H
#define ATTN_TOKENIZER_H

#include "attn_gguf.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct attn_tokenizer attn_tokenizer; /* opaque */

typedef enum attn_tokenizer_kind {
    ATTN_TOKENIZER_BPE = 1, /* byte-level BPE: tokenizer.ggml.model "gpt2"          */
    ATTN_TOKENIZER_SPM = 2  /* SentencePiece-style: tokenizer.ggml.model "llama"    */
} attn_tokenizer_kind;

/* Token types, numbered as tokenizer.ggml.token_type numbers them. */
typedef enum attn_token_type {
    ATTN_TOKEN_NORMAL = 1,
    ATTN_TOKEN_UNKNOWN = 2,
    ATTN_TOKEN_CONTROL = 3,      /* special: <bos>, <|im_end|>       */
    ATTN_TOKEN_USER_DEFINED = 4, /* added, always matched whole      */
    ATTN_TOKEN_UNUSED = 5,
    ATTN_TOKEN_BYTE = 6          /* <0xNN>, SentencePiece byte fallback */
} attn_token_type;

/* What a tokenizer is (filled in by the library; changes only with the
 * SONAME, as every result struct).  An id is -1 when the GGUF names none. */
typedef struct attn_tokenizer_info {
    attn_tokenizer_kind kind;
    int64_t vocab_size;
    int64_t n_merges;          /* BPE: merges read; SPM: 0                       */
    int32_t bos_id, eos_id, pad_id, unk_id;
    int add_bos;               /* 1: encode prepends bos_id (unless ATTN_ENCODE_NO_BOS) */
    const char *pre;           /* BPE: the pre-tokenizer ("qwen2"); SPM: ""; lives as long as the tokenizer */
    size_t memory_bytes;       /* what the tokenizer holds                        */
} attn_tokenizer_info;

/* Encoding flags. */
enum {
    ATTN_ENCODE_SPLIT_SPECIAL = 1u << 0, /* CONTROL tokens' text is plain text           */
    ATTN_ENCODE_NO_BOS = 1u << 1         /* no BOS even where the model asks for one     */
};
/* Decoding flags. */
enum {
    ATTN_DECODE_SKIP_SPECIAL = 1u << 0, /* CONTROL tokens decode to nothing             */
    ATTN_DECODE_VALID_UTF8 = 1u << 1    /* each byte of an invalid sequence -> U+FFFD   */
};

/* Builds the tokenizer of an opened GGUF from tokenizer.ggml.model, .tokens,
 * .token_type, .scores (SPM; optional for BPE), .merges (BPE), .pre (BPE),
 * .bos_token_id, .eos_token_id, .padding_token_id, .unknown_token_id and
 * .add_bos_token (the ids and flags optional).  Refusals name the key and
 * the problem: ATTN_ERR_FORMAT for a missing or malformed key (an array of
 * another length than tokens, a merge that is not two tokens, an id past
 * the vocabulary), ATTN_ERR_UNSUPPORTED for a model or pre-tokenizer this library does not
 * implement, or a BPE vocabulary in a build without PCRE2.  The GGUF may be
 * closed once this returns. */
ATTN_API attn_status attn_tokenizer_from_gguf(const attn_gguf *g, attn_tokenizer **out);

/* Builds a tokenizer from Hugging Face's tokenizer.json held in memory
 * (buf[0..size), UTF-8 JSON, not NUL-terminated; not kept):
 *   model          {"type": "BPE", "vocab": {"piece": id}, "merges":
 *                  ["a b", ...] or [["a", "b"], ...] (transformers 5),
 *                  unk_token, fuse_unk, byte_fallback}
 *   added_tokens   [{"id", "content", "special", "lstrip", "rstrip",
 *                  "normalized"}]: special -> CONTROL, otherwise
 *                  USER_DEFINED (both matched whole, as in a GGUF)
 *   byte-level BPE (kind BPE): decoder ByteLevel, normalizer null,
 *                  pre_tokenizer ByteLevel (GPT-2's pattern) or Sequence
 *                  [Split {Regex: Qwen2's or GPT-2's pattern, "Isolated"},
 *                  ByteLevel]
 *   Gemma's shape (kind SPM): decoder Sequence [Replace U+2581 -> " ",
 *                  ByteFallback, Fuse], normalizer Replace " " -> U+2581,
 *                  pre_tokenizer null or Split " " MergedWithPrevious
 *   post_processor null, ByteLevel or TemplateProcessing [A] / [BOS, A]
 * Ids of model.vocab and added_tokens together must be 0 .. n-1, each once
 * (vocab_size = n).  No BOS, EOS or pad id is known from tokenizer.json
 * alone (-1; a TemplateProcessing BOS excepted): the file variant reads them
 * from tokenizer_config.json.  ATTN_ERR_UNSUPPORTED names what is not
 * implemented (model.type Unigram, WordPiece, WordLevel; another normalizer,
 * pattern, decoder or template; BPE dropout; byte fallback in a byte-level
 * BPE; single_word), ATTN_ERR_FORMAT
 * the key and the problem (bad JSON and its byte, a merge naming an unknown
 * token, an id out of range, given twice or missing, a token given twice). */
ATTN_API attn_status attn_tokenizer_from_json(const void *buf, size_t size, attn_tokenizer **out);

/* The same from a file: path is tokenizer.json, or a directory holding it
 * (a Hugging Face checkpoint).  A tokenizer_config.json beside it, when
 * there is one, gives bos_token, eos_token, pad_token, unk_token (strings
 * or {"content": ...}, each a token of the file) and add_bos_token.
 * Messages name the file. */
ATTN_API attn_status attn_tokenizer_from_json_file(const char *path, attn_tokenizer **out);

/* Frees it (NULL is allowed). */
ATTN_API void attn_tokenizer_free(attn_tokenizer *t);

ATTN_API void attn_tokenizer_describe(const attn_tokenizer *t, attn_tokenizer_info *info);

/* The ids of text[0..len) into ids[0..capacity).  *n_ids gets the number
 * of ids the text needs, whatever capacity is.  ids = NULL with capacity 0
 * is a size query (ATTN_OK); otherwise a capacity below *n_ids is
 * ATTN_ERR_SHAPE with nothing promised about ids.  (A query encodes the
 * text: an encode into a buffer sized by it costs twice as much as one into
 * a buffer that is large enough — len + 1 ids always are.)
 * flags: ATTN_ENCODE_*. */
ATTN_API attn_status attn_tokenizer_encode(const attn_tokenizer *t, const char *text, size_t len, unsigned flags,
                                           int32_t *ids, size_t capacity, size_t *n_ids);

/* The text of ids[0..n) into out[0..capacity), NUL-terminated.  *len gets
 * the length the text needs (without its NUL), whatever capacity is; out =
 * NULL with capacity 0 is a size query (ATTN_OK); otherwise a capacity below
 * *len + 1 is ATTN_ERR_SHAPE.  An id outside the vocabulary is
 * ATTN_ERR_INVALID_ARGUMENT naming its place.  Pieces are turned back into
 * bytes: BPE through the inverse of the byte alphabet, SPM with U+2581 as a
 * space and <0xNN> as the byte NN; CONTROL and USER_DEFINED tokens as their
 * text.  flags: ATTN_DECODE_*. */
ATTN_API attn_status attn_tokenizer_decode(const attn_tokenizer *t, const int32_t *ids, size_t n, unsigned flags,
                                           char *out, size_t capacity, size_t *len);

/* Token id's piece as the GGUF spells it (*piece NUL-terminated, living as
 * long as the tokenizer; *len its bytes) and its type (either output may be
 * NULL).  ATTN_ERR_INVALID_ARGUMENT for an id outside the vocabulary. */
ATTN_API attn_status attn_tokenizer_token(const attn_tokenizer *t, int32_t id, const char **piece, size_t *len,
                                          attn_token_type *type);

/* The id whose piece is exactly piece[0..len), or -1 (no error set). */
ATTN_API int32_t attn_tokenizer_find(const attn_tokenizer *t, const char *piece, size_t len);

/* The ids that end a generated text: the vocabulary's EOS id and the
 * end-of-turn tokens it has among <|im_end|>, <|endoftext|> and
 * <end_of_turn> (Qwen's GGUF names <|im_end|> as EOS while its base text
 * ends with <|endoftext|>; Gemma's chat turns end with <end_of_turn>), each
 * once, EOS first: at most ATTN_TOKENIZER_MAX_END_IDS into ids.  Returns how
 * many (0 when the vocabulary has none). */
#define ATTN_TOKENIZER_MAX_END_IDS 4
ATTN_API int attn_tokenizer_end_ids(const attn_tokenizer *t, int32_t ids[ATTN_TOKENIZER_MAX_END_IDS]);

#ifdef __cplusplus
}
#endif

#endif /* ATTN_TOKENIZER_H */
