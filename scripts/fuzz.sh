#!/usr/bin/env bash
# fuzz.sh [--all | TARGET...] [--seconds N | --minutes N] — builds the
# libFuzzer targets in build-fuzz/ with clang and runs each for the time
# given (default 60 seconds each) on a scratch copy of its seed corpus, so
# the committed seeds stay as they are.
#
#   npy_fuzz        the .npy parser on memory images (fuzz/corpus/npy/)
#   npy_file_fuzz   the .npy file readers: whole, header, rows by offset
#                   (the same seeds, each behind 8 bytes that choose the read)
#   cli_args_fuzz   the command line's argument walk and value parsers
#                   (fuzz/corpus/cli/: command lines, arguments NUL-separated)
#   gguf_fuzz       the GGUF reader on memory images, keys read and first rows
#                   dequantized (fuzz/corpus/gguf/: tests/fixtures/
#                   make_gguf_fixtures.py writes them)
#   tokenizer_fuzz  the tokenizers: texts on fixed byte-level BPE and
#                   SentencePiece vocabularies, and hostile vocabularies
#                   and merges built from the input (fuzz/corpus/tokenizer/)
#   safetensors_fuzz  the safetensors reader: header length, JSON header,
#                   dtypes, shapes, data_offsets; and a sharded checkpoint's
#                   index (fuzz/corpus/safetensors/: real and byte-built,
#                   fuzz/make_safetensors_corpus.py writes them)
#   model_config_fuzz  config.json -> the decoder's configuration
#                   (fuzz/corpus/config/)
#   tokenizer_json_fuzz  Hugging Face tokenizer.json -> a byte-level BPE or
#                   SentencePiece-style tokenizer, then a text encoded and decoded
#                   (fuzz/corpus/tokenizer_json/: the tiny trained fixtures
#                   and byte-built variants; fuzz/make_tokenizer_json_corpus.py)
#   chat_template_fuzz  chat templates: the Jinja-subset interpreter's parser
#                   and renderer, on a template and an optional conversation
#                   after a NUL byte (fuzz/corpus/chat/: the real models'
#                   templates of tests/fixtures/chat/)
#
# safetensors_fuzz, model_config_fuzz and tokenizer_json_fuzz need cJSON (libcjson-dev); without it they are skipped with
# a message.
#
# A bare number is taken as seconds (fuzz.sh 60, as .ci/run calls it).
# Exits 0 when no crash was found (or clang is missing: then it says so and
# skips), and libFuzzer's status otherwise; crash inputs land in
# build-fuzz/artifacts/.  Each run's executions and coverage are printed as
# libFuzzer's final "stat::" lines, for docs/reliability.md.
set -euo pipefail
all_targets=(npy_fuzz npy_file_fuzz cli_args_fuzz gguf_fuzz tokenizer_fuzz safetensors_fuzz model_config_fuzz
             tokenizer_json_fuzz npz_fuzz chat_template_fuzz)
targets=()
seconds=60
while [[ $# -gt 0 ]]; do
    case $1 in
        --all) targets=("${all_targets[@]}") ;;
        --seconds) seconds=${2:-}; shift ;;
        --minutes) seconds=$(( ${2:-0} * 60 )); shift ;;
        -h|--help) sed -n '2,40p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        ''|*[!0-9]*) targets+=("$1") ;;
        *) seconds=$1 ;;
    esac
    shift
done
case $seconds in ''|*[!0-9]*|0) echo "usage: $0 [--all | TARGET...] [--seconds N | --minutes N]" >&2; exit 2 ;; esac
[[ ${#targets[@]} -gt 0 ]] || targets=("${all_targets[@]}")
for t in "${targets[@]}"; do
    [[ " ${all_targets[*]} " == *" $t "* ]] || { echo "fuzz.sh: unknown target '$t' (${all_targets[*]})" >&2; exit 2; }
done
if ! command -v clang >/dev/null 2>&1; then
    echo "clang not found, skipping fuzzing"
    exit 0
fi

root="$(cd "$(dirname "$0")/.." && pwd)"
build="$root/build-fuzz"
cmake -S "$root" -B "$build" -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DATTN_BUILD_FUZZERS=ON -DATTN_BUILD_TESTS=OFF -DATTN_BUILD_TOOLS=OFF >/dev/null
# Targets whose dependency this build lacks (cJSON) are skipped, saying so.
have=()
for t in "${targets[@]}"; do
    if [[ $t == safetensors_fuzz || $t == model_config_fuzz || $t == tokenizer_json_fuzz ]] &&
       ! pkg-config --exists libcjson 2>/dev/null; then
        echo "fuzz.sh: skipping $t: cJSON not found (Debian: libcjson-dev)"
        continue
    fi
    have+=("$t")
done
targets=("${have[@]}")
[[ ${#targets[@]} -gt 0 ]] || { echo "fuzz.sh: nothing to fuzz"; exit 0; }
cmake --build "$build" --target "${targets[@]}" -j "$(nproc 2>/dev/null || echo 2)"

scratch="$(mktemp -d "${TMPDIR:-/tmp}/attn-fuzz-XXXXXX")"
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$build/artifacts"
for t in "${targets[@]}"; do
    corpus="$scratch/$t"
    mkdir -p "$corpus"
    case $t in
        npy_fuzz) cp "$root"/fuzz/corpus/npy/* "$corpus"/ ;;
        cli_args_fuzz) cp "$root"/fuzz/corpus/cli/* "$corpus"/ ;;
        gguf_fuzz) cp "$root"/fuzz/corpus/gguf/* "$corpus"/ ;;
        tokenizer_fuzz) cp "$root"/fuzz/corpus/tokenizer/* "$corpus"/ ;;
        safetensors_fuzz) cp "$root"/fuzz/corpus/safetensors/* "$corpus"/ ;;
        model_config_fuzz) cp "$root"/fuzz/corpus/config/* "$corpus"/ ;;
        tokenizer_json_fuzz) cp "$root"/fuzz/corpus/tokenizer_json/* "$corpus"/ ;;
        npz_fuzz) cp "$root"/fuzz/corpus/npz/* "$corpus"/ ;;
        chat_template_fuzz) cp "$root"/fuzz/corpus/chat/* "$corpus"/ ;;
        npy_file_fuzz)
            # axis 0, first row 0, two rows; then the file
            for seed in "$root"/fuzz/corpus/npy/*; do
                { printf '\0\0\0\2\0\0\0\0'; cat "$seed"; } > "$corpus/$(basename "$seed")"
            done ;;
    esac
    echo "== $t for $seconds s"
    # A command line is short; files need room for a header and some data.
    max_len=4096
    [[ $t == cli_args_fuzz ]] && max_len=512
    # A tokenizer.json needs its 256 byte letters: the tiny seeds are 16-24 KB.
    [[ $t == tokenizer_json_fuzz ]] && max_len=32768
    # The real templates are up to 5 KB, with a conversation after them.
    [[ $t == chat_template_fuzz ]] && max_len=16384
    "$build/fuzz/$t" -max_total_time="$seconds" -max_len="$max_len" -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$build/artifacts/$t-" "$corpus"
done
echo "fuzz.sh: no crash in ${targets[*]} ($seconds s each)"
