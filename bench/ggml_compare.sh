#!/usr/bin/env bash
# ggml_compare.sh — attn's flash forward beside ggml's flash_attn_ext (CPU
# backend) on attn bench's prefill shapes, same inputs, same threads, the two
# interleaved in one process (bench/ggml_compare.c): issue 14's "≥ 2× ggml".
#
# usage: bench/ggml_compare.sh [--threads N] [--rounds R] [--kv f32|f16]
#                              [--shapes 'L HKV D CAUSAL|...']
#
#   --threads N   threads for both (default 2)
#   --rounds R    timed calls of each per shape, after a warm-up (default 3)
#   --kv TYPE     ggml's K/V element type: f32 (default; what attn reads) or
#                 f16 (llama.cpp's default KV cache type)
#   --shapes S    '|'-separated "L HKV D CAUSAL" (Hq = 16, S = L); default
#                 attn bench's prefill rows at L = 1024 and 4096
#
# environment:
#   ATTN_BUILD  an attn build folder with libattn.a (default: build)
#   GGML_DIR    where ggml's sources and build are kept (default
#               ~/.cache/attn-ggml); made once, reused after
#
# ggml is not in Debian 12's archive. Its sources come from the sdist of
# llama-cpp-python on the Python package index, fetched with pip's own
# configured index and pinned by version and SHA-256 (bench/fetch_llama_cpp.sh,
# shared with bench/llama_compare.sh), which carries llama.cpp (and ggml)
# under vendor/. They are downloaded by this script, once, never by attn;
# ggml is built with its own CMake (static, -march=native, OpenMP) into
# GGML_DIR.
# A line per round, then a summary per shape: the medians, GFLOP/s on the
# visible pairs (attn bench's count), ggml / attn (> 1: attn is faster), and
# the largest difference between the two outputs (the program fails if they
# differ by more than float32 (f16: float16) rounding allows).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
threads=2
rounds=3
kv=f32
shapes='1024 16 64 0|1024 16 64 1|1024 16 128 0|1024 16 128 1|1024 8 64 0|1024 8 64 1|1024 8 128 0|1024 8 128 1|4096 16 64 0|4096 16 64 1|4096 16 128 0|4096 16 128 1|4096 8 64 0|4096 8 64 1|4096 8 128 0|4096 8 128 1'
while [ $# -gt 0 ]; do
  case "$1" in
    --threads|--rounds|--kv|--shapes)
      [ $# -ge 2 ] || { echo "ggml_compare.sh: $1 needs a value" >&2; exit 2; }
      case "$1" in
        --threads) threads=$2 ;;
        --rounds) rounds=$2 ;;
        --kv) kv=$2 ;;
        --shapes) shapes=$2 ;;
      esac
      shift 2 ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "ggml_compare.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
case "$kv" in f32|f16) ;; *) echo "ggml_compare.sh: --kv takes f32 or f16, not '$kv'" >&2; exit 2 ;; esac

build=${ATTN_BUILD:-$root/build}
[ -f "$build/libattn.a" ] || { echo "ggml_compare.sh: no libattn.a in '$build' (set ATTN_BUILD)" >&2; exit 1; }
dir=${GGML_DIR:-$HOME/.cache/attn-ggml}
mkdir -p "$dir"

# shellcheck source=bench/fetch_llama_cpp.sh
. "$root/bench/fetch_llama_cpp.sh"
version=$llama_cpp_version
src=$dir/ggml-$version
llama_cpp_unpack "$dir" ggml "$src" || exit 1
# the sdist leaves out ggml's pkg-config template, which its CMakeLists configures
[ -f "$src/ggml.pc.in" ] || : > "$src/ggml.pc.in"
lib=$dir/build-$version
if [ ! -f "$lib/src/libggml-cpu.a" ]; then
  echo "ggml_compare.sh: building ggml (a few minutes, once) in $lib" >&2
  cmake -S "$src" -B "$lib" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=ON \
    -DGGML_OPENMP=ON -DGGML_BUILD_TESTS=OFF -DGGML_BUILD_EXAMPLES=OFF > "$lib.log" 2>&1 &&
    cmake --build "$lib" -j "$(nproc)" >> "$lib.log" 2>&1 ||
    { echo "ggml_compare.sh: the ggml build failed; see $lib.log" >&2; exit 1; }
fi

prog=$dir/ggml_compare
cc -O2 -fopenmp -I "$root/include" -I "$build/include" -I "$src/include" "$root/bench/ggml_compare.c" \
  "$build/libattn.a" "$lib/src/libggml.a" "$lib/src/libggml-cpu.a" "$lib/src/libggml-base.a" \
  -lopenblas -lstdc++ -lm -lpthread -o "$prog"

echo "# $(lscpu | sed -n 's/^Model name: *//p'), $threads threads, ggml from llama-cpp-python $version (its sdist), K/V for ggml: $kv"
IFS='|' read -r -a list <<< "$shapes"
for shape in "${list[@]}"; do
  # shellcheck disable=SC2086 # L HKV D CAUSAL, split on purpose
  "$prog" $shape "$threads" "$rounds" "$kv"
done
