/*
 * test_generate.c — generation (attn_decoder.h): decoder sessions over the
 * KV cache, and the sampler.
 *
 * Without models (always run):
 *   - tiny qwen2- and gemma3-shaped GGUF files built in memory (random
 *     float32 weights; Gemma's with a window of 3 over 13 tokens, so local
 *     layers hide keys): a session fed in chunks (3, then 1, then 4, then
 *     one at a time) gives every position's logits as attn_decoder_forward
 *     over the whole sequence does (the forward itself is checked against a
 *     double-precision oracle in test_decoder.c); a float16 / bfloat16
 *     cache within their rounding; capacity, bad ids, reset, the refusals.
 *   - the sampler: SplitMix64 against the published first outputs for seed
 *     0; the same seed gives the same tokens; top-k = 1 and a temperature
 *     near 0 give greedy; the frequencies of 400,000 draws from fixed
 *     distributions (plain, temperature, top-k, top-p) within 6 standard
 *     deviations of the probabilities the header's definition gives.
 * With the real models, Qwen2.5, Gemma 3 and SmolLM2 (skipped with a
 * message when absent):
 *   - greedy generation of 20 tokens from three prompts ("这台电脑来自苹果",
 *     "我吃了一个苹果", "The capital of France is") identical to Hugging
 *     Face transformers' greedy generate() (tests/fixtures/generate/, made
 *     by scripts/models/make_generate_fixtures.py);
 *   - the logits of that session at every position (the prompt fed 3, 1,
 *     then the rest, then one token a step) of the first prompt and its
 *     continuation, against one attn_decoder_forward over all of it.
 * Under a sanitizer Gemma and SmolLM2 run one prompt, 6 tokens (the forward
 * is ~20x slower there, and Qwen's 2.4 GB load alone takes a minute).
 */
#include "testutil.h"
#include "models.h"
#include "tolerances.h"

#include "attn.h"
#include "attn_decoder.h"
#include "attn_gguf.h"
#include "tiny_model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define FIXTURES ATTN_SOURCE_DIR "/tests/fixtures/generate"

/* ============================================ session against forward */

/* max |a - b| / max(1, max |b|) over n. */
static double max_rel_diff(const float *a, const float *b, int64_t n) {
    double diff = 0.0, scale = 1.0;
    for (int64_t i = 0; i < n; i++) {
        diff = fmax(diff, fabs((double)a[i] - (double)b[i]));
        scale = fmax(scale, fabs((double)b[i]));
    }
    return diff / scale;
}

/* The logits [L, V] of ids through a session of kv_dtype fed in chunks
 * 3, 1, 4, then one at a time (what is left of L), into got; the session
 * ends at position L.  With logits of every position requested. */
static void session_logits_split(const attn_decoder *dec, const int32_t *ids, int64_t L, attn_dtype kv_dtype,
                                 attn_dtype kv_value_dtype, float *got) {
    const int64_t V = attn_decoder_get_config(dec)->vocab;
    attn_decoder_session_options opt = ATTN_DECODER_SESSION_OPTIONS_INIT;
    opt.capacity = L;
    opt.kv_dtype = kv_dtype;
    opt.kv_value_dtype = kv_value_dtype;
    attn_decoder_session *s;
    assert_ok(attn_decoder_session_new(dec, &opt, &s));
    static const int64_t chunks[] = {3, 1, 4};
    int64_t pos = 0;
    for (int i = 0; pos < L; i++) {
        int64_t n = i < 3 ? chunks[i] : 1;
        if (n > L - pos) n = L - pos;
        attn_decoder_outputs out = ATTN_DECODER_OUTPUTS_INIT;
        out.logits = got + pos * V;
        assert_ok(attn_decoder_step_outputs(s, ids + pos, n, &out));
        pos += n;
        assert_int_equal(attn_decoder_session_position(s), pos);
    }
    attn_decoder_session_free(s);
}

static void session_logits(const attn_decoder *dec, const int32_t *ids, int64_t L, attn_dtype kv_dtype, float *got) {
    session_logits_split(dec, ids, L, kv_dtype, 0, got);
}

/* Returns the worst relative difference of session logits (kv_dtype) from
 * the full forward's over ids [L]. */
static double session_vs_forward(const attn_decoder *dec, const int32_t *ids, int64_t L, attn_dtype kv_dtype) {
    const int64_t V = attn_decoder_get_config(dec)->vocab;
    float *want = malloc((size_t)(L * V) * sizeof(float)), *got = malloc((size_t)(L * V) * sizeof(float));
    attn_decoder_outputs out = ATTN_DECODER_OUTPUTS_INIT;
    out.logits = want;
    assert_ok(attn_decoder_forward(dec, ids, L, &out));
    session_logits(dec, ids, L, kv_dtype, got);
    const double e = max_rel_diff(got, want, L * V);
    free(want), free(got);
    return e;
}

static void check_tiny_session(const tiny_spec *spec) {
    attn_decoder *dec = tiny_decoder(spec, 7);
    const int64_t L = 13;
    int32_t ids[13];
    test_rng rng;
    test_rng_seed(&rng, 3);
    for (int64_t t = 0; t < L; t++) ids[t] = (int32_t)test_rng_range(&rng, spec->V);
    const double e32 = session_vs_forward(dec, ids, L, ATTN_F32), e16 = session_vs_forward(dec, ids, L, ATTN_F16),
                 eb16 = session_vs_forward(dec, ids, L, ATTN_BF16);
    print_message("%s: session (3+1+4+1...) vs forward, logits relative: f32 cache %.2e, f16 %.2e, bf16 %.2e\n",
                  spec->arch, e32, e16, eb16);
    if (e32 > GENERATE_SESSION_REL_FAIL) fail_msg("float32 cache: %.3e > %.1e", e32, GENERATE_SESSION_REL_FAIL);
    if (e16 > GENERATE_SESSION_F16_REL_FAIL) fail_msg("float16 cache: %.3e > %.1e", e16, GENERATE_SESSION_F16_REL_FAIL);
    if (eb16 > GENERATE_SESSION_BF16_REL_FAIL)
        fail_msg("bfloat16 cache: %.3e > %.1e", eb16, GENERATE_SESSION_BF16_REL_FAIL);
    /* The half caches round something: not silently float32. */
    if (!(e16 > 0.0) || !(eb16 > e16)) fail_msg("f16 %.3e, bf16 %.3e: expected 0 < f16 < bf16", e16, eb16);
    attn_decoder_free(dec);
}

static void test_tiny_qwen2_session(void **state) {
    (void)state;
    check_tiny_session(&TINY_QWEN);
}

static void test_tiny_gemma3_session(void **state) {
    (void)state;
    check_tiny_session(&TINY_GEMMA); /* 13 tokens > window 3 */
}

/* bfloat16 rounding of x to nearest even (finite x), written out here. */
static float round_bf16(float x) {
    uint32_t bits;
    memcpy(&bits, &x, sizeof bits);
    bits = (bits + 0x7FFFu + ((bits >> 16) & 1u)) & 0xFFFF0000u;
    memcpy(&x, &bits, sizeof x);
    return x;
}

static int round_v_hook(void *user, const attn_decoder_hook_tensor *t) {
    (void)user;
    for (int64_t i = 0; i < t->shape[0] * t->shape[1] * t->shape[2]; i++) t->data[i] = round_bf16(t->data[i]);
    return 0;
}

/* Keys and values in dtypes of their own (kv_value_dtype): float32 keys
 * and bfloat16 values give the full forward's logits with only hook_v
 * rounded to bf16 (a forward hook, the independent side), to the session's
 * own float error; and differ from the unrounded forward by more. */
static void test_split_kv_dtypes(void **state) {
    (void)state;
    attn_decoder *dec = tiny_decoder(&TINY_GEMMA, 7);
    const attn_decoder_config *c = attn_decoder_get_config(dec);
    const int64_t L = 13, V = c->vocab;
    int32_t ids[13];
    test_rng rng;
    test_rng_seed(&rng, 4);
    for (int64_t t = 0; t < L; t++) ids[t] = (int32_t)test_rng_range(&rng, V);
    float *rounded = malloc((size_t)(L * V) * sizeof(float)), *plain = malloc((size_t)(L * V) * sizeof(float));
    float *got = malloc((size_t)(L * V) * sizeof(float));
    attn_decoder_outputs out = ATTN_DECODER_OUTPUTS_INIT;
    out.logits = plain;
    assert_ok(attn_decoder_forward(dec, ids, L, &out));
    out.logits = rounded;
    out.tensor_hook = round_v_hook;
    out.tensor_hook_points = 1u << ATTN_DECODER_HOOK_V;
    assert_ok(attn_decoder_forward(dec, ids, L, &out));
    session_logits_split(dec, ids, L, ATTN_F32, ATTN_BF16, got);
    const double e_rounded = max_rel_diff(got, rounded, L * V), e_plain = max_rel_diff(got, plain, L * V);
    print_message("f32 keys, bf16 values: %.2e from the forward with v rounded to bf16, %.2e from the plain one\n",
                  e_rounded, e_plain);
    if (!(e_rounded <= GENERATE_SESSION_REL_FAIL) || !(e_plain > 10 * e_rounded))
        fail_msg("split cache: %.3e from v rounded (want <= %.1e), %.3e from the plain forward", e_rounded,
                 GENERATE_SESSION_REL_FAIL, e_plain);
    assert_int_equal(attn_decoder_kv_bytes_per_token_split(c, ATTN_F32, ATTN_BF16),
                     c->n_layers * c->n_kv_heads * c->head_dim * (4 + 2));
    assert_int_equal(attn_decoder_kv_bytes_per_token_split(c, ATTN_BF16, 0), attn_decoder_kv_bytes_per_token(c, ATTN_BF16));
    attn_decoder_session_options opt = ATTN_DECODER_SESSION_OPTIONS_INIT;
    opt.capacity = 4;
    opt.kv_value_dtype = ATTN_F64;
    attn_decoder_session *s = NULL;
    assert_refused(attn_decoder_session_new(dec, &opt, &s), ATTN_ERR_INVALID_ARGUMENT, "kv_value_dtype");
    free(rounded), free(plain), free(got);
    attn_decoder_free(dec);
}

/* ============================ hooks on cached steps: the full forward's rows */

/* What a recording hook keeps: each layer's pattern [Hq, rows, keys] and z
 * [rows, Hq, Dh] of the last call; ablate_head >= 0 zeroes that head's
 * pattern rows (then z must follow). */
typedef struct recorded {
    float *pattern[8], *z[8];
    int64_t rows, keys;
    int ablate_head;
} recorded;

static int record_hook(void *user, const attn_decoder_hook_tensor *t) {
    recorded *r = user;
    const int64_t n = t->shape[0] * t->shape[1] * t->shape[2];
    if (t->point == ATTN_DECODER_HOOK_PATTERN) {
        r->rows = t->shape[1];
        r->keys = t->shape[2];
        if (r->ablate_head >= 0)
            for (int64_t i = 0; i < t->shape[1] * t->shape[2]; i++)
                t->data[r->ablate_head * t->shape[1] * t->shape[2] + i] = 0.0f;
    }
    float **slot = t->point == ATTN_DECODER_HOOK_PATTERN ? &r->pattern[t->layer] : &r->z[t->layer];
    free(*slot);
    *slot = malloc((size_t)n * sizeof(float));
    memcpy(*slot, t->data, (size_t)n * sizeof(float));
    return 0;
}

static void recorded_free(recorded *r) {
    for (int l = 0; l < 8; l++) free(r->pattern[l]), free(r->z[l]);
    memset(r, 0, sizeof *r);
}

/* A session's steps (3, 1, 4, then 1 at a time) with the pattern and z
 * hooks: each step's pattern [Hq, n, pos + n] must be the full forward's rows
 * pos .. pos + n - 1 over its first pos + n keys (the keys after them hold
 * 0 there: causality), each z its rows; then a step whose hook zeroes head
 * 0's pattern gives that head z = 0 (the value path follows the weights). */
static void check_step_hooks(const tiny_spec *spec, attn_dtype kv_dtype, double tol) {
    attn_decoder *dec = tiny_decoder(spec, 7);
    const attn_decoder_config *c = attn_decoder_get_config(dec);
    const int64_t L = 13, N = c->n_layers, Hq = c->n_heads, Dh = c->head_dim;
    int32_t ids[13];
    test_rng rng;
    test_rng_seed(&rng, 5);
    for (int64_t t = 0; t < L; t++) ids[t] = (int32_t)test_rng_range(&rng, spec->V);
    recorded full = {.ablate_head = -1}, step = {.ablate_head = -1};
    attn_decoder_outputs out = ATTN_DECODER_OUTPUTS_INIT;
    out.tensor_hook = record_hook;
    out.tensor_hook_user = &full;
    out.tensor_hook_points = (1u << ATTN_DECODER_HOOK_PATTERN) | (1u << ATTN_DECODER_HOOK_Z);
    assert_ok(attn_decoder_forward(dec, ids, L, &out));
    attn_decoder_session_options opt = ATTN_DECODER_SESSION_OPTIONS_INIT;
    opt.capacity = L + 1;
    opt.kv_dtype = kv_dtype;
    attn_decoder_session *s;
    assert_ok(attn_decoder_session_new(dec, &opt, &s));
    double worst = 0.0;
    static const int64_t chunks[] = {3, 1, 4};
    for (int64_t i = 0, pos = 0; pos < L; i++) {
        int64_t n = i < 3 ? chunks[i] : 1;
        if (n > L - pos) n = L - pos;
        out.tensor_hook_user = &step;
        assert_ok(attn_decoder_step_outputs(s, ids + pos, n, &out));
        assert_int_equal(step.rows, n);
        assert_int_equal(step.keys, pos + n);
        for (int64_t l = 0; l < N; l++)
            for (int64_t h = 0; h < Hq; h++)
                for (int64_t r = 0; r < n; r++) {
                    for (int64_t j = 0; j < L; j++) {
                        const float want = full.pattern[l][(h * L + pos + r) * L + j];
                        if (j >= pos + n) {
                            if (want != 0.0f) fail_msg("full forward: row %lld sees key %lld", (long long)(pos + r), (long long)j);
                            continue;
                        }
                        worst = fmax(worst, fabs((double)step.pattern[l][(h * n + r) * (pos + n) + j] - want));
                    }
                    for (int64_t e = 0; e < Dh; e++)
                        worst = fmax(worst, fabs((double)step.z[l][(r * Hq + h) * Dh + e] -
                                                 full.z[l][((pos + r) * Hq + h) * Dh + e]));
                }
        pos += n;
    }
    print_message("%s, %s cache: cached steps' pattern and z vs the full forward's rows: %.2e\n", spec->arch,
                  kv_dtype == ATTN_F32 ? "f32" : "f16", worst);
    if (!(worst <= tol)) fail_msg("cached steps' pattern or z differ from the full forward's by %.3e", worst);
    /* Ablation through the pattern on a cached step. */
    step.ablate_head = 0;
    const int32_t next = 1;
    assert_ok(attn_decoder_step_outputs(s, &next, 1, &out));
    for (int64_t l = 0; l < N; l++)
        for (int64_t e = 0; e < Dh; e++)
            if (step.z[l][e] != 0.0f) fail_msg("layer %lld: head 0's z is not 0 after its pattern was zeroed", (long long)l);
    attn_decoder_session_free(s);
    recorded_free(&full);
    recorded_free(&step);
    attn_decoder_free(dec);
}

static void test_step_hooks(void **state) {
    (void)state;
    check_step_hooks(&TINY_QWEN, ATTN_F32, 1e-5);
    check_step_hooks(&TINY_GEMMA, ATTN_F32, 1e-5); /* sliding window 3 at absolute positions */
    check_step_hooks(&TINY_GEMMA, ATTN_F16, 2e-2); /* keys and values rounded to float16 */
}

static void test_session_errors(void **state) {
    (void)state;
    attn_decoder *dec = tiny_decoder(&TINY_QWEN, 7);
    const int64_t V = TINY_QWEN.V;
    attn_decoder_session_options opt = ATTN_DECODER_SESSION_OPTIONS_INIT;
    attn_decoder_session *s = NULL;
    assert_refused(attn_decoder_session_new(dec, &opt, &s), ATTN_ERR_INVALID_ARGUMENT, "capacity");
    assert_null(s);
    opt.capacity = 4;
    opt.kv_dtype = ATTN_F64;
    assert_refused(attn_decoder_session_new(dec, &opt, &s), ATTN_ERR_INVALID_ARGUMENT, "kv_dtype");
    opt.kv_dtype = ATTN_F32;
    opt.struct_size = 0;
    assert_refused(attn_decoder_session_new(dec, &opt, &s), ATTN_ERR_INVALID_ARGUMENT,
                   "ATTN_DECODER_SESSION_OPTIONS_INIT");
    opt.struct_size = sizeof opt;
    assert_ok(attn_decoder_session_new(dec, &opt, &s));
    assert_int_equal(attn_decoder_session_capacity(s), 4);
    float *a = malloc((size_t)V * sizeof(float)), *b = malloc((size_t)V * sizeof(float));
    const int32_t ids[5] = {1, 2, 3, 4, 5}, bad[2] = {1, 37};
    assert_refused(attn_decoder_step(s, bad, 2, a), ATTN_ERR_INVALID_ARGUMENT, "token 1 is id 37");
    assert_int_equal(attn_decoder_session_position(s), 0);
    assert_refused(attn_decoder_step(s, ids, 5, a), ATTN_ERR_CAPACITY, "capacity of 4");
    assert_refused(attn_decoder_step(s, ids, 0, a), ATTN_ERR_SHAPE, "0 tokens");
    assert_ok(attn_decoder_step(s, ids, 3, a));
    assert_refused(attn_decoder_step(s, ids, 2, a), ATTN_ERR_CAPACITY, "at position 3");
    assert_int_equal(attn_decoder_session_position(s), 3);
    /* Refused steps changed nothing: the next token is as if they never were. */
    assert_ok(attn_decoder_step(s, ids + 3, 1, a));
    attn_decoder_outputs full = ATTN_DECODER_OUTPUTS_INIT;
    full.logits = b;
    full.last_only = 1;
    assert_ok(attn_decoder_forward(dec, ids, 4, &full));
    if (max_rel_diff(a, b, V) > GENERATE_SESSION_REL_FAIL) fail_msg("after refusals the session drifted");
    /* Reset: position 0 again, the same numbers as a fresh session. */
    assert_ok(attn_decoder_session_reset(s));
    assert_int_equal(attn_decoder_session_position(s), 0);
    assert_ok(attn_decoder_step(s, ids, 4, a));
    if (max_rel_diff(a, b, V) > GENERATE_SESSION_REL_FAIL) fail_msg("after a reset the session drifted");
    /* NULL logits: the step runs, nothing is written. */
    assert_ok(attn_decoder_session_reset(s));
    assert_ok(attn_decoder_step(s, ids, 2, NULL));
    assert_int_equal(attn_decoder_session_position(s), 2);
    float *maps[3] = {a, NULL, NULL};
    attn_decoder_outputs out = ATTN_DECODER_OUTPUTS_INIT;
    out.attention = maps;
    assert_refused(attn_decoder_step_outputs(s, ids, 1, &out), ATTN_ERR_UNSUPPORTED, "attention");
    assert_refused(attn_decoder_step(NULL, ids, 1, a), ATTN_ERR_INVALID_ARGUMENT, "session");
    attn_decoder_session_free(s);
    attn_decoder_session_free(NULL);
    const attn_decoder_config *c = attn_decoder_get_config(dec);
    assert_int_equal(attn_decoder_kv_bytes_per_token(c, ATTN_F32), 3 * 2 * 2 * 4 * 4);
    assert_int_equal(attn_decoder_kv_bytes_per_token(c, ATTN_BF16), 3 * 2 * 2 * 4 * 2);
    free(a), free(b);
    attn_decoder_free(dec);
}

/* ============================================================ sampler */

static attn_sampler *sampler(double temperature, int64_t top_k, double top_p, uint64_t seed, int64_t V) {
    attn_sampler_options o = ATTN_SAMPLER_OPTIONS_INIT;
    o.temperature = temperature;
    o.top_k = top_k;
    o.top_p = top_p;
    o.seed = seed;
    attn_sampler *s;
    assert_ok(attn_sampler_new(&o, V, &s));
    return s;
}

static int32_t argmax(const float *x, int64_t n) {
    int32_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = (int32_t)i;
    return best;
}

/* SplitMix64 from seed 0: the first outputs of Vigna's reference
 * splitmix64.c are 0xe220a8397b1dcdaf, 0x6e789e6aa1b965f4, 0x06c45d188009454f;
 * a uniform is the top 53 bits times 2^-53. */
static void test_prng_reference(void **state) {
    (void)state;
    static const uint64_t want[3] = {0xe220a8397b1dcdafull, 0x6e789e6aa1b965f4ull, 0x06c45d188009454full};
    attn_sampler *s = sampler(1.0, 0, 1.0, 0, 4);
    for (int i = 0; i < 3; i++) {
        const double u = attn_sampler_uniform(s);
        if (u != (double)(want[i] >> 11) * 0x1.0p-53) fail_msg("draw %d: %.17g", i, u);
    }
    attn_sampler_free(s);
}

static void random_logits(float *x, int64_t n, uint64_t seed, double scale) {
    test_rng rng;
    test_rng_seed(&rng, seed);
    for (int64_t i = 0; i < n; i++) x[i] = (float)(scale * test_rng_normal(&rng));
}

static void test_sampler_determinism_and_greedy(void **state) {
    (void)state;
    enum { V = 1000, DRAWS = 200 };
    float *x = malloc(V * sizeof(float));
    int32_t a[DRAWS], b[DRAWS], c[DRAWS];
    attn_sampler *s1 = sampler(0.8, 50, 0.9, 42, V), *s2 = sampler(0.8, 50, 0.9, 42, V),
                 *s3 = sampler(0.8, 50, 0.9, 43, V);
    attn_sampler *greedy = sampler(0.0, 0, 1.0, 0, V), *k1 = sampler(1.7, 1, 0.5, 9, V),
                 *cold = sampler(1e-4, 0, 1.0, 9, V), *cold_k = sampler(1e-4, 20, 0.95, 9, V),
                 *frozen = sampler(1e-310, 0, 1.0, 9, V);
    /* top-k by insertion (k <= 256) and by a full sort (k > 256). */
    attn_sampler *k5 = sampler(3.0, 5, 1.0, 11, V), *k300 = sampler(3.0, 300, 1.0, 12, V);
    int differ = 0;
    for (int t = 0; t < DRAWS; t++) {
        random_logits(x, V, (uint64_t)t, 3.0);
        assert_ok(attn_sampler_sample(s1, x, &a[t]));
        assert_ok(attn_sampler_sample(s2, x, &b[t]));
        assert_ok(attn_sampler_sample(s3, x, &c[t]));
        differ += a[t] != c[t];
        const int32_t want = argmax(x, V);
        int32_t g, g1, g2, g3;
        assert_ok(attn_sampler_sample(greedy, x, &g));
        assert_ok(attn_sampler_sample(k1, x, &g1));
        /* Logits of N(0, 9): the top two are ~0.3 apart at V = 1000, so at
         * T = 1e-4 the runner-up's weight is below exp(-1000) unless a draw
         * makes them closer than 2e-3 (checked, not assumed). */
        float second = -INFINITY;
        for (int64_t i = 0; i < V; i++)
            if (i != want && x[i] > second) second = x[i];
        assert_ok(attn_sampler_sample(cold, x, &g2));
        assert_ok(attn_sampler_sample(cold_k, x, &g3));
        assert_int_equal(g, want);
        assert_int_equal(g1, want);
        int32_t f, r5, r300;
        assert_ok(attn_sampler_sample(frozen, x, &f));
        assert_int_equal(f, want);
        assert_ok(attn_sampler_sample(k5, x, &r5));
        assert_ok(attn_sampler_sample(k300, x, &r300));
        int64_t rank5 = 0, rank300 = 0; /* logits above the drawn one (ids are distinct floats here) */
        for (int64_t i = 0; i < V; i++) {
            rank5 += x[i] > x[r5];
            rank300 += x[i] > x[r300];
        }
        if (rank5 >= 5 || rank300 >= 300)
            fail_msg("draw %d: top-k 5 drew rank %lld, top-k 300 rank %lld", t, (long long)rank5, (long long)rank300);
        if (x[want] - second > 2e-3f) {
            assert_int_equal(g2, want);
            assert_int_equal(g3, want);
        }
    }
    assert_memory_equal(a, b, sizeof a);
    if (differ < DRAWS / 4) fail_msg("seeds 42 and 43 gave the same token %d times of %d", DRAWS - differ, DRAWS);
    /* Ties: the lowest id, as argmax. */
    float ties[4] = {1.0f, 3.0f, 3.0f, -INFINITY};
    int32_t id;
    attn_sampler *greedy4 = sampler(0.0, 0, 1.0, 0, 4);
    assert_ok(attn_sampler_sample(greedy4, ties, &id));
    assert_int_equal(id, 1);
    attn_sampler_free(greedy4);
    attn_sampler_free(s1), attn_sampler_free(s2), attn_sampler_free(s3), attn_sampler_free(greedy);
    attn_sampler_free(k1), attn_sampler_free(cold), attn_sampler_free(cold_k), attn_sampler_free(frozen);
    attn_sampler_free(k5), attn_sampler_free(k300);
    free(x);
}

/* The frequencies of DRAWS draws against the probabilities want[]: each
 * within 6 standard deviations sqrt(p (1 - p) / DRAWS) (plus 1e-9 for the
 * p = 0 entries, which must never be drawn).  A fixed seed makes the run
 * deterministic; 6 sigma makes it a bound a correct sampler would cross
 * with probability below 2e-9 per entry for any seed. */
static void check_frequencies(const char *what, attn_sampler *s, const float *logits, const double *want, int n) {
    enum { DRAWS = 400000 };
    long count[8] = {0};
    for (int t = 0; t < DRAWS; t++) {
        int32_t id;
        assert_ok(attn_sampler_sample(s, logits, &id));
        assert_true(id >= 0 && id < n);
        count[id]++;
    }
    for (int i = 0; i < n; i++) {
        const double f = (double)count[i] / DRAWS, sigma = sqrt(want[i] * (1 - want[i]) / DRAWS);
        if (fabs(f - want[i]) > 6 * sigma + 1e-9)
            fail_msg("%s: token %d drawn %.5f of the time, expected %.5f (6 sigma = %.5f)", what, i, f, want[i],
                     6 * sigma);
    }
    print_message("%s: frequencies within 6 sigma of %.3f %.3f %.3f %.3f %.3f\n", what, want[0], want[1], want[2],
                  want[3], want[4]);
    attn_sampler_free(s);
}

static void test_sampler_statistics(void **state) {
    (void)state;
    /* p = 0.4, 0.25, 0.2, 0.1, 0.05 in a shuffled id order. */
    const double p[5] = {0.1, 0.4, 0.05, 0.25, 0.2};
    float logits[5];
    for (int i = 0; i < 5; i++) logits[i] = (float)log(p[i]) + 3.0f;
    double q[5], z = 0;
    check_frequencies("T = 1", sampler(1.0, 0, 1.0, 1, 5), logits, p, 5);
    /* T = 2: p^(1/2), renormalised (the float logits' rounding moves
     * these by ~1e-7, far inside the bound). */
    for (int i = 0; i < 5; i++) z += q[i] = sqrt(p[i]);
    for (int i = 0; i < 5; i++) q[i] /= z;
    check_frequencies("T = 2", sampler(2.0, 0, 1.0, 2, 5), logits, q, 5);
    /* top-k 2: ids 1 (0.4) and 3 (0.25) only. */
    const double k2[5] = {0, 0.4 / 0.65, 0, 0.25 / 0.65, 0};
    check_frequencies("top-k 2", sampler(1.0, 2, 1.0, 3, 5), logits, k2, 5);
    /* top-p 0.7: 0.4 < 0.7, 0.4 + 0.25 = 0.65 < 0.7, + 0.2 = 0.85 >= 0.7:
     * three kept. */
    const double p7[5] = {0, 0.4 / 0.85, 0, 0.25 / 0.85, 0.2 / 0.85};
    check_frequencies("top-p 0.7", sampler(1.0, 0, 0.7, 4, 5), logits, p7, 5);
    /* top-k 4 then top-p 0.5 at T = 1: 0.4 / 0.95 = 0.42 < 0.5, then
     * 0.65 / 0.95 >= 0.5: two kept. */
    check_frequencies("top-k 4 + top-p 0.5", sampler(1.0, 4, 0.5, 5, 5), logits, k2, 5);
}

static void test_sampler_errors(void **state) {
    (void)state;
    attn_sampler_options o = ATTN_SAMPLER_OPTIONS_INIT;
    attn_sampler *s = NULL;
    assert_refused(attn_sampler_new(&o, 0, &s), ATTN_ERR_INVALID_ARGUMENT, "vocab");
    assert_null(s);
    o.temperature = -1;
    assert_refused(attn_sampler_new(&o, 4, &s), ATTN_ERR_INVALID_ARGUMENT, "temperature");
    o.temperature = NAN;
    assert_refused(attn_sampler_new(&o, 4, &s), ATTN_ERR_INVALID_ARGUMENT, "temperature");
    o.temperature = 1;
    o.top_k = -2;
    assert_refused(attn_sampler_new(&o, 4, &s), ATTN_ERR_INVALID_ARGUMENT, "top_k");
    o.top_k = 0;
    o.top_p = 0;
    assert_refused(attn_sampler_new(&o, 4, &s), ATTN_ERR_INVALID_ARGUMENT, "top_p");
    o.top_p = 1.5;
    assert_refused(attn_sampler_new(&o, 4, &s), ATTN_ERR_INVALID_ARGUMENT, "top_p");
    o.top_p = 1;
    assert_ok(attn_sampler_new(&o, 4, &s));
    int32_t id = -1;
    const float nan_logits[4] = {0, 1, NAN, 2}, dead[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
    assert_refused(attn_sampler_sample(s, nan_logits, &id), ATTN_ERR_NONFINITE, "logit 2 is NaN");
    assert_refused(attn_sampler_sample(s, dead, &id), ATTN_ERR_NONFINITE, "-inf");
    /* -inf entries are never drawn. */
    const float some[4] = {-INFINITY, 0, -INFINITY, 0};
    for (int t = 0; t < 1000; t++) {
        assert_ok(attn_sampler_sample(s, some, &id));
        assert_true(id == 1 || id == 3);
    }
    attn_sampler_free(s);
    attn_sampler_free(NULL);
}

/* ===================================================== the real models */

/* "1,2,3" into ids; returns the count. */
static int64_t parse_list(const char *text, int32_t *ids, int64_t cap) {
    int64_t n = 0;
    for (const char *p = text; *p && n < cap;) {
        char *end;
        const long v = strtol(p, &end, 10);
        if (end == p) break;
        ids[n++] = (int32_t)v;
        p = *end == ',' ? end + 1 : end;
        if (*p == ' ' || *p == '|') break;
    }
    return n;
}

static void check_model(const char *file, const char *arch) {
    const char *path = test_model_or_skip(file);
    char fixture[768];
    snprintf(fixture, sizeof fixture, FIXTURES "/%s.txt", arch);
    FILE *f = fopen(fixture, "r");
    if (!f) fail_msg("%s: cannot open (scripts/models/make_generate_fixtures.py makes it)", fixture);
    attn_gguf *g;
    assert_ok(attn_gguf_open(path, &g));
    attn_decoder *dec;
    assert_ok(attn_decoder_load(g, &dec));
    attn_gguf_free(g);
    const int64_t V = attn_decoder_get_config(dec)->vocab;
    char line[4096];
    int prompts = 0;
    double worst;
    while (fgets(line, sizeof line, f) && (!UNDER_SANITIZER || prompts < 1)) {
        char key[64];
        int32_t prompt[64], want[64], seq[128];
        if (sscanf(line, "%63s", key) != 1) continue;
        const char *p = line + strlen(key) + 1, *bar = strchr(p, '|');
        assert_non_null(bar);
        const int64_t Lp = parse_list(p, prompt, 64), n_new = parse_list(bar + 2, want, 64);
        assert_true(Lp > 0 && n_new == 20);
        const int64_t steps = UNDER_SANITIZER ? 6 : n_new, L = Lp + steps;
        /* Greedy through a session: the prompt in chunks of 3, 1 and the
         * rest, then one token a step; every position's logits kept. */
        attn_decoder_session_options opt = ATTN_DECODER_SESSION_OPTIONS_INIT;
        opt.capacity = L;
        attn_decoder_session *s;
        assert_ok(attn_decoder_session_new(dec, &opt, &s));
        attn_sampler *greedy = sampler(0.0, 0, 1.0, 0, V);
        float *got = malloc((size_t)(L * V) * sizeof(float));
        memcpy(seq, prompt, (size_t)Lp * sizeof *seq);
        for (int64_t pos = 0, chunk = 0; pos < L; chunk++) {
            const int64_t n = pos >= Lp ? 1 : chunk == 0 ? (Lp < 3 ? Lp : 3) : chunk == 1 ? 1 : Lp - pos;
            attn_decoder_outputs out = ATTN_DECODER_OUTPUTS_INIT;
            out.logits = got + pos * V;
            assert_ok(attn_decoder_step_outputs(s, seq + pos, n, &out));
            pos += n;
            if (pos < Lp || pos == L) continue;
            const int64_t t = pos - Lp;
            assert_ok(attn_sampler_sample(greedy, got + (pos - 1) * V, &seq[pos]));
            if (seq[pos] != want[t])
                fail_msg("%s %s: token %lld is %ld, transformers' greedy gives %ld", arch, key, (long long)t,
                         (long)seq[pos], (long)want[t]);
        }
        attn_sampler_free(greedy);
        attn_decoder_session_free(s);
        print_message("%s %s: %lld prompt tokens, %lld generated = transformers'\n", arch, key, (long long)Lp,
                      (long long)steps);
        if (prompts == 0) {
            /* Every position's logits of the first prompt and its
             * continuation against one full forward (the other prompts
             * would repeat it at the cost of a forward each). */
            float *full = malloc((size_t)(L * V) * sizeof(float));
            attn_decoder_outputs out = ATTN_DECODER_OUTPUTS_INIT;
            out.logits = full;
            assert_ok(attn_decoder_forward(dec, seq, L, &out));
            worst = max_rel_diff(got, full, L * V);
            free(full);
            print_message("%s %s: session (3+1+%lld, then 1 a step) vs forward over %lld tokens: logits relative %.2e\n",
                          arch, key, (long long)(Lp - 4), (long long)L, worst);
            if (worst > GENERATE_SESSION_REL_FAIL)
                fail_msg("session vs forward: %.3e > %.1e", worst, GENERATE_SESSION_REL_FAIL);
        }
        free(got);
        prompts++;
    }
    fclose(f);
    assert_true(prompts >= 1);
    print_message("%s: %d prompts, greedy identical to transformers'\n", arch, prompts);
    attn_decoder_free(dec);
}

static void test_qwen2_greedy_matches_transformers(void **state) {
    (void)state;
    if (UNDER_SANITIZER) {
        print_message("skipped under a sanitizer (minutes there): the Release build runs it\n");
        skip();
    }
    check_model(TEST_QWEN_GGUF, "qwen2");
}

static void test_gemma3_greedy_matches_transformers(void **state) {
    (void)state;
    check_model(TEST_GEMMA_GGUF, "gemma3");
}

/* SmolLM2 135M (llama; its vocabulary lacks 21 byte letters, so its
 * prompts' ids come from the tokenizer rule docs/tokenizers.md §2 gives). */
static void test_llama_greedy_matches_transformers(void **state) {
    (void)state;
    check_model(TEST_SMOLLM2_GGUF, "llama");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tiny_qwen2_session),
        cmocka_unit_test(test_tiny_gemma3_session),
        cmocka_unit_test(test_split_kv_dtypes),
        cmocka_unit_test(test_step_hooks),
        cmocka_unit_test(test_session_errors),
        cmocka_unit_test(test_prng_reference),
        cmocka_unit_test(test_sampler_determinism_and_greedy),
        cmocka_unit_test(test_sampler_statistics),
        cmocka_unit_test(test_sampler_errors),
        cmocka_unit_test(test_qwen2_greedy_matches_transformers),
        cmocka_unit_test(test_gemma3_greedy_matches_transformers),
        cmocka_unit_test(test_llama_greedy_matches_transformers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
