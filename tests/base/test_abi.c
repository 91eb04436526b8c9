/*
 * test_abi.c — the ABI rules of attn.h ("ABI") on every public struct and
 * function they cover:
 *   - struct_size: every struct a caller fills in is read by one rule.  A
 *     smaller size (a caller built against an older header) is read up to
 *     its size, the rest from the defaults, whatever lies beyond; a larger
 *     one (a newer header) is accepted when its unknown tail is zero and
 *     refused (ATTN_ERR_UNSUPPORTED) when it is not; 0 is refused naming the
 *     initialiser, and so is an implausible size (1 MiB), before anything
 *     beyond the caller's object is read (the buffers are malloc'd to their
 *     size, so AddressSanitizer sees any read past them).
 *   - NULL options: every function that takes an options struct computes,
 *     given NULL, exactly what it computes given the initialiser's struct.
 *   - the former names of the lifecycle functions (X_new / X_free since
 *     0.3) still link and do what the new names do, until 1.0.
 * (attn_ring_options, in libattn_mpi, goes through the same copy; the ring
 * is tested through mpirun in tests/dist.)
 */
#include "testutil.h"
#include "tiny_model.h"

#include "attn.h"
#include "attn_cache.h"
#include "attn_chat.h"
#include "attn_decoder.h"
#include "attn_interp.h"
#include "attn_io.h"
#include "attn_model.h"
#include "attn_npz.h"
#include "attn_rope.h"
#include "attn_safetensors.h"
#include "attn_viz.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* Under LeakSanitizer: the picture libraries' own leaks (testutil.h). */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) { return TEST_PICTURE_LIBRARY_LEAKS; }

/* ------------------------------------------------------------ the inputs */

/* One small problem every call below shares:
 *   q [1, 3, 2, 4]  k, v [1, 5, 1, 4]  (two query heads on one kv head). */
enum { L = 3, S = 5, HQ = 2, HKV = 1, D = 4, DM = HQ * D };
static float q_buf[L * HQ * D], k_buf[S * HKV * D], v_buf[S * HKV * D], dout_buf[L * HQ * D];
static float x_buf[L * DM], w_buf[DM * DM];
static attn_tensor q_t, k_t, v_t;
static attn_decoder *tiny;
static tiny_model tiny_file; /* its GGUF bytes, for attn_decoder_load_with */

static int setup(void **state) {
    (void)state;
    test_rng r;
    test_rng_seed(&r, 32);
    test_fill_normal(&r, q_buf, L * HQ * D, 1.0);
    test_fill_normal(&r, k_buf, S * HKV * D, 1.0);
    test_fill_normal(&r, v_buf, S * HKV * D, 1.0);
    test_fill_normal(&r, dout_buf, L * HQ * D, 1.0);
    test_fill_normal(&r, x_buf, L * DM, 1.0);
    test_fill_normal(&r, w_buf, DM * DM, 0.3);
    q_t = attn_tensor_4d(q_buf, 1, L, HQ, D);
    k_t = attn_tensor_4d(k_buf, 1, S, HKV, D);
    v_t = attn_tensor_4d(v_buf, 1, S, HKV, D);
    tiny = tiny_decoder(&TINY_QWEN, 3);
    tiny_build(&tiny_file, &TINY_QWEN, 3);
    return 0;
}

static int teardown(void **state) {
    attn_decoder_free(tiny);
    tiny_free(&tiny_file);
    return test_group_teardown(state);
}

static attn_mha module(void) {
    attn_mha m = ATTN_MHA_INIT;
    m.d_model = DM;
    m.heads = HQ;
    m.kv_heads = 1;
    m.head_dim = D;
    m.d_out = DM;
    m.wq = m.wo = w_buf;
    m.wk = m.wv = w_buf; /* [DM, D]: the first D columns' worth of rows */
    return m;
}

/* ================================================== the struct_size rule */

/* A public entry point run on the caller's struct s (its bytes as they
 * are, struct_size included). */
typedef attn_status (*struct_call)(const void *s);

typedef struct struct_case {
    const char *type;    /* "attn_sdpa_options"                            */
    const char *init;    /* what the refusal of 0 names                    */
    size_t size;         /* sizeof, this header's                          */
    size_t older;        /* the struct_size of a caller that knew less     */
    const void *valid;   /* a struct of size bytes the call accepts        */
    struct_call call;
} struct_case;

static void set_size(unsigned char *s, size_t size) { memcpy(s, &size, sizeof size); }

static void check_struct_size_rule(const struct_case *c) {
    enum { TAIL = 16 }; /* a newer header's fields */
    print_message("%s\n", c->type);
    assert_true(c->older >= sizeof(size_t) && c->older < c->size);
    unsigned char *s = malloc(c->size + TAIL);

    memcpy(s, c->valid, c->size);
    assert_ok(c->call(s));

    /* An older caller: its struct ends at older; what follows is not its
     * own (garbage here, which the library must not read). */
    memset(s + c->older, 0x7f, c->size + TAIL - c->older);
    set_size(s, c->older);
    assert_ok(c->call(s));

    /* A newer caller whose newer fields are unused, then set. */
    memcpy(s, c->valid, c->size);
    memset(s + c->size, 0, TAIL);
    set_size(s, c->size + TAIL);
    assert_ok(c->call(s));
    s[c->size + TAIL - 1] = 1;
    assert_refused(c->call(s), ATTN_ERR_UNSUPPORTED, "a field this library version does not have");
    assert_non_null(strstr(attn_last_error(), c->type));

    /* Zeroed (= {0}), and a size no struct ever had. */
    set_size(s, 0);
    assert_refused(c->call(s), ATTN_ERR_INVALID_ARGUMENT, c->init);
    set_size(s, (size_t)1 << 20);
    assert_refused(c->call(s), ATTN_ERR_INVALID_ARGUMENT, "struct_size is 1048576");
    free(s);
}

/* One call per struct; each frees what it made. */

static attn_status call_sdpa_options(const void *s) {
    float out_buf[L * HQ * D];
    attn_tensor out = attn_tensor_4d(out_buf, 1, L, HQ, D);
    return attn_sdpa_forward(&q_t, &k_t, &v_t, s, &out, NULL, NULL);
}

static attn_status call_sdpa_grads(const void *s) {
    const attn_tensor dout = attn_tensor_4d(dout_buf, 1, L, HQ, D);
    return attn_sdpa_backward_grads(&q_t, &k_t, &v_t, NULL, NULL, NULL, &dout, s);
}

static attn_status call_mha(const void *s) {
    float out[L * DM];
    return attn_mha_forward(s, x_buf, 1, L, NULL, 0, NULL, out, NULL, NULL);
}

static attn_status call_mha_grads(const void *s) {
    const attn_mha m = module();
    return attn_mha_backward(&m, x_buf, 1, L, NULL, 0, NULL, dout_buf, s);
}

static attn_status call_kv_cache_config(const void *s) {
    attn_kv_cache *c;
    attn_status st = attn_kv_cache_new(s, &c);
    attn_kv_cache_free(c);
    return st;
}

static attn_status call_rope_options(const void *s) {
    double inv_freq[D / 2];
    return attn_rope_frequencies(D, s, inv_freq, NULL);
}

static attn_status call_patch(const void *s) {
    float out_buf[L * HQ * D];
    attn_tensor out = attn_tensor_4d(out_buf, 1, L, HQ, D);
    return attn_sdpa_forward_traced(&q_t, &k_t, &v_t, NULL, s, 1, NULL, &out);
}

static const float ns_weights[3] = {0.5f, 0.25f, 0.25f}, ns_values[3] = {1.0f, 2.0f, 3.0f};

static attn_status call_nullspace_options(const void *s) {
    double moved[3];
    attn_nullspace_result result;
    return attn_nullspace_search(ns_weights, ns_values, 3, 1, NULL, s, moved, &result);
}

static const float map_weights[4] = {1.0f, 0.0f, 0.5f, 0.5f};

static attn_status call_heatmap_options(const void *s) {
    return attn_heatmap_write(test_path("abi.svg"), map_weights, 1, 2, 2, s);
}

static attn_status call_lineplot_options(const void *s) {
    const double y[3] = {0.1, 0.5, 0.2};
    return attn_lineplot_write(test_path("abi-line.svg"), y, 3, s);
}

static attn_status call_report(const void *s) { return attn_report_write_html(test_path("abi.html"), s); }

static const int32_t tiny_ids[2] = {1, 2};

static attn_status call_decoder_outputs(const void *s) {
    return attn_decoder_forward(tiny, tiny_ids, 2, (attn_decoder_outputs *)(uintptr_t)s);
}

static attn_status call_decoder_session_options(const void *s) {
    attn_decoder_session *session;
    attn_status st = attn_decoder_session_new(tiny, s, &session);
    if (st == ATTN_OK) st = attn_decoder_step(session, tiny_ids, 2, NULL);
    attn_decoder_session_free(session);
    return st;
}

static attn_status call_decoder_options(const void *s) {
    attn_gguf *g;
    attn_decoder *dec = NULL;
    attn_status st = attn_gguf_parse(tiny_file.file.data, tiny_file.file.len, &g);
    if (st == ATTN_OK) st = attn_decoder_load_with(g, s, &dec);
    attn_decoder_free(dec);
    attn_gguf_free(g);
    return st;
}

static attn_status call_sampler_options(const void *s) {
    attn_sampler *sampler;
    attn_status st = attn_sampler_new(s, 8, &sampler);
    attn_sampler_free(sampler);
    return st;
}

static attn_status call_chat_options(const void *s) {
    attn_chat_template *t;
    static const char source[] = "{{ messages|length }}";
    attn_status st = attn_chat_template_parse(source, sizeof source - 1, &t);
    char *text = NULL;
    if (!st) st = attn_chat_template_render(t, NULL, 0, s, &text, NULL);
    free(text);
    attn_chat_template_free(t);
    return st;
}

static void struct_size_rule_everywhere(void **state) {
    (void)state;
    const attn_sdpa_options sdpa = ATTN_SDPA_OPTIONS_INIT;
    float dq_buf[L * HQ * D];
    attn_tensor dq = attn_tensor_4d(dq_buf, 1, L, HQ, D);
    attn_sdpa_grads sdpa_grads = ATTN_SDPA_GRADS_INIT;
    sdpa_grads.dq = &dq;
    const attn_mha mha = module();
    float dx[L * DM];
    attn_mha_grads mha_grads = ATTN_MHA_GRADS_INIT;
    mha_grads.dx = dx;
    attn_kv_cache_config cache = ATTN_KV_CACHE_CONFIG_INIT;
    cache.layers = 1;
    cache.kv_heads = 1;
    cache.head_dim = D;
    cache.max_seqs = 1;
    cache.capacity = 4;
    const attn_rope_options rope = ATTN_ROPE_OPTIONS_INIT;
    const attn_patch patch = attn_patch_make(ATTN_PATCH_ZERO, ATTN_HOOK_Z);
    const attn_nullspace_options nullspace = ATTN_NULLSPACE_OPTIONS_INIT;
    const attn_heatmap_options heatmap = ATTN_HEATMAP_OPTIONS_INIT;
    const attn_lineplot_options lineplot = ATTN_LINEPLOT_OPTIONS_INIT;
    attn_report report = ATTN_REPORT_INIT;
    report.heads = 1;
    report.len_q = report.len_kv = 2;
    report.weights = map_weights;
    float logits[2 * 37];
    attn_decoder_outputs outputs = ATTN_DECODER_OUTPUTS_INIT;
    outputs.logits = logits;
    attn_decoder_session_options session = ATTN_DECODER_SESSION_OPTIONS_INIT;
    session.capacity = 4;
    const attn_sampler_options sampler = ATTN_SAMPLER_OPTIONS_INIT;
    const attn_chat_options chat = ATTN_CHAT_OPTIONS_INIT;
    attn_decoder_options load = ATTN_DECODER_OPTIONS_INIT;
    load.weights = ATTN_WEIGHTS_F32;

#define CASE(type, init, older_field, valid, call) \
    {#type, init, sizeof(type), offsetof(type, older_field), &(valid), call}
    const struct_case cases[] = {
        /* struct, initialiser, the first field an older caller lacked */
        CASE(attn_sdpa_options, "ATTN_SDPA_OPTIONS_INIT", align, sdpa, call_sdpa_options),
        CASE(attn_sdpa_grads, "ATTN_SDPA_GRADS_INIT", dsinks, sdpa_grads, call_sdpa_grads),
        CASE(attn_mha, "ATTN_MHA_INIT", bq, mha, call_mha),
        CASE(attn_mha_grads, "ATTN_MHA_GRADS_INIT", dbq, mha_grads, call_mha_grads),
        CASE(attn_kv_cache_config, "ATTN_KV_CACHE_CONFIG_INIT", block_rows, cache, call_kv_cache_config),
        /* theta's default (1e4) is not zero: the older caller gets it */
        CASE(attn_rope_options, "ATTN_ROPE_OPTIONS_INIT", theta, rope, call_rope_options),
        CASE(attn_patch, "attn_patch_make", factor, patch, call_patch),
        CASE(attn_nullspace_options, "ATTN_NULLSPACE_OPTIONS_INIT", allow_slow, nullspace, call_nullspace_options),
        CASE(attn_lineplot_options, "ATTN_LINEPLOT_OPTIONS_INIT", ymin, lineplot, call_lineplot_options),
        CASE(attn_report, "ATTN_REPORT_INIT", layers, report, call_report),
        /* the size before the tensor hooks existed */
        CASE(attn_decoder_outputs, "ATTN_DECODER_OUTPUTS_INIT", tensor_hook, outputs, call_decoder_outputs),
        CASE(attn_decoder_session_options, "ATTN_DECODER_SESSION_OPTIONS_INIT", kv_dtype, session,
             call_decoder_session_options),
        /* new in 0.3.0 with both fields: precision stands for a later tail */
        CASE(attn_decoder_options, "ATTN_DECODER_OPTIONS_INIT", precision, load, call_decoder_options),
        /* top_p's default (1) is not zero: 0 would be refused */
        CASE(attn_sampler_options, "ATTN_SAMPLER_OPTIONS_INIT", top_p, sampler, call_sampler_options),
        CASE(attn_chat_options, "ATTN_CHAT_OPTIONS_INIT", add_generation_prompt, chat, call_chat_options),
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_struct_size_rule(&cases[i]);
    if (attn_pictures_available()) {
        const struct_case map = CASE(attn_heatmap_options, "ATTN_HEATMAP_OPTIONS_INIT", panel_titles, heatmap,
                                     call_heatmap_options);
        check_struct_size_rule(&map);
    } else {
        print_message("attn_heatmap_options: not checked (this build draws no pictures)\n");
    }
#undef CASE
}

/* ========================================================= NULL options */

/* Fails unless the n bytes at a and b are the same (each call's output). */
static void expect_same(const char *what, const void *a, const void *b, size_t n) {
    if (memcmp(a, b, n)) fail_msg("%s: NULL options and the initialiser's differ", what);
}

static void null_sdpa_options(void **state) {
    (void)state;
    const attn_sdpa_options init = ATTN_SDPA_OPTIONS_INIT;
    const attn_sdpa_options *opts[2] = {NULL, &init};
    float out[2][L * HQ * D], w[2][HQ * L * S], lse[2][HQ * L], scores[2][HQ * L * S], dq[2][L * HQ * D],
        dk[2][S * D], dv[2][S * D];
    size_t bytes[2], bytes_back[2];
    double flops[2];
    const char *names[2], *back_names[2];
    for (int i = 0; i < 2; i++) {
        attn_tensor o = attn_tensor_4d(out[i], 1, L, HQ, D), dout = attn_tensor_4d(dout_buf, 1, L, HQ, D);
        attn_tensor dqt = attn_tensor_4d(dq[i], 1, L, HQ, D), dkt = attn_tensor_4d(dk[i], 1, S, HKV, D),
                    dvt = attn_tensor_4d(dv[i], 1, S, HKV, D);
        assert_ok(attn_sdpa_forward(&q_t, &k_t, &v_t, opts[i], &o, w[i], lse[i]));
        assert_ok(attn_sdpa_scores(&q_t, &k_t, opts[i], scores[i]));
        assert_ok(attn_sdpa_workspace_size(&q_t, &k_t, &v_t, opts[i], &bytes[i]));
        assert_ok(attn_sdpa_backward_workspace_size(&q_t, &k_t, &v_t, opts[i], &bytes_back[i]));
        assert_ok(attn_sdpa_flops(&q_t, &k_t, &v_t, opts[i], &flops[i]));
        names[i] = attn_sdpa_kernel_name(&q_t, &k_t, &v_t, opts[i]);
        back_names[i] = attn_sdpa_backward_kernel_name(&q_t, &k_t, &v_t, opts[i]);
        assert_ok(attn_sdpa_backward(&q_t, &k_t, &v_t, opts[i], &o, lse[i], &dout, &dqt, &dkt, &dvt));
        attn_sdpa_grads g = ATTN_SDPA_GRADS_INIT;
        g.dk = &dkt;
        assert_ok(attn_sdpa_backward_grads(&q_t, &k_t, &v_t, opts[i], NULL, NULL, &dout, &g));
    }
    expect_same("attn_sdpa_forward out", out[0], out[1], sizeof out[0]);
    expect_same("attn_sdpa_forward weights", w[0], w[1], sizeof w[0]);
    expect_same("attn_sdpa_forward lse", lse[0], lse[1], sizeof lse[0]);
    expect_same("attn_sdpa_scores", scores[0], scores[1], sizeof scores[0]);
    expect_same("attn_sdpa_workspace_size", &bytes[0], &bytes[1], sizeof bytes[0]);
    expect_same("attn_sdpa_backward_workspace_size", &bytes_back[0], &bytes_back[1], sizeof bytes_back[0]);
    expect_same("attn_sdpa_flops", &flops[0], &flops[1], sizeof flops[0]);
    assert_string_equal(names[0], names[1]);
    assert_string_equal(back_names[0], back_names[1]);
    expect_same("attn_sdpa_backward dq", dq[0], dq[1], sizeof dq[0]);
    expect_same("attn_sdpa_backward(_grads) dk", dk[0], dk[1], sizeof dk[0]);
    expect_same("attn_sdpa_backward dv", dv[0], dv[1], sizeof dv[0]);
}

static void null_options_of_the_module_and_interp(void **state) {
    (void)state;
    const attn_sdpa_options init = ATTN_SDPA_OPTIONS_INIT;
    const attn_sdpa_options *opts[2] = {NULL, &init};
    const attn_mha m = module();
    float out[2][L * DM], dx[2][L * DM], traced[2][L * DM], bare[2][L * HQ * D], moved_z[2][L * HQ * D];
    float x_changed[L * DM];
    for (int e = 0; e < L * DM; e++) x_changed[e] = x_buf[e] * 0.5f;
    for (int i = 0; i < 2; i++) {
        assert_ok(attn_mha_forward(&m, x_buf, 1, L, NULL, 0, opts[i], out[i], NULL, NULL));
        attn_mha_grads g = ATTN_MHA_GRADS_INIT;
        g.dx = dx[i];
        assert_ok(attn_mha_backward(&m, x_buf, 1, L, NULL, 0, opts[i], dout_buf, &g));
        assert_ok(attn_mha_forward_traced(&m, x_buf, 1, L, NULL, 0, opts[i], NULL, 0, NULL, traced[i]));
        attn_tensor o = attn_tensor_4d(bare[i], 1, L, HQ, D);
        assert_ok(attn_sdpa_forward_traced(&q_t, &k_t, &v_t, opts[i], NULL, 0, NULL, &o));
        attn_paths p = {0};
        assert_ok(attn_sdpa_paths(&q_t, &k_t, &v_t, NULL, NULL, &v_t, opts[i], &p));
        memcpy(moved_z[i], p.run[ATTN_PATH_BOTH].z, sizeof moved_z[i]);
        attn_paths_free(&p);
        attn_paths pm = {0};
        assert_ok(attn_mha_paths(&m, x_buf, x_changed, 1, L, NULL, NULL, 0, opts[i], &pm));
        expect_same("attn_mha_paths (against the forward)", pm.run[ATTN_PATH_BASE].attn_out, out[i],
                    sizeof out[i]);
        attn_paths_free(&pm);
    }
    expect_same("attn_mha_forward", out[0], out[1], sizeof out[0]);
    expect_same("attn_mha_backward", dx[0], dx[1], sizeof dx[0]);
    expect_same("attn_mha_forward_traced", traced[0], traced[1], sizeof traced[0]);
    expect_same("attn_sdpa_forward_traced", bare[0], bare[1], sizeof bare[0]);
    expect_same("attn_sdpa_paths", moved_z[0], moved_z[1], sizeof moved_z[0]);

    const attn_nullspace_options ns = ATTN_NULLSPACE_OPTIONS_INIT;
    double moved[2][3];
    attn_nullspace_result result[2];
    assert_ok(attn_nullspace_search(ns_weights, ns_values, 3, 1, NULL, NULL, moved[0], &result[0]));
    assert_ok(attn_nullspace_search(ns_weights, ns_values, 3, 1, NULL, &ns, moved[1], &result[1]));
    expect_same("attn_nullspace_search", moved[0], moved[1], sizeof moved[0]);
    expect_same("attn_nullspace_search result", &result[0], &result[1], sizeof result[0]);
}

static void null_options_of_rope_cache_and_pictures(void **state) {
    (void)state;
    const attn_rope_options rope = ATTN_ROPE_OPTIONS_INIT;
    const attn_rope_options *ropes[2] = {NULL, &rope};
    float x[2][L * HQ * D], dy[2][L * HQ * D], cos_t[2][L * D / 2], sin_t[2][L * D / 2];
    double inv_freq[2][D / 2], factor[2];
    for (int i = 0; i < 2; i++) {
        memcpy(x[i], q_buf, sizeof x[i]);
        memcpy(dy[i], q_buf, sizeof dy[i]);
        attn_tensor xt = attn_tensor_4d(x[i], 1, L, HQ, D), dyt = attn_tensor_4d(dy[i], 1, L, HQ, D);
        assert_ok(attn_rope_apply(&xt, NULL, 2, ropes[i]));
        assert_ok(attn_rope_backward(&dyt, NULL, 2, ropes[i]));
        assert_ok(attn_rope_frequencies(D, ropes[i], inv_freq[i], &factor[i]));
        assert_ok(attn_rope_cos_sin(D, NULL, L, 2, ropes[i], cos_t[i], sin_t[i]));
    }
    expect_same("attn_rope_apply", x[0], x[1], sizeof x[0]);
    expect_same("attn_rope_backward", dy[0], dy[1], sizeof dy[0]);
    expect_same("attn_rope_frequencies", inv_freq[0], inv_freq[1], sizeof inv_freq[0]);
    expect_same("attn_rope_frequencies factor", &factor[0], &factor[1], sizeof factor[0]);
    expect_same("attn_rope_cos_sin cos", cos_t[0], cos_t[1], sizeof cos_t[0]);
    expect_same("attn_rope_cos_sin sin", sin_t[0], sin_t[1], sizeof sin_t[0]);

    /* attn_kv_cache_attend over one sequence holding k, v. */
    attn_kv_cache_config cfg = ATTN_KV_CACHE_CONFIG_INIT;
    cfg.layers = 1;
    cfg.kv_heads = HKV;
    cfg.head_dim = D;
    cfg.max_seqs = 1;
    cfg.capacity = S;
    attn_kv_cache *cache;
    int64_t seq;
    assert_ok(attn_kv_cache_new(&cfg, &cache));
    assert_ok(attn_kv_cache_seq_add(cache, &seq));
    assert_ok(attn_kv_cache_append(cache, seq, 0, &k_t, &v_t));
    const attn_sdpa_options init = ATTN_SDPA_OPTIONS_INIT;
    const attn_sdpa_options *opts[2] = {NULL, &init};
    float out[2][HQ * D], lse[2][HQ];
    const int64_t q_rows[1] = {1};
    for (int i = 0; i < 2; i++) {
        attn_tensor q1 = attn_tensor_4d(q_buf, 1, 1, HQ, D), o = attn_tensor_4d(out[i], 1, 1, HQ, D);
        assert_ok(attn_kv_cache_attend(cache, 0, 1, &seq, q_rows, &q1, opts[i], &o, lse[i]));
    }
    attn_kv_cache_free(cache);
    expect_same("attn_kv_cache_attend out", out[0], out[1], sizeof out[0]);
    expect_same("attn_kv_cache_attend lse", lse[0], lse[1], sizeof lse[0]);

    if (!attn_pictures_available()) {
        print_message("pictures: not checked (this build draws no pictures)\n");
        return;
    }
    const attn_heatmap_options heatmap = ATTN_HEATMAP_OPTIONS_INIT;
    const attn_lineplot_options lineplot = ATTN_LINEPLOT_OPTIONS_INIT;
    const double y[3] = {0.1, 0.5, 0.2};
    assert_ok(attn_heatmap_write(test_path("null.png"), map_weights, 1, 2, 2, NULL));
    assert_ok(attn_heatmap_write(test_path("init.png"), map_weights, 1, 2, 2, &heatmap));
    assert_ok(attn_lineplot_write(test_path("null-line.png"), y, 3, NULL));
    assert_ok(attn_lineplot_write(test_path("init-line.png"), y, 3, &lineplot));
    const char *pairs[2][2] = {{"null.png", "init.png"}, {"null-line.png", "init-line.png"}};
    for (int p = 0; p < 2; p++) {
        size_t n0, n1;
        char *a = test_read_file(test_path(pairs[p][0]), &n0), *b = test_read_file(test_path(pairs[p][1]), &n1);
        assert_non_null(a);
        assert_non_null(b);
        assert_int_equal(n0, n1);
        expect_same(pairs[p][0], a, b, n0);
        free(a);
        free(b);
    }
}

static void null_options_of_generation(void **state) {
    (void)state;
    /* The sampler's defaults: greedy, so the largest logit. */
    const attn_sampler_options init = ATTN_SAMPLER_OPTIONS_INIT;
    const attn_sampler_options *opts[2] = {NULL, &init};
    const float logits[5] = {0.1f, 2.0f, -1.0f, 2.5f, 0.0f};
    for (int i = 0; i < 2; i++) {
        attn_sampler *s;
        int32_t id;
        assert_ok(attn_sampler_new(opts[i], 5, &s));
        assert_ok(attn_sampler_sample(s, logits, &id));
        assert_int_equal(id, 3);
        attn_sampler_free(s);
    }
    /* A session's defaults have no capacity: NULL is refused as the
     * initialiser's struct is, naming it. */
    const attn_decoder_session_options session = ATTN_DECODER_SESSION_OPTIONS_INIT;
    attn_decoder_session *s = NULL;
    assert_refused(attn_decoder_session_new(tiny, NULL, &s), ATTN_ERR_INVALID_ARGUMENT, "capacity is 0");
    assert_null(s);
    assert_refused(attn_decoder_session_new(tiny, &session, &s), ATTN_ERR_INVALID_ARGUMENT, "capacity is 0");
    assert_null(s);
}

/* ========================================================= former names */

/* Deprecated names, until 1.0: each former name (declared with
 * ATTN_DEPRECATED, still exported) runs its new name's function. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
static void former_names_still_work(void **state) {
    (void)state;
    attn_kv_cache_config cfg = ATTN_KV_CACHE_CONFIG_INIT;
    cfg.layers = cfg.kv_heads = cfg.max_seqs = 1;
    cfg.head_dim = D;
    cfg.capacity = 4;
    attn_kv_cache *cache;
    int64_t seq;
    assert_ok(attn_kv_cache_create(&cfg, &cache));
    assert_ok(attn_kv_cache_seq_add(cache, &seq));
    attn_kv_cache_destroy(cache);
    assert_refused(attn_kv_cache_create(NULL, &cache), ATTN_ERR_INVALID_ARGUMENT, "config is NULL");

    attn_decoder_session_options so = ATTN_DECODER_SESSION_OPTIONS_INIT;
    so.capacity = 4;
    attn_decoder_session *session;
    assert_ok(attn_decoder_session_create(tiny, &so, &session));
    assert_int_equal(attn_decoder_session_capacity(session), 4);
    attn_decoder_session_free(session);

    const float logits[3] = {0.5f, 1.5f, -1.0f};
    attn_sampler *sampler;
    int32_t id;
    assert_ok(attn_sampler_create(NULL, 3, &sampler));
    assert_ok(attn_sampler_sample(sampler, logits, &id));
    assert_int_equal(id, 1);
    attn_sampler_free(sampler);

    tiny_model m;
    tiny_build(&m, &TINY_QWEN, 3);
    attn_gguf *g;
    assert_ok(attn_gguf_parse(m.file.data, m.file.len, &g));
    attn_gguf_close(g);
    tiny_free(&m);

    const float values[2] = {1.0f, 2.0f};
    attn_array a = {.dtype = ATTN_F32, .ndim = 1, .shape = {2}, .count = 2, .data = (void *)values};
    attn_npz_writer *w;
    assert_ok(attn_npz_create(test_path("former.npz"), 0, &w));
    assert_ok(attn_npz_add(w, "x", &a));
    assert_ok(attn_npz_commit(w));
    attn_npz *z;
    assert_ok(attn_npz_open(test_path("former.npz"), &z));
    assert_int_equal(attn_npz_count(z), 1);
    attn_npz_close(z);

    attn_safetensors_close(NULL); /* NULL allowed, as attn_safetensors_free's */
}
#pragma GCC diagnostic pop
/* End of the deprecated names. */

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(struct_size_rule_everywhere),
        cmocka_unit_test(null_sdpa_options),
        cmocka_unit_test(null_options_of_the_module_and_interp),
        cmocka_unit_test(null_options_of_rope_cache_and_pictures),
        cmocka_unit_test(null_options_of_generation),
        cmocka_unit_test(former_names_still_work),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
