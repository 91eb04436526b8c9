/*
 * model_chapter.h — the numbers of `attn demo --model FILE`: the chapter's
 * opening ("我吃了一个苹果" against "这台电脑来自苹果") computed on a real
 * model by the decoder (attn_decoder.h) and its tokenizer
 * (attn_tokenizer.h).  Kept apart from the printing (cmd_demo_model.c) so
 * that tests/model/test_chapter_model.c checks the very numbers the
 * command prints against Hugging Face transformers.
 *
 * Shape legend (one sentence):
 *   L  its tokens (BOS included where the model adds one)   N  layers
 *   Hq query heads   d  d_model   V  vocabulary
 *   apple_hidden : [N + 2, d]   the residual stream at 苹果's position: row 0
 *                               the embeddings (Gemma's scaled), row l + 1
 *                               after layer l, row N + 1 after the final norm
 *   attention    : [N, Hq, L, L] every layer's weights   <- heads first
 *   cosine       : [N + 2]      cos of the two sentences' apple_hidden rows
 *   pair_cosine  : [N + 2] each the same for the control pairs' last tokens
 */
#ifndef ATTN_MODEL_CHAPTER_H
#define ATTN_MODEL_CHAPTER_H

#include "attn_decoder.h"
#include "attn_model_interp.h"
#include "attn_tokenizer.h"

#include <stddef.h>
#include <stdint.h>

enum {
    MODEL_CHAPTER_SENTENCES = 2, /* "eat" and "computer"                           */
    MODEL_CHAPTER_TOKENS = 32,   /* at most, per sentence                          */
    MODEL_CHAPTER_TOP = 5        /* next tokens kept                               */
};

/* The chapter's sentences, UTF-8, in the order eat, computer; both end in
 * 苹果, which must be one token of the model's vocabulary. */
extern const char *const model_chapter_sentences[MODEL_CHAPTER_SENTENCES];

/* The controls: pairs whose last tokens are one id, compared as the two
 * 苹果 are.  MODEL_CHAPTER_CONTROL: the same sense of 苹果 with another verb
 * (我吃了一个苹果 / 我买了一个苹果), the yardstick of the two senses' drift;
 * MODEL_CHAPTER_EN_SENSES and _EN_CONTROL: a matched English pair ending
 * in " bank", in two senses and in one. */
enum { MODEL_CHAPTER_CONTROL, MODEL_CHAPTER_EN_SENSES, MODEL_CHAPTER_EN_CONTROL, MODEL_CHAPTER_PAIRS };
extern const char *const model_chapter_pairs[MODEL_CHAPTER_PAIRS][2];

/* How much farther apart a two-sense pair ends than its same-sense control:
 * (1 - senses) / (1 - control), the cosines after the final norm (+inf when
 * the control is exactly 1 and the senses are not).  Below
 * MODEL_CHAPTER_GAP_MEANINGFUL the two senses are not told apart by more
 * than a change of verb moves a vector: the gap means nothing. */
#define MODEL_CHAPTER_GAP_MEANINGFUL 2.0
double model_chapter_gap_ratio(double senses, double control);

typedef struct model_chapter_sentence {
    int32_t ids[MODEL_CHAPTER_TOKENS];
    int64_t L;
    int64_t apple;          /* 苹果's position: L - 1                             */
    float *apple_hidden;    /* [N + 2, d]                                         */
    float *attention;       /* [N, Hq, L, L]                                      */
    int64_t top_ids[MODEL_CHAPTER_TOP];
    double top_probs[MODEL_CHAPTER_TOP]; /* softmax of the last position's logits */
} model_chapter_sentence;

typedef struct model_chapter {
    attn_decoder_config config;
    model_chapter_sentence s[MODEL_CHAPTER_SENTENCES];
    double *cosine;          /* [N + 2]                                           */
    double *pair_cosine[MODEL_CHAPTER_PAIRS]; /* [N + 2] each, the controls'      */
    int embeddings_equal;    /* 1 when the two rows 0 are identical bit for bit  */
    double mask_row_error;   /* worst |sum of a row's visible weights - 1|       */
    int64_t mask_upper_nonzero; /* cells above the diagonal that are not 0       */
    int64_t mask_cells;      /* cells checked                                     */
    char error[512];         /* why compute failed                                */
} model_chapter;

/* Tokenizes both sentences, runs the forward over each (every layer's
 * weights kept), takes the final norm of 苹果's last row as the forward
 * computes it (ln_final.hook_normalized), and fills mc.  ATTN_ERR_FORMAT when 苹果 is not one
 * token at the end of both sentences; mc->error says why it failed.  mc is
 * zeroed first; free it with
 * model_chapter_free, also after a failure. */
attn_status model_chapter_compute(const attn_decoder *m, const attn_tokenizer *t, model_chapter *mc);
void model_chapter_free(model_chapter *mc);

/* The causal mask in maps [H, L, L]: the worst |sum_{j<=i} w_ij - 1| over
 * the rows into *row_error, the number of cells j > i that are not exactly
 * 0 into *upper_nonzero.  Adds to what is there (call with zeros first). */
void model_chapter_check_causal(const float *maps, int64_t H, int64_t L, double *row_error,
                                int64_t *upper_nonzero);

/* The n² cost on a real text: text tokenized, then for each of n_lengths
 * lengths its first lengths[i] tokens run through the model (attention
 * weights not kept): forward seconds, score-table cells over all layers and
 * heads (Hq · L² a layer; the causal half visible), the reference's score
 * table bytes for one layer (float32 Hq · L²) and flash's workspace bytes
 * for one layer (attn_sdpa_workspace_size).  ATTN_ERR_FORMAT when the text
 * has fewer tokens than a length asks; error says why it failed. */
typedef struct model_chapter_cost {
    int64_t L;
    double seconds;
    int64_t cells, visible_cells;
    uint64_t score_table_bytes, flash_workspace_bytes;
} model_chapter_cost;
attn_status model_chapter_cost_run(const attn_decoder *m, const attn_tokenizer *t, const char *text,
                                   const int64_t *lengths, int n_lengths, model_chapter_cost *out,
                                   double (*now)(void), char *error, size_t error_size);

#endif /* ATTN_MODEL_CHAPTER_H */
