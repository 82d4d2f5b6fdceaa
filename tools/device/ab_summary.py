#!/usr/bin/env python3
"""Summary of an A B run (tools/device/ab.sh): each tree's speed against the first one's per
config, from the median over passes of each side's median time, with the spread of each tree
between its own passes (the noise the ratios must clear). Where the run timed FA3 beside
FlashCore, each tree's flashcore / FA3 ratio too (per pass, then the median), and each tree
against the first through those ratios: FA3 ran in the same processes, so it cancels the card's
drift between passes and what a process does to every kernel in it (docs/kernels.md, run 340: an
fp8 d256 call ran 12% longer in one tree's processes, and FA3 beside it as much). Read that
column where the two disagree.
Reads OUT_DIR/<grid>_<tree>_<pass>/compare.json, or compare_serving.json (`compare.py --grid
serving`, whose FlashCore column is `flashcore` and whose FA3 column times only its rows).

Per tree, how often it ran faster than the first in the same pass: a change under the passes'
spread shows as a share of wins above the controls' (configs the change does not touch, named
by --controls), which a ratio of medians alone does not tell from noise (docs/kernels.md, run
363: 60% of the touched pairs against 64% of the controls').

  python3 tools/device/ab_summary.py OUT_DIR --trees base,new GRID [GRID ...]
  python3 tools/device/ab_summary.py OUT_DIR --trees base,new --controls 'ctl-|512' shapes
  (markdown on stdout; exit 1 if a grid lacks a tree)
"""
import argparse
import glob
import json
import math
import os
import re
import statistics
import sys

IMPL_PREFIX = "flashcore"  # flashcore[sm90] in the grids, flashcore in the serving one
ANCHOR = "fa3"
RESULT_FILES = ("compare.json", "compare_serving.json")
# A config whose ratio falls below this in the summary is listed by name.
FLAG_BELOW = 0.98


def ok_ms(record, impl):
    result = record["results"].get(impl, {})
    return result["median_ms"] if result.get("status") == "ok" and result.get("median_ms") else None


def flashcore_ms(record):
    """The first FlashCore column's time (a run times one FlashCore backend), or None."""
    names = [name for name in record["results"] if name.startswith(IMPL_PREFIX)]
    return ok_ms(record, names[0]) if names else None


def load(out_dir, grid, trees):
    """{tree: {pass: {config: (flashcore ms, anchor ms or None)}}}; failed results left out."""
    runs = {}
    names = "|".join(re.escape(t) for t in trees)
    paths = [path for name in RESULT_FILES
             for path in glob.glob(os.path.join(out_dir, f"{grid}_*_*", name))]
    for path in paths:
        match = re.match(rf"{re.escape(grid)}_({names})_(\d+)$",
                         os.path.basename(os.path.dirname(path)))
        if not match:
            continue
        with open(path) as f:
            records = json.load(f)["records"]
        runs.setdefault(match.group(1), {})[int(match.group(2))] = {
            r["config"]: (flashcore_ms(r), ok_ms(r, ANCHOR)) for r in records if flashcore_ms(r)}
    return runs


def geomean(values):
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def anchor_ratio(passes, config):
    """Median over passes of FA3's time over FlashCore's (> 1: FlashCore faster), or None."""
    ratios = [p[config][1] / p[config][0] for p in passes.values()
              if config in p and p[config][1]]
    return statistics.median(ratios) if ratios else None


def same_pass_wins(runs, tree, ref, keys):
    """(pairs where `tree` ran faster than `ref` in the same pass, pairs) over `keys`."""
    wins = pairs = 0
    for run, times in runs[tree].items():
        ref_times = runs[ref].get(run, {})
        for key in keys:
            if key in times and key in ref_times:
                pairs += 1
                wins += times[key][0] < ref_times[key][0]
    return wins, pairs


def wins_line(label, ratios, wins, pairs):
    share = f" ({100 * wins / pairs:.0f}%)" if pairs else ""
    return (f"{label}: geomean {geomean(ratios):.4f} over {len(ratios)}, faster in {wins} of "
            f"{pairs} same-pass pairs{share}")


def summarize(grid, runs, trees, controls=None):
    missing = [t for t in trees if t not in runs]
    if missing:
        return [f"## {grid}: no results for {', '.join(missing)}"], False
    keys = sorted(set.intersection(*(set(p) for t in trees for p in runs[t].values())))
    if not keys:
        return [f"## {grid}: no config ran in every tree"], False
    ref = trees[0]
    has_anchor = any(anchor_ratio(runs[t], k) for t in trees for k in keys)
    header = ["config"] + [f"{t} ms" for t in trees] + [f"{t} / {ref}" for t in trees[1:]]
    if has_anchor:
        header += [f"{t} / FA3" for t in trees] + [f"{t} / {ref} via FA3" for t in trees[1:]]
    lines = [f"## {grid}: {len(keys)} configs, passes " +
             ", ".join(f"{t} {sorted(runs[t])}" for t in trees), "",
             "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    ratios = {t: [] for t in trees[1:]}
    vs_anchor = {t: [] for t in trees}
    via_anchor = {t: [] for t in trees[1:]}  # (t / FA3) / (ref / FA3), per config
    spreads = []
    for key in keys:
        med = {t: statistics.median(p[key][0] for p in runs[t].values()) for t in trees}
        cells = [key] + [f"{med[t]:.4f}" for t in trees]
        for t in trees[1:]:
            ratios[t].append(med[ref] / med[t])
            cells.append(f"{med[ref] / med[t]:.3f}")
        if has_anchor:
            values = {t: anchor_ratio(runs[t], key) for t in trees}
            for t in trees:
                if values[t]:
                    vs_anchor[t].append(values[t])
                cells.append(f"{values[t]:.3f}" if values[t] else "-")
            for t in trees[1:]:
                via = values[t] / values[ref] if values[t] and values[ref] else None
                if via:
                    via_anchor[t].append((via, key))
                cells.append(f"{via:.3f}" if via else "-")
        for t in trees:
            times = [p[key][0] for p in runs[t].values()]
            if len(times) > 1:
                spreads.append(max(times) / min(times))
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    for t in trees[1:]:
        low = sorted((r, k) for r, k in zip(ratios[t], keys) if r < FLAG_BELOW)
        lines.append(f"{t} / {ref}: geomean {geomean(ratios[t]):.4f}, lowest "
                     f"{min(ratios[t]):.3f}, highest {max(ratios[t]):.3f}; below {FLAG_BELOW}: "
                     f"{len(low)}")
        lines += [f"  below: {name} {r:.3f}" for r, name in low]
    if has_anchor:
        lines += [f"{t} / FA3: geomean {geomean(vs_anchor[t]):.4f} over {len(vs_anchor[t])}, "
                  f"lowest {min(vs_anchor[t]):.3f}" for t in trees if vs_anchor[t]]
        for t in trees[1:]:
            if not via_anchor[t]:
                continue
            values = [v for v, _ in via_anchor[t]]
            low = sorted((v, k) for v, k in via_anchor[t] if v < FLAG_BELOW)
            lines.append(f"{t} / {ref} via FA3: geomean {geomean(values):.4f} over {len(values)}, "
                         f"lowest {min(values):.3f}, highest {max(values):.3f}; below "
                         f"{FLAG_BELOW}: {len(low)}")
            lines += [f"  below: {name} {v:.3f}" for v, name in low]
    for t in trees[1:]:
        if controls is None:
            lines.append(wins_line(f"{t} / {ref} per pass", ratios[t],
                                   *same_pass_wins(runs, t, ref, keys)))
            continue
        for label, chosen in (("touched", False), ("controls", True)):
            picked = [(r, k) for r, k in zip(ratios[t], keys) if bool(controls.search(k)) == chosen]
            if not picked:
                lines.append(f"{t} / {ref} {label}: no config")
                continue
            lines.append(wins_line(f"{t} / {ref} {label}", [r for r, _ in picked],
                                   *same_pass_wins(runs, t, ref, [k for _, k in picked])))
    if spreads:
        lines.append(f"same tree between passes: median spread {statistics.median(spreads):.3f}, "
                     f"largest {max(spreads):.3f}")
    return lines, True


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir")
    parser.add_argument("grids", nargs="+")
    parser.add_argument("--trees", default="base,new", help="tree names, the reference first")
    parser.add_argument("--controls", metavar="REGEX",
                        help="configs the change does not touch (a regular expression searched "
                             "in each config's name): their wins counted apart")
    args = parser.parse_args(argv[1:])
    trees = [t for t in args.trees.split(",") if t]
    try:
        controls = re.compile(args.controls) if args.controls else None
    except re.error as error:
        parser.error(f"--controls {args.controls!r}: {error}")
    ok = True
    for grid in args.grids:
        lines, complete = summarize(grid, load(args.out_dir, grid, trees), trees, controls)
        ok = ok and complete
        print("\n".join(lines) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
