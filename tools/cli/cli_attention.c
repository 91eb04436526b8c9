/*
 * cli_attention.c — the masking, scale, kernel and thread options that every
 * attention subcommand shares, parsed and loaded in one place.
 */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

const char cli_attention_options_help[] =
    "masks (combine freely; a key is visible when every rule allows it):\n"
    "  --causal                query i sees keys j <= i (top-left, PyTorch is_causal)\n"
    "  --causal-lower-right    query i sees keys j <= i + S - L (FlashAttention, KV-cache decoding)\n"
    "  --align top-left|lower-right\n"
    "                          diagonal used by --window without a causal flag (default top-left)\n"
    "  --window LEFT,RIGHT     keys within LEFT before and RIGHT after the diagonal; -1 = unbounded\n"
    "  --key-lengths F.npy     integers [B]: keys at or past the length are padding (hidden)\n"
    "  --mask F.npy            bool/int [L,S], [H,L,S] or [B,H,L,S] (size-1 dims broadcast):\n"
    "                          NONZERO = MAY ATTEND (PyTorch SDPA; nn.MultiheadAttention is the opposite)\n"
    "  --bias F.npy            float, same shapes: added to the scaled scores; -inf hides a key\n"
    "computation:\n"
    "  --scale S               score scale (default 1/sqrt(D))\n"
    "  --kernel auto|ref|flash kernel (default auto: the fastest that supports the request)\n"
    "  --threads N             threads (default: $ATTN_NUM_THREADS, else all cores)\n"
    "a row that sees no key gets output 0, weights 0 and lse -inf (never NaN)\n";

static bool parse_window(const char *cmd, const char *text, attn_sdpa_options *opt) {
    char left[64], right[64];
    const char *comma = text ? strchr(text, ',') : NULL;
    if (!comma || (size_t)(comma - text) >= sizeof left || strlen(comma + 1) >= sizeof right) {
        cli_usage_error(cmd, "--window expects LEFT,RIGHT (e.g. 128,0; -1 = unbounded), got '%s'",
                        text ? text : "");
        return false;
    }
    memcpy(left, text, (size_t)(comma - text));
    left[comma - text] = 0;
    strcpy(right, comma + 1);
    opt->window = 1;
    return cli_parse_int(cmd, "--window LEFT", left, -1, INT64_MAX, &opt->window_left) &&
           cli_parse_int(cmd, "--window RIGHT", right, -1, INT64_MAX, &opt->window_right);
}

int cli_parse_attention_option(const char *cmd, int argc, char **argv, int *i,
                               cli_attention_options *o) {
    const char *flag = argv[*i];
    const char *value = *i + 1 < argc ? argv[*i + 1] : NULL;
    bool takes_value = true;
    if (strcmp(flag, "--causal") == 0 || strcmp(flag, "--causal-lower-right") == 0) {
        if (o->opt.causal)
            return cli_usage_error(cmd, "give only one of --causal and --causal-lower-right"), -1;
        o->opt.causal = 1;
        o->opt.align = flag[8] ? ATTN_ALIGN_LOWER_RIGHT : ATTN_ALIGN_TOP_LEFT;
        takes_value = false;
    } else if (strcmp(flag, "--align") == 0 || strcmp(flag, "--window") == 0 ||
               strcmp(flag, "--key-lengths") == 0 || strcmp(flag, "--mask") == 0 ||
               strcmp(flag, "--bias") == 0 || strcmp(flag, "--scale") == 0 ||
               strcmp(flag, "--kernel") == 0 || strcmp(flag, "--threads") == 0) {
        if (!value) return cli_usage_error(cmd, "%s needs a value", flag), -1;
        if (strcmp(flag, "--align") == 0) {
            if (strcmp(value, "top-left") == 0) o->opt.align = ATTN_ALIGN_TOP_LEFT;
            else if (strcmp(value, "lower-right") == 0) o->opt.align = ATTN_ALIGN_LOWER_RIGHT;
            else return cli_usage_error(cmd, "--align expects top-left or lower-right, got '%s'", value), -1;
        } else if (strcmp(flag, "--window") == 0) {
            if (!parse_window(cmd, value, &o->opt)) return -1;
        } else if (strcmp(flag, "--key-lengths") == 0) {
            o->key_lengths_path = value;
        } else if (strcmp(flag, "--mask") == 0) {
            o->mask_path = value;
        } else if (strcmp(flag, "--bias") == 0) {
            o->bias_path = value;
        } else if (strcmp(flag, "--scale") == 0) {
            double scale;
            if (!cli_parse_float(cmd, "--scale", value, 1e-30, 1e30, &scale)) return -1;
            o->opt.scale = (float)scale;
        } else if (strcmp(flag, "--kernel") == 0) {
            if (strcmp(value, "auto") == 0) o->opt.kernel = ATTN_KERNEL_AUTO;
            else if (strcmp(value, "ref") == 0) o->opt.kernel = ATTN_KERNEL_REF;
            else if (strcmp(value, "flash") == 0) o->opt.kernel = ATTN_KERNEL_FLASH;
            else return cli_usage_error(cmd, "--kernel expects auto, ref or flash, got '%s'", value), -1;
        } else {
            int64_t threads;
            if (!cli_parse_int(cmd, "--threads", value, 1, 4096, &threads)) return -1;
            o->opt.threads = (int)threads;
        }
    } else {
        return 0;
    }
    *i += takes_value ? 2 : 1;
    return 1;
}

/* Broadcast shape [B|1, H|1, L|1, S|1] of a mask or bias file of rank 2..4. */
static int broadcast_shape(const char *cmd, const char *flag, const char *path, const attn_array *a,
                           const int64_t full[4], int64_t shape[4]) {
    char buf[128];
    if (a->ndim < 2 || a->ndim > 4)
        return cli_data_error(cmd, "%s '%s' has shape %s; expected [L, S], [H, L, S] or [B, H, L, S]",
                              flag, path, cli_shape_str(a, buf, sizeof buf));
    for (int d = 0; d < 4; d++) shape[d] = 1;
    for (int d = 0; d < a->ndim; d++) shape[4 - a->ndim + d] = a->shape[d];
    static const char *names[4] = {"B", "H", "L", "S"};
    for (int d = 0; d < 4; d++)
        if (shape[d] != 1 && shape[d] != full[d])
            return cli_data_error(cmd, "%s '%s' has shape %s: its %s dimension must be 1 or %lld", flag,
                                  path, cli_shape_str(a, buf, sizeof buf), names[d], (long long)full[d]);
    return CLI_OK;
}

int cli_load_attention_inputs(const char *cmd, cli_attention_options *o, int64_t batch,
                              int64_t heads_q, int64_t len_q, int64_t len_kv) {
    const int64_t full[4] = {batch, heads_q, len_q, len_kv};
    char buf[128];
    if (o->key_lengths_path) {
        if (!cli_load_ints(cmd, "--key-lengths", o->key_lengths_path, ATTN_I64, &o->key_lengths))
            return CLI_DATA_ERROR;
        if (o->key_lengths.ndim > 1 || o->key_lengths.count != batch)
            return cli_data_error(cmd, "--key-lengths '%s' has shape %s; expected [B] = [%lld]",
                                  o->key_lengths_path, cli_shape_str(&o->key_lengths, buf, sizeof buf),
                                  (long long)batch);
        const int64_t *lens = o->key_lengths.data;
        for (int64_t b = 0; b < batch; b++)
            if (lens[b] < 0 || lens[b] > len_kv)
                return cli_data_error(cmd, "--key-lengths '%s': element %lld is %lld, outside [0, S = %lld]",
                                      o->key_lengths_path, (long long)b, (long long)lens[b],
                                      (long long)len_kv);
        o->opt.key_lengths = lens;
    }
    if (o->mask_path) {
        if (!cli_load_ints(cmd, "--mask", o->mask_path, ATTN_BOOL, &o->mask)) return CLI_DATA_ERROR;
        if (broadcast_shape(cmd, "--mask", o->mask_path, &o->mask, full, o->opt.mask_shape))
            return CLI_DATA_ERROR;
        o->opt.mask = o->mask.data;
    }
    if (o->bias_path) {
        if (!cli_load_f32(cmd, "--bias", o->bias_path, true, &o->bias)) return CLI_DATA_ERROR;
        if (broadcast_shape(cmd, "--bias", o->bias_path, &o->bias, full, o->opt.bias_shape))
            return CLI_DATA_ERROR;
        o->opt.bias = o->bias.data;
    }
    return CLI_OK;
}

void cli_attention_options_free(cli_attention_options *o) {
    attn_array_free(&o->key_lengths);
    attn_array_free(&o->mask);
    attn_array_free(&o->bias);
}

bool cli_save_outputs(const char *cmd, const cli_output *outputs, int count) {
    attn_output **open_files = calloc(count > 0 ? (size_t)count : 1, sizeof *open_files);
    bool ok = open_files != NULL;
    if (!ok) cli_data_error(cmd, "out of memory for the list of outputs");
    /* 1. Every file written to its temporary: nothing is touched yet. */
    for (int i = 0; i < count && ok; i++) {
        const cli_output *o = &outputs[i];
        if (!o->path) continue;
        uint8_t header[ATTN_NPY_HEADER_MAX];
        size_t header_size;
        size_t bytes = sizeof(float);
        for (int d = 0; d < o->ndim; d++) bytes *= (size_t)o->shape[d];
        ok = attn_npy_format_header(ATTN_F32, o->ndim, o->shape, header, sizeof header, &header_size) == ATTN_OK &&
             attn_output_open(o->path, &open_files[i]) == ATTN_OK &&
             attn_output_write(open_files[i], header, header_size) == ATTN_OK &&
             attn_output_write(open_files[i], o->data, bytes) == ATTN_OK;
        if (!ok) cli_data_error(cmd, "%s", attn_last_error());
    }
    if (!ok) {
        for (int i = 0; open_files && i < count; i++) attn_output_discard(open_files[i]);
        free(open_files);
        return false;
    }
    /* 2. All complete: each renamed over its target.  A rename that fails
     * now (rare: the directory changed under us) leaves the earlier outputs
     * written and complete, and says so. */
    int committed = 0;
    for (int i = 0; i < count; i++) {
        if (!open_files[i]) continue;
        attn_output *o = open_files[i];
        open_files[i] = NULL;
        if (ok && attn_output_commit(o) == ATTN_OK) {
            committed++;
            continue;
        }
        if (ok) {
            cli_data_error(cmd, "%s%s", attn_last_error(),
                           committed ? " (the outputs before it were written; it and the ones after were not)"
                                     : "");
            ok = false;
        } else {
            attn_output_discard(o);
        }
    }
    free(open_files);
    return ok;
}
