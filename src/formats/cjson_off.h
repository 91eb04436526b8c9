/*
 * cjson_off.h — the one refusal of every entry point that needs cJSON
 * (Debian: libcjson-dev), in a build without it: formats/safetensors_off.c,
 * tokenizer/tokenizer_json_off.c and model/decoder_hf_off.c stand in for
 * the safetensors reader, tokenizer.json's reader and the decoder's
 * Hugging Face loader, so that a caller gets this message rather than a
 * link error, and GGUF models work as ever.
 */
#ifndef ATTN_FORMATS_CJSON_OFF_H
#define ATTN_FORMATS_CJSON_OFF_H

#include "base/base.h"

static inline attn_status cjson_off(const char *fn) {
    return attn__fail(ATTN_ERR_UNSUPPORTED, "%s: this build of attn has no safetensors, config.json or tokenizer.json reader "
                      "(cJSON was not found when it was configured; Debian: libcjson-dev)", fn);
}

#endif /* ATTN_FORMATS_CJSON_OFF_H */
