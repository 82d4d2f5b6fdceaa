#!/usr/bin/env bash
# One device call: decode replayed as CUDA graphs (decode_graph_timing.py) for a baseline tree
# against the working tree, and optionally the working tree built with extra defines, runs
# alternating A B (C) A B (C). Python modules only (d128, bf16, sm_90a), built in parallel.
#
#   git archive <base> CMakeLists.txt cmake include src python bench tests examples \
#       pyproject.toml | tar -x -C build-old-src         # here, then carry build-old-src
#   OUT=... [VARIANT_DEFINES="-DFLASHCORE_SM90_MIN_KV_BLOCKS_PER_SPLIT=2"] bash dev/sm90/decode_graph_ab.sh
#
# SCRIPT picks the timing script (default decode_graph_timing.py; paged_decode_graph_timing.py
# times the cache layouts), PASSES the alternating passes (default "a b").
#
# Logs, JSON and the summaries (summarize_graph_timing.py) go to $OUT/g.
set -u
mkdir -p "$OUT/g"
python=$(command -v python3)
common=(-DCMAKE_BUILD_TYPE=Release -DFLASHCORE_CUDA_ARCHS=90a -DFLASHCORE_BUILD_PYTHON=ON
        -DFLASHCORE_BUILD_TESTS=OFF -DFLASHCORE_BUILD_BENCH=OFF -DFLASHCORE_HEAD_DIMS=128
        -DFLASHCORE_DTYPES=bf16 -DPython_EXECUTABLE="$python")
build() {  # name source [extra cmake args]
  local name=$1 source=$2
  shift 2
  # Always from scratch: a warm machine keeps the last call's build, and git archive stamps
  # files with the commit time, so make would take an older tree's objects as up to date.
  rm -rf "build-$name"
  (cmake -S "$source" -B "build-$name" "${common[@]}" "$@" &&
   cmake --build "build-$name" -j8) > "$OUT/g/build_$name.log" 2>&1
  echo "build $name rc=$?"
}
builds=(old new)
build old build-old-src &
build new . &
if [ -n "${VARIANT_DEFINES:-}" ]; then
  build variant . "-DCMAKE_CXX_FLAGS=$VARIANT_DEFINES" "-DCMAKE_CUDA_FLAGS=$VARIANT_DEFINES" &
  builds+=(variant)
fi
wait
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv > "$OUT/g/gpu.txt"
script=${SCRIPT:-decode_graph_timing.py}
for pass in ${PASSES:-a b}; do
  for name in "${builds[@]}"; do
    PYTHONPATH="build-$name/python" timeout 120 python3 "dev/sm90/$script" \
      --json "$OUT/g/${name}_$pass.json" > "$OUT/g/${name}_$pass.log" 2>&1
    echo "$name $pass rc=$?"
  done
done
for name in "${builds[@]:1}"; do
  python3 dev/sm90/summarize_graph_timing.py --base "$OUT"/g/old_*.json \
    --new "$OUT"/g/"${name}"_*.json > "$OUT/g/summary_$name.md"
  echo "== $name against old"
  cat "$OUT/g/summary_$name.md"
done
