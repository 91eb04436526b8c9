/*
 * cli_common.c — argument parsing and .npy loading with messages that name
 * the flag and the file, shared by every subcommand.
 */
#define _XOPEN_SOURCE 700 /* realpath */

#include "cli.h"
#include "cli_timing.h"

#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static FILE *message_stream; /* NULL: stderr */

void cli_set_message_stream(FILE *f) { message_stream = f; }

static FILE *messages(void) { return message_stream ? message_stream : stderr; }

int cli_usage_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    fprintf(messages(), "attn %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(messages(), fmt, ap);
    va_end(ap);
    fprintf(messages(), "\n(see 'attn %s --help')\n", cmd);
    return CLI_USAGE_ERROR;
}

int cli_data_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    fprintf(messages(), "attn %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(messages(), fmt, ap);
    va_end(ap);
    fputc('\n', messages());
    return CLI_DATA_ERROR;
}

void cli_warning(const char *cmd, const char *fmt, ...) {
    va_list ap;
    fprintf(messages(), "attn %s: warning: ", cmd);
    va_start(ap, fmt);
    vfprintf(messages(), fmt, ap);
    va_end(ap);
    fputc('\n', messages());
}

bool cli_parse_int(const char *cmd, const char *flag, const char *text, int64_t min, int64_t max,
                   int64_t *out) {
    char *end;
    errno = 0;
    long long value = text ? strtoll(text, &end, 10) : 0;
    if (!text || !*text || *end || errno == ERANGE) {
        cli_usage_error(cmd, "%s expects an integer, got '%s'", flag, text ? text : "");
        return false;
    }
    if (value < min || value > max) {
        cli_usage_error(cmd, "%s must be between %lld and %lld, got %lld", flag, (long long)min,
                        (long long)max, value);
        return false;
    }
    *out = value;
    return true;
}

bool cli_parse_float(const char *cmd, const char *flag, const char *text, double min, double max,
                     double *out) {
    char *end;
    errno = 0;
    double value = text ? strtod(text, &end) : 0;
    if (!text || !*text || *end || errno == ERANGE || !isfinite(value)) {
        cli_usage_error(cmd, "%s expects a finite number, got '%s'", flag, text ? text : "");
        return false;
    }
    if (value < min || value > max) {
        cli_usage_error(cmd, "%s must be between %g and %g, got %g", flag, min, max, value);
        return false;
    }
    *out = value;
    return true;
}

const char *cli_shape_str(const attn_array *a, char *buf, size_t size) {
    size_t n = (size_t)snprintf(buf, size, "[");
    for (int i = 0; i < a->ndim && n < size; i++)
        n += (size_t)snprintf(buf + n, size - n, "%s%lld", i ? ", " : "", (long long)a->shape[i]);
    if (n < size) snprintf(buf + n, size - n, "]");
    return buf;
}

bool cli_load_f32(const char *cmd, const char *flag, const char *path, bool allow_neg_inf,
                  attn_array *out) {
    return cli_load_float(cmd, flag, path, allow_neg_inf, false, out);
}

/* Element i of a float array of dtype F32, F16 or BF16, as a float (exact). */
static float float_at(const attn_array *a, int64_t i) {
    if (a->dtype == ATTN_F32) return ((const float *)a->data)[i];
    const uint32_t h = ((const uint16_t *)a->data)[i];
    if (a->dtype == ATTN_BF16) {
        const uint32_t bits = h << 16;
        float f;
        memcpy(&f, &bits, sizeof f);
        return f;
    }
    /* float16: only finiteness and sign matter to the caller below, but
     * the value is exact anyway (ldexp of the integer significand). */
    const int exponent = (int)(h >> 10 & 0x1F), mantissa = (int)(h & 0x3FF);
    const float magnitude = exponent == 31 ? (mantissa ? NAN : INFINITY)
                            : exponent == 0 ? ldexpf((float)mantissa, -24)
                                            : ldexpf((float)(mantissa | 0x400), exponent - 25);
    return h & 0x8000 ? -magnitude : magnitude;
}

/* The bits that make an element NaN or infinite (all exponent bits set),
 * and the one pattern of -inf, per float dtype. */
typedef struct float_bits {
    uint32_t exponent, negative_infinity;
} float_bits;

/* Whether any of n elements of 16 or 32 bits is NaN or infinite (-inf
 * allowed when asked).  No early exit and no branch in the loop, so that
 * the compiler vectorises it: the check then runs at the speed memory
 * delivers the array (a few ms for 32 MiB), not one element per branch. */
static bool any_not_finite_32(const uint32_t *bits, int64_t n, float_bits fb, bool allow_neg_inf) {
    uint32_t bad = 0;
    for (int64_t i = 0; i < n; i++)
        bad |= ((bits[i] & fb.exponent) == fb.exponent) & !(allow_neg_inf && bits[i] == fb.negative_infinity);
    return bad != 0;
}

static bool any_not_finite_16(const uint16_t *bits, int64_t n, float_bits fb, bool allow_neg_inf) {
    uint32_t bad = 0;
    for (int64_t i = 0; i < n; i++)
        bad |= ((bits[i] & fb.exponent) == fb.exponent) & !(allow_neg_inf && bits[i] == fb.negative_infinity);
    return bad != 0;
}

/* The index of the first element of a float array (F32, F16, BF16) that
 * is NaN or infinite (-inf allowed when asked), or -1.  Blocks of 64 Ki
 * elements are tested whole; the first bad block is searched one by one. */
static int64_t first_not_finite(const attn_array *a, bool allow_neg_inf) {
    const float_bits fb = a->dtype == ATTN_F32    ? (float_bits){0x7f800000u, 0xff800000u}
                          : a->dtype == ATTN_BF16 ? (float_bits){0x7f80u, 0xff80u}
                                                  : (float_bits){0x7c00u, 0xfc00u};
    const int64_t block = 1 << 16;
    for (int64_t start = 0; start < a->count; start += block) {
        const int64_t n = a->count - start < block ? a->count - start : block;
        const bool bad = a->dtype == ATTN_F32 ? any_not_finite_32((const uint32_t *)a->data + start, n, fb, allow_neg_inf)
                                              : any_not_finite_16((const uint16_t *)a->data + start, n, fb, allow_neg_inf);
        if (!bad) continue;
        for (int64_t i = start; i < start + n; i++) {
            const float x = float_at(a, i);
            if (!isfinite(x) && !(allow_neg_inf && x == -INFINITY)) return i;
        }
    }
    return -1;
}

bool cli_load_float(const char *cmd, const char *flag, const char *path, bool allow_neg_inf, bool keep_half,
                    attn_array *out) {
    attn_dtype original;
    double t = cli_timing_now();
    if (attn_npy_load(path, out) != ATTN_OK) {
        cli_data_error(cmd, "%s: %s", flag, attn_last_error());
        return false;
    }
    cli_timing_add("read inputs", t);
    t = cli_timing_now();
    original = out->dtype;
    const bool half = original == ATTN_F16 || original == ATTN_BF16;
    if (!(keep_half && half) && attn_array_convert(out, ATTN_F32) != ATTN_OK) {
        cli_data_error(cmd, "%s '%s': dtype %s is not a float array (%s)", flag, path,
                       attn_dtype_name(original), attn_last_error());
        attn_array_free(out);
        return false;
    }
    cli_timing_add("convert inputs", t);
    t = cli_timing_now();
    const int64_t i = first_not_finite(out, allow_neg_inf);
    if (i >= 0) {
        const float x = float_at(out, i);
        cli_data_error(cmd, "%s '%s': element %lld is %s; inputs must be finite%s", flag, path,
                       (long long)i, isnan(x) ? "NaN" : x > 0 ? "+inf" : "-inf",
                       allow_neg_inf ? " (a bias may use -inf to hide a key)" : "");
        attn_array_free(out);
        return false;
    }
    cli_timing_add("check inputs finite", t);
    return true;
}

bool cli_load_ints(const char *cmd, const char *flag, const char *path, attn_dtype dtype,
                   attn_array *out) {
    if (attn_npy_load(path, out) != ATTN_OK) {
        cli_data_error(cmd, "%s: %s", flag, attn_last_error());
        return false;
    }
    attn_dtype original = out->dtype;
    if (attn_array_convert(out, dtype) != ATTN_OK) {
        cli_data_error(cmd, "%s '%s': dtype %s cannot be used here, an integer or bool array is "
                       "needed (%s)", flag, path, attn_dtype_name(original), attn_last_error());
        attn_array_free(out);
        return false;
    }
    return true;
}

bool cli_save_f32(const char *cmd, const char *path, int ndim, const int64_t *shape,
                  const float *data) {
    attn_array a = {0};
    a.dtype = ATTN_F32;
    a.ndim = ndim;
    a.count = 1;
    for (int i = 0; i < ndim; i++) {
        a.shape[i] = shape[i];
        a.count *= shape[i];
    }
    a.data = (void *)data;
    if (attn_npy_save(path, &a) != ATTN_OK) {
        cli_data_error(cmd, "%s", attn_last_error());
        return false;
    }
    return true;
}

/* An output path in a comparable form: the canonical directory and the
 * name, for a file that does not exist yet.  *buf is malloc'd (NULL when
 * the directory itself does not exist: such an output fails on its own). */
static char *canonical_new_path(const char *path) {
    char *dir_copy = strdup(path), *base_copy = strdup(path);
    char *dir = dir_copy ? realpath(dirname(dir_copy), NULL) : NULL;
    char *result = NULL;
    if (dir && base_copy) {
        const char *base = basename(base_copy);
        size_t n = strlen(dir) + strlen(base) + 2;
        if ((result = malloc(n))) snprintf(result, n, "%s/%s", dir, base);
    }
    free(dir);
    free(dir_copy);
    free(base_copy);
    return result;
}

/* True when a and b name the same file (existing: same device and inode;
 * new: the same canonical path). */
static bool same_file(const char *a, const char *b, bool *devices) {
    struct stat sa, sb;
    bool ea = stat(a, &sa) == 0, eb = stat(b, &sb) == 0;
    *devices = ea && eb && !S_ISREG(sa.st_mode) && !S_ISREG(sb.st_mode);
    if (ea && eb) return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    if (ea || eb) return false;
    char *ca = canonical_new_path(a), *cb = canonical_new_path(b);
    bool same = ca && cb && strcmp(ca, cb) == 0;
    free(ca);
    free(cb);
    return same;
}

int cli_check_paths(const char *cmd, const char *const *inputs, int n_inputs, const char *const *outputs,
                    int n_outputs) {
    for (int o = 0; o < n_outputs; o++) {
        if (!outputs[o]) continue;
        bool devices;
        for (int i = 0; i < n_inputs; i++)
            if (inputs[i] && same_file(outputs[o], inputs[i], &devices) && !devices)
                return cli_usage_error(cmd, "the output '%s' is the input '%s': writing it would destroy what "
                                       "the run reads; choose another output name", outputs[o], inputs[i]);
        for (int p = 0; p < o; p++)
            if (outputs[p] && same_file(outputs[o], outputs[p], &devices) && !devices)
                return cli_usage_error(cmd, "two outputs name the same file ('%s' and '%s'): only the last "
                                       "would be kept", outputs[p], outputs[o]);
    }
    return CLI_OK;
}

void *cli_alloc_large(size_t bytes) {
    void *data = NULL;
    return posix_memalign(&data, 64, bytes > 0 ? bytes : 1) == 0 ? data : NULL;
}
