/*
 * rope.h — RoPE's options, validated once, and its frequency tables
 * (rope_freqs.c), for the rotation (rope.c).
 *
 * Shape legend: D width per head, R rotary width (even, <= D), F = R / 2
 * frequencies; inv_freq [F].
 */
#ifndef ATTN_ROPE_INTERNAL_H
#define ATTN_ROPE_INTERNAL_H

#include "attn_rope.h"
#include "base/base.h"

/* One call's options with the defaults resolved. */
typedef struct rope_plan {
    int64_t dim;             /* D                                         */
    int64_t rotary_dim;      /* R                                         */
    int64_t freqs;           /* F = R / 2                                 */
    double attention_factor; /* m, resolved (the variant's default if 0)  */
    attn_rope_options opt;   /* a copy; beta_fast, beta_slow resolved     */
} rope_plan;

/* Validates opt (NULL = ATTN_ROPE_OPTIONS_INIT) for heads of width
 * head_dim and fills p.  Every error names the option at fault, as
 * "attn_rope_options.<field>". */
attn_status attn__rope_plan_init(rope_plan *p, int64_t head_dim, const attn_rope_options *opt);

/* inv_freq [F] of the plan's variant, in double (rope_freqs.c). */
void attn__rope_inv_freq(const rope_plan *p, double *inv_freq);

#endif /* ATTN_ROPE_INTERNAL_H */
