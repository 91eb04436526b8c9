/* Decoding with a paged KV cache (attn_cache.h): two sequences share a
 * prompt by forking, each generates a few tokens, and every step attends
 * both sequences in one batched call.  The "model" is random projections:
 * what matters is the order of the calls.  One layer; a real model calls
 * append and attend once per layer per step (docs/cache.md).
 *
 * Shapes: q [1, n, Hq, D] per call, k [1, n, Hkv, D], v [1, n, Hkv, D]. */
#include <attn_cache.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

enum { HQ = 4, HKV = 2, D = 32, PROMPT = 21, NEW_TOKENS = 5 };

/* Stand-in projections: deterministic values for row `position` of a sequence. */
static void project(float *x, int64_t rows, int64_t heads, int64_t position, unsigned salt) {
    for (int64_t i = 0; i < rows * heads * D; i++)
        x[i] = (float)sin(0.37 * (double)(i + (position + 1) * 1000) + salt);
}

static int check(attn_status st, const char *what) {
    if (st != ATTN_OK) fprintf(stderr, "%s: %s: %s\n", what, attn_status_str(st), attn_last_error());
    return st != ATTN_OK;
}

int main(void) {
    attn_rope_options rope = ATTN_ROPE_OPTIONS_INIT; /* keys rotated on append */
    attn_kv_cache_config cfg = ATTN_KV_CACHE_CONFIG_INIT;
    cfg.layers = 1;
    cfg.kv_heads = HKV;
    cfg.head_dim = D;
    cfg.dtype = ATTN_BF16; /* stored in bfloat16, rounded to nearest even */
    cfg.layout = ATTN_KV_PAGED;
    cfg.max_seqs = 2;
    cfg.capacity = 64;
    cfg.block_rows = 8;
    cfg.num_blocks = 12;
    cfg.rope = &rope;
    attn_kv_cache *cache;
    if (check(attn_kv_cache_new(&cfg, &cache), "create")) return 1;

    static float q[PROMPT * HQ * D], k[PROMPT * HKV * D], v[PROMPT * HKV * D], out[PROMPT * HQ * D];
    int64_t seqs[2], rows[2] = {1, 1}, length = PROMPT;
    int failed = check(attn_kv_cache_seq_add(cache, &seqs[0]), "seq_add");

    /* Prefill: the prompt's keys and values in one append, its queries in one call. */
    project(q, PROMPT, HQ, 0, 1);
    project(k, PROMPT, HKV, 0, 2);
    project(v, PROMPT, HKV, 0, 3);
    attn_tensor qt = attn_tensor_4d(q, 1, PROMPT, HQ, D), kt = attn_tensor_4d(k, 1, PROMPT, HKV, D);
    attn_tensor vt = attn_tensor_4d(v, 1, PROMPT, HKV, D), ot = attn_tensor_4d(out, 1, PROMPT, HQ, D);
    failed = failed || check(attn_rope_apply(&qt, NULL, 0, &rope), "rope") ||
             check(attn_kv_cache_append(cache, seqs[0], 0, &kt, &vt), "append prompt") ||
             check(attn_kv_cache_attend(cache, 0, 1, seqs, &length, &qt, NULL, &ot, NULL), "prefill");

    /* The second sequence shares the prompt's blocks: no copy until it writes. */
    failed = failed || check(attn_kv_cache_seq_fork(cache, seqs[0], &seqs[1]), "fork");
    for (int step = 0; step < NEW_TOKENS && !failed; step++) {
        const int64_t position = PROMPT + step;
        for (int s = 0; s < 2 && !failed; s++) {
            project(q + s * HQ * D, 1, HQ, position, 10u * (unsigned)s + 1);
            project(k, 1, HKV, position, 10u * (unsigned)s + 2);
            project(v, 1, HKV, position, 10u * (unsigned)s + 3);
            attn_tensor qs = attn_tensor_4d(q + s * HQ * D, 1, 1, HQ, D);
            attn_tensor ks = attn_tensor_4d(k, 1, 1, HKV, D), vs = attn_tensor_4d(v, 1, 1, HKV, D);
            failed = check(attn_rope_apply(&qs, NULL, position, &rope), "rope") ||
                     check(attn_kv_cache_append(cache, seqs[s], 0, &ks, &vs), "append");
        }
        /* Both sequences' new tokens in one call: q [1, 2, Hq, D]. */
        attn_tensor q2 = attn_tensor_4d(q, 1, 2, HQ, D), o2 = attn_tensor_4d(out, 1, 2, HQ, D);
        failed = failed || check(attn_kv_cache_attend(cache, 0, 2, seqs, rows, &q2, NULL, &o2, NULL), "decode");
        if (!failed)
            printf("step %d: out[seq 0][0..2] = %+.4f %+.4f %+.4f   out[seq 1][0..2] = %+.4f %+.4f %+.4f\n", step,
                   out[0], out[1], out[2], out[HQ * D], out[HQ * D + 1], out[HQ * D + 2]);
    }
    int64_t free_blocks, total_blocks;
    if (!failed && !check(attn_kv_cache_pool(cache, &free_blocks, &total_blocks, NULL), "pool"))
        printf("pool: %lld of %lld blocks free (the prompt's first 2 blocks are shared)\n", (long long)free_blocks,
               (long long)total_blocks);
    attn_kv_cache_free(cache);
    return failed;
}
