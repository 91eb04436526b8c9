#!/usr/bin/env bash
# install_test.sh SOURCE_DIR BUILD_DIR CMAKE — the installed libraries work
# for other projects, and the core needs neither cairo nor MPI.
#
#   1. BUILD_DIR (the tree under test) is installed into a scratch prefix;
#      examples/ is built against it with find_package(attn COMPONENTS viz
#      model): the core shared and static, a libattn_viz consumer, and
#      libattn_model consumers shared and static.
#   2. A second tree is configured from SOURCE_DIR with cairo and MPI forced
#      off (core only, no program, no tests), built and installed; its
#      libattn.so must not depend on cairo, X11 or MPI, and its configuration
#      must end with the feature summary, those two off by their options.
#      Consumers of the core are built against it by find_package and by
#      pkg-config, shared and static; none may get -fopenmp on its compile line, and the
#      exported CMake targets must not hard-code libm's path.  libattn_model
#      (no dependency beyond libattn and libm) is built there too, and used by
#      pkg-config (attn-model), shared and static, and through the GGUF
#      reader's deprecated header name (attn_model.h).
# Every consumer must print the chapter's causal row 2: weights 1/3, 2/3, 0
# and output [2/3, 2/3]; the model consumers, the tensor of their GGUF image.
set -euo pipefail
src=$1 build=$2 cmake=${3:-cmake}
work=$(mktemp -d "${TMPDIR:-/tmp}/attn-install-XXXXXX")
trap 'rm -rf "$work"' EXIT
jobs=$(nproc 2>/dev/null || echo 2)
want="o2 = \[0.6667, 0.6667\]   weights \[0.3333, 0.6667, 0.0000\]"

fail() { echo "install test: $*" >&2; exit 1; }
check_output() { # program...
    local out
    out=$(LD_LIBRARY_PATH="$lib_path" "$@") || fail "$1 failed"
    grep -q "$want" <<<"$out" || fail "unexpected output of $1: $out"
}
want_model="w = \[1, 2, 3, 4\]"
check_model() { # program...
    local out
    out=$(LD_LIBRARY_PATH="$lib_path" "$@") || fail "$1 failed"
    grep -q "$want_model" <<<"$out" || fail "unexpected output of $1: $out"
}

# ------------------------------------------------ 1. the tree under test
"$cmake" --install "$build" --prefix "$work/full" >/dev/null
lib_path="$work/full/lib:$work/full/lib64"
"$cmake" -S "$src/examples" -B "$work/consumer-full" -DCMAKE_PREFIX_PATH="$work/full" -DHELLO_VIZ=ON \
    -DHELLO_MODEL=ON >/dev/null
"$cmake" --build "$work/consumer-full" -j "$jobs" >/dev/null
check_output "$work/consumer-full/hello_attn"
check_output "$work/consumer-full/hello_attn_static"
LD_LIBRARY_PATH="$lib_path" "$work/consumer-full/cache_decode" | grep -q "blocks free" ||
    fail "cache_decode (attn_cache.h through the installed library) failed"
check_model "$work/consumer-full/hello_model"
check_model "$work/consumer-full/hello_model_static"
if ldd "$work/consumer-full/hello_model_static" | grep -q "libattn"; then
    fail "hello_model_static is linked to a shared attn library"
fi
LD_LIBRARY_PATH="$lib_path" "$work/consumer-full/hello_viz" "$work/report.html" >/dev/null
grep -q "the chapter's example, causal" "$work/report.html" || fail "hello_viz wrote no report"
echo "install test: the tree under test: find_package consumers of attn::attn, attn::attn_static, attn::viz,"
echo "              attn::model and attn::model_static"

# --------------------------------------------------- 2. a core-only tree
"$cmake" -S "$src" -B "$work/core-build" -DCMAKE_BUILD_TYPE=Release -DATTN_WITH_CAIRO=OFF -DATTN_WITH_MPI=OFF \
    -DATTN_BUILD_TOOLS=OFF -DATTN_BUILD_TESTS=OFF >"$work/core-configure.log" ||
    { cat "$work/core-configure.log"; fail "the core-only configuration failed"; }
# It ends with one line per feature (cmake/attn_features.cmake), each once,
# the ones turned off naming the option.
for line in "pictures +off +ATTN_WITH_CAIRO=OFF" "CJK labels +off +the pictures are off" \
            "ring attention +off +ATTN_WITH_MPI=OFF" "attn program +off +ATTN_BUILD_TOOLS=OFF" "threads +o" \
            "byte-level BPE +o" "BLAS projections +o" "Hugging Face files +o" "deflated .npz +o" "x86 kernels +o"; do
    [[ $(grep -Ec -- "^-- +$line" "$work/core-configure.log") == 1 ]] ||
        fail "the configuration's feature summary lacks '$line' (or has it twice): $(grep -A20 'attn: features' "$work/core-configure.log")"
done
"$cmake" --build "$work/core-build" -j "$jobs" >"$work/core-build.log" ||
    { tail -30 "$work/core-build.log"; fail "the core-only build failed"; }
"$cmake" --install "$work/core-build" --prefix "$work/core" >/dev/null
lib_path="$work/core/lib:$work/core/lib64"
libdir=$(dirname "$(find "$work/core" -name attn.pc | head -n 1)")/..
[[ ! -e "$work/core/include/attn_mpi.h" ]] || fail "a build without MPI installed attn_mpi.h"
# Every other public header is installed (a header left out of the install
# list compiles in the tree and breaks only installed consumers).
for header in "$src"/include/attn*.h; do
    [[ $(basename "$header") == attn_mpi.h || -e "$work/core/include/$(basename "$header")" ]] ||
        fail "the core install lacks $(basename "$header")"
done
so=$(find "$work/core" -name 'libattn.so' | head -n 1)
needed=$(readelf -d "$so" | grep NEEDED || true)
if grep -Eiq "cairo|X11|xcb|mpi|pixman|png" <<<"$needed"; then
    fail "the core libattn.so depends on more than it needs: $needed"
fi
if grep -rq "/libm\." "$work"/core/lib*/cmake/attn/; then
    fail "the exported targets hard-code libm's path: $(grep -rh "/libm\." "$work"/core/lib*/cmake/attn/)"
fi

# find_package, shared and static; compile lines recorded to look for -fopenmp.
"$cmake" -S "$src/examples" -B "$work/consumer-core" -DCMAKE_PREFIX_PATH="$work/core" \
    -DCMAKE_EXPORT_COMPILE_COMMANDS=ON >/dev/null
"$cmake" --build "$work/consumer-core" -j "$jobs" >/dev/null
check_output "$work/consumer-core/hello_attn"
check_output "$work/consumer-core/hello_attn_static"
if grep -q -- "-fopenmp" "$work/consumer-core/compile_commands.json"; then
    fail "find_package hands -fopenmp to consumers' compile lines"
fi
if ldd "$work/consumer-core/hello_attn_static" | grep -q "libattn\.so"; then
    fail "hello_attn_static is linked to the shared library"
fi

# pkg-config, shared and static.
export PKG_CONFIG_PATH="$libdir/pkgconfig"
cflags=$(pkg-config --cflags attn)
if grep -q -- "-fopenmp" <<<"$cflags"; then fail "pkg-config --cflags attn hands out -fopenmp"; fi
cc "$src/examples/hello_attn.c" -o "$work/hello_pc" $cflags $(pkg-config --libs attn) -lm \
    -Wl,-rpath,"$libdir"
check_output "$work/hello_pc"
static_libs=$(pkg-config --static --libs attn | sed 's/-lattn\b/-Wl,-Bstatic -lattn -Wl,-Bdynamic/')
cc "$src/examples/hello_attn.c" -o "$work/hello_pc_static" $cflags $static_libs -lm
check_output "$work/hello_pc_static"
if ldd "$work/hello_pc_static" | grep -q "libattn\.so"; then fail "hello_pc_static is linked to the shared library"; fi
so=$(find "$work/core" -name 'libattn_model.so' | head -n 1)
[[ -n "$so" ]] || fail "the core-only tree installed no libattn_model.so"
needed=$(readelf -d "$so" | grep NEEDED || true)
if grep -Eiq "cairo|X11|xcb|mpi|pixman|png|gomp" <<<"$needed"; then
    fail "libattn_model.so depends on more than libattn and libm: $needed"
fi
model_cflags=$(pkg-config --cflags attn-model)
cc "$src/examples/hello_model.c" -o "$work/hello_model_pc" $model_cflags $(pkg-config --libs attn-model) \
    -Wl,-rpath,"$libdir"
check_model "$work/hello_model_pc"
# The GGUF reader's header under its deprecated name (attn_model.h, kept until
# 1.0) still declares it.
printf '#include <attn_model.h>\nint main(void) { return attn_gguf_type_name(ATTN_GGUF_TYPE_F32) == 0; }\n' |
    cc -x c - -o "$work/old_header" $model_cflags $(pkg-config --libs attn-model) -Wl,-rpath,"$libdir" ||
    fail "a program including the deprecated attn_model.h does not build"
LD_LIBRARY_PATH="$lib_path" "$work/old_header" || fail "the program including attn_model.h failed"
static_libs=$(pkg-config --static --libs attn-model | sed -E 's/-lattn(_model)?\b/-Wl,-Bstatic -lattn\1 -Wl,-Bdynamic/g')
cc "$src/examples/hello_model.c" -o "$work/hello_model_pc_static" $model_cflags $static_libs -lm
check_model "$work/hello_model_pc_static"
if ldd "$work/hello_model_pc_static" | grep -q "libattn"; then
    fail "hello_model_pc_static is linked to a shared attn library"
fi
echo "install test: a core built without cairo and MPI: find_package and pkg-config consumers, shared and static"
echo "              (attn and attn-model)"
