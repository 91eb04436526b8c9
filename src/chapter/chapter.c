/*
 * chapter.c — the chapter's worked example, computed once (attn_chapter.h).
 *
 * Shape legend: X, Q, K, V, O [3, 2]   W [2, 2]   scores, weights [3, 3]
 */
#include "attn_chapter.h"
#include "attn_interp.h"

#include "base/base.h"

#include <math.h>
#include <string.h>

enum { POS = ATTN_CHAPTER_POSITIONS, WIDTH = ATTN_CHAPTER_WIDTH };

attn_status attn_chapter_attend(attn_chapter_pass *p, int causal) {
    if (!p) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_chapter_attend: pass is NULL");
    attn_tensor q = attn_tensor_2d(&p->q[0][0], POS, WIDTH);
    attn_tensor k = attn_tensor_2d(&p->k[0][0], POS, WIDTH);
    attn_tensor v = attn_tensor_2d(&p->v[0][0], POS, WIDTH);
    attn_tensor o = attn_tensor_2d(&p->out[0][0], POS, WIDTH);
    attn_sdpa_options unscaled = ATTN_SDPA_OPTIONS_INIT, opt = ATTN_SDPA_OPTIONS_INIT;
    unscaled.scale = 1.0f;
    unscaled.causal = opt.causal = causal;
    attn_status st;
    if ((st = attn_sdpa_scores(&q, &k, &unscaled, &p->raw[0][0])) ||
        (st = attn_sdpa_scores(&q, &k, &opt, &p->scaled[0][0])))
        return st;
    return attn_sdpa_forward(&q, &k, &v, &opt, &o, &p->weights[0][0], NULL);
}

/* Q = X·W_Q, K = X·W_K, V = X·W_V into p, then attend. */
static attn_status project_and_attend(const attn_chapter *ch, const float *x, attn_chapter_pass *p) {
    attn_status st;
    if ((st = attn_linear_forward(x, POS, WIDTH, &ch->wq[0][0], NULL, WIDTH, &p->q[0][0])) ||
        (st = attn_linear_forward(x, POS, WIDTH, &ch->wk[0][0], NULL, WIDTH, &p->k[0][0])) ||
        (st = attn_linear_forward(x, POS, WIDTH, &ch->wv[0][0], NULL, WIDTH, &p->v[0][0])))
        return st;
    return attn_chapter_attend(p, 0);
}

/* Figure 2 through attn_sdpa_paths: each case's q, k, v (from the paths'
 * traces), and its scores, weights and output recomputed by attend, so a
 * case reads exactly like a pass. */
static attn_status figure2_cases(attn_chapter *ch) {
    attn_tensor q = attn_tensor_2d(&ch->base.q[0][0], POS, WIDTH);
    attn_tensor k = attn_tensor_2d(&ch->base.k[0][0], POS, WIDTH);
    attn_tensor v = attn_tensor_2d(&ch->base.v[0][0], POS, WIDTH);
    attn_tensor k2 = attn_tensor_2d(&ch->changed.k[0][0], POS, WIDTH);
    attn_tensor v2 = attn_tensor_2d(&ch->changed.v[0][0], POS, WIDTH);
    attn_paths paths = {0};
    attn_status st = attn_sdpa_paths(&q, &k, &v, NULL, &k2, &v2, NULL, &paths);
    static const attn_path_case order[4] = {ATTN_PATH_BASE, ATTN_PATH_K_ONLY, ATTN_PATH_V_ONLY,
                                            ATTN_PATH_BOTH};
    for (int c = 0; c < 4 && st == ATTN_OK; c++) {
        const attn_trace *t = &paths.run[order[c]];
        attn_chapter_pass *p = &ch->cases[c];
        memcpy(p->q, t->q, sizeof p->q);
        memcpy(p->k, t->k, sizeof p->k);
        memcpy(p->v, t->v, sizeof p->v);
        st = attn_chapter_attend(p, 0);
        /* The pass and the paths' own run are the same computation. */
        if (st == ATTN_OK && memcmp(p->out, t->z, sizeof p->out) != 0)
            st = attn__fail(ATTN_ERR_INTERNAL, "chapter: Figure 2 case %d differs from attn_sdpa_paths", c);
    }
    if (st == ATTN_OK) memcpy(ch->interaction, paths.interaction_z, sizeof ch->interaction);
    attn_paths_free(&paths);
    return st;
}

attn_status attn_chapter_compute(attn_chapter *ch) {
    if (!ch) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_chapter_compute: ch is NULL");
    memset(ch, 0, sizeof *ch);
    ch->c = sqrt(2.0) * log(2.0);
    const float c = (float)ch->c;
    const float x[POS][WIDTH] = {{1, 0}, {0, 1}, {1, 1}};
    const float wq[WIDTH][WIDTH] = {{1, 0}, {0, 1}};
    const float wk[WIDTH][WIDTH] = {{c, 0}, {0, c}};
    const float wv[WIDTH][WIDTH] = {{2, 0}, {0, 1}};
    memcpy(ch->x, x, sizeof x);
    memcpy(ch->x_changed, x, sizeof x);
    ch->x_changed[1][1] = 2; /* x2 = [0, 1] becomes [0, 2] */
    memcpy(ch->wq, wq, sizeof wq);
    memcpy(ch->wk, wk, sizeof wk);
    memcpy(ch->wv, wv, sizeof wv);
    attn_status st;
    if ((st = project_and_attend(ch, &ch->x[0][0], &ch->base)) ||
        (st = project_and_attend(ch, &ch->x_changed[0][0], &ch->changed)) ||
        (st = figure2_cases(ch)))
        return st;
    ch->causal = ch->base;
    return attn_chapter_attend(&ch->causal, 1);
}

attn_mha attn_chapter_module(const attn_chapter *ch) {
    attn_mha m = ATTN_MHA_INIT;
    m.d_model = WIDTH;
    m.heads = 1;
    m.head_dim = WIDTH;
    m.d_out = WIDTH;
    if (ch) {
        m.wq = &ch->wq[0][0];
        m.wk = &ch->wk[0][0];
        m.wv = &ch->wv[0][0];
    }
    return m;
}
