/*
 * chat_value.c — the chat-template interpreter's values (chat.h): the
 * arena they live in, Python's ==, < and truthiness over them, str() and
 * repr() as Python prints them, json.dumps and a JSON reader, and the
 * UTF-8 and whitespace rules of Python's str.
 */
#include "model/chat.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ the arena */

struct chat_block {
    chat_block *next;
    size_t size, used;
    _Alignas(16) unsigned char data[];
};

enum { CHAT_BLOCK_MIN = 64 * 1024 };

void *chat_alloc(chat_env *env, size_t n) {
    chat_arena *a = &env->arena;
    n = (n + 15) & ~(size_t)15;
    if (!n) n = 16;
    chat_block *b = a->head;
    if (!b || b->size - b->used < n) {
        const size_t size = n > CHAT_BLOCK_MIN ? n : CHAT_BLOCK_MIN;
        if (n > SIZE_MAX / 2 || a->held + size > a->limit)
            chat_fail(env, ATTN_ERR_BUDGET, CHAT_NO_POS,
                      "the template needs more than %zu bytes of memory (attn_chat_options.max_bytes)", a->limit);
        b = malloc(sizeof *b + size);
        if (!b) chat_fail(env, ATTN_ERR_OUT_OF_MEMORY, CHAT_NO_POS, "no memory for %zu bytes", size);
        b->size = size;
        b->used = 0;
        b->next = a->head;
        a->head = b;
        a->held += size;
    }
    void *p = b->data + b->used;
    b->used += n;
    memset(p, 0, n);
    return p;
}

void chat_arena_free(chat_arena *a) {
    for (chat_block *b = a->head, *next; b; b = next) {
        next = b->next;
        free(b);
    }
    a->head = NULL;
    a->held = 0;
}

/* line and column (1-based, in characters) of byte pos of the source. */
static void position(const chat_env *env, uint32_t pos, size_t *line, size_t *column) {
    *line = 1;
    *column = 1;
    if (!env->source) return;
    for (size_t i = 0; i < pos && i < env->source_len; i++) {
        const unsigned char c = (unsigned char)env->source[i];
        if (c == '\n') {
            (*line)++;
            *column = 1;
        } else if ((c & 0xC0) != 0x80) {
            (*column)++;
        }
    }
}

void chat_fail(chat_env *env, attn_status status, uint32_t pos, const char *fmt, ...) {
    char message[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    if (pos != CHAT_NO_POS) {
        size_t line, column;
        position(env, pos, &line, &column);
        attn__fail(status, "chat template, line %zu, column %zu: %s", line, column, message);
    } else {
        attn__fail(status, "chat template: %s", message);
    }
    env->status = status;
    longjmp(env->jump, 1);
}

/* ------------------------------------------------------------ the values */

chat_value chat_str_copy(chat_env *env, const char *s, size_t n) {
    char *p = chat_alloc(env, n + 1);
    if (n) memcpy(p, s, n);
    return chat_str(p, n);
}

chat_value chat_undefined(chat_env *env, const char *fmt, ...) {
    char text[256];
    va_list ap;
    va_start(ap, fmt);
    const int n = vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    chat_value v = chat_str_copy(env, text, n < 0 ? 0 : (size_t)n < sizeof text ? (size_t)n : sizeof text - 1);
    v.kind = CV_UNDEFINED;
    return v;
}

void chat_fail_undefined(chat_env *env, uint32_t pos, const chat_value *v) {
    if (v->flags & CV_UNSAFE)
        chat_fail(env, ATTN_ERR_INVALID_ARGUMENT, pos, "%.*s (the sandbox forbids it)", (int)v->n, v->u.s);
    chat_fail(env, ATTN_ERR_INVALID_ARGUMENT, pos, "%.*s", (int)v->n, v->u.s);
}

chat_value chat_list_new(chat_env *env, size_t n, uint8_t flags) {
    chat_list *l = chat_alloc(env, sizeof *l);
    if (n > SIZE_MAX / sizeof(chat_value))
        chat_fail(env, ATTN_ERR_BUDGET, CHAT_NO_POS, "a list of %zu items is too long", n);
    l->items = n ? chat_alloc(env, n * sizeof *l->items) : NULL;
    l->n = n;
    return (chat_value){.kind = CV_LIST, .flags = flags, .u.list = l};
}

chat_value chat_dict_new(chat_env *env, size_t cap) {
    chat_dict *d = chat_alloc(env, sizeof *d);
    if (cap < 4) cap = 4;
    d->cap = cap;
    d->keys = chat_alloc(env, cap * sizeof *d->keys);
    d->key_lens = chat_alloc(env, cap * sizeof *d->key_lens);
    d->values = chat_alloc(env, cap * sizeof *d->values);
    return (chat_value){.kind = CV_DICT, .u.dict = d};
}

chat_value *chat_dict_find(const chat_dict *d, const char *key, size_t key_len) {
    for (size_t i = 0; i < d->n; i++)
        if (d->key_lens[i] == key_len && memcmp(d->keys[i], key, key_len) == 0) return &d->values[i];
    return NULL;
}

void chat_dict_set(chat_env *env, chat_dict *d, const char *key, size_t key_len, chat_value value) {
    chat_value *old = chat_dict_find(d, key, key_len);
    if (old) {
        *old = value;
        return;
    }
    if (d->n == d->cap) {
        const size_t cap = d->cap * 2;
        const char **keys = chat_alloc(env, cap * sizeof *keys);
        size_t *lens = chat_alloc(env, cap * sizeof *lens);
        chat_value *values = chat_alloc(env, cap * sizeof *values);
        memcpy(keys, d->keys, d->n * sizeof *keys);
        memcpy(lens, d->key_lens, d->n * sizeof *lens);
        memcpy(values, d->values, d->n * sizeof *values);
        d->keys = keys;
        d->key_lens = lens;
        d->values = values;
        d->cap = cap;
    }
    d->keys[d->n] = key;
    d->key_lens[d->n] = key_len;
    d->values[d->n] = value;
    d->n++;
}

const char *chat_type_name(const chat_value *v) {
    switch ((chat_kind)v->kind) {
    case CV_UNDEFINED: return "Undefined";
    case CV_NONE: return "NoneType";
    case CV_BOOL: return "bool";
    case CV_INT: return "int";
    case CV_FLOAT: return "float";
    case CV_STRING: return "str";
    case CV_LIST:
        return v->flags & CV_TUPLE ? "tuple" : v->flags & CV_RANGE ? "range" : v->flags & CV_VIEW ? "dict view"
             : v->flags & CV_GENERATOR ? "generator" : "list";
    case CV_DICT: return "dict";
    case CV_NAMESPACE: return "Namespace";
    case CV_LOOP: return "LoopContext";
    case CV_FUNCTION: return "function";
    }
    return "?";
}

bool chat_truthy(const chat_value *v) {
    switch ((chat_kind)v->kind) {
    case CV_UNDEFINED:
    case CV_NONE: return false;
    case CV_BOOL: return v->u.b;
    case CV_INT: return v->u.i != 0;
    case CV_FLOAT: return v->u.f != 0.0;
    case CV_STRING: return v->n != 0;
    case CV_LIST: return (v->flags & CV_GENERATOR) || v->u.list->n != 0;
    case CV_DICT: return v->u.dict->n != 0;
    case CV_NAMESPACE:
    case CV_LOOP:
    case CV_FUNCTION: return true;
    }
    return false;
}

static bool is_number(const chat_value *v) {
    return v->kind == CV_BOOL || v->kind == CV_INT || v->kind == CV_FLOAT;
}

/* Python compares an int with a float exactly, not through a rounded
 * double: -1, 0, 1 (NaN: 2, unordered). */
static int compare_numbers(const chat_value *a, const chat_value *b) {
    if (a->kind != CV_FLOAT && b->kind != CV_FLOAT) {
        const int64_t x = a->kind == CV_BOOL ? a->u.b : a->u.i, y = b->kind == CV_BOOL ? b->u.b : b->u.i;
        return x < y ? -1 : x > y;
    }
    if (a->kind == CV_FLOAT && b->kind == CV_FLOAT) {
        const double x = a->u.f, y = b->u.f;
        return isnan(x) || isnan(y) ? 2 : x < y ? -1 : x > y;
    }
    /* One int i, one float f: compare in long double where exact (int64
     * fits in its 64-bit mantissa on x86; elsewhere round trips decide). */
    const bool a_float = a->kind == CV_FLOAT;
    const double f = a_float ? a->u.f : b->u.f;
    const int64_t i = a_float ? (b->kind == CV_BOOL ? b->u.b : b->u.i) : (a->kind == CV_BOOL ? a->u.b : a->u.i);
    if (isnan(f)) return 2;
    int r; /* compare f with i */
    if (f >= 9223372036854775808.0) r = 1;
    else if (f < -9223372036854775808.0) r = -1;
    else {
        const double t = trunc(f);
        const int64_t ti = (int64_t)t;
        r = ti < i ? -1 : ti > i ? 1 : f > t ? 1 : f < t ? -1 : 0;
    }
    return a_float ? r : -r;
}

static bool bytes_equal(const chat_value *a, const chat_value *b) {
    return a->n == b->n && (a->n == 0 || memcmp(a->u.s, b->u.s, a->n) == 0);
}

bool chat_equal(const chat_value *a, const chat_value *b) {
    if (is_number(a) && is_number(b)) return compare_numbers(a, b) == 0;
    if (a->kind != b->kind) return false;
    switch ((chat_kind)a->kind) {
    case CV_UNDEFINED:
    case CV_NONE: return true;
    case CV_STRING: return bytes_equal(a, b);
    case CV_LIST: {
        /* Views and generators: by identity (Python compares dict views
         * as sets, ranges by their items; templates do neither). */
        if ((a->flags | b->flags) & CV_NOT_A_LIST) return a->u.list == b->u.list;
        if ((a->flags & CV_TUPLE) != (b->flags & CV_TUPLE) || a->u.list->n != b->u.list->n) return false;
        for (size_t i = 0; i < a->u.list->n; i++)
            if (!chat_equal(&a->u.list->items[i], &b->u.list->items[i])) return false;
        return true;
    }
    case CV_DICT: {
        const chat_dict *x = a->u.dict, *y = b->u.dict;
        if (x->n != y->n) return false;
        for (size_t i = 0; i < x->n; i++) {
            const chat_value *other = chat_dict_find(y, x->keys[i], x->key_lens[i]);
            if (!other || !chat_equal(&x->values[i], other)) return false;
        }
        return true;
    }
    case CV_NAMESPACE: return a->u.dict == b->u.dict;
    case CV_LOOP: return a->u.loop == b->u.loop;
    case CV_FUNCTION: return a->u.fn == b->u.fn;
    default: return false;
    }
}

int chat_compare(chat_env *env, uint32_t pos, const chat_value *a, const chat_value *b) {
    if (is_number(a) && is_number(b)) {
        const int r = compare_numbers(a, b);
        return r == 2 ? 2 : r;
    }
    if (a->kind == CV_UNDEFINED) chat_fail_undefined(env, pos, a);
    if (b->kind == CV_UNDEFINED) chat_fail_undefined(env, pos, b);
    if (a->kind == CV_STRING && b->kind == CV_STRING) {
        /* UTF-8 byte order is code point order. */
        const size_t n = a->n < b->n ? a->n : b->n;
        const int c = n ? memcmp(a->u.s, b->u.s, n) : 0;
        return c < 0 ? -1 : c > 0 ? 1 : a->n < b->n ? -1 : a->n > b->n;
    }
    if (a->kind == CV_LIST && b->kind == CV_LIST && (a->flags & CV_TUPLE) == (b->flags & CV_TUPLE) &&
        !((a->flags | b->flags) & CV_NOT_A_LIST)) {
        const chat_list *x = a->u.list, *y = b->u.list;
        for (size_t i = 0; i < x->n && i < y->n; i++)
            if (!chat_equal(&x->items[i], &y->items[i])) return chat_compare(env, pos, &x->items[i], &y->items[i]);
        return x->n < y->n ? -1 : x->n > y->n;
    }
    chat_fail(env, ATTN_ERR_INVALID_ARGUMENT, pos, "'<' not supported between instances of '%s' and '%s'",
              chat_type_name(a), chat_type_name(b));
}

/* ------------------------------------------------------------ buffers */

void chat_buf_put(chat_env *env, chat_buf *b, const char *s, size_t n) {
    if (!n) return;
    if (b->cap - b->n < n + 1) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap - b->n < n + 1) {
            if (cap > SIZE_MAX / 4) chat_fail(env, ATTN_ERR_BUDGET, CHAT_NO_POS, "a string grows too long");
            cap *= 2;
        }
        char *p = chat_alloc(env, cap);
        if (b->n) memcpy(p, b->p, b->n);
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

/* ------------------------------------------------------ UTF-8 and text */

bool chat_utf8_valid(const char *s, size_t n, size_t *bad) {
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        const unsigned char c = p[i];
        size_t len;
        uint32_t cp, min;
        if (c < 0x80) {
            i++;
            continue;
        } else if (c >= 0xC2 && c <= 0xDF) len = 2, cp = c & 0x1F, min = 0x80;
        else if (c >= 0xE0 && c <= 0xEF) len = 3, cp = c & 0x0F, min = 0x800;
        else if (c >= 0xF0 && c <= 0xF4) len = 4, cp = c & 0x07, min = 0x10000;
        else break;
        if (n - i < len) break;
        size_t k = 1;
        for (; k < len && (p[i + k] & 0xC0) == 0x80; k++) cp = cp << 6 | (p[i + k] & 0x3F);
        if (k < len || cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) break;
        i += len;
    }
    if (bad) *bad = i;
    return i == n;
}

uint32_t chat_utf8_next(const char *s, size_t *i) {
    const unsigned char *p = (const unsigned char *)s + *i;
    if (p[0] < 0x80) {
        (*i)++;
        return p[0];
    }
    if (p[0] < 0xE0) {
        *i += 2;
        return (uint32_t)(p[0] & 0x1F) << 6 | (p[1] & 0x3F);
    }
    if (p[0] < 0xF0) {
        *i += 3;
        return (uint32_t)(p[0] & 0x0F) << 12 | (uint32_t)(p[1] & 0x3F) << 6 | (p[2] & 0x3F);
    }
    *i += 4;
    return (uint32_t)(p[0] & 0x07) << 18 | (uint32_t)(p[1] & 0x3F) << 12 | (uint32_t)(p[2] & 0x3F) << 6 | (p[3] & 0x3F);
}

size_t chat_utf8_put(uint32_t c, char out[4]) {
    if (c < 0x80) {
        out[0] = (char)c;
        return 1;
    }
    if (c < 0x800) {
        out[0] = (char)(0xC0 | c >> 6);
        out[1] = (char)(0x80 | (c & 0x3F));
        return 2;
    }
    if (c < 0x10000) {
        out[0] = (char)(0xE0 | c >> 12);
        out[1] = (char)(0x80 | (c >> 6 & 0x3F));
        out[2] = (char)(0x80 | (c & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | c >> 18);
    out[1] = (char)(0x80 | (c >> 12 & 0x3F));
    out[2] = (char)(0x80 | (c >> 6 & 0x3F));
    out[3] = (char)(0x80 | (c & 0x3F));
    return 4;
}

size_t chat_utf8_count(const char *s, size_t n) {
    size_t count = 0;
    for (size_t i = 0; i < n; i++) count += ((unsigned char)s[i] & 0xC0) != 0x80;
    return count;
}

/* Python's str.isspace: Unicode White_Space less the few Python leaves
 * out, plus the separators \x1c-\x1f it counts (Objects/unicodetype_db.h). */
bool chat_is_space(uint32_t c) {
    if (c < 0x80) return c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F);
    return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
           c == 0x202F || c == 0x205F || c == 0x3000;
}

size_t chat_rstrip_len(const char *s, size_t n) {
    size_t end = n;
    while (end > 0) {
        size_t start = end - 1;
        while (start > 0 && ((unsigned char)s[start] & 0xC0) == 0x80) start--;
        size_t i = start;
        if (!chat_is_space(chat_utf8_next(s, &i))) break;
        end = start;
    }
    return end;
}

size_t chat_lstrip_len(const char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        size_t next = i;
        if (!chat_is_space(chat_utf8_next(s, &next))) break;
        i = next;
    }
    return i;
}

/* ----------------------------------------------------- str() and repr() */

void chat_float_repr(double f, char out[32]) {
    if (isnan(f)) {
        strcpy(out, "nan");
        return;
    }
    if (isinf(f)) {
        strcpy(out, f < 0 ? "-inf" : "inf");
        return;
    }
    /* The shortest %.*e that reads back as f: its digits and exponent. */
    char e[40];
    for (int p = 0; p < 17; p++) {
        snprintf(e, sizeof e, "%.*e", p, f);
        if (strtod(e, NULL) == f) break;
    }
    char digits[24];
    size_t nd = 0;
    const char *c = e;
    const bool negative = *c == '-';
    if (negative) c++;
    for (; *c && *c != 'e'; c++)
        if (*c >= '0' && *c <= '9') digits[nd++] = *c;
    const int exp10 = atoi(c + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    size_t o = 0;
    if (negative) out[o++] = '-';
    /* repr: fixed notation for 1e-4 <= |f| < 1e16, else d.ddde+XX. */
    if (exp10 >= -4 && exp10 < 16) {
        if (exp10 < 0) {
            out[o++] = '0';
            out[o++] = '.';
            for (int k = 0; k < -exp10 - 1; k++) out[o++] = '0';
            for (size_t k = 0; k < nd; k++) out[o++] = digits[k];
        } else {
            for (int k = 0; k <= exp10; k++) out[o++] = (size_t)k < nd ? digits[k] : '0';
            out[o++] = '.';
            if ((size_t)exp10 + 1 < nd)
                for (size_t k = (size_t)exp10 + 1; k < nd; k++) out[o++] = digits[k];
            else out[o++] = '0';
        }
        out[o] = 0;
        return;
    }
    out[o++] = digits[0];
    if (nd > 1) {
        out[o++] = '.';
        for (size_t k = 1; k < nd; k++) out[o++] = digits[k];
    }
    snprintf(out + o, 32 - o, "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
}

static void put_int(chat_env *env, chat_buf *out, int64_t i) {
    char s[24];
    const int n = snprintf(s, sizeof s, "%lld", (long long)i);
    chat_buf_put(env, out, s, (size_t)n);
}

/* Python's repr of a str: quotes, and escapes for what str.isprintable()
 * rejects.  Beyond U+00FF that needs Unicode's tables: refused. */
static void repr_string(chat_env *env, uint32_t pos, const char *s, size_t n, chat_buf *out) {
    bool single = false, dbl = false;
    for (size_t i = 0; i < n; i++) single |= s[i] == '\'', dbl |= s[i] == '"';
    const char quote = single && !dbl ? '"' : '\'';
    chat_buf_put(env, out, &quote, 1);
    size_t i = 0;
    while (i < n) {
        const size_t start = i;
        const uint32_t c = chat_utf8_next(s, &i);
        char esc[12];
        if (c == (uint32_t)quote || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)c;
            chat_buf_put(env, out, esc, 2);
        } else if (c == '\n' || c == '\r' || c == '\t') {
            esc[0] = '\\';
            esc[1] = c == '\n' ? 'n' : c == '\r' ? 'r' : 't';
            chat_buf_put(env, out, esc, 2);
        } else if (c < 0x20 || (c >= 0x7F && c <= 0xA0) || c == 0xAD) {
            snprintf(esc, sizeof esc, "\\x%02x", (unsigned)c);
            chat_buf_put(env, out, esc, 4);
        } else if (c > 0xFF) {
            chat_fail(env, ATTN_ERR_UNSUPPORTED, pos,
                      "printing a list or dict holding text beyond U+00FF (Python's repr) is not implemented");
        } else {
            chat_buf_put(env, out, s + start, i - start);
        }
    }
    chat_buf_put(env, out, &quote, 1);
}

static void to_text(chat_env *env, uint32_t pos, const chat_value *v, chat_buf *out, bool repr) {
    char f[32];
    switch ((chat_kind)v->kind) {
    case CV_UNDEFINED:
        if (repr) chat_fail(env, ATTN_ERR_UNSUPPORTED, pos, "printing an undefined value inside a list or dict is not implemented");
        return;
    case CV_NONE: chat_buf_puts(env, out, "None"); return;
    case CV_BOOL: chat_buf_puts(env, out, v->u.b ? "True" : "False"); return;
    case CV_INT: put_int(env, out, v->u.i); return;
    case CV_FLOAT:
        chat_float_repr(v->u.f, f);
        chat_buf_puts(env, out, f);
        return;
    case CV_STRING:
        if (repr) repr_string(env, pos, v->u.s, v->n, out);
        else chat_buf_put(env, out, v->u.s, v->n);
        return;
    case CV_LIST: {
        if (v->flags & CV_NOT_A_LIST)
            chat_fail(env, ATTN_ERR_UNSUPPORTED, pos,
                      "printing a %s (Python prints dict_items(...), range(...), <generator ...>) is not implemented",
                      chat_type_name(v));
        const bool tuple = v->flags & CV_TUPLE;
        chat_buf_puts(env, out, tuple ? "(" : "[");
        for (size_t i = 0; i < v->u.list->n; i++) {
            if (i) chat_buf_puts(env, out, ", ");
            to_text(env, pos, &v->u.list->items[i], out, true);
        }
        chat_buf_puts(env, out, tuple ? (v->u.list->n == 1 ? ",)" : ")") : "]");
        return;
    }
    case CV_DICT: {
        const chat_dict *d = v->u.dict;
        chat_buf_puts(env, out, "{");
        for (size_t i = 0; i < d->n; i++) {
            if (i) chat_buf_puts(env, out, ", ");
            repr_string(env, pos, d->keys[i], d->key_lens[i], out);
            chat_buf_puts(env, out, ": ");
            to_text(env, pos, &d->values[i], out, true);
        }
        chat_buf_puts(env, out, "}");
        return;
    }
    case CV_NAMESPACE:
    case CV_LOOP:
    case CV_FUNCTION:
        chat_fail(env, ATTN_ERR_UNSUPPORTED, pos, "printing a %s (Python prints its address) is not implemented",
                  chat_type_name(v));
    }
}

void chat_to_str(chat_env *env, uint32_t pos, const chat_value *v, chat_buf *out) { to_text(env, pos, v, out, false); }
void chat_repr(chat_env *env, uint32_t pos, const chat_value *v, chat_buf *out) { to_text(env, pos, v, out, true); }

chat_value chat_str_of(chat_env *env, uint32_t pos, const chat_value *v) {
    if (v->kind == CV_STRING) return *v;
    chat_buf b = {0};
    chat_to_str(env, pos, v, &b);
    return chat_str(b.p ? b.p : "", b.n);
}

/* ------------------------------------------------------------ JSON out */

static void json_string(chat_env *env, const char *s, size_t n, bool ensure_ascii, chat_buf *out) {
    chat_buf_puts(env, out, "\"");
    size_t i = 0;
    while (i < n) {
        const size_t start = i;
        const uint32_t c = chat_utf8_next(s, &i);
        char esc[16];
        if (c == '"' || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)c;
            chat_buf_put(env, out, esc, 2);
        } else if (c == '\n' || c == '\r' || c == '\t' || c == '\b' || c == '\f') {
            esc[0] = '\\';
            esc[1] = c == '\n' ? 'n' : c == '\r' ? 'r' : c == '\t' ? 't' : c == '\b' ? 'b' : 'f';
            chat_buf_put(env, out, esc, 2);
        } else if (c < 0x20 || (ensure_ascii && c >= 0x7F)) {
            if (c >= 0x10000) {
                const uint32_t v = c - 0x10000;
                snprintf(esc, sizeof esc, "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
                chat_buf_put(env, out, esc, 12);
            } else {
                snprintf(esc, sizeof esc, "\\u%04x", (unsigned)c);
                chat_buf_put(env, out, esc, 6);
            }
        } else {
            chat_buf_put(env, out, s + start, i - start);
        }
    }
    chat_buf_puts(env, out, "\"");
}

static void json_newline(chat_env *env, const chat_json_style *st, int depth, chat_buf *out) {
    chat_buf_puts(env, out, "\n");
    for (int k = 0; k < depth; k++) chat_buf_put(env, out, st->indent, st->indent_len);
}

typedef struct key_order {
    const char *key;
    size_t len;
    size_t index;
} key_order;

static int key_before(const void *a, const void *b) {
    const key_order *x = a, *y = b;
    const size_t n = x->len < y->len ? x->len : y->len;
    const int c = n ? memcmp(x->key, y->key, n) : 0;
    return c ? c : x->len < y->len ? -1 : x->len > y->len;
}

static void json_value(chat_env *env, uint32_t pos, const chat_value *v, const chat_json_style *st, int depth,
                       chat_buf *out) {
    if (depth > 256) chat_fail(env, ATTN_ERR_BUDGET, pos, "tojson: more than 256 levels of nesting");
    const char *item_sep = st->item_sep ? st->item_sep : st->indent ? "," : ", ";
    const size_t item_sep_len = st->item_sep ? st->item_sep_len : strlen(item_sep);
    const char *key_sep = st->key_sep ? st->key_sep : ": ";
    const size_t key_sep_len = st->key_sep ? st->key_sep_len : 2;
    char f[32];
    switch ((chat_kind)v->kind) {
    case CV_NONE: chat_buf_puts(env, out, "null"); return;
    case CV_BOOL: chat_buf_puts(env, out, v->u.b ? "true" : "false"); return;
    case CV_INT: put_int(env, out, v->u.i); return;
    case CV_FLOAT:
        if (isnan(v->u.f)) chat_buf_puts(env, out, "NaN");
        else if (isinf(v->u.f)) chat_buf_puts(env, out, v->u.f < 0 ? "-Infinity" : "Infinity");
        else {
            chat_float_repr(v->u.f, f);
            chat_buf_puts(env, out, f);
        }
        return;
    case CV_STRING: json_string(env, v->u.s, v->n, st->ensure_ascii, out); return;
    case CV_LIST: {
        if (v->flags & CV_NOT_A_LIST)
            chat_fail(env, ATTN_ERR_INVALID_ARGUMENT, pos, "tojson: Object of type %s is not JSON serializable",
                      chat_type_name(v));
        const chat_list *l = v->u.list;
        if (!l->n) {
            chat_buf_puts(env, out, "[]");
            return;
        }
        chat_buf_puts(env, out, "[");
        for (size_t i = 0; i < l->n; i++) {
            if (i) chat_buf_put(env, out, item_sep, item_sep_len);
            if (st->indent) json_newline(env, st, depth + 1, out);
            json_value(env, pos, &l->items[i], st, depth + 1, out);
        }
        if (st->indent) json_newline(env, st, depth, out);
        chat_buf_puts(env, out, "]");
        return;
    }
    case CV_DICT: {
        const chat_dict *d = v->u.dict;
        if (!d->n) {
            chat_buf_puts(env, out, "{}");
            return;
        }
        key_order *order = chat_alloc(env, d->n * sizeof *order);
        for (size_t i = 0; i < d->n; i++) order[i] = (key_order){d->keys[i], d->key_lens[i], i};
        if (st->sort_keys) qsort(order, d->n, sizeof *order, key_before);
        chat_buf_puts(env, out, "{");
        for (size_t k = 0; k < d->n; k++) {
            const size_t i = order[k].index;
            if (k) chat_buf_put(env, out, item_sep, item_sep_len);
            if (st->indent) json_newline(env, st, depth + 1, out);
            json_string(env, d->keys[i], d->key_lens[i], st->ensure_ascii, out);
            chat_buf_put(env, out, key_sep, key_sep_len);
            json_value(env, pos, &d->values[i], st, depth + 1, out);
        }
        if (st->indent) json_newline(env, st, depth, out);
        chat_buf_puts(env, out, "}");
        return;
    }
    case CV_UNDEFINED:
        if (v->flags & CV_UNSAFE) chat_fail_undefined(env, pos, v);
        chat_fail(env, ATTN_ERR_INVALID_ARGUMENT, pos, "tojson: Object of type Undefined is not JSON serializable");
    case CV_NAMESPACE:
    case CV_LOOP:
    case CV_FUNCTION:
        chat_fail(env, ATTN_ERR_INVALID_ARGUMENT, pos, "tojson: Object of type %s is not JSON serializable",
                  chat_type_name(v));
    }
}

void chat_to_json(chat_env *env, uint32_t pos, const chat_value *v, const chat_json_style *style, chat_buf *out) {
    json_value(env, pos, v, style, 0, out);
}

/* ------------------------------------------------------------- JSON in */

typedef struct json_reader {
    chat_env *env;
    const char *s;
    size_t n, i;
    const char *what;
    int depth;
} json_reader;

#if defined(__GNUC__)
__attribute__((noreturn))
#endif
static void json_fail(json_reader *r, const char *why) {
    chat_fail(r->env, ATTN_ERR_FORMAT, CHAT_NO_POS, "%s: %s at byte %zu", r->what, why, r->i);
}

static void json_space(json_reader *r) {
    while (r->i < r->n && (r->s[r->i] == ' ' || r->s[r->i] == '\t' || r->s[r->i] == '\n' || r->s[r->i] == '\r')) r->i++;
}

static unsigned json_hex4(json_reader *r) {
    if (r->n - r->i < 4) json_fail(r, "a truncated \\u escape");
    unsigned v = 0;
    for (int k = 0; k < 4; k++) {
        const char c = r->s[r->i++];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
        else json_fail(r, "a bad \\u escape");
    }
    return v;
}

static chat_value json_string_in(json_reader *r) {
    r->i++; /* the opening quote */
    chat_buf b = {0};
    for (;;) {
        if (r->i >= r->n) json_fail(r, "an unterminated string");
        const unsigned char c = (unsigned char)r->s[r->i];
        if (c == '"') {
            r->i++;
            break;
        }
        if (c < 0x20) json_fail(r, "a control character in a string");
        if (c != '\\') {
            size_t start = r->i;
            while (r->i < r->n && r->s[r->i] != '"' && r->s[r->i] != '\\' && (unsigned char)r->s[r->i] >= 0x20) r->i++;
            chat_buf_put(r->env, &b, r->s + start, r->i - start);
            continue;
        }
        if (++r->i >= r->n) json_fail(r, "an unterminated escape");
        const char e = r->s[r->i++];
        char out[4];
        switch (e) {
        case '"': case '\\': case '/': out[0] = e; chat_buf_put(r->env, &b, out, 1); break;
        case 'b': chat_buf_put(r->env, &b, "\b", 1); break;
        case 'f': chat_buf_put(r->env, &b, "\f", 1); break;
        case 'n': chat_buf_put(r->env, &b, "\n", 1); break;
        case 'r': chat_buf_put(r->env, &b, "\r", 1); break;
        case 't': chat_buf_put(r->env, &b, "\t", 1); break;
        case 'u': {
            uint32_t cp = json_hex4(r);
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                if (r->n - r->i < 6 || r->s[r->i] != '\\' || r->s[r->i + 1] != 'u')
                    json_fail(r, "a lone surrogate (no UTF-8 for it)");
                r->i += 2;
                const uint32_t lo = json_hex4(r);
                if (lo < 0xDC00 || lo > 0xDFFF) json_fail(r, "a lone surrogate (no UTF-8 for it)");
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                json_fail(r, "a lone surrogate (no UTF-8 for it)");
            }
            chat_buf_put(r->env, &b, out, chat_utf8_put(cp, out));
            break;
        }
        default: json_fail(r, "a bad escape");
        }
    }
    return chat_str(b.p ? b.p : "", b.n);
}

static chat_value json_number_in(json_reader *r) {
    const size_t start = r->i;
    bool fraction = false;
    if (r->s[r->i] == '-') r->i++;
    if (r->i >= r->n || r->s[r->i] < '0' || r->s[r->i] > '9') json_fail(r, "a bad number");
    if (r->s[r->i] == '0') r->i++;
    else while (r->i < r->n && r->s[r->i] >= '0' && r->s[r->i] <= '9') r->i++;
    if (r->i < r->n && r->s[r->i] == '.') {
        fraction = true;
        r->i++;
        if (r->i >= r->n || r->s[r->i] < '0' || r->s[r->i] > '9') json_fail(r, "a bad number");
        while (r->i < r->n && r->s[r->i] >= '0' && r->s[r->i] <= '9') r->i++;
    }
    if (r->i < r->n && (r->s[r->i] == 'e' || r->s[r->i] == 'E')) {
        fraction = true;
        r->i++;
        if (r->i < r->n && (r->s[r->i] == '+' || r->s[r->i] == '-')) r->i++;
        if (r->i >= r->n || r->s[r->i] < '0' || r->s[r->i] > '9') json_fail(r, "a bad number");
        while (r->i < r->n && r->s[r->i] >= '0' && r->s[r->i] <= '9') r->i++;
    }
    char text[64];
    const size_t len = r->i - start;
    if (len >= sizeof text) json_fail(r, "a number of more than 63 characters");
    memcpy(text, r->s + start, len);
    text[len] = 0;
    if (!fraction) {
        char *end;
        errno = 0;
        const long long v = strtoll(text, &end, 10);
        if (errno == ERANGE) json_fail(r, "an integer beyond 64 bits (not implemented)");
        return chat_int(v);
    }
    return chat_float(strtod(text, NULL));
}

static chat_value json_value_in(json_reader *r);

static chat_value json_array_in(json_reader *r) {
    r->i++;
    chat_value items = chat_list_new(r->env, 0, 0);
    size_t cap = 0;
    json_space(r);
    if (r->i < r->n && r->s[r->i] == ']') {
        r->i++;
        return items;
    }
    for (;;) {
        const chat_value v = json_value_in(r);
        chat_list *l = items.u.list;
        if (l->n == cap) {
            cap = cap ? cap * 2 : 8;
            chat_value *grown = chat_alloc(r->env, cap * sizeof *grown);
            if (l->n) memcpy(grown, l->items, l->n * sizeof *grown);
            l->items = grown;
        }
        l->items[l->n++] = v;
        json_space(r);
        if (r->i < r->n && r->s[r->i] == ',') {
            r->i++;
            continue;
        }
        if (r->i < r->n && r->s[r->i] == ']') {
            r->i++;
            return items;
        }
        json_fail(r, "expected ',' or ']'");
    }
}

static chat_value json_object_in(json_reader *r) {
    r->i++;
    chat_value d = chat_dict_new(r->env, 4);
    json_space(r);
    if (r->i < r->n && r->s[r->i] == '}') {
        r->i++;
        return d;
    }
    for (;;) {
        json_space(r);
        if (r->i >= r->n || r->s[r->i] != '"') json_fail(r, "expected a string key");
        const chat_value key = json_string_in(r);
        json_space(r);
        if (r->i >= r->n || r->s[r->i] != ':') json_fail(r, "expected ':'");
        r->i++;
        /* Python's json keeps the last of duplicate keys, in the first one's place. */
        chat_dict_set(r->env, d.u.dict, key.u.s, key.n, json_value_in(r));
        json_space(r);
        if (r->i < r->n && r->s[r->i] == ',') {
            r->i++;
            continue;
        }
        if (r->i < r->n && r->s[r->i] == '}') {
            r->i++;
            return d;
        }
        json_fail(r, "expected ',' or '}'");
    }
}

static bool json_word(json_reader *r, const char *w) {
    const size_t n = strlen(w);
    if (r->n - r->i >= n && memcmp(r->s + r->i, w, n) == 0) {
        r->i += n;
        return true;
    }
    return false;
}

static chat_value json_value_in(json_reader *r) {
    json_space(r);
    if (r->i >= r->n) json_fail(r, "unexpected end");
    if (++r->depth > 256) json_fail(r, "more than 256 levels of nesting");
    chat_value v;
    const char c = r->s[r->i];
    if (c == '{') v = json_object_in(r);
    else if (c == '[') v = json_array_in(r);
    else if (c == '"') v = json_string_in(r);
    else if (c == '-' || (c >= '0' && c <= '9')) v = json_number_in(r);
    else if (json_word(r, "true")) v = chat_bool(true);
    else if (json_word(r, "false")) v = chat_bool(false);
    else if (json_word(r, "null")) v = chat_none();
    else json_fail(r, "unexpected character");
    r->depth--;
    return v;
}

chat_value chat_from_json(chat_env *env, const char *text, size_t len, const char *what) {
    size_t bad;
    if (!chat_utf8_valid(text, len, &bad))
        chat_fail(env, ATTN_ERR_FORMAT, CHAT_NO_POS, "%s: invalid UTF-8 at byte %zu", what, bad);
    json_reader r = {env, text, len, 0, what, 0};
    const chat_value v = json_value_in(&r);
    json_space(&r);
    if (r.i != r.n) json_fail(&r, "extra data after the value");
    return v;
}
