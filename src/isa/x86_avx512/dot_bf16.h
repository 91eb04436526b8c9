/*
 * dot_bf16.h — the tile kernels of `precision = fast` on this ISA and
 * their CPU check, in two variants behind one set of table entries:
 *
 *   amx          AMX-BF16 (tdpbf16ps on 16 x 16 fp32 tiles, Sapphire
 *                Rapids and later), when the CPU has it and Linux grants
 *                the tile state (arch_prctl ARCH_REQ_XCOMP_PERM); unless
 *                $ATTN_AMX=0;
 *   avx512-bf16  vdpbf16ps (pairs of bfloat16 into fp32 lanes), the
 *                register blocks of the float kernels (24 accumulators),
 *                each instruction doing two products per lane.
 *
 * Chosen once, by bf16_dot_supported().  Included by ukernels.c beside
 * this file after the templates (it uses their TILE_QV, KEY_BLOCK,
 * PV_BLOCK, PV_SMALL, vec.h and exp2.h).  The contracts and layouts are in
 * src/isa/flash_table.h ("precision fast"); accuracy and speed in
 * docs/kernels.md, "precision = fast".
 */
#ifndef ATTN_ISA_X86_AVX512_DOT_BF16_H
#define ATTN_ISA_X86_AVX512_DOT_BF16_H

#include <cpuid.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,fma")))
#define BF16_INLINE static inline __attribute__((always_inline)) BF16_TARGET
#define AMX_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,fma,amx-tile,amx-bf16")))

#if TILE_QV != 2
#error "the bf16 tile kernels assume Br = 32 rows (two 16-lane vectors, two AMX tile columns)"
#endif

enum { BF16_NONE = 1, BF16_DOT = 2, BF16_AMX = 3 };
static atomic_int bf16_kind_state; /* 0 until bf16_kind() has looked */

/* Asks Linux for the AMX tile data state (XFEATURE_XTILEDATA = 18) by
 * arch_prctl(ARCH_REQ_XCOMP_PERM = 0x1023): a raw system call (number 158),
 * since libc may not declare syscall() in strict C11. */
static bool amx_permitted(void) {
#ifdef __linux__
    long ret;
    __asm__ volatile("syscall" : "=a"(ret) : "a"(158L), "D"(0x1023L), "S"(18L) : "rcx", "r11", "memory");
    return ret == 0;
#else
    return false;
#endif
}

/* What this CPU offers, looked at once (a race computes the same answer
 * twice): AVX512-BF16 is CPUID leaf 7, sub-leaf 1, EAX bit 5; AMX-BF16 and
 * AMX-TILE leaf 7, sub-leaf 0, EDX bits 22 and 24 (read directly: not every
 * compiler's __builtin_cpu_supports knows them). */
static int bf16_kind(void) {
    int kind = atomic_load(&bf16_kind_state);
    if (kind) return kind;
    unsigned eax, ebx, ecx, edx;
    kind = BF16_NONE;
    if (avx512_supported() && __get_cpuid_max(0, NULL) >= 7) {
        __cpuid_count(7, 1, eax, ebx, ecx, edx);
        if (eax & (1u << 5)) kind = BF16_DOT;
        __cpuid_count(7, 0, eax, ebx, ecx, edx);
        const char *env = getenv("ATTN_AMX");
        const bool amx_allowed = !(env && strcmp(env, "0") == 0);
        if (kind == BF16_DOT && amx_allowed && (edx & (1u << 22)) && (edx & (1u << 24)) && amx_permitted())
            kind = BF16_AMX;
    }
    atomic_store(&bf16_kind_state, kind);
    return kind;
}

static bool bf16_dot_supported(void) { return bf16_kind() != BF16_NONE; }

static const char *bf16_dot_name(void) {
    int kind = bf16_kind();
    return kind == BF16_AMX ? "amx" : kind == BF16_DOT ? "avx512-bf16" : NULL;
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

static BF16_TARGET void dot_qk_tile(const uint16_t *qp2, int64_t dim, const uint16_t *kt2, int64_t ldk, int nk,
                                     float *st, const flash_prefetch *pf) {
    flash_prefetch_cursor next = flash_prefetch_start(pf);
    const int64_t pairs = (dim + 1) / 2;
    for (int j0 = 0; j0 < nk; j0 += KEY_BLOCK) {
        const uint16_t *k_block = kt2 + (int64_t)j0 * ldk;
        vec acc[KEY_BLOCK][TILE_QV];
        tile_block_zero(KEY_BLOCK, acc);
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
        tile_block_store(KEY_BLOCK, acc, st + (int64_t)j0 * TILE_ROWS);
    }
    flash_prefetch_rest(&next);
}

/* softmax_tile, rounding each probability to bf16 (vcvtneps2bf16: nearest
 * even) and writing the pairs over st: pair j/2 lands on row j/2, which
 * rows j and j + 1 have already been read past (in place is safe). */
static BF16_TARGET void bf16_softmax_tile(float *st, int nk, float *m, float *l, float *alpha) {
    vec m_new[TILE_QV], m_use[TILE_QV], sum[TILE_QV];
    softmax_tile_start(st, nk, m, m_new, m_use, sum);
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
    const int pairs = (nk + 1) / 2, padded = (pairs + 15) / 16 * 16;
    for (int jp = pairs; jp < padded; jp++)
        SIMD_UNROLL for (int qv = 0; qv < TILE_QV; qv++) v_storeu(st + jp * TILE_ROWS + qv * VLEN, v_zero());
    softmax_tile_finish(m, l, alpha, m_new, m_use, sum);
}

/* ot[d][:] for d in [d0, d0 + width): the register block of pv_tile_bf16. */
BF16_INLINE void dot_pv_block(const int width, const uint16_t *pt, int64_t pairs, const uint16_t *vt,
                               int64_t ldv, const vec *alpha, float *ot, int64_t d0,
                               flash_prefetch_cursor *next) {
    vec acc[PV_BLOCK][TILE_QV];
    tile_block_rescaled(width, acc, alpha, ot + d0 * TILE_ROWS);
    const uint16_t *v_row = vt + d0 * ldv;
    for (int64_t jp = 0; jp < pairs; jp++, v_row += 2) {
        __m512bh p[TILE_QV];
        flash_prefetch_next(next);
        SIMD_UNROLL for (int qv = 0; qv < TILE_QV; qv++)
            p[qv] = (__m512bh)_mm512_load_si512((const void *)(pt + (jp * TILE_ROWS + qv * VLEN) * 2));
        SIMD_UNROLL for (int b = 0; b < width; b++) {
            __m512bh v_b = pair_set1(v_row + b * ldv);
            SIMD_UNROLL for (int qv = 0; qv < TILE_QV; qv++) acc[b][qv] = _mm512_dpbf16_ps(acc[b][qv], v_b, p[qv]);
        }
    }
    tile_block_store(width, acc, ot + d0 * TILE_ROWS);
}

static BF16_TARGET void dot_pv_tile(const uint16_t *pt, int nk, const uint16_t *vt, int64_t ldv, int64_t dim_v,
                                     const float *alpha, float *ot, const flash_prefetch *pf) {
    flash_prefetch_cursor next = flash_prefetch_start(pf);
    const int64_t pairs = (nk + 1) / 2;
    vec a[TILE_QV];
    SIMD_UNROLL for (int qv = 0; qv < TILE_QV; qv++) a[qv] = v_load(alpha + qv * VLEN);
    int64_t d0 = 0;
    for (; d0 + PV_BLOCK <= dim_v; d0 += PV_BLOCK) dot_pv_block(PV_BLOCK, pt, pairs, vt, ldv, a, ot, d0, &next);
    for (; d0 + PV_SMALL <= dim_v; d0 += PV_SMALL) dot_pv_block(PV_SMALL, pt, pairs, vt, ldv, a, ot, d0, &next);
    for (; d0 < dim_v; d0++) dot_pv_block(1, pt, pairs, vt, ldv, a, ot, d0, &next);
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

/* 16 x 16 32-bit units: dst row c = src column c (the unpack / shuffle
 * network of 64 permutes). */
static inline BF16_TARGET void transpose_16x16(const uint32_t *src, int64_t lds, uint32_t *dst, int64_t ldd) {
    __m512i r[16], t[16];
    for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_si512((const void *)(src + i * lds));
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
        r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
        r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
        r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    for (int h = 0; h < 16; h += 8)
        for (int i = 0; i < 4; i++) {
            t[h + i] = _mm512_shuffle_i32x4(r[h + i], r[h + i + 4], 0x88);
            t[h + i + 4] = _mm512_shuffle_i32x4(r[h + i], r[h + i + 4], 0xdd);
        }
    for (int i = 0; i < 8; i++) {
        r[i] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0x88);
        r[i + 8] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0xdd);
    }
    for (int i = 0; i < 16; i++) _mm512_storeu_si512((void *)(dst + i * ldd), r[i]);
}

static BF16_TARGET void bf16_transpose_32(const uint32_t *src, int64_t lds, int rows, int64_t cols, uint32_t *dst,
                                          int64_t ldd) {
    int64_t c0 = 0;
    for (; c0 + 16 <= cols; c0 += 16)
        for (int r0 = 0; r0 < rows; r0 += 16) transpose_16x16(src + r0 * lds + c0, lds, dst + c0 * ldd + r0, ldd);
    for (; c0 < cols; c0++)
        for (int r = 0; r < rows; r++) dst[c0 * ldd + r] = src[r * lds + c0];
}

/* ------------------------------------------------------------------ AMX
 * Eight tiles of 16 rows x 64 bytes: C00 C01 C10 C11 (0-3, fp32 16 x 16),
 * A0 A1 (4, 5: 16 rows x 32 bf16), B0 B1 (6, 7: 16 pairs x 16 columns).
 * Tiles hold no state between calls: each call loads the configuration
 * (the thread's tile state is its own), computes, and releases the tiles
 * (so that a context switch does not save 8 KiB of tile data for a thread
 * that has left the kernel). */
typedef struct amx_config {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_config;

/* A constant in memory, not built on the stack: with the configuring
 * function not inlined, gcc 12 dropped most stores of a stack-built
 * configuration before ldtilecfg read it (the builtin's read of memory
 * went unseen), and ldtilecfg faulted on the half-written one. */
static const amx_config amx_tiles __attribute__((aligned(64))) = {
    .palette = 1,
    .colsb = {64, 64, 64, 64, 64, 64, 64, 64},
    .rows = {16, 16, 16, 16, 16, 16, 16, 16},
};

static AMX_TARGET void amx_configure(void) { _tile_loadconfig(&amx_tiles); }

static AMX_TARGET void amx_release(void) { _tile_release(); }

#define AMX_INLINE static inline __attribute__((always_inline)) AMX_TARGET

/* C00 C01 (C10 C11 when two) = A · B summed over `chunks` chunks of 32
 * bf16, the one product both AMX kernels make: A0 = 16 rows of a0, A1 = 16
 * rows of a1 (lda_bytes apart, 32 elements a chunk); B0 B1 = 16 pairs x
 * 16 rows of b (the pair layout, TILE_ROWS pairs a row, 16 rows a chunk). */
AMX_INLINE void amx_dot_2x2(const uint16_t *a0, const uint16_t *a1, int64_t lda_bytes, const uint16_t *b,
                            int64_t chunks, bool two, flash_prefetch_cursor *next) {
    const int64_t ldb_bytes = TILE_ROWS * 4;
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (int64_t c = 0; c < chunks; c++) {
        flash_prefetch_row(next);
        const uint16_t *b_c = b + c * 16 * TILE_ROWS * 2;
        _tile_loadd(4, a0 + c * 32, lda_bytes);
        _tile_loadd(6, b_c, ldb_bytes);
        _tile_loadd(7, b_c + 16 * 2, ldb_bytes);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        if (two) {
            _tile_loadd(5, a1 + c * 32, lda_bytes);
            _tile_dpbf16ps(2, 5, 6);
            _tile_dpbf16ps(3, 5, 7);
        }
    }
}

/* C00 C01 to rows 0-15 of c, C10 C11 to rows 16-31 when two: 32 fp32 a row,
 * rows TILE_ROWS apart. */
AMX_INLINE void amx_store_2x2(float *c, bool two) {
    const int64_t ldc_bytes = TILE_ROWS * 4;
    _tile_stored(0, c, ldc_bytes);
    _tile_stored(1, c + 16, ldc_bytes);
    if (two) {
        _tile_stored(2, c + 16 * TILE_ROWS, ldc_bytes);
        _tile_stored(3, c + 16 * TILE_ROWS + 16, ldc_bytes);
    }
}

/* S^T = K · Q^T per 32 keys: A = 16 key rows x 32 widths of kt2, B = 16
 * width pairs x 16 rows of qp2 (already the pair layout tdpbf16ps wants),
 * C = st[j][r] for 16 keys x 16 rows. */
static AMX_TARGET void amx_qk_tile(const uint16_t *qp2, int64_t dim, const uint16_t *kt2, int64_t ldk, int nk,
                                   float *st, const flash_prefetch *pf) {
    flash_prefetch_cursor next = flash_prefetch_start(pf);
    const int64_t chunks = (dim + 31) / 32;
    const int keys = (nk + 15) / 16 * 16;
    amx_configure();
    for (int j0 = 0; j0 < keys; j0 += 32) {
        const bool two = j0 + 16 < keys;
        amx_dot_2x2(kt2 + (int64_t)j0 * ldk, kt2 + (int64_t)(j0 + 16) * ldk, ldk * 2, qp2, chunks, two, &next);
        amx_store_2x2(st + (int64_t)j0 * TILE_ROWS, two);
    }
    amx_release();
    flash_prefetch_rest(&next);
}

/* O^T += V^T · P per 32 widths: A = 16 width rows x 32 keys of vT, B = 16
 * key pairs x 16 rows of pt, C = 16 widths x 16 rows, summed over the key
 * chunks in order, then ot = alpha·ot + C by vector code (the tiles cannot
 * scale: the online softmax's rescaling stays in the zmm registers). */
static AMX_TARGET void amx_pv_tile(const uint16_t *pt, int nk, const uint16_t *vt, int64_t ldv, int64_t dim_v,
                                   const float *alpha, float *ot, const flash_prefetch *pf) {
    flash_prefetch_cursor next = flash_prefetch_start(pf);
    const int64_t chunks = (nk + 31) / 32;
    float block[32 * TILE_ROWS] __attribute__((aligned(64)));
    vec a[TILE_QV];
    SIMD_UNROLL for (int qv = 0; qv < TILE_QV; qv++) a[qv] = v_load(alpha + qv * VLEN);
    amx_configure();
    for (int64_t d0 = 0; d0 < dim_v; d0 += 32) {
        const bool two = d0 + 16 < dim_v;
        amx_dot_2x2(vt + d0 * ldv, vt + (d0 + 16) * ldv, ldv * 2, pt, chunks, two, &next);
        amx_store_2x2(block, two);
        const int64_t width = dim_v - d0 < 32 ? dim_v - d0 : 32;
        for (int64_t b = 0; b < width; b++)
            SIMD_UNROLL for (int qv = 0; qv < TILE_QV; qv++) {
                float *o = ot + (d0 + b) * TILE_ROWS + qv * VLEN;
                v_storeu(o, v_fma(a[qv], v_load(o), v_load(block + b * TILE_ROWS + qv * VLEN)));
            }
    }
    amx_release();
    flash_prefetch_rest(&next);
}

/* --------------------------------------------------- the table's entries */

static void bf16_qk_tile(const uint16_t *qp2, int64_t dim, const uint16_t *kt2, int64_t ldk, int nk, float *st,
                         const flash_prefetch *pf) {
    if (bf16_kind() == BF16_AMX)
        amx_qk_tile(qp2, dim, kt2, ldk, nk, st, pf);
    else
        dot_qk_tile(qp2, dim, kt2, ldk, nk, st, pf);
}

static void bf16_pv_tile(const uint16_t *pt, int nk, const uint16_t *vt, int64_t ldv, int64_t dim_v,
                         const float *alpha, float *ot, const flash_prefetch *pf) {
    if (bf16_kind() == BF16_AMX)
        amx_pv_tile(pt, nk, vt, ldv, dim_v, alpha, ot, pf);
    else
        dot_pv_tile(pt, nk, vt, ldv, dim_v, alpha, ot, pf);
}

#endif /* ATTN_ISA_X86_AVX512_DOT_BF16_H */
