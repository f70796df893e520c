#!/usr/bin/env bash
# Installs the Debian 12 packages seqgrad needs (only the missing ones), then configures and builds.
#
#   scripts/setup.sh [--tests | --program] [BUILD_DIR] [meson options...]
#
# --program builds only the seqgrad program and the SentencePiece plugin it loads (what the quick
# start runs), not the unit suites, test plugins and examples.
# Without --tests: what building and the quick start need (compiler, meson, BLAS, fmt, JSON, cairo,
# SentencePiece, oneDNN, cpp-httplib). With --tests: also what the test suites need (PyTorch, ONNX, OpenMPI,
# clang for the fuzz targets, cmake for the install check) and the Python packages the parity
# tests compare against, which go into the project's virtual environment .venv (created with
# --system-site-packages, so Debian's python3-torch stays visible); the system Python is never
# changed. An existing BUILD_DIR (default build) is reconfigured with the options given.
set -euo pipefail
cd "$(dirname "$0")/.."
with_tests=0 program_only=0
case "${1:-}" in
  --tests) with_tests=1; shift ;;
  --program) program_only=1; shift ;;
esac
build=${1:-build}
shift || true
say() { echo "setup: $*"; }

packages=(g++ meson ninja-build pkg-config libopenblas-dev libopenblas0-pthread libfmt-dev
          nlohmann-json3-dev libcairo2-dev libsentencepiece-dev libdnnl-dev
          libcpp-httplib-dev  # seqgrad serve
          doctest-dev)  # the build compiles the unit suites too
if ((with_tests)); then
  packages+=(ccache cmake python3-venv python3-torch python3-numpy)
  packages+=(libopenblas0-openmp)                          # PyTorch's side of bench/run.sh
  packages+=(libonnx-dev libprotobuf-dev)                  # seqgrad export and the onnx suite
  packages+=(libopenmpi-dev openmpi-bin)                   # dist/ and the mpirun suites
  packages+=(clang libclang-rt-14-dev libomp-14-dev)       # tests/fuzz: libFuzzer targets
  packages+=(chromium chromium-driver python3-selenium)    # the serve explorer's browser test
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  say "installing Debian packages: ${missing[*]}"
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  say "Debian packages: all ${#packages[@]} present"
fi

if ((with_tests)); then
  # The parity tests' references, not packaged by Debian 12; onnxruntime and onnx check `seqgrad
  # export`, sentencepiece reads a subword export's models (examples/onnx/translate.py), ctranslate2
  # is the deployment engine bench/ct2_bench.py compares decoding with. The
  # constraint keeps Debian's numpy, the one python3-torch 1.13 is built against, instead of a
  # second numpy in .venv (torch 1.13 cannot exchange arrays with numpy 2).
  [ -x .venv/bin/python3 ] || { say "creating .venv (python3 -m venv --system-site-packages)";
                                /usr/bin/python3 -m venv --system-site-packages .venv; }
  python_missing=()
  for module in safetensors sacrebleu onnxruntime onnx sentencepiece ctranslate2; do
    .venv/bin/python3 -c "import $module" 2>/dev/null || python_missing+=("$module")
  done
  if ((${#python_missing[@]})); then
    say "installing into .venv: ${python_missing[*]}"
    constraints=.venv/constraints.txt
    /usr/bin/python3 -c 'import numpy; print("numpy==" + numpy.__version__)' > "$constraints"
    .venv/bin/python3 -m pip install --constraint "$constraints" "${python_missing[@]}"
  else
    say "Python packages in .venv: all present"
  fi
fi

if [ -f "$build/build.ninja" ]; then
  say "reconfiguring $build${*:+ with $*}"
  meson setup --reconfigure "$build" "$@"
else
  say "configuring $build${*:+ with $*}"
  meson setup "$build" --buildtype=release "$@"
fi
say "building $build"
if ((program_only)); then
  targets=(tools/seqgrad)
  plugin=models/libseqgrad_sentencepiece.so  # absent from a build without SentencePiece
  # the list first, then grep: under pipefail, grep -q leaving early could fail ninja with SIGPIPE
  all_targets=$(ninja -C "$build" -t targets all)
  grep -q "^$plugin:" <<< "$all_targets" && targets+=("$plugin")
  ninja -C "$build" "${targets[@]}"
else
  ninja -C "$build"
fi
