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
# ggml is not in Debian 12's archive. Its sources come from the Python
# package index: the sdist of llama-cpp-python, pinned below by version and
# SHA-256, which carries llama.cpp (and ggml) under vendor/. They are
# downloaded by this script, once, never by attn; ggml is built with its own
# CMake (static, -march=native, OpenMP) into GGML_DIR.
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

package=llama_cpp_python
version=0.3.36
sha256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
tarball=$dir/$package-$version.tar.gz
src=$dir/ggml-$version

if [ ! -f "$tarball" ]; then
  echo "ggml_compare.sh: fetching $package $version (sources) from the Python package index" >&2
  python3 - "$package" "$version" "$tarball.part" << 'EOF'
import json, sys, urllib.parse, urllib.request
package, version, dest = sys.argv[1:]
index = "https://pypi.org/pypi/%s/json" % package.replace("_", "-")
with urllib.request.urlopen(index, timeout=60) as r:
    files = json.load(r)["releases"].get(version, [])
sdist = [f for f in files if f["packagetype"] == "sdist"]
if not sdist:
    sys.exit("ggml_compare.sh: %s %s has no source distribution on the index" % (package, version))
urllib.request.urlretrieve(urllib.parse.urljoin(index, sdist[0]["url"]), dest)
EOF
  echo "$sha256  $tarball.part" | sha256sum -c --quiet - ||
    { echo "ggml_compare.sh: $tarball.part does not have the pinned SHA-256" >&2; exit 1; }
  mv "$tarball.part" "$tarball"
fi
if [ ! -f "$src/CMakeLists.txt" ]; then
  rm -rf "$src.part" && mkdir -p "$src.part"
  tar -xzf "$tarball" -C "$src.part" --strip-components=4 "$package-$version/vendor/llama.cpp/ggml"
  # the sdist leaves out ggml's pkg-config template, which its CMakeLists configures
  [ -f "$src.part/ggml.pc.in" ] || : > "$src.part/ggml.pc.in"
  mv "$src.part" "$src"
fi
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
