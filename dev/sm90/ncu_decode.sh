#!/usr/bin/env bash
# Kernel durations and DRAM throughput (ncu) of one decode call per implementation
# (dev/sm90/decode_kernels.py: FlashCore, SDPA cuDNN, SDPA FA2) at batch 1 with 16k and 4k keys
# and batch 64 with 4k keys. Usage: PYTHONPATH=<build>/python bash dev/sm90/ncu_decode.sh OUT_DIR
out=$1
for shape in "1 16384" "1 4096" "64 4096"; do
  name=$(echo $shape | tr ' ' '_')
  ncu --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed \
    python3 dev/sm90/decode_kernels.py $shape > "$out/ncu_$name.log" 2>&1
done
