/*
 * cmd_train.c — `attn train`: attention learns where to look from the loss
 * alone (chapter §2: "nobody labels where to attend").
 *
 * The task, associative recall: a sequence of S (key token, value token)
 * pairs, all keys different, then a query key that is one of them; the
 * target is the value paired with it.  Which pair to read is never given.
 *
 * The formulation a single attention layer can solve: each PAIR is one
 * position, its vector the concatenation [E_key[key]; E_val[value]] of two
 * fixed random embedding tables.  The query is its own position,
 * [E_key[query]; 0], and attends over the S pair positions (the module's
 * cross-attention: x = the query, context = the pairs).  To answer, W_Q and
 * W_K must make q.k large exactly when the two key halves hold the same
 * token (a match by CONTENT: no position information is needed or given),
 * and W_V, W_O and the readout must carry the value half of the attended
 * pair to the logits.  Were key and value separate positions, the value
 * would have to be found as "the token right after the matching key", which
 * needs a second layer (or previous-token features) to see.
 *
 * Model and shapes (B sequences per step):
 *   x [B, 1, 2E]  context [B, S, 2E]        E = embedding width per table
 *   attention (attn_mha_forward): wq, wk [2E, D]  wv [2E, D]  wo [D, 2E], one head
 *   readout (attn_linear_forward): wr [2E, NV]  br [NV]  -> logits [B, NV]
 *   loss = mean cross-entropy; gradients by attn_linear_backward and
 *   attn_mha_backward; Adam.
 * Everything is seeded; the library's kernels are deterministic for any
 * thread count, so the same seed prints the same numbers.
 */
#include "cli.h"
#include "cli_stdout.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum {
    KEY_TOKENS = 16,   /* NK: the keys of a sequence are distinct, so S <= NK */
    VALUE_TOKENS = 16, /* NV                                                   */
    EMBED = 32,        /* E: width of each embedding table                     */
    MODEL = 2 * EMBED, /* d_model = d_context = d_out of the attention layer   */
    HEAD = 32,         /* D = Dv                                               */
    BATCH = 32,
    HELD_OUT = 512,    /* examples never trained on, for the before/after figures */
    SHOWN = 3          /* held-out examples whose attention map is printed     */
};

static const char train_usage[] =
    "usage: attn train [--steps N] [--seq-len S] [--seed N] [--lr RATE] [--threads N]\n\n"
    "Attention learns where to look from the loss alone: associative recall.\n"
    "Each sequence holds S (key, value) token pairs with distinct keys, then a query key;\n"
    "the target is the value paired with the query key.  Nothing says which pair to read.\n\n"
    "How one attention layer can solve it: each PAIR is one position, its vector the\n"
    "concatenation [E_key[key]; E_value[value]] of two fixed random embedding tables, and\n"
    "the query [E_key[query]; 0] attends over the S pairs.  W_Q and W_K must learn to make\n"
    "q.k large when the key halves hold the same token (a match by content, no positions),\n"
    "W_V, W_O and a linear readout to carry the attended pair's value half to the logits.\n"
    "(With keys and values at separate positions, the value would be 'the token after the\n"
    "matching key', which one layer without previous-token features cannot see.)\n\n"
    "model: 16 key and 16 value tokens, embeddings 32 + 32 wide, one head with D = 32,\n"
    "W_O [32, 64], readout [64, 16]; cross-entropy loss, Adam, batches of 32 fresh sequences.\n"
    "W_Q starts at zero, so the first attention is exactly uniform (1/S on every pair), and\n"
    "the scores use scale 1 instead of 1/sqrt(D): the same W_Q, W_K then give sqrt(32) times\n"
    "larger scores, so sharp weights are reached before the loss stops pushing (with\n"
    "1/sqrt(D) the task is solved with weights spread over the pairs, ~0.8 on the key).\n"
    "It prints the loss and accuracy while training, then the held-out accuracy, the learned\n"
    "attention of a few held-out queries, and the mean weight the query puts on the pair\n"
    "holding its key, before training (about 1/S) and after.\n\n"
    "options:\n"
    "  --steps N     training steps (default 500)\n"
    "  --seq-len S   pairs per sequence, 2..16 (default 8)\n"
    "  --seed N      random seed of embeddings, initial weights and data (default 1)\n"
    "  --lr RATE     Adam learning rate (default 0.01)\n"
    "  --threads N   threads of every library call (default 1, or $ATTN_NUM_THREADS: the model\n"
    "                is so small that one thread is fastest; the results do not depend on it)\n";

/* ---------------------------------------------------------------- random */

/* splitmix64: seeded, the same on every machine. */
typedef struct { uint64_t state; } rng;

static uint64_t rng_next(rng *r) {
    uint64_t z = (r->state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static double rng_uniform(rng *r) { return (double)(rng_next(r) >> 11) * (1.0 / 9007199254740992.0); }
static int rng_below(rng *r, int n) { return (int)(rng_next(r) % (uint64_t)n); }
static double rng_normal(rng *r) {
    double u = 1.0 - rng_uniform(r), w = rng_uniform(r);
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * w);
}
static void fill_normal(rng *r, float *x, int64_t n, double scale) {
    for (int64_t i = 0; i < n; i++) x[i] = (float)(scale * rng_normal(r));
}

/* ----------------------------------------------------------------- model */

/* All trained parameters in one array (so Adam is one loop), with views. */
typedef struct model {
    float *params, *grads, *adam_m, *adam_v;
    int64_t count;
    float *wq, *wk, *wv, *wo, *wr, *br;            /* views into params */
    float *dwq, *dwk, *dwv, *dwo, *dwr, *dbr;      /* views into grads  */
    float embed_key[KEY_TOKENS * EMBED], embed_value[VALUE_TOKENS * EMBED]; /* fixed */
    attn_mha mha;
} model;

static bool model_init(model *m, rng *r) {
    const int64_t sizes[6] = {MODEL * HEAD, MODEL * HEAD, MODEL * HEAD, HEAD * MODEL, MODEL * VALUE_TOKENS,
                              VALUE_TOKENS};
    m->count = 0;
    for (int i = 0; i < 6; i++) m->count += sizes[i];
    m->params = calloc((size_t)m->count, sizeof(float));
    m->grads = calloc((size_t)m->count, sizeof(float));
    m->adam_m = calloc((size_t)m->count, sizeof(float));
    m->adam_v = calloc((size_t)m->count, sizeof(float));
    if (!m->params || !m->grads || !m->adam_m || !m->adam_v) return false;
    float **views[6] = {&m->wq, &m->wk, &m->wv, &m->wo, &m->wr, &m->br};
    float **dviews[6] = {&m->dwq, &m->dwk, &m->dwv, &m->dwo, &m->dwr, &m->dbr};
    int64_t offset = 0;
    for (int i = 0; i < 6; i++) {
        *views[i] = m->params + offset;
        *dviews[i] = m->grads + offset;
        offset += sizes[i];
    }
    /* Unit-length embeddings on average; weights with variance 1 / fan-in
     * (calloc left W_Q at zero). */
    fill_normal(r, m->embed_key, KEY_TOKENS * EMBED, 1.0 / sqrt(EMBED));
    fill_normal(r, m->embed_value, VALUE_TOKENS * EMBED, 1.0 / sqrt(EMBED));
    /* W_Q = 0: every score is 0, so the first attention is exactly uniform
     * (1/S on every pair); the loss alone must make it look somewhere. */
    fill_normal(r, m->wk, MODEL * HEAD, 1.0 / sqrt(MODEL));
    fill_normal(r, m->wv, MODEL * HEAD, 1.0 / sqrt(MODEL));
    fill_normal(r, m->wo, HEAD * MODEL, 1.0 / sqrt(HEAD));
    fill_normal(r, m->wr, MODEL * VALUE_TOKENS, 1.0 / sqrt(MODEL));
    m->mha = (attn_mha){.struct_size = sizeof(attn_mha), .d_model = MODEL, .d_context = MODEL, .heads = 1, .head_dim = HEAD, .d_out = MODEL,
                        .wq = m->wq, .wk = m->wk, .wv = m->wv, .wo = m->wo};
    return true;
}

static void model_free(model *m) {
    free(m->params);
    free(m->grads);
    free(m->adam_m);
    free(m->adam_v);
}

/* ------------------------------------------------------------------ data */

typedef struct batch {
    int n, len;                      /* sequences, pairs per sequence     */
    int *keys, *values, *query_pos;  /* [n, len], [n, len], [n]           */
    float *x, *context;              /* [n, 1, MODEL], [n, len, MODEL]    */
} batch;

static bool batch_alloc(batch *b, int n, int len) {
    b->n = n;
    b->len = len;
    b->keys = malloc(sizeof(int) * (size_t)(n * len));
    b->values = malloc(sizeof(int) * (size_t)(n * len));
    b->query_pos = malloc(sizeof(int) * (size_t)n);
    b->x = malloc(sizeof(float) * (size_t)(n * MODEL));
    b->context = malloc(sizeof(float) * (size_t)(n * len * MODEL));
    return b->keys && b->values && b->query_pos && b->x && b->context;
}

static void batch_free(batch *b) {
    free(b->keys);
    free(b->values);
    free(b->query_pos);
    free(b->x);
    free(b->context);
}

/* Draws n fresh sequences and embeds them. */
static void batch_draw(batch *b, rng *r, const model *m) {
    for (int s = 0; s < b->n; s++) {
        int pool[KEY_TOKENS];
        for (int t = 0; t < KEY_TOKENS; t++) pool[t] = t;
        for (int p = 0; p < b->len; p++) { /* distinct keys: a partial shuffle */
            int pick = p + rng_below(r, KEY_TOKENS - p), tmp = pool[p];
            pool[p] = pool[pick];
            pool[pick] = tmp;
            b->keys[s * b->len + p] = pool[p];
            b->values[s * b->len + p] = rng_below(r, VALUE_TOKENS);
        }
        b->query_pos[s] = rng_below(r, b->len);
        const int query_key = b->keys[s * b->len + b->query_pos[s]];
        float *x_s = b->x + s * MODEL;
        memcpy(x_s, m->embed_key + query_key * EMBED, sizeof(float) * EMBED);
        memset(x_s + EMBED, 0, sizeof(float) * EMBED);
        for (int p = 0; p < b->len; p++) {
            float *c_sp = b->context + (s * b->len + p) * MODEL;
            memcpy(c_sp, m->embed_key + b->keys[s * b->len + p] * EMBED, sizeof(float) * EMBED);
            memcpy(c_sp + EMBED, m->embed_value + b->values[s * b->len + p] * EMBED, sizeof(float) * EMBED);
        }
    }
}

static int batch_target(const batch *b, int s) { return b->values[s * b->len + b->query_pos[s]]; }

/* ------------------------------------------------------------- one pass */

/* Scratch of one forward/backward pass over a batch of n sequences. */
typedef struct pass {
    float *attn_out, *logits, *dlogits, *dattn_out; /* [n, MODEL], [n, NV] ... */
    float *weights;                                 /* [n, 1, 1, len]          */
} pass;

static bool pass_alloc(pass *p, int n, int len) {
    p->attn_out = malloc(sizeof(float) * (size_t)(n * MODEL));
    p->dattn_out = malloc(sizeof(float) * (size_t)(n * MODEL));
    p->logits = malloc(sizeof(float) * (size_t)(n * VALUE_TOKENS));
    p->dlogits = malloc(sizeof(float) * (size_t)(n * VALUE_TOKENS));
    p->weights = malloc(sizeof(float) * (size_t)(n * len));
    return p->attn_out && p->dattn_out && p->logits && p->dlogits && p->weights;
}

static void pass_free(pass *p) {
    free(p->attn_out);
    free(p->dattn_out);
    free(p->logits);
    free(p->dlogits);
    free(p->weights);
}

/* What a forward pass measured. */
typedef struct stats {
    double loss, accuracy, weight_on_key; /* means over the batch */
} stats;

/* Forward over the batch: attention, readout, cross-entropy; dlogits gets
 * dLoss/dlogits of the MEAN loss. */
static attn_status forward(const model *m, const batch *b, const attn_sdpa_options *opt, pass *p, stats *st) {
    attn_status s;
    if ((s = attn_mha_forward(&m->mha, b->x, b->n, 1, b->context, b->len, opt, p->attn_out, p->weights, NULL)) ||
        (s = attn_linear_forward(p->attn_out, b->n, MODEL, m->wr, m->br, VALUE_TOKENS, p->logits)))
        return s;
    *st = (stats){0};
    for (int i = 0; i < b->n; i++) {
        const float *z = p->logits + i * VALUE_TOKENS;
        float *dz = p->dlogits + i * VALUE_TOKENS;
        const int target = batch_target(b, i);
        int best = 0;
        double max = z[0], sum = 0;
        for (int c = 1; c < VALUE_TOKENS; c++)
            if (z[c] > max) { max = z[c]; best = c; }
        for (int c = 0; c < VALUE_TOKENS; c++) sum += exp(z[c] - max);
        /* loss = logsumexp(z) - z[target];  dloss/dz = softmax(z) - onehot(target) */
        st->loss += max + log(sum) - z[target];
        st->accuracy += best == target;
        st->weight_on_key += p->weights[i * b->len + b->query_pos[i]];
        for (int c = 0; c < VALUE_TOKENS; c++)
            dz[c] = (float)((exp(z[c] - max) / sum - (c == target)) / b->n);
    }
    st->loss /= b->n;
    st->accuracy /= b->n;
    st->weight_on_key /= b->n;
    return ATTN_OK;
}

/* Backward of forward(): fills m->grads. */
static attn_status backward(model *m, const batch *b, const attn_sdpa_options *opt, pass *p) {
    attn_status s;
    /* forward was: logits = attn_out . wr + br */
    if ((s = attn_linear_backward(p->attn_out, b->n, MODEL, m->wr, VALUE_TOKENS, p->dlogits, p->dattn_out, m->dwr,
                                  m->dbr)))
        return s;
    /* forward was: attn_out = mha(x, context); the embeddings are fixed, so no dx */
    attn_mha_grads g = {.struct_size = sizeof(attn_mha_grads), .dwq = m->dwq, .dwk = m->dwk, .dwv = m->dwv, .dwo = m->dwo};
    return attn_mha_backward(&m->mha, b->x, b->n, 1, b->context, b->len, opt, p->dattn_out, &g);
}

/* Adam (Kingma & Ba), bias-corrected, step t >= 1. */
static void adam_step(model *m, double lr, int t) {
    const double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
    const double c1 = 1.0 - pow(beta1, t), c2 = 1.0 - pow(beta2, t);
    for (int64_t i = 0; i < m->count; i++) {
        const double g = m->grads[i];
        m->adam_m[i] = (float)(beta1 * m->adam_m[i] + (1 - beta1) * g);
        m->adam_v[i] = (float)(beta2 * m->adam_v[i] + (1 - beta2) * g * g);
        m->params[i] -= (float)(lr * (m->adam_m[i] / c1) / (sqrt(m->adam_v[i] / c2) + eps));
    }
}

/* ---------------------------------------------------------------- output */

static void print_token(char *buf, size_t size, char kind, int token) { snprintf(buf, size, "%c%02d", kind, token); }

/* The learned attention of one held-out query: its pairs, and the weight
 * it puts on each (in %), the pair holding its key starred. */
static void print_map(const batch *b, const pass *p, int s, int shown) {
    char query[16], target[16], predicted[16]; /* room for any int */
    const float *z = p->logits + s * VALUE_TOKENS;
    int best = 0;
    for (int c = 1; c < VALUE_TOKENS; c++)
        if (z[c] > z[best]) best = c;
    print_token(query, sizeof query, 'k', b->keys[s * b->len + b->query_pos[s]]);
    print_token(target, sizeof target, 'v', batch_target(b, s));
    print_token(predicted, sizeof predicted, 'v', best);
    printf("\nexample %d: query %s, target %s, predicted %s\n", shown, query, target, predicted);
    printf("  pair   ");
    for (int j = 0; j < b->len; j++) {
        char key[16], value[16];
        print_token(key, sizeof key, 'k', b->keys[s * b->len + j]);
        print_token(value, sizeof value, 'v', b->values[s * b->len + j]);
        printf(" %s:%s", key, value);
    }
    printf("\n  weight%%");
    for (int j = 0; j < b->len; j++)
        printf(" %6.1f%c", 100.0 * p->weights[s * b->len + j], j == b->query_pos[s] ? '*' : ' ');
    printf("\n");
}

enum { F_STEPS = 1, F_SEQ_LEN, F_SEED, F_LR, F_THREADS };
static const cli_flag train_flags[] = {
    {"--steps", "N", F_STEPS, 0}, {"--seq-len", "S", F_SEQ_LEN, 0}, {"--seed", "N", F_SEED, 0},
    {"--lr", "RATE", F_LR, 0},    {"--threads", "N", F_THREADS, 0}, CLI_FLAGS_END};
static void train_help(FILE *out) { fputs(train_usage, out); }
static const cli_flag *const train_tables[] = {train_flags, NULL};
const cli_spec cli_train_spec = {"train", train_tables, train_help, false};

int cmd_train(int argc, char **argv) {
    int64_t steps = 500, len = 8, seed = 1, threads = 0;
    double lr = 0.01;
    cli_args args;
    const char *value;
    cli_args_begin(&args, &cli_train_spec, argc, argv);
    for (int id; (id = cli_args_next(&args, &value)) != CLI_ARGS_END;) {
        if (id == CLI_ARGS_STOP) return args.status;
        const char *flag = args.flag;
        bool ok = id == F_STEPS     ? cli_parse_int("train", flag, value, 1, 10000000, &steps)
                  : id == F_SEQ_LEN ? cli_parse_int("train", flag, value, 2, KEY_TOKENS, &len)
                  : id == F_SEED    ? cli_parse_int("train", flag, value, 0, INT64_MAX, &seed)
                  : id == F_THREADS ? cli_parse_int("train", flag, value, 1, 4096, &threads)
                                    : cli_parse_float("train", flag, value, 1e-6, 1.0, &lr);
        if (!ok) return CLI_USAGE_ERROR;
        /* --threads governs every library call of the run (the projections
         * read $ATTN_NUM_THREADS); the results do not depend on it. */
        if (id == F_THREADS) setenv("ATTN_NUM_THREADS", value, 1);
    }

    /* The model is tiny: one thread runs it fastest (a parallel region costs
     * more than the work it splits), so that is the default unless the user
     * asked otherwise. */
    if (!threads && !getenv("ATTN_NUM_THREADS")) setenv("ATTN_NUM_THREADS", "1", 1);

    rng r = {(uint64_t)seed}, held_rng = {(uint64_t)seed ^ 0x5DEECE66Dull};
    model m = {0};
    batch train = {0}, held = {0};
    pass tp = {0}, hp = {0};
    int rc = CLI_OK;
    attn_status st = ATTN_OK;
    attn_sdpa_options opt = ATTN_SDPA_OPTIONS_INIT;
    opt.threads = (int)threads;
    opt.scale = 1.0f;
    if (!model_init(&m, &r) || !batch_alloc(&train, BATCH, (int)len) || !batch_alloc(&held, HELD_OUT, (int)len) ||
        !pass_alloc(&tp, BATCH, (int)len) || !pass_alloc(&hp, HELD_OUT, (int)len)) {
        rc = cli_data_error("train", "out of memory");
        goto cleanup;
    }
    batch_draw(&held, &held_rng, &m);

    printf("attn train: associative recall, %lld (key, value) pairs per sequence, %d key and %d value tokens\n"
           "model: fixed random embeddings (%d + %d wide), one attention head (D = %d, scale 1), W_O, "
           "readout; Adam lr %g, batch %d, seed %lld\n",
           (long long)len, KEY_TOKENS, VALUE_TOKENS, EMBED, EMBED, HEAD, lr, BATCH, (long long)seed);
    stats before, after, s;
    if ((st = forward(&m, &held, &opt, &hp, &before))) goto cleanup;
    printf("before training (%d held-out sequences): loss %.4f, accuracy %.3f, "
           "mean weight on the matching key %.3f (1/S = %.3f)\n",
           HELD_OUT, before.loss, before.accuracy, before.weight_on_key, 1.0 / (double)len);

    const bool tty = isatty(STDOUT_FILENO) == 1;
    const int64_t report_every = steps < 20 ? 1 : steps / 20;
    double window_loss = 0, window_acc = 0, first_loss = 0, last_loss = 0;
    for (int64_t t = 1; t <= steps; t++) {
        batch_draw(&train, &r, &m);
        if ((st = forward(&m, &train, &opt, &tp, &s)) || (st = backward(&m, &train, &opt, &tp))) goto cleanup;
        adam_step(&m, lr, (int)(t < 1000000 ? t : 1000000));
        if (t == 1) first_loss = s.loss;
        last_loss = s.loss;
        window_loss += s.loss;
        window_acc += s.accuracy;
        if (t % report_every == 0 || t == steps) {
            int64_t n = t % report_every ? t % report_every : report_every;
            printf("%sstep %6lld/%lld  loss %.4f  accuracy %.3f%s", tty ? "\r" : "", (long long)t, (long long)steps,
                   window_loss / (double)n, window_acc / (double)n, tty ? "" : "\n");
            if (!cli_stdout_ok("train")) { /* a full disk: stop, rather than train on unseen */
                rc = CLI_DATA_ERROR;
                goto cleanup;
            }
            window_loss = window_acc = 0;
        }
    }
    if (tty) printf("\n");
    printf("training loss: %.4f at step 1, %.4f at step %lld\n", first_loss, last_loss, (long long)steps);

    if ((st = forward(&m, &held, &opt, &hp, &after))) goto cleanup;
    printf("after training (%d held-out sequences): loss %.4f, accuracy %.3f\n", HELD_OUT, after.loss, after.accuracy);
    printf("\nlearned attention of %d held-out queries over their %lld pairs (weights in %%; * marks the pair\n"
           "holding the query's key, which no label ever pointed to):\n",
           SHOWN, (long long)len);
    for (int e = 0; e < SHOWN; e++) print_map(&held, &hp, e, e + 1);
    printf("\nmean weight the query puts on the matching key: %.3f before training (1/S = %.3f), %.3f after\n",
           before.weight_on_key, 1.0 / (double)len, after.weight_on_key);

cleanup:
    if (st != ATTN_OK) rc = cli_data_error("train", "%s: %s", attn_status_str(st), attn_last_error());
    model_free(&m);
    batch_free(&train);
    batch_free(&held);
    pass_free(&tp);
    pass_free(&hp);
    return rc;
}
