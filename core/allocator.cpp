// Size-class caching over aligned_alloc (see allocator.h).
#include "core/allocator.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "core/error.h"

namespace seqgrad::cpu_memory {
namespace {

// Size classes: multiples of 64 bytes up to 4 KiB, then four classes per power of two (at most
// 25% rounding), up to kMaxCached; larger blocks go straight to the system.
constexpr size_t kSmall = 4096;
constexpr size_t kMaxCached = size_t{1} << 31;
constexpr int kSmallClasses = kSmall / 64;
constexpr int kClasses = kSmallClasses + 4 * 20;
// Free blocks held at most; beyond this, freed blocks go back to the system.
constexpr size_t kCacheLimit = size_t{1} << 30;

struct SizeClass {
  int index;
  size_t bytes;
};

SizeClass size_class(size_t bytes) {
  bytes = std::max<size_t>(bytes, 1);
  if (bytes <= kSmall) {
    size_t rounded = (bytes + 63) / 64 * 64;
    return {static_cast<int>(rounded / 64) - 1, rounded};
  }
  int e = 63 - __builtin_clzll(bytes - 1);  // 2^e < bytes <= 2^(e+1)
  size_t step = size_t{1} << (e - 2);       // four classes between 2^e and 2^(e+1)
  size_t rounded = (bytes + step - 1) / step * step;
  int k = static_cast<int>(rounded / step) - 4;  // 1..4 (rounded in (2^e, 2^(e+1)])
  return {kSmallClasses + (e - 12) * 4 + (k - 1), rounded};
}

struct Cache {
  std::mutex mutex;
  std::vector<void*> free[kClasses];
  size_t cached = 0;
};

Cache& cache() {
  static Cache* c = new Cache;  // never destroyed: storages may be freed during static destruction
  return *c;
}

// Usage counters, outside the lock (relaxed atomics: a statistic, not a synchronisation).
std::atomic<size_t> in_use{0}, peak_in_use{0};

void count_allocation(size_t bytes) {
  size_t now = in_use.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  size_t peak = peak_in_use.load(std::memory_order_relaxed);
  while (now > peak && !peak_in_use.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

// Small blocks (up to 4 KiB: the tensors of per-op overhead, scalars, masks) first go through a
// per-thread cache without a lock; it holds at most kLocalLimit bytes and hands its blocks to the
// shared cache when the thread ends.
constexpr size_t kLocalLimit = size_t{1} << 20;

struct LocalCache {
  std::vector<void*> free[kSmallClasses];
  size_t bytes = 0;
  ~LocalCache() {
    Cache& c = cache();
    std::lock_guard<std::mutex> lock(c.mutex);
    for (int i = 0; i < kSmallClasses; ++i) {
      for (void* p : free[i]) c.free[i].push_back(p);
      c.cached += free[i].size() * 64 * static_cast<size_t>(i + 1);
    }
  }
};
thread_local LocalCache local;

void* system_allocate(size_t bytes) {
  void* p = std::aligned_alloc(64, bytes);
  SG_CHECK(p != nullptr, "out of memory allocating {} bytes ({:.3g} GiB) on the CPU", bytes,
           static_cast<double>(bytes) / (1 << 30));
  return p;
}

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kCaching = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kCaching = false;
#else
constexpr bool kCaching = true;
#endif
#else
constexpr bool kCaching = true;
#endif

}  // namespace

bool caching() { return kCaching; }

void* allocate(size_t bytes) {
  // More than a process can address (x86-64: 2^47 bytes) is refused before the system allocator
  // sees it: rounding up to 64 bytes would wrap a count near SIZE_MAX to a tiny block, and
  // sanitizer allocators abort on such requests instead of returning null.
  constexpr size_t kAddressable = size_t{1} << 47;
  SG_CHECK(bytes <= kAddressable, "out of memory allocating {} bytes on the CPU (more than the {} bytes a process can "
           "address)", bytes, kAddressable);
  if (!kCaching || bytes > kMaxCached) return system_allocate((bytes + 63) / 64 * 64);
  SizeClass sc = size_class(bytes);
  count_allocation(sc.bytes);
  if (sc.index < kSmallClasses) {
    std::vector<void*>& mine = local.free[sc.index];
    if (!mine.empty()) {
      void* p = mine.back();
      mine.pop_back();
      local.bytes -= sc.bytes;
      return p;
    }
  }
  Cache& c = cache();
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    std::vector<void*>& list = c.free[sc.index];
    if (!list.empty()) {
      void* p = list.back();
      list.pop_back();
      c.cached -= sc.bytes;
      return p;
    }
  }
  try {
    return system_allocate(sc.bytes);
  } catch (...) {
    empty_cache();  // one retry after giving the cache back
    try {
      return system_allocate(sc.bytes);
    } catch (...) {
      in_use.fetch_sub(sc.bytes, std::memory_order_relaxed);
      throw;
    }
  }
}

void deallocate(void* p, size_t bytes) {
  if (p == nullptr) return;
  if (!kCaching || bytes > kMaxCached) {
    std::free(p);
    return;
  }
  SizeClass sc = size_class(bytes);
  in_use.fetch_sub(sc.bytes, std::memory_order_relaxed);
  if (sc.index < kSmallClasses && local.bytes + sc.bytes <= kLocalLimit) {
    local.free[sc.index].push_back(p);
    local.bytes += sc.bytes;
    return;
  }
  Cache& c = cache();
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    if (c.cached + sc.bytes <= kCacheLimit) {
      c.free[sc.index].push_back(p);
      c.cached += sc.bytes;
      return;
    }
  }
  std::free(p);
}

Stats stats() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  return {.in_use = in_use.load(), .cached = c.cached + local.bytes, .peak_in_use = peak_in_use.load()};
}

void empty_cache() {
  Cache& c = cache();
  std::vector<void*> blocks;
  for (auto& list : local.free) {
    blocks.insert(blocks.end(), list.begin(), list.end());
    list.clear();
  }
  local.bytes = 0;
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    for (auto& list : c.free) {
      blocks.insert(blocks.end(), list.begin(), list.end());
      list.clear();
    }
    c.cached = 0;
  }
  for (void* p : blocks) std::free(p);
}

}  // namespace seqgrad::cpu_memory
