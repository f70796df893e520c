// The registration point of the emulated build: CPU tensors on the CPU backend, CUDA tensors on
// ops/cuda/backend.cpp (running on fake_cuda.cpp). Replaces ops/backend_for.cpp by interposition
// (the CPU-only libseqgrad.so defines backend_for too; the executable's definition wins).
#include "core/backend.h"
#include "ops/cpu/kernels.h"
#include "ops/cuda/cuda.h"

namespace seqgrad {
namespace {
const bool cuda_memory_registered = (cuda::register_memory(), true);
}  // namespace

Backend& backend_for(Device device) { return device.is_cpu() ? cpu::backend() : cuda::backend(); }

}  // namespace seqgrad
