/*
 * gguf_fuzz.c — libFuzzer target for the GGUF reader (libattn_model).
 *
 * Input: arbitrary bytes, taken as a complete GGUF image in memory.
 * Whatever they are, attn_gguf_parse must accept them or refuse them with a
 * message, never crash, read out of bounds or leak (AddressSanitizer and
 * UBSan watch).  An accepted file is then used as a model loader would:
 * every key read with the getter of its type (arrays walked to the end,
 * nested ones too), every tensor found again by its name, and the first row
 * of every tensor of a converted type dequantized (and its first block
 * through attn_gguf_dequantize).  Seeds: fuzz/corpus/gguf/, written by
 * tests/fixtures/make_gguf_fixtures.py.
 * Shape legend: a row is dims[0] elements, at most a few times the input's
 * size (each tensor's bytes were checked to lie within it).
 */
#include "attn.h"
#include "attn_gguf.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A refusal must always say why. */
static void check_refusal(attn_status status) {
    if (status != ATTN_OK && attn_last_error()[0] == '\0') __builtin_trap();
}

/* Reads a value as its type's getter would, walking arrays to their end. */
static void walk_value(const attn_gguf_value *v, int depth) {
    if (v->type != ATTN_GGUF_VALUE_ARRAY) return;
    if (depth > 16) __builtin_trap(); /* the parser refuses deeper nesting */
    uint64_t cursor = 0, n = 0;
    attn_gguf_value e;
    while (cursor < v->size) {
        if (attn_gguf_array_next(v, &cursor, &e) != ATTN_OK) __builtin_trap(); /* checked at parse time */
        walk_value(&e, depth + 1);
        n++;
    }
    if (n != v->count) __builtin_trap();
    if (v->count > 0) {
        int64_t i;
        double f;
        check_refusal(attn_gguf_array_int(v, v->count - 1, &i));
        check_refusal(attn_gguf_array_float(v, 0, &f));
    }
}

static void walk_keys(const attn_gguf *g, int64_t n_keys) {
    for (int64_t k = 0; k < n_keys; k++) {
        const char *key;
        attn_gguf_value v;
        if (attn_gguf_key_at(g, k, &key, &v) != ATTN_OK) __builtin_trap();
        if (attn_gguf_key_index(g, key) != k) __builtin_trap(); /* keys are unique */
        uint32_t u32;
        int64_t i64;
        double f64;
        float f32;
        int flag;
        const char *s;
        size_t len;
        check_refusal(attn_gguf_get_u32(g, key, &u32));
        check_refusal(attn_gguf_get_i64(g, key, &i64));
        check_refusal(attn_gguf_get_f64(g, key, &f64));
        check_refusal(attn_gguf_get_f32(g, key, &f32));
        check_refusal(attn_gguf_get_bool(g, key, &flag));
        check_refusal(attn_gguf_get_string(g, key, &s, &len));
        check_refusal(attn_gguf_get_array(g, key, -1, &v));
        walk_value(&v, 0);
    }
}

static void walk_tensors(const attn_gguf *g, int64_t n_tensors) {
    for (int64_t i = 0; i < n_tensors; i++) {
        attn_gguf_tensor t, again;
        if (attn_gguf_tensor_at(g, i, &t) != ATTN_OK) __builtin_trap();
        if (attn_gguf_find_tensor(g, t.name, &again) != ATTN_OK || again.index != i) __builtin_trap();
        if (!attn_gguf_type_dequantizable(t.type)) {
            float one;
            if (attn_gguf_dequantize_rows(g, &t, 0, 1, &one) != ATTN_ERR_UNSUPPORTED) __builtin_trap();
            continue;
        }
        float *row = malloc((size_t)t.dims[0] * sizeof *row);
        if (!row) return;
        if (attn_gguf_dequantize_rows(g, &t, 0, 1, row) != ATTN_OK) __builtin_trap();
        int64_t block_elements, block_bytes;
        if (attn_gguf_type_block(t.type, &block_elements, &block_bytes) != ATTN_OK) __builtin_trap();
        float *again_row = malloc((size_t)block_elements * sizeof *again_row);
        if (again_row && attn_gguf_dequantize(t.type, t.data, (size_t)block_bytes, block_elements, again_row) == ATTN_OK &&
            memcmp(again_row, row, (size_t)block_elements * sizeof *row) != 0)
            __builtin_trap(); /* the same bytes, the same conversion */
        free(again_row);
        free(row);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    attn_gguf *g;
    attn_status status = attn_gguf_parse(data, size, &g);
    check_refusal(status);
    if (status != ATTN_OK) {
        if (g) __builtin_trap();
        return 0;
    }
    attn_gguf_info info;
    attn_gguf_describe(g, &info);
    if (info.data_offset > size || info.alignment == 0) __builtin_trap();
    walk_keys(g, info.n_keys);
    walk_tensors(g, info.n_tensors);
    attn_gguf_free(g);
    return 0;
}
