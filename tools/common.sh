# Shared by tools/test.sh, tools/bench.sh and .ci/run: one place that knows how to configure and
# build, so the README commands and CI build the same way.
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
ARCHS=${ARCHS:-"80;90a"}
PYTHON=${PYTHON:-python3}

ensure_python_deps() {
  # Pinned test/build dependencies of the Python module (requirements-dev.txt); quick when present.
  if ! "$PYTHON" -c "import nanobind, numpy, pytest" >/dev/null 2>&1; then
    echo "== installing Python dev dependencies (requirements-dev.txt)"
    "$PYTHON" -m pip install -q -r requirements-dev.txt
  fi
}

configure_and_build() {
  local targets=("$@")
  local generator=()
  command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
  local python_flag=OFF
  "$PYTHON" -c "import nanobind" >/dev/null 2>&1 && python_flag=ON
  if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
    echo "== configuring $BUILD_DIR (CUDA archs: $ARCHS, Python module: $python_flag)"
    cmake -S . -B "$BUILD_DIR" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
      -DFLASHCORE_CUDA_ARCHS="$ARCHS" -DFLASHCORE_BUILD_PYTHON="$python_flag" \
      -DPython_EXECUTABLE="$(command -v "$PYTHON")" ${CMAKE_ARGS:-}
  fi
  echo "== building ($JOBS jobs)"
  if [ ${#targets[@]} -gt 0 ]; then
    cmake --build "$BUILD_DIR" -j "$JOBS" --target "${targets[@]}"
  else
    cmake --build "$BUILD_DIR" -j "$JOBS"
  fi
}

run_pytest() {
  # The in-tree module lands in $BUILD_DIR/python (python/CMakeLists.txt).
  local status=0
  PYTHONPATH="$BUILD_DIR/python${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" -m pytest tests/python -q "$@" || status=$?
  # pytest exits 5 when every test was deselected (no Python module built): not a failure here.
  if [ "$status" -ne 0 ] && [ "$status" -ne 5 ]; then return "$status"; fi
}
