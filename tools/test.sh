#!/usr/bin/env bash
# The test command (README): builds everything this machine can build and runs every test that
# can run here. CUDA kernels are compiled whenever nvcc is present, even without a GPU, so a
# compile error never hides; GPU tests report "skipped" without a GPU.
#
#   bash tools/test.sh            # build into ./build, run C++ (ctest) and Python (pytest) tests
#   BUILD_DIR=... JOBS=... ARCHS="80;90a" bash tools/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/common.sh

ensure_python_deps
configure_and_build

echo "== C++ tests (ctest)"
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$JOBS"

echo "== Python tests (pytest)"
run_pytest -m "not gpu"
