/*
 * eltwise_ukernels.c — the portable elementwise micro-kernels
 * (src/isa/eltwise_table.h): templates/eltwise.h on a "vector" of one
 * float, the same arithmetic as the wide ISAs' lanes but for the fused
 * multiply-adds (a product and a sum here: fmaf is a library call).
 */
#include "isa/eltwise_table.h"

#include "isa/generic/exp2.h"
#include "isa/generic/vec.h"

#define v_exp2(x) flash_exp2_scalar(x)
#define ELTWISE_FMA(a, b, c) ((a) * (b) + (c))

#include "isa/templates/eltwise.h"

const eltwise_kernels attn__eltwise_generic = {.isa = "generic", ELTWISE_ENTRIES};
