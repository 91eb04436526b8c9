#!/bin/sh
# scripts/profile.sh — where a run's time goes, by phase of the attention
# (Q·Kᵀ, softmax, P·V, packing and copies, merging) and of the process
# around it (reading, writing, page faults, threads), from a sampling
# profile that needs no hardware counters: perf's cpu-clock software event
# (it works in a VM, where `cycles` often does not exist).
#
# usage: scripts/profile.sh [-o DIR] [-F HZ] [-g] [--] [COMMAND ...]
#   COMMAND   what to profile (default: the kernel alone, one bench row:
#             build/attn bench --threads 2 --kernel flash
#                              --filter 'prefill L=4096 Hkv=16 D=128 full')
#   -o DIR    where perf.data, flat.txt and phases.txt go (default /tmp/attn-profile)
#   -F HZ     samples per second per CPU (default 999)
#   -g        record call graphs too (DWARF unwinding: big files; needs a
#             build with -g, e.g. RelWithDebInfo) for `perf report -G`
#   ATTN=path the attn binary of the default command (default build/attn)
#
# Prints the phase table (phases.txt): each phase's share of the samples of
# the whole process, all threads, and the symbols it holds.  Symbols are
# mapped by name (the table in this script): a micro-kernel inlined into its
# caller is counted where it was inlined; docs/kernels.md, "How to
# profile", says which.  Symbols the table does not know are listed under
# "other": add them to the table when a kernel gains a function.
# Needs perf (Debian: linux-perf) and permission to use it
# (/proc/sys/kernel/perf_event_paranoid <= 1, or root).
set -eu

out=/tmp/attn-profile
hz=999
graph=""
while [ $# -gt 0 ]; do
    case "$1" in
    -o) out="$2"; shift 2 ;;
    -F) hz="$2"; shift 2 ;;
    -g) graph="--call-graph dwarf,16384"; shift ;;
    -h|--help) sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    --) shift; break ;;
    *) break ;;
    esac
done
command -v perf >/dev/null 2>&1 || { echo "profile.sh: perf is not installed (Debian: apt-get install linux-perf)" >&2; exit 2; }
if [ $# -eq 0 ]; then
    attn="${ATTN:-build/attn}"
    [ -x "$attn" ] || { echo "profile.sh: $attn not found: build it, or set ATTN=path/to/attn" >&2; exit 2; }
    set -- "$attn" bench --threads 2 --kernel flash --filter 'prefill L=4096 Hkv=16 D=128 full'
fi
mkdir -p "$out"
# shellcheck disable=SC2086
perf record -q -e cpu-clock -F "$hz" $graph -o "$out/perf.data" -- "$@" >"$out/run.txt" 2>&1 || {
    echo "profile.sh: the profiled command failed (its output: $out/run.txt)" >&2; exit 1; }
perf report -i "$out/perf.data" --no-children --sort dso,sym --stdio 2>/dev/null |
    awk '/^ *[0-9.]+%/ && $2 != "" { print }' >"$out/flat.txt"

# The phase of a symbol: first matching pattern wins (awk regular
# expressions over "dso [k|.] symbol").
awk '
function phase(dso, sym) {
    if (sym ~ /qk_tile|qk_rows|simd_gemm/) return "1 Q.K^T (score tiles)"
    if (sym ~ /softmax|exp2|probs_|softcap|mask_scores|mask_tile|check_scores|row_normaliser/) return "2 softmax (exp, max, sum, masks)"
    if (sym ~ /pv_tile|pv_rows|p_ds/) return "3 P.V (value tiles)"
    if (sym ~ /pack_|copy_keys|copy_rows|transpose_tile|simd_widen|simd_narrow|memmove|memcpy/ && dso !~ /kernel/) return "4 packing and copies"
    if (sym ~ /unit_finish|unit_merge|item_run|acc_at|merge/) return "5 merging and finishing rows"
    if (sym ~ /item_accumulate|unit_accumulate|unit_begin|rows_scores|rows_values|subtile|value_row_finite|drop_nonfinite|all_finite|chunk_work|run_item|flash_forward|flash_backward/) return "6 loop nests (bookkeeping, finiteness of tiles)"
    if (sym ~ /peak_chunk|peak_window|attn_measure_|sum_words/) return "7 bench: machine probes (peak, bandwidth)"
    if (dso ~ /libgomp/) return "8 threads: OpenMP (barriers, spinning, start)"
    if (dso ~ /kernel/ && sym ~ /copy|movs/) return "9 system: copies (read into buffers, write into the page cache)"
    if (dso ~ /kernel/ && sym ~ /fault|clear_page|pte|anon|huge|folio|alloc|rmap|charge|lru|zap|unmap|free_/) return "10 system: page faults, allocation, freeing"
    if (dso ~ /kernel/) return "11 system: other (file system, scheduler, interrupts)"
    if (sym ~ /cli_load|nonfinite|not_finite|npy|to_native|read_data|read_range/) return "12 loading and checking inputs (.npy, finiteness)"
    return "13 other"
}
{
    pct = $1; sub(/%/, "", pct)
    dso = $2
    sym = $0; sub(/^ *[0-9.]+% +[^ ]+ +\[[.k]\] /, "", sym)
    p = phase(dso, sym)
    share[p] += pct
    if (dso ~ /libgomp/ && sym ~ /^0x/) sym = "(libgomp without symbols)"
    if (length(names[p]) < 160 && index(names[p], sym) == 0) names[p] = names[p] (names[p] == "" ? "" : ", ") sym
    total += pct
}
END {
    printf "%-62s %7s   %s\n", "phase", "share", "symbols (largest first)"
    n = 0
    for (p in share) keys[++n] = p
    # phases in their numbered order
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++)
        if ((keys[j] + 0) < (keys[i] + 0)) { t = keys[i]; keys[i] = keys[j]; keys[j] = t }
    for (i = 1; i <= n; i++) {
        label = keys[i]; sub(/^[0-9]+ /, "", label)
        printf "%-62s %6.1f%%   %s\n", label, share[keys[i]], names[keys[i]]
    }
    printf "%-62s %6.1f%%\n", "(sum of samples listed)", total
}' "$out/flat.txt" | tee "$out/phases.txt"
samples=$(perf report -i "$out/perf.data" --stdio 2>/dev/null | awk '/^# Samples:/ {print $3, $4, $5, $6, $7; exit}')
echo "(${samples:-samples} at $hz Hz; perf.data, flat.txt, phases.txt and the command's output in $out)"
