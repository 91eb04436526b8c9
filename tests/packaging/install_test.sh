#!/usr/bin/env bash
# install_test.sh SOURCE_DIR BUILD_DIR — installs attn into a scratch prefix
# and builds examples/hello_attn.c against it twice, through find_package(attn)
# and through pkg-config, then checks the program prints the chapter's
# causal row 2: weights 1/3, 2/3, 0 and output [2/3, 2/3].
set -euo pipefail
src=$1 build=$2
work=$(mktemp -d "${TMPDIR:-/tmp}/attn-install-XXXXXX")
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >/dev/null

cmake -S "$src/examples" -B "$work/consumer" -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/consumer" >/dev/null
LD_LIBRARY_PATH="$work/prefix/lib:$work/prefix/lib64:${LD_LIBRARY_PATH:-}" "$work/consumer/hello_attn" > "$work/out1.txt"

libdir=$(find "$work/prefix" -name attn.pc -printf '%h\n' | head -n 1)
cc "$src/examples/hello_attn.c" -o "$work/hello_pc" \
    $(PKG_CONFIG_PATH="$libdir" pkg-config --cflags --libs attn) -lm -Wl,-rpath,"$(dirname "$libdir")"
"$work/hello_pc" > "$work/out2.txt"

for out in "$work/out1.txt" "$work/out2.txt"; do
    grep -q "o2 = \[0.6667, 0.6667\]   weights \[0.3333, 0.6667, 0.0000\]" "$out" ||
        { echo "unexpected output in $out:"; cat "$out"; exit 1; }
done
echo "install test: find_package and pkg-config consumers both print the chapter's causal row 2"
