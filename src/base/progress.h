/*
 * progress.h — reporting how far a long call has got (attn_sdpa_options'
 * progress callback).  A kernel counts finished work units from any
 * thread; only the calling thread (OpenMP's thread 0, or the only one)
 * reports, at most every REPORT_SECONDS, so the callback is never called
 * concurrently and a short call never calls it at all.  Counting is one
 * atomic add per unit of work (a tile row, a query row): nothing the
 * numbers depend on.
 */
#ifndef ATTN_BASE_PROGRESS_H
#define ATTN_BASE_PROGRESS_H

#include "base/base.h"

#include <stdatomic.h>

typedef struct progress_meter {
    attn_progress_fn fn; /* NULL: every call below returns at once */
    void *user;
    int64_t total;       /* work units of the whole call */
    atomic_llong done;
    double next_report;  /* monotonic seconds; read and written by the caller's thread only */
    bool reported;
} progress_meter;

/* A call of `total` work units, reporting to opt's callback (if any). */
void attn__progress_begin(progress_meter *m, const attn_sdpa_options *opt, int64_t total);
/* Calls the callback if the last report is REPORT_SECONDS old (the
 * calling thread only). */
void attn__progress_report(progress_meter *m);
/* `units` more are finished, on any thread; caller: this is the calling
 * thread, which then may report. */
static inline void progress_add(progress_meter *m, int64_t units, bool caller) {
    if (!m->fn) return;
    atomic_fetch_add_explicit(&m->done, units, memory_order_relaxed);
    if (caller) attn__progress_report(m);
}
/* The last report (1.0), if any was made. */
void attn__progress_end(progress_meter *m);

#endif /* ATTN_BASE_PROGRESS_H */
