#!/usr/bin/env bash
# fuzz.sh SECONDS — builds the libFuzzer targets in build-fuzz/ with clang
# and runs the .npy reader's fuzzer for SECONDS (default 60) on a scratch
# copy of fuzz/corpus/npy/, so the committed seeds stay as they are.
# Exits 0 when no crash was found (or clang is missing: then it says so and
# skips), and libFuzzer's status otherwise; crash inputs land in
# build-fuzz/artifacts/.
set -euo pipefail
seconds=${1:-60}
case $seconds in
    ''|*[!0-9]*) echo "usage: $0 SECONDS" >&2; exit 2 ;;
esac
if ! command -v clang >/dev/null 2>&1; then
    echo "clang not found, skipping fuzzing"
    exit 0
fi

root="$(cd "$(dirname "$0")/.." && pwd)"
build="$root/build-fuzz"
cmake -S "$root" -B "$build" -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DATTN_BUILD_FUZZERS=ON -DATTN_BUILD_TESTS=OFF >/dev/null
cmake --build "$build" --target npy_fuzz -j "$(nproc 2>/dev/null || echo 2)"

corpus="$(mktemp -d "${TMPDIR:-/tmp}/attn-npy-corpus-XXXXXX")"
trap 'rm -rf "$corpus"' EXIT
cp "$root"/fuzz/corpus/npy/* "$corpus"/
mkdir -p "$build/artifacts"
"$build/fuzz/npy_fuzz" -max_total_time="$seconds" -max_len=4096 -rss_limit_mb=2048 \
    -artifact_prefix="$build/artifacts/" "$corpus"
echo "fuzz.sh: no crash in $seconds s"
