/*
 * analysis_flow.c — attention flow (Abnar & Zuidema, ACL 2020): the
 * maximum flow from each input token to one output position through the
 * layers' maps, the residual added (analysis.h's Ahat), by Edmonds-Karp.
 *
 * Shape legend: patterns [N, Hq, L, L]   cap, flow_l [N, L, L]   flow [L]
 *
 * The graph: node (l, t) for l = 0 .. N (0: the input tokens, l: the
 * stream after layer l - 1), an edge (l, j) -> (l + 1, i) of capacity
 * Ahat_l[i, j], i.e. cap[l][i][j].  The residual graph of a flow f on
 * it has an edge (l, j) -> (l + 1, i) while f < cap and (l + 1, i) ->
 * (l, j) while f > 0.  Edmonds-Karp augments along shortest residual paths
 * (a breadth-first search), at most O(V E) times; each search reads every
 * edge once.  Flows into different inputs are separate problems: the flow
 * is cleared between them.
 */
#include "interp/analysis.h"

#include <stdlib.h>
#include <string.h>

/* Residual capacities below this are saturated: capacities are weights in
 * [0, 1] summed in double, and a path of 1e-12 carries nothing a float
 * pattern could show. */
#define FLOW_EPS 1e-12

typedef struct flow_graph {
    int64_t N, L;
    const double *cap; /* [N, L, L]: cap[(l * L + i) * L + j], edge (l, j) -> (l + 1, i) */
    double *f;         /* [N, L, L]: the flow on each edge                          */
    int64_t *parent;   /* [(N + 1) * L]: the node a search reached each from, -1: not */
    int64_t *queue;    /* [(N + 1) * L]                                              */
} flow_graph;

static double residual_of(const flow_graph *g, int64_t from, int64_t to) {
    const int64_t L = g->L, lf = from / L, tf = from % L, lt = to / L, tt = to % L;
    if (lt == lf + 1) { /* forward edge (lf, tf) -> (lf + 1, tt) */
        const int64_t e = (lf * L + tt) * L + tf;
        return g->cap[e] - g->f[e];
    }
    return g->f[(lt * L + tf) * L + tt]; /* backward: undo flow on (lt, tt) -> (lf, tf) */
}

/* A shortest residual path from source to sink into g->parent; false when
 * none is left (the flow is maximal). */
static bool find_path(flow_graph *g, int64_t source, int64_t sink) {
    const int64_t L = g->L, nodes = (g->N + 1) * L;
    for (int64_t n = 0; n < nodes; n++) g->parent[n] = -1;
    g->parent[source] = source;
    int64_t head = 0, tail = 0;
    g->queue[tail++] = source;
    while (head < tail) {
        const int64_t u = g->queue[head++], l = u / L;
        if (u == sink) return true;
        for (int64_t up = 0; up < 2; up++) {
            const int64_t next = up ? l + 1 : l - 1;
            if (next < 0 || next > g->N) continue;
            for (int64_t t = 0; t < L; t++) {
                const int64_t w = next * L + t;
                if (g->parent[w] >= 0 || residual_of(g, u, w) <= FLOW_EPS) continue;
                g->parent[w] = u;
                g->queue[tail++] = w;
            }
        }
    }
    return false;
}

static double max_flow(flow_graph *g, int64_t source, int64_t sink) {
    const int64_t L = g->L;
    memset(g->f, 0, (size_t)(g->N * L * L) * sizeof *g->f);
    double total = 0;
    while (find_path(g, source, sink)) {
        double push = 1e300;
        for (int64_t w = sink; w != source; w = g->parent[w]) {
            const double r = residual_of(g, g->parent[w], w);
            push = r < push ? r : push;
        }
        for (int64_t w = sink; w != source; w = g->parent[w]) {
            const int64_t u = g->parent[w], lu = u / L, lw = w / L;
            if (lw == lu + 1) g->f[(lu * L + w % L) * L + u % L] += push;
            else g->f[(lw * L + u % L) * L + w % L] -= push;
        }
        total += push;
    }
    return total;
}

attn_status attn_attention_flow(const float *patterns, int64_t N, int64_t Hq, int64_t L, int64_t head,
                                double residual, int64_t position, double *flow) {
    attn_status st = attn__analysis_check_layers(__func__, patterns, N, Hq, L, head, residual);
    if (st) return st;
    if (!flow) return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "%s: flow is NULL", __func__);
    if (position < 0) position += L;
    if (position < 0 || position >= L)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "%s: position %lld is outside the %lld tokens", __func__,
                          (long long)(position < 0 ? position - L : position), (long long)L);
    if ((N + 1) * L > ATTN_ATTENTION_FLOW_MAX_NODES)
        return attn__fail(ATTN_ERR_INVALID_ARGUMENT, "%s: %lld layers of %lld tokens make %lld nodes, more than the "
                          "%d attention flow accepts (ATTN_ATTENTION_FLOW_MAX_NODES; rollout has no limit)",
                          __func__, (long long)N, (long long)L, (long long)((N + 1) * L),
                          ATTN_ATTENTION_FLOW_MAX_NODES);
    flow_graph g = {.N = N, .L = L};
    double *cap = malloc((size_t)(N * L * L) * sizeof *cap);
    g.f = malloc((size_t)(N * L * L) * sizeof *g.f);
    g.parent = malloc((size_t)((N + 1) * L) * sizeof *g.parent);
    g.queue = malloc((size_t)((N + 1) * L) * sizeof *g.queue);
    if (!cap || !g.f || !g.parent || !g.queue) {
        st = attn__fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", __func__);
        goto done;
    }
    for (int64_t l = 0; l < N; l++) attn__analysis_layer_ahat(patterns, Hq, L, l, head, residual, cap + l * L * L);
    g.cap = cap;
    for (int64_t j = 0; j < L; j++) flow[j] = max_flow(&g, j, N * L + position);
done:
    free(cap);
    free(g.f);
    free(g.parent);
    free(g.queue);
    return st;
}
