/*
 * cmd_bench.c — `attn bench`: this machine's limits and every kernel measured
 * against them, in one run (DESIGN.md §5, issue 3).
 *
 * Shapes (q [B, L, Hq, D]  k, v [B, S, Hkv, D]  out [B, L, Hq, D]):
 *   prefill  B=1 Hq=16 Hkv in {16, 8} L=S in {512 .. 8192} D in {64, 128},
 *            causal (top-left) and full
 *   decode   B=1 L=1 Hq=16 Hkv=8 D=128 S in {4096, 32768, 131072},
 *            causal-lower-right (a KV-cache step); K/V in float32, float16
 *            and bfloat16 (q and out float32), GB/s against the read probe
 *   prefill bf16  L=S in {1024, 4096} Hkv=8 D=128, q, k, v, out bfloat16,
 *            full and causal, precision exact and fast
 *   long     B=1 L=S=65536 Hq=Hkv=1 D=128 causal, flash only, with memory
 *   scaling  B=1 L=S=n Hq=Hkv=1 D=64 full, n = 100, 200, 400, ...
 *
 * A row's time is the median of several runs after one untimed warm-up
 * run.  FLOPs count only visible query-key pairs: 4 * B * Hq * pairs * D.
 */
#include "bench_cache.h"
#include "cli.h"
#include "cli_stdout.h"

#include "attn_io.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char bench_usage[] =
    "usage: attn bench [--quick] [--csv] [--threads N] [--kernel ref|flash|all] [--filter TEXT] [--list]\n\n"
    "Measures this machine's FP32 FMA peak and memory bandwidth, then times each\n"
    "attention kernel on the shapes of issue 3 and reports it as a fraction of them.\n\n"
    "options:\n"
    "  --quick          fewer and smaller shapes, fewer runs: under a minute on 2 cores\n"
    "  --csv            machine-readable rows only (header below), on stdout\n"
    "  --threads N      threads for the machine limits and the kernels\n"
    "                   (default: $ATTN_NUM_THREADS, else OpenMP's default)\n"
    "  --kernel K       ref, flash or all (default all)\n"
    "  --filter TEXT    only rows whose name contains TEXT, e.g. 'decode S=4096' or\n"
    "                   'L=4096 Hkv=16 D=128'; commas separate alternatives\n"
    "                   ('prefill,decode'); the machine limits are always measured;\n"
    "                   a filter that matches no row is a usage error\n"
    "  --list           print the names of the rows the run would measure, and stop\n\n"
    "sections (q [B, L, Hq, D], k and v [B, S, Hkv, D]):\n"
    "  prefill  B=1 Hq=16 Hkv=16|8 L=S=512..8192 D=64|128, causal (top-left) and full\n"
    "  backward the prefill shapes again, timing attn_sdpa_backward (dq, dk, dv from\n"
    "           the forward's out and lse); FLOPs counted as 2.5x the forward's\n"
    "  decode   B=1 L=1 Hq=16 Hkv=8 D=128 S=4096|32768|131072, causal-lower-right;\n"
    "           K and V in float32, then float16 ('kv=f16'), then bfloat16 ('kv=bf16'),\n"
    "           then 8-bit blocks ('kv=q8_0', 'kv=fp8': 32 values and a float16 scale),\n"
    "           q and out float32; %bw of the read bandwidth (a decode step reads)\n"
    "  prefill  also L=S=1024|4096 Hkv=8 D=128 with q, k, v, out in bfloat16 ('bf16',\n"
    "           exact: widened to float32 on load) and ('bf16 fast': precision fast,\n"
    "           vdpbf16ps where the CPU has AVX512-BF16, else exact; %peak stays\n"
    "           against the FP32 FMA peak: bf16 dot products can reach 2x it)\n"
    "  long     L=S=65536, one head, D=128, causal; flash only; memory reported\n"
    "  scaling  L=S=n, one head, D=64, full, n = 100, 200, 400, ...: time grows as\n"
    "           n^2 (4x cells per doubling); q, k, v and out grow as n; neither\n"
    "           kernel's extra memory should grow with n^2 (the reference keeps one\n"
    "           row, S + Dv doubles; flash O(threads x tile), as issue 3 asks): the\n"
    "           table shows whether they do\n"
    "  The reference kernel (plain loops, double accumulation, one thread) is the\n"
    "  oracle, not a contender: it runs only where a row needs at most 0.7 GFLOP\n"
    "  (0.2 with --quick), a few seconds at its speed; other ref rows are 'skipped'.\n\n";

/* The columns, apart from the text above: C99 promises string literals of
 * 4095 characters only. */
static const char bench_usage_columns[] =
    "table columns (without --csv):\n"
    "  thr, runs      threads, timed runs after the warm-up\n"
    "  median ms      median wall time of one call\n"
    "  GFLOP/s %peak  visible-pair FLOPs / time, and as % of the FMA peak above\n"
    "  GB/s %bw       bytes of q, k, v, out / time, and as % of the read bandwidth\n"
    "  extra mem      the kernel's workspace (attn_sdpa_workspace_size)\n"
    "  peak RSS       the process's peak resident memory during the long row\n"
    "  in+out         bytes of q, k, v and out\n"
    "  scaling: n, cells = n^2, x = ratio to the previous line, ref/flash ms,\n"
    "  ref ws, flash ws = each kernel's workspace (attn_sdpa_workspace_size)\n\n"
    "csv columns:\n"
    "  section        machine, prefill, backward, decode, long or scaling\n"
    "  name           the row's shape in words (what --filter matches), or for the\n"
    "                 machine: fma_peak (what pct_peak divides by: the larger of\n"
    "                 fma_peak_threads, all threads at once, and threads x\n"
    "                 fma_peak_1thread, since on a shared machine another process\n"
    "                 often holds a core through the whole all-thread measurement);\n"
    "                 triad (what pct_bw divides by: the larger of triad_threads and\n"
    "                 triad_1thread); read (what a decode row's pct_bw divides by:\n"
    "                 the larger of read_threads and read_1thread, a read-only sum);\n"
    "                 fma_peak_end and read_end (fma_peak and read measured again\n"
    "                 after the kernels: a pct_peak or pct_bw far from 100 means the\n"
    "                 load changed)\n"
    "  kernel isa     the kernel and the instruction set it ran on\n"
    "  threads        threads it ran on (the reference always uses 1)\n"
    "  B L S Hq Hkv D mask   the shape; mask is none, causal or causal-lower-right\n"
    "  runs           timed runs after the warm-up\n"
    "  median_ms      median wall time of one call\n"
    "  gflops         4*B*Hq*(visible query-key pairs)*D / time, in 1e9 FLOP/s;\n"
    "                 for machine/fma_peak, the measured peak\n"
    "  pct_peak       gflops as % of the measured FMA peak (prefill, long, scaling)\n"
    "  gbps           bytes of q, k, v and out / time, in 1e9 B/s (decode); for\n"
    "                 machine/triad the measured bandwidth (STREAM's byte count)\n"
    "  pct_bw         gbps as % of the measured read bandwidth (decode)\n"
    "  workspace_bytes  the kernel's extra memory (attn_sdpa_workspace_size)\n"
    "  peak_rss_bytes   the process's peak resident memory during the row (long)\n"
    "  io_bytes       bytes of q, k, v and out, each in its dtype\n"
    "  status         ok; unavailable (kernel not in this build); skipped (ref over\n"
    "                 its budget); error (the call failed: message on stderr)\n\n"
    "Times on shared machines drift from run to run; ratios taken in the same run\n"
    "are what to compare.  Exit status: 0 success, 1 a kernel or allocation\n"
    "failed, 2 usage error.\n";

static const char csv_header[] =
    "section,name,kernel,isa,threads,B,L,S,Hq,Hkv,D,mask,runs,median_ms,gflops,pct_peak,gbps,"
    "pct_bw,workspace_bytes,peak_rss_bytes,io_bytes,status";

/* ------------------------------------------------------------------ plan */

typedef enum { SEC_PREFILL, SEC_BACKWARD, SEC_DECODE, SEC_LONG, SEC_SCALING } bench_section;
static const char *const section_names[] = {"prefill", "backward", "decode", "long", "scaling"};

typedef enum { MASK_NONE, MASK_CAUSAL, MASK_LOWER_RIGHT } bench_mask;
static const char *const mask_names[] = {"none", "causal", "causal-lower-right"};

typedef struct bench_case {
    bench_section section;
    int64_t batch, len_q, len_kv, heads_q, heads_kv, dim;
    bench_mask mask;
    attn_dtype dtype;         /* of K, V (decode) or q, k, v, out (prefill) */
    attn_precision precision;
    char name[80];
} bench_case;

/* The dtypes of a case's tensors: decode keeps q and out float32 (a model
 * computing in float32 over a half KV cache), prefill stores all in one. */
static attn_dtype case_q_dtype(const bench_case *c) { return c->section == SEC_DECODE ? ATTN_F32 : c->dtype; }

static const char *dtype_short(attn_dtype dtype) {
    return dtype == ATTN_F16 ? "f16" : dtype == ATTN_Q8_0 ? "q8_0" : dtype == ATTN_FP8_E4M3 ? "fp8" : "bf16";
}

typedef struct bench_config {
    bool quick, csv, run_ref, run_flash;
    const char *filter;
    int threads;
    double ref_max_gflop;   /* the reference runs only under this         */
    int min_runs, max_runs; /* timed runs after the warm-up               */
    double target_seconds;  /* aim for this much timed work per row       */
} bench_config;

/* The options a case runs with. */
static attn_sdpa_options case_options(const bench_case *c) {
    attn_sdpa_options opt = ATTN_SDPA_OPTIONS_INIT;
    opt.causal = c->mask != MASK_NONE;
    opt.align = c->mask == MASK_LOWER_RIGHT ? ATTN_ALIGN_LOWER_RIGHT : ATTN_ALIGN_TOP_LEFT;
    opt.precision = c->precision;
    return opt;
}

/* The library's count of the forward's FLOPs (attn_sdpa_flops: visible
 * pairs x widths, DESIGN.md §5); a backward counts 2.5 times that. */
static double case_flops(const bench_case *c) {
    attn_tensor q = attn_tensor_4d(NULL, c->batch, c->len_q, c->heads_q, c->dim);
    attn_tensor kv = attn_tensor_4d(NULL, c->batch, c->len_kv, c->heads_kv, c->dim);
    attn_sdpa_options opt = case_options(c);
    double forward = NAN;
    if (attn_sdpa_flops(&q, &kv, &kv, &opt, &forward) != ATTN_OK) return NAN;
    return c->section == SEC_BACKWARD ? 2.5 * forward : forward;
}

/* Bytes of q, k, v and out, each in its dtype: what a kernel must move at
 * least once. */
static double case_io_bytes(const bench_case *c) {
    double q = (double)(c->batch * c->len_q * c->heads_q * c->dim);
    double kv = (double)(c->batch * c->len_kv * c->heads_kv * c->dim);
    /* per value; an 8-bit block format's 34 bytes per 32 values */
    const double kv_bytes = (double)attn_dtype_bytes(c->dtype, 32) / 32.0;
    return 2.0 * q * (double)attn_dtype_size(case_q_dtype(c)) + 2.0 * kv * kv_bytes;
}

/* The planned cases: a list that grows as cases are added, so that no
 * plan can outgrow it (a fixed array once overflowed on the full plan). */
typedef struct case_list {
    bench_case *items;
    int count, cap;
    bool failed; /* an allocation failed: the list is incomplete */
} case_list;

static void add_case(case_list *list, bench_section section, int64_t len_q, int64_t len_kv,
                     int64_t heads_q, int64_t heads_kv, int64_t dim, bench_mask mask, attn_dtype dtype,
                     attn_precision precision) {
    if (list->failed) return;
    if (list->count == list->cap) {
        int cap = list->cap ? 2 * list->cap : 64;
        bench_case *grown = realloc(list->items, (size_t)cap * sizeof *grown);
        if (!grown) {
            list->failed = true;
            return;
        }
        list->items = grown;
        list->cap = cap;
    }
    bench_case *c = &list->items[list->count++];
    *c = (bench_case){section, 1, len_q, len_kv, heads_q, heads_kv, dim, mask, dtype, precision, {0}};
    /* float32 rows keep their names; a half row adds its dtype (and fast). */
    char suffix[24] = "";
    if (dtype != ATTN_F32)
        snprintf(suffix, sizeof suffix, "%s%s%s", section == SEC_DECODE ? " kv=" : " ", dtype_short(dtype),
                 precision == ATTN_PRECISION_FAST ? " fast" : "");
    switch (section) {
    case SEC_PREFILL:
    case SEC_BACKWARD:
        snprintf(c->name, sizeof c->name, "%s L=%lld Hkv=%lld D=%lld %s%s", section_names[section],
                 (long long)len_q, (long long)heads_kv, (long long)dim, mask == MASK_NONE ? "full" : "causal",
                 suffix);
        break;
    case SEC_DECODE:
        snprintf(c->name, sizeof c->name, "decode S=%lld%s", (long long)len_kv, suffix);
        break;
    case SEC_LONG:
        snprintf(c->name, sizeof c->name, "long L=S=%lld causal", (long long)len_q);
        break;
    case SEC_SCALING:
        snprintf(c->name, sizeof c->name, "scaling n=%lld", (long long)len_q);
        break;
    }
}

/* A call slower than this gets 3 timed runs instead of min_runs. */
#define ATTN_BENCH_SLOW_SECONDS 2.0

/* The shapes of issue 3, or the --quick subset: D=128 only, L=S=1024 with
 * Hkv 16 and 8, L=S=4096 (the target shape) with Hkv=16, two decode
 * lengths, no long case, scaling up to n=3200. */
static void plan_cases(const bench_config *cfg, case_list *cases) {
    static const int64_t prefill_full[] = {512, 1024, 2048, 4096, 8192}, prefill_quick[] = {1024, 4096};
    static const int64_t decode_full[] = {4096, 32768, 131072}, decode_quick[] = {4096, 131072};
    static const int64_t prefill_bf16[] = {1024, 4096};
    const int64_t *prefill = cfg->quick ? prefill_quick : prefill_full;
    const int64_t *decode = cfg->quick ? decode_quick : decode_full;
    int n_prefill = cfg->quick ? 2 : 5, n_decode = cfg->quick ? 2 : 3;
    int64_t scaling_max = cfg->quick ? 3200 : 12800;
    for (int section = SEC_PREFILL; section <= SEC_BACKWARD; section++)
        for (int l = 0; l < n_prefill; l++)
            for (int64_t heads_kv = 16; heads_kv >= (cfg->quick && prefill[l] > 1024 ? 16 : 8); heads_kv /= 2)
                for (int64_t dim = cfg->quick ? 128 : 64; dim <= 128; dim *= 2)
                    for (int m = 0; m < 2; m++)
                        add_case(cases, (bench_section)section, prefill[l], prefill[l], 16, heads_kv, dim,
                                 m ? MASK_CAUSAL : MASK_NONE, ATTN_F32, ATTN_PRECISION_EXACT);
    /* bfloat16 prefill, exact then fast, beside the float32 rows above
     * (--quick: L=1024 only). */
    for (int l = 0; l < (cfg->quick ? 1 : 2); l++)
        for (int fast = 0; fast < 2; fast++)
            for (int m = 0; m < 2; m++)
                add_case(cases, SEC_PREFILL, prefill_bf16[l], prefill_bf16[l], 16, 8, 128, m ? MASK_CAUSAL : MASK_NONE,
                         ATTN_BF16, fast ? ATTN_PRECISION_FAST : ATTN_PRECISION_EXACT);
    /* Each decode length with float32, float16 and bfloat16 K/V in a row,
     * so that their ratio is taken under the same load. */
    static const attn_dtype kv_dtypes[] = {ATTN_F32, ATTN_F16, ATTN_BF16, ATTN_Q8_0, ATTN_FP8_E4M3};
    for (int s = 0; s < n_decode; s++)
        for (int t = 0; t < 5; t++)
            add_case(cases, SEC_DECODE, 1, decode[s], 16, 8, 128, MASK_LOWER_RIGHT, kv_dtypes[t], ATTN_PRECISION_EXACT);
    if (!cfg->quick) add_case(cases, SEC_LONG, 65536, 65536, 1, 1, 128, MASK_CAUSAL, ATTN_F32, ATTN_PRECISION_EXACT);
    for (int64_t len = 100; len <= scaling_max; len *= 2)
        add_case(cases, SEC_SCALING, len, len, 1, 1, 64, MASK_NONE, ATTN_F32, ATTN_PRECISION_EXACT);
}

/* True when name contains one of the comma-separated pieces of filter (or
 * there is no filter).  Names never contain commas: they are CSV fields. */
static bool name_matches(const char *filter, const char *name) {
    if (!filter) return true;
    for (const char *piece = filter;;) {
        const char *comma = strchr(piece, ',');
        size_t len = comma ? (size_t)(comma - piece) : strlen(piece);
        for (const char *at = name; len && *at; at++)
            if (strncmp(at, piece, len) == 0) return true;
        if (!comma) return false;
        piece = comma + 1;
    }
}

/* ----------------------------------------------------------- measurement */

typedef enum { ROW_OK, ROW_UNAVAILABLE, ROW_SKIPPED, ROW_ERROR } row_status;
static const char *const status_names[] = {"ok", "unavailable", "skipped", "error"};

typedef struct bench_row {
    const bench_case *c;
    attn_kernel kernel;
    const char *isa;
    int threads, runs;
    double median_s;
    size_t workspace;
    double peak_rss; /* bytes, or NAN when not measured */
    row_status status;
} bench_row;

typedef struct machine_limits {
    double peak_gflops;               /* what %peak divides by              */
    double peak_together, peak_one;   /* all threads at once; one thread    */
    double triad_gbps;                /* what %bw divides by                */
    double triad_together, triad_one;
    double read_gbps;                 /* what a decode row's %bw divides by */
    double read_together, read_one;
    const char *peak_isa;
    int threads;
} machine_limits;

static double now_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Fills x with values uniform in [-1, 1) from a fixed seed (xorshift64). */
static void fill_uniform(float *x, size_t n, uint64_t seed) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        x[i] = (float)((double)(s >> 11) * 0x1.0p-52 - 1.0);
    }
}

/* The process's peak resident memory (VmHWM) in bytes, or -1.  Linux only. */
static double read_peak_rss(void) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1.0;
    char line[256];
    double kib = -1.0;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "VmHWM:", 6) == 0) {
            kib = strtod(line + 6, NULL);
            break;
        }
    fclose(f);
    return kib < 0 ? -1.0 : kib * 1024.0;
}

/* Resets VmHWM to the current resident size (Linux >= 4.0), so that the next
 * read_peak_rss measures one row, not the whole run.  False if not possible. */
static bool reset_peak_rss(void) {
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (!f) return false;
    bool ok = fputs("5", f) >= 0;
    return fclose(f) == 0 && ok;
}

/* The 1-minute load average (Linux), or -1: how much other work competed. */
static double read_load_average(void) {
    FILE *f = fopen("/proc/loadavg", "r");
    double load = -1.0;
    if (f) {
        if (fscanf(f, "%lf", &load) != 1) load = -1.0;
        fclose(f);
    }
    return load;
}

static const char *kernel_isa(attn_kernel kernel) {
    return kernel == ATTN_KERNEL_REF ? "scalar" : attn_isa_name();
}

/* Scratch for a backward row: the forward's lse and the three gradients. */
typedef struct {
    float *lse, *dq, *dk, *dv;
    attn_tensor dq_t, dk_t, dv_t;
} grad_buffers;

static void grad_buffers_free(grad_buffers *g) {
    free(g->lse);
    free(g->dq);
    free(g->dk);
    free(g->dv);
}

static attn_status grad_buffers_prepare(grad_buffers *g, const bench_case *c, const attn_tensor *q,
                                        const attn_tensor *k, const attn_tensor *v, attn_tensor *o,
                                        const attn_sdpa_options *opt) {
    size_t n_q = (size_t)(c->batch * c->len_q * c->heads_q * c->dim);
    size_t n_kv = (size_t)(c->batch * c->len_kv * c->heads_kv * c->dim);
    g->lse = malloc((size_t)(c->batch * c->heads_q * c->len_q) * sizeof(float));
    g->dq = malloc(n_q * sizeof(float));
    g->dk = malloc(n_kv * sizeof(float));
    g->dv = malloc(n_kv * sizeof(float));
    if (!g->lse || !g->dq || !g->dk || !g->dv) return ATTN_ERR_OUT_OF_MEMORY;
    g->dq_t = attn_tensor_4d(g->dq, c->batch, c->len_q, c->heads_q, c->dim);
    g->dk_t = attn_tensor_4d(g->dk, c->batch, c->len_kv, c->heads_kv, c->dim);
    g->dv_t = attn_tensor_4d(g->dv, c->batch, c->len_kv, c->heads_kv, c->dim);
    attn_sdpa_options forward = *opt;
    forward.workspace = NULL; /* the backward's workspace need not fit the forward */
    forward.workspace_size = 0;
    return attn_sdpa_forward(q, k, v, &forward, o, NULL, g->lse);
}

/* One timed backward call; dout is q's data (same shape as out when Dv = D). */
static attn_status run_backward(grad_buffers *g, const attn_tensor *q, const attn_tensor *k,
                                const attn_tensor *v, const attn_tensor *o, const attn_sdpa_options *opt) {
    return attn_sdpa_backward(q, k, v, opt, o, g->lse, q, &g->dq_t, &g->dk_t, &g->dv_t);
}

/* Times one kernel on one case: a warm-up call, then the median of enough
 * calls to fill cfg->target_seconds (within [min_runs, max_runs]).  Prints
 * the library's message on stderr when the call fails. */
static void time_kernel(const bench_config *cfg, const bench_case *c, attn_kernel kernel,
                        void *q_data, void *k_data, void *v_data, void *o_data,
                        bench_row *row) {
    *row = (bench_row){c, kernel, kernel_isa(kernel), kernel == ATTN_KERNEL_REF ? 1 : cfg->threads,
                       0, 0.0, 0, NAN, ROW_OK};
    const attn_dtype q_dtype = case_q_dtype(c);
    attn_tensor q = attn_tensor_view(q_data, q_dtype, c->batch, c->len_q, c->heads_q, c->dim);
    attn_tensor k = attn_tensor_view(k_data, c->dtype, c->batch, c->len_kv, c->heads_kv, c->dim);
    attn_tensor v = attn_tensor_view(v_data, c->dtype, c->batch, c->len_kv, c->heads_kv, c->dim);
    attn_tensor o = attn_tensor_view(o_data, q_dtype, c->batch, c->len_q, c->heads_q, c->dim);
    attn_sdpa_options opt = case_options(c);
    opt.kernel = kernel;
    opt.threads = cfg->threads;

    const bool backward = c->section == SEC_BACKWARD;
    attn_status st = backward ? attn_sdpa_backward_workspace_size(&q, &k, &v, &opt, &row->workspace)
                              : attn_sdpa_workspace_size(&q, &k, &v, &opt, &row->workspace);
    if (st == ATTN_ERR_UNSUPPORTED) {
        row->status = ROW_UNAVAILABLE;
        return;
    }
    if (kernel == ATTN_KERNEL_REF && (c->section == SEC_LONG || case_flops(c) > cfg->ref_max_gflop * 1e9)) {
        row->status = ROW_SKIPPED;
        return;
    }
    double *times = NULL;
    void *workspace = NULL;
    if (st == ATTN_OK && row->workspace > 0) {
        workspace = malloc(row->workspace);
        if (!workspace) {
            fprintf(stderr, "attn bench: %s %s: cannot allocate %zu bytes of workspace\n", c->name,
                    kernel == ATTN_KERNEL_REF ? "ref" : "flash", row->workspace);
            row->status = ROW_ERROR;
            return;
        }
        opt.workspace = workspace;
        opt.workspace_size = row->workspace;
    }
    if (c->section == SEC_LONG) reset_peak_rss();

    /* A backward row times attn_sdpa_backward alone: the forward's out and
     * lse come from an untimed forward call, dout is the queries' data
     * (any finite values do), and the gradients land in scratch buffers. */
    grad_buffers g = {0};
    if (st == ATTN_OK && backward) st = grad_buffers_prepare(&g, c, &q, &k, &v, &o, &opt);

    double t0 = now_seconds();
    if (st == ATTN_OK) st = backward ? run_backward(&g, &q, &k, &v, &o, &opt) : attn_sdpa_forward(&q, &k, &v, &opt, &o, NULL, NULL);
    double warm = now_seconds() - t0;
    int runs = warm > 0 ? (int)ceil(cfg->target_seconds / warm) : cfg->max_runs;
    runs = runs < cfg->min_runs ? cfg->min_runs : runs > cfg->max_runs ? cfg->max_runs : runs;
    if (warm > ATTN_BENCH_SLOW_SECONDS) runs = 3; /* a median of 3 long calls is steady enough */
    if (st == ATTN_OK && !(times = malloc((size_t)runs * sizeof(double)))) st = ATTN_ERR_OUT_OF_MEMORY;
    for (int r = 0; st == ATTN_OK && r < runs; r++) {
        t0 = now_seconds();
        st = backward ? run_backward(&g, &q, &k, &v, &o, &opt) : attn_sdpa_forward(&q, &k, &v, &opt, &o, NULL, NULL);
        times[r] = now_seconds() - t0;
    }
    if (st == ATTN_ERR_UNSUPPORTED) {
        row->status = ROW_UNAVAILABLE;
    } else if (st != ATTN_OK) {
        fprintf(stderr, "attn bench: %s %s: %s: %s\n", c->name, kernel == ATTN_KERNEL_REF ? "ref" : "flash",
                attn_status_str(st), attn_last_error());
        row->status = ROW_ERROR;
    } else {
        qsort(times, (size_t)runs, sizeof(double), compare_doubles);
        row->runs = runs;
        row->median_s = runs % 2 ? times[runs / 2] : 0.5 * (times[runs / 2 - 1] + times[runs / 2]);
        if (c->section == SEC_LONG) row->peak_rss = read_peak_rss();
        if (row->peak_rss < 0) row->peak_rss = NAN;
    }
    free(times);
    free(workspace);
    grad_buffers_free(&g);
}

/* Measures the limits (the triad only when asked: it takes a few seconds).
 * On a shared machine another process often holds one core for the whole
 * measurement: then all threads at once report about one core's worth,
 * while a single thread, which the OS places on a free core, still reports
 * a full core.  So the peak that %peak divides by is the larger of the
 * all-thread figure and threads x the one-thread figure (the latter
 * overstates a little where all-core clocks are lower, so %peak errs low),
 * and the bandwidth the larger of the all-thread and one-thread triads. */
static attn_status measure_machine(const bench_config *cfg, bool with_triad, machine_limits *m) {
    double seconds = cfg->quick ? 0.4 : 1.5;
    attn_status st = attn_measure_fma_peak(cfg->threads, seconds, &m->peak_together);
    if (st == ATTN_OK) st = attn_measure_fma_peak(1, seconds / 2, &m->peak_one);
    if (st != ATTN_OK) return st;
    m->peak_gflops = fmax(m->peak_together, cfg->threads * m->peak_one);
    if (!with_triad) return ATTN_OK;
    st = attn_measure_bandwidth(cfg->threads, 0, &m->triad_together);
    if (st == ATTN_OK) st = attn_measure_bandwidth(1, 0, &m->triad_one);
    m->triad_gbps = fmax(m->triad_together, m->triad_one);
    if (st == ATTN_OK) st = attn_measure_read_bandwidth(cfg->threads, 0, &m->read_together);
    if (st == ATTN_OK) st = attn_measure_read_bandwidth(1, 0, &m->read_one);
    m->read_gbps = fmax(m->read_together, m->read_one);
    return st;
}

/* -------------------------------------------------------------- progress */

/* A one-line indicator on stderr, shown only when stderr is a terminal and
 * the run has taken more than a few seconds; cleared before stdout output. */
typedef struct progress {
    bool enabled, shown;
    double start;
    int done, total;
} progress;

static void progress_clear(progress *p) {
    if (p->shown) {
        fputs("\r\033[K", stderr);
        fflush(stderr);
        p->shown = false;
    }
}

static void progress_show(progress *p, const char *what) {
    double elapsed = now_seconds() - p->start;
    if (!p->enabled || elapsed < 3.0) return;
    fprintf(stderr, "\r\033[K[%d/%d %.0f s] %s", p->done + 1, p->total, elapsed, what);
    fflush(stderr);
    p->shown = true;
}

/* ---------------------------------------------------------------- output */

static void format_bytes(double bytes, char *buf, size_t size) {
    if (!(bytes >= 0)) snprintf(buf, size, "-");
    else if (bytes < 1024.0 * 1024.0) snprintf(buf, size, "%.1f KiB", bytes / 1024.0);
    else if (bytes < 1024.0 * 1024.0 * 1024.0) snprintf(buf, size, "%.1f MiB", bytes / (1024.0 * 1024.0));
    else snprintf(buf, size, "%.2f GiB", bytes / (1024.0 * 1024.0 * 1024.0));
}

static double row_gflops(const bench_row *r) {
    return r->status == ROW_OK ? case_flops(r->c) / r->median_s * 1e-9 : NAN;
}

static double row_gbps(const bench_row *r) {
    return r->status == ROW_OK ? case_io_bytes(r->c) / r->median_s * 1e-9 : NAN;
}

/* A CSV number field: empty when not applicable. */
static void csv_number(double x, const char *fmt) {
    putchar(',');
    if (isfinite(x)) printf(fmt, x);
}

static void print_csv_row(const bench_row *r, const machine_limits *m) {
    const bench_case *c = r->c;
    bool ok = r->status == ROW_OK, decode = c->section == SEC_DECODE;
    printf("%s,%s,%s,%s,%d,%lld,%lld,%lld,%lld,%lld,%lld,%s", section_names[c->section], c->name,
           r->kernel == ATTN_KERNEL_REF ? "ref" : "flash", r->isa, r->threads, (long long)c->batch,
           (long long)c->len_q, (long long)c->len_kv, (long long)c->heads_q, (long long)c->heads_kv,
           (long long)c->dim, mask_names[c->mask]);
    csv_number(ok ? r->runs : NAN, "%.0f");
    csv_number(ok ? r->median_s * 1e3 : NAN, "%.4f");
    csv_number(row_gflops(r), "%.3f");
    csv_number(decode ? NAN : 100.0 * row_gflops(r) / m->peak_gflops, "%.2f");
    csv_number(decode ? row_gbps(r) : NAN, "%.3f");
    csv_number(decode ? 100.0 * row_gbps(r) / m->read_gbps : NAN, "%.2f");
    csv_number(ok || r->status == ROW_SKIPPED ? (double)r->workspace : NAN, "%.0f");
    csv_number(r->peak_rss, "%.0f");
    csv_number(case_io_bytes(c), "%.0f");
    printf(",%s\n", status_names[r->status]);
}

/* The machine rows: name, threads, GFLOP/s or GB/s, and % of the figure
 * that the kernels' percentages divide by (base). */
static void print_csv_peak(const char *name, const machine_limits *m, int threads, double gflops,
                           double base) {
    printf("machine,%s,,%s,%d,,,,,,,,,,%.3f,%.2f,,,,,,%s\n", name, m->peak_isa, threads, gflops,
           100.0 * gflops / base, isfinite(gflops) ? "ok" : "error");
}

static void print_csv_triad(const char *name, int threads, double gbps, double base) {
    printf("machine,%s,,,%d,,,,,,,,,,,,%.3f,%.2f,,,,ok\n", name, threads, gbps, 100.0 * gbps / base);
}

static void print_csv_machine(const machine_limits *m) {
    print_csv_peak("fma_peak", m, m->threads, m->peak_gflops, m->peak_gflops);
    print_csv_peak("fma_peak_threads", m, m->threads, m->peak_together, m->peak_gflops);
    print_csv_peak("fma_peak_1thread", m, 1, m->peak_one, m->peak_gflops);
    print_csv_triad("triad", m->threads, m->triad_gbps, m->triad_gbps);
    print_csv_triad("triad_threads", m->threads, m->triad_together, m->triad_gbps);
    print_csv_triad("triad_1thread", 1, m->triad_one, m->triad_gbps);
    print_csv_triad("read", m->threads, m->read_gbps, m->read_gbps);
    print_csv_triad("read_threads", m->threads, m->read_together, m->read_gbps);
    print_csv_triad("read_1thread", 1, m->read_one, m->read_gbps);
}

static void print_section_header(bench_section s) {
    switch (s) {
    case SEC_PREFILL:
    case SEC_BACKWARD:
        printf("\n%s: B=1 Hq=16, L=S; GFLOP/s count visible query-key pairs%s; %%peak of the FMA peak\n"
               "%-44s %-6s %-7s %3s %4s %11s %8s %6s %10s\n",
               s == SEC_BACKWARD ? "backward (attn_sdpa_backward: dq, dk, dv)" : "prefill",
               s == SEC_BACKWARD ? " x 2.5 forward FLOPs" : "", "name", "kernel", "isa", "thr", "runs",
               "median ms", "GFLOP/s", "%peak", "extra mem");
        break;
    case SEC_DECODE:
        printf("\ndecode: B=1 L=1 Hq=16 Hkv=8 D=128, causal-lower-right; GB/s = bytes of q, k, v, out / time;\n"
               "%%bw of the read bandwidth\n"
               "%-44s %-6s %-7s %3s %4s %11s %8s %6s %6s %10s\n", "name", "kernel", "isa", "thr", "runs",
               "median ms", "GFLOP/s", "GB/s", "%bw", "extra mem");
        break;
    case SEC_LONG:
        printf("\nlong: B=1 Hq=Hkv=1 D=128 causal, flash only; peak RSS of the process during the row\n"
               "%-44s %-6s %-7s %3s %4s %11s %8s %6s %10s %10s %10s\n", "name", "kernel", "isa", "thr",
               "runs", "median ms", "GFLOP/s", "%peak", "extra mem", "peak RSS", "in+out");
        break;
    case SEC_SCALING:
        printf("\nscaling: L=S=n, one head, D=64, full; ratios to the previous n (doubling n = 4x cells)\n"
               "%6s %10s %5s %11s %5s %11s %5s %10s %10s %10s\n", "n", "cells", "x", "ref ms", "x",
               "flash ms", "x", "ref ws", "flash ws", "in+out");
        break;
    }
}

/* One line of a prefill, decode or long table. */
static void print_table_row(const bench_row *r, const machine_limits *m) {
    const bench_case *c = r->c;
    const char *kernel = r->kernel == ATTN_KERNEL_REF ? "ref" : "flash";
    if (r->status != ROW_OK) {
        printf("%-44s %-6s %-7s %s\n", c->name, kernel, r->isa,
               r->status == ROW_UNAVAILABLE ? "unavailable (not in this build)" : "error (see message above)");
        return;
    }
    char ws[32];
    format_bytes((double)r->workspace, ws, sizeof ws);
    printf("%-44s %-6s %-7s %3d %4d %11.3f %8.2f ", c->name, kernel, r->isa, r->threads, r->runs,
           r->median_s * 1e3, row_gflops(r));
    if (c->section == SEC_DECODE) {
        printf("%6.2f %5.1f%% %10s\n", row_gbps(r), 100.0 * row_gbps(r) / m->read_gbps, ws);
    } else if (c->section == SEC_LONG) {
        char rss[32], io[32];
        format_bytes(r->peak_rss, rss, sizeof rss);
        format_bytes(case_io_bytes(c), io, sizeof io);
        printf("%5.1f%% %10s %10s %10s\n", 100.0 * row_gflops(r) / m->peak_gflops, ws, rss, io);
    } else {
        printf("%5.1f%% %10s\n", 100.0 * row_gflops(r) / m->peak_gflops, ws);
    }
}

/* A scaling line: both kernels on one n, with ratios to the previous n. */
static void print_scaling_row(const bench_row *ref, const bench_row *flash, const bench_row *prev_ref,
                              const bench_row *prev_flash) {
    const bench_case *c = ref ? ref->c : flash->c;
    double cells = (double)c->len_q * (double)c->len_kv;
    char ratio[3][16], times[2][16], mem[3][32];
    const bench_row *now[2] = {ref, flash}, *before[2] = {prev_ref, prev_flash};
    const bench_row *prev = prev_ref ? prev_ref : prev_flash;
    ratio[0][0] = 0;
    if (prev)
        snprintf(ratio[0], sizeof ratio[0], "%.1f",
                 cells / ((double)prev->c->len_q * (double)prev->c->len_kv));
    for (int i = 0; i < 2; i++) {
        const bench_row *r = now[i], *p = before[i];
        bool ok = r && r->status == ROW_OK;
        snprintf(times[i], sizeof times[i], "%s", !r ? "-" : ok ? "" : status_names[r->status]);
        if (ok) snprintf(times[i], sizeof times[i], "%.3f", r->median_s * 1e3);
        ratio[i + 1][0] = 0;
        if (ok && p && p->status == ROW_OK)
            snprintf(ratio[i + 1], sizeof ratio[i + 1], "%.1f", r->median_s / p->median_s);
    }
    format_bytes(ref && (ref->status == ROW_OK || ref->status == ROW_SKIPPED) ? (double)ref->workspace : -1,
                 mem[0], sizeof mem[0]);
    format_bytes(flash && flash->status == ROW_OK ? (double)flash->workspace : -1, mem[1], sizeof mem[1]);
    format_bytes(case_io_bytes(c), mem[2], sizeof mem[2]);
    printf("%6lld %10.0f %5s %11s %5s %11s %5s %10s %10s %10s\n", (long long)c->len_q, cells, ratio[0],
           times[0], ratio[1], times[1], ratio[2], mem[0], mem[1], mem[2]);
}

/* ------------------------------------------------------------------ main */

enum { F_QUICK = 1, F_CSV, F_LIST, F_THREADS, F_KERNEL, F_FILTER };
static const cli_flag bench_flags[] = {
    {"--quick", NULL, F_QUICK, 0},          {"--csv", NULL, F_CSV, 0},       {"--list", NULL, F_LIST, 0},
    {"--threads", "N", F_THREADS, 0},       {"--kernel", "ref|flash|all", F_KERNEL, 0},
    {"--filter", "TEXT", F_FILTER, 0},      CLI_FLAGS_END};
static void bench_help(FILE *out) {
    fprintf(out, "%s%s%s\ncsv header:\n  %s\n", bench_usage, bench_cache_help, bench_usage_columns, csv_header);
}
static const cli_flag *const bench_tables[] = {bench_flags, NULL};
const cli_spec cli_bench_spec = {"bench", bench_tables, bench_help, false};

/* Reads the flags into cfg.  Returns CLI_OK, or a usage error (printed);
 * *stopped when the run ends here (--help printed, or a usage error). */
static int parse_args(int argc, char **argv, bench_config *cfg, bool *stopped, bool *list) {
    const char *kernel = "all";
    int64_t threads = 0;
    cli_args args;
    const char *value;
    cli_args_begin(&args, &cli_bench_spec, argc, argv);
    for (int id; (id = cli_args_next(&args, &value)) != CLI_ARGS_END;) {
        switch (id) {
        case CLI_ARGS_STOP: *stopped = true; return args.status;
        case F_QUICK: cfg->quick = true; break;
        case F_CSV: cfg->csv = true; break;
        case F_LIST: *list = true; break;
        case F_THREADS:
            if (!cli_parse_int("bench", "--threads", value, 1, 4096, &threads)) return CLI_USAGE_ERROR;
            break;
        case F_KERNEL: kernel = value; break;
        default: cfg->filter = value; break;
        }
    }
    cfg->run_ref = strcmp(kernel, "ref") == 0 || strcmp(kernel, "all") == 0;
    cfg->run_flash = strcmp(kernel, "flash") == 0 || strcmp(kernel, "all") == 0;
    if (!cfg->run_ref && !cfg->run_flash)
        return cli_usage_error("bench", "--kernel must be ref, flash or all, got '%s'", kernel);
    cfg->threads = attn_thread_count((int)threads);
    cfg->ref_max_gflop = cfg->quick ? 0.2 : 0.7;
    cfg->min_runs = cfg->quick ? 3 : 5;
    cfg->max_runs = cfg->quick ? 50 : 200;
    cfg->target_seconds = cfg->quick ? 0.3 : 1.5;
    return CLI_OK;
}

/* Measures the machine, then every planned case the filter selects. */
static int run_plan(const bench_config *cfg_in, const case_list *plan) {
    const bench_config cfg = *cfg_in;
    const bench_case *cases = plan->items;
    const int n_cases = plan->count;
    int rc = CLI_OK;
    progress prog = {isatty(STDERR_FILENO) == 1, false, now_seconds(), 0, 0};
    for (int i = 0; i < n_cases; i++)
        if (name_matches(cfg.filter, cases[i].name)) prog.total += cfg.run_ref + cfg.run_flash;

    const double load_at_start = read_load_average();
    machine_limits m = {0};
    m.peak_isa = attn_fma_peak_isa();
    m.threads = cfg.threads;
    attn_status st = measure_machine(&cfg, true, &m);
    if (st != ATTN_OK)
        return cli_data_error("bench", "measuring the machine: %s: %s", attn_status_str(st), attn_last_error());

    if (cfg.csv) {
        printf("%s\n", csv_header);
        print_csv_machine(&m);
    } else {
        printf("attn bench (attn %s): %d threads, %s run; shapes as [B, L, H, D], fp32\n"
               "machine: FP32 FMA peak %.1f GFLOP/s (%s): %d threads at once %.1f, one thread %.1f\n"
               "         triad bandwidth %.1f GB/s: %d threads %.1f, one thread %.1f\n"
               "         read bandwidth %.1f GB/s: %d threads %.1f, one thread %.1f\n"
               "         (%%peak and %%bw divide by the larger figure: see --help; peak = best 0.1 s\n"
               "         window; triad over 3 x 256 MiB of doubles, best of 7, STREAM byte count;\n"
               "         read = a sum over 1 GiB, best of 7)\n",
               attn_version(), cfg.threads, cfg.quick ? "quick" : "full", m.peak_gflops, m.peak_isa,
               m.threads, m.peak_together, m.peak_one, m.triad_gbps, m.threads, m.triad_together,
               m.triad_one, m.read_gbps, m.threads, m.read_together, m.read_one);
    }
    fflush(stdout);

    int skipped_ref = 0, shown_section = -1;
    bench_row prev[2] = {{0}}, row[2] = {{0}};
    bool have_prev = false;
    for (int i = 0; i < n_cases; i++) {
        const bench_case *c = &cases[i];
        if (!name_matches(cfg.filter, c->name)) continue;
        /* The inputs, drawn in float32 and rounded to the case's dtypes
         * (attn_array_convert: nearest even); out has room for float32. */
        const int64_t q_shape[1] = {c->batch * c->len_q * c->heads_q * c->dim};
        const int64_t kv_shape[1] = {c->batch * c->len_kv * c->heads_kv * c->dim};
        attn_array qa = {0}, ka = {0}, va = {0};
        float *o = calloc((size_t)q_shape[0], sizeof(float));
        bool ready = o && attn_array_alloc(&qa, ATTN_F32, 1, q_shape) == ATTN_OK &&
                     attn_array_alloc(&ka, ATTN_F32, 1, kv_shape) == ATTN_OK &&
                     attn_array_alloc(&va, ATTN_F32, 1, kv_shape) == ATTN_OK;
        if (ready) {
            fill_uniform(qa.data, (size_t)q_shape[0], 1);
            fill_uniform(ka.data, (size_t)kv_shape[0], 2);
            fill_uniform(va.data, (size_t)kv_shape[0], 3);
            const bool eight_bit = attn_dtype_size(c->dtype) == 0; /* quantized below */
            ready = attn_array_convert(&qa, case_q_dtype(c)) == ATTN_OK &&
                    (eight_bit || (attn_array_convert(&ka, c->dtype) == ATTN_OK &&
                                   attn_array_convert(&va, c->dtype) == ATTN_OK));
        }
        void *k8 = NULL, *v8 = NULL; /* 8-bit K/V (kv=q8_0, kv=fp8): the float32 draws quantized */
        if (ready && attn_dtype_size(c->dtype) == 0) {
            k8 = malloc(attn_dtype_bytes(c->dtype, kv_shape[0]));
            v8 = malloc(attn_dtype_bytes(c->dtype, kv_shape[0]));
            ready = k8 && v8 && attn_quantize(ka.data, kv_shape[0], c->dtype, k8, NULL) == ATTN_OK &&
                    attn_quantize(va.data, kv_shape[0], c->dtype, v8, NULL) == ATTN_OK;
        }
        if (!ready) {
            progress_clear(&prog);
            fprintf(stderr, "attn bench: %s: cannot allocate the inputs\n", c->name);
            attn_array_free(&qa), attn_array_free(&ka), attn_array_free(&va), free(o), free(k8), free(v8);
            rc = CLI_DATA_ERROR;
            continue;
        }
        void *q = qa.data, *k = k8 ? k8 : ka.data, *v = v8 ? v8 : va.data;
        const attn_kernel kernels[2] = {ATTN_KERNEL_REF, ATTN_KERNEL_FLASH};
        const bool wanted[2] = {cfg.run_ref, cfg.run_flash};
        for (int j = 0; j < 2; j++) {
            if (!wanted[j]) continue;
            char what[128];
            snprintf(what, sizeof what, "%s %s", c->name, j ? "flash" : "ref");
            progress_show(&prog, what);
            time_kernel(&cfg, c, kernels[j], q, k, v, o, &row[j]);
            prog.done++;
            if (row[j].status == ROW_ERROR) rc = CLI_DATA_ERROR;
            if (row[j].status == ROW_SKIPPED && c->section != SEC_LONG) skipped_ref++;
        }
        attn_array_free(&qa), attn_array_free(&ka), attn_array_free(&va), free(o), free(k8), free(v8);

        progress_clear(&prog);
        if (cfg.csv) {
            for (int j = 0; j < 2; j++)
                if (wanted[j]) print_csv_row(&row[j], &m);
        } else {
            if ((int)c->section != shown_section) {
                print_section_header(c->section);
                shown_section = (int)c->section;
                have_prev = false;
            }
            if (c->section == SEC_SCALING) {
                print_scaling_row(cfg.run_ref ? &row[0] : NULL, cfg.run_flash ? &row[1] : NULL,
                                  have_prev && cfg.run_ref ? &prev[0] : NULL,
                                  have_prev && cfg.run_flash ? &prev[1] : NULL);
            } else {
                /* Skipped reference rows are counted in the notes, not listed. */
                for (int j = 0; j < 2; j++)
                    if (wanted[j] && row[j].status != ROW_SKIPPED) print_table_row(&row[j], &m);
            }
        }
        prev[0] = row[0], prev[1] = row[1];
        have_prev = true;
        if (!cli_stdout_ok("bench")) { /* a row takes seconds: stop at once */
            progress_clear(&prog);
            return CLI_DATA_ERROR;
        }
    }
    const bench_cache_settings cache_rows = {cfg.quick, cfg.csv, cfg.threads, cfg.filter, name_matches, m.read_gbps,
                                             cfg.min_runs, cfg.max_runs, cfg.target_seconds};
    if (cfg.run_flash && bench_cache_run(&cache_rows) != CLI_OK) rc = CLI_DATA_ERROR;
    /* The peak and the read bandwidth again: a figure far from the first
     * means the load on the machine changed during the run, and the
     * percentages above drifted (a shared host's memory bandwidth has been
     * seen to swing 30-45 GB/s within minutes). */
    progress_show(&prog, "FMA peak and read bandwidth, again");
    machine_limits end = m;
    double peak_end = measure_machine(&cfg, false, &end) == ATTN_OK ? end.peak_gflops : NAN;
    double read_end = NAN, read_end_one = NAN;
    if (attn_measure_read_bandwidth(cfg.threads, 0, &read_end) == ATTN_OK &&
        attn_measure_read_bandwidth(1, 0, &read_end_one) == ATTN_OK)
        read_end = fmax(read_end, read_end_one);
    progress_clear(&prog);
    if (cfg.csv) {
        print_csv_peak("fma_peak_end", &m, m.threads, peak_end, m.peak_gflops);
        print_csv_triad("read_end", m.threads, read_end, m.read_gbps);
    } else {
        double drift = peak_end / m.peak_gflops, read_drift = read_end / m.read_gbps;
        printf("\nFMA peak measured again at the end: %.1f GFLOP/s (%.0f%% of the figure at the start)%s\n",
               peak_end, 100.0 * drift,
               drift > 1.2   ? ";\nthe machine was busier at the start, so the %peak figures above are overstated."
               : drift < 0.8 ? ";\nthe machine got busier during the run, so the later rows are understated."
                             : ".");
        printf("read bandwidth measured again at the end: %.1f GB/s (%.0f%% of the figure at the start)%s\n",
               read_end, 100.0 * read_drift,
               read_drift > 1.15   ? ";\nthe memory was busier at the start, so the decode and cache %bw figures are\n"
                                     "overstated."
               : read_drift < 0.87 ? ";\nthe memory was less busy at the start, so the decode and cache %bw figures\n"
                                     "are understated."
                                   : ".");
        printf("\nnotes: times are medians of several runs after a warm-up; ratios within one run are\n"
               "what to compare on a shared machine.  The reference kernel runs on one thread and only\n"
               "where a row needs at most %.1f GFLOP (%d ref rows skipped)%s.\n",
               cfg.ref_max_gflop, skipped_ref,
               cfg.quick ? "; --quick leaves out the long case and the biggest shapes" : "");
        double load_at_end = read_load_average();
        if (load_at_start >= 0 && load_at_end >= 0)
            printf("load average (1 min): %.2f before, %.2f after, on %ld online CPUs; this run adds up\n"
                   "to %d, anything more is other processes competing for the cores.\n",
                   load_at_start, load_at_end, sysconf(_SC_NPROCESSORS_ONLN), cfg.threads);
    }
    return rc;
}

int cmd_bench(int argc, char **argv) {
    bench_config cfg = {0};
    bool stopped = false, list = false;
    int rc = parse_args(argc, argv, &cfg, &stopped, &list);
    if (rc != CLI_OK || stopped) return rc;
    case_list plan = {0};
    plan_cases(&cfg, &plan);
    int selected = 0;
    for (int i = 0; i < plan.count; i++) selected += name_matches(cfg.filter, plan.items[i].name);
    selected += bench_cache_rows(cfg.quick, cfg.filter, name_matches, false);
    if (plan.failed) {
        rc = cli_data_error("bench", "out of memory for the plan of cases");
    } else if (selected == 0) { /* with --list too: listing nothing would say the filter is fine */
        rc = cli_usage_error("bench", "--filter '%s' matches none of the %d %s rows (attn bench%s --list "
                             "names them)", cfg.filter, plan.count, cfg.quick ? "quick" : "full",
                             cfg.quick ? " --quick" : "");
    } else if (list) {
        for (int i = 0; i < plan.count; i++)
            if (name_matches(cfg.filter, plan.items[i].name)) printf("%s\n", plan.items[i].name);
        bench_cache_rows(cfg.quick, cfg.filter, name_matches, true);
    } else {
        rc = run_plan(&cfg, &plan);
    }
    free(plan.items);
    return rc;
}
