#!/usr/bin/env bash
# The main job: installs what the build needs, builds, trains a translator (the default preset:
# Multi30k de->en), prints its test scores and sample translations, translates two sentences with
# the trained model and writes their attention heatmaps, then the total time.
#
#   scripts/quickstart.sh [seqgrad train options...]     e.g. --preset tiny, --out runs/mine, --resume
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS

# The translate step uses the model this run trains: the user's --preset and --out, as train reads
# them (train's --out defaults to runs/<preset>).
preset="" out=""
args=("$@")
for ((i = 0; i < ${#args[@]}; ++i)); do
  case "${args[i]}" in
    --preset) preset="${args[i + 1]:-}" ;;
    --preset=*) preset="${args[i]#--preset=}" ;;
    --out) out="${args[i + 1]:-}" ;;
    --out=*) out="${args[i]#--out=}" ;;
  esac
done
train_args=("$@")
[ -n "$preset" ] || { preset=default; train_args=(--preset default "$@"); }
out=${out:-runs/$preset}

echo "quickstart: setup (packages, configure, build)"
scripts/setup.sh --program build
build/tools/seqgrad info
echo "quickstart: training (seqgrad train ${train_args[*]}) into $out"
build/tools/seqgrad train "${train_args[@]}"
# Two sentences in the model's source language: the d2l preset translates English to French, the
# others German to English.
sentences=("Ein Mann fährt Fahrrad auf einer Straße." "Zwei Hunde spielen im Schnee.")
[ "$preset" != d2l ] || sentences=("I am cold." "We are friends.")
echo "quickstart: translating with $out/best.safetensors"
build/tools/seqgrad translate --checkpoint "$out/best.safetensors" --out "$out/heatmaps" "${sentences[@]}"
elapsed=$((SECONDS - start))
printf 'quickstart: done in %d min %02d s; model %s, heatmaps %s/heatmaps\n' \
  $((elapsed / 60)) $((elapsed % 60)) "$out/best.safetensors" "$out"
