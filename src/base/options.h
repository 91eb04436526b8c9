/*
 * options.h — reading attn_sdpa_options through its table (options.c,
 * attn_sdpa_option in attn.h): a row's fields, whether an option is set,
 * and the options reduced to how they act.  Inline, so that libattn_mpi
 * (which links libattn's public API only) reads them the same way.
 */
#ifndef ATTN_BASE_OPTIONS_H
#define ATTN_BASE_OPTIONS_H

#include "base/base.h"

#include <math.h>

/* Field n (0, 1, 2 in the order the row's kind lists them) of o. */
static inline const void *option_field(const attn_sdpa_options *o, const attn_sdpa_option_info *row, int n) {
    return (const char *)o + row->offset[n];
}
static inline int option_int(const attn_sdpa_options *o, const attn_sdpa_option_info *row, int n) {
    int v;
    memcpy(&v, option_field(o, row, n), sizeof v);
    return v;
}
static inline int64_t option_i64(const attn_sdpa_options *o, const attn_sdpa_option_info *row, int n) {
    int64_t v;
    memcpy(&v, option_field(o, row, n), sizeof v);
    return v;
}
static inline const void *option_pointer(const attn_sdpa_options *o, const attn_sdpa_option_info *row, int n) {
    const void *v;
    memcpy(&v, option_field(o, row, n), sizeof v);
    return v;
}

/* True when the option is anything but off: a nonzero switch, number or
 * position (a float by value: -0 is off), an active window, a pointer
 * given, a workspace with a pointer or a size. */
static inline bool option_is_set(const attn_sdpa_options *o, const attn_sdpa_option_info *row) {
    switch (row->kind) {
    case ATTN_OPTION_SWITCH:
    case ATTN_OPTION_CHOICE:
    case ATTN_OPTION_INT:
    case ATTN_OPTION_WINDOW: return option_int(o, row, 0) != 0;
    case ATTN_OPTION_FLOAT: {
        float v;
        memcpy(&v, option_field(o, row, 0), sizeof v);
        return v != 0.0f;
    }
    case ATTN_OPTION_POSITION: return option_i64(o, row, 0) != 0;
    case ATTN_OPTION_BUFFER: {
        size_t bytes;
        memcpy(&bytes, option_field(o, row, 1), sizeof bytes);
        return option_pointer(o, row, 0) != NULL || bytes != 0;
    }
    case ATTN_OPTION_CALLBACK: {
        attn_progress_fn fn;
        memcpy(&fn, option_field(o, row, 0), sizeof fn);
        return fn != NULL;
    }
    default: return option_pointer(o, row, 0) != NULL; /* the arrays and tables */
    }
}

/* Reduces o to how its options act on a call whose q has width dim: the
 * scale resolved (0 is 1/sqrt(D)), a window's sides zeroed when it is
 * off, and the alignment zeroed when no rule places a diagonal (causal,
 * the window, ALiBi).  Two calls on the same tensors whose options agree
 * after this compute the same. */
static inline void options_as_acting(attn_sdpa_options *o, int64_t dim) {
    if (!(o->scale > 0.0f)) o->scale = (float)(1.0 / sqrt((double)dim));
    if (!o->window) o->window_left = o->window_right = 0;
    if (!o->causal && !o->window && !o->alibi_standard && !o->alibi_slopes) o->align = ATTN_ALIGN_TOP_LEFT;
}

#endif /* ATTN_BASE_OPTIONS_H */
