#!/usr/bin/env bash
# Runs tests/test_cuda_parity.cpp with ops/cuda/backend.cpp and memory.cpp on a host emulation of
# the CUDA runtime, cuBLAS and the kernels (fake_cuda.cpp): the host side of the CUDA backend,
# checked against the CPU backend on a machine without a GPU. Needs the CUDA headers (not a GPU).
# Its limits: the kernels are host ports written by hand, so the .cu files themselves are never
# compiled or run here; a bug in a .cu file that its port does not share goes unseen (only
# tests/test_cuda_parity.cpp on a GPU runs them). meson registers the same build as the unit test
# 'cuda_emulated' in every build without the CUDA backend that finds the headers (tests/meson.build),
# so CI runs it; this script builds it by hand against a given build directory.
# Usage: tests/cuda_emulation/run.sh [CPU_ONLY_BUILD_DIR]   (default build-nocuda, configured if missing)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build-nocuda}
shift || true
cuda_include=${CUDA_INCLUDE:-$(dirname "$(dirname "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")")/include}
[ -f "$cuda_include/cuda_runtime.h" ] || { echo "cuda_emulation: no CUDA headers at $cuda_include"; exit 77; }
if [ ! -f "$build/build.ninja" ]; then
  meson setup "$build" --buildtype=release -Dcuda=disabled >/dev/null
fi
ninja -C "$build" tools/libsg_tools.a libseqgrad.so >/dev/null
if ar t "$build/ops/libsg_ops.a" | grep -q -e cuda_backend -e "\.cu\.o"; then  # its libseqgrad.so would bring the real backend
  echo "cuda_emulation: $build has the CUDA backend; give a -Dcuda=disabled build directory"; exit 2
fi
out="$build/cuda_emulation"
mkdir -p "$out"
c++ -std=c++20 -O1 -fopenmp -I. -I"$cuda_include" $(pkg-config --cflags openblas) \
  tests/test_cuda_parity.cpp tests/cuda_emulation/backend_for.cpp tests/cuda_emulation/fake_cuda.cpp \
  ops/cuda/backend.cpp ops/cuda/memory.cpp -o "$out/test_cuda_emulated" \
  "$build/tools/libsg_tools.a" -L"$build" -lseqgrad -Wl,-rpath,"$(realpath "$build")" -lfmt
"$out/test_cuda_emulated" "$@"
