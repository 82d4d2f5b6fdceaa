#!/usr/bin/env bash
# The one command for the accelerator machine: build with all cores, run the GPU tests, run
# flashcore-bench and bench/compare.py (flashcore vs FA3 and torch SDPA cuDNN / FA2), and keep
# every log.
#
#   bash tools/device/check.sh                       # ARCHS=90a, GRID=quick, logs in ./results
#   GRID=standard OUT=/somewhere bash tools/device/check.sh
#   SKIP_BUILD=1 SKIP_TESTS=1 GRID=hd128 COMPARE_ARGS="--compare-backends sm80,sm90" bash ...
#   SKIP_BUILD=1 SKIP_TESTS=1 SKIP_BENCH=1 GRID=llm COMPARE_ARGS="--timing graph" bash ...
#   PASSES=2 GRID=standard COMPARE_ARGS="--dtypes bf16 --timing graph" bash ...   # a results run
#
# FA3 (FlashAttention-3, the anchor of BENCHMARKS.md) comes as a prebuilt wheel, not from a
# registry on the accelerator machine (it reaches nothing outside). On the dev machine, once:
#   bash <shared>/anchors/fetch.sh .anchors   # fa3_fwd-0.0.3-*.whl (27 MB) + flash_attn_config.py
# keep .anchors out of git and carry it with the device call (carry: [".anchors"]; the tree and
# what is carried share 64 MiB). This script installs it before compare.py, as one would by hand:
#   python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site \
#     .anchors/fa3_fwd-*.whl && cp .anchors/flash_attn_config.py /tmp/site/ \
#     && export PYTHONPATH=/tmp/site:$PYTHONPATH
# Without the wheel, compare.py's FA3 column says "not installed" and nothing fails; the wheel
# has no fp16 (those cells say "fp16 n/a"). COMPARE_ARGS="--impls flashcore,fa3" skips SDPA's
# backends.
#
# Environment:
#   OUT           output folder (default ./results): <step>.log per step, bench_*.json,
#                 compare/compare.{json,md}, compare-cpu/..., summary.txt
#   ARCHS         FLASHCORE_CUDA_ARCHS (default 90a)           BUILD_DIR   (default build)
#   GRID          compare.py grid (default quick)              COMPARE_ARGS  extra compare.py flags
#   PASSES        compare.py passes over the grid, one after another (default 1); with 2 or more
#                 compare/ holds bench/merge_passes.py of compare_pass1..N: each figure the
#                 median of every pass's replays (one pass can meet a config in one clock regime)
#   SKIP_BUILD=1  reuse BUILD_DIR as it is                     SKIP_TESTS=1  no ctest/pytest
#   SKIP_BENCH=1  no flashcore-bench and no CPU compare.py (the GPU compare.py only)
#   ANCHORS       folder with the FA3 wheel (default .anchors)  ANCHOR_SITE  where it installs
#                 (default /tmp/flashcore-anchors, put first on PYTHONPATH)
#   EXTRA         extra shell commands, run last as their own step (log: extra.log)
#   CMAKE_ARGS    extra configure flags                        JOBS (default: all cores)
#   ARCHIVE       a .tgz path outside OUT: OUT packed into one file at the end (where the files
#                 that come back from a machine are counted, e.g. ARCHIVE=$OUT.tgz)
#   *_TIMEOUT     seconds per step: BUILD (480), TEST (300), BENCH (180), COMPARE (420)
# Without a GPU (or before any CUDA kernel works) the CPU steps still run and report: the CPU
# backend through flashcore-bench and compare.py on the tiny grid.
# Exit code: 0 when every step passed, 1 otherwise, 2 for a setting it refuses (PASSES, ARCHIVE)
# before any step. The step summary and the compare table are printed last.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
REPO=$(pwd)

PASSES=${PASSES:-1}
if ! [[ "$PASSES" =~ ^[1-9][0-9]*$ ]]; then
  echo "check.sh: PASSES must be a whole number of compare.py passes, 1 or more, got '$PASSES'" >&2
  exit 2
fi
OUT=${OUT:-./results}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
if [ -n "${ARCHIVE:-}" ]; then  # packed at the end: a file inside OUT would be packed into itself
  archive_dir=$(cd "$(dirname "$ARCHIVE")" 2>/dev/null && pwd) ||
    { echo "check.sh: ARCHIVE=$ARCHIVE: its folder does not exist" >&2; exit 2; }
  case "$archive_dir/" in
    "$OUT"/*) echo "check.sh: ARCHIVE=$ARCHIVE lies inside OUT=$OUT; name a path outside it" >&2
              exit 2 ;;
  esac
fi
ARCHS=${ARCHS:-90a}
GRID=${GRID:-quick}
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
PYTHON=${PYTHON:-python3}
BUILD_TIMEOUT=${BUILD_TIMEOUT:-480}
TEST_TIMEOUT=${TEST_TIMEOUT:-300}
BENCH_TIMEOUT=${BENCH_TIMEOUT:-180}
COMPARE_TIMEOUT=${COMPARE_TIMEOUT:-420}
BENCH="$BUILD_DIR/bench/flashcore-bench"
export PYTHONPATH="$REPO/$BUILD_DIR/python${PYTHONPATH:+:$PYTHONPATH}"
ANCHORS=${ANCHORS:-.anchors}
ANCHOR_SITE=${ANCHOR_SITE:-/tmp/flashcore-anchors}
# The accelerator machine's copy of the tree has no .git, or one that lags behind its files: pass
# FLASHCORE_COMMIT=<sha> along. Without it the stamp is bench/compare.py's (<sha>-dirty where
# tracked files differ from HEAD).
COMMIT=$(cd bench && "$PYTHON" -c 'import compare; print(compare.git_commit())' 2>/dev/null ||
  echo unknown)
export FLASHCORE_COMMIT=$COMMIT

STEPS=()    # "name|status|seconds|log"
FAILED=0

# step NAME TIMEOUT_S CMD...: runs CMD under `timeout`, output to $OUT/NAME.log; records the
# status (pass, FAIL rc=N, TIMEOUT after Ns) and the duration. Prints the log tail on failure.
# EMPTY_RC=N before the call: exit code N means "no test selected", shown as such, not a failure.
step() {
  local name=$1 limit=$2
  shift 2
  local log="$OUT/$name.log" start=$SECONDS status rc
  echo "== $name (limit ${limit}s): $*"
  timeout --kill-after=10 "$limit" "$@" >"$log" 2>&1
  rc=$?
  if [ "$rc" -eq 0 ]; then
    status=pass
  elif [ -n "${EMPTY_RC:-}" ] && [ "$rc" -eq "$EMPTY_RC" ]; then
    status="NO TESTS selected (rc=$rc)"
  elif [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    status="TIMEOUT after ${limit}s"
  else
    status="FAIL rc=$rc"
  fi
  if [ "$status" != pass ]; then
    [[ "$status" == NO\ TESTS* ]] || FAILED=1
    echo "-- $name: $status; last lines of $log:"
    tail -n 25 "$log" | sed 's/^/   /'
  fi
  STEPS+=("$name|$status|$((SECONDS - start))|$(basename "$log")")
}

skip() {  # skip NAME REASON: shown in the summary, never silent
  echo "== $1: skipped ($2)"
  STEPS+=("$1|skipped: $2|0|-")
}

has_gpu() { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; }

# --- FA3 anchor: the carried wheel, installed where compare.py imports it from -------------------
fa3_wheels=("$ANCHORS"/fa3_fwd-*.whl)
fa3_wheel=""
[ -f "${fa3_wheels[0]}" ] && fa3_wheel=${fa3_wheels[0]}
if "$PYTHON" -c "import fa3_fwd_interface" >/dev/null 2>&1; then
  skip fa3_install "fa3_fwd_interface already importable"
elif [ -z "$fa3_wheel" ]; then
  skip fa3_install "no $ANCHORS/fa3_fwd-*.whl carried: compare.py's FA3 column says not installed"
else
  step fa3_install 180 "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --upgrade \
    --target "$ANCHOR_SITE" "$fa3_wheel"
  # The wheel's interface imports flash_attn_config; fetch.sh writes it beside the wheel.
  if [ -f "$ANCHORS/flash_attn_config.py" ]; then
    cp "$ANCHORS/flash_attn_config.py" "$ANCHOR_SITE/"
  else
    echo 'from fa3_fwd_config import CONFIG  # noqa: F401' >"$ANCHOR_SITE/flash_attn_config.py"
  fi
  export PYTHONPATH="$ANCHOR_SITE:$PYTHONPATH"
fi

# --- environment: what ran where --------------------------------------------------------------
{
  echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  echo "commit: $COMMIT"
  echo "dirty: $(git status --porcelain --untracked-files=no 2>/dev/null | wc -l) changed files"
  echo "host: $(hostname), $(nproc) cores"
  if has_gpu; then
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit \
      --format=csv,noheader
  else
    echo "gpu: none"
  fi
  command -v nvcc >/dev/null && nvcc --version | tail -n 2
  "$PYTHON" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, \
'cudnn', torch.backends.cudnn.version())" 2>&1 || true
  "$PYTHON" -c "import fa3_fwd_interface, importlib.metadata as m; \
print('fa3-fwd', m.version('fa3-fwd'), 'from', fa3_fwd_interface.__file__)" 2>&1 | tail -n 1 || true
} >"$OUT/environment.txt" 2>&1
cat "$OUT/environment.txt"

# --- build --------------------------------------------------------------------------------------
python_flag=OFF
if [ -f python/CMakeLists.txt ] && "$PYTHON" -c "import nanobind" >/dev/null 2>&1; then
  python_flag=ON
fi
if [ -n "${SKIP_BUILD:-}" ]; then
  skip configure "SKIP_BUILD"
  skip build "SKIP_BUILD"
else
  generator=()
  command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
  # shellcheck disable=SC2086  # CMAKE_ARGS is a list of flags
  step configure 300 cmake -S . -B "$BUILD_DIR" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DFLASHCORE_CUDA_ARCHS="$ARCHS" -DFLASHCORE_BUILD_PYTHON="$python_flag" \
    -DPython_EXECUTABLE="$(command -v "$PYTHON")" ${CMAKE_ARGS:-}
  step build "$BUILD_TIMEOUT" cmake --build "$BUILD_DIR" -j "$JOBS"
fi
grep -h "CUDA archs\|nvcc not found\|building the CPU" "$OUT/configure.log" 2>/dev/null | head -3

# --- tests --------------------------------------------------------------------------------------
if [ -n "${SKIP_TESTS:-}" ]; then
  skip ctest_gpu "SKIP_TESTS"
  skip pytest_gpu "SKIP_TESTS"
else
  if has_gpu; then
    step ctest_gpu "$TEST_TIMEOUT" ctest --test-dir "$BUILD_DIR" -L gpu --output-on-failure \
      --no-tests=error
  else
    skip ctest_gpu "no GPU"
  fi
  if [ "$python_flag" = OFF ]; then
    skip pytest_gpu "Python module not built (nanobind missing)"
  elif ! "$PYTHON" -c "import pytest" >/dev/null 2>&1; then
    skip pytest_gpu "pytest not installed"
  else
    # pytest exits 5 when the marker selects nothing: shown as "NO TESTS selected".
    EMPTY_RC=5 step pytest_gpu "$TEST_TIMEOUT" "$PYTHON" -m pytest -m gpu tests/python -q -rs
  fi
fi

# --- flashcore-bench ---------------------------------------------------------------------------
if [ -n "${SKIP_BENCH:-}" ]; then
  skip bench_default "SKIP_BENCH"
  skip bench_cpu "SKIP_BENCH"
elif [ -x "$BENCH" ]; then
  # The no-flag default: the best backend present (a CUDA kernel on a GPU) + the reference.
  step bench_default "$BENCH_TIMEOUT" "$BENCH" --json "$OUT/bench_default.json"
  # The CPU backend on the small grid: reported even while no CUDA kernel works.
  step bench_cpu "$BENCH_TIMEOUT" "$BENCH" --backend cpu --grid small \
    --json "$OUT/bench_cpu.json"
else
  skip bench_default "$BENCH not built"
  skip bench_cpu "$BENCH not built"
fi

# --- compare.py ---------------------------------------------------------------------------------
gpu_torch=0
"$PYTHON" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" \
  >/dev/null 2>&1 && gpu_torch=1
if ! "$PYTHON" -c "import torch" >/dev/null 2>&1; then
  skip compare "torch not installed"
  skip compare_cpu "torch not installed"
else
  if [ "$gpu_torch" = 1 ] && [ "$PASSES" = 1 ]; then
    # shellcheck disable=SC2086  # COMPARE_ARGS is a list of flags
    step compare "$COMPARE_TIMEOUT" "$PYTHON" bench/compare.py --grid "$GRID" \
      --out "$OUT/compare" ${COMPARE_ARGS:-}
  elif [ "$gpu_torch" = 1 ]; then
    pass_dirs=()
    for pass in $(seq 1 "$PASSES"); do
      # shellcheck disable=SC2086  # COMPARE_ARGS is a list of flags
      step "compare_pass$pass" "$COMPARE_TIMEOUT" "$PYTHON" bench/compare.py --grid "$GRID" \
        --out "$OUT/compare_pass$pass" ${COMPARE_ARGS:-}
      pass_dirs+=("$OUT/compare_pass$pass")
    done
    step compare 60 "$PYTHON" bench/merge_passes.py "$OUT/compare" "${pass_dirs[@]}"
  else
    skip compare "no CUDA device visible to torch"
  fi
  if [ -n "${SKIP_BENCH:-}" ]; then
    skip compare_cpu "SKIP_BENCH"
  else
    step compare_cpu "$BENCH_TIMEOUT" "$PYTHON" bench/compare.py --grid tiny --device cpu \
      --backend cpu --out "$OUT/compare-cpu"
  fi
fi

if [ -n "${EXTRA:-}" ]; then
  step extra "${EXTRA_TIMEOUT:-300}" bash -c "$EXTRA"
fi

# --- summary (last: the reply shows the end of the output) --------------------------------------
{
  if [ -f "$OUT/bench_default.log" ]; then
    echo
    echo "flashcore-bench (no flags):"
    grep -E "^(config|-|b[0-9]|ERROR|FAIL|all results|SOME)" "$OUT/bench_default.log"
  fi
  echo
  echo "## check.sh summary: commit $COMMIT," \
       "$(has_gpu && nvidia-smi --query-gpu=name --format=csv,noheader | head -1 || echo 'no GPU')"
  echo
  echo "| step | status | seconds | log |"
  echo "|---|---|---|---|"
  for entry in "${STEPS[@]}"; do
    IFS='|' read -r name status seconds log <<<"$entry"
    echo "| $name | $status | $seconds | $log |"
  done
  echo
  for table in "$OUT/compare-cpu/compare.md" "$OUT/compare/compare.md"; do
    [ -f "$table" ] && { cat "$table"; echo; }
  done
} | tee "$OUT/summary.txt"
if [ -n "${ARCHIVE:-}" ]; then
  tar -czf "$ARCHIVE" -C "$(dirname "$OUT")" "$(basename "$OUT")" ||
    { echo "check.sh: could not pack $OUT into $ARCHIVE" >&2; FAILED=1; }
fi
exit "$FAILED"
