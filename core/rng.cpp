// Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011).
#include "core/rng.h"

#include <cmath>
#include <numbers>

namespace seqgrad {

Generator& default_generator() {
  static Generator g(0);
  return g;
}

void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

Philox4 philox(uint64_t seed, uint64_t counter) {
  constexpr uint32_t kM0 = 0xD2511F53, kM1 = 0xCD9E8D57, kW0 = 0x9E3779B9, kW1 = 0xBB67AE85;
  uint32_t c[4] = {static_cast<uint32_t>(counter), static_cast<uint32_t>(counter >> 32), 0, 0};
  uint32_t k[2] = {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = static_cast<uint64_t>(kM0) * c[0];
    uint64_t p1 = static_cast<uint64_t>(kM1) * c[2];
    uint32_t n[4] = {static_cast<uint32_t>(p1 >> 32) ^ c[1] ^ k[0], static_cast<uint32_t>(p1),
                     static_cast<uint32_t>(p0 >> 32) ^ c[3] ^ k[1], static_cast<uint32_t>(p0)};
    c[0] = n[0], c[1] = n[1], c[2] = n[2], c[3] = n[3];
    k[0] += kW0;
    k[1] += kW1;
  }
  return {{c[0], c[1], c[2], c[3]}};
}

namespace {
uint32_t word_at(uint64_t seed, uint64_t first, uint64_t i) {
  return philox(seed, first + i / 4).v[i % 4];
}
}  // namespace

float uniform_at(uint64_t seed, uint64_t first, uint64_t i) {
  return static_cast<float>(word_at(seed, first, i) >> 8) * (1.0f / 16777216.0f);  // 24 bits
}

double uniform_at_f64(uint64_t seed, uint64_t first, uint64_t i) {
  Philox4 r = philox(seed, first + i / 2);
  uint64_t bits = (static_cast<uint64_t>(r.v[(i % 2) * 2]) << 32) | r.v[(i % 2) * 2 + 1];
  return static_cast<double>(bits >> 11) * (1.0 / 9007199254740992.0);  // 53 bits
}

// Box-Muller on the pair of words of the same counter, so element i needs one Philox call.
double normal_at(uint64_t seed, uint64_t first, uint64_t i) {
  Philox4 r = philox(seed, first + i / 2);
  int j = static_cast<int>(i % 2) * 2;
  double u1 = (static_cast<double>(r.v[j]) + 1.0) * (1.0 / 4294967296.0);  // (0, 1]
  double u2 = static_cast<double>(r.v[j + 1]) * (1.0 / 4294967296.0);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

}  // namespace seqgrad
