/*
 * model_config_fuzz.c — libFuzzer target for config.json, a Hugging Face
 * model's configuration, read into attn_decoder_config
 * (attn_decoder_config_from_json, cJSON).
 *
 * Input: arbitrary bytes, taken as the file's text.  The reader must accept
 * them or refuse them with a message, never crash or leak; an accepted
 * configuration must be one the decoder can size without overflow (the
 * checks attn__decoder_check_config makes, re-checked here) and whose
 * layer pattern can be asked for every layer.  Seeds: fuzz/corpus/config/
 * (the tiny models' config.json files as transformers wrote them, and
 * edited ones: older keys, refused values).
 */
#include "attn.h"
#include "attn_decoder.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *copy = malloc(size ? size : 1);
    if (!copy) return 0;
    memcpy(copy, data, size);
    attn_decoder_config c;
    const attn_status status = attn_decoder_config_from_json(copy, size, &c);
    free(copy);
    if (status != ATTN_OK) {
        if (attn_last_error()[0] == '\0') __builtin_trap();
        return 0;
    }
    if (c.n_layers <= 0 || c.n_layers > 4096 || c.d_model <= 0 || c.n_heads <= 0 || c.n_kv_heads <= 0 ||
        c.head_dim <= 0 || c.head_dim % 2 || c.n_heads % c.n_kv_heads || c.vocab <= 0 || c.d_ffn <= 0)
        __builtin_trap();
    int64_t n;
    if (__builtin_mul_overflow(c.n_heads, c.head_dim, &n) || __builtin_mul_overflow(n, c.d_model, &n) ||
        __builtin_mul_overflow(c.vocab, c.d_model, &n))
        __builtin_trap();
    if (!(c.rms_eps > 0) || !(c.rope_theta > 0) || !(c.rope_theta_local > 0) || !(c.attn_scale > 0) ||
        c.sliding_window < 0 || c.sliding_pattern < 0)
        __builtin_trap();
    int local = 0;
    for (int64_t l = 0; l < c.n_layers; l++) local += attn_decoder_layer_is_local(&c, l);
    if (local && c.sliding_window == 0) __builtin_trap();
    return 0;
}
