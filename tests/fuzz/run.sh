#!/usr/bin/env bash
# Runs every libFuzzer target (built by tests/fuzz/build.sh) for SECONDS each (default 60): first
# each regression input of $BUILD/fuzz-regressions/<target> once, whole (inputs of past crashes too
# large for the repository, written by make_regressions.py), then fuzzing from the seed corpus in
# tests/fuzz/seeds/<target> with the target's dictionary and -max_len. New inputs collect in
# $BUILD/fuzz-corpus/<target> (so a later run continues from them), crashes in
# $BUILD/fuzz-artifacts/. Exits 1 if a target crashed on a regression input or found a crash, a
# leak, a sanitizer report or a timeout.
#
#   tests/fuzz/run.sh            # 60 s per target (CI runs 30)
#   tests/fuzz/run.sh 3600       # an hour per target
#   TARGETS="checkpoint" tests/fuzz/run.sh 600 -jobs=2   # extra flags go to libFuzzer
set -uo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build-fuzz}
SECONDS_EACH=${1:-60}
shift || true
status=0
# the targets' scratch files (fuzz_common.h), removed however the run ends; in memory where there is
# a tmpfs: on ext4, closing a file that was truncated and rewritten flushes it (auto_da_alloc),
# which cost the file-reading targets a third of their time
scratch_parent=/dev/shm
[ -d "$scratch_parent" ] && [ -w "$scratch_parent" ] || scratch_parent=${TMPDIR:-/tmp}
export SEQGRAD_FUZZ_SCRATCH=$(mktemp -d -p "$scratch_parent" seqgrad_fuzz.XXXXXX)
trap 'rm -rf "$SEQGRAD_FUZZ_SCRATCH"' EXIT
# -max_len: set, not inferred from the largest seed; room for the biggest seed (the 26.5 KB tiny
# translator checkpoint, SentencePiece models of a few KB) and for growth, small enough that each
# execution stays cheap. Nesting deeper than the parsers' limits (64 levels) fits in any of them.
declare -A MAX_LEN=([safetensors]=16384 [checkpoint]=65536 [corpus]=8192 [tokenizer]=8192 [subword]=8192 [request]=8192)
declare -A DICT=([safetensors]=safetensors [checkpoint]=safetensors [corpus]=corpus [tokenizer]=json [subword]=json
                 [request]=request)
# The targets link seqgrad's sources statically, not libseqgrad.so, so the plugin is not beside
# their code: name the fuzz build's own (models/text/subword.cpp's search).
[ -f "$BUILD/models/libseqgrad_sentencepiece.so" ] &&
  export SEQGRAD_SENTENCEPIECE_PLUGIN=${SEQGRAD_SENTENCEPIECE_PLUGIN:-$(realpath "$BUILD/models/libseqgrad_sentencepiece.so")}
for target in ${TARGETS:-safetensors checkpoint corpus tokenizer subword request}; do
  exe=$BUILD/tests/fuzz/fuzz_$target
  if [ ! -x "$exe" ]; then
    echo "== fuzz_$target: not built (tests/fuzz/build.sh; the subword target needs SentencePiece)"
    continue
  fi
  corpus=$BUILD/fuzz-corpus/$target artifacts=$BUILD/fuzz-artifacts/$target/
  mkdir -p "$corpus" "$artifacts"
  regressions=("$BUILD/fuzz-regressions/$target"/*)
  if [ -e "${regressions[0]}" ]; then
    echo "== fuzz_$target: ${#regressions[@]} regression input(s)"
    if ! "$exe" -rss_limit_mb=2048 -timeout=30 "${regressions[@]}" > "$BUILD/fuzz-$target-regressions.log" 2>&1; then
      echo "fuzz_$target FAILED on a regression input (log: $BUILD/fuzz-$target-regressions.log)"
      tail -n 40 "$BUILD/fuzz-$target-regressions.log"
      status=1
    fi
  fi
  echo "== fuzz_$target: ${SECONDS_EACH} s"
  # -rss_limit_mb: the targets must never allocate what a small input does not hold.
  if ! "$exe" -max_total_time="$SECONDS_EACH" -rss_limit_mb=2048 -timeout=30 -max_len="${MAX_LEN[$target]}" \
      -dict="tests/fuzz/dicts/${DICT[$target]}.dict" -print_final_stats=1 -artifact_prefix="$artifacts" "$@" \
      "$corpus" "tests/fuzz/seeds/$target" 2> "$BUILD/fuzz-$target.log"; then
    echo "fuzz_$target FAILED (log: $BUILD/fuzz-$target.log, inputs: $artifacts)"
    tail -n 40 "$BUILD/fuzz-$target.log"
    status=1
  fi
  grep -E "^stat::number_of_executed_units|^stat::average_exec_per_sec|^stat::peak_rss_mb" "$BUILD/fuzz-$target.log" |
    tr '\n' ' '
  grep -E "^#[0-9]+.*(DONE|pulse)" "$BUILD/fuzz-$target.log" | tail -n 1
done
exit $status
