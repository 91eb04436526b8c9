#!/usr/bin/env bash
# compare.sh — attn's kernels beside PyTorch's CPU scaled_dot_product_attention
# on the prefill and decode shapes of `attn bench`, same threads, fp32.
#
# usage: bench/compare.sh [--quick] [--threads N] [--filter TEXT]
#
# environment:
#   ATTN_BIN      the attn program (default: build/attn, else build-bench/attn)
#   TORCH_PYTHON  a Python that can `import torch` (default: python3); PyTorch
#                 is never a dependency of attn: install it in a venv, e.g.
#                   python3 -m venv /opt/torch-venv && /opt/torch-venv/bin/pip install torch
#   COMPARE_DIR   where to keep the two CSV files (default: a temporary folder)
#   ATTN_CSV      an existing `attn bench --csv` file to use instead of running
#                 attn again (its thread count is used for PyTorch)
#
# The two programs take turns by groups of shapes (L=512, L=1024, ...,
# decode) so that both figures of a row meet about the same load; on a shared
# machine, still repeat the comparison before trusting a ratio near 1.
# speedup = torch median time / attn flash median time (> 1: attn is faster).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
base=()
filter=
quick=0
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) base+=(--quick); quick=1; shift ;;
    --threads|--filter)
      [ $# -ge 2 ] || { echo "compare.sh: $1 needs a value" >&2; exit 2; }
      if [ "$1" = --filter ]; then filter=$2; else base+=("$1" "$2"); fi
      shift 2 ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "compare.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done

attn=${ATTN_BIN:-}
if [ -z "$attn" ]; then
  for candidate in "$root/build/attn" "$root/build-bench/attn"; do
    [ -x "$candidate" ] && { attn=$candidate; break; }
  done
fi
python=${TORCH_PYTHON:-python3}
if ! "$python" -c "import torch" 2> /dev/null; then
  echo "compare.sh: '$python' cannot import torch; set TORCH_PYTHON to a Python that can" >&2
  exit 1
fi
dir=${COMPARE_DIR:-$(mktemp -d)}
mkdir -p "$dir"
: > "$dir/attn.raw"
: > "$dir/torch.raw"

# The two programs take turns, one group of shapes at a time, so that each
# pair of figures meets about the same load; one long run of each would put
# minutes between them.  Only prefill and decode rows have a PyTorch twin.
if [ -n "$filter" ]; then
  groups=("$filter")
elif [ -n "${ATTN_CSV:-}" ]; then
  groups=("prefill,decode")
elif [ "$quick" = 1 ]; then
  groups=("L=1024 " "L=4096 " "decode")
else
  groups=("L=512 " "L=1024 " "L=2048 " "L=4096 " "L=8192 " "decode")
fi
if [ -n "${ATTN_CSV:-}" ]; then
  cp "$ATTN_CSV" "$dir/attn.raw"
else
  [ -n "$attn" ] && [ -x "$attn" ] || { echo "compare.sh: no attn program; build it or set ATTN_BIN" >&2; exit 1; }
fi
for group in "${groups[@]}"; do
  [ -n "${ATTN_CSV:-}" ] || "$attn" bench --csv "${base[@]}" --filter "$group" >> "$dir/attn.raw"
  threads=$(awk -F, '$1 == "machine" && $2 == "fma_peak" { print $5; exit }' "$dir/attn.raw")
  torch_args=(--csv --threads "$threads" --filter "$group")
  [ "$quick" = 1 ] && torch_args+=(--quick)
  "$python" "$root/bench/torch_sdpa.py" "${torch_args[@]}" 2> /dev/null >> "$dir/torch.raw"
done

# One header; of the machine rows measured before each group, the best of
# each kind (the one least disturbed by other processes).
awk -F, 'NR == 1 { print } $1 == "section" { next }
         $1 == "machine" { col = ($2 ~ /^triad/) ? 17 : 15
                           if (!($2 in best) || $col + 0 > value[$2]) { best[$2] = $0; value[$2] = $col + 0 }
                           next }
         { rows[++n] = $0 }
         END { for (k in best) print best[k]; for (i = 1; i <= n; i++) print rows[i] }' "$dir/attn.raw" > "$dir/attn.csv"
awk -F, 'NR == 1 || $1 != "section"' "$dir/torch.raw" > "$dir/torch.csv"
peak=$(awk -F, '$1 == "machine" && $2 == "fma_peak" { print $15 }' "$dir/attn.csv")
bw=$(awk -F, '$1 == "machine" && $2 == "triad" { print $17 }' "$dir/attn.csv")

echo "attn vs PyTorch SDPA (CPU, fp32, $threads threads); FMA peak $peak GFLOP/s, triad $bw GB/s"
echo "csv: $dir/attn.csv $dir/torch.csv"
awk -F, '
  FNR == 1 { next }
  FILENAME ~ /attn.csv$/ && $3 == "flash" { attn_ms[$2] = $14; attn_gf[$2] = $15; attn_gb[$2] = $17; attn_st[$2] = $22; next }
  FILENAME ~ /torch.csv$/ {
    name[++n] = $2; torch_kernel[$2] = $3; torch_ms[$2] = $14; torch_gf[$2] = $15; torch_gb[$2] = $17
  }
  END {
    printf "%-34s %11s %8s %7s   %-12s %11s %8s %7s   %7s\n", "name", "attn ms", "GFLOP/s", "GB/s",
           "torch", "torch ms", "GFLOP/s", "GB/s", "speedup"
    for (i = 1; i <= n; i++) {
      r = name[i]
      if (attn_st[r] == "ok")
        printf "%-34s %11.3f %8.2f %7s   %-12s %11.3f %8.2f %7s   %6.2fx\n", r, attn_ms[r], attn_gf[r],
               attn_gb[r], torch_kernel[r], torch_ms[r], torch_gf[r], torch_gb[r], torch_ms[r] / attn_ms[r]
      else
        printf "%-34s %11s %8s %7s   %-12s %11.3f %8.2f %7s   %7s\n", r, "flash " (attn_st[r] == "" ? "n/a" : attn_st[r]),
               "", "", torch_kernel[r], torch_ms[r], torch_gf[r], torch_gb[r], "-"
    }
  }' "$dir/attn.csv" "$dir/torch.csv"
