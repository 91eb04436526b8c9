/*
 * progress.c — the progress meter of progress.h.
 */
#include "base/progress.h"

#include <time.h>

#define REPORT_SECONDS 0.1

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void attn__progress_begin(progress_meter *m, const attn_sdpa_options *opt, int64_t total) {
    m->fn = opt ? opt->progress : NULL;
    m->user = opt ? opt->progress_user : NULL;
    m->total = total > 0 ? total : 1;
    atomic_init(&m->done, 0);
    m->reported = false;
    if (m->fn) m->next_report = now_seconds() + REPORT_SECONDS;
}

void attn__progress_report(progress_meter *m) {
    if (!m->fn) return;
    const double now = now_seconds();
    if (now < m->next_report) return;
    m->next_report = now + REPORT_SECONDS;
    const double done = (double)atomic_load_explicit(&m->done, memory_order_relaxed) / (double)m->total;
    m->fn(m->user, done < 1.0 ? done : 1.0);
    m->reported = true;
}

void attn__progress_end(progress_meter *m) {
    if (m->fn && m->reported) m->fn(m->user, 1.0);
}
