#!/usr/bin/env bash
# One device call for the per-seqlen tile buckets: times every candidate on the standard grid
# (512..16k, variants interleaved), then checks the new candidate instantiations against the
# float64 reference (the others passed in the earlier runs). Logs under $OUT.
# Needs .sm90bin/check_sm90 built here (see docs/kernels_sm90.md) and carried.
set -uo pipefail
bin=.sm90bin/check_sm90
out=${OUT:-/tmp/bucket_sweep}
mkdir -p "$out"
new='pers_d64_n64_s2,pers_d64_n128_s3_m192,pers_d128_n96_s2,pers_d128_n64_s2,pers_d256_n64_s2'
old='default,pers_d64_n128_s2,pers_d64_n192_s2,pers_d64_n96_s2_m192,ovl_d64_n128_s3_m192'
old+=',ovl_d64_n128_s2_m192,pers_d128_n128_s2,pers_d128_n128_s3,pers_d128_n160_s2'
old+=',pers_d128_n176_s2,pers_d128_n96_s3,ovl_d128_n176_s2,ovl_d128_n160_s2,ovl_d128_n128_s3'
old+=',pers_d256_n80_s2,ovl_d256_n80_s2,ovl_d256_n64_s2'
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv \
  > "$out/gpu.txt" 2>&1
timeout 135 stdbuf -oL $bin --only-timing --variants "$new,$old" > "$out/time_a.log" 2>&1
echo "timing a rc=$?"
timeout 45 stdbuf -oL $bin --no-timing --variants "$new" > "$out/check_new.log" 2>&1
echo "check new rc=$? $(grep -c '^ok' "$out/check_new.log") ok, $(grep -c '^FAIL' "$out/check_new.log") FAIL"
grep FAIL "$out"/check_*.log | head -20
sed -n '/=== summary/,$p' "$out/time_a.log" | cut -c1-330
