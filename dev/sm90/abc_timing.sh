#!/usr/bin/env bash
# One device call for two or more kernel builds at once: checks every build but the first against
# the float64 reference, then times the library default of each in processes of their own, the
# order reversed on the second pass (A B C, C B A) so drift in clocks or temperature favours none.
# BUILDS names the binaries .sm90bin/check_sm90_<name> ("new" is .sm90bin/check_sm90), the first
# the baseline; logs <name>_<pass>.log under $OUT, summarized by dev/sm90/summarize_ab.py.
#   BUILDS="old dead new" OUT=$OUT bash dev/sm90/abc_timing.sh
set -uo pipefail
out=${OUT:-/tmp/abc_timing}
mkdir -p "$out"
read -ra builds <<< "${BUILDS:-old new}"
binary() { [ "$1" = new ] && echo .sm90bin/check_sm90 || echo ".sm90bin/check_sm90_$1"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv \
  > "$out/gpu.txt" 2>&1
for name in "${builds[@]:1}"; do
  timeout "${CHECK_TIMEOUT:-150}" "$(binary "$name")" --no-timing --variants default \
    > "$out/check_$name.log" 2>&1
  echo "check $name rc=$? $(grep -c '^ok' "$out/check_$name.log") ok," \
    "$(grep -c '^FAIL' "$out/check_$name.log") FAIL"
done
reversed=()
for ((i = ${#builds[@]} - 1; i >= 0; i--)); do reversed+=("${builds[i]}"); done
for pass in a b; do
  order=("${builds[@]}")
  [ $pass = b ] && order=("${reversed[@]}")
  for name in "${order[@]}"; do
    # shellcheck disable=SC2086  # TIMING_ARGS is split into check_sm90's arguments on purpose
    timeout 90 "$(binary "$name")" --only-timing --variants default ${TIMING_ARGS:-} \
      > "$out/${name}_$pass.log" 2>&1
    echo "$name $pass rc=$?"
  done
done
python3 dev/sm90/summarize_ab.py "$out" "${builds[@]}" | tee "$out/summary.txt"
