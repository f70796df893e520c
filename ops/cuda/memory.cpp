// Device memory for CUDA tensors: a caching allocator over cudaMalloc, host/device copies and
// fills, registered with core (core/device_memory.h) at start-up.
//
// Freed blocks go back to a per-device pool instead of cudaFree (which synchronises the device), and
// a later request of a similar size reuses them. Reuse is safe without events because every kernel
// and copy runs on the device's default stream, in issue order: work queued before the free
// finishes before work queued after the reuse starts. When cudaMalloc fails, the pool is released
// and the request retried once; then it throws, naming the request and what seqgrad holds.
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "core/device_memory.h"
#include "core/error.h"
#include "ops/cuda/check.h"
#include "ops/cuda/cuda.h"
#include "ops/cuda/device_guard.h"
#include "ops/cuda/kernels.h"

namespace seqgrad::cuda {
namespace {

constexpr size_t kSmall = size_t{1} << 20;      // requests below 1 MiB round up to 512 bytes
constexpr size_t kLargeRound = size_t{2} << 20;  // larger ones to 2 MiB

size_t round_size(size_t n) {
  return n < kSmall ? (n + 511) / 512 * 512 : (n + kLargeRound - 1) / kLargeRound * kLargeRound;
}

std::string human(size_t bytes) {
  if (bytes >= (size_t{1} << 30)) return fmt::format("{:.2f} GiB", static_cast<double>(bytes) / (1 << 30));
  if (bytes >= (size_t{1} << 20)) return fmt::format("{:.1f} MiB", static_cast<double>(bytes) / (1 << 20));
  return fmt::format("{} bytes", bytes);
}

class CachingAllocator final : public DeviceMemory {
 public:
  const char* name() const override { return "cuda"; }

  int device_count() override {
    std::call_once(probe_once_, [this] {
      int n = 0;
      cudaError_t status = cudaGetDeviceCount(&n);
      if (status != cudaSuccess) {
        (void)cudaGetLastError();  // leave no sticky error behind
        reason_ = fmt::format("no usable CUDA device (cudaGetDeviceCount: {} ({}))", cudaGetErrorString(status),
                              cudaGetErrorName(status));
        n = 0;
      } else if (n == 0) {
        reason_ = "no CUDA device found (cudaGetDeviceCount returned 0)";
      }
      count_ = n;
      pools_.resize(n);
    });
    return count_;
  }

  const char* unavailable_reason() override {
    device_count();
    return reason_.c_str();
  }

  void* allocate(size_t nbytes, Device device) override {
    size_t size = round_size(nbytes);
    std::lock_guard lock(mutex_);
    Pool& pool = pools_.at(device.index);
    // best fit among cached blocks, accepting at most twice the rounded size
    auto it = pool.free.lower_bound(size);
    if (it != pool.free.end() && it->first <= 2 * size) {
      auto [block, ptr] = *it;
      pool.free.erase(it);
      pool.cached -= block;
      pool.in_use += block;
      pool.block_size[ptr] = block;
      return ptr;
    }
    DeviceGuard guard(device.index);
    void* ptr = nullptr;
    cudaError_t status = cudaMalloc(&ptr, size);
    if (status == cudaErrorMemoryAllocation) {  // give the cache back and try once more
      (void)cudaGetLastError();
      release_cached(pool);
      status = cudaMalloc(&ptr, size);
    }
    if (status == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      throw DeviceError(fmt::format(
          "cuda: out of memory allocating {} for a tensor on {} (seqgrad's tensors hold {} there; cudaMalloc: {})",
          human(nbytes), device, human(pool.in_use), cudaGetErrorString(status)));
    }
    if (status != cudaSuccess)
      throw_error("cuda", "cudaMalloc(&ptr, size)", cudaGetErrorString(status), cudaGetErrorName(status), __FILE__,
                  __LINE__);
    pool.in_use += size;
    pool.block_size[ptr] = size;
    return ptr;
  }

  void deallocate(void* ptr, size_t, Device device) noexcept override {
    std::lock_guard lock(mutex_);
    Pool& pool = pools_[device.index];
    auto it = pool.block_size.find(ptr);
    if (it == pool.block_size.end()) return;  // not ours (cannot happen through Storage)
    size_t block = it->second;
    pool.block_size.erase(it);
    pool.in_use -= block;
    pool.cached += block;
    pool.free.emplace(block, ptr);
  }

  void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes) override {
    if (nbytes == 0) return;
    DeviceGuard guard(dst_device.is_cuda() ? dst_device.index : src_device.index);
    SG_CUDA_CHECK(cudaMemcpy(dst, src, nbytes, cudaMemcpyDefault));  // unified addressing tells the direction
  }

  void fill(void* dst, Device device, const void* pattern, size_t element_size, size_t count) override {
    DeviceGuard guard(device.index);
    fill_pattern(dst, pattern, element_size, count);
  }

 private:
  struct Pool {
    std::multimap<size_t, void*> free;             // cached blocks by size
    std::unordered_map<void*, size_t> block_size;  // blocks handed out
    size_t in_use = 0, cached = 0;
  };

  void release_cached(Pool& pool) {
    for (auto& [block, ptr] : pool.free) SG_CUDA_CHECK(cudaFree(ptr));
    pool.free.clear();
    pool.cached = 0;
  }

  std::once_flag probe_once_;
  int count_ = 0;
  std::string reason_;
  std::mutex mutex_;
  std::vector<Pool> pools_;
};

}  // namespace

void register_memory() {
  static auto* memory = new CachingAllocator;  // never destroyed: tensors may outlive static destructors
  register_device_memory(Device::Kind::cuda, memory);
}

}  // namespace seqgrad::cuda
