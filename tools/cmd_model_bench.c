/*
 * cmd_model_bench.c — `attn model bench`: what llama.cpp's llama-bench
 * measures, on attn's decoder, through the public API only (attn_decoder.h's
 * sessions, as attn model generate decodes), so that bench/llama_compare.sh
 * can put the two side by side on the same GGUF file.
 *
 * The tests, as llama-bench forms them from its lists: for every prompt
 * length P > 0 and depth D, "ppP" (with D > 0: "ppP @ dD"): D tokens run
 * (untimed), then one step of P tokens, timed: P / seconds.  For every
 * generation length N > 0 and depth D, "tgN": D tokens run (untimed), then
 * N steps of one token, timed together: N / seconds.  Each test runs once
 * untimed first (a warm-up: pp its P tokens, tg one token, as llama-bench's),
 * then `rounds` times from an empty session (reset, its cache kept); the
 * median, min and max tokens/s are reported.
 *
 * Token ids are pseudo-random in [0, V) (SplitMix64 from --seed, so the same
 * seed runs the same ids), the first of a session the model's BOS when its
 * GGUF asks for one (tokenizer.ggml.add_bos_token): llama-bench's choice,
 * std::rand() with BOS first.  Logits are computed for the last position of
 * each step, as llama-bench's batches ask.  Nothing is sampled.
 *
 * Memory: the process's peak resident size (getrusage's ru_maxrss, what
 * /usr/bin/time reports) after the load and after each test.
 */
#include "cli.h"

#include "attn_decoder.h"
#include "attn_gguf.h"


#include <stdlib.h>
#include <string.h>

#define CMD "model bench"
#define LIST_MAX 16            /* lengths in one -p / -n / -d list */
#define LENGTH_MAX (1 << 20)   /* tokens of one length              */

static void bench_help(FILE *out) {
    fprintf(out,
    "usage: attn model bench --model FILE.gguf [-p P,P,...] [-n N,N,...] [-d D,D,...]\n"
    "                        [--threads T] [--rounds R] [--kv-dtype D[:DV]] [--seed S]\n"
    "                        [--no-warmup] [--csv] [--weights stored|f32] [--precision exact|fast]\n\n"
    "Times the decoder as llama.cpp's llama-bench does, in tokens per second, on random token ids:\n"
    "  ppP        prompt processing: one step of P tokens through an empty session\n"
    "  tgN        text generation: N steps of one token each (their logits computed, nothing sampled)\n"
    "  ... @ dD   the same after D tokens already in the session (run first, not timed)\n"
    "Every P and every N is run at every depth D (llama-bench's tests). Each test runs once as a\n"
    "warm-up (pp: its P tokens; tg: one token), then R times; the median, min and max are printed,\n"
    "with the load time and the process's peak resident memory (RSS) after the load and after each\n"
    "test. bench/llama_compare.sh runs this beside llama-bench on the same GGUF file.\n\n"
    "  --model FILE.gguf    the model (qwen2, qwen3, gemma3, llama)\n"
    "  -p, --n-prompt LIST  prompt lengths, comma-separated (default 512; 0 = no pp test)\n"
    "  -n, --n-gen LIST     generation lengths (default 128; 0 = no tg test)\n"
    "  -d, --n-depth LIST   depths: tokens in the session before the timed part (default 0)\n"
    "  -t, --threads T      threads of every library call (default: $ATTN_NUM_THREADS, else\n"
    "                       OpenMP's default); sets $ATTN_NUM_THREADS for the run\n"
    "  -r, --rounds R       timed runs of each test (default 5)\n"
    "  --kv-dtype D         the KV cache's storage: f32 (default), f16 (llama-bench's default), bf16,\n"
    "                       q8_0 or fp8 (8-bit blocks of 32 with a float16 scale; docs/cache.md);\n"
    "                       K:V for the keys and the values apart (bf16:q8_0)\n"
    "  --seed S             the token ids' seed, an integer >= 0 (default 0)\n"
    "  --no-warmup          no untimed run before each test's rounds\n"
    "  --csv                one CSV row per test on stdout, after a header:\n"
    "                       model,architecture,threads,kv_dtype,test,n_prompt,n_gen,n_depth,rounds,\n"
    "                       median_tps,min_tps,max_tps,samples_tps,load_s,load_rss_bytes,peak_rss_bytes\n"
    "                       (samples_tps: each round's tokens/s, space-separated; peak_rss_bytes:\n"
    "                       the process's peak RSS up to the end of that test)\n"
    "%s\n"
    "exit status: 0 success, 1 the file cannot be read or run, 2 usage error\n\n"
    "examples:\n"
    "  attn model bench --model ~/.cache/attn/models/gemma-3-270m-q4_k_m.gguf -t 1\n"
    "  attn model bench --model ~/.cache/attn/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf \\\n"
    "      -p 0 -n 128 -d 0,4096 --kv-dtype f16 --csv\n", cli_decoder_help);
}

enum { F_MODEL = 1, F_PROMPT, F_GEN, F_DEPTH, F_THREADS, F_ROUNDS, F_KV_DTYPE, F_SEED, F_NO_WARMUP, F_CSV, F_COUNT };

static const cli_flag bench_flags[] = {
    {"--model", "FILE.gguf", F_MODEL, 0},
    {"-p", "LIST", F_PROMPT, 0},
    {"--n-prompt", "LIST", F_PROMPT, 0},
    {"-n", "LIST", F_GEN, 0},
    {"--n-gen", "LIST", F_GEN, 0},
    {"-d", "LIST", F_DEPTH, 0},
    {"--n-depth", "LIST", F_DEPTH, 0},
    {"-t", "T", F_THREADS, 0},
    {"--threads", "T", F_THREADS, 0},
    {"-r", "R", F_ROUNDS, 0},
    {"--rounds", "R", F_ROUNDS, 0},
    {"--kv-dtype", CLI_KV_CACHE_DTYPES, F_KV_DTYPE, 0},
    {"--seed", "S", F_SEED, 0},
    {"--no-warmup", NULL, F_NO_WARMUP, 0},
    {"--csv", NULL, F_CSV, 0},
    CLI_FLAGS_END};

static const cli_flag *const bench_tables[] = {bench_flags, cli_decoder_flags, NULL};
static const cli_spec cli_model_bench_spec = {CMD, bench_tables, bench_help, false};

typedef struct lengths {
    int64_t v[LIST_MAX];
    int n;
} lengths;

typedef struct bench_args {
    const char *path;
    lengths prompt, gen, depth;
    int64_t rounds;
    attn_dtype kv_dtype, kv_value_dtype; /* V's 0: K's */
    uint64_t seed;
    bool warmup, csv;
    attn_decoder_options load;
} bench_args;

/* "128,512,2048" into *out; a usage error naming the flag otherwise. */
static bool parse_lengths(const char *flag, const char *text, lengths *out) {
    out->n = 0;
    for (const char *p = text;;) {
        const size_t len = strcspn(p, ",");
        char item[32];
        if (out->n == LIST_MAX) {
            cli_usage_error(CMD, "%s: more than %d lengths", flag, LIST_MAX);
            return false;
        }
        if (len == 0 || len >= sizeof item) {
            cli_usage_error(CMD, "%s '%s': expected lengths separated by commas (each an integer >= 0)", flag, text);
            return false;
        }
        memcpy(item, p, len);
        item[len] = '\0';
        if (!cli_parse_int(CMD, flag, item, 0, LENGTH_MAX, &out->v[out->n++])) return false;
        if (!p[len]) return true;
        p += len + 1;
    }
}

/* ------------------------------------------------------------ token ids */

/* SplitMix64 (the sampler's PRNG, attn_decoder.h), for the ids only. */
static uint64_t splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

typedef struct token_source {
    uint64_t state;
    int64_t vocab;
    int32_t bos; /* -1: the model adds none */
} token_source;

/* ids [n]: the next n ids of the stream; the first is BOS when the session
 * is empty (position 0) and the model adds one. */
static void next_ids(token_source *src, int32_t *ids, int64_t n, int64_t position) {
    for (int64_t i = 0; i < n; i++)
        ids[i] = position + i == 0 && src->bos >= 0 ? src->bos
                                                     : (int32_t)(splitmix64(&src->state) % (uint64_t)src->vocab);
}

/* The BOS id when the GGUF's tokenizer asks for one, else -1. */
static int32_t model_bos(const attn_gguf *g, int64_t vocab) {
    int add = 0;
    uint32_t bos;
    if (attn_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &add) != ATTN_OK || !add ||
        attn_gguf_get_u32(g, "tokenizer.ggml.bos_token_id", &bos) != ATTN_OK || (int64_t)bos >= vocab)
        return -1;
    return (int32_t)bos;
}

/* ---------------------------------------------------------- measurement */

static int compare_doubles(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct bench_test {
    int64_t prompt, gen, depth;
} bench_test;

/* "pp512", "tg128 @ d4096" into buf. */
static const char *test_name(const bench_test *t, char *buf, size_t size) {
    int n = snprintf(buf, size, "%s%lld", t->prompt ? "pp" : "tg", (long long)(t->prompt ? t->prompt : t->gen));
    if (t->depth && n > 0 && (size_t)n < size) snprintf(buf + n, size - (size_t)n, " @ d%lld", (long long)t->depth);
    return buf;
}

/* One run of test t from an empty session: the depth untimed, then the
 * timed part; its tokens/s into *tps.  ids has room for the largest step,
 * logits for [V]. */
static attn_status run_once(attn_decoder_session *s, token_source *src, const bench_test *t, bool warmup,
                            int32_t *ids, float *logits, double *tps) {
    attn_status st = attn_decoder_session_reset(s);
    if (!st && t->depth && !warmup) {
        next_ids(src, ids, t->depth, 0);
        st = attn_decoder_step(s, ids, t->depth, NULL);
    }
    const int64_t prompt = t->prompt, gen = warmup && t->gen ? 1 : t->gen;
    const double t0 = cli_seconds();
    if (!st && prompt) {
        next_ids(src, ids, prompt, attn_decoder_session_position(s));
        st = attn_decoder_step(s, ids, prompt, logits);
    }
    for (int64_t i = 0; !st && i < gen; i++) {
        next_ids(src, ids, 1, attn_decoder_session_position(s));
        st = attn_decoder_step(s, ids, 1, logits);
    }
    *tps = (double)(prompt + gen) / (cli_seconds() - t0);
    return st;
}

/* s as one CSV field: quoted, its quotes doubled. */
static void csv_quoted(const char *s) {
    putchar('"');
    for (; *s; s++) {
        if (*s == '"') putchar('"');
        putchar(*s);
    }
    putchar('"');
}

/* The cache's flag name ("f16", "bf16:q8_0"), for the table and the CSV. */
static const char *kv_cache_name(const bench_args *a) {
    static char buf[32]; /* one command, one thread */
    return cli_kv_cache_name(a->kv_dtype, a->kv_value_dtype, buf, sizeof buf);
}

static int bench(const bench_args *a) {
    const double t0 = cli_seconds();
    attn_gguf *g;
    if (attn_gguf_open(a->path, &g)) return cli_data_error(CMD, "--model '%s': %s", a->path, attn_last_error());
    attn_decoder *m = NULL;
    if (attn_decoder_load_with(g, &a->load, &m)) {
        const int rc = cli_data_error(CMD, "--model '%s': %s", a->path, attn_last_error());
        attn_gguf_free(g);
        return rc;
    }
    const attn_decoder_config *c = attn_decoder_get_config(m);
    token_source src = {.state = a->seed, .vocab = c->vocab, .bos = model_bos(g, c->vocab)};
    attn_gguf_free(g); /* the decoder keeps what it needs, as generate's */
    const double load_s = cli_seconds() - t0, load_rss = cli_peak_rss_bytes();
    const int threads = attn_thread_count(0);

    /* llama-bench's order: every P at every depth, then every N. */
    bench_test tests[2 * LIST_MAX * LIST_MAX];
    int n_tests = 0;
    int64_t longest = 1;
    for (int kind = 0; kind < 2; kind++) {
        const lengths *l = kind == 0 ? &a->prompt : &a->gen;
        for (int i = 0; i < l->n; i++)
            for (int j = 0; l->v[i] && j < a->depth.n; j++) {
                tests[n_tests++] = (bench_test){kind == 0 ? l->v[i] : 0, kind == 1 ? l->v[i] : 0, a->depth.v[j]};
                if (l->v[i] > longest) longest = l->v[i];
                if (a->depth.v[j] > longest) longest = a->depth.v[j];
            }
    }
    int rc = CLI_OK;
    int32_t *ids = malloc((size_t)longest * sizeof *ids);
    float *logits = malloc((size_t)c->vocab * sizeof *logits);
    double *tps = malloc((size_t)a->rounds * sizeof *tps);
    const size_t samples_size = (size_t)a->rounds * 32 + 1;
    char *samples = malloc(samples_size);
    if (!ids || !logits || !tps || !samples) {
        rc = cli_data_error(CMD, "out of memory");
        goto done;
    }
    if (a->csv) {
        printf("model,architecture,threads,kv_dtype,test,n_prompt,n_gen,n_depth,rounds,median_tps,min_tps,max_tps,"
               "samples_tps,load_s,load_rss_bytes,peak_rss_bytes\n");
    } else {
        printf("attn model bench: %s\n  %s, %lld layers, d_model %lld, vocabulary %lld; %d thread%s, KV cache %s,"
               " %lld round%s%s\n  loaded in %.2f s (%.1f MiB of weights held), peak RSS %.1f MiB after the load\n\n"
               "%-16s %12s %12s %12s %14s\n",
               a->path, c->architecture, (long long)c->n_layers, (long long)c->d_model, (long long)c->vocab, threads,
               threads == 1 ? "" : "s", kv_cache_name(a), (long long)a->rounds, a->rounds == 1 ? "" : "s",
               a->warmup ? " after a warm-up" : ", no warm-up", load_s,
               (double)attn_decoder_weight_bytes(m) / 1048576.0, load_rss / 1048576.0, "test", "t/s median",
               "min", "max", "peak RSS MiB");
    }
    fflush(stdout);
    for (int k = 0; k < n_tests && !rc; k++) {
        const bench_test *t = &tests[k];
        char name[64];
        test_name(t, name, sizeof name);
        attn_decoder_session_options so = ATTN_DECODER_SESSION_OPTIONS_INIT;
        so.capacity = t->depth + t->prompt + t->gen;
        so.kv_dtype = a->kv_dtype;
        so.kv_value_dtype = a->kv_value_dtype;
        attn_decoder_session *s = NULL;
        attn_status st = attn_decoder_session_new(m, &so, &s);
        double ignored;
        if (!st && a->warmup) st = run_once(s, &src, t, true, ids, logits, &ignored);
        for (int64_t r = 0; !st && r < a->rounds; r++) st = run_once(s, &src, t, false, ids, logits, &tps[r]);
        attn_decoder_session_free(s);
        if (st) {
            rc = cli_data_error(CMD, "%s: %s", name, attn_last_error());
            break;
        }
        size_t used = 0;
        samples[0] = '\0';
        for (int64_t r = 0; r < a->rounds && used < samples_size; r++) {
            const int n = snprintf(samples + used, samples_size - used, "%s%.2f", r ? " " : "", tps[r]);
            used += n > 0 ? (size_t)n : 0;
        }
        qsort(tps, (size_t)a->rounds, sizeof *tps, compare_doubles);
        const int64_t h = a->rounds / 2;
        const double median = a->rounds % 2 ? tps[h] : 0.5 * (tps[h - 1] + tps[h]);
        const double peak = cli_peak_rss_bytes();
        if (a->csv) {
            csv_quoted(a->path);
            printf(",%s,%d,%s,%s,%lld,%lld,%lld,%lld,%.3f,%.3f,%.3f,%s,%.3f,%.0f,%.0f\n", c->architecture, threads, kv_cache_name(a), name, (long long)t->prompt,
                   (long long)t->gen, (long long)t->depth, (long long)a->rounds, median, tps[0], tps[a->rounds - 1],
                   samples, load_s, load_rss, peak);
        } else {
            printf("%-16s %12.2f %12.2f %12.2f %14.1f\n", name, median, tps[0], tps[a->rounds - 1], peak / 1048576.0);
        }
        fflush(stdout);
    }
done:
    free(ids);
    free(logits);
    free(tps);
    free(samples);
    attn_decoder_free(m);
    return rc;
}

int cmd_model_bench(int argc, char **argv) {
    bench_args a = {.prompt = {{512}, 1}, .gen = {{128}, 1}, .depth = {{0}, 1}, .rounds = 5, .kv_dtype = ATTN_F32,
                    .warmup = true, .load = ATTN_DECODER_OPTIONS_INIT};
    bool given[F_COUNT] = {false};
    cli_args args;
    const char *value;
    cli_args_begin(&args, &cli_model_bench_spec, argc, argv);
    for (int id; (id = cli_args_next(&args, &value)) != CLI_ARGS_END;) {
        if (id == CLI_ARGS_STOP) return args.status;
        /* -p and --n-prompt are one flag: the parser sees two names. */
        if (id > 0 && id < F_COUNT && given[id])
            return cli_usage_error(CMD, "%s: given twice (%s is the same flag)", args.flag,
                                   cli_args_flag_name(&args, id));
        if (id > 0 && id < F_COUNT) given[id] = true;
        int64_t n;
        switch (id) {
        case F_MODEL: a.path = value; break;
        case F_PROMPT:
            if (!parse_lengths(args.flag, value, &a.prompt)) return CLI_USAGE_ERROR;
            break;
        case F_GEN:
            if (!parse_lengths(args.flag, value, &a.gen)) return CLI_USAGE_ERROR;
            break;
        case F_DEPTH:
            if (!parse_lengths(args.flag, value, &a.depth)) return CLI_USAGE_ERROR;
            break;
        case F_THREADS:
            if (!cli_parse_int(CMD, args.flag, value, 1, 4096, &n)) return CLI_USAGE_ERROR;
            /* Every library call of the run reads it (the projections too). */
            setenv("ATTN_NUM_THREADS", value, 1);
            break;
        case F_ROUNDS:
            if (!cli_parse_int(CMD, args.flag, value, 1, 1000, &a.rounds)) return CLI_USAGE_ERROR;
            break;
        case F_KV_DTYPE:
            if (!cli_parse_kv_cache(CMD, "--kv-dtype", value, &a.kv_dtype, &a.kv_value_dtype)) return CLI_USAGE_ERROR;
            break;
        case F_SEED:
            if (!cli_parse_int(CMD, args.flag, value, 0, INT64_MAX, &n)) return CLI_USAGE_ERROR;
            a.seed = (uint64_t)n;
            break;
        case F_NO_WARMUP: a.warmup = false; break;
        case F_CSV: a.csv = true; break;
        default:
            if (cli_decoder_take(&a.load, CMD, id, value) < 0) return CLI_USAGE_ERROR;
            break;
        }
    }
    if (!a.path) return cli_usage_error(CMD, "--model FILE.gguf is required");
    bool any = false;
    for (int i = 0; i < a.prompt.n; i++) any |= a.prompt.v[i] > 0;
    for (int i = 0; i < a.gen.n; i++) any |= a.gen.v[i] > 0;
    if (!any) return cli_usage_error(CMD, "no test: every -p and -n length is 0");
    return bench(&a);
}
