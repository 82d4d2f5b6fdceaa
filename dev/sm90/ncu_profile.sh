#!/usr/bin/env bash
# ncu --set full (with source) of the sm90 kernel on two short-sequence shapes (bf16, standard
# grid): by default d128 2k non-causal and d64 1k causal; with the argument `512`, d128 512
# non-causal and d64 512 causal. One device call; text exports and the reports under
# $OUT/prof.tgz. Builds flashcore-bench (ARCHS 90a) first.
set -u
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DFLASHCORE_CUDA_ARCHS=90a > /dev/null 2>&1 && cmake --build build -j16 --target flashcore-bench > /dev/null 2>&1 || { echo build failed; exit 1; }
B=build/bench/flashcore-bench
mkdir -p $OUT/p
run() { name=$1; shift
  timeout 200 ncu --set full --import-source yes -k regex:sm90_forward --launch-skip 1 --launch-count 1 -f -o $OUT/p/$name $B --backend sm90 "$@" --iters 2 --warmup 1 --check-rows 8 > $OUT/p/$name.run.log 2>&1
  echo "$name rc=$?"
  ncu -i $OUT/p/$name.ncu-rep --page details > $OUT/p/$name.details.txt 2>&1
  ncu -i $OUT/p/$name.ncu-rep --page source --csv --print-source sass > $OUT/p/$name.sass.csv 2>&1
  ls -la $OUT/p/$name.*
}
if [ "${1:-}" = 512 ]; then
  run d128_512_full --batch 32 --seqlen 512 --heads 16 --head-dim 128 --dtype bf16
  run d64_512_causal --batch 32 --seqlen 512 --heads 32 --head-dim 64 --dtype bf16 --causal
else
  run d128_2k_full --batch 8 --seqlen 2048 --heads 16 --head-dim 128 --dtype bf16
  run d64_1k_causal --batch 16 --seqlen 1024 --heads 32 --head-dim 64 --dtype bf16 --causal
fi
grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|SM Busy|Issue Slots Busy|Executed Ipc A|No Eligible|Warp Cycles Per Issued" $OUT/p/*.details.txt | head -30
cd $OUT && tar czf prof.tgz p && ls -la prof.tgz && rm -rf p
