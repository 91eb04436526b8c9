/*
 * chat.h — what the chat-template interpreter's files share (attn_chat.h):
 * chat_value.c (the arena, the values, JSON in and out, Python's str and
 * repr), chat_parse.c (the template's text into a tree), chat_eval.c (the
 * tree over a conversation into text), chat_builtins.c (the filters,
 * tests, methods and globals).
 *
 * Memory: everything a parse or a render makes comes from one arena
 * (chat_arena), freed whole at the end; values are never freed one by
 * one.  Errors: chat_fail() records the status and the message (with the
 * line and column of the construct) and jumps back to the entry point
 * (chat_env.jump), which frees the arena — nothing leaks, and no caller in
 * between checks a status.
 */
#ifndef ATTN_MODEL_CHAT_H
#define ATTN_MODEL_CHAT_H

#include "attn_chat.h"
#include "base/base.h"

#include <setjmp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Internal symbols carry the attn__ prefix (tests/base/test_exports.sh);
 * the files use the short names. */
#define chat_alloc attn__chat_alloc
#define chat_apply_filter attn__chat_apply_filter
#define chat_apply_test attn__chat_apply_test
#define chat_arena_free attn__chat_arena_free
#define chat_buf_put attn__chat_buf_put
#define chat_call_builtin attn__chat_call_builtin
#define chat_compare attn__chat_compare
#define chat_dict_find attn__chat_dict_find
#define chat_dict_new attn__chat_dict_new
#define chat_dict_set attn__chat_dict_set
#define chat_equal attn__chat_equal
#define chat_utf8_next attn__chat_utf8_next
#define chat_fail attn__chat_fail
#define chat_fail_undefined attn__chat_fail_undefined
#define chat_filter_lookup attn__chat_filter_lookup
#define chat_float_repr attn__chat_float_repr
#define chat_from_json attn__chat_from_json
#define chat_getattr attn__chat_getattr
#define chat_getitem attn__chat_getitem
#define chat_global attn__chat_global
#define chat_is_space attn__chat_is_space
#define chat_iterate attn__chat_iterate
#define chat_list_new attn__chat_list_new
#define chat_lstrip_len attn__chat_lstrip_len
#define chat_parse attn__chat_parse
#define chat_repr attn__chat_repr
#define chat_rstrip_len attn__chat_rstrip_len
#define chat_slice attn__chat_slice
#define chat_str_copy attn__chat_str_copy
#define chat_str_of attn__chat_str_of
#define chat_test_lookup attn__chat_test_lookup
#define chat_to_json attn__chat_to_json
#define chat_to_str attn__chat_to_str
#define chat_truthy attn__chat_truthy
#define chat_type_name attn__chat_type_name
#define chat_undefined attn__chat_undefined
#define chat_utf8_count attn__chat_utf8_count
#define chat_utf8_put attn__chat_utf8_put
#define chat_utf8_valid attn__chat_utf8_valid

/* ------------------------------------------------------------ the arena */

typedef struct chat_block chat_block;
typedef struct chat_arena {
    chat_block *head;
    size_t held;  /* bytes of every block                    */
    size_t limit; /* ATTN_ERR_BUDGET beyond it                */
} chat_arena;

/* Where errors go: the arena, the budget of steps, the source (for line
 * and column), and the jump back to the entry point. */
typedef struct chat_env {
    chat_arena arena;
    jmp_buf jump;
    attn_status status;
    const char *source; /* the normalized template text (positions index it) */
    size_t source_len;
    int64_t steps, max_steps;
} chat_env;

/* n bytes, 16-aligned, zeroed; fails (ATTN_ERR_BUDGET / OUT_OF_MEMORY) past the limit. */
void *chat_alloc(chat_env *env, size_t n);
void chat_arena_free(chat_arena *a);

/* Records the failure and jumps to env->jump.  pos: a byte offset into the
 * source, or CHAT_NO_POS. */
#define CHAT_NO_POS ((uint32_t)-1)
#if defined(__GNUC__)
__attribute__((noreturn, format(printf, 4, 5)))
#endif
void chat_fail(chat_env *env, attn_status status, uint32_t pos, const char *fmt, ...);

/* ------------------------------------------------------------ the values */

typedef enum chat_kind {
    CV_UNDEFINED = 0, /* s: what was looked up, for the message when it is used */
    CV_NONE,
    CV_BOOL,
    CV_INT,
    CV_FLOAT,
    CV_STRING,
    CV_LIST,      /* list: flags CV_TUPLE, CV_VIEW, CV_RANGE, CV_GENERATOR (below)              */
    CV_DICT,      /* keys are strings, in insertion order                              */
    CV_NAMESPACE, /* dict: attributes, assignable with {% set ns.x = ... %}             */
    CV_LOOP,      /* loop: the innermost for loop's state                              */
    CV_FUNCTION   /* fn: a global or a bound method                                    */
} chat_kind;

/* Flags.  Python's objects that are not lists but iterate like them: a
 * dict view (d.items(), keys(), values()) and a range are sized (len,
 * truthy when not empty); a range is indexed too; a generator (what
 * select, map, reverse and the items filter return) has no len and no
 * index and is always true.  None of them prints as a list. */
enum {
    CV_TUPLE = 1,
    CV_VIEW = 2,      /* a dict view or a range                          */
    CV_UNSAFE = 4,    /* undefined: an attribute the sandbox forbids     */
    CV_GENERATOR = 8,
    CV_RANGE = 16     /* with CV_VIEW                                    */
};
#define CV_NOT_A_LIST (CV_VIEW | CV_GENERATOR)

typedef struct chat_list chat_list;
typedef struct chat_dict chat_dict;
typedef struct chat_loop chat_loop;
typedef struct chat_function chat_function;

typedef struct chat_value {
    uint8_t kind;  /* chat_kind */
    uint8_t flags;
    size_t n;      /* CV_STRING, CV_UNDEFINED: bytes of s */
    union {
        bool b;
        int64_t i;
        double f;
        const char *s; /* UTF-8, not NUL-terminated */
        chat_list *list;
        chat_dict *dict;
        chat_loop *loop;
        const chat_function *fn;
    } u;
} chat_value;

struct chat_list {
    size_t n;
    chat_value *items;
};

struct chat_dict {
    size_t n, cap;
    const char **keys;
    size_t *key_lens;
    chat_value *values;
};

struct chat_loop {
    chat_value items; /* CV_LIST: what is iterated (after the for's if) */
    int64_t index0;
};

/* The functions a template can call: the globals and the bound methods. */
typedef enum chat_builtin {
    CB_RAISE_EXCEPTION, CB_RANGE, CB_NAMESPACE, CB_DICT, CB_STRFTIME_NOW,
    /* str methods */
    CB_STARTSWITH, CB_ENDSWITH, CB_SPLIT, CB_RSPLIT, CB_STRIP, CB_LSTRIP, CB_RSTRIP, CB_UPPER, CB_LOWER, CB_TITLE,
    CB_CAPITALIZE, CB_REPLACE, CB_FIND, CB_COUNT,
    /* dict methods */
    CB_ITEMS, CB_KEYS, CB_VALUES, CB_GET,
    /* methods that change a list or dict: refused by the sandbox */
    CB_MUTATING
} chat_builtin;

struct chat_function {
    chat_builtin id;
    const char *name; /* for messages: "str.split", "raise_exception" */
    chat_value self;  /* the bound object (methods)                   */
};

static inline chat_value chat_none(void) { return (chat_value){.kind = CV_NONE}; }
static inline chat_value chat_bool(bool b) { return (chat_value){.kind = CV_BOOL, .u.b = b}; }
static inline chat_value chat_int(int64_t i) { return (chat_value){.kind = CV_INT, .u.i = i}; }
static inline chat_value chat_float(double f) { return (chat_value){.kind = CV_FLOAT, .u.f = f}; }
static inline chat_value chat_str(const char *s, size_t n) { return (chat_value){.kind = CV_STRING, .n = n, .u.s = s}; }
chat_value chat_undefined(chat_env *env, const char *fmt, ...);
/* A copy of s[0 .. n) in the arena, as a string value. */
chat_value chat_str_copy(chat_env *env, const char *s, size_t n);
chat_value chat_list_new(chat_env *env, size_t n, uint8_t flags);
chat_value chat_dict_new(chat_env *env, size_t cap);
/* Sets key to value (replacing an existing key in place, else appending). */
void chat_dict_set(chat_env *env, chat_dict *d, const char *key, size_t key_len, chat_value value);
/* The value of key, or NULL. */
chat_value *chat_dict_find(const chat_dict *d, const char *key, size_t key_len);

/* Python's names of the kinds, for messages ("str", "int", "dict", ...). */
const char *chat_type_name(const chat_value *v);
bool chat_truthy(const chat_value *v);
/* Python's ==, and its <: -1, 0, 1 (fails with a TypeError's message for
 * values Python cannot order). */
bool chat_equal(const chat_value *a, const chat_value *b);
int chat_compare(chat_env *env, uint32_t pos, const chat_value *a, const chat_value *b);

/* A growing byte buffer in the arena. */
typedef struct chat_buf {
    char *p;
    size_t n, cap;
} chat_buf;
void chat_buf_put(chat_env *env, chat_buf *b, const char *s, size_t n);
static inline void chat_buf_puts(chat_env *env, chat_buf *b, const char *s) {
    chat_buf_put(env, b, s, strlen(s));
}

/* Python's str(v) (what {{ v }} prints) and repr(v), appended to out;
 * refuses (ATTN_ERR_UNSUPPORTED) what attn does not print as Python
 * would (a namespace, the loop, a dict view, repr of text beyond U+00FF). */
void chat_to_str(chat_env *env, uint32_t pos, const chat_value *v, chat_buf *out);
void chat_repr(chat_env *env, uint32_t pos, const chat_value *v, chat_buf *out);
/* str(v) as a string value (a string is returned as it is). */
chat_value chat_str_of(chat_env *env, uint32_t pos, const chat_value *v);
/* Python's repr of a float (the shortest digits that read back the same). */
void chat_float_repr(double f, char out[32]);

/* json.dumps(v, ensure_ascii, indent, separators, sort_keys) into out.
 * indent: NULL for none, else a string (an int n is n spaces: the caller
 * makes it). item_sep/key_sep: NULL for json.dumps's defaults. */
typedef struct chat_json_style {
    bool ensure_ascii, sort_keys;
    const char *indent;
    size_t indent_len;
    const char *item_sep, *key_sep;
    size_t item_sep_len, key_sep_len;
} chat_json_style;
void chat_to_json(chat_env *env, uint32_t pos, const chat_value *v, const chat_json_style *style, chat_buf *out);

/* Parses the JSON text[0 .. len) into a value (objects as CV_DICT, arrays
 * as CV_LIST, numbers as int when they have no fraction or exponent and fit
 * in int64, else float); fails with ATTN_ERR_FORMAT naming the byte and
 * what (what: "variables_json"). */
chat_value chat_from_json(chat_env *env, const char *text, size_t len, const char *what);

/* ------------------------------------------------------ UTF-8 and text */

/* Valid UTF-8 (no surrogates, no overlong forms); *bad gets the offset of
 * the first bad byte. */
bool chat_utf8_valid(const char *s, size_t n, size_t *bad);
/* The code point at s[*i] (valid UTF-8), advancing *i. */
uint32_t chat_utf8_next(const char *s, size_t *i);
size_t chat_utf8_put(uint32_t c, char out[4]);
/* Characters in s[0 .. n). */
size_t chat_utf8_count(const char *s, size_t n);
/* Python's str.isspace for one code point. */
bool chat_is_space(uint32_t c);
/* Byte length of s[0 .. n) with the whitespace at its end dropped
 * (Python's rstrip()); and the bytes of whitespace at its start. */
size_t chat_rstrip_len(const char *s, size_t n);
size_t chat_lstrip_len(const char *s, size_t n);

/* ------------------------------------------------------------ the tree */

typedef enum chat_expr_kind {
    CE_CONST, CE_NAME, CE_LIST, CE_TUPLE, CE_DICT, CE_GETATTR, CE_GETITEM, CE_SLICE, CE_CALL, CE_FILTER, CE_TEST,
    CE_NOT, CE_NEG, CE_POS, CE_BINARY, CE_CONCAT, CE_COMPARE, CE_AND, CE_OR, CE_COND
} chat_expr_kind;

typedef enum chat_op {
    OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW,
    OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE, OP_IN, OP_NOT_IN
} chat_op;

typedef struct chat_expr chat_expr;

typedef struct chat_keyword {
    const char *name;
    size_t name_len;
    chat_expr *value;
} chat_keyword;

struct chat_expr {
    uint8_t kind; /* chat_expr_kind */
    uint8_t op;   /* chat_op: CE_BINARY; CE_COMPARE's ops are in ops[] */
    uint32_t pos;
    chat_value value;      /* CE_CONST                                        */
    const char *name;      /* CE_NAME, CE_GETATTR's attribute, CE_FILTER/CE_TEST's name */
    size_t name_len;
    int builtin;           /* CE_FILTER / CE_TEST: the filter's or test's index */
    chat_expr *a, *b, *c;  /* operands: CE_GETITEM a[b]; CE_SLICE a:b:c (NULL
                              for an omitted part); CE_COND b if a else c;
                              CE_FILTER/CE_TEST/CE_CALL a the subject or callee */
    chat_expr **items;     /* CE_LIST, CE_TUPLE, CE_CONCAT, CE_COMPARE's
                              operands after a, CE_CALL/FILTER/TEST's args;
                              CE_DICT: keys and values alternating         */
    uint8_t *ops;          /* CE_COMPARE: the operator before each of items */
    size_t n_items;
    chat_keyword *keywords;
    size_t n_keywords;
};

typedef enum chat_stmt_kind {
    CS_TEXT, CS_OUTPUT, CS_IF, CS_FOR, CS_SET, CS_SET_BLOCK, CS_BREAK, CS_CONTINUE
} chat_stmt_kind;

typedef struct chat_stmt chat_stmt;
typedef struct chat_body {
    chat_stmt **stmts;
    size_t n;
} chat_body;

/* An assignment target: a name, a namespace attribute (ns.attr), or a
 * tuple of names (for k, v in ...). */
typedef struct chat_target {
    const char **names;
    size_t *name_lens;
    size_t n;              /* names (> 1: unpacking)                          */
    bool tuple;            /* written with commas: always unpacked            */
    const char *attr;      /* ns.attr: names[0] is ns                         */
    size_t attr_len;
    uint32_t pos;
} chat_target;

struct chat_stmt {
    uint8_t kind; /* chat_stmt_kind */
    uint32_t pos;
    const char *text;      /* CS_TEXT */
    size_t text_len;
    chat_expr *expr;       /* CS_OUTPUT, CS_IF's test, CS_FOR's iterable, CS_SET's value,
                              CS_SET_BLOCK's filter chain (its subject NULL) */
    chat_expr *filter;     /* CS_FOR's "if" */
    chat_target target;    /* CS_FOR, CS_SET, CS_SET_BLOCK */
    chat_body body;        /* CS_IF's then, CS_FOR's body, CS_SET_BLOCK's */
    chat_body orelse;      /* CS_IF's else (an elif is an if inside it), CS_FOR's else */
};

struct attn_chat_template {
    chat_env env;   /* its arena holds the tree and the source */
    chat_body body;
};

/* Parses env->source[0 .. source_len) into *body (chat_parse.c). */
void chat_parse(chat_env *env, chat_body *body);

/* -------------------------------------------------------- the builtins */

/* The filters and tests, by name: an index >= 0, -1 for a name Jinja has
 * but attn does not implement, -2 for a name Jinja does not have. */
int chat_filter_lookup(const char *name, size_t n);
int chat_test_lookup(const char *name, size_t n);

/* Arguments as evaluated: positional args[0 .. n), keywords. */
typedef struct chat_args {
    chat_value *args;
    size_t n;
    const char **names;
    size_t *name_lens;
    chat_value *kwargs;
    size_t n_kwargs;
} chat_args;

chat_value chat_apply_filter(chat_env *env, uint32_t pos, int filter, const chat_value *subject, const chat_args *a);
bool chat_apply_test(chat_env *env, uint32_t pos, int test, const chat_value *subject, const chat_args *a);
chat_value chat_call_builtin(chat_env *env, uint32_t pos, const chat_function *fn, const chat_args *a);
/* obj.name as jinja2's sandboxed getattr does: a method, a key, or undefined. */
chat_value chat_getattr(chat_env *env, uint32_t pos, const chat_value *obj, const char *name, size_t n);
/* obj[key] as jinja2's getitem does (an index, a slice from chat_slice, a key). */
chat_value chat_getitem(chat_env *env, uint32_t pos, const chat_value *obj, const chat_value *key);
chat_value chat_slice(chat_env *env, uint32_t pos, const chat_value *obj, const chat_value *start,
                      const chat_value *stop, const chat_value *step);
/* The global of that name (raise_exception, range, ...), or an undefined. */
chat_value chat_global(chat_env *env, const char *name, size_t n);
/* The items of a value a for loop or a filter iterates over (a list, the
 * characters of a string, the keys of a dict; nothing for undefined). */
chat_value chat_iterate(chat_env *env, uint32_t pos, const chat_value *v);
/* The evaluator's env (the builtins allocate and fail through it). */
chat_env *chat_eval_env(chat_env *env);
/* Fails with "'name' is undefined" (jinja2's UndefinedError) for v. */
#if defined(__GNUC__)
__attribute__((noreturn))
#endif
void chat_fail_undefined(chat_env *env, uint32_t pos, const chat_value *v);

#endif /* ATTN_MODEL_CHAT_H */
