/*
 * attn_chat.h — a model's chat template, rendered: the text a chat model
 * is given for a conversation (libattn_model; pkg-config attn-model, CMake
 * attn::model).
 *
 * Models carry their prompt format as a Jinja template: a GGUF file's
 * tokenizer.chat_template, a checkpoint's tokenizer_config.json
 * "chat_template".  Hugging Face transformers renders it with jinja2
 * (apply_chat_template); attn has its own interpreter of the part of Jinja
 * those templates use, and renders the same text, byte for byte
 * (tests/fixtures/chat/: the templates of Qwen2.5, Qwen3, Gemma 2, Llama 3,
 * 3.1 and 3.2, SmolLM2 and others, each on 20+ conversations, checked
 * against transformers).  docs/chat.md lists what is implemented.
 *
 * What it does as transformers' environment does: trim_blocks and
 * lstrip_blocks, a single trailing newline of the template dropped, the
 * loop controls ({% break %}, {% continue %}), raise_exception(msg),
 * strftime_now(fmt), namespace(), dict(), range(), the tojson filter as
 * json.dumps(ensure_ascii=False) writes; an immutable sandbox (lists and
 * dicts cannot be changed in place).  Values are JSON's (strings, numbers,
 * true/false/null, lists, objects) plus what Jinja adds (undefined,
 * namespaces, the loop); strings are UTF-8, indexed, sliced and counted by
 * characters (code points) as Python does.
 *
 * What it refuses: any construct it does not implement (macros, include,
 * call blocks, a filter, test, method or global it does not have, Python's
 * %-formatting, ...) is ATTN_ERR_UNSUPPORTED naming it with its line and
 * column — when the template is parsed if it can be seen there (tags,
 * filters, tests), else when the render reaches it.  Nothing is
 * approximated: a render either gives transformers' text or fails.
 *
 * Errors (attn_last_error has the message, with "line L, column C"):
 *   ATTN_ERR_FORMAT        a syntax error in the template (jinja2's
 *                          TemplateSyntaxError), invalid UTF-8 in it, a
 *                          bad JSON variable
 *   ATTN_ERR_UNSUPPORTED   a construct not implemented (above)
 *   ATTN_ERR_INVALID_ARGUMENT  the conversation does not fit the template:
 *                          raise_exception was called (the message is the
 *                          template's, e.g. "Conversation roles must
 *                          alternate user/assistant/user/assistant/..."),
 *                          or a runtime error jinja2 raises too (an
 *                          undefined value used, a type error: "'str' + 'int'")
 *   ATTN_ERR_BUDGET        a render past its step or memory budget (below)
 *
 * Threads: a parsed template is read-only; renders may run on it from any
 * number of threads at once.
 */
#ifndef ATTN_CHAT_H
#define ATTN_CHAT_H

#include "attn.h"
#include "attn_gguf.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct attn_chat_template attn_chat_template; /* opaque, read-only once parsed */

/* Parses text[0 .. len) (UTF-8, not NUL-terminated).  Syntax errors and
 * the constructs not implemented are found here (above). */
ATTN_API attn_status attn_chat_template_parse(const char *text, size_t len, attn_chat_template **out);
/* Frees it (NULL is allowed). */
ATTN_API void attn_chat_template_free(attn_chat_template *t);

/* The template a model carries, parsed: a GGUF file's
 * tokenizer.chat_template; for a Hugging Face checkpoint (a directory, or
 * a file in it), chat_template.jinja in that directory (transformers 4.43
 * and later save it there), else tokenizer_config.json's "chat_template"
 * (a string, or a list of {"name", "template"}: the one named "default").
 * ATTN_ERR_FORMAT when the model has none (a base model), with a message
 * that says so; the parse's errors name the file. */
ATTN_API attn_status attn_chat_template_from_gguf(const attn_gguf *g, attn_chat_template **out);
ATTN_API attn_status attn_chat_template_from_checkpoint(const char *path, attn_chat_template **out);

/* The ids a checkpoint says end a generation: generation_config.json's
 * eos_token_id (an integer or a list of them; what transformers' generate
 * stops at), else config.json's, into ids [max]; *n gets how many (0 when
 * neither file names one).  For a GGUF file: tokenizer.ggml.eos_token_id,
 * eot_token_id, eom_token_id (attn_tokenizer_end_ids adds the vocabulary's
 * end-of-turn tokens).  ATTN_ERR_FORMAT for a file that is not JSON or an
 * id that is not an integer in [0, 2^31). */
ATTN_API attn_status attn_chat_end_ids_from_checkpoint(const char *path, int32_t *ids, int max, int *n);
ATTN_API attn_status attn_chat_end_ids_from_gguf(const attn_gguf *g, int32_t *ids, int max, int *n);

/* One message of a conversation: NUL-terminated UTF-8. */
typedef struct attn_chat_message {
    const char *role;    /* "system", "user", "assistant", ... */
    const char *content;
} attn_chat_message;

typedef struct attn_chat_options {
    size_t struct_size;
    int add_generation_prompt; /* 1: end with the header of the assistant's turn   */
    /* The tokenizer's special tokens, as transformers passes them (its
     * special_tokens_map): NULL = not defined in the template. */
    const char *bos_token, *eos_token, *unk_token, *pad_token;
    /* More variables, as a JSON object (UTF-8, NUL-terminated; NULL: none):
     * each member is a variable of the template, e.g.
     *   {"enable_thinking": false, "date_string": "26 Jul 2024",
     *    "tools": [{"type": "function", "function": {...}}]}
     * A member named messages replaces the messages given as structs (then
     * a message's content may be a list of parts, as multimodal templates
     * read it); one named like another option replaces it. */
    const char *variables_json;
    /* The conversation as a JSON array of messages ([{"role": "user",
     * "content": "..."}, ...]; UTF-8, NUL-terminated), replacing the
     * messages given as structs (NULL: those). */
    const char *messages_json;
    /* Budgets of one render (0 = the defaults): expressions and statements
     * evaluated (default 50,000,000) and bytes of values and output held at
     * once (default 256 MiB).  ATTN_ERR_BUDGET beyond them. */
    int64_t max_steps;
    int64_t max_bytes;
} attn_chat_options;

#define ATTN_CHAT_OPTIONS_INIT {.struct_size = sizeof(attn_chat_options)}

/* Renders the conversation messages[0 .. n) with template t, as
 * transformers' apply_chat_template(messages, add_generation_prompt=...,
 * tokenize=False) does: the variables are messages (each a {role,
 * content} object; keys whose value is null are dropped, reasoning fields
 * are aliased as transformers does), tools and documents (none),
 * add_generation_prompt, the special tokens given, and variables_json's.
 * *out gets the text (NUL-terminated; *len its bytes without the NUL, len
 * may be NULL), to be freed with free().  opt NULL: the defaults. */
ATTN_API attn_status attn_chat_template_render(const attn_chat_template *t, const attn_chat_message *messages, size_t n,
                                               const attn_chat_options *opt, char **out, size_t *len);

#ifdef __cplusplus
}
#endif

#endif /* ATTN_CHAT_H */
