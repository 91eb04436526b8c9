/*
 * mask_tile.h — the structural mask of a score tile (causal diagonal,
 * sliding window, key lengths), written once for every instruction set:
 * included by flash_ukernels.h (AVX2, AVX-512) and by the portable
 * ukernels.c, whose vec.h makes a vector of one float.  The includer
 * defines TILE_ROWS (the tile's lanes, a multiple of VLEN) and includes its
 * vec.h first.
 *
 * The rule: row r of the tile sees the keys of its structural range, which
 * relative to the tile's first key is [lo[r], hi[r]) (the loop nest cuts it
 * from attn__visibility_key_range, src/base/visibility.h); every other key
 * j of [j0, j1) gets -inf in that row, whatever its score was (NaN included: a
 * hidden score is replaced, never combined).  The bounds are floats holding
 * small integers (exact), so the test is one compare per bound and lane.
 */
#ifndef ATTN_ISA_TEMPLATES_MASK_TILE_H
#define ATTN_ISA_TEMPLATES_MASK_TILE_H

#include "isa/templates/common.h"

static SIMD_TARGET void simd_mask_tile(float *st, int j0, int j1, const float *lo, const float *hi) {
    enum { PARTS = TILE_ROWS / VLEN };
    const vec hidden = v_set1(-INFINITY);
    vec lo_r[PARTS], hi_r[PARTS];
    SIMD_UNROLL for (int v = 0; v < PARTS; v++) {
        lo_r[v] = v_load(lo + v * VLEN);
        hi_r[v] = v_load(hi + v * VLEN);
    }
    for (int j = j0; j < j1; j++) {
        const vec key = v_set1((float)j);
        float *s_j = st + (int64_t)j * TILE_ROWS;
        /* j < lo: before the range; not j < hi: at or past its end */
        SIMD_UNROLL for (int v = 0; v < PARTS; v++)
            v_storeu(s_j + v * VLEN, v_if_lt(key, hi_r[v], v_if_lt(key, lo_r[v], hidden, v_load(s_j + v * VLEN)), hidden));
    }
}

#endif /* ATTN_ISA_TEMPLATES_MASK_TILE_H */
