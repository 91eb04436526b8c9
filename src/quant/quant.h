/*
 * quant.h — the quantized matrix product's insides (include/attn_quant.h is
 * the front door; docs/quant.md the prose): the storage types' traits, the
 * dispatch and the reference.  The micro-kernels' table, panel layouts and
 * contracts are a kind of the ISA registry's: src/isa/quant_table.h.
 */
#ifndef ATTN_QUANT_QUANT_H
#define ATTN_QUANT_QUANT_H

#include "attn_quant.h"
#include "base/base.h"
#include "isa/quant_table.h"

#include <stdbool.h>
#include <stdint.h>

/* ------------------------------------------------------------ the types */

typedef struct quant_traits {
    const char *name;       /* "Q5_0"                                          */
    int gguf;               /* ggml's number (attn_qtype)                      */
    int block_elements;     /* 1, 32 or 256                                    */
    int block_bytes;
    bool quantized;         /* has integers (FAST applies); F32/F16/BF16 not   */
    int offset;             /* FAST: o (0 for a type with a min)               */
    bool has_min;           /* FAST: wc (Q4_1, Q5_1, Q4_K, Q5_K)               */
    int group;              /* FAST: G, elements per scale: 32, or 16 (Q6_K)   */
} quant_traits;

extern const quant_traits attn__quant_traits[QT_COUNT];

/* The dense index of ggml type number gguf, or -1 (no kernel takes it). */
int attn__quant_type_index(int gguf);

/* ------------------------------------------------------------ dispatch */

/* The complete table (src/isa/quant_table.h) of the ISA this process runs
 * on: the registry's choice (src/isa/isa.h: $ATTN_ARCH's ISA when the CPU
 * has it, else the best it has; attn__isa_force for tests).  Whether every
 * call goes to the reference instead is attn__isa_forces_ref(). */
const quant_table *attn__quant_active(void);

/* ----------------------------------------------------------- reference */

/* y = x·Wᵀ in double over the portable dequantizer's values, one thread.
 * w is checked; scratch one row of K floats (allocated). */
attn_status attn__quant_matmul_ref(const float *x, int64_t m, const attn_qtensor *w, float *y);

/* A row's bytes. */
static inline int64_t quant_row_bytes(const quant_traits *t, int64_t cols) {
    return cols / t->block_elements * t->block_bytes;
}

#endif /* ATTN_QUANT_QUANT_H */
