/*
 * attn_decoder.h — a decoder-only language model run in float32 over token
 * ids, every layer's attention through attn_sdpa_forward (libattn_model;
 * built on the GGUF reader of attn_model.h).  docs/models.md, "The
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
 * Weights: every tensor is dequantized to float32 when the model is loaded
 * (attn_gguf_dequantize_rows), 4 bytes per parameter: 2.4 GiB for
 * Qwen2.5-Coder 0.5B, 1.0 GiB for Gemma 3 270M (5x the files).  The
 * decoder keeps its own copy: the attn_gguf may be closed once it is
 * loaded.  (Converting rows on demand, or dot products on the quantized
 * blocks, would cost only the mapping; not done yet.)
 *
 * Threads: a loaded decoder is read-only; attn_decoder_forward may run on
 * it from several threads at once (each call allocates its own scratch).
 * The projections run on the calling thread; attention uses attn's threads
 * (attn_sdpa_forward), whose results do not depend on their count.
 */
#ifndef ATTN_DECODER_H
#define ATTN_DECODER_H

#include "attn.h"
#include "attn_model.h"
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
} attn_decoder_config;

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

/* Reads the configuration and dequantizes every tensor the forward uses
 * to float32, checking each tensor's presence and shape first (a message
 * names the tensor, its dims and the dims expected).  g may be closed
 * afterwards. */
ATTN_API attn_status attn_decoder_load(const attn_gguf *g, attn_decoder **out);

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
ATTN_API void attn_decoder_free(attn_decoder *m);
ATTN_API const attn_decoder_config *attn_decoder_get_config(const attn_decoder *m);
/* Bytes of float32 weights the decoder holds. */
ATTN_API uint64_t attn_decoder_weight_bytes(const attn_decoder *m);

/* Called after each layer with its output, the residual stream after layer
 * `layer`: hidden [L, d], read-only, valid during the call.  A nonzero
 * return stops the forward, which then returns ATTN_ERR_INVALID_ARGUMENT
 * ("stopped by the layer hook"). */
typedef int (*attn_decoder_layer_hook)(void *user, int64_t layer, const float *hidden, int64_t L, int64_t d);

/* What a forward writes; every pointer may be NULL (not computed, except
 * what later steps need).  Initialise with ATTN_DECODER_OUTPUTS_INIT. */
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
} attn_decoder_outputs;

#define ATTN_DECODER_OUTPUTS_INIT {.struct_size = sizeof(attn_decoder_outputs)}

/* The forward over one sequence of L token ids, causal, positions 0 .. L-1.
 * ATTN_ERR_INVALID_ARGUMENT for an id outside [0, V) (naming its place). */
ATTN_API attn_status attn_decoder_forward(const attn_decoder *m, const int32_t *ids, int64_t L,
                                          attn_decoder_outputs *out);

#ifdef __cplusplus
}
#endif

#endif /* ATTN_DECODER_H */
