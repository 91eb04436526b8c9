/*
 * cli.h — what the subcommands of the attn program share.  The CLI uses only
 * the public header attn.h, so it doubles as an example of the API.
 *
 * Exit status of every subcommand: 0 success, 1 data error (a file that
 * cannot be read, a wrong shape), 2 usage error (an unknown flag, a
 * non-numeric value).  Every message names the file or flag at fault.
 */
#ifndef ATTN_CLI_H
#define ATTN_CLI_H

#include "attn.h"
#include "attn_chapter.h"
#include "attn_decoder.h"
#include "attn_interp.h"
#include "attn_io.h"
#include "attn_machine.h"
#include "attn_viz.h"
#include "cli_args.h"

#include <stdbool.h>
#include <stdio.h>

enum { CLI_OK = 0, CLI_DATA_ERROR = 1, CLI_USAGE_ERROR = 2 };

#if defined(__GNUC__)
#define CLI_PRINTF(fmt_index, first_arg) __attribute__((format(printf, fmt_index, first_arg)))
#else
#define CLI_PRINTF(fmt_index, first_arg)
#endif

/* Subcommands: each receives argv with argv[0] = its own name. */
int cmd_demo(int argc, char **argv);
int cmd_sdpa(int argc, char **argv);
int cmd_decode(int argc, char **argv);
int cmd_mha(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_map(int argc, char **argv);
int cmd_report(int argc, char **argv);
/* attn demo --figures DIR: the chapter's Figures 1-3 as DIR/figureN.png and .svg
 * (tools/demo_figures.c); lang "en" or "zh".  Returns CLI_OK or CLI_DATA_ERROR. */
int demo_write_figures(const char *dir, const char *lang);
int cmd_ring(int argc, char **argv);
int cmd_trace(int argc, char **argv);
int cmd_paths(int argc, char **argv);
int cmd_nullspace(int argc, char **argv);
int cmd_train(int argc, char **argv);
/* attn tokenize, attn detokenize: a GGUF model's tokenizer (cmd_tokenize.c). */
int cmd_tokenize(int argc, char **argv);
int cmd_detokenize(int argc, char **argv);
int cmd_model(int argc, char **argv);
/* The flags every model command shares (cli_decoder.c): --weights
 * stored|f32 and --precision exact|fast, into attn_decoder_options.  A
 * command lists cli_decoder_flags among its tables, prints
 * cli_decoder_help, and hands each id to cli_decoder_take: 1 when it was
 * one of them (and valid), 0 when not, -1 after printing a usage error. */
enum { CLI_ID_WEIGHTS = CLI_SHARED_IDS + 50, CLI_ID_DECODER_PRECISION };
extern const cli_flag cli_decoder_flags[];
extern const char cli_decoder_help[];
int cli_decoder_take(attn_decoder_options *o, const char *cmd, int id, const char *value);
/* The process's peak resident memory so far, in bytes (getrusage's
 * ru_maxrss: KiB on Linux), or -1. */
double cli_peak_rss_bytes(void);
/* The decoder's architectures, as its table lists them ("qwen2, qwen3,
 * gemma3, llama"), into buf for the model commands' help (cmd_model.c). */
const char *cli_model_architectures(char *buf, size_t size);
/* The model's context limit for a run of n_prompt tokens and up to n_new
 * generated ones (attn_decoder_check_context): beyond it, a data error
 * naming the numbers and --allow-beyond-context, or with allow a warning.
 * Returns CLI_OK or CLI_DATA_ERROR.  generate, chat, trace and model run
 * call it; the flag's help line is CLI_ALLOW_BEYOND_CONTEXT_HELP. */
int cli_check_context(const char *cmd, const attn_decoder_config *cfg, int64_t n_prompt, int64_t n_new, bool allow);
#define CLI_ALLOW_BEYOND_CONTEXT_HELP                                                              \
    "  --allow-beyond-context\n"                                                                   \
    "                    run past the model's context length (attn model info shows it, with the\n" \
    "                    RoPE scaling that extends it): refused without this flag, warned with it\n"
int cmd_model_trace(int argc, char **argv);
int cmd_npz(int argc, char **argv);
/* attn model generate (tools/cmd_generate.c): argv[0] is "generate". */
int cmd_model_generate(int argc, char **argv);
/* attn model chat (tools/cmd_chat.c): argv[0] is "chat". */
int cmd_model_chat(int argc, char **argv);
/* attn model bench (tools/cmd_model_bench.c): argv[0] is "bench". */
int cmd_model_bench(int argc, char **argv);

/* "attn CMD: message" plus a pointer to --help on stderr; returns 2. */
int cli_usage_error(const char *cmd, const char *fmt, ...) CLI_PRINTF(2, 3);
/* "attn CMD: message" on stderr; returns 1. */
int cli_data_error(const char *cmd, const char *fmt, ...) CLI_PRINTF(2, 3);

/* Strict number parsing of a flag's value: the whole text must be a number
 * in [min, max].  On failure prints a usage error naming flag and returns false. */
bool cli_parse_int(const char *cmd, const char *flag, const char *text, int64_t min,
                   int64_t max, int64_t *out);
/* A KV cache's storage by its flag name: f32, f16, bf16, q8_0 or fp8
 * (fp8_e4m3); false after a usage error naming cmd and flag.  The names
 * of the choices, for help texts: CLI_KV_DTYPES. */
#define CLI_KV_DTYPES "f32|f16|bf16|q8_0|fp8"
bool cli_parse_kv_dtype(const char *cmd, const char *flag, const char *text, attn_dtype *dtype);
/* The flag name of a KV dtype ("f32", "q8_0", "fp8", ...). */
const char *cli_kv_dtype_name(attn_dtype dtype);
/* A model cache's storage: one name for K and V, or K:V ("bf16:q8_0",
 * llama.cpp's -ctk / -ctv in one flag): *k, and *v 0 when it is K's
 * (attn_decoder_session_options.kv_value_dtype).  CLI_KV_CACHE_DTYPES for
 * help texts; cli_kv_cache_name prints it back ("bf16:q8_0", "f16"). */
#define CLI_KV_CACHE_DTYPES CLI_KV_DTYPES "[:" CLI_KV_DTYPES "]"
bool cli_parse_kv_cache(const char *cmd, const char *flag, const char *text, attn_dtype *k, attn_dtype *v);
const char *cli_kv_cache_name(attn_dtype k, attn_dtype v, char *buf, size_t size);
bool cli_parse_float(const char *cmd, const char *flag, const char *text, double min,
                     double max, double *out);

/* "attn CMD: warning: message" on stderr. */
void cli_warning(const char *cmd, const char *fmt, ...) CLI_PRINTF(2, 3);
/* Where the three above write (NULL: stderr); the fuzzer silences them. */
void cli_set_message_stream(FILE *f);

/* Loads a float array (float32, or float64/float16 converted) and refuses
 * NaN/Inf unless allow_neg_inf is set, in which case -inf is allowed (a bias)
 * but NaN and +inf are not.  Prints a data error naming flag and path and
 * returns false on any problem. */
bool cli_load_f32(const char *cmd, const char *flag, const char *path, bool allow_neg_inf,
                  attn_array *out);
/* The same, but float16 and bfloat16 arrays are kept as stored (the
 * kernels compute on them directly); other floats become float32. */
bool cli_load_float(const char *cmd, const char *flag, const char *path, bool allow_neg_inf, bool keep_half,
                    attn_array *out);
/* Loads any integer/bool array converted to dtype (ATTN_I64 or ATTN_BOOL). */
bool cli_load_ints(const char *cmd, const char *flag, const char *path, attn_dtype dtype,
                   attn_array *out);
/* Saves float32 data (never half-written: attn_io.h's output files);
 * prints a data error naming path on failure. */
bool cli_save_f32(const char *cmd, const char *path, int ndim, const int64_t *shape,
                  const float *data);

/* Refuses, before any work is done, a run whose outputs would destroy its
 * inputs or each other: an output that is the same file as an input (by
 * device and inode, so symbolic and hard links count), and two outputs that
 * name the same file (only the last would survive).  Devices (-o /dev/null
 * twice) are exempt.  NULL paths are skipped.  Returns CLI_OK or prints a
 * usage error naming both and returns CLI_USAGE_ERROR. */
int cli_check_paths(const char *cmd, const char *const *inputs, int n_inputs,
                    const char *const *outputs, int n_outputs);

/* An output buffer the kernel fills: uninitialised and 64-byte aligned
 * (a cache line, a 512-bit vector), as the .npy loader's buffers.  free()
 * releases it; NULL when out of memory. */
void *cli_alloc_large(size_t bytes);
/* "[3, 2]" style text of a shape, for messages; returns buf. */
const char *cli_shape_str(const attn_array *a, char *buf, size_t size);


/* ------------------------------------------------------------------------
 * The option families the attention subcommands share (cli_attention.c).
 * A command lists the families it takes in its cli_spec, prints the help of
 * the same families, and hands every id to cli_attention_take:
 *   masks        --causal | --causal-lower-right  --align top-left|lower-right
 *                --window LEFT,RIGHT  --key-lengths F  --mask F  --bias F
 *   computation  --scale S  --kernel auto|ref|flash  --threads N  --allow-slow
 *                --precision exact|fast
 *   layout       --layout BLHD|BHLD   (how q, k, v and their outputs are stored)
 *   logits       --softcap F  --alibi | --alibi-slopes F  --sinks F   (the score
 *                stage, docs/logits.md: sdpa and mha; ring refuses it)
 * The masks, computation and logits families are the groups of libattn's
 * table of attn_sdpa_options (attn_sdpa_option): their flags, ids and
 * --help lines are made from it by cli_attention_build (which
 * cli_args_begin calls), a new option's flag with them.  --allow-slow,
 * --layout and --quiet are the command line's own.
 */
enum {
    CLI_ID_ALLOW_SLOW = CLI_SHARED_IDS, CLI_ID_LAYOUT, CLI_ID_QUIET,
    CLI_ID_MODULE_FIRST = CLI_SHARED_IDS + 100, /* cli_interp.h's module flags   */
    CLI_ID_OPTION_FIRST = CLI_SHARED_IDS + 200  /* the table's: two per option */
};
/* The reference kernel's budget: about a minute at its few GFLOP/s. */
#define CLI_REF_BUDGET_GFLOP 100
#define CLI_REF_BUDGET_TEXT "100 GFLOP"

/* The families' flag tables and --help texts, filled by cli_attention_build. */
extern cli_flag cli_mask_flags[], cli_compute_flags[], cli_logits_flags[];
extern char cli_mask_help[], cli_compute_help[], cli_logits_help[];
extern const cli_flag cli_layout_flags[];
extern const char cli_layout_help[];
/* --quiet: no line on stderr saying what was written (commands that write files). */
extern const cli_flag cli_quiet_flags[];
/* Makes the families from the table; once (later calls return at once). */
void cli_attention_build(void);
/* The id cli_args_next returns for a table flag ("--scale"), 0 for another. */
int cli_attention_id(const char *flag);

/* How a file stores q, k, v (and how their outputs are written):
 * BLHD [B, L, H, D] (attn's own, FlashAttention's), BHLD [B, H, L, D]
 * (PyTorch's scaled_dot_product_attention).  3-D files drop B. */
typedef enum { CLI_LAYOUT_BLHD = 0, CLI_LAYOUT_BHLD = 1 } cli_layout;

typedef struct cli_attention_options {
    attn_sdpa_options opt;
    const char *key_lengths_path, *mask_path, *bias_path;
    attn_array key_lengths, mask, bias; /* owned once loaded */
    cli_layout layout;
    bool layout_given; /* --layout was typed: no guessing about it */
    bool align_given;  /* --align was typed: a causal flag must agree with it */
    bool allow_slow;   /* --allow-slow: no budget for the reference kernel */
    const char *sinks_path, *alibi_slopes_path; /* --sinks, --alibi-slopes    */
    attn_array sinks, alibi_slopes;              /* owned once loaded          */
} cli_attention_options;

#define CLI_ATTENTION_OPTIONS_INIT {.opt = ATTN_SDPA_OPTIONS_INIT}

/* Applies a shared flag: 1 when id is one (and it was valid), 0 when it is
 * not a shared id, -1 after printing a usage error. */
int cli_attention_take(cli_attention_options *o, const cli_args *a, int id, const char *value);
/* True when any mask or computation option but --allow-slow was given (for
 * commands whose other inputs they do not apply to). */
bool cli_attention_given(const cli_args *a);

/* Loads q, k, v (or a gradient shaped like them) of rank 2 [P, W], 3 [P, H, W]
 * or 4 [B, P, H, W] (BHLD: [H, P, W], [B, H, P, W]) as a contiguous
 * [B, P, H, W] tensor viewing a->data, which holds it in that order (a's
 * shape stays the file's, for messages and for the outputs).  Returns
 * CLI_OK or CLI_DATA_ERROR (printed). */
int cli_load_qkv_stored(const char *cmd, const char *flag, const char *path, cli_layout layout, attn_array *a,
                        attn_tensor *t);
/* cli_load_qkv_stored keeps a float16 or bfloat16 file as stored (the
 * tensor carries its dtype); cli_load_qkv makes every file float32. */
int cli_load_qkv(const char *cmd, const char *flag, const char *path, cli_layout layout, attn_array *a,
                 attn_tensor *t);
/* Warns when q and k, read as BLHD, look like PyTorch's BHLD (more heads
 * than positions in both, or more than 256 heads), unless --layout was given. */
void cli_warn_if_transposed(const char *cmd, const cli_attention_options *o, const attn_tensor *q,
                            const char *q_path, const attn_tensor *k, const char *k_path);
/* The file shape of an output stored like q/k/v: [B, P, H, W] in the
 * layout, dropping the leading dims a rank-`rank` input leaves out. */
void cli_qkv_file_shape(cli_layout layout, int rank, const int64_t blhd[4], int64_t *shape);
/* In place: data [B, P, H, W] -> the layout's order (a no-op for BLHD),
 * and back.  Return false (printed) when out of memory. */
bool cli_qkv_to_layout(const char *cmd, cli_layout layout, float *data, const int64_t blhd[4]);
bool cli_qkv_from_layout(const char *cmd, cli_layout layout, float *data, const int64_t blhd[4]);
/* cli_qkv_to_layout for data of any tensor dtype. */
bool cli_qkv_to_layout_of(const char *cmd, cli_layout layout, void *data, attn_dtype dtype, const int64_t blhd[4]);
/* The position axis of a q/k/v file of this rank (2..4) in the layout, -1
 * for another rank. */
int cli_qkv_position_axis(cli_layout layout, int rank);

/* The first flag given (in the table's order) of an option ring attention
 * does not support (attn_option_ranks ATTN_RANKS_REFUSED: the score
 * stage's), or NULL: for attn ring, which refuses them with the reason. */
const char *cli_ring_refused_given(const cli_args *a);

/* The attention options read from files (--key-lengths, --mask, --bias,
 * --sinks, --alibi-slopes: the table's rows this attn reads from a file),
 * in the table's order, into files[0 .. max): each one's row, first flag and
 * path (NULL when not given).  Returns how many: the same count and order
 * for every o, so that ring ranks compare them slot by slot. */
typedef struct cli_option_file {
    const attn_sdpa_option_info *row;
    const char *flag, *path;
} cli_option_file;
int cli_attention_files(const cli_attention_options *o, cli_option_file *files, int max);

/* Loads --key-lengths, --mask, --bias, --sinks and --alibi-slopes and checks them against the
 * problem's sizes; fills o->opt; warns about a causal alignment that is
 * probably not meant (--causal with L < S: a decode step); on a terminal,
 * attaches the progress line (cli_progress_attach).  Returns CLI_OK or
 * CLI_DATA_ERROR (printed). */
int cli_load_attention_inputs(const char *cmd, cli_attention_options *o, int64_t batch,
                              int64_t heads_q, int64_t len_q, int64_t len_kv);
/* Refuses work the machine cannot do in reasonable time or memory: the
 * reference kernel beyond its budget for `passes` forward calls' worth of
 * work (a backward counts 2.5; unless --allow-slow), and outputs larger
 * than the machine's memory (bytes).  CLI_OK or CLI_DATA_ERROR (printed). */
int cli_check_budget(const char *cmd, const cli_attention_options *o, const attn_tensor *q,
                     const attn_tensor *k, const attn_tensor *v, double passes, double output_bytes);
/* The same for `runs` traced passes (trace, paths, nullspace, report),
 * which keep two [B, Hq, L, S] tables each. */
int cli_check_traced_budget(const char *cmd, const cli_attention_options *o, int64_t B, int64_t Hq, int64_t Hkv,
                            int64_t L, int64_t S, int64_t D, int64_t Dv, int runs);
void cli_attention_options_free(cli_attention_options *o);
/* On a terminal, a progress line on stderr for the attention calls made
 * with o->opt (after a second; cleared at the end).  Elsewhere nothing. */
void cli_progress_attach(cli_attention_options *o, const char *cmd);

/* Saves each (path, array) pair that has a path, as a set: every file is
 * written in full to its temporary file first, and only when all of them
 * are complete are they renamed over their targets.  On a failure before
 * that, no target is touched (a previous good file stays as it was); the
 * message names the file at fault. */
typedef struct cli_output {
    const char *path;
    int ndim;
    int64_t shape[4];
    const void *data;
    attn_dtype dtype; /* of data: ATTN_F32 (0, the default), ATTN_F16 or ATTN_BF16 */
} cli_output;
bool cli_save_outputs(const char *cmd, const cli_output *outputs, int count);
/* "attn CMD: wrote O.npy [3, 2], W.npy [3, 3] (how)" on stderr — stderr, so
 * that -o /dev/stdout stays a clean .npy stream, and nothing when stderr is
 * itself one of the outputs.  how may be NULL. */
void cli_print_written(const char *cmd, const cli_output *outputs, int count, const char *how);
/* A monotonic clock in seconds, and "flash kernel on avx512, 2 threads,
 * 0.012 s" into buf (kernel as attn_sdpa_kernel_name gives it). */
double cli_seconds(void);
void cli_describe_run(char *buf, size_t size, const char *kernel, int threads, double seconds);

#endif /* ATTN_CLI_H */
