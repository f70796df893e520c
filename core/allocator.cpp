// Size-class caching over aligned_alloc (see allocator.h).
#include "core/allocator.h"

#include <algorithm>
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
  Stats stats;
};

Cache& cache() {
  static Cache* c = new Cache;  // never destroyed: storages may be freed during static destruction
  return *c;
}

void* system_allocate(size_t bytes) {
  void* p = std::aligned_alloc(64, bytes);
  SG_CHECK(p != nullptr, "storage: out of memory allocating {} bytes", bytes);
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
  if (!kCaching || bytes > kMaxCached) return system_allocate((bytes + 63) / 64 * 64);
  SizeClass sc = size_class(bytes);
  Cache& c = cache();
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    c.stats.in_use += sc.bytes;
    c.stats.peak_in_use = std::max(c.stats.peak_in_use, c.stats.in_use);
    std::vector<void*>& list = c.free[sc.index];
    if (!list.empty()) {
      void* p = list.back();
      list.pop_back();
      c.stats.cached -= sc.bytes;
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
      std::lock_guard<std::mutex> lock(c.mutex);
      c.stats.in_use -= sc.bytes;
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
  Cache& c = cache();
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    c.stats.in_use -= sc.bytes;
    if (c.stats.cached + sc.bytes <= kCacheLimit) {
      c.free[sc.index].push_back(p);
      c.stats.cached += sc.bytes;
      return;
    }
  }
  std::free(p);
}

Stats stats() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  return c.stats;
}

void empty_cache() {
  Cache& c = cache();
  std::vector<void*> blocks;
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    for (auto& list : c.free) {
      blocks.insert(blocks.end(), list.begin(), list.end());
      list.clear();
    }
    c.stats.cached = 0;
  }
  for (void* p : blocks) std::free(p);
}

}  // namespace seqgrad::cpu_memory
