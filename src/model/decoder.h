/*
 * decoder.h — what the decoder's files share (libattn_model): the loaded
 * model (decoder.c reads the configuration and the weights,
 * decoder_forward.c runs them, decoder_matmul.c multiplies).
 *
 * Shape legend: d d_model, F d_ffn, Hq, Hkv heads, Dh head width, V vocabulary.
 * Weights keep GGUF's layout: a projection from d_in to d_out is
 * [d_out, d_in] row-major (each output's weights one contiguous row, what
 * attn_gguf_dequantize_rows gives), so y = x . W^T.
 */
#ifndef ATTN_MODEL_DECODER_H
#define ATTN_MODEL_DECODER_H

#include "attn_cache.h"
#include "attn_decoder.h"
#include "base/base.h"

typedef struct decoder_layer {
    float *attn_norm;            /* [d]                                   */
    float *wq, *wk, *wv;         /* [Hq*Dh, d], [Hkv*Dh, d], [Hkv*Dh, d]  */
    float *bq, *bk, *bv;         /* [Hq*Dh], [Hkv*Dh], [Hkv*Dh] or NULL   */
    float *q_norm, *k_norm;      /* [Dh] or NULL (QK-norm)                */
    float *wo;                   /* [d, Hq*Dh]                            */
    float *post_attn_norm;       /* [d] or NULL                           */
    float *ffn_norm;             /* [d]                                   */
    float *w_gate, *w_up;        /* [F, d]                                */
    float *w_down;               /* [d, F]                                */
    float *post_ffn_norm;        /* [d] or NULL                           */
} decoder_layer;

struct attn_decoder {
    attn_decoder_config cfg;
    float *token_embd;           /* [V, d]                                */
    float *output_norm;          /* [d]                                   */
    float *output;               /* [V, d]; == token_embd when tied       */
    decoder_layer *layers;       /* [n_layers]                            */
    float **owned;               /* every allocation above, to free       */
    int64_t n_owned;
    uint64_t weight_bytes;
};

/* y [rows, d_out] = x [rows, d_in] . w^T (w: [d_out, d_in]) + b (b: [d_out]
 * or NULL).  Each element is one sum in a fixed order. */
void attn__decoder_matmul(const float *x, int64_t rows, int64_t d_in, const float *w, const float *b,
                          int64_t d_out, float *y);

/* Where a forward's keys and values go when they are cached (decoder_session.c):
 * the L tokens are at positions pos0 .. pos0 + L - 1 of sequence seq. */
typedef struct decoder_kv {
    attn_kv_cache *cache;
    int64_t seq;
    int64_t pos0;
} decoder_kv;

/* The checks of every forward: pointers, outputs.struct_size, L > 0, ids in
 * [0, V); fn names the caller in the message. */
attn_status attn__decoder_check(const attn_decoder *m, const int32_t *ids, int64_t L, const attn_decoder_outputs *out,
                                const char *fn);
/* The forward over ids [L] (checked): kv NULL for a whole sequence at
 * positions 0 .. L-1 (attention by attn_sdpa_forward), else through kv's
 * cache (out->attention must then be NULL). */
attn_status attn__decoder_run(const attn_decoder *m, const int32_t *ids, int64_t L, const decoder_kv *kv,
                              attn_decoder_outputs *out, const char *fn);

#endif /* ATTN_MODEL_DECODER_H */
