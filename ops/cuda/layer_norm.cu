// Layer normalisation on CUDA (the op and its math: ops/layer_norm.cpp): a block per row each way,
// the row's sums by block_sum; dweight and dbias one thread per column, summing the rows in order
// (no atomics: the same bits every run). The per-element arithmetic is core/fused_math.h's, shared
// with the CPU kernels (ops/cpu/layer_norm.cpp) and the emulation.
#include <cmath>

#include "core/fused_math.h"
#include "ops/cuda/launch.cuh"

namespace seqgrad::cuda {
namespace {

template <class T>
__global__ void layer_norm_kernel(const T* x, const T* w, const T* b, T eps, T* y, T* mean, T* rstd, int64_t N,
                                  int64_t D) {
  __shared__ T scratch[kRowThreads];
  const T inv_d = T(1) / static_cast<T>(D);
  for (int64_t r = blockIdx.x; r < N; r += gridDim.x) {
    const T* in = x + r * D;
    T s = 0;
    for (int64_t j = threadIdx.x; j < D; j += blockDim.x) s += in[j];
    const T mu = block_sum(s, scratch) * inv_d;
    T v = 0;  // centred: no cancellation when |μ| >> σ
    for (int64_t j = threadIdx.x; j < D; j += blockDim.x) v += (in[j] - mu) * (in[j] - mu);
    const T rs = T(1) / std::sqrt(block_sum(v, scratch) * inv_d + eps);
    for (int64_t j = threadIdx.x; j < D; j += blockDim.x)
      y[r * D + j] = math::layer_norm_value(in[j], mu, rs, w != nullptr ? w[j] : T(1), b != nullptr ? b[j] : T(0));
    if (threadIdx.x == 0) mean[r] = mu, rstd[r] = rs;
  }
}

template <class T>
__global__ void layer_norm_backward_kernel(const T* x, const T* w, const T* mean, const T* rstd, const T* dy, T* dx,
                                           int64_t N, int64_t D) {
  __shared__ T scratch[kRowThreads];
  const T inv_d = T(1) / static_cast<T>(D);
  for (int64_t r = blockIdx.x; r < N; r += gridDim.x) {
    const T* in = x + r * D;
    const T* g = dy + r * D;
    const T mu = mean[r], rs = rstd[r];
    T sg = 0, sgx = 0;  // Σ g and Σ g x̂ with g = dy w
    for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
      const T gj = w != nullptr ? g[j] * w[j] : g[j];
      sg += gj;
      sgx += gj * (in[j] - mu) * rs;
    }
    const T mean_g = block_sum(sg, scratch) * inv_d, mean_gx = block_sum(sgx, scratch) * inv_d;
    for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
      const T gj = w != nullptr ? g[j] * w[j] : g[j];
      dx[r * D + j] = math::layer_norm_grad(gj, (in[j] - mu) * rs, rs, mean_g, mean_gx);
    }
  }
}

// dweight_j = Σ_r dy_rj x̂_rj and dbias_j = Σ_r dy_rj (either may be null)
template <class T>
__global__ void layer_norm_params_kernel(const T* x, const T* mean, const T* rstd, const T* dy, T* dw, T* db,
                                         int64_t N, int64_t D) {
  SG_GRID_STRIDE_LOOP(j, D) {
    T sw = 0, sb = 0;
    for (int64_t r = 0; r < N; ++r) {
      const T g = dy[r * D + j];
      sw += g * (x[r * D + j] - mean[r]) * rstd[r];
      sb += g;
    }
    if (dw != nullptr) dw[j] = sw;
    if (db != nullptr) db[j] = sb;
  }
}

}  // namespace

void layer_norm_rows(ElemType type, const void* x, const void* weight, const void* bias, double eps, void* y,
                     void* mean, void* rstd, int64_t N, int64_t D) {
  if (N * D == 0) return;
  dispatch_floating(type, [&]<class T>() {
    layer_norm_kernel<T><<<row_blocks(N), kRowThreads>>>(
        static_cast<const T*>(x), static_cast<const T*>(weight), static_cast<const T*>(bias), static_cast<T>(eps),
        static_cast<T*>(y), static_cast<T*>(mean), static_cast<T*>(rstd), N, D);
  });
  SG_CUDA_CHECK_LAUNCH();
}

void layer_norm_rows_backward(ElemType type, const void* x, const void* weight, const void* mean, const void* rstd,
                              const void* dy, void* dx, void* dweight, void* dbias, int64_t N, int64_t D) {
  if (D == 0) return;
  dispatch_floating(type, [&]<class T>() {
    const T* xv = static_cast<const T*>(x);
    const T* m = static_cast<const T*>(mean);
    const T* rs = static_cast<const T*>(rstd);
    const T* g = static_cast<const T*>(dy);
    if (N > 0) {
      layer_norm_backward_kernel<T><<<row_blocks(N), kRowThreads>>>(xv, static_cast<const T*>(weight), m, rs, g,
                                                                     static_cast<T*>(dx), N, D);
      SG_CUDA_CHECK_LAUNCH();
    }
    if (dweight != nullptr || dbias != nullptr)
      layer_norm_params_kernel<T><<<blocks_for(D), kThreads>>>(xv, m, rs, g, static_cast<T*>(dweight),
                                                               static_cast<T*>(dbias), N, D);
  });
  SG_CUDA_CHECK_LAUNCH();
}

}  // namespace seqgrad::cuda
