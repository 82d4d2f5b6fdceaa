#!/usr/bin/env bash
# Compiles every sm90 kernel instance on its own with nvcc for sm_90a and prints, per instance,
# ptxas registers / stack / spills and the SASS instruction families that must be there (HGMMA,
# UTMALDG, SYNCS; QGMMA for fp8) and must not (LDL/STL local-memory traffic). Needs no GPU.
# "max reg" is the highest register index in the SASS + 1: the consumers' real footprint after
# setmaxnreg (ptxas reports the launch cap, 168, for the whole kernel). "serialized" counts the
# kernels where ptxas serializes every wgmma (its info C7514: some path from a wgmma's issue
# reaches a read of its accumulators without the wait), which runs them at about half speed
# (docs/kernels.md, run 171); the script exits 1 if any kernel is.
# Usage (repository root): bash dev/sm90/compile_instances.sh [out_dir]
set -euo pipefail
out=${1:-/tmp/flashcore_sm90_instances}
mkdir -p "$out"
serialized_total=0
for dtype in kFloat16 kBFloat16 kFloat8E4M3; do  # fp8: hd64 runs the hd128 kernels
  for hd in 64 128 256; do
    for causal in false true; do
      name=sm90_${dtype}_hd${hd}_${causal}
      cat > "$out/$name.cu" <<SRC
#include "cuda/sm90/launch.cuh"
template void flashcore::detail::run_sm90_forward<flashcore::DType::${dtype}, ${hd}, ${causal}>(
    const flashcore::detail::AttentionParams&);
SRC
      nvcc -std=c++17 -O3 --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a \
        -Xptxas -v -I include -I src -c "$out/$name.cu" -o "$out/$name.o" > "$out/$name.log" 2>&1
      regs=$(grep -o "Used [0-9]* registers" "$out/$name.log" | head -1)
      frame=$(grep -o "[0-9]* bytes stack frame, [0-9]* bytes spill stores, [0-9]* bytes spill loads" "$out/$name.log" | head -1)
      warn=$(grep -c -i "warning" "$out/$name.log" || true)
      serialized=$(grep -c "C7514" "$out/$name.log" || true)
      serialized_total=$((serialized_total + serialized))
      cuobjdump --dump-sass "$out/$name.o" > "$out/$name.sass"
      count() { grep -c "$1" "$out/$name.sass" || true; }
      maxreg=$(grep -o "\bR[0-9]\+\b" "$out/$name.sass" | tr -d R | sort -n | tail -1)
      echo "$name: $regs, max reg R$maxreg; $frame; warnings $warn; serialized $serialized; HGMMA $(count HGMMA) QGMMA $(count QGMMA) UTMALDG $(count UTMALDG) UTMASTG $(count UTMASTG) SYNCS $(count SYNCS) LDL $(count 'LDL') STL $(count 'STL')"
    done
  done
done
if [ "$serialized_total" -gt 0 ]; then
  echo "ptxas serialized the wgmma of $serialized_total kernels (C7514 in $out/*.log)" >&2
  exit 1
fi
