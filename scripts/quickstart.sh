#!/usr/bin/env bash
# The main job: set up, build, train the default translator (Multi30k de->en, about ten minutes on
# two cores), print test BLEU and sample translations, and write attention heatmaps.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh build
build/tools/seqgrad info
build/tools/seqgrad train --preset default "$@"
build/tools/seqgrad translate --checkpoint runs/default/best.safetensors --heatmaps runs/default/heatmaps \
  "Ein Mann fährt Fahrrad auf einer Straße." "Zwei Hunde spielen im Schnee."
