/*
 * decoder.c — a decoder's configuration from GGUF metadata, and its weights
 * as the file stores them (views of the mapping) or dequantized to float32
 * (ATTN_WEIGHTS_F32; attn_decoder.h).  What differs between
 * architectures — the tensors' names, which tensors a layer has, the
 * defaults llama.cpp fixes in code — is read from the architecture's row
 * (arch.c); the keys every architecture has are read here, under the row's
 * name ("qwen2.block_count").
 *
 * Gemma's norms: Hugging Face multiplies by (1 + w); llama.cpp's converter
 * stores 1 + w in the GGUF (and transformers' GGUF loader subtracts the 1
 * again), so here every norm multiplies by the stored weight as it is
 * (decoder_hf.c adds the 1 when it loads Hugging Face's own weights).
 *
 * Permuted Q and K (llama's row: gguf_permuted_qk): llama.cpp's converter
 * (convert_hf_to_gguf.py, LlamaModel.permute) reorders each head's rows of
 * attn_q and attn_k so that ggml's interleaved RoPE (pairs (2i, 2i+1))
 * computes what Hugging Face's rotate-half RoPE (pairs (i, i + Dh/2))
 * computes on the original rows.  The loader undoes that permutation
 * (unpermute_heads), so that q and k, and every hook on them, equal Hugging
 * Face's and one RoPE (NEOX pairing) serves every architecture.  qwen2,
 * qwen3 and gemma3 files are not permuted (their converters say so).
 */
#include "model/decoder.h"

#include "attn_safetensors.h"
#include "formats/gguf.h"
#include "formats/quote.h"
#include "model/arch.h"

#include <math.h>
#include <stdlib.h>

/* "ARCH.suffix" into buf. */
static const char *arch_key(char *buf, size_t size, const char *arch, const char *suffix) {
    snprintf(buf, size, "%s.%s", arch, suffix);
    return buf;
}

static attn_status key_i64(const attn_gguf *g, const char *arch, const char *suffix, int64_t *out) {
    char key[128];
    uint32_t v;
    attn_status st = attn_gguf_get_u32(g, arch_key(key, sizeof key, arch, suffix), &v);
    if (st) return st;
    if (v == 0) return attn__fail(ATTN_ERR_FORMAT, "key '%s' is 0", key);
    *out = v;
    return ATTN_OK;
}

/* An optional key: *out unchanged when it is absent. */
static attn_status key_i64_optional(const attn_gguf *g, const char *arch, const char *suffix, int64_t *out) {
    char key[128];
    if (attn_gguf_key_index(g, arch_key(key, sizeof key, arch, suffix)) < 0) return ATTN_OK;
    return key_i64(g, arch, suffix, out);
}

static attn_status key_f64(const attn_gguf *g, const char *arch, const char *suffix, double *out) {
    char key[128];
    attn_status st = attn_gguf_get_f64(g, arch_key(key, sizeof key, arch, suffix), out);
    if (st) return st;
    if (!(*out > 0.0) || !isfinite(*out))
        return attn__fail(ATTN_ERR_FORMAT, "key '%s' is %g: it must be positive", key, *out);
    return ATTN_OK;
}

/* ARCH.rope.scaling.type and its factor (llama.cpp's names), or the older
 * ARCH.rope.scale_linear.  Only linear scaling is read from GGUF: llama.cpp's
 * YaRN keys (ext/attn factors, beta_fast/slow) follow its own conventions,
 * which no reference here checks, so they are refused rather than guessed;
 * per-frequency factors (a rope_freqs.weight tensor, Llama 3.1's llama3
 * scaling as llama.cpp stores it) likewise. */
static attn_status read_rope_scaling(const attn_gguf *g, const decoder_arch *row, attn_decoder_config *c) {
    const char *arch = row->name;
    char key[128];
    attn_status st;
    if (row->gguf->rope_freqs && attn_gguf_tensor_index(g, row->gguf->rope_freqs) >= 0)
        return attn__fail(ATTN_ERR_UNSUPPORTED, "tensor '%s' (per-frequency RoPE factors, e.g. "
                          "Llama 3.1's llama3 scaling) is not applied by the decoder: run the model's "
                          "safetensors checkpoint (its config.json names the scaling)", row->gguf->rope_freqs);
    const char *type = "none";
    size_t len = 4;
    if (attn_gguf_key_index(g, arch_key(key, sizeof key, arch, "rope.scaling.type")) >= 0 &&
        (st = attn_gguf_get_string(g, key, &type, &len)))
        return st;
    if (len == 4 && memcmp(type, "none", 4) == 0) {
        double scale = 1.0;
        if (attn_gguf_key_index(g, arch_key(key, sizeof key, arch, "rope.scale_linear")) >= 0 &&
            (st = key_f64(g, arch, "rope.scale_linear", &scale)))
            return st;
        if (scale != 1.0) {
            c->rope_scaling = ATTN_ROPE_SCALING_LINEAR;
            c->rope_factor = scale;
        }
        return ATTN_OK;
    }
    if (len == 6 && memcmp(type, "linear", 6) == 0) {
        c->rope_scaling = ATTN_ROPE_SCALING_LINEAR;
        return key_f64(g, arch, "rope.scaling.factor", &c->rope_factor);
    }
    char quoted[256];
    return attn__fail(ATTN_ERR_UNSUPPORTED, "key '%s' is '%s': the decoder runs GGUF files with no RoPE scaling or "
                      "linear scaling (for yarn, run the safetensors checkpoint: its config.json is read)",
                      key, attn__quote(type, len, quoted, sizeof quoted));
}

attn_status attn_decoder_read_config(const attn_gguf *g, attn_decoder_config *cfg) {
    if (!g || !cfg)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_decoder_read_config: %s is NULL", !g ? "g" : "cfg");
    const char *name;
    size_t len;
    attn_status st = attn_gguf_get_string(g, "general.architecture", &name, &len);
    if (st) return st;
    const decoder_arch *t = attn__arch_by_name(name, len);
    if (!t) {
        char list[256];
        return attn__fail(ATTN_ERR_UNSUPPORTED, "general.architecture is '%.*s': the decoder runs %s",
                          (int)(len > 64 ? 64 : len), name, attn__arch_list(false, list, sizeof list));
    }
    attn_decoder_config c;
    memset(&c, 0, sizeof c);
    c.arch = t->arch;
    c.architecture = t->name;
    if ((st = key_i64(g, t->name, "block_count", &c.n_layers)) ||
        (st = key_i64(g, t->name, "embedding_length", &c.d_model)) ||
        (st = key_i64(g, t->name, "feed_forward_length", &c.d_ffn)) ||
        (st = key_i64(g, t->name, "attention.head_count", &c.n_heads)) ||
        (st = key_f64(g, t->name, "attention.layer_norm_rms_epsilon", &c.rms_eps)))
        return st;
    /* llama.cpp's default when a file does not say (older llama files). */
    c.rope_theta = t->gguf_rope_theta;
    char theta_key[128];
    if (attn_gguf_key_index(g, arch_key(theta_key, sizeof theta_key, t->name, "rope.freq_base")) >= 0 &&
        (st = key_f64(g, t->name, "rope.freq_base", &c.rope_theta)))
        return st;
    c.n_kv_heads = c.n_heads;
    if ((st = key_i64_optional(g, t->name, "attention.head_count_kv", &c.n_kv_heads))) return st;
    if (c.n_heads % c.n_kv_heads != 0)
        return attn__fail(ATTN_ERR_FORMAT, "%s.attention.head_count %lld is not a multiple of head_count_kv %lld",
                          t->name, (long long)c.n_heads, (long long)c.n_kv_heads);
    c.head_dim = 0;
    if ((st = key_i64_optional(g, t->name, "attention.key_length", &c.head_dim))) return st;
    if (c.head_dim == 0) {
        if (c.d_model % c.n_heads != 0)
            return attn__fail(ATTN_ERR_FORMAT,
                              "no key '%s.attention.key_length', and embedding_length %lld is not a multiple of "
                              "head_count %lld",
                              t->name, (long long)c.d_model, (long long)c.n_heads);
        c.head_dim = c.d_model / c.n_heads;
    }
    int64_t value_length = c.head_dim;
    if ((st = key_i64_optional(g, t->name, "attention.value_length", &value_length))) return st;
    if (value_length != c.head_dim)
        return attn__fail(ATTN_ERR_UNSUPPORTED, "%s.attention.value_length %lld differs from key_length %lld",
                          t->name, (long long)value_length, (long long)c.head_dim);
    if (c.head_dim % 2 != 0)
        return attn__fail(ATTN_ERR_FORMAT, "head width %lld is odd: RoPE rotates pairs", (long long)c.head_dim);
    if ((st = key_i64_optional(g, t->name, "attention.sliding_window", &c.sliding_window))) return st;
    c.sliding_pattern = c.sliding_window ? t->sliding_pattern : 0;
    c.rope_theta_local = t->rope_theta_local > 0.0 && c.sliding_window ? t->rope_theta_local : c.rope_theta;
    c.rope_pairing = t->rope_pairing;
    c.rope_scale_local = t->rope_theta_local == 0.0;
    if ((st = read_rope_scaling(g, t, &c))) return st;
    if ((st = key_i64_optional(g, t->name, "context_length", &c.context_length))) return st;
    /* Partial rotary: the first rope.dimension_count widths of each head. */
    c.rope_dim = c.head_dim;
    if ((st = key_i64_optional(g, t->name, "rope.dimension_count", &c.rope_dim))) return st;
    if (c.rope_dim > c.head_dim || c.rope_dim % 2 != 0)
        return attn__fail(ATTN_ERR_FORMAT, "key '%s.rope.dimension_count' is %lld: RoPE rotates an even number of "
                          "widths of a head, at most its %lld", t->name, (long long)c.rope_dim, (long long)c.head_dim);
    c.attn_scale = (float)(1.0 / sqrt((double)c.head_dim));
    c.embed_scale = t->scale_embeddings ? (float)sqrt((double)c.d_model) : 1.0f;
    c.qkv_bias = t->qkv_bias;
    c.qk_norm = t->qk_norm;
    c.post_norms = t->post_norms;
    c.activation = t->activation;
    attn_gguf_tensor embd;
    if ((st = attn_gguf_find_tensor(g, t->gguf->embed, &embd))) return st;
    if (embd.n_dims != 2 || embd.dims[0] != c.d_model)
        return attn__fail(ATTN_ERR_FORMAT, "tensor '%s' has dims [%lld, %lld], expected [%lld, vocabulary]",
                          t->gguf->embed, (long long)embd.dims[0], (long long)embd.dims[1], (long long)c.d_model);
    c.vocab = embd.dims[1];
    c.tied_embeddings = attn_gguf_tensor_index(g, t->gguf->output) < 0;
    if ((st = attn__decoder_check_config(&c, "the GGUF metadata"))) return st;
    *cfg = c;
    return ATTN_OK;
}

attn_status attn__decoder_check_config(const attn_decoder_config *c, const char *what) {
    const struct {
        const char *name;
        int64_t value;
    } counts[] = {{"layers", c->n_layers}, {"d_model", c->d_model},  {"d_ffn", c->d_ffn},
                  {"heads", c->n_heads},   {"kv heads", c->n_kv_heads}, {"head width", c->head_dim},
                  {"vocabulary", c->vocab}};
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++)
        if (counts[i].value <= 0)
            return attn__fail(ATTN_ERR_FORMAT, "%s: %s is %lld: it must be positive", what, counts[i].name,
                              (long long)counts[i].value);
    if (c->n_heads % c->n_kv_heads != 0)
        return attn__fail(ATTN_ERR_FORMAT, "%s: %lld heads are not a multiple of %lld kv heads", what,
                          (long long)c->n_heads, (long long)c->n_kv_heads);
    if (c->head_dim % 2 != 0)
        return attn__fail(ATTN_ERR_FORMAT, "%s: head width %lld is odd: RoPE rotates pairs", what,
                          (long long)c->head_dim);
    /* The numbers as the forward uses them: a scale computed from a huge or
     * tiny query_pre_attn_scalar can round to 0 or infinity in float32. */
    if (!(c->attn_scale > 0.0f) || !isfinite(c->attn_scale))
        return attn__fail(ATTN_ERR_FORMAT, "%s: the attention scale is %g in float32 (from the head width or "
                          "query_pre_attn_scalar): it must be positive and finite", what, (double)c->attn_scale);
    if (!(c->rms_eps > 0.0) || !isfinite(c->rms_eps) || !(c->rope_theta > 0.0) || !isfinite(c->rope_theta) ||
        !(c->rope_theta_local > 0.0) || !isfinite(c->rope_theta_local))
        return attn__fail(ATTN_ERR_FORMAT, "%s: RMSNorm epsilon %g, RoPE theta %g and local theta %g must be "
                          "positive and finite", what, c->rms_eps, c->rope_theta, c->rope_theta_local);
    if (c->rope_dim < 0 || c->rope_dim > c->head_dim || c->rope_dim % 2 != 0)
        return attn__fail(ATTN_ERR_FORMAT, "%s: RoPE rotates %lld widths of each head: it must be an even number "
                          "in [2, %lld] (the head width), or 0 for all of them", what, (long long)c->rope_dim, (long long)c->head_dim);
    if (c->context_length < 0)
        return attn__fail(ATTN_ERR_FORMAT, "%s: the context length %lld is negative", what,
                          (long long)c->context_length);
    if (c->rope_scaling != ATTN_ROPE_SCALING_NONE && c->rope_scaling != ATTN_ROPE_SCALING_LINEAR &&
        c->rope_scaling != ATTN_ROPE_SCALING_YARN && c->rope_scaling != ATTN_ROPE_SCALING_LLAMA3)
        return attn__fail(ATTN_ERR_UNSUPPORTED, "%s: RoPE scaling %d is not run by the decoder (linear, yarn and "
                          "llama3 are)", what, (int)c->rope_scaling);
    if (c->rope_scaling != ATTN_ROPE_SCALING_NONE && c->head_dim <= 4096) {
        /* The tables the forward will use, computed once here (a global and,
         * where there are any, a local layer), so that a bad factor is
         * refused when the model is opened, not at its first token. */
        double *inv_freq = malloc((size_t)c->head_dim / 2 * sizeof *inv_freq);
        if (!inv_freq) return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", what);
        attn_status st = ATTN_OK;
        for (int64_t l = 0; l < c->n_layers && l < 8 && !st; l++) {
            attn_rope_options rope;
            attn_decoder_rope_options(c, l, &rope);
            if ((st = attn_rope_frequencies(c->head_dim, &rope, inv_freq, NULL)))
                st = attn__fail(st, "%s: RoPE scaling: %s", what, attn_last_error());
        }
        free(inv_freq);
        if (st) return st;
    }
    /* Each product a weight's element count, whose float32 bytes must fit
     * too; the forward's scratch checks its own products with L. */
    int64_t q_width, q_elems, embd, ffn;
    const bool overflow = mul_overflows(c->n_heads, c->head_dim, &q_width) ||
                          mul_overflows(q_width, c->d_model, &q_elems) || mul_overflows(c->vocab, c->d_model, &embd) ||
                          mul_overflows(c->d_ffn, c->d_model, &ffn);
    if (overflow || q_elems > INT64_MAX / 8 || embd > INT64_MAX / 8 || ffn > INT64_MAX / 8 || c->n_layers > 4096)
        return attn__fail(ATTN_ERR_OVERFLOW, "%s: the model's sizes overflow (or exceed 4096 layers)", what);
    return ATTN_OK;
}

int64_t attn_decoder_context_limit(const attn_decoder_config *c) {
    if (!c || c->context_length <= 0) return 0;
    int64_t limit = c->context_length;
    if (c->rope_scaling != ATTN_ROPE_SCALING_NONE && c->rope_factor > 1.0) {
        const int64_t trained = c->rope_original_context > 0 ? c->rope_original_context : c->context_length;
        const double extended = (double)trained * c->rope_factor;
        if (extended > (double)limit) limit = extended < 9e18 ? (int64_t)extended : INT64_MAX;
    }
    return limit;
}

attn_status attn_decoder_check_context(const attn_decoder_config *c, int64_t n_prompt, int64_t n_new,
                                       int allow_beyond, int *beyond) {
    if (beyond) *beyond = 0;
    if (!c) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_decoder_check_context: cfg is NULL");
    if (n_prompt < 0 || n_new < 0 || n_new > INT64_MAX - n_prompt)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_decoder_check_context: %lld prompt and %lld new tokens",
                          (long long)n_prompt, (long long)n_new);
    const int64_t limit = attn_decoder_context_limit(c), total = n_prompt + n_new;
    if (limit == 0 || total <= limit) return ATTN_OK;
    const attn_status st = attn__fail(ATTN_ERR_SHAPE, "%lld prompt tokens + %lld new ones = %lld positions, beyond "
                                      "the model's context of %lld%s", (long long)n_prompt, (long long)n_new,
                                      (long long)total, (long long)limit,
                                      allow_beyond ? ": the positions past it were never trained, expect degraded "
                                                     "output" : "");
    if (!allow_beyond) return st;
    if (beyond) *beyond = 1;
    return ATTN_OK;
}

attn_status attn__decoder_new(const attn_decoder_config *cfg, attn_decoder **out) {
    *out = NULL;
    attn_decoder *m = calloc(1, sizeof *m);
    if (!m) return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "cannot allocate the decoder");
    m->cfg = *cfg;
    m->layers = calloc((size_t)cfg->n_layers, sizeof *m->layers);
    m->owned = calloc((size_t)(cfg->n_layers * DECODER_TENSORS_PER_LAYER + DECODER_TENSORS_OUTSIDE), sizeof *m->owned);
    if (!m->layers || !m->owned) {
        attn_decoder_free(m);
        return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "cannot allocate %lld layers", (long long)cfg->n_layers);
    }
    *out = m;
    return ATTN_OK;
}

int attn_decoder_layer_is_local(const attn_decoder_config *cfg, int64_t layer) {
    if (!cfg || cfg->sliding_window <= 0) return 0;
    return cfg->sliding_pattern <= 0 || (layer + 1) % cfg->sliding_pattern != 0;
}

void attn_decoder_rope_options(const attn_decoder_config *c, int64_t layer, attn_rope_options *opt) {
    attn_rope_options o = ATTN_ROPE_OPTIONS_INIT;
    const int local = attn_decoder_layer_is_local(c, layer);
    o.pairing = c->rope_pairing;
    o.theta = local ? c->rope_theta_local : c->rope_theta;
    o.rotary_dim = c->rope_dim; /* 0: the whole head */
    if (!local || c->rope_scale_local) {
        o.scaling = c->rope_scaling;
        o.factor = c->rope_factor;
        o.original_max_position_embeddings = c->rope_original_context;
        o.beta_fast = c->rope_beta_fast;
        o.beta_slow = c->rope_beta_slow;
        o.mscale = c->rope_mscale;
        o.mscale_all_dim = c->rope_mscale_all_dim;
        o.yarn_no_truncate = c->rope_yarn_no_truncate;
        o.low_freq_factor = c->rope_low_freq_factor;
        o.high_freq_factor = c->rope_high_freq_factor;
        o.attention_factor = c->rope_attention_factor;
    }
    *opt = o;
}

attn_status attn__decoder_rope_new(const attn_decoder *m, decoder_rope *r) {
    const attn_decoder_config *c = &m->cfg;
    r->global = r->local = NULL;
    /* The first layer of each kind gives that kind's options: they depend
     * on nothing else (attn_decoder_rope_options). */
    for (int64_t l = 0; l < c->n_layers; l++) {
        attn_rope_table **slot = attn_decoder_layer_is_local(c, l) ? &r->local : &r->global;
        if (*slot) continue;
        attn_rope_options opt;
        attn_decoder_rope_options(c, l, &opt);
        attn_status st = attn_rope_table_new(c->head_dim, &opt, slot);
        if (st) {
            attn__decoder_rope_free(r);
            return st;
        }
    }
    return ATTN_OK;
}

attn_status attn__decoder_rope_reserve(decoder_rope *r, int64_t n) {
    attn_status st = ATTN_OK;
    if (r->global) st = attn_rope_table_reserve(r->global, n);
    if (!st && r->local) st = attn_rope_table_reserve(r->local, n);
    return st;
}

void attn__decoder_rope_free(decoder_rope *r) {
    attn_rope_table_free(r->global);
    attn_rope_table_free(r->local);
    r->global = r->local = NULL;
}

/* The refusal of weights holding value (NaN or an infinity) at row r,
 * column col, count of them from that row on. */
static attn_status nonfinite_refusal(const char *name, float value, int64_t r, int64_t col, int64_t count) {
    return attn__fail(ATTN_ERR_FORMAT, "tensor '%s' holds %s at row %lld, column %lld (%lld non-finite value%s "
                      "from that row on): the file's weights are damaged", name, isnan(value) ? "NaN" :
                      value > 0 ? "+inf" : "-inf", (long long)r, (long long)col, (long long)count,
                      count == 1 ? "" : "s");
}

attn_status attn__decoder_check_finite(const char *name, const float *data, int64_t rows, int64_t cols) {
    /* An exponent of all ones is NaN or an infinity: one mask test per
     * float, OR-ed over a row so that the loop vectorizes. */
    for (int64_t r = 0; r < rows; r++) {
        const float *row = data + r * cols;
        uint32_t any = 0;
        for (int64_t i = 0; i < cols; i++) {
            uint32_t bits;
            memcpy(&bits, &row[i], sizeof bits);
            any |= (uint32_t)((bits & 0x7f800000u) == 0x7f800000u);
        }
        if (!any) continue;
        int64_t first = 0, count = 0;
        while (isfinite(row[first])) first++;
        for (int64_t i = r * cols; i < rows * cols; i++) count += !isfinite(data[i]);
        return nonfinite_refusal(name, row[first], r, first, count);
    }
    return ATTN_OK;
}

attn_status attn__decoder_check_stored(const char *name, const attn_qtensor *w) {
    int64_t r, c;
    attn_status found = attn_quant_check_finite(w, &r, &c);
    if (found != ATTN_ERR_NONFINITE) return found;
    /* Found: the rows from r on, converted one at a time, say where and
     * how many, in the words of the float32 scan (a block's NaN or
     * infinite scale makes its values so). */
    float *row = malloc((size_t)(w->cols ? w->cols : 1) * sizeof *row);
    if (!row) return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "tensor '%s': cannot allocate a row", name);
    int64_t first = -1, count = 0;
    float value = NAN; /* (the row converted below says which) */
    for (int64_t k = r; k < w->rows; k++) {
        attn_status st = attn_quant_dequantize_rows(w, k, 1, row);
        if (st) {
            free(row);
            return st;
        }
        for (int64_t i = 0; i < w->cols; i++)
            if (!isfinite(row[i])) {
                if (first < 0) first = i, value = row[i];
                count++;
            }
    }
    free(row);
    return nonfinite_refusal(name, value, r, first < 0 ? c : first, count ? count : 1);
}

/* Finds the tensor called name and checks it has dims [d0, d1] (d1 1 for a
 * vector).  Absent and optional: *found = 0. */
static attn_status find_tensor(const attn_gguf *g, const char *name, int64_t d0, int64_t d1, int optional,
                               attn_gguf_tensor *t, int *found) {
    *found = 0;
    if (optional && attn_gguf_tensor_index(g, name) < 0) return ATTN_OK;
    attn_status st = attn_gguf_find_tensor(g, name, t);
    if (st) return st;
    if (t->dims[0] != d0 || t->dims[1] != d1 || t->n_dims > 2)
        return attn__fail(ATTN_ERR_FORMAT, "tensor '%s' has dims [%lld, %lld, %lld, %lld], expected [%lld, %lld]", name,
                          (long long)t->dims[0], (long long)t->dims[1], (long long)t->dims[2],
                          (long long)t->dims[3], (long long)d0, (long long)d1);
    *found = 1;
    return ATTN_OK;
}

/* A new float32 array of n elements owned by m. */
static attn_status own_floats(attn_decoder *m, const char *name, int64_t n, float **out) {
    float *data = malloc((size_t)(n ? n : 1) * sizeof(float));
    if (!data)
        return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "tensor '%s': cannot allocate %lld floats", name, (long long)n);
    m->owned[m->n_owned++] = data;
    *out = data;
    return ATTN_OK;
}

/* A vector (a norm's or a bias's weights) [d0], dequantized to float32
 * into an array owned by m.  Absent and optional: *out = NULL. */
static attn_status load_vector(const attn_gguf *g, attn_decoder *m, const char *name, int64_t d0, int optional,
                               float **out) {
    *out = NULL;
    attn_gguf_tensor t;
    int found;
    attn_status st = find_tensor(g, name, d0, 1, optional, &t, &found);
    if (st || !found) return st;
    float *data = NULL;
    if ((st = own_floats(m, name, t.n_elements, &data)) || (st = attn_gguf_dequantize_rows(g, &t, 0, t.n_rows, data)) ||
        (st = attn__decoder_check_finite(name, data, t.n_rows, t.dims[0])))
        return st;
    *out = data;
    return ATTN_OK;
}

/* A matrix W [d_out, d_in] (GGUF dims [d_in, d_out]): a view of its stored
 * rows, whose type a kernel must take (attn_quant_check), or with
 * ATTN_WEIGHTS_F32 a float32 copy owned by m.  Absent and optional: w->q.data
 * and w->f32 NULL, *found 0. */
static attn_status load_matrix(const attn_gguf *g, attn_decoder *m, const char *name, int64_t d_in, int64_t d_out,
                               int optional, decoder_weight *w, int *found) {
    memset(w, 0, sizeof *w);
    attn_gguf_tensor t;
    attn_status st = find_tensor(g, name, d_in, d_out, optional, &t, found);
    if (st || !*found) return st;
    if (m->opt.weights == ATTN_WEIGHTS_F32) {
        float *data = NULL;
        if ((st = own_floats(m, name, t.n_elements, &data)) ||
            (st = attn_gguf_dequantize_rows(g, &t, 0, t.n_rows, data)) ||
            (st = attn__decoder_check_finite(name, data, t.n_rows, t.dims[0])))
            return st;
        w->f32 = data;
        w->q = (attn_qtensor){.type = ATTN_QTYPE_F32, .rows = d_out, .cols = d_in, .data = data};
        m->weight_bytes += (uint64_t)t.n_elements * sizeof(float);
        return ATTN_OK;
    }
    if (!attn_quant_type_name((int)t.type))
        return attn__fail(ATTN_ERR_UNSUPPORTED, "tensor '%s' is stored as %s, which no matrix kernel takes "
                          "(attn_quant.h: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K)",
                          name, attn_gguf_type_name(t.type) ? attn_gguf_type_name(t.type) : "an unknown type");
    w->q = (attn_qtensor){.type = (int)t.type, .rows = d_out, .cols = d_in, .data = t.data,
                          .row_stride = (size_t)t.row_bytes};
    if ((st = attn_quant_check(&w->q))) return attn__fail(st, "tensor '%s': %s", name, attn_last_error());
    if ((st = attn__decoder_check_stored(name, &w->q))) return st;
    m->weight_bytes += t.n_bytes;
    return ATTN_OK;
}

/* Undoes llama.cpp's permutation of one projection's rows, w [H*Dh rows
 * of row_bytes each]: its converter wrote, for each head, HF row
 * half*(Dh/2) + i as GGUF row 2*i + half (reshape(H, 2, Dh/2,
 * d_in).swapaxes(1, 2)).  Rows are moved whole, in whatever type they are
 * stored; a stored view is first copied into memory owned by m. */
static attn_status unpermute_heads(attn_decoder *m, decoder_weight *w, int64_t n_heads, int64_t head_dim) {
    const size_t row_bytes = w->q.row_stride ? w->q.row_stride : (size_t)w->q.cols * sizeof(float);
    const int64_t half = head_dim / 2;
    char *rows = (char *)w->f32;
    if (!rows) {
        if (!(rows = malloc((size_t)w->q.rows * row_bytes)))
            return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "cannot allocate a projection's rows to un-permute");
        m->owned[m->n_owned++] = rows;
        memcpy(rows, w->q.data, (size_t)w->q.rows * row_bytes);
        w->q.data = rows;
    }
    char *head = malloc((size_t)head_dim * row_bytes);
    if (!head) return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "cannot allocate a head's rows to un-permute");
    for (int64_t h = 0; h < n_heads; h++) {
        char *w_h = rows + (size_t)(h * head_dim) * row_bytes;
        memcpy(head, w_h, (size_t)head_dim * row_bytes);
        for (int64_t i = 0; i < half; i++)
            for (int64_t part = 0; part < 2; part++)
                memcpy(w_h + (size_t)(part * half + i) * row_bytes, head + (size_t)(2 * i + part) * row_bytes,
                       row_bytes);
    }
    free(head);
    return ATTN_OK;
}

void attn__decoder_layer_slot(decoder_layer *w, int i, float ***vec, decoder_weight **mat) {
    *vec = NULL;
    *mat = NULL;
    switch ((arch_layer_tensor)i) {
    case ARCH_ATTN_NORM: *vec = &w->attn_norm; break;
    case ARCH_Q: *mat = &w->wq; break;
    case ARCH_K: *mat = &w->wk; break;
    case ARCH_V: *mat = &w->wv; break;
    case ARCH_Q_BIAS: *vec = &w->bq; break;
    case ARCH_K_BIAS: *vec = &w->bk; break;
    case ARCH_V_BIAS: *vec = &w->bv; break;
    case ARCH_Q_NORM: *vec = &w->q_norm; break;
    case ARCH_K_NORM: *vec = &w->k_norm; break;
    case ARCH_ATTN_OUT: *mat = &w->wo; break;
    case ARCH_POST_ATTN_NORM: *vec = &w->post_attn_norm; break;
    case ARCH_FFN_NORM: *vec = &w->ffn_norm; break;
    case ARCH_FFN_GATE: *mat = &w->w_gate; break;
    case ARCH_FFN_UP: *mat = &w->w_up; break;
    case ARCH_FFN_DOWN: *mat = &w->w_down; break;
    case ARCH_POST_FFN_NORM: *vec = &w->post_ffn_norm; break;
    case ARCH_LAYER_TENSORS: break;
    }
}

static attn_status load_layer(const attn_gguf *g, const decoder_arch *row, attn_decoder *m, int64_t l,
                              decoder_layer *w) {
    const attn_decoder_config *c = &m->cfg;
    const int64_t d = c->d_model, q_width = c->n_heads * c->head_dim, kv_width = c->n_kv_heads * c->head_dim;
    const int bias_missing_ok = !c->qkv_bias, qk_missing_ok = !c->qk_norm, post_missing_ok = !c->post_norms;
    /* Each tensor's GGUF dims; optional: absent is allowed (present, it is
     * read and used, whatever the architecture).  Where it goes:
     * attn__decoder_layer_slot. */
    const struct {
        int64_t d0, d1;
        int optional;
    } table[] = {
        [ARCH_ATTN_NORM] = {d, 1, 0},
        [ARCH_Q] = {d, q_width, 0},
        [ARCH_K] = {d, kv_width, 0},
        [ARCH_V] = {d, kv_width, 0},
        [ARCH_Q_BIAS] = {q_width, 1, bias_missing_ok},
        [ARCH_K_BIAS] = {kv_width, 1, bias_missing_ok},
        [ARCH_V_BIAS] = {kv_width, 1, bias_missing_ok},
        [ARCH_Q_NORM] = {c->head_dim, 1, qk_missing_ok},
        [ARCH_K_NORM] = {c->head_dim, 1, qk_missing_ok},
        [ARCH_ATTN_OUT] = {q_width, d, 0},
        [ARCH_POST_ATTN_NORM] = {d, 1, post_missing_ok},
        [ARCH_FFN_NORM] = {d, 1, 0},
        [ARCH_FFN_GATE] = {d, c->d_ffn, 0},
        [ARCH_FFN_UP] = {d, c->d_ffn, 0},
        [ARCH_FFN_DOWN] = {c->d_ffn, d, 0},
        [ARCH_POST_FFN_NORM] = {d, 1, post_missing_ok},
    };
    _Static_assert(sizeof table / sizeof table[0] == DECODER_TENSORS_PER_LAYER, "one entry per tensor of a layer");
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        const char *suffix = row->gguf->layer[i];
        if (!suffix) continue;
        char name[96];
        snprintf(name, sizeof name, "%s%lld.%s", row->gguf->layer_prefix, (long long)l, suffix);
        int found;
        float **vec;
        decoder_weight *mat;
        attn__decoder_layer_slot(w, (int)i, &vec, &mat);
        attn_status st = mat ? load_matrix(g, m, name, table[i].d0, table[i].d1, table[i].optional, mat, &found)
                             : load_vector(g, m, name, table[i].d0, table[i].optional, vec);
        if (st) return st;
    }
    if (row->gguf_permuted_qk) {
        attn_status st = unpermute_heads(m, &w->wq, c->n_heads, c->head_dim);
        if (!st) st = unpermute_heads(m, &w->wk, c->n_kv_heads, c->head_dim);
        if (st) return st;
    }
    return ATTN_OK;
}

/* Every tensor of the file is read: a layer reads each of its row's
 * tensors that the file has (load_layer), the rest are refused by name. */
static attn_status check_unused(const attn_gguf *g, const decoder_arch *row, int64_t n_layers) {
    int used[ARCH_LAYER_TENSORS];
    for (int i = 0; i < ARCH_LAYER_TENSORS; i++) used[i] = 1;
    arch_unused u = {.last_layer = -1};
    attn_gguf_info info;
    attn_gguf_describe(g, &info);
    for (int64_t i = 0; i < info.n_tensors; i++) {
        attn_gguf_tensor t;
        attn_status st = attn_gguf_tensor_at(g, i, &t);
        if (st) return st;
        attn__arch_tensor_note(row->gguf, used, true, n_layers, t.name, &u);
    }
    char key[128];
    return attn__arch_tensor_check(&u, arch_key(key, sizeof key, row->name, "block_count"), n_layers);
}

attn_status attn__decoder_options(const attn_decoder_options *caller, attn_decoder_options *out, const char *fn) {
    static const attn_decoder_options defaults = ATTN_DECODER_OPTIONS_INIT;
    attn_status st = options_copy(out, sizeof *out, &defaults, caller ? caller : &defaults, "attn_decoder_options");
    if (st) return attn__fail(st, "%s: %s", fn, attn_last_error());
    if (out->weights != ATTN_WEIGHTS_STORED && out->weights != ATTN_WEIGHTS_F32)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "%s: weights is %d: ATTN_WEIGHTS_STORED (0) or ATTN_WEIGHTS_F32 (1)",
                          fn, (int)out->weights);
    if (out->precision != ATTN_PRECISION_EXACT && out->precision != ATTN_PRECISION_FAST)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "%s: precision is %d: ATTN_PRECISION_EXACT (0) or _FAST (1)", fn,
                          (int)out->precision);
    return ATTN_OK;
}

attn_status attn_decoder_load(const attn_gguf *g, attn_decoder **out) { return attn_decoder_load_with(g, NULL, out); }

attn_status attn_decoder_load_with(const attn_gguf *g, const attn_decoder_options *opt, attn_decoder **out) {
    if (!g || !out) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_decoder_load: %s is NULL", !g ? "g" : "out");
    *out = NULL;
    attn_decoder_options o;
    attn_status st = attn__decoder_options(opt, &o, "attn_decoder_load");
    if (st) return st;
    attn_decoder_config cfg;
    if ((st = attn_decoder_read_config(g, &cfg))) return st;
    const decoder_arch *row = attn__arch_of(cfg.arch);
    attn_decoder *m;
    if ((st = attn__decoder_new(&cfg, &m))) return st;
    m->opt = o;
    /* Stored weights read the file where it is: the decoder holds it. */
    if (o.weights == ATTN_WEIGHTS_STORED) {
        if ((st = attn__gguf_keep(g, &m->file))) goto fail;
        g = m->file;
    }
    int found;
    if ((st = load_matrix(g, m, row->gguf->embed, cfg.d_model, cfg.vocab, 0, &m->token_embd, &found)) ||
        (st = load_vector(g, m, row->gguf->output_norm, cfg.d_model, 0, &m->output_norm)) ||
        (st = load_matrix(g, m, row->gguf->output, cfg.d_model, cfg.vocab, 1, &m->output, &found)))
        goto fail;
    if (!found) m->output = m->token_embd;
    for (int64_t l = 0; l < cfg.n_layers; l++)
        if ((st = load_layer(g, row, m, l, &m->layers[l]))) goto fail;
    if ((st = check_unused(g, row, cfg.n_layers))) goto fail;
    *out = m;
    return ATTN_OK;
fail:
    attn_decoder_free(m);
    return st;
}

void attn_decoder_free(attn_decoder *m) {
    if (!m) return;
    for (int64_t i = 0; i < m->n_owned; i++) free(m->owned[i]);
    free(m->owned);
    attn_gguf_free(m->file);
    attn_safetensors_free(m->checkpoint);
    free(m->layers);
    free(m);
}

const attn_decoder_config *attn_decoder_get_config(const attn_decoder *m) { return m ? &m->cfg : NULL; }

uint64_t attn_decoder_weight_bytes(const attn_decoder *m) { return m ? m->weight_bytes : 0; }
