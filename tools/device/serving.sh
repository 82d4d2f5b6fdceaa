#!/usr/bin/env bash
# Issue 25 on the accelerator machine: the serving layouts (varlen, kv caches, paged) built,
# tested, sanitized and timed against FlashAttention-3, in two calls that fit a device command.
#
#   STEP=check bash tools/device/serving.sh   # build; ctest -L gpu; torch serving tests (gpu);
#                                             # compute-sanitizer on the serving cases
#   STEP=bench bash tools/device/serving.sh   # compare.py --grid serving (FA3 varlen), then
#                                             # paged decode kernel times under ncu: FlashCore
#                                             # and FA3 through JAX (a process each)
#
# Knobs: CTEST_ARGS (default "-L gpu") picks the ctest cases of STEP=check, SANITIZE=0 skips its
# compute-sanitizer runs; DECODE_CONFIGS (";"-separated) replaces STEP=bench's ncu decode configs,
# NCU_CLOCK their clock control (default base: ncu locks the base clock; none: the card's own
# clocks, as a server runs; page-1 FlashCore read 10% slower at base, FA3 2%: docs/kernels.md,
# runs 195-196).
#
# Carry .anchors (FA3 wheel) for STEP=bench and .anchors-jax (flash_attn3_jax wheel) for the
# JAX anchor; both fit one call with a lean tree. Logs and JSON go to OUT (default $OUT or
# results/serving); the last lines printed are the summary.
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
ncu_kernel_us() {
  local impl=$1 log
  shift
  log="$OUT/ncu_${impl}_$(echo "$*" | tr ' -' '__').csv"
  ncu --clock-control "${NCU_CLOCK:-base}" --csv --metrics gpu__time_duration.sum \
    --target-processes all \
    python3 bench/paged_decode_anchor.py --impl "$impl" "$@" >"$log" 2>&1 || { echo "ncu failed"; return 1; }
  local keys="flash,Flash"  # FA3: its scheduler-prepare and forward kernels
  [ "$impl" = flashcore ] && keys="sm90,sm80,combine"
  python3 tools/device/ncu_times.py "$log" --kernels "$keys"
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
  run build build || { printf '%s\n' "${summary[@]}"; exit 1; }
  run anchors install_anchors
  run compare_serving python3 bench/compare.py --grid serving --timing graph \
    --out "$OUT/compare_serving"
  {
    echo "paged decode kernel time (us, ncu gpu__time_duration, median of 5 calls," \
      "clock control ${NCU_CLOCK:-base})"
    echo "config | flashcore | fa3-jax"
    default_configs="--batch 64 --keys 4096 --page-size 16;--batch 64 --keys 4096 --page-size 1"
    default_configs+=";--batch 64 --keys 4096 --page-size 64;--batch 64 --keys 4096 --page-size 0"
    default_configs+=";--batch 16 --keys 8192 --page-size 16;--batch 1 --keys 32768 --page-size 16"
    IFS=';' read -r -a configs <<<"${DECODE_CONFIGS:-$default_configs}"
    for cfg in "${configs[@]}"; do
      splits=1
      [[ "$cfg" == "--batch 1 "* ]] && splits=16
      # shellcheck disable=SC2086
      echo "$cfg | $(ncu_kernel_us flashcore $cfg) | $(ncu_kernel_us fa3-jax $cfg --splits $splits)"
    done
  } >"$OUT/paged_decode_ncu.txt" 2>&1
  cat "$OUT/paged_decode_ncu.txt"
fi
echo
printf '%s\n' "${summary[@]}"
[ -f "$OUT/compare_serving/compare_serving.md" ] && tail -n 40 "$OUT/compare_serving/compare_serving.md"
exit 0
