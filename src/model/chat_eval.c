/*
 * chat_eval.c — a parsed chat template over a conversation (attn_chat.h):
 * the entry points, the variables' scopes, statements and expressions.
 *
 * Scopes as jinja2 has them: the context (messages, tools, ...), then the
 * template's top level (its {% set %}s shadow the context), and one scope
 * per iteration of a for loop, holding the loop's target, loop, and what
 * the body sets — gone when the iteration ends (so a template that wants
 * to carry a value out of a loop uses a namespace).  {% if %} opens no
 * scope.  Names not found anywhere are undefined, which prints as nothing,
 * tests false and iterates as empty, and fails (jinja2's UndefinedError)
 * when an attribute, an item, arithmetic or an order is asked of it.
 */
#include "model/chat.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_EVAL_DEPTH = 400 };

enum {
    DEFAULT_MAX_STEPS = 50000000,
    DEFAULT_MAX_BYTES = 256 << 20
};

typedef struct scope {
    struct scope *parent;
    chat_dict *vars;
} scope;

typedef struct chat_eval {
    chat_env *env;
    scope *scope;
    chat_buf *out;
    int depth;
} chat_eval;

typedef enum flow { FLOW_NEXT, FLOW_BREAK, FLOW_CONTINUE } flow;

static void step(chat_eval *ev, uint32_t pos) {
    if (++ev->env->steps > ev->env->max_steps)
        chat_fail(ev->env, ATTN_ERR_BUDGET, pos, "the render took more than %lld steps (attn_chat_options.max_steps)",
                  (long long)ev->env->max_steps);
}

static scope *scope_push(chat_eval *ev) {
    scope *s = chat_alloc(ev->env, sizeof *s);
    s->parent = ev->scope;
    s->vars = chat_dict_new(ev->env, 4).u.dict;
    ev->scope = s;
    return s;
}

static chat_value lookup(chat_eval *ev, const char *name, size_t n) {
    for (scope *s = ev->scope; s; s = s->parent) {
        chat_value *v = chat_dict_find(s->vars, name, n);
        if (v) return *v;
    }
    return chat_global(ev->env, name, n);
}

/* ------------------------------------------------------------ arithmetic */

static bool numeric(const chat_value *v) { return v->kind == CV_INT || v->kind == CV_BOOL || v->kind == CV_FLOAT; }
static int64_t as_int(const chat_value *v) { return v->kind == CV_BOOL ? v->u.b : v->u.i; }
static double as_double(const chat_value *v) { return v->kind == CV_FLOAT ? v->u.f : (double)as_int(v); }

static const char *const op_symbol[] = {"+", "-", "*", "/", "//", "%", "**", "==", "!=", "<", "<=", ">", ">=", "in", "not in"};

#if defined(__GNUC__)
__attribute__((noreturn))
#endif
static void type_error(chat_eval *ev, uint32_t pos, chat_op op, const chat_value *a, const chat_value *b) {
    chat_fail(ev->env, ATTN_ERR_INVALID_ARGUMENT, pos, "unsupported operand type(s) for %s: '%s' and '%s'",
              op_symbol[op], chat_type_name(a), chat_type_name(b));
}

static chat_value overflow(chat_eval *ev, uint32_t pos) {
    chat_fail(ev->env, ATTN_ERR_UNSUPPORTED, pos, "integers beyond 64 bits are not implemented");
}

/* Python's float // and % (Objects/floatobject.c, float_divmod). */
static void float_divmod(double a, double b, double *floordiv, double *mod) {
    double m = fmod(a, b);
    double div = (a - m) / b;
    if (m != 0.0) {
        if ((b < 0) != (m < 0)) {
            m += b;
            div -= 1.0;
        }
    } else {
        m = copysign(0.0, b);
    }
    double fd;
    if (div != 0.0) {
        fd = floor(div);
        if (div - fd > 0.5) fd += 1.0;
    } else {
        fd = copysign(0.0, a / b);
    }
    *floordiv = fd;
    *mod = m;
}

/* A sequence repeated count times (str * int, list * int). */
static chat_value repeat(chat_eval *ev, uint32_t pos, const chat_value *seq, int64_t count) {
    if (count < 0) count = 0;
    if (seq->kind == CV_STRING) {
        if (seq->n && (uint64_t)count > (uint64_t)ev->env->arena.limit / seq->n)
            chat_fail(ev->env, ATTN_ERR_BUDGET, pos, "a string of %lld copies is beyond the memory budget", (long long)count);
        chat_buf b = {0};
        for (int64_t k = 0; k < count; k++) chat_buf_put(ev->env, &b, seq->u.s, seq->n);
        return chat_str(b.p ? b.p : "", b.n);
    }
    const size_t n = seq->u.list->n;
    if (n && (uint64_t)count > (uint64_t)ev->env->arena.limit / (n * sizeof(chat_value)))
        chat_fail(ev->env, ATTN_ERR_BUDGET, pos, "a list of %lld copies is beyond the memory budget", (long long)count);
    chat_value r = chat_list_new(ev->env, n * (size_t)count, seq->flags & CV_TUPLE);
    for (int64_t k = 0; k < count; k++)
        if (n) memcpy(r.u.list->items + (size_t)k * n, seq->u.list->items, n * sizeof(chat_value));
    return r;
}

static chat_value arithmetic(chat_eval *ev, uint32_t pos, chat_op op, const chat_value *a, const chat_value *b) {
    if (a->kind == CV_UNDEFINED) chat_fail_undefined(ev->env, pos, a);
    if (b->kind == CV_UNDEFINED) chat_fail_undefined(ev->env, pos, b);
    if (numeric(a) && numeric(b)) {
        const bool floats = a->kind == CV_FLOAT || b->kind == CV_FLOAT;
        const int64_t x = floats ? 0 : as_int(a), y = floats ? 0 : as_int(b);
        const double fx = as_double(a), fy = as_double(b);
        int64_t r;
        switch (op) {
        case OP_ADD:
            if (floats) return chat_float(fx + fy);
            if (__builtin_add_overflow(x, y, &r)) return overflow(ev, pos);
            return chat_int(r);
        case OP_SUB:
            if (floats) return chat_float(fx - fy);
            if (__builtin_sub_overflow(x, y, &r)) return overflow(ev, pos);
            return chat_int(r);
        case OP_MUL:
            if (floats) return chat_float(fx * fy);
            if (__builtin_mul_overflow(x, y, &r)) return overflow(ev, pos);
            return chat_int(r);
        case OP_DIV:
            if (fy == 0.0) chat_fail(ev->env, ATTN_ERR_INVALID_ARGUMENT, pos, "division by zero");
            return chat_float(fx / fy);
        case OP_FLOORDIV:
        case OP_MOD:
            if (floats) {
                if (fy == 0.0) chat_fail(ev->env, ATTN_ERR_INVALID_ARGUMENT, pos, "float division by zero");
                double fd, m;
                float_divmod(fx, fy, &fd, &m);
                return chat_float(op == OP_MOD ? m : fd);
            }
            if (y == 0) chat_fail(ev->env, ATTN_ERR_INVALID_ARGUMENT, pos, "integer division or modulo by zero");
            if (x == INT64_MIN && y == -1) return overflow(ev, pos);
            {
                int64_t q = x / y, m = x % y;
                if (m != 0 && ((m < 0) != (y < 0))) {
                    m += y;
                    q -= 1;
                }
                return chat_int(op == OP_MOD ? m : q);
            }
        case OP_POW:
            if (!floats && y >= 0) {
                int64_t result = 1, base = x;
                for (int64_t e = y; e > 0; e >>= 1) {
                    if (e & 1 && __builtin_mul_overflow(result, base, &result)) return overflow(ev, pos);
                    if (e > 1 && __builtin_mul_overflow(base, base, &base)) return overflow(ev, pos);
                }
                return chat_int(result);
            }
            if (fx == 0.0 && fy < 0)
                chat_fail(ev->env, ATTN_ERR_INVALID_ARGUMENT, pos, "0.0 cannot be raised to a negative power");
            if (fx < 0 && fy != floor(fy))
                chat_fail(ev->env, ATTN_ERR_UNSUPPORTED, pos, "complex results of ** are not implemented");
            return chat_float(pow(fx, fy));
        default: break;
        }
    }
    if (op == OP_ADD && a->kind == CV_STRING && b->kind == CV_STRING) {
        char *p = chat_alloc(ev->env, a->n + b->n + 1);
        if (a->n) memcpy(p, a->u.s, a->n);
        if (b->n) memcpy(p + a->n, b->u.s, b->n);
        return chat_str(p, a->n + b->n);
    }
    if (op == OP_ADD && a->kind == CV_LIST && b->kind == CV_LIST && !((a->flags | b->flags) & CV_NOT_A_LIST) &&
        (a->flags & CV_TUPLE) == (b->flags & CV_TUPLE)) {
        const size_t n = a->u.list->n, m = b->u.list->n;
        chat_value r = chat_list_new(ev->env, n + m, a->flags & CV_TUPLE);
        if (n) memcpy(r.u.list->items, a->u.list->items, n * sizeof(chat_value));
        if (m) memcpy(r.u.list->items + n, b->u.list->items, m * sizeof(chat_value));
        return r;
    }
    if (op == OP_MUL) {
        const bool a_seq = a->kind == CV_STRING || (a->kind == CV_LIST && !(a->flags & CV_NOT_A_LIST));
        const bool b_seq = b->kind == CV_STRING || (b->kind == CV_LIST && !(b->flags & CV_NOT_A_LIST));
        if (a_seq && (b->kind == CV_INT || b->kind == CV_BOOL)) return repeat(ev, pos, a, as_int(b));
        if (b_seq && (a->kind == CV_INT || a->kind == CV_BOOL)) return repeat(ev, pos, b, as_int(a));
    }
    if (op == OP_MOD && a->kind == CV_STRING)
        chat_fail(ev->env, ATTN_ERR_UNSUPPORTED, pos, "%%-formatting of strings is not implemented");
    type_error(ev, pos, op, a, b);
}

/* Python's "needle in haystack" (false for an undefined haystack, which
 * iterates as empty). */
static bool contains(chat_eval *ev, uint32_t pos, const chat_value *needle, const chat_value *haystack) {
    switch ((chat_kind)haystack->kind) {
    case CV_UNDEFINED:
        if (haystack->flags & CV_UNSAFE) chat_fail_undefined(ev->env, pos, haystack);
        return false;
    case CV_STRING:
        if (needle->kind != CV_STRING)
            chat_fail(ev->env, ATTN_ERR_INVALID_ARGUMENT, pos, "'in <string>' requires string as left operand, not %s",
                      chat_type_name(needle));
        if (!needle->n) return true;
        for (size_t i = 0; i + needle->n <= haystack->n; i++)
            if (memcmp(haystack->u.s + i, needle->u.s, needle->n) == 0) return true;
        return false;
    case CV_LIST:
        for (size_t i = 0; i < haystack->u.list->n; i++)
            if (chat_equal(needle, &haystack->u.list->items[i])) return true;
        return false;
    case CV_DICT:
        if (needle->kind == CV_LIST && !(needle->flags & CV_TUPLE))
            chat_fail(ev->env, ATTN_ERR_INVALID_ARGUMENT, pos, "unhashable type: 'list'");
        if (needle->kind == CV_DICT) chat_fail(ev->env, ATTN_ERR_INVALID_ARGUMENT, pos, "unhashable type: 'dict'");
        return needle->kind == CV_STRING && chat_dict_find(haystack->u.dict, needle->u.s, needle->n);
    default:
        chat_fail(ev->env, ATTN_ERR_INVALID_ARGUMENT, pos, "argument of type '%s' is not iterable",
                  chat_type_name(haystack));
    }
}

/* ------------------------------------------------------------ expressions */

static chat_value eval(chat_eval *ev, const chat_expr *e);

static void eval_args(chat_eval *ev, const chat_expr *e, chat_args *a) {
    a->n = e->n_items;
    a->args = e->n_items ? chat_alloc(ev->env, e->n_items * sizeof *a->args) : NULL;
    for (size_t k = 0; k < e->n_items; k++) a->args[k] = eval(ev, e->items[k]);
    a->n_kwargs = e->n_keywords;
    if (e->n_keywords) {
        a->names = chat_alloc(ev->env, e->n_keywords * sizeof *a->names);
        a->name_lens = chat_alloc(ev->env, e->n_keywords * sizeof *a->name_lens);
        a->kwargs = chat_alloc(ev->env, e->n_keywords * sizeof *a->kwargs);
        for (size_t k = 0; k < e->n_keywords; k++) {
            a->names[k] = e->keywords[k].name;
            a->name_lens[k] = e->keywords[k].name_len;
            a->kwargs[k] = eval(ev, e->keywords[k].value);
        }
    }
}

static bool compare_op(chat_eval *ev, uint32_t pos, chat_op op, const chat_value *a, const chat_value *b) {
    switch (op) {
    case OP_EQ: return chat_equal(a, b);
    case OP_NE: return !chat_equal(a, b);
    case OP_IN: return contains(ev, pos, a, b);
    case OP_NOT_IN: return !contains(ev, pos, a, b);
    default: break;
    }
    const int c = chat_compare(ev->env, pos, a, b);
    if (c == 2) return false; /* NaN */
    return op == OP_LT ? c < 0 : op == OP_LE ? c <= 0 : op == OP_GT ? c > 0 : c >= 0;
}

static chat_value eval_inner(chat_eval *ev, const chat_expr *e) {
    switch ((chat_expr_kind)e->kind) {
    case CE_CONST: return e->value;
    case CE_NAME: return lookup(ev, e->name, e->name_len);
    case CE_LIST:
    case CE_TUPLE: {
        chat_value l = chat_list_new(ev->env, e->n_items, e->kind == CE_TUPLE ? CV_TUPLE : 0);
        for (size_t k = 0; k < e->n_items; k++) l.u.list->items[k] = eval(ev, e->items[k]);
        return l;
    }
    case CE_DICT: {
        chat_value d = chat_dict_new(ev->env, e->n_items / 2);
        for (size_t k = 0; k + 1 < e->n_items; k += 2) {
            const chat_value key = eval(ev, e->items[k]);
            if (key.kind != CV_STRING)
                chat_fail(ev->env, ATTN_ERR_UNSUPPORTED, e->items[k]->pos, "dict keys that are not strings are not implemented");
            chat_dict_set(ev->env, d.u.dict, key.u.s, key.n, eval(ev, e->items[k + 1]));
        }
        return d;
    }
    case CE_GETATTR: {
        const chat_value obj = eval(ev, e->a);
        return chat_getattr(ev->env, e->pos, &obj, e->name, e->name_len);
    }
    case CE_GETITEM: {
        const chat_value obj = eval(ev, e->a);
        if (e->b->kind == CE_SLICE) {
            const chat_value none = chat_none();
            const chat_value start = e->b->a ? eval(ev, e->b->a) : none, stop = e->b->b ? eval(ev, e->b->b) : none,
                             stride = e->b->c ? eval(ev, e->b->c) : none;
            return chat_slice(ev->env, e->pos, &obj, &start, &stop, &stride);
        }
        const chat_value key = eval(ev, e->b);
        return chat_getitem(ev->env, e->pos, &obj, &key);
    }
    case CE_SLICE:
        chat_fail(ev->env, ATTN_ERR_UNSUPPORTED, e->pos, "a slice inside a tuple of indices is not implemented");
    case CE_CALL: {
        const chat_value fn = eval(ev, e->a);
        chat_args a = {0};
        eval_args(ev, e, &a);
        if (fn.kind == CV_UNDEFINED) chat_fail_undefined(ev->env, e->pos, &fn);
        if (fn.kind != CV_FUNCTION)
            chat_fail(ev->env, ATTN_ERR_INVALID_ARGUMENT, e->pos, "'%s' object is not callable", chat_type_name(&fn));
        return chat_call_builtin(ev->env, e->pos, fn.u.fn, &a);
    }
    case CE_FILTER: {
        const chat_value subject = eval(ev, e->a);
        chat_args a = {0};
        eval_args(ev, e, &a);
        return chat_apply_filter(ev->env, e->pos, e->builtin, &subject, &a);
    }
    case CE_TEST: {
        const chat_value subject = eval(ev, e->a);
        chat_args a = {0};
        eval_args(ev, e, &a);
        return chat_bool(chat_apply_test(ev->env, e->pos, e->builtin, &subject, &a));
    }
    case CE_NOT: {
        const chat_value v = eval(ev, e->a);
        return chat_bool(!chat_truthy(&v));
    }
    case CE_NEG:
    case CE_POS: {
        const chat_value v = eval(ev, e->a);
        if (v.kind == CV_UNDEFINED) chat_fail_undefined(ev->env, e->pos, &v);
        if (!numeric(&v))
            chat_fail(ev->env, ATTN_ERR_INVALID_ARGUMENT, e->pos, "bad operand type for unary %s: '%s'",
                      e->kind == CE_NEG ? "-" : "+", chat_type_name(&v));
        if (v.kind == CV_FLOAT) return chat_float(e->kind == CE_NEG ? -v.u.f : v.u.f);
        if (e->kind == CE_NEG && as_int(&v) == INT64_MIN) return overflow(ev, e->pos);
        return chat_int(e->kind == CE_NEG ? -as_int(&v) : as_int(&v));
    }
    case CE_BINARY: {
        const chat_value a = eval(ev, e->a), b = eval(ev, e->b);
        return arithmetic(ev, e->pos, (chat_op)e->op, &a, &b);
    }
    case CE_CONCAT: {
        chat_buf b = {0};
        for (size_t k = 0; k < e->n_items; k++) {
            const chat_value v = eval(ev, e->items[k]);
            chat_to_str(ev->env, e->items[k]->pos, &v, &b);
        }
        return chat_str(b.p ? b.p : "", b.n);
    }
    case CE_COMPARE: {
        chat_value left = eval(ev, e->a);
        for (size_t k = 0; k < e->n_items; k++) {
            const chat_value right = eval(ev, e->items[k]);
            if (!compare_op(ev, e->items[k]->pos, (chat_op)e->ops[k], &left, &right)) return chat_bool(false);
            left = right;
        }
        return chat_bool(true);
    }
    case CE_AND: {
        const chat_value a = eval(ev, e->a);
        return chat_truthy(&a) ? eval(ev, e->b) : a;
    }
    case CE_OR: {
        const chat_value a = eval(ev, e->a);
        return chat_truthy(&a) ? a : eval(ev, e->b);
    }
    case CE_COND: {
        const chat_value test = eval(ev, e->a);
        if (chat_truthy(&test)) return eval(ev, e->b);
        if (e->c) return eval(ev, e->c);
        return chat_undefined(ev->env, "the inline if-expression evaluated to false and no else section was defined");
    }
    }
    chat_fail(ev->env, ATTN_ERR_INTERNAL, e->pos, "an expression of unknown kind %d", e->kind);
}

static chat_value eval(chat_eval *ev, const chat_expr *e) {
    step(ev, e->pos);
    if (++ev->depth > MAX_EVAL_DEPTH)
        chat_fail(ev->env, ATTN_ERR_BUDGET, e->pos, "expressions nested more than %d deep", MAX_EVAL_DEPTH);
    const chat_value v = eval_inner(ev, e);
    ev->depth--;
    return v;
}

/* ------------------------------------------------------------ statements */

/* Binds target to value in the current scope (unpacking a tuple target). */
static void assign(chat_eval *ev, const chat_target *t, const chat_value *value) {
    if (t->attr) {
        const chat_value ns = lookup(ev, t->names[0], t->name_lens[0]);
        if (ns.kind != CV_NAMESPACE)
            chat_fail(ev->env, ATTN_ERR_INVALID_ARGUMENT, t->pos, "cannot assign attribute on non-namespace object");
        if (t->attr_len && t->attr[0] == '_')
            chat_fail(ev->env, ATTN_ERR_INVALID_ARGUMENT, t->pos,
                      "chat templates cannot store underscore-prefixed attributes on a namespace");
        chat_dict_set(ev->env, ns.u.dict, t->attr, t->attr_len, *value);
        return;
    }
    if (t->n == 1 && !t->tuple) {
        chat_dict_set(ev->env, ev->scope->vars, t->names[0], t->name_lens[0], *value);
        return;
    }
    const chat_value items = chat_iterate(ev->env, t->pos, value);
    if (items.u.list->n != t->n)
        chat_fail(ev->env, ATTN_ERR_INVALID_ARGUMENT, t->pos, "%s values to unpack (expected %zu, got %zu)",
                  items.u.list->n > t->n ? "too many" : "not enough", t->n, items.u.list->n);
    for (size_t k = 0; k < t->n; k++) chat_dict_set(ev->env, ev->scope->vars, t->names[k], t->name_lens[k], items.u.list->items[k]);
}

static flow run(chat_eval *ev, const chat_body *body);

static flow run_for(chat_eval *ev, const chat_stmt *s) {
    const chat_value iterable = eval(ev, s->expr);
    chat_value items = chat_iterate(ev->env, s->expr->pos, &iterable);
    if (s->filter) {
        /* for x in xs if cond: the loop runs over the items that pass
         * (loop.index, length... count those), each tested in a scope of
         * its own. */
        chat_value kept = chat_list_new(ev->env, items.u.list->n, 0);
        size_t n = 0;
        scope *outer = ev->scope, *test = scope_push(ev);
        for (size_t k = 0; k < items.u.list->n; k++) {
            test->vars->n = 0;
            assign(ev, &s->target, &items.u.list->items[k]);
            const chat_value keep = eval(ev, s->filter);
            if (chat_truthy(&keep)) kept.u.list->items[n++] = items.u.list->items[k];
        }
        ev->scope = outer;
        kept.u.list->n = n;
        items = kept;
    }
    if (!items.u.list->n) return run(ev, &s->orelse);
    chat_loop *loop = chat_alloc(ev->env, sizeof *loop);
    loop->items = items;
    const chat_value loop_value = {.kind = CV_LOOP, .u.loop = loop};
    /* One scope for the loop, emptied at each iteration (nothing outlives
     * an iteration: the subset has no closures), so a long loop does not
     * grow the arena. */
    scope *outer = ev->scope, *iteration = scope_push(ev);
    for (size_t k = 0; k < items.u.list->n; k++) {
        loop->index0 = (int64_t)k;
        iteration->vars->n = 0;
        assign(ev, &s->target, &items.u.list->items[k]);
        chat_dict_set(ev->env, iteration->vars, "loop", 4, loop_value);
        const flow f = run(ev, &s->body);
        if (f == FLOW_BREAK) break;
    }
    ev->scope = outer;
    return FLOW_NEXT;
}

static flow run_stmt(chat_eval *ev, const chat_stmt *s) {
    step(ev, s->pos);
    switch ((chat_stmt_kind)s->kind) {
    case CS_TEXT: chat_buf_put(ev->env, ev->out, s->text, s->text_len); return FLOW_NEXT;
    case CS_OUTPUT: {
        const chat_value v = eval(ev, s->expr);
        chat_to_str(ev->env, s->expr->pos, &v, ev->out);
        return FLOW_NEXT;
    }
    case CS_IF: {
        const chat_value test = eval(ev, s->expr);
        return run(ev, chat_truthy(&test) ? &s->body : &s->orelse);
    }
    case CS_FOR: return run_for(ev, s);
    case CS_SET: {
        const chat_value v = eval(ev, s->expr);
        assign(ev, &s->target, &v);
        return FLOW_NEXT;
    }
    case CS_SET_BLOCK: {
        chat_buf captured = {0}, *saved = ev->out;
        ev->out = &captured;
        const flow f = run(ev, &s->body);
        ev->out = saved;
        chat_value v = chat_str(captured.p ? captured.p : "", captured.n);
        /* The filters apply to the block's text: the chain's innermost
         * subject is NULL, so it is walked here. */
        const chat_expr *chain[64];
        size_t n = 0;
        for (const chat_expr *f2 = s->expr; f2; f2 = f2->a) {
            if (n == 64) chat_fail(ev->env, ATTN_ERR_BUDGET, s->pos, "more than 64 filters on a set block");
            chain[n++] = f2;
        }
        while (n--) {
            chat_args a = {0};
            eval_args(ev, chain[n], &a);
            v = chat_apply_filter(ev->env, chain[n]->pos, chain[n]->builtin, &v, &a);
        }
        assign(ev, &s->target, &v);
        return f;
    }
    case CS_BREAK: return FLOW_BREAK;
    case CS_CONTINUE: return FLOW_CONTINUE;
    }
    return FLOW_NEXT;
}

static flow run(chat_eval *ev, const chat_body *body) {
    for (size_t k = 0; k < body->n; k++) {
        const flow f = run_stmt(ev, body->stmts[k]);
        if (f != FLOW_NEXT) return f;
    }
    return FLOW_NEXT;
}

/* ------------------------------------------------------------ the API */

/* The source as jinja2 reads it: "\r\n" and "\r" are "\n", and one
 * newline at the very end is dropped (keep_trailing_newline=False). */
static void normalize(chat_env *env, const char *text, size_t len) {
    char *src = chat_alloc(env, len + 1);
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (text[i] == '\r') {
            src[n++] = '\n';
            if (i + 1 < len && text[i + 1] == '\n') i++;
        } else {
            src[n++] = text[i];
        }
    }
    if (n && src[n - 1] == '\n') n--;
    src[n] = 0;
    env->source = src;
    env->source_len = n;
}

attn_status attn_chat_template_parse(const char *text, size_t len, attn_chat_template **out) {
    if (out) *out = NULL;
    if (!out || (!text && len))
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_chat_template_parse: %s is NULL", out ? "text" : "out");
    if (len > UINT32_MAX / 2)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_chat_template_parse: a template of %zu bytes is too long", len);
    attn_chat_template *t = calloc(1, sizeof *t);
    if (!t) return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "attn_chat_template_parse: no memory");
    t->env.arena.limit = (size_t)DEFAULT_MAX_BYTES + 64 * (size_t)len;
    if (setjmp(t->env.jump)) {
        const attn_status st = t->env.status;
        attn_chat_template_free(t);
        return st;
    }
    size_t bad;
    if (!chat_utf8_valid(text, len, &bad))
        chat_fail(&t->env, ATTN_ERR_FORMAT, CHAT_NO_POS, "invalid UTF-8 at byte %zu of the template", bad);
    normalize(&t->env, text ? text : "", len);
    chat_parse(&t->env, &t->body);
    *out = t;
    return ATTN_OK;
}

void attn_chat_template_free(attn_chat_template *t) {
    if (!t) return;
    chat_arena_free(&t->env.arena);
    free(t);
}

static chat_value c_string(chat_env *env, const char *s, const char *what) {
    const size_t n = strlen(s);
    size_t bad;
    if (!chat_utf8_valid(s, n, &bad))
        chat_fail(env, ATTN_ERR_INVALID_ARGUMENT, CHAT_NO_POS, "%s: invalid UTF-8 at byte %zu", what, bad);
    return chat_str(s, n);
}

/* transformers' _normalize_chat_messages (keys whose value is None are
 * dropped) and _alias_reasoning_fields (reasoning_content, thinking or
 * reasoning, the first not None, copied to "thinking" (first) and
 * "reasoning_content"). */
static chat_value normalize_messages(chat_env *env, const chat_value *messages) {
    if (messages->kind != CV_LIST || (messages->flags & CV_NOT_A_LIST))
        chat_fail(env, ATTN_ERR_INVALID_ARGUMENT, CHAT_NO_POS, "messages is a %s: it must be a list of messages",
                  chat_type_name(messages));
    const chat_list *in = messages->u.list;
    chat_value out = chat_list_new(env, in->n, 0);
    static const char *const reasoning_fields[] = {"reasoning_content", "thinking", "reasoning"};
    for (size_t k = 0; k < in->n; k++) {
        const chat_value *m = &in->items[k];
        if (m->kind != CV_DICT)
            chat_fail(env, ATTN_ERR_INVALID_ARGUMENT, CHAT_NO_POS,
                      "message %zu is a %s: chat messages should be dicts ({\"role\": ..., \"content\": ...})", k,
                      chat_type_name(m));
        chat_value kept = chat_dict_new(env, m->u.dict->n);
        for (size_t i = 0; i < m->u.dict->n; i++)
            if (m->u.dict->values[i].kind != CV_NONE)
                chat_dict_set(env, kept.u.dict, m->u.dict->keys[i], m->u.dict->key_lens[i], m->u.dict->values[i]);
        const chat_value *reasoning = NULL;
        for (int f = 0; f < 3 && !reasoning; f++)
            reasoning = chat_dict_find(kept.u.dict, reasoning_fields[f], strlen(reasoning_fields[f]));
        if (reasoning) {
            const chat_value r = *reasoning;
            chat_value aliased = chat_dict_new(env, kept.u.dict->n + 2);
            chat_dict_set(env, aliased.u.dict, "thinking", 8, r);
            for (size_t i = 0; i < kept.u.dict->n; i++)
                chat_dict_set(env, aliased.u.dict, kept.u.dict->keys[i], kept.u.dict->key_lens[i], kept.u.dict->values[i]);
            chat_dict_set(env, aliased.u.dict, "reasoning_content", 17, r);
            kept = aliased;
        }
        out.u.list->items[k] = kept;
    }
    return out;
}

attn_status attn_chat_template_render(const attn_chat_template *t, const attn_chat_message *messages, size_t n,
                                      const attn_chat_options *opt_in, char **out, size_t *len) {
    if (out) *out = NULL;
    if (len) *len = 0;
    if (!t || !out || (!messages && n))
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_chat_template_render: %s is NULL",
                          !t ? "the template" : !out ? "out" : "messages");
    static const attn_chat_options defaults = ATTN_CHAT_OPTIONS_INIT;
    attn_chat_options opt;
    attn_status st = options_copy(&opt, sizeof opt, &defaults, opt_in, "attn_chat_options");
    if (st) return st;
    if (opt.max_steps < 0 || opt.max_bytes < 0)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_chat_options: max_%s is %lld: must be >= 0 (0 = the default)",
                          opt.max_steps < 0 ? "steps" : "bytes",
                          (long long)(opt.max_steps < 0 ? opt.max_steps : opt.max_bytes));
    /* On the heap: longjmp leaves the automatic variables changed since
     * setjmp indeterminate, and the arena changes. */
    chat_env *env = calloc(1, sizeof *env);
    if (!env) return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "attn_chat_template_render: no memory");
    env->source = t->env.source;
    env->source_len = t->env.source_len;
    env->arena.limit = opt.max_bytes ? (size_t)opt.max_bytes : (size_t)DEFAULT_MAX_BYTES;
    env->max_steps = opt.max_steps ? opt.max_steps : DEFAULT_MAX_STEPS;
    if (setjmp(env->jump)) {
        st = env->status;
        chat_arena_free(&env->arena);
        free(env);
        return st;
    }
    chat_eval ev = {.env = env};
    scope *context = scope_push(&ev);
    chat_value list = chat_list_new(env, n, 0);
    for (size_t k = 0; k < n; k++) {
        if (!messages[k].role || !messages[k].content)
            chat_fail(env, ATTN_ERR_INVALID_ARGUMENT, CHAT_NO_POS, "message %zu: its %s is NULL", k,
                      !messages[k].role ? "role" : "content");
        chat_value m = chat_dict_new(env, 2);
        chat_dict_set(env, m.u.dict, "role", 4, c_string(env, messages[k].role, "a message's role"));
        chat_dict_set(env, m.u.dict, "content", 7, c_string(env, messages[k].content, "a message's content"));
        list.u.list->items[k] = m;
    }
    chat_dict *vars = context->vars;
    chat_dict_set(env, vars, "messages", 8, list);
    chat_dict_set(env, vars, "tools", 5, chat_none());
    chat_dict_set(env, vars, "documents", 9, chat_none());
    chat_dict_set(env, vars, "add_generation_prompt", 21, chat_bool(opt.add_generation_prompt != 0));
    const char *const token_names[] = {"bos_token", "eos_token", "unk_token", "pad_token"};
    const char *const tokens[] = {opt.bos_token, opt.eos_token, opt.unk_token, opt.pad_token};
    for (int k = 0; k < 4; k++)
        if (tokens[k]) chat_dict_set(env, vars, token_names[k], strlen(token_names[k]), c_string(env, tokens[k], token_names[k]));
    if (opt.messages_json)
        chat_dict_set(env, vars, "messages", 8, chat_from_json(env, opt.messages_json, strlen(opt.messages_json), "messages_json"));
    if (opt.variables_json) {
        const chat_value extra = chat_from_json(env, opt.variables_json, strlen(opt.variables_json), "variables_json");
        if (extra.kind != CV_DICT)
            chat_fail(env, ATTN_ERR_FORMAT, CHAT_NO_POS, "variables_json is a JSON %s: it must be an object",
                      chat_type_name(&extra));
        for (size_t k = 0; k < extra.u.dict->n; k++)
            chat_dict_set(env, vars, extra.u.dict->keys[k], extra.u.dict->key_lens[k], extra.u.dict->values[k]);
    }
    chat_value *msgs = chat_dict_find(vars, "messages", 8);
    *msgs = normalize_messages(env, msgs);
    scope_push(&ev); /* the template's top level */
    chat_buf text = {0};
    ev.out = &text;
    run(&ev, &t->body);
    char *result = malloc(text.n + 1);
    if (!result) chat_fail(env, ATTN_ERR_OUT_OF_MEMORY, CHAT_NO_POS, "no memory for the %zu bytes of the text", text.n);
    if (text.n) memcpy(result, text.p, text.n);
    result[text.n] = 0;
    chat_arena_free(&env->arena);
    free(env);
    *out = result;
    if (len) *len = text.n;
    return ATTN_OK;
}
