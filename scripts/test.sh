#!/usr/bin/env bash
# Installs what the tests need (scripts/setup.sh --tests: the build's packages, PyTorch, ONNX,
# OpenMPI, clang, cmake, and the Python references in .venv), builds, runs every test suite, then
# installs into a private prefix and builds programs against it (tests/install/check_install.sh).
#
#   scripts/test.sh [meson test options...]      e.g. --suite unit, --suite tools_cli
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --tests build -Dcuda=disabled   # CPU build; CI builds the CUDA configuration separately
echo "test: meson test"
meson test -C build --print-errorlogs --num-processes 2 "$@"
echo "test: the examples, built in the tree (ninja -C build examples)"
ninja -C build examples
echo "test: install check (pkg-config and CMake consumers)"
tests/install/check_install.sh build
