/*
 * sampler.c — choosing the next token from logits (attn_decoder.h,
 * "sampling"): greedy, temperature, top-k, top-p, with SplitMix64 as the
 * random source (its definition is in the header: it is part of the
 * contract that a seed gives the same tokens everywhere).
 *
 * Shape legend: V vocabulary.  logits [V]; scratch: cand [V] (the
 * candidates' logits and ids, best first when a cut needs the order),
 * p [V] double (their weights).
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
#include <stdlib.h>

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
    attn_sampler *s = calloc(1, sizeof *s);
    if (s) {
        s->cand = malloc((size_t)vocab * sizeof *s->cand);
        s->p = malloc((size_t)vocab * sizeof *s->p);
    }
    if (!s || !s->cand || !s->p) {
        attn_sampler_free(s);
        return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "attn_sampler_new: no memory for the scratch of %lld tokens",
                          (long long)vocab);
    }
    s->opt = *opt;
    s->vocab = vocab;
    s->state = opt->seed;
    *out = s;
    return ATTN_OK;
}

void attn_sampler_free(attn_sampler *s) {
    if (!s) return;
    free(s->cand);
    free(s->p);
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

attn_status attn_sampler_sample(attn_sampler *s, const float *logits, int32_t *id) {
    if (!s || !logits || !id)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_sampler_sample: %s is NULL",
                          !s ? "the sampler" : !logits ? "logits" : "id");
    const int64_t V = s->vocab;
    int32_t best = -1;
    for (int64_t i = 0; i < V; i++) {
        if (isnan(logits[i]))
            return attn__fail(ATTN_ERR_NONFINITE, "attn_sampler_sample: logit %lld is NaN", (long long)i);
        if (best < 0 ? logits[i] > -INFINITY : logits[i] > logits[best]) best = (int32_t)i;
    }
    if (best < 0) return attn__fail(ATTN_ERR_NONFINITE, "attn_sampler_sample: every logit is -inf");
    const attn_sampler_options *o = &s->opt;
    if (o->temperature == 0.0 || o->top_k == 1) {
        *id = best;
        return ATTN_OK;
    }
    /* A temperature so small that 1 / T overflows is greedy too (and
     * would make 0 * inf below). */
    const double inv_t = 1.0 / o->temperature;
    if (isinf(inv_t)) {
        *id = best;
        return ATTN_OK;
    }
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
    const double u = attn_sampler_uniform(s) * total;
    double cumulative = 0.0;
    for (int64_t j = 0; j < n; j++) {
        cumulative += s->p[j];
        if (u < cumulative) {
            *id = s->cand[j].id;
            return ATTN_OK;
        }
    }
    /* u * total rounded up to the last sum: the last candidate with weight. */
    for (int64_t j = n - 1; j >= 0; j--)
        if (s->p[j] > 0.0) {
            *id = s->cand[j].id;
            return ATTN_OK;
        }
    *id = best;
    return ATTN_OK;
}
