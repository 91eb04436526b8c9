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

#include <stdbool.h>
#include "attn_quant.h"
#include "base/base.h"

/* A projection's weights W [d_out, d_in]: the view of its rows as stored
 * (the mapped file's blocks, attn_quant.h), or, with ATTN_WEIGHTS_F32, a
 * float32 copy (f32, and q an F32 view of it). */
typedef struct decoder_weight {
    attn_qtensor q;
    const float *f32;            /* the float32 copy, or NULL               */
} decoder_weight;

typedef struct decoder_layer {
    float *attn_norm;            /* [d]                                   */
    decoder_weight wq, wk, wv;   /* [Hq*Dh, d], [Hkv*Dh, d], [Hkv*Dh, d]  */
    float *bq, *bk, *bv;         /* [Hq*Dh], [Hkv*Dh], [Hkv*Dh] or NULL   */
    float *q_norm, *k_norm;      /* [Dh] or NULL (QK-norm)                */
    decoder_weight wo;           /* [d, Hq*Dh]                            */
    float *post_attn_norm;       /* [d] or NULL                           */
    float *ffn_norm;             /* [d]                                   */
    decoder_weight w_gate, w_up; /* [F, d]                                */
    decoder_weight w_down;       /* [d, F]                                */
    float *post_ffn_norm;        /* [d] or NULL                           */
} decoder_layer;

struct attn_decoder {
    attn_decoder_config cfg;
    attn_decoder_options opt;    /* weights and precision, as loaded       */
    decoder_weight token_embd;   /* [V, d]                                */
    float *output_norm;          /* [d]                                   */
    decoder_weight output;       /* [V, d]; == token_embd when tied       */
    decoder_layer *layers;       /* [n_layers]                            */
    void **owned;                /* every allocation above, to free       */
    int64_t n_owned;
    uint64_t weight_bytes;
    attn_gguf *file;             /* the GGUF whose mapping the views read, or NULL */
    struct attn_safetensors *checkpoint; /* the checkpoint they read, or NULL */
};

/* The tensors a decoder owns per layer (at most) and outside the layers. */
enum { DECODER_TENSORS_PER_LAYER = 16, DECODER_TENSORS_OUTSIDE = 3 };

/* A decoder with no weights yet for cfg: its layer table and room for
 * every tensor it may own (decoder.c's loader and decoder_hf.c's). */
/* Where a layer's tensor i (arch.h's arch_layer_tensor) lives in w: a
 * vector (*vec set, *mat NULL) or a matrix (*mat set, *vec NULL); the one
 * map from the architectures' tensor lists to decoder_layer's fields, for
 * both loaders and attn_decoder_weight. */
void attn__decoder_layer_slot(decoder_layer *w, int i, float ***vec, decoder_weight **mat);

attn_status attn__decoder_new(const attn_decoder_config *cfg, attn_decoder **out);
/* The sizes of cfg (counts positive, Hq a multiple of Hkv, an even head
 * width) and their products without overflow; messages start with what. */
attn_status attn__decoder_check_config(const attn_decoder_config *cfg, const char *what);

/* The weights of tensor name, rows x cols float32 as loaded: ATTN_ERR_FORMAT
 * naming the tensor, the first row and column holding NaN or an infinity,
 * and how many do.  One pass over the floats just written (decoder.c and
 * decoder_hf.c call it after each tensor's conversion). */
attn_status attn__decoder_check_finite(const char *name, const float *data, int64_t rows, int64_t cols);
/* The same refusal for a stored weight, read where it is mapped
 * (attn_quant_check_finite: the bytes a check needs, nothing converted
 * unless something is found). */
attn_status attn__decoder_check_stored(const char *name, const attn_qtensor *w);

/* y [rows, d_out] = x [rows, d_in] . w^T (w: [d_out, d_in]) + b (b: [d_out]
 * or NULL), in m's precision.  Each element is one sum in a fixed order.
 * Fails only for memory (the quantized kernels' scratch). */
attn_status attn__decoder_matmul(const attn_decoder *m, const float *x, int64_t rows, const decoder_weight *w,
                                 const float *b, float *y);
/* Rows ids [n] of the embedding into out [n, d], each times scale. */
attn_status attn__decoder_embed(const attn_decoder *m, const int32_t *ids, int64_t n, float scale, float *out);
/* A checked options struct (NULL: the defaults) copied by the ABI rule. */
attn_status attn__decoder_options(const attn_decoder_options *caller, attn_decoder_options *out, const char *fn);

/* The hook points (decoder_hooks.c).  wanted: the caller's outputs ask for
 * the point.  call: calls the tensor hook when wanted (a no-op otherwise);
 * its failure names the point.  attention_hooked: the scores, pattern or z
 * are wanted; then attend_hooked replaces attn_sdpa_forward for the layer
 * (q [1, L, Hq, Dh] after RoPE, k and v [1, L, Hkv, Dh], z [1, L, Hq, Dh]
 * out, weights [Hq, L, L] or NULL), calling those three hooks. */
int attn__decoder_hook_wanted(const attn_decoder_outputs *out, attn_decoder_hook_point point);
attn_status attn__decoder_hook_call(const attn_decoder_outputs *out, attn_decoder_hook_point point, int64_t layer,
                                    float *data, int ndim, int64_t s0, int64_t s1, int64_t s2);
int attn__decoder_attention_hooked(const attn_decoder_outputs *out);
attn_status attn__decoder_attend_hooked(const attn_decoder_outputs *out, int64_t layer, const attn_tensor *q,
                                        const attn_tensor *k, const attn_tensor *v, const attn_sdpa_options *opt,
                                        float *weights, attn_tensor *z);
/* The hook points the forward computes only when asked
 * (decoder_hook_extra.c).
 * inputs_take: hook_q_input, hook_k_input, hook_v_input of a layer (the
 *   stream x [L, d] once per head, [L, H, d]) shown to the hook; the heads
 *   it changed, with their rows, are kept in *in (nothing when none did).
 * inputs_apply: which 0, 1, 2 (q, k, v): each changed head's rows through
 *   the layer's norm (ek's rmsnorm, norm_weight) and the projection w (+ bias) replace
 *   that head's Dh columns of proj [L, H*Dh].
 * norm_hooks: the norm of rows x [rows, d] into y (already computed by the
 *   caller, y = rmsnorm(x) * w) shown as hook_scale [rows, 1] (a written
 *   scale recomputes its row) and hook_normalized [rows, d] (y itself).
 * result_hook: hook_result [L, Hq, d] of z [L, Hq*Dh] through wo; written,
 *   o [L, d] becomes the sum of the heads' results. */
typedef struct decoder_inputs {
    float *rows[3];   /* [L, H, d] per projection, or NULL: nothing changed */
    bool *changed[3]; /* [H]                                                */
    int64_t heads[3];
} decoder_inputs;
attn_status attn__decoder_inputs_take(const attn_decoder_outputs *out, const attn_decoder_config *c, int64_t layer,
                                      const float *x, int64_t L, decoder_inputs *in);
struct eltwise_kernels;
attn_status attn__decoder_inputs_apply(const attn_decoder *m, const decoder_inputs *in, int which,
                                       const struct eltwise_kernels *ek, const float *norm_weight,
                                       const decoder_weight *w, const float *bias, int64_t L, float *proj);
void attn__decoder_inputs_free(decoder_inputs *in);
attn_status attn__decoder_norm_hooks(const attn_decoder_outputs *out, attn_decoder_hook_point scale_point,
                                     attn_decoder_hook_point normalized_point, int64_t layer, const float *x,
                                     int64_t rows, int64_t d, const float *w, double eps, float *y);
attn_status attn__decoder_result_hook(const attn_decoder *m, const attn_decoder_outputs *out, const decoder_weight *wo,
                                      int64_t layer, const float *z, int64_t L, float *o);

/* The RoPE tables of one sequence (attn_rope_table): one per distinct
 * rotation of the model's layers, which attn_decoder_rope_options makes a
 * function of the layer being local or global (Gemma 3: two thetas), so
 * at most two; local is NULL when no layer is local.  Built once per
 * sequence (a session: at its creation; attn_decoder_forward: per call),
 * shared by all layers, grown as the sequence's positions are. */
typedef struct decoder_rope {
    attn_rope_table *global, *local;
} decoder_rope;

/* Tables for m's rotations, covering no position yet; on failure r holds
 * none (freeing it is harmless). */
attn_status attn__decoder_rope_new(const attn_decoder *m, decoder_rope *r);
/* Both tables cover positions [0, n). */
attn_status attn__decoder_rope_reserve(decoder_rope *r, int64_t n);
void attn__decoder_rope_free(decoder_rope *r);

/* Where a forward's keys and values go when they are cached (decoder_session.c):
 * the L tokens are at positions pos0 .. pos0 + L - 1 of sequence seq, and
 * rope covers at least [0, pos0 + L). */
typedef struct decoder_kv {
    attn_kv_cache *cache;
    int64_t seq;
    int64_t pos0;
    const decoder_rope *rope;
} decoder_kv;

/* The checks of every forward: pointers, L > 0, ids in [0, V); and the
 * caller's outputs struct copied into *out by the ABI rule (base.h's
 * options_copy), so that the forward reads one layout whatever header the
 * caller was built with.  fn names the caller in the message. */
attn_status attn__decoder_check(const attn_decoder *m, const int32_t *ids, int64_t L,
                                const attn_decoder_outputs *caller, attn_decoder_outputs *out, const char *fn);
/* The forward over ids [L] (checked): kv NULL for a whole sequence at
 * positions 0 .. L-1 (attention by attn_sdpa_forward), else through kv's
 * cache (out->attention must then be NULL). */
attn_status attn__decoder_run(const attn_decoder *m, const int32_t *ids, int64_t L, const decoder_kv *kv,
                              attn_decoder_outputs *out, const char *fn);

#endif /* ATTN_MODEL_DECODER_H */
