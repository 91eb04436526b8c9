#!/usr/bin/env python3
"""A whole `attn sdpa` process against its kernel (issue 14).

Runs `attn sdpa -q q.npy -k k.npy -v v.npy -o o.npy --timing` at
L=S=4096, Hq=16, D=128, fp32 (Hkv=16 and 8) several times, interleaving
the builds given (A/B comparisons on a shared, noisy machine), and prints
per build and shape the median and the range of the process's wall time
(measured here, from fork to exit) and of each phase `--timing` reports.
The inputs are written once into --dir (standard library only: no numpy)
and read once before timing, so they are in the page cache.

With --bench, each repetition also runs the kernel alone, `attn bench
--csv` on the same row with the last binary, which measures the machine's
FMA peak in the same breath: the whole process and the kernel then meet
about the same load, and the whole process's % of peak is also given
against that run's peak.

usage: bench/sdpa_whole.py [--reps N] [--threads T] [--dir DIR] [--peak GFLOPS] [--bench] ATTN [ATTN ...]
"""
import argparse, resource, array, os, re, random, statistics, struct, subprocess, sys, time

L = S = 4096
HQ, D = 16, 128


def save_npy(path, shape, seed):
    if os.path.exists(path):
        return
    rng = random.Random(seed)
    n = 1
    for s in shape:
        n *= s
    a = array.array("f", (rng.uniform(-1.0, 1.0) for _ in range(n)))
    d = "{'descr': '<f4', 'fortran_order': False, 'shape': (%s), }" % ", ".join(map(str, shape))
    hdr = d + " " * (64 - (10 + len(d) + 1) % 64) + "\n"
    with open(path + ".part", "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(hdr)) + hdr.encode())
        a.tofile(f)
    os.replace(path + ".part", path)


def parse_timing(stderr):
    """--timing's table: 'phase  wall  pct%  cpu' rows and the total row."""
    phases = {}
    for line in stderr.splitlines():
        m = re.match(r"  (\S.*?)\s{2,}([\d.]+)\s+(?:[\d.]+%\s+)?([\d.]+)$", line)
        if m:
            phases[m.group(1)] = float(m.group(2))
            phases[m.group(1) + " (CPU)"] = float(m.group(3))
    return phases


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("attn", nargs="+", help="attn binaries to compare (interleaved)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dir", default="/tmp/attn-sdpa-whole")
    ap.add_argument("--peak", type=float, default=0, help="FMA peak in GFLOP/s (attn bench prints it)")
    ap.add_argument("--hkv", default="16,8")
    ap.add_argument("--bench", action="store_true", help="interleave attn bench's kernel-alone row")
    args = ap.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    p = lambda name: os.path.join(args.dir, name)
    save_npy(p("q.npy"), (L, HQ, D), 1)
    hkvs = [int(h) for h in args.hkv.split(",")]
    for h in hkvs:
        save_npy(p("k%d.npy" % h), (S, h, D), 2 + h)
        save_npy(p("v%d.npy" % h), (S, h, D), 3 + h)
    for name in os.listdir(args.dir):  # into the page cache
        with open(p(name), "rb") as f:
            while f.read(1 << 24):
                pass
    flops = 4.0 * HQ * L * S * D
    results = {}  # (binary, hkv) -> list of phase dicts
    kernels = {}  # hkv -> list of attn bench rows (peak, ms, pct)
    for rep in range(args.reps):
        for h in hkvs:
            for b in args.attn:
                cmd = [b, "sdpa", "-q", p("q.npy"), "-k", p("k%d.npy" % h), "-v", p("v%d.npy" % h),
                       "-o", p("o.npy"), "--threads", str(args.threads), "--timing", "--quiet"]
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                t0 = time.perf_counter()
                r = subprocess.run(cmd, stderr=subprocess.PIPE, text=True)
                wall = time.perf_counter() - t0
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
                if r.returncode != 0:
                    sys.exit("failed: %s\n%s" % (" ".join(cmd), r.stderr))
                ph = parse_timing(r.stderr)
                ph["process wall"] = 1e3 * wall
                ph["process wall (CPU)"] = 1e3 * cpu
                ph["outside the command (start, exit)"] = 1e3 * wall - ph.get("total in the command", 0)
                results.setdefault((b, h), []).append(ph)
            if args.bench:
                cmd = [args.attn[-1], "bench", "--csv", "--threads", str(args.threads), "--kernel", "flash",
                       "--filter", "prefill L=4096 Hkv=%d D=128 full" % h]
                r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
                row = {}
                for line in r.stdout.splitlines():
                    f = line.split(",")
                    if len(f) > 16 and f[0] == "machine" and f[1] == "fma_peak":
                        row["peak"] = float(f[14])
                    if len(f) > 16 and f[0] == "prefill" and f[1] == "prefill L=4096 Hkv=%d D=128 full" % h:
                        row["ms"], row["pct"] = float(f[13]), float(f[15])
                if "ms" in row:
                    kernels.setdefault(h, []).append(row)
    for (b, h), runs in results.items():
        print("%s  Hkv=%d  (%d runs; median [min, max] ms)" % (b, h, len(runs)))
        names = []
        for ph in runs:
            names += [n for n in ph if n not in names]
        for n in names:
            xs = [ph.get(n, 0.0) for ph in runs]
            print("  %-36s %9.1f  [%7.1f, %7.1f]" % (n, statistics.median(xs), min(xs), max(xs)))
        walls = [ph["process wall"] for ph in runs]
        kern = [ph.get("kernel (forward)", 0) for ph in runs]
        line = "  GFLOP/s whole process %.1f [%.1f, %.1f], kernel %.1f" % (
            flops / statistics.median(walls) / 1e6, flops / max(walls) / 1e6, flops / min(walls) / 1e6,
            flops / statistics.median(kern) / 1e6)
        if args.peak > 0:
            line += ";  %% of peak: whole process %.1f%% [%.1f, %.1f], kernel %.1f%%" % (
                100 * flops / statistics.median(walls) / 1e6 / args.peak,
                100 * flops / max(walls) / 1e6 / args.peak, 100 * flops / min(walls) / 1e6 / args.peak,
                100 * flops / statistics.median(kern) / 1e6 / args.peak)
        print(line)
        if h in kernels:
            ks = kernels[h]
            peaks = [k["peak"] for k in ks]
            whole = [100 * flops / (w / 1e3) / 1e9 / pk for w, pk in zip(walls, peaks)]
            print("  attn bench (kernel alone, %d runs): %.1f ms [%.1f, %.1f], %.1f%% of its peak [%.1f, %.1f]; "
                  "peak %.1f GFLOP/s [%.1f, %.1f]; whole process against the same runs' peaks %.1f%% [%.1f, %.1f]" % (
                      len(ks), statistics.median(k["ms"] for k in ks), min(k["ms"] for k in ks),
                      max(k["ms"] for k in ks), statistics.median(k["pct"] for k in ks),
                      min(k["pct"] for k in ks), max(k["pct"] for k in ks), statistics.median(peaks), min(peaks),
                      max(peaks), statistics.median(whole), min(whole), max(whole)))


if __name__ == "__main__":
    main()
