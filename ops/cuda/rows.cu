// Row kernels over a contiguous (rows, cols) matrix, one block per row: softmax / log_softmax
// (max-subtraction, as ops/cpu), their backward, and top-k (k selection passes per row).
#include <cmath>

#include "core/backend_math.h"
#include "ops/cuda/launch.cuh"

namespace seqgrad::cuda {
namespace {

template <class T>
__global__ void softmax_kernel(const T* x, T* out, int64_t rows, int64_t cols, bool log) {
  __shared__ T scratch[kRowThreads];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* in = x + r * cols;
    T* o = out + r * cols;
    T mx = -INFINITY;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
      if (mx < in[j]) mx = in[j];
    mx = block_max(mx, scratch);
    if (mx == -INFINITY) mx = 0;  // all -inf: avoid inf - inf
    T sum = 0;
    if (log) {
      for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) sum += std::exp(in[j] - mx);
      T lse = mx + std::log(block_sum(sum, scratch));
      for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) o[j] = in[j] - lse;
    } else {
      for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) sum += (o[j] = std::exp(in[j] - mx));
      T inv = T(1) / block_sum(sum, scratch);
      for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) o[j] *= inv;
    }
  }
}

// softmax: dx = y * (dy - sum(dy * y));  log_softmax: dx = dy - exp(y) * sum(dy)
template <class T>
__global__ void softmax_backward_kernel(const T* y, const T* dy, T* dx, int64_t rows, int64_t cols, bool log) {
  __shared__ T scratch[kRowThreads];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* yr = y + r * cols;
    const T* g = dy + r * cols;
    T* o = dx + r * cols;
    T dot = 0;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) dot += log ? g[j] : g[j] * yr[j];
    dot = block_sum(dot, scratch);
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
      o[j] = log ? g[j] - std::exp(yr[j]) * dot : yr[j] * (g[j] - dot);
  }
}

// Order of top-k: value first (descending for largest), then the smaller index; NaN after every
// number (as ops/cpu).
template <class T>
__device__ inline bool ranks_before(bool largest, T v, int64_t i, T w, int64_t j) {
  const bool nan_v = v != v, nan_w = w != w;
  if (nan_v || nan_w) return nan_v != nan_w ? nan_w : i < j;
  if (v == w) return i < j;
  return largest ? v > w : v < w;
}

// k passes per row: pass p picks the best element ranked after pass p-1's pick.
template <class T>
__global__ void topk_kernel(const T* x, int64_t rows, int64_t cols, int64_t k, bool largest, T* values,
                            int64_t* indices) {
  __shared__ T best_value[kRowThreads];
  __shared__ int64_t best_index[kRowThreads];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* row = x + r * cols;
    T prev_value = T(0);
    int64_t prev_index = -1;  // none picked yet
    for (int64_t p = 0; p < k; ++p) {
      T bv = T(0);
      int64_t bi = -1;
      for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
        T v = row[j];
        if (prev_index >= 0 && !ranks_before(largest, prev_value, prev_index, v, j)) continue;
        if (bi < 0 || ranks_before(largest, v, j, bv, bi)) bv = v, bi = j;
      }
      best_value[threadIdx.x] = bv;
      best_index[threadIdx.x] = bi;
      __syncthreads();
      for (int step = blockDim.x / 2; step > 0; step /= 2) {
        if (threadIdx.x < step) {
          int64_t oi = best_index[threadIdx.x + step];
          T ov = best_value[threadIdx.x + step];
          if (oi >= 0 && (best_index[threadIdx.x] < 0 ||
                          ranks_before(largest, ov, oi, best_value[threadIdx.x], best_index[threadIdx.x]))) {
            best_value[threadIdx.x] = ov;
            best_index[threadIdx.x] = oi;
          }
        }
        __syncthreads();
      }
      prev_value = best_value[0];
      prev_index = best_index[0];
      if (threadIdx.x == 0) {
        values[r * k + p] = prev_value;
        indices[r * k + p] = prev_index;
      }
      __syncthreads();
    }
  }
}

}  // namespace

void softmax_rows(ElemType type, const void* x, void* out, int64_t rows, int64_t cols, bool log) {
  if (rows == 0 || cols == 0) return;
  dispatch_floating(type, [&]<class T>() {
    softmax_kernel<T><<<row_blocks(rows), kRowThreads>>>(static_cast<const T*>(x), static_cast<T*>(out), rows, cols,
                                                         log);
  });
  SG_CUDA_CHECK_LAUNCH();
}

void softmax_rows_backward(ElemType type, const void* y, const void* dy, void* dx, int64_t rows, int64_t cols,
                           bool log) {
  if (rows == 0 || cols == 0) return;
  dispatch_floating(type, [&]<class T>() {
    softmax_backward_kernel<T><<<row_blocks(rows), kRowThreads>>>(static_cast<const T*>(y), static_cast<const T*>(dy),
                                                                  static_cast<T*>(dx), rows, cols, log);
  });
  SG_CUDA_CHECK_LAUNCH();
}

void topk(ElemType type, const void* x, int64_t rows, int64_t cols, int64_t k, bool largest, void* values,
          int64_t* indices) {
  if (rows == 0 || k == 0) return;
  dispatch_numeric(type, [&]<class T>() {
    topk_kernel<T><<<row_blocks(rows), kRowThreads>>>(static_cast<const T*>(x), rows, cols, k, largest,
                                                      static_cast<T*>(values), indices);
  });
  SG_CUDA_CHECK_LAUNCH();
}

}  // namespace seqgrad::cuda
