#!/usr/bin/env bash
# A B timing of two source trees on one GPU, for changes that must not move speed (a redesign) or
# must move it (a kernel change): builds the Python module from BASE (a source tree of the earlier
# commit, e.g. `git archive <sha> CMakeLists.txt cmake include src bench python | tar -x -C .base`,
# carried to the device machine) and from this tree, then times both through this tree's
# bench/compare.py (inputs drawn on the GPU, every result checked, CUDA-graph replays) on the
# standard grid and the decode set, in alternating processes (A B B A A B ...). Prints the new /
# base summary last (tools/device/ab_summary.py).
#
#   BASE=.base PASSES=2 OUT=results/ab bash tools/device/ab.sh
#
# Environment: BASE (default .base), PASSES (A B rounds, default 2), OUT (default results/ab),
# GRIDS (compare.py grids, default "standard decode"), COMPARE_ARGS (extra compare.py flags),
# JOBS, ARCHS (default 90a), PYTHON.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
BASE=${BASE:-.base}
PASSES=${PASSES:-2}
OUT=${OUT:-results/ab}
ARCHS=${ARCHS:-90a}
JOBS=${JOBS:-$(nproc)}
GRIDS=${GRIDS:-standard decode}
PYTHON=${PYTHON:-python3}
mkdir -p "$OUT"
[ -f "$BASE/CMakeLists.txt" ] || { echo "ab.sh: no source tree at BASE=$BASE" >&2; exit 2; }

build() {  # build SOURCE_DIR BUILD_DIR LOG: the Python module only
  cmake -S "$1" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHCORE_CUDA_ARCHS="$ARCHS" \
    -DFLASHCORE_BUILD_TESTS=OFF -DFLASHCORE_BUILD_BENCH=OFF -DFLASHCORE_BUILD_PYTHON=ON \
    -DPython_EXECUTABLE="$(command -v "$PYTHON")" >"$3" 2>&1 &&
    cmake --build "$2" -j "$JOBS" >>"$3" 2>&1
}
echo "== building base ($BASE) and new Python modules (archs $ARCHS)"
start=$SECONDS
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
echo "built in $((SECONDS - start)) s"

nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv \
  >"$OUT/gpu.txt" 2>&1
for pass in $(seq 1 "$PASSES"); do
  # The sides take turns going first, so neither always runs on the card the other warmed.
  sides="base new"
  [ $((pass % 2)) -eq 0 ] && sides="new base"
  for side in $sides; do
    for grid in $GRIDS; do
      start=$SECONDS
      # shellcheck disable=SC2086  # COMPARE_ARGS is a list of flags
      PYTHONPATH="build-ab-$side/python${PYTHONPATH:+:$PYTHONPATH}" timeout 600 "$PYTHON" \
        bench/compare.py --grid "$grid" --impls flashcore --backend sm90 --timing graph \
        --skip-ceilings --check-rows 16 ${COMPARE_ARGS:-} --out "$OUT/${grid}_${side}_${pass}" \
        >"$OUT/${grid}_${side}_${pass}.log" 2>&1
      echo "pass $pass $side $grid: rc=$? $((SECONDS - start)) s"
    done
  done
done
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv >>"$OUT/gpu.txt" 2>&1
"$PYTHON" tools/device/ab_summary.py "$OUT" $GRIDS | tee "$OUT/summary.md"
