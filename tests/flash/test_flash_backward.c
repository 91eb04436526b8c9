/*
 * test_grad_flash.c — the flash backward against the reference backward on
 * a randomized sweep of odd sizes (lengths around and across the 64-wide
 * tiles, widths that are not multiples of 16), every mask kind, group ratios
 * 1, 2, 4, cross-attention and Dv != D; on every instruction set this CPU
 * has; and bit-identical gradients for 1, 2 and 3 threads.
 */
#include "oracle.h"
#include "tolerances.h"

#include "flash/flash.h"
#include "isa_list.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double worst_seen;

/* max |ref - fast| / max(1, max |ref|) over n elements; NaN counts as infinite. */
static double rel_diff(const float *ref, const float *fast, int64_t n) {
    double scale = 1, diff = 0;
    for (int64_t e = 0; e < n; e++) {
        if (isnan(fast[e]) || isnan(ref[e])) return INFINITY;
        scale = fmax(scale, fabs((double)ref[e]));
        diff = fmax(diff, fabs((double)ref[e] - (double)fast[e]));
    }
    return diff / scale;
}

/* The gradients of one case, by one kernel and thread count. */
typedef struct grads {
    float *dq, *dk, *dv;
} grads;

static void run_backward(random_case *rc, const float *out, const float *lse, const float *dout,
                         attn_kernel kernel, int threads, grads *g, const char *label) {
    const oracle_case *c = &rc->c;
    attn_tensor q = attn_tensor_4d(rc->q, c->B, c->L, c->Hq, c->D), k = attn_tensor_4d(rc->k, c->B, c->S, c->Hkv, c->D),
                v = attn_tensor_4d(rc->v, c->B, c->S, c->Hkv, c->Dv),
                o = attn_tensor_4d((float *)out, c->B, c->L, c->Hq, c->Dv),
                dot = attn_tensor_4d((float *)dout, c->B, c->L, c->Hq, c->Dv),
                dq = attn_tensor_4d(g->dq, c->B, c->L, c->Hq, c->D), dk = attn_tensor_4d(g->dk, c->B, c->S, c->Hkv, c->D),
                dv = attn_tensor_4d(g->dv, c->B, c->S, c->Hkv, c->Dv);
    attn_sdpa_options opt = random_case_options(rc);
    opt.kernel = kernel;
    opt.threads = threads;
    if (attn_sdpa_backward(&q, &k, &v, &opt, &o, lse, &dot, &dq, &dk, &dv))
        fail_msg("%s: backward (kernel %d, %d threads): %s", label, (int)kernel, threads, attn_last_error());
}

static void grads_alloc(grads *g, const oracle_case *c) {
    g->dq = malloc(sizeof(float) * (size_t)(c->B * c->L * c->Hq * c->D));
    g->dk = malloc(sizeof(float) * (size_t)(c->B * c->S * c->Hkv * c->D));
    g->dv = malloc(sizeof(float) * (size_t)(c->B * c->S * c->Hkv * c->Dv));
}

static void grads_free(grads *g) { free(g->dq); free(g->dk); free(g->dv); }

/* Flash (1, 2, 3 threads: identical bits) against the reference. */
static void check_case(random_case *rc, test_rng *r, const char *label) {
    const oracle_case *c = &rc->c;
    const int64_t nq = c->B * c->L * c->Hq * c->D, nk = c->B * c->S * c->Hkv * c->D, nv = c->B * c->S * c->Hkv * c->Dv,
                  no = c->B * c->L * c->Hq * c->Dv;
    float *out = malloc(sizeof(float) * (size_t)no), *dout = malloc(sizeof(float) * (size_t)no),
          *lse = malloc(sizeof(float) * (size_t)(c->B * c->Hq * c->L));
    test_fill_normal(r, dout, no, 1.0);
    attn_tensor q = attn_tensor_4d(rc->q, c->B, c->L, c->Hq, c->D), k = attn_tensor_4d(rc->k, c->B, c->S, c->Hkv, c->D),
                v = attn_tensor_4d(rc->v, c->B, c->S, c->Hkv, c->Dv), o = attn_tensor_4d(out, c->B, c->L, c->Hq, c->Dv);
    attn_sdpa_options opt = random_case_options(rc);
    if (attn_sdpa_forward(&q, &k, &v, &opt, &o, NULL, lse)) fail_msg("%s: forward: %s", label, attn_last_error());

    grads ref, fast[3];
    grads_alloc(&ref, c);
    run_backward(rc, out, lse, dout, ATTN_KERNEL_REF, 1, &ref, label);
    for (int t = 0; t < 3; t++) {
        grads_alloc(&fast[t], c);
        run_backward(rc, out, lse, dout, ATTN_KERNEL_FLASH, t + 1, &fast[t], label);
    }
    double d_q = rel_diff(ref.dq, fast[0].dq, nq), d_k = rel_diff(ref.dk, fast[0].dk, nk),
           d_v = rel_diff(ref.dv, fast[0].dv, nv);
    double worst = fmax(d_q, fmax(d_k, d_v));
    if (!(worst <= FLASH_GRAD_REL_FAIL))
        fail_msg("%s: flash vs reference, relative max diff dq %.3g dk %.3g dv %.3g", label, d_q, d_k, d_v);
    if (worst > FLASH_GRAD_REL_WARN) print_message("warning: %s: relative diff %.3g (q %.3g k %.3g v %.3g)\n", label, worst, d_q, d_k, d_v);
    if (worst > worst_seen) worst_seen = worst;
    for (int t = 1; t < 3; t++) {
        if (memcmp(fast[0].dq, fast[t].dq, sizeof(float) * (size_t)nq) ||
            memcmp(fast[0].dk, fast[t].dk, sizeof(float) * (size_t)nk) ||
            memcmp(fast[0].dv, fast[t].dv, sizeof(float) * (size_t)nv))
            fail_msg("%s: %d threads give different bits than 1 thread", label, t + 1);
    }
    grads_free(&ref);
    for (int t = 0; t < 3; t++) grads_free(&fast[t]);
    free(out); free(dout); free(lse);
}

/* The sweep on the instruction set currently selected: every case, or one
 * in `stride` (the other instruction sets, to keep the test short under
 * sanitizers). */
static void sweep(const char *isa, int stride) {
    static const int64_t lens[] = {1, 3, 17, 64, 65, 130};
    static const int64_t widths[] = {1, 7, 16, 40, 80};
    static const int64_t ratios[] = {1, 2, 4};
    test_rng r;
    test_rng_seed(&r, 4040);
    int cases = 0;
    worst_seen = 0;
    for (int li = 0; li < 6; li++)
        for (int si = 0; si < 6; si++)
            for (int gi = 0; gi < 3; gi++) {
                const int64_t L = lens[li], S = lens[si], D = widths[(li + si + gi) % 5];
                const int64_t Hkv = 1 + test_rng_range(&r, 2), Hq = Hkv * ratios[gi], B = 1 + 2 * test_rng_range(&r, 2);
                const int64_t Dv = test_rng_range(&r, 2) ? D : 1 + test_rng_range(&r, 33);
                const enum mask_kind kind = (enum mask_kind)((li * 6 + si + gi * 5) % MASK_KIND_COUNT);
                if ((li * 18 + si * 3 + gi) % stride) continue;
                random_case rc;
                random_case_make(&rc, &r, B, L, S, Hq, Hkv, D, Dv, kind);
                char label[200];
                snprintf(label, sizeof label, "%s B=%lld L=%lld S=%lld Hq=%lld Hkv=%lld D=%lld Dv=%lld mask=%s", isa,
                         (long long)B, (long long)L, (long long)S, (long long)Hq, (long long)Hkv, (long long)D,
                         (long long)Dv, mask_kind_names[kind]);
                check_case(&rc, &r, label);
                random_case_free(&rc);
                cases++;
            }
    print_message("%s: %d cases, worst relative difference %.3g\n", isa, cases, worst_seen);
}

/* Every instruction set this CPU has (the library's registry, each forced):
 * the full sweep on the one chosen automatically, a third of it on the
 * others. */
static void every_isa(void **state) {
    (void)state;
    const int best = attn__isa_chosen();
    for (int i = 0; i < attn__isa_count(); i++) {
        if (!test_isa_use(i)) {
            print_message("%s: not supported here, skipped\n", attn__isa_name(i));
            continue;
        }
        sweep(attn__isa_name(i), i == best ? 1 : 3);
    }
    test_isa_restore();
}

/* Every mask kind on shapes that span several tiles and several key chunks
 * of one unit (B = 1, Hkv = 1), so the dq partials are reduced. */
static void every_mask_many_chunks(void **state) {
    (void)state;
    test_rng r;
    test_rng_seed(&r, 4041);
    static const int64_t shapes[][2] = {{200, 333}, {333, 200}, {97, 520}};
    for (int kind = 0; kind < MASK_KIND_COUNT; kind++)
        for (int s = 0; s < 3; s++) {
            random_case rc;
            random_case_make(&rc, &r, 1, shapes[s][0], shapes[s][1], 2, 1, 24, 40, (enum mask_kind)kind);
            char label[120];
            snprintf(label, sizeof label, "chunks mask=%s L=%lld S=%lld", mask_kind_names[kind], (long long)shapes[s][0],
                     (long long)shapes[s][1]);
            check_case(&rc, &r, label);
            random_case_free(&rc);
        }
    print_message("worst relative difference %.3g\n", worst_seen);
}

/* A partial budget too small for even one chunk: one chunk per unit, one
 * unit per wave, still equal to the reference and the same for every thread
 * count. */
static void many_waves(void **state) {
    (void)state;
    test_rng r;
    test_rng_seed(&r, 4043);
    attn__flash_backward_set_partial_budget(1);
    for (int kind = 0; kind < MASK_KIND_COUNT; kind += 3) {
        random_case rc;
        random_case_make(&rc, &r, 3, 150, 140, 4, 2, 20, 12, (enum mask_kind)kind);
        char label[80];
        snprintf(label, sizeof label, "waves mask=%s", mask_kind_names[kind]);
        check_case(&rc, &r, label);
        random_case_free(&rc);
    }
    attn__flash_backward_set_partial_budget(0);
}

/* Without out and lse the forward is recomputed: the same bits. */
static void recomputed_forward(void **state) {
    (void)state;
    test_rng r;
    test_rng_seed(&r, 4042);
    random_case rc;
    random_case_make(&rc, &r, 2, 70, 90, 4, 2, 33, 20, MASK_CAUSAL);
    const oracle_case *c = &rc.c;
    const int64_t no = c->B * c->L * c->Hq * c->Dv, nq = c->B * c->L * c->Hq * c->D;
    float *out = malloc(sizeof(float) * (size_t)no), *dout = malloc(sizeof(float) * (size_t)no),
          *lse = malloc(sizeof(float) * (size_t)(c->B * c->Hq * c->L));
    test_fill_normal(&r, dout, no, 1.0);
    attn_tensor q = attn_tensor_4d(rc.q, c->B, c->L, c->Hq, c->D), k = attn_tensor_4d(rc.k, c->B, c->S, c->Hkv, c->D),
                v = attn_tensor_4d(rc.v, c->B, c->S, c->Hkv, c->Dv), o = attn_tensor_4d(out, c->B, c->L, c->Hq, c->Dv),
                dot = attn_tensor_4d(dout, c->B, c->L, c->Hq, c->Dv);
    attn_sdpa_options opt = random_case_options(&rc);
    assert_int_equal(attn_sdpa_forward(&q, &k, &v, &opt, &o, NULL, lse), ATTN_OK);
    float *dq1 = malloc(sizeof(float) * (size_t)nq), *dq2 = malloc(sizeof(float) * (size_t)nq);
    attn_tensor t1 = attn_tensor_4d(dq1, c->B, c->L, c->Hq, c->D), t2 = attn_tensor_4d(dq2, c->B, c->L, c->Hq, c->D);
    assert_int_equal(attn_sdpa_backward(&q, &k, &v, &opt, &o, lse, &dot, &t1, NULL, NULL), ATTN_OK);
    assert_int_equal(attn_sdpa_backward(&q, &k, &v, &opt, NULL, NULL, &dot, &t2, NULL, NULL), ATTN_OK);
    assert_memory_equal(dq1, dq2, sizeof(float) * (size_t)nq);
    assert_string_equal(attn_sdpa_backward_kernel_name(&q, &k, &v, &opt), "flash");
    opt.kernel = ATTN_KERNEL_REF;
    assert_string_equal(attn_sdpa_backward_kernel_name(&q, &k, &v, &opt), "ref");
    free(out); free(dout); free(lse); free(dq1); free(dq2);
    random_case_free(&rc);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_isa),
        cmocka_unit_test(every_mask_many_chunks),
        cmocka_unit_test(many_waves),
        cmocka_unit_test(recomputed_forward),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
