#!/usr/bin/env python3
"""Summary of dev/sm90/ab_sweep.sh: the library default before / after (alternating processes,
passes a and b) per shape with the ratio of the means, then the best candidates per shape."""
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


def main(out):
    out = Path(out)
    runs = {name: read(out / f"{name}.log") for name in ("old_a", "new_a", "old_b", "new_b")}
    shapes = [s for (v, s) in runs["old_a"] if v == "default"]
    print("| shape | old a | old b | new a | new b | new / old |")
    print("|---|---|---|---|---|---|")
    ratios = []
    for shape in shapes:
        vals = [runs[n].get(("default", shape)) for n in ("old_a", "old_b", "new_a", "new_b")]
        if None in vals:
            continue
        ratio = (vals[2] + vals[3]) / (vals[0] + vals[1])
        ratios.append(ratio)
        print(f"| {shape} | " + " | ".join(f"{v:.0f}" for v in vals) + f" | {ratio:.3f} |")
    if ratios:
        geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        print(f"\ngeometric mean new / old over {len(ratios)} shapes: {geo:.3f}")
    sweep = out / "sweep.log"
    if sweep.exists():
        text = sweep.read_text()
        if "=== summary" in text:
            print("\n" + "\n".join(l[:300] for l in text[text.index("=== summary"):].splitlines()))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
