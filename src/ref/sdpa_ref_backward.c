/*
 * sdpa_ref_backward.c — the reference backward of attention: plain loops,
 * double accumulation, the weight table P of one (batch, head) materialised.
 * Like the reference forward it is the oracle the fast kernel is tested
 * against, so it recomputes everything from q, k, v in double and never
 * uses the forward's (float) out and lse.
 *
 * Shape legend: q [B, L, Hq, D]  k [B, S, Hkv, D]  v [B, S, Hkv, Dv]
 *               dout [B, L, Hq, Dv]  dq like q  dk like k  dv like v
 *   workspace (doubles): p_bh [L, S]  dp_row [S]  dq_row [D]  dk_bg [S, D]  dv_bg [S, Dv]
 *
 * The forward, per query row i of head h (kv head g = h / (Hq/Hkv)):
 *   s_ij = scale * dot(q_i, k_j) + bias_ij      (-inf where hidden)
 *   p_ij = exp(s_ij - max_j s_ij) / sum_j exp(...)
 *   o_i  = sum_j p_ij v_j
 * and its derivatives, each quoted below beside the line that computes it.
 */
#include "core/internal.h"

#include <math.h>
#include <string.h>

size_t attn_sdpa_ref_backward_workspace_size(const attn_problem *p) {
    size_t s = (size_t)p->len_kv;
    return ((size_t)p->len_q * s + s + (size_t)p->dim + s * (size_t)p->dim +
            s * (size_t)p->dim_v) * sizeof(double);
}

/* Fills p_bh [L, S] with the weights of batch b, query head h: the scores
 * (scale * q.k + bias, -inf where hidden) softmaxed per row.  A row with no
 * visible key stays all zero. */
static void weight_table(const attn_problem *p, int64_t b, int64_t h, double *p_bh) {
    const int64_t kv_head = h / p->group;
    for (int64_t i = 0; i < p->len_q; i++) {
        const float *q_bih = attn_row(&p->q, b, i, h);
        double *p_row = p_bh + i * p->len_kv;
        int64_t begin, end;
        attn_problem_key_range(p, b, i, &begin, &end);
        double row_max = -INFINITY;
        for (int64_t j = 0; j < p->len_kv; j++) {
            bool visible = j >= begin && j < end && attn_problem_mask_allows(p, b, h, i, j);
            double bias = visible ? attn_problem_bias_at(p, b, h, i, j) : 0.0;
            p_row[j] = -INFINITY;
            if (!visible || bias == -INFINITY) continue;
            const float *k_bjg = attn_row(&p->k, b, j, kv_head);
            double dot = 0.0;
            for (int64_t d = 0; d < p->dim; d++) dot += (double)q_bih[d] * (double)k_bjg[d];
            p_row[j] = (double)p->scale * dot + bias;
            if (p_row[j] > row_max) row_max = p_row[j];
        }
        if (row_max == -INFINITY) { /* no visible key: p = 0, nothing flows back */
            memset(p_row, 0, sizeof(double) * (size_t)p->len_kv);
            continue;
        }
        double sum = 0.0;
        for (int64_t j = 0; j < p->len_kv; j++) {
            p_row[j] = exp(p_row[j] - row_max);
            sum += p_row[j];
        }
        for (int64_t j = 0; j < p->len_kv; j++) p_row[j] /= sum;
    }
}

attn_status attn_sdpa_ref_backward(const attn_problem *p, void *workspace,
                                   const attn_backward_args *a) {
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
                    const float *q_bih = attn_row(&p->q, b, i, h);
                    const float *dout_bih = attn_row(a->dout, b, i, h);

                    /* forward was: o_i = sum_j p_ij v_j
                     * so: dp_ij = dot(dout_i, v_j),  dv_j += p_ij dout_i */
                    for (int64_t j = 0; j < S; j++) {
                        dp_row[j] = 0.0;
                        if (p_row[j] == 0.0) continue; /* hidden or underflowed: no path */
                        const float *v_bjg = attn_row(&p->v, b, j, g);
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
                        const float *k_bjg = attn_row(&p->k, b, j, g);
                        for (int64_t d = 0; d < D; d++) {
                            dq_row[d] += ds * (double)k_bjg[d];
                            dk_bg[j * D + d] += ds * (double)q_bih[d];
                        }
                    }
                    if (a->dq) {
                        float *dq_bih = attn_row(a->dq, b, i, h);
                        for (int64_t d = 0; d < D; d++) dq_bih[d] = (float)dq_row[d];
                    }
                }
            }
            for (int64_t j = 0; j < S; j++) {
                if (a->dk) {
                    float *dk_bjg = attn_row(a->dk, b, j, g);
                    for (int64_t d = 0; d < D; d++) dk_bjg[d] = (float)dk_bg[j * D + d];
                }
                if (a->dv) {
                    float *dv_bjg = attn_row(a->dv, b, j, g);
                    for (int64_t d = 0; d < Dv; d++) dv_bjg[d] = (float)dv_bg[j * Dv + d];
                }
            }
        }
    }
    return ATTN_OK;
}
