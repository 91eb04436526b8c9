/*
 * arch.h — the architectures the decoder runs, one row each (arch.c has the
 * table): every fact of an architecture that the GGUF loader (decoder.c),
 * the Hugging Face loader (decoder_hf.c) and, through the configuration and
 * the weights those two make, the forward (decoder_forward.c) depend on.
 * Nothing outside arch.c branches on attn_decoder_arch: code asks the row.
 */
#ifndef ATTN_MODEL_ARCH_H
#define ATTN_MODEL_ARCH_H

#include "attn_decoder.h"
#include "base/base.h"

/* The tensors of one layer, in the order the loaders read them (the fields
 * of decoder.h's decoder_layer). */
typedef enum arch_layer_tensor {
    ARCH_ATTN_NORM,      /* the norm before attention                       */
    ARCH_Q, ARCH_K, ARCH_V,
    ARCH_Q_BIAS, ARCH_K_BIAS, ARCH_V_BIAS,
    ARCH_Q_NORM, ARCH_K_NORM,
    ARCH_ATTN_OUT,
    ARCH_POST_ATTN_NORM, /* the norm of attention's output, before the sum  */
    ARCH_FFN_NORM,       /* the norm before the FFN                         */
    ARCH_FFN_GATE, ARCH_FFN_UP, ARCH_FFN_DOWN,
    ARCH_POST_FFN_NORM,  /* the norm of the FFN's output, before the sum    */
    ARCH_LAYER_TENSORS
} arch_layer_tensor;

/* How one file format names a model's tensors. */
typedef struct arch_tensor_names {
    const char *embed, *output_norm, *output;
    const char *rope_freqs;   /* per-frequency RoPE factors (not applied: refused), or NULL */
    const char *layer_prefix; /* a layer's names are prefix, its number, ".", the name */
    const char *layer[ARCH_LAYER_TENSORS]; /* NULL: this format's files of the
                                              architecture do not have it      */
} arch_tensor_names;

typedef struct decoder_arch {
    attn_decoder_arch arch;       /* the public enum (attn_decoder_config.arch)  */
    const char *name;             /* GGUF general.architecture and its keys' prefix;
                                     attn_decoder_config.architecture           */
    const char *model_type;       /* config.json's model_type                    */
    const char *model_type_text;  /* another model_type read only without a
                                     "text_config" (a multimodal checkpoint's
                                     text model is not read), or NULL           */

    /* The layer. */
    int qkv_bias;                 /* q, k and v projections have biases          */
    int qk_norm;                  /* RMSNorm over each head's q and k, before RoPE */
    int post_norms;               /* norms of attention's and the FFN's outputs  */
    attn_decoder_activation activation; /* the FFN's (config.json may name another) */
    int scale_embeddings;         /* embeddings times sqrt(d_model), rounded to float */
    int tied_default;             /* config.json without tie_word_embeddings: tied */

    /* Positions. */
    attn_rope_pairing rope_pairing;
    double gguf_rope_theta;       /* without ARCH.rope.freq_base (llama.cpp's default) */
    double hf_rope_theta;         /* without rope_theta (transformers' default)   */
    double rope_theta_local;      /* the sliding-window layers' own theta, never
                                     scaled; 0: the global one, scaled with it    */
    int64_t sliding_pattern;      /* with a window: layer l global iff
                                     (l + 1) % pattern == 0; 0: no sliding layers
                                     of its own (config.json may not ask for any) */

    /* What the files hold. */
    const arch_tensor_names *gguf, *hf;
    int gguf_permuted_qk;         /* llama.cpp's converter permuted each head's
                                     rows of attn_q and attn_k (decoder.c undoes it) */
    int hf_norm_plus_one;         /* norm weights stored as w, applied as 1 + w  */

    /* config.json keys of this architecture alone (NULL: not read). */
    const char *hf_scale_key;     /* the scale is its value^-1/2 (default Dh); else 1/sqrt(Dh) */
    const char *hf_local_theta_key;      /* rope_local_base_freq                  */
    const char *hf_pattern_keys[2];      /* sliding_window_pattern's spellings    */
    const char *hf_use_sliding_key;      /* true is refused (max_window_layers is not run) */
    const char *hf_softcap_keys[2];      /* set (not null) is refused             */
    const char *hf_bidirectional_key;    /* true is refused: the decoder is causal */
} decoder_arch;

/* The tensors of a file that the loader does not read (arch_tensor_note
 * for each of the file's tensors, then arch_tensor_check): a model whose
 * file holds more than its configuration describes (a stray tensor, or
 * layers past block_count) is refused naming them, not run without them. */
typedef struct arch_unused {
    int64_t count;          /* tensors no layer and no part of the model reads */
    int64_t past_layers;    /* of them, tensors of layers >= n_layers           */
    int64_t last_layer;     /* the highest layer number seen, -1 if none       */
    char first[3][112];     /* the first names (quoted, cut)                   */
} arch_unused;

/* Notes name, a tensor of a file named as names says, for a model of
 * n_layers layers whose layers read the tensors layer_used[i] != 0 (an
 * array of ARCH_LAYER_TENSORS flags; the embedding, the final norm and,
 * when read_output, the output head are read too). */
void attn__arch_tensor_note(const arch_tensor_names *names, const int *layer_used, bool read_output, int64_t n_layers,
                            const char *name, arch_unused *u);
/* ATTN_ERR_FORMAT naming the unused tensors (and block_key, the key that
 * gives the layers, when some lie past them), or ATTN_OK when there are none. */
attn_status attn__arch_tensor_check(const arch_unused *u, const char *block_key, int64_t n_layers);

/* The rows, in the table's order: i = 0, 1, ... until NULL. */
const decoder_arch *attn__arch_at(int i);
/* The row of an enum value, or NULL. */
const decoder_arch *attn__arch_of(attn_decoder_arch arch);
/* The row whose GGUF name is name[0 .. len), or NULL. */
const decoder_arch *attn__arch_by_name(const char *name, size_t len);
/* The row whose config.json model_type is type (text_config: the file has
 * a "text_config"), or NULL. */
const decoder_arch *attn__arch_by_model_type(const char *type, bool text_config);

/* The architectures as a list for messages ("qwen2, qwen3, gemma3 and
 * llama"): their GGUF names, or their model_types, into buf.  Returns buf. */
const char *attn__arch_list(bool model_types, char *buf, size_t size);

/* The activation config.json calls name (hidden_act: "silu", ...) into
 * *out; false when the decoder runs none of that name.  The names run, as a
 * list for messages ("silu and gelu_pytorch_tanh"): attn__arch_activations. */
bool attn__arch_activation(const char *name, attn_decoder_activation *out);
const char *attn__arch_activations(char *buf, size_t size);

#endif /* ATTN_MODEL_ARCH_H */
