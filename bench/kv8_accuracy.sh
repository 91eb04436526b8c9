#!/usr/bin/env bash
# kv8_accuracy.sh — 8-bit KV caches (q8_0, fp8) on a real model: attention
# error on recorded activations, next-token KL and top-1 agreement, greedy
# agreement, against the f32 and bf16 caches (bench/kv8_accuracy.c says
# what each figure is; docs/cache.md, "8-bit caches", has the results).
#
# usage: bench/kv8_accuracy.sh BUILD MODEL.gguf [TEXTS [MAX_TOKENS [GREEDY [PROMPT]]]]
#   TEXTS (default bench/kv8_texts_en.txt): one text per line. That file
#   holds 60 paragraphs of 200+ characters from the project's docs/*.md and
#   README.md as they stood on 2026-12-05 (technical English with code),
#   one a line: kept in a file, not made from the docs each run, so that
#   the figures in docs/cache.md stay comparable as the docs change.
#   bench/kv8_texts_zh.txt holds 50 Chinese paragraphs (everyday prose and
#   technical text, written for this measurement), one a line.
# On a shared host run it with ATTN_NUM_THREADS=1: two OpenMP threads on
# two busy cores wait on each other at every barrier (a 3-text run took
# 44 s with 2 threads, 8 s with 1); the figures are the same bits.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:?usage: $0 BUILD MODEL.gguf [TEXTS [MAX_TOKENS [GREEDY [PROMPT]]]]}"
model="${2:?usage: $0 BUILD MODEL.gguf [TEXTS ...]}"
texts="${3:-}"
shift 3 2>/dev/null || shift $#
texts="${texts:-$root/bench/kv8_texts_en.txt}"
bin="$build/kv8_accuracy"
cc -O2 -fopenmp -I "$root/include" -I "$build/include" "$root/bench/kv8_accuracy.c" \
   "$build/libattn_model.a" "$build/libattn.a" $(pkg-config --libs libpcre2-8 openblas) $(pkg-config --libs libcjson 2>/dev/null) -lm -o "$bin"
exec "$bin" "$model" "$texts" "$@"
