#!/usr/bin/env bash
# Sets up, builds and runs every test suite: unit (doctest, incl. gradchecks) and PyTorch parity.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh build -Dcuda=disabled   # CPU build; CI builds the CUDA configuration separately
meson test -C build --print-errorlogs --num-processes 2 "$@"
tests/install/check_install.sh build
