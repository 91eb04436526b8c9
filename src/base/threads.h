/*
 * threads.h — the one parallel policy of the library: how many threads a
 * call asks for, and how many its work deserves.  Thread counts never
 * change a result (every kernel's work decomposition depends on the shapes
 * only), so the policy is free to follow the size of the work.
 */
#ifndef ATTN_BASE_THREADS_H
#define ATTN_BASE_THREADS_H

/* Below this many FLOPs per thread a call gives up a thread: starting,
 * waking and joining one (OpenMP's pool, a barrier or two) costs a few
 * microseconds, about what 2 MFLOP take on one core. */
#define THREADS_MIN_FLOPS_PER_THREAD 2.0e6

/* Threads a call with opt.threads = requested asks for: requested if
 * positive, else $ATTN_NUM_THREADS, else OpenMP's default; 1 without OpenMP. */
int attn__threads_requested(int requested);

/* Threads for a call that does `flops` of work, at most `items` independent
 * pieces of it (0: no limit): the requested count, but no more than one
 * thread per THREADS_MIN_FLOPS_PER_THREAD, nor than items, and at least 1. */
int attn__threads_for(int requested, double flops, double items);

#endif /* ATTN_BASE_THREADS_H */
