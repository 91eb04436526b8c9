/*
 * ukernels.c — the portable micro-kernels: plain C that builds on any
 * architecture and that the compiler may vectorise for the baseline
 * instruction set.  They define the contracts of src/isa/flash_table.h by
 * example; the other ISAs compute the same quantities with explicit SIMD.
 * This table is complete: the registry (src/isa/registry.c) fills any
 * entry another ISA leaves NULL from it.
 *
 * Forward tile shape: Br = 16 rows, key blocks of 4, Bc = 64 keys.
 * Backward gemm: one row at a time, 16 columns per register block.
 */
#include "isa/isa.h"

#include "isa/generic/vec.h"
#include "base/dtype.h"
#include "base/kv8.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

enum { GEN_ROWS = 16, GEN_KEY_BLOCK = 4, GEN_TILE_KEYS = 64, GEN_BLOCK_KEYS = 64 };

#include "isa/generic/exp2.h"

#define LOG2E_F64 1.4426950408889634

static void exp2_n(const float *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = flash_exp2_scalar(x[i]);
}

static void softcap_n(float *x, int64_t n, float cap) {
    const float k = (float)(2.0 * LOG2E_F64 / (double)cap);
    for (int64_t i = 0; i < n; i++) x[i] = cap * (1.0f - 2.0f / (flash_exp2_scalar(x[i] * k) + 1.0f));
}

/* The value subtracted from a row's scores: its max, or 0 while the row has
 * seen nothing (so that -inf − -inf never happens). */
static inline float max_or_zero(float m) { return m == -INFINITY ? 0.0f : m; }

/* ------------------------------------------------------------ tile kernels */

static void qk_tile(const float *qp, int64_t dim, const float *kt, int64_t ldk, int nk,
                    float *st, const flash_prefetch *pf) {
    flash_prefetch_cursor next = flash_prefetch_start(pf);
    for (int j0 = 0; j0 < nk; j0 += GEN_KEY_BLOCK) {
        float acc[GEN_KEY_BLOCK][GEN_ROWS] = {{0}};
        for (int64_t d = 0; d < dim; d++) {
            flash_prefetch_next(&next);
            const float *qp_d = qp + d * GEN_ROWS;
            for (int kk = 0; kk < GEN_KEY_BLOCK; kk++) {
                float k_jd = kt[(j0 + kk) * ldk + d];
                for (int r = 0; r < GEN_ROWS; r++) acc[kk][r] += k_jd * qp_d[r];
            }
        }
        memcpy(st + (int64_t)j0 * GEN_ROWS, acc, sizeof acc);
    }
    flash_prefetch_rest(&next);
}

static void softmax_tile(float *st, int nk, float *m, float *l, float *alpha) {
    float m_new[GEN_ROWS], m_use[GEN_ROWS], sum[GEN_ROWS];
    for (int r = 0; r < GEN_ROWS; r++) m_new[r] = m[r];
    for (int j = 0; j < nk; j++)
        for (int r = 0; r < GEN_ROWS; r++) m_new[r] = st[j * GEN_ROWS + r] > m_new[r] ? st[j * GEN_ROWS + r] : m_new[r];
    for (int r = 0; r < GEN_ROWS; r++) {
        m_use[r] = max_or_zero(m_new[r]);
        alpha[r] = flash_exp2_scalar(m[r] - m_use[r]);
        sum[r] = 0.0f;
    }
    for (int j = 0; j < nk; j++)
        for (int r = 0; r < GEN_ROWS; r++) {
            float p = flash_exp2_scalar(st[j * GEN_ROWS + r] - m_use[r]);
            st[j * GEN_ROWS + r] = p;
            sum[r] += p;
        }
    for (int r = 0; r < GEN_ROWS; r++) {
        l[r] = alpha[r] * l[r] + sum[r];
        m[r] = m_new[r];
    }
}

static void pv_tile(const float *st, int nk, const float *vt, int64_t ldv, int64_t dim_v,
                    const float *alpha, float *ot, const flash_prefetch *pf) {
    flash_prefetch_cursor next = flash_prefetch_start(pf);
    for (int64_t d = 0; d < dim_v; d++) {
        float acc[GEN_ROWS];
        flash_prefetch_next(&next);
        for (int r = 0; r < GEN_ROWS; r++) acc[r] = alpha[r] * ot[d * GEN_ROWS + r];
        for (int j = 0; j < nk; j++) {
            float v_jd = vt[j * ldv + d];
            for (int r = 0; r < GEN_ROWS; r++) acc[r] += st[j * GEN_ROWS + r] * v_jd;
        }
        memcpy(ot + d * GEN_ROWS, acc, sizeof acc);
    }
    flash_prefetch_rest(&next);
}

/* The structural mask: the one rule every ISA shares (a vector of one
 * float here, vec.h). */
#define TILE_ROWS GEN_ROWS
#include "isa/templates/mask_tile.h"
#undef TILE_ROWS

static void probs_tile(float *st, int nk, const float *m, const float *inv_l) {
    for (int j = 0; j < nk; j++)
        for (int r = 0; r < GEN_ROWS; r++)
            st[j * GEN_ROWS + r] = flash_exp2_scalar(st[j * GEN_ROWS + r] - max_or_zero(m[r])) * inv_l[r];
}

/* ------------------------------------------------------------ rows kernels */

/* Element d of a K/V row stored as dtype, as a float (exact).  The rows
 * kernels read the caller's tensors in place, half ones too; always
 * inlined with a constant dtype, so the float kernels stay plain loops. */
static inline __attribute__((always_inline)) float kv_elem(const void *row, attn_dtype dtype, int64_t d) {
    if (dtype_is_kv8(dtype)) return kv8_value(dtype, (const uint8_t *)row + kv8_offset_bytes(d), d % KV8_BLOCK);
    if (dtype == ATTN_F16) return dtype_f16_to_f32(((const uint16_t *)row)[d]);
    if (dtype == ATTN_BF16) return dtype_bf16_to_f32(((const uint16_t *)row)[d]);
    return ((const float *)row)[d];
}

/* Row j, kv head h of K or V (strides in elements). */
static inline __attribute__((always_inline)) const void *kv_row(const void *base, attn_dtype dtype, int64_t at) {
    if (dtype_is_kv8(dtype)) return (const char *)base + kv8_offset_bytes(at);
    return (const char *)base + at * (dtype == ATTN_F32 ? (int64_t)sizeof(float) : (int64_t)sizeof(uint16_t));
}

static inline __attribute__((always_inline)) void qk_rows_of(attn_dtype dtype, const float *qp, int64_t ldq,
                                                              int heads, int rows_per_head, int64_t dim,
                                                              const void *k, int64_t ldk, int64_t ldh, int nk,
                                                              float *s, int64_t lds, const flash_prefetch *pf) {
    flash_prefetch_cursor next = flash_prefetch_start(pf);
    for (int j = 0; j < nk; j++) {
        flash_prefetch_row(&next);
        for (int h = 0; h < heads; h++) {
            const void *k_jh = kv_row(k, dtype, j * ldk + h * ldh);
            for (int r = h * rows_per_head; r < (h + 1) * rows_per_head; r++) {
                const float *q_r = qp + r * ldq;
                float dot = 0.0f;
                for (int64_t d = 0; d < dim; d++) dot += q_r[d] * kv_elem(k_jh, dtype, d);
                s[r * lds + j] = dot;
            }
        }
    }
}

static void qk_rows(const float *qp, int64_t ldq, int heads, int rows_per_head, int64_t dim,
                    const float *k, int64_t ldk, int64_t ldh, int nk, float *s, int64_t lds,
                    const flash_prefetch *pf) {
    qk_rows_of(ATTN_F32, qp, ldq, heads, rows_per_head, dim, k, ldk, ldh, nk, s, lds, pf);
}

static void qk_rows_half(attn_dtype kv_dtype, const float *qp, int64_t ldq, int heads, int rows_per_head,
                         int64_t dim, const void *k, int64_t ldk, int64_t ldh, int nk, float *s,
                         int64_t lds, const flash_prefetch *pf) {
    if (kv_dtype == ATTN_F16)
        qk_rows_of(ATTN_F16, qp, ldq, heads, rows_per_head, dim, k, ldk, ldh, nk, s, lds, pf);
    else if (kv_dtype == ATTN_Q8_0)
        qk_rows_of(ATTN_Q8_0, qp, ldq, heads, rows_per_head, dim, k, ldk, ldh, nk, s, lds, pf);
    else if (kv_dtype == ATTN_FP8_E4M3)
        qk_rows_of(ATTN_FP8_E4M3, qp, ldq, heads, rows_per_head, dim, k, ldk, ldh, nk, s, lds, pf);
    else
        qk_rows_of(ATTN_BF16, qp, ldq, heads, rows_per_head, dim, k, ldk, ldh, nk, s, lds, pf);
}

static void softmax_rows(float *s, int64_t lds, int rows, int nk, float *m, float *l,
                         float *alpha) {
    for (int r = 0; r < rows; r++) {
        float *s_r = s + r * lds;
        float m_new = m[r];
        for (int j = 0; j < nk; j++) m_new = s_r[j] > m_new ? s_r[j] : m_new;
        float m_use = max_or_zero(m_new), sum = 0.0f;
        alpha[r] = flash_exp2_scalar(m[r] - m_use);
        for (int j = 0; j < nk; j++) {
            s_r[j] = flash_exp2_scalar(s_r[j] - m_use);
            sum += s_r[j];
        }
        l[r] = alpha[r] * l[r] + sum;
        m[r] = m_new;
    }
}

static inline __attribute__((always_inline)) void pv_rows_of(attn_dtype dtype, const float *s, int64_t lds,
                                                              int heads, int rows_per_head, int nk, const void *v,
                                                              int64_t ldv, int64_t ldh, int64_t dim_v,
                                                              const float *alpha, float *o, int64_t ldo,
                                                              const flash_prefetch *pf) {
    flash_prefetch_cursor next = flash_prefetch_start(pf);
    if (alpha)
        for (int r = 0; r < heads * rows_per_head; r++)
            for (int64_t d = 0; d < dim_v; d++) o[r * ldo + d] *= alpha[r];
    for (int j = 0; j < nk; j++) {
        flash_prefetch_row(&next);
        for (int h = 0; h < heads; h++) {
            const void *v_jh = kv_row(v, dtype, j * ldv + h * ldh);
            for (int r = h * rows_per_head; r < (h + 1) * rows_per_head; r++) {
                float p = s[r * lds + j], *o_r = o + r * ldo;
                for (int64_t d = 0; d < dim_v; d++) o_r[d] += p * kv_elem(v_jh, dtype, d);
            }
        }
    }
}

static void pv_rows(const float *s, int64_t lds, int heads, int rows_per_head, int nk,
                    const float *v, int64_t ldv, int64_t ldh, int64_t dim_v, const float *alpha,
                    float *o, int64_t ldo, const flash_prefetch *pf) {
    pv_rows_of(ATTN_F32, s, lds, heads, rows_per_head, nk, v, ldv, ldh, dim_v, alpha, o, ldo, pf);
}

static void pv_rows_half(attn_dtype kv_dtype, const float *s, int64_t lds, int heads, int rows_per_head, int nk,
                         const void *v, int64_t ldv, int64_t ldh, int64_t dim_v, const float *alpha,
                         float *o, int64_t ldo, const flash_prefetch *pf) {
    if (kv_dtype == ATTN_F16)
        pv_rows_of(ATTN_F16, s, lds, heads, rows_per_head, nk, v, ldv, ldh, dim_v, alpha, o, ldo, pf);
    else if (kv_dtype == ATTN_Q8_0)
        pv_rows_of(ATTN_Q8_0, s, lds, heads, rows_per_head, nk, v, ldv, ldh, dim_v, alpha, o, ldo, pf);
    else if (kv_dtype == ATTN_FP8_E4M3)
        pv_rows_of(ATTN_FP8_E4M3, s, lds, heads, rows_per_head, nk, v, ldv, ldh, dim_v, alpha, o, ldo, pf);
    else
        pv_rows_of(ATTN_BF16, s, lds, heads, rows_per_head, nk, v, ldv, ldh, dim_v, alpha, o, ldo, pf);
}

static void probs_rows(const float *s, int64_t lds, int rows, int nk, const float *m,
                       const float *inv_l, float *w, int64_t ldw) {
    for (int r = 0; r < rows; r++)
        for (int j = 0; j < nk; j++)
            w[r * ldw + j] = flash_exp2_scalar(s[r * lds + j] - max_or_zero(m[r])) * inv_l[r];
}

/* ------------------------------------------------------- both directions */

/* A float is NaN or infinite when its exponent field is all ones: adding 1
 * to that field carries into the sign bit exactly then.  Integer OR of the
 * carries, so that the compiler may vectorise the loop (a float test with an
 * early exit it would not). */
/* ------------------------------------------------ half-precision storage */

static void widen(const void *src, attn_dtype dtype, float *dst, int64_t n) {
    const uint16_t *half = src;
    if (dtype_is_kv8(dtype))
        for (int64_t e = 0; e < n; e++) dst[e] = kv_elem(src, dtype, e);
    else if (dtype == ATTN_F16)
        for (int64_t e = 0; e < n; e++) dst[e] = dtype_f16_to_f32(half[e]);
    else if (dtype == ATTN_BF16)
        for (int64_t e = 0; e < n; e++) dst[e] = dtype_bf16_to_f32(half[e]);
    else
        memcpy(dst, src, sizeof(float) * (size_t)n);
}

static void narrow(const float *src, attn_dtype dtype, void *dst, int64_t n) {
    uint16_t *half = dst;
    if (dtype == ATTN_F16)
        for (int64_t e = 0; e < n; e++) half[e] = dtype_f32_to_f16(src[e]);
    else if (dtype == ATTN_BF16)
        for (int64_t e = 0; e < n; e++) half[e] = dtype_f32_to_bf16(src[e]);
    else
        memcpy(dst, src, sizeof(float) * (size_t)n);
}

static bool all_finite(const float *x, int64_t ld, int rows, int64_t n) {
    uint32_t carries = 0;
    for (int r = 0; r < rows; r++)
        for (int64_t j = 0; j < n; j++) {
            uint32_t bits;
            memcpy(&bits, x + r * ld + j, sizeof bits);
            carries |= ((bits & 0x7f800000u) + 0x00800000u) & 0x80000000u;
        }
    return carries == 0;
}

/* ---------------------------------------------------------------- backward */

enum { GEN_NB = 16 }; /* columns per register block */

static void gemm(int m, int n, int k, const float *a, int64_t a_rs, int64_t a_cs, const float *b,
                 int64_t ldb, float *c, int64_t ldc, int accumulate) {
    for (int r = 0; r < m; r++)
        for (int n0 = 0; n0 < n; n0 += GEN_NB) {
            float acc[GEN_NB];
            float *c_r = c + r * ldc + n0;
            for (int j = 0; j < GEN_NB; j++) acc[j] = accumulate ? c_r[j] : 0.0f;
            for (int kk = 0; kk < k; kk++) {
                const float a_rk = a[r * a_rs + kk * a_cs];
                const float *b_k = b + kk * ldb + n0;
                for (int j = 0; j < GEN_NB; j++) acc[j] = fmaf(a_rk, b_k[j], acc[j]);
            }
            memcpy(c_r, acc, sizeof acc);
        }
}

static void p_ds(float *s, float *dp, int rows, int cols, int64_t ld, float c, const float *nl,
                 const float *di) {
    for (int r = 0; r < rows; r++)
        for (int j = 0; j < cols; j++) {
            float p = flash_exp2_scalar(fmaf(s[r * ld + j], c, nl[r]));
            s[r * ld + j] = p;
            dp[r * ld + j] = p * (dp[r * ld + j] - di[r]);
        }
}

/* --------------------------------------------------------------------- peak */

#include "isa/templates/peak.h"

static const ukernel_table ukernels = {
    .tile_rows = GEN_ROWS,
    .key_block = GEN_KEY_BLOCK,
    .tile_keys = GEN_TILE_KEYS,
    .block_keys = GEN_BLOCK_KEYS,
    .exp2_n = exp2_n,
    .softcap_n = softcap_n,
    .qk_tile = qk_tile,
    .softmax_tile = softmax_tile,
    .pv_tile = pv_tile,
    .probs_tile = probs_tile,
    .mask_tile = simd_mask_tile,
    .qk_rows = qk_rows,
    .qk_rows_half = qk_rows_half,
    .softmax_rows = softmax_rows,
    .pv_rows = pv_rows,
    .pv_rows_half = pv_rows_half,
    .probs_rows = probs_rows,
    .all_finite = all_finite,
    .widen = widen,
    .narrow = narrow,
    .gemm = gemm,
    .p_ds = p_ds,
    .peak_chunk = simd_peak_chunk,
    .peak_lanes = 1,
    .peak_isa = "scalar",
};

/* The quantized products' table (quant_ukernels.c). */
extern const quant_table attn__quant_table_generic;

/* The portable ISA's entry in the registry (src/isa/isa.h): every CPU runs it. */
const isa_desc attn__isa_generic = {
    .name = "generic", .supported = NULL, .flash = &ukernels, .quant = &attn__quant_table_generic};
