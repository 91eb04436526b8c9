/*
 * cli_generation.c — the model, the sampling flags and the generation loop
 * of `attn model generate` and `attn model chat` (cli_generation.h).
 *
 * Streaming: a token may end inside a UTF-8 character (byte-level BPE
 * splits 苹 across tokens when it has no token of its own): its bytes wait
 * until the character is complete, and only whole characters are printed;
 * bytes that can never become a character print as U+FFFD, one per maximal
 * subpart, as Python's errors="replace" (and so Hugging Face's decode)
 * does.  Text that could be the start of a stop string waits too, until
 * the next token shows whether it is one.
 */
#include "cli_generation.h"

#include "cli.h"
#include "cli_stdout.h"

#include "attn_gguf.h"

#include <sys/stat.h>

#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------ the model */

bool cli_is_checkpoint(const char *path) {
    struct stat sb;
    const size_t n = strlen(path);
    return (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) ||
           (n >= 12 && strcmp(path + n - 12, ".safetensors") == 0) || (n >= 5 && strcmp(path + n - 5, ".json") == 0);
}

/* The text of token id (NULL when id < 0), malloc'd. */
static char *token_text(const attn_tokenizer *tok, int32_t id) {
    const char *piece;
    size_t len;
    if (id < 0 || attn_tokenizer_token(tok, id, &piece, &len, NULL) != ATTN_OK) return NULL;
    char *out = malloc(len + 1);
    if (!out) return NULL;
    size_t decoded;
    if (attn_tokenizer_decode(tok, &id, 1, 0, out, len + 1, &decoded) != ATTN_OK) {
        free(out);
        return NULL;
    }
    return out;
}

static void add_end_id(cli_model *m, int32_t id) {
    for (int k = 0; k < m->n_end_ids; k++)
        if (m->end_ids[k] == id) return;
    if (m->n_end_ids < CLI_MAX_END_IDS) m->end_ids[m->n_end_ids++] = id;
}

char *cli_read_stream(const char *cmd, FILE *f, const char *what, size_t *len) {
    char *text = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (cap - n < 4096) {
            char *grown = realloc(text, cap = cap * 2 + 4096);
            if (!grown) {
                free(text);
                cli_data_error(cmd, "%s: out of memory", what);
                return NULL;
            }
            text = grown;
        }
        const size_t got = fread(text + n, 1, cap - n - 1, f);
        n += got;
        if (!got) break;
    }
    if (ferror(f)) {
        free(text);
        cli_data_error(cmd, "%s: cannot read it", what);
        return NULL;
    }
    text[n] = 0;
    *len = n;
    return text;
}

/* A template file given with --template. */
static int template_file(const char *cmd, const char *path, attn_chat_template **out) {
    FILE *f = fopen(path, "rb");
    if (!f) return cli_data_error(cmd, "--template '%s': cannot open it", path);
    size_t len;
    char *text = cli_read_stream(cmd, f, "--template", &len);
    fclose(f);
    if (!text) return CLI_DATA_ERROR;
    const attn_status st = attn_chat_template_parse(text, len, out);
    free(text);
    if (st) return cli_data_error(cmd, "--template '%s': %s", path, attn_last_error());
    return CLI_OK;
}

int cli_model_config(const char *cmd, const char *path, attn_decoder_config *cfg) {
    attn_status st;
    if (cli_is_checkpoint(path)) {
        st = attn_decoder_config_from_checkpoint(path, cfg);
    } else {
        attn_gguf *g = NULL;
        st = attn_gguf_open(path, &g);
        if (!st) st = attn_decoder_read_config(g, cfg);
        attn_gguf_free(g);
    }
    return st ? cli_data_error(cmd, "--model '%s': %s", path, attn_last_error()) : CLI_OK;
}

int cli_model_open(const char *cmd, const char *path, const attn_decoder_options *load, bool want_chat,
                   const char *template_path, cli_model *m) {
    memset(m, 0, sizeof *m);
    const double t0 = cli_seconds();
    attn_gguf *g = NULL;
    attn_status st;
    const bool checkpoint = cli_is_checkpoint(path);
    if (checkpoint) {
        st = attn_decoder_load_safetensors_with(path, load, &m->decoder);
        if (!st) st = attn_tokenizer_from_json_file(path, &m->tokenizer);
        if (!st && want_chat && !template_path) st = attn_chat_template_from_checkpoint(path, &m->chat);
    } else {
        st = attn_gguf_open(path, &g);
        if (!st) st = attn_tokenizer_from_gguf(g, &m->tokenizer);
        if (!st) st = attn_decoder_load_with(g, load, &m->decoder);
        if (!st && want_chat && !template_path) st = attn_chat_template_from_gguf(g, &m->chat);
    }
    if (st) {
        const int rc = cli_data_error(cmd, "--model '%s': %s", path, attn_last_error());
        attn_gguf_free(g);
        cli_model_close(m);
        return rc;
    }
    if (want_chat && template_path) {
        const int rc = template_file(cmd, template_path, &m->chat);
        if (rc) {
            attn_gguf_free(g);
            cli_model_close(m);
            return rc;
        }
    }
    int32_t ends[CLI_MAX_END_IDS];
    int n = attn_tokenizer_end_ids(m->tokenizer, ends);
    for (int k = 0; k < n; k++) add_end_id(m, ends[k]);
    st = g ? attn_chat_end_ids_from_gguf(g, ends, CLI_MAX_END_IDS, &n)
           : attn_chat_end_ids_from_checkpoint(path, ends, CLI_MAX_END_IDS, &n);
    attn_gguf_free(g);
    if (st) {
        const int rc = cli_data_error(cmd, "--model '%s': %s", path, attn_last_error());
        cli_model_close(m);
        return rc;
    }
    for (int k = 0; k < n; k++)
        if (ends[k] < attn_decoder_get_config(m->decoder)->vocab) add_end_id(m, ends[k]);
    attn_tokenizer_info info;
    attn_tokenizer_describe(m->tokenizer, &info);
    m->bos_token = token_text(m->tokenizer, info.bos_id);
    m->eos_token = token_text(m->tokenizer, info.eos_id);
    m->load_seconds = cli_seconds() - t0;
    return CLI_OK;
}

void cli_model_close(cli_model *m) {
    attn_chat_template_free(m->chat);
    attn_decoder_free(m->decoder);
    attn_tokenizer_free(m->tokenizer);
    free(m->bos_token);
    free(m->eos_token);
    memset(m, 0, sizeof *m);
}

/* ------------------------------------------------------------ sampling */

enum {
    F_MAX_TOKENS = CLI_SHARED_IDS + 100, F_TEMPERATURE, F_TOP_K, F_TOP_P, F_MIN_P, F_SEED, F_REPETITION, F_FREQUENCY,
    F_PRESENCE, F_LAST_N, F_STOP, F_STOP_AT_EOS, F_NO_STOP
};

/* llama.cpp's names are aliases of transformers' (--repeat-penalty,
 * --repeat-last-n). */
const cli_flag cli_sampling_flags[] = {
    {"--max-tokens", "N", F_MAX_TOKENS, 0},
    {"--temperature", "T", F_TEMPERATURE, 0},
    {"--top-k", "K", F_TOP_K, 0},
    {"--top-p", "P", F_TOP_P, 0},
    {"--min-p", "P", F_MIN_P, 0},
    {"--seed", "S", F_SEED, 0},
    {"--repetition-penalty", "R", F_REPETITION, 0},
    {"--repeat-penalty", "R", F_REPETITION, 0},
    {"--frequency-penalty", "F", F_FREQUENCY, 0},
    {"--presence-penalty", "P", F_PRESENCE, 0},
    {"--penalty-last-n", "N", F_LAST_N, 0},
    {"--repeat-last-n", "N", F_LAST_N, 0},
    {"--stop", "STR", F_STOP, CLI_REPEATABLE},
    {"--stop-at-eos", NULL, F_STOP_AT_EOS, 0},
    {"--no-stop", NULL, F_NO_STOP, 0},
    CLI_FLAGS_END};

/* What attn model run's display flags mean here, for a user who typed them. */
const cli_flag cli_sampling_hints[] = {
    {"--top", "--top-k K (sampling: the K most likely tokens); --top and --show-top are attn model run's: how "
              "many next tokens it prints", 0, CLI_HINT},
    {"--show-top", "--top-k K (sampling: the K most likely tokens); --show-top is attn model run's: how many next "
                   "tokens it prints", 0, CLI_HINT},
    CLI_FLAGS_END};

void cli_sampling_init(cli_sampling *s, int64_t max_tokens) {
    memset(s, 0, sizeof *s);
    const attn_sampler_options defaults = ATTN_SAMPLER_OPTIONS_INIT;
    s->sampler = defaults;
    s->max_tokens = max_tokens;
    s->stop_at_eos = true;
}

bool cli_sampling_flag(const char *cmd, cli_args *args, int id, const char *value, int64_t max_tokens_max,
                       cli_sampling *s) {
    int64_t n;
    switch (id) {
    case F_MAX_TOKENS: return cli_parse_int(cmd, args->flag, value, 1, max_tokens_max, &s->max_tokens);
    case F_TEMPERATURE: return cli_parse_float(cmd, args->flag, value, 0.0, 1e6, &s->sampler.temperature);
    case F_TOP_K: return cli_parse_int(cmd, args->flag, value, 0, INT32_MAX, &s->sampler.top_k);
    case F_TOP_P:
        if (!cli_parse_float(cmd, args->flag, value, 0.0, 1.0, &s->sampler.top_p)) return false;
        if (!(s->sampler.top_p > 0.0)) {
            cli_usage_error(cmd, "--top-p is %s: must be in (0, 1] (1 = no cut)", value);
            return false;
        }
        return true;
    case F_MIN_P: return cli_parse_float(cmd, args->flag, value, 0.0, 1.0, &s->sampler.min_p);
    case F_SEED:
        if (!cli_parse_int(cmd, args->flag, value, 0, INT64_MAX, &n)) return false;
        s->sampler.seed = (uint64_t)n;
        return true;
    case F_REPETITION:
        if (!cli_parse_float(cmd, args->flag, value, 0.0, 1e6, &s->sampler.repetition_penalty)) return false;
        if (!(s->sampler.repetition_penalty > 0.0)) {
            cli_usage_error(cmd, "%s is %s: must be > 0 (1 = none; above 1 discourages repeats)", args->flag, value);
            return false;
        }
        return true;
    case F_FREQUENCY: return cli_parse_float(cmd, args->flag, value, -1e6, 1e6, &s->sampler.frequency_penalty);
    case F_PRESENCE: return cli_parse_float(cmd, args->flag, value, -1e6, 1e6, &s->sampler.presence_penalty);
    case F_LAST_N: return cli_parse_int(cmd, args->flag, value, 0, INT32_MAX, &s->sampler.penalty_last_n);
    case F_STOP:
        if (s->n_stops == CLI_MAX_STOPS) {
            cli_usage_error(cmd, "--stop: at most %d stop strings", CLI_MAX_STOPS);
            return false;
        }
        s->stops[s->n_stops++] = value;
        return true;
    case F_STOP_AT_EOS: s->stop_at_eos = true; return true;
    case F_NO_STOP: s->stop_at_eos = false; return true;
    default: return true;
    }
}

bool cli_generation_flag(const char *cmd, cli_args *args, int id, const char *value, int64_t max_tokens_max,
                         cli_sampling *s, attn_decoder_options *load) {
    const int took = cli_decoder_take(load, cmd, id, value);
    if (took) return took > 0;
    return cli_sampling_flag(cmd, args, id, value, max_tokens_max, s);
}

bool cli_sampling_finish(const char *cmd, const cli_args *args, cli_sampling *s) {
    /* --top-k or --top-p alone asks for sampling: at temperature 1, as
     * transformers' do_sample with its default temperature. */
    if (!cli_args_given(args, F_TEMPERATURE) &&
        (cli_args_given(args, F_TOP_K) || cli_args_given(args, F_TOP_P) || cli_args_given(args, F_MIN_P)))
        s->sampler.temperature = 1.0;
    if (cli_args_given(args, F_STOP_AT_EOS) && cli_args_given(args, F_NO_STOP)) {
        cli_usage_error(cmd, "--stop-at-eos and --no-stop contradict each other: give one");
        return false;
    }
    return true;
}

void cli_sampling_help(FILE *out, int64_t max_tokens_default, int64_t max_tokens_max) {
    fprintf(out,
            "  --max-tokens N       tokens to generate, at most (default %lld, up to %lld)\n"
            "  --temperature T      0 = greedy, the largest logit (default without --top-k/--top-p); > 0\n"
            "                       samples softmax(logits / T) (default 1 when --top-k or --top-p is given)\n"
            "  --top-k K            sample among the K most likely tokens only (default 0: all); 1 = greedy\n"
            "  --top-p P            sample among the most likely tokens whose probability reaches P, in (0, 1]\n"
            "                       (default 1: all); applied after --top-k, as Hugging Face does\n"
            "  --min-p P            then keep the tokens at least P times as likely as the most likely, in\n"
            "                       [0, 1] (default 0: all)\n"
            "  --repetition-penalty R  (also --repeat-penalty) divide a positive logit by R, multiply a negative\n"
            "                       one, for each token of the prompt and the reply seen (transformers' rule;\n"
            "                       default 1: none; 1.1-1.3 discourages repeats)\n"
            "  --frequency-penalty F   subtract F times a token's count so far (OpenAI's, llama.cpp's; default 0)\n"
            "  --presence-penalty P    subtract P from every token seen at least once (default 0)\n"
            "  --penalty-last-n N   (also --repeat-last-n) the penalties count the last N tokens only (default\n"
            "                       0: the whole prompt and reply)\n"
            "  --seed S             the sampler's seed, an integer >= 0 (default 0); the same seed and\n"
            "                       options give the same tokens (SplitMix64, integer arithmetic only)\n"
            "  --stop STR           stop when the generated text contains STR (not printed); repeatable\n"
            "  --stop-at-eos        stop at the model's end tokens (default): its EOS id, the end-of-turn\n"
            "                       ids its GGUF names (eot, eom), and <|im_end|>, <|endoftext|> or\n"
            "                       <end_of_turn> where the vocabulary has them\n"
            "  --no-stop            generate all N tokens, printing end tokens as their text\n",
            (long long)max_tokens_default, (long long)max_tokens_max);
}

/* ------------------------------------------------------------ streaming */

typedef struct text_stream {
    char *raw;           /* the reply's decoded bytes           */
    size_t raw_n, raw_cap;
    size_t done;         /* raw[0 .. done) printed (or dropped)  */
    char *shown;         /* what was printed                      */
    size_t shown_n, shown_cap;
    FILE *out;
    const char *cmd;     /* for the error naming standard output  */
    bool failed;         /* out of memory                         */
    bool write_failed;   /* out could not be written (reported)   */
} text_stream;

static void grow_put(text_stream *t, char **buf, size_t *n, size_t *cap, const char *p, size_t len) {
    if (*cap - *n < len + 1) {
        size_t c = *cap ? *cap : 256;
        while (c - *n < len + 1) c *= 2;
        char *grown = realloc(*buf, c);
        if (!grown) {
            t->failed = true;
            return;
        }
        *buf = grown;
        *cap = c;
    }
    memcpy(*buf + *n, p, len);
    *n += len;
    (*buf)[*n] = 0;
}

static void show(text_stream *t, const char *p, size_t n) {
    if (!n) return;
    if (t->out) fwrite(p, 1, n, t->out);
    grow_put(t, &t->shown, &t->shown_n, &t->shown_cap, p, n);
}

/* Length of the UTF-8 sequence led by c (1..4), 0 for a byte that cannot lead. */
static size_t utf8_length(unsigned char c) {
    return c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
}

/* Prints raw[done .. limit): whole characters, an incomplete one at the
 * end waiting unless final, what cannot become a character as U+FFFD per
 * maximal subpart.  (Overlong and surrogate forms, E0 80.., ED A0.., are
 * not looked for: the vocabularies' byte tokens come from valid text.) */
static void stream_flush(text_stream *t, size_t limit, bool final) {
    static const char replacement[3] = {(char)0xEF, (char)0xBF, (char)0xBD};
    const unsigned char *p = (const unsigned char *)t->raw;
    size_t i = t->done, start = t->done;
    while (i < limit) {
        const size_t len = utf8_length(p[i]);
        size_t k = 0; /* continuation bytes after the lead */
        while (len > 1 && k + 1 < len && i + 1 + k < limit && (p[i + 1 + k] & 0xC0) == 0x80) k++;
        if (len > 0 && k + 1 == len) {
            i += len;
            continue;
        }
        if (len > 0 && i + 1 + k == limit && !final) break; /* wait for the rest */
        show(t, t->raw + start, i - start);
        show(t, replacement, sizeof replacement);
        i += len > 0 ? 1 + k : 1;
        start = i;
    }
    show(t, t->raw + start, i - start);
    t->done = i;
    /* Each chunk flushed and checked, so that a full disk stops the run at
     * once with an error naming standard output rather than cutting the
     * text silently (cli_stdout.h). */
    if (t->out == stdout) {
        if (!t->write_failed && !cli_stdout_ok(t->cmd)) t->write_failed = true;
    } else if (t->out && (fflush(t->out) || ferror(t->out))) {
        t->write_failed = true;
    }
}

/* The bytes at the end of raw that could begin a stop string. */
static size_t held_for_stops(const text_stream *t, const cli_sampling *s) {
    size_t held = 0;
    for (int k = 0; k < s->n_stops; k++) {
        const size_t n = strlen(s->stops[k]);
        for (size_t m = n > 1 ? n - 1 : 0; m > held; m--)
            if (m <= t->raw_n && memcmp(t->raw + t->raw_n - m, s->stops[k], m) == 0) {
                held = m;
                break;
            }
    }
    return held;
}

/* Where the first stop string starts in raw, searching from `from`; raw_n if none. */
static size_t stop_at(const text_stream *t, const cli_sampling *s, size_t from) {
    size_t first = t->raw_n;
    for (int k = 0; k < s->n_stops; k++) {
        const size_t n = strlen(s->stops[k]);
        for (size_t i = from; n && i + n <= t->raw_n && i < first; i++)
            if (memcmp(t->raw + i, s->stops[k], n) == 0) {
                first = i;
                break;
            }
    }
    return first;
}

static size_t longest_stop(const cli_sampling *s) {
    size_t longest = 0;
    for (int k = 0; k < s->n_stops; k++)
        if (strlen(s->stops[k]) > longest) longest = strlen(s->stops[k]);
    return longest;
}

/* ------------------------------------------------------------ generation */

int cli_generate(const char *cmd, attn_decoder_session *session, attn_sampler *sampler, const cli_model *m,
                 const cli_sampling *s, const int32_t *prompt, float *logits, FILE *out, volatile sig_atomic_t *interrupted,
                 cli_reply *reply) {
    memset(reply, 0, sizeof *reply);
    text_stream t = {.out = out, .cmd = cmd};
    int rc = CLI_OK;
    reply->why = "--max-tokens";
    reply->ids = malloc((size_t)(s->max_tokens > 0 ? s->max_tokens : 1) * sizeof *reply->ids);
    if (!reply->ids) return cli_data_error(cmd, "out of memory");
    const size_t longest = longest_stop(s);
    /* The penalties count the prompt too (transformers' input_ids; llama.cpp's). */
    attn_sampler_forget(sampler);
    int64_t held = attn_decoder_session_position(session);
    if (prompt && held > 0 && attn_sampler_accept(sampler, prompt, held)) {
        free(reply->ids);
        reply->ids = NULL;
        return cli_data_error(cmd, "%s", attn_last_error());
    }
    while (reply->n_ids < s->max_tokens) {
        if (interrupted && *interrupted) {
            reply->why = "Ctrl-C";
            break;
        }
        int32_t next;
        if (attn_sampler_sample(sampler, logits, &next)) {
            rc = cli_data_error(cmd, "sampling token %lld: %s", (long long)reply->n_ids, attn_last_error());
            break;
        }
        bool end = false;
        for (int e = 0; s->stop_at_eos && e < m->n_end_ids; e++) end |= next == m->end_ids[e];
        if (end) {
            reply->why = "an end token";
            break;
        }
        reply->ids[reply->n_ids++] = next;
        if (reply->n_ids == 1) reply->first_at = cli_seconds();
        char buf[256];
        size_t len;
        if (attn_tokenizer_decode(m->tokenizer, &next, 1, 0, buf, sizeof buf, &len) != ATTN_OK) {
            rc = cli_data_error(cmd, "decoding token %ld: %s", (long)next, attn_last_error());
            break;
        }
        const size_t before = t.raw_n;
        grow_put(&t, &t.raw, &t.raw_n, &t.raw_cap, buf, len);
        if (t.failed) {
            rc = cli_data_error(cmd, "out of memory");
            break;
        }
        if (s->n_stops) {
            const size_t from = before > longest ? before - longest : 0;
            const size_t stop = stop_at(&t, s, from > t.done ? from : t.done);
            if (stop < t.raw_n) {
                t.raw_n = stop;
                reply->why = "a stop string";
                break;
            }
        }
        stream_flush(&t, t.raw_n - held_for_stops(&t, s), false);
        if (t.write_failed) {
            rc = CLI_DATA_ERROR;
            break;
        }
        if (reply->n_ids == s->max_tokens) break; /* its logits would not be used */
        if (attn_decoder_session_position(session) == attn_decoder_session_capacity(session)) {
            reply->why = "the context";
            break;
        }
        if (attn_decoder_step(session, &next, 1, logits)) {
            rc = cli_data_error(cmd, "decoding token %lld: %s", (long long)reply->n_ids, attn_last_error());
            break;
        }
        reply->steps++;
    }
    stream_flush(&t, t.raw_n, true);
    if (t.write_failed && rc == CLI_OK) rc = CLI_DATA_ERROR;
    free(t.raw);
    if (t.failed && rc == CLI_OK) rc = cli_data_error(cmd, "out of memory");
    reply->text = t.shown ? t.shown : calloc(1, 1);
    reply->len = t.shown_n;
    return rc;
}

void cli_reply_free(cli_reply *r) {
    free(r->text);
    free(r->ids);
    memset(r, 0, sizeof *r);
}

/* --print-prompt: the text as it is, then its ids. */
void cli_print_prompt(const char *text, size_t len, const int32_t *ids, size_t n) {
    printf("--- prompt: %zu tokens ---\n", n);
    fwrite(text, 1, len, stdout);
    printf("\n--- ids ---\n");
    for (size_t k = 0; k < n; k++) printf("%s%ld", k ? "," : "", (long)ids[k]);
    printf("\n--- reply ---\n");
    fflush(stdout);
}
