/*
 * patch.c — interventions on a traced forward pass: replace, zero,
 * mean-ablate, scale or set the rows (or pattern entries) a patch selects.
 *
 * Shape legend: q [B, L, Hq, D]  k [B, S, Hkv, D]  v [B, S, Hkv, Dv]
 *               pattern [B, Hq, L, S]  z [B, L, Hq, Dv]
 * A row is (batch, position, head) of any of them; for the pattern the
 * position is the query and the row's entries are its keys.
 */
#include "interp/interp.h"

#include "base/problem.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

attn_status attn__patches_copy(const attn_patch *patches, int n, attn_patch **out) {
    *out = NULL;
    if (n < 0) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "n_patches is %d; it must be >= 0", n);
    if (n == 0) return ATTN_OK;
    if (!patches) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "patches is NULL but n_patches is %d", n);
    /* The caller's array steps by its own sizeof(attn_patch); patch 0's
     * copy refuses a struct_size of 0 or an implausible one before any
     * step is taken by it. */
    const size_t stride = patches[0].struct_size;
    const attn_patch defaults = attn_patch_make(ATTN_PATCH_ZERO, ATTN_HOOK_Q);
    attn_patch *copy = calloc((size_t)n, sizeof *copy);
    if (!copy) return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "cannot copy %d patches", n);
    for (int i = 0; i < n; i++) {
        const attn_patch *p = (const attn_patch *)(const void *)((const char *)patches + (size_t)i * stride);
        attn_status st = p->struct_size == stride
                             ? options_copy(&copy[i], sizeof copy[i], &defaults, p, "attn_patch")
                             : attn__fail(ATTN_ERR_INVALID_ARGUMENT,
                                          "patch %d: struct_size %zu differs from patch 0's %zu", i,
                                          p->struct_size, stride);
        if (st) {
            free(copy);
            return st;
        }
    }
    *out = copy;
    return ATTN_OK;
}

static patch_stage stage_of(attn_hook hook) {
    return hook == ATTN_HOOK_PATTERN ? PATCH_STAGE_PATTERN
         : hook == ATTN_HOOK_Z       ? PATCH_STAGE_Z
                                     : PATCH_STAGE_QKV;
}

/* A selector is ATTN_ALL or an index in [0, size). */
static attn_status check_selector(int index, const char *field, int64_t value, int64_t size,
                                  const char *what) {
    if (value == ATTN_ALL || (value >= 0 && value < size)) return ATTN_OK;
    return attn__fail(ATTN_ERR_INVALID_ARGUMENT,
                     "patch %d: %s = %lld is outside [0, %lld) (%s), and is not ATTN_ALL", index,
                     field, (long long)value, (long long)size, what);
}

static attn_status check_patch(const attn_trace *t, const attn_patch *p, int index) {
    hook_rows rows;
    const char *name = attn_hook_name(p->hook);
    if ((unsigned)p->kind > ATTN_PATCH_SET)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "patch %d: unknown kind %d", index, (int)p->kind);
    if (!attn__hook_rows(t, p->hook, &rows))
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT,
                         "patch %d: %s cannot be patched (patchable: hook_q, hook_k, hook_v, "
                         "hook_pattern, hook_z; hook_result is hook_z through W_O)",
                         index, name ? name : "an unknown hook");
    const bool pattern = p->hook == ATTN_HOOK_PATTERN;
    if (p->kind == ATTN_PATCH_SET && !pattern)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "patch %d: SET applies to hook_pattern only, not %s",
                         index, name);
    if (p->kind == ATTN_PATCH_MEAN && pattern)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT,
                         "patch %d: MEAN does not apply to hook_pattern (ablate hook_z instead)", index);
    if (p->renormalise && !pattern)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "patch %d: renormalise applies to hook_pattern only, not %s",
                         index, name);
    const bool kv = p->hook == ATTN_HOOK_K || p->hook == ATTN_HOOK_V;
    attn_status st;
    if ((st = check_selector(index, "batch", p->batch, rows.batch, "batches")) ||
        (st = check_selector(index, "position", p->position, rows.positions,
                             kv ? "key positions" : "query positions")) ||
        (st = check_selector(index, "head", p->head, rows.heads, kv ? "kv heads" : "query heads")))
        return st;
    if (pattern) {
        if ((st = check_selector(index, "key", p->key, rows.width, "keys"))) return st;
    } else if (p->key != ATTN_ALL) {
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "patch %d: key selects pattern entries; for %s it must be ATTN_ALL",
                         index, name);
    }
    if ((p->kind == ATTN_PATCH_SCALE || p->kind == ATTN_PATCH_SET) &&
        (!isfinite(p->factor) || (pattern && p->factor < 0)))
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "patch %d: factor %g must be finite%s", index,
                         (double)p->factor, pattern ? " and >= 0 on hook_pattern" : "");
    if (p->kind != ATTN_PATCH_REPLACE) return ATTN_OK;

    if (p->values) {
        for (int64_t i = 0; i < rows.width; i++)
            if (!isfinite(p->values[i]) || (pattern && p->values[i] < 0))
                return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "patch %d: values[%lld] = %g must be finite%s",
                                 index, (long long)i, (double)p->values[i],
                                 pattern ? " and >= 0 on hook_pattern" : "");
        return ATTN_OK;
    }
    if (!p->source)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "patch %d: REPLACE needs values or a source trace", index);
    hook_rows from;
    attn__hook_rows(p->source, p->hook, &from);
    if (!from.data)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "patch %d: the source trace holds no %s", index, name);
    if (from.batch != rows.batch || from.positions != rows.positions || from.heads != rows.heads ||
        from.width != rows.width)
        return attn__fail(ATTN_ERR_SHAPE,
                         "patch %d: the source's %s has batch %lld, %lld positions, %lld heads, width "
                         "%lld; this pass has %lld, %lld, %lld, %lld",
                         index, name, (long long)from.batch, (long long)from.positions,
                         (long long)from.heads, (long long)from.width, (long long)rows.batch,
                         (long long)rows.positions, (long long)rows.heads, (long long)rows.width);
    return ATTN_OK;
}

attn_status attn__patches_check(const attn_trace *t, const attn_patch *patches, int n_patches) {
    if (n_patches < 0)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "n_patches is %d; it must be >= 0", n_patches);
    if (n_patches > 0 && !patches)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "patches is NULL but n_patches is %d", n_patches);
    for (int i = 0; i < n_patches; i++) {
        attn_status st = check_patch(t, &patches[i], i);
        if (st) return st;
    }
    return ATTN_OK;
}

/* [first, end) of a selector over size indices. */
static void span(int64_t selector, int64_t size, int64_t *first, int64_t *end) {
    *first = selector == ATTN_ALL ? 0 : selector;
    *end = selector == ATTN_ALL ? size : selector + 1;
}

/* Applies p to one row; mean is the row's replacement for MEAN. */
static void patch_row(const attn_patch *p, const hook_rows *rows, int64_t b, int64_t pos,
                      int64_t head, const double *mean) {
    float *row = hook_row(rows, b, pos, head);
    int64_t j0, j1;
    span(p->key, rows->width, &j0, &j1);
    switch (p->kind) {
    case ATTN_PATCH_REPLACE: {
        const float *from = p->values;
        if (!from) {
            hook_rows source_rows;
            attn__hook_rows(p->source, p->hook, &source_rows);
            from = hook_row(&source_rows, b, pos, head);
        }
        for (int64_t j = j0; j < j1; j++) row[j] = from[j];
        break;
    }
    case ATTN_PATCH_ZERO:
        for (int64_t j = j0; j < j1; j++) row[j] = 0.0f;
        break;
    case ATTN_PATCH_MEAN:
        for (int64_t j = 0; j < rows->width; j++) row[j] = (float)mean[j];
        break;
    case ATTN_PATCH_SCALE:
        for (int64_t j = j0; j < j1; j++) row[j] *= p->factor;
        break;
    case ATTN_PATCH_SET:
        for (int64_t j = j0; j < j1; j++) row[j] = p->factor;
        break;
    }
    if (p->renormalise) {
        /* Entries are >= 0 here (checked), so the sum is 0 only for a row
         * that reads nothing: it stays 0 rather than becoming NaN. */
        double sum = 0.0;
        for (int64_t j = 0; j < rows->width; j++) sum += row[j];
        if (sum > 0.0)
            for (int64_t j = 0; j < rows->width; j++) row[j] = (float)(row[j] / sum);
    }
}

static attn_status apply_patch(attn_trace *t, const attn_patch *p, uint8_t *touched) {
    hook_rows rows;
    attn__hook_rows(t, p->hook, &rows);
    double *mean = NULL;
    if (p->kind == ATTN_PATCH_MEAN) {
        mean = malloc((size_t)rows.width * sizeof(double));
        if (!mean)
            return attn__fail(ATTN_ERR_OUT_OF_MEMORY, "patch: cannot allocate %lld doubles",
                             (long long)rows.width);
    }
    int64_t b0, b1, h0, h1, p0, p1;
    span(p->batch, rows.batch, &b0, &b1);
    span(p->head, rows.heads, &h0, &h1);
    span(p->position, rows.positions, &p0, &p1);
    for (int64_t b = b0; b < b1; b++)
        for (int64_t h = h0; h < h1; h++) {
            if (mean) {
                /* The mean over every position of (b, h), taken before any of
                 * this patch's writes. */
                for (int64_t j = 0; j < rows.width; j++) mean[j] = 0.0;
                for (int64_t pos = 0; pos < rows.positions; pos++) {
                    const float *row = hook_row(&rows, b, pos, h);
                    for (int64_t j = 0; j < rows.width; j++) mean[j] += row[j];
                }
                for (int64_t j = 0; j < rows.width; j++) mean[j] /= (double)rows.positions;
            }
            for (int64_t pos = p0; pos < p1; pos++) {
                patch_row(p, &rows, b, pos, h, mean);
                if (touched) touched[hook_row_index(&rows, b, pos, h)] = 1;
            }
        }
    free(mean);
    return ATTN_OK;
}

attn_status attn__patches_apply(attn_trace *t, const attn_patch *patches, int n_patches,
                               patch_stage stage, uint8_t *touched) {
    for (int i = 0; i < n_patches; i++) {
        if (stage_of(patches[i].hook) != stage) continue;
        attn_status st = apply_patch(t, &patches[i], touched);
        if (st) return st;
    }
    return ATTN_OK;
}
