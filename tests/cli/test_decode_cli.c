/*
 * test_decode_cli.c — `attn decode` as a user runs it: the outputs it
 * writes equal the library's full-sequence causal call (RoPE applied to
 * the whole of q and k by attn_rope_apply), for contiguous and paged
 * caches, chunked prefill, half-precision caches and RoPE; its usage and
 * data errors; and the cache rows of `attn bench`.
 *
 * Shapes: q [B, L, Hq, D]  k [B, L, Hkv, D]  v [B, L, Hkv, Dv]  o [B, L, Hq, Dv]
 * (B = 2, L = 70, Hq = 4, Hkv = 2, D = 16, Dv = 8; and a 2-D [L, D] stream).
 * Tolerances: tests/support/tolerances.h, CACHE_*.
 */
#include "cli_files.h"
#include "tolerances.h"

#include "attn_rope.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { B = 2, L = 70, HQ = 4, HKV = 2, D = 16, DV = 8 };

typedef struct decode_files {
    float q[B * L * HQ * D], k[B * L * HKV * D], v[B * L * HKV * DV];
} decode_files;

static void write_inputs(decode_files *f, uint64_t seed) {
    test_rng r;
    test_rng_seed(&r, seed);
    test_fill_normal(&r, f->q, B * L * HQ * D, 1.0);
    test_fill_normal(&r, f->k, B * L * HKV * D, 1.0);
    test_fill_normal(&r, f->v, B * L * HKV * DV, 1.0);
    const int64_t qs[4] = {B, L, HQ, D}, ks[4] = {B, L, HKV, D}, vs[4] = {B, L, HKV, DV};
    test_save_f32(test_path("q.npy"), 4, qs, f->q);
    test_save_f32(test_path("k.npy"), 4, ks, f->k);
    test_save_f32(test_path("v.npy"), 4, vs, f->v);
}

/* The library's answer: causal attention of the whole stream (RoPE, with
 * base theta, on all of q and k when theta > 0). */
static void full_call(decode_files *f, double theta, float *out) {
    attn_tensor q = attn_tensor_4d(f->q, B, L, HQ, D), k = attn_tensor_4d(f->k, B, L, HKV, D);
    attn_tensor v = attn_tensor_4d(f->v, B, L, HKV, DV), o = attn_tensor_4d(out, B, L, HQ, DV);
    if (theta > 0) {
        attn_rope_options rope = ATTN_ROPE_OPTIONS_INIT;
        rope.theta = theta;
        if (attn_rope_apply(&q, NULL, 0, &rope) || attn_rope_apply(&k, NULL, 0, &rope))
            fail_msg("rope: %s", attn_last_error());
    }
    attn_sdpa_options opt = ATTN_SDPA_OPTIONS_INIT;
    opt.causal = 1;
    if (attn_sdpa_forward(&q, &k, &v, &opt, &o, NULL, NULL)) fail_msg("full call: %s", attn_last_error());
}

/* Every way of running the cache writes the full call's outputs; the
 * float32 runs to float32 rounding, the half-precision ones (whose full
 * call reads rounded keys and values) pass the program's own proof. */
static void test_outputs_equal_full_call(void **state) {
    (void)state;
    static const struct {
        const char *flags;
        double theta; /* RoPE's base, 0 for none; -1: a half cache, the program's proof only */
    } runs[] = {
        {"", 0},
        {"--paged", 0},
        {"--paged --block-size 7 --prefill 40 --chunk 9", 0},
        {"--prefill 70 --chunk 64 --threads 2", 0},
        {"--rope", 10000},
        {"--paged --block-size 5 --rope --rope-theta 300 --prefill 33 --chunk 4", 300},
        {"--cache-dtype f16 --paged --rope", -1},
        {"--cache-dtype bf16 --prefill 20 --chunk 3", -1},
    };
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        decode_files *f = malloc(sizeof *f);
        write_inputs(f, 7 + i);
        char *output;
        int st = test_run_cli(&output, "decode -q %s -k %s -v %s -o %s %s", test_path("q.npy"), test_path("k.npy"),
                              test_path("v.npy"), test_path("o.npy"), runs[i].flags);
        if (st || !strstr(output, ": equal")) fail_msg("attn decode %s exited %d:\n%s", runs[i].flags, st, output);
        free(output);
        const int64_t os[4] = {B, L, HQ, DV};
        float *got = test_load_f32(test_path("o.npy"), 4, os);
        if (runs[i].theta >= 0) {
            float *want = malloc(sizeof(float) * B * L * HQ * DV);
            full_call(f, runs[i].theta, want);
            test_expect_close(runs[i].flags, want, got, B * L * HQ * DV, CACHE_OUT_REL_FAIL);
            free(want);
        }
        free(got);
        free(f);
    }
    /* A 2-D stream [L, D]: one sequence, one head; the output [L, D]. */
    float x[L * D];
    test_rng r;
    test_rng_seed(&r, 99);
    test_fill_normal(&r, x, L * D, 1.0);
    const int64_t s2[2] = {L, D};
    test_save_f32(test_path("x.npy"), 2, s2, x);
    char *output;
    int st = test_run_cli(&output, "decode -q %s -k %s -v %s -o %s --paged --quiet", test_path("x.npy"),
                          test_path("x.npy"), test_path("x.npy"), test_path("o2.npy"));
    if (st || output[0]) fail_msg("2-D stream, --quiet: exit %d, output '%s'", st, output);
    free(output);
    free(test_load_f32(test_path("o2.npy"), 2, s2));
}

/* 8-bit caches (--kv q8_0 | fp8, D and Dv multiples of 32): the program's
 * proof against the full call on the dequantized keys and values holds. */
static void test_eight_bit_caches(void **state) {
    (void)state;
    enum { L8 = 45, H8 = 2, D8 = 64 };
    float *x = malloc(sizeof(float) * L8 * H8 * D8);
    test_rng r;
    test_rng_seed(&r, 35);
    test_fill_normal(&r, x, L8 * H8 * D8, 1.0);
    const int64_t shape[3] = {L8, H8, D8};
    test_save_f32(test_path("x8.npy"), 3, shape, x);
    static const char *const runs[] = {"--kv q8_0", "--kv fp8 --paged --block-size 8 --prefill 20 --chunk 6",
                                       "--cache-dtype q8_0 --rope --threads 2"};
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        char *output;
        int st = test_run_cli(&output, "decode -q %s -k %s -v %s -o %s %s", test_path("x8.npy"), test_path("x8.npy"),
                              test_path("x8.npy"), test_path("o8.npy"), runs[i]);
        if (st || !strstr(output, ": equal")) fail_msg("attn decode %s exited %d:\n%s", runs[i], st, output);
        free(output);
        free(test_load_f32(test_path("o8.npy"), 3, shape));
    }
    free(x);
}

/* Usage errors exit 2, data errors 1, each naming what is wrong; nothing is written. */
static void test_errors(void **state) {
    (void)state;
    decode_files *f = malloc(sizeof *f);
    write_inputs(f, 3);
    static const struct {
        const char *flags;
        int status;
        const char *message;
    } cases[] = {
        {"--block-size 8", 2, "--block-size is for a paged cache"},
        {"--cache-dtype f8", 2, "--cache-dtype must be f32, f16, bf16, q8_0 or fp8"},
        {"--kv q8_0", 1, "a multiple of 32"}, /* D = 16 */
        {"--chunk 0", 2, "--chunk"},
        {"--rope-theta 100", 2, "--rope-theta needs --rope"},
        {"--paged --block-size x", 2, "--block-size"},
        {"--no-such-flag", 2, "--no-such-flag"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *output;
        int st = test_run_cli(&output, "decode -q %s -k %s -v %s -o %s %s", test_path("q.npy"), test_path("k.npy"),
                              test_path("v.npy"), test_path("bad.npy"), cases[i].flags);
        if (st != cases[i].status || !strstr(output, cases[i].message))
            fail_msg("attn decode %s: exit %d (want %d), output:\n%s", cases[i].flags, st, cases[i].status, output);
        free(output);
        assert_false(test_file_exists(test_path("bad.npy")));
    }
    char *output;
    /* Keys of another length than the queries: not one stream. */
    const int64_t short_k[4] = {B, L - 20, HKV, D};
    test_save_f32(test_path("short_k.npy"), 4, short_k, f->k);
    int st = test_run_cli(&output, "decode -q %s -k %s -v %s -o %s", test_path("q.npy"), test_path("short_k.npy"),
                          test_path("v.npy"), test_path("bad.npy"));
    if (st != 1 || !strstr(output, "do not make one stream")) fail_msg("mismatched k: exit %d:\n%s", st, output);
    free(output);
    assert_false(test_file_exists(test_path("bad.npy")));
    st = test_run_cli(&output, "decode -k %s -v %s", test_path("k.npy"), test_path("v.npy"));
    if (st != 2 || !strstr(output, "missing -q")) fail_msg("missing -q: exit %d:\n%s", st, output);
    free(output);
    st = test_run_cli(&output, "decode --help");
    if (st != 0 || !strstr(output, "usage: attn decode") || !strstr(output, "--block-size"))
        fail_msg("--help: exit %d:\n%s", st, output);
    free(output);
    free(f);
}

/* attn bench's cache rows run and print well-formed CSV rows (their
 * times are not checked: DESIGN.md §5). */
static void test_bench_rows(void **state) {
    (void)state;
    char *output;
    int st = test_run_cli(&output, "bench --csv --quick --threads 2 --filter 'cache S=4096 paged block=256,cache "
                                   "batched 8 seqs paged,cache S=4096 kv=bf16'");
    if (st) fail_msg("attn bench exited %d:\n%s", st, output);
    assert_non_null(strstr(output, "\ncache,cache S=4096 paged block=256,flash,"));
    assert_non_null(strstr(output, "\ncache,cache batched 8 seqs paged block=16,flash,"));
    assert_non_null(strstr(output, "\ncache,cache S=4096 kv=bf16 paged block=16,flash,"));
    assert_non_null(strstr(output, "\ncache,cache S=4096 kv=bf16 contiguous,flash,"));
    assert_null(strstr(output, ",error"));
    free(output);
    /* The layouts the rows say they time (the text table's segments
     * column, of the longest sequence's view): a single sequence in a comb,
     * every other block of the pool, so 4096 / 16 segments; the batch
     * appended side by side into a fresh pool, which keeps a sequence's
     * blocks together (its longest, 2048 rows in --quick, is 128 blocks). */
    st = test_run_cli(&output, "bench --quick --threads 2 --filter 'cache S=4096 paged block=16,cache batched 8 seqs "
                               "paged block=16'");
    if (st) fail_msg("attn bench exited %d:\n%s", st, output);
    long long comb = -1, batch = -1;
    for (char *line = strtok(output, "\n"); line; line = strtok(NULL, "\n")) {
        long long segments;
        if (sscanf(line, "cache S=4096 paged block=16 %*d %*d %*f %*f %*f%% %lld", &segments) == 1) comb = segments;
        if (sscanf(line, "cache batched 8 seqs paged block=16 %*d %*d %*f %*f %*f%% %lld", &segments) == 1)
            batch = segments;
    }
    assert_int_equal(comb, 4096 / 16);
    assert_true(batch >= 1 && batch <= 128 / 4);
    free(output);
    st = test_run_cli(&output, "bench --list --filter cache");
    if (st) fail_msg("attn bench --list exited %d:\n%s", st, output);
    int lines = 0;
    for (const char *p = output; *p; p++) lines += *p == '\n';
    assert_int_equal(lines, 38); /* 11 float32 rows, 9 each of bfloat16, q8_0 and fp8 */
    free(output);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_outputs_equal_full_call),
        cmocka_unit_test(test_eight_bit_caches),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_bench_rows),
    };
    return cmocka_run_group_tests(tests, NULL, test_group_teardown);
}
