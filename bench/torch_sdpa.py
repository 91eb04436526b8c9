#!/usr/bin/env python3
"""torch_sdpa.py: PyTorch's CPU scaled_dot_product_attention on the shapes of
`attn bench` (prefill and decode), fp32, same thread count, same columns.

PyTorch is never a dependency of attn; install it in a virtual environment:
    python3 -m venv /opt/torch-venv && /opt/torch-venv/bin/pip install torch
and run this script with that interpreter (bench/compare.sh does, given
TORCH_PYTHON=/opt/torch-venv/bin/python).

Layout: PyTorch takes [B, H, L, D]; attn takes [B, L, H, D].  Each library
gets its own natural layout, so neither pays for a transpose.

Masks: `causal` rows use is_causal=True (top-left, as attn's `causal`).
Decode rows (L=1, causal-lower-right in attn) use is_causal=False: with one
query, lower-right causal hides nothing, while PyTorch's top-left is_causal
would hide every key but the first.

Timing: one warm-up call, then the median of enough calls to fill the
target time (within [min_runs, max_runs]), as attn bench does.  FLOPs count
visible query-key pairs: 4 * B * Hq * pairs * D.
"""
import argparse
import math
import statistics
import sys
import time

SLOW_SECONDS = 2.0  # a call slower than this gets 3 timed runs
CSV_HEADER = ("section,name,kernel,isa,threads,B,L,S,Hq,Hkv,D,mask,runs,median_ms,gflops,"
              "pct_peak,gbps,pct_bw,workspace_bytes,peak_rss_bytes,io_bytes,status")


def plan_cases(quick):
    """The prefill and decode shapes of `attn bench` (and their names)."""
    cases = []
    for length in ((1024, 4096) if quick else (512, 1024, 2048, 4096, 8192)):
        for hkv in ((16,) if quick and length > 1024 else (16, 8)):
            for dim in ((128,) if quick else (64, 128)):
                for causal in (False, True):
                    name = "prefill L=%d Hkv=%d D=%d %s" % (length, hkv, dim, "causal" if causal else "full")
                    cases.append(dict(section="prefill", name=name, L=length, S=length, Hq=16, Hkv=hkv,
                                      D=dim, mask="causal" if causal else "none"))
    for s in ((4096, 131072) if quick else (4096, 32768, 131072)):
        cases.append(dict(section="decode", name="decode S=%d" % s, L=1, S=s, Hq=16, Hkv=8, D=128,
                          mask="causal-lower-right"))
    return cases


def visible_pairs(c):
    if c["mask"] == "none":
        return c["L"] * c["S"]
    offset = c["S"] - c["L"] if c["mask"] == "causal-lower-right" else 0
    return sum(min(max(i + offset + 1, 0), c["S"]) for i in range(c["L"]))


def backend_name(torch, q, k, v, is_causal, gqa):
    """The SDPA backend PyTorch picks for these inputs (flash, math, ...)."""
    try:
        from torch.nn.attention import SDPBackend
        choice = torch._fused_sdp_choice(q, k, v, is_causal=is_causal, enable_gqa=gqa)
        for name in ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "MATH", "CUDNN_ATTENTION"):
            if int(getattr(SDPBackend, name)) == choice:
                return name.split("_")[0].lower()
    except (AttributeError, ImportError, RuntimeError, TypeError):
        pass
    return "default"


def time_case(torch, c, args):
    F = torch.nn.functional
    gen = torch.Generator().manual_seed(1)
    q = torch.rand(1, c["Hq"], c["L"], c["D"], generator=gen) * 2 - 1
    k = torch.rand(1, c["Hkv"], c["S"], c["D"], generator=gen) * 2 - 1
    v = torch.rand(1, c["Hkv"], c["S"], c["D"], generator=gen) * 2 - 1
    is_causal = c["mask"] == "causal"
    gqa = c["Hq"] != c["Hkv"]
    extra = {"enable_gqa": True} if gqa else {}
    with torch.inference_mode():
        start = time.perf_counter()
        F.scaled_dot_product_attention(q, k, v, is_causal=is_causal, **extra)
        warm = time.perf_counter() - start
        runs = max(args.min_runs, min(args.max_runs, math.ceil(args.target / max(warm, 1e-9))))
        if warm > SLOW_SECONDS:
            runs = 3  # as attn bench: a median of 3 long calls is steady enough
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            F.scaled_dot_product_attention(q, k, v, is_causal=is_causal, **extra)
            times.append(time.perf_counter() - start)
    return runs, statistics.median(times), backend_name(torch, q, k, v, is_causal, gqa)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="the shapes of attn bench --quick")
    parser.add_argument("--csv", action="store_true", help="machine-readable rows only")
    parser.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (default: torch's)")
    parser.add_argument("--filter", default="", help="only rows whose name contains TEXT (commas separate alternatives)")
    parser.add_argument("--peak-gflops", type=float, default=0.0,
                        help="FMA peak measured by attn bench, for the pct_peak column")
    parser.add_argument("--bw-gbps", type=float, default=0.0,
                        help="triad bandwidth measured by attn bench, for the pct_bw column")
    args = parser.parse_args()
    args.min_runs, args.max_runs, args.target = (3, 50, 0.3) if args.quick else (5, 200, 1.5)

    try:
        import torch
    except ImportError:
        print("torch_sdpa.py: PyTorch is not installed for %s" % sys.executable, file=sys.stderr)
        return 1
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    threads = torch.get_num_threads()
    isa = torch.backends.cpu.get_cpu_capability().lower()

    if args.csv:
        print(CSV_HEADER)
    else:
        print("torch %s scaled_dot_product_attention on CPU: %d threads, %s, fp32" % (
            torch.__version__, threads, isa))
        print("%-34s %-12s %4s %11s %8s %6s %6s %6s" % (
            "name", "backend", "runs", "median ms", "GFLOP/s", "%peak", "GB/s", "%bw"))
    for c in plan_cases(args.quick):
        if not any(piece in c["name"] for piece in args.filter.split(",")):
            continue
        runs, median, backend = time_case(torch, c, args)
        flops = 4.0 * c["Hq"] * visible_pairs(c) * c["D"]
        io_bytes = 4.0 * (2 * c["L"] * c["Hq"] * c["D"] + 2 * c["S"] * c["Hkv"] * c["D"])
        gflops, gbps = flops / median * 1e-9, io_bytes / median * 1e-9
        decode = c["section"] == "decode"
        pct_peak = 100.0 * gflops / args.peak_gflops if args.peak_gflops > 0 and not decode else None
        pct_bw = 100.0 * gbps / args.bw_gbps if args.bw_gbps > 0 and decode else None
        fmt = lambda x, spec: "" if x is None else spec % x
        if args.csv:
            print(",".join([c["section"], c["name"], "torch-" + backend, isa, str(threads), "1", str(c["L"]),
                            str(c["S"]), str(c["Hq"]), str(c["Hkv"]), str(c["D"]), c["mask"], str(runs),
                            "%.4f" % (median * 1e3), "%.3f" % gflops, fmt(pct_peak, "%.2f"),
                            fmt(gbps if decode else None, "%.3f"), fmt(pct_bw, "%.2f"), "", "",
                            "%.0f" % io_bytes, "ok"]))
        else:
            print("%-34s %-12s %4d %11.3f %8.2f %6s %6s %6s" % (
                c["name"], "torch-" + backend, runs, median * 1e3, gflops, fmt(pct_peak, "%.1f%%"),
                fmt(gbps if decode else None, "%.2f"), fmt(pct_bw, "%.1f%%")))
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
