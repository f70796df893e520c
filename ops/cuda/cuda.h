// The CUDA backend's entry points for the registration point (ops/backend_for.cpp). No CUDA
// headers here: this is all the rest of seqgrad sees of ops/cuda.
#pragma once
#include "core/backend.h"

namespace seqgrad::cuda {

// The CUDA backend (one object; each call runs on the device of the tensors it is given).
Backend& backend();
// Registers the caching device allocator (core/device_memory.h) for Device::Kind::cuda.
void register_memory();

}  // namespace seqgrad::cuda
