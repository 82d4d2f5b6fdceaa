#!/usr/bin/env python3
"""Summary of an A B run (tools/device/ab.sh): new / base speed per config, from the median over
passes of each side's median time, with the spread of each side between its own passes (the
noise the ratios must clear).

  python3 tools/device/ab_summary.py OUT_DIR        # prints markdown; exit 1 if a file is missing
"""
import glob
import json
import math
import os
import re
import statistics
import sys

KEY_FIELDS = ("batch", "seqlen_q", "seqlen_k", "heads_q", "heads_kv", "head_dim", "dtype", "causal")
# A config whose ratio falls below this in the summary is listed by name.
FLAG_BELOW = 0.98


def describe(key):
    b, sq, sk, hq, hkv, d, dtype, causal = key
    return f"b{b} sq{sq} sk{sk} h{hq}/{hkv} d{d} {dtype}{' causal' if causal else ''}"


def load(out_dir, group):
    """{side: {pass: {key: (median_ms, tflops)}}} of one group (grid or decode)."""
    runs = {}
    for path in glob.glob(os.path.join(out_dir, f"{group}_*_*.json")):
        match = re.match(rf"{group}_(base|new)_(\d+)\.json$", os.path.basename(path))
        if not match:
            continue
        side, npass = match.group(1), int(match.group(2))
        with open(path) as f:
            records = json.load(f)
        runs.setdefault(side, {})[npass] = {
            tuple(r[k] for k in KEY_FIELDS): (r["median_ms"], r["tflops"])
            for r in records if r.get("median_ms")}
    return runs


def geomean(values):
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def summarize(group, runs):
    if set(runs) != {"base", "new"}:
        return [f"## {group}: missing a side ({', '.join(sorted(runs)) or 'none'})"], False
    keys = sorted(set.intersection(*(set(p) for side in runs.values() for p in side.values())))
    lines = [f"## {group}: {len(keys)} configs, passes base {sorted(runs['base'])}, "
             f"new {sorted(runs['new'])}", "",
             "| config | base TFLOPS | new TFLOPS | new / base |", "|---|---|---|---|"]
    ratios, spreads = [], []
    for key in keys:
        med = {side: statistics.median(p[key][0] for p in runs[side].values()) for side in runs}
        tf = {side: statistics.median(p[key][1] for p in runs[side].values()) for side in runs}
        ratio = med["base"] / med["new"]
        ratios.append(ratio)
        for side in runs:  # the same build against itself between passes
            times = [p[key][0] for p in runs[side].values()]
            if len(times) > 1:
                spreads.append(max(times) / min(times))
        lines.append(f"| {describe(key)} | {tf['base']:.1f} | {tf['new']:.1f} | {ratio:.3f} |")
    low = [(r, describe(k)) for r, k in zip(ratios, keys) if r < FLAG_BELOW]
    lines += ["", f"geomean new / base {geomean(ratios):.4f}, lowest {min(ratios):.3f}, "
                  f"highest {max(ratios):.3f}; below {FLAG_BELOW}: {len(low)}"]
    if spreads:
        lines.append(f"same build between passes: median spread {statistics.median(spreads):.3f}, "
                     f"largest {max(spreads):.3f}")
    lines += [f"  below: {name} {r:.3f}" for r, name in sorted(low)]
    return lines, True


def main(argv):
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    ok = True
    for group in ("grid", "decode"):
        lines, complete = summarize(group, load(argv[1], group))
        ok = ok and complete
        print("\n".join(lines) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
