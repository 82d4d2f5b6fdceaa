#!/usr/bin/env bash
# A B timing of source trees on one GPU, for changes that must not move speed (a redesign) or
# must move it (a kernel change, tuning-row candidates): builds the Python module of each tree
# (e.g. `git archive <sha> CMakeLists.txt cmake include src bench python | tar -x -C .base` for
# an earlier commit, carried to the device machine; `.` is this tree), then times them through
# this tree's bench/compare.py (inputs drawn on the GPU, every result checked, CUDA-graph
# replays) in alternating processes, the order rotating by pass. Prints each tree against the
# first last (tools/device/ab_summary.py); with COMPARE_ARGS="--impls flashcore,fa3" FA3 runs in
# every process as a control.
#
#   BASE=.base PASSES=2 OUT=results/ab bash tools/device/ab.sh           # base=.base new=.
#   TREES="now=. n176=.var1" GRIDS=llm bash tools/device/ab.sh
#   CMAKE_ARGS="-DFLASHCORE_DTYPES=fp8 -DFLASHCORE_HEAD_DIMS=128" SHAPES=my_shapes.txt \
#     COMPARE_ARGS="--dtypes fp8 --impls flashcore,fa3" PASSES=3 bash tools/device/ab.sh
#
# Environment: TREES (name=dir ..., default "base=$BASE new=."), BASE (default .base), PASSES
# (rounds, default 2), OUT (default results/ab), GRIDS (compare.py grids, default "standard
# decode"; "shapes" alone where SHAPES is set), SHAPES (a compare.py --shapes file, timed as the
# grid named "shapes"), COMPARE_ARGS (extra compare.py flags), CMAKE_ARGS (extra configure flags
# of every tree: a build of the instances a change touches, FLASHCORE_DTYPES / _HEAD_DIMS, takes
# about half the full one's minutes), CONTROLS (a regular expression naming the configs the change
# does not touch: ab_summary.py counts their same-pass wins apart), JOBS, ARCHS (default 90a),
# PYTHON.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
BASE=${BASE:-.base}
PASSES=${PASSES:-2}
OUT=${OUT:-results/ab}
ARCHS=${ARCHS:-90a}
JOBS=${JOBS:-$(nproc)}
SHAPES=${SHAPES:-}
if [ -n "$SHAPES" ]; then
  [ -f "$SHAPES" ] || { echo "ab.sh: SHAPES=$SHAPES: no such file" >&2; exit 2; }
  GRIDS=${GRIDS:-shapes}
else
  GRIDS=${GRIDS:-standard decode}
fi
case " $GRIDS " in
  *" shapes "*)
    [ -n "$SHAPES" ] || { echo "ab.sh: the grid 'shapes' needs SHAPES=<file>" >&2; exit 2; } ;;
esac
PYTHON=${PYTHON:-python3}
TREES=${TREES:-"base=$BASE new=."}
mkdir -p "$OUT"
names=()
for tree in $TREES; do
  name=${tree%%=*} dir=${tree#*=}
  [[ "$name" =~ ^[A-Za-z0-9]+$ ]] || { echo "ab.sh: tree name '$name': letters and digits" >&2; exit 2; }
  [ -f "$dir/CMakeLists.txt" ] || { echo "ab.sh: no source tree at $dir ($name)" >&2; exit 2; }
  names+=("$name")
done

build() {  # build SOURCE_DIR BUILD_DIR LOG: the Python module only
  # shellcheck disable=SC2086  # CMAKE_ARGS is a list of flags
  cmake -S "$1" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHCORE_CUDA_ARCHS="$ARCHS" \
    -DFLASHCORE_BUILD_TESTS=OFF -DFLASHCORE_BUILD_BENCH=OFF -DFLASHCORE_BUILD_PYTHON=ON \
    -DPython_EXECUTABLE="$(command -v "$PYTHON")" ${CMAKE_ARGS:-} >"$3" 2>&1 &&
    cmake --build "$2" -j "$JOBS" >>"$3" 2>&1
}
echo "== building ${names[*]} (archs $ARCHS)"
start=$SECONDS
pids=()
for tree in $TREES; do
  build "${tree#*=}" "build-ab-${tree%%=*}" "$OUT/build_${tree%%=*}.log" &
  pids+=($!)
done
failed=0
for i in "${!pids[@]}"; do
  wait "${pids[$i]}" || { echo "build of ${names[$i]} failed"; tail -n 20 "$OUT/build_${names[$i]}.log"; failed=1; }
done
[ "$failed" -eq 0 ] || exit 1
echo "built in $((SECONDS - start)) s"

nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv \
  >"$OUT/gpu.txt" 2>&1
for pass in $(seq 1 "$PASSES"); do
  # The trees take turns going first, so none always runs on the card another warmed.
  shift_by=$(( (pass - 1) % ${#names[@]} ))
  order=("${names[@]:$shift_by}" "${names[@]:0:$shift_by}")
  for side in "${order[@]}"; do
    for grid in $GRIDS; do
      start=$SECONDS
      if [ "$grid" = shapes ]; then what=(--shapes "$SHAPES"); else what=(--grid "$grid"); fi
      # shellcheck disable=SC2086  # COMPARE_ARGS is a list of flags
      PYTHONPATH="build-ab-$side/python${PYTHONPATH:+:$PYTHONPATH}" timeout 600 "$PYTHON" \
        bench/compare.py "${what[@]}" --impls flashcore --backend sm90 --timing graph \
        --skip-ceilings --check-rows 16 ${COMPARE_ARGS:-} --out "$OUT/${grid}_${side}_${pass}" \
        >"$OUT/${grid}_${side}_${pass}.log" 2>&1
      echo "pass $pass $side $grid: rc=$? $((SECONDS - start)) s"
    done
  done
done
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,power.draw --format=csv >>"$OUT/gpu.txt" 2>&1
controls=()
[ -z "${CONTROLS:-}" ] || controls=(--controls "$CONTROLS")
# shellcheck disable=SC2086  # GRIDS is a list
"$PYTHON" tools/device/ab_summary.py "$OUT" --trees "$(IFS=,; echo "${names[*]}")" \
  "${controls[@]}" $GRIDS | tee "$OUT/summary.md"
