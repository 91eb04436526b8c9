/*
 * test_cli_matrix.c — the attn program's test matrix: every subcommand with
 * every option family, one table row per case, so that no path of the
 * command line is trusted untested.
 *
 * A row is the command line as a user types it, with {name} placeholders
 * for the files the test writes or expects; the exit status; words the
 * message must contain (errors: the flag or file named and the problem) and
 * words it must not (a warning that must stay quiet); the inputs to generate
 * (sizes, dtypes, masks); and the check of what the program wrote:
 *   sdpa, mha    output, weights and lse against the independent oracle
 *                (tests/support/oracle.h), gradients against the library's
 *                reference backward (itself checked by finite differences)
 *   trace        every hook file against the oracle, patches applied here
 *   paths        the JSON against the oracle's five runs and their interaction
 *   nullspace    the moved row: w' >= 0, the same sum, hidden keys at 0, and
 *                w'·V against w·V recomputed here; the printed check line
 *   map, report, the pictures and pages by their magic bytes
 *   demo
 * A row that fails must leave none of its outputs (nor a temporary file).
 * A row's twin is a second command whose outputs must equal the row's bit
 * for bit, after the change of layout it makes: --threads 1 against 2, BHLD
 * files against BLHD ones, torch weights against rows.
 * Then every subcommand's --help against its --list-options, both ways.
 *
 * Placeholders: {q} is q.npy in the row's folder, {map.png} map.png,
 * {hooks/} the folder hooks.  The names make_input knows are inputs, written
 * before the run; every other placeholder is an output.  The oracle's mask
 * options are read from the row's own command line (parse_flags), as a user's
 * would be from the documentation.
 */
#include "cli_files.h"
#include "tolerances.h"

#include <ctype.h>
#include <dirent.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

/* ------------------------------------------------------------- the rows */

/* dtypes of generated files (FT_DEFAULT: float32 for floats, bool for a
 * mask, int64 for key lengths) */
enum ftype { FT_DEFAULT, FT_F32, FT_F64, FT_F16, FT_BF16, FT_BOOL, FT_U8, FT_I32, FT_I64 };

/* A --mask or --bias file. */
typedef struct mask_spec {
    int rank;          /* 0: none; 2..4, or 1 and 5 for files to be refused */
    int64_t shape[4];  /* [B|1, H|1, L|1, S|1]: a file of rank r holds the last r (rank 5: [1, B, H, L, S]) */
    enum ftype type;
    int hide_row;      /* r > 0: query row r - 1 hidden for every batch and head */
    int poison;        /* a bias whose element 0 is NaN (1) or +inf (2) */
} mask_spec;

/* The inputs a row's placeholders name. */
typedef struct fixture {
    int64_t B, L, S, Hq, Hkv, D, Dv; /* attention sizes (0: 1); a module's heads, kv heads, head widths */
    int rank;                        /* q, k, v files 2..4 (0: 4); -x and --context 2 or 3 (0: 3) */
    enum ftype qkv_type;             /* q, k, v (and their changed twins, and do) */
    enum ftype module_type;          /* x, context and the weights */
    const int64_t *lens;             /* --key-lengths, B of them (n_lens if given) */
    int n_lens;
    enum ftype lens_type;
    mask_spec mask, bias;
    int64_t dm, dc, dout;            /* module (dm > 0): d_model, d_context (0: self-attention), W_O's d_out (0: 3) */
    const char *weights_flags;       /* {attnw}: the mask flags its weights are computed with (NULL: the row's) */
} fixture;

enum check { CHECK_NONE, CHECK_SDPA, CHECK_MHA, CHECK_TRACE, CHECK_PATHS, CHECK_NULLSPACE, CHECK_FILES };

typedef struct row {
    const char *args;     /* after "attn", placeholders in braces */
    int status;           /* 0, 1 or 2 */
    const char *says;     /* '|'-separated words the output must contain */
    const char *never;    /* '|'-separated words it must not contain */
    enum check check;
    fixture f;
    const char *twin;     /* a command whose outputs equal this one's bit for bit */
    const char *files;    /* ' '-separated further files the run writes (pictures), checked by magic */
    const char *in_file, *file_says; /* the output file in_file holds the text file_says */
    const char *count_of; /* the output holds this text exactly `count` times */
    int count;
    bool masked_rows;     /* the problem has fully masked rows (asserted, then checked exactly) */
} row;

#define DIMS(b, l, s, hq, hkv, d, dv) .B = b, .L = l, .S = s, .Hq = hq, .Hkv = hkv, .D = d, .Dv = dv
#define LENS(...) .lens = (const int64_t[]){__VA_ARGS__}, .n_lens = sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)
#define MASK(r, b, h, l, s) .mask = {r, {b, h, l, s}, FT_DEFAULT, 0, 0}
#define MASK_T(r, b, h, l, s, type, hide_row) .mask = {r, {b, h, l, s}, type, hide_row, 0}
#define BIAS(r, b, h, l, s) .bias = {r, {b, h, l, s}, FT_DEFAULT, 0, 0}
#define BIAS_T(r, b, h, l, s, type, hide_row) .bias = {r, {b, h, l, s}, type, hide_row, 0}
#define BIAS_POISON(r, b, h, l, s, poison) .bias = {r, {b, h, l, s}, FT_DEFAULT, 0, poison}

#define SDPA_IN "sdpa -q {q} -k {k} -v {v}"
#define SDPA_ALL SDPA_IN " -o {o} --weights {w} --lse {lse}"
#define SDPA_GRADS " --grad-out {do} --dq {dq} --dk {dk} --dv {dv}"
#define MHA_IN "mha -x {x} --wq {wq} --wk {wk} --wv {wv}"
#define MHA_GRADS " --grad-out {mdo} --dx {dx} --dwq {dwq} --dwk {dwk} --dwv {dwv} --dbq {dbq} --dbk {dbk} --dbv {dbv} --dbo {dbo}"
#define TRACE_IN "trace -q {q} -k {k} -v {v}"
#define PATHS_IN "paths --base-q {q} --base-k {k} --base-v {v} --changed-k {k2}"
#define NULL_IN "nullspace -q {q} -k {k} -v {v} --query 1"
#define MAP_IN "map --weights {attnw}"
#define REPORT_IN "report -q {q} -k {k} -v {v}"
#define INT64_MAX_TEXT "9223372036854775807"

/* sdpa: every mask, computation and output option against the oracle. */
static const row sdpa_rows[] = {
    /* shapes: GQA ratios 1, 2, 8; cross-attention with Dv != D; 1s everywhere */
    {SDPA_ALL, .check = CHECK_SDPA, .f = {DIMS(2, 5, 7, 4, 2, 3, 2)}},
    {SDPA_ALL, .check = CHECK_SDPA, .f = {DIMS(1, 4, 6, 8, 1, 4, 3)}},
    {SDPA_ALL, .check = CHECK_SDPA, .f = {DIMS(3, 3, 3, 2, 2, 5, 5)}},
    {SDPA_ALL, .check = CHECK_SDPA, .f = {DIMS(2, 1, 6, 2, 1, 3, 4)}},                   /* L = 1 */
    {SDPA_ALL, .check = CHECK_SDPA, .f = {DIMS(2, 5, 1, 2, 1, 3, 4)}},                   /* S = 1 */
    {SDPA_ALL, .check = CHECK_SDPA, .f = {DIMS(2, 4, 5, 1, 1, 3, 2)}},                   /* H = 1 */
    {SDPA_ALL, .check = CHECK_SDPA, .f = {DIMS(1, 4, 5, 2, 1, 1, 1)}},                   /* D = Dv = 1 */
    {SDPA_ALL, .check = CHECK_SDPA, .f = {DIMS(1, 1, 1, 1, 1, 1, 1)}},                   /* all 1 */
    {SDPA_ALL SDPA_GRADS, .check = CHECK_SDPA, .f = {DIMS(1, 3, 4, 2, 1, 1024, 5)}},     /* huge D */
    /* ranks: 2-D [L, D] and 3-D [L, H, D]: outputs drop the same dims */
    {SDPA_ALL SDPA_GRADS, .check = CHECK_SDPA, .f = {DIMS(1, 4, 6, 1, 1, 3, 2), .rank = 2}},
    {SDPA_ALL SDPA_GRADS, .check = CHECK_SDPA, .f = {DIMS(1, 4, 6, 4, 2, 3, 2), .rank = 3}},
    /* causal in both alignments, and the guards about them */
    {SDPA_ALL " --causal", .check = CHECK_SDPA, .f = {DIMS(2, 6, 6, 2, 1, 3, 3)}, .never = "warning"},
    {SDPA_ALL " --causal", .check = CHECK_SDPA, .f = {DIMS(1, 3, 7, 2, 1, 3, 3)},
     .says = "warning|--causal aligns the diagonal top-left|--causal-lower-right"},
    {SDPA_ALL " --causal", .check = CHECK_SDPA, .f = {DIMS(1, 3, 4, 2, 1, 3, 3)}, .says = "warning|with 3 queries and 4 keys|not the 1 key before it"},
    {SDPA_ALL " --causal-lower-right", .check = CHECK_SDPA, .f = {DIMS(2, 7, 3, 2, 2, 3, 2)},
     .says = "warning|--causal-lower-right with 7 queries and 3 keys|first 4 queries see no key", .masked_rows = true},
    {SDPA_ALL " --causal-lower-right" SDPA_GRADS " --kernel ref", .check = CHECK_SDPA, .f = {DIMS(1, 6, 2, 2, 1, 3, 2)},
     .says = "warning", .masked_rows = true},
    {SDPA_ALL " --causal-lower-right", .check = CHECK_SDPA, .f = {DIMS(1, 1, 9, 4, 2, 3, 3)}, .never = "warning"},
    {SDPA_ALL " --causal --causal-lower-right", 2, .says = "give only one of --causal and --causal-lower-right",
     .f = {DIMS(1, 3, 3, 1, 1, 2, 2)}},
    /* windows, at their extremes */
    {SDPA_ALL " --window 0,0", .check = CHECK_SDPA, .f = {DIMS(1, 5, 5, 2, 1, 3, 2)}},
    {SDPA_ALL " --window 1,2 --align lower-right", .check = CHECK_SDPA, .f = {DIMS(2, 4, 7, 2, 1, 3, 2)}},
    {SDPA_ALL " --window 2,0 --causal", .check = CHECK_SDPA, .f = {DIMS(1, 6, 6, 2, 1, 3, 2)}},
    {SDPA_ALL " --window -1,-1", .check = CHECK_SDPA, .f = {DIMS(1, 4, 5, 2, 1, 3, 2)}},
    {SDPA_ALL " --window -1,0 --causal-lower-right", .check = CHECK_SDPA, .f = {DIMS(1, 3, 6, 2, 1, 3, 2)}},
    {SDPA_ALL " --window 0,-1 --align lower-right", .check = CHECK_SDPA, .f = {DIMS(1, 6, 3, 2, 1, 3, 2)}},
    {SDPA_ALL " --window -1,0 --align lower-right", .check = CHECK_SDPA, .f = {DIMS(1, 6, 3, 2, 1, 3, 2)}, .masked_rows = true},
    {SDPA_ALL " --window " INT64_MAX_TEXT "," INT64_MAX_TEXT, .check = CHECK_SDPA, .f = {DIMS(1, 4, 5, 2, 1, 3, 2)}},
    {SDPA_ALL " --window 9223372036854775806,0 --causal-lower-right", .check = CHECK_SDPA, .f = {DIMS(1, 7, 3, 2, 1, 3, 2)},
     .masked_rows = true},
    {SDPA_ALL " --window 0," INT64_MAX_TEXT " --align lower-right", .check = CHECK_SDPA, .f = {DIMS(2, 3, 5, 1, 1, 2, 2)}},
    {SDPA_ALL " --window 9223372036854775808,0", 2, .says = "--window LEFT|integer|9223372036854775808", .f = {DIMS(1, 3, 3, 1, 1, 2, 2)}},
    {SDPA_ALL " --window -2,0", 2, .says = "--window LEFT|between -1 and", .f = {DIMS(1, 3, 3, 1, 1, 2, 2)}},
    {SDPA_ALL " --window 3", 2, .says = "--window expects LEFT,RIGHT|'3'", .f = {DIMS(1, 3, 3, 1, 1, 2, 2)}},
    {SDPA_ALL " --window 1,x", 2, .says = "--window RIGHT|integer|'x'", .f = {DIMS(1, 3, 3, 1, 1, 2, 2)}},
    {SDPA_ALL " --align middle", 2, .says = "--align expects top-left or lower-right|'middle'", .f = {DIMS(1, 3, 3, 1, 1, 2, 2)}},
    /* --align is for a window without a causal flag: one that contradicts the flag is refused, in either order */
    {SDPA_ALL " --causal --align lower-right", 2, .says = "--causal aligns the diagonal top-left, and --align says lower-right",
     .f = {DIMS(1, 3, 4, 1, 1, 2, 2)}},
    {SDPA_ALL " --align lower-right --causal", 2, .says = "--causal aligns the diagonal top-left, and --align says lower-right",
     .f = {DIMS(1, 3, 4, 1, 1, 2, 2)}},
    {SDPA_ALL " --causal-lower-right --align top-left", 2, .says = "give --causal alone", .f = {DIMS(1, 3, 4, 1, 1, 2, 2)}},
    {SDPA_ALL " --align lower-right --causal-lower-right --window 1,0", .check = CHECK_SDPA, .f = {DIMS(1, 3, 5, 2, 1, 2, 2)}},
    /* key lengths: 0 (a fully masked batch), S, > S and < 0 refused, any integer dtype */
    {SDPA_ALL " --key-lengths {lens}", .check = CHECK_SDPA, .f = {DIMS(2, 4, 7, 2, 1, 3, 2), LENS(0, 7)}, .masked_rows = true},
    {SDPA_ALL SDPA_GRADS " --key-lengths {lens} --kernel ref", .check = CHECK_SDPA,
     .f = {DIMS(3, 4, 5, 2, 2, 3, 2), LENS(5, 0, 2), .lens_type = FT_I32}, .masked_rows = true},
    {SDPA_ALL " --key-lengths {lens}", .check = CHECK_SDPA, .f = {DIMS(2, 4, 5, 2, 1, 3, 2), LENS(3, 1), .lens_type = FT_U8}},
    {SDPA_ALL " --key-lengths {lens}", 1, .says = "--key-lengths|lens.npy|element 1 is 8, outside [0, S = 7]",
     .f = {DIMS(2, 4, 7, 2, 1, 3, 2), LENS(7, 8)}},
    {SDPA_ALL " --key-lengths {lens}", 1, .says = "--key-lengths|lens.npy|element 0 is -1", .f = {DIMS(1, 4, 7, 2, 1, 3, 2), LENS(-1)}},
    {SDPA_ALL " --key-lengths {lens}", 1, .says = "--key-lengths|lens.npy|expected [B] = [2]",
     .f = {DIMS(2, 4, 7, 2, 1, 3, 2), LENS(1, 2, 3)}},
    {SDPA_ALL " --key-lengths {lens}", 1, .says = "--key-lengths|lens.npy|float32|integer or bool",
     .f = {DIMS(1, 4, 7, 2, 1, 3, 2), LENS(3), .lens_type = FT_F32}},
    /* boolean masks 2-D, 3-D, 4-D with broadcast dims, any integer dtype; float refused */
    {SDPA_ALL " --mask {mask}", .check = CHECK_SDPA, .f = {DIMS(2, 4, 6, 2, 1, 3, 2), MASK(2, 1, 1, 4, 6)}},
    {SDPA_ALL " --mask {mask}", .check = CHECK_SDPA, .f = {DIMS(2, 4, 6, 4, 2, 3, 2), MASK_T(3, 1, 4, 1, 6, FT_U8, 0)}},
    {SDPA_ALL " --mask {mask}", .check = CHECK_SDPA, .f = {DIMS(2, 4, 6, 2, 1, 3, 2), MASK_T(4, 2, 1, 4, 1, FT_I32, 2)},
     .masked_rows = true},
    {SDPA_ALL " --mask {mask}", .check = CHECK_SDPA, .f = {DIMS(2, 5, 6, 2, 2, 3, 2), MASK_T(4, 2, 2, 5, 6, FT_I64, 3)},
     .masked_rows = true},
    {SDPA_ALL SDPA_GRADS " --mask {mask}", .check = CHECK_SDPA, .f = {DIMS(1, 4, 6, 2, 1, 3, 2), MASK_T(4, 1, 2, 4, 6, FT_BOOL, 2)},
     .masked_rows = true},
    {SDPA_ALL " --mask {mask}", 1, .says = "--mask|mask.npy|float32|integer or bool", .f = {DIMS(1, 4, 6, 2, 1, 3, 2), MASK_T(2, 1, 1, 4, 6, FT_F32, 0)}},
    {SDPA_ALL " --mask {mask}", 1, .says = "--mask|mask.npy|[4, 7]|S dimension must be 1 or 6", .f = {DIMS(1, 4, 6, 2, 1, 3, 2), MASK(2, 1, 1, 4, 7)}},
    {SDPA_ALL " --mask {mask}", 1, .says = "--mask|mask.npy|H dimension must be 1 or 2", .f = {DIMS(1, 4, 6, 2, 1, 3, 2), MASK(3, 1, 3, 4, 6)}},
    {SDPA_ALL " --mask {mask}", 1, .says = "--mask|mask.npy|[6]|expected [L, S]", .f = {DIMS(1, 4, 6, 2, 1, 3, 2), MASK(1, 1, 1, 1, 6)}},
    {SDPA_ALL " --mask {mask}", 1, .says = "--mask|mask.npy|expected [L, S]", .f = {DIMS(1, 4, 6, 2, 1, 3, 2), MASK(5, 1, 2, 4, 6)}},
    /* additive biases, -inf hiding keys (a whole row too); NaN and +inf refused */
    {SDPA_ALL " --bias {bias}", .check = CHECK_SDPA, .f = {DIMS(2, 4, 6, 2, 1, 3, 2), BIAS(2, 1, 1, 4, 6)}},
    {SDPA_ALL SDPA_GRADS " --bias {bias}", .check = CHECK_SDPA, .f = {DIMS(2, 4, 6, 2, 1, 3, 2), BIAS_T(4, 2, 1, 4, 6, FT_F32, 2)},
     .masked_rows = true},
    {SDPA_ALL " --bias {bias}", .check = CHECK_SDPA, .f = {DIMS(1, 4, 6, 4, 2, 3, 2), BIAS_T(3, 1, 4, 4, 6, FT_F64, 0)}},
    {SDPA_ALL " --bias {bias}", 1, .says = "--bias|bias.npy|element 0 is NaN", .f = {DIMS(1, 4, 6, 2, 1, 3, 2), BIAS_POISON(2, 1, 1, 4, 6, 1)}},
    {SDPA_ALL " --bias {bias}", 1, .says = "--bias|bias.npy|+inf", .f = {DIMS(1, 4, 6, 2, 1, 3, 2), BIAS_POISON(2, 1, 1, 4, 6, 2)}},
    {SDPA_ALL " --bias {bias}", 1, .says = "--bias|bias.npy|int32|not a float array", .f = {DIMS(1, 4, 6, 2, 1, 3, 2), BIAS_T(2, 1, 1, 4, 6, FT_I32, 0)}},
    {SDPA_ALL " --bias {bias}", 1, .says = "--bias|bias.npy|L dimension must be 1 or 4", .f = {DIMS(1, 4, 6, 2, 1, 3, 2), BIAS(2, 1, 1, 3, 6)}},
    /* every mask at once, with gradients */
    {SDPA_ALL SDPA_GRADS " --causal --window 2,1 --key-lengths {lens} --mask {mask} --bias {bias} --scale 0.3", .check = CHECK_SDPA,
     .f = {DIMS(2, 6, 6, 4, 2, 3, 2), LENS(6, 4), MASK(4, 2, 1, 6, 6), BIAS(4, 1, 4, 6, 6)}},
    /* computation: scale, kernels, threads (the same bits for 1 and 2) */
    {SDPA_ALL " --scale 0.25", .check = CHECK_SDPA, .f = {DIMS(1, 4, 5, 2, 1, 3, 2)}},
    {SDPA_ALL " --scale 3.5 --kernel ref", .check = CHECK_SDPA, .f = {DIMS(1, 4, 5, 2, 1, 3, 2)}},
    {SDPA_ALL " --kernel flash --causal", .check = CHECK_SDPA, .f = {DIMS(2, 5, 5, 2, 1, 3, 2)}},
    {SDPA_ALL " --kernel auto --causal-lower-right", .check = CHECK_SDPA, .f = {DIMS(1, 2, 9, 2, 1, 3, 2)}},
    {SDPA_ALL SDPA_GRADS " --threads 1 --causal --key-lengths {lens}", .check = CHECK_SDPA,
     .f = {DIMS(2, 37, 41, 4, 2, 8, 5), LENS(41, 17)},
     .twin = SDPA_ALL SDPA_GRADS " --threads 2 --causal --key-lengths {lens}"},
    {SDPA_ALL " --threads 1 --kernel ref --mask {mask}", .check = CHECK_SDPA, .f = {DIMS(2, 9, 11, 2, 1, 4, 3), MASK(4, 2, 2, 9, 11)},
     .twin = SDPA_ALL " --threads 2 --kernel ref --mask {mask}"},
    {SDPA_ALL " --scale 0", 2, .says = "--scale must be between", .f = {DIMS(1, 3, 3, 1, 1, 2, 2)}},
    {SDPA_ALL " --scale -1", 2, .says = "--scale must be between", .f = {DIMS(1, 3, 3, 1, 1, 2, 2)}},
    {SDPA_ALL " --scale nan", 2, .says = "--scale expects a finite number|'nan'", .f = {DIMS(1, 3, 3, 1, 1, 2, 2)}},
    {SDPA_ALL " --scale 1e31", 2, .says = "--scale must be between", .f = {DIMS(1, 3, 3, 1, 1, 2, 2)}},
    {SDPA_ALL " --kernel fast", 2, .says = "--kernel expects auto, ref or flash|'fast'", .f = {DIMS(1, 3, 3, 1, 1, 2, 2)}},
    {SDPA_ALL " --threads 0", 2, .says = "--threads must be between 1 and 4096", .f = {DIMS(1, 3, 3, 1, 1, 2, 2)}},
    {SDPA_ALL " --threads 4097", 2, .says = "--threads must be between 1 and 4096", .f = {DIMS(1, 3, 3, 1, 1, 2, 2)}},
    {SDPA_ALL " --threads two", 2, .says = "--threads expects an integer|'two'", .f = {DIMS(1, 3, 3, 1, 1, 2, 2)}},
    /* layouts: BHLD files give the BLHD run's outputs, transposed */
    {SDPA_ALL SDPA_GRADS " --layout BHLD --causal", .check = CHECK_SDPA, .f = {DIMS(2, 5, 7, 4, 2, 3, 2)},
     .twin = "sdpa -q {qb} -k {kb} -v {vb} -o {o} --weights {w} --lse {lse} --grad-out {dob} --dq {dq} --dk {dk} --dv {dv} --causal"},
    {SDPA_ALL SDPA_GRADS " --layout bhld", .check = CHECK_SDPA, .f = {DIMS(1, 5, 6, 2, 1, 3, 2), .rank = 3},
     .twin = "sdpa -q {qb} -k {kb} -v {vb} -o {o} --weights {w} --lse {lse} --grad-out {dob} --dq {dq} --dk {dk} --dv {dv}"},
    {SDPA_ALL " --layout BLHD", .check = CHECK_SDPA, .f = {DIMS(1, 2, 3, 8, 8, 4, 4)}, .never = "warning"},
    {SDPA_ALL " --layout HBLD", 2, .says = "--layout expects BLHD|BHLD|'HBLD'", .f = {DIMS(1, 3, 3, 1, 1, 2, 2)}},
    {SDPA_ALL " --layout BHLD", .check = CHECK_SDPA, .f = {DIMS(1, 4, 6, 1, 1, 3, 2), .rank = 2}}, /* 2-D: no heads to move */
    /* the transposed-shape guard: more heads than positions in q and k */
    {SDPA_ALL, .check = CHECK_SDPA, .f = {DIMS(1, 2, 3, 8, 8, 4, 4)},
     .says = "warning|-q|q.npy|2 positions and 8 heads|--layout BHLD"},
    /* a decode step (one query) against a cache of more positions than heads is not a transposed file */
    {SDPA_ALL, .check = CHECK_SDPA, .f = {DIMS(1, 1, 9, 8, 8, 4, 4)}, .never = "warning"},
    /* input dtypes: float64, float16 and bfloat16 converted; integers refused */
    {SDPA_ALL SDPA_GRADS, .check = CHECK_SDPA, .f = {DIMS(2, 4, 5, 2, 1, 3, 2), .qkv_type = FT_F64}},
    {SDPA_ALL, .check = CHECK_SDPA, .f = {DIMS(2, 4, 5, 2, 1, 3, 2), .qkv_type = FT_F16}},
    {SDPA_ALL " --causal", .check = CHECK_SDPA, .f = {DIMS(1, 4, 5, 4, 2, 3, 2), .qkv_type = FT_BF16, .rank = 3}},
    {SDPA_ALL, 1, .says = "-q|q.npy|dtype int32 is not a float array", .f = {DIMS(1, 4, 5, 2, 1, 3, 2), .qkv_type = FT_I32}},
    /* gradients: only some of them, without -o; and their usage errors */
    {SDPA_IN " --grad-out {do} --dv {dv} --window 1,1", .check = CHECK_SDPA, .f = {DIMS(2, 4, 5, 2, 1, 3, 2)}},
    {SDPA_IN " -o {o} --dq {dq}", 2, .says = "--dq, --dk and --dv need --grad-out", .f = {DIMS(1, 3, 3, 1, 1, 2, 2)}},
    {SDPA_IN " -o {o} --grad-out {do}", 2, .says = "--grad-out needs at least one of --dq, --dk, --dv", .f = {DIMS(1, 3, 3, 1, 1, 2, 2)}},
    {SDPA_IN " -o {o} --grad-out {v} --dq {dq}", 1, .says = "--grad-out|v.npy|shaped like the output O",
     .f = {DIMS(1, 3, 4, 2, 1, 2, 3)}},
    /* shape mismatches: named files and the problem */
    {SDPA_ALL, 1, .says = "q.npy|k.npy|multiple", .f = {DIMS(1, 3, 4, 3, 2, 2, 2)}},
    {"sdpa -q {q} -k {q} -v {v} -o {o}", 1, .says = "q.npy|v.npy", .f = {DIMS(1, 3, 4, 1, 1, 2, 2)}},
    {"sdpa -q {q} -k {k} -v {q} -o {o}", 1, .says = "k.npy|q.npy", .f = {DIMS(1, 3, 4, 1, 1, 2, 2), .rank = 2}},
    {"sdpa -q {q} -k {k} -v {missing.npy} -o {o} --weights {w}", 1, .says = "-v|missing.npy|No such file", .f = {DIMS(1, 3, 3, 1, 1, 2, 2)}},
    /* the parser: --flag=value, duplicates, did you mean, missing values */
    {SDPA_IN " -o {o} --weights={w} --lse={lse} --window=1,0 --scale=0.5 --kernel=flash --align=lower-right", .check = CHECK_SDPA,
     .f = {DIMS(1, 4, 6, 2, 1, 3, 2)}},
    {SDPA_IN " -o {o} -o {o2}", 2, .says = "-o is given twice", .f = {DIMS(1, 3, 3, 1, 1, 2, 2)}},
    {SDPA_ALL " --causal --causal", 2, .says = "--causal is given twice", .f = {DIMS(1, 3, 3, 1, 1, 2, 2)}},
    {SDPA_ALL " --scale 1 --scale=2", 2, .says = "--scale is given twice", .f = {DIMS(1, 3, 3, 1, 1, 2, 2)}},
    {SDPA_ALL " --casual", 2, .says = "unknown option '--casual'|did you mean --causal?", .f = {DIMS(1, 3, 3, 1, 1, 2, 2)}},
    {SDPA_IN " -o {o} --wieghts {w}", 2, .says = "unknown option '--wieghts'|did you mean --weights?", .f = {DIMS(1, 3, 3, 1, 1, 2, 2)}},
    {SDPA_ALL " --key-length {lens}", 2, .says = "did you mean --key-lengths?", .f = {DIMS(1, 3, 3, 1, 1, 2, 2), LENS(3)}},
    {SDPA_ALL " --frobnicate", 2, .says = "unknown option '--frobnicate'", .f = {DIMS(1, 3, 3, 1, 1, 2, 2)}, .never = "did you mean"},
    {SDPA_IN " -o={o}", 2, .says = "a short flag takes its value after a space", .f = {DIMS(1, 3, 3, 1, 1, 2, 2)}},
    {SDPA_ALL " --causal=1", 2, .says = "--causal takes no value", .f = {DIMS(1, 3, 3, 1, 1, 2, 2)}},
    {SDPA_IN " -o --weights {w}", 2, .says = "-o needs a value|the next argument is the option '--weights'", .f = {DIMS(1, 3, 3, 1, 1, 2, 2)}},
    {SDPA_ALL " --scale", 2, .says = "--scale needs a value", .f = {DIMS(1, 3, 3, 1, 1, 2, 2)}},
    {SDPA_ALL " stray", 2, .says = "unexpected argument 'stray'", .f = {DIMS(1, 3, 3, 1, 1, 2, 2)}},
    {"sdpa -k {k} -v {v} -o {o}", 2, .says = "missing -q Q.npy", .f = {DIMS(1, 3, 3, 1, 1, 2, 2)}},
    /* outputs: never over an input, never two at one name, never half a set */
    {SDPA_IN " -o {q}", 2, .says = "the output|q.npy|is the input", .f = {DIMS(1, 3, 3, 1, 1, 2, 2)}},
    {SDPA_IN " -o {o} --weights {o}", 2, .says = "two outputs name the same file", .f = {DIMS(1, 3, 3, 1, 1, 2, 2)}},
    {SDPA_IN " -o {o} --weights {missing/w.npy} --lse {lse}", 1, .says = "missing/w.npy", .f = {DIMS(1, 3, 3, 1, 1, 2, 2)}},
    /* the reference kernel's budget, refused before computing (small files, a large S) */
    {SDPA_IN " -o {o} --kernel ref", 1, .says = "reference kernel would need 275 GFLOP|budget of 100 GFLOP|--allow-slow",
     .f = {DIMS(1, 262144, 262144, 1, 1, 1, 1), .rank = 2}},
    {SDPA_IN " -o {o} --weights {w}", 1, .says = "--weights|more than this machine's", .f = {DIMS(1, 1048576, 1048576, 1, 1, 1, 1), .rank = 2}},
    /* a decode step early in a generation: fewer cached positions than heads is not "transposed" */
    {SDPA_IN " -o {o} --causal-lower-right", .check = CHECK_SDPA, .f = {DIMS(1, 1, 4, 8, 8, 3, 3)}, .never = "warning"},
    /* the reference kernel runs on one thread, whatever --threads says */
    {SDPA_IN " -o {o} --kernel ref --threads 2", .check = CHECK_SDPA, .f = {DIMS(1, 3, 3, 1, 1, 2, 2)},
     .says = "ref kernel, 1 thread,"},
};

/* mha: projections, heads, W_O, biases, cross-attention, every gradient flag. */
#define MHA_ALL_BIASES " --bq {bq} --bk {bk} --bv {bv} --bo {bo}"
#define MHA_DW_ALL " --grad-out {mdo} --dx {dx} --dwq {dwq} --dwk {dwk} --dwv {dwv} --dwo {dwo} --dbq {dbq} --dbk {dbk} --dbv {dbv} --dbo {dbo}"
static const row mha_rows[] = {
    {MHA_IN " --wo {wo}" MHA_ALL_BIASES " --heads 4 --kv-heads 2 -o {o} --weights {w} --lse {lse}", .check = CHECK_MHA,
     .f = {DIMS(2, 5, 5, 4, 2, 3, 2), .dm = 6, .dout = 5}},
    {MHA_IN " --context {ctx} --heads 2 --kv-heads 1 -o {o} --weights {w} --lse {lse}", .check = CHECK_MHA,
     .f = {DIMS(1, 4, 7, 2, 1, 3, 4), .rank = 2, .dm = 5, .dc = 3}},
    {MHA_IN " --heads 8 --kv-heads 1 -o {o} --weights {w}", .check = CHECK_MHA, .f = {DIMS(1, 3, 3, 8, 1, 2, 2), .dm = 4}},
    {MHA_IN " --heads 1 -o {o}", .check = CHECK_MHA, .f = {DIMS(1, 1, 1, 1, 1, 1, 1), .dm = 1, .rank = 2}},
    /* masks */
    {MHA_IN " --wo {wo} --heads 2 -o {o} --weights {w} --causal", .check = CHECK_MHA, .f = {DIMS(2, 5, 5, 2, 2, 3, 2), .dm = 4}},
    {MHA_IN " --heads 2 --kv-heads 1 -o {o} --weights {w} --lse {lse} --key-lengths {lens}", .check = CHECK_MHA,
     .f = {DIMS(2, 4, 4, 2, 1, 3, 2), .dm = 4, LENS(0, 3)}, .masked_rows = true},
    {MHA_IN " --heads 2 -o {o} --weights {w} --mask {mask} --bias {bias}", .check = CHECK_MHA,
     .f = {DIMS(2, 4, 4, 2, 2, 3, 2), .dm = 4, MASK(3, 1, 2, 4, 4), BIAS_T(4, 2, 1, 4, 4, FT_F32, 1)}, .masked_rows = true},
    {MHA_IN " --context {ctx} --heads 2 -o {o} --weights {w} --lse {lse} --causal-lower-right --window 1,0", .check = CHECK_MHA,
     .f = {DIMS(1, 6, 3, 2, 2, 3, 2), .dm = 4, .dc = 3}, .says = "warning|first 3 queries see no key", .masked_rows = true},
    /* gradients: every flag */
    {MHA_IN " --context {ctx} --wo {wo}" MHA_ALL_BIASES " --heads 4 --kv-heads 2 -o {o}" MHA_DW_ALL " --dcontext {dc} --causal",
     .check = CHECK_MHA, .f = {DIMS(2, 5, 7, 4, 2, 3, 2), .dm = 6, .dc = 4, .dout = 5}},
    {MHA_IN " --heads 2 --kv-heads 1" MHA_GRADS " --key-lengths {lens} --kernel ref", .check = CHECK_MHA,
     .f = {DIMS(2, 4, 4, 2, 1, 3, 2), .dm = 4, .rank = 3, LENS(4, 0)}, .masked_rows = true},
    {MHA_IN " --heads 2 --grad-out {mdo} --dbv {dbv}", .check = CHECK_MHA, .f = {DIMS(1, 3, 3, 2, 2, 2, 3), .dm = 4, .rank = 2}},
    /* --weight-layout torch: W files [d_out, d_in], the rows run's outputs (dW transposed back) */
    {MHA_IN " --wo {wo} --heads 2 --weight-layout torch -o {o} --weights {w} --grad-out {mdo} --dx {dx} --dwq {dwq} --dwk {dwk} "
     "--dwv {dwv} --dwo {dwo}", .check = CHECK_MHA, .f = {DIMS(1, 4, 4, 2, 2, 3, 2), .dm = 5, .dout = 3},
     .twin = "mha -x {x} --wq {wqr} --wk {wkr} --wv {wvr} --wo {wor} --heads 2 -o {o} --weights {w} --grad-out {mdo} --dx {dx} "
             "--dwq {dwq} --dwk {dwk} --dwv {dwv} --dwo {dwo}"},
    {"mha -x {x} --wq {wqt} --wk {wkt} --wv {wvt} --heads 2 -o {o}", 1,
     "--wq|wqt.npy|[6, 5]|its transpose fits|add --weight-layout torch", .f = {DIMS(1, 4, 4, 2, 2, 3, 2), .dm = 5}},
    {"mha -x {x} --wq {wqr} --wk {wkr} --wv {wvr} --heads 2 --weight-layout torch -o {o}", 1,
     "--wq|wqr.npy|drop --weight-layout torch", .f = {DIMS(1, 4, 4, 2, 2, 3, 2), .dm = 5}},
    {MHA_IN " --heads 2 --weight-layout cols -o {o}", 2, .says = "--weight-layout expects rows|'cols'", .f = {DIMS(1, 3, 3, 2, 2, 2, 2), .dm = 4}},
    /* threads: the same bits */
    {MHA_IN " --context {ctx} --wo {wo} --heads 4 --kv-heads 2 -o {o} --weights {w}" MHA_GRADS " --dcontext {dc} --threads 1",
     .check = CHECK_MHA, .f = {DIMS(2, 19, 23, 4, 2, 8, 4), .dm = 8, .dc = 6, .dout = 5},
     .twin = MHA_IN " --context {ctx} --wo {wo} --heads 4 --kv-heads 2 -o {o} --weights {w}" MHA_GRADS " --dcontext {dc} --threads 2"},
    /* dtypes: float64 and float16 x and weights */
    {MHA_IN " --wo {wo} --heads 2 --kv-heads 1 -o {o} --weights {w}", .check = CHECK_MHA,
     .f = {DIMS(2, 3, 3, 2, 1, 3, 2), .dm = 4, .module_type = FT_F64}},
    {MHA_IN " --wo {wo} --heads 2 --kv-heads 1 -o {o} --weights {w}", .check = CHECK_MHA,
     .f = {DIMS(1, 3, 3, 2, 1, 3, 2), .dm = 4, .module_type = FT_F16}},
    /* usage and data errors */
    {MHA_IN " --heads 2 --grad-out {mdo} --dx {dx} --dcontext {dc}", 2, .says = "--dcontext needs --context", .f = {DIMS(1, 3, 3, 2, 2, 2, 2), .dm = 4}},
    {MHA_IN " --heads 2 --grad-out {mdo} --dwo {dwo}", 2, .says = "--dwo needs --wo", .f = {DIMS(1, 3, 3, 2, 2, 2, 2), .dm = 4}},
    {MHA_IN " --heads 3 --kv-heads 2 -o {o}", 2, .says = "--heads 3 is not a multiple of --kv-heads 2", .f = {DIMS(1, 3, 3, 2, 2, 2, 2), .dm = 4}},
    {MHA_IN " --heads 0 -o {o}", 2, .says = "--heads must be between 1", .f = {DIMS(1, 3, 3, 2, 2, 2, 2), .dm = 4}},
    {MHA_IN " -o {o}", 2, .says = "missing --heads H", .f = {DIMS(1, 3, 3, 2, 2, 2, 2), .dm = 4}},
    {MHA_IN " --heads 2 --heads 2 -o {o}", 2, .says = "--heads is given twice", .f = {DIMS(1, 3, 3, 2, 2, 2, 2), .dm = 4}},
    {MHA_IN " --heads 2 -o {o} --layout BHLD", 2, .says = "unknown option '--layout'", .f = {DIMS(1, 3, 3, 2, 2, 2, 2), .dm = 4}},
    {MHA_IN " --heads 2 -o {o} --wieght-layout torch", 2, .says = "did you mean --weight-layout?", .f = {DIMS(1, 3, 3, 2, 2, 2, 2), .dm = 4}},
    {MHA_IN " --heads 4 -o {o}", 1, .says = "split evenly into 4 query heads", .f = {DIMS(1, 3, 3, 2, 2, 3, 2), .dm = 4}},
    {MHA_IN " --heads 2 -o {o} --grad-out {x} --dx {dx}", 1, .says = "--grad-out|x.npy|shaped like OUT", .f = {DIMS(1, 3, 3, 2, 2, 2, 3), .dm = 4}},
    {MHA_IN " --heads 1 -o {o} --kernel ref", 1, .says = "reference kernel would need 275 GFLOP|--allow-slow",
     .f = {DIMS(1, 262144, 262144, 1, 1, 1, 1), .dm = 1, .rank = 2}},
};

/* trace: hook files against the oracle, patches applied by the test. */
#define TRACE_MODULE "trace -x {x} --wq {wq} --wk {wk} --wv {wv}"
static const row trace_rows[] = {
    {TRACE_IN " --dir {hooks/} -o {to} --causal --window 1,0", .check = CHECK_TRACE, .f = {DIMS(2, 5, 5, 4, 2, 3, 2)},
     .says = "wrote 6 hooks"},
    {TRACE_IN " --dir {hooks/} -o {to} --key-lengths {lens} --mask {mask} --bias {bias}", .check = CHECK_TRACE,
     .f = {DIMS(1, 4, 5, 1, 1, 3, 2), .rank = 2, LENS(4), MASK(2, 1, 1, 4, 5), BIAS(2, 1, 1, 4, 5)}},
    {TRACE_IN " --dir {hooks/} -o {to} --key-lengths {lens}", .check = CHECK_TRACE, .f = {DIMS(2, 3, 4, 2, 1, 3, 2), LENS(0, 4)},
     .masked_rows = true},
    {TRACE_IN " --layout BHLD --dir {hooks/} -o {to} --causal-lower-right", .check = CHECK_TRACE, .f = {DIMS(2, 3, 6, 2, 1, 3, 2)},
     .twin = "trace -q {qb} -k {kb} -v {vb} --dir {hooks/} -o {to} --causal-lower-right"},
    {TRACE_IN " --dir {hooks/} -o {to} --scale 0.7 --scale pattern:1:0=0.5 --no-renormalise", .check = CHECK_TRACE,
     .f = {DIMS(2, 3, 4, 2, 1, 3, 2)}},
    /* traced runs keep [B, Hq, L, S] tables and run the reference when asked: budgets */
    {TRACE_IN " --dir {hooks/} --kernel ref", 1, .says = "reference kernel would need|--allow-slow",
     .f = {DIMS(1, 65536, 65536, 4, 4, 2, 2), .rank = 3}},
    {TRACE_IN " --dir {hooks/}", 1, .says = "for its outputs and tables|more than this machine's",
     .f = {DIMS(1, 262144, 262144, 1, 1, 1, 1), .rank = 2}},
    {TRACE_IN " --dir {hooks/} --scale pattern:2:1:0=3 --renormalise --causal --batch 1", .check = CHECK_TRACE,
     .f = {DIMS(2, 4, 4, 2, 2, 3, 2)}},
    {TRACE_IN " --dir {hooks/} -o {to} --zero z::1", .check = CHECK_TRACE, .f = {DIMS(1, 3, 4, 2, 1, 3, 2), .rank = 3}},
    {TRACE_IN " --dir {hooks/} -o {to} --source-v {v2} --replace v:1=source --zero k:0:0 --scale q::1=2 --causal", .check = CHECK_TRACE,
     .f = {DIMS(2, 3, 4, 2, 2, 3, 2)}},
    {TRACE_IN " --dir {hooks/} --replace q:2={vec_d} --replace hook_v:0:1={vec_dv} --batch 1", .check = CHECK_TRACE,
     .f = {DIMS(2, 3, 4, 4, 2, 3, 2)}},
    {TRACE_IN " --dir {hooks/} --threads 1 --causal", .check = CHECK_TRACE, .f = {DIMS(2, 17, 19, 4, 2, 5, 3)},
     .twin = TRACE_IN " --dir {hooks/} --threads 2 --causal"},
    {TRACE_MODULE " --wo {wo} --bo {bo} --heads 2 --causal --dir {hooks/} -o {to}", .check = CHECK_TRACE,
     .f = {DIMS(2, 4, 4, 2, 2, 3, 2), .dm = 4, .dout = 3}, .says = "wrote 8 hooks"},
    {TRACE_MODULE " --context {ctx} --bq {bq} --bk {bk} --bv {bv} --heads 4 --kv-heads 2 --dir {hooks/} -o {to} --ablate 1",
     .check = CHECK_TRACE, .f = {DIMS(1, 3, 5, 4, 2, 3, 2), .dm = 4, .dc = 3, .rank = 2}},
    {TRACE_MODULE " --context {ctx} --heads 2 --source {x2} --source-context {ctx2} --replace k:1=source --replace v:2=source "
     "--dir {hooks/} -o {to}", .check = CHECK_TRACE, .f = {DIMS(2, 3, 4, 2, 2, 3, 2), .dm = 4, .dc = 3}},
    {TRACE_MODULE " --wo {wo} --heads 2 --weight-layout torch --dir {hooks/} --mask {mask}", .check = CHECK_TRACE,
     .f = {DIMS(1, 4, 4, 2, 2, 3, 2), .dm = 5, .dout = 3, MASK(2, 1, 1, 4, 4)}},
    {TRACE_IN " --dir {hooks/} --zero pattern:1", 2, .says = "a pattern patch needs an explicit choice|--renormalise", .f = {DIMS(1, 3, 3, 1, 1, 2, 2)}},
    {TRACE_IN " --dir {hooks/} --renormalise --no-renormalise", 2, .says = "give only one of --renormalise and --no-renormalise",
     .f = {DIMS(1, 3, 3, 1, 1, 2, 2)}},
    {TRACE_IN " --dir {hooks/} --scale 0.5 --scale 0.6", 2, .says = "the score scale (--scale S) is given twice", .f = {DIMS(1, 3, 3, 1, 1, 2, 2)}},
    {TRACE_IN " --dir {hooks/} --scale pattern:1=abc --renormalise", 2, .says = "--scale expects a finite number|'abc'",
     .f = {DIMS(1, 3, 3, 1, 1, 2, 2)}},
    {TRACE_IN " --dir {hooks/} --zero k:9", 1, .says = "--zero k:9", .f = {DIMS(1, 3, 3, 1, 1, 2, 2)}},
    {TRACE_IN " --dir {q}", 1, .says = "--dir|q.npy|exists and is not a directory", .f = {DIMS(1, 3, 3, 1, 1, 2, 2)}},
    {TRACE_IN, 2, .says = "nothing to write: give --dir DIR and/or -o OUT.npy", .f = {DIMS(1, 3, 3, 1, 1, 2, 2)}},
    {TRACE_IN " -x {x} --dir {hooks/}", 2, .says = "not both", .f = {DIMS(1, 3, 3, 1, 1, 2, 2), .dm = 4}},
    {TRACE_MODULE " --heads 1 --layout BHLD -o {to}", 2, .says = "--layout is for -q/-k/-v", .f = {DIMS(1, 3, 3, 1, 1, 2, 2), .dm = 4}},
    {TRACE_IN " -o {to}", .check = CHECK_TRACE, .f = {DIMS(1, 2, 3, 8, 8, 2, 2)}, .says = "warning|2 positions and 8 heads|--layout BHLD"},
    {TRACE_IN " --dir {hooks/} --zero pattern:1 --renormalise --batch 9", 1, .says = "batch = 9 is outside [0, 2)|--zero pattern:1",
     .f = {DIMS(2, 3, 3, 1, 1, 2, 2)}},
};

/* paths: the JSON against the oracle's five runs; the tables' limit. */
#define PATHS_MODULE "paths --base {x} --changed {x2} --wq {wq} --wk {wk} --wv {wv}"
static const row paths_rows[] = {
    {PATHS_IN " --changed-v {v2} --json --causal", .check = CHECK_PATHS, .f = {DIMS(2, 4, 5, 4, 2, 3, 2)}},
    {"paths --base-q {q} --base-k {k} --base-v {v} --changed-q {q2} --changed-k {k2} --changed-v {v2} --json --mask {mask} "
     "--key-lengths {lens}", .check = CHECK_PATHS, .f = {DIMS(2, 4, 5, 2, 1, 3, 2), LENS(0, 5), MASK(2, 1, 1, 4, 5)},
     .masked_rows = true},
    {PATHS_IN " --json --layout BHLD --window 1,1", .check = CHECK_PATHS, .f = {DIMS(2, 3, 4, 2, 1, 3, 2)}},
    {PATHS_IN " --changed-v {v2} --json --batch 1 --head 0 --query 2", .check = CHECK_PATHS, .f = {DIMS(2, 3, 4, 2, 1, 3, 2)}},
    {PATHS_IN " --json --bias {bias} --scale 0.4", .check = CHECK_PATHS, .f = {DIMS(1, 3, 4, 1, 1, 3, 2), .rank = 2, BIAS(2, 1, 1, 3, 4)}},
    {PATHS_MODULE " --wo {wo} --bo {bo} --heads 2 --json --causal", .check = CHECK_PATHS, .f = {DIMS(2, 4, 4, 2, 2, 3, 2), .dm = 4, .dout = 3}},
    {PATHS_MODULE " --context {ctx} --changed-context {ctx2} --heads 2 --kv-heads 1 --json", .check = CHECK_PATHS,
     .f = {DIMS(1, 3, 5, 2, 1, 3, 2), .rank = 2, .dm = 4, .dc = 3}},
    /* a long input prints at most 32 tables unless --all */
    {PATHS_IN, .f = {DIMS(1, 40, 40, 1, 1, 2, 2)}, .count_of = ", head ", .count = 32,
     .says = "8 more (batch, query, head) tables not printed|--all"},
    {PATHS_IN " --all", .f = {DIMS(1, 40, 40, 1, 1, 2, 2)}, .count_of = ", head ", .count = 40, .never = "not printed"},
    {PATHS_IN " --query 39", .f = {DIMS(1, 40, 40, 1, 1, 2, 2)}, .count_of = ", head ", .count = 1, .never = "not printed"},
    {PATHS_IN " --query 3", 2, .says = "--query 3 is out of range", .f = {DIMS(1, 3, 3, 1, 1, 2, 2)}},
    {PATHS_IN, 1, .says = "for its outputs and tables|more than this machine's", .f = {DIMS(1, 131072, 131072, 1, 1, 1, 1), .rank = 2}},
    {"paths --base-q {q} --base-k {k} --base-v {v}", 2, .says = "nothing changed", .f = {DIMS(1, 3, 3, 1, 1, 2, 2)}},
    {"paths --base-q {q} --base-k {k} --base-v {v} --changed-k {q}", 1, .says = "--changed-k|q.npy|the changed input must have the base's shape",
     .f = {DIMS(1, 3, 4, 1, 1, 2, 2)}},
    {PATHS_IN " --chapter", 2, .says = "give one kind of input", .f = {DIMS(1, 3, 3, 1, 1, 2, 2)}},
    {PATHS_MODULE " --heads 1 --layout BHLD", 2, .says = "--layout is for --base-q/-k/-v|--base is [L, d_model]",
     .f = {DIMS(1, 3, 3, 1, 1, 2, 2), .dm = 4}},
    {"paths --chapter --layout BHLD", 2, .says = "--layout is for --base-q/-k/-v|--chapter has no layout"},
    {PATHS_IN " --json", .check = CHECK_PATHS, .f = {DIMS(1, 2, 3, 8, 8, 2, 2)}, .says = "warning|2 positions and 8 heads"},
    {"paths --chapter --json", 0, .says = "\"cases\": [\"base\", \"K only\", \"V only\", \"both\", \"changed\"]|\"interaction_z\": [0, 0.15"},
};

/* nullspace: the moved row written, checked against w·V recomputed here. */
static const row nullspace_rows[] = {
    {NULL_IN " -o {moved}", .check = CHECK_NULLSPACE, .f = {DIMS(1, 4, 5, 1, 1, 3, 2), .rank = 2}, .says = "exact"},
    {"nullspace -q {q} -k {k} -v {v} --batch 1 --head 3 --query 0 --causal-lower-right -o {moved}", .check = CHECK_NULLSPACE,
     .f = {DIMS(2, 3, 6, 4, 2, 3, 2)}},
    {NULL_IN " --key-lengths {lens} -o {moved} --tol 1e-4", .check = CHECK_NULLSPACE, .f = {DIMS(2, 3, 6, 2, 1, 3, 1), LENS(4, 6)},
     .says = "4 of 6 keys visible"},
    {NULL_IN " --layout BHLD --mask {mask} -o {moved}", .check = CHECK_NULLSPACE, .f = {DIMS(1, 3, 6, 2, 2, 3, 2), MASK(2, 1, 1, 3, 6)}},
    {"nullspace --weights {rows} --values {vals} --query 1 -o {moved} --tol 1e-4", .check = CHECK_NULLSPACE, .f = {DIMS(1, 3, 6, 1, 1, 1, 2)}},
    {"nullspace --weights {rows} --values {vals} --query 0 -o {moved}", .check = CHECK_NULLSPACE, .f = {DIMS(1, 3, 6, 1, 1, 1, 2)},
     .says = "5 of 6 keys visible"},
    {"nullspace --weights {rows} --values {vals} --query 0 --zero-keys-may-gain -o {moved}", .check = CHECK_NULLSPACE,
     .f = {DIMS(1, 3, 6, 1, 1, 1, 2)}, .says = "6 of 6 keys visible"},
    {"nullspace --chapter -o {moved}", 0, .says = "the chapter's row [0.7, 0.3] gives [2, 1]|largest L1 move found: 1.6"},
    /* the exact search's budget: 20 keys of width 64 refused at once */
    {"nullspace --weights {rows} --values {vals} --zero-keys-may-gain --exact-limit 20", 1,
     "exact search over 20 visible keys|beyond the budget|a lower --exact-limit, or --allow-slow", .f = {DIMS(1, 1, 20, 1, 1, 1, 64)}},
    {"nullspace --weights {rows} --values {vals} --exact-limit 21", 2, .says = "--exact-limit must be between 1 and 20",
     .f = {DIMS(1, 1, 4, 1, 1, 1, 2)}},
    {"nullspace --weights {rows} --values {vals} --tol -1", 2, .says = "--tol must be between", .f = {DIMS(1, 1, 4, 1, 1, 1, 2)}},
    {"nullspace --weights {rows} --values {vals} --causal", 2, .says = "apply to -q/-k/-v input only", .f = {DIMS(1, 1, 4, 1, 1, 1, 2)}},
    {"nullspace --weights {rows} --values {vals}", 2, .says = "--weights|rows.npy|has 3 rows: choose one with --query I",
     .f = {DIMS(1, 3, 4, 1, 1, 1, 2)}},
    {"nullspace --weights {rows} --values {rows} --query 0", 1, .says = "--values|rows.npy|expected [S = 4, Dv]", .f = {DIMS(1, 3, 4, 1, 1, 1, 2)}},
    {"nullspace -q {q} -k {k} -v {v}", 2, .says = "missing --query I", .f = {DIMS(1, 3, 3, 1, 1, 2, 2)}},
    {"nullspace -q {q} -k {k} -v {v} --query 9", 2, .says = "--query 9 is out of range", .f = {DIMS(1, 3, 3, 1, 1, 2, 2)}},
    {NULL_IN " -o {moved} --layout BLHD", .check = CHECK_NULLSPACE, .f = {DIMS(1, 2, 3, 8, 8, 2, 2)}, .never = "warning"},
    {NULL_IN " -o {moved}", .check = CHECK_NULLSPACE, .f = {DIMS(1, 2, 3, 8, 8, 2, 2)}, .says = "warning|--layout BHLD"},
    {NULL_IN, 1, .says = "for its outputs and tables|more than this machine's", .f = {DIMS(1, 262144, 262144, 1, 1, 1, 1), .rank = 2}},
};

/* map and report: pictures and pages, by their magic bytes. */
static const row picture_rows[] = {
    {MAP_IN " -o {map.png} --causal", .check = CHECK_FILES, .f = {DIMS(2, 4, 4, 2, 1, 3, 2)}, .never = "warning"},
    {MAP_IN " -o {map.svg} --tokens a,b,c,d --heads 0 --batch 1 --values on --title T --lang zh --columns 1 --vmin 0 --vmax 0.5",
     .check = CHECK_FILES, .f = {DIMS(2, 4, 4, 2, 1, 3, 2)}},
    {MAP_IN " -o {map.pdf} --key-lengths {lens}", .check = CHECK_FILES, .f = {DIMS(2, 3, 5, 1, 1, 2, 2), LENS(5, 2)}, .never = "warning"},
    {MAP_IN " -o {map.png} --mask {mask} --window 1,0 --align lower-right --quiet", .check = CHECK_FILES,
     .f = {DIMS(1, 3, 5, 1, 1, 2, 2), .rank = 2, MASK(2, 1, 1, 3, 5)}, .never = "warning|wrote"},
    {MAP_IN " -o {map.png} --heads 0-1 --tokens a,b,c --key-tokens w,x,y,z --values off", .check = CHECK_FILES,
     .f = {DIMS(1, 3, 4, 2, 1, 2, 2), .rank = 3}},
    /* weights computed with other mask options than the ones given are warned of */
    {MAP_IN " -o {map.png}", .check = CHECK_FILES, .f = {DIMS(1, 4, 4, 1, 1, 2, 2), .weights_flags = "--causal"},
     .says = "warning|6 cells hold weight exactly 0|--causal"},
    {MAP_IN " -o {map.png} --causal", .check = CHECK_FILES, .f = {DIMS(1, 4, 4, 1, 1, 2, 2), .weights_flags = ""},
     .says = "warning|6 cells the mask options hide hold weight"},
    {MAP_IN " -o {map.png} --vmin 0.5 --vmax 0.5", 2, .says = "--vmax (0.5) must be greater than --vmin (0.5)", .f = {DIMS(1, 3, 3, 1, 1, 2, 2)}},
    {MAP_IN " -o {map.png} --vmin 1", 2, .says = "must be greater than --vmin (1)|the end not given is its default",
     .f = {DIMS(1, 3, 3, 1, 1, 2, 2)}},
    {MAP_IN " -o {map.jpg}", 2, .says = "map.jpg|the name must end in .png, .svg or .pdf", .f = {DIMS(1, 3, 3, 1, 1, 2, 2)}},
    {MAP_IN " -o {map.png} --heads 5", 1, .says = "--heads: head 5 is out of range", .f = {DIMS(1, 3, 3, 2, 1, 2, 2)}},
    {MAP_IN " -o {map.png} --batch 3", 1, .says = "--batch 3 is out of range", .f = {DIMS(2, 3, 3, 2, 1, 2, 2)}},
    {MAP_IN " -o {map.png} --tokens a,b", 1, .says = "--tokens has 2 tokens but there are 3", .f = {DIMS(1, 3, 3, 1, 1, 2, 2)}},
    {MAP_IN " -o {missing/map.png}", 1, .says = "missing/map.png", .f = {DIMS(1, 3, 3, 1, 1, 2, 2)}},
    {MAP_IN " -o {map.png} --scale 2", 2, .says = "unknown option '--scale'", .f = {DIMS(1, 3, 3, 1, 1, 2, 2)}},
    {MAP_IN " -o {map.png} --lang fr", 2, .says = "--lang expects en or zh", .f = {DIMS(1, 3, 3, 1, 1, 2, 2)}},
    {REPORT_IN " --causal --tokens a,b,c,d --html {r.html}", .check = CHECK_FILES, .f = {DIMS(1, 4, 4, 2, 1, 3, 2), .rank = 3}},
    /* token files: CRLF ends a token as LF does; a NUL byte is refused */
    {REPORT_IN " --tokens @{crlf.txt} --key-tokens w,x,y,z --html {r.html}", .check = CHECK_FILES, .f = {DIMS(1, 3, 4, 1, 1, 2, 2)},
     .in_file = "r.html", .file_says = "\"query_labels\":[\"t0\",\"t1\",\"t2\"],\"key_labels\":[\"w\",\"x\",\"y\",\"z\"]"},
    {MAP_IN " -o {map.png} --tokens @{crlf.txt}", .check = CHECK_FILES, .f = {DIMS(1, 3, 3, 1, 1, 2, 2)}},
    {MAP_IN " -o {map.png} --tokens @{nul.txt}", 1, .says = "--tokens|nul.txt|holds a NUL byte", .f = {DIMS(1, 3, 3, 1, 1, 2, 2)}},
    {REPORT_IN " --changed-k {k2} --changed-v {v2} --html {r.html} --key-lengths {lens}", .check = CHECK_FILES,
     .f = {DIMS(2, 3, 5, 2, 1, 3, 2), LENS(5, 3)}, .says = "with the path decomposition"},
    {"report -x {x} --wq {wq} --wk {wk} --wv {wv} --wo {wo} --heads 2 --changed-x {x2} --html {r.html} --mask {mask}",
     .check = CHECK_FILES, .f = {DIMS(1, 4, 4, 2, 2, 3, 2), .rank = 2, .dm = 4, .dout = 3, MASK(2, 1, 1, 4, 4)}},
    {REPORT_IN " --layout BHLD --show-heads 1 --html {r.html} --quiet", .check = CHECK_FILES, .f = {DIMS(2, 3, 4, 2, 1, 3, 2)},
     .never = "wrote"},
    {REPORT_IN, 2, .says = "missing --html OUT.html", .f = {DIMS(1, 3, 3, 1, 1, 2, 2)}},
    {REPORT_IN " --show-heads 9 --html {r.html}", 1, .says = "--show-heads: head 9 is out of range", .f = {DIMS(1, 3, 3, 2, 1, 2, 2)}},
    {REPORT_IN " --batch 3 --html {r.html}", 1, .says = "--batch 3 is out of range", .f = {DIMS(2, 3, 3, 2, 1, 2, 2)}},
    {REPORT_IN " --html {r.html}", .check = CHECK_FILES, .f = {DIMS(1, 2, 3, 8, 8, 2, 2)}, .says = "warning|2 positions and 8 heads"},
    {REPORT_IN " -x {x} --html {r.html}", 2, .says = "not both", .f = {DIMS(1, 3, 3, 1, 1, 2, 2), .dm = 4}},
    {"report -x {x} --wq {wq} --wk {wk} --wv {wv} --heads 1 --layout BHLD --html {r.html}", 2, .says = "--layout is for -q/-k/-v",
     .f = {DIMS(1, 3, 3, 1, 1, 2, 2), .dm = 4}},
    {REPORT_IN " --kernel ref --html {r.html}", 1, .says = "reference kernel would need 275 GFLOP", .f = {DIMS(1, 262144, 262144, 1, 1, 1, 1), .rank = 2}},
};

/* demo, train, bench. */
static const row other_rows[] = {
    {"demo", 0, .says = "[1/4, 1/4, 1/2]|3/5"},
    {"demo --lang zh", 0, .says = "注意力"},
    {"demo --figures {figs/}", .check = CHECK_FILES,
     .files = "figs/figure1.png figs/figure1.svg figs/figure2.png figs/figure2.svg figs/figure3.png figs/figure3.svg"},
    {"demo --lang fr", 2, .says = "--lang"},
    {"demo extra", 2, .says = "unexpected argument 'extra'"},
    {"demo --lang en --lang zh", 2, .says = "--lang is given twice"},
    {"train --steps 20 --seq-len 4 --seed 3 --threads 1", 0, .says = "before training|accuracy",
     .twin = "train --steps 20 --seq-len 4 --seed 3 --threads 2"},
    {"train --seq-len 17", 2, .says = "--seq-len"},
    {"train --lr abc", 2, .says = "--lr expects a finite number"},
    {"train --stepz 3", 2, .says = "did you mean --steps?"},
    {"bench --list", 0, .says = "decode S=4096|scaling n=100|long L=S=65536 causal"},
    {"bench --list --filter decode", 0, .says = "decode S=32768", .never = "prefill"},
    {"bench --list --filter nomatch", 2, .says = "--filter 'nomatch' matches none"},
    {"bench --kernel bogus", 2, .says = "--kernel"},
    {"bench --threads 0", 2, .says = "--threads must be between"},
    {"bench --quick --quick", 2, .says = "--quick is given twice"},
    {"frobnicate", 2, .says = "unknown command 'frobnicate'"},
    {"sdpq", 2, .says = "did you mean sdpa?"},
    {"help frobnicate", 2, .says = "unknown command 'frobnicate'"},
    {"help", 0, .says = "usage: attn <command>|nullspace"},
    {"--version", 0, .says = "attn 0."},
    {"sdpa -h", 0, .says = "usage: attn sdpa"},
    {"", 2, .says = "usage: attn <command>"},
};

/* Every command that takes the mask options refuses their mistakes alike
 * and warns of --causal on a decode-shaped problem (L = 3 < S = 5). */
#define MASK_FAMILY(args, ...)                                                                                       \
    {args " --key-lengths {lens}", 1, .says = "--key-lengths|lens.npy|element 0 is 6, outside [0, S = 5]",                   \
     .f = {__VA_ARGS__, LENS(6), .weights_flags = ""}},                                                              \
    {args " --window 1", 2, .says = "--window expects LEFT,RIGHT", .f = {__VA_ARGS__, .weights_flags = ""}},                 \
    {args " --mask {mask}", 1, .says = "--mask|mask.npy|float32", .f = {__VA_ARGS__, MASK_T(2, 1, 1, 3, 5, FT_F32, 0), .weights_flags = ""}}, \
    {args " --bias {bias}", 1, .says = "--bias|bias.npy|NaN", .f = {__VA_ARGS__, BIAS_POISON(2, 1, 1, 3, 5, 1), .weights_flags = ""}}, \
    {args " --causal-lower-right --causal", 2, .says = "give only one of --causal and --causal-lower-right",                 \
     .f = {__VA_ARGS__, .weights_flags = ""}},                                                                       \
    {args " --causal", 0, .says = "warning|--causal aligns the diagonal top-left|2 keys before it", .f = {__VA_ARGS__}}
static const row family_rows[] = {
    MASK_FAMILY(SDPA_IN " -o {o}", DIMS(1, 3, 5, 2, 1, 3, 2)),
    MASK_FAMILY(MHA_IN " --context {ctx} --heads 2 -o {o}", DIMS(1, 3, 5, 2, 2, 2, 2), .dm = 3, .dc = 2),
    MASK_FAMILY(TRACE_IN " -o {o}", DIMS(1, 3, 5, 2, 1, 3, 2)),
    MASK_FAMILY(PATHS_IN, DIMS(1, 3, 5, 2, 1, 3, 2)),
    MASK_FAMILY(NULL_IN " -o {o}", DIMS(1, 3, 5, 2, 1, 3, 2)),
    MASK_FAMILY(MAP_IN " -o {map.png}", DIMS(1, 3, 5, 2, 1, 3, 2)),
    MASK_FAMILY(REPORT_IN " --html {r.html}", DIMS(1, 3, 5, 2, 1, 3, 2)),
};

/* ------------------------------------------------------------ one run */

enum { MAX_TOKENS = 160, MAX_OUTPUTS = 24, N_MOD = 8 };
enum { WQ, WK, WV, WO, BQ, BK, BV, BO };

typedef struct run {
    const row *r;
    const char *table;
    int index;
    fixture f;          /* the row's, defaults applied */
    char dir[512];      /* the row's folder; its twin's outputs go to dir/twin */
    test_rng rng;
    bool bhld, torch;   /* --layout BHLD, --weight-layout torch */
    bool with_wo;       /* --wo given: the module's output is Z W_O, else Z */
    /* The inputs as the program reads them (the float values of each file's
     * dtype): q, k, v (and changed, and do) [B, P, H, W]; the module's x
     * [B, L, dm], ctx [B, S, dc], W [d_in, d_out], biases; a mask and bias
     * [B|1, H|1, L|1, S|1]; rows [L, S] and vals [S, Dv] for nullspace. */
    float *q, *k, *v, *q2, *k2, *v2, *dout;
    float *x, *x2, *ctx, *ctx2, *mod[N_MOD], *mdout;
    float *rows, *vals, *bias;
    uint8_t *mask;
    int64_t *lens;
    char made[48][16]; /* the inputs already written */
    int n_made;
    /* the command line, expanded, as tokens */
    char line[8192], storage[8192];
    char *tok[MAX_TOKENS];
    int ntok;
    char outputs[MAX_OUTPUTS][128]; /* output placeholders' file names */
    int n_outputs;
    oracle_case c;      /* the problem the row's options describe */
    char *output;       /* what the program printed */
    bool failed;
} run;

static int g_cases, g_failures, g_rows;

static void run_fail(run *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void run_fail(run *x, const char *fmt, ...) {
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!x->failed) g_failures++;
    x->failed = true;
    print_error("%s row %d: attn %s\n    %s\n", x->table, x->index, x->r->args, msg);
}

/* ---------------------------------------------------- placeholders */

/* The file name of a placeholder: {q} q.npy, {map.png} as written, {hooks/} hooks. */
static void placeholder_file(const char *name, size_t len, char *file, size_t size) {
    if (len && name[len - 1] == '/') snprintf(file, size, "%.*s", (int)(len - 1), name);
    else if (memchr(name, '.', len)) snprintf(file, size, "%.*s", (int)len, name);
    else snprintf(file, size, "%.*s.npy", (int)len, name);
}

static const char *const input_names[] = {
    "q", "k", "v", "q2", "k2", "v2", "qb", "kb", "vb", "do", "dob", "mask", "bias", "lens",
    "x", "x2", "ctx", "ctx2", "wq", "wk", "wv", "wo", "bq", "bk", "bv", "bo", "wqr", "wkr", "wvr", "wor",
    "wqt", "wkt", "wvt", "mdo", "rows", "vals", "attnw", "vec_d", "vec_dv", "crlf.txt", "nul.txt"};

static bool is_input(const char *name, size_t len) {
    for (size_t n = 0; n < sizeof input_names / sizeof input_names[0]; n++)
        if (strlen(input_names[n]) == len && strncmp(input_names[n], name, len) == 0) return true;
    return false;
}

/* ------------------------------------------------------ generated data */

static float draw(run *x, enum ftype t) {
    double value = test_rng_normal(&x->rng);
    if (t == FT_F16 || t == FT_BF16) return (float)(fmax(-255, fmin(255, round(value * 64))) / 64); /* exact in both */
    if (t == FT_I32) return (float)round(3 * value);
    return (float)value;
}

static float *draw_array(run *x, int64_t n, enum ftype t, double scale) {
    float *a = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    for (int64_t i = 0; i < n; i++) a[i] = (float)(scale * draw(x, t));
    return a;
}

static uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return (uint16_t)(u >> 16);
}

static uint16_t to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    const uint32_t sign = u >> 31, exponent = (u >> 23) & 0xff, mantissa = u & 0x7fffff;
    if ((u & 0x7fffffff) == 0) return (uint16_t)(sign << 15);
    return (uint16_t)(sign << 15 | (exponent - 127 + 15) << 10 | mantissa >> 13);
}

/* Writes n floats as a file of dtype t.  float64 files hold a double that
 * is not a float and rounds to it, so that the conversion is exercised. */
static void write_typed(const char *path, enum ftype t, int ndim, const int64_t *shape, const float *data, int64_t n) {
    void *buf = NULL;
    attn_dtype dtype = ATTN_F32;
    switch (t) {
    case FT_F64: {
        double *d = malloc(sizeof(double) * (size_t)n);
        for (int64_t i = 0; i < n; i++) d[i] = (double)data[i] * (1.0 + 0x1p-30);
        buf = d, dtype = ATTN_F64;
        break;
    }
    case FT_F16:
    case FT_BF16: {
        uint16_t *h = malloc(sizeof(uint16_t) * (size_t)n);
        for (int64_t i = 0; i < n; i++) h[i] = t == FT_F16 ? to_f16(data[i]) : to_bf16(data[i]);
        buf = h, dtype = t == FT_F16 ? ATTN_F16 : ATTN_BF16;
        break;
    }
    case FT_I32: {
        int32_t *v = malloc(sizeof(int32_t) * (size_t)n);
        for (int64_t i = 0; i < n; i++) v[i] = (int32_t)data[i];
        buf = v, dtype = ATTN_I32;
        break;
    }
    default: break;
    }
    test_save_array(path, dtype, ndim, shape, buf ? buf : data);
    free(buf);
}

/* [B, X, Y, W] -> [B, Y, X, W] (a copy); s is the source's shape. */
static float *swap_middle(const float *data, const int64_t s[4]) {
    float *out = malloc(sizeof(float) * (size_t)(s[0] * s[1] * s[2] * s[3]));
    for (int64_t b = 0; b < s[0]; b++)
        for (int64_t i = 0; i < s[1]; i++)
            for (int64_t j = 0; j < s[2]; j++)
                memcpy(out + ((b * s[2] + j) * s[1] + i) * s[3], data + ((b * s[1] + i) * s[2] + j) * s[3],
                       sizeof(float) * (size_t)s[3]);
    return out;
}

/* The file shape of a [B, P, H, W] array in a rank and layout (as attn sdpa's). */
static int qkv_file_shape(const int64_t s[4], int rank, bool bhld, int64_t *shape) {
    if (rank == 2) {
        shape[0] = s[1], shape[1] = s[3];
        return 2;
    }
    const int64_t full[4] = {s[0], bhld ? s[2] : s[1], bhld ? s[1] : s[2], s[3]};
    memcpy(shape, full + 4 - rank, sizeof(int64_t) * (size_t)rank);
    return rank;
}

static void write_qkv(const char *path, const float *data, const int64_t s[4], int rank, bool bhld, enum ftype t) {
    int64_t shape[4];
    const int ndim = qkv_file_shape(s, rank, bhld && rank > 2, shape);
    float *file = bhld && rank > 2 ? swap_middle(data, s) : NULL; /* [B, P, H, W] -> [B, H, P, W] */
    write_typed(path, t, ndim, shape, file ? file : data, s[0] * s[1] * s[2] * s[3]);
    free(file);
}

/* The module's sizes. */
static int64_t dctx(const run *x) { return x->f.dc ? x->f.dc : x->f.dm; }
static int64_t width_out(const run *x, bool with_wo) { return with_wo ? x->f.dout : x->f.Hq * x->f.Dv; }
/* W [rows, cols] of the module input n, and biases [cols]. */
static void mod_shape(const run *x, int n, int64_t *rows, int64_t *cols) {
    const fixture *f = &x->f;
    const int64_t r[N_MOD] = {f->dm, dctx(x), dctx(x), f->Hq * f->Dv, 1, 1, 1, 1};
    const int64_t c[N_MOD] = {f->Hq * f->D, f->Hkv * f->D, f->Hkv * f->Dv, f->dout,
                              f->Hq * f->D, f->Hkv * f->D, f->Hkv * f->Dv, f->dout};
    *rows = r[n], *cols = c[n];
}

static void generate(run *x) {
    const fixture *f = &x->f;
    const int64_t B = f->B, L = f->L, S = f->S, Hq = f->Hq, Hkv = f->Hkv, D = f->D, Dv = f->Dv;
    x->q = draw_array(x, B * L * Hq * D, f->qkv_type, 1);
    x->k = draw_array(x, B * S * Hkv * D, f->qkv_type, 1);
    x->v = draw_array(x, B * S * Hkv * Dv, f->qkv_type, 1);
    x->q2 = draw_array(x, B * L * Hq * D, f->qkv_type, 1);
    x->k2 = draw_array(x, B * S * Hkv * D, f->qkv_type, 1);
    x->v2 = draw_array(x, B * S * Hkv * Dv, f->qkv_type, 1);
    x->dout = draw_array(x, B * L * Hq * Dv, f->qkv_type, 1);
    if (f->dm) {
        x->x = draw_array(x, B * L * f->dm, f->module_type, 1);
        x->x2 = malloc(sizeof(float) * (size_t)(B * L * f->dm));
        memcpy(x->x2, x->x, sizeof(float) * (size_t)(B * L * f->dm));
        for (int64_t b = 0; b < B; b++) x->x2[(b * L + (L > 1)) * f->dm] += 1.5f; /* position 1 changes */
        x->ctx = draw_array(x, B * S * dctx(x), f->module_type, 1);
        x->ctx2 = draw_array(x, B * S * dctx(x), f->module_type, 1);
        for (int n = 0; n < N_MOD; n++) {
            int64_t rows, cols;
            mod_shape(x, n, &rows, &cols);
            if (n == BO && cols < Hq * Dv) cols = Hq * Dv; /* without W_O, bo is [Hq Dv] */
            x->mod[n] = draw_array(x, rows * cols, f->module_type, n < BQ ? 0.5 : 0.25);
        }
        x->mdout = draw_array(x, B * L * (f->dout > Hq * Dv ? f->dout : Hq * Dv), f->module_type, 1);
    }
    if (f->n_lens) {
        x->lens = malloc(sizeof(int64_t) * (size_t)f->n_lens);
        memcpy(x->lens, f->lens, sizeof(int64_t) * (size_t)f->n_lens);
    }
    for (int which = 0; which < 2; which++) {
        const mask_spec *m = which ? &f->bias : &f->mask;
        if (!m->rank) continue;
        const int64_t *s = m->shape, n = s[0] * s[1] * s[2] * s[3];
        if (which == 0) {
            x->mask = malloc((size_t)n);
            for (int64_t e = 0; e < n; e++) x->mask[e] = test_rng_range(&x->rng, 4) != 0;
        } else {
            x->bias = malloc(sizeof(float) * (size_t)n);
            for (int64_t e = 0; e < n; e++)
                x->bias[e] = test_rng_range(&x->rng, 6) == 0 ? -INFINITY : (float)(2 * test_rng_normal(&x->rng));
        }
        if (m->hide_row)
            for (int64_t e = 0; e < n; e++)
                if (e / s[3] % s[2] == m->hide_row - 1) {
                    if (which == 0) x->mask[e] = 0;
                    else x->bias[e] = -INFINITY;
                }
    }
}

/* The file shape of a mask or bias spec. */
static int mask_file_shape(const mask_spec *m, int64_t *shape) {
    if (m->rank == 5) {
        shape[0] = 1;
        memcpy(shape + 1, m->shape, sizeof(int64_t) * 4);
        return 5;
    }
    memcpy(shape, m->shape + 4 - m->rank, sizeof(int64_t) * (size_t)m->rank);
    return m->rank;
}

static void parse_flags(run *x, char **tok, int ntok, oracle_case *c);
static void tokenize(const char *text, char *storage, size_t size, char **tok, int *ntok);

/* Oracle weights [B, Hq, L, S] of q, k, v under the given flags (the
 * fixture's mask, bias and lengths where they name them). */
static double *oracle_weights(run *x, const char *flags, oracle_case *c) {
    char storage[1024];
    char *tok[64];
    int ntok = 0;
    tokenize(flags, storage, sizeof storage, tok, &ntok);
    parse_flags(x, tok, ntok, c);
    const fixture *f = &x->f;
    double *out = malloc(sizeof(double) * (size_t)(f->B * f->L * f->Hq * f->Dv));
    double *w = malloc(sizeof(double) * (size_t)(f->B * f->Hq * f->L * f->S));
    oracle_attention(c, x->q, x->k, x->v, out, w, NULL);
    free(out);
    return w;
}

/* Writes the input a placeholder names; false if the name is no input. */
static bool make_input(run *x, const char *name, const char *path) {
    const fixture *f = &x->f;
    const int64_t B = f->B, L = f->L, S = f->S, Hq = f->Hq, Hkv = f->Hkv, D = f->D, Dv = f->Dv;
    const int64_t sq[4] = {B, L, Hq, D}, sk[4] = {B, S, Hkv, D}, sv[4] = {B, S, Hkv, Dv}, so[4] = {B, L, Hq, Dv};
    const int rank = f->rank;
    const bool blhd_twin = name[strlen(name) - 1] == 'b'; /* {qb}, {kb}, {vb}, {dob}: BLHD whatever the row's layout */
    const float *qkv = NULL;
    const int64_t *shape = NULL;
    if (!strcmp(name, "q") || !strcmp(name, "qb")) qkv = x->q, shape = sq;
    else if (!strcmp(name, "k") || !strcmp(name, "kb")) qkv = x->k, shape = sk;
    else if (!strcmp(name, "v") || !strcmp(name, "vb")) qkv = x->v, shape = sv;
    else if (!strcmp(name, "q2")) qkv = x->q2, shape = sq;
    else if (!strcmp(name, "k2")) qkv = x->k2, shape = sk;
    else if (!strcmp(name, "v2")) qkv = x->v2, shape = sv;
    else if (!strcmp(name, "do") || !strcmp(name, "dob")) qkv = x->dout, shape = so;
    if (qkv) {
        write_qkv(path, qkv, shape, rank, x->bhld && !blhd_twin, f->qkv_type);
        return true;
    }
    if (!strcmp(name, "mask") || !strcmp(name, "bias")) {
        const mask_spec *m = name[0] == 'm' ? &f->mask : &f->bias;
        int64_t fs[5];
        const int ndim = mask_file_shape(m, fs);
        const int64_t n = m->shape[0] * m->shape[1] * m->shape[2] * m->shape[3];
        if (name[0] == 'b') {
            float *b = malloc(sizeof(float) * (size_t)n);
            memcpy(b, x->bias, sizeof(float) * (size_t)n);
            if (m->poison) b[0] = m->poison == 1 ? NAN : INFINITY;
            enum ftype t = m->type == FT_DEFAULT ? FT_F32 : m->type;
            if (t == FT_I32)
                for (int64_t e = 0; e < n; e++) b[e] = isinf(b[e]) ? -1000 : roundf(b[e]);
            write_typed(path, t, ndim, fs, b, n);
            free(b);
            return true;
        }
        /* a mask: nonzero = may attend, in the spec's dtype */
        static const attn_dtype dtypes[] = {[FT_BOOL] = ATTN_BOOL, [FT_U8] = ATTN_U8, [FT_I32] = ATTN_I32, [FT_I64] = ATTN_I64};
        const enum ftype t = m->type == FT_DEFAULT ? FT_BOOL : m->type;
        if (t == FT_F32) {
            float *fm = malloc(sizeof(float) * (size_t)n);
            for (int64_t e = 0; e < n; e++) fm[e] = x->mask[e];
            write_typed(path, FT_F32, ndim, fs, fm, n);
            free(fm);
            return true;
        }
        const size_t size = t == FT_I64 ? 8 : t == FT_I32 ? 4 : 1;
        uint8_t *bytes = calloc((size_t)n, size);
        for (int64_t e = 0; e < n; e++) {
            const int64_t value = x->mask[e] ? (t == FT_BOOL ? 1 : t == FT_U8 ? 1 + e % 200 : (e % 2 ? -1 : 1) * (1 + e % 1000)) : 0;
            if (size == 8) ((int64_t *)bytes)[e] = value;
            else if (size == 4) ((int32_t *)bytes)[e] = (int32_t)value;
            else bytes[e] = (uint8_t)value;
        }
        test_save_array(path, dtypes[t], ndim, fs, bytes);
        free(bytes);
        return true;
    }
    if (!strcmp(name, "lens")) {
        const int64_t n = f->n_lens, shape1[1] = {n};
        const enum ftype t = f->lens_type == FT_DEFAULT ? FT_I64 : f->lens_type;
        if (t == FT_F32) {
            float *fl = malloc(sizeof(float) * (size_t)n);
            for (int64_t e = 0; e < n; e++) fl[e] = (float)x->lens[e];
            write_typed(path, FT_F32, 1, shape1, fl, n);
            free(fl);
            return true;
        }
        void *buf = malloc(8 * (size_t)n);
        for (int64_t e = 0; e < n; e++) {
            if (t == FT_I32) ((int32_t *)buf)[e] = (int32_t)x->lens[e];
            else if (t == FT_U8) ((uint8_t *)buf)[e] = (uint8_t)x->lens[e];
            else ((int64_t *)buf)[e] = x->lens[e];
        }
        test_save_array(path, t == FT_I32 ? ATTN_I32 : t == FT_U8 ? ATTN_U8 : ATTN_I64, 1, shape1, buf);
        free(buf);
        return true;
    }
    const bool batched = f->rank != 2;
    const enum ftype mt = f->module_type;
    if (!x->x && (name[0] == 'x' || name[0] == 'w' || name[0] == 'b' || !strncmp(name, "ctx", 3) || !strcmp(name, "mdo")))
        fail_msg("{%s} is a module's input, but the row's fixture has no .dm", name);
    if (!strcmp(name, "x") || !strcmp(name, "x2") || !strcmp(name, "ctx") || !strcmp(name, "ctx2") || !strcmp(name, "mdo")) {
        const bool is_x = name[0] == 'x', is_dout = name[0] == 'm';
        const int64_t P = is_x || is_dout ? L : S;
        const int64_t W = is_x ? f->dm : is_dout ? width_out(x, x->with_wo) : dctx(x);
        const float *data = !strcmp(name, "x") ? x->x : !strcmp(name, "x2") ? x->x2 : !strcmp(name, "ctx") ? x->ctx
                          : !strcmp(name, "ctx2") ? x->ctx2 : x->mdout;
        const int64_t shape3[3] = {B, P, W};
        write_typed(path, mt, batched ? 3 : 2, batched ? shape3 : shape3 + 1, data, B * P * W);
        return true;
    }
    static const char *const mod_names[N_MOD] = {"wq", "wk", "wv", "wo", "bq", "bk", "bv", "bo"};
    for (int n = 0; n < N_MOD; n++) {
        /* {wq} in the row's layout, {wqr} rows, {wqt} torch; biases as they are */
        const char suffix = strncmp(name, mod_names[n], 2) == 0 ? name[2] : '?';
        if (suffix == '?' || (suffix && (n >= BQ || name[3] || (suffix != 'r' && suffix != 't')))) continue;
        int64_t rows, cols;
        mod_shape(x, n, &rows, &cols);
        if (n >= BQ) {
            const int64_t width[1] = {n == BO ? width_out(x, x->with_wo) : cols};
            write_typed(path, mt, 1, width, x->mod[n], width[0]);
            return true;
        }
        const bool torch = suffix == 't' || (suffix == 0 && x->torch);
        float *file = malloc(sizeof(float) * (size_t)(rows * cols));
        for (int64_t i = 0; i < rows; i++)
            for (int64_t j = 0; j < cols; j++) file[torch ? j * rows + i : i * cols + j] = x->mod[n][i * cols + j];
        const int64_t shape2[2] = {torch ? cols : rows, torch ? rows : cols};
        write_typed(path, mt, 2, shape2, file, rows * cols);
        free(file);
        return true;
    }
    if (!strcmp(name, "rows") || !strcmp(name, "vals")) {
        /* nullspace's --weights rows [L, S]: positive, summing to 1, row 0 with
         * an exact 0 at key 0; --values [S, Dv] */
        if (!x->rows) {
            x->rows = malloc(sizeof(float) * (size_t)(L * S));
            x->vals = draw_array(x, S * Dv, FT_F32, 1);
            double *e = malloc(sizeof(double) * (size_t)S);
            for (int64_t i = 0; i < L; i++) {
                double sum = 0;
                for (int64_t j = 0; j < S; j++) sum += e[j] = i == 0 && j == 0 && S > 2 ? 0 : exp(test_rng_normal(&x->rng));
                for (int64_t j = 0; j < S; j++) x->rows[i * S + j] = (float)(e[j] / sum);
            }
            free(e);
        }
        const bool is_rows = name[0] == 'r';
        const int64_t shape2[2] = {is_rows ? L : S, is_rows ? S : Dv};
        test_save_f32(path, 2, shape2, is_rows ? x->rows : x->vals);
        return true;
    }
    if (!strcmp(name, "crlf.txt") || !strcmp(name, "nul.txt")) { /* --tokens @FILE: t0, t1, ... one per query */
        char text[4096];
        size_t n = 0;
        for (int64_t i = 0; i < L && n + 16 < sizeof text; i++) n += (size_t)snprintf(text + n, sizeof text - n, "t%lld\r\n", (long long)i);
        if (name[0] == 'n') text[1] = 0;
        if (test_write_file(path, text, n)) fail_msg("writing %s", path);
        return true;
    }
    if (!strcmp(name, "vec_d") || !strcmp(name, "vec_dv")) { /* a row for trace --replace SEL=FILE */
        const int64_t width[1] = {name[5] ? Dv : D};
        float *vector = draw_array(x, width[0], FT_F32, 1);
        test_save_f32(path, 1, width, vector);
        free(vector);
        return true;
    }
    if (!strcmp(name, "attnw")) {
        oracle_case c;
        double *w = oracle_weights(x, f->weights_flags ? f->weights_flags : x->line, &c);
        const int64_t n = B * Hq * L * S, full[4] = {B, Hq, L, S};
        float *wf = malloc(sizeof(float) * (size_t)n);
        for (int64_t e = 0; e < n; e++) wf[e] = (float)w[e];
        test_save_f32(path, rank, full + 4 - rank, wf);
        free(w);
        free(wf);
        return true;
    }
    return false;
}

/* -------------------------------------------------- the command line */

/* Splits text at spaces, as the shell does for these rows: '...' and "..."
 * quote (and are removed). */
static void tokenize(const char *text, char *storage, size_t size, char **tok, int *ntok) {
    size_t used = 0;
    *ntok = 0;
    for (const char *p = text; *p;) {
        while (*p == ' ') p++;
        if (!*p) break;
        tok[(*ntok)++] = storage + used;
        while (*p && *p != ' ' && used + 1 < size) {
            if (*p == '\'' || *p == '"') {
                const char quote = *p++;
                while (*p && *p != quote && used + 1 < size) storage[used++] = *p++;
                if (*p) p++;
            } else {
                storage[used++] = *p++;
            }
        }
        storage[used++] = 0;
        if (*ntok == MAX_TOKENS) break;
    }
}

/* The value of flag on the row's command line (its next token, or what
 * follows --flag=); NULL if not given.  A flag given twice: the first. */
static const char *value_in(char **tok, int ntok, const char *flag) {
    const size_t n = strlen(flag);
    for (int i = 0; i < ntok; i++) {
        if (strcmp(tok[i], flag) == 0) return i + 1 < ntok ? tok[i + 1] : NULL;
        if (strncmp(tok[i], flag, n) == 0 && tok[i][n] == '=' && flag[1] == '-') return tok[i] + n + 1;
    }
    return NULL;
}

static const char *flag_value(const run *x, const char *flag) { return value_in((char **)x->tok, x->ntok, flag); }

static bool has_flag(const run *x, const char *flag) {
    const size_t n = strlen(flag);
    for (int i = 0; i < x->ntok; i++)
        if (strcmp(x->tok[i], flag) == 0 || (strncmp(x->tok[i], flag, n) == 0 && x->tok[i][n] == '=')) return true;
    return false;
}

/* The problem the mask and computation options on a command line describe,
 * read as the documentation (--help) says; the files they name are the
 * fixture's.  Values that do not parse are left out: such rows are errors. */
static void parse_flags(run *x, char **tok, int ntok, oracle_case *c) {
    const fixture *f = &x->f;
    *c = (oracle_case){.B = f->B, .L = f->L, .S = f->S, .Hq = f->Hq, .Hkv = f->Hkv, .D = f->D, .Dv = f->Dv};
    for (int i = 0; i < ntok; i++) {
        const char *t = tok[i], *eq = strncmp(t, "--", 2) == 0 ? strchr(t, '=') : NULL;
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)(eq ? eq - t : (long)strlen(t)), t);
        const char *value = eq ? eq + 1 : i + 1 < ntok ? tok[i + 1] : "";
        if (!strcmp(name, "--causal")) c->causal = 1;
        else if (!strcmp(name, "--causal-lower-right")) c->causal = 2;
        else if (!strcmp(name, "--align")) c->lower_right_window = !strcmp(value, "lower-right");
        else if (!strcmp(name, "--window")) {
            char *end;
            c->left = strtoll(value, &end, 10);
            if (*end == ',') c->right = strtoll(end + 1, NULL, 10), c->window = 1;
        } else if (!strcmp(name, "--scale") && !strchr(value, '=')) {
            c->scale = (double)(float)strtod(value, NULL); /* the program holds it as a float */
        } else if (!strcmp(name, "--key-lengths")) {
            c->key_lengths = x->lens;
        } else if (!strcmp(name, "--mask")) {
            c->mask = x->mask;
            memcpy(c->mask_shape, f->mask.shape, sizeof c->mask_shape);
        } else if (!strcmp(name, "--bias")) {
            c->bias = x->bias;
            memcpy(c->bias_shape, f->bias.shape, sizeof c->bias_shape);
        }
    }
}

typedef struct needed {
    char names[48][16];
    char paths[48][700];
    int count;
} needed;

/* Expands the placeholders of text into out: inputs in the row's folder
 * (their names added to need), outputs in out_dir (their file names
 * recorded when record). */
static void expand(run *x, const char *text, const char *out_dir, char *out, size_t size, needed *need, bool record) {
    size_t used = 0;
    for (const char *p = text; *p && used + 1 < size;) {
        if (*p != '{') {
            out[used++] = *p++;
            continue;
        }
        const char *end = strchr(p, '}');
        if (!end) fail_msg("an unclosed placeholder in '%s'", text);
        const size_t len = (size_t)(end - p - 1);
        char file[128], path[700];
        placeholder_file(p + 1, len, file, sizeof file);
        const bool input = is_input(p + 1, len);
        snprintf(path, sizeof path, "%s/%s", input ? x->dir : out_dir, file);
        if (input && need->count < 48) {
            snprintf(need->names[need->count], sizeof need->names[0], "%.*s", (int)len, p + 1);
            snprintf(need->paths[need->count], sizeof need->paths[0], "%s", path);
            need->count++;
        } else if (!input && record && x->n_outputs < MAX_OUTPUTS) {
            snprintf(x->outputs[x->n_outputs++], sizeof x->outputs[0], "%s", file);
        }
        used += (size_t)snprintf(out + used, size - used, "%s", path);
        p = end + 1;
    }
    out[used < size ? used : size - 1] = 0;
}

static void make_inputs(run *x, const needed *need) {
    for (int n = 0; n < need->count; n++) {
        bool made = false;
        for (int m = 0; m < x->n_made; m++) made |= strcmp(x->made[m], need->names[n]) == 0;
        if (made) continue;
        if (!make_input(x, need->names[n], need->paths[n])) fail_msg("no generator for {%s}", need->names[n]);
        snprintf(x->made[x->n_made++], sizeof x->made[0], "%s", need->names[n]);
    }
}

/* ------------------------------------------------ reading what was written */

static const char *shape_str(const attn_array *a, char *buf, size_t size) {
    size_t n = (size_t)snprintf(buf, size, "[");
    for (int d = 0; d < a->ndim && n < size; d++) n += (size_t)snprintf(buf + n, size - n, "%s%lld", d ? ", " : "", (long long)a->shape[d]);
    if (n < size) snprintf(buf + n, size - n, "]");
    return buf;
}

/* A float32 output of this shape, or NULL (the row failed, saying why). */
static float *load_output(run *x, const char *what, const char *path, int ndim, const int64_t *shape) {
    attn_array a = {0};
    if (attn_npy_load(path, &a)) {
        run_fail(x, "%s: %s", what, attn_last_error());
        return NULL;
    }
    bool ok = a.dtype == ATTN_F32 && a.ndim == ndim;
    for (int d = 0; ok && d < ndim; d++) ok = a.shape[d] == shape[d];
    if (!ok) {
        char got[128], want[128];
        attn_array expected = {.ndim = ndim};
        memcpy(expected.shape, shape, sizeof(int64_t) * (size_t)ndim);
        run_fail(x, "%s '%s' is %s %s, want float32 %s", what, path, attn_dtype_name(a.dtype),
                 shape_str(&a, got, sizeof got), shape_str(&expected, want, sizeof want));
        attn_array_free(&a);
        return NULL;
    }
    return a.data;
}

/* A q/k/v-shaped output (BLHD sizes s) read in the row's rank and layout,
 * returned in BLHD order; NULL after a failure. */
static float *load_qkv_output(run *x, const char *flag, const int64_t s[4]) {
    const char *path = flag_value(x, flag);
    int64_t shape[4];
    const bool bhld = x->bhld && x->f.rank > 2;
    const int ndim = qkv_file_shape(s, x->f.rank, bhld, shape);
    float *got = load_output(x, flag, path, ndim, shape);
    if (!got || !bhld) return got;
    const int64_t file[4] = {s[0], s[2], s[1], s[3]};
    float *blhd = swap_middle(got, file);
    free(got);
    return blhd;
}

/* max |want - got| <= tol (times max(1, max |want|) when relative). */
static void expect_near(run *x, const char *what, const double *want, const float *got, int64_t n, double tol, bool relative) {
    const double scale = relative ? fmax(1.0, max_abs(want, n)) : 1.0, diff = max_abs_diff(want, got, n);
    if (!(diff <= tol * scale)) run_fail(x, "%s: max |diff| %.3g against the oracle (allowed %.3g)", what, diff, tol * scale);
}

static double *to_double(const float *data, int64_t n) {
    double *d = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
    for (int64_t e = 0; e < n; e++) d[e] = data[e];
    return d;
}

static void expect_near_f(run *x, const char *what, const float *want, const float *got, int64_t n, double tol) {
    double *wd = to_double(want, n);
    expect_near(x, what, wd, got, n, tol, true);
    free(wd);
}

/* Rows the oracle says see no key ([B, Hq, L] lse -inf) must hold exactly 0
 * in out [B, L, Hq, Dv] and weights [B, Hq, L, S] (either may be NULL);
 * returns how many such rows there are. */
static int64_t check_masked_rows(run *x, const double *lse, const float *out, const float *w) {
    const fixture *f = &x->f;
    int64_t masked = 0;
    for (int64_t b = 0; b < f->B; b++)
        for (int64_t h = 0; h < f->Hq; h++)
            for (int64_t i = 0; i < f->L; i++) {
                if (lse[(b * f->Hq + h) * f->L + i] != -INFINITY) continue;
                masked++;
                for (int64_t d = 0; out && d < f->Dv; d++)
                    if (out[((b * f->L + i) * f->Hq + h) * f->Dv + d] != 0.0f)
                        return run_fail(x, "fully masked row (b %lld, h %lld, i %lld): output not exactly 0", (long long)b,
                                        (long long)h, (long long)i), masked;
                for (int64_t j = 0; w && j < f->S; j++)
                    if (w[((b * f->Hq + h) * f->L + i) * f->S + j] != 0.0f)
                        return run_fail(x, "fully masked row (b %lld, h %lld, i %lld): weights not exactly 0", (long long)b,
                                        (long long)h, (long long)i), masked;
            }
    return masked;
}

/* ------------------------------------------------------------ sdpa, mha */

static attn_sdpa_options reference_options(const oracle_case *c) {
    const random_case problem = {.c = *c};
    attn_sdpa_options opt = random_case_options(&problem);
    opt.kernel = ATTN_KERNEL_REF;
    return opt;
}

static void check_sdpa(run *x) {
    const fixture *f = &x->f;
    const int64_t B = f->B, L = f->L, S = f->S, Hq = f->Hq, Hkv = f->Hkv, D = f->D, Dv = f->Dv;
    const int drop = 4 - f->rank;
    const int64_t so[4] = {B, L, Hq, Dv}, wshape[4] = {B, Hq, L, S};
    const int64_t n_out = B * L * Hq * Dv, n_w = B * Hq * L * S, n_lse = B * Hq * L;
    double *want_o = malloc(sizeof(double) * (size_t)n_out), *want_w = malloc(sizeof(double) * (size_t)n_w),
           *want_lse = malloc(sizeof(double) * (size_t)n_lse);
    oracle_attention(&x->c, x->q, x->k, x->v, want_o, want_w, want_lse);
    float *o = flag_value(x, "-o") ? load_qkv_output(x, "-o", so) : NULL;
    float *w = flag_value(x, "--weights") ? load_output(x, "--weights", flag_value(x, "--weights"), 4 - drop, wshape + drop) : NULL;
    float *lse = flag_value(x, "--lse") ? load_output(x, "--lse", flag_value(x, "--lse"), 3 - drop, wshape + drop) : NULL;
    if (o) expect_near(x, "-o", want_o, o, n_out, CLI_OUT_REL_FAIL, true);
    if (w) expect_near(x, "--weights", want_w, w, n_w, CLI_WEIGHT_ABS_FAIL, false);
    if (lse) expect_near(x, "--lse", want_lse, lse, n_lse, CLI_LSE_ABS_FAIL, false);
    const int64_t masked = check_masked_rows(x, want_lse, o, w);
    if (x->r->masked_rows && !masked) run_fail(x, "the row is meant to have fully masked rows; the oracle has none");

    if (flag_value(x, "--dq") || flag_value(x, "--dk") || flag_value(x, "--dv")) {
        const int64_t sq[4] = {B, L, Hq, D}, sk[4] = {B, S, Hkv, D}, sv[4] = {B, S, Hkv, Dv};
        float *want[3] = {malloc(sizeof(float) * (size_t)(B * L * Hq * D)), malloc(sizeof(float) * (size_t)(B * S * Hkv * D)),
                          malloc(sizeof(float) * (size_t)(B * S * Hkv * Dv))};
        attn_tensor q = attn_tensor_4d(x->q, B, L, Hq, D), k = attn_tensor_4d(x->k, B, S, Hkv, D),
                    v = attn_tensor_4d(x->v, B, S, Hkv, Dv), dot = attn_tensor_4d(x->dout, B, L, Hq, Dv),
                    dq = attn_tensor_4d(want[0], B, L, Hq, D), dk = attn_tensor_4d(want[1], B, S, Hkv, D),
                    dv = attn_tensor_4d(want[2], B, S, Hkv, Dv);
        const attn_sdpa_options opt = reference_options(&x->c);
        if (attn_sdpa_backward(&q, &k, &v, &opt, NULL, NULL, &dot, &dq, &dk, &dv))
            fail_msg("the reference backward: %s", attn_last_error());
        static const char *const flags[3] = {"--dq", "--dk", "--dv"};
        const int64_t *shapes[3] = {sq, sk, sv};
        for (int g = 0; g < 3; g++) {
            if (!flag_value(x, flags[g])) continue;
            float *got = load_qkv_output(x, flags[g], shapes[g]);
            const int64_t n = shapes[g][0] * shapes[g][1] * shapes[g][2] * shapes[g][3];
            if (got) expect_near_f(x, flags[g], want[g], got, n, CLI_GRAD_REL_FAIL);
            free(got);
        }
        for (int g = 0; g < 3; g++) free(want[g]);
    }
    free(o); free(w); free(lse); free(want_o); free(want_w); free(want_lse);
}

/* The module's q, k, v (projections in long double, held as float), from
 * the base or the changed inputs; the biases and W_O the row gives. */
static void module_qkv(run *x, const float *xin, const float *ctxin, float *q, float *k, float *v) {
    const fixture *f = &x->f;
    const float *c = f->dc ? ctxin : xin;
    oracle_project(xin, f->B * f->L, f->dm, x->mod[WQ], has_flag(x, "--bq") ? x->mod[BQ] : NULL, f->Hq * f->D, q);
    oracle_project(c, f->B * f->S, dctx(x), x->mod[WK], has_flag(x, "--bk") ? x->mod[BK] : NULL, f->Hkv * f->D, k);
    oracle_project(c, f->B * f->S, dctx(x), x->mod[WV], has_flag(x, "--bv") ? x->mod[BV] : NULL, f->Hkv * f->Dv, v);
}

static attn_mha module_of(const run *x) {
    const fixture *f = &x->f;
    return (attn_mha){.struct_size = sizeof(attn_mha), .d_model = f->dm, .d_context = dctx(x), .heads = f->Hq,
                      .kv_heads = f->Hkv, .head_dim = f->D, .value_dim = f->Dv, .d_out = width_out(x, x->with_wo),
                      .wq = x->mod[WQ], .wk = x->mod[WK], .wv = x->mod[WV], .wo = x->with_wo ? x->mod[WO] : NULL,
                      .bq = has_flag(x, "--bq") ? x->mod[BQ] : NULL, .bk = has_flag(x, "--bk") ? x->mod[BK] : NULL,
                      .bv = has_flag(x, "--bv") ? x->mod[BV] : NULL, .bo = has_flag(x, "--bo") ? x->mod[BO] : NULL};
}

static void check_mha(run *x) {
    const fixture *f = &x->f;
    const int64_t B = f->B, L = f->L, S = f->S, Hq = f->Hq, Hkv = f->Hkv, D = f->D, Dv = f->Dv;
    const int64_t dout = width_out(x, x->with_wo), drop = f->rank == 2;
    float *q = malloc(sizeof(float) * (size_t)(B * L * Hq * D)), *k = malloc(sizeof(float) * (size_t)(B * S * Hkv * D)),
          *v = malloc(sizeof(float) * (size_t)(B * S * Hkv * Dv));
    module_qkv(x, x->x, x->ctx, q, k, v);
    double *z = malloc(sizeof(double) * (size_t)(B * L * Hq * Dv)), *want_w = malloc(sizeof(double) * (size_t)(B * Hq * L * S)),
           *want_lse = malloc(sizeof(double) * (size_t)(B * Hq * L)), *want = malloc(sizeof(double) * (size_t)(B * L * dout));
    oracle_attention(&x->c, q, k, v, z, want_w, want_lse);
    const attn_mha m = module_of(x);
    oracle_output_projection(z, B * L, Hq * Dv, m.wo, m.bo, dout, want);
    const int64_t oshape[3] = {B, L, dout}, wshape[4] = {B, Hq, L, S};
    float *o = flag_value(x, "-o") ? load_output(x, "-o", flag_value(x, "-o"), 3 - (int)drop, oshape + drop) : NULL;
    float *w = flag_value(x, "--weights") ? load_output(x, "--weights", flag_value(x, "--weights"), 4 - (int)drop, wshape + drop) : NULL;
    float *lse = flag_value(x, "--lse") ? load_output(x, "--lse", flag_value(x, "--lse"), 3 - (int)drop, wshape + drop) : NULL;
    if (o) expect_near(x, "-o", want, o, B * L * dout, MHA_OUT_REL_FAIL, true);
    if (w) expect_near(x, "--weights", want_w, w, B * Hq * L * S, MHA_WEIGHT_ABS_FAIL, false);
    if (lse) expect_near(x, "--lse", want_lse, lse, B * Hq * L, CLI_LSE_ABS_FAIL, false);
    const int64_t masked = check_masked_rows(x, want_lse, NULL, w);
    if (x->r->masked_rows && !masked) run_fail(x, "the row is meant to have fully masked rows; the oracle has none");

    if (flag_value(x, "--grad-out")) {
        static const char *const flags[10] = {"--dx", "--dcontext", "--dwq", "--dwk", "--dwv", "--dwo", "--dbq", "--dbk", "--dbv", "--dbo"};
        int64_t shapes[10][3], ranks[10], counts[10];
        float *want_g[10];
        for (int g = 0; g < 10; g++) {
            if (g < 2) {
                const int64_t s3[3] = {B, g ? S : L, g ? dctx(x) : f->dm};
                ranks[g] = 3 - drop;
                memcpy(shapes[g], s3 + drop, sizeof(int64_t) * (size_t)ranks[g]);
                counts[g] = B * s3[1] * s3[2];
            } else {
                int64_t rows, cols;
                mod_shape(x, g - 2, &rows, &cols);
                if (g == 9) cols = dout;
                ranks[g] = g < 6 ? 2 : 1;
                shapes[g][0] = g < 6 ? (x->torch ? cols : rows) : cols;
                shapes[g][1] = x->torch ? rows : cols;
                counts[g] = g < 6 ? rows * cols : cols;
            }
            want_g[g] = malloc(sizeof(float) * (size_t)counts[g]);
        }
        attn_mha_grads grads = {sizeof(attn_mha_grads), want_g[0], f->dc ? want_g[1] : NULL, want_g[2], want_g[3], want_g[4],
                                x->with_wo ? want_g[5] : NULL, want_g[6], want_g[7], want_g[8], want_g[9]};
        const attn_sdpa_options opt = reference_options(&x->c);
        if (attn_mha_backward(&m, x->x, B, L, f->dc ? x->ctx : NULL, S, &opt, x->mdout, &grads))
            fail_msg("the reference module backward: %s", attn_last_error());
        for (int g = 0; g < 10; g++) {
            const char *path = flag_value(x, flags[g]);
            if (!path) continue;
            float *got = load_output(x, flags[g], path, (int)ranks[g], shapes[g]);
            if (got && x->torch && g >= 2 && g < 6) { /* the file holds dW^T */
                float *back = malloc(sizeof(float) * (size_t)counts[g]);
                for (int64_t i = 0; i < shapes[g][1]; i++)
                    for (int64_t j = 0; j < shapes[g][0]; j++) back[i * shapes[g][0] + j] = got[j * shapes[g][1] + i];
                free(got);
                got = back;
            }
            if (got) expect_near_f(x, flags[g], want_g[g], got, counts[g], CLI_GRAD_REL_FAIL);
            free(got);
        }
        for (int g = 0; g < 10; g++) free(want_g[g]);
    }
    free(q); free(k); free(v); free(z); free(want_w); free(want_lse); free(want); free(o); free(w); free(lse);
}

/* --------------------------------------------------------------- trace */

/* A patch selector's field: empty or * = every index. */
static int64_t selector_field(const char **p) {
    if (**p != ':') return ATTN_ALL;
    (*p)++;
    if (**p == ':' || **p == '=' || !**p || **p == '*') {
        if (**p == '*') (*p)++;
        return ATTN_ALL;
    }
    return strtoll(*p, (char **)p, 10);
}

static bool selected(int64_t want, int64_t index) { return want == ATTN_ALL || want == index; }

/* One stage of the row's patches: the pattern's (--scale SEL=F, --zero SEL
 * on hook_pattern; touched rows marked) or z's (--zero z:.., --scale z:..=F,
 * --ablate H). */
static bool patch_stage(run *x, bool on_pattern_stage, double *pattern, double *z, unsigned char *touched) {
    const fixture *f = &x->f;
    const int64_t B = f->B, L = f->L, S = f->S, Hq = f->Hq, Dv = f->Dv;
    const char *batch_text = flag_value(x, "--batch");
    const int64_t batch = batch_text ? strtoll(batch_text, NULL, 10) : ATTN_ALL;
    bool any = false;
    for (int i = 0; i + 1 < x->ntok; i++) {
        const char *flag = x->tok[i], *sel = x->tok[i + 1];
        const bool scale = !strcmp(flag, "--scale") && strchr(sel, '='), zero = !strcmp(flag, "--zero");
        const bool ablate = !strcmp(flag, "--ablate");
        if (!scale && !zero && !ablate) continue;
        const char *hook = strncmp(sel, "hook_", 5) ? sel : sel + 5;
        const size_t hook_len = strcspn(hook, ":=");
        const bool on_pattern = !ablate && hook_len == 7 && !strncmp(hook, "pattern", 7);
        const bool on_z = ablate || (hook_len == 1 && hook[0] == 'z');
        if (on_pattern_stage ? !on_pattern : !on_z) continue; /* q, k, v: patch_qkv */
        const char *p = sel + strcspn(sel, ":=");
        const int64_t pos = ablate ? ATTN_ALL : selector_field(&p);
        const int64_t head = ablate ? strtoll(sel, NULL, 10) : selector_field(&p);
        const int64_t key = ablate ? ATTN_ALL : selector_field(&p);
        const double factor = scale ? strtod(strchr(sel, '=') + 1, NULL) : 0.0;
        for (int64_t b = 0; b < B; b++)
            for (int64_t h = 0; h < Hq; h++)
                for (int64_t l = 0; l < L; l++) {
                    if (!selected(batch, b) || !selected(head, h) || !selected(pos, l)) continue;
                    any = true;
                    if (on_pattern) {
                        for (int64_t j = 0; j < S; j++)
                            if (selected(key, j)) pattern[((b * Hq + h) * L + l) * S + j] *= factor;
                        touched[(b * Hq + h) * L + l] = 1;
                    } else {
                        for (int64_t d = 0; d < Dv; d++) z[((b * L + l) * Hq + h) * Dv + d] *= factor;
                    }
                }
    }
    return any;
}

/* The row's patches applied to pattern [B, Hq, L, S] and z [B, L, Hq, Dv]
 * as attn_interp.h documents them: the pattern's first, each touched row
 * renormalised if asked, then z = pattern . v, then z's. */
static void apply_patches(run *x, double *pattern, double *z, const float *v) {
    const fixture *f = &x->f;
    const int64_t B = f->B, L = f->L, S = f->S, Hq = f->Hq, Hkv = f->Hkv, Dv = f->Dv;
    unsigned char *touched = calloc((size_t)(B * Hq * L), 1);
    if (patch_stage(x, true, pattern, z, touched)) {
        for (int64_t r = 0; r < B * Hq * L; r++) {
            if (!touched[r] || !has_flag(x, "--renormalise")) continue;
            long double sum = 0;
            for (int64_t j = 0; j < S; j++) sum += pattern[r * S + j];
            for (int64_t j = 0; sum > 0 && j < S; j++) pattern[r * S + j] = (double)(pattern[r * S + j] / sum);
        }
        for (int64_t b = 0; b < B; b++)
            for (int64_t h = 0; h < Hq; h++)
                for (int64_t l = 0; l < L; l++)
                    for (int64_t d = 0; d < Dv; d++) {
                        long double acc = 0;
                        for (int64_t j = 0; j < S; j++)
                            acc += (long double)pattern[((b * Hq + h) * L + l) * S + j] * v[((b * S + j) * Hkv + h / (Hq / Hkv)) * Dv + d];
                        z[((b * L + l) * Hq + h) * Dv + d] = (double)acc;
                    }
    }
    patch_stage(x, false, pattern, z, touched);
    free(touched);
}

/* The row's q, k and v patches (--replace HOOK:..=FILE or =source, --zero
 * HOOK:.., --scale HOOK:..=F), in order, on t = q [B, L, Hq, D], k [B, S,
 * Hkv, D], v [B, S, Hkv, Dv]; source: the source run's. */
static void patch_qkv(run *x, float *const t[3], float *const source[3]) {
    const fixture *f = &x->f;
    const int64_t P[3] = {f->L, f->S, f->S}, H[3] = {f->Hq, f->Hkv, f->Hkv}, W[3] = {f->D, f->D, f->Dv};
    const char *batch_text = flag_value(x, "--batch");
    const int64_t batch = batch_text ? strtoll(batch_text, NULL, 10) : ATTN_ALL;
    for (int i = 0; i + 1 < x->ntok; i++) {
        const char *flag = x->tok[i], *sel = x->tok[i + 1];
        const bool replace = !strcmp(flag, "--replace"), zero = !strcmp(flag, "--zero");
        const bool scale = !strcmp(flag, "--scale") && strchr(sel, '=');
        if (!replace && !zero && !scale) continue;
        const char *name = strncmp(sel, "hook_", 5) ? sel : sel + 5;
        const int n = name[0] == 'q' ? 0 : name[0] == 'k' ? 1 : name[0] == 'v' ? 2 : -1;
        if (n < 0 || (name[1] != ':' && name[1] != '=' && name[1])) continue;
        const char *p = name + 1, *eq = strchr(sel, '=');
        const int64_t pos = selector_field(&p), head = selector_field(&p);
        attn_array file = {0};
        if (replace && strcmp(eq + 1, "source") && (attn_npy_load(eq + 1, &file) || attn_array_convert(&file, ATTN_F32)))
            fail_msg("reading back %s: %s", eq + 1, attn_last_error());
        for (int64_t b = 0; b < f->B; b++)
            for (int64_t pp = 0; pp < P[n]; pp++)
                for (int64_t h = 0; h < H[n]; h++) {
                    if (!selected(batch, b) || !selected(pos, pp) || !selected(head, h)) continue;
                    float *dst = t[n] + ((b * P[n] + pp) * H[n] + h) * W[n];
                    const float *from = file.data ? file.data : source[n] + (dst - t[n]);
                    for (int64_t d = 0; d < W[n]; d++) dst[d] = replace ? from[d] : zero ? 0.0f : dst[d] * strtof(eq + 1, NULL);
                }
        attn_array_free(&file);
    }
}

/* DIR/HOOK.npy is [b, p, h, w] (h = 0: [b, p, w]) and holds want. */
static void check_hook(run *x, const char *dir, const char *hook, int64_t b, int64_t p, int64_t h, int64_t w,
                       const double *want, double tol, bool relative) {
    char path[800];
    snprintf(path, sizeof path, "%s/%s.npy", dir, hook);
    const int64_t shape[4] = {b, p, h, w};
    const int ndim = h ? 4 : 3;
    const int64_t shape3[3] = {b, p, w};
    float *got = load_output(x, hook, path, ndim, ndim == 4 ? shape : shape3);
    if (got) expect_near(x, hook, want, got, b * p * (h ? h : 1) * w, tol, relative);
    free(got);
}

static void check_trace(run *x) {
    const fixture *f = &x->f;
    const bool module = flag_value(x, "-x") != NULL;
    const int64_t B = f->B, L = f->L, S = f->S, Hq = f->Hq, Hkv = f->Hkv, D = f->D, Dv = f->Dv;
    const int64_t nq = B * L * Hq * D, nk = B * S * Hkv * D, nv = B * S * Hkv * Dv;
    float *q = malloc(sizeof(float) * (size_t)nq), *k = malloc(sizeof(float) * (size_t)nk), *v = malloc(sizeof(float) * (size_t)nv);
    float *sq = malloc(sizeof(float) * (size_t)nq), *sk = malloc(sizeof(float) * (size_t)nk), *sv = malloc(sizeof(float) * (size_t)nv);
    if (module) {
        /* the source run: --source X2 (and --source-context C2), each defaulting to the base's */
        module_qkv(x, x->x, x->ctx, q, k, v);
        module_qkv(x, flag_value(x, "--source") ? x->x2 : x->x, flag_value(x, "--source-context") ? x->ctx2 : x->ctx, sq, sk, sv);
    } else {
        memcpy(q, x->q, sizeof(float) * (size_t)nq), memcpy(k, x->k, sizeof(float) * (size_t)nk), memcpy(v, x->v, sizeof(float) * (size_t)nv);
        memcpy(sq, flag_value(x, "--source-q") ? x->q2 : x->q, sizeof(float) * (size_t)nq);
        memcpy(sk, flag_value(x, "--source-k") ? x->k2 : x->k, sizeof(float) * (size_t)nk);
        memcpy(sv, flag_value(x, "--source-v") ? x->v2 : x->v, sizeof(float) * (size_t)nv);
    }
    patch_qkv(x, (float *const[3]){q, k, v}, (float *const[3]){sq, sk, sv});
    free(sq), free(sk), free(sv);
    double *z = malloc(sizeof(double) * (size_t)(B * L * Hq * Dv)), *pattern = malloc(sizeof(double) * (size_t)(B * Hq * L * S)),
           *scores = malloc(sizeof(double) * (size_t)(B * Hq * L * S)), *lse = malloc(sizeof(double) * (size_t)(B * Hq * L));
    oracle_attention_scores(&x->c, q, k, v, z, pattern, lse, scores);
    if (x->r->masked_rows && !check_masked_rows(x, lse, NULL, NULL))
        run_fail(x, "the row is meant to have fully masked rows; the oracle has none");
    apply_patches(x, pattern, z, v);
    /* a module: each head through its slice of W_O (hook_result), summed with bo (hook_attn_out) */
    const attn_mha m = module_of(x);
    const int64_t dout = width_out(x, x->with_wo);
    double *result = malloc(sizeof(double) * (size_t)(B * L * Hq * dout)), *out = malloc(sizeof(double) * (size_t)(B * L * dout));
    for (int64_t r = 0; module && r < B * L; r++)
        for (int64_t c = 0; c < dout; c++) {
            long double total = m.bo ? m.bo[c] : 0;
            for (int64_t h = 0; h < Hq; h++) {
                long double acc = 0;
                for (int64_t d = 0; d < Dv; d++)
                    acc += (long double)z[(r * Hq + h) * Dv + d] * (m.wo ? m.wo[(h * Dv + d) * dout + c] : (h * Dv + d == c));
                result[(r * Hq + h) * dout + c] = (double)acc;
                total += acc;
            }
            out[r * dout + c] = (double)total;
        }
    const char *dir = flag_value(x, "--dir");
    if (dir) {
        double *dq = to_double(q, B * L * Hq * D), *dk = to_double(k, B * S * Hkv * D), *dv = to_double(v, B * S * Hkv * Dv);
        /* bare attention's q, k, v are the files' values exactly; a module's its projections */
        const double exact = module ? CLI_OUT_REL_FAIL : 0;
        check_hook(x, dir, "hook_q", B, L, Hq, D, dq, exact, true);
        check_hook(x, dir, "hook_k", B, S, Hkv, D, dk, exact, true);
        check_hook(x, dir, "hook_v", B, S, Hkv, Dv, dv, exact, true);
        check_hook(x, dir, "hook_attn_scores", B, Hq, L, S, scores, CLI_SCORES_REL_FAIL, true);
        check_hook(x, dir, "hook_pattern", B, Hq, L, S, pattern, CLI_WEIGHT_ABS_FAIL, false);
        check_hook(x, dir, "hook_z", B, L, Hq, Dv, z, CLI_OUT_REL_FAIL, true);
        char path[800];
        if (module) {
            check_hook(x, dir, "hook_result", B, L, Hq, dout, result, MHA_OUT_REL_FAIL, true);
            check_hook(x, dir, "hook_attn_out", B, L, 0, dout, out, MHA_OUT_REL_FAIL, true);
        } else if (snprintf(path, sizeof path, "%s/hook_result.npy", dir) > 0 && test_file_exists(path)) {
            run_fail(x, "bare attention wrote %s", path);
        }
        free(dq); free(dk); free(dv);
    }
    if (flag_value(x, "-o")) {
        if (module) {
            const int64_t shape[3] = {B, L, dout}, drop = f->rank == 2;
            float *got = load_output(x, "-o", flag_value(x, "-o"), 3 - (int)drop, shape + drop);
            if (got) expect_near(x, "-o", out, got, B * L * dout, MHA_OUT_REL_FAIL, true);
            free(got);
        } else {
            const int64_t so[4] = {B, L, Hq, Dv};
            float *got = load_qkv_output(x, "-o", so);
            if (got) expect_near(x, "-o", z, got, B * L * Hq * Dv, CLI_OUT_REL_FAIL, true);
            free(got);
        }
    }
    free(q), free(k), free(v);
    free(z); free(pattern); free(scores); free(lse); free(result); free(out);
}

/* --------------------------------------------------------------- paths */

/* The n numbers after the next `key` in *at (skipping brackets, commas and
 * spaces); moves *at past them.  False if the key or a number is missing. */
static bool read_numbers(const char **at, const char *key, double *out, int64_t n) {
    const char *p = strstr(*at, key);
    if (!p) return false;
    p += strlen(key);
    for (int64_t e = 0; e < n; e++) {
        while (*p && strchr(" \n[],:", *p)) p++;
        char *end;
        out[e] = strtod(p, &end);
        if (end == p) return false;
        p = end;
    }
    *at = p;
    return true;
}

/* The five runs of Figure 2 and the interaction:
 * base (q, k, v), K only (q, k', v), V only (q, k, v'), both (q, k', v'),
 * changed (q', k', v'), each changed tensor defaulting to the base's. */
static void check_paths(run *x) {
    const fixture *f = &x->f;
    const bool module = flag_value(x, "--base") != NULL;
    const int64_t B = f->B, L = f->L, S = f->S, Hq = f->Hq, Hkv = f->Hkv, D = f->D, Dv = f->Dv;
    const int64_t nq = B * L * Hq * D, nk = B * S * Hkv * D, nv = B * S * Hkv * Dv, nz = B * L * Hq * Dv, nw = B * Hq * L * S;
    float *base[3] = {x->q, x->k, x->v}, *changed[3] = {flag_value(x, "--changed-q") ? x->q2 : x->q,
                                                         flag_value(x, "--changed-k") ? x->k2 : x->k,
                                                         flag_value(x, "--changed-v") ? x->v2 : x->v};
    if (module) {
        for (int n = 0; n < 3; n++) {
            base[n] = malloc(sizeof(float) * (size_t)(n == 0 ? nq : n == 1 ? nk : nv));
            changed[n] = malloc(sizeof(float) * (size_t)(n == 0 ? nq : n == 1 ? nk : nv));
        }
        module_qkv(x, x->x, x->ctx, base[0], base[1], base[2]);
        module_qkv(x, x->x2, flag_value(x, "--changed-context") ? x->ctx2 : x->ctx, changed[0], changed[1], changed[2]);
    }
    static const int use_changed[5][3] = {{0, 0, 0}, {0, 1, 0}, {0, 0, 1}, {0, 1, 1}, {1, 1, 1}};
    double *z[5], *w[5], *lse = malloc(sizeof(double) * (size_t)(B * Hq * L));
    for (int c = 0; c < 5; c++) {
        z[c] = malloc(sizeof(double) * (size_t)nz), w[c] = malloc(sizeof(double) * (size_t)nw);
        const float *t[3];
        for (int n = 0; n < 3; n++) t[n] = use_changed[c][n] ? changed[n] : base[n];
        oracle_attention(&x->c, t[0], t[1], t[2], z[c], w[c], lse);
    }
    if (x->r->masked_rows && !check_masked_rows(x, lse, NULL, NULL))
        run_fail(x, "the row is meant to have fully masked rows; the oracle has none");
    const char *sel_text[3] = {flag_value(x, "--batch"), flag_value(x, "--head"), flag_value(x, "--query")};
    int64_t sel[3];
    for (int n = 0; n < 3; n++) sel[n] = sel_text[n] ? strtoll(sel_text[n], NULL, 10) : ATTN_ALL;
    const double z_scale = fmax(1.0, max_abs(z[0], nz));
    /* the rows (per batch, query, head), then, for a module, attn_out (per batch, query) */
    char *json = strdup(x->output), *attn_out = strstr(json, "\"attn_out\":");
    if (attn_out) *attn_out++ = 0;
    const char *at = json;
    int64_t rows = 0, want_rows = 0;
    double *got = malloc(sizeof(double) * (size_t)(5 * (S > Dv ? S : Dv) + 3));
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < L; i++)
            for (int64_t h = 0; h < Hq; h++) want_rows += selected(sel[0], b) && selected(sel[2], i) && selected(sel[1], h);
    double id[3];
    while (read_numbers(&at, "{\"batch\":", id, 1) && read_numbers(&at, "\"head\":", id + 1, 1) &&
           read_numbers(&at, "\"query\":", id + 2, 1)) {
        const int64_t b = (int64_t)id[0], h = (int64_t)id[1], i = (int64_t)id[2];
        rows++;
        if (b >= B || h >= Hq || i >= L || !selected(sel[0], b) || !selected(sel[1], h) || !selected(sel[2], i)) {
            run_fail(x, "the JSON has a row (batch %lld, head %lld, query %lld) it should not", (long long)b, (long long)h, (long long)i);
            break;
        }
        if (!read_numbers(&at, "\"weights\":", got, 5 * S)) {
            run_fail(x, "row %lld of the JSON: no weights", (long long)rows);
            break;
        }
        for (int c = 0; c < 5; c++)
            for (int64_t j = 0; j < S; j++)
                if (fabs(got[c * S + j] - w[c][((b * Hq + h) * L + i) * S + j]) > CLI_WEIGHT_ABS_FAIL)
                    run_fail(x, "case %d weight (b %lld, h %lld, i %lld, j %lld): %.9g, the oracle %.9g", c, (long long)b,
                             (long long)h, (long long)i, (long long)j, got[c * S + j], w[c][((b * Hq + h) * L + i) * S + j]);
        if (!read_numbers(&at, "\"z\":", got, 5 * Dv) || !read_numbers(&at, "\"interaction_z\":", got + 5 * Dv, Dv)) {
            run_fail(x, "row %lld of the JSON: no z or interaction_z", (long long)rows);
            break;
        }
        for (int64_t d = 0; d < Dv; d++) {
            const int64_t e = ((b * L + i) * Hq + h) * Dv + d;
            for (int c = 0; c < 5; c++)
                if (fabs(got[c * Dv + d] - z[c][e]) > CLI_OUT_REL_FAIL * z_scale)
                    run_fail(x, "case %d z (b %lld, h %lld, i %lld): %.9g, the oracle %.9g", c, (long long)b, (long long)h,
                             (long long)i, got[c * Dv + d], z[c][e]);
            const double interaction = z[3][e] - z[1][e] - z[2][e] + z[0][e];
            if (fabs(got[5 * Dv + d] - interaction) > CLI_OUT_REL_FAIL * z_scale)
                run_fail(x, "interaction_z (b %lld, h %lld, i %lld): %.9g, the oracle %.9g", (long long)b, (long long)h,
                         (long long)i, got[5 * Dv + d], interaction);
        }
        if (x->failed) break;
    }
    if (rows != want_rows) run_fail(x, "the JSON has %lld rows, want %lld", (long long)rows, (long long)want_rows);
    if (module && !x->failed) {
        /* the module's output per (batch, query), through W_O */
        const attn_mha m = module_of(x);
        const int64_t dout = width_out(x, x->with_wo);
        double *out[5];
        for (int c = 0; c < 5; c++) {
            out[c] = malloc(sizeof(double) * (size_t)(B * L * dout));
            oracle_output_projection(z[c], B * L, Hq * Dv, m.wo, m.bo, dout, out[c]);
        }
        const double scale = fmax(1.0, max_abs(out[0], B * L * dout));
        double *o = malloc(sizeof(double) * (size_t)(6 * dout));
        int64_t out_rows = 0;
        at = attn_out;
        if (!attn_out) run_fail(x, "no attn_out in the module's JSON");
        while (!x->failed && read_numbers(&at, "{\"batch\":", id, 1) && read_numbers(&at, "\"query\":", id + 2, 1)) {
            const int64_t b = (int64_t)id[0], i = (int64_t)id[2];
            if (!read_numbers(&at, "\"out\":", o, 5 * dout) || !read_numbers(&at, "\"interaction_out\":", o + 5 * dout, dout)) {
                run_fail(x, "attn_out row %lld: no out or interaction_out", (long long)out_rows);
                break;
            }
            out_rows++;
            for (int64_t d = 0; d < dout; d++) {
                const int64_t e = (b * L + i) * dout + d;
                for (int c = 0; c < 5; c++)
                    if (fabs(o[c * dout + d] - out[c][e]) > MHA_OUT_REL_FAIL * scale)
                        run_fail(x, "case %d attn_out (b %lld, i %lld): %.9g, the oracle %.9g", c, (long long)b, (long long)i,
                                 o[c * dout + d], out[c][e]);
                const double interaction = out[3][e] - out[1][e] - out[2][e] + out[0][e];
                if (fabs(o[5 * dout + d] - interaction) > MHA_OUT_REL_FAIL * scale)
                    run_fail(x, "interaction_out (b %lld, i %lld): %.9g, the oracle %.9g", (long long)b, (long long)i,
                             o[5 * dout + d], interaction);
            }
        }
        if (!x->failed && out_rows != B * L) run_fail(x, "attn_out has %lld rows, want %lld", (long long)out_rows, (long long)(B * L));
        for (int c = 0; c < 5; c++) free(out[c]);
        free(o);
    }
    if (module)
        for (int n = 0; n < 3; n++) free(base[n]), free(changed[n]);
    for (int c = 0; c < 5; c++) free(z[c]), free(w[c]);
    free(lse);
    free(got);
    free(json);
}

/* ----------------------------------------------------------- nullspace */

/* The number after `key` in text (NAN if missing). */
static double number_after(const char *text, const char *key) {
    const char *p = strstr(text, key);
    return p ? strtod(p + strlen(key), NULL) : NAN;
}

static void check_nullspace(run *x) {
    const fixture *f = &x->f;
    const char *query = flag_value(x, "--query"), *tol_text = flag_value(x, "--tol");
    const int64_t i = query ? strtoll(query, NULL, 10) : 0, S = f->S, Dv = f->Dv;
    const double tol = tol_text ? strtod(tol_text, NULL) : 1e-6;
    double *w = malloc(sizeof(double) * (size_t)S), *values = malloc(sizeof(double) * (size_t)(S * Dv));
    bool *visible = malloc(sizeof(bool) * (size_t)S);
    if (flag_value(x, "--weights")) {
        for (int64_t j = 0; j < S; j++) {
            w[j] = x->rows[i * S + j];
            visible[j] = has_flag(x, "--zero-keys-may-gain") || w[j] != 0;
            for (int64_t d = 0; d < Dv; d++) values[j * Dv + d] = x->vals[j * Dv + d];
        }
    } else {
        const char *bt = flag_value(x, "--batch"), *ht = flag_value(x, "--head");
        const int64_t b = bt ? strtoll(bt, NULL, 10) : 0, h = ht ? strtoll(ht, NULL, 10) : 0;
        const int64_t B = f->B, L = f->L, Hq = f->Hq, Hkv = f->Hkv;
        double *out = malloc(sizeof(double) * (size_t)(B * L * Hq * Dv)), *weights = malloc(sizeof(double) * (size_t)(B * Hq * L * S)),
               *scores = malloc(sizeof(double) * (size_t)(B * Hq * L * S));
        oracle_attention_scores(&x->c, x->q, x->k, x->v, out, weights, NULL, scores);
        for (int64_t j = 0; j < S; j++) {
            w[j] = weights[((b * Hq + h) * L + i) * S + j];
            visible[j] = scores[((b * Hq + h) * L + i) * S + j] != -INFINITY;
            for (int64_t d = 0; d < Dv; d++) values[j * Dv + d] = x->v[((b * S + j) * Hkv + h / (Hq / Hkv)) * Dv + d];
        }
        free(out), free(weights), free(scores);
    }
    const int64_t shape[1] = {S};
    float *moved = load_output(x, "-o", flag_value(x, "-o"), 1, shape);
    if (moved) {
        long double sum = 0, sum_moved = 0, l1 = 0;
        double change = 0;
        for (int64_t j = 0; j < S; j++) {
            if (!(moved[j] >= 0)) run_fail(x, "the moved row's key %lld is %.9g < 0", (long long)j, (double)moved[j]);
            if (!visible[j] && moved[j] != 0) run_fail(x, "hidden key %lld gained weight %.9g", (long long)j, (double)moved[j]);
            sum += w[j], sum_moved += moved[j], l1 += fabsl((long double)moved[j] - w[j]);
        }
        for (int64_t d = 0; d < Dv; d++) {
            long double delta = 0;
            for (int64_t j = 0; j < S; j++) delta += ((long double)moved[j] - w[j]) * values[j * Dv + d];
            change = fmax(change, fabs((double)delta));
        }
        if (fabsl(sum - sum_moved) > CLI_ROW_SUM_ABS_FAIL) run_fail(x, "the moved row sums to %.9Lg, the row to %.9Lg", sum_moved, sum);
        if (change > tol + CLI_NULLSPACE_OUT_ABS_FAIL)
            run_fail(x, "w'.V differs from w.V by %.3g, beyond the tolerance %.3g", change, tol);
        const double printed_l1 = number_after(x->output, "largest L1 move found: ");
        if (!(fabs(printed_l1 - (double)l1) <= CLI_NULLSPACE_L1_ABS_FAIL))
            run_fail(x, "printed L1 move %.9g, the file's row moved %.9Lg", printed_l1, l1);
        const double printed_change = number_after(x->output, "output check: max |change| = ");
        const double printed_tol = number_after(x->output, "<= tolerance ");
        if (!(printed_change <= printed_tol) || !(fabs(printed_tol - tol) <= 1e-2 * tol))
            run_fail(x, "the check line says change %.3g <= tolerance %.3g (tolerance given: %.3g)", printed_change, printed_tol, tol);
        free(moved);
    }
    free(w), free(values), free(visible);
}

/* ---------------------------------------------------- pictures and pages */

/* A picture or page by its magic bytes, by the name's extension; false for
 * a name that is neither. */
static bool check_magic(run *x, const char *path) {
    const char *dot = strrchr(path, '.');
    if (!dot || (strcmp(dot, ".png") && strcmp(dot, ".svg") && strcmp(dot, ".pdf") && strcmp(dot, ".html"))) return false;
    size_t size = 0;
    char *data = test_read_file(path, &size);
    if (!data) return run_fail(x, "%s was not written", path), true;
    const bool ok = !strcmp(dot, ".png")   ? size > 8 && !memcmp(data, "\x89PNG\r\n\x1a\n", 8)
                  : !strcmp(dot, ".pdf")   ? size > 5 && !memcmp(data, "%PDF-", 5) && strstr(data + size - (size > 32 ? 32 : size), "%%EOF")
                  : !strcmp(dot, ".svg")   ? size > 6 && !strncmp(data, "<?xml", 5) && strstr(data, "<svg") && strstr(data, "</svg>")
                                           : size > 15 && !strncasecmp(data, "<!DOCTYPE html>", 15) && strstr(data, "</html>");
    if (!ok) run_fail(x, "%s (%zu bytes) is not a valid %s file", path, size, dot + 1);
    free(data);
    return true;
}

static void check_files(run *x) {
    int checked = 0;
    for (int n = 0; n < x->n_outputs; n++) {
        char path[800];
        snprintf(path, sizeof path, "%s/%s", x->dir, x->outputs[n]);
        checked += check_magic(x, path);
    }
    char files[512];
    snprintf(files, sizeof files, "%s", x->r->files ? x->r->files : "");
    for (char *name = strtok(files, " "); name; name = strtok(NULL, " ")) {
        char path[800];
        snprintf(path, sizeof path, "%s/%s", x->dir, name);
        if (!check_magic(x, path)) fail_msg("the table names %s, which is no picture or page", name);
        checked++;
    }
    if (!checked) fail_msg("a files row without a picture or page to check");
}

/* ----------------------------------------------------------- the runner */

/* The names of the plain files in dir (at most 64), sorted; their count. */
static int list_files(const char *dir, char names[64][256]) {
    DIR *d = opendir(dir);
    int n = 0;
    if (!d) return 0;
    for (struct dirent *e; (e = readdir(d)) && n < 64;)
        if (e->d_name[0] != '.') snprintf(names[n++], sizeof names[0], "%s", e->d_name);
    closedir(d);
    qsort(names, (size_t)n, sizeof names[0], (int (*)(const void *, const void *))strcmp);
    return n;
}

static bool is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* No temporary output file left in dir or its folders. */
static void expect_no_temporaries(run *x, const char *dir, int depth) {
    char names[64][256];
    const int n = list_files(dir, names);
    for (int i = 0; i < n; i++) {
        char path[1200];
        snprintf(path, sizeof path, "%.900s/%.255s", dir, names[i]);
        if (strstr(names[i], ".tmp-")) run_fail(x, "a temporary file was left: %s", path);
        else if (depth < 2 && is_dir(path)) expect_no_temporaries(x, path, depth + 1);
    }
}

/* a and b hold the same array bit for bit, or b holds a with the two axes
 * before the last swapped (a layout change: BHLD against BLHD, a torch
 * weight against rows). */
static void compare_twin_files(run *x, const char *a_path, const char *b_path) {
    attn_array a = {0}, b = {0};
    if (attn_npy_load(a_path, &a) || attn_npy_load(b_path, &b)) {
        run_fail(x, "twin: %s", attn_last_error());
        attn_array_free(&a);
        return;
    }
    bool same = a.dtype == b.dtype && a.ndim == b.ndim && a.ndim >= 1;
    for (int d = 0; same && d < a.ndim; d++) same = a.shape[d] == b.shape[d];
    const size_t bytes = (size_t)a.count * attn_dtype_size(a.dtype);
    if (same) {
        if (memcmp(a.data, b.data, bytes)) run_fail(x, "twin: %s and %s differ", a_path, b_path);
    } else if (a.dtype == ATTN_F32 && a.ndim == b.ndim && a.ndim >= 2 && a.count == b.count) {
        /* the two axes before the last (2-D: both) swapped */
        const int n = a.ndim, i = n == 2 ? 0 : n - 3, j = n == 2 ? 1 : n - 2;
        bool swapped = a.shape[i] == b.shape[j] && a.shape[j] == b.shape[i];
        for (int d = 0; d < n; d++) swapped &= d == i || d == j || a.shape[d] == b.shape[d];
        if (!swapped) {
            run_fail(x, "twin: %s and %s have unrelated shapes", a_path, b_path);
        } else {
            int64_t outer = 1, inner = 1;
            for (int d = 0; d < i; d++) outer *= a.shape[d];
            for (int d = j + 1; d < n; d++) inner *= a.shape[d];
            const int64_t s[4] = {outer, a.shape[i], a.shape[j], inner};
            float *t = swap_middle(a.data, s);
            if (memcmp(t, b.data, bytes)) run_fail(x, "twin: %s, its two axes swapped, differs from %s", a_path, b_path);
            free(t);
        }
    } else {
        run_fail(x, "twin: %s and %s differ in dtype or rank", a_path, b_path);
    }
    attn_array_free(&a);
    attn_array_free(&b);
}

static void run_twin(run *x) {
    char twin_dir[600], line[8192];
    snprintf(twin_dir, sizeof twin_dir, "%s/twin", x->dir);
    if (mkdir(twin_dir, 0777)) fail_msg("mkdir %s", twin_dir);
    needed need = {0};
    expand(x, x->r->twin, twin_dir, line, sizeof line, &need, false);
    make_inputs(x, &need);
    char *output;
    const int status = test_run_cli(&output, "%s", line);
    g_cases++;
    if (status != x->r->status) run_fail(x, "twin 'attn %s' exited %d:\n%s", x->r->twin, status, output);
    else if (!x->n_outputs && strcmp(output, x->output)) run_fail(x, "twin 'attn %s' printed otherwise:\n%s", x->r->twin, output);
    for (int n = 0; n < x->n_outputs && !x->failed; n++) {
        char a[800], b[800];
        snprintf(a, sizeof a, "%s/%s", x->dir, x->outputs[n]);
        snprintf(b, sizeof b, "%s/%s", twin_dir, x->outputs[n]);
        if (!is_dir(a)) {
            compare_twin_files(x, a, b);
            continue;
        }
        char na[64][256], nb[64][256];
        const int count = list_files(a, na);
        if (count != list_files(b, nb) || count == 0) run_fail(x, "twin: %s and %s hold different files", a, b);
        for (int i = 0; i < count && !x->failed; i++) {
            char fa[1000], fb[1000];
            snprintf(fa, sizeof fa, "%s/%s", a, na[i]);
            snprintf(fb, sizeof fb, "%s/%s", b, na[i]);
            compare_twin_files(x, fa, fb);
        }
    }
    free(output);
}

/* Each '|'-separated part of words found in text (or, never, not found). */
static void expect_words(run *x, const char *words, bool never) {
    char copy[1024];
    snprintf(copy, sizeof copy, "%s", words);
    for (char *save, *w = strtok_r(copy, "|", &save); w; w = strtok_r(NULL, "|", &save))
        if ((strstr(x->output, w) != NULL) == never)
            run_fail(x, "the output %s '%s':\n%s", never ? "contains" : "lacks", w, x->output);
}

static int count_of(const char *text, const char *needle) {
    int n = 0;
    for (const char *p = text; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

static void free_run(run *x) {
    float *arrays[] = {x->q, x->k, x->v, x->q2, x->k2, x->v2, x->dout, x->x, x->x2, x->ctx, x->ctx2, x->mdout, x->rows,
                       x->vals, x->bias};
    for (size_t n = 0; n < sizeof arrays / sizeof arrays[0]; n++) free(arrays[n]);
    for (int n = 0; n < N_MOD; n++) free(x->mod[n]);
    free(x->mask);
    free(x->lens);
    free(x->output);
}

static void run_row(const row *r, const char *table, int index, uint64_t seed) {
    run x = {.r = r, .table = table, .index = index};
    fixture *f = &x.f;
    *f = r->f;
    int64_t *sizes[] = {&f->B, &f->L, &f->S, &f->Hq, &f->Hkv, &f->D, &f->Dv};
    for (size_t n = 0; n < sizeof sizes / sizeof sizes[0]; n++)
        if (!*sizes[n]) *sizes[n] = 1;
    if (!f->rank) f->rank = f->dm ? 3 : 4;
    if (f->dm && !f->dc) f->S = f->L; /* self-attention */
    if (!f->dout) f->dout = 3;
    snprintf(x.dir, sizeof x.dir, "%s/%s-%d", test_tmpdir(), table, index);
    if (mkdir(x.dir, 0777)) fail_msg("mkdir %s", x.dir);
    test_rng_seed(&x.rng, seed);
    generate(&x);

    needed need = {0};
    expand(&x, r->args, x.dir, x.line, sizeof x.line, &need, true);
    tokenize(x.line, x.storage, sizeof x.storage, x.tok, &x.ntok);
    const char *layout = flag_value(&x, "--layout"), *weight_layout = flag_value(&x, "--weight-layout");
    x.bhld = layout && !strcasecmp(layout, "BHLD");
    x.torch = weight_layout && !strcmp(weight_layout, "torch");
    x.with_wo = has_flag(&x, "--wo");
    parse_flags(&x, x.tok, x.ntok, &x.c);
    make_inputs(&x, &need);

    const int status = test_run_cli(&x.output, "%s", x.line);
    g_rows++, g_cases++;
    if (status != r->status) run_fail(&x, "exit status %d, want %d; output:\n%s", status, r->status, x.output);
    if (r->says) expect_words(&x, r->says, false);
    if (r->never) expect_words(&x, r->never, true);
    if (r->in_file && status == 0) {
        char path[800];
        snprintf(path, sizeof path, "%s/%s", x.dir, r->in_file);
        char *text = test_read_file(path, NULL);
        if (!text || !strstr(text, r->file_says)) run_fail(&x, "%s does not hold '%s'", path, r->file_says);
        free(text);
    }
    if (r->count_of && count_of(x.output, r->count_of) != r->count)
        run_fail(&x, "'%s' printed %d times, want %d", r->count_of, count_of(x.output, r->count_of), r->count);
    if (status == 0 && r->status == 0) {
        switch (r->check) {
        case CHECK_SDPA: check_sdpa(&x); break;
        case CHECK_MHA: check_mha(&x); break;
        case CHECK_TRACE: check_trace(&x); break;
        case CHECK_PATHS: check_paths(&x); break;
        case CHECK_NULLSPACE: check_nullspace(&x); break;
        case CHECK_FILES: check_files(&x); break;
        case CHECK_NONE: break;
        }
    } else if (r->status != 0) {
        /* a failed run leaves none of its outputs */
        for (int n = 0; n < x.n_outputs; n++) {
            char path[800], names[64][256];
            snprintf(path, sizeof path, "%s/%s", x.dir, x.outputs[n]);
            if (is_dir(path) ? list_files(path, names) > 0 : test_file_exists(path))
                run_fail(&x, "the failed run left %s", path);
        }
    }
    expect_no_temporaries(&x, x.dir, 0);
    if (r->twin && !x.failed) run_twin(&x);
    free_run(&x);
}

static void run_table(const char *table, const row *rows, size_t count, uint64_t seed) {
    const int failures = g_failures;
    for (size_t i = 0; i < count; i++) run_row(&rows[i], table, (int)i, seed * 1000 + i);
    if (g_failures > failures) fail_msg("%d of the %zu %s rows failed (above)", g_failures - failures, count, table);
}

#define RUN_TABLE(rows, seed) run_table(#rows, rows, sizeof rows / sizeof rows[0], seed)
static void sdpa_matrix(void **state) { (void)state; RUN_TABLE(sdpa_rows, 1); }
static void mha_matrix(void **state) { (void)state; RUN_TABLE(mha_rows, 2); }
static void trace_matrix(void **state) { (void)state; RUN_TABLE(trace_rows, 3); }
static void paths_matrix(void **state) { (void)state; RUN_TABLE(paths_rows, 4); }
static void nullspace_matrix(void **state) { (void)state; RUN_TABLE(nullspace_rows, 5); }
static void picture_matrix(void **state) { (void)state; RUN_TABLE(picture_rows, 6); }
static void other_matrix(void **state) { (void)state; RUN_TABLE(other_rows, 7); }
static void family_matrix(void **state) { (void)state; RUN_TABLE(family_rows, 8); }

/* ------------------------------------------------------ help consistency */

static const char *const subcommands[] = {"demo", "sdpa", "mha", "trace", "paths", "nullspace", "map", "report",
                                          "train", "bench", "tokenize", "detokenize", "model", "decode", "ring"};
enum { N_CHECKED = 14 }; /* every subcommand but ring (its flags are being changed elsewhere) */

/* " -q --weights ... ": the flags of attn CMD --list-options, between spaces. */
static char *list_options(const char *cmd) {
    char *out;
    if (test_run_cli(&out, "%s --list-options", cmd)) fail_msg("attn %s --list-options failed:\n%s", cmd, out);
    char *flags = malloc(strlen(out) + 2);
    size_t n = 0;
    flags[n++] = ' ';
    for (char *save, *line = strtok_r(out, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        const size_t len = strcspn(line, " ");
        memcpy(flags + n, line, len);
        n += len;
        flags[n++] = ' ';
    }
    flags[n] = 0;
    free(out);
    return flags;
}

static bool in_list(const char *list, const char *flag) {
    char key[80];
    snprintf(key, sizeof key, " %s ", flag);
    return strstr(list, key) != NULL;
}

static bool flag_char(char c) { return isalnum((unsigned char)c) || c == '_' || c == '-'; }

/* The flags a help line shows: --long and -x tokens, with slash groups
 * expanded (--base-q/-k/-v: --base-q --base-k --base-v; -q/-k/-v: -q -k -v). */
static int help_tokens(const char *line, char tokens[][64], int max) {
    int n = 0;
    for (size_t i = 0; line[i] && n < max; i++) {
        if (line[i] != '-' || (i && (flag_char(line[i - 1]) || line[i - 1] == '/'))) continue;
        size_t j = i + 1;
        if (line[j] == '-' && isalpha((unsigned char)line[j + 1])) {
            while (flag_char(line[j + 1])) j++;
            j++;
        } else if (isalpha((unsigned char)line[j]) && !flag_char(line[j + 1])) {
            j++;
        } else {
            continue;
        }
        const int first = n;
        snprintf(tokens[n++], 64, "%.*s", (int)(j - i), line + i);
        while (line[j] == '/' && line[j + 1] == '-' && n < max) {
            const size_t start = j + 1;
            j = start + 1;
            while (flag_char(line[j])) j++;
            const char *group = line + start;
            const int len = (int)(j - start);
            const char *last_dash = strrchr(tokens[first], '-');
            if (tokens[first][1] == '-' && group[1] != '-' && last_dash > tokens[first] + 1)
                snprintf(tokens[n++], 64, "%.*s%.*s", (int)(last_dash - tokens[first]), tokens[first], len, group);
            else
                snprintf(tokens[n++], 64, "%.*s", len, group);
        }
        i = j - 1;
    }
    return n;
}

/* The subcommand a help line shows an example or usage of ("  attn sdpa -q
 * ..."), NULL for prose and flag lines. */
static const char *line_command(const char *line) {
    while (*line == ' ') line++;
    if (!strncmp(line, "usage: ", 7)) line += 7;
    if (strncmp(line, "attn ", 5)) return NULL;
    for (size_t n = 0; n < sizeof subcommands / sizeof subcommands[0]; n++) {
        const size_t len = strlen(subcommands[n]);
        if (!strncmp(line + 5, subcommands[n], len) && (line[5 + len] == ' ' || !line[5 + len])) return subcommands[n];
    }
    return NULL;
}

/* For every subcommand: attn help CMD prints attn CMD --help; every flag of
 * --list-options is shown in --help; every flag --help shows (its own, and
 * those of the other commands its examples run) is accepted. */
static void help_matches_options(void **state) {
    (void)state;
    const int failures = g_failures;
    char *lists[N_CHECKED];
    for (int c = 0; c < N_CHECKED; c++) lists[c] = list_options(subcommands[c]);
    for (int c = 0; c < N_CHECKED; c++) {
        const char *cmd = subcommands[c];
        const row r = {.args = cmd};
        run x = {.r = &r, .table = "help", .index = c};
        char *help, *help2;
        const int st = test_run_cli(&help, "%s --help", cmd), st2 = test_run_cli(&help2, "help %s", cmd);
        g_cases += 3;
        if (st || st2 || strcmp(help, help2))
            run_fail(&x, "'attn %s --help' (exit %d) and 'attn help %s' (exit %d) differ", cmd, st, cmd, st2);
        char shown[4096] = " ";
        const char *owner_of_continuation = NULL;
        char *copy = strdup(help);
        for (char *save, *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
            const char *owner = line_command(line);
            if (!owner) owner = owner_of_continuation ? owner_of_continuation : cmd;
            const size_t len = strlen(line);
            owner_of_continuation = len && line[len - 1] == '\\' ? owner : NULL;
            int list = -1;
            for (int o = 0; o < N_CHECKED; o++)
                if (!strcmp(subcommands[o], owner)) list = o;
            char tokens[64][64];
            const int n = help_tokens(line, tokens, 64);
            for (int t = 0; t < n; t++) {
                if (!strcmp(owner, cmd) && strlen(shown) + strlen(tokens[t]) + 2 < sizeof shown)
                    strcat(strcat(shown, tokens[t]), " ");
                if (!strcmp(tokens[t], "-h") || !strcmp(tokens[t], "--help") || list < 0) continue;
                if (!in_list(lists[list], tokens[t]))
                    run_fail(&x, "'attn %s --help' shows %s%s%s, which 'attn %s' does not accept (line: %s)", cmd, tokens[t],
                             list == c ? "" : " for attn ", list == c ? "" : owner, owner, line);
            }
        }
        free(copy);
        char *flags = strdup(lists[c]);
        for (char *save, *flag = strtok_r(flags, " ", &save); flag; flag = strtok_r(NULL, " ", &save))
            if (!in_list(shown, flag)) run_fail(&x, "'attn %s --list-options' has %s, which its --help never shows", cmd, flag);
        free(flags);
        free(help);
        free(help2);
    }
    for (int c = 0; c < N_CHECKED; c++) free(lists[c]);
    if (g_failures > failures) fail_msg("%d subcommands' help texts disagree with their options (above)", g_failures - failures);
}

static int print_summary(void **state) {
    print_message("cli matrix: %d cases (%d table rows, their twins, and 3 help checks for each of %d subcommands)\n",
                  g_cases, g_rows, N_CHECKED);
    return test_group_teardown(state);
}

int main(void) {
    test_suppress_picture_leaks_in_children(); /* map, report and demo --figures draw */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(sdpa_matrix),      cmocka_unit_test(mha_matrix),     cmocka_unit_test(trace_matrix),
        cmocka_unit_test(paths_matrix),     cmocka_unit_test(nullspace_matrix), cmocka_unit_test(picture_matrix),
        cmocka_unit_test(other_matrix),     cmocka_unit_test(family_matrix),  cmocka_unit_test(help_matches_options),
    };
    return cmocka_run_group_tests(tests, NULL, print_summary);
}
