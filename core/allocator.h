// The CPU allocator behind every Storage: 64-byte aligned blocks, cached by size class for reuse.
// A training step frees and reallocates the same shapes every step; without the cache each large
// buffer is a fresh mmap (page faults, zeroing by the kernel) and a munmap on free.
#pragma once
#include <cstddef>

namespace seqgrad::cpu_memory {

// False in AddressSanitizer builds: there every block goes straight back to the system, so that
// use-after-free is still caught.
bool caching();

void* allocate(size_t bytes);              // never null (throws Error when out of memory)
void deallocate(void* p, size_t bytes);    // `bytes` as passed to allocate

struct Stats {
  size_t in_use = 0;        // bytes handed out (rounded to the size class)
  size_t cached = 0;        // bytes held for reuse (the shared cache and this thread's)
  size_t peak_in_use = 0;
};
Stats stats();
// Returns every cached block (the shared cache and this thread's) to the system.
void empty_cache();

}  // namespace seqgrad::cpu_memory
