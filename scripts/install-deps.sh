#!/usr/bin/env bash
# install-deps.sh — installs the Debian packages attn builds, runs and tests with.
#
#   scripts/install-deps.sh          every run-time library of the features the README
#                                    shows: the compiler, CMake and cmocka; OpenBLAS (the
#                                    projections), PCRE2 (byte-level BPE tokenizers),
#                                    cJSON (Hugging Face checkpoints, tokenizer.json),
#                                    zlib (.npz), cairo and a CJK font (pictures), Open
#                                    MPI (attn ring), pip (scripts/fetch-models.sh)
#   scripts/install-deps.sh --all    and what only the tests, fuzzers and benchmarks
#                                    use: clang (libFuzzer), Chromium, xmllint and
#                                    poppler (the report's and pictures' tests), the
#                                    Python headers, venv and numpy (the binding's tests)
#
# The packages are listed by feature beside this script (deps-*.txt): one per
# line, followed by the word `test` when only --all installs it.  `cmake`
# ends with one line per feature saying whether it is on, and why not.
#
# Run as root it installs what is missing with apt-get; run as another user
# it names the missing packages and exits non-zero.  Nothing is downloaded
# from anywhere but Debian's archive.
set -euo pipefail

core=(build-essential cmake pkg-config libcmocka-dev)
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
all=0
case "${1:-}" in
    --all) all=1 ;;
    "") ;;
    *) echo "usage: $0 [--all]" >&2; exit 2 ;;
esac

extra=()
for list in "$here"/deps-*.txt; do
    [[ -e "$list" ]] || continue
    while read -r pkg scope _; do
        [[ -z "$pkg" || "$pkg" == \#* ]] && continue
        if [[ -n "$scope" && "$scope" != test ]]; then
            echo "$list: '$pkg $scope': a package may be followed only by the word 'test'" >&2
            exit 2
        fi
        [[ "$scope" == test && $all -eq 0 ]] && continue
        extra+=("$pkg")
    done < "$list"
done

missing=()
for pkg in "${core[@]}" "${extra[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [[ ${#missing[@]} -eq 0 ]]; then
    exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
    echo "attn needs these Debian packages: ${missing[*]}" >&2
    echo "install them as root:  apt-get install ${missing[*]}" >&2
    exit 1
fi
echo "installing: ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
# A fresh machine has no package lists yet; refresh them once if an install fails.
apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null ||
    { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null; }
