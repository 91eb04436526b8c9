/*
 * dot_bf16.h — the tile kernels of `precision = fast` for AVX512-BF16
 * (vdpbf16ps: pairs of bfloat16 multiplied and added into fp32 lanes) and
 * their CPU check; included by ukernels.c beside this file after the
 * templates (it uses their TILE_QV, KEY_BLOCK, PV_BLOCK, PV_SMALL, vec.h
 * and exp2.h).  The contracts and the pair layouts are in
 * src/flash/ukernels.h ("precision fast"); accuracy and speed in
 * docs/kernels.md, "precision = fast".
 *
 * The register blocks are those of the float kernels (24 accumulators of
 * 16 rows each), each instruction doing two products per lane: qk walks
 * the widths two at a time, pv the keys two at a time, so both loops run
 * half as many iterations, and a broadcast now carries a bf16 pair.
 */
#ifndef ATTN_ISA_X86_AVX512_DOT_BF16_H
#define ATTN_ISA_X86_AVX512_DOT_BF16_H

#include <cpuid.h>
#include <string.h>

#define BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,fma")))
#define BF16_INLINE static inline __attribute__((always_inline)) BF16_TARGET

/* AVX512-BF16 is CPUID leaf 7, sub-leaf 1, EAX bit 5 (read directly: not
 * every compiler's __builtin_cpu_supports knows it); the zmm state is
 * enabled by the OS if avx512_supported() says so. */
static bool bf16_dot_supported(void) {
    unsigned eax, ebx, ecx, edx;
    if (!avx512_supported() || __get_cpuid_max(0, NULL) < 7) return false;
    __cpuid_count(7, 1, eax, ebx, ecx, edx);
    return (eax & (1u << 5)) != 0;
}

/* The bf16 pair (p[0], p[1]) broadcast to every lane. */
BF16_INLINE __m512bh pair_set1(const uint16_t *p) {
    int32_t bits;
    memcpy(&bits, p, sizeof bits);
    return (__m512bh)_mm512_set1_epi32(bits);
}

/* Lane i: (a[i], b[i]) as a bf16 pair, from 16 bf16 each. */
BF16_INLINE __m512i pairs_of(__m256i a, __m256i b) {
    return _mm512_or_si512(_mm512_cvtepu16_epi32(a), _mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16));
}

static BF16_TARGET void bf16_qk_tile(const uint16_t *qp2, int64_t dim, const uint16_t *kt2, int64_t ldk, int nk,
                                     float *st, const flash_prefetch *pf) {
    flash_prefetch_cursor next = flash_prefetch_start(pf);
    const int64_t pairs = (dim + 1) / 2;
    for (int j0 = 0; j0 < nk; j0 += KEY_BLOCK) {
        const uint16_t *k_block = kt2 + (int64_t)j0 * ldk;
        vec acc[KEY_BLOCK][TILE_QV];
        SIMD_UNROLL for (int kk = 0; kk < KEY_BLOCK; kk++)
            SIMD_UNROLL for (int qv = 0; qv < TILE_QV; qv++) acc[kk][qv] = v_zero();
        for (int64_t dp = 0; dp < pairs; dp++) {
            __m512bh q[TILE_QV];
            flash_prefetch_next(&next);
            SIMD_UNROLL for (int qv = 0; qv < TILE_QV; qv++)
                q[qv] = (__m512bh)_mm512_load_si512((const void *)(qp2 + (dp * TILE_ROWS + qv * VLEN) * 2));
            SIMD_UNROLL for (int kk = 0; kk < KEY_BLOCK; kk++) {
                __m512bh k_b = pair_set1(k_block + kk * ldk + 2 * dp);
                SIMD_UNROLL for (int qv = 0; qv < TILE_QV; qv++) acc[kk][qv] = _mm512_dpbf16_ps(acc[kk][qv], k_b, q[qv]);
            }
        }
        SIMD_UNROLL for (int kk = 0; kk < KEY_BLOCK; kk++)
            SIMD_UNROLL for (int qv = 0; qv < TILE_QV; qv++)
                v_storeu(st + (int64_t)(j0 + kk) * TILE_ROWS + qv * VLEN, acc[kk][qv]);
    }
    flash_prefetch_rest(&next);
}

/* softmax_tile, rounding each probability to bf16 (vcvtneps2bf16: nearest
 * even) and writing the pairs over st: pair j/2 lands on row j/2, which
 * rows j and j + 1 have already been read past (in place is safe). */
static BF16_TARGET void bf16_softmax_tile(float *st, int nk, float *m, float *l, float *alpha) {
    vec m_new[TILE_QV], m_use[TILE_QV], sum[TILE_QV];
    SIMD_UNROLL for (int qv = 0; qv < TILE_QV; qv++) m_new[qv] = v_load(m + qv * VLEN);
    for (int j = 0; j < nk; j++)
        SIMD_UNROLL for (int qv = 0; qv < TILE_QV; qv++)
            m_new[qv] = v_max(m_new[qv], v_load(st + j * TILE_ROWS + qv * VLEN));
    SIMD_UNROLL for (int qv = 0; qv < TILE_QV; qv++) {
        m_use[qv] = v_zero_if_neg_inf(m_new[qv]);
        sum[qv] = v_zero();
    }
    for (int j = 0; j < nk; j += 2)
        SIMD_UNROLL for (int qv = 0; qv < TILE_QV; qv++) {
            vec p_a = v_exp2(v_sub(v_load(st + j * TILE_ROWS + qv * VLEN), m_use[qv]));
            vec p_b = j + 1 < nk ? v_exp2(v_sub(v_load(st + (j + 1) * TILE_ROWS + qv * VLEN), m_use[qv])) : v_zero();
            __m512i a = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(p_a));
            __m512i b = _mm512_slli_epi32(_mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(p_b)), 16);
            sum[qv] = v_add(sum[qv], _mm512_castsi512_ps(_mm512_slli_epi32(a, 16)));
            sum[qv] = v_add(sum[qv], _mm512_castsi512_ps(b));
            _mm512_store_si512((void *)(st + (j / 2) * TILE_ROWS + qv * VLEN), _mm512_or_si512(a, b));
        }
    SIMD_UNROLL for (int qv = 0; qv < TILE_QV; qv++) {
        vec a = v_exp2(v_sub(v_load(m + qv * VLEN), m_use[qv]));
        v_storeu(alpha + qv * VLEN, a);
        v_storeu(l + qv * VLEN, v_fma(a, v_load(l + qv * VLEN), sum[qv]));
        v_storeu(m + qv * VLEN, m_new[qv]);
    }
}

/* ot[d][:] for d in [d0, d0 + width): the register block of pv_tile_bf16. */
BF16_INLINE void bf16_pv_block(const int width, const uint16_t *pt, int64_t pairs, const uint16_t *vt2,
                               int64_t ldv, const vec *alpha, float *ot, int64_t d0,
                               flash_prefetch_cursor *next) {
    vec acc[PV_BLOCK][TILE_QV];
    SIMD_UNROLL for (int b = 0; b < width; b++)
        SIMD_UNROLL for (int qv = 0; qv < TILE_QV; qv++)
            acc[b][qv] = v_mul(alpha[qv], v_load(ot + (d0 + b) * TILE_ROWS + qv * VLEN));
    const uint16_t *v_col = vt2 + 2 * d0;
    for (int64_t jp = 0; jp < pairs; jp++, v_col += 2 * ldv) {
        __m512bh p[TILE_QV];
        flash_prefetch_next(next);
        SIMD_UNROLL for (int qv = 0; qv < TILE_QV; qv++)
            p[qv] = (__m512bh)_mm512_load_si512((const void *)(pt + (jp * TILE_ROWS + qv * VLEN) * 2));
        SIMD_UNROLL for (int b = 0; b < width; b++) {
            __m512bh v_b = pair_set1(v_col + 2 * b);
            SIMD_UNROLL for (int qv = 0; qv < TILE_QV; qv++) acc[b][qv] = _mm512_dpbf16_ps(acc[b][qv], v_b, p[qv]);
        }
    }
    SIMD_UNROLL for (int b = 0; b < width; b++)
        SIMD_UNROLL for (int qv = 0; qv < TILE_QV; qv++)
            v_storeu(ot + (d0 + b) * TILE_ROWS + qv * VLEN, acc[b][qv]);
}

static BF16_TARGET void bf16_pv_tile(const uint16_t *pt, int nk, const uint16_t *vt2, int64_t ldv, int64_t dim_v,
                                     const float *alpha, float *ot, const flash_prefetch *pf) {
    flash_prefetch_cursor next = flash_prefetch_start(pf);
    const int64_t pairs = (nk + 1) / 2;
    vec a[TILE_QV];
    SIMD_UNROLL for (int qv = 0; qv < TILE_QV; qv++) a[qv] = v_load(alpha + qv * VLEN);
    int64_t d0 = 0;
    for (; d0 + PV_BLOCK <= dim_v; d0 += PV_BLOCK) bf16_pv_block(PV_BLOCK, pt, pairs, vt2, ldv, a, ot, d0, &next);
    for (; d0 + PV_SMALL <= dim_v; d0 += PV_SMALL) bf16_pv_block(PV_SMALL, pt, pairs, vt2, ldv, a, ot, d0, &next);
    for (; d0 < dim_v; d0++) bf16_pv_block(1, pt, pairs, vt2, ldv, a, ot, d0, &next);
    flash_prefetch_rest(&next);
}

static BF16_TARGET void bf16_interleave(const uint16_t *a, const uint16_t *b, uint16_t *dst, int64_t n) {
    int64_t e = 0;
    for (; e + VLEN <= n; e += VLEN) {
        __m256i lo = _mm256_loadu_si256((const __m256i *)(const void *)(a + e));
        __m256i hi = b ? _mm256_loadu_si256((const __m256i *)(const void *)(b + e)) : _mm256_setzero_si256();
        _mm512_storeu_si512((void *)(dst + 2 * e), pairs_of(lo, hi));
    }
    for (; e < n; e++) {
        dst[2 * e] = a[e];
        dst[2 * e + 1] = b ? b[e] : 0;
    }
}

#endif /* ATTN_ISA_X86_AVX512_DOT_BF16_H */
