#!/usr/bin/env bash
# eltwise_bench.sh — the decoder's elementwise micro-kernels against their
# reference twins on the models' shapes (bench/eltwise_bench.c; the
# results in docs/models.md, "Elementwise kernels").
#
# usage: bench/eltwise_bench.sh BUILD [ROUNDS]
#   BUILD: a build tree with libattn_model.a and libattn.a; ROUNDS
#   (default 5) interleaved rounds.  Take figures under the machine's
#   benchmark lock on a shared host.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:?usage: $0 BUILD [ROUNDS]}"
shift
bin="$build/eltwise_bench"
cc -O2 -fopenmp -I "$root/include" -I "$build/include" -I "$root/src" "$root/bench/eltwise_bench.c" \
   "$build/libattn_model.a" "$build/libattn.a" $(pkg-config --libs openblas 2>/dev/null) -lm -o "$bin"
exec "$bin" "$@"
