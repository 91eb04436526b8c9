/*
 * kv_cache.c — the KV cache's storage (attn_cache.h): creation, sequences
 * and their block tables, forks by reference counts, append with copy on
 * write, and views of a sequence's rows.
 *
 * Shape legend (kv_cache.h has the pools' layout):
 *   k : [1, N, Hkv, D]   v : [1, N, Hkv, Dv]   the rows of one append
 *   br rows per block; row p of a sequence is row p % br of its block p / br
 *
 * Every changing call checks and counts everything it needs (the blocks
 * to take, the copies to make, the RoPE scratch) before it changes
 * anything, so a failure leaves the cache exactly as it was.
 */
#include "cache/kv_cache.h"

#include "base/dtype.h"
#include "rope/rope.h"

#include <stdlib.h>

/* ------------------------------------------------------------- the pool
 *
 * Where a sequence's next block comes from decides how its rows lie, and a
 * decoding step reads a run of neighbouring blocks as one stream: blocks
 * apart cost the memory system about 100 ns each (a stream that ends and
 * starts again), 5-8 % of a step at 16 rows a block (docs/cache.md, v6
 * and v7).  So:
 *   - a sequence takes the block after its last one when that is free;
 *   - otherwise the top of the free stack: the most recently freed block
 *     (a freed sequence's blocks are pushed last first, so the next
 *     sequence takes them first to last and extends through them);
 *   - a fresh pool's stack hands out 0, N/2, N/4, 3N/4, N/8, ... (the
 *     bit-reversed order of the block ids): sequences that start side by
 *     side land far apart and each grows through the blocks after its
 *     first, where taking 0, 1, 2, ... in turn would interleave them
 *     block by block.
 * A lone sequence in a fresh pool still takes 0, 1, 2, ...: one segment.
 * Every operation is O(1): a block leaves the middle of the stack by
 * taking the bottom block's place (the ring's base moves up), which only
 * reorders the blocks that would be handed out last. */

/* b's bits reversed within `bits` bits. */
static uint32_t reverse_bits(uint32_t b, int bits) {
    uint32_t r = 0;
    for (int i = 0; i < bits; i++, b >>= 1) r = (r << 1) | (b & 1u);
    return r;
}

/* The fresh stack: the bit-reversed order of 0 .. N-1 from the top (ids
 * reversed within the next power of two, those >= N skipped). */
static void pool_init(attn_kv_cache *c) {
    const int64_t n = c->num_blocks;
    int bits = 0;
    while (((int64_t)1 << bits) < n) bits++;
    int64_t placed = 0;
    for (int64_t i = 0; placed < n; i++) {
        const int64_t block = bits ? (int64_t)reverse_bits((uint32_t)i, bits) : 0;
        if (block >= n) continue;
        const int64_t slot = n - 1 - placed++; /* the first in the order on top */
        c->free_ring[slot] = (int32_t)block;
        c->free_at[block] = (int32_t)slot;
    }
    c->free_base = 0;
    c->free_count = n;
}

static int64_t ring_slot(const attn_kv_cache *c, int64_t i) { return (c->free_base + i) % c->num_blocks; }

static void free_push(attn_kv_cache *c, int32_t block) {
    const int64_t slot = ring_slot(c, c->free_count++);
    c->free_ring[slot] = block;
    c->free_at[block] = (int32_t)slot;
}

/* A block taken from the pool (the caller counted that there is one): the
 * one after `after` when that is free (after >= 0), else the top. */
static int32_t take_block(attn_kv_cache *c, int32_t after) {
    const int32_t next = after + 1;
    if (after >= 0 && next < c->num_blocks && c->free_at[next] >= 0) {
        const int64_t slot = c->free_at[next], bottom_slot = c->free_base;
        const int32_t bottom = c->free_ring[bottom_slot];
        c->free_ring[slot] = bottom; /* the bottom block takes next's place */
        c->free_at[bottom] = (int32_t)slot;
        c->free_at[next] = -1;
        c->free_base = (c->free_base + 1) % c->num_blocks;
        c->free_count--;
        return next;
    }
    const int32_t top = c->free_ring[ring_slot(c, --c->free_count)];
    c->free_at[top] = -1;
    return top;
}

/* ------------------------------------------------------------- creation */

static attn_status check_positive(int64_t value, const char *field) {
    if (value > 0) return ATTN_OK;
    return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_kv_cache_config.%s is %lld: must be > 0", field,
                      (long long)value);
}

static attn_status check_config(const attn_kv_cache_config *cfg) {
    attn_status st;
    if ((st = check_positive(cfg->layers, "layers")) || (st = check_positive(cfg->kv_heads, "kv_heads")) ||
        (st = check_positive(cfg->head_dim, "head_dim")) || (st = check_positive(cfg->max_seqs, "max_seqs")) ||
        (st = check_positive(cfg->capacity, "capacity")))
        return st;
    if (cfg->value_dim < 0)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_kv_cache_config.value_dim is %lld: must be >= 0 (0 = head_dim)",
                          (long long)cfg->value_dim);
    /* K's dtype and width, then V's. */
    const attn_dtype v_dtype = cfg->value_dtype ? cfg->value_dtype : cfg->dtype;
    const int64_t value_dim = cfg->value_dim ? cfg->value_dim : cfg->head_dim;
    for (int i = 0; i < 2; i++) {
        const attn_dtype dtype = i ? v_dtype : cfg->dtype;
        const int64_t width = i ? value_dim : cfg->head_dim;
        if (dtype != ATTN_F32 && dtype != ATTN_F16 && dtype != ATTN_BF16 && !dtype_is_kv8(dtype))
            return attn__fail(ATTN_ERR_UNSUPPORTED,
                              "attn_kv_cache_config.%s is %s: a cache stores float32, float16, bfloat16, q8_0 or "
                              "fp8_e4m3", i ? "value_dtype" : "dtype", attn_dtype_name(dtype));
        if (dtype_is_kv8(dtype) && width % KV8_BLOCK)
            return attn__fail(ATTN_ERR_SHAPE,
                              "attn_kv_cache_config: a %s %s stores blocks of 32 values of a head's row; %s (%lld) "
                              "must be a multiple of 32 (use a float16 or bfloat16 cache)",
                              attn_dtype_name(dtype), i ? "V" : "K", i ? "value_dim" : "head_dim", (long long)width);
    }
    if (cfg->layout == ATTN_KV_PAGED) {
        if ((st = check_positive(cfg->block_rows, "block_rows")) || (st = check_positive(cfg->num_blocks, "num_blocks")))
            return st;
    } else if (cfg->layout != ATTN_KV_CONTIGUOUS) {
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT,
                          "attn_kv_cache_config.layout is %d: ATTN_KV_CONTIGUOUS or ATTN_KV_PAGED", (int)cfg->layout);
    }
    if (cfg->max_seqs > INT32_MAX)
        return attn__fail(ATTN_ERR_OVERFLOW, "attn_kv_cache_config.max_seqs is %lld: at most %d",
                          (long long)cfg->max_seqs, INT32_MAX);
    return ATTN_OK;
}

/* The RoPE options, validated for heads of width D and copied with their
 * own frequency table if they bring one (the caller's may not outlive the
 * call). */
static attn_status copy_rope(attn_kv_cache *c, const attn_rope_options *rope) {
    rope_plan plan;
    attn_status st = attn__rope_plan_init(&plan, c->dim, rope);
    if (st) return attn__fail(st, "attn_kv_cache_config.rope: %s", attn_last_error());
    c->rope = plan.opt;
    if (plan.opt.inv_freq) {
        c->rope_inv_freq = malloc((size_t)plan.freqs * sizeof(double));
        if (!c->rope_inv_freq) return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "attn_kv_cache_new: no memory for RoPE's table");
        memcpy(c->rope_inv_freq, plan.opt.inv_freq, (size_t)plan.freqs * sizeof(double));
        c->rope.inv_freq = c->rope_inv_freq;
    }
    c->has_rope = true;
    return ATTN_OK;
}

/* Bytes of a pool of rows of `row_elements` elements, or 0 on overflow;
 * *row_bytes gets the bytes of one row. */
static size_t pool_bytes(const attn_kv_cache *c, attn_dtype dtype, int64_t row_elements, int64_t *row_bytes) {
    int64_t n;
    if (row_elements > INT64_MAX / 4) return 0;
    *row_bytes = (int64_t)attn_dtype_bytes(dtype, row_elements);
    if (mul_overflows(c->layers, c->num_blocks, &n) || mul_overflows(n, c->block_rows, &n) ||
        mul_overflows(n, *row_bytes, &n))
        return 0;
    return (size_t)n;
}

attn_status attn_kv_cache_new(const attn_kv_cache_config *config, attn_kv_cache **cache) {
    if (!cache) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_kv_cache_new: cache is NULL");
    *cache = NULL;
    if (!config) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_kv_cache_new: config is NULL");
    static const attn_kv_cache_config defaults = ATTN_KV_CACHE_CONFIG_INIT;
    attn_kv_cache_config cfg;
    attn_status st = options_copy(&cfg, sizeof cfg, &defaults, config, "attn_kv_cache_config");
    if (st || (st = check_config(&cfg))) return st;

    attn_kv_cache *c = calloc(1, sizeof *c);
    if (!c) return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "attn_kv_cache_new: no memory");
    c->layers = cfg.layers;
    c->kv_heads = cfg.kv_heads;
    c->dim = cfg.head_dim;
    c->dim_v = cfg.value_dim ? cfg.value_dim : cfg.head_dim;
    c->dtype = cfg.dtype;
    c->v_dtype = cfg.value_dtype ? cfg.value_dtype : cfg.dtype;
    c->layout = cfg.layout;
    c->max_seqs = cfg.max_seqs;
    c->capacity = cfg.capacity;
    const bool paged = cfg.layout == ATTN_KV_PAGED;
    c->block_rows = paged ? cfg.block_rows : cfg.capacity;
    c->num_blocks = paged ? cfg.num_blocks : cfg.max_seqs;
    c->table_len = paged ? ceil_div(cfg.capacity, cfg.block_rows) : 1;
    size_t k_bytes = 0, v_bytes = 0;
    if (c->num_blocks > INT32_MAX || mul_overflows(c->kv_heads, c->dim, &c->k_row) ||
        mul_overflows(c->kv_heads, c->dim_v, &c->v_row) || !(k_bytes = pool_bytes(c, c->dtype, c->k_row, &c->k_row_bytes)) ||
        !(v_bytes = pool_bytes(c, c->v_dtype, c->v_row, &c->v_row_bytes))) {
        st = attn__fail(ATTN_ERR_OVERFLOW, "attn_kv_cache_new: %lld layers x %lld blocks x %lld rows x %lld heads "
                        "x (%lld + %lld) widths overflow",
                        (long long)c->layers, (long long)c->num_blocks, (long long)c->block_rows,
                        (long long)c->kv_heads, (long long)c->dim, (long long)c->dim_v);
        goto fail;
    }
    if (cfg.rope && (st = copy_rope(c, cfg.rope))) goto fail;
    /* Pages of the pools are mapped as sequences first touch them, large
     * pools' as 2 MiB pages where the system has them (base/pages.h: a
     * decoding step streams the pools, and walks 512x fewer page-table
     * entries then). */
    if (attn__pages_alloc(&c->k_pages, k_bytes) && attn__pages_alloc(&c->v_pages, v_bytes)) {
        c->k_pool = c->k_pages.data;
        c->v_pool = c->v_pages.data;
    }
    c->refs = calloc((size_t)c->num_blocks, sizeof *c->refs);
    c->free_ring = malloc((size_t)c->num_blocks * sizeof *c->free_ring);
    c->free_at = malloc((size_t)c->num_blocks * sizeof *c->free_at);
    c->live = calloc((size_t)c->max_seqs, sizeof *c->live);
    c->lengths = calloc((size_t)(c->max_seqs * c->layers), sizeof *c->lengths);
    c->tables = calloc((size_t)(c->max_seqs * c->table_len), sizeof *c->tables);
    c->held = calloc((size_t)c->max_seqs, sizeof *c->held);
    if (!c->k_pool || !c->v_pool || !c->refs || !c->free_ring || !c->free_at || !c->live || !c->lengths || !c->tables ||
        !c->held) {
        st = attn__fail(ATTN_ERR_OUT_OF_MEMORY, "attn_kv_cache_new: no memory for %zu + %zu bytes of keys and values",
                        k_bytes, v_bytes);
        goto fail;
    }
    pool_init(c);
    *cache = c;
    return ATTN_OK;
fail:
    attn_kv_cache_free(c);
    return st;
}

void attn_kv_cache_free(attn_kv_cache *c) {
    if (!c) return;
    attn__pages_free(&c->k_pages);
    attn__pages_free(&c->v_pages);
    free(c->refs);
    free(c->free_ring);
    free(c->free_at);
    free(c->live);
    free(c->lengths);
    free(c->tables);
    free(c->held);
    free(c->rope_inv_freq);
    free(c);
}

/* Deprecated names, until 1.0 (attn_cache.h). */
attn_status attn_kv_cache_create(const attn_kv_cache_config *config, attn_kv_cache **cache) {
    return attn_kv_cache_new(config, cache);
}
void attn_kv_cache_destroy(attn_kv_cache *cache) { attn_kv_cache_free(cache); }
/* End of the deprecated names. */

/* ------------------------------------------------------------ sequences */

attn_status attn__kv_cache_check_seq(const attn_kv_cache *c, const char *fn, int64_t seq, int64_t layer) {
    if (!c) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "%s: cache is NULL", fn);
    if (seq < 0 || seq >= c->max_seqs || !c->live[seq])
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "%s: sequence %lld is not in the cache (%s)", fn, (long long)seq,
                          seq < 0 || seq >= c->max_seqs ? "ids are 0 .. max_seqs - 1" : "freed, or never added");
    if (layer < 0 || layer >= c->layers)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "%s: layer %lld is not in the cache (it has %lld layers)", fn,
                          (long long)layer, (long long)c->layers);
    return ATTN_OK;
}

/* The lowest free slot into *seq; out is the caller's pointer for the new
 * id, checked here. */
static attn_status take_slot(attn_kv_cache *c, const char *fn, const int64_t *out, int64_t *seq) {
    if (!c) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "%s: cache is NULL", fn);
    if (!out) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "%s: the pointer for the new id is NULL", fn);
    for (int64_t s = 0; s < c->max_seqs; s++)
        if (!c->live[s]) {
            *seq = s;
            return ATTN_OK;
        }
    return attn__fail(ATTN_ERR_CAPACITY, "%s: all %lld sequence slots are taken (free one, or create the cache with "
                      "a larger max_seqs)", fn, (long long)c->max_seqs);
}

attn_status attn_kv_cache_seq_add(attn_kv_cache *c, int64_t *seq) {
    int64_t s = -1;
    attn_status st = take_slot(c, "attn_kv_cache_seq_add", seq, &s);
    if (st) return st;
    c->live[s] = true;
    c->held[s] = 0;
    memset(c->lengths + s * c->layers, 0, (size_t)c->layers * sizeof *c->lengths);
    *seq = s;
    return ATTN_OK;
}

attn_status attn_kv_cache_seq_fork(attn_kv_cache *c, int64_t parent, int64_t *child) {
    attn_status st;
    int64_t s = -1;
    if ((st = attn__kv_cache_check_seq(c, "attn_kv_cache_seq_fork", parent, 0)) ||
        (st = take_slot(c, "attn_kv_cache_seq_fork", child, &s)))
        return st;
    c->live[s] = true;
    c->held[s] = c->held[parent];
    memcpy(c->lengths + s * c->layers, c->lengths + parent * c->layers, (size_t)c->layers * sizeof *c->lengths);
    memcpy(c->tables + s * c->table_len, c->tables + parent * c->table_len,
           (size_t)c->held[parent] * sizeof *c->tables);
    for (int64_t b = 0; b < c->held[s]; b++) c->refs[c->tables[s * c->table_len + b]]++;
    *child = s;
    return ATTN_OK;
}

attn_status attn_kv_cache_seq_free(attn_kv_cache *c, int64_t seq) {
    attn_status st = attn__kv_cache_check_seq(c, "attn_kv_cache_seq_free", seq, 0);
    if (st) return st;
    const int32_t *table = c->tables + seq * c->table_len;
    for (int64_t b = c->held[seq] - 1; b >= 0; b--) /* last first: the first ends on top */
        if (--c->refs[table[b]] == 0) free_push(c, table[b]);
    c->held[seq] = 0;
    c->live[seq] = false;
    return ATTN_OK;
}

attn_status attn_kv_cache_seq_length(const attn_kv_cache *c, int64_t seq, int64_t layer, int64_t *length) {
    attn_status st = attn__kv_cache_check_seq(c, "attn_kv_cache_seq_length", seq, layer);
    if (st) return st;
    if (!length) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_kv_cache_seq_length: length is NULL");
    *length = c->lengths[seq * c->layers + layer];
    return ATTN_OK;
}

attn_status attn_kv_cache_saturated(const attn_kv_cache *c, int64_t *values) {
    if (!c) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_kv_cache_saturated: cache is NULL");
    if (!values) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_kv_cache_saturated: values is NULL");
    *values = c->saturated;
    return ATTN_OK;
}

attn_status attn_kv_cache_pool(const attn_kv_cache *c, int64_t *free_blocks, int64_t *total_blocks,
                               int64_t *block_rows) {
    if (!c) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_kv_cache_pool: cache is NULL");
    if (free_blocks) *free_blocks = c->free_count;
    if (total_blocks) *total_blocks = c->num_blocks;
    if (block_rows) *block_rows = c->block_rows;
    return ATTN_OK;
}

/* --------------------------------------------------------------- append */

/* The appended tensor k or v: [1, N, Hkv, width], float32 or the cache's
 * dtype, rows N as k's. */
static attn_status check_rows(const attn_kv_cache *c, const attn_tensor *t, const char *name, int64_t width,
                              int64_t rows) {
    static const char fn[] = "attn_kv_cache_append";
    const attn_dtype dtype = name[0] == 'k' ? c->dtype : c->v_dtype;
    if (!t) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn, name);
    if (!t->data) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "%s: %s.data is NULL", fn, name);
    if (t->dtype != ATTN_F32 && t->dtype != dtype)
        return attn__fail(ATTN_ERR_UNSUPPORTED, "%s: %s holds %s; the cache takes float32 or the dtype it stores %s in, %s",
                          fn, name, attn_dtype_name(t->dtype), name, attn_dtype_name(dtype));
    if (t->shape[0] != 1 || t->shape[1] != rows || rows <= 0 || t->shape[2] != c->kv_heads || t->shape[3] != width)
        return attn__fail(ATTN_ERR_SHAPE,
                          "%s: %s is [%lld, %lld, %lld, %lld]; it must be [1, N, Hkv, %s] = [1, %lld, %lld, %lld] "
                          "(N > 0 rows, the same for k and v)",
                          fn, name, (long long)t->shape[0], (long long)t->shape[1], (long long)t->shape[2],
                          (long long)t->shape[3], name[0] == 'k' ? "D" : "Dv", (long long)rows,
                          (long long)c->kv_heads, (long long)width);
    if (t->stride[3] != 1)
        return attn__fail(ATTN_ERR_SHAPE, "%s: %s.stride[3] is %lld: the last dimension must be contiguous", fn, name,
                          (long long)t->stride[3]);
    if (dtype_is_kv8(t->dtype) && (t->stride[1] % KV8_BLOCK || t->stride[2] % KV8_BLOCK))
        return attn__fail(ATTN_ERR_SHAPE, "%s: %s holds %s blocks: its strides must be multiples of 32", fn, name,
                          attn_dtype_name(t->dtype));
    if (dtype == ATTN_Q8_0 && t->dtype == ATTN_F32)
        for (int64_t r = 0; r < rows; r++)
            for (int64_t h = 0; h < c->kv_heads; h++) {
                const float *x = (const float *)t->data + r * t->stride[1] + h * t->stride[2];
                for (int64_t d = 0; d < width; d++)
                    if (x[d] != x[d])
                        return attn__fail(ATTN_ERR_NONFINITE,
                                          "%s: %s[0, %lld, %lld, %lld] is NaN, which a q8_0 cache cannot hold", fn,
                                          name, (long long)r, (long long)h, (long long)d);
            }
    return ATTN_OK;
}

/* n elements of one head's row, from src's dtype to dst's: a copy, or
 * float32 rounded to nearest even, or quantized to an 8-bit block format
 * (the conversions check_rows lets through); *saturated counts the values
 * an 8-bit format clamped (base/kv8.c). */
static void store_row(void *dst, attn_dtype dst_dtype, const void *src, attn_dtype src_dtype, int64_t n,
                      int64_t *saturated) {
    if (src_dtype == dst_dtype) {
        memcpy(dst, src, attn_dtype_bytes(dst_dtype, n));
        return;
    }
    const float *f = src;
    uint16_t *h = dst;
    if (dtype_is_kv8(dst_dtype))
        for (int64_t b = 0; b < n / KV8_BLOCK; b++)
            attn__kv8_quantize_block(f + b * KV8_BLOCK, dst_dtype, (uint8_t *)dst + b * KV8_BLOCK_BYTES, saturated);
    else if (dst_dtype == ATTN_F16)
        for (int64_t i = 0; i < n; i++) h[i] = dtype_f32_to_f16(f[i]);
    else
        for (int64_t i = 0; i < n; i++) h[i] = dtype_f32_to_bf16(f[i]);
}

/* The rows of t, head by head, into the sequence's rows [start, start + N)
 * of one layer's pool (k or v). */
static void store_rows(attn_kv_cache *c, int64_t seq, int64_t layer, int64_t start, const attn_tensor *t,
                       bool keys) {
    const int32_t *table = c->tables + seq * c->table_len;
    const int64_t width = keys ? c->dim : c->dim_v;
    const attn_dtype dtype = keys ? c->dtype : c->v_dtype;
    for (int64_t r = 0; r < t->shape[1]; r++) {
        const int64_t position = start + r, block = table[position / c->block_rows], row = position % c->block_rows;
        unsigned char *dst = keys ? kv_cache_k_row(c, layer, block, row) : kv_cache_v_row(c, layer, block, row);
        for (int64_t h = 0; h < c->kv_heads; h++) {
            const unsigned char *src =
                (const unsigned char *)t->data + attn_dtype_bytes(t->dtype, r * t->stride[1] + h * t->stride[2]);
            store_row(dst + attn_dtype_bytes(dtype, h * width), dtype, src, t->dtype, width, &c->saturated);
        }
    }
}

/* A private copy of a shared block for sequence seq: the rows each layer
 * holds in it, into a block taken from the pool (there is one: counted). */
static void copy_on_write(attn_kv_cache *c, int64_t seq, int64_t entry) {
    int32_t *table = c->tables + seq * c->table_len;
    const int32_t shared = table[entry], copy = take_block(c, entry > 0 ? table[entry - 1] : -1);
    for (int64_t l = 0; l < c->layers; l++) {
        const int64_t rows = min_i64(max_i64(c->lengths[seq * c->layers + l] - entry * c->block_rows, 0), c->block_rows);
        memcpy(kv_cache_k_row(c, l, copy, 0), kv_cache_k_row(c, l, shared, 0), (size_t)(rows * c->k_row_bytes));
        memcpy(kv_cache_v_row(c, l, copy, 0), kv_cache_v_row(c, l, shared, 0), (size_t)(rows * c->v_row_bytes));
    }
    c->refs[shared]--;
    c->refs[copy] = 1;
    table[entry] = copy;
}

/* The keys rotated at positions start .. start + N - 1, in a contiguous
 * scratch copy in k's dtype (*rotated, which the caller frees), so that a
 * failure of the rotation comes before the cache is touched. */
static attn_status rotate_keys(const attn_kv_cache *c, const attn_tensor *k, int64_t start, void **rotated,
                               attn_tensor *view) {
    const int64_t n = k->shape[1];
    const size_t bytes = attn_dtype_size(k->dtype), row_bytes = (size_t)c->dim * bytes;
    unsigned char *copy = malloc((size_t)(n * c->k_row) * bytes);
    if (!copy)
        return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "attn_kv_cache_append: no memory to rotate %lld key rows",
                          (long long)n);
    for (int64_t r = 0; r < n; r++)
        for (int64_t h = 0; h < c->kv_heads; h++)
            memcpy(copy + (size_t)(r * c->k_row + h * c->dim) * bytes,
                   (const unsigned char *)k->data + (size_t)(r * k->stride[1] + h * k->stride[2]) * bytes, row_bytes);
    *view = attn_tensor_view(copy, k->dtype, 1, n, c->kv_heads, c->dim);
    attn_status st = attn_rope_apply(view, NULL, start, &c->rope);
    if (st) {
        free(copy);
        return attn__fail(st, "attn_kv_cache_append: RoPE on the keys: %s", attn_last_error());
    }
    *rotated = copy;
    return ATTN_OK;
}

attn_status attn_kv_cache_append(attn_kv_cache *c, int64_t seq, int64_t layer, const attn_tensor *k,
                                 const attn_tensor *v) {
    static const char fn[] = "attn_kv_cache_append";
    attn_status st;
    if ((st = attn__kv_cache_check_seq(c, fn, seq, layer)) ||
        (st = check_rows(c, k, "k", c->dim, k ? k->shape[1] : 0)) || (st = check_rows(c, v, "v", c->dim_v, k->shape[1])))
        return st;
    const int64_t n = k->shape[1], start = c->lengths[seq * c->layers + layer];
    if (n > c->capacity - start)
        return attn__fail(ATTN_ERR_CAPACITY,
                          "%s: sequence %lld, layer %lld holds %lld rows; %lld more would exceed its capacity of %lld",
                          fn, (long long)seq, (long long)layer, (long long)start, (long long)n, (long long)c->capacity);

    /* Blocks to take: one per table entry the rows reach beyond the table,
     * and one copy per shared entry they write into.  Another layer may
     * have taken (or copied) them already: the table is every layer's. */
    const int64_t first = start / c->block_rows, last = (start + n - 1) / c->block_rows;
    const int32_t *table = c->tables + seq * c->table_len;
    int64_t needed = 0;
    for (int64_t e = first; e <= last; e++) needed += e >= c->held[seq] || c->refs[table[e]] > 1;
    if (needed > c->free_count)
        return attn__fail(ATTN_ERR_CAPACITY,
                          "%s: sequence %lld, layer %lld (%lld rows): %lld more rows need %lld blocks of %lld rows, "
                          "and the pool has %lld free of %lld (free or preempt a sequence)",
                          fn, (long long)seq, (long long)layer, (long long)start, (long long)n, (long long)needed,
                          (long long)c->block_rows, (long long)c->free_count, (long long)c->num_blocks);
    void *rotated = NULL;
    attn_tensor rotated_k;
    if (c->has_rope && dtype_is_kv8(k->dtype))
        return attn__fail(ATTN_ERR_UNSUPPORTED, "%s: the cache rotates keys (RoPE) and k holds %s; give the keys in "
                          "float32 (they are quantized after the rotation)", fn, attn_dtype_name(k->dtype));
    if (c->has_rope && (st = rotate_keys(c, k, start, &rotated, &rotated_k))) return st;

    /* Nothing can fail from here on. */
    for (int64_t e = first; e <= last; e++) {
        if (e < c->held[seq]) {
            if (c->refs[table[e]] > 1) copy_on_write(c, seq, e);
        } else {
            const int64_t held = c->held[seq];
            const int32_t block = take_block(c, held > 0 ? c->tables[seq * c->table_len + held - 1] : -1);
            c->refs[block] = 1;
            c->tables[seq * c->table_len + c->held[seq]++] = block;
        }
    }
    store_rows(c, seq, layer, start, rotated ? &rotated_k : k, true);
    store_rows(c, seq, layer, start, v, false);
    c->lengths[seq * c->layers + layer] = start + n;
    free(rotated);
    return ATTN_OK;
}

/* ---------------------------------------------------------------- views */

attn_status attn_kv_cache_view(const attn_kv_cache *c, int64_t seq, int64_t layer, attn_kv_segment *segments,
                               int64_t max_segments, int64_t *count) {
    static const char fn[] = "attn_kv_cache_view";
    attn_status st = attn__kv_cache_check_seq(c, fn, seq, layer);
    if (st) return st;
    if (!count) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "%s: count is NULL", fn);
    if (segments && max_segments < 0)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "%s: max_segments is %lld", fn, (long long)max_segments);
    const int64_t len = c->lengths[seq * c->layers + layer], br = c->block_rows;
    const int32_t *table = c->tables + seq * c->table_len;
    int64_t n = 0;
    for (int64_t e = 0; e * br < len;) {
        /* A run of table entries whose blocks are neighbours in the pool. */
        int64_t end = e + 1;
        while (end * br < len && table[end] == table[end - 1] + 1) end++;
        if (segments && n < max_segments) {
            const int64_t rows = min_i64(end * br, len) - e * br;
            attn_kv_segment *s = &segments[n];
            s->position = e * br;
            s->k = attn_tensor_view(kv_cache_k_row(c, layer, table[e], 0), c->dtype, 1, rows, c->kv_heads, c->dim);
            s->v = attn_tensor_view(kv_cache_v_row(c, layer, table[e], 0), c->v_dtype, 1, rows, c->kv_heads, c->dim_v);
        }
        n++;
        e = end;
    }
    *count = n;
    if (segments && n > max_segments)
        return attn__fail(ATTN_ERR_SHAPE, "%s: sequence %lld, layer %lld is %lld segments; room was given for %lld", fn,
                          (long long)seq, (long long)layer, (long long)n, (long long)max_segments);
    return ATTN_OK;
}
