/*
 * ring_overlap.c — the ring's outputs against its inputs (ring_overlap.h).
 */
#include "dist/ring_overlap.h"

#include "base/overlap.h"

enum { MOST = 3 + OPTION_ARRAYS_MAX + 3 }; /* q, k, v, the options' arrays, out, lse, dout */

/* q, k, v, this rank's rows of the mask and bias, and the key lengths
 * into e; returns how many.  Options a call refuses give empty extents. */
static int ring_inputs(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                       const attn_ring_options *opt, mem_extent *e) {
    int n = 0;
    e[n++] = extent_of_tensor("q", q);
    e[n++] = extent_of_tensor("k", k);
    e[n++] = extent_of_tensor("v", v);
    static const attn_ring_options ring_defaults = ATTN_RING_OPTIONS_INIT;
    static const attn_sdpa_options sdpa_defaults = ATTN_SDPA_OPTIONS_INIT;
    attn_ring_options ro;
    attn_sdpa_options o;
    if (!q || !opt || options_copy(&ro, sizeof ro, &ring_defaults, opt, "attn_ring_options") || !ro.sdpa ||
        options_copy(&o, sizeof o, &sdpa_defaults, ro.sdpa, "attn_sdpa_options"))
        return n; /* attn__ring_problem_init reports a bad struct */
    /* A sharded table holds this rank's query rows only. */
    if (o.mask_shape[2] != 1) o.mask_shape[2] = q->shape[1];
    if (o.bias_shape[2] != 1) o.bias_shape[2] = q->shape[1];
    return n + extents_of_options(&o, q->shape[0], q->shape[2], e + n);
}

/* lse [B, Hq, Lr]: its floats. */
static int64_t lse_floats(const attn_tensor *q) {
    return q ? extent_mul(extent_mul(q->shape[0], q->shape[1]), q->shape[2]) : 0;
}

attn_status attn__ring_forward_overlap(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                                       const attn_ring_options *opt, const attn_tensor *out, const float *lse) {
    mem_extent inputs[MOST];
    const int n = ring_inputs(q, k, v, opt, inputs);
    const mem_extent outputs[2] = {extent_of_tensor("out", out),
                                   extent_of_array("lse", lse, lse_floats(q), (int64_t)sizeof(float))};
    return overlap_check(NULL, outputs, 2, inputs, n);
}

attn_status attn__ring_backward_overlap(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                                        const attn_ring_options *opt, const attn_tensor *out, const float *lse,
                                        const attn_tensor *dout, const attn_tensor *dq, const attn_tensor *dk,
                                        const attn_tensor *dv) {
    mem_extent inputs[MOST];
    int n = ring_inputs(q, k, v, opt, inputs);
    inputs[n++] = extent_of_tensor("out", out);
    inputs[n++] = extent_of_array("lse", lse, lse_floats(q), (int64_t)sizeof(float));
    inputs[n++] = extent_of_tensor("dout", dout);
    const mem_extent outputs[3] = {extent_of_tensor("dq", dq), extent_of_tensor("dk", dk), extent_of_tensor("dv", dv)};
    return overlap_check(NULL, outputs, 3, inputs, n);
}
