#!/usr/bin/env python3
"""TFLOPS against seqlen, one panel per head_dim, from a bench/compare.py JSON (standard grid).

    python3 bench/plot_compare.py results/compare.json out.png [--dtype bf16]

Solid lines are non-causal, dashed causal; one colour per implementation. Needs matplotlib
(not a dependency of the library or its tests).
"""
import argparse
import json

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

from compare_grids import STANDARD_HIDDEN, STANDARD_TOKENS  # noqa: E402


def standard_records(records, dtype):
    return [r for r in records if r["dtype"] == dtype and r["seqlen_q"] == r["seqlen_k"]
            and r["batch"] * r["seqlen_q"] == STANDARD_TOKENS
            and r["heads_q"] * r["head_dim"] == STANDARD_HIDDEN]


def tflops(record, implementation):
    result = record["results"].get(implementation) or {}
    return result.get("tflops")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("compare_json")
    parser.add_argument("png")
    parser.add_argument("--dtype", default="bf16")
    args = parser.parse_args()

    data = json.load(open(args.compare_json))
    meta, records = data["meta"], standard_records(data["records"], args.dtype)
    implementations = list(records[0]["results"].keys())
    head_dims = sorted({r["head_dim"] for r in records})
    figure, axes = plt.subplots(1, len(head_dims), figsize=(5 * len(head_dims), 4), sharey=True)
    for axis, head_dim in zip(axes, head_dims):
        for index, implementation in enumerate(implementations):
            for causal, style in ((False, "-"), (True, "--")):
                rows = sorted((r for r in records if r["head_dim"] == head_dim
                               and r["causal"] == causal), key=lambda r: r["seqlen_q"])
                points = [(r["seqlen_q"], tflops(r, implementation)) for r in rows]
                points = [(s, t) for s, t in points if t is not None]
                if points:
                    axis.plot(*zip(*points), style, marker="o", color=f"C{index}",
                              label=f"{implementation}{' causal' if causal else ''}")
        axis.set_xscale("log", base=2)
        axis.set_title(f"head_dim {head_dim}, {args.dtype}")
        axis.set_xlabel("seqlen (batch = 16384 / seqlen)")
        axis.grid(alpha=0.3)
    axes[0].set_ylabel("TFLOPS")
    axes[-1].legend(fontsize=7)
    figure.suptitle(f"{meta.get('device', '')}, commit {meta.get('commit', '?')}", fontsize=9)
    figure.tight_layout()
    figure.savefig(args.png, dpi=110)


if __name__ == "__main__":
    main()
