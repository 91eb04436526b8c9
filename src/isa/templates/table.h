/*
 * table.h — the attention table of a templated ISA (src/isa/flash_table.h):
 * every micro-kernel the templates define, as `static const ukernel_table
 * ukernels`, for the ISA's entry in the registry (isa_desc.flash).
 * Included last by an ISA's ukernels.c, after flash_ukernels.h,
 * grad_ukernels.h, convert.h and peak.h, with
 *   UKERNEL_ISA        its ATTN_ARCH name ("avx2"), the peak loop's name too
 * and, where the ISA has native bf16 dot products (precision = fast),
 *   UKERNEL_BF16       defined: the bf16_* kernels, bf16_dot_supported and
 *                      bf16_dot_name
 */

static const ukernel_table ukernels = {
    .tile_rows = TILE_ROWS,
    .key_block = KEY_BLOCK,
    .tile_keys = TILE_KEYS,
    .block_keys = BLOCK_KEYS,
    .exp2_n = simd_exp2_n,
    .softcap_n = simd_softcap_n,
    .qk_tile = simd_qk_tile,
    .softmax_tile = simd_softmax_tile,
    .pv_tile = simd_pv_tile,
    .probs_tile = simd_probs_tile,
    .mask_tile = simd_mask_tile,
    .qk_rows = simd_qk_rows,
    .qk_rows_half = simd_qk_rows_half,
    .softmax_rows = simd_softmax_rows,
    .pv_rows = simd_pv_rows,
    .pv_rows_half = simd_pv_rows_half,
    .probs_rows = simd_probs_rows,
    .all_finite = simd_all_finite,
    .widen = simd_widen,
    .narrow = simd_narrow,
    .gemm = simd_gemm,
    .p_ds = simd_p_ds,
#ifdef UKERNEL_BF16
    .bf16_supported = bf16_dot_supported,
    .bf16_name = bf16_dot_name,
    .transpose_32 = bf16_transpose_32,
    .qk_tile_bf16 = bf16_qk_tile,
    .softmax_tile_bf16 = bf16_softmax_tile,
    .pv_tile_bf16 = bf16_pv_tile,
    .interleave_bf16 = bf16_interleave,
#endif
    .peak_chunk = simd_peak_chunk,
    .peak_lanes = VLEN,
    .peak_isa = UKERNEL_ISA,
};
