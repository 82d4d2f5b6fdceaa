#!/usr/bin/env bash
# One device call for a kernel change: checks the new binary against the float64 reference, times
# the library default of the previous build (check_sm90_old) against the new one in alternating
# processes (A B A B), then times CANDIDATES (check_sm90 --variants) interleaved in one process.
# Logs under $OUT; summary by dev/sm90/summarize_ab.py. Needs .sm90bin/check_sm90 and
# .sm90bin/check_sm90_old built here and carried. Used for the continuous ping-pong rotation and
# the H100 table retune (default CANDIDATES) and the L2 prefetch (docs/kernels.md, runs 14-15).
# For a one-off sweep of other tiles, name them in CANDIDATES (check_sm90 --list prints them).
set -uo pipefail
bin=.sm90bin/check_sm90
old=.sm90bin/check_sm90_old
out=${OUT:-/tmp/ab_sweep}
mkdir -p "$out"
candidates=${CANDIDATES:-}
if [ -z "$candidates" ]; then
  candidates='default,pers_d64_n128_s2,pers_d64_n128_s2_m192,pers_d64_n128_s3_m192'
  candidates+=',ovl_d64_n128_s2_m192,ovl_d64_n128_s3_m192'
  candidates+=',pers_d128_n128_s2,pers_d128_n128_s3,pers_d128_n160_s2,pers_d128_n176_s2'
  candidates+=',pers_d128_n96_s2,ovl_d128_n176_s2,ovl_d128_n160_s2'
  candidates+=',pers_d256_n80_s2,ovl_d256_n80_s2,pers_d256_n64_s2'
fi
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv \
  > "$out/gpu.txt" 2>&1
timeout ${CHECK_TIMEOUT:-150} stdbuf -oL $bin --no-timing --variants "default,$candidates" \
  > "$out/check.log" 2>&1
echo "check rc=$? $(grep -c '^ok' "$out/check.log") ok, $(grep -c '^FAIL' "$out/check.log") FAIL"
grep FAIL "$out/check.log" | head -20
for pass in a b; do
  timeout 60 stdbuf -oL $old --only-timing --variants default > "$out/old_$pass.log" 2>&1
  echo "old $pass rc=$?"
  timeout 60 stdbuf -oL $bin --only-timing --variants default > "$out/new_$pass.log" 2>&1
  echo "new $pass rc=$?"
done
# SWEEPS: ';'-separated check_sm90 argument sets, each timed in a process of its own (e.g. one
# head_dim and seqlen per process, so that name prefixes pick only the variants meant there).
sweeps=${SWEEPS:-"--variants $candidates"}
IFS=';' read -ra sweep_args <<< "$sweeps"
: > "$out/sweep.log"
for args in "${sweep_args[@]}"; do
  # shellcheck disable=SC2086  # each set is split into check_sm90's arguments on purpose
  timeout ${SWEEP_TIMEOUT:-200} stdbuf -oL $bin --only-timing $args >> "$out/sweep.log" 2>&1
  echo "sweep ($args) rc=$?"
done
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv >> "$out/gpu.txt" 2>&1
python3 dev/sm90/summarize_ab.py "$out" | tee "$out/summary.txt"
