/*
 * attn_chapter.h — the chapter's worked example (libattn), computed once
 * by the library for everything that shows it: `attn demo`, the chapter's
 * figures (attn_viz.h) and the interpretability commands' --example.
 *
 * Only the chapter's inputs are typed in: three positions of two numbers,
 * X = [[1, 0], [0, 1], [1, 1]], W_Q = I, W_K = c·I with c = √2·ln 2,
 * W_V = diag(2, 1), and the changed input whose x2 = [0, 1] becomes
 * [0, 2].  Everything else comes from attn_linear_forward,
 * attn_sdpa_scores, attn_sdpa_forward and attn_sdpa_paths.
 *
 * Shape legend: X, Q, K, V, O [3, 2]   W [2, 2]   scores, weights [3, 3]
 *               (rows: queries, columns: the positions they read)
 */
#ifndef ATTN_CHAPTER_H
#define ATTN_CHAPTER_H

#include "attn.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
    ATTN_CHAPTER_POSITIONS = 3, /* positions of the example                     */
    ATTN_CHAPTER_WIDTH = 2      /* numbers per position = d, the query/key width */
};

/* One attention pass of the example. */
typedef struct attn_chapter_pass {
    float q[ATTN_CHAPTER_POSITIONS][ATTN_CHAPTER_WIDTH];
    float k[ATTN_CHAPTER_POSITIONS][ATTN_CHAPTER_WIDTH];
    float v[ATTN_CHAPTER_POSITIONS][ATTN_CHAPTER_WIDTH];
    float raw[ATTN_CHAPTER_POSITIONS][ATTN_CHAPTER_POSITIONS];     /* q·k, -inf where hidden   */
    float scaled[ATTN_CHAPTER_POSITIONS][ATTN_CHAPTER_POSITIONS];  /* q·k / √d, -inf where hidden */
    float weights[ATTN_CHAPTER_POSITIONS][ATTN_CHAPTER_POSITIONS];
    float out[ATTN_CHAPTER_POSITIONS][ATTN_CHAPTER_WIDTH];
} attn_chapter_pass;

/* The example: inputs as the chapter gives them, results as the library
 * computes them. */
typedef struct attn_chapter {
    double c; /* √2·ln 2 ≈ 0.9803: W_K's scale, so that the scaled scores are multiples of ln 2 */
    float x[ATTN_CHAPTER_POSITIONS][ATTN_CHAPTER_WIDTH];
    float x_changed[ATTN_CHAPTER_POSITIONS][ATTN_CHAPTER_WIDTH]; /* x2 = [0, 2]          */
    float wq[ATTN_CHAPTER_WIDTH][ATTN_CHAPTER_WIDTH];
    float wk[ATTN_CHAPTER_WIDTH][ATTN_CHAPTER_WIDTH];
    float wv[ATTN_CHAPTER_WIDTH][ATTN_CHAPTER_WIDTH];
    attn_chapter_pass base;     /* X, every position visible                       */
    attn_chapter_pass changed;  /* the changed input                               */
    attn_chapter_pass causal;   /* X under the causal mask (Figure 3)              */
    /* Figure 2: the base queries held fixed, the base or the changed keys and
     * values (attn_sdpa_paths): [0] base, [1] K only, [2] V only, [3] both. */
    attn_chapter_pass cases[4];
    float interaction[ATTN_CHAPTER_POSITIONS][ATTN_CHAPTER_WIDTH]; /* both - K only - V only + base */
} attn_chapter;

/* Fills *ch: the inputs, then every pass. */
ATTN_API attn_status attn_chapter_compute(attn_chapter *ch);

/* Fills raw, scaled, weights and out of p from its q, k and v (causal
 * nonzero: under the causal mask): for variations of the example (the
 * demo's permuted keys and values). */
ATTN_API attn_status attn_chapter_attend(attn_chapter_pass *p, int causal);

/* The example as a one-head module (W_Q, W_K, W_V, no W_O), pointing into
 * ch's weights: for the commands that take a module. */
ATTN_API attn_mha attn_chapter_module(const attn_chapter *ch);

#ifdef __cplusplus
}
#endif

#endif /* ATTN_CHAPTER_H */
