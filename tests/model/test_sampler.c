/*
 * test_sampler.c — the sampler's penalties and min-p (attn_decoder.h,
 * "sampling"; src/model/sampler.c): the distribution of the next draw
 * against transformers' logits processors on fixed logits and histories
 * (tests/fixtures/sampling/processors.txt, make_sampling_fixtures.py; the
 * frequency and presence penalties, which transformers has not, as OpenAI
 * and llama.cpp define them), then properties: the history a sampler keeps
 * (what it samples joins it, the window forgets, forget empties it),
 * seeded determinism with penalties on, and the refusals.  Greedy,
 * temperature, top-k and top-p alone are tested in test_generate.c.
 */
#include "testutil.h"

#include "attn_decoder.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FIXTURE ATTN_SOURCE_DIR "/tests/fixtures/sampling/processors.txt"
#define V 64

/* Relative tolerance on a probability: transformers divides by the
 * temperature in float32 before its softmax; attn in double. */
#define PROB_RTOL 1e-5

static int parse_numbers(char *text, double *out, int max) {
    int n = 0;
    for (char *save, *tok = strtok_r(text, " ", &save); tok && n < max; tok = strtok_r(NULL, " ", &save))
        out[n++] = strtod(tok, NULL);
    return n;
}

static void option(attn_sampler_options *o, const char *key, double v) {
    if (!strcmp(key, "temperature")) o->temperature = v;
    else if (!strcmp(key, "top_k")) o->top_k = (int64_t)v;
    else if (!strcmp(key, "top_p")) o->top_p = v;
    else if (!strcmp(key, "min_p")) o->min_p = v;
    else if (!strcmp(key, "repetition_penalty")) o->repetition_penalty = v;
    else if (!strcmp(key, "frequency_penalty")) o->frequency_penalty = v;
    else if (!strcmp(key, "presence_penalty")) o->presence_penalty = v;
    else if (!strcmp(key, "penalty_last_n")) o->penalty_last_n = (int64_t)v;
    else fail_msg("unknown option %s", key);
}

static void transformers_processors(void **state) {
    (void)state;
    size_t size;
    char *text = test_read_file(FIXTURE, &size);
    assert_non_null(text);
    char name[256] = "";
    attn_sampler_options o = ATTN_SAMPLER_OPTIONS_INIT;
    int32_t history[256];
    int n_history = 0, cases = 0;
    float logits[V];
    for (char *save, *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (!strncmp(line, "case ", 5)) {
            snprintf(name, sizeof name, "%s", line + 5);
            const attn_sampler_options init = ATTN_SAMPLER_OPTIONS_INIT;
            o = init;
        } else if (!strncmp(line, "options ", 8)) {
            char *rest = line + 8;
            for (char *s2, *kv = strtok_r(rest, " ", &s2); kv; kv = strtok_r(NULL, " ", &s2)) {
                char *eq = strchr(kv, '=');
                assert_non_null(eq);
                *eq = 0;
                option(&o, kv, strtod(eq + 1, NULL));
            }
        } else if (!strncmp(line, "history ", 8)) {
            double h[256];
            n_history = parse_numbers(line + 8, h, 256);
            for (int k = 0; k < n_history; k++) history[k] = (int32_t)h[k];
        } else if (!strncmp(line, "logits ", 7)) {
            double l[V];
            assert_int_equal(parse_numbers(line + 7, l, V), V);
            for (int k = 0; k < V; k++) logits[k] = (float)l[k];
        } else if (!strncmp(line, "probs ", 6)) {
            double want[V], got[V];
            assert_int_equal(parse_numbers(line + 6, want, V), V);
            attn_sampler *s;
            assert_int_equal(attn_sampler_new(&o, V, &s), ATTN_OK);
            assert_int_equal(attn_sampler_accept(s, history, n_history), ATTN_OK);
            assert_int_equal(attn_sampler_probabilities(s, logits, got), ATTN_OK);
            for (int k = 0; k < V; k++) {
                const bool cut = want[k] == 0.0;
                if (cut != (got[k] == 0.0) || fabs(got[k] - want[k]) > PROB_RTOL * want[k] + 1e-12)
                    test_row_failed("%s: token %d: probability %.9g, transformers %.9g", name, k, got[k], want[k]);
            }
            attn_sampler_free(s);
            cases++;
        }
    }
    free(text);
    assert_true(cases >= 12);
    test_assert_no_row_failed();
}

/* Greedy over equal logits with a repetition penalty walks the vocabulary:
 * each token it returns joins the history and is penalized; a window of 3
 * forgets the oldest; forget empties the history. */
static void history_and_window(void **state) {
    (void)state;
    float flat[8];
    for (int k = 0; k < 8; k++) flat[k] = 1.0f;
    attn_sampler_options o = ATTN_SAMPLER_OPTIONS_INIT;
    o.repetition_penalty = 2.0;
    attn_sampler *s;
    assert_int_equal(attn_sampler_new(&o, 8, &s), ATTN_OK);
    for (int32_t k = 0; k < 8; k++) {
        int32_t id;
        assert_int_equal(attn_sampler_sample(s, flat, &id), ATTN_OK);
        assert_int_equal(id, k);
    }
    attn_sampler_forget(s);
    int32_t id;
    assert_int_equal(attn_sampler_sample(s, flat, &id), ATTN_OK);
    assert_int_equal(id, 0);
    const int32_t seen[] = {1, 2, 3, 4};
    assert_int_equal(attn_sampler_accept(s, seen, 4), ATTN_OK);
    assert_int_equal(attn_sampler_sample(s, flat, &id), ATTN_OK);
    assert_int_equal(id, 5);
    attn_sampler_free(s);

    o.penalty_last_n = 3;
    assert_int_equal(attn_sampler_new(&o, 8, &s), ATTN_OK);
    for (int k = 0; k < 40; k++) {
        assert_int_equal(attn_sampler_sample(s, flat, &id), ATTN_OK);
        assert_int_equal(id, k % 4);
    }
    /* A prompt longer than the window: only its last 3 count. */
    const int32_t prompt[] = {0, 1, 2, 3, 4, 5, 6};
    attn_sampler_forget(s);
    assert_int_equal(attn_sampler_accept(s, prompt, 7), ATTN_OK);
    assert_int_equal(attn_sampler_sample(s, flat, &id), ATTN_OK);
    assert_int_equal(id, 0);
    attn_sampler_free(s);

    /* Presence and frequency: a token seen twice is penalized twice the frequency. */
    attn_sampler_options f = ATTN_SAMPLER_OPTIONS_INIT;
    f.frequency_penalty = 1.0;
    f.presence_penalty = 0.5;
    assert_int_equal(attn_sampler_new(&f, 8, &s), ATTN_OK);
    const int32_t twice[] = {0, 0, 1};
    float logits[8] = {3.0f, 1.9f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    double p[8];
    /* 0: 3 - 2 - 0.5 = 0.5; 1: 1.9 - 1 - 0.5 = 0.4: greedy picks 0. */
    assert_int_equal(attn_sampler_accept(s, twice, 3), ATTN_OK);
    assert_int_equal(attn_sampler_probabilities(s, logits, p), ATTN_OK);
    assert_true(p[0] == 1.0);
    attn_sampler_free(s);
}

/* The same seed, options and history give the same tokens; min-p 1 keeps
 * only the top token whatever the temperature. */
static void seeded_determinism(void **state) {
    (void)state;
    float logits[V];
    test_rng r;
    test_rng_seed(&r, 9);
    for (int k = 0; k < V; k++) logits[k] = (float)(2.0 * test_rng_normal(&r));
    attn_sampler_options o = ATTN_SAMPLER_OPTIONS_INIT;
    o.temperature = 1.3;
    o.top_p = 0.95;
    o.min_p = 0.02;
    o.repetition_penalty = 1.15;
    o.frequency_penalty = 0.1;
    o.penalty_last_n = 16;
    o.seed = 1234;
    attn_sampler *a, *b;
    assert_int_equal(attn_sampler_new(&o, V, &a), ATTN_OK);
    assert_int_equal(attn_sampler_new(&o, V, &b), ATTN_OK);
    o.seed = 1235;
    attn_sampler *c;
    assert_int_equal(attn_sampler_new(&o, V, &c), ATTN_OK);
    int differ = 0;
    for (int k = 0; k < 300; k++) {
        int32_t x, y, z;
        assert_int_equal(attn_sampler_sample(a, logits, &x), ATTN_OK);
        assert_int_equal(attn_sampler_sample(b, logits, &y), ATTN_OK);
        assert_int_equal(attn_sampler_sample(c, logits, &z), ATTN_OK);
        assert_int_equal(x, y);
        differ += x != z;
    }
    assert_true(differ > 30);
    attn_sampler_free(a), attn_sampler_free(b), attn_sampler_free(c);
    attn_sampler_options m = ATTN_SAMPLER_OPTIONS_INIT;
    m.temperature = 5.0;
    m.min_p = 1.0;
    assert_int_equal(attn_sampler_new(&m, V, &a), ATTN_OK);
    int best = 0;
    for (int k = 1; k < V; k++) best = logits[k] > logits[best] ? k : best;
    for (int k = 0; k < 20; k++) {
        int32_t x;
        assert_int_equal(attn_sampler_sample(a, logits, &x), ATTN_OK);
        assert_int_equal(x, best);
    }
    attn_sampler_free(a);
}

static void expect_refused(attn_sampler_options o, const char *what) {
    attn_sampler *s = (attn_sampler *)1;
    assert_int_equal(attn_sampler_new(&o, V, &s), ATTN_ERR_INVALID_ARGUMENT);
    assert_null(s);
    if (!strstr(attn_last_error(), what)) fail_msg("want '%s', got: %s", what, attn_last_error());
}

static void refusals(void **state) {
    (void)state;
    const attn_sampler_options init = ATTN_SAMPLER_OPTIONS_INIT;
    attn_sampler_options o = init;
    o.repetition_penalty = 0.0;
    expect_refused(o, "repetition_penalty is 0: must be finite and > 0");
    o = init;
    o.frequency_penalty = NAN;
    expect_refused(o, "frequency_penalty is nan");
    o = init;
    o.presence_penalty = INFINITY;
    expect_refused(o, "presence_penalty is inf");
    o = init;
    o.penalty_last_n = -1;
    expect_refused(o, "penalty_last_n is -1");
    o = init;
    o.min_p = 1.5;
    expect_refused(o, "min_p is 1.5: must be in [0, 1]");
    attn_sampler *s;
    o = init;
    o.repetition_penalty = 1.1;
    assert_int_equal(attn_sampler_new(&o, V, &s), ATTN_OK);
    const int32_t bad[] = {3, V};
    assert_int_equal(attn_sampler_accept(s, bad, 2), ATTN_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "id 64 (at 1) is outside [0, 64)"));
    float nan_logits[V] = {0};
    nan_logits[7] = NAN;
    double p[V];
    assert_int_equal(attn_sampler_probabilities(s, nan_logits, p), ATTN_ERR_NONFINITE);
    assert_non_null(strstr(attn_last_error(), "logit 7 is NaN"));
    attn_sampler_free(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(transformers_processors),
        cmocka_unit_test(history_and_window),
        cmocka_unit_test(seeded_determinism),
        cmocka_unit_test(refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
