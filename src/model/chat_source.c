/*
 * chat_source.c — where a model keeps its chat template (attn_chat.h): a
 * GGUF file's tokenizer.chat_template; a Hugging Face checkpoint's
 * chat_template.jinja (transformers 4.43 and later save it there), else
 * its tokenizer_config.json "chat_template" (a string, or a list of
 * {"name", "template"} of which "default" is the one used).
 */
#include "model/chat.h"

#include "attn_gguf.h"
#include "io/file.h"

#include <sys/mman.h>
#include <sys/stat.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define CONFIG_MAX_BYTES (64u << 20)

attn_status attn_chat_template_from_gguf(const attn_gguf *g, attn_chat_template **out) {
    if (out) *out = NULL;
    if (!g || !out) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_chat_template_from_gguf: %s is NULL", g ? "out" : "g");
    const char *text;
    size_t len;
    if (attn_gguf_get_string(g, "tokenizer.chat_template", &text, &len) != ATTN_OK)
        return attn__fail(ATTN_ERR_FORMAT,
                          "the GGUF file has no tokenizer.chat_template: the model carries no chat format (a base "
                          "model?); give a template of your own");
    const attn_status st = attn_chat_template_parse(text, len, out);
    if (st) return attn__fail(st, "tokenizer.chat_template: %s", attn_last_error());
    return ATTN_OK;
}

/* The file's bytes (malloc'd, NUL-terminated); *present false when it
 * does not exist. */
static attn_status read_whole(const char *path, char **text, size_t *len, bool *present) {
    *text = NULL;
    *len = 0;
    struct stat sb;
    *present = !(stat(path, &sb) != 0 && errno == ENOENT);
    if (!*present) return ATTN_OK;
    void *map;
    size_t size;
    attn_status st = file_map_regular(path, "chat template files", CONFIG_MAX_BYTES, "a chat template file", &map, &size);
    if (st) return st;
    *text = malloc(size + 1);
    if (*text) {
        if (size) memcpy(*text, map, size);
        (*text)[size] = 0;
        *len = size;
    }
    if (map) munmap(map, size);
    if (!*text) return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "no memory for '%s'", path);
    return ATTN_OK;
}

/* dir/name for a checkpoint at path (a directory, or a file in one), malloc'd; NULL out of memory. */
static char *checkpoint_file(const char *path, const char *name) {
    struct stat sb;
    const bool is_dir = stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
    const char *slash = strrchr(path, '/');
    const size_t dir_len = is_dir ? strlen(path) : slash ? (size_t)(slash - path) : 1;
    const char *dir = is_dir || slash ? path : ".";
    const size_t size = dir_len + strlen(name) + 2;
    char *file = malloc(size);
    if (file) snprintf(file, size, "%.*s/%s", (int)dir_len, dir, name);
    return file;
}

/* tokenizer_config.json's chat_template, parsed (*out NULL when the file
 * has none). */
static attn_status template_of_config(const char *path, const char *json, size_t len, attn_chat_template **out) {
    chat_env *env = calloc(1, sizeof *env);
    if (!env) return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "no memory");
    env->arena.limit = CONFIG_MAX_BYTES * 4u;
    if (setjmp(env->jump)) {
        const attn_status st = env->status;
        chat_arena_free(&env->arena);
        free(env);
        return attn__fail(st, "'%s': %s", path, attn_last_error());
    }
    const chat_value config = chat_from_json(env, json, len, "tokenizer_config.json");
    const chat_value *t = config.kind == CV_DICT ? chat_dict_find(config.u.dict, "chat_template", 13) : NULL;
    attn_status st = ATTN_OK;
    if (t && t->kind == CV_LIST) {
        /* Named templates: the one called "default". */
        const chat_value *chosen = NULL;
        for (size_t k = 0; k < t->u.list->n && !chosen; k++) {
            const chat_value *entry = &t->u.list->items[k];
            const chat_value *name = entry->kind == CV_DICT ? chat_dict_find(entry->u.dict, "name", 4) : NULL;
            if (name && name->kind == CV_STRING && name->n == 7 && memcmp(name->u.s, "default", 7) == 0)
                chosen = chat_dict_find(entry->u.dict, "template", 8);
        }
        if (!chosen)
            chat_fail(env, ATTN_ERR_FORMAT, CHAT_NO_POS, "chat_template is a list without a template named \"default\"");
        t = chosen;
    }
    if (t && t->kind != CV_STRING && t->kind != CV_NONE)
        chat_fail(env, ATTN_ERR_FORMAT, CHAT_NO_POS, "chat_template is a %s, not a string", chat_type_name(t));
    if (t && t->kind == CV_STRING) {
        st = attn_chat_template_parse(t->u.s, t->n, out);
        if (st) st = attn__fail(st, "'%s', chat_template: %s", path, attn_last_error());
    }
    chat_arena_free(&env->arena);
    free(env);
    return st;
}

attn_status attn_chat_template_from_checkpoint(const char *path, attn_chat_template **out) {
    if (out) *out = NULL;
    if (!path || !out)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_chat_template_from_checkpoint: %s is NULL", path ? "out" : "path");
    char *jinja = checkpoint_file(path, "chat_template.jinja"), *config = checkpoint_file(path, "tokenizer_config.json");
    char *text = NULL;
    size_t len;
    bool present;
    attn_status st = !jinja || !config ? attn__fail(ATTN_ERR_OUT_OF_MEMORY, "no memory")
                                       : read_whole(jinja, &text, &len, &present);
    if (!st && present) {
        st = attn_chat_template_parse(text, len, out);
        if (st) st = attn__fail(st, "'%s': %s", jinja, attn_last_error());
    } else if (!st) {
        st = read_whole(config, &text, &len, &present);
        if (!st && present) st = template_of_config(config, text, len, out);
        if (!st && !*out)
            st = attn__fail(ATTN_ERR_FORMAT,
                            "the checkpoint '%s' has no chat template (no chat_template.jinja, no \"chat_template\" "
                            "in tokenizer_config.json): the model carries no chat format; give a template of your own",
                            path);
    }
    free(text);
    free(jinja);
    free(config);
    return st;
}

static void add_id(int32_t id, int32_t *ids, int max, int *n) {
    for (int k = 0; k < *n; k++)
        if (ids[k] == id) return;
    if (*n < max) ids[(*n)++] = id;
}

attn_status attn_chat_end_ids_from_gguf(const attn_gguf *g, int32_t *ids, int max, int *n) {
    if (!g || !ids || !n || max < 0)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_chat_end_ids_from_gguf: %s", !g ? "g is NULL" : "bad ids/n");
    *n = 0;
    static const char *const keys[] = {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
                                       "tokenizer.ggml.eom_token_id"};
    for (int k = 0; k < 3; k++) {
        uint32_t id;
        if (attn_gguf_get_u32(g, keys[k], &id) == ATTN_OK && id <= INT32_MAX) add_id((int32_t)id, ids, max, n);
    }
    return ATTN_OK;
}

/* eos_token_id of the JSON file at path into ids (nothing when the file or
 * the key is absent). */
static attn_status end_ids_of(const char *path, int32_t *ids, int max, int *n) {
    char *text;
    size_t len;
    bool present;
    attn_status st = read_whole(path, &text, &len, &present);
    if (st || !present) return st;
    chat_env *env = calloc(1, sizeof *env);
    if (!env) {
        free(text);
        return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "no memory");
    }
    env->arena.limit = CONFIG_MAX_BYTES * 4u;
    if (setjmp(env->jump)) {
        st = attn__fail(env->status, "'%s': %s", path, attn_last_error());
    } else {
        const chat_value config = chat_from_json(env, text, len, "the file");
        const chat_value *eos = config.kind == CV_DICT ? chat_dict_find(config.u.dict, "eos_token_id", 12) : NULL;
        const chat_value *items = eos && eos->kind == CV_LIST ? eos->u.list->items : eos;
        const size_t count = !eos || eos->kind == CV_NONE ? 0 : eos->kind == CV_LIST ? eos->u.list->n : 1;
        for (size_t k = 0; k < count; k++) {
            if (items[k].kind != CV_INT || items[k].u.i < 0 || items[k].u.i > INT32_MAX)
                chat_fail(env, ATTN_ERR_FORMAT, CHAT_NO_POS, "eos_token_id holds a %s, not a token id",
                          chat_type_name(&items[k]));
            add_id((int32_t)items[k].u.i, ids, max, n);
        }
    }
    chat_arena_free(&env->arena);
    free(env);
    free(text);
    return st;
}

attn_status attn_chat_end_ids_from_checkpoint(const char *path, int32_t *ids, int max, int *n) {
    if (!path || !ids || !n || max < 0)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_chat_end_ids_from_checkpoint: %s",
                          !path ? "path is NULL" : "bad ids/n");
    *n = 0;
    char *generation = checkpoint_file(path, "generation_config.json"), *config = checkpoint_file(path, "config.json");
    attn_status st = !generation || !config ? attn__fail(ATTN_ERR_OUT_OF_MEMORY, "no memory")
                                            : end_ids_of(generation, ids, max, n);
    if (!st && !*n) st = end_ids_of(config, ids, max, n);
    free(generation);
    free(config);
    return st;
}
