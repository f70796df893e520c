// CPU random fills and dropout from core/philox.h's counter-based streams (as ops/cuda/random.cu):
// element i of a draw is the same on both devices.
#include <algorithm>
#include <type_traits>

#include "core/backend_math.h"
#include "core/rng.h"
#include "ops/cpu/loop.h"

namespace seqgrad::cpu::SG_CPU_ISA {
namespace {

// Calls f(i, u) for i in [0, n) with u element i of the uniform [0, 1) stream at (seed, offset)
// in T's precision: the values of uniform_at / uniform_at_f64 (core/philox.h), but one Philox call
// per counter for its 4 float (2 double) values, and 16 counters at a time so the rounds vectorise.
// The block's values are laid out in stream order first, so the calls to f vectorise too (dropout's
// keep test as a select: as a branch, mispredicted on a fifth of the elements, it took most of the
// time).
template <class T, class F>
void for_each_uniform(int64_t n, uint64_t seed, uint64_t offset, F&& f) {
  constexpr int64_t kPerCounter = std::is_same_v<T, float> ? 4 : 2, kLanes = 16;
  constexpr int64_t kBlock = kPerCounter * kLanes;  // values per block of counters
  parallel_for(n, kGrain, [&](int64_t begin, int64_t end) {
    for (int64_t start = begin; start < end; start += kBlock) {  // begin is a multiple of kBlock
      const uint64_t c0 = offset + static_cast<uint64_t>(start / kPerCounter);
      uint32_t w[4][kLanes];
#pragma omp simd
      for (int64_t l = 0; l < kLanes; ++l) {
        Philox4 r = philox(seed, c0 + static_cast<uint64_t>(l));
        w[0][l] = r.v[0], w[1][l] = r.v[1], w[2][l] = r.v[2], w[3][l] = r.v[3];
      }
      T u[kBlock];  // u[k]: element start + k, the j-th value of counter l for k = l * kPerCounter + j
      for (int64_t l = 0; l < kLanes; ++l) {
        for (int64_t j = 0; j < kPerCounter; ++j) {
          if constexpr (std::is_same_v<T, float>) {
            u[l * kPerCounter + j] = static_cast<float>(w[j][l] >> 8) * (1.0f / 16777216.0f);  // 24 bits, as uniform_at
          } else {
            uint64_t bits = (static_cast<uint64_t>(w[2 * j][l]) << 32) | w[2 * j + 1][l];
            u[l * kPerCounter + j] = static_cast<double>(bits >> 11) * (1.0 / 9007199254740992.0);  // 53 bits
          }
        }
      }
      const int64_t count = std::min(kBlock, end - start);
#pragma omp simd
      for (int64_t k = 0; k < count; ++k) f(start + k, u[k]);
    }
  }, kBlock);
}

}  // namespace

void CpuBackend::random_uniform(const Tensor& out_in, double a, double b, uint64_t seed, uint64_t offset) {
  Tensor out = out_in.is_contiguous() ? out_in : Tensor::empty(out_in.shape(), {.dtype = out_in.dtype()});
  dispatch_floating(out.dtype(), "uniform_", [&]<class T>() {
    T* p = out.data<T>();
    for_each_uniform<T>(out.numel(), seed, offset,
                        [&](int64_t i, T u) { p[i] = static_cast<T>(a + (b - a) * static_cast<double>(u)); });
  });
  if (!out_in.is_contiguous()) copy(out, out_in);
}

void CpuBackend::random_normal(const Tensor& out_in, double mean, double stddev, uint64_t seed, uint64_t offset) {
  Tensor out = out_in.is_contiguous() ? out_in : Tensor::empty(out_in.shape(), {.dtype = out_in.dtype()});
  dispatch_floating(out.dtype(), "normal_", [&]<class T>() {
    T* p = out.data<T>();
    parallel_for(out.numel(), kGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) p[i] = static_cast<T>(mean + stddev * normal_at(seed, offset, i));
    });
  });
  if (!out_in.is_contiguous()) copy(out, out_in);
}

// The draw of random_uniform(out, 0, 1, seed, offset), compared and scaled in the same pass (the
// mask itself when x is undefined).
void CpuBackend::dropout(const Tensor& x, const Tensor& out, double keep, double scale, uint64_t seed,
                         uint64_t offset) {
  dispatch_floating(out.dtype(), "dropout", [&]<class T>() {
    T* p = out.data<T>();
    const T keep_t = static_cast<T>(keep), scale_t = static_cast<T>(scale);
    if (!x.defined()) {
      for_each_uniform<T>(out.numel(), seed, offset, [&](int64_t i, T u) { p[i] = dropout_factor(u, keep_t, scale_t); });
      return;
    }
    const T* px = x.data<T>();
    for_each_uniform<T>(out.numel(), seed, offset,
                        [&](int64_t i, T u) { p[i] = px[i] * dropout_factor(u, keep_t, scale_t); });
  });
}

}  // namespace seqgrad::cpu::SG_CPU_ISA
