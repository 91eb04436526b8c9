/*
 * decoder_session.c — incremental decoding (attn_decoder.h, "generation"):
 * a session is one sequence's keys and values in an attn_kv_cache (one
 * cache layer per decoder layer, one sequence slot, contiguous), and each
 * step runs the decoder's layers (decoder_forward.c) over the step's tokens
 * only, at their absolute positions.
 *
 * Shape legend: N layers, Hkv key/value heads, Dh head width, C capacity,
 * n tokens of a step, V vocabulary.  The cache: k, v [N][C, Hkv, Dh].
 *
 * Why RoPE is applied by the layer and not by the cache (attn_kv_cache_config.rope):
 * Gemma 3's local and global layers rotate with two different thetas, and
 * a cache has one rotation for all its layers; the layer rotates k at the
 * step's positions (position_offset) before appending, which is the same
 * arithmetic as the full forward's rotation at those positions.  The
 * angles come from the session's RoPE tables (decoder_rope: one per
 * distinct rotation), grown geometrically as the position advances, so a
 * step of one token computes no cos or sin unless its position is new to
 * the session.
 */
#include "model/decoder.h"

#include <stdlib.h>

struct attn_decoder_session {
    const attn_decoder *m;
    attn_kv_cache *cache;
    int64_t seq;       /* the cache's one sequence */
    int64_t position;  /* rows every layer holds */
    int64_t capacity;
    attn_kernel kernel;
    int broken;        /* a step failed after some layers appended: reset first */
    decoder_rope rope; /* cos, sin of positions [0, the furthest step's end): kept
                          across resets, since a position's angles never change */
};

/* Bytes of one position's row of one layer's heads (K or V) in dtype. */
static uint64_t kv_row_bytes(const attn_decoder_config *cfg, attn_dtype dtype) {
    const bool eight_bit = dtype == ATTN_Q8_0 || dtype == ATTN_FP8_E4M3; /* 34 bytes per 32 values */
    const uint64_t head = eight_bit ? (uint64_t)cfg->head_dim / 32u * 34u
                                    : (uint64_t)cfg->head_dim * (dtype == ATTN_F32 ? 4u : 2u);
    return (uint64_t)cfg->n_kv_heads * head;
}

uint64_t attn_decoder_kv_bytes_per_token_split(const attn_decoder_config *cfg, attn_dtype k_dtype,
                                               attn_dtype v_dtype) {
    if (!cfg) return 0;
    return (uint64_t)cfg->n_layers * (kv_row_bytes(cfg, k_dtype) + kv_row_bytes(cfg, v_dtype ? v_dtype : k_dtype));
}

uint64_t attn_decoder_kv_bytes_per_token(const attn_decoder_config *cfg, attn_dtype kv_dtype) {
    return attn_decoder_kv_bytes_per_token_split(cfg, kv_dtype, kv_dtype);
}

attn_status attn_decoder_session_new(const attn_decoder *m, const attn_decoder_session_options *opt_in,
                                     attn_decoder_session **out) {
    if (out) *out = NULL;
    if (!m || !out)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_decoder_session_new: %s is NULL",
                          !m ? "the decoder" : "out");
    static const attn_decoder_session_options defaults = ATTN_DECODER_SESSION_OPTIONS_INIT;
    attn_decoder_session_options o;
    attn_status st = options_copy(&o, sizeof o, &defaults, opt_in, "attn_decoder_session_options");
    if (st) return st;
    const attn_decoder_session_options *opt = &o;
    if (opt->capacity <= 0)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_decoder_session_new: opt.capacity is %lld: must be > 0",
                          (long long)opt->capacity);
    for (int i = 0; i < 2; i++) {
        const attn_dtype d = i ? opt->kv_value_dtype : opt->kv_dtype;
        if (d != ATTN_F32 && d != ATTN_F16 && d != ATTN_BF16 && d != ATTN_Q8_0 && d != ATTN_FP8_E4M3)
            return attn__fail(ATTN_ERR_INVALID_ARGUMENT,
                              "attn_decoder_session_new: opt.%s is %s: float32, float16, bfloat16, q8_0 or fp8_e4m3",
                              i ? "kv_value_dtype" : "kv_dtype", attn_dtype_name(d));
    }
    if (opt->kernel != ATTN_KERNEL_AUTO && opt->kernel != ATTN_KERNEL_REF && opt->kernel != ATTN_KERNEL_FLASH)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_decoder_session_new: opt.kernel is %d", (int)opt->kernel);
    const attn_decoder_config *c = &m->cfg;
    attn_decoder_session *s = calloc(1, sizeof *s);
    if (!s) return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "attn_decoder_session_new: out of memory");
    attn_kv_cache_config kc = ATTN_KV_CACHE_CONFIG_INIT;
    kc.layers = c->n_layers;
    kc.kv_heads = c->n_kv_heads;
    kc.head_dim = c->head_dim;
    kc.dtype = opt->kv_dtype;
    kc.value_dtype = opt->kv_value_dtype;
    kc.layout = ATTN_KV_CONTIGUOUS;
    kc.max_seqs = 1;
    kc.capacity = opt->capacity;
    st = attn_kv_cache_new(&kc, &s->cache);
    if (!st) st = attn_kv_cache_seq_add(s->cache, &s->seq);
    if (st) {
        st = attn__fail(st, "attn_decoder_session_new: a KV cache of %lld positions (%.1f MiB): %s",
                        (long long)opt->capacity,
                        (double)opt->capacity *
                            (double)attn_decoder_kv_bytes_per_token_split(c, opt->kv_dtype, opt->kv_value_dtype) /
                            1048576.0,
                        attn_last_error());
        attn_decoder_session_free(s);
        return st;
    }
    if ((st = attn__decoder_rope_new(m, &s->rope))) {
        st = attn__fail(st, "attn_decoder_session_new: RoPE tables: %s", attn_last_error());
        attn_decoder_session_free(s);
        return st;
    }
    s->m = m;
    s->capacity = opt->capacity;
    s->kernel = opt->kernel;
    *out = s;
    return ATTN_OK;
}

void attn_decoder_session_free(attn_decoder_session *s) {
    if (!s) return;
    attn_kv_cache_free(s->cache);
    attn__decoder_rope_free(&s->rope);
    free(s);
}

/* Deprecated names, until 1.0 (attn_decoder.h). */
attn_status attn_decoder_session_create(const attn_decoder *m, const attn_decoder_session_options *opt,
                                        attn_decoder_session **out) {
    return attn_decoder_session_new(m, opt, out);
}
/* End of the deprecated names. */

attn_status attn_decoder_session_reset(attn_decoder_session *s) {
    if (!s) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_decoder_session_reset: the session is NULL");
    /* A freed slot is taken again by seq_add; the contiguous region stays. */
    attn_status st = attn_kv_cache_seq_free(s->cache, s->seq);
    if (!st) st = attn_kv_cache_seq_add(s->cache, &s->seq);
    if (st) return attn__fail(st, "attn_decoder_session_reset: %s", attn_last_error());
    s->position = 0;
    s->broken = 0;
    return ATTN_OK;
}

int64_t attn_decoder_session_position(const attn_decoder_session *s) { return s ? s->position : 0; }
int64_t attn_decoder_session_capacity(const attn_decoder_session *s) { return s ? s->capacity : 0; }

attn_status attn_decoder_step_outputs(attn_decoder_session *s, const int32_t *ids, int64_t n,
                                      attn_decoder_outputs *caller) {
    static const char fn[] = "attn_decoder_step";
    if (!s) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "%s: the session is NULL", fn);
    attn_decoder_outputs run;
    attn_status st = attn__decoder_check(s->m, ids, n, caller, &run, fn);
    if (st) return st;
    if (run.attention)
        return attn__fail(ATTN_ERR_UNSUPPORTED,
                          "%s: outputs.attention must be NULL (a session does not compute the weights; "
                          "attn_decoder_forward does)",
                          fn);
    if (s->broken)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT,
                          "%s: an earlier step failed part way, so the cache's layers disagree: "
                          "attn_decoder_session_reset the session first",
                          fn);
    if (n > s->capacity - s->position)
        return attn__fail(ATTN_ERR_CAPACITY, "%s: %lld tokens at position %lld do not fit the capacity of %lld", fn,
                          (long long)n, (long long)s->position, (long long)s->capacity);
    if (run.kernel == ATTN_KERNEL_AUTO) run.kernel = s->kernel;
    /* Before anything is appended, so that a failure leaves the session as it was. */
    if ((st = attn__decoder_rope_reserve(&s->rope, s->position + n)))
        return attn__fail(st, "%s: RoPE tables: %s", fn, attn_last_error());
    const decoder_kv kv = {s->cache, s->seq, s->position, &s->rope};
    st = attn__decoder_run(s->m, ids, n, &kv, &run, fn);
    if (st) {
        /* Nothing was appended if layer 0 never ran its append; the only
         * honest state otherwise is "needs a reset". */
        int64_t held = s->position;
        if (attn_kv_cache_seq_length(s->cache, s->seq, 0, &held) || held != s->position) s->broken = 1;
        return st;
    }
    s->position += n;
    return ATTN_OK;
}

attn_status attn_decoder_step(attn_decoder_session *s, const int32_t *ids, int64_t n, float *logits) {
    attn_decoder_outputs out = ATTN_DECODER_OUTPUTS_INIT;
    out.logits = logits;
    out.last_only = 1;
    return attn_decoder_step_outputs(s, ids, n, &out);
}
