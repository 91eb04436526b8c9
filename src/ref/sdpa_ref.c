/*
 * sdpa_ref.c — the reference attention kernels, forward and backward:
 * plain loops, double accumulation, the full score table of one (batch,
 * head) materialised.  They are the oracle every fast kernel is tested
 * against, so they are written to be obviously right, not fast, and follow
 * the chapter step by step: score, mask, softmax per query row over the
 * visible keys, weighted sum; and for the backward, the chain rule through
 * each of those lines.
 *
 * Shape legend: q [B, L, Hq, D]  k [B, S, Hkv, D]  v [B, S, Hkv, Dv]
 *               out [B, L, Hq, Dv]  weights [B, Hq, L, S]  lse [B, Hq, L]
 *               dout like out, dq like q, dk like k, dv like v
 *   forward workspace (doubles):  table [L, S] for one (b, h)
 *   backward workspace (doubles): table [L, S]  dp_row [S]  dq_row [D]
 *                                 dk_bg [S, D]  dv_bg [S, Dv]
 *
 * The forward, per query row i of head h (kv head g = h / (Hq/Hkv)):
 *   s_ij = scale * dot(q_i, k_j) + bias_ij      (-inf where hidden)
 *   p_ij = exp(s_ij - max_j s_ij) / sum_j exp(...)
 *   o_i  = sum_j p_ij v_j
 */
#include "ref/ref.h"

#include "base/visibility.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------- the score table */

/* Fills table [L, S] for batch b and query head h: scale * q.k + bias for
 * visible keys, -inf for hidden ones.  The one place the reference computes
 * a score. */
static void score_table(const sdpa_problem *p, int64_t b, int64_t h, double *table) {
    const int64_t kv_head = h / p->group; /* grouped-query attention: G query heads share one kv head */
    for (int64_t i = 0; i < p->len_q; i++) {
        const float *q_bih = problem_row(&p->q, b, i, h);
        double *row = table + i * p->len_kv;
        int64_t begin, end;
        attn__visibility_key_range(p, b, i, &begin, &end);
        for (int64_t j = 0; j < p->len_kv; j++) {
            bool visible = j >= begin && j < end && visibility_mask_allows(p, b, h, i, j);
            double bias = visible ? visibility_bias_at(p, b, h, i, j) : 0.0;
            if (!visible || bias == -INFINITY) {
                row[j] = -INFINITY;
                continue;
            }
            const float *k_bjh = problem_row(&p->k, b, j, kv_head);
            double dot = 0.0;
            for (int64_t d = 0; d < p->dim; d++) dot += (double)q_bih[d] * (double)k_bjh[d];
            row[j] = (double)p->scale * dot + bias;
        }
    }
}

/* Softmax of one row in place, left unnormalised: row[j] = exp(row[j] - max)
 * (max-subtracted, so exp never overflows; hidden keys, -inf, give 0), and
 * the sum is returned; *row_max gets the max.  A row with no visible key
 * (max -inf) is set to 0 and returns sum 0: it reads nothing, never NaN. */
static double softmax_row(double *row, int64_t len, double *row_max) {
    double m = -INFINITY;
    for (int64_t j = 0; j < len; j++)
        if (row[j] > m) m = row[j];
    *row_max = m;
    if (m == -INFINITY) {
        memset(row, 0, sizeof(double) * (size_t)len);
        return 0.0;
    }
    double sum = 0.0;
    for (int64_t j = 0; j < len; j++) {
        row[j] = exp(row[j] - m);
        sum += row[j];
    }
    return sum;
}

/* -------------------------------------------------------------- forward */

size_t attn__ref_forward_workspace_size(const sdpa_problem *p) {
    return (size_t)p->len_q * (size_t)p->len_kv * sizeof(double);
}

attn_status attn__ref_forward(const sdpa_problem *p, void *workspace, attn_tensor *out,
                              float *weights, float *lse) {
    double *table = workspace;
    for (int64_t b = 0; b < p->batch; b++) {
        for (int64_t h = 0; h < p->heads_q; h++) {
            const int64_t kv_head = h / p->group;
            score_table(p, b, h, table);
            for (int64_t i = 0; i < p->len_q; i++) {
                double *row = table + i * p->len_kv, row_max;
                float *out_bih = problem_row(out, b, i, h);
                const int64_t row_index = (b * p->heads_q + h) * p->len_q + i;
                float *weights_row = weights ? weights + row_index * p->len_kv : NULL;
                const double sum = softmax_row(row, p->len_kv, &row_max); /* row: unnormalised weights */
                for (int64_t d = 0; d < p->dim_v; d++) {
                    double acc = 0.0;
                    for (int64_t j = 0; j < p->len_kv; j++)
                        if (row[j] != 0.0) acc += row[j] * (double)problem_row(&p->v, b, j, kv_head)[d];
                    out_bih[d] = sum > 0.0 ? (float)(acc / sum) : 0.0f;
                }
                if (weights_row)
                    for (int64_t j = 0; j < p->len_kv; j++)
                        weights_row[j] = sum > 0.0 ? (float)(row[j] / sum) : 0.0f;
                if (lse) lse[row_index] = sum > 0.0 ? (float)(row_max + log(sum)) : -INFINITY;
            }
        }
    }
    return ATTN_OK;
}

attn_status attn__ref_scores(const sdpa_problem *p, float *scores) {
    const size_t bytes = attn__ref_forward_workspace_size(p);
    double *table = malloc(bytes ? bytes : 1);
    if (!table)
        return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "cannot allocate the %lld x %lld score table",
                          (long long)p->len_q, (long long)p->len_kv);
    const int64_t cells = p->len_q * p->len_kv;
    for (int64_t b = 0; b < p->batch; b++)
        for (int64_t h = 0; h < p->heads_q; h++) {
            score_table(p, b, h, table);
            float *scores_bh = scores + (b * p->heads_q + h) * cells;
            for (int64_t c = 0; c < cells; c++) scores_bh[c] = (float)table[c];
        }
    free(table);
    return ATTN_OK;
}

/* ------------------------------------------------------------- backward */

size_t attn__ref_backward_workspace_size(const sdpa_problem *p) {
    const size_t s = (size_t)p->len_kv;
    return ((size_t)p->len_q * s + s + (size_t)p->dim + s * (size_t)p->dim + s * (size_t)p->dim_v) *
           sizeof(double);
}

/* table [L, S] <- the weights p_ij of batch b, query head h (0 in rows
 * that see no key: nothing flows back through them). */
static void weight_table(const sdpa_problem *p, int64_t b, int64_t h, double *table) {
    score_table(p, b, h, table);
    for (int64_t i = 0; i < p->len_q; i++) {
        double *row = table + i * p->len_kv, row_max;
        const double sum = softmax_row(row, p->len_kv, &row_max);
        if (sum > 0.0)
            for (int64_t j = 0; j < p->len_kv; j++) row[j] /= sum;
    }
}

attn_status attn__ref_backward(const sdpa_problem *p, void *workspace, const sdpa_backward_args *a) {
    const int64_t L = p->len_q, S = p->len_kv, D = p->dim, Dv = p->dim_v;
    double *p_bh = workspace;
    double *dp_row = p_bh + L * S;
    double *dq_row = dp_row + S;
    double *dk_bg = dq_row + D;
    double *dv_bg = dk_bg + S * D;

    for (int64_t b = 0; b < p->batch; b++) {
        for (int64_t g = 0; g < p->heads_kv; g++) {
            /* dk and dv of kv head g sum over the query heads of its group. */
            memset(dk_bg, 0, sizeof(double) * (size_t)(S * D));
            memset(dv_bg, 0, sizeof(double) * (size_t)(S * Dv));
            for (int64_t h = g * p->group; h < (g + 1) * p->group; h++) {
                weight_table(p, b, h, p_bh);
                for (int64_t i = 0; i < L; i++) {
                    const double *p_row = p_bh + i * S;
                    const float *q_bih = problem_row(&p->q, b, i, h);
                    const float *dout_bih = problem_row(a->dout, b, i, h);

                    /* forward was: o_i = sum_j p_ij v_j
                     * so: dp_ij = dot(dout_i, v_j),  dv_j += p_ij dout_i */
                    for (int64_t j = 0; j < S; j++) {
                        dp_row[j] = 0.0;
                        if (p_row[j] == 0.0) continue; /* hidden or underflowed: no path */
                        const float *v_bjg = problem_row(&p->v, b, j, g);
                        double dot = 0.0;
                        for (int64_t d = 0; d < Dv; d++) {
                            dot += (double)dout_bih[d] * (double)v_bjg[d];
                            dv_bg[j * Dv + d] += p_row[j] * (double)dout_bih[d];
                        }
                        dp_row[j] = dot;
                    }

                    /* forward was: p_ij = exp(s_ij) / sum_l exp(s_il)
                     * so: ds_ij = p_ij (dp_ij - sum_l p_il dp_il) */
                    double row_dot = 0.0;
                    for (int64_t j = 0; j < S; j++) row_dot += p_row[j] * dp_row[j];

                    /* forward was: s_ij = scale * dot(q_i, k_j) + bias_ij
                     * so: dq_i += scale ds_ij k_j,  dk_j += scale ds_ij q_i */
                    for (int64_t d = 0; d < D; d++) dq_row[d] = 0.0;
                    for (int64_t j = 0; j < S; j++) {
                        if (p_row[j] == 0.0) continue;
                        double ds = (double)p->scale * p_row[j] * (dp_row[j] - row_dot);
                        const float *k_bjg = problem_row(&p->k, b, j, g);
                        for (int64_t d = 0; d < D; d++) {
                            dq_row[d] += ds * (double)k_bjg[d];
                            dk_bg[j * D + d] += ds * (double)q_bih[d];
                        }
                    }
                    if (a->dq) {
                        float *dq_bih = problem_row(a->dq, b, i, h);
                        for (int64_t d = 0; d < D; d++) dq_bih[d] = (float)dq_row[d];
                    }
                }
            }
            for (int64_t j = 0; j < S; j++) {
                if (a->dk) {
                    float *dk_bjg = problem_row(a->dk, b, j, g);
                    for (int64_t d = 0; d < D; d++) dk_bjg[d] = (float)dk_bg[j * D + d];
                }
                if (a->dv) {
                    float *dv_bjg = problem_row(a->dv, b, j, g);
                    for (int64_t d = 0; d < Dv; d++) dv_bjg[d] = (float)dv_bg[j * Dv + d];
                }
            }
        }
    }
    return ATTN_OK;
}
