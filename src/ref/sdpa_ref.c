/*
 * sdpa_ref.c — the reference attention kernels, forward and backward:
 * plain loops, double accumulation, one query row at a time.  They are the
 * oracle every fast kernel is tested against, so they are written to be
 * obviously right, not fast, and follow the chapter step by step: score,
 * mask, softmax per query row over the visible keys, weighted sum; and for
 * the backward, the chain rule through each of those lines.  The row
 * routines are also the fast kernels' exact path: a row whose fp32
 * computation went non-finite is recomputed here, so every rule is written
 * once (docs/semantics.md, "Numbers and errors").
 *
 * Shape legend: q [B, L, Hq, D]  k [B, S, Hkv, D]  v [B, S, Hkv, Dv]
 *               out [B, L, Hq, Dv]  weights [B, Hq, L, S]  lse [B, Hq, L]
 *               dout like out, dq like q, dk like k, dv like v
 * Every tensor may hold float32, float16 or bfloat16 (any mix): each element
 * is converted exactly to double when read (problem_get), each output
 * rounded once to its tensor's dtype (problem_set, nearest even).
 *   forward workspace (doubles):  scores [S]  acc [Dv]
 *   backward workspace (doubles): p_row [S]  dp_row [S]  dq_row [D]
 *                                 dk_bg [S, D]  dv_bg [S, Dv]
 *
 * The forward, per query row i of head h (kv head g = h / (Hq/Hkv)), over
 * the keys j visible to it (visibility.h) and the head's sink (logits.h):
 *   s_ij = softcap(scale * dot(q_i, k_j)) + bias_ij + alibi_h (j - i - offset)
 *   m_i  = max(max_j s_ij, sink_h)
 *   p_ij = exp(s_ij - m_i) / (exp(sink_h - m_i) + sum_j exp(s_ij - m_i))
 *   o_i  = sum_j p_ij v_j
 *
 * Non-finite values.  With finite inputs every score is finite in double
 * (|q.k| <= D * FLT_MAX^2 and scale <= FLT_MAX stay far below DBL_MAX), so
 * a visible score that is not finite means a NaN or Inf in q_i or in a
 * visible k_j, or a NaN or +inf bias.  Such a row is poisoned: its output,
 * the weights of its visible keys and its lse are NaN.  (IEEE alone would
 * not always say so: the max skips a NaN score, and a -inf one gets weight
 * 0, either way a plausible number.)  A NaN or Inf in a visible v_j reaches
 * the output elements that read it, by IEEE rules, even through a weight
 * that underflowed to 0; weights and lse do not read v.  Hidden keys are
 * never read at all.
 */
#include "ref/ref.h"

#include "base/logits.h"
#include "base/visibility.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------ one query row */

/* Query row (b, h, i) of a problem: its query, its kv head, its structural
 * key range, and optionally room to keep its scores. */
typedef struct ref_row {
    const sdpa_problem *p;
    int64_t b, h, i, kv_head, begin, end;
    double alibi_slope; /* of head h; 0 without ALiBi */
    const void *q_bih;  /* of q's dtype */
    double *scores; /* [S]: the visible keys' scores once computed, or NULL: recomputed */
} ref_row;

static ref_row row_at(const sdpa_problem *p, int64_t b, int64_t h, int64_t i, double *scores) {
    ref_row r = {p, b, h, i, h / p->group, 0, 0, attn__logits_alibi_slope(p, h), problem_row_any(&p->q, b, i, h),
                 scores};
    attn__visibility_key_range(p, b, i, &r.begin, &r.end);
    return r;
}

static bool row_sees(const ref_row *r, int64_t j) {
    return visibility_allows(r->p, r->b, r->h, r->i, r->begin, r->end, j);
}

/* scale * q_i.k_j: the raw logit, before the score stage of logits.h. */
static double raw_score(const ref_row *r, int64_t j) {
    const sdpa_problem *p = r->p;
    const void *k_bjg = problem_kv_row(p, &p->k, r->b, j, r->kv_head);
    double dot = 0.0;
    for (int64_t d = 0; d < p->dim; d++)
        dot += (double)problem_get(p->q.dtype, r->q_bih, d) * (double)problem_get(p->k.dtype, k_bjg, d);
    return (double)p->scale * dot;
}

/* softcap(scale * q_i.k_j) + bias_ij + ALiBi's bias for a visible key j
 * (logits.h): the one place the reference computes a score. */
static double score_compute(const ref_row *r, int64_t j) {
    const sdpa_problem *p = r->p;
    return logits_softcap(p, raw_score(r, j)) + (double)visibility_bias_at(p, r->b, r->h, r->i, j) +
           logits_alibi_bias(p, r->alibi_slope, r->i, j);
}

double attn__ref_score(const sdpa_problem *p, int64_t b, int64_t h, int64_t i, int64_t j) {
    const ref_row r = row_at(p, b, h, i, NULL);
    return score_compute(&r, j);
}

double attn__ref_softcap_slope(const sdpa_problem *p, int64_t b, int64_t h, int64_t i, int64_t j) {
    if (!logits_softcapped(p)) return 1.0;
    const ref_row r = row_at(p, b, h, i, NULL);
    return logits_softcap_slope(p, raw_score(&r, j));
}

/* The score of visible key j, from the cache when the row has one (filled
 * by row_max_of, which every pass follows). */
static double row_score(const ref_row *r, int64_t j) {
    return r->scores ? r->scores[j] : score_compute(r, j);
}

/* What the first pass over a row's keys finds. */
typedef struct row_max {
    double max;     /* over the visible keys' finite scores              */
    bool any;       /* the row sees at least one key                     */
    bool nonfinite; /* a visible score is NaN or infinite: a non-finite input */
} row_max;

static row_max row_max_of(ref_row *r) {
    row_max m = {-INFINITY, false, false};
    for (int64_t j = 0; j < r->p->len_kv; j++) {
        if (!row_sees(r, j)) continue;
        const double s = score_compute(r, j);
        if (r->scores) r->scores[j] = s;
        m.any = true;
        if (!isfinite(s))
            m.nonfinite = true;
        else if (s > m.max)
            m.max = s;
    }
    return m;
}

/* The softmax's shift of a row, max(max_j s_ij, sink_h) (the sink -inf
 * when there is none), and its denominator: the sum of exp(s - shift) over
 * the visible keys plus exp(sink - shift) (shift-subtracted, so exp never
 * overflows). */
static double row_shift_of(const ref_row *r, const row_max *m) {
    const double sink = logits_sink(r->p, r->h);
    return sink > m->max ? sink : m->max;
}

static double row_sum_of(const ref_row *r, double shift) {
    double sum = exp(logits_sink(r->p, r->h) - shift);
    for (int64_t j = 0; j < r->p->len_kv; j++)
        if (row_sees(r, j)) sum += exp(row_score(r, j) - shift);
    return sum;
}

void attn__ref_forward_row(const sdpa_problem *p, int64_t b, int64_t h, int64_t i, double *scores,
                           double *acc, attn_tensor *out, float *weights_row, float *lse) {
    ref_row r = row_at(p, b, h, i, scores);
    void *out_row = problem_row_any(out, b, i, h);
    const row_max m = row_max_of(&r);
    if (!m.any || m.nonfinite) {
        /* A row that sees no key reads nothing: output 0, weights 0, lse
         * the sink's (-inf without one), never NaN.  A poisoned row says so
         * in every output. */
        const float fill = m.any ? NAN : 0.0f;
        for (int64_t d = 0; d < p->dim_v; d++) problem_set(out->dtype, out_row, d, fill);
        if (weights_row)
            for (int64_t j = 0; j < p->len_kv; j++) weights_row[j] = row_sees(&r, j) ? NAN : 0.0f;
        if (lse) *lse = m.any ? NAN : (float)logits_sink(p, h);
        return;
    }
    const double shift = row_shift_of(&r, &m), sum = row_sum_of(&r, shift);
    for (int64_t d = 0; d < p->dim_v; d++) acc[d] = 0.0;
    for (int64_t j = 0; j < p->len_kv; j++) {
        if (!row_sees(&r, j)) continue;
        const double e = exp(row_score(&r, j) - shift); /* the unnormalised weight */
        const void *v_bjg = problem_kv_row(p, &p->v, b, j, r.kv_head);
        for (int64_t d = 0; d < p->dim_v; d++) acc[d] += e * (double)problem_get(p->v.dtype, v_bjg, d);
    }
    for (int64_t d = 0; d < p->dim_v; d++) problem_set(out->dtype, out_row, d, acc[d] / sum);
    if (weights_row)
        for (int64_t j = 0; j < p->len_kv; j++)
            weights_row[j] = row_sees(&r, j) ? (float)(exp(row_score(&r, j) - shift) / sum) : 0.0f;
    if (lse) *lse = (float)(shift + log(sum));
}

/* -------------------------------------------------------------- forward */

size_t attn__ref_forward_workspace_size(const sdpa_problem *p) {
    return ((size_t)p->len_kv + (size_t)p->dim_v) * sizeof(double);
}

attn_status attn__ref_forward(const sdpa_problem *p, void *workspace, attn_tensor *out,
                              float *weights, float *lse) {
    double *scores = workspace, *acc = scores + p->len_kv;
    progress_meter meter;
    attn__progress_begin(&meter, &p->opt, p->batch * p->heads_q * p->len_q);
    for (int64_t b = 0; b < p->batch; b++)
        for (int64_t h = 0; h < p->heads_q; h++)
            for (int64_t i = 0; i < p->len_q; i++) {
                const int64_t row_index = (b * p->heads_q + h) * p->len_q + i;
                attn__ref_forward_row(p, b, h, i, scores, acc, out,
                                      weights ? weights + row_index * p->len_kv : NULL,
                                      lse ? lse + row_index : NULL);
                progress_add(&meter, 1, true); /* one thread: the caller's */
            }
    attn__progress_end(&meter);
    return ATTN_OK;
}

attn_status attn__ref_scores(const sdpa_problem *p, float *scores) {
    for (int64_t b = 0; b < p->batch; b++)
        for (int64_t h = 0; h < p->heads_q; h++)
            for (int64_t i = 0; i < p->len_q; i++) {
                const ref_row r = row_at(p, b, h, i, NULL);
                float *scores_bhi = scores + ((b * p->heads_q + h) * p->len_q + i) * p->len_kv;
                for (int64_t j = 0; j < p->len_kv; j++)
                    scores_bhi[j] = row_sees(&r, j) ? (float)score_compute(&r, j) : -INFINITY;
            }
    return ATTN_OK;
}

/* ------------------------------------------------------------- backward */

/* Layout: the row scratch, dk_bg, dv_bg (attn__ref_backward_unit's), then
 * the sinks' gradients [Hq] (attn__ref_backward's). */
static size_t backward_unit_doubles(const sdpa_problem *p) {
    const size_t s = (size_t)p->len_kv;
    return 2 * s + (size_t)p->dim + s * (size_t)p->dim + s * (size_t)p->dim_v;
}

size_t attn__ref_backward_workspace_size(const sdpa_problem *p) {
    return (backward_unit_doubles(p) + (size_t)p->heads_q) * sizeof(double);
}

/* The backward of query row (b, h, i): adds its contributions to dk_bg
 * [S, D] and dv_bg [S, Dv] (kv head h / G, double) and writes its dq row
 * (when dq_bih is not NULL).  scratch: p_row [S], dp_row [S], dq_row [D].
 * A row that sees no key contributes nothing and gets dq = 0; a poisoned
 * row (a non-finite visible score) has NaN weights, which reach dq and the
 * dk, dv of the keys it sees. */
static void backward_row(const sdpa_problem *p, const sdpa_backward_args *a, int64_t b, int64_t h,
                         int64_t i, double *scratch, double *dk_bg, double *dv_bg, double *dsink) {
    const attn_dtype dout_dtype = a->dout->dtype;
    const void *dout_bih = problem_row_any(a->dout, b, i, h);
    const int64_t S = p->len_kv, D = p->dim, Dv = p->dim_v;
    double *p_row = scratch, *dp_row = p_row + S, *dq_row = dp_row + S;
    ref_row r = row_at(p, b, h, i, p_row);
    const row_max m = row_max_of(&r);
    for (int64_t d = 0; d < D; d++) dq_row[d] = 0.0;
    if (m.any) {
        const double shift = row_shift_of(&r, &m), sum = m.nonfinite ? NAN : row_sum_of(&r, shift);
        /* forward was: o_i = sum_j p_ij v_j
         * so: dp_ij = dot(dout_i, v_j),  dv_j += p_ij dout_i */
        double row_dot = 0.0;
        for (int64_t j = 0; j < S; j++) {
            if (!row_sees(&r, j)) continue;
            const double p_ij = m.nonfinite ? NAN : exp(p_row[j] - shift) / sum;
            const void *v_bjg = problem_row_any(&p->v, b, j, r.kv_head);
            double dot = 0.0;
            for (int64_t d = 0; d < Dv; d++) {
                const double dout_d = (double)problem_get(dout_dtype, dout_bih, d);
                dot += dout_d * (double)problem_get(p->v.dtype, v_bjg, d);
                dv_bg[j * Dv + d] += p_ij * dout_d;
            }
            p_row[j] = p_ij; /* the score is not needed any more */
            dp_row[j] = dot;
            row_dot += p_ij * dot;
        }
        /* forward was: p_ij = exp(s_ij) / (exp(sink) + sum_l exp(s_il)),
         * the sink a logit without a value (its dp is 0)
         * so: ds_ij = p_ij (dp_ij - sum_l p_il dp_il),  dsink = -p_sink sum_l p_il dp_il
         * forward was: s_ij = softcap(scale * dot(q_i, k_j)) + bias_ij + alibi_ij
         * so: dq_i += scale softcap'(raw_ij) ds_ij k_j,  dk_j += the same with q_i */
        if (dsink) *dsink -= (m.nonfinite ? NAN : exp(logits_sink(p, h) - shift) / sum) * row_dot;
        for (int64_t j = 0; j < S; j++) {
            if (!row_sees(&r, j)) continue;
            const double slope = logits_softcapped(p) ? logits_softcap_slope(p, raw_score(&r, j)) : 1.0;
            const double ds = (double)p->scale * p_row[j] * (dp_row[j] - row_dot) * slope;
            const void *k_bjg = problem_row_any(&p->k, b, j, r.kv_head);
            for (int64_t d = 0; d < D; d++) {
                dq_row[d] += ds * (double)problem_get(p->k.dtype, k_bjg, d);
                dk_bg[j * D + d] += ds * (double)problem_get(p->q.dtype, r.q_bih, d);
            }
        }
    }
    if (a->dq) {
        void *dq_bih = problem_row_any(a->dq, b, i, h);
        for (int64_t d = 0; d < D; d++) problem_set(a->dq->dtype, dq_bih, d, dq_row[d]);
    }
}

void attn__ref_backward_unit(const sdpa_problem *p, int64_t b, int64_t g, void *workspace,
                             const sdpa_backward_args *a, const uint8_t *only, progress_meter *meter,
                             double *dsinks) {
    const int64_t L = p->len_q, S = p->len_kv, D = p->dim, Dv = p->dim_v;
    double *row_scratch = workspace;
    double *dk_bg = row_scratch + 2 * S + D, *dv_bg = dk_bg + S * D;
    /* dk and dv of kv head g sum over the query heads of its group. */
    for (int64_t j = 0; j < S; j++) {
        const void *dk_bjg = only && a->dk ? problem_row_any(a->dk, b, j, g) : NULL;
        const void *dv_bjg = only && a->dv ? problem_row_any(a->dv, b, j, g) : NULL;
        for (int64_t d = 0; d < D; d++) dk_bg[j * D + d] = dk_bjg ? (double)problem_get(a->dk->dtype, dk_bjg, d) : 0.0;
        for (int64_t d = 0; d < Dv; d++) dv_bg[j * Dv + d] = dv_bjg ? (double)problem_get(a->dv->dtype, dv_bjg, d) : 0.0;
    }
    for (int64_t h = g * p->group; h < (g + 1) * p->group; h++)
        for (int64_t i = 0; i < L; i++) {
            if (only && !only[(h - g * p->group) * L + i]) continue;
            backward_row(p, a, b, h, i, row_scratch, dk_bg, dv_bg, dsinks ? dsinks + h : NULL);
            if (meter) progress_add(meter, 1, true);
        }
    for (int64_t j = 0; j < S; j++) {
        if (a->dk) {
            void *dk_bjg = problem_row_any(a->dk, b, j, g);
            for (int64_t d = 0; d < D; d++) problem_set(a->dk->dtype, dk_bjg, d, dk_bg[j * D + d]);
        }
        if (a->dv) {
            void *dv_bjg = problem_row_any(a->dv, b, j, g);
            for (int64_t d = 0; d < Dv; d++) problem_set(a->dv->dtype, dv_bjg, d, dv_bg[j * Dv + d]);
        }
    }
}

attn_status attn__ref_backward(const sdpa_problem *p, void *workspace, const sdpa_backward_args *a) {
    progress_meter meter;
    double *dsinks = a->dsinks ? (double *)workspace + backward_unit_doubles(p) : NULL;
    for (int64_t h = 0; dsinks && h < p->heads_q; h++) dsinks[h] = 0.0;
    attn__progress_begin(&meter, &p->opt, p->batch * p->heads_q * p->len_q);
    for (int64_t b = 0; b < p->batch; b++)
        for (int64_t g = 0; g < p->heads_kv; g++)
            attn__ref_backward_unit(p, b, g, workspace, a, NULL, &meter, dsinks);
    attn__progress_end(&meter);
    for (int64_t h = 0; dsinks && h < p->heads_q; h++) a->dsinks[h] = (float)dsinks[h];
    return ATTN_OK;
}
