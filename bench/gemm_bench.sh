#!/usr/bin/env bash
# gemm_bench.sh — the projections' GEMMs, every BLAS build against attn's
# loops, interleaved over ROUNDS rounds (the host is shared and noisy), then
# per row the median GFLOP/s and % of FMA peak with the rounds' spread
# (docs/kernels.md, "Projections").
#
# usage: bench/gemm_bench.sh BUILD [ROUNDS [SHAPE...]]
#   BUILD: a build tree with libattn.a (the bench is compiled from
#          bench/gemm_bench.c against it); ROUNDS: default 3.
# Needs Debian's libopenblas0-{serial,pthread,openmp} and
# libblis4-{serial,pthread,openmp} (scripts/deps-blas.txt); missing ones are
# skipped.  Raw lines go to $OUT (default /tmp/gemm_bench.raw).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:?usage: $0 BUILD [ROUNDS [SHAPE...]]}"
rounds="${2:-3}"
shift $(( $# >= 2 ? 2 : 1 ))
out="${OUT:-/tmp/gemm_bench.raw}"
bin="$build/gemm_bench"
cc -O3 -fopenmp -I "$root/include" -I "$build/include" "$root/bench/gemm_bench.c" "$build/libattn.a" \
   $(pkg-config --libs openblas 2>/dev/null) -ldl -lm -o "$bin"
lib=/usr/lib/x86_64-linux-gnu
# LIB MODE THREADS, one run each per round.
# attn: attn_linear_forward as built (the BLAS path in a BLAS build);
# mode "ref" runs it under ATTN_KERNEL=ref (the double sums).
runs=("dot own 1" "attn ref 1" "attn ref 2" "attn own 1" "attn own 2")
for v in serial:split pthread:own openmp:own; do
  for t in 1 2; do
    [[ $v == openmp:own && $t == 1 ]] && continue # the same single-threaded code as pthread's
    [ -e "$lib/openblas-${v%%:*}/libopenblas.so.0" ] && runs+=("$lib/openblas-${v%%:*}/libopenblas.so.0 ${v#*:} $t")
    [ -e "$lib/blis-${v%%:*}/libblis.so.4" ] && runs+=("$lib/blis-${v%%:*}/libblis.so.4 ${v#*:} $t")
  done
done
: > "$out"
for ((r = 0; r < rounds; r++)); do
  for run in "${runs[@]}"; do
    read -r l m t <<< "$run"
    # attn's own loops run in the first round only: 20-50x slower, they
    # would take most of the time, and their spread is not the question.
    [[ $r -gt 0 && ( $l == dot || $m == ref ) ]] && continue
    kernel=auto
    [[ $m == ref ]] && kernel=ref
    ATTN_KERNEL=$kernel ATTN_NUM_THREADS=$t OMP_NUM_THREADS=$t "$bin" $l $m $t "$@" >> "$out"
  done
done
python3 - "$out" <<'PY'
import collections, statistics, sys
rows = collections.OrderedDict()
for line in open(sys.argv[1]):
    lib, mode, t, shape, g, pct, peak, cpu = line.split()
    names = {"dot": "decoder's former dot loop", "attn": "attn_linear_forward"}
    name = names[lib] if lib in names else lib.split("/")[-2]
    rows.setdefault((shape, name, mode, t), []).append((float(g), float(pct), float(cpu)))
print("| shape (rows x d_in x d_out) | library | mode | threads | GFLOP/s median (min-max) | % of peak | % per CPU-second |")
print("|---|---|---|---|---|---|---|")
shapes = list(dict.fromkeys(k[0] for k in rows))
for (shape, name, mode, t), v in sorted(rows.items(), key=lambda kv: (shapes.index(kv[0][0]), kv[0][3], kv[0][1])):
    g, p, c = ([x[i] for x in v] for i in range(3))
    print(f"| {shape} | {name} | {mode} | {t} | {statistics.median(g):.1f} ({min(g):.1f}-{max(g):.1f}) "
          f"| {statistics.median(p):.0f} ({min(p):.0f}-{max(p):.0f}) | {statistics.median(c):.0f} ({min(c):.0f}-{max(c):.0f}) |")
PY
