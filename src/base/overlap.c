/*
 * overlap.c — an attention call's outputs against its inputs (overlap.h's
 * rule), for the front doors that write: attn_sdpa_forward, attn_sdpa_scores,
 * the backward and the traced forward.
 *
 * Shape legend: q [B, L, Hq, D]  k [B, S, Hkv, D]  v [B, S, Hkv, Dv]
 *               mask, bias [B|1, Hq|1, L|1, S|1]  key_lengths [B]
 *               sinks, alibi_slopes [Hq]
 */
#include "base/overlap.h"
#include "base/problem.h"

#define MAX_EXTENTS (3 + OPTION_ARRAYS_MAX + 8) /* q, k, v, the options' arrays, the rest */

attn_status attn__problem_check_outputs(const sdpa_problem *p, const mem_extent *outputs, int n_outputs,
                                        const mem_extent *more_inputs, int n_more) {
    mem_extent read[MAX_EXTENTS] = {
        extent_of_tensor("q", &p->q),
        extent_of_tensor("k", &p->k),
        extent_of_tensor("v", p->dim_v ? &p->v : NULL),
    };
    int n_read = 3 + extents_of_options(&p->opt, p->batch, p->heads_q, read + 3);
    for (int i = 0; i < n_more && n_read < MAX_EXTENTS; i++) read[n_read++] = more_inputs[i];
    /* The caller's workspace is written too: it must not be an input, nor
     * hold an output. */
    mem_extent written[MAX_EXTENTS];
    int n_written = 0;
    for (int i = 0; i < n_outputs && n_written < MAX_EXTENTS - 1; i++) written[n_written++] = outputs[i];
    written[n_written++] = extent_of_bytes("opt.workspace", p->opt.workspace, p->opt.workspace_size);
    return overlap_check(NULL, written, n_written, read, n_read);
}
