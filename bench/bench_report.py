#!/usr/bin/env python3
"""bench_report.py: Markdown tables for BENCHMARKS.md from `attn bench --csv`
(and, optionally, bench/torch_sdpa.py --csv on the same shapes).

usage: bench/bench_report.py ATTN.csv [TORCH.csv] > tables.md

Standard library only.  Percentages are recomputed against the larger of the
two FMA peaks the run measured (fma_peak at the start, fma_peak_end at the
end): on a shared machine the smaller one was taken under load, and a
percentage of it overstates the kernel.
"""
import csv
import math
import sys


def read_rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def num(text):
    return float(text) if text not in ("", None) else None


def fmt(x, spec, empty="-"):
    return empty if x is None else spec % x


def mib(x):
    if x is None:
        return "-"
    return "%.1f KiB" % (x / 1024) if x < 1 << 20 else "%.1f MiB" % (x / (1 << 20)) if x < 1 << 30 \
        else "%.2f GiB" % (x / (1 << 30))


def main(argv):
    if len(argv) not in (2, 3):
        print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
        return 2
    rows = read_rows(argv[1])
    torch = {r["name"]: r for r in read_rows(argv[2])} if len(argv) == 3 else {}
    machine = {r["name"]: r for r in rows if r["section"] == "machine"}
    peaks = [num(machine[n]["gflops"]) for n in ("fma_peak", "fma_peak_end") if n in machine]
    peak = max(p for p in peaks if p)
    bw = num(machine["triad"]["gbps"])
    threads = machine["fma_peak"]["threads"]

    def part(name, column):
        return " (%s threads at once %.1f, one thread %.1f)" % (
            threads, num(machine[name + "_threads"][column]), num(machine[name + "_1thread"][column])) \
            if name + "_threads" in machine else ""

    print("| machine | measured |\n|---|---|")
    print("| FP32 FMA peak, start of run (%s, %s threads) | %.1f GFLOP/s%s |" % (
        machine["fma_peak"]["isa"], threads, num(machine["fma_peak"]["gflops"]), part("fma_peak", "gflops")))
    if "fma_peak_end" in machine:
        print("| FP32 FMA peak, end of run | %.1f GFLOP/s |" % num(machine["fma_peak_end"]["gflops"]))
    print("| STREAM triad (3 x 256 MiB, STREAM byte count) | %.1f GB/s%s |" % (bw, part("triad", "gbps")))
    if "read" in machine:
        print("| read bandwidth (a sum over 1 GiB), start of run | %.1f GB/s%s |" % (
            num(machine["read"]["gbps"]), part("read", "gbps")))
    if "read_end" in machine:
        print("| read bandwidth, end of run | %.1f GB/s |" % num(machine["read_end"]["gbps"]))
    print("\n%%peak below is of %.1f GFLOP/s, the larger of the two peaks; %%bw of %.1f GB/s.\n" % (peak, bw))

    def kernel_rows(section):
        return [r for r in rows if r["section"] == section and r["status"] != "skipped"]

    def speedup(r):
        t = torch.get(r["name"])
        if not t or r["kernel"] != "flash" or r["status"] != "ok":
            return None
        return num(t["median_ms"]) / num(r["median_ms"])

    print("### prefill (B=1, Hq=16, L=S, fp32)\n")
    head = "| shape | kernel | isa | thr | median ms | GFLOP/s | %peak | extra mem |"
    rule = "|---|---|---|---|---|---|---|---|"
    if torch:
        head += " torch ms | torch GFLOP/s | speedup |"
        rule += "---|---|---|"
    print(head + "\n" + rule)
    for r in kernel_rows("prefill"):
        line = "| %s | %s | %s | %s | %s | %s | %s | %s |" % (
            r["name"].replace("prefill ", ""), r["kernel"], r["isa"], r["threads"],
            fmt(num(r["median_ms"]), "%.1f", r["status"]), fmt(num(r["gflops"]), "%.1f"),
            fmt(num(r["gflops"]) and 100 * num(r["gflops"]) / peak, "%.0f%%"),
            mib(num(r["workspace_bytes"])))
        if torch:
            t = torch.get(r["name"]) if r["kernel"] == "flash" else None
            line += " %s | %s | %s |" % (fmt(t and num(t["median_ms"]), "%.1f"),
                                         fmt(t and num(t["gflops"]), "%.1f"), fmt(speedup(r), "%.2fx"))
        print(line)

    if torch:
        ratios = [speedup(r) for r in kernel_rows("prefill") if speedup(r)]
        if ratios:
            geomean = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
            print("\nspeedup = torch ms / flash ms; geometric mean over %d prefill rows: %.2fx "
                  "(range %.2fx to %.2fx)." % (len(ratios), geomean, min(ratios), max(ratios)))

    print("\n### decode (B=1, L=1, Hq=16, Hkv=8, D=128, causal-lower-right)\n")
    head = "| shape | kernel | isa | thr | median ms | GB/s | %bw | extra mem |"
    rule = "|---|---|---|---|---|---|---|---|"
    if torch:
        head += " torch ms | torch GB/s | speedup |"
        rule += "---|---|---|"
    print(head + "\n" + rule)
    for r in kernel_rows("decode"):
        line = "| %s | %s | %s | %s | %s | %s | %s | %s |" % (
            r["name"].replace("decode ", ""), r["kernel"], r["isa"], r["threads"],
            fmt(num(r["median_ms"]), "%.2f", r["status"]), fmt(num(r["gbps"]), "%.2f"),
            fmt(num(r["gbps"]) and 100 * num(r["gbps"]) / bw, "%.0f%%"), mib(num(r["workspace_bytes"])))
        if torch:
            t = torch.get(r["name"]) if r["kernel"] == "flash" else None
            line += " %s | %s | %s |" % (fmt(t and num(t["median_ms"]), "%.2f"),
                                         fmt(t and num(t["gbps"]), "%.2f"), fmt(speedup(r), "%.2fx"))
        print(line)

    longs = kernel_rows("long")
    if longs:
        print("\n### long (L=S=65536, one head, D=128, causal)\n")
        print("| kernel | isa | thr | median s | GFLOP/s | %peak | extra mem | peak RSS | q+k+v+out | RSS / (q+k+v+out) |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for r in longs:
            rss, io = num(r["peak_rss_bytes"]), num(r["io_bytes"])
            print("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                r["kernel"], r["isa"], r["threads"], fmt(num(r["median_ms"]) and num(r["median_ms"]) / 1e3, "%.2f", r["status"]),
                fmt(num(r["gflops"]), "%.1f"), fmt(num(r["gflops"]) and 100 * num(r["gflops"]) / peak, "%.0f%%"),
                mib(num(r["workspace_bytes"])), mib(rss), mib(io), fmt(rss and io and rss / io, "%.2f")))

    scaling = [r for r in rows if r["section"] == "scaling"]
    if scaling:
        print("\n### scaling (L=S=n, one head, D=64, full): time and memory against n\n")
        print("| n | cells | x cells | ref ms | x | flash ms | x | ref table | flash extra | q+k+v+out |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        by_n = {}
        for r in scaling:
            by_n.setdefault(int(r["L"]), {})[r["kernel"]] = r
        prev = None
        for n in sorted(by_n):
            cur = by_n[n]

            def ms(kernel, table):
                r = table.get(kernel) if table else None
                return num(r["median_ms"]) if r and r["status"] == "ok" else None

            def ratio(kernel):
                a, b = ms(kernel, cur), ms(kernel, prev)
                return a / b if a and b else None
            any_row = next(iter(cur.values()))
            ref, flash = cur.get("ref"), cur.get("flash")
            print("| %d | %d | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                n, n * n, fmt(prev and (n * n) / (int(next(iter(prev.values()))["L"]) ** 2), "%.0f", ""),
                fmt(ms("ref", cur), "%.2f", ref["status"] if ref else "-"), fmt(ratio("ref"), "%.1f", ""),
                fmt(ms("flash", cur), "%.2f", flash["status"] if flash else "-"), fmt(ratio("flash"), "%.1f", ""),
                mib(num(ref["workspace_bytes"]) if ref else None),
                mib(num(flash["workspace_bytes"]) if flash and flash["status"] == "ok" else None),
                mib(num(any_row["io_bytes"]))))
            prev = cur
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
