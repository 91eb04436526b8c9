#!/usr/bin/env bash
# threads_shared.sh — does a second thread help when another process keeps
# one core busy?  (issue 34 item 4; the figures in docs/models.md, "Threads
# on a shared host".)  For each model, OpenMP wait policy and thread count,
# `attn model bench` (prefill pp64, decode tg16) with and without a busy
# loop pinned to core 1 beside it; the configurations interleaved, ROUNDS
# times, each run's medians printed as CSV:
#   model,policy,busy,threads,round,pp_tps,tg_tps
# Property to read off: with busy=1, threads=2 is never slower than
# threads=1 (under the policy attn model commands run with).  A timing,
# so a script and documented figures, not a test.
#
# usage: bench/threads_shared.sh BUILD [ROUNDS [MODEL...]]
#   BUILD: a build tree with the attn program; ROUNDS default 3; MODELs
#   default: every *.gguf in ${ATTN_MODEL_DIR:-~/.cache/attn/models}
#   but SmolLM.  Policies: $POLICIES, default "default PASSIVE ACTIVE":
#   "default" is OMP_WAIT_POLICY unset (what the program does by itself:
#   PASSIVE since attn model sets it; OpenMP's spin-then-sleep default
#   with a build from before that).  Needs 2 cores (taskset).
#   Take the figures under the machine's benchmark lock on a shared host.
set -euo pipefail
build="${1:?usage: $0 BUILD [ROUNDS [MODEL...]]}"
rounds="${2:-3}"
shift $(( $# >= 2 ? 2 : 1 ))
dir="${ATTN_MODEL_DIR:-$HOME/.cache/attn/models}"
models=("$@")
if [ ${#models[@]} -eq 0 ]; then
  for m in "$dir"/qwen*.gguf "$dir"/gemma*.gguf; do [ -e "$m" ] && models+=("$m"); done
fi
busy_pid=""
stop_busy() { if [ -n "$busy_pid" ]; then kill "$busy_pid" 2>/dev/null || true; wait "$busy_pid" 2>/dev/null || true; busy_pid=""; fi; }
trap stop_busy EXIT
echo "model,policy,busy,threads,round,pp_tps,tg_tps"
for r in $(seq 1 "$rounds"); do
  for m in "${models[@]}"; do
    for policy in ${POLICIES:-default PASSIVE ACTIVE}; do
      for busy in 0 1; do
        for t in 1 2; do
          if [ "$busy" = 1 ]; then taskset -c 1 sh -c 'while :; do :; done' & busy_pid=$!; fi
          out=$(if [ "$policy" = default ]; then env -u OMP_WAIT_POLICY "$build/attn" model bench --model "$m" -p 64 -n 16 -t "$t" -r 3 --csv;
                else OMP_WAIT_POLICY=$policy "$build/attn" model bench --model "$m" -p 64 -n 16 -t "$t" -r 3 --csv; fi)
          stop_busy
          pp=$(printf '%s\n' "$out" | awk -F, '$5 ~ /^pp/ {print $10}')
          tg=$(printf '%s\n' "$out" | awk -F, '$5 ~ /^tg/ {print $10}')
          echo "$(basename "$m" .gguf),$policy,$busy,$t,$r,$pp,$tg"
        done
      done
    done
  done
done
