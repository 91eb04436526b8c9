/*
 * attn_py.h — what the extension's C files share (private to attn._core):
 * the exception of a libattn status, and the model functions' table that
 * attn_module.c adds to the module.
 */
#ifndef ATTN_PY_H
#define ATTN_PY_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <attn.h>

/* The attn.Error subclass registered for st (attn.Error itself if none). */
PyObject *class_for_status(attn_status st);
/* Raises class_for_status(st) with msg (attn_last_error() when NULL), .status
 * and .status_name set. */
void raise_status(attn_status st, const char *msg);

/* model_module.c: Model handles, tokenizer and decoder forward. */
extern PyMethodDef attn_py_model_methods[];

#endif /* ATTN_PY_H */
