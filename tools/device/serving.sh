#!/usr/bin/env bash
# Issue 25 on the accelerator machine: the serving layouts (varlen, kv caches, paged) built,
# tested, sanitized and timed against FlashAttention-3, in two calls that fit a device command.
#
#   STEP=check bash tools/device/serving.sh   # build; ctest -L gpu; torch serving tests (gpu);
#                                             # compute-sanitizer on the serving cases
#   STEP=bench bash tools/device/serving.sh   # a lean build (d128, bf16 and fp16); compare.py
#                                             # --grid serving (FA3 varlen); every page size's
#                                             # decode as graph replays; eager host time per
#                                             # call; paged decode beside FA3's through JAX (a
#                                             # process each): kernel times under ncu, and 200
#                                             # calls back to back (wall clock); ~8 minutes
#   STEP=ab BASE=.base bash tools/device/serving.sh
#                                             # this tree against BASE (an earlier commit's
#                                             # source, `git archive <sha> CMakeLists.txt cmake
#                                             # include src python | tar -x -C .base`): varlen
#                                             # against dense and every cache layout's decode as
#                                             # graph replays, PASSES rounds (default 2), the
#                                             # trees alternating; with .anchors-jax also paged
#                                             # decode under ncu, both trees and FA3's
#
# Knobs: CTEST_ARGS (default "-L gpu") picks the ctest cases of STEP=check, SANITIZE=0 skips its
# compute-sanitizer runs; DECODE_CONFIGS (";"-separated) replaces the paged decode configs of
# STEP=bench and STEP=ab, NCU_CLOCK their ncu clock control (default none: the card's own clocks,
# as a server runs; base locks the base clock, where FlashCore's page-1 gather read 10% slower and
# FA3 2%: docs/kernels.md, runs 195-196). STEP=ab: about 7 minutes with its ncu cells (runs
# 218-219 ran its commands by hand, runs 220-222 STEP=bench's).
#
# Carry .anchors (FA3 wheel) for STEP=bench and .anchors-jax (flash_attn3_jax wheel) for the
# JAX anchor; both fit one call with a lean tree. STEP=ab: carry BASE (and .anchors-jax). Logs
# and JSON go to OUT (default $OUT or results/serving); the last lines printed are the summary.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
OUT=${OUT:-results/serving}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
STEP=${STEP:-check}
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
SITE=${SITE:-/tmp/flashcore-anchors}
export PYTHONPATH="$PWD/$BUILD_DIR/python:$SITE${PYTHONPATH:+:$PYTHONPATH}"
summary=()

run() {  # run NAME CMD...: output to OUT/NAME.log, one summary line
  local name=$1 start=$SECONDS rc
  shift
  "$@" >"$OUT/$name.log" 2>&1
  rc=$?
  summary+=("$name: $([ "$rc" -eq 0 ] && echo pass || echo "FAIL rc=$rc") ($((SECONDS - start)) s)")
  [ "$rc" -eq 0 ] || tail -n 25 "$OUT/$name.log"
  return "$rc"
}

build() {
  if [ ! -f "$BUILD_DIR/build.ninja" ]; then
    cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DFLASHCORE_CUDA_ARCHS="${ARCHS:-80;90a}" -DFLASHCORE_BUILD_PYTHON=ON \
      -DPython_EXECUTABLE="$(command -v python3)" || return 1
  fi
  cmake --build "$BUILD_DIR" -j "$JOBS"
}

install_anchors() {
  mkdir -p "$SITE"
  local wheel
  for wheel in .anchors/*.whl .anchors-jax/*.whl; do
    [ -f "$wheel" ] && python3 -m pip install -q --no-index --no-deps --no-compile \
      --target "$SITE" "$wheel"
  done
  [ -f .anchors/flash_attn_config.py ] && cp .anchors/flash_attn_config.py "$SITE/"
  return 0
}

# ncu_kernel_us IMPL ARGS...: the median gpu__time_duration (us) of the attention kernels of one
# paged-decode process (bench/paged_decode_anchor.py), the warm-up call's kernels left out.
# NCU_TAG, when set, names the log apart (the trees of STEP=ab).
ncu_kernel_us() {
  local impl=$1 log
  shift
  log="$OUT/ncu_${impl}${NCU_TAG:+_$NCU_TAG}_$(echo "$*" | tr ' -' '__').csv"
  ncu --clock-control "${NCU_CLOCK:-none}" --csv --metrics gpu__time_duration.sum \
    --target-processes all \
    python3 bench/paged_decode_anchor.py --impl "$impl" "$@" >"$log" 2>&1 || { echo "ncu failed"; return 1; }
  local keys="flash,Flash"  # FA3: its scheduler-prepare and forward kernels
  [ "$impl" = flashcore ] && keys="sm90,sm80,combine"
  python3 tools/device/ncu_times.py "$log" --kernels "$keys"
}

# decode_configs: STEP=bench's and STEP=ab's paged decode configs, one a line (page 0: the
# contiguous cache, FlashCore only).
decode_configs() {
  local b64="--batch 64 --keys 4096 --page-size" default
  default="$b64 0;$b64 16;$b64 1;$b64 64"
  default+=";--batch 16 --keys 8192 --page-size 16;--batch 1 --keys 32768 --page-size 16"
  tr ';' '\n' <<<"${DECODE_CONFIGS:-$default}"
}

# fa3_splits CONFIG: FA3's num_splits for a decode config (16 at batch 1, as FA3 picks there).
fa3_splits() {
  if [[ "$1" == "--batch 1 "* ]]; then echo 16; else echo 1; fi
}

# paged_decode_ncu_table NAME=PYTHON_DIR...: the ncu decode table of every decode config, a
# FlashCore column per build (NAME, its Python module's folder), then FA3's through JAX.
paged_decode_ncu_table() {
  local build cfg row header="config"
  for build in "$@"; do header+=" | ${build%%=*}"; done
  echo "paged decode kernel time (us, ncu gpu__time_duration, median of 5 calls," \
    "clock control ${NCU_CLOCK:-none}; a process per cell)"
  echo "$header | fa3-jax"
  mapfile -t configs < <(decode_configs)
  for cfg in "${configs[@]}"; do
    row=$cfg
    for build in "$@"; do
      # shellcheck disable=SC2086  # a config is several flags
      row+=" | $(PYTHONPATH="${build#*=}:$SITE" NCU_TAG=${build%%=*} ncu_kernel_us flashcore $cfg)"
    done
    if [[ "$cfg" == *"--page-size 0" ]]; then echo "$row |"; continue; fi
    # shellcheck disable=SC2086
    echo "$row | $(ncu_kernel_us fa3-jax $cfg --splits "$(fa3_splits "$cfg")")"
  done
}

# wall_us IMPL CONFIG...: us per call of 200 paged decode calls issued back to back (median of 5
# rounds; bench/paged_decode_anchor.py --wall-calls): what lies between kernels counts too.
wall_us() {
  python3 bench/paged_decode_anchor.py --impl "$@" --calls 20 --wall-calls 200 --wall-rounds 5 \
    2>>"$OUT/paged_decode_wall.err" | tail -n 1 |
    python3 -c "import json, sys; print(f\"{json.load(sys.stdin)['wall_us_per_call']:.1f}\")" \
    2>/dev/null || echo fail
}

# paged_decode_wall_table: FlashCore (this tree's build) and FA3 through JAX, a process each, the
# order swapped from config to config.
paged_decode_wall_table() {
  local cfg fc fa swap=0
  echo "paged decode, 200 calls back to back (wall us per call, median of 5 rounds)"
  echo "config | flashcore | fa3-jax | fa3 / flashcore time"
  mapfile -t configs < <(decode_configs)
  for cfg in "${configs[@]}"; do
    if [[ "$cfg" == *"--page-size 0" ]]; then
      # shellcheck disable=SC2086
      echo "$cfg | $(wall_us flashcore $cfg) |"
      continue
    fi
    swap=$((1 - swap))
    # shellcheck disable=SC2086
    if [ "$swap" -eq 1 ]; then
      fc=$(wall_us flashcore $cfg); fa=$(wall_us fa3-jax $cfg --splits "$(fa3_splits "$cfg")")
    else
      fa=$(wall_us fa3-jax $cfg --splits "$(fa3_splits "$cfg")"); fc=$(wall_us flashcore $cfg)
    fi
    echo "$cfg | $fc | $fa | $(python3 -c "print(f'{$fa / $fc:.3f}')" 2>/dev/null)"
  done
}

# lean_build SOURCE BUILD LOG: the Python module for sm_90a with the d128 kernels of both 16-bit
# dtypes, all that STEP=ab's timings call.
lean_build() {
  { cmake -S "$1" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHCORE_CUDA_ARCHS=90a \
      -DFLASHCORE_BUILD_PYTHON=ON -DFLASHCORE_BUILD_TESTS=OFF -DFLASHCORE_BUILD_BENCH=OFF \
      -DFLASHCORE_HEAD_DIMS=128 "-DFLASHCORE_DTYPES=bf16;fp16" \
      -DPython_EXECUTABLE="$(command -v python3)" &&
      cmake --build "$2" -j "$JOBS"; } >"$3" 2>&1
}

if [ "$STEP" = check ]; then
  run build build || { printf '%s\n' "${summary[@]}"; exit 1; }
  # shellcheck disable=SC2086
  run ctest_gpu ctest --test-dir "$BUILD_DIR" ${CTEST_ARGS:--L gpu} --output-on-failure
  run pytest_serving_gpu python3 -m pytest -q -m gpu tests/python/test_varlen_torch.py \
    tests/python/test_kvcache_torch.py tests/python/test_torch_op.py
  if [ "${SANITIZE:-1}" != 0 ]; then
    run sanitize_serving bash tools/device/sanitize.sh sm90 sm80
    grep -E "\| (FINDINGS|clean)" "$OUT/sanitize_serving.log" | grep -c clean | \
      sed 's/^/sanitizer clean runs: /'
    grep -E "FINDINGS" "$OUT/sanitize_serving.log" | head -5
  fi
elif [ "$STEP" = bench ]; then
  run build lean_build . build-serving-new "$OUT/build_new.log" ||
    { printf '%s\n' "${summary[@]}"; exit 1; }
  run anchors install_anchors
  export PYTHONPATH="$PWD/build-serving-new/python:$SITE"
  run compare_serving python3 bench/compare.py --grid serving --timing graph --skip-ceilings \
    --impls flashcore,fa3 --out "$OUT/compare_serving"
  run paged_graph python3 dev/sm90/paged_decode_graph_timing.py --json "$OUT/paged_graph.json"
  run host_overhead python3 dev/host_overhead/bench_host_overhead.py --calls 4000 --rounds 8
  if compgen -G ".anchors-jax/*.whl" >/dev/null; then
    paged_decode_ncu_table "flashcore=$PWD/build-serving-new/python" \
      >"$OUT/paged_decode_ncu.txt" 2>&1
    paged_decode_wall_table >"$OUT/paged_decode_wall.txt" 2>&1
    cat "$OUT/paged_decode_ncu.txt" "$OUT/paged_decode_wall.txt"
  fi
  grep -v "^\s*$" "$OUT/host_overhead.log"
  tail -n 12 "$OUT/paged_graph.log"
elif [ "$STEP" = ab ]; then
  BASE=${BASE:-.base}
  [ -f "$BASE/CMakeLists.txt" ] || { echo "serving.sh: no source tree at BASE=$BASE" >&2; exit 2; }
  lean_build "$BASE" build-serving-base "$OUT/build_base.log" &
  base_pid=$!
  lean_build . build-serving-new "$OUT/build_new.log" &
  new_pid=$!
  for tree in base new; do
    pid=$base_pid
    [ "$tree" = new ] && pid=$new_pid
    wait "$pid" || { echo "build of $tree failed"; tail -n 20 "$OUT/build_$tree.log"; exit 1; }
  done
  for pass in $(seq 1 "${PASSES:-2}"); do
    trees=(base new)  # swapped every other pass: neither always runs on a card the other warmed
    [ $((pass % 2)) -eq 0 ] && trees=(new base)
    for tree in "${trees[@]}"; do
      for timing in varlen paged_decode; do
        PYTHONPATH="$PWD/build-serving-$tree/python" run "${timing}_${tree}_$pass" \
          python3 "dev/sm90/${timing}_graph_timing.py" --json "$OUT/${timing}_${tree}_$pass.json"
      done
    done
  done
  for timing in varlen paged_decode; do
    python3 dev/sm90/summarize_graph_timing.py --base "$OUT/${timing}"_base_*.json \
      --new "$OUT/${timing}"_new_*.json >"$OUT/${timing}_summary.md" 2>&1
    cat "$OUT/${timing}_summary.md"; echo
  done
  if compgen -G ".anchors-jax/*.whl" >/dev/null; then
    run anchors install_anchors
    paged_decode_ncu_table "new=$PWD/build-serving-new/python" \
      "base=$PWD/build-serving-base/python" >"$OUT/paged_decode_ncu.txt" 2>&1
    cat "$OUT/paged_decode_ncu.txt"
  fi
fi
echo
printf '%s\n' "${summary[@]}"
[ -f "$OUT/compare_serving/compare_serving.md" ] && tail -n 40 "$OUT/compare_serving/compare_serving.md"
exit 0
