/*
 * cli_decoder.c — the flags every model command shares (model run,
 * generate, trace, bench): how the decoder keeps its weights and the
 * precision of its projections (attn_decoder_options); the peak memory
 * they report; the check of a run against the model's context.
 */
#include "cli.h"

#include <string.h>
#include <sys/resource.h>

const cli_flag cli_decoder_flags[] = {
    {"--weights", "stored|f32", CLI_ID_WEIGHTS, 0},
    {"--precision", "exact|fast", CLI_ID_DECODER_PRECISION, 0},
    CLI_FLAGS_END};

const char cli_decoder_help[] =
    "  --weights W          stored (default): the matrices stay as the file stores them, read where\n"
    "                       it is mapped (peak memory about the file's size); f32: converted to\n"
    "                       float32 at load, the reference (4 bytes a parameter)\n"
    "  --precision P        the projections': exact (default; the dequantized weights times float32\n"
    "                       activations) or fast (activations rounded to 8 bits per block of 32,\n"
    "                       integer dot products; error measured in docs/quant.md)\n";

int cli_decoder_take(attn_decoder_options *o, const char *cmd, int id, const char *value) {
    if (id == CLI_ID_WEIGHTS) {
        if (strcmp(value, "stored") == 0) o->weights = ATTN_WEIGHTS_STORED;
        else if (strcmp(value, "f32") == 0) o->weights = ATTN_WEIGHTS_F32;
        else return cli_usage_error(cmd, "--weights is '%s': stored or f32", value), -1;
        return 1;
    }
    if (id == CLI_ID_DECODER_PRECISION) {
        if (strcmp(value, "exact") == 0) o->precision = ATTN_PRECISION_EXACT;
        else if (strcmp(value, "fast") == 0) o->precision = ATTN_PRECISION_FAST;
        else return cli_usage_error(cmd, "--precision is '%s': exact or fast", value), -1;
        return 1;
    }
    return 0;
}

double cli_peak_rss_bytes(void) {
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) == 0 ? (double)ru.ru_maxrss * 1024.0 : -1.0;
}

/* Here, not in cli_common.c: it calls libattn_model, and cli_common.c is
 * among the parser sources the CLI-argument fuzzer links on the core alone. */
int cli_check_context(const char *cmd, const attn_decoder_config *cfg, int64_t n_prompt, int64_t n_new, bool allow) {
    int beyond = 0;
    if (attn_decoder_check_context(cfg, n_prompt, n_new, allow, &beyond))
        return cli_data_error(cmd, "%s (give --allow-beyond-context to run it anyway)", attn_last_error());
    if (beyond) cli_warning(cmd, "%s", attn_last_error());
    return CLI_OK;
}
