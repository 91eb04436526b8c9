#!/usr/bin/env bash
# ring_bench.sh — ring attention on this machine (docs/distributed.md):
#   1 rank x 1 thread      the kernel's rate on one core (the scaling model's input)
#   1 rank x 2 threads     one process using both cores
#   2 ranks x 1 thread     the same cores as a ring, contiguous layout, then zigzag
# Each run is `attn ring --bench`: every rank makes its own rows of random
# inputs (the same numbers for any P), runs the forward once and reports
# per-rank busy time (compute), wait time (communication not hidden, or a
# busier neighbour), one rotation of the blocks timed alone, the share of
# it hidden, and GFLOP/s over the visible query-key pairs.
#
# usage: bench/ring_bench.sh [ATTN] [L,S,Hq,Hkv,D] [attn ring flags...]
#   defaults: build/attn, 8192,8192,16,8,128, --causal
#   MPIRUN: the launcher and its options (default "mpirun"); e.g. as root:
#     MPIRUN="mpirun --allow-run-as-root" bench/ring_bench.sh
set -euo pipefail
attn=${1:-build/attn}
shape=${2:-8192,8192,16,8,128}
shift $(( $# < 2 ? $# : 2 ))
flags=("$@")
[[ ${#flags[@]} -gt 0 ]] || flags=(--causal)
read -r -a launcher <<< "${MPIRUN:-mpirun}"

# mpirun binds each of up to 2 ranks to one core by default, which would
# put a rank's 2 threads on 1 core: a multi-threaded rank runs unbound.
run() { # ranks threads layout
    local bind=core
    [[ $2 -gt 1 ]] && bind=none
    echo "### $1 rank(s) x $2 thread(s), $3 layout: attn ring --bench $shape ${flags[*]} (--bind-to $bind)"
    "${launcher[@]}" --bind-to "$bind" -np "$1" "$attn" ring --bench "$shape" --threads "$2" --shard "$3" "${flags[@]}"
    echo
}
run 1 1 contiguous
run 1 2 contiguous
run 2 1 contiguous
run 2 1 zigzag
