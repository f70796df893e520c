#!/usr/bin/env bash
# Runs every libFuzzer target (built by tests/fuzz/build.sh) for SECONDS each (default 60), starting
# from the seed corpus in tests/fuzz/seeds/<target>. New inputs collect in $BUILD/fuzz-corpus/<target>
# (so a later run continues from them), crashes in $BUILD/fuzz-artifacts/. Exits 1 if a target
# found a crash, a leak, a sanitizer report or a timeout.
#
#   tests/fuzz/run.sh            # 60 s per target (CI)
#   tests/fuzz/run.sh 3600       # an hour per target
#   TARGETS="checkpoint" tests/fuzz/run.sh 600 -jobs=2   # extra flags go to libFuzzer
set -uo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build-fuzz}
SECONDS_EACH=${1:-60}
shift || true
status=0
# the targets' scratch files (fuzz_common.h), removed however the run ends
export SEQGRAD_FUZZ_SCRATCH=$(mktemp -d -t seqgrad_fuzz.XXXXXX)
trap 'rm -rf "$SEQGRAD_FUZZ_SCRATCH"' EXIT
for target in ${TARGETS:-safetensors checkpoint corpus tokenizer}; do
  corpus=$BUILD/fuzz-corpus/$target artifacts=$BUILD/fuzz-artifacts/$target/
  mkdir -p "$corpus" "$artifacts"
  echo "== fuzz_$target: ${SECONDS_EACH} s"
  # -rss_limit_mb: the targets must never allocate what a small input does not hold.
  if ! "$BUILD/tests/fuzz/fuzz_$target" -max_total_time="$SECONDS_EACH" -rss_limit_mb=2048 -timeout=30 \
      -print_final_stats=1 -artifact_prefix="$artifacts" "$@" "$corpus" "tests/fuzz/seeds/$target" \
      2> "$BUILD/fuzz-$target.log"; then
    echo "fuzz_$target FAILED (log: $BUILD/fuzz-$target.log, inputs: $artifacts)"
    tail -n 40 "$BUILD/fuzz-$target.log"
    status=1
  fi
  grep -E "^stat::number_of_executed_units|^stat::peak_rss_mb" "$BUILD/fuzz-$target.log" | tr '\n' ' '
  echo
done
exit $status
