/*
 * test_kv_cache.c — the KV cache (attn_cache.h): incremental decoding and
 * chunked prefill through it against one full-sequence attention call,
 * batched against per-sequence calls, forks, the pool (reuse, a full pool
 * that changes nothing), half-precision caches, thread counts, and bad
 * arguments.
 *
 * Shape legend: q [1, L, Hq, D]  k [1, L, Hkv, D]  v [1, L, Hkv, Dv]  out [1, L, Hq, Dv]
 *   one sequence's whole stream; the cache is fed rows [pos, pos + chunk).
 * Sizes are odd on purpose: Hq 4 over Hkv 2 (GQA), D 16, Dv 8 (Dv != D),
 * blocks of 7 or 16 rows, streams up to 257 rows.
 *
 * Tolerances: tests/support/tolerances.h, CACHE_*.
 */
#include "testutil.h"
#include "tolerances.h"

#include "attn_cache.h"
#include "base/dtype.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

enum { HQ = 4, HKV = 2, D = 16, DV = 8, LONG = 257 };

/* ------------------------------------------------------------------ helpers */

typedef struct stream {
    int64_t len;
    float *q, *k, *v; /* [len, Hq, D], [len, Hkv, D], [len, Hkv, Dv] */
} stream;

static stream stream_new(uint64_t seed, int64_t len) {
    stream s = {len, malloc((size_t)(len * HQ * D) * sizeof(float)), malloc((size_t)(len * HKV * D) * sizeof(float)),
                malloc((size_t)(len * HKV * DV) * sizeof(float))};
    assert_true(s.q && s.k && s.v);
    test_rng r;
    test_rng_seed(&r, seed);
    test_fill_normal(&r, s.q, len * HQ * D, 1.0);
    test_fill_normal(&r, s.k, len * HKV * D, 1.0);
    test_fill_normal(&r, s.v, len * HKV * DV, 1.0);
    return s;
}

static void stream_free(stream *s) {
    free(s->q);
    free(s->k);
    free(s->v);
}

static attn_tensor rows_of(float *base, int64_t first, int64_t n, int64_t heads, int64_t width) {
    return attn_tensor_4d(base + first * heads * width, 1, n, heads, width);
}

static attn_kv_cache *cache_new(attn_kv_layout layout, int64_t block_rows, int64_t num_blocks, int64_t layers,
                                attn_dtype dtype, const attn_rope_options *rope) {
    attn_kv_cache_config cfg = ATTN_KV_CACHE_CONFIG_INIT;
    cfg.layers = layers;
    cfg.kv_heads = HKV;
    cfg.head_dim = D;
    cfg.value_dim = DV;
    cfg.dtype = dtype;
    cfg.layout = layout;
    cfg.max_seqs = layout == ATTN_KV_PAGED ? 8 + num_blocks : 8; /* room for fragment_pool's one-block sequences */
    cfg.capacity = 300;
    cfg.block_rows = block_rows;
    cfg.num_blocks = num_blocks;
    cfg.rope = rope;
    attn_kv_cache *c = NULL;
    attn_status st = attn_kv_cache_new(&cfg, &c);
    if (st) fail_msg("attn_kv_cache_new: %s", attn_last_error());
    return c;
}

static void expect_ok(attn_status st, const char *what) {
    if (st) fail_msg("%s: %s (%s)", what, attn_status_str(st), attn_last_error());
}

static void append_rows(attn_kv_cache *c, int64_t seq, int64_t layer, stream *s, int64_t first, int64_t n) {
    attn_tensor k = rows_of(s->k, first, n, HKV, D), v = rows_of(s->v, first, n, HKV, DV);
    expect_ok(attn_kv_cache_append(c, seq, layer, &k, &v), "append");
}

static int compare_addresses(const void *a, const void *b) {
    const uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
    return (x > y) - (x < y);
}

/* Makes the free part of a paged pool a comb, as a pool that has served
 * many short sequences leaves it: every free block is given to a one-block
 * sequence (block_rows rows of layer 0), then every other of them, in the
 * order of their blocks' addresses, is freed, the highest first, so that
 * the free blocks are taken lowest first and none is next to another:
 * sequences that grow side by side then alternate block by block, and a
 * view is as many segments as blocks (the pool otherwise keeps a
 * sequence's blocks together: kv_cache.c, "The pool"). */
static void fragment_pool(attn_kv_cache *c) {
    int64_t free_blocks, block_rows;
    expect_ok(attn_kv_cache_pool(c, &free_blocks, NULL, &block_rows), "pool");
    float *zeros = calloc((size_t)(block_rows * HKV * D), sizeof(float));
    int64_t *ids = malloc((size_t)(free_blocks + 1) * sizeof *ids);
    uintptr_t(*order)[2] = malloc((size_t)(free_blocks + 1) * sizeof *order);
    assert_true(zeros && ids && order);
    const int64_t n = free_blocks;
    for (int64_t i = 0; i < n; i++) {
        expect_ok(attn_kv_cache_seq_add(c, &ids[i]), "fragment_pool: seq_add");
        attn_tensor k = attn_tensor_4d(zeros, 1, block_rows, HKV, D), v = attn_tensor_4d(zeros, 1, block_rows, HKV, DV);
        expect_ok(attn_kv_cache_append(c, ids[i], 0, &k, &v), "fragment_pool: append");
        attn_kv_segment seg;
        int64_t count;
        expect_ok(attn_kv_cache_view(c, ids[i], 0, &seg, 1, &count), "fragment_pool: view");
        order[i][0] = (uintptr_t)seg.k.data;
        order[i][1] = (uintptr_t)ids[i];
    }
    qsort(order, (size_t)n, sizeof *order, compare_addresses);
    for (int64_t i = n - 1; i >= 0; i--)
        if (i % 2 == 0) expect_ok(attn_kv_cache_seq_free(c, (int64_t)order[i][1]), "fragment_pool: free");
    free(zeros);
    free(ids);
    free(order);
}

/* The full-sequence answer: causal attention of the whole stream, with
 * RoPE (when given) applied to all of q and k by attn_rope_apply. */
static float *full_reference(const stream *s, const attn_rope_options *rope) {
    float *q = malloc((size_t)(s->len * HQ * D) * sizeof(float)), *k = malloc((size_t)(s->len * HKV * D) * sizeof(float));
    float *out = malloc((size_t)(s->len * HQ * DV) * sizeof(float));
    assert_true(q && k && out);
    memcpy(q, s->q, (size_t)(s->len * HQ * D) * sizeof(float));
    memcpy(k, s->k, (size_t)(s->len * HKV * D) * sizeof(float));
    attn_tensor qt = attn_tensor_4d(q, 1, s->len, HQ, D), kt = attn_tensor_4d(k, 1, s->len, HKV, D);
    attn_tensor vt = attn_tensor_4d(s->v, 1, s->len, HKV, DV), ot = attn_tensor_4d(out, 1, s->len, HQ, DV);
    if (rope) {
        expect_ok(attn_rope_apply(&qt, NULL, 0, rope), "rope q");
        expect_ok(attn_rope_apply(&kt, NULL, 0, rope), "rope k");
    }
    attn_sdpa_options opt = ATTN_SDPA_OPTIONS_INIT;
    opt.causal = 1;
    expect_ok(attn_sdpa_forward(&qt, &kt, &vt, &opt, &ot, NULL, NULL), "full forward");
    free(q);
    free(k);
    return out;
}

/* max |a - b| over n, relative to max(1, max |b|). */
static double rel_diff(const float *a, const float *b, int64_t n) {
    double diff = 0, scale = 1;
    for (int64_t i = 0; i < n; i++) {
        diff = fmax(diff, fabs((double)a[i] - (double)b[i]));
        scale = fmax(scale, fabs((double)b[i]));
        if (a[i] != a[i]) return INFINITY;
    }
    return diff / scale;
}

/* Streams n_seqs streams through one cache together, `chunk` rows per
 * step (the queries of a step are its rows, rotated at their positions
 * when rope is given; every sequence's step in one batched call), and
 * returns each stream's outputs [len, Hq, Dv] (freed by the caller). */
static float **decode_streams(attn_kv_cache *c, stream *s, int n_seqs, int64_t chunk, const attn_rope_options *rope,
                              int threads, bool comb) {
    int64_t seqs[8], rows[8], done[8] = {0};
    float **outs = calloc((size_t)n_seqs, sizeof *outs);
    assert_non_null(outs);
    int64_t longest = 0;
    for (int i = 0; i < n_seqs; i++) {
        expect_ok(attn_kv_cache_seq_add(c, &seqs[i]), "seq_add");
        outs[i] = malloc((size_t)(s[i].len * HQ * DV) * sizeof(float));
        longest = longest > s[i].len ? longest : s[i].len;
    }
    if (comb) fragment_pool(c); /* after the streams took their ids */
    float *q = malloc((size_t)(n_seqs * chunk * HQ * D) * sizeof(float));
    float *out = malloc((size_t)(n_seqs * chunk * HQ * DV) * sizeof(float));
    assert_true(q && out);
    for (int64_t step = 0; step * chunk < longest; step++) {
        int64_t ids[8], n = 0, total = 0;
        for (int i = 0; i < n_seqs; i++) {
            if (done[i] >= s[i].len) continue;
            rows[n] = s[i].len - done[i] < chunk ? s[i].len - done[i] : chunk;
            append_rows(c, seqs[i], 0, &s[i], done[i], rows[n]);
            memcpy(q + total * HQ * D, s[i].q + done[i] * HQ * D, (size_t)(rows[n] * HQ * D) * sizeof(float));
            if (rope) {
                attn_tensor qt = rows_of(q, total, rows[n], HQ, D);
                expect_ok(attn_rope_apply(&qt, NULL, done[i], rope), "rope q rows");
            }
            ids[n] = seqs[i];
            total += rows[n];
            n++;
        }
        attn_tensor qt = attn_tensor_4d(q, 1, total, HQ, D), ot = attn_tensor_4d(out, 1, total, HQ, DV);
        attn_sdpa_options opt = ATTN_SDPA_OPTIONS_INIT;
        opt.threads = threads;
        expect_ok(attn_kv_cache_attend(c, 0, n, ids, rows, &qt, &opt, &ot, NULL), "attend");
        int64_t at = 0, j = 0;
        for (int i = 0; i < n_seqs; i++) {
            if (done[i] >= s[i].len) continue;
            memcpy(outs[i] + done[i] * HQ * DV, out + at * HQ * DV, (size_t)(rows[j] * HQ * DV) * sizeof(float));
            at += rows[j];
            done[i] += rows[j];
            j++;
        }
    }
    free(q);
    free(out);
    return outs;
}

static void outs_free(float **outs, int n) {
    for (int i = 0; i < n; i++) free(outs[i]);
    free(outs);
}

/* ------------------------------------------------------------------- tests */

/* Step by step (chunk 1), in odd chunks and in 64-row chunks, contiguous
 * and paged (two streams interleaved, so that their blocks alternate and
 * each view is many segments), with and without RoPE on append: every
 * step's output equals the full-sequence call's row, for every length
 * 1 .. 257. */
static void test_incremental_equals_full(void **state) {
    (void)state;
    const int64_t chunks[] = {1, 7, 64};
    attn_rope_options rope = ATTN_ROPE_OPTIONS_INIT;
    rope.theta = 500.0; /* angles that turn fast over 257 positions */
    for (int with_rope = 0; with_rope < 2; with_rope++)
        for (int paged = 0; paged < 2; paged++)
            for (size_t ci = 0; ci < sizeof chunks / sizeof chunks[0]; ci++) {
                stream s[2] = {stream_new(11, LONG), stream_new(12, 150)};
                const attn_rope_options *r = with_rope ? &rope : NULL;
                attn_kv_cache *c = cache_new(paged ? ATTN_KV_PAGED : ATTN_KV_CONTIGUOUS, 16, 64, 1, ATTN_F32, r);
                float **outs = decode_streams(c, s, 2, chunks[ci], r, 0, paged);
                for (int i = 0; i < 2; i++) {
                    float *want = full_reference(&s[i], r);
                    const double d = rel_diff(outs[i], want, s[i].len * HQ * DV);
                    if (d > CACHE_OUT_REL_FAIL)
                        fail_msg("%s, rope %d, chunk %lld, stream %d: max rel diff %.3g > %.3g",
                                 paged ? "paged" : "contiguous", with_rope, (long long)chunks[ci], i, d,
                                 CACHE_OUT_REL_FAIL);
                    free(want);
                }
                if (paged) {
                    int64_t segments;
                    expect_ok(attn_kv_cache_view(c, 0, 0, NULL, 0, &segments), "view");
                    assert_true(segments >= 4); /* the blocks did alternate */
                }
                outs_free(outs, 2);
                attn_kv_cache_free(c);
                stream_free(&s[0]);
                stream_free(&s[1]);
            }
}

/* Eight sequences of mixed lengths in a paged cache (blocks of 7): one
 * batched call of decode and prefill rows together gives, bit for bit,
 * what eight calls of one sequence give, and the full-sequence answer. */
static void test_batched_equals_per_sequence(void **state) {
    (void)state;
    const int64_t lens[8] = {1, 3, 17, 113, 200, 64, 5, 257}, rows[8] = {1, 3, 1, 9, 1, 64, 2, 1};
    stream s[8];
    attn_kv_cache *c = cache_new(ATTN_KV_PAGED, 7, 200, 1, ATTN_F32, NULL);
    int64_t seqs[8];
    for (int i = 0; i < 8; i++) {
        s[i] = stream_new(100 + (uint64_t)i, lens[i]);
        expect_ok(attn_kv_cache_seq_add(c, &seqs[i]), "seq_add");
    }
    /* Interleaved appends of 5 rows, so that blocks alternate. */
    for (int64_t at = 0; at < LONG; at += 5)
        for (int i = 0; i < 8; i++)
            if (at < lens[i]) append_rows(c, seqs[i], 0, &s[i], at, lens[i] - at < 5 ? lens[i] - at : 5);
    int64_t total = 0;
    for (int i = 0; i < 8; i++) total += rows[i];
    float *q = malloc((size_t)(total * HQ * D) * sizeof(float)), *batched = malloc((size_t)(total * HQ * DV) * sizeof(float));
    float *single = malloc((size_t)(total * HQ * DV) * sizeof(float));
    float *lse = malloc((size_t)(HQ * total) * sizeof(float));
    assert_true(q && batched && single && lse);
    int64_t at = 0;
    for (int i = 0; i < 8; i++) {
        memcpy(q + at * HQ * D, s[i].q + (lens[i] - rows[i]) * HQ * D, (size_t)(rows[i] * HQ * D) * sizeof(float));
        at += rows[i];
    }
    attn_tensor qt = attn_tensor_4d(q, 1, total, HQ, D), ot = attn_tensor_4d(batched, 1, total, HQ, DV);
    expect_ok(attn_kv_cache_attend(c, 0, 8, seqs, rows, &qt, NULL, &ot, lse), "batched attend");
    at = 0;
    for (int i = 0; i < 8; i++) {
        attn_tensor qi = rows_of(q, at, rows[i], HQ, D), oi = rows_of(single, at, rows[i], HQ, DV);
        expect_ok(attn_kv_cache_attend(c, 0, 1, &seqs[i], &rows[i], &qi, NULL, &oi, NULL), "single attend");
        float *want = full_reference(&s[i], NULL);
        const double d = rel_diff(single + at * HQ * DV, want + (lens[i] - rows[i]) * HQ * DV, rows[i] * HQ * DV);
        if (d > CACHE_OUT_REL_FAIL) fail_msg("sequence %d: max rel diff %.3g against the full call", i, d);
        free(want);
        at += rows[i];
    }
    assert_memory_equal(batched, single, (size_t)(total * HQ * DV) * sizeof(float));
    for (int64_t i = 0; i < HQ * total; i++) assert_true(isfinite(lse[i]));
    /* Bit-identical for 1, 2 and 3 threads. */
    for (int threads = 1; threads <= 3; threads++) {
        attn_sdpa_options opt = ATTN_SDPA_OPTIONS_INIT;
        opt.threads = threads;
        attn_tensor o2 = attn_tensor_4d(single, 1, total, HQ, DV);
        expect_ok(attn_kv_cache_attend(c, 0, 8, seqs, rows, &qt, &opt, &o2, NULL), "threaded attend");
        assert_memory_equal(batched, single, (size_t)(total * HQ * DV) * sizeof(float));
    }
    free(q);
    free(batched);
    free(single);
    free(lse);
    for (int i = 0; i < 8; i++) stream_free(&s[i]);
    attn_kv_cache_free(c);
}

/* Every row of one layer of a sequence, read back through its view,
 * as float32 [len, Hkv, D] and [len, Hkv, Dv] (freed by the caller). */
static void read_back(const attn_kv_cache *c, int64_t seq, int64_t layer, float **k, float **v, int64_t *len) {
    int64_t count;
    expect_ok(attn_kv_cache_seq_length(c, seq, layer, len), "length");
    expect_ok(attn_kv_cache_view(c, seq, layer, NULL, 0, &count), "view count");
    attn_kv_segment *segs = calloc((size_t)count + 1, sizeof *segs);
    expect_ok(attn_kv_cache_view(c, seq, layer, segs, count, &count), "view");
    *k = malloc((size_t)(*len * HKV * D + 1) * sizeof(float));
    *v = malloc((size_t)(*len * HKV * DV + 1) * sizeof(float));
    for (int64_t g = 0; g < count; g++) {
        const attn_kv_segment *sg = &segs[g];
        for (int64_t i = 0; i < sg->k.shape[1] * HKV * D; i++) {
            const void *p = sg->k.data;
            (*k)[sg->position * HKV * D + i] = sg->k.dtype == ATTN_F32 ? ((const float *)p)[i]
                                               : sg->k.dtype == ATTN_F16 ? dtype_f16_to_f32(((const uint16_t *)p)[i])
                                                                         : dtype_bf16_to_f32(((const uint16_t *)p)[i]);
        }
        for (int64_t i = 0; i < sg->v.shape[1] * HKV * DV; i++) {
            const void *p = sg->v.data;
            (*v)[sg->position * HKV * DV + i] = sg->v.dtype == ATTN_F32 ? ((const float *)p)[i]
                                                : sg->v.dtype == ATTN_F16 ? dtype_f16_to_f32(((const uint16_t *)p)[i])
                                                                          : dtype_bf16_to_f32(((const uint16_t *)p)[i]);
        }
    }
    free(segs);
}

static void expect_rows(const attn_kv_cache *c, int64_t seq, const float *k, const float *v, int64_t len) {
    float *gk, *gv;
    int64_t got;
    read_back(c, seq, 0, &gk, &gv, &got);
    assert_int_equal(got, len);
    assert_memory_equal(gk, k, (size_t)(len * HKV * D) * sizeof(float));
    assert_memory_equal(gv, v, (size_t)(len * HKV * DV) * sizeof(float));
    free(gk);
    free(gv);
}

/* A fork shares the parent's blocks; appending to both afterwards (into
 * the shared, partly filled last block) leaves each with exactly the rows
 * an independent sequence would have, in both layouts. */
static void test_fork_isolation(void **state) {
    (void)state;
    for (int paged = 0; paged < 2; paged++) {
        stream a = stream_new(21, 60), b = stream_new(22, 60);
        attn_kv_cache *c = cache_new(paged ? ATTN_KV_PAGED : ATTN_KV_CONTIGUOUS, 16, 16, 1, ATTN_F32, NULL);
        int64_t parent, child, free_before, free_after;
        expect_ok(attn_kv_cache_seq_add(c, &parent), "add");
        append_rows(c, parent, 0, &a, 0, 37); /* 2 full blocks of 16 and 5 rows of a third */
        expect_ok(attn_kv_cache_pool(c, &free_before, NULL, NULL), "pool");
        expect_ok(attn_kv_cache_seq_fork(c, parent, &child), "fork");
        expect_ok(attn_kv_cache_pool(c, &free_after, NULL, NULL), "pool");
        assert_int_equal(free_after, free_before); /* shared, not copied */
        /* The child continues with b's rows 37.., the parent with a's. */
        float *want_k = malloc(60 * HKV * D * sizeof(float)), *want_v = malloc(60 * HKV * DV * sizeof(float));
        append_rows(c, child, 0, &b, 37, 10);
        append_rows(c, parent, 0, &a, 37, 23);
        expect_rows(c, parent, a.k, a.v, 60);
        memcpy(want_k, a.k, 37 * HKV * D * sizeof(float));
        memcpy(want_v, a.v, 37 * HKV * DV * sizeof(float));
        memcpy(want_k + 37 * HKV * D, b.k + 37 * HKV * D, 10 * HKV * D * sizeof(float));
        memcpy(want_v + 37 * HKV * DV, b.v + 37 * HKV * DV, 10 * HKV * DV * sizeof(float));
        expect_rows(c, child, want_k, want_v, 47);
        if (paged) {
            /* Blocks 0 and 1 still shared: the child took 1 copy (of the
             * shared third block, which then was the parent's alone), the
             * parent 1 new block for its rows 48 .. 59. */
            expect_ok(attn_kv_cache_pool(c, &free_after, NULL, NULL), "pool");
            assert_int_equal(free_after, free_before - 2);
        }
        /* Freeing the parent leaves the child whole; freeing both returns every block. */
        expect_ok(attn_kv_cache_seq_free(c, parent), "free");
        expect_rows(c, child, want_k, want_v, 47);
        expect_ok(attn_kv_cache_seq_free(c, child), "free");
        int64_t total;
        expect_ok(attn_kv_cache_pool(c, &free_after, &total, NULL), "pool");
        assert_int_equal(free_after, total);
        free(want_k);
        free(want_v);
        stream_free(&a);
        stream_free(&b);
        attn_kv_cache_free(c);
    }
}

/* A snapshot of everything a caller can see of a cache: every sequence's
 * rows in every layer, and the free blocks. */
typedef struct snapshot {
    float *k[4][2], *v[4][2];
    int64_t len[4][2], free_blocks;
} snapshot;

static void snapshot_take(const attn_kv_cache *c, int n_seqs, int layers, snapshot *s) {
    for (int i = 0; i < n_seqs; i++)
        for (int l = 0; l < layers; l++) read_back(c, i, l, &s->k[i][l], &s->v[i][l], &s->len[i][l]);
    expect_ok(attn_kv_cache_pool(c, &s->free_blocks, NULL, NULL), "pool");
}

static void snapshot_expect_same(const attn_kv_cache *c, int n_seqs, int layers, snapshot *before) {
    snapshot now;
    snapshot_take(c, n_seqs, layers, &now);
    assert_int_equal(now.free_blocks, before->free_blocks);
    for (int i = 0; i < n_seqs; i++)
        for (int l = 0; l < layers; l++) {
            assert_int_equal(now.len[i][l], before->len[i][l]);
            assert_memory_equal(now.k[i][l], before->k[i][l], (size_t)(now.len[i][l] * HKV * D) * sizeof(float));
            assert_memory_equal(now.v[i][l], before->v[i][l], (size_t)(now.len[i][l] * HKV * DV) * sizeof(float));
            free(now.k[i][l]);
            free(now.v[i][l]);
        }
}

static void snapshot_free(snapshot *s, int n_seqs, int layers) {
    for (int i = 0; i < n_seqs; i++)
        for (int l = 0; l < layers; l++) {
            free(s->k[i][l]);
            free(s->v[i][l]);
        }
}

static void expect_error(attn_status st, attn_status want, const char *const *words, int n_words) {
    if (st != want) fail_msg("status %s, wanted %s (%s)", attn_status_str(st), attn_status_str(want), attn_last_error());
    for (int i = 0; i < n_words; i++)
        if (!strstr(attn_last_error(), words[i])) fail_msg("message '%s' lacks '%s'", attn_last_error(), words[i]);
}

/* A pool of 6 blocks of 4 rows, two layers, two sequences and a fork: the
 * appends that do not fit fail with ATTN_ERR_CAPACITY, name the sequence
 * and the numbers, and change nothing; per-layer appends of a step fail
 * only at the first layer; freed blocks are taken again. */
static void test_full_pool(void **state) {
    (void)state;
    stream s = stream_new(31, 40);
    attn_kv_cache *c = cache_new(ATTN_KV_PAGED, 4, 6, 2, ATTN_F32, NULL);
    int64_t a, b;
    expect_ok(attn_kv_cache_seq_add(c, &a), "add");
    expect_ok(attn_kv_cache_seq_add(c, &b), "add");
    for (int l = 0; l < 2; l++) {
        append_rows(c, a, l, &s, 0, 10); /* 3 blocks, the last half full */
        append_rows(c, b, l, &s, 10, 9); /* 3 blocks, one row in the last */
    }
    snapshot before;
    snapshot_take(c, 2, 2, &before);
    assert_int_equal(before.free_blocks, 0);
    /* 2 rows still fit a's last block; 3 do not. */
    attn_tensor k = rows_of(s.k, 20, 3, HKV, D), v = rows_of(s.v, 20, 3, HKV, DV);
    const char *const words[] = {"sequence 0", "layer 0", "3 more rows need 1 blocks of 4 rows", "0 free of 6"};
    expect_error(attn_kv_cache_append(c, a, 0, &k, &v), ATTN_ERR_CAPACITY, words, 4);
    snapshot_expect_same(c, 2, 2, &before);
    /* A fork shares b's blocks; its append into the shared last block needs a copy, and there is none. */
    int64_t f;
    expect_ok(attn_kv_cache_seq_fork(c, b, &f), "fork");
    k.shape[1] = v.shape[1] = 1;
    const char *const words_fork[] = {"sequence 2", "need 1 blocks"};
    expect_error(attn_kv_cache_append(c, f, 0, &k, &v), ATTN_ERR_CAPACITY, words_fork, 2);
    snapshot_expect_same(c, 2, 2, &before);
    expect_ok(attn_kv_cache_seq_free(c, f), "free fork");
    /* Per layer: layer 0's 2 rows fit, then layer 1's cannot fail. */
    k.shape[1] = v.shape[1] = 2;
    expect_ok(attn_kv_cache_append(c, a, 0, &k, &v), "layer 0");
    expect_ok(attn_kv_cache_append(c, a, 1, &k, &v), "layer 1");
    /* Beyond the capacity (300 rows): named as such. */
    attn_tensor big_k = attn_tensor_4d(NULL, 1, 301, HKV, D), big_v = attn_tensor_4d(NULL, 1, 301, HKV, DV);
    big_k.data = s.k;
    big_v.data = s.v;
    const char *const words_cap[] = {"sequence 1", "capacity of 300"};
    expect_error(attn_kv_cache_append(c, b, 0, &big_k, &big_v), ATTN_ERR_CAPACITY, words_cap, 2);
    /* Freed blocks are reused: after a goes, b can grow into all of them. */
    expect_ok(attn_kv_cache_seq_free(c, a), "free a");
    int64_t free_blocks;
    expect_ok(attn_kv_cache_pool(c, &free_blocks, NULL, NULL), "pool");
    assert_int_equal(free_blocks, 3);
    for (int l = 0; l < 2; l++) append_rows(c, b, l, &s, 0, 15); /* 9 + 15 = 24 rows = 6 blocks */
    expect_ok(attn_kv_cache_pool(c, &free_blocks, NULL, NULL), "pool");
    assert_int_equal(free_blocks, 0);
    /* And a new sequence after b is freed takes all six. */
    expect_ok(attn_kv_cache_seq_free(c, b), "free b");
    expect_ok(attn_kv_cache_seq_add(c, &a), "add");
    append_rows(c, a, 0, &s, 0, 24);
    snapshot_free(&before, 2, 2);
    stream_free(&s);
    attn_kv_cache_free(c);
}

/* float16 and bfloat16 caches hold the rounded values (rounded to nearest
 * even, after RoPE) and attend exactly as a float32 cache given those
 * values does; rows given in the cache's own dtype are stored as given. */
static void test_half_caches(void **state) {
    (void)state;
    const attn_dtype dtypes[2] = {ATTN_F16, ATTN_BF16};
    attn_rope_options rope = ATTN_ROPE_OPTIONS_INIT;
    for (int d = 0; d < 2; d++)
        for (int with_rope = 0; with_rope < 2; with_rope++) {
            const attn_rope_options *r = with_rope ? &rope : NULL;
            stream s = stream_new(41, 90), rounded = stream_new(41, 90);
            /* The float32 twin: keys rotated in float32 first, then both rounded. */
            attn_tensor kt = attn_tensor_4d(rounded.k, 1, 90, HKV, D);
            if (r) expect_ok(attn_rope_apply(&kt, NULL, 0, r), "rope");
            for (int64_t i = 0; i < 90 * HKV * D; i++)
                rounded.k[i] = dtypes[d] == ATTN_F16 ? dtype_f16_to_f32(dtype_f32_to_f16(rounded.k[i]))
                                                     : dtype_bf16_to_f32(dtype_f32_to_bf16(rounded.k[i]));
            uint16_t *v_half = malloc(90 * HKV * DV * sizeof(uint16_t));
            for (int64_t i = 0; i < 90 * HKV * DV; i++) {
                v_half[i] = dtypes[d] == ATTN_F16 ? dtype_f32_to_f16(s.v[i]) : dtype_f32_to_bf16(s.v[i]);
                rounded.v[i] = dtypes[d] == ATTN_F16 ? dtype_f16_to_f32(v_half[i]) : dtype_bf16_to_f32(v_half[i]);
            }
            attn_kv_cache *half = cache_new(ATTN_KV_PAGED, 7, 32, 1, dtypes[d], r);
            attn_kv_cache *twin = cache_new(ATTN_KV_PAGED, 7, 32, 1, ATTN_F32, NULL);
            int64_t hs, ts;
            expect_ok(attn_kv_cache_seq_add(half, &hs), "add");
            expect_ok(attn_kv_cache_seq_add(twin, &ts), "add");
            /* Keys in float32 (rounded by the cache), values in the cache's dtype. */
            for (int64_t at = 0; at < 90; at += 30) {
                attn_tensor k = rows_of(s.k, at, 30, HKV, D);
                attn_tensor v = attn_tensor_view(v_half + at * HKV * DV, dtypes[d], 1, 30, HKV, DV);
                expect_ok(attn_kv_cache_append(half, hs, 0, &k, &v), "half append");
            }
            append_rows(twin, ts, 0, &rounded, 0, 90);
            expect_rows(half, hs, rounded.k, rounded.v, 90);
            int64_t rows = 5;
            attn_tensor q = rows_of(s.q, 85, 5, HQ, D);
            float out_half[5 * HQ * DV], out_twin[5 * HQ * DV];
            attn_tensor oh = attn_tensor_4d(out_half, 1, 5, HQ, DV), ot = attn_tensor_4d(out_twin, 1, 5, HQ, DV);
            expect_ok(attn_kv_cache_attend(half, 0, 1, &hs, &rows, &q, NULL, &oh, NULL), "half attend");
            expect_ok(attn_kv_cache_attend(twin, 0, 1, &ts, &rows, &q, NULL, &ot, NULL), "twin attend");
            assert_memory_equal(out_half, out_twin, sizeof out_half);
            free(v_half);
            stream_free(&s);
            stream_free(&rounded);
            attn_kv_cache_free(half);
            attn_kv_cache_free(twin);
        }
}

/* A long contiguous sequence is split into items (6 of 512 keys): the
 * thread count changes no bit (1 to 4 threads), for decode rows (items
 * shared out) and 20 prefill rows (fewer items than 8 threads: each call
 * threaded). */
static void test_threads_bit_identical(void **state) {
    (void)state;
    stream s = stream_new(51, 3000);
    attn_kv_cache_config cfg = ATTN_KV_CACHE_CONFIG_INIT;
    cfg.layers = 1;
    cfg.kv_heads = HKV;
    cfg.head_dim = D;
    cfg.value_dim = DV;
    cfg.max_seqs = 1;
    cfg.capacity = 3000;
    attn_kv_cache *c;
    expect_ok(attn_kv_cache_new(&cfg, &c), "create");
    int64_t seq;
    expect_ok(attn_kv_cache_seq_add(c, &seq), "add");
    append_rows(c, seq, 0, &s, 0, 3000);
    float *first = malloc(20 * HQ * DV * sizeof(float)), *again = malloc(20 * HQ * DV * sizeof(float));
    for (int64_t rows = 1; rows <= 20; rows += 19) {
        attn_tensor q = rows_of(s.q, 3000 - rows, rows, HQ, D);
        for (int threads = 1; threads <= 8; threads++) {
            attn_sdpa_options opt = ATTN_SDPA_OPTIONS_INIT;
            opt.threads = threads;
            attn_tensor o = attn_tensor_4d(threads == 1 ? first : again, 1, rows, HQ, DV);
            expect_ok(attn_kv_cache_attend(c, 0, 1, &seq, &rows, &q, &opt, &o, NULL), "attend");
            if (threads > 1) assert_memory_equal(first, again, (size_t)(rows * HQ * DV) * sizeof(float));
        }
        float *want = full_reference(&s, NULL);
        const double d = rel_diff(first, want + (3000 - rows) * HQ * DV, rows * HQ * DV);
        if (d > CACHE_OUT_REL_FAIL) fail_msg("rows %lld: %.3g", (long long)rows, d);
        free(want);
    }
    free(first);
    free(again);
    stream_free(&s);
    attn_kv_cache_free(c);
}

/* The kernels read a paged sequence in place through its block table
 * (src/api/sdpa.h), a block's rows as one run: the scores of a key do not
 * depend on its run, and P·V adds keys one after the other, so a paged
 * cache gives the contiguous cache's bits whatever its block size (7: below
 * FLASH_COPY_BLOCKS_BELOW, each 64-key step copied; 16: read in place, four
 * runs a step, the look-ahead following the table; 64: one run a step), for
 * decode rows and 7-row chunks (the tile path's copies), float32 and
 * float16, with the blocks of two streams alternating in the pool; and the
 * reference kernel, asked for by
 * opt.kernel, reads the same table (blocks of 7) and agrees with the
 * full-sequence call. */
static void test_paged_reads_in_place(void **state) {
    (void)state;
    const int64_t blocks[3] = {7, 16, 64};
    const attn_dtype dtypes[2] = {ATTN_F32, ATTN_F16};
    for (int bi = 0; bi < 3; bi++)
        for (int di = 0; di < 2; di++)
            for (int64_t chunk = 1; chunk <= 7; chunk += 6) {
                stream s[2] = {stream_new(61, LONG), stream_new(62, 200)};
                attn_kv_cache *paged = cache_new(ATTN_KV_PAGED, blocks[bi], 1200 / blocks[bi], 1, dtypes[di], NULL);
                attn_kv_cache *contiguous = cache_new(ATTN_KV_CONTIGUOUS, 16, 64, 1, dtypes[di], NULL);
                float **a = decode_streams(paged, s, 2, chunk, NULL, 0, true);
                float **b = decode_streams(contiguous, s, 2, chunk, NULL, 0, false);
                int64_t segments;
                expect_ok(attn_kv_cache_view(paged, 0, 0, NULL, 0, &segments), "view");
                assert_true(segments >= 3); /* the blocks did alternate */
                for (int i = 0; i < 2; i++)
                    if (memcmp(a[i], b[i], (size_t)(s[i].len * HQ * DV) * sizeof(float)) != 0)
                        fail_msg("blocks of %lld, %s, chunk %lld, stream %d: the paged cache's bits differ from the "
                                 "contiguous cache's",
                                 (long long)blocks[bi], attn_dtype_name(dtypes[di]), (long long)chunk, i);
                outs_free(a, 2);
                outs_free(b, 2);
                attn_kv_cache_free(paged);
                attn_kv_cache_free(contiguous);
                stream_free(&s[0]);
                stream_free(&s[1]);
            }
    /* The reference kernel through a table of 7-row blocks, two streams
     * interleaved, the last rows of each attended at once. */
    stream s[2] = {stream_new(63, 90), stream_new(64, 60)};
    attn_kv_cache *c = cache_new(ATTN_KV_PAGED, 7, 48, 1, ATTN_F32, NULL); /* 24 free after the comb; 22 needed */
    int64_t seqs[2];
    for (int i = 0; i < 2; i++) expect_ok(attn_kv_cache_seq_add(c, &seqs[i]), "seq_add");
    fragment_pool(c);
    for (int64_t at = 0; at < 90; at += 10)
        for (int i = 0; i < 2; i++)
            if (at < s[i].len) append_rows(c, seqs[i], 0, &s[i], at, s[i].len - at < 10 ? s[i].len - at : 10);
    const int64_t rows[2] = {5, 3};
    float q[8 * HQ * D], out[8 * HQ * DV];
    memcpy(q, s[0].q + (90 - 5) * HQ * D, sizeof(float) * 5 * HQ * D);
    memcpy(q + 5 * HQ * D, s[1].q + (60 - 3) * HQ * D, sizeof(float) * 3 * HQ * D);
    attn_tensor qt = attn_tensor_4d(q, 1, 8, HQ, D), ot = attn_tensor_4d(out, 1, 8, HQ, DV);
    attn_sdpa_options opt = ATTN_SDPA_OPTIONS_INIT;
    opt.kernel = ATTN_KERNEL_REF;
    expect_ok(attn_kv_cache_attend(c, 0, 2, seqs, rows, &qt, &opt, &ot, NULL), "attend, reference kernel");
    for (int i = 0; i < 2; i++) {
        float *want = full_reference(&s[i], NULL);
        const double d = rel_diff(out + (i ? 5 : 0) * HQ * DV, want + (s[i].len - rows[i]) * HQ * DV,
                                  rows[i] * HQ * DV);
        if (d > CACHE_OUT_REL_FAIL) fail_msg("reference kernel, stream %d: max rel diff %.3g", i, d);
        free(want);
    }
    attn_kv_cache_free(c);
    stream_free(&s[0]);
    stream_free(&s[1]);
}

/* Whether view segment `seg` holds rows [seg.position, + rows) of stream
 * s exactly (a float32 cache stores what it was given). */
static bool segment_holds(const attn_kv_segment *seg, const stream *s) {
    const int64_t rows = seg->k.shape[1];
    for (int64_t r = 0; r < rows; r++) {
        const float *k = (const float *)seg->k.data + r * seg->k.stride[1];
        const float *v = (const float *)seg->v.data + r * seg->v.stride[1];
        if (memcmp(k, s->k + (seg->position + r) * HKV * D, sizeof(float) * HKV * D) != 0 ||
            memcmp(v, s->v + (seg->position + r) * HKV * DV, sizeof(float) * HKV * DV) != 0)
            return false;
    }
    return true;
}

/* Sequence seq's view of layer 0: its segment count, and every row checked
 * against the stream it was given. */
static int64_t view_checked(attn_kv_cache *c, int64_t seq, const stream *s) {
    attn_kv_segment segs[64];
    int64_t count;
    expect_ok(attn_kv_cache_view(c, seq, 0, segs, 64, &count), "view");
    for (int64_t i = 0; i < count; i++)
        if (!segment_holds(&segs[i], s)) fail_msg("sequence %lld, segment %lld: rows differ", (long long)seq, (long long)i);
    return count;
}

/* The pool keeps a sequence's blocks together (kv_cache.c, "The pool"):
 * four sequences growing side by side a row at a time in a fresh pool
 * each end as one segment, where taking blocks 0, 1, 2, ... in turn would
 * interleave them; a sequence started after one was freed takes the freed
 * run and grows through it; a lone sequence is one segment; and the
 * placement takes nothing from all or nothing: the pool fills to its last
 * block, the next append fails and changes nothing. */
static void test_neighbour_placement(void **state) {
    (void)state;
    stream s[5];
    for (int i = 0; i < 5; i++) s[i] = stream_new(90 + (uint64_t)i, 64);
    attn_kv_cache *c = cache_new(ATTN_KV_PAGED, 4, 64, 1, ATTN_F32, NULL);
    int64_t seqs[4];
    for (int i = 0; i < 4; i++) expect_ok(attn_kv_cache_seq_add(c, &seqs[i]), "add");
    for (int64_t row = 0; row < 40; row++)
        for (int i = 0; i < 4; i++) append_rows(c, seqs[i], 0, &s[i], row, 1);
    for (int i = 0; i < 4; i++) assert_int_equal(view_checked(c, seqs[i], &s[i]), 1);

    /* Sequence 1's ten blocks go back; a new one takes them in order. */
    expect_ok(attn_kv_cache_seq_free(c, seqs[1]), "free");
    int64_t late;
    expect_ok(attn_kv_cache_seq_add(c, &late), "add");
    for (int64_t row = 0; row < 40; row += 3) append_rows(c, late, 0, &s[4], row, row + 3 <= 40 ? 3 : 40 - row);
    assert_int_equal(view_checked(c, late, &s[4]), 1);

    /* The rest of the pool, side by side again: 64 - 40 = 24 blocks, six
     * more for each; then it is full, and one more row changes nothing. */
    const int64_t growing[4] = {seqs[0], late, seqs[2], seqs[3]};
    stream *given[4] = {&s[0], &s[4], &s[2], &s[3]};
    for (int64_t row = 40; row < 64; row++)
        for (int i = 0; i < 4; i++) append_rows(c, growing[i], 0, given[i], row, 1);
    int64_t free_blocks;
    expect_ok(attn_kv_cache_pool(c, &free_blocks, NULL, NULL), "pool");
    assert_int_equal(free_blocks, 0);
    attn_tensor k = rows_of(s[0].k, 0, 1, HKV, D), v = rows_of(s[0].v, 0, 1, HKV, DV);
    expect_error(attn_kv_cache_append(c, seqs[0], 0, &k, &v), ATTN_ERR_CAPACITY, (const char *const[]){"0 free of 64"}, 1);
    for (int i = 0; i < 4; i++) {
        int64_t len;
        expect_ok(attn_kv_cache_seq_length(c, growing[i], 0, &len), "length");
        assert_int_equal(len, 64);
        assert_int_equal(view_checked(c, growing[i], given[i]), 1); /* each grew into the blocks after it */
    }
    attn_kv_cache_free(c);

    /* A lone sequence in a fresh pool: one segment, whatever it grows to. */
    c = cache_new(ATTN_KV_PAGED, 4, 16, 1, ATTN_F32, NULL);
    int64_t lone;
    expect_ok(attn_kv_cache_seq_add(c, &lone), "add");
    append_rows(c, lone, 0, &s[0], 0, 64);
    assert_int_equal(view_checked(c, lone, &s[0]), 1);
    attn_kv_cache_free(c);
    for (int i = 0; i < 5; i++) stream_free(&s[i]);
}

/* Random adds, appends, forks and frees on a small paged pool (blocks of 3
 * rows, 24 of them, 6 slots), against a model that knows, for every live
 * sequence, which appended row sits at each of its positions: after every
 * operation each live sequence's view holds exactly its rows (a row's
 * values encode its number, so a row in the wrong block, or one lost in a
 * copy on write, shows), an append refused for lack of room changes
 * nothing, and when every sequence is gone the whole pool is free and one
 * sequence can fill it to its last row.  The pool's placement (the ring
 * behind the free stack, blocks leaving it from the middle) is what this
 * exercises. */
enum { RND_BR = 3, RND_BLOCKS = 24, RND_SLOTS = 6, RND_ROWS = RND_BR * RND_BLOCKS };

typedef struct rnd_seq {
    bool live;
    int64_t id, len, rows[RND_ROWS]; /* rows[p]: the number of the row at position p */
} rnd_seq;

/* Row number `row` as k and v rows: element e = row * 64 + e (exact). */
static void rnd_row(int64_t row, float *k, float *v) {
    for (int e = 0; e < HKV * D; e++) k[e] = (float)(row * 64 + e % 64);
    for (int e = 0; e < HKV * DV; e++) v[e] = (float)(row * 64 + e % 64) + 0.5f;
}

static void rnd_check(attn_kv_cache *c, const rnd_seq *m) {
    if (!m->live) return;
    attn_kv_segment segs[RND_BLOCKS];
    int64_t count, seen = 0;
    expect_ok(attn_kv_cache_view(c, m->id, 0, segs, RND_BLOCKS, &count), "view");
    float k[HKV * D], v[HKV * DV];
    for (int64_t i = 0; i < count; i++) {
        assert_int_equal(segs[i].position, seen);
        for (int64_t r = 0; r < segs[i].k.shape[1]; r++, seen++) {
            rnd_row(m->rows[seen], k, v);
            if (memcmp((const float *)segs[i].k.data + r * segs[i].k.stride[1], k, sizeof k) != 0 ||
                memcmp((const float *)segs[i].v.data + r * segs[i].v.stride[1], v, sizeof v) != 0)
                fail_msg("sequence %lld, position %lld: not row %lld", (long long)m->id, (long long)seen,
                         (long long)m->rows[seen]);
        }
    }
    assert_int_equal(seen, m->len);
}

static void test_random_operations(void **state) {
    (void)state;
    attn_kv_cache_config cfg = ATTN_KV_CACHE_CONFIG_INIT;
    cfg.layers = 1;
    cfg.kv_heads = HKV;
    cfg.head_dim = D;
    cfg.value_dim = DV;
    cfg.dtype = ATTN_F32;
    cfg.layout = ATTN_KV_PAGED;
    cfg.max_seqs = RND_SLOTS;
    cfg.capacity = RND_ROWS;
    cfg.block_rows = RND_BR;
    cfg.num_blocks = RND_BLOCKS;
    attn_kv_cache *c = NULL;
    expect_ok(attn_kv_cache_new(&cfg, &c), "create");
    rnd_seq m[RND_SLOTS];
    memset(m, 0, sizeof m);
    uint64_t rng = 12345;
    int64_t next_row = 0, refused = 0, appended = 0;
    float k[5 * HKV * D], v[5 * HKV * DV];
    for (int op = 0; op < 4000; op++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        const unsigned pick = (unsigned)(rng >> 33), what = pick % 10, slot = (pick / 10) % RND_SLOTS;
        rnd_seq *t = &m[slot];
        if (!t->live && what < 8) { /* a new sequence in this slot's place */
            int64_t id;
            if (attn_kv_cache_seq_add(c, &id) != ATTN_OK) continue;
            rnd_seq *home = &m[id];
            memset(home, 0, sizeof *home);
            home->live = true;
            home->id = id;
        } else if (t->live && what < 7) { /* append 1 .. 5 rows */
            const int64_t n = 1 + (pick / 100) % 5;
            for (int64_t r = 0; r < n; r++) rnd_row(next_row + r, k + r * HKV * D, v + r * HKV * DV);
            attn_tensor kt = attn_tensor_4d(k, 1, n, HKV, D), vt = attn_tensor_4d(v, 1, n, HKV, DV);
            int64_t free_before, free_after;
            expect_ok(attn_kv_cache_pool(c, &free_before, NULL, NULL), "pool");
            const attn_status st = attn_kv_cache_append(c, t->id, 0, &kt, &vt);
            expect_ok(attn_kv_cache_pool(c, &free_after, NULL, NULL), "pool");
            if (st == ATTN_OK) {
                for (int64_t r = 0; r < n; r++) t->rows[t->len + r] = next_row + r;
                t->len += n;
                next_row += n;
                appended++;
            } else {
                assert_int_equal(st, ATTN_ERR_CAPACITY);
                assert_int_equal(free_after, free_before);
                refused++;
            }
        } else if (t->live && what < 8) { /* fork */
            int64_t child;
            if (attn_kv_cache_seq_fork(c, t->id, &child) != ATTN_OK) continue;
            m[child] = *t;
            m[child].id = child;
        } else if (t->live) { /* free */
            expect_ok(attn_kv_cache_seq_free(c, t->id), "free");
            t->live = false;
        }
        for (int i = 0; i < RND_SLOTS; i++) rnd_check(c, &m[i]);
    }
    assert_true(appended > 500 && refused > 50); /* both paths were taken, many times */
    for (int i = 0; i < RND_SLOTS; i++)
        if (m[i].live) expect_ok(attn_kv_cache_seq_free(c, m[i].id), "free");
    int64_t free_blocks;
    expect_ok(attn_kv_cache_pool(c, &free_blocks, NULL, NULL), "pool");
    assert_int_equal(free_blocks, RND_BLOCKS);
    rnd_seq all = {true, 0, 0, {0}};
    expect_ok(attn_kv_cache_seq_add(c, &all.id), "add");
    for (int64_t at = 0; at < RND_ROWS; at += 4) {
        const int64_t n = RND_ROWS - at < 4 ? RND_ROWS - at : 4;
        for (int64_t r = 0; r < n; r++) rnd_row(next_row + r, k + r * HKV * D, v + r * HKV * DV);
        attn_tensor kt = attn_tensor_4d(k, 1, n, HKV, D), vt = attn_tensor_4d(v, 1, n, HKV, DV);
        expect_ok(attn_kv_cache_append(c, all.id, 0, &kt, &vt), "append to the last row");
        for (int64_t r = 0; r < n; r++) all.rows[at + r] = next_row + r;
        all.len += n;
        next_row += n;
    }
    rnd_check(c, &all);
    attn_kv_cache_free(c);
}

/* Bad arguments: each refused with a message that names it, and nothing changed. */
static void test_bad_arguments(void **state) {
    (void)state;
    stream s = stream_new(61, 10);
    attn_kv_cache *c = cache_new(ATTN_KV_PAGED, 4, 8, 2, ATTN_F32, NULL);
    int64_t seq, unused;
    expect_ok(attn_kv_cache_seq_add(c, &seq), "add");
    attn_tensor k = rows_of(s.k, 0, 3, HKV, D), v = rows_of(s.v, 0, 3, HKV, DV);

    const char *const w_unknown[] = {"sequence 5 is not in the cache"};
    expect_error(attn_kv_cache_append(c, 5, 0, &k, &v), ATTN_ERR_INVALID_ARGUMENT, w_unknown, 1);
    const char *const w_range[] = {"sequence -1", "0 .. max_seqs - 1"};
    expect_error(attn_kv_cache_append(c, -1, 0, &k, &v), ATTN_ERR_INVALID_ARGUMENT, w_range, 2);
    const char *const w_layer[] = {"layer 2", "2 layers"};
    expect_error(attn_kv_cache_append(c, seq, 2, &k, &v), ATTN_ERR_INVALID_ARGUMENT, w_layer, 2);
    const char *const w_null[] = {"v is NULL"};
    expect_error(attn_kv_cache_append(c, seq, 0, &k, NULL), ATTN_ERR_INVALID_ARGUMENT, w_null, 1);
    expect_error(attn_kv_cache_append(NULL, seq, 0, &k, &v), ATTN_ERR_INVALID_ARGUMENT, (const char *const[]){"cache is NULL"}, 1);
    attn_tensor wide = rows_of(s.k, 0, 3, HKV, DV); /* D = 8: the value width */
    const char *const w_width[] = {"k is [1, 3, 2, 8]", "[1, 3, 2, 16]"};
    expect_error(attn_kv_cache_append(c, seq, 0, &wide, &v), ATTN_ERR_SHAPE, w_width, 2);
    attn_tensor short_v = rows_of(s.v, 0, 2, HKV, DV);
    const char *const w_rows[] = {"v is [1, 2, 2, 8]"};
    expect_error(attn_kv_cache_append(c, seq, 0, &k, &short_v), ATTN_ERR_SHAPE, w_rows, 1);
    attn_tensor f16 = k;
    f16.dtype = ATTN_F16;
    const char *const w_dtype[] = {"k holds float16", "float32 or the dtype it stores k in, float32"};
    expect_error(attn_kv_cache_append(c, seq, 0, &f16, &v), ATTN_ERR_UNSUPPORTED, w_dtype, 2);
    int64_t len;
    expect_ok(attn_kv_cache_seq_length(c, seq, 0, &len), "length");
    assert_int_equal(len, 0);

    append_rows(c, seq, 0, &s, 0, 4);
    int64_t rows = 5;
    float out[5 * HQ * DV];
    attn_tensor q = rows_of(s.q, 0, 5, HQ, D), o = attn_tensor_4d(out, 1, 5, HQ, DV);
    const char *const w_qrows[] = {"5 query rows and 4 keys", "append the queries' keys"};
    expect_error(attn_kv_cache_attend(c, 0, 1, &seq, &rows, &q, NULL, &o, NULL), ATTN_ERR_SHAPE, w_qrows, 2);
    rows = 1;
    attn_tensor q1 = rows_of(s.q, 0, 1, HQ, D), o1 = attn_tensor_4d(out, 1, 1, HQ, DV);
    const char *const w_layer_len[] = {"1 query rows and 0 keys in layer 1"};
    expect_error(attn_kv_cache_attend(c, 1, 1, &seq, &rows, &q1, NULL, &o1, NULL), ATTN_ERR_SHAPE, w_layer_len, 1);
    const char *const w_qshape[] = {"q is [1, 5, 4, 16]", "T = 1"};
    expect_error(attn_kv_cache_attend(c, 0, 1, &seq, NULL, &q, NULL, &o1, NULL), ATTN_ERR_SHAPE, w_qshape, 2);
    attn_sdpa_options opt = ATTN_SDPA_OPTIONS_INIT;
    const uint8_t mask[1] = {1};
    opt.mask = mask;
    const char *const w_mask[] = {"opt.mask is set"};
    expect_error(attn_kv_cache_attend(c, 0, 1, &seq, NULL, &q1, &opt, &o1, NULL), ATTN_ERR_INVALID_ARGUMENT, w_mask, 1);
    const int64_t gone = 3;
    const char *const w_gone[] = {"sequence 3 is not in the cache", "freed, or never added"};
    expect_error(attn_kv_cache_attend(c, 0, 1, &gone, NULL, &q1, NULL, &o1, NULL), ATTN_ERR_INVALID_ARGUMENT, w_gone, 2);
    expect_error(attn_kv_cache_attend(c, 0, 1, NULL, NULL, &q1, NULL, &o1, NULL), ATTN_ERR_INVALID_ARGUMENT,
                 (const char *const[]){"seqs is NULL"}, 1);
    expect_error(attn_kv_cache_attend(c, 0, 1, &seq, NULL, &q1, NULL, NULL, NULL), ATTN_ERR_INVALID_ARGUMENT,
                 (const char *const[]){"out is NULL"}, 1);
    expect_error(attn_kv_cache_seq_fork(c, seq, NULL), ATTN_ERR_INVALID_ARGUMENT, (const char *const[]){"NULL"}, 1);
    expect_ok(attn_kv_cache_seq_free(c, seq), "free");
    expect_error(attn_kv_cache_seq_free(c, seq), ATTN_ERR_INVALID_ARGUMENT, w_gone + 1, 1);
    attn_kv_segment seg[1];
    int64_t count;
    expect_ok(attn_kv_cache_seq_add(c, &unused), "add");
    fragment_pool(c);
    append_rows(c, unused, 0, &s, 0, 4);
    append_rows(c, unused, 1, &s, 0, 4);
    expect_ok(attn_kv_cache_seq_add(c, &seq), "add");
    append_rows(c, seq, 0, &s, 0, 4);
    append_rows(c, unused, 0, &s, 0, 4); /* its second block is not next to its first */
    expect_ok(attn_kv_cache_view(c, unused, 0, NULL, 0, &count), "view");
    assert_int_equal(count, 2);
    expect_error(attn_kv_cache_view(c, unused, 0, seg, 1, &count), ATTN_ERR_SHAPE,
                 (const char *const[]){"2 segments; room was given for 1"}, 1);

    /* Configurations. */
    attn_kv_cache_config zeroed = {0}, cfg = ATTN_KV_CACHE_CONFIG_INIT;
    attn_kv_cache *made = (attn_kv_cache *)&cfg;
    expect_error(attn_kv_cache_new(&zeroed, &made), ATTN_ERR_INVALID_ARGUMENT,
                 (const char *const[]){"ATTN_KV_CACHE_CONFIG_INIT"}, 1);
    assert_null(made);
    cfg.layers = cfg.kv_heads = cfg.head_dim = cfg.max_seqs = cfg.capacity = 1;
    cfg.dtype = ATTN_F64;
    expect_error(attn_kv_cache_new(&cfg, &made), ATTN_ERR_UNSUPPORTED, (const char *const[]){"dtype is float64"}, 1);
    cfg.dtype = ATTN_F32;
    cfg.layout = ATTN_KV_PAGED;
    expect_error(attn_kv_cache_new(&cfg, &made), ATTN_ERR_INVALID_ARGUMENT,
                 (const char *const[]){"block_rows is 0"}, 1);
    attn_rope_options bad_rope = ATTN_ROPE_OPTIONS_INIT;
    bad_rope.theta = -1;
    cfg.layout = ATTN_KV_CONTIGUOUS;
    cfg.head_dim = 4;
    cfg.rope = &bad_rope;
    expect_error(attn_kv_cache_new(&cfg, &made), ATTN_ERR_INVALID_ARGUMENT,
                 (const char *const[]){"attn_kv_cache_config.rope", "theta"}, 2);
    assert_string_equal(attn_status_str(ATTN_ERR_CAPACITY), "capacity exhausted");
    attn_kv_cache_free(NULL);
    stream_free(&s);
    attn_kv_cache_free(c);
}

/* A sliding window holds at absolute positions, and lse is the full
 * call's: chunked prefill of 5 rows at the end of a 200-row paged
 * sequence, window (left 37, right 0), against one windowed causal call. */
static void test_window_and_lse(void **state) {
    (void)state;
    stream s = stream_new(71, 200);
    attn_kv_cache *c = cache_new(ATTN_KV_PAGED, 16, 32, 1, ATTN_F32, NULL);
    int64_t seq, filler, rows = 5;
    expect_ok(attn_kv_cache_seq_add(c, &seq), "add");
    expect_ok(attn_kv_cache_seq_add(c, &filler), "add");
    for (int64_t at = 0; at < 200; at += 16) {
        append_rows(c, seq, 0, &s, at, 200 - at < 16 ? 200 - at : 16);
        append_rows(c, filler, 0, &s, 0, 1);
    }
    attn_sdpa_options opt = ATTN_SDPA_OPTIONS_INIT;
    opt.window = 1;
    opt.window_left = 37;
    opt.window_right = 0;
    float out[5 * HQ * DV], lse[HQ * 5];
    attn_tensor q = rows_of(s.q, 195, 5, HQ, D), o = attn_tensor_4d(out, 1, 5, HQ, DV);
    expect_ok(attn_kv_cache_attend(c, 0, 1, &seq, &rows, &q, &opt, &o, lse), "attend");
    float *want = malloc(200 * HQ * DV * sizeof(float)), *want_lse = malloc(HQ * 200 * sizeof(float));
    attn_tensor qf = attn_tensor_4d(s.q, 1, 200, HQ, D), kf = attn_tensor_4d(s.k, 1, 200, HKV, D);
    attn_tensor vf = attn_tensor_4d(s.v, 1, 200, HKV, DV), of = attn_tensor_4d(want, 1, 200, HQ, DV);
    opt.causal = 1;
    expect_ok(attn_sdpa_forward(&qf, &kf, &vf, &opt, &of, NULL, want_lse), "full windowed call");
    const double d = rel_diff(out, want + 195 * HQ * DV, 5 * HQ * DV);
    if (d > CACHE_OUT_REL_FAIL) fail_msg("windowed: max rel diff %.3g", d);
    for (int h = 0; h < HQ; h++)
        for (int r = 0; r < 5; r++) {
            const double diff = fabs((double)lse[h * 5 + r] - (double)want_lse[h * 200 + 195 + r]);
            if (diff > CACHE_LSE_ABS_FAIL) fail_msg("lse head %d row %d: %.3g", h, r, diff);
        }
    free(want);
    free(want_lse);
    stream_free(&s);
    attn_kv_cache_free(c);
}

/* Reading calls may run at once (attn_cache.h): four threads attending the
 * same cache get the bits one thread gets. */
typedef struct reader {
    const attn_kv_cache *cache;
    const int64_t *seqs, *rows;
    attn_tensor q;
    float out[3 * 4 * HQ * DV];
    attn_status status;
} reader;

static void *read_cache(void *arg) {
    reader *r = arg;
    attn_tensor o = attn_tensor_4d(r->out, 1, r->q.shape[1], HQ, DV);
    for (int i = 0; i < 20 && !r->status; i++)
        r->status = attn_kv_cache_attend(r->cache, 0, 3, r->seqs, r->rows, &r->q, NULL, &o, NULL);
    return NULL;
}

static void test_concurrent_readers(void **state) {
    (void)state;
    stream s = stream_new(81, 300);
    attn_kv_cache *c = cache_new(ATTN_KV_PAGED, 16, 64, 1, ATTN_F32, NULL);
    int64_t seqs[3];
    const int64_t rows[3] = {1, 4, 2}, lens[3] = {300, 120, 41};
    for (int i = 0; i < 3; i++) {
        expect_ok(attn_kv_cache_seq_add(c, &seqs[i]), "add");
        append_rows(c, seqs[i], 0, &s, 0, lens[i]);
    }
    float q[7 * HQ * D];
    memcpy(q, s.q, sizeof q);
    reader *readers = calloc(5, sizeof *readers);
    for (int t = 0; t < 5; t++) readers[t] = (reader){c, seqs, rows, attn_tensor_4d(q, 1, 7, HQ, D), {0}, ATTN_OK};
    read_cache(&readers[4]); /* alone, first */
    pthread_t threads[4];
    for (int t = 0; t < 4; t++) assert_int_equal(pthread_create(&threads[t], NULL, read_cache, &readers[t]), 0);
    for (int t = 0; t < 4; t++) {
        pthread_join(threads[t], NULL);
        expect_ok(readers[t].status, "concurrent attend");
        assert_memory_equal(readers[t].out, readers[4].out, 7 * HQ * DV * sizeof(float));
    }
    free(readers);
    stream_free(&s);
    attn_kv_cache_free(c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_incremental_equals_full),
        cmocka_unit_test(test_batched_equals_per_sequence),
        cmocka_unit_test(test_fork_isolation),
        cmocka_unit_test(test_full_pool),
        cmocka_unit_test(test_half_caches),
        cmocka_unit_test(test_threads_bit_identical),
        cmocka_unit_test(test_paged_reads_in_place),
        cmocka_unit_test(test_neighbour_placement),
        cmocka_unit_test(test_random_operations),
        cmocka_unit_test(test_window_and_lse),
        cmocka_unit_test(test_concurrent_readers),
        cmocka_unit_test(test_bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
