#!/usr/bin/env bash
# One device call confirming the tile table's defaults: check_sm90 --variants default (accuracy on
# every correctness shape, both dtypes, then timing on the standard grid 512..16k) beside the
# configurations the previous table used (timed interleaved in the same process), then a second
# timing pass for the run-to-run spread. Logs under $OUT.
# Needs .sm90bin/check_sm90 built here with the current table (see docs/kernels_sm90.md), carried.
set -uo pipefail
bin=.sm90bin/check_sm90
out=${OUT:-/tmp/confirm_defaults}
mkdir -p "$out"
# previous rows: d64 persistent n128 s2 x3 (full; causal <= 4k), overlap n128 s3 x3 (causal > 4k),
# d256 causal overlap n80 (> 4k)
previous='pers_d64_n128_s2_m192,ovl_d64_n128_s3_m192,ovl_d256_n80_s2,!_l'
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv \
  > "$out/gpu.txt" 2>&1
timeout 200 stdbuf -oL $bin --variants "default,$previous" > "$out/confirm.log" 2>&1
echo "confirm rc=$? $(grep -c '^ok' "$out/confirm.log") ok, $(grep -c '^FAIL' "$out/confirm.log") FAIL"
timeout 100 stdbuf -oL $bin --only-timing --variants "default,$previous" > "$out/time_b.log" 2>&1
echo "timing b rc=$?"
grep -E 'FAIL|passed' "$out/confirm.log" | head -20
sed -n '/=== summary/,$p' "$out/confirm.log" | cut -c1-200
sed -n '/=== summary/,$p' "$out/time_b.log" | cut -c1-200
