/*
 * tolerances.h — every tolerance of the test suite, in one place.
 *
 * Each constant bounds a difference between two computations of the same
 * number; its comment says what is compared and why the bound holds.  Where
 * a test has a (warn, fail) pair, crossing WARN prints a warning and
 * crossing FAIL fails the test.  Names read <what>_<quantity>_<REL|ABS>_
 * <WARN|FAIL>: REL is relative to the scale the test states (usually
 * max(1, max|expected|)), ABS is absolute.  Literal suffixes (f, L) are part
 * of the value: they keep each comparison in the precision it was written in.
 *
 * Data is not here: inputs, exact expected values, step sizes, time limits.
 */
#ifndef ATTN_TEST_TOLERANCES_H
#define ATTN_TEST_TOLERANCES_H

/* ---- the reference kernel against the independent oracle
 *      (ref/test_sdpa_ref.c, api/test_mha.c).  fp32 storage of the inputs is
 *      shared by both sides, so what remains is the kernel's accumulation
 *      error. ---- */

/* outputs, relative to the largest output magnitude (at least 1) */
#define REF_OUT_REL_FAIL 1e-5
/* weights, absolute: they are <= 1 */
#define REF_WEIGHT_ABS_FAIL 1e-6
/* lse, absolute */
#define REF_LSE_ABS_FAIL 1e-5
/* the module's outputs against long-double projections, the oracle and W_O, relative to max(1, max|out|) */
#define MHA_OUT_REL_FAIL 1e-5
/* the module's per-head weights against the oracle's: as for the bare kernel */
#define MHA_WEIGHT_ABS_FAIL 1e-6

/* ---- the projections' fast path (the BLAS: float sums) against their
 *      reference (double sums), element by element (api/test_linear.c).
 *      A float sum of n terms, in any order, with or without FMA, is within
 *      gamma_n = n u / (1 - n u) times the sum of the terms' magnitudes of
 *      the exact sum (u = 2^-24; Higham, Accuracy and Stability, 3.1), and
 *      the reference is within u |ref| of it: the bound is that worst case,
 *      which typical rounding (~sqrt(n) u) stays far inside. ---- */
#define LINEAR_BLAS_BOUND_FAIL 1.0

/* ---- the quantized products (quant/test_quant_matmul.c), as multiples of
 *      worst-case bounds the test computes per output (docs/quant.md).
 *
 * EXACT against the double sum of the same dequantized products: each
 * output is L lane sums of about K/L terms in float32, then a tree of
 * log2(L) sums (L = 8 or 16), so it is within gamma_n sum_k |x_k w_k| of
 * the exact sum with n = K/8 + 4 (any L >= 8), and the reference within
 * u |ref| of that. */
#define QUANT_EXACT_BOUND_FAIL 1.0
/* FAST against the test's own double evaluation of the same decomposition
 * (sum_g ws xs isum + wc xsum, the activations quantized by the documented
 * rule): the integer sums are exact, what remains is the float32 sum of the
 * 2 K/16 group terms and the lanes' tree: within gamma_n T with
 * n = K/8 + 8 and T = sum_k |ws xs wu_k qx_k| + sum_g |wc_g xsum_g| (a
 * kernel may split a group's integer sum into lanes anywhere). */
#define QUANT_FAST_KERNEL_BOUND_FAIL 1.0
/* FAST against the double reference of EXACT: the activations' rounding,
 * sum_k |w_k| |x_k - xs q_k| (each at most xs / 2), plus the two bounds
 * above. */
#define QUANT_FAST_QUANT_BOUND_FAIL 1.0
/* FAST against EXACT on the real model's tensors (test_real_model): the rms
 * of the difference over the rms of EXACT's output.  Measured 0.1-0.6 %
 * (docs/quant.md §2); 8-bit activations cannot do much better, a kernel
 * that mixed up groups or scales would be far off. */
#define QUANT_FAST_REAL_REL_RMS_FAIL 2e-2

/* ---- flash against the reference kernel (flash/test_flash_forward.c,
 *      flash/test_flash_backward.c).
 *
 * Both sides read the same fp32 inputs; what remains is flash's fp32
 * accumulation against the reference's double, and above all the fp32
 * rounding of the scores, which grows with their magnitude.  With
 * sigma = scale·rms(q)·rms(k)·sqrt(D), the spread of the scores (1 with the
 * default scale on unit-variance data):
 *   outputs: |diff| <= FLASH_OUT_REL · max(1, sigma) · max(max|reference output|, rms(v))
 *   weights: |diff| <= FLASH_WEIGHT_ABS · max(1, sigma)        (weights are <= 1)
 *   lse:     |diff| <= FLASH_LSE_REL · max(1, |lse|, sigma)
 * An output is a weighted average of values, rounded like them: rms(v)
 * stands in when averaging cancels the output down to much less (a single
 * value column averaged over 1000 keys).
 * So the thresholds apply as they stand at the default scale, and grow to
 * about 8x for a custom scale of 0.5 at D = 256, where an fp32 dot product
 * of 256 terms is off by up to ~2e-5 whatever kernel computes it (measured,
 * docs/kernels.md). ---- */

/* outputs, scaled as above */
#define FLASH_OUT_REL_WARN 1e-6
#define FLASH_OUT_REL_FAIL 2e-6
/* weights, scaled as above */
#define FLASH_WEIGHT_ABS_WARN 1e-6
#define FLASH_WEIGHT_ABS_FAIL 2e-6
/* lse, relative as above */
#define FLASH_LSE_REL_WARN 1e-6
#define FLASH_LSE_REL_FAIL 4e-6
/* exp2 of the vector kernels against exp2 in double, relative error over [-126, 0] */
#define FLASH_EXP2_REL_WARN 1.5e-7
#define FLASH_EXP2_REL_FAIL 2e-7
/* flash gradients against the reference's, relative to the largest gradient magnitude of each tensor (at least 1) */
#define FLASH_GRAD_REL_WARN 2e-6
#define FLASH_GRAD_REL_FAIL 1e-5

/* ---- the score stage (api/test_logits.c): flash against the long-double
 *      oracle with soft-capping, sinks and ALiBi.  Scaled like the flash
 *      tolerances above, but by the largest visible score magnitude (at
 *      least 1) instead of sigma: ALiBi's biases grow with the distance
 *      (slope 0.5 at 1000 keys: scores of 500, whose fp32 rounding is
 *      500 · 2^-24), and the cap's tanh comes from the exp2 polynomial, an
 *      absolute error of about 1e-7 · cap on each capped score. ---- */
#define LOGITS_FLASH_OUT_REL_FAIL 2e-6
#define LOGITS_FLASH_WEIGHT_ABS_FAIL 2e-6
#define LOGITS_FLASH_LSE_REL_FAIL 4e-6
/* the softcap_n micro-kernel against cap·tanh(x/cap) in double, absolute,
 * relative to the cap: 1 − 2/(e + 1) with e the exp2 polynomial's (1.3 ulp)
 * loses nothing near |tanh| = 1 and a few 2^-24 near 0 */
#define LOGITS_SOFTCAP_ABS_FAIL 4e-7
/* flash gradients (dsinks included) against the reference's, relative to
 * each tensor's largest magnitude (at least 1) */
#define LOGITS_FLASH_GRAD_REL_FAIL 2e-5

/* ---- finite inputs whose scores overflow float32 (api/test_nonfinite.c):
 *      every kernel against the long-double oracle, the reference's
 *      gradients against closed forms.  Rows the fp32 kernels cannot
 *      compute are recomputed in double and stored once: a float rounding
 *      of the answer.  (Non-finite inputs are checked exactly: finite or
 *      not, and bit-identical where a hidden key may not matter.) ---- */

/* outputs, relative to max(1, max|oracle output|) */
#define OVERFLOW_OUT_REL_FAIL 1e-6
/* weights, absolute */
#define OVERFLOW_WEIGHT_ABS_FAIL 1e-6
/* lse, relative to max(1, |lse|): scores of 1e38 leave no absolute digits */
#define OVERFLOW_LSE_REL_FAIL 1e-6
/* dv and dk against the closed form, relative to max(1, max|closed form|) */
#define OVERFLOW_GRAD_REL_FAIL 1e-5
/* a dq whose exact value is 0, relative to the sum of |terms| its double sum cancels: S·DBL_EPSILON and then some */
#define OVERFLOW_CANCEL_REL_FAIL 1e-12

/* ---- the reference gradients against finite differences
 *      (ref/test_ref_backward.c: Richardson-combined central differences of
 *      L = sum(dout * O) with steps h = FD_STEP and 2h on inputs rounded to
 *      FD_GRID).  An element fails when |analytic - fd| > FD_ABS_FAIL +
 *      FD_REL_FAIL·|fd| and warns above FD_ABS_WARN + FD_REL_FAIL·|fd|.
 *
 * Why the tolerance is sound (and why the test can fail):
 *   - inputs are rounded to multiples of 2^-12 and h = 2^-6, so x +- h and
 *     x +- 2h are exactly representable: the steps are exact;
 *   - the forward stores O (and the module Q, K, V, Z) as float, so L
 *     carries a rounding error of about 6e-8 * sum|dout * O|, a few 1e-6;
 *     divided by 2h and amplified ~1.5x by the Richardson weights that is
 *     ~1e-4 at most, below FD_ABS_FAIL;
 *   - what remains of the truncation error is O(h^4) ~ 1e-7 * L^(5);
 *   - a wrong gradient (a missing scale, a missing GQA sum, a sign, a lost
 *     term) is wrong by O(0.1 .. 1) on some element, and even a 0.5% error
 *     on an O(1) gradient exceeds the tolerance (checked by breaking the
 *     reference backward on purpose). ---- */

/* absolute part: the float rounding of L, divided by 2h and amplified by Richardson, is ~1e-4 at most */
#define FD_ABS_WARN 1e-4
#define FD_ABS_FAIL 3e-4
/* relative part, on |fd|: the O(h^4) truncation left after Richardson */
#define FD_REL_FAIL 1e-3

/* ---- the chapter's exact numbers (chapter/test_chapter.c,
 *      interp/test_interp.c, api/test_mha.c) ---- */

/* the library against the chapter's closed forms: fp32 storage, double accumulation: within a few float ulps */
#define CHAPTER_ABS_FAIL 1e-6
/* c = sqrt(2)·ln 2 against the chapter's printed 0.9803: half a unit in its fourth decimal */
#define CHAPTER_ROUNDED_ABS_FAIL 0.5e-4
/* the shape walk's output through W_O against the sum of its two heads: one fp32 rounding of an O(1) sum */
#define CHAPTER_HEAD_SUM_ABS_FAIL 1e-6

/* ---- interventions and the null-space search (interp/test_interp.c) ---- */

/* relative weights among untouched keys, before and after replacing a key, relative to max(1, ratio) */
#define INTERP_RATIO_REL_FAIL 1e-5
/* outputs of O(1) recomputed another way (sums of hook_result, z from a patched or masked pattern) */
#define INTERP_OUT_ABS_FAIL 1e-5
/* patched patterns and their row sums against weights recomputed another way: weights are <= 1, fp32 storage */
#define INTERP_WEIGHT_ABS_FAIL 1e-6
/* a mean-ablated z against the mean of the recorded z taken in double: one fp32 rounding of O(1) values */
#define INTERP_MEAN_ABS_FAIL 1e-6
/* the output change the null-space search is given as its tolerance, and checked against */
#define NULLSPACE_OUT_ABS_FAIL 1e-6
/* the looser search tolerance every other random trial is given, and checked against */
#define NULLSPACE_LOOSE_OUT_ABS_FAIL 1e-3
/* relative slack of the output change recomputed in long double over the tolerance: the search works in double */
#define NULLSPACE_RECOMPUTE_REL_FAIL 1e-9
/* a moved row's total against the input row's, summed in long double: the search keeps the total to double rounding */
#define NULLSPACE_TOTAL_ABS_FAIL 1e-12L
/* the reported L1 distance against the one recomputed in long double: the search sums it in double */
#define NULLSPACE_L1_ABS_FAIL 1e-12L
/* the search's answers against hand-derived ones (exercise 3, the equal pair): as tight as the search's tolerance */
#define NULLSPACE_ANSWER_ABS_FAIL 1e-6
/* L1 moved from a row whose values are affinely independent (nothing can move beyond what the tolerance allows) */
#define NULLSPACE_PINNED_L1_FAIL 1e-5
/* the local search's L1 may exceed the exact maximum only by rounding */
#define NULLSPACE_LOCAL_L1_ABS_FAIL 1e-9

/* ---- CLI round trips through float32 .npy files (cli/) ---- */

/* attn sdpa's output file against the oracle, relative to max(1, max|O|): float32 files hold the results unchanged */
#define CLI_OUT_REL_FAIL 1e-5
/* attn sdpa's weights file against the oracle: as REF_WEIGHT_ABS_FAIL */
#define CLI_WEIGHT_ABS_FAIL 1e-6
/* attn sdpa's lse file against the oracle: as REF_LSE_ABS_FAIL */
#define CLI_LSE_ABS_FAIL 1e-5
/* gradient files (default kernel) against the reference backward, the oracle here; relative to max(1, max|want|) */
#define CLI_GRAD_REL_FAIL 1e-5
/* the 2-D shorthand's weight of a row that sees one key against 1: one float ulp below 1 is 6e-8 */
#define CLI_ONE_KEY_WEIGHT_ABS_FAIL 1e-7
/* that row's output and lse against v1 and 1/sqrt(2): one fp32 rounding of O(1) */
#define CLI_ONE_KEY_ABS_FAIL 1e-6
/* rows read back from float32 files (a moved row, a renormalised pattern) against a sum of 1 */
#define CLI_ROW_SUM_ABS_FAIL 1e-6
/* the output change of attn nullspace's moved row: 1e-6 in double, plus the float32 file */
#define CLI_NULLSPACE_OUT_ABS_FAIL 1e-5
/* attn nullspace's printed L1 move (%.6g of a number <= 2) against the one recomputed from its float32 file */
#define CLI_NULLSPACE_L1_ABS_FAIL 1e-5
/* attn trace's hook_attn_scores against the oracle's scaled scores plus bias, relative to max(1, max|score|): fp32 dot products */
#define CLI_SCORES_REL_FAIL 1e-5
/* attn bench's GFLOP/s column against FLOPs / its ms column: both are rounded for print */
#define BENCH_GFLOPS_REL_FAIL 0.01

/* ---- the ring against single-process attn sdpa (dist/test_ring.c) ---- */

/* max |O - O_sdpa| and max |lse - lse_sdpa|, / max|O_sdpa| */
#define RING_OUT_FAIL 1e-6
/* |g - g_sdpa| / max|g_sdpa| */
#define RING_GRAD_FAIL 1e-5

/* ---- properties the chapter states, and position offsets
 *      (api/test_properties.c, ref/test_sdpa_ref.c) ---- */

/* each visible row of fp32 weights, summed in double, against 1 */
#define PROP_ROW_SUM_FAIL 1e-6
/* outputs after permuting key/value pairs together (times 4 in the test): only the order of the fp32 sums changes */
#define PROP_PERMUTE_REL_FAIL 1e-6
/* weights after the permutation against the unpermuted ones at the keys' old places: fp32 rounding of weights <= 1 */
#define PROP_PERMUTE_WEIGHT_ABS_FAIL 1e-6
/* with q = 0 a bias of log(w) makes softmax return w: float log and exp round-trip */
#define PROP_BIAS_WEIGHT_ABS_FAIL 1e-6
/* outputs as weight moves between keys with identical values, against the first split's: fp32 rounding */
#define PROP_SPLIT_OUT_ABS_FAIL 1e-6
/* outputs against the values' range [lo, hi], in float: a weighted average rounds a little past its ends */
#define PROP_RANGE_ABS_FAIL 1e-6f
/* the fast kernel's query chunks (query_start) against the whole call: its decode path may take a short chunk */
#define CHUNK_OUT_ABS_FAIL 2e-6
/* the lse of two key halves (key_start) merged in double against the whole call's */
#define KEY_SPLIT_LSE_ABS_FAIL 1e-5
/* the outputs of two key halves merged by their lse against the whole call's */
#define KEY_SPLIT_OUT_ABS_FAIL 1e-5

/* ---- RoPE (rope/test_rope.c).
 *
 * attn_rope_apply computes in double and rounds each result once to its
 * storage type, so a stored result y is within u|y| + a of the double one,
 * with u the unit roundoff (half an ulp, relative) and a half the spacing
 * of the subnormals (for results too small to be normal):
 *   float32  u = 2^-24   a = 2^-150        float16   u = 2^-11  a = 2^-25
 *   bfloat16 u = 2^-8    a = 2^-134
 * Two double computations of the same value (the library's and the test
 * script's tables, glibc's cos and torch's) differ by a few double
 * roundings, amplified by at most ln(theta) (< 14 for theta <= 1e6) in
 * theta^(-2f/R): ROPE_F64_REL_FAIL below.  An angle p·w inherits that
 * relative difference, so a rotated value moves by ROPE_F64_REL_FAIL·|p|·w
 * times m·|pair| (w <= 1 in every table tested). ---- */

/* the unit roundoffs and subnormal half-spacings above */
#define ROPE_STORE_F32_REL_FAIL 0x1p-24
#define ROPE_STORE_F32_ABS_FAIL 0x1p-150
#define ROPE_STORE_F16_REL_FAIL 0x1p-11
#define ROPE_STORE_F16_ABS_FAIL 0x1p-25
#define ROPE_STORE_BF16_REL_FAIL 0x1p-8
#define ROPE_STORE_BF16_ABS_FAIL 0x1p-134
/* two double evaluations of a table entry, angle or rotated value, relative:
 * <= 4 roundings (4 * 2^-53 = 4.4e-16) times ln(theta) + 1 <= 15 is 6.7e-15 */
#define ROPE_F64_REL_FAIL 1e-14
/* HF's float32 inv_freq against the library's double one, relative, in units
 * of 2^-24: the exponent 2f/R rounded and amplified by ln(theta) in the
 * power, the power and the reciprocal (2 each), the YaRN blend and the
 * division by factor (4), and llama3's smooth factor, whose absolute
 * rounding is amplified by up to factor where it is near 0 (2·factor).
 * A bound, not a fit: the fixtures measure at most 5.4 units (llama3). */
#define ROPE_HF_TABLE_REL_FAIL(theta, factor) ((log(theta) + 2.0 * (factor) + 8.0) * 0x1p-24)
/* the attention factor against HF's: both are 0.1·ln(f) + 1 (or a ratio of two) in double */
#define ROPE_ATTENTION_FACTOR_REL_FAIL 1e-15
/* a pair's and a row's norm after rotation against m times before: each
 * float32 result is off by <= u|y|, so the norm by <= u·norm, plus double
 * rounding (1e-15) */
#define ROPE_NORM_REL_FAIL 6.0e-8
/* q·k with q at p and k at p + delta against q at 0 and k at delta, relative
 * to |q||k|: each dot product reads two rounded rotations (2u each side) */
#define ROPE_DOT_REL_FAIL 2.4e-7
/* backward after apply against the input (m = 1), and <R x, y> against
 * <x, R^T y>, relative to the pair norm (resp. m|x||y|): two roundings of u */
#define ROPE_ROUNDTRIP_REL_FAIL 1.2e-7
/* float16/bfloat16 results against the float32 result rounded to the
 * storage type, in units in the last place: the library rounds the double
 * result once, the comparison rounds it twice (to float32, then to half),
 * and two roundings of the same value can land on neighbours at a tie */
#define ROPE_HALF_VS_F32_ULP_FAIL 1

/* ---- a short training run (cli/test_train.c) ---- */

/* held-out loss after / before must be below this */
#define TRAIN_LOSS_RATIO_FAIL 0.5

/* ---- the decoder (model/test_decoder.c).
 *
 * Tiny models against the test's double-precision oracle, on the same
 * float32 weights: what remains is float32 rounding through a few layers
 * (each projection a float sum of <= 24 products, RoPE, softmax). ---- */

/* hidden states and logits, relative to max(1, max|oracle|) */
#define DECODER_TINY_REL_FAIL 1e-5
/* attention weights, absolute */
#define DECODER_TINY_WEIGHT_ABS_FAIL 1e-6

/* The real models against Hugging Face transformers' float32 eager forward
 * of the same dequantized weights (the fixtures).  Both sides compute in
 * float32, in different orders (BLAS blocking against attn's 16 partial
 * sums; float against double means in RMSNorm; RoPE's angles in float
 * against double), so each op differs by a few ulps, and the differences
 * grow through the layers.  Measured (docs/models.md has the table, per
 * layer): hidden states at most 8.0e-5 of a position's rms on Qwen2.5's 24
 * layers (the largest right after layer 0) and 2.7e-5 on Gemma 3's 18;
 * norms 1.7e-6; attention weights 7.9e-5 (Qwen, whose q/k biases make
 * large scores) and 3.2e-6 (Gemma); the top-10 logits 2.3e-5.  The bounds
 * leave 10x or more for other BLAS builds and CPUs on the reference side. ---- */

/* a residual-stream element's difference over the rms (|h| / sqrt(d)) of
 * HF's state at that layer and position */
#define DECODER_HIDDEN_REL_FAIL 1e-3
/* the norm of a position's residual stream, relative */
#define DECODER_NORM_REL_FAIL 1e-4
/* attention weights, absolute (they are <= 1) */
#define DECODER_WEIGHT_ABS_FAIL 1e-3
/* the top-10 logits at every position, absolute (they are 10 to 30) */
#define DECODER_LOGIT_ABS_FAIL 1e-3
/* two logits closer than this (relative to the largest) may swap ranks */
#define DECODER_LOGIT_REL_FAIL 2e-4

/* ---- attention over the KV cache against one full-sequence flash call
 *      (cache/test_kv_cache.c, cli/test_decode_cli.c).  Both read the same
 *      float32 keys and values; the cache attends each piece of a sequence
 *      on its own and merges the pieces' float32 outputs by their lse in
 *      double, so what remains is the float32 rounding of each piece's
 *      output and of the exp2 of its scores: a few ulps of the output. ---- */

/* outputs, relative to max(1, max|full-call output|) */
#define CACHE_OUT_REL_FAIL 4e-6
/* lse, absolute (|lse| is a few units here): the merge's log of a sum of
 * float32 lse's exponentials, in double */
#define CACHE_LSE_ABS_FAIL 4e-6

/* ---- the chapter's opening on a real model (model/test_chapter_model.c),
 * against the same transformers forward, derived from the decoder's
 * agreement above.  A cosine of two vectors each off by a relative
 * (L2) error e moves by at most about 2e; the residual stream's error is
 * below 1e-4 of its rms (DECODER_HIDDEN_REL_FAIL bounds it at 1e-3), so
 * twice that bound.  A softmax probability moves by at most about twice
 * the largest logit error.  Measured: cosines 7.0e-7 (Qwen) and 6.2e-8
 * (Gemma) off HF's; probabilities 1.9e-6 and 6.4e-7; 苹果's attention rows
 * 7.9e-5 and 2.6e-6 (DECODER_WEIGHT_ABS_FAIL bounds them). ---- */

/* the cosine of the two 苹果 vectors at each layer, absolute */
#define CHAPTER_COSINE_ABS_FAIL (2 * DECODER_HIDDEN_REL_FAIL)
/* a next-token probability, absolute */
#define CHAPTER_PROB_ABS_FAIL (2 * DECODER_LOGIT_ABS_FAIL)
/* a visible row of a real map sums to 1 within this (float32 weights) */
#define CHAPTER_ROW_SUM_FAIL 1e-5

/* ---- generation (model/test_generate.c): a session's logits, its tokens
 * fed through the KV cache in chunks, against attn_decoder_forward over the
 * whole sequence, relative to max(1, max |logit|).  Both run the same
 * per-row projections, norms and RoPE (each row's arithmetic does not
 * depend on how many rows a call has), so only attention differs: the
 * cache's attend over [pos + n] rows in pieces merged by lse against one
 * sdpa call over [L, L], a few float32 ulps of each layer's attention
 * output, carried through the layers.  A float16 / bfloat16 cache rounds
 * every key and value once (2^-11, 2^-8 relative), which moves the logits
 * by about that times the logits' sensitivity. ---- */
#define GENERATE_SESSION_REL_FAIL 2e-5
#define GENERATE_SESSION_F16_REL_FAIL 2e-2
#define GENERATE_SESSION_BF16_REL_FAIL 1e-1
/* ---- the tiny Hugging Face checkpoints against transformers' float32 eager
 *      forward of the same weights (model/test_safetensors_models.c).  Both
 *      sides compute in float32 from identical weights; what remains is the
 *      order of the sums (attn's projections add 16 partial sums in double,
 *      PyTorch's sgemm blocks its own way), RMSNorm's mean in double against
 *      float32, and exp/tanh.  Relative to the largest magnitude of the
 *      layer's tensor being compared; attention weights are <= 1, so
 *      absolute. ---- */
#define TINY_MODEL_HIDDEN_REL_FAIL 1e-5
#define TINY_MODEL_ATTN_ABS_FAIL 1e-5
#define TINY_MODEL_LOGITS_REL_FAIL 1e-5

/* ---- the analyses of attn_analysis.h (interp/test_analysis.c) ----
 * value-weighted norms: the production path (|alpha| ||f(v)||) and the
 * reference (||alpha f(v)|| per cell) against a long-double computation
 * through the concatenated W_O; both sum in double and store a float, so
 * one float rounding of the result, relative to max(1, the norm). */
#define ANALYSIS_NORM_REL_FAIL 1e-6
/* rollout against hand-derived numbers and row sums against 1: a few
 * double roundings per product of L terms */
#define ANALYSIS_ROLLOUT_ABS_FAIL 1e-12
/* flow against hand-derived numbers and brute-force minimum cuts: the
 * augmenting paths' sums in double, and FLOW_EPS (1e-12) per path left
 * unpushed */
#define ANALYSIS_FLOW_ABS_FAIL 1e-9
/* the logit lens and the logit attribution (interp/test_model_interp.c)
 * against the forward's logits and a double-precision norm and product:
 * float32 activations and logits (a few ulps of a sum of d terms),
 * relative to max(1, the largest logit compared) */
#define LENS_LOGIT_REL_FAIL 1e-5

#endif /* ATTN_TEST_TOLERANCES_H */
