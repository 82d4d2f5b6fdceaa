#!/usr/bin/env python3
"""Kernel time per call from an `ncu --csv --metrics gpu__time_duration.sum` log: the one reader
of the device scripts that time kernels under Nsight Compute (serving.sh, prefill_jax.sh).

The process under ncu makes one warm-up call and then the timed calls; what a call costs is
either the sum of the kernels it launches whose names hold a key (--kernels: FlashCore's
forward, split and combine kernels; FA3's scheduler-prepare and forward kernels), or the one
kernel that ran once per call and took the most time (--largest-of CALLS: the attention kernel
among the inputs' fills and copies). Prints the median over the timed calls in microseconds,
or nan where the log holds no such kernel.

  python3 tools/device/ncu_times.py LOG --kernels sm90,sm80,combine
  python3 tools/device/ncu_times.py LOG --largest-of 5
"""
import argparse
import collections
import csv
import statistics
import sys

# ncu's CSV rows have 15 fields; the process's own prints and ncu's ==PROF== lines have fewer.
MIN_CSV_FIELDS = 11


def read_kernel_times(lines):
    """[(kernel name, time in ns)] in launch order, from the lines of an ncu CSV log."""
    rows = [row for row in csv.reader(lines) if len(row) >= MIN_CSV_FIELDS]
    if not rows:
        return []
    header, data = rows[0], rows[1:]
    name, value = header.index("Kernel Name"), header.index("Metric Value")
    return [(row[name], float(row[value].replace(",", ""))) for row in data]


def summed_call_us(times, keys):
    """Median over the timed calls of the summed time of the kernels whose names hold one of
    `keys`; every call launches the same set, so a call is as many launches as the set has
    names. None without such a kernel."""
    picked = [(name, ns) for name, ns in times if any(key in name for key in keys)]
    if not picked:
        return None
    per_call = len({name for name, _ in picked})
    calls = [sum(ns for _, ns in picked[i:i + per_call])
             for i in range(0, len(picked), per_call)]
    calls = calls[1:] if len(calls) > 1 else calls  # the warm-up call
    return statistics.median(calls) / 1000


def largest_call_us(times, timed_calls):
    """Median over the timed calls of the kernel that ran once per call (warm-up included) and
    took the most time in all; None without one."""
    by_name = collections.defaultdict(list)
    for name, ns in times:
        by_name[name].append(ns)
    once_per_call = [ns for ns in by_name.values() if len(ns) == timed_calls + 1]
    if not once_per_call:
        return None
    return statistics.median(max(once_per_call, key=sum)[1:]) / 1000


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("log")
    how = parser.add_mutually_exclusive_group(required=True)
    how.add_argument("--kernels", help="comma list of kernel-name keys summed per call")
    how.add_argument("--largest-of", type=int, metavar="CALLS",
                     help="the timed calls (after one warm-up) of the process")
    args = parser.parse_args(argv)
    if args.largest_of is not None and args.largest_of < 1:
        parser.error(f"--largest-of must be positive, got {args.largest_of}")
    with open(args.log) as f:
        times = read_kernel_times(f)
    if args.kernels is not None:
        us = summed_call_us(times, [key for key in args.kernels.split(",") if key])
    else:
        us = largest_call_us(times, args.largest_of)
    print("nan" if us is None else f"{us:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
