#!/usr/bin/env python3
"""Reads the timelines of check_sm90 --trace (cuda/sm90/trace.cuh); says where a tile's time goes.

For every consumer warpgroup of the traced CTAs the events are cut into tiles (kTileBegin) and
turns (kTurn: the warpgroup got its turn to issue GEMMs). A tile of n KV steps takes n + 1 turns:
turn 0 issues the first S = Q K^T alone, turns 1 .. n-1 issue S and the previous P V together,
turn n the last P V. The report gives, in SM clocks (mean over tiles and consumers):
  - the steady period: between two consecutive turns in the middle of a tile;
  - each gap between consecutive events, split into "steady" (turns 2 .. n-2) and per boundary turn;
  - the tile's fixed cost: tile time minus n steady periods, also in periods.
Beside FILE.csv, FILE_spans.csv (every CTA's start and end in the global nanosecond timer) gives
the launch's span and what lies outside the CTAs' tile loops: when CTAs start after the first,
their durations, and how long the last CTA runs after each other one has ended.
Usage: trace_report.py FILE.csv [FILE.csv ...]
"""
import csv
import os
import statistics
import sys
from collections import defaultdict

EVENTS = {1: "tile_begin", 2: "q_ready", 3: "k_ready", 4: "v_ready", 5: "turn", 6: "issued",
          7: "s_ready", 8: "softmax_done", 9: "pv_done", 10: "epilogue_done",
          11: "o_staging_free", 12: "o_staged",
          20: "claimed", 21: "k_slot_free", 22: "v_slot_free", 23: "q_slot_free"}


def load(path):
    timelines = defaultdict(list)  # (cta, warpgroup) -> [(event, clock)]
    with open(path) as f:
        for row in csv.DictReader(f):
            timelines[(int(row["cta"]), int(row["warpgroup"]))].append(
                (EVENTS.get(int(row["event"]), row["event"]), int(row["clock"])))
    return timelines


def split_tiles(events):
    """[(event, clock)] of one consumer -> list of tiles, each a list of (turn, event, clock)."""
    tiles, turn = [], -1
    for name, clock in events:
        if name == "tile_begin":
            tiles.append([])
            turn = -1
        if not tiles:
            continue
        if name == "turn":
            turn += 1
        tiles[-1].append((turn, name, clock))
    return tiles


def phase_of(turn, last_turn):
    """Which part of the tile a turn is: the boundary turns by name, the rest 'steady'."""
    if turn <= 1:
        return f"turn {turn}"
    if turn >= last_turn - 1:
        return f"turn n{turn - last_turn:+d}" if turn != last_turn else "turn n"
    return "steady"


def report(path):
    timelines = load(path)
    consumers = {k: v for k, v in timelines.items() if k[1] > 0}
    periods, fixed, tile_clocks = [], [], []
    gaps = defaultdict(list)  # (phase, "a -> b") -> [clocks]
    order = []
    for key, events in sorted(consumers.items()):
        tiles = split_tiles(events)
        # whole tiles only: the next tile's begin closes this one
        for tile, following in zip(tiles, tiles[1:]):
            last_turn = max(t for t, _, _ in tile)
            if last_turn < 4:
                continue
            turns = [c for t, n, c in tile if n == "turn"]
            steady = [b - a for a, b in zip(turns[2:-2], turns[3:-1])]
            if not steady:
                continue
            period = statistics.median(steady)
            periods.append(period)
            duration = following[0][2] - tile[0][2]
            tile_clocks.append(duration)
            steps = last_turn  # n KV steps: n + 1 turns
            fixed.append((duration - steps * period, period))
            for (t0, n0, c0), (t1, n1, c1) in zip(tile, tile[1:] + following[:1]):
                phase = phase_of(t0, last_turn)
                label = f"{n0} -> {n1}"
                if (phase, label) not in gaps:
                    order.append((phase, label))
                gaps[(phase, label)].append(c1 - c0)
    print(f"== {path}")
    if not periods:
        print("   no whole tile with >= 5 turns")
        return
    period = statistics.median(periods)
    cost = statistics.mean(f for f, _ in fixed)
    print(f"   consumers {len(consumers)}, tiles {len(fixed)}, steady period {period:.0f} clocks, "
          f"tile {statistics.mean(tile_clocks):.0f} clocks, fixed cost per tile {cost:.0f} clocks "
          f"= {cost / period:.2f} periods")
    phases = ["turn -1", "turn 0", "turn 1", "steady", "turn n-1", "turn n"]
    for phase in phases:
        rows = [(label, gaps[(p, label)]) for p, label in order if p == phase]
        if not rows:
            continue
        total = sum(statistics.mean(v) for _, v in rows)
        print(f"   {phase:9s} ({total:6.0f} clocks)")
        for label, values in rows:
            print(f"      {label:30s} {statistics.mean(values):7.0f}  (median "
                  f"{statistics.median(values):.0f}, n {len(values)})")
    # The producer's side of a tile boundary: from the Q slab's release (q_empty waited, Q load
    # issued next) to each consumer seeing Q, and from the K_0 slot's release to its first turn.
    q_latency = []
    for (cta, warpgroup), events in consumers.items():
        released = [c for n, c in timelines.get((cta, 0), []) if n == "q_slot_free"]
        ready = [c for n, c in events if n == "q_ready"]
        q_latency += [r - q for q, r in zip(released, ready)][1:]
    if q_latency:
        print(f"   Q: producer's q_empty wait returned -> consumer's q_ready: mean "
              f"{statistics.mean(q_latency):.0f}, median {statistics.median(q_latency):.0f} clocks")


def report_spans(path):
    """The launch from every CTA's start and end (nanoseconds of the global timer)."""
    with open(path) as f:
        spans = [(int(r["start_ns"]), int(r["end_ns"])) for r in csv.DictReader(f)]
    if not spans:
        return
    first = min(start for start, _ in spans)
    last = max(end for _, end in spans)
    starts = sorted((start - first) / 1e3 for start, _ in spans)
    durations = sorted((end - start) / 1e3 for start, end in spans)
    idle_after = sorted((last - end) / 1e3 for _, end in spans)
    print(f"   spans: {len(spans)} CTAs over {(last - first) / 1e3:.1f} us; start after the first "
          f"(median / max) {statistics.median(starts):.1f} / {starts[-1]:.1f} us; CTA time "
          f"min / median / max {durations[0]:.1f} / {statistics.median(durations):.1f} / "
          f"{durations[-1]:.1f} us; idle before the last CTA ends (median / max) "
          f"{statistics.median(idle_after):.1f} / {idle_after[-1]:.1f} us")


def main():
    for path in sys.argv[1:]:
        if path.endswith("_spans.csv"):
            continue
        report(path)
        spans = path[:-len(".csv")] + "_spans.csv"
        if os.path.exists(spans):
            report_spans(spans)


if __name__ == "__main__":
    main()
