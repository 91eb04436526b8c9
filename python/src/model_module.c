/*
 * model_module.c — attn._core's model functions: a GGUF model opened once
 * (its tokenizer and its float32 decoder, libattn_model), tokenizing, the
 * decoder's forward and backward into buffers Python allocated (one helper,
 * forward_args_fill, reads both's arguments), and the logit lens and direct
 * logit attribution (attn_model_interp.h).  Private: attn.Model
 * (python/attn/_model.py) is the API.
 *
 * Shape legend (attn_decoder.h): L tokens, N layers, d d_model, Hq query
 * heads, V vocabulary.
 *   ids        int32   [L]              C-contiguous
 *   logits     float32 [L, V] or [1, V] (last_only), writable, C-contiguous
 *   hidden     float32 [N + 1, L, d]    the residual stream (row 0 embeddings)
 *   attention  N entries, each None or float32 [Hq, L, L]
 *
 * A handle is a capsule owning an attn_decoder and an attn_tokenizer, both
 * read-only once built (attn_decoder.h, attn_tokenizer.h: callable from any
 * number of threads at once), so calls on one handle from several Python
 * threads need no lock of their own.  The GIL is released while the model
 * loads (seconds) and while a forward runs.
 *
 * Ctrl-C during a forward: the decoder calls a layer hook after every layer
 * on the calling thread; the hook takes the GIL back for a moment and asks
 * Python whether a signal arrived (PyErr_CheckSignals).  If one did, the
 * hook stops the forward and the KeyboardInterrupt is raised when the call
 * returns: a forward is interrupted at the next layer boundary.
 */
#include "attn_py.h"

#include <attn_chat.h>
#include <attn_decoder.h>
#include <attn_gguf.h>
#include <attn_model_interp.h>
#include <attn_tokenizer.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char CAPSULE_NAME[] = "attn._core.model";

typedef struct model_handle {
    attn_decoder *decoder;
    attn_tokenizer *tokenizer;   /* NULL: a checkpoint without a usable tokenizer.json */
    char tokenizer_error[512];   /* then why ("" when it has none at all) */
    attn_chat_template *chat;    /* NULL: the model carries none (or it was refused) */
    char chat_error[512];        /* then why */
} model_handle;

static void handle_free(PyObject *capsule) {
    model_handle *h = PyCapsule_GetPointer(capsule, CAPSULE_NAME);
    if (!h) return;
    attn_decoder_free(h->decoder);
    attn_tokenizer_free(h->tokenizer);
    free(h);
}

static model_handle *handle_of(PyObject *capsule) {
    return PyCapsule_GetPointer(capsule, CAPSULE_NAME); /* sets TypeError/ValueError */
}

/* The handle, when it has a tokenizer (a Hugging Face checkpoint has none
 * here); else NULL with attn.UnsupportedError set. */
static model_handle *tokenizer_handle_of(PyObject *capsule) {
    model_handle *h = handle_of(capsule);
    if (h && !h->tokenizer) {
        if (h->tokenizer_error[0])
            PyErr_Format(class_for_status(ATTN_ERR_UNSUPPORTED),
                         "this model has no tokenizer: its tokenizer.json was refused (%s); pass token ids",
                         h->tokenizer_error);
        else
            PyErr_SetString(class_for_status(ATTN_ERR_UNSUPPORTED),
                            "this model has no tokenizer: the checkpoint has no tokenizer.json; pass token ids");
        return NULL;
    }
    return h;
}

/* 1 when path is a file that starts with GGUF's magic. */
static int is_gguf(const char *path) {
    FILE *f = fopen(path, "rb");
    char magic[4] = {0};
    const int yes = f && fread(magic, 1, 4, f) == 4 && memcmp(magic, "GGUF", 4) == 0;
    if (f) fclose(f);
    return yes;
}

/* Opens path, builds the tokenizer and the decoder, closes the file.  A
 * path that is not a GGUF file is read as a Hugging Face checkpoint (a
 * directory with config.json and safetensors, attn_decoder_load_safetensors),
 * which has no tokenizer here: ids only. */
static attn_status open_model(const char *path, const attn_decoder_options *opt, model_handle *h) {
    if (!is_gguf(path)) {
        attn_status st = attn_decoder_load_safetensors_with(path, opt, &h->decoder);
        if (st != ATTN_OK) return st;
        /* The tokenizer.json of the checkpoint's folder, when there is one;
         * one this build cannot read leaves the model usable with ids. */
        struct stat info;
        char dir[4096], file[4200];
        snprintf(dir, sizeof dir, "%s", path);
        if (stat(path, &info) != 0 || !S_ISDIR(info.st_mode)) {
            char *slash = strrchr(dir, '/');
            if (slash) *slash = 0;
            else snprintf(dir, sizeof dir, ".");
        }
        snprintf(file, sizeof file, "%s/tokenizer.json", dir);
        if (stat(file, &info) == 0 && attn_tokenizer_from_json_file(dir, &h->tokenizer) != ATTN_OK)
            snprintf(h->tokenizer_error, sizeof h->tokenizer_error, "%s", attn_last_error());
        /* The chat template: only Model.chat needs it, so a model without one opens. */
        if (attn_chat_template_from_checkpoint(path, &h->chat) != ATTN_OK)
            snprintf(h->chat_error, sizeof h->chat_error, "%s", attn_last_error());
        return ATTN_OK;
    }
    attn_gguf *g = NULL;
    attn_status st = attn_gguf_open(path, &g);
    if (st == ATTN_OK) st = attn_tokenizer_from_gguf(g, &h->tokenizer);
    if (st == ATTN_OK) st = attn_decoder_load_with(g, opt, &h->decoder);
    if (st == ATTN_OK && attn_chat_template_from_gguf(g, &h->chat) != ATTN_OK)
        snprintf(h->chat_error, sizeof h->chat_error, "%s", attn_last_error());
    attn_gguf_free(g);
    return st;
}

PyDoc_STRVAR(model_open_doc, "model_open(path: str, weights: int = 0, precision: int = 0) -> capsule\n--\n\n"
                             "Opens a model (tokenizer and decoder; weights: 0 stored, 1 float32; precision: "
                             "0 exact, 1 fast); private.");

static PyObject *model_open(PyObject *self, PyObject *args) {
    PyObject *path_obj;
    int weights = ATTN_WEIGHTS_STORED, precision = ATTN_PRECISION_EXACT;
    (void)self;
    if (!PyArg_ParseTuple(args, "O&|ii", PyUnicode_FSConverter, &path_obj, &weights, &precision)) return NULL;
    attn_decoder_options opt = ATTN_DECODER_OPTIONS_INIT;
    opt.weights = (attn_decoder_weights)weights;
    opt.precision = (attn_precision)precision;
    model_handle *h = calloc(1, sizeof *h);
    if (!h) {
        Py_DECREF(path_obj);
        return PyErr_NoMemory();
    }
    attn_status st;
    const char *path = PyBytes_AS_STRING(path_obj);
    Py_BEGIN_ALLOW_THREADS
    st = open_model(path, &opt, h);
    Py_END_ALLOW_THREADS
    Py_DECREF(path_obj);
    if (st != ATTN_OK) {
        raise_status(st, NULL);
        attn_decoder_free(h->decoder);
        attn_tokenizer_free(h->tokenizer);
        free(h);
        return NULL;
    }
    PyObject *capsule = PyCapsule_New(h, CAPSULE_NAME, handle_free);
    if (!capsule) {
        attn_decoder_free(h->decoder);
        attn_tokenizer_free(h->tokenizer);
        free(h);
    }
    return capsule;
}

static int set_item(PyObject *dict, const char *key, PyObject *value) {
    if (!value) return -1;
    int rc = PyDict_SetItemString(dict, key, value);
    Py_DECREF(value);
    return rc;
}

PyDoc_STRVAR(model_config_doc, "model_config(handle) -> dict\n--\n\n"
                               "The decoder's configuration and the tokenizer's facts; private.");

static PyObject *model_config(PyObject *self, PyObject *args) {
    PyObject *capsule;
    (void)self;
    if (!PyArg_ParseTuple(args, "O", &capsule)) return NULL;
    model_handle *h = handle_of(capsule);
    if (!h) return NULL;
    const attn_decoder_config *c = attn_decoder_get_config(h->decoder);
    attn_tokenizer_info t = {.bos_id = -1, .eos_id = -1, .pad_id = -1, .unk_id = -1};
    if (h->tokenizer) attn_tokenizer_describe(h->tokenizer, &t);
    PyObject *local = PyList_New(0);
    for (int64_t l = 0; local && l < c->n_layers; l++) {
        PyObject *flag = PyBool_FromLong(attn_decoder_layer_is_local(c, l));
        if (PyList_Append(local, flag) != 0) Py_CLEAR(local);
        Py_DECREF(flag);
    }
    PyObject *d = PyDict_New();
    if (!d || !local ||
        set_item(d, "architecture", PyUnicode_FromString(c->architecture)) ||
        set_item(d, "n_layers", PyLong_FromLongLong(c->n_layers)) ||
        set_item(d, "d_model", PyLong_FromLongLong(c->d_model)) ||
        set_item(d, "d_ffn", PyLong_FromLongLong(c->d_ffn)) ||
        set_item(d, "n_heads", PyLong_FromLongLong(c->n_heads)) ||
        set_item(d, "n_kv_heads", PyLong_FromLongLong(c->n_kv_heads)) ||
        set_item(d, "head_dim", PyLong_FromLongLong(c->head_dim)) ||
        set_item(d, "vocab", PyLong_FromLongLong(c->vocab)) ||
        set_item(d, "rms_eps", PyFloat_FromDouble(c->rms_eps)) ||
        set_item(d, "rope_theta", PyFloat_FromDouble(c->rope_theta)) ||
        set_item(d, "rope_theta_local", PyFloat_FromDouble(c->rope_theta_local)) ||
        set_item(d, "rope_scaling",
                 PyUnicode_FromString(c->rope_scaling == ATTN_ROPE_SCALING_LINEAR   ? "linear"
                                      : c->rope_scaling == ATTN_ROPE_SCALING_YARN   ? "yarn"
                                      : c->rope_scaling == ATTN_ROPE_SCALING_LLAMA3 ? "llama3"
                                                                                     : "default")) ||
        set_item(d, "rope_factor", PyFloat_FromDouble(c->rope_factor)) ||
        set_item(d, "rope_pairing",
                 PyUnicode_FromString(c->rope_pairing == ATTN_ROPE_NEOX ? "neox" : "gptj")) ||
        set_item(d, "sliding_window", PyLong_FromLongLong(c->sliding_window)) ||
        set_item(d, "sliding_pattern", PyLong_FromLongLong(c->sliding_pattern)) ||
        set_item(d, "local_layers", Py_NewRef(local)) ||
        set_item(d, "attn_scale", PyFloat_FromDouble(c->attn_scale)) ||
        set_item(d, "embed_scale", PyFloat_FromDouble(c->embed_scale)) ||
        set_item(d, "qkv_bias", PyBool_FromLong(c->qkv_bias)) ||
        set_item(d, "qk_norm", PyBool_FromLong(c->qk_norm)) ||
        set_item(d, "post_norms", PyBool_FromLong(c->post_norms)) ||
        set_item(d, "tied_embeddings", PyBool_FromLong(c->tied_embeddings)) ||
        set_item(d, "activation",
                 PyUnicode_FromString(c->activation == ATTN_DECODER_SWIGLU ? "swiglu" : "geglu_tanh")) ||
        set_item(d, "weight_bytes", PyLong_FromUnsignedLongLong(attn_decoder_weight_bytes(h->decoder))) ||
        set_item(d, "tokenizer", h->tokenizer ? PyUnicode_FromString(t.kind == ATTN_TOKENIZER_BPE ? "bpe" : "spm")
                                              : Py_NewRef(Py_None)) ||
        set_item(d, "tokenizer_pre", PyUnicode_FromString(t.pre ? t.pre : "")) ||
        set_item(d, "tokenizer_vocab", PyLong_FromLongLong(t.vocab_size)) ||
        set_item(d, "tokenizer_bytes", PyLong_FromSize_t(t.memory_bytes)) ||
        set_item(d, "bos_id", PyLong_FromLong(t.bos_id)) ||
        set_item(d, "eos_id", PyLong_FromLong(t.eos_id)) ||
        set_item(d, "pad_id", PyLong_FromLong(t.pad_id)) ||
        set_item(d, "unk_id", PyLong_FromLong(t.unk_id)) ||
        set_item(d, "add_bos", PyBool_FromLong(t.add_bos))) {
        Py_XDECREF(d);
        d = NULL;
    }
    Py_XDECREF(local);
    return d;
}

PyDoc_STRVAR(model_tokenize_doc,
             "model_tokenize(handle, text: bytes, split_special: bool, no_bos: bool) -> bytes\n--\n\n"
             "The ids of text as native int32 bytes (numpy.frombuffer reads them); private.");

static PyObject *model_tokenize(PyObject *self, PyObject *args) {
    PyObject *capsule;
    Py_buffer text;
    int split_special, no_bos;
    (void)self;
    if (!PyArg_ParseTuple(args, "Oy*pp", &capsule, &text, &split_special, &no_bos)) return NULL;
    model_handle *h = tokenizer_handle_of(capsule);
    if (!h) {
        PyBuffer_Release(&text);
        return NULL;
    }
    const unsigned flags = (split_special ? ATTN_ENCODE_SPLIT_SPECIAL : 0u) | (no_bos ? ATTN_ENCODE_NO_BOS : 0u);
    /* len + 1 ids always suffice (attn_tokenizer.h): one encode, no query. */
    const size_t capacity = (size_t)text.len + 1;
    int32_t *ids = malloc(capacity * sizeof *ids);
    if (!ids) {
        PyBuffer_Release(&text);
        return PyErr_NoMemory();
    }
    size_t n = 0;
    attn_status st;
    Py_BEGIN_ALLOW_THREADS
    st = attn_tokenizer_encode(h->tokenizer, text.buf, (size_t)text.len, flags, ids, capacity, &n);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&text);
    PyObject *result = NULL;
    if (st != ATTN_OK) raise_status(st, NULL);
    else result = PyBytes_FromStringAndSize((const char *)ids, (Py_ssize_t)(n * sizeof *ids));
    free(ids);
    return result;
}

/* A C-contiguous buffer of item size `itemsize` (count items, or any count
 * when count < 0); *n gets its count.  view must be released by the caller
 * when this returns 0. */
static int contiguous_arg(PyObject *obj, const char *name, bool writable, Py_ssize_t itemsize, Py_ssize_t count,
                          Py_buffer *view) {
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0)) != 0) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s: a C-contiguous%s buffer is needed, %R does not give one", name,
                     writable ? ", writable" : "", (PyObject *)Py_TYPE(obj));
        return -1;
    }
    if (view->itemsize != itemsize || (count >= 0 && view->len != count * itemsize)) {
        PyErr_Format(class_for_status(ATTN_ERR_SHAPE), "%s: %zd bytes of %zd-byte items, expected %zd items of %zd",
                     name, view->len, view->itemsize, count, itemsize);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(model_detokenize_doc,
             "model_detokenize(handle, ids: int32 buffer, skip_special: bool, valid_utf8: bool) -> bytes\n--\n\n"
             "The bytes ids decode to; private.");

static PyObject *model_detokenize(PyObject *self, PyObject *args) {
    PyObject *capsule, *ids_obj;
    int skip_special, valid_utf8;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOpp", &capsule, &ids_obj, &skip_special, &valid_utf8)) return NULL;
    model_handle *h = tokenizer_handle_of(capsule);
    if (!h) return NULL;
    Py_buffer ids;
    if (contiguous_arg(ids_obj, "ids", false, 4, -1, &ids) != 0) return NULL;
    const unsigned flags =
        (skip_special ? ATTN_DECODE_SKIP_SPECIAL : 0u) | (valid_utf8 ? ATTN_DECODE_VALID_UTF8 : 0u);
    const size_t n = (size_t)ids.len / 4;
    size_t len = 0;
    attn_status st = attn_tokenizer_decode(h->tokenizer, ids.buf, n, flags, NULL, 0, &len);
    PyObject *result = NULL;
    char *text = st == ATTN_OK ? malloc(len + 1) : NULL;
    if (st == ATTN_OK && !text) PyErr_NoMemory();
    else if (st == ATTN_OK) st = attn_tokenizer_decode(h->tokenizer, ids.buf, n, flags, text, len + 1, &len);
    if (st != ATTN_OK) raise_status(st, NULL);
    else if (text) result = PyBytes_FromStringAndSize(text, (Py_ssize_t)len);
    free(text);
    PyBuffer_Release(&ids);
    return result;
}

PyDoc_STRVAR(model_token_doc, "model_token(handle, id: int) -> (bytes, int)\n--\n\n"
                              "A token's piece as the vocabulary spells it and its type; private.");

static PyObject *model_token(PyObject *self, PyObject *args) {
    PyObject *capsule;
    long long id;
    (void)self;
    if (!PyArg_ParseTuple(args, "OL", &capsule, &id)) return NULL;
    model_handle *h = tokenizer_handle_of(capsule);
    if (!h) return NULL;
    if (id < INT32_MIN || id > INT32_MAX) {
        PyErr_Format(class_for_status(ATTN_ERR_INVALID_ARGUMENT), "token id %lld is outside int32", id);
        return NULL;
    }
    const char *piece;
    size_t len;
    attn_token_type type;
    attn_status st = attn_tokenizer_token(h->tokenizer, (int32_t)id, &piece, &len, &type);
    if (st != ATTN_OK) {
        raise_status(st, NULL);
        return NULL;
    }
    return Py_BuildValue("(y#i)", piece, (Py_ssize_t)len, (int)type);
}

PyDoc_STRVAR(model_weight_doc, "model_weight(handle, name: str) -> (bytearray, rows, cols) or None\n--\n\n"
                               "A weight of the loaded model by its GGUF name, float32, as the forward\n"
                               "uses it (attn_decoder_weight): a projection [rows = d_out, cols = d_in],\n"
                               "a vector [rows] with cols 1; None when this model has no such tensor\n"
                               "(a bias of Gemma 3); private (attn.Model's weights).");

static PyObject *model_weight(PyObject *self, PyObject *args) {
    PyObject *capsule;
    const char *name;
    (void)self;
    if (!PyArg_ParseTuple(args, "Os", &capsule, &name)) return NULL;
    model_handle *h = handle_of(capsule);
    if (!h) return NULL;
    int64_t rows, cols;
    attn_status st = attn_decoder_weight(h->decoder, name, NULL, 0, &rows, &cols);
    if (st == ATTN_ERR_INVALID_ARGUMENT && strstr(attn_last_error(), " has no ")) Py_RETURN_NONE;
    if (st != ATTN_OK) {
        raise_status(st, NULL);
        return NULL;
    }
    PyObject *data = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)(rows * cols * (int64_t)sizeof(float)));
    if (!data) return NULL;
    float *out = (float *)PyByteArray_AS_STRING(data);
    Py_BEGIN_ALLOW_THREADS
    st = attn_decoder_weight(h->decoder, name, out, rows * cols, &rows, &cols);
    Py_END_ALLOW_THREADS
    if (st != ATTN_OK) {
        Py_DECREF(data);
        raise_status(st, NULL);
        return NULL;
    }
    PyObject *result = Py_BuildValue("(OLL)", data, (long long)rows, (long long)cols);
    Py_DECREF(data);
    return result;
}

PyDoc_STRVAR(model_find_doc, "model_find(handle, piece: bytes) -> int\n--\n\n"
                             "The id whose piece is exactly piece, or -1; private.");

static PyObject *model_find(PyObject *self, PyObject *args) {
    PyObject *capsule;
    Py_buffer piece;
    (void)self;
    if (!PyArg_ParseTuple(args, "Oy*", &capsule, &piece)) return NULL;
    model_handle *h = tokenizer_handle_of(capsule);
    int32_t id = h ? attn_tokenizer_find(h->tokenizer, piece.buf, (size_t)piece.len) : -1;
    PyBuffer_Release(&piece);
    if (!h) return NULL;
    return PyLong_FromLong(id);
}

/* ------------------------------------------------------------- forward */

typedef struct interrupt_check {
    bool interrupted; /* a signal handler raised: the exception is set */
    PyObject *tensor_callback; /* callback(name, bytearray, shape) -> array or None */
    bool hook_failed;          /* the callback raised: the exception is set */
} interrupt_check;

/* The decoder's tensor hook: the tensor is copied into a bytearray for
 * Python (a view of the decoder's scratch would outlive it if the callback
 * kept it), and what the callback returns (a C-contiguous float32 buffer of
 * the same size) is copied back: writing back the same bits changes nothing
 * (attn_decoder.h), so a callback may always return its array. */
static int tensor_hook(void *user, const attn_decoder_hook_tensor *t) {
    interrupt_check *check = user;
    size_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= (size_t)t->shape[i];
    PyGILState_STATE gil = PyGILState_Ensure();
    int rc = 0;
    PyObject *shape = t->ndim == 3 ? Py_BuildValue("(LLL)", (long long)t->shape[0], (long long)t->shape[1],
                                                   (long long)t->shape[2])
                                   : Py_BuildValue("(LL)", (long long)t->shape[0], (long long)t->shape[1]);
    PyObject *bytes = shape ? PyByteArray_FromStringAndSize((const char *)t->data, (Py_ssize_t)(n * sizeof(float)))
                            : NULL;
    PyObject *result = bytes ? PyObject_CallFunction(check->tensor_callback, "sOO", t->name, bytes, shape) : NULL;
    if (!result) {
        rc = 1;
    } else if (result != Py_None) {
        Py_buffer view;
        if (contiguous_arg(result, t->name, false, 4, (Py_ssize_t)n, &view) != 0) {
            rc = 1;
        } else {
            memcpy(t->data, view.buf, n * sizeof(float));
            PyBuffer_Release(&view);
        }
    }
    if (rc) check->hook_failed = true;
    Py_XDECREF(result);
    Py_XDECREF(bytes);
    Py_XDECREF(shape);
    PyGILState_Release(gil);
    return rc;
}

/* The decoder's layer hook: Python's signal handlers run here, between two
 * layers, with the GIL taken back for that moment. */
static int check_signals_hook(void *user, int64_t layer, const float *hidden, int64_t L, int64_t d) {
    (void)layer, (void)hidden, (void)L, (void)d;
    interrupt_check *check = user;
    PyGILState_STATE gil = PyGILState_Ensure();
    if (PyErr_CheckSignals() != 0) check->interrupted = true;
    PyGILState_Release(gil);
    return check->interrupted ? 1 : 0;
}

/* What a forward (or the forward a backward makes) is given from Python:
 * the views of its buffers and the decoder outputs that point into them.
 * forward_args_fill fills *a (which must stay where it is until released:
 * out.hook_user points at a->check), forward_args_release drops the views. */
typedef struct forward_args {
    Py_buffer ids, logits, hidden;
    Py_buffer *attention;       /* [N] views, NULL when no attention was asked for */
    float **attention_ptrs;     /* [N], NULL entries where a layer was not asked for */
    Py_ssize_t n_attention;     /* views held in attention[] */
    bool have_ids, have_logits, have_hidden;
    Py_ssize_t L;               /* the tokens */
    interrupt_check check;
    attn_decoder_outputs out;
} forward_args;

static void forward_args_release(forward_args *a) {
    if (a->have_ids) PyBuffer_Release(&a->ids);
    if (a->have_logits) PyBuffer_Release(&a->logits);
    if (a->have_hidden) PyBuffer_Release(&a->hidden);
    for (Py_ssize_t l = 0; a->attention && l < a->n_attention; l++)
        if (a->attention_ptrs[l]) PyBuffer_Release(&a->attention[l]);
    free(a->attention);
    free(a->attention_ptrs);
}

/* ids int32 [L]; logits float32 [L or 1 (last_only), V], writable; hidden
 * float32 [N + 1, L, d] or None; attention None or N entries, each None or
 * float32 [Hq, L, L]; callback None or the tensor hook, at the points whose
 * bits are set.  what names the call in the message about no tokens
 * ("forward", "backward").  -1 with the exception set (call
 * forward_args_release either way). */
static int forward_args_fill(forward_args *a, const attn_decoder_config *c, const char *what, PyObject *ids_obj,
                             PyObject *logits_obj, bool last_only, PyObject *hidden_obj, PyObject *attention_obj,
                             PyObject *callback, unsigned long points) {
    const Py_ssize_t N = (Py_ssize_t)c->n_layers;
    *a = (forward_args){.out = ATTN_DECODER_OUTPUTS_INIT, .check = {false, callback, false}};
    if (callback != Py_None && !PyCallable_Check(callback)) {
        PyErr_SetString(PyExc_TypeError, "tensor hook: a callable or None");
        return -1;
    }
    if (contiguous_arg(ids_obj, "ids", false, 4, -1, &a->ids) != 0) return -1;
    a->have_ids = true;
    a->L = a->ids.len / 4;
    if (a->L < 1) {
        PyErr_Format(class_for_status(ATTN_ERR_SHAPE), "ids: no tokens (a %s needs at least one)", what);
        return -1;
    }
    if (contiguous_arg(logits_obj, "logits", true, 4, (last_only ? 1 : a->L) * (Py_ssize_t)c->vocab, &a->logits) != 0)
        return -1;
    a->have_logits = true;
    if (hidden_obj != Py_None) {
        if (contiguous_arg(hidden_obj, "hidden", true, 4, (N + 1) * a->L * (Py_ssize_t)c->d_model, &a->hidden) != 0)
            return -1;
        a->have_hidden = true;
    }
    if (attention_obj != Py_None) {
        PyObject *seq = PySequence_Fast(attention_obj, "attention: a sequence of N buffers or None");
        if (!seq) return -1;
        int rc = 0;
        if (PySequence_Fast_GET_SIZE(seq) != N) {
            PyErr_Format(class_for_status(ATTN_ERR_SHAPE), "attention: %zd entries for %zd layers",
                         PySequence_Fast_GET_SIZE(seq), N);
            rc = -1;
        } else {
            a->attention = calloc((size_t)N, sizeof *a->attention);
            a->attention_ptrs = calloc((size_t)N, sizeof *a->attention_ptrs);
            if (!a->attention || !a->attention_ptrs) {
                PyErr_NoMemory();
                rc = -1;
            }
        }
        for (Py_ssize_t l = 0; rc == 0 && l < N; l++) {
            PyObject *item = PySequence_Fast_GET_ITEM(seq, l);
            if (item == Py_None) continue;
            if (contiguous_arg(item, "attention[layer]", true, 4, (Py_ssize_t)c->n_heads * a->L * a->L,
                               &a->attention[l]) != 0) {
                rc = -1;
                break;
            }
            a->n_attention = l + 1;
            a->attention_ptrs[l] = a->attention[l].buf;
        }
        Py_DECREF(seq);
        if (rc) return -1;
    }
    a->out.logits = a->logits.buf;
    a->out.last_only = last_only;
    a->out.hidden = a->have_hidden ? a->hidden.buf : NULL;
    a->out.attention = a->attention_ptrs;
    a->out.hook = check_signals_hook;
    a->out.hook_user = &a->check;
    if (callback != Py_None && points) {
        a->out.tensor_hook = tensor_hook;
        a->out.tensor_hook_user = &a->check;
        a->out.tensor_hook_points = (uint32_t)points & ATTN_DECODER_HOOK_ALL;
    }
    return 0;
}

PyDoc_STRVAR(model_forward_doc,
             "model_forward(handle, ids, logits, hidden, attention, last_only, kernel, hook=None, points=0)\n"
             "    -> None\n--\n\n"
             "attn_decoder_forward into Python's buffers; private (attn.Model.forward is the API).\n"
             "ids int32 [L]; logits float32 [L or 1, V]; hidden float32 [N+1, L, d] or None;\n"
             "attention None or a sequence of N entries, each None or float32 [Hq, L, L];\n"
             "hook(name, bytearray, shape) -> None or a float32 array of that shape, called at\n"
             "the hook points whose bit (1 << point) is set in points.");

static PyObject *model_forward(PyObject *self, PyObject *args) {
    PyObject *capsule, *ids_obj, *logits_obj, *hidden_obj, *attention_obj, *callback = Py_None;
    int last_only, kernel;
    unsigned long points = 0;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOOOOpi|Ok", &capsule, &ids_obj, &logits_obj, &hidden_obj, &attention_obj,
                          &last_only, &kernel, &callback, &points))
        return NULL;
    model_handle *h = handle_of(capsule);
    if (!h) return NULL;
    PyObject *result = NULL;
    forward_args a;
    if (forward_args_fill(&a, attn_decoder_get_config(h->decoder), "forward", ids_obj, logits_obj, last_only,
                          hidden_obj, attention_obj, callback, points) != 0)
        goto done;
    a.out.kernel = (attn_kernel)kernel;
    attn_status st;
    Py_BEGIN_ALLOW_THREADS
    st = attn_decoder_forward(h->decoder, a.ids.buf, (int64_t)a.L, &a.out);
    Py_END_ALLOW_THREADS
    /* KeyboardInterrupt (or the handler's exception), or the hook's, is set */
    if (a.check.interrupted || a.check.hook_failed) goto done;
    if (st != ATTN_OK) {
        raise_status(st, NULL);
        goto done;
    }
    result = Py_NewRef(Py_None);
done:
    forward_args_release(&a);
    return result;
}

PyDoc_STRVAR(model_backward_doc,
             "model_backward(handle, ids, dlogits, logits, d_embed, hook, points, grad_hook, grad_points)\n"
             "    -> None\n--\n\n"
             "attn_decoder_backward; private (attn.Model.run_with_hooks' bwd_hooks and\n"
             "run_with_cache(incl_bwd=True) are the API).  ids int32 [L]; dlogits float32 [L, V];\n"
             "logits float32 [L, V] (the forward's, written); d_embed float32 [L, d] or None;\n"
             "hook / grad_hook as model_forward's (None or a callable), at points / grad_points.");

static PyObject *model_backward(PyObject *self, PyObject *args) {
    PyObject *capsule, *ids_obj, *dlogits_obj, *logits_obj, *d_embed_obj, *callback, *grad_callback;
    unsigned long points, grad_points;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOOOOOkOk", &capsule, &ids_obj, &dlogits_obj, &logits_obj, &d_embed_obj, &callback,
                          &points, &grad_callback, &grad_points))
        return NULL;
    if ((callback != Py_None && !PyCallable_Check(callback)) ||
        (grad_callback != Py_None && !PyCallable_Check(grad_callback))) {
        PyErr_SetString(PyExc_TypeError, "hooks: a callable or None");
        return NULL;
    }
    model_handle *h = handle_of(capsule);
    if (!h) return NULL;
    const attn_decoder_config *c = attn_decoder_get_config(h->decoder);
    PyObject *result = NULL;
    Py_buffer dlogits = {0}, d_embed = {0};
    bool have_dlogits = false, have_d_embed = false;
    forward_args a;
    if (forward_args_fill(&a, c, "backward", ids_obj, logits_obj, false, Py_None, Py_None, callback, points) != 0)
        goto done;
    if (contiguous_arg(dlogits_obj, "dlogits", false, 4, a.L * (Py_ssize_t)c->vocab, &dlogits) != 0) goto done;
    have_dlogits = true;
    if (d_embed_obj != Py_None) {
        if (contiguous_arg(d_embed_obj, "d_embed", true, 4, a.L * (Py_ssize_t)c->d_model, &d_embed) != 0) goto done;
        have_d_embed = true;
    }
    interrupt_check grad_check = {false, grad_callback, false};
    attn_decoder_backward_options opt = ATTN_DECODER_BACKWARD_OPTIONS_INIT;
    opt.dlogits = dlogits.buf;
    opt.d_embed = have_d_embed ? d_embed.buf : NULL;
    if (grad_callback != Py_None && grad_points) {
        opt.grad_hook = tensor_hook;
        opt.grad_hook_user = &grad_check;
        opt.grad_hook_points = (uint32_t)grad_points & ATTN_DECODER_HOOK_ALL;
    }
    attn_status st;
    Py_BEGIN_ALLOW_THREADS
    st = attn_decoder_backward(h->decoder, a.ids.buf, (int64_t)a.L, &a.out, &opt);
    Py_END_ALLOW_THREADS
    if (a.check.interrupted || a.check.hook_failed || grad_check.hook_failed) goto done;
    if (st != ATTN_OK) {
        raise_status(st, NULL);
        goto done;
    }
    result = Py_NewRef(Py_None);
done:
    forward_args_release(&a);
    if (have_dlogits) PyBuffer_Release(&dlogits);
    if (have_d_embed) PyBuffer_Release(&d_embed);
    return result;
}

/* ------------------------------------------ the logit lens and attribution */

/* The ids of a lens or attribution call and the position, checked here so
 * that the message names Python's argument; -1 with the exception set. */
static int ids_and_position(PyObject *ids_obj, long long position, Py_buffer *ids, int64_t *pos) {
    if (contiguous_arg(ids_obj, "ids", false, 4, -1, ids) != 0) return -1;
    const long long L = (long long)(ids->len / 4);
    if (L < 1 || position < -L || position >= L) {
        PyErr_Format(class_for_status(ATTN_ERR_INVALID_ARGUMENT), "position %lld is outside the run's %lld tokens",
                     position, L);
        PyBuffer_Release(ids);
        return -1;
    }
    *pos = position;
    return 0;
}

PyDoc_STRVAR(model_logit_lens_doc,
             "model_logit_lens(handle, ids, position: int, logits) -> None\n--\n\n"
             "attn_model_logit_lens (the GIL released); private (attn.Model.logit_lens is the API).\n"
             "ids int32 [L]; position in [-L, L); logits float32 [N + 1, V], written: row 0 the\n"
             "embeddings, row l + 1 the stream after layer l, each through the final norm and W_U.");

static PyObject *model_logit_lens(PyObject *self, PyObject *args) {
    PyObject *capsule, *ids_obj, *logits_obj;
    long long position;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOLO", &capsule, &ids_obj, &position, &logits_obj)) return NULL;
    model_handle *h = handle_of(capsule);
    if (!h) return NULL;
    const attn_decoder_config *c = attn_decoder_get_config(h->decoder);
    Py_buffer ids, logits;
    int64_t pos;
    if (ids_and_position(ids_obj, position, &ids, &pos) != 0) return NULL;
    if (contiguous_arg(logits_obj, "logits", true, 4, (Py_ssize_t)((c->n_layers + 1) * c->vocab), &logits) != 0) {
        PyBuffer_Release(&ids);
        return NULL;
    }
    attn_status st;
    Py_BEGIN_ALLOW_THREADS
    st = attn_model_logit_lens(h->decoder, ids.buf, (int64_t)(ids.len / 4), pos, logits.buf);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&ids);
    PyBuffer_Release(&logits);
    if (st != ATTN_OK) {
        raise_status(st, NULL);
        return NULL;
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(model_logit_attribution_doc,
             "model_logit_attribution(handle, ids, position: int, token: int, other: int, attn, mlp,\n"
             "                        heads) -> float\n--\n\n"
             "attn_model_logit_attribution (the GIL released); private (attn.Model.logit_attribution\n"
             "is the API).  other -1: token's logit alone.  attn, mlp float64 [N], written; heads\n"
             "float64 [N, Hq], written, or None.  Returns the embeddings' share.");

static PyObject *model_logit_attribution(PyObject *self, PyObject *args) {
    PyObject *capsule, *ids_obj, *attn_obj, *mlp_obj, *heads_obj;
    long long position, token, other;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOLLLOOO", &capsule, &ids_obj, &position, &token, &other, &attn_obj, &mlp_obj,
                          &heads_obj))
        return NULL;
    model_handle *h = handle_of(capsule);
    if (!h) return NULL;
    const attn_decoder_config *c = attn_decoder_get_config(h->decoder);
    const Py_ssize_t N = (Py_ssize_t)c->n_layers;
    Py_buffer ids, attn = {0}, mlp = {0}, heads = {0};
    bool have_attn = false, have_mlp = false, have_heads = false;
    int64_t pos;
    PyObject *result = NULL;
    if (ids_and_position(ids_obj, position, &ids, &pos) != 0) return NULL;
    if (contiguous_arg(attn_obj, "attn", true, 8, N, &attn) != 0) goto done;
    have_attn = true;
    if (contiguous_arg(mlp_obj, "mlp", true, 8, N, &mlp) != 0) goto done;
    have_mlp = true;
    if (heads_obj != Py_None) {
        if (contiguous_arg(heads_obj, "heads", true, 8, N * (Py_ssize_t)c->n_heads, &heads) != 0) goto done;
        have_heads = true;
    }
    double embed = 0;
    attn_status st;
    Py_BEGIN_ALLOW_THREADS
    st = attn_model_logit_attribution(h->decoder, ids.buf, (int64_t)(ids.len / 4), pos, (int64_t)token,
                                      (int64_t)other, &embed, attn.buf, mlp.buf, have_heads ? heads.buf : NULL);
    Py_END_ALLOW_THREADS
    if (st != ATTN_OK) raise_status(st, NULL);
    else result = PyFloat_FromDouble(embed);
done:
    PyBuffer_Release(&ids);
    if (have_attn) PyBuffer_Release(&attn);
    if (have_mlp) PyBuffer_Release(&mlp);
    if (have_heads) PyBuffer_Release(&heads);
    return result;
}

/* ------------------------------------------------------ sessions, sampler */

static const char SESSION_NAME[] = "attn._core.session";
static const char SAMPLER_NAME[] = "attn._core.sampler";

/* A session capsule holds a reference to its model's capsule (its context),
 * released after the session is freed: the decoder outlives every session. */
static void session_free(PyObject *capsule) {
    attn_decoder_session *s = PyCapsule_GetPointer(capsule, SESSION_NAME);
    PyObject *model = PyCapsule_GetContext(capsule);
    attn_decoder_session_free(s);
    Py_XDECREF(model);
}

PyDoc_STRVAR(session_new_doc,
             "session_new(handle, capacity: int, kv_dtype: int, kernel: int, kv_value_dtype: int = 0) -> capsule\n--\n\n"
             "attn_decoder_session_new; private (attn.Model.session is the API).");

static PyObject *session_new(PyObject *self, PyObject *args) {
    PyObject *capsule;
    long long capacity;
    int kv_dtype, kernel, kv_value_dtype = 0;
    (void)self;
    if (!PyArg_ParseTuple(args, "OLii|i", &capsule, &capacity, &kv_dtype, &kernel, &kv_value_dtype)) return NULL;
    model_handle *h = handle_of(capsule);
    if (!h) return NULL;
    attn_decoder_session_options opt = ATTN_DECODER_SESSION_OPTIONS_INIT;
    opt.capacity = capacity;
    opt.kv_dtype = (attn_dtype)kv_dtype;
    opt.kv_value_dtype = (attn_dtype)kv_value_dtype;
    opt.kernel = (attn_kernel)kernel;
    attn_decoder_session *s = NULL;
    attn_status st;
    Py_BEGIN_ALLOW_THREADS
    st = attn_decoder_session_new(h->decoder, &opt, &s);
    Py_END_ALLOW_THREADS
    if (st != ATTN_OK) {
        raise_status(st, NULL);
        return NULL;
    }
    PyObject *result = PyCapsule_New(s, SESSION_NAME, session_free);
    if (!result) {
        attn_decoder_session_free(s);
        return NULL;
    }
    Py_INCREF(capsule);
    if (PyCapsule_SetContext(result, capsule) != 0) {
        Py_DECREF(capsule);
        Py_DECREF(result);
        return NULL;
    }
    return result;
}

PyDoc_STRVAR(session_step_doc,
             "session_step(session, ids: int32 buffer, logits: float32 [V] buffer or None, hook=None,\n"
             "             points=0) -> None\n--\n\n"
             "attn_decoder_step_outputs (the GIL released; the last position's logits), with\n"
             "model_forward's tensor hook at the points given; private.");

static PyObject *session_step(PyObject *self, PyObject *args) {
    PyObject *capsule, *ids_obj, *logits_obj, *callback = Py_None;
    unsigned long points = 0;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOO|Ok", &capsule, &ids_obj, &logits_obj, &callback, &points)) return NULL;
    if (callback != Py_None && !PyCallable_Check(callback)) {
        PyErr_SetString(PyExc_TypeError, "tensor hook: a callable or None");
        return NULL;
    }
    attn_decoder_session *s = PyCapsule_GetPointer(capsule, SESSION_NAME);
    if (!s) return NULL;
    model_handle *h = handle_of(PyCapsule_GetContext(capsule));
    if (!h) return NULL;
    Py_buffer ids, logits = {0};
    if (contiguous_arg(ids_obj, "ids", false, 4, -1, &ids) != 0) return NULL;
    const bool have_logits = logits_obj != Py_None;
    if (have_logits && contiguous_arg(logits_obj, "logits", true, 4,
                                      (Py_ssize_t)attn_decoder_get_config(h->decoder)->vocab, &logits) != 0) {
        PyBuffer_Release(&ids);
        return NULL;
    }
    attn_decoder_outputs out = ATTN_DECODER_OUTPUTS_INIT;
    out.logits = have_logits ? logits.buf : NULL;
    out.last_only = 1;
    interrupt_check check = {false, callback, false};
    if (callback != Py_None && points) {
        /* A hook that raises stops the step part way: the session then
         * refuses steps until reset (attn_decoder.h), as the error says. */
        out.tensor_hook = tensor_hook;
        out.tensor_hook_user = &check;
        out.tensor_hook_points = (uint32_t)points & ATTN_DECODER_HOOK_ALL;
    }
    attn_status st;
    Py_BEGIN_ALLOW_THREADS
    st = attn_decoder_step_outputs(s, ids.buf, (int64_t)(ids.len / 4), &out);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&ids);
    if (have_logits) PyBuffer_Release(&logits);
    if (check.interrupted || check.hook_failed) return NULL;
    if (st != ATTN_OK) {
        raise_status(st, NULL);
        return NULL;
    }
    if (PyErr_CheckSignals() != 0) return NULL;
    Py_RETURN_NONE;
}

PyDoc_STRVAR(session_state_doc, "session_state(session) -> (position, capacity)\n--\n\nprivate.");

static PyObject *session_state(PyObject *self, PyObject *args) {
    PyObject *capsule;
    (void)self;
    if (!PyArg_ParseTuple(args, "O", &capsule)) return NULL;
    attn_decoder_session *s = PyCapsule_GetPointer(capsule, SESSION_NAME);
    if (!s) return NULL;
    return Py_BuildValue("(LL)", (long long)attn_decoder_session_position(s),
                         (long long)attn_decoder_session_capacity(s));
}

PyDoc_STRVAR(session_reset_doc, "session_reset(session) -> None\n--\n\nattn_decoder_session_reset; private.");

static PyObject *session_reset(PyObject *self, PyObject *args) {
    PyObject *capsule;
    (void)self;
    if (!PyArg_ParseTuple(args, "O", &capsule)) return NULL;
    attn_decoder_session *s = PyCapsule_GetPointer(capsule, SESSION_NAME);
    if (!s) return NULL;
    attn_status st = attn_decoder_session_reset(s);
    if (st != ATTN_OK) {
        raise_status(st, NULL);
        return NULL;
    }
    Py_RETURN_NONE;
}

/* A sampler and the vocabulary size its logits must have. */
typedef struct sampler_handle {
    attn_sampler *sampler;
    Py_ssize_t vocab;
} sampler_handle;

static void sampler_free(PyObject *capsule) {
    sampler_handle *h = PyCapsule_GetPointer(capsule, SAMPLER_NAME);
    if (h) attn_sampler_free(h->sampler);
    free(h);
}

PyDoc_STRVAR(sampler_new_doc,
             "sampler_new(temperature: float, top_k: int, top_p: float, seed: int, vocab: int) -> capsule\n"
             "--\n\nattn_sampler_new; private.");

static PyObject *sampler_new(PyObject *self, PyObject *args) {
    double temperature, top_p, min_p = 0.0, repetition = 1.0, frequency = 0.0, presence = 0.0;
    long long top_k, vocab, last_n = 0;
    unsigned long long seed;
    (void)self;
    if (!PyArg_ParseTuple(args, "dLdKL|ddddL", &temperature, &top_k, &top_p, &seed, &vocab, &min_p, &repetition,
                          &frequency, &presence, &last_n))
        return NULL;
    attn_sampler_options opt = ATTN_SAMPLER_OPTIONS_INIT;
    opt.temperature = temperature;
    opt.top_k = top_k;
    opt.top_p = top_p;
    opt.seed = seed;
    opt.min_p = min_p;
    opt.repetition_penalty = repetition;
    opt.frequency_penalty = frequency;
    opt.presence_penalty = presence;
    opt.penalty_last_n = last_n;
    sampler_handle *h = calloc(1, sizeof *h);
    if (!h) return PyErr_NoMemory();
    h->vocab = (Py_ssize_t)vocab;
    attn_status st = attn_sampler_new(&opt, vocab, &h->sampler);
    if (st != ATTN_OK) {
        free(h);
        raise_status(st, NULL);
        return NULL;
    }
    PyObject *result = PyCapsule_New(h, SAMPLER_NAME, sampler_free);
    if (!result) {
        attn_sampler_free(h->sampler);
        free(h);
    }
    return result;
}

PyDoc_STRVAR(sampler_accept_doc, "sampler_accept(sampler, ids: int32 [n] buffer) -> None\n--\n\n"
                                 "attn_sampler_accept after attn_sampler_forget: the history is ids; private.");

static PyObject *sampler_accept(PyObject *self, PyObject *args) {
    PyObject *capsule, *ids_obj;
    (void)self;
    if (!PyArg_ParseTuple(args, "OO", &capsule, &ids_obj)) return NULL;
    sampler_handle *h = PyCapsule_GetPointer(capsule, SAMPLER_NAME);
    if (!h) return NULL;
    Py_buffer ids;
    if (PyObject_GetBuffer(ids_obj, &ids, PyBUF_C_CONTIGUOUS) != 0) return NULL;
    attn_sampler_forget(h->sampler);
    const attn_status st = attn_sampler_accept(h->sampler, ids.buf, (int64_t)(ids.len / (Py_ssize_t)sizeof(int32_t)));
    PyBuffer_Release(&ids);
    if (st != ATTN_OK) {
        raise_status(st, NULL);
        return NULL;
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(model_chat_prompt_doc,
             "model_chat_prompt(handle, messages_json: str, add_generation_prompt: bool, variables_json: str | None,\n"
             "                  template: str | None) -> str\n--\n\n"
             "The model's chat template (or template) rendered over the messages (attn_chat.h); private.");

/* The text of token id, or NULL (no error) when id < 0 or it has none. */
static char *token_text(const attn_tokenizer *tok, int32_t id, char *buf, size_t size) {
    size_t len;
    if (id < 0 || attn_tokenizer_decode(tok, &id, 1, 0, buf, size, &len) != ATTN_OK) return NULL;
    return buf;
}

static PyObject *model_chat_prompt(PyObject *self, PyObject *args) {
    PyObject *capsule, *variables_obj, *template_obj;
    const char *messages;
    int add_generation_prompt;
    (void)self;
    if (!PyArg_ParseTuple(args, "OspOO", &capsule, &messages, &add_generation_prompt, &variables_obj, &template_obj))
        return NULL;
    model_handle *h = tokenizer_handle_of(capsule);
    if (!h) return NULL;
    const char *variables = variables_obj == Py_None ? NULL : PyUnicode_AsUTF8(variables_obj);
    if (variables_obj != Py_None && !variables) return NULL;
    attn_chat_template *own = NULL;
    if (template_obj != Py_None) {
        Py_ssize_t n;
        const char *text = PyUnicode_AsUTF8AndSize(template_obj, &n);
        if (!text) return NULL;
        const attn_status st = attn_chat_template_parse(text, (size_t)n, &own);
        if (st != ATTN_OK) {
            raise_status(st, NULL);
            return NULL;
        }
    } else if (!h->chat) {
        PyErr_Format(class_for_status(ATTN_ERR_FORMAT), "%s", h->chat_error);
        return NULL;
    }
    attn_tokenizer_info info;
    attn_tokenizer_describe(h->tokenizer, &info);
    char bos[256], eos[256];
    attn_chat_options opt = ATTN_CHAT_OPTIONS_INIT;
    opt.add_generation_prompt = add_generation_prompt;
    opt.bos_token = token_text(h->tokenizer, info.bos_id, bos, sizeof bos);
    opt.eos_token = token_text(h->tokenizer, info.eos_id, eos, sizeof eos);
    opt.messages_json = messages;
    opt.variables_json = variables;
    char *text = NULL;
    size_t len = 0;
    attn_status st;
    Py_BEGIN_ALLOW_THREADS
    st = attn_chat_template_render(own ? own : h->chat, NULL, 0, &opt, &text, &len);
    Py_END_ALLOW_THREADS
    attn_chat_template_free(own);
    if (st != ATTN_OK) {
        raise_status(st, NULL);
        return NULL;
    }
    PyObject *result = PyUnicode_DecodeUTF8(text, (Py_ssize_t)len, "strict");
    free(text);
    return result;
}

PyDoc_STRVAR(sampler_sample_doc, "sampler_sample(sampler, logits: float32 [V] buffer) -> int\n--\n\n"
                                 "attn_sampler_sample; private.");

static PyObject *sampler_sample(PyObject *self, PyObject *args) {
    PyObject *capsule, *logits_obj;
    (void)self;
    if (!PyArg_ParseTuple(args, "OO", &capsule, &logits_obj)) return NULL;
    sampler_handle *h = PyCapsule_GetPointer(capsule, SAMPLER_NAME);
    if (!h) return NULL;
    Py_buffer logits;
    if (contiguous_arg(logits_obj, "logits", false, 4, h->vocab, &logits) != 0) return NULL;
    int32_t id = -1;
    attn_status st = attn_sampler_sample(h->sampler, logits.buf, &id);
    PyBuffer_Release(&logits);
    if (st != ATTN_OK) {
        raise_status(st, NULL);
        return NULL;
    }
    return PyLong_FromLong(id);
}

PyDoc_STRVAR(model_end_ids_doc, "model_end_ids(handle) -> tuple of int\n--\n\n"
                                "attn_tokenizer_end_ids: the ids that end a generated text; private.");

static PyObject *model_end_ids(PyObject *self, PyObject *args) {
    PyObject *capsule;
    (void)self;
    if (!PyArg_ParseTuple(args, "O", &capsule)) return NULL;
    model_handle *h = tokenizer_handle_of(capsule);
    if (!h) return NULL;
    int32_t ids[ATTN_TOKENIZER_MAX_END_IDS];
    const int n = attn_tokenizer_end_ids(h->tokenizer, ids);
    PyObject *t = PyTuple_New(n);
    for (int i = 0; t && i < n; i++) PyTuple_SET_ITEM(t, i, PyLong_FromLong(ids[i]));
    return t;
}

PyDoc_STRVAR(hook_parse_doc, "hook_parse(name: str) -> (point, layer) or None\n--\n\n"
                             "A decoder hook point's full name parsed by the library's one vocabulary\n"
                             "(attn_hook_parse): its point number and layer (-1 for hook_embed and\n"
                             "ln_final.hook_normalized); None for any other text; private.");

static PyObject *hook_parse(PyObject *self, PyObject *args) {
    PyObject *text;
    (void)self;
    if (!PyArg_ParseTuple(args, "U", &text)) return NULL;
    Py_ssize_t len;
    const char *name = PyUnicode_AsUTF8AndSize(text, &len);
    if (!name) { /* not encodable (a lone surrogate): no hook's name either */
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    attn_hook_site site;
    int64_t layer;
    if (strlen(name) != (size_t)len || /* an embedded NUL: no hook's name */
        attn_hook_parse(name, ATTN_HOOK_NAME_FULL, &site, &layer) != ATTN_OK ||
        (unsigned)site >= ATTN_DECODER_HOOK_POINTS)
        Py_RETURN_NONE;
    return Py_BuildValue("(iL)", (int)site, (long long)layer);
}

PyDoc_STRVAR(hook_names_doc, "hook_names(n_layers: int) -> tuple of str\n--\n\n"
                             "Every hook point's full name of a model of n_layers layers, in the order a\n"
                             "forward reaches them (attn_model_hook_at); private.");

static PyObject *hook_names(PyObject *self, PyObject *args) {
    long long n_layers;
    (void)self;
    if (!PyArg_ParseTuple(args, "L", &n_layers)) return NULL;
    const int64_t count = attn_model_hook_count(n_layers);
    PyObject *t = PyTuple_New((Py_ssize_t)count);
    char buf[96];
    for (int64_t i = 0; t && i < count; i++) {
        attn_decoder_hook_point point;
        int64_t layer;
        attn_model_hook_at(n_layers, i, &point, &layer);
        PyObject *name = PyUnicode_FromString(attn_decoder_hook_name(point, layer, buf, sizeof buf));
        if (!name) Py_CLEAR(t);
        else PyTuple_SET_ITEM(t, (Py_ssize_t)i, name);
    }
    return t;
}

PyMethodDef attn_py_model_methods[] = {
    {"model_open", model_open, METH_VARARGS, model_open_doc},
    {"model_config", model_config, METH_VARARGS, model_config_doc},
    {"model_tokenize", model_tokenize, METH_VARARGS, model_tokenize_doc},
    {"model_detokenize", model_detokenize, METH_VARARGS, model_detokenize_doc},
    {"model_token", model_token, METH_VARARGS, model_token_doc},
    {"model_find", model_find, METH_VARARGS, model_find_doc},
    {"model_weight", model_weight, METH_VARARGS, model_weight_doc},
    {"model_backward", model_backward, METH_VARARGS, model_backward_doc},
    {"model_forward", model_forward, METH_VARARGS, model_forward_doc},
    {"model_logit_lens", model_logit_lens, METH_VARARGS, model_logit_lens_doc},
    {"model_logit_attribution", model_logit_attribution, METH_VARARGS, model_logit_attribution_doc},
    {"model_end_ids", model_end_ids, METH_VARARGS, model_end_ids_doc},
    {"model_chat_prompt", model_chat_prompt, METH_VARARGS, model_chat_prompt_doc},
    {"sampler_accept", sampler_accept, METH_VARARGS, sampler_accept_doc},
    {"hook_parse", hook_parse, METH_VARARGS, hook_parse_doc},
    {"hook_names", hook_names, METH_VARARGS, hook_names_doc},
    {"session_new", session_new, METH_VARARGS, session_new_doc},
    {"session_step", session_step, METH_VARARGS, session_step_doc},
    {"session_state", session_state, METH_VARARGS, session_state_doc},
    {"session_reset", session_reset, METH_VARARGS, session_reset_doc},
    {"sampler_new", sampler_new, METH_VARARGS, sampler_new_doc},
    {"sampler_sample", sampler_sample, METH_VARARGS, sampler_sample_doc},
    {NULL, NULL, 0, NULL}};
