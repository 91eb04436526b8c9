/*
 * decoder_hf.c — a decoder from a Hugging Face checkpoint: config.json
 * (cJSON) to attn_decoder_config, and the safetensors weights to float32
 * (attn_decoder.h).  What differs between architectures — model_type, the
 * tensors' names (transformers' own; arch.c lists them with their shapes),
 * defaults, the keys only one architecture has — is read from the
 * architecture's row (arch.c); the keys every architecture has are read
 * here.  Shapes are numpy's: nn.Linear is [out, in], the decoder's
 * [d_out, d_in] as it stands (no transposes).
 */
#include "model/decoder.h"

#include "attn_safetensors.h"
#include "formats/json_keys.h"
#include "formats/quote.h"
#include "io/file.h"
#include "model/arch.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <sys/mman.h>

/* --------------------------------------------------------------- config */

/* key of obj as an integer in [lo, hi]; absent (or null) and optional:
 * *out unchanged. */
static attn_status json_int(const cJSON *obj, const char *key, int64_t lo, int64_t hi, bool optional, int64_t *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v || cJSON_IsNull(v)) {
        if (optional) return ATTN_OK;
        return attn__fail(ATTN_ERR_FORMAT, "config.json: no key \"%s\"", key);
    }
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < (double)lo ||
        v->valuedouble > (double)hi)
        return attn__fail(ATTN_ERR_FORMAT, "config.json: \"%s\" is not an integer in [%lld, %lld]", key,
                          (long long)lo, (long long)hi);
    *out = (int64_t)v->valuedouble;
    return ATTN_OK;
}

/* key as a positive finite number. */
static attn_status json_positive(const cJSON *obj, const char *key, bool optional, double *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v || cJSON_IsNull(v)) {
        if (optional) return ATTN_OK;
        return attn__fail(ATTN_ERR_FORMAT, "config.json: no key \"%s\"", key);
    }
    if (!cJSON_IsNumber(v) || !(v->valuedouble > 0.0) || !isfinite(v->valuedouble))
        return attn__fail(ATTN_ERR_FORMAT, "config.json: \"%s\" is not a positive number", key);
    *out = v->valuedouble;
    return ATTN_OK;
}

static attn_status json_bool(const cJSON *obj, const char *key, int *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v || cJSON_IsNull(v)) return ATTN_OK;
    if (!cJSON_IsBool(v)) return attn__fail(ATTN_ERR_FORMAT, "config.json: \"%s\" is not true or false", key);
    *out = cJSON_IsTrue(v);
    return ATTN_OK;
}

/* A string value, or NULL when absent or null; a non-string is refused. */
static attn_status json_string(const cJSON *obj, const char *key, const char **out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    *out = NULL;
    if (!v || cJSON_IsNull(v)) return ATTN_OK;
    if (!cJSON_IsString(v) || !v->valuestring)
        return attn__fail(ATTN_ERR_FORMAT, "config.json: \"%s\" is not a string", key);
    *out = v->valuestring;
    return ATTN_OK;
}

/* What a RoPE description may need from the rest of config.json. */
typedef struct rope_context {
    int64_t max_positions;      /* max_position_embeddings, or 0          */
    int64_t original_positions; /* a top-level original_max_position_embeddings
                                   (Phi-3's habit, which wins as in HF), or 0 */
} rope_context;

/* One RoPE description ({"rope_type": "default", "rope_theta": T}, or
 * rope_scaling's {"type": ...}) with transformers' defaults
 * (modeling_rope_utils.py): into c's scaling fields when c is given, else
 * only the default (unscaled) kind is accepted.  theta: read when given. */
static attn_status rope_entry(const cJSON *rope, const char *where, double *theta, const rope_context *ctx,
                              attn_decoder_config *c, double *partial) {
    if (!cJSON_IsObject(rope)) return attn__fail(ATTN_ERR_FORMAT, "config.json: \"%s\" is not an object", where);
    const char *type = NULL;
    attn_status st = json_string(rope, "rope_type", &type);
    if (!st && !type) st = json_string(rope, "type", &type);
    if (st) return st;
    if (theta && (st = json_positive(rope, "rope_theta", true, theta))) return st;
    double factor = partial ? *partial : 1.0;
    if ((st = json_positive(rope, "partial_rotary_factor", true, &factor))) return st;
    if (partial) *partial = factor;
    else if (factor != 1.0)
        return attn__fail(ATTN_ERR_UNSUPPORTED, "config.json: %s has partial_rotary_factor %g: the sliding-window "
                          "layers rotate whole heads", where, factor);
    if (!type || strcmp(type, "default") == 0) return ATTN_OK;
    char quoted[256];
    attn__quote(type, strlen(type), quoted, sizeof quoted);
    if (!c)
        return attn__fail(ATTN_ERR_UNSUPPORTED,
                          "config.json: %s has rope_type '%s': the sliding-window layers run unscaled RoPE only",
                          where, quoted);
    if (strcmp(type, "dynamic") == 0)
        return attn__fail(ATTN_ERR_UNSUPPORTED,
                          "config.json: %s has rope_type 'dynamic': dynamic NTK changes the frequencies with each "
                          "call's length, which keys already in a KV cache cannot follow; the decoder runs "
                          "linear, yarn and llama3", where);
    const bool linear = strcmp(type, "linear") == 0, yarn = strcmp(type, "yarn") == 0,
               llama3 = strcmp(type, "llama3") == 0;
    if (!linear && !yarn && !llama3)
        return attn__fail(ATTN_ERR_UNSUPPORTED, "config.json: %s has rope_type '%s': the decoder runs default, "
                          "linear, yarn and llama3", where, quoted);
    c->rope_scaling = linear ? ATTN_ROPE_SCALING_LINEAR : yarn ? ATTN_ROPE_SCALING_YARN : ATTN_ROPE_SCALING_LLAMA3;
    c->rope_factor = 0.0;
    if ((st = json_positive(rope, "factor", !linear && !llama3, &c->rope_factor))) return st;
    if (linear) return ATTN_OK;
    /* yarn and llama3: the length the model was trained at. */
    int64_t original = ctx->max_positions;
    if ((st = json_int(rope, "original_max_position_embeddings", 1, INT64_MAX / 2, true, &original))) return st;
    if (ctx->original_positions) original = ctx->original_positions;
    if (original <= 0)
        return attn__fail(ATTN_ERR_FORMAT, "config.json: %s (rope_type '%s') needs original_max_position_embeddings "
                          "or max_position_embeddings", where, quoted);
    c->rope_original_context = original;
    if (llama3)
        return (st = json_positive(rope, "low_freq_factor", false, &c->rope_low_freq_factor)) ? st
               : json_positive(rope, "high_freq_factor", false, &c->rope_high_freq_factor);
    if (c->rope_factor == 0.0) {
        /* HF: without a factor, the ratio of the two lengths (DeepSeek-V3). */
        if (ctx->max_positions <= 0)
            return attn__fail(ATTN_ERR_FORMAT, "config.json: %s (yarn) has no factor and there is no "
                              "max_position_embeddings to derive it from", where);
        c->rope_factor = (double)ctx->max_positions / (double)original;
    }
    int truncate = 1;
    if ((st = json_positive(rope, "attention_factor", true, &c->rope_attention_factor)) ||
        (st = json_positive(rope, "beta_fast", true, &c->rope_beta_fast)) ||
        (st = json_positive(rope, "beta_slow", true, &c->rope_beta_slow)) ||
        (st = json_positive(rope, "mscale", true, &c->rope_mscale)) ||
        (st = json_positive(rope, "mscale_all_dim", true, &c->rope_mscale_all_dim)) ||
        (st = json_bool(rope, "truncate", &truncate)))
        return st;
    c->rope_yarn_no_truncate = !truncate;
    return ATTN_OK;
}

/* Whether layer l is global, for a pattern: the decoder's rule. */
static bool pattern_global(int64_t pattern, int64_t l) { return pattern > 0 && (l + 1) % pattern == 0; }

static attn_status config_from_object(const cJSON *root, attn_decoder_config *cfg) {
    if (!cJSON_IsObject(root)) return attn__fail(ATTN_ERR_FORMAT, "config.json is not a JSON object");
    const char *type = NULL;
    attn_status st = json_string(root, "model_type", &type);
    if (st) return st;
    if (!type) return attn__fail(ATTN_ERR_FORMAT, "config.json: no key \"model_type\"");
    const decoder_arch *a = attn__arch_by_model_type(type, cJSON_GetObjectItemCaseSensitive(root, "text_config") != NULL);
    if (!a) {
        char quoted[256], list[256], multimodal[256] = "";
        for (int i = 0; attn__arch_at(i); i++)
            if (attn__arch_at(i)->model_type_text)
                snprintf(multimodal, sizeof multimodal, " (a multimodal %s checkpoint's text model is not read)",
                         attn__arch_at(i)->model_type_text);
        return attn__fail(ATTN_ERR_UNSUPPORTED, "config.json: model_type '%s': the decoder runs %s%s",
                          attn__quote(type, strlen(type), quoted, sizeof quoted), attn__arch_list(true, list, sizeof list),
                          multimodal);
    }
    attn_decoder_config c;
    memset(&c, 0, sizeof c);
    c.arch = a->arch;
    c.architecture = a->name;
    const int64_t big = (int64_t)1 << 31;
    if ((st = json_int(root, "hidden_size", 1, big, false, &c.d_model)) ||
        (st = json_int(root, "num_hidden_layers", 1, 4096, false, &c.n_layers)) ||
        (st = json_int(root, "num_attention_heads", 1, big, false, &c.n_heads)) ||
        (st = json_int(root, "intermediate_size", 1, big, false, &c.d_ffn)) ||
        (st = json_int(root, "vocab_size", 1, big, false, &c.vocab)))
        return st;
    c.n_kv_heads = c.n_heads;
    if ((st = json_int(root, "num_key_value_heads", 1, big, true, &c.n_kv_heads))) return st;
    c.head_dim = 0;
    if ((st = json_int(root, "head_dim", 1, big, true, &c.head_dim))) return st;
    if (c.head_dim == 0) {
        if (c.d_model % c.n_heads != 0)
            return attn__fail(ATTN_ERR_FORMAT, "config.json: no \"head_dim\", and hidden_size %lld is not a "
                              "multiple of num_attention_heads %lld", (long long)c.d_model, (long long)c.n_heads);
        c.head_dim = c.d_model / c.n_heads;
    }
    c.rms_eps = 1e-6;
    if ((st = json_positive(root, "rms_norm_eps", true, &c.rms_eps))) return st;

    /* RoPE: transformers 5's rope_parameters, else the older keys.  A
     * scaling applies to the global layers, and to the sliding ones too
     * when they share the one description (not gemma3's, which have their
     * own theta and are never scaled). */
    c.rope_theta = a->hf_rope_theta;
    c.rope_theta_local = a->rope_theta_local;
    rope_context rctx = {0, 0};
    if ((st = json_int(root, "max_position_embeddings", 1, INT64_MAX / 2, true, &rctx.max_positions)) ||
        (st = json_int(root, "original_max_position_embeddings", 1, INT64_MAX / 2, true, &rctx.original_positions)))
        return st;
    bool nested = false;
    /* partial_rotary_factor: top-level, or in the RoPE description (which
     * wins, as transformers 5 reads it from there). */
    double partial = 1.0;
    if ((st = json_positive(root, "partial_rotary_factor", true, &partial))) return st;
    const cJSON *rope = cJSON_GetObjectItemCaseSensitive(root, "rope_parameters");
    if (rope && !cJSON_IsNull(rope)) {
        const cJSON *full = cJSON_GetObjectItemCaseSensitive(rope, "full_attention");
        const cJSON *sliding = cJSON_GetObjectItemCaseSensitive(rope, "sliding_attention");
        nested = full || sliding;
        if (nested) {
            if (full && (st = rope_entry(full, "rope_parameters.full_attention", &c.rope_theta, &rctx, &c, &partial)))
                return st;
            if (sliding &&
                (st = rope_entry(sliding, "rope_parameters.sliding_attention", &c.rope_theta_local, &rctx, NULL, NULL)))
                return st;
        } else if ((st = rope_entry(rope, "rope_parameters", &c.rope_theta, &rctx, &c, &partial))) {
            return st;
        }
    } else {
        if ((st = json_positive(root, "rope_theta", true, &c.rope_theta))) return st;
        const cJSON *scaling = cJSON_GetObjectItemCaseSensitive(root, "rope_scaling");
        if (scaling && !cJSON_IsNull(scaling) && (st = rope_entry(scaling, "rope_scaling", NULL, &rctx, &c, &partial)))
            return st;
        if (a->hf_local_theta_key && (st = json_positive(root, a->hf_local_theta_key, true, &c.rope_theta_local)))
            return st;
    }
    c.rope_scale_local = a->rope_theta_local == 0.0 && !nested;
    c.context_length = rctx.max_positions;
    /* transformers: dim = int(head_dim * partial_rotary_factor). */
    if (partial > 1.0)
        return attn__fail(ATTN_ERR_FORMAT, "config.json: partial_rotary_factor is %g: it rotates a fraction of each "
                          "head, at most 1", partial);
    c.rope_dim = partial == 1.0 ? c.head_dim : (int64_t)((double)c.head_dim * partial);
    if (partial != 1.0 && (c.rope_dim < 2 || c.rope_dim % 2 != 0))
        return attn__fail(ATTN_ERR_FORMAT, "config.json: partial_rotary_factor %g of head width %lld rotates %lld "
                          "widths: RoPE rotates pairs, so it must give an even number >= 2", partial,
                          (long long)c.head_dim, (long long)c.rope_dim);

    /* Which layers slide: layer_types when given, else the architecture's
     * rule; then the decoder's (window, pattern) that reproduces it. */
    int64_t pattern = a->sliding_pattern;
    for (int i = 0; i < 2; i++)
        if (a->hf_pattern_keys[i] && (st = json_int(root, a->hf_pattern_keys[i], 1, 4096, true, &pattern))) return st;
    int use_sliding = a->sliding_pattern > 0;
    if (a->hf_use_sliding_key && (st = json_bool(root, a->hf_use_sliding_key, &use_sliding))) return st;
    if (a->hf_use_sliding_key && use_sliding)
        return attn__fail(ATTN_ERR_UNSUPPORTED, "config.json: %s is true for %s (max_window_layers "
                          "is not run); only full attention layers are", a->hf_use_sliding_key, a->name);
    const cJSON *types = cJSON_GetObjectItemCaseSensitive(root, "layer_types");
    int64_t n_sliding = 0, first_global = -1;
    if (types && !cJSON_IsNull(types)) {
        if (!cJSON_IsArray(types) || cJSON_GetArraySize(types) != c.n_layers)
            return attn__fail(ATTN_ERR_FORMAT, "config.json: \"layer_types\" is not an array of %lld strings",
                              (long long)c.n_layers);
        int64_t l = 0;
        for (const cJSON *t = types->child; t; t = t->next, l++) {
            const bool full = cJSON_IsString(t) && strcmp(t->valuestring, "full_attention") == 0;
            const bool slide = cJSON_IsString(t) && strcmp(t->valuestring, "sliding_attention") == 0;
            if (!full && !slide)
                return attn__fail(ATTN_ERR_UNSUPPORTED, "config.json: layer_types[%lld] is not \"full_attention\" or "
                                  "\"sliding_attention\"", (long long)l);
            if (slide) n_sliding++;
            if (full && first_global < 0) first_global = l;
        }
        pattern = first_global < 0 ? 0 : first_global + 1;
        l = 0;
        for (const cJSON *t = types->child; t; t = t->next, l++)
            if (pattern_global(pattern, l) != (strcmp(t->valuestring, "full_attention") == 0) && n_sliding > 0)
                return attn__fail(ATTN_ERR_UNSUPPORTED, "config.json: layer_types is not a repeating pattern (every "
                                  "Nth layer full): layer %lld breaks it", (long long)l);
    } else if (use_sliding) {
        for (int64_t l = 0; l < c.n_layers; l++) n_sliding += !pattern_global(pattern, l);
    }
    if (n_sliding > 0) {
        if ((st = json_int(root, "sliding_window", 1, INT64_MAX / 2, false, &c.sliding_window))) return st;
        c.sliding_pattern = pattern;
    } else {
        c.sliding_window = 0;
        c.sliding_pattern = 0;
        c.rope_theta_local = c.rope_theta;
    }
    if (c.rope_theta_local == 0.0) c.rope_theta_local = c.rope_theta;
    c.rope_pairing = a->rope_pairing;

    c.attn_scale = (float)(1.0 / sqrt((double)c.head_dim));
    if (a->hf_scale_key) {
        double scalar = (double)c.head_dim;
        if ((st = json_positive(root, a->hf_scale_key, true, &scalar))) return st;
        c.attn_scale = (float)pow(scalar, -0.5);
    }
    for (int i = 0; i < 2; i++) {
        const cJSON *v = a->hf_softcap_keys[i] ? cJSON_GetObjectItemCaseSensitive(root, a->hf_softcap_keys[i]) : NULL;
        if (v && !cJSON_IsNull(v))
            return attn__fail(ATTN_ERR_UNSUPPORTED, "config.json: \"%s\" is set: softcapping is not run",
                              a->hf_softcap_keys[i]);
    }
    int bidirectional = 0;
    if (a->hf_bidirectional_key && (st = json_bool(root, a->hf_bidirectional_key, &bidirectional))) return st;
    if (bidirectional)
        return attn__fail(ATTN_ERR_UNSUPPORTED, "config.json: %s is true: the decoder is causal",
                          a->hf_bidirectional_key);
    c.embed_scale = a->scale_embeddings ? (float)sqrt((double)c.d_model) : 1.0f;
    c.qkv_bias = a->qkv_bias;
    c.qk_norm = a->qk_norm;
    c.post_norms = a->post_norms;
    c.tied_embeddings = a->tied_default;
    if ((st = json_bool(root, "tie_word_embeddings", &c.tied_embeddings))) return st;
    const char *bias_keys[] = {"attention_bias", "mlp_bias"};
    for (int i = 0; i < 2; i++) {
        int bias = 0;
        if ((st = json_bool(root, bias_keys[i], &bias))) return st;
        if (bias)
            return attn__fail(ATTN_ERR_UNSUPPORTED, "config.json: \"%s\" is true: the decoder has q/k/v biases "
                              "(qwen2) but no output or FFN biases", bias_keys[i]);
    }
    const char *act = NULL;
    if ((st = json_string(root, "hidden_activation", &act))) return st;
    if (!act && (st = json_string(root, "hidden_act", &act))) return st;
    c.activation = a->activation;
    if (act && !attn__arch_activation(act, &c.activation)) {
        char quoted[256], list[256];
        return attn__fail(ATTN_ERR_UNSUPPORTED, "config.json: activation '%s': %s are run",
                          attn__quote(act, strlen(act), quoted, sizeof quoted), attn__arch_activations(list, sizeof list));
    }
    if ((st = attn__decoder_check_config(&c, "config.json"))) return st;
    *cfg = c;
    return ATTN_OK;
}

attn_status attn_decoder_config_from_json(const char *json, size_t len, attn_decoder_config *cfg) {
    if (!json || !cfg)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_decoder_config_from_json: %s is NULL",
                          !json ? "json" : "cfg");
    if (memchr(json, 0, len)) return attn__fail(ATTN_ERR_FORMAT, "config.json holds a NUL byte");
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(json, len, &end, 0);
    if (!root) {
        const size_t at = end && end >= json && end <= json + len ? (size_t)(end - json) : 0;
        return attn__fail(ATTN_ERR_FORMAT, "config.json is not valid JSON (at byte %zu)", at);
    }
    attn_status st = attn__json_unique_keys(root, "config.json");
    if (!st) st = config_from_object(root, cfg);
    cJSON_Delete(root);
    return st;
}

/* --------------------------------------------------------------- weights */

/* Finds the tensor called name and checks its shape, [rows] (cols 0) or
 * [rows, cols].  Absent and optional: *found = 0. */
static attn_status find_tensor(const attn_safetensors *st, const char *name, int64_t rows, int64_t cols,
                               int optional, attn_safetensors_tensor *t, int *found) {
    *found = 0;
    if (optional && attn_safetensors_tensor_index(st, name) < 0) return ATTN_OK;
    attn_status status = attn_safetensors_find_tensor(st, name, t);
    if (status) return status;
    const int want_dims = cols ? 2 : 1;
    if (t->n_dims != want_dims || t->shape[0] != rows || (cols && t->shape[1] != cols)) {
        char shape[160] = "[";
        size_t n = 1;
        for (int d = 0; d < t->n_dims && n < sizeof shape - 24; d++)
            n += (size_t)snprintf(shape + n, sizeof shape - n, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
        snprintf(shape + n, sizeof shape - n, "]");
        if (cols)
            return attn__fail(ATTN_ERR_FORMAT, "tensor '%s' has shape %s, expected [%lld, %lld]", name, shape,
                              (long long)rows, (long long)cols);
        return attn__fail(ATTN_ERR_FORMAT, "tensor '%s' has shape %s, expected [%lld]", name, shape, (long long)rows);
    }
    *found = 1;
    return ATTN_OK;
}

/* The tensor t, rows x cols, converted into a new float32 array owned by
 * m and checked finite. */
static attn_status read_floats(const attn_safetensors *st, attn_decoder *m, const attn_safetensors_tensor *t,
                               int64_t rows, int64_t cols, float **out) {
    float *data = malloc((size_t)(t->n_elements ? t->n_elements : 1) * sizeof(float));
    if (!data)
        return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "tensor '%s': cannot allocate %lld floats", t->name,
                          (long long)t->n_elements);
    m->owned[m->n_owned++] = data;
    *out = data;
    attn_status status = attn_safetensors_read_f32(st, t, data);
    return status ? status : attn__decoder_check_finite(t->name, data, rows, cols);
}

/* A vector [rows] converted to float32, owned by m; plus_one adds 1 to
 * each element (Gemma's norms). */
static attn_status load_vector(const attn_safetensors *st, attn_decoder *m, const char *name, int64_t rows,
                               int plus_one, float **out) {
    *out = NULL;
    attn_safetensors_tensor t;
    int found;
    attn_status status = find_tensor(st, name, rows, 0, 0, &t, &found);
    if (status || (status = read_floats(st, m, &t, 1, rows, out))) return status;
    /* Hugging Face computes (1.0 + w.float()) in float32: the same rounding. */
    if (plus_one)
        for (int64_t i = 0; i < t.n_elements; i++) (*out)[i] = 1.0f + (*out)[i];
    return ATTN_OK;
}

/* A matrix [rows, cols] (PyTorch's [out, in]): a view of its F32, F16 or
 * BF16 elements where the checkpoint is mapped, or with ATTN_WEIGHTS_F32 a
 * float32 copy owned by m. */
static attn_status load_matrix(const attn_safetensors *st, attn_decoder *m, const char *name, int64_t rows,
                               int64_t cols, decoder_weight *w) {
    memset(w, 0, sizeof *w);
    attn_safetensors_tensor t;
    int found;
    attn_status status = find_tensor(st, name, rows, cols, 0, &t, &found);
    if (status) return status;
    if (m->opt.weights == ATTN_WEIGHTS_F32) {
        float *data = NULL;
        if ((status = read_floats(st, m, &t, rows, cols, &data))) return status;
        w->f32 = data;
        w->q = (attn_qtensor){.type = ATTN_QTYPE_F32, .rows = rows, .cols = cols, .data = data};
        m->weight_bytes += (uint64_t)t.n_elements * sizeof(float);
        return ATTN_OK;
    }
    const int type = t.dtype == ATTN_SAFETENSORS_F32    ? ATTN_QTYPE_F32
                     : t.dtype == ATTN_SAFETENSORS_F16  ? ATTN_QTYPE_F16
                     : t.dtype == ATTN_SAFETENSORS_BF16 ? ATTN_QTYPE_BF16
                                                        : -1;
    if (type < 0)
        return attn__fail(ATTN_ERR_UNSUPPORTED, "tensor '%s' has a dtype no matrix kernel takes (F32, F16 and BF16 "
                          "are)", name);
    w->q = (attn_qtensor){.type = type, .rows = rows, .cols = cols, .data = t.data};
    if ((status = attn_quant_check(&w->q))) return attn__fail(status, "tensor '%s': %s", name, attn_last_error());
    if ((status = attn__decoder_check_stored(name, &w->q))) return status;
    m->weight_bytes += t.n_bytes;
    return ATTN_OK;
}

static attn_status load_layer(const attn_safetensors *st, const decoder_arch *row, attn_decoder *m, int64_t l,
                              decoder_layer *w) {
    const attn_decoder_config *c = &m->cfg;
    const int64_t d = c->d_model, qw = c->n_heads * c->head_dim, kvw = c->n_kv_heads * c->head_dim, F = c->d_ffn;
    /* Each tensor's shape (cols 0: a vector; else a matrix); absent: the
     * architecture does not have it; norm: a norm's weights (1 + w where
     * the row says so).  Where it goes: attn__decoder_layer_slot. */
    const struct {
        int64_t rows, cols;
        int absent, norm;
    } table[] = {
        [ARCH_ATTN_NORM] = {d, 0, 0, 1},
        [ARCH_Q] = {qw, d, 0, 0},
        [ARCH_K] = {kvw, d, 0, 0},
        [ARCH_V] = {kvw, d, 0, 0},
        [ARCH_Q_BIAS] = {qw, 0, !c->qkv_bias, 0},
        [ARCH_K_BIAS] = {kvw, 0, !c->qkv_bias, 0},
        [ARCH_V_BIAS] = {kvw, 0, !c->qkv_bias, 0},
        [ARCH_Q_NORM] = {c->head_dim, 0, !c->qk_norm, 1},
        [ARCH_K_NORM] = {c->head_dim, 0, !c->qk_norm, 1},
        [ARCH_ATTN_OUT] = {d, qw, 0, 0},
        [ARCH_POST_ATTN_NORM] = {d, 0, !c->post_norms, 1},
        [ARCH_FFN_NORM] = {d, 0, 0, 1},
        [ARCH_FFN_GATE] = {F, d, 0, 0},
        [ARCH_FFN_UP] = {F, d, 0, 0},
        [ARCH_FFN_DOWN] = {d, F, 0, 0},
        [ARCH_POST_FFN_NORM] = {d, 0, !c->post_norms, 1},
    };
    _Static_assert(sizeof table / sizeof table[0] == DECODER_TENSORS_PER_LAYER, "one entry per tensor of a layer");
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        /* Tensors the architecture does not have are not read, even if a
         * checkpoint carries them (a pre_feedforward_layernorm in a llama
         * file would be an unknown extra, not a weight of this decoder). */
        if (table[i].absent || !row->hf->layer[i]) continue;
        char name[128];
        snprintf(name, sizeof name, "%s%lld.%s", row->hf->layer_prefix, (long long)l, row->hf->layer[i]);
        float **vec;
        decoder_weight *mat;
        attn__decoder_layer_slot(w, (int)i, &vec, &mat);
        attn_status status = mat ? load_matrix(st, m, name, table[i].rows, table[i].cols, mat)
                                 : load_vector(st, m, name, table[i].rows, row->hf_norm_plus_one && table[i].norm, vec);
        if (status) return status;
    }
    return ATTN_OK;
}

/* Every tensor of the checkpoint is read, but for a copy of a tied head
 * (transformers ties it anyway) and the RoPE tables older checkpoints saved
 * (rotary_emb.inv_freq, recomputed by transformers too); the rest are
 * refused by name. */
static attn_status check_unused(const attn_safetensors *st, const decoder_arch *row, const attn_decoder_config *c) {
    int used[ARCH_LAYER_TENSORS];
    for (int i = 0; i < ARCH_LAYER_TENSORS; i++) used[i] = 1;
    used[ARCH_Q_BIAS] = used[ARCH_K_BIAS] = used[ARCH_V_BIAS] = c->qkv_bias;
    used[ARCH_Q_NORM] = used[ARCH_K_NORM] = c->qk_norm;
    used[ARCH_POST_ATTN_NORM] = used[ARCH_POST_FFN_NORM] = c->post_norms;
    arch_unused u = {.last_layer = -1};
    for (int64_t i = 0; i < attn_safetensors_n_tensors(st); i++) {
        attn_safetensors_tensor t;
        attn_status status = attn_safetensors_tensor_at(st, i, &t);
        if (status) return status;
        const size_t n = strlen(t.name), tail = sizeof "rotary_emb.inv_freq" - 1;
        if (n >= tail && strcmp(t.name + n - tail, "rotary_emb.inv_freq") == 0) continue;
        attn__arch_tensor_note(row->hf, used, true, c->n_layers, t.name, &u);
    }
    return attn__arch_tensor_check(&u, "config.json's num_hidden_layers", c->n_layers);
}

/* config.json at path into a new NUL-free buffer parsed by cJSON. */
static attn_status read_config_file(const char *path, attn_decoder_config *cfg) {
    /* A configuration is a few KB. */
    void *map = NULL;
    size_t size = 0;
    attn_status st = file_map_regular(path, "model configurations", 64u << 20, "a config.json", &map, &size);
    if (st) return st;
    st = attn_decoder_config_from_json(map ? map : "", size, cfg);
    if (map) munmap(map, size);
    if (st) return attn__fail(st, "'%s': %s", path, attn_last_error());
    return ATTN_OK;
}

attn_status attn_decoder_config_from_checkpoint(const char *path, attn_decoder_config *cfg) {
    if (!path || !cfg)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_decoder_config_from_checkpoint: %s is NULL",
                          !path ? "path" : "cfg");
    /* config.json is in the directory, or beside the file. */
    struct stat sb;
    const bool is_dir = stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
    const char *slash = strrchr(path, '/');
    const size_t dir_len = is_dir ? strlen(path) : slash ? (size_t)(slash - path) : 0;
    char *config_path = malloc(dir_len + sizeof "/config.json");
    if (!config_path) return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "cannot copy a path");
    if (dir_len) {
        memcpy(config_path, path, dir_len);
        strcpy(config_path + dir_len, "/config.json");
    } else {
        strcpy(config_path, slash == path ? "/config.json" : "config.json");
    }
    attn_status st = read_config_file(config_path, cfg);
    free(config_path);
    return st;
}

attn_status attn_decoder_load_safetensors(const char *path, attn_decoder **out) {
    return attn_decoder_load_safetensors_with(path, NULL, out);
}

attn_status attn_decoder_load_safetensors_with(const char *path, const attn_decoder_options *opt,
                                               attn_decoder **out) {
    if (!path || !out)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_decoder_load_safetensors: %s is NULL",
                          !path ? "path" : "out");
    *out = NULL;
    attn_decoder_options o;
    attn_status st = attn__decoder_options(opt, &o, "attn_decoder_load_safetensors");
    if (st) return st;
    /* The weights first: a missing or bad checkpoint is then named as such,
     * not as a config.json that is not beside it. */
    attn_safetensors *weights = NULL;
    if ((st = attn_safetensors_open(path, &weights))) return st;
    attn_decoder_config cfg;
    attn_decoder *m = NULL;
    if ((st = attn_decoder_config_from_checkpoint(path, &cfg))) goto done;
    if ((st = attn__decoder_new(&cfg, &m))) goto done;
    m->opt = o;
    /* Stored weights are read where the checkpoint is mapped: the decoder
     * holds it. */
    if (o.weights == ATTN_WEIGHTS_STORED) {
        m->checkpoint = weights;
        weights = NULL;
    }
    const attn_safetensors *files = m->checkpoint ? m->checkpoint : weights;
    const decoder_arch *row = attn__arch_of(cfg.arch);
    const arch_tensor_names *names = row->hf;
    if ((st = load_matrix(files, m, names->embed, cfg.vocab, cfg.d_model, &m->token_embd)) ||
        (st = load_vector(files, m, names->output_norm, cfg.d_model, row->hf_norm_plus_one, &m->output_norm)))
        goto done;
    /* Tied: lm_head is the embedding (transformers ties it even when a
     * checkpoint carries a copy, so a copy is not read). */
    if (cfg.tied_embeddings)
        m->output = m->token_embd;
    else if ((st = load_matrix(files, m, names->output, cfg.vocab, cfg.d_model, &m->output)))
        goto done;
    for (int64_t l = 0; l < cfg.n_layers && !st; l++) st = load_layer(files, row, m, l, &m->layers[l]);
    if (!st) st = check_unused(files, row, &cfg);
done:
    attn_safetensors_free(weights);
    if (st) {
        attn_decoder_free(m);
        return st;
    }
    *out = m;
    return ATTN_OK;
}
