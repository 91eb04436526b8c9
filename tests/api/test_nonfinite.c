/*
 * test_nonfinite.c — one contract for non-finite inputs and score overflow
 * (docs/semantics.md, "Numbers and errors"), in every kernel: the reference,
 * flash on prefill tiles and on the decode rows path with its key split,
 * and both backward kernels, on every instruction set this CPU has.
 *
 *   hidden keys never matter    a key hidden from a row by any rule holds
 *                               NaN, +Inf or -Inf in k and v: that row's
 *                               out, weights, lse and dq are bit-identical
 *                               to those of the problem with the key
 *                               zeroed, and so are dk, dv of the keys no
 *                               affected row sees
 *   non-finite inputs propagate NaN or ±Inf in q, in a visible k or v, or a
 *                               NaN or +inf bias on a visible key: the rows
 *                               that read it are not finite (a value only
 *                               in out: weights and lse do not read v), and
 *                               so are their dq and the dk of their keys
 *   overflow                    finite inputs whose scores overflow fp32:
 *                               the long-double oracle, a closed form for
 *                               the gradients
 *   fully masked rows           output 0, lse -inf, even with a NaN query
 *   determinism                 exact-path rows too: the same bits for 1,
 *                               2 and 3 threads
 *
 * Every table row is checked on its own and names what failed (at most a
 * few messages per case), so that a run against an older library lists
 * each case this contract fixed.
 *
 * Shape legend: q [B, L, Hq, D]  k [B, S, Hkv, D]  v [B, S, Hkv, Dv]
 *               out [B, L, Hq, Dv]  weights [B, Hq, L, S]  lse [B, Hq, L]
 */
#include "oracle.h"
#include "tolerances.h"

#include "flash/flash.h"
#include "isa_list.h"

#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ reporting */

static int failures;     /* over the whole test function       */
static int case_reports; /* messages printed for the current case */

static void check(bool ok, const char *label, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void check(bool ok, const char *label, const char *fmt, ...) {
    if (ok) return;
    failures++;
    if (case_reports++ >= 3) return;
    char msg[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    print_message("FAIL %s: %s\n", label, msg);
}

/* ------------------------------------------------------- the kernels */

/* The kernel runs: the reference, then flash on each ISA of the registry. */
static int kernel_runs(void) { return 1 + attn__isa_count(); }

/* Kernel run k: 0 the reference, 1.. flash on ISA k - 1.  Returns false
 * when this CPU or build lacks the ISA; the label names the run. */
static bool select_run(int k, attn_kernel *kernel, char *name, size_t size) {
    if (k == 0) {
        *kernel = ATTN_KERNEL_REF;
        snprintf(name, size, "ref");
        return test_isa_use(TEST_ISA_AUTO);
    }
    *kernel = ATTN_KERNEL_FLASH;
    snprintf(name, size, "flash/%s", attn__isa_name(k - 1));
    return test_isa_use(k - 1);
}

/* Everything one kernel computes for a problem. */
typedef struct results {
    float *out, *w, *lse, *dq, *dk, *dv;
} results;

static void results_free(results *r) {
    free(r->out); free(r->w); free(r->lse); free(r->dq); free(r->dk); free(r->dv);
}

/* The forward (with weights and lse) and, when dout is given, the backward
 * from that forward's out and lse, both on `kernel` with `threads`. */
static void run(const random_case *rc, const float *dout, attn_kernel kernel, int threads, results *res) {
    const oracle_case *c = &rc->c;
    res->out = test_nan_filled(c->B * c->L * c->Hq * c->Dv);
    res->w = test_nan_filled(c->B * c->Hq * c->L * c->S);
    res->lse = test_nan_filled(c->B * c->Hq * c->L);
    res->dq = dout ? test_nan_filled(c->B * c->L * c->Hq * c->D) : NULL;
    res->dk = dout ? test_nan_filled(c->B * c->S * c->Hkv * c->D) : NULL;
    res->dv = dout ? test_nan_filled(c->B * c->S * c->Hkv * c->Dv) : NULL;
    random_case_tensors t = random_case_views(rc, res->out);
    attn_sdpa_options opt = random_case_options(rc);
    opt.kernel = kernel;
    opt.threads = threads;
    if (attn_sdpa_forward(&t.q, &t.k, &t.v, &opt, &t.out, res->w, res->lse) != ATTN_OK)
        fail_msg("forward: %s", attn_last_error());
    if (!dout) return;
    attn_tensor dot = attn_tensor_4d((float *)dout, c->B, c->L, c->Hq, c->Dv);
    attn_tensor dq = attn_tensor_4d(res->dq, c->B, c->L, c->Hq, c->D);
    attn_tensor dk = attn_tensor_4d(res->dk, c->B, c->S, c->Hkv, c->D);
    attn_tensor dv = attn_tensor_4d(res->dv, c->B, c->S, c->Hkv, c->Dv);
    if (attn_sdpa_backward(&t.q, &t.k, &t.v, &opt, &t.out, res->lse, &dot, &dq, &dk, &dv) != ATTN_OK)
        fail_msg("backward: %s", attn_last_error());
}

static bool all_finite(const float *x, int64_t n) {
    for (int64_t e = 0; e < n; e++)
        if (!isfinite(x[e])) return false;
    return true;
}

/* ------------------------------------------------------------- problems */

/* A problem of the given shapes with N(0, 1) inputs and no rule, then
 * `rules` applied (NULL: none). */
typedef void (*rules_fn)(random_case *rc);

static void problem_make(random_case *rc, uint64_t seed, const int64_t shape[7], rules_fn rules) {
    test_rng r;
    test_rng_seed(&r, seed);
    random_case_make(rc, &r, shape[0], shape[1], shape[2], shape[3], shape[4], shape[5], shape[6], MASK_NONE);
    rc->c.scale = 0; /* the default 1/sqrt(D) */
    if (rules) rules(rc);
}

static void rules_causal(random_case *rc) { rc->c.causal = 1; }
static void rules_lower_right(random_case *rc) { rc->c.causal = 2; }

/* Mistral's sliding window: key j visible to i when i - 20 <= j <= i. */
static void rules_window(random_case *rc) {
    rc->c.causal = 1;
    rc->c.window = 1;
    rc->c.left = 20;
    rc->c.right = 0;
}

/* Batch 0 holds 3/5 of the keys, batch 1 17/20. */
static void rules_key_lengths(random_case *rc) {
    rc->key_lengths = malloc(sizeof(int64_t) * 2);
    rc->key_lengths[0] = rc->c.S * 3 / 5;
    rc->key_lengths[1] = rc->c.S * 17 / 20;
    rc->c.key_lengths = rc->key_lengths;
}

/* Prefill, [L, S]: key 77 hidden from the even rows, keys 150.. from all. */
static bool rows_pattern_hides(int64_t i, int64_t j) { return (j == 77 && i % 2 == 0) || j >= 150; }
/* Decode, [B, 1, 1, S]: slots 1000..1499 empty in both batches, slot 2001
 * in batch 0 only (a cache's free slots, in a block and alone). */
static bool slots_pattern_hides(int64_t b, int64_t j) { return (j >= 1000 && j < 1500) || (j == 2001 && b == 0); }

static void set_shape(int64_t shape[4], int64_t b, int64_t h, int64_t l, int64_t s) {
    shape[0] = b, shape[1] = h, shape[2] = l, shape[3] = s;
}

/* A boolean mask hiding the pattern (rows pattern when L > 1, else slots). */
static void rules_mask(random_case *rc) {
    oracle_case *c = &rc->c;
    const bool rows = c->L > 1;
    if (rows) set_shape(c->mask_shape, 1, 1, c->L, c->S);
    else set_shape(c->mask_shape, c->B, 1, 1, c->S);
    const int64_t outer = rows ? c->L : c->B;
    rc->mask = malloc((size_t)(outer * c->S));
    for (int64_t x = 0; x < outer; x++)
        for (int64_t j = 0; j < c->S; j++)
            rc->mask[x * c->S + j] = (uint8_t)!(rows ? rows_pattern_hides(x, j) : slots_pattern_hides(x, j));
    c->mask = rc->mask;
}

/* A finite N(0, 1) bias of the mask's shape, -inf where `hide` (the
 * pattern) or 0 = none. */
static void add_bias(random_case *rc, bool hide) {
    oracle_case *c = &rc->c;
    const bool rows = c->L > 1;
    if (rows) set_shape(c->bias_shape, 1, 1, c->L, c->S);
    else set_shape(c->bias_shape, c->B, 1, 1, c->S);
    const int64_t outer = rows ? c->L : c->B;
    test_rng r;
    test_rng_seed(&r, 77);
    rc->bias = malloc(sizeof(float) * (size_t)(outer * c->S));
    for (int64_t x = 0; x < outer; x++)
        for (int64_t j = 0; j < c->S; j++) {
            const bool hidden = hide && (rows ? rows_pattern_hides(x, j) : slots_pattern_hides(x, j));
            rc->bias[x * c->S + j] = hidden ? -INFINITY : (float)test_rng_normal(&r);
        }
    c->bias = rc->bias;
}

static void rules_bias(random_case *rc) { add_bias(rc, true); }
/* The mask hides the pattern; the bias is finite everywhere. */
static void rules_mask_and_bias(random_case *rc) {
    rules_mask(rc);
    add_bias(rc, false);
}

/* Flat index of (b, h, i, j) in a broadcast array of shape s. */
static int64_t bcast_at(const int64_t s[4], int64_t b, int64_t h, int64_t i, int64_t j) {
    return (((s[0] > 1 ? b : 0) * s[1] + (s[1] > 1 ? h : 0)) * s[2] + (s[2] > 1 ? i : 0)) * s[3] + (s[3] > 1 ? j : 0);
}

/* ------------------------------------------------------------- poisons */

typedef enum { AT_Q, AT_K, AT_V, AT_KV, AT_BIAS } poison_at;
static const char *const at_names[] = {"q", "k", "v", "k+v", "bias"};

/* Where a non-finite value goes: batch b; query position i (q, bias); key
 * j (k, v, bias); head h (the query head for q, the kv head for k and v);
 * element e of the row. */
typedef struct poison {
    poison_at at;
    int64_t b, i, j, h, e;
} poison;

enum { MAX_POISONS = 4 };

/* Writes x at every poison of the list into rc. */
static void poison_apply(random_case *rc, const poison *ps, int n, float x) {
    const oracle_case *c = &rc->c;
    for (int t = 0; t < n; t++) {
        const poison *s = &ps[t];
        if (s->at == AT_Q) rc->q[((s->b * c->L + s->i) * c->Hq + s->h) * c->D + s->e] = x;
        if (s->at == AT_K || s->at == AT_KV) rc->k[((s->b * c->S + s->j) * c->Hkv + s->h) * c->D + s->e] = x;
        if (s->at == AT_V || s->at == AT_KV) rc->v[((s->b * c->S + s->j) * c->Hkv + s->h) * c->Dv + s->e] = x;
        if (s->at == AT_BIAS) rc->bias[bcast_at(c->bias_shape, s->b, 0, s->i, s->j)] = x;
    }
}

enum { READS_SCORES = 1, READS_VALUES = 2 };

/* reads[(b·Hq + h)·L + i]: how row (b, h, i) reads a poison: through its
 * scores (its q, a k or bias it sees) or through a value it sees. */
static void poison_readers(const random_case *rc, const poison *ps, int n, uint8_t *reads) {
    const oracle_case *c = &rc->c;
    const int64_t G = c->Hq / c->Hkv;
    memset(reads, 0, (size_t)(c->B * c->Hq * c->L));
    for (int64_t b = 0; b < c->B; b++)
        for (int64_t h = 0; h < c->Hq; h++)
            for (int64_t i = 0; i < c->L; i++) {
                uint8_t *r = &reads[(b * c->Hq + h) * c->L + i];
                bool sees_any = false;
                for (int64_t j = 0; j < c->S && !sees_any; j++) sees_any = oracle_visible(c, b, h, i, j);
                for (int t = 0; t < n; t++) {
                    const poison *s = &ps[t];
                    if (s->at == AT_Q && s->b == b && s->i == i && s->h == h && sees_any) *r |= READS_SCORES;
                    if (s->at == AT_BIAS && oracle_visible(c, b, h, i, s->j) &&
                        bcast_at(c->bias_shape, b, h, i, s->j) == bcast_at(c->bias_shape, s->b, 0, s->i, s->j))
                        *r |= READS_SCORES;
                    if ((s->at == AT_K || s->at == AT_V || s->at == AT_KV) && s->b == b && s->h == h / G &&
                        oracle_visible(c, b, h, i, s->j))
                        *r |= s->at == AT_V ? READS_VALUES : READS_SCORES;
                }
            }
}

/* One row of the table: shapes, rules, where the values go. */
typedef struct poison_case {
    const char *name;
    int64_t shape[7]; /* B, L, S, Hq, Hkv, D, Dv */
    rules_fn rules;
    poison poisons[MAX_POISONS];
    int n_poisons;
} poison_case;

#define PREFILL {2, 150, 200, 4, 2, 24, 20}
#define DECODE {2, 1, 3000, 4, 2, 24, 20}   /* rows path, keys split in 6 chunks */
#define STEP {1, 4, 2000, 4, 2, 24, 20}     /* rows path, ranges differ per row  */

static const poison_case poison_cases[] = {
    {"prefill causal: key 100 (rows 96-99 share its tile with rows that see it; rows < 96 skip it)",
     PREFILL, rules_causal, {{AT_KV, 0, 0, 100, 1, 3}, {AT_KV, 1, 0, 5, 0, 3}}, 2},
    {"prefill window: key 50 (after the diagonal of rows < 50, before the window of rows > 70)",
     PREFILL, rules_window, {{AT_KV, 0, 0, 50, 0, 1}}, 1},
    {"prefill key lengths 120, 170: key 130 (past batch 0's, seen in batch 1), key 185 (past both)",
     PREFILL, rules_key_lengths, {{AT_KV, 0, 0, 130, 0, 2}, {AT_KV, 1, 0, 130, 1, 2}, {AT_KV, 0, 0, 185, 1, 0}, {AT_KV, 1, 0, 185, 0, 0}}, 4},
    {"prefill mask: key 77 (hidden from even rows, in a visible tile), key 160 (a tile every row masks)",
     PREFILL, rules_mask, {{AT_KV, 0, 0, 77, 0, 1}, {AT_KV, 1, 0, 160, 1, 1}}, 2},
    {"prefill -inf bias: key 77 (even rows), key 160 (every row)",
     PREFILL, rules_bias, {{AT_KV, 0, 0, 77, 0, 1}, {AT_KV, 1, 0, 160, 1, 1}}, 2},
    {"prefill q: batch 1, row 37, head 1 (causal)", PREFILL, rules_causal, {{AT_Q, 1, 37, 0, 1, 2}}, 1},
    {"prefill k alone: key 60 (every row sees it)", PREFILL, NULL, {{AT_K, 0, 0, 60, 1, 0}}, 1},
    {"prefill v alone: key 60 (every row sees it)", PREFILL, NULL, {{AT_V, 0, 0, 60, 1, 0}}, 1},
    {"prefill bias: row 20 key 30 (visible), row 10 key 160 (masked)",
     PREFILL, rules_mask_and_bias, {{AT_BIAS, 0, 20, 30, 0, 0}, {AT_BIAS, 0, 10, 160, 0, 0}}, 2},
    {"decode mask: slot 1200 (an empty block), slot 2001 (empty in batch 0, used in batch 1)",
     DECODE, rules_mask, {{AT_KV, 0, 0, 1200, 0, 1}, {AT_KV, 1, 0, 1200, 1, 1}, {AT_KV, 0, 0, 2001, 1, 3}, {AT_KV, 1, 0, 2001, 0, 3}}, 4},
    {"decode -inf bias: slot 1200, slot 2001",
     DECODE, rules_bias, {{AT_KV, 0, 0, 1200, 0, 1}, {AT_KV, 1, 0, 1200, 1, 1}, {AT_KV, 0, 0, 2001, 1, 3}, {AT_KV, 1, 0, 2001, 0, 3}}, 4},
    {"decode key lengths 1800, 2550: key 2000 (past batch 0's), key 2700 (past both)",
     DECODE, rules_key_lengths, {{AT_KV, 0, 0, 2000, 0, 0}, {AT_KV, 1, 0, 2000, 0, 0}, {AT_KV, 0, 0, 2700, 1, 0}, {AT_KV, 1, 0, 2700, 1, 0}}, 4},
    {"decode q: batch 1, head 2", DECODE, NULL, {{AT_Q, 1, 0, 0, 2, 5}}, 1},
    {"decode k alone: key 2222", DECODE, NULL, {{AT_K, 0, 0, 2222, 0, 0}}, 1},
    {"decode v alone: key 2222", DECODE, NULL, {{AT_V, 0, 0, 2222, 0, 0}}, 1},
    {"decode bias: slot 1700 (used), slot 1100 (empty)",
     DECODE, rules_mask_and_bias, {{AT_BIAS, 0, 0, 1700, 0, 0}, {AT_BIAS, 1, 0, 1100, 0, 0}}, 2},
    {"kv-cache step of 4: key 1999 (seen by the last query only), key 1997",
     STEP, rules_lower_right, {{AT_KV, 0, 0, 1999, 0, 0}, {AT_KV, 0, 0, 1997, 1, 0}}, 2},
    {"L > S lower-right: q of row 5 (sees no key), of row 30 (sees keys), tile path",
     {1, 40, 20, 2, 1, 16, 8}, rules_lower_right, {{AT_Q, 0, 5, 0, 0, 0}, {AT_Q, 0, 30, 0, 1, 0}}, 2},
    {"L > S lower-right: q of row 0 (sees no key), rows path",
     {1, 3, 2, 2, 1, 16, 8}, rules_lower_right, {{AT_Q, 0, 0, 0, 1, 0}}, 1},
};
enum { POISON_CASES = sizeof poison_cases / sizeof poison_cases[0] };

static const float poison_values[] = {NAN, INFINITY, -INFINITY};
static const char *const value_names[] = {"NaN", "+Inf", "-Inf"};

/* The contract for one case, value and kernel run: `zeroed` is the problem
 * with zeros where `poisoned` holds the value. */
static void check_forward(const random_case *rc, const uint8_t *reads, const results *zeroed,
                          const results *poisoned, const char *label) {
    const oracle_case *c = &rc->c;
    for (int64_t b = 0; b < c->B; b++)
        for (int64_t h = 0; h < c->Hq; h++)
            for (int64_t i = 0; i < c->L; i++) {
                const int64_t row = (b * c->Hq + h) * c->L + i, o = ((b * c->L + i) * c->Hq + h) * c->Dv;
                const float *out_z = zeroed->out + o, *out_p = poisoned->out + o;
                const float *w_z = zeroed->w + row * c->S, *w_p = poisoned->w + row * c->S;
                const float lse_z = zeroed->lse[row], lse_p = poisoned->lse[row];
                if (!reads[row]) {
                    check(!memcmp(out_z, out_p, sizeof(float) * (size_t)c->Dv) && !memcmp(&lse_z, &lse_p, sizeof lse_z) &&
                              !memcmp(w_z, w_p, sizeof(float) * (size_t)c->S),
                          label, "row (b %lld, h %lld, i %lld) does not read the value but changed (lse %g -> %g, out[0] %g -> %g)",
                          (long long)b, (long long)h, (long long)i, lse_z, lse_p, out_z[0], out_p[0]);
                    continue;
                }
                check(!all_finite(out_p, c->Dv), label, "row (b %lld, h %lld, i %lld) reads it, yet its output is finite",
                      (long long)b, (long long)h, (long long)i);
                if (reads[row] & READS_SCORES)
                    check(!isfinite(lse_p) && !all_finite(w_p, c->S), label,
                          "row (b %lld, h %lld, i %lld) reads it in a score, yet lse %g%s", (long long)b, (long long)h,
                          (long long)i, lse_p, all_finite(w_p, c->S) ? " and its weights are finite" : "");
                else
                    check(isfinite(lse_p) && all_finite(w_p, c->S), label,
                          "row (b %lld, h %lld, i %lld) reads it in a value only, yet lse %g or a weight is not finite",
                          (long long)b, (long long)h, (long long)i, lse_p);
            }
}

/* The backward's share of the contract: dq rows as out rows; dk, dv of a
 * key no affected row sees as in the zeroed problem, and of a key one sees
 * not finite (dv only through scores: weights do not read v). */
static void check_backward(const random_case *rc, const uint8_t *reads, const results *zeroed,
                           const results *poisoned, const char *label) {
    const oracle_case *c = &rc->c;
    const int64_t G = c->Hq / c->Hkv;
    uint8_t *key_reads = calloc((size_t)(c->B * c->S * c->Hkv), 1); /* [B, S, Hkv]: as reads */
    for (int64_t b = 0; b < c->B; b++)
        for (int64_t h = 0; h < c->Hq; h++)
            for (int64_t i = 0; i < c->L; i++) {
                const int64_t row = (b * c->Hq + h) * c->L + i, at = ((b * c->L + i) * c->Hq + h) * c->D;
                if (!reads[row]) {
                    check(!memcmp(zeroed->dq + at, poisoned->dq + at, sizeof(float) * (size_t)c->D), label,
                          "dq of row (b %lld, h %lld, i %lld), which does not read the value, changed (%g -> %g)",
                          (long long)b, (long long)h, (long long)i, zeroed->dq[at], poisoned->dq[at]);
                    continue;
                }
                check(!all_finite(poisoned->dq + at, c->D), label, "dq of row (b %lld, h %lld, i %lld) is finite",
                      (long long)b, (long long)h, (long long)i);
                for (int64_t j = 0; j < c->S; j++)
                    if (oracle_visible(c, b, h, i, j)) key_reads[(b * c->S + j) * c->Hkv + h / G] |= reads[row];
            }
    for (int64_t key = 0; key < c->B * c->S * c->Hkv; key++) {
        const float *dk_z = zeroed->dk + key * c->D, *dk_p = poisoned->dk + key * c->D;
        const float *dv_z = zeroed->dv + key * c->Dv, *dv_p = poisoned->dv + key * c->Dv;
        const long long b = key / (c->S * c->Hkv), j = key / c->Hkv % c->S, g = key % c->Hkv;
        if (!key_reads[key]) {
            check(!memcmp(dk_z, dk_p, sizeof(float) * (size_t)c->D) && !memcmp(dv_z, dv_p, sizeof(float) * (size_t)c->Dv),
                  label, "dk/dv of key (b %lld, j %lld, g %lld), seen by no affected row, changed (dk[0] %g -> %g)", b, j,
                  g, dk_z[0], dk_p[0]);
            continue;
        }
        check(!all_finite(dk_p, c->D), label, "dk of key (b %lld, j %lld, g %lld) is finite", b, j, g);
        if (key_reads[key] & READS_SCORES)
            check(!all_finite(dv_p, c->Dv), label, "dv of key (b %lld, j %lld, g %lld) is finite", b, j, g);
    }
    free(key_reads);
}

/* Every case of the table with every value on every kernel: forward, and
 * backward when `backward`. */
static void poison_table(bool backward) {
    failures = 0;
    int checked = 0;
    for (int t = 0; t < POISON_CASES; t++) {
        const poison_case *pc = &poison_cases[t];
        for (int x = 0; x < 3; x++) {
            bool bias_only = true;
            for (int s = 0; s < pc->n_poisons; s++) bias_only &= pc->poisons[s].at == AT_BIAS;
            if (bias_only && poison_values[x] == -INFINITY) continue; /* a -inf bias hides: no poison */
            random_case zeroed, poisoned;
            problem_make(&zeroed, 1000 + (uint64_t)t, pc->shape, pc->rules);
            problem_make(&poisoned, 1000 + (uint64_t)t, pc->shape, pc->rules);
            poison_apply(&zeroed, pc->poisons, pc->n_poisons, 0.0f);
            poison_apply(&poisoned, pc->poisons, pc->n_poisons, poison_values[x]);
            const oracle_case *c = &zeroed.c;
            uint8_t *reads = malloc((size_t)(c->B * c->Hq * c->L));
            poison_readers(&poisoned, pc->poisons, pc->n_poisons, reads);
            float *dout = NULL;
            if (backward) {
                test_rng r;
                test_rng_seed(&r, 5);
                dout = malloc(sizeof(float) * (size_t)(c->B * c->L * c->Hq * c->Dv));
                test_fill_normal(&r, dout, c->B * c->L * c->Hq * c->Dv, 1.0);
            }
            for (int k = 0; k < kernel_runs(); k++) {
                attn_kernel kernel;
                char name[32], label[320];
                if (!select_run(k, &kernel, name, sizeof name)) continue;
                snprintf(label, sizeof label, "[%s] %s %s, %s in %s", name, backward ? "backward" : "forward",
                         pc->name, value_names[x], at_names[pc->poisons[0].at]);
                case_reports = 0;
                results z, p;
                run(&zeroed, dout, kernel, 0, &z);
                run(&poisoned, dout, kernel, 0, &p);
                if (backward)
                    check_backward(&poisoned, reads, &z, &p, label);
                else
                    check_forward(&poisoned, reads, &z, &p, label);
                results_free(&z);
                results_free(&p);
                checked++;
            }
            test_isa_restore();
            free(reads);
            free(dout);
            random_case_free(&zeroed);
            random_case_free(&poisoned);
        }
    }
    print_message("%d kernel runs, %d failed checks\n", checked, failures);
    assert_int_equal(failures, 0);
}

static void forward_poisons(void **state) {
    (void)state;
    poison_table(false);
}

static void backward_poisons(void **state) {
    (void)state;
    poison_table(true);
}

/* ------------------------------------------------------------ overflow */

/* Finite inputs whose scores overflow float32.  `make` builds the problem;
 * the oracle (long double) is the independent answer. */
typedef struct overflow_case {
    const char *name;
    int64_t shape[7];
    rules_fn rules;
    void (*make)(random_case *rc);
    bool forward_only; /* values near FLT_MAX: dp = dout·v then cancels beyond any kernel's double */
} overflow_case;

static void fill(float *x, int64_t n, float value) {
    for (int64_t e = 0; e < n; e++) x[e] = value;
}

static int64_t q_count(const oracle_case *c) { return c->B * c->L * c->Hq * c->D; }
static int64_t k_count(const oracle_case *c) { return c->B * c->S * c->Hkv * c->D; }
static int64_t v_count(const oracle_case *c) { return c->B * c->S * c->Hkv * c->Dv; }

/* q = k = 1e19 everywhere: every score is scale·D·1e38, beyond FLT_MAX in
 * fp32 for D = 8 (and in the backward's unscaled q·k for D = 4); all equal,
 * so the weights are uniform over the visible keys. */
static void make_equal_huge(random_case *rc) {
    fill(rc->q, q_count(&rc->c), 1e19f);
    fill(rc->k, k_count(&rc->c), 1e19f);
}
/* q = 1e19, k = -1e19: every score overflows to -inf in fp32. */
static void make_all_neg_overflow(random_case *rc) {
    fill(rc->q, q_count(&rc->c), 1e19f);
    fill(rc->k, k_count(&rc->c), -1e19f);
}
/* scale = 1e38 on N(0, 1) data: scores around ±1e38 · (a few). */
static void make_huge_scale(random_case *rc) { rc->c.scale = 1e38; }
/* A bias of FLT_MAX at key i % S of row i: log2(e)·FLT_MAX overflows; all
 * the weight goes to that key. */
static void make_bias_max(random_case *rc) {
    add_bias(rc, false);
    for (int64_t i = 0; i < rc->c.L; i++) rc->bias[i * rc->c.S + i % rc->c.S] = FLT_MAX;
}
/* A bias of -FLT_MAX on every key: -inf in base 2 in fp32, all visible. */
static void make_bias_min(random_case *rc) {
    add_bias(rc, false);
    fill(rc->bias, rc->c.bias_shape[0] * rc->c.bias_shape[1] * rc->c.bias_shape[2] * rc->c.bias_shape[3], -FLT_MAX);
}
/* Rows 3 and 17 hold q = (1e20, -1e20, ...) and key 7 k = (1e20, 1e20, ...),
 * the other keys 0 in those two elements: the score of key 7 for rows 3 and
 * 17 is an ordinary number, but its fp32 terms 1e40 - 1e40 overflow.  The
 * other rows see key 7 at scores near ±1e20. */
static void make_cancelling(random_case *rc) {
    const oracle_case *c = &rc->c;
    for (int64_t j = 0; j < c->S; j++) rc->k[j * c->D] = rc->k[j * c->D + 1] = j == 7 ? 1e20f : 0.0f;
    for (int64_t i = 3; i < c->L; i += 14) {
        rc->q[i * c->Hq * c->D] = 1e20f;
        rc->q[i * c->Hq * c->D + 1] = -1e20f;
    }
}
/* Values of 3e38: the fp32 weighted sum overflows before the division. */
static void make_huge_values(random_case *rc) { fill(rc->v, v_count(&rc->c), 3e38f); }

/* Values of 5e35 and queries near 0 (weights near uniform), S = 3000 split
 * in 6 chunks of 512 keys: each chunk's weighted sum (at most 512·5e35)
 * fits a float, the merged one does not. */
static void make_values_merge_overflow(random_case *rc) {
    fill(rc->v, v_count(&rc->c), 5e35f);
    for (int64_t e = 0; e < q_count(&rc->c); e++) rc->q[e] *= 0.01f;
}

static const overflow_case overflow_cases[] = {
    {"q = k = 1e19, D = 8, causal, prefill", {1, 40, 50, 2, 1, 8, 8}, rules_causal, make_equal_huge, false},
    {"q = k = 1e19, D = 4, prefill", {1, 40, 50, 2, 1, 4, 4}, NULL, make_equal_huge, false},
    {"q = k = 1e19, D = 8, decode split", {1, 1, 3000, 4, 2, 8, 8}, NULL, make_equal_huge, false},
    {"q = 1e19, k = -1e19 (all scores overflow to -inf), D = 8, prefill", {1, 40, 50, 2, 1, 8, 8}, rules_causal, make_all_neg_overflow,
     false},
    {"q = 1e19, k = -1e19, D = 8, decode split", {1, 1, 3000, 4, 2, 8, 8}, NULL, make_all_neg_overflow, false},
    {"scale 1e38, prefill", {1, 40, 50, 2, 1, 16, 8}, NULL, make_huge_scale, false},
    {"scale 1e38, decode split", {1, 1, 3000, 4, 2, 16, 8}, NULL, make_huge_scale, false},
    {"bias FLT_MAX at one key per row, prefill", {1, 40, 50, 2, 1, 16, 8}, NULL, make_bias_max, false},
    {"bias -FLT_MAX on every key, prefill", {1, 40, 50, 2, 1, 16, 8}, NULL, make_bias_min, false},
    {"bias -FLT_MAX on every key, decode", {1, 1, 700, 4, 2, 16, 8}, NULL, make_bias_min, false},
    {"cancelling terms beyond FLT_MAX (1e40 - 1e40 + x), prefill", {1, 40, 50, 2, 1, 16, 8}, NULL, make_cancelling,
     false},
    {"values 3e38 (the weighted sum overflows), prefill", {1, 40, 50, 2, 1, 16, 8}, NULL, make_huge_values, true},
    {"values 3e38, decode split", {1, 1, 3000, 4, 2, 16, 8}, NULL, make_huge_values, true},
    {"values 5e35, decode split (each chunk's sum fits a float, the merge's does not)", {1, 1, 3000, 4, 2, 16, 8},
     NULL, make_values_merge_overflow, true},
};
enum { OVERFLOW_CASES = sizeof overflow_cases / sizeof overflow_cases[0] };

static void overflow_make(random_case *rc, int t) {
    const overflow_case *oc = &overflow_cases[t];
    problem_make(rc, 2000 + (uint64_t)t, oc->shape, oc->rules);
    oc->make(rc);
}

/* Every kernel's forward against the oracle: outputs relative to the
 * largest value, weights absolute, lse relative to max(1, |lse|). */
static void overflow_forward(void **state) {
    (void)state;
    failures = 0;
    for (int t = 0; t < OVERFLOW_CASES; t++) {
        random_case rc;
        overflow_make(&rc, t);
        const oracle_case *c = &rc.c;
        const int64_t n_out = c->B * c->L * c->Hq * c->Dv, n_w = c->B * c->Hq * c->L * c->S, n_lse = c->B * c->Hq * c->L;
        double *want_out = malloc(sizeof(double) * (size_t)n_out), *want_w = malloc(sizeof(double) * (size_t)n_w),
               *want_lse = malloc(sizeof(double) * (size_t)n_lse);
        oracle_attention(c, rc.q, rc.k, rc.v, want_out, want_w, want_lse);
        const double out_scale = fmax(1.0, max_abs(want_out, n_out));
        for (int k = 0; k < kernel_runs(); k++) {
            attn_kernel kernel;
            char name[32], label[200];
            if (!select_run(k, &kernel, name, sizeof name)) continue;
            snprintf(label, sizeof label, "[%s] %s", name, overflow_cases[t].name);
            case_reports = 0;
            results got;
            run(&rc, NULL, kernel, 0, &got);
            double d_out = max_abs_diff(want_out, got.out, n_out), d_w = max_abs_diff(want_w, got.w, n_w), d_lse = 0;
            for (int64_t e = 0; e < n_lse; e++) {
                /* an lse beyond FLT_MAX (scale 1e38) is +inf in float, and must be */
                const float want = (float)want_lse[e];
                if (isinf(want) && want == got.lse[e]) continue;
                const double rel = fabs(want_lse[e] - (double)got.lse[e]) / fmax(1.0, fabs(want_lse[e]));
                d_lse = isnan(rel) ? INFINITY : fmax(d_lse, rel);
            }
            check(d_out <= OVERFLOW_OUT_REL_FAIL * out_scale && d_w <= OVERFLOW_WEIGHT_ABS_FAIL &&
                      d_lse <= OVERFLOW_LSE_REL_FAIL,
                  label, "against the oracle: out %.3g (of %.3g), weights %.3g, lse rel %.3g (out[0] %g, want %g)",
                  d_out, out_scale, d_w, d_lse, got.out[0], want_out[0]);
            results_free(&got);
        }
        test_isa_restore();
        free(want_out); free(want_w); free(want_lse);
        random_case_free(&rc);
    }
    assert_int_equal(failures, 0);
}

/* max |a - b| / max(1, max |a|) over n floats; a non-finite element on
 * either side counts as infinite. */
static double rel_diff(const float *a, const float *b, int64_t n) {
    double scale = 1, diff = 0;
    for (int64_t e = 0; e < n; e++) {
        if (!isfinite(a[e]) || !isfinite(b[e])) return INFINITY;
        scale = fmax(scale, fabs((double)a[e]));
        diff = fmax(diff, fabs((double)a[e] - (double)b[e]));
    }
    return diff / scale;
}

/* The reference's gradients for q = k = 1e19 without a mask (B = Hkv = 1)
 * against their closed form.  Every score is equal, p = 1/S, so with
 * ds_ij = (dot(dout_i, v_j) - dot(dout_i, mean v)) / S:
 *   dv_j = (1/S) sum_i dout_i,   dk_j = scale·1e19·sum_i ds_ij·(1, ..., 1),
 *   dq_i = scale·1e19·sum_j ds_ij·(1, ..., 1) = 0,
 * the last a sum of terms of size scale·1e19·|ds_ij| that cancels in double
 * only to its rounding. */
static void check_equal_huge_closed_form(const random_case *rc, const float *dout, const results *ref,
                                         const char *label) {
    const oracle_case *c = &rc->c;
    const int64_t rows = c->L * c->Hq, D = c->D, Dv = c->Dv, S = c->S;
    const double scale = 1.0 / sqrt((double)D);
    double *mean_v = calloc((size_t)Dv, sizeof(double)), *ds = malloc(sizeof(double) * (size_t)(rows * S));
    for (int64_t j = 0; j < S; j++)
        for (int64_t d = 0; d < Dv; d++) mean_v[d] += (double)rc->v[j * Dv + d] / (double)S;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < S; j++) {
            double dot = 0;
            for (int64_t d = 0; d < Dv; d++) dot += (double)dout[i * Dv + d] * ((double)rc->v[j * Dv + d] - mean_v[d]);
            ds[i * S + j] = dot / (double)S;
        }
    double worst_dv = 0, worst_dk = 0, dk_scale = 1, worst_dq = 0;
    for (int64_t j = 0; j < S; j++) {
        for (int64_t d = 0; d < Dv; d++) {
            double sum_dout = 0;
            for (int64_t i = 0; i < rows; i++) sum_dout += dout[i * Dv + d];
            worst_dv = fmax(worst_dv, fabs(ref->dv[j * Dv + d] - sum_dout / (double)S));
        }
        double sum = 0;
        for (int64_t i = 0; i < rows; i++) sum += ds[i * S + j];
        const double want = scale * 1e19 * sum;
        dk_scale = fmax(dk_scale, fabs(want));
        for (int64_t d = 0; d < D; d++) worst_dk = fmax(worst_dk, fabs(ref->dk[j * D + d] - want));
    }
    for (int64_t i = 0; i < rows; i++) {
        double terms = 0;
        for (int64_t j = 0; j < S; j++) terms += scale * 1e19 * fabs(ds[i * S + j]);
        for (int64_t d = 0; d < D; d++)
            worst_dq = fmax(worst_dq, fabs(ref->dq[i * D + d]) / fmax(1.0, terms));
    }
    check(worst_dv <= OVERFLOW_GRAD_REL_FAIL && worst_dk <= OVERFLOW_GRAD_REL_FAIL * dk_scale &&
              worst_dq <= OVERFLOW_CANCEL_REL_FAIL,
          label, "[ref] closed form: dv %.3g, dk %.3g (of %.3g), dq %.3g of its terms", worst_dv, worst_dk, dk_scale,
          worst_dq);
    free(mean_v);
    free(ds);
}

/* The flash backward against the reference on the overflow cases (both
 * finite, within the usual tolerance), and the reference against a closed
 * form where there is one. */
static void overflow_backward(void **state) {
    (void)state;
    failures = 0;
    for (int t = 0; t < OVERFLOW_CASES; t++) {
        if (overflow_cases[t].forward_only) continue;
        random_case rc;
        overflow_make(&rc, t);
        const oracle_case *c = &rc.c;
        const int64_t n_out = c->B * c->L * c->Hq * c->Dv;
        float *dout = malloc(sizeof(float) * (size_t)n_out);
        test_rng r;
        test_rng_seed(&r, 6);
        test_fill_normal(&r, dout, n_out, 1.0);
        results ref;
        test_isa_restore();
        run(&rc, dout, ATTN_KERNEL_REF, 0, &ref);
        case_reports = 0;
        check(all_finite(ref.dq, q_count(c)) && all_finite(ref.dk, k_count(c)) && all_finite(ref.dv, v_count(c)),
              overflow_cases[t].name, "[ref] a gradient is not finite");
        if (overflow_cases[t].make == make_equal_huge && !rc.c.causal && c->B == 1 && c->Hkv == 1)
            check_equal_huge_closed_form(&rc, dout, &ref, overflow_cases[t].name);
        for (int k = 1; k < kernel_runs(); k++) {
            attn_kernel kernel;
            char name[32], label[200];
            if (!select_run(k, &kernel, name, sizeof name)) continue;
            snprintf(label, sizeof label, "[%s] backward %s", name, overflow_cases[t].name);
            case_reports = 0;
            results got;
            run(&rc, dout, kernel, 0, &got);
            const double d_q = rel_diff(ref.dq, got.dq, q_count(c)), d_k = rel_diff(ref.dk, got.dk, k_count(c)),
                         d_v = rel_diff(ref.dv, got.dv, v_count(c));
            check(d_q <= FLASH_GRAD_REL_FAIL && d_k <= FLASH_GRAD_REL_FAIL && d_v <= FLASH_GRAD_REL_FAIL, label,
                  "against the reference: dq %.3g, dk %.3g, dv %.3g (dq[0] %g, want %g)", d_q, d_k, d_v, got.dq[0],
                  ref.dq[0]);
            results_free(&got);
        }
        test_isa_restore();
        results_free(&ref);
        free(dout);
        random_case_free(&rc);
    }
    assert_int_equal(failures, 0);
}

/* ---------------------------------------------------------- determinism */

/* Rows on the exact path (a NaN query, a NaN value, scores beyond FLT_MAX)
 * among ordinary ones: they take it (the NaN rows are not finite, the
 * overflowing row is the reference's), and give the same bits for 1, 2 and
 * 3 threads, forward and backward, prefill and split decode, on every
 * instruction set. */
static void exact_path_deterministic(void **state) {
    (void)state;
    static const int64_t shapes[][7] = {{2, 150, 200, 4, 2, 24, 20}, {2, 1, 3000, 4, 2, 24, 20}};
    failures = 0;
    for (int s = 0; s < 2; s++) {
        random_case rc;
        problem_make(&rc, 3000 + (uint64_t)s, shapes[s], rules_mask_and_bias);
        const oracle_case *c = &rc.c;
        rc.q[3] = NAN;                               /* row (0, 0, 0)                 */
        rc.v[(c->S / 2 * c->Hkv) * c->Dv + 1] = NAN; /* key S/2 of batch 0, kv head 0 */
        for (int64_t e = 0; e < c->D; e++)           /* the last row's scores overflow (its lse is +inf) */
            rc.q[(c->B * c->L * c->Hq - 1) * c->D + e] = e % 2 ? -3e38f : 3e38f;
        const int64_t n_out = c->B * c->L * c->Hq * c->Dv;
        float *dout = malloc(sizeof(float) * (size_t)n_out);
        test_rng r;
        test_rng_seed(&r, 7);
        test_fill_normal(&r, dout, n_out, 1.0);
        const int64_t last = c->B * c->L * c->Hq - 1; /* the overflowing row, as (b, i, h) = out row */
        const int64_t last_lse = ((c->B - 1) * c->Hq + c->Hq - 1) * c->L + c->L - 1;
        results ref;
        test_isa_restore();
        run(&rc, dout, ATTN_KERNEL_REF, 1, &ref);
        for (int k = 1; k < kernel_runs(); k++) {
            attn_kernel kernel;
            char name[32];
            if (!select_run(k, &kernel, name, sizeof name)) continue;
            results one;
            run(&rc, dout, kernel, 1, &one);
            case_reports = 0;
            check(!isfinite(one.lse[0]) && !isfinite(one.out[0]) && !all_finite(one.dq, c->D), name,
                  "shape %d: the NaN query's row is finite (lse %g)", s, one.lse[0]);
            check(!memcmp(one.out + last * c->Dv, ref.out + last * c->Dv, sizeof(float) * (size_t)c->Dv) &&
                      one.lse[last_lse] == ref.lse[last_lse],
                  name, "shape %d: the overflowing row is not the reference's (lse %g, want %g)", s, one.lse[last_lse],
                  ref.lse[last_lse]);
            for (int threads = 2; threads <= 3; threads++) {
                results many;
                run(&rc, dout, kernel, threads, &many);
                case_reports = 0;
                check(!memcmp(one.out, many.out, sizeof(float) * (size_t)n_out) &&
                          !memcmp(one.w, many.w, sizeof(float) * (size_t)(c->B * c->Hq * c->L * c->S)) &&
                          !memcmp(one.lse, many.lse, sizeof(float) * (size_t)(c->B * c->Hq * c->L)) &&
                          !memcmp(one.dq, many.dq, sizeof(float) * (size_t)q_count(c)) &&
                          !memcmp(one.dk, many.dk, sizeof(float) * (size_t)k_count(c)) &&
                          !memcmp(one.dv, many.dv, sizeof(float) * (size_t)v_count(c)),
                      name, "shape %d: %d threads differ from 1 thread", s, threads);
                results_free(&many);
            }
            results_free(&one);
        }
        test_isa_restore();
        results_free(&ref);
        free(dout);
        random_case_free(&rc);
    }
    assert_int_equal(failures, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(forward_poisons),
        cmocka_unit_test(backward_poisons),
        cmocka_unit_test(overflow_forward),
        cmocka_unit_test(overflow_backward),
        cmocka_unit_test(exact_path_deterministic),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
