#!/usr/bin/env python3
"""Summary of dev/sm90/ab_sweep.sh and abc_timing.sh: the library default of each build
(alternating processes, passes a and b) per shape with the ratio of its mean to the first
build's, then the best candidates per shape (ab_sweep.sh). Builds: old new unless named after
the log folder."""
import math
import re
import sys
from pathlib import Path

LINE = re.compile(r"^time \[(?P<variant>[^\]]+)\] (?P<shape>.+?): median .* = (?P<tflops>[\d.]+) TFLOPS \(min")


def read(path):
    rows = {}
    if not path.exists():
        return rows
    for line in path.read_text().splitlines():
        m = LINE.match(line)
        if m:
            rows[(m["variant"], m["shape"])] = float(m["tflops"])
    return rows


def main(out, builds):
    """builds: the log names, the first the baseline (old / new by default)."""
    out = Path(out)
    runs = {f"{b}_{p}": read(out / f"{b}_{p}.log") for b in builds for p in "ab"}
    base = builds[0]
    shapes = [s for (v, s) in runs[f"{base}_a"] if v == "default"]
    cols = [f"{b} {p}" for b in builds for p in "ab"]
    ratio_cols = [f"{b} / {base}" for b in builds[1:]]
    print("| shape | " + " | ".join(cols + ratio_cols) + " |")
    print("|---" * (1 + len(cols) + len(ratio_cols)) + "|")
    ratios = {b: [] for b in builds[1:]}
    for shape in shapes:
        vals = [runs[f"{b}_{p}"].get(("default", shape)) for b in builds for p in "ab"]
        if None in vals:
            continue
        means = {b: (vals[2 * i] + vals[2 * i + 1]) for i, b in enumerate(builds)}
        row = [means[b] / means[base] for b in builds[1:]]
        for b, r in zip(builds[1:], row):
            ratios[b].append(r)
        print(f"| {shape} | " + " | ".join(f"{v:.0f}" for v in vals) + " | " +
              " | ".join(f"{r:.3f}" for r in row) + " |")
    for b, rs in ratios.items():
        if rs:
            geo = math.exp(sum(math.log(r) for r in rs) / len(rs))
            print(f"\ngeometric mean {b} / {base} over {len(rs)} shapes: {geo:.3f}")
    sweep = out / "sweep.log"
    if sweep.exists():
        text = sweep.read_text()
        if "=== summary" in text:
            print("\n" + "\n".join(l[:300] for l in text[text.index("=== summary"):].splitlines()))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".", sys.argv[2:] or ["old", "new"])
