#!/usr/bin/env bash
# L2 read sectors (and the L2 request coalescer's counts) of one library call and one cuDNN call
# per shape, through dev/sm90/prefill_kernels.py (any mask, unlike l2_probe.sh's check_sm90
# launches). Needs the library built with its Python module in build/. Run 80.
#   PROBES="64:1024:1 128:1024:0" OUT=/tmp/x bash dev/sm90/l2_probe_calls.sh
set -uo pipefail
out=${OUT:-/tmp/l2_probe_calls}
mkdir -p "$out"
export PYTHONPATH=build/python${PYTHONPATH:+:$PYTHONPATH}
base=gpu__time_duration.sum,l1tex__m_xbar2l1tex_read_bytes.sum,lts__t_sectors_srcnode_gpc.sum
base+=,lts__t_sectors_srcunit_tex_op_read.sum,lrc__lrc2xbar_sectors_op_read.sum
for probe in ${PROBES:-64:1024:1}; do
  IFS=: read -r hd seqlen causal <<< "$probe"
  for impl in "flashcore sm90_forward" "cudnn fprop"; do
    read -r name regex <<< "$impl"
    echo "== $name d$hd $seqlen causal=$causal" >> "$out/ncu.txt"
    timeout 120 ncu -k "regex:$regex" -c 1 --metrics "$base" \
      python3 dev/sm90/prefill_kernels.py "$seqlen" "$hd" "$causal" 2>&1 \
      | grep -E "^    [a-z]|ERROR" >> "$out/ncu.txt"
  done
done
cat "$out/ncu.txt"
