/*
 * chat_template_fuzz.c — libFuzzer target for the chat-template
 * interpreter (attn_chat.h): a template parsed, then rendered.
 *
 * Input: the template's text, optionally followed by a NUL byte and a JSON
 * object of variables (a conversation: messages, add_generation_prompt,
 * tools, ...).  Without variables the template is rendered over a fixed
 * three-turn conversation, with and without the generation prompt.  Both
 * the parser and the renderer must accept or refuse with a message, never
 * crash, leak or run away (small step and memory budgets here); a render
 * that succeeds must give exactly *len bytes, NUL-terminated.  Seeds:
 * fuzz/corpus/chat/ (the real models' templates of tests/fixtures/chat/,
 * some with a conversation after the NUL).
 */
#include "attn.h"
#include "attn_chat.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void render(const attn_chat_template *t, const char *variables, int add_generation_prompt) {
    static const attn_chat_message conversation[] = {
        {"system", "Be brief."}, {"user", "Hello {{ x }} 苹果"}, {"assistant", " hi \n"}};
    attn_chat_options opt = ATTN_CHAT_OPTIONS_INIT;
    opt.add_generation_prompt = add_generation_prompt;
    opt.bos_token = "<s>";
    opt.eos_token = "</s>";
    opt.variables_json = variables;
    opt.max_steps = 100000;
    opt.max_bytes = 32 << 20;
    char *text = NULL;
    size_t len = 0;
    const attn_status st = attn_chat_template_render(t, conversation, 3, &opt, &text, &len);
    if (st == ATTN_OK) {
        if (!text || text[len] != '\0' || strlen(text) > len) __builtin_trap();
    } else if (text || attn_last_error()[0] == '\0') {
        __builtin_trap();
    }
    free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    const size_t template_len = nul ? (size_t)(nul - data) : size;
    attn_chat_template *t = NULL;
    if (attn_chat_template_parse((const char *)data, template_len, &t) != ATTN_OK) {
        if (t || attn_last_error()[0] == '\0') __builtin_trap();
        return 0;
    }
    if (nul) {
        /* The variables, NUL-terminated (they stop at a second NUL). */
        const size_t n = size - template_len - 1;
        char *variables = malloc(n + 1);
        if (variables) {
            memcpy(variables, nul + 1, n);
            variables[n] = '\0';
            render(t, variables, 1);
            free(variables);
        }
    } else {
        render(t, NULL, 1);
        render(t, NULL, 0);
    }
    attn_chat_template_free(t);
    return 0;
}
