#!/usr/bin/env bash
# The README's two commands in either order, and a build tree left in a bad state (issue 22):
# tools/bench.sh must find the tree tools/test.sh left ready (and so the reverse, as both prepare
# it the same way), and a tree that lost build.ninja, was configured by hand with other options
# (the Python module OFF, as the old bench.sh did) or saw its configure killed midway must be
# configured again, with the module ON and without recompiling the CUDA kernels.
#
#   bash tools/test.sh && bash tests/scripts/test_setup.sh     (what .ci/run does)
#
# It works on the build tree tools/test.sh left (same BUILD_DIR, CMAKE_ARGS, ...), so it costs a
# few configures and bench runs, not a build. Prints "setup: N passed, N failed"; exit 1 on any
# failure.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tools/common.sh

# The bench.sh runs below log apart, so the logs of the tools/test.sh run stay as they were.
export LOG_DIR=$LOG_DIR/test_setup
[ -f "$CONFIGURE_STAMP" ] || die "run bash tools/test.sh first: this test reuses its build tree"
passed=0
failed=0
out=$(mktemp)
trap 'rm -f "$out"' EXIT

pass() {
  echo "ok   $1"
  passed=$((passed + 1))
}

fail() {  # fail NAME WHY: the output of the last command shows what went wrong
  echo "FAIL $1: $2; output:"
  sed 's/^/    /' "$out"
  failed=$((failed + 1))
}

# bench_prints NAME PATTERN: tools/bench.sh (a tiny config) succeeds and prints a line matching
# PATTERN (grep -E) among its progress lines.
bench_prints() {
  if ! bash tools/bench.sh --seqlen 64 --heads 1 >"$out" 2>&1; then
    fail "$1" "tools/bench.sh failed"
  elif ! grep -qE "$2" "$out"; then
    fail "$1" "no line matching '$2'"
  else
    pass "$1"
  fi
}

# 1. test.sh then bench.sh: the tree is ready as it is.
bench_prints "bench.sh after test.sh: no configure" "^configure +$BUILD_DIR is up to date"

# 2. A cache as the old bench.sh left it: the Python module OFF, no stamp.
cmake -B "$BUILD_DIR" -DFLASHCORE_BUILD_PYTHON=OFF >"$out" 2>&1 || fail "configure OFF" "cmake failed"
rm -f "$CONFIGURE_STAMP"
bench_prints "cache without the Python module: configured again" "^configure .*did not finish.* ok"
if grep -q '^FLASHCORE_BUILD_PYTHON:BOOL=ON$' "$BUILD_DIR/CMakeCache.txt"; then
  pass "Python module ON again"
else
  fail "Python module ON again" "$BUILD_DIR/CMakeCache.txt has FLASHCORE_BUILD_PYTHON OFF"
fi

# 3. build.ninja (or Makefile) gone, as after a configure interrupted while generating.
rm -f "$BUILD_DIR/$(generator_file)"
bench_prints "$(generator_file) missing: configured again" "^configure .*missing\) \.\.\. ok"

# 4. A configure killed midway (within its first second).
mapfile -t args < <(configure_args)
rm -f "$CONFIGURE_STAMP"
timeout 1 cmake --fresh -B "$BUILD_DIR" "${args[@]}" >/dev/null 2>&1 || true
bench_prints "killed configure: configured again" "^configure .* ok"

# The configures recompiled no CUDA kernel (the minutes of a build). They do recompile
# kernel_registry.cpp: src/CMakeLists.txt rewrites flashcore_kernel_list.inc on every configure.
if ! cmake --build "$BUILD_DIR" -j "$JOBS" >"$out" 2>&1; then
  fail "build after the configures" "cmake --build failed"
elif grep -q "Building CUDA object" "$out"; then
  fail "no CUDA kernel recompiled by the configures" "CUDA objects were rebuilt"
else
  pass "no CUDA kernel recompiled by the configures"
fi

echo "setup: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
