// Random fills and dropout from core/philox.h, the functions the CPU backend calls: element i of a draw is the
// same on both devices (uniform in [0, 1) bit for bit; normal up to the last bits of CUDA's
// log/cos). Compiled with --fmad=false, `a + (b - a) * u` rounds as on the CPU's baseline build.
#include "core/philox.h"
#include "ops/cuda/launch.cuh"

namespace seqgrad::cuda {
namespace {

template <class T>
__global__ void uniform_kernel(T* out, int64_t n, double a, double b, uint64_t seed, uint64_t offset) {
  SG_GRID_STRIDE_LOOP(i, n) {
    auto index = static_cast<uint64_t>(i);
    double u = std::is_same_v<T, float> ? static_cast<double>(uniform_at(seed, offset, index))
                                        : uniform_at_f64(seed, offset, index);
    out[i] = static_cast<T>(a + (b - a) * u);
  }
}

template <class T>
__global__ void normal_kernel(T* out, int64_t n, double mean, double stddev, uint64_t seed, uint64_t offset) {
  SG_GRID_STRIDE_LOOP(i, n) out[i] = static_cast<T>(mean + stddev * normal_at(seed, offset, static_cast<uint64_t>(i)));
}

template <class T>
__global__ void dropout_kernel(const T* x, T* out, int64_t n, T keep, T scale, uint64_t seed, uint64_t offset) {
  SG_GRID_STRIDE_LOOP(i, n) {
    const T factor = dropout_factor(uniform_at_as<T>(seed, offset, static_cast<uint64_t>(i)), keep, scale);
    out[i] = x ? x[i] * factor : factor;  // no x: the mask itself
  }
}

}  // namespace

void random_uniform(ElemType type, void* out, int64_t n, double a, double b, uint64_t seed, uint64_t offset) {
  if (n == 0) return;
  dispatch_floating(type, [&]<class T>() {
    uniform_kernel<T><<<blocks_for(n), kThreads>>>(static_cast<T*>(out), n, a, b, seed, offset);
  });
  SG_CUDA_CHECK_LAUNCH();
}

void random_normal(ElemType type, void* out, int64_t n, double mean, double stddev, uint64_t seed, uint64_t offset) {
  if (n == 0) return;
  dispatch_floating(type, [&]<class T>() {
    normal_kernel<T><<<blocks_for(n), kThreads>>>(static_cast<T*>(out), n, mean, stddev, seed, offset);
  });
  SG_CUDA_CHECK_LAUNCH();
}

void dropout(ElemType type, const void* x, void* out, int64_t n, double keep, double scale, uint64_t seed,
             uint64_t offset) {
  if (n == 0) return;
  dispatch_floating(type, [&]<class T>() {
    dropout_kernel<T><<<blocks_for(n), kThreads>>>(static_cast<const T*>(x), static_cast<T*>(out), n,
                                                   static_cast<T>(keep), static_cast<T>(scale), seed, offset);
  });
  SG_CUDA_CHECK_LAUNCH();
}

}  // namespace seqgrad::cuda
