/*
 * test_chat_cli.c — `attn model chat` and `attn model generate --chat`:
 * the help and the usage errors; through stdin and --messages on a tiny
 * checkpoint that carries a tokenizer and Qwen2.5's chat template
 * (tests/fixtures/chat/tiny-chat, make_chat_model.py), whose prompt ids
 * must be those of transformers' apply_chat_template(tokenize=True);
 * through a pseudo-terminal (script(1)) for the interactive session and
 * its commands; the refusals (a template that refuses the conversation, a
 * model without a template); and on the real Qwen2.5 Instruct model
 * (skipped when absent): a reply that ends at the end of its turn, and
 * Ctrl-C stopping a reply without leaving the session.
 */
#include "models.h"
#include "testutil.h"

#include "attn_decoder.h"
#include "attn_io.h"
#include "attn_npz.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define TINY ATTN_SOURCE_DIR "/tests/fixtures/chat/tiny-chat"
#define TEMPLATES ATTN_SOURCE_DIR "/tests/fixtures/chat"

/* A shell command line (its stdout and stderr) and its exit status. */
static int shell(char **out, const char *fmt, ...) {
    char cmd[16384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    char wrapped[16500];
    snprintf(wrapped, sizeof wrapped, "(%s) 2>&1", cmd);
    FILE *f = popen(wrapped, "r");
    assert_non_null(f);
    size_t cap = 4096, n = 0, got;
    char *buf = malloc(cap);
    while ((got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (cap - n < 2) buf = realloc(buf, cap *= 2);
    }
    buf[n] = 0;
    const int st = pclose(f);
    *out = buf;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static void expect_chat(int status, const char *needle, const char *args) {
    char *out;
    const int st = test_run_cli(&out, "model chat %s", args);
    if (st != status || !strstr(out, needle))
        fail_msg("attn model chat %s: exit %d (expected %d), output:\n%s\n(expected it to contain '%s')", args, st,
                 status, out, needle);
    free(out);
}

/* Line k (0-based) of prompts.txt's "ids" lines or "messages" lines. */
static char *fixture_line(const char *kind, int k) {
    size_t size;
    char *text = test_read_file(TINY "/prompts.txt", &size);
    assert_non_null(text);
    char *result = NULL;
    int seen = 0;
    for (char *save, *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
        if (strncmp(line, kind, strlen(kind)) == 0 && line[strlen(kind)] == ' ' && seen++ == k) {
            result = strdup(line + strlen(kind) + 1);
            break;
        }
    free(text);
    assert_non_null(result);
    return result;
}

/* The ids line of a --print-prompt output (malloc'd). */
static char *printed_ids(const char *out) {
    const char *ids = strstr(out, "--- ids ---\n");
    assert_non_null(ids);
    ids += strlen("--- ids ---\n");
    return strndup(ids, strcspn(ids, "\n"));
}

/* The reply of a --print-prompt output, up to the end of its first line. */
static char *printed_reply(const char *out) {
    const char *r = strstr(out, "--- reply ---\n");
    assert_non_null(r);
    r += strlen("--- reply ---\n");
    return strndup(r, strcspn(r, "\n"));
}

static void help_and_usage_errors(void **state) {
    (void)state;
    expect_chat(0, "usage: attn model chat --model MODEL", "--help");
    expect_chat(0, "/system TEXT", "-h");
    char *list = NULL, *help = NULL;
    assert_int_equal(test_run_cli(&list, "model chat --list-options"), 0);
    assert_int_equal(test_run_cli(&help, "model chat --help"), 0);
    for (char *save, *line = strtok_r(list, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        line[strcspn(line, " ")] = '\0';
        if (!strstr(help, line)) fail_msg("--list-options has %s, which --help never shows", line);
    }
    free(list), free(help);
    expect_chat(2, "--model MODEL is required", "");
    expect_chat(2, "--system and --messages", "--model m --system S --messages m.json");
    expect_chat(2, "--context", "--model m --context 4");
    expect_chat(2, "unknown option '--mesages' (did you mean --messages?)", "--model m --mesages x");
    char *out;
    assert_int_equal(test_run_cli(&out, "model chatt"), 2);
    assert_non_null(strstr(out, "did you mean chat?"));
    free(out);
}

/* stdin is one user message; its prompt ids are transformers'. */
static void stdin_is_one_user_message(void **state) {
    (void)state;
    char *out;
    assert_int_equal(shell(&out, "printf 'Hello!\\n\\n' | %s model chat --model %s --print-prompt --max-tokens 8",
                           ATTN_CLI_PATH, TINY),
                     0);
    char *want = fixture_line("ids", 0), *got = printed_ids(out);
    assert_string_equal(got, want);
    assert_non_null(strstr(out, "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n\n--- ids"));
    /* generate --chat gives the same prompt and, greedy, the same reply. */
    char *gen;
    assert_int_equal(test_run_cli(&gen, "model generate --model %s --chat --text 'Hello!' --print-prompt --max-tokens 8",
                                  TINY),
                     0);
    char *gen_ids = printed_ids(gen), *reply = printed_reply(out), *gen_reply = printed_reply(gen);
    assert_string_equal(gen_ids, want);
    assert_string_equal(gen_reply, reply);
    free(out), free(gen), free(want), free(got), free(gen_ids), free(reply), free(gen_reply);
    expect_chat(2, "stdin is empty", "--model " TINY " < /dev/null");
}

static void messages_file(void **state) {
    (void)state;
    for (int k = 1; k < 3; k++) {
        char *messages = fixture_line("messages", k), *want = fixture_line("ids", k);
        const char *path = test_path("conversation.json");
        assert_int_equal(test_write_file(path, messages, strlen(messages)), 0);
        char *out;
        assert_int_equal(test_run_cli(&out, "model chat --model %s --messages %s --print-prompt --max-tokens 4 < /dev/null",
                                      TINY, path),
                         0);
        char *got = printed_ids(out);
        assert_string_equal(got, want);
        free(out), free(got), free(messages), free(want);
    }
    const char *bad = test_path("bad.json");
    assert_int_equal(test_write_file(bad, "[{\"role\": \"user\"", 16), 0);
    char args[1024];
    snprintf(args, sizeof args, "--model %s --messages %s", TINY, bad);
    expect_chat(1, "messages_json: expected ',' or '}' at byte 16", args);
    snprintf(args, sizeof args, "--model %s --messages %s/absent.json", TINY, test_tmpdir());
    expect_chat(1, "absent.json': cannot open it", args);
}

/* --template, a template's own refusal, and a model without a template. */
static void templates_and_refusals(void **state) {
    (void)state;
    char *out;
    assert_int_equal(shell(&out, "echo hi | %s model chat --model %s --template %s/chatml.jinja --print-prompt "
                                 "--max-tokens 2", ATTN_CLI_PATH, TINY, TEMPLATES),
                     0);
    assert_non_null(strstr(out, "--- prompt: 11 tokens ---\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n\n"));
    free(out);
    assert_int_equal(shell(&out, "echo hi | %s model chat --model %s --template %s/gemma2.jinja --system S", ATTN_CLI_PATH,
                           TINY, TEMPLATES),
                     1);
    assert_non_null(strstr(out, "the template raised an error: System role not supported"));
    free(out);
    /* The checkpoint without tokenizer_config.json carries no template. */
    const char *dir = test_path("no-template");
    assert_int_equal(shell(&out, "mkdir -p %s && cp %s/config.json %s/model.safetensors %s/tokenizer.json %s/", dir, TINY,
                           TINY, TINY, dir),
                     0);
    free(out);
    assert_int_equal(shell(&out, "echo hi | %s model chat --model %s", ATTN_CLI_PATH, dir), 1);
    assert_non_null(strstr(out, "has no chat template"));
    free(out);
    /* Its --template makes it chat. */
    assert_int_equal(shell(&out, "echo hi | %s model chat --model %s --template %s/chatml.jinja --max-tokens 3",
                           ATTN_CLI_PATH, dir, TEMPLATES),
                     0);
    free(out);
    assert_int_equal(shell(&out, "echo hi | %s model chat --model %s --template %s/absent.jinja", ATTN_CLI_PATH, TINY,
                           TEMPLATES),
                     1);
    assert_non_null(strstr(out, "--template"));
    free(out);
    const char *broken = test_path("broken.jinja");
    assert_int_equal(test_write_file(broken, "{% for m in messages %}\n{{ m.content }", 38), 0);
    assert_int_equal(shell(&out, "echo hi | %s model chat --model %s --template %s", ATTN_CLI_PATH, TINY, broken), 1);
    assert_non_null(strstr(out, "line 2, column"));
    free(out);
}

/* The interactive session through a pseudo-terminal: history, /system,
 * /reset, unknown commands, /quit and end of input. */
static void interactive_session(void **state) {
    (void)state;
    char *out;
    if (shell(&out, "command -v script") != 0) {
        free(out);
        skip();
    }
    free(out);
    const char *input = test_path("session.txt");
    const char *lines = "First question\nSecond question\n/nonsense\n/system Be brief.\nThird\n/reset\nFourth\n/quit\n";
    assert_int_equal(test_write_file(input, lines, strlen(lines)), 0);
    assert_int_equal(shell(&out, "script -qec \"exec %s model chat --model %s --print-prompt --max-tokens 4\" /dev/null < %s",
                           ATTN_CLI_PATH, TINY, input),
                     0);
    /* Turn two's prompt holds turn one and its reply. */
    const char *second = strstr(out, "Second question<|im_end|>");
    assert_non_null(second);
    const char *first_in_second = strstr(out, "<|im_start|>user\r\nFirst question<|im_end|>\r\n<|im_start|>assistant\r\n");
    assert_non_null(first_in_second);
    assert_non_null(strstr(out, "(unknown command /nonsense: /reset, /system TEXT, /quit)"));
    assert_non_null(strstr(out, "(system message set; conversation forgotten)"));
    assert_non_null(strstr(out, "<|im_start|>system\r\nBe brief.<|im_end|>\r\n<|im_start|>user\r\nThird<|im_end|>"));
    assert_non_null(strstr(out, "(conversation forgotten)"));
    /* /reset keeps the system message: turn four starts from it. */
    assert_non_null(strstr(out, "<|im_start|>system\r\nBe brief.<|im_end|>\r\n<|im_start|>user\r\nFourth<|im_end|>"));
    free(out);
    /* End of input leaves too. */
    assert_int_equal(test_write_file(input, "Hi\n", 3), 0);
    assert_int_equal(shell(&out, "script -qec \"exec %s model chat --model %s --max-tokens 2\" /dev/null < %s", ATTN_CLI_PATH,
                           TINY, input),
                     0);
    free(out);
}

/* The real Qwen2.5 Instruct: an answer that ends at its turn's end; and
 * Ctrl-C stops a long reply, the session goes on. */
static void real_qwen(void **state) {
    (void)state;
    const char *qwen = test_model_or_skip("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf");
    char *out;
    assert_int_equal(shell(&out, "echo 'What is the capital of France? Answer in one word.' | %s model chat --model %s "
                                 "--max-tokens 40",
                           ATTN_CLI_PATH, qwen),
                     0);
    assert_non_null(strstr(out, "Paris"));
    assert_non_null(strstr(out, "stopped by an end token") || strstr(out, "positions held"));
    free(out);
    if (shell(&out, "command -v script") != 0) {
        free(out);
        return;
    }
    free(out);
    /* The question once the session is up (its banner is printed after
     * the Ctrl-C handler is set), Ctrl-C once the reply has streamed a
     * few hundred bytes, then a question about the conversation once the
     * stop is reported, and /quit after that reply's prompt.  Each wait
     * polls the typescript (bounded at 2 minutes), never a fixed sleep: on
     * a loaded machine the load alone takes seconds.  script runs its
     * command through $SHELL -c: "exec" makes attn the terminal's only
     * foreground process, else a shell that does not exec a lone command
     * (dash, where SHELL is /bin/sh) dies of the Ctrl-C meant for attn. */
    const char *ts = test_path("ctrl-c.typescript");
    assert_int_equal(shell(&out,
                           "T=%s; : > $T; wait_for() { i=0; until eval \"$1\"; do i=$((i+1)); "
                           "[ $i -gt 600 ] && break; sleep 0.2; done; }; "
                           "(wait_for 'grep -q \"Ctrl-C stops a reply\" $T'; "
                           "printf 'Write a very long story about a dragon, at least 2000 words.\\n'; "
                           "s=$(wc -c < $T); wait_for '[ $(wc -c < $T) -gt $((s + 400)) ]'; printf '\\003'; "
                           "wait_for 'grep -q \"stopped (Ctrl-C)\" $T'; printf 'Say OK.\\n'; "
                           "wait_for '[ $(grep -o \"> \" $T | wc -l) -ge 3 ]'; printf '/quit\\n') | "
                           "script -qfec \"exec %s model chat --model %s --max-tokens 600\" $T",
                           ts, ATTN_CLI_PATH, qwen),
                     0);
    assert_non_null(strstr(out, "stopped (Ctrl-C)"));
    assert_non_null(strstr(out, "OK"));
    free(out);
}

/* The sampling flags' refusals and hints, through generate (chat parses
 * the same flags); a stop string ends the text before it. */
static void sampling_flags(void **state) {
    (void)state;
    static const struct {
        const char *args, *says;
    } cases[] = {
        {"--min-p 2", "--min-p must be between 0 and 1, got 2"},
        {"--repetition-penalty 0", "--repetition-penalty is 0: must be > 0"},
        {"--penalty-last-n -2", "--penalty-last-n must be between 0 and 2147483647, got -2"},
        {"--min-pp 0.1", "unknown option '--min-pp' (did you mean --min-p?)"},
    };
    char *out;
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const int st = test_run_cli(&out, "model generate --model %s --text hi %s", TINY, cases[k].args);
        if (st != 2 || !strstr(out, cases[k].says))
            fail_msg("generate %s: exit %d, output:\n%s\n(expected '%s')", cases[k].args, st, out, cases[k].says);
        free(out);
    }
    /* model run's display flag is --show-top; --top-k there is pointed to it. */
    assert_int_equal(test_run_cli(&out, "model run %s --ids 1,2 --top-k 3", TINY), 2);
    assert_non_null(strstr(out, "did you mean --show-top K"));
    free(out);
    assert_int_equal(test_run_cli(&out, "model run %s --ids 1,2 --show-top 2", TINY), 0);
    assert_non_null(strstr(out, "rank        id"));
    free(out);
    /* Greedy with and without a stop string taken from the free-running text:
     * the stopped text is the free one cut before the string's first match. */
    char *free_text;
    assert_int_equal(shell(&free_text, "%s model generate --model %s --text hi --max-tokens 12 --no-stop 2>/dev/null",
                           ATTN_CLI_PATH, TINY),
                     0);
    const char *stop = " le";
    const char *at = strstr(free_text, stop);
    assert_non_null(at);
    assert_int_equal(shell(&out, "%s model generate --model %s --text hi --max-tokens 12 --no-stop --stop '%s' 2>/dev/null",
                           ATTN_CLI_PATH, TINY, stop),
                     0);
    if (strlen(out) != (size_t)(at - free_text) + 1 || strncmp(out, free_text, (size_t)(at - free_text)) != 0)
        fail_msg("--stop '%s': '%s', the free text '%s'", stop, out, free_text);
    free(out), free(free_text);
}

/* Issue 38 item 2: the commands that run a model take a checkpoint as
 * model run does.  trace's cache of the tiny checkpoint against the
 * library's own forward of the same checkpoint (its loader is checked
 * against transformers by test_safetensors_models); map and report write
 * their files; demo loads and runs it until the chapter's own check (苹果 is
 * not one token of this vocabulary) stops it. */
static void every_command_takes_a_checkpoint(void **state) {
    (void)state;
    char *out;
    const char *npz = test_path("trace.npz");
    int st = test_run_cli(&out, "model trace --model %s --ids 5,17,3,9 --hooks blocks.0.hook_resid_post -o %s",
                          TINY, npz);
    if (st != 0) fail_msg("model trace on a checkpoint: exit %d:\n%s", st, out);
    free(out);
    attn_npz *z = NULL;
    attn_array a = {0};
    assert_int_equal(attn_npz_open(npz, &z), ATTN_OK);
    assert_int_equal(attn_npz_read(z, "blocks.0.hook_resid_post", &a), ATTN_OK);
    attn_npz_free(z);
    attn_decoder *m = NULL;
    assert_int_equal(attn_decoder_load_safetensors(TINY, &m), ATTN_OK);
    const attn_decoder_config *c = attn_decoder_get_config(m);
    const int32_t ids[4] = {5, 17, 3, 9};
    float *hidden = malloc((size_t)((c->n_layers + 1) * 4 * c->d_model) * sizeof *hidden);
    attn_decoder_outputs o = ATTN_DECODER_OUTPUTS_INIT;
    o.hidden = hidden;
    assert_int_equal(attn_decoder_forward(m, ids, 4, &o), ATTN_OK);
    assert_int_equal(a.count, 4 * c->d_model);
    const float *got = a.data, *want = hidden + 4 * c->d_model; /* after layer 0 */
    for (int64_t i = 0; i < a.count; i++)
        if (got[i] != want[i]) fail_msg("trace's blocks.0.hook_resid_post[%lld] %g, the forward's %g", (long long)i,
                                        (double)got[i], (double)want[i]);
    free(hidden);
    attn_array_free(&a);
    attn_decoder_free(m);
    const char *png = test_path("map.png"), *html = test_path("report.html");
    if ((st = test_run_cli(&out, "map --model %s --text 'hello world' -o %s", TINY, png)) != 0 ||
        !test_file_exists(png))
        fail_msg("map on a checkpoint: exit %d:\n%s", st, out);
    free(out);
    if ((st = test_run_cli(&out, "report --model %s --text 'hello world' --html %s", TINY, html)) != 0 ||
        !test_file_exists(html))
        fail_msg("report on a checkpoint: exit %d:\n%s", st, out);
    free(out);
    st = test_run_cli(&out, "demo --model %s", TINY);
    if (st != 1 || !strstr(out, "is not one token in this vocabulary"))
        fail_msg("demo on a checkpoint: exit %d:\n%s", st, out);
    free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(help_and_usage_errors),  cmocka_unit_test(stdin_is_one_user_message),
        cmocka_unit_test(messages_file),          cmocka_unit_test(templates_and_refusals),
        cmocka_unit_test(interactive_session),    cmocka_unit_test(real_qwen),
        cmocka_unit_test(sampling_flags),         cmocka_unit_test(every_command_takes_a_checkpoint),
    };
    return cmocka_run_group_tests(tests, NULL, test_group_teardown);
}
