/*
 * options.c — attn_sdpa_options described once: one row per option, from
 * which the interfaces are made (attn.h, attn_sdpa_option):
 *   the attn program's flags, their parsing and the flag lines of --help
 *     (tools/cli/cli_attention.c, by group, in the table's order)
 *   the Python package's keywords, their checks and its stub's list
 *     (python/src/attn_module.c, python/attn/_options.py; tests/python
 *     compares python/attn/__init__.pyi with the table)
 *   what ring attention compares across ranks and what it refuses
 *     (src/dist/ring_common.c, by the ranks column)
 *
 * A new option of attn_sdpa_options is:
 *   its field in include/attn.h, its check in base/problem.c and its
 *     kernel support (what it means);
 *   a row here, in the place its --help line should take; its kind makes
 *     the flag's parsing and the Python keyword's (a number, a switch, a
 *     choice, a position, a window: nothing more to write), its ranks
 *     column what ring attention does with it;
 *   its keyword's line in python/attn/__init__.pyi's AttentionOptions (a
 *     choice typed with a Literal of its names) and in attn.sdpa's
 *     docstring (tests/python/test_options.py says so when either is
 *     missing or a choice's names differ), and its bullet in docs/python.md;
 *   for an array read from a file, its loader in the CLI
 *     (cli_load_attention_inputs and path_of, tools/cli/cli_attention.c);
 *   for an option that must be read with another (causal's flags and
 *     align; ALiBi's switch and slopes), the rule in the CLI
 *     (take_combined) and in attn/_options.py (_causal, _alibi);
 *   for a kind that is new, its parser in the CLI (take_option), in
 *     Python's _core (fill_option, kind_names) and attn/_options.py
 *     (_value), whether it is set (option_is_set, base/options.h), its
 *     record in the ring (option_values, record_option, field_of) and
 *     its fields in tests/base/test_options.c (fields_of).
 *
 * Order: the flags' order in --help within each group, and the order in
 * which the ring reports the first option ranks disagree on.
 */
#include "base/options.h"

#include <stddef.h>

#define AT(field) offsetof(attn_sdpa_options, field)

static const char *const aligns[] = {"top-left", "lower-right", NULL};
static const char *const kernels[] = {"auto", "ref", "flash", NULL};
static const char *const precisions[] = {"exact", "fast", NULL};

static const attn_sdpa_option_info table[] = {
    /* ---- masks: which keys a query sees (docs/semantics.md) */
    {.name = "causal", .kind = ATTN_OPTION_SWITCH, .offset = {AT(causal)},
     .default_text = "off",
     .help = "key j visible to query i only up to i's diagonal (the alignment's)",
     .group = "masks",
     .flags = {{"--causal", NULL, "query i sees keys j <= i (top-left, PyTorch is_causal)"},
               {"--causal-lower-right", NULL,
                "query i sees keys j <= i + S - L (FlashAttention, KV-cache decoding:\n"
                "the last query sees every key)"}},
     .python = "causal", .python_default = "False", .ranks = ATTN_RANKS_AGREE},
    {.name = "align", .kind = ATTN_OPTION_CHOICE, .offset = {AT(align)}, .choices = aligns,
     .default_text = "top-left",
     .help = "the diagonal causal, the window and ALiBi are placed on: top-left (j = i) or lower-right "
             "(j = i + S - L)",
     .group = "masks",
     .flags = {{"--align", "top-left|lower-right",
                "diagonal used by --window without a causal flag (default top-left)"}},
     .python = "align", .python_default = "None", .ranks = ATTN_RANKS_AGREE},
    {.name = "window", .kind = ATTN_OPTION_WINDOW, .offset = {AT(window), AT(window_left), AT(window_right)},
     .default_text = "off",
     .help = "a sliding window of keys (left, right) around the diagonal, -1 = unbounded",
     .group = "masks",
     .flags = {{"--window", "LEFT,RIGHT", "keys within LEFT before and RIGHT after the diagonal; -1 = unbounded"}},
     .python = "window", .python_default = "None", .ranks = ATTN_RANKS_AGREE},
    {.name = "scale", .kind = ATTN_OPTION_FLOAT, .offset = {AT(scale)}, .default_text = "1/sqrt(D)",
     .help = "the score scale, > 0", .min = 1e-30, .max = 1e30,
     .group = "computation", .flags = {{"--scale", "S", "score scale (default 1/sqrt(D))"}},
     .python = "scale", .python_default = "None", .ranks = ATTN_RANKS_AGREE},
    {.name = "key_lengths", .kind = ATTN_OPTION_PER_BATCH, .offset = {AT(key_lengths)}, .default_text = "none",
     .help = "valid keys per batch, at global positions: keys at or past the length are padding",
     .group = "masks",
     .flags = {{"--key-lengths", "LENS.npy", "integers [B]: keys at or past the length are padding (hidden)"}},
     .python = "key_lengths", .python_default = "None", .ranks = ATTN_RANKS_AGREE},
    {.name = "query_start", .kind = ATTN_OPTION_POSITION, .offset = {AT(query_start)}, .default_text = "0",
     .help = "the position of query row 0 in a longer sequence (chunked prefill, a shard)",
     .python = "query_start", .python_default = "0", .ranks = ATTN_RANKS_PLACED},
    {.name = "key_start", .kind = ATTN_OPTION_POSITION, .offset = {AT(key_start)}, .default_text = "0",
     .help = "the position of key row 0 in a longer sequence",
     .python = "key_start", .python_default = "0", .ranks = ATTN_RANKS_PLACED},
    {.name = "total_len_q", .kind = ATTN_OPTION_POSITION, .offset = {AT(total_len_q)},
     .default_text = "this call's L", .help = "the whole sequence's query length (0 = this call's L)",
     .python = "total_len_q", .python_default = "0", .ranks = ATTN_RANKS_PLACED},
    {.name = "total_len_kv", .kind = ATTN_OPTION_POSITION, .offset = {AT(total_len_kv)},
     .default_text = "this call's S", .help = "the whole sequence's key length (0 = this call's S)",
     .python = "total_len_kv", .python_default = "0", .ranks = ATTN_RANKS_PLACED},
    {.name = "mask", .kind = ATTN_OPTION_BOOL_TABLE, .offset = {AT(mask), AT(mask_shape)}, .default_text = "none",
     .help = "boolean [B|1, Hq|1, L|1, S|1], nonzero = may attend", .group = "masks",
     .flags = {{"--mask", "M.npy",
                "bool/int [L,S], [H,L,S] or [B,H,L,S] (size-1 dims broadcast):\n"
                "NONZERO = MAY ATTEND (PyTorch SDPA; nn.MultiheadAttention is the opposite)"}},
     .python = "mask", .python_default = "None", .ranks = ATTN_RANKS_AGREE},
    {.name = "bias", .kind = ATTN_OPTION_FLOAT_TABLE, .offset = {AT(bias), AT(bias_shape)}, .default_text = "none",
     .help = "an additive score bias [B|1, Hq|1, L|1, S|1]; -inf hides a key", .group = "masks",
     .flags = {{"--bias", "B.npy", "float, same shapes: added to the scaled scores; -inf hides a key"}},
     .python = "bias", .python_default = "None", .ranks = ATTN_RANKS_AGREE},
    /* ---- the score stage (docs/logits.md), in the order it is applied */
    {.name = "softcap", .kind = ATTN_OPTION_FLOAT, .offset = {AT(softcap)}, .default_text = "off",
     .help = "logit soft-capping: scaled scores become cap * tanh(s / cap), before bias, ALiBi and masks",
     .min = 1e-30, .max = 1e30, .group = "score stage",
     .flags = {{"--softcap", "CAP",
                "logit soft-capping (Gemma 2): raw scaled scores become CAP*tanh(s/CAP),\n"
                "before --bias, ALiBi and the masks; CAP > 0"}},
     .python = "softcap", .python_default = "None", .ranks = ATTN_RANKS_REFUSED},
    {.name = "alibi_standard", .kind = ATTN_OPTION_SWITCH, .offset = {AT(alibi_standard)}, .default_text = "off",
     .help = "ALiBi with the paper's geometric slopes for Hq heads", .group = "score stage",
     .flags = {{"--alibi", NULL,
                "ALiBi with the paper's geometric slopes for Hq heads: each score gains\n"
                "slope_h * (j - i'), i' the query's position among the keys (as --causal\n"
                "places it; the lower-right alignment for a decode step)"}},
     .python = "alibi", .python_default = "None", .ranks = ATTN_RANKS_REFUSED},
    {.name = "alibi_slopes", .kind = ATTN_OPTION_PER_HEAD, .offset = {AT(alibi_slopes)}, .default_text = "none",
     .help = "ALiBi with these slopes, one per query head (not with alibi_standard)", .group = "score stage",
     .flags = {{"--alibi-slopes", "SLOPES.npy", "ALiBi with these slopes, float [Hq] (not with --alibi)"}},
     .python = "alibi", .python_default = "None", .ranks = ATTN_RANKS_REFUSED},
    {.name = "sinks", .kind = ATTN_OPTION_PER_HEAD, .offset = {AT(sinks)}, .default_text = "none",
     .help = "a sink logit per query head in each row's softmax (-inf = none for that head)",
     .group = "score stage",
     .flags = {{"--sinks", "SINKS.npy",
                "attention sinks (gpt-oss, StreamingLLM), float [Hq], natural log like\n"
                "the scores (-inf = no sink for that head): a logit in each row's\n"
                "softmax with no value, so weights sum to less than 1; lse includes it,\n"
                "and a row that sees no key gets output 0 and lse = its sink"}},
     .python = "sinks", .python_default = "None", .ranks = ATTN_RANKS_REFUSED},
    /* ---- computation */
    {.name = "kernel", .kind = ATTN_OPTION_CHOICE, .offset = {AT(kernel)}, .choices = kernels,
     .default_text = "auto", .help = "the kernel: auto (the fastest that supports the request), ref or flash",
     .group = "computation",
     .flags = {{"--kernel", "auto|ref|flash", "kernel (default auto: the fastest that supports the request)"}},
     .python = "kernel", .python_default = "'auto'", .ranks = ATTN_RANKS_AGREE},
    {.name = "threads", .kind = ATTN_OPTION_INT, .offset = {AT(threads)},
     .default_text = "$ATTN_NUM_THREADS, else OpenMP's default",
     .help = "threads; the results are the same bits for any count", .min = 1, .max = 4096,
     .group = "computation",
     .flags = {{"--threads", "N",
                "threads (default: $ATTN_NUM_THREADS, else all cores); the results\n"
                "are the same bits for any N"}},
     .python = "threads", .python_default = "None", .ranks = ATTN_RANKS_OWN},
    {.name = "precision", .kind = ATTN_OPTION_CHOICE, .offset = {AT(precision)}, .choices = precisions,
     .default_text = "exact",
     .help = "float16/bfloat16 inputs: exact widens to float32, fast uses native bfloat16 dot products "
             "where the CPU has them",
     .group = "computation",
     .flags = {{"--precision", "exact|fast",
                "float16/bfloat16 inputs: exact (default) widens each element to\n"
                "float32 first; fast uses native bfloat16 dot products (AMX-BF16,\n"
                "else AVX512-BF16) on prefill where the CPU has them, else exact\n"
                "(the kernel is then named flash-bf16); accumulation is float32\n"
                "either way (accuracy: docs/kernels.md)"}},
     .python = "precision", .python_default = "'exact'", .ranks = ATTN_RANKS_OWN},
    /* ---- for embedders: no flag, no keyword */
    {.name = "workspace", .kind = ATTN_OPTION_BUFFER, .offset = {AT(workspace), AT(workspace_size)},
     .default_text = "the library allocates its own",
     .help = "caller-owned scratch of at least attn_sdpa_workspace_size bytes", .ranks = ATTN_RANKS_KEPT},
    {.name = "progress", .kind = ATTN_OPTION_CALLBACK, .offset = {AT(progress), AT(progress_user)},
     .default_text = "none", .help = "called with the fraction done, for a progress line",
     .ranks = ATTN_RANKS_OWN},
};

#undef AT

const attn_sdpa_option_info *attn_sdpa_option(int index) {
    const int count = (int)(sizeof table / sizeof table[0]);
    return index >= 0 && index < count ? &table[index] : NULL;
}
