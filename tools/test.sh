#!/usr/bin/env bash
# The test command (README): builds everything this machine can build and runs every test that
# can run here. CUDA kernels are compiled whenever nvcc is present, even without a GPU, so a
# compile error never hides; GPU tests report "skipped" without a GPU.
#
#   bash tools/test.sh            # venv .venv, build into ./build, run ctest and pytest
#   BUILD_DIR=... JOBS=... ARCHS="80;90a" CMAKE_ARGS=... bash tools/test.sh   (tools/common.sh)
#
# One line per step on the terminal, then a summary; each step's full output is in
# build/logs/<step>.log, and a failing step prints its log's last lines. Exit code 0 only when
# everything built and every test passed.
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/common.sh

start=$SECONDS
prepare

# Both suites run even when the first fails, so one run reports every failure.
failed=()
step ctest "C++ tests, $JOBS jobs" \
  ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$JOBS" || failed+=(ctest)
step pytest "Python tests (not gpu)" run_pytest -m "not gpu" || failed+=(pytest)

echo
echo "ctest: $(ctest_counts "$LOG_DIR/ctest.log")"
echo "pytest: $(pytest_counts "$LOG_DIR/pytest.log")"
if [ ${#failed[@]} -gt 0 ]; then
  echo "FAILED: ${failed[*]} ($((SECONDS - start)) s); full logs in $LOG_DIR/"
  exit 1
fi
echo "all tests passed in $((SECONDS - start)) s; full logs in $LOG_DIR/"
