#!/usr/bin/env bash
# check_header_index.sh SOURCE_DIR — attn.h's comment stays true:
#   - its index of the public headers ("The public headers, one per
#     concern", the names in its first column) names every header of
#     include/ and attn_version.h (generated from cmake/attn_version.h.in),
#     and nothing else;
#   - its version example ("0.3.0" and 300) is the project's version, as
#     project(attn VERSION ...) in CMakeLists.txt writes it.
set -euo pipefail
src=$1
header=$src/include/attn.h
status=0

# The index: from its first line to the comment's first empty line.
indexed=$(sed -n '/The public headers, one per concern/,/^ \*$/p' "$header" |
          sed -nE 's/^ \*   (attn[a-z_]*\.h) .*/\1/p' | sort)
present=$( (cd "$src/include" && ls attn*.h; basename "$src/cmake/attn_version.h.in" .in) | sort)
[[ -n "$indexed" ]] || { echo "attn.h: no header index found"; exit 1; }
missing=$(comm -13 <(echo "$indexed") <(echo "$present"))
stale=$(comm -23 <(echo "$indexed") <(echo "$present"))
duplicated=$(echo "$indexed" | uniq -d)
if [[ -n "$missing" ]]; then
    echo "attn.h's header index does not name:"; echo "$missing" | sed 's/^/  /'; status=1
fi
if [[ -n "$stale" ]]; then
    echo "attn.h's header index names headers include/ does not have:"; echo "$stale" | sed 's/^/  /'; status=1
fi
if [[ -n "$duplicated" ]]; then
    echo "attn.h's header index names more than once:"; echo "$duplicated" | sed 's/^/  /'; status=1
fi

# The version example against project(attn VERSION X.Y.Z).
version=$(sed -nE 's/^project\(attn VERSION ([0-9]+\.[0-9]+\.[0-9]+).*/\1/p' "$src/CMakeLists.txt")
IFS=. read -r major minor patch <<< "$version"
number=$((major * 10000 + minor * 100 + patch))
example=$(grep -oE 'as text \("[0-9.]+"\)' "$header" | grep -oE '[0-9]+\.[0-9]+\.[0-9]+' || true)
example_number=$(grep -oE 'patch \([0-9]+\)' "$header" | grep -oE '[0-9]+' || true)
if [[ "$example" != "$version" || "$example_number" != "$number" ]]; then
    echo "attn.h's version example says \"$example\" ($example_number); CMakeLists.txt's version is $version ($number)"
    status=1
fi

[[ $status -eq 0 ]] && echo "check_header_index: attn.h indexes the $(echo "$present" | wc -l) public headers; version $version"
exit $status
