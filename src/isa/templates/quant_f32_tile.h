/*
 * quant_f32_tile.h — the quantized product's EXACT tile (quant.h,
 * quant_f32_tile_fn) written once for any vector width: instantiated by
 * src/isa/x86_avx2/quant_ukernels.c (8 lanes) and x86_avx512 (16) after
 * their vec.h (templates/common.h lists the vocabulary), with
 *   F32_MR, F32_NR   the register block: MR x NR accumulators, MR vectors of
 *                    x and one of W live at once (1 <= F32_MR <= 4)
 * Lane l of acc(i, j) sums x_i[k] * w_j[k] for k = l mod VLEN, one FMA a
 * term, k ascending; END sums the lanes with the ISA's v_reduce_add (its
 * fixed tree).  Rows are independent: mr only says how many are live.
 * Defines static simd_quant_f32_tile, and the accumulators' start and end
 * that the ISA's FAST tile shares (quant_acc_start, quant_acc_finish).
 */

#include "isa/templates/common.h"

#if F32_MR < 1 || F32_MR > 4
#error "the exact tile instantiates 1 to 4 rows of x"
#endif

/* An accumulator's start: zero, or the lanes a previous call left in slot. */
SIMD_INLINE vec quant_acc_start(const float *slot, int flags) {
    return flags & QUANT_TILE_BEGIN ? v_zero() : v_load(slot);
}

/* Its end: the lanes stored in slot for the next call, or (END) summed by
 * the ISA's tree into *y_ij when column j is one of the nr written. */
SIMD_INLINE void quant_acc_finish(vec a, float *slot, int flags, int j, int nr, float *y_ij) {
    if (!(flags & QUANT_TILE_END)) v_store(slot, a);
    else if (j < nr) *y_ij = v_reduce_add(a);
}

SIMD_INLINE void quant_f32_tile_rows(const int MR_, int nr, const float *x, int64_t ldx, const float *w,
                                     int64_t ldw, int64_t kc, float *acc, int flags, float *y, int64_t ldy) {
    vec a[F32_MR][F32_NR];
    SIMD_UNROLL for (int i = 0; i < MR_; i++) SIMD_UNROLL for (int j = 0; j < F32_NR; j++)
        a[i][j] = quant_acc_start(acc + 16 * (i * F32_NR + j), flags);
    for (int64_t k = 0; k < kc; k += VLEN) {
        vec xv[F32_MR];
        SIMD_UNROLL for (int i = 0; i < MR_; i++) xv[i] = v_loadu(x + i * ldx + k);
        SIMD_UNROLL for (int j = 0; j < F32_NR; j++) {
            const vec wv = v_loadu(w + j * ldw + k);
            SIMD_UNROLL for (int i = 0; i < MR_; i++) a[i][j] = v_fma(xv[i], wv, a[i][j]);
        }
    }
    SIMD_UNROLL for (int i = 0; i < MR_; i++) SIMD_UNROLL for (int j = 0; j < F32_NR; j++)
        quant_acc_finish(a[i][j], acc + 16 * (i * F32_NR + j), flags, j, nr, y + i * ldy + j);
}

static SIMD_TARGET void simd_quant_f32_tile(int mr, int nr, const float *x, int64_t ldx, const float *w, int64_t ldw,
                                            int64_t kc, float *acc, int flags, float *y, int64_t ldy) {
    switch (mr) {
    case 1: quant_f32_tile_rows(1, nr, x, ldx, w, ldw, kc, acc, flags, y, ldy); break;
#if F32_MR >= 2
    case 2: quant_f32_tile_rows(2, nr, x, ldx, w, ldw, kc, acc, flags, y, ldy); break;
#endif
#if F32_MR >= 3
    case 3: quant_f32_tile_rows(3, nr, x, ldx, w, ldw, kc, acc, flags, y, ldy); break;
#endif
#if F32_MR >= 4
    case 4: quant_f32_tile_rows(4, nr, x, ldx, w, ldw, kc, acc, flags, y, ldy); break;
#endif
    }
}
