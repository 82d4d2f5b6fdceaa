# shellcheck shell=bash
# Shared by tools/test.sh, tools/bench.sh and .ci/run: one place that knows how to set up the
# Python environment, configure and build. Both README commands prepare the build tree the same
# way (same venv, same CMake options, Python module included), so either can run first, and a
# build tree left half-configured (interrupted cmake, deleted build.ninja, other options) is
# configured again instead of failing.
#
# Environment (all optional):
#   BUILD_DIR   build tree (default build)
#   LOG_DIR     where every step's full output goes (default $BUILD_DIR/logs)
#   JOBS        parallel build/test jobs (default: all cores)
#   ARCHS       FLASHCORE_CUDA_ARCHS (default "80;90a")
#   CMAKE_ARGS  extra configure flags, e.g. -DFLASHCORE_ENABLE_CUDA=OFF
#   VENV        Python environment the module is built for and tested in (default: the active
#               one, $VIRTUAL_ENV, else .venv in the repo root, created on first use). The
#               system Python's site-packages are never touched.
#   PYTHON      interpreter that creates .venv (default python3)
# The caller cds to the repo root first and may point fd 3 (progress lines) elsewhere after
# sourcing this file; by default it is stdout.

BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
ARCHS=${ARCHS:-"80;90a"}
PYTHON=${PYTHON:-python3}
VENV=${VENV:-${VIRTUAL_ENV:-.venv}}
LOG_DIR=${LOG_DIR:-$BUILD_DIR/logs}
# Written after a configure that finished, holding what it was configured with: a build tree
# without it (or with other contents) is configured again.
CONFIGURE_STAMP=$BUILD_DIR/.flashcore-configure
exec 3>&1

# ---- progress lines and logs -----------------------------------------------------------------

# step NAME WHAT CMD...: runs CMD with all its output in $LOG_DIR/NAME.log and prints one line:
# NAME, WHAT, then "ok" and the seconds taken. On failure it prints the log's last lines and
# where the whole log is, and returns CMD's exit code. CMD runs in a context where `set -e` does
# not apply (bash ignores it under ||), so shell functions passed as CMD check their own errors.
step() {
  local name=$1 what=$2
  shift 2
  local log="$LOG_DIR/$name.log" start=$SECONDS rc=0
  mkdir -p "$LOG_DIR"
  printf '%-10s %s ... ' "$name" "$what" >&3
  "$@" >"$log" 2>&1 3>&- || rc=$?
  if [ "$rc" -eq 0 ]; then
    printf 'ok (%d s)\n' $((SECONDS - start)) >&3
    return 0
  fi
  if [ "$rc" -eq 130 ]; then
    printf 'interrupted\n' >&3  # Ctrl-C: the next run picks up from here
    return "$rc"
  fi
  printf 'FAILED (exit %d after %d s)\n' "$rc" $((SECONDS - start)) >&3
  {
    echo "---- last 40 lines of $log:"
    tail -n 40 "$log"
    echo "---- full log: $log"
  } >&3
  return "$rc"
}

# note NAME WHAT: a progress line for a step that had nothing to do.
note() {
  printf '%-10s %s\n' "$1" "$2" >&3
}

die() {
  echo "error: $*" >&3
  exit 1
}

# ---- Python environment ----------------------------------------------------------------------

venv_python() {
  echo "$VENV/bin/python"
}

create_venv() {
  # --clear: a venv left half-made (python3-venv missing, interrupted) is made again from scratch.
  if ! "$PYTHON" -m venv --clear "$VENV"; then
    rm -rf "$VENV"
    echo "'$PYTHON -m venv' failed. On Debian/Ubuntu install the venv module first:"
    echo "  apt-get install python3-venv     (or pass PYTHON=/path/to/python3 with venv and pip)"
    return 1
  fi
}

using_active_venv() {
  [ -n "${VIRTUAL_ENV:-}" ] && [ "$VENV" = "$VIRTUAL_ENV" ]
}

# ensure_venv: $VENV exists and its interpreter runs. .venv is made (again) when it is missing,
# has no pip (python3 -m venv failed halfway) or no longer runs (its base Python was removed or
# upgraded). The user's active venv is used as it is: it may have no pip (uv makes such venvs).
ensure_venv() {
  local py
  py=$(venv_python)
  if using_active_venv; then
    "$py" -c "" 2>/dev/null ||
      die "the active virtual environment $VIRTUAL_ENV has no working $py: fix it or deactivate it"
  elif ! { [ -x "$py" ] && "$py" -c "import pip" >/dev/null 2>&1; }; then
    command -v "$PYTHON" >/dev/null 2>&1 ||
      die "$PYTHON not found: install Python >= 3.9 or pass PYTHON=/path/to/python3"
    step venv "creating $VENV with $PYTHON" create_venv
    return
  fi
  note venv "$VENV ($("$py" --version 2>&1))"
}

# missing_python_deps: prints the lines of requirements-dev.txt (name==version) that the venv
# does not have at that version; nothing when all are there. Reads installed metadata only: no
# network, ~50 ms.
missing_python_deps() {
  "$(venv_python)" - requirements-dev.txt <<'EOF'
import importlib.metadata as metadata
import sys

for line in open(sys.argv[1]):
    requirement = line.split("#")[0].strip()
    if not requirement:
        continue
    name, _, version = requirement.partition("==")
    try:
        installed = metadata.version(name.strip())
    except metadata.PackageNotFoundError:
        installed = None
    if installed != version.strip():
        print(requirement)
EOF
}

ensure_python_deps() {
  local missing
  missing=$(missing_python_deps) || die "could not read the packages of $VENV"
  if [ -z "$missing" ]; then
    note deps "requirements-dev.txt: all installed"
    return 0
  fi
  "$(venv_python)" -c "import pip" >/dev/null 2>&1 ||
    die "$VENV lacks $(echo "$missing" | tr '\n' ' ')and has no pip: install requirements-dev.txt into it"
  step deps "pip install -r requirements-dev.txt into $VENV" \
    "$(venv_python)" -m pip install -r requirements-dev.txt
}

# ---- configure and build ---------------------------------------------------------------------

cmake_generator() {
  if command -v ninja >/dev/null 2>&1; then echo Ninja; else echo "Unix Makefiles"; fi
}

generator_file() {
  if [ "$(cmake_generator)" = Ninja ]; then echo build.ninja; else echo Makefile; fi
}

# configure_args: the configure flags, one per line. They are also what the stamp records, so
# anything that changes them (another venv, ARCHS, CMAKE_ARGS, nvcc appearing) reconfigures.
configure_args() {
  local py
  py="$(cd "$VENV" && pwd)/bin/python"
  printf '%s\n' -S "$PWD" -G "$(cmake_generator)" -DCMAKE_BUILD_TYPE=Release \
    "-DFLASHCORE_CUDA_ARCHS=$ARCHS" -DFLASHCORE_BUILD_PYTHON=ON \
    "-DPython_EXECUTABLE=$py" "-DPython3_EXECUTABLE=$py"
  # shellcheck disable=SC2086  # CMAKE_ARGS holds several flags
  [ -z "${CMAKE_ARGS:-}" ] || printf '%s\n' ${CMAKE_ARGS}
}

configure_stamp() {
  configure_args
  echo "nvcc: ${CUDACXX:-$(command -v nvcc || echo none)}"
}

# configure_reason: why $BUILD_DIR must be configured (again); nothing when it is ready to build.
configure_reason() {
  if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
    echo "new build tree"
  elif [ ! -f "$CONFIGURE_STAMP" ]; then
    echo "the last configure did not finish, or predates these scripts"
  elif [ "$(cat "$CONFIGURE_STAMP")" != "$(configure_stamp)" ]; then
    echo "options changed"
  elif [ ! -f "$BUILD_DIR/$(generator_file)" ]; then
    echo "$(generator_file) missing"
  fi
}

# run_configure: configures from scratch (cmake --fresh drops the old cache, so options cached by
# an earlier configure cannot linger). Object files stay: the build only redoes what changed.
run_configure() {
  local args=()
  mapfile -t args < <(configure_args)
  rm -f "$CONFIGURE_STAMP"
  cmake --fresh -B "$BUILD_DIR" "${args[@]}" || return
  configure_stamp >"$CONFIGURE_STAMP"
}

# configure_summary: what the configure asks for, for the progress line.
configure_summary() {
  local cuda="CUDA archs $ARCHS"
  if [[ " ${CMAKE_ARGS:-} " == *" -DFLASHCORE_ENABLE_CUDA=OFF "* ]]; then
    cuda="CUDA off (CMAKE_ARGS)"
  elif [ -z "${CUDACXX:-}" ] && ! command -v nvcc >/dev/null 2>&1; then
    cuda="no nvcc: CPU backends only"
  fi
  echo "$cuda, Python module ON"
}

# python_headers_present: Python.h of the venv's interpreter exists (the module needs it; Debian's
# own python3 has it only with python3-dev).
python_headers_present() {
  "$(venv_python)" -c 'import os, sys, sysconfig
sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))'
}

ensure_configured() {
  local reason
  python_headers_present ||
    die "Python.h of $(venv_python) not found: on Debian/Ubuntu, apt-get install python3-dev"
  reason=$(configure_reason)
  if [ -z "$reason" ]; then
    note configure "$BUILD_DIR is up to date ($(configure_summary))"
    return 0
  fi
  step configure "$BUILD_DIR: $(configure_summary) ($reason)" run_configure
}

# build [TARGET...]: builds the targets (default: all).
build() {
  local targets=()
  [ $# -eq 0 ] || targets=(--target "$@")
  step build "${*:-all targets}, $JOBS jobs (log: $LOG_DIR/build.log)" \
    cmake --build "$BUILD_DIR" -j "$JOBS" "${targets[@]}"
}

# prepare [TARGET...]: everything before running anything: venv, deps, configure, build.
prepare() {
  ensure_venv || return
  ensure_python_deps || return
  ensure_configured || return
  build "$@"
}

# ---- tests -----------------------------------------------------------------------------------

# ctest_counts LOG: "N passed, N failed, N skipped" from ctest's output. ctest counts a skipped
# test (exit 77: GPU tests without a GPU) among the passed ones, so skipped are taken out.
ctest_counts() {
  local total failed skipped
  total=$(sed -n 's/.* tests failed out of \([0-9]*\).*/\1/p' "$1" | tail -n 1)
  failed=$(sed -n 's/.* \([0-9]*\) tests failed out of .*/\1/p' "$1" | tail -n 1)
  skipped=$(grep -c '(Skipped)$' "$1" || true)
  [ -n "$total" ] || { echo "no ctest summary"; return; }
  echo "$((total - failed - skipped)) passed, $failed failed, $skipped skipped"
}

# pytest_counts LOG: "N passed, N failed, N skipped" from pytest's last line (errors count as
# failed, as they fail the run).
pytest_counts() {
  local last n word passed=0 failed=0 skipped=0
  last=$(grep -E '[0-9]+ (passed|failed|skipped|errors?|deselected)' "$1" | tail -n 1)
  [ -n "$last" ] || { echo "no pytest summary"; return; }
  while read -r n word; do
    case $word in
      passed) passed=$n ;;
      failed | error | errors) failed=$((failed + n)) ;;
      skipped) skipped=$n ;;
    esac
  done < <(grep -oE '[0-9]+ [a-z]+' <<<"$last")
  echo "$passed passed, $failed failed, $skipped skipped"
}

# run_pytest ARGS...: pytest on tests/python against the module built into $BUILD_DIR/python
# (python/CMakeLists.txt). Exit 5 (no test collected) is a failure: the module is always built.
run_pytest() {
  local rc=0
  PYTHONPATH="$(cd "$BUILD_DIR" && pwd)/python${PYTHONPATH:+:$PYTHONPATH}" \
    "$(venv_python)" -m pytest tests/python -q "$@" || rc=$?
  [ "$rc" -ne 5 ] || echo "pytest collected no test: tests/python should always have some"
  return "$rc"
}
