/*
 * chat_builtins.c — what a chat template can call (chat.h): Jinja's
 * filters and tests, the globals transformers' environment adds
 * (raise_exception, strftime_now, namespace, dict, range), the methods of
 * str and dict that templates use, and jinja2's sandboxed attribute and
 * item access.  Each behaves as jinja2 3.1 under Python 3 does; what is
 * not here is refused by name (ATTN_ERR_UNSUPPORTED), never guessed.
 *
 * Case mappings (upper, lower, title, capitalize) are exact for ASCII and
 * Latin-1; text holding any other character that has a case in Unicode is
 * refused (Python maps it through Unicode's tables, which attn does not
 * carry); other characters (CJK, emoji, ...) have no case and pass.
 */
#include "model/chat.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------ arguments */

/* Argument k of a call: positional k, else the keyword name, else NULL. */
static const chat_value *arg(const chat_args *a, size_t k, const char *name) {
    if (k < a->n) return &a->args[k];
    for (size_t i = 0; i < a->n_kwargs; i++)
        if (a->name_lens[i] == strlen(name) && memcmp(a->names[i], name, a->name_lens[i]) == 0) return &a->kwargs[i];
    return NULL;
}

/* Fails unless the call has at most max positional arguments and only
 * keywords among names (NULL-terminated). */
static void check_args(chat_env *env, uint32_t pos, const char *what, const chat_args *a, size_t max,
                       const char *const *names) {
    if (a->n > max)
        chat_fail(env, ATTN_ERR_INVALID_ARGUMENT, pos, "%s takes at most %zu argument%s (%zu given)", what, max,
                  max == 1 ? "" : "s", a->n);
    for (size_t i = 0; i < a->n_kwargs; i++) {
        bool known = false;
        size_t index = 0;
        for (const char *const *n = names; n && *n; n++, index++)
            if (a->name_lens[i] == strlen(*n) && memcmp(a->names[i], *n, a->name_lens[i]) == 0) {
                known = true;
                if (index < a->n)
                    chat_fail(env, ATTN_ERR_INVALID_ARGUMENT, pos, "%s got multiple values for argument '%s'", what, *n);
            }
        if (!known)
            chat_fail(env, ATTN_ERR_INVALID_ARGUMENT, pos, "%s got an unexpected keyword argument '%.*s'", what,
                      (int)a->name_lens[i], a->names[i]);
    }
}

static const chat_value *need(chat_env *env, uint32_t pos, const char *what, const chat_args *a, size_t k,
                              const char *name) {
    const chat_value *v = arg(a, k, name);
    if (!v) chat_fail(env, ATTN_ERR_INVALID_ARGUMENT, pos, "%s missing required argument '%s'", what, name);
    return v;
}

static int64_t int_arg(chat_env *env, uint32_t pos, const char *what, const chat_value *v) {
    if (v->kind == CV_INT) return v->u.i;
    if (v->kind == CV_BOOL) return v->u.b;
    if (v->kind == CV_UNDEFINED) chat_fail_undefined(env, pos, v);
    chat_fail(env, ATTN_ERR_INVALID_ARGUMENT, pos, "%s: '%s' object cannot be interpreted as an integer", what,
              chat_type_name(v));
}

static const chat_value *str_arg(chat_env *env, uint32_t pos, const char *what, const chat_value *v) {
    if (v->kind == CV_STRING) return v;
    if (v->kind == CV_UNDEFINED) chat_fail_undefined(env, pos, v);
    chat_fail(env, ATTN_ERR_INVALID_ARGUMENT, pos, "%s: must be str, not %s", what, chat_type_name(v));
}

/* ------------------------------------------------------------ text */

/* Code points of a string, for indexing and slicing. */
static uint32_t *code_points(chat_env *env, const chat_value *s, size_t *count) {
    uint32_t *cps = chat_alloc(env, (s->n + 1) * sizeof *cps);
    size_t n = 0, i = 0;
    while (i < s->n) cps[n++] = chat_utf8_next(s->u.s, &i);
    *count = n;
    return cps;
}

static chat_value from_code_points(chat_env *env, const uint32_t *cps, size_t n) {
    chat_buf b = {0};
    char out[4];
    for (size_t k = 0; k < n; k++) chat_buf_put(env, &b, out, chat_utf8_put(cps[k], out));
    return chat_str(b.p ? b.p : "", b.n);
}

/* Code points beyond Latin-1 that are cased or have a case mapping in
 * Unicode (from Python 3.11's str methods, widened for the blocks later
 * versions fill). */
static const uint32_t cased_ranges[][2] = {
    {0x100, 0x2E4}, {0x345, 0x588}, {0x10A0, 0x10FF}, {0x13A0, 0x13FD}, {0x1C80, 0x1CBF}, {0x1D00, 0x1DBF},
    {0x1E00, 0x1FFC}, {0x2071, 0x209C}, {0x2102, 0x2184}, {0x24B6, 0x24E9}, {0x2C00, 0x2D2D}, {0xA640, 0xA69D},
    {0xA722, 0xA7FF}, {0xAB30, 0xABBF}, {0xFB00, 0xFB17}, {0xFF21, 0xFF5A}, {0x10400, 0x1044F}, {0x104B0, 0x104FB},
    {0x10570, 0x105BC}, {0x10780, 0x107BA}, {0x10C80, 0x10CF2}, {0x10D40, 0x10D8F}, {0x118A0, 0x118DF},
    {0x16E40, 0x16E7F}, {0x16EA0, 0x16EDF}, {0x1D400, 0x1D7CB}, {0x1DF00, 0x1DF2F}, {0x1E030, 0x1E08F},
    {0x1E900, 0x1E943}, {0x1F130, 0x1F189}};

static bool latin1_upper(uint32_t c) { return (c >= 'A' && c <= 'Z') || (c >= 0xC0 && c <= 0xDE && c != 0xD7); }
static bool latin1_lower(uint32_t c) {
    return (c >= 'a' && c <= 'z') || (c >= 0xDF && c <= 0xFF && c != 0xF7) || c == 0xB5 || c == 0xAA || c == 0xBA;
}

typedef enum casing { TO_UPPER, TO_LOWER, TO_TITLE } casing;

/* Appends c mapped (Python's str.upper/lower/title of one character). */
static void put_case(chat_env *env, uint32_t pos, uint32_t c, casing how, chat_buf *out) {
    for (size_t r = 0; r < sizeof cased_ranges / sizeof cased_ranges[0]; r++)
        if (c >= cased_ranges[r][0] && c <= cased_ranges[r][1])
            chat_fail(env, ATTN_ERR_UNSUPPORTED, pos,
                      "changing the case of U+%04X (beyond Latin-1: Unicode's case tables) is not implemented", (unsigned)c);
    uint32_t m = c;
    if (how == TO_LOWER) {
        if (latin1_upper(c)) m = c + 0x20;
    } else if (c == 0xDF) {
        chat_buf_puts(env, out, how == TO_UPPER ? "SS" : "Ss");
        return;
    } else if (c == 0xFF) {
        m = 0x178;
    } else if (c == 0xB5) {
        m = 0x39C;
    } else if ((c >= 'a' && c <= 'z') || (c >= 0xE0 && c <= 0xFE && c != 0xF7)) {
        m = c - 0x20;
    }
    char b[4];
    chat_buf_put(env, out, b, chat_utf8_put(m, b));
}

static bool is_cased(uint32_t c) { return latin1_upper(c) || latin1_lower(c); }

/* str.upper / str.lower / str.title / str.capitalize. */
static chat_value change_case(chat_env *env, uint32_t pos, const chat_value *s, int how /* casing, or 3 capitalize */) {
    chat_buf b = {0};
    size_t i = 0;
    bool previous_cased = false, first = true;
    while (i < s->n) {
        const uint32_t c = chat_utf8_next(s->u.s, &i);
        casing mapping = (casing)how;
        if (how == TO_TITLE) mapping = previous_cased ? TO_LOWER : TO_TITLE;
        if (how == 3) mapping = first ? TO_TITLE : TO_LOWER;
        put_case(env, pos, c, mapping, &b);
        previous_cased = is_cased(c);
        first = false;
    }
    return chat_str(b.p ? b.p : "", b.n);
}

/* jinja2's title filter: each word (split on runs of -, whitespace, (,
 * {, [, <) with its first character upper and the rest lower. */
static chat_value title_filter(chat_env *env, uint32_t pos, const chat_value *s) {
    chat_buf b = {0};
    size_t i = 0;
    bool word_start = true;
    while (i < s->n) {
        const uint32_t c = chat_utf8_next(s->u.s, &i);
        const bool separator = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || chat_is_space(c);
        if (separator) {
            char out[4];
            chat_buf_put(env, &b, out, chat_utf8_put(c, out));
            word_start = true;
            continue;
        }
        put_case(env, pos, c, word_start ? TO_UPPER : TO_LOWER, &b);
        word_start = false;
    }
    return chat_str(b.p ? b.p : "", b.n);
}

static bool in_chars(uint32_t c, const chat_value *chars) {
    size_t i = 0;
    while (i < chars->n)
        if (chat_utf8_next(chars->u.s, &i) == c) return true;
    return false;
}

/* str.strip(chars) / lstrip / rstrip: chars NULL (or None) for whitespace. */
static chat_value strip(chat_env *env, const chat_value *s, const chat_value *chars, bool left, bool right) {
    size_t cp_n;
    const uint32_t *cps = code_points(env, s, &cp_n);
    size_t start = 0, end = cp_n;
    const bool spaces = !chars || chars->kind == CV_NONE;
    if (left)
        while (start < end && (spaces ? chat_is_space(cps[start]) : in_chars(cps[start], chars))) start++;
    if (right)
        while (end > start && (spaces ? chat_is_space(cps[end - 1]) : in_chars(cps[end - 1], chars))) end--;
    return from_code_points(env, cps + start, end - start);
}

static bool find_bytes(const chat_value *s, size_t from, const chat_value *sub, size_t *at) {
    for (size_t i = from; i + sub->n <= s->n; i++)
        if (!sub->n || memcmp(s->u.s + i, sub->u.s, sub->n) == 0) {
            *at = i;
            return true;
        }
    return false;
}

static void list_push(chat_env *env, chat_value *list, size_t *cap, chat_value v) {
    chat_list *l = list->u.list;
    if (l->n == *cap) {
        *cap = *cap ? *cap * 2 : 8;
        chat_value *grown = chat_alloc(env, *cap * sizeof *grown);
        if (l->n) memcpy(grown, l->items, l->n * sizeof *grown);
        l->items = grown;
    }
    l->items[l->n++] = v;
}

/* str.split(sep=None, maxsplit=-1) and str.rsplit. */
static chat_value split(chat_env *env, uint32_t pos, const chat_value *s, const chat_args *a, bool from_right) {
    static const char *const names[] = {"sep", "maxsplit", NULL};
    check_args(env, pos, from_right ? "str.rsplit()" : "str.split()", a, 2, names);
    const chat_value *sep = arg(a, 0, "sep"), *max_v = arg(a, 1, "maxsplit");
    int64_t max = max_v ? int_arg(env, pos, "maxsplit", max_v) : -1;
    chat_value parts = chat_list_new(env, 0, 0);
    size_t cap = 0;
    if (sep && sep->kind != CV_NONE) {
        str_arg(env, pos, "split's separator", sep);
        if (!sep->n) chat_fail(env, ATTN_ERR_INVALID_ARGUMENT, pos, "empty separator");
        if (!from_right || max < 0) {
            size_t start = 0, at;
            while ((max < 0 || (int64_t)parts.u.list->n < max) && find_bytes(s, start, sep, &at)) {
                list_push(env, &parts, &cap, chat_str(s->u.s + start, at - start));
                start = at + sep->n;
            }
            list_push(env, &parts, &cap, chat_str(s->u.s + start, s->n - start));
            return parts;
        }
        /* rsplit with a limit: the last max separators. */
        size_t end = s->n;
        chat_value reversed = chat_list_new(env, 0, 0);
        size_t rcap = 0;
        while ((int64_t)reversed.u.list->n < max) {
            size_t at = SIZE_MAX;
            for (size_t i = end; i >= sep->n; i--)
                if (memcmp(s->u.s + i - sep->n, sep->u.s, sep->n) == 0) {
                    at = i - sep->n;
                    break;
                }
            if (at == SIZE_MAX) break;
            list_push(env, &reversed, &rcap, chat_str(s->u.s + at + sep->n, end - at - sep->n));
            end = at;
        }
        list_push(env, &parts, &cap, chat_str(s->u.s, end));
        for (size_t k = reversed.u.list->n; k-- > 0;) list_push(env, &parts, &cap, reversed.u.list->items[k]);
        return parts;
    }
    /* Runs of whitespace; none at either end. */
    size_t cp_n;
    const uint32_t *cps = code_points(env, s, &cp_n);
    if (from_right && max >= 0) {
        /* From the right: the words after the last max runs of whitespace,
         * and the rest with its leading whitespace kept. */
        chat_value reversed = chat_list_new(env, 0, 0);
        size_t rcap = 0, end = cp_n;
        while (end > 0 && chat_is_space(cps[end - 1])) end--;
        while (end > 0) {
            if ((int64_t)reversed.u.list->n == max) {
                list_push(env, &reversed, &rcap, from_code_points(env, cps, end));
                break;
            }
            size_t start = end;
            while (start > 0 && !chat_is_space(cps[start - 1])) start--;
            list_push(env, &reversed, &rcap, from_code_points(env, cps + start, end - start));
            end = start;
            while (end > 0 && chat_is_space(cps[end - 1])) end--;
        }
        for (size_t k = reversed.u.list->n; k-- > 0;) list_push(env, &parts, &cap, reversed.u.list->items[k]);
        return parts;
    }
    size_t i = 0;
    while (i < cp_n && chat_is_space(cps[i])) i++;
    while (i < cp_n) {
        if (max >= 0 && (int64_t)parts.u.list->n == max) {
            /* The rest, its trailing whitespace kept. */
            list_push(env, &parts, &cap, from_code_points(env, cps + i, cp_n - i));
            break;
        }
        size_t start = i;
        while (i < cp_n && !chat_is_space(cps[i])) i++;
        list_push(env, &parts, &cap, from_code_points(env, cps + start, i - start));
        while (i < cp_n && chat_is_space(cps[i])) i++;
    }
    return parts;
}

static chat_value replace(chat_env *env, uint32_t pos, const chat_value *s, const chat_value *old,
                          const chat_value *new_text, int64_t count) {
    str_arg(env, pos, "replace", old);
    str_arg(env, pos, "replace", new_text);
    chat_buf b = {0};
    if (!old->n) {
        /* Python inserts new before each character and at the end. */
        size_t i = 0;
        int64_t done = 0;
        while (i <= s->n) {
            if (count < 0 || done < count) {
                chat_buf_put(env, &b, new_text->u.s, new_text->n);
                done++;
            }
            if (i == s->n) break;
            const size_t start = i;
            chat_utf8_next(s->u.s, &i);
            chat_buf_put(env, &b, s->u.s + start, i - start);
        }
        return chat_str(b.p ? b.p : "", b.n);
    }
    size_t start = 0, at;
    int64_t done = 0;
    while ((count < 0 || done < count) && find_bytes(s, start, old, &at)) {
        chat_buf_put(env, &b, s->u.s + start, at - start);
        chat_buf_put(env, &b, new_text->u.s, new_text->n);
        start = at + old->n;
        done++;
    }
    chat_buf_put(env, &b, s->u.s + start, s->n - start);
    return chat_str(b.p ? b.p : "", b.n);
}

/* ------------------------------------------------------- slices, items */

/* Python's PySlice_AdjustIndices: the items a slice takes from n. */
static void slice_indices(chat_env *env, uint32_t pos, const chat_value *start_v, const chat_value *stop_v,
                          const chat_value *step_v, int64_t n, int64_t *start, int64_t *stop, int64_t *stride) {
    *stride = step_v->kind == CV_NONE ? 1 : int_arg(env, pos, "slice step", step_v);
    if (*stride == 0) chat_fail(env, ATTN_ERR_INVALID_ARGUMENT, pos, "slice step cannot be zero");
    const int64_t lower = *stride < 0 ? -1 : 0, upper = *stride < 0 ? n - 1 : n;
    if (start_v->kind == CV_NONE) *start = *stride < 0 ? upper : lower;
    else {
        *start = int_arg(env, pos, "slice start", start_v);
        if (*start < 0) *start = *start + n < lower ? lower : *start + n;
        else if (*start > upper) *start = upper;
    }
    if (stop_v->kind == CV_NONE) *stop = *stride < 0 ? lower : upper;
    else {
        *stop = int_arg(env, pos, "slice stop", stop_v);
        if (*stop < 0) *stop = *stop + n < lower ? lower : *stop + n;
        else if (*stop > upper) *stop = upper;
    }
}

static bool index_like(const chat_value *v) {
    return v->kind == CV_INT || v->kind == CV_BOOL || v->kind == CV_NONE;
}

chat_value chat_slice(chat_env *env, uint32_t pos, const chat_value *obj, const chat_value *start_v,
                      const chat_value *stop_v, const chat_value *step_v) {
    if (obj->kind == CV_UNDEFINED) chat_fail_undefined(env, pos, obj);
    const bool indexed = obj->kind == CV_STRING ||
                         (obj->kind == CV_LIST && (!(obj->flags & CV_NOT_A_LIST) || (obj->flags & CV_RANGE)));
    if (!indexed || !index_like(start_v) || !index_like(stop_v) || !index_like(step_v))
        return chat_undefined(env, "'%s object' has no slice of these indices", chat_type_name(obj));
    size_t cp_n = 0;
    const uint32_t *cps = obj->kind == CV_STRING ? code_points(env, obj, &cp_n) : NULL;
    const int64_t n = obj->kind == CV_STRING ? (int64_t)cp_n : (int64_t)obj->u.list->n;
    int64_t start, stop, stride;
    slice_indices(env, pos, start_v, stop_v, step_v, n, &start, &stop, &stride);
    int64_t count = 0;
    if (stride > 0 && start < stop) count = (stop - start - 1) / stride + 1;
    if (stride < 0 && stop < start) count = (start - stop - 1) / (-stride) + 1;
    if (obj->kind == CV_STRING) {
        uint32_t *picked = chat_alloc(env, ((size_t)count + 1) * sizeof *picked);
        for (int64_t k = 0; k < count; k++) picked[k] = cps[start + k * stride];
        return from_code_points(env, picked, (size_t)count);
    }
    chat_value r = chat_list_new(env, (size_t)count, obj->flags & (CV_TUPLE | CV_VIEW | CV_RANGE));
    for (int64_t k = 0; k < count; k++) r.u.list->items[k] = obj->u.list->items[start + k * stride];
    return r;
}

chat_value chat_iterate(chat_env *env, uint32_t pos, const chat_value *v) {
    switch ((chat_kind)v->kind) {
    case CV_LIST: return *v;
    case CV_UNDEFINED:
        if (v->flags & CV_UNSAFE) chat_fail_undefined(env, pos, v);
        return chat_list_new(env, 0, 0);
    case CV_STRING: {
        size_t n;
        const uint32_t *cps = code_points(env, v, &n);
        chat_value l = chat_list_new(env, n, 0);
        size_t i = 0;
        for (size_t k = 0; k < n; k++) {
            const size_t start = i;
            chat_utf8_next(v->u.s, &i);
            l.u.list->items[k] = chat_str(v->u.s + start, i - start);
        }
        (void)cps;
        return l;
    }
    case CV_DICT: {
        const chat_dict *d = v->u.dict;
        chat_value l = chat_list_new(env, d->n, 0);
        for (size_t k = 0; k < d->n; k++) l.u.list->items[k] = chat_str(d->keys[k], d->key_lens[k]);
        return l;
    }
    default:
        chat_fail(env, ATTN_ERR_INVALID_ARGUMENT, pos, "'%s' object is not iterable", chat_type_name(v));
    }
}

static chat_value items_of(chat_env *env, const chat_dict *d, uint8_t flags) {
    chat_value l = chat_list_new(env, d->n, flags);
    for (size_t k = 0; k < d->n; k++) {
        chat_value pair = chat_list_new(env, 2, CV_TUPLE);
        pair.u.list->items[0] = chat_str(d->keys[k], d->key_lens[k]);
        pair.u.list->items[1] = d->values[k];
        l.u.list->items[k] = pair;
    }
    return l;
}

/* ------------------------------------------------- attributes, methods */

typedef struct method {
    const char *name;
    chat_builtin id;
} method;

static const method str_methods[] = {
    {"startswith", CB_STARTSWITH}, {"endswith", CB_ENDSWITH}, {"split", CB_SPLIT}, {"rsplit", CB_RSPLIT},
    {"strip", CB_STRIP}, {"lstrip", CB_LSTRIP}, {"rstrip", CB_RSTRIP}, {"upper", CB_UPPER}, {"lower", CB_LOWER},
    {"title", CB_TITLE}, {"capitalize", CB_CAPITALIZE}, {"replace", CB_REPLACE}, {"find", CB_FIND},
    {"count", CB_COUNT}, {NULL, 0}};
static const char *const str_unimplemented[] = {
    "casefold", "center", "encode", "expandtabs", "format", "format_map", "index", "isalnum", "isalpha", "isascii",
    "isdecimal", "isdigit", "isidentifier", "islower", "isnumeric", "isprintable", "isspace", "istitle", "isupper",
    "join", "ljust", "maketrans", "partition", "removeprefix", "removesuffix", "rfind", "rindex", "rjust",
    "rpartition", "splitlines", "swapcase", "translate", "zfill", NULL};
static const method dict_methods[] = {{"items", CB_ITEMS}, {"keys", CB_KEYS}, {"values", CB_VALUES}, {"get", CB_GET},
                                      {NULL, 0}};
static const char *const dict_mutating[] = {"clear", "pop", "popitem", "setdefault", "update", NULL};
static const char *const dict_unimplemented[] = {"copy", "fromkeys", NULL};
static const char *const list_mutating[] = {"append", "extend", "insert", "pop", "remove", "reverse", "sort", "clear", NULL};
static const char *const list_unimplemented[] = {"index", "count", "copy", NULL};
static const char *const number_attributes[] = {"real", "imag", "conjugate", "bit_length", "bit_count", "to_bytes",
                                                "from_bytes", "numerator", "denominator", "as_integer_ratio",
                                                "is_integer", "hex", "fromhex", NULL};

static bool named(const char *name, size_t n, const char *s) { return strlen(s) == n && memcmp(name, s, n) == 0; }
static bool in_names(const char *name, size_t n, const char *const *names) {
    for (; *names; names++)
        if (named(name, n, *names)) return true;
    return false;
}

#define CB_UNIMPLEMENTED ((chat_builtin)-1)

static chat_value function(chat_env *env, chat_builtin id, const char *owner, const char *name, size_t n,
                           const chat_value *self) {
    chat_function *fn = chat_alloc(env, sizeof *fn);
    fn->id = id;
    char label[96];
    snprintf(label, sizeof label, "%s%s%.*s", owner, *owner ? "." : "", (int)(n < 60 ? n : 60), name);
    fn->name = chat_str_copy(env, label, strlen(label)).u.s;
    if (self) fn->self = *self;
    return (chat_value){.kind = CV_FUNCTION, .u.fn = fn};
}

/* The method name of obj (a str, dict or list), or kind CV_NONE if it has none. */
static chat_value method_of(chat_env *env, const chat_value *obj, const char *name, size_t n) {
    const char *owner = obj->kind == CV_STRING ? "str" : obj->kind == CV_DICT ? "dict" : "list";
    const method *table = obj->kind == CV_STRING ? str_methods : obj->kind == CV_DICT ? dict_methods : NULL;
    for (const method *m = table; m && m->name; m++)
        if (named(name, n, m->name)) return function(env, m->id, owner, name, n, obj);
    const char *const *mutating = obj->kind == CV_DICT ? dict_mutating : obj->kind == CV_LIST ? list_mutating : NULL;
    if (mutating && in_names(name, n, mutating)) return function(env, CB_MUTATING, owner, name, n, obj);
    const char *const *unimplemented = obj->kind == CV_STRING ? str_unimplemented
                                       : obj->kind == CV_DICT ? dict_unimplemented
                                                              : list_unimplemented;
    if (in_names(name, n, unimplemented)) return function(env, CB_UNIMPLEMENTED, owner, name, n, obj);
    return chat_none();
}

static chat_value loop_attribute(chat_env *env, uint32_t pos, const chat_loop *loop, const char *name, size_t n) {
    const int64_t i = loop->index0, length = (int64_t)loop->items.u.list->n;
    if (named(name, n, "index0")) return chat_int(i);
    if (named(name, n, "index")) return chat_int(i + 1);
    if (named(name, n, "revindex0")) return chat_int(length - i - 1);
    if (named(name, n, "revindex")) return chat_int(length - i);
    if (named(name, n, "first")) return chat_bool(i == 0);
    if (named(name, n, "last")) return chat_bool(i == length - 1);
    if (named(name, n, "length")) return chat_int(length);
    if (named(name, n, "depth")) return chat_int(1);
    if (named(name, n, "depth0")) return chat_int(0);
    if (named(name, n, "previtem"))
        return i > 0 ? loop->items.u.list->items[i - 1] : chat_undefined(env, "there is no previous item");
    if (named(name, n, "nextitem"))
        return i + 1 < length ? loop->items.u.list->items[i + 1] : chat_undefined(env, "there is no next item");
    if (named(name, n, "cycle") || named(name, n, "changed"))
        chat_fail(env, ATTN_ERR_UNSUPPORTED, pos, "loop.%.*s is not implemented", (int)n, name);
    return chat_undefined(env, "'LoopContext object' has no attribute '%.*s'", (int)(n < 60 ? n : 60), name);
}

chat_value chat_getattr(chat_env *env, uint32_t pos, const chat_value *obj, const char *name, size_t n) {
    if (obj->kind == CV_UNDEFINED) chat_fail_undefined(env, pos, obj);
    if (n >= 2 && name[0] == '_' && name[1] == '_') {
        chat_value u = chat_undefined(env, "access to attribute '%.*s' of '%s' object is unsafe", (int)(n < 60 ? n : 60),
                                      name, chat_type_name(obj));
        u.flags |= CV_UNSAFE;
        return u;
    }
    switch ((chat_kind)obj->kind) {
    case CV_STRING:
    case CV_DICT:
    case CV_LIST: {
        if (!(obj->kind == CV_LIST && (obj->flags & CV_NOT_A_LIST))) {
            const chat_value m = method_of(env, obj, name, n);
            if (m.kind == CV_FUNCTION) return m;
        }
        if (obj->kind == CV_DICT) {
            const chat_value *v = chat_dict_find(obj->u.dict, name, n);
            if (v) return *v;
        }
        break;
    }
    case CV_NAMESPACE: {
        const chat_value *v = chat_dict_find(obj->u.dict, name, n);
        if (v) return *v;
        break;
    }
    case CV_LOOP: return loop_attribute(env, pos, obj->u.loop, name, n);
    case CV_NONE:
    case CV_BOOL:
    case CV_INT:
    case CV_FLOAT:
        if (obj->kind != CV_NONE && in_names(name, n, number_attributes))
            chat_fail(env, ATTN_ERR_UNSUPPORTED, pos, "the attribute '%.*s' of a number is not implemented", (int)n, name);
        break;
    default: break;
    }
    return chat_undefined(env, "'%s object' has no attribute '%.*s'", chat_type_name(obj), (int)(n < 60 ? n : 60), name);
}

chat_value chat_getitem(chat_env *env, uint32_t pos, const chat_value *obj, const chat_value *key) {
    if (obj->kind == CV_UNDEFINED) chat_fail_undefined(env, pos, obj);
    if (obj->kind == CV_DICT && key->kind == CV_STRING) {
        const chat_value *v = chat_dict_find(obj->u.dict, key->u.s, key->n);
        if (v) return *v;
    }
    const bool indexed = obj->kind == CV_STRING ||
                         (obj->kind == CV_LIST && (!(obj->flags & CV_NOT_A_LIST) || (obj->flags & CV_RANGE)));
    if (indexed && (key->kind == CV_INT || key->kind == CV_BOOL)) {
        int64_t i = key->kind == CV_BOOL ? key->u.b : key->u.i;
        if (obj->kind == CV_LIST) {
            const int64_t n = (int64_t)obj->u.list->n;
            if (i < 0) i += n;
            if (i >= 0 && i < n) return obj->u.list->items[i];
        } else {
            size_t count;
            const uint32_t *cps = code_points(env, obj, &count);
            if (i < 0) i += (int64_t)count;
            if (i >= 0 && i < (int64_t)count) return from_code_points(env, cps + i, 1);
        }
        return chat_undefined(env, "'%s object' has no element %lld", chat_type_name(obj), (long long)key->u.i);
    }
    /* jinja2 tries the attribute of that name next. */
    if (key->kind == CV_STRING && obj->kind != CV_DICT) return chat_getattr(env, pos, obj, key->u.s, key->n);
    if (key->kind == CV_STRING && obj->kind == CV_DICT) {
        const chat_value m = method_of(env, obj, key->u.s, key->n);
        if (m.kind == CV_FUNCTION) return m;
        return chat_undefined(env, "'dict object' has no attribute '%.*s'", (int)(key->n < 60 ? key->n : 60), key->u.s);
    }
    return chat_undefined(env, "'%s object' has no element of that key", chat_type_name(obj));
}

/* ------------------------------------------------------------ globals */

/* The globals, as function objects made once (read-only: renders share them). */
static const chat_function globals[] = {
    {CB_RAISE_EXCEPTION, "raise_exception", {0}}, {CB_RANGE, "range", {0}}, {CB_NAMESPACE, "namespace", {0}},
    {CB_DICT, "dict", {0}}, {CB_STRFTIME_NOW, "strftime_now", {0}}, {CB_UNIMPLEMENTED, "lipsum", {0}},
    {CB_UNIMPLEMENTED, "cycler", {0}}, {CB_UNIMPLEMENTED, "joiner", {0}}};

chat_value chat_global(chat_env *env, const char *name, size_t n) {
    for (size_t k = 0; k < sizeof globals / sizeof globals[0]; k++)
        if (named(name, n, globals[k].name)) return (chat_value){.kind = CV_FUNCTION, .u.fn = &globals[k]};
    return chat_undefined(env, "'%.*s' is undefined", (int)(n < 60 ? n : 60), name);
}

/* A dict from namespace()/dict()'s arguments: an optional mapping, then keywords. */
static chat_value dict_from_args(chat_env *env, uint32_t pos, const char *what, const chat_args *a, bool namespace) {
    if (a->n > 1) chat_fail(env, ATTN_ERR_INVALID_ARGUMENT, pos, "%s expected at most 1 argument, got %zu", what, a->n);
    chat_value d = chat_dict_new(env, a->n_kwargs + 4);
    if (a->n) {
        if (a->args[0].kind != CV_DICT)
            chat_fail(env, ATTN_ERR_UNSUPPORTED, pos, "%s from a %s is not implemented (give a dict or keywords)", what,
                      chat_type_name(&a->args[0]));
        const chat_dict *from = a->args[0].u.dict;
        for (size_t k = 0; k < from->n; k++) chat_dict_set(env, d.u.dict, from->keys[k], from->key_lens[k], from->values[k]);
    }
    for (size_t k = 0; k < a->n_kwargs; k++) chat_dict_set(env, d.u.dict, a->names[k], a->name_lens[k], a->kwargs[k]);
    if (namespace)
        for (size_t k = 0; k < d.u.dict->n; k++)
            if (d.u.dict->key_lens[k] && d.u.dict->keys[k][0] == '_')
                chat_fail(env, ATTN_ERR_INVALID_ARGUMENT, pos,
                          "chat templates cannot store underscore-prefixed attributes on a namespace");
    if (namespace) d.kind = CV_NAMESPACE;
    return d;
}

static chat_value range(chat_env *env, uint32_t pos, const chat_args *a) {
    check_args(env, pos, "range()", a, 3, NULL);
    if (!a->n) chat_fail(env, ATTN_ERR_INVALID_ARGUMENT, pos, "range expected at least 1 argument, got 0");
    int64_t start = 0, stop, stride = 1;
    if (a->n == 1) stop = int_arg(env, pos, "range()", &a->args[0]);
    else {
        start = int_arg(env, pos, "range()", &a->args[0]);
        stop = int_arg(env, pos, "range()", &a->args[1]);
        if (a->n == 3) stride = int_arg(env, pos, "range()", &a->args[2]);
    }
    if (!stride) chat_fail(env, ATTN_ERR_INVALID_ARGUMENT, pos, "range() arg 3 must not be zero");
    int64_t count = 0;
    if (stride > 0 && start < stop) count = (int64_t)(((uint64_t)stop - (uint64_t)start - 1) / (uint64_t)stride) + 1;
    if (stride < 0 && stop < start) count = (int64_t)(((uint64_t)start - (uint64_t)stop - 1) / (uint64_t)(-stride)) + 1;
    if (count > 100000 || count < 0)
        chat_fail(env, ATTN_ERR_INVALID_ARGUMENT, pos,
                  "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    chat_value l = chat_list_new(env, (size_t)count, CV_VIEW | CV_RANGE);
    for (int64_t k = 0; k < count; k++) l.u.list->items[k] = chat_int(start + k * stride);
    return l;
}

static chat_value strftime_now(chat_env *env, uint32_t pos, const chat_args *a) {
    check_args(env, pos, "strftime_now()", a, 1, NULL);
    const chat_value *fmt = str_arg(env, pos, "strftime_now()", need(env, pos, "strftime_now()", a, 0, "format"));
    for (size_t i = 0; i + 1 < fmt->n; i++)
        if (fmt->u.s[i] == '%') {
            const char c = fmt->u.s[++i];
            if (c == 'f' || c == 'z' || c == 'Z' || c == ':' || c == 'G' || c == 'u' || c == 'V')
                chat_fail(env, ATTN_ERR_UNSUPPORTED, pos, "strftime_now: the directive %%%c is not implemented", c);
        }
    char format[512], out[1024];
    if (fmt->n >= sizeof format) chat_fail(env, ATTN_ERR_UNSUPPORTED, pos, "strftime_now: a format of %zu bytes", fmt->n);
    memcpy(format, fmt->u.s, fmt->n);
    format[fmt->n] = 0;
    const time_t now = time(NULL);
    struct tm local;
    if (!localtime_r(&now, &local)) chat_fail(env, ATTN_ERR_INVALID_ARGUMENT, pos, "strftime_now: no local time");
    const size_t n = strftime(out, sizeof out, format, &local);
    if (!n && fmt->n) chat_fail(env, ATTN_ERR_UNSUPPORTED, pos, "strftime_now: the text is longer than 1 KiB");
    return chat_str_copy(env, out, n);
}

static bool prefix_match(chat_env *env, uint32_t pos, const chat_value *s, const chat_value *affix, bool end) {
    if (affix->kind == CV_LIST && (affix->flags & CV_TUPLE)) {
        for (size_t k = 0; k < affix->u.list->n; k++)
            if (prefix_match(env, pos, s, &affix->u.list->items[k], end)) return true;
        return false;
    }
    str_arg(env, pos, end ? "endswith" : "startswith", affix);
    if (affix->n > s->n) return false;
    return memcmp(s->u.s + (end ? s->n - affix->n : 0), affix->u.s, affix->n) == 0;
}

chat_value chat_call_builtin(chat_env *env, uint32_t pos, const chat_function *fn, const chat_args *a) {
    const chat_value *self = &fn->self;
    switch (fn->id) {
    case CB_RAISE_EXCEPTION: {
        const chat_value *m = need(env, pos, "raise_exception()", a, 0, "message");
        const chat_value text = chat_str_of(env, pos, m);
        chat_fail(env, ATTN_ERR_INVALID_ARGUMENT, pos, "the template raised an error: %.*s", (int)text.n, text.u.s);
    }
    case CB_RANGE: return range(env, pos, a);
    case CB_NAMESPACE: return dict_from_args(env, pos, "namespace()", a, true);
    case CB_DICT: return dict_from_args(env, pos, "dict()", a, false);
    case CB_STRFTIME_NOW: return strftime_now(env, pos, a);
    case CB_STARTSWITH:
    case CB_ENDSWITH: {
        check_args(env, pos, fn->name, a, 1, NULL);
        if (a->n != 1)
            chat_fail(env, ATTN_ERR_UNSUPPORTED, pos, "%s() with start and end positions is not implemented", fn->name);
        return chat_bool(prefix_match(env, pos, self, &a->args[0], fn->id == CB_ENDSWITH));
    }
    case CB_SPLIT:
    case CB_RSPLIT: return split(env, pos, self, a, fn->id == CB_RSPLIT);
    case CB_STRIP:
    case CB_LSTRIP:
    case CB_RSTRIP: {
        check_args(env, pos, fn->name, a, 1, NULL);
        const chat_value *chars = a->n ? &a->args[0] : NULL;
        if (chars && chars->kind != CV_NONE) str_arg(env, pos, fn->name, chars);
        return strip(env, self, chars, fn->id != CB_RSTRIP, fn->id != CB_LSTRIP);
    }
    case CB_UPPER:
    case CB_LOWER:
    case CB_TITLE:
    case CB_CAPITALIZE:
        check_args(env, pos, fn->name, a, 0, NULL);
        return change_case(env, pos, self,
                           fn->id == CB_UPPER ? TO_UPPER : fn->id == CB_LOWER ? TO_LOWER : fn->id == CB_TITLE ? TO_TITLE : 3);
    case CB_REPLACE: {
        check_args(env, pos, fn->name, a, 3, NULL);
        const int64_t count = a->n == 3 ? int_arg(env, pos, fn->name, &a->args[2]) : -1;
        return replace(env, pos, self, need(env, pos, fn->name, a, 0, "old"), need(env, pos, fn->name, a, 1, "new"), count);
    }
    case CB_FIND:
    case CB_COUNT: {
        check_args(env, pos, fn->name, a, 1, NULL);
        const chat_value *sub = str_arg(env, pos, fn->name, need(env, pos, fn->name, a, 0, "sub"));
        size_t at, start = 0;
        if (fn->id == CB_FIND) return chat_int(find_bytes(self, 0, sub, &at) ? (int64_t)chat_utf8_count(self->u.s, at) : -1);
        if (!sub->n) return chat_int((int64_t)chat_utf8_count(self->u.s, self->n) + 1);
        int64_t count = 0;
        while (find_bytes(self, start, sub, &at)) count++, start = at + sub->n;
        return chat_int(count);
    }
    case CB_ITEMS: check_args(env, pos, fn->name, a, 0, NULL); return items_of(env, self->u.dict, CV_VIEW);
    case CB_KEYS:
    case CB_VALUES: {
        check_args(env, pos, fn->name, a, 0, NULL);
        const chat_dict *d = self->u.dict;
        chat_value l = chat_list_new(env, d->n, CV_VIEW);
        for (size_t k = 0; k < d->n; k++)
            l.u.list->items[k] = fn->id == CB_KEYS ? chat_str(d->keys[k], d->key_lens[k]) : d->values[k];
        return l;
    }
    case CB_GET: {
        check_args(env, pos, fn->name, a, 2, NULL);
        const chat_value *key = need(env, pos, fn->name, a, 0, "key");
        const chat_value *v = key->kind == CV_STRING ? chat_dict_find(self->u.dict, key->u.s, key->n) : NULL;
        return v ? *v : a->n == 2 ? a->args[1] : chat_none();
    }
    case CB_MUTATING:
        chat_fail(env, ATTN_ERR_INVALID_ARGUMENT, pos, "access to attribute '%s' is unsafe (the sandbox is immutable)",
                  fn->name);
    }
    chat_fail(env, ATTN_ERR_UNSUPPORTED, pos, "%s() is not implemented", fn->name);
}

/* ------------------------------------------------------------ tests */

typedef enum test_id {
    T_BOOLEAN, T_CALLABLE, T_DEFINED, T_DIVISIBLEBY, T_EQ, T_EVEN, T_FALSE, T_FLOAT, T_GE, T_GT, T_IN, T_INTEGER,
    T_ITERABLE, T_LE, T_LOWER, T_LT, T_MAPPING, T_NE, T_NONE, T_NUMBER, T_ODD, T_SAMEAS, T_SEQUENCE, T_STRING,
    T_TRUE, T_UNDEFINED, T_UPPER, N_TESTS
} test_id;

static const struct {
    const char *name;
    test_id id;
} test_names[] = {{"boolean", T_BOOLEAN}, {"callable", T_CALLABLE}, {"defined", T_DEFINED},
                  {"divisibleby", T_DIVISIBLEBY}, {"eq", T_EQ}, {"equalto", T_EQ}, {"even", T_EVEN},
                  {"false", T_FALSE}, {"float", T_FLOAT}, {"ge", T_GE}, {"gt", T_GT}, {"greaterthan", T_GT},
                  {"in", T_IN}, {"integer", T_INTEGER}, {"iterable", T_ITERABLE}, {"le", T_LE},
                  {"lessthan", T_LT}, {"lower", T_LOWER}, {"lt", T_LT}, {"mapping", T_MAPPING}, {"ne", T_NE},
                  {"none", T_NONE}, {"number", T_NUMBER}, {"odd", T_ODD}, {"sameas", T_SAMEAS},
                  {"sequence", T_SEQUENCE}, {"string", T_STRING}, {"true", T_TRUE}, {"undefined", T_UNDEFINED},
                  {"upper", T_UPPER}};
static const char *const tests_unimplemented[] = {"escaped", "filter", "test", NULL};

int chat_test_lookup(const char *name, size_t n) {
    for (size_t k = 0; k < sizeof test_names / sizeof test_names[0]; k++)
        if (named(name, n, test_names[k].name)) return (int)test_names[k].id;
    return in_names(name, n, tests_unimplemented) ? -1 : -2;
}

static const char *test_name(int id) {
    for (size_t k = 0; k < sizeof test_names / sizeof test_names[0]; k++)
        if ((int)test_names[k].id == id) return test_names[k].name;
    return "?";
}

static bool is_integer_value(const chat_value *v) { return v->kind == CV_INT; }

bool chat_apply_test(chat_env *env, uint32_t pos, int test, const chat_value *v, const chat_args *a) {
    const char *what = test_name(test);
    const size_t wanted = test == T_DIVISIBLEBY || test == T_EQ || test == T_NE || test == T_LT || test == T_LE ||
                                  test == T_GT || test == T_GE || test == T_IN || test == T_SAMEAS
                              ? 1
                              : 0;
    if (a->n != wanted || a->n_kwargs)
        chat_fail(env, ATTN_ERR_INVALID_ARGUMENT, pos, "the test '%s' takes %zu argument%s", what, wanted,
                  wanted == 1 ? "" : "s");
    const chat_value *x = wanted ? &a->args[0] : NULL;
    switch ((test_id)test) {
    case T_DEFINED: return v->kind != CV_UNDEFINED;
    case T_UNDEFINED: return v->kind == CV_UNDEFINED;
    case T_NONE: return v->kind == CV_NONE;
    case T_BOOLEAN: return v->kind == CV_BOOL;
    case T_FALSE: return v->kind == CV_BOOL && !v->u.b;
    case T_TRUE: return v->kind == CV_BOOL && v->u.b;
    case T_INTEGER: return is_integer_value(v);
    case T_FLOAT: return v->kind == CV_FLOAT;
    case T_NUMBER: return v->kind == CV_INT || v->kind == CV_FLOAT || v->kind == CV_BOOL;
    case T_STRING: return v->kind == CV_STRING;
    case T_MAPPING: return v->kind == CV_DICT;
    case T_CALLABLE: return v->kind == CV_FUNCTION;
    case T_ITERABLE: return v->kind == CV_STRING || v->kind == CV_LIST || v->kind == CV_DICT || v->kind == CV_UNDEFINED ||
                            v->kind == CV_LOOP;
    case T_SEQUENCE:
        return v->kind == CV_STRING || v->kind == CV_DICT || v->kind == CV_UNDEFINED ||
               (v->kind == CV_LIST && (!(v->flags & CV_NOT_A_LIST) || (v->flags & CV_RANGE)));
    case T_ODD:
    case T_EVEN:
    case T_DIVISIBLEBY: {
        if (v->kind == CV_UNDEFINED) chat_fail_undefined(env, pos, v);
        if (v->kind != CV_INT && v->kind != CV_BOOL)
            chat_fail(env, ATTN_ERR_UNSUPPORTED, pos, "the test '%s' on a %s is not implemented", what, chat_type_name(v));
        const int64_t i = v->kind == CV_BOOL ? v->u.b : v->u.i;
        if (test == T_ODD) return i % 2 != 0;
        if (test == T_EVEN) return i % 2 == 0;
        const int64_t d = int_arg(env, pos, what, x);
        if (!d) chat_fail(env, ATTN_ERR_INVALID_ARGUMENT, pos, "integer division or modulo by zero");
        return d == -1 || i % d == 0;
    }
    case T_LOWER:
    case T_UPPER: {
        /* str(value).islower() / isupper(): cased characters, all of one case. */
        const chat_value s = chat_str_of(env, pos, v);
        bool any = false;
        size_t i = 0;
        while (i < s.n) {
            const uint32_t c = chat_utf8_next(s.u.s, &i);
            for (size_t r = 0; r < sizeof cased_ranges / sizeof cased_ranges[0]; r++)
                if (c >= cased_ranges[r][0] && c <= cased_ranges[r][1])
                    chat_fail(env, ATTN_ERR_UNSUPPORTED, pos, "the test '%s' on U+%04X is not implemented", what, (unsigned)c);
            if (test == T_LOWER ? latin1_upper(c) : latin1_lower(c)) return false;
            any |= is_cased(c);
        }
        return any;
    }
    case T_EQ: return chat_equal(v, x);
    case T_NE: return !chat_equal(v, x);
    case T_LT:
    case T_LE:
    case T_GT:
    case T_GE: {
        const int c = chat_compare(env, pos, v, x);
        if (c == 2) return false;
        return test == T_LT ? c < 0 : test == T_LE ? c <= 0 : test == T_GT ? c > 0 : c >= 0;
    }
    case T_IN: {
        /* value in x, as the in operator. */
        if (x->kind == CV_STRING) {
            if (v->kind != CV_STRING)
                chat_fail(env, ATTN_ERR_INVALID_ARGUMENT, pos, "'in <string>' requires string as left operand");
            size_t at;
            return find_bytes(x, 0, v, &at);
        }
        if (x->kind == CV_DICT) return v->kind == CV_STRING && chat_dict_find(x->u.dict, v->u.s, v->n);
        const chat_value items = chat_iterate(env, pos, x);
        for (size_t k = 0; k < items.u.list->n; k++)
            if (chat_equal(v, &items.u.list->items[k])) return true;
        return false;
    }
    case T_SAMEAS:
        /* Python's "is": None, True and False are singletons; small ints
         * and equal strings may or may not be the same object. */
        if (v->kind == CV_NONE || x->kind == CV_NONE) return v->kind == x->kind;
        if (v->kind == CV_BOOL || x->kind == CV_BOOL) return v->kind == x->kind && v->u.b == x->u.b;
        if (v->kind == CV_LIST && x->kind == CV_LIST) return v->u.list == x->u.list;
        if ((v->kind == CV_DICT || v->kind == CV_NAMESPACE) && v->kind == x->kind) return v->u.dict == x->u.dict;
        chat_fail(env, ATTN_ERR_UNSUPPORTED, pos, "the test 'sameas' on a %s (object identity) is not implemented",
                  chat_type_name(v));
    case N_TESTS: break;
    }
    chat_fail(env, ATTN_ERR_INTERNAL, pos, "a test of unknown index %d", test);
}

/* ------------------------------------------------------------ filters */

typedef enum filter_id {
    F_ABS, F_CAPITALIZE, F_COUNT, F_DEFAULT, F_FIRST, F_FLOAT, F_INT, F_ITEMS, F_JOIN, F_LAST, F_LENGTH, F_LIST,
    F_LOWER, F_MAP, F_REJECT, F_REJECTATTR, F_REPLACE, F_REVERSE, F_SAFE, F_SELECT, F_SELECTATTR, F_STRING,
    F_TITLE, F_TOJSON, F_TRIM, F_UPPER, N_FILTERS
} filter_id;

static const struct {
    const char *name;
    filter_id id;
} filter_names[] = {{"abs", F_ABS}, {"capitalize", F_CAPITALIZE}, {"count", F_COUNT}, {"d", F_DEFAULT},
                    {"default", F_DEFAULT}, {"first", F_FIRST}, {"float", F_FLOAT}, {"int", F_INT},
                    {"items", F_ITEMS}, {"join", F_JOIN}, {"last", F_LAST}, {"length", F_LENGTH}, {"list", F_LIST},
                    {"lower", F_LOWER}, {"map", F_MAP}, {"reject", F_REJECT}, {"rejectattr", F_REJECTATTR},
                    {"replace", F_REPLACE}, {"reverse", F_REVERSE}, {"safe", F_SAFE}, {"select", F_SELECT},
                    {"selectattr", F_SELECTATTR}, {"string", F_STRING}, {"title", F_TITLE}, {"tojson", F_TOJSON},
                    {"trim", F_TRIM}, {"upper", F_UPPER}};
static const char *const filters_unimplemented[] = {
    "attr", "batch", "center", "dictsort", "e", "escape", "filesizeformat", "forceescape", "format", "groupby",
    "indent", "max", "min", "pprint", "random", "round", "slice", "sort", "striptags", "sum", "truncate", "unique",
    "urlencode", "urlize", "wordcount", "wordwrap", "xmlattr", NULL};

int chat_filter_lookup(const char *name, size_t n) {
    for (size_t k = 0; k < sizeof filter_names / sizeof filter_names[0]; k++)
        if (named(name, n, filter_names[k].name)) return (int)filter_names[k].id;
    return in_names(name, n, filters_unimplemented) ? -1 : -2;
}

static size_t length_of(chat_env *env, uint32_t pos, const chat_value *v) {
    switch ((chat_kind)v->kind) {
    case CV_STRING: return chat_utf8_count(v->u.s, v->n);
    case CV_LIST:
        if (v->flags & CV_GENERATOR)
            chat_fail(env, ATTN_ERR_INVALID_ARGUMENT, pos, "object of type 'generator' has no len()");
        return v->u.list->n;
    case CV_DICT: return v->u.dict->n;
    case CV_UNDEFINED: return 0;
    default:
        chat_fail(env, ATTN_ERR_INVALID_ARGUMENT, pos, "object of type '%s' has no len()", chat_type_name(v));
    }
}

/* An attribute path "a.b.0" of v, as jinja2's make_attrgetter reads it. */
static chat_value attribute_path(chat_env *env, uint32_t pos, const chat_value *v, const chat_value *path) {
    if (path->kind == CV_INT) return chat_getitem(env, pos, v, path);
    str_arg(env, pos, "attribute", path);
    chat_value cur = *v;
    size_t start = 0;
    while (start <= path->n) {
        size_t end = start;
        while (end < path->n && path->u.s[end] != '.') end++;
        const char *part = path->u.s + start;
        const size_t len = end - start;
        bool digits = len > 0;
        for (size_t k = 0; k < len; k++) digits &= part[k] >= '0' && part[k] <= '9';
        const chat_value key = digits ? chat_int(strtoll(part, NULL, 10)) : chat_str(part, len);
        cur = chat_getitem(env, pos, &cur, &key);
        start = end + 1;
    }
    return cur;
}

/* select / reject / selectattr / rejectattr. */
static chat_value select_items(chat_env *env, uint32_t pos, const chat_value *seq, const chat_args *a, bool with_attr,
                               bool keep_passing) {
    if (a->n_kwargs) chat_fail(env, ATTN_ERR_UNSUPPORTED, pos, "keyword arguments to select filters are not implemented");
    size_t k = 0;
    const chat_value *attribute = NULL;
    if (with_attr) {
        if (!a->n) chat_fail(env, ATTN_ERR_INVALID_ARGUMENT, pos, "missing parameter for attribute name");
        attribute = &a->args[k++];
    }
    int test = -3;
    if (k < a->n) {
        const chat_value *name = str_arg(env, pos, "the test's name", &a->args[k++]);
        test = chat_test_lookup(name->u.s, name->n);
        if (test == -1) chat_fail(env, ATTN_ERR_UNSUPPORTED, pos, "the test '%.*s' is not implemented", (int)name->n, name->u.s);
        if (test < 0) chat_fail(env, ATTN_ERR_INVALID_ARGUMENT, pos, "no test named '%.*s'", (int)name->n, name->u.s);
    }
    /* (a filter with no arguments has args NULL: no offset applied to it) */
    const chat_args test_args = {.args = a->n > k ? a->args + k : NULL, .n = a->n - k};
    const chat_value items = chat_iterate(env, pos, seq);
    chat_value out = chat_list_new(env, items.u.list->n, CV_GENERATOR);
    size_t n = 0;
    for (size_t i = 0; i < items.u.list->n; i++) {
        const chat_value *item = &items.u.list->items[i];
        const chat_value subject = attribute ? attribute_path(env, pos, item, attribute) : *item;
        const bool pass = test >= 0 ? chat_apply_test(env, pos, test, &subject, &test_args) : chat_truthy(&subject);
        if (pass == keep_passing) out.u.list->items[n++] = *item;
    }
    out.u.list->n = n;
    return out;
}

static chat_value map_items(chat_env *env, uint32_t pos, const chat_value *seq, const chat_args *a) {
    const chat_value items = chat_iterate(env, pos, seq);
    chat_value out = chat_list_new(env, items.u.list->n, CV_GENERATOR);
    const chat_value *attribute = arg(a, SIZE_MAX, "attribute");
    if (attribute) {
        static const char *const names[] = {"attribute", "default", NULL};
        check_args(env, pos, "map()", a, 0, names);
        const chat_value *fallback = arg(a, SIZE_MAX, "default");
        for (size_t i = 0; i < items.u.list->n; i++) {
            chat_value v = attribute_path(env, pos, &items.u.list->items[i], attribute);
            if (v.kind == CV_UNDEFINED && fallback) v = *fallback;
            out.u.list->items[i] = v;
        }
        return out;
    }
    if (!a->n) chat_fail(env, ATTN_ERR_INVALID_ARGUMENT, pos, "map requires a filter argument");
    const chat_value *name = str_arg(env, pos, "map's filter", &a->args[0]);
    const int filter = chat_filter_lookup(name->u.s, name->n);
    if (filter == -1) chat_fail(env, ATTN_ERR_UNSUPPORTED, pos, "the filter '%.*s' is not implemented", (int)name->n, name->u.s);
    if (filter < 0) chat_fail(env, ATTN_ERR_INVALID_ARGUMENT, pos, "no filter named '%.*s'", (int)name->n, name->u.s);
    const chat_args rest = {a->args + 1, a->n - 1, a->names, a->name_lens, a->kwargs, a->n_kwargs};
    for (size_t i = 0; i < items.u.list->n; i++)
        out.u.list->items[i] = chat_apply_filter(env, pos, filter, &items.u.list->items[i], &rest);
    return out;
}

/* tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False) as transformers defines it. */
static chat_value tojson(chat_env *env, uint32_t pos, const chat_value *v, const chat_args *a) {
    static const char *const names[] = {"ensure_ascii", "indent", "separators", "sort_keys", NULL};
    check_args(env, pos, "tojson", a, 4, names);
    chat_json_style style = {0};
    const chat_value *ensure = arg(a, 0, "ensure_ascii"), *indent = arg(a, 1, "indent"),
                     *separators = arg(a, 2, "separators"), *sort = arg(a, 3, "sort_keys");
    style.ensure_ascii = ensure && chat_truthy(ensure);
    style.sort_keys = sort && chat_truthy(sort);
    if (indent && indent->kind != CV_NONE) {
        if (indent->kind == CV_STRING) {
            style.indent = indent->u.s;
            style.indent_len = indent->n;
        } else {
            const int64_t spaces = int_arg(env, pos, "tojson's indent", indent);
            const size_t count = spaces > 0 ? (size_t)(spaces < 1024 ? spaces : 1024) : 0;
            if (spaces > 1024) chat_fail(env, ATTN_ERR_UNSUPPORTED, pos, "tojson: an indent of more than 1024 spaces");
            char *s = chat_alloc(env, count + 1);
            memset(s, ' ', count);
            style.indent = s;
            style.indent_len = count;
        }
    }
    if (separators && separators->kind != CV_NONE) {
        if (separators->kind != CV_LIST || separators->u.list->n != 2 || separators->u.list->items[0].kind != CV_STRING ||
            separators->u.list->items[1].kind != CV_STRING)
            chat_fail(env, ATTN_ERR_INVALID_ARGUMENT, pos, "tojson: separators must be two strings");
        style.item_sep = separators->u.list->items[0].u.s;
        style.item_sep_len = separators->u.list->items[0].n;
        style.key_sep = separators->u.list->items[1].u.s;
        style.key_sep_len = separators->u.list->items[1].n;
    }
    chat_buf b = {0};
    chat_to_json(env, pos, v, &style, &b);
    return chat_str(b.p ? b.p : "", b.n);
}

/* int(value, default=0, base=10) and float(value, default=0.0). */
static chat_value to_number(chat_env *env, uint32_t pos, const chat_value *v, const chat_args *a, bool integer) {
    static const char *const int_names[] = {"default", "base", NULL}, *const float_names[] = {"default", NULL};
    check_args(env, pos, integer ? "int" : "float", a, integer ? 2 : 1, integer ? int_names : float_names);
    const chat_value *fallback = arg(a, 0, "default");
    const chat_value zero = integer ? chat_int(0) : chat_float(0.0);
    if (integer && arg(a, 1, "base") && int_arg(env, pos, "int's base", arg(a, 1, "base")) != 10)
        chat_fail(env, ATTN_ERR_UNSUPPORTED, pos, "the int filter with a base other than 10 is not implemented");
    switch ((chat_kind)v->kind) {
    case CV_INT: return integer ? *v : chat_float((double)v->u.i);
    case CV_BOOL: return integer ? chat_int(v->u.b) : chat_float(v->u.b);
    case CV_FLOAT:
        if (!integer) return *v;
        if (!isfinite(v->u.f) || fabs(v->u.f) >= 9.2e18) return fallback ? *fallback : zero;
        return chat_int((int64_t)v->u.f);
    case CV_STRING:
        chat_fail(env, ATTN_ERR_UNSUPPORTED, pos, "the %s filter on a string is not implemented", integer ? "int" : "float");
    default: return fallback ? *fallback : zero;
    }
}

chat_value chat_apply_filter(chat_env *env, uint32_t pos, int filter, const chat_value *v, const chat_args *a) {
    const char *const *none = NULL;
    switch ((filter_id)filter) {
    case F_SAFE: check_args(env, pos, "safe", a, 0, none); return *v;
    case F_STRING: check_args(env, pos, "string", a, 0, none); return chat_str_of(env, pos, v);
    case F_TRIM: {
        static const char *const names[] = {"chars", NULL};
        check_args(env, pos, "trim", a, 1, names);
        const chat_value s = chat_str_of(env, pos, v);
        const chat_value *chars = arg(a, 0, "chars");
        if (chars && chars->kind != CV_NONE) str_arg(env, pos, "trim's chars", chars);
        return strip(env, &s, chars, true, true);
    }
    case F_LENGTH:
    case F_COUNT: check_args(env, pos, "length", a, 0, none); return chat_int((int64_t)length_of(env, pos, v));
    case F_UPPER:
    case F_LOWER:
    case F_CAPITALIZE: {
        check_args(env, pos, "case filter", a, 0, none);
        const chat_value s = chat_str_of(env, pos, v);
        return change_case(env, pos, &s, filter == F_UPPER ? TO_UPPER : filter == F_LOWER ? TO_LOWER : 3);
    }
    case F_TITLE: {
        check_args(env, pos, "title", a, 0, none);
        const chat_value s = chat_str_of(env, pos, v);
        return title_filter(env, pos, &s);
    }
    case F_DEFAULT: {
        static const char *const names[] = {"default_value", "boolean", NULL};
        check_args(env, pos, "default", a, 2, names);
        const chat_value *fallback = arg(a, 0, "default_value"), *boolean = arg(a, 1, "boolean");
        const bool use = v->kind == CV_UNDEFINED || (boolean && chat_truthy(boolean) && !chat_truthy(v));
        return use ? (fallback ? *fallback : chat_str("", 0)) : *v;
    }
    case F_FIRST:
    case F_LAST: {
        check_args(env, pos, filter == F_FIRST ? "first" : "last", a, 0, none);
        const chat_value items = chat_iterate(env, pos, v);
        if (!items.u.list->n) return chat_undefined(env, "no %s item, sequence was empty", filter == F_FIRST ? "first" : "last");
        return items.u.list->items[filter == F_FIRST ? 0 : items.u.list->n - 1];
    }
    case F_LIST: {
        check_args(env, pos, "list", a, 0, none);
        const chat_value items = chat_iterate(env, pos, v);
        chat_value l = chat_list_new(env, items.u.list->n, 0);
        if (items.u.list->n) memcpy(l.u.list->items, items.u.list->items, items.u.list->n * sizeof(chat_value));
        return l;
    }
    case F_REVERSE: {
        check_args(env, pos, "reverse", a, 0, none);
        if (v->kind == CV_STRING) {
            size_t n;
            const uint32_t *cps = code_points(env, v, &n);
            uint32_t *rev = chat_alloc(env, (n + 1) * sizeof *rev);
            for (size_t k = 0; k < n; k++) rev[k] = cps[n - 1 - k];
            return from_code_points(env, rev, n);
        }
        /* reversed() of a sequence is an iterator; a generator is listed first. */
        const chat_value items = chat_iterate(env, pos, v);
        chat_value l = chat_list_new(env, items.u.list->n, v->kind == CV_LIST && (v->flags & CV_GENERATOR) ? 0 : CV_GENERATOR);
        for (size_t k = 0; k < items.u.list->n; k++) l.u.list->items[k] = items.u.list->items[items.u.list->n - 1 - k];
        return l;
    }
    case F_ITEMS:
        check_args(env, pos, "items", a, 0, none);
        if (v->kind == CV_UNDEFINED) return chat_list_new(env, 0, CV_GENERATOR);
        if (v->kind != CV_DICT)
            chat_fail(env, ATTN_ERR_INVALID_ARGUMENT, pos, "can only get item pairs from a mapping (got a %s)", chat_type_name(v));
        return items_of(env, v->u.dict, CV_GENERATOR);
    case F_JOIN: {
        static const char *const names[] = {"d", "attribute", NULL};
        check_args(env, pos, "join", a, 2, names);
        const chat_value *sep = arg(a, 0, "d"), *attribute = arg(a, 1, "attribute");
        const chat_value sep_text = sep ? chat_str_of(env, pos, sep) : chat_str("", 0);
        const chat_value items = chat_iterate(env, pos, v);
        chat_buf b = {0};
        for (size_t k = 0; k < items.u.list->n; k++) {
            if (k) chat_buf_put(env, &b, sep_text.u.s, sep_text.n);
            const chat_value item = attribute ? attribute_path(env, pos, &items.u.list->items[k], attribute) : items.u.list->items[k];
            chat_to_str(env, pos, &item, &b);
        }
        return chat_str(b.p ? b.p : "", b.n);
    }
    case F_MAP: return map_items(env, pos, v, a);
    case F_SELECT: return select_items(env, pos, v, a, false, true);
    case F_REJECT: return select_items(env, pos, v, a, false, false);
    case F_SELECTATTR: return select_items(env, pos, v, a, true, true);
    case F_REJECTATTR: return select_items(env, pos, v, a, true, false);
    case F_REPLACE: {
        static const char *const names[] = {"old", "new", "count", NULL};
        check_args(env, pos, "replace", a, 3, names);
        const chat_value s = chat_str_of(env, pos, v);
        const chat_value *count = arg(a, 2, "count");
        return replace(env, pos, &s, need(env, pos, "replace", a, 0, "old"), need(env, pos, "replace", a, 1, "new"),
                       count && count->kind != CV_NONE ? int_arg(env, pos, "replace's count", count) : -1);
    }
    case F_ABS:
        check_args(env, pos, "abs", a, 0, none);
        if (v->kind == CV_FLOAT) return chat_float(fabs(v->u.f));
        if (v->kind == CV_INT || v->kind == CV_BOOL) {
            const int64_t i = v->kind == CV_BOOL ? v->u.b : v->u.i;
            if (i == INT64_MIN) chat_fail(env, ATTN_ERR_UNSUPPORTED, pos, "integers beyond 64 bits are not implemented");
            return chat_int(i < 0 ? -i : i);
        }
        if (v->kind == CV_UNDEFINED) chat_fail_undefined(env, pos, v);
        chat_fail(env, ATTN_ERR_INVALID_ARGUMENT, pos, "bad operand type for abs(): '%s'", chat_type_name(v));
    case F_INT:
    case F_FLOAT: return to_number(env, pos, v, a, filter == F_INT);
    case F_TOJSON: return tojson(env, pos, v, a);
    case N_FILTERS: break;
    }
    chat_fail(env, ATTN_ERR_INTERNAL, pos, "a filter of unknown index %d", filter);
}
