/*
 * cmd_ring.c — `attn ring`: ring attention across the ranks of an MPI job,
 *   mpirun -np P attn ring -q Q.npy -k K.npy -v V.npy -o O.npy [...]
 * with the inputs, outputs and mask options of `attn sdpa` (same shapes,
 * same numbers), but no rank ever holds a whole sequence: each reads only its
 * rows of the position axis of every input (.npy by offset) and writes only
 * its rows of every output (docs/distributed.md).
 *
 * Shapes (as attn sdpa; the rank of -q chooses the outputs' rank):
 *   2-D  q [L, D]          k [S, D]          v [S, Dv]         o [L, Dv]
 *   3-D  q [L, Hq, D]      k [S, Hkv, D]     v [S, Hkv, Dv]    o [L, Hq, Dv]
 *   4-D  q [B, L, Hq, D]   k [B, S, Hkv, D]  v [B, S, Hkv, Dv] o [B, L, Hq, Dv]
 *   lse [B, Hq, L] (leading dims dropped as for o); dq like q, dk like k,
 *   dv like v; --grad-out like o.
 *
 * Messages: every failure is agreed among the ranks first (attn_ring_agree)
 * and printed once, by rank 0; every rank exits with the same status.  A
 * timeout is the exception: the rank that noticed a silent rank prints it
 * and ends the job with MPI_Abort.
 */
#include "cli.h"

#ifndef ATTN_HAVE_MPI

int cmd_ring(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "attn ring: this attn was built without MPI, so ring attention is off; install "
                    "openmpi-bin and libopenmpi-dev (scripts/install-deps.sh --all) and rebuild\n");
    return CLI_USAGE_ERROR;
}

#else

#include "attn_mpi.h"

#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void ring_help(FILE *out) {
    fprintf(out,
    "usage: mpirun -np P attn ring -q Q.npy -k K.npy -v V.npy -o O.npy [--lse LSE.npy]\n"
    "              [--grad-out DO.npy [--dq DQ.npy] [--dk DK.npy] [--dv DV.npy]]\n"
    "              [--shard contiguous|zigzag] [--layout BLHD|BHLD] [--report] [--timeout SECONDS]\n"
    "              [mask and computation options]\n"
    "       mpirun -np P attn ring --bench L,S,Hq,Hkv,D [--shard ..] [mask and computation options]\n\n"
    "Ring attention (sequence parallelism) across the P ranks of an MPI job: the same\n"
    "result as attn sdpa, with each rank holding only its rows of the position axes.\n"
    "Key/value blocks travel around the ring while every rank computes on the one in\n"
    "hand; partial results merge exactly by their log-sum-exp.\n\n"
    "inputs (float32; float64 and float16 are converted; NaN/Inf refused), as attn sdpa:\n"
    "  -q Q.npy   queries [L, D], [L, Hq, D] or [B, L, Hq, D]\n"
    "  -k K.npy   keys    [S, D], [S, Hkv, D] or [B, S, Hkv, D]   (Hq a multiple of Hkv: GQA)\n"
    "  -v V.npy   values  [S, Dv], [S, Hkv, Dv] or [B, S, Hkv, Dv] (S may differ from L)\n"
    "             (with --layout BHLD heads come before positions: [B, Hq, L, D] and so on)\n"
    "  Each rank reads only its own rows of each file, so the files must be visible\n"
    "  to every rank (a shared file system) and may be larger than one rank's memory.\n"
    "outputs (float32; written by all ranks into a temporary file, renamed when all succeeded):\n"
    "  -o O.npy          output [.., L, Hq, Dv], same rank and layout as Q (optional with --grad-out)\n"
    "  --lse LSE.npy     log-sum-exp of each row's scores [B, Hq, L]\n"
    "gradients (backward across the ring; dk and dv travel with their blocks):\n"
    "  --grad-out DO.npy dLoss/dO, shaped like O; needs at least one of:\n"
    "  --dq DQ.npy  --dk DK.npy  --dv DV.npy   gradients shaped like Q, K, V\n"
    "ring:\n"
    "  --shard contiguous|zigzag\n"
    "                    how positions are dealt: P blocks, or 2P chunks with rank r\n"
    "                    holding chunks r and 2P-1-r, which balances a causal mask\n"
    "                    (default: zigzag with --causal/--causal-lower-right/--window,\n"
    "                    else contiguous; --layout contiguous|zigzag is its old spelling)\n"
    "  --piece-rows N    query rows per kernel call; MPI progress between calls\n"
    "                    (default: a quarter of a rank's rows, at least 64)\n"
    "  --threads N       as below, but by default the cores a rank may use divided\n"
    "                    among the ranks on its machine\n"
    "  --timeout SECONDS give up when another rank has sent or taken nothing for this\n"
    "                    long (stopped, hung, or far slower): print which rank and end\n"
    "                    every rank (default 60; 0 = wait forever)\n"
    "  --report          per-rank busy (compute) and wait (communication not hidden)\n"
    "                    times, the balance and the share of communication hidden\n"
    "  --bench L,S,Hq,Hkv,D\n"
    "                    no files: each rank makes its own rows of random inputs (the\n"
    "                    same numbers for any P), runs the forward and prints --report\n"
    "                    with one rotation of the blocks timed alone\n\n"
    "%s%s%s\n"
    "--mask and --bias are read like the inputs: each rank reads only its query rows\n"
    "of them (every rank the whole file when it has one query row for all).\n"
    "not available across ranks: --weights (an L x S table); use attn sdpa for it.\n"
    "not available yet: the score stage (--softcap, --sinks, --alibi, --alibi-slopes); use attn sdpa.\n\n"
    "example:\n"
    "  mpirun -np 4 attn ring -q Q.npy -k K.npy -v V.npy -o O.npy --causal --report\n",
    cli_layout_help, cli_mask_help, cli_compute_help);
}

enum { F_Q = 1, F_K, F_V, F_O, F_LSE, F_DOUT, F_DQ, F_DK, F_DV, F_SHARD, F_PIECE_ROWS, F_TIMEOUT, F_REPORT,
       F_BENCH, F_WEIGHTS };

static const cli_flag ring_flags[] = {
    {"-q", "Q.npy", F_Q, 0},             {"-k", "K.npy", F_K, 0},            {"-v", "V.npy", F_V, 0},
    {"-o", "O.npy", F_O, 0},             {"--lse", "LSE.npy", F_LSE, 0},     {"--grad-out", "DO.npy", F_DOUT, 0},
    {"--dq", "DQ.npy", F_DQ, 0},         {"--dk", "DK.npy", F_DK, 0},        {"--dv", "DV.npy", F_DV, 0},
    {"--shard", "contiguous|zigzag", F_SHARD, 0},  {"--piece-rows", "N", F_PIECE_ROWS, 0},
    {"--timeout", "SECONDS", F_TIMEOUT, 0},        {"--report", NULL, F_REPORT, 0},
    {"--bench", "L,S,Hq,Hkv,D", F_BENCH, 0},
    /* Listed to be refused with the reason (an L x S table on one rank). */
    {"--weights", "W.npy", F_WEIGHTS, 0},
    CLI_FLAGS_END};

/* cli_logits_flags: listed to be refused with the reason (docs/logits.md). */
static const cli_flag *const ring_tables[] = {ring_flags, cli_layout_flags, cli_mask_flags, cli_compute_flags,
                                              cli_logits_flags, NULL};
/* The help is printed after parsing, by rank 0 only. */
const cli_spec cli_ring_spec = {"ring", ring_tables, NULL, false};

typedef struct ring_cli {
    MPI_Comm comm;
    int rank, ranks;
    const char *q_path, *k_path, *v_path, *o_path, *lse_path;
    const char *dout_path, *dq_path, *dk_path, *dv_path;
    int shard;  /* attn_ring_layout; -1 = by the mask */
    int report;
    int64_t piece_rows;
    double timeout; /* as attn_ring_options.timeout_seconds */
    int64_t bench[5]; /* L, S, Hq, Hkv, D; bench[0] == 0: files */
    cli_attention_options ao;
} ring_cli;

/* One input: the whole file's shape and this rank's rows as a 4-D view. */
typedef struct ring_input {
    const char *flag, *path;
    attn_array header; /* shape only */
    attn_array local;  /* this rank's rows, float32 */
    attn_tensor t;     /* [B, rows, H, width] view of local */
    int axis;          /* the position axis in the file */
} ring_input;

/* Prints on rank 0 only: every rank calls it with the agreed message. */
static int ring_error(const ring_cli *c, int code, const char *fmt, ...) CLI_PRINTF(3, 4);
static int ring_error(const ring_cli *c, int code, const char *fmt, ...) {
    if (c->rank == 0) {
        va_list ap;
        fprintf(stderr, "attn ring: ");
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fprintf(stderr, code == CLI_USAGE_ERROR ? "\n(see 'attn ring --help')\n" : "\n");
    }
    return code;
}

/* A rank that timed out waiting for another ends the whole job: the silent
 * rank cannot take part in an orderly exit.  The message names the rank
 * that noticed ("rank 0 of 3: no answer from rank 2 ..."); that rank
 * prints it, and ranks that only heard of it from rank 0 stay quiet. */
static void ring_timed_out(const ring_cli *c) {
    char mine[32];
    snprintf(mine, sizeof mine, "rank %d of ", c->rank);
    if (strncmp(attn_last_error(), mine, strlen(mine)) == 0) {
        fprintf(stderr, "attn ring: %s; --timeout sets the limit\n", attn_last_error());
        fflush(stderr);
    }
    MPI_Abort(c->comm, CLI_DATA_ERROR);
}

/* ------------------------------------------------------------- arguments */

static bool parse_bench(const char *text, int64_t out[5]) {
    char *end;
    const char *p = text;
    for (int i = 0; i < 5; i++) {
        long long value = strtoll(p, &end, 10);
        if (end == p || value < 1 || value > (1LL << 31) || (i < 4 ? *end != ',' : *end != 0))
            return false;
        out[i] = value;
        p = end + 1;
    }
    return true;
}

/* Parses this rank's argv.  Ranks other than 0 parse with their messages
 * captured (into `message`, the first line without the "attn ring: "
 * prefix), so that a usage error is printed once, by rank 0, whichever rank
 * has it.  Returns -1 to go on, else the exit status. */
static int parse_args(ring_cli *c, int argc, char **argv, char *message, size_t cap) {
    char *captured = NULL;
    size_t captured_size = 0;
    FILE *capture = c->rank != 0 ? open_memstream(&captured, &captured_size) : NULL;
    if (capture) cli_set_message_stream(capture); /* else every rank prints: duplicates, nothing lost */
    message[0] = 0;
    int rc = -1;
    bool help = false;
    cli_args args;
    const char *value;
    cli_args_begin(&args, &cli_ring_spec, argc, argv);
    for (int id; rc < 0 && (id = cli_args_next(&args, &value)) != CLI_ARGS_END;) {
        if (id == CLI_ARGS_STOP) {
            rc = args.status;
            break;
        }
        if (id == CLI_ARGS_HELP) {
            help = true;
            continue;
        }
        /* --layout contiguous|zigzag: the old spelling of --shard. */
        if (id == CLI_ID_LAYOUT && (strcmp(value, "contiguous") == 0 || strcmp(value, "zigzag") == 0)) {
            if (c->rank == 0)
                cli_warning("ring", "--layout %s is now --shard %s (--layout says how q, k, v are stored: "
                            "BLHD or BHLD)", value, value);
            id = F_SHARD;
        }
        int taken = cli_attention_take(&c->ao, &args, id, value);
        if (taken < 0) rc = CLI_USAGE_ERROR;
        if (taken) continue;
        switch (id) {
        case F_Q: c->q_path = value; break;
        case F_K: c->k_path = value; break;
        case F_V: c->v_path = value; break;
        case F_O: c->o_path = value; break;
        case F_LSE: c->lse_path = value; break;
        case F_DOUT: c->dout_path = value; break;
        case F_DQ: c->dq_path = value; break;
        case F_DK: c->dk_path = value; break;
        case F_DV: c->dv_path = value; break;
        case F_REPORT: c->report = 1; break;
        case F_WEIGHTS:
            rc = cli_usage_error("ring", "--weights is not available across ranks (an L x S table on one rank); "
                                 "use attn sdpa");
            break;
        case F_SHARD:
            if (c->shard >= 0) rc = cli_usage_error("ring", "--shard is given twice; give it once");
            else if (strcmp(value, "contiguous") == 0) c->shard = ATTN_RING_CONTIGUOUS;
            else if (strcmp(value, "zigzag") == 0) c->shard = ATTN_RING_ZIGZAG;
            else rc = cli_usage_error("ring", "--shard expects contiguous or zigzag, got '%s'", value);
            break;
        case F_TIMEOUT: {
            double seconds;
            if (!cli_parse_float("ring", "--timeout", value, 0.0, 1e9, &seconds)) rc = CLI_USAGE_ERROR;
            else c->timeout = seconds > 0 ? seconds : -1.0; /* 0: no limit */
            break;
        }
        case F_PIECE_ROWS:
            if (!cli_parse_int("ring", "--piece-rows", value, 1, INT64_MAX / 2, &c->piece_rows)) rc = CLI_USAGE_ERROR;
            break;
        default: /* F_BENCH */
            if (!parse_bench(value, c->bench))
                rc = cli_usage_error("ring", "--bench expects L,S,Hq,Hkv,D (positive integers), got '%s'", value);
            break;
        }
    }
    if (rc < 0 && help) {
        if (c->rank == 0) ring_help(stdout);
        rc = CLI_OK;
    }
    if (rc < 0 && !c->bench[0] && (!c->q_path || !c->k_path || !c->v_path || (!c->o_path && !c->dout_path)))
        rc = cli_usage_error("ring", "missing %s", !c->q_path ? "-q Q.npy" : !c->k_path ? "-k K.npy"
                                                  : !c->v_path ? "-v V.npy" : "-o O.npy");
    if (rc < 0 && c->dout_path && !c->dq_path && !c->dk_path && !c->dv_path)
        rc = cli_usage_error("ring", "--grad-out needs at least one of --dq, --dk, --dv");
    if (rc < 0 && !c->dout_path && (c->dq_path || c->dk_path || c->dv_path))
        rc = cli_usage_error("ring", "--dq, --dk and --dv need --grad-out DO.npy");
    if (rc < 0 && c->bench[0] &&
        (c->q_path || c->dout_path || c->ao.key_lengths_path || c->ao.mask_path || c->ao.bias_path))
        rc = cli_usage_error("ring", "--bench makes its own inputs: give no files");
    const char *logits_flag = cli_ring_refused_given(&args);
    if (rc < 0 && logits_flag)
        rc = cli_usage_error("ring", "%s is not available in ring attention yet (its blocks merge through their lse, "
                             "and a sink would join every block's); use attn sdpa on one process", logits_flag);
    if (rc < 0 && c->bench[0] && c->ao.layout_given)
        rc = cli_usage_error("ring", "--bench makes its own inputs: --layout does not apply");
    if (rc < 0) {
        const char *const inputs[] = {c->q_path,  c->k_path, c->v_path, c->dout_path, c->ao.key_lengths_path,
                                      c->ao.mask_path, c->ao.bias_path};
        const char *const outputs[] = {c->o_path, c->lse_path, c->dq_path, c->dk_path, c->dv_path};
        if (cli_check_paths("ring", inputs, 7, outputs, 5)) rc = CLI_USAGE_ERROR;
    }
    if (c->rank != 0) {
        FILE *stream = capture;
        cli_set_message_stream(NULL);
        if (stream) {
            fclose(stream); /* captured and captured_size now final */
            const char *prefix = "attn ring: ";
            const char *text = captured && strncmp(captured, prefix, strlen(prefix)) == 0 ? captured + strlen(prefix)
                                                                                         : captured ? captured : "";
            snprintf(message, cap, "%.*s", (int)strcspn(text, "\n"), text);
            free(captured);
        }
    }
    if (rc < 0 && c->shard < 0)
        c->shard = c->ao.opt.causal || c->ao.opt.window ? ATTN_RING_ZIGZAG : ATTN_RING_CONTIGUOUS;
    return rc;
}

/* Every rank parsed its own argv (mpirun may give ranks different ones).
 * Before any collective step that depends on them, the ranks agree: a
 * usage error on any rank stops every rank (printed once, by rank 0), and
 * every rank must read, compute, report and write the same set of things,
 * or one would wait in a step the others skip.  Options that change the
 * numbers (masks, scale, kernel, layout) are compared by the library
 * itself; threads and --piece-rows may differ.  Returns -1 to go on, else
 * the exit status. */
static int agree_on_arguments(const ring_cli *c, int rc, const char *message) {
    const bool usage = rc == CLI_USAGE_ERROR;
    if (attn_ring_agree(c->comm, usage ? ATTN_ERR_INVALID_ARGUMENT : ATTN_OK, message) != ATTN_OK) {
        if (!usage) ring_error(c, CLI_USAGE_ERROR, "%s", attn_last_error()); /* rank 0 printed its own */
        return CLI_USAGE_ERROR;
    }
    const attn_ring_value values[] = {
        {"--help", rc == CLI_OK},
        {"--layout (BLHD or BHLD)", c->ao.layout},
        {"--bench L", c->bench[0]}, {"--bench S", c->bench[1]}, {"--bench Hq", c->bench[2]},
        {"--bench Hkv", c->bench[3]}, {"--bench D", c->bench[4]},
        {"whether -o is given", c->o_path != NULL},
        {"whether --lse is given", c->lse_path != NULL},
        {"whether --grad-out is given", c->dout_path != NULL},
        {"whether --dq is given", c->dq_path != NULL},
        {"whether --dk is given", c->dk_path != NULL},
        {"whether --dv is given", c->dv_path != NULL},
        {"whether --key-lengths is given", c->ao.key_lengths_path != NULL},
        {"whether --mask is given", c->ao.mask_path != NULL},
        {"whether --bias is given", c->ao.bias_path != NULL},
        {"whether --report is given", c->report},
    };
    if (attn_ring_agree_values(c->comm, values, (int)(sizeof values / sizeof values[0])) != ATTN_OK)
        return ring_error(c, CLI_USAGE_ERROR, "%s", attn_last_error());
    return rc;
}

/* ----------------------------------------------------------------- inputs */

/* Views local rows of a rank-2..4 array, stored in the layout, as
 * [B, rows, H, width] (reordering BHLD rows in place).  False when out of
 * memory for the reordering. */
static bool as_tensor(attn_array *a, cli_layout layout, attn_tensor *t) {
    int64_t s[4] = {1, 1, 1, 1};
    if (a->ndim == 2) {
        s[1] = a->shape[0];
        s[3] = a->shape[1];
    } else {
        for (int d = 0; d < a->ndim; d++) s[4 - a->ndim + d] = a->shape[d];
        if (layout == CLI_LAYOUT_BHLD) {
            const int64_t heads = s[1];
            s[1] = s[2];
            s[2] = heads;
        }
    }
    FILE *quiet = fopen("/dev/null", "w");
    cli_set_message_stream(quiet); /* the caller agrees and prints the failure */
    const bool ok = cli_qkv_from_layout("ring", layout, a->data, s);
    cli_set_message_stream(NULL);
    if (quiet) fclose(quiet);
    *t = attn_tensor_4d(a->data, s[0], s[1], s[2], s[3]);
    return ok;
}

/* Reads every rank's rows of in->path, converts them to float32 and checks
 * them, agreeing on the outcome; the message names the flag, the file and
 * the global position of a bad value. */
static attn_status read_input(const ring_cli *c, ring_input *in) {
    char msg[1024] = "";
    attn_status st = attn_npy_read_header(in->path, &in->header, NULL);
    if (st) snprintf(msg, sizeof msg, "%s: %s", in->flag, attn_last_error());
    char shape[128];
    if (!st && ((in->axis = cli_qkv_position_axis(c->ao.layout, in->header.ndim)) < 0 || in->header.count == 0)) {
        st = ATTN_ERR_SHAPE;
        snprintf(msg, sizeof msg, "%s '%s' has shape %s; expected rank 2 [L, D], 3 [%s] or 4 [%s] with every "
                 "dimension at least 1", in->flag, in->path, cli_shape_str(&in->header, shape, sizeof shape),
                 c->ao.layout == CLI_LAYOUT_BHLD ? "H, L, D" : "L, H, D",
                 c->ao.layout == CLI_LAYOUT_BHLD ? "B, H, L, D" : "B, L, H, D");
    }
    if ((st = attn_ring_agree(c->comm, st, msg))) return st;
    if ((st = attn_ring_read_npy(c->comm, in->path, in->axis, (attn_ring_layout)c->shard,
                                 &in->local, NULL)))
        return st;

    attn_dtype original = in->local.dtype;
    st = attn_array_convert(&in->local, ATTN_F32);
    if (st)
        snprintf(msg, sizeof msg, "%s '%s': dtype %s is not a float array (%s)", in->flag, in->path,
                 attn_dtype_name(original), attn_last_error());
    int64_t bad;
    if (!st && attn_check_finite(in->local.data, in->local.count, &bad) != ATTN_OK) {
        /* Local element -> global position along the sharded axis. */
        attn_ring_shard sh;
        attn_ring_shard_of(in->header.shape[in->axis], c->ranks, c->rank,
                           (attn_ring_layout)c->shard, &sh);
        int64_t inner = 1;
        for (int d = in->axis + 1; d < in->local.ndim; d++) inner *= in->local.shape[d];
        int64_t row = bad / inner % sh.rows;
        int64_t global = row < sh.len[0] ? sh.start[0] + row : sh.start[1] + row - sh.len[0];
        float x = ((const float *)in->local.data)[bad];
        st = ATTN_ERR_NONFINITE;
        snprintf(msg, sizeof msg, "%s '%s': a value at position %lld is %s; inputs must be finite",
                 in->flag, in->path, (long long)global, isnan(x) ? "NaN" : x > 0 ? "+inf" : "-inf");
    }
    if ((st = attn_ring_agree(c->comm, st, msg))) return st;
    st = as_tensor(&in->local, c->ao.layout, &in->t) ? ATTN_OK : ATTN_ERR_OUT_OF_MEMORY;
    return attn_ring_agree(c->comm, st, "out of memory reordering BHLD rows");
}

/* splitmix64 of (stream, global index): the same inputs for any P. */
static float bench_value(uint64_t stream, uint64_t index) {
    uint64_t z = index * 0x9E3779B97F4A7C15ull + stream * 0xD1B54A32D192ED03ull + 0x632BE59BD9B4E019ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (float)((double)(z >> 11) * (2.0 / 9007199254740992.0) - 1.0);
}

/* --bench: this rank's rows of [1, n, heads, width] random data. */
static attn_status bench_input(const ring_cli *c, ring_input *in, uint64_t stream, int64_t n,
                               int64_t heads, int64_t width) {
    attn_ring_shard sh;
    attn_ring_shard_of(n, c->ranks, c->rank, (attn_ring_layout)c->shard, &sh);
    const int64_t shape[4] = {1, sh.rows, heads, width};
    attn_status st = attn_array_alloc(&in->local, ATTN_F32, 4, shape);
    if (st == ATTN_OK) {
        float *x = in->local.data;
        for (int64_t r = 0; r < sh.rows; r++) {
            int64_t global = r < sh.len[0] ? sh.start[0] + r : sh.start[1] + r - sh.len[0];
            for (int64_t e = 0; e < heads * width; e++)
                x[r * heads * width + e] = bench_value(stream, (uint64_t)(global * heads * width + e));
        }
    }
    in->header.ndim = 4;
    in->header.shape[0] = 1;
    in->header.shape[1] = n;
    in->header.shape[2] = heads;
    in->header.shape[3] = width;
    in->axis = 1;
    as_tensor(&in->local, CLI_LAYOUT_BLHD, &in->t);
    return attn_ring_agree(c->comm, st, NULL);
}

/* Key lengths: rank 0 reads and checks the (small) file, everyone gets it. */
static int share_key_lengths(ring_cli *c, int64_t B, int64_t Hq, int64_t L, int64_t S) {
    int rc = CLI_OK;
    if (c->rank == 0 && c->ao.key_lengths_path) {
        /* Only the key lengths: the mask and bias are read by rows (read_table). */
        cli_attention_options lens = CLI_ATTENTION_OPTIONS_INIT;
        lens.key_lengths_path = c->ao.key_lengths_path;
        rc = cli_load_attention_inputs("ring", &lens, B, Hq, L, S);
        c->ao.key_lengths = lens.key_lengths;
    }
    MPI_Bcast(&rc, 1, MPI_INT, 0, c->comm);
    if (rc != CLI_OK || !c->ao.key_lengths_path) return rc;
    attn_status st = c->rank == 0 ? ATTN_OK : attn_array_alloc(&c->ao.key_lengths, ATTN_I64, 1, &B);
    if ((st = attn_ring_agree(c->comm, st, NULL))) return ring_error(c, CLI_DATA_ERROR, "%s", attn_last_error());
    MPI_Bcast(c->ao.key_lengths.data, (int)B, MPI_INT64_T, 0, c->comm);
    c->ao.opt.key_lengths = c->ao.key_lengths.data;
    return CLI_OK;
}

/* --mask and --bias: [L, S], [H, L, S] or [B, H, L, S] with size-1
 * dimensions broadcast, as attn sdpa takes them.  The file's shape is
 * checked against the problem (full = B, Hq, L, S), then each rank reads
 * only its query rows (its shard of the L axis, for every batch and head),
 * or every rank the whole file when it has one query row for all.  The
 * library gets the whole table's shape and this rank's rows (attn_mpi.h);
 * the agreed message names the flag, the file and a bad value's global row. */
static attn_status read_table(const ring_cli *c, ring_input *in, bool is_mask, const int64_t full[4],
                              int64_t shape[4]) {
    char msg[1024] = "", buf[128];
    attn_status st = attn_npy_read_header(in->path, &in->header, NULL);
    if (st) snprintf(msg, sizeof msg, "%s: %s", in->flag, attn_last_error());
    if (!st && (in->header.ndim < 2 || in->header.ndim > 4)) {
        st = ATTN_ERR_SHAPE;
        snprintf(msg, sizeof msg, "%s '%s' has shape %s; expected [L, S], [H, L, S] or [B, H, L, S]", in->flag,
                 in->path, cli_shape_str(&in->header, buf, sizeof buf));
    }
    static const char *const names[4] = {"B", "H", "L", "S"};
    for (int d = 0; d < 4; d++) shape[d] = 1;
    for (int d = 0; !st && d < in->header.ndim; d++) shape[4 - in->header.ndim + d] = in->header.shape[d];
    for (int d = 0; !st && d < 4; d++)
        if (shape[d] != 1 && shape[d] != full[d]) {
            st = ATTN_ERR_SHAPE;
            snprintf(msg, sizeof msg, "%s '%s' has shape %s: its %s dimension must be 1 or %lld", in->flag,
                     in->path, cli_shape_str(&in->header, buf, sizeof buf), names[d], (long long)full[d]);
        }
    if ((st = attn_ring_agree(c->comm, st, msg))) return st;
    in->axis = in->header.ndim - 2;
    if (shape[2] == 1) {
        st = attn_npy_load(in->path, &in->local);
        if (st) snprintf(msg, sizeof msg, "%s: %s", in->flag, attn_last_error());
        if ((st = attn_ring_agree(c->comm, st, msg))) return st;
    } else if ((st = attn_ring_read_npy(c->comm, in->path, in->axis, (attn_ring_layout)c->shard, &in->local,
                                        NULL))) {
        return st;
    }
    const attn_dtype original = in->local.dtype;
    if ((st = attn_array_convert(&in->local, is_mask ? ATTN_BOOL : ATTN_F32)))
        snprintf(msg, sizeof msg, "%s '%s': dtype %s cannot be used here, %s is needed (%s)", in->flag, in->path,
                 attn_dtype_name(original), is_mask ? "an integer or bool array" : "a float array",
                 attn_last_error());
    const float *x = in->local.data;
    for (int64_t i = 0; !st && !is_mask && i < in->local.count; i++) {
        if (isfinite(x[i]) || x[i] == -INFINITY) continue;
        /* Local element -> global query row. */
        int64_t row = i / shape[3] % in->local.shape[in->axis];
        if (shape[2] != 1) {
            attn_ring_shard sh;
            attn_ring_shard_of(full[2], c->ranks, c->rank, (attn_ring_layout)c->shard, &sh);
            row = row < sh.len[0] ? sh.start[0] + row : sh.start[1] + row - sh.len[0];
        }
        st = ATTN_ERR_NONFINITE;
        snprintf(msg, sizeof msg, "%s '%s': a value in query row %lld is %s; it must be finite or -inf (which "
                 "hides a key)", in->flag, in->path, (long long)row, isnan(x[i]) ? "NaN" : "+inf");
    }
    return attn_ring_agree(c->comm, st, msg);
}

/* ----------------------------------------------------------------- report */

enum { REP_QROWS, REP_KROWS, REP_PAIRS, REP_SKIPPED, REP_BUSY, REP_CPU, REP_WAIT, REP_PROGRESS,
       REP_TOTAL, REP_ALONE, REP_SENT, REP_COUNT };

/* The options the report asks the library about (kernel names, FLOPs)
 * for shapes that are not the ones the rank's rows of the mask and bias
 * fit: without them.  The kernel does not depend on them, and the FLOPs
 * then count the pairs the position rules leave, the mask's and bias's
 * hidden ones included. */
static attn_sdpa_options report_options(const ring_cli *c) {
    attn_sdpa_options o = c->ao.opt;
    o.mask = NULL;
    o.bias = NULL;
    return o;
}

static void print_report(const ring_cli *c, const char *what, const char *kernel,
                         const attn_ring_stats *s, const ring_input *q, const ring_input *k,
                         const ring_input *v, double flops_factor) {
    double mine[REP_COUNT] = {(double)q->t.shape[1], (double)k->t.shape[1], (double)s->pairs_computed,
                              (double)s->pairs_skipped, s->busy_s, s->busy_cpu_s, s->wait_s, s->progress_s,
                              s->total_s, s->comm_alone_s, (double)s->bytes_sent};
    double *all = c->rank == 0 ? malloc(sizeof(double) * REP_COUNT * (size_t)c->ranks) : NULL;
    int ready = c->rank != 0 || all; /* rank 0 has room for the table */
    MPI_Bcast(&ready, 1, MPI_INT, 0, c->comm);
    if (!ready) return;
    MPI_Gather(mine, REP_COUNT, MPI_DOUBLE, all, REP_COUNT, MPI_DOUBLE, 0, c->comm);
    if (c->rank != 0) return;
    const int64_t B = q->t.shape[0], L = q->header.shape[q->axis], S = k->header.shape[k->axis];
    const attn_sdpa_options counted = report_options(c), *o = &counted;
    printf("attn ring %s: %d ranks, %s layout, B=%lld L=%lld S=%lld Hq=%lld Hkv=%lld D=%lld Dv=%lld, "
           "%s%s%s%s, kernel %s, %d threads per rank\n",
           what, c->ranks, c->shard == ATTN_RING_ZIGZAG ? "zigzag" : "contiguous", (long long)B,
           (long long)L, (long long)S, (long long)q->t.shape[2], (long long)k->t.shape[2],
           (long long)q->t.shape[3], (long long)v->t.shape[3],
           !o->causal ? "no causal mask" : o->align == ATTN_ALIGN_LOWER_RIGHT ? "causal-lower-right" : "causal",
           o->window ? " + window" : "", c->ao.opt.mask ? " + mask" : "", c->ao.opt.bias ? " + bias" : "", kernel,
           attn_thread_count(o->threads));
    printf("rank  q_rows  kv_rows  pairs  skipped    busy_s  busy_cpu_s    wait_s  progress_s   total_s  alone_s"
           "   sent_MB\n");
    double busy_max = 0, busy_sum = 0, cpu_sum = 0, wait_max = 0, total_max = 0, alone_max = 0, busiest_wait = 0,
           busiest_progress = 0;
    for (int r = 0; r < c->ranks; r++) {
        const double *x = all + (size_t)r * REP_COUNT;
        printf("%4d %7.0f %8.0f %6.0f %8.0f %9.3f %11.3f %9.3f %11.3f %9.3f %8.3f %9.1f\n", r, x[REP_QROWS],
               x[REP_KROWS], x[REP_PAIRS], x[REP_SKIPPED], x[REP_BUSY], x[REP_CPU], x[REP_WAIT],
               x[REP_PROGRESS], x[REP_TOTAL], x[REP_ALONE], x[REP_SENT] / 1e6);
        busy_sum += x[REP_BUSY];
        cpu_sum += x[REP_CPU];
        if (x[REP_BUSY] >= busy_max) {
            busiest_wait = x[REP_WAIT];
            busiest_progress = x[REP_PROGRESS];
        }
        busy_max = fmax(busy_max, x[REP_BUSY]);
        wait_max = fmax(wait_max, x[REP_WAIT]);
        total_max = fmax(total_max, x[REP_TOTAL]);
        alone_max = fmax(alone_max, x[REP_ALONE]);
    }
    const double busy_mean = busy_sum / c->ranks;
    /* The whole problem's FLOPs, from the library's count (shapes only). */
    attn_tensor qg = attn_tensor_4d(NULL, B, L, q->t.shape[2], q->t.shape[3]);
    attn_tensor kg = attn_tensor_4d(NULL, B, S, k->t.shape[2], k->t.shape[3]);
    attn_tensor vg = attn_tensor_4d(NULL, B, S, v->t.shape[2], v->t.shape[3]);
    double flops = 0.0;
    if (attn_sdpa_flops(&qg, &kg, &vg, o, &flops) != ATTN_OK) flops = NAN;
    flops *= flops_factor;
    printf("busy: max %.3f s, mean %.3f s, balance max/mean %.2f\n", busy_max, busy_mean,
           busy_mean > 0 ? busy_max / busy_mean : 1.0);
    printf("wait: max %.3f s (%.1f%% of the slowest rank's time: for a block, a gradient or a\n"
           "      busier neighbour); the busiest rank waited %.3f s and spent %.3f s in MPI_Testall\n",
           wait_max, total_max > 0 ? 100.0 * wait_max / total_max : 0.0, busiest_wait, busiest_progress);
    /* The busiest rank never waits for a slower neighbour's compute, so its
     * wait (and its time driving progress, which over shared memory is the
     * copy itself) is the communication that the compute did not hide. */
    if (alone_max > 0)
        printf("communication: one rotation alone %.3f s; hidden behind compute %.1f%% (1 - the\n"
               "      busiest rank's wait and progress time / the rotation alone)\n",
               alone_max, 100.0 * fmax(0.0, 1.0 - (busiest_wait + busiest_progress) / alone_max));
    printf("throughput: %.3g GFLOP (visible pairs) in %.3f s = %.2f GFLOP/s overall, %.2f per busy\n"
           "      rank-second, %.2f per busy CPU-second (one core's rate, unaffected by other load)\n",
           flops / 1e9, total_max, total_max > 0 ? flops / total_max / 1e9 : 0.0,
           busy_sum > 0 ? flops / busy_sum / 1e9 : 0.0, cpu_sum > 0 ? flops / cpu_sum / 1e9 : 0.0);
    free(all);
}

/* ------------------------------------------------------------------- run */

static void free_input(ring_input *in) { attn_array_free(&in->local); }

static int run_ring(ring_cli *c, int argc, char **argv) {
    char message[1024];
    int rc = parse_args(c, argc, argv, message, sizeof message);
    if ((rc = agree_on_arguments(c, rc, message)) >= 0) return rc;
    /* Threads by default: the cores a rank may use, shared among the ranks
     * on its machine (collective, so every rank splits). */
    MPI_Comm machine;
    int local_ranks;
    MPI_Comm_split_type(c->comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &machine);
    MPI_Comm_size(machine, &local_ranks);
    MPI_Comm_free(&machine);
    if (c->ao.opt.threads == 0 && !getenv("ATTN_NUM_THREADS")) {
        int share = attn_thread_count(0) / local_ranks;
        c->ao.opt.threads = share > 0 ? share : 1;
    }
    ring_input q = {"-q", c->q_path, {0}, {0}, {0}, 0}, k = {"-k", c->k_path, {0}, {0}, {0}, 0},
               v = {"-v", c->v_path, {0}, {0}, {0}, 0}, dout = {"--grad-out", c->dout_path, {0}, {0}, {0}, 0},
               mask = {"--mask", c->ao.mask_path, {0}, {0}, {0}, 0}, bias = {"--bias", c->ao.bias_path, {0}, {0}, {0}, 0};
    float *out = NULL, *lse = NULL, *dq = NULL, *dk = NULL, *dv = NULL;
    attn_status st;
    rc = CLI_DATA_ERROR;

    if (c->bench[0]) {
        if ((st = bench_input(c, &q, 1, c->bench[0], c->bench[2], c->bench[4])) ||
            (st = bench_input(c, &k, 2, c->bench[1], c->bench[3], c->bench[4])) ||
            (st = bench_input(c, &v, 3, c->bench[1], c->bench[3], c->bench[4]))) {
            ring_error(c, rc, "%s", attn_last_error());
            goto cleanup;
        }
    } else if ((st = read_input(c, &q)) || (st = read_input(c, &k)) || (st = read_input(c, &v))) {
        ring_error(c, rc, "%s", attn_last_error());
        goto cleanup;
    }
    const int64_t B = q.t.shape[0], Lr = q.t.shape[1], Hq = q.t.shape[2], D = q.t.shape[3];
    const int64_t Sr = k.t.shape[1], Hkv = k.t.shape[2], Dv = v.t.shape[3];
    const int64_t L = q.header.shape[q.axis], S = k.header.shape[k.axis];
    if ((rc = share_key_lengths(c, B, Hq, L, S))) goto cleanup;
    rc = CLI_DATA_ERROR;
    const int64_t full[4] = {B, Hq, L, S};
    /* A rank that holds no query rows has no rows of them either: any
     * non-NULL pointer says the table is there. */
    static const float no_rows[1];
    if (mask.path) {
        if ((st = read_table(c, &mask, true, full, c->ao.opt.mask_shape))) {
            ring_error(c, rc, "%s", attn_last_error());
            goto cleanup;
        }
        c->ao.opt.mask = mask.local.data ? mask.local.data : (const uint8_t *)no_rows;
    }
    if (bias.path) {
        if ((st = read_table(c, &bias, false, full, c->ao.opt.bias_shape))) {
            ring_error(c, rc, "%s", attn_last_error());
            goto cleanup;
        }
        c->ao.opt.bias = bias.local.data ? bias.local.data : no_rows;
    }

    attn_ring_options ro = ATTN_RING_OPTIONS_INIT;
    ro.sdpa = &c->ao.opt;
    ro.layout = (attn_ring_layout)c->shard;
    ro.len_q = L;
    ro.len_kv = S;
    ro.piece_rows = c->piece_rows;
    ro.timeout_seconds = c->timeout;
    ro.time_comm_alone = c->bench[0] != 0;
    out = malloc(sizeof(float) * (size_t)(B * Lr * Hq * Dv + 1));
    lse = malloc(sizeof(float) * (size_t)(B * Hq * Lr + 1));
    st = !out || !lse ? ATTN_ERR_OUT_OF_MEMORY : ATTN_OK;
    if ((st = attn_ring_agree(c->comm, st, "out of memory for this rank's output rows"))) {
        ring_error(c, rc, "%s", attn_last_error());
        goto cleanup;
    }
    attn_tensor o = attn_tensor_4d(out, B, Lr, Hq, Dv);
    attn_ring_stats stats;
    if ((st = attn_ring_forward(c->comm, &q.t, &k.t, &v.t, &ro, &o, lse, &stats))) {
        if (st == ATTN_ERR_TIMEOUT) ring_timed_out(c);
        char qs[96], ks[96], vs[96];
        ring_error(c, rc, "%s: %s\n  (-q %s, -k %s, -v %s)", attn_status_str(st), attn_last_error(),
                   cli_shape_str(&q.header, qs, sizeof qs), cli_shape_str(&k.header, ks, sizeof ks),
                   cli_shape_str(&v.header, vs, sizeof vs));
        goto cleanup;
    }
    const attn_sdpa_options named = report_options(c);
    if (c->report || c->bench[0])
        print_report(c, "forward", attn_sdpa_kernel_name(&q.t, &k.t, &v.t, &named), &stats, &q, &k, &v,
                     1.0);

    attn_tensor tdq, tdk, tdv;
    if (c->dout_path) {
        if ((st = read_input(c, &dout))) {
            ring_error(c, rc, "%s", attn_last_error());
            goto cleanup;
        }
        char want[96], got[96];
        attn_array o_header = q.header;
        o_header.shape[o_header.ndim - 1] = Dv;
        bool same = dout.header.ndim == o_header.ndim;
        for (int d = 0; same && d < o_header.ndim; d++) same = dout.header.shape[d] == o_header.shape[d];
        if (!same) {
            ring_error(c, rc, "--grad-out '%s' has shape %s but must be shaped like the output %s",
                       c->dout_path, cli_shape_str(&dout.header, got, sizeof got),
                       cli_shape_str(&o_header, want, sizeof want));
            goto cleanup;
        }
        dq = c->dq_path ? malloc(sizeof(float) * (size_t)(B * Lr * Hq * D + 1)) : NULL;
        dk = c->dk_path ? malloc(sizeof(float) * (size_t)(B * Sr * Hkv * D + 1)) : NULL;
        dv = c->dv_path ? malloc(sizeof(float) * (size_t)(B * Sr * Hkv * Dv + 1)) : NULL;
        st = (c->dq_path && !dq) || (c->dk_path && !dk) || (c->dv_path && !dv) ? ATTN_ERR_OUT_OF_MEMORY
                                                                                : ATTN_OK;
        if ((st = attn_ring_agree(c->comm, st, "out of memory for this rank's gradient rows"))) {
            ring_error(c, rc, "%s", attn_last_error());
            goto cleanup;
        }
        tdq = attn_tensor_4d(dq, B, Lr, Hq, D);
        tdk = attn_tensor_4d(dk, B, Sr, Hkv, D);
        tdv = attn_tensor_4d(dv, B, Sr, Hkv, Dv);
        if ((st = attn_ring_backward(c->comm, &q.t, &k.t, &v.t, &ro, &o, lse, &dout.t, dq ? &tdq : NULL,
                                     dk ? &tdk : NULL, dv ? &tdv : NULL, &stats))) {
            if (st == ATTN_ERR_TIMEOUT) ring_timed_out(c);
            ring_error(c, rc, "%s: %s", attn_status_str(st), attn_last_error());
            goto cleanup;
        }
        if (c->report)
            print_report(c, "backward", attn_sdpa_backward_kernel_name(&q.t, &k.t, &v.t, &named), &stats,
                         &q, &k, &v, 2.5); /* a backward counts 2.5 forwards */
    }

    if (c->bench[0]) {
        rc = CLI_OK;
        goto cleanup;
    }
    /* Outputs mirror the rank and layout of q (and of k, v for their
     * gradients): this rank's rows, [B, rows, H, W] here, go back to the
     * files' order first. */
    {
        const int64_t o4[4] = {B, Lr, Hq, Dv}, dq4[4] = {B, Lr, Hq, D}, dk4[4] = {B, Sr, Hkv, D},
                      dv4[4] = {B, Sr, Hkv, Dv};
        FILE *quiet = fopen("/dev/null", "w");
        cli_set_message_stream(quiet);
        const bool ok = cli_qkv_to_layout("ring", c->ao.layout, out, o4) &&
                        cli_qkv_to_layout("ring", c->ao.layout, dq, dq4) &&
                        cli_qkv_to_layout("ring", c->ao.layout, dk, dk4) &&
                        cli_qkv_to_layout("ring", c->ao.layout, dv, dv4);
        cli_set_message_stream(NULL);
        if (quiet) fclose(quiet);
        if ((st = attn_ring_agree(c->comm, ok ? ATTN_OK : ATTN_ERR_OUT_OF_MEMORY,
                                  "out of memory reordering the outputs to BHLD"))) {
            ring_error(c, rc, "%s", attn_last_error());
            goto cleanup;
        }
    }
    attn_ring_output outputs[5] = {{c->o_path, q.header.ndim, {0}, q.axis, out},
                                   {c->lse_path, q.header.ndim - 1, {0}, q.header.ndim - 2, lse},
                                   {c->dq_path, q.header.ndim, {0}, q.axis, dq},
                                   {c->dk_path, k.header.ndim, {0}, k.axis, dk},
                                   {c->dv_path, v.header.ndim, {0}, v.axis, dv}};
    memcpy(outputs[0].shape, q.header.shape, sizeof(int64_t) * (size_t)q.header.ndim);
    outputs[0].shape[q.header.ndim - 1] = Dv;
    const int64_t lse4[3] = {B, Hq, L};
    memcpy(outputs[1].shape, lse4 + (4 - q.header.ndim), sizeof(int64_t) * (size_t)(q.header.ndim - 1));
    memcpy(outputs[2].shape, q.header.shape, sizeof(int64_t) * (size_t)q.header.ndim);
    memcpy(outputs[3].shape, k.header.shape, sizeof(int64_t) * (size_t)k.header.ndim);
    memcpy(outputs[4].shape, v.header.shape, sizeof(int64_t) * (size_t)v.header.ndim);
    if ((st = attn_ring_save_npy(c->comm, (attn_ring_layout)c->shard, outputs, 5))) {
        ring_error(c, rc, "%s", attn_last_error());
        goto cleanup;
    }
    rc = CLI_OK;
cleanup:
    free(out);
    free(lse);
    free(dq);
    free(dk);
    free(dv);
    free_input(&q);
    free_input(&k);
    free_input(&v);
    free_input(&dout);
    free_input(&mask);
    free_input(&bias);
    return rc;
}

int cmd_ring(int argc, char **argv) {
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    ring_cli c = {.ao = CLI_ATTENTION_OPTIONS_INIT};
    c.comm = MPI_COMM_WORLD;
    c.shard = -1;
    MPI_Comm_rank(c.comm, &c.rank);
    MPI_Comm_size(c.comm, &c.ranks);
    int rc = run_ring(&c, argc, argv);
    cli_attention_options_free(&c.ao);
    fflush(stdout);
    MPI_Finalize();
    return rc;
}

#endif /* ATTN_HAVE_MPI */
