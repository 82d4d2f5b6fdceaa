#!/usr/bin/env bash
# One library call and one cuDNN call per shape under ncu with the clocks left free
# (--clock-control none: the card boosts as in the grid's short bursts, where ncu's default
# locks them at base): duration, SM clock, issue-slot use and warp stall reasons. Needs the
# library built with its Python module in build/. Run 82.
#   PROBES="64:1024:1" OUT=/tmp/x bash dev/sm90/free_clock_probe.sh
set -uo pipefail
out=${OUT:-/tmp/free_clock_probe}
mkdir -p "$out"
export PYTHONPATH=build/python${PYTHONPATH:+:$PYTHONPATH}
for probe in ${PROBES:-64:1024:1}; do
  IFS=: read -r hd seqlen causal <<< "$probe"
  for impl in "flashcore sm90_forward" "cudnn fprop"; do
    read -r name regex <<< "$impl"
    log="$out/ncu_${name}_d${hd}_${seqlen}_${causal}.txt"
    timeout 180 ncu --clock-control none -k "regex:$regex" -c 1 \
      --section SpeedOfLight --section WarpStateStats --section SchedulerStats \
      --section LaunchStats python3 dev/sm90/prefill_kernels.py "$seqlen" "$hd" "$causal" \
      > "$log" 2>&1
    echo "== $name d$hd $seqlen causal=$causal rc=$?"
    grep -E "Duration|SM Frequency|DRAM Frequency|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Compute \(SM\) Throughput|Memory Throughput" "$log" | head -12
  done
done
