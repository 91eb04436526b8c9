#!/usr/bin/env bash
# make_corpus.sh — writes the seed .npy files of fuzz/npy_fuzz.c into
# fuzz/corpus/npy/.  The seeds are kept in the repository; this script says
# how they were made and remakes them.  Each is a small valid file, or one
# valid but for a single flaw, so the fuzzer starts next to every branch.
set -euo pipefail
out="$(cd "$(dirname "$0")" && pwd)/corpus/npy"
mkdir -p "$out"

# npy FILE MAJOR DESCR FORTRAN SHAPE DATA
#   A .npy image laid out as numpy.save lays it out: the header padded with
#   spaces and '\n' to a multiple of 64 bytes.  DATA is a printf format of
#   the raw data bytes, written as \ooo octal escapes.
npy() {
    local file=$1 major=$2 descr=$3 fortran=$4 shape=$5 data=$6
    local dict="{'descr': '$descr', 'fortran_order': $fortran, 'shape': $shape, }"
    local preamble=$(( major == 1 ? 10 : 12 ))
    local pad=$(( 64 - (preamble + ${#dict} + 1) % 64 ))
    local header_len=$(( ${#dict} + pad + 1 ))
    {
        printf '\223NUMPY'
        printf "\\$(printf %03o "$major")\\000"
        printf "\\$(printf %03o $(( header_len & 255 )))\\$(printf %03o $(( header_len >> 8 )))"
        if (( major > 1 )); then printf '\000\000'; fi
        printf '%s%*s\n' "$dict" "$pad" ''
        printf "$data"
    } > "$out/$file"
}

F32_1_TO_6='\000\000\200\077\000\000\000\100\000\000\100\100\000\000\200\100\000\000\240\100\000\000\300\100'
npy f4_2x3.npy       1 '<f4' False '(2, 3)' "$F32_1_TO_6"
npy f8_scalar.npy    1 '<f8' False '()'     '\000\000\000\000\000\000\370\077'
# 1.0, 65504, 2^-24 (smallest subnormal), inf, nan, -0.0
npy f2_specials.npy  1 '<f2' False '(6,)'   '\000\074\377\173\001\000\000\174\000\176\000\200'
npy i4_big_endian.npy 1 '>i4' False '(3,)'  '\000\000\000\001\377\377\377\376\177\377\377\377'
npy b1_mask.npy      1 '|b1' False '(2, 2)' '\001\000\000\001'
# 1 and 2^63, which does not fit int64: the conversion must refuse it.
npy u8_2pow63.npy    1 '<u8' False '(2,)'   '\001\000\000\000\000\000\000\000\000\000\000\000\000\000\000\200'
npy i8_lengths.npy   1 '<i8' False '(2,)'   '\003\000\000\000\000\000\000\000\005\000\000\000\000\000\000\000'
npy u2_v2.npy        2 '<u2' False '(2,)'   '\001\000\377\377'
npy i1_v3.npy        3 '|i1' False '(4,)'   '\200\377\000\177'
npy f4_empty.npy     1 '<f4' False '(0, 3)' ''
# No elements, but numpy refuses it: the other dimensions' bytes overflow
# int64 (npy_file_fuzz found a product of them overflowing, issue 10's CI).
npy empty-but-too-big.npy 1 '<f4' False '(0, 3000000000000000, 1615, 3)' ''
npy f4_fortran.npy   1 '<f4' True  '(2, 2)' '\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000'
npy f4_truncated.npy 1 '<f4' False '(2, 3)' '\000\000\200\077\000\000\000\100'

# The command line's parsers (fuzz/cli_args_fuzz.c): one command line per
# seed, its arguments separated by NUL bytes, next to every family's values.
cli="$(dirname "$out")/cli"
mkdir -p "$cli"
seed() { local file=$1; shift; printf '%s\0' "$@" | head -c -1 > "$cli/$file"; }
seed masks.txt      --causal --window 128,0 --align lower-right --key-lengths l.npy --mask m.npy --bias b.npy
seed lower.txt      --causal-lower-right --window=-1,-1
seed window_max.txt --window 9223372036854775807,9223372036854775806
seed compute.txt    --scale 0.125 --kernel flash --threads 2 --allow-slow --layout BHLD --quiet
seed equals.txt     --scale=1e-3 --kernel=ref --threads=4096 --layout=blhd
seed module.txt     --wq a --wk b --wv c --wo d --bq e --heads 8 --kv-heads 2 --weight-layout torch
seed numbers.txt    --int -5 --float 1e10 --int 0x10 --float nan --int 99999999999999999999
seed lists.txt      --heads-list 0,3-5,7 --tokens "我,吃,了" --tokens=a,,b
seed repeat.txt     --replace q:0=source --replace 'pattern:1::2=0.5' -o x.npy -- -o positional
seed mistakes.txt   --wieghts w.npy -o --causal -q=x --causal=1 -o a -o b
seed help.txt       --list-options -h

# The tokenizer's seeds (fuzz/tokenizer_fuzz.c): the first byte is the case
# (0 BPE text, 1 SPM text, 2 and 3 a hostile BPE or SPM vocabulary: token
# lines whose first byte is the type, "-", merge lines, 0xFF, the text).
tok="$(cd "$(dirname "$0")" && pwd)/corpus/tokenizer"
mkdir -p "$tok"
printf '\000hello world<|end|> 12 <tool>\n\tx' > "$tok/bpe-text"
printf '\000\xe6\x88\x91\xe5\x90\x83 \xff\xfe invalid \xc3' > "$tok/bpe-utf8"
printf '\001a ab  \n<bos> \xe4\xb8\xad\xff' > "$tok/spm-text"
printf '\002\001ab\n\001abc\n\003<s>\n-\na b\nab c\n\377ab abc <s>' > "$tok/hostile-bpe"
printf '\003\003<bos>\n\001a\n\001b\n\001ab\n\006<0x41>\n\004  \n\377a  b ab A' > "$tok/hostile-spm"
