#!/usr/bin/env bash
# Ring attention (flashcore.distributed) on the GPUs of one host: builds the Python module, then
# runs examples/python/ring_attention_bench.py with torchrun on 2 GPUs (and on 4 when the host
# has them) at issue 27's sizes, keeps every log and JSON, and prints a table last.
#
#   bash tools/device/ring.sh                    # OUT=results/ring
#   SKIP_BUILD=1 OUT=/somewhere bash tools/device/ring.sh
#
# Runs (batch 1, 32/8 heads, d128, bf16 unless said; causal runs in the zigzag layout):
#   w2        2 GPUs: 32k, 64k and 128k tokens, causal and non-causal (the check, and the 64k
#             causal scaling target)
#   w2_dims   2 GPUs: 16k tokens, head_dim 64 and 256, fp16 and bf16, causal and non-causal
#             (the check at the other head dims and dtypes; short timings)
#   w4        4 GPUs: 32k and 128k, causal and non-causal (the 128k causal scaling target)
#   w4_512k   4 GPUs: 512k causal, fewer iterations (the single-GPU run on the whole sequence
#             takes seconds a call)
#   w4_margin, w2_margin  the 128k (4 GPUs) or 64k (2 GPUs) rows with FLASHCORE_SM_MARGIN=SM_MARGIN
#             (default 2): SMs FlashCore's persistent kernels leave to NCCL's, whose kernels are
#             capped at as many CTAs (--nccl-max-ctas; without the cap they take more SMs
#             than the margin and wait anyway: docs/distributed.md)
# NVLink multicast stays off on the shared machines: NCCL_NVLS_ENABLE=0 and
# TORCH_SYMM_MEM_DISABLE_MULTICAST=1 are exported for every launch (the bench sets them too).
#
# Environment: OUT, BUILD_DIR (default build-ring), ARCHS (default 90a), HEAD_DIMS and DTYPES
# (default: the project's, all of them), JOBS, PYTHON, SKIP_BUILD=1, SKIP_TESTS=1 (no
# pytest -m gpu of tests/python/test_distributed.py), RUNS (default
# "w2 w2_dims w4 w4_512k"; w4 runs are skipped with fewer than 4 GPUs),
# BENCH_ARGS (extra bench flags for every run), FLASHCORE_COMMIT (the tree has no .git there).
# Exit code: 0 when every run passed its checks.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2

export NCCL_NVLS_ENABLE=0
export TORCH_SYMM_MEM_DISABLE_MULTICAST=1
OUT=${OUT:-results/ring}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
BUILD_DIR=${BUILD_DIR:-build-ring}
ARCHS=${ARCHS:-90a}
HEAD_DIMS=${HEAD_DIMS:-"64;96;128;256"}
DTYPES=${DTYPES:-"fp16;bf16"}
JOBS=${JOBS:-$(nproc)}
PYTHON=${PYTHON:-python3}
RUNS=${RUNS:-w2 w2_dims w4 w4_512k}
BENCH=examples/python/ring_attention_bench.py
export FLASHCORE_COMMIT=${FLASHCORE_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
case $BUILD_DIR in /*) ;; *) BUILD_DIR=$PWD/$BUILD_DIR ;; esac
export PYTHONPATH="$BUILD_DIR/python${PYTHONPATH:+:$PYTHONPATH}"

STEPS=()
FAILED=0
step() {  # step NAME TIMEOUT_S CMD...: output in $OUT/NAME.log, status kept for the summary
  local name=$1 limit=$2 start=$SECONDS rc status
  shift 2
  echo "== $name (limit ${limit}s)"
  timeout --kill-after=10 "$limit" "$@" >"$OUT/$name.log" 2>&1
  rc=$?
  case $rc in
    0) status=pass ;;
    124 | 137) status="TIMEOUT after ${limit}s" ;;
    *) status="FAIL rc=$rc" ;;
  esac
  if [ "$status" != pass ]; then
    FAILED=1
    tail -n 25 "$OUT/$name.log" | sed 's/^/   /'
  fi
  STEPS+=("| $name | $status | $((SECONDS - start)) |")
}

gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
{
  echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC'), commit $FLASHCORE_COMMIT, $gpus GPUs"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
  nvidia-smi topo -m 2>/dev/null | head -n 6
  "$PYTHON" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, \
'nccl', '.'.join(map(str, torch.cuda.nccl.version())))" 2>&1
  env | grep -E '^(NCCL_NVLS_ENABLE|TORCH_SYMM_MEM_DISABLE_MULTICAST)='
} >"$OUT/environment.txt" 2>&1
cat "$OUT/environment.txt"

if [ -z "${SKIP_BUILD:-}" ]; then
  generator=()
  command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
  step configure 300 cmake -S . -B "$BUILD_DIR" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DFLASHCORE_CUDA_ARCHS="$ARCHS" -DFLASHCORE_HEAD_DIMS="$HEAD_DIMS" \
    -DFLASHCORE_DTYPES="$DTYPES" -DFLASHCORE_BUILD_TESTS=OFF -DFLASHCORE_BUILD_BENCH=OFF \
    -DFLASHCORE_BUILD_PYTHON=ON -DPython_EXECUTABLE="$(command -v "$PYTHON")"
  step build 480 cmake --build "$BUILD_DIR" -j "$JOBS"
fi

# The GPU tests of flashcore.distributed (NCCL on 2 GPUs, the merge on the GPU): a few seconds.
if [ -z "${SKIP_TESTS:-}" ] && "$PYTHON" -c "import pytest" >/dev/null 2>&1; then
  step pytest_ring 300 "$PYTHON" -m pytest -m gpu tests/python/test_distributed.py -q -rs
  tail -n 1 "$OUT/pytest_ring.log" | sed 's/^/  /'
fi

bench() {  # bench NAME GPUS TIMEOUT_S FLAGS...
  local name=$1 nproc=$2 limit=$3
  shift 3
  if [ "$gpus" -lt "$nproc" ]; then
    echo "== $name: skipped ($gpus GPUs, needs $nproc)"
    STEPS+=("| $name | skipped: $gpus GPUs | 0 |")
    return
  fi
  # shellcheck disable=SC2086  # BENCH_ARGS is a list of flags
  step "$name" "$limit" "$PYTHON" -m torch.distributed.run --standalone \
    --nproc-per-node="$nproc" "$BENCH" --json "$OUT/$name.json" "$@" ${BENCH_ARGS:-}
  grep -E '^(==|   )' "$OUT/$name.log" | sed 's/^/  /'
}

for run in $RUNS; do
  case $run in
    w2) bench w2 2 300 --seqlen 32768 65536 131072 --masks causal,full ;;
    w2_dims) bench w2_dims 2 180 --seqlen 16384 --head-dim 64 256 --dtype fp16 bf16 \
      --masks causal,full --warmup 1 --iters 3 --single-iters 2 ;;
    w4) bench w4 4 300 --seqlen 32768 131072 --masks causal,full ;;
    w4_512k) bench w4_512k 4 420 --seqlen 524288 --masks causal --warmup 1 --iters 3 \
      --single-iters 2 ;;
    # The 128k rows again with SM_MARGIN (default 2) SMs left free of FlashCore's persistent
    # CTAs (FLASHCORE_SM_MARGIN) for NCCL's kernels, capped at as many CTAs.
    w4_margin) FLASHCORE_SM_MARGIN=${SM_MARGIN:-2} bench w4_margin 4 300 --seqlen 131072 \
      --masks causal,full --nccl-max-ctas "${SM_MARGIN:-2}" ;;
    w2_margin) FLASHCORE_SM_MARGIN=${SM_MARGIN:-2} bench w2_margin 2 300 --seqlen 65536 \
      --masks causal,full --nccl-max-ctas "${SM_MARGIN:-2}" ;;
    *) echo "ring.sh: unknown run '$run' (w2, w2_dims, w4, w4_512k, w4_margin, w2_margin)" >&2
      exit 2 ;;
  esac
done

# --- summary (last: the reply shows the end of the output) ----------------------------------
jsons=("$OUT"/w*.json)
{
  echo
  echo "## ring.sh: commit $FLASHCORE_COMMIT," \
    "$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1) x $gpus"
  echo
  echo "| step | status | seconds |"
  echo "|---|---|---|"
  printf '%s\n' "${STEPS[@]}"
  echo
} >"$OUT/summary.md"
if [ -f "${jsons[0]}" ]; then
  "$PYTHON" "$BENCH" --summary "${jsons[@]}" >>"$OUT/summary.md" 2>&1 || FAILED=1
fi
cat "$OUT/summary.md"
exit "$FAILED"
