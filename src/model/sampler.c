/*
 * sampler.c — choosing the next token from logits (attn_decoder.h,
 * "sampling"): repetition, frequency and presence penalties over the
 * history, greedy, temperature, top-k, top-p, min-p, with SplitMix64 as
 * the random source (its definition is in the header: it is part of the
 * contract that a seed gives the same tokens everywhere).
 *
 * Shape legend: V vocabulary.  logits [V]; scratch: cand [V] (the
 * candidates' logits and ids, best first when a cut needs the order),
 * p [V] double (their weights); with penalties, work [V] (the logits
 * penalized) and count [V] (each token's count in the window, zero
 * outside a draw).
 *
 * Cost per draw: greedy and pure temperature one or two passes over V;
 * top-k up to 256 an insertion into a sorted prefix (V comparisons, few
 * moves), larger k and top-p a full sort of V (V log V: 262,144 entries
 * are a few ms here, beside a decode step's hundreds).  The sort compares
 * (logit, id) pairs held in the scratch, so two samplers may run in two
 * threads at once.
 */
#include "model/decoder.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

typedef struct candidate {
    float logit;
    int32_t id;
} candidate;

struct attn_sampler {
    attn_sampler_options opt;
    int64_t vocab;
    uint64_t state;
    candidate *cand; /* [V] */
    double *p;       /* [V] */
    bool penalties;  /* some penalty is on: the history is kept */
    float *work;     /* [V], with penalties */
    int32_t *count;  /* [V], with penalties */
    int32_t *history;
    int64_t n_history, cap_history;
};

static uint64_t splitmix64_next(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

double attn_sampler_uniform(attn_sampler *s) {
    if (!s) return 0.0;
    return (double)(splitmix64_next(&s->state) >> 11) * 0x1.0p-53;
}

attn_status attn_sampler_new(const attn_sampler_options *opt_in, int64_t vocab, attn_sampler **out) {
    if (out) *out = NULL;
    if (!out) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_sampler_new: out is NULL");
    static const attn_sampler_options defaults = ATTN_SAMPLER_OPTIONS_INIT;
    attn_sampler_options o;
    attn_status st = options_copy(&o, sizeof o, &defaults, opt_in, "attn_sampler_options");
    if (st) return st;
    const attn_sampler_options *opt = &o;
    if (vocab <= 0 || vocab > INT32_MAX)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_sampler_new: vocab is %lld: must be in [1, %d]",
                          (long long)vocab, INT32_MAX);
    if (!(opt->temperature >= 0.0) || isinf(opt->temperature))
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT,
                          "attn_sampler_new: temperature is %g: must be finite and >= 0 (0 = greedy)",
                          opt->temperature);
    if (opt->top_k < 0)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_sampler_new: top_k is %lld: must be >= 0 (0 = all)",
                          (long long)opt->top_k);
    if (!(opt->top_p > 0.0 && opt->top_p <= 1.0))
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_sampler_new: top_p is %g: must be in (0, 1]",
                          opt->top_p);
    if (!(opt->repetition_penalty > 0.0) || isinf(opt->repetition_penalty))
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT,
                          "attn_sampler_new: repetition_penalty is %g: must be finite and > 0 (1 = none)",
                          opt->repetition_penalty);
    if (!isfinite(opt->frequency_penalty) || !isfinite(opt->presence_penalty))
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_sampler_new: %s_penalty is %g: must be finite (0 = none)",
                          isfinite(opt->frequency_penalty) ? "presence" : "frequency",
                          isfinite(opt->frequency_penalty) ? opt->presence_penalty : opt->frequency_penalty);
    if (opt->penalty_last_n < 0)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_sampler_new: penalty_last_n is %lld: must be >= 0 (0 = all)",
                          (long long)opt->penalty_last_n);
    if (!(opt->min_p >= 0.0 && opt->min_p <= 1.0))
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_sampler_new: min_p is %g: must be in [0, 1] (0 = no cut)",
                          opt->min_p);
    const bool penalties = opt->repetition_penalty != 1.0 || opt->frequency_penalty != 0.0 || opt->presence_penalty != 0.0;
    attn_sampler *s = calloc(1, sizeof *s);
    if (s) {
        s->cand = malloc((size_t)vocab * sizeof *s->cand);
        s->p = malloc((size_t)vocab * sizeof *s->p);
        if (penalties) {
            s->work = malloc((size_t)vocab * sizeof *s->work);
            s->count = calloc((size_t)vocab, sizeof *s->count);
        }
    }
    if (!s || !s->cand || !s->p || (penalties && (!s->work || !s->count))) {
        attn_sampler_free(s);
        return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "attn_sampler_new: no memory for the scratch of %lld tokens",
                          (long long)vocab);
    }
    s->opt = *opt;
    s->vocab = vocab;
    s->state = opt->seed;
    s->penalties = penalties;
    *out = s;
    return ATTN_OK;
}

void attn_sampler_free(attn_sampler *s) {
    if (!s) return;
    free(s->cand);
    free(s->p);
    free(s->work);
    free(s->count);
    free(s->history);
    free(s);
}

/* Deprecated names, until 1.0 (attn_decoder.h). */
attn_status attn_sampler_create(const attn_sampler_options *opt, int64_t vocab, attn_sampler **out) {
    return attn_sampler_new(opt, vocab, out);
}
/* End of the deprecated names. */

/* Larger logit first; the lower id among equals (a total order, so the
 * result does not depend on the sort's algorithm). */
static int before(const candidate *a, const candidate *b) {
    return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}
static int better_first(const void *a, const void *b) {
    return before(a, b) ? -1 : before(b, a) ? 1 : 0;
}

enum { INSERTION_TOP_K = 256 };

/* cand[0 .. k) = the k best of logits [V], best first. */
static void select_top(const float *logits, int64_t V, int64_t k, candidate *cand) {
    if (k > INSERTION_TOP_K) {
        for (int64_t i = 0; i < V; i++) cand[i] = (candidate){logits[i], (int32_t)i};
        qsort(cand, (size_t)V, sizeof *cand, better_first);
        return;
    }
    int64_t held = 0;
    for (int64_t i = 0; i < V; i++) {
        const candidate c = {logits[i], (int32_t)i};
        if (held == k && !before(&c, &cand[k - 1])) continue;
        int64_t j = held < k ? held++ : k - 1;
        while (j > 0 && before(&c, &cand[j - 1])) {
            cand[j] = cand[j - 1];
            j--;
        }
        cand[j] = c;
    }
}

/* ------------------------------------------------------------ history */

attn_status attn_sampler_accept(attn_sampler *s, const int32_t *ids, int64_t n) {
    if (!s || (!ids && n) || n < 0)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_sampler_accept: %s", !s ? "the sampler is NULL"
                                                                                : n < 0 ? "n is negative" : "ids is NULL");
    for (int64_t k = 0; k < n; k++)
        if (ids[k] < 0 || ids[k] >= s->vocab)
            return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_sampler_accept: id %lld (at %lld) is outside [0, %lld)",
                              (long long)ids[k], (long long)k, (long long)s->vocab);
    if (!s->penalties) return ATTN_OK;
    /* With a window only its last penalty_last_n tokens matter: keep at
     * most twice that, sliding down when full. */
    const int64_t window = s->opt.penalty_last_n;
    if (window && n > window) {
        ids += n - window;
        n = window;
    }
    if (window && s->n_history + n > 2 * window) {
        const int64_t keep = window - n > 0 ? window - n : 0;
        memmove(s->history, s->history + s->n_history - keep, (size_t)keep * sizeof *s->history);
        s->n_history = keep;
    }
    if (s->n_history + n > s->cap_history) {
        int64_t cap = s->cap_history ? s->cap_history : 256;
        while (cap < s->n_history + n) cap *= 2;
        int32_t *grown = realloc(s->history, (size_t)cap * sizeof *grown);
        if (!grown)
            return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "attn_sampler_accept: no memory for %lld tokens", (long long)cap);
        s->history = grown;
        s->cap_history = cap;
    }
    memcpy(s->history + s->n_history, ids, (size_t)n * sizeof *ids);
    s->n_history += n;
    return ATTN_OK;
}

void attn_sampler_forget(attn_sampler *s) {
    if (s) s->n_history = 0;
}

/* The penalties on logits into s->work (attn_decoder.h, steps 1-2), each
 * token of the window once: counts first, then each counted token
 * penalized and its count cleared. */
static const float *penalized(attn_sampler *s, const float *logits) {
    if (!s->penalties || !s->n_history) return logits;
    memcpy(s->work, logits, (size_t)s->vocab * sizeof *s->work);
    const int64_t window = s->opt.penalty_last_n;
    const int64_t first = window && s->n_history > window ? s->n_history - window : 0;
    for (int64_t k = first; k < s->n_history; k++) s->count[s->history[k]]++;
    const float r = (float)s->opt.repetition_penalty;
    const float freq = (float)s->opt.frequency_penalty, presence = (float)s->opt.presence_penalty;
    for (int64_t k = first; k < s->n_history; k++) {
        const int32_t t = s->history[k];
        const int32_t count = s->count[t];
        if (!count) continue; /* penalized already */
        float x = s->work[t];
        if (r != 1.0f) x = x > 0.0f ? x / r : x * r;
        x -= (float)count * freq + presence;
        s->work[t] = x;
        s->count[t] = 0;
    }
    return s->work;
}

/* ------------------------------------------------------------ drawing */

/* The distribution the next draw uses: cand[0 .. *n) with weights p[0 .. *n)
 * summing to *total; *n = 0 for greedy, *best then the token. */
static attn_status distribution(attn_sampler *s, const float *raw, const char *fn, int64_t *n_out, double *total_out,
                                int32_t *best_out) {
    const int64_t V = s->vocab;
    for (int64_t i = 0; i < V; i++)
        if (isnan(raw[i])) return attn__fail(ATTN_ERR_NONFINITE, "%s: logit %lld is NaN", fn, (long long)i);
    const float *logits = penalized(s, raw);
    int32_t best = -1;
    for (int64_t i = 0; i < V; i++)
        if (best < 0 ? logits[i] > -INFINITY : logits[i] > logits[best]) best = (int32_t)i;
    if (best < 0) return attn__fail(ATTN_ERR_NONFINITE, "%s: every logit is -inf", fn);
    *best_out = best;
    *n_out = 0;
    const attn_sampler_options *o = &s->opt;
    if (o->temperature == 0.0 || o->top_k == 1) return ATTN_OK;
    /* A temperature so small that 1 / T overflows is greedy too (and
     * would make 0 * inf below). */
    const double inv_t = 1.0 / o->temperature;
    if (isinf(inv_t)) return ATTN_OK;
    /* The candidates, best first when a cut needs the order; all of them,
     * in id order, otherwise. */
    int64_t n = V;
    if (o->top_k > 0 && o->top_k < V) {
        n = o->top_k;
        select_top(logits, V, n, s->cand);
    } else if (o->top_p < 1.0) {
        select_top(logits, V, V, s->cand);
    } else {
        for (int64_t i = 0; i < V; i++) s->cand[i] = (candidate){logits[i], (int32_t)i};
    }
    /* Softmax of z = logit / T over the candidates, max-subtracted before
     * the division (so a small T cannot overflow: the exponents are <= 0). */
    const double top = logits[best];
    double total = 0.0;
    for (int64_t j = 0; j < n; j++) {
        const float x = s->cand[j].logit;
        s->p[j] = x == -INFINITY ? 0.0 : exp(((double)x - top) * inv_t);
        total += s->p[j];
    }
    if (o->top_p < 1.0) {
        /* Hugging Face keeps the tokens before the cumulative probability
         * first reaches top_p, and the one that reaches it. */
        double cumulative = 0.0;
        int64_t keep = 0;
        while (keep < n) {
            cumulative += s->p[keep++];
            if (cumulative >= o->top_p * total) break;
        }
        n = keep;
        total = cumulative;
    }
    if (o->min_p > 0.0) {
        /* p_i / p_max = exp(z_i - z_max): the top token's weight is 1. */
        total = 0.0;
        for (int64_t j = 0; j < n; j++) {
            if (s->p[j] < o->min_p) s->p[j] = 0.0;
            total += s->p[j];
        }
    }
    *n_out = n;
    *total_out = total;
    return ATTN_OK;
}

attn_status attn_sampler_sample(attn_sampler *s, const float *logits, int32_t *id) {
    if (!s || !logits || !id)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_sampler_sample: %s is NULL",
                          !s ? "the sampler" : !logits ? "logits" : "id");
    int64_t n;
    double total;
    int32_t best, chosen;
    attn_status st = distribution(s, logits, "attn_sampler_sample", &n, &total, &best);
    if (st) return st;
    chosen = best;
    if (n) {
        const double u = attn_sampler_uniform(s) * total;
        double cumulative = 0.0;
        int64_t j = 0;
        for (; j < n; j++) {
            cumulative += s->p[j];
            if (u < cumulative) break;
        }
        if (j < n) chosen = s->cand[j].id;
        else /* u * total rounded up to the last sum: the last candidate with weight. */
            for (int64_t k = n - 1; k >= 0; k--)
                if (s->p[k] > 0.0) {
                    chosen = s->cand[k].id;
                    break;
                }
    }
    st = attn_sampler_accept(s, &chosen, 1);
    if (st) return st;
    *id = chosen;
    return ATTN_OK;
}

attn_status attn_sampler_probabilities(attn_sampler *s, const float *logits, double *probs) {
    if (!s || !logits || !probs)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_sampler_probabilities: %s is NULL",
                          !s ? "the sampler" : !logits ? "logits" : "probs");
    int64_t n;
    double total;
    int32_t best;
    const attn_status st = distribution(s, logits, "attn_sampler_probabilities", &n, &total, &best);
    if (st) return st;
    memset(probs, 0, (size_t)s->vocab * sizeof *probs);
    if (!n) {
        probs[best] = 1.0;
        return ATTN_OK;
    }
    for (int64_t j = 0; j < n; j++) probs[s->cand[j].id] = s->p[j] / total;
    return ATTN_OK;
}
