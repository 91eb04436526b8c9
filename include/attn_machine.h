/*
 * attn_machine.h — this machine's physical limits, measured rather than
 * assumed (libattn; DESIGN.md §5): `attn bench` reports every kernel as a
 * fraction of the FP32 FMA peak and the memory bandwidth measured in the
 * same run.
 */
#ifndef ATTN_MACHINE_H
#define ATTN_MACHINE_H

#include "attn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------- this machine's limits
 * Measured, not assumed (attn bench reports kernels as fractions of them).
 * Neither prints; both take threads = 0 for the default thread count. */

/* Number of threads a call with opt.threads = requested runs on: requested
 * if positive, else $ATTN_NUM_THREADS, else OpenMP's default; 1 without
 * OpenMP. */
ATTN_API int attn_thread_count(int requested);

/* FP32 fused multiply-add peak in GFLOP/s (1 FMA = 2 FLOP): every thread
 * runs twelve independent register-resident FMA chains for `seconds` of
 * wall time (the best of 0.1 s windows, so a moment of contention on a
 * shared machine is not taken for the peak), with the widest FMA this CPU
 * has (see attn_fma_peak_isa). */
ATTN_API attn_status attn_measure_fma_peak(int threads, double seconds, double *gflops);

/* "avx512", "avx2" or "scalar": the instructions attn_measure_fma_peak uses. */
ATTN_API const char *attn_fma_peak_isa(void);

/* Memory bandwidth in GB/s (1e9 bytes) of a STREAM triad a[i] = b[i] + s*c[i]
 * over three double arrays of bytes/3 each (bytes = 0: 3 x 256 MiB), first
 * touched in parallel; the best of 7 passes after a warm-up.  Bytes are
 * counted as STREAM does, 24 per element (2 reads + 1 write); the hidden
 * read-for-ownership of the written line is not counted. */
ATTN_API attn_status attn_measure_bandwidth(int threads, size_t bytes, double *gbytes_per_s);

/* Read bandwidth in GB/s (1e9 bytes): every thread sums its share of one
 * buffer of `bytes` (bytes = 0: 1 GiB, twice the L3 this machine's VM
 * reports) as 64-bit words, eight independent sums a cache line, reading
 * nothing else and writing nothing; first touched in parallel, the best of
 * 7 passes after a warm-up.  What decoding a KV cache can reach at most:
 * it reads K and V once and writes almost nothing (DESIGN.md §5). */
ATTN_API attn_status attn_measure_read_bandwidth(int threads, size_t bytes, double *gbytes_per_s);

#ifdef __cplusplus
}
#endif

#endif /* ATTN_MACHINE_H */
