/*
 * tiny_model.h — tiny qwen2- / gemma3-shaped decoders as GGUF bytes built
 * in memory (gguf_builder.h), every tensor float32 with random weights
 * (norms near 1, projections of variance 1 / d_in), for the tests that
 * need a model without the real ones: test_decoder.c checks their forward
 * against its double-precision oracle (reading the weights back with
 * tiny_get), test_generate.c its sessions against that forward.
 */
#ifndef ATTN_TEST_TINY_MODEL_H
#define ATTN_TEST_TINY_MODEL_H

#include "gguf_builder.h"

#include "attn_decoder.h"

#include <stdint.h>

typedef struct tiny_spec {
    const char *arch;
    int64_t n_layers, d, F, Hq, Hkv, Dh, V;
    int64_t key_length;      /* written as ARCH.attention.key_length when nonzero */
    int64_t sliding_window;  /* written when nonzero */
    const char *omit_key;    /* a metadata key (suffix) left out, or NULL */
    const char *bad_tensor;  /* a tensor written with one dim too many elements, or NULL */
} tiny_spec;

/* qwen2: 3 layers, d 16, GQA 4 / 2, biases. */
extern const tiny_spec TINY_QWEN;
/* gemma3: 7 layers, 0-4 and 6 local (window 3), 5 global; Dh (8) * Hq (2)
 * != d (12). */
extern const tiny_spec TINY_GEMMA;

typedef struct tiny_tensor {
    char name[64];
    int64_t d0, d1;
    float *data;
} tiny_tensor;

typedef struct tiny_model {
    tiny_spec spec;
    tiny_tensor t[256];
    int n;
    gguf_bytes file;
} tiny_model;

/* The tensors of spec with random weights from seed, then the GGUF bytes
 * (m->file); release with tiny_free. */
void tiny_build(tiny_model *m, const tiny_spec *spec, uint64_t seed);
/* m's GGUF bytes (m->file) written again from m->spec and m->t, after a
 * test changed them (a tensor removed, added or damaged, block_count). */
void tiny_write(tiny_model *m);
/* The weights of the tensor named fmt (with %lld: layer), NULL if absent. */
const float *tiny_get(const tiny_model *m, const char *fmt, int64_t layer);
void tiny_free(tiny_model *m);

/* m's decoder, loaded from its GGUF bytes (the decoder keeps its own copy
 * of the weights); free it with attn_decoder_free. */
attn_decoder *tiny_load(const tiny_model *m);
/* A decoder of spec with random weights from seed (the model is built,
 * loaded and dropped); free it with attn_decoder_free. */
attn_decoder *tiny_decoder(const tiny_spec *spec, uint64_t seed);

#endif
