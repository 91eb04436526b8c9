#!/usr/bin/env bash
# llama_compare.sh — attn's decoder beside llama.cpp's llama-bench on the
# same GGUF files: prefill and decode tokens/s, peak memory and the time to a
# first token, at the same thread counts and OpenMP wait policy, the two
# programs taking turns process by process (issue 34's benchmark).
#
# usage: bench/llama_compare.sh [--threads LIST] [--rounds N] [--models LIST]
#                               [--tests LIST] [--quick] [--kv f16|f32]
#                               [--repack LIST] [--wait-policy P] [--busy-core C]
#                               [--precision LIST] [--csv FILE]
#
#   --threads LIST   thread counts, comma-separated (default 1,2)
#   --rounds N       rounds (default 5): each round runs every test once with
#                    each program, attn and llama.cpp alternating (attn first
#                    in odd rounds, llama.cpp first in even ones)
#   --models LIST    GGUF files, comma-separated (default: every .gguf in
#                    $ATTN_MODEL_DIR, else ~/.cache/attn/models)
#   --tests LIST     comma-separated, each ppP, tgN, ppP@dD or tgN@dD (llama-bench's
#                    pp / tg at depth D), or start (default
#                    pp128,pp512,pp2048,tg128,tg128@d4096,start)
#   --quick          pp128,tg32,start, 2 rounds, 1 thread: the pipeline checked
#                    in a minute or two, no figure to keep
#   --kv TYPE        both programs' KV cache element type: f16 (default,
#                    llama-bench's) or f32 (attn's default)
#   --repack LIST    llama.cpp's weight repacking (llama-bench --repack), 1
#                    (default), 0, or 1,0 for both as two peers; where repack 1
#                    crashes (llama.cpp's AMX path segfaulted on an AMX Xeon),
#                    that model's runs are redone and continue with --repack 0,
#                    and the table says so
#   --wait-policy P  OMP_WAIT_POLICY for both (default PASSIVE; "unset" leaves
#                    it unset: OpenMP's default, spinning)
#   --busy-core C    a busy loop pinned to CPU C (taskset) for the whole run,
#                    the way another process holding a core shares a host:
#                    threads must not make a run slower then (issue 34)
#   --precision LIST attn's projections: exact (default), fast, or exact,fast
#                    for both as two engines ("attn" and "attn fast"), each
#                    set against llama.cpp
#   --csv FILE       the summary, one row per model, threads, test and program
#
# What each test is, for both programs (one process per test and round, one
# repetition after the program's own warm-up; token ids pseudo-random):
#   ppP      one batch of P prompt tokens through an empty context: P / time
#   tgN      N decode steps of one token each: N / time
#   ...@dD   after D tokens already in the context (not timed)
#   start    a process that loads the model and decodes one token: its wall
#            time, exec to exit (a warm page cache after the first round)
# and of every process its peak resident memory (wait4's ru_maxrss).
#
# environment:
#   ATTN_BIN    the attn program (default: build/attn)
#   LLAMA_DIR   where llama.cpp's sources and build are kept (default
#               ~/.cache/attn-llama); made once, reused after
#   COMPARE_DIR where the raw measurements go (default: a new temporary folder)
#
# llama.cpp's sources are those of the llama-cpp-python sdist pinned in
# bench/fetch_llama_cpp.sh (shared with bench/ggml_compare.sh), fetched with
# pip once, never by attn; llama-bench is built with llama.cpp's CMake
# (Release, -march=native, OpenMP, static, no HTTPS) into LLAMA_DIR. Run the
# whole comparison under flock /tmp/attn-heavy.lock on a shared machine.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
threads_list=1,2
rounds=5
models=
tests=pp128,pp512,pp2048,tg128,tg128@d4096,start
kv=f16
repack_list=1
wait_policy=PASSIVE
csv=
busy_core=
precision_list=exact
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) tests=pp128,tg32,start; rounds=2; threads_list=1; shift ;;
    --threads|--rounds|--models|--tests|--kv|--repack|--wait-policy|--busy-core|--precision|--csv)
      [ $# -ge 2 ] || { echo "llama_compare.sh: $1 needs a value" >&2; exit 2; }
      case "$1" in
        --threads) threads_list=$2 ;;
        --rounds) rounds=$2 ;;
        --models) models=$2 ;;
        --tests) tests=$2 ;;
        --kv) kv=$2 ;;
        --repack) repack_list=$2 ;;
        --wait-policy) wait_policy=$2 ;;
        --busy-core) busy_core=$2 ;;
        --precision) precision_list=$2 ;;
        --csv) csv=$2 ;;
      esac
      shift 2 ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "llama_compare.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
fail() { echo "llama_compare.sh: $*" >&2; exit 2; }
[[ $threads_list =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] || fail "--threads takes counts like 1,2, not '$threads_list'"
[[ $rounds =~ ^[1-9][0-9]*$ ]] || fail "--rounds takes a count >= 1, not '$rounds'"
case "$kv" in f16|f32) ;; *) fail "--kv takes f16 or f32, not '$kv'" ;; esac
[[ $precision_list =~ ^(exact|fast)(,(exact|fast))?$ ]] || fail "--precision takes exact, fast or exact,fast, not '$precision_list'"
IFS=, read -r -a precisions <<< "$precision_list"
[[ $repack_list =~ ^[01](,[01])?$ ]] || fail "--repack takes 1, 0 or 1,0, not '$repack_list'"
[ -z "$busy_core" ] || taskset -c "$busy_core" true 2> /dev/null || fail "--busy-core: no CPU '$busy_core' to pin to"
IFS=, read -r -a test_names <<< "$tests"
for t in "${test_names[@]}"; do
  [[ $t =~ ^((pp|tg)[1-9][0-9]*(@d[0-9]+)?|start)$ ]] || fail "--tests: '$t' is not ppP, tgN, ppP@dD, tgN@dD or start"
done
if [ -z "$models" ]; then
  models=$(find "${ATTN_MODEL_DIR:-$HOME/.cache/attn/models}" -maxdepth 1 -name '*.gguf' 2> /dev/null | sort | paste -sd, -)
  [ -n "$models" ] || fail "no .gguf in ${ATTN_MODEL_DIR:-$HOME/.cache/attn/models} (scripts/fetch-models.sh, or --models)"
fi
IFS=, read -r -a model_list <<< "$models"
for m in "${model_list[@]}"; do [ -f "$m" ] || { echo "llama_compare.sh: no model '$m'" >&2; exit 1; }; done
IFS=, read -r -a thread_counts <<< "$threads_list"
IFS=, read -r -a repacks <<< "$repack_list"

attn=${ATTN_BIN:-$root/build/attn}
[ -x "$attn" ] || { echo "llama_compare.sh: no attn program at '$attn' (build it, or set ATTN_BIN)" >&2; exit 1; }

# ------------------------------------------------------------ llama-bench
dir=${LLAMA_DIR:-$HOME/.cache/attn-llama}
mkdir -p "$dir"
# shellcheck source=bench/fetch_llama_cpp.sh
. "$root/bench/fetch_llama_cpp.sh"
src=$dir/llama.cpp-$llama_cpp_version
build=$dir/build-$llama_cpp_version
llama=$build/bin/llama-bench
llama_cpp_unpack "$dir" . "$src" || exit 1
if [ ! -x "$llama" ]; then
  echo "llama_compare.sh: building llama-bench (5-10 minutes, once) in $build" >&2
  if ! { cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=ON \
           -DGGML_OPENMP=ON -DGGML_CCACHE=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF \
           -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF > "$build.log" 2>&1 &&
         cmake --build "$build" --target llama-bench -j "$(nproc)" >> "$build.log" 2>&1; }; then
    echo "llama_compare.sh: the llama.cpp build failed; see $build.log" >&2
    exit 1
  fi
fi

# ------------------------------------------------------------ the record
if [ "$wait_policy" = unset ]; then unset OMP_WAIT_POLICY; else export OMP_WAIT_POLICY=$wait_policy; fi
work=${COMPARE_DIR:-$(mktemp -d /tmp/llama-compare.XXXXXX)}
mkdir -p "$work"
raw=$work/raw.csv
rm -f "$raw"
flags=$(lscpu | sed -n 's/^Flags: *//p' | tr ' ' '\n' |
  grep -E -x 'avx2|avx512f|avx512bw|avx512_vnni|avx_vnni|avx512_bf16|amx_bf16|amx_int8|amx_tile' | paste -sd' ' -)
echo "# llama_compare.sh, $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "# CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs; ISA: ${flags:-none of avx2, avx512, vnni, bf16, amx}"
echo "# load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# attn: $("$attn" --version 2>&1 | head -1) ($attn)"
ggml_version=$(sed -n 's/^set(GGML_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\))$/\2/p' "$src/ggml/CMakeLists.txt" | paste -sd. -)
echo "# llama.cpp: $("$llama" --version 2>&1 | sed -n 's/^version: //p'), ggml $ggml_version, from llama-cpp-python"\
     "$llama_cpp_version's sdist; $("$llama" --version 2>&1 | sed -n 's/^built with //p'); Release, -march=native, OpenMP, static"
echo "# both: OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-(unset)}, KV cache $kv, threads ${threads_list}, rounds $rounds, tests ${tests}"
echo "# llama.cpp: llama-bench's defaults otherwise (flash attention auto, batch 2048, ubatch 512, mmap);"\
     "repack ${repack_list}"
echo "# raw measurements: $work"
if [ -n "$busy_core" ]; then
  taskset -c "$busy_core" sh -c 'while :; do :; done' &
  busy_pid=$!
  trap 'kill "$busy_pid" 2> /dev/null' EXIT
  echo "# a busy loop pinned to CPU $busy_core (pid $busy_pid) runs beside every measurement"
fi

# test name -> llama-bench's (and attn model bench's) -p -n -d
test_flags() {
  local t=$1
  [ "$t" = start ] && { echo "-p 0 -n 1 -d 0 --no-warmup"; return; }
  [[ $t =~ ^(pp|tg)([0-9]+)(@d([0-9]+))?$ ]]
  local n=${BASH_REMATCH[2]} d=${BASH_REMATCH[4]:-0}
  if [ "${BASH_REMATCH[1]}" = pp ]; then echo "-p $n -n 0 -d $d"; else echo "-p 0 -n $n -d $d"; fi
}

measure() { # engine kind model threads round test -- command...
  python3 "$root/bench/llama_compare.py" run --raw "$raw" --engine "$1" --kind "$2" --model "$3" --threads "$4" \
    --round "$5" --test "$6" "${@:7}"
}

declare -A crashed # model -> 1 once llama.cpp's repack 1 crashed on it
run_attn() { # model threads round test
  local p engine
  for p in "${precisions[@]}"; do
    engine=attn
    [ "$p" = exact ] || engine="attn $p"
    # shellcheck disable=SC2046 # the flags split on purpose
    measure "$engine" attn "$1" "$2" "$3" "$4" -- "$attn" model bench --model "$1" $(test_flags "$4") -t "$2" -r 1 \
      --kv-dtype "$kv" --precision "$p" --csv || true
  done
}
run_llama() { # model threads round test repack
  local repack=$5 engine="llama.cpp"
  [ ${#repacks[@]} -gt 1 ] && engine="llama.cpp repack $repack"
  if [ "$repack" = 1 ] && [ -n "${crashed[$1]:-}" ]; then repack=0; engine="$engine (crashed: run with repack 0)"; fi
  local status=0
  # shellcheck disable=SC2046
  measure "$engine" llama "$1" "$2" "$3" "$4" -- "$llama" -m "$1" $(test_flags "$4") -t "$2" -r 1 \
    -ctk "$kv" -ctv "$kv" --repack "$repack" -o csv || status=$?
  if [ "$status" -gt 128 ] && [ "$repack" = 1 ]; then
    echo "  llama.cpp ended by signal $((status - 128)) with --repack 1 on $(basename "$1"): its runs go on with --repack 0"
    crashed[$1]=1
    run_llama "$@"
  fi
}

start_s=$(date +%s)
for model in "${model_list[@]}"; do
  for t in "${thread_counts[@]}"; do
    echo "== $(basename "$model"), $t thread(s); load average $(cut -d' ' -f1 /proc/loadavg)"
    for ((r = 1; r <= rounds; r++)); do
      for name in "${test_names[@]}"; do
        if ((r % 2)); then run_attn "$model" "$t" "$r" "$name"; fi
        for rp in "${repacks[@]}"; do run_llama "$model" "$t" "$r" "$name" "$rp"; done
        if ! ((r % 2)); then run_attn "$model" "$t" "$r" "$name"; fi
      done
    done
  done
done
echo "# done in $(( $(date +%s) - start_s )) s; load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
for m in "${!crashed[@]}"; do
  echo "# llama.cpp crashed with --repack 1 on $(basename "$m"): its figures there are with --repack 0"
done
python3 "$root/bench/llama_compare.py" summary "$raw" ${csv:+--csv "$csv"}
