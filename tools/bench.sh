#!/usr/bin/env bash
# The main job (README): builds flashcore-bench if needed and runs it. With no arguments it runs
# the small default config on the best backend present (the CPU backend where there is no GPU),
# checks every result against the float64 reference and prints the table.
#
#   bash tools/bench.sh                         # default config
#   bash tools/bench.sh --seqlen 1024 --head-dim 128 --causal --backend cpu
#
# Prepares the build tree exactly as tools/test.sh does (tools/common.sh: same venv and CMake
# options), so the two commands can run in either order. Progress lines go to stderr, full logs
# to build/logs/; stdout is the benchmark's own.
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/common.sh
exec 3>&2

prepare flashcore-bench
exec "$BUILD_DIR/bench/flashcore-bench" "$@"
