/*
 * safetensors_off.c — safetensors and config.json in a build without cJSON
 * (Debian: libcjson-dev): every entry point of attn_safetensors.h and the
 * decoder's Hugging Face loader and tokenizer.json's reader say so, so that a caller gets a message
 * rather than a link error, and GGUF models work as ever.
 */
#include "attn_decoder.h"
#include "attn_safetensors.h"
#include "attn_tokenizer.h"
#include "model/tokenizer.h"
#include "base/base.h"

static attn_status off(const char *fn) {
    return attn__fail(ATTN_ERR_UNSUPPORTED, "%s: this build of attn has no safetensors, config.json or tokenizer.json reader "
                      "(cJSON was not found when it was configured; Debian: libcjson-dev)", fn);
}

attn_status attn_safetensors_parse(const void *buf, size_t size, attn_safetensors **out) {
    (void)buf, (void)size;
    if (out) *out = NULL;
    return off("attn_safetensors_parse");
}
attn_status attn_safetensors_open(const char *path, attn_safetensors **out) {
    (void)path;
    if (out) *out = NULL;
    return off("attn_safetensors_open");
}
void attn_safetensors_free(attn_safetensors *st) { (void)st; }
/* Deprecated names, until 1.0 (attn_safetensors.h). */
void attn_safetensors_close(attn_safetensors *st) { (void)st; }
/* End of the deprecated names. */
int64_t attn_safetensors_n_tensors(const attn_safetensors *st) { (void)st; return 0; }
int64_t attn_safetensors_n_shards(const attn_safetensors *st) { (void)st; return 0; }
attn_status attn_safetensors_tensor_at(const attn_safetensors *st, int64_t index, attn_safetensors_tensor *info) {
    (void)st, (void)index, (void)info;
    return off("attn_safetensors_tensor_at");
}
int64_t attn_safetensors_tensor_index(const attn_safetensors *st, const char *name) {
    (void)st, (void)name;
    return -1;
}
attn_status attn_safetensors_find_tensor(const attn_safetensors *st, const char *name, attn_safetensors_tensor *info) {
    (void)st, (void)name, (void)info;
    return off("attn_safetensors_find_tensor");
}
int64_t attn_safetensors_n_metadata(const attn_safetensors *st) { (void)st; return 0; }
attn_status attn_safetensors_metadata_at(const attn_safetensors *st, int64_t index, const char **key,
                                         const char **value) {
    (void)st, (void)index, (void)key, (void)value;
    return off("attn_safetensors_metadata_at");
}
const char *attn_safetensors_metadata(const attn_safetensors *st, const char *key) {
    (void)st, (void)key;
    return NULL;
}
const char *attn_safetensors_dtype_name(attn_safetensors_dtype dtype) { (void)dtype; return NULL; }
int attn_safetensors_dtype_size(attn_safetensors_dtype dtype) { (void)dtype; return 0; }
attn_status attn_safetensors_read_f32(const attn_safetensors *st, const attn_safetensors_tensor *tensor, float *out) {
    (void)st, (void)tensor, (void)out;
    return off("attn_safetensors_read_f32");
}
attn_status attn_decoder_config_from_json(const char *json, size_t len, attn_decoder_config *cfg) {
    (void)json, (void)len, (void)cfg;
    return off("attn_decoder_config_from_json");
}
attn_status attn_decoder_load_safetensors(const char *path, attn_decoder **out) {
    (void)path;
    if (out) *out = NULL;
    return off("attn_decoder_load_safetensors");
}
attn_status attn_decoder_config_from_checkpoint(const char *path, attn_decoder_config *cfg) {
    (void)path, (void)cfg;
    return off("attn_decoder_config_from_checkpoint");
}
attn_status attn_tokenizer_from_json(const void *buf, size_t size, attn_tokenizer **out) {
    (void)buf, (void)size;
    if (out) *out = NULL;
    return off("attn_tokenizer_from_json");
}
attn_status attn_tokenizer_from_json_file(const char *path, attn_tokenizer **out) {
    (void)path;
    if (out) *out = NULL;
    return off("attn_tokenizer_from_json_file");
}
attn_status attn__tokenizer_from_json_config(const char *json, size_t size, const char *config, size_t config_size,
                                             attn_tokenizer **out) {
    (void)json, (void)size, (void)config, (void)config_size;
    if (out) *out = NULL;
    return off("tokenizer.json");
}
