/*
 * quant_f32_gemv.h — the quantized product's EXACT decode kernel (quant.h,
 * quant_f32_gemv_fn) written once for any vector width: the exact tile's
 * sums (templates/quant_f32_tile.h) taken straight from W's blocks, each
 * sub-block of 32 dequantized into registers and multiplied there, with no
 * panel written and read back.  Included by an ISA's quant_ukernels.c
 * after quant_f32_tile.h and quant_blocks.h (with QT_REGS), with
 *   GEMV_R1   rows of W per pass for one row of x (independent FMA chains)
 *   GEMV_R    rows of W per pass for 2 .. F32_MR rows of x
 * Lane l of the sum (i, j) adds x_i[k] * w_j[k] for k = l, l + VLEN, ...,
 * one FMA a term, k ascending from 0, then v_reduce_add: the tile's order
 * to the bit, so a decode step gives what a prefill gives.  Defines
 * static gemv_<type> and the table initialiser QUANT_F32_GEMV_TABLE.
 */

#define GEMV_VECS (32 / VLEN)

/* A pass: x rows MR_ (1..F32_MR) against W rows R_, over all K; the next
 * pass's bytes (next_bytes at next) prefetched into L2 along the way: the
 * R_ rows are read as R_ short streams, too short for the hardware's
 * prefetchers to find (a cold head at K = 896 ran 1.5 times slower
 * without). */
#define QUANT_F32_GEMV_ROWS(type, SUBS, BYTES)                                                                   \
    QT_REGS_INLINE void gemv_rows_##type(const int MR_, const int R_, const float *x, int64_t ldx,               \
                                         const uint8_t *w, int64_t stride, int64_t k, float *y, int64_t ldy,     \
                                         const uint8_t *next, int64_t next_bytes) {                              \
        vec a[F32_MR][GEMV_R1];                                                                                   \
        SIMD_UNROLL for (int i = 0; i < MR_; i++) SIMD_UNROLL for (int r = 0; r < R_; r++) a[i][r] = v_zero();  \
        const int64_t blocks = k / (32 * (SUBS)), lines_per_block = (next_bytes / 64 + blocks) / blocks;         \
        int64_t line = 0;                                                                                         \
        for (int64_t b = 0; b < blocks; b++) {                                                                    \
            const uint8_t *block = w + b * (BYTES);                                                               \
            for (int64_t l = 0; l < lines_per_block && 64 * line < next_bytes; l++, line++)                       \
                __builtin_prefetch(next + 64 * line, 0, 2);                                                       \
            for (int s = 0; s < (SUBS); s++) {                                                                    \
                const float *xe = x + (b * (SUBS) + s) * 32;                                                      \
                vec xv[F32_MR][GEMV_VECS];                                                                        \
                SIMD_UNROLL for (int i = 0; i < MR_; i++) SIMD_UNROLL for (int c = 0; c < GEMV_VECS; c++)        \
                    xv[i][c] = v_loadu(xe + i * ldx + c * VLEN);                                                  \
                SIMD_UNROLL for (int r = 0; r < R_; r++) {                                                        \
                    vec wv[GEMV_VECS];                                                                            \
                    sub32_##type(block + r * stride, s, wv);                                                      \
                    SIMD_UNROLL for (int i = 0; i < MR_; i++) SIMD_UNROLL for (int c = 0; c < GEMV_VECS; c++)    \
                        a[i][r] = v_fma(xv[i][c], wv[c], a[i][r]);                                                \
                }                                                                                                 \
            }                                                                                                     \
        }                                                                                                         \
        SIMD_UNROLL for (int i = 0; i < MR_; i++) SIMD_UNROLL for (int r = 0; r < R_; r++)                       \
            y[i * ldy + r] = v_reduce_add(a[i][r]);                                                               \
    }

/* W's rows R at a time, then one by one, for MR rows of x. */
#define QUANT_F32_GEMV_PASSES(type, MR, R)                                                                       \
    for (; j + (R) <= nr; j += (R))                                                                              \
        gemv_rows_##type(MR, R, x, ldx, w + j * stride, stride, k, y + j, ldy, w + (j + (R)) * stride,         \
                         stride * min_i64(R, nr - j - (R)));                                                     \
    for (; j < nr; j++)                                                                                          \
        gemv_rows_##type(MR, 1, x, ldx, w + j * stride, stride, k, y + j, ldy, w + (j + 1) * stride,           \
                         j + 1 < nr ? stride : 0);

#if F32_MR == 1
#define QUANT_F32_GEMV_MORE(type)
#elif F32_MR == 2
#define QUANT_F32_GEMV_MORE(type) \
    default: QUANT_F32_GEMV_PASSES(type, 2, GEMV_R) break;
#elif F32_MR == 4
#define QUANT_F32_GEMV_MORE(type)                                  \
    case 2: QUANT_F32_GEMV_PASSES(type, 2, GEMV_R) break;          \
    case 3: QUANT_F32_GEMV_PASSES(type, 3, GEMV_R) break;          \
    default: QUANT_F32_GEMV_PASSES(type, 4, GEMV_R) break;
#else
#error "the decode kernel instantiates 1, 2 or 4 rows of x"
#endif

#define QUANT_F32_GEMV(type, SUBS, BYTES)                                                                        \
    QUANT_F32_GEMV_ROWS(type, SUBS, BYTES)                                                                       \
    static QT_TARGET void gemv_##type(int mr, const float *x, int64_t ldx, const uint8_t *w, int64_t stride,     \
                                      int64_t nr, int64_t k, float *y, int64_t ldy) {                            \
        int64_t j = 0;                                                                                           \
        switch (mr) {                                                                                            \
        case 1: QUANT_F32_GEMV_PASSES(type, 1, GEMV_R1) break;                                                   \
        QUANT_F32_GEMV_MORE(type)                                                                                \
        }                                                                                                        \
    }

QUANT_F32_GEMV(q8_0, 1, 34)
QUANT_F32_GEMV(q4_0, 1, 18)
QUANT_F32_GEMV(q4_1, 1, 20)
QUANT_F32_GEMV(q5_0, 1, 22)
QUANT_F32_GEMV(q5_1, 1, 24)
QUANT_F32_GEMV(q4_k, 8, 144)
QUANT_F32_GEMV(q5_k, 8, 176)
QUANT_F32_GEMV(q6_k, 8, 210)

#define QUANT_F32_GEMV_TABLE                                                                                     \
    [QT_Q8_0] = gemv_q8_0, [QT_Q4_0] = gemv_q4_0, [QT_Q4_1] = gemv_q4_1, [QT_Q5_0] = gemv_q5_0,                   \
    [QT_Q5_1] = gemv_q5_1, [QT_Q4_K] = gemv_q4_k, [QT_Q5_K] = gemv_q5_k, [QT_Q6_K] = gemv_q6_k
