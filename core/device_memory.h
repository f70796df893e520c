// Memory on devices other than the CPU. Core knows no device API: a backend built for a device
// kind (ops/cuda) registers a DeviceMemory for it, and Storage, the factories, item() and
// cross-device copies go through it. Without one, using that device throws a DeviceError.
#pragma once
#include <cstddef>
#include <string_view>

#include "core/device.h"

namespace seqgrad {

class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  virtual const char* name() const = 0;  // "cuda"
  // Devices present (0 when there is no device or no driver); never throws.
  virtual int device_count() = 0;
  // Why device_count() is 0, for error messages ("no CUDA driver: ...").
  virtual const char* unavailable_reason() = 0;
  // nbytes (> 0) on `device`; throws Error naming the request when the device cannot provide it.
  virtual void* allocate(size_t nbytes, Device device) = 0;
  virtual void deallocate(void* ptr, size_t nbytes, Device device) noexcept = 0;
  // Copies bytes between memories; either side may be the CPU. Ordered after all work queued on
  // the devices involved; returns once a destination on the CPU holds the data.
  virtual void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes) = 0;
  // Writes `count` copies of the element_size-byte pattern (1, 2, 4 or 8 bytes) at dst.
  virtual void fill(void* dst, Device device, const void* pattern, size_t element_size, size_t count) = 0;
};

// Registration (by the backend's own static initialiser); the object lives for the whole program.
void register_device_memory(Device::Kind kind, DeviceMemory* memory);
// The registered DeviceMemory of a kind, or nullptr when this build has none.
DeviceMemory* device_memory(Device::Kind kind);
// The DeviceMemory for `device`, after checking that the build has one and that the device exists;
// the DeviceError names `op` and the device: "to: cuda:1 is not available: 1 cuda device present".
DeviceMemory& device_memory_for(Device device, const char* op);

// "cpu", "cuda" (= cuda:0) or "cuda:N", as on command lines; anything else is a ValueError.
Device parse_device(std::string_view name);

// CUDA devices present: 0 in a build without the CUDA backend or on a machine without a GPU.
int cuda_device_count();
bool cuda_is_available();

}  // namespace seqgrad
