# shellcheck shell=bash
# fetch_llama_cpp.sh — sourced (not run) by bench/ggml_compare.sh and
# bench/llama_compare.sh: the llama.cpp sources both build their peer from.
#
# llama.cpp (and its ggml) is not in Debian 12's archive.  Its sources come
# from the Python package index, through pip's own configured index: the
# sdist of llama-cpp-python, pinned below by version and SHA-256, carries
# llama.cpp under vendor/llama.cpp.  Downloaded by the benchmark scripts,
# once per cache folder, never by attn, never committed.
#
#   llama_cpp_fetch DIR            DIR/llama_cpp_python-VERSION.tar.gz, with
#                                  the pinned SHA-256 (downloaded when absent);
#                                  prints its path
#   llama_cpp_unpack DIR SUB DEST  the sdist's vendor/llama.cpp/SUB (SUB "."
#                                  for all of llama.cpp) unpacked into DEST,
#                                  once (DEST is left alone when it has a
#                                  CMakeLists.txt)
#
# PIP (default "python3 -m pip") is the pip to run.

llama_cpp_package=llama_cpp_python
llama_cpp_version=0.3.36
llama_cpp_sha256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e

llama_cpp_fetch() {
  local dir=$1 name=$llama_cpp_package-$llama_cpp_version.tar.gz
  local tarball=$dir/$name
  if [ ! -f "$tarball" ]; then
    echo "fetch_llama_cpp.sh: fetching ${llama_cpp_package//_/-} $llama_cpp_version (its sdist) with pip" >&2
    local part=$dir/download.part
    rm -rf "$part" && mkdir -p "$part"
    # --no-binary :all: takes the source distribution, --no-deps nothing else;
    # the index is pip's own configuration (pip.conf, PIP_INDEX_URL).
    ${PIP:-python3 -m pip} download --quiet --no-deps --no-binary :all: -d "$part" \
      "${llama_cpp_package//_/-}==$llama_cpp_version" >&2 ||
      { echo "fetch_llama_cpp.sh: pip download failed" >&2; return 1; }
    [ -f "$part/$name" ] ||
      { echo "fetch_llama_cpp.sh: pip left no $name in $part" >&2; return 1; }
    echo "$llama_cpp_sha256  $part/$name" | sha256sum -c --quiet - ||
      { echo "fetch_llama_cpp.sh: $part/$name does not have the pinned SHA-256" >&2; return 1; }
    mv "$part/$name" "$tarball" && rm -rf "$part"
  fi
  echo "$tarball"
}

llama_cpp_unpack() {
  local dir=$1 sub=$2 dest=$3 tarball
  [ -f "$dest/CMakeLists.txt" ] && return 0
  tarball=$(llama_cpp_fetch "$dir") || return 1
  local path=$llama_cpp_package-$llama_cpp_version/vendor/llama.cpp strip=3
  if [ "$sub" != . ]; then
    path=$path/$sub
    strip=$((strip + $(tr -cd / <<< "$sub/" | wc -c)))
  fi
  rm -rf "$dest.part" && mkdir -p "$dest.part"
  tar -xzf "$tarball" -C "$dest.part" --strip-components="$strip" "$path" ||
    { echo "fetch_llama_cpp.sh: $tarball has no $path" >&2; return 1; }
  rm -rf "$dest" && mv "$dest.part" "$dest"
}
