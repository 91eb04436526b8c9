/*
 * chat_parse.c — a chat template's text into a tree (chat.h), as jinja2
 * 3.1's lexer and parser read it under transformers' environment
 * (trim_blocks, lstrip_blocks, the loopcontrols extension).
 *
 * The lexer follows jinja2/lexer.py: text up to the first "{{", "{%" or
 * "{#"; a "-" after the opening strips the whitespace before it, a "+"
 * keeps it, and otherwise (lstrip_blocks) a block or comment tag alone
 * after the whitespace that starts its line takes that whitespace away; a
 * "-" before the closing strips the whitespace after it, and otherwise
 * (trim_blocks) a block or comment tag's "%}" / "#}" eats one newline
 * after it.  Inside a tag: names, strings with Python's escapes, integers,
 * floats, operators; the closing is recognised only where brackets are
 * balanced.  The parser follows jinja2/parser.py's grammar and operator
 * precedence (lowest first): "x if c else y", or, and, not, comparisons
 * and in, + -, ~, * / // %, **, unary - +, then filters (|), tests (is)
 * and calls, then . [] () on a primary.
 *
 * Refused here with their line and column: syntax errors
 * (ATTN_ERR_FORMAT) and what is not implemented (ATTN_ERR_UNSUPPORTED:
 * macros, call and filter blocks, include, import, extends, blocks, with,
 * raw, *args and **kwargs, a filter or test attn does not have, ...).
 */
#include "model/chat.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_DEPTH = 200, MAX_BRACKETS = 256 };

typedef enum tok_kind {
    T_DATA, T_VAR_BEGIN, T_VAR_END, T_BLOCK_BEGIN, T_BLOCK_END, T_NAME, T_STRING, T_INT, T_FLOAT, T_OP, T_EOF
} tok_kind;

/* Operators, by their text. */
typedef enum tok_op {
    K_ADD, K_SUB, K_DIV, K_FLOORDIV, K_MUL, K_MOD, K_POW, K_TILDE, K_LBRACKET, K_RBRACKET, K_LPAREN, K_RPAREN,
    K_LBRACE, K_RBRACE, K_EQ, K_NE, K_GT, K_GTEQ, K_LT, K_LTEQ, K_ASSIGN, K_DOT, K_COLON, K_PIPE, K_COMMA, K_SEMICOLON
} tok_op;

static const char *const op_text[] = {"+", "-", "/", "//", "*", "%", "**", "~", "[", "]", "(", ")", "{", "}",
                                      "==", "!=", ">", ">=", "<", "<=", "=", ".", ":", "|", ",", ";"};

typedef struct token {
    uint8_t kind; /* tok_kind */
    uint8_t op;   /* tok_op */
    uint32_t pos;
    const char *s; /* T_DATA, T_NAME, T_STRING (decoded) */
    size_t n;
    int64_t i;
    double f;
} token;

typedef struct parser {
    chat_env *env;
    const char *src;
    size_t len;
    token *toks;
    size_t n_toks, cap_toks, at;
    int depth;      /* recursion, against stack exhaustion    */
    int loop_depth; /* for loops around the statement parsed  */
} parser;

/* ------------------------------------------------------------ the lexer */

static void push(parser *p, token t) {
    if (p->n_toks == p->cap_toks) {
        const size_t cap = p->cap_toks ? p->cap_toks * 2 : 256;
        token *grown = chat_alloc(p->env, cap * sizeof *grown);
        if (p->n_toks) memcpy(grown, p->toks, p->n_toks * sizeof *grown);
        p->toks = grown;
        p->cap_toks = cap;
    }
    p->toks[p->n_toks++] = t;
}

static bool is_digit(char c) { return c >= '0' && c <= '9'; }
static bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

/* Bytes of whitespace (Python's \s) at src[i]. */
static size_t space_at(const parser *p, size_t i) {
    size_t j = i;
    while (j < p->len) {
        size_t k = j;
        if (!chat_is_space(chat_utf8_next(p->src, &k))) break;
        j = k;
    }
    return j - i;
}

/* (\d+_)*\d+ at i: its end, or i if none. */
static size_t digits_at(const parser *p, size_t i) {
    size_t j = i;
    while (j < p->len && is_digit(p->src[j])) {
        while (j < p->len && is_digit(p->src[j])) j++;
        if (j + 1 < p->len && p->src[j] == '_' && is_digit(p->src[j + 1])) j++;
    }
    return j;
}

/* jinja2's float_re at i: digits, then ".digits" and/or "e[+-]digits". */
static size_t float_at(const parser *p, size_t i) {
    if (i > 0 && p->src[i - 1] == '.') return i;
    const size_t int_end = digits_at(p, i);
    if (int_end == i) return i;
    size_t j = int_end;
    bool fraction = false;
    if (j < p->len && p->src[j] == '.') {
        const size_t f = digits_at(p, j + 1);
        if (f > j + 1) j = f, fraction = true;
    }
    if (j < p->len && (p->src[j] == 'e' || p->src[j] == 'E')) {
        size_t k = j + 1;
        if (k < p->len && (p->src[k] == '+' || p->src[k] == '-')) k++;
        const size_t e = digits_at(p, k);
        if (e > k) return e;
    }
    return fraction ? j : i;
}

/* The text of src[i .. end) without underscores, in buf. */
static const char *plain_number(const parser *p, size_t i, size_t end, char *buf, size_t size) {
    size_t o = 0;
    for (size_t k = i; k < end && o + 1 < size; k++)
        if (p->src[k] != '_') buf[o++] = p->src[k];
    buf[o] = 0;
    return buf;
}

static size_t integer_at(parser *p, size_t i, int64_t *value) {
    const char *s = p->src;
    int base = 10;
    size_t j = i;
    if (s[i] == '0' && i + 1 < p->len && strchr("bBoOxX", s[i + 1]) && s[i + 1]) {
        base = s[i + 1] == 'b' || s[i + 1] == 'B' ? 2 : s[i + 1] == 'o' || s[i + 1] == 'O' ? 8 : 16;
        j = i + 2;
        const size_t start = j;
        for (;;) {
            size_t k = j;
            if (k < p->len && s[k] == '_') k++;
            const char c = k < p->len ? s[k] : 0;
            const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : 99;
            if (d >= base) break;
            j = k + 1;
        }
        if (j == start) j = i + 1; /* "0" alone, then a name "x..." */
        else {
            char buf[80];
            plain_number(p, start, j, buf, sizeof buf);
            errno = 0;
            const unsigned long long v = strtoull(buf, NULL, base);
            if (errno == ERANGE || v > INT64_MAX || strlen(buf) > 70)
                chat_fail(p->env, ATTN_ERR_UNSUPPORTED, (uint32_t)i, "integers beyond 64 bits are not implemented");
            *value = (int64_t)v;
            return j;
        }
    }
    if (s[i] == '0') {
        j = i + 1;
        while (j < p->len && (s[j] == '0' || (s[j] == '_' && j + 1 < p->len && s[j + 1] == '0'))) j++;
        *value = 0;
        return j;
    }
    j = digits_at(p, i);
    char buf[80];
    plain_number(p, i, j, buf, sizeof buf);
    errno = 0;
    const long long v = strtoll(buf, NULL, 10);
    if (errno == ERANGE || j - i > 70)
        chat_fail(p->env, ATTN_ERR_UNSUPPORTED, (uint32_t)i, "integers beyond 64 bits are not implemented");
    *value = v;
    return j;
}

static int hex_digit(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* A string literal at src[i] (a quote): its end, its value decoded as
 * Python's unicode-escape does (after jinja2's backslashreplace), or i if
 * it is not terminated. */
static size_t string_at(parser *p, size_t i, token *t) {
    const char quote = p->src[i];
    size_t j = i + 1;
    while (j < p->len && p->src[j] != quote) j += p->src[j] == '\\' && j + 1 < p->len ? 2 : 1;
    if (j >= p->len) return i;
    chat_buf b = {0};
    size_t k = i + 1;
    while (k < j) {
        const size_t start = k;
        if (p->src[k] != '\\') {
            while (k < j && p->src[k] != '\\') k++;
            chat_buf_put(p->env, &b, p->src + start, k - start);
            continue;
        }
        k++; /* the backslash; a character follows (the scan above made sure) */
        const unsigned char e = (unsigned char)p->src[k];
        char out[16];
        uint32_t cp = 0;
        int digits = 0;
        if (e >= 0x80) {
            /* A backslash before a non-ASCII character: jinja2 first writes
             * the character as \xNN, \uNNNN or \UNNNNNNNN, so the backslash
             * escapes the one of that escape and the rest is text. */
            size_t m = k;
            const uint32_t c = chat_utf8_next(p->src, &m);
            const int n = c <= 0xFF ? snprintf(out, sizeof out, "\\x%02x", (unsigned)c)
                        : c <= 0xFFFF ? snprintf(out, sizeof out, "\\u%04x", (unsigned)c)
                                      : snprintf(out, sizeof out, "\\U%08x", (unsigned)c);
            chat_buf_put(p->env, &b, out, (size_t)n);
            k = m;
            continue;
        }
        k++;
        switch (e) {
        case '\n': continue; /* a line continuation */
        case '\\': case '\'': case '"': out[0] = (char)e; chat_buf_put(p->env, &b, out, 1); continue;
        case 'a': chat_buf_put(p->env, &b, "\a", 1); continue;
        case 'b': chat_buf_put(p->env, &b, "\b", 1); continue;
        case 'f': chat_buf_put(p->env, &b, "\f", 1); continue;
        case 'n': chat_buf_put(p->env, &b, "\n", 1); continue;
        case 'r': chat_buf_put(p->env, &b, "\r", 1); continue;
        case 't': chat_buf_put(p->env, &b, "\t", 1); continue;
        case 'v': chat_buf_put(p->env, &b, "\v", 1); continue;
        case 'x': digits = 2; break;
        case 'u': digits = 4; break;
        case 'U': digits = 8; break;
        case 'N':
            chat_fail(p->env, ATTN_ERR_UNSUPPORTED, (uint32_t)(k - 2), "\\N{...} escapes are not implemented");
        default:
            if (e >= '0' && e <= '7') {
                cp = (uint32_t)(e - '0');
                for (int n = 1; n < 3 && k < j && p->src[k] >= '0' && p->src[k] <= '7'; n++) cp = cp * 8 + (uint32_t)(p->src[k++] - '0');
                chat_buf_put(p->env, &b, out, chat_utf8_put(cp, out));
                continue;
            }
            out[0] = '\\';
            out[1] = (char)e;
            chat_buf_put(p->env, &b, out, 2);
            continue;
        }
        for (int n = 0; n < digits; n++) {
            const int d = k < j ? hex_digit(p->src[k]) : -1;
            if (d < 0)
                chat_fail(p->env, ATTN_ERR_FORMAT, (uint32_t)start, "truncated \\%cXX escape in a string", e);
            cp = cp << 4 | (uint32_t)d;
            k++;
        }
        if (cp > 0x10FFFF) chat_fail(p->env, ATTN_ERR_FORMAT, (uint32_t)start, "illegal Unicode character in a string");
        if (cp >= 0xD800 && cp <= 0xDFFF)
            chat_fail(p->env, ATTN_ERR_UNSUPPORTED, (uint32_t)start, "a surrogate code point (no UTF-8 for it) is not implemented");
        chat_buf_put(p->env, &b, out, chat_utf8_put(cp, out));
    }
    t->kind = T_STRING;
    t->s = b.p ? b.p : "";
    t->n = b.n;
    return j + 1;
}

static bool starts(const parser *p, size_t i, const char *s) {
    const size_t n = strlen(s);
    return p->len - i >= n && memcmp(p->src + i, s, n) == 0;
}

/* The tokens inside a tag opened at i (after its opening and sign), up to
 * and with its closing; returns the position after it. */
static size_t lex_tag(parser *p, size_t i, bool block, bool *line_starting) {
    char brackets[MAX_BRACKETS];
    int open = 0;
    for (;;) {
        if (i >= p->len)
            chat_fail(p->env, ATTN_ERR_FORMAT, (uint32_t)i, "unexpected end of template, expected '%s'", block ? "%}" : "}}");
        if (!open) {
            size_t after = 0;
            if (block && starts(p, i, "+%}")) after = i + 3;
            else if (starts(p, i, block ? "-%}" : "-}}")) after = i + 3 + space_at(p, i + 3);
            else if (starts(p, i, block ? "%}" : "}}")) after = i + 2 + (block && i + 2 < p->len && p->src[i + 2] == '\n');
            if (after) {
                push(p, (token){.kind = block ? T_BLOCK_END : T_VAR_END, .pos = (uint32_t)i});
                *line_starting = p->src[after - 1] == '\n';
                return after;
            }
        }
        const size_t space = space_at(p, i);
        if (space) {
            i += space;
            continue;
        }
        token t = {.pos = (uint32_t)i};
        const char c = p->src[i];
        size_t end;
        if (is_digit(c) && (end = float_at(p, i)) > i) {
            char buf[80];
            if (end - i > 70) chat_fail(p->env, ATTN_ERR_FORMAT, (uint32_t)i, "a number of more than 70 characters");
            t.kind = T_FLOAT;
            t.f = strtod(plain_number(p, i, end, buf, sizeof buf), NULL);
        } else if (is_digit(c)) {
            t.kind = T_INT;
            end = integer_at(p, i, &t.i);
        } else if (is_name_start(c)) {
            end = i;
            while (end < p->len && is_name_char(p->src[end])) end++;
            if (end < p->len && (unsigned char)p->src[end] >= 0x80)
                chat_fail(p->env, ATTN_ERR_UNSUPPORTED, (uint32_t)i, "names with non-ASCII characters are not implemented");
            t.kind = T_NAME;
            t.s = p->src + i;
            t.n = end - i;
        } else if ((c == '\'' || c == '"') && (end = string_at(p, i, &t)) > i) {
            /* t is the string */
        } else {
            int op = -1;
            for (int k = 0; k < (int)(sizeof op_text / sizeof op_text[0]); k++)
                if (starts(p, i, op_text[k]) && (op < 0 || strlen(op_text[k]) > strlen(op_text[op]))) op = k;
            if (op < 0) {
                if ((unsigned char)c >= 0x80)
                    chat_fail(p->env, ATTN_ERR_FORMAT, (uint32_t)i, "unexpected character in a tag");
                chat_fail(p->env, ATTN_ERR_FORMAT, (uint32_t)i, "unexpected char '%c'", c);
            }
            t.kind = T_OP;
            t.op = (uint8_t)op;
            end = i + strlen(op_text[op]);
            if (op == K_LPAREN || op == K_LBRACKET || op == K_LBRACE) {
                if (open == MAX_BRACKETS)
                    chat_fail(p->env, ATTN_ERR_BUDGET, (uint32_t)i, "more than %d brackets open", MAX_BRACKETS);
                brackets[open++] = op == K_LPAREN ? ')' : op == K_LBRACKET ? ']' : '}';
            } else if (op == K_RPAREN || op == K_RBRACKET || op == K_RBRACE) {
                if (!open) chat_fail(p->env, ATTN_ERR_FORMAT, (uint32_t)i, "unexpected '%c'", c);
                if (brackets[open - 1] != c)
                    chat_fail(p->env, ATTN_ERR_FORMAT, (uint32_t)i, "unexpected '%c', expected '%c'", c, brackets[open - 1]);
                open--;
            }
        }
        push(p, t);
        i = end;
    }
}

/* The tokens of the whole template (jinja2's Lexer.tokeniter). */
static void lex(parser *p) {
    size_t i = 0;
    bool line_starting = true;
    while (i < p->len) {
        /* The next "{{", "{%" or "{#". */
        size_t q = i;
        while (q + 1 < p->len && !(p->src[q] == '{' && (p->src[q + 1] == '{' || p->src[q + 1] == '%' || p->src[q + 1] == '#'))) q++;
        if (q + 1 >= p->len) {
            push(p, (token){.kind = T_DATA, .pos = (uint32_t)i, .s = p->src + i, .n = p->len - i});
            break;
        }
        const char kind = p->src[q + 1];
        const char sign = q + 2 < p->len && (p->src[q + 2] == '-' || p->src[q + 2] == '+') ? p->src[q + 2] : 0;
        size_t text_len = q - i;
        if (sign == '-') {
            text_len = chat_rstrip_len(p->src + i, text_len);
        } else if (sign != '+' && kind != '{') {
            /* lstrip_blocks: whitespace alone between the line's start and the tag. */
            size_t l = q;
            while (l > i && p->src[l - 1] != '\n') l--;
            if ((l > i || line_starting) && l < q && space_at(p, l) == q - l) text_len = l - i;
        }
        if (text_len) push(p, (token){.kind = T_DATA, .pos = (uint32_t)i, .s = p->src + i, .n = text_len});
        i = q + 2 + (sign ? 1 : 0);
        line_starting = false;
        if (kind == '#') {
            size_t r = i;
            while (r + 1 < p->len && !(p->src[r] == '#' && p->src[r + 1] == '}')) r++;
            if (r + 1 >= p->len) chat_fail(p->env, ATTN_ERR_FORMAT, (uint32_t)q, "missing end of comment tag");
            const char end_sign = r > i ? p->src[r - 1] : 0;
            size_t after = r + 2;
            if (end_sign == '-') after += space_at(p, after);
            else if (end_sign != '+' && after < p->len && p->src[after] == '\n') after++;
            line_starting = p->src[after - 1] == '\n';
            i = after;
            continue;
        }
        if (kind == '%') {
            /* {% raw %} ... {% endraw %} */
            size_t k = i + space_at(p, i);
            if (starts(p, k, "raw") && (k + 3 >= p->len || !is_name_char(p->src[k + 3])))
                chat_fail(p->env, ATTN_ERR_UNSUPPORTED, (uint32_t)q, "the tag 'raw' is not implemented");
        }
        push(p, (token){.kind = kind == '%' ? T_BLOCK_BEGIN : T_VAR_BEGIN, .pos = (uint32_t)q});
        i = lex_tag(p, i, kind == '%', &line_starting);
    }
    push(p, (token){.kind = T_EOF, .pos = (uint32_t)p->len});
}

/* ------------------------------------------------------------ the parser */

static const token *cur(const parser *p) { return &p->toks[p->at]; }
static const token *look(const parser *p) { return &p->toks[p->at + 1 < p->n_toks ? p->at + 1 : p->at]; }
static const token *advance(parser *p) {
    const token *t = cur(p);
    if (p->at + 1 < p->n_toks) p->at++;
    return t;
}

static bool is_name(const token *t, const char *name) {
    return t->kind == T_NAME && t->n == strlen(name) && memcmp(t->s, name, t->n) == 0;
}
static bool is_op(const token *t, tok_op op) { return t->kind == T_OP && t->op == op; }

static const char *describe(const token *t, char *buf, size_t size) {
    switch ((tok_kind)t->kind) {
    case T_DATA: return "template data / text";
    case T_VAR_BEGIN: return "begin of print statement";
    case T_VAR_END: return "end of print statement";
    case T_BLOCK_BEGIN: return "begin of statement block";
    case T_BLOCK_END: return "end of statement block";
    case T_NAME: snprintf(buf, size, "%.*s", (int)(t->n < 60 ? t->n : 60), t->s); return buf;
    case T_STRING: return "string";
    case T_INT: return "integer";
    case T_FLOAT: return "float";
    case T_OP: return op_text[t->op];
    case T_EOF: return "end of template";
    }
    return "?";
}

#if defined(__GNUC__)
__attribute__((noreturn))
#endif
static void unexpected(parser *p, const token *t, const char *expected) {
    char buf[64];
    if (expected)
        chat_fail(p->env, ATTN_ERR_FORMAT, t->pos, "expected '%s', got '%s'", expected, describe(t, buf, sizeof buf));
    chat_fail(p->env, ATTN_ERR_FORMAT, t->pos, "unexpected '%s'", describe(t, buf, sizeof buf));
}

static void expect_kind(parser *p, tok_kind kind, const char *what) {
    if (cur(p)->kind != kind) unexpected(p, cur(p), what);
    advance(p);
}
static void expect_op(parser *p, tok_op op) {
    if (!is_op(cur(p), op)) unexpected(p, cur(p), op_text[op]);
    advance(p);
}
static const token *expect_name(parser *p) {
    if (cur(p)->kind != T_NAME) unexpected(p, cur(p), "a name");
    return advance(p);
}

static void enter(parser *p) {
    if (++p->depth > MAX_DEPTH)
        chat_fail(p->env, ATTN_ERR_BUDGET, cur(p)->pos, "more than %d levels of nesting", MAX_DEPTH);
}

static chat_expr *node(parser *p, chat_expr_kind kind, uint32_t pos) {
    chat_expr *e = chat_alloc(p->env, sizeof *e);
    e->kind = (uint8_t)kind;
    e->pos = pos;
    return e;
}

/* A growing array of pointers in the arena. */
typedef struct ptr_vec {
    void **items;
    size_t n, cap;
} ptr_vec;
static void vec_push(parser *p, ptr_vec *v, void *item) {
    if (v->n == v->cap) {
        const size_t cap = v->cap ? v->cap * 2 : 4;
        void **grown = chat_alloc(p->env, cap * sizeof *grown);
        if (v->n) memcpy(grown, v->items, v->n * sizeof *grown);
        v->items = grown;
        v->cap = cap;
    }
    v->items[v->n++] = item;
}

static chat_expr *parse_expression(parser *p, bool with_condexpr);
static chat_expr *parse_tuple(parser *p, bool with_condexpr, const char *extra_end, bool explicit_parens);
static chat_expr *parse_unary(parser *p, bool with_filter);
static chat_expr *parse_primary(parser *p);

/* (args, name=value, ...) into e's items and keywords. */
static void parse_call_args(parser *p, chat_expr *e) {
    const token *open = cur(p);
    expect_op(p, K_LPAREN);
    ptr_vec args = {0}, names = {0}, values = {0};
    bool comma = false;
    while (!is_op(cur(p), K_RPAREN)) {
        if (comma) {
            expect_op(p, K_COMMA);
            if (is_op(cur(p), K_RPAREN)) break;
        }
        if (is_op(cur(p), K_MUL) || is_op(cur(p), K_POW))
            chat_fail(p->env, ATTN_ERR_UNSUPPORTED, cur(p)->pos, "*args and **kwargs in calls are not implemented");
        if (cur(p)->kind == T_NAME && is_op(look(p), K_ASSIGN)) {
            vec_push(p, &names, (void *)advance(p));
            advance(p);
            vec_push(p, &values, parse_expression(p, true));
        } else {
            if (names.n)
                chat_fail(p->env, ATTN_ERR_FORMAT, open->pos, "invalid syntax for function call expression");
            vec_push(p, &args, parse_expression(p, true));
        }
        comma = true;
    }
    expect_op(p, K_RPAREN);
    e->items = (chat_expr **)args.items;
    e->n_items = args.n;
    e->n_keywords = names.n;
    e->keywords = names.n ? chat_alloc(p->env, names.n * sizeof *e->keywords) : NULL;
    for (size_t k = 0; k < names.n; k++) {
        const token *t = names.items[k];
        for (size_t j = 0; j < k; j++)
            if (e->keywords[j].name_len == t->n && memcmp(e->keywords[j].name, t->s, t->n) == 0)
                chat_fail(p->env, ATTN_ERR_FORMAT, t->pos, "keyword argument repeated: %.*s", (int)t->n, t->s);
        e->keywords[k] = (chat_keyword){t->s, t->n, values.items[k]};
    }
}

/* A filter's or test's name, dotted names joined (jinja2 allows "a.b"). */
static const token *builtin_name(parser *p, size_t *len) {
    const token *t = expect_name(p);
    *len = t->n;
    while (is_op(cur(p), K_DOT)) {
        advance(p);
        const token *more = expect_name(p);
        *len = (size_t)(more->s + more->n - t->s);
    }
    return t;
}

static chat_expr *parse_filter(parser *p, chat_expr *subject) {
    while (is_op(cur(p), K_PIPE)) {
        advance(p);
        size_t len;
        const token *t = builtin_name(p, &len);
        const int f = chat_filter_lookup(t->s, len);
        if (f == -1)
            chat_fail(p->env, ATTN_ERR_UNSUPPORTED, t->pos, "the filter '%.*s' is not implemented", (int)len, t->s);
        if (f < 0) chat_fail(p->env, ATTN_ERR_FORMAT, t->pos, "no filter named '%.*s'", (int)len, t->s);
        chat_expr *e = node(p, CE_FILTER, t->pos);
        e->a = subject;
        e->name = t->s;
        e->name_len = len;
        e->builtin = f;
        if (is_op(cur(p), K_LPAREN)) parse_call_args(p, e);
        subject = e;
    }
    return subject;
}

static chat_expr *parse_test(parser *p, chat_expr *subject) {
    const token *is = advance(p);
    bool negated = false;
    if (is_name(cur(p), "not")) {
        advance(p);
        negated = true;
    }
    size_t len;
    const token *t = builtin_name(p, &len);
    const int test = chat_test_lookup(t->s, len);
    if (test == -1) chat_fail(p->env, ATTN_ERR_UNSUPPORTED, t->pos, "the test '%.*s' is not implemented", (int)len, t->s);
    if (test < 0) chat_fail(p->env, ATTN_ERR_FORMAT, t->pos, "no test named '%.*s'", (int)len, t->s);
    chat_expr *e = node(p, CE_TEST, is->pos);
    e->a = subject;
    e->name = t->s;
    e->name_len = len;
    e->builtin = test;
    const token *c = cur(p);
    if (is_op(c, K_LPAREN)) {
        parse_call_args(p, e);
    } else if ((c->kind == T_NAME || c->kind == T_STRING || c->kind == T_INT || c->kind == T_FLOAT ||
                is_op(c, K_LBRACKET) || is_op(c, K_LBRACE)) &&
               !is_name(c, "else") && !is_name(c, "or") && !is_name(c, "and")) {
        if (is_name(c, "is")) chat_fail(p->env, ATTN_ERR_FORMAT, c->pos, "you cannot chain multiple tests with is");
        /* One argument without parentheses: "x is divisibleby 3". */
        chat_expr *arg = parse_primary(p);
        e->items = chat_alloc(p->env, sizeof *e->items);
        e->items[0] = arg;
        e->n_items = 1;
    }
    if (negated) {
        chat_expr *not = node(p, CE_NOT, is->pos);
        not->a = e;
        return not;
    }
    return e;
}

/* a[...]: an index, a slice, or several (a tuple). */
static chat_expr *parse_subscribed(parser *p) {
    const uint32_t pos = cur(p)->pos;
    chat_expr *parts[3] = {NULL, NULL, NULL};
    if (!is_op(cur(p), K_COLON)) {
        chat_expr *e = parse_expression(p, true);
        if (!is_op(cur(p), K_COLON)) return e;
        parts[0] = e;
    }
    advance(p); /* the first colon */
    if (!is_op(cur(p), K_COLON) && !is_op(cur(p), K_RBRACKET) && !is_op(cur(p), K_COMMA))
        parts[1] = parse_expression(p, true);
    if (is_op(cur(p), K_COLON)) {
        advance(p);
        if (!is_op(cur(p), K_RBRACKET) && !is_op(cur(p), K_COMMA)) parts[2] = parse_expression(p, true);
    }
    chat_expr *s = node(p, CE_SLICE, pos);
    s->a = parts[0];
    s->b = parts[1];
    s->c = parts[2];
    return s;
}

static chat_expr *parse_postfix(parser *p, chat_expr *e) {
    for (;;) {
        const token *t = cur(p);
        if (is_op(t, K_DOT)) {
            advance(p);
            const token *attr = advance(p);
            if (attr->kind == T_NAME) {
                chat_expr *g = node(p, CE_GETATTR, t->pos);
                g->a = e;
                g->name = attr->s;
                g->name_len = attr->n;
                e = g;
            } else if (attr->kind == T_INT) {
                chat_expr *g = node(p, CE_GETITEM, t->pos);
                g->a = e;
                g->b = node(p, CE_CONST, attr->pos);
                g->b->value = chat_int(attr->i);
                e = g;
            } else {
                chat_fail(p->env, ATTN_ERR_FORMAT, attr->pos, "expected name or number");
            }
        } else if (is_op(t, K_LBRACKET)) {
            advance(p);
            ptr_vec args = {0};
            while (!is_op(cur(p), K_RBRACKET)) {
                if (args.n) expect_op(p, K_COMMA);
                vec_push(p, &args, parse_subscribed(p));
            }
            expect_op(p, K_RBRACKET);
            if (!args.n) chat_fail(p->env, ATTN_ERR_FORMAT, t->pos, "expected an expression in []");
            chat_expr *g = node(p, CE_GETITEM, t->pos);
            g->a = e;
            if (args.n == 1) {
                g->b = args.items[0];
            } else {
                g->b = node(p, CE_TUPLE, t->pos);
                g->b->items = (chat_expr **)args.items;
                g->b->n_items = args.n;
            }
            e = g;
        } else if (is_op(t, K_LPAREN)) {
            chat_expr *c = node(p, CE_CALL, e->pos); /* messages name the callee's place */
            c->a = e;
            parse_call_args(p, c);
            e = c;
        } else {
            return e;
        }
    }
}

static chat_expr *parse_filter_expr(parser *p, chat_expr *e) {
    for (;;) {
        const token *t = cur(p);
        if (is_op(t, K_PIPE)) e = parse_filter(p, e);
        else if (is_name(t, "is")) e = parse_test(p, e);
        else if (is_op(t, K_LPAREN)) {
            chat_expr *c = node(p, CE_CALL, e->pos);
            c->a = e;
            parse_call_args(p, c);
            e = c;
        } else return e;
    }
}

static chat_expr *parse_list(parser *p) {
    const token *open = advance(p);
    ptr_vec items = {0};
    while (!is_op(cur(p), K_RBRACKET)) {
        if (items.n) expect_op(p, K_COMMA);
        if (is_op(cur(p), K_RBRACKET)) break;
        vec_push(p, &items, parse_expression(p, true));
    }
    expect_op(p, K_RBRACKET);
    chat_expr *e = node(p, CE_LIST, open->pos);
    e->items = (chat_expr **)items.items;
    e->n_items = items.n;
    return e;
}

static chat_expr *parse_dict(parser *p) {
    const token *open = advance(p);
    ptr_vec items = {0};
    while (!is_op(cur(p), K_RBRACE)) {
        if (items.n) expect_op(p, K_COMMA);
        if (is_op(cur(p), K_RBRACE)) break;
        vec_push(p, &items, parse_expression(p, true));
        expect_op(p, K_COLON);
        vec_push(p, &items, parse_expression(p, true));
    }
    expect_op(p, K_RBRACE);
    chat_expr *e = node(p, CE_DICT, open->pos);
    e->items = (chat_expr **)items.items;
    e->n_items = items.n;
    return e;
}

static chat_expr *parse_primary(parser *p) {
    enter(p);
    const token *t = cur(p);
    chat_expr *e;
    if (t->kind == T_NAME) {
        advance(p);
        e = node(p, CE_CONST, t->pos);
        if (is_name(t, "true") || is_name(t, "True")) e->value = chat_bool(true);
        else if (is_name(t, "false") || is_name(t, "False")) e->value = chat_bool(false);
        else if (is_name(t, "none") || is_name(t, "None")) e->value = chat_none();
        else {
            e->kind = CE_NAME;
            e->name = t->s;
            e->name_len = t->n;
        }
    } else if (t->kind == T_STRING) {
        /* Adjacent strings are one: 'a' "b" is "ab". */
        chat_buf b = {0};
        while (cur(p)->kind == T_STRING) {
            chat_buf_put(p->env, &b, cur(p)->s, cur(p)->n);
            advance(p);
        }
        e = node(p, CE_CONST, t->pos);
        e->value = chat_str(b.p ? b.p : "", b.n);
    } else if (t->kind == T_INT || t->kind == T_FLOAT) {
        advance(p);
        e = node(p, CE_CONST, t->pos);
        e->value = t->kind == T_INT ? chat_int(t->i) : chat_float(t->f);
    } else if (is_op(t, K_LPAREN)) {
        advance(p);
        e = parse_tuple(p, true, NULL, true);
        expect_op(p, K_RPAREN);
    } else if (is_op(t, K_LBRACKET)) {
        e = parse_list(p);
    } else if (is_op(t, K_LBRACE)) {
        e = parse_dict(p);
    } else {
        unexpected(p, t, NULL);
    }
    p->depth--;
    return e;
}

static chat_expr *parse_unary(parser *p, bool with_filter) {
    enter(p);
    const token *t = cur(p);
    chat_expr *e;
    if (is_op(t, K_SUB) || is_op(t, K_ADD)) {
        advance(p);
        e = node(p, is_op(t, K_SUB) ? CE_NEG : CE_POS, t->pos);
        e->a = parse_unary(p, false);
    } else {
        e = parse_primary(p);
    }
    e = parse_postfix(p, e);
    if (with_filter) e = parse_filter_expr(p, e);
    p->depth--;
    return e;
}

static chat_expr *binary(parser *p, chat_op op, uint32_t pos, chat_expr *a, chat_expr *b) {
    chat_expr *e = node(p, CE_BINARY, pos);
    e->op = (uint8_t)op;
    e->a = a;
    e->b = b;
    return e;
}

static chat_expr *parse_pow(parser *p) {
    chat_expr *e = parse_unary(p, true);
    while (is_op(cur(p), K_POW)) {
        const uint32_t pos = advance(p)->pos;
        e = binary(p, OP_POW, pos, e, parse_unary(p, true));
    }
    return e;
}

static chat_expr *parse_math2(parser *p) {
    chat_expr *e = parse_pow(p);
    for (;;) {
        const token *t = cur(p);
        chat_op op;
        if (is_op(t, K_MUL)) op = OP_MUL;
        else if (is_op(t, K_DIV)) op = OP_DIV;
        else if (is_op(t, K_FLOORDIV)) op = OP_FLOORDIV;
        else if (is_op(t, K_MOD)) op = OP_MOD;
        else return e;
        advance(p);
        e = binary(p, op, t->pos, e, parse_pow(p));
    }
}

static chat_expr *parse_concat(parser *p) {
    chat_expr *first = parse_math2(p);
    if (!is_op(cur(p), K_TILDE)) return first;
    ptr_vec parts = {0};
    vec_push(p, &parts, first);
    const uint32_t pos = cur(p)->pos;
    while (is_op(cur(p), K_TILDE)) {
        advance(p);
        vec_push(p, &parts, parse_math2(p));
    }
    chat_expr *e = node(p, CE_CONCAT, pos);
    e->items = (chat_expr **)parts.items;
    e->n_items = parts.n;
    return e;
}

static chat_expr *parse_math1(parser *p) {
    chat_expr *e = parse_concat(p);
    while (is_op(cur(p), K_ADD) || is_op(cur(p), K_SUB)) {
        const token *t = advance(p);
        e = binary(p, t->op == K_ADD ? OP_ADD : OP_SUB, t->pos, e, parse_concat(p));
    }
    return e;
}

static chat_expr *parse_compare(parser *p) {
    const uint32_t pos = cur(p)->pos;
    chat_expr *first = parse_math1(p);
    ptr_vec operands = {0};
    uint8_t ops[64];
    for (;;) {
        const token *t = cur(p);
        chat_op op;
        if (is_op(t, K_EQ)) op = OP_EQ;
        else if (is_op(t, K_NE)) op = OP_NE;
        else if (is_op(t, K_LT)) op = OP_LT;
        else if (is_op(t, K_LTEQ)) op = OP_LE;
        else if (is_op(t, K_GT)) op = OP_GT;
        else if (is_op(t, K_GTEQ)) op = OP_GE;
        else if (is_name(t, "in")) op = OP_IN;
        else if (is_name(t, "not") && is_name(look(p), "in")) {
            advance(p);
            op = OP_NOT_IN;
        } else break;
        advance(p);
        if (operands.n == sizeof ops)
            chat_fail(p->env, ATTN_ERR_BUDGET, t->pos, "more than %zu comparisons in a chain", sizeof ops);
        ops[operands.n] = (uint8_t)op;
        vec_push(p, &operands, parse_math1(p));
    }
    if (!operands.n) return first;
    chat_expr *e = node(p, CE_COMPARE, pos);
    e->a = first;
    e->items = (chat_expr **)operands.items;
    e->n_items = operands.n;
    e->ops = chat_alloc(p->env, operands.n);
    memcpy(e->ops, ops, operands.n);
    return e;
}

static chat_expr *parse_not(parser *p) {
    if (is_name(cur(p), "not")) {
        enter(p);
        chat_expr *e = node(p, CE_NOT, advance(p)->pos);
        e->a = parse_not(p);
        p->depth--;
        return e;
    }
    return parse_compare(p);
}

static chat_expr *parse_and(parser *p) {
    chat_expr *e = parse_not(p);
    while (is_name(cur(p), "and")) {
        chat_expr *a = node(p, CE_AND, advance(p)->pos);
        a->a = e;
        a->b = parse_not(p);
        e = a;
    }
    return e;
}

static chat_expr *parse_or(parser *p) {
    chat_expr *e = parse_and(p);
    while (is_name(cur(p), "or")) {
        chat_expr *o = node(p, CE_OR, advance(p)->pos);
        o->a = e;
        o->b = parse_and(p);
        e = o;
    }
    return e;
}

static chat_expr *parse_condexpr(parser *p) {
    enter(p);
    chat_expr *e = parse_or(p);
    while (is_name(cur(p), "if")) {
        chat_expr *c = node(p, CE_COND, advance(p)->pos);
        c->b = e;
        c->a = parse_or(p);
        if (is_name(cur(p), "else")) {
            advance(p);
            c->c = parse_condexpr(p);
        }
        e = c;
    }
    p->depth--;
    return e;
}

static chat_expr *parse_expression(parser *p, bool with_condexpr) {
    return with_condexpr ? parse_condexpr(p) : parse_or(p);
}

static bool tuple_end(const parser *p, const char *extra_end) {
    const token *t = cur(p);
    return t->kind == T_VAR_END || t->kind == T_BLOCK_END || is_op(t, K_RPAREN) || (extra_end && is_name(t, extra_end));
}

static chat_expr *parse_tuple(parser *p, bool with_condexpr, const char *extra_end, bool explicit_parens) {
    const uint32_t pos = cur(p)->pos;
    ptr_vec args = {0};
    bool is_tuple = false;
    for (;;) {
        if (args.n) expect_op(p, K_COMMA);
        if (tuple_end(p, extra_end)) break;
        vec_push(p, &args, parse_expression(p, with_condexpr));
        if (is_op(cur(p), K_COMMA)) is_tuple = true;
        else break;
    }
    if (!is_tuple) {
        if (args.n) return args.items[0];
        if (!explicit_parens) {
            char buf[64];
            chat_fail(p->env, ATTN_ERR_FORMAT, cur(p)->pos, "expected an expression, got '%s'",
                      describe(cur(p), buf, sizeof buf));
        }
    }
    chat_expr *e = node(p, CE_TUPLE, pos);
    e->items = (chat_expr **)args.items;
    e->n_items = args.n;
    return e;
}

/* ------------------------------------------------------------ statements */

static const char *const unimplemented_tags[] = {"macro", "call", "filter", "include", "import", "from", "extends",
                                                 "block", "with", "autoescape", "print", "generation", "do",
                                                 "trans", "pluralize", "debug", "recursive", NULL};

/* A name, "ns.attr", or names with commas (for k, v in ...). */
static chat_target parse_target(parser *p, bool with_namespace, const char *extra_end) {
    chat_target t = {.pos = cur(p)->pos};
    ptr_vec names = {0};
    for (;;) {
        if (names.n) expect_op(p, K_COMMA);
        if (tuple_end(p, extra_end) || is_op(cur(p), K_ASSIGN) || is_op(cur(p), K_PIPE)) break;
        const token *n = cur(p);
        if (n->kind != T_NAME || is_name(n, "true") || is_name(n, "false") || is_name(n, "none") ||
            is_name(n, "True") || is_name(n, "False") || is_name(n, "None"))
            chat_fail(p->env, ATTN_ERR_FORMAT, n->pos, "can't assign to this target");
        advance(p);
        vec_push(p, &names, (void *)n);
        if (with_namespace && names.n == 1 && is_op(cur(p), K_DOT)) {
            advance(p);
            const token *attr = expect_name(p);
            t.attr = attr->s;
            t.attr_len = attr->n;
            break;
        }
        if (is_op(cur(p), K_COMMA)) t.tuple = true;
        else break;
    }
    if (!names.n) chat_fail(p->env, ATTN_ERR_FORMAT, t.pos, "expected a name to assign to");
    if (t.attr && t.tuple) chat_fail(p->env, ATTN_ERR_UNSUPPORTED, t.pos, "unpacking into a namespace attribute is not implemented");
    t.n = names.n;
    t.names = chat_alloc(p->env, names.n * sizeof *t.names);
    t.name_lens = chat_alloc(p->env, names.n * sizeof *t.name_lens);
    for (size_t k = 0; k < names.n; k++) {
        const token *n = names.items[k];
        t.names[k] = n->s;
        t.name_lens[k] = n->n;
    }
    return t;
}

static chat_body subparse(parser *p, const char *const *end_names);

/* After a tag's header: its closing, then the body up to one of end_names
 * (left current); drop: skip that name too. */
static chat_body parse_statements(parser *p, const char *const *end_names, bool drop) {
    expect_kind(p, T_BLOCK_END, "%}");
    chat_body body = subparse(p, end_names);
    if (cur(p)->kind == T_EOF)
        chat_fail(p->env, ATTN_ERR_FORMAT, cur(p)->pos, "unexpected end of template: the tag '%s' was never closed",
                  end_names[0]);
    if (drop) advance(p);
    return body;
}

static chat_stmt *stmt_new(parser *p, chat_stmt_kind kind, uint32_t pos) {
    chat_stmt *s = chat_alloc(p->env, sizeof *s);
    s->kind = (uint8_t)kind;
    s->pos = pos;
    return s;
}

static chat_stmt *parse_if(parser *p) {
    static const char *const ends[] = {"endif", "elif", "else", NULL};
    static const char *const endif[] = {"endif", NULL};
    chat_stmt *result = stmt_new(p, CS_IF, advance(p)->pos), *s = result;
    for (;;) {
        s->expr = parse_tuple(p, false, NULL, false);
        s->body = parse_statements(p, ends, false);
        const token *t = advance(p);
        if (is_name(t, "elif")) {
            chat_stmt *elif = stmt_new(p, CS_IF, t->pos);
            s->orelse.stmts = chat_alloc(p->env, sizeof *s->orelse.stmts);
            s->orelse.stmts[0] = elif;
            s->orelse.n = 1;
            s = elif;
            continue;
        }
        if (is_name(t, "else")) s->orelse = parse_statements(p, endif, true);
        return result;
    }
}

static chat_stmt *parse_for(parser *p) {
    static const char *const ends[] = {"endfor", "else", NULL};
    static const char *const endfor[] = {"endfor", NULL};
    chat_stmt *s = stmt_new(p, CS_FOR, advance(p)->pos);
    s->target = parse_target(p, false, "in");
    if (!is_name(cur(p), "in")) unexpected(p, cur(p), "in");
    advance(p);
    s->expr = parse_tuple(p, false, "recursive", false);
    if (is_name(cur(p), "if")) {
        advance(p);
        s->filter = parse_expression(p, true);
    }
    if (is_name(cur(p), "recursive"))
        chat_fail(p->env, ATTN_ERR_UNSUPPORTED, cur(p)->pos, "recursive for loops are not implemented");
    p->loop_depth++;
    s->body = parse_statements(p, ends, false);
    p->loop_depth--;
    if (is_name(advance(p), "else")) s->orelse = parse_statements(p, endfor, true);
    return s;
}

static chat_stmt *parse_set(parser *p) {
    static const char *const endset[] = {"endset", NULL};
    chat_stmt *s = stmt_new(p, CS_SET, advance(p)->pos);
    s->target = parse_target(p, true, NULL);
    if (is_op(cur(p), K_ASSIGN)) {
        advance(p);
        s->expr = parse_tuple(p, true, NULL, false);
        return s;
    }
    if (s->target.attr || s->target.n != 1)
        chat_fail(p->env, ATTN_ERR_UNSUPPORTED, s->pos, "a {%% set %%} block into this target is not implemented");
    s->kind = CS_SET_BLOCK;
    s->expr = parse_filter(p, NULL);
    s->body = parse_statements(p, endset, true);
    return s;
}

static chat_stmt *parse_statement(parser *p) {
    const token *t = cur(p);
    if (t->kind != T_NAME) unexpected(p, t, "a tag name");
    enter(p);
    chat_stmt *s;
    if (is_name(t, "if")) s = parse_if(p);
    else if (is_name(t, "for")) s = parse_for(p);
    else if (is_name(t, "set")) s = parse_set(p);
    else if (is_name(t, "break") || is_name(t, "continue")) {
        if (!p->loop_depth)
            chat_fail(p->env, ATTN_ERR_FORMAT, t->pos, "'%.*s' outside a for loop", (int)t->n, t->s);
        s = stmt_new(p, is_name(t, "break") ? CS_BREAK : CS_CONTINUE, advance(p)->pos);
    } else {
        for (const char *const *u = unimplemented_tags; *u; u++)
            if (is_name(t, *u))
                chat_fail(p->env, ATTN_ERR_UNSUPPORTED, t->pos, "the tag '%s' is not implemented", *u);
        chat_fail(p->env, ATTN_ERR_FORMAT, t->pos, "unknown tag '%.*s'", (int)(t->n < 60 ? t->n : 60), t->s);
    }
    p->depth--;
    return s;
}

static chat_body subparse(parser *p, const char *const *end_names) {
    ptr_vec stmts = {0};
    for (;;) {
        const token *t = cur(p);
        if (t->kind == T_EOF) break;
        if (t->kind == T_DATA) {
            chat_stmt *s = stmt_new(p, CS_TEXT, t->pos);
            s->text = t->s;
            s->text_len = t->n;
            vec_push(p, &stmts, s);
            advance(p);
        } else if (t->kind == T_VAR_BEGIN) {
            advance(p);
            chat_stmt *s = stmt_new(p, CS_OUTPUT, t->pos);
            s->expr = parse_tuple(p, true, NULL, false);
            expect_kind(p, T_VAR_END, "}}");
            vec_push(p, &stmts, s);
        } else if (t->kind == T_BLOCK_BEGIN) {
            advance(p);
            bool end = false;
            for (const char *const *e = end_names; e && *e; e++) end |= is_name(cur(p), *e);
            if (end) break;
            vec_push(p, &stmts, parse_statement(p));
            expect_kind(p, T_BLOCK_END, "%}");
        } else {
            unexpected(p, t, NULL);
        }
    }
    return (chat_body){(chat_stmt **)stmts.items, stmts.n};
}

void chat_parse(chat_env *env, chat_body *body) {
    parser p = {.env = env, .src = env->source, .len = env->source_len};
    lex(&p);
    *body = subparse(&p, NULL);
}
