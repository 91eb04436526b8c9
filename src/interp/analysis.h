/*
 * analysis.h — what rollout and flow (attn_analysis.h) share: one layer's
 * map with the residual added, Abnar & Zuidema's Ahat.
 *
 * Shape legend: patterns [N, Hq, L, L]   ahat [L, L] (row: query, column: key)
 */
#ifndef ATTN_INTERP_ANALYSIS_H
#define ATTN_INTERP_ANALYSIS_H

#include "attn_analysis.h"

#include "base/base.h"

/* The checks of rollout and flow (fn names the caller). */
attn_status attn__analysis_check_layers(const char *fn, const float *patterns, int64_t N, int64_t Hq, int64_t L,
                                        int64_t head, double residual);

/* Ahat of layer l: the map of `head` (ATTN_ALL: the mean of the Hq heads)
 * mixed with the identity, (1 - residual) A + residual I, each row
 * renormalised; a row with nothing left (all zero, residual 0) stays zero. */
void attn__analysis_layer_ahat(const float *patterns, int64_t Hq, int64_t L, int64_t layer, int64_t head,
                               double residual, double *ahat);

#endif /* ATTN_INTERP_ANALYSIS_H */
