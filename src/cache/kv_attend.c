/*
 * kv_attend.c — attention over the KV cache (attn_kv_cache_attend):
 * decoding and chunked prefill for several sequences in one call.
 *
 * Shape legend: q [1, T, Hq, D]  out [1, T, Hq, Dv]  lse [Hq, T]
 *               n_i query rows of sequence i (its last positions), len_i
 *               its keys; an item is at most item_keys consecutive keys of
 *               one sequence, wherever its blocks lie in the pool
 *
 * What it computes.  Sequence i's queries are at positions
 * len_i - n_i .. len_i - 1 and see the keys 0 .. their position: lower-
 * right causal attention over the whole sequence.  Each item is attended
 * by one forward call that reads its keys and values in place through the
 * sequence's block table (attn__sdpa_forward_paged, src/api/sdpa.h: the
 * kernels read a block's rows as one run, so a paged cache costs no copy
 * and no call per block; a contiguous cache is one block).  The position
 * fields place the item's keys and the queries in the sequence, so the
 * causal rule and a window hold at absolute positions.  The items' partial
 * results are merged exactly by their log-sum-exp, as ring attention
 * merges its blocks (src/dist):
 *     o = sum_p w_p o_p / sum_p w_p,   w_p = exp(lse_p - m),   m = max_p lse_p
 *     lse = m + log(sum_p w_p)
 * accumulated in double, in item order.
 *
 * Work decomposition (shapes only, never the thread count, so the bits do
 * not depend on it): item_keys is ATTEND_ITEM_KEYS, raised when a
 * sequence's query rows are many so that its partial states stay within
 * ATTEND_PARTIAL_BUDGET.  With at least as many items as threads, or few
 * query rows, the items are shared out (each call inside on one thread);
 * otherwise they run one after the other and each call uses every thread
 * (attn_sdpa_forward's results do not depend on its thread count either).
 * The block size changes no item: a block's rows are one run for the
 * kernels, whose scores do not depend on the run a key is in and whose
 * P·V adds keys one after the other, so a paged cache gives the contiguous
 * cache's bits whatever its block size (tests/cache/test_kv_cache).
 */
#include "cache/kv_cache.h"

#include "api/sdpa.h"
#include "base/overlap.h"
#include "base/threads.h"

#include <math.h>
#include <stdlib.h>

#ifdef ATTN_HAVE_OPENMP
#include <omp.h>
#endif

/* Keys per item, before the budget below raises it: long enough that one
 * item's fixed costs (a call of ~2 us, a merge) are a few percent of its
 * reading of the keys (512 keys of 8 heads x 128 widths: 4 MiB, ~200 us),
 * short enough that one decoding sequence gives several threads work
 * (4096 keys: 8 items, as the flash kernel's own decode split makes). */
#define ATTEND_ITEM_KEYS 512
/* Query rows of a sequence up to which its calls are left on one thread
 * each and the items are shared out instead. */
#define ATTEND_FEW_ROWS 16
/* Doubles of partial state (acc [n, Hq, Dv] plus m, sum [Hq, n] per item)
 * one sequence may use: 32 MiB. */
#define ATTEND_PARTIAL_BUDGET ((int64_t)4 << 20)

/* ------------------------------------------------------------ the plan */

typedef struct attend_item {
    int64_t seq_index;       /* into the call's seqs */
    int64_t position, keys;  /* its first key in the sequence; how many */
    double *acc;       /* [n, Hq, Dv] sum of w_p o_p */
    double *m, *sum;   /* [Hq, n] running max lse and sum of w_p */
} attend_item;

typedef struct attend_sequence {
    int64_t id;                  /* the cache's sequence */
    int64_t len, rows, q_offset; /* keys, query rows, first query row in q */
    int64_t first_item, items;
} attend_sequence;

typedef struct attend_plan {
    const attn_kv_cache *cache;
    int64_t layer, heads_q;
    const attn_tensor *q;
    attn_sdpa_options opt; /* the caller's; each item's call adds causal and its positions */
    attend_sequence *seqs;
    attend_item *items;
    int64_t n_seqs, n_items;
    double *state;         /* the items' acc, m and sum */
    size_t workspace_bytes; /* for one attn_sdpa_forward call, the largest */
    int64_t max_rows;      /* of a sequence */
} attend_plan;

static void plan_free(attend_plan *p) {
    free(p->seqs);
    free(p->items);
    free(p->state);
}

static attn_status check_q_out(const attn_kv_cache *c, const attn_tensor *q, const attn_tensor *out, int64_t total) {
    static const char fn[] = "attn_kv_cache_attend";
    if (!q || !out) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn, q ? "out" : "q");
    if (!q->data || !out->data) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "%s: %s.data is NULL", fn, q->data ? "out" : "q");
    const int64_t hq = q->shape[2];
    if (q->shape[0] != 1 || q->shape[1] != total || q->shape[3] != c->dim || hq <= 0 || hq % c->kv_heads)
        return attn__fail(ATTN_ERR_SHAPE,
                          "%s: q is [%lld, %lld, %lld, %lld]; it must be [1, T, Hq, D] with T = %lld (the sum of "
                          "q_rows), D = %lld and Hq a multiple of the cache's %lld kv heads",
                          fn, (long long)q->shape[0], (long long)q->shape[1], (long long)q->shape[2],
                          (long long)q->shape[3], (long long)total, (long long)c->dim, (long long)c->kv_heads);
    if (out->shape[0] != 1 || out->shape[1] != total || out->shape[2] != hq || out->shape[3] != c->dim_v)
        return attn__fail(ATTN_ERR_SHAPE, "%s: out is [%lld, %lld, %lld, %lld]; it must be [1, %lld, %lld, %lld]", fn,
                          (long long)out->shape[0], (long long)out->shape[1], (long long)out->shape[2],
                          (long long)out->shape[3], (long long)total, (long long)hq, (long long)c->dim_v);
    if (out->dtype != ATTN_F32)
        return attn__fail(ATTN_ERR_UNSUPPORTED, "%s: out holds %s; it must be float32", fn, attn_dtype_name(out->dtype));
    if (q->stride[3] != 1 || out->stride[3] != 1)
        return attn__fail(ATTN_ERR_SHAPE, "%s: the last dimension of %s must be contiguous", fn,
                          q->stride[3] != 1 ? "q" : "out");
    return ATTN_OK;
}

/* out and lse against q, seqs, q_rows and each other (overlap.h).  The
 * cache's own rows are not compared: a caller sees them only through
 * attn_kv_cache_view's read-only views. */
static attn_status check_overlap(int64_t n_seqs, const int64_t *seqs, const int64_t *q_rows, const attn_tensor *q,
                                 const attn_tensor *out, const float *lse, int64_t total) {
    static const char fn[] = "attn_kv_cache_attend";
    attn_status st;
    if ((st = attn__tensor_check(q, "q", PROBLEM_WITH_DATA)) ||
        (st = attn__tensor_check(out, "out", PROBLEM_WITH_DATA)))
        return attn__fail(st, "%s: %s", fn, attn_last_error());
    const int64_t i64 = (int64_t)sizeof(int64_t);
    const mem_extent inputs[3] = {extent_of_tensor("q", q), extent_of_array("seqs", seqs, n_seqs, i64),
                                  extent_of_array("q_rows", q_rows, n_seqs, i64)};
    const mem_extent outputs[2] = {extent_of_tensor("out", out),
                                   extent_of_array("lse", lse, extent_mul(q->shape[2], total), (int64_t)sizeof(float))};
    return overlap_check(fn, outputs, 2, inputs, 3);
}

static attn_status check_options(const attn_sdpa_options *opt, attn_sdpa_options *o) {
    static const char fn[] = "attn_kv_cache_attend";
    static const attn_sdpa_options defaults = ATTN_SDPA_OPTIONS_INIT;
    attn_status st = options_copy(o, sizeof *o, &defaults, opt, "attn_sdpa_options");
    if (st) return st;
    if (o->mask || o->bias || o->key_lengths)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT,
                          "%s: opt.%s is set; masks, biases and key lengths would be indexed by the cache's rows "
                          "and are not taken (causal and the window are)",
                          fn, o->mask ? "mask" : o->bias ? "bias" : "key_lengths");
    if (o->query_start || o->key_start || o->total_len_q || o->total_len_kv)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT,
                          "%s: opt's position fields are set; the cache knows each sequence's positions (leave "
                          "query_start, key_start, total_len_q and total_len_kv 0)",
                          fn);
    return ATTN_OK;
}

/* Items of every sequence and their partial state. */
static attn_status plan_build(attend_plan *p, int64_t n_seqs, const int64_t *seqs, const int64_t *q_rows) {
    static const char fn[] = "attn_kv_cache_attend";
    const attn_kv_cache *c = p->cache;
    attn_status st;
    p->n_seqs = n_seqs;
    p->seqs = calloc((size_t)n_seqs, sizeof *p->seqs);
    if (!p->seqs) return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "%s: no memory for %lld sequences", fn, (long long)n_seqs);
    int64_t max_items = 0, offset = 0;
    for (int64_t i = 0; i < n_seqs; i++) {
        attend_sequence *s = &p->seqs[i];
        if ((st = attn__kv_cache_check_seq(c, fn, seqs[i], p->layer))) return st;
        s->id = seqs[i];
        s->len = c->lengths[seqs[i] * c->layers + p->layer];
        s->rows = q_rows ? q_rows[i] : 1;
        if (s->rows < 1 || s->rows > s->len)
            return attn__fail(ATTN_ERR_SHAPE,
                              "%s: sequence %lld (seqs[%lld]) has %lld query rows and %lld keys in layer %lld; it "
                              "needs 1 <= rows <= keys (append the queries' keys and values first)",
                              fn, (long long)seqs[i], (long long)i, (long long)s->rows, (long long)s->len,
                              (long long)p->layer);
        s->q_offset = offset;
        offset += s->rows;
        p->max_rows = max_i64(p->max_rows, s->rows);
        max_items += ceil_div(s->len, ATTEND_ITEM_KEYS);
    }
    p->items = malloc((size_t)max_items * sizeof *p->items);
    if (!p->items)
        return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "%s: no memory for the plan of %lld items", fn, (long long)max_items);
    int64_t state_doubles = 0;
    for (int64_t i = 0; i < n_seqs; i++) {
        attend_sequence *s = &p->seqs[i];
        const int64_t per_item_state = s->rows * p->heads_q * (c->dim_v + 2);
        const int64_t most_items = max_i64(1, ATTEND_PARTIAL_BUDGET / per_item_state);
        const int64_t item_keys = max_i64(ATTEND_ITEM_KEYS, ceil_div(s->len, most_items));
        s->first_item = p->n_items;
        for (int64_t at = 0; at < s->len; at += item_keys) {
            attend_item *it = &p->items[p->n_items++];
            it->seq_index = i;
            it->position = at;
            it->keys = min_i64(item_keys, s->len - at);
            state_doubles += per_item_state;
        }
        s->items = p->n_items - s->first_item;
    }
    p->state = malloc((size_t)state_doubles * sizeof(double));
    if (!p->state)
        return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "%s: no memory for %lld doubles of partial results", fn,
                          (long long)state_doubles);
    double *next = p->state;
    for (int64_t t = 0; t < p->n_items; t++) {
        attend_item *it = &p->items[t];
        const int64_t cells = p->seqs[it->seq_index].rows * p->heads_q;
        it->acc = next;
        it->m = it->acc + cells * c->dim_v;
        it->sum = it->m + cells;
        next = it->sum + cells;
    }
    return ATTN_OK;
}

/* The options of one item's call: lower-right causal over the whole
 * sequence, the item's keys and the queries placed at their positions. */
static attn_sdpa_options item_options(const attend_plan *p, const attend_item *it, int threads) {
    const attend_sequence *s = &p->seqs[it->seq_index];
    attn_sdpa_options o = p->opt;
    o.causal = 1;
    o.align = ATTN_ALIGN_LOWER_RIGHT;
    o.query_start = s->len - s->rows;
    o.key_start = it->position;
    o.total_len_q = o.total_len_kv = s->len;
    o.threads = threads;
    o.workspace = NULL;
    o.workspace_size = 0;
    o.progress = NULL;
    return o;
}

/* The sequence's query rows as a [1, n, Hq, D] view of q. */
static attn_tensor query_rows(const attend_plan *p, const attend_sequence *s) {
    attn_tensor q = *p->q;
    q.data = (unsigned char *)q.data + (size_t)(s->q_offset * q.stride[1]) * attn_dtype_size(q.dtype);
    q.shape[1] = s->rows;
    return q;
}

/* Per thread: one item's output and lse, and the call's workspace. */
typedef struct attend_scratch {
    float *out, *lse;
    void *workspace;
} attend_scratch;

static void scratch_free(attend_scratch *s) {
    free(s->out);
    free(s->lse);
    free(s->workspace);
}

static bool scratch_alloc(const attend_plan *p, attend_scratch *s) {
    const attn_kv_cache *c = p->cache;
    const int64_t cells = p->max_rows * p->heads_q;
    memset(s, 0, sizeof *s);
    s->out = malloc((size_t)(cells * c->dim_v) * sizeof(float));
    s->lse = malloc((size_t)cells * sizeof(float));
    s->workspace = p->workspace_bytes ? malloc(p->workspace_bytes) : NULL;
    return s->out && s->lse && (!p->workspace_bytes || s->workspace);
}

/* Folds one partial result (o [n, Hq, Dv], lse [Hq, n]) into a state:
 * rescaled to the larger max, so nothing overflows and the result does not
 * depend on which partial had it.  A partial that saw no key (lse -inf)
 * adds nothing. */
static void merge_partial(const attend_plan *p, int64_t rows, const float *o, const float *lse, double *acc, double *m,
                          double *sum) {
    const int64_t dv = p->cache->dim_v;
    for (int64_t h = 0; h < p->heads_q; h++)
        for (int64_t r = 0; r < rows; r++) {
            const int64_t cell = h * rows + r;
            const double l = lse[cell];
            if (l == -INFINITY) continue;
            double *a = acc + (r * p->heads_q + h) * dv;
            const float *x = o + (r * p->heads_q + h) * dv;
            if (!(l <= m[cell])) { /* a larger max (or NaN, which then spreads) */
                const double scale = m[cell] == -INFINITY ? 0.0 : exp(m[cell] - l);
                for (int64_t d = 0; d < dv; d++) a[d] *= scale;
                sum[cell] *= scale;
                m[cell] = l;
            }
            const double w = exp(l - m[cell]);
            for (int64_t d = 0; d < dv; d++) a[d] += w * x[d];
            sum[cell] += w;
        }
}

static void state_clear(const attend_plan *p, int64_t rows, double *acc, double *m, double *sum) {
    const int64_t cells = rows * p->heads_q;
    memset(acc, 0, (size_t)(cells * p->cache->dim_v) * sizeof *acc);
    for (int64_t i = 0; i < cells; i++) {
        m[i] = -INFINITY;
        sum[i] = 0;
    }
}

/* The item's keys and values: views shaped like its rows, at block 0 of
 * the layer, and the sequence's block table from the item's first key
 * (problem_pages). */
static void item_views(const attend_plan *p, const attend_item *it, attn_tensor *k, attn_tensor *v,
                       problem_pages *pages) {
    const attn_kv_cache *c = p->cache;
    *k = attn_tensor_view(kv_cache_k_row(c, p->layer, 0, 0), c->dtype, 1, it->keys, c->kv_heads, c->dim);
    *v = attn_tensor_view(kv_cache_v_row(c, p->layer, 0, 0), c->v_dtype, 1, it->keys, c->kv_heads, c->dim_v);
    *pages = (problem_pages){c->tables + p->seqs[it->seq_index].id * c->table_len, it->position, c->block_rows,
                             c->block_rows * c->k_row, c->block_rows * c->v_row};
}

/* One item: its keys attended in one call, the result kept as its state. */
static attn_status run_item(const attend_plan *p, attend_item *it, attend_scratch *s, int threads) {
    const attn_kv_cache *c = p->cache;
    const attend_sequence *seq = &p->seqs[it->seq_index];
    const attn_tensor q = query_rows(p, seq);
    attn_tensor out = attn_tensor_4d(s->out, 1, seq->rows, p->heads_q, c->dim_v);
    state_clear(p, seq->rows, it->acc, it->m, it->sum);
    attn_sdpa_options o = item_options(p, it, threads);
    o.workspace = s->workspace;
    o.workspace_size = p->workspace_bytes;
    attn_tensor k, v;
    problem_pages pages;
    item_views(p, it, &k, &v, &pages);
    attn_status st = attn__sdpa_forward_paged(&q, &k, &v, &pages, &o, &out, s->lse);
    if (st) return st;
    merge_partial(p, seq->rows, s->out, s->lse, it->acc, it->m, it->sum);
    return ATTN_OK;
}

/* A sequence's items merged in order into the first one, then normalised
 * into out and lse. */
static void finish_sequence(const attend_plan *p, const attend_sequence *s, attn_tensor *out, float *lse,
                            int64_t total_rows) {
    const int64_t dv = p->cache->dim_v, rows = s->rows, hq = p->heads_q;
    attend_item *first = &p->items[s->first_item];
    for (int64_t t = 1; t < s->items; t++) {
        const attend_item *it = &p->items[s->first_item + t];
        /* An item's state is (acc, m, sum): the partial o = acc / sum with
         * lse = m + log(sum); fold it like a partial, weight sum exp(m - M). */
        for (int64_t h = 0; h < hq; h++)
            for (int64_t r = 0; r < rows; r++) {
                const int64_t cell = h * rows + r;
                if (it->m[cell] == -INFINITY) continue;
                double *a = first->acc + (r * hq + h) * dv;
                const double *x = it->acc + (r * hq + h) * dv;
                const double big = first->m[cell] >= it->m[cell] ? first->m[cell] : it->m[cell];
                const double wa = first->m[cell] == -INFINITY ? 0.0 : exp(first->m[cell] - big);
                const double wb = exp(it->m[cell] - big);
                for (int64_t d = 0; d < dv; d++) a[d] = wa * a[d] + wb * x[d];
                first->sum[cell] = wa * first->sum[cell] + wb * it->sum[cell];
                first->m[cell] = big;
            }
    }
    const size_t out_bytes = attn_dtype_size(out->dtype);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t h = 0; h < hq; h++) {
            const int64_t cell = h * rows + r;
            /* m stays -inf only for a row that saw no key: output 0, lse -inf. */
            const bool seen = first->m[cell] != -INFINITY;
            const double sum = first->sum[cell];
            float *o = (float *)((unsigned char *)out->data +
                                 (size_t)((s->q_offset + r) * out->stride[1] + h * out->stride[2]) * out_bytes);
            const double *a = first->acc + (r * hq + h) * dv;
            for (int64_t d = 0; d < dv; d++) o[d] = seen ? (float)(a[d] / sum) : 0.0f;
            if (lse) lse[h * total_rows + s->q_offset + r] = seen ? (float)(first->m[cell] + log(sum)) : -INFINITY;
        }
}

/* The largest workspace one item's call on `threads` threads needs (the
 * flash kernel's grows with its threads). */
static attn_status plan_workspace(attend_plan *p, int threads) {
    for (int64_t i = 0; i < p->n_items; i++) {
        const attend_item *it = &p->items[i];
        attn_tensor q = query_rows(p, &p->seqs[it->seq_index]), k, v;
        problem_pages pages;
        item_views(p, it, &k, &v, &pages);
        attn_sdpa_options o = item_options(p, it, threads);
        size_t bytes;
        attn_status st = attn__sdpa_workspace_size_paged(&q, &k, &v, &pages, &o, &bytes);
        if (st) return attn__fail(st, "attn_kv_cache_attend: %s", attn_last_error());
        if (bytes > p->workspace_bytes) p->workspace_bytes = bytes;
    }
    return ATTN_OK;
}

attn_status attn_kv_cache_attend(const attn_kv_cache *c, int64_t layer, int64_t n_seqs, const int64_t *seqs,
                                 const int64_t *q_rows, const attn_tensor *q, const attn_sdpa_options *opt,
                                 attn_tensor *out, float *lse) {
    static const char fn[] = "attn_kv_cache_attend";
    if (!c) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "%s: cache is NULL", fn);
    if (n_seqs <= 0) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "%s: n_seqs is %lld: must be > 0", fn, (long long)n_seqs);
    if (!seqs) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "%s: seqs is NULL", fn);
    if (layer < 0 || layer >= c->layers)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "%s: layer %lld is not in the cache (it has %lld layers)", fn,
                          (long long)layer, (long long)c->layers);
    int64_t total = 0;
    for (int64_t i = 0; i < n_seqs; i++) {
        if (q_rows && q_rows[i] < 1)
            return attn__fail(ATTN_ERR_SHAPE, "%s: q_rows[%lld] is %lld: each sequence needs at least one query row",
                              fn, (long long)i, (long long)q_rows[i]);
        total += q_rows ? q_rows[i] : 1;
    }
    attend_plan p = {.cache = c, .layer = layer, .q = q};
    attn_status st;
    if ((st = check_options(opt, &p.opt)) || (st = check_q_out(c, q, out, total)) ||
        (st = check_overlap(n_seqs, seqs, q_rows, q, out, lse, total)))
        return st;
    p.heads_q = q->shape[2];
    attend_scratch *scratch = NULL;
    int threads = 1;
    if ((st = plan_build(&p, n_seqs, seqs, q_rows))) goto cleanup;

    double pairs = 0; /* query-key pairs, an upper bound: what the thread policy needs */
    for (int64_t i = 0; i < n_seqs; i++) pairs += (double)p.seqs[i].rows * (double)p.seqs[i].len;
    const double flops = 2.0 * (double)(c->dim + c->dim_v) * (double)p.heads_q * pairs;
    const int requested = attn__threads_requested(p.opt.threads);
    /* Few query rows (decoding): items are the only parallelism there is.
     * Many rows and few items: each call spreads its rows over the threads. */
    const bool share_items = p.n_items >= requested || p.max_rows <= ATTEND_FEW_ROWS;
    threads = share_items ? attn__threads_for(requested, flops, (double)p.n_items) : 1;
    const int call_threads = share_items ? 1 : requested;
    if ((st = plan_workspace(&p, call_threads))) goto cleanup;
    scratch = calloc((size_t)threads, sizeof *scratch);
    if (!scratch) {
        st = attn__fail(ATTN_ERR_OUT_OF_MEMORY, "%s: no memory", fn);
        goto cleanup;
    }
    for (int t = 0; t < threads; t++)
        if (!scratch_alloc(&p, &scratch[t])) {
            st = attn__fail(ATTN_ERR_OUT_OF_MEMORY, "%s: no memory for the scratch of %d threads", fn, threads);
            goto cleanup;
        }
    /* Each item's status in its own slot (no lock, no shared state). */
    attn_status *item_status = calloc((size_t)p.n_items, sizeof *item_status);
    if (!item_status) {
        st = attn__fail(ATTN_ERR_OUT_OF_MEMORY, "%s: no memory", fn);
        goto cleanup;
    }
#ifdef ATTN_HAVE_OPENMP
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads) if (threads > 1)
#endif
    for (int64_t t = 0; t < p.n_items; t++) {
#ifdef ATTN_HAVE_OPENMP
        attend_scratch *s = &scratch[omp_get_thread_num()];
#else
        attend_scratch *s = &scratch[0];
#endif
        item_status[t] = run_item(&p, &p.items[t], s, call_threads);
    }
    /* The lowest failing item is reported, whatever thread met it; its
     * message was left in that thread's error buffer, so the item is run
     * again here (a failure is rare, and the same inputs fail the same way). */
    for (int64_t t = 0; t < p.n_items && !st; t++)
        if (item_status[t]) {
            const attn_status again = run_item(&p, &p.items[t], &scratch[0], call_threads);
            st = attn__fail(item_status[t], "%s: sequence %lld: %s", fn, (long long)seqs[p.items[t].seq_index],
                            again ? attn_last_error() : "a failure that did not recur");
        }
    free(item_status);
    if (st) goto cleanup;
    for (int64_t i = 0; i < n_seqs; i++) finish_sequence(&p, &p.seqs[i], out, lse, total);

cleanup:
    if (scratch)
        for (int t = 0; t < threads; t++) scratch_free(&scratch[t]);
    free(scratch);
    plan_free(&p);
    return st;
}
