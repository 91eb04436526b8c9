#!/usr/bin/env bash
# test_exports.sh INCLUDE_DIR LIBRARY... — the shared libraries export
# exactly what the public headers declare (DESIGN.md §2, ABI):
#   declared   every name X of an `ATTN_API ... X(` declaration in INCLUDE_DIR/*.h
#   exported   every defined dynamic symbol of a shared library (nm -D)
# Each exported symbol must be declared (nothing internal leaks), and each
# declared function must be exported by its library (nothing public is
# missing or hidden by mistake).  A header's declarations count only for
# the library that implements it, so a build without MPI passes no
# libattn_mpi and checks no attn_mpi.h.
# Static libraries (.a) cannot hide symbols; for them the naming rule of
# src/base/base.h is checked instead: every global symbol is either
# declared in the headers or starts with the internal prefix attn__, so that
# nothing internal can collide with a user's names or pass for public.
set -euo pipefail
include=$1
shift
work=$(mktemp -d "${TMPDIR:-/tmp}/attn-exports-XXXXXX")
trap 'rm -rf "$work"' EXIT

# Which header belongs to which library.
# (attn_model.h, the GGUF reader's deprecated name, only includes attn_gguf.h.)
model_headers=("$include/attn_gguf.h" "$include/attn_model.h" "$include/attn_decoder.h" "$include/attn_tokenizer.h"
               "$include/attn_npz.h" "$include/attn_safetensors.h" "$include/attn_model_interp.h" "$include/attn_chat.h")
headers_of() {
    case $(basename "$1") in
        libattn_viz.*) echo "$include/attn_viz.h" ;;
        libattn_mpi.*) echo "$include/attn_mpi.h" ;;
        libattn_model.*) printf '%s\n' "${model_headers[@]}" ;;
        libattn.*) ls "$include"/attn*.h | grep -v -e attn_viz.h -e attn_mpi.h $(printf ' -e %s' "${model_headers[@]##*/}") ;;
        *) echo "test_exports.sh: unknown library $1" >&2; exit 2 ;;
    esac
}

status=0
: > "$work/declared.all"
: > "$work/exported.all"
for lib in "$@"; do
    # The declared names: the identifier right before the '(' of each
    # ATTN_API line (every public prototype starts on its ATTN_API line).
    headers_of "$lib" | xargs grep -hoE '^ATTN_API [^;(]*\(' | sed -E 's/.*[^A-Za-z0-9_]([A-Za-z_][A-Za-z0-9_]*)\($/\1/' |
        sort -u > "$work/declared"
    if [[ "$lib" == *.a ]]; then
        bad=$(nm -g --defined-only "$lib" | awk 'NF == 3 {print $3}' | sort -u | comm -23 - "$work/declared" |
              grep -v '^attn__' || true)
        if [[ -n "$bad" ]]; then
            echo "$lib has global symbols that are neither public nor attn__ (internal):"
            echo "$bad" | sed 's/^/  /'
            status=1
        fi
        echo "$(basename "$lib"): every global symbol is public or attn__"
        continue
    fi
    nm -D --defined-only "$lib" | awk '{print $3}' | sort -u > "$work/exported"
    extra=$(comm -13 "$work/declared" "$work/exported")
    if [[ -n "$extra" ]]; then
        echo "$lib exports symbols no public header declares:"
        echo "$extra" | sed 's/^/  /'
        status=1
    fi
    missing=$(comm -23 "$work/declared" "$work/exported")
    if [[ -n "$missing" ]]; then
        echo "$lib does not export what its headers declare:"
        echo "$missing" | sed 's/^/  /'
        status=1
    fi
    echo "$(basename "$lib"): $(wc -l < "$work/exported") symbols exported, $(wc -l < "$work/declared") declared"
done
[[ $status -eq 0 ]] && echo "test_exports: the exported symbols are exactly the declared ones"
exit $status
