#!/usr/bin/env bash
# Installs what seqgrad needs on Debian 12 (only what is missing), then configures and builds.
# Usage: scripts/setup.sh [BUILD_DIR] [extra meson options...]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
shift || true

debian_packages=(g++ meson ninja-build pkg-config libopenblas-dev libopenblas0-openmp libfmt-dev
                 doctest-dev nlohmann-json3-dev libcairo2-dev python3-torch python3-numpy python3-pip)
debian_packages+=(clang libclang-rt-14-dev libomp-14-dev)  # tests/fuzz: libFuzzer targets (clang, OpenMP)
missing=()
for p in "${debian_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# Python packages the parity tests compare against (not packaged by Debian 12).
for mod in safetensors sacrebleu; do
  /usr/bin/python3 -c "import $mod" 2>/dev/null ||
    /usr/bin/python3 -m pip install -q --break-system-packages "$mod" >/dev/null
done

if [ ! -f "$build/build.ninja" ]; then
  meson setup "$build" --buildtype=release "$@" >/dev/null
fi
ninja -C "$build"
