/*
 * cmd_tokenize.c — `attn tokenize` and `attn detokenize`: a GGUF model's
 * tokenizer (attn_tokenizer.h) on the command line.
 *
 *   tokenize    text (--text, or --file, - for stdin) -> ids and pieces
 *   detokenize  ids (arguments, or --file of ids) -> the text's bytes, as
 *               they are (no newline added), so that
 *               attn detokenize --model M $(attn tokenize --model M --ids --text T)
 *               prints T again
 */
#include "cli.h"

#include "attn_tokenizer.h"

#include <sys/stat.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------- shared */

/* The model's tokenizer, or NULL after a data error naming the file: a
 * Hugging Face tokenizer.json, or a directory holding one (a checkpoint),
 * or else a GGUF file. */
static attn_tokenizer *load_tokenizer(const char *cmd, const char *path) {
    struct stat sb;
    const size_t n = strlen(path);
    if ((stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) || (n >= 5 && strcmp(path + n - 5, ".json") == 0)) {
        attn_tokenizer *t;
        if (attn_tokenizer_from_json_file(path, &t) != ATTN_OK) {
            cli_data_error(cmd, "--model '%s': %s", path, attn_last_error());
            return NULL;
        }
        return t;
    }
    attn_gguf *g;
    if (attn_gguf_open(path, &g) != ATTN_OK) {
        cli_data_error(cmd, "--model '%s': %s", path, attn_last_error());
        return NULL;
    }
    attn_tokenizer *t;
    attn_status st = attn_tokenizer_from_gguf(g, &t);
    attn_gguf_free(g);
    if (st != ATTN_OK) {
        cli_data_error(cmd, "--model '%s': %s", path, attn_last_error());
        return NULL;
    }
    return t;
}

/* The whole of path (- is stdin) into *data (malloc'd), or false after a
 * data error. */
static bool read_all(const char *cmd, const char *path, char **data, size_t *len) {
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
    if (!f) {
        cli_data_error(cmd, "--file '%s': %s", path, strerror(errno));
        return false;
    }
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    for (size_t got; buf && (got = fread(buf + n, 1, cap - n, f)) > 0;) {
        n += got;
        if (n == cap) {
            char *bigger = realloc(buf, cap * 2);
            if (!bigger) free(buf);
            buf = bigger;
            cap *= 2;
        }
    }
    bool ok = buf && !ferror(f);
    if (f != stdin) fclose(f);
    if (!ok) {
        free(buf);
        cli_data_error(cmd, "--file '%s': %s", path, buf ? "read error" : "out of memory");
        return false;
    }
    *data = buf;
    *len = n;
    return true;
}

/* A piece printed so that a line shows it unambiguously: \n \r \t \\,
 * a blank as \x20 (pieces are separated by blanks), other control bytes and
 * bytes of invalid UTF-8 as \xNN; valid UTF-8 as it is. */
static void print_piece(const char *piece, size_t len) {
    const unsigned char *p = (const unsigned char *)piece;
    for (size_t i = 0; i < len;) {
        unsigned char c = p[i];
        size_t n = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
        bool valid = n > 0 && i + n <= len;
        for (size_t k = 1; valid && k < n; k++) valid = (p[i + k] & 0xC0) == 0x80;
        if (c == '\n') fputs("\\n", stdout);
        else if (c == '\r') fputs("\\r", stdout);
        else if (c == '\t') fputs("\\t", stdout);
        else if (c == '\\') fputs("\\\\", stdout);
        else if (!valid || c <= 0x20 || c == 0x7F) printf("\\x%02x", c);
        else fwrite(p + i, 1, n, stdout);
        i += valid ? n : 1;
    }
}

/* ------------------------------------------------------------ tokenize */

static void tokenize_help(FILE *out) {
    fprintf(out,
    "usage: attn tokenize --model MODEL (--text STR | --file F) [--ids | --pieces] [--no-special] [--no-bos]\n\n"
    "Text to token ids with the model's own tokenizer, read from its GGUF file: byte-level BPE\n"
    "(tokenizer.ggml.model \"gpt2\": Qwen2, SmolLM2) or Gemma's SentencePiece vocabulary (\"llama\");\n"
    "or from a Hugging Face tokenizer.json (byte-level BPE, or Gemma's SentencePiece-style BPE).\n"
    "The ids are those Hugging Face transformers gives for the same file (docs/tokenizers.md).\n\n"
    "  --model MODEL       the model whose vocabulary is used: FILE.gguf, a tokenizer.json, or a\n"
    "                      Hugging Face checkpoint directory holding tokenizer.json (and perhaps\n"
    "                      tokenizer_config.json, for BOS and EOS)\n"
    "  --text STR          the text (UTF-8)\n"
    "  --file F            the text, read from F as bytes (- reads stdin)\n"
    "  --ids               print only the ids, on one line (what attn detokenize reads)\n"
    "  --pieces            print only the pieces, on one line (\\n \\t \\x20 ... escaped)\n"
    "                      (default: one line per token: its id, its piece and, where they differ,\n"
    "                      the bytes the piece stands for)\n"
    "  --no-special        read special tokens' text (<|im_start|>, <bos>) as plain text\n"
    "  --no-bos            no BOS even where the model asks for one (Gemma does)\n\n"
    "examples:\n"
    "  attn tokenize --model qwen2.5-coder-0.5b-instruct-q4_k_m.gguf --text '我吃了一个苹果'\n"
    "  attn tokenize --model gemma-3-270m-q4_k_m.gguf --ids --file prompt.txt\n");
}

enum { T_MODEL = 1, T_TEXT, T_FILE, T_IDS, T_PIECES, T_NO_SPECIAL, T_NO_BOS };
static const cli_flag tokenize_flags[] = {
    {"--model", "MODEL", T_MODEL, 0}, {"--text", "STR", T_TEXT, 0},   {"--file", "F", T_FILE, 0},
    {"--ids", NULL, T_IDS, 0},            {"--pieces", NULL, T_PIECES, 0}, {"--no-special", NULL, T_NO_SPECIAL, 0},
    {"--no-bos", NULL, T_NO_BOS, 0},      CLI_FLAGS_END};
static const cli_flag *const tokenize_tables[] = {tokenize_flags, NULL};
const cli_spec cli_tokenize_spec = {"tokenize", tokenize_tables, tokenize_help, false};

int cmd_tokenize(int argc, char **argv) {
    const char *model = NULL, *text = NULL, *file = NULL;
    unsigned flags = 0;
    cli_args args;
    const char *value;
    cli_args_begin(&args, &cli_tokenize_spec, argc, argv);
    for (int id; (id = cli_args_next(&args, &value)) != CLI_ARGS_END;) {
        switch (id) {
        case CLI_ARGS_STOP: return args.status;
        case T_MODEL: model = value; break;
        case T_TEXT: text = value; break;
        case T_FILE: file = value; break;
        case T_NO_SPECIAL: flags |= ATTN_ENCODE_SPLIT_SPECIAL; break;
        case T_NO_BOS: flags |= ATTN_ENCODE_NO_BOS; break;
        default: break; /* --ids, --pieces: read below */
        }
    }
    const bool only_ids = cli_args_given(&args, T_IDS), only_pieces = cli_args_given(&args, T_PIECES);
    if (!model) return cli_usage_error("tokenize", "missing --model FILE.gguf");
    if (!text == !file) return cli_usage_error("tokenize", text ? "--text and --file exclude each other" : "missing --text STR or --file F");
    if (only_ids && only_pieces) return cli_usage_error("tokenize", "--ids and --pieces exclude each other");

    attn_tokenizer *t = load_tokenizer("tokenize", model);
    if (!t) return CLI_DATA_ERROR;
    char *data = NULL;
    size_t len = text ? strlen(text) : 0;
    if (file && !read_all("tokenize", file, &data, &len)) {
        attn_tokenizer_free(t);
        return CLI_DATA_ERROR;
    }
    const char *input = file ? data : text;
    int rc = CLI_OK;
    /* len + 2 ids always suffice (one per byte, a BOS): one pass. */
    size_t n = 0;
    int32_t *ids = malloc((len + 2) * sizeof *ids);
    if (!ids || attn_tokenizer_encode(t, input, len, flags, ids, len + 2, &n) != ATTN_OK) {
        rc = cli_data_error("tokenize", "%s", ids ? attn_last_error() : "out of memory");
    } else {
        for (size_t i = 0; i < n; i++) {
            const char *piece;
            size_t piece_len;
            attn_tokenizer_token(t, ids[i], &piece, &piece_len, NULL);
            if (only_ids) {
                printf("%s%d", i ? " " : "", ids[i]);
            } else if (only_pieces) {
                if (i) putchar(' ');
                print_piece(piece, piece_len);
            } else {
                /* The piece, and the bytes it stands for where they differ
                 * (BPE's byte alphabet, SentencePiece's U+2581 and <0xNN>). */
                char bytes[256];
                size_t bytes_len = 0;
                printf("%d\t", ids[i]);
                print_piece(piece, piece_len);
                if (attn_tokenizer_decode(t, ids + i, 1, 0, bytes, sizeof bytes, &bytes_len) == ATTN_OK &&
                    (bytes_len != piece_len || memcmp(bytes, piece, piece_len) != 0)) {
                    fputs("\t", stdout);
                    print_piece(bytes, bytes_len);
                }
                putchar('\n');
            }
        }
        if (only_ids || only_pieces) putchar('\n');
    }
    free(ids);
    free(data);
    attn_tokenizer_free(t);
    return rc;
}

/* ---------------------------------------------------------- detokenize */

static void detokenize_help(FILE *out) {
    fprintf(out,
    "usage: attn detokenize --model MODEL [--skip-special] [--replace-invalid] ID...\n"
    "       attn detokenize --model MODEL [options] --file IDS.txt\n\n"
    "Token ids back to text with the model's tokenizer.  The text's bytes are written as they are,\n"
    "without a newline added: a cut through a character (a lone id of a multi-byte character)\n"
    "gives invalid UTF-8 unless --replace-invalid.\n\n"
    "  --model MODEL       FILE.gguf, a tokenizer.json or a checkpoint directory holding one\n"
    "  ID...               the ids, in decimal: e.g. the line attn tokenize prints with its ids-only option\n"
    "  --file IDS.txt      the ids, separated by blanks, commas or newlines (- reads stdin)\n"
    "  --skip-special      control tokens (<bos>, <|im_end|>) write nothing\n"
    "  --replace-invalid   each invalid UTF-8 sequence becomes U+FFFD, as Python's errors=\"replace\"\n\n"
    "example:\n"
    "  attn detokenize --model qwen2.5-coder-0.5b-instruct-q4_k_m.gguf 105043 100019\n");
}

enum { D_MODEL = 1, D_FILE, D_SKIP_SPECIAL, D_REPLACE_INVALID };
static const cli_flag detokenize_flags[] = {
    {"--model", "MODEL", D_MODEL, 0},      {"--file", "IDS.txt", D_FILE, 0},
    {"--skip-special", NULL, D_SKIP_SPECIAL, 0}, {"--replace-invalid", NULL, D_REPLACE_INVALID, 0},
    CLI_FLAGS_END};
static const cli_flag *const detokenize_tables[] = {detokenize_flags, NULL};
const cli_spec cli_detokenize_spec = {"detokenize", detokenize_tables, detokenize_help, true};

/* Appends the ids of text (decimal, separated by blanks or commas);
 * false after a usage error naming what is not an id. */
static bool parse_ids(const char *text, const char *what, int32_t **ids, size_t *n, size_t *cap) {
    for (const char *p = text;;) {
        while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r' || *p == ',') p++;
        if (!*p) return true;
        char *end;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX || (*end && !strchr(" \t\r\n,", *end))) {
            const char *stop = p + strcspn(p, " \t\r\n,");
            cli_usage_error("detokenize", "%s: '%.*s' is not a token id (0 .. %d)", what, (int)(stop - p), p, INT32_MAX);
            return false;
        }
        if (*n == *cap) {
            *cap = *cap ? *cap * 2 : 64;
            int32_t *bigger = realloc(*ids, *cap * sizeof **ids);
            if (!bigger) {
                cli_data_error("detokenize", "out of memory");
                return false;
            }
            *ids = bigger;
        }
        (*ids)[(*n)++] = (int32_t)v;
        p = end;
    }
}

int cmd_detokenize(int argc, char **argv) {
    const char *model = NULL, *file = NULL;
    unsigned flags = 0;
    int32_t *ids = NULL;
    size_t n = 0, cap = 0;
    bool ok = true;
    cli_args args;
    const char *value;
    cli_args_begin(&args, &cli_detokenize_spec, argc, argv);
    for (int id; ok && (id = cli_args_next(&args, &value)) != CLI_ARGS_END;) {
        switch (id) {
        case CLI_ARGS_STOP: free(ids); return args.status;
        case CLI_ARGS_POSITIONAL: ok = parse_ids(value, "ID", &ids, &n, &cap); break;
        case D_MODEL: model = value; break;
        case D_FILE: file = value; break;
        case D_SKIP_SPECIAL: flags |= ATTN_DECODE_SKIP_SPECIAL; break;
        case D_REPLACE_INVALID: flags |= ATTN_DECODE_VALID_UTF8; break;
        default: break;
        }
    }
    int rc = ok ? CLI_OK : CLI_USAGE_ERROR;
    if (rc == CLI_OK && !model) rc = cli_usage_error("detokenize", "missing --model FILE.gguf");
    if (rc == CLI_OK && file && n) rc = cli_usage_error("detokenize", "ids come from --file or the arguments, not both");
    if (rc == CLI_OK && !file && !n) rc = cli_usage_error("detokenize", "missing the ids (ID... or --file IDS.txt)");
    char *data = NULL;
    size_t len;
    if (rc == CLI_OK && file) {
        if (!read_all("detokenize", file, &data, &len)) rc = CLI_DATA_ERROR;
        else if (memchr(data, 0, len)) rc = cli_data_error("detokenize", "--file '%s' holds a NUL byte", file);
        else if (!(data[len] = 0, parse_ids(data, file, &ids, &n, &cap))) rc = CLI_USAGE_ERROR;
    }
    attn_tokenizer *t = rc == CLI_OK ? load_tokenizer("detokenize", model) : NULL;
    if (rc == CLI_OK && !t) rc = CLI_DATA_ERROR;
    if (rc == CLI_OK) {
        size_t out_len;
        char *out = NULL;
        if (attn_tokenizer_decode(t, ids, n, flags, NULL, 0, &out_len) != ATTN_OK ||
            !(out = malloc(out_len + 1)) ||
            attn_tokenizer_decode(t, ids, n, flags, out, out_len + 1, &out_len) != ATTN_OK)
            rc = cli_data_error("detokenize", "%s", out || out_len == 0 ? attn_last_error() : "out of memory");
        else if (fwrite(out, 1, out_len, stdout) != out_len || fflush(stdout) != 0)
            rc = cli_data_error("detokenize", "writing the text: %s", strerror(errno));
        free(out);
    }
    attn_tokenizer_free(t);
    free(data);
    free(ids);
    return rc;
}
