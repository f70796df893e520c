// Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011) and the
// samplers built on it, as inline functions shared by the CPU (core/rng.cpp, ops/cpu) and the CUDA
// kernels (ops/cuda/random.cu): the same (seed, counter) gives the same words on both devices, so
// uniform values in [0, 1) and dropout masks are bit-identical. Normal values go through
// log/cos/sqrt, whose last bit may differ between the C library and CUDA's math library.
#pragma once
#include <cmath>
#include <cstdint>

#include "core/host_device.h"

namespace seqgrad {

struct Philox4 {
  uint32_t v[4];
};

// Four 32-bit random words for (seed, counter).
SG_HOST_DEVICE inline Philox4 philox(uint64_t seed, uint64_t counter) {
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

// Element i of a stream that starts at counter `first`: uniform in [0, 1) or standard normal.
SG_HOST_DEVICE inline float uniform_at(uint64_t seed, uint64_t first, uint64_t i) {
  uint32_t word = philox(seed, first + i / 4).v[i % 4];
  return static_cast<float>(word >> 8) * (1.0f / 16777216.0f);  // 24 bits
}

SG_HOST_DEVICE inline double uniform_at_f64(uint64_t seed, uint64_t first, uint64_t i) {
  Philox4 r = philox(seed, first + i / 2);
  uint64_t bits = (static_cast<uint64_t>(r.v[(i % 2) * 2]) << 32) | r.v[(i % 2) * 2 + 1];
  return static_cast<double>(bits >> 11) * (1.0 / 9007199254740992.0);  // 53 bits
}

// Element i in T's precision (float: 24 bits, double: 53 bits), as random_uniform draws it.
template <class T>
SG_HOST_DEVICE inline T uniform_at_as(uint64_t seed, uint64_t first, uint64_t i) {
  if constexpr (sizeof(T) == sizeof(float)) return static_cast<T>(uniform_at(seed, first, i));
  else return static_cast<T>(uniform_at_f64(seed, first, i));
}

// Dropout's factor for a uniform draw u: scale where u < keep (the element is kept), else 0.
template <class T>
SG_HOST_DEVICE inline T dropout_factor(T u, T keep, T scale) {
  return u < keep ? scale : T(0);
}

// Box-Muller on the pair of words of the same counter, so element i needs one Philox call.
SG_HOST_DEVICE inline double normal_at(uint64_t seed, uint64_t first, uint64_t i) {
  constexpr double kTwoPi = 6.283185307179586476925286766559;
  Philox4 r = philox(seed, first + i / 2);
  int j = static_cast<int>(i % 2) * 2;
  double u1 = (static_cast<double>(r.v[j]) + 1.0) * (1.0 / 4294967296.0);  // (0, 1]
  double u2 = static_cast<double>(r.v[j + 1]) * (1.0 / 4294967296.0);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(kTwoPi * u2);
}

}  // namespace seqgrad
