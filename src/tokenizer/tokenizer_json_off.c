/*
 * tokenizer_json_off.c — tokenizer.json's reader in a build without cJSON:
 * its entry points say so (formats/cjson_off.h).
 */
#include "attn_tokenizer.h"
#include "formats/cjson_off.h"

attn_status attn_tokenizer_from_json(const void *buf, size_t size, attn_tokenizer **out) {
    (void)buf, (void)size;
    if (out) *out = NULL;
    return cjson_off("attn_tokenizer_from_json");
}
attn_status attn_tokenizer_from_json_file(const char *path, attn_tokenizer **out) {
    (void)path;
    if (out) *out = NULL;
    return cjson_off("attn_tokenizer_from_json_file");
}
