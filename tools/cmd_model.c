/*
 * cmd_model.c — `attn model`: a real model's GGUF file, or a Hugging Face
 * checkpoint (a directory with config.json and safetensors weights, or a
 * .safetensors file with config.json beside it).
 *
 *   attn model info FILE      the architecture, the GQA layout (which query
 *                             heads read which key/value head), RoPE, the
 *                             sliding-window pattern, the weights' memory
 *   attn model run FILE --ids 1,2,3 [--show-top K] [--layer-norms]
 *                             the decoder's float32 forward over token ids and
 *                             the K most likely next tokens
 *
 * Token ids, or a text tokenized by the model's tokenizer (the GGUF's, or a
 * checkpoint's tokenizer.json).  The vocabulary's pieces are shown beside
 * the ids (a checkpoint without tokenizer.json shows none).
 */
#include "cli.h"

#include "attn_decoder.h"
#include "attn_gguf.h"
#include "attn_safetensors.h"
#include "attn_tokenizer.h"

#include <sys/stat.h>

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define TOP_DEFAULT 5
#define IDS_MAX 4096 /* tokens of one run: the forward is O(L^2) in attention, O(L) elsewhere */

const char *cli_model_architectures(char *buf, size_t size) {
    size_t used = 0;
    buf[0] = 0;
    for (int i = 0; attn_decoder_architecture(i) && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, "%s%s", i ? ", " : "", attn_decoder_architecture(i));
    return buf;
}

static void model_help(FILE *out) {
    char architectures[256];
    fprintf(out,
    "usage: attn model info MODEL\n"
    "       attn model run MODEL (--ids ID,ID,... | --text STR) [--show-top K] [--layer-norms]\n"
    "                            [--allow-beyond-context] [--weights stored|f32] [--precision exact|fast]\n"
    "       attn model chapter MODEL [OPTIONS]\n"
    "       attn model trace OPTIONS         (they are listed by attn model trace --help)\n"
    "       attn model generate OPTIONS      (they are listed by attn model generate --help)\n"
    "       attn model chat OPTIONS          (they are listed by attn model chat --help)\n"
    "       attn model bench OPTIONS         (they are listed by attn model bench --help)\n\n"
    "A decoder-only language model (%s), its\n"
    "weights read as the file stores them, activations in float32, every layer's attention through\n"
    "attn's scaled dot-product attention.  MODEL (or\n"
    "--model MODEL) is a GGUF file, or a Hugging Face checkpoint: a directory holding config.json\n"
    "and model.safetensors (or model.safetensors.index.json and its shards), or a .safetensors\n"
    "file with config.json beside it.  Every action takes either (a checkpoint with its\n"
    "tokenizer.json where the action tokenizes text): so do attn map --model and attn report --model.\n\n"
    "  info              architecture and sizes; which query heads share which key/value head;\n"
    "                    RoPE; which layers are local (sliding window) or global; the memory the\n"
    "                    weights take, as stored and as float32 (nothing is read: it is quick)\n"
    "  run               maps the weights (as stored; --weights f32 converts them to float32: 4 bytes\n"
    "                    a parameter), runs the forward over the ids and prints the most likely\n"
    "                    next tokens after the last one\n"
    "  --ids ID,ID,...   token ids, comma-separated, each in [0, vocabulary); no BOS is added\n"
    "                    (Gemma expects 2 first)\n"
    "  --text STR        the text instead, tokenized by the model's tokenizer (the GGUF's, or a\n"
    "                    checkpoint's tokenizer.json: byte-level BPE), with the BOS it asks for;\n"
    "                    the tokens are printed first\n"
    "  --model MODEL     the model, instead of the positional MODEL\n"
    "  --show-top K      how many of the most likely next tokens to print (default %d; --top K is its\n"
    "                    former name); to sample from them: attn model generate or chat\n"
    "  --layer-norms     also print, per layer, the L2 norm of the residual stream at each position\n"
    CLI_ALLOW_BEYOND_CONTEXT_HELP
    "%s",
    cli_model_architectures(architectures, sizeof architectures), TOP_DEFAULT, cli_decoder_help);
    fprintf(out,
    "  chapter           the chapter's opening on this model, the same as attn demo with this model\n"
    "                    (OPTIONS and what it prints: attn demo --help, or attn model chapter --help)\n"
    "  trace             activations under TransformerLens hook names into an .npz cache; activation\n"
    "                    patching, head ablation, KL and logit difference (attn model trace --help)\n"
    "  generate          continues a text, streaming it as the tokens come, through attn's KV cache\n"
    "                    (greedy, or temperature / top-k / top-p with a seed: attn model generate --help)\n"
    "  chat              a conversation with an instruct model, its prompt written by the model's own\n"
    "                    chat template; interactive on a terminal (attn model chat --help)\n"
    "  bench             prefill and decode tokens/s, load time and peak memory, as llama.cpp's llama-bench\n"
    "                    measures them (pp512, tg128, at depths: attn model bench --help)\n\n"
    "environment (every attn model command):\n"
    "  ATTN_NUM_THREADS  threads of every library call: projections, attention, RoPE (default:\n"
    "                    OpenMP's, the cores); the results are the same bits for any count\n"
    "  OMP_WAIT_POLICY   how idle OpenMP threads wait; unset, attn model sets PASSIVE (they sleep)\n"
    "                    and restarts itself once: spinning threads collapse when another process\n"
    "                    keeps a core busy (docs/models.md, \"Threads on a shared host\"); ACTIVE\n"
    "                    spins\n\n"
    "exit status: 0 success, 1 the file cannot be read or run, 2 usage error\n\n"
    "examples:\n"
    "  attn model info ~/.cache/attn/models/gemma-3-270m-q4_k_m.gguf\n"
    "  attn model run ~/.cache/attn/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf --ids 785,6722,315,9625,374\n"
    "                                     # \"The capital of France is\": next token 12095 (\" Paris\")\n");
}

enum { F_IDS = 1, F_TOP, F_LAYER_NORMS, F_MODEL, F_TEXT, F_BEYOND };

static const cli_flag model_flags[] = {
    {"--ids", "ID,ID,...", F_IDS, 0},
    {"--text", "STR", F_TEXT, 0},
    {"--model", "MODEL", F_MODEL, 0},
    {"--show-top", "K", F_TOP, 0},
    {"--top", "K", F_TOP, 0}, /* the former name of --show-top */
    {"--layer-norms", NULL, F_LAYER_NORMS, 0},
    {"--allow-beyond-context", NULL, F_BEYOND, 0},
    CLI_FLAGS_END};

/* Sampling is generate's and chat's: run only shows the distribution. */
static const cli_flag model_hints[] = {
    {"--top-k", "--show-top K: how many next tokens run prints; --top-k K samples, in attn model generate and chat",
     0, CLI_HINT},
    {"--top-p", "--show-top K: run prints the most likely next tokens; --top-p samples, in attn model generate and "
                "chat", 0, CLI_HINT},
    {"--min-p", "--show-top K: run prints the most likely next tokens; --min-p samples, in attn model generate and "
                "chat", 0, CLI_HINT},
    {"--temperature", "attn model generate --temperature (run prints the distribution, it does not sample)", 0,
     CLI_HINT},
    CLI_FLAGS_END};

static const cli_flag *const model_tables[] = {model_flags, model_hints, cli_decoder_flags, NULL};
const cli_spec cli_model_spec = {"model", model_tables, model_help, true};

/* "1,2,3" into ids (malloc'd); prints a usage error and returns false on
 * anything that is not a list of non-negative integers. */
static bool parse_ids(const char *text, int32_t **ids, int64_t *count) {
    int64_t n = 1;
    for (const char *p = text; *p; p++) n += *p == ',';
    if (n > IDS_MAX) {
        cli_usage_error("model", "--ids: %lld ids, at most %d", (long long)n, IDS_MAX);
        return false;
    }
    int32_t *out = malloc((size_t)n * sizeof *out);
    if (!out) {
        cli_data_error("model", "out of memory");
        return false;
    }
    const char *p = text;
    for (int64_t i = 0; i < n; i++) {
        char *end;
        errno = 0;
        const long long v = strtoll(p, &end, 10);
        if (end == p || (*end != ',' && *end != '\0') || errno == ERANGE || v < 0 || v > INT32_MAX || *p == '+' ||
            *p == ' ') {
            cli_usage_error("model", "--ids: element %lld is '%.*s': expected a token id (an integer >= 0)",
                            (long long)i, (int)strcspn(p, ","), p);
            free(out);
            return false;
        }
        out[i] = (int32_t)v;
        p = *end ? end + 1 : end;
    }
    *ids = out;
    *count = n;
    return true;
}

/* Bytes escaped for a terminal into buf: \\ and \", control bytes and
 * bytes of invalid UTF-8 (a token that ends inside a character) as \xNN,
 * valid UTF-8 as it is. */
static const char *escaped(const unsigned char *s, size_t n, char *buf, size_t size) {
    size_t o = 0;
    for (size_t i = 0; i < n && o + 5 < size;) {
        const unsigned char c = s[i];
        size_t k = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
        bool valid = k > 0 && i + k <= n && o + k + 1 < size;
        for (size_t j = 1; valid && j < k; j++) valid = (s[i + j] & 0xC0) == 0x80;
        if (c == '\\' || c == '"') o += (size_t)snprintf(buf + o, size - o, "\\%c", c);
        else if (!valid || c < 0x20 || c == 0x7f) o += (size_t)snprintf(buf + o, size - o, "\\x%02x", c);
        else {
            memcpy(buf + o, s + i, k);
            o += k;
        }
        i += valid ? k : 1;
    }
    buf[o] = '\0';
    return buf;
}

/* Token id as readable text, escaped for a terminal, into buf: from the
 * tokenizer when there is one (its bytes: "苹果" and " the", not the
 * byte-level vocabulary's "èĭ¹æŀľ" and "Ġthe"), else the GGUF's
 * tokenizer.ggml.tokens spelling ("" when neither has it). */
static const char *piece(const attn_gguf *g, const attn_tokenizer *tok, int64_t id, char *buf, size_t size) {
    buf[0] = '\0';
    if (tok) {
        const int32_t one = (int32_t)id;
        char raw[256];
        size_t len = 0;
        return attn_tokenizer_decode(tok, &one, 1, 0, raw, sizeof raw, &len)
                   ? buf
                   : escaped((const unsigned char *)raw, len, buf, size);
    }
    attn_gguf_value tokens, element;
    if (!g || attn_gguf_get_array(g, "tokenizer.ggml.tokens", ATTN_GGUF_VALUE_STRING, &tokens) != ATTN_OK ||
        (uint64_t)id >= tokens.count)
        return buf;
    uint64_t cursor = 0;
    for (int64_t i = 0; i <= id; i++)
        if (attn_gguf_array_next(&tokens, &cursor, &element) != ATTN_OK) return buf;
    return escaped(element.data, element.size, buf, size);
}

/* A checkpoint's tokenizer: tokenizer.json in the directory, or beside the
 * .safetensors / index file; NULL (no error) when there is none. */
static attn_status checkpoint_tokenizer(const char *path, attn_tokenizer **tok) {
    *tok = NULL;
    struct stat sb;
    const bool is_dir = stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
    const char *slash = strrchr(path, '/');
    char dir[4096];
    if (is_dir) snprintf(dir, sizeof dir, "%s", path);
    else snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - path) : 1, slash ? path : ".");
    char file[4200];
    snprintf(file, sizeof file, "%s/tokenizer.json", dir);
    if (stat(file, &sb) != 0) return ATTN_OK;
    return attn_tokenizer_from_json_file(dir, tok);
}

static const char *activation_name(attn_decoder_activation a) {
    return a == ATTN_DECODER_SWIGLU ? "SwiGLU (silu)" : "GeGLU (tanh GELU)";
}

/* A Hugging Face checkpoint rather than a GGUF file: a directory, a
 * .safetensors file or a safetensors index. */
static bool is_checkpoint(const char *path) {
    struct stat sb;
    const size_t n = strlen(path);
    return (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) ||
           (n >= 12 && strcmp(path + n - 12, ".safetensors") == 0) || (n >= 5 && strcmp(path + n - 5, ".json") == 0);
}

static int model_info(const char *path) {
    attn_gguf *g = NULL;
    attn_safetensors *st = NULL;
    attn_decoder_config c;
    const bool hf = is_checkpoint(path);
    if (hf ? attn_decoder_config_from_checkpoint(path, &c) || attn_safetensors_open(path, &st)
           : attn_gguf_open(path, &g) != ATTN_OK)
        return cli_data_error("model", "%s", attn_last_error());
    if (!hf && attn_decoder_read_config(g, &c)) {
        const int rc = cli_data_error("model", "%s: %s", path, attn_last_error());
        attn_gguf_free(g);
        return rc;
    }
    const char *name = "";
    size_t name_len = 0;
    if (!g || attn_gguf_get_string(g, "general.name", &name, &name_len)) name_len = 0;
    printf("%s\n  architecture   %s%s%.*s%s\n", path, c.architecture, name_len ? " (" : "", (int)name_len, name,
           name_len ? ")" : "");
    printf("  layers         %lld, d_model %lld, FFN %lld %s, vocabulary %lld\n", (long long)c.n_layers,
           (long long)c.d_model, (long long)c.d_ffn, activation_name(c.activation), (long long)c.vocab);
    const int64_t group = c.n_heads / c.n_kv_heads;
    printf("  attention      %lld query heads, %lld key/value head%s of width %lld (%s %lld:1), scale %.9g\n",
           (long long)c.n_heads, (long long)c.n_kv_heads, c.n_kv_heads > 1 ? "s" : "", (long long)c.head_dim,
           c.n_kv_heads == 1 ? "MQA" : group == 1 ? "MHA" : "GQA", (long long)group, (double)c.attn_scale);
    for (int64_t j = 0; j < c.n_kv_heads; j++)
        printf("                 kv head %lld <- query heads %lld..%lld\n", (long long)j, (long long)(j * group),
               (long long)((j + 1) * group - 1));
    printf("  norms          RMSNorm eps %g%s%s\n", c.rms_eps, c.qk_norm ? ", QK-norm on each head's q and k" : "",
           c.post_norms ? ", post-norms after attention and FFN" : "");
    printf("  projections    %s\n", c.qkv_bias ? "q, k, v with biases; o without" : "no biases");
    printf("  embeddings     %s%s\n", c.embed_scale != 1.0f ? "scaled by sqrt(d_model)" : "unscaled",
           c.tied_embeddings ? ", tied to the output head" : ", separate output head");
    printf("  RoPE           %s pairing, theta %g", c.rope_pairing == ATTN_ROPE_NEOX ? "NeoX (rotate half)" : "GPT-J",
           c.rope_theta);
    if (c.sliding_window) printf(" on global layers, %g on local ones", c.rope_theta_local);
    if (c.rope_dim && c.rope_dim != c.head_dim)
        printf(", partial: the first %lld of %lld widths of each head rotated", (long long)c.rope_dim,
               (long long)c.head_dim);
    printf("\n");
    if (c.rope_scaling != ATTN_ROPE_SCALING_NONE) {
        static const char *const names[] = {"none", "linear", "dynamic", "yarn", "llama3"};
        const int k = c.rope_scaling;
        printf("  RoPE scaling   %s, factor %g", k >= 0 && k < 5 ? names[k] : "?", c.rope_factor);
        if (c.rope_original_context) printf(", trained at %lld positions", (long long)c.rope_original_context);
        printf(", on %s\n", c.rope_scale_local || !c.sliding_window ? "every layer" : "the global layers only");
    }
    const int64_t limit = attn_decoder_context_limit(&c);
    if (!c.context_length) printf("  context        not given by the file: not checked\n");
    else if (limit != c.context_length)
        printf("  context        %lld positions trained, %lld with its RoPE scaling: prompt + generated tokens "
               "beyond %lld are refused\n", (long long)c.context_length, (long long)limit, (long long)limit);
    else
        printf("  context        %lld positions: prompt + generated tokens beyond them are refused\n",
               (long long)limit);
    if (c.sliding_window) {
        printf("  window         %lld keys on local layers (L); global (G) layers see every earlier key\n"
               "  layers         ",
               (long long)c.sliding_window);
        for (int64_t l = 0; l < c.n_layers; l++) printf("%c", attn_decoder_layer_is_local(&c, l) ? 'L' : 'G');
        printf("\n");
    } else {
        printf("  window         none: every layer sees every earlier key\n");
    }
    int64_t params = 0;
    uint64_t file_bytes = 0;
    if (g) {
        attn_gguf_info info;
        attn_gguf_describe(g, &info);
        for (int64_t i = 0; i < info.n_tensors; i++) {
            attn_gguf_tensor t;
            if (attn_gguf_tensor_at(g, i, &t) == ATTN_OK) params += t.n_elements;
        }
        file_bytes = info.size;
    } else {
        for (int64_t i = 0; i < attn_safetensors_n_tensors(st); i++) {
            attn_safetensors_tensor t;
            if (attn_safetensors_tensor_at(st, i, &t) == ATTN_OK) {
                params += t.n_elements;
                file_bytes += t.n_bytes;
            }
        }
        printf("  checkpoint     safetensors, %lld tensor%s in %lld file%s\n", (long long)attn_safetensors_n_tensors(st),
               attn_safetensors_n_tensors(st) == 1 ? "" : "s", (long long)attn_safetensors_n_shards(st),
               attn_safetensors_n_shards(st) == 1 ? "" : "s");
    }
    printf("  weights        %.3f M parameters: the %s %.2f MiB, read as stored (%.2f MiB as float32 with "
           "--weights f32)\n",
           (double)params / 1e6, g ? "file's" : "tensors' data", (double)file_bytes / 1048576.0,
           (double)params * 4.0 / 1048576.0);
    attn_gguf_free(g);
    attn_safetensors_free(st);
    return CLI_OK;
}

static int model_run(const char *path, int32_t *ids, int64_t L, const char *text, int64_t top, bool layer_norms,
                     bool allow_beyond_context, const attn_decoder_options *load) {
    attn_gguf *g = NULL; /* NULL for a Hugging Face checkpoint: pieces from its tokenizer.json then */
    attn_tokenizer *tok = NULL;
    const bool hf = is_checkpoint(path);
    if (!hf && attn_gguf_open(path, &g)) return cli_data_error("model", "%s", attn_last_error());
    int rc = CLI_OK;
    attn_decoder *m = NULL;
    float *logits = NULL, *hidden = NULL;
    int64_t *best = NULL;
    if (hf ? checkpoint_tokenizer(path, &tok) : text ? attn_tokenizer_from_gguf(g, &tok) : ATTN_OK) {
        rc = cli_data_error("model", "%s: %s", path, attn_last_error());
        goto done;
    }
    if (text) {
        if (!tok) {
            rc = cli_data_error("model", "%s: --text needs a tokenizer, and the checkpoint has no tokenizer.json "
                                "(give --ids)", path);
            goto done;
        }
        size_t n = 0;
        const size_t len = strlen(text);
        ids = malloc((len + 2) * sizeof *ids);
        if (!ids || attn_tokenizer_encode(tok, text, len, 0, ids, len + 2, &n)) {
            rc = cli_data_error("model", "--text: %s", ids ? attn_last_error() : "out of memory");
            goto done;
        }
        if (n == 0 || n > IDS_MAX) {
            rc = cli_usage_error("model", "--text gives %zu tokens: 1 .. %d are run", n, IDS_MAX);
            goto done;
        }
        L = (int64_t)n;
        printf("tokens (%lld):", (long long)L);
        for (int64_t i = 0; i < L; i++) {
            char buf[256];
            printf(" %ld \"%s\"", (long)ids[i], piece(g, tok, ids[i], buf, sizeof buf));
        }
        printf("\n");
    }
    attn_decoder_config cfg;
    if (hf ? attn_decoder_config_from_checkpoint(path, &cfg) : attn_decoder_read_config(g, &cfg)) {
        rc = cli_data_error("model", "%s: %s", path, attn_last_error());
        goto done;
    }
    if ((rc = cli_check_context("model", &cfg, L, 0, allow_beyond_context))) goto done;
    const double t0 = cli_seconds();
    if (hf ? attn_decoder_load_safetensors_with(path, load, &m) : attn_decoder_load_with(g, load, &m)) {
        rc = cli_data_error("model", "%s: %s", path, attn_last_error());
        goto done;
    }
    const attn_decoder_config *c = attn_decoder_get_config(m);
    const double t1 = cli_seconds();
    for (int64_t i = 0; i < L; i++)
        if (ids[i] >= c->vocab) { /* told with the file, before the library's own refusal */
            rc = cli_data_error("model", "--ids: element %lld is %ld, outside the vocabulary of '%s' (0 .. %lld)",
                                (long long)i, (long)ids[i], path, (long long)c->vocab - 1);
            goto done;
        }
    if (top > c->vocab) top = c->vocab;
    logits = malloc((size_t)c->vocab * sizeof *logits);
    best = malloc((size_t)top * sizeof *best);
    if (layer_norms) hidden = malloc((size_t)((c->n_layers + 1) * L * c->d_model) * sizeof *hidden);
    if (!logits || !best || (layer_norms && !hidden)) {
        rc = cli_data_error("model", "out of memory for %lld tokens", (long long)L);
        goto done;
    }
    attn_decoder_outputs out = ATTN_DECODER_OUTPUTS_INIT;
    out.logits = logits;
    out.last_only = 1;
    out.hidden = hidden;
    if (attn_decoder_forward(m, ids, L, &out)) {
        rc = cli_data_error("model", "%s: %s", path, attn_last_error());
        goto done;
    }
    const double t2 = cli_seconds();
    fprintf(stderr, "attn model: %s, %lld tokens: weights loaded in %.2f s (%.1f MiB, %s), forward %.2f s\n",
            c->architecture, (long long)L, t1 - t0, (double)attn_decoder_weight_bytes(m) / 1048576.0,
            load->weights == ATTN_WEIGHTS_F32 ? "float32" : "as stored", t2 - t1);
    if (layer_norms) {
        printf("L2 norm of the residual stream (row 0: the embeddings; row l + 1: after layer l)\n%-6s", "layer");
        for (int64_t t = 0; t < L && t < 16; t++) printf(" %10lld", (long long)t);
        printf("%s\n", L > 16 ? "  (first 16 positions)" : "");
        for (int64_t l = 0; l <= c->n_layers; l++) {
            if (l == 0) printf("%-6s", "embed");
            else printf("%-6lld", (long long)(l - 1));
            for (int64_t t = 0; t < L && t < 16; t++) {
                const float *h = hidden + (l * L + t) * c->d_model;
                double ss = 0;
                for (int64_t i = 0; i < c->d_model; i++) ss += (double)h[i] * h[i];
                printf(" %10.4g", sqrt(ss));
            }
            printf("\n");
        }
        printf("\n");
    }
    attn_top_k(logits, c->vocab, top, best);
    double max = logits[best[0]], z = 0.0;
    for (int64_t i = 0; i < c->vocab; i++) z += exp((double)logits[i] - max);
    printf("next token after position %lld (id %ld):\n%-5s %8s %12s %9s  %s\n", (long long)(L - 1), (long)ids[L - 1],
           "rank", "id", "logit", "prob", "piece");
    for (int64_t j = 0; j < top; j++) {
        char buf[256];
        printf("%-5lld %8lld %12.6f %9.6f  \"%s\"\n", (long long)(j + 1), (long long)best[j], (double)logits[best[j]],
               exp((double)logits[best[j]] - max) / z, piece(g, tok, best[j], buf, sizeof buf));
    }
done:
    if (text) free(ids);
    attn_tokenizer_free(tok);
    free(logits);
    free(hidden);
    free(best);
    attn_decoder_free(m);
    attn_gguf_free(g);
    return rc;
}

int cmd_model(int argc, char **argv) {
    /* attn model trace [options]: cmd_model_trace.c; generate: cmd_generate.c; bench: cmd_model_bench.c. */
    if (argc >= 2 && strcmp(argv[1], "trace") == 0) return cmd_model_trace(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "generate") == 0) return cmd_model_generate(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "chat") == 0) return cmd_model_chat(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "bench") == 0) return cmd_model_bench(argc - 1, argv + 1);
    /* attn model chapter FILE [options] is attn demo --model FILE [options]. */
    if (argc >= 2 && strcmp(argv[1], "chapter") == 0) {
        const bool help = argc >= 3 && (strcmp(argv[2], "-h") == 0 || strcmp(argv[2], "--help") == 0);
        if (argc < 3 || (argv[2][0] == '-' && !help))
            return cli_usage_error("model", "chapter needs the MODEL first (a GGUF file or a checkpoint), then its options "
                                            "(attn demo --help lists them)");
        char **demo_argv = malloc((size_t)(argc + 2) * sizeof *demo_argv);
        if (!demo_argv) return cli_data_error("model", "out of memory");
        int n = 0;
        demo_argv[n++] = "demo";
        if (!help) demo_argv[n++] = "--model";
        for (int i = 2; i < argc; i++) demo_argv[n++] = argv[i];
        demo_argv[n] = NULL;
        const int rc = cmd_demo(n, demo_argv);
        free(demo_argv);
        return rc;
    }
    const char *action = NULL, *path = NULL, *ids_text = NULL, *text = NULL;
    int64_t top = TOP_DEFAULT;
    bool layer_norms = false, allow_beyond_context = false;
    attn_decoder_options load = ATTN_DECODER_OPTIONS_INIT;
    cli_args args;
    const char *value;
    cli_args_begin(&args, &cli_model_spec, argc, argv);
    for (int id; (id = cli_args_next(&args, &value)) != CLI_ARGS_END;) {
        if (id == CLI_ARGS_STOP) return args.status;
        if (id == CLI_ARGS_POSITIONAL) {
            if (!action) action = value;
            else if (!path) path = value;
            else return cli_usage_error("model", "unexpected argument '%s' (one MODEL only)", value);
        } else if (id == F_IDS) {
            ids_text = value;
        } else if (id == F_TEXT) {
            text = value;
        } else if (id == F_TOP) {
            if (!cli_parse_int("model", args.flag, value, 1, 1000, &top)) return CLI_USAGE_ERROR;
        } else if (id == F_LAYER_NORMS) {
            layer_norms = true;
        } else if (id == F_BEYOND) {
            allow_beyond_context = true;
        } else if (id == F_MODEL) {
            if (path) return cli_usage_error("model", "--model '%s': the model is given already ('%s')", value, path);
            path = value;
        } else if (cli_decoder_take(&load, "model", id, value) < 0) {
            return CLI_USAGE_ERROR;
        }
    }
    if (!action) return cli_usage_error("model", "no action: give 'info FILE' or 'run FILE --ids ...'");
    const bool info = strcmp(action, "info") == 0, run = strcmp(action, "run") == 0;
    if (!info && !run) {
        static const char *const actions[] = {"info", "run", "chapter", "trace", "generate", "chat", "bench"};
        const char *guess = cli_nearest_name(action, strlen(action), actions, 7);
        return cli_usage_error("model", "unknown action '%s'%s%s%s: the actions are info, run, chapter, trace, generate, chat and bench", action,
                               guess ? " (did you mean " : "", guess ? guess : "", guess ? "?)" : "");
    }
    if (!path) return cli_usage_error("model", "%s needs the model (a GGUF file or a Hugging Face checkpoint)", action);
    if (info) {
        if (ids_text || text || cli_args_given(&args, F_TOP) || layer_norms || allow_beyond_context ||
            cli_args_given(&args, CLI_ID_WEIGHTS) || cli_args_given(&args, CLI_ID_DECODER_PRECISION))
            return cli_usage_error("model", "--ids, --text, --show-top, --layer-norms, --allow-beyond-context, --weights "
                                   "and --precision are options of 'run', not 'info'");
        return model_info(path);
    }
    if (!ids_text == !text) return cli_usage_error("model", "run needs --ids ID,ID,... (token ids) or --text STR, one of them");
    if (text) return model_run(path, NULL, 0, text, top, layer_norms, allow_beyond_context, &load);
    int32_t *ids;
    int64_t L;
    if (!parse_ids(ids_text, &ids, &L)) return CLI_USAGE_ERROR;
    const int rc = model_run(path, ids, L, NULL, top, layer_norms, allow_beyond_context, &load);
    free(ids);
    return rc;
}
