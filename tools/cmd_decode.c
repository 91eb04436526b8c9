/*
 * cmd_decode.c — `attn decode`: a stream of queries, keys and values run
 * through a KV cache (attn_cache.h) as a model would run it (a chunked
 * prefill, then one position per step), and the proof that the outputs are
 * those of one full-sequence causal attention call.
 *
 * Shapes (as attn sdpa; each batch entry is one sequence of the cache):
 *   q [B, L, Hq, D]   k [B, L, Hkv, D]   v [B, L, Hkv, Dv]   o [B, L, Hq, Dv]
 *   (3-D files drop B, 2-D files also the heads, as for attn sdpa)
 * Step t appends rows [p, p + n) of k and v to every sequence (RoPE on
 * the keys at their positions with --rope), then attends rows [p, p + n)
 * of q in one batched attn_kv_cache_attend call: n = --chunk while
 * p < --prefill, 1 after.
 * The proof: attn_sdpa_forward on the whole of q, k and v, causal, with
 * RoPE applied to all of q and k by attn_rope_apply and the keys and
 * values rounded to --cache-dtype as the cache rounds them, so that what
 * remains is float32 rounding.
 */
#include "attn_cache.h"
#include "attn_rope.h"
#include "cli.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The proof's bound on max |decoded - full| / max(1, max |full|): the
 * cache merges per-piece float32 outputs exactly, so a few float32 ulps
 * remain (tests/support/tolerances.h's CACHE_OUT_REL_FAIL with room for
 * wider heads). */
#define DECODE_TOLERANCE_REL 1e-5

enum { F_Q = 1, F_K, F_V, F_O, F_CHUNK, F_PREFILL, F_PAGED, F_BLOCK_SIZE, F_CACHE_DTYPE, F_ROPE, F_ROPE_THETA };

static const cli_flag decode_flags[] = {
    {"-q", "Q.npy", F_Q, 0},
    {"-k", "K.npy", F_K, 0},
    {"-v", "V.npy", F_V, 0},
    {"-o", "O.npy", F_O, 0},
    {"--chunk", "N", F_CHUNK, 0},
    {"--prefill", "P", F_PREFILL, 0},
    {"--paged", NULL, F_PAGED, 0},
    {"--block-size", "N", F_BLOCK_SIZE, 0},
    {"--cache-dtype", CLI_KV_DTYPES, F_CACHE_DTYPE, 0},
    {"--kv", CLI_KV_DTYPES, F_CACHE_DTYPE, 0},
    {"--rope", NULL, F_ROPE, 0},
    {"--rope-theta", "T", F_ROPE_THETA, 0},
    CLI_FLAGS_END};

static void decode_help(FILE *out) {
    fprintf(out,
    "usage: attn decode -q Q.npy -k K.npy -v V.npy [-o O.npy] [--prefill P] [--chunk N]\n"
    "                   [--paged [--block-size N]] [--cache-dtype|--kv f32|f16|bf16|q8_0|fp8]\n"
    "                   [--rope [--rope-theta T]] [--scale S] [--threads N] [--quiet]\n\n"
    "Runs a sequence through a KV cache as a model decodes it, and proves the result.\n"
    "Each batch entry of the files is one sequence of the cache.  The first P positions\n"
    "are a chunked prefill: N positions a step (their keys and values appended, then\n"
    "their queries attended); every later position is one decoding step.  All the\n"
    "sequences take each step together, in one batched call.  Then the outputs are\n"
    "compared with one full-sequence causal attention call (what attn sdpa computes with\n"
    "its causal mask), and the largest difference is printed beside the tolerance.\n\n"
    "inputs (float32; float64 and float16 are converted; NaN/Inf refused):\n"
    "  -q Q.npy            queries [B, L, Hq, D] (or [L, Hq, D], [L, D])\n"
    "  -k K.npy            keys    [B, L, Hkv, D]  (the same B and L; Hq a multiple of Hkv)\n"
    "  -v V.npy            values  [B, L, Hkv, Dv]\n"
    "output (float32, written only when the proof holds; never half-written):\n"
    "  -o O.npy            the decoded outputs [B, L, Hq, Dv], same rank as Q\n"
    "the cache:\n"
    "  --prefill P         positions processed in chunks before decoding starts (default 0)\n"
    "  --chunk N           positions per prefill step (default 64)\n"
    "  --paged             blocks from a shared pool (default: one region per sequence)\n"
    "  --block-size N      rows per block of a paged cache (default 16)\n"
    "  --cache-dtype T     f32 (default), f16 or bf16: what the cache stores (rounded to\n"
    "                      nearest even); the full call then reads the same rounded values;\n"
    "                      q8_0 or fp8 (e4m3): 8-bit blocks of 32 values with a float16\n"
    "                      scale, quantized on append (D, Dv multiples of 32; docs/cache.md)\n"
    "  --kv T              the same as --cache-dtype\n"
    "  --rope              rotate the keys on append (RoPE, NEOX pairing, at their positions)\n"
    "                      and the queries likewise; the full call rotates all of q and k\n"
    "  --rope-theta T      RoPE's base (default 10000)\n"
    "  --scale S, --threads N, --kernel auto|ref|flash, --precision exact|fast,\n"
    "  --allow-slow        as for attn sdpa\n"
    "  --quiet             no line on stderr about the proof and what was written\n\n"
    "exit status: 0 when max |decoded - full| <= %g x max(1, max |full|), 1 when beyond it\n"
    "or on a data error, 2 on a usage error.\n\n"
    "examples:\n"
    "  attn decode -q Q.npy -k K.npy -v V.npy -o O.npy\n"
    "  attn decode -q Q.npy -k K.npy -v V.npy --prefill 100 --chunk 32 --paged --block-size 16\n"
    "  attn decode -q Q.npy -k K.npy -v V.npy --cache-dtype bf16 --rope --rope-theta 500000\n"
    "  attn decode -q Q.npy -k K.npy -v V.npy --kv q8_0 --paged\n",
    DECODE_TOLERANCE_REL);
}

static const cli_flag *const decode_tables[] = {decode_flags, cli_compute_flags, cli_quiet_flags, NULL};
const cli_spec cli_decode_spec = {"decode", decode_tables, decode_help, false};

typedef struct decode_settings {
    int64_t chunk, prefill, block_size;
    bool paged, rope;
    double rope_theta;
    attn_dtype dtype;
} decode_settings;

/* The value of a flag of decode_flags; false after a usage error. */
static bool take_flag(decode_settings *s, int id, const char *value) {
    switch (id) {
    case F_CHUNK: return cli_parse_int("decode", "--chunk", value, 1, INT32_MAX, &s->chunk);
    case F_PREFILL: return cli_parse_int("decode", "--prefill", value, 0, INT64_MAX / 2, &s->prefill);
    case F_BLOCK_SIZE: return cli_parse_int("decode", "--block-size", value, 1, INT32_MAX, &s->block_size);
    case F_PAGED: s->paged = true; return true;
    case F_ROPE: s->rope = true; return true;
    case F_ROPE_THETA: return cli_parse_float("decode", "--rope-theta", value, 1e-300, 1e300, &s->rope_theta);
    case F_CACHE_DTYPE:
        return cli_parse_kv_dtype("decode", "--cache-dtype", value, &s->dtype);
    }
    return true;
}

/* The reference's keys and values [B, L, Hkv, D|Dv] rounded to dtype and
 * back in place, exactly as the cache rounds them: through a cache of that
 * dtype (no RoPE: k is rotated already), read back through its views. */
static attn_status round_as_cache(attn_dtype dtype, int64_t B, int64_t L, int64_t Hkv, int64_t D, int64_t Dv,
                                  float *k, float *v) {
    if (dtype == ATTN_F32) return ATTN_OK;
    attn_kv_cache_config cfg = ATTN_KV_CACHE_CONFIG_INIT;
    cfg.layers = 1;
    cfg.kv_heads = Hkv;
    cfg.head_dim = D;
    cfg.value_dim = Dv;
    cfg.dtype = dtype;
    cfg.max_seqs = 1;
    cfg.capacity = L;
    attn_kv_cache *c = NULL;
    attn_status st = attn_kv_cache_new(&cfg, &c);
    for (int64_t b = 0; b < B && !st; b++) {
        int64_t seq, count;
        attn_kv_segment seg;
        attn_tensor kb = attn_tensor_4d(k + b * L * Hkv * D, 1, L, Hkv, D);
        attn_tensor vb = attn_tensor_4d(v + b * L * Hkv * Dv, 1, L, Hkv, Dv);
        if ((st = attn_kv_cache_seq_add(c, &seq)) || (st = attn_kv_cache_append(c, seq, 0, &kb, &vb)) ||
            (st = attn_kv_cache_view(c, seq, 0, &seg, 1, &count)))
            break;
        /* A contiguous cache's view is one segment, its rows contiguous. */
        const attn_tensor *half[2] = {&seg.k, &seg.v};
        float *dst[2] = {kb.data, vb.data};
        for (int t = 0; t < 2 && !st; t++) {
            const int64_t n = half[t]->shape[1] * half[t]->shape[2] * half[t]->shape[3];
            if (attn_dtype_size(dtype) == 0) { /* an 8-bit block format: its values */
                st = attn_dequantize(half[t]->data, dtype, n, dst[t]);
                continue;
            }
            attn_array a = {0};
            if ((st = attn_array_alloc(&a, dtype, 1, &n))) break;
            memcpy(a.data, half[t]->data, (size_t)n * attn_dtype_size(dtype));
            if (!(st = attn_array_convert(&a, ATTN_F32))) memcpy(dst[t], a.data, (size_t)n * sizeof(float));
            attn_array_free(&a);
        }
        if (!st) st = attn_kv_cache_seq_free(c, seq);
    }
    attn_kv_cache_free(c);
    return st;
}

int cmd_decode(int argc, char **argv) {
    const char *path[F_O + 1] = {0};
    decode_settings set = {.chunk = 64, .block_size = 16, .rope_theta = 10000.0, .dtype = ATTN_F32};
    cli_attention_options ao = CLI_ATTENTION_OPTIONS_INIT;
    attn_array qa = {0}, ka = {0}, va = {0};
    float *out = NULL, *full = NULL, *q_rot = NULL, *k_ref = NULL, *v_ref = NULL, *q_step = NULL, *o_step = NULL;
    attn_kv_cache *cache = NULL;
    int64_t *seqs = NULL, *rows = NULL;
    int rc = CLI_OK;

    cli_args args;
    const char *value;
    cli_args_begin(&args, &cli_decode_spec, argc, argv);
    for (int id; (id = cli_args_next(&args, &value)) != CLI_ARGS_END;) {
        if (id == CLI_ARGS_STOP) return args.status;
        int taken = cli_attention_take(&ao, &args, id, value);
        if (taken < 0) return CLI_USAGE_ERROR;
        if (taken) continue;
        if (id <= F_O) path[id] = value;
        else if (!take_flag(&set, id, value)) return CLI_USAGE_ERROR;
    }
    const bool quiet = cli_args_given(&args, CLI_ID_QUIET);
    if (!path[F_Q] || !path[F_K] || !path[F_V])
        return cli_usage_error("decode", "missing %s", !path[F_Q] ? "-q Q.npy" : !path[F_K] ? "-k K.npy" : "-v V.npy");
    if (cli_args_given(&args, F_BLOCK_SIZE) && !set.paged)
        return cli_usage_error("decode", "--block-size is for a paged cache: add --paged");
    if (cli_args_given(&args, F_ROPE_THETA) && !set.rope)
        return cli_usage_error("decode", "--rope-theta needs --rope");
    const char *const inputs[] = {path[F_Q], path[F_K], path[F_V]};
    const char *const outputs[] = {path[F_O]};
    if (cli_check_paths("decode", inputs, 3, outputs, 1)) return CLI_USAGE_ERROR;

    attn_tensor q, k, v;
    if (cli_load_qkv("decode", "-q", path[F_Q], CLI_LAYOUT_BLHD, &qa, &q) ||
        cli_load_qkv("decode", "-k", path[F_K], CLI_LAYOUT_BLHD, &ka, &k) ||
        cli_load_qkv("decode", "-v", path[F_V], CLI_LAYOUT_BLHD, &va, &v)) {
        rc = CLI_DATA_ERROR;
        goto cleanup;
    }
    const int64_t B = q.shape[0], L = q.shape[1], Hq = q.shape[2], D = q.shape[3], Hkv = k.shape[2], Dv = v.shape[3];
    if (k.shape[0] != B || v.shape[0] != B || k.shape[1] != L || v.shape[1] != L || v.shape[2] != Hkv ||
        k.shape[3] != D || Hq % Hkv) {
        char qs[96], ks[96], vs[96];
        rc = cli_data_error("decode",
                            "-q %s, -k %s and -v %s do not make one stream: they need the same B and L, k the "
                            "width of q, v the heads of k, and Hq a multiple of Hkv",
                            cli_shape_str(&qa, qs, sizeof qs), cli_shape_str(&ka, ks, sizeof ks),
                            cli_shape_str(&va, vs, sizeof vs));
        goto cleanup;
    }
    /* Two passes' worth of attention (the steps, and the full call) and
     * the outputs twice, plus the copies of q, k, v. */
    const double work_bytes = 4.0 * (2.0 * (double)(B * L * Hq * Dv) + 2.0 * (double)(qa.count + ka.count + va.count));
    if ((rc = cli_check_budget("decode", &ao, &q, &k, &v, 2, work_bytes))) goto cleanup;
    if (set.rope && D % 2) {
        rc = cli_data_error("decode", "--rope rotates pairs of widths: D = %lld must be even", (long long)D);
        goto cleanup;
    }

    /* The queries rotated at their positions once for all (each row's
     * rotation depends on its position only), and the reference's keys:
     * rotated, then both keys and values rounded as the cache stores them. */
    attn_rope_options rope = ATTN_ROPE_OPTIONS_INIT;
    rope.theta = set.rope_theta;
    rope.threads = ao.opt.threads;
    const size_t q_bytes = (size_t)qa.count * sizeof(float), k_bytes = (size_t)ka.count * sizeof(float),
                 v_bytes = (size_t)va.count * sizeof(float), o_count = (size_t)(B * L * Hq * Dv);
    q_rot = malloc(q_bytes);
    k_ref = malloc(k_bytes);
    v_ref = malloc(v_bytes);
    out = malloc(o_count * sizeof(float));
    full = malloc(o_count * sizeof(float));
    const int64_t step_rows = B * (set.chunk > 1 ? set.chunk : 1);
    q_step = malloc((size_t)(step_rows * Hq * D) * sizeof(float));
    o_step = malloc((size_t)(step_rows * Hq * Dv) * sizeof(float));
    seqs = malloc((size_t)B * sizeof *seqs);
    rows = malloc((size_t)B * sizeof *rows);
    if (!q_rot || !k_ref || !v_ref || !out || !full || !q_step || !o_step || !seqs || !rows) {
        rc = cli_data_error("decode", "out of memory for a stream of %lld positions", (long long)L);
        goto cleanup;
    }
    memcpy(q_rot, q.data, q_bytes);
    memcpy(k_ref, k.data, k_bytes);
    memcpy(v_ref, v.data, v_bytes);
    attn_tensor qr = attn_tensor_4d(q_rot, B, L, Hq, D), kr = attn_tensor_4d(k_ref, B, L, Hkv, D);
    attn_status st = ATTN_OK;
    if (set.rope && ((st = attn_rope_apply(&qr, NULL, 0, &rope)) || (st = attn_rope_apply(&kr, NULL, 0, &rope)))) {
        rc = cli_data_error("decode", "RoPE: %s: %s", attn_status_str(st), attn_last_error());
        goto cleanup;
    }
    if ((st = round_as_cache(set.dtype, B, L, Hkv, D, Dv, k_ref, v_ref))) {
        rc = cli_data_error("decode", "rounding to %s: %s: %s", attn_dtype_name(set.dtype), attn_status_str(st),
                            attn_last_error());
        goto cleanup;
    }

    attn_kv_cache_config cfg = ATTN_KV_CACHE_CONFIG_INIT;
    cfg.layers = 1;
    cfg.kv_heads = Hkv;
    cfg.head_dim = D;
    cfg.value_dim = Dv;
    cfg.dtype = set.dtype;
    cfg.layout = set.paged ? ATTN_KV_PAGED : ATTN_KV_CONTIGUOUS;
    cfg.max_seqs = B;
    cfg.capacity = L;
    cfg.block_rows = set.block_size;
    cfg.num_blocks = set.paged ? B * ((L + set.block_size - 1) / set.block_size) : 0;
    cfg.rope = set.rope ? &rope : NULL;
    if ((st = attn_kv_cache_new(&cfg, &cache))) {
        rc = cli_data_error("decode", "the cache: %s: %s", attn_status_str(st), attn_last_error());
        goto cleanup;
    }
    for (int64_t b = 0; b < B && !st; b++) st = attn_kv_cache_seq_add(cache, &seqs[b]);

    const double start = cli_seconds();
    int64_t steps = 0;
    for (int64_t at = 0; at < L && !st; steps++) {
        const int64_t n = at < set.prefill ? (set.chunk < L - at ? set.chunk : L - at) : 1;
        for (int64_t b = 0; b < B && !st; b++) {
            /* Rows [at, at + n) of batch b: the files' own rows, strided views. */
            attn_tensor kb = k, vb = v;
            kb.data = (float *)k.data + b * k.stride[0] + at * k.stride[1];
            vb.data = (float *)v.data + b * v.stride[0] + at * v.stride[1];
            kb.shape[0] = vb.shape[0] = 1;
            kb.shape[1] = vb.shape[1] = n;
            st = attn_kv_cache_append(cache, seqs[b], 0, &kb, &vb);
            memcpy(q_step + b * n * Hq * D, q_rot + (b * L + at) * Hq * D, (size_t)(n * Hq * D) * sizeof(float));
            rows[b] = n;
        }
        attn_tensor qt = attn_tensor_4d(q_step, 1, B * n, Hq, D), ot = attn_tensor_4d(o_step, 1, B * n, Hq, Dv);
        if (!st) st = attn_kv_cache_attend(cache, 0, B, seqs, rows, &qt, &ao.opt, &ot, NULL);
        for (int64_t b = 0; b < B && !st; b++)
            memcpy(out + (b * L + at) * Hq * Dv, o_step + b * n * Hq * Dv, (size_t)(n * Hq * Dv) * sizeof(float));
        at += n;
    }
    const double elapsed = cli_seconds() - start;
    if (st) {
        rc = cli_data_error("decode", "step %lld: %s: %s", (long long)steps, attn_status_str(st), attn_last_error());
        goto cleanup;
    }

    attn_tensor vr = attn_tensor_4d(v_ref, B, L, Hkv, Dv), ft = attn_tensor_4d(full, B, L, Hq, Dv);
    attn_sdpa_options full_opt = ao.opt;
    full_opt.causal = 1;
    if ((st = attn_sdpa_forward(&qr, &kr, &vr, &full_opt, &ft, NULL, NULL))) {
        rc = cli_data_error("decode", "the full call: %s: %s", attn_status_str(st), attn_last_error());
        goto cleanup;
    }
    double diff = 0, scale = 1;
    for (size_t i = 0; i < o_count; i++) {
        const double d = fabs((double)out[i] - (double)full[i]);
        diff = d > diff || d != d ? d : diff;
        scale = fmax(scale, fabs((double)full[i]));
    }
    const double tolerance = DECODE_TOLERANCE_REL * scale;
    const bool proved = diff <= tolerance;
    int64_t free_blocks = 0, total_blocks = 0;
    attn_kv_cache_pool(cache, &free_blocks, &total_blocks, NULL);
    if (!quiet || !proved)
        fprintf(stderr,
                "attn decode: %lld sequence(s) of %lld positions in %lld steps (%s cache, %s%s), %.3f s;\n"
                "  max |decoded - full causal call| = %.3g, tolerance %.3g (%g x max(1, max|O| = %.3g)): %s\n",
                (long long)B, (long long)L, (long long)steps, set.paged ? "paged" : "contiguous",
                attn_dtype_name(set.dtype), set.rope ? ", RoPE on append" : "", elapsed, diff, tolerance,
                DECODE_TOLERANCE_REL, scale, proved ? "equal" : "NOT EQUAL");
    if (!proved) {
        rc = cli_data_error("decode", "the decoded outputs differ from the full call beyond the tolerance%s",
                            path[F_O] ? "; -o not written" : "");
        goto cleanup;
    }
    if (path[F_O]) {
        cli_output o = {path[F_O], qa.ndim, {0}, out, ATTN_F32};
        const int64_t o_blhd[4] = {B, L, Hq, Dv};
        cli_qkv_file_shape(CLI_LAYOUT_BLHD, qa.ndim, o_blhd, o.shape);
        if (!cli_save_outputs("decode", &o, 1)) rc = CLI_DATA_ERROR;
        else if (!quiet) cli_print_written("decode", &o, 1, NULL);
    }

cleanup:
    attn_kv_cache_free(cache);
    free(out);
    free(full);
    free(q_rot);
    free(k_ref);
    free(v_ref);
    free(q_step);
    free(o_step);
    free(seqs);
    free(rows);
    attn_array_free(&qa);
    attn_array_free(&ka);
    attn_array_free(&va);
    cli_attention_options_free(&ao);
    return rc;
}
