#!/usr/bin/env bash
# The main job (README): builds flashcore-bench if needed and runs it. With no arguments it runs
# the small default config on the best backend present (the CPU backend where there is no GPU),
# checks every result against the float64 reference and prints the table.
#
#   bash tools/bench.sh                         # default config
#   bash tools/bench.sh --seqlen 1024 --head-dim 128 --causal --backend cpu
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/common.sh

configure_and_build flashcore-bench >&2
exec "$BUILD_DIR/bench/flashcore-bench" "$@"
