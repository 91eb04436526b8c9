#!/usr/bin/env bash
# install-deps.sh — installs the Debian packages attn builds and tests with.
#
#   scripts/install-deps.sh          what `attn demo` needs: compiler, CMake, cmocka
#   scripts/install-deps.sh --all    everything the full test suite uses as well
#                                    (clang for fuzzing, cairo and a CJK font for
#                                    pictures, chromium for the HTML report test,
#                                    Open MPI for ring attention, PCRE2 for the
#                                    byte-level BPE tokenizer, OpenBLAS for the
#                                    projections)
#
# Run as root it installs what is missing with apt-get; run as another user
# it names the missing packages and exits non-zero.  Nothing is downloaded
# from anywhere but Debian's archive.
set -euo pipefail

core=(build-essential cmake pkg-config libcmocka-dev)
extra=()
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [[ "${1:-}" == "--all" ]]; then
    # Feature groups keep their package lists beside this script (deps-*.txt).
    for list in "$here"/deps-*.txt; do
        [[ -e "$list" ]] || continue
        while read -r pkg _; do
            [[ -z "$pkg" || "$pkg" == \#* ]] || extra+=("$pkg")
        done < "$list"
    done
elif [[ -n "${1:-}" ]]; then
    echo "usage: $0 [--all]" >&2
    exit 2
fi

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
