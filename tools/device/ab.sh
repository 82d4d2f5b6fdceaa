#!/usr/bin/env bash
# A B timing of two source trees on one GPU, for changes that must not move speed (a redesign) or
# must move it (a kernel change): builds flashcore-bench from BASE (a source tree of the earlier
# commit, e.g. `git archive <sha> | tar -x -C .base`, carried to the device machine) and from this
# tree, then runs both on the standard grid and the decode set in alternating processes
# (A B A B ...), each pass timing every config with CUDA events over rotated input copies.
# Accuracy is checked on one query row per (batch, head) in these passes; the full accuracy
# suite runs elsewhere (check.sh). Prints the new / base summary last (tools/device/ab_summary.py).
#
#   BASE=.base PASSES=2 OUT=$OUT bash tools/device/ab.sh
#
# Environment: BASE (default .base), PASSES (A B rounds, default 2), OUT (default ./results/ab),
# GRID_ARGS (flashcore-bench flags of the grid pass, default "--grid standard"), JOBS, ARCHS (90a).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
BASE=${BASE:-.base}
PASSES=${PASSES:-2}
OUT=${OUT:-./results/ab}
ARCHS=${ARCHS:-90a}
JOBS=${JOBS:-$(nproc)}
GRID_ARGS=${GRID_ARGS:---grid standard}
mkdir -p "$OUT"
[ -f "$BASE/CMakeLists.txt" ] || { echo "ab.sh: no source tree at BASE=$BASE" >&2; exit 2; }

# The decode set (compare_grids.py's `decode`): seqlen_q 1 against 1k / 4k / 16k keys, batch 1 /
# 16 / 64, GQA 32 / 8, d128, bf16.
DECODE_BATCHES=(1 16 64)
DECODE_KEYS=(1024 4096 16384)

build() {  # build SOURCE_DIR BUILD_DIR LOG
  cmake -S "$1" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHCORE_CUDA_ARCHS="$ARCHS" \
    -DFLASHCORE_BUILD_TESTS=OFF -DFLASHCORE_BUILD_PYTHON=OFF >"$3" 2>&1 &&
    cmake --build "$2" -j "$JOBS" --target flashcore-bench >>"$3" 2>&1
}
echo "== building base ($BASE) and new flashcore-bench (archs $ARCHS)"
build "$BASE" build-ab-base "$OUT/build_base.log" &
base_pid=$!
build . build-ab-new "$OUT/build_new.log"
new_rc=$?
wait "$base_pid"
base_rc=$?
if [ "$base_rc" -ne 0 ] || [ "$new_rc" -ne 0 ]; then
  echo "build failed (base rc=$base_rc, new rc=$new_rc)"
  tail -n 20 "$OUT/build_base.log" "$OUT/build_new.log"
  exit 1
fi

one_pass() {  # one_pass SIDE PASS: the grid and the decode set, one process per config group
  local bench="build-ab-$1/bench/flashcore-bench" tag="$1_$2"
  # shellcheck disable=SC2086  # GRID_ARGS is a list of flags
  timeout 300 "$bench" $GRID_ARGS --backend sm90 --check-rows 1 --json "$OUT/grid_$tag.json" \
    >"$OUT/grid_$tag.log" 2>&1 || echo "grid $tag rc=$?"
  local records=()
  for batch in "${DECODE_BATCHES[@]}"; do
    for keys in "${DECODE_KEYS[@]}"; do
      local file="$OUT/decode_${tag}_b${batch}_k${keys}.json"
      timeout 60 "$bench" --batch "$batch" --seqlen-q 1 --seqlen-k "$keys" --heads-q 32 \
        --heads-kv 8 --head-dim 128 --dtype bf16 --backend sm90 --check-rows 1 --iters 100 \
        --json "$file" >>"$OUT/decode_$tag.log" 2>&1 || echo "decode $tag b$batch k$keys rc=$?"
      records+=("$file")
    done
  done
  python3 -c "import json, sys; print(json.dumps([r for f in sys.argv[1:] for r in json.load(open(f))]))" \
    "${records[@]}" >"$OUT/decode_$tag.json" && rm -f "${records[@]}"
}

nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv \
  >"$OUT/gpu.txt" 2>&1
for pass in $(seq 1 "$PASSES"); do
  for side in base new; do
    start=$SECONDS
    one_pass "$side" "$pass"
    echo "pass $pass $side: $((SECONDS - start)) s"
  done
done
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv >>"$OUT/gpu.txt" 2>&1
python3 tools/device/ab_summary.py "$OUT" | tee "$OUT/summary.md"
