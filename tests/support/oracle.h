/*
 * oracle.h — an independent attention oracle for the tests.
 *
 * It shares no code with the library's kernels and is structured
 * differently on purpose: keys and values are first expanded to one copy per
 * query head (Qwen3's repeat_kv) instead of indexing by group; visibility is
 * built as an explicit dense L x S boolean table from the rules' own
 * formulas; arithmetic is long double; outputs accumulate key by key.
 *
 * Shape legend: q [B, L, Hq, D]  k [B, S, Hkv, D]  v [B, S, Hkv, Dv]
 *               out [B, L, Hq, Dv]  weights [B, Hq, L, S]  lse [B, Hq, L]
 * Mask and bias are contiguous [mB, mH, mL, mS] with each m* = 1 or full.
 */
#ifndef ATTN_TEST_ORACLE_H
#define ATTN_TEST_ORACLE_H

#include <stdint.h>

typedef struct oracle_case {
    int64_t B, L, S, Hq, Hkv, D, Dv;
    double scale;                 /* 0 = 1/sqrt(D)                    */
    int causal;                   /* 0 none, 1 top-left, 2 lower-right */
    int window;                   /* window active                    */
    int lower_right_window;       /* window diagonal when not causal  */
    int64_t left, right;          /* -1 unbounded                     */
    const int64_t *key_lengths;   /* [B] or NULL                      */
    const uint8_t *mask;          /* or NULL                          */
    int64_t mask_shape[4];
    const float *bias;            /* or NULL                          */
    int64_t bias_shape[4];
    /* the score stage (docs/logits.md) */
    double softcap;               /* 0 = off: s = cap tanh(s / cap)    */
    const float *sinks;           /* [Hq] or NULL                      */
    const float *alibi_slopes;    /* [Hq] or NULL                      */
    int alibi_standard;           /* the paper's slopes for Hq heads   */
} oracle_case;

/* The ALiBi paper's slopes for n heads (its reference implementation's
 * recursion, written from the paper), into slopes [n]. */
void oracle_alibi_standard_slopes(int64_t n, double *slopes);

/* 1 when query (b, h, i) may attend key j under every rule of c (the
 * oracle's own formulas, written from docs/semantics.md), else 0. */
int oracle_visible(const oracle_case *c, int64_t b, int64_t h, int64_t i, int64_t j);

/* Computes out (double), weights and lse (may be NULL). */
void oracle_attention(const oracle_case *c, const float *q, const float *k, const float *v,
                      double *out, double *weights, double *lse);
/* The same, and scores [B, Hq, L, S] (may be NULL): the scaled scores,
 * soft-capped, plus the bias and ALiBi's where a key is visible, -inf where
 * it is hidden.  With sinks the weights of a row sum to less than 1 and its
 * lse includes the sink. */
void oracle_attention_scores(const oracle_case *c, const float *q, const float *k, const float *v,
                             double *out, double *weights, double *lse, double *scores);

/* A module's projections, written as plain loops.
 * y [rows, n] = x [rows, m] w [m, n] + b (b may be NULL), in long double, then
 * stored as float (the library stores its projections as float too). */
void oracle_project(const float *x, int64_t rows, int64_t m, const float *w, const float *b, int64_t n, float *y);
/* out [rows, dout] = z [rows, m] wo [m, dout] + bo, in long double; without
 * wo (NULL) the heads are the output: out = z + bo, dout = m. */
void oracle_output_projection(const double *z, int64_t rows, int64_t m, const float *wo, const float *bo,
                              int64_t dout, double *out);

/* ---- random problems for sweeps (test-side; uses the library's types only
 *      to hand the same problem to attn_sdpa_forward) ---- */
#include "attn.h"
#include "attn_chapter.h"
#include "attn_interp.h"
#include "attn_io.h"
#include "attn_machine.h"
#include "attn_viz.h"
#include "testutil.h"

enum mask_kind {
    MASK_NONE, MASK_CAUSAL, MASK_CAUSAL_LOWER_RIGHT, MASK_WINDOW, MASK_WINDOW_CAUSAL,
    MASK_KEY_LENGTHS, MASK_BOOL_2D, MASK_BOOL_4D, MASK_BIAS, MASK_ALL, MASK_KIND_COUNT
};
extern const char *const mask_kind_names[MASK_KIND_COUNT];

typedef struct random_case {
    oracle_case c;
    float *q, *k, *v, *bias;
    int64_t *key_lengths;
    uint8_t *mask;
} random_case;

void random_case_make(random_case *rc, test_rng *r, int64_t B, int64_t L, int64_t S, int64_t Hq,
                      int64_t Hkv, int64_t D, int64_t Dv, enum mask_kind kind);
void random_case_free(random_case *rc);
/* The same problem as library options (kernel and threads left at defaults). */
attn_sdpa_options random_case_options(const random_case *rc);

/* rc's q, k, v as tensors, and out [B, L, Hq, Dv] for its output. */
typedef struct random_case_tensors {
    attn_tensor q, k, v, out;
} random_case_tensors;
random_case_tensors random_case_views(const random_case *rc, float *out);
/* attn_sdpa_forward on rc's problem with the given kernel and threads, into
 * out [B, L, Hq, Dv] and, when not NULL, w [B, Hq, L, S] and lse [B, Hq, L]. */
attn_status random_case_forward(const random_case *rc, attn_kernel kernel, int threads, float *out, float *w,
                                float *lse);
/* sigma of tolerances.h's FLASH_ bounds for q [nq] and k [nk] of problem c:
 * scale · rms(q) · rms(k) · sqrt(D) (scale 1/sqrt(D) when c->scale is 0). */
double oracle_score_spread(const oracle_case *c, const float *q, int64_t nq, const float *k, int64_t nk);

/* The largest |x| over the finite elements of x [n]. */
double max_abs_finite(const float *x, int64_t n);
/* Max |a - b| over n elements, treating equal infinities as 0 difference;
 * returns INFINITY if one side is infinite or NaN and the other is not. */
double max_abs_diff(const double *expected, const float *got, int64_t n);
double max_abs(const double *x, int64_t n);

#endif /* ATTN_TEST_ORACLE_H */
