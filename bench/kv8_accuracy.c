/*
 * kv8_accuracy.c — what an 8-bit KV cache (q8_0, fp8 e4m3, and bf16 keys
 * beside q8_0 values) does to a real
 * model (docs/cache.md, "8-bit caches"; bench/kv8_accuracy.sh builds and
 * runs it):
 *
 *   attention  every layer's rotated queries, keys and values of one text,
 *              recorded through the model's hooks (attn.hook_rot_q,
 *              hook_rot_k, hook_v), attended causally with float32 K/V and
 *              with the same K/V quantized: the output's relative error
 *              ||o8 - o32|| / ||o32|| and max abs error per layer (plain
 *              causal attention, scale 1/sqrt(D): the operation's error,
 *              not the model's own mask and scale)
 *   next token each text teacher-forced through a session with each cache
 *              (one step: its queries attend over the cache as stored):
 *              mean KL(p_ref || p) of the next-token distribution and top-1
 *              agreement over every position, against the f32 and the bf16
 *              cache
 *   greedy     the text's first tokens as a prompt, then G tokens greedily
 *              with the f32 cache; each other cache's continuation checked
 *              against it (identical, or how many tokens agree first); where
 *              one differs, the f32 logit margin between its top two tokens
 *              at the first differing step (a near-tie there makes the
 *              divergence a property of argmax, not of the cache's error)
 *
 * usage: kv8_accuracy MODEL.gguf TEXTS [MAX_TOKENS [GREEDY [PROMPT]]]
 *   TEXTS: one text per line; MAX_TOKENS (default 96) caps each text;
 *   GREEDY (default 40) tokens generated after PROMPT (default 16) tokens.
 */
#include "attn.h"
#include "attn_decoder.h"
#include "attn_gguf.h"
#include "attn_tokenizer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The caches compared: K's dtype, V's (0: K's).  The last keeps the keys
 * at 16 bits and stores the values at 8 (--kv-cache bf16:q8_0). */
enum { CACHES = 5 };
static const attn_dtype cache_dtype[CACHES] = {ATTN_F32, ATTN_BF16, ATTN_Q8_0, ATTN_FP8_E4M3, ATTN_BF16};
static const attn_dtype cache_value_dtype[CACHES] = {0, 0, 0, 0, ATTN_Q8_0};
static const char *const cache_name[CACHES] = {"f32", "bf16", "q8_0", "fp8", "bf16:q8_0"};

static void die(const char *what) {
    fprintf(stderr, "kv8_accuracy: %s: %s\n", what, attn_last_error());
    exit(1);
}

/* ------------------------------------------------- attention on real K/V */

typedef struct recording {
    int64_t layers, L, hq, hkv, dh;
    float **q, **k, **v; /* per layer [L, H, Dh] */
} recording;

static int record_hook(void *user, const attn_decoder_hook_tensor *t) {
    recording *r = user;
    float ***slot = t->point == ATTN_DECODER_HOOK_ROT_Q ? &r->q : t->point == ATTN_DECODER_HOOK_ROT_K ? &r->k : &r->v;
    const size_t n = (size_t)(t->shape[0] * t->shape[1] * t->shape[2]);
    (*slot)[t->layer] = malloc(n * sizeof(float));
    memcpy((*slot)[t->layer], t->data, n * sizeof(float));
    return 0;
}

static void attention_errors(const attn_decoder *m, const int32_t *ids, int64_t L) {
    const attn_decoder_config *c = attn_decoder_get_config(m);
    recording r = {c->n_layers, L, c->n_heads, c->n_kv_heads, c->head_dim, NULL, NULL, NULL};
    r.q = calloc((size_t)r.layers, sizeof(float *));
    r.k = calloc((size_t)r.layers, sizeof(float *));
    r.v = calloc((size_t)r.layers, sizeof(float *));
    attn_decoder_outputs out = ATTN_DECODER_OUTPUTS_INIT;
    out.last_only = 1;
    float *logits = malloc((size_t)c->vocab * sizeof(float));
    out.logits = logits;
    out.tensor_hook = record_hook;
    out.tensor_hook_user = &r;
    out.tensor_hook_points =
        1u << ATTN_DECODER_HOOK_ROT_Q | 1u << ATTN_DECODER_HOOK_ROT_K | 1u << ATTN_DECODER_HOOK_V;
    if (attn_decoder_forward(m, ids, L, &out)) die("forward");
    const int64_t n_kv = L * r.hkv * r.dh, n_o = L * r.hq * r.dh;
    float *o32 = malloc((size_t)n_o * sizeof(float)), *o8 = malloc((size_t)n_o * sizeof(float));
    uint8_t *kb = malloc(attn_dtype_bytes(ATTN_Q8_0, n_kv)), *vb = malloc(attn_dtype_bytes(ATTN_Q8_0, n_kv));
    printf("attention on recorded activations (%lld tokens): per layer relative error ||o8 - o32|| / ||o32||\n",
           (long long)L);
    printf("layer,q8_0_rel,q8_0_maxabs,fp8_rel,fp8_maxabs,max|k|,max|v|\n");
    double worst[2] = {0, 0}, mean[2] = {0, 0};
    for (int64_t l = 0; l < r.layers; l++) {
        attn_tensor q = attn_tensor_4d(r.q[l], 1, L, r.hq, r.dh), k = attn_tensor_4d(r.k[l], 1, L, r.hkv, r.dh),
                    v = attn_tensor_4d(r.v[l], 1, L, r.hkv, r.dh), o = attn_tensor_4d(o32, 1, L, r.hq, r.dh),
                    o_8 = attn_tensor_4d(o8, 1, L, r.hq, r.dh);
        attn_sdpa_options opt = ATTN_SDPA_OPTIONS_INIT;
        opt.causal = 1;
        if (attn_sdpa_forward(&q, &k, &v, &opt, &o, NULL, NULL)) die("sdpa f32");
        double kmax = 0, vmax = 0;
        for (int64_t i = 0; i < n_kv; i++) {
            kmax = fmax(kmax, fabs(r.k[l][i]));
            vmax = fmax(vmax, fabs(r.v[l][i]));
        }
        printf("%lld", (long long)l);
        for (int t = 0; t < 2; t++) {
            const attn_dtype dt = cache_dtype[2 + t];
            if (attn_quantize(r.k[l], n_kv, dt, kb, NULL) || attn_quantize(r.v[l], n_kv, dt, vb, NULL)) die("quantize");
            attn_tensor k8 = attn_tensor_view(kb, dt, 1, L, r.hkv, r.dh), v8 = attn_tensor_view(vb, dt, 1, L, r.hkv, r.dh);
            if (attn_sdpa_forward(&q, &k8, &v8, &opt, &o_8, NULL, NULL)) die("sdpa 8-bit");
            double num = 0, den = 0, mx = 0;
            for (int64_t i = 0; i < n_o; i++) {
                const double d = (double)o8[i] - o32[i];
                num += d * d;
                den += (double)o32[i] * o32[i];
                mx = fmax(mx, fabs(d));
            }
            const double rel = sqrt(num / den);
            worst[t] = fmax(worst[t], rel);
            mean[t] += rel / (double)r.layers;
            printf(",%.3g,%.3g", rel, mx);
        }
        printf(",%.3g,%.3g\n", kmax, vmax);
        free(r.q[l]);
        free(r.k[l]);
        free(r.v[l]);
    }
    printf("attention summary: q8_0 mean %.3g worst %.3g; fp8 mean %.3g worst %.3g\n\n", mean[0], worst[0], mean[1],
           worst[1]);
    free(r.q);
    free(r.k);
    free(r.v);
    free(o32);
    free(o8);
    free(kb);
    free(vb);
    free(logits);
}

/* ------------------------------------------------ end to end */

/* p = softmax(x) and lp = log p, in double: one exp per entry and one log
 * in all (log p = x - max - log(sum)), so that a vocabulary of 262 144
 * (Gemma 3) costs one exp pass per cache and position, not one exp and
 * one log pass per cache, reference and position. */
static void log_softmax(const float *x, int64_t n, double *p, double *lp) {
    double mx = -INFINITY, sum = 0;
    for (int64_t i = 0; i < n; i++) mx = fmax(mx, x[i]);
    for (int64_t i = 0; i < n; i++) sum += p[i] = exp((double)x[i] - mx);
    const double log_sum = log(sum);
    for (int64_t i = 0; i < n; i++) {
        p[i] /= sum;
        lp[i] = (double)x[i] - mx - log_sum;
    }
}

static int64_t argmax(const float *x, int64_t n) {
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* The largest logit minus the second largest: how far from a tie argmax is. */
static double top2_margin(const float *x, int64_t n) {
    double first = -INFINITY, second = -INFINITY;
    for (int64_t i = 0; i < n; i++) {
        if (x[i] > first) {
            second = first;
            first = x[i];
        } else if (x[i] > second) second = x[i];
    }
    return first - second;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s MODEL.gguf TEXTS [MAX_TOKENS [GREEDY [PROMPT]]]\n", argv[0]);
        return 2;
    }
    const int64_t max_tokens = argc > 3 ? atoll(argv[3]) : 96, greedy = argc > 4 ? atoll(argv[4]) : 40,
                  prompt = argc > 5 ? atoll(argv[5]) : 16;
    attn_gguf *g;
    attn_decoder *m;
    attn_tokenizer *tok;
    if (attn_gguf_open(argv[1], &g) || attn_decoder_load(g, &m) || attn_tokenizer_from_gguf(g, &tok)) die(argv[1]);
    const attn_decoder_config *c = attn_decoder_get_config(m);
    const int64_t V = c->vocab;
    FILE *f = fopen(argv[2], "r");
    if (!f) {
        perror(argv[2]);
        return 1;
    }
    const int64_t cap = max_tokens + greedy + prompt + 8;
    attn_decoder_session *s[CACHES];
    for (int t = 0; t < CACHES; t++) {
        attn_decoder_session_options so = ATTN_DECODER_SESSION_OPTIONS_INIT;
        so.capacity = cap;
        so.kv_dtype = cache_dtype[t];
        so.kv_value_dtype = cache_value_dtype[t];
        if (attn_decoder_session_new(m, &so, &s[t])) die("session");
    }
    float *logits[CACHES];
    for (int t = 0; t < CACHES; t++) logits[t] = malloc((size_t)((max_tokens > prompt + greedy ? max_tokens : prompt + greedy) * V) * sizeof(float));
    double *p[CACHES], *lp[CACHES]; /* [V] each: one position's distribution under each cache */
    int64_t top[CACHES];
    for (int t = 0; t < CACHES; t++) {
        p[t] = malloc((size_t)V * sizeof(double));
        lp[t] = malloc((size_t)V * sizeof(double));
    }
    int32_t *ids = malloc((size_t)(1 << 16) * sizeof(int32_t)), *gen[CACHES];
    for (int t = 0; t < CACHES; t++) gen[t] = malloc((size_t)greedy * sizeof(int32_t));
    double *margin = malloc((size_t)(greedy > 0 ? greedy : 1) * sizeof(double)); /* f32's, per greedy step */
    /* Sums over positions: KL and top-1 against f32 (ref 0) and bf16 (ref 1). */
    double kl[2][CACHES] = {{0}}, top1[2][CACHES] = {{0}}, kl_max[2][CACHES] = {{0}};
    int64_t positions = 0, texts = 0, same_greedy[2][CACHES] = {{0}}, greedy_runs = 0;
    double first_diff[CACHES] = {0}; /* tokens agreeing before the first difference, summed */
    char line[1 << 16];
    while (fgets(line, sizeof line, f)) {
        size_t len = strcspn(line, "\n");
        if (len == 0) continue;
        size_t n_ids;
        if (attn_tokenizer_encode(tok, line, len, 0, ids, 1 << 16, &n_ids)) die("encode");
        const int64_t n = (int64_t)n_ids < max_tokens ? (int64_t)n_ids : max_tokens;
        if (n < 4) continue;
        if (texts == 0) attention_errors(m, ids, n);
        for (int t = 0; t < CACHES; t++) {
            attn_decoder_outputs out = ATTN_DECODER_OUTPUTS_INIT;
            out.logits = logits[t];
            if (attn_decoder_session_reset(s[t]) || attn_decoder_step_outputs(s[t], ids, n, &out)) die("step");
        }
        for (int64_t i = 0; i < n; i++) {
            for (int t = 0; t < CACHES; t++) {
                log_softmax(logits[t] + i * V, V, p[t], lp[t]);
                top[t] = argmax(logits[t] + i * V, V);
            }
            for (int ref = 0; ref < 2; ref++)
                for (int t = 0; t < CACHES; t++) {
                    double d = 0;
                    for (int64_t x = 0; x < V; x++) d += p[ref][x] * (lp[ref][x] - lp[t][x]);
                    kl[ref][t] += d;
                    kl_max[ref][t] = fmax(kl_max[ref][t], d);
                    top1[ref][t] += top[t] == top[ref];
                }
        }
        positions += n;
        /* Greedy continuations of the first `prompt` tokens: the f32
         * cache's generated step by step; another cache's continuation is
         * identical iff, fed the f32 prompt + continuation in one step
         * (its queries over its own cache), its argmax at every position
         * is f32's next token (the same prefix each time, by induction). */
        if (n > prompt && greedy > 0) {
            float *last = logits[0];
            if (attn_decoder_session_reset(s[0]) || attn_decoder_step(s[0], ids, prompt, last)) die("prompt");
            for (int64_t j = 0; j < greedy; j++) {
                gen[0][j] = (int32_t)argmax(last, V);
                margin[j] = top2_margin(last, V);
                ids[prompt + j] = gen[0][j];
                if (attn_decoder_step(s[0], &gen[0][j], 1, last)) die("greedy");
            }
            for (int t = 1; t < CACHES; t++) {
                attn_decoder_outputs out = ATTN_DECODER_OUTPUTS_INIT;
                out.logits = logits[t];
                if (attn_decoder_session_reset(s[t]) || attn_decoder_step_outputs(s[t], ids, prompt + greedy, &out))
                    die("greedy check");
                int64_t j = 0;
                while (j < greedy && argmax(logits[t] + (prompt - 1 + j) * V, V) == gen[0][j]) j++;
                same_greedy[0][t] += j == greedy;
                first_diff[t] += (double)j;
                if (j < greedy)
                    printf("greedy difference: text %lld, %s cache, token %lld of %lld, f32 top-2 logit margin "
                           "there %.3g\n",
                           (long long)texts, cache_name[t], (long long)j, (long long)greedy, margin[j]);
            }
            greedy_runs++;
        }
        texts++;
    }
    fclose(f);
    printf("end to end: %lld texts, %lld positions (teacher-forced, <= %lld tokens each); greedy: %lld runs of "
           "%lld tokens after %lld prompt tokens\n",
           (long long)texts, (long long)positions, (long long)max_tokens, (long long)greedy_runs, (long long)greedy,
           (long long)prompt);
    printf("cache,vs,mean_kl,max_kl,top1_agree,greedy_identical_to_f32,mean_tokens_before_difference\n");
    for (int ref = 0; ref < 2; ref++)
        for (int t = 0; t < CACHES; t++) {
            if (t == ref) continue;
            if (ref == 0)
                printf("%s,%s,%.3g,%.3g,%.4f,%lld/%lld,%.1f\n", cache_name[t], cache_name[ref],
                       kl[ref][t] / (double)positions, kl_max[ref][t], top1[ref][t] / (double)positions,
                       (long long)same_greedy[0][t], (long long)greedy_runs, first_diff[t] / (double)greedy_runs);
            else
                printf("%s,%s,%.3g,%.3g,%.4f,,\n", cache_name[t], cache_name[ref], kl[ref][t] / (double)positions,
                       kl_max[ref][t], top1[ref][t] / (double)positions);
        }
    for (int t = 0; t < CACHES; t++) {
        attn_decoder_session_free(s[t]);
        free(logits[t]);
        free(gen[t]);
    }
    for (int t = 0; t < CACHES; t++) {
        free(p[t]);
        free(lp[t]);
    }
    free(margin);
    free(ids);
    attn_tokenizer_free(tok);
    attn_decoder_free(m);
    attn_gguf_free(g);
    return 0;
}
