// The single backend-registration point: which Backend serves a device. Only this file (and
// ops/cuda/) sees SG_CUDA, which meson defines for it when the CUDA backend is built.
#include "core/backend.h"
#include "core/device_memory.h"
#include "ops/cpu/kernels.h"
#ifdef SG_CUDA
#include "ops/cuda/cuda.h"
#endif

namespace seqgrad {

#ifdef SG_CUDA
namespace {
// CUDA memory joins core's registry at start-up, before any tensor can be allocated.
const bool cuda_memory_registered = (cuda::register_memory(), true);
}  // namespace
#endif

Backend& backend_for(Device device) {
  if (device.is_cpu()) return cpu::backend();
#ifdef SG_CUDA
  return cuda::backend();  // tensors on a device exist only when device_memory_for() let them
#else
  throw DeviceError(fmt::format("{} is not available: this seqgrad build has no CUDA backend (configure with "
                                "-Dcuda=enabled on a machine with the CUDA toolkit)", device));
#endif
}

}  // namespace seqgrad
