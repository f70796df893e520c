// The registry of device memories (one per device kind) and the checks that name the request.
#include "core/device_memory.h"

#include <charconv>
#include <string>

#include "core/error.h"

namespace seqgrad {
namespace {
DeviceMemory*& slot(Device::Kind kind) {
  static DeviceMemory* cuda = nullptr;  // the only non-CPU kind so far
  SG_CHECK_DEVICE(kind == Device::Kind::cuda, "device memory: the CPU has no registered device memory");
  return cuda;
}
}  // namespace

void register_device_memory(Device::Kind kind, DeviceMemory* memory) { slot(kind) = memory; }

DeviceMemory* device_memory(Device::Kind kind) { return kind == Device::Kind::cpu ? nullptr : slot(kind); }

DeviceMemory& device_memory_for(Device device, const char* op) {
  DeviceMemory* memory = device_memory(device.kind);
  SG_CHECK_DEVICE(memory != nullptr,
                  "{}: {} is not available: this seqgrad build has no CUDA backend (configure with -Dcuda=enabled "
                  "on a machine with the CUDA toolkit)", op, device);
  int count = memory->device_count();
  SG_CHECK_DEVICE(count > 0, "{}: {} is not available: {}", op, device, memory->unavailable_reason());
  SG_CHECK_DEVICE(device.index >= 0 && device.index < count, "{}: {} is not available: {} {} device{} present", op,
                  device, count, memory->name(), count == 1 ? "" : "s");
  return *memory;
}

Device parse_device(std::string_view name) {
  if (name == "cpu") return Device::cpu();
  if (name == "cuda") return Device::cuda(0);
  int index = -1;
  if (name.starts_with("cuda:") && name.size() > 5) {
    auto [end, error] = std::from_chars(name.data() + 5, name.data() + name.size(), index);
    if (error != std::errc() || end != name.data() + name.size()) index = -1;
  }
  SG_CHECK_VALUE(index >= 0 && index <= 127, "device: expected cpu, cuda or cuda:N, got '{}'", std::string(name));
  return Device::cuda(index);
}

int cuda_device_count() {
  DeviceMemory* memory = device_memory(Device::Kind::cuda);
  return memory ? memory->device_count() : 0;
}

bool cuda_is_available() { return cuda_device_count() > 0; }

}  // namespace seqgrad
