/*
 * test_chat_template.c — attn's chat-template interpreter (attn_chat.h)
 * against Hugging Face transformers' apply_chat_template, string for
 * string: real models' templates (tests/fixtures/chat/NAME.jinja, their
 * sources in SOURCES.txt) on 30+ conversations each, and jinja2's
 * behaviour construct by construct (features.cases), every expected text
 * and every expected error computed by transformers' own rendering code
 * (tests/fixtures/chat/make_chat_fixtures.py).  Then what attn refuses,
 * with the line and column it names, and the budgets.
 */
#include "testutil.h"

#include "attn_chat.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define FIXTURES ATTN_SOURCE_DIR "/tests/fixtures/chat"

static char *read_all(const char *path, size_t *size) {
    char *data = test_read_file(path, size);
    assert_non_null(data);
    return data;
}

/* A line of buf from *at (without its newline), NUL-terminated in place. */
static char *next_line(char *buf, size_t size, size_t *at) {
    if (*at >= size) return NULL;
    char *line = buf + *at;
    char *nl = memchr(line, '\n', size - *at);
    if (!nl) fail_msg("a fixture line without its newline");
    *nl = 0;
    *at = (size_t)(nl - buf) + 1;
    return line;
}

/* Where two texts first differ, shown with a little context. */
static void show_difference(const char *name, const char *id, const char *want, size_t want_n, const char *got,
                            size_t got_n) {
    size_t i = 0;
    while (i < want_n && i < got_n && want[i] == got[i]) i++;
    const size_t from = i > 40 ? i - 40 : 0;
    test_row_failed("%s case %s: differs at byte %zu (want %zu bytes, got %zu)\n  want: %.*s\n  got:  %.*s", name, id, i,
                    want_n, got_n, (int)((want_n - from) < 120 ? want_n - from : 120), want + from,
                    (int)((got_n - from) < 120 ? got_n - from : 120), got + from);
}

/* Renders each case of a .cases file with template t (or, per case, a
 * "template N" given in the file) and compares; returns the cases run. */
static int run_cases(const char *name, const attn_chat_template *fixed) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s.cases", FIXTURES, name);
    size_t size, at = 0;
    char *buf = read_all(path, &size);
    int cases = 0;
    char *line, id[256] = "";
    attn_chat_template *own = NULL;
    while ((line = next_line(buf, size, &at))) {
        if (line[0] == '#' || !line[0]) continue;
        if (strncmp(line, "case ", 5) == 0) {
            snprintf(id, sizeof id, "%s", line + 5);
            attn_chat_template_free(own);
            own = NULL;
            continue;
        }
        if (strncmp(line, "template ", 9) == 0) {
            const size_t n = strtoul(line + 9, NULL, 10);
            assert_true(at + n <= size);
            const attn_status st = attn_chat_template_parse(buf + at, n, &own);
            if (st) test_row_failed("%s case %s: the template does not parse: %s", name, id, attn_last_error());
            at += n + 1;
            continue;
        }
        assert_true(strncmp(line, "context ", 8) == 0);
        const char *context = line + 8;
        char *kind_line = next_line(buf, size, &at);
        assert_non_null(kind_line);
        const attn_chat_template *t = own ? own : fixed;
        const bool expect = strncmp(kind_line, "expect ", 7) == 0;
        char kind[64] = "";
        size_t n;
        if (expect) n = strtoul(kind_line + 7, NULL, 10);
        else assert_int_equal(sscanf(kind_line, "raises %63s %zu", kind, &n), 2);
        assert_true(at + n < size);
        const char *want = buf + at;
        at += n + 1;
        cases++;
        if (!t) continue; /* its template failed to parse: counted above */
        attn_chat_options opt = ATTN_CHAT_OPTIONS_INIT;
        opt.variables_json = context;
        char *text = NULL;
        size_t len = 0;
        const attn_status st = attn_chat_template_render(t, NULL, 0, &opt, &text, &len);
        if (expect) {
            if (st) test_row_failed("%s case %s: refused: %s", name, id, attn_last_error());
            else if (len != n || memcmp(text, want, n) != 0) show_difference(name, id, want, n, text, len);
        } else if (!st) {
            test_row_failed("%s case %s: rendered, but transformers raises %s: %.*s", name, id, kind, (int)n, want);
        } else if (strcmp(kind, "TemplateError") == 0) {
            /* raise_exception: the template's own message, word for word. */
            char message[1024];
            snprintf(message, sizeof message, "%.*s", (int)n, want);
            if (st != ATTN_ERR_INVALID_ARGUMENT || !strstr(attn_last_error(), message))
                test_row_failed("%s case %s: want the template's error '%s', got %d: %s", name, id, message, st,
                                attn_last_error());
        } else if (st != ATTN_ERR_INVALID_ARGUMENT) {
            test_row_failed("%s case %s: want a refusal of the conversation (%s: %.*s), got %d: %s", name, id, kind,
                            (int)n, want, st, attn_last_error());
        }
        free(text);
    }
    attn_chat_template_free(own);
    free(buf);
    return cases;
}

static void models_templates(void **state) {
    (void)state;
    static const char *const names[] = {"qwen2.5", "qwen3", "gemma2", "llama3", "llama3.1", "llama3.2", "smollm2",
                                        "chatml", "mistral-instruct", "phi3.5", "mistral-nemo", "deepseek-r1-qwen",
                                        "multimodal-parts"};
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s.jinja", FIXTURES, names[k]);
        size_t size;
        char *text = read_all(path, &size);
        attn_chat_template *t = NULL;
        if (attn_chat_template_parse(text, size, &t)) {
            test_row_failed("%s: does not parse: %s", names[k], attn_last_error());
            free(text);
            continue;
        }
        const int cases = run_cases(names[k], t);
        if (cases < 30) test_row_failed("%s: %d cases, fewer than 30", names[k], cases);
        attn_chat_template_free(t);
        free(text);
    }
    test_assert_no_row_failed();
}

static void jinja_features(void **state) {
    (void)state;
    const int cases = run_cases("features", NULL);
    assert_true(cases >= 100);
    test_assert_no_row_failed();
}

/* ------------------------------------------------------------ refusals */

static void expect_parse_refusal(const char *source, attn_status status, const char *where, const char *what) {
    attn_chat_template *t = (attn_chat_template *)1;
    const attn_status st = attn_chat_template_parse(source, strlen(source), &t);
    if (st != status || t != NULL || !strstr(attn_last_error(), where) || !strstr(attn_last_error(), what))
        test_row_failed("%.80s: want status %d with '%s' and '%s', got %d: %s", source, status, where, what, st,
                        st ? attn_last_error() : "(parsed)");
    attn_chat_template_free(st ? NULL : t);
}

static void unsupported_constructs_refused_with_their_place(void **state) {
    (void)state;
    expect_parse_refusal("{% macro m() %}x{% endmacro %}", ATTN_ERR_UNSUPPORTED, "line 1, column 4", "'macro' is not implemented");
    expect_parse_refusal("a\nb {% include 'x' %}", ATTN_ERR_UNSUPPORTED, "line 2, column 6", "'include'");
    expect_parse_refusal("{{ x | sort }}", ATTN_ERR_UNSUPPORTED, "line 1, column 8", "the filter 'sort' is not implemented");
    expect_parse_refusal("{{ x is escaped }}", ATTN_ERR_UNSUPPORTED, "line 1, column 9", "the test 'escaped'");
    expect_parse_refusal("{% raw %}{{ x }}{% endraw %}", ATTN_ERR_UNSUPPORTED, "line 1, column 1", "'raw'");
    expect_parse_refusal("{{ f(*args) }}", ATTN_ERR_UNSUPPORTED, "line 1, column 6", "*args");
    expect_parse_refusal("{% for x in y recursive %}{% endfor %}", ATTN_ERR_UNSUPPORTED, "column 15", "recursive");
    expect_parse_refusal("{% generation %}x{% endgeneration %}", ATTN_ERR_UNSUPPORTED, "column 4", "'generation'");
    expect_parse_refusal("{{ 'caf\\N{LATIN SMALL LETTER E WITH ACUTE}' }}", ATTN_ERR_UNSUPPORTED, "column 8", "\\N{");
    expect_parse_refusal("{{ 99999999999999999999 }}", ATTN_ERR_UNSUPPORTED, "column 4", "beyond 64 bits");
    test_assert_no_row_failed();
}

static void syntax_errors_refused_with_their_place(void **state) {
    (void)state;
    expect_parse_refusal("{% if x %}never closed", ATTN_ERR_FORMAT, "line 1", "'endif' was never closed");
    expect_parse_refusal("{{ x }", ATTN_ERR_FORMAT, "line 1, column 6", "unexpected '}'");
    expect_parse_refusal("{{ x ", ATTN_ERR_FORMAT, "line 1", "unexpected end of template");
    expect_parse_refusal("line\n  {{ x + }}", ATTN_ERR_FORMAT, "line 2, column 10", "unexpected 'end of print statement'");
    expect_parse_refusal("{{ (1, 2 }}", ATTN_ERR_FORMAT, "column 10", "unexpected '}'");
    expect_parse_refusal("{% endfor %}", ATTN_ERR_FORMAT, "column 4", "unknown tag 'endfor'");
    expect_parse_refusal("{% break %}", ATTN_ERR_FORMAT, "column 4", "outside a for loop");
    expect_parse_refusal("{{ x | no_such_filter }}", ATTN_ERR_FORMAT, "column 8", "no filter named 'no_such_filter'");
    expect_parse_refusal("{# never closed", ATTN_ERR_FORMAT, "line 1, column 1", "missing end of comment");
    expect_parse_refusal("{{ x ! y }}", ATTN_ERR_FORMAT, "column 6", "unexpected char '!'");
    expect_parse_refusal("\xff{{ x }}", ATTN_ERR_FORMAT, "byte 0", "invalid UTF-8");
    expect_parse_refusal("{{ f(a=1, 2) }}", ATTN_ERR_FORMAT, "column 5", "invalid syntax");
    /* Nesting past the parser's depth is refused, not a stack overflow. */
    char deep[2048];
    size_t n = 0;
    n += (size_t)snprintf(deep, sizeof deep, "{{ ");
    for (int k = 0; k < 250; k++) deep[n++] = '(';
    deep[n++] = '1';
    for (int k = 0; k < 250; k++) deep[n++] = ')';
    snprintf(deep + n, sizeof deep - n, " }}");
    expect_parse_refusal(deep, ATTN_ERR_BUDGET, "column", "levels of nesting");
    n = (size_t)snprintf(deep, sizeof deep, "{{ ");
    for (int k = 0; k < 300; k++) deep[n++] = '[';
    snprintf(deep + n, sizeof deep - n, " }}");
    expect_parse_refusal(deep, ATTN_ERR_BUDGET, "column 260", "more than 256 brackets open");
    n = (size_t)snprintf(deep, sizeof deep, "{{ ");
    for (int k = 0; k < 300; k++) deep[n++] = '-';
    snprintf(deep + n, sizeof deep - n, "1 }}");
    expect_parse_refusal(deep, ATTN_ERR_BUDGET, "column", "levels of nesting");
    test_assert_no_row_failed();
}

static char *render(const char *source, const char *variables, attn_status *status) {
    attn_chat_template *t;
    assert_int_equal(attn_chat_template_parse(source, strlen(source), &t), ATTN_OK);
    attn_chat_options opt = ATTN_CHAT_OPTIONS_INIT;
    opt.variables_json = variables;
    opt.max_steps = 200000;
    opt.max_bytes = 16 << 20;
    char *text = NULL;
    *status = attn_chat_template_render(t, NULL, 0, &opt, &text, NULL);
    attn_chat_template_free(t);
    return text;
}

static void expect_render_refusal(const char *source, const char *variables, attn_status status, const char *what) {
    attn_status st;
    char *text = render(source, variables, &st);
    if (st != status || text || !strstr(attn_last_error(), what))
        test_row_failed("%s: want status %d with '%s', got %d: %s", source, status, what, st, st ? attn_last_error() : text);
    free(text);
}

static void what_only_a_render_finds_is_refused(void **state) {
    (void)state;
    expect_render_refusal("{{ 'a' % 1 }}", NULL, ATTN_ERR_UNSUPPORTED, "column 8: %-formatting");
    expect_render_refusal("{{ 'x'.zfill(3) }}", NULL, ATTN_ERR_UNSUPPORTED, "str.zfill() is not implemented");
    expect_render_refusal("{{ s.upper() }}", "{\"s\": \"\xc4\x9f\"}", ATTN_ERR_UNSUPPORTED, "U+011F");
    expect_render_refusal("{{ [s] }}", "{\"s\": \"\xe4\xb8\xad\"}", ATTN_ERR_UNSUPPORTED, "beyond U+00FF");
    expect_render_refusal("{{ 9223372036854775807 + 1 }}", NULL, ATTN_ERR_UNSUPPORTED, "beyond 64 bits");
    expect_render_refusal("{{ raise_exception('no system role') }}", NULL, ATTN_ERR_INVALID_ARGUMENT,
                          "line 1, column 4: the template raised an error: no system role");
    expect_render_refusal("{{ missing.attr }}", NULL, ATTN_ERR_INVALID_ARGUMENT, "'missing' is undefined");
    expect_render_refusal("{{ 'a' + 1 }}", NULL, ATTN_ERR_INVALID_ARGUMENT, "unsupported operand type(s) for +: 'str' and 'int'");
    expect_render_refusal("{% set l = [1] %}{{ l.append(2) }}", NULL, ATTN_ERR_INVALID_ARGUMENT, "unsafe");
    expect_render_refusal("{{ lipsum() }}", NULL, ATTN_ERR_UNSUPPORTED, "lipsum() is not implemented");
    expect_render_refusal("{{ x }}", "[1]", ATTN_ERR_FORMAT, "must be an object");
    expect_render_refusal("{{ x }}", "{\"x\": \"\\ud800\"}", ATTN_ERR_FORMAT, "lone surrogate");
    expect_render_refusal("{{ x }}", "{\"x\": 1,}", ATTN_ERR_FORMAT, "variables_json: expected a string key at byte 8");
    expect_render_refusal("{{ x }}", "{\"messages\": [\"hi\"]}", ATTN_ERR_INVALID_ARGUMENT, "chat messages should be dicts");
    test_assert_no_row_failed();
}

static void budgets_end_a_runaway_render(void **state) {
    (void)state;
    expect_render_refusal("{% for i in range(100000) %}{% if i %}{% endif %}{% endfor %}", NULL,
                          ATTN_ERR_BUDGET, "more than 200000 steps");
    expect_render_refusal("{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
                          NULL, ATTN_ERR_BUDGET, "memory");
    expect_render_refusal("{{ 'x' * 100000000000 }}", NULL, ATTN_ERR_BUDGET, "memory budget");
    expect_render_refusal("{{ range(1000000) | list }}", NULL, ATTN_ERR_INVALID_ARGUMENT, "MAX_RANGE (100000)");
    test_assert_no_row_failed();
}

/* The struct API: messages as structs, the special tokens, NULL options. */
static void messages_as_structs(void **state) {
    (void)state;
    const char *source = "{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
                         "{% if add_generation_prompt %}<assistant>{% endif %}{{ eos_token is defined }}";
    attn_chat_template *t;
    assert_int_equal(attn_chat_template_parse(source, strlen(source), &t), ATTN_OK);
    const attn_chat_message m[] = {{"system", "S"}, {"user", "你好"}};
    attn_chat_options opt = ATTN_CHAT_OPTIONS_INIT;
    opt.add_generation_prompt = 1;
    opt.bos_token = "<s>";
    char *text;
    size_t len;
    assert_int_equal(attn_chat_template_render(t, m, 2, &opt, &text, &len), ATTN_OK);
    assert_string_equal(text, "<s><system>S<user>你好<assistant>False");
    assert_int_equal(len, strlen(text));
    free(text);
    assert_int_equal(attn_chat_template_render(t, m, 1, NULL, &text, NULL), ATTN_OK);
    assert_string_equal(text, "<system>SFalse");
    free(text);
    const attn_chat_message bad[] = {{"user", "\xc3"}};
    assert_int_equal(attn_chat_template_render(t, bad, 1, NULL, &text, NULL), ATTN_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "invalid UTF-8"));
    assert_null(text);
    assert_int_equal(attn_chat_template_render(NULL, m, 1, NULL, &text, NULL), ATTN_ERR_INVALID_ARGUMENT);
    attn_chat_options zeroed = {0};
    assert_int_equal(attn_chat_template_render(t, m, 1, &zeroed, &text, NULL), ATTN_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(attn_last_error(), "ATTN_CHAT_OPTIONS_INIT"));
    attn_chat_template_free(t);
    attn_chat_template_free(NULL);
}

/* strftime_now is the local time, as transformers' datetime.now().strftime. */
static void strftime_now_is_today(void **state) {
    (void)state;
    attn_status st;
    for (int attempt = 0; attempt < 2; attempt++) {
        char want[64];
        const time_t now = time(NULL);
        struct tm local;
        localtime_r(&now, &local);
        strftime(want, sizeof want, "%d %b %Y %H", &local);
        char *text = render("{{ strftime_now('%d %b %Y %H') }}", NULL, &st);
        assert_int_equal(st, ATTN_OK);
        const bool same = strcmp(text, want) == 0;
        free(text);
        if (same) return;
    }
    fail_msg("strftime_now differs from strftime twice");
}

/* The end ids a checkpoint names: generation_config.json's list first,
 * else config.json's integer; none without either. */
static void checkpoint_end_ids(void **state) {
    (void)state;
    int32_t ids[8];
    int n = -1;
    assert_int_equal(attn_chat_end_ids_from_checkpoint(FIXTURES "/tiny-chat", ids, 8, &n), ATTN_OK);
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], 658);
    const char *dir = test_path("ckpt");
    char path[512];
    snprintf(path, sizeof path, "mkdir -p %s", dir);
    assert_int_equal(system(path), 0);
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    const char *list = "{\"eos_token_id\": [7, 9, 7]}", *text = "{\"eos_token_id\": \"x\"}";
    assert_int_equal(test_write_file(path, list, strlen(list)), 0);
    assert_int_equal(attn_chat_end_ids_from_checkpoint(dir, ids, 8, &n), ATTN_OK);
    assert_int_equal(n, 2);
    assert_int_equal(ids[0], 7);
    assert_int_equal(ids[1], 9);
    assert_int_equal(test_write_file(path, text, strlen(text)), 0);
    assert_int_equal(attn_chat_end_ids_from_checkpoint(dir, ids, 8, &n), ATTN_ERR_FORMAT);
    assert_non_null(strstr(attn_last_error(), "eos_token_id holds a str"));
    snprintf(path, sizeof path, "%s/absent-dir/model.safetensors", test_tmpdir());
    assert_int_equal(attn_chat_end_ids_from_checkpoint(path, ids, 8, &n), ATTN_OK);
    assert_int_equal(n, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(models_templates),
        cmocka_unit_test(jinja_features),
        cmocka_unit_test(unsupported_constructs_refused_with_their_place),
        cmocka_unit_test(syntax_errors_refused_with_their_place),
        cmocka_unit_test(what_only_a_render_finds_is_refused),
        cmocka_unit_test(budgets_end_a_runaway_render),
        cmocka_unit_test(messages_as_structs),
        cmocka_unit_test(strftime_now_is_today),
        cmocka_unit_test(checkpoint_end_ids),
    };
    return cmocka_run_group_tests(tests, NULL, test_group_teardown);
}
