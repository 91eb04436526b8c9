/*
 * decoder_hf_off.c — the decoder's Hugging Face loader (config.json and
 * safetensors checkpoints) in a build without cJSON: its entry points say so
 * (formats/cjson_off.h).
 */
#include "attn_decoder.h"
#include "formats/cjson_off.h"

attn_status attn_decoder_config_from_json(const char *json, size_t len, attn_decoder_config *cfg) {
    (void)json, (void)len, (void)cfg;
    return cjson_off("attn_decoder_config_from_json");
}
attn_status attn_decoder_load_safetensors(const char *path, attn_decoder **out) {
    (void)path;
    if (out) *out = NULL;
    return cjson_off("attn_decoder_load_safetensors");
}
attn_status attn_decoder_config_from_checkpoint(const char *path, attn_decoder_config *cfg) {
    (void)path, (void)cfg;
    return cjson_off("attn_decoder_config_from_checkpoint");
}
attn_status attn_decoder_load_safetensors_with(const char *path, const attn_decoder_options *opt,
                                               attn_decoder **out) {
    (void)path, (void)opt;
    if (out) *out = NULL;
    return cjson_off("attn_decoder_load_safetensors_with");
}
