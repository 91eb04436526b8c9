/*
 * attn_module.c — the CPython extension attn._core: libattn's scaled
 * dot-product attention, forward and backward, on the caller's buffers.
 *
 * Shape legend (attn.h): q [B, L, Hq, D]  k [B, S, Hkv, D]  v [B, S, Hkv, Dv]
 *                        out, dout [B, L, Hq, Dv]  weights [B, Hq, L, S]
 *                        lse [B, Hq, L]  dq like q  dk like k  dv like v
 *
 * This layer is private: attn/_sdpa.py is its only caller.  Python turns
 * numpy arrays and torch tensors into 4-D [B, L, H, D] views (a transpose
 * for the [B, H, L, D] layout, new axes for the 2-D and 3-D shorthands) and
 * allocates the outputs; this file reads each view through the buffer
 * protocol, hands its pointer and element strides to libattn without a
 * copy, and releases the GIL for the kernel call.  Each tensor argument is
 * a pair (buffer, dtype code), the code one of attn_dtype's ATTN_F32,
 * ATTN_F16 or ATTN_BF16: numpy has no bfloat16, so Python passes such data
 * as a uint16 view and says what it is.
 *
 * Errors: a libattn status becomes the exception class registered for it
 * (attn.ShapeError for ATTN_ERR_SHAPE, ...) carrying attn_last_error()'s
 * message and the code as .status; a buffer this layer cannot pass on
 * (wrong item size, a negative stride, a last axis that is not contiguous)
 * is a TypeError or an attn.ShapeError naming the argument.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "attn_py.h"

#include <attn.h>
#include <attn_analysis.h>
#include <attn_interp.h>
#include <attn_viz.h>

#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <string.h>

/* ------------------------------------------------------------ exceptions */

/* One class per attn_status, created at import (module_exec), each a
 * subclass of attn.Error and of the builtin exception a Python user would
 * catch for that kind of failure. */
typedef struct status_class {
    attn_status status;
    const char *name;      /* attn.<name> */
    PyObject **builtin;    /* the second base, or NULL for attn.Error alone */
    const char *doc;
} status_class;

static PyObject *attn_error_class; /* attn.Error */

static const status_class status_classes[] = {
    {ATTN_ERR_INVALID_ARGUMENT, "ArgumentError", &PyExc_ValueError,
     "An argument or option value attn refuses (ATTN_ERR_INVALID_ARGUMENT)."},
    {ATTN_ERR_SHAPE, "ShapeError", &PyExc_ValueError,
     "Sizes or strides that do not fit together (ATTN_ERR_SHAPE)."},
    {ATTN_ERR_OVERFLOW, "SizeOverflowError", &PyExc_OverflowError,
     "A size product that overflows (ATTN_ERR_OVERFLOW)."},
    {ATTN_ERR_OUT_OF_MEMORY, "OutOfMemoryError", &PyExc_MemoryError,
     "The library could not allocate its workspace (ATTN_ERR_OUT_OF_MEMORY)."},
    {ATTN_ERR_IO, "FileError", &PyExc_OSError, "Open, read, write or rename failed (ATTN_ERR_IO)."},
    {ATTN_ERR_FORMAT, "FormatError", &PyExc_ValueError,
     "A malformed or truncated file (ATTN_ERR_FORMAT)."},
    {ATTN_ERR_UNSUPPORTED, "UnsupportedError", &PyExc_NotImplementedError,
     "Valid input this build cannot handle, e.g. float16 where a kernel computes float32 "
     "(ATTN_ERR_UNSUPPORTED)."},
    {ATTN_ERR_NONFINITE, "NonFiniteError", &PyExc_ValueError,
     "NaN or Inf found by a check (ATTN_ERR_NONFINITE)."},
    {ATTN_ERR_INTERNAL, "InternalError", &PyExc_RuntimeError,
     "A bug in attn: please report it with the message (ATTN_ERR_INTERNAL)."},
    {ATTN_ERR_TIMEOUT, "WaitTimeoutError", &PyExc_TimeoutError,
     "Another process did not answer in time (ATTN_ERR_TIMEOUT)."},
    {ATTN_ERR_BUDGET, "BudgetError", &PyExc_ValueError,
     "Beyond a documented work budget; the message names the cheaper alternative "
     "(ATTN_ERR_BUDGET)."},
};
#define N_STATUS_CLASSES (sizeof status_classes / sizeof status_classes[0])
static PyObject *status_class_objects[N_STATUS_CLASSES];

PyObject *class_for_status(attn_status st) {
    for (size_t i = 0; i < N_STATUS_CLASSES; i++)
        if (status_classes[i].status == st) return status_class_objects[i];
    return attn_error_class;
}

/* Raises the class of st with msg (attn_last_error() when msg is NULL) and
 * the attributes .status (the code) and .status_name (attn_status_str). */
void raise_status(attn_status st, const char *msg) {
    if (!msg || !*msg) msg = attn_last_error();
    if (!msg || !*msg) msg = attn_status_str(st);
    PyObject *cls = class_for_status(st);
    PyObject *exc = PyObject_CallFunction(cls, "s", msg);
    if (!exc) return;
    PyObject *code = PyLong_FromLong((long)st);
    PyObject *name = PyUnicode_FromString(attn_status_str(st));
    if (code && name && PyObject_SetAttrString(exc, "status", code) == 0 &&
        PyObject_SetAttrString(exc, "status_name", name) == 0)
        PyErr_SetObject(cls, exc);
    Py_XDECREF(code);
    Py_XDECREF(name);
    Py_DECREF(exc);
}

/* -------------------------------------------------------- debug pointers */

/* The data pointers the last call on this thread handed to libattn, for the
 * tests' proof that nothing was copied on the way (_core.last_pointers()). */
enum { PTR_Q, PTR_K, PTR_V, PTR_OUT, PTR_DOUT, PTR_DQ, PTR_DK, PTR_DV, PTR_WEIGHTS, PTR_LSE,
       PTR_MASK, PTR_BIAS, N_PTRS };
static const char *const ptr_names[N_PTRS] = {"q", "k", "v", "out", "dout", "dq", "dk", "dv",
                                              "weights", "lse", "mask", "bias"};
static _Thread_local const void *last_ptrs[N_PTRS];

/* --------------------------------------------------------------- buffers */

/* The buffers one call holds; all released by buffers_release. */
typedef struct buffers {
    Py_buffer views[32]; /* the most one call holds: 24 (mha_backward) */
    int n;
} buffers;

static void buffers_release(buffers *b) {
    for (int i = 0; i < b->n; i++) PyBuffer_Release(&b->views[i]);
    b->n = 0;
}

static Py_buffer *buffers_get(buffers *b, PyObject *obj, const char *name, bool writable) {
    if (b->n == (int)(sizeof b->views / sizeof b->views[0])) {
        PyErr_Format(PyExc_SystemError, "%s: too many buffers in one call", name);
        return NULL;
    }
    Py_buffer *view = &b->views[b->n];
    int flags = PyBUF_STRIDES | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, view, flags) != 0) {
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        PyErr_Format(PyExc_TypeError, "%s: %s buffer needed, %R does not give one (%S)", name,
                     writable ? "a writable" : "a", (PyObject *)Py_TYPE(obj), value ? value : Py_None);
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(tb);
        return NULL;
    }
    b->n++;
    return view;
}

/* A (buffer, dtype code) pair as a 4-D attn_tensor.  Size-1 dimensions may
 * have any stride (numpy and torch give them arbitrary ones): they are set
 * to what libattn accepts.  *missing is set when obj is None and may_be_none. */
static int tensor_arg(buffers *b, PyObject *arg, const char *name, bool writable, attn_tensor *t,
                      bool may_be_none, bool *missing) {
    PyObject *obj;
    int code;
    if (missing) *missing = false;
    if (arg == Py_None && may_be_none) {
        if (missing) *missing = true;
        return 0;
    }
    if (!PyArg_ParseTuple(arg, "Oi", &obj, &code)) {
        PyErr_Format(PyExc_TypeError, "%s: expected a (buffer, dtype) pair", name);
        return -1;
    }
    const size_t itemsize = attn_dtype_size((attn_dtype)code);
    if (code != ATTN_F32 && code != ATTN_F16 && code != ATTN_BF16) {
        PyErr_Format(PyExc_TypeError, "%s: dtype %s is not a tensor dtype (float32, float16, bfloat16)",
                     name, attn_dtype_name((attn_dtype)code));
        return -1;
    }
    Py_buffer *view = buffers_get(b, obj, name, writable);
    if (!view) return -1;
    if (view->ndim != 4) {
        PyErr_Format(class_for_status(ATTN_ERR_SHAPE), "%s: expected a 4-D view, got %d dimensions",
                     name, view->ndim);
        return -1;
    }
    if ((size_t)view->itemsize != itemsize) {
        PyErr_Format(PyExc_TypeError, "%s: items of %zd bytes cannot hold %s", name, view->itemsize,
                     attn_dtype_name((attn_dtype)code));
        return -1;
    }
    memset(t, 0, sizeof *t);
    t->data = view->buf;
    t->dtype = (attn_dtype)code;
    for (int i = 0; i < 4; i++) {
        const Py_ssize_t extent = view->shape[i], bytes = view->strides[i];
        t->shape[i] = extent;
        if (extent <= 1) {
            t->stride[i] = i == 3 ? 1 : 0;
            continue;
        }
        if (bytes < 0) {
            PyErr_Format(class_for_status(ATTN_ERR_SHAPE),
                         "%s: axis of size %zd has a negative stride (a reversed view): libattn "
                         "needs non-negative strides; pass a copy (numpy.ascontiguousarray)",
                         name, extent);
            return -1;
        }
        if (bytes % view->itemsize != 0) {
            PyErr_Format(class_for_status(ATTN_ERR_SHAPE),
                         "%s: a stride of %zd bytes is not a whole number of %zd-byte elements",
                         name, bytes, view->itemsize);
            return -1;
        }
        t->stride[i] = bytes / view->itemsize;
    }
    if (t->stride[3] != 1) {
        PyErr_Format(class_for_status(ATTN_ERR_SHAPE),
                     "%s: the last axis (width %lld) is not contiguous (stride %lld elements): "
                     "libattn reads rows as contiguous vectors; pass a copy "
                     "(numpy.ascontiguousarray, tensor.contiguous())",
                     name, (long long)t->shape[3], (long long)t->stride[3]);
        return -1;
    }
    return 0;
}

/* A C-contiguous buffer of exactly `count` items of `itemsize` bytes (or
 * of any count when count < 0); *data is NULL for None.  shape4, when
 * given, receives its shape, which must have 4 dimensions. */
static int flat_arg(buffers *b, PyObject *obj, const char *name, bool writable, Py_ssize_t itemsize,
                    Py_ssize_t count, void **data, int64_t shape4[4]) {
    *data = NULL;
    if (obj == Py_None) return 0;
    Py_buffer *view = buffers_get(b, obj, name, writable);
    if (!view) return -1;
    if (view->itemsize != itemsize) {
        PyErr_Format(PyExc_TypeError, "%s: items of %zd bytes, expected %zd", name, view->itemsize,
                     itemsize);
        return -1;
    }
    if (!PyBuffer_IsContiguous(view, 'C')) {
        PyErr_Format(class_for_status(ATTN_ERR_SHAPE), "%s: must be C-contiguous", name);
        return -1;
    }
    if (count >= 0 && view->len != count * itemsize) {
        PyErr_Format(class_for_status(ATTN_ERR_SHAPE), "%s: holds %zd items, expected %zd", name,
                     view->len / itemsize, count);
        return -1;
    }
    if (shape4) {
        if (view->ndim != 4) {
            PyErr_Format(class_for_status(ATTN_ERR_SHAPE), "%s: expected 4 dimensions, got %d", name,
                         view->ndim);
            return -1;
        }
        for (int i = 0; i < 4; i++) shape4[i] = view->shape[i];
    }
    *data = view->buf;
    return 0;
}

/* --------------------------------------------------------------- options */

/* The options every attention call takes are libattn's table of
 * attn_sdpa_options (attn_sdpa_option): each function here takes, besides
 * its own arguments, a keyword per row that has a Python keyword, named
 * as the row (its field: causal, align, window, key_lengths, ...), its
 * value by the row's kind; attn/_options.py turns the package's keywords
 * into these.  A keyword that is absent or None keeps the default. */

/* Splits kwargs into the option keywords (*options) and the rest (*rest),
 * both new dicts (or NULL kwargs: empty ones). */
static int split_options(PyObject *kwargs, PyObject **rest, PyObject **options) {
    *rest = PyDict_New();
    *options = PyDict_New();
    if (!*rest || !*options) return -1;
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    while (kwargs && PyDict_Next(kwargs, &pos, &key, &value)) {
        const char *name = PyUnicode_Check(key) ? PyUnicode_AsUTF8(key) : NULL;
        bool option = false;
        for (int i = 0; name && attn_sdpa_option(i); i++)
            option = option || (attn_sdpa_option(i)->python && !strcmp(attn_sdpa_option(i)->name, name));
        if (PyDict_SetItem(option ? *options : *rest, key, value) != 0) return -1;
    }
    return 0;
}

static void set_field(attn_sdpa_options *opt, const attn_sdpa_option_info *row, int n, const void *value,
                      size_t size) {
    memcpy((char *)opt + row->offset[n], value, size);
}

/* One option's value into opt, by its row's kind; buffers held in b. */
static int fill_option(buffers *b, const attn_sdpa_option_info *row, PyObject *value, int64_t batch, int64_t heads,
                       attn_sdpa_options *opt) {
    const char *name = row->name;
    void *data;
    int64_t shape[4];
    switch (row->kind) {
    case ATTN_OPTION_SWITCH:
    case ATTN_OPTION_INT: {
        const long x = row->kind == ATTN_OPTION_SWITCH ? PyObject_IsTrue(value) : PyLong_AsLong(value);
        if (x == -1 && PyErr_Occurred()) return -1;
        if (x < INT_MIN || x > INT_MAX) return PyErr_Format(PyExc_OverflowError, "%s: %ld is out of range", name, x), -1;
        const int i = (int)x;
        set_field(opt, row, 0, &i, sizeof i);
        return 0;
    }
    case ATTN_OPTION_CHOICE: {
        const char *text = PyUnicode_Check(value) ? PyUnicode_AsUTF8(value) : NULL;
        for (int c = 0; text && row->choices[c]; c++)
            if (!strcmp(text, row->choices[c])) return set_field(opt, row, 0, &c, sizeof c), 0;
        if (!PyErr_Occurred()) PyErr_Format(PyExc_ValueError, "%s: %R is not one of its names", name, value);
        return -1;
    }
    case ATTN_OPTION_FLOAT: {
        const double x = PyFloat_AsDouble(value);
        if (x == -1.0 && PyErr_Occurred()) return -1;
        const float f = (float)x;
        set_field(opt, row, 0, &f, sizeof f);
        return 0;
    }
    case ATTN_OPTION_POSITION: {
        const long long x = PyLong_AsLongLong(value);
        if (x == -1 && PyErr_Occurred()) return -1;
        const int64_t i = x;
        set_field(opt, row, 0, &i, sizeof i);
        return 0;
    }
    case ATTN_OPTION_WINDOW: {
        long long left, right;
        if (!PyArg_ParseTuple(value, "LL", &left, &right)) {
            PyErr_Format(PyExc_TypeError, "%s: expected (left, right), -1 = unbounded", name);
            return -1;
        }
        const int on = 1;
        const int64_t sides[2] = {left, right};
        set_field(opt, row, 0, &on, sizeof on);
        set_field(opt, row, 1, &sides[0], sizeof sides[0]);
        set_field(opt, row, 2, &sides[1], sizeof sides[1]);
        return 0;
    }
    case ATTN_OPTION_PER_BATCH:
    case ATTN_OPTION_PER_HEAD: {
        const bool per_batch = row->kind == ATTN_OPTION_PER_BATCH;
        if (flat_arg(b, value, name, false, per_batch ? 8 : 4, per_batch ? batch : heads, &data, NULL)) return -1;
        set_field(opt, row, 0, &data, sizeof data);
        return 0;
    }
    case ATTN_OPTION_BOOL_TABLE:
    case ATTN_OPTION_FLOAT_TABLE:
        if (flat_arg(b, value, name, false, row->kind == ATTN_OPTION_BOOL_TABLE ? 1 : 4, -1, &data, shape)) return -1;
        set_field(opt, row, 0, &data, sizeof data);
        set_field(opt, row, 1, shape, sizeof shape);
        return 0;
    default: return PyErr_Format(PyExc_TypeError, "%s: not an option Python can set", name), -1;
    }
}

/* The options of one call from its option keywords (split_options); the
 * arrays among them are buffers, held in b until the call returns. */
static int fill_options(buffers *b, PyObject *options, int64_t batch, int64_t heads, attn_sdpa_options *opt) {
    for (int i = 0; attn_sdpa_option(i); i++) {
        const attn_sdpa_option_info *row = attn_sdpa_option(i);
        PyObject *value = row->python ? PyDict_GetItemString(options, row->name) : NULL;
        if (value && value != Py_None && fill_option(b, row, value, batch, heads, opt)) return -1;
    }
    last_ptrs[PTR_MASK] = opt->mask;
    last_ptrs[PTR_BIAS] = opt->bias;
    return 0;
}

/* PyArg_ParseTupleAndKeywords over a function's own arguments, its option
 * keywords set apart in *options (a new dict; NULL on failure). */
static int parse_with_options(PyObject *args, PyObject *kwargs, const char *format, char **keywords,
                              PyObject **options, ...) {
    PyObject *rest = NULL;
    int ok = split_options(kwargs, &rest, options) == 0;
    if (ok) {
        va_list ap;
        va_start(ap, options);
        ok = PyArg_VaParseTupleAndKeywords(args, rest, format, keywords, ap);
        va_end(ap);
    }
    Py_XDECREF(rest);
    if (!ok) Py_CLEAR(*options);
    return ok;
}

/* After a kernel call: the status as an exception, then any Ctrl-C that
 * arrived while the GIL was released (libattn's calls cannot be stopped
 * half-way: attn_progress_fn returns nothing). */
static PyObject *finish_call(attn_status st) {
    if (st != ATTN_OK) {
        raise_status(st, NULL);
        return NULL;
    }
    if (PyErr_CheckSignals() != 0) return NULL;
    Py_RETURN_NONE;
}

/* --------------------------------------------------------------- forward */

PyDoc_STRVAR(sdpa_forward_doc,
             "sdpa_forward(q, k, v, out, weights=None, lse=None, **options)\n"
             "--\n\n"
             "attn_sdpa_forward on 4-D [B, L, H, D] views; private (attn.sdpa is the API).\n"
             "q, k, v, out: (buffer, dtype code) pairs; weights [B, Hq, L, S] and lse [B, Hq, L]\n"
             "C-contiguous float32 buffers or None; mask uint8 and bias float32, C-contiguous\n"
             "[B|1, Hq|1, L|1, S|1]; key_lengths int64 [B]; options: a keyword per row of\n"
             "sdpa_options() that has a Python keyword, named as its field, valued by its kind\n"
             "(a choice by its name).  Writes out (and weights, lse).");

static PyObject *sdpa_forward(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"q", "k", "v", "out", "weights", "lse", NULL};
    PyObject *q_arg, *k_arg, *v_arg, *out_arg, *weights_arg = Py_None, *lse_arg = Py_None, *options;
    (void)self;
    if (!parse_with_options(args, kwargs, "OOOO|OO", keywords, &options, &q_arg, &k_arg, &v_arg, &out_arg,
                            &weights_arg, &lse_arg))
        return NULL;
    buffers b = {.n = 0};
    attn_tensor q, k, v, out;
    attn_sdpa_options opt = ATTN_SDPA_OPTIONS_INIT;
    void *weights = NULL, *lse = NULL;
    PyObject *result = NULL;
    if (tensor_arg(&b, q_arg, "q", false, &q, false, NULL) ||
        tensor_arg(&b, k_arg, "k", false, &k, false, NULL) ||
        tensor_arg(&b, v_arg, "v", false, &v, false, NULL) ||
        tensor_arg(&b, out_arg, "out", true, &out, false, NULL))
        goto done;
    const Py_ssize_t rows = (Py_ssize_t)q.shape[0] * (Py_ssize_t)q.shape[2] * (Py_ssize_t)q.shape[1];
    if (flat_arg(&b, weights_arg, "weights", true, 4, rows * (Py_ssize_t)k.shape[1], &weights, NULL) ||
        flat_arg(&b, lse_arg, "lse", true, 4, rows, &lse, NULL) ||
        fill_options(&b, options, q.shape[0], q.shape[2], &opt))
        goto done;
    last_ptrs[PTR_Q] = q.data;
    last_ptrs[PTR_K] = k.data;
    last_ptrs[PTR_V] = v.data;
    last_ptrs[PTR_OUT] = out.data;
    last_ptrs[PTR_WEIGHTS] = weights;
    last_ptrs[PTR_LSE] = lse;
    attn_status st;
    Py_BEGIN_ALLOW_THREADS
    st = attn_sdpa_forward(&q, &k, &v, &opt, &out, weights, lse);
    Py_END_ALLOW_THREADS
    result = finish_call(st);
done:
    buffers_release(&b);
    Py_DECREF(options);
    return result;
}

/* -------------------------------------------------------------- backward */

PyDoc_STRVAR(sdpa_backward_doc,
             "sdpa_backward(q, k, v, out, lse, dout, dq, dk, dv, dsinks=None, **options)\n"
             "--\n\n"
             "attn_sdpa_backward on 4-D [B, L, H, D] views; private (attn.sdpa_backward is the\n"
             "API).  out and lse both given (the forward's, for these inputs) or both None;\n"
             "dq, dk, dv: writable (buffer, dtype) pairs, or None to skip that gradient;\n"
             "dsinks: a writable float32 [Hq] buffer (with sinks), or None.");

static PyObject *sdpa_backward(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"q", "k", "v", "out", "lse", "dout", "dq", "dk", "dv", "dsinks", NULL};
    PyObject *q_arg, *k_arg, *v_arg, *out_arg, *lse_arg, *dout_arg, *dq_arg, *dk_arg, *dv_arg,
        *dsinks_arg = Py_None, *options;
    (void)self;
    if (!parse_with_options(args, kwargs, "OOOOOOOOO|O", keywords, &options, &q_arg, &k_arg, &v_arg, &out_arg,
                            &lse_arg, &dout_arg, &dq_arg, &dk_arg, &dv_arg, &dsinks_arg))
        return NULL;
    buffers b = {.n = 0};
    attn_tensor q, k, v, out, dout, dq, dk, dv;
    bool no_out, no_dq, no_dk, no_dv;
    attn_sdpa_options opt = ATTN_SDPA_OPTIONS_INIT;
    void *lse = NULL;
    PyObject *result = NULL;
    if (tensor_arg(&b, q_arg, "q", false, &q, false, NULL) ||
        tensor_arg(&b, k_arg, "k", false, &k, false, NULL) ||
        tensor_arg(&b, v_arg, "v", false, &v, false, NULL) ||
        tensor_arg(&b, out_arg, "out", false, &out, true, &no_out) ||
        tensor_arg(&b, dout_arg, "dout", false, &dout, false, NULL) ||
        tensor_arg(&b, dq_arg, "dq", true, &dq, true, &no_dq) ||
        tensor_arg(&b, dk_arg, "dk", true, &dk, true, &no_dk) ||
        tensor_arg(&b, dv_arg, "dv", true, &dv, true, &no_dv))
        goto done;
    const Py_ssize_t rows = (Py_ssize_t)q.shape[0] * (Py_ssize_t)q.shape[2] * (Py_ssize_t)q.shape[1];
    void *dsinks = NULL;
    if (flat_arg(&b, lse_arg, "lse", false, 4, rows, &lse, NULL) ||
        fill_options(&b, options, q.shape[0], q.shape[2], &opt) ||
        flat_arg(&b, dsinks_arg, "dsinks", true, 4, q.shape[2], &dsinks, NULL))
        goto done;
    if (no_out != (lse == NULL)) {
        raise_status(ATTN_ERR_INVALID_ARGUMENT, "out and lse: give both (the forward's) or neither");
        goto done;
    }
    last_ptrs[PTR_Q] = q.data;
    last_ptrs[PTR_K] = k.data;
    last_ptrs[PTR_V] = v.data;
    last_ptrs[PTR_OUT] = no_out ? NULL : out.data;
    last_ptrs[PTR_LSE] = lse;
    last_ptrs[PTR_DOUT] = dout.data;
    last_ptrs[PTR_DQ] = no_dq ? NULL : dq.data;
    last_ptrs[PTR_DK] = no_dk ? NULL : dk.data;
    last_ptrs[PTR_DV] = no_dv ? NULL : dv.data;
    attn_status st;
    Py_BEGIN_ALLOW_THREADS
    attn_sdpa_grads grads = ATTN_SDPA_GRADS_INIT;
    grads.dq = no_dq ? NULL : &dq;
    grads.dk = no_dk ? NULL : &dk;
    grads.dv = no_dv ? NULL : &dv;
    grads.dsinks = dsinks;
    st = attn_sdpa_backward_grads(&q, &k, &v, &opt, no_out ? NULL : &out, lse, &dout, &grads);
    Py_END_ALLOW_THREADS
    result = finish_call(st);
done:
    buffers_release(&b);
    Py_DECREF(options);
    return result;
}

/* ----------------------------------------------------------- the module */

/* The module's arguments: sizes, then C-contiguous float32 buffers (None
 * where optional), each checked against the size the sizes imply. */
typedef struct module_args {
    long long batch, len, context_len, d_model, d_context, heads, kv_heads, head_dim, value_dim,
        d_out;
    PyObject *x, *context, *w[4], *bias[4]; /* q, k, v, o */
} module_args;

static int module_fill(buffers *b, const module_args *a, attn_mha *m, const float **x,
                       const float **context) {
    static const char *const w_names[4] = {"wq", "wk", "wv", "wo"};
    static const char *const b_names[4] = {"bq", "bk", "bv", "bo"};
    const Py_ssize_t d_in[4] = {a->d_model, a->d_context, a->d_context, a->heads * a->value_dim};
    const Py_ssize_t d_outs[4] = {a->heads * a->head_dim, a->kv_heads * a->head_dim,
                                  a->kv_heads * a->value_dim, a->d_out};
    const float **w[4] = {&m->wq, &m->wk, &m->wv, &m->wo};
    const float **bias[4] = {&m->bq, &m->bk, &m->bv, &m->bo};
    void *data;
    m->d_model = a->d_model;
    m->d_context = a->d_context;
    m->heads = a->heads;
    m->kv_heads = a->kv_heads;
    m->head_dim = a->head_dim;
    m->value_dim = a->value_dim;
    m->d_out = a->d_out;
    if (flat_arg(b, a->x, "x", false, 4, (Py_ssize_t)(a->batch * a->len * a->d_model), &data, NULL))
        return -1;
    *x = data;
    if (flat_arg(b, a->context, "context", false, 4,
                 (Py_ssize_t)(a->batch * a->context_len * a->d_context), &data, NULL))
        return -1;
    *context = data;
    for (int i = 0; i < 4; i++) {
        if (flat_arg(b, a->w[i], w_names[i], false, 4, d_in[i] * d_outs[i], &data, NULL)) return -1;
        *w[i] = data;
        if (flat_arg(b, a->bias[i], b_names[i], false, 4, d_outs[i], &data, NULL)) return -1;
        *bias[i] = data;
    }
    return 0;
}

#define MODULE_KEYWORDS "batch", "len", "context_len", "d_model", "d_context", "heads", "kv_heads", \
                        "head_dim", "value_dim", "d_out", "x", "context", "wq", "wk", "wv", "wo",  \
                        "bq", "bk", "bv", "bo"
#define MODULE_FORMAT "LLLLLLLLLLOOOOOOOOOO"
#define MODULE_POINTERS(a) &a.batch, &a.len, &a.context_len, &a.d_model, &a.d_context, &a.heads, \
                           &a.kv_heads, &a.head_dim, &a.value_dim, &a.d_out, &a.x, &a.context,    \
                           &a.w[0], &a.w[1], &a.w[2], &a.w[3], &a.bias[0], &a.bias[1],            \
                           &a.bias[2], &a.bias[3]

PyDoc_STRVAR(mha_forward_doc,
             "mha_forward(<sizes>, x, context, wq, wk, wv, wo, bq, bk, bv, bo, out, weights, lse,\n"
             "            **options)\n--\n\n"
             "attn_mha_forward on C-contiguous float32 buffers; private (attn.mha_forward is the\n"
             "API).  x [B, L, d_model], context [B, S, d_context] or None, out [B, L, d_out].");

static PyObject *mha_forward(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {MODULE_KEYWORDS, "out", "weights", "lse", NULL};
    module_args a;
    PyObject *out_arg, *weights_arg, *lse_arg, *options;
    (void)self;
    if (!parse_with_options(args, kwargs, MODULE_FORMAT "OOO", keywords, &options, MODULE_POINTERS(a), &out_arg,
                            &weights_arg, &lse_arg))
        return NULL;
    buffers b = {.n = 0};
    attn_mha m = ATTN_MHA_INIT;
    attn_sdpa_options opt = ATTN_SDPA_OPTIONS_INIT;
    const float *x, *context;
    void *out, *weights, *lse;
    PyObject *result = NULL;
    const Py_ssize_t rows = (Py_ssize_t)(a.batch * a.heads * a.len);
    const Py_ssize_t keys = (Py_ssize_t)(a.context == Py_None ? a.len : a.context_len);
    if (module_fill(&b, &a, &m, &x, &context) ||
        flat_arg(&b, out_arg, "out", true, 4, (Py_ssize_t)(a.batch * a.len * a.d_out), &out, NULL) ||
        flat_arg(&b, weights_arg, "weights", true, 4, rows * keys, &weights, NULL) ||
        flat_arg(&b, lse_arg, "lse", true, 4, rows, &lse, NULL) ||
        fill_options(&b, options, (int64_t)a.batch, (int64_t)a.heads, &opt))
        goto done;
    attn_status st;
    Py_BEGIN_ALLOW_THREADS
    st = attn_mha_forward(&m, x, a.batch, a.len, context, a.context_len, &opt, out, weights, lse);
    Py_END_ALLOW_THREADS
    result = finish_call(st);
done:
    buffers_release(&b);
    Py_DECREF(options);
    return result;
}

PyDoc_STRVAR(mha_backward_doc,
             "mha_backward(<sizes>, x, context, wq, wk, wv, wo, bq, bk, bv, bo, dout,\n"
             "             dx, dcontext, dwq, dwk, dwv, dwo, dbq, dbk, dbv, dbo, **options)\n"
             "--\n\n"
             "attn_mha_backward on C-contiguous float32 buffers; private (attn.mha_backward is\n"
             "the API).  Each gradient a writable buffer of its parameter's size, or None.");

static PyObject *mha_backward(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {MODULE_KEYWORDS, "dout", "dx", "dcontext", "dwq", "dwk", "dwv", "dwo",
                               "dbq", "dbk", "dbv", "dbo", NULL};
    module_args a;
    PyObject *dout_arg, *g[10], *options;
    (void)self;
    if (!parse_with_options(args, kwargs, MODULE_FORMAT "OOOOOOOOOOO", keywords, &options, MODULE_POINTERS(a),
                            &dout_arg, &g[0], &g[1], &g[2], &g[3], &g[4], &g[5], &g[6], &g[7], &g[8], &g[9]))
        return NULL;
    buffers b = {.n = 0};
    attn_mha m = ATTN_MHA_INIT;
    attn_mha_grads grads = ATTN_MHA_GRADS_INIT;
    attn_sdpa_options opt = ATTN_SDPA_OPTIONS_INIT;
    const float *x, *context;
    void *dout;
    PyObject *result = NULL;
    static const char *const g_names[10] = {"dx", "dcontext", "dwq", "dwk", "dwv", "dwo",
                                            "dbq", "dbk", "dbv", "dbo"};
    float **g_ptrs[10] = {&grads.dx, &grads.dcontext, &grads.dwq, &grads.dwk, &grads.dwv,
                          &grads.dwo, &grads.dbq, &grads.dbk, &grads.dbv, &grads.dbo};
    if (module_fill(&b, &a, &m, &x, &context) ||
        flat_arg(&b, dout_arg, "dout", false, 4, (Py_ssize_t)(a.batch * a.len * a.d_out), &dout, NULL))
        goto done;
    for (int i = 0; i < 10; i++) {
        void *data;
        if (flat_arg(&b, g[i], g_names[i], true, 4, -1, &data, NULL)) goto done;
        *g_ptrs[i] = data;
    }
    if (fill_options(&b, options, (int64_t)a.batch, (int64_t)a.heads, &opt)) goto done;
    attn_status st;
    Py_BEGIN_ALLOW_THREADS
    st = attn_mha_backward(&m, x, a.batch, a.len, context, a.context_len, &opt, dout, &grads);
    Py_END_ALLOW_THREADS
    result = finish_call(st);
done:
    buffers_release(&b);
    Py_DECREF(options);
    return result;
}

/* ----------------------------------------------------------------- trace */

/* A float32 array the library owns, copied once into a bytearray that
 * Python wraps with numpy: (bytearray, shape tuple). */
static PyObject *float_array(const float *data, int ndim, const int64_t *shape) {
    Py_ssize_t count = 1;
    PyObject *dims = PyTuple_New(ndim);
    for (int i = 0; dims && i < ndim; i++) {
        count *= (Py_ssize_t)shape[i];
        PyObject *n = PyLong_FromLongLong((long long)shape[i]);
        if (!n) Py_CLEAR(dims);
        else PyTuple_SET_ITEM(dims, i, n);
    }
    PyObject *bytes = dims ? PyByteArray_FromStringAndSize((const char *)data,
                                                           count * (Py_ssize_t)sizeof(float))
                           : NULL;
    PyObject *pair = bytes ? PyTuple_Pack(2, bytes, dims) : NULL;
    Py_XDECREF(dims);
    Py_XDECREF(bytes);
    return pair;
}

/* Every hook a trace holds as {name: (bytearray, shape)}. */
static PyObject *trace_dict(const attn_trace *trace) {
    PyObject *result = PyDict_New();
    for (int h = 0; result && h < ATTN_HOOK_COUNT; h++) {
        attn_hook_tensor view;
        if (attn_trace_get(trace, (attn_hook)h, &view) != ATTN_OK) continue; /* bare: no W_O hooks */
        PyObject *entry = float_array(view.data, view.ndim, view.shape);
        if (!entry || PyDict_SetItemString(result, view.name, entry) != 0) Py_CLEAR(result);
        Py_XDECREF(entry);
    }
    return result;
}


PyDoc_STRVAR(sdpa_trace_doc,
             "sdpa_trace(q, k, v, **options)\n"
             "--\n\n"
             "attn_sdpa_forward_traced without patches on 4-D [B, L, H, D] views; private\n"
             "(attn.trace is the API).  Returns {hook name: (bytearray, shape)} for every\n"
             "hook the trace holds, in TransformerLens's axis order (attn_interp.h); the\n"
             "library's buffers are copied once and freed.");

static PyObject *sdpa_trace(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"q", "k", "v", NULL};
    PyObject *q_arg, *k_arg, *v_arg, *options;
    (void)self;
    if (!parse_with_options(args, kwargs, "OOO", keywords, &options, &q_arg, &k_arg, &v_arg)) return NULL;
    buffers b = {.n = 0};
    attn_tensor q, k, v;
    attn_sdpa_options opt = ATTN_SDPA_OPTIONS_INIT;
    attn_trace trace = {0};
    PyObject *result = NULL;
    if (tensor_arg(&b, q_arg, "q", false, &q, false, NULL) ||
        tensor_arg(&b, k_arg, "k", false, &k, false, NULL) ||
        tensor_arg(&b, v_arg, "v", false, &v, false, NULL) || fill_options(&b, options, q.shape[0], q.shape[2], &opt))
        goto done;
    attn_status st;
    Py_BEGIN_ALLOW_THREADS
    st = attn_sdpa_forward_traced(&q, &k, &v, &opt, NULL, 0, &trace, NULL);
    Py_END_ALLOW_THREADS
    PyObject *ok = finish_call(st);
    if (!ok) goto done;
    Py_DECREF(ok);
    result = trace_dict(&trace);
done:
    attn_trace_free(&trace);
    buffers_release(&b);
    Py_DECREF(options);
    return result;
}

/* ------------------------------------------------------ paths, nullspace */

PyDoc_STRVAR(sdpa_paths_doc,
             "sdpa_paths(q, k, v, q_changed, k_changed, v_changed, **options)\n--\n\n"
             "attn_sdpa_paths on 4-D [B, L, H, D] views (the changed ones may be None);\n"
             "private (attn.paths is the API).  Returns {case name: {hook: (bytearray, shape)},\n"
             "'interaction_z': (bytearray, shape)}.");

static PyObject *sdpa_paths(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"q", "k", "v", "q_changed", "k_changed", "v_changed", NULL};
    PyObject *arg[6], *options;
    (void)self;
    if (!parse_with_options(args, kwargs, "OOOOOO", keywords, &options, &arg[0], &arg[1], &arg[2], &arg[3], &arg[4],
                            &arg[5]))
        return NULL;
    static const char *const names[6] = {"q", "k", "v", "q_changed", "k_changed", "v_changed"};
    buffers b = {.n = 0};
    attn_tensor t[6];
    bool missing[6];
    attn_sdpa_options opt = ATTN_SDPA_OPTIONS_INIT;
    attn_paths paths;
    memset(&paths, 0, sizeof paths);
    PyObject *result = NULL;
    for (int i = 0; i < 6; i++)
        if (tensor_arg(&b, arg[i], names[i], false, &t[i], i >= 3, &missing[i])) goto done;
    if (fill_options(&b, options, t[0].shape[0], t[0].shape[2], &opt)) goto done;
    attn_status st;
    Py_BEGIN_ALLOW_THREADS
    st = attn_sdpa_paths(&t[0], &t[1], &t[2], missing[3] ? NULL : &t[3], missing[4] ? NULL : &t[4],
                         missing[5] ? NULL : &t[5], &opt, &paths);
    Py_END_ALLOW_THREADS
    PyObject *ok = finish_call(st);
    if (!ok) goto done;
    Py_DECREF(ok);
    result = PyDict_New();
    for (int i = 0; result && i < ATTN_PATH_CASES; i++) {
        PyObject *hooks = trace_dict(&paths.run[i]);
        if (!hooks || PyDict_SetItemString(result, attn_path_case_name((attn_path_case)i), hooks) != 0)
            Py_CLEAR(result);
        Py_XDECREF(hooks);
    }
    if (result) {
        const attn_trace *base = &paths.run[ATTN_PATH_BASE];
        const int64_t shape[4] = {base->batch, base->len, base->heads, base->value_dim};
        PyObject *z = float_array(paths.interaction_z, 4, shape);
        if (!z || PyDict_SetItemString(result, "interaction_z", z) != 0) Py_CLEAR(result);
        Py_XDECREF(z);
    }
done:
    attn_paths_free(&paths);
    buffers_release(&b);
    Py_DECREF(options);
    return result;
}

PyDoc_STRVAR(nullspace_doc,
             "nullspace(weights, values, visible, moved, *, tolerance, exact_limit=0, starts=0,\n"
             "          allow_slow=False) -> dict\n--\n\n"
             "attn_nullspace_search: weights float32 [S], values float32 [S, width] C-contiguous,\n"
             "visible uint8 [S] or None, moved float64 [S] (written).  Private (attn.nullspace).");

static PyObject *nullspace(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"weights", "values", "visible", "moved", "tolerance", "exact_limit",
                               "starts", "allow_slow", NULL};
    PyObject *w_arg, *v_arg, *vis_arg, *moved_arg;
    long long keys, width, exact_limit = 0, starts = 0;
    int allow_slow = 0;
    attn_nullspace_options opt = ATTN_NULLSPACE_OPTIONS_INIT;
    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOO|$dLLp", keywords, &w_arg, &v_arg, &vis_arg,
                                     &moved_arg, &opt.tolerance, &exact_limit, &starts, &allow_slow))
        return NULL;
    buffers b = {.n = 0};
    void *weights, *values, *visible, *moved;
    attn_nullspace_result res;
    memset(&res, 0, sizeof res);
    PyObject *result = NULL;
    if (flat_arg(&b, w_arg, "weights", false, 4, -1, &weights, NULL)) goto done;
    keys = (long long)(b.views[b.n - 1].len / 4);
    if (flat_arg(&b, v_arg, "values", false, 4, -1, &values, NULL)) goto done;
    width = keys ? (long long)(b.views[b.n - 1].len / 4) / keys : 0;
    if (keys && width * keys * 4 != (long long)b.views[b.n - 1].len) {
        PyErr_Format(class_for_status(ATTN_ERR_SHAPE), "values: %zd floats are not %lld rows",
                     b.views[b.n - 1].len / 4, keys);
        goto done;
    }
    if (flat_arg(&b, vis_arg, "visible", false, 1, (Py_ssize_t)keys, &visible, NULL) ||
        flat_arg(&b, moved_arg, "moved", true, 8, (Py_ssize_t)keys, &moved, NULL))
        goto done;
    opt.exact_limit = exact_limit;
    opt.starts = starts;
    opt.allow_slow = allow_slow;
    attn_status st;
    Py_BEGIN_ALLOW_THREADS
    st = attn_nullspace_search(weights, values, keys, width, visible, &opt, moved, &res);
    Py_END_ALLOW_THREADS
    PyObject *ok = finish_call(st);
    if (!ok) goto done;
    Py_DECREF(ok);
    result = Py_BuildValue("{s:d,s:d,s:O,s:L,s:L}", "l1", res.l1, "max_output_change",
                           res.max_output_change, "exact", res.exact ? Py_True : Py_False, "visible",
                           (long long)res.visible, "programs", (long long)res.programs);
done:
    buffers_release(&b);
    return result;
}

/* --------------------------------------------------------------- heatmap */

/* A sequence of str as a NULL-free array of UTF-8 pointers of exactly n
 * entries, kept alive by *keep (a tuple this function owns), or NULL for
 * None.  The pointers stay valid while the GIL is released: *keep holds
 * the strings, whatever the caller does to its list meanwhile. */
static int labels_arg(PyObject *obj, const char *name, Py_ssize_t n, PyObject **keep,
                      const char ***labels) {
    *labels = NULL;
    *keep = NULL;
    if (obj == Py_None) return 0;
    PyObject *t = PySequence_Tuple(obj);
    if (!t) {
        PyErr_Format(PyExc_TypeError, "%s: expected a sequence of str", name);
        return -1;
    }
    *keep = t;
    if (PyTuple_GET_SIZE(t) != n) {
        PyErr_Format(class_for_status(ATTN_ERR_SHAPE), "%s: %zd labels for %zd rows", name,
                     PyTuple_GET_SIZE(t), n);
        return -1;
    }
    const char **out = PyMem_Calloc((size_t)(n ? n : 1), sizeof *out);
    if (!out) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyTuple_GET_ITEM(t, i);
        out[i] = PyUnicode_Check(item) ? PyUnicode_AsUTF8(item) : NULL;
        if (!out[i]) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_TypeError, "%s[%zd]: expected str, got %R", name, i,
                             (PyObject *)Py_TYPE(item));
            PyMem_Free(out);
            return -1;
        }
    }
    *labels = out;
    return 0;
}

PyDoc_STRVAR(heatmap_doc,
             "heatmap(path, weights, heads, len_q, len_kv, *, query_labels=None, key_labels=None,\n"
             "        visible=None, head_ids=None, title=None, lang=None, vmin=0.0, vmax=0.0,\n"
             "        values=0, columns=0, cell=0.0, panel_titles=None, vmax_quantile=0.0)\n--\n\n"
             "attn_heatmap_write: weights float32 [H, L, S] C-contiguous; visible uint8 [H, L, S]\n"
             "or None; head_ids int64 [H] or None; panel_titles [H] str or None.  Private (attn.heatmap).");

static PyObject *heatmap(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"path", "weights", "heads", "len_q", "len_kv", "query_labels",
                               "key_labels", "visible", "head_ids", "title", "lang", "vmin", "vmax",
                               "values", "columns", "cell", "panel_titles", "vmax_quantile", NULL};
    PyObject *path_obj, *w_arg, *ql_arg = Py_None, *kl_arg = Py_None, *vis_arg = Py_None,
                                 *ids_arg = Py_None, *pt_arg = Py_None, *path_bytes = NULL;
    long long heads, len_q, len_kv;
    const char *title = NULL, *lang = NULL;
    attn_heatmap_options opt = ATTN_HEATMAP_OPTIONS_INIT;
    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOLLL|$OOOOzzffiidOd", keywords, &path_obj,
                                     &w_arg, &heads, &len_q, &len_kv, &ql_arg, &kl_arg, &vis_arg,
                                     &ids_arg, &title, &lang, &opt.vmin, &opt.vmax, &opt.values,
                                     &opt.columns, &opt.cell, &pt_arg, &opt.vmax_quantile))
        return NULL;
    if (!PyUnicode_FSConverter(path_obj, &path_bytes)) return NULL;
    buffers b = {.n = 0};
    PyObject *keep_q = NULL, *keep_k = NULL, *keep_t = NULL, *result = NULL;
    const char **qlabels = NULL, **klabels = NULL, **titles = NULL;
    void *weights, *visible, *ids;
    const Py_ssize_t cells = (Py_ssize_t)(heads * len_q * len_kv);
    if (flat_arg(&b, w_arg, "weights", false, 4, cells, &weights, NULL) ||
        flat_arg(&b, vis_arg, "visible", false, 1, cells, &visible, NULL) ||
        flat_arg(&b, ids_arg, "head_ids", false, 8, (Py_ssize_t)heads, &ids, NULL) ||
        labels_arg(ql_arg, "query_labels", (Py_ssize_t)len_q, &keep_q, &qlabels) ||
        labels_arg(kl_arg, "key_labels", (Py_ssize_t)len_kv, &keep_k, &klabels) ||
        labels_arg(pt_arg, "panel_titles", (Py_ssize_t)heads, &keep_t, &titles))
        goto done;
    opt.query_labels = qlabels;
    opt.key_labels = klabels;
    opt.panel_titles = titles;
    opt.visible = visible;
    opt.head_ids = ids;
    opt.title = title;
    opt.lang = lang;
    attn_status st;
    Py_BEGIN_ALLOW_THREADS
    st = attn_heatmap_write(PyBytes_AS_STRING(path_bytes), weights, heads, len_q, len_kv, &opt);
    Py_END_ALLOW_THREADS
    result = finish_call(st);
done:
    PyMem_Free(qlabels);
    PyMem_Free(klabels);
    PyMem_Free(titles);
    Py_XDECREF(keep_q);
    Py_XDECREF(keep_k);
    Py_XDECREF(keep_t);
    Py_DECREF(path_bytes);
    buffers_release(&b);
    return result;
}

/* ---------------------------------------------------------------- report */

/* The five runs' z and pattern and the interaction of attn.paths, as an
 * attn_paths that borrows the caller's buffers (never freed here).  spec:
 * (batch, heads, value_dim, (z x5), (pattern x5), interaction_z), each array
 * float32 C-contiguous: z [B, L, Hq, Dv], pattern [B, Hq, L, S]. */
static int paths_arg(buffers *b, PyObject *spec, int64_t len_q, int64_t len_kv, attn_paths *paths) {
    long long batch, heads, value_dim;
    PyObject *zs, *patterns, *inter;
    if (!PyArg_ParseTuple(spec, "LLLO!O!O;paths: (batch, heads, value_dim, z, pattern, interaction_z)",
                          &batch, &heads, &value_dim, &PyTuple_Type, &zs, &PyTuple_Type, &patterns,
                          &inter))
        return -1;
    if (PyTuple_GET_SIZE(zs) != ATTN_PATH_CASES || PyTuple_GET_SIZE(patterns) != ATTN_PATH_CASES) {
        PyErr_Format(PyExc_ValueError, "paths: %d runs of z and pattern needed", (int)ATTN_PATH_CASES);
        return -1;
    }
    const Py_ssize_t z_count = (Py_ssize_t)(batch * len_q * heads * value_dim);
    const Py_ssize_t w_count = (Py_ssize_t)(batch * heads * len_q * len_kv);
    for (int c = 0; c < ATTN_PATH_CASES; c++) {
        attn_trace *t = &paths->run[c];
        *t = (attn_trace){.batch = batch, .len = len_q, .context_len = len_kv, .heads = heads,
                          .kv_heads = heads, .value_dim = value_dim};
        void *z, *pattern;
        if (flat_arg(b, PyTuple_GET_ITEM(zs, c), "paths z", false, 4, z_count, &z, NULL) ||
            flat_arg(b, PyTuple_GET_ITEM(patterns, c), "paths pattern", false, 4, w_count, &pattern, NULL))
            return -1;
        t->z = z;
        t->pattern = pattern;
    }
    void *iz;
    if (flat_arg(b, inter, "paths interaction_z", false, 4, z_count, &iz, NULL)) return -1;
    paths->interaction_z = iz;
    return 0;
}

PyDoc_STRVAR(report_doc,
             "report(path, weights, layers, heads, len_q, len_kv, *, visible=None, head_ids=None,\n"
             "       layer_ids=None, query_labels=None, key_labels=None, title=None, subtitle=None,\n"
             "       line=None, line_labels=None, line_title=None, paths=None, paths_batch=0)\n--\n\n"
             "attn_report_write_html: weights float32 [layers, H, L, S] C-contiguous; visible uint8\n"
             "of the same shape or None; head_ids, layer_ids int64 or None; line float64 [n] or\n"
             "None; paths as paths_arg reads it.  Private (attn.report).");

static PyObject *report(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"path", "weights", "layers", "heads", "len_q", "len_kv", "visible",
                               "head_ids", "layer_ids", "query_labels", "key_labels", "title",
                               "subtitle", "line", "line_labels", "line_title", "paths",
                               "paths_batch", NULL};
    PyObject *path_obj, *w_arg, *vis_arg = Py_None, *ids_arg = Py_None, *lids_arg = Py_None,
                                 *ql_arg = Py_None, *kl_arg = Py_None, *line_arg = Py_None,
                                 *ll_arg = Py_None, *paths_arg_obj = Py_None, *path_bytes = NULL;
    long long layers, heads, len_q, len_kv, paths_batch = 0;
    const char *title = NULL, *subtitle = NULL, *line_title = NULL;
    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOLLLL|$OOOOOzzOOzOL", keywords, &path_obj, &w_arg,
                                     &layers, &heads, &len_q, &len_kv, &vis_arg, &ids_arg, &lids_arg,
                                     &ql_arg, &kl_arg, &title, &subtitle, &line_arg, &ll_arg,
                                     &line_title, &paths_arg_obj, &paths_batch))
        return NULL;
    if (!PyUnicode_FSConverter(path_obj, &path_bytes)) return NULL;
    buffers b = {.n = 0};
    PyObject *keep_q = NULL, *keep_k = NULL, *keep_l = NULL, *result = NULL;
    const char **qlabels = NULL, **klabels = NULL, **llabels = NULL;
    void *weights, *visible, *ids, *lids, *line = NULL;
    attn_paths paths;
    memset(&paths, 0, sizeof paths);
    const Py_ssize_t cells = (Py_ssize_t)(layers * heads * len_q * len_kv);
    Py_ssize_t line_len = 0;
    if (line_arg != Py_None) {
        Py_buffer *view = buffers_get(&b, line_arg, "line", false);
        if (!view) goto done;
        if (view->itemsize != 8 || !PyBuffer_IsContiguous(view, 'C')) {
            PyErr_SetString(PyExc_TypeError, "line: float64 C-contiguous expected");
            goto done;
        }
        line = view->buf;
        line_len = view->len / 8;
    }
    if (flat_arg(&b, w_arg, "weights", false, 4, cells, &weights, NULL) ||
        flat_arg(&b, vis_arg, "visible", false, 1, cells, &visible, NULL) ||
        flat_arg(&b, ids_arg, "head_ids", false, 8, (Py_ssize_t)heads, &ids, NULL) ||
        flat_arg(&b, lids_arg, "layer_ids", false, 8, (Py_ssize_t)layers, &lids, NULL) ||
        labels_arg(ql_arg, "query_labels", (Py_ssize_t)len_q, &keep_q, &qlabels) ||
        labels_arg(kl_arg, "key_labels", (Py_ssize_t)len_kv, &keep_k, &klabels) ||
        labels_arg(ll_arg, "line_labels", line_len, &keep_l, &llabels))
        goto done;
    if (paths_arg_obj != Py_None && paths_arg(&b, paths_arg_obj, len_q, len_kv, &paths)) goto done;
    attn_report r = ATTN_REPORT_INIT;
    r.title = title;
    r.subtitle = subtitle;
    r.heads = heads;
    r.len_q = len_q;
    r.len_kv = len_kv;
    r.weights = weights;
    r.visible = visible;
    r.head_ids = ids;
    r.query_labels = qlabels;
    r.key_labels = klabels;
    r.paths = paths_arg_obj != Py_None ? &paths : NULL;
    r.paths_batch = paths_batch;
    r.layers = layers;
    r.layer_ids = lids;
    r.line = line;
    r.line_len = line_len;
    r.line_labels = llabels;
    r.line_title = line_title;
    attn_status st;
    Py_BEGIN_ALLOW_THREADS
    st = attn_report_write_html(PyBytes_AS_STRING(path_bytes), &r);
    Py_END_ALLOW_THREADS
    result = finish_call(st);
done:
    PyMem_Free(qlabels);
    PyMem_Free(klabels);
    PyMem_Free(llabels);
    Py_XDECREF(keep_q);
    Py_XDECREF(keep_k);
    Py_XDECREF(keep_l);
    Py_DECREF(path_bytes);
    buffers_release(&b);
    return result;
}

/* ------------------------------------------------------------ the others */

/* ------------------------------------------------------- the options' table */

static const char *const kind_names[] = {
    [ATTN_OPTION_SWITCH] = "switch",         [ATTN_OPTION_CHOICE] = "choice",
    [ATTN_OPTION_FLOAT] = "float",           [ATTN_OPTION_INT] = "int",
    [ATTN_OPTION_POSITION] = "position",     [ATTN_OPTION_WINDOW] = "window",
    [ATTN_OPTION_PER_BATCH] = "per_batch",   [ATTN_OPTION_PER_HEAD] = "per_head",
    [ATTN_OPTION_BOOL_TABLE] = "bool_table", [ATTN_OPTION_FLOAT_TABLE] = "float_table",
    [ATTN_OPTION_BUFFER] = "buffer",         [ATTN_OPTION_CALLBACK] = "callback"};
static const char *const ranks_names[] = {[ATTN_RANKS_AGREE] = "agree", [ATTN_RANKS_OWN] = "own",
                                          [ATTN_RANKS_PLACED] = "placed", [ATTN_RANKS_KEPT] = "kept",
                                          [ATTN_RANKS_REFUSED] = "refused"};

/* A NULL-terminated array of strings as a tuple; None for NULL. */
static PyObject *names_tuple(const char *const *names) {
    if (!names) Py_RETURN_NONE;
    Py_ssize_t n = 0;
    while (names[n]) n++;
    PyObject *t = PyTuple_New(n);
    for (Py_ssize_t i = 0; t && i < n; i++) {
        PyObject *name = PyUnicode_FromString(names[i]);
        if (!name) Py_CLEAR(t);
        else PyTuple_SET_ITEM(t, i, name);
    }
    return t;
}

static PyObject *option_row(const attn_sdpa_option_info *row) {
    PyObject *choices = names_tuple(row->choices), *flags = PyList_New(0);
    for (int n = 0; flags && n < 2 && row->flags[n].name; n++) {
        PyObject *flag = Py_BuildValue("(szs)", row->flags[n].name, row->flags[n].value, row->flags[n].help);
        if (!flag || PyList_Append(flags, flag) != 0) Py_CLEAR(flags);
        Py_XDECREF(flag);
    }
    PyObject *d = choices && flags ? Py_BuildValue(
        "{s:s,s:s,s:O,s:s,s:s,s:d,s:d,s:z,s:N,s:z,s:z,s:s}", "name", row->name, "kind", kind_names[row->kind],
        "choices", choices, "default", row->default_text, "help", row->help, "min", row->min, "max", row->max,
        "group", row->group, "flags", PyList_AsTuple(flags), "python", row->python, "python_default",
        row->python_default, "ranks", ranks_names[row->ranks]) : NULL;
    Py_XDECREF(choices);
    Py_XDECREF(flags);
    return d;
}

PyDoc_STRVAR(sdpa_options_doc,
             "sdpa_options() -> tuple\n--\n\n"
             "libattn's table of attn_sdpa_options (attn_sdpa_option), a dict per option: name (its\n"
             "field), kind, choices, default, help, min, max, group, flags ((name, value, help), ...),\n"
             "python and python_default (its keyword in the package), ranks (what ring attention does\n"
             "with it).  The one description of the options the attention calls take.");

static PyObject *sdpa_options(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    int count = 0;
    while (attn_sdpa_option(count)) count++;
    PyObject *t = PyTuple_New(count);
    for (int i = 0; t && i < count; i++) {
        PyObject *row = option_row(attn_sdpa_option(i));
        if (!row) Py_CLEAR(t);
        else PyTuple_SET_ITEM(t, i, row);
    }
    return t;
}

PyDoc_STRVAR(last_pointers_doc,
             "last_pointers() -> dict\n--\n\n"
             "The data pointers (as ints, 0 for none) the last call on this thread handed to\n"
             "libattn: the tests' proof that arrays reach the library without a copy.");

static PyObject *last_pointers(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    PyObject *d = PyDict_New();
    for (int i = 0; d && i < N_PTRS; i++) {
        PyObject *p = PyLong_FromVoidPtr((void *)last_ptrs[i]);
        if (!p || PyDict_SetItemString(d, ptr_names[i], p) != 0) {
            Py_XDECREF(p);
            Py_CLEAR(d);
            break;
        }
        Py_DECREF(p);
    }
    return d;
}

PyDoc_STRVAR(raise_for_status_doc,
             "raise_for_status(status, message)\n--\n\n"
             "Raises the exception class of an attn_status code with message (for the tests\n"
             "and for Python code that reports a library failure the same way).");

static PyObject *raise_for_status(PyObject *self, PyObject *args) {
    int st;
    const char *msg;
    (void)self;
    if (!PyArg_ParseTuple(args, "is", &st, &msg)) return NULL;
    if (st == ATTN_OK) Py_RETURN_NONE;
    raise_status((attn_status)st, msg);
    return NULL;
}

/* -------------------------------------------------------------- analyses */

PyDoc_STRVAR(value_norms_doc,
             "value_norms(pattern, v, wo, norms, *, heads, queries, keys, kv_heads, head_dim, width,\n"
             "            reference=False)\n--\n\n"
             "attn_value_weighted_norms (or its _ref twin): pattern float32 [H, L, S], v float32\n"
             "[S, Hkv, Dh], wo float32 [H, Dh, d] or None, norms float32 [H, L, S] (written), all\n"
             "C-contiguous.  Private (attn.value_weighted_norms).");

static PyObject *value_norms(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"pattern", "v", "wo", "norms", "heads", "queries", "keys", "kv_heads",
                               "head_dim", "width", "reference", NULL};
    PyObject *p_arg, *v_arg, *wo_arg, *n_arg;
    long long H = 0, L = 0, S = 0, Hkv = 0, Dh = 0, d = 0; /* keyword-only, so optional to CPython: 0 is refused */
    int reference = 0;
    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOO|$LLLLLLp", keywords, &p_arg, &v_arg, &wo_arg, &n_arg, &H,
                                     &L, &S, &Hkv, &Dh, &d, &reference))
        return NULL;
    buffers b = {.n = 0};
    void *pattern, *v, *wo, *norms;
    PyObject *result = NULL;
    /* The sizes are the caller's (attn.value_weighted_norms checked the
     * shapes); the counts here only keep the library inside the buffers,
     * and the library refuses sizes that are not positive. */
    if (H <= 0 || L <= 0 || S <= 0 || Hkv <= 0 || Dh <= 0 || d <= 0) {
        PyErr_SetString(class_for_status(ATTN_ERR_INVALID_ARGUMENT), "value_norms: sizes must be positive");
        goto done;
    }
    if (flat_arg(&b, p_arg, "pattern", false, 4, (Py_ssize_t)(H * L * S), &pattern, NULL) ||
        flat_arg(&b, v_arg, "v", false, 4, (Py_ssize_t)(S * Hkv * Dh), &v, NULL) ||
        flat_arg(&b, wo_arg, "wo", false, 4, (Py_ssize_t)(H * Dh * d), &wo, NULL) ||
        flat_arg(&b, n_arg, "norms", true, 4, (Py_ssize_t)(H * L * S), &norms, NULL))
        goto done;
    attn_status st;
    Py_BEGIN_ALLOW_THREADS
    st = (reference ? attn_value_weighted_norms_ref : attn_value_weighted_norms)(pattern, H, L, S, v, Hkv, Dh, wo,
                                                                                 d, norms);
    Py_END_ALLOW_THREADS
    result = finish_call(st);
done:
    buffers_release(&b);
    return result;
}

PyDoc_STRVAR(rollout_doc,
             "rollout(patterns, out, *, layers, heads, tokens, head, residual, position=None)\n--\n\n"
             "attn_attention_rollout (position None: out float64 [N, L, L]) or attn_attention_flow\n"
             "(out float64 [L]): patterns float32 [N, H, L, L] C-contiguous; head -1 for the mean.\n"
             "Private (attn.attention_rollout, attn.attention_flow).");

static PyObject *rollout(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"patterns", "out", "layers", "heads", "tokens", "head", "residual", "position", NULL};
    PyObject *p_arg, *o_arg, *pos_arg = Py_None;
    long long N = 0, H = 0, L = 0, head = ATTN_ALL; /* keyword-only, so optional to CPython: 0 is refused */
    double residual = 0.5;
    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO|$LLLLdO", keywords, &p_arg, &o_arg, &N, &H, &L, &head,
                                     &residual, &pos_arg))
        return NULL;
    const bool flow = pos_arg != Py_None;
    long long position = flow ? PyLong_AsLongLong(pos_arg) : 0;
    if (position == -1 && PyErr_Occurred()) return NULL;
    buffers b = {.n = 0};
    void *patterns, *out;
    PyObject *result = NULL;
    if (N <= 0 || H <= 0 || L <= 0) {
        PyErr_SetString(class_for_status(ATTN_ERR_INVALID_ARGUMENT), "rollout: sizes must be positive");
        goto done;
    }
    if (flat_arg(&b, p_arg, "patterns", false, 4, (Py_ssize_t)(N * H * L * L), &patterns, NULL) ||
        flat_arg(&b, o_arg, "out", true, 8, (Py_ssize_t)(flow ? L : N * L * L), &out, NULL))
        goto done;
    attn_status st;
    Py_BEGIN_ALLOW_THREADS
    st = flow ? attn_attention_flow(patterns, N, H, L, head, residual, position, out)
              : attn_attention_rollout(patterns, N, H, L, head, residual, out);
    Py_END_ALLOW_THREADS
    result = finish_call(st);
done:
    buffers_release(&b);
    return result;
}

static PyMethodDef module_methods[] = {
    {"sdpa_forward", (PyCFunction)(void (*)(void))sdpa_forward, METH_VARARGS | METH_KEYWORDS,
     sdpa_forward_doc},
    {"sdpa_backward", (PyCFunction)(void (*)(void))sdpa_backward, METH_VARARGS | METH_KEYWORDS,
     sdpa_backward_doc},
    {"mha_forward", (PyCFunction)(void (*)(void))mha_forward, METH_VARARGS | METH_KEYWORDS,
     mha_forward_doc},
    {"mha_backward", (PyCFunction)(void (*)(void))mha_backward, METH_VARARGS | METH_KEYWORDS,
     mha_backward_doc},
    {"sdpa_trace", (PyCFunction)(void (*)(void))sdpa_trace, METH_VARARGS | METH_KEYWORDS,
     sdpa_trace_doc},
    {"sdpa_paths", (PyCFunction)(void (*)(void))sdpa_paths, METH_VARARGS | METH_KEYWORDS,
     sdpa_paths_doc},
    {"nullspace", (PyCFunction)(void (*)(void))nullspace, METH_VARARGS | METH_KEYWORDS, nullspace_doc},
    {"value_norms", (PyCFunction)(void (*)(void))value_norms, METH_VARARGS | METH_KEYWORDS, value_norms_doc},
    {"rollout", (PyCFunction)(void (*)(void))rollout, METH_VARARGS | METH_KEYWORDS, rollout_doc},
    {"heatmap", (PyCFunction)(void (*)(void))heatmap, METH_VARARGS | METH_KEYWORDS, heatmap_doc},
    {"report", (PyCFunction)(void (*)(void))report, METH_VARARGS | METH_KEYWORDS, report_doc},
    {"sdpa_options", sdpa_options, METH_NOARGS, sdpa_options_doc},
    {"last_pointers", last_pointers, METH_NOARGS, last_pointers_doc},
    {"raise_for_status", raise_for_status, METH_VARARGS, raise_for_status_doc},
    {NULL, NULL, 0, NULL}};

/* The module refuses to load against a libattn whose version is not the
 * one its headers declared: a mixed installation gives wrong answers or
 * crashes later, so it fails here, with both versions in the message. */
static int check_library_version(void) {
    if (attn_version_number() == ATTN_VERSION_NUMBER && strcmp(attn_version(), ATTN_VERSION_STRING) == 0)
        return 0;
    PyErr_Format(PyExc_ImportError,
                 "attn: the extension attn._core was built against libattn %s but the library "
                 "loaded is %s: reinstall the package (pip install --force-reinstall .) so that "
                 "both come from one build",
                 ATTN_VERSION_STRING, attn_version());
    return -1;
}

static int add_classes(PyObject *m) {
    attn_error_class = PyErr_NewExceptionWithDoc(
        "attn.Error",
        "Every failure libattn reports: .status is the attn_status code (negative), "
        ".status_name its name, str() attn_last_error()'s message.",
        NULL, NULL);
    if (!attn_error_class || PyModule_AddObjectRef(m, "Error", attn_error_class) != 0) return -1;
    for (size_t i = 0; i < N_STATUS_CLASSES; i++) {
        const status_class *sc = &status_classes[i];
        char qualified[64];
        snprintf(qualified, sizeof qualified, "attn.%s", sc->name);
        PyObject *bases = PyTuple_Pack(2, attn_error_class, *sc->builtin);
        if (!bases) return -1;
        PyObject *cls = PyErr_NewExceptionWithDoc(qualified, sc->doc, bases, NULL);
        Py_DECREF(bases);
        if (!cls) return -1;
        status_class_objects[i] = cls;
        if (PyModule_AddObjectRef(m, sc->name, cls) != 0) return -1;
    }
    return 0;
}

static int module_exec(PyObject *m) {
    if (check_library_version() != 0 || add_classes(m) != 0) return -1;
    if (PyModule_AddFunctions(m, attn_py_model_methods) != 0) return -1;
    if (PyModule_AddStringConstant(m, "__version__", attn_version()) != 0 ||
        PyModule_AddStringConstant(m, "header_version", ATTN_VERSION_STRING) != 0 ||
        PyModule_AddStringConstant(m, "isa", attn_isa_name()) != 0 ||
        PyModule_AddIntConstant(m, "pictures", attn_pictures_available()) != 0 ||
        PyModule_AddIntConstant(m, "F32", ATTN_F32) != 0 ||
        PyModule_AddIntConstant(m, "F16", ATTN_F16) != 0 ||
        PyModule_AddIntConstant(m, "BF16", ATTN_BF16) != 0 ||
        PyModule_AddIntConstant(m, "Q8_0", ATTN_Q8_0) != 0 ||
        PyModule_AddIntConstant(m, "FP8_E4M3", ATTN_FP8_E4M3) != 0)
        return -1;
    return 0;
}

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "attn._core",
    "libattn's scaled dot-product attention on Python buffers (private: use the attn package).",
    -1, module_methods, NULL, NULL, NULL, NULL};

/* Single-phase initialisation: the exception classes are process-wide
 * (static), so the module is not meant for subinterpreters. */
PyMODINIT_FUNC PyInit__core(void) {
    PyObject *m = PyModule_Create(&module_def);
    if (m && module_exec(m) != 0) Py_CLEAR(m);
    return m;
}
