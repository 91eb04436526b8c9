/*
 * visibility.h — which keys a query may read: the one place the rules of
 * docs/semantics.md are written (causal in both alignments, the sliding
 * window, key lengths at global positions, the boolean mask and the bias,
 * each broadcast over size-1 dimensions).  Every kernel, the FLOP count and
 * the tools go through these functions.
 *
 * Shape legend: mask, bias [B|1, Hq|1, L|1, S|1] contiguous (size-1
 * dimensions broadcast); scores in any layout, one row at a time.
 */
#ifndef ATTN_BASE_VISIBILITY_H
#define ATTN_BASE_VISIBILITY_H

#include "base/problem.h"

#include <math.h>

/* The keys that the structural rules (causal, window, key lengths) leave
 * visible to query i of batch b form one contiguous range [*begin, *end),
 * possibly empty.  Kernels iterate over it and skip everything else; the
 * boolean mask and the bias are applied per element on top. */
void attn__visibility_key_range(const sdpa_problem *p, int64_t b, int64_t i, int64_t *begin,
                                int64_t *end);

/* The structural bounds of query i before they meet: the causal and window
 * rules and the key length cap the end, the window's left side raises the
 * start.  Both grow with i, which makes a run of rows' hull the first
 * row's start and the last row's end. */
static inline void visibility_bounds(const sdpa_problem *p, int64_t b, int64_t i, int64_t *begin, int64_t *end) {
    /* Every bound is compared before it is formed, or formed with
     * saturation: window sides may be anything up to INT64_MAX. */
    int64_t lo = 0, hi = p->len_kv; /* [lo, hi) */
    const int64_t diagonal = sat_add(i, p->diagonal_offset);
    if (p->opt.causal && diagonal < hi - 1) hi = diagonal + 1;
    if (p->opt.window) {
        if (p->opt.window_left >= 0) {
            const int64_t first = sat_sub(diagonal, p->opt.window_left);
            if (first > lo) lo = first;
        }
        if (p->opt.window_right >= 0) {
            const int64_t last = sat_add(diagonal, p->opt.window_right);
            if (last < hi - 1) hi = last + 1;
        }
    }
    if (p->opt.key_lengths && p->opt.key_lengths[b] - p->opt.key_start < hi)
        hi = p->opt.key_lengths[b] - p->opt.key_start; /* key lengths count global positions */
    *begin = lo;
    *end = hi;
}

/* Bounds [lo, hi) as a range of the call's keys: empty when they cross. */
static inline void visibility_clamp(const sdpa_problem *p, int64_t lo, int64_t hi, int64_t *begin, int64_t *end) {
    if (hi < lo) hi = lo;
    if (lo > p->len_kv) lo = hi = p->len_kv;
    *begin = lo;
    *end = hi;
}

/* The hull of the structural ranges of query rows [first, first + n) of
 * batch b (n >= 1): every key any of them may see lies in [*begin, *end),
 * an empty range when the bounds cross.  For n = 1 it is the row's range
 * (attn__visibility_key_range).  For longer runs it may hold keys no row
 * sees (beyond a row whose own range is empty); what it is for is
 * skipping whole blocks of work: ring attention skips the pairs of runs
 * that cannot meet.  Inline: libattn_mpi asks it too. */
static inline void visibility_rows_key_range(const sdpa_problem *p, int64_t b, int64_t first, int64_t n,
                                             int64_t *begin, int64_t *end) {
    int64_t lo, hi, unused;
    visibility_bounds(p, b, first, &lo, &unused);
    visibility_bounds(p, b, first + n - 1, &unused, &hi);
    visibility_clamp(p, lo, hi, begin, end);
}

/* Element (b, h, i, key 0) of a broadcast [B|1, Hq|1, L|1, S|1] array, and
 * in *step the distance between consecutive keys (0 when the key dimension
 * broadcasts). */
static inline int64_t visibility_broadcast_row(const int64_t shape[4], int64_t b, int64_t h,
                                               int64_t i, int64_t *step) {
    *step = shape[3] > 1 ? 1 : 0;
    return (((shape[0] > 1 ? b : 0) * shape[1] + (shape[1] > 1 ? h : 0)) * shape[2] +
            (shape[2] > 1 ? i : 0)) * shape[3];
}

/* True when the mask (if any) allows (b, h, i, j); h is the query head. */
static inline bool visibility_mask_allows(const sdpa_problem *p, int64_t b, int64_t h, int64_t i,
                                          int64_t j) {
    if (!p->opt.mask) return true;
    int64_t step, row = visibility_broadcast_row(p->opt.mask_shape, b, h, i, &step);
    return p->opt.mask[row + j * step] != 0;
}

/* The bias (if any) at (b, h, i, j); 0 without a bias. */
static inline float visibility_bias_at(const sdpa_problem *p, int64_t b, int64_t h, int64_t i,
                                       int64_t j) {
    if (!p->opt.bias) return 0.0f;
    int64_t step, row = visibility_broadcast_row(p->opt.bias_shape, b, h, i, &step);
    return p->opt.bias[row + j * step];
}

/* True when key j is visible to query row (b, h, i) whose structural range
 * (attn__visibility_key_range) is [begin, end): inside the range, allowed by
 * the mask, and not at a -inf bias.  Every rule at once, for one element:
 * what the reference computes with, and what the fast kernels consult on
 * their rare exact paths (a key that holds a non-finite value matters to
 * the rows that see it, and to no other). */
static inline bool visibility_allows(const sdpa_problem *p, int64_t b, int64_t h, int64_t i,
                                     int64_t begin, int64_t end, int64_t j) {
    return j >= begin && j < end && visibility_mask_allows(p, b, h, i, j) &&
           visibility_bias_at(p, b, h, i, j) != -INFINITY;
}

/* Applies the rules the score kernels do not know about to keys
 * [key0, key0 + n) of query row (b, h, i) whose structural range is
 * [begin, end): s[j * step] is the score of key key0 + j, in base 2
 * (log2(e) times the natural score) once rescaled.  Keys outside the range,
 * keys the mask hides and keys at a -inf bias become -inf, whatever their
 * score was (a NaN from a key that holds garbage included); visible keys
 * with a bias or ALiBi (logits.h) become
 * s * rescale + log2(e) * (bias + alibi) (the bias in one rounding, ALiBi's
 * in float), the others stay as they are.
 * The flash forward's scores are already in base 2 (rescale 1); the flash
 * backward's are raw dot products, which it rescales here when there is a
 * bias or ALiBi (and by itself otherwise). */
void attn__visibility_mask_scores(const sdpa_problem *p, int64_t b, int64_t h, int64_t i,
                                  int64_t begin, int64_t end, int64_t key0, int64_t n, float *s,
                                  int64_t step, float rescale);

/* The number of (batch, query head, query, key) quadruples visible under
 * every rule, the boolean mask and -inf biases included: what a kernel
 * computes usefully (FLOP counts, DESIGN.md §5). */
double attn__visibility_pairs(const sdpa_problem *p);

#endif /* ATTN_BASE_VISIBILITY_H */
