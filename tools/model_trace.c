/*
 * model_trace.c — recording, patching and ablating a decoder's hook points
 * (model_trace.h), all through the decoder's tensor hook.
 *
 * Every hook tensor is seen here as [P, H, W] — positions, heads, width —
 * whatever its order in memory:
 *   residual-like  [L, d]        P = L, H = 1,  W = d   (embed, resid_*, attn_out,
 *                                                        mlp_out, ln_final)
 *   per head       [L, H, Dh]    P = L, H, W = Dh       (q, k, v, rot_q, rot_k, z)
 *   heads first    [H, L, L]     P = L (queries), H, W = L (keys)  (scores, pattern)
 * so a selection of positions and heads is one loop for all three.
 */
#include "model_trace.h"

#include "attn_interp.h"

#include <fnmatch.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool say(char *err, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool say(char *err, size_t size, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, size, fmt, ap);
    va_end(ap);
    return false;
}

static bool heads_first(attn_decoder_hook_point p) {
    return p == ATTN_DECODER_HOOK_ATTN_SCORES || p == ATTN_DECODER_HOOK_PATTERN;
}

static bool per_head(attn_decoder_hook_point p) {
    return p == ATTN_DECODER_HOOK_Q || p == ATTN_DECODER_HOOK_K || p == ATTN_DECODER_HOOK_V ||
           p == ATTN_DECODER_HOOK_ROT_Q || p == ATTN_DECODER_HOOK_ROT_K || p == ATTN_DECODER_HOOK_Z;
}

/* The [P, H, W] view of a hook tensor (header comment). */
typedef struct view3 {
    int64_t P, H, W;
    int heads_first;
} view3;

static view3 view_of(attn_decoder_hook_point p, int ndim, const int64_t *shape) {
    if (heads_first(p)) return (view3){shape[1], shape[0], shape[2], 1};
    if (ndim == 3) return (view3){shape[0], shape[1], shape[2], 0};
    return (view3){shape[0], 1, shape[1], 0};
}

static float *row_at(float *data, const view3 *v, int64_t p, int64_t h) {
    return data + (v->heads_first ? h * v->P + p : p * v->H + h) * v->W;
}

/* "3,-1,5" into out (at most TRACE_SELECT_MAX); false on anything else. */
static bool parse_list(const char *text, size_t len, int64_t *out, int *n) {
    *n = 0;
    if (len == 0) return false;
    char buf[512];
    if (len >= sizeof buf) return false;
    memcpy(buf, text, len);
    buf[len] = '\0';
    for (char *p = buf; *p;) {
        char *end;
        const long long v = strtoll(p, &end, 10);
        if (end == p || (*end != ',' && *end != '\0') || *n >= TRACE_SELECT_MAX) return false;
        out[(*n)++] = v;
        p = *end ? end + 1 : end;
    }
    return true;
}

bool trace_parse_patch(const char *text, int ablate, int64_t n_layers, trace_patch *p, char *err, size_t esize) {
    memset(p, 0, sizeof *p);
    p->kind = TRACE_PATCH_SOURCE;
    const char *what = ablate ? "--ablate" : "--patch";
    size_t hook_len = strcspn(text, "@:=");
    char hook[160];
    if (hook_len == 0 || hook_len >= sizeof hook) return say(err, esize, "%s '%s': no hook name first", what, text);
    memcpy(hook, text, hook_len);
    hook[hook_len] = '\0';
    const char *rest = text + hook_len;
    /* "blocks.*.NAME" and a bare per-layer NAME both mean every layer. */
    char full[200];
    const bool star = strncmp(hook, "blocks.*.", 9) == 0;
    snprintf(full, sizeof full, "blocks.0.%s", star ? hook + 9 : hook);
    attn_decoder_hook_point point;
    int64_t layer;
    if (!star && attn_decoder_hook_parse(hook, &point, &layer) == ATTN_OK) {
        if (layer < 0)
            return say(err, esize, "%s '%s': %s has no layer and cannot be patched here (record it with --hooks)",
                       what, text, hook);
        if (layer >= n_layers)
            return say(err, esize, "%s '%s': layer %lld, the model has %lld (0..%lld)", what, text, (long long)layer,
                       (long long)n_layers, (long long)(n_layers - 1));
    } else if (attn_decoder_hook_parse(full, &point, &layer) == ATTN_OK) {
        layer = -1;
    } else {
        return say(err, esize, "%s '%s': '%s' is not a hook point (blocks.L.hook_resid_pre, blocks.L.attn.hook_z, "
                               "... : attn model trace --help lists them)", what, text, hook);
    }
    p->point = point;
    p->layer = layer;
    if (*rest == '@') {
        const size_t n = strcspn(rest + 1, ":=");
        if (!(n == 3 && strncmp(rest + 1, "all", 3) == 0) && !parse_list(rest + 1, n, p->positions, &p->n_positions))
            return say(err, esize, "%s '%s': positions '%.*s': expected integers separated by commas "
                                   "(negative: from the end; -1 the last token) or 'all'", what, text, (int)n, rest + 1);
        rest += 1 + n;
    }
    if (*rest == ':') {
        const size_t n = strcspn(rest + 1, "=");
        if (!(n == 3 && strncmp(rest + 1, "all", 3) == 0) && !parse_list(rest + 1, n, p->heads, &p->n_heads))
            return say(err, esize, "%s '%s': heads '%.*s': expected head indices separated by commas or 'all'", what,
                       text, (int)n, rest + 1);
        if (!per_head(point) && !heads_first(point))
            return say(err, esize, "%s '%s': %s has no heads axis (heads apply to q, k, v, rot_q, rot_k, "
                                   "attn_scores, pattern and z)", what, text, hook);
        rest += 1 + n;
    }
    if (ablate) {
        if (*rest != '=' || (strcmp(rest + 1, "zero") != 0 && strcmp(rest + 1, "mean") != 0))
            return say(err, esize, "--ablate '%s': expected HOOK[@POSITIONS]:HEADS=zero or =mean", text);
        p->kind = strcmp(rest + 1, "zero") == 0 ? TRACE_ABLATE_ZERO : TRACE_ABLATE_MEAN;
        if (p->kind == TRACE_ABLATE_MEAN && heads_first(point))
            return say(err, esize, "--ablate '%s': mean ablation averages over positions, which a pattern or score "
                                   "row cannot take (use =zero, or ablate hook_z)", text);
    } else if (*rest) {
        return say(err, esize, "--patch '%s': unexpected '%s' (expected HOOK[@POSITIONS][:HEADS])", text, rest);
    }
    return true;
}

void trace_store_free(trace_store *s) {
    for (int i = 0; i < s->n; i++) free(s->t[i].data);
    free(s->t);
    memset(s, 0, sizeof *s);
}

static bool layer_matches(const trace_patch *p, int64_t layer, int64_t sweep_layer) {
    return p->layer == layer || (p->layer < 0 && (sweep_layer < 0 || sweep_layer == layer));
}

static const trace_tensor *store_find(const trace_store *s, attn_decoder_hook_point point, int64_t layer) {
    for (int i = 0; s && i < s->n; i++)
        if (s->t[i].point == point && s->t[i].layer == layer) return &s->t[i];
    return NULL;
}

typedef struct record_ctx {
    const trace_patch *patches;
    int n;
    trace_store *store;
    char *error;
    size_t esize;
} record_ctx;

static int record_hook(void *user, const attn_decoder_hook_tensor *t) {
    record_ctx *c = user;
    for (int i = 0; i < c->n; i++) {
        const trace_patch *p = &c->patches[i];
        if (p->kind != TRACE_PATCH_SOURCE || p->point != t->point || !layer_matches(p, t->layer, -1) ||
            store_find(c->store, t->point, t->layer))
            continue;
        trace_store *s = c->store;
        if (s->n == s->cap) {
            const int cap = s->cap ? 2 * s->cap : 16;
            trace_tensor *grown = realloc(s->t, (size_t)cap * sizeof *grown);
            if (!grown) return say(c->error, c->esize, "out of memory keeping the source's %s", t->name), 1;
            s->t = grown;
            s->cap = cap;
        }
        size_t count = 1;
        for (int k = 0; k < t->ndim; k++) count *= (size_t)t->shape[k];
        trace_tensor *kept = &s->t[s->n];
        *kept = (trace_tensor){t->point, t->layer, t->ndim, {t->shape[0], t->shape[1], t->shape[2]}, malloc(count * 4)};
        if (!kept->data) return say(c->error, c->esize, "out of memory keeping the source's %s", t->name), 1;
        memcpy(kept->data, t->data, count * sizeof(float));
        s->n++;
    }
    return 0;
}

attn_status trace_record_source(const attn_decoder *m, const int32_t *ids, int64_t S, const trace_patch *patches,
                                int n_patches, trace_store *out, char *error, size_t esize) {
    memset(out, 0, sizeof *out);
    error[0] = '\0';
    record_ctx c = {patches, n_patches, out, error, esize};
    attn_decoder_outputs o = ATTN_DECODER_OUTPUTS_INIT;
    o.tensor_hook = record_hook;
    o.tensor_hook_user = &c;
    for (int i = 0; i < n_patches; i++)
        if (patches[i].kind == TRACE_PATCH_SOURCE) o.tensor_hook_points |= 1u << patches[i].point;
    const attn_status st = attn_decoder_forward(m, ids, S, &o);
    if (st) {
        if (!error[0]) snprintf(error, esize, "%s", attn_last_error());
        trace_store_free(out);
    }
    return st;
}

/* Pairs of (target, source) positions a patch selects; false when a
 * position is outside either run or all positions of runs of different
 * lengths are asked for. */
static bool select_positions(const trace_patch *p, int64_t L, int64_t S, int64_t *tgt, int64_t *src, int64_t *n,
                             char *err, size_t esize) {
    if (p->n_positions == 0) {
        if (L != S)
            return say(err, esize, "patching every position needs texts of the same length; the target has %lld "
                                   "tokens, the source %lld: choose positions (HOOK@-1 is the last of each)",
                       (long long)L, (long long)S);
        for (int64_t i = 0; i < L; i++) tgt[i] = src[i] = i;
        *n = L;
        return true;
    }
    for (int i = 0; i < p->n_positions; i++) {
        const int64_t q = p->positions[i];
        tgt[i] = q < 0 ? L + q : q;
        src[i] = q < 0 ? S + q : q;
        if (tgt[i] < 0 || tgt[i] >= L || src[i] < 0 || src[i] >= S)
            return say(err, esize, "position %lld is outside the target (%lld tokens) or the source (%lld)",
                       (long long)q, (long long)L, (long long)S);
    }
    *n = p->n_positions;
    return true;
}

typedef struct run_ctx {
    const trace_run_spec *spec;
    int64_t L;
    int64_t *tgt, *src; /* [max(L, S)] scratch for position pairs */
    char *error;
    size_t esize;
} run_ctx;

static bool apply_patch(run_ctx *c, const trace_patch *p, const attn_decoder_hook_tensor *t) {
    const view3 v = view_of(t->point, t->ndim, t->shape);
    int64_t n_pos = 0;
    const int64_t S = p->kind == TRACE_PATCH_SOURCE ? c->spec->source_len : c->L;
    if (!select_positions(p, c->L, S, c->tgt, c->src, &n_pos, c->error, c->esize)) return false;
    for (int i = 0; i < p->n_heads; i++)
        if (p->heads[i] < 0 || p->heads[i] >= v.H)
            return say(c->error, c->esize, "%s: head %lld, it has %lld (0..%lld)", t->name, (long long)p->heads[i],
                       (long long)v.H, (long long)(v.H - 1));
    const int64_t n_heads = p->n_heads ? p->n_heads : v.H;
    if (p->kind == TRACE_PATCH_SOURCE) {
        const trace_tensor *s = store_find(c->spec->source, t->point, t->layer);
        if (!s) return say(c->error, c->esize, "%s: the source run did not record it", t->name);
        const view3 sv = view_of(s->point, s->ndim, s->shape);
        if (sv.W != v.W || sv.H != v.H)
            return say(c->error, c->esize, "%s: the source's rows are %lld x %lld wide, the target's %lld x %lld "
                                           "(patch hook_pattern and hook_attn_scores between texts of one length)",
                       t->name, (long long)sv.H, (long long)sv.W, (long long)v.H, (long long)v.W);
        for (int64_t i = 0; i < n_pos; i++)
            for (int64_t k = 0; k < n_heads; k++) {
                const int64_t h = p->n_heads ? p->heads[k] : k;
                memcpy(row_at(t->data, &v, c->tgt[i], h), row_at(s->data, &sv, c->src[i], h), (size_t)v.W * 4);
            }
        return true;
    }
    for (int64_t k = 0; k < n_heads; k++) {
        const int64_t h = p->n_heads ? p->heads[k] : k;
        /* Mean ablation: the head's average over every position of this
         * run, taken before any row is overwritten. */
        float mean[4096];
        if (p->kind == TRACE_ABLATE_MEAN) {
            if (v.W > 4096) return say(c->error, c->esize, "%s: rows of %lld are too wide to average", t->name, (long long)v.W);
            for (int64_t e = 0; e < v.W; e++) {
                double sum = 0;
                for (int64_t q = 0; q < v.P; q++) sum += row_at(t->data, &v, q, h)[e];
                mean[e] = (float)(sum / (double)v.P);
            }
        }
        for (int64_t i = 0; i < n_pos; i++) {
            float *row = row_at(t->data, &v, c->tgt[i], h);
            for (int64_t e = 0; e < v.W; e++) row[e] = p->kind == TRACE_ABLATE_MEAN ? mean[e] : 0.0f;
        }
    }
    return true;
}

static bool name_matches(const trace_run_spec *s, const char *name) {
    for (int i = 0; i < s->n_patterns; i++)
        if (fnmatch(s->patterns[i], name, 0) == 0) return true;
    return false;
}

static int run_hook(void *user, const attn_decoder_hook_tensor *t) {
    run_ctx *c = user;
    const trace_run_spec *s = c->spec;
    for (int i = 0; i < s->n_patches; i++) {
        const trace_patch *p = &s->patches[i];
        if (p->point == t->point && layer_matches(p, t->layer, s->sweep_layer) && !apply_patch(c, p, t)) return 1;
    }
    if (s->cache && name_matches(s, t->name)) {
        attn_array a = {ATTN_F32, t->ndim, {t->shape[0], t->shape[1], t->shape[2]}, 1, t->data};
        for (int k = 0; k < t->ndim; k++) a.count *= t->shape[k];
        if (attn_npz_add(s->cache, t->name, &a)) return say(c->error, c->esize, "%s", attn_last_error()), 1;
        if (s->recorded) (*s->recorded)++;
    }
    return 0;
}

int64_t trace_pattern_matches(const attn_decoder_config *c, const char *pattern) {
    int64_t n = 0;
    char name[96];
    for (int p = 0; p < ATTN_DECODER_HOOK_POINTS; p++)
        for (int64_t l = 0; l < c->n_layers; l++) {
            attn_decoder_hook_name((attn_decoder_hook_point)p, l, name, sizeof name);
            if (fnmatch(pattern, name, 0) == 0) n++;
            if (p == ATTN_DECODER_HOOK_EMBED || p == ATTN_DECODER_HOOK_LN_FINAL) break;
        }
    return n;
}

attn_status trace_run(const attn_decoder *m, const int32_t *ids, int64_t L, const trace_run_spec *spec, float *logits,
                      char *error, size_t esize) {
    const attn_decoder_config *cfg = attn_decoder_get_config(m);
    error[0] = '\0';
    const int64_t most = L > spec->source_len ? L : spec->source_len;
    run_ctx c = {spec, L, malloc((size_t)most * sizeof(int64_t)), malloc((size_t)most * sizeof(int64_t)), error, esize};
    if (!c.tgt || !c.src) {
        free(c.tgt);
        free(c.src);
        snprintf(error, esize, "out of memory");
        return ATTN_ERR_OUT_OF_MEMORY;
    }
    attn_decoder_outputs o = ATTN_DECODER_OUTPUTS_INIT;
    o.logits = logits;
    o.last_only = 1;
    o.tensor_hook = run_hook;
    o.tensor_hook_user = &c;
    for (int i = 0; i < spec->n_patches; i++) o.tensor_hook_points |= 1u << spec->patches[i].point;
    /* Only the points a pattern can match: the scores cost a table of
     * their own, and a hooked pattern a copy. */
    char name[96];
    for (int p = 0; spec->cache && p < ATTN_DECODER_HOOK_POINTS; p++)
        for (int64_t l = 0; l < cfg->n_layers; l++)
            if (name_matches(spec, attn_decoder_hook_name((attn_decoder_hook_point)p, l, name, sizeof name)))
                o.tensor_hook_points |= 1u << p;
    const attn_status st = attn_decoder_forward(m, ids, L, &o);
    if (st && !error[0]) snprintf(error, esize, "%s", attn_last_error());
    free(c.tgt);
    free(c.src);
    return st;
}

/* log softmax of logits[id] and the row's log-sum-exp, in double. */
static double log_sum_exp(const float *x, int64_t V) {
    double max = -INFINITY, sum = 0;
    for (int64_t i = 0; i < V; i++) max = fmax(max, (double)x[i]);
    for (int64_t i = 0; i < V; i++) sum += exp((double)x[i] - max);
    return max + log(sum);
}

double trace_kl(const float *p_logits, const float *q_logits, int64_t V) {
    const double lp = log_sum_exp(p_logits, V), lq = log_sum_exp(q_logits, V);
    double kl = 0;
    for (int64_t i = 0; i < V; i++) {
        const double log_p = (double)p_logits[i] - lp, log_q = (double)q_logits[i] - lq;
        kl += exp(log_p) * (log_p - log_q);
    }
    return kl;
}

double trace_prob(const float *logits, int64_t V, int64_t id) {
    return exp((double)logits[id] - log_sum_exp(logits, V));
}

/* The L2 norm of a - b (b NULL: of a) over n floats, in double. */
static double diff_norm(const float *a, const float *b, int64_t n) {
    double ss = 0;
    for (int64_t i = 0; i < n; i++) {
        const double x = (double)a[i] - (b ? (double)b[i] : 0.0);
        ss += x * x;
    }
    return sqrt(ss);
}

attn_status trace_paths_each(const attn_decoder *m, const int32_t *base, const int32_t *changed, int64_t L,
                             trace_layer_paths_fn each, void *user, char *error, size_t esize) {
    const attn_decoder_config *c = attn_decoder_get_config(m);
    const int64_t Hq = c->n_heads, Hkv = c->n_kv_heads, Dh = c->head_dim;
    /* Every layer's rotated queries and keys and its values, of both runs. */
    trace_patch want[3] = {{.kind = TRACE_PATCH_SOURCE, .point = ATTN_DECODER_HOOK_ROT_Q, .layer = -1},
                           {.kind = TRACE_PATCH_SOURCE, .point = ATTN_DECODER_HOOK_ROT_K, .layer = -1},
                           {.kind = TRACE_PATCH_SOURCE, .point = ATTN_DECODER_HOOK_V, .layer = -1}};
    trace_store sb = {0}, sc = {0};
    attn_status st = trace_record_source(m, base, L, want, 3, &sb, error, esize);
    if (!st) st = trace_record_source(m, changed, L, want, 3, &sc, error, esize);
    for (int64_t l = 0; l < c->n_layers && !st; l++) {
        const trace_tensor *q = store_find(&sb, ATTN_DECODER_HOOK_ROT_Q, l), *k = store_find(&sb, ATTN_DECODER_HOOK_ROT_K, l),
                           *v = store_find(&sb, ATTN_DECODER_HOOK_V, l), *q2 = store_find(&sc, ATTN_DECODER_HOOK_ROT_Q, l),
                           *k2 = store_find(&sc, ATTN_DECODER_HOOK_ROT_K, l), *v2 = store_find(&sc, ATTN_DECODER_HOOK_V, l);
        attn_tensor tq = attn_tensor_4d(q->data, 1, L, Hq, Dh), tk = attn_tensor_4d(k->data, 1, L, Hkv, Dh),
                    tv = attn_tensor_4d(v->data, 1, L, Hkv, Dh), tq2 = attn_tensor_4d(q2->data, 1, L, Hq, Dh),
                    tk2 = attn_tensor_4d(k2->data, 1, L, Hkv, Dh), tv2 = attn_tensor_4d(v2->data, 1, L, Hkv, Dh);
        /* The layer's own attention options, as decoder_forward.c sets them. */
        attn_sdpa_options opt = ATTN_SDPA_OPTIONS_INIT;
        opt.scale = c->attn_scale;
        opt.causal = 1;
        if (attn_decoder_layer_is_local(c, l)) {
            opt.window = 1;
            opt.window_left = c->sliding_window - 1;
            opt.window_right = 0;
        }
        attn_paths p = {0};
        if ((st = attn_sdpa_paths(&tq, &tk, &tv, &tq2, &tk2, &tv2, &opt, &p)))
            snprintf(error, esize, "layer %lld: %s", (long long)l, attn_last_error());
        else
            st = each(user, l, &p, error, esize);
        attn_paths_free(&p);
    }
    trace_store_free(&sb);
    trace_store_free(&sc);
    return st;
}

typedef struct head_paths_at {
    trace_head_paths *out;
    int64_t pos, heads;
} head_paths_at;

/* trace_paths' reduction of one layer: the norms at one position. */
static attn_status reduce_layer(void *user, int64_t layer, attn_paths *p, char *error, size_t esize) {
    (void)error, (void)esize;
    const head_paths_at *r = user;
    const int64_t Dh = p->run[ATTN_PATH_BASE].value_dim;
    for (int64_t h = 0; h < r->heads; h++) {
        const int64_t at = (r->pos * r->heads + h) * Dh;
        trace_head_paths *o = &r->out[layer * r->heads + h];
        o->weight = diff_norm(p->run[ATTN_PATH_K_ONLY].z + at, p->run[ATTN_PATH_BASE].z + at, Dh);
        o->content = diff_norm(p->run[ATTN_PATH_V_ONLY].z + at, p->run[ATTN_PATH_BASE].z + at, Dh);
        o->interaction = diff_norm(p->interaction_z + at, NULL, Dh);
        o->changed = diff_norm(p->run[ATTN_PATH_CHANGED].z + at, p->run[ATTN_PATH_BASE].z + at, Dh);
        o->base = diff_norm(p->run[ATTN_PATH_BASE].z + at, NULL, Dh);
    }
    return ATTN_OK;
}

attn_status trace_paths(const attn_decoder *m, const int32_t *base, const int32_t *changed, int64_t L, int64_t pos,
                        trace_head_paths *out, char *error, size_t esize) {
    if (pos < 0) pos += L;
    if (pos < 0 || pos >= L) {
        snprintf(error, esize, "position %lld is outside the %lld tokens", (long long)pos, (long long)L);
        return ATTN_ERR_INVALID_ARGUMENT;
    }
    head_paths_at r = {out, pos, attn_decoder_get_config(m)->n_heads};
    return trace_paths_each(m, base, changed, L, reduce_layer, &r, error, esize);
}

attn_status trace_nullspace(const attn_decoder *m, const int32_t *ids, int64_t L, int64_t layer, int64_t head,
                            int64_t pos, double tolerance, float *weights, double *moved,
                            attn_nullspace_result *result, char *error, size_t esize) {
    const attn_decoder_config *c = attn_decoder_get_config(m);
    if (pos < 0) pos += L;
    if (layer < 0 || layer >= c->n_layers || head < 0 || head >= c->n_heads || pos < 0 || pos >= L) {
        snprintf(error, esize, "layer %lld, head %lld, position %lld: the model has %lld layers of %lld heads, the "
                 "text %lld tokens", (long long)layer, (long long)head, (long long)pos, (long long)c->n_layers,
                 (long long)c->n_heads, (long long)L);
        return ATTN_ERR_INVALID_ARGUMENT;
    }
    trace_patch want[2] = {{.kind = TRACE_PATCH_SOURCE, .point = ATTN_DECODER_HOOK_PATTERN, .layer = layer},
                           {.kind = TRACE_PATCH_SOURCE, .point = ATTN_DECODER_HOOK_V, .layer = layer}};
    trace_store s = {0};
    attn_status st = trace_record_source(m, ids, L, want, 2, &s, error, esize);
    if (st) return st;
    const trace_tensor *p = store_find(&s, ATTN_DECODER_HOOK_PATTERN, layer), *v = store_find(&s, ATTN_DECODER_HOOK_V, layer);
    const int64_t Dh = c->head_dim, Hkv = c->n_kv_heads, kv = head / (c->n_heads / Hkv);
    float *values = malloc((size_t)(L * Dh) * sizeof *values);
    uint8_t *visible = malloc((size_t)L);
    if (!values || !visible) {
        snprintf(error, esize, "out of memory");
        st = ATTN_ERR_OUT_OF_MEMORY;
        goto done;
    }
    /* The keys this query sees: causal, and Gemma's window on local layers
     * (those are exactly the entries the softmax gave weight to, or could). */
    const int local = attn_decoder_layer_is_local(c, layer);
    for (int64_t j = 0; j < L; j++) {
        weights[j] = p->data[(head * L + pos) * L + j];
        visible[j] = j <= pos && (!local || j > pos - c->sliding_window);
        memcpy(values + j * Dh, v->data + (j * Hkv + kv) * Dh, (size_t)Dh * sizeof(float));
    }
    attn_nullspace_options opt = ATTN_NULLSPACE_OPTIONS_INIT;
    opt.tolerance = tolerance;
    if ((st = attn_nullspace_search(weights, values, L, Dh, visible, &opt, moved, result)))
        snprintf(error, esize, "%s", attn_last_error());
done:
    free(values);
    free(visible);
    trace_store_free(&s);
    return st;
}
