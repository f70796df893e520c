#!/usr/bin/env bash
# Time per training step of a preset, one rank x 2 threads vs 2 ranks x 1 thread (docs/scaling.md):
#   bench/dist_scaling.sh [SEQGRAD] [PRESET] [STEPS]
# Each configuration trains STEPS/2 and then STEPS steps from scratch; the difference of the two
# wall times over STEPS/2 is the time per step without start-up (data, vocabulary, model).
set -euo pipefail
seqgrad=${1:-build/tools/seqgrad}
preset=${2:-default}
steps=${3:-20}
data=${SEQGRAD_DATA:-data}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

run() {  # ranks threads steps: prints the wall time in seconds
  local cmd=("$seqgrad" train --preset "$preset" --data-dir "$data" --out "$out/run" --force --threads "$2"
             --stop-after-steps "$3")  # not --quiet: the model and data-parallel lines are read below
  if [ "$1" -gt 1 ]; then cmd=(mpirun --allow-run-as-root --oversubscribe -np "$1" "${cmd[@]}"); fi
  local start end
  start=$(date +%s.%N)
  OMP_NUM_THREADS=$2 OMP_WAIT_POLICY=passive "${cmd[@]}" >"$out/log" 2>&1 || true  # a stop exits 130
  end=$(date +%s.%N)
  grep -E "^(model|data-parallel): " "$out/log" | sed "s/^/  /" >&2 || true
  python3 -c "print($end - $start)"
}

for config in "1 2" "2 1"; do
  set -- $config
  short=$(run "$1" "$2" $((steps / 2)))
  long=$(run "$1" "$2" "$steps")
  python3 -c "print(f'$preset: $1 rank(s) x $2 thread(s): {($long - $short) / ($steps - $steps // 2):.3f} s per step')"
done
