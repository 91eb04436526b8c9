/*
 * safetensors_fuzz.c — libFuzzer target for the safetensors reader
 * (libattn_model, attn_safetensors.h): the 8-byte header length, the JSON
 * header (cJSON), dtypes, shapes and data_offsets; and the index of a
 * sharded checkpoint (model.safetensors.index.json).
 *
 * Input: the first byte chooses the parser (even: a safetensors image, the
 * rest of the bytes; odd: an index's JSON text).  Whatever they are, the
 * parser must accept them or refuse them with a message, never crash, read
 * out of bounds or leak (AddressSanitizer and UBSan watch).  An accepted
 * image is used as a loader would: every tensor found again by its name,
 * its bytes checked to lie in the input, every F32/F16/BF16 tensor read to
 * float32, the metadata walked.  Seeds: fuzz/corpus/safetensors/ (real
 * files saved by transformers and byte-built ones, fuzz/make_corpus.sh).
 */
#include "attn.h"
#include "attn_safetensors.h"
#include "formats/safetensors.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_refusal(attn_status status) {
    if (status != ATTN_OK && attn_last_error()[0] == '\0') __builtin_trap();
}

static void use_image(const uint8_t *data, size_t size) {
    attn_safetensors *st = NULL;
    attn_status status = attn_safetensors_parse(data, size, &st);
    check_refusal(status);
    if (status != ATTN_OK) {
        if (st) __builtin_trap(); /* nothing handed back on a refusal */
        return;
    }
    uint64_t covered = 0;
    for (int64_t i = 0; i < attn_safetensors_n_tensors(st); i++) {
        attn_safetensors_tensor t;
        if (attn_safetensors_tensor_at(st, i, &t) != ATTN_OK) __builtin_trap();
        if (attn_safetensors_tensor_index(st, t.name) != i) __builtin_trap(); /* names are unique */
        if (t.offset > size || t.n_bytes > size - t.offset) __builtin_trap();
        if ((const uint8_t *)t.data != data + t.offset) __builtin_trap();
        covered += t.n_bytes;
        if (t.dtype == ATTN_SAFETENSORS_F32 || t.dtype == ATTN_SAFETENSORS_F16 || t.dtype == ATTN_SAFETENSORS_BF16) {
            float *out = malloc((size_t)(t.n_elements ? t.n_elements : 1) * sizeof *out);
            if (!out) __builtin_trap();
            if (attn_safetensors_read_f32(st, &t, out) != ATTN_OK) __builtin_trap();
            free(out);
        } else if (attn_safetensors_read_f32(st, &t, NULL) == ATTN_OK) {
            __builtin_trap();
        }
    }
    /* The tensors cover the data section exactly: their bytes add up to it. */
    if (covered > size) __builtin_trap();
    for (int64_t i = 0; i < attn_safetensors_n_metadata(st); i++) {
        const char *k, *v;
        if (attn_safetensors_metadata_at(st, i, &k, &v) != ATTN_OK) __builtin_trap();
        if (!attn_safetensors_metadata(st, k)) __builtin_trap();
    }
    attn_safetensors_free(st);
}

static void use_index(const uint8_t *data, size_t size) {
    safetensors_index index;
    const attn_status status = attn__safetensors_index_parse((const char *)data, size, &index);
    check_refusal(status);
    if (status != ATTN_OK) return;
    for (int64_t i = 0; i < index.n_entries; i++)
        if (index.file_of[i] < 0 || index.file_of[i] >= index.n_files || !index.names[i][0]) __builtin_trap();
    for (int64_t f = 0; f < index.n_files; f++)
        if (strchr(index.files[f], '/') || index.files[f][0] == '.') __builtin_trap();
    attn__safetensors_index_free(&index);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    /* A copy of exactly the bytes given, so that a read past them is seen. */
    uint8_t *copy = malloc(size - 1 ? size - 1 : 1);
    if (!copy) return 0;
    memcpy(copy, data + 1, size - 1);
    if (data[0] & 1)
        use_index(copy, size - 1);
    else
        use_image(copy, size - 1);
    free(copy);
    return 0;
}
