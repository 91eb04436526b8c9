/*
 * sdpa_ref.c — the reference attention kernel: plain loops, double
 * accumulation, the full score table of one (batch, head) materialised.
 * It is the oracle every fast kernel is tested against, so it is written to
 * be obviously right, not fast, and follows the chapter step by step:
 * score, mask, softmax per query row over the visible keys, weighted sum.
 *
 * Shape legend: q [B, L, Hq, D]  k [B, S, Hkv, D]  v [B, S, Hkv, Dv]
 *               out [B, L, Hq, Dv]  weights [B, Hq, L, S]  lse [B, Hq, L]
 *               scores (workspace) [L, S] doubles for one (b, h)
 */
#include "core/internal.h"

#include <math.h>
#include <stdlib.h>

size_t attn_sdpa_ref_workspace_size(const attn_problem *p) {
    return (size_t)p->len_q * (size_t)p->len_kv * sizeof(double);
}

/* Fills scores_bh [L, S] for batch b and query head h: scale * q.k + bias for
 * visible keys, -inf for hidden ones. */
static void score_table(const attn_problem *p, int64_t b, int64_t h, double *scores_bh) {
    int64_t kv_head = h / p->group; /* grouped-query attention: G query heads share one kv head */
    for (int64_t i = 0; i < p->len_q; i++) {
        const float *q_bih = attn_row(&p->q, b, i, h);
        double *scores_row = scores_bh + i * p->len_kv;
        int64_t begin, end;
        attn_problem_key_range(p, b, i, &begin, &end);
        for (int64_t j = 0; j < p->len_kv; j++) {
            bool visible = j >= begin && j < end && attn_problem_mask_allows(p, b, h, i, j);
            double bias = visible ? attn_problem_bias_at(p, b, h, i, j) : 0.0;
            if (!visible || bias == -INFINITY) {
                scores_row[j] = -INFINITY;
                continue;
            }
            const float *k_bjh = attn_row(&p->k, b, j, kv_head);
            double dot = 0.0;
            for (int64_t d = 0; d < p->dim; d++) dot += (double)q_bih[d] * (double)k_bjh[d];
            scores_row[j] = (double)p->scale * dot + bias;
        }
    }
}

attn_status attn_sdpa_ref_forward(const attn_problem *p, void *workspace, attn_tensor *out,
                                  float *weights, float *lse) {
    double *scores_bh = workspace;
    for (int64_t b = 0; b < p->batch; b++) {
        for (int64_t h = 0; h < p->heads_q; h++) {
            int64_t kv_head = h / p->group;
            score_table(p, b, h, scores_bh);
            for (int64_t i = 0; i < p->len_q; i++) {
                double *scores_row = scores_bh + i * p->len_kv;
                float *out_bih = attn_row(out, b, i, h);
                int64_t row_index = (b * p->heads_q + h) * p->len_q + i;
                float *weights_row = weights ? weights + row_index * p->len_kv : NULL;

                /* Softmax over the visible keys: subtract the row maximum so
                 * that exp never overflows; hidden keys are -inf and give 0. */
                double row_max = -INFINITY;
                for (int64_t j = 0; j < p->len_kv; j++)
                    if (scores_row[j] > row_max) row_max = scores_row[j];
                if (row_max == -INFINITY) {
                    /* No visible key: the row reads nothing (never NaN). */
                    for (int64_t d = 0; d < p->dim_v; d++) out_bih[d] = 0.0f;
                    if (weights_row)
                        for (int64_t j = 0; j < p->len_kv; j++) weights_row[j] = 0.0f;
                    if (lse) lse[row_index] = -INFINITY;
                    continue;
                }
                double sum = 0.0;
                for (int64_t j = 0; j < p->len_kv; j++) {
                    scores_row[j] = exp(scores_row[j] - row_max); /* now unnormalised weights */
                    sum += scores_row[j];
                }
                for (int64_t d = 0; d < p->dim_v; d++) {
                    double acc = 0.0;
                    for (int64_t j = 0; j < p->len_kv; j++)
                        if (scores_row[j] != 0.0)
                            acc += scores_row[j] * (double)attn_row(&p->v, b, j, kv_head)[d];
                    out_bih[d] = (float)(acc / sum);
                }
                if (weights_row)
                    for (int64_t j = 0; j < p->len_kv; j++) weights_row[j] = (float)(scores_row[j] / sum);
                if (lse) lse[row_index] = (float)(row_max + log(sum));
            }
        }
    }
    return ATTN_OK;
}

attn_status attn_sdpa_ref_scores(const attn_problem *p, float *scores) {
    double *scores_bh = malloc(attn_sdpa_ref_workspace_size(p) ? attn_sdpa_ref_workspace_size(p) : 1);
    if (!scores_bh)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "cannot allocate the %lld x %lld score table",
                         (long long)p->len_q, (long long)p->len_kv);
    int64_t cells = p->len_q * p->len_kv;
    for (int64_t b = 0; b < p->batch; b++)
        for (int64_t h = 0; h < p->heads_q; h++) {
            score_table(p, b, h, scores_bh);
            float *scores_out = scores + (b * p->heads_q + h) * cells;
            for (int64_t c = 0; c < cells; c++) scores_out[c] = (float)scores_bh[c];
        }
    free(scores_bh);
    return ATTN_OK;
}
