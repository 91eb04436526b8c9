/*
 * bench_cache.c — `attn bench`'s cache section: one decoding step (one
 * query per sequence) through attn_kv_cache_attend, on the same keys and
 * values stored three ways, and a batch of sequences of mixed lengths.
 *
 * Shapes: q [1, B, Hq=16, D=128] (one row per sequence), each sequence's
 * keys and values [S, Hkv=8, 128], causal-lower-right; the cache in fp32,
 * then the same rows (but sdpa) with a bfloat16 cache ('kv=bf16': what an
 * engine keeps; half the bytes a step reads), and with 8-bit caches
 * ('kv=q8_0', 'kv=fp8': blocks of 32 values and a float16 scale, 34/128 of
 * the float32 bytes; docs/cache.md, "8-bit caches").
 *   cache S=n sdpa           attn_sdpa_forward on one contiguous [1, n, 8, 128]
 *                            in malloc's memory (a caller's tensors): the
 *                            kernel alone, what the cache adds to
 *   cache S=n contiguous     the cache's one region per sequence
 *   cache S=n paged block=r  blocks of r rows, every other block of the pool
 *                            (a comb: a pool that has served many short
 *                            sequences), so the view is n / r segments: the
 *                            layout where blocks cost most
 *   cache batched 8 seqs ... 8 sequences of 512 .. 8192 rows (quick: 128 ..
 *                            2048) appended in turns, block by block, into a
 *                            fresh pool (which keeps each one's blocks
 *                            together where it can): contiguous, paged
 *                            block=16 and block=256
 * The rows of one S (and those of the batch) read the same keys and values
 * and are timed together, in rounds of one call each after an untimed
 * warm-up: a row's time is its median, and "x contig" the median over the
 * rounds of its time over the contiguous row's in the same round, so that
 * the drifting load of a shared machine cancels from the ratio.  GB/s
 * counts the bytes of q, k, v and out, as the decode rows do.  The
 * cache's pools are on 2 MiB pages where the system has them (docs/cache.md,
 * "Memory pages"), the sdpa row's tensors on malloc's small pages: where
 * the two differ, that is what the pages are worth.
 */
#include "bench_cache.h"

#include "attn_cache.h"
#include "cli.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { CACHE_HQ = 16, CACHE_HKV = 8, CACHE_D = 128, CACHE_SEQS = 8 };

const char bench_cache_help[] =
    "  cache    one decoding step through the KV cache (attn_kv_cache_attend), Hq=16 Hkv=8\n"
    "           D=128: S=4096|32768 as attn_sdpa_forward alone (sdpa), a contiguous cache,\n"
    "           and paged caches of 16- and 256-row blocks lying every other one in the\n"
    "           pool (a comb, the worst layout); then 8 sequences of mixed lengths in one\n"
    "           call, appended side by side into a fresh pool, contiguous and paged (16 and\n"
    "           256); rows of one S, and the batch's, are timed together in rounds;\n"
    "           then the same caches in bfloat16, q8_0 and fp8 ('kv=bf16', 'kv=q8_0',\n"
    "           'kv=fp8'; no sdpa row); the cache's pools are on 2 MiB pages where the\n"
    "           system has them (ATTN_HUGE_PAGES=0: not)\n\n";

typedef enum { STORE_SDPA, STORE_CONTIGUOUS, STORE_PAGED } cache_store;

typedef struct cache_case {
    cache_store store;
    attn_dtype dtype; /* the cache's: ATTN_F32, ATTN_BF16, ATTN_Q8_0 or ATTN_FP8_E4M3 */
    int64_t seqs, lens[CACHE_SEQS], block_rows;
    char name[80];
    int group; /* rows of one group share their data and are timed together */
} cache_case;

/* The plan: (quick) S = 4096, or also 32768; then the batch; all of it
 * once with a float32 cache, then with a bfloat16 one (no sdpa row). */
static int plan(bool quick, cache_case *cases) {
    static const int64_t singles[] = {4096, 32768};
    static const int64_t batch[CACHE_SEQS] = {512, 8192, 1024, 6144, 1536, 4096, 2048, 3072};
    static const int64_t blocks[] = {16, 256};
    int n = 0, group = 0;
    static const attn_dtype dtypes[] = {ATTN_F32, ATTN_BF16, ATTN_Q8_0, ATTN_FP8_E4M3};
    static const char *const kvs[] = {"", " kv=bf16", " kv=q8_0", " kv=fp8"};
    for (int half = 0; half < 4; half++) {
        const attn_dtype dtype = dtypes[half];
        const char *kv = kvs[half];
        for (int s = 0; s < (quick ? 1 : 2); s++, group++) {
            for (int kind = half ? STORE_CONTIGUOUS : STORE_SDPA; kind <= STORE_PAGED; kind++)
                for (int b = 0; b < (kind == STORE_PAGED ? 2 : 1); b++) {
                    cache_case *c = &cases[n++];
                    *c = (cache_case){(cache_store)kind, dtype, 1, {singles[s]}, kind == STORE_PAGED ? blocks[b] : 0,
                                      {0}, group};
                    if (kind == STORE_PAGED)
                        snprintf(c->name, sizeof c->name, "cache S=%lld%s paged block=%lld", (long long)singles[s], kv,
                                 (long long)blocks[b]);
                    else
                        snprintf(c->name, sizeof c->name, "cache S=%lld%s %s", (long long)singles[s], kv,
                                 kind == STORE_SDPA ? "sdpa" : "contiguous");
                }
        }
        for (int b = -1; b < 2; b++) { /* contiguous, then paged with each block size */
            cache_case *c = &cases[n++];
            *c = (cache_case){b < 0 ? STORE_CONTIGUOUS : STORE_PAGED, dtype, CACHE_SEQS, {0}, b < 0 ? 0 : blocks[b],
                              {0}, group};
            for (int i = 0; i < CACHE_SEQS; i++) c->lens[i] = quick ? batch[i] / 4 : batch[i];
            if (b < 0) snprintf(c->name, sizeof c->name, "cache batched %d seqs%s contiguous", CACHE_SEQS, kv);
            else
                snprintf(c->name, sizeof c->name, "cache batched %d seqs%s paged block=%lld", CACHE_SEQS, kv,
                         (long long)blocks[b]);
        }
        group++;
    }
    return n;
}

enum { MAX_CASES = 40 }; /* the plan's 38 rows, and room */

int bench_cache_rows(bool quick, const char *filter, bench_cache_matcher matches, bool list) {
    cache_case cases[MAX_CASES];
    int n = plan(quick, cases), selected = 0;
    for (int i = 0; i < n; i++)
        if (matches(filter, cases[i].name)) {
            selected++;
            if (list) printf("%s\n", cases[i].name);
        }
    return selected;
}

/* ---------------------------------------------------------------- setup */

static double seconds_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void fill(float *x, size_t n, uint64_t seed) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        x[i] = (float)((double)(s >> 11) * 0x1.0p-52 - 1.0);
    }
}

typedef struct cache_run {
    attn_kv_cache *cache;
    int64_t seqs[CACHE_SEQS];
    float *k, *v, *q, *out; /* k, v: [longest, Hkv, D] shared by every sequence and row of a group */
    int64_t segments;       /* of the longest sequence's view */
} cache_run;

static int64_t longest(const cache_case *c) {
    int64_t m = 0;
    for (int i = 0; i < c->seqs; i++) m = c->lens[i] > m ? c->lens[i] : m;
    return m;
}

static int compare_blocks(const void *a, const void *b) {
    const uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
    return (x > y) - (x < y);
}

/* Makes a paged pool a comb, as one that has served many short sequences
 * leaves it: every free block goes to a one-block sequence (rows of k and
 * v), and every other of those, in the order of their blocks' addresses,
 * is freed, the highest first, so that the free blocks are taken lowest
 * first and no two are neighbours.  (The pool otherwise keeps a sequence's
 * blocks together; docs/cache.md.) */
static attn_status fragment(attn_kv_cache *cache, const float *k, const float *v) {
    int64_t free_blocks, block_rows;
    attn_status st = attn_kv_cache_pool(cache, &free_blocks, NULL, &block_rows);
    if (st) return st;
    uintptr_t(*order)[2] = malloc((size_t)(free_blocks + 1) * sizeof *order);
    if (!order) return attn_set_error(ATTN_ERR_OUT_OF_MEMORY, "cannot allocate the comb's list");
    const int64_t n = free_blocks;
    for (int64_t i = 0; i < n && !st; i++) {
        int64_t id, count;
        attn_kv_segment seg;
        attn_tensor kt = attn_tensor_4d((float *)k, 1, block_rows, CACHE_HKV, CACHE_D);
        attn_tensor vt = attn_tensor_4d((float *)v, 1, block_rows, CACHE_HKV, CACHE_D);
        if (!(st = attn_kv_cache_seq_add(cache, &id)) && !(st = attn_kv_cache_append(cache, id, 0, &kt, &vt)) &&
            !(st = attn_kv_cache_view(cache, id, 0, &seg, 1, &count))) {
            order[i][0] = (uintptr_t)seg.k.data;
            order[i][1] = (uintptr_t)id;
        }
    }
    if (!st) qsort(order, (size_t)n, sizeof *order, compare_blocks);
    for (int64_t i = n - 1; i >= 0 && !st; i--)
        if (i % 2 == 0) st = attn_kv_cache_seq_free(cache, (int64_t)order[i][1]);
    free(order);
    return st;
}

/* The cache of a case.  A single paged sequence is appended into a comb
 * (fragment): every other block of the pool, the layout where blocks cost
 * most.  The batch's sequences are appended in turns, a block (or 512
 * rows) at a time, into a fresh pool, which keeps each one's blocks
 * together where it can. */
static attn_status build(const cache_case *c, cache_run *r) {
    const int64_t len = longest(c), step = c->store == STORE_PAGED ? c->block_rows : 512;
    const bool comb = c->store == STORE_PAGED && c->seqs == 1;
    int64_t total = 0;
    for (int i = 0; i < c->seqs; i++) total += c->lens[i];
    attn_kv_cache_config cfg = ATTN_KV_CACHE_CONFIG_INIT;
    cfg.layers = 1;
    cfg.kv_heads = CACHE_HKV;
    cfg.head_dim = CACHE_D;
    cfg.dtype = c->dtype;
    cfg.layout = c->store == STORE_PAGED ? ATTN_KV_PAGED : ATTN_KV_CONTIGUOUS;
    cfg.block_rows = c->block_rows;
    cfg.num_blocks = c->block_rows ? (comb ? 2 : 1) * (total / c->block_rows + c->seqs) : 0;
    cfg.max_seqs = c->seqs + (comb ? cfg.num_blocks : 0);
    cfg.capacity = len;
    attn_status st = attn_kv_cache_new(&cfg, &r->cache);
    if (st) return st;
    for (int i = 0; i < c->seqs; i++)
        if ((st = attn_kv_cache_seq_add(r->cache, &r->seqs[i]))) return st;
    if (comb && (st = fragment(r->cache, r->k, r->v))) return st;
    for (int64_t at = 0; at < len; at += step)
        for (int i = 0; i < c->seqs; i++) {
            if (at >= c->lens[i]) continue;
            const int64_t n = c->lens[i] - at < step ? c->lens[i] - at : step;
            attn_tensor k = attn_tensor_4d(r->k + at * CACHE_HKV * CACHE_D, 1, n, CACHE_HKV, CACHE_D);
            attn_tensor v = attn_tensor_4d(r->v + at * CACHE_HKV * CACHE_D, 1, n, CACHE_HKV, CACHE_D);
            if ((st = attn_kv_cache_append(r->cache, r->seqs[i], 0, &k, &v))) return st;
        }
    int64_t longest_seq = 0;
    for (int i = 1; i < c->seqs; i++)
        if (c->lens[i] > c->lens[longest_seq]) longest_seq = i;
    return attn_kv_cache_view(r->cache, r->seqs[longest_seq], 0, NULL, 0, &r->segments);
}

static attn_status call(const cache_case *c, cache_run *r, const attn_sdpa_options *opt) {
    attn_tensor q = attn_tensor_4d(r->q, 1, c->seqs, CACHE_HQ, CACHE_D);
    attn_tensor out = attn_tensor_4d(r->out, 1, c->seqs, CACHE_HQ, CACHE_D);
    if (c->store != STORE_SDPA) return attn_kv_cache_attend(r->cache, 0, c->seqs, r->seqs, NULL, &q, opt, &out, NULL);
    attn_tensor k = attn_tensor_4d(r->k, 1, c->lens[0], CACHE_HKV, CACHE_D);
    attn_tensor v = attn_tensor_4d(r->v, 1, c->lens[0], CACHE_HKV, CACHE_D);
    attn_sdpa_options o = *opt;
    o.causal = 1;
    o.align = ATTN_ALIGN_LOWER_RIGHT;
    return attn_sdpa_forward(&q, &k, &v, &o, &out, NULL, NULL);
}

static int compare(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *x, int n) {
    qsort(x, (size_t)n, sizeof *x, compare);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

/* One row's results. */
typedef struct cache_result {
    attn_status status;
    int runs;
    double median_s, ratio; /* ratio: median over rounds of time / the contiguous row's, or NAN */
    int64_t segments;
} cache_result;

/* Times the selected rows of one group (sel[0..m), same data) in rounds:
 * each round calls every row once, so that the load of a shared machine
 * drifts across all of them alike and the ratio of two rows is taken
 * within a round.  Round r starts at row r mod m: in a fixed order the
 * row called first read up to 16 % slower than the same cache called last
 * (two identical contiguous caches, S = 4096, Zen 3), more than the 5 %
 * that paged against contiguous is judged by. */
static void measure_group(const bench_cache_settings *s, const cache_case *cases, const int *sel, int m,
                          cache_result *res) {
    const cache_case *first = &cases[sel[0]];
    const int64_t len = longest(first), seqs = first->seqs;
    cache_run run[MAX_CASES] = {{0}};
    float *k = malloc((size_t)(len * CACHE_HKV * CACHE_D) * sizeof(float));
    float *v = malloc((size_t)(len * CACHE_HKV * CACHE_D) * sizeof(float));
    float *q = malloc((size_t)(seqs * CACHE_HQ * CACHE_D) * sizeof(float));
    float *out = malloc((size_t)(seqs * CACHE_HQ * CACHE_D) * sizeof(float));
    double *times = malloc((size_t)(m * s->max_runs) * sizeof *times), *ratios = malloc((size_t)s->max_runs * sizeof *ratios);
    attn_sdpa_options opt = ATTN_SDPA_OPTIONS_INIT;
    opt.threads = s->threads;
    attn_status st = ATTN_OK;
    if (!k || !v || !q || !out || !times || !ratios) st = attn_set_error(ATTN_ERR_OUT_OF_MEMORY, "cannot allocate the inputs");
    if (!st) {
        fill(k, (size_t)(len * CACHE_HKV * CACHE_D), 2);
        fill(v, (size_t)(len * CACHE_HKV * CACHE_D), 3);
        fill(q, (size_t)(seqs * CACHE_HQ * CACHE_D), 1);
    }
    /* Build every row's cache and call it once (the warm-up, untimed but
     * for the round count). */
    double round_s = 0;
    int contiguous = -1;
    for (int j = 0; j < m; j++) {
        const cache_case *c = &cases[sel[j]];
        run[j] = (cache_run){.k = k, .v = v, .q = q, .out = out, .segments = 1};
        res[j] = (cache_result){st, 0, NAN, NAN, 1};
        if (st) continue;
        if (c->store == STORE_CONTIGUOUS) contiguous = j;
        if (c->store != STORE_SDPA && (res[j].status = build(c, &run[j]))) continue;
        res[j].segments = run[j].segments;
        const double t0 = seconds_now();
        res[j].status = call(c, &run[j], &opt);
        round_s += seconds_now() - t0;
    }
    int rounds = round_s > 0 ? (int)ceil(s->target_seconds * m / round_s) : s->max_runs;
    rounds = rounds < s->min_runs ? s->min_runs : rounds > s->max_runs ? s->max_runs : rounds;
    for (int r = 0; r < rounds; r++)
        for (int turn = 0; turn < m; turn++) {
            const int j = (r + turn) % m;
            if (res[j].status) continue;
            const double t0 = seconds_now();
            res[j].status = call(&cases[sel[j]], &run[j], &opt);
            times[j * s->max_runs + r] = seconds_now() - t0;
        }
    for (int j = 0; j < m; j++) {
        if (res[j].status) continue;
        if (contiguous >= 0 && !res[contiguous].status && cases[sel[j]].store == STORE_PAGED) {
            for (int r = 0; r < rounds; r++) ratios[r] = times[j * s->max_runs + r] / times[contiguous * s->max_runs + r];
            res[j].ratio = median(ratios, rounds);
        }
        res[j].runs = rounds;
        res[j].median_s = median(times + j * s->max_runs, rounds);
    }
    for (int j = 0; j < m; j++) attn_kv_cache_free(run[j].cache);
    free(k);
    free(v);
    free(q);
    free(out);
    free(times);
    free(ratios);
}

/* ---------------------------------------------------------------- output */

static void print_row(const bench_cache_settings *s, const cache_case *c, const cache_result *r) {
    int64_t keys = 0;
    for (int j = 0; j < c->seqs; j++) keys += c->lens[j];
    const double kv_bytes = (double)attn_dtype_bytes(c->dtype, CACHE_D) / CACHE_D; /* per value; 8-bit: 34 / 32 */
    const double io = 4.0 * 2.0 * (double)(c->seqs * CACHE_HQ * CACHE_D) + kv_bytes * 2.0 * (double)(keys * CACHE_HKV * CACHE_D);
    const double gbps = io / r->median_s / 1e9, gflops = 4.0 * CACHE_HQ * (double)keys * CACHE_D / r->median_s / 1e9;
    if (s->csv) {
        printf("cache,%s,flash,%s,%d,%lld,1,%lld,%d,%d,%d,causal-lower-right,", c->name, attn_isa_name(), s->threads,
               (long long)c->seqs, (long long)keys, CACHE_HQ, CACHE_HKV, CACHE_D);
        if (r->status) printf(",,,,,,,,,error\n");
        else
            printf("%d,%.4f,%.3f,,%.3f,%.2f,,,%.0f,ok\n", r->runs, r->median_s * 1e3, gflops, gbps,
                   100.0 * gbps / s->read_gbps, io);
    } else if (r->status) {
        printf("%-44s error (see message above)\n", c->name);
    } else {
        printf("%-44s %3d %4d %11.3f %6.2f %5.1f%% %9lld ", c->name, s->threads, r->runs, r->median_s * 1e3, gbps,
               100.0 * gbps / s->read_gbps, (long long)r->segments);
        if (isfinite(r->ratio)) printf("%8.3f\n", r->ratio);
        else printf("%8s\n", "");
    }
}

int bench_cache_run(const bench_cache_settings *s) {
    cache_case cases[MAX_CASES];
    const int n = plan(s->quick, cases);
    int rc = CLI_OK;
    bool header = false;
    for (int group = 0; group <= cases[n - 1].group; group++) {
        int sel[MAX_CASES], m = 0;
        for (int i = 0; i < n; i++)
            if (cases[i].group == group && s->matches(s->filter, cases[i].name)) sel[m++] = i;
        if (!m) continue;
        cache_result res[MAX_CASES];
        measure_group(s, cases, sel, m, res);
        if (!s->csv && !header) {
            printf("\ncache: one decoding step (a query per sequence), Hq=16 Hkv=8 D=128, fp32 (kv=bf16: a\n"
                   "bfloat16 cache); GB/s = bytes of q, k, v, out / time; rows of one S (and the batch) are\n"
                   "timed in rounds of one call each; %%bw of the read bandwidth; x contig = median over\n"
                   "rounds of time / the contiguous row's in the same round; the cache's pools are on 2 MiB\n"
                   "pages (ATTN_HUGE_PAGES=0: small ones), the sdpa row's tensors on malloc's small ones\n"
                   "%-44s %3s %4s %11s %6s %6s %9s %8s\n",
                   "name", "thr", "runs", "median ms", "GB/s", "%bw", "segments", "x contig");
            header = true;
        }
        for (int j = 0; j < m; j++) {
            if (res[j].status) {
                fprintf(stderr, "attn bench: %s: %s: %s\n", cases[sel[j]].name, attn_status_str(res[j].status),
                        attn_last_error());
                rc = CLI_DATA_ERROR;
            }
            print_row(s, &cases[sel[j]], &res[j]);
        }
        fflush(stdout);
    }
    return rc;
}
