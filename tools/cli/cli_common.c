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

static const struct {
    const char *name;
    attn_dtype dtype;
} kv_dtypes[] = {{"f32", ATTN_F32}, {"f16", ATTN_F16}, {"bf16", ATTN_BF16}, {"q8_0", ATTN_Q8_0},
                 {"fp8", ATTN_FP8_E4M3}, {"fp8_e4m3", ATTN_FP8_E4M3}};

bool cli_parse_kv_dtype(const char *cmd, const char *flag, const char *text, attn_dtype *dtype) {
    for (size_t i = 0; i < sizeof kv_dtypes / sizeof kv_dtypes[0]; i++)
        if (strcmp(text, kv_dtypes[i].name) == 0) {
            *dtype = kv_dtypes[i].dtype;
            return true;
        }
    cli_usage_error(cmd, "%s must be f32, f16, bf16, q8_0 or fp8, got '%s'", flag, text);
    return false;
}

const char *cli_kv_dtype_name(attn_dtype dtype) {
    for (size_t i = 0; i < sizeof kv_dtypes / sizeof kv_dtypes[0]; i++)
        if (kv_dtypes[i].dtype == dtype) return kv_dtypes[i].name;
    return attn_dtype_name(dtype);
}

bool cli_parse_kv_cache(const char *cmd, const char *flag, const char *text, attn_dtype *k, attn_dtype *v) {
    const char *colon = strchr(text, ':');
    *v = 0;
    if (!colon) return cli_parse_kv_dtype(cmd, flag, text, k);
    char key[32];
    const size_t n = (size_t)(colon - text);
    if (n >= sizeof key) return cli_parse_kv_dtype(cmd, flag, text, k); /* its message names the text */
    memcpy(key, text, n);
    key[n] = '\0';
    if (!cli_parse_kv_dtype(cmd, flag, key, k) || !cli_parse_kv_dtype(cmd, flag, colon + 1, v)) return false;
    if (*v == ATTN_F32 && *k != ATTN_F32) {
        cli_usage_error(cmd, "%s '%s': float32 values beside narrower keys is the one mix a cache does not take "
                             "(give the keys at least the values' bits: f32, or %s:%s)", flag, text, colon + 1, colon + 1);
        return false;
    }
    if (*v == *k) *v = 0;
    return true;
}

const char *cli_kv_cache_name(attn_dtype k, attn_dtype v, char *buf, size_t size) {
    if (!v || v == k) snprintf(buf, size, "%s", cli_kv_dtype_name(k));
    else snprintf(buf, size, "%s:%s", cli_kv_dtype_name(k), cli_kv_dtype_name(v));
    return buf;
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

/* The finiteness check is fused with the read (attn_npy_load_finite: each
 * chunk checked by the thread that read it, while in its cache); only a
 * float64 file, which the check leaves alone, is checked after its
 * conversion, which may overflow to infinity. */
bool cli_load_float(const char *cmd, const char *flag, const char *path, bool allow_neg_inf, bool keep_half,
                    attn_array *out) {
    const char *neg_inf_note = allow_neg_inf ? " (a bias may use -inf to hide a key)" : "";
    double t = cli_timing_now();
    attn_status st = attn_npy_load_finite(path, allow_neg_inf, out, NULL);
    if (st != ATTN_OK) {
        /* "-q 'q.npy': element 5 is NaN; ...", "-q: cannot open 'q.npy': ..." */
        if (st == ATTN_ERR_NONFINITE) cli_data_error(cmd, "%s %s%s", flag, attn_last_error(), neg_inf_note);
        else cli_data_error(cmd, "%s: %s", flag, attn_last_error());
        return false;
    }
    cli_timing_add("read + check inputs", t);
    t = cli_timing_now();
    const attn_dtype original = out->dtype;
    const bool half = original == ATTN_F16 || original == ATTN_BF16;
    if (!(keep_half && half) && attn_array_convert(out, ATTN_F32) != ATTN_OK) {
        cli_data_error(cmd, "%s '%s': dtype %s is not a float array (%s)", flag, path,
                       attn_dtype_name(original), attn_last_error());
        attn_array_free(out);
        return false;
    }
    if (original == ATTN_F64 && attn_array_check_finite(out, allow_neg_inf, NULL) != ATTN_OK) {
        cli_data_error(cmd, "%s '%s': %s%s", flag, path, attn_last_error(), neg_inf_note);
        attn_array_free(out);
        return false;
    }
    if (original != out->dtype) cli_timing_add("convert inputs", t);
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
