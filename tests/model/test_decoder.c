/*
 * test_decoder.c — the decoder (attn_decoder.h).
 *
 * Without models (always run): tiny qwen2- and gemma3-shaped GGUF files
 * built in memory (support/tiny_model.h) with random float32 weights, the
 * decoder's forward against a straightforward oracle written here in
 * double (RMSNorm, RoPE by its formula, causal / sliding-window softmax
 * with explicit loops, GQA by h / (Hq / Hkv), SwiGLU / GeGLU); the
 * configuration read from the metadata (Gemma's layer pattern, the local
 * theta); the errors (a missing key named, a tensor of the wrong dims
 * named, an id outside the vocabulary, a hook that stops the forward).
 *
 * With the real models (skipped with a message when absent): every layer's
 * residual stream, some layers' attention maps and the top next tokens at
 * every position against Hugging Face transformers' float32 eager forward
 * of the same GGUF files (tests/fixtures/decoder/, made by
 * scripts/models/make_decoder_fixtures.py).  Under a sanitizer only the
 * shortest sequence of each model runs (the forward is ~20x slower there).
 */
#include "cli_files.h"
#include "testutil.h"
#include "models.h"
#include "tolerances.h"

#include "attn.h"
#include "attn_decoder.h"
#include "attn_gguf.h"
#include "attn_io.h"
#include "tiny_model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define FIXTURES ATTN_SOURCE_DIR "/tests/fixtures/decoder"

/* ====================================================== a tiny model in memory */

/* ------------------------------------------------------------- the oracle
 * Everything in double, each step as the Hugging Face modeling code writes
 * it, on the same float32 weights.  Shapes as the decoder's. */

static void o_rmsnorm(double *x, int64_t n, const float *w) {
    double ss = 0;
    for (int64_t i = 0; i < n; i++) ss += x[i] * x[i];
    const double inv = 1.0 / sqrt(ss / (double)n + 1e-6);
    for (int64_t i = 0; i < n; i++) x[i] = x[i] * inv * w[i];
}

/* y[o] = sum_i x[i] W[o, i] + b[o], W [d_out, d_in] as GGUF stores it. */
static void o_linear(const double *x, int64_t d_in, const float *w, const float *b, int64_t d_out, double *y) {
    for (int64_t o = 0; o < d_out; o++) {
        double s = b ? b[o] : 0.0;
        for (int64_t i = 0; i < d_in; i++) s += x[i] * w[o * d_in + i];
        y[o] = s;
    }
}

/* NeoX ("rotate half") RoPE of one head's row at position p. */
static void o_rope(double *x, int64_t Dh, int64_t p, double theta) {
    const int64_t F = Dh / 2;
    for (int64_t f = 0; f < F; f++) {
        const double angle = (double)p * pow(theta, -2.0 * (double)f / (double)Dh);
        const double a = x[f], b = x[f + F];
        x[f] = a * cos(angle) - b * sin(angle);
        x[f + F] = b * cos(angle) + a * sin(angle);
    }
}

/* logits [L, V] and, if wanted, hidden [N + 1, L, d] and attention [N][Hq, L, L]. */
static void oracle_forward(const tiny_model *m, const int32_t *ids, int64_t L, double *logits, double *hidden,
                           double *attention) {
    const tiny_spec *s = &m->spec;
    const int gemma = strcmp(s->arch, "gemma3") == 0;
    const int64_t d = s->d, Hq = s->Hq, Hkv = s->Hkv, Dh = s->Dh, F = s->F, qw = Hq * Dh, kvw = Hkv * Dh;
    double *x = calloc((size_t)(L * d), sizeof(double)), *h = calloc((size_t)d, sizeof(double));
    double *q = calloc((size_t)(L * qw), sizeof(double)), *k = calloc((size_t)(L * kvw), sizeof(double));
    double *v = calloc((size_t)(L * kvw), sizeof(double)), *a = calloc((size_t)qw, sizeof(double));
    double *o = calloc((size_t)d, sizeof(double)), *g = calloc((size_t)F, sizeof(double));
    double *u = calloc((size_t)F, sizeof(double)), *p = calloc((size_t)L, sizeof(double));
    double *att_out = calloc((size_t)(L * d), sizeof(double)); /* every position's attention output, [L, d] */
    const float *embd = tiny_get(m, "token_embd.weight", 0);
    for (int64_t t = 0; t < L; t++)
        for (int64_t i = 0; i < d; i++)
            x[t * d + i] = embd[ids[t] * d + i] * (gemma ? (double)(float)sqrt((double)d) : 1.0);
    if (hidden) memcpy(hidden, x, (size_t)(L * d) * sizeof(double));
    for (int64_t l = 0; l < s->n_layers; l++) {
        const int local = gemma && s->sliding_window && (l + 1) % 6 != 0;
        const double theta = local ? 1e4 : (double)1e6f;
        for (int64_t t = 0; t < L; t++) {
            memcpy(h, x + t * d, (size_t)d * sizeof(double));
            o_rmsnorm(h, d, tiny_get(m, "blk.%lld.attn_norm.weight", l));
            o_linear(h, d, tiny_get(m, "blk.%lld.attn_q.weight", l), tiny_get(m, "blk.%lld.attn_q.bias", l), qw,
                     q + t * qw);
            o_linear(h, d, tiny_get(m, "blk.%lld.attn_k.weight", l), tiny_get(m, "blk.%lld.attn_k.bias", l), kvw,
                     k + t * kvw);
            o_linear(h, d, tiny_get(m, "blk.%lld.attn_v.weight", l), tiny_get(m, "blk.%lld.attn_v.bias", l), kvw,
                     v + t * kvw);
            for (int64_t hh = 0; hh < Hq; hh++) {
                if (gemma) o_rmsnorm(q + t * qw + hh * Dh, Dh, tiny_get(m, "blk.%lld.attn_q_norm.weight", l));
                o_rope(q + t * qw + hh * Dh, Dh, t, theta);
            }
            for (int64_t hh = 0; hh < Hkv; hh++) {
                if (gemma) o_rmsnorm(k + t * kvw + hh * Dh, Dh, tiny_get(m, "blk.%lld.attn_k_norm.weight", l));
                o_rope(k + t * kvw + hh * Dh, Dh, t, theta);
            }
        }
        for (int64_t t = 0; t < L; t++) {
            for (int64_t hh = 0; hh < Hq; hh++) {
                const int64_t kvh = hh / (Hq / Hkv);
                double max = -INFINITY, sum = 0;
                for (int64_t j = 0; j < L; j++) {
                    const int visible = j <= t && !(local && t - j >= s->sliding_window);
                    p[j] = -INFINITY;
                    if (!visible) continue;
                    double dot = 0;
                    for (int64_t e = 0; e < Dh; e++) dot += q[t * qw + hh * Dh + e] * k[j * kvw + kvh * Dh + e];
                    p[j] = dot / sqrt((double)Dh);
                    if (p[j] > max) max = p[j];
                }
                for (int64_t j = 0; j < L; j++) sum += (p[j] = p[j] == -INFINITY ? 0.0 : exp(p[j] - max));
                for (int64_t e = 0; e < Dh; e++) {
                    double z = 0;
                    for (int64_t j = 0; j < L; j++) z += p[j] / sum * v[j * kvw + kvh * Dh + e];
                    a[hh * Dh + e] = z;
                }
                if (attention)
                    for (int64_t j = 0; j < L; j++) attention[((l * Hq + hh) * L + t) * L + j] = p[j] / sum;
            }
            o_linear(a, qw, tiny_get(m, "blk.%lld.attn_output.weight", l), NULL, d, att_out + t * d);
            if (gemma) o_rmsnorm(att_out + t * d, d, tiny_get(m, "blk.%lld.post_attention_norm.weight", l));
        }
        for (int64_t t = 0; t < L; t++) {
            for (int64_t i = 0; i < d; i++) x[t * d + i] += att_out[t * d + i];
            memcpy(h, x + t * d, (size_t)d * sizeof(double));
            o_rmsnorm(h, d, tiny_get(m, "blk.%lld.ffn_norm.weight", l));
            o_linear(h, d, tiny_get(m, "blk.%lld.ffn_gate.weight", l), NULL, F, g);
            o_linear(h, d, tiny_get(m, "blk.%lld.ffn_up.weight", l), NULL, F, u);
            for (int64_t i = 0; i < F; i++) {
                const double z = g[i];
                const double act = gemma ? 0.5 * z * (1.0 + tanh(sqrt(2.0 / 3.14159265358979323846) * (z + 0.044715 * z * z * z)))
                                         : z / (1.0 + exp(-z));
                g[i] = act * u[i];
            }
            o_linear(g, F, tiny_get(m, "blk.%lld.ffn_down.weight", l), NULL, d, o);
            if (gemma) o_rmsnorm(o, d, tiny_get(m, "blk.%lld.post_ffw_norm.weight", l));
            for (int64_t i = 0; i < d; i++) x[t * d + i] += o[i];
        }
        if (hidden) memcpy(hidden + (l + 1) * L * d, x, (size_t)(L * d) * sizeof(double));
    }
    const float *out_w = tiny_get(m, gemma ? "token_embd.weight" : "output.weight", 0);
    for (int64_t t = 0; t < L; t++) {
        memcpy(h, x + t * d, (size_t)d * sizeof(double));
        o_rmsnorm(h, d, tiny_get(m, "output_norm.weight", 0));
        o_linear(h, d, out_w, NULL, s->V, logits + t * s->V);
    }
    free(x), free(h), free(q), free(k), free(v), free(a), free(o), free(g), free(u), free(p), free(att_out);
}

/* max |got - want| / max(1, max |want|) */
static double max_rel(const float *got, const double *want, int64_t n) {
    double scale = 1.0, worst = 0.0;
    for (int64_t i = 0; i < n; i++) scale = fmax(scale, fabs(want[i]));
    for (int64_t i = 0; i < n; i++) worst = fmax(worst, fabs((double)got[i] - want[i]));
    return worst / scale;
}

static void check_tiny_against_oracle(const tiny_spec *spec, int64_t L, uint64_t seed) {
    tiny_model m;
    tiny_build(&m, spec, seed);
    attn_decoder *dec = tiny_load(&m);
    const attn_decoder_config *c = attn_decoder_get_config(dec);
    int32_t ids[64];
    test_rng rng;
    test_rng_seed(&rng, seed + 1);
    for (int64_t t = 0; t < L; t++) ids[t] = (int32_t)test_rng_range(&rng, spec->V);
    const int64_t N = c->n_layers, d = c->d_model, V = c->vocab, Hq = c->n_heads;
    float *logits = malloc((size_t)(L * V) * sizeof(float)), *hidden = malloc((size_t)((N + 1) * L * d) * sizeof(float));
    float *att = malloc((size_t)(N * Hq * L * L) * sizeof(float));
    float *att_ptr[64];
    for (int64_t l = 0; l < N; l++) att_ptr[l] = att + l * Hq * L * L;
    double *w_logits = malloc((size_t)(L * V) * sizeof(double));
    double *w_hidden = malloc((size_t)((N + 1) * L * d) * sizeof(double));
    double *w_att = malloc((size_t)(N * Hq * L * L) * sizeof(double));
    attn_decoder_outputs out = ATTN_DECODER_OUTPUTS_INIT;
    out.logits = logits;
    out.hidden = hidden;
    out.attention = att_ptr;
    assert_ok(attn_decoder_forward(dec, ids, L, &out));
    oracle_forward(&m, ids, L, w_logits, w_hidden, w_att);
    const double e_hidden = max_rel(hidden, w_hidden, (N + 1) * L * d), e_logits = max_rel(logits, w_logits, L * V);
    double e_att = 0;
    for (int64_t i = 0; i < N * Hq * L * L; i++) e_att = fmax(e_att, fabs((double)att[i] - w_att[i]));
    print_message("%s, %lld layers, L %lld: hidden %.2e, logits %.2e (relative), attention %.2e (absolute)\n",
                  spec->arch, (long long)N, (long long)L, e_hidden, e_logits, e_att);
    if (e_hidden > DECODER_TINY_REL_FAIL || e_logits > DECODER_TINY_REL_FAIL || e_att > DECODER_TINY_WEIGHT_ABS_FAIL)
        fail_msg("the decoder differs from the oracle beyond the tolerances");
    /* The window hides the first key from the last query on local layers
     * only (the oracle agreeing is not enough if both ignored it). */
    if (spec->sliding_window && L > spec->sliding_window)
        for (int64_t l = 0; l < N; l++) {
            const float w0 = att_ptr[l][(L - 1) * L];
            if (attn_decoder_layer_is_local(c, l) ? w0 != 0.0f : !(w0 > 0.0f))
                fail_msg("layer %lld: weight of key 0 for the last query is %g", (long long)l, (double)w0);
        }
    /* Only the logits of the last position: the same numbers. */
    float *last = malloc((size_t)V * sizeof(float));
    attn_decoder_outputs only = ATTN_DECODER_OUTPUTS_INIT;
    only.logits = last;
    only.last_only = 1;
    assert_ok(attn_decoder_forward(dec, ids, L, &only));
    assert_memory_equal(last, logits + (L - 1) * V, (size_t)V * sizeof(float));
    free(last), free(logits), free(hidden), free(att), free(w_logits), free(w_hidden), free(w_att);
    attn_decoder_free(dec);
    tiny_free(&m);
}

static void test_tiny_qwen2_against_oracle(void **state) {
    (void)state;
    check_tiny_against_oracle(&TINY_QWEN, 9, 11);
    check_tiny_against_oracle(&TINY_QWEN, 1, 12);
}

static void test_tiny_gemma3_against_oracle(void **state) {
    (void)state;
    check_tiny_against_oracle(&TINY_GEMMA, 11, 21); /* L 11 > window 3: the window matters */
    check_tiny_against_oracle(&TINY_GEMMA, 2, 22);
}

static attn_status tiny_config(const tiny_spec *spec, attn_decoder_config *cfg, attn_decoder **dec) {
    tiny_model m;
    tiny_build(&m, spec, 5);
    attn_gguf *g;
    assert_ok(attn_gguf_parse(m.file.data, m.file.len, &g));
    attn_status st = attn_decoder_read_config(g, cfg);
    if (st == ATTN_OK && dec) st = attn_decoder_load(g, dec);
    attn_gguf_free(g);
    tiny_free(&m);
    return st;
}

static void test_config(void **state) {
    (void)state;
    attn_decoder_config c;
    assert_ok(tiny_config(&TINY_GEMMA, &c, NULL));
    assert_int_equal(c.arch, ATTN_DECODER_GEMMA3);
    assert_int_equal(c.head_dim, 8);
    assert_int_equal(c.n_kv_heads, 1);
    assert_int_equal(c.vocab, 29);
    assert_int_equal(c.sliding_window, 3);
    assert_true(c.qk_norm && c.post_norms && c.tied_embeddings && !c.qkv_bias);
    assert_true(c.rope_theta == (double)1e6f && c.rope_theta_local == 1e4);
    assert_true(c.embed_scale == (float)sqrt(12.0));
    char pattern[8] = {0};
    for (int l = 0; l < 7; l++) pattern[l] = attn_decoder_layer_is_local(&c, l) ? 'L' : 'G';
    assert_string_equal(pattern, "LLLLLGL");
    assert_ok(tiny_config(&TINY_QWEN, &c, NULL));
    assert_int_equal(c.arch, ATTN_DECODER_QWEN2);
    assert_int_equal(c.head_dim, 4); /* d / Hq: no key_length key */
    assert_true(c.qkv_bias && !c.qk_norm && !c.tied_embeddings && c.sliding_window == 0);
    assert_true(c.embed_scale == 1.0f && c.attn_scale == 0.5f);
    assert_false(attn_decoder_layer_is_local(&c, 0));
}

/* The architectures the decoder lists (attn_decoder_architecture, from
 * src/model/arch.c's table): each one's GGUF metadata is read under its name,
 * and the refusal of any other architecture names every one of them. */
static void test_architectures(void **state) {
    (void)state;
    const char *want[] = {"qwen2", "qwen3", "gemma3", "llama"};
    const int n = (int)(sizeof want / sizeof want[0]);
    for (int i = 0; i < n; i++) assert_string_equal(attn_decoder_architecture(i), want[i]);
    assert_null(attn_decoder_architecture(n));
    assert_null(attn_decoder_architecture(-1));
    attn_decoder_config c;
    tiny_spec s = TINY_QWEN;
    s.arch = "phi3";
    assert_int_equal(tiny_config(&s, &c, NULL), ATTN_ERR_UNSUPPORTED);
    char message[512];
    snprintf(message, sizeof message, "%s", attn_last_error());
    for (int i = 0; attn_decoder_architecture(i); i++) {
        const char *name = attn_decoder_architecture(i);
        if (!strstr(message, name)) fail_msg("'%s' is not in: %s", name, message);
        s = TINY_QWEN;
        s.arch = name;
        assert_ok(tiny_config(&s, &c, NULL));
        assert_string_equal(c.architecture, name);
    }
    assert_non_null(strstr(message, "qwen2, qwen3, gemma3 and llama"));
}

static void test_errors(void **state) {
    (void)state;
    attn_decoder_config c;
    attn_decoder *dec = NULL;
    tiny_spec s = TINY_QWEN;
    s.omit_key = "attention.head_count";
    assert_refused(tiny_config(&s, &c, NULL), ATTN_ERR_FORMAT, "qwen2.attention.head_count");
    s = TINY_GEMMA;
    s.omit_key = "block_count";
    assert_refused(tiny_config(&s, &c, NULL), ATTN_ERR_FORMAT, "gemma3.block_count");
    s = TINY_QWEN;
    s.arch = "phi3";
    assert_refused(tiny_config(&s, &c, NULL), ATTN_ERR_UNSUPPORTED, "phi3");
    s = TINY_QWEN;
    s.bad_tensor = "blk.1.attn_k.weight";
    assert_refused(tiny_config(&s, &c, &dec), ATTN_ERR_FORMAT, "blk.1.attn_k.weight");
    assert_null(dec);

    assert_ok(tiny_config(&TINY_QWEN, &c, &dec));
    const int32_t bad[3] = {1, 37, 2};
    float logits[37];
    attn_decoder_outputs out = ATTN_DECODER_OUTPUTS_INIT;
    out.logits = logits;
    out.last_only = 1;
    assert_refused(attn_decoder_forward(dec, bad, 3, &out), ATTN_ERR_INVALID_ARGUMENT, "token 1 is id 37");
    assert_refused(attn_decoder_forward(dec, bad, 0, &out), ATTN_ERR_SHAPE, "0 tokens");
    attn_decoder_outputs old = out;
    old.struct_size = 0;
    assert_refused(attn_decoder_forward(dec, bad, 1, &old), ATTN_ERR_INVALID_ARGUMENT, "ATTN_DECODER_OUTPUTS_INIT");
    attn_decoder_free(dec);
}

/* m's bytes through the GGUF loader. */
static attn_status load_tiny(const tiny_model *m, attn_decoder **dec) {
    attn_gguf *g = NULL;
    *dec = NULL;
    attn_status st = attn_gguf_parse(m->file.data, m->file.len, &g);
    if (!st) st = attn_decoder_load(g, dec);
    attn_gguf_free(g);
    return st;
}

/* Issue 38's refusals: a file holding more or less than its configuration
 * describes, damaged weights, logits that overflowed. */
static void test_limits(void **state) {
    (void)state;
    tiny_model m;
    attn_decoder *dec = NULL;
    /* A stray tensor. */
    tiny_build(&m, &TINY_QWEN, 5);
    assert_ok(load_tiny(&m, &dec));
    attn_decoder_free(dec);
    tiny_tensor *extra = &m.t[m.n++];
    snprintf(extra->name, sizeof extra->name, "blk.1.attn_gate.weight");
    extra->d0 = 4, extra->d1 = 1;
    extra->data = calloc(4, sizeof(float));
    tiny_write(&m);
    assert_refused(load_tiny(&m, &dec), ATTN_ERR_FORMAT,
                   "1 tensor is used by no part of the model ('blk.1.attn_gate.weight'): a file with tensors its "
                   "configuration does not describe is refused");
    assert_null(dec);
    tiny_free(&m);
    /* block_count smaller than the layers in the file (Gemma's 17 of 18). */
    tiny_build(&m, &TINY_QWEN, 5);
    m.spec.n_layers = 2;
    tiny_write(&m);
    assert_refused(load_tiny(&m, &dec), ATTN_ERR_FORMAT,
                   "12 tensors are used by no layer ('blk.2.attn_norm.weight', 'blk.2.attn_q.weight', "
                   "'blk.2.attn_k.weight', ...): the file holds layers 0..2, but qwen2.block_count is 2");
    tiny_free(&m);
    /* A layer with a missing tensor. */
    tiny_build(&m, &TINY_QWEN, 5);
    for (int i = 0; i < m.n; i++)
        if (strcmp(m.t[i].name, "blk.1.ffn_up.weight") == 0) {
            free(m.t[i].data);
            m.t[i] = m.t[--m.n];
        }
    tiny_write(&m);
    assert_refused(load_tiny(&m, &dec), ATTN_ERR_FORMAT, "no tensor 'blk.1.ffn_up.weight'");
    tiny_free(&m);
    /* NaN and infinite weights, named with their row (GGUF rows: dims[0]
     * elements each). */
    tiny_build(&m, &TINY_QWEN, 5);
    float *wk = (float *)tiny_get(&m, "blk.%lld.attn_k.weight", 1);
    wk[3 * TINY_QWEN.d + 5] = NAN;
    wk[4 * TINY_QWEN.d] = INFINITY;
    tiny_write(&m);
    assert_refused(load_tiny(&m, &dec), ATTN_ERR_FORMAT,
                   "tensor 'blk.1.attn_k.weight' holds NaN at row 3, column 5 (2 non-finite values from that row on)");
    {   /* The float32 twin finds them as it converts: the same words. */
        attn_gguf *g = NULL;
        attn_decoder_options opt = ATTN_DECODER_OPTIONS_INIT;
        opt.weights = ATTN_WEIGHTS_F32;
        assert_ok(attn_gguf_parse(m.file.data, m.file.len, &g));
        assert_refused(attn_decoder_load_with(g, &opt, &dec), ATTN_ERR_FORMAT,
                       "tensor 'blk.1.attn_k.weight' holds NaN at row 3, column 5 (2 non-finite values from that row "
                       "on)");
        attn_gguf_free(g);
    }
    wk[3 * TINY_QWEN.d + 5] = 0.0f;
    tiny_write(&m);
    assert_refused(load_tiny(&m, &dec), ATTN_ERR_FORMAT, "tensor 'blk.1.attn_k.weight' holds +inf at row 4, column 0");
    tiny_free(&m);
    /* Finite weights whose logits overflow: refused, never handed on. */
    tiny_build(&m, &TINY_QWEN, 5);
    float *head = (float *)tiny_get(&m, "output.weight", 0);
    for (int64_t i = 0; i < TINY_QWEN.d * TINY_QWEN.V; i++) head[i] = 3e38f;
    tiny_write(&m);
    assert_ok(load_tiny(&m, &dec));
    const int32_t ids[2] = {1, 2};
    float logits[2 * 37];
    attn_decoder_outputs out = ATTN_DECODER_OUTPUTS_INIT;
    out.logits = logits;
    assert_refused(attn_decoder_forward(dec, ids, 2, &out), ATTN_ERR_FORMAT, "attn_decoder_forward: the logit of "
                   "token id 0 at position 0 is");
    assert_non_null(strstr(attn_last_error(), "overflowed float32"));
    /* The same through a session's step: the sampler never sees them. */
    attn_decoder_session *session = NULL;
    attn_decoder_session_options so = ATTN_DECODER_SESSION_OPTIONS_INIT;
    so.capacity = 4;
    assert_ok(attn_decoder_session_new(dec, &so, &session));
    assert_refused(attn_decoder_step(session, ids, 2, logits), ATTN_ERR_FORMAT, "the logit of token id 0 at position");
    attn_decoder_session_free(session);
    attn_decoder_free(dec);
    tiny_free(&m);
}

/* A matrix stored in a type no kernel takes (I32: 4 bytes an element, so the
 * file's extents are unchanged) is refused at load, naming the tensor and
 * the type; the float32 twin refuses it too (the reader cannot convert it),
 * and the options are checked. */
static void test_stored_types(void **state) {
    (void)state;
    tiny_model m;
    tiny_build(&m, &TINY_QWEN, 5);
    const char *name = "blk.1.attn_q.weight";
    unsigned char *p = NULL;
    for (size_t i = 0; !p && i + strlen(name) <= m.file.len; i++)
        if (memcmp((unsigned char *)m.file.data + i, name, strlen(name)) == 0) p = (unsigned char *)m.file.data + i;
    assert_non_null(p);
    /* name, then n_dims (u32 2), dims (2 u64), then the type (u32). */
    uint32_t n_dims, type = 26; /* GGUF's I32 */
    memcpy(&n_dims, p + strlen(name), 4);
    assert_int_equal(n_dims, 2);
    memcpy(p + strlen(name) + 4 + 16, &type, 4);
    attn_gguf *g;
    attn_decoder *dec = NULL;
    assert_ok(attn_gguf_parse(m.file.data, m.file.len, &g));
    assert_refused(attn_decoder_load(g, &dec), ATTN_ERR_UNSUPPORTED, "'blk.1.attn_q.weight' is stored as I32");
    assert_null(dec);
    attn_decoder_options opt = ATTN_DECODER_OPTIONS_INIT;
    opt.weights = ATTN_WEIGHTS_F32;
    assert_true(attn_decoder_load_with(g, &opt, &dec) != ATTN_OK);
    assert_null(dec);
    opt.weights = (attn_decoder_weights)7;
    assert_refused(attn_decoder_load_with(g, &opt, &dec), ATTN_ERR_INVALID_ARGUMENT, "weights is 7");
    opt.weights = ATTN_WEIGHTS_STORED;
    opt.precision = (attn_precision)9;
    assert_refused(attn_decoder_load_with(g, &opt, &dec), ATTN_ERR_INVALID_ARGUMENT, "precision is 9");
    attn_gguf_free(g);
    tiny_free(&m);

    /* Stored and float32 weights of an F32 file: the same model, the
     * stored one holding the file's bytes (the buffer copied, then freed
     * by the caller before the forward). */
    tiny_build(&m, &TINY_GEMMA, 6);
    attn_decoder *stored, *f32;
    assert_ok(attn_gguf_parse(m.file.data, m.file.len, &g));
    assert_ok(attn_decoder_load(g, &stored));
    opt.precision = ATTN_PRECISION_EXACT;
    opt.weights = ATTN_WEIGHTS_F32;
    assert_ok(attn_decoder_load_with(g, &opt, &f32));
    attn_gguf_free(g);
    tiny_free(&m);
    const int32_t ids[5] = {1, 7, 3, 20, 2};
    float a[5 * 29], b[5 * 29];
    attn_decoder_outputs out = ATTN_DECODER_OUTPUTS_INIT;
    out.logits = a;
    assert_ok(attn_decoder_forward(stored, ids, 5, &out));
    out.logits = b;
    assert_ok(attn_decoder_forward(f32, ids, 5, &out));
    double diff = 0.0, scale = 1.0;
    for (int i = 0; i < 5 * 29; i++) diff = fmax(diff, fabs((double)a[i] - b[i])), scale = fmax(scale, fabs((double)b[i]));
    print_message("tiny gemma3, stored against float32 weights: logits relative %.2e\n", diff / scale);
    assert_true(diff / scale < 1e-5);
    assert_true(attn_decoder_weight_bytes(stored) == attn_decoder_weight_bytes(f32)); /* F32 either way */
    attn_decoder_free(stored);
    attn_decoder_free(f32);
}

/* Every weight by its GGUF name (attn_decoder_weight) equals the file's
 * float32 tensor, with stored and float32 weights; the tied head reads the
 * embedding; what is not a weight of the model is refused by name. */
static void test_weight_by_name(void **state) {
    (void)state;
    const tiny_spec *specs[] = {&TINY_QWEN, &TINY_GEMMA};
    for (size_t k = 0; k < 2; k++)
        for (int as_f32 = 0; as_f32 < 2; as_f32++) {
            tiny_model m;
            tiny_build(&m, specs[k], 11);
            attn_gguf *g;
            attn_decoder *dec;
            attn_decoder_options opt = ATTN_DECODER_OPTIONS_INIT;
            opt.weights = as_f32 ? ATTN_WEIGHTS_F32 : ATTN_WEIGHTS_STORED;
            assert_ok(attn_gguf_parse(m.file.data, m.file.len, &g));
            assert_ok(attn_decoder_load_with(g, &opt, &dec));
            attn_gguf_free(g);
            for (int i = 0; i < m.n; i++) {
                const tiny_tensor *t = &m.t[i];
                int64_t rows = -1, cols = -1;
                assert_ok(attn_decoder_weight(dec, t->name, NULL, 0, &rows, &cols));
                if (rows != t->d1 * t->d0 / cols || cols != (t->d1 == 1 ? 1 : t->d0))
                    fail_msg("%s: %lld x %lld, the file's dims %lld, %lld", t->name, (long long)rows, (long long)cols,
                             (long long)t->d0, (long long)t->d1);
                float *got = malloc((size_t)(rows * cols) * sizeof *got);
                assert_ok(attn_decoder_weight(dec, t->name, got, rows * cols, &rows, &cols));
                assert_memory_equal(got, t->data, (size_t)(rows * cols) * sizeof *got);
                assert_refused(attn_decoder_weight(dec, t->name, got, rows * cols - 1, &rows, &cols), ATTN_ERR_SHAPE,
                               t->name);
                free(got);
            }
            const attn_decoder_config *c = attn_decoder_get_config(dec);
            int64_t rows, cols;
            if (!tiny_get(&m, "output.weight", 0)) {
                /* tied: the head is the embedding */
                float *head = malloc((size_t)(c->vocab * c->d_model) * sizeof *head);
                assert_ok(attn_decoder_weight(dec, "output.weight", head, c->vocab * c->d_model, &rows, &cols));
                assert_memory_equal(head, tiny_get(&m, "token_embd.weight", 0), (size_t)(rows * cols) * sizeof *head);
                free(head);
                assert_refused(attn_decoder_weight(dec, "blk.0.attn_q.bias", NULL, 0, &rows, &cols),
                               ATTN_ERR_INVALID_ARGUMENT, "has no blk.0.attn_q.bias");
            }
            assert_refused(attn_decoder_weight(dec, "blk.99.attn_q.weight", NULL, 0, &rows, &cols),
                           ATTN_ERR_INVALID_ARGUMENT, "layers");
            assert_refused(attn_decoder_weight(dec, "model.norm.weight", NULL, 0, &rows, &cols),
                           ATTN_ERR_INVALID_ARGUMENT, "'model.norm.weight' is not a weight name");
            assert_refused(attn_decoder_weight(dec, "blk.x.attn_q.weight", NULL, 0, &rows, &cols),
                           ATTN_ERR_INVALID_ARGUMENT, "is not a weight name");
            assert_refused(attn_decoder_weight(dec, NULL, NULL, 0, &rows, &cols), ATTN_ERR_INVALID_ARGUMENT,
                           "name is NULL");
            attn_decoder_free(dec);
            tiny_free(&m);
        }
}

typedef struct hook_log {
    int64_t calls, stop_after;
    double first_value;
} hook_log;

static int count_layers(void *user, int64_t layer, const float *hidden, int64_t L, int64_t d) {
    hook_log *log = user;
    (void)L, (void)d;
    if (log->calls++ == 0) log->first_value = hidden[0];
    return layer == log->stop_after;
}

static void test_hook(void **state) {
    (void)state;
    attn_decoder_config c;
    attn_decoder *dec;
    assert_ok(tiny_config(&TINY_QWEN, &c, &dec));
    const int32_t ids[4] = {3, 1, 4, 1};
    float hidden[4 * 4 * 16];
    hook_log log = {0, -1, 0};
    attn_decoder_outputs out = ATTN_DECODER_OUTPUTS_INIT;
    out.hidden = hidden;
    out.hook = count_layers;
    out.hook_user = &log;
    assert_ok(attn_decoder_forward(dec, ids, 4, &out));
    assert_int_equal(log.calls, 3);
    assert_true(log.first_value == (double)hidden[4 * 16]); /* row 1 of hidden: after layer 0 */
    log = (hook_log){0, 1, 0};
    assert_refused(attn_decoder_forward(dec, ids, 4, &out), ATTN_ERR_INVALID_ARGUMENT, "after layer 1");
    assert_int_equal(log.calls, 2);
    attn_decoder_free(dec);
}

/* ========================================================= attn model (CLI) */

static void test_cli(void **state) {
    (void)state;
    tiny_model m;
    tiny_build(&m, &TINY_GEMMA, 31);
    const char *path = test_path("tiny-gemma3.gguf");
    char file[600];
    snprintf(file, sizeof file, "%s", path);
    assert_int_equal(test_write_file(file, m.file.data, m.file.len), 0);
    test_cli_expect(0, "query heads 0..1", "model info %s", file);
    test_cli_expect(0, "LLLLLGL", "model info %s", file);
    test_cli_expect(0, "10000 on local ones", "model info %s", file);

    /* The CLI's top token is the decoder's argmax. */
    attn_decoder *dec = tiny_load(&m);
    const int32_t ids[3] = {2, 7, 1};
    float logits[29];
    attn_decoder_outputs out = ATTN_DECODER_OUTPUTS_INIT;
    out.logits = logits;
    out.last_only = 1;
    assert_ok(attn_decoder_forward(dec, ids, 3, &out));
    int best = 0;
    for (int i = 1; i < 29; i++)
        if (logits[i] > logits[best]) best = i;
    char want[64];
    snprintf(want, sizeof want, "\n1     %8d", best);
    test_cli_expect(0, want, "model run %s --ids 2,7,1 --top 3", file);
    test_cli_expect(0, "after layer l", "model run %s --ids 2,7,1 --layer-norms", file);
    attn_decoder_free(dec);

    test_cli_expect(0, "usage: attn model info", "model --help%s", "");
    test_cli_expect(2, "element 1 is 'x'", "model run %s --ids 2,x,1", file);
    test_cli_expect(2, "run needs --ids", "model run %s", file);
    test_cli_expect(2, "did you mean info", "model inof %s", file);
    test_cli_expect(1, "outside the vocabulary", "model run %s --ids 29", file);
    test_cli_expect(1, "no-such.gguf", "model info %s/no-such.gguf", test_tmpdir());
    tiny_free(&m);
}

/* ======================================================== the real models */

static attn_array load_fixture(const char *arch, const char *seq, const char *what, attn_dtype dtype) {
    char path[768];
    snprintf(path, sizeof path, FIXTURES "/%s/%s_%s.npy", arch, seq, what);
    return test_load_array(path, dtype);
}

static int fixture_exists(const char *arch, const char *seq, const char *what) {
    char path[768];
    snprintf(path, sizeof path, FIXTURES "/%s/%s_%s.npy", arch, seq, what);
    struct stat st;
    return stat(path, &st) == 0;
}

/* Compares one sequence's forward with the fixture; prints the per-layer
 * agreement. */
static void check_sequence(const attn_decoder *dec, const char *arch, const char *seq) {
    const attn_decoder_config *c = attn_decoder_get_config(dec);
    const int64_t N = c->n_layers, d = c->d_model, V = c->vocab, Hq = c->n_heads;
    attn_array ids64 = load_fixture(arch, seq, "ids", ATTN_I64);
    const int64_t L = ids64.count;
    int32_t *ids = malloc((size_t)L * sizeof *ids);
    for (int64_t t = 0; t < L; t++) ids[t] = (int32_t)((const int64_t *)ids64.data)[t];
    attn_array norms = load_fixture(arch, seq, "hidden_norms", ATTN_F32);
    attn_array dims = load_fixture(arch, seq, "hidden_dims", ATTN_I64);
    attn_array slice = load_fixture(arch, seq, "hidden_slice", ATTN_F32);
    attn_array layers = load_fixture(arch, seq, "attn_layers", ATTN_I64);
    attn_array ref_att = load_fixture(arch, seq, "attn", ATTN_F32);
    attn_array top_ids = load_fixture(arch, seq, "top_ids", ATTN_I64);
    attn_array top_logits = load_fixture(arch, seq, "top_logits", ATTN_F32);
    attn_array last = {0};
    const int have_last = fixture_exists(arch, seq, "hidden_last");
    if (have_last) last = load_fixture(arch, seq, "hidden_last", ATTN_F32);
    assert_int_equal(norms.shape[0], N + 1);
    assert_int_equal(norms.shape[1], L);
    const int64_t K = dims.count, A = layers.count, T = top_ids.shape[1];

    float *hidden = malloc((size_t)((N + 1) * L * d) * sizeof(float));
    float *logits = malloc((size_t)(L * V) * sizeof(float));
    float *att = calloc((size_t)(A * Hq * L * L), sizeof(float));
    float **att_ptr = calloc((size_t)N, sizeof *att_ptr);
    for (int64_t a = 0; a < A; a++) att_ptr[((const int64_t *)layers.data)[a]] = att + a * Hq * L * L;
    attn_decoder_outputs out = ATTN_DECODER_OUTPUTS_INIT;
    out.hidden = hidden;
    out.logits = logits;
    out.attention = att_ptr;
    const double t0 = test_now();
    assert_ok(attn_decoder_forward(dec, ids, L, &out));
    print_message("%s %s: %lld tokens, forward %.2f s\n", arch, seq, (long long)L, test_now() - t0);

    /* The residual stream: per layer, the worst position's error relative
     * to that position's rms (norm / sqrt(d)), over the sliced dims (and
     * every dim of the last position where the fixture has it), and the
     * norms' relative error. */
    const float *ref_norm = norms.data, *ref_slice = slice.data;
    const int64_t *dim = dims.data;
    double worst_rel = 0, worst_norm = 0;
    int64_t worst_layer = 0;
    print_message("  layer  max |diff|/rms  norm rel  (rms = |h| / sqrt(d) of HF's state at that position)\n");
    for (int64_t l = 0; l <= N; l++) {
        double layer_rel = 0, layer_norm = 0, layer_abs = 0;
        for (int64_t t = 0; t < L; t++) {
            const float *h = hidden + (l * L + t) * d;
            const double rn = ref_norm[l * L + t], rms = rn / sqrt((double)d);
            double ss = 0;
            for (int64_t i = 0; i < d; i++) ss += (double)h[i] * h[i];
            layer_norm = fmax(layer_norm, fabs(sqrt(ss) - rn) / rn);
            for (int64_t k = 0; k < K; k++) {
                const double diff = fabs((double)h[dim[k]] - ref_slice[(l * L + t) * K + k]);
                layer_abs = fmax(layer_abs, diff);
                layer_rel = fmax(layer_rel, diff / rms);
            }
            if (have_last && t == L - 1)
                for (int64_t i = 0; i < d; i++) {
                    const double diff = fabs((double)h[i] - ((const float *)last.data)[l * d + i]);
                    layer_abs = fmax(layer_abs, diff);
                    layer_rel = fmax(layer_rel, diff / rms);
                }
        }
        char label[24];
        if (l == 0) snprintf(label, sizeof label, "embed");
        else snprintf(label, sizeof label, "%lld", (long long)(l - 1));
        print_message("  %5s  %.2e (abs %.2e)  %.2e\n", label, layer_rel, layer_abs, layer_norm);
        if (layer_rel > worst_rel) worst_rel = layer_rel, worst_layer = l;
        worst_norm = fmax(worst_norm, layer_norm);
    }
    /* Attention maps: absolute (weights are <= 1). */
    double worst_att = 0;
    for (int64_t i = 0; i < A * Hq * L * L; i++)
        worst_att = fmax(worst_att, fabs((double)att[i] - ((const float *)ref_att.data)[i]));
    /* Next tokens: top-1 identical at every position, and the top-5 the
     * same set unless HF's 5th and 6th logits are closer than the logits'
     * tolerance (then either order is right). */
    const int64_t *ref_top = top_ids.data;
    const float *ref_top_logit = top_logits.data;
    double worst_logit = 0;
    for (int64_t t = 0; t < L; t++) {
        const float *z = logits + t * V;
        double scale = 1.0;
        for (int64_t j = 0; j < T; j++) {
            worst_logit = fmax(worst_logit, fabs((double)z[ref_top[t * T + j]] - ref_top_logit[t * T + j]));
            scale = fmax(scale, fabs(ref_top_logit[t * T + j]));
        }
        int64_t best = 0;
        for (int64_t i = 1; i < V; i++)
            if (z[i] > z[best]) best = i;
        if (best != ref_top[t * T])
            fail_msg("%s %s position %lld: next token %lld, HF's %lld", arch, seq, (long long)t, (long long)best,
                     (long long)ref_top[t * T]);
        const double gap = ref_top_logit[t * T + 4] - ref_top_logit[t * T + 5];
        /* Our 5th largest must be at least HF's 6th: else a token outside
         * HF's top 5 got into ours. */
        for (int64_t j = 0; j < 5; j++) {
            const int64_t id = ref_top[t * T + j];
            int64_t above = 0;
            for (int64_t i = 0; i < V; i++) above += z[i] > z[id];
            if (above >= 5 && gap > DECODER_LOGIT_REL_FAIL * scale)
                fail_msg("%s %s position %lld: HF's top-5 token %lld is rank %lld here", arch, seq, (long long)t,
                         (long long)id, (long long)above + 1);
        }
    }
    print_message("%s %s: hidden worst %.2e (row %lld: 0 the embeddings, l + 1 after layer l), norms %.2e, attention %.2e, top logits %.2e; "
                  "top-1 and top-5 match at all %lld positions\n",
                  arch, seq, worst_rel, (long long)worst_layer, worst_norm, worst_att, worst_logit, (long long)L);
    if (worst_rel > DECODER_HIDDEN_REL_FAIL) fail_msg("hidden states differ beyond %g", DECODER_HIDDEN_REL_FAIL);
    if (worst_norm > DECODER_NORM_REL_FAIL) fail_msg("norms differ beyond %g", DECODER_NORM_REL_FAIL);
    if (worst_att > DECODER_WEIGHT_ABS_FAIL) fail_msg("attention maps differ beyond %g", DECODER_WEIGHT_ABS_FAIL);
    if (worst_logit > DECODER_LOGIT_ABS_FAIL) fail_msg("logits differ beyond %g", DECODER_LOGIT_ABS_FAIL);
    free(ids), free(hidden), free(logits), free(att), free(att_ptr);
    attn_array *all[] = {&ids64, &norms, &dims, &slice, &layers, &ref_att, &top_ids, &top_logits, &last};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) attn_array_free(all[i]);
}

static void check_model(const char *file, const char *arch) {
    const char *path = test_model_or_skip(file);
    if (!fixture_exists(arch, "zh", "ids")) {
        print_message("skipped: no fixtures in " FIXTURES "/%s (scripts/models/make_decoder_fixtures.py)\n", arch);
        skip();
    }
    attn_gguf *g;
    assert_ok(attn_gguf_open(path, &g));
    attn_decoder *dec;
    const double t0 = test_now();
    assert_ok(attn_decoder_load(g, &dec));
    print_message("%s: loaded in %.2f s, %.0f MiB of float32 weights\n", arch, test_now() - t0,
                  (double)attn_decoder_weight_bytes(dec) / 1048576.0);
    attn_gguf_free(g);
    static const char *const seqs[] = {"zh", "en", "code"};
    for (size_t i = 0; i < (UNDER_SANITIZER ? 1 : sizeof seqs / sizeof seqs[0]); i++) check_sequence(dec, arch, seqs[i]);
    attn_decoder_free(dec);
}

static void test_qwen2_against_transformers(void **state) {
    (void)state;
    check_model(TEST_QWEN_GGUF, "qwen2");
}

static void test_gemma3_against_transformers(void **state) {
    (void)state;
    check_model(TEST_GEMMA_GGUF, "gemma3");
}

/* Same bits for any thread count: the forward of decoders wide enough
 * that the projections and attention do split (2 MFLOP per thread is the
 * library's threshold), run with $ATTN_NUM_THREADS 1, 2 and 3, gives
 * identical logits and residual streams. */
static void test_same_bits_any_thread_count(void **state) {
    (void)state;
    static const tiny_spec wide_qwen = {"qwen2", 2, 256, 512, 8, 2, 32, 300, 0, 0, NULL, NULL};
    static const tiny_spec wide_gemma = {"gemma3", 7, 192, 384, 4, 1, 48, 300, 48, 16, NULL, NULL};
    const tiny_spec *specs[] = {&wide_qwen, &wide_gemma};
    const char *saved = getenv("ATTN_NUM_THREADS");
    char *keep = saved ? strdup(saved) : NULL;
    for (int m = 0; m < 2; m++) {
        attn_decoder *dec = tiny_decoder(specs[m], 91);
        assert_non_null(dec);
        const int64_t L = 48, V = specs[m]->V, d = specs[m]->d, N = specs[m]->n_layers;
        int32_t ids[48];
        for (int64_t t = 0; t < L; t++) ids[t] = (int32_t)((t * 37 + 5) % V);
        float *logits[3], *hidden[3];
        for (int r = 0; r < 3; r++) {
            char n[8];
            snprintf(n, sizeof n, "%d", r + 1);
            setenv("ATTN_NUM_THREADS", n, 1);
            logits[r] = malloc((size_t)(L * V) * sizeof(float));
            hidden[r] = malloc((size_t)((N + 1) * L * d) * sizeof(float));
            attn_decoder_outputs out = ATTN_DECODER_OUTPUTS_INIT;
            out.logits = logits[r];
            out.hidden = hidden[r];
            assert_ok(attn_decoder_forward(dec, ids, L, &out));
        }
        for (int r = 1; r < 3; r++) {
            assert_memory_equal(logits[r], logits[0], (size_t)(L * V) * sizeof(float));
            assert_memory_equal(hidden[r], hidden[0], (size_t)((N + 1) * L * d) * sizeof(float));
        }
        for (int r = 0; r < 3; r++) free(logits[r]), free(hidden[r]);
        attn_decoder_free(dec);
    }
    if (keep) setenv("ATTN_NUM_THREADS", keep, 1);
    else unsetenv("ATTN_NUM_THREADS");
    free(keep);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tiny_qwen2_against_oracle),
        cmocka_unit_test(test_tiny_gemma3_against_oracle),
        cmocka_unit_test(test_same_bits_any_thread_count),
        cmocka_unit_test(test_config),
        cmocka_unit_test(test_architectures),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_stored_types),
        cmocka_unit_test(test_weight_by_name),
        cmocka_unit_test(test_hook),
        cmocka_unit_test(test_cli),
        cmocka_unit_test(test_qwen2_against_transformers),
        cmocka_unit_test(test_gemma3_against_transformers),
    };
    return cmocka_run_group_tests(tests, NULL, test_group_teardown);
}
