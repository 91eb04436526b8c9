/*
 * attn_decoder.h — a decoder-only language model run in float32 over token
 * ids, every layer's attention through attn_sdpa_forward (libattn_model;
 * built on the GGUF reader of attn_gguf.h).  docs/models.md, "The
 * decoder", has the equations of each architecture, the memory, the speed
 * and how it is checked against Hugging Face transformers.
 *
 * Architectures (GGUF general.architecture; config.json model_type):
 *   qwen2   Qwen2 / Qwen2.5: RMSNorm, q/k/v biases, GQA, RoPE (NeoX pairing),
 *           SwiGLU, a separate output head
 *   qwen3   Qwen3: as qwen2 without biases, with QK-norm (RMSNorm over each
 *           head's q and k, before RoPE) and an explicit head width
 *   llama   Llama / SmolLM2 / TinyLlama: no biases, SwiGLU, tied or untied
 *           head; a GGUF file's permuted Q/K rows are put back at load
 *           (docs/models.md), so RoPE is rotate-half as in Hugging Face
 *   gemma3  Gemma 3 (text): embeddings times sqrt(d_model), QK-norm, pre- and
 *           post-norms around attention and FFN, sliding-window local layers
 *           with their own RoPE theta, every 6th layer global, GeGLU (tanh
 *           GELU), tied output head (config.json: gemma3_text)
 *
 * Weights come from a GGUF file (attn_decoder_load) or a Hugging Face
 * safetensors checkpoint with its config.json (attn_decoder_load_safetensors).
 *
 * Shape legend:
 *   L     tokens of the sequence (one sequence, no batch)
 *   d     d_model             F   FFN width (d_ffn)
 *   Hq    query heads         Hkv key/value heads      Dh  head width
 *   V     vocabulary          N   layers
 *
 *   ids         : [L]              int32, each in [0, V)
 *   hidden      : [N + 1, L, d]    the residual stream: row 0 the embeddings
 *                                  (scaled, Gemma), row l + 1 the output of
 *                                  layer l (before the final norm)
 *   attention_l : [Hq, L, L]       layer l's attention weights  <- heads first
 *   logits      : [L, V]           (or [1, V]: the last position only)
 *
 * Weights (attn_decoder_options.weights): by default every matrix stays
 * as the file stores it (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1,
 * Q4_K, Q5_K, Q6_K), read where the file is mapped: loading maps and
 * validates, the projections run attn_quant_matmul (attn_quant.h) on the
 * stored blocks, the embedding converts the rows of the tokens it looks up
 * (attn_quant_dequantize_rows), and a tied output head reads the stored
 * embedding.  Only the norms' and biases' vectors are converted to
 * float32.  A tensor of a type no kernel takes (Q2_K, IQ*, ...) is refused
 * at load, naming it and its type.  ATTN_WEIGHTS_F32 converts every matrix
 * to float32 at load instead (4 bytes per parameter: 2.4 GiB for
 * Qwen2.5-Coder 0.5B), the reference twin, run by attn_linear_forward_
 * transposed.  The decoder holds the file's mapping (the attn_gguf may be
 * freed once it is loaded: the mapping stays until attn_decoder_free); a
 * file changed or truncated under the mapping is the user's problem
 * (docs/models.md: wrong numbers, or SIGBUS for a truncated one, as with
 * any mapped file).
 *
 * Precision (attn_decoder_options.precision): EXACT (default) multiplies
 * the weights' dequantized values, bit for bit the GGUF reader's, by the
 * float32 activations; FAST rounds the activations to 8 bits per block of
 * 32 and uses integer dot products (attn_quant.h).  docs/quant.md has
 * FAST's measured error on the real models.
 *
 * Generation (below): sessions decode through attn's KV cache, step by
 * step; samplers choose the next token (repetition, frequency and presence
 * penalties; greedy, temperature, top-k, top-p, min-p; a portable seeded
 * PRNG).
 *
 * Threads: a loaded decoder is read-only; attn_decoder_forward may run on
 * it from several threads at once (each call allocates its own scratch).
 * The projections (attn_quant_matmul, or attn_linear_forward_transposed for
 * float32 weights) and attention (attn_sdpa_forward) use attn's threads
 * ($ATTN_NUM_THREADS), whose results do not depend on their count.
 */
#ifndef ATTN_DECODER_H
#define ATTN_DECODER_H

#include "attn.h"
#include "attn_cache.h"
#include "attn_gguf.h"
#include "attn_rope.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum attn_decoder_arch {
    ATTN_DECODER_QWEN2 = 1,
    ATTN_DECODER_GEMMA3 = 2,
    ATTN_DECODER_QWEN3 = 3,
    ATTN_DECODER_LLAMA = 4
} attn_decoder_arch;

typedef enum attn_decoder_activation {
    ATTN_DECODER_SWIGLU = 0,     /* down(silu(gate x) * up x)                   */
    ATTN_DECODER_GEGLU_TANH = 1  /* down(gelu_tanh(gate x) * up x)              */
} attn_decoder_activation;

/* A model's configuration, as its GGUF metadata gives it (keys prefixed
 * by the architecture's name: "qwen2.block_count", ...), or its
 * config.json (attn_decoder_config_from_json: the keys there), completed
 * with what the architecture fixes and the file does not say (Gemma 3's
 * local RoPE theta 1e4 and its pattern of 6; llama.cpp fixes them in code
 * too).  The comments name the GGUF keys. */
typedef struct attn_decoder_config {
    attn_decoder_arch arch;
    const char *architecture;       /* "qwen2", "qwen3", "gemma3", "llama" (static) */
    int64_t n_layers;               /* ARCH.block_count                             */
    int64_t d_model;                /* ARCH.embedding_length                        */
    int64_t d_ffn;                  /* ARCH.feed_forward_length                     */
    int64_t n_heads;                /* ARCH.attention.head_count                    */
    int64_t n_kv_heads;             /* ARCH.attention.head_count_kv (default Hq)     */
    int64_t head_dim;               /* ARCH.attention.key_length, else d / Hq       */
    int64_t vocab;                  /* rows of token_embd.weight                    */
    double rms_eps;                 /* ARCH.attention.layer_norm_rms_epsilon        */
    double rope_theta;              /* ARCH.rope.freq_base: the global layers'      */
    double rope_theta_local;        /* the sliding-window layers' (gemma3: 1e4)     */
    attn_rope_pairing rope_pairing; /* NEOX for both                                */
    int64_t sliding_window;         /* ARCH.attention.sliding_window: a local
                                       layer's query i sees keys i - W + 1 .. i;
                                       0 = every layer global                      */
    int64_t sliding_pattern;        /* layer l is global iff (l + 1) % pattern == 0
                                       (gemma3: 6); 0 = all local when a window is set */
    float attn_scale;               /* 1 / sqrt(Dh) (gemma3: query_pre_attn_scalar
                                       ^-1/2, with that scalar = Dh for Gemma 3)    */
    float embed_scale;              /* 1, or sqrt(d) rounded to float (gemma3)      */
    int qkv_bias;                   /* q/k/v projections have biases (qwen2)        */
    int qk_norm;                    /* RMSNorm over each head's q and k (qwen3, gemma3) */
    int post_norms;                 /* norms after attention and after the FFN      */
    int tied_embeddings;            /* no output.weight: logits use token_embd      */
    attn_decoder_activation activation;
    /* RoPE scaling, as the file names it (added in 0.3.0, which changed this
     * struct's size: rebuild against this header).  GGUF: ARCH.rope.scaling.type
     * "linear" with ARCH.rope.scaling.factor (or the older ARCH.rope.scale_linear);
     * config.json: rope_parameters / rope_scaling of rope_type "linear", "yarn"
     * or "llama3" with their keys of the same names (attn_rope.h has the
     * formulas; "dynamic" is refused: its table changes with each call's
     * length, which a KV cache cannot follow).  The global layers are scaled;
     * the sliding-window layers too unless they have a theta of their own
     * (gemma3's local layers never are).  ATTN_ROPE_SCALING_NONE: plain RoPE. */
    attn_rope_scaling rope_scaling;
    double rope_factor;             /* LINEAR, YARN, LLAMA3: > 0                    */
    int64_t rope_original_context;  /* YARN, LLAMA3: original_max_position_embeddings */
    double rope_beta_fast, rope_beta_slow;     /* YARN: 0 = 32 and 1             */
    double rope_mscale, rope_mscale_all_dim;   /* YARN: 0 = unset                */
    int rope_yarn_no_truncate;      /* YARN: the config's "truncate": false         */
    double rope_low_freq_factor, rope_high_freq_factor; /* LLAMA3                   */
    double rope_attention_factor;   /* 0 = the variant's default                    */
    int rope_scale_local;           /* the sliding-window layers are scaled too     */
    /* The model's limits (added after 0.3.0, which changed this struct's size
     * again: rebuild against this header). */
    int64_t context_length;         /* ARCH.context_length / max_position_embeddings:
                                       the positions the model was trained for;
                                       0 = the file does not say (the limit with
                                       its RoPE scaling: attn_decoder_context_limit) */
    int64_t rope_dim;               /* ARCH.rope.dimension_count / head_dim *
                                       partial_rotary_factor: RoPE rotates the first
                                       rope_dim widths of each head (even, <= head_dim);
                                       the rest pass through; 0 = the whole head    */
} attn_decoder_config;

/* The positions a model may be run at: its context_length, or, when its
 * RoPE scaling extends it (a factor > 1 on the length it was trained at,
 * rope_original_context or else context_length), the extended length;
 * 0 when the configuration gives no length. */
ATTN_API int64_t attn_decoder_context_limit(const attn_decoder_config *cfg);

/* Checks that a prompt of n_prompt tokens followed by up to n_new generated
 * ones fits the model's context (attn_decoder_context_limit; a model that
 * gives no length fits anything).  Beyond it: ATTN_ERR_SHAPE with a message
 * naming the three numbers, unless allow_beyond is nonzero; then ATTN_OK and
 * *beyond (when not NULL) set to 1, for the caller's warning (the message is
 * attn_last_error()'s, phrased for one).  Negative counts are refused. */
ATTN_API attn_status attn_decoder_check_context(const attn_decoder_config *cfg, int64_t n_prompt, int64_t n_new,
                                                int allow_beyond, int *beyond);

/* The architectures the decoder runs, from its one table of them
 * (src/model/arch.c), for lists in messages and help texts: the name of
 * the index-th (index 0, 1, ...) as GGUF's general.architecture and
 * attn_decoder_config.architecture spell it ("qwen2"); NULL past the last. */
ATTN_API const char *attn_decoder_architecture(int index);

/* The RoPE of one layer of a model (pairing, theta, scaling) as
 * attn_rope_apply takes it: what the decoder rotates that layer's queries
 * and keys with. */
ATTN_API void attn_decoder_rope_options(const attn_decoder_config *cfg, int64_t layer, attn_rope_options *opt);

/* Reads the configuration from g's metadata.  ATTN_ERR_FORMAT naming the
 * missing or wrong key (or tensor); ATTN_ERR_UNSUPPORTED for another
 * architecture, naming it. */
ATTN_API attn_status attn_decoder_read_config(const attn_gguf *g, attn_decoder_config *cfg);

/* Reads the configuration from a Hugging Face config.json held in
 * json[0 .. len) (cJSON; ATTN_ERR_UNSUPPORTED in a build without it).
 * model_type qwen2, qwen3, llama or gemma3_text; the keys read:
 *   hidden_size, num_hidden_layers, num_attention_heads, intermediate_size,
 *   vocab_size (required); num_key_value_heads (default: the heads),
 *   head_dim (default hidden_size / heads), rms_norm_eps (1e-6),
 *   rope_parameters as transformers 5 writes it (flat {rope_theta,
 *   rope_type}, or per layer type {full_attention: {...},
 *   sliding_attention: {...}}), else rope_theta / rope_local_base_freq /
 *   rope_scaling as older versions wrote them; only rope_type "default"
 *   is run (others: ATTN_ERR_UNSUPPORTED naming it); sliding_window with
 *   layer_types (a repeating pattern of full and sliding layers) or
 *   sliding_window_pattern (gemma3, default 6); query_pre_attn_scalar
 *   (gemma3: the scale is its -1/2 power); tie_word_embeddings (default:
 *   gemma3 tied, the others not); hidden_act / hidden_activation (silu,
 *   gelu_pytorch_tanh); attention_bias and mlp_bias (true is refused:
 *   the decoder has no output or FFN biases; qwen2's q/k/v biases are
 *   implied by its architecture), softcapping (refused unless null).
 * ATTN_ERR_FORMAT naming the key and the problem for a missing or wrong
 * value. */
ATTN_API attn_status attn_decoder_config_from_json(const char *json, size_t len, attn_decoder_config *cfg);
/* The configuration of a Hugging Face checkpoint at path (a directory, or a
 * .safetensors or index file with config.json beside it), without reading
 * its weights. */
ATTN_API attn_status attn_decoder_config_from_checkpoint(const char *path, attn_decoder_config *cfg);

/* 1 when layer l (0-based) uses the sliding window (and the local theta). */
ATTN_API int attn_decoder_layer_is_local(const attn_decoder_config *cfg, int64_t layer);

typedef struct attn_decoder attn_decoder; /* opaque, read-only once loaded */

/* How a decoder keeps its weights (above). */
typedef enum attn_decoder_weights {
    ATTN_WEIGHTS_STORED = 0,    /* as the file stores them, mapped (default) */
    ATTN_WEIGHTS_F32 = 1        /* converted to float32 at load: the reference */
} attn_decoder_weights;

/* Options of a load.  Initialise with ATTN_DECODER_OPTIONS_INIT (stored
 * weights, exact), then set fields; NULL options mean the same. */
typedef struct attn_decoder_options {
    size_t struct_size;
    attn_decoder_weights weights;  /* ATTN_WEIGHTS_STORED or ATTN_WEIGHTS_F32   */
    attn_precision precision;      /* the projections': EXACT (default) or FAST */
} attn_decoder_options;

#define ATTN_DECODER_OPTIONS_INIT {.struct_size = sizeof(attn_decoder_options)}

/* Reads the configuration and the tensors the forward uses, checking each
 * tensor's presence, shape and type first (a message names the tensor, its
 * dims and the dims expected, or its type).  Stored weights (the default)
 * are views into g's mapping, which the decoder keeps: g may be freed
 * afterwards (a g parsed from the caller's buffer is copied).  Refused
 * (ATTN_ERR_FORMAT, naming them): a tensor of the file that no part of the
 * model reads (layers past block_count among them), a missing one, and
 * weights holding NaN or an infinity (the tensor, row and column: stored
 * weights are scanned where they are mapped, by their values or their
 * blocks' scales; float32 ones as they are converted). */
ATTN_API attn_status attn_decoder_load(const attn_gguf *g, attn_decoder **out);
/* attn_decoder_load with options (NULL: the defaults). */
ATTN_API attn_status attn_decoder_load_with(const attn_gguf *g, const attn_decoder_options *opt,
                                            attn_decoder **out);

/* A Hugging Face checkpoint: path is a directory (config.json with
 * model.safetensors or model.safetensors.index.json and its shards), or a
 * .safetensors file with config.json beside it.  Tensor names are
 * transformers' (model.layers.L.self_attn.q_proj.weight, ...; the
 * shapes are PyTorch's nn.Linear [out, in], which the decoder uses as
 * they are); F32, F16 and BF16 tensors are converted to float32 exactly.
 * Gemma's RMSNorm weights are stored as w and applied as (1 + w): the 1 is
 * added at load.  Messages name the tensor, its shape and the shape
 * expected. */
ATTN_API attn_status attn_decoder_load_safetensors(const char *path, attn_decoder **out);
/* With options (NULL: the defaults): stored weights keep F32, F16 and BF16
 * matrices where the checkpoint is mapped. */
ATTN_API attn_status attn_decoder_load_safetensors_with(const char *path, const attn_decoder_options *opt,
                                                        attn_decoder **out);
ATTN_API void attn_decoder_free(attn_decoder *m);
ATTN_API const attn_decoder_config *attn_decoder_get_config(const attn_decoder *m);
/* Bytes of weights the projections and the embedding read: as stored, or
 * float32 with ATTN_WEIGHTS_F32. */
ATTN_API uint64_t attn_decoder_weight_bytes(const attn_decoder *m);

/* One of the model's weights by its GGUF name, as the forward uses it,
 * whatever file it came from (a GGUF file or a Hugging Face checkpoint):
 *   token_embd.weight   [V, d]      output.weight [V, d] (token_embd's when
 *   output_norm.weight  [d]                               tied)
 *   blk.N.attn_q.weight [Hq*Dh, d]  blk.N.attn_k.weight, attn_v.weight [Hkv*Dh, d]
 *   blk.N.attn_output.weight [d, Hq*Dh]   blk.N.ffn_gate.weight, ffn_up [F, d]
 *   blk.N.ffn_down.weight [d, F]    blk.N.attn_q.bias [Hq*Dh], attn_k.bias, ...
 *   blk.N.attn_norm.weight, ffn_norm, post_attention_norm, post_ffw_norm [d],
 *   attn_q_norm.weight, attn_k_norm [Dh]
 * A projection is [d_out, d_in] row-major (y = x . W^T; llama's q and k rows
 * in the order the forward uses, not the GGUF converter's permutation), a
 * vector [n] with cols = 1; norms' weights are the multiplier applied (Gemma:
 * 1 + w).  *rows and *cols are set; out NULL asks for them alone; else out
 * (capacity floats) receives the values, stored blocks dequantized as
 * attn_quant_dequantize_rows does (ATTN_ERR_SHAPE when capacity is short).
 * A name that is not a weight, a layer out of range or a tensor this model
 * lacks (a bias of Gemma 3): ATTN_ERR_INVALID_ARGUMENT naming it. */
ATTN_API attn_status attn_decoder_weight(const attn_decoder *m, const char *name, float *out, int64_t capacity,
                                         int64_t *rows, int64_t *cols);

/* Called after each layer with its output, the residual stream after layer
 * `layer`: hidden [L, d], read-only, valid during the call.  A nonzero
 * return stops the forward, which then returns ATTN_ERR_INVALID_ARGUMENT
 * ("stopped by the layer hook"). */
typedef int (*attn_decoder_layer_hook)(void *user, int64_t layer, const float *hidden, int64_t L, int64_t d);

/* ------------------------------------------------------------ hook points
 *
 * Where a forward shows its activations to a tensor hook, under
 * TransformerLens's names (blocks.L. prefix; TransformerLens's leading
 * batch axis is left out: one sequence), in the order a layer computes them
 * (the enum below numbers them in the order they were added):
 *
 *   hook_embed                  [L, d]       token embeddings (times sqrt(d),
 *                                             Gemma) = blocks.0.hook_resid_pre
 *   blocks.L.hook_resid_pre     [L, d]       the residual stream into layer L
 *   blocks.L.hook_q_input       [L, Hq, d]   resid_pre once per query head
 *   blocks.L.hook_k_input       [L, Hkv, d]  ... per kv head
 *   blocks.L.hook_v_input       [L, Hkv, d]  (written: that head's q, k or v
 *                                             is its rows through ln1 and the
 *                                             projection; others unchanged)
 *   blocks.L.ln1.hook_scale     [L, 1]       sqrt(mean(x^2) + eps) of resid_pre,
 *                                             in double (written: x / scale * w)
 *   blocks.L.ln1.hook_normalized [L, d]      ln1's output, what the q, k, v
 *                                             projections read (see below)
 *   blocks.L.attn.hook_q        [L, Hq, Dh]  after the projection, its bias
 *                                             and QK-norm, BEFORE RoPE (as
 *                                             TransformerLens's hook_q)
 *   blocks.L.attn.hook_k        [L, Hkv, Dh] the same (kv heads: GQA not repeated)
 *   blocks.L.attn.hook_v        [L, Hkv, Dh]
 *   blocks.L.attn.hook_rot_q    [L, Hq, Dh]  after RoPE: what the scores read
 *   blocks.L.attn.hook_rot_k    [L, Hkv, Dh]
 *   blocks.L.attn.hook_attn_scores [Hq, L, L] scale * q.k, -inf where hidden
 *                                             (causal, sliding window)  <- heads first
 *   blocks.L.attn.hook_pattern  [Hq, L, L]   the weights (rows sum to 1)  <- heads first
 *   blocks.L.attn.hook_z        [L, Hq, Dh]  each head's weighted sum of v
 *   blocks.L.attn.hook_result   [L, Hq, d]   each head's z through its Dh
 *                                             columns of W_O: their sum is the
 *                                             projection's output (written: the
 *                                             output becomes their sum)
 *   blocks.L.hook_attn_out      [L, d]       z through W_O (and Gemma's
 *                                             post-attention norm): what is added
 *   blocks.L.hook_resid_mid     [L, d]       resid_pre + attn_out
 *   blocks.L.ln2.hook_scale     [L, 1]       as ln1's, of resid_mid
 *   blocks.L.ln2.hook_normalized [L, d]      ln2's output, what the FFN reads
 *   blocks.L.mlp.hook_pre       [L, F]       the gate's projection, before its
 *                                             activation (SiLU, tanh-GELU)
 *   blocks.L.mlp.hook_pre_linear [L, F]      the up projection
 *   blocks.L.mlp.hook_post      [L, F]       act(pre) * pre_linear: what the
 *                                             down projection reads
 *   blocks.L.hook_mlp_out       [L, d]       the FFN's output (and Gemma's
 *                                             post-FFN norm): what is added
 *   blocks.L.hook_resid_post    [L, d]       resid_mid + mlp_out = hidden[L + 1]
 *   ln_final.hook_scale         [R, 1]       as ln1's, of the last stream
 *   ln_final.hook_normalized    [R, d]       the final RMSNorm's output, times
 *                                             its weight (R = L, or 1 with
 *                                             last_only); both only when logits
 *                                             are asked
 *
 * The norms' hook_normalized is the norm's output times its weight (Gemma:
 * 1 + w), what the next projection reads: TransformerLens's hook_normalized
 * on a model loaded with fold_ln (its default), where the weight is folded
 * into W_Q, ... and W_U; without fold_ln TransformerLens shows x / scale and
 * multiplies by the weight after the hook.  hook_q_input .. hook_v_input,
 * the scales and hook_result cost work of their own (hook_result one W_O
 * product per head): they are computed only when asked for.
 *
 * A hook may read the tensor or overwrite it in place (activation patching,
 * ablation); everything computed after it sees the new values.  Writing
 * hook_attn_scores makes the pattern softmax(new scores) (per row, -inf
 * entries weigh 0); writing hook_pattern makes z = pattern . v by explicit
 * sums, the rows used as written (no renormalisation): the weight path is
 * changed and the value path (v) kept, the chapter's distinction.  A hook
 * that writes back the same values changes nothing, bit for bit (the
 * decoder compares the scores and the pattern with a copy and recomputes
 * only when they changed).  hidden and attention record the values the pass
 * used, i.e. after the hooks' writes (hidden row 0: hook_embed's).
 */
typedef enum attn_decoder_hook_point {
    ATTN_DECODER_HOOK_EMBED = 0,
    ATTN_DECODER_HOOK_RESID_PRE,
    ATTN_DECODER_HOOK_Q,
    ATTN_DECODER_HOOK_K,
    ATTN_DECODER_HOOK_V,
    ATTN_DECODER_HOOK_ROT_Q,
    ATTN_DECODER_HOOK_ROT_K,
    ATTN_DECODER_HOOK_ATTN_SCORES,
    ATTN_DECODER_HOOK_PATTERN,
    ATTN_DECODER_HOOK_Z,
    ATTN_DECODER_HOOK_ATTN_OUT,
    ATTN_DECODER_HOOK_RESID_MID,
    ATTN_DECODER_HOOK_MLP_OUT,
    ATTN_DECODER_HOOK_RESID_POST,
    ATTN_DECODER_HOOK_LN_FINAL,
    ATTN_DECODER_HOOK_RESULT,
    ATTN_DECODER_HOOK_LN_FINAL_SCALE,
    ATTN_DECODER_HOOK_Q_INPUT,
    ATTN_DECODER_HOOK_K_INPUT,
    ATTN_DECODER_HOOK_V_INPUT,
    ATTN_DECODER_HOOK_LN1_SCALE,
    ATTN_DECODER_HOOK_LN1_NORMALIZED,
    ATTN_DECODER_HOOK_LN2_SCALE,
    ATTN_DECODER_HOOK_LN2_NORMALIZED,
    ATTN_DECODER_HOOK_MLP_PRE,
    ATTN_DECODER_HOOK_MLP_PRE_LINEAR,
    ATTN_DECODER_HOOK_MLP_POST,
    ATTN_DECODER_HOOK_POINTS
} attn_decoder_hook_point;

/* Every point: the value of tensor_hook_points that calls the hook everywhere. */
#define ATTN_DECODER_HOOK_ALL ((1u << ATTN_DECODER_HOOK_POINTS) - 1u)

/* What a tensor hook is shown: data may be overwritten, not resized. */
typedef struct attn_decoder_hook_tensor {
    attn_decoder_hook_point point;
    int64_t layer;          /* 0-based; -1 for hook_embed and ln_final's   */
    const char *name;       /* "blocks.3.attn.hook_pattern" (valid during the call) */
    float *data;            /* C order, shape below                        */
    int ndim;               /* 2 or 3                                      */
    int64_t shape[3];
} attn_decoder_hook_tensor;

/* Called at each point asked for; a nonzero return stops the forward,
 * which returns ATTN_ERR_INVALID_ARGUMENT naming the hook point. */
typedef int (*attn_decoder_tensor_hook)(void *user, const attn_decoder_hook_tensor *t);

/* The name of a point at a layer ("blocks.3.attn.hook_q"; layer ignored for
 * hook_embed and ln_final's two) into buf; NULL when the point is
 * outside the enum or buf is too small. */
ATTN_API const char *attn_decoder_hook_name(attn_decoder_hook_point point, int64_t layer, char *buf, size_t size);

/* The point's name without the "blocks.L." prefix ("attn.hook_q"); NULL
 * outside the enum. */
ATTN_API const char *attn_decoder_hook_suffix(attn_decoder_hook_point point);

/* Parses a full name ("blocks.3.hook_resid_pre", "hook_embed"): *point and
 * *layer (-1 for the three without a layer).  ATTN_ERR_INVALID_ARGUMENT with
 * a message for anything else (the layer's range is the caller's check). */
ATTN_API attn_status attn_decoder_hook_parse(const char *name, attn_decoder_hook_point *point, int64_t *layer);

/* What a forward writes; every pointer may be NULL (not computed, except
 * what later steps need).  Initialise with ATTN_DECODER_OUTPUTS_INIT.
 * struct_size follows attn.h's rule: a caller built before the tensor hook
 * fields existed passes the size before them and runs without hooks. */
typedef struct attn_decoder_outputs {
    size_t struct_size;
    float *logits;              /* [L, V], or [1, V] with last_only             */
    int last_only;              /* nonzero: logits of the last position only    */
    float *hidden;              /* [N + 1, L, d] (legend above)                 */
    float **attention;          /* [N] pointers, each [Hq, L, L] or NULL: the
                                   layers whose weights are wanted              */
    attn_decoder_layer_hook hook;
    void *hook_user;
    attn_kernel kernel;         /* attn_sdpa_forward's kernel: AUTO (flash,
                                   weights included) or REF ($ATTN_KERNEL=ref
                                   forces the reference too)                    */
    attn_decoder_tensor_hook tensor_hook; /* or NULL (hook points above)      */
    void *tensor_hook_user;
    uint32_t tensor_hook_points; /* bit (1u << point) for each point the hook
                                    is called at; ATTN_DECODER_HOOK_ALL       */
} attn_decoder_outputs;

#define ATTN_DECODER_OUTPUTS_INIT {.struct_size = sizeof(attn_decoder_outputs)}

/* The forward over one sequence of L token ids, causal, positions 0 .. L-1.
 * ATTN_ERR_INVALID_ARGUMENT for an id outside [0, V) (naming its place). */
ATTN_API attn_status attn_decoder_forward(const attn_decoder *m, const int32_t *ids, int64_t L,
                                          attn_decoder_outputs *out);

/* ============================================================= gradients
 *
 * The gradient of a scalar metric of the logits, f(logits), with respect to
 * the activation at each hook point: the caller gives dlogits = df/dlogits
 * [L, V] (zero rows where f does not read a position; for the mean
 * next-token cross-entropy, (softmax - one-hot) / count), the backward runs
 * the forward again (with forward's hooks, so a patched run is
 * differentiated as it ran; forward->logits, hidden and attention are
 * filled when given) and then the layers in reverse, showing each gradient
 * to grad_hook at the points asked for, under the point's own name and in
 * its own shape (attn_decoder_hook_tensor; writes are used: the gradient
 * flows on from what the hook leaves).  Activation gradients only, no weight
 * gradients.  Exact: float32 values, double sums, serial loops in a fixed
 * order (the same bits for any thread count); checked against finite
 * differences and against torch.autograd through transformers
 * (tests/model/test_decoder_backward.c, tests/python/test_gradients.py).
 * Not given: hook_q_input, hook_k_input, hook_v_input (ATTN_ERR_UNSUPPORTED
 * when asked).  hook_result's gradient is the same for every head (the
 * projection's output is their sum).  Cost: a forward with the attention
 * weights kept (Hq L^2 floats per layer) and about twice its work. */
typedef struct attn_decoder_backward_options {
    size_t struct_size;
    const float *dlogits;                 /* [L, V], required                    */
    attn_decoder_tensor_hook grad_hook;   /* or NULL                             */
    void *grad_hook_user;
    uint32_t grad_hook_points;            /* bits (1u << point), as tensor_hook_points */
    float *d_embed;                       /* [L, d]: the gradient of hook_embed, or NULL */
} attn_decoder_backward_options;

#define ATTN_DECODER_BACKWARD_OPTIONS_INIT {.struct_size = sizeof(attn_decoder_backward_options)}

/* forward: NULL, or the forward's outputs and hooks (last_only refused: the
 * gradient needs every position's logits). */
ATTN_API attn_status attn_decoder_backward(const attn_decoder *m, const int32_t *ids, int64_t L,
                                           const attn_decoder_outputs *forward,
                                           const attn_decoder_backward_options *opt);

/* ============================================================ generation
 *
 * A session decodes one sequence incrementally: attn_decoder_step runs the
 * next n tokens (a prompt, a chunk of one, or one generated token) at
 * positions pos .. pos + n - 1 and appends their keys (after RoPE, at their
 * absolute positions) and values to attn's KV cache (attn_cache.h: one cache
 * with a layer per decoder layer, one sequence, contiguous), so each step
 * costs its own n tokens' projections plus attention over the pos + n rows
 * held, not a forward over everything again.  The same layer code as
 * attn_decoder_forward; queries attend lower-right causal over the cache
 * (key j visible to the query at position p iff j <= p; on Gemma 3's local
 * layers also j > p - W), which is the full forward's mask at the same
 * positions: steps of any sizes give the full forward's logits to float
 * rounding (docs/models.md, "Generation", has the measured differences).
 *
 * Shape legend (beyond the one above):
 *   C     capacity: positions a session holds (prompt + generated)
 *   n     tokens of one step;  pos  tokens the session holds before it
 *   ids     : [n]      int32, each in [0, V)
 *   logits  : [V]      the last of the n positions (attn_decoder_step)
 *             [n, V]   or [1, V] with last_only (attn_decoder_step_outputs)
 *   hidden  : [N + 1, n, d]  the step's tokens only
 *
 * Memory: the cache takes all of it at creation,
 *     C * attn_decoder_kv_bytes_per_token(cfg, kv_dtype)
 *     = C * N * Hkv * 2 * Dh * (4 | 2) bytes
 * (Qwen2.5 0.5B: 24 KiB a token in float32, 12 KiB in f16/bf16; Gemma 3
 * 270M: 36 KiB / 18 KiB — its local layers keep every row too, not only
 * the last W), plus a step's scratch, freed before it returns.
 *
 * KV dtype: float32 (the default) reproduces the full forward; float16 and
 * bfloat16 round each key and value once as they are stored (attn's
 * conversions, round to nearest even), half the memory, and a difference in
 * the logits that the tests measure rather than hide.
 *
 * Threads: a session is one sequence's state: calls on one session must not
 * overlap; distinct sessions over the same decoder may run at once.
 */

typedef struct attn_decoder_session attn_decoder_session; /* opaque */

/* Initialise with ATTN_DECODER_SESSION_OPTIONS_INIT (float32, AUTO kernel),
 * then set capacity. */
typedef struct attn_decoder_session_options {
    size_t struct_size;
    int64_t capacity;       /* C > 0: positions the session may hold          */
    attn_dtype kv_dtype;    /* ATTN_F32 (default), ATTN_F16, ATTN_BF16, or 8-bit
                               ATTN_Q8_0 / ATTN_FP8_E4M3 (head_dim a multiple
                               of 32; attn_cache.h)                          */
    attn_kernel kernel;     /* attention's kernel, as attn_decoder_outputs'   */
    attn_dtype kv_value_dtype; /* V's dtype when it is not K's: 0 (ATTN_F32) =
                               kv_dtype (attn_kv_cache_config.value_dtype):
                               ATTN_BF16 keys with ATTN_Q8_0 values keep the
                               keys' outliers (docs/cache.md)             */
} attn_decoder_session_options;

#define ATTN_DECODER_SESSION_OPTIONS_INIT \
    {.struct_size = sizeof(attn_decoder_session_options), .kv_dtype = ATTN_F32}

/* Bytes of KV cache one position costs: N * Hkv * 2 * Dh * element bytes
 * (8-bit: 34 bytes per 32 values). */
ATTN_API uint64_t attn_decoder_kv_bytes_per_token(const attn_decoder_config *cfg, attn_dtype kv_dtype);
/* The same with K in k_dtype and V in v_dtype (0: k_dtype). */
ATTN_API uint64_t attn_decoder_kv_bytes_per_token_split(const attn_decoder_config *cfg, attn_dtype k_dtype,
                                                        attn_dtype v_dtype);

/* A new, empty session over m (which must outlive it): its cache of
 * capacity positions allocated now.  ATTN_ERR_INVALID_ARGUMENT for a bad
 * option (named; opt NULL is the defaults, which lack the capacity),
 * ATTN_ERR_OUT_OF_MEMORY naming the bytes. */
ATTN_API attn_status attn_decoder_session_new(const attn_decoder *m, const attn_decoder_session_options *opt,
                                              attn_decoder_session **out);
/* Frees it (NULL is allowed). */
ATTN_API void attn_decoder_session_free(attn_decoder_session *s);
/* Deprecated names, until 1.0: attn_decoder_session_new under its former name. */
ATTN_API attn_status attn_decoder_session_create(const attn_decoder *m, const attn_decoder_session_options *opt,
                                                 attn_decoder_session **out)
    ATTN_DEPRECATED("renamed attn_decoder_session_new");
/* End of the deprecated names. */
/* Forgets every position (the next step is at position 0 again); keeps the
 * memory.  Also the way out of a failed step (below). */
ATTN_API attn_status attn_decoder_session_reset(attn_decoder_session *s);
/* Positions held (the position of the next token), and the capacity. */
ATTN_API int64_t attn_decoder_session_position(const attn_decoder_session *s);
ATTN_API int64_t attn_decoder_session_capacity(const attn_decoder_session *s);

/* Runs ids [n] at the next n positions and writes the logits of the last
 * one, logits [V] (NULL: none computed, e.g. a prompt's first chunks).
 * ATTN_ERR_CAPACITY when pos + n > C, ATTN_ERR_INVALID_ARGUMENT for an id
 * outside [0, V): checked before anything changes (the session is as it
 * was).  A failure during the layers (out of memory) leaves some layers
 * holding the step's rows: the session then refuses steps until it is
 * reset (the message says so). */
ATTN_API attn_status attn_decoder_step(attn_decoder_session *s, const int32_t *ids, int64_t n, float *logits);

/* attn_decoder_step with attn_decoder_outputs: logits of all n positions
 * ([n, V]) or the last ([1, V], last_only), hidden [N + 1, n, d], the layer
 * hook, the kernel (out->kernel, when not AUTO, overrides the session's).
 * Tensor hooks see the step's n tokens; hook_attn_scores and hook_pattern
 * are [Hq, n, pos + n] (the step's queries over every key held: the full
 * forward's rows pos .. pos + n - 1, its causal zeros on the right left
 * out), and may be written as in the full forward.  With a score, pattern or
 * z hook the step attends over a float32 copy of each layer's cached rows
 * (a copy of the cache per step, the price of seeing the weights) instead
 * of attn_kv_cache_attend's pieces.  out->attention must be NULL (use the
 * pattern hook). */
ATTN_API attn_status attn_decoder_step_outputs(attn_decoder_session *s, const int32_t *ids, int64_t n,
                                               attn_decoder_outputs *out);

/* ============================================================== sampling
 *
 * Choosing the next token from logits [V].  First the penalties, on the
 * tokens of the sampler's history (below) — the last penalty_last_n of
 * them, or all (0) — for each token t seen there count_t times:
 *   1. repetition_penalty r (!= 1): logit_t / r if logit_t > 0, else
 *      logit_t * r (Hugging Face transformers' RepetitionPenaltyLogits-
 *      Processor: each token seen once or more, whatever its count)
 *   2. logit_t -= count_t * frequency_penalty + (count_t > 0) * presence_penalty
 *      (OpenAI's and llama.cpp's frequency and presence penalties)
 * (both in float, in that order, as llama.cpp's penalties sampler).  Then
 * greedy (temperature 0, the default): the largest logit, the lowest id
 * among equals.  Otherwise, in transformers' order (TemperatureLogitsWarper,
 * TopK, TopP, MinP):
 *   3. z_i = logit_i / temperature
 *   4. top_k > 0: keep the top_k largest z (ties: lower ids first)
 *   5. top_p < 1: of those, by z descending, keep the shortest prefix whose
 *      probability (softmax over the kept z) reaches top_p (at least one)
 *   6. min_p > 0: of those, keep the tokens whose probability is at least
 *      min_p times the largest's (exp(z_i - z_max) >= min_p)
 *   7. draw from softmax of the kept z: u uniform in [0, 1), the first
 *      token, in that order, whose cumulative probability exceeds u * sum.
 * top_k = 1 is greedy whatever the temperature.  Softmax and sums in double.
 *
 * The history: the tokens given to attn_sampler_accept (a prompt) and every
 * token attn_sampler_sample returns, in order; attn_sampler_forget empties
 * it.  Without penalties it is not kept.
 *
 * The random numbers: SplitMix64 (Steele, Lea, Flood 2014; Vigna's public
 * domain constants), state = seed, then per draw
 *     state += 0x9E3779B97F4A7C15;  z = state;
 *     z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9;
 *     z = (z ^ (z >> 27)) * 0x94D049BB133111EB;  z ^= z >> 31
 * and u = (z >> 11) * 2^-53: integer arithmetic only, so a seed gives the
 * same u sequence on every machine and compiler.  One draw per sampled
 * token (greedy draws none).  The same logits, history and seed give the
 * same token; across machines the logits themselves may differ in their
 * last bits (libm's exp, the BLAS's sums), which can change a draw only
 * where u falls within that rounding of a boundary.
 */

/* A sampler is one stream of draws: calls on one sampler must not overlap;
 * distinct samplers are independent (threads included). */
typedef struct attn_sampler attn_sampler; /* opaque: options, the PRNG state, the history, scratch [V] */

typedef struct attn_sampler_options {
    size_t struct_size;
    double temperature;     /* 0 (default) = greedy; > 0 otherwise            */
    int64_t top_k;          /* 0 (default) = all tokens; else > 0             */
    double top_p;           /* in (0, 1]; 1 (default) = no nucleus cut        */
    uint64_t seed;          /* the PRNG's starting state                      */
    /* Added later, at the end (the struct_size rule); defaults in the initialiser: */
    double repetition_penalty; /* > 0; 1 (default) = none                    */
    double frequency_penalty;  /* finite; 0 (default) = none                 */
    double presence_penalty;   /* finite; 0 (default) = none                 */
    int64_t penalty_last_n;    /* the penalties' window: the last N tokens of
                                  the history; 0 (default) = all of it        */
    double min_p;              /* in [0, 1]; 0 (default) = no cut            */
} attn_sampler_options;

#define ATTN_SAMPLER_OPTIONS_INIT \
    {.struct_size = sizeof(attn_sampler_options), .top_p = 1.0, .repetition_penalty = 1.0}

/* A sampler for logits of vocab entries (its scratch: 16 bytes an entry,
 * 20 more with penalties); opt NULL: the defaults (greedy).
 * ATTN_ERR_INVALID_ARGUMENT naming the bad option. */
ATTN_API attn_status attn_sampler_new(const attn_sampler_options *opt, int64_t vocab, attn_sampler **out);
ATTN_API void attn_sampler_free(attn_sampler *s);
/* Deprecated names, until 1.0: attn_sampler_new under its former name. */
ATTN_API attn_status attn_sampler_create(const attn_sampler_options *opt, int64_t vocab, attn_sampler **out)
    ATTN_DEPRECATED("renamed attn_sampler_new");
/* End of the deprecated names. */
/* The next token from logits [vocab] into *id, which joins the history.
 * ATTN_ERR_NONFINITE when a logit is NaN or all are -inf (naming the first
 * bad one). */
ATTN_API attn_status attn_sampler_sample(attn_sampler *s, const float *logits, int32_t *id);
/* The probabilities the next draw would use, probs [vocab] (0 for the
 * tokens cut; greedy: 1 for the token it would return): for tests, and for
 * callers that show them.  Draws nothing, changes nothing. */
ATTN_API attn_status attn_sampler_probabilities(attn_sampler *s, const float *logits, double *probs);
/* Appends ids [n] to the history (a prompt, or tokens chosen elsewhere);
 * ATTN_ERR_INVALID_ARGUMENT for an id outside [0, vocab). */
ATTN_API attn_status attn_sampler_accept(attn_sampler *s, const int32_t *ids, int64_t n);
/* Empties the history (the PRNG goes on). */
ATTN_API void attn_sampler_forget(attn_sampler *s);
/* The next uniform in [0, 1) of the sampler's PRNG (what a draw uses; for
 * tests and for callers that want the same stream). */
ATTN_API double attn_sampler_uniform(attn_sampler *s);

#ifdef __cplusplus
}
#endif

#endif /* ATTN_DECODER_H */
