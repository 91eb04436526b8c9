/*
 * cmd_generate.c — `attn model generate`: a real model continues a text,
 * streamed to stdout as the tokens come (attn_decoder.h's sessions and
 * sampler, attn_tokenizer.h's encode and decode).
 *
 * The prompt is encoded as the model's tokenizer does (Gemma: BOS first),
 * run in one step (prefill), then each sampled token is decoded and run at
 * the next position (decode) until --max-tokens or an end-of-sequence token.
 * A token may end inside a UTF-8 character (byte-level BPE splits 苹 across
 * tokens when it has no token of its own): its bytes wait until the
 * character is complete, and only whole characters are printed.
 */
#include "cli.h"

#include "attn_decoder.h"
#include "attn_tokenizer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TOKENS_DEFAULT 64
#define MAX_TOKENS_MAX 32768
#define CMD "model generate"

static void generate_help(FILE *out) {
    char architectures[256];
    fprintf(out,
    "usage: attn model generate --model FILE.gguf --text TEXT [--max-tokens N]\n"
    "                           [--temperature T] [--top-k K] [--top-p P] [--seed S]\n"
    "                           [--kv-dtype f32|f16|bf16|q8_0|fp8] [--stop-at-eos | --no-stop]\n\n"
    "Continues TEXT with a GGUF model (%s), printing the new text to stdout\n"
    "as each token comes (whole UTF-8 characters only: a token that ends inside one waits for the\n"
    "rest).\n"
    "The prompt is encoded as the model's tokenizer does (Gemma: BOS first) and run in one step;\n"
    "then each token runs at the next position through attn's KV cache. Timings on stderr:\n"
    "load, prefill and decode tokens/s, the KV cache's size.\n\n"
    "  --model FILE.gguf    the model (all weights are dequantized to float32 at load: about\n"
    "                       2.4 GiB for Qwen2.5 0.5B, 1 GiB for Gemma 3 270M)\n"
    "  --text TEXT          the prompt, UTF-8 (not empty)\n"
    "  --max-tokens N       tokens to generate, at most (default %d, up to %d)\n"
    "  --temperature T      0 = greedy, the largest logit (default without --top-k/--top-p); > 0\n"
    "                       samples softmax(logits / T) (default 1 when --top-k or --top-p is given)\n"
    "  --top-k K            sample among the K most likely tokens only (default 0: all); 1 = greedy\n"
    "  --top-p P            sample among the most likely tokens whose probability reaches P, in (0, 1]\n"
    "                       (default 1: all); applied after --top-k, as Hugging Face does\n"
    "  --seed S             the sampler's seed, an integer >= 0 (default 0); the same seed and\n"
    "                       options give the same tokens (SplitMix64, integer arithmetic only)\n"
    "  --kv-dtype D         the KV cache's storage: f32 (default; the full forward's logits to\n"
    "                       float rounding), f16 or bf16 (half the memory, rounded once), q8_0\n"
    "                       or fp8 (e4m3): 8-bit blocks of 32 with a float16 scale, 0.27x the\n"
    "                       memory of f32 (head_dim a multiple of 32; docs/cache.md)\n"
    "  --kv-cache D         the same as --kv-dtype\n"
    "  --stop-at-eos        stop at the model's end tokens (default): its EOS id, and <|im_end|>,\n"
    "                       <|endoftext|> or <end_of_turn> where the vocabulary has them\n"
    "  --no-stop            generate all N tokens, printing end tokens as their text\n\n"
    "exit status: 0 success, 1 the file cannot be read or run, 2 usage error\n\n"
    "examples:\n"
    "  attn model generate --model ~/.cache/attn/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf \\\n"
    "      --text \"这台电脑来自苹果\"\n"
    "  attn model generate --model ~/.cache/attn/models/gemma-3-270m-q4_k_m.gguf \\\n"
    "      --text \"The capital of France is\" --max-tokens 30 --temperature 0.7 --top-p 0.9 --seed 1\n",
    cli_model_architectures(architectures, sizeof architectures), MAX_TOKENS_DEFAULT, MAX_TOKENS_MAX);
}

enum { F_MODEL = 1, F_TEXT, F_MAX_TOKENS, F_TEMPERATURE, F_TOP_K, F_TOP_P, F_SEED, F_KV_DTYPE, F_STOP, F_NO_STOP };

static const cli_flag generate_flags[] = {
    {"--model", "FILE.gguf", F_MODEL, 0},
    {"--text", "TEXT", F_TEXT, 0},
    {"--max-tokens", "N", F_MAX_TOKENS, 0},
    {"--temperature", "T", F_TEMPERATURE, 0},
    {"--top-k", "K", F_TOP_K, 0},
    {"--top-p", "P", F_TOP_P, 0},
    {"--seed", "S", F_SEED, 0},
    {"--kv-dtype", CLI_KV_DTYPES, F_KV_DTYPE, 0},
    {"--kv-cache", CLI_KV_DTYPES, F_KV_DTYPE, 0},
    {"--stop-at-eos", NULL, F_STOP, 0},
    {"--no-stop", NULL, F_NO_STOP, 0},
    CLI_FLAGS_END};

static const cli_flag *const generate_tables[] = {generate_flags, NULL};
static const cli_spec cli_generate_spec = {CMD, generate_tables, generate_help, false};

/* ------------------------------------------------ whole characters only */

/* Bytes decoded but not printed yet: at most the start of one character. */
typedef struct utf8_stream {
    unsigned char pending[64];
    size_t n;
    bool last_newline; /* the last byte printed was '\n' */
    bool printed;
} utf8_stream;

/* Length of the UTF-8 sequence led by c (1..4), 0 for a byte that cannot lead. */
static size_t utf8_length(unsigned char c) {
    return c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
}

static void emit(utf8_stream *u, const unsigned char *p, size_t n) {
    if (!n) return;
    fwrite(p, 1, n, stdout);
    u->last_newline = p[n - 1] == '\n';
    u->printed = true;
}

/* Prints the complete characters at the start of pending and keeps an
 * incomplete end (a character's first bytes, waiting for the next token).
 * What can never become a character is printed as one U+FFFD per maximal
 * subpart, as Python's (and so Hugging Face's) errors="replace" decoding
 * does: a stray continuation byte, or a lead byte with the continuations
 * that followed it before something else did.  final: the end of the
 * text, so an incomplete end is such a subpart too.  (Overlong and
 * surrogate forms, E0 80.., ED A0.., are not looked for: the vocabularies'
 * byte tokens come from valid text.) */
static void utf8_flush(utf8_stream *u, bool final) {
    static const unsigned char replacement[3] = {0xEF, 0xBF, 0xBD};
    size_t i = 0, start = 0;
    while (i < u->n) {
        const size_t len = utf8_length(u->pending[i]);
        size_t k = 0; /* continuation bytes after the lead */
        while (len > 1 && k + 1 < len && i + 1 + k < u->n && (u->pending[i + 1 + k] & 0xC0) == 0x80) k++;
        if (len > 0 && k + 1 == len) {
            i += len;
            continue;
        }
        if (len > 0 && i + 1 + k == u->n && !final) break; /* wait for the rest */
        emit(u, u->pending + start, i - start);
        emit(u, replacement, sizeof replacement);
        i += len > 0 ? 1 + k : 1;
        start = i;
    }
    emit(u, u->pending + start, i - start);
    memmove(u->pending, u->pending + i, u->n - i);
    u->n -= i;
    fflush(stdout);
}

/* Appends token id's bytes and prints what is complete.  False after a
 * data error (printed). */
static bool utf8_token(utf8_stream *u, const attn_tokenizer *tok, int32_t id) {
    char buf[256];
    size_t len;
    if (attn_tokenizer_decode(tok, &id, 1, 0, buf, sizeof buf, &len) != ATTN_OK) {
        cli_data_error(CMD, "decoding token %ld: %s", (long)id, attn_last_error());
        return false;
    }
    for (size_t i = 0; i < len; i++) {
        if (u->n == sizeof u->pending) utf8_flush(u, true); /* cannot happen for UTF-8: a character is 4 bytes */
        u->pending[u->n++] = (unsigned char)buf[i];
    }
    utf8_flush(u, false);
    return true;
}

/* ------------------------------------------------------------ the run */

typedef struct generate_args {
    const char *path, *text;
    int64_t max_tokens;
    attn_sampler_options sampling;
    attn_dtype kv_dtype;
    bool stop_at_eos;
} generate_args;

static int generate(const generate_args *a) {
    attn_gguf *g;
    if (attn_gguf_open(a->path, &g)) return cli_data_error(CMD, "--model '%s': %s", a->path, attn_last_error());
    int rc = CLI_OK;
    attn_tokenizer *tok = NULL;
    attn_decoder *m = NULL;
    attn_decoder_session *session = NULL;
    attn_sampler *sampler = NULL;
    int32_t *ids = NULL;
    float *logits = NULL;
    const double t0 = cli_seconds();
    if (attn_tokenizer_from_gguf(g, &tok) || attn_decoder_load(g, &m)) {
        rc = cli_data_error(CMD, "--model '%s': %s", a->path, attn_last_error());
        goto done;
    }
    attn_gguf_free(g);
    g = NULL;
    const attn_decoder_config *c = attn_decoder_get_config(m);
    const size_t text_len = strlen(a->text);
    size_t n_prompt;
    ids = malloc((text_len + 2 + (size_t)a->max_tokens) * sizeof *ids);
    logits = malloc((size_t)c->vocab * sizeof *logits);
    if (!ids || !logits) {
        rc = cli_data_error(CMD, "out of memory");
        goto done;
    }
    if (attn_tokenizer_encode(tok, a->text, text_len, 0, ids, text_len + 2, &n_prompt)) {
        rc = cli_data_error(CMD, "--text: %s", attn_last_error());
        goto done;
    }
    if (n_prompt == 0) {
        rc = cli_usage_error(CMD, "--text encodes to no tokens: nothing to continue");
        goto done;
    }
    attn_decoder_session_options so = ATTN_DECODER_SESSION_OPTIONS_INIT;
    so.capacity = (int64_t)n_prompt + a->max_tokens;
    so.kv_dtype = a->kv_dtype;
    if (attn_decoder_session_new(m, &so, &session) ||
        attn_sampler_new(&a->sampling, c->vocab, &sampler)) {
        rc = cli_data_error(CMD, "%s", attn_last_error());
        goto done;
    }
    int32_t ends[ATTN_TOKENIZER_MAX_END_IDS];
    const int n_ends = a->stop_at_eos ? attn_tokenizer_end_ids(tok, ends) : 0;
    const double t1 = cli_seconds();
    if (attn_decoder_step(session, ids, (int64_t)n_prompt, logits)) {
        rc = cli_data_error(CMD, "prefill: %s", attn_last_error());
        goto done;
    }
    const double t2 = cli_seconds();
    utf8_stream out = {.n = 0};
    int64_t generated = 0, decoded = 0;
    const char *why = "--max-tokens";
    while (generated < a->max_tokens) {
        int32_t next;
        if (attn_sampler_sample(sampler, logits, &next)) {
            rc = cli_data_error(CMD, "sampling token %lld: %s", (long long)generated, attn_last_error());
            break;
        }
        bool end = false;
        for (int e = 0; e < n_ends; e++) end |= next == ends[e];
        if (end) {
            why = "an end token";
            break;
        }
        ids[n_prompt + (size_t)generated++] = next;
        if (!utf8_token(&out, tok, next)) {
            rc = CLI_DATA_ERROR;
            break;
        }
        if (generated == a->max_tokens) break; /* its logits would not be used */
        if (attn_decoder_step(session, &next, 1, logits)) {
            rc = cli_data_error(CMD, "decoding token %lld: %s", (long long)generated, attn_last_error());
            break;
        }
        decoded++;
    }
    utf8_flush(&out, true);
    if (out.printed && !out.last_newline) fputc('\n', stdout);
    fflush(stdout);
    const double t3 = cli_seconds(), decode_s = t3 - t2;
    const double kv_mib = (double)so.capacity * (double)attn_decoder_kv_bytes_per_token(c, a->kv_dtype) / 1048576.0;
    fprintf(stderr,
            "attn %s: %s, loaded in %.2f s (%.0f MiB float32); KV cache %s, %lld positions, %.1f MiB\n"
            "attn %s: prefill %zu tokens in %.3f s (%.1f tokens/s); decode %lld tokens in %.3f s (%.2f tokens/s); "
            "%lld generated, stopped by %s\n",
            CMD, c->architecture, t1 - t0, (double)attn_decoder_weight_bytes(m) / 1048576.0,
            attn_dtype_name(a->kv_dtype), (long long)so.capacity, kv_mib, CMD, n_prompt, t2 - t1,
            (double)n_prompt / (t2 - t1), (long long)decoded, decode_s, decoded ? (double)decoded / decode_s : 0.0,
            (long long)generated, rc ? "an error" : why);
done:
    attn_sampler_free(sampler);
    attn_decoder_session_free(session);
    attn_decoder_free(m);
    attn_tokenizer_free(tok);
    attn_gguf_free(g);
    free(ids);
    free(logits);
    return rc;
}

int cmd_model_generate(int argc, char **argv) {
    generate_args a = {.max_tokens = MAX_TOKENS_DEFAULT, .kv_dtype = ATTN_F32, .stop_at_eos = true};
    attn_sampler_options so = ATTN_SAMPLER_OPTIONS_INIT;
    a.sampling = so;
    cli_args args;
    const char *value;
    cli_args_begin(&args, &cli_generate_spec, argc, argv);
    for (int id; (id = cli_args_next(&args, &value)) != CLI_ARGS_END;) {
        int64_t n;
        switch (id) {
        case CLI_ARGS_STOP: return args.status;
        case F_MODEL: a.path = value; break;
        case F_TEXT: a.text = value; break;
        case F_MAX_TOKENS:
            if (!cli_parse_int(CMD, args.flag, value, 1, MAX_TOKENS_MAX, &a.max_tokens)) return CLI_USAGE_ERROR;
            break;
        case F_TEMPERATURE:
            if (!cli_parse_float(CMD, args.flag, value, 0.0, 1e6, &a.sampling.temperature)) return CLI_USAGE_ERROR;
            break;
        case F_TOP_K:
            if (!cli_parse_int(CMD, args.flag, value, 0, INT32_MAX, &a.sampling.top_k)) return CLI_USAGE_ERROR;
            break;
        case F_TOP_P:
            if (!cli_parse_float(CMD, args.flag, value, 0.0, 1.0, &a.sampling.top_p)) return CLI_USAGE_ERROR;
            if (!(a.sampling.top_p > 0.0))
                return cli_usage_error(CMD, "--top-p is %s: must be in (0, 1] (1 = no cut)", value);
            break;
        case F_SEED:
            if (!cli_parse_int(CMD, args.flag, value, 0, INT64_MAX, &n)) return CLI_USAGE_ERROR;
            a.sampling.seed = (uint64_t)n;
            break;
        case F_KV_DTYPE:
            if (!cli_parse_kv_dtype(CMD, "--kv-dtype", value, &a.kv_dtype)) return CLI_USAGE_ERROR;
            break;
        case F_STOP: a.stop_at_eos = true; break;
        case F_NO_STOP: a.stop_at_eos = false; break;
        default: break;
        }
    }
    /* --top-k or --top-p alone asks for sampling: at temperature 1, as
     * transformers' do_sample with its default temperature. */
    if (!cli_args_given(&args, F_TEMPERATURE) && (cli_args_given(&args, F_TOP_K) || cli_args_given(&args, F_TOP_P)))
        a.sampling.temperature = 1.0;
    if (cli_args_given(&args, F_STOP) && cli_args_given(&args, F_NO_STOP))
        return cli_usage_error(CMD, "--stop-at-eos and --no-stop contradict each other: give one");
    if (!a.path) return cli_usage_error(CMD, "--model FILE.gguf is required");
    if (!a.text) return cli_usage_error(CMD, "--text TEXT is required (the prompt to continue)");
    return generate(&a);
}
