/*
 * eltwise.h — the decoder's elementwise work (eltwise.c): the micro-kernel
 * table of the ISA libattn's kernels run on (attn_isa_name(), so
 * $ATTN_ARCH chooses for both), or the reference twins: double arithmetic
 * and libm, the arithmetic the decoder had before the kernels, under
 * $ATTN_KERNEL=ref (or $ATTN_ARCH=ref) or for a forward asked for
 * ATTN_KERNEL_REF.  Contracts: src/isa/eltwise_table.h.
 */
#ifndef ATTN_MODEL_ELTWISE_H
#define ATTN_MODEL_ELTWISE_H

#include "isa/eltwise_table.h"

/* The table to run: ref != 0 gives the reference twins. */
const eltwise_kernels *attn__eltwise(int ref);
/* The table named isa ("ref" for the twins), or NULL when this CPU or
 * build lacks it (tests and benches). */
const eltwise_kernels *attn__eltwise_named(const char *isa);

#endif /* ATTN_MODEL_ELTWISE_H */
