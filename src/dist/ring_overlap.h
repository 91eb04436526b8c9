/*
 * ring_overlap.h — the ring's outputs against its inputs and each other
 * (src/base/overlap.h's rule), checked on each rank before the ranks agree
 * their problem, so that an aliased output on one rank is refused on all.
 *
 * Shape legend (local shards): q [B, Lr, Hq, D]  k [B, Sr, Hkv, D]
 *   v [B, Sr, Hkv, Dv]  out, dout [B, Lr, Hq, Dv]  lse [B, Hq, Lr]
 *   mask, bias: this rank's rows [B|1, Hq|1, Lr|1, S|1]
 */
#ifndef ATTN_DIST_RING_OVERLAP_H
#define ATTN_DIST_RING_OVERLAP_H

#include "attn_mpi.h"

/* attn_ring_forward's out and lse. */
attn_status attn__ring_forward_overlap(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                                       const attn_ring_options *opt, const attn_tensor *out, const float *lse);

/* attn_ring_backward's dq, dk and dv (each may be NULL). */
attn_status attn__ring_backward_overlap(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                                        const attn_ring_options *opt, const attn_tensor *out, const float *lse,
                                        const attn_tensor *dout, const attn_tensor *dq, const attn_tensor *dk,
                                        const attn_tensor *dv);

#endif /* ATTN_DIST_RING_OVERLAP_H */
