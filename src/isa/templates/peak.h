/*
 * peak.h — the machine's FMA peak loop written once for any vector width
 * (DESIGN.md §5), instantiated by every ISA's ukernels.c after its vec.h:
 * UKERNEL_PEAK_INNER fused multiply-adds on each of twelve independent
 * chains, the chains kept in NAMED variables.
 *
 * Why named: an array of accumulators can be compiled to a store and a
 * reload every iteration, which then reports half the real peak or less.
 * Why twelve: they cover an FMA latency of 4 cycles on two pipes with room
 * to spare.  Why seeded differently: gcc 12 folded twelve chains that start
 * from the same value into ONE (v1 of machine.c, docs/kernels.md).  Check
 * with `objdump -d` that the inner loop is only FMAs, a counter and a branch.
 *
 * Defines static simd_peak_chunk(float seed) for the including file's table.
 */

#include "isa/templates/common.h"

static SIMD_TARGET float simd_peak_chunk(float seed) {
    const vec m = v_set1(UKERNEL_PEAK_MUL), s = v_set1(UKERNEL_PEAK_ADD);
    vec a0 = v_set1(seed), a1 = v_set1(seed + 1), a2 = v_set1(seed + 2), a3 = v_set1(seed + 3),
        a4 = v_set1(seed + 4), a5 = v_set1(seed + 5), a6 = v_set1(seed + 6), a7 = v_set1(seed + 7),
        a8 = v_set1(seed + 8), a9 = v_set1(seed + 9), a10 = v_set1(seed + 10), a11 = v_set1(seed + 11);
    for (int i = 0; i < UKERNEL_PEAK_INNER; i++) {
        a0 = v_fma(a0, m, s), a1 = v_fma(a1, m, s), a2 = v_fma(a2, m, s), a3 = v_fma(a3, m, s);
        a4 = v_fma(a4, m, s), a5 = v_fma(a5, m, s), a6 = v_fma(a6, m, s), a7 = v_fma(a7, m, s);
        a8 = v_fma(a8, m, s), a9 = v_fma(a9, m, s), a10 = v_fma(a10, m, s), a11 = v_fma(a11, m, s);
    }
    vec sum = v_add(v_add(v_add(a0, a1), v_add(a2, a3)), v_add(v_add(a4, a5), v_add(a6, a7)));
    sum = v_add(sum, v_add(v_add(a8, a9), v_add(a10, a11)));
    return v_reduce_add(sum);
}
