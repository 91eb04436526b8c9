/*
 * ggml_compare.c — attn's flash forward against ggml's flash_attn_ext (its
 * CPU backend) on the same inputs, in one process, interleaved: issue 14's
 * "≥ 2× ggml's flash_attn_ext on prefill".  Built and run by
 * bench/ggml_compare.sh, which builds ggml from the llama.cpp sources that
 * the llama-cpp-python package on the Python package index carries.
 *
 *   ggml_compare L HKV D CAUSAL THREADS ROUNDS [KV]
 *
 * q [1, L, 16, D], k and v [1, L, HKV, D] (S = L), uniform in [-0.5, 0.5)
 * from a fixed seed, scale 1/sqrt(D); causal: top-left (query i sees keys
 * <= i), which ggml gets as a float16 mask [S, L] of 0 and -inf.  KV: the
 * element type ggml's K and V are stored in, f32 (default: what attn reads
 * here) or f16 (llama.cpp's default cache type; attn still reads float32).
 * ggml reads attn's [L, H, D] arrays through permuted views, as llama.cpp
 * passes its own (rows contiguous, which is all flash_attn_ext asks).
 *
 * Each round times one call of each, after one warm-up call of each, attn
 * first; prints a line per round and then the medians, GFLOP/s counted on
 * the visible pairs (4·Hq·pairs·D, attn bench's convention) and the
 * largest difference between the two outputs (a check that both computed
 * the same attention: float32 rounding, and float16 K/V's where asked).
 */
#include "attn.h"

#include "ggml-cpu.h"
#include "ggml.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_timing.h"

static double now_ms(void) { return bench_wall_seconds() * 1e3; }

/* A ggml view [D, len, heads] of a [len, heads, D] array stored in t (a
 * [D, heads, len] tensor): flash_attn_ext's operand layout. */
static struct ggml_tensor *heads_view(struct ggml_context *ctx, struct ggml_tensor *t) {
    return ggml_permute(ctx, t, 0, 2, 1, 3);
}

int main(int argc, char **argv) {
    if (argc < 7) {
        fprintf(stderr, "usage: %s L HKV D CAUSAL THREADS ROUNDS [f32|f16]\n", argv[0]);
        return 2;
    }
    const int64_t len = atoll(argv[1]), heads_kv = atoll(argv[2]), dim = atoll(argv[3]), heads_q = 16;
    const int causal = atoi(argv[4]), threads = atoi(argv[5]), rounds = atoi(argv[6]);
    const int kv_f16 = argc > 7 && strcmp(argv[7], "f16") == 0;
    if (len < 1 || heads_kv < 1 || heads_q % heads_kv || dim < 1 || threads < 1 || rounds < 1) {
        fprintf(stderr, "ggml_compare: bad shape or counts\n");
        return 2;
    }
    const size_t n_q = (size_t)(len * heads_q * dim), n_kv = (size_t)(len * heads_kv * dim);

    /* ggml owns the inputs (attn reads the same memory through views). */
    const size_t kv_bytes = n_kv * (kv_f16 ? 2 : 4);
    const size_t mem = n_q * 4 * 2 + 2 * kv_bytes + (size_t)(len * len * 2) + 64 * ggml_tensor_overhead() +
                       ggml_graph_overhead() + ((size_t)64 << 20);
    struct ggml_init_params ip = {mem, NULL, false};
    struct ggml_context *ctx = ggml_init(ip);
    if (!ctx) {
        fprintf(stderr, "ggml_compare: ggml_init(%zu bytes) failed\n", mem);
        return 1;
    }
    const enum ggml_type kv_type = kv_f16 ? GGML_TYPE_F16 : GGML_TYPE_F32;
    struct ggml_tensor *gq = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, dim, heads_q, len);
    struct ggml_tensor *gk = ggml_new_tensor_3d(ctx, kv_type, dim, heads_kv, len);
    struct ggml_tensor *gv = ggml_new_tensor_3d(ctx, kv_type, dim, heads_kv, len);
    struct ggml_tensor *mask = NULL;
    float *q = gq->data, *k = malloc(n_kv * sizeof *k), *v = malloc(n_kv * sizeof *v);
    float *o_attn = malloc(n_q * sizeof *o_attn);
    double *t_attn = malloc((size_t)rounds * sizeof *t_attn), *t_ggml = malloc((size_t)rounds * sizeof *t_ggml);
    if (!k || !v || !o_attn || !t_attn || !t_ggml) return 1;
    unsigned seed = 1;
    bench_fill_uniform(q, n_q, &seed);
    bench_fill_uniform(k, n_kv, &seed);
    bench_fill_uniform(v, n_kv, &seed);
    if (kv_f16) {
        ggml_fp32_to_fp16_row(k, gk->data, (int64_t)n_kv);
        ggml_fp32_to_fp16_row(v, gv->data, (int64_t)n_kv);
        /* attn gets the values ggml has: the float16 ones, widened */
        ggml_fp16_to_fp32_row(gk->data, k, (int64_t)n_kv);
        ggml_fp16_to_fp32_row(gv->data, v, (int64_t)n_kv);
    } else {
        memcpy(gk->data, k, n_kv * sizeof *k);
        memcpy(gv->data, v, n_kv * sizeof *v);
    }
    if (causal) {
        mask = ggml_new_tensor_2d(ctx, GGML_TYPE_F16, len, len);
        ggml_fp16_t zero = ggml_fp32_to_fp16(0.0f), hidden = ggml_fp32_to_fp16(-INFINITY);
        ggml_fp16_t *m = mask->data;
        for (int64_t i = 0; i < len; i++)
            for (int64_t j = 0; j < len; j++) m[i * len + j] = j <= i ? zero : hidden;
    }
    const float scale = 1.0f / sqrtf((float)dim);
    struct ggml_tensor *go = ggml_flash_attn_ext(ctx, heads_view(ctx, gq), heads_view(ctx, gk), heads_view(ctx, gv),
                                                 mask, scale, 0.0f, 0.0f);
    struct ggml_cgraph *graph = ggml_new_graph(ctx);
    ggml_build_forward_expand(graph, go);

    attn_tensor tq = attn_tensor_4d(q, 1, len, heads_q, dim), tk = attn_tensor_4d(k, 1, len, heads_kv, dim);
    attn_tensor tv = attn_tensor_4d(v, 1, len, heads_kv, dim), to = attn_tensor_4d(o_attn, 1, len, heads_q, dim);
    attn_sdpa_options opt = ATTN_SDPA_OPTIONS_INIT;
    opt.kernel = ATTN_KERNEL_FLASH;
    opt.threads = threads;
    opt.causal = causal;

    for (int r = -1; r < rounds; r++) {
        double t0 = now_ms();
        if (attn_sdpa_forward(&tq, &tk, &tv, &opt, &to, NULL, NULL) != ATTN_OK) {
            fprintf(stderr, "ggml_compare: attn: %s\n", attn_last_error());
            return 1;
        }
        double t1 = now_ms();
        if (ggml_graph_compute_with_ctx(ctx, graph, threads) != GGML_STATUS_SUCCESS) {
            fprintf(stderr, "ggml_compare: ggml_graph_compute failed\n");
            return 1;
        }
        double t2 = now_ms();
        if (r < 0) continue; /* the warm-ups */
        t_attn[r] = t1 - t0;
        t_ggml[r] = t2 - t1;
        printf("round %d: attn %.2f ms, ggml %.2f ms, ggml / attn %.3f\n", r + 1, t_attn[r], t_ggml[r],
               t_ggml[r] / t_attn[r]);
    }

    /* go: [D, Hq, L] float32, the [L, Hq, D] layout of o_attn */
    const float *o_ggml = go->data;
    double diff = 0.0;
    for (size_t e = 0; e < n_q; e++) {
        double d = fabs((double)o_ggml[e] - (double)o_attn[e]);
        if (!(d <= diff)) diff = d; /* a NaN sticks */
    }
    double *ratio = malloc((size_t)rounds * sizeof *ratio);
    if (!ratio) return 1;
    for (int r = 0; r < rounds; r++) ratio[r] = t_ggml[r] / t_attn[r];
    qsort(ratio, (size_t)rounds, sizeof *ratio, bench_compare_doubles);
    qsort(t_attn, (size_t)rounds, sizeof *t_attn, bench_compare_doubles);
    qsort(t_ggml, (size_t)rounds, sizeof *t_ggml, bench_compare_doubles);
    const double pairs = causal ? (double)len * (double)(len + 1) / 2 : (double)len * (double)len;
    const double gflop = 4.0 * (double)heads_q * pairs * (double)dim * 1e-9;
    printf("L=S=%lld Hq=16 Hkv=%lld D=%lld %s, %d threads, ggml K/V %s: attn %.2f ms (%.1f GFLOP/s), ggml %.2f ms "
           "(%.1f GFLOP/s); ggml / attn median %.3f [%.3f-%.3f]; max |out diff| %.3g\n",
           (long long)len, (long long)heads_kv, (long long)dim, causal ? "causal" : "full", threads,
           kv_f16 ? "f16" : "f32", t_attn[rounds / 2], gflop / (t_attn[rounds / 2] * 1e-3), t_ggml[rounds / 2],
           gflop / (t_ggml[rounds / 2] * 1e-3), ratio[rounds / 2], ratio[0], ratio[rounds - 1], diff);
    ggml_free(ctx);
    free(k);
    free(v);
    free(o_attn);
    free(t_attn);
    free(t_ggml);
    free(ratio);
    return diff <= (kv_f16 ? 1e-2 : 1e-4) ? 0 : 3;
}
