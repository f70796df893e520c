#!/usr/bin/env bash
# Installs what seqgrad needs on Debian 12 (only what is missing), then configures and builds.
# Usage: scripts/setup.sh [BUILD_DIR] [extra meson options...]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
shift || true

debian_packages=(g++ ccache meson ninja-build pkg-config libopenblas-dev libopenblas0-openmp libfmt-dev
                 doctest-dev nlohmann-json3-dev libcairo2-dev python3-torch python3-numpy python3-pip
                 libonnx-dev libprotobuf-dev libdnnl-dev)
debian_packages+=(libopenmpi-dev openmpi-bin)  # dist/: the MPI communicator and `mpirun -np N seqgrad train`
debian_packages+=(clang libclang-rt-14-dev libomp-14-dev)  # tests/fuzz: libFuzzer targets (clang, OpenMP)
debian_packages+=(libsentencepiece-dev)  # subword vocabularies: seqgrad train --vocab unigram:N | bpe:N
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
# Python packages the parity tests compare against (not packaged by Debian 12); onnxruntime and
# onnx check `seqgrad export`, sentencepiece reads a subword export's models (examples/onnx/
# translate.py). "numpy<2": Debian's torch 1.13 cannot exchange arrays with numpy 2,
# which the newest onnx would pull in (through ml_dtypes).
for mod in safetensors sacrebleu onnxruntime onnx sentencepiece; do
  /usr/bin/python3 -c "import $mod" 2>/dev/null ||
    /usr/bin/python3 -m pip install -q --break-system-packages "$mod" "numpy<2" >/dev/null
done
# ... and where an earlier install brought numpy 2 (torch.from_numpy then says "Numpy is not
# available"), go back to numpy 1.x and the ml_dtypes that supports it.
/usr/bin/python3 -c "import numpy, sys; sys.exit(int(numpy.__version__.split('.')[0]) >= 2)" ||
  /usr/bin/python3 -m pip install -q --break-system-packages "numpy<2" "ml_dtypes<0.6" >/dev/null

if [ ! -f "$build/build.ninja" ]; then
  meson setup "$build" --buildtype=release "$@" >/dev/null
fi
ninja -C "$build"
