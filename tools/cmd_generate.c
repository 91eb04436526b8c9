/*
 * cmd_generate.c — `attn model generate`: a real model continues a text,
 * streamed to stdout as the tokens come (attn_decoder.h's sessions and
 * sampler, attn_tokenizer.h's encode and decode).
 *
 * The prompt is encoded as the model's tokenizer does (Gemma: BOS first),
 * run in one step (prefill), then each sampled token is decoded and run at
 * the next position (decode) until --max-tokens, an end-of-sequence token or
 * a stop string (tools/cli/cli_generation.c: whole UTF-8 characters are
 * printed as they complete).  --chat makes the text a user message of the
 * model's chat template (attn_chat.h).
 */
#include "cli.h"
#include "cli_generation.h"
#include "cli_stdout.h"

#include "attn_chat.h"
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
    "usage: attn model generate --model MODEL --text TEXT [--chat [--system TEXT] [--template FILE]]\n"
    "                           [--max-tokens N] [--temperature T] [--top-k K] [--top-p P] [--seed S]\n"
    "                           [--stop STR]... [--kv-dtype D[:DV]] [--stop-at-eos | --no-stop]\n"
    "                           [--print-prompt] [--allow-beyond-context]\n"
    "                           [--weights stored|f32] [--precision exact|fast]\n\n"
    "Continues TEXT with a model (%s), printing the new text to stdout\n"
    "as each token comes (whole UTF-8 characters only: a token that ends inside one waits for the\n"
    "rest).  With --chat, TEXT is one user message and the prompt is the model's chat template applied\n"
    "to it (and to --system), so an instruct model answers it (attn model chat holds a conversation).\n"
    "The prompt is encoded as the model's tokenizer does (Gemma: BOS first; with --chat the template\n"
    "writes the special tokens) and run in one step; then each token runs at the next position through\n"
    "attn's KV cache. Timings on stderr: load, prefill and decode tokens/s, the KV cache's size.\n\n"
    "  --model MODEL        a GGUF file, or a Hugging Face checkpoint (a directory with config.json,\n"
    "                       model.safetensors and tokenizer.json); its weights are read as stored,\n"
    "                       where the file is mapped (--weights f32 converts them)\n"
    "  --text TEXT          the prompt, UTF-8 (not empty)\n"
    "  --chat               TEXT as a user message in the model's chat template (tokenizer.chat_template\n"
    "                       in a GGUF, chat_template in a checkpoint's tokenizer_config.json)\n"
    "  --system TEXT        with --chat: a system message first\n"
    "  --template FILE      with --chat: this Jinja template instead of the model's (docs/chat.md)\n"
    "  --print-prompt       print the exact prompt text and its token ids first (stdout)\n",
    cli_model_architectures(architectures, sizeof architectures));
    cli_sampling_help(out, MAX_TOKENS_DEFAULT, MAX_TOKENS_MAX);
    fprintf(out,
    "  --kv-dtype D         the KV cache's storage: f32 (default; the full forward's logits to\n"
    "                       float rounding), f16 or bf16 (half the memory, rounded once), q8_0\n"
    "                       or fp8 (e4m3): 8-bit blocks of 32 with a float16 scale, 0.27x the\n"
    "                       memory of f32 (head_dim a multiple of 32; docs/cache.md); K:V gives the\n"
    "                       keys and the values each their own (llama.cpp's -ctk / -ctv): bf16:q8_0\n"
    "                       keeps the keys' outliers at 16 bits and stores the values at 8\n"
    "  --kv-cache D         the same as --kv-dtype\n"
    CLI_ALLOW_BEYOND_CONTEXT_HELP
    "%s\n"
    "exit status: 0 success, 1 the file cannot be read or run, 2 usage error\n\n"
    "examples:\n"
    "  attn model generate --model ~/.cache/attn/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf \\\n"
    "      --text \"这台电脑来自苹果\"\n"
    "  attn model generate --model ~/.cache/attn/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf \\\n"
    "      --chat --text \"Write a haiku about apples\"\n"
    "  attn model generate --model ~/.cache/attn/models/gemma-3-270m-q4_k_m.gguf \\\n"
    "      --text \"The capital of France is\" --max-tokens 30 --temperature 0.7 --top-p 0.9 --seed 1\n",
    cli_decoder_help);
}

enum { F_MODEL = 1, F_TEXT, F_KV_DTYPE, F_CHAT, F_SYSTEM, F_TEMPLATE, F_PRINT_PROMPT, F_BEYOND };

static const cli_flag generate_flags[] = {
    {"--model", "MODEL", F_MODEL, 0},
    {"--text", "TEXT", F_TEXT, 0},
    {"--chat", NULL, F_CHAT, 0},
    {"--system", "TEXT", F_SYSTEM, 0},
    {"--template", "FILE", F_TEMPLATE, 0},
    {"--print-prompt", NULL, F_PRINT_PROMPT, 0},
    {"--kv-dtype", CLI_KV_CACHE_DTYPES, F_KV_DTYPE, 0},
    {"--kv-cache", CLI_KV_CACHE_DTYPES, F_KV_DTYPE, 0},
    {"--allow-beyond-context", NULL, F_BEYOND, 0},
    CLI_FLAGS_END};

static const cli_flag *const generate_tables[] = {generate_flags, cli_sampling_flags, cli_sampling_hints,
                                                  cli_decoder_flags, NULL};
static const cli_spec cli_generate_spec = {CMD, generate_tables, generate_help, false};

/* ------------------------------------------------------------ the run */

typedef struct generate_args {
    const char *path, *text, *system, *template_path;
    bool chat, print_prompt;
    cli_sampling sampling;
    attn_dtype kv_dtype, kv_value_dtype; /* V's 0: K's */
    bool allow_beyond_context;
    attn_decoder_options load;
} generate_args;

/* The prompt's text: TEXT, or with --chat the template over
 * [system,] user TEXT with the generation prompt (malloc'd in *prompt). */
static int prompt_text(const generate_args *a, const cli_model *m, char **prompt, size_t *len) {
    if (!a->chat) {
        *len = strlen(a->text);
        *prompt = malloc(*len + 1);
        if (!*prompt) return cli_data_error(CMD, "out of memory");
        memcpy(*prompt, a->text, *len + 1);
        return CLI_OK;
    }
    attn_chat_message messages[2];
    size_t n = 0;
    if (a->system) messages[n++] = (attn_chat_message){"system", a->system};
    messages[n++] = (attn_chat_message){"user", a->text};
    attn_chat_options opt = ATTN_CHAT_OPTIONS_INIT;
    opt.add_generation_prompt = 1;
    opt.bos_token = m->bos_token;
    opt.eos_token = m->eos_token;
    if (attn_chat_template_render(m->chat, messages, n, &opt, prompt, len))
        return cli_data_error(CMD, "%s", attn_last_error());
    return CLI_OK;
}

static int generate(const generate_args *a) {
    const double t0 = cli_seconds();
    cli_model m;
    int rc = cli_model_open(CMD, a->path, &a->load, a->chat, a->template_path, &m);
    if (rc) return rc;
    attn_decoder_session *session = NULL;
    attn_sampler *sampler = NULL;
    int32_t *ids = NULL;
    float *logits = NULL;
    char *text = NULL;
    cli_reply reply = {0};
    const attn_decoder_config *c = attn_decoder_get_config(m.decoder);
    size_t text_len, n_prompt;
    if ((rc = prompt_text(a, &m, &text, &text_len))) goto done;
    ids = malloc((text_len + 2) * sizeof *ids);
    logits = malloc((size_t)c->vocab * sizeof *logits);
    if (!ids || !logits) {
        rc = cli_data_error(CMD, "out of memory");
        goto done;
    }
    if (attn_tokenizer_encode(m.tokenizer, text, text_len, a->chat ? ATTN_ENCODE_NO_BOS : 0, ids, text_len + 2,
                              &n_prompt)) {
        rc = cli_data_error(CMD, "--text: %s", attn_last_error());
        goto done;
    }
    if (n_prompt == 0) {
        rc = cli_usage_error(CMD, "--text encodes to no tokens: nothing to continue");
        goto done;
    }
    if (a->print_prompt) cli_print_prompt(text, text_len, ids, n_prompt);
    if ((rc = cli_check_context(CMD, c, (int64_t)n_prompt, a->sampling.max_tokens, a->allow_beyond_context)))
        goto done;
    attn_decoder_session_options so = ATTN_DECODER_SESSION_OPTIONS_INIT;
    so.capacity = (int64_t)n_prompt + a->sampling.max_tokens;
    so.kv_dtype = a->kv_dtype;
    so.kv_value_dtype = a->kv_value_dtype;
    if (attn_decoder_session_new(m.decoder, &so, &session) ||
        attn_sampler_new(&a->sampling.sampler, c->vocab, &sampler)) {
        rc = cli_data_error(CMD, "%s", attn_last_error());
        goto done;
    }
    const double t1 = cli_seconds();
    if (attn_decoder_step(session, ids, (int64_t)n_prompt, logits)) {
        rc = cli_data_error(CMD, "prefill: %s", attn_last_error());
        goto done;
    }
    const double t2 = cli_seconds();
    rc = cli_generate(CMD, session, sampler, &m, &a->sampling, ids, logits, stdout, NULL, &reply);
    if (rc == CLI_OK && reply.len && reply.text[reply.len - 1] != '\n') fputc('\n', stdout);
    if (rc == CLI_OK && !cli_stdout_ok(CMD)) rc = CLI_DATA_ERROR;
    const double t3 = cli_seconds(), decode_s = t3 - t2;
    const double kv_mib = (double)so.capacity *
                          (double)attn_decoder_kv_bytes_per_token_split(c, a->kv_dtype, a->kv_value_dtype) / 1048576.0;
    char kv_name[64];
    if (a->kv_value_dtype)
        snprintf(kv_name, sizeof kv_name, "%s keys, %s values", attn_dtype_name(a->kv_dtype),
                 attn_dtype_name(a->kv_value_dtype));
    else
        snprintf(kv_name, sizeof kv_name, "%s", attn_dtype_name(a->kv_dtype));
    fprintf(stderr,
            "attn %s: %s, loaded in %.2f s (%.0f MiB of weights, %s); KV cache %s, %lld positions, %.1f MiB\n"
            "attn %s: prefill %zu tokens in %.3f s (%.1f tokens/s); decode %lld tokens in %.3f s (%.2f tokens/s); "
            "%lld generated, stopped by %s\n"
            "attn %s: first token %.3f s after the start; peak memory %.1f MiB\n",
            CMD, c->architecture, m.load_seconds, (double)attn_decoder_weight_bytes(m.decoder) / 1048576.0,
            a->load.weights == ATTN_WEIGHTS_F32 ? "float32" : "as stored", kv_name,
            (long long)so.capacity, kv_mib, CMD, n_prompt, t2 - t1, (double)n_prompt / (t2 - t1),
            (long long)reply.steps, decode_s, reply.steps ? (double)reply.steps / decode_s : 0.0,
            (long long)reply.n_ids, rc ? "an error" : reply.why, CMD, reply.first_at > 0 ? reply.first_at - t0 : 0.0,
            cli_peak_rss_bytes() / 1048576.0);
done:
    cli_reply_free(&reply);
    attn_sampler_free(sampler);
    attn_decoder_session_free(session);
    cli_model_close(&m);
    free(ids);
    free(logits);
    free(text);
    return rc;
}

int cmd_model_generate(int argc, char **argv) {
    generate_args a = {.kv_dtype = ATTN_F32, .load = ATTN_DECODER_OPTIONS_INIT};
    cli_sampling_init(&a.sampling, MAX_TOKENS_DEFAULT);
    cli_args args;
    const char *value;
    cli_args_begin(&args, &cli_generate_spec, argc, argv);
    for (int id; (id = cli_args_next(&args, &value)) != CLI_ARGS_END;) {
        switch (id) {
        case CLI_ARGS_STOP: return args.status;
        case F_MODEL: a.path = value; break;
        case F_TEXT: a.text = value; break;
        case F_CHAT: a.chat = true; break;
        case F_SYSTEM: a.system = value; break;
        case F_TEMPLATE: a.template_path = value; break;
        case F_PRINT_PROMPT: a.print_prompt = true; break;
        case F_KV_DTYPE:
            if (!cli_parse_kv_cache(CMD, args.flag, value, &a.kv_dtype, &a.kv_value_dtype)) return CLI_USAGE_ERROR;
            break;
        case F_BEYOND: a.allow_beyond_context = true; break;
        default:
            if (!cli_generation_flag(CMD, &args, id, value, MAX_TOKENS_MAX, &a.sampling, &a.load))
                return CLI_USAGE_ERROR;
            break;
        }
    }
    if (!cli_sampling_finish(CMD, &args, &a.sampling)) return CLI_USAGE_ERROR;
    if ((a.system || a.template_path) && !a.chat)
        return cli_usage_error(CMD, "%s applies with --chat (the chat template) only", a.system ? "--system" : "--template");
    if (!a.path) return cli_usage_error(CMD, "--model MODEL is required (a GGUF file or a checkpoint)");
    if (!a.text) return cli_usage_error(CMD, "--text TEXT is required (the prompt to continue)");
    return generate(&a);
}
