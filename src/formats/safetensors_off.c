/*
 * safetensors_off.c — the safetensors reader in a build without cJSON: every
 * entry point of attn_safetensors.h says so (cjson_off.h).
 */
#include "attn_safetensors.h"
#include "formats/cjson_off.h"

attn_status attn_safetensors_parse(const void *buf, size_t size, attn_safetensors **out) {
    (void)buf, (void)size;
    if (out) *out = NULL;
    return cjson_off("attn_safetensors_parse");
}
attn_status attn_safetensors_open(const char *path, attn_safetensors **out) {
    (void)path;
    if (out) *out = NULL;
    return cjson_off("attn_safetensors_open");
}
void attn_safetensors_free(attn_safetensors *st) { (void)st; }
/* Deprecated names, until 1.0 (attn_safetensors.h). */
void attn_safetensors_close(attn_safetensors *st) { (void)st; }
/* End of the deprecated names. */
int64_t attn_safetensors_n_tensors(const attn_safetensors *st) { (void)st; return 0; }
int64_t attn_safetensors_n_shards(const attn_safetensors *st) { (void)st; return 0; }
attn_status attn_safetensors_tensor_at(const attn_safetensors *st, int64_t index, attn_safetensors_tensor *info) {
    (void)st, (void)index, (void)info;
    return cjson_off("attn_safetensors_tensor_at");
}
int64_t attn_safetensors_tensor_index(const attn_safetensors *st, const char *name) {
    (void)st, (void)name;
    return -1;
}
attn_status attn_safetensors_find_tensor(const attn_safetensors *st, const char *name, attn_safetensors_tensor *info) {
    (void)st, (void)name, (void)info;
    return cjson_off("attn_safetensors_find_tensor");
}
int64_t attn_safetensors_n_metadata(const attn_safetensors *st) { (void)st; return 0; }
attn_status attn_safetensors_metadata_at(const attn_safetensors *st, int64_t index, const char **key,
                                         const char **value) {
    (void)st, (void)index, (void)key, (void)value;
    return cjson_off("attn_safetensors_metadata_at");
}
const char *attn_safetensors_metadata(const attn_safetensors *st, const char *key) {
    (void)st, (void)key;
    return NULL;
}
const char *attn_safetensors_dtype_name(attn_safetensors_dtype dtype) { (void)dtype; return NULL; }
int attn_safetensors_dtype_size(attn_safetensors_dtype dtype) { (void)dtype; return 0; }
attn_status attn_safetensors_read_f32(const attn_safetensors *st, const attn_safetensors_tensor *tensor, float *out) {
    (void)st, (void)tensor, (void)out;
    return cjson_off("attn_safetensors_read_f32");
}
