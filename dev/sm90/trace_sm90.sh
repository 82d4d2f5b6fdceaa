#!/usr/bin/env bash
# Timelines of the sm90 kernel (cuda/sm90/trace.cuh) on the short and middle shapes where it
# trails cuDNN, and where each tile's time goes (trace_report.py). One device call:
#   nvcc ... -DFLASHCORE_SM90_TRACE dev/sm90/check_sm90.cu -o .sm90bin/check_sm90_trace  (here)
#   OUT=... bash dev/sm90/trace_sm90.sh     (on the device, carrying .sm90bin)
# The traced kernel is timed too (its TFLOPS next to the untraced build's show what tracing
# costs); CSVs and the report go to $OUT/trace.
set -u
BIN=${BIN:-.sm90bin/check_sm90_trace}
VARIANTS=${VARIANTS:-default}
mkdir -p "$OUT/trace"
for shape in "128 512" "128 1024" "128 2048" "128 4096" "64 1024" "256 1024" "256 2048"; do
  set -- $shape
  timeout 120 "$BIN" --only-timing --variants "$VARIANTS" --hd "$1" --seqlen "$2" \
    --trace "$OUT/trace" 2>&1 | grep -E "^time|FAIL|error" | tee -a "$OUT/trace/timing.log"
done
if [ -x .sm90bin/check_sm90 ]; then  # the same shapes untraced, for the cost of tracing
  for shape in "128 1024" "128 2048"; do
    set -- $shape
    timeout 120 .sm90bin/check_sm90 --only-timing --variants "$VARIANTS" --hd "$1" --seqlen "$2" \
      2>&1 | grep -E "^time" | sed 's/^/untraced /' | tee -a "$OUT/trace/timing.log"
  done
fi
python3 dev/sm90/trace_report.py "$OUT"/trace/*.csv | tee "$OUT/trace/report.txt"
cd "$OUT" && tar czf trace.tgz trace && rm -rf trace/*.csv
