/*
 * ukernels.c — the micro-kernels for AVX-512 F, BW, VL, DQ (32 zmm
 * registers): the templates instantiated with 16-lane vectors, and their
 * table.  Compiled for any x86-64 with function-level target attributes;
 * the registry uses the table only on CPUs that have the instructions
 * (supported()).
 *
 * Forward tile shape: Br = 32 rows (2 zmm), qk_tile blocks of 12 keys (24
 * accumulators), pv_tile blocks of 12 widths (24 accumulators), Bc = 96.
 * Backward gemm register block: 6 rows x 4 vectors = 24 accumulators, 4 B
 * vectors, one broadcast: 29 of the 32 registers.
 * precision = fast (AVX512-BF16 CPUs only, checked at run time): the tile
 * kernels of dot_bf16.h, same blocks, vdpbf16ps on bf16 pairs.
 */
#include "isa/isa.h"

#if defined(__x86_64__) && !defined(ATTN_PORTABLE)

#include "isa/x86_avx512/vec.h"
#include "isa/x86_avx512/exp2.h"

#include <stdint.h>

#define TILE_QV 2
#define KEY_BLOCK 12
#define PV_BLOCK 12
#define PV_SMALL 4
#define TILE_KEYS 96
#define BLOCK_KEYS 64
#define ROWS_STREAM_LOCALITY 1 /* prefetcht2: Zen 4, v20 */
#define GEMM_MR 6
#define GEMM_NV 4

#include "isa/templates/flash_ukernels.h"
#include "isa/templates/grad_ukernels.h"
#include "isa/templates/convert.h"
#include "isa/templates/peak.h"

static bool avx512_supported(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
}

#include "isa/x86_avx512/dot_bf16.h"

#define UKERNEL_ISA "avx512"
#define UKERNEL_BF16 1
#include "isa/templates/table.h"

/* The ISA's entry in the registry (src/isa/isa.h). */
const isa_desc attn__isa_avx512 = {.name = UKERNEL_ISA, .supported = avx512_supported, .flash = &ukernels};

#else
/* A build without these instructions (another architecture, or
 * -DATTN_PORTABLE=ON) still knows the ISA's name: asking for it says "not in
 * this build". */
const isa_desc attn__isa_avx512 = ISA_ABSENT("avx512");
#endif
