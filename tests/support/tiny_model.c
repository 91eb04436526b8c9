/*
 * tiny_model.c — tiny decoders as GGUF bytes (tiny_model.h).
 */
#include "tiny_model.h"

#include "attn_gguf.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const tiny_spec TINY_QWEN = {"qwen2", 3, 16, 24, 4, 2, 4, 37, 0, 0, NULL, NULL};
const tiny_spec TINY_GEMMA = {"gemma3", 7, 12, 20, 2, 1, 8, 29, 8, 3, NULL, NULL};

static float *tiny_add(tiny_model *m, test_rng *rng, const char *name, int64_t d0, int64_t d1, double scale,
                       double offset) {
    tiny_tensor *t = &m->t[m->n++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->d0 = d0;
    t->d1 = d1;
    t->data = malloc((size_t)(d0 * d1) * sizeof(float));
    for (int64_t i = 0; i < d0 * d1; i++) t->data[i] = (float)(offset + scale * test_rng_normal(rng));
    return t->data;
}

const float *tiny_get(const tiny_model *m, const char *fmt, int64_t layer) {
    char name[64];
    snprintf(name, sizeof name, fmt, (long long)layer);
    for (int i = 0; i < m->n; i++)
        if (strcmp(m->t[i].name, name) == 0) return m->t[i].data;
    return NULL;
}

void tiny_build(tiny_model *m, const tiny_spec *spec, uint64_t seed) {
    memset(m, 0, sizeof *m);
    m->spec = *spec;
    test_rng rng;
    test_rng_seed(&rng, seed);
    const int gemma = strcmp(spec->arch, "gemma3") == 0;
    const int64_t d = spec->d, qw = spec->Hq * spec->Dh, kvw = spec->Hkv * spec->Dh;
    tiny_add(m, &rng, "token_embd.weight", d, spec->V, 1.0, 0.0);
    tiny_add(m, &rng, "output_norm.weight", d, 1, 0.1, 1.0);
    if (!gemma) tiny_add(m, &rng, "output.weight", d, spec->V, 1.0 / sqrt((double)d), 0.0);
    for (int64_t l = 0; l < spec->n_layers; l++) {
        char name[64];
#define ADD(suffix, d0, d1, scale, offset)                                           \
    do {                                                                             \
        snprintf(name, sizeof name, "blk.%lld." suffix, (long long)l);              \
        tiny_add(m, &rng, name, d0, d1, scale, offset);                              \
    } while (0)
        ADD("attn_norm.weight", d, 1, 0.1, 1.0);
        ADD("attn_q.weight", d, qw, 1.0 / sqrt((double)d), 0.0);
        ADD("attn_k.weight", d, kvw, 1.0 / sqrt((double)d), 0.0);
        ADD("attn_v.weight", d, kvw, 1.0 / sqrt((double)d), 0.0);
        if (!gemma) {
            ADD("attn_q.bias", qw, 1, 0.3, 0.0);
            ADD("attn_k.bias", kvw, 1, 0.3, 0.0);
            ADD("attn_v.bias", kvw, 1, 0.3, 0.0);
        } else {
            ADD("attn_q_norm.weight", spec->Dh, 1, 0.2, 1.0);
            ADD("attn_k_norm.weight", spec->Dh, 1, 0.2, 1.0);
            ADD("post_attention_norm.weight", d, 1, 0.1, 1.0);
            ADD("post_ffw_norm.weight", d, 1, 0.1, 1.0);
        }
        ADD("attn_output.weight", qw, d, 1.0 / sqrt((double)qw), 0.0);
        ADD("ffn_norm.weight", d, 1, 0.1, 1.0);
        ADD("ffn_gate.weight", d, spec->F, 1.0 / sqrt((double)d), 0.0);
        ADD("ffn_up.weight", d, spec->F, 1.0 / sqrt((double)d), 0.0);
        ADD("ffn_down.weight", spec->F, d, 1.0 / sqrt((double)spec->F), 0.0);
#undef ADD
    }
    tiny_write(m);
}

void tiny_write(tiny_model *m) {
    const tiny_spec *spec = &m->spec;
    const int64_t d = spec->d;
    gb_free(&m->file);
    memset(&m->file, 0, sizeof m->file);
    /* The metadata. */
    struct {
        const char *suffix;
        int64_t value;
    } ints[] = {{"block_count", spec->n_layers},         {"embedding_length", d},
                {"feed_forward_length", spec->F},        {"attention.head_count", spec->Hq},
                {"attention.head_count_kv", spec->Hkv},  {"attention.key_length", spec->key_length},
                {"attention.sliding_window", spec->sliding_window}};
    int n_kv = 1 + 2; /* architecture, eps, theta */
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        n_kv += ints[i].value != 0 && !(spec->omit_key && strcmp(spec->omit_key, ints[i].suffix) == 0);
    gguf_bytes *b = &m->file;
    gb_header(b, 3, (uint64_t)m->n, (uint64_t)n_kv);
    gb_kv_string(b, "general.architecture", spec->arch);
    char key[128];
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        if (ints[i].value == 0 || (spec->omit_key && strcmp(spec->omit_key, ints[i].suffix) == 0)) continue;
        snprintf(key, sizeof key, "%s.%s", spec->arch, ints[i].suffix);
        gb_kv_u32(b, key, (uint32_t)ints[i].value);
    }
    snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", spec->arch);
    gb_key(b, key, 6);
    gb_f32(b, 1e-6f);
    snprintf(key, sizeof key, "%s.rope.freq_base", spec->arch);
    gb_key(b, key, 6);
    gb_f32(b, 1e6f);
    uint64_t offset = 0;
    for (int i = 0; i < m->n; i++) {
        const tiny_tensor *t = &m->t[i];
        int64_t d0 = t->d0;
        if (spec->bad_tensor && strcmp(spec->bad_tensor, t->name) == 0) d0 += 1;
        const uint64_t dims[2] = {(uint64_t)d0, (uint64_t)t->d1};
        gb_tensor(b, t->name, t->d1 == 1 ? 1 : 2, dims, 0 /* F32 */, offset);
        offset += ((uint64_t)(d0 * t->d1) * 4 + 31) / 32 * 32;
    }
    gb_pad(b, 32);
    for (int i = 0; i < m->n; i++) {
        const tiny_tensor *t = &m->t[i];
        int64_t d0 = t->d0;
        if (spec->bad_tensor && strcmp(spec->bad_tensor, t->name) == 0) d0 += 1;
        gb_raw(b, t->data, (size_t)(t->d0 * t->d1) * 4);
        if (d0 != t->d0) gb_zeros(b, (size_t)t->d1 * 4);
        gb_pad(b, 32);
    }
}

void tiny_free(tiny_model *m) {
    for (int i = 0; i < m->n; i++) free(m->t[i].data);
    gb_free(&m->file);
}

attn_decoder *tiny_load(const tiny_model *m) {
    attn_gguf *g;
    assert_ok(attn_gguf_parse(m->file.data, m->file.len, &g));
    attn_decoder *dec;
    assert_ok(attn_decoder_load(g, &dec));
    attn_gguf_free(g);
    return dec;
}

attn_decoder *tiny_decoder(const tiny_spec *spec, uint64_t seed) {
    tiny_model m;
    tiny_build(&m, spec, seed);
    attn_decoder *dec = tiny_load(&m);
    tiny_free(&m);
    return dec;
}
