// Seeded counter-based random numbers (Philox-4x32-10): value i of a draw depends only on
// (seed, offset + i), so results are identical across runs, thread counts and devices.
#pragma once
#include <cstdint>

#include "core/philox.h"  // philox(), uniform_at(), uniform_at_f64(), normal_at()

namespace seqgrad {

class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : seed_(seed) {}
  void manual_seed(uint64_t seed) {
    seed_ = seed;
    offset_ = 0;
  }
  uint64_t seed() const { return seed_; }
  uint64_t offset() const { return offset_; }
  void set_offset(uint64_t offset) { offset_ = offset; }
  // Reserves n counters and returns the first; callers generate values offset..offset+n-1.
  uint64_t reserve(uint64_t n) {
    uint64_t first = offset_;
    offset_ += n;  // at most one Philox call per element, so streams never overlap
    return first;
  }

 private:
  uint64_t seed_;
  uint64_t offset_ = 0;
};

Generator& default_generator();
void manual_seed(uint64_t seed);

}  // namespace seqgrad
