#!/usr/bin/env bash
# One device call for run 79: where the L2 read requests of the d128 1k kernel go, for the
# library default (check_sm90_old), a tile-order build (check_sm90) and cuDNN; which SM each CTA
# lands on; and the two builds timed A B A B at 1k and 2k. Needs .sm90bin/{check_sm90,
# check_sm90_old,smid_map} built here and carried. Logs under $OUT.
set -uo pipefail
out=${OUT:-/tmp/l2_probe}
mkdir -p "$out"
# PROBES: head_dim:seqlen pairs profiled (bf16, non-causal, standard grid shape).
probes=${PROBES:-128:1024}
.sm90bin/smid_map > "$out/smid.txt" 2>&1
ncu --query-metrics --chip gh100 > "$out/metrics_all.txt" 2>&1
lrc=$(awk '$1 ~ /^lrc__/ && ($1 ~ /sectors|requests/) {print $1 ".sum"}' "$out/metrics_all.txt" \
  | head -12 | paste -sd, -)
base=gpu__time_duration.sum,l1tex__m_xbar2l1tex_read_bytes.sum,lts__t_sectors_srcnode_gpc.sum
base+=,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_ltcfabric.sum
echo "lrc metrics: $lrc" > "$out/ncu.txt"
profile() {  # label, kernel regex, command...
  local label=$1 regex=$2
  shift 2
  for metrics in "$base" "$lrc"; do
    [ -z "$metrics" ] && continue
    echo "== $label ($metrics)" >> "$out/ncu.txt"
    timeout 120 ncu -k "regex:$regex" -c 1 --metrics "$metrics" "$@" >> "$out/ncu.txt" 2>&1
    echo "rc=$?" >> "$out/ncu.txt"
  done
}
for probe in $probes; do
  hd=${probe%%:*}
  seqlen=${probe##*:}
  for build in old new; do
    bin=.sm90bin/check_sm90
    [ $build = old ] && bin=.sm90bin/check_sm90_old
    profile "$build d$hd $seqlen" sm90_forward $bin --only-timing --variants default --hd "$hd" \
      --seqlen "$seqlen"
  done
  [ -n "${SKIP_CUDNN:-}" ] && continue
  profile "cudnn d$hd $seqlen" fprop python3 -c "
import torch, torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
b, h = 16384 // $seqlen, 2048 // $hd
q, k, v = (torch.randn(b, $seqlen, h, $hd, device='cuda', dtype=torch.bfloat16).transpose(1, 2)
           for _ in range(3))
with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
    F.scaled_dot_product_attention(q, k, v)
torch.cuda.synchronize()"
done
timeout 150 .sm90bin/check_sm90 --no-timing --variants default > "$out/check.log" 2>&1
echo "check rc=$? $(grep -c '^ok' "$out/check.log") ok, $(grep -c '^FAIL' "$out/check.log") FAIL"
# TIMING_SEQLENS: the timing shapes of those lengths (all: every standard-grid shape).
for pass in a b; do
  for s in ${TIMING_SEQLENS:-1024 2048}; do
    seqlen_arg=(--seqlen "$s")
    [ "$s" = all ] && seqlen_arg=()
    timeout 90 .sm90bin/check_sm90_old --only-timing --variants default "${seqlen_arg[@]}" \
      >> "$out/old_$pass.log" 2>&1
    timeout 90 .sm90bin/check_sm90 --only-timing --variants default "${seqlen_arg[@]}" \
      >> "$out/new_$pass.log" 2>&1
  done
done
python3 dev/sm90/summarize_ab.py "$out" | tee "$out/summary.txt"
grep -E "^== (old|new|cudnn) d[0-9]+ [0-9]+ \\(gpu|duration|srcnode|rc=" "$out/ncu.txt" | cut -c1-90
