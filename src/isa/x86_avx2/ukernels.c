/*
 * ukernels.c — the micro-kernels for AVX2 + FMA (16 ymm registers): the
 * templates instantiated with 8-lane vectors, and their table.  Compiled
 * for any x86-64 with function-level target attributes; the registry uses
 * the table only on CPUs that have the instructions (supported()).
 *
 * Forward tile shape: Br = 16 rows (2 ymm), qk_tile blocks of 6 keys (12
 * accumulators), pv_tile blocks of 6 widths (12 accumulators), Bc = 96.
 * Backward gemm register block: 6 rows x 2 vectors = 12 accumulators, 2 B
 * vectors, one broadcast: 15 of the 16 registers.
 */
#include "isa/isa.h"

#if defined(__x86_64__) && !defined(ATTN_PORTABLE)

#include "isa/x86_avx2/vec.h"
#include "isa/x86_avx2/exp2.h"

#include <cpuid.h>
#include <stdint.h>

#define TILE_QV 2
#define KEY_BLOCK 6
#define PV_BLOCK 6
#define PV_SMALL 2
#define TILE_KEYS 96
#define BLOCK_KEYS 64
#define ROWS_STREAM_LOCALITY 3 /* prefetcht0: Zen 3, v16b */
#define GEMM_MR 6
#define GEMM_NV 2

#include "isa/templates/flash_ukernels.h"
#include "isa/templates/grad_ukernels.h"
#include "isa/templates/convert.h"
#include "isa/templates/peak.h"

/* F16C (the half conversions) is read from CPUID leaf 1 (ECX bit 29):
 * clang's __builtin_cpu_supports does not know "f16c". */
static bool avx2_supported(void) {
    unsigned eax, ebx, ecx, edx;
    __builtin_cpu_init();
    const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 29));
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
}

#define UKERNEL_ISA "avx2"
#include "isa/templates/table.h"

/* The ISA's entry in the registry (src/isa/isa.h). */
const isa_desc attn__isa_avx2 = {.name = UKERNEL_ISA, .supported = avx2_supported, .flash = &ukernels};

#else
/* A build without these instructions (another architecture, or
 * -DATTN_PORTABLE=ON) still knows the ISA's name: asking for it says "not in
 * this build". */
const isa_desc attn__isa_avx2 = ISA_ABSENT("avx2");
#endif
