/*
 * overlap.h — refusing a call whose outputs share memory with its inputs or
 * with each other (attn.h, "Outputs never share memory"): a kernel that
 * writes out while it still reads k computes an answer that is wrong and
 * depends on the thread count.
 *
 * What is compared is each argument's byte extent: from its first byte to
 * one past its last, for a strided tensor data .. data + (sum over axes of
 * (shape - 1) * stride + 1) * element size.  Two extents that intersect
 * are refused even when the elements of two strided tensors would
 * interleave without touching (telling that apart is an integer problem
 * no caller needs solved: give each output a buffer of its own).  Extents
 * that only touch are fine, and inputs may share memory with each other
 * (k and v one buffer, v = k).
 *
 * Static inline, as base.h's helpers, so that libattn_mpi checks its entry
 * points by the same rule without an internal symbol of libattn.
 */
#ifndef ATTN_BASE_OVERLAP_H
#define ATTN_BASE_OVERLAP_H

#include "base/options.h"

/* [begin, end) in the address space; empty (begin == end) for an argument
 * that is absent. */
typedef struct mem_extent {
    const char *name;
    bool option; /* a field of attn_sdpa_options: named "opt.<name>" */
    uintptr_t begin, end;
} mem_extent;

/* a * b for sizes (>= 0), INT64_MAX when it overflows: an extent that
 * large reaches the end of the address space. */
static inline int64_t extent_mul(int64_t a, int64_t b) {
    int64_t r;
    return mul_overflows(a, b, &r) ? INT64_MAX : r;
}

/* bytes bytes at data (NULL or 0 bytes: empty; a size past the end of the
 * address space ends there). */
static inline mem_extent extent_of_bytes(const char *name, const void *data, uint64_t bytes) {
    mem_extent e = {name, false, (uintptr_t)data, (uintptr_t)data};
    if (data && bytes) e.end = bytes > UINTPTR_MAX - e.begin ? UINTPTR_MAX : e.begin + (uintptr_t)bytes;
    return e;
}

/* count elements of size elem_bytes (>= 1) at data (a contiguous array). */
static inline mem_extent extent_of_array(const char *name, const void *data, int64_t count, int64_t elem_bytes) {
    const uint64_t n = count > 0 ? (uint64_t)count : 0, size = (uint64_t)elem_bytes;
    return extent_of_bytes(name, data, n > UINT64_MAX / size ? UINT64_MAX : n * size);
}

/* A tensor; NULL, without data, or with a shape or strides its call
 * refuses (a size below 1, a negative stride, not a tensor dtype): empty. */
static inline mem_extent extent_of_tensor(const char *name, const attn_tensor *t) {
    const int64_t elem = t ? (int64_t)attn_dtype_size(t->dtype) : 0;
    if (!t || !t->data || elem < 1) return extent_of_bytes(name, NULL, 0);
    int64_t last = 0;
    for (int i = 0; i < 4; i++) {
        if (t->shape[i] < 1 || t->stride[i] < 0) return extent_of_bytes(name, NULL, 0);
        last = sat_add(last, extent_mul(t->shape[i] - 1, t->stride[i]));
    }
    return extent_of_array(name, t->data, sat_add(last, 1), elem);
}

static inline bool extents_meet(const mem_extent *a, const mem_extent *b) {
    return a->begin < a->end && b->begin < b->end && a->begin < b->end && b->begin < a->end;
}

/* At most this many rows of the options table are arrays (test_overlap
 * holds the table to it). */
#define OPTION_ARRAYS_MAX 8

/* The arrays an attention call's options point to — the options table's
 * rows of an array kind (attn_sdpa_option: key_lengths, mask, bias, sinks,
 * alibi_slopes) — into e[0 .. OPTION_ARRAYS_MAX), named "opt.<field>",
 * for B batches and Hq query heads.  o is the library's copy
 * (options_copy); a table whose shape is not valid gives an empty extent
 * (the call refuses it anyway).  Returns how many. */
static inline int extents_of_options(const attn_sdpa_options *o, int64_t batch, int64_t heads_q, mem_extent *e) {
    int n = 0;
    for (int i = 0; attn_sdpa_option(i) && n < OPTION_ARRAYS_MAX; i++) {
        const attn_sdpa_option_info *row = attn_sdpa_option(i);
        int64_t count = 0, elem = (int64_t)sizeof(float);
        switch (row->kind) {
        case ATTN_OPTION_PER_BATCH:
            count = batch;
            elem = (int64_t)sizeof(int64_t);
            break;
        case ATTN_OPTION_PER_HEAD: count = heads_q; break;
        case ATTN_OPTION_BOOL_TABLE:
        case ATTN_OPTION_FLOAT_TABLE: {
            if (row->kind == ATTN_OPTION_BOOL_TABLE) elem = 1;
            int64_t shape[4];
            memcpy(shape, option_field(o, row, 1), sizeof shape);
            count = 1;
            for (int d = 0; d < 4 && count; d++)
                if (shape[d] < 0 || mul_overflows(count, shape[d], &count)) count = 0;
            if (count > INT64_MAX / elem) count = 0;
            break;
        }
        default: continue;
        }
        e[n] = extent_of_array(row->name, option_pointer(o, row, 0), count, elem);
        e[n++].option = true;
    }
    return n;
}

/* ATTN_OK, or ATTN_ERR_INVALID_ARGUMENT naming the first written extent
 * that meets a read one or an earlier written one, and that one; fn (or
 * NULL) starts the message ("mha: ...") as the call's other messages do. */
static inline attn_status overlap_check(const char *fn, const mem_extent *written, int n_written,
                                        const mem_extent *read, int n_read) {
    const char *prefix = fn ? fn : "", *colon = fn ? ": " : "";
#define OVERLAP_NAME(e) (e).option ? "opt." : "", (e).name
    for (int w = 0; w < n_written; w++) {
        for (int r = 0; r < n_read; r++)
            if (extents_meet(&written[w], &read[r]))
                return attn__fail(ATTN_ERR_INVALID_ARGUMENT,
                                  "%s%s%s%s overlaps %s%s in memory: an output must not share memory with an input "
                                  "(the result would be wrong, and differ with the thread count); give %s%s a "
                                  "buffer of its own", prefix, colon, OVERLAP_NAME(written[w]), OVERLAP_NAME(read[r]),
                                  OVERLAP_NAME(written[w]));
        for (int o = 0; o < w; o++)
            if (extents_meet(&written[w], &written[o]))
                return attn__fail(ATTN_ERR_INVALID_ARGUMENT,
                                  "%s%s%s%s and %s%s overlap in memory: two outputs must not share memory; give each "
                                  "a buffer of its own", prefix, colon, OVERLAP_NAME(written[o]),
                                  OVERLAP_NAME(written[w]));
    }
#undef OVERLAP_NAME
    return ATTN_OK;
}

#endif /* ATTN_BASE_OVERLAP_H */
