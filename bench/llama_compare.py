#!/usr/bin/env python3
"""llama_compare.py: the measuring and the tables of bench/llama_compare.sh.

usage: bench/llama_compare.py run --raw RAW.csv --engine ENGINE --kind attn|llama
                                  --model M --threads T --round R --test NAME -- CMD...
       bench/llama_compare.py summary RAW.csv [--csv OUT.csv]

run      runs CMD (one `attn model bench --csv` or `llama-bench -o csv` process,
         one test, one repetition), its stdout into RAW.csv's folder, and
         appends a row to RAW.csv: the tokens/s the program printed (attn:
         median_tps; llama-bench: avg_ts), the process's peak resident memory
         and its wall time.  The memory is /usr/bin/time's %M (ru_maxrss),
         else wait4's: a child's ru_maxrss counts the image it was forked
         from, about 1 MiB of /usr/bin/time's but 15 MiB of this script's.  Test "start" is a process
         that loads the model and decodes one token: its wall time is the
         figure.  Exits with CMD's status (128 + the signal when one ended it).
summary  prints, per model and thread count, a Markdown table of the medians
         over the rounds with their spread (min-max) and the ratios of attn to
         each llama.cpp variant; --csv writes the same figures one row each.

Standard library only.
"""
import csv
import os
import statistics
import subprocess
import sys
import time

RAW_FIELDS = ["engine", "model", "threads", "round", "test", "tokens_per_s", "wall_s", "peak_rss_bytes",
              "status", "note"]


def parse_options(args, names):
    """--name value pairs up to "--" (or the end): a dict, and what follows "--"."""
    opts, i = {}, 0
    while i < len(args) and args[i] != "--":
        if not args[i].startswith("--") or args[i][2:] not in names or i + 1 >= len(args):
            sys.exit("llama_compare.py: unexpected argument '%s'" % args[i])
        opts[args[i][2:]] = args[i + 1]
        i += 2
    missing = [n for n in names if n not in opts and n != "csv"]
    if missing:
        sys.exit("llama_compare.py: missing --%s" % missing[0])
    return opts, args[i + 1:]


def tokens_per_s(kind, text):
    """The last row's tokens/s of the program's CSV output, or None."""
    rows = list(csv.DictReader(line for line in text.splitlines() if line.strip()))
    if not rows:
        return None
    value = rows[-1].get("median_tps" if kind == "attn" else "avg_ts")
    return float(value) if value not in (None, "") else None


def run(args):
    opts, cmd = parse_options(args, ["raw", "engine", "kind", "model", "threads", "round", "test"])
    if not cmd:
        sys.exit("llama_compare.py: run needs the command after --")
    folder = os.path.dirname(os.path.abspath(opts["raw"]))
    stem = "%s-%s-t%s-r%s-%s" % (opts["engine"].replace(" ", "_"), os.path.basename(opts["model"]),
                                  opts["threads"], opts["round"], opts["test"])
    rss_file = os.path.join(folder, stem + ".rss")
    timed = os.access("/usr/bin/time", os.X_OK)
    if timed:
        cmd = ["/usr/bin/time", "-f", "%M", "-o", rss_file] + cmd
    with open(os.path.join(folder, stem + ".out"), "w+") as out, \
            open(os.path.join(folder, stem + ".err"), "w") as err:
        start = time.monotonic()
        child = subprocess.Popen(cmd, stdout=out, stderr=err)
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.monotonic() - start
        child.returncode = 0  # reaped above
        out.seek(0)
        text = out.read()
    code = os.waitstatus_to_exitcode(status)
    code = 128 - code if code < 0 else code  # /usr/bin/time exits with 128 + the signal itself
    peak_kib = usage.ru_maxrss
    if timed:
        with open(rss_file) as f:
            lines = f.read().split()
        peak_kib = int(lines[-1]) if lines and lines[-1].isdigit() else peak_kib
    value = None
    if code == 0:
        value = wall if opts["test"] == "start" else tokens_per_s(opts["kind"], text)
        if value is None:
            code = 1
    note = "" if code == 0 else ("signal %d" % (code - 128) if code > 128 else "exit %d" % code)
    new = not os.path.exists(opts["raw"])
    with open(opts["raw"], "a", newline="") as f:
        w = csv.writer(f)
        if new:
            w.writerow(RAW_FIELDS)
        w.writerow([opts["engine"], opts["model"], opts["threads"], opts["round"], opts["test"],
                    "" if value is None or opts["test"] == "start" else "%.3f" % value, "%.3f" % wall,
                    peak_kib * 1024, code, note])
    shown = "failed (%s; %s)" % (note, os.path.join(folder, stem + ".err")) if code else \
        "%.3f s" % value if opts["test"] == "start" else "%.2f t/s" % value
    print("  round %s  %-14s %-22s %s, peak RSS %.0f MiB" % (opts["round"], opts["test"], opts["engine"], shown,
                                                              peak_kib / 1024.0), flush=True)
    return code


def spread(values, fmt):
    if not values:
        return "-"
    return (fmt + " (" + fmt + "–" + fmt + ")") % (statistics.median(values), min(values), max(values)) \
        if len(values) > 1 else fmt % values[0]


def summary(args):
    if not args:
        sys.exit("llama_compare.py: summary needs RAW.csv")
    raw = args[0]
    opts, _ = parse_options(args[1:], ["csv"])
    with open(raw, newline="") as f:
        rows = [r for r in csv.DictReader(f)]
    engines = list(dict.fromkeys(r["engine"] for r in rows))
    ours = [e for e in engines if e == "attn" or e.startswith("attn ")]  # "attn", "attn fast"
    peers = [e for e in engines if e not in ours]
    blocks = list(dict.fromkeys((r["model"], r["threads"]) for r in rows))
    tests = list(dict.fromkeys(r["test"] for r in rows))
    out_rows = []
    for model, threads in blocks:
        mine = [r for r in rows if r["model"] == model and r["threads"] == threads]
        rounds = len(set(r["round"] for r in mine))
        print("\n%s, %s thread%s, %d round%s: tokens/s median (min–max); start: seconds from exec to the first "
              "decoded token; peak RSS: median MiB" % (os.path.basename(model), threads, "" if threads == "1" else "s",
                                                       rounds, "" if rounds == 1 else "s"))
        head = (["test"] + engines + ["%s ÷ %s" % (a, p) for a in ours for p in peers] +
                ["peak RSS MiB " + " / ".join(engines)])
        print("\n| " + " | ".join(head) + " |\n|" + "---|" * len(head))
        for test in tests:
            cells, medians, rss = [test], {}, []
            for e in engines:
                got = [r for r in mine if r["engine"] == e and r["test"] == test]
                ok = [r for r in got if r["status"] == "0"]
                key = "wall_s" if test == "start" else "tokens_per_s"
                values = [float(r[key]) for r in ok]
                failed = len(got) - len(ok)
                cell = spread(values, "%.3f" if test == "start" else "%.2f")
                cells.append(cell + (" [%d failed: %s]" % (failed, got[-1]["note"]) if failed else ""))
                medians[e] = statistics.median(values) if values else None
                rss_e = statistics.median([float(r["peak_rss_bytes"]) / 1048576 for r in ok]) if ok else None
                rss.append("-" if rss_e is None else "%.0f" % rss_e)
                if got:
                    out_rows.append([model, threads, test, e, len(values), failed,
                                     "" if not values else "%.4g" % statistics.median(values),
                                     "" if not values else "%.4g" % min(values),
                                     "" if not values else "%.4g" % max(values),
                                     "s" if test == "start" else "tokens/s", "" if rss_e is None else "%.1f" % rss_e])
            for mine_e in ours:
                for p in peers:
                    a, b = medians.get(mine_e), medians.get(p)
                    if a and b:
                        # > 1: attn is faster (for start, the time: b / a)
                        cells.append("%.2f×" % (b / a if test == "start" else a / b))
                    else:
                        cells.append("-")
            cells.append(" / ".join(rss))
            print("| " + " | ".join(cells) + " |")
    print("\nattn ÷ peer: attn's median over the peer's (tokens/s; for start, the peer's time over attn's): > 1 "
          "means attn is faster.")
    if "csv" in opts:
        with open(opts["csv"], "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["model", "threads", "test", "engine", "rounds", "failed", "median", "min", "max", "unit",
                        "peak_rss_mib_median"])
            w.writerows(out_rows)
        print("summary CSV: %s" % opts["csv"])
    return 0


def main(argv):
    if len(argv) < 2 or argv[1] not in ("run", "summary"):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    return run(argv[2:]) if argv[1] == "run" else summary(argv[2:])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
