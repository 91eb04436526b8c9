#!/usr/bin/env bash
# flash_ab.sh — interleaved A/B of two builds' flash forward by CPU time
# (bench/flash_cpu_time.c), on the prefill shapes of issue 14:
#
#   bench/flash_ab.sh BUILD_A BUILD_B [ROUNDS [THREADS]]
#
# compiles flash_cpu_time against each build's libattn.a, then for each
# round and shape runs A then B; prints per shape the median CPU time per
# call of each [min-max over rounds] and the median of the per-round ratios
# A/B (> 1: B is faster), which is what survives a shared machine's noise,
# and the same ratio of wall times (what threads' load balance changes).
# ATTN_ARCH in the environment applies to both; SHAPES overrides the list
# ("L HKV D CAUSAL|..."); RUNS the calls per measurement (default 3, 15 at
# L <= 1024).
set -euo pipefail
[[ $# -ge 2 ]] || { sed -n '2,14p' "$0"; exit 2; }
a=$1 b=$2 rounds=${3:-5} threads=${4:-1}
here=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
blas=""
for build in "$a" "$b"; do grep -q 'ATTN_WITH_BLAS:BOOL=ON' "$build/CMakeCache.txt" 2>/dev/null && blas=-lopenblas; done
for side in a b; do
    build=$a; [[ $side == b ]] && build=$b
    cc -O2 -fopenmp -I "$here/include" -I "$build/include" "$here/bench/flash_cpu_time.c" "$build/libattn.a" \
        $blas -lm -o "$work/$side"
done
IFS='|' read -ra shapes <<< "${SHAPES:-4096 16 128 0|4096 16 128 1|4096 8 128 0|4096 8 128 1|1024 8 128 1}"
for ((r = 1; r <= rounds; r++)); do
    for shape in "${shapes[@]}"; do
        read -r len hkv dim causal <<< "$shape"
        runs=${RUNS:-$([[ $len -le 1024 ]] && echo 15 || echo 3)}
        for side in a b; do
            echo "$side|$shape|$("$work/$side" "$len" "$hkv" "$dim" "$causal" "$threads" "$runs")" >> "$work/log"
        done
    done
done
python3 - "$work/log" <<'PY'
import re, statistics as st, sys, collections
runs = collections.defaultdict(lambda: {'a': [], 'b': []})
for line in open(sys.argv[1]):
    side, shape, text = line.rstrip('\n').split('|', 2)
    runs[shape][side].append((float(re.search(r'cpu median ([0-9.]+)', text).group(1)),
                              float(re.search(r'wall median ([0-9.]+)', text).group(1))))
span = lambda x: f"{st.median(x):9.2f} [{min(x):.1f}-{max(x):.1f}]"
print('shape (L Hkv D causal)   A cpu ms [min-max]        B cpu ms [min-max]        A/B cpu [min-max]      A/B wall [min-max]')
for shape, v in runs.items():
    cpu = [x[0] / y[0] for x, y in zip(v['a'], v['b'])]
    wall = [x[1] / y[1] for x, y in zip(v['a'], v['b'])]
    print(f"{shape:24s} {span([x[0] for x in v['a']]):25s} {span([x[0] for x in v['b']]):25s} "
          f"{st.median(cpu):.3f} [{min(cpu):.3f}-{max(cpu):.3f}]  {st.median(wall):.3f} [{min(wall):.3f}-{max(wall):.3f}]")
PY
