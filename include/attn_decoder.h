/*
 * attn_decoder.h — a decoder-only language model run in float32 over token
 * ids, every layer's attention through attn_sdpa_forward (libattn_model;
 * built on the GGUF reader of attn_model.h).  docs/models.md, "The
 * decoder", has the equations of each architecture, the memory, the speed
 * and how it is checked against Hugging Face transformers.
 *
 * Architectures (general.architecture):
 *   qwen2   Qwen2 / Qwen2.5: RMSNorm, q/k/v biases, GQA, RoPE (NeoX pairing),
 *           SwiGLU, a separate output head
 *   gemma3  Gemma 3 (text): embeddings times sqrt(d_model), QK-norm, pre- and
 *           post-norms around attention and FFN, sliding-window local layers
 *           with their own RoPE theta, every 6th layer global, GeGLU (tanh
 *           GELU), tied output head
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
    ATTN_DECODER_GEMMA3 = 2
} attn_decoder_arch;

typedef enum attn_decoder_activation {
    ATTN_DECODER_SWIGLU = 0,     /* down(silu(gate x) * up x)                   */
    ATTN_DECODER_GEGLU_TANH = 1  /* down(gelu_tanh(gate x) * up x)              */
} attn_decoder_activation;

/* A model's configuration, as its GGUF metadata gives it (keys prefixed
 * by the architecture's name: "qwen2.block_count", ...), completed with
 * what the architecture fixes and the file does not say (Gemma 3's local
 * RoPE theta 1e4 and its pattern of 6; llama.cpp fixes them in code too). */
typedef struct attn_decoder_config {
    attn_decoder_arch arch;
    const char *architecture;       /* "qwen2", "gemma3" (static)                   */
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
    int qk_norm;                    /* RMSNorm over each head's q and k (gemma3)    */
    int post_norms;                 /* norms after attention and after the FFN      */
    int tied_embeddings;            /* no output.weight: logits use token_embd      */
    attn_decoder_activation activation;
} attn_decoder_config;

/* Reads the configuration from g's metadata.  ATTN_ERR_FORMAT naming the
 * missing or wrong key (or tensor); ATTN_ERR_UNSUPPORTED for another
 * architecture, naming it. */
ATTN_API attn_status attn_decoder_read_config(const attn_gguf *g, attn_decoder_config *cfg);

/* 1 when layer l (0-based) uses the sliding window (and the local theta). */
ATTN_API int attn_decoder_layer_is_local(const attn_decoder_config *cfg, int64_t layer);

typedef struct attn_decoder attn_decoder; /* opaque, read-only once loaded */

/* Reads the configuration and dequantizes every tensor the forward uses
 * to float32, checking each tensor's presence and shape first (a message
 * names the tensor, its dims and the dims expected).  g may be closed
 * afterwards. */
ATTN_API attn_status attn_decoder_load(const attn_gguf *g, attn_decoder **out);
ATTN_API void attn_decoder_free(attn_decoder *m);
ATTN_API const attn_decoder_config *attn_decoder_get_config(const attn_decoder *m);
/* Bytes of float32 weights the decoder holds. */
ATTN_API uint64_t attn_decoder_weight_bytes(const attn_decoder *m);

/* Called after each layer with its output, the residual stream after layer
 * `layer`: hidden [L, d], read-only, valid during the call.  A nonzero
 * return stops the forward, which then returns ATTN_ERR_INVALID_ARGUMENT
 * ("stopped by the layer hook"). */
typedef int (*attn_decoder_layer_hook)(void *user, int64_t layer, const float *hidden, int64_t L, int64_t d);

/* ------------------------------------------------------------ hook points
 *
 * Where a forward shows its activations to a tensor hook, under
 * TransformerLens's names (blocks.L. prefix; TransformerLens's leading
 * batch axis is left out: one sequence), in the order a layer computes them:
 *
 *   hook_embed                  [L, d]       token embeddings (times sqrt(d),
 *                                             Gemma) = blocks.0.hook_resid_pre
 *   blocks.L.hook_resid_pre     [L, d]       the residual stream into layer L
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
 *   blocks.L.hook_attn_out      [L, d]       z through W_O (and Gemma's
 *                                             post-attention norm): what is added
 *   blocks.L.hook_resid_mid     [L, d]       resid_pre + attn_out
 *   blocks.L.hook_mlp_out       [L, d]       the FFN's output (and Gemma's
 *                                             post-FFN norm): what is added
 *   blocks.L.hook_resid_post    [L, d]       resid_mid + mlp_out = hidden[L + 1]
 *   ln_final.hook_normalized    [R, d]       the final RMSNorm's output, times
 *                                             its weight (R = L, or 1 with
 *                                             last_only); only when logits are asked
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
    ATTN_DECODER_HOOK_POINTS
} attn_decoder_hook_point;

/* Every point: the value of tensor_hook_points that calls the hook everywhere. */
#define ATTN_DECODER_HOOK_ALL ((1u << ATTN_DECODER_HOOK_POINTS) - 1u)

/* What a tensor hook is shown: data may be overwritten, not resized. */
typedef struct attn_decoder_hook_tensor {
    attn_decoder_hook_point point;
    int64_t layer;          /* 0-based; -1 for hook_embed and ln_final     */
    const char *name;       /* "blocks.3.attn.hook_pattern" (valid during the call) */
    float *data;            /* C order, shape below                        */
    int ndim;               /* 2 or 3                                      */
    int64_t shape[3];
} attn_decoder_hook_tensor;

/* Called at each point asked for; a nonzero return stops the forward,
 * which returns ATTN_ERR_INVALID_ARGUMENT naming the hook point. */
typedef int (*attn_decoder_tensor_hook)(void *user, const attn_decoder_hook_tensor *t);

/* The name of a point at a layer ("blocks.3.attn.hook_q"; layer ignored for
 * hook_embed and ln_final.hook_normalized) into buf; NULL when the point is
 * outside the enum or buf is too small. */
ATTN_API const char *attn_decoder_hook_name(attn_decoder_hook_point point, int64_t layer, char *buf, size_t size);

/* The point's name without the "blocks.L." prefix ("attn.hook_q"); NULL
 * outside the enum. */
ATTN_API const char *attn_decoder_hook_suffix(attn_decoder_hook_point point);

/* Parses a full name ("blocks.3.hook_resid_pre", "hook_embed"): *point and
 * *layer (-1 for the two without a layer).  ATTN_ERR_INVALID_ARGUMENT with
 * a message for anything else (the layer's range is the caller's check). */
ATTN_API attn_status attn_decoder_hook_parse(const char *name, attn_decoder_hook_point *point, int64_t *layer);

/* What a forward writes; every pointer may be NULL (not computed, except
 * what later steps need).  Initialise with ATTN_DECODER_OUTPUTS_INIT.
 * struct_size: sizeof(attn_decoder_outputs), or the size before the
 * tensor hook fields (offsetof(attn_decoder_outputs, tensor_hook)) from a
 * caller built before they existed. */
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

#ifdef __cplusplus
}
#endif

#endif /* ATTN_DECODER_H */
