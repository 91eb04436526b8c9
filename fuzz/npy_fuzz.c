/*
 * npy_fuzz.c — libFuzzer target for the .npy reader.
 *
 * Input: arbitrary bytes, taken as a complete .npy image.  Whatever they
 * are, attn_npy_parse must accept them or refuse them with a message, never
 * crash, read out of bounds or leak (AddressSanitizer and UBSan watch).  An
 * accepted array must survive serialise -> parse unchanged and convert to
 * the type the command line would ask for (or be refused with a message).
 * Shape legend: whatever shape the header declares, 0 to 8 dimensions.
 */
#include "attn.h"
#include "attn_chapter.h"
#include "attn_interp.h"
#include "attn_io.h"
#include "attn_machine.h"
#include "attn_viz.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A refusal must always say why. */
static void check_refusal(attn_status status) {
    if (status != ATTN_OK && attn_last_error()[0] == '\0') __builtin_trap();
}

/* serialise -> parse gives back the same dtype, shape and bytes. */
static void check_round_trip(const attn_array *a) {
    void *image = NULL;
    size_t image_size = 0;
    attn_array again;
    if (attn_npy_serialize(a, &image, &image_size) != ATTN_OK) __builtin_trap();
    if (attn_npy_parse(image, image_size, &again) != ATTN_OK) __builtin_trap();
    size_t bytes = (size_t)a->count * attn_dtype_size(a->dtype);
    if (again.dtype != a->dtype || again.ndim != a->ndim || again.count != a->count ||
        memcmp(again.shape, a->shape, sizeof a->shape) != 0 ||
        memcmp(again.data, a->data, bytes) != 0)
        __builtin_trap();
    attn_array_free(&again);
    free(image);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    attn_array a;
    attn_status status = attn_npy_parse(data, size, &a);
    check_refusal(status);
    if (status != ATTN_OK) return 0;
    check_round_trip(&a);
    /* As the command line does: floats to float32, integers and bools to int64. */
    bool is_float = a.dtype == ATTN_F32 || a.dtype == ATTN_F64 || a.dtype == ATTN_F16;
    check_refusal(attn_array_convert(&a, is_float ? ATTN_F32 : ATTN_I64));
    attn_array_free(&a);
    return 0;
}
