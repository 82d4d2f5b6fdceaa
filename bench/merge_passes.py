#!/usr/bin/env python3
"""One table from several passes of the same compare.py grid, each run as its own process at
its own time: per config and implementation every timed replay of every pass is pooled, and the
table's figure is their median. A single pass can meet a whole config in one clock regime (on an
H100, d128 8k non-causal read 0.905x FA3 in one pass and 0.992x in the next: docs/kernels.md,
run 190); pooled replays from passes minutes apart take the median over both.

    python3 bench/merge_passes.py OUT_DIR PASS_DIR [PASS_DIR ...]   # each holds compare.json

A result is ok only where it was ok in every pass; its errors are the largest over the passes,
its check passes only where every pass's did. The passes must hold the same configs and
implementations (the same grid and filters); the first pass's meta describes the run, with
`passes` listing each pass's commit and date. Writes OUT_DIR/compare.json and compare.md and
prints the table. Exit code 0, or 2 when the passes do not match.
"""
import json
import os
import statistics
import sys

import compare_report

# Per-result fields that are the largest over the passes (accuracy), not the first pass's.
WORST_OVER_PASSES = ("max_err_out", "max_err_lse")


def load(pass_dir):
    with open(os.path.join(pass_dir, "compare.json")) as f:
        return json.load(f)


def merge_result(results, flops):
    """One implementation's results of one config over the passes."""
    not_ok = [r for r in results if r.get("status") != "ok"]
    if not_ok:  # a pass that failed or could not run decides the cell
        return dict(not_ok[0])
    merged = dict(results[0])
    times = [t for r in results for t in r.get("times_ms", [])]
    if times:
        merged.update(median_ms=statistics.median(times), min_ms=min(times), iters=len(times),
                      times_ms=times, tflops=flops / (statistics.median(times) * 1e-3) / 1e12)
    for field in WORST_OVER_PASSES:
        values = [r[field] for r in results if r.get(field) is not None]
        if values:
            merged[field] = max(values)
    if any("pass" in r for r in results):
        merged["pass"] = all(r.get("pass", True) for r in results)
    return merged


def merge(passes):
    """(meta, records, flashcore_names) of the pooled run; ValueError where passes differ."""
    first = passes[0]
    configs = [r["config"] for r in first["records"]]
    for other in passes[1:]:
        if [r["config"] for r in other["records"]] != configs:
            raise ValueError("the passes hold different configs (same grid and filters?)")
    meta = dict(first["meta"])
    meta["passes"] = [{"commit": p["meta"].get("commit"), "date": p["meta"].get("date")}
                      for p in passes]
    flashcore_names = [n for n in meta.get("impls", []) if n.startswith("flashcore")]
    anchors = compare_report.anchors_of(meta, first["records"])
    records = []
    for index, record in enumerate(first["records"]):
        same = [p["records"][index] for p in passes]
        names = list(record["results"])
        if any(list(r["results"]) != names for r in same):
            raise ValueError(f"{record['config']}: the passes timed different implementations")
        # The config's fields, its reference's tolerances among them, are the first pass's:
        # compare.py seeds a config's inputs by its place in the grid, so every pass drew the same.
        merged = {k: v for k, v in record.items() if k not in ("results", "ratios")}
        merged["results"] = {name: merge_result([r["results"][name] for r in same],
                                                record["flops"]) for name in names}
        compare_report.add_ratios(merged, flashcore_names, anchors)
        records.append(merged)
    return meta, records, flashcore_names


def main(argv):
    if len(argv) < 3:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    out_dir, pass_dirs = argv[0], argv[1:]
    try:
        meta, records, flashcore_names = merge([load(d) for d in pass_dirs])
    except (OSError, ValueError, KeyError) as error:
        print(f"merge_passes.py: {error}", file=sys.stderr)
        return 2
    table = compare_report.write(out_dir, meta, records, flashcore_names)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
