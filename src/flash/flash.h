/*
 * flash.h — the flash kernels' entry points for the front doors (src/api/):
 * tiled online softmax with the per-ISA micro-kernels of
 * src/isa/flash_table.h, never anything of size L x S, bit-identical for
 * every thread count.
 *
 * Shape legend: q [B, L, Hq, D]  k [B, S, Hkv, D]  v [B, S, Hkv, Dv]
 *               out [B, L, Hq, Dv]  weights [B, Hq, L, S]  lse [B, Hq, L]
 */
#ifndef ATTN_FLASH_H
#define ATTN_FLASH_H

#include "base/problem.h"

/* Forward (forward.c and its parts, forward.h).  Extra memory: a few tiles
 * per thread plus, for problems split along the keys (decoding), the
 * per-chunk partial states. */
size_t attn__flash_forward_workspace_size(const sdpa_problem *p);
attn_status attn__flash_forward(const sdpa_problem *p, void *workspace, attn_tensor *out,
                                float *weights, float *lse);

/* True when attn__flash_forward would run some of p's products on the
 * native bf16 kernels (precision fast on a CPU and ISA that have them, the
 * tile path, half operands: forward_plan.c, native_bf16): what
 * attn_sdpa_kernel_name reports as "flash-bf16". */
bool attn__flash_forward_native_bf16(const sdpa_problem *p);

/* Backward (backward.c): FlashAttention-2's recomputation on 128 x 64
 * tiles; needs a->out and a->lse.  Workspace: a few tiles per thread, the
 * row sums dout.out [B, Hq, L] and one dq partial per key chunk of the
 * units in flight. */
size_t attn__flash_backward_workspace_size(const sdpa_problem *p);
attn_status attn__flash_backward(const sdpa_problem *p, void *workspace, const sdpa_backward_args *a);

/* For tests: caps the memory of the backward's dq partials (bytes <= 0: the
 * default, 256 MiB), so that small problems take the path of fewer key
 * chunks and several waves of units.  Not thread-safe against running calls. */
void attn__flash_backward_set_partial_budget(int64_t bytes);

#endif /* ATTN_FLASH_H */
