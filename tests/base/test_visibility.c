/*
 * test_visibility.c — the visibility rules at the extremes of their
 * arguments.  Window sides near INT64_MAX and position offsets near the end
 * of a 2^63-long sequence overflowed signed arithmetic (issue 15: UBSan in
 * the key range and in the ring's planning); the results then depended on
 * the compiler.  Here every combination of extreme and ordinary values is
 * computed by the library (both kernels' weights, and attn_sdpa_flops) and
 * by a brute force in 128-bit integers written from docs/semantics.md:
 * key j is visible to query i when, at global positions qi = query_start + i
 * and kj = key_start + j,
 *   causal        kj <= qi + offset     offset = 0, or total_kv - total_q (lower-right)
 *   window        qi + offset - left <= kj <= qi + offset + right   (-1: no bound)
 *   key lengths   kj < key_lengths[b]
 * The sanitizer build runs this too, so an overflow is a failure.  The
 * hull of a run of rows (what ring attention skips work by) is checked
 * against the same arithmetic.
 */
#include "testutil.h"

#include "attn.h"
#include "base/problem.h"
#include "base/visibility.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* 128-bit integers (GCC and clang): no position sum can overflow them. */
__extension__ typedef __int128 wide;

enum { B = 2, L = 5, S = 7, D = 3 };

static bool visible(const attn_sdpa_options *o, int64_t b, int64_t i, int64_t j) {
    const wide total_q = o->total_len_q ? o->total_len_q : L, total_kv = o->total_len_kv ? o->total_len_kv : S;
    const wide qi = (wide)o->query_start + i, kj = (wide)o->key_start + j;
    const wide diagonal = qi + (o->align == ATTN_ALIGN_LOWER_RIGHT ? total_kv - total_q : 0);
    if (o->causal && kj > diagonal) return false;
    if (o->window && o->window_left >= 0 && kj < diagonal - o->window_left) return false;
    if (o->window && o->window_right >= 0 && kj > diagonal + o->window_right) return false;
    if (o->key_lengths && kj >= o->key_lengths[b]) return false;
    return true;
}

static wide wide_min(wide a, wide b) { return a < b ? a : b; }
static wide wide_max(wide a, wide b) { return a > b ? a : b; }

/* visibility_rows_key_range for every run of rows: it holds every
 * key a row of the run sees, and it is the first row's start and the last
 * row's end (each rule's bounds grow with the row), within [0, S]. */
static void check_rows_hull(const attn_sdpa_options *o, const attn_tensor *q, const attn_tensor *k) {
    sdpa_problem p;
    if (attn__problem_init(&p, q, k, NULL, NULL, o, PROBLEM_SHAPES_ONLY)) fail_msg("%s", attn_last_error());
    const wide total_q = o->total_len_q ? o->total_len_q : L, total_kv = o->total_len_kv ? o->total_len_kv : S;
    const wide offset = (o->align == ATTN_ALIGN_LOWER_RIGHT ? total_kv - total_q : 0) + o->query_start - o->key_start;
    for (int64_t b = 0; b < B; b++)
        for (int64_t first = 0; first < L; first++)
            for (int64_t n = 1; first + n <= L; n++) {
                int64_t begin, end;
                visibility_rows_key_range(&p, b, first, n, &begin, &end);
                const wide d_first = first + offset, d_last = first + n - 1 + offset;
                wide lo = 0, hi = S;
                if (o->causal) hi = wide_min(hi, d_last + 1);
                if (o->window && o->window_left >= 0) lo = wide_max(lo, d_first - o->window_left);
                if (o->window && o->window_right >= 0) hi = wide_min(hi, d_last + o->window_right + 1);
                if (o->key_lengths) hi = wide_min(hi, (wide)o->key_lengths[b] - o->key_start);
                if (hi < lo) hi = lo;
                if (lo > S) lo = hi = S;
                if (begin != lo || end != hi)
                    fail_msg("rows [%lld, %lld) of batch %lld: keys [%lld, %lld), want [%lld, %lld)", (long long)first,
                             (long long)(first + n), (long long)b, (long long)begin, (long long)end, (long long)lo,
                             (long long)hi);
                for (int64_t i = first; i < first + n; i++)
                    for (int64_t j = 0; j < S; j++)
                        if (visible(o, b, i, j) && (j < begin || j >= end))
                            fail_msg("rows [%lld, %lld): key %lld of row %lld is visible, outside [%lld, %lld)",
                                     (long long)first, (long long)(first + n), (long long)j, (long long)i,
                                     (long long)begin, (long long)end);
            }
}

static void extreme_windows_and_offsets(void **state) {
    (void)state;
    float q[B * L * D], k[B * S * D], v[B * S * D], out[B * L * D], w[B * L * S];
    test_rng r;
    test_rng_seed(&r, 99);
    test_fill_normal(&r, q, B * L * D, 1.0);
    test_fill_normal(&r, k, B * S * D, 1.0);
    test_fill_normal(&r, v, B * S * D, 1.0);
    attn_tensor qt = attn_tensor_4d(q, B, L, 1, D), kt = attn_tensor_4d(k, B, S, 1, D),
                vt = attn_tensor_4d(v, B, S, 1, D), ot = attn_tensor_4d(out, B, L, 1, D);
    const int64_t big = INT64_MAX;
    const int64_t sides[] = {-1, 0, 1, 3, S, big / 2, big - 1, big};
    /* Where the rows sit: the whole sequence, late in a long one, at the very end of the longest. */
    const int64_t placements[][4] = {{0, 0, 0, 0},
                                     {1000, 40, 2000, 100},
                                     {big - L, big - S, big, big},
                                     {0, big - S, L, big},
                                     {big - L, 0, big, S}};
    int cases = 0;
    for (size_t pl = 0; pl < sizeof placements / sizeof placements[0]; pl++)
        for (int flags = 0; flags < 8; flags++)
            for (size_t a = 0; a < sizeof sides / sizeof sides[0]; a++)
                for (size_t c = 0; c < sizeof sides / sizeof sides[0]; c++) {
                    attn_sdpa_options o = ATTN_SDPA_OPTIONS_INIT;
                    o.query_start = placements[pl][0];
                    o.key_start = placements[pl][1];
                    o.total_len_q = placements[pl][2];
                    o.total_len_kv = placements[pl][3];
                    o.causal = flags & 1;
                    o.align = flags & 2 ? ATTN_ALIGN_LOWER_RIGHT : ATTN_ALIGN_TOP_LEFT;
                    o.window = 1;
                    o.window_left = sides[a];
                    o.window_right = sides[c];
                    int64_t lengths[B] = {o.key_start + S / 2, o.total_len_kv ? o.total_len_kv : S};
                    if (flags & 4) o.key_lengths = lengths;
                    double want_pairs = 0;
                    for (int64_t b = 0; b < B; b++)
                        for (int64_t i = 0; i < L; i++)
                            for (int64_t j = 0; j < S; j++) want_pairs += visible(&o, b, i, j);
                    check_rows_hull(&o, &qt, &kt);
                    double flops = -1;
                    assert_int_equal(attn_sdpa_flops(&qt, &kt, &vt, &o, &flops), ATTN_OK);
                    if (flops != 4.0 * D * want_pairs)
                        fail_msg("placement %zu flags %d window (%lld, %lld): %g FLOPs, want %g", pl, flags,
                                 (long long)o.window_left, (long long)o.window_right, flops, 4.0 * D * want_pairs);
                    for (int kernel = ATTN_KERNEL_REF; kernel <= ATTN_KERNEL_FLASH; kernel++) {
                        o.kernel = (attn_kernel)kernel;
                        if (attn_sdpa_forward(&qt, &kt, &vt, &o, &ot, w, NULL))
                            fail_msg("placement %zu flags %d: %s", pl, flags, attn_last_error());
                        for (int64_t b = 0; b < B; b++)
                            for (int64_t i = 0; i < L; i++)
                                for (int64_t j = 0; j < S; j++) {
                                    const bool seen = w[(b * L + i) * S + j] > 0.0f;
                                    if (seen != visible(&o, b, i, j))
                                        fail_msg("%s, placement %zu flags %d window (%lld, %lld): key %lld of "
                                                 "query %lld (batch %lld) is %s",
                                                 kernel == ATTN_KERNEL_REF ? "ref" : "flash", pl, flags,
                                                 (long long)o.window_left, (long long)o.window_right, (long long)j,
                                                 (long long)i, (long long)b, seen ? "visible" : "hidden");
                                }
                    }
                    cases++;
                }
    print_message("%d cases, both kernels, the FLOP count and the rows' hull against 128-bit arithmetic\n", cases);
}

/* Placements that do not fit are refused with a message, whatever the
 * sizes: no sum in the checks or in the message may overflow. */
static void placements_that_do_not_fit_are_refused(void **state) {
    (void)state;
    float x[L * D] = {0};
    attn_tensor qt = attn_tensor_2d(x, L, D), kt = attn_tensor_2d(x, L, D);
    attn_sdpa_options o = ATTN_SDPA_OPTIONS_INIT;
    o.query_start = INT64_MAX;
    o.total_len_q = INT64_MAX;
    double flops;
    assert_int_equal(attn_sdpa_flops(&qt, &kt, &kt, &o, &flops), ATTN_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "do not fit"));
    o = (attn_sdpa_options)ATTN_SDPA_OPTIONS_INIT;
    o.key_start = INT64_MAX - 1;
    assert_int_equal(attn_sdpa_flops(&qt, &kt, &kt, &o, &flops), ATTN_ERR_INVALID_ARGUMENT);
    o = (attn_sdpa_options)ATTN_SDPA_OPTIONS_INIT;
    o.window = 1;
    o.window_left = INT64_MIN;
    assert_int_equal(attn_sdpa_flops(&qt, &kt, &kt, &o, &flops), ATTN_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "window"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(extreme_windows_and_offsets),
        cmocka_unit_test(placements_that_do_not_fit_are_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
