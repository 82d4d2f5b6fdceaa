#!/usr/bin/env bash
# FlashCore's fp16 prefill against FlashAttention-3's fp16 (flash_attn3_jax: the fa3-fwd wheel has
# no fp16), kernel time under Nsight Compute: one process per (implementation, shape) running
# bench/prefill_anchor.py, each kernel's gpu__time_duration, the warm-up call left out. ncu locks
# the clocks to base for both, so read the ratio, not the absolute TFLOPS. bf16 rows also time the
# fa3-fwd wheel that compare.py uses (carry .anchors too), which calibrates the JAX build.
#
#   BUILD_DIR=build bash tools/device/prefill_jax.sh        (on the GPU machine; carry .anchors-jax)
#   CONFIGS="fp16 4096 128 causal;bf16 16384 128 full" ...  (dtype seqlen head_dim mask; default:
#                                                            fp16 at 4k and 16k, d64 / d128, both)
# Prints a markdown table; OUT (default results/prefill_jax) keeps every ncu CSV.
set -uo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${BUILD_DIR:-build}
OUT=${OUT:-results/prefill_jax}
SITE=${SITE:-/tmp/prefill_jax_site}
mkdir -p "$OUT" "$SITE"
wheel=$(ls .anchors-jax/*.whl 2>/dev/null | head -1)
if [ -z "$wheel" ]; then
  echo "prefill_jax.sh: no flash_attn3_jax wheel in .anchors-jax (../shared/anchors/fetch.sh" \
       ".anchors-jax fa3-jax, then carry it)" >&2
  exit 2
fi
[ -d "$SITE/flash_attn3_jax" ] ||
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$SITE" "$wheel" || exit 1
fa3_wheel=$(ls .anchors/fa3_fwd*.whl 2>/dev/null | head -1)
[ -z "$fa3_wheel" ] || [ -f "$SITE/fa3_fwd_interface.py" ] ||
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$SITE" "$fa3_wheel"
export PYTHONPATH="$BUILD_DIR/python:$SITE:${PYTHONPATH:-}"
CALLS=5  # timed calls a process makes after its warm-up (prefill_anchor.py --calls)
DEFAULT="fp16 4096 64 full;fp16 4096 64 causal;fp16 4096 128 full;fp16 4096 128 causal"
DEFAULT+=";fp16 16384 64 full;fp16 16384 64 causal;fp16 16384 128 full;fp16 16384 128 causal"

# kernel_us IMPL ARGS...: the attention kernel's median time (us) over the timed calls: the
# kernel that ran once per call (warm-up included) and took the most time.
kernel_us() {
  local impl=$1 log
  shift
  log="$OUT/ncu_${impl}_$(echo "$*" | tr ' -' '__').csv"
  ncu --csv --metrics gpu__time_duration.sum --target-processes all \
    python3 bench/prefill_anchor.py --impl "$impl" --calls "$CALLS" "$@" >"$log" 2>&1 ||
    { echo "nan"; return 1; }
  python3 tools/device/ncu_times.py "$log" --largest-of "$CALLS"
}

echo "| dtype | config | flashcore us | FA3 (JAX) us | flashcore / FA3 (JAX) speed |" \
     "FA3 (fa3-fwd wheel) us | flashcore / FA3 (wheel) speed | flashcore TFLOPS (ncu clocks) |"
echo "|---|---|---|---|---|---|---|---|"
IFS=';' read -ra configs <<<"${CONFIGS:-$DEFAULT}"
for config in "${configs[@]}"; do
  read -r dtype seqlen head_dim mask <<<"$config"
  args=(--dtype "$dtype" --seqlen "$seqlen" --head-dim "$head_dim")
  [ "$mask" = causal ] && args+=(--causal)
  fc=$(kernel_us flashcore "${args[@]}")
  fa3=$(kernel_us fa3-jax "${args[@]}")
  wheel_us=nan
  if [ "$dtype" = bf16 ] && [ -f "$SITE/fa3_fwd_interface.py" ]; then
    wheel_us=$(kernel_us fa3 "${args[@]}")
  fi
  python3 - "$dtype" "$seqlen" "$head_dim" "$mask" "$fc" "$fa3" "$wheel_us" <<'PY'
import sys
sys.path.insert(0, "bench")
from compare_grids import Config
from prefill_anchor import parse_args  # the shape the timed processes ran
dtype, seqlen, head_dim, mask, fc, fa3, wheel = sys.argv[1:]
fc, fa3, wheel = float(fc), float(fa3), float(wheel)
args = parse_args(["--impl", "flashcore", "--dtype", dtype, "--seqlen", seqlen,
                   "--head-dim", head_dim] + (["--causal"] if mask == "causal" else []))
flops = Config(args.batch, args.seqlen, args.seqlen, args.heads, args.heads, args.head_dim,
               dtype, args.causal).flops()
config = f"b{args.batch} s{seqlen} h{args.heads} d{head_dim} {mask}"
speed = lambda anchor: anchor / fc if fc > 0 else float("nan")  # nan stays nan
cell = lambda x, digits=1: "-" if x != x else f"{x:.{digits}f}"
print(f"| {dtype} | {config} | {cell(fc)} | {cell(fa3)} | {cell(speed(fa3), 3)} | {cell(wheel)} | "
      f"{cell(speed(wheel), 3)} | {cell(flops / fc / 1e6, 0)} |")
PY
done
