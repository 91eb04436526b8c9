/*
 * cmd_chat.c — `attn model chat`: a conversation with an instruct model,
 * its prompt built by the model's own chat template (attn_chat.h), the
 * replies streamed as they come (tools/cli/cli_generation.c).
 *
 * Interactive when stdin is a terminal: each line is a user turn, the
 * history is kept, /reset, /system TEXT, /quit (or end of input) — and
 * Ctrl-C stops a reply, not the program (a SIGINT handler sets a flag the
 * generation loop reads between tokens).  Otherwise one conversation: the
 * whole of stdin as one user message, or --messages FILE.json; one reply.
 *
 * The KV cache is kept across turns: a turn's prompt is the whole
 * conversation rendered again, and only what follows the tokens the cache
 * already holds is run (all of it again when the template rewrote an
 * earlier turn, as Qwen3's does with its reasoning).
 */
#include "cli.h"
#include "cli_generation.h"

#include "attn_chat.h"
#include "attn_decoder.h"
#include "attn_tokenizer.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CMD "model chat"
#define MAX_TOKENS_DEFAULT 512
#define MAX_TOKENS_MAX 32768
#define CONTEXT_DEFAULT 4096
#define CONTEXT_MAX (1 << 20)

static void chat_help(FILE *out) {
    char architectures[256];
    fprintf(out,
    "usage: attn model chat --model MODEL [--system TEXT] [--messages FILE.json] [--template FILE]\n"
    "                       [--context N] [--print-prompt] [--kv-dtype " CLI_KV_CACHE_DTYPES "]\n"
    "                       [--allow-beyond-context] [--weights stored|f32] [--precision exact|fast]\n"
    "                       [--max-tokens N] [--temperature T] [--top-k K] [--top-p P] [--seed S] [--stop STR]...\n\n"
    "A conversation with an instruct model (%s): the prompt is the\n"
    "conversation written by the model's own chat template (tokenizer.chat_template in a GGUF file,\n"
    "chat_template in a checkpoint's tokenizer_config.json; attn renders it as transformers'\n"
    "apply_chat_template does), the reply streamed as it comes.\n\n"
    "When stdin is a terminal: an interactive session.  Each line you type is a user turn; the\n"
    "conversation is kept and continued.  Commands:\n"
    "  /reset               forget the conversation (the --system message stays)\n"
    "  /system TEXT         set the system message (and forget the conversation)\n"
    "  /quit                leave (so does end of input, Ctrl-D)\n"
    "  Ctrl-C               stop the reply being written (what was written stays in the conversation)\n\n"
    "Otherwise one conversation and one reply: the whole of stdin is one user message (trailing\n"
    "newlines dropped), or --messages FILE.json gives the conversation.  The reply goes to stdout,\n"
    "timings to stderr.\n\n"
    "  --model MODEL        a GGUF file or a Hugging Face checkpoint directory (with tokenizer.json)\n"
    "  --system TEXT        a system message first (a template may refuse it: Gemma 2's does)\n"
    "  --messages FILE.json the conversation, a JSON list of {\"role\": ..., \"content\": ...}; the\n"
    "                       reply continues it (not with --system, which it would contradict)\n"
    "  --template FILE      this Jinja chat template instead of the model's (a base model has none)\n"
    "  --context N          positions the KV cache holds for the whole conversation (default %d)\n"
    "  --print-prompt       before each reply, the exact prompt text and its token ids (stdout)\n"
    "  --kv-dtype D         the KV cache's storage: f32 (default), f16 or bf16 (half the memory), q8_0\n"
    "                       or fp8 (8-bit blocks of 32 with a float16 scale; docs/cache.md); K:V for the\n"
    "                       keys and the values apart (bf16:q8_0: the keys' outliers kept at 16 bits)\n"
    CLI_ALLOW_BEYOND_CONTEXT_HELP "%s",
    cli_model_architectures(architectures, sizeof architectures), CONTEXT_DEFAULT, cli_decoder_help);
    cli_sampling_help(out, MAX_TOKENS_DEFAULT, MAX_TOKENS_MAX);
    fprintf(out,
    "\nexit status: 0 success, 1 the model or the messages cannot be read or run (the template refuses\n"
    "the conversation, the context is full), 2 usage error\n\n"
    "examples:\n"
    "  attn model chat --model ~/.cache/attn/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf\n"
    "  echo \"Write hello world in C\" | attn model chat --model ~/.cache/attn/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf\n"
    "  attn model chat --model M --messages conversation.json --print-prompt --max-tokens 100\n");
}

enum { F_MODEL = 1, F_SYSTEM, F_MESSAGES, F_TEMPLATE, F_CONTEXT, F_PRINT_PROMPT, F_KV_DTYPE, F_BEYOND };

static const cli_flag chat_flags[] = {
    {"--model", "MODEL", F_MODEL, 0},
    {"--system", "TEXT", F_SYSTEM, 0},
    {"--messages", "FILE.json", F_MESSAGES, 0},
    {"--template", "FILE", F_TEMPLATE, 0},
    {"--context", "N", F_CONTEXT, 0},
    {"--print-prompt", NULL, F_PRINT_PROMPT, 0},
    {"--kv-dtype", CLI_KV_CACHE_DTYPES, F_KV_DTYPE, 0},
    {"--allow-beyond-context", NULL, F_BEYOND, 0},
    CLI_FLAGS_END};

static const cli_flag *const chat_tables[] = {chat_flags, cli_sampling_flags, cli_sampling_hints, cli_decoder_flags,
                                              NULL};
static const cli_spec cli_chat_spec = {CMD, chat_tables, chat_help, false};

typedef struct chat_args {
    const char *path, *system, *messages_path, *template_path;
    int64_t context;
    bool print_prompt, allow_beyond_context;
    attn_dtype kv_dtype, kv_value_dtype; /* V's 0: K's */
    cli_sampling sampling;
    attn_decoder_options load;
} chat_args;

/* ------------------------------------------------------------ the conversation */

typedef struct history {
    char **roles, **contents;
    size_t n, cap;
} history;

static bool history_add(history *h, const char *role, const char *content, size_t len) {
    if (h->n == h->cap) {
        const size_t cap = h->cap ? h->cap * 2 : 8;
        char **roles = realloc(h->roles, cap * sizeof *roles);
        if (roles) h->roles = roles;
        char **contents = realloc(h->contents, cap * sizeof *contents);
        if (contents) h->contents = contents;
        if (!roles || !contents) return false;
        h->cap = cap;
    }
    h->roles[h->n] = strdup(role);
    h->contents[h->n] = malloc(len + 1);
    if (!h->roles[h->n] || !h->contents[h->n]) {
        free(h->roles[h->n]);
        free(h->contents[h->n]);
        return false;
    }
    memcpy(h->contents[h->n], content, len);
    h->contents[h->n][len] = 0;
    h->n++;
    return true;
}

static void history_clear(history *h, size_t keep) {
    while (h->n > keep) {
        h->n--;
        free(h->roles[h->n]);
        free(h->contents[h->n]);
    }
}

static void history_free(history *h) {
    history_clear(h, 0);
    free(h->roles);
    free(h->contents);
}

/* The chat's state across turns: the model, its session, what the session holds. */
typedef struct chat_state {
    const chat_args *a;
    cli_model m;
    attn_decoder_session *session;
    attn_sampler *sampler;
    int32_t *held; /* the ids the session holds, [capacity] */
    float *logits;
} chat_state;

static volatile sig_atomic_t interrupted;
static void on_sigint(int sig) {
    (void)sig;
    interrupted = 1;
}

/* One reply to the conversation h (or messages_json), printed to stdout;
 * the assistant's turn added to h (when h). */
static int reply(chat_state *c, history *h, const char *messages_json) {
    const chat_args *a = c->a;
    attn_chat_message *messages = NULL;
    char *text = NULL;
    int32_t *ids = NULL;
    cli_reply r = {0};
    int rc = CLI_OK;
    if (h && h->n) {
        messages = malloc(h->n * sizeof *messages);
        if (!messages) return cli_data_error(CMD, "out of memory");
        for (size_t k = 0; k < h->n; k++) messages[k] = (attn_chat_message){h->roles[k], h->contents[k]};
    }
    attn_chat_options opt = ATTN_CHAT_OPTIONS_INIT;
    opt.add_generation_prompt = 1;
    opt.bos_token = c->m.bos_token;
    opt.eos_token = c->m.eos_token;
    opt.messages_json = messages_json;
    size_t len, n;
    if (attn_chat_template_render(c->m.chat, messages, h ? h->n : 0, &opt, &text, &len)) {
        rc = cli_data_error(CMD, "%s", attn_last_error());
        goto done;
    }
    ids = malloc((len + 1) * sizeof *ids);
    if (!ids) {
        rc = cli_data_error(CMD, "out of memory");
        goto done;
    }
    /* The template writes the special tokens (BOS included): none is added. */
    if (attn_tokenizer_encode(c->m.tokenizer, text, len, ATTN_ENCODE_NO_BOS, ids, len + 1, &n)) {
        rc = cli_data_error(CMD, "the prompt: %s", attn_last_error());
        goto done;
    }
    const int64_t capacity = attn_decoder_session_capacity(c->session);
    if ((int64_t)n >= capacity) {
        rc = cli_data_error(CMD, "the conversation is %zu tokens: the context holds %lld (--context; /reset to start over)",
                            n, (long long)capacity);
        goto done;
    }
    if (a->print_prompt) cli_print_prompt(text, len, ids, n);
    /* Keep what the session holds when the new prompt continues it. */
    int64_t held = attn_decoder_session_position(c->session);
    bool prefix = held < (int64_t)n;
    for (int64_t k = 0; prefix && k < held; k++) prefix = c->held[k] == ids[k];
    if (!prefix) {
        attn_decoder_session_reset(c->session);
        held = 0;
    }
    if (attn_decoder_step(c->session, ids + held, (int64_t)n - held, c->logits)) {
        rc = cli_data_error(CMD, "prefill: %s", attn_last_error());
        attn_decoder_session_reset(c->session);
        goto done;
    }
    memcpy(c->held, ids, n * sizeof *ids);
    /* (A Ctrl-C since the line was read, during the prefill, stops this reply.) */
    rc = cli_generate(CMD, c->session, c->sampler, &c->m, &a->sampling, c->held, c->logits, stdout, &interrupted, &r);
    /* The reply's tokens the session ran (the last one sampled is not run). */
    const int64_t position = attn_decoder_session_position(c->session);
    for (int64_t k = (int64_t)n; k < position; k++) c->held[k] = r.ids[k - (int64_t)n];
    fputc('\n', stdout);
    if (interrupted) fprintf(stderr, "attn %s: stopped (Ctrl-C)\n", CMD);
    fflush(stdout);
    if (h && !history_add(h, "assistant", r.text, r.len)) rc = cli_data_error(CMD, "out of memory");
done:
    cli_reply_free(&r);
    free(messages);
    free(text);
    free(ids);
    return rc;
}

/* The interactive session: lines from a terminal. */
static int interactive(chat_state *c) {
    history h = {0};
    const char *system = c->a->system;
    char *system_owned = NULL;
    int rc = CLI_OK;
    if (system && !history_add(&h, "system", system, strlen(system))) return cli_data_error(CMD, "out of memory");
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint; /* no SA_RESTART: a read waiting for a line is interrupted too */
    sigemptyset(&sa.sa_mask);
    struct sigaction previous;
    sigaction(SIGINT, &sa, &previous);
    fprintf(stderr, "attn %s: %s; /reset, /system TEXT, /quit (or Ctrl-D); Ctrl-C stops a reply\n", CMD,
            attn_decoder_get_config(c->m.decoder)->architecture);
    char *line = NULL;
    size_t cap = 0;
    for (;;) {
        fputs("> ", stdout);
        fflush(stdout);
        interrupted = 0;
        errno = 0;
        ssize_t n = getline(&line, &cap, stdin);
        if (n < 0) {
            if (errno == EINTR || interrupted) {
                clearerr(stdin);
                fputs("\n(Ctrl-C: /quit or Ctrl-D to leave)\n", stdout);
                continue;
            }
            fputc('\n', stdout);
            break;
        }
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = 0;
        if (n == 0) continue;
        if (strcmp(line, "/quit") == 0 || strcmp(line, "/exit") == 0) break;
        const size_t keep = system ? 1 : 0;
        if (strcmp(line, "/reset") == 0) {
            history_clear(&h, keep);
            printf("(conversation forgotten)\n");
            continue;
        }
        if (strncmp(line, "/system", 7) == 0 && (line[7] == ' ' || line[7] == 0)) {
            const char *text = line[7] ? line + 8 : "";
            history_clear(&h, 0);
            free(system_owned);
            system_owned = *text ? strdup(text) : NULL;
            system = system_owned;
            if (system && !history_add(&h, "system", system, strlen(system))) {
                rc = cli_data_error(CMD, "out of memory");
                break;
            }
            printf(system ? "(system message set; conversation forgotten)\n" : "(no system message; conversation forgotten)\n");
            continue;
        }
        if (line[0] == '/') {
            printf("(unknown command %s: /reset, /system TEXT, /quit)\n", line);
            continue;
        }
        if (!history_add(&h, "user", line, (size_t)n)) {
            rc = cli_data_error(CMD, "out of memory");
            break;
        }
        if (reply(c, &h, NULL)) {
            /* The turn is dropped (the template refused it, the context is full): the session goes on. */
            history_clear(&h, h.n - 1);
        }
    }
    sigaction(SIGINT, &previous, NULL);
    free(line);
    free(system_owned);
    history_free(&h);
    return rc;
}

static int one_conversation(chat_state *c) {
    const chat_args *a = c->a;
    const double t0 = cli_seconds();
    int rc;
    if (a->messages_path) {
        FILE *f = fopen(a->messages_path, "rb");
        if (!f) return cli_data_error(CMD, "--messages '%s': cannot open it", a->messages_path);
        size_t len;
        char *json = cli_read_stream(CMD, f, "--messages", &len);
        fclose(f);
        if (!json) return CLI_DATA_ERROR;
        if (strlen(json) != len) {
            free(json);
            return cli_data_error(CMD, "--messages '%s': a NUL byte in the file", a->messages_path);
        }
        rc = reply(c, NULL, json);
        free(json);
    } else {
        size_t len;
        char *text = cli_read_stream(CMD, stdin, "stdin", &len);
        if (!text) return CLI_DATA_ERROR;
        while (len > 0 && (text[len - 1] == '\n' || text[len - 1] == '\r')) text[--len] = 0;
        if (!len) {
            free(text);
            return cli_usage_error(CMD, "stdin is empty: nothing to answer (type to a terminal for a session, or "
                                        "pipe a message, or give --messages FILE.json)");
        }
        history h = {0};
        rc = (a->system && !history_add(&h, "system", a->system, strlen(a->system))) ||
                     !history_add(&h, "user", text, len)
                 ? cli_data_error(CMD, "out of memory")
                 : reply(c, &h, NULL);
        history_free(&h);
        free(text);
    }
    fprintf(stderr, "attn %s: %s, loaded in %.2f s; %lld positions held; %.2f s\n", CMD,
            attn_decoder_get_config(c->m.decoder)->architecture, c->m.load_seconds,
            (long long)attn_decoder_session_position(c->session), cli_seconds() - t0);
    return rc;
}

static int chat(const chat_args *a) {
    chat_state c = {.a = a};
    int rc = cli_model_open(CMD, a->path, &a->load, true, a->template_path, &c.m);
    if (rc) return rc;
    const attn_decoder_config *cfg = attn_decoder_get_config(c.m.decoder);
    /* --context is the whole conversation's positions: refused past the model's own. */
    if ((rc = cli_check_context(CMD, cfg, a->context, 0, a->allow_beyond_context))) {
        cli_model_close(&c.m);
        return rc;
    }
    attn_decoder_session_options so = ATTN_DECODER_SESSION_OPTIONS_INIT;
    so.capacity = a->context;
    so.kv_dtype = a->kv_dtype;
    so.kv_value_dtype = a->kv_value_dtype;
    c.held = malloc((size_t)a->context * sizeof *c.held);
    c.logits = malloc((size_t)cfg->vocab * sizeof *c.logits);
    if (!c.held || !c.logits) rc = cli_data_error(CMD, "out of memory");
    else if (attn_decoder_session_new(c.m.decoder, &so, &c.session) ||
             attn_sampler_new(&a->sampling.sampler, cfg->vocab, &c.sampler))
        rc = cli_data_error(CMD, "%s", attn_last_error());
    else if (!a->messages_path && isatty(STDIN_FILENO)) rc = interactive(&c);
    else rc = one_conversation(&c);
    attn_sampler_free(c.sampler);
    attn_decoder_session_free(c.session);
    cli_model_close(&c.m);
    free(c.held);
    free(c.logits);
    return rc;
}

int cmd_model_chat(int argc, char **argv) {
    chat_args a = {.context = CONTEXT_DEFAULT, .kv_dtype = ATTN_F32, .load = ATTN_DECODER_OPTIONS_INIT};
    cli_sampling_init(&a.sampling, MAX_TOKENS_DEFAULT);
    cli_args args;
    const char *value;
    cli_args_begin(&args, &cli_chat_spec, argc, argv);
    for (int id; (id = cli_args_next(&args, &value)) != CLI_ARGS_END;) {
        switch (id) {
        case CLI_ARGS_STOP: return args.status;
        case F_MODEL: a.path = value; break;
        case F_SYSTEM: a.system = value; break;
        case F_MESSAGES: a.messages_path = value; break;
        case F_TEMPLATE: a.template_path = value; break;
        case F_PRINT_PROMPT: a.print_prompt = true; break;
        case F_BEYOND: a.allow_beyond_context = true; break;
        case F_CONTEXT:
            if (!cli_parse_int(CMD, args.flag, value, 16, CONTEXT_MAX, &a.context)) return CLI_USAGE_ERROR;
            break;
        case F_KV_DTYPE:
            if (!cli_parse_kv_cache(CMD, args.flag, value, &a.kv_dtype, &a.kv_value_dtype)) return CLI_USAGE_ERROR;
            break;
        default:
            if (!cli_generation_flag(CMD, &args, id, value, MAX_TOKENS_MAX, &a.sampling, &a.load))
                return CLI_USAGE_ERROR;
            break;
        }
    }
    if (!cli_sampling_finish(CMD, &args, &a.sampling)) return CLI_USAGE_ERROR;
    if (!a.path) return cli_usage_error(CMD, "--model MODEL is required (a GGUF file or a checkpoint)");
    if (a.system && a.messages_path)
        return cli_usage_error(CMD, "--system and --messages: give the system message inside FILE.json");
    return chat(&a);
}
