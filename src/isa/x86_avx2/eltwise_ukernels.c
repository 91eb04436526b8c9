/*
 * eltwise_ukernels.c — the AVX2 elementwise micro-kernels
 * (src/isa/eltwise_table.h): templates/eltwise.h on this folder's vec.h
 * and exp2.h.  The CPU check is the ISA's own (ukernels.c beside this
 * file): these kernels use nothing beyond its baseline.
 */
#include "isa/eltwise_table.h"

#if defined(__x86_64__) && !defined(ATTN_PORTABLE)

#include "isa/flash_table.h"
#include "isa/x86_avx2/vec.h"
#include "isa/x86_avx2/exp2.h"

#include "isa/templates/eltwise.h"

static bool eltwise_supported(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

const eltwise_kernels attn__eltwise_avx2 = {.isa = "avx2", .supported = eltwise_supported, ELTWISE_ENTRIES};

#else
ELTWISE_ABSENT(attn__eltwise_avx2, "avx2");
#endif
