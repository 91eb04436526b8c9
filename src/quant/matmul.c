/*
 * matmul.c — y = x·Wᵀ on stored weights (attn_quant.h): the loop nest,
 * written once for every ISA and type (quant.h has the panels and the
 * micro-kernels' contracts; docs/quant.md the prose).
 *
 * Shape legend: x [M, K]  W [N, K] as stored  y [M, N];  Kp = K rounded up
 * to the tile's k step;  MR x NR the tile.
 *
 * Two nests over the same tile kernel, so that they give the same bits:
 *   decode   (M <= MR)  W read once, group of NR rows by group; each group
 *            in chunks of KC elements converted into a panel that stays in
 *            L1, the tile's lanes carried from chunk to chunk in acc.  The
 *            groups are cut into one contiguous range per thread: each
 *            thread streams its share of W.
 *   prefill  (M > MR)   W in panels of NC rows x Kp (an L2's worth),
 *            converted once and swept by every MR-row tile of x.  Work
 *            items are (panel, block of x's rows): the rows are split only
 *            when there are fewer panels than threads.
 * x is packed first (copied, or quantized for FAST, Kp long with zeros).
 * Every output is one tile call sequence over k ascending, whatever the
 * thread that runs it: the bits do not depend on the thread count, nor on
 * M (a row's lanes never meet another row's).
 */
#include "quant/quant.h"

#include "base/threads.h"
#include "base/workspace.h"

#include <stdlib.h>

#ifdef ATTN_HAVE_OPENMP
#include <omp.h>
#define OMP(directive) _Pragma(#directive)
#else
#define OMP(directive)
#endif

/* The decode panel's budget (NR rows x KC elements, in L1 with x's chunk)
 * and the prefill panel's (NC rows x Kp, in L2 beside x's tile). */
#define QUANT_DECODE_PANEL_BYTES (16 * 1024)
#define QUANT_PREFILL_PANEL_BYTES (384 * 1024)
/* Chunks and panels start on a 256-element boundary: a K-quant block. */
#define QUANT_CHUNK_ALIGN 256

/* One call's plan: the kernels, the shapes, the scratch's layout. */
typedef struct quant_plan {
    const quant_kernels *kern;
    const quant_traits *traits;
    int type;                  /* quant_type                                     */
    bool fast;
    quant_q8_type q8;          /* FAST: the type's group, offset, min            */
    const uint8_t *w;
    int64_t row_stride;
    int64_t m, n, k, kp;
    int mr, nr, nrv, kstep;
    bool decode;
    quant_f32_gemv_fn gemv;    /* decode straight from the blocks (EXACT), or NULL */
    quant_q8_gemv_fn q8_gemv;  /* the same for FAST, or NULL                     */
    int64_t kc;                /* decode: elements per chunk                      */
    int64_t nc;                /* prefill: rows per panel                         */
    int64_t panels, row_blocks; /* prefill: panels x blocks of x's rows = items   */
    int threads;
    size_t x_bytes, thread_bytes; /* the scratch: packed x, then one per thread  */
} quant_plan;

/* Bytes a W panel takes per element of one row (FAST: the code, and scales
 * per 16 at the most). */
static inline double panel_bytes_per_element(bool fast) { return fast ? 1.5 : 4.0; }

static inline size_t align64(size_t bytes) { return (bytes + 63) & ~(size_t)63; }

/* The bytes of `rows` panel rows of `len` elements: EXACT floats; FAST the
 * interleaved codes, ws and wc per group (quant.h), then the unpacker's
 * one row (codes, ws and wc per 16). */
static size_t panel_bytes(const quant_plan *p, int64_t rows, int64_t len) {
    if (!p->fast) return align64(sizeof(float) * (size_t)(rows * len));
    const size_t groups = (size_t)(rows * len / p->q8.group), row16 = (size_t)(len / 16);
    return align64((size_t)(rows * len)) + 2 * align64(sizeof(float) * groups) + align64((size_t)len) +
           2 * align64(sizeof(float) * row16);
}

/* The packed x: EXACT Kp floats a row; FAST qx, xs and xc per group (quant.h),
 * then the quantizer's xs per 32 and sums per 16. */
static size_t x_panel_bytes(const quant_plan *p) {
    const size_t m = (size_t)p->m, kp = (size_t)p->kp;
    if (!p->fast) return align64(sizeof(float) * m * kp);
    return align64(m * kp) + 2 * align64(sizeof(float) * m * (kp / (size_t)p->q8.group)) +
           align64(sizeof(float) * m * (kp / 32)) + align64(sizeof(int32_t) * m * (kp / 16));
}

static void plan_make(quant_plan *p, int64_t m, const attn_qtensor *w, const attn_quant_options *opt, int threads) {
    memset(p, 0, sizeof *p);
    p->type = attn__quant_type_index(w->type);
    p->traits = &attn__quant_traits[p->type];
    p->kern = attn__quant_active();
    p->fast = opt->precision == ATTN_PRECISION_FAST && p->traits->quantized;
    p->q8 = (quant_q8_type){.group = p->traits->group, .offset = p->traits->offset, .has_min = p->traits->has_min};
    p->w = w->data;
    p->row_stride = w->row_stride ? (int64_t)w->row_stride : quant_row_bytes(p->traits, w->cols);
    p->m = m, p->n = w->rows, p->k = w->cols;
    p->mr = p->fast ? p->kern->q8_mr : p->kern->f32_mr;
    p->nr = p->fast ? p->kern->q8_nr : p->kern->f32_nr;
    p->nrv = p->fast ? p->kern->q8_nrv : 1;
    p->kstep = p->fast ? 32 : p->kern->f32_kstep;
    p->kp = round_up(p->k, p->kstep);
    p->decode = m <= p->mr;
    if (p->decode && !p->fast && p->kp == p->k) p->gemv = p->kern->f32_gemv[p->type];
    if (p->decode && p->fast) p->q8_gemv = p->kern->q8_gemv[p->type];
    const double per_element = panel_bytes_per_element(p->fast);
    const int64_t groups = ceil_div(p->n, p->nr);
    p->threads = attn__threads_for(threads, 2.0 * (double)m * (double)p->n * (double)p->k,
                                   (double)(p->decode ? groups : groups * ceil_div(m, p->mr)));
    if (p->decode) {
        int64_t kc = (int64_t)(QUANT_DECODE_PANEL_BYTES / (per_element * p->nr)) / QUANT_CHUNK_ALIGN * QUANT_CHUNK_ALIGN;
        p->kc = min_i64(max_i64(kc, QUANT_CHUNK_ALIGN), p->kp);
        p->thread_bytes = p->gemv || p->q8_gemv ? 0 : panel_bytes(p, p->nr, p->kc) + sizeof(float) * 16 * (size_t)(p->mr * p->nr);
    } else {
        int64_t nc = (int64_t)(QUANT_PREFILL_PANEL_BYTES / (per_element * (double)p->kp)) / p->nr * p->nr;
        p->nc = min_i64(max_i64(nc, p->nr), round_up(p->n, p->nr));
        p->panels = ceil_div(p->n, p->nc);
        p->row_blocks = p->panels >= p->threads ? 1 : min_i64(ceil_div(p->threads, p->panels), ceil_div(m, p->mr));
        p->thread_bytes = panel_bytes(p, p->nc, p->kp);
    }
    p->x_bytes = x_panel_bytes(p);
}

static size_t plan_scratch(const quant_plan *p) { return p->x_bytes + (size_t)p->threads * p->thread_bytes; }

/* ------------------------------------------------------------- panels */

/* The FAST x panel at base (x_panel_bytes's layout), and the quantizer's
 * arrays after it. */
static quant_q8_x q8_x_panel(const quant_plan *p, void *base, float **xs32, int32_t **qsum16) {
    uint8_t *b = base;
    const size_t m = (size_t)p->m, kp = (size_t)p->kp, groups = kp / (size_t)p->q8.group;
    quant_q8_x x = {.q = (const int8_t *)b, .ld_q = p->kp, .ld_s = (int64_t)groups};
    b += align64(m * kp);
    x.s = (const float *)b;
    b += align64(sizeof(float) * m * groups);
    x.c = b;
    b += align64(sizeof(float) * m * groups);
    if (xs32) *xs32 = (float *)b;
    b += align64(sizeof(float) * m * (kp / 32));
    if (qsum16) *qsum16 = (int32_t *)b;
    return x;
}

/* A FAST W panel of `rows` rows (a multiple of NRV) of len elements at
 * base (panel_bytes's layout), and the unpacker's row after it. */
static quant_q8_w q8_w_panel(const quant_plan *p, void *base, int64_t rows, int64_t len, uint8_t **wu, float **ws,
                             float **wc) {
    uint8_t *b = base;
    const size_t groups = (size_t)(rows * len / p->q8.group);
    quant_q8_w w = {.q = b, .ld_q = len * p->nrv, .ld_s = len / p->q8.group * p->nrv};
    b += align64((size_t)(rows * len));
    w.s = (const float *)b;
    b += align64(sizeof(float) * groups);
    w.c = (const float *)b;
    b += align64(sizeof(float) * groups);
    if (wu) *wu = b;
    b += align64((size_t)len);
    if (ws) *ws = (float *)b;
    if (wc) *wc = (float *)b + align64(sizeof(float) * (size_t)(len / 16)) / sizeof(float);
    return w;
}

/* Rows n0 .. n0 + rows - 1 of W, elements k0 .. k0 + len - 1, into the
 * panel at base (rows of len); rows past N and elements past K are zero. */
static void panel_fill(const quant_plan *p, void *base, int64_t n0, int64_t rows, int64_t k0, int64_t len) {
    const int64_t valid = max_i64(0, min_i64(len, p->k - k0));
    const uint8_t *src0 = p->w + k0 / p->traits->block_elements * p->traits->block_bytes;
    if (!p->fast) {
        float *panel = base;
        for (int64_t r = 0; r < rows; r++) {
            float *row = panel + r * len;
            int64_t done = 0;
            if (n0 + r < p->n) p->kern->dequant[p->type](src0 + (n0 + r) * p->row_stride, valid, row), done = valid;
            memset(row + done, 0, sizeof(float) * (size_t)(len - done));
        }
        return;
    }
    /* FAST: K is a whole number of 32s (valid = len); each row unpacked,
     * then interleaved NRV rows a vector (quant.h) */
    uint8_t *wu;
    float *ws, *wc;
    quant_q8_w w = q8_w_panel(p, base, rows, len, &wu, &ws, &wc);
    const int nrv = p->nrv, per = p->q8.group / 16;
    for (int64_t r = 0; r < rows; r++) {
        if (n0 + r < p->n) {
            p->kern->unpack[p->type](src0 + (n0 + r) * p->row_stride, len, wu, ws, wc);
        } else {
            memset(wu, 0, (size_t)len);
            memset(ws, 0, sizeof(float) * (size_t)(len / 16));
            memset(wc, 0, sizeof(float) * (size_t)(len / 16));
        }
        uint8_t *q = (uint8_t *)w.q + r / nrv * w.ld_q + 4 * (r % nrv);
        for (int64_t t = 0; t < len / 4; t++) memcpy(q + t * 4 * nrv, wu + 4 * t, 4);
        float *s = (float *)w.s + r / nrv * w.ld_s + r % nrv, *c = (float *)w.c + r / nrv * w.ld_s + r % nrv;
        for (int64_t g = 0; g < len / p->q8.group; g++) s[g * nrv] = ws[g * per], c[g * nrv] = wc[g * per];
    }
}

/* Row i of x into the packed x at base (Kp long, zeros past K; FAST: the
 * groups' xs and xc from the quantizer's per-32 and per-16 arrays). */
static void x_pack_row(const quant_plan *p, void *base, const float *x, int64_t i) {
    const float *x_i = x + i * p->k;
    if (!p->fast) {
        float *row = (float *)base + i * p->kp;
        memcpy(row, x_i, sizeof(float) * (size_t)p->k);
        memset(row + p->k, 0, sizeof(float) * (size_t)(p->kp - p->k));
        return;
    }
    float *xs32;
    int32_t *qsum16;
    quant_q8_x q = q8_x_panel(p, base, &xs32, &qsum16);
    xs32 += i * (p->kp / 32), qsum16 += i * (p->kp / 16);
    p->kern->quantize(x_i, p->k, (int8_t *)q.q + i * q.ld_q, xs32, qsum16);
    float *xs = (float *)q.s + i * q.ld_s;
    const int per = p->q8.group / 16;
    for (int64_t g = 0; g < p->kp / p->q8.group; g++) {
        int32_t sum = 0;
        for (int h = 0; h < per; h++) sum += qsum16[g * per + h];
        xs[g] = xs32[g * per / 2];
        if (p->q8.has_min) {
            const float xsum = xs[g] * (float)sum;
            memcpy((float *)q.c + i * q.ld_s + g, &xsum, sizeof xsum);
        } else {
            ((int32_t *)q.c)[i * q.ld_s + g] = -p->q8.offset * sum;
        }
    }
}

/* One tile call: x rows i0 .. i0 + mr - 1 of the packed x (from element k0),
 * panel rows j0 .. j0 + NR - 1 of a panel with rows of len (from element
 * pk0), kc elements; y at y_tile (row stride N). */
static void tile(const quant_plan *p, const void *xpack, int64_t i0, int mr, const void *panel, int64_t panel_rows,
                 int64_t len, int64_t j0, int nr, int64_t k0, int64_t pk0, int64_t kc, float *acc, int flags,
                 float *y_tile) {
    if (!p->fast) {
        p->kern->f32_tile(mr, nr, (const float *)xpack + i0 * p->kp + k0, p->kp,
                          (const float *)panel + j0 * len + pk0, len, kc, acc, flags, y_tile, p->n);
        return;
    }
    const int64_t g = p->q8.group;
    quant_q8_x x = q8_x_panel(p, (void *)xpack, NULL, NULL);
    x.q += i0 * x.ld_q + k0, x.s += i0 * x.ld_s + k0 / g;
    x.c = (const uint32_t *)x.c + i0 * x.ld_s + k0 / g;
    quant_q8_w w = q8_w_panel(p, (void *)panel, panel_rows, len, NULL, NULL, NULL);
    w.q += j0 / p->nrv * w.ld_q + pk0 * p->nrv;
    w.s += j0 / p->nrv * w.ld_s + pk0 / g * p->nrv, w.c += j0 / p->nrv * w.ld_s + pk0 / g * p->nrv;
    p->kern->q8_tile(mr, nr, &x, &w, kc, &p->q8, acc, flags, y_tile, p->n);
}

/* ------------------------------------------------------------- the nests */

static void decode_groups(const quant_plan *p, const void *xpack, void *scratch, int64_t g0, int64_t g1, float *y) {
    void *panel = scratch;
    float *acc = (float *)((uint8_t *)scratch + panel_bytes(p, p->nr, p->kc));
    for (int64_t g = g0; g < g1; g++) {
        const int64_t n0 = g * p->nr;
        const int nr = (int)min_i64(p->nr, p->n - n0);
        for (int64_t k0 = 0; k0 < p->kp; k0 += p->kc) {
            const int64_t kc = min_i64(p->kc, p->kp - k0);
            panel_fill(p, panel, n0, p->nr, k0, kc);
            const int flags = (k0 == 0 ? QUANT_TILE_BEGIN : 0) | (k0 + kc == p->kp ? QUANT_TILE_END : 0);
            tile(p, xpack, 0, (int)p->m, panel, p->nr, kc, 0, nr, k0, 0, kc, acc, flags, y + n0);
        }
    }
}

/* Work item `item` of the prefill: panel item / row_blocks, block
 * item % row_blocks of x's rows.  *have is the panel the scratch holds. */
static void prefill_item(const quant_plan *p, const void *xpack, void *panel, int64_t item, int64_t *have, float *y) {
    const int64_t panel_index = item / p->row_blocks, block = item % p->row_blocks;
    const int64_t n0 = panel_index * p->nc, rows = min_i64(p->nc, p->n - n0);
    const int64_t panel_rows = round_up(rows, p->nr);
    if (*have != panel_index) panel_fill(p, panel, n0, panel_rows, 0, p->kp), *have = panel_index;
    const int64_t per_block = round_up(ceil_div(p->m, p->row_blocks), p->mr);
    const int64_t i_end = min_i64(p->m, (block + 1) * per_block);
    for (int64_t i0 = block * per_block; i0 < i_end; i0 += p->mr) {
        const int mr = (int)min_i64(p->mr, i_end - i0);
        for (int64_t j0 = 0; j0 < rows; j0 += p->nr)
            tile(p, xpack, i0, mr, panel, panel_rows, p->kp, j0, (int)min_i64(p->nr, rows - j0), 0, 0, p->kp, NULL,
                 QUANT_TILE_BEGIN | QUANT_TILE_END, y + i0 * p->n + n0 + j0);
    }
}

static void run(const quant_plan *p, const float *x, void *scratch, float *y) {
    void *xpack = scratch;
    uint8_t *per_thread = (uint8_t *)scratch + p->x_bytes;
    const int64_t groups = ceil_div(p->n, p->nr), items = p->decode ? 0 : p->panels * p->row_blocks;
    OMP(omp parallel num_threads(p->threads) if (p->threads > 1))
    {
        int t = 0, threads = 1;
#ifdef ATTN_HAVE_OPENMP
        t = omp_get_thread_num(), threads = omp_get_num_threads();
#endif
        void *mine = per_thread + (size_t)t * p->thread_bytes;
        OMP(omp for schedule(static))
        for (int64_t i = 0; i < p->m; i++) x_pack_row(p, xpack, x, i);
        if (p->gemv || p->q8_gemv) { /* rows in contiguous ranges of whole 16s */
            const int64_t blocks = ceil_div(p->n, 16), j0 = 16 * (blocks * t / threads);
            const int64_t j1 = min_i64(p->n, 16 * (blocks * (t + 1) / threads));
            if (j1 > j0 && p->gemv)
                p->gemv((int)p->m, xpack, p->kp, p->w + j0 * p->row_stride, p->row_stride, j1 - j0, p->k, y + j0, p->n);
            if (j1 > j0 && p->q8_gemv) {
                const quant_q8_x xq = q8_x_panel(p, xpack, NULL, NULL);
                p->q8_gemv((int)p->m, &xq, p->w + j0 * p->row_stride, p->row_stride, j1 - j0, p->k, y + j0, p->n);
            }
        } else if (p->decode) {
            decode_groups(p, xpack, mine, groups * t / threads, groups * (t + 1) / threads, y);
        } else {
            int64_t have = -1;
            OMP(omp for schedule(static))
            for (int64_t item = 0; item < items; item++) prefill_item(p, xpack, mine, item, &have, y);
        }
    }
}

/* -------------------------------------------------------- front doors */

static attn_status options_read(const attn_quant_options *in, attn_quant_options *opt) {
    const attn_quant_options defaults = ATTN_QUANT_OPTIONS_INIT;
    attn_status s = options_copy(opt, sizeof *opt, &defaults, in, "attn_quant_options");
    if (s) return s;
    if (opt->precision != ATTN_PRECISION_EXACT && opt->precision != ATTN_PRECISION_FAST)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_quant_options: precision %d is neither "
                          "ATTN_PRECISION_EXACT nor ATTN_PRECISION_FAST", (int)opt->precision);
    if (opt->threads < 0)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_quant_options: threads = %d is negative", opt->threads);
    return ATTN_OK;
}

static attn_status check_m(int64_t m, const attn_qtensor *w) {
    int64_t elements;
    if (m < 0) return attn__fail(ATTN_ERR_SHAPE, "attn_quant_matmul: m = %lld is negative", (long long)m);
    if (mul_overflows(m, w->cols, &elements) || mul_overflows(m, w->rows, &elements) ||
        mul_overflows(elements, 8, &elements))
        return attn__fail(ATTN_ERR_OVERFLOW, "attn_quant_matmul: %lld rows of x overflow", (long long)m);
    return ATTN_OK;
}

attn_status attn_quant_workspace_size(int64_t m, const attn_qtensor *w, const attn_quant_options *options,
                                      size_t *bytes) {
    attn_quant_options opt;
    attn_status s = options_read(options, &opt);
    if (!s) s = attn_quant_check(w);
    if (!s) s = check_m(m, w);
    if (s) return s;
    if (!bytes) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_quant_workspace_size: bytes is NULL");
    *bytes = 0;
    if (m == 0 || w->rows == 0 || w->cols == 0 || opt.use_ref || attn__quant_forces_ref()) return ATTN_OK;
    quant_plan p;
    plan_make(&p, m, w, &opt, opt.threads);
    *bytes = workspace_bytes(plan_scratch(&p));
    return ATTN_OK;
}

attn_status attn_quant_matmul(const float *x, int64_t m, const attn_qtensor *w, float *y,
                              const attn_quant_options *options) {
    attn_quant_options opt;
    attn_status s = options_read(options, &opt);
    if (!s) s = attn_quant_check(w);
    if (!s) s = check_m(m, w);
    if (s) return s;
    if (m == 0 || w->rows == 0) return ATTN_OK;
    if (!x || !y) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_quant_matmul: %s is NULL", !x ? "x" : "y");
    if (w->cols == 0) {
        memset(y, 0, sizeof(float) * (size_t)(m * w->rows));
        return ATTN_OK;
    }
    if (opt.use_ref || attn__quant_forces_ref()) return attn__quant_matmul_ref(x, m, w, y);
    quant_plan p;
    plan_make(&p, m, w, &opt, opt.threads);
    attn_sdpa_options scratch_opt = ATTN_SDPA_OPTIONS_INIT; /* the workspace rule of attn.h */
    scratch_opt.workspace = opt.workspace, scratch_opt.workspace_size = opt.workspace_size;
    workspace scratch;
    s = attn__workspace_acquire(&scratch, &scratch_opt, plan_scratch(&p), "attn_quant_workspace_size");
    if (s) return s;
    run(&p, x, scratch.aligned, y);
    attn__workspace_release(&scratch);
    return ATTN_OK;
}

attn_status attn_quant_dequantize_rows(const attn_qtensor *w, int64_t first_row, int64_t count, float *out) {
    attn_status s = attn_quant_check(w);
    if (s) return s;
    if (first_row < 0 || count < 0 || first_row > w->rows || count > w->rows - first_row)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT,
                          "attn_quant_dequantize_rows: rows %lld .. %lld + %lld are not within the %lld rows of W",
                          (long long)first_row, (long long)first_row, (long long)count, (long long)w->rows);
    if (count == 0 || w->cols == 0) return ATTN_OK;
    if (!out) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "attn_quant_dequantize_rows: out is NULL");
    const int t = attn__quant_type_index(w->type);
    const quant_traits *traits = &attn__quant_traits[t];
    const int64_t stride = w->row_stride ? (int64_t)w->row_stride : quant_row_bytes(traits, w->cols);
    const quant_dequant_fn dequant = attn__quant_active()->dequant[t];
    for (int64_t r = 0; r < count; r++)
        dequant((const uint8_t *)w->data + (first_row + r) * stride, w->cols, out + r * w->cols);
    return ATTN_OK;
}
