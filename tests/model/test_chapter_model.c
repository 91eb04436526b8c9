/*
 * test_chapter_model.c — `attn demo --model FILE`: the chapter's opening on a
 * real model (tools/demo/model_chapter.c, compiled in, and the program).
 *
 * Always: the causal-mask checker on hand-made maps (one that passes, one
 * with a nonzero cell above the diagonal, one whose row does not sum to 1:
 * the check can fail); the program's errors for a missing model file (it
 * names the file and scripts/fetch-models.sh) and for --model's options
 * given without it.
 *
 * With the real models (skipped with a message when absent): the two
 * sentences' ids, the cosine of the two 苹果 vectors at every layer (and of
 * the control pairs': the same sense of 苹果, a matched English pair), the
 * attention row of 苹果 in every layer and head (and its top-3 keys in a
 * few), and the top-5 next tokens with their probabilities, against Hugging
 * Face transformers (tests/fixtures/chapter_model/, made by
 * scripts/models/make_chapter_fixtures.py); the mask on every real map; the
 * program's output in both languages, with the 100- and 200-token cost
 * table once (Gemma; not under a sanitizer, where the forward is ~20x
 * slower: there --no-cost), and its reading of the gap to the control
 * (context on Qwen, too small to mean anything on Gemma).
 */
#include "cli_files.h"
#include "testutil.h"
#include "models.h"
#include "tolerances.h"

#include "attn.h"
#include "attn_decoder.h"
#include "attn_gguf.h"
#include "attn_io.h"
#include "attn_tokenizer.h"
#include "attn_viz.h"
#include "model_chapter.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define FIXTURES ATTN_SOURCE_DIR "/tests/fixtures/chapter_model"
#define QWEN TEST_QWEN_GGUF
#define GEMMA TEST_GEMMA_GGUF

static const char *const sentence_keys[MODEL_CHAPTER_SENTENCES] = {"eat", "computer"};

/* ============================================================ always */

/* A causal map [H, L, L]: row i spreads its weight evenly over keys 0..i. */
static void causal_uniform(float *maps, int64_t H, int64_t L) {
    for (int64_t h = 0; h < H; h++)
        for (int64_t i = 0; i < L; i++)
            for (int64_t j = 0; j < L; j++) maps[(h * L + i) * L + j] = j <= i ? 1.0f / (float)(i + 1) : 0.0f;
}

static void test_causal_checker(void **state) {
    (void)state;
    enum { H = 3, L = 5 };
    float maps[H * L * L];
    causal_uniform(maps, H, L);
    double row_error = 0;
    int64_t upper = 0;
    model_chapter_check_causal(maps, H, L, &row_error, &upper);
    assert_int_equal(upper, 0);
    assert_true(row_error < 1e-6);

    /* One cell above the diagonal that is not 0 (head 2, query 1 reads key 3). */
    maps[(2 * L + 1) * L + 3] = 1e-30f;
    row_error = 0, upper = 0;
    model_chapter_check_causal(maps, H, L, &row_error, &upper);
    assert_int_equal(upper, 1);

    /* A row whose visible weights sum to 0.9 (the wrong way of §5: a weight
     * deleted, nothing renormalised). */
    causal_uniform(maps, H, L);
    maps[(0 * L + 4) * L + 0] -= 0.1f;
    row_error = 0, upper = 0;
    model_chapter_check_causal(maps, H, L, &row_error, &upper);
    assert_int_equal(upper, 0);
    assert_true(fabs(row_error - 0.1) < 1e-6);
}

/* The reading of a gap: the two senses' distance from 1 over the
 * control's, at the final norm (Qwen2.5's and Gemma 3's numbers). */
static void test_gap_ratio(void **state) {
    (void)state;
    assert_true(fabs(model_chapter_gap_ratio(0.5545, 0.8927) - 0.4455 / 0.1073) < 1e-12);
    assert_true(model_chapter_gap_ratio(0.5545, 0.8927) >= MODEL_CHAPTER_GAP_MEANINGFUL);
    assert_true(model_chapter_gap_ratio(0.8980, 0.9264) < MODEL_CHAPTER_GAP_MEANINGFUL);
    assert_true(isinf(model_chapter_gap_ratio(0.9, 1.0)));
    assert_true(model_chapter_gap_ratio(1.0, 1.0) == 1.0);
}

static void test_top_k(void **state) {
    (void)state;
    const float x[6] = {0.1f, 0.4f, 0.4f, 0.05f, 0.3f, 0.75f};
    int64_t best[3];
    attn_top_k(x, 6, 3, best);
    assert_int_equal(best[0], 5);
    assert_int_equal(best[1], 1); /* ties: the lower index first */
    assert_int_equal(best[2], 2);
}

static void test_cli_errors(void **state) {
    (void)state;
    char missing[600];
    snprintf(missing, sizeof missing, "%s/no-such-model.gguf", test_tmpdir());
    test_cli_expect(1, "no-such-model.gguf: no such model file", "demo --model %s --lang en", missing);
    test_cli_expect(1, "scripts/fetch-models.sh", "demo --model %s --lang en", missing);
    test_cli_expect(1, "模型文件不存在", "demo --model %s --lang zh", missing);
    test_cli_expect(1, "scripts/fetch-models.sh", "model chapter %s --lang en", missing);
    char junk[600];
    snprintf(junk, sizeof junk, "%s/junk.gguf", test_tmpdir());
    assert_int_equal(test_write_file(junk, "not a model", 11), 0);
    test_cli_expect(1, "junk.gguf': not a GGUF file", "demo --model %s", junk);
    test_cli_expect(2, "options of --model MODEL", "demo --plot %s", "x.png");
    test_cli_expect(2, "not --model's", "demo --model x.gguf --figures %s", test_tmpdir());
    test_cli_expect(0, "--no-cost", "demo --help --lang %s", "en");
    test_cli_expect(0, "--no-cost", "demo --help --lang %s", "zh");
    test_cli_expect(0, "attn model chapter MODEL", "model --help%s", "");
    test_cli_expect(2, "chapter needs the MODEL first", "model chapter%s", "");
    test_cli_expect(2, "chapter needs the MODEL first", "model chapter --lang en %s", "x.gguf");
    test_cli_expect(0, "--model MODEL", "model chapter --help%s", "");
}

/* ======================================================== the real models */

static attn_array load_fixture(const char *arch, const char *what, attn_dtype dtype) {
    char path[768];
    snprintf(path, sizeof path, FIXTURES "/%s/%s.npy", arch, what);
    return test_load_array(path, dtype);
}

/* attn's top-k of row[0..n) agrees with the reference's when every rank
 * holds the reference's key, or its weight is within tol of the one there
 * (near-ties may swap).  Returns the first rank that disagrees, or -1. */
static int64_t rank_disagreement(const float *row, const float *ref, int64_t n, int64_t k, double tol) {
    int64_t got[8], want[8];
    attn_top_k(row, n, k, got);
    attn_top_k(ref, n, k, want);
    for (int64_t j = 0; j < k; j++)
        if (got[j] != want[j] && fabs((double)ref[got[j]] - ref[want[j]]) > tol) return j;
    return -1;
}

static void check_model(const char *file, const char *arch) {
    const char *path = test_model_or_skip(file);
    attn_gguf *g;
    assert_ok(attn_gguf_open(path, &g));
    attn_decoder *m;
    attn_tokenizer *t;
    const double t0 = test_now();
    assert_ok(attn_decoder_load(g, &m));
    assert_ok(attn_tokenizer_from_gguf(g, &t));
    print_message("%s: loaded in %.2f s\n", arch, test_now() - t0);
    model_chapter mc;
    if (model_chapter_compute(m, t, &mc) != ATTN_OK) fail_msg("%s: %s", arch, mc.error);
    const attn_decoder_config *c = &mc.config;
    const int64_t N = c->n_layers, Hq = c->n_heads;

    /* 苹果: one id at the end of both, the same embedding row. */
    assert_true(mc.embeddings_equal);
    assert_int_equal(mc.s[0].ids[mc.s[0].apple], mc.s[1].ids[mc.s[1].apple]);

    /* The cosine series. */
    attn_array cos = load_fixture(arch, "cosine", ATTN_F64);
    assert_int_equal(cos.count, N + 2);
    double worst_cos = 0;
    for (int64_t l = 0; l < N + 2; l++) worst_cos = fmax(worst_cos, fabs(mc.cosine[l] - ((const double *)cos.data)[l]));
    print_message("%s cosine: embedding %.4f, after the last layer %.4f, after the final norm %.4f; worst |diff| from "
                  "HF %.2e\n",
                  arch, mc.cosine[0], mc.cosine[N], mc.cosine[N + 1], worst_cos);
    if (worst_cos > CHAPTER_COSINE_ABS_FAIL) fail_msg("%s: cosines differ by %.3g", arch, worst_cos);
    attn_array_free(&cos);
    /* The controls' series, against transformers' on the same pairs. */
    static const char *const pair_keys[MODEL_CHAPTER_PAIRS] = {"control_cosine", "en_senses_cosine",
                                                               "en_control_cosine"};
    for (int p = 0; p < MODEL_CHAPTER_PAIRS; p++) {
        attn_array want = load_fixture(arch, pair_keys[p], ATTN_F64);
        assert_int_equal(want.count, N + 2);
        double worst = 0;
        for (int64_t l = 0; l < N + 2; l++)
            worst = fmax(worst, fabs(mc.pair_cosine[p][l] - ((const double *)want.data)[l]));
        print_message("%s %s: after the final norm %.4f; worst |diff| from HF %.2e\n", arch, pair_keys[p],
                      mc.pair_cosine[p][N + 1], worst);
        if (worst > CHAPTER_COSINE_ABS_FAIL) fail_msg("%s: %s differs by %.3g", arch, pair_keys[p], worst);
        attn_array_free(&want);
    }

    double worst_att = 0, worst_prob = 0;
    for (int k = 0; k < MODEL_CHAPTER_SENTENCES; k++) {
        const model_chapter_sentence *s = &mc.s[k];
        const int64_t L = s->L;
        char what[64];
        /* The ids: attn's tokenizer against the reference's. */
        snprintf(what, sizeof what, "%s_ids", sentence_keys[k]);
        attn_array ids = load_fixture(arch, what, ATTN_I64);
        assert_int_equal(ids.count, L);
        for (int64_t i = 0; i < L; i++) assert_int_equal(s->ids[i], ((const int64_t *)ids.data)[i]);
        attn_array_free(&ids);

        /* 苹果's attention row, every layer and head; its top-3 keys in the
         * first, middle and last layer's first and last head. */
        snprintf(what, sizeof what, "%s_apple_attn", sentence_keys[k]);
        attn_array rows = load_fixture(arch, what, ATTN_F32);
        assert_int_equal(rows.count, N * Hq * L);
        const float *ref = rows.data;
        for (int64_t l = 0; l < N; l++)
            for (int64_t h = 0; h < Hq; h++) {
                const float *row = s->attention + ((l * Hq + h) * L + s->apple) * L;
                const float *ref_row = ref + (l * Hq + h) * L;
                for (int64_t j = 0; j < L; j++) worst_att = fmax(worst_att, fabs((double)row[j] - ref_row[j]));
                const bool shown = (l == 0 || l == N / 2 || l == N - 1) && (h == 0 || h == Hq - 1);
                if (!shown) continue;
                const int64_t bad = rank_disagreement(row, ref_row, L, 3, DECODER_WEIGHT_ABS_FAIL);
                if (bad >= 0)
                    fail_msg("%s %s layer %lld head %lld: 苹果's key of rank %lld differs from HF's", arch,
                             sentence_keys[k], (long long)l, (long long)h, (long long)bad + 1);
                int64_t best[3];
                attn_top_k(row, L, 3, best);
                print_message("  %s %-8s layer %2lld head %2lld: keys %lld %.3f, %lld %.3f, %lld %.3f\n", arch,
                              sentence_keys[k], (long long)l, (long long)h, (long long)best[0], (double)row[best[0]],
                              (long long)best[1], (double)row[best[1]], (long long)best[2], (double)row[best[2]]);
            }
        attn_array_free(&rows);

        /* The next tokens: the same five in order, unless HF's two
         * neighbours are closer than the probabilities' tolerance. */
        snprintf(what, sizeof what, "%s_top_ids", sentence_keys[k]);
        attn_array top = load_fixture(arch, what, ATTN_I64);
        snprintf(what, sizeof what, "%s_top_probs", sentence_keys[k]);
        attn_array probs = load_fixture(arch, what, ATTN_F64);
        const int64_t *ref_ids = top.data;
        const double *ref_p = probs.data;
        for (int j = 0; j < MODEL_CHAPTER_TOP; j++) {
            if (s->top_ids[j] != ref_ids[j] && !(j + 1 < MODEL_CHAPTER_TOP && ref_p[j] - ref_p[j + 1] < CHAPTER_PROB_ABS_FAIL) &&
                !(j > 0 && ref_p[j - 1] - ref_p[j] < CHAPTER_PROB_ABS_FAIL))
                fail_msg("%s %s: next token of rank %d is %lld, HF's %lld", arch, sentence_keys[k], j + 1,
                         (long long)s->top_ids[j], (long long)ref_ids[j]);
            worst_prob = fmax(worst_prob, fabs(s->top_probs[j] - ref_p[j]));
        }
        print_message("  %s %-8s next: %lld %.4f, %lld %.4f, %lld %.4f, %lld %.4f, %lld %.4f\n", arch, sentence_keys[k],
                      (long long)s->top_ids[0], s->top_probs[0], (long long)s->top_ids[1], s->top_probs[1],
                      (long long)s->top_ids[2], s->top_probs[2], (long long)s->top_ids[3], s->top_probs[3],
                      (long long)s->top_ids[4], s->top_probs[4]);
        attn_array_free(&top);
        attn_array_free(&probs);
    }
    print_message("%s: 苹果's attention rows worst |diff| %.2e, next-token probabilities %.2e; mask: worst row "
                  "sum error %.2e, %lld nonzero cells above the diagonal of %lld\n",
                  arch, worst_att, worst_prob, mc.mask_row_error, (long long)mc.mask_upper_nonzero,
                  (long long)mc.mask_cells);
    if (worst_att > DECODER_WEIGHT_ABS_FAIL) fail_msg("%s: attention rows differ by %.3g", arch, worst_att);
    if (worst_prob > CHAPTER_PROB_ABS_FAIL) fail_msg("%s: probabilities differ by %.3g", arch, worst_prob);
    assert_int_equal(mc.mask_upper_nonzero, 0);
    assert_true(mc.mask_row_error < CHAPTER_ROW_SUM_FAIL);
    model_chapter_free(&mc);
    attn_tokenizer_free(t);
    attn_decoder_free(m);
    attn_gguf_free(g);
}

static void test_qwen2_against_transformers(void **state) {
    (void)state;
    check_model(QWEN, "qwen2");
}

static void test_gemma3_against_transformers(void **state) {
    (void)state;
    check_model(GEMMA, "gemma3");
}

/* Runs `attn <args>` once and checks its status and every needle (NULL
 * ends the list): each model run loads 1 to 2.4 GiB of weights. */
static void assert_cli_all(int want_status, const char *args, const char *const *needles) {
    char *out;
    const int status = test_run_cli(&out, "%s", args);
    if (status != want_status) {
        print_message("%s\n", out);
        free(out);
        fail_msg("attn %s: status %d (expected %d)", args, status, want_status);
    }
    for (const char *const *n = needles; *n; n++)
        if (!strstr(out, *n)) {
            print_message("%s\n", out);
            free(out);
            fail_msg("attn %s: the output lacks '%s'", args, *n);
        }
    free(out);
}

/* The program on the real models: English on Qwen, Chinese on Gemma with
 * every head, and `attn model chapter` with a plot. */
static void test_cli_models(void **state) {
    (void)state;
    char args[2048];
    const char *qwen = test_model_or_skip(QWEN), *gemma = test_model_or_skip(GEMMA);
    static const char *const en[] = {"苹果 is token 104167 in both sentences (position 3 and position 4)",
                                     "identical, bit for bit", "final norm        0.5545", "\"公司\"",
                                     "kv head 1 <- query heads 7..13", "16 query heads, 8 key/value heads",
                                     "cells above the diagonal that are not 0: 0.", "(skipped: --no-cost)",
                                     "苹果: context, not noise.  After the final norm the two senses end at 0.5545",
                                     "bank: context, not noise.", NULL};
    snprintf(args, sizeof args, "demo --model %s --lang en --no-cost", qwen);
    assert_cli_all(0, args, en);
    static const char *const zh[] = {"苹果 在两个句子里都是词元 68004（位置 4 与位置 5）", "逐位相同",
                                     "头 3（kv 0）", "对角线以上不为 0 的格：0。", "（已跳过：--no-cost）",
                                     "苹果：差距太小，说明不了什么。最终归一化之后两个义项的余弦是 0.8980", NULL};
    snprintf(args, sizeof args, "demo --model %s --lang zh --no-cost --heads", gemma);
    assert_cli_all(0, args, zh);
    if (!attn_pictures_available()) return;
    char plot[600];
    snprintf(plot, sizeof plot, "%s/cosine.svg", test_tmpdir());
    /* With the cost table (§6) where the forward is not slowed by a sanitizer. */
    snprintf(args, sizeof args, "model chapter %s --lang en --plot %s%s", gemma, plot, UNDER_SANITIZER ? " --no-cost" : "");
    const char *const wrote[] = {"wrote ", UNDER_SANITIZER ? "(skipped: --no-cost)" : "Twice the tokens: 4.00× the score cells",
                                 NULL};
    assert_cli_all(0, args, wrote);
    struct stat st;
    assert_int_equal(stat(plot, &st), 0);
    assert_true(st.st_size > 1000);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_causal_checker),
        cmocka_unit_test(test_top_k),
        cmocka_unit_test(test_gap_ratio),
        cmocka_unit_test(test_cli_errors),
        cmocka_unit_test(test_qwen2_against_transformers),
        cmocka_unit_test(test_gemma3_against_transformers),
        cmocka_unit_test(test_cli_models),
    };
    test_suppress_picture_leaks_in_children();
    return cmocka_run_group_tests(tests, NULL, test_group_teardown);
}
