#!/usr/bin/env python3
"""Summary of an A B run (tools/device/ab.sh): new / base speed per config, from the median over
passes of each side's median time, with the spread of each side between its own passes (the
noise the ratios must clear). Reads OUT_DIR/<grid>_<base|new>_<pass>/compare.json.

  python3 tools/device/ab_summary.py OUT_DIR GRID [GRID ...]   # markdown; exit 1 if one is missing
"""
import glob
import json
import math
import os
import re
import statistics
import sys

IMPL = "flashcore[sm90]"
# A config whose ratio falls below this in the summary is listed by name.
FLAG_BELOW = 0.98


def load(out_dir, group):
    """{side: {pass: {config: (median_ms, tflops)}}} of one grid; failed results are left out."""
    runs = {}
    for path in glob.glob(os.path.join(out_dir, f"{group}_*_*", "compare.json")):
        match = re.match(rf"{group}_(base|new)_(\d+)$", os.path.basename(os.path.dirname(path)))
        if not match:
            continue
        side, npass = match.group(1), int(match.group(2))
        with open(path) as f:
            records = json.load(f)["records"]
        results = {}
        for record in records:
            result = record["results"].get(IMPL, {})
            if result.get("status") == "ok" and result.get("median_ms"):
                results[record["config"]] = (result["median_ms"], result["tflops"])
        runs.setdefault(side, {})[npass] = results
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
        lines.append(f"| {key} | {tf['base']:.1f} | {tf['new']:.1f} | {ratio:.3f} |")
    if not keys:
        return lines + ["", "no config ran on both sides"], False
    low = [(r, k) for r, k in zip(ratios, keys) if r < FLAG_BELOW]
    lines += ["", f"geomean new / base {geomean(ratios):.4f}, lowest {min(ratios):.3f}, "
                  f"highest {max(ratios):.3f}; below {FLAG_BELOW}: {len(low)}"]
    if spreads:
        lines.append(f"same build between passes: median spread {statistics.median(spreads):.3f}, "
                     f"largest {max(spreads):.3f}")
    lines += [f"  below: {name} {r:.3f}" for r, name in sorted(low)]
    return lines, True


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    ok = True
    for group in argv[2:]:
        lines, complete = summarize(group, load(argv[1], group))
        ok = ok and complete
        print("\n".join(lines) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
