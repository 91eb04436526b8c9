/*
 * attn_rope.h — rotary position embedding, RoPE (libattn): queries and keys
 * rotated in place by angles proportional to their positions, so that
 * q·k depends on the two positions only through their difference; the
 * gradient; and the frequency tables of the scaling variants that model
 * configurations name (Hugging Face's rope_type: linear, dynamic, yarn,
 * llama3).  docs/rope.md has the formulas and which models use what.
 *
 * Shape legend:
 *   B  batch          L  positions       H  heads       D  width per head
 *   R  rotary width   (opt.rotary_dim: even, <= D; widths [R, D) pass through)
 *   F  = R / 2        frequencies, one per rotated pair
 *
 *   x         : [B, L, H, D]  float32, float16 or bfloat16, rotated IN PLACE;
 *                             strides allowed (stride[3] must be 1), elements
 *                             must not overlap
 *   positions : [B, L]        int64, contiguous, or NULL
 *
 * What attn_rope_apply computes.  Row (b, l) of x is at position
 *     p = positions ? positions[b * L + l] : position_offset + l
 * and each of its heads has its pairs (a_f, b_f), f in [0, F), rotated by
 * the angle p * inv_freq[f]:
 *     y[a_f] = m * (x[a_f] * cos(p inv_freq[f]) - x[b_f] * sin(p inv_freq[f]))
 *     y[b_f] = m * (x[b_f] * cos(p inv_freq[f]) + x[a_f] * sin(p inv_freq[f]))
 * where the pairing decides which widths form a pair:
 *     ATTN_ROPE_NEOX  (a_f, b_f) = (f, f + F)     "rotate half": GPT-NeoX, Llama
 *                                                 and Qwen in HF, Gemma, Mistral
 *     ATTN_ROPE_GPTJ  (a_f, b_f) = (2f, 2f + 1)   INTERLEAVED: GPT-J, Meta's own
 *                                                 Llama code, llama.cpp's "norm"
 * The two are the same rotation up to a fixed permutation of the widths
 * (converters permute W_Q and W_K to move a model from one to the other).
 *     inv_freq[f] = theta^(-2f / R)    before scaling (each variant below
 *                                      changes it; attn_rope_frequencies
 *                                      returns the table)
 *     m           = the attention factor: 1 except for YaRN (HF's
 *                   attention_scaling, which multiplies cos and sin)
 *
 * Precision: the angle p * inv_freq[f] is formed in double, because in
 * float it is not an angle at all for long contexts: at p = 10^6 the float
 * spacing is 0.0625 rad, so cos and sin would be off by up to 3%, beyond
 * even bfloat16's 8 bits (HF computes it in float32 and is off by that
 * much).  In double the angle is good to |p| * 2^-52 rad (2e-10 at 10^6).
 * cos, sin and the two products are double too, and each result is
 * rounded once to the storage type: a float32 result is the exact rotation
 * of the stored inputs to within half an ulp (plus ~1e-15 relative), and a
 * float16 or bfloat16 result likewise to within half an ulp of its type —
 * not the float32 result rounded again (which may be one ulp away).  In
 * float32 the op runs at the memory's bandwidth, so double costs nothing
 * there; the half types are limited by their conversions (docs/rope.md).
 *
 * Positions may be negative (a rotation by -p undoes one by p: re-rotating
 * cached keys by a negative delta, as llama.cpp's context shift does, is a
 * use); position_offset + L - 1 must fit in int64.
 *
 * Determinism: the same bits for any thread count (rows are independent).
 */
#ifndef ATTN_ROPE_H
#define ATTN_ROPE_H

#include "attn.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum attn_rope_pairing {
    ATTN_ROPE_NEOX = 0, /* pairs (f, f + R/2): HF's rotate_half          */
    ATTN_ROPE_GPTJ = 1  /* pairs (2f, 2f + 1): HF GPT-J's rotate_every_two */
} attn_rope_pairing;

/* The scaling variants, by the name HF's config.json gives them
 * (rope_scaling.rope_type, or rope_parameters.rope_type), each computed as
 * transformers' function of that name in modeling_rope_utils.py computes
 * it.  Static NTK-aware scaling (theta * factor^(R / (R - 2)), what the
 * "NTK-aware" Reddit post and some engines call NTK) needs no variant: set
 * theta to that value with ATTN_ROPE_SCALING_NONE. */
typedef enum attn_rope_scaling {
    ATTN_ROPE_SCALING_NONE = 0,        /* "default"                                  */
    ATTN_ROPE_SCALING_LINEAR = 1,      /* "linear": inv_freq / factor, i.e. positions
                                          divided by factor (position interpolation)
                                          _compute_linear_scaling_rope_parameters    */
    ATTN_ROPE_SCALING_DYNAMIC_NTK = 2, /* "dynamic": theta grown with the sequence
                                          length, theta * (factor * seq_len / original
                                          - (factor - 1))^(R / (R - 2)) once seq_len
                                          exceeds original_max_position_embeddings
                                          _compute_dynamic_ntk_parameters            */
    ATTN_ROPE_SCALING_YARN = 3,        /* "yarn": fast pairs kept, slow pairs divided
                                          by factor, a linear ramp between; and the
                                          attention factor 0.1 ln(factor) + 1
                                          _compute_yarn_parameters                   */
    ATTN_ROPE_SCALING_LLAMA3 = 4       /* "llama3": Llama 3.1's wavelength bands
                                          _compute_llama3_parameters                 */
} attn_rope_scaling;

/* The options of one rotation.  Initialise with
 *     attn_rope_options opt = ATTN_ROPE_OPTIONS_INIT;
 * which means: NEOX pairing, theta 10000, the whole width rotated, no
 * scaling, the default thread count; then set what the model's config says.
 * Passing NULL options means the same.  Fields a variant does not use are
 * not read.  In HF's terms: theta = rope_theta, rotary_dim = head_dim *
 * partial_rotary_factor (GPT-J: rotary_dim), and the rest are the keys of
 * rope_scaling / rope_parameters of the same names. */
typedef struct attn_rope_options {
    size_t struct_size;         /* sizeof(attn_rope_options), set by the initialiser */
    attn_rope_pairing pairing;
    double theta;               /* the base, > 0 (Llama 2: 1e4, Llama 3: 5e5,
                                   Qwen2.5: 1e6); the initialiser sets 10000    */
    int64_t rotary_dim;         /* R: even, <= D; 0 = D                          */
    attn_rope_scaling scaling;
    double factor;              /* LINEAR, DYNAMIC_NTK, YARN, LLAMA3: > 0        */
    int64_t original_max_position_embeddings; /* DYNAMIC_NTK (HF reads the config's
                                   max_position_embeddings), YARN, LLAMA3: > 0   */
    int64_t seq_len;            /* DYNAMIC_NTK: the sequence length the table is
                                   for (HF: max(position_ids) + 1 of the forward
                                   call); <= original_max_position_embeddings
                                   (0 included) gives the unscaled table         */
    double beta_fast, beta_slow; /* YARN: 0 = HF's defaults 32 and 1; > 0 and
                                   beta_fast > beta_slow                         */
    double mscale, mscale_all_dim; /* YARN (DeepSeek): when BOTH are nonzero the
                                   default attention factor is
                                   (0.1 mscale ln f + 1) / (0.1 mscale_all_dim ln f + 1);
                                   >= 0                                          */
    int yarn_no_truncate;       /* YARN: nonzero = HF's "truncate": false (gpt-oss):
                                   the ramp's ends are not rounded to whole pairs */
    double low_freq_factor, high_freq_factor; /* LLAMA3: > 0, high > low
                                   (Llama 3.1: 1 and 4)                          */
    double attention_factor;    /* m, multiplies cos and sin; 0 = the variant's
                                   default (YARN: HF's formula above, with
                                   0.1 ln(factor) + 1 when mscale is unset;
                                   otherwise 1); else > 0                         */
    const double *inv_freq;     /* [F] a frequency table of your own (LongRoPE's
                                   per-pair factors, an engine's exact table), or
                                   NULL; replaces theta and the scaling, which
                                   must be NONE                                  */
    int threads;                /* 0 = $ATTN_NUM_THREADS, else OpenMP's default  */
} attn_rope_options;

#define ATTN_ROPE_OPTIONS_INIT {.struct_size = sizeof(attn_rope_options), .theta = 10000.0}

/* Rotates x in place (the formula at the top): x holds q or k, [B, L, H, D],
 * on entry and the rotated rows on return.
 *   positions: [B, L] int64 contiguous, or NULL for position_offset + l
 *   opt: NULL for the defaults (NEOX, theta 10000, R = D, no scaling).
 * Everything is checked before x is touched: on failure x is unchanged. */
ATTN_API attn_status attn_rope_apply(attn_tensor *x, const int64_t *positions, int64_t position_offset,
                                     const attn_rope_options *opt);

/* The gradient of attn_rope_apply with the same positions and options:
 *   dy: [B, L, H, D]  dLoss/dy on entry, dLoss/dx on return (in place)
 * The rotation is linear, y = m R(p) x with R orthogonal, so dx = m R(p)^T dy
 * = m R(-p) dy: the rotation by the opposite angle, times m.  That is the
 * INVERSE of the forward only when m = 1; with YaRN's m > 1, backward after
 * apply multiplies by m^2.  Widths [R, D) pass their gradient through. */
ATTN_API attn_status attn_rope_backward(attn_tensor *dy, const int64_t *positions,
                                        int64_t position_offset, const attn_rope_options *opt);

/* The frequency table and attention factor attn_rope_apply uses for heads
 * of width head_dim (HF's ROPE_INIT_FUNCTIONS return the same pair, in
 * float32):
 *   inv_freq: [F] written, F = R / 2 (R = opt->rotary_dim, or head_dim if 0)
 *   attention_factor: written, or NULL */
ATTN_API attn_status attn_rope_frequencies(int64_t head_dim, const attn_rope_options *opt,
                                           double *inv_freq, double *attention_factor);

/* The cos and sin tables at count positions, attention factor included
 * (HF's cos, sin of the rotary embedding, without the duplicated half),
 * for engines that fuse the rotation into their own kernels:
 *   positions: [count] int64, or NULL for position_offset + i
 *   cos, sin:  [count, F] float32, written: m cos(p inv_freq[f]), m sin(p inv_freq[f]),
 *              each computed in double and rounded once */
ATTN_API attn_status attn_rope_cos_sin(int64_t head_dim, const int64_t *positions, int64_t count,
                                       int64_t position_offset, const attn_rope_options *opt,
                                       float *cos, float *sin);

/* ------------------------------------------------ tables per sequence
 *
 * A table holds, for one rotation (head width and options), the c_f and
 * s_f of attn_rope_apply at every position of [0, n): computed once each,
 * by the same code and in the same double precision as attn_rope_apply's
 * per-call tables, so attn_rope_apply_table's results are attn_rope_apply's
 * BIT FOR BIT.  A decoder builds one per distinct rotation (Gemma 3: local
 * and global theta) when a sequence starts and grows it as the sequence
 * does; each layer's q and k are then rotated without a cos or sin call
 * (attn_rope_apply computes F of each per row per call: 2 x layers x L x F
 * per forward).
 *
 *   table: [n, 2, F] double, c_f = m cos(p inv_freq[f]), s_f = m sin(p inv_freq[f])
 *          at position p (m the attention factor); 16 F bytes a position
 *          (F = 64: 1 KiB)
 *
 * The options are copied and fixed at creation; DYNAMIC_NTK's table is the
 * one of its seq_len as given (it does not follow the positions reserved).
 * A table is read-only while applied (any number of threads may apply one
 * table at once) and must not be reserved meanwhile. */
typedef struct attn_rope_table attn_rope_table; /* opaque */

/* A new table for heads of width head_dim (>= 2) and opt (NULL: the
 * defaults), covering no position yet: opt is checked as attn_rope_apply
 * checks it.  *out is NULL on failure. */
ATTN_API attn_status attn_rope_table_new(int64_t head_dim, const attn_rope_options *opt, attn_rope_table **out);
ATTN_API void attn_rope_table_free(attn_rope_table *t);

/* Makes t cover positions [0, n) (n >= 0; smaller than covered: nothing
 * to do).  Storage grows geometrically (at least doubling), so one
 * position a call (decoding) reallocates O(log n) times; each position's
 * cos and sin are computed once, when first covered.  On failure
 * (ATTN_ERR_OUT_OF_MEMORY, ATTN_ERR_OVERFLOW) t is unchanged. */
ATTN_API attn_status attn_rope_table_reserve(attn_rope_table *t, int64_t n);

/* The positions t covers: [0, attn_rope_table_positions(t)); 0 for NULL. */
ATTN_API int64_t attn_rope_table_positions(const attn_rope_table *t);

/* Position p's row of t (0 <= p < positions covered):
 *   cos, sin: set to [F] double each, valid until t is reserved again or freed */
ATTN_API attn_status attn_rope_table_row(const attn_rope_table *t, int64_t position, const double **cos,
                                         const double **sin);

/* attn_rope_apply with t's options, its cos and sin read from t:
 *   x: [B, L, H, D] rotated in place, D = t's head_dim
 *   positions: [B, L] or NULL for position_offset + l, every one in
 *              [0, positions covered) — NEGATIVE positions are refused
 *              (attn_rope_apply takes them)
 * Same bits as attn_rope_apply(x, positions, position_offset, opt).
 * Everything is checked before x is touched. */
ATTN_API attn_status attn_rope_apply_table(attn_tensor *x, const int64_t *positions, int64_t position_offset,
                                           const attn_rope_table *t);

#ifdef __cplusplus
}
#endif

#endif /* ATTN_ROPE_H */
