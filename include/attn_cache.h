/*
 * attn_cache.h — a key/value cache for decoding (libattn): the keys and
 * values of every layer of a model for several sequences at once, stored
 * contiguously (one region per sequence) or in fixed-size blocks shared by
 * all sequences (paged, as vLLM's PagedAttention), with attention over it.
 * docs/cache.md has the layout, the costs and the examples.
 *
 * Shape legend:
 *   N    rows appended in one call         T    query rows of one attend call
 *   Hkv  key/value heads    Hq  query heads (a multiple of Hkv)
 *   D    key width          Dv  value width
 *   len  rows a sequence holds in a layer (its keys' positions are 0 .. len-1)
 *
 *   append:  k : [1, N, Hkv, D]    v : [1, N, Hkv, Dv]   float32 or the cache's dtype
 *            (K's dtype for k, V's for v: they may differ, value_dtype)
 *   view:    one segment per run of consecutive rows: k [1, rows, Hkv, D],
 *            v [1, rows, Hkv, Dv], strided views INTO the cache, each in its own
 *            dtype (K's, V's)
 *   attend:  q : [1, T, Hq, D]  (the queries of all sequences, one after the other)
 *            out : [1, T, Hq, Dv]   lse : [Hq, T] or NULL   <- heads first, as attn.h's
 *
 * Sequences.  A sequence is a slot with an id in [0, max_seqs), taken by
 * attn_kv_cache_seq_add or attn_kv_cache_seq_fork and given back by
 * attn_kv_cache_seq_free.  Each layer of a sequence has its own length, so
 * that a model appends layer by layer; its rows live in blocks listed in
 * the sequence's block table, which all layers share (block b of the table
 * holds rows [b * block_rows, (b + 1) * block_rows) of every layer).
 *
 * Layouts.
 *   ATTN_KV_CONTIGUOUS  one block of `capacity` rows per sequence slot: a
 *                       sequence's rows are one strided view, always.
 *   ATTN_KV_PAGED       a pool of `num_blocks` blocks of `block_rows` rows,
 *                       taken by the sequences as they grow; a sequence may
 *                       hold up to `capacity` rows if the pool has the blocks.
 *                       A sequence takes the block after its last one when
 *                       that is free, so its rows stay in few segments
 *                       (docs/cache.md, "Layout").
 *
 * Fork.  attn_kv_cache_seq_fork makes a new sequence that shares the
 * parent's blocks (a reference count per block): no copy.  A block shared
 * by several sequences is copied on the first write into it (only the
 * partly filled last block can be written: earlier ones are full), so the
 * two sequences then diverge without disturbing each other.
 *
 * All or nothing.  A call that fails changes nothing: every sequence's rows
 * and lengths, the block tables and the pool are as they were.  An append
 * that needs more blocks than the pool has free, or more rows than the
 * capacity, fails with ATTN_ERR_CAPACITY and a message naming the sequence,
 * the layer and the numbers.  For a model that appends layer by layer (N
 * rows to layer 0, then the same N rows to layer 1, ...): the blocks and
 * copies a step needs are taken by the first layer to need them, for every
 * layer at once (the table is shared), so only the step's first append can
 * fail for lack of space, before any layer has changed; check that call's
 * status, free or preempt a sequence, and retry the step.
 *
 * RoPE on append.  With config.rope set, each appended key row is rotated
 * at its absolute position (len, len + 1, ...) as attn_rope_apply rotates
 * it (in the dtype it is given in), then stored in the cache's dtype.
 * Queries are the caller's: rotate them with attn_rope_apply at the same
 * positions.
 *
 * Dtypes.  The cache stores float32, float16 or bfloat16; rows given in
 * float32 are rounded to nearest even on append (attn's conversions).
 * It also stores the 8-bit block formats ATTN_Q8_0 and ATTN_FP8_E4M3
 * (attn.h: blocks of 32 values of one head's row, each with its float16
 * scale beside it; head_dim and value_dim multiples of 32): rows given in
 * float32 are quantized on append (attn_quantize's rules: the scale from
 * the block's largest magnitude, codes rounded to nearest even and
 * saturated; the values clamped are counted, attn_kv_cache_saturated;
 * a q8_0 cache refuses NaN), and attend dequantizes them inside the
 * kernels' K/V loads, accumulating in float32 (no dequantized copy).
 * docs/cache.md, "8-bit caches", has the accuracy and the speed.
 *
 * Memory.  The pools are allocated at creation and mapped as rows are
 * first written.  On Linux a pool of 2 MiB or more lies on 2 MiB
 * boundaries and is advised as transparent huge pages (MADV_HUGEPAGE),
 * since a decoding step streams it: 0.7-0.8x the time of small pages on
 * the machines measured (docs/cache.md, "Memory pages").  Memory is then
 * mapped 2 MiB at a time, and the first write into each such page may cost
 * more; set ATTN_HUGE_PAGES=0 in the environment to keep small pages.
 *
 * Thread safety.  A cache has no lock.  Calls that only read it
 * (attn_kv_cache_view, attn_kv_cache_attend, the queries) may run
 * concurrently with each other; a call that changes it (append, seq_add,
 * seq_fork, seq_free, free) must not run concurrently with any other call
 * on the same cache, even for another sequence (they share the pool).
 * Distinct caches are independent.  Views stay valid until the next call
 * that changes the cache.
 *
 * Determinism: attend gives the same bits for any thread count.
 */
#ifndef ATTN_CACHE_H
#define ATTN_CACHE_H

#include "attn.h"
#include "attn_rope.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct attn_kv_cache attn_kv_cache; /* opaque */

typedef enum attn_kv_layout {
    ATTN_KV_CONTIGUOUS = 0, /* one [capacity, Hkv, D] region per sequence slot */
    ATTN_KV_PAGED = 1       /* blocks of block_rows rows from a shared pool     */
} attn_kv_layout;

/* What a cache holds.  Initialise with
 *     attn_kv_cache_config cfg = ATTN_KV_CACHE_CONFIG_INIT;
 * (float32, contiguous, Dv = D, no RoPE) and set the sizes. */
typedef struct attn_kv_cache_config {
    size_t struct_size;   /* sizeof(attn_kv_cache_config), set by the initialiser */
    int64_t layers;       /* > 0                                              */
    int64_t kv_heads;     /* Hkv > 0                                          */
    int64_t head_dim;     /* D > 0                                            */
    int64_t value_dim;    /* Dv; 0 = D                                        */
    attn_dtype dtype;     /* K's (and V's, unless value_dtype): ATTN_F32,
                             ATTN_F16, ATTN_BF16, ATTN_Q8_0 or
                             ATTN_FP8_E4M3 (8-bit: D, Dv multiples of 32)   */
    attn_kv_layout layout;
    int64_t max_seqs;     /* sequence slots, > 0                              */
    int64_t capacity;     /* rows one sequence may hold (per layer), > 0      */
    int64_t block_rows;   /* PAGED: rows per block, > 0                       */
    int64_t num_blocks;   /* PAGED: blocks in the pool, > 0 (memory:
                             layers * num_blocks * block_rows * Hkv * (D + Dv)
                             elements)                                        */
    const attn_rope_options *rope; /* rotate keys on append, or NULL; copied
                             (its inv_freq table too) at creation           */
    attn_dtype value_dtype; /* V's dtype when it is not K's: 0 (ATTN_F32) =
                             dtype.  Keys with outliers want more bits than
                             values (llama.cpp's -ctk / -ctv): dtype
                             ATTN_BF16 with value_dtype ATTN_Q8_0 stores
                             K at 16 bits and V at 8 (docs/cache.md).  A
                             float32 V beside narrower keys is the one
                             mix that cannot be asked for.             */
} attn_kv_cache_config;

#define ATTN_KV_CACHE_CONFIG_INIT {.struct_size = sizeof(attn_kv_cache_config)}

/* Creates a cache (all its memory at once; no sequence yet) in *cache.
 * On failure *cache is NULL. */
ATTN_API attn_status attn_kv_cache_new(const attn_kv_cache_config *config, attn_kv_cache **cache);
/* Frees the cache and everything in it; NULL is allowed. */
ATTN_API void attn_kv_cache_free(attn_kv_cache *cache);
/* Deprecated names, until 1.0: the two above under their former names. */
ATTN_API attn_status attn_kv_cache_create(const attn_kv_cache_config *config, attn_kv_cache **cache)
    ATTN_DEPRECATED("renamed attn_kv_cache_new");
ATTN_API void attn_kv_cache_destroy(attn_kv_cache *cache) ATTN_DEPRECATED("renamed attn_kv_cache_free");
/* End of the deprecated names. */

/* A new, empty sequence: its id in *seq.  ATTN_ERR_CAPACITY when all
 * max_seqs slots are taken. */
ATTN_API attn_status attn_kv_cache_seq_add(attn_kv_cache *cache, int64_t *seq);
/* A new sequence *child holding the same rows as parent in every layer,
 * sharing its blocks (copy on write, above). */
ATTN_API attn_status attn_kv_cache_seq_fork(attn_kv_cache *cache, int64_t parent, int64_t *child);
/* Ends a sequence: its slot is free, and the blocks no other sequence
 * shares return to the pool. */
ATTN_API attn_status attn_kv_cache_seq_free(attn_kv_cache *cache, int64_t seq);

/* Appends N rows to one layer of a sequence, at positions len .. len+N-1:
 *   k: [1, N, Hkv, D]   v: [1, N, Hkv, Dv]   float32 or the cache's dtype
 *      (each its own: K's for k, V's for v), strides allowed (stride[3] = 1)
 * Keys are rotated first when the cache has RoPE (above).  All or nothing:
 * ATTN_ERR_CAPACITY when the rows do not fit, nothing changed. */
ATTN_API attn_status attn_kv_cache_append(attn_kv_cache *cache, int64_t seq, int64_t layer,
                                          const attn_tensor *k, const attn_tensor *v);

/* Values an 8-bit cache has clamped on append since its creation (their
 * magnitude beyond the block's scale times the largest code: Inf, or a
 * block whose scale overflowed float16), in *values; 0 for other dtypes. */
ATTN_API attn_status attn_kv_cache_saturated(const attn_kv_cache *cache, int64_t *values);

/* Rows one layer of a sequence holds, in *length. */
ATTN_API attn_status attn_kv_cache_seq_length(const attn_kv_cache *cache, int64_t seq, int64_t layer,
                                              int64_t *length);

/* The pool: blocks free and in all, and rows per block (each pointer may
 * be NULL).  A contiguous cache has max_seqs blocks of capacity rows. */
ATTN_API attn_status attn_kv_cache_pool(const attn_kv_cache *cache, int64_t *free_blocks,
                                        int64_t *total_blocks, int64_t *block_rows);

/* A run of consecutive rows of a sequence: positions
 * [position, position + k.shape[1]), stored contiguously (one block, or
 * blocks that happen to be neighbours in the pool). */
typedef struct attn_kv_segment {
    int64_t position; /* of the first row                                 */
    attn_tensor k;    /* [1, rows, Hkv, D]  view into the cache, K's dtype */
    attn_tensor v;    /* [1, rows, Hkv, Dv]                   V's dtype    */
} attn_kv_segment;

/* One layer of a sequence as segments, in position order: *count is set
 * to the number needed (0 for an empty sequence); with segments not NULL,
 * the first min(*count, max_segments) are written, and ATTN_ERR_SHAPE
 * tells that max_segments was too small.  A contiguous cache always gives
 * one segment.  The views are read-only and valid until the cache changes. */
ATTN_API attn_status attn_kv_cache_view(const attn_kv_cache *cache, int64_t seq, int64_t layer,
                                        attn_kv_segment *segments, int64_t max_segments, int64_t *count);

/* Causal attention of new queries over the cache, for several sequences
 * at once (decode and chunked prefill, batched):
 *   seqs:   [n_seqs] sequence ids
 *   q_rows: [n_seqs] query rows of each sequence, 1 <= q_rows[i] <= its
 *           length in this layer; NULL = 1 each (decoding)
 *   q:      [1, T, Hq, D], T = sum of q_rows: sequence i's rows follow
 *           sequence i-1's.  They are the LAST q_rows[i] positions of the
 *           sequence (append their keys and values first), so query r of
 *           sequence i is at position len_i - q_rows[i] + r and sees keys
 *           0 .. that position (lower-right causal).
 *   out:    [1, T, Hq, Dv] float32 (written)
 *   lse:    [Hq, T] float32 contiguous, or NULL (natural log)
 *   opt:    NULL, or attn.h's options: scale, window (at the absolute
 *           positions), kernel and threads are used; the call sets causal
 *           and the position fields itself, and refuses masks, a bias and
 *           key lengths (they would be indexed by the cache's rows).  The
 *           call allocates its own scratch (opt.workspace is not used).
 * Every sequence's rows are read in place by the kernels, through its
 * block table (no copy, whatever the block size), one item of 512 keys at
 * a time, and the items' results merged exactly by their lse
 * (docs/cache.md: what it computes, its costs).  A paged cache gives the
 * contiguous cache's bits.  A float16 or bfloat16 cache is read in its
 * dtype, an 8-bit cache dequantized in the kernels' loads. */
ATTN_API attn_status attn_kv_cache_attend(const attn_kv_cache *cache, int64_t layer, int64_t n_seqs,
                                          const int64_t *seqs, const int64_t *q_rows, const attn_tensor *q,
                                          const attn_sdpa_options *opt, attn_tensor *out, float *lse);

#ifdef __cplusplus
}
#endif

#endif /* ATTN_CACHE_H */
