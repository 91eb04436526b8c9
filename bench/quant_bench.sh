#!/usr/bin/env bash
# quant_bench.sh — the quantized products on Qwen2.5 0.5B's shapes against
# this machine's limits and OpenBLAS's sgemm (bench/quant_bench.c has the
# rows and columns; docs/quant.md the results).
#
# usage: bench/quant_bench.sh BUILD [ROUNDS [FILTER]]
#   BUILD: a build tree with libattn.a; ROUNDS (default 3) interleaved
#   rounds; FILTER: only rows whose name contains it (e.g. "Q5_0",
#   "M=512", "N=151936 K=896 M=512" for the head's prefill, off by default).
# OMP_WAIT_POLICY=PASSIVE unless set: on a shared host spinning threads
# collapse (QUANT.md).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:?usage: $0 BUILD [ROUNDS [FILTER]]}"
shift
bin="$build/quant_bench"
cc -O3 -fopenmp -I "$root/include" -I "$build/include" -I "$root/bench" "$root/bench/quant_bench.c" \
   "$build/libattn.a" $(pkg-config --libs openblas) -lm -o "$bin"
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
exec "$bin" "$@"
