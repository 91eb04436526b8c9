/*
 * interp.h — what the interpretability module's files share and users never
 * see: allocating a trace, the geometry of each patchable hook, applying
 * patches stage by stage, and the small linear-program solver the null-space
 * search runs on.
 *
 * Shape legend: q [B, L, Hq, D]  k [B, S, Hkv, D]  v [B, S, Hkv, Dv]
 *               scores, pattern [B, Hq, L, S]  z [B, L, Hq, Dv]
 *               result [B, L, Hq, d_out]  attn_out [B, L, d_out]
 */
#ifndef ATTN_INTERP_INTERNAL_H
#define ATTN_INTERP_INTERNAL_H

#include "attn_interp.h"

#include "base/base.h"

/* Allocates every buffer of t for the sizes already set in it (d_out 0: no
 * result / attn_out).  On failure frees what it took and zeroes the sizes. */
attn_status attn__trace_alloc(attn_trace *t);

/* A patchable hook seen as rows: row (b, pos, head) of `width` floats.  The
 * pattern is head-major ([B, Hq, L, S]); the others are position-major. */
typedef struct hook_rows {
    float *data;
    int64_t batch, positions, heads, width;
    bool head_major;
} hook_rows;

/* The rows of hook (Q, K, V, PATTERN or Z) in t (data NULL if t holds no
 * buffer yet); false for any other hook. */
bool attn__hook_rows(const attn_trace *t, attn_hook hook, hook_rows *rows);

static inline int64_t hook_row_index(const hook_rows *r, int64_t b, int64_t pos, int64_t head) {
    return r->head_major ? (b * r->heads + head) * r->positions + pos
                         : (b * r->positions + pos) * r->heads + head;
}

static inline float *hook_row(const hook_rows *r, int64_t b, int64_t pos, int64_t head) {
    return r->data + hook_row_index(r, b, pos, head) * r->width;
}

/* When a patch runs, relative to the attention step. */
typedef enum patch_stage { PATCH_STAGE_QKV, PATCH_STAGE_PATTERN, PATCH_STAGE_Z } patch_stage;

/* Copies n patches, each read by the caller's struct_size (patches[0]'s),
 * into *out in the library's layout (malloc'd; free it).  n = 0: *out is
 * NULL. */
attn_status attn__patches_copy(const attn_patch *patches, int n, attn_patch **out);

/* Checks every patch against the sizes of t (buffers need not be filled
 * yet); every error names the patch by its index and the field at fault. */
attn_status attn__patches_check(const attn_trace *t, const attn_patch *patches, int n_patches);

/* Applies, in array order, the (already checked) patches of one stage.
 * touched (if not NULL) has one byte per row of the stage's hook, indexed
 * by hook_row_index; every row a patch writes gets 1. */
attn_status attn__patches_apply(attn_trace *t, const attn_patch *patches, int n_patches,
                               patch_stage stage, uint8_t *touched);

/* ------------------------------------------------------- linear programs
 * maximise c.x  subject to  a x (<=, =, >=) b,  x >= 0.
 * Dense two-phase tableau simplex in double: Dantzig's rule, switching to
 * Bland's rule after a run of degenerate pivots so it cannot cycle.  Meant
 * for the small programs of the null-space search (tens to a few hundred
 * rows and columns), with rows scaled to magnitude ~1 by the caller. */
typedef enum lp_sense { LP_LE = -1, LP_EQ = 0, LP_GE = 1 } lp_sense;

typedef struct lp_problem {
    int64_t rows, cols;   /* constraints, variables                */
    const double *a;      /* [rows, cols]                          */
    const double *b;      /* [rows]                                */
    const lp_sense *sense;/* [rows]                                */
    const double *c;      /* [cols]                                */
} lp_problem;

typedef enum lp_outcome { LP_OPTIMAL, LP_INFEASIBLE, LP_UNBOUNDED, LP_STALLED } lp_outcome;

/* x: [cols] written when *outcome is LP_OPTIMAL.  Fails only on bad
 * arguments or memory. */
attn_status attn__lp_maximise(const lp_problem *p, double *x, lp_outcome *outcome);

#endif /* ATTN_INTERP_INTERNAL_H */
