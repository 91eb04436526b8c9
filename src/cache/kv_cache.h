/*
 * kv_cache.h — the KV cache's state (kv_cache.c: storage, sequences,
 * append, views) shared with its attention (kv_attend.c).
 *
 * Shape legend: Hkv heads, D key width, Dv value width, br rows per block.
 *   k_pool : [layers, num_blocks, br, Hkv, D ]   in K's dtype (dtype)
 *   v_pool : [layers, num_blocks, br, Hkv, Dv]   in V's (v_dtype)
 *   tables : [max_seqs, table_len]   block ids; entry b of a sequence holds
 *                                    its rows [b * br, (b + 1) * br) in
 *                                    every layer
 *   lengths: [max_seqs, layers]      rows each layer of a sequence holds
 * A contiguous cache is the special case br = capacity, num_blocks =
 * max_seqs, table_len = 1: one code path for both layouts, and forks of a
 * contiguous cache share its regions the same way.
 */
#ifndef ATTN_CACHE_KV_CACHE_H
#define ATTN_CACHE_KV_CACHE_H

#include "attn_cache.h"
#include "base/base.h"
#include "base/kv8.h"
#include "base/pages.h"

struct attn_kv_cache {
    int64_t layers, kv_heads, dim, dim_v;
    attn_dtype dtype, v_dtype; /* K's and V's (attn_kv_cache_config.value_dtype) */
    int64_t k_row_bytes, v_row_bytes; /* bytes of one row of all heads (attn_dtype_bytes of k_row, v_row) */
    int64_t saturated;    /* values an 8-bit dtype clamped on append (attn_kv_cache_saturated) */
    attn_kv_layout layout;
    int64_t max_seqs, capacity;
    int64_t block_rows, num_blocks, table_len;
    int64_t k_row, v_row; /* elements in one row of all heads: Hkv * D, Hkv * Dv */
    unsigned char *k_pool, *v_pool; /* k_pages.data, v_pages.data */
    page_array k_pages, v_pages;
    int32_t *refs;        /* [num_blocks] sequences holding each block */
    /* The free blocks, a stack kept in a ring so that any block can leave
     * it in O(1) (kv_cache.c, "The pool"): element i from the bottom is
     * free_ring[(free_base + i) % num_blocks]; free_at[b] is b's index in
     * free_ring, or -1 when b is taken. */
    int32_t *free_ring;   /* [num_blocks] */
    int32_t *free_at;     /* [num_blocks] */
    int64_t free_base, free_count;
    bool *live;           /* [max_seqs] */
    int64_t *lengths;     /* [max_seqs, layers] */
    int32_t *tables;      /* [max_seqs, table_len] */
    int64_t *held;        /* [max_seqs] entries of each table in use */
    bool has_rope;
    attn_rope_options rope; /* the library's copy; rope.inv_freq points at rope_inv_freq */
    double *rope_inv_freq;
};

/* Where row `row` of block `block` of a layer starts, in the K and V pools. */
static inline unsigned char *kv_cache_k_row(const attn_kv_cache *c, int64_t layer, int64_t block, int64_t row) {
    return c->k_pool + (size_t)(((layer * c->num_blocks + block) * c->block_rows + row) * c->k_row_bytes);
}
static inline unsigned char *kv_cache_v_row(const attn_kv_cache *c, int64_t layer, int64_t block, int64_t row) {
    return c->v_pool + (size_t)(((layer * c->num_blocks + block) * c->block_rows + row) * c->v_row_bytes);
}

/* ATTN_OK when seq names a live sequence and layer a layer of the cache;
 * otherwise a message naming the caller (fn) and the bad value. */
attn_status attn__kv_cache_check_seq(const attn_kv_cache *c, const char *fn, int64_t seq, int64_t layer);

#endif /* ATTN_CACHE_KV_CACHE_H */
