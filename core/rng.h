// Seeded counter-based random numbers (Philox-4x32-10): value i of a draw depends only on
// (seed, offset + i), so results are identical across runs, thread counts and devices.
#pragma once
#include <cstdint>

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

struct Philox4 {
  uint32_t v[4];
};
// Four 32-bit random words for (seed, counter).
Philox4 philox(uint64_t seed, uint64_t counter);

// Element i of a stream that starts at counter `first`: uniform in [0, 1) or standard normal.
float uniform_at(uint64_t seed, uint64_t first, uint64_t i);
double uniform_at_f64(uint64_t seed, uint64_t first, uint64_t i);
double normal_at(uint64_t seed, uint64_t first, uint64_t i);

}  // namespace seqgrad
