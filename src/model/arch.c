/*
 * arch.c — the architecture table (arch.h): one row per architecture the
 * decoder runs, with every fact of it that code reads — the layer's shape
 * (biases, QK-norm, where the norms sit, the activation, the embeddings'
 * scale), RoPE (pairing, default thetas, the sliding layers' own theta and
 * pattern), the tied head's default, how GGUF and Hugging Face files name
 * it and its tensors, and the config.json keys only it reads.  Both loaders
 * and the forward read the row; no other file branches on the architecture,
 * and the list of architectures in messages and help texts
 * (attn_decoder_architecture) comes from here.
 *
 * Adding an architecture whose parts exist (these norms, RoPE, a gated
 * FFN) is one row below plus a test: a tiny checkpoint of it against
 * transformers (tests/fixtures/make_tiny_models.py, checked by
 * tests/model/test_safetensors_models.c) and, when llama.cpp converts it, a
 * GGUF of the same weights.  A part the decoder does not have (LayerNorm, a
 * fused QKV tensor, softcapping, biases elsewhere) is new code in
 * decoder_forward.c behind a new trait here, never a branch on the enum.
 *
 * The keys every architecture shares (GGUF's ARCH.block_count, ... under
 * the row's name; config.json's hidden_size, ...) are read by the loaders,
 * which name them in their messages.
 *
 * Sources of the facts: llama.cpp's llama-model.cpp and convert_hf_to_gguf.py
 * (GGUF names, defaults, the llama permutation), transformers' modeling_*.py
 * and configuration_*.py (config.json names and defaults); the two agree on
 * what both state (Gemma 3's local theta 1e4 and pattern of 6).
 */
#include "model/arch.h"

#include "formats/quote.h"

#include <stdlib.h>

/* GGUF's names (llama.cpp's), for every architecture; GGUF dims are the
 * reverse of numpy's (dims[0] = d_in):
 *   token_embd.weight [d, V]    output_norm.weight [d]    output.weight [d, V]
 *   blk.N.attn_norm [d]   attn_q [d, Hq*Dh]   attn_k, attn_v [d, Hkv*Dh]
 *   blk.N.attn_q.bias, attn_k.bias, attn_v.bias   attn_q_norm, attn_k_norm [Dh]
 *   blk.N.attn_output [Hq*Dh, d]   post_attention_norm, ffn_norm, post_ffw_norm [d]
 *   blk.N.ffn_gate, ffn_up [d, F]   ffn_down [F, d] */
static const arch_tensor_names gguf_names = {
    .embed = "token_embd.weight",
    .output_norm = "output_norm.weight",
    .output = "output.weight",
    .rope_freqs = "rope_freqs.weight",
    .layer_prefix = "blk.",
    .layer =
        {
            [ARCH_ATTN_NORM] = "attn_norm.weight",
            [ARCH_Q] = "attn_q.weight",
            [ARCH_K] = "attn_k.weight",
            [ARCH_V] = "attn_v.weight",
            [ARCH_Q_BIAS] = "attn_q.bias",
            [ARCH_K_BIAS] = "attn_k.bias",
            [ARCH_V_BIAS] = "attn_v.bias",
            [ARCH_Q_NORM] = "attn_q_norm.weight",
            [ARCH_K_NORM] = "attn_k_norm.weight",
            [ARCH_ATTN_OUT] = "attn_output.weight",
            [ARCH_POST_ATTN_NORM] = "post_attention_norm.weight",
            [ARCH_FFN_NORM] = "ffn_norm.weight",
            [ARCH_FFN_GATE] = "ffn_gate.weight",
            [ARCH_FFN_UP] = "ffn_up.weight",
            [ARCH_FFN_DOWN] = "ffn_down.weight",
            [ARCH_POST_FFN_NORM] = "post_ffw_norm.weight",
        },
};

/* transformers' names, numpy's shapes (nn.Linear is [out, in]):
 *   model.embed_tokens.weight [V, d]   model.norm.weight [d]   lm_head.weight [V, d]
 *   model.layers.L.input_layernorm [d]
 *   model.layers.L.self_attn.q_proj [Hq*Dh, d]   k_proj, v_proj [Hkv*Dh, d]  (.bias)
 *   model.layers.L.self_attn.q_norm, k_norm [Dh]   o_proj [d, Hq*Dh]
 *   model.layers.L.mlp.gate_proj, up_proj [F, d]   down_proj [d, F]
 * and the norms around the FFN (HF_NAMES' arguments), whose names mean
 * different places: in Qwen2 / Qwen3 / Llama post_attention_layernorm is the
 * norm BEFORE the FFN; in Gemma 3 it is the norm after attention, and the
 * FFN's own are pre_ and post_feedforward_layernorm. */
#define HF_NAMES(...)                                    \
    {                                                    \
        .embed = "model.embed_tokens.weight",            \
        .output_norm = "model.norm.weight",              \
        .output = "lm_head.weight",                      \
        .layer_prefix = "model.layers.",                 \
        .layer = {                                       \
            [ARCH_ATTN_NORM] = "input_layernorm.weight", \
            [ARCH_Q] = "self_attn.q_proj.weight",        \
            [ARCH_K] = "self_attn.k_proj.weight",        \
            [ARCH_V] = "self_attn.v_proj.weight",        \
            [ARCH_Q_BIAS] = "self_attn.q_proj.bias",     \
            [ARCH_K_BIAS] = "self_attn.k_proj.bias",     \
            [ARCH_V_BIAS] = "self_attn.v_proj.bias",     \
            [ARCH_Q_NORM] = "self_attn.q_norm.weight",   \
            [ARCH_K_NORM] = "self_attn.k_norm.weight",   \
            [ARCH_ATTN_OUT] = "self_attn.o_proj.weight", \
            [ARCH_FFN_GATE] = "mlp.gate_proj.weight",    \
            [ARCH_FFN_UP] = "mlp.up_proj.weight",        \
            [ARCH_FFN_DOWN] = "mlp.down_proj.weight",    \
            __VA_ARGS__                                  \
        }                                                \
    }
static const arch_tensor_names hf_names = HF_NAMES([ARCH_FFN_NORM] = "post_attention_layernorm.weight");
static const arch_tensor_names hf_gemma3_names = HF_NAMES(
    [ARCH_POST_ATTN_NORM] = "post_attention_layernorm.weight", [ARCH_FFN_NORM] = "pre_feedforward_layernorm.weight",
    [ARCH_POST_FFN_NORM] = "post_feedforward_layernorm.weight");
#undef HF_NAMES

/* The rows, in the order messages list them. */
static const decoder_arch archs[] = {
    {
        /* Qwen2 / Qwen2.5. */
        .arch = ATTN_DECODER_QWEN2,
        .name = "qwen2",
        .model_type = "qwen2",
        .qkv_bias = 1,
        .activation = ATTN_DECODER_SWIGLU,
        .rope_pairing = ATTN_ROPE_NEOX,
        .gguf_rope_theta = 10000.0,
        .hf_rope_theta = 10000.0,
        .gguf = &gguf_names,
        .hf = &hf_names,
        .hf_use_sliding_key = "use_sliding_window",
    },
    {
        /* Qwen3: qwen2 without biases, with QK-norm. */
        .arch = ATTN_DECODER_QWEN3,
        .name = "qwen3",
        .model_type = "qwen3",
        .qk_norm = 1,
        .activation = ATTN_DECODER_SWIGLU,
        .rope_pairing = ATTN_ROPE_NEOX,
        .gguf_rope_theta = 10000.0,
        .hf_rope_theta = 10000.0,
        .gguf = &gguf_names,
        .hf = &hf_names,
        .hf_use_sliding_key = "use_sliding_window",
    },
    {
        /* Gemma 3 (text): norms on both sides of attention and the FFN,
         * sliding-window layers with their own theta, every 6th global. */
        .arch = ATTN_DECODER_GEMMA3,
        .name = "gemma3",
        .model_type = "gemma3_text",
        .model_type_text = "gemma3",
        .qk_norm = 1,
        .post_norms = 1,
        .activation = ATTN_DECODER_GEGLU_TANH,
        .scale_embeddings = 1,
        .tied_default = 1,
        .rope_pairing = ATTN_ROPE_NEOX,
        .gguf_rope_theta = 10000.0,
        .hf_rope_theta = 1000000.0,
        .rope_theta_local = 10000.0,
        .sliding_pattern = 6,
        .gguf = &gguf_names,
        .hf = &hf_gemma3_names,
        .hf_norm_plus_one = 1,
        .hf_scale_key = "query_pre_attn_scalar",
        .hf_local_theta_key = "rope_local_base_freq",
        .hf_pattern_keys = {"sliding_window_pattern", "_sliding_window_pattern"},
        .hf_softcap_keys = {"attn_logit_softcapping", "final_logit_softcapping"},
        .hf_bidirectional_key = "use_bidirectional_attention",
    },
    {
        /* Llama / SmolLM2 / TinyLlama. */
        .arch = ATTN_DECODER_LLAMA,
        .name = "llama",
        .model_type = "llama",
        .activation = ATTN_DECODER_SWIGLU,
        .rope_pairing = ATTN_ROPE_NEOX,
        .gguf_rope_theta = 10000.0,
        .hf_rope_theta = 10000.0,
        .gguf = &gguf_names,
        .hf = &hf_names,
        .gguf_permuted_qk = 1,
        .hf_use_sliding_key = "use_sliding_window",
    },
};
enum { N_ARCHS = sizeof archs / sizeof archs[0] };

/* The activations, by config.json's names (hidden_act). */
static const struct {
    const char *name;
    attn_decoder_activation activation;
} activations[] = {
    {"silu", ATTN_DECODER_SWIGLU},
    {"gelu_pytorch_tanh", ATTN_DECODER_GEGLU_TANH},
};
enum { N_ACTIVATIONS = sizeof activations / sizeof activations[0] };

const decoder_arch *attn__arch_at(int i) { return i >= 0 && i < N_ARCHS ? &archs[i] : NULL; }

const char *attn_decoder_architecture(int index) {
    const decoder_arch *a = attn__arch_at(index);
    return a ? a->name : NULL;
}

const decoder_arch *attn__arch_of(attn_decoder_arch arch) {
    for (int i = 0; i < N_ARCHS; i++)
        if (archs[i].arch == arch) return &archs[i];
    return NULL;
}

const decoder_arch *attn__arch_by_name(const char *name, size_t len) {
    for (int i = 0; i < N_ARCHS; i++)
        if (strlen(archs[i].name) == len && memcmp(archs[i].name, name, len) == 0) return &archs[i];
    return NULL;
}

const decoder_arch *attn__arch_by_model_type(const char *type, bool text_config) {
    for (int i = 0; i < N_ARCHS; i++)
        if (strcmp(archs[i].model_type, type) == 0 ||
            (!text_config && archs[i].model_type_text && strcmp(archs[i].model_type_text, type) == 0))
            return &archs[i];
    return NULL;
}

/* names[0 .. n) as "a, b and c" into buf. */
static const char *join(const char *const *names, int n, char *buf, size_t size) {
    size_t used = 0;
    buf[0] = 0;
    for (int i = 0; i < n && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, "%s%s", i == 0 ? "" : i == n - 1 ? " and " : ", ",
                                 names[i]);
    return buf;
}

const char *attn__arch_list(bool model_types, char *buf, size_t size) {
    const char *names[N_ARCHS];
    for (int i = 0; i < N_ARCHS; i++) names[i] = model_types ? archs[i].model_type : archs[i].name;
    return join(names, N_ARCHS, buf, size);
}

bool attn__arch_activation(const char *name, attn_decoder_activation *out) {
    for (int i = 0; i < N_ACTIVATIONS; i++)
        if (strcmp(activations[i].name, name) == 0) {
            *out = activations[i].activation;
            return true;
        }
    return false;
}

const char *attn__arch_activations(char *buf, size_t size) {
    const char *names[N_ACTIVATIONS];
    for (int i = 0; i < N_ACTIVATIONS; i++) names[i] = activations[i].name;
    return join(names, N_ACTIVATIONS, buf, size);
}

void attn__arch_tensor_note(const arch_tensor_names *names, const int *layer_used, bool read_output, int64_t n_layers,
                            const char *name, arch_unused *u) {
    if (strcmp(name, names->embed) == 0 || strcmp(name, names->output_norm) == 0 ||
        (read_output && strcmp(name, names->output) == 0))
        return;
    const size_t prefix = strlen(names->layer_prefix);
    int64_t layer = -1;
    if (strncmp(name, names->layer_prefix, prefix) == 0 && name[prefix] >= '0' && name[prefix] <= '9') {
        char *end;
        const long long n = strtoll(name + prefix, &end, 10);
        if (*end == '.' && n >= 0 && n < INT64_MAX) {
            layer = n;
            if (layer > u->last_layer) u->last_layer = layer;
            for (int i = 0; i < ARCH_LAYER_TENSORS; i++)
                if (layer < n_layers && layer_used[i] && names->layer[i] && strcmp(end + 1, names->layer[i]) == 0)
                    return;
        }
    }
    if (u->count < 3) attn__quote(name, strlen(name), u->first[u->count], sizeof u->first[0]);
    u->count++;
    if (layer >= n_layers) u->past_layers++;
}

attn_status attn__arch_tensor_check(const arch_unused *u, const char *block_key, int64_t n_layers) {
    if (u->count == 0) return ATTN_OK;
    char names[400];
    snprintf(names, sizeof names, "'%s'%s%s%s%s%s%s", u->first[0], u->count > 1 ? ", '" : "",
             u->count > 1 ? u->first[1] : "", u->count > 1 ? "'" : "", u->count > 2 ? ", '" : "",
             u->count > 2 ? u->first[2] : "", u->count > 2 ? (u->count > 3 ? "', ..." : "'") : "");
    if (u->past_layers)
        return attn__fail(ATTN_ERR_FORMAT, "%lld tensor%s used by no layer (%s): the file holds layers 0..%lld, but "
                          "%s is %lld", (long long)u->count, u->count == 1 ? " is" : "s are", names,
                          (long long)u->last_layer, block_key, (long long)n_layers);
    return attn__fail(ATTN_ERR_FORMAT, "%lld tensor%s used by no part of the model (%s): a file with tensors its "
                      "configuration does not describe is refused, not run without them", (long long)u->count,
                      u->count == 1 ? " is" : "s are", names);
}
