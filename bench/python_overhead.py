"""The cost of calling attn from Python, beside the same call from C
(bench/sdpa_call_time.c), for docs/python.md.

    python bench/python_overhead.py L H D [threads [runs]]     (attn installed)

q = k = v [1, L, H, D] float32 (S = L), causal off, one thread by default.
Prints the fastest and the median of `runs` calls, in microseconds, of:
  _core.sdpa_forward   the extension alone (buffers parsed, GIL released)
  attn.sdpa            numpy in, numpy out (views, output allocated)
  attn.sdpa (torch)    torch tensors in and out
  attn.torch drop-in   scaled_dot_product_attention, [1, H, L, D] views
  torch's own SDPA     for scale, when torch is installed
"""

import sys
import time

import numpy as np

import attn
from attn import _core


def timed(fn, runs):
    fn()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e6)
    times.sort()
    return times[0], times[len(times) // 2]


def main():
    l, h, d = (int(x) for x in sys.argv[1:4])
    threads = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    runs = int(sys.argv[5]) if len(sys.argv) > 5 else 200
    q = np.random.default_rng(0).standard_normal((1, l, h, d)).astype(np.float32)
    out = np.empty_like(q)
    rows = {
        "_core.sdpa_forward": lambda: _core.sdpa_forward((q, 0), (q, 0), (q, 0), (out, 0), threads=threads),
        "attn.sdpa": lambda: attn.sdpa(q, q, q, threads=threads),
    }
    try:
        import torch

        import attn.torch as at

        torch.set_num_threads(threads)
        t = torch.from_numpy(q)
        tb = t.transpose(1, 2)
        rows["attn.sdpa (torch)"] = lambda: attn.sdpa(t, t, t, threads=threads)
        rows["attn.torch drop-in"] = lambda: at.scaled_dot_product_attention(tb, tb, tb)
        rows["torch's own SDPA"] = lambda: torch.nn.functional.scaled_dot_product_attention(tb, tb, tb)
    except ImportError:
        pass
    for name, fn in rows.items():
        best, median = timed(fn, runs)
        print(f"{name:20s} L={l} H={h} D={d} threads={threads}: min {best:9.1f} us, median {median:9.1f} us")


if __name__ == "__main__":
    main()
