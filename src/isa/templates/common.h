/*
 * common.h — what every micro-kernel template (flash_ukernels.h,
 * grad_ukernels.h, peak.h) shares: loop unrolling and forced inlining, and
 * the vector vocabulary an ISA's vec.h must define before including them.
 *
 * vec.h of an ISA defines:
 *   SIMD_TARGET   the function attribute enabling its instructions (may be empty)
 *   vec, VLEN     the vector type and its number of float lanes
 *   v_zero(), v_set1(x), v_load(p) (aligned), v_loadu(p), v_store(p, x)
 *   (aligned), v_storeu(p, x), v_add, v_sub, v_mul, v_div, v_max(a, b) (b if either
 *   is NaN), v_fma(a, b, c) = a·b + c (one rounding), v_first(x) (lane 0)
 *   v_load_tail(p, n, fill)  lanes < n from p, the others = fill, nothing
 *                            read beyond n; v_store_tail(p, x, n)
 *   v_reduce_add(x), v_reduce_max(x)   over the lanes
 *   v_reduce_add4(a, b, c, d, out)     out[0..3] = v_reduce_add of each, bit for bit
 *   v_zero_if_neg_inf(m)               m where m != -inf, else 0 (NaN stays)
 *   v_if_lt(a, b, x, y)                x in the lanes where a < b, y in the others
 *                                      (a NaN compare takes y)
 * and exp2.h of the ISA v_exp2(x): the FLASH_EXP2 polynomial of
 * src/isa/flash_table.h, below FLASH_EXP2_MIN exactly 0, NaN propagated; and
 * v_exp2_nonpos(x), the same for x <= 0 or NaN only (what a softmax's s − m
 * is), which may skip what large arguments need (AVX2's clamp).
 */
#ifndef ATTN_ISA_TEMPLATES_COMMON_H
#define ATTN_ISA_TEMPLATES_COMMON_H

#if defined(__GNUC__) && !defined(__clang__)
#define SIMD_UNROLL _Pragma("GCC unroll 16")
#else
#define SIMD_UNROLL _Pragma("unroll")
#endif
#define SIMD_INLINE static inline __attribute__((always_inline)) SIMD_TARGET

#endif /* ATTN_ISA_TEMPLATES_COMMON_H */
