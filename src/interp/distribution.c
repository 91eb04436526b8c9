/*
 * distribution.c — how a next-token distribution changed: KL divergence and
 * probabilities of rows of logits [V] in double precision, and the k
 * largest entries of a row (top tokens, a pattern row's top keys).
 */
#include "interp/interp.h"

#include <math.h>

/* The log-sum-exp of a row, max-subtracted, in double. */
static double log_sum_exp(const float *x, int64_t V) {
    double max = -INFINITY, sum = 0;
    for (int64_t i = 0; i < V; i++) max = fmax(max, (double)x[i]);
    for (int64_t i = 0; i < V; i++) sum += exp((double)x[i] - max);
    return max + log(sum);
}

double attn_logits_kl(const float *p_logits, const float *q_logits, int64_t V) {
    const double lp = log_sum_exp(p_logits, V), lq = log_sum_exp(q_logits, V);
    double kl = 0;
    for (int64_t i = 0; i < V; i++) {
        const double log_p = (double)p_logits[i] - lp, log_q = (double)q_logits[i] - lq;
        kl += exp(log_p) * (log_p - log_q);
    }
    return kl;
}

double attn_logits_prob(const float *logits, int64_t V, int64_t id) {
    return exp((double)logits[id] - log_sum_exp(logits, V));
}

void attn_top_k(const float *x, int64_t n, int64_t k, int64_t *ids) {
    for (int64_t j = 0; j < k; j++) ids[j] = -1;
    for (int64_t i = 0; i < n; i++) {
        int64_t j = k;
        while (j > 0 && (ids[j - 1] < 0 || x[i] > x[ids[j - 1]])) j--;
        if (j >= k) continue;
        memmove(ids + j + 1, ids + j, (size_t)(k - j - 1) * sizeof *ids);
        ids[j] = i;
    }
}
