/*
 * model_chapter.c — the numbers of `attn demo --model` (model_chapter.h).
 * Everything here is the decoder's and the tokenizer's output, compared
 * by the library (attn_model_stream_cosine, attn_top_k); the only
 * arithmetic of its own is the final RMSNorm of one row, sums of weights, a
 * softmax of one row of logits and counts of cells.
 */
#include "model_chapter.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const model_chapter_sentences[MODEL_CHAPTER_SENTENCES] = {"我吃了一个苹果", "这台电脑来自苹果"};

/* scripts/models/make_chapter_fixtures.py's PAIRS, in the same order. */
const char *const model_chapter_pairs[MODEL_CHAPTER_PAIRS][2] = {
    [MODEL_CHAPTER_CONTROL] = {"我吃了一个苹果", "我买了一个苹果"},
    [MODEL_CHAPTER_EN_SENSES] = {"We sat on the grass by the river bank", "She paid the cash into the bank"},
    [MODEL_CHAPTER_EN_CONTROL] = {"She paid the cash into the bank", "She took the cash to the bank"},
};

double model_chapter_gap_ratio(double senses, double control) {
    const double far = 1.0 - senses, near = 1.0 - control;
    if (near <= 0.0) return far > 0.0 ? INFINITY : 1.0;
    return far / near;
}

static attn_status say(char *error, size_t size, attn_status st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static attn_status say(char *error, size_t size, attn_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(error, size, fmt, ap);
    va_end(ap);
    return st;
}

void model_chapter_check_causal(const float *maps, int64_t H, int64_t L, double *row_error,
                                int64_t *upper_nonzero) {
    for (int64_t h = 0; h < H; h++)
        for (int64_t i = 0; i < L; i++) {
            const float *row = maps + (h * L + i) * L;
            double sum = 0;
            for (int64_t j = 0; j <= i; j++) sum += row[j];
            *row_error = fmax(*row_error, fabs(sum - 1.0));
            for (int64_t j = i + 1; j < L; j++) *upper_nonzero += row[j] != 0.0f;
        }
}

/* ln_final.hook_normalized of the last position (the forward runs with
 * last_only): the final norm's output as the decoder computes it before
 * the output head, whatever the file stores the norm's weight as. */
static int keep_final_norm(void *user, const attn_decoder_hook_tensor *t) {
    memcpy(user, t->data, (size_t)t->shape[1] * sizeof(float));
    return 0;
}

/* One sentence: its ids, a forward with every layer's weights, 苹果's rows
 * of the residual stream, the final norm of its last row and the top next
 * tokens. */
static attn_status run_sentence(const attn_decoder *m, const attn_tokenizer *t, const char *text,
                                model_chapter_sentence *s, char *error, size_t esize) {
    const attn_decoder_config *c = attn_decoder_get_config(m);
    const int64_t N = c->n_layers, d = c->d_model, Hq = c->n_heads, V = c->vocab;
    size_t n_ids;
    if (attn_tokenizer_encode(t, text, strlen(text), 0, s->ids, MODEL_CHAPTER_TOKENS, &n_ids))
        return say(error, esize, ATTN_ERR_FORMAT, "tokenizing '%s': %s", text, attn_last_error());
    s->L = (int64_t)n_ids;
    s->apple = s->L - 1;
    const int64_t L = s->L;
    attn_status st = ATTN_OK;
    float *hidden = malloc((size_t)((N + 1) * L * d) * sizeof *hidden);
    float *logits = malloc((size_t)V * sizeof *logits);
    float **maps = malloc((size_t)N * sizeof *maps);
    s->attention = malloc((size_t)(N * Hq * L * L) * sizeof *s->attention);
    s->apple_hidden = malloc((size_t)((N + 2) * d) * sizeof *s->apple_hidden);
    if (!hidden || !logits || !maps || !s->attention || !s->apple_hidden) {
        st = say(error, esize, ATTN_ERR_OUT_OF_MEMORY, "out of memory for %lld tokens", (long long)L);
        goto done;
    }
    for (int64_t l = 0; l < N; l++) maps[l] = s->attention + l * Hq * L * L;
    attn_decoder_outputs out = ATTN_DECODER_OUTPUTS_INIT;
    out.logits = logits;
    out.last_only = 1;
    out.hidden = hidden;
    out.attention = maps;
    out.tensor_hook = keep_final_norm;
    out.tensor_hook_user = s->apple_hidden + (N + 1) * d;
    out.tensor_hook_points = 1u << ATTN_DECODER_HOOK_LN_FINAL;
    if ((st = attn_decoder_forward(m, s->ids, L, &out))) {
        say(error, esize, st, "the forward over '%s': %s", text, attn_last_error());
        goto done;
    }
    for (int64_t l = 0; l <= N; l++)
        memcpy(s->apple_hidden + l * d, hidden + (l * L + s->apple) * d, (size_t)d * sizeof(float));
    attn_top_k(logits, V, MODEL_CHAPTER_TOP, s->top_ids);
    const double max = logits[s->top_ids[0]];
    double z = 0;
    for (int64_t i = 0; i < V; i++) z += exp((double)logits[i] - max);
    for (int j = 0; j < MODEL_CHAPTER_TOP; j++) s->top_probs[j] = exp((double)logits[s->top_ids[j]] - max) / z;
done:
    free(hidden);
    free(logits);
    free(maps);
    return st;
}

attn_status model_chapter_compute(const attn_decoder *m, const attn_tokenizer *t, model_chapter *mc) {
    memset(mc, 0, sizeof *mc);
    mc->config = *attn_decoder_get_config(m);
    const attn_decoder_config *c = &mc->config;
    const int64_t N = c->n_layers, d = c->d_model;
    mc->cosine = malloc((size_t)(N + 2) * sizeof *mc->cosine);
    attn_status st = ATTN_OK;
    if (!mc->cosine) {
        st = say(mc->error, sizeof mc->error, ATTN_ERR_OUT_OF_MEMORY, "out of memory");
        goto done;
    }
    for (int k = 0; k < MODEL_CHAPTER_SENTENCES; k++)
        if ((st = run_sentence(m, t, model_chapter_sentences[k], &mc->s[k], mc->error, sizeof mc->error)))
            goto done;
    const model_chapter_sentence *a = &mc->s[0], *b = &mc->s[1];
    char apple[16];
    size_t apple_len = 0;
    if (attn_tokenizer_decode(t, &a->ids[a->apple], 1, 0, apple, sizeof apple, &apple_len) != ATTN_OK ||
        strcmp(apple, "苹果") != 0) {
        st = say(mc->error, sizeof mc->error, ATTN_ERR_FORMAT,
                 "苹果 is not one token in this vocabulary (the last token of '%s' is %ld)", model_chapter_sentences[0],
                 (long)a->ids[a->apple]);
        goto done;
    }
    if (a->ids[a->apple] != b->ids[b->apple]) {
        st = say(mc->error, sizeof mc->error, ATTN_ERR_FORMAT,
                 "this vocabulary ends the two sentences in different tokens (%ld, %ld): 苹果 is not one token",
                 (long)a->ids[a->apple], (long)b->ids[b->apple]);
        goto done;
    }
    /* The controls: each pair's last tokens, as the two 苹果. */
    for (int p = 0; p < MODEL_CHAPTER_PAIRS; p++) {
        model_chapter_sentence two[2];
        memset(two, 0, sizeof two);
        for (int k = 0; k < 2 && !st; k++)
            st = run_sentence(m, t, model_chapter_pairs[p][k], &two[k], mc->error, sizeof mc->error);
        if (!st && two[0].ids[two[0].apple] != two[1].ids[two[1].apple])
            st = say(mc->error, sizeof mc->error, ATTN_ERR_FORMAT, "'%s' and '%s' end in different tokens (%ld, %ld) "
                     "in this vocabulary", model_chapter_pairs[p][0], model_chapter_pairs[p][1],
                     (long)two[0].ids[two[0].apple], (long)two[1].ids[two[1].apple]);
        if (!st && !(mc->pair_cosine[p] = malloc((size_t)(N + 2) * sizeof *mc->pair_cosine[p])))
            st = say(mc->error, sizeof mc->error, ATTN_ERR_OUT_OF_MEMORY, "out of memory");
        if (!st)
            attn_model_stream_cosine(two[0].apple_hidden, 1, 0, two[1].apple_hidden, 1, 0, N + 2, d, mc->pair_cosine[p]);
        for (int k = 0; k < 2; k++) {
            free(two[k].apple_hidden);
            free(two[k].attention);
        }
        if (st) goto done;
    }
    mc->embeddings_equal = memcmp(a->apple_hidden, b->apple_hidden, (size_t)d * sizeof(float)) == 0;
    /* apple_hidden is [N + 2, d]: a stream of one position. */
    attn_model_stream_cosine(a->apple_hidden, 1, 0, b->apple_hidden, 1, 0, N + 2, d, mc->cosine);
    for (int k = 0; k < MODEL_CHAPTER_SENTENCES; k++) {
        const model_chapter_sentence *s = &mc->s[k];
        model_chapter_check_causal(s->attention, N * c->n_heads, s->L, &mc->mask_row_error,
                                   &mc->mask_upper_nonzero);
        mc->mask_cells += N * c->n_heads * s->L * s->L;
    }
done:
    return st;
}

void model_chapter_free(model_chapter *mc) {
    for (int k = 0; k < MODEL_CHAPTER_SENTENCES; k++) {
        free(mc->s[k].apple_hidden);
        free(mc->s[k].attention);
    }
    free(mc->cosine);
    for (int p = 0; p < MODEL_CHAPTER_PAIRS; p++) free(mc->pair_cosine[p]);
    memset(mc, 0, sizeof *mc);
}

attn_status model_chapter_cost_run(const attn_decoder *m, const attn_tokenizer *t, const char *text,
                                   const int64_t *lengths, int n_lengths, model_chapter_cost *out,
                                   double (*now)(void), char *error, size_t error_size) {
    const attn_decoder_config *c = attn_decoder_get_config(m);
    const size_t len = strlen(text);
    int32_t *ids = malloc((len + 1) * sizeof *ids);
    float *logits = malloc((size_t)c->vocab * sizeof *logits);
    attn_status st = ATTN_OK;
    size_t n_ids = 0;
    if (!ids || !logits) {
        st = say(error, error_size, ATTN_ERR_OUT_OF_MEMORY, "out of memory");
        goto done;
    }
    if ((st = attn_tokenizer_encode(t, text, len, 0, ids, len + 1, &n_ids))) {
        say(error, error_size, st, "tokenizing the cost text: %s", attn_last_error());
        goto done;
    }
    for (int i = 0; i < n_lengths; i++) {
        const int64_t L = lengths[i];
        if ((int64_t)n_ids < L) {
            st = say(error, error_size, ATTN_ERR_FORMAT, "the cost text is %zu tokens in this vocabulary, under %lld",
                     n_ids, (long long)L);
            goto done;
        }
        attn_decoder_outputs o = ATTN_DECODER_OUTPUTS_INIT;
        o.logits = logits;
        o.last_only = 1;
        const double t0 = now();
        if ((st = attn_decoder_forward(m, ids, L, &o))) {
            say(error, error_size, st, "the forward over %lld tokens: %s", (long long)L, attn_last_error());
            goto done;
        }
        out[i].L = L;
        out[i].seconds = now() - t0;
        out[i].cells = c->n_layers * c->n_heads * L * L;
        out[i].visible_cells = c->n_layers * c->n_heads * L * (L + 1) / 2;
        out[i].score_table_bytes = (uint64_t)(c->n_heads * L * L) * sizeof(float);
        attn_tensor q = attn_tensor_3d(NULL, L, c->n_heads, c->head_dim);
        attn_tensor kv = attn_tensor_3d(NULL, L, c->n_kv_heads, c->head_dim);
        attn_sdpa_options opt = ATTN_SDPA_OPTIONS_INIT;
        opt.causal = 1;
        opt.kernel = ATTN_KERNEL_FLASH;
        size_t bytes = 0;
        if ((st = attn_sdpa_workspace_size(&q, &kv, &kv, &opt, &bytes))) {
            say(error, error_size, st, "flash's workspace: %s", attn_last_error());
            goto done;
        }
        out[i].flash_workspace_bytes = bytes;
    }
done:
    free(ids);
    free(logits);
    return st;
}
